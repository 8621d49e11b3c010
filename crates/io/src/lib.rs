//! Packet I/O for Cloister's data plane: the only crate that makes syscalls through `unsafe`.
//!
//! What it does:
//!
//! * [`tun`]: TUN queues (`IFF_MULTI_QUEUE`, one per worker) with a virtio-net header
//!   (`IFF_VNET_HDR`) and the offloads the kernel accepts (checksum, TSO, USO), probed and
//!   reported as [`tun::TunOffloads`];
//! * [`vnet`] and [`gso`]: the virtio-net header, and pure functions that cut a TSO/USO
//!   super-packet read from a TUN queue into MSS-sized IP packets and complete partial
//!   checksums (no device needed: they are unit-tested on byte arrays); [`gro`], their
//!   inverse for the other direction: consecutive TCP segments merged into one super-packet
//!   for one TUN write;
//! * [`udp`]: UDP sockets (one per worker with `SO_REUSEPORT`) with batched `recvmmsg` /
//!   `sendmmsg`, UDP GSO (`UDP_SEGMENT`) on send and UDP GRO on receive where the kernel
//!   accepts them, reported as [`udp::UdpOffloads`];
//! * [`raw_esp`]: raw IP protocol 50 sockets for IPv4 and IPv6, normalised so that callers
//!   always get the ESP payload and both addresses;
//! * [`netdev`] (link up, MTU, addresses, routes through the classic ioctls), [`poll`]
//!   (bounded waits and an eventfd to wake workers), [`signal`] (waiting for SIGINT/SIGTERM
//!   without a handler), [`netns`] (moving a thread into a network namespace).
//!
//! What it does not do: ESP, IKE or any parsing beyond the IP/TCP/UDP headers GSO needs;
//! threads or policy (the `dataplane` crate does); AF_XDP (later).
//!
//! Every wait is bounded (non-blocking receives, `poll` timeouts, `SO_SNDTIMEO` on sends),
//! and every `unsafe` block says which invariant makes it sound.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod error;
pub mod gro;
pub mod gso;
mod mmsg;
pub mod netdev;
pub mod netns;
pub mod poll;
pub mod raw_esp;
pub mod signal;
mod sys;
mod tcpip;
pub mod tun;
pub mod udp;
pub mod vnet;

pub use error::{Error, Result};
pub use mmsg::{Datagram, Outgoing, RecvBuffers, SendReport, MAX_MESSAGES};
