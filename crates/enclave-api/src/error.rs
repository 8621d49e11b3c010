//! The one error type of the enclave. No variant carries key bytes or anything derived
//! from them; context is handles, algorithms, lengths and reasons.

use crate::alg::{DhGroup, SecretKind};
use crate::handle::HandleKind;

/// Why an enclave call was refused. Every refusal is also counted ([`crate::Counters`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The handle names no live entry: never issued, or already deleted or consumed.
    #[error("unknown or stale {kind} handle {handle:#010x}")]
    UnknownHandle {
        /// Which table.
        kind: HandleKind,
        /// The raw handle.
        handle: u32,
    },
    /// The handle was issued by another enclave instance (another tenant).
    #[error("{kind} handle {handle:#010x} belongs to another enclave instance")]
    ForeignHandle {
        /// Which table.
        kind: HandleKind,
        /// The raw handle.
        handle: u32,
    },
    /// The table has reached its configured limit.
    #[error("{kind} table is full ({max} entries)")]
    TableFull {
        /// Which table.
        kind: HandleKind,
        /// The limit.
        max: usize,
    },
    /// A length is not what the algorithm or format requires.
    #[error("{what}: length {len} is invalid ({why})")]
    BadLength {
        /// The input or output.
        what: &'static str,
        /// The length given.
        len: usize,
        /// The rule it breaks.
        why: &'static str,
    },
    /// The peer's Diffie-Hellman public value is malformed or not a valid group element.
    #[error("invalid peer public value for DH group {}", group.id())]
    BadPeerPublicValue {
        /// The group.
        group: DhGroup,
    },
    /// The DH handle is for a different group than the exchange needs.
    #[error("DH group mismatch: have {}, need {}", have.id(), need.id())]
    DhGroupMismatch {
        /// The group of the handle.
        have: DhGroup,
        /// The group the call needs.
        need: DhGroup,
    },
    /// A cipher was paired with an integrity algorithm it cannot take (or lacks one it needs).
    #[error("inconsistent suite: cipher {cipher}, integrity {integ}")]
    InconsistentSuite {
        /// The cipher's IANA ID.
        cipher: u16,
        /// The integrity algorithm's IANA ID (0 for none).
        integ: u16,
    },
    /// The secret handle names a secret of a kind this operation cannot use.
    #[error("secret {handle:#010x} cannot be used for {what}")]
    WrongSecretKind {
        /// The raw handle.
        handle: u32,
        /// The operation.
        what: &'static str,
    },
    /// The key was cleared by clear-and-seal (SK_pi/SK_pr), or SK_d is sealed and no
    /// sealed blob was passed.
    #[error("{what} is no longer resident (clear-and-seal)")]
    KeyCleared {
        /// Which key.
        what: &'static str,
    },
    /// SK_d is already sealed for this IKE SA.
    #[error("SK_d is already sealed")]
    AlreadySealed,
    /// The IKE SA still holds SK_d or SK_p*: its state can be sealed only after
    /// clear-and-seal.
    #[error("IKE SA is not cleared and sealed yet (call clear_and_seal first)")]
    NotSealed,
    /// A sealed blob was refused.
    #[error("sealed blob refused: {reason}")]
    SealedBlob {
        /// Why.
        reason: BlobRejection,
    },
    /// A provisioning blob was refused.
    #[error("provisioning blob refused: {reason}")]
    ProvisioningBlob {
        /// Why.
        reason: BlobRejection,
    },
    /// A provisioning blob holds another kind of secret than the call takes.
    #[error("provisioning blob holds a {got}, this call takes {want}")]
    WrongBlobKind {
        /// What the blob holds.
        got: SecretKind,
        /// What the call takes.
        want: &'static str,
    },
    /// Wrapped ESP SA keys are bound to another SA than the one asked for.
    #[error("wrapped ESP SA keys are bound to another {field}")]
    EspSaBinding {
        /// `direction`, `SPI` or `transform`.
        field: &'static str,
    },
    /// Static ESP keys whose install would let a (key, IV) pair repeat: an outbound SA's
    /// keys installed a second time by this instance, or one key for both directions.
    #[error("ESP encryption key refused: {why}")]
    KeyReuse {
        /// Which rule.
        why: &'static str,
    },
    /// A provisioned private key could not be parsed or failed its pairwise check.
    #[error("provisioned key rejected: {why}")]
    BadPrivateKey {
        /// Why.
        why: &'static str,
    },
    /// A public key given by the caller is malformed or unsupported.
    #[error("bad public key: {why}")]
    BadPublicKey {
        /// Why.
        why: &'static str,
    },
    /// The SK payload's Integrity Checksum Data does not verify; nothing was decrypted.
    #[error("SK payload integrity check failed")]
    IntegrityCheckFailed,
    /// The decrypted SK payload's Pad Length exceeds the payload.
    #[error("SK payload padding is invalid")]
    BadPadding,
    /// The peer's AUTH payload does not verify.
    #[error("AUTH payload (method {method}) does not verify")]
    AuthenticationFailed {
        /// The Auth Method value.
        method: u8,
    },
    /// An algorithm or method the enclave does not implement, or one that does not fit the
    /// key at hand.
    #[error("unsupported {what} {value}")]
    Unsupported {
        /// What kind of algorithm.
        what: &'static str,
        /// Its IANA value (or 0).
        value: u16,
    },
    /// The batch has more descriptors than the configured maximum.
    #[error("batch of {descriptors} descriptors exceeds the maximum {max}")]
    BatchTooLarge {
        /// Descriptors given.
        descriptors: usize,
        /// The limit.
        max: usize,
    },
    /// The status slice does not have one entry per descriptor.
    #[error("status slice has {status} entries for {descriptors} descriptors")]
    StatusLengthMismatch {
        /// Descriptors given.
        descriptors: usize,
        /// Status entries given.
        status: usize,
    },
    /// A counter that must never repeat (an IKE AEAD IV) is used up: rekey.
    #[error("{what} exhausted")]
    Exhausted {
        /// Which counter.
        what: &'static str,
    },
    /// The system random number generator failed.
    #[error("random number generator failed")]
    Random,
    /// A known-answer self-test failed at start; the enclave refuses to run.
    #[error("self-test failed: {test}")]
    SelfTestFailed {
        /// The test's name.
        test: &'static str,
    },
    /// Attestation evidence could not be produced or does not verify.
    #[error("attestation: {why}")]
    Attestation {
        /// Why.
        why: &'static str,
    },
    /// Attested provisioning refused an offer or an envelope ([`crate::provision`]): the
    /// reason is one of a fixed set ("unknown challenge", "offer expired", "offer already
    /// used", "envelope malformed", "does not decrypt", "wrong tenant", "offer malformed").
    #[error("attested provisioning refused: {why}")]
    Provisioning {
        /// Why.
        why: &'static str,
    },
    /// A migration package or call was refused ([`crate::migration`]): the reason is one of
    /// [`crate::migration::why`].
    #[error("migration refused: {why}")]
    Migration {
        /// Why.
        why: &'static str,
    },
    /// The tenant's side found evidence of another measurement than the one it expects
    /// (measurements are public, so both are shown). Boxed: an `Error` stays small.
    #[error("measurement {} does not match the expected {}", got.to_hex(), expected.to_hex())]
    MeasurementMismatch {
        /// The measurement the tenant expects.
        expected: Box<crate::attest::Measurement>,
        /// The measurement the evidence carries.
        got: Box<crate::attest::Measurement>,
    },
    /// The call breaks a rule the enclave enforces of the protocol itself, whatever the
    /// caller states: a nonce it did not issue or already used, a role the nonces do not
    /// give, evidence for a purpose it does not serve. One of a fixed set of reasons
    /// ([`crate::refusal`]); always counted as [`ErrorKind::ProtocolRefused`].
    #[error("refused by the enclave's protocol rules: {why}")]
    ProtocolRefused {
        /// Which rule.
        why: &'static str,
    },
    /// A crypto library refused an operation that the enclave's own checks allowed.
    #[error("internal crypto failure in {what}")]
    Internal {
        /// The operation.
        what: &'static str,
    },
    // ---- process backend (crates/enclave/src/process) --------------------------------
    /// The process backend failed: spawn, transport, or the enclave process died.
    #[error("process backend: {0}")]
    Process(#[from] crate::process::ProcessError),
    // ---- end process backend -----------------------------------------------------------
}

/// Why a sealed or provisioning blob was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlobRejection {
    /// Wrong magic, version, kind or length.
    Malformed,
    /// Sealed for (or provisioned to) another tenant.
    WrongTenant,
    /// Sealed for another IKE SA.
    WrongSa,
    /// Its counter is no longer live in the platform's ledger, or older than the latest seal of this SA.
    Rollback,
    /// The AEAD tag does not verify: tampered, or made under another key.
    Forged,
}

impl core::fmt::Display for BlobRejection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed",
            Self::WrongTenant => "bound to another tenant",
            Self::WrongSa => "bound to another IKE SA",
            Self::Rollback => "rolled back (stale counter)",
            Self::Forged => "authentication tag does not verify",
        })
    }
}

/// A `Copy` summary of [`Error`] for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorKind {
    /// [`Error::UnknownHandle`].
    UnknownHandle,
    /// [`Error::ForeignHandle`].
    ForeignHandle,
    /// [`Error::TableFull`].
    TableFull,
    /// Bad lengths, suites, public values, kinds, paddings: malformed input.
    BadInput,
    /// [`Error::KeyCleared`], [`Error::AlreadySealed`], [`Error::NotSealed`], [`Error::KeyReuse`].
    KeyState,
    /// [`Error::SealedBlob`], [`Error::ProvisioningBlob`], [`Error::WrongBlobKind`],
    /// [`Error::Provisioning`] and [`Error::Migration`].
    BlobRejected,
    /// [`Error::IntegrityCheckFailed`] and [`Error::AuthenticationFailed`].
    VerifyFailed,
    /// [`Error::BatchTooLarge`], [`Error::StatusLengthMismatch`].
    BadBatch,
    /// [`Error::ProtocolRefused`]: what a hostile caller's attempts end in.
    ProtocolRefused,
    /// Everything else (randomness, exhaustion, internal, attestation, measurement, self-test).
    Other,
}

impl ErrorKind {
    /// Number of kinds, for counter arrays.
    pub const COUNT: usize = 10;
}

impl Error {
    /// The counter bucket of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::UnknownHandle { .. } => ErrorKind::UnknownHandle,
            Self::ForeignHandle { .. } => ErrorKind::ForeignHandle,
            Self::TableFull { .. } => ErrorKind::TableFull,
            Self::BadLength { .. }
            | Self::BadPeerPublicValue { .. }
            | Self::DhGroupMismatch { .. }
            | Self::InconsistentSuite { .. }
            | Self::WrongSecretKind { .. }
            | Self::BadPrivateKey { .. }
            | Self::BadPublicKey { .. }
            | Self::BadPadding
            | Self::EspSaBinding { .. }
            | Self::Unsupported { .. } => ErrorKind::BadInput,
            Self::KeyCleared { .. } | Self::AlreadySealed | Self::NotSealed | Self::KeyReuse { .. } => {
                ErrorKind::KeyState
            }
            Self::SealedBlob { .. }
            | Self::ProvisioningBlob { .. }
            | Self::WrongBlobKind { .. }
            | Self::Provisioning { .. }
            | Self::Migration { .. } => ErrorKind::BlobRejected,
            Self::IntegrityCheckFailed | Self::AuthenticationFailed { .. } => ErrorKind::VerifyFailed,
            Self::BatchTooLarge { .. } | Self::StatusLengthMismatch { .. } => ErrorKind::BadBatch,
            Self::ProtocolRefused { .. } => ErrorKind::ProtocolRefused,
            Self::Exhausted { .. }
            | Self::Random
            | Self::SelfTestFailed { .. }
            | Self::Attestation { .. }
            | Self::MeasurementMismatch { .. }
            | Self::Internal { .. } => ErrorKind::Other,
            // Process backend (crates/enclave/src/process): transport, spawn, death.
            Self::Process(_) => ErrorKind::Other,
        }
    }
}

/// The reasons of [`Error::ProtocolRefused`].
pub mod refusal {
    /// A nonce in an IKE SA or child SA derivation that this enclave did not issue
    /// ([`crate::Enclave::ike_nonces`]), where one of the two must be its own.
    pub const NONCE_NOT_ISSUED: &str = "neither nonce was issued by this enclave";
    /// A child SA, IKE SA rekey or clear-and-seal of an IKE SA whose peer's AUTH this
    /// enclave has not verified ([`crate::Enclave::auth_verify`]).
    pub const PEER_NOT_AUTHENTICATED: &str = "the IKE SA's peer has not authenticated";
    /// A second `auth_compute` on one IKE SA: our AUTH is computed once per exchange.
    pub const ALREADY_SIGNED: &str = "our AUTH for this IKE SA was computed already";
    /// A nonce of this enclave that an earlier derivation already used.
    pub const NONCE_USED: &str = "the enclave's nonce was used before";
    /// A nonce of this enclave issued so long ago that its use is no longer tracked.
    pub const NONCE_EXPIRED: &str = "the enclave's nonce is too old";
    /// An AUTH input that is not this IKE SA's IKE_SA_INIT: another message, other SPIs,
    /// KE or Nonce payloads other than those its keys came from, or the wrong peer nonce.
    pub const NOT_THE_TRANSCRIPT: &str = "the AUTH input is not this IKE SA's IKE_SA_INIT";
    /// An IKE_INTERMEDIATE exchange that is not this IKE SA's next one, or whose KE payloads
    /// are not the values of the agreement ([`crate::Enclave::ike_sa_intermediate`]).
    pub const NOT_THE_INTERMEDIATE: &str = "the exchange is not this IKE SA's next IKE_INTERMEDIATE";
    /// An additional key exchange once AUTH was computed or verified: keys change only
    /// before IKE_AUTH.
    pub const AUTH_STARTED: &str = "the IKE SA's AUTH was computed or verified already";
    /// A sealed IKE SA state restored while an IKE SA with its SPIs is live here.
    pub const IKE_SA_LIVE: &str = "an IKE SA with these SPIs is live in this instance";
    /// The stated role is not the one the enclave's nonce holds in the exchange.
    pub const ROLE_MISMATCH: &str = "the stated role is not the one the enclave's nonce gives";
    /// A move or an import with no trusted platform in the measured configuration.
    pub const NO_TRUSTED_PLATFORM: &str = "no trusted platform is configured: moves are off";
    /// A peer enclave's evidence (a destination key's, a package's source) verifies under
    /// no trusted platform for this purpose and value.
    pub const PEER_NOT_ATTESTED: &str = "the peer enclave's evidence verifies under no trusted platform";
    /// A peer enclave's evidence is genuine but names another tenant or measurement.
    pub const PEER_MISMATCH: &str = "the peer enclave serves another tenant or runs another measurement";
    /// A backup with no backup root in the measured configuration.
    pub const NO_BACKUP_ROOT: &str = "no backup root is configured: backups are off";
    /// A backup key that no backup root of the measured configuration certified for this
    /// enclave's measurement.
    pub const BACKUP_KEY_NOT_CERTIFIED: &str =
        "the backup key carries no certificate of a trusted backup root";
    /// An import into an instance that already holds secrets or SAs: state is never merged.
    pub const NOT_FRESH: &str = "imports go only into a fresh instance";
    /// A wrapped blob, or an unsigned envelope, where the measured configuration names
    /// tenant signers: every secret must come signed by the tenant.
    pub const TENANT_SIGNATURE_REQUIRED: &str =
        "the tenant signs its secrets: wrapped blobs and unsigned envelopes are refused";
    /// A signed envelope whose signature verifies under no tenant signer of the measured
    /// configuration.
    pub const NOT_THE_TENANTS_SIGNATURE: &str = "the envelope's signature verifies under no tenant signer";
    /// A signed envelope where the measured configuration names no tenant signer.
    pub const NO_TENANT_SIGNER: &str = "a signed envelope, but no tenant signer is configured";
}

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;
