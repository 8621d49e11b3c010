//! Shared test helpers: enclaves with raw-key SAs, SA pairs between two gateways, inner
//! packet builders. Addresses are from 198.18.0.0/15 and 2001:db8::/32 only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::type_complexity, unreachable_pub)]

use std::net::IpAddr;
use std::time::Instant;

use cloister_esp::*;
use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
use enclave_core::{Cipher, EnclaveConfig, InlineEnclave, Integ, Limits, ProvisioningKey, Suite, TenantId};
use wire::{Ecn, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket, UdpRepr};

/// Every ESP transform the enclave implements.
pub const SUITES: [Suite; 7] = [
    Suite::aead(Cipher::AesGcm16_128),
    Suite::aead(Cipher::AesGcm16_256),
    Suite::aead(Cipher::ChaCha20Poly1305),
    Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128),
    Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
    Suite::cbc(Cipher::AesCbc256, Integ::HmacSha384_192),
    Suite::cbc(Cipher::AesCbc256, Integ::HmacSha512_256),
];

pub const SLOT: usize = 2048;
pub const OFFSET: usize = 128;

pub fn start_enclave() -> InlineEnclave {
    let config = EnclaveConfig {
        tenant: TenantId(7),
        provisioning_key: ProvisioningKey::from_bytes([0x42; 32]),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key().unwrap();
    let att = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"esp-tests".to_vec()),
        &config.measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start(config, Box::new(att)).unwrap()
}

/// Deterministic key bytes for a suite: (encryption incl. salt, integrity).
pub fn keys(suite: Suite, seed: u8) -> (Vec<u8>, Vec<u8>) {
    let enc = (0..suite.cipher.keymat_len()).map(|i| seed.wrapping_add(u8::try_from(i).unwrap())).collect();
    let integ = (0..suite.integ_key_len())
        .map(|i| seed.wrapping_mul(3).wrapping_add(u8::try_from(i).unwrap()))
        .collect();
    (enc, integ)
}

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub suite: Suite,
    pub esn: bool,
    pub inner_v6: bool,
    pub outer_v6: bool,
    pub udp: bool,
}

pub fn outer_addrs(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        ("2001:db8::a".parse().unwrap(), "2001:db8::b".parse().unwrap())
    } else {
        ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap())
    }
}

/// (protected network of A, of B).
pub fn inner_nets(v6: bool) -> (AddressRange, AddressRange) {
    if v6 {
        ("2001:db8:a::/48".parse().unwrap(), "2001:db8:b::/48".parse().unwrap())
    } else {
        ("198.18.10.0/24".parse().unwrap(), "198.18.20.0/24".parse().unwrap())
    }
}

pub fn inner_hosts(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        ("2001:db8:a::10".parse().unwrap(), "2001:db8:b::20".parse().unwrap())
    } else {
        ("198.18.10.10".parse().unwrap(), "198.18.20.20".parse().unwrap())
    }
}

/// One gateway: its enclave, SAD, SPD and worker.
pub struct Gateway {
    pub enclave: InlineEnclave,
    pub sad: Sad,
    pub spd: Spd,
    pub worker: Worker,
}

impl Gateway {
    pub fn new() -> Self {
        Self {
            enclave: start_enclave(),
            sad: Sad::new(),
            spd: Spd::new(),
            worker: Worker::new(WorkerConfig::default(), 64),
        }
    }
}

/// A's outbound SA towards B and B's matching inbound SA, with A's policy for the inner
/// networks. Returns A's outbound id.
pub fn tunnel(a: &mut Gateway, b: &mut Gateway, s: Shape, spi: u32, now: Instant) -> OutboundSaId {
    tunnel_with_window(a, b, s, spi, now, DEFAULT_WINDOW)
}

/// [`tunnel`] with B's anti-replay window of `window` packets.
pub fn tunnel_with_window(
    a: &mut Gateway,
    b: &mut Gateway,
    s: Shape,
    spi: u32,
    now: Instant,
    window: u32,
) -> OutboundSaId {
    tunnel_with(a, b, s, spi, now, TunnelOptions { window, ..TunnelOptions::default() })
}

/// [`tunnel`] with `lifetime` on both SAs.
pub fn tunnel_with_lifetime(
    a: &mut Gateway,
    b: &mut Gateway,
    s: Shape,
    spi: u32,
    now: Instant,
    lifetime: Lifetime,
) -> OutboundSaId {
    tunnel_with(a, b, s, spi, now, TunnelOptions { lifetime, ..TunnelOptions::default() })
}

/// What [`tunnel_with`] sets apart from the shape.
#[derive(Debug, Clone)]
pub struct TunnelOptions {
    /// B's anti-replay window.
    pub window: u32,
    /// Both SAs' lifetime.
    pub lifetime: Lifetime,
    /// B's selectors for A's side (source) and its own (destination), instead of the
    /// inner networks with any protocol and port.
    pub inbound_selectors: Option<(TrafficSelector, TrafficSelector)>,
}

impl Default for TunnelOptions {
    fn default() -> Self {
        Self { window: DEFAULT_WINDOW, lifetime: Lifetime::default(), inbound_selectors: None }
    }
}

/// [`tunnel`] with `options`.
pub fn tunnel_with(
    a: &mut Gateway,
    b: &mut Gateway,
    s: Shape,
    spi: u32,
    now: Instant,
    options: TunnelOptions,
) -> OutboundSaId {
    let (enc, integ) = keys(s.suite, u8::try_from(spi & 0xff).unwrap());
    let (a_addr, b_addr) = outer_addrs(s.outer_v6);
    let (a_net, b_net) = inner_nets(s.inner_v6);
    let h_out = a.enclave.esp_sa_install_raw(spi, false, s.esn, s.suite, &enc, &integ).unwrap();
    let h_in = b.enclave.esp_sa_install_raw(spi, true, s.esn, s.suite, &enc, &integ).unwrap();
    let encap =
        |l, r| if s.udp { Encapsulation::Udp { local_port: l, remote_port: r } } else { Encapsulation::Esp };
    let mut out = SaConfig::new(spi, h_out, s.suite, a_addr, b_addr);
    out.esn = s.esn;
    out.encapsulation = encap(4500, 4501);
    out.local_selectors = vec![TrafficSelector::addresses(a_net)];
    out.remote_selectors = vec![TrafficSelector::addresses(b_net)];
    out.lifetime = options.lifetime;
    let mut inb = SaConfig::new(spi, h_in, s.suite, b_addr, a_addr);
    inb.esn = s.esn;
    inb.encapsulation = encap(4501, 4500);
    let (remote, local) = options
        .inbound_selectors
        .unwrap_or((TrafficSelector::addresses(a_net), TrafficSelector::addresses(b_net)));
    inb.local_selectors = vec![local];
    inb.remote_selectors = vec![remote];
    inb.replay_window = options.window;
    inb.lifetime = options.lifetime;
    let id = a.sad.add_outbound(out, now).unwrap();
    b.sad.add_inbound(inb, now).unwrap();
    a.spd.insert(Policy {
        priority: 10,
        selector: PolicySelector::between(a_net, b_net),
        action: PolicyAction::Protect(id),
    });
    id
}

/// A UDP packet `src:1234 -> dst:5678` with `payload_len` bytes of payload.
pub fn udp_packet(src: IpAddr, dst: IpAddr, payload_len: usize, ttl: u8, ecn: Ecn, df: bool) -> Vec<u8> {
    let udp = UdpRepr { src_port: 1234, dst_port: 5678 };
    let udp_len = udp.buffer_len(payload_len);
    let fill = |p: &mut [u8]| {
        for (i, b) in p.iter_mut().enumerate() {
            *b = u8::try_from(i % 251).unwrap();
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                protocol: IpProtocol::UDP,
                payload_len: udp_len,
                ttl,
                dscp: 10,
                ecn,
                ident: 0x1234,
                dont_frag: df,
                more_frags: false,
                frag_offset: 0,
            };
            let mut buf = vec![0u8; ip.buffer_len()];
            ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])).unwrap();
            udp.emit(
                &mut UdpPacket::new_unchecked(&mut buf[20..]),
                &wire::IpPair::V4 { src: s, dst: d },
                payload_len,
                fill,
            )
            .unwrap();
            buf
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                next_header: IpProtocol::UDP,
                payload_len: udp_len,
                hop_limit: ttl,
                dscp: 10,
                ecn,
                flow_label: 0x12345,
            };
            let mut buf = vec![0u8; ip.buffer_len()];
            ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..])).unwrap();
            udp.emit(
                &mut UdpPacket::new_unchecked(&mut buf[40..]),
                &wire::IpPair::V6 { src: s, dst: d },
                payload_len,
                fill,
            )
            .unwrap();
            buf
        }
        _ => panic!("mixed families"),
    }
}

/// `packet` as a router `hops` hops later: TTL / hop limit lowered, IPv4 checksum fixed.
pub fn after_hops(packet: &[u8], hops: u8) -> Vec<u8> {
    let mut p = packet.to_vec();
    if p[0] >> 4 == 4 {
        let mut v = Ipv4Packet::new_unchecked(&mut p[..]);
        v.set_ttl(v.ttl() - hops);
        v.fill_checksum();
    } else {
        p[7] -= hops;
    }
    p
}

/// Storage for a batch: area and metadata.
pub struct Area {
    pub bytes: Vec<u8>,
    pub packets: Vec<Packet>,
}

impl Area {
    pub fn new(slots: usize) -> Self {
        Self { bytes: vec![0u8; slots * SLOT], packets: vec![Packet::EMPTY; slots] }
    }

    pub fn batch(&mut self) -> Batch<'_> {
        Batch::new(&mut self.bytes, SLOT, &mut self.packets).unwrap()
    }
}

/// Encapsulates `inners` on A; returns the outer packets with their transmit info (and
/// every packet's action, in order).
pub fn encapsulate(
    a: &mut Gateway,
    inners: &[Vec<u8>],
) -> (Vec<(Transmit, Vec<u8>)>, Vec<Action>, BatchReport) {
    let mut area = Area::new(inners.len() + 8);
    let mut batch = area.batch();
    for p in inners {
        batch.push(Frame::Ip, OFFSET, p).unwrap();
    }
    let report = a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
    let mut out = Vec::new();
    let mut actions = Vec::new();
    for (p, bytes) in batch.iter() {
        actions.push(p.action);
        if let Action::Transmit(t) = p.action {
            // ESP starts where the transmit info says: the SPI is never zero.
            assert!(bytes[t.esp_offset - p.offset..][..4] != [0; 4]);
            out.push((t, bytes.to_vec()));
        }
    }
    (out, actions, report)
}

/// Decapsulates whole outer IP packets on B; returns every packet's action and bytes.
pub fn decapsulate(b: &mut Gateway, outers: &[Vec<u8>]) -> (Vec<(Action, Vec<u8>)>, BatchReport) {
    let frames: Vec<_> = outers.iter().map(|o| (Frame::Ip, o.clone())).collect();
    decapsulate_frames(b, &frames)
}

pub fn decapsulate_frames(
    b: &mut Gateway,
    frames: &[(Frame, Vec<u8>)],
) -> (Vec<(Action, Vec<u8>)>, BatchReport) {
    let mut area = Area::new(frames.len().max(1));
    let mut batch = area.batch();
    for (f, p) in frames {
        batch.push(*f, OFFSET, p).unwrap();
    }
    let report = b.worker.decapsulate(&mut b.enclave, &b.sad, &mut batch);
    (batch.iter().map(|(p, bytes)| (p.action, bytes.to_vec())).collect(), report)
}
