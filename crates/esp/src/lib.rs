//! The ESP data plane core of Cloister: tunnel-mode ESP (RFC 4303) between the cloud side
//! and a tenant's site, as a sans-IO library.
//!
//! What it does:
//!
//! * keeps the SA database ([`Sad`]): per SA a cold [`SaConfig`] (peer, transform, traffic
//!   selectors, lifetimes, raw ESP or ESP-in-UDP, ESN) apart from the hot, atomic runtime
//!   (sequence numbers, a lock-free [`ReplayWindow`], counters); it holds enclave handles
//!   ([`enclave::EspSaHandle`]), never keys;
//! * keeps the security policy database ([`Spd`]): first match by priority, PROTECT with an
//!   SA, BYPASS or DISCARD;
//! * encapsulates and decapsulates [`Batch`]es of packets laid out in one caller-owned area,
//!   with **one** `esp_batch` enclave crossing per batch ([`Worker`]): outer IPv4/IPv6 (+UDP),
//!   ESP header, padding and trailer, RFC 6040 ECN, inner TTL, path MTU (ICMP errors inward,
//!   IPv4 fragmentation of the inner packet), anti-replay check before and commit after
//!   authentication, ESN, traffic selector checks on decapsulation;
//! * counts every dropped packet by [`DropReason`], per SA and per worker;
//! * raises soft and hard lifetime events ([`Sad::poll_event`]) for the IKE engine;
//! * reads a static configuration ([`config::StaticConfig`]) like `ip xfrm state/policy`.
//!
//! What it does not do: open sockets, spawn threads, read the clock (time is an argument)
//! or sleep; hold key bytes or do cryptography (the enclave does); IKE; transport mode or AH;
//! reassemble outer fragments; rate-limit the ICMP errors it builds (the pipeline element
//! that sends them inward does, RFC 4443 §2.4(f)). The per-packet path allocates nothing:
//! packets live in the caller's buffers and the scratch vectors of a [`Worker`] are reused.
//!
//! Workers and ownership: the data path takes `&Sad` and `&Spd`, so every worker can carry
//! any SA's traffic at once. Outbound sequence numbers are one atomic `fetch_add` each; the
//! inbound [`ReplayWindow`] is lock-free (tagged bitmap words updated by compare-and-swap);
//! counters are relaxed atomics. Changing the tables takes `&mut`: the I/O layer publishes
//! new tables to its workers. The enclave is reached through a [`Crossing`]: a worker with
//! a lane of its own (`Enclave::esp_lane`) crosses without a lock; workers that share one
//! enclave lock it for each encapsulation call (numbers are drawn and used in one hold) and
//! for each decapsulation crossing ([`SharedEnclave`]).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod batch;
pub mod config;
mod crossing;
mod drop;
pub mod ecn;
mod error;
#[cfg(fuzzing)]
pub mod fuzzing;
mod packet;
mod replay;
mod sad;
mod selector;
mod spd;
mod worker;

pub use batch::{Action, Batch, Frame, Packet, Transmit, HEADROOM, TAILROOM};
pub use crossing::{Crossing, SharedEnclave};
pub use drop::{DropCounts, DropReason, SharedDropCounts};
pub use error::{ConfigItem, Error, Result};
pub use replay::{ReplayWindow, DEFAULT_WINDOW, MAX_WINDOW, MIN_WINDOW};
pub use sad::{
    Encapsulation, InboundRuntime, InboundSa, Lifetime, LifetimeEvent, LifetimeKind, LifetimeLimits,
    LifetimeTrigger, OutboundRuntime, OutboundSa, OutboundSaId, SaConfig, SaRef, Sad, DEFAULT_PATH_MTU,
};
pub use selector::{parse_protocol, AddressRange, FiveTuple, PortRange, TrafficSelector};
pub use spd::{Policy, PolicyAction, PolicyId, PolicySelector, Spd};
pub use worker::{
    BatchReport, FastBatches, Worker, WorkerConfig, DEFAULT_ESN_RESYNC_AFTER, DEFAULT_ESN_RESYNC_TRIES,
    OUTER_TTL,
};
