//! The data plane's set-up and control errors. Per-packet failures are never errors: they
//! are counted ([`crate::stats`]).

use core::net::SocketAddr;

/// Why the data plane could not start, or a control call failed.
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
    /// No socket is bound to this local address.
    #[error("no ESP-in-UDP socket is bound to {local}")]
    NoSocket {
        /// The address asked for.
        local: SocketAddr,
    },
    /// The kernel refused a control datagram (e.g. an IKE message on the NAT-T port).
    #[error("sending from {local} to {remote} failed")]
    Send {
        /// Our address.
        local: SocketAddr,
        /// The peer's.
        remote: SocketAddr,
    },
    /// A worker thread could not be started.
    #[error("starting worker {index}: {source}")]
    Spawn {
        /// The worker.
        index: usize,
        /// The OS error.
        source: std::io::Error,
    },
}
