//! Backward rules of max and average pooling, written with the window's offsets: for each kernel
//! offset k, the strided slice of the padded input that offset reads (`window`) and the transposed
//! depthwise convolution with a one-hot kernel that puts a value back at the positions it read
//! (`scatter`). Average pooling divides by the same count the op used (in-bounds positions, or
//! positions inside the padded extent with `count_include_pad`); max pooling sends the gradient to
//! every input equal to its window's maximum (all of them on ties).

use super::build::B;
use super::Site;
use rlx_ir::{BinaryOp, ConstData, DType, MirOp, PadMode, PoolKind, Shape, ValueId};

/// The geometry shared by both rules.
struct Geo {
    x: Vec<usize>,
    out: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dil: Vec<usize>,
    /// Begin and end padding per spatial axis, the end including what ceil mode's last windows need.
    begin: Vec<usize>,
    end: Vec<usize>,
    pads: Vec<usize>,
}

impl Geo {
    fn sp(&self) -> usize {
        self.kernel.len()
    }
    /// Every kernel offset, row-major.
    fn offsets(&self) -> Vec<Vec<usize>> {
        let mut v = vec![vec![]];
        for &k in &self.kernel {
            v = v.into_iter().flat_map(|p: Vec<usize>| (0..k).map(move |i| [p.clone(), vec![i]].concat())).collect();
        }
        v
    }
    /// Pads `v` (rank 2 + sp) by `begin`/`end` on the spatial axes with `value`.
    fn pad(&self, b: &mut B, v: ValueId, begin: &[usize], end: &[usize], value: f64, negate: bool) -> Result<ValueId, String> {
        let sp = self.sp();
        let mut pads = vec![0i64; 2 * (sp + 2)];
        for i in 0..sp {
            let s = if negate { -1 } else { 1 };
            pads[i + 2] = s * begin[i] as i64;
            pads[i + 2 + sp + 2] = s * end[i] as i64;
        }
        b.op(MirOp::Pad { pads, mode: PadMode::Constant, value }, &[v])
    }
    /// The values kernel offset `k` reads from the padded `xp`, one per output position.
    fn window(&self, b: &mut B, xp: ValueId, k: &[usize]) -> Result<ValueId, String> {
        let sp = self.sp();
        let axes: Vec<usize> = (2..sp + 2).collect();
        let starts: Vec<i64> = (0..sp).map(|i| (k[i] * self.dil[i]) as i64).collect();
        let ends: Vec<i64> = (0..sp).map(|i| starts[i] + ((self.out[i] - 1) * self.strides[i]) as i64 + 1).collect();
        let steps: Vec<i64> = self.strides.iter().map(|&s| s as i64).collect();
        b.op(MirOp::Slice { axes, starts, ends, steps }, &[xp])
    }
    /// Adds `v` (output-shaped) back at the padded-input positions the offsets of `kernel` (a
    /// [C,1,k…] constant) read, then crops the padding: a depthwise transposed convolution.
    fn scatter(&self, b: &mut B, v: ValueId, kernel: ValueId, channels: usize) -> Result<ValueId, String> {
        let sp = self.sp();
        let mut output_padding = Vec::with_capacity(sp);
        for i in 0..sp {
            let base = (self.out[i] - 1) * self.strides[i] + self.dil[i] * (self.kernel[i] - 1) + 1;
            output_padding.push(self.x[i] + self.begin[i] + self.end[i] - base);
        }
        let op = MirOp::ConvTranspose { strides: self.strides.clone(), pads: vec![0; 2 * sp], dilations: self.dil.clone(), groups: channels, output_padding };
        let full = b.op(op, &[v, kernel])?;
        self.pad(b, full, &self.begin.clone(), &self.end.clone(), 0.0, true)
    }
    /// A [C,1,k…] kernel of `dt`: 1 at `only` (or everywhere when None).
    fn kernel(&self, b: &mut B, dt: DType, channels: usize, only: Option<&[usize]>) -> ValueId {
        let kn: usize = self.kernel.iter().product();
        let mut one = vec![0.0; kn];
        match only {
            None => one.iter_mut().for_each(|v| *v = 1.0),
            Some(k) => one[k.iter().zip(&self.kernel).fold(0, |a, (&i, &n)| a * n + i)] = 1.0,
        }
        let data: Vec<f64> = (0..channels).flat_map(|_| one.iter().copied()).collect();
        let shape: Vec<usize> = [channels, 1].into_iter().chain(self.kernel.iter().copied()).collect();
        b.g.add_const(None, ConstData::from_f64s(dt, shape, &data))
    }
}

#[allow(clippy::too_many_arguments)]
pub fn pool(kind: PoolKind, kernel: &[usize], strides: &[usize], pads: &[usize], dilations: &[usize], count_include_pad: bool, b: &mut B, s: &Site, g: ValueId) -> Result<Vec<Option<ValueId>>, String> {
    let (x, y) = (s.ins[0], s.outs[0]);
    let xt = b.ty(x);
    let xs = xt.shape.as_fixed().ok_or("the gradient of a pool needs fixed input dims")?;
    let ys = b.ty(y).shape.as_fixed().ok_or("the gradient of a pool needs fixed output dims")?;
    let sp = kernel.len();
    let channels = xs[1];
    let mut end = Vec::with_capacity(sp);
    for i in 0..sp {
        // Ceil mode's last window may reach past the end padding.
        let reach = (ys[i + 2] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1;
        end.push(reach.saturating_sub(xs[i + 2] + pads[i]).max(pads[i + sp]));
    }
    let geo = Geo {
        x: xs[2..].to_vec(),
        out: ys[2..].to_vec(),
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        dil: dilations.to_vec(),
        begin: pads[..sp].to_vec(),
        end,
        pads: pads.to_vec(),
    };
    let gx = match kind {
        PoolKind::Avg => {
            // The divisor per output position: in-bounds positions of the window, or those inside the
            // padded extent (never the ceil-mode overflow).
            let ones_shape = Shape::fixed(&[&[1usize, 1][..], &xs[2..]].concat());
            let ones = b.fill(xt.dtype, 1.0, &ones_shape)?;
            let inc = if count_include_pad { 1.0 } else { 0.0 };
            let p = geo.pad(b, ones, &geo.pads[..sp].to_vec(), &geo.pads[sp..].to_vec(), inc, false)?;
            let extra: Vec<usize> = (0..sp).map(|i| geo.end[i] - geo.pads[sp + i]).collect();
            let p = geo.pad(b, p, &vec![0; sp], &extra, 0.0, false)?;
            let mut cnt: Option<ValueId> = None;
            for k in geo.offsets() {
                let w = geo.window(b, p, &k)?;
                cnt = Some(match cnt {
                    None => w,
                    Some(c) => b.add(c, w)?,
                });
            }
            let share = b.div(g, cnt.ok_or("empty pool kernel")?)?;
            let k = geo.kernel(b, xt.dtype, channels, None);
            geo.scatter(b, share, k, channels)?
        }
        PoolKind::Max => {
            let xp = geo.pad(b, x, &geo.begin.clone(), &geo.end.clone(), f64::NEG_INFINITY, false)?;
            let mut acc: Option<ValueId> = None;
            for k in geo.offsets() {
                let w = geo.window(b, xp, &k)?;
                let hit = b.bin(BinaryOp::Eq, w, y)?;
                let part = b.select(hit, g, true)?;
                let kc = geo.kernel(b, xt.dtype, channels, Some(&k));
                let back = geo.scatter(b, part, kc, channels)?;
                acc = Some(match acc {
                    None => back,
                    Some(a) => b.add(a, back)?,
                });
            }
            acc.ok_or("empty pool kernel")?
        }
    };
    Ok(vec![Some(gx)])
}
