//! The 5-tuple of an inner packet, matched against traffic selectors
//! ([`wire::selector`], the one definition IKE negotiates and the policy holds).
//!
//! Ports of protocols that have none, and of non-first fragments, are OPAQUE: they match
//! only a selector whose port range is the whole 0..=65535 (RFC 4301 §4.4.1.1). For ICMP
//! and ICMPv6 the "port" is the message type in the high byte and the code in the low byte,
//! on both sides (RFC 7296 §3.13.1).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use wire::selector::{parse_protocol, AddressRange, PortRange, TrafficSelector};
use wire::{IpProtocol, Ipv4Packet, Ipv6Packet};

use crate::drop::DropReason;

/// The selector fields of an inner packet (RFC 4301 §4.4.1.1), oriented as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub protocol: IpProtocol,
    /// Source port, ICMP type/code, or `None` (OPAQUE).
    pub src_port: Option<u16>,
    /// Destination port, ICMP type/code, or `None` (OPAQUE).
    pub dst_port: Option<u16>,
}

/// A packet's selector fields packed into aligned words: what the per-packet path keeps
/// and compares. Built with word stores and compared with word loads, so comparing the key
/// of a packet just parsed never waits on a load that straddles several narrow stores (a
/// `FiveTuple`, with its 17-byte addresses and `Option` ports, cost a store-forwarding
/// stall per packet in the route cache and in the port reader's packed return value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowKey {
    /// Source address: IPv4 in the low 32 bits.
    src: u128,
    /// Destination address: IPv4 in the low 32 bits.
    dst: u128,
    /// Protocol (bits 0-7), IPv6 (bit 8), ports present (bit 9), source port or ICMP
    /// type/code (bits 16-31), destination port or ICMP type/code (bits 32-47).
    rest: u64,
}

const KEY_V6: u64 = 1 << 8;
const KEY_PORTS: u64 = 1 << 9;

/// Protocols whose first four bytes are source and destination port.
fn has_ports(p: IpProtocol) -> bool {
    // TCP, UDP, DCCP (33), SCTP (132), UDP-Lite (136).
    matches!(p.0, 6 | 17 | 33 | 132 | 136)
}

/// The port bits of a key (ports present, source, destination) from an upper-layer
/// header, or none (OPAQUE) when it is not there.
#[inline(always)]
fn port_bits(protocol: IpProtocol, l4: Option<&[u8]>) -> core::result::Result<u64, DropReason> {
    let Some(l4) = l4 else { return Ok(0) };
    let pair = |s: u16, d: u16| KEY_PORTS | (u64::from(s) << 16) | (u64::from(d) << 32);
    if has_ports(protocol) {
        match l4 {
            [a, b, c, d, ..] => Ok(pair(u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
            _ => Err(DropReason::Malformed),
        }
    } else if protocol == IpProtocol::ICMP || protocol == IpProtocol::ICMPV6 {
        match l4 {
            [t, c, ..] => {
                let tc = u16::from_be_bytes([*t, *c]);
                Ok(pair(tc, tc))
            }
            _ => Err(DropReason::Malformed),
        }
    } else {
        Ok(0)
    }
}

impl FlowKey {
    /// Reads the selector fields of an IPv4 or IPv6 packet whose header lengths have been
    /// checked ([`Ipv4Packet::check_len`] / [`Ipv6Packet::check_len`]).
    // Inlined into `Inner::parse`, once per packet, so that the key stays in registers.
    #[inline(always)]
    pub(crate) fn parse(packet: &[u8]) -> core::result::Result<Self, DropReason> {
        match packet.first().map(|b| b >> 4) {
            Some(4) => {
                let p = Ipv4Packet::new_checked(packet).map_err(|_| DropReason::Malformed)?;
                let protocol = p.protocol();
                // Only the first fragment carries the upper-layer header (RFC 4301 §7).
                let l4 = (p.frag_offset() == 0).then(|| p.payload());
                let ports = port_bits(protocol, l4)?;
                Ok(Self {
                    src: u128::from(p.src_addr().to_bits()),
                    dst: u128::from(p.dst_addr().to_bits()),
                    rest: u64::from(protocol.0) | ports,
                })
            }
            Some(6) => {
                let p = Ipv6Packet::new_checked(packet).map_err(|_| DropReason::Malformed)?;
                let (protocol, at) = p.upper_layer().map_err(|_| DropReason::Malformed)?;
                // A non-first fragment stops the walk at its Fragment header: OPAQUE ports.
                let l4 = if protocol == IpProtocol::IPV6_FRAGMENT { None } else { packet.get(at..) };
                let ports = port_bits(protocol, l4)?;
                Ok(Self {
                    src: p.src_addr().to_bits(),
                    dst: p.dst_addr().to_bits(),
                    rest: u64::from(protocol.0) | KEY_V6 | ports,
                })
            }
            _ => Err(DropReason::Malformed),
        }
    }

    fn addr(&self, bits: u128) -> IpAddr {
        if self.rest & KEY_V6 != 0 {
            IpAddr::V6(Ipv6Addr::from_bits(bits))
        } else {
            // The parser put an IPv4 address there: it fits.
            IpAddr::V4(Ipv4Addr::from_bits(u32::try_from(bits).unwrap_or(0)))
        }
    }

    /// Upper-layer protocol (after IPv6 extension headers).
    pub(crate) fn protocol(&self) -> IpProtocol {
        IpProtocol(self.rest.to_le_bytes()[0])
    }

    /// Source address.
    pub(crate) fn src(&self) -> IpAddr {
        self.addr(self.src)
    }

    /// Destination address.
    pub(crate) fn dst(&self) -> IpAddr {
        self.addr(self.dst)
    }

    /// The 16-bit port field at bit `shift` of `rest`, or `None` (OPAQUE).
    fn port(&self, shift: u32) -> Option<u16> {
        (self.rest & KEY_PORTS != 0).then(|| u16::try_from((self.rest >> shift) & 0xffff).unwrap_or(0))
    }

    /// Source port, ICMP type/code, or `None` (OPAQUE).
    pub(crate) fn src_port(&self) -> Option<u16> {
        self.port(16)
    }

    /// The fields unpacked, for the SPD and the selectors.
    pub(crate) fn tuple(&self) -> FiveTuple {
        FiveTuple {
            src: self.src(),
            dst: self.addr(self.dst),
            protocol: self.protocol(),
            src_port: self.port(16),
            dst_port: self.port(32),
        }
    }
}

impl FiveTuple {
    /// Reads the selector fields of an IPv4 or IPv6 packet whose header lengths have been
    /// checked ([`Ipv4Packet::check_len`] / [`Ipv6Packet::check_len`]).
    pub fn parse(packet: &[u8]) -> core::result::Result<Self, DropReason> {
        FlowKey::parse(packet).map(|k| k.tuple())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// UDP 198.18.0.1:4500 -> 198.19.0.1:4500 with one payload byte.
    static UDP_V4: [u8; 29] =
        hex!("4500 001d 1c46 4000 4011 9262 c612 0001 c613 0001 1194 1194 0009 0000 ff");

    #[test]
    fn five_tuple_of_udp_v4() {
        let t = FiveTuple::parse(&UDP_V4).unwrap();
        assert_eq!(t.src, IpAddr::from([198, 18, 0, 1]));
        assert_eq!(t.dst, IpAddr::from([198, 19, 0, 1]));
        assert_eq!((t.protocol, t.src_port, t.dst_port), (IpProtocol::UDP, Some(4500), Some(4500)));
    }

    /// The packed key says exactly what the tuple says: equal keys for equal tuples, and
    /// different ones where only the family, or ports against OPAQUE, tell them apart.
    #[test]
    fn flow_keys_compare_as_their_tuples() -> core::result::Result<(), DropReason> {
        let key = |p: &[u8]| FlowKey::parse(p);
        assert_eq!(key(&UDP_V4)?.tuple(), FiveTuple::parse(&UDP_V4)?);
        // A later fragment of the same flow has OPAQUE ports: another key.
        let mut frag = UDP_V4;
        frag[6..8].copy_from_slice(&hex!("0001"));
        assert_ne!(key(&UDP_V4)?, key(&frag)?);
        // ICMP echo type 0 code 0 (ports present, both 0) against a later ICMP fragment.
        let mut echo = UDP_V4;
        echo[9] = 1;
        echo[20..24].copy_from_slice(&[0, 0, 0, 0]);
        let mut echo_frag = echo;
        echo_frag[6..8].copy_from_slice(&hex!("0001"));
        assert_eq!(key(&echo)?.tuple().src_port, Some(0));
        assert_eq!(key(&echo_frag)?.tuple().src_port, None);
        assert_ne!(key(&echo)?, key(&echo_frag)?);
        // ::c612:1 and 198.18.0.1 share their low 32 bits; the family tells them apart.
        let v6 = hex!(
            "6000 0000 0008 1140"
            "0000 0000 0000 0000 0000 0000 c612 0001"
            "0000 0000 0000 0000 0000 0000 c613 0001"
            "1194 1194 0008 0000"
        );
        assert_ne!(key(&v6)?, key(&UDP_V4)?);
        assert_eq!(key(&v6)?.tuple().src, IpAddr::from(Ipv6Addr::from_bits(0xc612_0001)));
        let mut other_port = v6;
        other_port[41] = 0x95;
        assert_ne!(key(&v6)?, key(&other_port)?);
        Ok(())
    }

    proptest::proptest! {
        /// For any IPv4 packet (any protocol, any first four upper-layer bytes), the key
        /// unpacks to the header's fields, and two keys are equal exactly when their tuples
        /// are.
        #[test]
        fn flow_key_round_trips(
            src in proptest::prelude::any::<u32>(),
            dst in proptest::prelude::any::<u32>(),
            proto in proptest::prelude::any::<u8>(),
            ports in proptest::prelude::any::<[u8; 4]>(),
            other in proptest::prelude::any::<[u8; 4]>(),
        ) {
            let packet = |l4: [u8; 4]| {
                let mut p = UDP_V4;
                p[9] = proto;
                p[12..16].copy_from_slice(&src.to_be_bytes());
                p[16..20].copy_from_slice(&dst.to_be_bytes());
                p[20..24].copy_from_slice(&l4);
                p
            };
            let parse = |p: &[u8]| {
                FlowKey::parse(p).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{e:?}")))
            };
            let (ka, kb) = (parse(&packet(ports))?, parse(&packet(other))?);
            let t = ka.tuple();
            proptest::prop_assert_eq!(t.src, IpAddr::from(Ipv4Addr::from_bits(src)));
            proptest::prop_assert_eq!(t.dst, IpAddr::from(Ipv4Addr::from_bits(dst)));
            proptest::prop_assert_eq!(t.protocol, IpProtocol(proto));
            proptest::prop_assert_eq!(ka == kb, t == kb.tuple());
        }
    }

    #[test]
    fn five_tuple_of_a_non_first_fragment_is_opaque() {
        let mut p = UDP_V4;
        p[6..8].copy_from_slice(&hex!("0001")); // offset 8, DF clear
        let t = FiveTuple::parse(&p).unwrap();
        assert_eq!((t.src_port, t.dst_port), (None, None));
        let ts = TrafficSelector {
            addresses: AddressRange::ANY_V4,
            protocol: 17,
            ports: PortRange { start: 4500, end: 4500 },
        };
        assert!(!ts.matches(t.src, t.protocol, t.src_port));
        assert!(TrafficSelector::addresses(AddressRange::ANY_V4).matches(t.src, t.protocol, t.src_port));
    }

    #[test]
    fn five_tuple_of_icmpv6_after_an_extension_header() {
        // Hop-by-Hop (8 bytes) then ICMPv6 echo request (type 128, code 0).
        let p = hex!(
            "6000 0000 0010 0040"
            "2001 0db8 0000 0000 0000 0000 0000 0001"
            "2001 0db8 0000 0000 0000 0000 0000 0002"
            "3a00 0000 0000 0000"
            "8000 0000 0001 0001"
        );
        let t = FiveTuple::parse(&p).unwrap();
        assert_eq!((t.protocol, t.src_port, t.dst_port), (IpProtocol::ICMPV6, Some(0x8000), Some(0x8000)));
    }

    #[test]
    fn truncated_transport_header_is_malformed() {
        let mut p = UDP_V4;
        p[3] = 22; // total length 22: two bytes of UDP header
        p[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(FiveTuple::parse(&p[..22]), Err(DropReason::Malformed));
        assert_eq!(FiveTuple::parse(&[0x45]), Err(DropReason::Malformed));
        assert_eq!(FiveTuple::parse(&[]), Err(DropReason::Malformed));
    }
}
