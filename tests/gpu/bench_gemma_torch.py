#!/usr/bin/env python3
"""PyTorch's decode speed for Gemma 3 270M on the GPU machine: the baseline that rlxc's CUDA
artifact (runtime-min/examples/cuda_llm.rs) is compared with in tests/gpu/run_llm.sh.

transformers' Gemma3ForCausalLM built from the GGUF's shapes (config.json written by
tests/gpu/prepare_llm.sh: 18 layers, hidden 640, 4 query heads and 1 key/value head of 256, FFN 2048,
vocabulary 262,144, sliding window 512). With --weights/--tensors, its weights are the GGUF's,
dequantized by the gguf package (base/pylib) from the bytes of rlxc's weights blob (tensors.json: each
GGUF tensor's offset there), the norms' stored 1 + w turned back into transformers' w; the prompt is
the real one (--prompt) and the greedy tokens of the f32 model are compared with the host's (--host):
the count of leading tokens that agree is printed. Without them, random weights (a step's time does
not depend on the values). Modes, each in f32 and bf16: eager (a forward per token with the dynamic
KV cache, what `model(…)` in a loop does) and, when it works here, `generate` with the static cache
(transformers compiles the forward with torch.compile "reduce-overhead": CUDA graphs). Prints one JSON
line per measurement: decode tokens/s after a prompt of P tokens, over N tokens.

    bench_gemma_torch.py CONFIG.json P N [--weights BLOB --tensors TENSORS.json --prompt IDS --host IDS]

With --prefill IDS (a file of at least P ids): the prefill instead — one forward over the first P ids,
eager and torch.compile'd, f32 and bf16, the median of 10 in ms and tokens/s."""
import json, sys, time
import torch

cfg_path, P, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opt = dict(zip(sys.argv[4::2], sys.argv[5::2]))
spec = json.load(open(cfg_path))
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

cfg = Gemma3TextConfig(**spec)
torch.manual_seed(0)
dev = "cuda"
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": __import__("transformers").__version__}), flush=True)


def gguf_state_dict(blob_path, table_path):
    """The GGUF's tensors under transformers' names, dequantized to f32."""
    import os
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
    try:
        import yaml  # noqa: F401  (the gguf package imports it for model cards only)
    except ImportError:
        import types
        sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf
    blob = np.memmap(blob_path, dtype=np.uint8, mode="r")
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "attn_norm": "input_layernorm",
             "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
             "post_ffw_norm": "post_feedforward_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {}
    for t in json.load(open(table_path)):
        raw = np.asarray(blob[t["offset"]:t["offset"] + t["bytes"]])
        x = gguf.quants.dequantize(raw.reshape(t["shape"][0], -1) if len(t["shape"]) > 1 else raw, gguf.GGMLQuantizationType(t["type"]))
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).reshape(t["shape"]))
        parts = t["name"].split(".")
        if parts[0] == "blk":
            key = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
        else:
            key = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight"}[parts[0]]
        if key.endswith("norm.weight") or key.endswith("layernorm.weight"):
            x = x - 1.0  # llama.cpp's converter stores Gemma's norm weights as 1 + w
        sd[key] = x
    return sd


def eager(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        # Warm-up tokens, not timed.
        for _ in range(3):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(N):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        return N / (time.perf_counter() - t)


def static_generate(model, ids):
    # generate with the static cache: the forward compiled with CUDA graphs. Decode rate from the
    # difference of two lengths (the prefill and the compile cancel out); run twice to compile first.
    def timed(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
        torch.cuda.synchronize()
        return time.perf_counter() - t
    timed(N)
    timed(8)
    short, long = timed(8), timed(N)
    return (N - 8) / (long - short)


def prefill(model, ids):
    # One forward over the whole prompt (no cache kept): warm-ups, then the median of 10, in ms.
    with torch.no_grad():
        for _ in range(3):
            model(input_ids=ids, use_cache=False)
        ts = []
        for _ in range(10):
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        return sorted(ts)[len(ts) // 2] * 1e3


sd = gguf_state_dict(opt["--weights"], opt["--tensors"]) if "--weights" in opt else None
if "--prefill" in opt:
    # Prefill mode: the forward over the prompt's P tokens (--prefill IDS), eager and torch.compile'd
    # (default mode), f32 (no TF32) and bf16.
    torch.backends.cuda.matmul.allow_tf32 = False
    ids = torch.tensor([[int(t) for t in open(opt["--prefill"]).read().strip().split(",")][:P]], device=dev)
    for dtype in (torch.float32, torch.bfloat16):
        model = Gemma3ForCausalLM(cfg)
        if sd is not None:
            model.load_state_dict(sd, strict=False)
        model = model.to(dev, dtype=dtype).eval()
        name = str(dtype).split(".")[-1]
        ms = prefill(model, ids)
        print(json.dumps({"mode": "prefill-eager", "dtype": name, "prompt": ids.shape[1], "ms": round(ms, 3), "tok_s": round(ids.shape[1] / ms * 1e3, 1)}), flush=True)
        try:
            ms = prefill(torch.compile(model), ids)
            print(json.dumps({"mode": "prefill-compiled", "dtype": name, "prompt": ids.shape[1], "ms": round(ms, 3), "tok_s": round(ids.shape[1] / ms * 1e3, 1)}), flush=True)
        except Exception as e:  # reported, not fatal
            print(json.dumps({"mode": "prefill-compiled", "dtype": name, "error": str(e)[:300]}), flush=True)
        del model
        torch.cuda.empty_cache()
    sys.exit(0)
for dtype in (torch.float32, torch.bfloat16):
    model = Gemma3ForCausalLM(cfg)
    if sd is not None:
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if k.endswith(".weight") and k != "lm_head.weight"]  # lm_head: tied to the embedding
        if missing or unexpected:
            sys.exit(f"weights: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model = model.to(dev, dtype=dtype).eval()
    if "--prompt" in opt:
        ids = torch.tensor([[int(t) for t in open(opt["--prompt"]).read().strip().split(",")]], device=dev)
    else:
        ids = torch.randint(0, cfg.vocab_size, (1, P), device=dev)
    name = str(dtype).split(".")[-1]
    if "--host" in opt and dtype == torch.float32:
        host = [int(t) for t in open(opt["--host"]).read().strip().split(",")]
        with torch.no_grad():
            got = model.generate(ids, max_new_tokens=len(host), do_sample=False)[0, ids.shape[1]:].tolist()
        same = next((i for i, (a, b) in enumerate(zip(got, host)) if a != b), min(len(got), len(host)))
        print(json.dumps({"check": "greedy tokens vs rlxc host", "dtype": name, "agree": same, "of": len(host), "first_torch": got[:8], "first_host": host[:8]}), flush=True)
    print(json.dumps({"mode": "eager", "dtype": name, "prompt": P, "tokens": N, "tok_s": round(eager(model, ids), 1)}), flush=True)
    try:
        print(json.dumps({"mode": "generate-static-compiled", "dtype": name, "prompt": P, "tokens": N, "tok_s": round(static_generate(model, ids), 1)}), flush=True)
    except Exception as e:  # reported, not fatal: the eager rows stand
        print(json.dumps({"mode": "generate-static-compiled", "dtype": name, "error": str(e)[:300]}), flush=True)
    del model
    torch.cuda.empty_cache()
