//! Vendor ID payload (RFC 7296 §3.12).

use super::payload::Body;
use super::reader::Reader;
use super::writer::Writer;
use crate::Result;

/// Vendor ID payload (RFC 7296 §3.12): an opaque constant naming an implementation or an
/// extension it supports.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                        Vendor ID (VID)                        ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VendorId {
    /// The vendor ID, typically a hash.
    pub data: Vec<u8>,
}

impl Body for VendorId {
    const WHAT: &'static str = "Vendor ID payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self { data: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
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
    fn vendor_id_round_trips() {
        // strongSwan's vendor ID, MD5("strongSwan").
        let bytes = hex!("00 00 0014 882fe56d6fd20dbc2251613b2ebe5beb");
        let expected =
            Payload::VendorId(VendorId { data: hex!("882fe56d6fd20dbc2251613b2ebe5beb").to_vec() });
        assert_round_trip(PayloadType::VENDOR_ID, &bytes, &expected);
    }

    #[test]
    fn empty_vendor_id_round_trips() {
        let expected = Payload::VendorId(VendorId { data: vec![] });
        assert_round_trip(PayloadType::VENDOR_ID, &hex!("00 00 0004"), &expected);
    }
}
