//! The security association database (RFC 4301 §4.4.2): per SA, a cold configuration that
//! the control plane writes once, apart from the hot per-direction runtime (sequence numbers,
//! replay window, counters) that every packet touches.
//!
//! # Ownership across workers
//!
//! The data path only ever holds `&Sad`: every hot field is atomic, so one SA's traffic can
//! be spread over all workers. Outbound sequence numbers are reserved a run at a time (one
//! saturating compare-and-swap per run of one SA's packets in a batch; each number is handed
//! out once), and the lifetime counters take a run's packets and bytes with one relaxed add
//! each; the inbound replay window is lock-free ([`crate::ReplayWindow`]). Installing and removing SAs takes
//! `&mut Sad`: the I/O layer publishes a new table to its workers (RCU-style) or pauses them.
//!
//! Spreading one outbound SA over several workers: the enclave accepts each number once
//! within a window of 2048 below the highest it used (it guards against IV reuse), and a
//! number used twice or further behind is refused packet by packet and counted as
//! [`DropReason::EnclaveRefused`]. Workers that share one enclave draw a batch's numbers
//! while they hold it ([`crate::SharedEnclave`]), so the numbers arrive in order.
//!
//! Lifetimes (RFC 4301 §4.4.2.1, RFC 7296 §2.8): byte and packet limits are enforced per
//! packet against the hard limit; soft limits, time limits and the events for the IKE
//! engine are evaluated by [`Sad::handle_timeout`] at times the caller chooses (see
//! [`Sad::poll_timeout`], and [`crate::BatchReport::lifetime_check_due`]).

use core::net::IpAddr;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use enclave::{EspSaHandle, Suite};

use crate::drop::{DropReason, SharedDropCounts};
use crate::error::{Error, Result};
use crate::replay::{ReplayWindow, DEFAULT_WINDOW};
use crate::selector::TrafficSelector;

/// Names an outbound SA (outbound SPIs are the peer's choice, so they are not unique keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutboundSaId(pub u32);

impl core::fmt::Display for OutboundSaId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

pub use wire::udp_encap::Encapsulation;

/// One set of limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LifetimeLimits {
    /// Bytes of inner packets.
    pub bytes: Option<u64>,
    /// Packets.
    pub packets: Option<u64>,
    /// Time since the SA was installed.
    pub time: Option<Duration>,
}

/// Soft limits (rekey now) and hard limits (stop using the SA), RFC 4301 §4.4.2.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Lifetime {
    /// Crossing one raises a [`LifetimeKind::Soft`] event.
    pub soft: LifetimeLimits,
    /// Crossing one raises a [`LifetimeKind::Hard`] event and drops the SA's packets.
    pub hard: LifetimeLimits,
}

/// The outer IPv4 path MTU when none is configured (Ethernet).
pub const DEFAULT_PATH_MTU: u16 = 1500;

/// The cold part of one SA direction: written at install, read by every packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaConfig {
    /// The SPI (ours for inbound, the peer's for outbound).
    pub spi: u32,
    /// The enclave's handle for this direction's keys.
    pub handle: EspSaHandle,
    /// The transform.
    pub suite: Suite,
    /// 64-bit Extended Sequence Numbers (RFC 4303 §2.2.1).
    pub esn: bool,
    /// Our tunnel endpoint address.
    pub local: IpAddr,
    /// The peer's tunnel endpoint address.
    pub remote: IpAddr,
    /// Raw ESP or ESP-in-UDP.
    pub encapsulation: Encapsulation,
    /// Traffic selectors on our side (TSi or TSr, whichever is ours); not empty.
    pub local_selectors: Vec<TrafficSelector>,
    /// Traffic selectors on the peer's side; not empty.
    pub remote_selectors: Vec<TrafficSelector>,
    /// Soft and hard limits.
    pub lifetime: Lifetime,
    /// Outbound only: the path MTU towards the peer, outer headers included.
    pub path_mtu: u16,
    /// Inbound only: the anti-replay window in packets.
    pub replay_window: u32,
}

impl SaConfig {
    /// A raw-ESP SA with every other field at its default: selectors that admit everything
    /// of the endpoints' family, no lifetime limits, 1500-byte path MTU, the default replay window.
    pub fn new(spi: u32, handle: EspSaHandle, suite: Suite, local: IpAddr, remote: IpAddr) -> Self {
        let any = |a: IpAddr| {
            vec![TrafficSelector::addresses(if a.is_ipv6() {
                crate::AddressRange::ANY_V6
            } else {
                crate::AddressRange::ANY_V4
            })]
        };
        Self {
            spi,
            handle,
            suite,
            esn: false,
            local,
            remote,
            encapsulation: Encapsulation::Esp,
            local_selectors: any(local),
            remote_selectors: any(remote),
            lifetime: Lifetime::default(),
            path_mtu: DEFAULT_PATH_MTU,
            replay_window: DEFAULT_WINDOW,
        }
    }

    /// Checks the fields that do not depend on the direction.
    fn validate(&self) -> Result<()> {
        let bad = |field, why| Err(Error::InvalidSa { field, why });
        if self.spi == 0 {
            return bad("spi", "SPI 0 is reserved (RFC 4303 §2.1)");
        }
        if !self.suite.is_consistent() {
            return bad("suite", "AEADs take no integrity algorithm, AES-CBC needs one");
        }
        if self.local.is_ipv6() != self.remote.is_ipv6() {
            return bad("remote", "tunnel endpoints of different address families");
        }
        if self.local.is_unspecified() || self.remote.is_unspecified() {
            return bad("local", "tunnel endpoints must be real addresses");
        }
        if let Encapsulation::Udp { local_port, remote_port } = self.encapsulation {
            if local_port == 0 || remote_port == 0 {
                return bad("encapsulation", "UDP port 0");
            }
        }
        if self.local_selectors.is_empty() || self.remote_selectors.is_empty() {
            return bad("local_selectors", "an SA needs at least one selector on each side");
        }
        let (s, h) = (self.lifetime.soft, self.lifetime.hard);
        let above = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a > b);
        let later = matches!((s.time, h.time), (Some(a), Some(b)) if a > b);
        if above(s.bytes, h.bytes) || above(s.packets, h.packets) || later {
            return bad("lifetime", "a soft limit is above its hard limit");
        }
        Ok(())
    }

    /// Checks an inbound SA's fields.
    pub(crate) fn check_inbound(&self) -> Result<()> {
        self.validate()?;
        if !(crate::replay::MIN_WINDOW..=crate::replay::MAX_WINDOW).contains(&self.replay_window) {
            return Err(Error::InvalidSa { field: "replay_window", why: "must be 32..=65504 packets" });
        }
        Ok(())
    }

    /// Checks an outbound SA's fields.
    pub(crate) fn check_outbound(&self) -> Result<()> {
        self.validate()?;
        let min_mtu = if self.local.is_ipv6() { 1280 } else { 576 };
        if self.path_mtu < min_mtu {
            return Err(Error::InvalidSa {
                field: "path_mtu",
                why: "below the minimum MTU (576 IPv4, 1280 IPv6)",
            });
        }
        Ok(())
    }

    /// Bytes of outer IP header (and UDP) in front of ESP.
    pub fn outer_header_len(&self) -> usize {
        let ip = if self.local.is_ipv6() { wire::ipv6::HEADER_LEN } else { wire::ipv4::HEADER_LEN };
        match self.encapsulation {
            Encapsulation::Esp => ip,
            Encapsulation::Udp { .. } => ip + wire::udp::HEADER_LEN,
        }
    }
}

/// Where an SA stands against its limits; set by the data path or `handle_timeout`.
#[derive(Debug, Default)]
struct Usage {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// Hard limit reached (or sequence numbers used up): drop everything.
    expired: AtomicBool,
}

impl Usage {
    /// Counts `packets` packets of `bytes` bytes in all with one atomic add per counter;
    /// returns both totals as they were before.
    fn reserve(&self, packets: u64, bytes: u64) -> (u64, u64) {
        (self.packets.fetch_add(packets, Ordering::Relaxed), self.bytes.fetch_add(bytes, Ordering::Relaxed))
    }

    /// Judges one packet of `len` bytes that brought the totals to `packets` and `bytes`:
    /// `Ok(true)` when it crossed a soft or hard limit (so the caller asks for
    /// `handle_timeout`), `HardLifetime` when it is past a hard limit.
    fn judge(
        &self,
        life: &Lifetime,
        packets: u64,
        bytes: u64,
        len: u64,
    ) -> core::result::Result<bool, DropReason> {
        let crossed = |limit: Option<u64>, now: u64, step: u64| {
            limit.is_some_and(|l| now >= l && now.saturating_sub(step) < l)
        };
        let over = |limit: Option<u64>, now: u64| limit.is_some_and(|l| now > l);
        if over(life.hard.packets, packets) || over(life.hard.bytes, bytes) {
            self.expired.store(true, Ordering::Relaxed);
            return Err(DropReason::HardLifetime);
        }
        Ok(crossed(life.soft.packets, packets, 1)
            || crossed(life.soft.bytes, bytes, len)
            || crossed(life.hard.packets, packets, 1)
            || crossed(life.hard.bytes, bytes, len))
    }

    fn is_expired(&self) -> bool {
        self.expired.load(Ordering::Relaxed)
    }
}

/// The last sequence number an outbound SA may send: 2^32 - 1 without ESN, 2^64 - 2 with it
/// (2^64 - 1 is where the counter saturates, RFC 4303 §3.3.3: a sender never cycles it).
fn last_seq(esn: bool) -> u64 {
    if esn {
        u64::MAX - 1
    } else {
        u64::from(u32::MAX)
    }
}

/// The hot part of an outbound SA, shared by every worker.
#[derive(Debug)]
#[repr(align(64))]
pub struct OutboundRuntime {
    /// The next sequence number to hand out (RFC 4303 §3.3.3: the first packet has 1).
    next_seq: AtomicU64,
    path_mtu: AtomicU32,
    usage: Usage,
    drops: SharedDropCounts,
}

// The runtime must stay a few cache lines: it is touched by every packet of the SA.
const _: () = assert!(core::mem::size_of::<OutboundRuntime>() <= 256);

impl OutboundRuntime {
    fn new(path_mtu: u16) -> Self {
        Self {
            next_seq: AtomicU64::new(1),
            path_mtu: AtomicU32::new(u32::from(path_mtu)),
            usage: Usage::default(),
            drops: SharedDropCounts::default(),
        }
    }

    /// Reserves a run of `packets` consecutive sequence numbers, and counts the run's
    /// `bytes` against the limits: one atomic operation per counter for a whole run of one
    /// SA's packets in a batch, not one per packet. Each packet is then judged with
    /// [`Self::judge`].
    pub(crate) fn reserve(&self, packets: u64, bytes: u64) -> Reservation {
        let first_seq = self.draw(packets);
        let (packets_before, bytes_before) = self.usage.reserve(packets, bytes);
        Reservation { first_seq, packets_before, bytes_before }
    }

    /// Takes `count` numbers off the counter; the first of them.
    fn draw(&self, count: u64) -> u64 {
        // A compare-and-swap that saturates, not a fetch_add: the counter must never wrap
        // back to numbers already sent, however many runs race past the end of the space.
        let mut cur = self.next_seq.load(Ordering::Relaxed);
        while cur != u64::MAX {
            let new = cur.saturating_add(count);
            match self.next_seq.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        cur
    }

    /// A fresh number for a packet already counted against the lifetime, whose first number
    /// the enclave refused as stale ([`enclave::EspStatus::SeqStale`]); `SeqExhausted` (and
    /// the SA expired) past the end of the space, as [`Self::judge`].
    pub(crate) fn redraw(&self, esn: bool) -> core::result::Result<u64, DropReason> {
        self.usable(Some(self.draw(1)), esn)
    }

    /// `seq` if it is a number the SA may send (1 to 2^32 - 1 without ESN, to 2^64 - 2
    /// with it); otherwise `SeqExhausted`, and the SA expires (RFC 4303 §3.3.3: a sender
    /// never cycles the counter). `None`: past the end of the space.
    fn usable(&self, seq: Option<u64>, esn: bool) -> core::result::Result<u64, DropReason> {
        let last = last_seq(esn);
        seq.filter(|&s| s != 0 && s <= last).ok_or_else(|| {
            self.usage.expired.store(true, Ordering::Relaxed);
            DropReason::SeqExhausted
        })
    }

    /// The `k`-th packet (from 0) of run `r`, `len` bytes with `bytes_before` bytes of the
    /// run ahead of it: its sequence number and whether it crossed a limit, or why it is
    /// dropped. `SeqExhausted` past 2^32 - 1 without ESN and 2^64 - 1 with it (RFC 4303
    /// §3.3.3: a sender never cycles the counter); that also expires the SA.
    pub(crate) fn judge(
        &self,
        r: &Reservation,
        k: u64,
        bytes_before: u64,
        len: u64,
        esn: bool,
        life: &Lifetime,
    ) -> core::result::Result<(u64, bool), DropReason> {
        let seq = self.usable(r.first_seq.checked_add(k), esn)?;
        let (packets, bytes) = r.totals(k, bytes_before, len);
        let crossed = self.usage.judge(life, packets, bytes, len)?;
        Ok((seq, crossed))
    }

    /// Hands out one sequence number (see [`Self::reserve`]).
    #[cfg(test)]
    pub(crate) fn next_seq(&self, esn: bool) -> core::result::Result<u64, DropReason> {
        let r = self.reserve(1, 0);
        self.judge(&r, 0, 0, 0, esn, &Lifetime::default()).map(|(seq, _)| seq)
    }

    /// The sequence number the next packet gets.
    pub fn peek_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Relaxed)
    }

    /// Sets the next sequence number (known-answer tests; restoring a migrated SA). It must
    /// never go back on a live SA: the enclave would refuse, rightly.
    pub fn set_next_seq(&self, seq: u64) {
        self.next_seq.store(seq, Ordering::Relaxed);
    }

    /// The current path MTU.
    pub fn path_mtu(&self) -> u16 {
        u16::try_from(self.path_mtu.load(Ordering::Relaxed)).unwrap_or(u16::MAX)
    }

    /// Packets and inner bytes sent so far.
    pub fn usage(&self) -> (u64, u64) {
        (self.usage.packets.load(Ordering::Relaxed), self.usage.bytes.load(Ordering::Relaxed))
    }

    /// Whether the SA is past a hard limit.
    pub fn is_expired(&self) -> bool {
        self.usage.is_expired()
    }

    /// Drops of this SA's packets, by reason.
    pub fn drops(&self) -> &SharedDropCounts {
        &self.drops
    }
}

/// A run of sequence numbers reserved by [`OutboundRuntime::reserve`], with the SA's usage
/// totals just before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation {
    first_seq: u64,
    packets_before: u64,
    bytes_before: u64,
}

impl Reservation {
    /// The run's first sequence number.
    pub(crate) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The SA's usage totals once the `k`-th packet of the run (from 0), of `len` bytes with
    /// `bytes_before` bytes of the run ahead of it, is counted.
    fn totals(&self, k: u64, bytes_before: u64, len: u64) -> (u64, u64) {
        let packets = self.packets_before.saturating_add(k).saturating_add(1);
        (packets, self.bytes_before.saturating_add(bytes_before).saturating_add(len))
    }

    /// Whether [`OutboundRuntime::judge`] gives every packet `k` of this run, `packets`
    /// packets of `bytes` bytes in all, its number `first_seq + k` and no crossing: every
    /// number in the space, and no limit within the run's span of the SA's totals (a soft
    /// one may lie behind it). Then the caller may skip the per-packet judging; otherwise
    /// some packet crosses or breaks a limit, or the run is at an edge of the counters, and
    /// each packet must be judged.
    pub(crate) fn is_clear(&self, packets: u64, bytes: u64, esn: bool, life: &Lifetime) -> bool {
        let Some(run_last) = self.first_seq.checked_add(packets).and_then(|e| e.checked_sub(1)) else {
            return false;
        };
        let (Some(packets_end), Some(bytes_end)) =
            (self.packets_before.checked_add(packets), self.bytes_before.checked_add(bytes))
        else {
            return false;
        };
        // A packet crosses limit `l` when its total reaches `l` from below: the run's totals
        // span (before, end]. A hard limit behind it means the SA is over it already.
        let soft_clear = |l: Option<u64>, before: u64, end: u64| l.is_none_or(|l| l > end || l <= before);
        let hard_clear = |l: Option<u64>, end: u64| l.is_none_or(|l| l > end);
        self.first_seq != 0
            && run_last <= last_seq(esn)
            && soft_clear(life.soft.packets, self.packets_before, packets_end)
            && soft_clear(life.soft.bytes, self.bytes_before, bytes_end)
            && hard_clear(life.hard.packets, packets_end)
            && hard_clear(life.hard.bytes, bytes_end)
    }
}

/// The hot part of an inbound SA, shared by every worker.
#[derive(Debug)]
#[repr(align(64))]
pub struct InboundRuntime {
    window: ReplayWindow,
    usage: Usage,
    drops: SharedDropCounts,
    /// ICV failures since the last authenticated packet (RFC 4303 Appendix A3.1), what
    /// starts an ESN re-synchronisation.
    auth_failures: AtomicU32,
}

const _: () = assert!(core::mem::size_of::<InboundRuntime>() <= 256);

impl InboundRuntime {
    /// The anti-replay window.
    pub fn window(&self) -> &ReplayWindow {
        &self.window
    }

    /// Packets and inner bytes received (authenticated) so far.
    pub fn usage(&self) -> (u64, u64) {
        (self.usage.packets.load(Ordering::Relaxed), self.usage.bytes.load(Ordering::Relaxed))
    }

    /// Whether the SA is past a hard limit.
    pub fn is_expired(&self) -> bool {
        self.usage.is_expired()
    }

    /// Drops of this SA's packets, by reason.
    pub fn drops(&self) -> &SharedDropCounts {
        &self.drops
    }

    /// ICV failures since the last authenticated packet (consecutive across every worker,
    /// as closely as batches interleave).
    pub fn auth_failures(&self) -> u32 {
        self.auth_failures.load(Ordering::Relaxed)
    }

    /// Records one batch run's outcome: `failures` ICV failures after its last authenticated
    /// packet, and whether it had one. Costs a load and no store while packets authenticate
    /// and nothing failed (the hot path).
    pub(crate) fn record_auth(&self, authenticated: bool, failures: u32) {
        if authenticated {
            if self.auth_failures.load(Ordering::Relaxed) != failures {
                self.auth_failures.store(failures, Ordering::Relaxed);
            }
        } else if failures > 0 {
            let _ = self
                .auth_failures
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_add(failures)));
        }
    }

    /// Counts a run of `packets` authenticated packets of `bytes` bytes in all with one
    /// atomic add per counter; each is then judged with [`Self::judge`].
    pub(crate) fn reserve(&self, packets: u64, bytes: u64) -> Reservation {
        let (packets_before, bytes_before) = self.usage.reserve(packets, bytes);
        Reservation { first_seq: 0, packets_before, bytes_before }
    }

    /// The `k`-th packet (from 0) of run `r`, `len` bytes with `bytes_before` bytes of the
    /// run ahead of it: whether it crossed a limit, or `HardLifetime` past a hard one.
    pub(crate) fn judge(
        &self,
        r: &Reservation,
        k: u64,
        bytes_before: u64,
        len: u64,
        life: &Lifetime,
    ) -> core::result::Result<bool, DropReason> {
        let (packets, bytes) = r.totals(k, bytes_before, len);
        self.usage.judge(life, packets, bytes, len)
    }
}

/// Control-plane bookkeeping of one SA's lifetime events.
#[derive(Debug, Clone, Copy)]
struct LifeState {
    installed: Instant,
    soft_reported: bool,
    hard_reported: bool,
}

impl LifeState {
    fn new(now: Instant) -> Self {
        Self { installed: now, soft_reported: false, hard_reported: false }
    }
}

/// One outbound SA: cold configuration and hot runtime.
#[derive(Debug)]
pub struct OutboundSa {
    config: SaConfig,
    runtime: OutboundRuntime,
    life: LifeState,
}

impl OutboundSa {
    /// The configuration.
    pub fn config(&self) -> &SaConfig {
        &self.config
    }

    /// The runtime.
    pub fn runtime(&self) -> &OutboundRuntime {
        &self.runtime
    }
}

/// One inbound SA: cold configuration and hot runtime.
#[derive(Debug)]
pub struct InboundSa {
    config: SaConfig,
    runtime: InboundRuntime,
    life: LifeState,
}

impl InboundSa {
    /// The configuration.
    pub fn config(&self) -> &SaConfig {
        &self.config
    }

    /// The runtime.
    pub fn runtime(&self) -> &InboundRuntime {
        &self.runtime
    }
}

/// Which SA an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaRef {
    /// An inbound SA, by our SPI.
    Inbound {
        /// The SPI.
        spi: u32,
    },
    /// An outbound SA.
    Outbound {
        /// Its identifier.
        id: OutboundSaId,
        /// The peer's SPI.
        spi: u32,
    },
}

/// Soft (rekey) or hard (expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifetimeKind {
    /// Rekey now (RFC 7296 §2.8).
    Soft,
    /// The SA no longer carries traffic: delete it.
    Hard,
}

/// Which limit was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifetimeTrigger {
    /// Bytes.
    Bytes,
    /// Packets.
    Packets,
    /// Time.
    Time,
    /// Outbound sequence numbers: 7/8 used (soft) or all used (hard).
    SequenceNumbers,
}

/// What [`Sad::poll_event`] gives the IKE engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LifetimeEvent {
    /// The SA.
    pub sa: SaRef,
    /// Soft or hard.
    pub kind: LifetimeKind,
    /// The limit that was reached.
    pub trigger: LifetimeTrigger,
}

/// The limit of `limits` that `(packets, bytes, age)` has reached, if any.
fn reached(limits: &LifetimeLimits, packets: u64, bytes: u64, age: Duration) -> Option<LifetimeTrigger> {
    if limits.time.is_some_and(|t| age >= t) {
        Some(LifetimeTrigger::Time)
    } else if limits.packets.is_some_and(|l| packets >= l) {
        Some(LifetimeTrigger::Packets)
    } else if limits.bytes.is_some_and(|l| bytes >= l) {
        Some(LifetimeTrigger::Bytes)
    } else {
        None
    }
}

/// Evaluates one SA's limits and queues its events.
fn evaluate(
    sa: SaRef,
    life: &mut LifeState,
    lifetime: &Lifetime,
    usage: &Usage,
    seq: Option<(u64, bool)>,
    now: Instant,
    events: &mut VecDeque<LifetimeEvent>,
) {
    let packets = usage.packets.load(Ordering::Relaxed);
    let bytes = usage.bytes.load(Ordering::Relaxed);
    let age = now.saturating_duration_since(life.installed);
    // The sequence number space, outbound only: used up (hard) or 7/8 used (soft).
    let seq_exhausted = seq.is_some_and(|(next, esn)| next > last_seq(esn));
    let seq_late = seq.is_some_and(|(next, esn)| next.saturating_sub(1) >= last_seq(esn) / 8 * 7);
    if !life.hard_reported {
        // The data path refuses the first packet above a hard count, so "reached" is "above".
        let over = |l: Option<u64>, n: u64| l.is_some_and(|l| n > l);
        let hard = if seq_exhausted {
            Some(LifetimeTrigger::SequenceNumbers)
        } else if lifetime.hard.time.is_some_and(|t| age >= t) {
            Some(LifetimeTrigger::Time)
        } else if over(lifetime.hard.packets, packets) {
            Some(LifetimeTrigger::Packets)
        } else if over(lifetime.hard.bytes, bytes) {
            Some(LifetimeTrigger::Bytes)
        } else {
            None
        };
        if let Some(trigger) = hard {
            usage.expired.store(true, Ordering::Relaxed);
            life.hard_reported = true;
            life.soft_reported = true;
            events.push_back(LifetimeEvent { sa, kind: LifetimeKind::Hard, trigger });
            return;
        }
    }
    if !life.soft_reported {
        let soft = reached(&lifetime.soft, packets, bytes, age)
            .or_else(|| seq_late.then_some(LifetimeTrigger::SequenceNumbers));
        if let Some(trigger) = soft {
            life.soft_reported = true;
            events.push_back(LifetimeEvent { sa, kind: LifetimeKind::Soft, trigger });
        }
    }
}

/// Hashes the SAD's `u32` keys (SPIs, outbound SA ids) with one multiplication instead of
/// SipHash: two lookups per packet made SipHash a visible part of the per-packet cost.
/// Flooding is no concern here: the stored keys are ours (random SPIs, counter ids), so a
/// sender choosing the SPIs it sends controls only which absent keys are looked up, not how
/// the table's entries cluster.
#[derive(Debug, Default, Clone, Copy)]
struct KeyHasher(u64);

impl core::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u32` keys; kept correct for any other use.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        // Fibonacci hashing: the top bits (hashbrown's tag) and the low bits (its bucket)
        // both change with every bit of the key.
        let x = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

type BuildKeyHasher = core::hash::BuildHasherDefault<KeyHasher>;

/// The SA database of one tenant (both directions).
#[derive(Debug, Default)]
pub struct Sad {
    inbound: HashMap<u32, InboundSa, BuildKeyHasher>,
    outbound: HashMap<u32, OutboundSa, BuildKeyHasher>,
    next_outbound: u32,
    events: VecDeque<LifetimeEvent>,
}

impl Sad {
    /// An empty database.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs an inbound SA, selected by its SPI from now on.
    pub fn add_inbound(&mut self, config: SaConfig, now: Instant) -> Result<()> {
        config.check_inbound()?;
        if self.inbound.contains_key(&config.spi) {
            return Err(Error::DuplicateSpi { spi: config.spi });
        }
        let window = ReplayWindow::new(config.replay_window)?;
        let runtime = InboundRuntime {
            window,
            usage: Usage::default(),
            drops: SharedDropCounts::default(),
            auth_failures: AtomicU32::new(0),
        };
        self.inbound.insert(config.spi, InboundSa { config, runtime, life: LifeState::new(now) });
        Ok(())
    }

    /// Installs an outbound SA; policies refer to it by the returned identifier.
    pub fn add_outbound(&mut self, config: SaConfig, now: Instant) -> Result<OutboundSaId> {
        config.check_outbound()?;
        // Identifiers are never reused, so a stale policy can never reach a new SA.
        let id = self.next_outbound;
        self.next_outbound =
            id.checked_add(1).ok_or(Error::InvalidSa { field: "id", why: "identifier space used up" })?;
        let runtime = OutboundRuntime::new(config.path_mtu);
        self.outbound.insert(id, OutboundSa { config, runtime, life: LifeState::new(now) });
        Ok(OutboundSaId(id))
    }

    /// Removes an inbound SA and returns its configuration (delete its enclave handle next).
    pub fn remove_inbound(&mut self, spi: u32) -> Result<SaConfig> {
        self.inbound.remove(&spi).map(|sa| sa.config).ok_or(Error::UnknownInboundSa { spi })
    }

    /// Removes an outbound SA and returns its configuration (delete its enclave handle next).
    pub fn remove_outbound(&mut self, id: OutboundSaId) -> Result<SaConfig> {
        self.outbound.remove(&id.0).map(|sa| sa.config).ok_or(Error::UnknownOutboundSa { id: id.0 })
    }

    /// The inbound SA for an SPI.
    pub fn inbound(&self, spi: u32) -> Option<&InboundSa> {
        self.inbound.get(&spi)
    }

    /// An outbound SA.
    pub fn outbound(&self, id: OutboundSaId) -> Option<&OutboundSa> {
        self.outbound.get(&id.0)
    }

    /// Updates an outbound SA's path MTU (e.g. from an ICMP error on the outer path,
    /// RFC 4301 §8.2.1); works while workers use the SA.
    pub fn set_path_mtu(&self, id: OutboundSaId, mtu: u16) -> Result<()> {
        let sa = self.outbound(id).ok_or(Error::UnknownOutboundSa { id: id.0 })?;
        let min_mtu = if sa.config.local.is_ipv6() { 1280 } else { 576 };
        sa.runtime.path_mtu.store(u32::from(mtu.max(min_mtu)), Ordering::Relaxed);
        Ok(())
    }

    /// Number of (inbound, outbound) SAs.
    pub fn len(&self) -> (usize, usize) {
        (self.inbound.len(), self.outbound.len())
    }

    /// Evaluates every SA's soft and hard limits at `now`, marks hard-expired SAs so the
    /// data path drops their packets, and queues events for [`Self::poll_event`].
    pub fn handle_timeout(&mut self, now: Instant) {
        for sa in self.inbound.values_mut() {
            let r = SaRef::Inbound { spi: sa.config.spi };
            evaluate(r, &mut sa.life, &sa.config.lifetime, &sa.runtime.usage, None, now, &mut self.events);
        }
        for (&id, sa) in &mut self.outbound {
            let r = SaRef::Outbound { id: OutboundSaId(id), spi: sa.config.spi };
            let seq = Some((sa.runtime.peek_seq(), sa.config.esn));
            evaluate(r, &mut sa.life, &sa.config.lifetime, &sa.runtime.usage, seq, now, &mut self.events);
        }
    }

    /// The next time a time limit falls due, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let due = |life: &LifeState, lifetime: &Lifetime| {
            let soft = (!life.soft_reported).then_some(lifetime.soft.time).flatten();
            let hard = (!life.hard_reported).then_some(lifetime.hard.time).flatten();
            [soft, hard].into_iter().flatten().min().and_then(|t| life.installed.checked_add(t))
        };
        let inbound = self.inbound.values().filter_map(|sa| due(&sa.life, &sa.config.lifetime));
        let outbound = self.outbound.values().filter_map(|sa| due(&sa.life, &sa.config.lifetime));
        inbound.chain(outbound).min()
    }

    /// The next lifetime event, oldest first.
    pub fn poll_event(&mut self) -> Option<LifetimeEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enclave_core::Cipher;

    fn config(spi: u32) -> SaConfig {
        SaConfig::new(
            spi,
            EspSaHandle(1),
            Suite::aead(Cipher::AesGcm16_128),
            "198.18.0.1".parse().unwrap(),
            "198.18.1.1".parse().unwrap(),
        )
    }

    /// `is_clear` against judging each packet: over runs placed at, just before and just
    /// past every limit and at the ends of the number space, a clear run's packets are all
    /// judged `Ok((first + k, false))`, and every other run has a packet judged otherwise,
    /// but for totals at the end of the counters, which are always judged one by one.
    #[test]
    fn a_clear_run_is_exactly_one_that_judging_leaves_alone() {
        let lens = [1u64, 60, 1400, 7];
        let marks = [5u64, 6, 7, 8, 9, 10, 11, 1000, 1460, 1461, 1467, 1468, 2000];
        let mut checked = (0, 0);
        for esn in [false, true] {
            let firsts =
                [0, 1, 2, u64::from(u32::MAX) - 3, u64::from(u32::MAX) - 2, u64::MAX - 4, u64::MAX - 3];
            for first_seq in firsts {
                for (packets_before, bytes_before) in
                    [(0, 0), (5, 60), (7, 1461), (u64::MAX - 2, u64::MAX - 70)]
                {
                    for limit in marks.iter().map(|&m| Some(m)).chain([None]) {
                        for which in 0..4 {
                            let mut life = Lifetime::default();
                            match which {
                                0 => life.soft.packets = limit.map(|l| l % 20),
                                1 => life.soft.bytes = limit,
                                2 => life.hard.packets = limit.map(|l| l % 20 + 3),
                                _ => life.hard.bytes = limit,
                            }
                            let rt = OutboundRuntime::new(1500);
                            let bytes: u64 = lens.iter().sum();
                            let r = Reservation { first_seq, packets_before, bytes_before };
                            let clear = r.is_clear(4, bytes, esn, &life);
                            let mut ahead = 0;
                            let untouched = lens.iter().enumerate().all(|(k, &len)| {
                                let k = k as u64;
                                let j = rt.judge(&r, k, ahead, len, esn, &life);
                                ahead += len;
                                j == Ok((first_seq.wrapping_add(k), false))
                            });
                            let case =
                                format!("{first_seq} {packets_before} {bytes_before} {life:?} esn {esn}");
                            if packets_before < u64::MAX / 2 {
                                assert_eq!(clear, untouched, "{case}");
                            } else {
                                // Totals that saturate: judged one by one, whatever the limits.
                                assert!(!clear, "{case}");
                            }
                            if clear {
                                checked.0 += 1;
                            } else {
                                checked.1 += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked.0 > 100 && checked.1 > 100, "both outcomes covered: {checked:?}");
    }

    #[test]
    fn inbound_spis_are_unique_and_zero_is_refused() {
        let now = Instant::now();
        let mut sad = Sad::new();
        sad.add_inbound(config(0x100), now).unwrap();
        assert_eq!(sad.add_inbound(config(0x100), now), Err(Error::DuplicateSpi { spi: 0x100 }));
        assert!(matches!(sad.add_inbound(config(0), now), Err(Error::InvalidSa { field: "spi", .. })));
        assert!(sad.inbound(0x100).is_some());
        assert_eq!(sad.remove_inbound(0x100).unwrap().spi, 0x100);
        assert_eq!(sad.remove_inbound(0x100), Err(Error::UnknownInboundSa { spi: 0x100 }));
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let now = Instant::now();
        let mut sad = Sad::new();
        let mut c = config(1);
        c.remote = "2001:db8::1".parse().unwrap();
        assert!(matches!(sad.add_outbound(c, now), Err(Error::InvalidSa { field: "remote", .. })));
        let mut c = config(1);
        c.suite = Suite::aead(Cipher::AesCbc128);
        assert!(matches!(sad.add_outbound(c, now), Err(Error::InvalidSa { field: "suite", .. })));
        let mut c = config(1);
        c.path_mtu = 500;
        assert!(matches!(sad.add_outbound(c, now), Err(Error::InvalidSa { field: "path_mtu", .. })));
        let mut c = config(1);
        c.replay_window = 8;
        assert!(matches!(sad.add_inbound(c, now), Err(Error::InvalidSa { field: "replay_window", .. })));
        let mut c = config(1);
        c.lifetime.soft.packets = Some(10);
        c.lifetime.hard.packets = Some(5);
        assert!(matches!(sad.add_inbound(c, now), Err(Error::InvalidSa { field: "lifetime", .. })));
    }

    #[test]
    fn outbound_ids_are_never_reused() {
        let now = Instant::now();
        let mut sad = Sad::new();
        let a = sad.add_outbound(config(7), now).unwrap();
        sad.remove_outbound(a).unwrap();
        let b = sad.add_outbound(config(7), now).unwrap();
        assert_ne!(a, b);
        assert!(sad.outbound(a).is_none() && sad.outbound(b).is_some());
    }

    #[test]
    fn sequence_numbers_start_at_one_and_stop_at_the_limit() {
        let rt = OutboundRuntime::new(1500);
        assert_eq!(rt.next_seq(false), Ok(1));
        assert_eq!(rt.next_seq(false), Ok(2));
        rt.set_next_seq(u64::from(u32::MAX));
        assert_eq!(rt.next_seq(false), Ok(u64::from(u32::MAX)));
        assert_eq!(rt.next_seq(false), Err(DropReason::SeqExhausted));
        assert!(rt.is_expired());
        let rt = OutboundRuntime::new(1500);
        rt.set_next_seq(u64::from(u32::MAX) + 1);
        assert_eq!(rt.next_seq(true), Ok(u64::from(u32::MAX) + 1));
        rt.set_next_seq(u64::MAX);
        assert_eq!(rt.next_seq(true), Err(DropReason::SeqExhausted));
    }

    #[test]
    fn a_run_takes_consecutive_numbers_and_is_judged_per_packet() {
        let rt = OutboundRuntime::new(1500);
        let mut life = Lifetime::default();
        life.hard.bytes = Some(250);
        let a = rt.reserve(3, 300);
        let b = rt.reserve(2, 0);
        let seq = |r: &Reservation, k: u64| rt.judge(r, k, 0, 0, false, &Lifetime::default()).map(|(s, _)| s);
        assert_eq!((seq(&a, 0), seq(&a, 2), seq(&b, 0), seq(&b, 1)), (Ok(1), Ok(3), Ok(4), Ok(5)));
        assert_eq!(rt.peek_seq(), 6);
        // The byte limit falls inside the run: the packets before it pass, the rest do not.
        assert_eq!(rt.judge(&a, 0, 0, 100, false, &life), Ok((1, false)));
        assert_eq!(rt.judge(&a, 1, 100, 100, false, &life), Ok((2, false)));
        assert_eq!(rt.judge(&a, 2, 200, 100, false, &life), Err(DropReason::HardLifetime));
        assert!(rt.is_expired());
    }

    #[test]
    fn runs_past_the_end_of_the_space_never_wrap() {
        let rt = OutboundRuntime::new(1500);
        rt.set_next_seq(u64::MAX - 2);
        let a = rt.reserve(4, 0);
        let b = rt.reserve(4, 0);
        let seq = |r: &Reservation, k: u64| rt.judge(r, k, 0, 0, true, &Lifetime::default()).map(|(s, _)| s);
        assert_eq!(seq(&a, 0), Ok(u64::MAX - 2));
        assert_eq!(seq(&a, 1), Ok(u64::MAX - 1));
        assert_eq!(seq(&a, 2), Err(DropReason::SeqExhausted), "2^64 - 1 is never sent");
        assert_eq!(seq(&a, 3), Err(DropReason::SeqExhausted));
        assert_eq!((seq(&b, 0), seq(&b, 3)), (Err(DropReason::SeqExhausted), Err(DropReason::SeqExhausted)));
        assert_eq!(rt.peek_seq(), u64::MAX, "the counter saturates");
        assert!(rt.is_expired());
    }

    #[test]
    fn soft_then_hard_events_by_packets_and_time() {
        let t0 = Instant::now();
        let mut sad = Sad::new();
        let mut c = config(9);
        c.lifetime.soft.packets = Some(2);
        c.lifetime.hard.packets = Some(3);
        c.lifetime.soft.time = Some(Duration::from_secs(60));
        c.lifetime.hard.time = Some(Duration::from_secs(90));
        let id = sad.add_outbound(c.clone(), t0).unwrap();
        sad.add_inbound(c, t0).unwrap();
        assert_eq!(sad.poll_timeout(), Some(t0 + Duration::from_secs(60)));
        let rt = &sad.outbound(id).unwrap().runtime;
        let life = sad.outbound(id).unwrap().config.lifetime;
        // One run of four packets, judged one by one as the worker does.
        let run = rt.reserve(4, 400);
        let judge = |k: u64| rt.judge(&run, k, 100 * k, 100, false, &life).map(|(_, crossed)| crossed);
        assert_eq!(judge(0), Ok(false));
        assert_eq!(judge(1), Ok(true), "soft limit crossed");
        assert_eq!(judge(2), Ok(true), "hard limit reached, still allowed");
        assert_eq!(judge(3), Err(DropReason::HardLifetime));
        sad.handle_timeout(t0 + Duration::from_secs(1));
        let e = sad.poll_event().unwrap();
        assert_eq!(
            (e.sa, e.kind, e.trigger),
            (SaRef::Outbound { id, spi: 9 }, LifetimeKind::Hard, LifetimeTrigger::Packets)
        );
        assert_eq!(sad.poll_event(), None);
        // The inbound direction expires by time.
        sad.handle_timeout(t0 + Duration::from_secs(60));
        let e = sad.poll_event().unwrap();
        assert_eq!(
            (e.sa, e.kind, e.trigger),
            (SaRef::Inbound { spi: 9 }, LifetimeKind::Soft, LifetimeTrigger::Time)
        );
        assert_eq!(sad.poll_timeout(), Some(t0 + Duration::from_secs(90)));
        sad.handle_timeout(t0 + Duration::from_secs(90));
        let e = sad.poll_event().unwrap();
        assert_eq!((e.kind, e.trigger), (LifetimeKind::Hard, LifetimeTrigger::Time));
        assert!(sad.inbound(9).unwrap().runtime.is_expired());
        assert_eq!(sad.poll_timeout(), None);
        sad.handle_timeout(t0 + Duration::from_secs(1000));
        assert_eq!(sad.poll_event(), None, "each event once");
    }

    #[test]
    fn sequence_space_gives_a_soft_event() {
        let t0 = Instant::now();
        let mut sad = Sad::new();
        let id = sad.add_outbound(config(5), t0).unwrap();
        sad.outbound(id).unwrap().runtime.set_next_seq(u64::from(u32::MAX) / 8 * 7 + 1);
        sad.handle_timeout(t0);
        let e = sad.poll_event().unwrap();
        assert_eq!((e.kind, e.trigger), (LifetimeKind::Soft, LifetimeTrigger::SequenceNumbers));
    }

    #[test]
    fn path_mtu_updates_are_clamped() {
        let mut sad = Sad::new();
        let id = sad.add_outbound(config(5), Instant::now()).unwrap();
        sad.set_path_mtu(id, 1400).unwrap();
        assert_eq!(sad.outbound(id).unwrap().runtime.path_mtu(), 1400);
        sad.set_path_mtu(id, 100).unwrap();
        assert_eq!(sad.outbound(id).unwrap().runtime.path_mtu(), 576);
    }
}
