#!/usr/bin/env python3
"""Compares the outputs tests/gpu/run_real_gpu.sh brought back: --target vulkan vs --target interp."""
import sys
from pathlib import Path

import numpy as np

root = Path(sys.argv[1])
tol = {"mlp": 1e-5, "cnn": 1e-5, "minilm": 1e-4}
bad = 0
for name, t in tol.items():
    for f in sorted((root / f"{name}-interp").glob("*.npy")):
        a, b = np.load(f), np.load(root / f"{name}-vulkan" / f.name)
        d = float(np.abs(a - b).max())
        ok = d <= t
        bad += not ok
        print(f"{name}/{f.stem}: shape {a.shape}, max abs diff vulkan vs interp {d:.2e} (tolerance {t:g}) {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
