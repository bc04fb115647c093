//! NumPy `.npy` files: read into and write from [`ConstData`].
//!
//! Supported: format versions 1.0, 2.0 and 3.0; C order only; little-endian (or byte-order-free)
//! dtypes `<f4 <f8 <f2 <i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1` (`|i1`, `=` and `|` spellings of the
//! same types are accepted). The header is a Python dict literal; every declared size is checked
//! against the bytes actually present, and a bad file is an `Err` naming the problem, never a panic.

use rlx_ir::{Blob, ConstData, DType};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Reads a `.npy` file. Errors name the file.
pub fn read(path: &Path) -> Result<ConstData, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("'{}' is not a usable .npy file: {e}", path.display()))
}

/// Writes `c` as a version 1.0 `.npy` file (2.0 if the header would not fit).
pub fn write(path: &Path, c: &ConstData) -> Result<(), String> {
    let bytes = encode(c)?;
    std::fs::write(path, bytes).map_err(|e| format!("cannot write '{}': {e}", path.display()))
}

/// The dtype's `descr` string, for the dtypes `.npy` can hold.
pub fn descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        _ => return None,
    })
}

fn dtype_of_descr(d: &str) -> Result<DType, String> {
    let supported = "supported: <f4 <f8 <f2 <i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1";
    let (order, code) = match d.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &d[1..]),
        _ => ('=', d),
    };
    let dtype = match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return Err(format!("dtype '{d}' is not supported ({supported})")),
    };
    let one_byte = dtype.size() == Some(1);
    if order == '>' && !one_byte {
        return Err(format!("dtype '{d}' is big-endian; only little-endian data is supported (numpy: a.astype(a.dtype.newbyteorder('<')))"));
    }
    if order == '|' && !one_byte {
        return Err(format!("dtype '{d}' has no byte order; expected '<{code}'"));
    }
    Ok(dtype)
}

/// Parses the bytes of a `.npy` file.
pub fn parse(bytes: &[u8]) -> Result<ConstData, String> {
    if bytes.len() < 8 || &bytes[..6] != MAGIC {
        return Err("missing the \\x93NUMPY magic (not a .npy file)".into());
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (header_len, header_start) = match major {
        1 => {
            let b = bytes.get(8..10).ok_or("file ends inside the header length")?;
            (u16::from_le_bytes([b[0], b[1]]) as usize, 10usize)
        }
        2 | 3 => {
            let b = bytes.get(8..12).ok_or("file ends inside the header length")?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        _ => return Err(format!("format version {major}.{minor} is not supported (1.0, 2.0, 3.0 are)")),
    };
    let header_end = header_start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| format!("header declares {header_len} bytes but the file has only {} after the preamble (truncated?)", bytes.len() - header_start))?;
    let header = &bytes[header_start..header_end];
    let header = if major == 3 {
        std::str::from_utf8(header).map_err(|_| "header is not valid UTF-8".to_string())?
    } else {
        if !header.is_ascii() {
            return Err("header is not ASCII".into());
        }
        std::str::from_utf8(header).map_err(|_| "header is not ASCII".to_string())?
    };
    let h = parse_header(header)?;
    if h.fortran_order {
        return Err("fortran_order is True; only C-order arrays are supported (numpy: np.ascontiguousarray(a))".into());
    }
    let dtype = dtype_of_descr(&h.descr)?;
    let numel = h
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {:?} has more elements than fit in memory", h.shape))?;
    let want = dtype
        .bytes_for(numel)
        .ok_or_else(|| format!("shape {:?} of {dtype} is too large", h.shape))?;
    let data = &bytes[header_end..];
    if data.len() < want {
        return Err(format!(
            "header declares {} {:?} ({want} data bytes) but the file holds only {} (truncated?)",
            h.descr,
            h.shape,
            data.len()
        ));
    }
    if data.len() > want {
        return Err(format!(
            "header declares {} {:?} ({want} data bytes) but the file holds {} ({} extra bytes)",
            h.descr,
            h.shape,
            data.len(),
            data.len() - want
        ));
    }
    ConstData::new(dtype, h.shape, Blob::from_vec(data.to_vec()))
}

/// Encodes `c` as `.npy` bytes.
pub fn encode(c: &ConstData) -> Result<Vec<u8>, String> {
    let d = descr(c.dtype).ok_or_else(|| format!("{} cannot be stored in a .npy file", c.dtype))?;
    let shape = match c.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", c.shape[0]),
        _ => format!("({})", c.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let dict = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Preamble + header (dict, space padding, '\n') is a multiple of 64 bytes, as numpy writes it.
    let mut out = Vec::with_capacity(c.data.len() + 128);
    out.extend_from_slice(MAGIC);
    let pad = |pre: usize| (64 - (pre + dict.len() + 1) % 64) % 64;
    let v1_len = dict.len() + pad(10) + 1;
    if let Ok(hl) = u16::try_from(v1_len) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&hl.to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend(std::iter::repeat_n(b' ', pad(10)));
    } else {
        let hl = u32::try_from(dict.len() + pad(12) + 1).map_err(|_| "shape too long for a .npy header".to_string())?;
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&hl.to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend(std::iter::repeat_n(b' ', pad(12)));
    }
    out.push(b'\n');
    out.extend_from_slice(c.data.bytes());
    Ok(out)
}

struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses the header dict: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_header(s: &str) -> Result<Header, String> {
    let mut p = Lexer { s: s.trim_end_matches(['\n', ' ', '\0']).as_bytes(), i: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        match key.as_str() {
            "descr" => descr = Some(p.string().map_err(|_| "'descr' must be a string (structured dtypes are not supported)".to_string())?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(format!("unexpected header key '{other}'")),
        }
        p.skip_ws();
        if !p.eat(b',') {
            p.expect(b'}')?;
            break;
        }
    }
    p.skip_ws();
    if p.i != p.s.len() {
        return Err("trailing characters after the header dict".into());
    }
    Ok(Header {
        descr: descr.ok_or("header has no 'descr'")?,
        fortran_order: fortran.ok_or("header has no 'fortran_order'")?,
        shape: shape.ok_or("header has no 'shape'")?,
    })
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("malformed header: expected '{}' at byte {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.skip_ws();
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("malformed header: expected a quoted string at byte {}", self.i)),
        };
        let start = self.i + 1;
        let len = self.s[start..].iter().position(|&c| c == q).ok_or("malformed header: unterminated string")?;
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }
    fn boolean(&mut self) -> Result<bool, String> {
        self.skip_ws();
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            Err("malformed header: 'fortran_order' must be True or False".into())
        }
    }
    fn tuple(&mut self) -> Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.i;
            while self.s.get(self.i).is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            if start == self.i {
                return Err(format!("malformed header: 'shape' must be a tuple of non-negative integers (byte {start})"));
            }
            // Python 2 era writers append 'L' to long integers.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            if self.s.get(self.i) == Some(&b'L') {
                self.i += 1;
            }
            dims.push(digits.parse::<usize>().map_err(|_| format!("shape dim {digits} is too large"))?);
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(c: &ConstData) {
        let b = encode(c).unwrap();
        let hdr_end = b.iter().position(|&x| x == b'\n').unwrap() + 1;
        assert_eq!(hdr_end % 64, 0);
        assert_eq!(&parse(&b).unwrap(), c);
    }

    #[test]
    fn roundtrips() {
        roundtrip(&ConstData::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]));
        roundtrip(&ConstData::from_i64(vec![3], &[1, -2, 3]));
        roundtrip(&ConstData::from_f32(vec![], &[7.5]));
        roundtrip(&ConstData::from_f64s(DType::Bool, vec![2, 0, 2], &[]));
        for d in [DType::F64, DType::F16, DType::I8, DType::I16, DType::I32, DType::U8, DType::U16, DType::U32, DType::U64, DType::Bool] {
            roundtrip(&ConstData::from_f64s(d, vec![2, 2], &[0., 1., 1., 0.]));
        }
    }

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&((header.len()) as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn reads_numpy_spellings() {
        let c = parse(&file("{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2L,)}\n", &[1, 0, 0, 0, 2, 0, 0, 0])).unwrap();
        assert_eq!(c.to_i64_vec(), vec![1, 2]);
        assert_eq!(parse(&file("{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }  \n", &[255])).unwrap().to_i64_vec(), vec![-1]);
    }

    #[test]
    fn rejects_bad_files() {
        let err = |b: &[u8]| parse(b).unwrap_err();
        let full = encode(&ConstData::from_f32(vec![2, 3], &[0.; 6])).unwrap();
        assert!(err(&full[..full.len() - 1]).contains("truncated"));
        assert!(err(&full[..20]).contains("truncated"));
        assert!(err(&full[..9]).contains("header length"));
        assert!(err(b"hello").contains("magic"));
        assert!(err(&file("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", &[0; 4])).contains("fortran_order"));
        assert!(err(&file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", &[0; 4])).contains("big-endian"));
        assert!(err(&file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", &[0; 8])).contains("not supported"));
        assert!(err(&file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }\n", &[0; 4])).contains("more elements"));
        assert!(err(&file("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", &[0; 16])).contains("extra"));
        assert!(err(&file("{'descr': '<f4', 'shape': (3,), }\n", &[0; 12])).contains("fortran_order"));
        assert!(err(&file("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }\n", &[0; 12])).contains("shape"));
        let mut v = full.clone();
        v[6] = 9;
        assert!(err(&v).contains("version"));
    }
}
