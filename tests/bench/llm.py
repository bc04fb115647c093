#!/usr/bin/env python3
"""LLM speed on the CPU: rlxc's compiled GGUF artifact vs llama.cpp on the same file (`make bench-llm`).

    llm.py --rlxc target/release/rlxc [--model build/models/gemma-3-270m-q4_k_m.gguf] [--threads 1,2]
           [--rounds 2] [--engines rlxc,llama] [--out docs/benchmarks.md]

Rows, each at 1 and 2 threads, both engines interleaved (rlxc, llama.cpp, rlxc, llama.cpp … one fresh
process per measurement, so each process's peak RSS is its own):
  - prefill tokens/s for a 128- and a 512-token prompt,
  - decode tokens/s at context 128 and 1,024 (a prompt of 128 − 64 or 1,024 − 64 tokens, then 64 greedy tokens),
  - peak RSS of each process, rlxc's artifact size vs the GGUF file's, the compile time.
The prompt is the same token ids for both engines (a fixed English text tokenized by llama.cpp, repeated to
length), and the greedy tokens of both are compared. llama.cpp is llama-cpp-python built from source by
`make llama-ref` (flags there); the best of `--rounds` per row is reported for each engine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (write_section)

SECTION = "## Language models on the CPU: rlxc vs llama.cpp"
TEXT = ("The history of computing is a story of layers. At the bottom sit transistors switching on and off; above "
        "them, logic gates, adders and registers; above those, instruction sets, compilers, operating systems and "
        "finally the programs people use every day. Each layer hides the details of the one below it, and each new "
        "layer made it possible for more people to build useful things without understanding everything at once. ")
ROWS = [("prefill", 128), ("prefill", 512), ("decode", 128), ("decode", 1024)]
NEW = 64


def prompt_ids(model: str, n: int) -> list[int]:
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=64, vocab_only=True, verbose=False)
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    bos = [llm.token_bos()] if llm.token_bos() >= 0 else []
    out = bos + (ids * (n // max(len(ids), 1) + 1))
    return out[:n]


def llama_worker(cfg: dict) -> dict:
    """One measurement by llama.cpp in this process: prefill of cfg['prompt'] in one batch, then
    cfg['new'] greedy tokens one at a time."""
    from llama_cpp import Llama
    n_ctx = len(cfg["prompt"]) + cfg["new"] + 8
    llm = Llama(model_path=cfg["model"], n_ctx=n_ctx, n_batch=max(len(cfg["prompt"]), 8), n_ubatch=max(len(cfg["prompt"]), 8),
                n_threads=cfg["threads"], n_threads_batch=cfg["threads"], logits_all=False, verbose=False)
    llm.eval(cfg["prompt"][:8])  # warm-up (page in the weights), then a clean context
    llm.reset()
    t = time.perf_counter()
    llm.eval(cfg["prompt"])
    t_prefill = time.perf_counter() - t
    import numpy as np
    n_vocab = llm.n_vocab()
    gen = []
    t = time.perf_counter()
    for _ in range(cfg["new"]):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
        tok = int(logits.argmax())
        gen.append(tok)
        llm.eval([tok])
    t_decode = time.perf_counter() - t
    return {"prefill_s": t_prefill, "decode_s": t_decode, "tokens": gen}


def run_llama(model: str, prompt: list[int], new: int, threads: int) -> dict:
    cfg = {"model": model, "prompt": prompt, "new": new, "threads": threads}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("llama.cpp worker failed: " + r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_rlxc(demo: Path, artifact: Path, prompt: list[int], new: int, threads: int) -> dict:
    """rlxc's compiled artifact driven by its C program (the `make demo-llm` program): token ids in, greedy ids
    and timings out as one JSON line on stdout."""
    env = dict(os.environ, RLX_NUM_THREADS=str(threads))
    args = [str(demo), "--bench", "--tokens", ",".join(map(str, prompt)), "-n", str(new)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, cwd=artifact)
    if r.returncode != 0:
        raise RuntimeError("rlxc demo failed: " + r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--model", default=str(ROOT / "build/models/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--demo", default=str(ROOT / "build/demo-llm"), help="folder with the compiled artifact and its C driver")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="rlxc,llama")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = llama_worker(json.loads(a.worker))
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    engines = a.engines.split(",")
    demo = Path(a.demo)
    if "rlxc" in engines and not (demo / "llm").exists():
        print(f"{demo}/llm is missing: run `make demo-llm` first (it compiles the artifact and its C driver)", file=sys.stderr)
        return 2
    rows = []
    for kind, n in ROWS:
        plen = n if kind == "prefill" else n - NEW
        new = 1 if kind == "prefill" else NEW
        prompt = prompt_ids(a.model, plen)
        for t in [int(x) for x in a.threads.split(",")]:
            best: dict = {}
            for _ in range(a.rounds):
                for e in engines:
                    r = run_rlxc(demo, demo, prompt, new, t) if e == "rlxc" else run_llama(a.model, prompt, new, t)
                    rate = plen / r["prefill_s"] if kind == "prefill" else new / r["decode_s"]
                    if e not in best or rate > best[e]["rate"]:
                        best[e] = {"rate": rate, "rss": r["peak_rss_mb"], "tokens": r["tokens"]}
            same = len({tuple(b["tokens"]) for b in best.values()}) == 1
            row = {"kind": kind, "n": n, "threads": t, **{e: best[e] for e in engines}, "same_tokens": same}
            rows.append(row)
            line = f"{kind:7s} {n:5d} threads {t}: " + "  ".join(f"{e} {best[e]['rate']:8.1f} tok/s (RSS {best[e]['rss']:.0f} MB)" for e in engines)
            if len(engines) == 2:
                line += f"  rlxc/llama.cpp {best['rlxc']['rate'] / best['llama']['rate']:.2f}  same greedy tokens: {same}"
            print(line, flush=True)
    if a.out:
        size = Path(a.model).stat().st_size / 1e6
        art = sum(p.stat().st_size for p in demo.glob("*.o")) / 1e6 if demo.exists() else 0.0
        lines = [SECTION, "", "Measured by `make bench-llm` (`tests/bench/llm.py`) on Gemma 3 270M Q4_K_M "
                 f"({size:.0f} MB GGUF; rlxc's artifact object {art:.0f} MB). One process per measurement, engines interleaved,",
                 f"best of {a.rounds}; tokens/s = prompt tokens / prefill time, or {NEW} greedy tokens / their decode time.", "",
                 "| row | threads | " + " | ".join(f"{e} tok/s | {e} peak RSS MB" for e in engines) + (" | rlxc/llama.cpp | same greedy tokens |" if len(engines) == 2 else ""),
                 "|---|---:|" + "---:|---:|" * len(engines) + ("---:|---|" if len(engines) == 2 else "")]
        for r in rows:
            cells = " | ".join(f"{r[e]['rate']:.1f} | {r[e]['rss']:.0f}" for e in engines)
            extra = f" | {r['rlxc']['rate'] / r['llama']['rate']:.2f} | {'yes' if r['same_tokens'] else 'no'} |" if len(engines) == 2 else ""
            lines.append(f"| {r['kind']} {r['n']} | {r['threads']} | {cells}{extra}")
        bench.write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
