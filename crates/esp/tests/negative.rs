//! Bad packets are dropped and counted under their reason; good packets in the same batches
//! still get through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave_core::{Cipher, Enclave, EspDescriptor, EspStatus, Integ, Suite};
use wire::{Ecn, Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv4Repr, UdpPacket};

const GCM: Suite = Suite::aead(Cipher::AesGcm16_128);
const CBC: Suite = Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128);

fn setup(s: Shape) -> (Gateway, Gateway, OutboundSaId) {
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    let id = tunnel(&mut a, &mut b, s, 0x2000, Instant::now());
    (a, b, id)
}

fn v4(suite: Suite) -> Shape {
    Shape { suite, esn: false, inner_v6: false, outer_v6: false, udp: false }
}

fn packets(n: usize, v6: bool) -> Vec<Vec<u8>> {
    let (src, dst) = inner_hosts(v6);
    (0..n).map(|i| udp_packet(src, dst, 20 + i, 64, Ecn::NotEct, true)).collect()
}

fn outers(a: &mut Gateway, inners: &[Vec<u8>]) -> Vec<Vec<u8>> {
    encapsulate(a, inners).0.into_iter().map(|(_, o)| o).collect()
}

fn delivered(results: &[(Action, Vec<u8>)]) -> usize {
    results.iter().filter(|(a, _)| matches!(a, Action::Deliver { .. })).count()
}

fn sa_drops(b: &Gateway) -> DropCounts {
    b.sad.inbound(0x2000).unwrap().runtime().drops().snapshot()
}

/// Re-computes an outer IPv4 header checksum after an edit.
fn fix_v4(p: &mut [u8]) {
    Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
}

#[test]
fn replayed_packets_are_dropped_and_counted() {
    for suite in [GCM, CBC] {
        let (mut a, mut b, _) = setup(v4(suite));
        let o = outers(&mut a, &packets(4, false));
        let (r, _) = decapsulate(&mut b, &o);
        assert_eq!(delivered(&r), 4);
        // The same four again, plus two fresh ones in the same batch.
        let mut again = o.clone();
        again.extend(outers(&mut a, &packets(2, false)));
        let (r, report) = decapsulate(&mut b, &again);
        assert!(r[..4].iter().all(|(a, _)| *a == Action::Drop(DropReason::Replay)));
        assert_eq!(delivered(&r), 2);
        // Replays are refused before the enclave: only the two fresh packets crossed.
        assert_eq!(report.crossings, 1);
        assert_eq!(sa_drops(&b).get(DropReason::Replay), 4);
        assert_eq!(b.worker.drops().get(DropReason::Replay), 4);
    }
}

#[test]
fn a_duplicate_within_one_batch_is_accepted_once() {
    let (mut a, mut b, _) = setup(v4(GCM));
    let o = outers(&mut a, &packets(1, false));
    let (r, _) = decapsulate(&mut b, &[o[0].clone(), o[0].clone()]);
    assert_eq!(r[0].0, Action::Deliver { spi: 0x2000 });
    assert_eq!(
        r[1].0,
        Action::Drop(DropReason::Replay),
        "the commit after authentication refuses the second"
    );
}

#[test]
fn bit_flips_fail_the_icv_and_do_not_move_the_window() {
    for suite in SUITES {
        let (mut a, mut b, _) = setup(v4(suite));
        let o = outers(&mut a, &packets(3, false));
        let mut bad = Vec::new();
        // A flipped bit in the sequence number, the IV, the ciphertext and the ICV.
        for at in [20 + 7, 20 + 9, 20 + 30, o[0].len() - 1] {
            let mut p = o[0].clone();
            p[at] ^= 0x10;
            bad.push(p);
        }
        let (r, _) = decapsulate(&mut b, &bad);
        assert!(r.iter().all(|(a, _)| *a == Action::Drop(DropReason::IcvMismatch)), "{suite:?}: {r:?}");
        assert_eq!(sa_drops(&b).get(DropReason::IcvMismatch), 4);
        // The genuine packets, the first one included, are still accepted.
        let (r, _) = decapsulate(&mut b, &o);
        assert_eq!(delivered(&r), 3, "{suite:?}");
    }
}

#[test]
fn truncated_packets_are_malformed() {
    let (mut a, mut b, _) = setup(v4(CBC));
    let o = outers(&mut a, &packets(2, false));
    let mut frames = Vec::new();
    // The IP header promises more than arrived.
    frames.push((Frame::Ip, o[0][..o[0].len() - 5].to_vec()));
    // Consistent headers, but the ESP packet is cut: not whole CBC blocks.
    let mut cut = o[0][..o[0].len() - 5].to_vec();
    let len = u16::try_from(cut.len()).unwrap();
    cut[2..4].copy_from_slice(&len.to_be_bytes());
    fix_v4(&mut cut);
    frames.push((Frame::Ip, cut));
    // Only an ESP header.
    let mut tiny = o[0][..28].to_vec();
    tiny[2..4].copy_from_slice(&28u16.to_be_bytes());
    fix_v4(&mut tiny);
    frames.push((Frame::Ip, tiny));
    frames.push((Frame::Ip, vec![0x45]));
    frames.push((Frame::Ip, o[1].clone()));
    let (r, _) = decapsulate_frames(&mut b, &frames);
    let actions: Vec<_> = r.iter().map(|(a, _)| *a).collect();
    assert_eq!(
        actions[..4],
        [Action::Drop(DropReason::Malformed); 4],
        "outer truncation, bad CBC length, too short, garbage"
    );
    assert_eq!(actions[4], Action::Deliver { spi: 0x2000 });
    assert_eq!(b.worker.drops().get(DropReason::Malformed), 4);
    assert_eq!(sa_drops(&b).get(DropReason::Malformed), 2, "two were attributable to the SA");
}

#[test]
fn unknown_spis_are_counted_by_the_worker() {
    let (mut a, mut b, _) = setup(v4(GCM));
    let o = outers(&mut a, &packets(2, false));
    let mut wrong = o[0].clone();
    wrong[20..24].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    let (r, _) = decapsulate(&mut b, &[wrong, o[1].clone()]);
    assert_eq!(r[0].0, Action::Drop(DropReason::NoSa));
    assert_eq!(r[1].0, Action::Deliver { spi: 0x2000 });
    assert_eq!(b.worker.drops().get(DropReason::NoSa), 1);
    assert_eq!(sa_drops(&b).total(), 0);
}

#[test]
fn raw_esp_for_a_udp_sa_is_refused() {
    let (mut a, mut b, _) = setup(Shape { udp: true, ..v4(GCM) });
    let o = outers(&mut a, &packets(1, false));
    // Strip the UDP header and say ESP.
    let mut raw = o[0][..20].to_vec();
    raw.extend_from_slice(&o[0][28..]);
    raw[9] = 50;
    let len = u16::try_from(raw.len()).unwrap();
    raw[2..4].copy_from_slice(&len.to_be_bytes());
    fix_v4(&mut raw);
    let (r, _) = decapsulate(&mut b, &[raw]);
    assert_eq!(r[0].0, Action::Drop(DropReason::EncapsulationMismatch));
}

#[test]
fn udp_payloads_from_a_socket_are_classified() {
    let (mut a, mut b, _) = setup(Shape { udp: true, ..v4(GCM) });
    let o = outers(&mut a, &packets(1, false));
    let remote: SocketAddr = "198.18.0.1:4500".parse().unwrap();
    let local: SocketAddr = "198.18.0.2:4501".parse().unwrap();
    let frame = Frame::Udp { remote, local, ecn: Ecn::NotEct };
    let ike = [&[0u8, 0, 0, 0][..], b"IKE header and payloads"].concat();
    let frames = vec![
        (frame, vec![0xff]),
        (frame, ike),
        (frame, o[0][28..].to_vec()),
        (frame, vec![0x00]),
        (frame, vec![1, 2, 3]),
    ];
    let (r, report) = decapsulate_frames(&mut b, &frames);
    assert_eq!(r[0].0, Action::Keepalive { remote });
    assert_eq!(r[1], (Action::Ike { remote, local }, b"IKE header and payloads".to_vec()));
    assert_eq!(r[2].0, Action::Deliver { spi: 0x2000 });
    assert_eq!(r[3].0, Action::Drop(DropReason::Malformed), "one byte that is not a keepalive");
    assert_eq!(r[4].0, Action::Drop(DropReason::Malformed), "too short for ESP");
    assert_eq!((report.keepalive, report.ike, report.deliver, report.dropped), (1, 1, 1, 2));
}

#[test]
fn ike_with_a_bad_udp_checksum_is_dropped() {
    let (_, mut b, _) = setup(Shape { udp: true, ..v4(GCM) });
    let ike = [&[0u8, 0, 0, 0][..], b"IKE_SA_INIT"].concat();
    let (src, dst) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: IpProtocol::UDP,
        payload_len: 8 + ike.len(),
        ttl: 64,
        dscp: 0,
        ecn: Ecn::NotEct,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    let mut p = vec![0u8; ip.buffer_len()];
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut p[..])).unwrap();
    wire::UdpRepr { src_port: 4500, dst_port: 4500 }
        .emit(&mut UdpPacket::new_unchecked(&mut p[20..]), &wire::IpPair::V4 { src, dst }, ike.len(), |b| {
            b.copy_from_slice(&ike)
        })
        .unwrap();
    let mut corrupt = p.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    let (r, _) = decapsulate(&mut b, &[p, corrupt]);
    assert!(matches!(r[0].0, Action::Ike { .. }));
    assert_eq!(r[0].1, b"IKE_SA_INIT");
    assert_eq!(r[1].0, Action::Drop(DropReason::Malformed));
}

/// Encrypts a hand-made ESP payload (inner packet, padding, trailer already there) on A's
/// outbound SA and wraps it in an outer IPv4 header to B: authentic, but as crafted.
fn seal(a: &mut Gateway, id: OutboundSaId, suite: Suite, plaintext: &[u8]) -> Vec<u8> {
    let (head, icv) = suite.esp_overhead();
    let esp_len = head + plaintext.len() + icv;
    let mut p = vec![0u8; 20 + esp_len];
    Ipv4Repr {
        src_addr: "198.18.0.1".parse().unwrap(),
        dst_addr: "198.18.0.2".parse().unwrap(),
        protocol: IpProtocol::ESP,
        payload_len: esp_len,
        ttl: 64,
        dscp: 0,
        ecn: Ecn::NotEct,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut p[..]))
    .unwrap();
    p[20 + head..20 + head + plaintext.len()].copy_from_slice(plaintext);
    let sa = a.sad.outbound(id).unwrap();
    let seq = sa.runtime().peek_seq();
    sa.runtime().set_next_seq(seq + 1);
    let d = EspDescriptor::encrypt(sa.config().handle, 20, u32::try_from(esp_len).unwrap(), seq);
    let mut st = [EspStatus::NotProcessed];
    a.enclave.esp_batch(&mut p, &[d], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    p
}

/// `inner` followed by `pad` padding bytes as given, pad length and next header.
fn plaintext(inner: &[u8], padding: &[u8], pad_len: u8, next: u8) -> Vec<u8> {
    [inner, padding, &[pad_len, next]].concat()
}

#[test]
fn authentic_packets_with_bad_trailers_are_dropped_by_reason() {
    let (mut a, mut b, id) = setup(v4(GCM));
    let inner = packets(1, false).remove(0); // 48 bytes: 48 + 2 + 2 padding = 52
    let cases = [
        (plaintext(&inner, &[1, 2], 2, 4), Action::Deliver { spi: 0x2000 }),
        (plaintext(&inner, &[1, 3], 2, 4), Action::Drop(DropReason::BadPadding)),
        (plaintext(&inner, &[1, 2], 60, 4), Action::Drop(DropReason::BadPadding)),
        (plaintext(&inner, &[1, 2], 2, 41), Action::Drop(DropReason::BadNextHeader)),
        (plaintext(&inner, &[1, 2], 2, 17), Action::Drop(DropReason::BadNextHeader)),
        (plaintext(&inner, &[1, 2], 2, 59), Action::Drop(DropReason::Dummy)),
        (
            plaintext(
                &inner[..30],
                &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
                20,
                4,
            ),
            Action::Drop(DropReason::Malformed),
        ),
        // Traffic-flow confidentiality padding after the inner packet (RFC 4303 §2.7) is fine.
        (plaintext(&[&inner[..], &[0xee; 10]].concat(), &[], 0, 4), Action::Deliver { spi: 0x2000 }),
    ];
    let sealed: Vec<_> = cases.iter().map(|(pt, _)| seal(&mut a, id, GCM, pt)).collect();
    let (r, _) = decapsulate(&mut b, &sealed);
    for ((action, bytes), (_, want)) in r.iter().zip(&cases) {
        assert_eq!(action, want);
        if matches!(action, Action::Deliver { .. }) {
            assert_eq!(bytes, &after_hops(&inner, 1));
        }
    }
    let d = sa_drops(&b);
    assert_eq!(
        (d.get(DropReason::BadPadding), d.get(DropReason::BadNextHeader), d.get(DropReason::Dummy)),
        (2, 2, 1)
    );
}

#[test]
fn inner_addresses_outside_the_selectors_are_dropped() {
    let (mut a, mut b, id) = setup(v4(GCM));
    // A's policy is wider than the SA's selectors, so A protects what B must refuse.
    let wide = PolicySelector::between("198.18.0.0/16".parse().unwrap(), "198.18.0.0/16".parse().unwrap());
    a.spd.insert(Policy { priority: 20, selector: wide, action: PolicyAction::Protect(id) });
    let src: IpAddr = "198.18.30.1".parse().unwrap();
    let (good_src, dst) = inner_hosts(false);
    let spoofed = udp_packet(src, dst, 10, 64, Ecn::NotEct, true);
    let other_dst = udp_packet(good_src, "198.18.31.1".parse().unwrap(), 10, 64, Ecn::NotEct, true);
    let good = udp_packet(good_src, dst, 10, 64, Ecn::NotEct, true);
    // Each refused flow right after an admitted one in the same run: the admitted flow
    // is remembered, never what follows it.
    let o = outers(&mut a, &[good.clone(), spoofed, good.clone(), other_dst, good]);
    assert_eq!(o.len(), 5);
    let (r, _) = decapsulate(&mut b, &o);
    let deliver = Action::Deliver { spi: 0x2000 };
    let refused = Action::Drop(DropReason::SelectorMismatch);
    let actions: Vec<_> = r.iter().map(|(a, _)| *a).collect();
    assert_eq!(actions, [deliver, refused, deliver, refused, deliver]);
    assert_eq!(sa_drops(&b).get(DropReason::SelectorMismatch), 2);
}

#[test]
fn ttl_is_decremented_once_per_gateway_and_expiry_is_dropped() {
    let (mut a, mut b, _) = setup(v4(GCM));
    let (src, dst) = inner_hosts(false);
    let (o, actions, _) = encapsulate(&mut a, &[udp_packet(src, dst, 10, 1, Ecn::NotEct, true)]);
    assert!(o.is_empty());
    assert_eq!(actions[0], Action::Drop(DropReason::TtlExceeded));
    let o = outers(&mut a, &[udp_packet(src, dst, 10, 2, Ecn::NotEct, true)]);
    let (r, _) = decapsulate(&mut b, &o);
    assert_eq!(r[0].0, Action::Drop(DropReason::TtlExceeded), "arrives with TTL 1: cannot be forwarded");
    // Same for IPv6 hop limits.
    let (mut a, mut b, _) = setup(Shape { inner_v6: true, ..v4(GCM) });
    let (src, dst) = inner_hosts(true);
    let o = outers(
        &mut a,
        &[udp_packet(src, dst, 10, 2, Ecn::NotEct, true), udp_packet(src, dst, 10, 3, Ecn::NotEct, true)],
    );
    let (r, _) = decapsulate(&mut b, &o);
    assert_eq!(r[0].0, Action::Drop(DropReason::TtlExceeded));
    assert_eq!(r[1].1[7], 1);
}

#[test]
fn ecn_is_combined_per_rfc6040() {
    for outer_v6 in [false, true] {
        let (mut a, mut b, _) = setup(Shape { outer_v6, ..v4(GCM) });
        let (src, dst) = inner_hosts(false);
        let inners: Vec<_> = [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce]
            .iter()
            .map(|&e| udp_packet(src, dst, 10, 64, e, true))
            .collect();
        let mut o = outers(&mut a, &inners);
        // Congestion on the way: every outer header gets CE.
        for p in &mut o {
            if outer_v6 {
                p[1] |= 0x30;
            } else {
                p[1] |= 0x03;
                fix_v4(p);
            }
        }
        let (r, _) = decapsulate(&mut b, &o);
        assert_eq!(r[0].0, Action::Drop(DropReason::EcnCeOnNotEct));
        for (action, bytes) in &r[1..] {
            assert!(matches!(action, Action::Deliver { .. }));
            let p = Ipv4Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(p.ecn(), Ecn::Ce);
            assert_eq!(p.dscp(), 10, "inner DSCP untouched");
            assert!(p.verify_checksum());
        }
    }
}

#[test]
fn policies_bypass_discard_or_find_nothing() {
    let (mut a, _, _) = setup(v4(GCM));
    let (src, _) = inner_hosts(false);
    a.spd.insert(Policy {
        priority: 1,
        selector: PolicySelector::between(
            "198.18.10.0/24".parse().unwrap(),
            "198.18.40.0/24".parse().unwrap(),
        ),
        action: PolicyAction::Bypass,
    });
    a.spd.insert(Policy {
        priority: 1,
        selector: PolicySelector::between(
            "198.18.10.0/24".parse().unwrap(),
            "198.18.50.0/24".parse().unwrap(),
        ),
        action: PolicyAction::Discard,
    });
    let to = |d: &str| udp_packet(src, d.parse().unwrap(), 10, 64, Ecn::NotEct, true);
    let (o, actions, report) =
        encapsulate(&mut a, &[to("198.18.40.1"), to("198.18.50.1"), to("198.18.60.1"), to("198.18.20.1")]);
    assert_eq!(
        actions,
        [
            Action::Bypass,
            Action::Drop(DropReason::PolicyDiscard),
            Action::Drop(DropReason::NoPolicy),
            actions[3]
        ]
    );
    assert!(matches!(actions[3], Action::Transmit(_)));
    assert_eq!((report.bypass, report.dropped, report.transmit, o.len()), (1, 2, 1, 1));
    let (mut a, _, id) = setup(v4(GCM));
    a.sad.remove_outbound(id).unwrap();
    let (_, actions, _) = encapsulate(&mut a, &[to("198.18.20.1")]);
    assert_eq!(actions[0], Action::Drop(DropReason::NoSa));
}

#[test]
fn hard_lifetimes_stop_traffic_and_raise_events() {
    let (mut a, mut b, id) = setup(v4(GCM));
    let t0 = Instant::now();
    // B's inbound SA: hard limit 3 packets (re-installed with the limit).
    let mut cfg = b.sad.remove_inbound(0x2000).unwrap();
    cfg.lifetime.soft.packets = Some(2);
    cfg.lifetime.hard.packets = Some(3);
    b.sad.add_inbound(cfg, t0).unwrap();
    let o = outers(&mut a, &packets(5, false));
    let (r, report) = decapsulate(&mut b, &o);
    assert_eq!(delivered(&r), 3);
    assert_eq!(r[3].0, Action::Drop(DropReason::HardLifetime));
    assert_eq!(r[4].0, Action::Drop(DropReason::HardLifetime));
    assert!(report.lifetime_check_due);
    b.sad.handle_timeout(t0);
    let e = b.sad.poll_event().unwrap();
    assert_eq!(
        (e.sa, e.kind, e.trigger),
        (SaRef::Inbound { spi: 0x2000 }, LifetimeKind::Hard, LifetimeTrigger::Packets)
    );
    // Outbound: sequence numbers run out without ESN.
    a.sad.outbound(id).unwrap().runtime().set_next_seq(u64::from(u32::MAX));
    let (o, actions, _) = encapsulate(&mut a, &packets(2, false));
    assert_eq!(o.len(), 1);
    assert_eq!(actions[1], Action::Drop(DropReason::SeqExhausted));
    let (_, actions, _) = encapsulate(&mut a, &packets(1, false));
    assert_eq!(actions[0], Action::Drop(DropReason::HardLifetime), "the SA is dead until rekeyed");
    a.sad.handle_timeout(t0);
    let e = a.sad.poll_event().unwrap();
    assert_eq!((e.kind, e.trigger), (LifetimeKind::Hard, LifetimeTrigger::SequenceNumbers));
}

#[test]
fn esn_carries_traffic_across_the_2_pow_32_boundary() {
    let (mut a, mut b, id) = setup(Shape { esn: true, ..v4(CBC) });
    let start = (1u64 << 32) - 3;
    a.sad.outbound(id).unwrap().runtime().set_next_seq(start);
    // B has seen nothing, so prime its window as if it had received up to start - 1.
    b.sad.inbound(0x2000).unwrap().runtime().window().commit(start - 1).unwrap();
    let o = outers(&mut a, &packets(6, false));
    assert_eq!(o.len(), 6);
    let (r, _) = decapsulate(&mut b, &o);
    assert_eq!(delivered(&r), 6, "{r:?}");
    assert_eq!(b.sad.inbound(0x2000).unwrap().runtime().window().top(), start + 5);
    // Replays across the boundary are still caught.
    let (r, _) = decapsulate(&mut b, &o[1..4]);
    assert!(r.iter().all(|(a, _)| *a == Action::Drop(DropReason::Replay)));
}

/// Flips the last ICV bit of every packet: forgeries.
fn forge(outers: &mut [Vec<u8>]) {
    for o in outers {
        if let Some(last) = o.last_mut() {
            *last ^= 1;
        }
    }
}

/// B's inbound SA of `setup`.
fn inbound(b: &Gateway) -> &InboundRuntime {
    b.sad.inbound(0x2000).unwrap().runtime()
}

/// A's next sequence number moved `lost` numbers on, as if that many packets were lost.
fn lose(a: &Gateway, id: OutboundSaId, lost: u64) {
    let rt = a.sad.outbound(id).unwrap().runtime();
    rt.set_next_seq(rt.peek_seq() + lost);
}

#[test]
fn esn_resynchronises_after_2_pow_32_lost_packets() {
    for suite in [GCM, CBC] {
        let (mut a, mut b, id) = setup(Shape { esn: true, ..v4(suite) });
        let (r, _) = decapsulate(&mut b, &outers(&mut a, &packets(4, false)));
        assert_eq!(delivered(&r), 4);
        lose(&a, id, (1 << 32) + 10);
        // B infers the old high half: every packet fails its ICV check, and counts.
        let after = DEFAULT_ESN_RESYNC_AFTER as usize;
        let (r, report) = decapsulate(&mut b, &outers(&mut a, &packets(after, false)));
        assert_eq!((delivered(&r), report.resynced, report.crossings), (0, 0, 1));
        assert_eq!(inbound(&b).auth_failures(), DEFAULT_ESN_RESYNC_AFTER);
        // The next batch's first packet is retried with high half 1, and opens.
        let o = outers(&mut a, &packets(4, false));
        let (r, report) = decapsulate(&mut b, &o);
        assert_eq!((report.resynced, report.crossings), (1, 2), "{suite:?}");
        assert!(matches!(r[0].0, Action::Deliver { .. }));
        assert_eq!(
            r[0].1,
            after_hops(&packets(1, false)[0], 2),
            "the inner packet, whole (a hop at each gateway)"
        );
        // The rest of that batch was inferred before the window moved.
        assert!(r[1..].iter().all(|(a, _)| *a == Action::Drop(DropReason::IcvMismatch)));
        assert_eq!(inbound(&b).window().top() >> 32, 1);
        assert_eq!(sa_drops(&b).get(DropReason::IcvMismatch), u64::from(DEFAULT_ESN_RESYNC_AFTER) + 3);
        // From here on the inference is right again.
        let (r, report) = decapsulate(&mut b, &outers(&mut a, &packets(8, false)));
        assert_eq!((delivered(&r), report.resynced, report.crossings), (8, 0, 1));
        assert_eq!(inbound(&b).auth_failures(), 0);
        // The packet that opened after the retries is not taken twice.
        let (r, _) = decapsulate(&mut b, &o[..1]);
        assert_eq!(r[0].0, Action::Drop(DropReason::Replay));
    }
}

#[test]
fn esn_resync_retries_a_packet_the_window_placed_behind_itself() {
    let (mut a, mut b, id) = setup(Shape { esn: true, ..v4(GCM) });
    inbound(&b).window().commit(1_000_000).unwrap();
    lose(&a, id, (1 << 32) + 2_000_000);
    let after = DEFAULT_ESN_RESYNC_AFTER as usize;
    let (r, _) = decapsulate(&mut b, &outers(&mut a, &packets(after, false)));
    assert_eq!(delivered(&r), 0);
    // Now A's low half (10) is below B's window in B's own subspace: without the retries
    // these would be replays for the next 2^31 packets.
    a.sad.outbound(id).unwrap().runtime().set_next_seq((2 << 32) + 10);
    let (r, report) = decapsulate(&mut b, &outers(&mut a, &packets(3, false)));
    assert!(matches!(r[0].0, Action::Deliver { .. }), "{r:?}");
    assert_eq!((report.resynced, report.crossings), (1, 2), "high halves 1 and 2, no call for the rest");
    assert!(r[1..].iter().all(|(a, _)| *a == Action::Drop(DropReason::Replay)));
    assert_eq!(inbound(&b).window().top(), (2 << 32) + 10);
    let (r, _) = decapsulate(&mut b, &outers(&mut a, &packets(4, false)));
    assert_eq!(delivered(&r), 4);
}

#[test]
fn esn_resync_gives_up_after_its_tries_and_costs_a_bounded_number_of_calls() {
    let (mut a, mut b, id) = setup(Shape { esn: true, ..v4(GCM) });
    lose(&a, id, (u64::from(DEFAULT_ESN_RESYNC_TRIES) + 1) << 32);
    let after = DEFAULT_ESN_RESYNC_AFTER as usize;
    decapsulate(&mut b, &outers(&mut a, &packets(after, false)));
    for _ in 0..3 {
        let (r, report) = decapsulate(&mut b, &outers(&mut a, &packets(8, false)));
        assert_eq!(delivered(&r), 0);
        // One packet per call is retried, with each allowed high half.
        assert_eq!((report.resynced, report.crossings), (0, 1 + DEFAULT_ESN_RESYNC_TRIES));
    }
    assert_eq!(inbound(&b).window().top() >> 32, 0, "the window did not move");
    assert_eq!(sa_drops(&b).get(DropReason::IcvMismatch), u64::from(DEFAULT_ESN_RESYNC_AFTER) + 24);
}

#[test]
fn esn_resync_opens_no_forgery_or_replay_and_good_packets_end_it() {
    let (mut a, mut b, _) = setup(Shape { esn: true, ..v4(GCM) });
    let old = outers(&mut a, &packets(2, false));
    decapsulate(&mut b, &old);
    let after = DEFAULT_ESN_RESYNC_AFTER as usize;
    let mut forged = outers(&mut a, &packets(after + 1, false));
    forge(&mut forged);
    let (r, _) = decapsulate(&mut b, &forged[..after]);
    assert_eq!(delivered(&r), 0);
    assert_eq!(inbound(&b).auth_failures(), DEFAULT_ESN_RESYNC_AFTER);
    // A forgery and a replay are retried and refused; the good packets after them pass.
    let mut batch = vec![forged[after].clone(), old[0].clone()];
    let good = outers(&mut a, &packets(3, false));
    batch.extend(good.iter().cloned());
    let (r, report) = decapsulate(&mut b, &batch);
    assert_eq!(report.resynced, 0);
    assert_eq!(r[0].0, Action::Drop(DropReason::IcvMismatch));
    assert_eq!(r[1].0, Action::Drop(DropReason::Replay));
    assert_eq!(delivered(&r), 3);
    assert_eq!(inbound(&b).auth_failures(), 0, "an authenticated packet ends the failure run");
    assert_eq!(inbound(&b).window().top() >> 32, 0);
    // No more retries: one call for the next batch.
    let (_, report) = decapsulate(&mut b, &outers(&mut a, &packets(2, false)));
    assert_eq!(report.crossings, 1);
}

#[test]
fn without_esn_or_with_resync_off_no_packet_is_retried() {
    for (esn, after) in [(false, DEFAULT_ESN_RESYNC_AFTER), (true, 0)] {
        let (mut a, mut b, id) = setup(Shape { esn, ..v4(GCM) });
        b.worker = Worker::new(WorkerConfig { esn_resync_after: after, ..WorkerConfig::default() }, 64);
        decapsulate(&mut b, &outers(&mut a, &packets(2, false)));
        lose(&a, id, 1 << 32);
        if !esn {
            // A 32-bit SA cannot send past 2^32: make B's packets fail their ICV instead.
            a.sad.outbound(id).unwrap().runtime().set_next_seq(10);
        }
        let n = DEFAULT_ESN_RESYNC_AFTER as usize + 8;
        let mut o = outers(&mut a, &packets(n, false));
        if !esn {
            forge(&mut o);
        }
        for chunk in o.chunks(8) {
            let (r, report) = decapsulate(&mut b, chunk);
            assert_eq!((delivered(&r), report.resynced, report.crossings), (0, 0, 1), "esn {esn}");
        }
    }
}

#[test]
fn df_packets_too_big_get_an_icmp_error_toward_the_source() {
    let (mut a, _, id) = setup(v4(GCM));
    a.sad.set_path_mtu(id, 600).unwrap();
    let (src, dst) = inner_hosts(false);
    let big = udp_packet(src, dst, 700, 64, Ecn::NotEct, true);
    let mut area = Area::new(4);
    let mut batch = area.batch();
    batch.push(Frame::Ip, OFFSET, &big).unwrap();
    let report = a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
    assert_eq!((report.icmp, report.dropped, report.transmit, report.crossings), (1, 1, 0, 0));
    assert_eq!(batch.packets()[0].action, Action::IcmpError);
    let icmp = batch.bytes(0).unwrap();
    let ip = Ipv4Packet::new_checked(icmp).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.dst_addr(), "198.18.10.10".parse::<std::net::Ipv4Addr>().unwrap());
    // From the packet's destination, not from the gateway's own address: the error goes
    // back through the TUN device, and the kernel drops what comes from its own addresses.
    assert_eq!(ip.src_addr(), "198.18.20.20".parse::<std::net::Ipv4Addr>().unwrap(), "the destination");
    let m = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(m.verify_checksum());
    assert_eq!((m.msg_type().0, m.msg_code()), (3, 4));
    // 600 - 20 (IP) - 8 (ESP) - 8 (IV) - 16 (ICV) = 548, aligned: 548 - 2 = 546.
    assert_eq!(m.next_hop_mtu(), 546);
    assert_eq!(&m.data()[..big.len().min(548)], &big[..548], "the original packet, TTL not yet decremented");
    assert_eq!(icmp.len(), 576);
    let sa = a.sad.outbound(id).unwrap();
    assert_eq!(sa.runtime().drops().get(DropReason::MtuExceeded), 1);
    // An exactly fitting packet goes through.
    let fits = udp_packet(src, dst, 546 - 28, 64, Ecn::NotEct, true);
    let (o, _, _) = encapsulate(&mut a, &[fits]);
    assert_eq!(o[0].1.len(), 600);
}

#[test]
fn ipv6_packets_too_big_get_packet_too_big() {
    let (mut a, _, id) = setup(Shape { inner_v6: true, outer_v6: true, udp: true, ..v4(CBC) });
    a.sad.set_path_mtu(id, 1400).unwrap();
    let (src, dst) = inner_hosts(true);
    let big = udp_packet(src, dst, 1350, 64, Ecn::NotEct, true);
    let mut area = Area::new(2);
    let mut batch = area.batch();
    batch.push(Frame::Ip, OFFSET, &big).unwrap();
    a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
    assert_eq!(batch.packets()[0].action, Action::IcmpError);
    let icmp = batch.bytes(0).unwrap();
    assert_eq!(icmp.len(), 1280);
    let to: std::net::Ipv6Addr = "2001:db8:a::10".parse().unwrap();
    let from: std::net::Ipv6Addr = "2001:db8:b::20".parse().unwrap();
    assert_eq!(&icmp[8..24], &from.octets(), "from the packet's destination");
    assert_eq!(&icmp[24..40], &to.octets());
    let m = Icmpv6Packet::new_checked(&icmp[40..]).unwrap();
    assert!(m.verify_checksum(from, to));
    // 1400 - 40 - 8 (UDP) - 8 - 16 (IV) - 16 (ICV) = 1312, 16-aligned 1312 - 2 = 1310.
    assert_eq!((m.msg_type().0, m.mtu()), (2, 1310));
}

#[test]
fn icmp_errors_are_not_sent_about_icmp_errors() {
    let (mut a, _, id) = setup(v4(GCM));
    a.sad.set_path_mtu(id, 600).unwrap();
    let (src, dst) = inner_hosts(false);
    let mut p = udp_packet(src, dst, 700, 64, Ecn::NotEct, true);
    p[9] = 1; // ICMP
    p[20] = 3; // Destination Unreachable
    fix_v4(&mut p);
    let (_, actions, report) = encapsulate(&mut a, &[p]);
    assert_eq!(actions[0], Action::Drop(DropReason::MtuExceeded));
    assert_eq!(report.icmp, 0);
}

#[test]
fn ipv4_without_df_is_fragmented_before_encapsulation() {
    for suite in [GCM, CBC] {
        let (mut a, mut b, id) = setup(v4(suite));
        a.sad.set_path_mtu(id, 576).unwrap();
        let (src, dst) = inner_hosts(false);
        let big = udp_packet(src, dst, 1400, 64, Ecn::Ect1, false);
        let small = udp_packet(src, dst, 10, 64, Ecn::NotEct, false);
        let (o, actions, report) = encapsulate(&mut a, &[big.clone(), small.clone()]);
        assert!(o.iter().all(|(_, p)| p.len() <= 576));
        assert_eq!(report.crossings, 1, "fragments go in the same crossing");
        // 1428 bytes at most ~500 per fragment: three fragments, plus the small packet.
        assert_eq!(o.len(), 4, "{actions:?}");
        let (r, _) = decapsulate(&mut b, &o.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>());
        assert_eq!(delivered(&r), 4);
        // Reassemble by offset: the original packet, TTL 62, comes back.
        let mut frags: Vec<_> = r
            .iter()
            .map(|(_, p)| p.clone())
            .filter(|p| {
                let v = Ipv4Packet::new_checked(&p[..]).unwrap();
                v.is_fragment()
            })
            .collect();
        frags.sort_by_key(|p| Ipv4Packet::new_checked(&p[..]).unwrap().frag_offset());
        let mut data = Vec::new();
        for f in &frags {
            let v = Ipv4Packet::new_checked(&f[..]).unwrap();
            assert!(v.verify_checksum());
            assert_eq!(usize::from(v.frag_offset()), data.len());
            assert_eq!(v.ttl(), 62);
            data.extend_from_slice(v.payload());
        }
        assert!(!Ipv4Packet::new_checked(&frags.last().unwrap()[..]).unwrap().more_frags());
        assert_eq!(data, after_hops(&big, 2)[20..]);
        let unfragmented: Vec<_> = r.iter().filter(|(_, p)| *p == after_hops(&small, 2)).collect();
        assert_eq!(unfragmented.len(), 1);
    }
}

#[test]
fn fragments_without_free_slots_are_dropped_as_no_room() {
    let (mut a, _, id) = setup(v4(GCM));
    a.sad.set_path_mtu(id, 576).unwrap();
    let (src, dst) = inner_hosts(false);
    let big = udp_packet(src, dst, 1400, 64, Ecn::NotEct, false);
    let mut area = Area::new(2);
    let mut batch = area.batch();
    batch.push(Frame::Ip, OFFSET, &big).unwrap();
    a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
    assert_eq!(batch.packets()[0].action, Action::Drop(DropReason::NoRoom));
}

#[test]
fn large_batches_cross_in_chunks_of_max_batch() {
    let (mut a, mut b, _) = setup(v4(GCM));
    a.worker = Worker::new(WorkerConfig { max_batch: 2, ..WorkerConfig::default() }, 8);
    let (o, _, report) = encapsulate(&mut a, &packets(5, false));
    assert_eq!((report.transmit, report.crossings), (5, 3));
    // A worker that asks for more than the enclave allows sees the whole call refused.
    b.worker = Worker::new(WorkerConfig { max_batch: 1000, ..WorkerConfig::default() }, 8);
    let many: Vec<_> = (0..300).map(|i| o[i % 5].1.clone()).collect();
    let (r, _) = decapsulate(&mut b, &many);
    assert!(r.iter().all(|(a, _)| *a == Action::Drop(DropReason::EnclaveRefused)));
}

#[test]
fn headroom_and_tailroom_are_checked() {
    let (mut a, _, _) = setup(v4(CBC));
    let (src, dst) = inner_hosts(false);
    let p = udp_packet(src, dst, 10, 64, Ecn::NotEct, true);
    let mut area = Area::new(2);
    let mut batch = area.batch();
    batch.push(Frame::Ip, 10, &p).unwrap();
    batch.push(Frame::Ip, SLOT - p.len(), &p).unwrap();
    a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
    assert_eq!(batch.packets()[0].action, Action::Drop(DropReason::NoRoom));
    assert_eq!(batch.packets()[1].action, Action::Drop(DropReason::NoRoom));
}
