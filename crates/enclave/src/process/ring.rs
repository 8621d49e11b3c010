//! Single-producer single-consumer rings in shared memory.
//!
//! Indices are free-running `u32`s: slot = index mod capacity, fill = head - tail (wrapping).
//! Each side keeps *its own* index privately and only publishes it (Release); it reads the
//! other side's index (Acquire) and checks it: a fill above the capacity means the other
//! side lied, and is reported as [`RingCorrupt`] instead of being used. Because the private
//! index is never re-read from shared memory, a peer that overwrites it can at worst make
//! this side skip entries or wait, and slot offsets are masked, so no index can leave the
//! ring.

use super::layout::RingLayout;
use super::shm::SharedMem;
use super::ProcessError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The other side's published index is inconsistent with ours (more than a ring's worth
/// apart): a protocol violation, counted by the guest, fatal for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingCorrupt {
    /// The index as read.
    pub observed: u32,
}

/// Checks that the ring's indices and every slot lie inside the mapping.
fn check(shm: &SharedMem, ring: &RingLayout, slot_size: usize) -> Result<(), ProcessError> {
    let last = ring.slot_offset(ring.capacity.wrapping_sub(1));
    let fits = shm.atomic_u32(ring.head).is_some()
        && shm.atomic_u32(ring.tail).is_some()
        && ring.slot_size == slot_size
        && last.checked_add(slot_size).is_some_and(|end| end <= shm.len())
        && ring.capacity.is_power_of_two();
    fits.then_some(()).ok_or(ProcessError::SharedMemory { why: "ring does not fit the mapping" })
}

fn index(shm: &SharedMem, off: usize) -> &AtomicU32 {
    // `check` proved at construction that this offset holds an aligned u32 inside the
    // mapping; the fallback is never taken but keeps this free of panics.
    static DUMMY: AtomicU32 = AtomicU32::new(0);
    shm.atomic_u32(off).unwrap_or(&DUMMY)
}

/// The producing end: writes slots, then publishes the head.
#[derive(Debug)]
pub struct Producer<const S: usize> {
    shm: Arc<SharedMem>,
    ring: RingLayout,
    head: u32,
    /// Slots known to be free: a lower bound, since the consumer only ever frees more.
    room: u32,
}

impl<const S: usize> Producer<S> {
    /// The producer of `ring`, starting from the currently published head.
    pub fn new(shm: Arc<SharedMem>, ring: RingLayout) -> Result<Self, ProcessError> {
        check(&shm, &ring, S)?;
        let head = index(&shm, ring.head).load(Ordering::Acquire);
        Ok(Self { shm, ring, head, room: 0 })
    }

    /// Slots the consumer has not yet released, and so how many we may write.
    pub fn free(&self) -> Result<u32, RingCorrupt> {
        let tail = index(&self.shm, self.ring.tail).load(Ordering::Acquire);
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

    /// Writes the `i`-th unpublished slot (`i < free()`, else it would overwrite an entry the
    /// consumer may still read; the slot is still inside the ring either way).
    pub fn write(&self, i: u32, slot: &[u8; S]) {
        let off = self.ring.slot_offset(self.head.wrapping_add(i));
        // In range: `check` bounded every slot offset.
        let _ = self.shm.write_from(off, slot);
    }

    /// Offset of the `i`-th unpublished slot in the mapping.
    pub fn slot_offset(&self, i: u32) -> usize {
        self.ring.slot_offset(self.head.wrapping_add(i))
    }

    /// Makes the next `n` written slots visible to the consumer.
    pub fn publish(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.room = self.room.saturating_sub(n);
        index(&self.shm, self.ring.head).store(self.head, Ordering::Release);
    }

    /// Our private head.
    pub fn head(&self) -> u32 {
        self.head
    }
}

/// The consuming end: reads slots, then releases them by publishing the tail.
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
        let tail = index(&shm, ring.tail).load(Ordering::Acquire);
        Ok(Self { shm, ring, tail })
    }

    /// Published entries not yet consumed; more than a ring's worth is a lie.
    pub fn available(&self) -> Result<u32, RingCorrupt> {
        let head = index(&self.shm, self.ring.head).load(Ordering::Acquire);
        let n = head.wrapping_sub(self.tail);
        if n > self.ring.capacity {
            return Err(RingCorrupt { observed: head });
        }
        Ok(n)
    }

    /// Copies out the `i`-th unconsumed slot (one fetch: the copy is what gets validated).
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
        index(&self.shm, self.ring.tail).store(self.tail, Ordering::Release);
    }

    /// Drops everything up to `head` (after a [`RingCorrupt`]): resynchronizes with a lying
    /// producer without reading a single entry of its claimed batch.
    pub fn skip_to(&mut self, head: u32) {
        self.tail = head;
        index(&self.shm, self.ring.tail).store(self.tail, Ordering::Release);
    }

    /// Our private tail.
    pub fn tail(&self) -> u32 {
        self.tail
    }
}

/// Sets both published indices of `ring` to `start` (host only, while no guest runs).
pub fn reset(shm: &SharedMem, ring: &RingLayout, start: u32) {
    index(shm, ring.head).store(start, Ordering::Release);
    index(shm, ring.tail).store(start, Ordering::Release);
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

    fn slot(v: u8) -> [u8; REQUEST_SLOT] {
        [v; REQUEST_SLOT]
    }

    #[test]
    fn entries_come_out_in_order_across_index_wraparound() {
        // Start 3 short of u32::MAX so both the slot mask and the u32 index wrap.
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
            assert_eq!(c.available(), Ok(0), "nothing visible before publish");
            p.publish(n);
            assert_eq!(c.available(), Ok(n));
            assert_eq!(p.free(), Ok(4 - n));
            let mut out = [0u8; REQUEST_SLOT];
            for i in 0..n {
                c.read(i, &mut out);
                assert_eq!(out, slot(expect));
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
        assert_eq!(c.available(), Ok(2));
    }

    #[test]
    fn lying_indices_are_reported_not_used() {
        let (p, mut c, shm, ring) = pair(100, 4);
        // The producer claims 5 entries in a 4-slot ring.
        shm.atomic_u32(ring.head).unwrap().store(105, Ordering::Release);
        assert_eq!(c.available(), Err(RingCorrupt { observed: 105 }));
        // The consumer claims to have released entries that were never produced.
        shm.atomic_u32(ring.tail).unwrap().store(150, Ordering::Release);
        assert!(p.free().is_err());
        // Resynchronizing skips the claimed batch without reading it.
        c.skip_to(105);
        assert_eq!(c.available(), Ok(0));
        assert_eq!(c.tail(), 105);
    }

    #[test]
    fn overwritten_private_index_does_not_move_our_side() {
        let (mut p, mut c, shm, ring) = pair(0, 4);
        p.write(0, &slot(9));
        p.publish(1);
        // The peer rewrites *our* published tail; our private tail still says 0.
        shm.atomic_u32(ring.tail).unwrap().store(3, Ordering::Release);
        assert_eq!(c.available(), Ok(1));
        let mut out = [0u8; REQUEST_SLOT];
        c.read(0, &mut out);
        assert_eq!(out, slot(9));
        c.release(1);
        assert_eq!(shm.atomic_u32(ring.tail).unwrap().load(Ordering::Acquire), 1);
    }
}
