//! Helpers shared by the enclave's integration tests: ESP layouts to hand the enclave.
#![allow(dead_code, clippy::cast_possible_truncation, unreachable_pub)]

/// ESP packet of `inner` at `off`: header, IV, payload with trailer (4-aligned), ICV.
pub fn lay_out(area: &mut [u8], off: usize, inner: &[u8]) -> u32 {
    let (hdr, iv, icv) = (8, 8, 16);
    let payload = (inner.len() + 2).div_ceil(4) * 4;
    let len = hdr + iv + payload + icv;
    let p = &mut area[off..off + len];
    p.fill(0);
    p[hdr + iv..][..inner.len()].copy_from_slice(inner);
    let pad = payload - inner.len() - 2;
    for (k, b) in p[hdr + iv + inner.len()..][..pad].iter_mut().enumerate() {
        *b = k as u8 + 1;
    }
    p[hdr + iv + payload - 2] = pad as u8;
    p[hdr + iv + payload - 1] = 4; // IPv4
    len as u32
}

/// An inner packet of `len` bytes whose pattern depends on `k`.
pub fn inner(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (k * 31 + j) as u8).collect()
}

/// An IKE SA (x25519, HMAC-SHA256, AES-GCM-256) and its first child SA between two
/// enclaves, `a` the initiator: (a's IKE SA, b's IKE SA, a's child SA, b's child SA). Child
/// SPIs 0xc100 (a inbound) and 0xc200 (b inbound). Each side's nonce is its enclave's own;
/// both authenticate with a PSK wrapped under `key`, their provisioning key.
pub fn ike_and_child(
    a: &mut dyn cloister_enclave::Enclave,
    b: &mut dyn cloister_enclave::Enclave,
    key: [u8; 32],
) -> (
    cloister_enclave::IkeSaHandle,
    cloister_enclave::IkeSaHandle,
    cloister_enclave::ChildSaPair,
    cloister_enclave::ChildSaPair,
) {
    let x = exchange(a, b, key);
    (x.ike_a, x.ike_b, x.sa_a, x.sa_b)
}

/// What [`exchange`] made, and the IKE_SA_INIT it made it from.
pub struct Exchange {
    pub ike_a: cloister_enclave::IkeSaHandle,
    pub ike_b: cloister_enclave::IkeSaHandle,
    pub sa_a: cloister_enclave::ChildSaPair,
    pub sa_b: cloister_enclave::ChildSaPair,
    /// IKE_SA_INIT request (a's) and response (b's).
    pub msg1: Vec<u8>,
    pub msg2: Vec<u8>,
    pub ni: Vec<u8>,
    pub nr: Vec<u8>,
    /// The PSK both authenticated with, in a and in b.
    pub psk_a: cloister_enclave::SecretHandle,
    pub psk_b: cloister_enclave::SecretHandle,
    /// The AUTH payloads' data each side computed (once per IKE SA).
    pub auths: enclave_api::testing::PskAuths,
}

impl Exchange {
    /// The AUTH input of the initiator `a` (RealMessage1, Nr), with identity `id`.
    pub fn auth_a<'a>(&'a self, id: &'a [u8]) -> cloister_enclave::AuthInput<'a> {
        cloister_enclave::AuthInput { real_message: &self.msg1, peer_nonce: &self.nr, id_body: id }
    }

    /// The AUTH input of the responder `b` (RealMessage2, Ni).
    pub fn auth_b<'a>(&'a self, id: &'a [u8]) -> cloister_enclave::AuthInput<'a> {
        cloister_enclave::AuthInput { real_message: &self.msg2, peer_nonce: &self.ni, id_body: id }
    }
}

/// As [`ike_and_child`], with the IKE_SA_INIT messages for AUTH and the PSK handles.
pub fn exchange(
    a: &mut dyn cloister_enclave::Enclave,
    b: &mut dyn cloister_enclave::Enclave,
    key: [u8; 32],
) -> Exchange {
    exchange_with_psk(a, b, key, b"test psk")
}

/// As [`exchange`], authenticating with `psk`.
pub fn exchange_with_psk(
    a: &mut dyn cloister_enclave::Enclave,
    b: &mut dyn cloister_enclave::Enclave,
    key: [u8; 32],
    psk: &[u8],
) -> Exchange {
    use cloister_enclave::*;
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let h = enclave_api::testing::ike_sa_init(
        a,
        b,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        suite,
        (0x1111, 0x2222),
    )
    .unwrap();
    let (psk_a, psk_b) = (provision_psk(a, key, psk), provision_psk(b, key, psk));
    let auths = h.authenticate_psk(a, b, psk_a, psk_b).unwrap();
    let (sa_a, sa_b) = h.first_child(a, b, suite, (0xc100, 0xc200)).unwrap();
    let enclave_api::testing::Handshake { ike_a, ike_b, msg1, msg2, ni, nr, .. } = h;
    Exchange { ike_a, ike_b, sa_a, sa_b, msg1, msg2, ni, nr, psk_a, psk_b, auths }
}

/// The PSK [`exchange`]'s peers share, provisioned into `e` (whose provisioning key is `key`).
pub fn psk(e: &mut dyn cloister_enclave::Enclave, key: [u8; 32]) -> cloister_enclave::SecretHandle {
    provision_psk(e, key, b"test psk")
}

/// `psk` wrapped under `key` for `e`'s tenant and provisioned into `e`.
pub fn provision_psk(
    e: &mut dyn cloister_enclave::Enclave,
    key: [u8; 32],
    psk: &[u8],
) -> cloister_enclave::SecretHandle {
    use cloister_enclave::provision::wrap_secret;
    use cloister_enclave::{ProvisioningKey, SecretKind};
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(key), e.tenant(), SecretKind::PreSharedKey, psk).unwrap();
    e.provision_secret(&blob).unwrap()
}

/// One IKE nonce of `e`'s: what our side of an exchange must send and name in derivations.
pub fn nonce(e: &mut (impl cloister_enclave::Enclave + ?Sized)) -> Vec<u8> {
    let mut n = vec![0u8; cloister_enclave::IKE_NONCE_LEN];
    e.ike_nonces(&mut n).unwrap();
    n
}

/// [`enclave_api::testing::sa_init_message`] of an X25519 (group 31) exchange.
pub fn sa_init_message(spi_i: u64, spi_r: u64, initiator: bool, ke: &[u8], nonce: &[u8]) -> Vec<u8> {
    enclave_api::testing::sa_init_message(
        spi_i,
        spi_r,
        initiator,
        cloister_enclave::DhGroup::Curve25519,
        ke,
        nonce,
    )
}

/// The test cluster's platform, made once per test binary: its key (PKCS#8) and public key.
/// Enclaves started on it with it in their `trusted_platforms` move state between them.
pub fn platform() -> &'static (Vec<u8>, Vec<u8>) {
    static PLATFORM: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    PLATFORM.get_or_init(|| {
        let key = cloister_enclave::attest::SoftwareAttestation::generate_platform_key().unwrap().to_vec();
        let public = platform_public(&key);
        (key, public)
    })
}

/// The public key of a platform key (PKCS#8).
pub fn platform_public(key: &[u8]) -> Vec<u8> {
    use cloister_enclave::attest::{CodeIdentity, SoftwareAttestation};
    SoftwareAttestation::new(key, CodeIdentity::Bytes(vec![]), b"").unwrap().platform_public_key().to_vec()
}

/// A fresh backup root key pair (the HSM's in production; software here).
pub fn root_key() -> ring::signature::EcdsaKeyPair {
    use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let rng = ring::rand::SystemRandom::new();
    let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng).unwrap()
}

/// The test cluster's backup root, made once per test binary.
pub fn backup_root() -> &'static ring::signature::EcdsaKeyPair {
    static ROOT: std::sync::OnceLock<ring::signature::EcdsaKeyPair> = std::sync::OnceLock::new();
    ROOT.get_or_init(root_key)
}

/// The backup root's public key, for `EnclaveConfig::backup_roots`.
pub fn backup_root_public() -> Vec<u8> {
    ring::signature::KeyPair::public_key(backup_root()).as_ref().to_vec()
}

/// `root`'s certificate of `spki` as a backup key for enclaves of `m`.
pub fn certify(
    root: &ring::signature::EcdsaKeyPair,
    m: &cloister_enclave::attest::Measurement,
    spki: &[u8],
) -> Vec<u8> {
    let message = cloister_enclave::migration::backup_key_message(m, spki);
    root.sign(&ring::rand::SystemRandom::new(), &message).unwrap().as_ref().to_vec()
}
