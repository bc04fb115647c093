//! Target claim sets. A target hands the legalizer its `TargetCaps` as data: which MIR op kinds it
//! implements natively, for which dtypes. The optimizer never names a target.

use crate::DType;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub struct TargetCaps {
    /// Target name as given to `--target`.
    pub name: String,
    /// Op kind (text-form name, e.g. `matmul`) → dtypes the target implements natively.
    pub native: BTreeMap<&'static str, Vec<DType>>,
}

impl TargetCaps {
    /// A claim set in which every listed op kind is implemented for every listed dtype.
    pub fn uniform(name: &str, kinds: &[&'static str], dtypes: &[DType]) -> TargetCaps {
        TargetCaps { name: name.to_string(), native: kinds.iter().map(|&k| (k, dtypes.to_vec())).collect() }
    }

    /// Adds claims for `kind` on more dtypes (e.g. `cast` to storage-only types).
    pub fn with(mut self, kind: &'static str, dtypes: &[DType]) -> TargetCaps {
        let d = self.native.entry(kind).or_default();
        for &t in dtypes {
            if !d.contains(&t) {
                d.push(t);
            }
        }
        self
    }

    pub fn claims(&self, kind: &str, dtype: DType) -> bool {
        self.native.get(kind).is_some_and(|d| d.contains(&dtype))
    }
}
