//! Key Exchange payload (RFC 7296 §3.4).

use super::payload::Body;
use super::reader::Reader;
use super::transform::DhGroup;
use super::writer::Writer;
use crate::Result;

/// Key Exchange payload (RFC 7296 §3.4): the sender's public value for one group.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   Diffie-Hellman Group Num    |           RESERVED            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                       Key Exchange Data                       ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The data's length is fixed by the group; checking it needs the group's parameters, so
/// the engine does it (and answers INVALID_KE_PAYLOAD or INVALID_SYNTAX, §1.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyExchange {
    /// The group (key exchange method) the data belongs to.
    pub group: DhGroup,
    /// The RESERVED field, kept as received so encoding is byte-exact; send zero.
    pub reserved: u16,
    /// The public value.
    pub data: Vec<u8>,
}

impl KeyExchange {
    /// A KE payload with a zero RESERVED field.
    pub fn new(group: DhGroup, data: Vec<u8>) -> Self {
        Self { group, reserved: 0, data }
    }
}

impl Body for KeyExchange {
    const WHAT: &'static str = "KE payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self { group: DhGroup(r.u16(Self::WHAT)?), reserved: r.u16(Self::WHAT)?, data: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u16(self.group.0);
        w.u16(self.reserved);
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::assert_round_trip;
    use super::*;
    use hex_literal::hex;

    #[test]
    fn key_exchange_round_trips() {
        let bytes = hex!("00 00 0010 0013 0000 0102030405060708");
        let expected =
            Payload::KeyExchange(KeyExchange::new(DhGroup::ECP_256, hex!("0102030405060708").to_vec()));
        assert_round_trip(PayloadType::KE, &bytes, &expected);
    }

    #[test]
    fn reserved_field_is_kept() {
        let bytes = hex!("00 00 0008 001f abcd");
        let expected =
            Payload::KeyExchange(KeyExchange { group: DhGroup::CURVE25519, reserved: 0xabcd, data: vec![] });
        assert_round_trip(PayloadType::KE, &bytes, &expected);
    }
}
