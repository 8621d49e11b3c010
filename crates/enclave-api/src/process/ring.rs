//! Single-producer single-consumer rings in shared memory, with a stamp in every slot.
//!
//! Indices are free-running `u32`s: slot = index mod capacity. The producer publishes entry
//! `i` by storing `i` (Release) into the last [`STAMP_BYTES`] of its slot, after the rest of
//! the slot; the consumer takes entry `i` when that stamp reads exactly `i` (Acquire). There
//! is no shared head index: it would be one more cache line crossing between the two cores
//! per batch, read by the consumer just to learn what the slot it reads next tells anyway.
//! The consumer's index (the tail) is published (Release) to free slots, and the producer
//! reads it only when it runs out of known-free slots.
//!
//! Each side keeps *its own* index privately and never re-reads it from shared memory, so a
//! peer that overwrites it can at worst make this side skip entries or wait. A stamp that
//! is not exactly the expected index (a forged one from another lap, or garbage) only reads
//! as "not yet published"; a tail that claims more released entries than were produced is
//! reported as [`RingCorrupt`]; slot offsets are masked, so no index can leave the ring.

use super::layout::{RingLayout, STAMP_BYTES};
use super::shm::SharedMem;
use super::ProcessError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The consumer's published index is inconsistent with ours (more than a ring's worth
/// apart): a protocol violation, counted by the guest, fatal for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingCorrupt {
    /// The index as read.
    pub observed: u32,
}

/// Checks that the ring's index and every slot (with its aligned stamp) lie inside the
/// mapping.
fn check(shm: &SharedMem, ring: &RingLayout, slot_size: usize) -> Result<(), ProcessError> {
    let last = ring.slot_offset(ring.capacity.wrapping_sub(1));
    let fits = shm.atomic_u32(ring.tail).is_some()
        && ring.slot_size == slot_size
        && slot_size >= 2 * STAMP_BYTES
        && slot_size.is_multiple_of(STAMP_BYTES)
        && ring.slots.is_multiple_of(STAMP_BYTES)
        && last.checked_add(slot_size).is_some_and(|end| end <= shm.len())
        && ring.capacity.is_power_of_two();
    fits.then_some(()).ok_or(ProcessError::SharedMemory { why: "ring does not fit the mapping" })
}

fn word(shm: &SharedMem, off: usize) -> &AtomicU32 {
    // `check` proved at construction that this offset holds an aligned u32 inside the
    // mapping; the fallback is never taken but keeps this free of panics.
    static DUMMY: AtomicU32 = AtomicU32::new(0);
    shm.atomic_u32(off).unwrap_or(&DUMMY)
}

/// The stamp word of the slot that `index` maps to.
fn stamp<'a>(shm: &'a SharedMem, ring: &RingLayout, index: u32) -> &'a AtomicU32 {
    word(shm, ring.stamp_offset(index))
}

/// The producing end: writes slots, then stamps them.
#[derive(Debug)]
pub struct Producer<const S: usize> {
    shm: Arc<SharedMem>,
    ring: RingLayout,
    head: u32,
    /// Slots known to be free: a lower bound, since the consumer only ever frees more.
    room: u32,
}

impl<const S: usize> Producer<S> {
    /// The producer of `ring`, which must be empty (as [`reset`] leaves it): it starts at the
    /// consumer's published index.
    pub fn new(shm: Arc<SharedMem>, ring: RingLayout) -> Result<Self, ProcessError> {
        check(&shm, &ring, S)?;
        let head = word(&shm, ring.tail).load(Ordering::Acquire);
        Ok(Self { shm, ring, head, room: 0 })
    }

    /// Slots the consumer has not yet released, and so how many we may write.
    pub fn free(&self) -> Result<u32, RingCorrupt> {
        let tail = word(&self.shm, self.ring.tail).load(Ordering::Acquire);
        let used = self.head.wrapping_sub(tail);
        if used > self.ring.capacity {
            return Err(RingCorrupt { observed: tail });
        }
        Ok(self.ring.capacity - used)
    }

    /// Free slots, reading the consumer's index only when fewer than `want` are known to be
    /// free. Reading it once per ring's worth of entries instead of once per entry keeps the
    /// line it lives on in the consumer's cache instead of bouncing between the two cores.
    pub fn free_at_least(&mut self, want: u32) -> Result<u32, RingCorrupt> {
        if self.room < want {
            self.room = self.free()?;
        }
        Ok(self.room)
    }

    /// Writes the `i`-th unpublished slot, all but its stamp (`i < free()`, else it would
    /// overwrite an entry the consumer may still read; the slot is still inside the ring
    /// either way).
    pub fn write(&self, i: u32, slot: &[u8; S]) {
        let off = self.ring.slot_offset(self.head.wrapping_add(i));
        // In range: `check` bounded every slot offset, and S > STAMP_BYTES.
        let _ = self.shm.write_from(off, slot.get(..S - STAMP_BYTES).unwrap_or(&[]));
    }

    /// Offset of the `i`-th unpublished slot in the mapping.
    pub fn slot_offset(&self, i: u32) -> usize {
        self.ring.slot_offset(self.head.wrapping_add(i))
    }

    /// Makes the next `n` written slots visible to the consumer, in order.
    pub fn publish(&mut self, n: u32) {
        for _ in 0..n {
            stamp(&self.shm, &self.ring, self.head).store(self.head, Ordering::Release);
            self.head = self.head.wrapping_add(1);
        }
        self.room = self.room.saturating_sub(n);
    }

    /// Our private head.
    pub fn head(&self) -> u32 {
        self.head
    }
}

/// The consuming end: reads stamped slots, then releases them by publishing the tail.
#[derive(Debug)]
pub struct Consumer<const S: usize> {
    shm: Arc<SharedMem>,
    ring: RingLayout,
    tail: u32,
}

impl<const S: usize> Consumer<S> {
    /// The consumer of `ring`, starting from the currently published tail.
    pub fn new(shm: Arc<SharedMem>, ring: RingLayout) -> Result<Self, ProcessError> {
        check(&shm, &ring, S)?;
        let tail = word(&shm, ring.tail).load(Ordering::Acquire);
        Ok(Self { shm, ring, tail })
    }

    /// Whether the `i`-th unconsumed entry is published: its slot carries exactly its index.
    /// Entries a ring's worth or more ahead never are (their slots hold unreleased ones).
    pub fn ready(&self, i: u32) -> bool {
        let index = self.tail.wrapping_add(i);
        i < self.ring.capacity && stamp(&self.shm, &self.ring, index).load(Ordering::Acquire) == index
    }

    /// Published entries not yet consumed, counted in order up to `limit`.
    pub fn available(&self, limit: u32) -> u32 {
        let limit = limit.min(self.ring.capacity);
        (0..limit).find(|&i| !self.ready(i)).unwrap_or(limit)
    }

    /// Copies out the `i`-th unconsumed slot (one fetch: the copy is what gets validated; the
    /// stamp comes along and the slot formats ignore it).
    pub fn read(&self, i: u32, out: &mut [u8; S]) {
        let off = self.ring.slot_offset(self.tail.wrapping_add(i));
        if !self.shm.read_into(off, out) {
            // Unreachable after `check`; an all-zero slot is refused as malformed anyway.
            *out = [0; S];
        }
    }

    /// Offset of the `i`-th unconsumed slot in the mapping.
    pub fn slot_offset(&self, i: u32) -> usize {
        self.ring.slot_offset(self.tail.wrapping_add(i))
    }

    /// Releases `n` consumed slots to the producer.
    pub fn release(&mut self, n: u32) {
        self.tail = self.tail.wrapping_add(n);
        word(&self.shm, self.ring.tail).store(self.tail, Ordering::Release);
    }

    /// Our private tail.
    pub fn tail(&self) -> u32 {
        self.tail
    }
}

/// Empties `ring` at index `start` (host only, while no guest runs): publishes `start` as the
/// tail and gives every slot the stamp of the lap before, which no index the consumer will
/// look for matches.
pub fn reset(shm: &SharedMem, ring: &RingLayout, start: u32) {
    for i in 0..ring.capacity {
        let index = start.wrapping_add(i);
        stamp(shm, ring, index).store(index.wrapping_sub(ring.capacity), Ordering::Relaxed);
    }
    word(shm, ring.tail).store(start, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::layout::{Geometry, Layout, REQUEST_SLOT};

    fn pair(
        start: u32,
        slots: u32,
    ) -> (Producer<REQUEST_SLOT>, Consumer<REQUEST_SLOT>, Arc<SharedMem>, RingLayout) {
        let l = Layout::new(Geometry { slots, ..Geometry::default() }).unwrap();
        let shm = Arc::new(SharedMem::create(l.total).unwrap());
        reset(&shm, &l.requests, start);
        let p = Producer::new(shm.clone(), l.requests).unwrap();
        let c = Consumer::new(shm.clone(), l.requests).unwrap();
        (p, c, shm, l.requests)
    }

    /// A slot of `v`s with a zero stamp field, as the slot formats leave it.
    fn slot(v: u8) -> [u8; REQUEST_SLOT] {
        let mut s = [v; REQUEST_SLOT];
        s[REQUEST_SLOT - STAMP_BYTES..].fill(0);
        s
    }

    fn body(s: &[u8; REQUEST_SLOT]) -> &[u8] {
        &s[..REQUEST_SLOT - STAMP_BYTES]
    }

    #[test]
    fn entries_come_out_in_order_across_index_wraparound() {
        // Start 3 short of u32::MAX so both the slot mask and the u32 index wrap (and one
        // entry's index, 0, equals the bytes of a never-written stamp).
        let (mut p, mut c, _shm, _) = pair(u32::MAX - 2, 4);
        let mut next = 0u8;
        let mut expect = 0u8;
        for round in 0..10u8 {
            let n = u32::from(round % 4) + 1;
            assert_eq!(p.free(), Ok(4));
            for i in 0..n {
                p.write(i, &slot(next));
                next = next.wrapping_add(1);
            }
            assert_eq!(c.available(4), 0, "nothing visible before publish");
            p.publish(n);
            assert_eq!(c.available(4), n);
            assert_eq!(c.available(1), 1, "counting stops at the limit");
            assert_eq!(p.free(), Ok(4 - n));
            let mut out = [0u8; REQUEST_SLOT];
            for i in 0..n {
                c.read(i, &mut out);
                assert_eq!(body(&out), body(&slot(expect)));
                assert_eq!(out[REQUEST_SLOT - STAMP_BYTES..], c.tail().wrapping_add(i).to_le_bytes());
                expect = expect.wrapping_add(1);
            }
            c.release(n);
        }
        // 23 entries from u32::MAX - 2: the index wrapped to 20.
        assert_eq!(p.head(), 20);
        assert_eq!(c.tail(), 20);
    }

    #[test]
    fn full_ring_has_no_free_slot() {
        let (mut p, c, _shm, _) = pair(0, 2);
        p.write(0, &slot(1));
        p.write(1, &slot(2));
        p.publish(2);
        assert_eq!(p.free(), Ok(0));
        assert_eq!(c.available(u32::MAX), 2);
        assert!(!c.ready(2), "a ring's worth ahead is the first entry's slot again");
    }

    #[test]
    fn a_written_slot_is_invisible_until_stamped() {
        let (mut p, c, shm, ring) = pair(0, 4);
        // Index 0's stamp would be 0, the bytes of a zeroed slot: the write leaves the
        // stamp field alone, so a half-written slot never looks published.
        p.write(0, &[0; REQUEST_SLOT]);
        assert!(!c.ready(0));
        p.publish(1);
        assert!(c.ready(0));
        let stamp_at = |i: u32| shm.atomic_u32(ring.stamp_offset(i));
        assert_eq!(
            stamp_at(1).unwrap().load(Ordering::Acquire),
            1u32.wrapping_sub(4),
            "reset: the lap before"
        );
    }

    #[test]
    fn forged_stamps_and_a_lying_tail_are_not_used() {
        let (mut p, c, shm, ring) = pair(100, 4);
        let stamp_at = |i: u32| shm.atomic_u32(ring.stamp_offset(i)).unwrap();
        // A stamp from the next lap, or from the lap before, or of another slot: not ready.
        for forged in [104, 96, 101, 0, u32::MAX] {
            stamp_at(100).store(forged, Ordering::Release);
            assert!(!c.ready(0), "stamp {forged}");
        }
        // Entries stamped out of order: only those in order from the tail count.
        stamp_at(101).store(101, Ordering::Release);
        assert_eq!(c.available(4), 0);
        stamp_at(100).store(100, Ordering::Release);
        assert_eq!(c.available(4), 2);
        // The consumer claims to have released entries that were never produced.
        shm.atomic_u32(ring.tail).unwrap().store(150, Ordering::Release);
        assert!(p.free().is_err());
        assert_eq!(p.free_at_least(1), Err(RingCorrupt { observed: 150 }));
    }

    #[test]
    fn overwritten_private_index_does_not_move_our_side() {
        let (mut p, mut c, shm, ring) = pair(0, 4);
        p.write(0, &slot(9));
        p.publish(1);
        // The peer rewrites *our* published tail; our private tail still says 0.
        shm.atomic_u32(ring.tail).unwrap().store(3, Ordering::Release);
        assert_eq!(c.available(4), 1);
        let mut out = [0u8; REQUEST_SLOT];
        c.read(0, &mut out);
        assert_eq!(body(&out), body(&slot(9)));
        c.release(1);
        assert_eq!(shm.atomic_u32(ring.tail).unwrap().load(Ordering::Acquire), 1);
    }
}
