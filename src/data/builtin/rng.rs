//! A tiny seeded generator for the built-in suites.
//!
//! splitmix64 rather than `rand`'s `StdRng`: `StdRng` may change its algorithm between `rand`
//! releases, and a suite's questions and ids must stay the same on every platform and every
//! build, since journals and libraries record them.

/// splitmix64 (Steele, Lea and Flood, 2014): one 64-bit state, full period, good mixing.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for one suite: the same seed gives each suite its own stream.
    pub(crate) fn for_suite(name: &str, seed: u64) -> Self {
        // FNV-1a of the name, so adding a suite never shifts another's questions.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Self::new(seed ^ hash)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-enough in `0..n` (multiply-shift; the bias is below 2^-50 for small `n`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub(crate) fn range(&mut self, low: u32, high: u32) -> u32 {
        assert!(low <= high, "empty range {low}..={high}");
        low + self.below(u64::from(high - low) + 1) as u32
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_splitmix64_outputs() {
        // First outputs for seed 1234567 from the reference C implementation.
        let mut rng = Rng::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn ranges_stay_in_bounds_and_cover_them() {
        let mut rng = Rng::new(9);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let value = rng.range(3, 7);
            assert!((3..=7).contains(&value));
            seen[(value - 3) as usize] = true;
        }
        assert!(seen.iter().all(|&hit| hit));
    }

    #[test]
    fn suites_get_different_streams_from_one_seed() {
        let a = Rng::for_suite("arith", 0).next_u64();
        let b = Rng::for_suite("letters", 0).next_u64();
        assert_ne!(a, b);
    }
}
