//! Delete payload (RFC 7296 §3.11).

use super::payload::Body;
use super::reader::Reader;
use super::sa::ProtocolId;
use super::writer::{fit, Writer};
use crate::{Error, Result};

/// Delete payload, D (RFC 7296 §3.11): the SAs the sender has removed.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Protocol ID   |   SPI Size    |          Num of SPIs          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~               Security Parameter Index(es) (SPI)              ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Deleting the IKE SA carries no SPI (size and count zero, the SPIs are in the header);
/// ESP and AH SPIs have four octets (§3.11). SPIs of size zero with a non-zero count are
/// refused for every protocol: they describe nothing and would let eight bytes of input
/// claim 65535 list entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delete {
    /// The protocol of the deleted SAs.
    pub protocol: ProtocolId,
    /// The SPI Size field; needed because the list may be empty.
    pub spi_size: u8,
    /// The deleted SAs' SPIs, each `spi_size` octets: the SPIs the sender expects inbound.
    pub spis: Vec<Vec<u8>>,
}

impl Delete {
    /// A Delete of the IKE SA this message belongs to.
    pub fn ike() -> Self {
        Self { protocol: ProtocolId::IKE, spi_size: 0, spis: Vec::new() }
    }

    /// A Delete of ESP or AH SAs by their four-octet SPIs.
    pub fn child(protocol: ProtocolId, spis: &[u32]) -> Self {
        Self { protocol, spi_size: 4, spis: spis.iter().map(|s| s.to_be_bytes().to_vec()).collect() }
    }

    /// The four-octet SPIs as numbers (none if the SPI size is not four).
    pub fn child_spis(&self) -> impl Iterator<Item = u32> + '_ {
        self.spis.iter().filter_map(|s| <[u8; 4]>::try_from(s.as_slice()).ok()).map(u32::from_be_bytes)
    }

    /// Fails unless the SPI size fits the protocol and the count (§3.11).
    fn check(&self, count: usize) -> Result<()> {
        let size_fits = match self.protocol {
            ProtocolId::IKE => self.spi_size == 0,
            ProtocolId::AH | ProtocolId::ESP => self.spi_size == 4,
            _ => true,
        };
        if !size_fits {
            return Err(Error::BadLength {
                what: "Delete SPI size",
                len: self.spi_size.into(),
                why: "IKE deletes carry no SPI, ESP and AH SPIs have 4 octets",
            });
        }
        if self.spi_size == 0 && count != 0 {
            return Err(Error::BadValue {
                what: "Delete SPI count",
                value: u64::try_from(count).unwrap_or(u64::MAX),
            });
        }
        Ok(())
    }
}

impl Body for Delete {
    const WHAT: &'static str = "Delete payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let mut delete =
            Self { protocol: ProtocolId(r.u8(Self::WHAT)?), spi_size: r.u8(Self::WHAT)?, spis: Vec::new() };
        let count = usize::from(r.u16(Self::WHAT)?);
        delete.check(count)?;
        // Grows only as SPIs are actually read, so a large count cannot allocate ahead.
        for _ in 0..count {
            let spi = r.take(delete.spi_size.into(), "Delete SPI")?;
            delete.spis.push(spi.to_vec());
        }
        Ok(delete)
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        self.check(self.spis.len())?;
        w.u8(self.protocol.0);
        w.u8(self.spi_size);
        w.u16(fit(self.spis.len(), "Delete SPI count")?);
        for spi in &self.spis {
            if spi.len() != usize::from(self.spi_size) {
                return Err(Error::BadLength {
                    what: "Delete SPI",
                    len: spi.len(),
                    why: "differs from the SPI size",
                });
            }
            w.bytes(spi);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_rejects_extra_octet, assert_round_trip};
    use super::super::test_util::{decode_one, encode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn ike_delete_round_trips() {
        let bytes = hex!("00 00 0008 01 00 0000");
        assert_round_trip(PayloadType::DELETE, &bytes, &Payload::Delete(Delete::ike()));
    }

    #[test]
    fn esp_delete_round_trips() {
        let bytes = hex!("00 00 0010 03 04 0002 c0ffee01 c0ffee02");
        let delete = Delete::child(ProtocolId::ESP, &[0xc0ff_ee01, 0xc0ff_ee02]);
        assert_eq!(delete.child_spis().collect::<Vec<_>>(), [0xc0ff_ee01, 0xc0ff_ee02]);
        assert_round_trip(PayloadType::DELETE, &bytes, &Payload::Delete(delete));
        assert_rejects_extra_octet(PayloadType::DELETE, &bytes);
    }

    #[test]
    fn spi_sizes_must_fit_the_protocol() {
        for bytes in
            [hex!("00 00 0008 01 08 0000"), hex!("00 00 0008 03 08 0000"), hex!("00 00 0008 02 00 0000")]
        {
            assert!(
                matches!(decode_one(PayloadType::DELETE, &bytes), Err(Error::BadLength { .. })),
                "{bytes:02x?}"
            );
        }
    }

    #[test]
    fn zero_size_spis_with_a_count_are_rejected() {
        assert_eq!(
            decode_one(PayloadType::DELETE, &hex!("00 00 0008 07 00 ffff")),
            Err(Error::BadValue { what: "Delete SPI count", value: 0xffff })
        );
        assert_eq!(
            decode_one(PayloadType::DELETE, &hex!("00 00 0008 01 00 0001")),
            Err(Error::BadValue { what: "Delete SPI count", value: 1 })
        );
    }

    #[test]
    fn count_beyond_the_payload_is_truncated() {
        assert!(matches!(
            decode_one(PayloadType::DELETE, &hex!("00 00 000c 03 04 0002 c0ffee01")),
            Err(Error::Truncated { what: "Delete SPI", .. })
        ));
    }

    #[test]
    fn spi_of_the_wrong_size_cannot_be_encoded() {
        let delete = Delete { spis: vec![vec![1, 2, 3]], ..Delete::child(ProtocolId::ESP, &[]) };
        assert!(matches!(
            encode_one(Payload::Delete(delete)),
            Err(Error::BadLength { what: "Delete SPI", .. })
        ));
    }
}
