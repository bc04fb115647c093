//! safetensors reader: memory-maps the file and returns every tensor as a [`ConstData`] whose bytes
//! borrow the mapping (no copy).
//!
//! Format: an 8-byte little-endian header length `n`, `n` bytes of JSON
//! (`{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {…}}`), then the data section;
//! `data_offsets` are relative to the start of the data section.
//!
//! The `safetensors` crate validates the format, but several of its errors name neither the tensor
//! nor the offset (`TensorInvalidInfo`, `MetadataIncompleteBuffer`). So the header is checked here
//! first, collecting every problem with the tensor's name and file byte offsets, and the crate then
//! parses the (already sane) file. Nothing is allocated in proportion to a size the file claims.

use rlx_ir::{Blob, ConstData, DType};
use safetensors::tensor::{Dtype, SafeTensorError};
use safetensors::SafeTensors;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// The crate's own header limit (100 MB); checked here to name it in our words.
const MAX_HEADER_LEN: u64 = 100_000_000;

/// The bytes a safetensors file's tensors borrow: a memory map of the file, or any other owner.
pub type Owner = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Loads every tensor of a safetensors file, sorted by name. Errors name the file and the tensor or
/// byte offset at fault; several problems are reported together, one per line.
pub fn load_safetensors(path: &Path) -> Result<Vec<(String, ConstData)>, String> {
    let file = path.display();
    let f = File::open(path).map_err(|e| format!("{file}: cannot open: {e}"))?;
    let len = f.metadata().map_err(|e| format!("{file}: cannot stat: {e}"))?.len();
    let owner: Owner = if len < 8 {
        // Too short to hold a header length (the parser says so); a zero-length map is an error on
        // some systems, so these few bytes are read instead.
        Arc::new(std::fs::read(path).map_err(|e| format!("{file}: cannot read: {e}"))?)
    } else {
        // SAFETY: the mapping is read-only; as with any mmap, a concurrent writer truncating the file
        // could fault the process. The tensors keep the mapping alive through their Blob owner.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| format!("{file}: cannot memory-map: {e}"))?;
        if map.len() as u64 != len {
            return Err(format!("{file}: file changed size while being mapped"));
        }
        Arc::new(map)
    };
    parse_safetensors(owner).map_err(|e| format!("{file}: {e}"))
}

/// Parses the bytes of a safetensors file held by `owner`: every tensor, sorted by name, borrowing
/// `owner`'s bytes. Errors name the tensor or byte offset at fault (not the file: the caller adds it).
pub fn parse_safetensors(owner: Owner) -> Result<Vec<(String, ConstData)>, String> {
    let bytes: &[u8] = (*owner).as_ref();
    let infos = check_header(bytes)?;

    // The crate re-validates (contiguity, full coverage); map its errors to our words.
    let (n, meta) = SafeTensors::read_metadata(bytes).map_err(|e| crate_error(&e))?;
    let data_start = 8 + n;
    let mut out = Vec::with_capacity(infos.len());
    let mut problems = Vec::new();
    for info in &infos {
        let Some(ti) = meta.info(&info.name) else {
            problems.push(format!("tensor '{}': missing from the parsed header", info.name));
            continue;
        };
        let Some(dtype) = map_dtype(ti.dtype) else {
            problems.push(format!("tensor '{}': unsupported dtype {:?}", info.name, ti.dtype));
            continue;
        };
        let (b, e) = ti.data_offsets;
        let start = data_start + b;
        let Some(blob) = Blob::from_owner(owner.clone(), start, e - b) else {
            problems.push(format!("tensor '{}': bytes {start}..{} are outside the file", info.name, data_start + e));
            continue;
        };
        match ConstData::new(dtype, ti.shape.clone(), blob) {
            Ok(c) => out.push((info.name.clone(), c)),
            Err(err) => problems.push(format!("tensor '{}': {err}", info.name)),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n  "));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// One tensor entry of the header, as checked by [`check_header`].
struct Info {
    name: String,
    begin: u64,
    end: u64,
}

fn parse_dtype(s: &str) -> Option<DType> {
    Some(match s {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I8" => DType::I8,
        "U8" => DType::U8,
        "I16" => DType::I16,
        "U16" => DType::U16,
        "I32" => DType::I32,
        "U32" => DType::U32,
        "I64" => DType::I64,
        "U64" => DType::U64,
        "BOOL" => DType::Bool,
        _ => return None,
    })
}

fn map_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::I64 => DType::I64,
        Dtype::U64 => DType::U64,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// Checks the header length, the JSON, and every tensor's dtype, shape and offsets against the file.
/// Returns the tensors sorted by data offset, or every problem found, one per line.
fn check_header(bytes: &[u8]) -> Result<Vec<Info>, String> {
    let len = bytes.len() as u64;
    let Some(&n) = bytes.first_chunk::<8>() else {
        return Err(format!("truncated: {len} bytes, but a safetensors file starts with an 8-byte header length"));
    };
    let n = u64::from_le_bytes(n);
    if n > len - 8 {
        return Err(format!(
            "header length {n} (bytes 0..8) is larger than the {} bytes that follow it: truncated or not a safetensors file",
            len - 8
        ));
    }
    if n > MAX_HEADER_LEN {
        return Err(format!("header length {n} exceeds the safetensors limit of {MAX_HEADER_LEN} bytes"));
    }
    let header_end = 8 + n as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| format!("header (bytes 8..{header_end}) is not a JSON object: {e}"))?;
    let data_len = len - header_end as u64;

    let mut problems = Vec::new();
    let mut infos = Vec::new();
    for (name, v) in &header {
        if name == "__metadata__" {
            if !v.is_object() {
                problems.push("'__metadata__' must be an object of strings".to_string());
            }
            continue;
        }
        let t = format!("tensor '{name}'");
        let Some(obj) = v.as_object() else {
            problems.push(format!("{t}: header entry is not an object"));
            continue;
        };
        let dtype = match obj.get("dtype").and_then(|d| d.as_str()) {
            Some(s) => match parse_dtype(s) {
                Some(d) => d,
                None => {
                    problems.push(format!("{t}: unsupported dtype {s:?}"));
                    continue;
                }
            },
            None => {
                problems.push(format!("{t}: missing or non-string 'dtype'"));
                continue;
            }
        };
        let shape: Option<Vec<u64>> = obj.get("shape").and_then(|s| s.as_array()).and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let Some(shape) = shape else {
            problems.push(format!("{t}: 'shape' must be an array of non-negative integers"));
            continue;
        };
        let offs: Option<Vec<u64>> = obj.get("data_offsets").and_then(|s| s.as_array()).and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let (begin, end) = match offs.as_deref() {
            Some(&[b, e]) => (b, e),
            _ => {
                problems.push(format!("{t}: 'data_offsets' must be two non-negative integers"));
                continue;
            }
        };
        let need = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|numel| numel.checked_mul(dtype.size().expect("plain dtype") as u64));
        let Some(need) = need else {
            problems.push(format!("{t}: shape {shape:?} of {dtype} overflows the byte size"));
            continue;
        };
        if end < begin {
            problems.push(format!("{t}: data_offsets [{begin}, {end}] end before they begin"));
            continue;
        }
        if end > data_len {
            problems.push(format!(
                "{t}: data_offsets [{begin}, {end}] (file bytes {}..{}) run past the end of the file at byte offset {len}",
                header_end as u64 + begin,
                header_end as u64 + end
            ));
            continue;
        }
        if end - begin != need {
            problems.push(format!(
                "{t}: dtype {dtype} shape {shape:?} needs {need} bytes, but data_offsets [{begin}, {end}] hold {}",
                end - begin
            ));
            continue;
        }
        infos.push(Info { name: name.clone(), begin, end });
    }
    if problems.is_empty() {
        infos.sort_by_key(|i| (i.begin, i.end));
        let mut covered = 0u64;
        let mut prev: Option<&Info> = None;
        for i in &infos {
            if i.begin < covered {
                let p = prev.expect("covered > 0 implies a previous tensor");
                problems.push(format!(
                    "tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' ([{}, {}]) at data byte offset {} (file byte {})",
                    i.name, i.begin, i.end, p.name, p.begin, p.end, i.begin, header_end as u64 + i.begin
                ));
            } else if i.begin > covered {
                problems.push(format!(
                    "gap in the data section: bytes {covered}..{} (file bytes {}..{}) before tensor '{}' belong to no tensor",
                    i.begin,
                    header_end as u64 + covered,
                    header_end as u64 + i.begin,
                    i.name
                ));
            }
            if i.end >= covered {
                covered = i.end;
                prev = Some(i);
            }
        }
        if problems.is_empty() && covered != data_len {
            problems.push(format!(
                "{} trailing bytes after the last tensor (data ends at file byte {}, the file has {len})",
                data_len - covered,
                header_end as u64 + covered
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n  "));
    }
    infos.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(infos)
}

/// The crate's error in words that say what is wrong with the file.
fn crate_error(e: &SafeTensorError) -> String {
    match e {
        SafeTensorError::HeaderTooSmall => "truncated: shorter than the 8-byte header length".into(),
        SafeTensorError::HeaderTooLarge => "header length exceeds the safetensors limit".into(),
        SafeTensorError::InvalidHeaderLength => "header length runs past the end of the file".into(),
        SafeTensorError::InvalidHeader(err) => format!("header is not UTF-8: {err}"),
        SafeTensorError::InvalidHeaderDeserialization(err) => format!("header is not a valid safetensors JSON header: {err}"),
        SafeTensorError::InvalidOffset(name) => format!("tensor '{name}': data_offsets overlap or leave a gap"),
        SafeTensorError::TensorInvalidInfo => "a tensor's shape and dtype disagree with its data_offsets".into(),
        SafeTensorError::MetadataIncompleteBuffer => "the tensors do not exactly cover the data section".into(),
        SafeTensorError::ValidationOverflow => "a tensor's byte size overflows".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rlx-st-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn borrows_the_mapping() {
        let p = tmp("one.safetensors", &file(r#"{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}"#, &[7, 8, 9]));
        let t = load_safetensors(&p).unwrap();
        assert_eq!(t[0].1.data.bytes(), &[7, 8, 9]);
        assert_eq!(t[0].1.shape, vec![3]);
    }

    #[test]
    fn overlap_is_named() {
        let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
        let e = load_safetensors(&tmp("ov.safetensors", &file(h, &[1, 2, 3]))).unwrap_err();
        assert!(e.contains("tensor 'b'") && e.contains("overlaps tensor 'a'"), "{e}");
    }
}
