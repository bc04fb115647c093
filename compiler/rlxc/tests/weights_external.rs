//! `--weights external`: the object carries no weights, `NAME.weights.bin` does; a C program loads the
//! blob, calls `NAME_set_weights`, and gets bit-identical outputs to the embedded-weights artifact;
//! before the weights are set, `NAME_run` returns `NAME_ERR_NULL_WEIGHTS` (7).

mod common;
use common::{python, repo};
use std::path::{Path, PathBuf};
use std::process::Command;



fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const APP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cnn.h"
static unsigned char *slurp(const char *p, long *n) {
  FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(2); }
  fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
  unsigned char *b = aligned_alloc(64, (size_t)((*n + 63) / 64 * 64));
  if (fread(b, 1, (size_t)*n, f) != (size_t)*n) { perror(p); exit(2); }
  fclose(f); return b;
}
int main(int argc, char **argv) {
  long n;
  float *img = (float *)slurp(argv[1], &n);
  static _Alignas(64) unsigned char arena[cnn_ARENA_BYTES + 1];
  static float out[cnn_OUTPUT_0_ELEMS];
  const void *ins[] = { img };
  void *outs[] = { out };
#ifdef EXTERNAL
  int early = cnn_run(arena, ins, outs);
  if (early != cnn_ERR_NULL_WEIGHTS) { fprintf(stderr, "expected NULL_WEIGHTS, got %d\n", early); return 3; }
  long wn;
  unsigned char *w = slurp(argv[2], &wn);
  if (wn != cnn_WEIGHTS_BYTES) { fprintf(stderr, "weights: %ld bytes, header says %ld\n", wn, (long)cnn_WEIGHTS_BYTES); return 4; }
  cnn_set_weights(w);
#endif
  int rc = cnn_run(arena, ins, outs);
  if (rc != cnn_OK) { fprintf(stderr, "cnn_run returned %d\n", rc); return 5; }
  for (int i = 0; i < cnn_OUTPUT_0_ELEMS; i++) printf("%a\n", out[i]);
  return 0;
}
"#;

fn build_and_run(dir: &Path, external: bool, image_raw: &Path) -> String {
    let c = dir.join("app.c");
    std::fs::write(&c, APP).unwrap();
    let exe = dir.join("app");
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-std=c11", "-Wall", "-Werror"]).arg("-I").arg(dir).arg(&c).arg(dir.join("cnn.o")).arg(dir.join("librlx_rt.a"));
    if external {
        cc.arg("-DEXTERNAL");
    }
    ok(cc.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-o"]).arg(&exe));
    let mut run = Command::new(&exe);
    run.arg(image_raw);
    if external {
        run.arg(dir.join("cnn.weights.bin"));
    }
    ok(&mut run)
}

#[test]
fn external_weights_match_embedded_bit_for_bit() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weights_external");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    ok(Command::new(python()).arg(repo().join("tests/native/make_cnn.py")).arg("--out").arg(&root));
    // The image as raw little-endian f32 (the .npy header is 128 bytes for this shape; let numpy write raw).
    let raw = root.join("image.f32");
    ok(Command::new(python()).arg("-c").arg(format!(
        "import numpy as np; np.load('{}').astype('<f4').tofile('{}')",
        root.join("image.npy").display(),
        raw.display()
    )));
    let rlxc = env!("CARGO_BIN_EXE_rlxc");
    // Both back ends write the same contract: NAME_set_weights and error code 7 included.
    for backend in ["llvm", "cranelift"] {
        let (emb, ext) = (root.join(format!("emb-{backend}")), root.join(format!("ext-{backend}")));
        ok(Command::new(rlxc).arg("compile").arg(root.join("cnn.onnx")).args(["--target", "host", "--backend", backend, "--name", "cnn", "-o"]).arg(&emb));
        ok(Command::new(rlxc).arg("compile").arg(root.join("cnn.onnx")).args(["--target", "host", "--backend", backend, "--name", "cnn", "--weights", "external", "-o"]).arg(&ext));
        let wbytes = std::fs::metadata(ext.join("cnn.weights.bin")).unwrap().len();
        let (obj_emb, obj_ext) = (std::fs::metadata(emb.join("cnn.o")).unwrap().len(), std::fs::metadata(ext.join("cnn.o")).unwrap().len());
        assert!(wbytes > 100_000, "weights file is {wbytes} bytes");
        assert!(obj_ext + wbytes / 2 < obj_emb, "external-weights object ({obj_ext} B) should not carry the {wbytes} B of weights (embedded: {obj_emb} B)");
        let manifest = std::fs::read_to_string(ext.join("cnn.json")).unwrap();
        assert!(manifest.contains("\"weights\": \"external\"") && manifest.contains("cnn.weights.bin"), "{manifest}");
        let a = build_and_run(&emb, false, &raw);
        let b = build_and_run(&ext, true, &raw);
        assert_eq!(a.lines().count(), 10);
        assert_eq!(a, b, "{backend}: external-weights outputs differ from embedded ones");
    }
}
