//! Property tests for the packet views: every generated `Repr` survives emit → parse, and
//! arbitrary bytes give `Ok` or `Err` from every checked constructor and parser, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use core::net::{Ipv4Addr, Ipv6Addr};

use cloister_wire::{
    checksum, ipv6_ext::MAX_EXT_HEADERS, Ecn, EspPacket, EspRepr, EspTrailer, Icmpv4Packet, Icmpv4Repr,
    Icmpv6Packet, Icmpv6Repr, IpPair, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    UdpEncapPayload, UdpPacket, UdpRepr,
};
use proptest::prelude::*;

fn ecn() -> impl Strategy<Value = Ecn> {
    (0u8..4).prop_map(Ecn::from_bits)
}

fn payload_len() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..1500, Just(65_515)]
}

fn ipv4_repr() -> impl Strategy<Value = Ipv4Repr> {
    (
        (any::<u32>(), any::<u32>(), any::<u8>(), payload_len(), any::<u8>()),
        (0u8..64, ecn(), any::<u16>(), any::<bool>(), any::<bool>(), 0u16..8192),
    )
        .prop_map(|((src, dst, protocol, payload_len, ttl), (dscp, ecn, ident, df, mf, off))| Ipv4Repr {
            src_addr: Ipv4Addr::from(src),
            dst_addr: Ipv4Addr::from(dst),
            protocol: IpProtocol(protocol),
            payload_len,
            ttl,
            dscp,
            ecn,
            ident,
            dont_frag: df,
            more_frags: mf,
            frag_offset: off * 8,
        })
}

fn ipv6_repr() -> impl Strategy<Value = Ipv6Repr> {
    (
        (any::<u128>(), any::<u128>(), any::<u8>(), prop_oneof![0usize..1500, Just(65_535)]),
        (any::<u8>(), 0u8..64, ecn(), 0u32..=0xf_ffff),
    )
        .prop_map(|((src, dst, next_header, payload_len), (hop_limit, dscp, ecn, flow))| Ipv6Repr {
            src_addr: Ipv6Addr::from(src),
            dst_addr: Ipv6Addr::from(dst),
            next_header: IpProtocol(next_header),
            payload_len,
            hop_limit,
            dscp,
            ecn,
            flow_label: flow,
        })
}

fn ip_pair() -> impl Strategy<Value = IpPair> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(s, d)| IpPair::V4 { src: Ipv4Addr::from(s), dst: Ipv4Addr::from(d) }),
        (any::<u128>(), any::<u128>())
            .prop_map(|(s, d)| IpPair::V6 { src: Ipv6Addr::from(s), dst: Ipv6Addr::from(d) }),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// One skippable extension header: (type, total length in bytes).
fn ext_header() -> impl Strategy<Value = (u8, usize)> {
    prop_oneof![
        (0usize..4).prop_map(|units| (0x2b, (units + 1) * 8)),
        (0usize..4).prop_map(|units| (0x3c, (units + 1) * 8)),
        Just((0x2c, 8)),
    ]
}

/// Calls every checked constructor, getter and parser on `data`; none may panic.
fn exercise(data: &[u8]) {
    let v4 = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 1), dst: Ipv4Addr::new(198, 19, 0, 1) };
    let (src6, dst6) = (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), Ipv6Addr::LOCALHOST);
    let v6 = IpPair::V6 { src: src6, dst: dst6 };
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = (p.options(), p.payload(), p.is_fragment(), p.dscp(), p.ecn(), p.frag_offset());
        let _ = Ipv4Repr::parse(&p);
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = (p.payload(), p.traffic_class(), p.flow_label(), Ipv6Repr::parse(&p));
        if let Ok((_, offset)) = p.upper_layer() {
            assert!(offset <= data.len());
        }
    }
    if let Ok(p) = UdpPacket::new_checked(data) {
        let _ = (p.payload(), UdpRepr::parse(&p, &v4), UdpRepr::parse(&p, &v6));
    }
    if let Ok(p) = Icmpv4Packet::new_checked(data) {
        let _ = (p.next_hop_mtu(), Icmpv4Repr::parse(&p));
    }
    if let Ok(p) = Icmpv6Packet::new_checked(data) {
        let _ = (p.mtu(), Icmpv6Repr::parse(&p, src6, dst6));
    }
    if let Ok(p) = EspPacket::new_checked(data) {
        let _ = (p.payload(), EspRepr::parse(&p));
        for (iv, icv) in [(0, 0), (8, 16), (16, 12), (usize::MAX, 1)] {
            let _ = (p.parts(iv, icv), p.authenticated(iv, icv));
        }
    }
    let _ = EspTrailer::parse(data);
    let _ = UdpEncapPayload::classify(data);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in bytes(256)) {
        exercise(&data);
    }

    #[test]
    fn ipv4_emit_parse_round_trips(repr in ipv4_repr()) {
        let mut buffer = vec![0; repr.buffer_len()];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buffer[..]))?;
        let packet = Ipv4Packet::new_checked(&buffer[..])?;
        prop_assert_eq!(Ipv4Repr::parse(&packet)?, repr);
    }

    #[test]
    fn ipv6_emit_parse_round_trips(repr in ipv6_repr()) {
        let mut buffer = vec![0; repr.buffer_len()];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut buffer[..]))?;
        let packet = Ipv6Packet::new_checked(&buffer[..])?;
        prop_assert_eq!(Ipv6Repr::parse(&packet)?, repr);
    }

    #[test]
    fn ipv6_walk_finds_the_upper_layer_after_any_short_chain(
        chain in proptest::collection::vec(ext_header(), 0..=MAX_EXT_HEADERS),
        upper in prop_oneof![Just(0x11u8), Just(0x32), Just(0x33), Just(0x3a), Just(0x3b)],
        hop_by_hop_first in any::<bool>(),
    ) {
        let mut headers: Vec<(u8, usize)> = chain;
        if hop_by_hop_first && headers.len() < MAX_EXT_HEADERS {
            headers.insert(0, (0x00, 8));
        }
        let mut payload = Vec::new();
        for (i, &(_, len)) in headers.iter().enumerate() {
            let next = headers.get(i + 1).map_or(upper, |&(kind, _)| kind);
            let mut header = vec![0; len];
            header[0] = next;
            if headers[i].0 != 0x2c {
                header[1] = u8::try_from(len / 8 - 1)?;
            }
            payload.extend_from_slice(&header);
        }
        let offset = 40 + payload.len();
        payload.extend_from_slice(&[0xa5; 8]);
        let first = headers.first().map_or(upper, |&(kind, _)| kind);
        let repr = Ipv6Repr {
            src_addr: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
            next_header: IpProtocol(first),
            payload_len: payload.len(),
            hop_limit: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            flow_label: 0,
        };
        let mut buffer = vec![0; repr.buffer_len()];
        let mut packet = Ipv6Packet::new_unchecked(&mut buffer[..]);
        repr.emit(&mut packet)?;
        packet.payload_mut().copy_from_slice(&payload);
        prop_assert_eq!(packet.upper_layer()?, (IpProtocol(upper), offset));
    }

    #[test]
    fn udp_emit_parse_round_trips(
        src_port in any::<u16>(),
        dst_port in 1u16..,
        payload in bytes(600),
        addrs in ip_pair(),
    ) {
        let repr = UdpRepr { src_port, dst_port };
        let mut buffer = vec![0; repr.buffer_len(payload.len())];
        let mut packet = UdpPacket::new_unchecked(&mut buffer[..]);
        repr.emit(&mut packet, &addrs, payload.len(), |p| p.copy_from_slice(&payload))?;
        let packet = UdpPacket::new_checked(&buffer[..])?;
        prop_assert_eq!(UdpRepr::parse(&packet, &addrs)?, repr);
        prop_assert_eq!(packet.payload(), &payload[..]);
    }

    #[test]
    fn icmpv4_emit_parse_round_trips(
        kind in 0u8..3,
        ident in any::<u16>(),
        seq_no in any::<u16>(),
        data in bytes(600),
    ) {
        let repr = match kind {
            0 => Icmpv4Repr::EchoRequest { ident, seq_no, data: &data },
            1 => Icmpv4Repr::EchoReply { ident, seq_no, data: &data },
            _ => Icmpv4Repr::frag_needed(ident, &data),
        };
        let mut buffer = vec![0; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buffer[..]))?;
        let packet = Icmpv4Packet::new_checked(&buffer[..])?;
        prop_assert_eq!(Icmpv4Repr::parse(&packet)?, repr);
    }

    #[test]
    fn icmpv6_emit_parse_round_trips(
        kind in 0u8..3,
        ident in any::<u16>(),
        seq_no in any::<u16>(),
        mtu in any::<u32>(),
        data in bytes(1400),
        (src, dst) in (any::<u128>(), any::<u128>()),
    ) {
        let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let repr = match kind {
            0 => Icmpv6Repr::EchoRequest { ident, seq_no, data: &data },
            1 => Icmpv6Repr::EchoReply { ident, seq_no, data: &data },
            _ => Icmpv6Repr::packet_too_big(mtu, &data),
        };
        let mut buffer = vec![0; repr.buffer_len()];
        repr.emit(&mut Icmpv6Packet::new_unchecked(&mut buffer[..]), src, dst)?;
        let packet = Icmpv6Packet::new_checked(&buffer[..])?;
        prop_assert_eq!(Icmpv6Repr::parse(&packet, src, dst)?, repr);
    }

    #[test]
    fn esp_emit_parse_round_trips(spi in 1u32.., sequence_number in any::<u32>(), rest in bytes(64)) {
        let repr = EspRepr { spi, sequence_number };
        let mut buffer = vec![0; repr.buffer_len()];
        buffer.extend_from_slice(&rest);
        repr.emit(&mut EspPacket::new_unchecked(&mut buffer[..]))?;
        let packet = EspPacket::new_checked(&buffer[..])?;
        prop_assert_eq!(EspRepr::parse(&packet)?, repr);
        prop_assert_eq!(packet.payload(), &rest[..]);
    }

    #[test]
    fn esp_trailer_emit_parse_round_trips(
        payload in bytes(300),
        block_shift in 0u32..=8,
        next_header in any::<u8>(),
    ) {
        let block_size = 1usize << block_shift;
        let trailer = EspTrailer::new(payload.len(), block_size, IpProtocol(next_header))?;
        let mut plaintext = vec![0; trailer.buffer_len(payload.len())];
        prop_assert_eq!(plaintext.len() % block_size.max(4), 0);
        trailer.emit(&mut plaintext, payload.len(), |p| p.copy_from_slice(&payload))?;
        prop_assert_eq!(EspTrailer::parse(&plaintext)?, (&payload[..], trailer));
    }

    #[test]
    fn udp_encap_emit_classify_round_trips(kind in 0u8..3, body in bytes(300), spi in 1u32..) {
        let mut esp = spi.to_be_bytes().to_vec();
        esp.extend_from_slice(&[0; 4]);
        esp.extend_from_slice(&body);
        let payload = match kind {
            0 => UdpEncapPayload::Keepalive,
            1 => UdpEncapPayload::Ike(&body),
            _ => UdpEncapPayload::Esp(&esp),
        };
        let mut buffer = vec![0; payload.buffer_len()];
        payload.emit(&mut buffer)?;
        prop_assert_eq!(UdpEncapPayload::classify(&buffer)?, payload);
    }

    #[test]
    fn incremental_checksum_update_keeps_a_header_valid(
        header in proptest::collection::vec(any::<u8>(), 20..=60),
        field in 0usize..30,
        new in any::<[u8; 4]>(),
        wide in any::<bool>(),
    ) {
        // An IPv4-like header: never all zero, checksum at bytes 10..12.
        let mut header = header;
        header.truncate(header.len() & !1);
        header[0] = 0x45;
        header[10..12].fill(0);
        let sum = checksum::finish(checksum::data(&header));
        header[10..12].copy_from_slice(&sum.to_be_bytes());
        let width = if wide { 4 } else { 2 };
        let start = 2 * (field % ((header.len() - width) / 2 + 1));
        prop_assume!(!(start..start + width).any(|i| (10..12).contains(&i)) && start > 0);
        let old = header[start..start + width].to_vec();
        header[start..start + width].copy_from_slice(&new[..width]);
        let updated = checksum::update(sum, &old, &new[..width]);
        header[10..12].copy_from_slice(&updated.to_be_bytes());
        prop_assert_eq!(checksum::data(&header), 0xffff);
    }
}
