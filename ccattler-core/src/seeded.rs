//! The one pseudo-random generator of the crate: ids and retry jitter, seeded so that a run
//! can be replayed.
//!
//! It is xoshiro256++ (`rand_xoshiro`, already in the tree of the persistent maps this crate
//! uses), so core pulls in no generator of its own. Seeds from "entropy" come from the standard
//! library's per-process random hash keys: unpredictable enough to keep ids of two processes
//! apart, not meant for secrets.

use std::hash::{BuildHasher, Hasher};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A seedable generator of 64-bit numbers and unit fractions.
#[derive(Clone, Debug)]
pub(crate) struct Seeded(Xoshiro256PlusPlus);

impl Seeded {
    /// The generator for `seed`: the same seed gives the same numbers.
    pub(crate) fn new(seed: u64) -> Self {
        Seeded(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    /// A generator seeded from the process's random hash keys.
    pub(crate) fn from_entropy() -> Self {
        Seeded::new(entropy())
    }

    /// The next 64 random bits.
    pub(crate) fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        // The top 53 bits, as many as an f64 holds exactly.
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// 64 bits from the standard library's random hash keys (fresh keys on every call).
pub(crate) fn entropy() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x9e37_79b9_7f4a_7c15);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_units_stay_in_range() {
        let (mut a, mut b) = (Seeded::new(7), Seeded::new(7));
        assert_eq!(a.u64(), b.u64());
        assert_ne!(Seeded::new(7).u64(), Seeded::new(8).u64());
        for _ in 0..1000 {
            let unit = a.unit();
            assert!((0.0..1.0).contains(&unit), "{unit}");
        }
        assert_ne!(entropy(), entropy(), "fresh keys each call");
    }
}
