//! Traffic selectors (RFC 4301 §4.4.1.1, RFC 7296 §3.13.1): an address range of one family,
//! an IP protocol (0 = any) and a port range. One type for what IKE negotiates, what the
//! configuration names (strongSwan's notation) and what the ESP policy matches packets
//! against; [`TrafficSelector::to_wire`] and [`TrafficSelector::from_wire`] convert to and
//! from the TS payload's codec ([`crate::ike::TrafficSelector`]).
//!
//! Ports of protocols that have none, and of non-first fragments, are OPAQUE: they match
//! only a selector whose port range is the whole 0..=65535 (RFC 4301 §4.4.1.1). For ICMP
//! and ICMPv6 the "port" is the message type in the high byte and the code in the low byte
//! (RFC 7296 §3.13.1).

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

use crate::ike::{AddressRange as WireRange, TrafficSelector as WireSelector};
use crate::IpProtocol;

/// A selector, address range or port range that could not be parsed or is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorError {
    /// Which part.
    pub what: &'static str,
    /// Why.
    pub why: &'static str,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

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
    pub fn prefix(addr: IpAddr, len: u8) -> Result<Self, SelectorError> {
        let bad = SelectorError { what: "prefix length", why: "longer than the address" };
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
    pub fn range(start: IpAddr, end: IpAddr) -> Result<Self, SelectorError> {
        let r = match (start, end) {
            (IpAddr::V4(start), IpAddr::V4(end)) => Self::V4 { start, end },
            (IpAddr::V6(start), IpAddr::V6(end)) => Self::V6 { start, end },
            _ => return Err(SelectorError { what: "address range", why: "ends of different families" }),
        };
        if !r.is_ordered() {
            return Err(SelectorError { what: "address range", why: "start is above end" });
        }
        Ok(r)
    }

    /// The first address.
    pub fn start(&self) -> IpAddr {
        match *self {
            Self::V4 { start, .. } => IpAddr::V4(start),
            Self::V6 { start, .. } => IpAddr::V6(start),
        }
    }

    /// The last address.
    pub fn end(&self) -> IpAddr {
        match *self {
            Self::V4 { end, .. } => IpAddr::V4(end),
            Self::V6 { end, .. } => IpAddr::V6(end),
        }
    }

    /// The addresses in both, if any (none across families).
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        let r = match (*self, *other) {
            (Self::V4 { start: a, end: b }, Self::V4 { start: c, end: d }) => {
                Self::V4 { start: a.max(c), end: b.min(d) }
            }
            (Self::V6 { start: a, end: b }, Self::V6 { start: c, end: d }) => {
                Self::V6 { start: a.max(c), end: b.min(d) }
            }
            _ => return None,
        };
        r.is_ordered().then_some(r)
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
    type Err = SelectorError;

    /// `198.18.0.0/24`, `2001:db8::/32`, `198.18.0.1`, or `198.18.0.1-198.18.0.9`.
    fn from_str(s: &str) -> Result<Self, SelectorError> {
        let addr = |t: &str| {
            IpAddr::from_str(t.trim())
                .map_err(|_| SelectorError { what: "address", why: "not an IP address" })
        };
        if let Some((a, len)) = s.split_once('/') {
            let len = len
                .trim()
                .parse::<u8>()
                .map_err(|_| SelectorError { what: "prefix length", why: "not a number" })?;
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
    type Err = SelectorError;

    /// `any` (or `%any`, or nothing), `443`, or `1024-65535`.
    fn from_str(s: &str) -> Result<Self, SelectorError> {
        let port = |t: &str| {
            t.trim().parse::<u16>().map_err(|_| SelectorError { what: "port", why: "not 0..=65535" })
        };
        let r = match s.trim() {
            "any" | "%any" | "" => Self::ANY,
            t => match t.split_once('-') {
                Some((a, b)) => Self { start: port(a)?, end: port(b)? },
                None => {
                    let p = port(t)?;
                    Self { start: p, end: p }
                }
            },
        };
        if r.start > r.end {
            return Err(SelectorError { what: "port range", why: "start is above end" });
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

    /// The intersection of two selectors, if not empty (protocol 0 matches any).
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        let protocol = match (self.protocol, other.protocol) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let ports = PortRange {
            start: self.ports.start.max(other.ports.start),
            end: self.ports.end.min(other.ports.end),
        };
        let addresses = self.addresses.intersect(&other.addresses)?;
        (ports.start <= ports.end).then_some(Self { addresses, protocol, ports })
    }

    /// Whether every packet this selector matches is matched by `other`.
    pub fn is_within(&self, other: &Self) -> bool {
        self.intersect(other).as_ref() == Some(self)
    }

    /// The TS payload's form of this selector.
    pub fn to_wire(&self) -> WireSelector {
        let (ip_protocol, start_port, end_port) = (self.protocol, self.ports.start, self.ports.end);
        match self.addresses {
            AddressRange::V4 { start, end } => {
                WireSelector::Ipv4(WireRange { ip_protocol, start_port, end_port, start, end })
            }
            AddressRange::V6 { start, end } => {
                WireSelector::Ipv6(WireRange { ip_protocol, start_port, end_port, start, end })
            }
        }
    }

    /// A received selector of an address-range type, if it is not empty (OPAQUE ports,
    /// start 65535 and end 0, are empty).
    pub fn from_wire(ts: &WireSelector) -> Option<Self> {
        let (addresses, r_protocol, r_ports) = match ts {
            WireSelector::Ipv4(r) => {
                (AddressRange::V4 { start: r.start, end: r.end }, r.ip_protocol, (r.start_port, r.end_port))
            }
            WireSelector::Ipv6(r) => {
                (AddressRange::V6 { start: r.start, end: r.end }, r.ip_protocol, (r.start_port, r.end_port))
            }
            WireSelector::Unknown { .. } => return None,
        };
        let ports = PortRange { start: r_ports.0, end: r_ports.1 };
        (addresses.is_ordered() && ports.start <= ports.end).then_some(Self {
            addresses,
            protocol: r_protocol,
            ports,
        })
    }
}

/// strongSwan's notation back: the addresses as a range (or one address), then
/// `[protocol]` or `[protocol/first-last]` where they are not "any".
impl fmt::Display for TrafficSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, end) = (self.addresses.start(), self.addresses.end());
        if start == end {
            write!(f, "{start}")?;
        } else {
            write!(f, "{start}-{end}")?;
        }
        if self.protocol != 0 {
            write!(f, "[{}", self.protocol)?;
            if !self.ports.is_any() {
                write!(f, "/{}-{}", self.ports.start, self.ports.end)?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// An IP protocol by name (`any` or `%any`, `icmp`, `tcp`, `udp`, `ipv6-icmp`/`icmpv6`,
/// `sctp`, in any case) or number; 0 (and nothing) is any.
pub fn parse_protocol(s: &str) -> Result<u8, SelectorError> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "any" | "%any" | "" => 0,
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        n => n.parse::<u8>().map_err(|_| SelectorError { what: "protocol", why: "not a name or 0..=255" })?,
    })
}

impl FromStr for TrafficSelector {
    type Err = SelectorError;

    /// strongSwan's notation: `198.18.0.0/24`, `198.18.0.0/24[udp]`, `2001:db8::/32[tcp/443]`,
    /// `198.18.0.1-198.18.0.9[17/1024-65535]`.
    fn from_str(s: &str) -> Result<Self, SelectorError> {
        let (addr, rest) = match s.split_once('[') {
            Some((a, r)) => {
                (a, Some(r.strip_suffix(']').ok_or(SelectorError { what: "selector", why: "missing ']'" })?))
            }
            None => (s, None),
        };
        let mut ts = Self::addresses(addr.parse()?);
        if let Some(rest) = rest {
            (ts.protocol, ts.ports) = parse_protocol_ports(rest)?;
        }
        Ok(ts)
    }
}

/// What strongSwan writes between the brackets of a selector: `proto`, `proto/port`,
/// `proto/first-last`, `proto/%any`. Ports need a protocol.
pub fn parse_protocol_ports(text: &str) -> Result<(u8, PortRange), SelectorError> {
    let (proto, ports) = match text.split_once('/') {
        Some((p, ports)) => (p, Some(ports)),
        None => (text, None),
    };
    let protocol = parse_protocol(proto)?;
    let ports = match ports {
        Some(p) => p.parse()?,
        None => PortRange::ANY,
    };
    if protocol == 0 && !ports.is_any() {
        return Err(SelectorError { what: "ports", why: "ports need a protocol" });
    }
    Ok((protocol, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn any_is_written_three_ways_and_ports_need_a_protocol() {
        for any in
            ["198.18.0.0/24[%any]", "198.18.0.0/24[any]", "198.18.0.0/24[%any/%any]", "198.18.0.0/24[UDP]"]
        {
            assert!(any.parse::<TrafficSelector>().unwrap().ports.is_any(), "{any}");
        }
        let err = "198.18.0.0/24[%any/80]".parse::<TrafficSelector>().unwrap_err();
        assert_eq!(err.why, "ports need a protocol");
    }

    #[test]
    fn intersections_keep_one_family_and_the_narrower_protocol() {
        let ts = |s: &str| s.parse::<TrafficSelector>().unwrap();
        let both = ts("198.18.0.0/16").intersect(&ts("198.18.1.128/25[tcp/80]"));
        assert_eq!(both, Some(ts("198.18.1.128/25[tcp/80]")));
        assert_eq!(ts("198.18.0.0/16[udp]").intersect(&ts("198.18.0.0/16[tcp]")), None);
        assert_eq!(ts("198.18.0.0/16").intersect(&ts("2001:db8::/32")), None);
        assert_eq!(ts("198.18.0.0/24[tcp/1-10]").intersect(&ts("198.18.0.0/24[tcp/20-30]")), None);
        assert!(ts("198.18.1.0/24").is_within(&ts("0.0.0.0/0")));
        assert_eq!(ts("198.18.0.5-198.18.0.9[udp/53]").to_string(), "198.18.0.5-198.18.0.9[17/53-53]");
    }

    #[test]
    fn opaque_or_reversed_ranges_from_the_wire_are_empty() {
        let range = |start_port, end_port, start: [u8; 4], end: [u8; 4]| {
            WireSelector::Ipv4(WireRange {
                ip_protocol: 6,
                start_port,
                end_port,
                start: start.into(),
                end: end.into(),
            })
        };
        assert!(TrafficSelector::from_wire(&range(65535, 0, [198, 18, 0, 0], [198, 18, 0, 9])).is_none());
        assert!(TrafficSelector::from_wire(&range(0, 65535, [198, 18, 0, 9], [198, 18, 0, 0])).is_none());
        let ts = TrafficSelector::from_wire(&range(80, 80, [198, 18, 0, 0], [198, 18, 0, 9])).unwrap();
        assert_eq!(TrafficSelector::from_wire(&ts.to_wire()), Some(ts));
    }
}
