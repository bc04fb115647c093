//! f16 and bf16 as storage types of the shader writer: held widened in f32 (every f16 and bf16 value
//! is an f32 value), converted in integer arithmetic so every device rounds alike — WGSL's
//! `pack2x16float` leaves the rounding and the out-of-range result to the implementation.
//!
//! - `h2f`: f16 bits → f32, exact (subnormals as m·2^-24, inf and NaN kept, NaN payload shifted).
//! - `f2h`: f32 → f16 bits, round to nearest even as the interpreter's `half::f16::from_f32`:
//!   NaN → quiet NaN with the sign, |x| ≥ 65520 → inf, f16 subnormals rounded from the f32 mantissa.
//! - `f2bf`: f32 → bf16 bits, round to nearest even (NaN → quiet NaN with the sign); bf16 → f32 is
//!   the bits shifted up 16, inline.

pub(super) const H2F: &str = "fn h2f(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 31u;
  let m = h & 1023u;
  if (e == 0u) {
    let v = f32(m) * 5.9604644775390625e-8f;
    return select(v, -v, s != 0u);
  }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
";

pub(super) const F2H: &str = "fn f2h(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 1023u); }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  if (a >= 0x38800000u) {
    let r = a - 0x38000000u;
    return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
  }
  if (a < 0x33000000u) { return s; }
  let sh = 126u - (a >> 23u);
  let m = (a & 0x7fffffu) | 0x800000u;
  var q = m >> sh;
  let rem = m & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (q & 1u) == 1u)) { q = q + 1u; }
  return s | q;
}
";

pub(super) const F2BF: &str = "fn f2bf(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return ((b >> 16u) & 0x8000u) | 0x7fc0u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
";
