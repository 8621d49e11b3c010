//! A small seeded PRNG (xoshiro256** seeded by SplitMix64).
//!
//! Kept in-crate so that a synthetic trace depends only on its seed and this file, never on a
//! dependency's version: the same `--seed` gives the same trace on every build.

/// SplitMix64 step: used for seeding and for deriving per-stream seeds.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xoshiro256** generator.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator for stream `stream` of seed `seed` (streams are independent).
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03);
        let mut s = [0u64; 4];
        for word in &mut s {
            *word = splitmix64(&mut sm);
        }
        Self { s }
    }

    /// Next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in (0, 1): never exactly 0 or 1, so logs and powers are safe.
    pub(crate) fn open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (lo, hi).
    pub(crate) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.open01()
    }

    /// Standard normal (Box–Muller; one of the pair is dropped for simplicity).
    pub(crate) fn normal(&mut self) -> f64 {
        let r = (-2.0 * self.open01().ln()).sqrt();
        r * (core::f64::consts::TAU * self.open01()).cos()
    }

    /// Exponential with the given mean.
    pub(crate) fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.open01().ln()
    }

    /// Uniform index in `0..n` (`n > 0`).
    #[cfg(test)]
    pub(crate) fn below(&mut self, n: usize) -> usize {
        // Multiply-shift: unbiased enough for test data, exact for powers of two.
        let x = u128::from(self.next_u64()) * n as u128;
        usize::try_from(x >> 64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_stream_give_same_sequence() {
        let mut a = Rng::new(7, 3);
        let mut b = Rng::new(7, 3);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(7, 4);
        assert_ne!(Rng::new(7, 3).next_u64(), c.next_u64());
    }

    #[test]
    fn open01_mean_and_range() {
        let mut r = Rng::new(1, 0);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = r.open01();
            assert!(x > 0.0 && x < 1.0);
            sum += x;
        }
        assert!((sum / f64::from(n) - 0.5).abs() < 0.01);
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut r = Rng::new(2, 0);
        let n = 200_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let x = r.normal();
            s += x;
            s2 += x * x;
        }
        let mean = s / f64::from(n);
        let var = s2 / f64::from(n) - mean * mean;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
    }
}
