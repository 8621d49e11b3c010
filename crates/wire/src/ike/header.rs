//! The IKE header (RFC 7296 §3.1) and the exchange type registry.

use super::macros::registry;
use super::payload::PayloadType;
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

registry! {
    /// IKEv2 exchange types (RFC 7296 §3.1, IANA "IKEv2 Exchange Types").
    pub struct ExchangeType(u8) {
        /// IKE_SA_INIT (34): Initial exchange: SA, KE, nonces (RFC 7296 §1.2).
        IKE_SA_INIT = 0x22,
        /// IKE_AUTH (35): Authentication and the first Child SA (RFC 7296 §1.2).
        IKE_AUTH = 0x23,
        /// CREATE_CHILD_SA (36): New or rekeyed Child SA, or IKE SA rekey (RFC 7296 §1.3).
        CREATE_CHILD_SA = 0x24,
        /// INFORMATIONAL (37): Notifications, deletes, liveness (RFC 7296 §1.4).
        INFORMATIONAL = 0x25,
        /// IKE_SESSION_RESUME (38): Session resumption with a ticket (RFC 5723).
        IKE_SESSION_RESUME = 0x26,
        /// GSA_AUTH (39): Group member registration, authenticated (RFC 9838).
        GSA_AUTH = 0x27,
        /// GSA_REGISTRATION (40): Group member registration (RFC 9838).
        GSA_REGISTRATION = 0x28,
        /// GSA_REKEY (41): Group rekey (RFC 9838).
        GSA_REKEY = 0x29,
        /// IKE_INTERMEDIATE (43): Intermediate exchange before IKE_AUTH (RFC 9242).
        IKE_INTERMEDIATE = 0x2b,
        /// IKE_FOLLOWUP_KE (44): Follow-up key exchange of a multiple-KE CREATE_CHILD_SA (RFC
        /// 9370).
        IKE_FOLLOWUP_KE = 0x2c,
    }
}

/// The Flags octet of the IKE header (RFC 7296 §3.1).
///
/// The five other bits "MUST be cleared when sending and MUST be ignored on receipt"; they
/// are kept as received so that re-encoding is byte-exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderFlags(pub u8);

impl HeaderFlags {
    /// I: set in messages sent by the original initiator of the IKE SA.
    pub const INITIATOR: Self = Self(0x08);
    /// V: the sender can speak a higher major version; never set by IKEv2 implementations.
    pub const VERSION: Self = Self(0x10);
    /// R: this message is a response to the message with the same message ID.
    pub const RESPONSE: Self = Self(0x20);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags with the bits of `other` set as well.
    #[must_use]
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether the Initiator bit is set.
    pub fn initiator(self) -> bool {
        self.contains(Self::INITIATOR)
    }

    /// Whether the Response bit is set.
    pub fn response(self) -> bool {
        self.contains(Self::RESPONSE)
    }
}

/// The IKE header (RFC 7296 §3.1), without the Next Payload and Length fields, which are
/// derived from the payloads when encoding.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       IKE SA Initiator's SPI                  |
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       IKE SA Responder's SPI                  |
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Next Payload | MjVer | MnVer | Exchange Type |     Flags     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                          Message ID                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                            Length                             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IkeHeader {
    /// The IKE SA initiator's SPI, never zero.
    pub initiator_spi: u64,
    /// The IKE SA responder's SPI, zero in the first IKE_SA_INIT request.
    pub responder_spi: u64,
    /// The Version octet: major version in the high four bits (2), minor in the low four.
    /// The minor version is ignored on receipt (§2.5) and kept as received.
    pub version: u8,
    /// The exchange this message belongs to.
    pub exchange_type: ExchangeType,
    /// Initiator, Version and Response flags.
    pub flags: HeaderFlags,
    /// The message ID, which orders requests and matches responses (§2.2).
    pub message_id: u32,
}

/// An IKE header read without checking the version or length, with the two fields that
/// [`IkeHeader`] leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeekedHeader {
    /// The header.
    pub header: IkeHeader,
    /// The type of the first payload.
    pub next_payload: PayloadType,
    /// The Length field: the whole message, header included.
    pub length: u32,
}

/// The header's name in errors.
const WHAT: &str = "IKE header";

impl IkeHeader {
    /// The header's length on the wire.
    pub const LEN: usize = 28;
    /// The Version octet of IKEv2.0: major 2, minor 0.
    pub const VERSION_2_0: u8 = 0x20;
    /// The one major version this codec speaks.
    pub const MAJOR_VERSION: u8 = 2;

    /// A version 2.0 header.
    pub fn new(
        initiator_spi: u64,
        responder_spi: u64,
        exchange_type: ExchangeType,
        flags: HeaderFlags,
        message_id: u32,
    ) -> Self {
        Self { initiator_spi, responder_spi, version: Self::VERSION_2_0, exchange_type, flags, message_id }
    }

    /// The major version (high four bits of the Version octet).
    pub fn major_version(&self) -> u8 {
        self.version >> 4
    }

    /// The minor version (low four bits of the Version octet).
    pub fn minor_version(&self) -> u8 {
        self.version & 0x0f
    }

    /// Reads the fixed header of a datagram without checking the version or the length, so
    /// the engine can find the IKE SA and message ID to answer with even when
    /// [`super::Message::decode`] fails, e.g. with INVALID_MAJOR_VERSION or
    /// UNSUPPORTED_CRITICAL_PAYLOAD (§2.5). Fails only on fewer than 28 bytes.
    pub fn peek(datagram: &[u8]) -> Result<PeekedHeader> {
        Self::read(&mut Reader::new(datagram))
    }

    /// Reads the 28 header octets.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<PeekedHeader> {
        let mut h = r.sub(Self::LEN, WHAT)?;
        let initiator_spi = h.u64(WHAT)?;
        let responder_spi = h.u64(WHAT)?;
        let next_payload = PayloadType(h.u8(WHAT)?);
        let version = h.u8(WHAT)?;
        let exchange_type = ExchangeType(h.u8(WHAT)?);
        let flags = HeaderFlags(h.u8(WHAT)?);
        let message_id = h.u32(WHAT)?;
        let length = h.u32(WHAT)?;
        h.finish(WHAT)?;
        Ok(PeekedHeader {
            header: Self { initiator_spi, responder_spi, version, exchange_type, flags, message_id },
            next_payload,
            length,
        })
    }

    /// Fails with `InvalidMajorVersion` unless the major version is 2.
    pub(crate) fn check_version(&self) -> Result<()> {
        if self.major_version() == Self::MAJOR_VERSION {
            Ok(())
        } else {
            Err(Error::InvalidMajorVersion { version: self.major_version() })
        }
    }

    /// Writes the header with a placeholder length; returns the length field's position.
    pub(crate) fn write(&self, next_payload: PayloadType, w: &mut Writer<'_>) -> Result<usize> {
        self.check_version()?;
        w.u64(self.initiator_spi);
        w.u64(self.responder_spi);
        w.u8(next_payload.0);
        w.u8(self.version);
        w.u8(self.exchange_type.0);
        w.u8(self.flags.0);
        w.u32(self.message_id);
        Ok(w.len32())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    const HEADER: [u8; 28] = hex!("0011223344556677 8899aabbccddeeff 21 20 22 08 00000000 0000001c");

    #[test]
    fn exchange_types_carry_the_rfc_values() {
        assert_eq!(ExchangeType::IKE_SA_INIT.0, 34);
        assert_eq!(ExchangeType::IKE_AUTH.0, 35);
        assert_eq!(ExchangeType::CREATE_CHILD_SA.0, 36);
        assert_eq!(ExchangeType::INFORMATIONAL.0, 37);
        assert_eq!(ExchangeType::IKE_SESSION_RESUME.0, 38);
        assert_eq!(ExchangeType::IKE_INTERMEDIATE.0, 43);
        assert_eq!(format!("{:?}", ExchangeType(34)), "IKE_SA_INIT");
        assert_eq!(format!("{:?}", ExchangeType(0xf0)), "Unknown(0xf0)");
    }

    #[test]
    fn header_deconstructs() -> Result<()> {
        let peeked = IkeHeader::peek(&HEADER)?;
        assert_eq!(peeked.next_payload, PayloadType::SA);
        assert_eq!(peeked.length, 28);
        let header = peeked.header;
        assert_eq!(header.initiator_spi, 0x0011_2233_4455_6677);
        assert_eq!(header.responder_spi, 0x8899_aabb_ccdd_eeff);
        assert_eq!((header.major_version(), header.minor_version()), (2, 0));
        assert_eq!(header.exchange_type, ExchangeType::IKE_SA_INIT);
        assert!(header.flags.initiator() && !header.flags.response());
        assert_eq!(header.message_id, 0);
        Ok(())
    }

    #[test]
    fn header_constructs() -> Result<()> {
        let header = IkeHeader::new(
            0x0011_2233_4455_6677,
            0x8899_aabb_ccdd_eeff,
            ExchangeType::IKE_SA_INIT,
            HeaderFlags::INITIATOR,
            0,
        );
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        let at = header.write(PayloadType::SA, &mut w)?;
        w.patch_len32(0, at, WHAT)?;
        assert_eq!(out, HEADER);
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..HEADER.len() {
            assert!(matches!(IkeHeader::peek(&HEADER[..len]), Err(Error::Truncated { .. })), "{len}");
        }
    }

    #[test]
    fn flags_combine_and_test() {
        let flags = HeaderFlags::INITIATOR.with(HeaderFlags::RESPONSE);
        assert_eq!(flags, HeaderFlags(0x28));
        assert!(flags.initiator() && flags.response());
        assert!(!flags.contains(HeaderFlags::VERSION));
    }

    #[test]
    fn other_major_versions_cannot_be_encoded() {
        let header = IkeHeader {
            version: 0x10,
            ..IkeHeader::new(1, 0, ExchangeType::IKE_SA_INIT, HeaderFlags::INITIATOR, 0)
        };
        let mut out = Vec::new();
        assert_eq!(
            header.write(PayloadType::NONE, &mut Writer::new(&mut out)),
            Err(Error::InvalidMajorVersion { version: 1 })
        );
    }
}
