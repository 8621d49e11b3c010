//! The error of set-up calls (opening devices and sockets). Per-packet failures are not
//! errors: receive and send calls report counts, and callers count drops.

/// Why opening or configuring a device or socket failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{call} on {object}: {source}")]
    Syscall {
        /// The call (`"TUNSETIFF"`, `"bind"`, ...).
        call: &'static str,
        /// What it was made on (a device or socket address).
        object: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
    /// An argument was refused before any call.
    #[error("{what} {value:?}: {why}")]
    Invalid {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: String,
        /// Why.
        why: &'static str,
    },
    /// The process's [`crate::netns::Lender`] refused.
    #[error("namespace {name}: {why}")]
    Lender {
        /// The namespace asked for.
        name: String,
        /// The lender's answer.
        why: String,
    },
}

/// Result alias for this crate's set-up calls.
pub type Result<T> = core::result::Result<T, Error>;
