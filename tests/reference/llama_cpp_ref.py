#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python, `make llama-ref`) as the independent reference for GGUF models.

Given a GGUF file, prints one JSON object on stdout:

  "tokenize": for each prompt, llama.cpp's token ids with and without BOS/EOS (`add_special`) and
      with and without special-token parsing (`parse_special`): keys "plain" (neither), "bos"
      (add_special), "special" (parse_special), "bos_special" (both); and "detok": llama_detokenize
      of the "bos_special" ids as hex bytes, for (remove_special, unparse_special) in
      "ff", "ft", "tf", "tt".
  "generate" (unless --vocab-only, with -n N > 0): the prompt ids (--tokens, else the first prompt
      with BOS and special tokens parsed), "generated": N greedy ids (argmax of the logits, no
      sampler), "top": at each step the five largest logits as [id, logit] pairs (to tell a real
      difference from a near tie), "argmax" of the logits at the prompt's last position; with --logits-npy those
      logits (float32 [n_vocab]) are written there.

Prompts come from --prompt (repeatable) and/or --prompts-json (a JSON list of strings).
--vocab-only loads the vocabulary alone (no weights): the GGUF may be a tokenizer-only file.
"""

import argparse
import ctypes
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt", action="append", default=[])
    ap.add_argument("--prompts-json")
    ap.add_argument("--tokens", help="comma-separated prompt ids for generation")
    ap.add_argument("-n", type=int, default=0, help="greedy steps")
    ap.add_argument("--vocab-only", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--logits-npy")
    a = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    prompts = list(a.prompt)
    if a.prompts_json:
        with open(a.prompts_json, encoding="utf-8") as f:
            prompts += json.load(f)

    llm = Llama(
        model_path=a.model,
        vocab_only=a.vocab_only,
        n_ctx=a.ctx,
        n_batch=a.ctx,
        n_threads=a.threads,
        n_threads_batch=a.threads,
        logits_all=False,
        verbose=False,
    )
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)

    def detok(ids, remove_special, unparse_special):
        arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
        cap = 64 + 64 * len(ids)
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
            if n >= 0:
                return buf.raw[:n].hex()
            cap = -n + 1

    out = {"llama_cpp_version": llama_cpp.__version__, "n_vocab": llm.n_vocab(), "tokenize": []}
    for p in prompts:
        b = p.encode("utf-8")
        ids = {
            "plain": llm.tokenize(b, add_bos=False, special=False),
            "bos": llm.tokenize(b, add_bos=True, special=False),
            "special": llm.tokenize(b, add_bos=False, special=True),
            "bos_special": llm.tokenize(b, add_bos=True, special=True),
        }
        full = ids["bos_special"]
        ids["detok"] = {
            f"{'t' if rs else 'f'}{'t' if us else 'f'}": detok(full, rs, us) for rs in (False, True) for us in (False, True)
        }
        out["tokenize"].append({"text": p, **ids})

    if not a.vocab_only and a.n > 0:
        if a.tokens:
            prompt_ids = [int(t) for t in a.tokens.split(",") if t.strip()]
        elif prompts:
            prompt_ids = llm.tokenize(prompts[0].encode("utf-8"), add_bos=True, special=True)
        else:
            sys.exit("generation needs --tokens or a prompt")
        n_vocab = llm.n_vocab()
        llm.reset()
        llm.eval(prompt_ids)
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).astype(np.float32).copy()
        if a.logits_npy:
            np.save(a.logits_npy, logits)
        gen, top = [], []
        cur = logits
        for _ in range(a.n):
            t = int(np.argmax(cur))
            gen.append(t)
            best = np.argsort(-cur, kind="stable")[:5]
            top.append([[int(i), float(cur[i])] for i in best])
            llm.eval([t])
            cur = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
        out["generate"] = {"prompt_ids": prompt_ids, "generated": gen, "top": top, "argmax": int(np.argmax(logits))}

    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
