//! Provisioning tenant secrets in wrapped form.
//!
//! Until attested provisioning exists, a tenant secret (PSK or private key) enters the
//! enclave as a blob AEAD-encrypted under the instance's [`crate::ProvisioningKey`]. The
//! untrusted side carries the blob and never sees the secret.
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

use crate::api::alg::{Cipher, SecretKind, Suite};
use crate::api::esp::EspSaParams;
use crate::api::handle::TenantId;
use crate::api::report::ProvisioningKey;
use crate::error::{Error, Result};
use zeroize::Zeroizing;

/// Bytes of an ESP SA keys secret before the keys.
pub const ESP_KEYS_HEADER_LEN: usize = 14;
/// The direction octet of an inbound SA's keys.
pub const ESP_KEYS_INBOUND: u8 = 1;
/// The direction octet of an outbound SA's keys.
pub const ESP_KEYS_OUTBOUND: u8 = 2;

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
    crate::trusted::seal::wrap_provisioning(&key.0, tenant, kind, secret)
}

/// Sealed blobs (clear-and-seal of SK_d, and IKE SA state for restarts): their format, and
/// what the counter protects.
///
/// Format v1 (integers big-endian):
///
/// ```text
/// 0   "CLSB"   magic
/// 4   1        version
/// 5   kind     1: SK_d (clear_and_seal); 2: IKE SA state (ike_sa_seal_state)
/// 6   prf      u16 IANA PRF ID of the IKE SA
/// 8   counter  u64 version counter (also readable by the store: SealedBlob::counter)
/// 16  tenant   u32
/// 20  SPIi     u64 of the IKE SA
/// 28  SPIr     u64
/// 36  nonce    12 random bytes
/// 48  ct||tag  AES-256-GCM(sealing key, nonce, AAD = bytes 0..36, body)
/// ```
///
/// The body of kind 1 is SK_d. The body of kind 2 is role (u8), cipher ID and key bits
/// (u16 each), integrity ID (u16, 0 for AEADs), the counter of the SA's SK_d blob (u64),
/// then SK_ai, SK_ar, SK_ei, SK_er, each after a one-byte length. A state blob is accepted
/// by `ike_sa_restore` in any instance of the same tenant whose trusted minimum it meets.
///
/// The sealing key is HMAC-SHA-256(provisioning key, "cloister-seal-key-v1" || tenant).
///
/// **Counter.** Each seal takes the next value of an instance-wide counter that starts at
/// the configured trusted minimum. The enclave records, per IKE SA, the counter of its
/// latest seal and accepts only that blob; it also refuses any blob below the trusted
/// minimum.
///
/// *Protected:* while the instance runs, a stored blob cannot be swapped for an older one
/// of the same SA, for another SA's or another tenant's, or for a forged one; a blob of a
/// deleted SA is useless (there is no SA to use it with). Across a restart, a blob older than
/// the trusted minimum handed to the new instance is refused.
///
/// *Not protected:* across a restart, blobs between the trusted minimum and the last counter
/// actually issued can be replayed by whoever stores them, unless whoever starts the enclave
/// keeps the minimum current (the control node in its replicated store behind an attested
/// channel, or an HSM/monotonic-counter service later). No SGX platform services are used.
/// The store can always withhold or delete blobs (denial of service is out of scope).
pub mod seal_format {}
