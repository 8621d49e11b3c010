//! Real packets captured between two strongSwan instances (see tests/vectors/README.md):
//! every IPv4/IPv6 + UDP + ESP-in-UDP packet parses, its checksums verify, and re-emitting
//! it from its `Repr`s reproduces the captured bytes exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::{Path, PathBuf};

use cloister_wire::ike::Message;
use cloister_wire::{
    EspPacket, EspRepr, IpPair, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpEncapPayload,
    UdpPacket, UdpRepr,
};

fn vectors(prefix: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/vectors exists in the repository")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix)))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

/// Re-emits the UDP datagram from its Repr and the captured payload; checks equality.
fn check_udp(name: &str, datagram: &[u8], addrs: &IpPair) -> (u16, Vec<u8>) {
    let udp = UdpPacket::new_checked(datagram).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(udp.verify_checksum(addrs), "{name}: UDP checksum");
    let repr = UdpRepr::parse(&udp, addrs).unwrap();
    let payload = udp.payload().to_vec();
    let mut out = vec![0u8; datagram.len()];
    repr.emit(&mut UdpPacket::new_unchecked(&mut out[..]), addrs, payload.len(), |p| {
        p.copy_from_slice(&payload)
    })
    .unwrap();
    assert_eq!(out, datagram, "{name}: UDP re-emit");
    (udp.dst_port(), payload)
}

fn check_udp_payload(name: &str, port: u16, payload: &[u8]) {
    let ike = match port {
        4500 => match UdpEncapPayload::classify(payload).unwrap() {
            UdpEncapPayload::Ike(m) => m,
            UdpEncapPayload::Esp(e) => return check_esp(name, e),
            UdpEncapPayload::Keepalive => return,
        },
        _ => payload,
    };
    let msg = Message::decode(ike).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(msg.to_vec().unwrap(), ike, "{name}: IKE re-encode");
}

fn check_esp(name: &str, esp: &[u8]) {
    let p = EspPacket::new_checked(esp).unwrap_or_else(|e| panic!("{name}: {e}"));
    let repr = EspRepr::parse(&p).unwrap();
    let mut out = esp.to_vec();
    out[..8].fill(0);
    repr.emit(&mut EspPacket::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(out, esp, "{name}: ESP header re-emit");
    // AES-GCM-16 as negotiated in the capture: 8-byte IV, 16-byte ICV.
    let parts = p.parts(8, 16).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!parts.ciphertext.is_empty(), "{name}: empty ciphertext");
}

#[test]
fn captured_ipv4_packets_parse_and_reemit_byte_exact() {
    let all = vectors("ip-v4-");
    assert!(all.len() >= 6, "expected IPv4 captures, found {}", all.len());
    for (name, bytes) in all {
        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(ip.verify_checksum(), "{name}: IPv4 checksum");
        let repr = Ipv4Repr::parse(&ip).unwrap();
        assert_eq!(repr.protocol, IpProtocol::UDP);
        let mut out = bytes.clone();
        let hl = repr.header_len();
        out[..hl].fill(0);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, bytes, "{name}: IPv4 header re-emit");
        let addrs = IpPair::V4 { src: repr.src_addr, dst: repr.dst_addr };
        let (port, payload) = check_udp(&name, ip.payload(), &addrs);
        check_udp_payload(&name, port, &payload);
    }
}

#[test]
fn captured_ipv6_packets_parse_and_reemit_byte_exact() {
    let all = vectors("ip-v6-");
    assert!(all.len() >= 6, "expected IPv6 captures, found {}", all.len());
    for (name, bytes) in all {
        let ip = Ipv6Packet::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (proto, off) = ip.upper_layer().unwrap();
        assert_eq!((proto, off), (IpProtocol::UDP, 40), "{name}: no extension headers expected");
        let repr = Ipv6Repr::parse(&ip).unwrap();
        let mut out = bytes.clone();
        out[..40].fill(0);
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, bytes, "{name}: IPv6 header re-emit");
        let addrs = IpPair::V6 { src: repr.src_addr, dst: repr.dst_addr };
        let (port, payload) = check_udp(&name, ip.payload(), &addrs);
        check_udp_payload(&name, port, &payload);
    }
}

#[test]
fn captured_esp_in_udp_packets_parse() {
    let all = vectors("esp-");
    assert!(all.len() >= 8, "expected ESP captures, found {}", all.len());
    for (name, bytes) in all {
        assert!(matches!(UdpEncapPayload::classify(&bytes), Ok(UdpEncapPayload::Esp(_))), "{name}: classify");
        check_esp(&name, &bytes);
    }
}
