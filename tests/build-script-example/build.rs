//! Compiles the MLP into OUT_DIR/rlxc/mlp/ and links it. The model is `model.onnx` (written by
//! `make_model.py`), or the file named by `EXAMPLE_MODEL` (the tests use it for a broken model).

fn main() {
    println!("cargo:rerun-if-env-changed=EXAMPLE_MODEL");
    let model = std::env::var("EXAMPLE_MODEL").unwrap_or_else(|_| "model.onnx".into());
    rlxc_build::Model::new(model)
        .name("mlp")
        .dim("batch", 8192)
        .target("host")
        .weights_external(false)
        .compile_or_exit()
        .binding_env("RLX_MODEL_MLP");
}
