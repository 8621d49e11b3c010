//! Traffic Selector payloads, TSi and TSr (RFC 7296 §3.13).

use core::net::{Ipv4Addr, Ipv6Addr};

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// Traffic selector types (RFC 7296 §3.13.1, IANA "IKEv2 Traffic Selector Types").
    pub struct TsType(u8) {
        /// IPV4_ADDR_RANGE (7): A range of IPv4 addresses with protocol and ports.
        IPV4_ADDR_RANGE = 0x07,
        /// IPV6_ADDR_RANGE (8): A range of IPv6 addresses with protocol and ports.
        IPV6_ADDR_RANGE = 0x08,
        /// FC_ADDR_RANGE (9): A range of Fibre Channel addresses (RFC 4595).
        FC_ADDR_RANGE = 0x09,
        /// SECLABEL (10): A security label (RFC 9478).
        SECLABEL = 0x0a,
    }
}

/// Traffic Selector payload, TSi or TSr (RFC 7296 §3.13): the packets a Child SA carries.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Number of TSs |                 RESERVED                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                       <Traffic Selectors>                     ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TrafficSelectors {
    /// The RESERVED octets, kept as received so encoding is byte-exact; send zero.
    pub reserved: [u8; 3],
    /// The selectors; their union is what the payload allows.
    pub selectors: Vec<TrafficSelector>,
}

impl TrafficSelectors {
    /// A payload of these selectors with zero RESERVED octets.
    pub fn new(selectors: Vec<TrafficSelector>) -> Self {
        Self { reserved: [0; 3], selectors }
    }
}

/// One traffic selector (RFC 7296 §3.13.1).
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   TS Type     |IP Protocol ID*|       Selector Length         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Start Port*         |           End Port*           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                         Starting Address*                     ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                         Ending Address*                       ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The starred fields are those of the two address-range types; other types (a security
/// label, RFC 9478) lay out the bytes after the length differently and stay opaque.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TrafficSelector {
    /// TS_IPV4_ADDR_RANGE, a 16-octet selector.
    Ipv4(AddressRange<Ipv4Addr>),
    /// TS_IPV6_ADDR_RANGE, a 40-octet selector.
    Ipv6(AddressRange<Ipv6Addr>),
    /// Any other selector type, kept as found.
    Unknown {
        /// The TS type.
        ty: TsType,
        /// The second octet: IP Protocol ID in the range types, RESERVED in others.
        second_octet: u8,
        /// The bytes after the Selector Length field.
        data: Vec<u8>,
    },
}

impl TrafficSelector {
    /// The TS Type field.
    pub fn ty(&self) -> TsType {
        match self {
            Self::Ipv4(_) => TsType::IPV4_ADDR_RANGE,
            Self::Ipv6(_) => TsType::IPV6_ADDR_RANGE,
            Self::Unknown { ty, .. } => *ty,
        }
    }
}

/// An address range with an IP protocol and a port range (RFC 7296 §3.13.1).
///
/// Ranges are represented as received, even when empty: start port 65535 with end port 0
/// is the RFC's OPAQUE ports ([`AddressRange::ports_opaque`]), and whether a range with
/// its start above its end is refused (TS_UNACCEPTABLE) is the engine's policy; see
/// [`AddressRange::addresses_ordered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressRange<A> {
    /// The IP protocol ID (e.g. 6 for TCP, 17 for UDP), zero for any.
    pub ip_protocol: u8,
    /// The first port, or for ICMP the type and code (§3.13.1).
    pub start_port: u16,
    /// The last port.
    pub end_port: u16,
    /// The first address.
    pub start: A,
    /// The last address.
    pub end: A,
}

impl<A: Ord> AddressRange<A> {
    /// Whether the start address is not above the end address, i.e. the range is not empty.
    pub fn addresses_ordered(&self) -> bool {
        self.start <= self.end
    }

    /// Whether the ports are the OPAQUE selector: start 65535, end 0 (§3.13.1).
    pub fn ports_opaque(&self) -> bool {
        self.start_port == u16::MAX && self.end_port == 0
    }
}

impl AddressRange<Ipv4Addr> {
    /// All IPv4 traffic: any protocol, any port, 0.0.0.0 to 255.255.255.255.
    pub const IPV4_ANY: Self = Self {
        ip_protocol: 0,
        start_port: 0,
        end_port: u16::MAX,
        start: Ipv4Addr::UNSPECIFIED,
        end: Ipv4Addr::BROADCAST,
    };
}

impl AddressRange<Ipv6Addr> {
    /// All IPv6 traffic: any protocol, any port, :: to ffff:...:ffff.
    pub const IPV6_ANY: Self = Self {
        ip_protocol: 0,
        start_port: 0,
        end_port: u16::MAX,
        start: Ipv6Addr::UNSPECIFIED,
        end: Ipv6Addr::from_bits(u128::MAX),
    };
}

/// The fixed part of every selector: type, protocol, length.
const SELECTOR_HEADER_LEN: usize = 4;
/// Selector Length of an IPv4 range.
const IPV4_LEN: usize = 16;
/// Selector Length of an IPv6 range.
const IPV6_LEN: usize = 40;
/// The name of a traffic selector in errors.
const SELECTOR: &str = "traffic selector";

/// Reads the ports and addresses of a range selector.
fn read_range<const N: usize, A: From<[u8; N]>>(
    s: &mut Reader<'_>,
    ip_protocol: u8,
) -> Result<AddressRange<A>> {
    Ok(AddressRange {
        ip_protocol,
        start_port: s.u16(SELECTOR)?,
        end_port: s.u16(SELECTOR)?,
        start: A::from(s.array::<N>(SELECTOR)?),
        end: A::from(s.array::<N>(SELECTOR)?),
    })
}

/// Fails with `BadLength` unless a range selector has its type's fixed length.
fn check_selector_len(len: usize, need: usize) -> Result<()> {
    if len == need {
        Ok(())
    } else {
        Err(Error::BadLength {
            what: SELECTOR,
            len,
            why: "an IPv4 range selector has 16 octets, an IPv6 range 40",
        })
    }
}

impl Body for TrafficSelectors {
    const WHAT: &'static str = "TS payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let count = r.u8(Self::WHAT)?;
        let reserved = r.array(Self::WHAT)?;
        let mut selectors = Vec::new();
        while !r.is_empty() {
            let ty = TsType(r.u8(SELECTOR)?);
            let second_octet = r.u8(SELECTOR)?;
            let len = usize::from(r.u16(SELECTOR)?);
            let body_len = len.checked_sub(SELECTOR_HEADER_LEN).ok_or(Error::BadLength {
                what: SELECTOR,
                len,
                why: "shorter than the selector header",
            })?;
            let mut s = r.sub(body_len, SELECTOR)?;
            let selector = match ty {
                TsType::IPV4_ADDR_RANGE => {
                    check_selector_len(len, IPV4_LEN)?;
                    TrafficSelector::Ipv4(read_range::<4, _>(&mut s, second_octet)?)
                }
                TsType::IPV6_ADDR_RANGE => {
                    check_selector_len(len, IPV6_LEN)?;
                    TrafficSelector::Ipv6(read_range::<16, _>(&mut s, second_octet)?)
                }
                ty => TrafficSelector::Unknown { ty, second_octet, data: s.rest().to_vec() },
            };
            s.finish(SELECTOR)?;
            selectors.push(selector);
        }
        if selectors.len() != usize::from(count) {
            return Err(Error::BadValue { what: "TS payload selector count", value: count.into() });
        }
        Ok(Self { reserved, selectors })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(fit(self.selectors.len(), "TS payload selector count")?);
        w.bytes(&self.reserved);
        for selector in &self.selectors {
            let start = w.position();
            w.u8(selector.ty().0);
            match selector {
                TrafficSelector::Ipv4(range) => {
                    w.u8(range.ip_protocol);
                    let at = w.len16();
                    w.u16(range.start_port);
                    w.u16(range.end_port);
                    w.bytes(&range.start.octets());
                    w.bytes(&range.end.octets());
                    w.patch_len16(start, at, SELECTOR)?;
                }
                TrafficSelector::Ipv6(range) => {
                    w.u8(range.ip_protocol);
                    let at = w.len16();
                    w.u16(range.start_port);
                    w.u16(range.end_port);
                    w.bytes(&range.start.octets());
                    w.bytes(&range.end.octets());
                    w.patch_len16(start, at, SELECTOR)?;
                }
                TrafficSelector::Unknown { ty, second_octet, data } => {
                    // Written as a range type, the opaque bytes would not decode back.
                    if matches!(*ty, TsType::IPV4_ADDR_RANGE | TsType::IPV6_ADDR_RANGE) {
                        return Err(Error::BadValue {
                            what: "unknown traffic selector type",
                            value: ty.0.into(),
                        });
                    }
                    w.u8(*second_octet);
                    let at = w.len16();
                    w.bytes(data);
                    w.patch_len16(start, at, SELECTOR)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_round_trip, decode_one, encode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn ipv4_and_ipv6_selectors_round_trip() {
        let bytes = hex!(
            "00 00 0040 02 000000"
            "07 00 0010 0000 ffff c6120000 c612ffff"
            "08 11 0028 01f4 01f4 20010db8000000000000000000000000"
            "                     20010db8ffffffffffffffffffffffff"
        );
        let expected = Payload::TsInitiator(TrafficSelectors::new(vec![
            TrafficSelector::Ipv4(AddressRange {
                ip_protocol: 0,
                start_port: 0,
                end_port: 0xffff,
                start: Ipv4Addr::new(198, 18, 0, 0),
                end: Ipv4Addr::new(198, 18, 255, 255),
            }),
            TrafficSelector::Ipv6(AddressRange {
                ip_protocol: 17,
                start_port: 500,
                end_port: 500,
                start: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
                end: Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff),
            }),
        ]));
        assert_round_trip(PayloadType::TSI, &bytes, &expected);
    }

    #[test]
    fn any_selectors_encode_as_expected() {
        let bytes = hex!("00 00 0018 01 000000 07 00 0010 0000 ffff 00000000 ffffffff");
        let expected =
            Payload::TsResponder(TrafficSelectors::new(vec![TrafficSelector::Ipv4(AddressRange::IPV4_ANY)]));
        assert_round_trip(PayloadType::TSR, &bytes, &expected);
        let any6 = AddressRange::IPV6_ANY;
        assert!(any6.addresses_ordered() && !any6.ports_opaque());
    }

    #[test]
    fn empty_and_opaque_ranges_are_represented() {
        let bytes = hex!("00 00 0018 01 000000 07 06 0010 ffff 0000 c6120002 c6120001");
        let Ok(Payload::TsInitiator(ts)) = decode_one(PayloadType::TSI, &bytes) else {
            panic!("not a TSi payload");
        };
        let TrafficSelector::Ipv4(range) = ts.selectors[0] else {
            panic!("not an IPv4 range");
        };
        assert!(range.ports_opaque());
        assert!(!range.addresses_ordered());
    }

    #[test]
    fn security_label_selector_is_kept_opaque() {
        let bytes = hex!("00 00 0012 01 000000 0a 00 000a 73797374656d");
        let expected = Payload::TsInitiator(TrafficSelectors::new(vec![TrafficSelector::Unknown {
            ty: TsType::SECLABEL,
            second_octet: 0,
            data: b"system".to_vec(),
        }]));
        assert_round_trip(PayloadType::TSI, &bytes, &expected);
    }

    #[test]
    fn selector_count_must_match() {
        let bytes = hex!("00 00 0018 02 000000 07 00 0010 0000 ffff 00000000 ffffffff");
        assert_eq!(
            decode_one(PayloadType::TSI, &bytes),
            Err(Error::BadValue { what: "TS payload selector count", value: 2 })
        );
    }

    #[test]
    fn range_selectors_need_their_exact_length() {
        // An IPv4 range of 20 octets: the four extra octets would otherwise be ignored.
        let bytes = hex!("00 00 001c 01 000000 07 00 0014 0000 ffff 00000000 ffffffff 00000000");
        assert!(matches!(
            decode_one(PayloadType::TSI, &bytes),
            Err(Error::BadLength { what: SELECTOR, len: 20, .. })
        ));
        let bytes = hex!("00 00 000c 01 000000 07 00 0003");
        assert!(matches!(
            decode_one(PayloadType::TSI, &bytes),
            Err(Error::BadLength { what: SELECTOR, len: 3, .. })
        ));
    }

    #[test]
    fn unknown_arm_of_a_range_type_is_not_encodable() {
        let ts = TrafficSelectors::new(vec![TrafficSelector::Unknown {
            ty: TsType::IPV4_ADDR_RANGE,
            second_octet: 0,
            data: vec![],
        }]);
        assert!(matches!(encode_one(Payload::TsInitiator(ts)), Err(Error::BadValue { .. })));
    }
}
