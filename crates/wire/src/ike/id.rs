//! Identification payloads, IDi and IDr (RFC 7296 §3.5).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

registry! {
    /// Identification types of IDi/IDr (RFC 7296 §3.5, IANA "IKEv2 Identification Payload ID
    /// Types").
    pub struct IdType(u8) {
        /// IPV4_ADDR (1): A single four-octet IPv4 address.
        IPV4_ADDR = 0x01,
        /// FQDN (2): A fully-qualified domain name, no terminator.
        FQDN = 0x02,
        /// RFC822_ADDR (3): An RFC 822 email address, no terminator.
        RFC822_ADDR = 0x03,
        /// IPV6_ADDR (5): A single sixteen-octet IPv6 address.
        IPV6_ADDR = 0x05,
        /// DER_ASN1_DN (9): The DER encoding of an X.500 distinguished name.
        DER_ASN1_DN = 0x09,
        /// DER_ASN1_GN (10): The DER encoding of an X.509 GeneralName.
        DER_ASN1_GN = 0x0a,
        /// KEY_ID (11): An opaque octet stream for vendor-specific identities.
        KEY_ID = 0x0b,
        /// FC_NAME (12): A Fibre Channel name (RFC 4595).
        FC_NAME = 0x0c,
        /// NULL (13): No identity, for NULL authentication (RFC 7619).
        NULL = 0x0d,
    }
}

/// Identification payload, IDi or IDr (RFC 7296 §3.5): who the sender claims to be.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   ID Type     |                 RESERVED                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                   Identification Data                         ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// An IPv4 or IPv6 address identity must have the address's length; other types are opaque
/// here. The body after the generic header is what the AUTH payload signs
/// (`RestOfInitIDPayload`, §2.15), so [`Identification::body_bytes`] gives it exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identification {
    /// The kind of identity.
    pub ty: IdType,
    /// The RESERVED octets, kept as received: they are part of the signed octets (§2.15).
    pub reserved: [u8; 3],
    /// The identity, encoded as its type says.
    pub data: Vec<u8>,
}

impl Identification {
    /// An identity with zero RESERVED octets.
    pub fn new(ty: IdType, data: Vec<u8>) -> Self {
        Self { ty, reserved: [0; 3], data }
    }

    /// An ID_IPV4_ADDR or ID_IPV6_ADDR identity.
    pub fn from_ip(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(v4) => Self::new(IdType::IPV4_ADDR, v4.octets().to_vec()),
            IpAddr::V6(v6) => Self::new(IdType::IPV6_ADDR, v6.octets().to_vec()),
        }
    }

    /// The address of an ID_IPV4_ADDR or ID_IPV6_ADDR identity.
    pub fn ip(&self) -> Option<IpAddr> {
        match self.ty {
            IdType::IPV4_ADDR => {
                <[u8; 4]>::try_from(self.data.as_slice()).ok().map(|o| IpAddr::V4(Ipv4Addr::from(o)))
            }
            IdType::IPV6_ADDR => {
                <[u8; 16]>::try_from(self.data.as_slice()).ok().map(|o| IpAddr::V6(Ipv6Addr::from(o)))
            }
            _ => None,
        }
    }

    /// The payload body after the generic header (ID Type, RESERVED, data): the
    /// `RestOfInitIDPayload` / `RestOfRespIDPayload` that MACedIDForI/R covers (§2.15).
    pub fn body_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.data.len());
        out.push(self.ty.0);
        out.extend_from_slice(&self.reserved);
        out.extend_from_slice(&self.data);
        out
    }

    /// Fails with `BadLength` if an address identity has the wrong length (§3.5).
    fn check(&self) -> Result<()> {
        let need = match self.ty {
            IdType::IPV4_ADDR => 4,
            IdType::IPV6_ADDR => 16,
            _ => return Ok(()),
        };
        if self.data.len() == need {
            Ok(())
        } else {
            Err(Error::BadLength {
                what: "ID payload address",
                len: self.data.len(),
                why: "an IPv4 identity has 4 octets, an IPv6 identity 16",
            })
        }
    }
}

impl Body for Identification {
    const WHAT: &'static str = "ID payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let id =
            Self { ty: IdType(r.u8(Self::WHAT)?), reserved: r.array(Self::WHAT)?, data: r.rest().to_vec() };
        id.check()?;
        Ok(id)
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        self.check()?;
        w.u8(self.ty.0);
        w.bytes(&self.reserved);
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_rejects_extra_octet, assert_round_trip, decode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn id_types_carry_the_rfc_values() {
        let values: Vec<u8> = [
            IdType::IPV4_ADDR,
            IdType::FQDN,
            IdType::RFC822_ADDR,
            IdType::IPV6_ADDR,
            IdType::DER_ASN1_DN,
            IdType::DER_ASN1_GN,
            IdType::KEY_ID,
        ]
        .iter()
        .map(|t| t.0)
        .collect();
        assert_eq!(values, [1, 2, 3, 5, 9, 10, 11]);
    }

    #[test]
    fn fqdn_initiator_id_round_trips() {
        let bytes = hex!("00 00 0014 02 000000 6d6f6f6e2e6578616d706c65"); // "moon.example"
        let expected = Payload::IdInitiator(Identification::new(IdType::FQDN, b"moon.example".to_vec()));
        assert_round_trip(PayloadType::IDI, &bytes, &expected);
    }

    #[test]
    fn ipv4_responder_id_round_trips() {
        let bytes = hex!("00 00 000c 01 000000 c6120001");
        let id = Identification::from_ip(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(id.ip(), Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))));
        assert_eq!(id.body_bytes(), bytes[4..]);
        assert_round_trip(PayloadType::IDR, &bytes, &Payload::IdResponder(id));
    }

    #[test]
    fn ipv6_id_round_trips() {
        let bytes = hex!("00 00 0018 05 000000 20010db8000000000000000000000001");
        let address = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        let id = Identification::from_ip(address);
        assert_eq!(id.ip(), Some(address));
        assert_round_trip(PayloadType::IDI, &bytes, &Payload::IdInitiator(id));
    }

    #[test]
    fn address_identity_with_wrong_length_is_rejected() {
        assert_rejects_extra_octet(PayloadType::IDR, &hex!("00 00 000c 01 000000 c6120001"));
        assert!(matches!(
            decode_one(PayloadType::IDI, &hex!("00 00 0008 05 000000")),
            Err(Error::BadLength { .. })
        ));
    }

    #[test]
    fn reserved_octets_are_kept_for_the_signed_octets() {
        let bytes = hex!("00 00 0009 0b 010203 ff");
        let id = Identification { ty: IdType::KEY_ID, reserved: [1, 2, 3], data: vec![0xff] };
        assert_eq!(id.body_bytes(), bytes[4..]);
        assert_round_trip(PayloadType::IDI, &bytes, &Payload::IdInitiator(id));
    }
}
