//! The sequence numbers an outbound ESP SA has used, so that none is used twice (the AEAD
//! IV is the sequence number: a repeat under one key breaks AES-GCM and ChaCha20-Poly1305).
//!
//! The gateway's workers draw numbers for one SA from one counter and reach the enclave in
//! whatever order their batches happen to cross, so a strictly increasing rule would refuse
//! good packets (or force the gateway to serialise its workers around the enclave). The
//! enclave instead remembers, for the [`WINDOW`] numbers at and below the highest it used,
//! which ones it used, the outbound mirror of the inbound anti-replay window (RFC 4303
//! §3.4.3): a number is accepted once if it lies above the highest, or inside the window
//! and unused; anything further below is refused, since the enclave no longer knows.

/// How far below the highest number used a late number is still accepted. 2048 numbers is
/// about 2 ms of one SA at 1 Mpps: room for a worker that lost its core between drawing
/// numbers and crossing. 256 bytes per outbound SA.
pub(crate) const WINDOW: u64 = 2048;

const WORDS: usize = (WINDOW / 64) as usize;

/// Which of the [`WINDOW`] numbers up to `top` were used; bit `n % WINDOW` stands for `n`.
pub(crate) struct SentWindow {
    /// The highest number used (0 = none yet; 0 itself is never valid).
    top: u64,
    bits: [u64; WORDS],
}

impl SentWindow {
    /// A window for an SA that has sent nothing.
    pub(crate) fn new() -> Self {
        Self { top: 0, bits: [0; WORDS] }
    }

    /// The highest number used so far (0: none).
    pub(crate) fn top(&self) -> u64 {
        self.top
    }

    /// Whether `seq` may be used now: not 0, not used before, not below the window.
    pub(crate) fn may_use(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        self.top - seq < WINDOW && !self.is_set(seq)
    }

    /// Whether `seq` lies so far below the highest number used that the window no longer
    /// says whether it was used.
    pub(crate) fn is_stale(&self, seq: u64) -> bool {
        seq != 0 && seq <= self.top && self.top - seq >= WINDOW
    }

    /// Records `seq` as used (after [`Self::may_use`] said yes and the packet was sealed).
    pub(crate) fn mark(&mut self, seq: u64) {
        if seq > self.top {
            // The numbers the window slides over were never used; their bits still stand
            // for numbers WINDOW lower, now below the window: clear them.
            if seq - self.top >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for n in self.top + 1..seq {
                    self.clear(n);
                }
            }
            self.top = seq;
        }
        self.set(seq);
    }

    /// Treats every number up to `last` as used (a migrated SA's new instance starts above
    /// the range its source kept).
    pub(crate) fn raise_floor(&mut self, last: u64) {
        if last > self.top {
            self.top = last;
            self.bits = [u64::MAX; WORDS];
        }
    }

    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        (usize::try_from(i / 64).unwrap_or(0), 1u64 << (i % 64))
    }

    fn is_set(&self, seq: u64) -> bool {
        let (w, b) = Self::slot(seq);
        self.bits.get(w).is_some_and(|x| x & b != 0)
    }

    fn set(&mut self, seq: u64) {
        let (w, b) = Self::slot(seq);
        if let Some(x) = self.bits.get_mut(w) {
            *x |= b;
        }
    }

    fn clear(&mut self, seq: u64) {
        let (w, b) = Self::slot(seq);
        if let Some(x) = self.bits.get_mut(w) {
            *x &= !b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uses `seq` if the window allows it; whether it did.
    fn take(w: &mut SentWindow, seq: u64) -> bool {
        let ok = w.may_use(seq);
        if ok {
            w.mark(seq);
        }
        ok
    }

    #[test]
    fn each_number_is_used_at_most_once_in_any_order() {
        let mut w = SentWindow::new();
        assert!(!take(&mut w, 0), "0 is never a sequence number");
        // Two workers' runs crossing out of order: 33..=64 first, then 1..=32.
        for s in 33..=64 {
            assert!(take(&mut w, s));
        }
        for s in 1..=32 {
            assert!(take(&mut w, s), "{s} is late but unused");
        }
        for s in 1..=64 {
            assert!(!take(&mut w, s), "{s} again");
        }
        assert_eq!(w.top(), 64);
    }

    #[test]
    fn numbers_below_the_window_are_refused() {
        let mut w = SentWindow::new();
        assert!(take(&mut w, WINDOW + 10));
        // 11 is exactly WINDOW - 1 below the top: the oldest the window still knows.
        assert!(!w.is_stale(11));
        assert!(take(&mut w, 11));
        assert!(!w.is_stale(11), "used, not stale: the window still knows it");
        assert!(w.is_stale(10) && w.is_stale(1), "WINDOW below the top and further: unknown");
        assert!(!take(&mut w, 10), "WINDOW below the top: unknown, refused");
        assert!(!take(&mut w, 1));
        assert!(!w.is_stale(0) && !w.is_stale(WINDOW + 11), "0 is no number; above the top is fresh");
    }

    #[test]
    fn sliding_forgets_the_old_bits_but_not_the_new_ones() {
        let mut w = SentWindow::new();
        for s in 1..=WINDOW {
            assert!(take(&mut w, s));
        }
        // One step on: the bit of 1 now stands for WINDOW + 1, which is unused.
        assert!(take(&mut w, WINDOW + 2));
        assert!(take(&mut w, WINDOW + 1), "late, unused, inside the window");
        assert!(!take(&mut w, WINDOW + 1));
        assert!(!take(&mut w, 2), "slid out of the window");
        // A jump further than the window clears every bit.
        assert!(take(&mut w, 10 * WINDOW));
        assert!(take(&mut w, 10 * WINDOW - 1));
        assert!(!take(&mut w, 10 * WINDOW - WINDOW));
    }

    #[test]
    fn every_repeat_is_refused_under_a_random_order() {
        // A deterministic shuffle of 1..=5000 in blocks of 500 (late by at most one block):
        // every number is accepted exactly once, and a second use of anything is refused.
        let mut w = SentWindow::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for block in 0..10u64 {
            let mut nums: Vec<u64> = (block * 500 + 1..=block * 500 + 500).collect();
            for i in (1..nums.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // x % (i + 1) <= i, a usize already: the fallback is never taken.
                nums.swap(i, usize::try_from(x % (i as u64 + 1)).unwrap_or(i));
            }
            for &s in &nums {
                assert!(take(&mut w, s), "{s} first use");
            }
            for &s in &nums {
                assert!(!take(&mut w, s), "{s} second use");
            }
        }
    }

    #[test]
    fn a_raised_floor_refuses_everything_up_to_it() {
        let mut w = SentWindow::new();
        assert!(take(&mut w, 5));
        w.raise_floor(100);
        for s in [1, 6, 99, 100] {
            assert!(!take(&mut w, s), "{s}");
        }
        assert!(take(&mut w, 101));
        // A lower floor changes nothing.
        w.raise_floor(50);
        assert!(take(&mut w, 102));
    }
}
