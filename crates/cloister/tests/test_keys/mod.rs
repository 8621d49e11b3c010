//! Throwaway hex keys for static-SA tests: static SAs need fresh keys on every start (an
//! outbound key may never be installed twice), so each run draws its own.

use std::fmt::Write;

/// A small PRNG (splitmix64), seeded from the clock and the process ID.
pub(crate) struct Keys(pub(crate) u64);

impl Keys {
    /// A generator seeded for this run.
    pub(crate) fn seeded() -> Self {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Self(u64::try_from(nanos & u128::from(u64::MAX)).unwrap_or(0) ^ u64::from(std::process::id()))
    }

    /// `len` bytes as hex.
    pub(crate) fn hex(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(2 * len);
        for _ in 0..len {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let _ = write!(s, "{:02x}", (z ^ (z >> 31)) & 0xff);
        }
        s
    }
}
