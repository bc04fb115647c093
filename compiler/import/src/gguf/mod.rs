//! GGUF reader: memory-maps the file; metadata and the tensor table are parsed by `gguf-rs-lib` (it
//! validates the format with allocation limits and checks every tensor's range and alignment), and
//! every tensor comes back as a [`ConstData`] whose bytes borrow the mapping (zero copy, block types
//! kept as they are).
//!
//! Format: magic `GGUF`, version u32, tensor count u64, metadata count u64, the metadata key/values,
//! the tensor table (name, dims in ggml order — innermost first —, type id, offset into the data
//! section), padding to `general.alignment` (default 32), then the data section.
//!
//! The fixed 24-byte header is checked here first (the crate's errors name no offsets): a count the
//! file cannot hold is reported with its byte offset before anything is allocated. The crate reads
//! through a cursor that records how far it got, so a truncation is named by its byte offset.

mod value;

pub use value::GgufValue;

use gguf_rs_lib::format::types::GGUFTensorType as TT;
use gguf_rs_lib::reader::file_reader::{GGUFFileReader, GGUFReaderConfig};
use rlx_ir::{Blob, ConstData, DType};
use std::cell::Cell;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

/// One tensor: its name, data (shape in numpy order: ggml's dims reversed), and file byte offset.
#[derive(Clone, Debug)]
pub struct GgufTensor {
    pub name: String,
    pub data: ConstData,
    /// Absolute byte offset of the tensor's data in the file.
    pub offset: u64,
}

/// A parsed GGUF file: metadata sorted by key, tensors in file order.
#[derive(Clone, Debug)]
pub struct GgufFile {
    pub version: u32,
    pub alignment: u64,
    /// Absolute byte offset of the data section.
    pub data_offset: u64,
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<GgufTensor>,
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok().map(|i| &self.metadata[i].1)
    }
    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// `general.architecture`, or "" when absent.
    pub fn architecture(&self) -> &str {
        self.get("general.architecture").and_then(GgufValue::as_str).unwrap_or("")
    }
}

/// The smallest serialized metadata entry (key length u64 + 1-byte key + type u32 + 1-byte value)
/// and tensor-table entry (name length u64 + n_dims u32 + one u64 dim + type u32 + offset u64).
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
const MIN_TENSOR_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// A `Read + Seek` over the mapping that remembers the furthest byte the parser asked for.
struct Tracked {
    inner: Cursor<MapRef>,
    furthest: Rc<Cell<u64>>,
}

struct MapRef(Arc<memmap2::Mmap>);
impl AsRef<[u8]> for MapRef {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Read for Tracked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let at = self.inner.position();
        self.furthest.set(self.furthest.get().max(at.saturating_add(buf.len() as u64)));
        self.inner.read(buf)
    }
}
impl Seek for Tracked {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

fn dtype_of(t: TT) -> Option<DType> {
    Some(match t {
        TT::F32 => DType::F32,
        TT::F16 => DType::F16,
        TT::BF16 => DType::BF16,
        TT::Q4_0 => DType::Q4_0,
        TT::Q4_1 => DType::Q4_1,
        TT::Q5_0 => DType::Q5_0,
        TT::Q5_1 => DType::Q5_1,
        TT::Q8_0 => DType::Q8_0,
        TT::Q2_K => DType::Q2_K,
        TT::Q3_K => DType::Q3_K,
        TT::Q4_K => DType::Q4_K,
        TT::Q5_K => DType::Q5_K,
        TT::Q6_K => DType::Q6_K,
        _ => return None,
    })
}

/// Checks the fixed header (magic, version, counts) against the file length.
fn check_header(b: &[u8]) -> Result<(u32, u64, u64), String> {
    let len = b.len() as u64;
    if b.len() < 24 {
        return Err(format!("truncated: {len} bytes, but a GGUF header is 24 bytes (magic, version, tensor count, metadata count)"));
    }
    if &b[0..4] != b"GGUF" {
        return Err(format!("not a GGUF file: bytes 0..4 are {:02x?}, expected \"GGUF\"", &b[0..4]));
    }
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |at: usize| u64::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5], b[at + 6], b[at + 7]]);
    let version = u32_at(4);
    if !(2..=3).contains(&version) {
        return Err(format!("unsupported GGUF version {version} (bytes 4..8); versions 2 and 3 are read"));
    }
    let (tensors, kvs) = (u64_at(8), u64_at(16));
    let rest = len - 24;
    if kvs > rest / MIN_KV_BYTES {
        return Err(format!("metadata count {kvs} (bytes 16..24) is more than the {rest} bytes after the header can hold"));
    }
    if tensors > rest / MIN_TENSOR_BYTES {
        return Err(format!("tensor count {tensors} (bytes 8..16) is more than the {rest} bytes after the header can hold"));
    }
    Ok((version, tensors, kvs))
}

/// Loads a GGUF file. Errors name the file and the tensor or byte offset at fault; several tensor
/// problems are reported together, one per line.
pub fn load_gguf(path: &Path) -> Result<GgufFile, String> {
    let file = path.display();
    let f = std::fs::File::open(path).map_err(|e| format!("{file}: cannot open: {e}"))?;
    // SAFETY: read-only mapping; as with any mmap, a concurrent writer truncating the file could fault
    // the process. Tensors keep the mapping alive through their Blob owner.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&f) }.map_err(|e| format!("{file}: cannot memory-map: {e}"))?);
    let (version, _, _) = check_header(&map).map_err(|e| format!("{file}: {e}"))?;
    let furthest = Rc::new(Cell::new(0));
    let reader = Tracked { inner: Cursor::new(MapRef(map.clone())), furthest: furthest.clone() };
    // The crate's range checks name no tensor: ours (below) run first, then the crate's (overlaps).
    let config = GGUFReaderConfig { validate_integrity: false, eager_load_tensors: false, ..Default::default() };
    let mut r = GGUFFileReader::with_config(reader, config).map_err(|e| {
        let at = furthest.get();
        if at > map.len() as u64 {
            format!("{file}: truncated: the header runs past the end of the file ({} bytes) while reading bytes up to offset {at}: {e}", map.len())
        } else {
            format!("{file}: malformed header (metadata or tensor table), read up to byte offset {at}: {e}")
        }
    })?;
    let data_offset = r.tensor_data_offset();
    let alignment = r.tensor_alignment();
    let mut metadata: Vec<(String, GgufValue)> = r.metadata().iter().map(|(k, v)| (k.clone(), GgufValue::from_lib(v))).collect();
    metadata.sort_by(|a, b| a.0.cmp(&b.0));

    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(MapRef(map.clone()));
    let mut tensors = Vec::with_capacity(r.tensor_infos().len());
    let mut problems = Vec::new();
    for info in r.tensor_infos() {
        let name = info.name();
        let Some(dtype) = dtype_of(info.tensor_type()) else {
            problems.push(format!("tensor '{name}': unsupported GGUF type {}", info.tensor_type().name()));
            continue;
        };
        let mut shape = Vec::new();
        for &d in info.shape().dims().iter().rev() {
            match usize::try_from(d) {
                Ok(d) => shape.push(d),
                Err(_) => problems.push(format!("tensor '{name}': dim {d} does not fit this platform")),
            }
        }
        let inner = shape.last().copied().unwrap_or(1);
        if inner % dtype.block().0 != 0 {
            problems.push(format!("tensor '{name}': rows of {inner} values are not whole {dtype} blocks of {}", dtype.block().0));
            continue;
        }
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let Some(bytes) = numel.and_then(|n| dtype.bytes_for(n)) else {
            problems.push(format!("tensor '{name}': shape {shape:?} of {dtype} overflows the byte size"));
            continue;
        };
        let start = data_offset.checked_add(info.data_offset());
        let blob = start.and_then(|s| usize::try_from(s).ok()).and_then(|s| Blob::from_owner(owner.clone(), s, bytes));
        let Some(blob) = blob else {
            problems.push(format!(
                "tensor '{name}': {bytes} bytes at file offset {} run past the end of the file ({} bytes)",
                data_offset as u128 + info.data_offset() as u128,
                map.len()
            ));
            continue;
        };
        match ConstData::new(dtype, shape, blob) {
            Ok(data) => tensors.push(GgufTensor { name: name.to_string(), data, offset: data_offset + info.data_offset() }),
            Err(e) => problems.push(format!("tensor '{name}': {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(format!("{file}: {}", problems.join("\n  ")));
    }
    r.validate_integrity().map_err(|e| format!("{file}: inconsistent tensor table: {e}"))?;
    Ok(GgufFile { version, alignment, data_offset, metadata, tensors })
}
