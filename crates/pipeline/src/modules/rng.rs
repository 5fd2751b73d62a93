//! A seeded xorshift64* generator for the modules that draw per packet
//! (a few instructions, reproducible runs: tests fix the seed).

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `lo..=hi`.
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.next_u64() % n,
            None => self.next_u64(),
        }
    }
}

/// The `seed` argument (default fixed, for reproducible runs).
pub fn seed(args: &mut crate::args::Args) -> Result<u64, crate::args::ArgError> {
    args.u64_or("seed", 0x9E37_79B9_7F4A_7C15)
}
