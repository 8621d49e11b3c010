//! The enclave's own IKE nonces: issued here, recognised here, usable once.
//!
//! Every IKE SA and child SA derivation mixes in the nonces of its exchange (RFC 7296
//! §2.14, §2.17), one of which our side chose. If the caller could name any nonces, it could
//! derive a live child's KEYMAT a second time (a second outbound instance of one AEAD key
//! with its own sequence space: nonce reuse) or with the roles swapped (the enclave
//! encrypting under the key the peer encrypts with). So the enclave issues our nonces
//! itself, recognises them when a derivation names them, and lets each one serve a single
//! derivation; which of Ni and Nr is ours fixes our role in the exchange.
//!
//! A nonce is [`NONCE_LEN`] bytes: `AES-256_k1(counter || 8 random bytes) ||
//! HMAC-SHA-256_k2(those 16 bytes)`. Both keys are drawn at start and never leave; the
//! block hides how many nonces were issued, the MAC makes a nonce recognisable as ours
//! without keeping it. Uses are tracked for the last [`WINDOW`] counters issued (a bitmap,
//! as an anti-replay window); an older nonce is refused, never accepted twice.

use super::keybuf::KeyBuf;
use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use enclave_api::alg::Role;
use enclave_api::error::{refusal, Error, Result};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Bytes of an enclave nonce (RFC 7296 §2.10: at least 16 and half the PRF's key size).
pub(crate) const NONCE_LEN: usize = 48;
/// How many of the most recently issued counters have their use tracked.
pub(crate) const WINDOW: u64 = 1 << 16;
/// Most nonces one call issues.
pub(crate) const MAX_PER_CALL: usize = 16;
const WORDS: usize = (WINDOW / 64) as usize;
const BLOCK: usize = 16;

/// The issuing and use-tracking state.
pub(crate) struct Nonces {
    block_key: aes::Aes256,
    mac_key: hmac::Key,
    /// The counter of the next nonce to issue (0 is never issued).
    next: u64,
    /// Bit `c % WINDOW` is set once counter `c` (within the window) has been used.
    used: Box<[u64; WORDS]>,
}

impl Drop for Nonces {
    fn drop(&mut self) {
        // ring keys are not `Zeroize`: overwritten in place, as every other HMAC key here.
        super::prf::scrub_hmac_key(&mut self.mac_key);
    }
}

/// A recognised nonce of ours and its place in the exchange, not yet marked used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    counter: u64,
    /// Our role: initiator when our nonce is Ni.
    pub(crate) role: Role,
}

impl Nonces {
    pub(crate) fn new(rng: &SystemRandom) -> Result<Self> {
        let mut k = KeyBuf::<64>::zeroed(64)?;
        rng.fill(k.as_mut()).map_err(|_| Error::Random)?;
        let (k1, k2) = k.as_slice().split_at(32);
        let block_key = aes::Aes256::new_from_slice(k1).map_err(|_| Error::Internal { what: "nonce key" })?;
        let mac_key = hmac::Key::new(hmac::HMAC_SHA256, k2);
        Ok(Self { block_key, mac_key, next: 1, used: Box::new([0; WORDS]) })
    }

    /// Bytes held beyond the owning struct.
    pub(crate) fn bytes(&self) -> usize {
        WORDS * 8
    }

    /// Fills `out` (a whole number of [`NONCE_LEN`] nonces) with fresh nonces.
    pub(crate) fn issue(&mut self, rng: &SystemRandom, out: &mut [u8]) -> Result<()> {
        if out.is_empty() || !out.len().is_multiple_of(NONCE_LEN) || out.len() > MAX_PER_CALL * NONCE_LEN {
            let why = "a whole number of nonces, at most 16";
            return Err(Error::BadLength { what: "nonce output", len: out.len(), why });
        }
        for n in out.chunks_exact_mut(NONCE_LEN) {
            let c = self.next;
            self.next = c.checked_add(1).ok_or(Error::Exhausted { what: "nonce counter" })?;
            // The slot this counter takes was the one of a counter now out of the window.
            let (w, b) = slot(c);
            self.used[w] &= !b;
            let (block, tag) = n.split_at_mut(BLOCK);
            block[..8].copy_from_slice(&c.to_be_bytes());
            rng.fill(&mut block[8..]).map_err(|_| Error::Random)?;
            self.block_key.encrypt_block(aes::Block::from_mut_slice(block));
            tag.copy_from_slice(hmac::sign(&self.mac_key, block).as_ref());
        }
        Ok(())
    }

    /// The counter of `nonce` if this instance issued it.
    fn recognise(&self, nonce: &[u8]) -> Option<u64> {
        if nonce.len() != NONCE_LEN {
            return None;
        }
        let (block, tag) = nonce.split_at(BLOCK);
        hmac::verify(&self.mac_key, block, tag).ok()?;
        let mut b = aes::Block::clone_from_slice(block);
        self.block_key.decrypt_block(&mut b);
        let mut c = [0u8; 8];
        c.copy_from_slice(&b[..8]);
        Some(u64::from_be_bytes(c))
    }

    /// Finds our nonce among an exchange's `nonce_i` and `nonce_r` and checks it is unused;
    /// `stated` is the caller's role, which must be the one our nonce gives. When both are
    /// ours (two ends of one instance), the stated role picks which one is this side's.
    pub(crate) fn claim(&self, nonce_i: &[u8], nonce_r: &[u8], stated: Role) -> Result<Claim> {
        let refuse = |why| Error::ProtocolRefused { why };
        let claim = match (self.recognise(nonce_i), self.recognise(nonce_r)) {
            (None, None) => return Err(refuse(refusal::NONCE_NOT_ISSUED)),
            (Some(c), None) => Claim { counter: c, role: Role::Initiator },
            (None, Some(c)) => Claim { counter: c, role: Role::Responder },
            (Some(i), Some(r)) => match stated {
                Role::Initiator => Claim { counter: i, role: Role::Initiator },
                Role::Responder => Claim { counter: r, role: Role::Responder },
            },
        };
        if claim.role != stated {
            return Err(refuse(refusal::ROLE_MISMATCH));
        }
        if self.next - claim.counter > WINDOW {
            return Err(refuse(refusal::NONCE_EXPIRED));
        }
        let (w, b) = slot(claim.counter);
        if self.used[w] & b != 0 {
            return Err(refuse(refusal::NONCE_USED));
        }
        Ok(claim)
    }

    /// Marks a claimed nonce used: no later derivation may name it.
    pub(crate) fn spend(&mut self, claim: Claim) {
        let (w, b) = slot(claim.counter);
        self.used[w] |= b;
    }
}

/// The bitmap word and bit of counter `c`.
fn slot(c: u64) -> (usize, u64) {
    let i = c % WINDOW;
    // `i / 64 < WORDS`: the index is in range by construction.
    (usize::try_from(i / 64).unwrap_or(0), 1u64 << (i % 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two(n: &mut Nonces, rng: &SystemRandom) -> (Vec<u8>, Vec<u8>) {
        let mut b = vec![0u8; 2 * NONCE_LEN];
        n.issue(rng, &mut b).unwrap();
        let (a, c) = b.split_at(NONCE_LEN);
        (a.to_vec(), c.to_vec())
    }

    #[test]
    fn an_issued_nonce_serves_one_derivation_and_fixes_the_role() {
        let rng = SystemRandom::new();
        let mut n = Nonces::new(&rng).unwrap();
        let (ours, _) = two(&mut n, &rng);
        let theirs = [7u8; 32];
        let c = n.claim(&ours, &theirs, Role::Initiator).unwrap();
        assert_eq!(c.role, Role::Initiator);
        // Swapped positions: ours is Nr, so the stated initiator role is refused.
        let swapped = n.claim(&theirs, &ours, Role::Initiator);
        assert_eq!(swapped, Err(Error::ProtocolRefused { why: refusal::ROLE_MISMATCH }));
        n.spend(c);
        let again = n.claim(&ours, &theirs, Role::Initiator);
        assert_eq!(again, Err(Error::ProtocolRefused { why: refusal::NONCE_USED }));
        assert_eq!(
            n.claim(&[1; 48], &theirs, Role::Initiator),
            Err(Error::ProtocolRefused { why: refusal::NONCE_NOT_ISSUED })
        );
    }

    #[test]
    fn another_instance_and_a_flipped_bit_are_not_recognised() {
        let rng = SystemRandom::new();
        let (mut a, b) = (Nonces::new(&rng).unwrap(), Nonces::new(&rng).unwrap());
        let (ours, _) = two(&mut a, &rng);
        assert_eq!(b.recognise(&ours), None);
        for i in 0..NONCE_LEN {
            let mut t = ours.clone();
            t[i] ^= 0x40;
            assert_eq!(a.recognise(&t), None, "byte {i}");
        }
        assert!(a.recognise(&ours[..32]).is_none());
        assert_eq!(a.recognise(&ours), Some(1));
    }

    #[test]
    fn nonces_past_the_window_are_refused_and_slots_are_reused_cleanly() {
        let rng = SystemRandom::new();
        let mut n = Nonces::new(&rng).unwrap();
        let (first, _) = two(&mut n, &rng);
        n.spend(n.claim(&first, &[0; 16], Role::Initiator).unwrap());
        // Jump the counter to just past the window of the first nonce.
        n.next = WINDOW + 1;
        let mut fresh = vec![0u8; NONCE_LEN];
        n.issue(&rng, &mut fresh).unwrap();
        assert_eq!(n.recognise(&fresh), Some(WINDOW + 1));
        // Counter WINDOW+1 shares the first one's slot: cleared on issue, so usable.
        assert!(n.claim(&[0; 16], &fresh, Role::Responder).is_ok());
        assert_eq!(
            n.claim(&first, &[0; 16], Role::Initiator),
            Err(Error::ProtocolRefused { why: refusal::NONCE_EXPIRED })
        );
    }

    #[test]
    fn both_nonces_ours_takes_the_stated_side() {
        let rng = SystemRandom::new();
        let mut n = Nonces::new(&rng).unwrap();
        let (a, b) = two(&mut n, &rng);
        let i = n.claim(&a, &b, Role::Initiator).unwrap();
        n.spend(i);
        let r = n.claim(&a, &b, Role::Responder).unwrap();
        assert_eq!(r.role, Role::Responder);
        n.spend(r);
        assert!(n.claim(&a, &b, Role::Responder).is_err());
        assert!(n.claim(&b, &[0; 16], Role::Initiator).is_err());
        assert_eq!(
            n.issue(&rng, &mut [0u8; 47]),
            Err(Error::BadLength {
                what: "nonce output",
                len: 47,
                why: "a whole number of nonces, at most 16"
            })
        );
    }
}
