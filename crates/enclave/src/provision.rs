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
//! 6   0 0      reserved
//! 8   tenant   u32: the blob opens only in this tenant's enclave
//! 12  nonce    12 random bytes
//! 24  ct||tag  AES-256-GCM(provisioning key, nonce, AAD = bytes 0..12, secret)
//! ```
//!
//! Private keys must pass a pairwise-consistency check (sign, verify) before they are kept.

use crate::api::alg::SecretKind;
use crate::api::handle::TenantId;
use crate::api::report::ProvisioningKey;
use crate::error::Result;

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
