//! The IKEv2 PRF (HMAC-SHA2, RFC 4868) and prf+ (RFC 7296 §2.13).

use enclave_api::alg::{Integ, Prf};
use enclave_api::error::{Error, Result};
use ring::hmac;

/// Largest PRF output (HMAC-SHA-512).
pub(crate) const MAX_PRF_LEN: usize = 64;

pub(crate) fn hmac_alg(prf: Prf) -> hmac::Algorithm {
    match prf {
        Prf::HmacSha256 => hmac::HMAC_SHA256,
        Prf::HmacSha384 => hmac::HMAC_SHA384,
        Prf::HmacSha512 => hmac::HMAC_SHA512,
    }
}

pub(crate) fn integ_alg(integ: Integ) -> hmac::Algorithm {
    match integ {
        Integ::HmacSha256_128 => hmac::HMAC_SHA256,
        Integ::HmacSha384_192 => hmac::HMAC_SHA384,
        Integ::HmacSha512_256 => hmac::HMAC_SHA512,
    }
}

/// Overwrites a ring HMAC key in place with the key schedule of an empty key.
///
/// ring's keys do not zeroize themselves. Assigning over the same place writes the new
/// inner/outer states over the old ones (same type, same size); `black_box` keeps the
/// store from being elided as dead. Best effort: copies ring made internally are not reached.
pub(crate) fn scrub_hmac_key(key: &mut hmac::Key) {
    *key = hmac::Key::new(key.algorithm(), &[]);
    core::hint::black_box(key);
}

/// `out[..output_len] = prf(key, parts[0] | parts[1] | ...)`; returns the output length.
pub(crate) fn prf(alg: Prf, key: &[u8], parts: &[&[u8]], out: &mut [u8]) -> Result<usize> {
    let mut k = hmac::Key::new(hmac_alg(alg), key);
    let mut ctx = hmac::Context::with_key(&k);
    for p in parts {
        ctx.update(p);
    }
    let tag = ctx.sign();
    scrub_hmac_key(&mut k);
    let t = tag.as_ref();
    out.get_mut(..t.len()).ok_or(Error::Internal { what: "prf output" })?.copy_from_slice(t);
    Ok(t.len())
}

/// Fills `out` with prf+(key, seed) = T1 | T2 | ..., Tn = prf(key, Tn-1 | seed | n).
pub(crate) fn prf_plus(alg: Prf, key: &[u8], seed: &[&[u8]], out: &mut [u8]) -> Result<()> {
    let hlen = alg.output_len();
    if out.len() > 255 * hlen {
        return Err(Error::Internal { what: "prf+ length" });
    }
    let mut k = hmac::Key::new(hmac_alg(alg), key);
    let mut prev = [0u8; MAX_PRF_LEN];
    let mut prev_len = 0;
    let mut filled = 0;
    let mut counter: u8 = 1;
    while filled < out.len() {
        let mut ctx = hmac::Context::with_key(&k);
        ctx.update(prev.get(..prev_len).unwrap_or(&[]));
        for p in seed {
            ctx.update(p);
        }
        ctx.update(&[counter]);
        let tag = ctx.sign();
        let t = tag.as_ref();
        let take = t.len().min(out.len() - filled);
        out.get_mut(filled..filled + take)
            .zip(t.get(..take))
            .map(|(d, s)| d.copy_from_slice(s))
            .ok_or(Error::Internal { what: "prf+" })?;
        prev.get_mut(..t.len()).map(|d| d.copy_from_slice(t)).ok_or(Error::Internal { what: "prf+" })?;
        prev_len = t.len();
        filled += take;
        counter = counter.wrapping_add(1);
    }
    zeroize::Zeroize::zeroize(&mut prev);
    scrub_hmac_key(&mut k);
    Ok(())
}

/// Constant-time equality of two byte strings of equal length (lengths are public).
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut acc = 0u8;
    for (x, y) in a.iter().zip(b) {
        acc |= x ^ y;
    }
    core::hint::black_box(acc) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn prf_plus_first_block_is_prf_of_seed_and_one() {
        let key = [0x0b; 20];
        let mut out = [0u8; 100];
        prf_plus(Prf::HmacSha256, &key, &[b"seed"], &mut out).unwrap();
        let mut t1 = [0u8; 64];
        prf(Prf::HmacSha256, &key, &[b"seed", &[1]], &mut t1).unwrap();
        assert_eq!(&out[..32], &t1[..32]);
        let mut t2 = [0u8; 64];
        prf(Prf::HmacSha256, &key, &[&t1[..32], b"seed", &[2]], &mut t2).unwrap();
        assert_eq!(&out[32..64], &t2[..32]);
    }

    #[test]
    fn prf_matches_rfc4868_case_1() {
        // RFC 4868 §2.7.1, PRF-HMAC-SHA-256 test case 1 ("Hi There").
        let mut out = [0u8; 64];
        prf(Prf::HmacSha256, &[0x0b; 32], &[b"Hi There"], &mut out).unwrap();
        assert_eq!(out[..32], hex!("198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"));
    }

    #[test]
    fn ct_eq_compares() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
