//! Anti-replay (RFC 4303 §3.4.3) with Extended Sequence Numbers (§2.2.1, Appendix A), safe to
//! share between workers without a lock.
//!
//! # Layout
//!
//! The window is a ring of 64-bit words in the manner of RFC 6479: each word covers one
//! *block* of 32 consecutive sequence numbers. Unlike RFC 6479, a word carries its block
//! number next to its bitmap, so it never needs to be cleared ahead of use:
//!
//! ```text
//!  63                              32 31                               0
//! +----------------------------------+----------------------------------+
//! |  tag: low 32 bits of seq >> 5    |  bitmap: bit (seq & 31) is seen  |
//! +----------------------------------+----------------------------------+
//! ```
//!
//! Block `b` lives in word `b mod slots`. A word whose tag is older than `b` is stale: the
//! first commit in block `b` replaces it with `(b, bit)` in one compare-and-swap. A word whose
//! tag is newer than `b` means `b` has left the window. With `slots - 1` blocks of history,
//! any window size up to `(slots - 1) * 32` is exact.
//!
//! # Concurrency
//!
//! Several workers may check and commit packets of one SA at once. A commit is one CAS on
//! one word (retried on contention) followed by `fetch_max` on the highest sequence number
//! ("top"); a sequence number is accepted only by the CAS that sets its bit, so no number is
//! ever accepted twice, whatever the interleaving. Tags only grow, so a set bit is only lost
//! when its block has left the window, and then the number is refused as too old. Between a
//! successful CAS and the `fetch_max`, another worker may still see the old top; at worst it
//! accepts an in-window number a little longer, never a duplicate.
//!
//! Check before decryption, commit after the enclave authenticated the packet (RFC 4303
//! §3.4.3: "the receive window is updated only if the integrity verification succeeds").

use core::sync::atomic::{AtomicU64, Ordering};

use crate::drop::DropReason;
use crate::error::{Error, Result};

/// Sequence numbers per word.
const BLOCK_BITS: u64 = 32;
/// log2 of [`BLOCK_BITS`].
const BLOCK_SHIFT: u32 = 5;

/// The smallest window this implementation accepts (RFC 4303 §3.4.3: "a minimum window size
/// of 32 packets MUST be supported").
pub const MIN_WINDOW: u32 = 32;
/// The largest window (4096 words, 32 KiB per inbound SA).
pub const MAX_WINDOW: u32 = 65_504;
/// The window used when the configuration gives none. RFC 4303 asks for at least 32 and
/// suggests 64, but workers that share one SA reorder its packets: two workers reading one
/// raw ESP socket once delivered runs of packets 1030 to 1070 behind the newest
/// (`gateway_pair.rs`, iperf3 TCP on 2 cores), which a 1024-packet window dropped. A raw
/// socket has one reader now, but ESP-in-UDP spread over workers (`spread_inbound`) and a
/// peer's own reordering still need the room: 4096 leaves it for a worker that loses a few
/// scheduler slices, for 2 KiB per inbound SA.
pub const DEFAULT_WINDOW: u32 = 4096;

/// The low 32 bits of a 64-bit value.
fn low32(x: u64) -> u32 {
    let [_, _, _, _, a, b, c, d] = x.to_be_bytes();
    u32::from_be_bytes([a, b, c, d])
}

/// An anti-replay window over 64-bit sequence numbers (32-bit ones are the ESN-less case).
#[derive(Debug)]
pub struct ReplayWindow {
    /// The highest sequence number committed (0: none yet).
    top: AtomicU64,
    /// Window size W: numbers in `top - W + 1 ..= top` are judged by their bit.
    size: u64,
    /// `slots.len() - 1`, a power of two minus one.
    mask: u64,
    slots: Box<[AtomicU64]>,
}

impl ReplayWindow {
    /// A window of `size` packets, `MIN_WINDOW..=MAX_WINDOW`.
    pub fn new(size: u32) -> Result<Self> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&size) {
            return Err(Error::InvalidSa { field: "replay_window", why: "must be 32..=65504 packets" });
        }
        // One more block than the window spans, so the oldest partial block keeps its bits.
        let blocks = (u64::from(size) / BLOCK_BITS + 2).next_power_of_two();
        let slots: Box<[AtomicU64]> = (0..blocks).map(|_| AtomicU64::new(0)).collect();
        Ok(Self { top: AtomicU64::new(0), size: u64::from(size), mask: blocks - 1, slots })
    }

    /// The window size in packets.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The highest sequence number accepted so far (0 if none).
    pub fn top(&self) -> u64 {
        self.top.load(Ordering::Acquire)
    }

    /// The full sequence number of a packet whose header carries `seq_lo`.
    ///
    /// Without ESN this is `seq_lo`. With ESN the high half is inferred from the window as in
    /// RFC 4303 Appendix A2.2, with one change: where A2.2 places a number below the window
    /// in the next subspace, this places it there only when it lies less than 2^31 ahead
    /// (RFC 1982 serial arithmetic), and otherwise in the window's own subspace. A packet
    /// that arrives late then is what it is, a replay-window drop that costs no enclave
    /// call, instead of a guess whose ICV check fails and is counted as a forgery. `None`
    /// when the inference leaves the 64-bit space (a number "before" 2^32 while nothing has
    /// been received yet, or past 2^64), which is a replay or garbage. A wrong guess only
    /// makes the ICV check fail; after many failures in a row the worker retries a packet
    /// with higher halves (Appendix A3, [`crate::WorkerConfig::esn_resync_after`]).
    pub fn infer(&self, seq_lo: u32, esn: bool) -> Option<u64> {
        if !esn {
            return Some(u64::from(seq_lo));
        }
        let top = self.top();
        let (th, tl) = (top >> 32, low32(top));
        // W <= MAX_WINDOW < 2^32, so this cannot truncate.
        let w_minus_1 = u32::try_from(self.size - 1).unwrap_or(u32::MAX);
        let seq_hi = if tl >= w_minus_1 {
            // Case A: the window lies within one 2^32 subspace.
            if seq_lo >= tl - w_minus_1 || tl - seq_lo < 1 << 31 {
                // In the window, or late (less than 2^31 behind): this subspace.
                th
            } else {
                th.checked_add(1)?
            }
        } else if seq_lo >= tl.wrapping_sub(w_minus_1) {
            // Case B: the window spans two subspaces, and seq_lo is in the lower one.
            th.checked_sub(1)?
        } else {
            th
        };
        if seq_hi > u64::from(u32::MAX) {
            return None;
        }
        Some(seq_hi << 32 | u64::from(seq_lo))
    }

    /// The word for `seq` and the bit for it.
    fn slot(&self, seq: u64) -> Option<(&AtomicU64, u64)> {
        let index = usize::try_from((seq >> BLOCK_SHIFT) & self.mask).ok()?;
        Some((self.slots.get(index)?, 1u64 << (seq & (BLOCK_BITS - 1))))
    }

    /// Whether `seq` is older than the window under `top`.
    fn too_old(&self, seq: u64, top: u64) -> bool {
        seq == 0 || (seq <= top && top - seq >= self.size)
    }

    /// Compares `seq`'s block with a word's tag: 0 same block, > 0 the word is stale (older),
    /// < 0 the word already holds a newer block.
    fn tag_order(seq: u64, word: u64) -> i32 {
        if word == 0 {
            // Never used (or block 0 with no bit set): stale for every block.
            return 1;
        }
        let tag = low32(seq >> BLOCK_SHIFT);
        // Tags are compared in serial-number arithmetic (RFC 1982); words more than 2^31
        // blocks apart compare wrongly, which only ever refuses a valid packet.
        i32::from_be_bytes(tag.wrapping_sub(low32(word >> 32)).to_be_bytes())
    }

    /// Before decryption: `Err(Replay)` when `seq` is 0, older than the window, or seen.
    pub fn check(&self, seq: u64) -> core::result::Result<(), DropReason> {
        if self.too_old(seq, self.top()) {
            return Err(DropReason::Replay);
        }
        let (word, bit) = self.slot(seq).ok_or(DropReason::Replay)?;
        let w = word.load(Ordering::Acquire);
        match Self::tag_order(seq, w) {
            0 if w & bit != 0 => Err(DropReason::Replay),
            o if o < 0 => Err(DropReason::Replay),
            _ => Ok(()),
        }
    }

    /// After authentication: marks `seq` seen and advances the window. `Err(Replay)` when
    /// another packet with the same number was committed first (a duplicate in flight), or
    /// the window moved past it meanwhile.
    pub fn commit(&self, seq: u64) -> core::result::Result<(), DropReason> {
        let (word, bit) = self.slot(seq).ok_or(DropReason::Replay)?;
        let tag_bits = u64::from(low32(seq >> BLOCK_SHIFT)) << 32;
        let mut w = word.load(Ordering::Acquire);
        loop {
            if self.too_old(seq, self.top()) {
                return Err(DropReason::Replay);
            }
            let new = match Self::tag_order(seq, w) {
                0 if w & bit != 0 => return Err(DropReason::Replay),
                0 => w | bit,
                o if o > 0 => tag_bits | bit,
                _ => return Err(DropReason::Replay),
            };
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.top.fetch_max(seq, Ordering::AcqRel);
        Ok(())
    }

    /// [`Self::commit`] of several numbers, answered in `out` (same length as `seqs`), with
    /// one compare-and-swap per run of neighbours in one 32-number block and one `fetch_max`
    /// in all, instead of one of each per number: a batch of one SA's packets mostly holds
    /// consecutive numbers. Each number is accepted exactly when `commit` would have accepted
    /// it at that point, a number twice in `seqs` included (the second is a replay).
    pub fn commit_many(&self, seqs: &[u64], out: &mut [core::result::Result<(), DropReason>]) {
        let mut highest = 0u64;
        let mut i = 0;
        while i < seqs.len() {
            let Some(&first) = seqs.get(i) else { break };
            let block = first >> BLOCK_SHIFT;
            let end = seqs[i..].iter().position(|s| s >> BLOCK_SHIFT != block).map_or(seqs.len(), |n| i + n);
            // The numbers accepted so far count as committed for the later ones, as they
            // would after separate commits.
            let run = seqs.get(i..end).unwrap_or_default();
            if let Some(top) = self.commit_block(run, out.get_mut(i..end), highest) {
                highest = highest.max(top);
            }
            i = end;
        }
        if highest > 0 {
            self.top.fetch_max(highest, Ordering::AcqRel);
        }
    }

    /// One block's numbers of [`Self::commit_many`] in one CAS, `before` being the highest
    /// number accepted by the same call so far; returns the highest accepted here.
    fn commit_block(
        &self,
        seqs: &[u64],
        out: Option<&mut [core::result::Result<(), DropReason>]>,
        before: u64,
    ) -> Option<u64> {
        let out = out?;
        let first = *seqs.first()?;
        let Some((word, _)) = self.slot(first) else {
            out.fill(Err(DropReason::Replay));
            return None;
        };
        let tag_bits = u64::from(low32(first >> BLOCK_SHIFT)) << 32;
        let mut w = word.load(Ordering::Acquire);
        loop {
            let top = self.top().max(before);
            // The bits this CAS would set; each number is judged as `commit` judges it.
            let mut mine = 0u64;
            let order = Self::tag_order(first, w);
            for (&seq, o) in seqs.iter().zip(out.iter_mut()) {
                let bit = 1u64 << (seq & (BLOCK_BITS - 1));
                let seen = order < 0 || (order == 0 && w & bit != 0) || mine & bit != 0;
                *o = if self.too_old(seq, top) || seen { Err(DropReason::Replay) } else { Ok(()) };
                if o.is_ok() {
                    mine |= bit;
                }
            }
            if mine == 0 {
                return None;
            }
            let new = if order > 0 { tag_bits | mine } else { w | mine };
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        seqs.iter().zip(out.iter()).filter(|(_, o)| o.is_ok()).map(|(&s, _)| s).max()
    }

    /// Treats every number up to `top` as seen: the window of an SA moved from another
    /// gateway, whose received numbers are known only as a highest one. Refusing a few
    /// late, never-seen packets below it is the price of never accepting a replay of one
    /// that was seen there.
    pub fn mark_seen_through(&self, top: u64) {
        let from = top.saturating_sub(self.size - 1).max(1);
        // At most `size` (<= MAX_WINDOW) commits; ones already seen are simply refused.
        for seq in from..=top {
            let _ = self.commit(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn a_window_marked_seen_refuses_everything_up_to_its_top() {
        let w = ReplayWindow::new(64).unwrap();
        w.commit(3).unwrap();
        w.mark_seen_through(1000);
        assert_eq!(w.top(), 1000);
        for seq in [1, 3, 936, 937, 999, 1000] {
            assert_eq!(w.check(seq), Err(DropReason::Replay), "{seq}");
        }
        assert_eq!(w.check(1001), Ok(()));
        w.commit(1001).unwrap();
        // Again, lower: nothing changes.
        w.mark_seen_through(10);
        assert_eq!(w.top(), 1001);
        assert_eq!(w.check(1002), Ok(()));
        let fresh = ReplayWindow::new(64).unwrap();
        fresh.mark_seen_through(0);
        assert_eq!(fresh.top(), 0);
        assert_eq!(fresh.check(1), Ok(()));
    }

    /// The obvious model: accepted iff never accepted and within W of the highest accepted.
    struct Reference {
        seen: BTreeSet<u64>,
        top: u64,
        size: u64,
    }

    impl Reference {
        fn accept(&mut self, seq: u64) -> bool {
            let ok = seq != 0 && (seq > self.top || self.top - seq < self.size) && !self.seen.contains(&seq);
            if ok {
                self.seen.insert(seq);
                self.top = self.top.max(seq);
            }
            ok
        }
    }

    fn accept(w: &ReplayWindow, seq: u64) -> bool {
        w.check(seq).is_ok() && w.commit(seq).is_ok()
    }

    #[test]
    fn in_window_reordering_is_accepted_once() {
        let w = ReplayWindow::new(1024).unwrap();
        assert!(accept(&w, 5));
        assert!(accept(&w, 3));
        assert!(accept(&w, 1000));
        assert!(accept(&w, 4));
        assert!(!accept(&w, 3));
        assert!(!accept(&w, 1000));
        assert!(accept(&w, 1024));
        // 1024 - 1024 = 0: the window is 1..=1024, so 1 is still in it, once.
        assert!(accept(&w, 1));
        assert!(!accept(&w, 1));
        assert!(accept(&w, 1025));
        // Now 1 is out (1025 - 1 >= 1024), and 2 is the oldest in.
        assert_eq!(w.check(1), Err(DropReason::Replay));
        assert!(accept(&w, 2));
        assert_eq!(w.top(), 1025);
    }

    #[test]
    fn zero_is_never_accepted() {
        let w = ReplayWindow::new(64).unwrap();
        assert_eq!(w.check(0), Err(DropReason::Replay));
        assert_eq!(w.commit(0), Err(DropReason::Replay));
    }

    #[test]
    fn far_jump_forgets_old_blocks_but_not_new_ones() {
        let w = ReplayWindow::new(64).unwrap();
        assert!(accept(&w, 10));
        assert!(accept(&w, 1_000_000));
        assert!(!accept(&w, 10));
        assert!(accept(&w, 999_999));
        assert!(!accept(&w, 999_999));
        assert!(!accept(&w, 1_000_000 - 64));
        assert!(accept(&w, 1_000_000 - 63));
    }

    #[test]
    fn commit_without_check_still_refuses_a_duplicate() {
        let w = ReplayWindow::new(32).unwrap();
        assert!(w.check(7).is_ok() && w.check(7).is_ok(), "both copies pass the pre-check");
        assert_eq!(w.commit(7), Ok(()));
        assert_eq!(w.commit(7), Err(DropReason::Replay));
    }

    #[test]
    fn window_size_is_bounded() {
        assert!(ReplayWindow::new(31).is_err());
        assert!(ReplayWindow::new(MAX_WINDOW + 1).is_err());
        assert_eq!(ReplayWindow::new(1024).unwrap().slots.len(), 64);
        assert_eq!(ReplayWindow::new(MAX_WINDOW).unwrap().slots.len(), 4096);
    }

    #[test]
    fn esn_high_half_follows_rfc4303_appendix_a() {
        let w = ReplayWindow::new(64).unwrap();
        // Nothing received: the window spans "subspace -1" and 0; a low number is in 0.
        assert_eq!(w.infer(5, true), Some(5));
        assert_eq!(w.infer(u32::MAX, true), None, "would be in subspace -1");
        assert_eq!(w.infer(u32::MAX, false), Some(u64::from(u32::MAX)));
        // Case A: top in the middle of subspace 0.
        assert!(accept(&w, 1000));
        assert_eq!(w.infer(990, true), Some(990));
        assert_eq!(w.infer(900, true), Some(900), "just below the window: late, not next subspace");
        assert_eq!(w.check(900), Err(DropReason::Replay), "so it is refused before decryption");
        assert_eq!(w.infer(3, true), Some(3), "999 behind is still late");
        // The split is at 2^31 behind the newest number.
        assert!(accept(&w, 0x8000_0100));
        assert_eq!(w.infer(0x200, true), Some(0x200), "0x7fff_ff00 behind: late");
        assert_eq!(w.infer(0x50, true), Some((1 << 32) | 0x50), "0x8000_00b0 behind: wrapped");
        // Top close to 2^32: numbers after the wrap belong to subspace 1.
        assert!(accept(&w, 0xffff_fff0));
        assert_eq!(w.infer(3, true), Some((1 << 32) | 3));
        assert_eq!(w.infer(0xffff_ffe0, true), Some(0xffff_ffe0));
        assert!(accept(&w, (1 << 32) | 3));
        // Case B: top = 2^32 + 3, window spans the wrap; 0xffff_fff5 is still subspace 0.
        assert_eq!(w.infer(0xffff_fff5, true), Some(0xffff_fff5));
        assert_eq!(w.infer(4, true), Some((1 << 32) | 4));
        assert!(!accept(&w, 0xffff_fff0), "already seen across the wrap");
        assert!(accept(&w, 0xffff_fff5));
    }

    #[test]
    fn threads_never_accept_a_number_twice_and_accept_every_in_window_number() {
        // 4 threads each try all of 1..=1000 in a different order: W = 1024 covers them all,
        // so every number is accepted exactly once, whatever the interleaving.
        const N: u64 = 1000;
        let w = ReplayWindow::new(1024).unwrap();
        let hits: Vec<AtomicU32> = (0..=N).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (w, hits) = (&w, &hits);
                s.spawn(move || {
                    for i in 0..N {
                        // A different permutation per thread: i * k mod N for k coprime to N.
                        let seq = (i * [1, 3, 7, 9][usize::try_from(t).unwrap()] + t * 17) % N + 1;
                        if accept(w, seq) {
                            hits[usize::try_from(seq).unwrap()].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        for seq in 1..=N {
            assert_eq!(hits[usize::try_from(seq).unwrap()].load(Ordering::Relaxed), 1, "seq {seq}");
        }
        assert_eq!(w.top(), N);
    }

    #[test]
    fn threads_sliding_past_many_blocks_never_accept_twice() {
        // Each number is offered by two threads, and the window slides over 3000 blocks while
        // they race: some old numbers may be refused, none may be accepted twice.
        const N: u64 = 100_000;
        let w = ReplayWindow::new(128).unwrap();
        let hits: Vec<AtomicU32> = (0..=N).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (w, hits) = (&w, &hits);
                s.spawn(move || {
                    // Threads 0,1 take the even numbers, 2,3 the odd ones, in rising order with
                    // small local reordering.
                    let parity = t / 2;
                    let mut seq = 1 + parity;
                    while seq <= N {
                        let s2 = if seq % 8 < 4 { seq } else { seq.saturating_sub(2).max(1) };
                        for x in [s2, seq] {
                            if accept(w, x) {
                                hits[usize::try_from(x).unwrap()].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        seq += 2;
                    }
                });
            }
        });
        let accepted: u32 = hits.iter().map(|h| h.load(Ordering::Relaxed)).sum();
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) <= 1));
        // Every number was offered close to the front, so nearly all get in.
        assert!(u64::from(accepted) > N / 2, "accepted {accepted}");
        assert_eq!(w.top(), N);
    }

    #[test]
    fn threads_committing_in_runs_never_accept_a_number_twice() -> Result<()> {
        // As above, with every thread committing runs of 8 that overlap the other threads'
        // runs and its own next one (and repeat N at the end).
        const N: u64 = 20_000;
        let w = ReplayWindow::new(256)?;
        let hits: Vec<AtomicU32> = (0..=N).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (w, hits) = (&w, &hits);
                s.spawn(move || {
                    let mut out = [Ok(()); 8];
                    let mut base = 1 + t;
                    while base <= N {
                        let run: Vec<u64> = (0..8u64).map(|k| (base + k * 3 / 2).min(N)).collect();
                        w.commit_many(&run, &mut out);
                        for (&x, o) in run.iter().zip(&out) {
                            // Every x is at most N, so it has a counter.
                            let hit = usize::try_from(x).ok().and_then(|i| hits.get(i));
                            if let (Ok(()), Some(h)) = (o, hit) {
                                h.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        base += 9;
                    }
                });
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) <= 1));
        assert_eq!(w.top(), N);
        Ok(())
    }

    proptest! {
        #[test]
        fn committing_in_runs_answers_as_one_by_one(
            size in prop_oneof![Just(32u32), Just(64), Just(1024)],
            steps in proptest::collection::vec((0u64..3000, 1usize..12), 1..120),
        ) {
            // Two windows see the same numbers: one commits them one at a time, the other in
            // runs (neighbours, repeats, jumps and numbers far behind mixed in).
            let fail = |e: Error| TestCaseError::fail(e.to_string());
            let (one, many) = (ReplayWindow::new(size).map_err(fail)?, ReplayWindow::new(size).map_err(fail)?);
            let mut base = 0u64;
            for (delta, len) in steps {
                base += delta / 4;
                let run: Vec<u64> = (0..len as u64)
                    .map(|k| (base + (delta * (k + 1)) % 97).saturating_sub(delta % 50 * 40))
                    .collect();
                let mut out = vec![Ok(()); run.len()];
                many.commit_many(&run, &mut out);
                let singly: Vec<_> = run.iter().map(|&x| one.commit(x)).collect();
                prop_assert_eq!(&out, &singly, "run {:?}", run);
                prop_assert_eq!(many.top(), one.top());
            }
        }

        #[test]
        fn matches_the_reference_model(
            size in prop_oneof![Just(32u32), Just(64), Just(100), Just(1024)],
            steps in proptest::collection::vec((0u64..5000, any::<bool>()), 1..400),
        ) {
            let w = ReplayWindow::new(size).unwrap();
            let mut r = Reference { seen: BTreeSet::new(), top: 0, size: u64::from(size) };
            let mut base = 0u64;
            for (delta, jump) in steps {
                // Mostly near the top, sometimes a jump ahead.
                if jump { base += delta; }
                let seq = (base + delta).saturating_sub(2500);
                prop_assert_eq!(accept(&w, seq), r.accept(seq), "seq {}", seq);
                prop_assert_eq!(w.top(), r.top);
            }
        }

        #[test]
        fn esn_inference_recovers_numbers_near_the_top(
            top in 1u64..(u64::MAX >> 2),
            back in 0u64..1024,
            ahead in 1u64..(1 << 30),
        ) {
            let w = ReplayWindow::new(1024).unwrap();
            w.commit(top).unwrap();
            // Anything in the window, and anything up to 2^31 ahead, round-trips.
            if back < top {
                let s = top - back;
                prop_assert_eq!(w.infer(low32(s), true), Some(s));
            }
            let s = top + ahead;
            prop_assert_eq!(w.infer(low32(s), true), Some(s));
        }
    }
}
