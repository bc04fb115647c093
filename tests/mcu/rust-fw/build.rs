// Links with link.x (memory map of QEMU's mps2-an386) and rebuilds when the model source changes.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    println!("cargo:rustc-link-arg=-T{dir}/link.x");
    println!("cargo:rerun-if-changed=link.x");
    println!("cargo:rerun-if-env-changed=RLX_MODEL_RS");
    if let Ok(p) = std::env::var("RLX_MODEL_RS") {
        println!("cargo:rerun-if-changed={p}");
    }
}
