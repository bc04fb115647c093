#!/usr/bin/env python3
"""PyTorch's decode speed for Gemma 3 270M's architecture on the GPU machine: the baseline that
rlxc's CUDA artifact (runtime-min/examples/cuda_llm.rs) is compared with in tests/gpu/run_llm.sh.

transformers' Gemma3ForCausalLM built from the GGUF's shapes (config.json written by
tests/gpu/prepare_llm.sh: 18 layers, hidden 640, 4 query heads and 1 key/value head of 256, FFN 2048,
vocabulary 262,144, sliding window 512), weights random in the model's initialization: the device
tool carries 64 MiB per call, so the GGUF (253 MB) would take five more calls, and a decode step's time
does not depend on the weights' values (same shapes, same kernels). Modes, each in f32 and bf16:
eager (a forward per token with the dynamic KV cache, what `model(…)` in a loop does) and, when it
works here, `generate` with the static cache (transformers compiles the forward with torch.compile
"reduce-overhead": CUDA graphs). Prints one JSON line per measurement: decode tokens/s after a prompt
of P tokens, over N tokens.

    bench_gemma_torch.py CONFIG.json P N"""
import json, sys, time
import torch

cfg_path, P, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = json.load(open(cfg_path))
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

cfg = Gemma3TextConfig(**spec)
torch.manual_seed(0)
dev = "cuda"
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": __import__("transformers").__version__}), flush=True)


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


for dtype in (torch.float32, torch.bfloat16):
    model = Gemma3ForCausalLM(cfg).to(dev, dtype=dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, P), device=dev)
    name = str(dtype).split(".")[-1]
    print(json.dumps({"mode": "eager", "dtype": name, "prompt": P, "tokens": N, "tok_s": round(eager(model, ids), 1)}), flush=True)
    try:
        print(json.dumps({"mode": "generate-static-compiled", "dtype": name, "prompt": P, "tokens": N, "tok_s": round(static_generate(model, ids), 1)}), flush=True)
    except Exception as e:  # reported, not fatal: the eager rows stand
        print(json.dumps({"mode": "generate-static-compiled", "dtype": name, "error": str(e)[:300]}), flush=True)
    del model
    torch.cuda.empty_cache()
