//! Where everything lives in the shared memory, computed the same way on both sides.
//!
//! ```text
//! 0        control block (one page): magic, geometry echo, state, wake-up flags, counters
//! 4096     request ring:    tail (own cache line) | slots x 64 B, each stamped
//! ...      completion ring: tail (own cache line) | slots x 64 B, each stamped
//! page     descriptor table: descriptors x 32 B   (gateway writes, enclave reads)
//! page     status table:     descriptors x 2 B    (enclave writes, gateway reads)
//! page     packet area      (ESP descriptors' offsets are relative to its start)
//! page     call area        (call descriptors' offsets are relative to its start)
//! ```
//!
//! An ESP batch is one request slot naming a run of the descriptor table (first index,
//! count); its statuses go to the same indices of the status table. The two tables are
//! written by different sides, so they sit on different pages: no cache line holds bytes
//! that both processes' cores write. For the same reason a ring's consumer index has a line
//! of its own, and a ring has no producer index at all: the producer stamps each slot (the
//! slot's last four bytes) when it publishes it, so the consumer learns of an entry from the
//! line it reads anyway (`ring.rs`). The guest computes this layout from its own command line and
//! checks the memfd's size against it; it never reads offsets or sizes back from the shared
//! memory.

use super::ProcessError;

/// Cache line size assumed for padding (x86-64, most aarch64).
pub const CACHE_LINE: usize = 64;
/// Page size assumed for area alignment (the mapping itself is page-granular anyway).
pub const PAGE: usize = 4096;
/// Bytes of one request slot.
pub const REQUEST_SLOT: usize = 64;
/// Bytes of one completion slot: a cache line of its own (16 bytes are used), so that the
/// enclave can take the line of the next completion for writing while the gateway still
/// reads the previous one.
pub const COMPLETION_SLOT: usize = 64;
/// Bytes of one entry of the descriptor table (the [`crate::EspDescriptor`] encoding).
pub const DESCRIPTOR_BYTES: usize = crate::esp::ESP_DESCRIPTOR_LEN;
/// Bytes of one entry of the status table: [`crate::EspStatus`] code, reject reason code.
pub const STATUS_BYTES: usize = 2;
/// Descriptor table entries come in runs of this many: 32 statuses fill one cache line, so
/// a host that starts every batch on a multiple of it never shares a status line between
/// two batches in flight.
pub const DESCRIPTOR_GRANULE: u32 = 32;
/// Most entries of the descriptor table.
pub const MAX_DESCRIPTORS: u32 = 1 << 16;
/// Most slots per ring: bounds the memory and the work of one wake-up.
pub const MAX_SLOTS: u32 = 4096;
/// Largest packet area (1 GiB): offsets stay far from `u32::MAX`.
pub const MAX_PACKET_AREA: u32 = 1 << 30;
/// Smallest call area: an IKE message with certificates fits comfortably in 64 KiB.
pub const MIN_CALL_AREA: u32 = 64 << 10;
/// Largest call area (16 MiB).
pub const MAX_CALL_AREA: u32 = 16 << 20;

/// `"CLSTRENC"`: the control block's magic, written by the host.
pub const MAGIC: u64 = u64::from_le_bytes(*b"CLSTRENC");
/// Layout version; bumped whenever anything in this file changes.
pub const VERSION: u32 = 3;

/// Offsets of the control block's fields. All fields are little-endian and naturally
/// aligned; the ones two sides touch concurrently are accessed only atomically.
pub mod ctl {
    /// `u64` [`super::MAGIC`], host-written before the guest starts.
    pub const MAGIC: usize = 0;
    /// `u32` [`super::VERSION`].
    pub const VERSION: usize = 8;
    /// `u32` slots per ring.
    pub const SLOTS: usize = 12;
    /// `u32` packet area bytes.
    pub const PACKET_LEN: usize = 16;
    /// `u32` call area bytes.
    pub const CALL_LEN: usize = 20;
    /// `u32` guest state, guest-written: [`super::STATE_STARTING`] etc.
    pub const STATE: usize = 24;
    /// `u32` guest's process ID as it sees itself, guest-written at ready.
    pub const GUEST_PID: usize = 28;
    /// `u32` hardening bits (`cloister_enclave_host::HardeningReport`), guest-written at ready.
    pub const HARDENING: usize = 32;
    /// `u32` entries of the descriptor table.
    pub const DESCRIPTORS: usize = 36;
    /// `u32` host-written: non-zero asks the guest to exit.
    pub const SHUTDOWN: usize = 64;
    /// `u32` host-written: non-zero while the host sleeps on the completion doorbell.
    pub const HOST_WAITING: usize = 128;
    /// `u32` guest-written: non-zero while the guest sleeps on the request doorbell.
    pub const GUEST_SLEEPING: usize = 192;
    /// `[u64; RejectReason::COUNT]` guest-written reject counters.
    pub const REJECTS: usize = 256;
    /// `u64` guest-written count of request slots (batches and calls) handled.
    pub const REQUESTS: usize = 512;
    /// `u64` guest-written count of times the guest went to sleep on its doorbell.
    pub const SLEEPS: usize = 520;
}

/// Guest state: process started, not yet serving.
pub const STATE_STARTING: u32 = 0;
/// Guest state: hardened, trusted core up, serving the rings.
pub const STATE_READY: u32 = 1;
/// Guest state: exited its loop (asked to, or its parent died).
pub const STATE_STOPPED: u32 = 2;

/// The tunable sizes; both sides derive the whole [`Layout`] from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Slots in each ring (a power of two, 2..=[`MAX_SLOTS`]): the most batches and calls
    /// in flight.
    pub slots: u32,
    /// Entries of the descriptor (and status) table (a multiple of [`DESCRIPTOR_GRANULE`],
    /// at most [`MAX_DESCRIPTORS`]): the most ESP descriptors in flight, so at least the
    /// data plane's batch size.
    pub descriptors: u32,
    /// Bytes of the packet area (a multiple of 64, at most [`MAX_PACKET_AREA`]).
    pub packet_len: u32,
    /// Bytes of the call area ([`MIN_CALL_AREA`]..=[`MAX_CALL_AREA`]).
    pub call_len: u32,
}

impl Default for Geometry {
    /// 256 slots, 1024 descriptors, 256 packet buffers of 2 KiB, 128 KiB for IKE calls.
    fn default() -> Self {
        Self { slots: 256, descriptors: 1024, packet_len: 256 * 2048, call_len: 128 << 10 }
    }
}

/// Bytes at the end of every ring slot that hold its stamp (`ring.rs`); the slot formats
/// leave them out.
pub const STAMP_BYTES: usize = 4;

/// A ring's offsets in the shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Offset of the consumer index (`u32`); the producer's entries carry their own stamps
    /// (see `ring.rs`).
    pub tail: usize,
    /// Offset of slot 0.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_size: usize,
    /// Number of slots (a power of two).
    pub capacity: u32,
}

impl RingLayout {
    /// Offset of the slot that ring index `index` maps to; always inside the ring.
    pub fn slot_offset(&self, index: u32) -> usize {
        // `capacity` is a power of two, so the mask keeps the slot number below it.
        let slot = (index & (self.capacity - 1)) as usize;
        self.slots + slot * self.slot_size
    }

    /// Offset of the stamp of the slot that ring index `index` maps to.
    pub fn stamp_offset(&self, index: u32) -> usize {
        self.slot_offset(index) + self.slot_size.saturating_sub(STAMP_BYTES)
    }

    fn end(&self) -> usize {
        self.slots + self.capacity as usize * self.slot_size
    }
}

/// The full layout of one enclave's shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The sizes it was computed from.
    pub geometry: Geometry,
    /// Gateway -> enclave.
    pub requests: RingLayout,
    /// Enclave -> gateway.
    pub completions: RingLayout,
    /// Offset of the descriptor table.
    pub descriptors: usize,
    /// Offset of the status table.
    pub statuses: usize,
    /// Offset of the packet area.
    pub packets: usize,
    /// Offset of the call area.
    pub call: usize,
    /// Total bytes of the memfd.
    pub total: usize,
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    /// Checks `geometry` and lays it out; every size is bounded, so nothing overflows.
    pub fn new(geometry: Geometry) -> Result<Self, ProcessError> {
        let g = geometry;
        if !g.slots.is_power_of_two() || g.slots < 2 || g.slots > MAX_SLOTS {
            return Err(ProcessError::Geometry { why: "slots must be a power of two in 2..=4096" });
        }
        if g.packet_len == 0 || g.packet_len > MAX_PACKET_AREA || !g.packet_len.is_multiple_of(64) {
            return Err(ProcessError::Geometry {
                why: "packet area must be a non-zero multiple of 64 bytes, at most 1 GiB",
            });
        }
        if g.call_len < MIN_CALL_AREA || g.call_len > MAX_CALL_AREA {
            return Err(ProcessError::Geometry { why: "call area must be 64 KiB..=16 MiB" });
        }
        if g.descriptors == 0
            || g.descriptors > MAX_DESCRIPTORS
            || !g.descriptors.is_multiple_of(DESCRIPTOR_GRANULE)
        {
            return Err(ProcessError::Geometry {
                why: "descriptor table must be a non-zero multiple of 32 entries, at most 65536",
            });
        }
        let ring = |start: usize, slot_size: usize| RingLayout {
            tail: start,
            slots: start + CACHE_LINE,
            slot_size,
            capacity: g.slots,
        };
        let requests = ring(PAGE, REQUEST_SLOT);
        let completions = ring(requests.end(), COMPLETION_SLOT);
        let too_big = ProcessError::Geometry { why: "layout overflows" };
        let descriptors = round_up(completions.end(), PAGE).ok_or(too_big.clone())?;
        let n = g.descriptors as usize;
        let statuses = round_up(descriptors + n * DESCRIPTOR_BYTES, PAGE).ok_or(too_big.clone())?;
        let packets = round_up(statuses + n * STATUS_BYTES, PAGE).ok_or(too_big.clone())?;
        let call = round_up(packets + g.packet_len as usize, PAGE).ok_or(too_big.clone())?;
        let total = round_up(call + g.call_len as usize, PAGE).ok_or(too_big)?;
        Ok(Self { geometry: g, requests, completions, descriptors, statuses, packets, call, total })
    }

    /// The packet area as a byte range of the shared memory.
    pub fn packet_range(&self) -> core::ops::Range<usize> {
        self.packets..self.packets + self.geometry.packet_len as usize
    }

    /// Offset of descriptor table entry `index` (the caller checks `index` is in range).
    pub fn descriptor_offset(&self, index: u32) -> usize {
        self.descriptors + index as usize * DESCRIPTOR_BYTES
    }

    /// Offset of status table entry `index` (the caller checks `index` is in range).
    pub fn status_offset(&self, index: u32) -> usize {
        self.statuses + index as usize * STATUS_BYTES
    }

    /// The call area as a byte range of the shared memory.
    pub fn call_range(&self) -> core::ops::Range<usize> {
        self.call..self.call + self.geometry.call_len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_aligned_and_disjoint() {
        let l = Layout::new(Geometry::default()).unwrap();
        assert_eq!(l.requests.tail % CACHE_LINE, 0);
        assert_eq!(l.requests.slots - l.requests.tail, CACHE_LINE);
        assert_eq!(l.completions.tail % CACHE_LINE, 0);
        assert!(l.requests.end() <= l.completions.tail);
        assert!(l.completions.end() <= l.descriptors);
        assert_eq!((l.descriptors % PAGE, l.statuses % PAGE), (0, 0));
        assert!(l.descriptor_offset(l.geometry.descriptors) <= l.statuses);
        assert!(l.status_offset(l.geometry.descriptors) <= l.packets);
        assert_eq!(l.packets % PAGE, 0);
        assert_eq!(l.call % PAGE, 0);
        assert!(l.packet_range().end <= l.call);
        assert!(l.call_range().end <= l.total);
        const { assert!(ctl::SLEEPS + 8 <= PAGE) };
    }

    #[test]
    fn bad_geometries_are_refused() {
        let ok = Geometry::default();
        for g in [
            Geometry { slots: 0, ..ok },
            Geometry { slots: 3, ..ok },
            Geometry { slots: 8192, ..ok },
            Geometry { packet_len: 0, ..ok },
            Geometry { packet_len: 100, ..ok },
            Geometry { packet_len: (1 << 30) + 64, ..ok },
            Geometry { call_len: 4096, ..ok },
            Geometry { call_len: u32::MAX, ..ok },
            Geometry { descriptors: 0, ..ok },
            Geometry { descriptors: 33, ..ok },
            Geometry { descriptors: MAX_DESCRIPTORS + 32, ..ok },
        ] {
            assert!(Layout::new(g).is_err(), "{g:?}");
        }
    }

    #[test]
    fn slot_offsets_wrap_inside_the_ring() {
        let l = Layout::new(Geometry { slots: 4, ..Geometry::default() }).unwrap();
        let r = l.requests;
        assert_eq!(r.slot_offset(0), r.slots);
        assert_eq!(r.slot_offset(4), r.slots);
        assert_eq!(r.slot_offset(u32::MAX), r.slots + 3 * REQUEST_SLOT);
    }
}
