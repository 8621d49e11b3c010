//! Traffic selectors in IKE: `dynamic` (the SA's own address) besides strongSwan's syntax
//! for a fixed selector (`198.18.1.0/24`, `2001:db8::/32[tcp/443]`), the TSi/TSr payloads,
//! and narrowing (RFC 7296 §2.9). The selector itself is [`wire::selector`]'s, the one the
//! ESP policy matches packets against.

use core::net::IpAddr;

use wire::ike::TrafficSelectors;
pub use wire::selector::{AddressRange, PortRange, TrafficSelector};

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
            Self::Dynamic { ip_protocol, start_port, end_port } => TrafficSelector {
                addresses: AddressRange::host(address),
                protocol: ip_protocol,
                ports: PortRange { start: start_port, end: end_port },
            },
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
        if base.eq_ignore_ascii_case("dynamic") {
            let (protocol, ports) = match extra {
                Some(e) => wire::selector::parse_protocol_ports(e).map_err(|e| e.why)?,
                None => (0, PortRange::ANY),
            };
            return Ok(Self::Dynamic { ip_protocol: protocol, start_port: ports.start, end_port: ports.end });
        }
        text.parse().map(Self::Fixed).map_err(|e: wire::selector::SelectorError| e.why)
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
    use core::net::Ipv4Addr;

    fn fixed(s: &str) -> TrafficSelector {
        match TsSpec::parse(s) {
            Ok(TsSpec::Fixed(ts)) => ts,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn strongswan_selector_syntax_parses() {
        let net = fixed("198.18.1.0/24");
        assert_eq!(
            (net.addresses.start(), net.addresses.end()),
            ("198.18.1.0".parse().unwrap(), "198.18.1.255".parse().unwrap())
        );
        assert_eq!((net.protocol, net.ports.start, net.ports.end), (0, 0, 65535));
        let any = fixed("0.0.0.0/0");
        assert_eq!(any.addresses.end(), IpAddr::V4(Ipv4Addr::BROADCAST));
        let v6 = fixed("2001:db8::/32[tcp/443]");
        assert_eq!(v6.addresses.end(), "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff".parse::<IpAddr>().unwrap());
        assert_eq!((v6.protocol, v6.ports.start, v6.ports.end), (6, 443, 443));
        let range = fixed("198.18.0.5-198.18.0.9[udp/1000-2000]");
        assert_eq!((range.protocol, range.ports.start, range.ports.end), (17, 1000, 2000));
        assert_eq!(fixed("198.18.0.7").addresses.start(), fixed("198.18.0.7").addresses.end());
        assert_eq!(fixed("198.18.0.0/16[47]").protocol, 47);
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
        odd.selectors.push(wire::ike::TrafficSelector::Unknown {
            ty: wire::ike::TsType::SECLABEL,
            second_octet: 0,
            data: vec![1],
        });
        assert_eq!(from_payload(&odd), list.to_vec());
    }
}
