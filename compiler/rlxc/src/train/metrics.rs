//! Evaluation after an epoch: the model's predictions on a split, batch by batch (the last partial
//! batch padded with zero rows, which are not counted), scored in f64: cross-entropy's mean loss
//! (log-softmax of the logits) and accuracy (first maximal logit = label), or mse's mean loss.

use super::compiled::CompiledTraining;
use super::data::Split;
use crate::cli::Failure;
use rlx_opt::Loss;

/// Mean loss and (cross-entropy) accuracy of the current parameters on `s`.
pub fn evaluate(t: &mut CompiledTraining, s: &Split, loss: Loss) -> Result<(f64, Option<f64>), Failure> {
    let b = t.batch();
    let n = s.len();
    let row_x = s.x.data.len() / n.max(1);
    let (mut total, mut hits) = (0.0f64, 0usize);
    let targets = s.y.to_f64_vec();
    let per_y = targets.len() / n.max(1);
    let mut padded = Vec::new();
    for from in (0..n).step_by(b) {
        let rows = b.min(n - from);
        let (x, _) = s.rows(from, rows);
        let x = if rows == b {
            x
        } else {
            padded.clear();
            padded.extend_from_slice(x);
            padded.resize(b * row_x, 0);
            &padded[..]
        };
        let pred = t.predict(x)?;
        let per = pred.len() / b;
        for r in 0..rows {
            let z = &pred[r * per..(r + 1) * per];
            let y = &targets[(from + r) * per_y..(from + r + 1) * per_y];
            match loss {
                Loss::CrossEntropy => {
                    let label = y[0] as usize;
                    let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                    total += lse - z[label];
                    let best = (0..per).fold(0, |k, j| if z[j] > z[k] { j } else { k });
                    hits += usize::from(best == label);
                }
                Loss::Mse => total += z.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>() / per as f64,
            }
        }
    }
    let acc = (loss == Loss::CrossEntropy).then(|| hits as f64 / n as f64);
    Ok((total / n as f64, acc))
}
