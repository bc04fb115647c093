//! safetensors reader: hand-written files round-trip for every supported dtype; hostile files give an
//! error naming the tensor or byte offset (never a panic or a huge allocation).

use rlx_import::safetensors::load_safetensors;
use rlx_ir::{ConstData, DType};
use std::path::PathBuf;

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("safetensors");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// 8-byte LE header length + header + data.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn err_of(name: &str, bytes: &[u8]) -> String {
    match load_safetensors(&write(name, bytes)) {
        Ok(t) => panic!("{name}: loaded {} tensors, expected an error", t.len()),
        Err(e) => e,
    }
}

fn assert_has(e: &str, frags: &[&str]) {
    for f in frags {
        assert!(e.contains(f), "error {e:?} should contain {f:?}");
    }
}

#[test]
fn round_trip_all_dtypes() {
    // (safetensors name, our dtype, shape, values)
    let cases: Vec<(&str, DType, Vec<usize>, Vec<f64>)> = vec![
        ("F32", DType::F32, vec![2, 3], vec![1.5, -2.0, 0.0, 3.25, 1e-3, -7.0]),
        ("F16", DType::F16, vec![4], vec![1.0, -0.5, 65504.0, 0.0]),
        ("BF16", DType::BF16, vec![2, 1], vec![3.0, -1.0]),
        ("F64", DType::F64, vec![3], vec![1e300, -0.1, 2.0]),
        ("I8", DType::I8, vec![3], vec![-128.0, 0.0, 127.0]),
        ("U8", DType::U8, vec![2], vec![0.0, 255.0]),
        ("I16", DType::I16, vec![2], vec![-32768.0, 123.0]),
        ("U16", DType::U16, vec![2], vec![65535.0, 1.0]),
        ("I32", DType::I32, vec![1, 2], vec![-5.0, 2147483647.0]),
        ("U32", DType::U32, vec![2], vec![4294967295.0, 7.0]),
        ("I64", DType::I64, vec![2], vec![-9e15, 42.0]),
        ("U64", DType::U64, vec![1], vec![9e15]),
        ("BOOL", DType::Bool, vec![3], vec![1.0, 0.0, 1.0]),
        // A scalar and an empty tensor.
        ("F32", DType::F32, vec![], vec![6.0]),
        ("I64", DType::I64, vec![0, 4], vec![]),
    ];
    let mut header = String::from(r#"{"__metadata__":{"format":"pt"}"#);
    let mut data = Vec::new();
    let mut want = Vec::new();
    for (i, (st, dt, shape, vals)) in cases.iter().enumerate() {
        // Names in reverse order of offsets, to check the result is sorted by name.
        let name = format!("t{:02}_{}", cases.len() - i, st.to_lowercase());
        let c = ConstData::from_f64s(*dt, shape.clone(), vals);
        let (b, e) = (data.len(), data.len() + c.data.len());
        data.extend_from_slice(c.data.bytes());
        header += &format!(r#","{name}":{{"dtype":"{st}","shape":{shape:?},"data_offsets":[{b},{e}]}}"#);
        want.push((name, c));
    }
    header += "}";
    let got = load_safetensors(&write("all_dtypes.safetensors", &file(&header, &data))).unwrap();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got.len(), want.len());
    for ((gn, g), (wn, w)) in got.iter().zip(&want) {
        assert_eq!(gn, wn);
        assert_eq!(g.dtype, w.dtype, "{gn}");
        assert_eq!(g.shape, w.shape, "{gn}");
        assert_eq!(g.data.bytes(), w.data.bytes(), "{gn}");
        assert_eq!(g.to_f64_vec(), w.to_f64_vec(), "{gn}");
    }
}

#[test]
fn header_padding_spaces_are_fine() {
    // Writers pad the header with spaces to an 8-byte boundary.
    let h = r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}     "#;
    let t = load_safetensors(&write("padded.safetensors", &file(h, &2.5f32.to_le_bytes()))).unwrap();
    assert_eq!(t[0].1.get_f64(0), 2.5);
}

#[test]
fn missing_file() {
    let e = load_safetensors(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no/such.safetensors")).unwrap_err();
    assert_has(&e, &["such.safetensors", "cannot open"]);
}

#[test]
fn shorter_than_header_length() {
    let e = err_of("tiny.safetensors", &[1, 2, 3]);
    assert_has(&e, &["tiny.safetensors", "truncated: 3 bytes"]);
    let e = err_of("empty.safetensors", &[]);
    assert_has(&e, &["truncated: 0 bytes"]);
}

#[test]
fn truncated_data() {
    let h = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mut f = file(h, &[0u8; 16]);
    f.truncate(f.len() - 5);
    let e = err_of("truncated.safetensors", &f);
    let end = 8 + h.len() + 16;
    assert_has(&e, &["truncated.safetensors", "tensor 'w'", "data_offsets [0, 16]", "run past the end of the file", &format!("..{end})")]);
}

#[test]
fn truncated_header() {
    let h = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let f = file(h, &[]);
    let e = err_of("cut_header.safetensors", &f[..20]);
    assert_has(&e, &[&format!("header length {}", h.len()), "larger than the 12 bytes that follow"]);
}

#[test]
fn huge_header_length() {
    let mut f = (1u64 << 60).to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    let e = err_of("huge_header.safetensors", &f);
    assert_has(&e, &["header length 1152921504606846976 (bytes 0..8)", "larger than the 2 bytes"]);
}

#[test]
fn offsets_out_of_range() {
    let h = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[1000,1004]}}"#;
    let e = err_of("oob.safetensors", &file(h, &[0u8; 8]));
    assert_has(&e, &["tensor 'b'", "data_offsets [1000, 1004]", "run past the end of the file"]);
    assert!(!e.contains("tensor 'a'"), "{e}");

    let h = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}"#;
    let e = err_of("backwards.safetensors", &file(h, &[0u8; 4]));
    assert_has(&e, &["tensor 'a'", "[4, 2] end before they begin"]);
}

#[test]
fn overlapping_offsets() {
    let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let e = err_of("overlap.safetensors", &file(h, &[0u8; 8]));
    assert_has(&e, &["overlaps tensor 'a'", "at data byte offset 4", &format!("file byte {}", 8 + h.len() + 4)]);
}

#[test]
fn gaps_and_trailing_bytes() {
    let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    let e = err_of("gap.safetensors", &file(h, &[0u8; 4]));
    assert_has(&e, &["gap in the data section: bytes 0..2", "before tensor 'a'"]);
    let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let e = err_of("trailing.safetensors", &file(h, &[0u8; 5]));
    assert_has(&e, &["3 trailing bytes after the last tensor"]);
}

#[test]
fn dtype_shape_size_mismatch() {
    // f32[3] needs 12 bytes; the offsets hold 8.
    let h = r#"{"ok":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"bad":{"dtype":"F32","shape":[3],"data_offsets":[1,9]}}"#;
    let e = err_of("mismatch.safetensors", &file(h, &[0u8; 9]));
    assert_has(&e, &["tensor 'bad'", "dtype f32 shape [3] needs 12 bytes, but data_offsets [1, 9] hold 8"]);
}

#[test]
fn shape_overflow_is_not_allocated() {
    let h = r#"{"big":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#;
    let e = err_of("overflow.safetensors", &file(h, &[0u8; 8]));
    assert_has(&e, &["tensor 'big'", "overflows the byte size"]);
    // Large but representable: an error, not an allocation.
    let h = r#"{"big":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,4000000000000]}}"#;
    let e = err_of("claims_4tb.safetensors", &file(h, &[0u8; 8]));
    assert_has(&e, &["tensor 'big'", "run past the end of the file"]);
}

#[test]
fn non_json_header() {
    let e = err_of("notjson.safetensors", &file("this is not json", &[]));
    assert_has(&e, &["notjson.safetensors", "header (bytes 8..24) is not a JSON object"]);
    let e = err_of("array.safetensors", &file("[1,2]", &[]));
    assert_has(&e, &["is not a JSON object"]);
    let e = err_of("badutf8.safetensors", &file("{\"\u{0}\"", &[0xff, 0xfe]));
    assert_has(&e, &["is not a JSON object"]);
}

#[test]
fn malformed_entries_are_all_listed() {
    let h = r#"{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[-1],"data_offsets":[1,5]},"c":{"dtype":"F32","shape":[1]},"d":7}"#;
    let e = err_of("malformed.safetensors", &file(h, &[0u8; 5]));
    assert_has(
        &e,
        &[
            "tensor 'a': unsupported dtype \"F8_E4M3\"",
            "tensor 'b': 'shape' must be an array of non-negative integers",
            "tensor 'c': 'data_offsets' must be two non-negative integers",
            "tensor 'd': header entry is not an object",
        ],
    );
}
