//! The fast paths (`worker/fast_out.rs`, `worker/fast_in.rs`) against the general path: two
//! gateways with the same SAs and keys, one with the fast paths off, encapsulate (or
//! decapsulate) the same batches; every byte of every slot, every packet's action, the
//! report, the drop counters and the SA's numbering or window must come out the same, for
//! batches that qualify and for every way a batch can fail to (then the general path must
//! take it whole).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave_core::{Cipher, Integ, Suite};
use wire::Ecn;

/// A deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Two gateways A (fast path on) and A' (off), each with an SA to its own peer; the SAs
/// have the same SPI, keys and settings, so the same packets give the same bytes.
struct Pair {
    fast: Gateway,
    general: Gateway,
    _peers: (Gateway, Gateway),
}

fn pair(shape: Shape, lifetime: Lifetime) -> Pair {
    let now = Instant::now();
    let (mut fast, mut general) = (Gateway::new(), Gateway::new());
    let (mut b1, mut b2) = (Gateway::new(), Gateway::new());
    general.worker.set_fast_path(false);
    for (a, b) in [(&mut fast, &mut b1), (&mut general, &mut b2)] {
        tunnel_with_lifetime(a, b, shape, 0x4242, now, lifetime);
    }
    Pair { fast, general, _peers: (b1, b2) }
}

/// Rewrites an IPv4 header's TOS byte and fixes its checksum.
fn set_tos(p: &mut [u8], tos: u8) {
    p[1] = tos;
    fix_checksum(p);
}

fn fix_checksum(p: &mut [u8]) {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    p[10..12].copy_from_slice(&[0, 0]);
    let sum = wire::checksum::finish(wire::checksum::data(&p[..ihl]));
    p[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// Ways a batch of one flow is spoilt (each but the first must send it down the general
/// path, except that another flow is only another if the batch has a second packet).
const SPOILERS: usize = 10;

/// The spoilers that make another flow, not a packet the fast path refuses.
const OTHER_FLOW: [usize; 2] = [2, 8];

/// One inner packet of the batch's flow, at random size, TOS and DF; `spoil` (with the
/// packet's index) changes it in one of the [`SPOILERS`] ways.
fn inner_packet(rng: &mut Rng, shape: Shape, spoil: Option<usize>) -> Vec<u8> {
    let (src, dst) = inner_hosts(shape.inner_v6);
    // Below 1350: with any suite's overhead the outer packet fits 1500 bytes.
    let payload = usize::try_from(rng.below(1350)).unwrap();
    let ecn = Ecn::from_bits(u8::try_from(rng.below(4)).unwrap());
    let df = rng.chance(70);
    let ttl = u8::try_from(2 + rng.below(254)).unwrap();
    let mut p = udp_packet(src, dst, payload, ttl, ecn, df);
    if shape.inner_v6 {
        return p;
    }
    set_tos(&mut p, u8::try_from(rng.below(256)).unwrap());
    match spoil {
        None | Some(0) => {}
        // TTL 1: the packet is dropped (TTL exceeded).
        Some(1) => {
            p[8] = 1;
            fix_checksum(&mut p);
        }
        // Another flow (destination port).
        Some(2) => {
            p[23] ^= 1;
        }
        // A broken header checksum.
        Some(3) => p[10] ^= 0x40,
        // Too big for the path MTU, DF set (ICMP error) or clear (fragmented).
        Some(4) | Some(5) => {
            p = udp_packet(src, dst, 1480, ttl, ecn, spoil == Some(4));
        }
        // A later fragment.
        Some(6) => {
            p[6..8].copy_from_slice(&0x00b9u16.to_be_bytes());
            fix_checksum(&mut p);
        }
        // An IPv4 option (a no-op and end of list in one word).
        Some(7) => {
            let mut q = p[..20].to_vec();
            q.extend_from_slice(&[1, 1, 1, 0]);
            q.extend_from_slice(&p[20..]);
            q[0] = 0x46;
            let len = u16::try_from(q.len()).unwrap();
            q[2..4].copy_from_slice(&len.to_be_bytes());
            fix_checksum(&mut q);
            p = q;
        }
        // Another protocol in the same flow's addresses (ICMP echo).
        Some(8) => {
            p[9] = 1;
            p[20..22].copy_from_slice(&[8, 0]);
            fix_checksum(&mut p);
        }
        // Shorter than an IPv4 header with ports.
        _ => {
            p.truncate(22);
            p[2..4].copy_from_slice(&22u16.to_be_bytes());
            fix_checksum(&mut p);
        }
    }
    p
}

/// What one gateway made of a batch.
struct Outcome {
    report: BatchReport,
    packets: Vec<Packet>,
    bytes: Vec<u8>,
    drops: DropCounts,
}

impl Outcome {
    fn of(report: BatchReport, area: &Area, g: &Gateway) -> Self {
        Self { report, packets: area.packets.clone(), bytes: area.bytes.clone(), drops: *g.worker.drops() }
    }
}

/// The fast gateway's outcome (first) must be the general one's (second), to the byte, and
/// the general gateway must never have taken a fast path.
fn assert_agree(outcomes: &[Outcome], general_gateway: &Gateway) {
    assert_eq!(general_gateway.worker.fast_batches(), FastBatches::default());
    let [fast, general] = outcomes else { panic!("two outcomes") };
    assert_eq!(fast.report, general.report, "reports");
    assert_eq!(fast.packets, general.packets, "packets");
    assert_eq!(fast.drops, general.drops, "drop counters");
    if fast.bytes != general.bytes {
        let at = fast.bytes.iter().zip(&general.bytes).position(|(a, b)| a != b).unwrap();
        panic!("bytes differ first at slot {} offset {}", at / SLOT, at % SLOT);
    }
}

/// Runs one batch through both gateways and checks that they agree; returns whether the
/// fast gateway took its fast path, and the report.
fn same_batch(pair: &mut Pair, inners: &[(Vec<u8>, usize)]) -> (bool, BatchReport) {
    let before = pair.fast.worker.fast_batches();
    let mut results = Vec::new();
    for g in [&mut pair.fast, &mut pair.general] {
        let mut area = Area::new(inners.len());
        let mut batch = area.batch();
        for (p, junk) in inners {
            // `junk` bytes past the IP length: link-layer padding, not part of the packet.
            let mut bytes = p.clone();
            bytes.resize(p.len() + junk, 0xee);
            batch.push(Frame::Ip, OFFSET, &bytes).unwrap();
        }
        let report = g.worker.encapsulate(&mut g.enclave, &g.sad, &g.spd, &mut batch);
        results.push(Outcome::of(report, &area, g));
    }
    assert_agree(&results, &pair.general);
    (pair.fast.worker.fast_batches().outbound > before.outbound, results[0].report)
}

/// The layout of the in-memory benchmark and the gateways' default.
const GCM_UDP_V4: Shape = Shape {
    suite: Suite::aead(Cipher::AesGcm16_256),
    esn: false,
    inner_v6: false,
    outer_v6: false,
    udp: true,
};

fn shapes() -> Vec<Shape> {
    let s = |suite, esn, inner_v6, outer_v6, udp| Shape { suite, esn, inner_v6, outer_v6, udp };
    vec![
        s(Suite::aead(Cipher::AesGcm16_256), false, false, false, true),
        s(Suite::aead(Cipher::AesGcm16_128), true, false, false, false),
        s(Suite::aead(Cipher::ChaCha20Poly1305), false, false, false, true),
        // A 16-byte payload alignment: up to 15 bytes of padding.
        s(Suite::cbc(Cipher::AesCbc256, Integ::HmacSha512_256), false, false, false, false),
        s(Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128), true, false, false, true),
        // Not for the fast path: IPv6 outside or inside.
        s(Suite::aead(Cipher::AesGcm16_256), false, false, true, true),
        s(Suite::aead(Cipher::AesGcm16_256), false, true, false, true),
    ]
}

#[test]
fn fast_and_general_paths_write_the_same_bytes() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for shape in shapes() {
        let mut pair = pair(shape, Lifetime::default());
        let (mut fast, mut spoilt) = (0, 0);
        for round in 0..60 {
            let n = 1 + usize::try_from(rng.below(32)).unwrap();
            // Half the batches clean, the rest spoilt at one random packet.
            let spoil = (round % 2 == 1)
                .then(|| (usize::try_from(rng.below(n as u64)).unwrap(), 1 + (round / 2) % (SPOILERS - 1)));
            let inners: Vec<_> = (0..n)
                .map(|i| {
                    let how = spoil.filter(|(at, _)| *at == i).map(|(_, how)| how);
                    let junk = if rng.chance(10) { usize::try_from(rng.below(8)).unwrap() } else { 0 };
                    (inner_packet(&mut rng, shape, how), junk)
                })
                .collect();
            if same_batch(&mut pair, &inners).0 {
                fast += 1;
                let one_flow = n == 1 && spoil.is_some_and(|(_, how)| OTHER_FLOW.contains(&how));
                spoilt += usize::from(spoil.is_some() && !one_flow);
            }
        }
        let eligible = !shape.inner_v6 && !shape.outer_v6;
        if eligible {
            // Every clean batch (30), and spoilt ones of a single other-flow packet.
            assert!(fast >= 30, "{shape:?}: only {fast} batches took the fast path");
        } else {
            assert_eq!(fast, 0, "{shape:?}");
        }
        assert_eq!(spoilt, 0, "{shape:?}: a spoilt batch took the fast path");
    }
}

/// Packet and byte limits that eight batches of 24 packets cross, soft then hard (at most
/// 100 packets or 90,000 bytes: the fifth batch at the latest).
fn small_lifetime() -> Lifetime {
    let soft = LifetimeLimits { packets: Some(50), bytes: Some(40_000), time: None };
    let hard = LifetimeLimits { packets: Some(100), bytes: Some(90_000), time: None };
    Lifetime { soft, hard }
}

/// The reports of the batches that took the fast path, of eight runs of `batch`.
fn fast_reports(mut batch: impl FnMut() -> (bool, BatchReport)) -> Vec<BatchReport> {
    (0..8)
        .filter_map(|_| {
            let (fast, report) = batch();
            fast.then_some(report)
        })
        .collect()
}

/// The limits of [`small_lifetime`] must have been crossed inside fast batches: past the
/// hard limit the SA is expired and the general path drops everything, so a drop must
/// come from a fast batch, counted under `HardLifetime` (`hard_drops`).
fn assert_limits_crossed(fast_reports: &[BatchReport], hard_drops: u64) {
    assert!(fast_reports.len() >= 2, "{fast_reports:?}");
    assert!(fast_reports.iter().any(|r| r.lifetime_check_due), "{fast_reports:?}");
    assert!(fast_reports.iter().any(|r| r.dropped > 0), "{fast_reports:?}");
    assert!(hard_drops > 0);
}

#[test]
fn lifetime_limits_reached_inside_a_fast_batch_count_and_drop_alike() {
    let shape = GCM_UDP_V4;
    let mut pair = pair(shape, small_lifetime());
    let mut rng = Rng(7);
    let reports = fast_reports(|| {
        let inners: Vec<_> = (0..24).map(|_| (inner_packet(&mut rng, shape, None), 0)).collect();
        same_batch(&mut pair, &inners)
    });
    assert_limits_crossed(&reports, pair.fast.worker.drops().get(DropReason::HardLifetime));
}

#[test]
fn the_fast_path_output_decapsulates() {
    let shape = GCM_UDP_V4;
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, shape, 0x77, Instant::now());
    let mut rng = Rng(11);
    let inners: Vec<_> = (0..32)
        .map(|_| {
            let mut p = inner_packet(&mut rng, shape, None);
            // Two hops to go (the decapsulator forwards too).
            p[8] = p[8].max(3);
            fix_checksum(&mut p);
            p
        })
        .collect();
    let (outers, actions, report) = encapsulate(&mut a, &inners);
    assert_eq!(a.worker.fast_batches().outbound, 1);
    assert_eq!(report.transmit, 32, "{actions:?}");
    let (delivered, report) = decapsulate(&mut b, &outers.into_iter().map(|(_, o)| o).collect::<Vec<_>>());
    assert_eq!(b.worker.fast_batches().inbound, 1);
    assert_eq!(
        report.deliver,
        32,
        "{:?}",
        delivered.iter().map(|d| d.0).filter(|a| !matches!(a, Action::Deliver { .. })).collect::<Vec<_>>()
    );
    for ((action, bytes), inner) in delivered.iter().zip(&inners) {
        assert!(matches!(action, Action::Deliver { .. }), "{action:?}");
        // The encapsulator and the decapsulator each count a hop (RFC 4301 §5.1.2.1).
        assert_eq!(bytes, &after_hops(inner, 2));
    }
}

// ---- inbound -----------------------------------------------------------------------------

/// A sender S and two receivers with the same inbound SA (same SPI, keys and settings): R
/// with the fast paths on, R' with them off. S's packets go to both.
struct InPair {
    sender: Gateway,
    fast: Gateway,
    general: Gateway,
    _twin: Gateway,
}

fn in_pair(shape: Shape, options: TunnelOptions) -> InPair {
    let now = Instant::now();
    let (mut sender, mut twin) = (Gateway::new(), Gateway::new());
    let (mut fast, mut general) = (Gateway::new(), Gateway::new());
    general.worker.set_fast_path(false);
    tunnel_with(&mut sender, &mut fast, shape, 0x5151, now, options.clone());
    // The twin's outbound SA is the sender's (same keys); it only makes R' the same SA.
    tunnel_with(&mut twin, &mut general, shape, 0x5151, now, options);
    InPair { sender, fast, general, _twin: twin }
}

/// The receivers' selectors narrowed to the test flow's protocol and ports (UDP 1234 to
/// 5678), so that another protocol or port is refused.
fn narrow_selectors(shape: Shape) -> TunnelOptions {
    let (a_net, b_net) = inner_nets(shape.inner_v6);
    let udp = |addresses, port| TrafficSelector {
        addresses,
        protocol: 17,
        ports: PortRange { start: port, end: port },
    };
    TunnelOptions {
        inbound_selectors: Some((udp(a_net, 1234), udp(b_net, 5678))),
        ..TunnelOptions::default()
    }
}

/// Ways a received batch is spoilt at one packet. The inner ones are made before the
/// sender encapsulates; the others change the received bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum InSpoil {
    /// Arrives with TTL 1 (the receiver must not forward it).
    InnerTtl,
    /// Another flow (destination port), another protocol (ICMP), a later fragment, an
    /// IPv4 option: delivered, but not by `open_fast` without a full parse.
    InnerOtherFlow,
    InnerIcmp,
    /// The flow's addresses and port bytes under another protocol (TCP).
    InnerOtherProtocol,
    InnerLaterFragment,
    InnerOption,
    /// Outer CE over an inner Not-ECT packet (RFC 6040: drop).
    CeOnNotEct,
    /// Authentic packets with a trailer no Cloister sender writes: a Pad Length one too
    /// long, a wrong padding byte, Next Header 59 (a dummy packet), Next Header IPv6 over
    /// an IPv4 packet.
    PadLenUp,
    PadByte,
    DummyNextHeader,
    V6NextHeader,
    /// The ICV's last byte flipped.
    BitFlip,
    /// A copy of an earlier packet of the same batch (the window refuses it at commit).
    DuplicateInBatch,
    /// A packet of the previous batch again (the window refuses it before the enclave).
    Replay,
    /// An SPI nobody has.
    WrongSpi,
    /// Shorter than any ESP packet of the suite.
    Truncated,
    /// A NAT keepalive (ESP-in-UDP), or for raw ESP another truncated packet.
    Keepalive,
    /// An IKE message (zero marker) from the socket, or an outer IPv4 fragment.
    IkeOrOuterFragment,
    /// A whole packet (also in a batch from the socket) whose outer IPv4 header checksum is
    /// wrong (over IPv6: another source address).
    OuterChecksum,
    /// Four bytes short: no longer whole CBC blocks (for the AEADs, an ICV failure).
    FourShort,
}

const IN_SPOILS: [InSpoil; 20] = [
    InSpoil::InnerTtl,
    InSpoil::InnerOtherFlow,
    InSpoil::InnerIcmp,
    InSpoil::InnerOtherProtocol,
    InSpoil::InnerLaterFragment,
    InSpoil::InnerOption,
    InSpoil::CeOnNotEct,
    InSpoil::PadLenUp,
    InSpoil::PadByte,
    InSpoil::DummyNextHeader,
    InSpoil::V6NextHeader,
    InSpoil::BitFlip,
    InSpoil::DuplicateInBatch,
    InSpoil::Replay,
    InSpoil::WrongSpi,
    InSpoil::Truncated,
    InSpoil::Keepalive,
    InSpoil::IkeOrOuterFragment,
    InSpoil::OuterChecksum,
    InSpoil::FourShort,
];

impl InSpoil {
    /// Whether the inbound fast path must refuse a batch of `shape` with this packet in it.
    fn refused(self, shape: Shape) -> bool {
        match self {
            Self::Replay
            | Self::WrongSpi
            | Self::Truncated
            | Self::Keepalive
            | Self::IkeOrOuterFragment
            | Self::OuterChecksum => true,
            Self::FourShort => shape.suite.esp_payload_align() > 4,
            _ => false,
        }
    }
}

/// The sender's enclave, rewriting one packet's trailer before it seals it (so the packet
/// authenticates at the receivers).
struct TrailerSpoiler<'a> {
    enclave: &'a mut enclave_core::InlineEnclave,
    icv: usize,
    spoil: Option<(usize, InSpoil)>,
}

impl enclave_core::EspCrossing for TrailerSpoiler<'_> {
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[enclave_core::EspDescriptor],
        status: &mut [enclave_core::EspStatus],
    ) -> enclave_core::Result<enclave_core::BatchSummary> {
        if let Some((at, how)) = self.spoil {
            let d = &descriptors[at];
            let end = usize::try_from(d.offset + d.len).unwrap() - self.icv;
            match how {
                InSpoil::PadLenUp => packets[end - 2] += 1,
                // The last padding byte (the inner packet makes at least two).
                InSpoil::PadByte => packets[end - 3] ^= 0x80,
                InSpoil::DummyNextHeader => packets[end - 1] = 59,
                InSpoil::V6NextHeader => packets[end - 1] = 41,
                _ => {}
            }
        }
        self.enclave.esp_crossing(packets, descriptors, status)
    }
}

/// Where the ESP (or UDP payload) of outer packet `o` starts, and its IP packet's end.
fn esp_bounds(o: &[u8], shape: Shape) -> (usize, usize) {
    let (ip, end) = if shape.outer_v6 {
        (40, 40 + usize::from(u16::from_be_bytes([o[4], o[5]])))
    } else {
        (20, usize::from(u16::from_be_bytes([o[2], o[3]])))
    };
    (ip + if shape.udp { 8 } else { 0 }, end)
}

/// Cuts outer packet `o` to `len` bytes, fixing its IP (and UDP) length fields.
fn shorten(o: &mut Vec<u8>, len: usize, shape: Shape) {
    o.truncate(len);
    let ip = if shape.outer_v6 { 40 } else { 20 };
    if shape.outer_v6 {
        o[4..6].copy_from_slice(&u16::try_from(len - 40).unwrap().to_be_bytes());
    } else {
        o[2..4].copy_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
        fix_checksum(o);
    }
    if shape.udp {
        o[ip + 4..ip + 6].copy_from_slice(&u16::try_from(len - ip).unwrap().to_be_bytes());
    }
}

/// Sets the outer ECN field to CE.
fn outer_ce(o: &mut [u8], shape: Shape) {
    if shape.outer_v6 {
        o[1] |= 0x30;
    } else {
        o[1] |= 0b11;
        fix_checksum(o);
    }
}

/// What the I/O layer hands over for outer packet `o`: the whole packet (with `junk` bytes
/// of link padding), or what a UDP or raw ESP socket gives.
fn frame_of(o: &[u8], shape: Shape, from_socket: bool, junk: usize) -> (Frame, Vec<u8>) {
    if !from_socket {
        let mut bytes = o.to_vec();
        bytes.resize(o.len() + junk, 0xee);
        return (Frame::Ip, bytes);
    }
    let (esp, end) = esp_bounds(o, shape);
    let (remote, local) = outer_addrs(shape.outer_v6);
    let ecn = if shape.outer_v6 { Ecn::from_bits(o[1] >> 4) } else { Ecn::from_bits(o[1]) };
    if !shape.udp {
        return (Frame::Esp { remote, local, ecn }, o[esp..end].to_vec());
    }
    let udp = esp - 8;
    let port = |at: usize| u16::from_be_bytes([o[at], o[at + 1]]);
    let frame = Frame::Udp {
        remote: std::net::SocketAddr::new(remote, port(udp)),
        local: std::net::SocketAddr::new(local, port(udp + 2)),
        ecn,
    };
    (frame, o[esp..end].to_vec())
}

/// Decapsulates `frames` on both receivers and checks that they agree; returns whether R
/// took its inbound fast path, and the report.
fn same_in_batch(pair: &mut InPair, frames: &[(Frame, Vec<u8>)]) -> (bool, BatchReport) {
    let before = pair.fast.worker.fast_batches();
    let mut results = Vec::new();
    for g in [&mut pair.fast, &mut pair.general] {
        let mut area = Area::new(frames.len());
        let mut batch = area.batch();
        for (f, bytes) in frames {
            batch.push(*f, OFFSET, bytes).unwrap();
        }
        let report = g.worker.decapsulate(&mut g.enclave, &g.sad, &mut batch);
        results.push(Outcome::of(report, &area, g));
    }
    assert_agree(&results, &pair.general);
    (pair.fast.worker.fast_batches().inbound > before.inbound, results[0].report)
}

/// One batch of `n` packets from the sender, spoilt at packet `at` as `spoil` says; the
/// previous batch's frames serve replays.
fn in_frames(
    pair: &mut InPair,
    rng: &mut Rng,
    shape: Shape,
    n: usize,
    spoil: Option<(usize, InSpoil)>,
    from_socket: bool,
    previous: &[(Frame, Vec<u8>)],
) -> Vec<(Frame, Vec<u8>)> {
    let spoil_at = |i: usize| spoil.filter(|(at, _)| *at == i).map(|(_, how)| how);
    let inners: Vec<_> = (0..n)
        .map(|i| {
            let mut p = inner_packet(rng, shape, None);
            // Three hops to go: the sender and the receiver each count one.
            if shape.inner_v6 {
                p[7] = p[7].max(3);
            } else {
                p[8] = p[8].max(3);
                fix_checksum(&mut p);
            }
            match spoil_at(i) {
                _ if shape.inner_v6 => p,
                Some(InSpoil::InnerTtl) => {
                    p[8] = 2;
                    fix_checksum(&mut p);
                    p
                }
                Some(InSpoil::InnerOtherFlow) => inner_packet_spoilt(rng, shape, 2),
                Some(InSpoil::InnerIcmp) => inner_packet_spoilt(rng, shape, 8),
                Some(InSpoil::InnerOtherProtocol) => {
                    p[9] = 6;
                    fix_checksum(&mut p);
                    p
                }
                // Half the time two payload bytes 0 and 1: no padding in any suite, so one
                // more byte of it is the inner packet's last, 1, a valid padding; the
                // inner packet is then one byte longer than what the trailer leaves.
                Some(InSpoil::PadLenUp) if rng.chance(50) => {
                    let (src, dst) = inner_hosts(false);
                    udp_packet(src, dst, 2, 64, Ecn::NotEct, true)
                }
                Some(InSpoil::PadByte) => {
                    // A length that is a multiple of 16: two or more padding bytes in every
                    // suite (the trailer's two then need 2 or 14 more).
                    let (src, dst) = inner_hosts(false);
                    let payload = 16 * (2 + usize::try_from(rng.below(60)).unwrap()) - 28;
                    udp_packet(src, dst, payload, 64, Ecn::NotEct, true)
                }
                Some(InSpoil::InnerLaterFragment) => inner_packet_spoilt(rng, shape, 6),
                Some(InSpoil::InnerOption) => inner_packet_spoilt(rng, shape, 7),
                Some(InSpoil::CeOnNotEct) => {
                    p[1] &= !0b11;
                    fix_checksum(&mut p);
                    p
                }
                _ => p,
            }
        })
        .collect();
    let s = &mut pair.sender;
    let mut area = Area::new(n);
    let mut batch = area.batch();
    for p in &inners {
        batch.push(Frame::Ip, OFFSET, p).unwrap();
    }
    let mut crossing = TrailerSpoiler { enclave: &mut s.enclave, icv: shape.suite.icv_len(), spoil };
    s.worker.encapsulate(&mut crossing, &s.sad, &s.spd, &mut batch);
    let outers: Vec<_> = batch.iter().map(|(p, bytes)| (p.action, bytes.to_vec())).collect();
    assert!(outers.iter().all(|(a, _)| matches!(a, Action::Transmit(_))), "the sender dropped: {outers:?}");
    let mut frames = Vec::with_capacity(n);
    for (i, (_, mut o)) in outers.into_iter().enumerate() {
        let (esp, end) = esp_bounds(&o, shape);
        let junk = if rng.chance(10) { usize::try_from(rng.below(8)).unwrap() } else { 0 };
        let mut socket = from_socket;
        match spoil_at(i) {
            Some(InSpoil::CeOnNotEct) => outer_ce(&mut o, shape),
            Some(InSpoil::BitFlip) => o[end - 1] ^= 0x01,
            Some(InSpoil::WrongSpi) => o[esp] ^= 0x80,
            Some(InSpoil::Truncated) => shorten(&mut o, esp + 11, shape),
            Some(InSpoil::Keepalive) if shape.udp => {
                shorten(&mut o, esp + 1, shape);
                o[esp] = 0xff;
            }
            Some(InSpoil::Keepalive) => shorten(&mut o, esp + 7, shape),
            Some(InSpoil::IkeOrOuterFragment) if from_socket || shape.outer_v6 => {
                // A zero marker and an IKE header's worth of bytes.
                shorten(&mut o, (esp + 32).min(end), shape);
                o[esp..esp + 4].copy_from_slice(&[0; 4]);
                socket = shape.udp;
            }
            Some(InSpoil::IkeOrOuterFragment) => {
                o[6] |= 0x20;
                fix_checksum(&mut o);
            }
            Some(InSpoil::OuterChecksum) => {
                o[10] ^= 0x40;
                socket = false;
            }
            Some(InSpoil::FourShort) => shorten(&mut o, end - 4, shape),
            _ => {}
        }
        frames.push(frame_of(&o, shape, socket, junk));
    }
    match spoil {
        Some((at, InSpoil::DuplicateInBatch)) if at > 0 => frames[at] = frames[0].clone(),
        Some((at, InSpoil::Replay)) if !previous.is_empty() => frames[at] = previous[0].clone(),
        _ => {}
    }
    frames
}

/// [`inner_packet`] spoilt the outbound test's way `how` (only a packet the sender still
/// encapsulates).
fn inner_packet_spoilt(rng: &mut Rng, shape: Shape, how: usize) -> Vec<u8> {
    let mut p = inner_packet(rng, shape, Some(how));
    p[8] = p[8].max(3);
    fix_checksum(&mut p);
    p
}

#[test]
fn fast_and_general_inbound_paths_deliver_the_same() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (k, shape) in shapes().into_iter().enumerate() {
        // Every other shape with selectors that refuse another protocol or port.
        let options = if k % 2 == 1 { narrow_selectors(shape) } else { TunnelOptions::default() };
        let mut pair = in_pair(shape, options);
        let (mut clean, mut fast, mut refused_fast) = (0, 0, 0);
        let mut previous = Vec::new();
        for round in 0..80 {
            let n = 1 + usize::try_from(rng.below(32)).unwrap();
            let from_socket = rng.chance(50);
            let spoil = (round % 2 == 1).then(|| {
                let how = IN_SPOILS[(round / 2) % IN_SPOILS.len()];
                let at = usize::try_from(rng.below(n as u64)).unwrap();
                (at, how)
            });
            let frames = in_frames(&mut pair, &mut rng, shape, n, spoil, from_socket, &previous);
            let (took, _) = same_in_batch(&mut pair, &frames);
            let eligible = !shape.outer_v6 || from_socket;
            if spoil.is_none() {
                clean += usize::from(eligible);
                fast += usize::from(took);
            }
            let really_spoilt = spoil.is_some_and(|(_, how)| {
                how.refused(shape) && !(how == InSpoil::Replay && previous.is_empty())
            });
            refused_fast += usize::from(took && really_spoilt);
            if !eligible {
                assert!(!took, "{shape:?}: took the fast path over an IPv6 outer header");
            }
            previous = frames;
        }
        assert_eq!(fast, clean, "{shape:?}: clean batches that missed the fast path");
        assert_eq!(refused_fast, 0, "{shape:?}: a batch the fast path must refuse took it");
    }
}

#[test]
fn the_inbound_fast_path_steps_aside_for_esn_resynchronisation() {
    let shape = Shape { esn: true, ..GCM_UDP_V4 };
    let mut pair = in_pair(shape, TunnelOptions::default());
    let mut rng = Rng(3);
    // More ICV failures in a row than `DEFAULT_ESN_RESYNC_AFTER`: both receivers keep the
    // next packet aside, which only the general path does.
    let mut failures = 0;
    while failures <= DEFAULT_ESN_RESYNC_AFTER as usize {
        let mut frames = in_frames(&mut pair, &mut rng, shape, 32, None, false, &[]);
        for (_, o) in &mut frames {
            let (_, end) = esp_bounds(o, shape);
            o[end - 1] ^= 0x01;
        }
        let (_, report) = same_in_batch(&mut pair, &frames);
        failures += report.dropped as usize;
    }
    let frames = in_frames(&mut pair, &mut rng, shape, 32, None, false, &[]);
    let (took, report) = same_in_batch(&mut pair, &frames);
    assert!(!took, "the fast path took a batch with a re-synchronisation candidate");
    assert_eq!(report.deliver, 32);
    // One authenticated packet reset the count: the next batch is fast again.
    let frames = in_frames(&mut pair, &mut rng, shape, 32, None, false, &[]);
    assert!(same_in_batch(&mut pair, &frames).0);
}

#[test]
fn inbound_lifetime_limits_reached_inside_a_fast_batch_count_and_drop_alike() {
    let shape = GCM_UDP_V4;
    let mut pair = in_pair(shape, TunnelOptions { lifetime: small_lifetime(), ..TunnelOptions::default() });
    // Only the receivers' limits matter: the sender's are far off.
    pair.sender = Gateway::new();
    tunnel(&mut pair.sender, &mut Gateway::new(), shape, 0x5151, Instant::now());
    let mut rng = Rng(5);
    let reports = fast_reports(|| {
        let frames = in_frames(&mut pair, &mut rng, shape, 24, None, false, &[]);
        same_in_batch(&mut pair, &frames)
    });
    assert_limits_crossed(&reports, pair.fast.worker.drops().get(DropReason::HardLifetime));
}
