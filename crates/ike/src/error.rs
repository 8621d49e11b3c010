//! The one error type of the IKE crate.
//!
//! Configuration errors name the connection, field and offending token. Protocol errors
//! say what the peer gets back (a Notify type) or that the message is dropped silently;
//! malformed datagrams are never errors but counted [`crate::DropReason`]s.

use wire::ike::NotifyType;

use crate::cert::CertError;
use crate::event::SaId;

/// Why a configuration was refused, a command failed, or an IKE SA or child SA failed.
///
/// No variant carries key bytes: secrets are named, never included.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- proposals (strongSwan syntax) ------------------------------------------------
    /// A token of a proposal string is not an algorithm keyword strongSwan knows.
    #[error("proposal {proposal:?}: unknown algorithm {token:?}")]
    UnknownAlgorithm {
        /// The whole proposal string.
        proposal: String,
        /// The token that is not a keyword.
        token: String,
    },
    /// A token names an algorithm strongSwan knows but this gateway's enclave does not
    /// implement (e.g. `aes192`, `sha1`, `modp1024`).
    #[error("proposal {proposal:?}: algorithm {token:?} is not supported by this gateway")]
    UnsupportedAlgorithm {
        /// The whole proposal string.
        proposal: String,
        /// The token.
        token: String,
    },
    /// A proposal lacks a transform type it needs (e.g. an IKE proposal without a DH group).
    #[error("proposal {proposal:?}: {missing}")]
    IncompleteProposal {
        /// The whole proposal string.
        proposal: String,
        /// What is missing.
        missing: &'static str,
    },
    /// A proposal combines algorithms that cannot go together (e.g. an AEAD with an
    /// integrity algorithm, or a PRF in an ESP proposal).
    #[error("proposal {proposal:?}: {why}")]
    InvalidProposal {
        /// The whole proposal string.
        proposal: String,
        /// The rule it breaks.
        why: &'static str,
    },

    // ---- connection configuration -------------------------------------------------------
    /// The configuration is not valid TOML or does not have the expected shape (unknown
    /// or missing keys, wrong types); the message names the line.
    #[error("configuration: {message}")]
    Toml {
        /// The parser's message.
        message: String,
    },
    /// A field of a connection has an invalid value.
    #[error("connection {connection:?}: {field} = {value:?}: {why}")]
    InvalidValue {
        /// The connection (and child, as `conn.child`) the field belongs to.
        connection: String,
        /// The field as written in the file.
        field: &'static str,
        /// The value as written (never a secret: secrets are not part of the file).
        value: String,
        /// Why it was refused.
        why: &'static str,
    },
    /// A connection lacks a field it needs.
    #[error("connection {connection:?}: {field} is required ({why})")]
    MissingField {
        /// The connection (and child, as `conn.child`).
        connection: String,
        /// The field.
        field: &'static str,
        /// What it is needed for.
        why: &'static str,
    },
    /// A connection refers to a secret by a name that is not declared or not provisioned.
    #[error("connection {connection:?}: secret {secret:?} is not declared or not provisioned")]
    UnknownSecret {
        /// The connection.
        connection: String,
        /// The secret's name (the name only, never its value).
        secret: String,
    },
    /// A certificate file named by a connection could not be used.
    #[error("connection {connection:?}: {field}: {path:?}: {why}")]
    CertificateFile {
        /// The connection.
        connection: String,
        /// The field naming the file (`local.certs`, `remote.cacerts`).
        field: &'static str,
        /// The file as named.
        path: String,
        /// What is wrong with it.
        why: CertError,
    },
    /// A connection's secret is provisioned, but of a kind its `auth` cannot use.
    #[error("connection {connection:?}: secret {secret:?} is not {expected}")]
    WrongSecretKind {
        /// The connection.
        connection: String,
        /// The secret's name.
        secret: String,
        /// What the connection needs.
        expected: &'static str,
    },
    /// Two connections share a name.
    #[error("connection {connection:?} is defined twice")]
    DuplicateConnection {
        /// The name.
        connection: String,
    },

    // ---- commands -------------------------------------------------------------------------
    /// No connection has this name.
    #[error("no connection named {name:?}")]
    UnknownConnection {
        /// The name asked for.
        name: String,
    },
    /// No IKE SA has this identifier.
    #[error("no IKE SA {sa:#018x}")]
    UnknownIkeSa {
        /// Our SPI of the SA asked for.
        sa: u64,
    },
    /// No child SA of the IKE SA has this inbound SPI.
    #[error("no child SA with inbound SPI {spi:#010x}")]
    UnknownChildSa {
        /// The inbound SPI asked for.
        spi: u32,
    },
    /// The command does not apply in the IKE SA's current state.
    #[error("IKE SA is {state}: cannot {what}")]
    WrongState {
        /// The state it is in.
        state: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// The connection cannot be initiated: it has no concrete remote address.
    #[error("connection {connection:?} has no remote address to initiate to")]
    NoRemoteAddress {
        /// The connection.
        connection: String,
    },

    // ---- live moves (crate::CarriedIkeSa) ----------------------------------------------------
    /// An IKE SA is in the middle of an exchange or a rekey and cannot move now: try the
    /// export again a moment later.
    #[error("IKE SA {:#018x} cannot move now: {why}", .sa.0)]
    MoveBusy {
        /// The busy SA.
        sa: SaId,
        /// What it is doing.
        why: &'static str,
    },
    /// A carried IKE SA is malformed, inconsistent, or conflicts with this endpoint's SAs.
    #[error("carried IKE SA {sa:#018x}: {why}")]
    CarriedSa {
        /// Its id (our SPI), as carried.
        sa: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A carried IKE SA names an enclave handle that the enclave's import did not restore.
    #[error("carried IKE SA {sa:#018x}: the enclave restored no {kind} handle for {handle:#010x}")]
    MissingHandle {
        /// Its id (our SPI), as carried.
        sa: u64,
        /// The handle's table.
        kind: enclave::HandleKind,
        /// The source enclave's handle.
        handle: u32,
    },

    // ---- exchanges: what the peer was told, or what it told us -----------------------------
    /// None of the proposals was acceptable: NO_PROPOSAL_CHOSEN was sent, or received.
    #[error("no proposal chosen ({side})")]
    NoProposalChosen {
        /// Which side found no acceptable proposal.
        side: Side,
    },
    /// The peer's AUTH payload did not verify (we sent AUTHENTICATION_FAILED), or the peer
    /// refused ours (it sent AUTHENTICATION_FAILED).
    #[error("authentication failed ({side})")]
    AuthenticationFailed {
        /// Which side refused the other's AUTH.
        side: Side,
    },
    /// The peer's identity is not the one configured: AUTHENTICATION_FAILED is sent.
    #[error("peer identity does not match the configured remote id")]
    IdentityMismatch,
    /// The peer's certificate was refused (chain, validity, usage, or the ID it certifies):
    /// AUTHENTICATION_FAILED is sent.
    #[error("peer certificate refused: {0}")]
    PeerCertificate(CertError),
    /// The peer's AUTH verified, but with a method or signature scheme `remote.auth` does
    /// not allow: AUTHENTICATION_FAILED is sent.
    #[error("peer's AUTH method {method} or its signature scheme is not allowed by remote.auth")]
    AuthMethodRefused {
        /// The Auth Method it used.
        method: u8,
    },
    /// The traffic selectors had no acceptable intersection: TS_UNACCEPTABLE.
    #[error("traffic selectors unacceptable ({side})")]
    TsUnacceptable {
        /// Which side found them unacceptable.
        side: Side,
    },
    /// The peer answered with an error notification not covered by another variant.
    #[error("peer sent error notify {notify:?}")]
    PeerError {
        /// The notify type.
        notify: NotifyType,
    },
    /// A message was syntactically valid IKE but broke the exchange's rules (missing or
    /// unexpected payloads, a response choosing something we did not offer). Requests get
    /// INVALID_SYNTAX; responses end the exchange.
    #[error("invalid {exchange} message: {why}")]
    InvalidMessage {
        /// The exchange.
        exchange: &'static str,
        /// What was wrong.
        why: &'static str,
    },
    /// The peer did not answer a request within the retransmission schedule (RFC 7296 §2.4).
    #[error("peer did not answer after {tries} transmissions")]
    Timeout {
        /// How many times the request was sent.
        tries: u32,
    },
    /// The enclave refused a call. The peer gets no detail (a silent drop or a generic
    /// failure notify, whichever the exchange requires).
    #[error("enclave: {0}")]
    Enclave(#[from] enclave::Error),
    /// A message we built could not be encoded (a bug or an absurd configuration).
    #[error("encoding: {0}")]
    Encode(#[from] wire::Error),
}

/// Which side of an exchange detected a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// We refused the peer's message and told it so.
    Local,
    /// The peer refused ours and told us so.
    Remote,
}

impl core::fmt::Display for Side {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Local => "refused by us",
            Self::Remote => "refused by the peer",
        })
    }
}

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;
