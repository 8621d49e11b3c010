//! The one error type of the ESP crate: configuration and control-plane refusals.
//!
//! Per-packet failures are never errors: they are [`crate::DropReason`] counts.

use core::fmt;

/// Which entry of a static configuration ([`crate::config::StaticConfig`]) an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigItem {
    /// The `n`th `[[sa]]` table (from 0).
    Sa(usize),
    /// The `n`th `[[policy]]` table (from 0).
    Policy(usize),
}

impl fmt::Display for ConfigItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sa(i) => write!(f, "sa[{i}]"),
            Self::Policy(i) => write!(f, "policy[{i}]"),
        }
    }
}

/// Why a configuration or control-plane call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field of an SA given to [`crate::Sad`] breaks a rule.
    #[error("SA {field}: {why}")]
    InvalidSa {
        /// The field of [`crate::SaConfig`].
        field: &'static str,
        /// The rule it breaks.
        why: &'static str,
    },
    /// An inbound SA with this SPI is already installed (SPIs select inbound SAs, RFC 4301 §4.1).
    #[error("inbound SPI {spi:#010x} is already installed")]
    DuplicateSpi {
        /// The SPI.
        spi: u32,
    },
    /// No inbound SA has this SPI.
    #[error("no inbound SA with SPI {spi:#010x}")]
    UnknownInboundSa {
        /// The SPI.
        spi: u32,
    },
    /// No outbound SA has this identifier.
    #[error("no outbound SA {id}")]
    UnknownOutboundSa {
        /// The identifier's raw value.
        id: u32,
    },
    /// A traffic selector, address range or port range could not be parsed or is empty.
    #[error("selector {what}: {why}")]
    InvalidSelector {
        /// Which part.
        what: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A batch area does not fit its slots and descriptors.
    #[error("batch: {why}")]
    InvalidBatch {
        /// Why.
        why: &'static str,
    },
    /// A field of a static configuration is invalid.
    #[error("{item}.{field}: {why}")]
    Config {
        /// The SA or policy.
        item: ConfigItem,
        /// The field's name as written in the file.
        field: &'static str,
        /// Why it was refused.
        why: &'static str,
    },
    /// The enclave refused to install a static SA's keys.
    #[error("{item}: enclave refused the keys: {source}")]
    KeyInstall {
        /// The SA.
        item: ConfigItem,
        /// The enclave's refusal (it never carries key bytes).
        source: enclave::Error,
    },
}

/// Result alias for this crate's control-plane calls.
pub type Result<T> = core::result::Result<T, Error>;

impl From<wire::selector::SelectorError> for Error {
    fn from(e: wire::selector::SelectorError) -> Self {
        Self::InvalidSelector { what: e.what, why: e.why }
    }
}
