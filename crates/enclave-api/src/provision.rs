//! Provisioning tenant secrets: attested (an envelope only the attested enclave can open)
//! or wrapped (a blob under the symmetric provisioning key the host also holds).
//!
//! This module has the formats; the tenant's tools that make them (every function that
//! takes a plaintext secret) are `cloister_attest::provision`, the enclave's side is behind
//! [`crate::Enclave`]. The untrusted gateway carries offers, envelopes, blobs and sealed
//! blobs, and never sees a secret.
//!
//! # Attested provisioning (EnclaveVPN §4.2)
//!
//! 1. The gateway asks the enclave for an offer ([`crate::Enclave::provisioning_offer`]):
//!    the enclave generates an X25519 key pair and a 16-byte challenge, keeps the private
//!    key (at most 16 offers outstanding, the oldest evicted; each lives
//!    [`OFFER_LIFETIME_SECS`], timed inside the enclave) and returns a
//!    [`ProvisioningOffer`] whose evidence's report data is `offer_report_data`.
//! 2. The tenant verifies the evidence against the platform key it trusts and the
//!    measurement it expects, and encrypts the secret to the offer's key
//!    (`seal_to_offer`), producing an *envelope*.
//! 3. The gateway hands the envelope in ([`crate::Enclave::provision_attested`]). The
//!    enclave opens it with the offer it names, which is consumed by that first attempt
//!    (refused later as "offer already used"), checks the secret as for wrapped blobs, keeps
//!    it, and returns a handle and a sealed blob of kind 3 ([`crate::seal_format`]) from
//!    which a restarted instance of the same tenant recovers the secret
//!    ([`crate::Enclave::unseal_secret`]) without the tenant.
//!
//! What it protects: the secret in transit. Only an enclave whose evidence verifies holds
//! the offer's private key; the gateway sees offer, envelope and sealed blob only. Where the
//! tenant signs (`TenantSigner`, its public keys measured as
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

use crate::attest::{Evidence, EvidenceKind};
use crate::error::{Error, Result};

/// The wrapped blob's magic (module docs, "Wrapped blobs").
pub const WRAPPED_MAGIC: &[u8; 4] = b"CLPV";
/// The wrapped blob format's version.
pub const WRAPPED_VERSION: u8 = 1;
/// Bytes of the wrapped blob's header: magic, version, kind, reserved (2), tenant (4).
pub const WRAPPED_HEADER_LEN: usize = 12;

/// Bytes of an offer's challenge.
pub const CHALLENGE_LEN: usize = 16;
/// Bytes of an offer's X25519 public key.
pub const PUBLIC_LEN: usize = 32;

/// How long the enclave keeps an offer, in seconds, measured inside the enclave.
pub const OFFER_LIFETIME_SECS: u32 = 120;
/// Longest secret an envelope (or a kind-3 sealed blob) carries.
pub const MAX_PROVISIONED_SECRET: usize = 16 * 1024;
/// The envelope's magic.
pub const ENVELOPE_MAGIC: &[u8; 4] = b"CLPE";
/// The envelope format's version, unsigned.
pub const ENVELOPE_VERSION: u8 = 1;
/// The version of an envelope the tenant signed (`TenantSigner`).
pub const SIGNED_ENVELOPE_VERSION: u8 = 2;
/// Bytes of a signed envelope's signature: ECDSA P-256, r ‖ s.
pub const ENVELOPE_SIGNATURE_LEN: usize = 64;
/// What a tenant's envelope signature covers before the envelope's bytes.
pub const ENVELOPE_SIGNATURE_LABEL: &[u8] = b"cloister-provision-envelope-v2";
/// Bytes of the envelope before the ciphertext (all of them authenticated).
pub const ENVELOPE_HEADER_LEN: usize = 68;
/// The offer encoding's magic.
pub const OFFER_MAGIC: &[u8; 4] = b"CLPO";
/// The offer encoding's version.
pub const OFFER_VERSION: u8 = 1;
/// Longest evidence an encoded offer carries.
pub const MAX_OFFER_EVIDENCE: usize = 4096;
const OFFER_HEADER_LEN: usize = 64;

/// The reasons of [`crate::Error::Provisioning`].
pub mod why {
    /// No outstanding offer has the envelope's challenge (never issued, or evicted).
    pub const UNKNOWN_CHALLENGE: &str = "unknown challenge";
    /// The offer outlived [`super::OFFER_LIFETIME_SECS`] before the envelope arrived.
    pub const EXPIRED: &str = "offer expired";
    /// An envelope for this offer was already presented (decrypted or not).
    pub const USED: &str = "offer already used";
    /// Wrong magic, version, reserved bytes, kind, or length.
    pub const MALFORMED: &str = "envelope malformed";
    /// The AEAD tag does not verify: tampered, or encrypted to another key.
    pub const NO_DECRYPT: &str = "does not decrypt";
    /// The envelope or the evidence names another tenant.
    pub const WRONG_TENANT: &str = "wrong tenant";
    /// An encoded offer does not parse.
    pub const OFFER_MALFORMED: &str = "offer malformed";
}

/// An enclave's offer to receive one secret: public data only (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisioningOffer {
    /// Names the offer in the envelope; single use.
    pub challenge: [u8; 16],
    /// The enclave's X25519 public key for this offer.
    pub public_key: [u8; 32],
    /// Evidence whose report data is `offer_report_data` of this offer.
    pub evidence: Evidence,
    /// How long the enclave keeps the offer, in seconds.
    pub lifetime_secs: u32,
}

impl ProvisioningOffer {
    /// The offer as bytes (format in the module docs), e.g. to travel as hex.
    pub fn to_bytes(&self) -> Vec<u8> {
        let kind = match self.evidence.kind {
            EvidenceKind::SoftwareRooted => 1,
        };
        let mut v = Vec::with_capacity(OFFER_HEADER_LEN + self.evidence.bytes.len());
        v.extend_from_slice(OFFER_MAGIC);
        v.extend_from_slice(&[OFFER_VERSION, kind, 0, 0]);
        v.extend_from_slice(&self.lifetime_secs.to_be_bytes());
        v.extend_from_slice(&self.challenge);
        v.extend_from_slice(&self.public_key);
        // Evidence longer than u32::MAX cannot exist; from_bytes refuses anything long anyway.
        v.extend_from_slice(&u32::try_from(self.evidence.bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        v.extend_from_slice(&self.evidence.bytes);
        v
    }

    /// Parses [`Self::to_bytes`]'s output; refuses anything else (trailing bytes too).
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = Error::Provisioning { why: why::OFFER_MALFORMED };
        let h = b.get(..OFFER_HEADER_LEN).ok_or(bad.clone())?;
        if &h[0..4] != OFFER_MAGIC || h[4] != OFFER_VERSION || h[6..8] != [0, 0] {
            return Err(bad);
        }
        let kind = match h[5] {
            1 => EvidenceKind::SoftwareRooted,
            _ => return Err(bad),
        };
        let be32 = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
        let n = usize::try_from(be32(&h[60..64])).map_err(|_| bad.clone())?;
        let evidence = b.get(OFFER_HEADER_LEN..).filter(|e| e.len() == n && n <= MAX_OFFER_EVIDENCE);
        let evidence = evidence.ok_or(bad.clone())?;
        let mut challenge = [0u8; CHALLENGE_LEN];
        challenge.copy_from_slice(&h[12..28]);
        let mut public_key = [0u8; PUBLIC_LEN];
        public_key.copy_from_slice(&h[28..60]);
        Ok(Self {
            challenge,
            public_key,
            evidence: Evidence { kind, bytes: evidence.to_vec() },
            lifetime_secs: be32(&h[8..12]),
        })
    }
}

/// Bytes of an ESP SA keys secret before the keys.
pub const ESP_KEYS_HEADER_LEN: usize = 14;
/// The direction octet of an inbound SA's keys.
pub const ESP_KEYS_INBOUND: u8 = 1;
/// The direction octet of an outbound SA's keys.
pub const ESP_KEYS_OUTBOUND: u8 = 2;

/// Sealed blobs (clear-and-seal of SK_d, IKE SA state and attested tenant secrets, for
/// restarts): their format, and what the counter protects.
///
/// Format v1 (integers big-endian):
///
/// ```text
/// 0   "CLSB"   magic
/// 4   1        version
/// 5   kind     1: SK_d (clear_and_seal); 2: IKE SA state (ike_sa_seal_state);
///              3: tenant secret (provision_attested)
/// 6   prf      u16 IANA PRF ID of the IKE SA (0 for kind 3)
/// 8   counter  u64 version counter (also readable by the store: SealedBlob::counter)
/// 16  tenant   u32
/// 20  SPIi     u64 of the IKE SA (0 for kind 3)
/// 28  SPIr     u64 (0 for kind 3)
/// 36  nonce    12 random bytes
/// 48  ct||tag  AES-256-GCM(sealing key, nonce, AAD = bytes 0..36, body)
/// ```
///
/// The body of kind 1 is SK_d. The body of kind 2 is role (u8), cipher ID and key bits
/// (u16 each), integrity ID (u16, 0 for AEADs), the counter of the SA's SK_d blob (u64),
/// then SK_ai, SK_ar, SK_ei, SK_er, each after a one-byte length. `ike_sa_restore` accepts a
/// state blob in any instance of the same tenant and root while it is the SA's latest
/// (below).
///
/// The body of kind 3 is the secret's kind code ([`crate::SecretKind::code`], 1..=4) then
/// the secret as the envelope carried it. `provision_attested` seals it; `unseal_secret`
/// accepts it in any instance of the same tenant and root while it is the secret's latest
/// blob, as often as asked, and checks the secret again as on provisioning. Kinds are not
/// interchangeable: each call takes only its own.
///
/// The sealing key is HMAC-SHA-256(provisioning key, "cloister-seal-key-v1" || tenant).
///
/// **Counter.** Each seal takes a counter from the platform's ledger ([`crate::ledger`]),
/// which only goes up and outlives every instance, so no two blobs of a tenant on a
/// platform share one. The enclave records, per IKE SA, the counter of its latest SK_d seal
/// and accepts only that blob (a restored SA learns it from its state blob). Kinds 2 and 3
/// are issued *live*: the ledger keeps the counter of each SA's latest state and each
/// secret's latest blob live, and retires it when a newer one is sealed (and an SA's when
/// the SA is deleted); a later instance opens live blobs only (`Rollback` otherwise).
///
/// *Protected:* a stored blob cannot be swapped for an older one of the same SA or secret,
/// for another SA's or another tenant's, or for a forged one, across restarts as while the
/// instance runs, for as long as the platform keeps its ledger.
///
/// *Not protected:* a secret the tenant replaced by provisioning a new one keeps its own
/// blob live (nothing ties the two secrets together). The ledger is the platform's: a
/// software platform's root can edit its file. The store can always withhold or delete
/// blobs (denial of service is out of scope).
pub mod seal_format {}
