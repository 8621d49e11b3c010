//! State migration, the enclave's side: the data key, its RSA-OAEP wrapping, the
//! destination's ephemeral key pair, and the package's encryption and state encoding.
//! Formats and the protocol: [`crate::migration`].
//!
//! RSA comes from the `rsa` crate (ring can neither generate RSA keys nor do OAEP). Its
//! private-key operation is not constant time (RUSTSEC-2023-0071, "Marvin"): it is used
//! here once per destination key, which is single use, and with blinding, so an attacker
//! gets one timing sample per key; docs/migration.md has the argument.

use super::seal::scrub_aead_key;
use crate::attest::Measurement;
use crate::migration::{
    why, MigrationPackage, OaepHash, PackageKind, DATA_KEY_LEN, MAX_RSA_BITS, MIN_RSA_BITS,
    PACKAGE_HEADER_LEN, PACKAGE_MAGIC, PACKAGE_VERSION, TAG_LEN,
};
use enclave_api::error::{Error, Result};
use enclave_api::handle::TenantId;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};
use rsa::pkcs8::{DecodePublicKey, EncodePublicKey};
use rsa::rand_core::OsRng;
use rsa::traits::PublicKeyParts;
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};
use zeroize::{Zeroize, Zeroizing};

fn refused(why: &'static str) -> Error {
    Error::Migration { why }
}

fn oaep(hash: OaepHash) -> Oaep {
    match hash {
        OaepHash::Sha1 => Oaep::new::<sha1::Sha1>(),
        OaepHash::Sha256 => Oaep::new::<sha2::Sha256>(),
    }
}

/// The destination's ephemeral key pair for one import, with its SPKI (what the source's
/// evidence must be bound to). `RsaPrivateKey` zeroizes its numbers on drop; no `Debug`, no
/// `Clone`.
pub(crate) struct DestinationKeyPair {
    key: RsaPrivateKey,
    spki: Vec<u8>,
}

impl DestinationKeyPair {
    /// Generates a key pair of `bits` (2048..=4096) and returns it with its SPKI.
    pub(crate) fn generate(bits: usize) -> Result<(Self, Vec<u8>)> {
        if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
            return Err(Error::BadLength {
                what: "destination key bits",
                len: bits,
                why: "must be 2048..=4096",
            });
        }
        let key = RsaPrivateKey::new(&mut OsRng, bits).map_err(|_| Error::Random)?;
        let spki = key
            .to_public_key()
            .to_public_key_der()
            .map_err(|_| Error::Internal { what: "destination SPKI" })?
            .as_bytes()
            .to_vec();
        Ok((Self { key, spki: spki.clone() }, spki))
    }

    /// Its public key, DER SubjectPublicKeyInfo.
    pub(crate) fn spki(&self) -> &[u8] {
        &self.spki
    }

    /// Opens a wrapped share. The caller drops the pair after the one import attempt it
    /// serves (at most two shares, both of one package), so no padding or timing oracle
    /// spans attempts.
    pub(crate) fn unwrap(&self, hash: OaepHash, wrapped: &[u8]) -> Result<Zeroizing<[u8; DATA_KEY_LEN]>> {
        if wrapped.len() != self.key.size() {
            return Err(refused(why::KEY_UNWRAP));
        }
        let clear = Zeroizing::new(
            self.key
                .decrypt_blinded(&mut OsRng, oaep(hash), wrapped)
                .map_err(|_| refused(why::KEY_UNWRAP))?,
        );
        // The HSM may not record the unwrapped key's length (SoftHSM2 2.6): checked here.
        let mut key = Zeroizing::new([0u8; DATA_KEY_LEN]);
        if clear.len() != DATA_KEY_LEN {
            return Err(refused(why::KEY_UNWRAP));
        }
        key.copy_from_slice(&clear);
        Ok(key)
    }
}

/// Wraps `data_key` with RSA-OAEP to the public key `spki_der` (2048..=4096 bits).
pub(crate) fn wrap_data_key(spki_der: &[u8], hash: OaepHash, data_key: &[u8]) -> Result<Vec<u8>> {
    let public = RsaPublicKey::from_public_key_der(spki_der).map_err(|_| refused(why::WRAP_KEY))?;
    let bits = public.n().bits();
    if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
        return Err(refused(why::WRAP_KEY));
    }
    public.encrypt(&mut OsRng, oaep(hash), data_key).map_err(|_| Error::Internal { what: "RSA-OAEP wrap" })
}

fn aead_key(data_key: &[u8]) -> Result<LessSafeKey> {
    let unbound =
        UnboundKey::new(&AES_256_GCM, data_key).map_err(|_| Error::Internal { what: "data key" })?;
    Ok(LessSafeKey::new(unbound))
}

/// The data key of a package from its shares (module docs of [`crate::migration`]).
pub(crate) fn data_key(
    hsm: Option<&[u8; DATA_KEY_LEN]>,
    destination: Option<&[u8; DATA_KEY_LEN]>,
) -> Zeroizing<[u8; DATA_KEY_LEN]> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"cloister-package-key-v2");
    for share in [hsm, destination].into_iter().flatten() {
        ctx.update(share);
    }
    let mut key = Zeroizing::new([0u8; DATA_KEY_LEN]);
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// One share of a data key.
type Share = Zeroizing<[u8; DATA_KEY_LEN]>;

/// Where a package's shares go: an HSM key, the destination enclave's key, or both.
pub(crate) struct ShareKeys<'a> {
    pub(crate) hsm: Option<&'a [u8]>,
    pub(crate) destination: Option<&'a [u8]>,
}

/// Builds a package around a state the caller serialises into [`Self::state`]: encrypts
/// the state in place under a data key made of fresh shares wrapped to [`ShareKeys`].
pub(crate) struct PackageWriter {
    buf: Zeroizing<Vec<u8>>,
    state_start: usize,
}

impl PackageWriter {
    /// Starts a package of `kind` for `tenant` and `measurement`, with room for
    /// `state_hint` bytes of state. The shares are generated and wrapped here; they never
    /// leave this function except wrapped and as the data key kept for [`Self::seal`].
    pub(crate) fn new(
        rng: &SystemRandom,
        tenant: TenantId,
        measurement: &Measurement,
        kind: PackageKind,
        hash: OaepHash,
        to: &ShareKeys<'_>,
        state_hint: usize,
    ) -> Result<(Self, Zeroizing<[u8; DATA_KEY_LEN]>)> {
        let share = |spki: Option<&[u8]>| -> Result<(Option<Share>, Vec<u8>)> {
            let Some(spki) = spki else { return Ok((None, Vec::new())) };
            let mut k = Zeroizing::new([0u8; DATA_KEY_LEN]);
            rng.fill(&mut k[..]).map_err(|_| Error::Random)?;
            let wrapped = wrap_data_key(spki, hash, &k[..])?;
            Ok((Some(k), wrapped))
        };
        let (hsm_key, hsm_wrapped) = share(to.hsm)?;
        let (dst_key, dst_wrapped) = share(to.destination)?;
        let data_key = data_key(hsm_key.as_deref(), dst_key.as_deref());
        let len16 = |w: &Vec<u8>| u16::try_from(w.len()).map_err(|_| refused(why::WRAP_KEY));
        let mut nonce = [0u8; 12];
        rng.fill(&mut nonce).map_err(|_| Error::Random)?;
        let cap = PACKAGE_HEADER_LEN + hsm_wrapped.len() + dst_wrapped.len() + state_hint + TAG_LEN + 512;
        let mut buf = Zeroizing::new(Vec::with_capacity(cap));
        buf.extend_from_slice(PACKAGE_MAGIC);
        buf.extend_from_slice(&[PACKAGE_VERSION, hash.code(), kind.code(), 0]);
        buf.extend_from_slice(&tenant.0.to_be_bytes());
        buf.extend_from_slice(&measurement.0);
        buf.extend_from_slice(&nonce);
        buf.extend_from_slice(&len16(&hsm_wrapped)?.to_be_bytes());
        buf.extend_from_slice(&len16(&dst_wrapped)?.to_be_bytes());
        // Body length, patched in `seal` once the state is written.
        buf.extend_from_slice(&[0u8; 8]);
        buf.extend_from_slice(&hsm_wrapped);
        buf.extend_from_slice(&dst_wrapped);
        let state_start = buf.len();
        Ok((Self { buf, state_start }, data_key))
    }

    /// The buffer to append the state's plaintext to (zeroized if the export fails).
    pub(crate) fn state(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Encrypts the state in place; `sign` gives the evidence over the header and shares and
    /// the body's tag, and the package is complete.
    pub(crate) fn seal(
        mut self,
        data_key: &[u8; DATA_KEY_LEN],
        sign: impl FnOnce(&[u8], &[u8]) -> Result<Vec<u8>>,
    ) -> Result<MigrationPackage> {
        let body_len = (self.buf.len() - self.state_start + TAG_LEN) as u64;
        self.buf
            .get_mut(76..84)
            .ok_or(Error::Internal { what: "package header" })?
            .copy_from_slice(&body_len.to_be_bytes());
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(self.buf.get(60..72).ok_or(Error::Internal { what: "package header" })?);
        let mut key = aead_key(data_key)?;
        let (aad, state) = self.buf.split_at_mut(self.state_start);
        // A fresh key per package: the random nonce is unique for it by construction.
        let tag =
            key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&*aad), state);
        scrub_aead_key(&mut key);
        let tag = tag.map_err(|_| Error::Internal { what: "package seal" })?;
        self.buf.extend_from_slice(tag.as_ref());
        // Ciphertext from here on: no longer zeroized.
        let mut bytes = core::mem::take(&mut *self.buf);
        let head = bytes.get(..self.state_start).ok_or(Error::Internal { what: "package header" })?;
        let evidence = sign(head, tag.as_ref())?;
        let ev_len =
            u16::try_from(evidence.len()).map_err(|_| Error::Internal { what: "package evidence" })?;
        bytes.extend_from_slice(&ev_len.to_be_bytes());
        bytes.extend_from_slice(&evidence);
        MigrationPackage::from_trusted(bytes)
    }
}

/// Decrypts a package's body with `data_key`; the header (tenant, measurement) is the
/// caller's to check, and was authenticated with it.
pub(crate) fn open_package(
    package: &MigrationPackage,
    data_key: &[u8; DATA_KEY_LEN],
) -> Result<Zeroizing<Vec<u8>>> {
    let mut key = aead_key(data_key)?;
    let mut buf = Zeroizing::new(package.body().to_vec());
    let opened = key
        .open_in_place(Nonce::assume_unique_for_key(package.nonce()), Aad::from(package.aad()), &mut buf[..])
        .map(|plain| plain.len());
    scrub_aead_key(&mut key);
    let len = opened.map_err(|_| refused(why::NO_DECRYPT))?;
    buf.truncate(len);
    Ok(buf)
}

/// The untrusted state that ends a decrypted package (from `start`), as a vector of its
/// own: everything before it (the secrets) is zeroized, then the state moves to the front of
/// the same buffer. Megabytes of untrusted state are neither copied to a new allocation nor
/// zeroized a byte at a time, which is what made concurrent imports contend on page faults.
pub(crate) fn untrusted_tail(mut state: Zeroizing<Vec<u8>>, start: usize) -> Result<Vec<u8>> {
    state.get_mut(..start).ok_or(Error::Internal { what: "package state" })?.zeroize();
    state.copy_within(start.., 0);
    let n = state.len() - start;
    state.truncate(n);
    // Untrusted bytes only from here on (the prefix was zeroized before it was overwritten,
    // and the spare capacity holds the state's own tail and the tag).
    Ok(core::mem::take(&mut *state))
}

/// Appends big-endian fields to a state buffer.
pub(crate) struct StateWriter<'a>(pub(crate) &'a mut Vec<u8>);

impl StateWriter<'_> {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// A key after a one-byte length (keys are at most 64 bytes).
    pub(crate) fn key(&mut self, k: &[u8]) -> Result<&mut Self> {
        let n = u8::try_from(k.len()).map_err(|_| Error::Internal { what: "state key length" })?;
        self.0.push(n);
        self.0.extend_from_slice(k);
        Ok(self)
    }
    /// A secret's encoding after a two-byte length.
    pub(crate) fn blob16(&mut self, b: &[u8]) -> Result<&mut Self> {
        let n = u16::try_from(b.len()).map_err(|_| Error::Internal { what: "state secret length" })?;
        self.0.extend_from_slice(&n.to_be_bytes());
        self.0.extend_from_slice(b);
        Ok(self)
    }
    /// A count that the tables bound to 16 bits.
    pub(crate) fn count(&mut self, n: usize) -> Result<&mut Self> {
        let n = u32::try_from(n).map_err(|_| Error::Internal { what: "state count" })?;
        Ok(self.u32(n))
    }
}

/// Reads a decrypted state; every shortfall is [`why::STATE_MALFORMED`].
pub(crate) struct StateReader<'a>(pub(crate) &'a [u8]);

impl<'a> StateReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let (a, b) = self.0.split_at_checked(n).ok_or(refused(why::STATE_MALFORMED))?;
        self.0 = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    pub(crate) fn key(&mut self) -> Result<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    pub(crate) fn blob16(&mut self) -> Result<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    pub(crate) fn rest(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }
    pub(crate) fn finish(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(refused(why::STATE_MALFORMED))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement() -> Measurement {
        Measurement([7; 48])
    }

    #[test]
    fn a_package_opens_with_both_shares_only_and_binds_its_header() {
        let rng = SystemRandom::new();
        let (dst, dst_spki) = DestinationKeyPair::generate(2048).unwrap();
        let (hsm, hsm_spki) = DestinationKeyPair::generate(2048).unwrap();
        let to = ShareKeys { hsm: Some(&hsm_spki), destination: Some(&dst_spki) };
        let (mut w, key) =
            PackageWriter::new(&rng, TenantId(3), &measurement(), PackageKind::Move, OaepHash::Sha1, &to, 16)
                .unwrap();
        w.state().extend_from_slice(b"state bytes");
        let package = w.seal(&key, |head, _| Ok(head[..4].to_vec())).unwrap();
        assert_eq!(package.tenant(), TenantId(3));
        assert_eq!(package.measurement(), measurement());
        assert_eq!(package.kind(), PackageKind::Move);
        assert_eq!(package.source_evidence(), b"CLMP", "the evidence closes the package");
        assert!(!package.as_bytes().windows(11).any(|x| x == b"state bytes"), "state in the clear");
        let k_hsm = hsm.unwrap(OaepHash::Sha1, package.hsm_share().unwrap()).unwrap();
        let k_dst = dst.unwrap(OaepHash::Sha1, package.destination_share().unwrap()).unwrap();
        assert_eq!(&*data_key(Some(&k_hsm), Some(&k_dst)), &*key);
        assert_eq!(&open_package(&package, &key).unwrap()[..], b"state bytes");
        // One share alone is no key: neither the HSM's nor the destination's.
        for partial in [data_key(Some(&k_hsm), None), data_key(None, Some(&k_dst))] {
            assert_eq!(open_package(&package, &partial), Err(refused(why::NO_DECRYPT)));
        }

        // A flipped header byte (tenant), share byte or body byte: refused.
        let body_end = package.as_bytes().len() - 2 - 4;
        for i in [8, PACKAGE_HEADER_LEN + 5, body_end - 1] {
            let mut b = package.as_bytes().to_vec();
            b[i] ^= 1;
            let p = MigrationPackage::from_bytes(b).unwrap();
            assert_eq!(open_package(&p, &key), Err(refused(why::NO_DECRYPT)), "byte {i}");
        }
    }

    #[test]
    fn a_destination_key_refuses_other_hashes_lengths_and_short_keys() {
        let (pair, spki) = DestinationKeyPair::generate(2048).unwrap();
        let wrapped = wrap_data_key(&spki, OaepHash::Sha256, &[9; 32]).unwrap();
        assert_eq!(pair.unwrap(OaepHash::Sha1, &wrapped).map(|_| ()), Err(refused(why::KEY_UNWRAP)));
        let (pair, _) = DestinationKeyPair::generate(2048).unwrap();
        assert_eq!(pair.unwrap(OaepHash::Sha256, &[1; 10]).map(|_| ()), Err(refused(why::KEY_UNWRAP)));
        // A 16-byte key is not the AES-256 data key.
        let (pair, spki) = DestinationKeyPair::generate(2048).unwrap();
        let short = wrap_data_key(&spki, OaepHash::Sha256, &[9; 16]).unwrap();
        assert_eq!(pair.unwrap(OaepHash::Sha256, &short).map(|_| ()), Err(refused(why::KEY_UNWRAP)));
    }

    #[test]
    fn wrap_keys_must_be_rsa_of_sane_size() {
        assert_eq!(wrap_data_key(b"not der", OaepHash::Sha1, &[0; 32]), Err(refused(why::WRAP_KEY)));
        let small = RsaPrivateKey::new(&mut OsRng, 1024).unwrap();
        let spki = small.to_public_key().to_public_key_der().unwrap();
        assert_eq!(wrap_data_key(spki.as_bytes(), OaepHash::Sha1, &[0; 32]), Err(refused(why::WRAP_KEY)));
        assert!(DestinationKeyPair::generate(1024).is_err());
    }

    #[test]
    fn the_untrusted_tail_moves_out_whole_and_alone() -> Result<()> {
        // Long state after a short secret part, a short one after a long part, and none.
        for (secret_len, state_len) in [(7usize, 4096usize), (300, 5), (40, 0)] {
            let state: Vec<u8> = (0u8..251).cycle().take(state_len).collect();
            let mut buf = vec![0xA5u8; secret_len];
            buf.extend_from_slice(&state);
            buf.extend_from_slice(&[0x11; TAG_LEN]);
            buf.truncate(secret_len + state_len);
            assert_eq!(untrusted_tail(Zeroizing::new(buf), secret_len)?, state);
        }
        assert!(untrusted_tail(Zeroizing::new(vec![1, 2, 3]), 4).is_err());
        Ok(())
    }
}
