//! A tiny .npy reader/writer for the tests: little-endian f32/f64/i64/i32/bool in C order. Writes
//! version 1.0; reads versions 1.0 and 2.0.

use rlx_ir::{Blob, ConstData, DType};
use std::path::Path;

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::Bool => "|b1",
        _ => return None,
    })
}

pub fn write_npy(path: &Path, c: &ConstData) -> Result<(), String> {
    let d = descr(c.dtype).ok_or_else(|| format!("npy: cannot write {}", c.dtype))?;
    let shape = match c.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", c.shape[0]),
        _ => format!("({})", c.shape.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut h = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // magic(6) + version(2) + len(2) + header, padded with spaces and ended by '\n' to a multiple of 64.
    let total = (10 + h.len() + 1).div_ceil(64) * 64;
    h.push_str(&" ".repeat(total - 10 - h.len() - 1));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(c.data.bytes());
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn read_npy(path: &Path) -> Result<ConstData, String> {
    let p = path.display();
    let b = std::fs::read(path).map_err(|e| format!("{p}: {e}"))?;
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(format!("{p}: not a .npy file"));
    }
    let (hlen, hstart) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!("{p}: unsupported .npy version {v}")),
    };
    let h = std::str::from_utf8(b.get(hstart..hstart + hlen).ok_or(format!("{p}: truncated header"))?)
        .map_err(|_| format!("{p}: header is not text"))?;
    let field = |key: &str| -> Result<&str, String> {
        let at = h.find(&format!("'{key}':")).ok_or(format!("{p}: header lacks '{key}': {h}"))?;
        Ok(h[at + key.len() + 3..].trim_start())
    };
    let d = field("descr")?;
    let d = &d[1..d[1..].find('\'').ok_or(format!("{p}: bad descr"))? + 1];
    let dtype = [DType::F32, DType::F64, DType::I64, DType::I32, DType::Bool]
        .into_iter()
        .find(|&t| descr(t) == Some(d))
        .ok_or(format!("{p}: unsupported descr {d}"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(format!("{p}: Fortran order is not supported"));
    }
    let s = field("shape")?;
    let s = &s[1..s.find(')').ok_or(format!("{p}: bad shape"))?];
    let shape: Vec<usize> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().map_err(|_| format!("{p}: bad shape entry {x:?}")))
        .collect::<Result<_, _>>()?;
    ConstData::new(dtype, shape, Blob::from_vec(b[hstart + hlen..].to_vec())).map_err(|e| format!("{p}: {e}"))
}
