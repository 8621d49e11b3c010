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

mod bytes;
pub mod checksum;
pub mod esp;
pub mod esp_trailer;
#[cfg(fuzzing)]
pub mod fuzzing_views;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6_ext;
pub mod selector;
pub mod udp;
pub mod udp_encap;

pub use esp::{EspPacket, EspParts, EspPartsMut, EspRepr};
pub use esp_trailer::EspTrailer;
pub use icmpv4::{Icmpv4Packet, Icmpv4Repr, Icmpv4Type};
pub use icmpv6::{Icmpv6Packet, Icmpv6Repr, Icmpv6Type};
pub use ip::{Ecn, IpPair, IpProtocol};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use udp::{UdpPacket, UdpRepr};
pub use udp_encap::UdpEncapPayload;

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;
