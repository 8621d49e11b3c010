//! Traffic selectors (RFC 4301 §4.4.1.1, RFC 7296 §3.13.1) and the 5-tuple of an inner packet.
//!
//! A selector is an address range, an IP protocol (0 = any) and a port range, as IKEv2
//! negotiates them. Ports of protocols that have none, and of non-first fragments, are
//! OPAQUE: they match only a selector whose port range is the whole 0..=65535 (RFC 4301
//! §4.4.1.1). For ICMP and ICMPv6 the "port" is the message type in the high byte and the
//! code in the low byte, on both sides (RFC 7296 §3.13.1).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

use wire::{IpProtocol, Ipv4Packet, Ipv6Packet};

use crate::drop::DropReason;
use crate::error::{Error, Result};

/// A contiguous, inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressRange {
    /// IPv4 addresses `start..=end`.
    V4 {
        /// First address.
        start: Ipv4Addr,
        /// Last address.
        end: Ipv4Addr,
    },
    /// IPv6 addresses `start..=end`.
    V6 {
        /// First address.
        start: Ipv6Addr,
        /// Last address.
        end: Ipv6Addr,
    },
}

impl AddressRange {
    /// Every IPv4 address.
    pub const ANY_V4: Self = Self::V4 { start: Ipv4Addr::UNSPECIFIED, end: Ipv4Addr::BROADCAST };
    /// Every IPv6 address.
    pub const ANY_V6: Self = Self::V6 {
        start: Ipv6Addr::UNSPECIFIED,
        end: Ipv6Addr::new(0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff),
    };

    /// Exactly one address.
    pub fn host(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => Self::V4 { start: a, end: a },
            IpAddr::V6(a) => Self::V6 { start: a, end: a },
        }
    }

    /// The addresses of `addr/len` (host bits of `addr` are ignored).
    pub fn prefix(addr: IpAddr, len: u8) -> Result<Self> {
        let bad = Error::InvalidSelector { what: "prefix length", why: "longer than the address" };
        match addr {
            IpAddr::V4(a) => {
                let host_bits = 32u32.checked_sub(u32::from(len)).ok_or(bad)?;
                let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
                let start = u32::from(a) & mask;
                Ok(Self::V4 { start: start.into(), end: (start | !mask).into() })
            }
            IpAddr::V6(a) => {
                let host_bits = 128u32.checked_sub(u32::from(len)).ok_or(bad)?;
                let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
                let start = u128::from(a) & mask;
                Ok(Self::V6 { start: start.into(), end: (start | !mask).into() })
            }
        }
    }

    /// A range from its ends, which must be of one family and in order.
    pub fn range(start: IpAddr, end: IpAddr) -> Result<Self> {
        let r = match (start, end) {
            (IpAddr::V4(start), IpAddr::V4(end)) => Self::V4 { start, end },
            (IpAddr::V6(start), IpAddr::V6(end)) => Self::V6 { start, end },
            _ => {
                return Err(Error::InvalidSelector {
                    what: "address range",
                    why: "ends of different families",
                })
            }
        };
        if !r.is_ordered() {
            return Err(Error::InvalidSelector { what: "address range", why: "start is above end" });
        }
        Ok(r)
    }

    fn is_ordered(&self) -> bool {
        match self {
            Self::V4 { start, end } => start <= end,
            Self::V6 { start, end } => start <= end,
        }
    }

    /// Whether the range holds IPv6 addresses.
    pub fn is_ipv6(&self) -> bool {
        matches!(self, Self::V6 { .. })
    }

    /// Whether `addr` is in the range (an address of the other family never is).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self, addr) {
            (Self::V4 { start, end }, IpAddr::V4(a)) => *start <= a && a <= *end,
            (Self::V6 { start, end }, IpAddr::V6(a)) => *start <= a && a <= *end,
            _ => false,
        }
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4 { start, end } if start == end => write!(f, "{start}"),
            Self::V6 { start, end } if start == end => write!(f, "{start}"),
            Self::V4 { start, end } => write!(f, "{start}-{end}"),
            Self::V6 { start, end } => write!(f, "{start}-{end}"),
        }
    }
}

impl FromStr for AddressRange {
    type Err = Error;

    /// `198.18.0.0/24`, `2001:db8::/32`, `198.18.0.1`, or `198.18.0.1-198.18.0.9`.
    fn from_str(s: &str) -> Result<Self> {
        let addr = |t: &str| {
            IpAddr::from_str(t.trim())
                .map_err(|_| Error::InvalidSelector { what: "address", why: "not an IP address" })
        };
        if let Some((a, len)) = s.split_once('/') {
            let len = len
                .trim()
                .parse::<u8>()
                .map_err(|_| Error::InvalidSelector { what: "prefix length", why: "not a number" })?;
            Self::prefix(addr(a)?, len)
        } else if let Some((a, b)) = s.split_once('-') {
            Self::range(addr(a)?, addr(b)?)
        } else {
            Ok(Self::host(addr(s)?))
        }
    }
}

/// An inclusive port range; `0..=65535` also matches OPAQUE ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub start: u16,
    /// Last port.
    pub end: u16,
}

impl PortRange {
    /// Every port, and OPAQUE.
    pub const ANY: Self = Self { start: 0, end: u16::MAX };

    /// Whether this is the whole range.
    pub fn is_any(&self) -> bool {
        *self == Self::ANY
    }

    /// Whether a packet's port (`None`: OPAQUE) matches.
    pub fn matches(&self, port: Option<u16>) -> bool {
        match port {
            Some(p) => self.start <= p && p <= self.end,
            None => self.is_any(),
        }
    }
}

impl FromStr for PortRange {
    type Err = Error;

    /// `any`, `443`, or `1024-65535`.
    fn from_str(s: &str) -> Result<Self> {
        let port = |t: &str| {
            t.trim().parse::<u16>().map_err(|_| Error::InvalidSelector { what: "port", why: "not 0..=65535" })
        };
        let r = match s.trim() {
            "any" => Self::ANY,
            t => match t.split_once('-') {
                Some((a, b)) => Self { start: port(a)?, end: port(b)? },
                None => {
                    let p = port(t)?;
                    Self { start: p, end: p }
                }
            },
        };
        if r.start > r.end {
            return Err(Error::InvalidSelector { what: "port range", why: "start is above end" });
        }
        Ok(r)
    }
}

/// One traffic selector: addresses, protocol (0 = any) and ports (RFC 7296 §3.13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    /// The addresses.
    pub addresses: AddressRange,
    /// IP protocol number; 0 matches any.
    pub protocol: u8,
    /// The ports (or ICMP type/code).
    pub ports: PortRange,
}

impl TrafficSelector {
    /// All traffic of the addresses in `addresses`.
    pub const fn addresses(addresses: AddressRange) -> Self {
        Self { addresses, protocol: 0, ports: PortRange::ANY }
    }

    /// Whether one end of a packet (address, protocol, port) matches.
    pub fn matches(&self, addr: IpAddr, protocol: IpProtocol, port: Option<u16>) -> bool {
        self.addresses.contains(addr)
            && (self.protocol == 0 || self.protocol == protocol.0)
            && self.ports.matches(port)
    }
}

/// An IP protocol by name (`any`, `icmp`, `tcp`, `udp`, `ipv6-icmp`/`icmpv6`, `sctp`) or
/// number; 0 is any.
pub fn parse_protocol(s: &str) -> Result<u8> {
    Ok(match s.trim() {
        "any" => 0,
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        n => n
            .parse::<u8>()
            .map_err(|_| Error::InvalidSelector { what: "protocol", why: "not a name or 0..=255" })?,
    })
}

impl FromStr for TrafficSelector {
    type Err = Error;

    /// strongSwan's notation: `198.18.0.0/24`, `198.18.0.0/24[udp]`, `2001:db8::/32[tcp/443]`,
    /// `198.18.0.1-198.18.0.9[17/1024-65535]`.
    fn from_str(s: &str) -> Result<Self> {
        let (addr, rest) = match s.split_once('[') {
            Some((a, r)) => (
                a,
                Some(
                    r.strip_suffix(']')
                        .ok_or(Error::InvalidSelector { what: "selector", why: "missing ']'" })?,
                ),
            ),
            None => (s, None),
        };
        let mut ts = Self::addresses(addr.parse()?);
        if let Some(rest) = rest {
            let (proto, ports) = match rest.split_once('/') {
                Some((p, ports)) => (p, Some(ports)),
                None => (rest, None),
            };
            ts.protocol = parse_protocol(proto)?;
            if let Some(ports) = ports {
                ts.ports = ports.parse()?;
            }
        }
        Ok(ts)
    }
}

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
    fn parses_prefixes_ranges_and_hosts() {
        assert_eq!(
            "198.18.0.0/24".parse::<AddressRange>().unwrap(),
            AddressRange::V4 { start: Ipv4Addr::new(198, 18, 0, 0), end: Ipv4Addr::new(198, 18, 0, 255) }
        );
        assert_eq!("198.18.0.7/24".parse::<AddressRange>().unwrap().to_string(), "198.18.0.0-198.18.0.255");
        assert_eq!("0.0.0.0/0".parse::<AddressRange>().unwrap(), AddressRange::ANY_V4);
        assert_eq!("::/0".parse::<AddressRange>().unwrap(), AddressRange::ANY_V6);
        assert_eq!("2001:db8::1".parse::<AddressRange>().unwrap().to_string(), "2001:db8::1");
        let r: AddressRange = "2001:db8::/127".parse().unwrap();
        assert!(r.contains("2001:db8::1".parse().unwrap()) && !r.contains("2001:db8::2".parse().unwrap()));
        assert!("198.18.0.0/33".parse::<AddressRange>().is_err());
        assert!("198.18.0.9-198.18.0.1".parse::<AddressRange>().is_err());
        assert!("198.18.0.1-2001:db8::1".parse::<AddressRange>().is_err());
        assert!(!AddressRange::ANY_V4.contains("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn parses_port_ranges() {
        assert_eq!("any".parse::<PortRange>().unwrap(), PortRange::ANY);
        assert_eq!("443".parse::<PortRange>().unwrap(), PortRange { start: 443, end: 443 });
        assert_eq!("1024-65535".parse::<PortRange>().unwrap(), PortRange { start: 1024, end: 65535 });
        assert!("2-1".parse::<PortRange>().is_err());
        assert!("70000".parse::<PortRange>().is_err());
        assert!(PortRange::ANY.matches(None));
        assert!(!PortRange { start: 0, end: 100 }.matches(None));
    }

    #[test]
    fn parses_strongswan_style_selectors() {
        let ts: TrafficSelector = "198.18.0.0/24[udp/53]".parse().unwrap();
        assert_eq!((ts.protocol, ts.ports), (17, PortRange { start: 53, end: 53 }));
        let ts: TrafficSelector = "2001:db8::/32[tcp]".parse().unwrap();
        assert_eq!((ts.protocol, ts.ports), (6, PortRange::ANY));
        let ts: TrafficSelector = "198.18.0.1-198.18.0.9[132/1000-2000]".parse().unwrap();
        assert_eq!((ts.protocol, ts.ports.start, ts.ports.end), (132, 1000, 2000));
        assert_eq!("198.18.0.0/24".parse::<TrafficSelector>().unwrap().protocol, 0);
        assert!("198.18.0.0/24[udp".parse::<TrafficSelector>().is_err());
        assert!("198.18.0.0/24[quic]".parse::<TrafficSelector>().is_err());
    }

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
