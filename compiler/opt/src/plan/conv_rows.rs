//! The row-read form of a strided `Direct` convolution (`conv_gemm.rs`) over few input channels — a
//! stem, 3 channels at 224² → 16…64 at 112² —: its B chunks are packed from x itself, each output row's
//! positions in pieces (full panels, then power-of-two widths: 112 = 64 + 32 + 16), the taps' rows of a
//! piece read by stride-s loads (two vector loads and a shuffle per vector). x is read once per call
//! where the phase launch (`phase.rs`) reads it, writes its s² phases and the GEMM reads those back: for
//! a stem that copy is as large as x and the GEMM's own work is small (K = 27), so the copy was a third of
//! the stem's time (MobileNet-like batch 8: 0.76 of 2.09 ms). Deeper strided layers keep the phases:
//! their GEMM is long (K = 9·C) and a row's narrow pieces (16 or 32 positions) would run their tiles
//! below the FMA rate, where the phase copy is a small share of the time.

use rlx_ir::loops::{Expr, IOp};
use rlx_ir::{ConstData, DType};

/// The input channels × taps at or below which a strided convolution reads x by rows.
const ROWS_MAX_K: usize = 64;

/// The geometry of a row-read convolution (2-D, stride `s` on both axes).
#[derive(Clone, Debug)]
pub(super) struct Rows {
    pub(super) s: usize,
    /// x's row width, the output's, the kernel's width and the leading pads (rows, columns).
    pub(super) w: usize,
    pub(super) ow: usize,
    pub(super) kw: usize,
    pub(super) ph: usize,
    pub(super) pw: usize,
}

impl Rows {
    /// The row-read geometry when a strided convolution of `k` = C·KH·KW, output rows of `ow`
    /// positions and `pn` positions an image over `mg` output channels takes it: few input channels
    /// (K ≤ [`ROWS_MAX_K`]), output rows of at least 32 positions in pieces of 8 or more, more
    /// positions than channels (the positions mode that packs B per slot).
    pub(super) fn fits(s: usize, k: usize, (w, ow, kw): (usize, usize, usize), (ph, pw): (usize, usize), mg: usize, pn: usize) -> Option<Rows> {
        (k <= ROWS_MAX_K && ow >= 32 && ow % 8 == 0 && mg < pn).then_some(Rows { s, w, ow, kw, ph, pw })
    }

    /// An output row's pieces (offset in the row, width): full panels of `nr`, then power-of-two widths.
    pub(super) fn pieces(&self, nr: usize) -> Vec<(usize, usize)> {
        let full = self.ow / nr * nr;
        let mut v: Vec<(usize, usize)> = (0..full).step_by(nr).map(|o| (o, nr)).collect();
        v.extend(super::conv_gemm::tail_pieces(full, self.ow));
        v
    }

    /// Positions per entry of the table of pieces wholly inside: the narrowest piece (every piece starts
    /// at a multiple of it).
    pub(super) fn granule(&self, nr: usize) -> usize {
        self.pieces(nr).iter().map(|p| p.1).min().unwrap_or(nr)
    }

    /// The element of x that lane 0 of tap `tap`'s row reads at flat output position `p` (the first of a
    /// piece): `chan` (= (n·C + c)·H·W) + (s·i + kh − ph)·W + s·j + kw − pw, i = p / OW, j = p mod OW,
    /// kh = tap / KW, kw = tap mod KW; lane l reads s·l further.
    pub(super) fn source(&self, chan: Expr, tap: &Expr, p: &Expr) -> Expr {
        let (s, w) = (self.s as i64, self.w as i64);
        let (i, j) = (Expr::i(IOp::Div, p.clone(), Expr::Int(self.ow as i64)), Expr::i(IOp::Rem, p.clone(), Expr::Int(self.ow as i64)));
        let (kh, kw) = (Expr::i(IOp::Div, tap.clone(), Expr::Int(self.kw as i64)), Expr::i(IOp::Rem, tap.clone(), Expr::Int(self.kw as i64)));
        let row = Expr::add(Expr::mul(i, Expr::Int(s)), kh);
        let at = Expr::add(Expr::add(chan, Expr::mul(row, Expr::Int(w))), Expr::add(Expr::mul(j, Expr::Int(s)), kw));
        Expr::i(IOp::Sub, at, Expr::Int(self.ph as i64 * w + self.pw as i64))
    }

    /// `Direct::inner` for the row-read form: i64 `[taps, P / granule]`, 1 at a piece's first granule
    /// where every position of the piece reads inside x for the tap (other entries 0, never read).
    pub(super) fn inner(&self, mask: &ConstData, nr: usize) -> ConstData {
        let (taps, p) = (mask.shape[0], mask.shape[1]);
        let g = self.granule(nr);
        let ng = p / g;
        let m = mask.data.bytes();
        let one = |i: usize| m[4 * i..4 * i + 4] != [0u8; 4];
        let mut v = vec![0i64; taps * ng];
        for t in 0..taps {
            for row in 0..p / self.ow {
                for (off, w) in self.pieces(nr) {
                    let p0 = row * self.ow + off;
                    v[t * ng + p0 / g] = (p0..p0 + w).all(|j| one(t * p + j)) as i64;
                }
            }
        }
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        ConstData { dtype: DType::I64, shape: vec![taps, ng], data: rlx_ir::Blob::from_vec(bytes) }
    }
}
