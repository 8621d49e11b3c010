//! Encrypted (SK, RFC 7296 §3.14) and Encrypted Fragment (SKF, RFC 7383 §2.5) payloads.
//!
//! Both stay opaque here: splitting IV, ciphertext, padding and ICV needs the negotiated
//! algorithms, and verifying and decrypting them needs keys, so both belong to the enclave.
//! Because SK or SKF is always the last payload, its body is the tail of the datagram:
//! the associated data of an AEAD cipher (RFC 5282 §5.1), the header up to the end of the
//! SK generic header, is `datagram[..datagram.len() - data.len()]`, and an engine that
//! encodes a message with a zero-filled `data` of the final size can have the enclave
//! write the ciphertext in place over that same tail.

use super::payload::{Body, PayloadType};
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

/// Encrypted and Authenticated payload, SK (RFC 7296 §3.14).
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     Initialization Vector                     |
/// |         (length is block size for encryption algorithm)       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~                    Encrypted IKE Payloads                     ~
/// +               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |               |             Padding (0-255 octets)            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+               +-+-+-+-+-+-+-+-+
/// |                                               |  Pad Length   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~                    Integrity Checksum Data                    ~
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The Next Payload field names the first payload inside (§3.14), so it is kept here, and
/// the payload ends the message's chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Encrypted {
    /// The type of the first inner payload (NONE for an empty one, e.g. a liveness check).
    pub first_inner: PayloadType,
    /// IV, ciphertext with padding and pad length, and ICV, unsplit.
    pub data: Vec<u8>,
}

/// Encrypted and Authenticated Fragment payload, SKF (RFC 7383 §2.5).
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |        Fragment Number        |        Total Fragments        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     Initialization Vector                     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~                      Encrypted content                        ~
/// +               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |               |             Padding (0-255 octets)            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+               +-+-+-+-+-+-+-+-+
/// |                                               |  Pad Length   |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~                    Integrity Checksum Data                    ~
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Decoding checks `1 <= number <= total` (RFC 7383 §2.5 numbers fragments from 1, and a
/// number above the total is invalid). That only fragment 1 names the first inner payload
/// is left to the reassembling engine; the field is kept as received.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EncryptedFragment {
    /// In fragment 1, the type of the first inner payload; zero in the others.
    pub first_inner: PayloadType,
    /// Fragment Number, from 1.
    pub number: u16,
    /// Total Fragments of the message.
    pub total: u16,
    /// IV, ciphertext with padding and pad length, and ICV, unsplit.
    pub data: Vec<u8>,
}

impl EncryptedFragment {
    /// Fails with `BadValue` unless `1 <= number <= total`.
    fn check(&self) -> Result<()> {
        if self.number == 0 || self.number > self.total {
            return Err(Error::BadValue { what: "SKF fragment number", value: self.number.into() });
        }
        Ok(())
    }
}

impl Body for Encrypted {
    const WHAT: &'static str = "SK payload";

    /// Reads the opaque body; the chain reader fills in `first_inner`.
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self { first_inner: PayloadType::NONE, data: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.bytes(&self.data);
        Ok(())
    }
}

impl Body for EncryptedFragment {
    const WHAT: &'static str = "SKF payload";

    /// Reads the fragment numbers and the opaque body; the chain reader fills in
    /// `first_inner`.
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let fragment = Self {
            first_inner: PayloadType::NONE,
            number: r.u16(Self::WHAT)?,
            total: r.u16(Self::WHAT)?,
            data: r.rest().to_vec(),
        };
        fragment.check()?;
        Ok(fragment)
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        self.check()?;
        w.u16(self.number);
        w.u16(self.total);
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::Payload;
    use super::super::test_util::{assert_round_trip, decode_one, encode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn sk_keeps_the_first_inner_type_and_opaque_data() {
        // SK whose first inner payload is IDi (0x23).
        let bytes = hex!("23 00 000c 0001020304050607");
        let expected = Payload::Encrypted(Encrypted {
            first_inner: PayloadType::IDI,
            data: hex!("0001020304050607").to_vec(),
        });
        assert_round_trip(PayloadType::SK, &bytes, &expected);
    }

    #[test]
    fn skf_round_trips() {
        let bytes = hex!("21 00 000c 0001 0003 aabbccdd");
        let expected = Payload::EncryptedFragment(EncryptedFragment {
            first_inner: PayloadType::SA,
            number: 1,
            total: 3,
            data: hex!("aabbccdd").to_vec(),
        });
        assert_round_trip(PayloadType::SKF, &bytes, &expected);
        let later = hex!("00 00 0008 0003 0003");
        let expected = Payload::EncryptedFragment(EncryptedFragment {
            first_inner: PayloadType::NONE,
            number: 3,
            total: 3,
            data: vec![],
        });
        assert_round_trip(PayloadType::SKF, &later, &expected);
    }

    #[test]
    fn fragment_numbers_are_checked_both_ways() {
        for (number, total) in [(0, 1), (0, 0), (2, 1), (0xffff, 0xfffe)] {
            let mut bytes = hex!("00 00 0008 0000 0000");
            bytes[4..6].copy_from_slice(&u16::to_be_bytes(number));
            bytes[6..8].copy_from_slice(&u16::to_be_bytes(total));
            let expected = Error::BadValue { what: "SKF fragment number", value: number.into() };
            assert_eq!(decode_one(PayloadType::SKF, &bytes), Err(expected.clone()));
            let fragment = EncryptedFragment { first_inner: PayloadType::NONE, number, total, data: vec![] };
            assert_eq!(encode_one(Payload::EncryptedFragment(fragment)), Err(expected));
        }
    }
}
