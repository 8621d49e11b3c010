//! One worker thread: its TUN queue, its UDP sockets, the raw ESP sockets it reads (each
//! has one reader) and sends with (all), and an
//! [`esp::Worker`] with its batch area.
//!
//! The loop, bounded in every step:
//!
//! 1. outbound: read up to `batch` IP packets from the TUN queue (cutting TSO/USO
//!    super-packets into their segments; a super-packet that does not fit the rest of the
//!    batch continues in the next one), encapsulate them with **one** enclave crossing,
//!    send the ESP packets with `sendmmsg` (UDP GSO where accepted), write ICMP errors
//!    back into the TUN queue;
//! 2. inbound: for each socket, one `recvmmsg` (GRO bursts cut into datagrams; IKE messages
//!    on port 4500 straight to the [`IkeInbox`], whatever their size), decapsulate
//!    with one crossing per full batch, write the inner packets into the TUN queue, runs of
//!    one TCP flow's segments merged into super-packets where the queue takes TSO
//!    ([`cio::gro`]);
//! 3. when neither found work, `poll` all descriptors and the stop eventfd, at most
//!    [`POLL_TIMEOUT`]; when both rounds in a row found work but no full batch, sleep the
//!    configured coalescing time (`coalesce_us`, tens of microseconds) first, so that under
//!    sustained traffic the next round finds a fuller batch (as a NIC's interrupt
//!    moderation does). The costs per round (syscalls, the crossing, waking the peer's
//!    reader) are then paid for dozens of small packets instead of a handful. A packet that
//!    arrives while the worker was idle is handled at once: only packets arriving during
//!    a nap wait, at most `coalesce_us`.
//!
//! Every worker may carry every SA. Where the tenant's enclave offers lanes
//! (`Enclave::esp_lane`: the inline backend), each worker takes one at start and crosses
//! through it without a lock: the workers' batches of one tenant, one SA's included, run
//! at once, and the enclave takes an SA's sequence numbers from them in any order within
//! its window, never one twice. Otherwise (the process backend) the enclave is one instance
//! behind a mutex ([`esp::SharedEnclave`]), held for each whole `encapsulate` call, so
//! outbound sequence numbers are drawn and handed to the enclave in one hold and reach it
//! in order whichever worker read the packets; and for each crossing of `decapsulate` only,
//! whose checks before and commits after the crossing are safe across workers; one
//! tenant's cryptography is then one enclave call at a time.

use core::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cio::gro::Gro;
use cio::gso::Segments;
use cio::poll::{self, EventFd};
use cio::raw_esp::RawEspSocket;
use cio::tun::{TunOffloads, TunQueue, MAX_READ};
use cio::udp::UdpSocket;
use cio::vnet::{VnetHeader, VNET_HDR_LEN};
use cio::{Datagram, Outgoing, RecvBuffers};
use enclave::{Enclave, EspCrossing};
use esp::{
    Action, Batch, Crossing, Encapsulation, Frame, Packet, Sad, SharedEnclave, Spd, HEADROOM, TAILROOM,
};
use wire::Ecn;

use crate::ike::IkeInbox;
use crate::stats::{Counter, IoDrop, WorkerStats};

/// The largest UDP payload or raw IP packet a receive takes whole (IPv4's 65,535-byte total
/// length, or a GRO burst, rounded up).
const MAX_DATAGRAM: usize = 65_536;

/// The longest a worker sleeps without checking the stop flag.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// The SA and policy tables every worker reads.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    pub(crate) sad: Sad,
    pub(crate) spd: Spd,
}

/// What the workers share with the control thread.
#[derive(Debug)]
pub(crate) struct Shared<E> {
    pub(crate) tables: RwLock<Tables>,
    pub(crate) enclave: Mutex<E>,
    pub(crate) stop: std::sync::atomic::AtomicBool,
    pub(crate) wake: EventFd,
    /// Where IKE messages on ESP-in-UDP ports go; `None`: counted and dropped.
    pub(crate) ike: Option<Arc<IkeInbox>>,
}

impl<E> Shared<E> {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stops every worker (a poisoned lock means another worker panicked mid-batch).
    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.notify();
    }
}

/// The descriptors a worker owns or shares.
#[derive(Debug)]
pub(crate) struct WorkerIo {
    pub(crate) tun: TunQueue,
    pub(crate) udp: Vec<Arc<UdpSocket>>,
    /// Every raw ESP socket, to send with.
    pub(crate) raw: Vec<Arc<RawEspSocket>>,
    /// The raw ESP sockets this worker receives from. Each has one reader: a socket gives
    /// each packet to one of the threads reading it, so two readers would split one SA's
    /// packets between them and hand them to the enclave out of order (replay drops).
    pub(crate) raw_rx: Vec<Arc<RawEspSocket>>,
}

/// How much work one step of the loop found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Work {
    /// Nothing to read.
    None,
    /// Something, less than a full batch: the source is drained for now.
    Partial,
    /// A full batch or receive: more is probably waiting.
    Full,
}

/// GRO bursts one receive takes from a UDP socket.
const GRO_BURSTS: usize = 8;

/// How many messages one receive takes for batches of `batch` packets: with GRO
/// (`bursts`) each message is a burst of datagrams, so a few fill a batch; a raw socket,
/// or a UDP socket without GRO, gives one packet per message.
fn receive_messages(batch: usize, bursts: bool) -> usize {
    if bursts {
        GRO_BURSTS
    } else {
        batch
    }
}

/// A super-packet read from the TUN queue, partly written into batches.
#[derive(Debug, Clone, Copy)]
struct PendingRead {
    len: usize,
    next: usize,
}

/// One worker's state.
pub(crate) struct Worker<E> {
    shared: Arc<Shared<E>>,
    /// This worker's own lane into the tenant's enclave, where the backend has lanes.
    lane: Option<Box<dyn EspCrossing>>,
    stats: Arc<WorkerStats>,
    io: WorkerIo,
    esp: esp::Worker,
    area: Vec<u8>,
    packets: Vec<Packet>,
    slot_len: usize,
    fill: usize,
    staging: Vec<u8>,
    pending: Option<PendingRead>,
    /// Receive buffers for the UDP sockets: with GRO each holds a burst of datagrams.
    rx: RecvBuffers,
    /// Receive buffers for the raw ESP sockets, which give one packet per message: a
    /// batch's worth, so one receive fills one crossing.
    raw_rx: RecvBuffers,
    /// Merges decapsulated TCP segments for the TUN queue.
    gro: Gro,
    /// The nap before a round under sustained traffic; zero: never.
    coalesce: Duration,
    /// Whether the last round found work.
    busy: bool,
}

/// The TOS / traffic class byte of an outer IP header.
fn outer_tos(ip: &[u8]) -> u8 {
    match (ip.first(), ip.get(1)) {
        (Some(&b0), Some(&b1)) if b0 >> 4 == 4 => b1,
        (Some(&b0), Some(&b1)) if b0 >> 4 == 6 => (b0 << 4) | (b1 >> 4),
        _ => 0,
    }
}

/// The ESP-in-UDP datagram of an encapsulated packet, if `local` is the socket for it.
fn udp_outgoing<'a>(p: &Packet, bytes: &'a [u8], local: SocketAddr) -> Option<Outgoing<'a>> {
    let Action::Transmit(t) = p.action else { return None };
    let Encapsulation::Udp { local_port, remote_port } = t.encapsulation else { return None };
    if local.port() != local_port || local.ip() != t.local {
        return None;
    }
    let esp = bytes.get(t.esp_offset.checked_sub(p.offset)?..)?;
    Some(Outgoing { dst: SocketAddr::new(t.remote, remote_port), tos: outer_tos(bytes), bytes: esp })
}

/// The raw outer packet of an encapsulated packet, if `v6` is its family.
fn raw_outgoing<'a>(p: &Packet, bytes: &'a [u8], v6: bool) -> Option<Outgoing<'a>> {
    let Action::Transmit(t) = p.action else { return None };
    if t.encapsulation != Encapsulation::Esp || t.remote.is_ipv6() != v6 {
        return None;
    }
    Some(Outgoing { dst: SocketAddr::new(t.remote, 0), tos: 0, bytes })
}

/// Our address a datagram arrived at: the one the socket reported, else the socket's own.
fn arrived_at(d: &Datagram<'_>, socket: SocketAddr) -> SocketAddr {
    SocketAddr::new(d.local.unwrap_or(socket.ip()), socket.port())
}

/// Puts a received ESP-in-UDP payload into the next slot.
fn push_udp(batch: &mut Batch<'_>, d: &Datagram<'_>, socket: SocketAddr) -> Result<(), IoDrop> {
    let local = arrived_at(d, socket);
    let frame = Frame::Udp { remote: d.remote, local, ecn: Ecn::from_bits(d.tos) };
    batch.push(frame, HEADROOM, d.bytes).map(drop).map_err(|_| IoDrop::Oversize)
}

/// Puts a received raw ESP packet into the next slot, with the addresses and ECN field the
/// socket read from its IP header.
fn push_raw(batch: &mut Batch<'_>, d: &Datagram<'_>) -> Result<(), IoDrop> {
    let local = d.local.ok_or(IoDrop::BadDatagram)?;
    let frame = Frame::Esp { remote: d.remote.ip(), local, ecn: Ecn::from_bits(d.tos) };
    batch.push(frame, HEADROOM, d.bytes).map(drop).map_err(|_| IoDrop::Oversize)
}

/// How a worker reaches its tenant's enclave: through its own lane, or the shared instance.
enum Door<'a, E> {
    Lane(&'a mut (dyn EspCrossing + 'static)),
    Shared(SharedEnclave<'a, E>),
}

impl<E: Enclave + 'static> Crossing for Door<'_, E> {
    type Target = dyn EspCrossing;

    fn with<R>(&mut self, f: impl FnOnce(&mut Self::Target) -> R) -> Option<R> {
        match self {
            Door::Lane(lane) => Some(f(&mut **lane)),
            Door::Shared(shared) => shared.with(|e| f(e)),
        }
    }
}

/// Hands a batch to the ESP core under the tables' read lock, through the worker's lane or
/// with the enclave's mutex taken as [`SharedEnclave`] says; `None` if a lock is poisoned
/// (another worker panicked inside an enclave call).
fn crossing<E: Enclave + 'static, R>(
    shared: &Shared<E>,
    lane: Option<&mut Box<dyn EspCrossing>>,
    f: impl FnOnce(&mut Door<'_, E>, &Tables) -> R,
) -> Option<R> {
    let tables = shared.tables.read().ok()?;
    let mut door = match lane {
        Some(lane) => Door::Lane(&mut **lane),
        None => Door::Shared(SharedEnclave::new(&shared.enclave)),
    };
    let r = f(&mut door, &tables);
    match door {
        Door::Shared(shared) if shared.poisoned() => None,
        _ => Some(r),
    }
}

impl<E: Enclave + 'static> Worker<E> {
    /// A worker with batches of `batch` packets in slots of `slot_len` bytes, napping
    /// `coalesce` between rounds under sustained traffic.
    pub(crate) fn new(
        shared: Arc<Shared<E>>,
        stats: Arc<WorkerStats>,
        io: WorkerIo,
        batch: usize,
        slot_len: usize,
        tun_offloads: TunOffloads,
        coalesce: Duration,
    ) -> Self {
        let capacity = crate::area_packets(batch);
        let gro = io.udp.iter().any(|s| s.offloads().gro);
        // Every buffer holds a whole reassembled datagram: an IKE message on port 4500 may be
        // one (a certificate chain), and leaves through the IKE inbox, never a slot. With GRO
        // a buffer holds a burst of segments instead, so fewer are needed.
        let rx = RecvBuffers::new(receive_messages(batch, gro), MAX_DATAGRAM);
        let raw_rx = RecvBuffers::new(
            if io.raw_rx.is_empty() { 1 } else { receive_messages(batch, false) },
            MAX_DATAGRAM,
        );
        let lane = shared.enclave.lock().ok().and_then(|mut e| e.esp_lane());
        Self {
            lane,
            shared,
            stats,
            io,
            esp: esp::Worker::new(esp::WorkerConfig::default(), capacity),
            area: vec![0; capacity * slot_len],
            packets: vec![Packet::EMPTY; capacity],
            slot_len,
            fill: batch,
            staging: vec![0; MAX_READ],
            pending: None,
            rx,
            raw_rx,
            gro: Gro::new(tun_offloads.tso4, tun_offloads.tso6)
                .with_udp(tun_offloads.uso4, tun_offloads.uso6),
            coalesce,
            busy: false,
        }
    }

    /// Runs until the stop flag is set.
    pub(crate) fn run(mut self) {
        if !self.coalesce.is_zero() {
            // Without it the naps would last up to 50 µs longer than asked. On failure they
            // only do that.
            let _ = poll::set_timer_slack(Duration::from_micros(1));
        }
        while !self.shared.stopping() {
            let work = self.outbound().max(self.inbound());
            match work {
                Work::None => self.wait(),
                // A lone packet after an idle spell (`busy` false) is not held back.
                Work::Partial if self.busy && !self.coalesce.is_zero() => std::thread::sleep(self.coalesce),
                Work::Partial | Work::Full => {}
            }
            self.busy = work != Work::None;
        }
        self.stats.publish_esp_drops(self.esp.drops());
    }

    fn wait(&self) {
        let wake = self.shared.wake.as_fd();
        let mut fds = [wake; poll::MAX_FDS];
        let sockets = self.io.udp.iter().map(AsFd::as_fd).chain(self.io.raw_rx.iter().map(|s| s.as_fd()));
        let mut n = 0;
        // More sockets than poll slots are still read every round, after a timeout at worst.
        for (slot, fd) in
            fds.iter_mut().zip(core::iter::once(wake).chain([self.io.tun.as_fd()]).chain(sockets))
        {
            *slot = fd;
            n += 1;
        }
        let _ = poll::wait_readable(fds.get(..n).unwrap_or(&[]), POLL_TIMEOUT);
    }

    /// Reads from the TUN queue into the next slots until the batch is full, the queue is
    /// empty or `fill` packets were read; returns how many packets went in.
    fn fill_from_tun(&mut self, batch: &mut Batch<'_>) -> usize {
        let mut added = 0;
        // At most `fill` reads per round, so packets that are all dropped cannot keep the
        // loop going while traffic arrives.
        let mut reads = 0;
        while batch.len() < self.fill {
            let p = match self.pending {
                Some(p) => p,
                None if reads >= self.fill => break,
                None => {
                    reads += 1;
                    match self.io.tun.read(&mut self.staging) {
                        Ok(Some(len)) => PendingRead { len, next: 0 },
                        Ok(None) => break,
                        Err(_) => {
                            self.stats.drop_io(IoDrop::TunRead, 1);
                            break;
                        }
                    }
                }
            };
            self.pending = None;
            let bytes = self.staging.get(..p.len).unwrap_or(&[]);
            let segments = VnetHeader::parse(bytes)
                .zip(bytes.get(VNET_HDR_LEN..))
                .ok_or(cio::gso::GsoError::Truncated)
                .and_then(|(h, packet)| Segments::new(&h, packet));
            let segments = match segments {
                Ok(s) => s,
                Err(_) => {
                    self.stats.drop_io(IoDrop::BadOffload, 1);
                    continue;
                }
            };
            if p.next == 0 && segments.is_super() {
                self.stats.add(Counter::TunRxSuper, 1);
            }
            let i = batch.len();
            let written = batch
                .slot_mut(i)
                .and_then(|slot| {
                    let end = slot.len().checked_sub(TAILROOM)?;
                    slot.get_mut(HEADROOM..end)
                })
                .ok_or(IoDrop::Oversize)
                .and_then(|room| segments.write(p.next, room).map_err(|_| IoDrop::Oversize));
            match written
                .and_then(|n| batch.push_in_place(Frame::Ip, HEADROOM, n).map_err(|_| IoDrop::Oversize))
            {
                Ok(_) => added += 1,
                Err(d) => self.stats.drop_io(d, 1),
            }
            if p.next + 1 < segments.count() {
                self.pending = Some(PendingRead { len: p.len, next: p.next + 1 });
            }
        }
        added
    }

    /// One outbound round; how much there was to do.
    fn outbound(&mut self) -> Work {
        let mut area = core::mem::take(&mut self.area);
        let mut packets = core::mem::take(&mut self.packets);
        let work = self.outbound_in(&mut area, &mut packets);
        self.area = area;
        self.packets = packets;
        work
    }

    fn outbound_in(&mut self, area: &mut [u8], packets: &mut [Packet]) -> Work {
        let Ok(mut batch) = Batch::new(area, self.slot_len, packets) else { return Work::None };
        let added = self.fill_from_tun(&mut batch);
        if added == 0 {
            return Work::None;
        }
        // The rest of a super-packet waits in the staging buffer, or the reads stopped at
        // the batch's end: the queue was not drained.
        let work = if self.pending.is_some() || added >= self.fill { Work::Full } else { Work::Partial };
        self.stats.add(Counter::TunRx, u64::try_from(added).unwrap_or(u64::MAX));
        let esp = &mut self.esp;
        let Some(report) = crossing(&self.shared, self.lane.as_mut(), |enclave, t| {
            esp.encapsulate(enclave, &t.sad, &t.spd, &mut batch)
        }) else {
            self.shared.halt();
            return Work::None;
        };
        let s = &self.stats;
        s.add(Counter::Batches, 1);
        s.add(Counter::Crossings, u64::from(report.crossings));
        s.add(Counter::Encapsulated, u64::from(report.transmit));
        let mut attempted = 0usize;
        for sock in &self.io.udp {
            let local = sock.local_addr();
            let r = sock.send(batch.iter().filter_map(|(p, b)| udp_outgoing(p, b, local)));
            attempted += r.sent + r.failed;
            s.add(Counter::NetTx, r.sent as u64);
            s.add(Counter::NetTxMessages, r.messages as u64);
            s.drop_io(IoDrop::SendFailed, r.failed as u64);
        }
        for sock in &self.io.raw {
            let v6 = sock.is_ipv6();
            let r = sock.send(batch.iter().filter_map(|(p, b)| raw_outgoing(p, b, v6)));
            attempted += r.sent + r.failed;
            s.add(Counter::NetTx, r.sent as u64);
            s.add(Counter::NetTxMessages, r.messages as u64);
            s.drop_io(IoDrop::SendFailed, r.failed as u64);
        }
        let unsent = usize::try_from(report.transmit).unwrap_or(0).saturating_sub(attempted);
        s.drop_io(IoDrop::NoSocket, unsent as u64);
        for (p, bytes) in batch.iter() {
            match p.action {
                Action::IcmpError => match self.io.tun.write(bytes) {
                    Ok(()) => {
                        s.add(Counter::IcmpErrors, 1);
                        s.add(Counter::TunTx, 1);
                        s.add(Counter::TunTxWrites, 1);
                    }
                    Err(_) => s.drop_io(IoDrop::TunWrite, 1),
                },
                Action::Bypass => s.drop_io(IoDrop::Bypass, 1),
                _ => {}
            }
        }
        s.publish_esp_drops(self.esp.drops());
        work
    }

    /// One inbound round over every socket; how much arrived (the most of any socket).
    fn inbound(&mut self) -> Work {
        let mut area = core::mem::take(&mut self.area);
        let mut packets = core::mem::take(&mut self.packets);
        let mut work = Work::None;
        for k in 0..self.io.udp.len() + self.io.raw_rx.len() {
            work = work.max(self.inbound_from(k, &mut area, &mut packets));
        }
        self.area = area;
        self.packets = packets;
        work
    }

    /// Receives once from socket `k` (UDP sockets first, then raw) and processes it all.
    fn inbound_from(&mut self, k: usize, area: &mut [u8], packets: &mut [Packet]) -> Work {
        let udp_local = self.io.udp.get(k).map(|u| u.local_addr());
        let (received, rx) = match (self.io.udp.get(k), self.io.raw_rx.get(k.wrapping_sub(self.io.udp.len())))
        {
            (Some(u), _) => (u.recv(&mut self.rx), &self.rx),
            (None, Some(r)) => (r.recv(&mut self.raw_rx), &self.raw_rx),
            (None, None) => return Work::None,
        };
        let work = match received {
            Ok(0) => return Work::None,
            // Every buffer filled: the socket probably holds more.
            Ok(n) if n >= rx.capacity() => Work::Full,
            Ok(_) => Work::Partial,
            Err(_) => {
                self.stats.drop_io(IoDrop::RecvError, 1);
                return Work::None;
            }
        };
        self.stats.drop_io(IoDrop::BadDatagram, rx.dropped() as u64);
        let Ok(mut batch) = Batch::new(area, self.slot_len, packets) else { return Work::None };
        let mut inbound = Inbound {
            esp: &mut self.esp,
            shared: &self.shared,
            lane: self.lane.as_mut(),
            stats: &self.stats,
            tun: &self.io.tun,
            gro: &mut self.gro,
        };
        for d in rx.datagrams() {
            if batch.len() == batch.capacity() {
                inbound.decapsulate(&mut batch);
                batch.clear();
            }
            self.stats.add(Counter::NetRx, 1);
            let pushed = match udp_local {
                Some(socket) if IkeInbox::is_ike(d.bytes) => match &self.shared.ike {
                    Some(inbox) if inbox.push(d.remote, arrived_at(&d, socket), d.bytes) => {
                        self.stats.add(Counter::IkeForwarded, 1);
                        Ok(())
                    }
                    _ => Err(IoDrop::Ike),
                },
                Some(socket) => push_udp(&mut batch, &d, socket),
                None => push_raw(&mut batch, &d),
            };
            if let Err(reason) = pushed {
                self.stats.drop_io(reason, 1);
            }
        }
        inbound.decapsulate(&mut batch);
        work
    }
}

/// What the inbound path of one receive needs of its worker (borrowed field by field, so
/// that the received datagrams stay readable meanwhile).
struct Inbound<'w, E> {
    esp: &'w mut esp::Worker,
    shared: &'w Shared<E>,
    lane: Option<&'w mut Box<dyn EspCrossing>>,
    stats: &'w WorkerStats,
    tun: &'w TunQueue,
    gro: &'w mut Gro,
}

impl<E: Enclave + 'static> Inbound<'_, E> {
    /// Decapsulates a batch and writes the inner packets into the TUN queue, merging runs
    /// of TCP segments and of UDP datagrams (every run is written before this returns:
    /// nothing waits for a later batch).
    fn decapsulate(&mut self, batch: &mut Batch<'_>) {
        let Self { esp, shared, lane, stats, tun, gro } = self;
        let (shared, s, tun) = (*shared, *stats, *tun);
        if batch.is_empty() {
            return;
        }
        let Some(report) =
            crossing(shared, lane.as_deref_mut(), |enclave, t| esp.decapsulate(enclave, &t.sad, batch))
        else {
            shared.halt();
            return;
        };
        s.add(Counter::Batches, 1);
        s.add(Counter::Crossings, u64::from(report.crossings));
        s.add(Counter::Decapsulated, u64::from(report.deliver));
        s.add(Counter::Keepalives, u64::from(report.keepalive));
        s.add(Counter::EsnResyncs, u64::from(report.resynced));
        let mut write = |header: &VnetHeader, packet: &[u8], segments: usize| {
            let n = segments as u64;
            match tun.write_with(header, packet) {
                Ok(()) => {
                    s.add(Counter::TunTx, n);
                    s.add(Counter::TunTxWrites, 1);
                    if segments > 1 {
                        s.add(Counter::TunTxSuper, 1);
                    }
                }
                Err(_) => s.drop_io(IoDrop::TunWrite, n),
            }
        };
        for (p, bytes) in batch.iter() {
            match p.action {
                Action::Deliver { .. } => gro.push(bytes, &mut write),
                // IKE on port 4500 went to the inbox before the batch (`IkeInbox::is_ike`):
                // the workers push only socket payloads, so the ESP core finds none. Counted
                // should that change.
                Action::Ike { .. } => s.drop_io(IoDrop::Ike, 1),
                _ => {}
            }
        }
        gro.flush(&mut write);
        s.publish_esp_drops(esp.drops());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::IpAddr;
    use esp::{OutboundSaId, Transmit};

    #[test]
    fn one_receive_fills_a_batch_whatever_the_socket() {
        // A raw socket's messages are single packets: a batch of them, not eight.
        assert_eq!(receive_messages(64, false), 64);
        assert_eq!(receive_messages(256, false), 256);
        assert_eq!(receive_messages(64, true), GRO_BURSTS);
    }

    #[test]
    fn outer_tos_reads_both_families() {
        assert_eq!(outer_tos(&[0x45, 0xb9]), 0xb9);
        assert_eq!(outer_tos(&[0x6b, 0x90, 0, 0]), 0xb9);
        assert_eq!(outer_tos(&[]), 0);
    }

    #[test]
    fn transmits_go_to_the_socket_of_their_endpoint() {
        let local: IpAddr = "198.18.0.1".parse().unwrap();
        let t = Transmit {
            sa: OutboundSaId(0),
            local,
            remote: "198.18.0.2".parse().unwrap(),
            encapsulation: Encapsulation::Udp { local_port: 4500, remote_port: 4501 },
            esp_offset: 100 + 28,
        };
        let p = Packet { offset: 100, len: 60, frame: Frame::Ip, action: Action::Transmit(t) };
        let bytes = [0x45u8; 60];
        let o = udp_outgoing(&p, &bytes, SocketAddr::new(local, 4500)).unwrap();
        assert_eq!(o.dst, "198.18.0.2:4501".parse().unwrap());
        assert_eq!(o.bytes.len(), 32, "the UDP payload: from the ESP header on");
        assert!(udp_outgoing(&p, &bytes, SocketAddr::new(local, 4501)).is_none());
        assert!(raw_outgoing(&p, &bytes, false).is_none());
        let raw =
            Packet { action: Action::Transmit(Transmit { encapsulation: Encapsulation::Esp, ..t }), ..p };
        assert_eq!(raw_outgoing(&raw, &bytes, false).unwrap().bytes.len(), 60);
        assert!(raw_outgoing(&raw, &bytes, true).is_none());
    }
}
