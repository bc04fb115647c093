//! Why the node cases the interpreter does not pass are not supported: each unsupported or failing
//! case is put in the first family whose case-name or error pattern it matches (so the specific
//! families come before the catch-alls), and the report states the family's reason once
//! (`docs/conformance.md`, "Why the rest does not pass"). A case in no family is listed as "other", so a
//! new gap shows up instead of hiding under a reason that does not fit it.

use crate::conformance::CaseResult;

/// (family, the case belongs if its name contains / its error contains any of these, why).
pub const FAMILIES: &[(&str, &[&str], &[&str], &str)] = &[
    (
        "Sequence and optional values",
        &["sequence", "_opt", "optional", "_seq"],
        &["segmented tensors", "values, but dims"],
        "The cases' data are ONNX sequences or optionals (SequenceProto / OptionalProto). rlxc's IR has tensors only: every \
         buffer of a planned schedule has a size known at compile time. Sequences of static length inside If/Loop/Scan bodies \
         are unrolled at import; sequence-valued graph inputs and outputs are not representable.",
    ),
    (
        "Loops with scan outputs over a trip count computed at run time",
        &[],
        &["scan outputs need a constant trip count"],
        "A Loop whose trip count or condition is computed at run time is a `loop` region the interpreter runs, but its scan \
         outputs are padded to a static bound — the constant trip count — with the iteration count beside them (as the \
         outputs of NonMaxSuppression, NonZero, Unique, Compress: docs/targets.md); with no constant trip count there is no \
         bound, and rlxc asks for the graph input the count is computed from as a constant.",
    ),
    (
        "Strings",
        &[],
        &["dtype string"],
        "String tensors have no fixed-size layout in the arena. Text reaches a model as token ids (`rlxc tokenize`).",
    ),
    (
        "Randomness",
        &[],
        &["Bernoulli", "RandomUniformLike", "RandomNormal", "Dropout in training mode"],
        "Random sampling: compiled artifacts are deterministic (reproducible bytes and outputs) and runtime-min holds no \
         random-number state.",
    ),
    (
        "Training ops of ai.onnx.preview.training",
        &[],
        &["ai.onnx.preview.training"],
        "rlxc trains through its own autodiff and in-graph optimizers (`rlxc compile --train`, `rlxc train`), not through \
         these ONNX ops.",
    ),
    (
        "Classical ML (ai.onnx.ml)",
        &[],
        &["ai.onnx.ml"],
        "Tree ensembles, binarizers and feature extractors of the ai.onnx.ml domain are out of rlxc's scope (neural networks).",
    ),
    (
        "Image decoding",
        &[],
        &["ImageDecoder"],
        "Decoding JPEG/PNG bytes is a codec, not tensor math; an application decodes before calling the artifact.",
    ),
    (
        "Newest attention ops (opset 25–27)",
        &[],
        &["LinearAttention", "FlexAttention", "nonpad_kv_seqlen"],
        "Not implemented yet: LinearAttention and FlexAttention (opsets 26–27) and Attention's sliding window over an \
         external cache with per-batch valid lengths.",
    ),
    (
        "Not implemented yet",
        &[],
        &["TfIdfVectorizer", "repeated index", "MaxPool indices", "float8e8m0", "dtype undefined"],
        "Ops and attributes with no lowering yet: TfIdfVectorizer, Einsum with a repeated \
         index in one operand, MaxPool's indices output, the float8e8m0 dtype.",
    ),
    (
        "bf16 rounding of the reference",
        &["bf16", "bfloat16"],
        &[],
        "The expected outputs were computed in a different order or precision than bf16 rounding of rlxc's f32 \
         computation: the results differ by one or two bf16 ulps (rtol 1e-3 is below bf16's 4e-3 resolution).",
    ),
    (
        "Inverse DFT near zero",
        &["dft_inverse"],
        &[],
        "Values that are exactly 0 in exact arithmetic: rlxc's f64 twiddles give 3e-15, the reference's f32 ones 1.9e-7; \
         both are rounding noise, beyond atol 1e-7 by a factor of two.",
    ),
];

/// The family of `r`, if any.
pub fn family(r: &CaseResult) -> Option<usize> {
    FAMILIES.iter().position(|(_, names, errors, _)| names.iter().any(|n| r.name.contains(n)) || errors.iter().any(|e| r.reason.contains(e)))
}

/// The report's section: each family with its case count and reason, then the cases in no family.
pub fn section(rest: &[&CaseResult]) -> String {
    let mut s = String::from("\n## Why the rest does not pass\n\n");
    s.push_str("Every failing or unsupported case on the interpreter, by family (`compiler/rlxc/src/conformance_gaps.rs`).\n\n");
    s.push_str("| family | cases | why |\n|---|---:|---|\n");
    let mut other = Vec::new();
    let mut count = vec![0usize; FAMILIES.len()];
    for r in rest {
        match family(r) {
            Some(f) => count[f] += 1,
            None => other.push(r),
        }
    }
    for ((name, _, _, why), n) in FAMILIES.iter().zip(&count) {
        if *n > 0 {
            s.push_str(&format!("| {name} | {n} | {why} |\n"));
        }
    }
    if !other.is_empty() {
        s.push_str(&format!("| other (no family yet) | {} | see below |\n\nIn no family:\n\n", other.len()));
        for r in other {
            s.push_str(&format!("- `{}`\n", r.name));
        }
    }
    s
}
