//! Runs the compiled MLP on a fixed input and prints `y`, one value per line.
//!
//! `build-script-example EXPECTED.txt` also checks every value against the file (one value per
//! line, as `make_model.py --expect` prints them) within 1e-5 and exits with status 1 on a mismatch.

// The safe binding rlxc wrote; `build.rs` compiled the model as "mlp".
mod mlp {
    include!(concat!(env!("OUT_DIR"), "/rlxc/mlp/mlp.rs"));
}

/// Rows of the input; build.rs fixes the model's `batch` dim to it.
const BATCH: usize = 8192;

fn main() {
    // Artifact::binding_env exported the same path.
    assert_eq!(env!("RLX_MODEL_MLP"), concat!(env!("OUT_DIR"), "/rlxc/mlp/mlp.rs"));
    assert_eq!(mlp::INPUTS[0].shape, &[BATCH, 4]);

    // The same input as `X` in make_model.py: x[k] = ((7 k) mod 23) / 8 - 1.375.
    let x: Vec<f32> = (0..BATCH * 4).map(|k| ((k * 7) % 23) as f32 / 8.0 - 1.375).collect();
    let mut y = vec![0f32; BATCH * 3];
    let mut arena = Box::new(mlp::Arena::new());
    let inputs = mlp::Inputs { x: &x };
    let mut outputs = mlp::Outputs { y: &mut y };
    if let Err(e) = mlp::run(arena.as_mut_slice(), &inputs, &mut outputs) {
        eprintln!("mlp::run failed: {e}");
        std::process::exit(1);
    }
    for v in &y {
        println!("{v:e}");
    }

    let Some(path) = std::env::args().nth(1) else { return };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("cannot read {path}: {e}");
        std::process::exit(1)
    });
    let expected: Vec<f64> = text.split_whitespace().map(|w| w.parse().unwrap_or(f64::NAN)).collect();
    if expected.len() != y.len() {
        eprintln!("{path}: {} expected values for {} outputs", expected.len(), y.len());
        std::process::exit(1);
    }
    let close = |i: usize| (f64::from(y[i]) - expected[i]).abs() <= 1e-5; // false for NaN
    let bad: Vec<usize> = (0..y.len()).filter(|&i| !close(i)).collect();
    for &i in bad.iter().take(10) {
        eprintln!("y[{i}] = {:e}, expected {:e}", y[i], expected[i]);
    }
    if !bad.is_empty() {
        eprintln!("{} of {} values differ by more than 1e-5", bad.len(), y.len());
        std::process::exit(1);
    }
    eprintln!("all {} values match within 1e-5", y.len());
}
