//! The one error type of this crate.
//!
//! Variants carry labels, paths, PKCS#11 return codes and lengths, never PINs or key bytes,
//! so that an error can go into the audit log and any operator log as it is.

use std::path::PathBuf;

use cryptoki::context::Function;
use cryptoki::error::RvError;

use crate::label::{KeyLabel, Measurement};

/// Why an audit log failed verification, at which line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChainFault {
    /// The line is not a complete entry (edited into invalid JSON, or cut in the middle).
    Unparsable,
    /// The entry's sequence number is not the previous one plus one: an entry was removed,
    /// inserted or moved.
    SequenceGap {
        /// The sequence number the chain expected here.
        expected: u64,
        /// The sequence number the entry carries.
        found: u64,
    },
    /// The entry's `prev_hash` is not the previous entry's hash.
    PrevHashMismatch,
    /// The entry's fields do not hash to its `hash`: the entry was edited.
    HashMismatch,
}

impl std::fmt::Display for ChainFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unparsable => f.write_str("not a complete entry"),
            Self::SequenceGap { expected, found } => {
                write!(f, "sequence number {found} where {expected} was expected")
            }
            Self::PrevHashMismatch => f.write_str("prev_hash is not the previous entry's hash"),
            Self::HashMismatch => f.write_str("fields do not match the entry's hash (edited)"),
        }
    }
}

/// What is wrong with a public key handed in for rewrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublicKeyFault {
    /// Not DER SubjectPublicKeyInfo.
    NotSpki,
    /// The algorithm is not rsaEncryption.
    NotRsa,
    /// The modulus is shorter than the policy minimum.
    ModulusTooShort {
        /// Modulus length in bits.
        bits: usize,
    },
    /// The modulus is longer than this crate accepts (bounds the work an input can cause).
    ModulusTooLong {
        /// Modulus length in bits.
        bits: usize,
    },
    /// The public exponent is even, 1, or absurdly long.
    BadExponent,
}

impl std::fmt::Display for PublicKeyFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotSpki => f.write_str("not a DER SubjectPublicKeyInfo"),
            Self::NotRsa => f.write_str("not an rsaEncryption key"),
            Self::ModulusTooShort { bits } => write!(f, "modulus of {bits} bits is too short"),
            Self::ModulusTooLong { bits } => write!(f, "modulus of {bits} bits is too long"),
            Self::BadExponent => f.write_str("unacceptable public exponent"),
        }
    }
}

/// Errors of HSM access, key labels and the audit log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The PKCS#11 module file does not exist.
    #[error("PKCS#11 module {path} not found (is the HSM client installed?)")]
    ModuleMissing {
        /// The configured module path.
        path: PathBuf,
    },
    /// The PKCS#11 module exists but could not be loaded or lacks the PKCS#11 entry points.
    #[error("PKCS#11 module {path} could not be loaded: {source}")]
    ModuleLoad {
        /// The configured module path.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: cryptoki::error::Error,
    },
    /// The HSM did not answer or reported a device failure (network HSM down, token
    /// store unreadable, token removed).
    #[error("HSM unreachable during {function:?}: {rv:?}")]
    HsmUnavailable {
        /// The PKCS#11 function that failed.
        function: Function,
        /// Its return code.
        rv: RvError,
    },
    /// No slot holds a token with this label.
    #[error("no HSM token labelled {label:?}")]
    TokenNotFound {
        /// The configured token label.
        label: String,
    },
    /// The HSM refused the PIN.
    #[error("HSM refused the {role} PIN")]
    WrongPin {
        /// `"user"` or `"security officer"`.
        role: &'static str,
    },
    /// The HSM has locked the PIN after too many failures.
    #[error("HSM {role} PIN is locked")]
    PinLocked {
        /// `"user"` or `"security officer"`.
        role: &'static str,
    },
    /// No key with this label exists (never created, or deleted after a confirmed restore:
    /// a replayed package ends here).
    #[error("no HSM key labelled {label}")]
    KeyNotFound {
        /// The label looked up.
        label: KeyLabel,
    },
    /// A one-time migration key has rewrapped its package's data key once already: its
    /// private half is gone, so no second destination (or copy of the package) gets it.
    #[error("one-time HSM key {label} was used already")]
    OneTimeKeyUsed {
        /// The label.
        label: KeyLabel,
    },
    /// A key with this label exists already (creating a second would make lookups by label
    /// ambiguous), or two do (someone else created a clash; refused rather than guessed).
    #[error("HSM key label {label} is taken")]
    KeyExists {
        /// The label.
        label: KeyLabel,
    },
    /// A key label is not of the form this crate writes.
    #[error("malformed key label {label:?}")]
    BadLabel {
        /// The label as given.
        label: String,
    },
    /// A measurement is not 16 to 64 bytes (hex: 32 to 128 lowercase digits).
    #[error("malformed enclave measurement")]
    BadMeasurement,
    /// A backup date is not a valid `YYYY-MM-DD`.
    #[error("malformed backup date")]
    BadDate,
    /// The key's label names another enclave measurement than the attested destination's.
    #[error("key {label} is bound to another enclave measurement than {expected}")]
    MeasurementMismatch {
        /// The key's label.
        label: KeyLabel,
        /// The attested measurement of the destination.
        expected: Measurement,
    },
    /// A backup key may not be used for restore before the security officer's step.
    #[error("restore with backup key {label} is not authorized by the security officer")]
    RestoreNotAuthorized {
        /// The backup key's label.
        label: KeyLabel,
    },
    /// The operation needs a key of the other kind (a backup key where a one-time migration
    /// key is needed, or the reverse).
    #[error("key {label} is not of the kind this operation needs")]
    WrongKeyKind {
        /// The key's label.
        label: KeyLabel,
    },
    /// The token has no backup root yet (`cloister migrate backup-root` makes it).
    #[error("the HSM has no backup root: make it with `cloister migrate backup-root`")]
    NoBackupRoot,
    /// More than one object carries the backup root's label: someone else made one; refused
    /// rather than guessed.
    #[error("more than one backup root in the HSM")]
    RootClash,
    /// The HSM's backup root is not the P-256 key this code makes.
    #[error("the HSM's backup root is not an uncompressed P-256 key")]
    BadBackupRoot,
    /// The destination public key is unusable.
    #[error("destination public key refused: {fault}")]
    BadPublicKey {
        /// What is wrong with it.
        fault: PublicKeyFault,
    },
    /// The wrapped data key does not decrypt under the HSM key (tampered, truncated, or
    /// wrapped for another key), or is not a 256-bit key.
    #[error("wrapped data key refused by the HSM for {label}")]
    WrappedKeyInvalid {
        /// The HSM key's label.
        label: KeyLabel,
    },
    /// The HSM does not support RSA-OAEP with the configured hash (SoftHSM2 2.6 supports
    /// SHA-1 only); choose the hash the HSM supports in the configuration.
    #[error("HSM refuses RSA-OAEP with {hash}")]
    OaepHashUnsupported {
        /// The configured OAEP hash.
        hash: &'static str,
    },
    /// Bulk-encrypted data does not decrypt under the HSM key (tampered, cut, or for
    /// another key).
    #[error("bulk-encrypted data refused by the HSM for {label}")]
    BulkData {
        /// The bulk key's label.
        label: KeyLabel,
    },
    /// An enclave refused a migration step (export, destination key, import), or the
    /// destination's evidence does not verify.
    #[error("enclave: {source}")]
    Enclave {
        /// The enclave's refusal.
        #[from]
        source: enclave::Error,
    },
    /// This migration mode needs an HSM and none was given.
    #[error("migration mode {mode} needs an HSM")]
    NoHsm {
        /// The mode's name.
        mode: &'static str,
    },
    /// A transfer made for one mode was handed to a flow of another.
    #[error("transfer made for mode {transfer}, flow runs {flow}")]
    ModeMismatch {
        /// The transfer's mode.
        transfer: &'static str,
        /// The flow's mode.
        flow: &'static str,
    },
    /// Any other PKCS#11 failure.
    #[error("PKCS#11 {function:?} failed: {rv:?}")]
    Pkcs11 {
        /// The PKCS#11 function that failed.
        function: Function,
        /// Its return code.
        rv: RvError,
    },
    /// A failure inside the PKCS#11 wrapper that is not a return code (conversions).
    #[error("PKCS#11 wrapper error: {source}")]
    Wrapper {
        /// The wrapper's error.
        #[source]
        source: cryptoki::error::Error,
    },
    /// Reading or writing the audit log failed.
    #[error("audit log {path}: {source}")]
    AuditIo {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A frame on the HSM agent's pipe is malformed (a bug, or someone else writing to it).
    #[error("HSM agent protocol: {why}")]
    AgentProtocol {
        /// What is wrong with it.
        why: &'static str,
    },
    /// The HSM agent refused a request; its message says why (it never holds a secret).
    #[error("HSM agent: {message}")]
    AgentRefused {
        /// The agent's reason.
        message: String,
    },
    /// The HSM agent process could not be started, or its pipe broke.
    #[error("HSM agent {what}: {source}")]
    AgentIo {
        /// What was being done.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The audit log's hash chain is broken.
    #[error("audit log {path} broken at line {line}: {fault}")]
    AuditChain {
        /// The log file.
        path: PathBuf,
        /// 1-based line number of the first bad entry.
        line: u64,
        /// What is wrong there.
        fault: ChainFault,
    },
}

impl MigrateError {
    /// Maps a PKCS#11 failure to the variant an operator can act on; return codes that mean
    /// "the device is gone" become [`MigrateError::HsmUnavailable`].
    pub(crate) fn from_pkcs11(err: cryptoki::error::Error) -> Self {
        match err {
            cryptoki::error::Error::Pkcs11(rv, function) => match rv {
                RvError::DeviceError
                | RvError::DeviceRemoved
                | RvError::DeviceMemory
                | RvError::TokenNotPresent
                | RvError::TokenNotRecognized
                | RvError::SlotIdInvalid
                | RvError::GeneralError => Self::HsmUnavailable { function, rv },
                _ => Self::Pkcs11 { function, rv },
            },
            other => Self::Wrapper { source: other },
        }
    }

    /// The PKCS#11 return code behind this error, if any.
    pub fn return_code(&self) -> Option<RvError> {
        match self {
            Self::HsmUnavailable { rv, .. } | Self::Pkcs11 { rv, .. } => Some(*rv),
            _ => None,
        }
    }
}

/// Results of this crate.
pub type Result<T, E = MigrateError> = std::result::Result<T, E>;
