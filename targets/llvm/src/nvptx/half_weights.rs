//! 16-bit copies of f32 weights for the tensor cores (`--precision bf16|fp16`): a matmul tile that
//! stages an operand read straight from the weights (`vec_tile.rs`: a Linear weight, contiguous along
//! K) reads a bf16 / fp16 copy of it instead of converting f32 values as it stages them — half the
//! bytes from L2 per staged slice, no conversion instructions. The copies are made here at compile
//! time, rounded to nearest even as `cvt.rn.bf16x2.f32` / `cvt.rn.f16x2.f32` round, so the kernel's
//! arithmetic is the same bit for bit; they are appended to the weights blob (each 16-byte aligned,
//! after the LIR's constants, which keep their offsets) and listed in the manifest (`half_weights`).
//! tf32 and f32 keep reading f32. `RLX_CUDA_HALF_WEIGHTS=0` at compile time: no copies (the tiles
//! convert as before).

use super::Mma;
use rlx_ir::lir::{Base, Lir};
use rlx_ir::DType;
use std::collections::BTreeMap;

/// One copy: LIR buffer `buffer` (f32 at byte `src` of the weights, `elems` values) as `dtype` at byte
/// `dst` of the weights.
#[derive(Clone, Debug, PartialEq)]
pub struct HalfCopy {
    pub buffer: u32,
    pub src: u64,
    pub elems: u64,
    pub dst: u64,
    pub dtype: DType,
}

/// The copies a module's kernels asked for, in the order first asked, and their bytes.
pub struct HalfWeights<'l> {
    lir: &'l Lir,
    dtype: DType,
    /// The weights blob's length with the copies made so far.
    end: usize,
    at: BTreeMap<u32, u64>,
    pub copies: Vec<HalfCopy>,
    pub bytes: Vec<u8>,
}

impl<'l> HalfWeights<'l> {
    /// `None` unless `mma` takes 16-bit operands and `RLX_CUDA_HALF_WEIGHTS` is not `0`.
    pub fn new(lir: &'l Lir, mma: Mma) -> Option<Self> {
        let dtype = match mma {
            Mma::Bf16 => DType::BF16,
            Mma::Fp16 => DType::F16,
            Mma::F32 | Mma::Tf32 | Mma::Tf32x3 => return None,
        };
        if std::env::var("RLX_CUDA_HALF_WEIGHTS").is_ok_and(|v| v == "0") {
            return None;
        }
        Some(HalfWeights { lir, dtype, end: lir.weights.len(), at: BTreeMap::new(), copies: Vec::new(), bytes: Vec::new() })
    }

    /// The byte offset in the weights of LIR buffer `b`'s 16-bit copy, made on first request; `None`
    /// when `b` is not an f32 buffer of the weights.
    pub fn copy_of(&mut self, b: u32) -> Option<u64> {
        if let Some(&o) = self.at.get(&b) {
            return Some(o);
        }
        let buf = self.lir.buffers.get(b as usize)?;
        if buf.base != Base::Weights || buf.dtype != DType::F32 {
            return None;
        }
        let src = self.lir.weights.get(buf.offset..buf.offset + buf.bytes())?;
        let dst = self.end.next_multiple_of(16);
        self.bytes.resize(self.bytes.len() + dst - self.end, 0);
        for c in src.chunks_exact(4) {
            let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let h = if self.dtype == DType::BF16 { half::bf16::from_f32(x).to_bits() } else { half::f16::from_f32(x).to_bits() };
            self.bytes.extend_from_slice(&h.to_le_bytes());
        }
        self.end = dst + src.len() / 2;
        self.at.insert(b, dst as u64);
        self.copies.push(HalfCopy { buffer: b, src: buf.offset as u64, elems: (src.len() / 4) as u64, dst: dst as u64, dtype: self.dtype });
        Some(dst as u64)
    }
}

/// One kernel's view: its parameters' LIR buffers (`bindings`), the weights' binding (`wbind`: the
/// kernel's base pointer `%g{wbind}`), per parameter where it lies when it is itself 16-bit (`own`:
/// its base's binding and byte offset — an activation `half_activations.rs` stored so), and the
/// parameters whose f32 values are already tf32-rounded (`tf32`: `--precision tf32`'s activations
/// and weights, `half_activations.rs`), which the kernel stores rounded and stages unconverted; and each
/// parameter's base (`bases`).
pub struct Halves<'h, 'l> {
    pub weights: Option<&'h mut HalfWeights<'l>>,
    pub bindings: &'h [u32],
    pub wbind: usize,
    pub own: &'h [Option<(usize, u64)>],
    pub tf32: &'h [u32],
    /// Each parameter's base (its binding: `%g{base}`).
    pub bases: &'h [usize],
}

impl Halves<'_, '_> {
    /// Whether `body` loads a parameter outside the weights (memory a kernel may also write: the
    /// arena's values, the inputs), whose loads LLVM may not move past a store.
    pub fn loads_writable(&self, body: &[rlx_ir::loops::Stmt]) -> bool {
        let mut loads = std::collections::BTreeSet::new();
        rlx_ir::loops::grid::collect(body, &mut Default::default(), &mut Default::default(), &mut Vec::new(), &mut loads);
        loads.iter().any(|&p| self.bases.get(p as usize).is_none_or(|&b| b != self.wbind))
    }

    /// Parameter `pi`'s 16-bit values: (the binding, the byte offset there) — the parameter itself
    /// when it is 16-bit, else its weight's copy —, or `None`.
    pub fn of_param(&mut self, pi: u32) -> Option<(usize, u64)> {
        if let Some(&Some(o)) = self.own.get(pi as usize) {
            return Some(o);
        }
        let b = *self.bindings.get(pi as usize)?;
        let o = self.weights.as_mut()?.copy_of(b)?;
        Some((self.wbind, o))
    }
}
