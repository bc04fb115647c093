//! What `rlxc train` reports per epoch: a CSV (`epoch,train_loss,test_loss,test_accuracy,img_per_s`;
//! empty cells where there is no test split or no accuracy) and, with `--plot FILE.svg`, a plot of
//! the losses and the accuracy against the epoch, drawn with plotters' SVG back end.

use crate::cli::Failure;
use std::path::Path;

/// One epoch's figures.
#[derive(Clone, Debug)]
pub struct Epoch {
    pub epoch: usize,
    /// Mean loss of the epoch's steps.
    pub train_loss: f64,
    pub test_loss: Option<f64>,
    pub test_accuracy: Option<f64>,
    /// Images (samples) per second of the training steps alone.
    pub img_per_s: f64,
}

pub fn csv(rows: &[Epoch]) -> String {
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
    let mut s = String::from("epoch,train_loss,test_loss,test_accuracy,img_per_s\n");
    for r in rows {
        s.push_str(&format!("{},{:.6},{},{},{:.1}\n", r.epoch, r.train_loss, opt(r.test_loss), opt(r.test_accuracy), r.img_per_s));
    }
    s
}

pub fn write_csv(path: &Path, rows: &[Epoch]) -> Result<(), Failure> {
    std::fs::write(path, csv(rows)).map_err(|e| Failure::model(format!("cannot write {}: {e}", path.display())))
}

/// The losses (top) and the test accuracy (bottom, when there is one) against the epoch, as SVG.
pub fn plot(path: &Path, rows: &[Epoch]) -> Result<(), Failure> {
    draw(path, rows).map_err(|e| Failure::model(format!("cannot write the plot {}: {e}", path.display())))
}

fn draw(path: &Path, rows: &[Epoch]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (800, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(300);
    let last = rows.iter().map(|r| r.epoch).max().unwrap_or(1).max(2) as f64;
    let series = |f: &dyn Fn(&Epoch) -> Option<f64>| -> Vec<(f64, f64)> { rows.iter().filter_map(|r| f(r).map(|v| (r.epoch as f64, v))).collect() };
    let train = series(&|r| Some(r.train_loss));
    let test = series(&|r| r.test_loss);
    let hi = train.iter().chain(&test).map(|p| p.1).filter(|v| v.is_finite()).fold(0.0f64, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&top).caption("loss", ("sans-serif", 20)).margin(12).x_label_area_size(30).y_label_area_size(55).build_cartesian_2d(1f64..last, 0f64..hi.max(1e-6))?;
    c.configure_mesh().x_desc("epoch").y_desc("loss").draw()?;
    c.draw_series(LineSeries::new(train, &BLUE))?.label("train (mean over the epoch)").legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    if !test.is_empty() {
        c.draw_series(LineSeries::new(test, &RED))?.label("test").legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    let acc = series(&|r| r.test_accuracy);
    if !acc.is_empty() {
        let lo = acc.iter().map(|p| p.1).fold(1.0f64, f64::min);
        let mut c = ChartBuilder::on(&bottom).caption("test accuracy", ("sans-serif", 20)).margin(12).x_label_area_size(30).y_label_area_size(55).build_cartesian_2d(1f64..last, (lo - 0.05).max(0.0)..1.0)?;
        c.configure_mesh().x_desc("epoch").y_desc("accuracy").draw()?;
        c.draw_series(LineSeries::new(acc, &GREEN))?;
    }
    root.present()?;
    Ok(())
}
