//! The store's one error type.

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, created, read or written.
    #[error("store {path}: {why}")]
    Io {
        /// The store file.
        path: String,
        /// The backend's message.
        why: String,
    },
    /// A record name that is empty, too long or has control characters.
    #[error("record name {name:?} is not 1..=255 printable bytes")]
    BadName {
        /// The name, escaped.
        name: String,
    },
    /// A value put under a key of another kind.
    #[error("a {value:?} value cannot be stored as {key:?}")]
    KindMismatch {
        /// The key's kind.
        key: crate::Kind,
        /// The value's kind.
        value: crate::Kind,
    },
    /// A blob that does not have its format's header: refused, so that nothing but sealed or
    /// wrapped ciphertext is stored as one.
    #[error("not a {what}: {why}")]
    NotABlob {
        /// Which blob format.
        what: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// A stored record that cannot be read back as its kind (file damaged or written by
    /// something else).
    #[error("stored record {key} is unreadable: {why}")]
    Corrupt {
        /// The record.
        key: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// The store's result type.
pub type Result<T> = core::result::Result<T, Error>;
