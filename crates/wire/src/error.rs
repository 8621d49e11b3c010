//! The one error type of the `wire` crate.

/// Why a packet or message could not be parsed or emitted.
///
/// Every variant names the culprit (`what`: the header, payload or field) so a counted drop
/// or an IKE error notify can say exactly what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the named structure does.
    #[error("{what}: truncated, need {need} bytes, have {have}")]
    Truncated {
        /// The structure that was cut short.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes that were there.
        have: usize,
    },
    /// A length field contradicts the structure's own rules or its container.
    #[error("{what}: length {len} is invalid ({why})")]
    BadLength {
        /// The structure whose length field is wrong.
        what: &'static str,
        /// The value found.
        len: usize,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// A version field has a value this implementation does not speak.
    #[error("{what}: unsupported version {version}")]
    BadVersion {
        /// The header.
        what: &'static str,
        /// The value found.
        version: u8,
    },
    /// Bytes remain after the structure that should have ended its container.
    #[error("{what}: {count} trailing bytes")]
    TrailingBytes {
        /// The structure that should have consumed everything.
        what: &'static str,
        /// How many bytes were left over.
        count: usize,
    },
    /// A field holds a value that is never valid in this position.
    #[error("{what}: invalid value {value:#x}")]
    BadValue {
        /// The field.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// The buffer given to `emit` is smaller than `buffer_len` said it must be.
    #[error("{what}: output buffer too small, need {need} bytes, have {have}")]
    BufferTooSmall {
        /// The structure being emitted.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A value is too large to be encoded in its length or count field.
    #[error("{what}: {len} does not fit its length field")]
    TooLong {
        /// The structure.
        what: &'static str,
        /// The length that does not fit.
        len: usize,
    },
    // ---- IKEv2-specific variants (owned by the ike module) go below this line. ----
    /// The IKE header's major version is not 2: the peer gets INVALID_MAJOR_VERSION
    /// (RFC 7296 §2.5), sent in an IKEv2 header.
    #[error("IKE header: unsupported major version {version}")]
    InvalidMajorVersion {
        /// The major version found (the high four bits of the Version octet).
        version: u8,
    },
    /// A payload of a type this codec does not understand has the critical bit set: the whole
    /// message is rejected and the peer gets UNSUPPORTED_CRITICAL_PAYLOAD carrying the type
    /// (RFC 7296 §2.5).
    #[error("payload type {payload_type}: critical but not supported")]
    UnsupportedCriticalPayload {
        /// The payload type that was not understood.
        payload_type: u8,
    },
    /// An Encrypted (SK) or Encrypted Fragment (SKF) payload is not the last payload of the
    /// message, or sits inside a decrypted inner chain (RFC 7296 §3.14, RFC 7383 §2.5).
    #[error("payload type {payload_type}: an encrypted payload must end the outer chain")]
    MisplacedEncrypted {
        /// The payload type (46 for SK, 53 for SKF).
        payload_type: u8,
    },
}
