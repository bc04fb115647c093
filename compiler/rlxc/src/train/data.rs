//! Training data for `rlxc train --data DIR`: `.npy` pairs in a folder — `train_x.npy` (samples,
//! [N, …the model input's shape after the batch axis]) and `train_y.npy` (targets: integer class
//! labels [N] for cross-entropy, [N, …the output's shape after the batch axis] for mse), and
//! optionally `test_x.npy` / `test_y.npy`, evaluated after every epoch. Values of another numeric
//! dtype than the step's port are converted (uint8 labels, float64 images); every mismatch is a
//! usage error naming the file.

use crate::cli::Failure;
use rlx_ir::{ConstData, DType, TensorType};
use std::path::Path;

/// Samples and targets, row-aligned and converted to the step's dtypes.
pub struct Split {
    pub x: ConstData,
    pub y: ConstData,
}

impl Split {
    pub fn len(&self) -> usize {
        self.x.shape[0]
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of samples `from..from + n` and of their targets.
    pub fn rows(&self, from: usize, n: usize) -> (&[u8], &[u8]) {
        (cut(&self.x, from, n), cut(&self.y, from, n))
    }
}

fn cut(c: &ConstData, from: usize, n: usize) -> &[u8] {
    let per = c.data.len() / c.shape[0];
    &c.data.bytes()[from * per..(from + n) * per]
}

pub struct Dataset {
    pub train: Split,
    pub test: Option<Split>,
}

/// Loads `DIR/train_{x,y}.npy` (and `test_{x,y}.npy` when both exist) for a step whose data ports
/// are `x` (one batch of samples) and `y` (one batch of targets); `classes`: labels must lie in
/// `0..classes` (cross-entropy).
pub fn load(dir: &Path, x: &TensorType, y: &TensorType, classes: Option<usize>) -> Result<Dataset, Failure> {
    if !dir.is_dir() {
        return Err(Failure::usage(format!("--data {}: not a folder (it holds train_x.npy, train_y.npy and optionally test_x.npy, test_y.npy)", dir.display())));
    }
    let train = split(dir, "train", x, y, classes)?.ok_or_else(|| Failure::usage(format!("--data {}: train_x.npy and train_y.npy are missing", dir.display())))?;
    let test = split(dir, "test", x, y, classes)?;
    Ok(Dataset { train, test })
}

fn split(dir: &Path, stem: &str, x: &TensorType, y: &TensorType, classes: Option<usize>) -> Result<Option<Split>, Failure> {
    let (xp, yp) = (dir.join(format!("{stem}_x.npy")), dir.join(format!("{stem}_y.npy")));
    match (xp.exists(), yp.exists()) {
        (false, false) => return Ok(None),
        (true, false) | (false, true) => {
            return Err(Failure::usage(format!("--data {}: {stem}_x.npy and {stem}_y.npy come as a pair; one is missing", dir.display())));
        }
        _ => {}
    }
    let xs = array(&xp, x)?;
    let ys = array(&yp, y)?;
    if xs.shape[0] != ys.shape[0] {
        return Err(Failure::usage(format!("--data: {} has {} samples but {} has {}", xp.display(), xs.shape[0], yp.display(), ys.shape[0])));
    }
    if let Some(c) = classes {
        if let Some((i, l)) = ys.to_i64_vec().iter().enumerate().find(|(_, &l)| l < 0 || l as usize >= c) {
            return Err(Failure::usage(format!("--data: {} row {i} is label {l}, outside the model's {c} classes", yp.display())));
        }
    }
    Ok(Some(Split { x: xs, y: ys }))
}

/// The array at `p`, shaped [N, …the port's shape after its batch axis], in the port's dtype.
fn array(p: &Path, port: &TensorType) -> Result<ConstData, Failure> {
    let c = crate::npy::read(p).map_err(|e| Failure::usage(format!("--data: {e}")))?;
    let want = port.shape.as_fixed().unwrap_or_default();
    let per = want.get(1..).unwrap_or_default();
    if c.shape.is_empty() || c.shape[1..] != *per {
        return Err(Failure::usage(format!(
            "--data: {} has shape {:?}; the model takes {:?} per batch, so expected [N{}]",
            p.display(),
            c.shape,
            want,
            per.iter().map(|d| format!(", {d}")).collect::<String>()
        )));
    }
    if c.dtype == port.dtype {
        return Ok(c);
    }
    let numeric = |d: DType| d.is_float() || d.is_int();
    if !numeric(c.dtype) || (port.dtype.is_int() && c.dtype.is_float()) {
        return Err(Failure::usage(format!("--data: {} holds {} values; the model takes {}", p.display(), c.dtype.name(), port.dtype.name())));
    }
    Ok(ConstData::from_f64s(port.dtype, c.shape.clone(), &c.to_f64_vec()))
}
