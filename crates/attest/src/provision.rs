//! Provisioning tenant secrets: attested (an envelope only the attested enclave can open)
//! or wrapped (a blob under the symmetric provisioning key the host also holds).
//!
//! Every function here that takes a plaintext secret is the **tenant's** side (or its
//! provisioning tool's); the enclave's side is behind [`crate::Enclave`]. The untrusted
//! gateway carries offers, envelopes, blobs and sealed blobs, and never sees a secret.
//!
//! # Attested provisioning (EnclaveVPN §4.2)
//!
//! 1. The gateway asks the enclave for an offer ([`crate::Enclave::provisioning_offer`]):
//!    the enclave generates an X25519 key pair and a 16-byte challenge, keeps the private
//!    key (at most 16 offers outstanding, the oldest evicted; each lives
//!    [`OFFER_LIFETIME_SECS`], timed inside the enclave) and returns a
//!    [`ProvisioningOffer`] whose evidence's report data is [`offer_report_data`].
//! 2. The tenant verifies the evidence against the platform key it trusts and the
//!    measurement it expects, and encrypts the secret to the offer's key
//!    ([`seal_to_offer`]), producing an *envelope*.
//! 3. The gateway hands the envelope in ([`crate::Enclave::provision_attested`]). The
//!    enclave opens it with the offer it names, which is consumed by that first attempt
//!    (refused later as "offer already used"), checks the secret as for wrapped blobs, keeps
//!    it, and returns a handle and a sealed blob of kind 3 ([`crate::seal_format`]) from
//!    which a restarted instance of the same tenant recovers the secret
//!    ([`crate::Enclave::unseal_secret`]) without the tenant.
//!
//! What it protects: the secret in transit. Only an enclave whose evidence verifies holds
//! the offer's private key; the gateway sees offer, envelope and sealed blob only. Where the
//! tenant signs ([`TenantSigner`], its public keys measured as
//! [`crate::EnclaveConfig::tenant_signers`]), only envelopes it signed go in (version 2,
//! below), and no wrapped blob does. What it does not: without a signer, the gateway can
//! provision secrets of its own choosing (as it can with the wrapping key); the sealed blob
//! is only as safe as the instance's root key, which the gateway still hands in at start;
//! and software-rooted evidence is only as safe as the platform key, which root can read
//! (see docs/threat-model.md).
//!
//! Offer, as bytes ([`ProvisioningOffer::to_bytes`]; integers big-endian):
//!
//! ```text
//! 0   "CLPO"     magic
//! 4   1          version
//! 5   1          evidence kind: software-rooted
//! 6   0 0        reserved
//! 8   lifetime   u32 seconds the enclave keeps the offer
//! 12  challenge  16 bytes
//! 28  public key 32 bytes, X25519
//! 60  n          u32 evidence length (at most 4096)
//! 64  evidence   n bytes ([`crate::attest`]); report data = offer_report_data(...)
//! ```
//!
//! Envelope v1 (integers big-endian):
//!
//! ```text
//! 0   "CLPE"     magic
//! 4   1          version
//! 5   kind       SecretKind::code (1..=4; 5, ESP SA keys, is refused)
//! 6   0 0        reserved
//! 8   tenant     u32
//! 12  challenge  16 bytes, the offer's
//! 28  issued_at  u64 unix seconds (informational, for logs: freshness comes from the
//!                single-use challenge and the enclave-side offer lifetime)
//! 36  sender     32 bytes, the tenant's ephemeral X25519 public key
//! 68  ct||tag    AES-256-GCM, key = HKDF-SHA256(salt = challenge,
//!                  ikm = X25519(sender private, offer public),
//!                  info = "cloister-provision-v1" || offer public key || sender public key
//!                         || tenant u32), 32 bytes
//!                nonce = 12 zero bytes (the key encrypts this one message),
//!                AAD = bytes 0..68; plaintext = the secret (at most 16 KiB)
//! ```
//!
//! Envelope v2, signed by the tenant: v1 with version 2, then 64 bytes, the tenant signer's
//! ECDSA P-256 signature (r ‖ s, SHA-256) over [`ENVELOPE_SIGNATURE_LABEL`] ‖ every byte
//! before it. An enclave that names tenant signers takes only v2 envelopes whose signature
//! verifies under one of them, checked before the offer is spent; one that names none
//! takes only v1. The version is under the AEAD, so neither converts into the other.
//!
//! Refusals are [`crate::Error::Provisioning`] with a reason from [`why`], or the kind's
//! own checks (below).
//!
//! # Wrapped blobs
//!
//! A tenant secret (PSK or private key) may also enter the enclave as a blob AEAD-encrypted
//! under the instance's [`crate::ProvisioningKey`], which the host holds too.
//!
//! Format v1 (integers big-endian):
//!
//! ```text
//! 0   "CLPV"   magic
//! 4   1        version
//! 5   kind     1 = pre-shared key (raw bytes, 1..=1024)
//!              2 = RSA private key (PKCS#8 DER, 2048..8192 bits)
//!              3 = ECDSA P-256 private key (PKCS#8 DER, with the public key)
//!              4 = ECDSA P-384 private key (PKCS#8 DER, with the public key)
//!              5 = one direction of a static ESP SA's keys (below)
//! 6   0 0      reserved
//! 8   tenant   u32: the blob opens only in this tenant's enclave
//! 12  nonce    12 random bytes
//! 24  ct||tag  AES-256-GCM(provisioning key, nonce, AAD = bytes 0..12, secret)
//! ```
//!
//! Private keys must pass a pairwise-consistency check (sign, verify) before they are kept.
//!
//! # ESP SA keys (kind 5)
//!
//! Static ESP SAs (configured, not negotiated by IKE) get their keys this way in production
//! builds: the tenant wraps each direction's keys, the gateway's configuration holds only the
//! blob, and [`crate::Enclave::esp_sa_install_wrapped`] opens it straight into the SA. The
//! secret binds the keys to the SA's direction (as the gateway sees it), SPI and transform,
//! so the untrusted side cannot install them as another SA (an inbound SA's keys as an
//! outbound one would repeat the peer's AEAD nonces). Integers big-endian:
//!
//! ```text
//! 0   direction u8   1 = inbound (the gateway receives with it), 2 = outbound (it sends)
//! 1   0              reserved
//! 2   spi       u32  never 0
//! 6   cipher    u16  IANA transform ID: 12 AES-CBC, 20 AES-GCM-16, 28 ChaCha20-Poly1305
//! 8   key bits  u16  128 or 256 (AES); 0 for ChaCha20-Poly1305
//! 10  integrity u16  IANA ID: 12 HMAC-SHA2-256-128, 13 -384-192, 14 -512-256; 0 for AEADs
//! 12  enc_len   u8   encryption key bytes: the AES key (CBC), key || 4-byte salt (AEADs)
//! 13  int_len   u8   integrity key bytes (32, 48, 64; 0 for AEADs)
//! 14  encryption key, then integrity key; nothing after them
//! ```
//!
//! The enclave checks every field and both lengths against the transform of the SA asked
//! for. ESN is not bound (the keys do not depend on it).

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
