//! Nonce payload (RFC 7296 §3.9).

use super::payload::Body;
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

/// Nonce payload, Ni or Nr (RFC 7296 §3.9): fresh random data from the sender.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                            Nonce Data                         ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// "The size of the Nonce Data MUST be between 16 and 256 octets, inclusive" (§3.9): both
/// decoding and encoding enforce it. That it is also at least half the PRF key size (§2.10)
/// depends on the negotiated PRF and is the engine's check.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Nonce {
    /// The nonce data, 16 to 256 octets.
    pub data: Vec<u8>,
}

impl Nonce {
    /// The shortest nonce allowed (§3.9).
    pub const MIN_LEN: usize = 16;
    /// The longest nonce allowed (§3.9).
    pub const MAX_LEN: usize = 256;

    /// Fails with `BadLength` unless `len` is within 16..=256.
    fn check_len(len: usize) -> Result<()> {
        if (Self::MIN_LEN..=Self::MAX_LEN).contains(&len) {
            Ok(())
        } else {
            Err(Error::BadLength { what: Self::WHAT, len, why: "nonce data must be 16 to 256 octets" })
        }
    }
}

impl Body for Nonce {
    const WHAT: &'static str = "Nonce payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let data = r.rest();
        Self::check_len(data.len())?;
        Ok(Self { data: data.to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        Self::check_len(self.data.len())?;
        w.bytes(&self.data);
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
    fn nonce_round_trips() {
        let bytes = hex!("00 00 0014 00112233445566778899aabbccddeeff");
        let expected = Payload::Nonce(Nonce { data: hex!("00112233445566778899aabbccddeeff").to_vec() });
        assert_round_trip(PayloadType::NONCE, &bytes, &expected);
    }

    #[test]
    fn nonce_length_limits_are_inclusive() {
        for len in [16, 256] {
            let mut bytes = vec![0, 0];
            bytes.extend_from_slice(&u16::try_from(len + 4).unwrap_or(0).to_be_bytes());
            bytes.resize(len + 4, 0x5a);
            assert!(decode_one(PayloadType::NONCE, &bytes).is_ok(), "{len}");
        }
    }

    #[test]
    fn nonce_outside_limits_is_rejected_both_ways() {
        for len in [0, 15, 257] {
            let mut bytes = vec![0, 0];
            bytes.extend_from_slice(&u16::try_from(len + 4).unwrap_or(0).to_be_bytes());
            bytes.resize(len + 4, 0x5a);
            let expected =
                Error::BadLength { what: "Nonce payload", len, why: "nonce data must be 16 to 256 octets" };
            assert_eq!(decode_one(PayloadType::NONCE, &bytes), Err(expected.clone()));
            let nonce = Payload::Nonce(Nonce { data: vec![0x5a; len] });
            assert_eq!(encode_one(nonce), Err(expected));
        }
    }
}
