//! The one error type of the harness.

use std::time::Duration;

/// What went wrong while building or running a test network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A command could not be started at all.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A command ran but exited unsuccessfully.
    #[error("`{command}` failed with {status}: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// What it printed on standard error (trimmed).
        stderr: String,
    },
    /// A command or a wait did not finish within its bound; the command was killed.
    #[error("`{command}` did not finish within {limit:?}")]
    Timeout {
        /// The command line or the condition waited for.
        command: String,
        /// The bound that passed.
        limit: Duration,
    },
    /// An address outside the test ranges was given.
    #[error("address {addr} is outside 198.18.0.0/15 and 2001:db8::/32")]
    AddressNotForTests {
        /// The refused address, as given.
        addr: String,
    },
    /// A name or argument is unusable (too long, bad characters).
    #[error("invalid {what}: {value:?}")]
    Invalid {
        /// What was given.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// Reading or writing a file or process state failed.
    #[error("{what}: {source}")]
    Io {
        /// The operation.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}
