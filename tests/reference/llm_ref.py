"""Numpy reference for LLaMA-family models (llama, qwen2, qwen3, gemma3), independent of rlxc, in
float64: GGUF files (weights read and dequantized by llama.cpp's `gguf` package, conventions as
llama.cpp implements them) and Hugging Face checkpoint folders (config.json + model.safetensors read
by the `safetensors` package, conventions as `transformers` defines them: `rotate_half` RoPE for every
architecture, Gemma's RMSNorm scaled by 1 + w, Gemma 3's query_pre_attn_scalar and layer pattern).
One forward pass (`Model.logits`) serves both.

  llm_ref.py logits MODEL.gguf|FOLDER --tokens 1,2,3 --out REF.npy   logits [len, vocab] (float32 file)
  llm_ref.py tiny ARCH TYPE OUT.gguf [--seed S] [--tokens 1,2,3 --ref REF.npy]
                                                   a tiny random model, matrices in TYPE (+ its logits)
  llm_ref.py tiny-hf MODEL_TYPE DTYPE FOLDER [--seed S] [--tokens 1,2,3 --ref REF.npy]
                                                   a tiny random Hugging Face checkpoint (F32/F16)
  llm_ref.py argmax MODEL.gguf --prompts 2,818,5279;2,14946 --out REF.txt
                                                   per prompt, the argmax token at every position
"""
import argparse
import json
import math
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize


class Model:
    def __init__(self, path: str):
        self.r = gguf.GGUFReader(path)
        self.t = {t.name: t for t in self.r.tensors}
        self.cache = {}
        f = self.r.fields
        self.arch = str(f["general.architecture"].contents())
        a = self.arch

        def get(key, default=None):
            k = f"{a}.{key}"
            return f[k].contents() if k in f else default

        self.hidden = int(get("embedding_length"))
        self.layers = int(get("block_count"))
        self.heads = int(get("attention.head_count"))
        self.kv_heads = int(get("attention.head_count_kv", self.heads))
        self.head_dim = int(get("attention.key_length", self.hidden // self.heads))
        self.eps = float(get("attention.layer_norm_rms_epsilon", 1e-6))
        self.base = float(get("rope.freq_base", 10000.0))
        self.window = get("attention.sliding_window") if a == "gemma3" else None
        self.base_local = float(get("rope.freq_base_swa", 10000.0))
        self.period = 6  # gemma3: every 6th layer is global
        self.scale = 1 / math.sqrt(self.head_dim)
        # llama.cpp's converter permuted llama's q/k for RoPE on adjacent pairs
        self.rope_pairs = "adjacent" if a == "llama" else "halves"

    def embed(self, tokens):
        emb = self.t["token_embd.weight"]
        return dequantize(np.asarray(emb.data)[tokens], emb.tensor_type).astype(np.float64)

    def w32(self, name):
        # Dequantized once per model, kept as float32 (the dequantizer's own type).
        if name not in self.cache:
            t = self.t[name]
            self.cache[name] = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        return self.cache[name]

    def w(self, name):
        return self.w32(name).astype(np.float64)

    def has(self, name):
        return name in self.t

    def rms(self, x, name):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.w(name)

    def rope(self, x, pos, base):
        # x [S, heads, d]; llama pairs adjacent dims, the others (NEOX style) pair halves.
        d = x.shape[-1]
        inv = base ** (-np.arange(0, d // 2) * 2.0 / d)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.rope_pairs == "adjacent":
            x1, x2 = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2] = x1 * cos - x2 * sin
            out[..., 1::2] = x2 * cos + x1 * sin
            return out
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def linear(self, x, name, bias=False):
        y = x @ self.w(f"{name}.weight").T
        if bias and self.has(f"{name}.bias"):
            y = y + self.w(f"{name}.bias")
        return y

    def logits(self, tokens):
        a = self.arch
        S, nh, nkv, d = len(tokens), self.heads, self.kv_heads, self.head_dim
        pos = np.arange(S)
        rows = self.embed(tokens)
        x = rows * math.sqrt(self.hidden) if a == "gemma3" else rows
        for i in range(self.layers):
            p = f"blk.{i}."
            local = self.window is not None and (i + 1) % self.period != 0
            h = self.rms(x, p + "attn_norm.weight")
            q = self.linear(h, p + "attn_q", a == "qwen2").reshape(S, nh, d)
            k = self.linear(h, p + "attn_k", a == "qwen2").reshape(S, nkv, d)
            v = self.linear(h, p + "attn_v", a == "qwen2").reshape(S, nkv, d)
            if a in ("qwen3", "gemma3"):
                q = self.rms(q, p + "attn_q_norm.weight")
                k = self.rms(k, p + "attn_k_norm.weight")
            base = self.base_local if local else self.base
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            g = nh // nkv
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            scores = np.einsum("shd,thd->hst", q, k) * self.scale
            allowed = pos[None, :] <= pos[:, None]
            if local:
                allowed &= (pos[:, None] - pos[None, :]) < self.window
            scores = np.where(allowed[None], scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            ctx = np.einsum("hst,thd->shd", probs, v).reshape(S, nh * d)
            o = self.linear(ctx, p + "attn_output")
            if a == "gemma3":
                o = self.rms(o, p + "post_attention_norm.weight")
            x = x + o
            h = self.rms(x, p + "ffn_norm.weight")
            gate, up = self.linear(h, p + "ffn_gate"), self.linear(h, p + "ffn_up")
            if a == "gemma3":
                act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
            else:
                act = gate / (1 + np.exp(-gate))
            f = self.linear(act * up, p + "ffn_down")
            if a == "gemma3":
                f = self.rms(f, p + "post_ffw_norm.weight")
            x = x + f
        x = self.rms(x, "output_norm.weight")
        out = self.w32("output.weight" if self.has("output.weight") else "token_embd.weight")
        logits = np.empty((S, out.shape[0]))
        step = 16384  # in float64 slices (Gemma's output matrix is 262144 x 640)
        for r0 in range(0, out.shape[0], step):
            logits[:, r0:r0 + step] = x @ out[r0:r0 + step].astype(np.float64).T
        return logits


def tiny(arch: str, qtype: str, path: str, seed: int) -> None:
    """A small random model: hidden 64, 2 layers, 4 query heads of 16, 2 key/value heads, ffn 128,
    vocab 96; every matrix stored as `qtype` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)."""
    rng = np.random.default_rng(seed)
    H, L, nh, nkv, d, F, V = 64, 2, 4, 2, 16, 128, 96
    qt = Q[qtype]
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if arch == "gemma3":
        w.add_sliding_window(3)

    def mat(name, rows, cols, scale=None):
        x = (rng.standard_normal((rows, cols)) * (scale or 1 / math.sqrt(cols))).astype(np.float32)
        if qt == Q.F32:
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, quantize(x, qt), raw_dtype=qt)

    def vec(name, n, center=1.0, spread=0.1):
        w.add_tensor(name, (center + spread * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, H, scale=1.0)
    for i in range(L):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", H)
        mat(p + "attn_q.weight", nh * d, H)
        mat(p + "attn_k.weight", nkv * d, H)
        mat(p + "attn_v.weight", nkv * d, H)
        mat(p + "attn_output.weight", H, nh * d)
        if arch == "qwen2":
            for m, n in (("attn_q", nh * d), ("attn_k", nkv * d), ("attn_v", nkv * d)):
                vec(p + m + ".bias", n, 0.0, 0.2)
        if arch in ("qwen3", "gemma3"):
            vec(p + "attn_q_norm.weight", d)
            vec(p + "attn_k_norm.weight", d)
        if arch == "gemma3":
            vec(p + "post_attention_norm.weight", H)
            vec(p + "post_ffw_norm.weight", H)
        vec(p + "ffn_norm.weight", H)
        mat(p + "ffn_gate.weight", F, H)
        mat(p + "ffn_up.weight", F, H)
        mat(p + "ffn_down.weight", H, F)
    vec("output_norm.weight", H)
    if arch in ("llama", "qwen2"):
        mat("output.weight", V, H)  # qwen3/gemma3 tie the output to token_embd
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class HfModel(Model):
    """A Hugging Face checkpoint folder, read by `safetensors`; `Model.logits` asks for tensors by
    llama.cpp's names, mapped here onto the checkpoint's."""

    ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3"}

    def __init__(self, folder: str):
        from safetensors.numpy import load_file
        c = json.load(open(os.path.join(folder, "config.json")))
        self.t = load_file(os.path.join(folder, "model.safetensors"))
        self.cache = {}
        self.arch = self.ARCH[c["model_type"]]
        gemma = self.arch == "gemma3"
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.base = c.get("rope_theta", 1e6 if gemma else 1e4)
        self.base_local = c.get("rope_local_base_freq", 1e4)
        self.window = c["sliding_window"] if gemma else None
        self.period = c.get("sliding_window_pattern", 6)
        self.scale = c.get("query_pre_attn_scalar", self.head_dim) ** -0.5 if gemma else self.head_dim ** -0.5
        self.rope_pairs = "halves"  # transformers' rotate_half, for llama too
        self.tied = c.get("tie_word_embeddings", gemma)
        layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
                 "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
        if gemma:
            layer.update(post_attention_norm="post_attention_layernorm", ffn_norm="pre_feedforward_layernorm",
                         post_ffw_norm="post_feedforward_layernorm")
        else:
            layer.update(ffn_norm="post_attention_layernorm")
        self.layer_names = layer

    def name(self, n):
        glob = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
        if n in glob:
            return glob[n]
        _, i, m, kind = n.split(".")
        return f"model.layers.{i}.{self.layer_names[m]}.{kind}"

    def has(self, n):
        return not (n == "output.weight" and self.tied) and self.name(n) in self.t

    def w32(self, n):
        w = self.t[self.name(n)].astype(np.float32)
        if self.arch == "gemma3" and n.endswith("norm.weight"):
            w = 1.0 + w  # Gemma3RMSNorm: x_hat * (1 + w), in float32
        return w

    def embed(self, tokens):
        return self.w("token_embd.weight")[tokens]


def tiny_hf(model_type: str, dtype: str, folder: str, seed: int) -> None:
    """A small random Hugging Face checkpoint: hidden 64, 2 layers, 4 query heads, 2 key/value heads,
    ffn 128, vocab 96, tensors in `dtype` (F32 or F16) under transformers' names. qwen3 has head_dim 24
    (not hidden / heads) and a tied output; gemma3_text layer 0 is local (window 3, base 10000), layer 1
    global (base 1e6), query_pre_attn_scalar 24; llama and qwen2 have an lm_head."""
    rng = np.random.default_rng(seed)
    H, L, nh, nkv, F, V = 64, 2, 4, 2, 128, 96
    d = 24 if model_type == "qwen3" else 16
    gemma = model_type == "gemma3_text"
    np_dtype = {"F32": np.float32, "F16": np.float16}[dtype]
    cfg = {"model_type": model_type, "hidden_size": H, "num_hidden_layers": L, "intermediate_size": F,
           "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": d, "vocab_size": V,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": model_type in ("qwen3", "gemma3_text"), "torch_dtype": "float32"}
    if gemma:
        cfg.update(rope_theta=1e6, rope_local_base_freq=1e4, sliding_window=3, sliding_window_pattern=2,
                   layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=24,
                   hidden_activation="gelu_pytorch_tanh", rope_scaling=None, final_logit_softcapping=None,
                   attn_logit_softcapping=None)
    else:
        cfg.update(hidden_act="silu")
    t = {}

    def mat(name, rows, cols, scale=None):
        t[name] = (rng.standard_normal((rows, cols)) * (scale or 1 / math.sqrt(cols))).astype(np_dtype)

    def vec(name, n, center, spread=0.1):
        t[name] = (center + spread * rng.standard_normal(n)).astype(np_dtype)

    one = 0.0 if gemma else 1.0  # Gemma stores w of x_hat * (1 + w)
    mat("model.embed_tokens.weight", V, H, scale=1.0)
    for i in range(L):
        p = f"model.layers.{i}."
        vec(p + "input_layernorm.weight", H, one)
        mat(p + "self_attn.q_proj.weight", nh * d, H)
        mat(p + "self_attn.k_proj.weight", nkv * d, H)
        mat(p + "self_attn.v_proj.weight", nkv * d, H)
        mat(p + "self_attn.o_proj.weight", H, nh * d)
        if model_type == "qwen2":
            for m, n in (("q_proj", nh * d), ("k_proj", nkv * d), ("v_proj", nkv * d)):
                vec(p + f"self_attn.{m}.bias", n, 0.0, 0.2)
        if model_type in ("qwen3", "gemma3_text"):
            vec(p + "self_attn.q_norm.weight", d, one)
            vec(p + "self_attn.k_norm.weight", d, one)
        vec(p + "post_attention_layernorm.weight", H, one)
        if gemma:
            vec(p + "pre_feedforward_layernorm.weight", H, one)
            vec(p + "post_feedforward_layernorm.weight", H, one)
        mat(p + "mlp.gate_proj.weight", F, H)
        mat(p + "mlp.up_proj.weight", F, H)
        mat(p + "mlp.down_proj.weight", H, F)
    vec("model.norm.weight", H, one)
    if not cfg["tie_word_embeddings"]:
        mat("lm_head.weight", V, H)
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    save_file(t, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def load(path: str) -> Model:
    return HfModel(path) if os.path.isdir(path) else Model(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("model")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out", required=True)
    tn = sub.add_parser("tiny")
    tn.add_argument("arch")
    tn.add_argument("qtype")
    tn.add_argument("out")
    tn.add_argument("--seed", type=int, default=0)
    tn.add_argument("--tokens")
    tn.add_argument("--ref")
    th = sub.add_parser("tiny-hf")
    th.add_argument("model_type")
    th.add_argument("dtype")
    th.add_argument("out")
    th.add_argument("--seed", type=int, default=0)
    th.add_argument("--tokens")
    th.add_argument("--ref")
    am = sub.add_parser("argmax")
    am.add_argument("model")
    am.add_argument("--prompts", required=True)
    am.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "logits":
        tokens = [int(t) for t in a.tokens.split(",")]
        np.save(a.out, load(a.model).logits(tokens).astype(np.float32))
    elif a.cmd == "argmax":
        m = Model(a.model)
        lines = []
        for p in a.prompts.split(";"):
            lg = m.logits([int(t) for t in p.split(",")])
            top = np.argsort(-lg, axis=1)
            # argmax, and the gap to the runner-up (to tell a real mismatch from a near tie)
            gaps = lg[np.arange(len(lg)), top[:, 0]] - lg[np.arange(len(lg)), top[:, 1]]
            lines.append(" ".join(f"{t}:{g:.5f}" for t, g in zip(top[:, 0], gaps)))
        open(a.out, "w").write("\n".join(lines) + "\n")
    elif a.cmd == "tiny-hf":
        tiny_hf(a.model_type, a.dtype, a.out, a.seed)
        if a.tokens:
            tokens = [int(t) for t in a.tokens.split(",")]
            np.save(a.ref, HfModel(a.out).logits(tokens).astype(np.float32))
    else:
        tiny(a.arch, a.qtype, a.out, a.seed)
        if a.tokens:
            tokens = [int(t) for t in a.tokens.split(",")]
            np.save(a.ref, Model(a.out).logits(tokens).astype(np.float32))


if __name__ == "__main__":
    main()
