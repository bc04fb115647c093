//! The layers the datapath runs and their cycle counts.

/// What a layer computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Fully connected: `x[1, K] · W[K, N]`.
    Fc,
    /// 2-D convolution, NCHW, groups 1.
    Conv,
    /// 2-D max pooling, NCHW.
    MaxPool,
}

/// One layer of the integer graph. A fully connected layer is a 1×1 "image" of `K` channels with a
/// 1×1 kernel; a max pool has no weights and no requantization (it keeps the int8 scale).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// The MIR node name of its matmul / conv / max_pool.
    pub node: String,
    pub kind: Kind,
    /// Input and output elements (the sizes of the activation regions it reads and writes).
    pub k: usize,
    pub n: usize,
    /// Output channels (fc: N; conv: filters; max pool: the input's channels).
    pub ch: usize,
    /// Input geometry `[cin, ih, iw]` (fc: `[K, 1, 1]`), window `[kh, kw]`, strides `[sh, sw]`,
    /// leading padding `[pt, pl]` (trailing padding follows from the output size) and output `[oh, ow]`.
    pub cin: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub pt: usize,
    pub pl: usize,
    pub oh: usize,
    pub ow: usize,
    /// What a position in the padding reads (conv: the input zero point; max pool: -128).
    pub pad_value: i64,
    /// int8 weights, `[ch][depth]` row-major (depth = cin·kh·kw; empty for a max pool).
    pub w: Vec<i8>,
    /// int32 bias per output channel.
    pub bias: Vec<i32>,
    /// Fixed-point multiplier (0 ≤ M < 2^31) and shift (1 ≤ S ≤ 63) per output channel.
    pub mult: Vec<i64>,
    pub shift: Vec<i64>,
    pub zp: i64,
    pub lo: i64,
    pub hi: i64,
}

impl Layer {
    /// Reduction steps per output value: the window times the input channels (max pool: the window).
    pub fn depth(&self) -> usize {
        match self.kind {
            Kind::MaxPool => self.kh * self.kw,
            _ => self.cin * self.kh * self.kw,
        }
    }
    /// Output pixels the loop visits (a max pool visits every channel's pixels, one lane).
    pub fn pixels(&self) -> usize {
        match self.kind {
            Kind::MaxPool => self.ch * self.oh * self.ow,
            _ => self.oh * self.ow,
        }
    }
    /// Groups of `p` output channels per pixel, and values written per pixel.
    pub fn groups(&self, p: usize) -> usize {
        match self.kind {
            Kind::MaxPool => 1,
            _ => self.ch.div_ceil(p),
        }
    }
    pub fn writes(&self) -> usize {
        match self.kind {
            Kind::MaxPool => 1,
            _ => self.ch,
        }
    }
}

/// Cycles of one inference (see the module doc): one per input byte, then per layer and output pixel
/// `G·(depth+2)` for its groups of `p` channels plus one per value written, and 2 per output byte:
/// `IN + Σ_layers pixels·(G·(depth+2) + writes) + 2·OUT`.
pub fn cycles(layers: &[Layer], in_elems: usize, out_elems: usize, p: usize) -> u64 {
    let mut c = in_elems as u64 + 2 * out_elems as u64;
    for l in layers {
        let per_pixel = l.groups(p) as u64 * (l.depth() as u64 + 2) + l.writes() as u64;
        c += l.pixels() as u64 * per_pixel;
    }
    c
}
