//! Random enough for varied timings (the kill storms), not for cryptography.

use std::time::{SystemTime, UNIX_EPOCH};

/// A small xorshift generator: the test needs varied timings, not cryptography. The seed is
/// printed so that a failing run can be told apart from a lucky one.
pub struct Rng(u64);

impl Rng {
    pub fn from_clock() -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng(nanos | 1)
    }

    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn seed(&self) -> u64 {
        self.0
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform enough in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
