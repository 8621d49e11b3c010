//! Enclave state migration: the package a source enclave exports and a destination enclave
//! imports (docs/migration.md, TEEnder §3.5). Everything in this module is public data; the
//! enclave's side is behind [`crate::Enclave::export_state`],
//! [`crate::Enclave::migration_destination_key`] and [`crate::Enclave::import_state`].
//!
//! 1. The destination enclave makes an ephemeral RSA key pair and evidence whose report data
//!    is `cloister_attest::migration::destination_report_data` of its SPKI ([`DestinationKey`]).
//! 2. The source enclave checks that evidence itself ([`crate::Enclave::export_state`]): it
//!    verifies under one of the platform keys of its measured configuration
//!    ([`crate::EnclaveConfig::trusted_platforms`]), for this purpose, this tenant and this
//!    enclave's own measurement. Only then does it serialise what it holds (secrets, IKE SA
//!    keys, ESP SA keys and outbound sequence numbers, the seal counter) together with the
//!    caller's opaque `untrusted_state` (replay windows, IKE SA metadata), encrypt it under a
//!    fresh AES-256-GCM *data key*, and sign the package with its own evidence.
//! 3. The data key is split in *shares*: one wrapped with RSA-OAEP to the verified
//!    destination key, and in envelope mode one wrapped to an HSM one-time key, which the HSM
//!    rewraps to the destination key after its own checks. The data key is
//!    SHA-256("cloister-package-key-v2" || HSM share || destination share) of the shares
//!    present: a key the caller names (the HSM's) adds a condition, never a way around the
//!    verified destination.
//! 4. The destination enclave ([`crate::Enclave::import_state`]), fresh and holding nothing
//!    yet, checks the source's evidence at the end of the package against its own trusted
//!    platforms, tenant, measurement and destination key, opens the shares with that key
//!    (consumed by the attempt, whatever its outcome), decrypts and restores.
//!
//! A backup ([`crate::Enclave::export_secrets`]) has one share, wrapped to an HSM backup key,
//! and evidence of purpose `Backup`; it is restored the same way, the HSM rewrapping the
//! share to a fresh destination enclave's key.
//!
//! Package v2 (integers big-endian):
//!
//! ```text
//! 0   "CLMP"       magic
//! 4   2            version
//! 5   oaep         1 = SHA-1 (MGF1-SHA-1), 2 = SHA-256 (MGF1-SHA-256)
//! 6   kind         1 = a move (destination share required), 2 = a backup (HSM share only)
//! 7   0            reserved
//! 8   tenant       u32
//! 12  measurement  48 bytes, the source enclave's (the destination must have the same)
//! 60  nonce        12 random bytes
//! 72  hsm_len      u16, 0 or 256..=512 (RSA 2048..4096)
//! 74  dst_len      u16, 0 or 256..=512
//! 76  body_len     u64, ciphertext and 16-byte tag
//! 84  hsm share    hsm_len bytes: RSA-OAEP(HSM key, 32-byte share)
//! ..  dst share    dst_len bytes: RSA-OAEP(destination key, 32-byte share)
//! ..  body         AES-256-GCM(data key, nonce, AAD = every byte before the body, state)
//! ..  ev_len       u16, then the source enclave's evidence over
//!                  [`export_report_data`] of the header, the shares and the body's tag,
//!                  bound to the destination's SPKI (a move) or to nothing (a backup)
//! ```
//!
//! The evidence covers the body through its AES-GCM tag: the body authenticates under the
//! data key, which only the source chose and only holders of the shares it signed derive,
//! so no other body has that tag. Hashing the tag instead of the ciphertext keeps a package
//! of hundreds of MB from costing two more passes over it.
//!
//! The state (plaintext) is: `u64` seal counter; `u32` count of secrets, each `u32` old
//! handle, `u8` kind, `u16` length, encoding (PSK or PKCS#8); `u32` count of IKE SAs, each
//! `u32` old handle, `u8` role, `u16` PRF, cipher ID, key bits, integrity ID, `u64` SPIi,
//! SPIr, `u8` flags (1: SK_d resident, 2: SK_p* resident, 4: SK_d sealed, 8: IKE_SA_INIT
//! transcript, only with 2, 16: the peer authenticated, always with 4, 32: our AUTH computed,
//! only with 2), `u64` seal counter of SK_d, then SK_ai, SK_ar, SK_ei, SK_er,
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

use crate::attest::{self, Evidence, Measurement};
use crate::error::{Error, Result};
use crate::handle::{EspSaHandle, IkeSaHandle, SecretHandle, TenantId};

/// The package's magic.
pub const PACKAGE_MAGIC: &[u8; 4] = b"CLMP";
/// The package format's version.
pub const PACKAGE_VERSION: u8 = 2;
/// Bytes of the package before the wrapped shares.
pub const PACKAGE_HEADER_LEN: usize = 84;
/// Longest source evidence a package carries.
pub const MAX_EVIDENCE_LEN: usize = 1024;
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
    /// A wrapped share does not open with this enclave's destination key.
    pub const KEY_UNWRAP: &str = "wrapped share does not open";
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
    /// The shares do not fit the package's kind: a move without a destination share, a
    /// backup with one or without an HSM share, or an HSM share missing at import.
    pub const SHARES: &str = "package shares do not fit its kind";
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

/// What a package carries: a move (every SA) or a backup (secrets only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageKind {
    /// [`crate::Enclave::export_state`]: to a verified destination enclave.
    Move,
    /// [`crate::Enclave::export_secrets`]: to an HSM backup key.
    Backup,
}

impl PackageKind {
    /// The package's code for it.
    pub const fn code(self) -> u8 {
        match self {
            Self::Move => 1,
            Self::Backup => 2,
        }
    }

    /// The kind of a package code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Move),
            2 => Some(Self::Backup),
            _ => None,
        }
    }

    /// The purpose of the source's evidence over a package of this kind.
    pub const fn purpose(self) -> attest::EvidencePurpose {
        match self {
            Self::Move => attest::EvidencePurpose::MigrationSource,
            Self::Backup => attest::EvidencePurpose::Backup,
        }
    }
}

/// An exported package (format in the module docs): ciphertext, wrapped shares and the
/// source's evidence only.
#[derive(Clone, PartialEq, Eq)]
pub struct MigrationPackage {
    bytes: Vec<u8>,
    hsm_len: usize,
    dst_len: usize,
    /// Where the evidence's length starts: the end of what the evidence covers.
    signed_len: usize,
}

impl core::fmt::Debug for MigrationPackage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MigrationPackage")
            .field("tenant", &self.tenant())
            .field("kind", &self.kind())
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

fn refused(why: &'static str) -> Error {
    Error::Migration { why }
}

/// A share's length field: none, or an RSA 2048..=4096 ciphertext.
fn share_len(h: &[u8], at: usize) -> Result<usize> {
    let n = usize::from(u16::from_be_bytes([h[at], h[at + 1]]));
    if n == 0 || (MIN_RSA_BITS / 8..=MAX_RSA_BITS / 8).contains(&n) {
        Ok(n)
    } else {
        Err(refused(why::MALFORMED))
    }
}

impl MigrationPackage {
    /// Parses a package's header and checks that its lengths add up and its shares fit its
    /// kind; the body and the evidence are checked only by the destination enclave.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let h = bytes.get(..PACKAGE_HEADER_LEN).ok_or(refused(why::TRUNCATED))?;
        if &h[0..4] != PACKAGE_MAGIC {
            return Err(refused(why::MALFORMED));
        }
        if h[4] != PACKAGE_VERSION {
            return Err(refused(why::VERSION));
        }
        let kind = PackageKind::from_code(h[6]).ok_or(refused(why::MALFORMED))?;
        if OaepHash::from_code(h[5]).is_none() || h[7] != 0 {
            return Err(refused(why::MALFORMED));
        }
        let (hsm_len, dst_len) = (share_len(h, 72)?, share_len(h, 74)?);
        let fits = match kind {
            PackageKind::Move => dst_len > 0,
            PackageKind::Backup => hsm_len > 0 && dst_len == 0,
        };
        if !fits {
            return Err(refused(why::SHARES));
        }
        let mut body_len = [0u8; 8];
        body_len.copy_from_slice(&h[76..84]);
        let body_len = usize::try_from(u64::from_be_bytes(body_len)).map_err(|_| refused(why::MALFORMED))?;
        if body_len < TAG_LEN {
            return Err(refused(why::MALFORMED));
        }
        let signed_len = PACKAGE_HEADER_LEN
            .checked_add(hsm_len + dst_len)
            .and_then(|n| n.checked_add(body_len))
            .ok_or(refused(why::MALFORMED))?;
        let ev_len = match bytes.get(signed_len..signed_len + 2) {
            Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
            None => return Err(refused(why::TRUNCATED)),
        };
        if ev_len == 0 || ev_len > MAX_EVIDENCE_LEN {
            return Err(refused(why::MALFORMED));
        }
        match signed_len + 2 + ev_len {
            n if n == bytes.len() => Ok(Self { bytes, hsm_len, dst_len, signed_len }),
            n if n > bytes.len() => Err(refused(why::TRUNCATED)),
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

    /// A move or a backup.
    pub fn kind(&self) -> PackageKind {
        self.bytes.get(6).and_then(|c| PackageKind::from_code(*c)).unwrap_or(PackageKind::Move)
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

    /// The OAEP hash the shares were wrapped with.
    pub fn oaep_hash(&self) -> OaepHash {
        self.bytes.get(5).and_then(|c| OaepHash::from_code(*c)).unwrap_or_default()
    }

    /// The share wrapped to an HSM key (a move in envelope mode, or a backup): what the HSM
    /// rewraps to the destination enclave's key.
    pub fn hsm_share(&self) -> Option<&[u8]> {
        (self.hsm_len > 0).then(|| self.bytes.get(PACKAGE_HEADER_LEN..PACKAGE_HEADER_LEN + self.hsm_len))?
    }

    /// The share wrapped to the destination enclave's key (a move).
    pub fn destination_share(&self) -> Option<&[u8]> {
        let at = PACKAGE_HEADER_LEN + self.hsm_len;
        (self.dst_len > 0).then(|| self.bytes.get(at..at + self.dst_len))?
    }

    /// The source enclave's evidence over the package.
    pub fn source_evidence(&self) -> &[u8] {
        self.bytes.get(self.signed_len + 2..).unwrap_or(&[])
    }

    /// The body's AES-GCM tag: with [`Self::aad`], what the source's evidence covers.
    pub fn tag(&self) -> &[u8] {
        self.bytes.get(self.signed_len.saturating_sub(TAG_LEN)..self.signed_len).unwrap_or(&[])
    }

    /// Everything before the body (header and shares): the associated data of the AEAD.
    pub fn aad(&self) -> &[u8] {
        self.bytes.get(..PACKAGE_HEADER_LEN + self.hsm_len + self.dst_len).unwrap_or(&[])
    }

    /// The nonce of the body.
    pub fn nonce(&self) -> [u8; 12] {
        let mut n = [0u8; 12];
        if let Some(b) = self.bytes.get(60..72) {
            n.copy_from_slice(b);
        }
        n
    }

    /// Ciphertext and tag.
    pub fn body(&self) -> &[u8] {
        self.bytes.get(PACKAGE_HEADER_LEN + self.hsm_len + self.dst_len..self.signed_len).unwrap_or(&[])
    }

    /// Wraps bytes the trusted core has just produced (their header is its own).
    pub fn from_trusted(bytes: Vec<u8>) -> Result<Self> {
        Self::from_bytes(bytes).map_err(|_| Error::Internal { what: "migration package encoding" })
    }
}

/// The destination enclave's ephemeral public key for one import, with evidence whose
/// report data is `cloister_attest::migration::destination_report_data` of it.
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
