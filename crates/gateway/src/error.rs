//! The gateway's errors: configuration and start-up. Per-datagram trouble is counted by the
//! engine and the data plane, never an error here.

use std::path::PathBuf;

/// This crate's result.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Why the gateway could not start or a control request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A setting is refused (the message quotes no value from the file).
    #[error("config {field}: {why}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// The provisioning key file is refused.
    #[error("provisioning key {path}: {why}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: &'static str,
    },
    /// The `[dataplane]` table is refused, or the data plane could not start.
    #[error("data plane: {0}")]
    Dataplane(#[source] dataplane::Error),
    /// The connections or secrets are refused.
    #[error("ike: {0}")]
    Ike(#[source] ike::Error),
    /// The enclave refused a call or could not start.
    #[error("enclave: {0}")]
    Enclave(#[from] enclave::Error),
    /// A socket could not be set up or used.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A worker of the data plane panicked while holding the SA tables.
    #[error("the data plane's tables are unusable (a worker panicked)")]
    Poisoned,
}
