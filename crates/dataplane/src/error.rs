//! The data plane's set-up errors. Per-packet failures are never errors: they are counted
//! ([`crate::stats`]).

/// Why the data plane could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file is refused (the message quotes nothing from the file).
    #[error("config {field}: {why}")]
    Config {
        /// The setting, or `file` for a parse error.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// The SAs or policies are refused, or the enclave refused a key.
    #[error(transparent)]
    Esp(#[from] esp::Error),
    /// A device or socket could not be set up.
    #[error(transparent)]
    Io(#[from] cio::Error),
    /// The enclave could not start.
    #[error("enclave: {0}")]
    Enclave(#[from] enclave::Error),
    /// A worker thread could not be started.
    #[error("starting worker {index}: {source}")]
    Spawn {
        /// The worker.
        index: usize,
        /// The OS error.
        source: std::io::Error,
    },
}
