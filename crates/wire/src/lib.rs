//! Zero-copy typed packet views and the IKEv2 message codec.
//!
//! Each wire format has a *view* (`XxxPacket<T: AsRef<[u8]>>`) that reads and writes fields
//! in place at fixed offsets, and where useful a *representation* (`XxxRepr`) with
//! `parse`/`buffer_len`/`emit`. Views are built with `new_checked` on untrusted input, which
//! verifies every length the getters rely on, so no getter can panic afterwards; `emit`
//! is only ever given buffers sized by `buffer_len`.
//!
//! This crate does no I/O, no cryptography and reads no clock. ESP ciphertext and the IKEv2
//! SK payload stay opaque here: the enclave decides what is authentic.
#![forbid(unsafe_code)]

mod error;
pub use error::Error;

/// IKEv2 message codec (RFC 7296, RFC 7383 fragments).
pub mod ike;

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;
