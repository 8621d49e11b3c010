//! The tenant's side of provisioning (or its provisioning tool's): sealing a secret to an
//! enclave's verified offer ([`seal_to_offer`], signed with a [`TenantSigner`] where the
//! tenant signs), wrapping one under the provisioning key ([`wrap_secret`],
//! [`wrap_esp_sa_keys`]), and the checks a configuration service runs on an offer
//! ([`verify_offer`]). The formats, and what each protects, are
//! `cloister_enclave_api::provision`'s (re-exported here); the enclave's side is behind
//! `Enclave::provision_attested`, `provision_secret` and `esp_sa_install_wrapped`.

use crate::evidence::{self as attest, EvidenceKind, Measurement};
use enclave_api::alg::{Cipher, SecretKind, Suite};
use enclave_api::error::{Error, Result};
use enclave_api::esp::EspSaParams;
use enclave_api::handle::TenantId;
pub use enclave_api::provision::*;
use enclave_api::report::ProvisioningKey;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::EcdsaKeyPair;
use zeroize::Zeroizing;

const TAG_LEN: usize = 16;

/// The report data an offer's evidence carries: SHA-512("cloister-provision-offer-v1" ||
/// tenant u32 || public key || challenge).
pub fn offer_report_data(tenant: TenantId, public_key: &[u8; 32], challenge: &[u8; 16]) -> [u8; 64] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(b"cloister-provision-offer-v1");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(public_key);
    ctx.update(challenge);
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// A tenant's provisioning signer: the ECDSA P-256 key with which the tenant signs its
/// envelopes, so that an enclave whose measured configuration names the public key
/// ([`crate::EnclaveConfig::tenant_signers`]) takes secrets from the tenant only. The
/// tenant's side; the private key never goes near the gateway.
pub struct TenantSigner {
    pair: ring::signature::EcdsaKeyPair,
}

impl TenantSigner {
    /// A fresh signer's private key, PKCS#8 (store it 0600 where the tenant provisions).
    pub fn generate() -> Result<Zeroizing<Vec<u8>>> {
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|_| Error::Random)?;
        Ok(Zeroizing::new(pkcs8.as_ref().to_vec()))
    }

    /// The signer of a PKCS#8 ECDSA P-256 private key ([`Self::generate`]'s).
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Self> {
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng)
            .map_err(|_| Error::BadPrivateKey { why: "not a PKCS#8 ECDSA P-256 private key" })?;
        Ok(Self { pair })
    }

    /// Its public key as the enclave's configuration names it: uncompressed SEC1, 65 bytes.
    pub fn public_key(&self) -> &[u8] {
        ring::signature::KeyPair::public_key(&self.pair).as_ref()
    }
}

impl core::fmt::Debug for TenantSigner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TenantSigner")
            .field("public_key_len", &self.public_key().len())
            .finish_non_exhaustive()
    }
}

/// Encrypts `secret` for `tenant`'s enclave to `offer` (the tenant's side): verifies the
/// offer's evidence against `platform_public_key` and the offer's own fields, insists on
/// the `expected` measurement and on `tenant`, then builds an envelope (module docs) with
/// a fresh X25519 key, signed by `signer` if given (version 2: an enclave that names
/// tenant signers takes only those). `issued_at_unix` is only recorded in it.
#[allow(clippy::too_many_arguments)] // each is one fact the envelope binds
pub fn seal_to_offer(
    offer: &ProvisioningOffer,
    platform_public_key: &[u8],
    expected: &Measurement,
    tenant: TenantId,
    kind: SecretKind,
    secret: &[u8],
    issued_at_unix: u64,
    signer: Option<&TenantSigner>,
) -> Result<Vec<u8>> {
    if kind == SecretKind::EspSaKeys {
        return Err(Error::WrongBlobKind { got: kind, want: "a PSK or private key" });
    }
    verify_offer(offer, platform_public_key, expected, tenant)?;
    let signer = signer.map(|s| &s.pair);
    seal_envelope(&offer.public_key, &offer.challenge, tenant, kind, secret, issued_at_unix, signer)
}

/// Checks an offer's evidence without sealing anything to it: it verifies under
/// `platform_public_key`, binds the offer's key and challenge, names `tenant` and carries
/// the `expected` measurement. A configuration service uses it to release non-secret
/// configuration only to a verified enclave.
pub fn verify_offer(
    offer: &ProvisioningOffer,
    platform_public_key: &[u8],
    expected: &Measurement,
    tenant: TenantId,
) -> Result<()> {
    match offer.evidence.kind {
        EvidenceKind::SoftwareRooted => {}
    }
    // The tenant field as claimed picks the report data; the signature covers both, so a
    // forged field fails verification.
    let claimed = attest::software_evidence_tenant(&offer.evidence.bytes)
        .ok_or(Error::Attestation { why: "evidence too short" })?;
    let rd = offer_report_data(claimed, &offer.public_key, &offer.challenge);
    let purpose = attest::EvidencePurpose::ProvisioningOffer;
    let verified =
        attest::verify_software_evidence(&offer.evidence.bytes, platform_public_key, purpose, &rd)?;
    if verified.tenant != tenant {
        return Err(Error::Provisioning { why: why::WRONG_TENANT });
    }
    if verified.measurement != *expected {
        return Err(Error::MeasurementMismatch {
            expected: Box::new(*expected),
            got: Box::new(verified.measurement),
        });
    }
    Ok(())
}

/// The key-length attribute (bits) of a cipher as the ESP keys header carries it.
const fn key_bits(suite: &Suite) -> u16 {
    match suite.cipher {
        Cipher::AesCbc128 | Cipher::AesGcm16_128 => 128,
        Cipher::AesCbc256 | Cipher::AesGcm16_256 => 256,
        Cipher::ChaCha20Poly1305 => 0,
    }
}

/// Encodes one direction of a static ESP SA's keys as the secret of kind 5 (above), after
/// checking them against `params` (SPI not 0, a consistent suite, the suite's key lengths).
/// `encryption` carries the 4-byte salt after the key for the AEADs (RFC 4106 §8.1);
/// `integrity` is empty for them. `params.esn` is not part of it.
pub fn esp_sa_keys(params: &EspSaParams, encryption: &[u8], integrity: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let suite = params.suite;
    if params.spi == 0 {
        return Err(Error::BadLength { what: "SPI", len: 0, why: "SPI 0 is reserved (RFC 4303 §2.1)" });
    }
    if !suite.is_consistent() {
        let integ = suite.integ.map_or(0, |i| i.id());
        return Err(Error::InconsistentSuite { cipher: suite.cipher.id(), integ });
    }
    let bad = |what, len, why| Error::BadLength { what, len, why };
    if encryption.len() != suite.cipher.keymat_len() {
        let why = "not the transform's key length (AEADs add a 4-byte salt)";
        return Err(bad("ESP encryption key", encryption.len(), why));
    }
    if integrity.len() != suite.integ_key_len() {
        return Err(bad("ESP integrity key", integrity.len(), "not the integrity transform's key length"));
    }
    let direction = if params.inbound { ESP_KEYS_INBOUND } else { ESP_KEYS_OUTBOUND };
    let mut v = Zeroizing::new(Vec::with_capacity(ESP_KEYS_HEADER_LEN + encryption.len() + integrity.len()));
    v.extend_from_slice(&[direction, 0]);
    v.extend_from_slice(&params.spi.to_be_bytes());
    v.extend_from_slice(&suite.cipher.id().to_be_bytes());
    v.extend_from_slice(&key_bits(&suite).to_be_bytes());
    v.extend_from_slice(&suite.integ.map_or(0, |i| i.id()).to_be_bytes());
    // Both lengths are at most 64 (checked against the suite above).
    let len8 = |n: usize| u8::try_from(n).map_err(|_| Error::Internal { what: "ESP keys encoding" });
    v.push(len8(encryption.len())?);
    v.push(len8(integrity.len())?);
    v.extend_from_slice(encryption);
    v.extend_from_slice(integrity);
    Ok(v)
}

/// Wraps one direction of a static ESP SA's keys for `tenant`'s enclave: [`esp_sa_keys`]
/// then [`wrap_secret`]. The tenant's side, like [`wrap_secret`].
pub fn wrap_esp_sa_keys(
    key: &ProvisioningKey,
    tenant: TenantId,
    params: &EspSaParams,
    encryption: &[u8],
    integrity: &[u8],
) -> Result<Vec<u8>> {
    let secret = esp_sa_keys(params, encryption, integrity)?;
    wrap_secret(key, tenant, SecretKind::EspSaKeys, &secret)
}

/// Wraps `secret` for `tenant`'s enclave. This is the **tenant's** side (or its provisioning
/// tool's): it runs where the provisioning key and the plaintext secret already are.
pub fn wrap_secret(
    key: &ProvisioningKey,
    tenant: TenantId,
    kind: SecretKind,
    secret: &[u8],
) -> Result<Vec<u8>> {
    wrap_provisioning(key.expose(), tenant, kind, secret)
}

/// The AES-256-GCM key of an envelope: HKDF-SHA256(salt = challenge, ikm = the X25519
/// shared secret, info = label || offer public key || sender public key || tenant).
#[doc(hidden)]
pub fn envelope_key(
    shared: &[u8],
    challenge: &[u8],
    offer_public: &[u8],
    sender_public: &[u8],
    tenant: TenantId,
) -> Result<LessSafeKey> {
    let tenant = tenant.0.to_be_bytes();
    let info: [&[u8]; 4] = [b"cloister-provision-v1", offer_public, sender_public, &tenant];
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, challenge).extract(shared);
    let okm = prk.expand(&info, &AES_256_GCM).map_err(|_| Error::Internal { what: "envelope key" })?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

/// Builds an envelope to an offer's public key (the tenant's side of [`open_envelope`];
/// the caller has verified the offer's evidence): version 2, signed, with a `signer`.
fn seal_envelope(
    offer_public: &[u8; PUBLIC_LEN],
    challenge: &[u8; CHALLENGE_LEN],
    tenant: TenantId,
    kind: SecretKind,
    secret: &[u8],
    issued_at_unix: u64,
    signer: Option<&EcdsaKeyPair>,
) -> Result<Vec<u8>> {
    if secret.len() > MAX_PROVISIONED_SECRET {
        let why = "longer than any secret the enclave takes";
        return Err(Error::BadLength { what: "provisioned secret", len: secret.len(), why });
    }
    let rng = SystemRandom::new();
    let sender = EphemeralPrivateKey::generate(&X25519, &rng).map_err(|_| Error::Random)?;
    let sender_public =
        sender.compute_public_key().map_err(|_| Error::Internal { what: "envelope public key" })?;
    let mut out = Vec::with_capacity(ENVELOPE_HEADER_LEN + secret.len() + TAG_LEN + ENVELOPE_SIGNATURE_LEN);
    out.extend_from_slice(ENVELOPE_MAGIC);
    let version = if signer.is_some() { SIGNED_ENVELOPE_VERSION } else { ENVELOPE_VERSION };
    out.extend_from_slice(&[version, kind.code(), 0, 0]);
    out.extend_from_slice(&tenant.0.to_be_bytes());
    out.extend_from_slice(challenge);
    out.extend_from_slice(&issued_at_unix.to_be_bytes());
    out.extend_from_slice(sender_public.as_ref());
    let peer = UnparsedPublicKey::new(&X25519, offer_public);
    let mut key = agreement::agree_ephemeral(sender, &peer, |shared| {
        envelope_key(shared, challenge, offer_public, sender_public.as_ref(), tenant)
    })
    .map_err(|_| Error::BadPublicKey { why: "offer public key is not a usable X25519 key" })??;
    let mut body = Zeroizing::new(secret.to_vec());
    let tag = key.seal_in_place_separate_tag(
        Nonce::assume_unique_for_key([0u8; NONCE_LEN]),
        Aad::from(&out[..ENVELOPE_HEADER_LEN]),
        &mut body[..],
    );
    scrub_aead_key(&mut key);
    let tag = tag.map_err(|_| Error::Internal { what: "envelope seal" })?;
    out.extend_from_slice(&body);
    out.extend_from_slice(tag.as_ref());
    if let Some(signer) = signer {
        let signature = signer
            .sign(&rng, &[ENVELOPE_SIGNATURE_LABEL, &out[..]].concat())
            .map_err(|_| Error::Internal { what: "envelope signature" })?;
        out.extend_from_slice(signature.as_ref());
    }
    Ok(out)
}

/// Wraps `secret` under the provisioning key (the wrapped-blob format in the module docs).
fn wrap_provisioning(
    provisioning_key: &[u8; 32],
    tenant: TenantId,
    kind: SecretKind,
    secret: &[u8],
) -> Result<Vec<u8>> {
    let mut key = LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, provisioning_key).map_err(|_| Error::Internal { what: "wrap" })?,
    );
    let mut out = Vec::with_capacity(WRAPPED_HEADER_LEN + NONCE_LEN + secret.len() + TAG_LEN);
    out.extend_from_slice(WRAPPED_MAGIC);
    out.extend_from_slice(&[WRAPPED_VERSION, kind.code(), 0, 0]);
    out.extend_from_slice(&tenant.0.to_be_bytes());
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new().fill(&mut nonce).map_err(|_| Error::Random)?;
    out.extend_from_slice(&nonce);
    let mut body = Zeroizing::new(secret.to_vec());
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&out[..WRAPPED_HEADER_LEN]),
            &mut body[..],
        )
        .map_err(|_| Error::Internal { what: "wrap" })?;
    out.extend_from_slice(&body);
    out.extend_from_slice(tag.as_ref());
    scrub_aead_key(&mut key);
    Ok(out)
}

/// Overwrites a ring AEAD key in place with the schedule of an all-zero key of the same
/// algorithm (ring's keys do not zeroize themselves).
pub fn scrub_aead_key(key: &mut LessSafeKey) {
    let alg = key.algorithm();
    let zeros = [0u8; 32];
    if let Some(z) = zeros.get(..alg.key_len()) {
        if let Ok(k) = UnboundKey::new(alg, z) {
            *key = LessSafeKey::new(k);
            core::hint::black_box(key);
        }
    }
}
