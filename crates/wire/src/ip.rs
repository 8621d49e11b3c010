//! Types shared by the IPv4 and IPv6 views: protocol numbers, ECN and address pairs.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum;

/// An IP protocol / IPv6 next-header number (IANA "Assigned Internet Protocol Numbers").
///
/// A newtype rather than an enum so unknown values round-trip unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 Hop-by-Hop Options header (RFC 8200 §4.3).
    pub const HOP_BY_HOP: Self = Self(0x00);
    /// Internet Control Message Protocol (RFC 792).
    pub const ICMP: Self = Self(0x01);
    /// IPv4 encapsulated in IP: ESP tunnel-mode next header for an inner IPv4 packet.
    pub const IPV4: Self = Self(0x04);
    /// Transmission Control Protocol (RFC 9293).
    pub const TCP: Self = Self(0x06);
    /// User Datagram Protocol (RFC 768).
    pub const UDP: Self = Self(0x11);
    /// IPv6 encapsulated in IP: ESP tunnel-mode next header for an inner IPv6 packet.
    pub const IPV6: Self = Self(0x29);
    /// IPv6 Routing header (RFC 8200 §4.4).
    pub const IPV6_ROUTING: Self = Self(0x2b);
    /// IPv6 Fragment header (RFC 8200 §4.5).
    pub const IPV6_FRAGMENT: Self = Self(0x2c);
    /// Encapsulating Security Payload (RFC 4303).
    pub const ESP: Self = Self(0x32);
    /// Authentication Header (RFC 4302).
    pub const AH: Self = Self(0x33);
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: Self = Self(0x3a);
    /// No next header (RFC 8200 §4.7); also marks ESP dummy packets (RFC 4303 §2.6).
    pub const IPV6_NO_NEXT_HEADER: Self = Self(0x3b);
    /// IPv6 Destination Options header (RFC 8200 §4.6).
    pub const IPV6_DESTINATION_OPTIONS: Self = Self(0x3c);

    /// The registered short name, if this number is one of the constants above.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::HOP_BY_HOP => "HOPOPT",
            Self::ICMP => "ICMP",
            Self::IPV4 => "IPv4",
            Self::TCP => "TCP",
            Self::UDP => "UDP",
            Self::IPV6 => "IPv6",
            Self::IPV6_ROUTING => "IPv6-Route",
            Self::IPV6_FRAGMENT => "IPv6-Frag",
            Self::ESP => "ESP",
            Self::AH => "AH",
            Self::ICMPV6 => "IPv6-ICMP",
            Self::IPV6_NO_NEXT_HEADER => "IPv6-NoNxt",
            Self::IPV6_DESTINATION_OPTIONS => "IPv6-Opts",
            _ => return None,
        })
    }
}

impl fmt::Debug for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "IpProtocol::{name}({})", self.0),
            None => write!(f, "IpProtocol({})", self.0),
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "protocol {}", self.0),
        }
    }
}

impl From<u8> for IpProtocol {
    fn from(value: u8) -> Self {
        Self(value)
    }
}

impl From<IpProtocol> for u8 {
    fn from(value: IpProtocol) -> Self {
        value.0
    }
}

/// The two-bit ECN codepoint of the IPv4 TOS / IPv6 traffic class byte (RFC 3168 §5).
///
/// Tunnel endpoints copy and combine it between inner and outer headers (RFC 6040).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ecn {
    /// Not ECN-capable transport (`00`).
    NotEct,
    /// ECN-capable transport, codepoint ECT(1) (`01`).
    Ect1,
    /// ECN-capable transport, codepoint ECT(0) (`10`).
    Ect0,
    /// Congestion experienced (`11`).
    Ce,
}

impl Ecn {
    /// Decodes the low two bits of a TOS / traffic class byte.
    pub fn from_bits(bits: u8) -> Self {
        match bits & 0b11 {
            0b00 => Self::NotEct,
            0b01 => Self::Ect1,
            0b10 => Self::Ect0,
            _ => Self::Ce,
        }
    }

    /// The codepoint as the low two bits of a byte.
    pub fn bits(self) -> u8 {
        match self {
            Self::NotEct => 0b00,
            Self::Ect1 => 0b01,
            Self::Ect0 => 0b10,
            Self::Ce => 0b11,
        }
    }
}

/// Highest DSCP value: the field is the upper six bits of the TOS byte (RFC 2474 §3).
pub const DSCP_MAX: u8 = 0x3f;

/// The source and destination of the IP header that carries a transport message, which the
/// transport checksum covers through a pseudo-header (RFC 768; RFC 8200 §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// Addresses of an IPv4 header.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// Addresses of an IPv6 header.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address (the final one when a Routing header is present).
        dst: Ipv6Addr,
    },
}

impl IpPair {
    /// The pair for a source and destination of one family; `None` when the families differ.
    pub fn new(src: core::net::IpAddr, dst: core::net::IpAddr) -> Option<Self> {
        use core::net::IpAddr;
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(Self::V4 { src, dst }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(Self::V6 { src, dst }),
            _ => None,
        }
    }

    /// The folded one's-complement sum of the pseudo-header for `protocol` and an
    /// upper-layer message of `length` bytes (RFC 768 for IPv4, RFC 8200 §8.1 for IPv6).
    pub fn pseudo_header_sum(&self, protocol: IpProtocol, length: u32) -> u16 {
        // For IPv4 the length field is 16 bits, so its high half is zero and summing both
        // halves gives the same result as the IPv6 32-bit field.
        let [l0, l1, l2, l3] = length.to_be_bytes();
        let tail = [l0, l1, l2, l3, 0, 0, 0, protocol.0];
        match self {
            Self::V4 { src, dst } => checksum::combine(&[
                checksum::data(&src.octets()),
                checksum::data(&dst.octets()),
                checksum::data(&tail),
            ]),
            Self::V6 { src, dst } => checksum::combine(&[
                checksum::data(&src.octets()),
                checksum::data(&dst.octets()),
                checksum::data(&tail),
            ]),
        }
    }

    /// Whether this is an IPv6 pair, where a zero UDP checksum is not allowed.
    pub fn is_ipv6(&self) -> bool {
        matches!(self, Self::V6 { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_and_unknown_values_round_trip() {
        assert_eq!(IpProtocol::ESP.to_string(), "ESP");
        assert_eq!(format!("{:?}", IpProtocol::UDP), "IpProtocol::UDP(17)");
        assert_eq!(IpProtocol::from(200).to_string(), "protocol 200");
        assert_eq!(u8::from(IpProtocol::from(200)), 200);
    }

    #[test]
    fn ecn_bits_round_trip() {
        for bits in 0..4 {
            assert_eq!(Ecn::from_bits(bits).bits(), bits);
        }
        assert_eq!(Ecn::from_bits(0xff), Ecn::Ce);
    }

    #[test]
    fn pseudo_header_sums_match_hand_computation() {
        let v4 = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 1), dst: Ipv4Addr::new(198, 19, 0, 1) };
        // c612 + 0001 + c613 + 0001 + 0011 (UDP) + 0010 (length 16) = 18c48 -> 8c49
        assert_eq!(v4.pseudo_header_sum(IpProtocol::UDP, 16), 0x8c49);
        assert!(!v4.is_ipv6());
        let v6 = IpPair::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
        };
        // 2001+0db8+0001 + 2001+0db8+0002 + 003a (ICMPv6) + 0010 = 5bbf
        assert_eq!(v6.pseudo_header_sum(IpProtocol::ICMPV6, 16), 0x5bbf);
        assert!(v6.is_ipv6());
    }

    #[test]
    fn pair_from_addresses_requires_one_family() {
        let v4 = |d| core::net::IpAddr::V4(Ipv4Addr::new(198, 18, 0, d));
        let v6 = core::net::IpAddr::V6("2001:db8::1".parse().unwrap());
        assert_eq!(
            IpPair::new(v4(1), v4(2)),
            Some(IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 1), dst: Ipv4Addr::new(198, 18, 0, 2) })
        );
        assert!(matches!(IpPair::new(v6, v6), Some(IpPair::V6 { .. })));
        assert_eq!(IpPair::new(v4(1), v6), None);
    }
}
