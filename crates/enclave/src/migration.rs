//! Enclave state migration: the package a source enclave exports and a destination enclave
//! imports (docs/migration.md, TEEnder §3.5). Everything in this module is public data; the
//! enclave's side is behind [`crate::Enclave::export_state`],
//! [`crate::Enclave::migration_destination_key`] and [`crate::Enclave::import_state`].
//!
//! 1. The source enclave serialises what it holds for its tenant (secrets, IKE SA keys, ESP
//!    SA keys and outbound sequence numbers, the seal counter) together with the caller's
//!    opaque `untrusted_state` (replay windows, IKE SA metadata), encrypts it under a fresh
//!    AES-256-GCM *data key*, and wraps the data key with RSA-OAEP to a public key the caller
//!    names: an HSM key pair's (envelope mode) or, verified beforehand, the destination
//!    enclave's own (the enclave-only baseline).
//! 2. The destination enclave makes an ephemeral RSA key pair and evidence whose report data
//!    is [`destination_report_data`] of its SPKI ([`DestinationKey`]); whoever drives the HSM
//!    verifies it ([`verify_destination`]) before the HSM rewraps the data key to it.
//! 3. The destination opens the data key with that private key (consumed by the first
//!    attempt, whatever its outcome), decrypts, checks tenant and measurement and restores.
//!
//! Package v1 (integers big-endian):
//!
//! ```text
//! 0   "CLMP"       magic
//! 4   1            version
//! 5   oaep         1 = SHA-1 (MGF1-SHA-1), 2 = SHA-256 (MGF1-SHA-256)
//! 6   0 0          reserved
//! 8   tenant       u32
//! 12  measurement  48 bytes, the source enclave's (the destination must have the same)
//! 60  nonce        12 random bytes
//! 72  wrapped_len  u16, 256..=512 (RSA 2048..4096)
//! 74  0 0          reserved
//! 76  body_len     u64, ciphertext and 16-byte tag
//! 84  wrapped      wrapped_len bytes: RSA-OAEP(wrap key, data key), 32-byte data key
//! ..  body         AES-256-GCM(data key, nonce, AAD = every byte before the body, state)
//! ```
//!
//! The state (plaintext) is: `u64` seal counter; `u32` count of secrets, each `u32` old
//! handle, `u8` kind, `u16` length, encoding (PSK or PKCS#8); `u32` count of IKE SAs, each
//! `u32` old handle, `u8` role, `u16` PRF, cipher ID, key bits, integrity ID, `u64` SPIi,
//! SPIr, `u8` flags (1: SK_d resident, 2: SK_p* resident, 4: SK_d sealed, 8: IKE_SA_INIT
//! transcript, only with 2), `u64` seal counter of SK_d, then SK_ai, SK_ar, SK_ei, SK_er,
//! \[SK_d\], \[SK_pi, SK_pr\], \[the SHA-256 digests of KEi, KEr, Ni, Nr\], each after a
//! `u8` length; `u32` count of ESP SA directions, each `u32` old handle, `u32` SPI, `u8`
//! direction (0 outbound, 1 inbound: the destination applies its own measured inbound mode,
//! which is the source's, the measurements being equal), `u8` ESN, `u16` cipher ID, key
//! bits, integrity ID, `u64` the sequence number the destination starts above (outbound; 0
//! inbound), then the encryption key (with the AEAD salt) and the integrity key, each after
//! a `u8` length; last, `u64` length and the untrusted state. Nothing may follow.
//!
//! Refusals are [`crate::Error::Migration`] with a reason from [`why`], or
//! [`crate::Error::MeasurementMismatch`] when the package comes from another measurement.
//!
//! **Outbound sequence numbers.** An AEAD SA's IV is its sequence number, so the source and
//! the destination must never both send one number. Exporting caps each outbound SA of the
//! source at its last sequence number plus [`SEQ_MARGIN`] (the source keeps serving within
//! that range until the destination takes over); the destination starts above the cap. An
//! outbound SA exported once is not exported again (two destinations would overlap): rekey
//! it first. The untrusted state cannot move this: the enclave carries the numbers itself.
//!
//! **Backup packages.** [`crate::Enclave::export_secrets`] writes a package of this same
//! format whose state has zero IKE SAs and zero ESP SAs: the seal counter, every secret and
//! the untrusted state. Carrying no SA, it caps nothing and is allowed after an export: the
//! tenant keeps serving, and SAs restored from a stale copy would repeat AEAD IVs.
//! [`crate::Enclave::import_state`] restores it like any package (recovery of a tenant on a
//! fresh host); [`crate::Enclave::seal_secret`] then seals its secrets for that host.

use crate::api::handle::{EspSaHandle, IkeSaHandle, SecretHandle, TenantId};
use crate::attest::{self, Evidence, Measurement};
use crate::error::{Error, Result};

/// The package's magic.
pub const PACKAGE_MAGIC: &[u8; 4] = b"CLMP";
/// The package format's version.
pub const PACKAGE_VERSION: u8 = 1;
/// Bytes of the package before the wrapped data key.
pub const PACKAGE_HEADER_LEN: usize = 84;
/// Bytes of the data key (AES-256).
pub const DATA_KEY_LEN: usize = 32;
/// Bytes of the AEAD tag at the end of the body.
pub const TAG_LEN: usize = 16;
/// How far past its last outbound sequence number the source may still send after export.
pub const SEQ_MARGIN: u64 = 1 << 20;
/// Modulus size of the destination's key pair unless the caller asks for another.
pub const DEFAULT_DESTINATION_BITS: usize = 3072;
/// Smallest RSA modulus accepted for wrapping (NIST SP 800-57: 112-bit security).
pub const MIN_RSA_BITS: usize = 2048;
/// Largest RSA modulus accepted (bounds the work an input can cause).
pub const MAX_RSA_BITS: usize = 4096;
/// Longest untrusted state a package carries (bounds the enclave's allocation).
pub const MAX_UNTRUSTED_STATE: usize = 1 << 30;
/// Longest package a process enclave stages for an import: the untrusted state's limit plus
/// room for the trusted state, which the tables bound (65,535 entries each; a secret's
/// encoding is a few KiB at most, an SA's a few hundred bytes: well under 512 MiB in all).
pub const MAX_PACKAGE_LEN: usize = MAX_UNTRUSTED_STATE + (512 << 20);

/// The reasons of [`crate::Error::Migration`].
pub mod why {
    /// Too short for its header, or lengths that do not add up: cut in transit.
    pub const TRUNCATED: &str = "package truncated";
    /// Wrong magic, reserved bytes or OAEP code, or bytes after the body.
    pub const MALFORMED: &str = "package malformed";
    /// A version this enclave does not read.
    pub const VERSION: &str = "unsupported package version";
    /// The package names another tenant than this enclave's.
    pub const WRONG_TENANT: &str = "package is for another tenant";
    /// The wrapped data key does not open with this enclave's destination key.
    pub const KEY_UNWRAP: &str = "wrapped data key does not open";
    /// The body does not authenticate under the data key: tampered, or another package.
    pub const NO_DECRYPT: &str = "package does not authenticate";
    /// The decrypted state does not parse (a source bug: it authenticated).
    pub const STATE_MALFORMED: &str = "package state malformed";
    /// No destination key is outstanding (never made, or consumed by an earlier import).
    pub const NO_DESTINATION_KEY: &str = "no destination key outstanding";
    /// The wrapping key is not an RSA SubjectPublicKeyInfo of 2048..=4096 bits.
    pub const WRAP_KEY: &str = "wrapping key is not an acceptable RSA public key";
    /// An outbound ESP SA was already exported once; rekey it before migrating again.
    pub const ALREADY_EXPORTED: &str = "outbound ESP SA already exported";
    /// The untrusted state is larger than [`super::MAX_UNTRUSTED_STATE`] (or, announced to
    /// a process enclave, a package larger than [`super::MAX_PACKAGE_LEN`] or than it can
    /// allocate).
    pub const TOO_LARGE: &str = "untrusted state too large";
    /// The enclave's tables cannot take the package's state.
    pub const NO_ROOM: &str = "not enough room for the package's state";
    /// A chunked export or import of the process backend went out of sequence: a piece at
    /// another offset than the next, past the announced total, without a start, or a finish
    /// of the other kind or before the untrusted state was complete.
    pub const CHUNK_SEQUENCE: &str = "chunked migration call out of sequence";
}

/// The RSA-OAEP hash (and MGF1 hash) of the data key's wrapping; it must be the HSM's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OaepHash {
    /// SHA-1: for HSMs that support nothing else (SoftHSM2 2.6). OAEP's security does not
    /// rest on collision resistance, so this is still sound.
    Sha1,
    /// SHA-256.
    #[default]
    Sha256,
}

impl OaepHash {
    /// The package's code for it.
    pub const fn code(self) -> u8 {
        match self {
            Self::Sha1 => 1,
            Self::Sha256 => 2,
        }
    }

    /// The hash of a package code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Sha1),
            2 => Some(Self::Sha256),
            _ => None,
        }
    }
}

/// An exported package (format in the module docs): ciphertext and a wrapped key only.
#[derive(Clone, PartialEq, Eq)]
pub struct MigrationPackage {
    bytes: Vec<u8>,
    wrapped_len: usize,
}

impl core::fmt::Debug for MigrationPackage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MigrationPackage")
            .field("tenant", &self.tenant())
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

fn refused(why: &'static str) -> Error {
    Error::Migration { why }
}

impl MigrationPackage {
    /// Parses a package's header and checks that its lengths add up; the body is checked
    /// only by the destination enclave (it is authenticated there).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let h = bytes.get(..PACKAGE_HEADER_LEN).ok_or(refused(why::TRUNCATED))?;
        if &h[0..4] != PACKAGE_MAGIC {
            return Err(refused(why::MALFORMED));
        }
        if h[4] != PACKAGE_VERSION {
            return Err(refused(why::VERSION));
        }
        if OaepHash::from_code(h[5]).is_none() || h[6..8] != [0, 0] || h[74..76] != [0, 0] {
            return Err(refused(why::MALFORMED));
        }
        let wrapped_len = usize::from(u16::from_be_bytes([h[72], h[73]]));
        if !(MIN_RSA_BITS / 8..=MAX_RSA_BITS / 8).contains(&wrapped_len) {
            return Err(refused(why::MALFORMED));
        }
        let mut body_len = [0u8; 8];
        body_len.copy_from_slice(&h[76..84]);
        let body_len = usize::try_from(u64::from_be_bytes(body_len)).map_err(|_| refused(why::MALFORMED))?;
        if body_len < TAG_LEN {
            return Err(refused(why::MALFORMED));
        }
        let want = PACKAGE_HEADER_LEN.checked_add(wrapped_len).and_then(|n| n.checked_add(body_len));
        match want {
            Some(n) if n == bytes.len() => Ok(Self { bytes, wrapped_len }),
            Some(n) if n > bytes.len() => Err(refused(why::TRUNCATED)),
            _ => Err(refused(why::MALFORMED)),
        }
    }

    /// The package as bytes, to carry to the destination.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The package as bytes, without a copy.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The tenant it was exported for.
    pub fn tenant(&self) -> TenantId {
        let t = self.bytes.get(8..12).and_then(|b| b.try_into().ok()).map_or(0, u32::from_be_bytes);
        TenantId(t)
    }

    /// The source enclave's measurement; the destination must have the same.
    pub fn measurement(&self) -> Measurement {
        let mut m = [0u8; 48];
        if let Some(b) = self.bytes.get(12..60) {
            m.copy_from_slice(b);
        }
        Measurement(m)
    }

    /// The OAEP hash the data key was wrapped with.
    pub fn oaep_hash(&self) -> OaepHash {
        self.bytes.get(5).and_then(|c| OaepHash::from_code(*c)).unwrap_or_default()
    }

    /// The data key, wrapped to the key named at export (an HSM's, or the destination's).
    pub fn wrapped_data_key(&self) -> &[u8] {
        self.bytes.get(PACKAGE_HEADER_LEN..PACKAGE_HEADER_LEN + self.wrapped_len).unwrap_or(&[])
    }

    /// Everything before the body: the associated data of the AEAD.
    pub(crate) fn aad(&self) -> &[u8] {
        self.bytes.get(..PACKAGE_HEADER_LEN + self.wrapped_len).unwrap_or(&[])
    }

    /// The nonce of the body.
    pub(crate) fn nonce(&self) -> [u8; 12] {
        let mut n = [0u8; 12];
        if let Some(b) = self.bytes.get(60..72) {
            n.copy_from_slice(b);
        }
        n
    }

    /// Ciphertext and tag.
    pub(crate) fn body(&self) -> &[u8] {
        self.bytes.get(PACKAGE_HEADER_LEN + self.wrapped_len..).unwrap_or(&[])
    }

    /// Wraps bytes the trusted core has just produced (their header is its own).
    pub(crate) fn from_trusted(bytes: Vec<u8>) -> Result<Self> {
        Self::from_bytes(bytes).map_err(|_| Error::Internal { what: "migration package encoding" })
    }
}

/// The destination enclave's ephemeral public key for one import, with evidence whose
/// report data is [`destination_report_data`] of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationKey {
    /// RSA public key, DER SubjectPublicKeyInfo (rsaEncryption).
    pub spki_der: Vec<u8>,
    /// Evidence binding the key to the destination's measurement and tenant.
    pub evidence: Evidence,
}

/// What an import brought back: for each handle of the source, the handle of the same
/// secret or SA here (the gateway rewrites its state with these), and the untrusted state.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct MigrationRestore {
    /// Secrets, (source handle, new handle).
    pub secrets: Vec<(SecretHandle, SecretHandle)>,
    /// IKE SAs, (source handle, new handle).
    pub ike_sas: Vec<(IkeSaHandle, IkeSaHandle)>,
    /// ESP SA directions, (source handle, new handle).
    pub esp_sas: Vec<(EspSaHandle, EspSaHandle)>,
    /// The source gateway's untrusted state, as it handed it in.
    pub untrusted_state: Vec<u8>,
}

impl core::fmt::Debug for MigrationRestore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MigrationRestore")
            .field("secrets", &self.secrets.len())
            .field("ike_sas", &self.ike_sas.len())
            .field("esp_sas", &self.esp_sas.len())
            .field("untrusted_state_len", &self.untrusted_state.len())
            .finish()
    }
}

/// The report data of a destination key's evidence: SHA-512("cloister-migration-destination-v1"
/// || tenant u32 || SPKI).
pub fn destination_report_data(tenant: TenantId, spki_der: &[u8]) -> [u8; 64] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(b"cloister-migration-destination-v1");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(spki_der);
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// The report data of the evidence over a package this enclave exported
/// ([`crate::Enclave::export_evidence`]): SHA-512("cloister-export-v1" || tenant u32 ||
/// SHA-256(package) || SHA-256(bound_to)), where `bound_to` names whom the package is for
/// (a destination enclave's SPKI, or a backup key's label). The purpose in the evidence
/// tells a move ([`crate::attest::EvidencePurpose::MigrationSource`]) from a backup.
pub fn export_report_data(tenant: TenantId, package: &[u8], bound_to: &[u8]) -> [u8; 64] {
    export_report_data_of(tenant, &package_digest(package), bound_to)
}

/// SHA-256 of a package's bytes.
pub(crate) fn package_digest(package: &[u8]) -> [u8; 32] {
    let mut d = [0u8; 32];
    d.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, package).as_ref());
    d
}

/// [`export_report_data`] from the package's digest.
pub(crate) fn export_report_data_of(
    tenant: TenantId,
    package_digest: &[u8; 32],
    bound_to: &[u8],
) -> [u8; 64] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(b"cloister-export-v1");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(package_digest);
    ctx.update(ring::digest::digest(&ring::digest::SHA256, bound_to).as_ref());
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// The source side's check of a destination key before anything is wrapped to it: the
/// evidence verifies under `platform_public_key`, binds this SPKI, and names `tenant` and
/// the `expected` measurement.
pub fn verify_destination(
    key: &DestinationKey,
    platform_public_key: &[u8],
    expected: &Measurement,
    tenant: TenantId,
) -> Result<()> {
    let rd = destination_report_data(tenant, &key.spki_der);
    let purpose = attest::EvidencePurpose::MigrationDestination;
    let verified = attest::verify_software_evidence(&key.evidence.bytes, platform_public_key, purpose, &rd)?;
    if verified.tenant != tenant {
        return Err(refused(why::WRONG_TENANT));
    }
    if verified.measurement != *expected {
        return Err(Error::MeasurementMismatch {
            expected: Box::new(*expected),
            got: Box::new(verified.measurement),
        });
    }
    Ok(())
}
