//! Fuzzing entry points for the packet views (STYLE §7), built only under `cfg(fuzzing)`.
//!
//! Every view runs over the input. Where a `Repr` parses, it is emitted and parsed again
//! and must come back equal; a panic here is a finding. Checksums are almost never right
//! in fuzzed bytes, so each checksummed view is also tried on a copy whose checksum was
//! filled in, to reach the parse-success paths.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::{
    EspPacket, EspRepr, EspTrailer, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpPair, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpEncapPayload, UdpPacket, UdpRepr,
};

const SRC_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const DST_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const SRC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const DST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// (IV, ICV) lengths of common ESP transforms: AES-GCM-16, AES-CBC with HMAC-SHA2-256-128,
/// AES-CBC with HMAC-SHA1-96, NULL with HMAC-SHA1-96, and none at all.
const ESP_LAYOUTS: [(usize, usize); 5] = [(8, 16), (16, 16), (16, 12), (0, 12), (0, 0)];

/// Runs every packet view over `data`, checking emit → parse round trips.
pub fn packet_views(data: &[u8]) {
    ipv4(data);
    ipv6(data);
    udp(data, &IpPair::V4 { src: SRC_V4, dst: DST_V4 });
    udp(data, &IpPair::V6 { src: SRC_V6, dst: DST_V6 });
    icmpv4(data);
    icmpv6(data, SRC_V6, DST_V6);
    esp(data);
    esp_trailer(data);
    udp_encap(data);
}

/// Dispatches an IP payload to the view for its protocol.
fn transport(payload: &[u8], protocol: IpProtocol, addrs: &IpPair) {
    match (protocol, addrs) {
        (IpProtocol::UDP, _) => udp(payload, addrs),
        (IpProtocol::ICMP, IpPair::V4 { .. }) => icmpv4(payload),
        (IpProtocol::ICMPV6, IpPair::V6 { src, dst }) => icmpv6(payload, *src, *dst),
        (IpProtocol::ESP, _) => esp(payload),
        _ => {}
    }
}

fn ipv4(data: &[u8]) {
    let Ok(packet) = Ipv4Packet::new_checked(data) else { return };
    let _ = (packet.options(), packet.is_fragment(), Ipv4Repr::parse(&packet));
    let mut fixed = data.to_vec();
    let mut packet = Ipv4Packet::new_unchecked(&mut fixed[..]);
    packet.set_version(4);
    packet.fill_checksum();
    let Ok(repr) = Ipv4Repr::parse(&packet) else { return };
    assert_eq!(repr.payload_len, packet.payload().len());
    let mut out = vec![0; repr.buffer_len()];
    let mut emitted = Ipv4Packet::new_unchecked(&mut out[..]);
    assert_eq!(repr.emit(&mut emitted), Ok(()));
    emitted.payload_mut().copy_from_slice(packet.payload());
    let reparsed = Ipv4Packet::new_checked(&out[..]).and_then(|p| Ipv4Repr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
    transport(packet.payload(), repr.protocol, &IpPair::V4 { src: repr.src_addr, dst: repr.dst_addr });
}

fn ipv6(data: &[u8]) {
    let Ok(packet) = Ipv6Packet::new_checked(data) else { return };
    let _ = Ipv6Repr::parse(&packet);
    let mut fixed = data.to_vec();
    let mut packet = Ipv6Packet::new_unchecked(&mut fixed[..]);
    packet.set_version(6);
    let Ok(repr) = Ipv6Repr::parse(&packet) else { return };
    let mut out = vec![0; repr.buffer_len()];
    let mut emitted = Ipv6Packet::new_unchecked(&mut out[..]);
    assert_eq!(repr.emit(&mut emitted), Ok(()));
    emitted.payload_mut().copy_from_slice(packet.payload());
    let reparsed = Ipv6Packet::new_checked(&out[..]).and_then(|p| Ipv6Repr::parse(&p));
    assert_eq!(reparsed, Ok(repr));
    let Ok((protocol, offset)) = packet.upper_layer() else { return };
    let upper = offset.checked_sub(crate::ipv6::HEADER_LEN).and_then(|start| packet.payload().get(start..));
    assert!(upper.is_some(), "upper-layer offset {offset} outside the payload");
    if let Some(upper) = upper {
        transport(upper, protocol, &IpPair::V6 { src: repr.src_addr, dst: repr.dst_addr });
    }
}

fn udp(data: &[u8], addrs: &IpPair) {
    let Ok(packet) = UdpPacket::new_checked(data) else { return };
    let _ = UdpRepr::parse(&packet, addrs);
    let mut fixed = data.to_vec();
    let mut packet = UdpPacket::new_unchecked(&mut fixed[..]);
    packet.fill_checksum(addrs);
    let Ok(repr) = UdpRepr::parse(&packet, addrs) else { return };
    let payload = packet.payload();
    let mut out = vec![0; repr.buffer_len(payload.len())];
    let emitted = repr.emit(&mut UdpPacket::new_unchecked(&mut out[..]), addrs, payload.len(), |p| {
        p.copy_from_slice(payload)
    });
    assert_eq!(emitted, Ok(()));
    let reparsed = UdpPacket::new_checked(&out[..]);
    assert_eq!(reparsed.as_ref().map(UdpPacket::payload), Ok(payload));
    assert_eq!(reparsed.and_then(|p| UdpRepr::parse(&p, addrs)), Ok(repr));
    if repr.dst_port == crate::udp_encap::PORT {
        udp_encap(payload);
    }
}

fn icmpv4(data: &[u8]) {
    let Ok(packet) = Icmpv4Packet::new_checked(data) else { return };
    let _ = Icmpv4Repr::parse(&packet);
    let mut fixed = data.to_vec();
    let mut packet = Icmpv4Packet::new_unchecked(&mut fixed[..]);
    packet.fill_checksum();
    let Ok(repr) = Icmpv4Repr::parse(&packet) else { return };
    let mut out = vec![0; repr.buffer_len()];
    assert_eq!(repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..])), Ok(()));
    let reparsed = Icmpv4Packet::new_checked(&out[..]);
    assert_eq!(reparsed.as_ref().map_err(Clone::clone).and_then(Icmpv4Repr::parse), Ok(repr));
}

fn icmpv6(data: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let Ok(packet) = Icmpv6Packet::new_checked(data) else { return };
    let _ = Icmpv6Repr::parse(&packet, src, dst);
    let mut fixed = data.to_vec();
    let mut packet = Icmpv6Packet::new_unchecked(&mut fixed[..]);
    packet.fill_checksum(src, dst);
    let Ok(repr) = Icmpv6Repr::parse(&packet, src, dst) else { return };
    let mut out = vec![0; repr.buffer_len()];
    assert_eq!(repr.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..]), src, dst), Ok(()));
    let reparsed = Icmpv6Packet::new_checked(&out[..]);
    let reparsed = reparsed.as_ref().map_err(Clone::clone);
    assert_eq!(reparsed.and_then(|p| Icmpv6Repr::parse(p, src, dst)), Ok(repr));
}

fn esp(data: &[u8]) {
    let Ok(packet) = EspPacket::new_checked(data) else { return };
    for (iv_len, icv_len) in ESP_LAYOUTS {
        if let Ok(parts) = packet.parts(iv_len, icv_len) {
            assert_eq!((parts.iv.len(), parts.icv.len()), (iv_len, icv_len));
            let header_len = crate::esp::HEADER_LEN;
            assert_eq!(header_len + iv_len + parts.ciphertext.len() + icv_len, data.len());
            assert_eq!(packet.authenticated(iv_len, icv_len).map(<[u8]>::len), Ok(data.len() - icv_len));
        }
    }
    let Ok(repr) = EspRepr::parse(&packet) else { return };
    let mut out = data.to_vec();
    out[..repr.buffer_len()].fill(0);
    assert_eq!(repr.emit(&mut EspPacket::new_unchecked(&mut out[..])), Ok(()));
    assert_eq!(out, data);
}

fn esp_trailer(data: &[u8]) {
    if let Ok((payload, trailer)) = EspTrailer::parse(data) {
        // Default padding is fully determined, so emitting gives back the same bytes.
        let mut out = vec![0; trailer.buffer_len(payload.len())];
        assert_eq!(out.len(), data.len());
        assert_eq!(trailer.emit(&mut out, payload.len(), |p| p.copy_from_slice(payload)), Ok(()));
        assert_eq!(out, data);
    }
    let next_header = IpProtocol(data.first().copied().unwrap_or_default());
    for block_size in [1, 8, 16] {
        let Ok(trailer) = EspTrailer::new(data.len(), block_size, next_header) else { continue };
        let mut out = vec![0; trailer.buffer_len(data.len())];
        assert_eq!(out.len() % block_size.max(4), 0);
        assert_eq!(trailer.emit(&mut out, data.len(), |p| p.copy_from_slice(data)), Ok(()));
        assert_eq!(EspTrailer::parse(&out), Ok((data, trailer)));
    }
}

fn udp_encap(data: &[u8]) {
    let Ok(payload) = UdpEncapPayload::classify(data) else { return };
    let mut out = vec![0; payload.buffer_len()];
    assert_eq!(payload.emit(&mut out), Ok(()));
    assert_eq!(out, data);
    if let UdpEncapPayload::Esp(esp_bytes) = payload {
        esp(esp_bytes);
    }
}
