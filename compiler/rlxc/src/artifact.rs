//! The text artifacts beside a native object: `NAME.h` (C API) and `NAME.rs` (Rust binding).
//!
//! Pure functions of an [`ArtifactInfo`]; the output is deterministic (no timestamps, no paths
//! other than the model's file name). Every name that comes from the model is escaped where it
//! lands in a string literal or a comment and sanitized where it becomes an identifier, so a
//! hostile or odd model cannot break the generated source.
//!
//! The ABI both files describe is the one the LLVM target emits:
//! `int NAME_run(void *arena, const void *const *inputs, void *const *outputs)` returning
//! [`ERROR_CODES`], and with external weights `void NAME_set_weights(const void *weights)`.
//! The Rust binding uses runtime-min (`rlx-rt`) for its types and checks.

use rlx_ir::DType;
use std::fmt::Write;

/// One input or output of the compiled model, in manifest order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// What the generators need to know about one compiled artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactInfo {
    /// The artifact name, a C identifier (see [`sanitize_ident`]): the prefix of every symbol.
    pub name: String,
    pub inputs: Vec<PortInfo>,
    pub outputs: Vec<PortInfo>,
    pub arena_bytes: usize,
    pub weights_bytes: usize,
    /// Weights live in `NAME.weights.bin` and are handed over with `NAME_set_weights`.
    pub external_weights: bool,
    pub triple: String,
    pub cpu: String,
    pub features: String,
    pub rlxc_version: String,
    /// The model's file name only (never a path).
    pub model_file: String,
    /// The libraries a C link needs besides `NAME.o`, e.g. `librlx_rt.a -lpthread -lm …`.
    pub link_line: String,
    /// The state a stateful model keeps between calls (its KV cache); `None` for a stateless model,
    /// whose files are exactly what they were before state existed.
    pub state: Option<StateInfo>,
    /// A rank of a sharded model: its `NAME_run` calls the communicator and may return code 10.
    pub comm: bool,
    /// The program has a loop region: its `NAME_run` may return code 11.
    pub loops: bool,
    /// Outputs of data-dependent length (`rlx_ir::bounded`): each written padded to its static shape,
    /// with the number of valid slices along `axis` in output `count` (an int64 scalar).
    pub bounded: Vec<rlx_ir::Bounded>,
}

/// A stateful model's state region: its size and its tensors at their byte offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub bytes: usize,
    pub tensors: Vec<(PortInfo, usize)>,
}

/// The language-model step shape (inputs `tokens`, `positions` i64[chunk], output 0 `logits`
/// f32[1, vocab] — the chunk's last row —, state tensors of `context` rows): (chunk, context, vocab),
/// for the header's prefill / decode helpers.
pub fn llm_step_shape(a: &ArtifactInfo) -> Option<(usize, usize, usize)> {
    let st = a.state.as_ref()?;
    let [t, p] = &a.inputs[..] else { return None };
    let l = a.outputs.first()?;
    let chunk = *t.shape.first()?;
    let context = *st.tensors.first()?.0.shape.first()?;
    let ok = t.name == "tokens" && p.name == "positions" && l.name == "logits" && t.dtype == DType::I64 && p.dtype == DType::I64
        && t.shape == [chunk] && p.shape == [chunk] && l.dtype == DType::F32 && l.shape.len() == 2 && l.shape[0] == 1
        && st.tensors.iter().all(|(s, _)| s.shape.first() == Some(&context));
    ok.then(|| (chunk, context, l.shape[1]))
}

impl ArtifactInfo {
    /// Whether the object exports `NAME_set_weights`: external weights, and some weights at all.
    pub fn has_set_weights(&self) -> bool {
        self.external_weights && self.weights_bytes > 0
    }
}

pub use rlx_ir::lir::ERROR_CODES;

/// Alignment the arena must have, in bytes (`rlx_rt::ARENA_ALIGN`).
pub const ARENA_ALIGN: usize = 16;
/// Alignment required of an external weights blob, in bytes (its tensors sit at aligned offsets
/// and are loaded with their natural alignment; 16 covers every element type with room to spare).
pub const WEIGHTS_ALIGN: usize = 16;

/// A model or port name as an identifier `[A-Za-z_][A-Za-z0-9_]*`, valid in C and in Rust (except
/// for Rust keywords, which [`rust_binding`] handles). Every other character (including non-ASCII)
/// becomes `_`; a leading digit gets the prefix `m_`; the empty string becomes `m`.
pub fn sanitize_ident(s: &str) -> String {
    let mut out: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.is_empty() {
        out.push('m');
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "m_");
    }
    out
}

/// `s` as a C string literal, quotes included, pure ASCII: `"` `\` `?` (trigraphs) are escaped,
/// every other byte outside printable ASCII is an octal escape (so UTF-8 bytes pass exactly).
fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for &b in s.as_bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

/// Free text made safe inside a `/* */` or `//` comment: printable ASCII stays, any other
/// character becomes `\u{..}`, and `*/` is broken up.
fn comment_text(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    out.replace("*/", "*\\/")
}

/// The C element type of a dtype (raw bytes for block-quantized types).
fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 | DType::BF16 | DType::U16 => "uint16_t",
        DType::I8 => "int8_t",
        DType::U8 | DType::Bool => "uint8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::U32 => "uint32_t",
        DType::I64 => "int64_t",
        DType::U64 => "uint64_t",
        _ => "uint8_t", // block-quantized: raw bytes
    }
}

/// The Rust element type of a dtype: f16/bf16 are their bits, bool is one byte 0/1,
/// block-quantized types are raw bytes.
fn rust_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 | DType::BF16 | DType::U16 => "u16",
        DType::I8 => "i8",
        DType::U8 | DType::Bool => "u8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::U64 => "u64",
        _ => "u8", // block-quantized: raw bytes
    }
}

/// The `rlx_rt::DType` variant of a dtype.
fn rt_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::F64 => "F64",
        DType::I8 => "I8",
        DType::U8 => "U8",
        DType::I16 => "I16",
        DType::U16 => "U16",
        DType::I32 => "I32",
        DType::U32 => "U32",
        DType::I64 => "I64",
        DType::U64 => "U64",
        DType::Bool => "Bool",
        DType::Q8_0 => "Q8_0",
        DType::Q4_0 => "Q4_0",
        // runtime-min has no code for the other GGUF block types yet; no importer makes them ports.
        _ => "U8",
    }
}

fn elems(p: &PortInfo) -> usize {
    p.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

fn bytes(p: &PortInfo) -> usize {
    let (n, b) = p.dtype.block();
    elems(p).div_ceil(n).saturating_mul(b)
}

/// `[2, 3]` (`[]` for a scalar).
fn shape_text(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

/// `NAME.h`: the C API of the artifact.
pub fn c_header(a: &ArtifactInfo) -> String {
    let n = &a.name;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "/* {n}.h: C API of the model {} compiled by rlxc {}.",
        comment_text(&a.model_file),
        comment_text(&a.rlxc_version)
    );
    let _ = writeln!(
        h,
        " * Target {}, cpu {}, features {}.",
        comment_text(&a.triple),
        comment_text(&a.cpu),
        comment_text(&a.features)
    );
    let _ = writeln!(h, " * Link: {}", comment_text(&a.link_line));
    let _ = writeln!(h, " * Generated by rlxc; do not edit. */");
    let guard = format!("RLXC_{}_H", n.to_ascii_uppercase());
    let st = a.state.as_ref();
    let entry = if st.is_some() { "step" } else { "run" };
    if st.is_some() {
        let _ = writeln!(h, "#ifndef {guard}\n#define {guard}\n\n#include <stdint.h>\n#include <string.h>\n");
    } else {
        let _ = writeln!(h, "#ifndef {guard}\n#define {guard}\n\n#include <stdint.h>\n");
    }
    let _ = writeln!(h, "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");

    let _ = writeln!(h, "/* Scratch memory that {n}_{entry} needs: size in bytes and alignment. */");
    let _ = writeln!(h, "#define {n}_ARENA_BYTES {}", a.arena_bytes);
    let _ = writeln!(h, "#define {n}_ARENA_ALIGN {ARENA_ALIGN}");
    if let Some(st) = st {
        if llm_step_shape(a).is_some() {
            let _ = writeln!(h, "/* State the model keeps between calls (its KV cache), owned by the caller: size in bytes and");
            let _ = writeln!(h, " * alignment. Zero it ({n}_reset) before the first call of a new sequence. */");
        } else {
            let _ = writeln!(h, "/* State the model keeps between calls (e.g. a training step's parameters and optimizer state),");
            let _ = writeln!(h, " * owned by the caller: size in bytes and alignment. Each tensor lies at its offset, dense");
            let _ = writeln!(h, " * row-major little-endian: write initial values there, read updated ones back. */");
        }
        let _ = writeln!(h, "#define {n}_STATE_BYTES {}", st.bytes);
        let _ = writeln!(h, "#define {n}_STATE_ALIGN {ARENA_ALIGN}");
        let _ = writeln!(h, "#define {n}_NUM_STATE {}", st.tensors.len());
        for (i, (p, off)) in st.tensors.iter().enumerate() {
            let _ = writeln!(h, "/* state {i} {}: {} {} at byte {off} of the state. */", comment_text(&c_string(&p.name)), p.dtype, shape_text(&p.shape));
            let _ = writeln!(h, "#define {n}_STATE_{i}_OFFSET {off}");
            let _ = writeln!(h, "#define {n}_STATE_{i}_NAME {}", c_string(&p.name));
            let _ = writeln!(h, "#define {n}_STATE_{i}_BYTES {}", bytes(p));
        }
        if let Some((chunk, context, vocab)) = llm_step_shape(a) {
            let _ = writeln!(h, "/* Positions the state holds (--dim context), tokens per call (--dim chunk), vocabulary size (the\n * logits output: {n}_VOCAB floats, the next-token logits after the chunk's last row). */");
            let _ = writeln!(h, "#define {n}_MAX_CONTEXT {context}");
            let _ = writeln!(h, "#define {n}_MAX_CHUNK {chunk}");
            let _ = writeln!(h, "#define {n}_VOCAB {vocab}");
        }
    }
    if a.has_set_weights() {
        let _ = writeln!(h, "/* Size of {n}.weights.bin, passed to {n}_set_weights, and the alignment it needs. */");
        let _ = writeln!(h, "#define {n}_WEIGHTS_BYTES {}", a.weights_bytes);
        let _ = writeln!(h, "#define {n}_WEIGHTS_ALIGN {WEIGHTS_ALIGN}");
    } else {
        let _ = writeln!(h, "/* Size of the weights, embedded in {n}.o. */");
        let _ = writeln!(h, "#define {n}_WEIGHTS_BYTES {}", a.weights_bytes);
    }
    let _ = writeln!(h, "#define {n}_NUM_INPUTS {}", a.inputs.len());
    let _ = writeln!(h, "#define {n}_NUM_OUTPUTS {}\n", a.outputs.len());

    for (kind, ports) in [("INPUT", &a.inputs), ("OUTPUT", &a.outputs)] {
        for (i, p) in ports.iter().enumerate() {
            let _ = writeln!(
                h,
                "/* {} {i} {}: {} {}, C element type {}. */",
                kind.to_ascii_lowercase(),
                comment_text(&c_string(&p.name)),
                p.dtype,
                shape_text(&p.shape),
                c_type(p.dtype)
            );
            let _ = writeln!(h, "#define {n}_{kind}_{i}_NAME {}", c_string(&p.name));
            let _ = writeln!(h, "#define {n}_{kind}_{i}_ELEMS {}", elems(p));
            let _ = writeln!(h, "#define {n}_{kind}_{i}_BYTES {}\n", bytes(p));
        }
    }
    for b in &a.bounded {
        let (i, axis, c) = (b.output, b.axis, b.count);
        let bound = a.outputs.get(i as usize).and_then(|p| p.shape.get(axis as usize)).copied().unwrap_or(0);
        let _ = writeln!(h, "/* output {i} has a data-dependent length along axis {axis}: its buffer holds the bound, {bound}");
        let _ = writeln!(h, " * slices, of which the first (int64 output {c}) are the result; the rest is padding. */");
        let _ = writeln!(h, "#define {n}_OUTPUT_{i}_BOUNDED_AXIS {axis}");
        let _ = writeln!(h, "#define {n}_OUTPUT_{i}_BOUND {bound}");
        let _ = writeln!(h, "#define {n}_OUTPUT_{i}_COUNT_OUTPUT {c}\n");
    }

    let _ = writeln!(h, "/* Return codes of {n}_{entry}. */");
    let state_codes = if st.is_some() { rlx_ir::lir::STATE_ERROR_CODES } else { &[] };
    let comm_codes = if a.comm { rlx_ir::lir::COMM_ERROR_CODES } else { &[] };
    let loop_codes = if a.loops { rlx_ir::lir::LOOP_ERROR_CODES } else { &[] };
    for &(code, suffix, meaning) in ERROR_CODES.iter().chain(state_codes).chain(comm_codes).chain(loop_codes) {
        let macro_name = if code == 0 { format!("{n}_OK") } else { format!("{n}_ERR_{suffix}") };
        let _ = writeln!(h, "#define {macro_name} {code} /* {} */", meaning.replace("NAME", n));
    }

    if st.is_some() {
        let _ = writeln!(h, "\n/* Runs one step of the model: reads and updates the state.");
    } else {
        let _ = writeln!(h, "\n/* Runs the model once.");
    }
    let _ = writeln!(h, " *");
    let _ = writeln!(
        h,
        " * inputs:  {n}_NUM_INPUTS pointers in manifest order; input i points to {n}_INPUT_i_BYTES bytes,"
    );
    let _ = writeln!(h, " *          a dense row-major tensor of its C element type, aligned to that type.");
    let _ = writeln!(
        h,
        " * outputs: {n}_NUM_OUTPUTS pointers in manifest order, likewise ({n}_OUTPUT_i_BYTES bytes each)."
    );
    let _ = writeln!(
        h,
        " * arena:   {n}_ARENA_BYTES bytes of scratch memory aligned to {n}_ARENA_ALIGN (16); its contents"
    );
    let _ =
        writeln!(h, " *          need no initialization and are overwritten. May be NULL when {n}_ARENA_BYTES is 0.");
    if st.is_some() {
        let _ = writeln!(h, " * state:   {n}_STATE_BYTES bytes aligned to {n}_STATE_ALIGN (16), kept by the caller between");
        let _ = writeln!(h, " *          calls: each call reads it and updates it in place. Zero it to start over;");
        let _ = writeln!(h, " *          calls on one state run one at a time.");
    }
    let _ = writeln!(h, " * Inputs, outputs and the arena must not overlap.");
    if a.has_set_weights() {
        let _ = writeln!(h, " * Call {n}_set_weights once before the first run.");
    }
    let _ = writeln!(h, " * Thread safety: calls may run concurrently if each has its own arena and outputs.");
    let _ =
        writeln!(h, " * Parallel loops run through rlx_rt_parallel_for, from librlx_rt.a (threads: RLX_NUM_THREADS).");
    let _ = writeln!(h, " * Returns {n}_OK, or one of the {n}_ERR_* codes above. */");
    if st.is_some() {
        let _ = writeln!(h, "int {n}_step(void *arena, void *state, const void *const *inputs, void *const *outputs);");
        if llm_step_shape(a).is_some() {
            h.push_str(&llm_helpers(n));
        }
    } else {
        let _ = writeln!(h, "int {n}_run(void *arena, const void *const *inputs, void *const *outputs);");
    }
    if a.has_set_weights() {
        let _ =
            writeln!(h, "\n/* Sets the weights: the contents of {n}.weights.bin, {n}_WEIGHTS_BYTES bytes aligned to");
        let _ = writeln!(h, " * {n}_WEIGHTS_ALIGN. The blob is not copied: it must stay valid and unchanged while any");
        let _ = writeln!(h, " * {n}_run may run. Not thread-safe: call it before runs start, not during them. */");
        let _ = writeln!(h, "void {n}_set_weights(const void *weights);");
    }
    let _ = writeln!(h, "\n#ifdef __cplusplus\n}} /* extern \"C\" */\n#endif\n\n#endif /* {guard} */");
    h
}

/// The header's inline helpers for a language-model step: reset, prefill of a chunk, decode of one token.
fn llm_helpers(n: &str) -> String {
    format!(
        "
/* {n}_prefill and {n}_decode return this when n is outside 1..{n}_MAX_CHUNK, a position outside
 * 0..{n}_MAX_CONTEXT-1, a token outside 0..{n}_VOCAB-1, or a pointer is NULL. */
#define {n}_ERR_BAD_STEP 10

/* Zeroes the state: call it before the first token of a new sequence. */
static inline void {n}_reset(void *state) {{ memset(state, 0, {n}_STATE_BYTES); }}

/* Prefill: n tokens (1..{n}_MAX_CHUNK) at positions start..start+n-1, their keys and values written
 * into the state. Positions before start must already be in the state (earlier calls).
 * logits: {n}_VOCAB floats, the next-token logits after tokens[n-1] (only the chunk's last row is
 * computed). The graph always runs {n}_MAX_CHUNK rows: the tokens go in the last n rows, the padding
 * rows before them have position {n}_MAX_CONTEXT, which writes nothing to the state. */
static inline int {n}_prefill(void *arena, void *state, const int64_t *tokens, int64_t n, int64_t start, float *logits) {{
  int64_t t[{n}_MAX_CHUNK], p[{n}_MAX_CHUNK];
  const void *in[2];
  void *out[1];
  int64_t i;
  if (!tokens || !logits || n < 1 || n > {n}_MAX_CHUNK || start < 0 || start > {n}_MAX_CONTEXT - n) return {n}_ERR_BAD_STEP;
  for (i = 0; i < {n}_MAX_CHUNK; i++) {{
    int64_t k = i - ({n}_MAX_CHUNK - n); /* the token in row i, when k >= 0 */
    if (k >= 0 && (tokens[k] < 0 || tokens[k] >= {n}_VOCAB)) return {n}_ERR_BAD_STEP;
    t[i] = k >= 0 ? tokens[k] : 0;
    p[i] = k >= 0 ? start + k : {n}_MAX_CONTEXT;
  }}
  in[0] = t;
  in[1] = p;
  out[0] = logits;
  return {n}_step(arena, state, in, out);
}}

/* Decode: one token at `position`; its next-token logits in `logits` ({n}_VOCAB floats). */
static inline int {n}_decode(void *arena, void *state, int64_t token, int64_t position, float *logits) {{
  return {n}_prefill(arena, state, &token, 1, position, logits);
}}
"
    )
}

/// Rust keywords (strict and reserved, every edition): a port named so gets a trailing `_`.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate", "do", "dyn", "else",
    "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod",
    "move", "mut", "override", "priv", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait",
    "true", "try", "type", "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Field names for ports: sanitized, never a keyword or `_`, unique (later duplicates get `_2`, `_3` …).
fn rust_fields(ports: &[PortInfo]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in ports {
        let mut base = sanitize_ident(&p.name);
        if base == "_" || RUST_KEYWORDS.contains(&base.as_str()) {
            base.push('_');
        }
        let mut name = base.clone();
        let mut k = 2;
        while out.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        out.push(name);
    }
    out
}

/// `NAME.rs`: a Rust module for a crate that depends on `rlx-rt`, `include!`d or `mod`-ed.
/// Compiles in `#![no_std]` crates and in editions 2021 and 2024.
pub fn rust_binding(a: &ArtifactInfo) -> String {
    let n = &a.name;
    let mut r = String::new();
    let _ = writeln!(
        r,
        "// {n}.rs: Rust binding of the model {} compiled by rlxc {}.",
        comment_text(&a.model_file),
        comment_text(&a.rlxc_version)
    );
    let _ = writeln!(
        r,
        "// Target {}, cpu {}, features {}.",
        comment_text(&a.triple),
        comment_text(&a.cpu),
        comment_text(&a.features)
    );
    let _ =
        writeln!(r, "// Generated by rlxc; do not edit. Needs the `rlx-rt` crate and {n}.o linked into the program;");
    let _ = writeln!(r, "// use it as `mod {n} {{ include!(\"{n}.rs\"); }}` (or `#[path = \"{n}.rs\"] mod {n};`).\n");

    let _ = writeln!(r, "#[allow(dead_code)]\nunsafe extern \"C\" {{");
    let st = a.state.as_ref();
    if st.is_some() {
        let _ = writeln!(r, "    fn {n}_step(arena: *mut core::ffi::c_void, state: *mut core::ffi::c_void, inputs: *const *const core::ffi::c_void, outputs: *const *mut core::ffi::c_void) -> core::ffi::c_int;");
    } else {
        let _ = writeln!(r, "    fn {n}_run(arena: *mut core::ffi::c_void, inputs: *const *const core::ffi::c_void, outputs: *const *mut core::ffi::c_void) -> core::ffi::c_int;");
    }
    if a.has_set_weights() {
        let _ = writeln!(r, "    fn {n}_set_weights(weights: *const core::ffi::c_void);");
    }
    let _ = writeln!(r, "}}\n");

    let _ = writeln!(r, "/// Bytes of scratch memory [`run`] needs, aligned to [`ARENA_ALIGN`].");
    let _ = writeln!(r, "#[allow(dead_code)]\npub const ARENA_BYTES: usize = {};", a.arena_bytes);
    let _ = writeln!(r, "/// Alignment the arena must have, in bytes.");
    let _ = writeln!(r, "#[allow(dead_code)]\npub const ARENA_ALIGN: usize = rlx_rt::ARENA_ALIGN;");
    let _ = writeln!(
        r,
        "/// Bytes of weights ({}).",
        if a.has_set_weights() { "external: see [`set_weights`]" } else { "embedded in the object" }
    );
    let _ = writeln!(r, "#[allow(dead_code)]\npub const WEIGHTS_BYTES: usize = {};", a.weights_bytes);
    if a.has_set_weights() {
        let _ = writeln!(r, "/// Alignment the external weights must have, in bytes.");
        let _ = writeln!(r, "#[allow(dead_code)]\npub const WEIGHTS_ALIGN: usize = {WEIGHTS_ALIGN};");
    }
    let _ = writeln!(r, "/// An arena of the right size and alignment, for a `static` or (when small) the stack.");
    let _ = writeln!(r, "#[allow(dead_code)]\npub type Arena = rlx_rt::Arena<ARENA_BYTES>;\n");
    if let Some(st) = st {
        let _ = writeln!(r, "/// Bytes of state (a KV cache, or a training step's parameters and optimizer state) [`step`] reads and");
        let _ = writeln!(r, "/// updates in place, aligned to [`ARENA_ALIGN`]; the caller keeps it between calls.");
        let _ = writeln!(r, "#[allow(dead_code)]\npub const STATE_BYTES: usize = {};", st.bytes);
        let _ = writeln!(r, "/// The state's tensors: spec and byte offset in the state (dense row-major, little-endian).");
        let _ = writeln!(r, "#[allow(dead_code)]\npub const STATE_TENSORS: [(rlx_rt::TensorSpec, usize); {}] = [", st.tensors.len());
        for (p, off) in &st.tensors {
            let _ = writeln!(r, "    (rlx_rt::TensorSpec {{ name: {:?}, dtype: rlx_rt::DType::{}, shape: &{} }}, {off}),", p.name, rt_dtype(p.dtype), shape_text(&p.shape));
        }
        let _ = writeln!(r, "];");
        let _ = writeln!(r, "/// A state region of the right size and alignment (zeroed by `State::new()`).");
        let _ = writeln!(r, "#[allow(dead_code)]\npub type State = rlx_rt::Arena<STATE_BYTES>;");
        if let Some((chunk, context, vocab)) = llm_step_shape(a) {
            let _ = writeln!(r, "/// Positions the state holds, tokens per call, vocabulary size. `logits` is the next-token");
            let _ = writeln!(r, "/// logits after the chunk's last row only: put n tokens in the last n rows of `tokens`.");
            let _ = writeln!(r, "#[allow(dead_code)]\npub const MAX_CONTEXT: usize = {context};");
            let _ = writeln!(r, "#[allow(dead_code)]\npub const MAX_CHUNK: usize = {chunk};");
            let _ = writeln!(r, "#[allow(dead_code)]\npub const VOCAB: usize = {vocab};");
        }
        r.push('\n');
    }

    if !a.bounded.is_empty() {
        let _ = writeln!(r, "/// Outputs of data-dependent length: (output, axis, count output). The output's buffer holds its");
        let _ = writeln!(r, "/// static shape (the bound along `axis`); the i64 count output says how many slices along `axis`");
        let _ = writeln!(r, "/// are the result; the rest is padding.");
        let list: Vec<String> = a.bounded.iter().map(|b| format!("({}, {}, {})", b.output, b.axis, b.count)).collect();
        let _ = writeln!(r, "#[allow(dead_code)]\npub const BOUNDED: [(usize, usize, usize); {}] = [{}];\n", list.len(), list.join(", "));
    }
    let fields = [rust_fields(&a.inputs), rust_fields(&a.outputs)];
    for (k, (konst, ports)) in [("INPUTS", &a.inputs), ("OUTPUTS", &a.outputs)].into_iter().enumerate() {
        let _ = writeln!(r, "/// The {}, in manifest order.", if k == 0 { "inputs" } else { "outputs" });
        let _ = writeln!(r, "#[allow(dead_code)]\npub const {konst}: [rlx_rt::TensorSpec; {}] = [", ports.len());
        for p in ports {
            let _ = writeln!(
                r,
                "    rlx_rt::TensorSpec {{ name: {:?}, dtype: rlx_rt::DType::{}, shape: &{} }},",
                p.name,
                rt_dtype(p.dtype),
                shape_text(&p.shape)
            );
        }
        let _ = writeln!(r, "];\n");
    }

    for (k, (strukt, ports)) in [("Inputs", &a.inputs), ("Outputs", &a.outputs)].into_iter().enumerate() {
        let (what, mutability) = if k == 0 { ("input", "") } else { ("output", "mut ") };
        let _ = writeln!(r, "/// The {what} tensors of one run, dense row-major, each exactly its spec's length.");
        if ports.is_empty() {
            let _ = writeln!(r, "#[allow(dead_code)]\n#[derive(Default)]");
            let _ = writeln!(r, "pub struct {strukt}<'a> {{\n    _none: core::marker::PhantomData<&'a ()>,\n}}\n");
            continue;
        }
        let _ = writeln!(r, "#[allow(dead_code, non_snake_case)]");
        let _ = writeln!(r, "pub struct {strukt}<'a> {{");
        for (i, (p, f)) in ports.iter().zip(&fields[k]).enumerate() {
            let _ = writeln!(
                r,
                "    /// {what} {i} `{}`: {} {}.",
                comment_text(&format!("{:?}", p.name)),
                p.dtype,
                shape_text(&p.shape)
            );
            let _ = writeln!(r, "    pub {f}: &'a {mutability}[{}],", rust_type(p.dtype));
        }
        let _ = writeln!(r, "}}\n");
    }

    let _ = writeln!(
        r,
        "/// Runs the model once: checks the arena (length, {ARENA_ALIGN}-byte alignment) and every slice length,"
    );
    if st.is_some() {
        let _ = writeln!(r, "/// and the state (length, alignment), then calls `{n}_step`, which updates the state in place.");
        let _ = writeln!(r, "/// Never panics. Concurrent calls need separate arenas and states.");
        let _ = writeln!(r, "#[allow(dead_code)]\npub fn step(arena: &mut [u8], state: &mut [u8], inputs: &Inputs<'_>, outputs: &mut Outputs<'_>) -> Result<(), rlx_rt::Error> {{");
        let _ = writeln!(r, "    let state = rlx_rt::state_ptr(state, STATE_BYTES)?;");
    } else {
        let _ = writeln!(r, "/// then calls `{n}_run`. Never panics. Concurrent runs need separate arenas.");
        let _ = writeln!(r, "#[allow(dead_code)]\npub fn run(arena: &mut [u8], inputs: &Inputs<'_>, outputs: &mut Outputs<'_>) -> Result<(), rlx_rt::Error> {{");
    }
    let _ = writeln!(r, "    let arena = rlx_rt::arena_ptr(arena, ARENA_BYTES)?;");
    for (i, f) in fields[0].iter().enumerate() {
        let _ = writeln!(r, "    rlx_rt::check_input({i}, &INPUTS[{i}], core::mem::size_of_val(inputs.{f}))?;");
    }
    for (i, f) in fields[1].iter().enumerate() {
        let _ = writeln!(r, "    rlx_rt::check_output({i}, &OUTPUTS[{i}], core::mem::size_of_val(outputs.{f}))?;");
    }
    let ins: Vec<String> = fields[0].iter().map(|f| format!("inputs.{f}.as_ptr().cast()")).collect();
    let outs: Vec<String> = fields[1].iter().map(|f| format!("outputs.{f}.as_mut_ptr().cast()")).collect();
    if a.inputs.is_empty() {
        let _ = writeln!(r, "    let _ = inputs;");
    }
    let _ = writeln!(r, "    let ins: [*const core::ffi::c_void; {}] = [{}];", ins.len(), ins.join(", "));
    let _ = writeln!(r, "    let outs: [*mut core::ffi::c_void; {}] = [{}];", outs.len(), outs.join(", "));
    let _ = writeln!(
        r,
        "    // SAFETY: the arena and every tensor were checked against the manifest above, and the borrows"
    );
    let _ = writeln!(r, "    // keep them alive and non-overlapping for the call.");
    if st.is_some() {
        let _ = writeln!(r, "    let code = unsafe {{ {n}_step(arena.cast(), state.cast(), ins.as_ptr(), outs.as_ptr()) }};");
    } else {
        let _ = writeln!(r, "    let code = unsafe {{ {n}_run(arena.cast(), ins.as_ptr(), outs.as_ptr()) }};");
    }
    let _ = writeln!(r, "    rlx_rt::Error::from_code(code).map_or(Ok(()), Err)");
    let _ = writeln!(r, "}}");

    if a.has_set_weights() {
        let _ =
            writeln!(r, "\n/// Hands the object its weights (the contents of `{n}.weights.bin`); checks the length");
        let _ = writeln!(
            r,
            "/// ([`WEIGHTS_BYTES`]) and alignment ([`WEIGHTS_ALIGN`]). Until it succeeds, [`run`] returns"
        );
        let _ = writeln!(r, "/// [`rlx_rt::Error::NullWeights`].");
        let _ = writeln!(r, "///\n/// # Safety");
        let _ = writeln!(r, "/// Must not be called while a [`run`] may be running on another thread.");
        let _ = writeln!(
            r,
            "#[allow(dead_code)]\npub unsafe fn set_weights(weights: &'static [u8]) -> Result<(), rlx_rt::Error> {{"
        );
        let _ = writeln!(r, "    rlx_rt::check_weights(WEIGHTS_BYTES, weights.len())?;");
        let _ = writeln!(r, "    rlx_rt::check_aligned(weights.as_ptr(), WEIGHTS_ALIGN)?;");
        let _ = writeln!(
            r,
            "    // SAFETY: the blob is 'static and of the right size; the caller excludes concurrent runs."
        );
        let _ = writeln!(r, "    unsafe {{ {n}_set_weights(weights.as_ptr().cast()) }};");
        let _ = writeln!(r, "    Ok(())");
        let _ = writeln!(r, "}}");
    }
    r
}

#[cfg(test)]
mod tests {
    //! The header is compiled as C and C++ by `cc`; the binding is compiled by `rustc` directly,
    //! against an `rlx_rt` rlib built from runtime-min's source (a no_std crate with no
    //! dependencies, so one rustc call builds it): no cargo, no target-directory paths. A C stub
    //! that implements `NAME_run` from the generated header is then linked with the binding into
    //! a small program that exercises every check. Warnings are denied everywhere: generated
    //! code must not warn in its users' crates (hence `#[allow(dead_code)]` on each item, as a
    //! binary rarely uses every item).

    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn port(name: &str, dtype: DType, shape: &[usize]) -> PortInfo {
        PortInfo { name: name.to_string(), dtype, shape: shape.to_vec() }
    }

    /// External weights, odd names, several dtypes.
    fn sample() -> ArtifactInfo {
        ArtifactInfo {
            name: "my_model".into(),
            inputs: vec![
                port("input:0", DType::F32, &[2, 3]),
                port("ids", DType::I64, &[2]),
                port("température", DType::Bool, &[2]),
                port("type", DType::U8, &[]),
            ],
            outputs: vec![
                port("out\"put\\*/??/", DType::F32, &[2, 3]),
                port("out'put", DType::F16, &[1]),
                port("out_put", DType::F64, &[0]),
            ],
            arena_bytes: 256,
            weights_bytes: 64,
            external_weights: true,
            triple: "x86_64-unknown-linux-gnu".into(),
            cpu: "x86-64".into(),
            features: "+sse2".into(),
            rlxc_version: "0.1.0".into(),
            model_file: "weird */ name\n.onnx".into(),
            state: None,
            comm: false,
            loops: false,
            bounded: vec![],
            link_line: "my_model.o librlx_rt.a -lpthread -lm -ldl -lc".into(),
        }
    }

    /// No arena, embedded weights, no inputs.
    fn minimal() -> ArtifactInfo {
        ArtifactInfo {
            name: "m_0".into(),
            inputs: vec![],
            outputs: vec![port("y", DType::F32, &[4])],
            arena_bytes: 0,
            weights_bytes: 16,
            external_weights: false,
            model_file: "m.onnx".into(),
            ..sample()
        }
    }

    /// A training step's state: parameters, a velocity, a scalar step counter (names with dots).
    fn stateful() -> ArtifactInfo {
        ArtifactInfo {
            name: "mlp_train_step".into(),
            inputs: vec![port("x", DType::F32, &[8, 4]), port("labels", DType::I64, &[8])],
            outputs: vec![port("loss", DType::F32, &[])],
            external_weights: false,
            state: Some(StateInfo {
                bytes: 160,
                tensors: vec![(port("w1", DType::F32, &[4, 3]), 0), (port("w1.velocity", DType::F32, &[4, 3]), 48), (port("step", DType::F32, &[]), 96)],
            }),
            ..sample()
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rlxc-artifact-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Runs a command; `None` when the program is not installed (the test is then skipped).
    fn run_tool(cmd: &mut Command) -> Option<()> {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipped: {cmd:?} not found");
                None
            }
            Err(e) => panic!("{cmd:?}: {e}"),
            Ok(o) => {
                assert!(
                    o.status.success(),
                    "{cmd:?} failed:\n{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                Some(())
            }
        }
    }

    fn cc() -> String {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    }

    /// runtime-min's source, found from this crate upwards.
    fn runtime_min_src() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|d| d.join("runtime-min/src/lib.rs"))
            .find(|p| p.is_file())
            .expect("runtime-min/src/lib.rs above this crate")
    }

    /// Builds `librlx_rt.rlib` (no_std, serial parallel_for) into `dir`.
    fn build_rlx_rt(dir: &Path) -> Option<()> {
        run_tool(
            Command::new("rustc")
                .args(["--edition", "2021", "--crate-type", "rlib", "--crate-name", "rlx_rt", "-O", "--out-dir"])
                .arg(dir)
                .arg(runtime_min_src()),
        )
    }

    #[test]
    fn sanitize() {
        assert_eq!(sanitize_ident("mlp"), "mlp");
        assert_eq!(sanitize_ident("my-model.v2"), "my_model_v2");
        assert_eq!(sanitize_ident("9lives"), "m_9lives");
        assert_eq!(sanitize_ident(""), "m");
        assert_eq!(sanitize_ident("température"), "temp_rature");
        assert_eq!(sanitize_ident("a\"b"), "a_b");
        assert_eq!(sanitize_ident("_x"), "_x");
        let f = rust_fields(&[
            port("type", DType::F32, &[]),
            port("a.b", DType::F32, &[]),
            port("a_b", DType::F32, &[]),
            port("_", DType::F32, &[]),
            port("a-b", DType::F32, &[]),
        ]);
        assert_eq!(f, ["type_", "a_b", "a_b_2", "__", "a_b_3"]);
    }

    #[test]
    fn names_are_escaped() {
        let a = sample();
        let h = c_header(&a);
        assert!(h.contains(r#"#define my_model_INPUT_2_NAME "temp\303\251rature""#), "{h}");
        assert!(h.contains(r#"#define my_model_OUTPUT_0_NAME "out\"put\\*/\?\?/""#), "{h}");
        assert!(h.contains("weird *\\/ name\\u{a}.onnx"), "{h}");
        assert!(h.is_ascii());
        // The only `*/` are the ends of comments: none inside names.
        for line in h.lines() {
            assert!(line.matches("*/").count() <= 1 && !line.contains("#define my_model_OUTPUT_0_NAME /*"), "{line}");
        }
        let r = rust_binding(&a);
        assert!(r.contains(r#"name: "out\"put\\*/??/""#), "{r}");
        assert!(r.contains(r#"name: "température""#));
        assert!(r.contains("pub temp_rature: &'a [u8],"));
        assert!(r.contains("pub type_: &'a [u8],"));
        assert!(r.contains("pub out_put_2: &'a mut [f64],"));
        assert!(!r.lines().any(|l| l.starts_with("//") && l.contains('\n')));
        assert!(r.contains("// my_model.rs: Rust binding of the model weird *\\/ name\\u{a}.onnx"));
    }

    #[test]
    fn header_contents_and_determinism() {
        let a = sample();
        let h = c_header(&a);
        assert_eq!(h, c_header(&a.clone()));
        for want in [
            "#define my_model_ARENA_BYTES 256",
            "#define my_model_ARENA_ALIGN 16",
            "#define my_model_WEIGHTS_BYTES 64",
            "#define my_model_NUM_INPUTS 4",
            "#define my_model_NUM_OUTPUTS 3",
            "#define my_model_INPUT_0_ELEMS 6",
            "#define my_model_INPUT_0_BYTES 24",
            "#define my_model_INPUT_3_ELEMS 1",
            "#define my_model_OUTPUT_1_BYTES 2",
            "#define my_model_OUTPUT_2_BYTES 0",
            "#define my_model_OK 0",
            "#define my_model_ERR_NULL_WEIGHTS 7",
            "int my_model_run(void *arena, const void *const *inputs, void *const *outputs);",
            "void my_model_set_weights(const void *weights);",
            "f32 [2, 3], C element type float",
            "bool [2], C element type uint8_t",
            "u8 [], C element type uint8_t",
        ] {
            assert!(h.contains(want), "missing {want:?} in\n{h}");
        }
        let m = c_header(&minimal());
        assert!(!m.contains("set_weights(") && m.contains("#define m_0_ARENA_BYTES 0"));
        let external_but_empty = ArtifactInfo { weights_bytes: 0, ..sample() };
        assert!(!c_header(&external_but_empty).contains("set_weights("));
        assert!(!rust_binding(&external_but_empty).contains("set_weights"));
    }

    #[test]
    fn header_compiles_as_c_and_cpp() {
        let dir = tmpdir("header");
        for a in [sample(), minimal()] {
            let h = dir.join(format!("{}.h", a.name));
            std::fs::write(&h, c_header(&a)).unwrap();
            let main = dir.join(format!("{}_use.c", a.name));
            // Include twice (guard), and use every macro kind.
            std::fs::write(
                &main,
                format!(
                    "#include \"{n}.h\"\n#include \"{n}.h\"\nint use(void *arena, const void *const *i, void *const *o) {{\n  \
                     const char *name = {n}_OUTPUT_0_NAME; (void)name;\n  \
                     return {n}_run(arena, i, o) == {n}_OK ? {n}_ARENA_BYTES + {n}_NUM_INPUTS + {n}_OUTPUT_0_BYTES : {n}_ERR_NULL_ARENA;\n}}\n",
                    n = a.name
                ),
            )
            .unwrap();
            for (lang, std) in [("c", "-std=c99"), ("c", "-std=c11"), ("c++", "-std=c++11")] {
                let ok = run_tool(
                    Command::new(cc())
                        .args(["-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-pedantic", std, "-x", lang])
                        .arg(&main),
                );
                if ok.is_none() {
                    return;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The C stub behind `sample()`: y0 = 2*x0 + w[0]; checks like the real object; calls the
    /// runtime's parallel_for so the Rust link resolves it from the rlx_rt rlib.
    const STUB: &str = r#"
#include "my_model.h"
#include <string.h>
void rlx_rt_parallel_for(void (*)(const void *, int64_t, int64_t), const void *, int64_t, int64_t);
static const float *W;
void my_model_set_weights(const void *w) { W = (const float *)w; }
struct ctx { const float *x; float *y; };
static void body(const void *c, int64_t s, int64_t e) {
  const struct ctx *k = (const struct ctx *)c;
  for (int64_t i = s; i < e; i++) k->y[i] = 2.0f * k->x[i] + W[0];
}
int my_model_run(void *arena, const void *const *inputs, void *const *outputs) {
  if (!arena) return my_model_ERR_NULL_ARENA;
  if ((uintptr_t)arena % my_model_ARENA_ALIGN) return my_model_ERR_MISALIGNED_ARENA;
  if (!inputs) return my_model_ERR_NULL_INPUTS;
  if (!outputs) return my_model_ERR_NULL_OUTPUTS;
  for (int i = 0; i < my_model_NUM_INPUTS; i++) if (!inputs[i]) return my_model_ERR_NULL_INPUT;
  for (int i = 0; i < my_model_NUM_OUTPUTS; i++) if (!outputs[i]) return my_model_ERR_NULL_OUTPUT;
  if (!W) return my_model_ERR_NULL_WEIGHTS;
  memset(arena, 0xab, my_model_ARENA_BYTES);
  struct ctx k = { (const float *)inputs[0], (float *)outputs[0] };
  rlx_rt_parallel_for(body, &k, my_model_OUTPUT_0_ELEMS, 2);
  ((uint16_t *)outputs[1])[0] = 0x3c00;
  return my_model_OK;
}
"#;

    /// Uses the binding of `sample()` against `STUB`; panics (non-zero exit) on a wrong answer.
    const USE: &str = r#"
mod my_model { include!("my_model.rs"); }
use rlx_rt::Error;

#[repr(C, align(16))]
struct Weights([u8; 64]);
static WEIGHTS: Weights = {
    let mut w = [0u8; 64];
    let one = 0.5f32.to_ne_bytes();
    w[0] = one[0]; w[1] = one[1]; w[2] = one[2]; w[3] = one[3];
    Weights(w)
};

fn main() {
    let mut arena = Box::new(my_model::Arena::new());
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let (ids, t, ty) = ([7i64, 8], [1u8, 0], [3u8]);
    let (mut y, mut h, mut e) = ([0f32; 6], [0u16; 1], [0f64; 0]);
    let inputs = my_model::Inputs { input_0: &x, ids: &ids, temp_rature: &t, type_: &ty };
    macro_rules! outs { () => { my_model::Outputs { out_put______: &mut y, out_put: &mut h, out_put_2: &mut e } } }
    assert_eq!(my_model::run(arena.as_mut_slice(), &inputs, &mut outs!()), Err(Error::NullWeights));
    assert_eq!(unsafe { my_model::set_weights(&WEIGHTS.0[..60]) }, Err(Error::WeightsLength { expected: 64, got: 60 }));
    assert_eq!(unsafe { my_model::set_weights(&WEIGHTS.0[4..]) }, Err(Error::WeightsLength { expected: 64, got: 60 }));
    assert_eq!(unsafe { my_model::set_weights(&WEIGHTS.0) }, Ok(()));
    assert_eq!(my_model::run(&mut arena.as_mut_slice()[16..], &inputs, &mut outs!()), Err(Error::ArenaTooSmall { need: 256, got: 240 }));
    let mut big = vec![0u8; 300];
    let off = (16 - big.as_ptr() as usize % 16) % 16 + 1;
    assert_eq!(my_model::run(&mut big[off..off + 256], &inputs, &mut outs!()), Err(Error::MisalignedArena));
    let short = my_model::Inputs { ids: &ids[..1], ..inputs };
    assert_eq!(my_model::run(arena.as_mut_slice(), &short, &mut outs!()), Err(Error::InputLength { index: 1, expected: 16, got: 8 }));
    assert_eq!(
        my_model::run(arena.as_mut_slice(), &inputs, &mut my_model::Outputs { out_put______: &mut y[..5], out_put: &mut h, out_put_2: &mut e }),
        Err(Error::OutputLength { index: 0, expected: 24, got: 20 })
    );
    assert_eq!(y, [0.0; 6]);
    assert_eq!(my_model::run(arena.as_mut_slice(), &inputs, &mut outs!()), Ok(()));
    assert_eq!(y, [2.5, 4.5, 6.5, 8.5, 10.5, 12.5]);
    assert_eq!(h, [0x3c00]);
    assert_eq!(arena.as_mut_slice()[255], 0xab);
    assert_eq!(my_model::INPUTS[2].bytes(), 2);
    assert_eq!(my_model::OUTPUTS.len(), 3);
    println!("binding ok");
}
"#;

    #[test]
    fn binding_compiles_no_std_and_runs_against_a_stub() {
        let dir = tmpdir("binding");
        if build_rlx_rt(&dir).is_none() {
            return;
        }
        let rlib = dir.join("librlx_rt.rlib");
        let mut extern_arg = std::ffi::OsString::from("rlx_rt=");
        extern_arg.push(&rlib);

        // 1. Both artifacts, `include!`d and `mod`-ed, in a no_std library, warnings denied.
        for a in [sample(), minimal(), stateful()] {
            std::fs::write(dir.join(format!("{}.rs", a.name)), rust_binding(&a)).unwrap();
            let lib = dir.join(format!("{}_nostd.rs", a.name));
            std::fs::write(
                &lib,
                format!(
                    "#![no_std]\n#![deny(warnings, missing_docs)]\n//! Test crate.\n/// Included.\npub mod by_include {{ include!(\"{n}.rs\"); }}\n/// Moded.\n#[path = \"{n}.rs\"]\npub mod by_mod;\n",
                    n = a.name
                ),
            )
            .unwrap();
            for edition in ["2021", "2024"] {
                let ok = run_tool(
                    Command::new("rustc")
                        .args(["--edition", edition, "--crate-type", "lib", "--emit", "metadata", "--out-dir"])
                        .arg(&dir)
                        .arg("--extern")
                        .arg(&extern_arg)
                        .arg(&lib),
                );
                if ok.is_none() {
                    return;
                }
            }
        }

        // 2. The sample's binding linked with a C stub built from the generated header, run.
        std::fs::write(dir.join("my_model.h"), c_header(&sample())).unwrap();
        std::fs::write(dir.join("stub.c"), STUB).unwrap();
        let stub_o = dir.join("stub.o");
        if run_tool(
            Command::new(cc())
                .args(["-c", "-O1", "-Wall", "-Werror", "-I"])
                .arg(&dir)
                .arg(dir.join("stub.c"))
                .arg("-o")
                .arg(&stub_o),
        )
        .is_none()
        {
            return;
        }
        // As a build script would: the object in a static library, linked by name.
        if run_tool(Command::new("ar").arg("rcs").arg(dir.join("libmy_model_stub.a")).arg(&stub_o)).is_none() {
            return;
        }
        std::fs::write(dir.join("use.rs"), USE).unwrap();
        let exe = dir.join("use_binding");
        run_tool(
            Command::new("rustc")
                .args(["--edition", "2021", "-D", "warnings", "-l", "static=my_model_stub", "-L"])
                .arg(&dir)
                .arg("-o")
                .arg(&exe)
                .arg("--extern")
                .arg(&extern_arg)
                .arg(dir.join("use.rs")),
        )
        .expect("rustc was found above");
        let out = Command::new(&exe).output().unwrap();
        assert!(out.status.success() && out.stdout.starts_with(b"binding ok"), "{out:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
