//! Cutting constants into rank parts, by bytes: a range along one axis of a plain tensor, and a byte
//! range of every row of a 2-D block-quantized weight (GGUF blocks along its columns).

use rlx_ir::{Blob, ConstData};

/// `c[.., start..start+len, ..]` along `axis` (a plain dtype).
pub(super) fn along(c: &ConstData, axis: usize, start: usize, len: usize) -> Result<ConstData, String> {
    let esize = c.dtype.size().ok_or_else(|| format!("cannot cut a {} constant along axis {axis}", c.dtype))?;
    if axis >= c.shape.len() || start + len > c.shape[axis] {
        return Err(format!("cut {start}..{} of axis {axis} out of range for {:?}", start + len, c.shape));
    }
    let outer: usize = c.shape[..axis].iter().product();
    let inner: usize = c.shape[axis + 1..].iter().product::<usize>() * esize;
    let bytes = c.data.bytes();
    let mut out = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        let base = (o * c.shape[axis] + start) * inner;
        out.extend_from_slice(&bytes[base..base + len * inner]);
    }
    let mut shape = c.shape.clone();
    shape[axis] = len;
    ConstData::new(c.dtype, shape, Blob::from_vec(out))
}

/// Rows `start..start+len` of a 2-D weight of any dtype (block rows are whole byte ranges).
pub(super) fn rows(c: &ConstData, start: usize, len: usize) -> Result<ConstData, String> {
    let row = row_bytes(c)?;
    if start + len > c.shape[0] {
        return Err(format!("rows {start}..{} out of range for {:?}", start + len, c.shape));
    }
    let out = c.data.bytes()[start * row..(start + len) * row].to_vec();
    ConstData::new(c.dtype, vec![len, c.shape[1]], Blob::from_vec(out))
}

/// Columns `start..start+len` of a 2-D weight; for a block dtype both must be whole blocks.
pub(super) fn cols(c: &ConstData, start: usize, len: usize) -> Result<ConstData, String> {
    let row = row_bytes(c)?;
    let (per, bb) = c.dtype.block();
    if start % per != 0 || len % per != 0 || start + len > c.shape[1] {
        return Err(format!("columns {start}..{} of {:?} are not whole {} blocks of {per}", start + len, c.shape, c.dtype));
    }
    let (b0, bn) = (start / per * bb, len / per * bb);
    let bytes = c.data.bytes();
    let mut out = Vec::with_capacity(c.shape[0] * bn);
    for r in 0..c.shape[0] {
        out.extend_from_slice(&bytes[r * row + b0..r * row + b0 + bn]);
    }
    ConstData::new(c.dtype, vec![c.shape[0], len], Blob::from_vec(out))
}

fn row_bytes(c: &ConstData) -> Result<usize, String> {
    if c.shape.len() != 2 {
        return Err(format!("expected a 2-D weight, got {:?}", c.shape));
    }
    c.dtype.bytes_for(c.shape[1]).ok_or_else(|| format!("rows of {} {} values are not whole blocks", c.shape[1], c.dtype))
}
