//! Configuration payload (RFC 7296 §3.15).

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// Configuration payload types (RFC 7296 §3.15, IANA "IKEv2 Configuration Payload CFG Types").
    pub struct CfgType(u8) {
        /// REQUEST (1): CFG_REQUEST: the initiator asks for attributes.
        REQUEST = 0x01,
        /// REPLY (2): CFG_REPLY: the responder answers a request.
        REPLY = 0x02,
        /// SET (3): CFG_SET: the sender sets attributes.
        SET = 0x03,
        /// ACK (4): CFG_ACK: the receiver acknowledges a set.
        ACK = 0x04,
    }
}

registry! {
    /// Configuration attribute types (RFC 7296 §3.15.1, IANA "IKEv2 Configuration Payload
    /// Attribute Types"); the 15 bits after the reserved bit.
    pub struct ConfigAttributeType(u16) {
        /// INTERNAL_IP4_ADDRESS (1): An internal IPv4 address.
        INTERNAL_IP4_ADDRESS = 0x0001,
        /// INTERNAL_IP4_NETMASK (2): The internal network's IPv4 netmask.
        INTERNAL_IP4_NETMASK = 0x0002,
        /// INTERNAL_IP4_DNS (3): An IPv4 DNS server.
        INTERNAL_IP4_DNS = 0x0003,
        /// INTERNAL_IP4_NBNS (4): An IPv4 NetBIOS name server.
        INTERNAL_IP4_NBNS = 0x0004,
        /// INTERNAL_IP4_DHCP (6): An IPv4 DHCP server.
        INTERNAL_IP4_DHCP = 0x0006,
        /// APPLICATION_VERSION (7): The sender's application version string.
        APPLICATION_VERSION = 0x0007,
        /// INTERNAL_IP6_ADDRESS (8): An internal IPv6 address and prefix length.
        INTERNAL_IP6_ADDRESS = 0x0008,
        /// INTERNAL_IP6_DNS (10): An IPv6 DNS server.
        INTERNAL_IP6_DNS = 0x000a,
        /// INTERNAL_IP6_DHCP (12): An IPv6 DHCP server.
        INTERNAL_IP6_DHCP = 0x000c,
        /// INTERNAL_IP4_SUBNET (13): A protected IPv4 subnet.
        INTERNAL_IP4_SUBNET = 0x000d,
        /// SUPPORTED_ATTRIBUTES (14): The list of supported attribute types.
        SUPPORTED_ATTRIBUTES = 0x000e,
        /// INTERNAL_IP6_SUBNET (15): A protected IPv6 subnet.
        INTERNAL_IP6_SUBNET = 0x000f,
        /// MIP6_HOME_PREFIX (16): Mobile IPv6 home prefix (RFC 5026).
        MIP6_HOME_PREFIX = 0x0010,
        /// INTERNAL_IP6_LINK (17): IPv6 link interface identifier (RFC 5739).
        INTERNAL_IP6_LINK = 0x0011,
        /// INTERNAL_IP6_PREFIX (18): An IPv6 prefix (RFC 5739).
        INTERNAL_IP6_PREFIX = 0x0012,
        /// HOME_AGENT_ADDRESS (19): Mobile IPv6 home agent address (RFC 5026).
        HOME_AGENT_ADDRESS = 0x0013,
        /// P_CSCF_IP4_ADDRESS (20): IPv4 P-CSCF address (RFC 7651).
        P_CSCF_IP4_ADDRESS = 0x0014,
        /// P_CSCF_IP6_ADDRESS (21): IPv6 P-CSCF address (RFC 7651).
        P_CSCF_IP6_ADDRESS = 0x0015,
        /// FTT_KAT (22): Firewall traversal keep-alive time (3GPP TS 24.302).
        FTT_KAT = 0x0016,
        /// EXTERNAL_SOURCE_IP4_NAT_INFO (23): External NAT endpoint (3GPP TS 29.139).
        EXTERNAL_SOURCE_IP4_NAT_INFO = 0x0017,
        /// TIMEOUT_PERIOD_FOR_LIVENESS_CHECK (24): Liveness check period (3GPP TS 24.302).
        TIMEOUT_PERIOD_FOR_LIVENESS_CHECK = 0x0018,
        /// INTERNAL_DNS_DOMAIN (25): A DNS domain for the internal DNS servers (RFC 8598).
        INTERNAL_DNS_DOMAIN = 0x0019,
        /// INTERNAL_DNSSEC_TA (26): A DNSSEC trust anchor for an internal domain (RFC 8598).
        INTERNAL_DNSSEC_TA = 0x001a,
    }
}

/// Configuration payload, CP (RFC 7296 §3.15): requests and replies of configuration
/// attributes such as an internal address.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C| RESERVED    |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   CFG Type    |                    RESERVED                   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                   Configuration Attributes                    ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Configuration {
    /// Request, reply, set or acknowledge.
    pub cfg_type: CfgType,
    /// The RESERVED octets, kept as received so encoding is byte-exact; send zero.
    pub reserved: [u8; 3],
    /// The attributes, in order.
    pub attributes: Vec<ConfigAttribute>,
}

impl Configuration {
    /// A CP payload with zero RESERVED octets.
    pub fn new(cfg_type: CfgType, attributes: Vec<ConfigAttribute>) -> Self {
        Self { cfg_type, reserved: [0; 3], attributes }
    }
}

/// A configuration attribute (RFC 7296 §3.15.1).
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |R|         Attribute Type      |            Length             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                             Value                             ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Values are opaque here; an empty value in a CFG_REQUEST asks for any value (§3.15.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigAttribute {
    /// The R bit, reserved: kept as received so encoding is byte-exact; send false.
    pub reserved_bit: bool,
    /// The attribute type (at most 0x7fff).
    pub ty: ConfigAttributeType,
    /// The value.
    pub value: Vec<u8>,
}

impl ConfigAttribute {
    /// An attribute with the R bit clear.
    pub fn new(ty: ConfigAttributeType, value: Vec<u8>) -> Self {
        Self { reserved_bit: false, ty, value }
    }
}

/// The R bit of the attribute type field.
const R_BIT: u16 = 0x8000;
/// The name of a configuration attribute in errors.
const ATTRIBUTE: &str = "configuration attribute";

impl Body for Configuration {
    const WHAT: &'static str = "CP payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let cfg_type = CfgType(r.u8(Self::WHAT)?);
        let reserved = r.array(Self::WHAT)?;
        let mut attributes = Vec::new();
        while !r.is_empty() {
            let raw = r.u16(ATTRIBUTE)?;
            let len = usize::from(r.u16(ATTRIBUTE)?);
            attributes.push(ConfigAttribute {
                reserved_bit: raw & R_BIT != 0,
                ty: ConfigAttributeType(raw & !R_BIT),
                value: r.take(len, ATTRIBUTE)?.to_vec(),
            });
        }
        Ok(Self { cfg_type, reserved, attributes })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.cfg_type.0);
        w.bytes(&self.reserved);
        for attribute in &self.attributes {
            if attribute.ty.0 & R_BIT != 0 {
                return Err(Error::BadValue {
                    what: "configuration attribute type",
                    value: attribute.ty.0.into(),
                });
            }
            let r = if attribute.reserved_bit { R_BIT } else { 0 };
            w.u16(attribute.ty.0 | r);
            w.u16(fit(attribute.value.len(), ATTRIBUTE)?);
            w.bytes(&attribute.value);
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
    fn cfg_values_carry_the_rfc_values() {
        assert_eq!((CfgType::REQUEST.0, CfgType::ACK.0), (1, 4));
        assert_eq!(ConfigAttributeType::INTERNAL_IP4_ADDRESS.0, 1);
        assert_eq!(ConfigAttributeType::INTERNAL_IP6_ADDRESS.0, 8);
        assert_eq!(ConfigAttributeType::INTERNAL_IP4_SUBNET.0, 13);
    }

    #[test]
    fn request_with_empty_attributes_round_trips() {
        let bytes = hex!("00 00 0010 01 000000 0001 0000 0003 0000");
        let expected = Payload::Configuration(Configuration::new(
            CfgType::REQUEST,
            vec![
                ConfigAttribute::new(ConfigAttributeType::INTERNAL_IP4_ADDRESS, vec![]),
                ConfigAttribute::new(ConfigAttributeType::INTERNAL_IP4_DNS, vec![]),
            ],
        ));
        assert_round_trip(PayloadType::CP, &bytes, &expected);
    }

    #[test]
    fn reply_with_values_and_reserved_bit_round_trips() {
        let bytes = hex!("00 00 0014 02 000000 0001 0004 c6120064 8003 0000");
        let expected = Payload::Configuration(Configuration::new(
            CfgType::REPLY,
            vec![
                ConfigAttribute::new(ConfigAttributeType::INTERNAL_IP4_ADDRESS, hex!("c6120064").to_vec()),
                ConfigAttribute {
                    reserved_bit: true,
                    ..ConfigAttribute::new(ConfigAttributeType::INTERNAL_IP4_DNS, vec![])
                },
            ],
        ));
        assert_round_trip(PayloadType::CP, &bytes, &expected);
    }

    #[test]
    fn attribute_length_past_the_payload_is_truncated() {
        assert!(matches!(
            decode_one(PayloadType::CP, &hex!("00 00 000e 01 000000 0001 0004 c612")),
            Err(Error::Truncated { what: ATTRIBUTE, .. })
        ));
    }

    #[test]
    fn attribute_type_with_the_reserved_bit_cannot_be_encoded() {
        let cp =
            Configuration::new(CfgType::SET, vec![ConfigAttribute::new(ConfigAttributeType(0x8001), vec![])]);
        assert!(matches!(encode_one(Payload::Configuration(cp)), Err(Error::BadValue { .. })));
    }
}
