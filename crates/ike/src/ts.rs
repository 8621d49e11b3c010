//! Traffic selectors: strongSwan's syntax (`198.18.1.0/24`, `2001:db8::/32[tcp/443]`,
//! `dynamic`), the TSi/TSr payloads, and narrowing (RFC 7296 §2.9).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use wire::ike::{AddressRange, TrafficSelector as WireSelector, TrafficSelectors};

/// One traffic selector: an address range of one family, an IP protocol (0 for any) and a
/// port range (RFC 7296 §3.13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    /// IP protocol, 0 for any.
    pub ip_protocol: u8,
    /// First port (for ICMP: type and code).
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
    /// First address.
    pub start: IpAddr,
    /// Last address, same family as `start`.
    pub end: IpAddr,
}

/// A configured selector: fixed, or `dynamic` (the SA's own outer address, resolved when the
/// SA is negotiated), each with optional protocol and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TsSpec {
    /// A fixed selector.
    Fixed(TrafficSelector),
    /// The tunnel endpoint's own address (strongSwan's `dynamic`).
    Dynamic {
        /// IP protocol, 0 for any.
        ip_protocol: u8,
        /// First port.
        start_port: u16,
        /// Last port.
        end_port: u16,
    },
}

impl TsSpec {
    /// The selector for an SA whose outer address on this side is `address`.
    pub fn resolve(&self, address: IpAddr) -> TrafficSelector {
        match *self {
            Self::Fixed(ts) => ts,
            Self::Dynamic { ip_protocol, start_port, end_port } => {
                TrafficSelector { ip_protocol, start_port, end_port, start: address, end: address }
            }
        }
    }

    /// Parses strongSwan's selector syntax: `dynamic`, an address, `addr/prefix`,
    /// `first-last`, `0.0.0.0/0`, each optionally followed by `[proto]`, `[proto/port]` or
    /// `[proto/first-last]` (protocol by name or number, `%any` for any).
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let text = text.trim();
        let (base, extra) = match text.split_once('[') {
            Some((b, rest)) => {
                let inner = rest.strip_suffix(']').ok_or("missing ']' after protocol/port")?;
                (b.trim(), Some(inner))
            }
            None => (text, None),
        };
        let (ip_protocol, start_port, end_port) = match extra {
            Some(e) => parse_proto_ports(e)?,
            None => (0, 0, u16::MAX),
        };
        if base.eq_ignore_ascii_case("dynamic") {
            return Ok(Self::Dynamic { ip_protocol, start_port, end_port });
        }
        let (start, end) = parse_addresses(base)?;
        Ok(Self::Fixed(TrafficSelector { ip_protocol, start_port, end_port, start, end }))
    }
}

/// Parses `proto`, `proto/port`, `proto/first-last`, `proto/%any`.
fn parse_proto_ports(text: &str) -> Result<(u8, u16, u16), &'static str> {
    let (proto, ports) = match text.split_once('/') {
        Some((p, q)) => (p.trim(), Some(q.trim())),
        None => (text.trim(), None),
    };
    let ip_protocol = match proto.to_ascii_lowercase().as_str() {
        "" | "%any" | "any" => 0,
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        other => other.parse::<u8>().map_err(|_| "unknown protocol (use a name like tcp, or a number)")?,
    };
    let (start_port, end_port) = match ports {
        None | Some("%any" | "any" | "") => (0, u16::MAX),
        Some(p) => match p.split_once('-') {
            Some((a, b)) => {
                let a = a.trim().parse::<u16>().map_err(|_| "bad port")?;
                let b = b.trim().parse::<u16>().map_err(|_| "bad port")?;
                if a > b {
                    return Err("port range starts above its end");
                }
                (a, b)
            }
            None => {
                let port = p.parse::<u16>().map_err(|_| "bad port")?;
                (port, port)
            }
        },
    };
    if ip_protocol == 0 && (start_port, end_port) != (0, u16::MAX) {
        return Err("ports need a protocol");
    }
    Ok((ip_protocol, start_port, end_port))
}

/// Parses an address, a prefix or a range.
fn parse_addresses(text: &str) -> Result<(IpAddr, IpAddr), &'static str> {
    if let Some((addr, len)) = text.split_once('/') {
        let addr: IpAddr = addr.trim().parse().map_err(|_| "bad address")?;
        let len: u8 = len.trim().parse().map_err(|_| "bad prefix length")?;
        return match addr {
            IpAddr::V4(a) => {
                if len > 32 {
                    return Err("IPv4 prefix longer than 32");
                }
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                let start = u32::from(a) & mask;
                Ok((IpAddr::V4(Ipv4Addr::from(start)), IpAddr::V4(Ipv4Addr::from(start | !mask))))
            }
            IpAddr::V6(a) => {
                if len > 128 {
                    return Err("IPv6 prefix longer than 128");
                }
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                let start = u128::from(a) & mask;
                Ok((IpAddr::V6(Ipv6Addr::from(start)), IpAddr::V6(Ipv6Addr::from(start | !mask))))
            }
        };
    }
    if let Some((a, b)) = text.split_once('-') {
        let a: IpAddr = a.trim().parse().map_err(|_| "bad address")?;
        let b: IpAddr = b.trim().parse().map_err(|_| "bad address")?;
        if a.is_ipv4() != b.is_ipv4() {
            return Err("range mixes IPv4 and IPv6");
        }
        if a > b {
            return Err("address range starts above its end");
        }
        return Ok((a, b));
    }
    let a: IpAddr = text.parse().map_err(|_| "not an address, prefix, range or 'dynamic'")?;
    Ok((a, a))
}

impl TrafficSelector {
    /// The intersection of two selectors, if not empty (protocol 0 matches any).
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        if self.start.is_ipv4() != other.start.is_ipv4() {
            return None;
        }
        let ip_protocol = match (self.ip_protocol, other.ip_protocol) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        let start_port = self.start_port.max(other.start_port);
        let end_port = self.end_port.min(other.end_port);
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start_port <= end_port && start <= end).then_some(Self {
            ip_protocol,
            start_port,
            end_port,
            start,
            end,
        })
    }

    /// Whether every packet this selector matches is matched by `other`.
    pub fn is_within(&self, other: &Self) -> bool {
        self.intersect(other).as_ref() == Some(self)
    }

    /// The wire selector.
    pub fn to_wire(&self) -> WireSelector {
        match (self.start, self.end) {
            (IpAddr::V4(start), IpAddr::V4(end)) => WireSelector::Ipv4(AddressRange {
                ip_protocol: self.ip_protocol,
                start_port: self.start_port,
                end_port: self.end_port,
                start,
                end,
            }),
            (IpAddr::V6(start), IpAddr::V6(end)) => WireSelector::Ipv6(AddressRange {
                ip_protocol: self.ip_protocol,
                start_port: self.start_port,
                end_port: self.end_port,
                start,
                end,
            }),
            // Mixed families are never built (parse and intersect keep one family); send
            // the start address alone rather than panic.
            (IpAddr::V4(start), _) => WireSelector::Ipv4(AddressRange {
                ip_protocol: self.ip_protocol,
                start_port: self.start_port,
                end_port: self.end_port,
                start,
                end: start,
            }),
            (IpAddr::V6(start), _) => WireSelector::Ipv6(AddressRange {
                ip_protocol: self.ip_protocol,
                start_port: self.start_port,
                end_port: self.end_port,
                start,
                end: start,
            }),
        }
    }

    /// A received selector of an address-range type, if it is not empty.
    pub fn from_wire(ts: &WireSelector) -> Option<Self> {
        let s = match ts {
            WireSelector::Ipv4(r) => Self {
                ip_protocol: r.ip_protocol,
                start_port: r.start_port,
                end_port: r.end_port,
                start: IpAddr::V4(r.start),
                end: IpAddr::V4(r.end),
            },
            WireSelector::Ipv6(r) => Self {
                ip_protocol: r.ip_protocol,
                start_port: r.start_port,
                end_port: r.end_port,
                start: IpAddr::V6(r.start),
                end: IpAddr::V6(r.end),
            },
            WireSelector::Unknown { .. } => return None,
        };
        (s.start <= s.end && s.start_port <= s.end_port).then_some(s)
    }
}

impl core::fmt::Display for TrafficSelector {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)?;
        } else {
            write!(f, "{}-{}", self.start, self.end)?;
        }
        if self.ip_protocol != 0 {
            write!(f, "[{}", self.ip_protocol)?;
            if (self.start_port, self.end_port) != (0, u16::MAX) {
                write!(f, "/{}-{}", self.start_port, self.end_port)?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// A TS payload of these selectors.
pub fn to_payload(list: &[TrafficSelector]) -> TrafficSelectors {
    TrafficSelectors::new(list.iter().map(TrafficSelector::to_wire).collect())
}

/// The address-range selectors of a received TS payload (other types are skipped).
pub fn from_payload(payload: &TrafficSelectors) -> Vec<TrafficSelector> {
    payload.selectors.iter().filter_map(TrafficSelector::from_wire).collect()
}

/// Narrows the peer's proposed selectors to our policy (responder, §2.9): every non-empty
/// intersection of one of theirs with one of ours, without duplicates. Empty means
/// TS_UNACCEPTABLE.
pub fn narrow(proposed: &[TrafficSelector], policy: &[TrafficSelector]) -> Vec<TrafficSelector> {
    let mut out = Vec::new();
    for p in proposed {
        for o in policy {
            if let Some(i) = p.intersect(o) {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        }
    }
    out
}

/// Whether a narrowed answer stays within what we proposed (initiator, §2.9).
pub fn within(answer: &[TrafficSelector], proposed: &[TrafficSelector]) -> bool {
    !answer.is_empty() && answer.iter().all(|a| proposed.iter().any(|p| a.is_within(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(s: &str) -> TrafficSelector {
        match TsSpec::parse(s) {
            Ok(TsSpec::Fixed(ts)) => ts,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn strongswan_selector_syntax_parses() {
        let net = fixed("198.18.1.0/24");
        assert_eq!((net.start, net.end), ("198.18.1.0".parse().unwrap(), "198.18.1.255".parse().unwrap()));
        assert_eq!((net.ip_protocol, net.start_port, net.end_port), (0, 0, 65535));
        let any = fixed("0.0.0.0/0");
        assert_eq!(any.end, IpAddr::V4(Ipv4Addr::BROADCAST));
        let v6 = fixed("2001:db8::/32[tcp/443]");
        assert_eq!(v6.end, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff".parse::<IpAddr>().unwrap());
        assert_eq!((v6.ip_protocol, v6.start_port, v6.end_port), (6, 443, 443));
        let range = fixed("198.18.0.5-198.18.0.9[udp/1000-2000]");
        assert_eq!((range.ip_protocol, range.start_port, range.end_port), (17, 1000, 2000));
        assert_eq!(fixed("198.18.0.7").start, fixed("198.18.0.7").end);
        assert_eq!(fixed("198.18.0.0/16[47]").ip_protocol, 47);
        assert_eq!(
            TsSpec::parse("dynamic[udp/%any]"),
            Ok(TsSpec::Dynamic { ip_protocol: 17, start_port: 0, end_port: 65535 })
        );
        let dynamic = TsSpec::parse("dynamic").unwrap().resolve("198.18.0.1".parse().unwrap());
        assert_eq!(dynamic, fixed("198.18.0.1/32"));
        assert_eq!(fixed("198.18.1.0/24").to_string(), "198.18.1.0-198.18.1.255");
    }

    #[test]
    fn bad_selectors_are_refused() {
        for bad in [
            "198.18.1.0/33",
            "2001:db8::/129",
            "198.18.0.9-198.18.0.1",
            "198.18.0.1-2001:db8::1",
            "nowhere",
            "198.18.0.0/16[tcp/80",
            "198.18.0.0/16[bogus]",
            "198.18.0.0/16[tcp/90-80]",
            "198.18.0.0/16[%any/80]",
            "198.18.0.0/16[tcp/70000]",
            "",
        ] {
            assert!(TsSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn narrowing_intersects_proposals_with_policy() {
        let proposed = [fixed("0.0.0.0/0"), fixed("2001:db8::/32")];
        let policy = [fixed("198.18.1.0/24"), fixed("198.18.2.0/24[tcp/80]")];
        let narrowed = narrow(&proposed, &policy);
        assert_eq!(narrowed, policy.to_vec());
        assert!(within(&narrowed, &proposed));
        assert!(!within(&[fixed("198.19.0.0/16")], &[fixed("198.18.0.0/16")]));
        assert!(!within(&[], &proposed), "an empty answer is not acceptable");
        assert!(narrow(&[fixed("198.19.0.0/16")], &policy).is_empty());
        assert!(narrow(&[fixed("198.18.1.0/24[udp]")], &[fixed("198.18.0.0/16[tcp]")]).is_empty());
        assert_eq!(
            narrow(&[fixed("198.18.1.0/24[udp]")], &[fixed("198.18.1.128/25")]),
            vec![fixed("198.18.1.128/25[udp]")]
        );
    }

    #[test]
    fn wire_round_trip_and_unknown_types_are_skipped() {
        let list = [fixed("198.18.1.0/24"), fixed("2001:db8::1[udp/53]")];
        let payload = to_payload(&list);
        assert_eq!(from_payload(&payload), list.to_vec());
        let mut odd = payload.clone();
        odd.selectors.push(WireSelector::Unknown {
            ty: wire::ike::TsType::SECLABEL,
            second_octet: 0,
            data: vec![1],
        });
        assert_eq!(from_payload(&odd), list.to_vec());
    }
}
