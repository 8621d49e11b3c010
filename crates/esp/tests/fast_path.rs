//! The outbound fast path (`worker/fast.rs`) against the general path: two gateways with the
//! same SAs and keys, one with the fast path off, encapsulate the same batches; every byte
//! of every slot, every packet's action, the report, the drop counters and the SA's
//! numbering must come out the same, for batches that qualify and for every way a batch can
//! fail to (then the general path must take it whole).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave::{Cipher, Integ, Suite};
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
        results.push((report, area.packets.clone(), area.bytes.clone(), *g.worker.drops()));
    }
    let (fast, general) = (&results[0], &results[1]);
    assert_eq!(fast.0, general.0, "reports");
    assert_eq!(fast.1, general.1, "packets");
    assert_eq!(fast.3, general.3, "drop counters");
    if fast.2 != general.2 {
        let at = fast.2.iter().zip(&general.2).position(|(a, b)| a != b).unwrap();
        panic!("bytes differ first at slot {} offset {}", at / SLOT, at % SLOT);
    }
    assert_eq!(pair.general.worker.fast_batches(), 0);
    (pair.fast.worker.fast_batches() > before, fast.0)
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

#[test]
fn lifetime_limits_reached_inside_a_fast_batch_count_and_drop_alike() {
    let shape = GCM_UDP_V4;
    let soft = LifetimeLimits { packets: Some(50), bytes: Some(40_000), time: None };
    let hard = LifetimeLimits { packets: Some(100), bytes: Some(90_000), time: None };
    let mut pair = pair(shape, Lifetime { soft, hard });
    let mut rng = Rng(7);
    let mut fast_reports = Vec::new();
    for _ in 0..8 {
        let inners: Vec<_> = (0..24).map(|_| (inner_packet(&mut rng, shape, None), 0)).collect();
        let (fast, report) = same_batch(&mut pair, &inners);
        if fast {
            fast_reports.push(report);
        }
    }
    // The soft limits and then a hard one are crossed inside fast batches (at most 100
    // packets or 90,000 bytes: the fifth batch at the latest); past the hard limit the SA
    // is expired and the general path drops everything.
    assert!(fast_reports.len() >= 2, "{fast_reports:?}");
    assert!(fast_reports.iter().any(|r| r.lifetime_check_due), "{fast_reports:?}");
    assert!(fast_reports.iter().any(|r| r.dropped > 0), "{fast_reports:?}");
    assert!(pair.fast.worker.drops().get(DropReason::HardLifetime) > 0);
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
    assert_eq!(a.worker.fast_batches(), 1);
    assert_eq!(report.transmit, 32, "{actions:?}");
    let (delivered, report) = decapsulate(&mut b, &outers.into_iter().map(|(_, o)| o).collect::<Vec<_>>());
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
