#!/usr/bin/env python3
"""Regenerate the ONNX backend node test cases (the op conformance suite) into a folder.

    gen_node_cases.py [--out build/onnx-node] [--force]

Writes one folder per case: model.onnx + test_data_set_N/{input,output}_K.pb, exactly as
`python -m onnx.backend.test.cmd_tools generate-data` lays them out (we reuse its writer).
The onnx wheel no longer ships these files, so they are produced from the case definitions in
onnx.backend.test.case.node. NumPy's global RNG is seeded first so that the data, and so the
pass/fail ratchet, are the same on every machine for a given onnx version.

A stamp file (OUT/.stamp) records the onnx version; when it matches, nothing is done.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import types
import warnings

import numpy as np
import onnx

STAMP = ".stamp"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("build", "onnx-node"))
    ap.add_argument("--force", action="store_true", help="regenerate even if the stamp matches")
    args = ap.parse_args()

    stamp_text = f"onnx {onnx.__version__}\n"
    stamp_path = os.path.join(args.out, STAMP)
    if not args.force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read() == stamp_text:
                n = sum(1 for e in os.scandir(args.out) if e.is_dir())
                print(f"conformance-data: {n} cases in {args.out} are up to date (onnx {onnx.__version__})")
                return 0

    t0 = time.monotonic()
    # The case definitions overflow/divide by zero on purpose (inf/nan cases); keep the log quiet.
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    np.random.seed(0)
    from onnx.backend.test import cmd_tools
    from onnx.backend.test.case import node as node_cases

    cases = node_cases.collect_testcases()
    t_collect = time.monotonic() - t0

    # generate_data() writes OUTPUT/<case.kind>/<case.name>/ for whatever its module-level
    # `model_test.collect_testcases()` returns; hand it one node case at a time so that a case
    # that fails to serialize is reported and skipped instead of stopping the run.
    tmp = args.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    failed = []
    real_model_test = cmd_tools.model_test
    try:
        for case in cases:
            cmd_tools.model_test = types.SimpleNamespace(collect_testcases=lambda c=case: [c])
            try:
                cmd_tools.generate_data(argparse.Namespace(output=tmp))
            except Exception as e:  # noqa: BLE001 - report every broken case, keep going
                failed.append((case.name, f"{type(e).__name__}: {e}"))
                shutil.rmtree(os.path.join(tmp, case.kind, case.name), ignore_errors=True)
    finally:
        cmd_tools.model_test = real_model_test

    written_root = os.path.join(tmp, "node")
    os.makedirs(written_root, exist_ok=True)
    shutil.rmtree(args.out, ignore_errors=True)
    os.replace(written_root, args.out)
    shutil.rmtree(tmp, ignore_errors=True)
    with open(stamp_path, "w") as f:
        f.write(stamp_text)

    n = sum(1 for e in os.scandir(args.out) if e.is_dir())
    dt = time.monotonic() - t0
    print(f"conformance-data: wrote {n} node cases to {args.out} in {dt:.1f}s "
          f"(collect {t_collect:.1f}s, onnx {onnx.__version__})")
    for name, err in failed:
        print(f"  skipped {name}: {err}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
