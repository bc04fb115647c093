//! Choosing the next token from logits: greedy (temperature 0: the first largest logit), or
//! sampling in llama.cpp's default order — top-k, then top-p on the softmax of the raw logits, then
//! temperature, then a draw from the renormalized distribution — with a seeded RNG of our own, so
//! the same seed gives the same tokens on every machine and build.

/// Sampling settings (`--temperature`, `--top-k`, `--top-p`, `--seed`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0: greedy. Otherwise logits are divided by it before the draw.
    pub temperature: f32,
    /// Keep the k largest logits (0: all).
    pub top_k: usize,
    /// Keep the most probable tokens whose probabilities add up to at least p (1: all), in (0, 1].
    pub top_p: f32,
    pub seed: u64,
}

impl Sampling {
    /// `--temperature` 0 (greedy), and llama.cpp's defaults for the rest: top-k 40, top-p 0.95.
    pub const DEFAULT: Sampling = Sampling { temperature: 0.0, top_k: 40, top_p: 0.95, seed: 0 };

    /// Checks the values; the message names the flag.
    pub fn check(&self) -> Result<(), String> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(format!("--temperature {} must be a finite number ≥ 0 (0 = greedy)", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("--top-p {} must be in (0, 1] (1 = off)", self.top_p));
        }
        Ok(())
    }
}

/// xoshiro256** (Blackman and Vigna), its state filled by SplitMix64 from the seed, as its authors
/// recommend. Small, fast, and fixed here, so the stream never changes with a crate upgrade.
#[derive(Clone, Debug)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }
    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

pub struct Sampler {
    cfg: Sampling,
    rng: Rng,
}

impl Sampler {
    pub fn new(cfg: Sampling) -> Sampler {
        Sampler { cfg, rng: Rng::new(cfg.seed) }
    }

    /// The next token. NaN logits never win; an error when no logit is a number.
    pub fn sample(&mut self, logits: &[f32]) -> Result<i64, String> {
        if self.cfg.temperature == 0.0 {
            return argmax(logits).map(|i| i as i64);
        }
        // Candidates by logit, largest first; equal logits by id (a total, deterministic order).
        let mut cand: Vec<(usize, f32)> = logits.iter().copied().enumerate().filter(|(_, x)| !x.is_nan()).collect();
        if cand.is_empty() {
            return Err(no_number(logits.len()));
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.cfg.top_k > 0 {
            cand.truncate(self.cfg.top_k);
        }
        // top-p on the softmax of the raw logits (temperature comes after, as in llama.cpp).
        if self.cfg.top_p < 1.0 {
            let p = softmax(&cand, 1.0);
            let mut sum = 0.0;
            let mut keep = cand.len();
            for (i, q) in p.iter().enumerate() {
                sum += q;
                if sum >= self.cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep);
        }
        let p = softmax(&cand, self.cfg.temperature as f64);
        let u = self.rng.next_f64();
        let mut sum = 0.0;
        for (c, q) in cand.iter().zip(&p) {
            sum += q;
            if u < sum {
                return Ok(c.0 as i64);
            }
        }
        // Rounding left the sum just under 1 and u above it: the last candidate.
        Ok(cand[cand.len() - 1].0 as i64)
    }
}

fn no_number(n: usize) -> String {
    format!("none of the model's {n} logits is a number (NaN)")
}

/// The first index of the largest logit (NaN never wins).
pub fn argmax(logits: &[f32]) -> Result<usize, String> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in logits.iter().enumerate() {
        if !x.is_nan() && best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|b| b.0).ok_or_else(|| no_number(logits.len()))
}

/// Probabilities of sorted candidates (largest logit first) at temperature `t`, in f64.
fn softmax(cand: &[(usize, f32)], t: f64) -> Vec<f64> {
    let m = cand[0].1 as f64;
    let e: Vec<f64> = cand.iter().map(|c| if c.1 == f32::NEG_INFINITY { 0.0 } else { ((c.1 as f64 - m) / t).exp() }).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_seeding_matches_its_published_sequence() {
        // SplitMix64 from seed 0: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f, …
        // (the reference C code by Vigna): the state xoshiro256** starts from.
        let r = Rng::new(0);
        assert_eq!(r.0[..3], [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f]);
    }

    #[test]
    fn greedy_takes_the_first_largest_and_skips_nan() {
        let mut s = Sampler::new(Sampling::DEFAULT);
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, f32::NAN]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0]).unwrap(), 1);
        assert!(s.sample(&[f32::NAN]).unwrap_err().contains("NaN"));
    }

    #[test]
    fn top_k_1_and_tiny_top_p_are_greedy() {
        let logits = [0.5, 2.0, 1.9, -3.0];
        for cfg in [Sampling { temperature: 5.0, top_k: 1, top_p: 1.0, seed: 7 }, Sampling { temperature: 5.0, top_k: 0, top_p: 1e-6, seed: 7 }] {
            let mut s = Sampler::new(cfg);
            for _ in 0..200 {
                assert_eq!(s.sample(&logits).unwrap(), 1);
            }
        }
    }

    #[test]
    fn draws_follow_the_tempered_softmax() {
        // Two candidates 0.8 apart at T = 2: P(first) = 1 / (1 + e^-0.4) = 0.5987.
        let logits = [8.0, 7.2, -50.0];
        let mut s = Sampler::new(Sampling { temperature: 2.0, top_k: 2, top_p: 1.0, seed: 1 });
        let n = 20000;
        let first = (0..n).filter(|_| s.sample(&logits).unwrap() == 0).count() as f64 / n as f64;
        let want = 1.0 / (1.0 + (-0.4f64).exp());
        // 4.5 standard deviations of a binomial proportion.
        assert!((first - want).abs() < 4.5 * (want * (1.0 - want) / n as f64).sqrt(), "{first} vs {want}");
    }
}
