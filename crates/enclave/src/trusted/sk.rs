//! The IKEv2 Encrypted payload (SK, RFC 7296 §3.14; SKF, RFC 7383), with AES-CBC + HMAC,
//! AES-GCM-16 (RFC 5282) or ChaCha20-Poly1305 (RFC 7634).
//!
//! `message` runs from the IKE header to the end of the ICV: `[AAD | IV | inner payloads |
//! padding | Pad Length | ICV]`. For the AEADs the AAD is the IKE header through the SK
//! payload header (RFC 5282 §5.1) and the nonce is salt(4) || IV(8); for CBC the HMAC covers
//! everything before the ICV. Keys are expanded per message: IKE is low-rate, and this keeps
//! only raw SK_e/SK_a bytes resident.

use super::cbc_mode::{CbcDecryptor, CbcEncryptor, BLOCK};
use super::ike_keys::IkeSa;
use super::prf::{ct_eq, integ_alg, scrub_hmac_key};
use super::seal::scrub_aead_key;
use core::ops::Range;
use enclave_api::alg::{Cipher, Suite};
use enclave_api::error::{Error, Result};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

pub(crate) fn aead_alg(cipher: Cipher) -> Option<&'static aead::Algorithm> {
    match cipher {
        Cipher::AesGcm16_128 => Some(&aead::AES_128_GCM),
        Cipher::AesGcm16_256 => Some(&aead::AES_256_GCM),
        Cipher::ChaCha20Poly1305 => Some(&aead::CHACHA20_POLY1305),
        Cipher::AesCbc128 | Cipher::AesCbc256 => None,
    }
}

/// Splits AEAD key material into (ring key, 4-byte salt).
pub(crate) fn aead_key(cipher: Cipher, keymat: &[u8]) -> Result<(LessSafeKey, [u8; 4])> {
    let alg = aead_alg(cipher).ok_or(Error::Internal { what: "AEAD algorithm" })?;
    let (k, s) = keymat.split_at_checked(alg.key_len()).ok_or(Error::Internal { what: "AEAD key" })?;
    let salt: [u8; 4] = s.try_into().map_err(|_| Error::Internal { what: "AEAD salt" })?;
    let key = LessSafeKey::new(UnboundKey::new(alg, k).map_err(|_| Error::Internal { what: "AEAD key" })?);
    Ok((key, salt))
}

pub(crate) fn nonce(salt: &[u8; 4], iv: &[u8; 8]) -> Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(salt);
    n[4..].copy_from_slice(iv);
    Nonce::assume_unique_for_key(n)
}

fn bad_len(len: usize, why: &'static str) -> Error {
    Error::BadLength { what: "SK payload message", len, why }
}

/// Encrypts an outgoing message in place (layout in the module doc).
pub(crate) fn encrypt(
    sa: &mut IkeSa,
    rng: &SystemRandom,
    msg: &mut [u8],
    aad_len: usize,
    plaintext_len: usize,
) -> Result<()> {
    let suite: Suite = sa.suite;
    let layout = suite.sk_layout(plaintext_len);
    let expected =
        aad_len.checked_add(layout.body_len(plaintext_len)).ok_or(bad_len(msg.len(), "length overflow"))?;
    if msg.len() != expected || aad_len < 28 + 4 {
        return Err(bad_len(msg.len(), "must be aad_len + IV + inner payloads + padding + ICV"));
    }
    let iv_start = aad_len;
    let ct_start = iv_start + layout.iv_len;
    let pad_start = ct_start + plaintext_len;
    let icv_start = pad_start + layout.pad_len;
    // Padding is zeros; the last padding octet is Pad Length (bytes of padding before it).
    let pad_count = layout.pad_len - 1;
    if let Some(pad) = msg.get_mut(pad_start..icv_start) {
        pad.fill(0);
        if let Some(last) = pad.last_mut() {
            // sk_layout pads to at most one block, so this is < 16.
            *last = u8::try_from(pad_count).unwrap_or(0);
        }
    }
    if let Some(alg_cipher) = aead_alg(suite.cipher).map(|_| suite.cipher) {
        if sa.next_iv == u64::MAX {
            return Err(Error::Exhausted { what: "IKE SA AEAD IV counter" });
        }
        let iv = sa.next_iv.to_be_bytes();
        sa.next_iv += 1;
        let (keymat, _) = sa.sk_keys(true);
        let (mut key, salt) = aead_key(alg_cipher, keymat)?;
        let (aad, rest) = msg.split_at_mut(aad_len);
        let (ivb, rest) = rest.split_at_mut(layout.iv_len);
        ivb.copy_from_slice(&iv);
        let (body, icv) = rest.split_at_mut(plaintext_len + layout.pad_len);
        let r = key.seal_in_place_separate_tag(nonce(&salt, &iv), Aad::from(&*aad), body);
        scrub_aead_key(&mut key);
        let tag = r.map_err(|_| Error::Internal { what: "SK seal" })?;
        icv.copy_from_slice(tag.as_ref());
        return Ok(());
    }
    let integ = suite.integ.ok_or(Error::Internal { what: "suite" })?;
    let mut iv = [0u8; BLOCK];
    rng.fill(&mut iv).map_err(|_| Error::Random)?;
    let (ek, ak) = sa.sk_keys(true);
    let enc = CbcEncryptor::new(ek)?;
    msg.get_mut(iv_start..ct_start).ok_or(Error::Internal { what: "SK layout" })?.copy_from_slice(&iv);
    enc.encrypt(&iv, msg.get_mut(ct_start..icv_start).ok_or(Error::Internal { what: "SK layout" })?)?;
    let mut mac_key = hmac::Key::new(integ_alg(integ), ak);
    let tag = hmac::sign(&mac_key, msg.get(..icv_start).unwrap_or(&[]));
    scrub_hmac_key(&mut mac_key);
    let icv = msg.get_mut(icv_start..).ok_or(Error::Internal { what: "SK layout" })?;
    icv.copy_from_slice(tag.as_ref().get(..integ.icv_len()).unwrap_or(&[]));
    Ok(())
}

/// Verifies and decrypts an incoming message in place; returns the inner payloads' range.
pub(crate) fn decrypt(sa: &IkeSa, msg: &mut [u8], aad_len: usize) -> Result<Range<usize>> {
    let suite = sa.suite;
    let iv_len = suite.cipher.iv_len();
    let icv_len = suite.icv_len();
    let min = aad_len.checked_add(iv_len + 1 + icv_len).ok_or(bad_len(msg.len(), "length overflow"))?;
    if aad_len < 28 + 4 || msg.len() < min {
        return Err(bad_len(msg.len(), "shorter than AAD + IV + Pad Length + ICV"));
    }
    let ct_start = aad_len + iv_len;
    let icv_start = msg.len() - icv_len;
    if let Some(alg_cipher) = aead_alg(suite.cipher).map(|_| suite.cipher) {
        let (keymat, _) = sa.sk_keys(false);
        let (mut key, salt) = aead_key(alg_cipher, keymat)?;
        let (aad, rest) = msg.split_at_mut(aad_len);
        let (ivb, body) = rest.split_at_mut(iv_len);
        let iv: [u8; 8] = (&*ivb).try_into().map_err(|_| Error::Internal { what: "IV" })?;
        // ring decrypts and authenticates in one pass and zeroes its output on failure.
        let r = key.open_in_place(nonce(&salt, &iv), Aad::from(&*aad), body).map(|p| p.len());
        scrub_aead_key(&mut key);
        r.map_err(|_| Error::IntegrityCheckFailed)?;
    } else {
        let integ = suite.integ.ok_or(Error::Internal { what: "suite" })?;
        if !(icv_start - ct_start).is_multiple_of(BLOCK) {
            return Err(bad_len(msg.len(), "CBC ciphertext is not a whole number of blocks"));
        }
        let (ek, ak) = sa.sk_keys(false);
        let mut mac_key = hmac::Key::new(integ_alg(integ), ak);
        let tag = hmac::sign(&mac_key, msg.get(..icv_start).unwrap_or(&[]));
        scrub_hmac_key(&mut mac_key);
        let ok = ct_eq(tag.as_ref().get(..icv_len).unwrap_or(&[]), msg.get(icv_start..).unwrap_or(&[]));
        if !ok {
            return Err(Error::IntegrityCheckFailed);
        }
        let mut iv = [0u8; BLOCK];
        iv.copy_from_slice(msg.get(aad_len..ct_start).ok_or(Error::Internal { what: "IV" })?);
        CbcDecryptor::new(ek)?.decrypt(&iv, msg.get_mut(ct_start..icv_start).unwrap_or(&mut []))?;
    }
    // Pad Length is the last octet before the ICV; the padding itself is not checked
    // (RFC 7296 §3.14: any value).
    let pad_len_at = icv_start - 1;
    let pad = usize::from(*msg.get(pad_len_at).ok_or(Error::BadPadding)?);
    let end = pad_len_at.checked_sub(pad).filter(|&e| e >= ct_start).ok_or(Error::BadPadding)?;
    Ok(ct_start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trusted::dh::SharedSecret;
    use crate::trusted::ike_keys::{derive_ike_sa, SkeyseedSource};
    use enclave_api::alg::{Integ, Prf, Role};
    use enclave_api::ike::IkeSaParams;

    fn pair(suite: Suite) -> (IkeSa, IkeSa) {
        let g = SharedSecret::from_slice(&[5; 32]).unwrap();
        let p = |role| IkeSaParams {
            role,
            prf: Prf::HmacSha384,
            suite,
            nonce_i: &[1; 32],
            nonce_r: &[2; 32],
            spi_i: 1,
            spi_r: 2,
        };
        (
            derive_ike_sa(SkeyseedSource::Initial, &g, &p(Role::Initiator)).unwrap(),
            derive_ike_sa(SkeyseedSource::Initial, &g, &p(Role::Responder)).unwrap(),
        )
    }

    #[test]
    fn every_suite_round_trips_and_detects_tampering() {
        let rng = SystemRandom::new();
        for suite in [
            Suite::aead(Cipher::AesGcm16_128),
            Suite::aead(Cipher::AesGcm16_256),
            Suite::aead(Cipher::ChaCha20Poly1305),
            Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128),
            Suite::cbc(Cipher::AesCbc256, Integ::HmacSha512_256),
        ] {
            let (mut i, r) = pair(suite);
            let inner = b"IDi AUTH SAi2 TSi TSr payloads".as_slice();
            let aad_len = 32;
            let total = aad_len + suite.sk_layout(inner.len()).body_len(inner.len());
            let mut msg = vec![0u8; total];
            msg[..aad_len].copy_from_slice(&[0x42; 32]);
            msg[aad_len + suite.cipher.iv_len()..][..inner.len()].copy_from_slice(inner);
            encrypt(&mut i, &rng, &mut msg, aad_len, inner.len()).unwrap();
            assert_ne!(&msg[aad_len + suite.cipher.iv_len()..][..inner.len()], inner);
            let mut good = msg.clone();
            let range = decrypt(&r, &mut good, aad_len).unwrap();
            assert_eq!(&good[range], inner, "{suite:?}");
            for flip in [0, aad_len, total - 1] {
                let mut bad = msg.clone();
                bad[flip] ^= 0x80;
                assert_eq!(decrypt(&r, &mut bad, aad_len), Err(Error::IntegrityCheckFailed));
            }
            // Our own outbound keys do not open our own messages.
            assert!(decrypt(&i, &mut msg.clone(), aad_len).is_err());
        }
    }

    #[test]
    fn wrong_lengths_are_refused() {
        let rng = SystemRandom::new();
        let (mut i, r) = pair(Suite::aead(Cipher::AesGcm16_128));
        let mut msg = vec![0u8; 60];
        assert!(matches!(encrypt(&mut i, &rng, &mut msg, 32, 5), Err(Error::BadLength { .. })));
        assert!(matches!(decrypt(&r, &mut msg[..40], 32), Err(Error::BadLength { .. })));
        assert!(matches!(decrypt(&r, &mut msg, 10), Err(Error::BadLength { .. })));
    }
}
