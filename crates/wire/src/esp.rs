//! ESP packet view (RFC 4303 §2): SPI and sequence number, then IV, ciphertext and ICV.
//!
//! Only the header means anything before decryption. How the rest divides into IV,
//! ciphertext and ICV depends on the SA's transform, so those accessors take the lengths;
//! the ciphertext stays opaque here (the enclave decides what is authentic), and the
//! trailer inside it is read by [`EspTrailer`](crate::esp_trailer::EspTrailer) afterwards.

use core::ops::Range;

use crate::bytes::{ensure_room, read_u32, write_u32};
use crate::esp_trailer::TRAILER_LEN;
use crate::{Error, Result};

mod field {
    use crate::bytes::{Field, Rest};

    pub(super) const SPI: Field = 0..4;
    pub(super) const SEQUENCE_NUMBER: Field = 4..8;
    pub(super) const PAYLOAD: Rest = 8..;
}

/// Length of the ESP header: SPI and sequence number.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of an ESP packet; the packet is the whole buffer (ESP has no length
/// field, its IP or UDP container bounds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// The parts of an ESP packet after its header, for one transform's IV and ICV lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspParts<'a> {
    /// The initialization vector, sent in the clear (RFC 4303 §2.3).
    pub iv: &'a [u8],
    /// The encrypted payload, padding, pad length and next header.
    pub ciphertext: &'a [u8],
    /// The integrity check value (RFC 4303 §2.8).
    pub icv: &'a [u8],
}

/// The writable parts of an ESP packet, for filling in place while encrypting.
#[derive(Debug, PartialEq, Eq)]
pub struct EspPartsMut<'a> {
    /// The initialization vector.
    pub iv: &'a mut [u8],
    /// The payload, padding and trailer to encrypt in place.
    pub ciphertext: &'a mut [u8],
    /// The integrity check value.
    pub icv: &'a mut [u8],
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// Wraps a buffer without checks; getters may panic until `check_len` has passed.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps untrusted bytes, checking every length the getters rely on.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the SPI and sequence number are present.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated { what: "ESP header", need: HEADER_LEN, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Security Parameters Index, which selects the SA (RFC 4303 §2.1).
    pub fn spi(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SPI)
    }

    /// The low 32 bits of the sequence number (RFC 4303 §2.2; ESN keeps the high half).
    pub fn sequence_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQUENCE_NUMBER)
    }

    /// Everything after the header: IV, ciphertext and ICV, still undivided.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// Where the IV, ciphertext and ICV lie, or `Truncated` when the packet cannot hold
    /// them with at least the two trailer bytes of ciphertext (RFC 4303 §2.4–2.6).
    fn layout(&self, iv_len: usize, icv_len: usize) -> Result<[Range<usize>; 3]> {
        let have = self.buffer.as_ref().len();
        let need = HEADER_LEN.saturating_add(iv_len).saturating_add(TRAILER_LEN).saturating_add(icv_len);
        if have < need {
            return Err(Error::Truncated { what: "ESP packet", need, have });
        }
        // No overflow: each sum is at most `need`, which is at most `have`.
        let iv_end = HEADER_LEN + iv_len;
        let icv_start = have - icv_len;
        Ok([HEADER_LEN..iv_end, iv_end..icv_start, icv_start..have])
    }

    /// The IV, ciphertext and ICV for a transform with these IV and ICV lengths.
    pub fn parts(&self, iv_len: usize, icv_len: usize) -> Result<EspParts<'_>> {
        let [iv, ciphertext, icv] = self.layout(iv_len, icv_len)?;
        let data = self.buffer.as_ref();
        // `layout` returned ranges within the buffer.
        Ok(EspParts { iv: &data[iv], ciphertext: &data[ciphertext], icv: &data[icv] })
    }

    /// The bytes a non-AEAD ICV covers: header, IV and ciphertext (RFC 4303 §3.3.2.1).
    pub fn authenticated(&self, iv_len: usize, icv_len: usize) -> Result<&[u8]> {
        let [_, _, icv] = self.layout(iv_len, icv_len)?;
        Ok(&self.buffer.as_ref()[..icv.start])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    /// Sets the SPI.
    pub fn set_spi(&mut self, spi: u32) {
        write_u32(self.buffer.as_mut(), field::SPI, spi);
    }

    /// Sets the low 32 bits of the sequence number.
    pub fn set_sequence_number(&mut self, sequence_number: u32) {
        write_u32(self.buffer.as_mut(), field::SEQUENCE_NUMBER, sequence_number);
    }

    /// The IV, ciphertext and ICV, writable and disjoint, for encrypting in place.
    pub fn parts_mut(&mut self, iv_len: usize, icv_len: usize) -> Result<EspPartsMut<'_>> {
        let [_, ciphertext, _] = self.layout(iv_len, icv_len)?;
        let rest = &mut self.buffer.as_mut()[HEADER_LEN..];
        // `layout` proved HEADER_LEN + iv_len <= icv.start <= len, so both splits are in bounds.
        let (iv, rest) = rest.split_at_mut(iv_len);
        let (ciphertext, icv) = rest.split_at_mut(ciphertext.len());
        Ok(EspPartsMut { iv, ciphertext, icv })
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EspPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of an ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspRepr {
    /// Security Parameters Index; never zero on the wire.
    pub spi: u32,
    /// Low 32 bits of the sequence number.
    pub sequence_number: u32,
}

impl EspRepr {
    /// Reads a checked packet's header.
    ///
    /// SPI 0 is reserved for local use and must not be sent (RFC 4303 §2.1), so it is
    /// rejected with `BadValue`. SPIs 1–255 are reserved by IANA for future use but may
    /// appear once assigned, so they pass; the SA lookup will not know them.
    pub fn parse<T: AsRef<[u8]>>(packet: &EspPacket<T>) -> Result<Self> {
        let spi = packet.spi();
        if spi == 0 {
            return Err(Error::BadValue { what: "ESP SPI", value: 0 });
        }
        Ok(Self { spi, sequence_number: packet.sequence_number() })
    }

    /// Length of the header this emits.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; SPI 0 is refused (RFC 4303 §2.1).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut EspPacket<T>) -> Result<()> {
        if self.spi == 0 {
            return Err(Error::BadValue { what: "ESP SPI", value: 0 });
        }
        ensure_room("ESP header", packet.buffer.as_ref().len(), HEADER_LEN)?;
        packet.set_spi(self.spi);
        packet.set_sequence_number(self.sequence_number);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// SPI 0xc0ffee01, sequence 7, AES-GCM layout: 8-byte IV, 16 bytes ciphertext,
    /// 16-byte ICV (RFC 4106 §3).
    static PACKET_BYTES: [u8; 48] = hex!(
        "c0ff ee01 0000 0007"
        "0001 0203 0405 0607"
        "8b1a 2c3d 4e5f 6071 8293 a4b5 c6d7 e8f9"
        "f0e1 d2c3 b4a5 9687 7869 5a4b 3c2d 1e0f"
    );

    const REPR: EspRepr = EspRepr { spi: 0xc0ff_ee01, sequence_number: 7 };

    #[test]
    fn deconstruct_reads_header_and_parts() -> Result<()> {
        let packet = EspPacket::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(packet.spi(), 0xc0ff_ee01);
        assert_eq!(packet.sequence_number(), 7);
        assert_eq!(packet.payload(), &PACKET_BYTES[8..]);
        let parts = packet.parts(8, 16)?;
        assert_eq!(parts.iv, &hex!("0001 0203 0405 0607"));
        assert_eq!(parts.ciphertext, &hex!("8b1a 2c3d 4e5f 6071 8293 a4b5 c6d7 e8f9"));
        assert_eq!(parts.icv, &hex!("f0e1 d2c3 b4a5 9687 7869 5a4b 3c2d 1e0f"));
        assert_eq!(packet.authenticated(8, 16)?, &PACKET_BYTES[..32]);
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() -> Result<()> {
        let mut bytes = [0xa5; 48];
        let mut packet = EspPacket::new_unchecked(&mut bytes[..]);
        packet.set_spi(0xc0ff_ee01);
        packet.set_sequence_number(7);
        let parts = packet.parts_mut(8, 16)?;
        parts.iv.copy_from_slice(&PACKET_BYTES[8..16]);
        parts.ciphertext.copy_from_slice(&PACKET_BYTES[16..32]);
        parts.icv.copy_from_slice(&PACKET_BYTES[32..]);
        assert_eq!(bytes, PACKET_BYTES);
        Ok(())
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        assert_eq!(EspRepr::parse(&EspPacket::new_checked(&PACKET_BYTES[..])?)?, REPR);
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal_header() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        bytes[..8].fill(0);
        REPR.emit(&mut EspPacket::new_unchecked(&mut bytes[..]))?;
        assert_eq!(bytes, PACKET_BYTES);
        Ok(())
    }

    #[test]
    fn spi_zero_is_rejected_both_ways() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        bytes[..4].fill(0);
        assert_eq!(
            EspRepr::parse(&EspPacket::new_checked(&bytes[..])?),
            Err(Error::BadValue { what: "ESP SPI", value: 0 })
        );
        let zero = EspRepr { spi: 0, sequence_number: 1 };
        assert_eq!(
            zero.emit(&mut EspPacket::new_unchecked(&mut bytes[..])),
            Err(Error::BadValue { what: "ESP SPI", value: 0 })
        );
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..HEADER_LEN {
            assert!(EspPacket::new_checked(&PACKET_BYTES[..len]).is_err(), "length {len}");
        }
        // Header, IV, two bytes of ciphertext and ICV are the least a GCM packet can be.
        for len in HEADER_LEN..HEADER_LEN + 8 + TRAILER_LEN + 16 {
            let packet = EspPacket::new_unchecked(&PACKET_BYTES[..len]);
            assert!(packet.parts(8, 16).is_err(), "length {len}");
            assert!(packet.authenticated(8, 16).is_err(), "length {len}");
        }
        let packet = EspPacket::new_unchecked(&PACKET_BYTES[..34]);
        assert_eq!(packet.parts(8, 16).map(|parts| parts.ciphertext.len()), Ok(2));
    }

    #[test]
    fn huge_transform_lengths_do_not_overflow() {
        let packet = EspPacket::new_unchecked(&PACKET_BYTES[..]);
        assert!(matches!(
            packet.parts(usize::MAX, usize::MAX),
            Err(Error::Truncated { what: "ESP packet", need: usize::MAX, have: 48 })
        ));
    }

    #[test]
    fn emit_rejects_short_buffers() {
        let mut bytes = [0; 7];
        assert_eq!(
            REPR.emit(&mut EspPacket::new_unchecked(&mut bytes[..])),
            Err(Error::BufferTooSmall { what: "ESP header", need: 8, have: 7 })
        );
    }
}
