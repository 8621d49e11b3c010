//! A bounded cache of expanded AEAD keys for the ESP SAs that carry traffic.
//!
//! ring's expanded AES-GCM key (round keys and the GHASH table) is 544 bytes, more than the
//! 500-byte budget of a whole ESP SA. So an SA keeps only its raw key (zeroized on drop) and
//! the expanded form lives here while the SA is in use: the first packet of an SA that is not
//! cached expands its key (about 140 ns for AES-256-GCM, once per batch at worst), later
//! packets find it by the SA's slot hint. At most [`MAX_CACHED`] expanded keys exist; beyond
//! that the oldest-filled entry is overwritten (round robin).
//!
//! Every byte here is counted in [`crate::MemoryReport::esp_sa_bytes`]. A key leaving the
//! cache (eviction, SA delete, instance drop) is overwritten in place with a key of the same
//! algorithm made from zeros first, as ring keys are not `Zeroize` (see `seal::scrub_aead_key`).
//! Stack temporaries of an expansion are cleared right after it (`EXPANSION_SCRUB` bytes
//! below [`KeyCache::get`], about twice the expansion's time); those of the per-packet crypto
//! calls by the stack scrub of every delete (`trusted::scrub_stack`).

use super::seal::scrub_aead_key;
use ring::aead::{Algorithm, LessSafeKey, UnboundKey};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most expanded keys held at once: 256 x 552 bytes = 141 KB when full, enough for the SAs
/// of eight batches of 32 packets that all come from different SAs.
pub(crate) const MAX_CACHED: usize = 256;

/// `EspSa::cache_slot` of an SA that has no entry yet.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// A new owner ID, unique for the life of the process (never 0, never reused), so that an
/// entry can be matched to its SA without trusting a handle that a deletion may recycle.
pub(crate) fn next_owner_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One expanded key and the SA it belongs to (0: none).
struct Cached {
    owner: u64,
    key: LessSafeKey,
}

/// Bytes of stack cleared below [`KeyCache::get`] after an expansion: four times what ring's
/// key set-up and the move of the new entry leave (`tests/key_exposure.rs` still finds key
/// bytes with 2 KB, none with 4 KB).
const EXPANSION_SCRUB: usize = 16 * 1024;

/// The cache of one enclave instance.
pub(crate) struct KeyCache {
    /// Boxed so that growing the vector moves pointers, never key bytes (a moved-from copy
    /// of a key could not be zeroized).
    #[allow(clippy::vec_box)]
    entries: Vec<Box<Cached>>,
    /// Entries whose owner was deleted: reused before any live SA's key is evicted.
    free: Vec<u32>,
    /// The next entry to evict once the cache is full.
    hand: usize,
    max: usize,
}

impl KeyCache {
    /// An empty cache that will hold at most `max` keys (at least one).
    pub(crate) fn new(max: usize) -> Self {
        Self { entries: Vec::new(), free: Vec::new(), hand: 0, max: max.max(1) }
    }

    /// The expanded key of the SA `owner`, whose raw key is `raw`: the cached one if `slot`
    /// still points at it, else a fresh expansion (and `slot` is updated). `None` only if
    /// ring refuses the raw key, which its length check at install rules out.
    pub(crate) fn get<'a>(
        &'a mut self,
        slot: &mut u32,
        owner: u64,
        alg: &'static Algorithm,
        raw: &[u8],
    ) -> Option<&'a LessSafeKey> {
        let mut i = *slot as usize;
        if self.entries.get(i).is_none_or(|e| e.owner != owner) {
            i = self.fill(owner, alg, raw)?;
            *slot = u32::try_from(i).ok()?;
            // The expansion moved the schedule (whose first round keys are the raw key)
            // through frames below this one; clear them now rather than trust that a later
            // `scrub_stack` runs from a deep enough frame to reach them.
            super::scrub_stack_by::<EXPANSION_SCRUB>();
        }
        self.entries.get(i).map(|e| &e.key)
    }

    fn fill(&mut self, owner: u64, alg: &'static Algorithm, raw: &[u8]) -> Option<usize> {
        let key = LessSafeKey::new(UnboundKey::new(alg, raw).ok()?);
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None if self.entries.len() < self.max => {
                self.entries.push(Box::new(Cached { owner, key }));
                return Some(self.entries.len() - 1);
            }
            None => {
                let victim = self.hand % self.entries.len().max(1);
                self.hand = victim + 1;
                victim
            }
        };
        let e = self.entries.get_mut(i)?;
        // The new key may be of another algorithm, shorter than the old one: clear the old
        // bytes in place first, so none of them survive behind the new value.
        scrub_aead_key(&mut e.key);
        e.key = key;
        e.owner = owner;
        Some(i)
    }

    /// Clears the entry of a deleted SA, if it still has one.
    pub(crate) fn forget(&mut self, slot: u32, owner: u64) {
        if let Some(e) = self.entries.get_mut(slot as usize) {
            if e.owner == owner && owner != 0 {
                scrub_aead_key(&mut e.key);
                e.owner = 0;
                self.free.push(slot);
            }
        }
    }

    /// The most keys this cache holds.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Expanded keys held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.owner != 0).count()
    }

    /// Bytes held: every allocated entry (used or free) and the two vectors.
    pub(crate) fn bytes(&self) -> usize {
        self.entries.len() * core::mem::size_of::<Cached>()
            + self.entries.capacity() * core::mem::size_of::<Box<Cached>>()
            + self.free.capacity() * core::mem::size_of::<u32>()
    }
}

impl Drop for KeyCache {
    fn drop(&mut self) {
        for e in &mut self.entries {
            scrub_aead_key(&mut e.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::aead::{Aad, Nonce, AES_256_GCM, CHACHA20_POLY1305};

    fn seal(k: &LessSafeKey) -> Vec<u8> {
        let mut b = b"sixteen byte msg".to_vec();
        k.seal_in_place_append_tag(Nonce::assume_unique_for_key([0; 12]), Aad::empty(), &mut b).unwrap();
        b
    }

    #[test]
    fn hits_misses_evictions_and_forgets() {
        let mut c = KeyCache::new(2);
        let (a, b, d) = (next_owner_id(), next_owner_id(), next_owner_id());
        let (mut sa, mut sb, mut sd) = (NO_SLOT, NO_SLOT, NO_SLOT);
        let want_a = seal(&LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[1; 32]).unwrap()));
        assert_eq!(seal(c.get(&mut sa, a, &AES_256_GCM, &[1; 32]).unwrap()), want_a);
        assert_eq!(sa, 0);
        c.get(&mut sb, b, &CHACHA20_POLY1305, &[2; 32]).unwrap();
        assert_eq!((sb, c.len()), (1, 2));
        // Hit: the raw key is not looked at again.
        assert_eq!(seal(c.get(&mut sa, a, &AES_256_GCM, &[9; 32]).unwrap()), want_a);
        // Full: a third SA evicts round robin (entry 0, a's), and a re-expands into entry 1.
        c.get(&mut sd, d, &AES_256_GCM, &[3; 32]).unwrap();
        assert_eq!(sd, 0);
        assert_eq!(seal(c.get(&mut sa, a, &AES_256_GCM, &[1; 32]).unwrap()), want_a);
        assert_eq!(sa, 1);
        // A forgotten entry is reused first; a stale hint of another owner is never trusted.
        c.forget(sd, d);
        c.forget(sd, d);
        assert_eq!(c.len(), 1);
        let mut stale = sa;
        c.get(&mut stale, b, &CHACHA20_POLY1305, &[2; 32]).unwrap();
        assert_eq!(stale, 0, "b took the free entry, not a's");
        assert_eq!(
            c.bytes(),
            2 * core::mem::size_of::<Cached>() + c.entries.capacity() * 8 + c.free.capacity() * 4
        );
        assert!(c.get(&mut NO_SLOT.clone(), next_owner_id(), &AES_256_GCM, &[0; 5]).is_none());
    }
}
