//! One worker's entry points: encapsulate or decapsulate a [`Batch`] with one enclave
//! crossing, reusing scratch vectors so the per-packet path allocates nothing.
//!
//! Outbound (RFC 4301 §5.1): inner packet → SPD lookup → SA → TTL → path MTU (ICMP error
//! inward, or IPv4 fragmentation) → sequence number and lifetime → trailer and outer headers
//! around the packet → **one** `esp_batch` (ENCRYPT) → UDP checksum over IPv6 → transmit.
//!
//! Inbound (RFC 4301 §5.2): outer header → UDP-encap classification (keepalive, IKE, ESP) →
//! SA by SPI → ESN inference and anti-replay *check* → **one** `esp_batch` (DECRYPT: verify
//! then decrypt) → anti-replay *commit* for authenticated packets only → trailer, Next
//! Header → traffic selectors → RFC 6040 ECN → TTL → deliver.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use enclave::{EspCrossing, EspDescriptor, EspStatus};
use wire::{Ecn, EspPacket, EspTrailer, IpProtocol, UdpEncapPayload};

use crate::batch::{Action, Batch, Frame, Transmit};
use crate::crossing::Crossing;
use crate::drop::{DropCounts, DropReason, SharedDropCounts};
use crate::ecn;
use crate::packet::{self, IcmpSources, Inner, Outer, OuterFields, Shape};
use crate::sad::{Encapsulation, InboundSa, OutboundSa, OutboundSaId, SaConfig, Sad};
use crate::selector::{FiveTuple, FlowKey};
use crate::spd::{PolicyAction, Spd};

mod fast_in;
mod fast_out;

/// The outer TTL / hop limit (RFC 4301 §5.1.2.1 note 2: "constructed").
pub const OUTER_TTL: u8 = 64;

/// Default of [`WorkerConfig::esn_resync_after`]: far above what a burst of lost or
/// damaged packets gives, and cheap to reach once 2^32 packets are gone.
pub const DEFAULT_ESN_RESYNC_AFTER: u32 = 64;

/// Default of [`WorkerConfig::esn_resync_tries`].
pub const DEFAULT_ESN_RESYNC_TRIES: u32 = 4;

/// Settings of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Most descriptors per enclave call ([`enclave::Limits::max_batch`]); larger batches
    /// cross in chunks of this size.
    pub max_batch: usize,
    /// Source of ICMP errors sent to IPv4 hosts; by default the destination of the packet
    /// that caused it.
    pub icmp_source_v4: Option<Ipv4Addr>,
    /// Source of ICMPv6 errors; by default the destination of the packet that caused it.
    pub icmp_source_v6: Option<Ipv6Addr>,
    /// ICV failures in a row on an ESN SA after which a failing packet is retried with
    /// higher halves of its sequence number (RFC 4303 Appendix A3.1's trigger, a local
    /// parameter). 0 turns re-synchronisation off.
    pub esn_resync_after: u32,
    /// Higher halves one re-synchronisation tries, one enclave call each (A3.2's retry
    /// limit): it recovers after up to this many times 2^32 lost packets.
    pub esn_resync_tries: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_batch: 256,
            icmp_source_v4: None,
            icmp_source_v6: None,
            esn_resync_after: DEFAULT_ESN_RESYNC_AFTER,
            esn_resync_tries: DEFAULT_ESN_RESYNC_TRIES,
        }
    }
}

/// What one call did, by outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchReport {
    /// Outer packets to send.
    pub transmit: u32,
    /// Inner packets to deliver.
    pub deliver: u32,
    /// ICMP errors built to send inward.
    pub icmp: u32,
    /// Packets to forward unprotected.
    pub bypass: u32,
    /// IKE messages for the IKE engine.
    pub ike: u32,
    /// NAT-keepalives consumed.
    pub keepalive: u32,
    /// Packets dropped (also those answered with an ICMP error).
    pub dropped: u32,
    /// Enclave calls made (1 unless the batch exceeded `max_batch` descriptors, or an ESN
    /// re-synchronisation retried a packet; 0 if no packet needed the enclave).
    pub crossings: u32,
    /// Packets that authenticated only with a higher half of their sequence number: the
    /// SA's receive side re-synchronised (RFC 4303 Appendix A3).
    pub resynced: u32,
    /// A packet crossed a soft or hard byte/packet limit: call [`Sad::handle_timeout`] soon.
    pub lifetime_check_due: bool,
}

/// Who a descriptor belongs to.
#[derive(Debug, Clone, Copy)]
enum Owner {
    /// Outbound: the SA, the outer header's fields (written once the sequence number is
    /// known) and the inner packet's length (what the lifetime counts).
    Out { id: OutboundSaId, fields: OuterFields, inner_len: usize },
    /// Inbound: the SA's SPI and the outer header's ECN (RFC 6040 decapsulation).
    In { spi: u32, outer_ecn: Ecn },
}

/// A packet handed to the enclave, with what finishing it needs.
#[derive(Debug, Clone, Copy)]
struct Pending {
    packet: usize,
    owner: Owner,
    seq: u64,
    /// Offsets within the slot: the outer packet (outbound) / the ESP packet (inbound).
    start: usize,
    len: usize,
}

/// A packet kept for an ESN re-synchronisation (RFC 4303 Appendix A3.2). Its ciphertext is
/// copied before the enclave call, because a failed AEAD open overwrites it.
#[derive(Debug, Clone, Copy)]
struct ResyncCandidate {
    packet: usize,
    /// Its index in `pending` if it went to the enclave with the inferred number; `None` if
    /// the window refused that number (then it waits, `Pending`, for the retries alone).
    pending: Option<usize>,
    spi: u32,
    outer_ecn: Ecn,
    /// The ESP packet's offset within the slot, and its length.
    start: usize,
    len: usize,
    seq_lo: u32,
}

/// The policy decision for the last inner packet of a call, reused while the next ones
/// belong to the same flow: within one call the SPD and SAD cannot change.
#[derive(Debug, Clone, Copy)]
struct Route<'s> {
    key: FlowKey,
    action: Option<PolicyAction>,
    sa: Option<&'s OutboundSa>,
}

/// Marks packet `i` dropped and counts it for the worker and, if known, the SA.
fn drop_packet(
    drops: &mut DropCounts,
    report: &mut BatchReport,
    batch: &mut Batch<'_>,
    i: usize,
    reason: DropReason,
    sa: Option<&SharedDropCounts>,
) {
    drops.record(reason);
    if let Some(sa) = sa {
        sa.record(reason);
    }
    report.dropped += 1;
    if let Some(p) = batch.packets.get_mut(i) {
        p.action = Action::Drop(reason);
    }
}

/// How packets of SA `id` leave, the ESP header at `esp_offset` of the slot.
fn transmit(id: OutboundSaId, cfg: &SaConfig, esp_offset: usize) -> Transmit {
    Transmit { sa: id, local: cfg.local, remote: cfg.remote, encapsulation: cfg.encapsulation, esp_offset }
}

/// Whether the inner packet is within the SA's selectors (RFC 4301 §5.2 step 4): the source
/// on the peer's side, the destination on ours.
fn selectors_admit(cfg: &SaConfig, t: &FiveTuple) -> bool {
    cfg.remote_selectors.iter().any(|s| s.matches(t.src, t.protocol, t.src_port))
        && cfg.local_selectors.iter().any(|s| s.matches(t.dst, t.protocol, t.dst_port))
}

/// The run of pending packets that starts at `k`: those after it with the same SA, as
/// `sa_len` names it (with the length the lifetime counts). Returns where the run ends and
/// its bytes.
fn run_of<K: PartialEq>(
    pending: &[Pending],
    k: usize,
    sa_len: impl Fn(&Pending) -> Option<(K, usize)>,
) -> (usize, u64) {
    let first = pending.get(k).and_then(&sa_len).map(|(sa, _)| sa);
    let mut end = k;
    let mut bytes = 0u64;
    while let Some((sa, len)) = pending.get(end).and_then(&sa_len) {
        if first.as_ref() != Some(&sa) {
            break;
        }
        bytes = bytes.saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
        end += 1;
    }
    (end, bytes)
}

/// The low 16 bits, for the outer IPv4 Identification (RFC 6864: unique enough per SA).
/// Hands `descriptors` to the enclave, one call per `max_batch` of them, their statuses
/// into `status` (as long); a call refused whole leaves its statuses `NotProcessed`.
fn cross_in_chunks<E: EspCrossing + ?Sized>(
    enclave: &mut E,
    area: &mut [u8],
    descriptors: &[EspDescriptor],
    status: &mut [EspStatus],
    max_batch: usize,
    report: &mut BatchReport,
) {
    let max = max_batch.max(1);
    for (d, s) in descriptors.chunks(max).zip(status.chunks_mut(max)) {
        report.crossings += 1;
        if enclave.esp_crossing(area, d, s).is_err() {
            s.fill(EspStatus::NotProcessed);
        }
    }
}

/// How many times one batch's packets refused as stale go again under fresh numbers. One
/// preemption is common on a loaded machine; each try is short (a few draws and one
/// crossing), so several in a row mean the worker can hardly run, and the packets go.
const RENUMBER_TRIES: usize = 3;

fn low16(x: u64) -> u16 {
    let [.., a, b] = x.to_be_bytes();
    u16::from_be_bytes([a, b])
}

/// A worker's scratch space and counters. One per I/O worker thread; workers share `&Sad`.
#[derive(Debug)]
pub struct Worker {
    config: WorkerConfig,
    descriptors: Vec<EspDescriptor>,
    status: Vec<EspStatus>,
    pending: Vec<Pending>,
    /// Scratch of `decap_commit`: one SA's authenticated sequence numbers and the window's
    /// answers, in the run's order.
    seqs: Vec<u64>,
    verdicts: Vec<Result<(), DropReason>>,
    /// This call's re-synchronisation candidate (at most one), and its saved ciphertext.
    resync: Option<ResyncCandidate>,
    resync_copy: Vec<u8>,
    drops: DropCounts,
    /// Whether batches that qualify take the fast paths (`fast_out`, `fast_in`); off only
    /// in the tests and benchmarks that hold them to the general path's output.
    fast_path: bool,
    /// Batches the fast paths took.
    fast: FastBatches,
}

/// Batches a worker's fast paths took, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FastBatches {
    /// Encapsulation batches laid out by the outbound fast path.
    pub outbound: u64,
    /// Decapsulation batches queued by the inbound fast path.
    pub inbound: u64,
}

impl Worker {
    /// A worker whose scratch holds `capacity` packets without reallocating.
    pub fn new(config: WorkerConfig, capacity: usize) -> Self {
        Self {
            config,
            descriptors: Vec::with_capacity(capacity),
            status: Vec::with_capacity(capacity),
            pending: Vec::with_capacity(capacity),
            seqs: Vec::with_capacity(capacity),
            verdicts: Vec::with_capacity(capacity),
            resync: None,
            // Allocated on first use: most SAs never lose 2^32 packets.
            resync_copy: Vec::new(),
            drops: DropCounts::default(),
            fast_path: true,
            fast: FastBatches::default(),
        }
    }

    /// Turns the fast paths on, as they are by default, or off: outbound, one flow of plain
    /// IPv4 packets for one SA with IPv4 endpoints, laid out in one pass; inbound, one SA's
    /// ESP in IPv4 or from a UDP socket, queued in one pass, and plain IPv4 inner packets of
    /// admitted flows finished without a full parse. Their output is the general path's, so
    /// this is for tests and benchmarks that compare the two.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Batches the fast paths took.
    pub fn fast_batches(&self) -> FastBatches {
        self.fast
    }

    /// Every drop this worker counted, SA or not.
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// Hands every descriptor to the enclave: one call per `max_batch` descriptors.
    fn cross<E: EspCrossing + ?Sized>(&mut self, enclave: &mut E, area: &mut [u8], report: &mut BatchReport) {
        self.status.clear();
        self.status.resize(self.descriptors.len(), EspStatus::NotProcessed);
        cross_in_chunks(enclave, area, &self.descriptors, &mut self.status, self.config.max_batch, report);
    }

    // ---- outbound ----------------------------------------------------------------------

    /// Encapsulates every packet of `batch` (inner IPv4/IPv6 packets at their offsets) and
    /// sets each one's [`Action`]: `Transmit`, `Bypass`, `IcmpError` or `Drop`.
    ///
    /// Holds the enclave for the whole call (see `crossing`: numbers are drawn and used in
    /// one hold). Should the enclave be unavailable, nothing is numbered or sealed and every
    /// packet is dropped as [`DropReason::EnclaveRefused`].
    pub fn encapsulate<C: Crossing + ?Sized>(
        &mut self,
        enclave: &mut C,
        sad: &Sad,
        spd: &Spd,
        batch: &mut Batch<'_>,
    ) -> BatchReport {
        let held = enclave.with(|e| self.encapsulate_held(e, sad, spd, batch));
        held.unwrap_or_else(|| {
            let mut report = BatchReport::default();
            for i in 0..batch.len {
                if batch.packets.get(i).is_some_and(|p| p.action == Action::Pending) {
                    drop_packet(&mut self.drops, &mut report, batch, i, DropReason::EnclaveRefused, None);
                }
            }
            report
        })
    }

    fn encapsulate_held<E: EspCrossing + ?Sized>(
        &mut self,
        enclave: &mut E,
        sad: &Sad,
        spd: &Spd,
        batch: &mut Batch<'_>,
    ) -> BatchReport {
        let mut report = BatchReport::default();
        self.descriptors.clear();
        self.pending.clear();
        let fast = self.encap_fast(sad, spd, batch, &mut report);
        if fast.is_none() {
            let mut route = None;
            // Fragments appended during the loop are encapsulated where they are made.
            for i in 0..batch.len {
                self.encap_prepare(sad, spd, batch, i, &mut route, &mut report);
            }
            self.encap_number(sad, batch, &mut report);
        }
        if !self.descriptors.is_empty() {
            self.cross(enclave, batch.area, &mut report);
            for _ in 0..RENUMBER_TRIES {
                if !self.status.contains(&EspStatus::SeqStale) {
                    break;
                }
                self.encap_renumber(enclave, sad, batch, &mut report);
            }
        }
        match &fast {
            Some(plan) => self.encap_finish_fast(plan, batch, &mut report),
            None => self.encap_finish(sad, batch, &mut report),
        }
        report
    }

    /// Packets whose numbers the enclave refused as stale (this worker lost its core between
    /// drawing them and crossing, and the others moved the SA further on than the enclave's
    /// window) go again under fresh numbers: nothing was sealed under the old ones, which
    /// stay unused, a gap the peer's replay window takes. After [`RENUMBER_TRIES`] refusals
    /// in a row they are dropped.
    fn encap_renumber<E: EspCrossing + ?Sized>(
        &mut self,
        enclave: &mut E,
        sad: &Sad,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) {
        // Rare (a preemption of milliseconds under load), so these two small vectors are
        // not kept as scratch.
        let mut again: Vec<usize> = Vec::new();
        let mut descriptors: Vec<EspDescriptor> = Vec::new();
        for (k, status) in self.status.iter_mut().enumerate() {
            if *status != EspStatus::SeqStale {
                continue;
            }
            let (Some(p), Some(d)) = (self.pending.get_mut(k), self.descriptors.get(k)) else { continue };
            let Owner::Out { id, fields, .. } = p.owner else { continue };
            let Some(sa) = sad.outbound(id) else { continue };
            let cfg = sa.config();
            let seq = match sa.runtime().redraw(cfg.esn) {
                Ok(seq) => seq,
                Err(_) => {
                    *status = EspStatus::SeqExhausted;
                    continue;
                }
            };
            let slot_start = p.packet * batch.slot_len;
            let rewritten = batch
                .area
                .get_mut(slot_start + p.start..slot_start + p.start + p.len)
                .ok_or(DropReason::NoRoom)
                .and_then(|outer| {
                    packet::write_outer(outer, cfg, &OuterFields { ident: low16(seq), ..fields })
                });
            if rewritten.is_err() {
                continue;
            }
            p.seq = seq;
            again.push(k);
            descriptors.push(EspDescriptor { seq, ..*d });
        }
        if again.is_empty() {
            return;
        }
        let mut status = vec![EspStatus::NotProcessed; again.len()];
        cross_in_chunks(enclave, batch.area, &descriptors, &mut status, self.config.max_batch, report);
        for (&k, s) in again.iter().zip(status) {
            if let Some(slot) = self.status.get_mut(k) {
                *slot = s;
            }
        }
    }

    fn encap_prepare<'s>(
        &mut self,
        sad: &'s Sad,
        spd: &Spd,
        batch: &mut Batch<'_>,
        i: usize,
        route: &mut Option<Route<'s>>,
        report: &mut BatchReport,
    ) {
        let Some(pkt) = batch.packets.get(i).copied() else { return };
        if pkt.action != Action::Pending {
            return;
        }
        let start = i * batch.slot_len + pkt.offset;
        let parsed = batch.area.get(start..start + pkt.len).ok_or(DropReason::NoRoom).and_then(Inner::parse);
        let inner = match parsed {
            Ok(inner) => inner,
            Err(r) => return drop_packet(&mut self.drops, report, batch, i, r, None),
        };
        if let Some(p) = batch.packets.get_mut(i) {
            // Bytes past the IP length (link padding) are not part of the packet.
            p.len = inner.len;
        }
        let r = match *route {
            Some(r) if r.key == inner.key => r,
            _ => {
                let action = spd.lookup(&inner.key.tuple()).map(|p| p.action);
                let sa = match action {
                    Some(PolicyAction::Protect(id)) => sad.outbound(id),
                    _ => None,
                };
                *route.insert(Route { key: inner.key, action, sa })
            }
        };
        let id = match r.action {
            Some(PolicyAction::Protect(id)) => id,
            Some(PolicyAction::Bypass) => {
                report.bypass += 1;
                if let Some(p) = batch.packets.get_mut(i) {
                    p.action = Action::Bypass;
                }
                return;
            }
            Some(PolicyAction::Discard) => {
                return drop_packet(&mut self.drops, report, batch, i, DropReason::PolicyDiscard, None)
            }
            None => return drop_packet(&mut self.drops, report, batch, i, DropReason::NoPolicy, None),
        };
        let Some(sa) = r.sa else {
            return drop_packet(&mut self.drops, report, batch, i, DropReason::NoSa, None);
        };
        let sa_drops = Some(sa.runtime().drops());
        if sa.runtime().is_expired() {
            return drop_packet(&mut self.drops, report, batch, i, DropReason::HardLifetime, sa_drops);
        }
        if inner.ttl <= 1 {
            return drop_packet(&mut self.drops, report, batch, i, DropReason::TtlExceeded, sa_drops);
        }
        let cfg = sa.config();
        let shape = Shape::of(cfg);
        let mtu = usize::from(sa.runtime().path_mtu());
        let fits = shape.total(inner.len) <= mtu;
        if !fits && (inner.v6 || inner.df) {
            return self.too_big(batch, i, &inner, shape.max_inner(mtu), sa_drops, report);
        }
        // Forwarding: the inner TTL is decremented by the encapsulator (RFC 4301 §5.1.2.1).
        let rewritten = batch
            .area
            .get_mut(start..start + inner.len)
            .ok_or(DropReason::NoRoom)
            .and_then(|b| packet::forward_rewrite(b, &inner, inner.ecn));
        if let Err(r) = rewritten {
            return drop_packet(&mut self.drops, report, batch, i, r, sa_drops);
        }
        if fits {
            return self.encap_one(batch, i, sa, id, &inner, shape, report);
        }
        // IPv4 with DF clear: fragment the inner packet, then protect each fragment
        // (RFC 4301 §8.1 lets the encapsulator fragment before IPsec processing).
        match packet::fragment_v4(batch, i, shape.max_inner(mtu)) {
            Ok(more) => {
                self.encap_one(batch, i, sa, id, &inner, shape, report);
                for j in more {
                    self.encap_one(batch, j, sa, id, &inner, shape, report);
                }
            }
            Err(r) => drop_packet(&mut self.drops, report, batch, i, r, sa_drops),
        }
    }

    /// The packet does not fit and may not be fragmented: answer with an ICMP error where
    /// allowed (RFC 4301 §8.2.1), and drop it.
    #[allow(clippy::too_many_arguments)]
    fn too_big(
        &mut self,
        batch: &mut Batch<'_>,
        i: usize,
        inner: &Inner,
        max_inner: usize,
        sa_drops: Option<&SharedDropCounts>,
        report: &mut BatchReport,
    ) {
        // Below 1280 an IPv6 sender cannot go: the tunnel would have to fragment the outer
        // packet (RFC 8200 §5), which is not implemented; such packets are only counted.
        let useful = !inner.v6 || inner.len > wire::icmpv6::MIN_MTU;
        // By default the error comes from the packet's own destination: it goes back into
        // the TUN device, where the kernel drops a packet from one of its own addresses (the
        // SA's local address is one) as a martian, and takes one from an address routed
        // through that device, as a strict reverse-path filter wants.
        let (v4, v6) = match inner.key.dst() {
            core::net::IpAddr::V4(a) => (Some(a), None),
            core::net::IpAddr::V6(a) => (None, Some(a)),
        };
        let sources =
            IcmpSources { v4: self.config.icmp_source_v4.or(v4), v6: self.config.icmp_source_v6.or(v6) };
        let pkt_offset = batch.packets.get(i).map_or(0, |p| p.offset);
        let built = if useful && inner.may_get_icmp_error() {
            let slot_start = i * batch.slot_len;
            batch
                .area
                .get_mut(slot_start..slot_start + batch.slot_len)
                .and_then(|slot| packet::build_too_big(slot, pkt_offset, inner, max_inner, sources))
        } else {
            None
        };
        drop_packet(&mut self.drops, report, batch, i, DropReason::MtuExceeded, sa_drops);
        if let (Some((offset, len)), Some(p)) = (built, batch.packets.get_mut(i)) {
            p.offset = offset;
            p.len = len;
            p.action = Action::IcmpError;
            report.icmp += 1;
        }
    }

    /// Lays out packet `j` (an inner packet that fits) as ESP around itself and queues it
    /// for [`Self::encap_number`].
    #[allow(clippy::too_many_arguments)]
    fn encap_one(
        &mut self,
        batch: &mut Batch<'_>,
        j: usize,
        sa: &OutboundSa,
        id: OutboundSaId,
        inner: &Inner,
        shape: Shape,
        report: &mut BatchReport,
    ) {
        if let Err(reason) = self.encap_layout(batch, j, sa, id, inner, shape) {
            drop_packet(&mut self.drops, report, batch, j, reason, Some(sa.runtime().drops()));
        }
    }

    fn encap_layout(
        &mut self,
        batch: &mut Batch<'_>,
        j: usize,
        sa: &OutboundSa,
        id: OutboundSaId,
        inner: &Inner,
        shape: Shape,
    ) -> Result<(), DropReason> {
        let cfg = sa.config();
        let pkt = *batch.packets.get(j).ok_or(DropReason::NoRoom)?;
        let trailer = shape.trailer(pkt.len, inner.v6)?;
        let before = shape.before();
        let total = shape.total(pkt.len);
        let start = pkt.offset.checked_sub(before).ok_or(DropReason::NoRoom)?;
        if start + total > batch.slot_len {
            return Err(DropReason::NoRoom);
        }
        let slot_start = j * batch.slot_len;
        let slot = batch.area.get_mut(slot_start..slot_start + batch.slot_len).ok_or(DropReason::NoRoom)?;
        let payload =
            slot.get_mut(pkt.offset..pkt.offset + trailer.buffer_len(pkt.len)).ok_or(DropReason::NoRoom)?;
        // The inner packet is already in place: only padding and trailer are written.
        trailer.emit(payload, pkt.len, |_| {}).map_err(|_| DropReason::NoRoom)?;
        let fields = OuterFields {
            dscp: inner.dscp,
            ecn: ecn::encapsulated(inner.ecn),
            // RFC 4301 §5.1.2.1 note 4: copy DF from an IPv4 inner header; an IPv6 packet
            // must not be fragmented on the way, so its outer IPv4 header says DF.
            df: inner.v6 || inner.df,
            // Only an outer IPv6 header has a flow label.
            flow_label: if cfg.local.is_ipv6() { inner.outer_flow_label() } else { 0 },
            ttl: OUTER_TTL,
            // Set from the sequence number in `encap_number`.
            ident: 0,
        };
        self.pending.push(Pending {
            packet: j,
            owner: Owner::Out { id, fields, inner_len: pkt.len },
            seq: 0,
            start,
            len: total,
        });
        Ok(())
    }

    /// Gives every queued outbound packet its sequence number and counts it against its SA's
    /// lifetime, one reservation per run of consecutive packets of the same SA (one atomic
    /// operation per counter and run, not per packet); then writes its outer header and its
    /// descriptor. A packet the reservation refuses (sequence space or hard limit) is
    /// dropped here and never reaches the enclave.
    fn encap_number(&mut self, sad: &Sad, batch: &mut Batch<'_>, report: &mut BatchReport) {
        let mut kept = 0;
        let mut k = 0;
        while k < self.pending.len() {
            let Some(Owner::Out { id, .. }) = self.pending.get(k).map(|p| p.owner) else {
                k += 1;
                continue;
            };
            let (end, run_bytes) = run_of(&self.pending, k, |p| match p.owner {
                Owner::Out { id, inner_len, .. } => Some((id, inner_len)),
                Owner::In { .. } => None,
            });
            let Some(sa) = sad.outbound(id) else {
                self.drop_run(k..end, batch, report);
                k = end;
                continue;
            };
            let cfg = sa.config();
            let rt = sa.runtime();
            let outer_len = cfg.outer_header_len();
            let reservation = rt.reserve(u64::try_from(end - k).unwrap_or(u64::MAX), run_bytes);
            let mut bytes_before = 0u64;
            for n in k..end {
                let Some(mut p) = self.pending.get(n).copied() else { break };
                let Owner::Out { fields, inner_len, .. } = p.owner else { break };
                let len = u64::try_from(inner_len).unwrap_or(u64::MAX);
                let nth = u64::try_from(n - k).unwrap_or(u64::MAX);
                let numbered = rt.judge(&reservation, nth, bytes_before, len, cfg.esn, &cfg.lifetime);
                bytes_before = bytes_before.saturating_add(len);
                let written = numbered.and_then(|(seq, crossed)| {
                    let slot_start = p.packet * batch.slot_len;
                    let outer = batch
                        .area
                        .get_mut(slot_start + p.start..slot_start + p.start + p.len)
                        .ok_or(DropReason::NoRoom)?;
                    packet::write_outer(outer, cfg, &OuterFields { ident: low16(seq), ..fields })?;
                    let esp = slot_start + p.start + outer_len;
                    let offset = u32::try_from(esp).map_err(|_| DropReason::NoRoom)?;
                    let esp_len = p.len - outer_len;
                    let esp_len = u32::try_from(esp_len).map_err(|_| DropReason::NoRoom)?;
                    Ok((seq, crossed, offset, esp_len))
                });
                match written {
                    Ok((seq, crossed, offset, esp_len)) => {
                        report.lifetime_check_due |= crossed;
                        self.descriptors.push(EspDescriptor::encrypt(cfg.handle, offset, esp_len, seq));
                        p.seq = seq;
                        if let Some(slot) = self.pending.get_mut(kept) {
                            *slot = p;
                        }
                        kept += 1;
                    }
                    Err(r) => drop_packet(&mut self.drops, report, batch, p.packet, r, Some(rt.drops())),
                }
            }
            k = end;
        }
        self.pending.truncate(kept);
    }

    fn encap_finish(&mut self, sad: &Sad, batch: &mut Batch<'_>, report: &mut BatchReport) {
        let mut last: Option<(OutboundSaId, &OutboundSa)> = None;
        for k in 0..self.pending.len() {
            let (Some(p), Some(&status)) = (self.pending.get(k).copied(), self.status.get(k)) else {
                continue;
            };
            let Owner::Out { id, .. } = p.owner else { continue };
            let found = match last {
                Some((last_id, sa)) if last_id == id => Some(sa),
                _ => sad.outbound(id),
            };
            let Some(sa) = found else {
                drop_packet(&mut self.drops, report, batch, p.packet, DropReason::NoSa, None);
                continue;
            };
            last = Some((id, sa));
            let sa_drops = Some(sa.runtime().drops());
            if status != EspStatus::Ok {
                drop_packet(
                    &mut self.drops,
                    report,
                    batch,
                    p.packet,
                    DropReason::from_status(status),
                    sa_drops,
                );
                continue;
            }
            let cfg = sa.config();
            let slot_start = p.packet * batch.slot_len;
            let filled = batch
                .area
                .get_mut(slot_start + p.start..slot_start + p.start + p.len)
                .ok_or(DropReason::NoRoom)
                .and_then(|outer| packet::fill_udp6_checksum(outer, cfg));
            if let Err(r) = filled {
                drop_packet(&mut self.drops, report, batch, p.packet, r, sa_drops);
                continue;
            }
            if let Some(pkt) = batch.packets.get_mut(p.packet) {
                pkt.offset = p.start;
                pkt.len = p.len;
                pkt.action = Action::Transmit(transmit(id, cfg, p.start + cfg.outer_header_len()));
                report.transmit += 1;
            }
        }
    }

    // ---- inbound -----------------------------------------------------------------------

    /// Decapsulates every packet of `batch` (outer packets, see [`Frame`]) and sets each
    /// one's [`Action`]: `Deliver` (the inner packet), `Ike`, `Keepalive` or `Drop`.
    pub fn decapsulate<C: Crossing + ?Sized>(
        &mut self,
        enclave: &mut C,
        sad: &Sad,
        batch: &mut Batch<'_>,
    ) -> BatchReport {
        let mut report = BatchReport::default();
        self.descriptors.clear();
        self.pending.clear();
        self.status.clear();
        self.resync = None;
        let fast = self.decap_fast(sad, batch);
        if fast.is_none() {
            let mut last = None;
            for i in 0..batch.len {
                if let Err(r) = self.decap_prepare(sad, batch, i, &mut last, &mut report) {
                    let sa = r.1.and_then(|spi| sad.inbound(spi)).map(|sa| sa.runtime().drops());
                    drop_packet(&mut self.drops, &mut report, batch, i, r.0, sa);
                }
            }
        }
        // An unavailable enclave processed nothing: every descriptor stays `NotProcessed`.
        if !self.descriptors.is_empty() && enclave.with(|e| self.cross(e, batch.area, &mut report)).is_none()
        {
            self.status.resize(self.descriptors.len(), EspStatus::NotProcessed);
        }
        match fast {
            // No re-synchronisation candidate: the fast path refuses a batch that could have one.
            Some(plan) => {
                let kept = self.decap_run(plan.sa, 0..self.pending.len(), 0, batch, &mut report);
                self.pending.truncate(kept);
                let bytes = self
                    .pending
                    .iter()
                    .fold(0u64, |b, p| b.saturating_add(u64::try_from(p.len).unwrap_or(u64::MAX)));
                self.account_run(plan.sa, plan.spi, 0..kept, bytes, batch, &mut report);
            }
            None => {
                self.resync_esn(enclave, sad, batch, &mut report);
                self.decap_finish(sad, batch, &mut report);
            }
        }
        report
    }

    /// Checks one received packet up to the enclave call; `Err((reason, spi of the SA if
    /// known))` drops it.
    fn decap_prepare<'s>(
        &mut self,
        sad: &'s Sad,
        batch: &mut Batch<'_>,
        i: usize,
        last: &mut Option<(u32, &'s InboundSa)>,
        report: &mut BatchReport,
    ) -> Result<(), (DropReason, Option<u32>)> {
        let no_sa = |r| (r, None);
        let pkt = batch.packets.get(i).copied().ok_or(no_sa(DropReason::Malformed))?;
        if pkt.action != Action::Pending {
            return Ok(());
        }
        let slot_start = i * batch.slot_len;
        let bytes = batch.area.get(slot_start + pkt.offset..slot_start + pkt.offset + pkt.len);
        let bytes = bytes.ok_or(no_sa(DropReason::Malformed))?;
        let outer = match pkt.frame {
            Frame::Ip => Outer::parse(bytes).map_err(no_sa)?,
            Frame::Udp { remote, local, ecn } => Outer {
                remote: remote.ip(),
                local: local.ip(),
                ecn,
                udp: Some((remote.port(), local.port(), usize::MAX)),
                payload: 0..bytes.len(),
            },
            Frame::Esp { remote, local, ecn } => {
                Outer { remote, local, ecn, udp: None, payload: 0..bytes.len() }
            }
        };
        let payload = bytes.get(outer.payload.clone()).ok_or(no_sa(DropReason::Malformed))?;
        if let Some((sport, dport, udp_at)) = outer.udp {
            let remote = SocketAddr::new(outer.remote, sport);
            let local = SocketAddr::new(outer.local, dport);
            let action = match UdpEncapPayload::classify(payload).map_err(|_| no_sa(DropReason::Malformed))? {
                UdpEncapPayload::Esp(_) => None,
                UdpEncapPayload::Keepalive => {
                    report.keepalive += 1;
                    Some((Action::Keepalive { remote }, outer.payload.clone()))
                }
                UdpEncapPayload::Ike(msg) => {
                    // IKE has its own integrity only after IKE_SA_INIT: check the UDP
                    // checksum here (zero is allowed over IPv4, RFC 768).
                    if let Some(udp) = bytes.get(udp_at..) {
                        let pair = wire::IpPair::new(outer.remote, outer.local)
                            .ok_or(no_sa(DropReason::Malformed))?;
                        let ok = wire::UdpPacket::new_checked(udp).is_ok_and(|u| u.verify_checksum(&pair));
                        if !ok {
                            return Err(no_sa(DropReason::Malformed));
                        }
                    }
                    report.ike += 1;
                    let start = outer.payload.start + wire::udp_encap::NON_ESP_MARKER.len();
                    Some((Action::Ike { remote, local }, start..start + msg.len()))
                }
            };
            if let Some((action, range)) = action {
                if let Some(p) = batch.packets.get_mut(i) {
                    p.offset += range.start;
                    p.len = range.len();
                    p.action = action;
                }
                return Ok(());
            }
        }
        let esp = EspPacket::new_checked(payload).map_err(|_| no_sa(DropReason::Malformed))?;
        let spi = esp.spi();
        // Consecutive packets of one SA reuse its lookup (the table cannot change during a call).
        let sa = match *last {
            Some((s, sa)) if s == spi => sa,
            _ => {
                let sa = sad.inbound(spi).ok_or(no_sa(DropReason::NoSa))?;
                last.insert((spi, sa)).1
            }
        };
        let with_sa = |r| (r, Some(spi));
        let cfg = sa.config();
        if outer.udp.is_some() != matches!(cfg.encapsulation, Encapsulation::Udp { .. }) {
            return Err(with_sa(DropReason::EncapsulationMismatch));
        }
        if sa.runtime().is_expired() {
            return Err(with_sa(DropReason::HardLifetime));
        }
        // The shortest packet holds header, IV, the 2-byte trailer and the ICV; CBC needs
        // whole blocks (RFC 3602 §3). The enclave checks again; this keeps the count honest.
        let shape = Shape::of(cfg);
        let body = payload.len().checked_sub(wire::esp::HEADER_LEN + shape.iv + shape.icv);
        if body.is_none_or(|b| {
            b < wire::esp_trailer::TRAILER_LEN || (shape.align > 4 && b & (shape.align - 1) != 0)
        }) {
            return Err(with_sa(DropReason::Malformed));
        }
        let rt = sa.runtime();
        let window = rt.window();
        let seq_lo = esp.sequence_number();
        // Anti-replay check before the enclave spends work on the packet (RFC 4303 §3.4.3).
        let seq = window.infer(seq_lo, cfg.esn).filter(|&seq| window.check(seq).is_ok());
        let esp_start = pkt.offset + outer.payload.start;
        let offset = u32::try_from(slot_start + esp_start).map_err(|_| with_sa(DropReason::NoRoom))?;
        let len = u32::try_from(payload.len()).map_err(|_| with_sa(DropReason::NoRoom))?;
        let after = self.config.esn_resync_after;
        if cfg.esn && self.resync.is_none() && after > 0 && rt.auth_failures() >= after {
            // Many ICV failures in a row: perhaps 2^32 or more packets were lost and the
            // inferred high half is behind. This packet is kept for retries with higher
            // ones, also when the window placed it behind itself.
            self.resync_copy.clear();
            self.resync_copy.extend_from_slice(payload);
            self.resync = Some(ResyncCandidate {
                packet: i,
                pending: seq.map(|_| self.pending.len()),
                spi,
                outer_ecn: outer.ecn,
                start: esp_start,
                len: payload.len(),
                seq_lo,
            });
            if seq.is_none() {
                return Ok(());
            }
        }
        let seq = seq.ok_or(with_sa(DropReason::Replay))?;
        self.descriptors.push(EspDescriptor::decrypt(cfg.handle, offset, len, seq));
        self.pending.push(Pending {
            packet: i,
            owner: Owner::In { spi, outer_ecn: outer.ecn },
            seq,
            start: esp_start,
            len: payload.len(),
        });
        Ok(())
    }

    /// RFC 4303 Appendix A3.2: retries this call's kept packet, if the enclave refused it
    /// or never saw it, with the next higher halves of its sequence number. One that
    /// authenticates becomes an `Ok` packet with that number, and committing it moves the
    /// window there; a kept packet that none opens is dropped as the replay it seemed.
    fn resync_esn<C: Crossing + ?Sized>(
        &mut self,
        enclave: &mut C,
        sad: &Sad,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) {
        let Some(c) = self.resync.take() else { return };
        if let Some(k) = c.pending {
            if self.status.get(k) != Some(&EspStatus::IcvMismatch) {
                return;
            }
        }
        let sa = sad.inbound(c.spi);
        let found = sa.and_then(|sa| self.retry_halves(enclave, sa, batch, &c, report));
        match (found, c.pending) {
            (Some(seq), Some(k)) => {
                if let (Some(s), Some(p)) = (self.status.get_mut(k), self.pending.get_mut(k)) {
                    *s = EspStatus::Ok;
                    p.seq = seq;
                    report.resynced += 1;
                }
            }
            (Some(seq), None) => {
                self.pending.push(Pending {
                    packet: c.packet,
                    owner: Owner::In { spi: c.spi, outer_ecn: c.outer_ecn },
                    seq,
                    start: c.start,
                    len: c.len,
                });
                self.status.push(EspStatus::Ok);
                report.resynced += 1;
            }
            // Still an ICV failure, counted as such by `decap_finish`.
            (None, Some(_)) => {}
            (None, None) => {
                let drops = sa.map(|sa| sa.runtime().drops());
                drop_packet(&mut self.drops, report, batch, c.packet, DropReason::Replay, drops);
            }
        }
    }

    /// The first higher-half sequence number under which the kept ciphertext authenticates,
    /// trying at most `esn_resync_tries` of them, each on a fresh copy.
    fn retry_halves<C: Crossing + ?Sized>(
        &self,
        enclave: &mut C,
        sa: &InboundSa,
        batch: &mut Batch<'_>,
        c: &ResyncCandidate,
        report: &mut BatchReport,
    ) -> Option<u64> {
        let at = c.packet * batch.slot_len + c.start;
        let (offset, len) = (u32::try_from(at).ok()?, u32::try_from(c.len).ok()?);
        if self.resync_copy.len() != c.len {
            return None;
        }
        // The number the enclave already refused, if it saw the packet.
        let tried = c.pending.and_then(|i| self.pending.get(i)).map(|p| p.seq);
        // Above the window's high half, so the window takes whichever number opens it.
        let top_hi = sa.runtime().window().top() >> 32;
        for k in 1..=u64::from(self.config.esn_resync_tries) {
            let hi = top_hi.checked_add(k).filter(|&hi| hi <= u64::from(u32::MAX))?;
            let seq = hi << 32 | u64::from(c.seq_lo);
            if tried == Some(seq) {
                continue;
            }
            batch.area.get_mut(at..at + c.len)?.copy_from_slice(&self.resync_copy);
            let d = [EspDescriptor::decrypt(sa.config().handle, offset, len, seq)];
            let mut status = [EspStatus::NotProcessed];
            report.crossings += 1;
            let crossed = enclave.with(|e| e.esp_crossing(batch.area, &d, &mut status).is_ok());
            if crossed == Some(true) && status == [EspStatus::Ok] {
                return Some(seq);
            }
        }
        None
    }

    fn decap_finish(&mut self, sad: &Sad, batch: &mut Batch<'_>, report: &mut BatchReport) {
        // Authenticated packets that passed every check stay in `pending` (start and length
        // now those of the inner packet) until `decap_account` counts them.
        let mut kept = 0;
        let mut k = 0;
        while k < self.pending.len() {
            let Some(Owner::In { spi, .. }) = self.pending.get(k).map(|p| p.owner) else {
                k += 1;
                continue;
            };
            let (end, _) = run_of(&self.pending, k, |p| match p.owner {
                Owner::In { spi, .. } => Some((spi, 0)),
                Owner::Out { .. } => None,
            });
            let Some(sa) = sad.inbound(spi) else {
                self.drop_run(k..end, batch, report);
                k = end;
                continue;
            };
            kept = self.decap_run(sa, k..end, kept, batch, report);
            k = end;
        }
        self.pending.truncate(kept);
        self.decap_account(sad, batch, report);
    }

    /// Finishes the pending packets `run` of one SA after the crossing: commits the
    /// authenticated ones to the window, opens those it took, and moves each kept one
    /// (start and length now the inner packet's) to `pending[kept..]`, which it returns
    /// the end of; the rest are dropped under their reason.
    fn decap_run(
        &mut self,
        sa: &InboundSa,
        run: core::ops::Range<usize>,
        mut kept: usize,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) -> usize {
        self.decap_commit(sa, run.clone());
        let shape = Shape::of(sa.config());
        // The window's answers, one per authenticated packet of the run, in order.
        let mut verdicts = 0;
        // ICV failures after the run's last authenticated packet (RFC 4303 A3.1).
        let (mut authenticated, mut failures) = (false, 0u32);
        // The flow the SA's selectors last admitted: a run mostly holds one.
        let mut admitted = None;
        // The header bytes of a plain IPv4 packet `decap_one` delivered in this run: later
        // packets of its flow take `open_fast` (the selectors are the run's SA's).
        let mut flow = None;
        for n in run {
            let (Some(mut p), Some(&status)) = (self.pending.get(n).copied(), self.status.get(n)) else {
                continue;
            };
            let Owner::In { outer_ecn, .. } = p.owner else { continue };
            match status {
                EspStatus::Ok => (authenticated, failures) = (true, 0),
                EspStatus::IcvMismatch => failures += 1,
                _ => {}
            }
            let opened = if status == EspStatus::Ok {
                let committed = self.verdicts.get(verdicts).copied().unwrap_or(Err(DropReason::Replay));
                verdicts += 1;
                committed.and_then(|()| {
                    let fast = flow.as_ref().filter(|_| self.fast_path);
                    if let Some(opened) =
                        fast.and_then(|f| fast_in::open_fast(shape, batch, &p, outer_ecn, f))
                    {
                        return Ok(opened);
                    }
                    let (start, len) = Self::decap_one(sa, batch, &p, outer_ecn, &mut admitted)?;
                    // The latest admitted flow: the next packets most likely belong to it.
                    let at = p.packet * batch.slot_len + start;
                    if let Some(f) = batch.area.get(at..at + len).and_then(packet::plain_v4_flow) {
                        flow = Some(f);
                    }
                    Ok((start, len))
                })
            } else {
                Err(DropReason::from_status(status))
            };
            match opened {
                Ok((offset, len)) => {
                    p.start = offset;
                    p.len = len;
                    if let Some(slot) = self.pending.get_mut(kept) {
                        *slot = p;
                    }
                    kept += 1;
                }
                Err(r) => {
                    drop_packet(&mut self.drops, report, batch, p.packet, r, Some(sa.runtime().drops()))
                }
            }
        }
        sa.runtime().record_auth(authenticated, failures);
        kept
    }

    /// Moves the replay window for the authenticated packets of one SA's run (RFC 4303
    /// §3.4.3: only after the ICV verified), all in one `commit_many`; `verdicts` answers
    /// for them in order (a packet that failed in the enclave is not committed).
    fn decap_commit(&mut self, sa: &InboundSa, run: core::ops::Range<usize>) {
        self.seqs.clear();
        for n in run {
            if self.status.get(n) == Some(&EspStatus::Ok) {
                self.seqs.push(self.pending.get(n).map_or(0, |p| p.seq));
            }
        }
        self.verdicts.clear();
        self.verdicts.resize(self.seqs.len(), Ok(()));
        sa.runtime().window().commit_many(&self.seqs, &mut self.verdicts);
    }

    /// Drops a run of pending packets whose SA went away during the call.
    fn drop_run(&mut self, run: core::ops::Range<usize>, batch: &mut Batch<'_>, report: &mut BatchReport) {
        for p in self.pending.get(run).unwrap_or_default() {
            drop_packet(&mut self.drops, report, batch, p.packet, DropReason::NoSa, None);
        }
    }

    /// Counts the authenticated packets against their SA's lifetime, one reservation per run
    /// of consecutive packets of the same SA, and delivers those within the hard limits.
    fn decap_account(&mut self, sad: &Sad, batch: &mut Batch<'_>, report: &mut BatchReport) {
        let mut k = 0;
        while k < self.pending.len() {
            let Some(Owner::In { spi, .. }) = self.pending.get(k).map(|p| p.owner) else {
                k += 1;
                continue;
            };
            let (end, run_bytes) = run_of(&self.pending, k, |p| match p.owner {
                Owner::In { spi, .. } => Some((spi, p.len)),
                Owner::Out { .. } => None,
            });
            let Some(sa) = sad.inbound(spi) else {
                self.drop_run(k..end, batch, report);
                k = end;
                continue;
            };
            self.account_run(sa, spi, k..end, run_bytes, batch, report);
            k = end;
        }
    }

    /// Counts the authenticated packets `run` of `pending` (all of SA `sa`, `spi`, holding
    /// `bytes` inner bytes) against its lifetime with one reservation, and delivers those
    /// within the hard limits.
    fn account_run(
        &mut self,
        sa: &InboundSa,
        spi: u32,
        run: core::ops::Range<usize>,
        bytes: u64,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) {
        let rt = sa.runtime();
        let life = &sa.config().lifetime;
        let (k, end) = (run.start, run.end);
        let reservation = rt.reserve(u64::try_from(end - k).unwrap_or(u64::MAX), bytes);
        let mut bytes_before = 0u64;
        for n in k..end {
            let Some(p) = self.pending.get(n).copied() else { break };
            let len = u64::try_from(p.len).unwrap_or(u64::MAX);
            let nth = u64::try_from(n - k).unwrap_or(u64::MAX);
            let judged = rt.judge(&reservation, nth, bytes_before, len, life);
            bytes_before = bytes_before.saturating_add(len);
            match judged {
                Ok(crossed) => {
                    report.lifetime_check_due |= crossed;
                    report.deliver += 1;
                    if let Some(pkt) = batch.packets.get_mut(p.packet) {
                        pkt.offset = p.start;
                        pkt.len = p.len;
                        pkt.action = Action::Deliver { spi };
                    }
                }
                Err(r) => drop_packet(&mut self.drops, report, batch, p.packet, r, Some(rt.drops())),
            }
        }
    }

    /// After the enclave authenticated and the window took the packet: trailer, inner
    /// checks, rewrite. Returns the inner packet's offset and length in its slot.
    fn decap_one(
        sa: &InboundSa,
        batch: &mut Batch<'_>,
        p: &Pending,
        outer_ecn: Ecn,
        admitted: &mut Option<FlowKey>,
    ) -> Result<(usize, usize), DropReason> {
        let cfg = sa.config();
        let shape = Shape::of(cfg);
        let slot_start = p.packet * batch.slot_len;
        let slot =
            batch.area.get_mut(slot_start..slot_start + batch.slot_len).ok_or(DropReason::Malformed)?;
        let pt_start = p.start + wire::esp::HEADER_LEN + shape.iv;
        let pt_end = (p.start + p.len).checked_sub(shape.icv).ok_or(DropReason::Malformed)?;
        let plaintext = slot.get_mut(pt_start..pt_end).ok_or(DropReason::Malformed)?;
        let (inner_len, trailer) = match EspTrailer::parse(plaintext) {
            Ok((inner, trailer)) => (inner.len(), trailer),
            Err(_) => return Err(DropReason::BadPadding),
        };
        let version = match trailer.next_header {
            IpProtocol::IPV4 => 4,
            IpProtocol::IPV6 => 6,
            // A dummy packet (RFC 4303 §2.6): authentic, but carries nothing.
            IpProtocol::IPV6_NO_NEXT_HEADER => return Err(DropReason::Dummy),
            _ => return Err(DropReason::BadNextHeader),
        };
        let inner_bytes = plaintext.get_mut(..inner_len).ok_or(DropReason::Malformed)?;
        if inner_bytes.first().map(|b| b >> 4) != Some(version) {
            return Err(DropReason::BadNextHeader);
        }
        // Bytes between the inner packet's end and the padding are TFC padding (§2.7).
        let inner = Inner::parse(inner_bytes)?;
        if *admitted != Some(inner.key) {
            if !selectors_admit(cfg, &inner.key.tuple()) {
                return Err(DropReason::SelectorMismatch);
            }
            *admitted = Some(inner.key);
        }
        let ecn = ecn::decapsulated(inner.ecn, outer_ecn).ok_or(DropReason::EcnCeOnNotEct)?;
        // Forwarding: the decapsulator decrements the inner TTL (RFC 4301 §5.1.2.1 note 2).
        packet::forward_rewrite(inner_bytes, &inner, ecn)?;
        Ok((pt_start, inner.len))
    }
}
