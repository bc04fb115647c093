//! A minimal GGUF metadata reader for the tests (header and key/value pairs only, no tensors), so
//! tokenizer tests read a vocabulary without the importer. Reads the file's first bytes up to the
//! end of the metadata.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

#[derive(Clone, Debug)]
pub enum Meta {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Meta>),
}

impl Meta {
    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Meta::Int(i) => u32::try_from(*i).ok(),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Meta::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Meta::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Meta]> {
        match self {
            Meta::Array(a) => Some(a),
            _ => None,
        }
    }
}

struct Cursor<R: Read> {
    r: R,
    at: u64,
}

impl<R: Read> Cursor<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0; N];
        self.r.read_exact(&mut b).map_err(|e| format!("byte {}: {e}", self.at))?;
        self.at += N as u64;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        if n > 1 << 24 {
            return Err(format!("byte {}: string of {n} bytes", self.at));
        }
        let mut b = vec![0; n as usize];
        self.r.read_exact(&mut b).map_err(|e| format!("byte {}: {e}", self.at))?;
        self.at += n;
        String::from_utf8(b).map_err(|e| format!("byte {}: {e}", self.at))
    }
    fn value(&mut self, ty: u32) -> Result<Meta, String> {
        Ok(match ty {
            0 => Meta::Int(u8::from_le_bytes(self.bytes()?) as i64),
            1 => Meta::Int(i8::from_le_bytes(self.bytes()?) as i64),
            2 => Meta::Int(u16::from_le_bytes(self.bytes()?) as i64),
            3 => Meta::Int(i16::from_le_bytes(self.bytes()?) as i64),
            4 => Meta::Int(self.u32()? as i64),
            5 => Meta::Int(i32::from_le_bytes(self.bytes()?) as i64),
            6 => Meta::Float(f32::from_le_bytes(self.bytes()?) as f64),
            7 => Meta::Bool(self.bytes::<1>()?[0] != 0),
            8 => Meta::Str(self.string()?),
            9 => {
                let et = self.u32()?;
                let n = self.u64()?;
                if n > 1 << 26 {
                    return Err(format!("byte {}: array of {n} entries", self.at));
                }
                Meta::Array((0..n).map(|_| self.value(et)).collect::<Result<_, _>>()?)
            }
            10 => Meta::Int(self.u64()? as i64),
            11 => Meta::Int(i64::from_le_bytes(self.bytes()?)),
            12 => Meta::Float(f64::from_le_bytes(self.bytes()?)),
            t => return Err(format!("byte {}: unknown value type {t}", self.at)),
        })
    }
}

/// Every metadata key of a GGUF v2/v3 file.
pub fn read_metadata(path: &Path) -> Result<BTreeMap<String, Meta>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut c = Cursor { r: std::io::BufReader::with_capacity(1 << 20, f), at: 0 };
    if &c.bytes::<4>()? != b"GGUF" {
        return Err(format!("{}: not a GGUF file", path.display()));
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("{}: GGUF version {version}", path.display()));
    }
    let _tensors = c.u64()?;
    let n = c.u64()?;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let key = c.string()?;
        let ty = c.u32()?;
        let v = c.value(ty).map_err(|e| format!("{}: key {key}: {e}", path.display()))?;
        out.insert(key, v);
    }
    Ok(out)
}
