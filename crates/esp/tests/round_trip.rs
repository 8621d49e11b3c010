//! Encapsulate on one gateway, decapsulate on the other, through the inline enclave: every
//! suite, IPv4/IPv6 inner and outer, raw ESP and ESP-in-UDP, with and without ESN.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use cloister_esp::*;
use common::*;
use wire::{Ecn, Ipv4Packet, Ipv6Packet, UdpPacket};

#[test]
fn every_suite_family_and_encapsulation_round_trips() {
    let now = Instant::now();
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    let mut spi = 0x1000;
    let mut combos = 0;
    for suite in SUITES {
        for esn in [false, true] {
            for inner_v6 in [false, true] {
                for outer_v6 in [false, true] {
                    for udp in [false, true] {
                        spi += 1;
                        // Each combination gets fresh gateways' tables (policies differ by family).
                        a.spd = Spd::new();
                        let shape = Shape { suite, esn, inner_v6, outer_v6, udp };
                        tunnel(&mut a, &mut b, shape, spi, now);
                        round_trip(&mut a, &mut b, shape, spi);
                        combos += 1;
                    }
                }
            }
        }
    }
    assert_eq!(combos, 7 * 2 * 2 * 2 * 2);
    assert_eq!(a.worker.drops().total(), 0);
    assert_eq!(b.worker.drops().total(), 0);
}

fn round_trip(a: &mut Gateway, b: &mut Gateway, s: Shape, spi: u32) {
    let (src, dst) = inner_hosts(s.inner_v6);
    // Payload lengths around every padding boundary, and one near the MTU.
    let inners: Vec<Vec<u8>> = [0usize, 1, 2, 3, 13, 14, 15, 16, 17, 100, 1000]
        .iter()
        .map(|&n| udp_packet(src, dst, n, 64, Ecn::Ect0, true))
        .collect();
    let (outers, actions, report) = encapsulate(a, &inners);
    assert_eq!(report.transmit as usize, inners.len(), "{s:?}: {actions:?}");
    assert_eq!(report.crossings, 1, "one enclave crossing per batch");
    for (t, o) in &outers {
        let (local, remote) = outer_addrs(s.outer_v6);
        assert_eq!((t.local, t.remote), (local, remote));
        check_outer(o, s, spi);
    }
    let (results, report) = decapsulate(b, &outers.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>());
    assert_eq!(report.deliver as usize, inners.len(), "{s:?}: {results:?}");
    assert_eq!(report.crossings, 1);
    for ((action, bytes), inner) in results.iter().zip(&inners) {
        assert_eq!(*action, Action::Deliver { spi });
        // Decremented once by each gateway (RFC 4301 §5.1.2.1 note 2).
        assert_eq!(bytes, &after_hops(inner, 2), "{s:?}");
    }
}

/// Outer header fields: addresses, protocol, UDP ports and checksum, SPI, DSCP/ECN copied.
fn check_outer(o: &[u8], s: Shape, spi: u32) {
    let (ip_len, proto, dscp, ecn) = if s.outer_v6 {
        let p = Ipv6Packet::new_checked(o).unwrap();
        assert_eq!(usize::from(p.payload_len()) + 40, o.len());
        assert_eq!(p.hop_limit(), OUTER_TTL);
        (40, p.next_header().0, p.dscp(), p.ecn())
    } else {
        let p = Ipv4Packet::new_checked(o).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(usize::from(p.total_len()), o.len());
        assert!(p.dont_frag());
        (20, p.protocol().0, p.dscp(), p.ecn())
    };
    assert_eq!((dscp, ecn), (10, Ecn::Ect0), "RFC 4301 DSCP copy, RFC 6040 ECN copy");
    let esp = if s.udp {
        assert_eq!(proto, 17);
        let u = UdpPacket::new_checked(&o[ip_len..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port()), (4500, 4501));
        let (l, r) = outer_addrs(s.outer_v6);
        if s.outer_v6 {
            let (std::net::IpAddr::V6(src), std::net::IpAddr::V6(dst)) = (l, r) else { unreachable!() };
            assert!(u.verify_checksum(&wire::IpPair::V6 { src, dst }), "UDP checksum over IPv6");
            assert_ne!(u.checksum(), 0);
        } else {
            assert_eq!(u.checksum(), 0, "RFC 3948 §3.1: zero over IPv4");
        }
        &o[ip_len + 8..]
    } else {
        assert_eq!(proto, 50);
        &o[ip_len..]
    };
    assert_eq!(u32::from_be_bytes(esp[..4].try_into().unwrap()), spi);
    let align = s.suite.esp_payload_align();
    let (before, icv) = s.suite.esp_overhead();
    assert_eq!((esp.len() - before - icv) % align, 0, "payload aligned to {align}");
}

/// Sequence numbers are reserved once per run of one SA's packets in a batch: a batch that
/// mixes two SAs still numbers each SA's packets consecutively, in packet order, and the
/// peer accepts them all.
#[test]
fn a_batch_mixing_two_sas_numbers_each_in_packet_order() {
    let now = Instant::now();
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    let v4 = Shape { suite: SUITES[0], esn: false, inner_v6: false, outer_v6: false, udp: true };
    let v6 = Shape { inner_v6: true, ..v4 };
    tunnel(&mut a, &mut b, v4, 0x3001, now);
    tunnel(&mut a, &mut b, v6, 0x3002, now);
    let one = |v6: bool| {
        let (src, dst) = inner_hosts(v6);
        udp_packet(src, dst, 10, 64, Ecn::NotEct, true)
    };
    let inners = [one(false), one(false), one(true), one(false), one(true), one(true)];
    let (outers, actions, report) = encapsulate(&mut a, &inners);
    assert_eq!((report.transmit, report.crossings), (6, 1), "{actions:?}");
    let spi_seq: Vec<(u32, u32)> = outers
        .iter()
        .map(|(_, o)| {
            // Outer IPv4 and UDP headers, then ESP: SPI and sequence number.
            let esp = &o[20 + 8..];
            (
                u32::from_be_bytes(esp[..4].try_into().unwrap()),
                u32::from_be_bytes(esp[4..8].try_into().unwrap()),
            )
        })
        .collect();
    assert_eq!(spi_seq, [(0x3001, 1), (0x3001, 2), (0x3002, 1), (0x3001, 3), (0x3002, 2), (0x3002, 3)]);
    let (results, report) = decapsulate(&mut b, &outers.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>());
    assert_eq!(report.deliver, 6, "{results:?}");
}
