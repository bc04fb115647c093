#!/usr/bin/env python3
"""LLM speed on the CPU: rlxc's compiled GGUF artifact vs llama.cpp on the same file (`make bench-llm`).

    llm.py --rlxc target/release/rlxc [--model build/models/gemma-3-270m-q4_k_m.gguf] [--threads 1,2]
           [--rounds 2] [--engines rlxc,llama] [--rows prefill128,…] [--chunk 64] [--decode-chunk 1]
           [--out docs/benchmarks.md]

Rows, each at 1 and 2 threads, both engines interleaved (rlxc, llama.cpp, rlxc, llama.cpp … one fresh
process per measurement, so each process's peak RSS is its own):
  - prefill tokens/s for a 128- and a 512-token prompt,
  - decode tokens/s at context 128 and 1,024 (a prompt of 128 − 64 or 1,024 − 64 tokens, then 64 greedy tokens),
  - peak RSS of each process, rlxc's artifact size vs the GGUF file's, the compile time.
rlxc's side: one stateful artifact per row's context and chunk (`rlxc compile --dim context=N --dim chunk=C`,
timed; C = --chunk for the prefill rows, --decode-chunk for the decode rows: the graph always runs C rows,
so a decode step of a chunk-8 artifact does 8 rows' work for one token),
linked into tests/native/llm_generate.c, run as `llm_generate --bench N IDS` (JSON line: prefill_s, decode_s,
tokens, peak_rss_mb from getrusage).
The prompt is the same token ids for both engines (a fixed English text tokenized by llama.cpp, repeated to
length), and the greedy tokens of both are compared. llama.cpp is llama-cpp-python built from source by
`make llama-ref` (flags there); the best of `--rounds` per row is reported for each engine.
The decode floor: the artifact's weight bytes (every weight is read once per decoded token) over the
read bandwidth that tests/bench/bandwidth.c measures at the same thread count.
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
    t, c = time.perf_counter(), time.process_time()
    llm.eval(cfg["prompt"])
    t_prefill, c_prefill = time.perf_counter() - t, time.process_time() - c
    import numpy as np
    n_vocab = llm.n_vocab()
    gen = []
    t, c = time.perf_counter(), time.process_time()
    for _ in range(cfg["new"]):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
        tok = int(logits.argmax())
        gen.append(tok)
        llm.eval([tok])
    t_decode, c_decode = time.perf_counter() - t, time.process_time() - c
    return {"prefill_s": t_prefill, "decode_s": t_decode, "prefill_cpu_s": c_prefill, "decode_cpu_s": c_decode, "tokens": gen}


def run_llama(model: str, prompt: list[int], new: int, threads: int) -> dict:
    cfg = {"model": model, "prompt": prompt, "new": new, "threads": threads}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, __file__, "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("llama.cpp worker failed: " + r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def build_rlxc(rlxc: str, model: str, out: Path, context: int, chunk: int, flags: list[str]) -> dict:
    """rlxc's stateful artifact for `context` positions (`chunk` tokens per prefill call) linked into
    tests/native/llm_generate.c; the compile (rlxc compile alone, not the C link) is timed."""
    d = out / f"context{context}-chunk{chunk}"
    t = time.perf_counter()
    r = subprocess.run([rlxc, "compile", model, "--target", "host", "--name", "llm", "--dim", f"context={context}",
                        "--dim", f"chunk={chunk}", "-o", str(d), *flags], capture_output=True, text=True)
    compile_s = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError("rlxc compile failed: " + r.stderr.strip()[-400:])
    subprocess.run(["cc", "-O2", "-std=c11", "-I", str(d), str(ROOT / "tests/native/llm_generate.c"), str(d / "llm.o"),
                    str(d / "librlx_rt.a"), "-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o", str(d / "generate")], check=True)
    weights = json.loads((d / "llm.json").read_text())["weights_bytes"]
    return {"dir": d, "compile_s": compile_s, "object_mb": (d / "llm.o").stat().st_size / 1e6, "weights_bytes": weights}


def bandwidth(out: Path, threads: int) -> dict:
    """Read bandwidth at `threads` threads (tests/bench/bandwidth.c): GB/s over wall time and over the
    threads' CPU time."""
    exe = out / "bandwidth"
    if not exe.exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-march=native", "-pthread", str(ROOT / "tests/bench/bandwidth.c"), "-o", str(exe)], check=True)
    r = subprocess.run([str(exe), str(threads)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_rlxc(art: dict, prompt: list[int], new: int, threads: int) -> dict:
    """rlxc's compiled artifact driven by its C program (`llm_generate --bench`, the `make demo-llm`
    program): token ids in, greedy ids, timings and peak RSS out as one JSON line on stdout."""
    env = dict(os.environ, RLX_NUM_THREADS=str(threads))
    args = [str(art["dir"] / "generate"), "--bench", str(new), ",".join(map(str, prompt))]
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("rlxc's llm_generate failed: " + r.stderr.strip()[-400:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rlxc", default=str(ROOT / "target/release/rlxc"))
    ap.add_argument("--model", default=str(ROOT / "build/models/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--build", default=str(ROOT / "build/bench-llm"), help="folder for rlxc's artifacts (one per context) and their C driver")
    ap.add_argument("--chunk", type=int, default=64, help="tokens per prefill call of rlxc's artifact for the prefill rows (--dim chunk)")
    ap.add_argument("--decode-chunk", type=int, default=1, help="--dim chunk of rlxc's artifact for the decode rows")
    ap.add_argument("--rows", default=",".join(f"{k}{n}" for k, n in ROWS), help="which rows, e.g. prefill128,decode128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="rlxc,llama")
    ap.add_argument("--out", default=None)
    ap.add_argument("--exact-activations", action="store_true", help="compile rlxc's artifacts with --exact-activations (f32 activations in every matmul)")
    ap.add_argument("--cpu", help="compile rlxc's artifacts with --cpu CPU (e.g. haswell: the AVX2 int8 path on an AVX-512 host)")
    ap.add_argument("--show-tokens", action="store_true", help="print both engines' greedy tokens where they differ")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = llama_worker(json.loads(a.worker))
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))
        return 0
    engines = a.engines.split(",")
    want = a.rows.split(",")
    todo = [(k, n) for k, n in ROWS if f"{k}{n}" in want]
    arts: dict = {}
    chunk_of = {"prefill": a.chunk, "decode": a.decode_chunk}
    if "rlxc" in engines:
        for kind, n in todo:
            key = (n, chunk_of[kind])
            if key not in arts:
                arts[key] = build_rlxc(a.rlxc, a.model, Path(a.build), *key, (["--exact-activations"] if a.exact_activations else []) + (["--cpu", a.cpu] if a.cpu else []))
                print(f"rlxc compile, context {n}, chunk {key[1]}: {arts[key]['compile_s']:.1f} s, object {arts[key]['object_mb']:.0f} MB", flush=True)
    rows = []
    for kind, n in todo:
        plen = n if kind == "prefill" else n - NEW
        new = 1 if kind == "prefill" else NEW
        prompt = prompt_ids(a.model, plen)
        for t in [int(x) for x in a.threads.split(",")]:
            best: dict = {}
            for _ in range(a.rounds):
                for e in engines:
                    r = run_rlxc(arts[(n, chunk_of[kind])], prompt, new, t) if e == "rlxc" else run_llama(a.model, prompt, new, t)
                    # rlxc's decode time covers new - 1 calls (the first token comes from the prefill);
                    # llama.cpp's worker times `new` evaluations.
                    toks = plen if kind == "prefill" else r.get("decode_tokens", new)
                    rate = toks / r[f"{kind}_s"]
                    # Tokens per second of the process's CPU time (all its threads): what the rate is
                    # while it runs, on a machine shared with other work.
                    cpu_rate = toks / max(r[f"{kind}_cpu_s"], 1e-9)
                    if e not in best or rate > best[e]["rate"]:
                        best[e] = {**best.get(e, {}), "rate": rate, "rss": r["peak_rss_mb"], "tokens": r["tokens"]}
                    best[e]["cpu_rate"] = max(best[e].get("cpu_rate", 0.0), cpu_rate)
            same = len({tuple(b["tokens"]) for b in best.values()}) == 1
            row = {"kind": kind, "n": n, "threads": t, **{e: best[e] for e in engines}, "same_tokens": same}
            rows.append(row)
            line = f"{kind:7s} {n:5d} threads {t}: " + "  ".join(f"{e} {best[e]['rate']:8.1f} tok/s ({best[e]['cpu_rate']:.1f} per CPU-s, RSS {best[e]['rss']:.0f} MB)" for e in engines)
            if len(engines) == 2:
                line += (f"  rlxc/llama.cpp {best['rlxc']['rate'] / best['llama']['rate']:.2f}"
                         f" (per CPU-s {best['rlxc']['cpu_rate'] / best['llama']['cpu_rate']:.2f})  same greedy tokens: {same}")
            print(line, flush=True)
            if a.show_tokens and not same:
                for e in engines:
                    print(f"  {e}: {best[e]['tokens']}", flush=True)
    floor = []
    if arts:
        wb = max(v["weights_bytes"] for v in arts.values())
        for t in [int(x) for x in a.threads.split(",")]:
            bw = bandwidth(Path(a.build), t)
            # rlxc's decode per CPU-second × threads: its rate with the cores to itself, comparable with
            # the bandwidth over CPU time.
            got = [r["rlxc"]["cpu_rate"] * t for r in rows if r["kind"] == "decode" and r["threads"] == t and "rlxc" in r]
            line = (f"Decode floor at {t} thread(s): {wb / 1e6:.0f} MB of weights per token / {bw['read_gb_s_cpu']:.1f} GB/s read "
                    f"bandwidth (tests/bench/bandwidth.c, over the threads' CPU time; {bw['read_gb_s']:.1f} GB/s over wall time) = "
                    f"{bw['read_gb_s_cpu'] * 1e9 / wb:.1f} tok/s at most" + (f"; rlxc's best decode row: {max(got):.1f} tok/s (per CPU-s × threads), {max(got) * wb / 1e9:.1f} GB/s of weights" if got else "") + ".")
            floor.append(line)
            print(line, flush=True)
    if a.out:
        size = Path(a.model).stat().st_size / 1e6
        comp = "; ".join(f"context {n} chunk {c}: {v['compile_s']:.1f} s, object {v['object_mb']:.0f} MB" for (n, c), v in sorted(arts.items()))
        lines = [SECTION, "", "Measured by `make bench-llm` (`tests/bench/llm.py`) on Gemma 3 270M Q4_K_M "
                 f"({size:.0f} MB GGUF). rlxc: one stateful artifact per context (`--dim context=N --dim chunk=C`, C = {a.chunk} "
                 f"for the prefill rows, {a.decode_chunk} for the decode rows), "
                 f"driven by `tests/native/llm_generate.c --bench`; compile times and object sizes: {comp or 'not built'}.",
                 f"One process per measurement, engines interleaved, best of {a.rounds}; tokens/s = prompt tokens / prefill time, "
                 f"or greedy tokens / their decode time; per CPU-s: the same tokens over the process's CPU time (all threads), "
                 f"the rate while it runs when the machine is shared (load average when this ran: {os.getloadavg()[0]:.1f} on "
                 f"{os.cpu_count()} CPUs).", "",
                 "| row | threads | " + " | ".join(f"{e} tok/s | {e} tok per CPU-s | {e} peak RSS MB" for e in engines)
                 + (" | rlxc/llama.cpp | per CPU-s | same greedy tokens |" if len(engines) == 2 else ""),
                 "|---|---:|" + "---:|---:|---:|" * len(engines) + ("---:|---:|---|" if len(engines) == 2 else "")]
        for r in rows:
            cells = " | ".join(f"{r[e]['rate']:.1f} | {r[e]['cpu_rate']:.1f} | {r[e]['rss']:.0f}" for e in engines)
            extra = (f" | {r['rlxc']['rate'] / r['llama']['rate']:.2f} | {r['rlxc']['cpu_rate'] / r['llama']['cpu_rate']:.2f}"
                     f" | {'yes' if r['same_tokens'] else 'no'} |") if len(engines) == 2 else ""
            lines.append(f"| {r['kind']} {r['n']} | {r['threads']} | {cells}{extra}")
        lines += [""] + floor
        bench.write_section(Path(a.out), SECTION, "\n".join(lines) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
