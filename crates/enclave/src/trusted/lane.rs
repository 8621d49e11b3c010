//! What one ESP lane owns: its cache of expanded keys, where each SA's key sits in it, its
//! scratch and its counters.
//!
//! An instance's own calls use one lane; every [`crate::InlineEspLane`] a worker holds is
//! another, so workers run ESP batches of one instance at once, sharing only the SA table
//! (read-locked per batch) and, per outbound SA, its window of used sequence numbers
//! (locked once per run of that SA's descriptors).

use super::esp::{self, EspSa};
use super::esp_keys::{KeyCache, NO_SLOT};
use super::scrub_stack;
use super::table::Table;
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspStatus};
use enclave_api::report::Counters;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use zeroize::Zeroizing;

/// The state of one lane.
pub(crate) struct Lane {
    pub(crate) keys: KeyCache,
    /// Per SA table index: where that SA's expanded key may be in `keys` (a hint, checked
    /// against the SA's owner ID). Grown on demand, at most 65535 entries.
    hints: Vec<u32>,
    /// A hint to lend should `hints` lack an index (it never does).
    spare: u32,
    /// Private scratch for DECRYPT_FORWARD and CBC, allocated once.
    pub(crate) scratch: Zeroizing<Vec<u8>>,
    pub(crate) counters: Counters,
}

impl Lane {
    /// A lane whose cache holds at most `max_cached` expanded keys.
    pub(crate) fn new(max_cached: usize) -> Self {
        Self {
            keys: KeyCache::new(max_cached),
            hints: Vec::new(),
            spare: NO_SLOT,
            scratch: Zeroizing::new(vec![0u8; esp::SCRATCH_LEN]),
            counters: Counters::default(),
        }
    }

    /// The cache, the hint for the SA of `handle` (its low 16 bits are the table index),
    /// and the scratch.
    pub(crate) fn parts(&mut self, handle: u32) -> (&mut KeyCache, &mut u32, &mut [u8]) {
        let [_, _, hi, lo] = handle.to_be_bytes();
        let i = usize::from(u16::from_be_bytes([hi, lo]));
        if self.hints.len() <= i {
            self.hints.resize(i + 1, NO_SLOT);
        }
        let Self { keys, hints, spare, scratch, .. } = self;
        // The resize above makes index i exist, so `spare` is never lent; were it, a stale
        // hint would only cost an expansion, as the cache checks the owner.
        (keys, hints.get_mut(i).unwrap_or(spare), scratch)
    }

    /// Clears the cached key of the deleted SA `handle` (owner `owner`), if this lane has it.
    pub(crate) fn forget(&mut self, handle: u32, owner: u64) {
        let (keys, hint, _) = self.parts(handle);
        keys.forget(*hint, owner);
        *hint = NO_SLOT;
    }

    /// Drops every cached key (each is scrubbed in place first, see [`KeyCache`]).
    pub(crate) fn clear(&mut self) {
        self.keys = KeyCache::new(self.keys.max());
        self.hints = Vec::new();
    }

    /// Bytes of trusted memory this lane holds for ESP SAs: its cache and its hints.
    pub(crate) fn key_bytes(&self) -> usize {
        self.keys.bytes() + self.hints.capacity() * core::mem::size_of::<u32>()
    }

    /// Bytes the lane holds whatever the SAs: itself and its scratch.
    pub(crate) fn fixed_bytes(&self) -> usize {
        core::mem::size_of::<Self>() + self.scratch.capacity()
    }
}

/// A lane as a worker holds it (inside [`crate::InlineEspLane`]): the shared SA table, its
/// own lane state, and what it needs to know of deletions.
pub(crate) struct EspLaneParts {
    pub(crate) table: Arc<RwLock<Table<EspSa>>>,
    pub(crate) lane: Arc<Mutex<Lane>>,
    pub(crate) deletes: Arc<AtomicU64>,
    /// The deletion count when this lane last scrubbed its stack.
    pub(crate) seen_deletes: u64,
    pub(crate) max_batch: usize,
}

impl EspLaneParts {
    /// One batch on this lane, as `esp_batch`.
    pub(crate) fn batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        if let Err(e) = esp::check_batch(descriptors.len(), status.len(), self.max_batch) {
            self.lane.lock().unwrap_or_else(PoisonError::into_inner).counters.record_error(e.kind());
            return Err(e);
        }
        // A key deleted since the last batch may have left copies of its schedule in this
        // thread's stack frames (see `scrub_stack`): clear them before going on.
        let deletes = self.deletes.load(Ordering::Acquire);
        if deletes != self.seen_deletes {
            scrub_stack();
            self.seen_deletes = deletes;
        }
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        // A lane is one worker's: its lock is contended only by an SA deletion.
        let mut lane = self.lane.lock().map_err(|_| Error::Internal { what: "ESP lane (poisoned)" })?;
        lane.counters.batches = lane.counters.batches.saturating_add(1);
        Ok(esp::batch(&table, &mut lane, packets, descriptors, status))
    }
}

impl Drop for EspLaneParts {
    fn drop(&mut self) {
        // The worker is done with the lane: clear its keys now, and the stack it used.
        self.lane.lock().unwrap_or_else(PoisonError::into_inner).clear();
        scrub_stack();
    }
}
