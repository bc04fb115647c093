//! BERT encoders (BERT, MiniLM, …) from a Hugging Face checkpoint folder: `config.json` +
//! `model.safetensors`, with or without the `bert.` weight prefix.
//!
//! Graph: inputs `input_ids`, `attention_mask`, `token_type_ids`, all i64[batch,sequence]; output
//! `last_hidden_state` f32[batch,sequence,hidden]. Position ids are built inside the graph as
//! `cumsum(ones) - 1` along the sequence axis, so `sequence` stays symbolic.

use rlx_ir::{BinaryOp, ConstData, DType, Dim, Hir, HirOp, MirOp, Shape, TensorType, ValueId};
use std::collections::BTreeMap;
use std::path::Path;

/// The `config.json` fields the encoder needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub layer_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub vocab_size: usize,
}

impl BertConfig {
    /// Parses a Hugging Face BERT `config.json`. Reports every missing or invalid field at once.
    /// `layer_norm_eps` and `hidden_act` take Hugging Face's defaults (1e-12, "gelu") when absent.
    pub fn from_json(text: &str) -> Result<BertConfig, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let obj = v.as_object().ok_or("not a JSON object")?;
        let mut problems = Vec::new();
        let mut int = |key: &str| match obj.get(key).map(|x| x.as_u64()) {
            Some(Some(n)) if n > 0 => n as usize,
            Some(_) => {
                problems.push(format!("'{key}' must be a positive integer, got {}", obj[key]));
                0
            }
            None => {
                problems.push(format!("'{key}' is missing"));
                0
            }
        };
        let cfg = BertConfig {
            hidden_size: int("hidden_size"),
            num_hidden_layers: int("num_hidden_layers"),
            num_attention_heads: int("num_attention_heads"),
            intermediate_size: int("intermediate_size"),
            max_position_embeddings: int("max_position_embeddings"),
            type_vocab_size: int("type_vocab_size"),
            vocab_size: int("vocab_size"),
            layer_norm_eps: 0.0,
        };
        let eps = match obj.get("layer_norm_eps") {
            None => 1e-12,
            Some(x) => match x.as_f64() {
                Some(e) if e >= 0.0 && e.is_finite() => e,
                _ => {
                    problems.push(format!("'layer_norm_eps' must be a non-negative number, got {x}"));
                    0.0
                }
            },
        };
        match obj.get("hidden_act") {
            None => {}
            Some(a) if a.as_str() == Some("gelu") => {}
            Some(a) => problems.push(format!("hidden_act {a} is not supported (only \"gelu\", the exact erf form)")),
        }
        match obj.get("position_embedding_type") {
            None => {}
            Some(p) if p.as_str() == Some("absolute") => {}
            Some(p) => problems.push(format!("position_embedding_type {p} is not supported (only \"absolute\")")),
        }
        if cfg.num_attention_heads > 0 && !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            problems.push(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            ));
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(BertConfig { layer_norm_eps: eps, ..cfg })
    }
}

/// Builds the encoder HIR from a checkpoint folder holding `config.json` and `model.safetensors`.
pub fn bert_from_dir(dir: &Path) -> Result<Hir, String> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| format!("{}: cannot read: {e}", cfg_path.display()))?;
    let cfg = BertConfig::from_json(&text).map_err(|e| format!("{}: {e}", cfg_path.display()))?;
    let st_path = dir.join("model.safetensors");
    let weights = rlx_import::safetensors::load_safetensors(&st_path)?;
    bert_hir(&cfg, weights).map_err(|e| format!("{}: {e}", st_path.display()))
}

/// Every weight the encoder reads (without prefix), with its expected shape.
fn expected_weights(c: &BertConfig) -> Vec<(String, Vec<usize>)> {
    let (h, f) = (c.hidden_size, c.intermediate_size);
    let mut v = vec![
        ("embeddings.word_embeddings.weight".to_string(), vec![c.vocab_size, h]),
        ("embeddings.position_embeddings.weight".to_string(), vec![c.max_position_embeddings, h]),
        ("embeddings.token_type_embeddings.weight".to_string(), vec![c.type_vocab_size, h]),
        ("embeddings.LayerNorm.weight".to_string(), vec![h]),
        ("embeddings.LayerNorm.bias".to_string(), vec![h]),
    ];
    for i in 0..c.num_hidden_layers {
        let p = format!("encoder.layer.{i}.");
        for (m, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", f, h),
            ("output.dense", h, f),
        ] {
            v.push((format!("{p}{m}.weight"), vec![out, inp]));
            v.push((format!("{p}{m}.bias"), vec![out]));
        }
        for m in ["attention.output.LayerNorm", "output.LayerNorm"] {
            v.push((format!("{p}{m}.weight"), vec![h]));
            v.push((format!("{p}{m}.bias"), vec![h]));
        }
    }
    v
}

/// The checked weights, and the graph constants made from them.
struct Weights {
    prefix: &'static str,
    map: BTreeMap<String, ConstData>,
}

impl Weights {
    /// The f32 value of weight `name` (unprefixed): a constant named after the checkpoint tensor,
    /// cast to f32 by a node of the same name when stored as another float type.
    fn get(&self, g: &mut Hir, name: &str) -> Result<ValueId, String> {
        let full = format!("{}{name}", self.prefix);
        let c = self.map.get(&full).ok_or_else(|| format!("weight '{full}' is missing"))?;
        let v = g.add_const(Some(&full), c.clone());
        if c.dtype == DType::F32 {
            return Ok(v);
        }
        g.add1(&full, HirOp::Prim(MirOp::Cast { to: DType::F32 }), &[v])
    }
}

/// Builds the encoder HIR from a config and the checkpoint's tensors. Every missing, mis-shaped or
/// non-float weight is listed in one error.
pub fn bert_hir(cfg: &BertConfig, tensors: Vec<(String, ConstData)>) -> Result<Hir, String> {
    let map: BTreeMap<String, ConstData> = tensors.into_iter().collect();
    let prefix = if map.contains_key("bert.embeddings.word_embeddings.weight") { "bert." } else { "" };
    // Each layer reads 16 weights. A layer count beyond the number of tensors is reported as it is,
    // not as a list of that many missing weights (nor built as one: the count is the file's word).
    if cfg.num_hidden_layers > map.len() {
        return Err(format!(
            "num_hidden_layers {} cannot match a checkpoint of {} tensors (each layer has 16 weights)",
            cfg.num_hidden_layers,
            map.len()
        ));
    }
    let mut problems = Vec::new();
    for (name, shape) in expected_weights(cfg) {
        let full = format!("{prefix}{name}");
        match map.get(&full) {
            None => problems.push(format!("missing {full} (expected {shape:?})")),
            Some(c) if c.shape != shape => problems.push(format!("{full} has shape {:?}, expected {shape:?}", c.shape)),
            Some(c) if !c.dtype.is_float() => problems.push(format!("{full} has dtype {}, expected a float type", c.dtype)),
            Some(_) => {}
        }
    }
    if !problems.is_empty() {
        return Err(format!(
            "{} weight problem(s) for a BERT encoder with hidden_size {}, {} layers, intermediate_size {}, vocab_size {}:\n  {}",
            problems.len(),
            cfg.hidden_size,
            cfg.num_hidden_layers,
            cfg.intermediate_size,
            cfg.vocab_size,
            problems.join("\n  ")
        ));
    }
    let w = Weights { prefix, map };
    build(cfg, &w)
}

fn build(cfg: &BertConfig, w: &Weights) -> Result<Hir, String> {
    use HirOp::Prim;
    let mut g = Hir::new();
    let bs = TensorType::new(DType::I64, Shape(vec![Dim::sym("batch"), Dim::sym("sequence")]));
    let ids = g.add_input("input_ids", bs.clone());
    let mask = g.add_input("attention_mask", bs.clone());
    let tt = g.add_input("token_type_ids", bs);
    let eps = cfg.layer_norm_eps;
    let ln = HirOp::LayerNorm { axis: 2, eps };
    let add = Prim(MirOp::Binary(BinaryOp::Add));
    let linear = HirOp::Linear { transpose_w: true };

    // Embeddings.
    let table = w.get(&mut g, "embeddings.word_embeddings.weight")?;
    let word = g.add1("embeddings.word_embeddings", Prim(MirOp::Gather { axis: 0 }), &[table, ids])?;
    // position_ids = cumsum(ones_like(input_ids), axis 1) - 1, so `sequence` stays symbolic.
    let same = g.add1("embeddings.position_ids.eq", Prim(MirOp::Binary(BinaryOp::Eq)), &[ids, ids])?;
    let ones = g.add1("embeddings.position_ids.ones", Prim(MirOp::Cast { to: DType::I64 }), &[same])?;
    let count = g.add1("embeddings.position_ids.cumsum", Prim(MirOp::CumSum { axis: 1, exclusive: false, reverse: false }), &[ones])?;
    let one = g.add_const(None, ConstData::from_i64(vec![], &[1]));
    let pos_ids = g.add1("embeddings.position_ids", Prim(MirOp::Binary(BinaryOp::Sub)), &[count, one])?;
    let table = w.get(&mut g, "embeddings.position_embeddings.weight")?;
    let pos = g.add1("embeddings.position_embeddings", Prim(MirOp::Gather { axis: 0 }), &[table, pos_ids])?;
    let table = w.get(&mut g, "embeddings.token_type_embeddings.weight")?;
    let typ = g.add1("embeddings.token_type_embeddings", Prim(MirOp::Gather { axis: 0 }), &[table, tt])?;
    let x = g.add1("embeddings.add_position", add.clone(), &[word, pos])?;
    let x = g.add1("embeddings.add_token_type", add.clone(), &[x, typ])?;
    let (gamma, beta) = (w.get(&mut g, "embeddings.LayerNorm.weight")?, w.get(&mut g, "embeddings.LayerNorm.bias")?);
    let mut x = g.add1("embeddings.LayerNorm", ln.clone(), &[x, gamma, beta])?;

    let heads = cfg.num_attention_heads;
    let head_dim = cfg.hidden_size / heads;
    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}.");
        let dense = |g: &mut Hir, m: &str, input: ValueId| -> Result<ValueId, String> {
            let (wt, b) = (w.get(g, &format!("{p}{m}.weight"))?, w.get(g, &format!("{p}{m}.bias"))?);
            g.add1(&format!("{p}{m}"), linear.clone(), &[input, wt, b])
        };
        let q = dense(&mut g, "attention.self.query", x)?;
        let k = dense(&mut g, "attention.self.key", x)?;
        let v = dense(&mut g, "attention.self.value", x)?;
        let attn = HirOp::Attention { heads, scale: 1.0 / (head_dim as f64).sqrt(), causal: false };
        let ctx = g.add1(&format!("{p}attention.self"), attn, &[q, k, v, mask])?;
        let o = dense(&mut g, "attention.output.dense", ctx)?;
        let r = g.add1(&format!("{p}attention.output"), add.clone(), &[o, x])?;
        let m = format!("{p}attention.output.LayerNorm");
        let (gamma, beta) = (w.get(&mut g, &format!("{m}.weight"))?, w.get(&mut g, &format!("{m}.bias"))?);
        x = g.add1(&m, ln.clone(), &[r, gamma, beta])?;

        let hdn = dense(&mut g, "intermediate.dense", x)?;
        let hdn = g.add1(&format!("{p}intermediate.intermediate_act_fn"), HirOp::Gelu { tanh: false }, &[hdn])?;
        let o = dense(&mut g, "output.dense", hdn)?;
        let r = g.add1(&format!("{p}output"), add.clone(), &[o, x])?;
        let m = format!("{p}output.LayerNorm");
        let (gamma, beta) = (w.get(&mut g, &format!("{m}.weight"))?, w.get(&mut g, &format!("{m}.bias"))?);
        x = g.add1(&m, ln.clone(), &[r, gamma, beta])?;
    }
    g.values[x.index()].name = Some("last_hidden_state".to_string());
    g.outputs.push(x);
    let problems = rlx_ir::verify::verify(&g);
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(format!("built an invalid BERT graph:\n  {}", list.join("\n  ")));
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::OpSet;

    fn tiny_cfg() -> BertConfig {
        BertConfig {
            hidden_size: 4,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 8,
            layer_norm_eps: 1e-12,
            max_position_embeddings: 16,
            type_vocab_size: 2,
            vocab_size: 10,
        }
    }

    fn tiny_weights(prefix: &str) -> Vec<(String, ConstData)> {
        expected_weights(&tiny_cfg())
            .into_iter()
            .map(|(n, s)| {
                let numel = s.iter().product::<usize>();
                (format!("{prefix}{n}"), ConstData::from_f32(s, &vec![0.5; numel]))
            })
            .collect()
    }

    #[test]
    fn builds_with_and_without_prefix() {
        for prefix in ["", "bert."] {
            let g = bert_hir(&tiny_cfg(), tiny_weights(prefix)).unwrap();
            assert_eq!(g.inputs.len(), 3);
            let out = g.value(g.outputs[0]);
            assert_eq!(out.name.as_deref(), Some("last_hidden_state"));
            assert_eq!(out.ty.to_string(), "f32[batch,sequence,4]");
            assert!(g.nodes.iter().any(|n| n.name == "encoder.layer.1.attention.self" && n.op.kind() == "attention"));
            assert_eq!(g.histogram().iter().find(|(k, _)| *k == "linear").unwrap().1, 12);
        }
    }

    #[test]
    fn every_bad_weight_is_listed() {
        let mut ws = tiny_weights("");
        ws.retain(|(n, _)| n != "encoder.layer.1.output.dense.bias" && n != "embeddings.LayerNorm.weight");
        for (n, c) in ws.iter_mut() {
            if n == "encoder.layer.0.attention.self.key.weight" {
                *c = ConstData::from_f32(vec![4, 3], &[0.0; 12]);
            }
            if n == "encoder.layer.0.output.LayerNorm.bias" {
                *c = ConstData::from_i64(vec![4], &[0; 4]);
            }
        }
        let e = bert_hir(&tiny_cfg(), ws).unwrap_err();
        for frag in [
            "4 weight problem(s)",
            "missing embeddings.LayerNorm.weight (expected [4])",
            "missing encoder.layer.1.output.dense.bias (expected [4])",
            "encoder.layer.0.attention.self.key.weight has shape [4, 3], expected [4, 4]",
            "encoder.layer.0.output.LayerNorm.bias has dtype i64",
        ] {
            assert!(e.contains(frag), "{e}\nshould contain {frag:?}");
        }
    }

    #[test]
    fn half_weights_are_cast() {
        let mut ws = tiny_weights("");
        let c = &mut ws.iter_mut().find(|(n, _)| n == "embeddings.LayerNorm.bias").unwrap().1;
        *c = ConstData::from_f64s(DType::F16, c.shape.clone(), &c.to_f64_vec());
        let g = bert_hir(&tiny_cfg(), ws).unwrap();
        assert!(g.nodes.iter().any(|n| n.op.kind() == "cast" && n.name == "embeddings.LayerNorm.bias"));
    }

    #[test]
    fn config_errors_are_listed() {
        let e = BertConfig::from_json(r#"{"hidden_size": 10, "num_attention_heads": 3, "hidden_act": "relu"}"#).unwrap_err();
        for frag in ["'num_hidden_layers' is missing", "'vocab_size' is missing", "hidden_act \"relu\" is not supported", "not a multiple"] {
            assert!(e.contains(frag), "{e}\nshould contain {frag:?}");
        }
    }
}
