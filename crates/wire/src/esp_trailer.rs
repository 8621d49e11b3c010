//! The ESP trailer (RFC 4303 §2.4–2.6): padding, pad length and next header.
//!
//! The trailer is encrypted, so it only exists in a decrypted plaintext: `parse` runs on
//! what the enclave returned after verifying the ICV, and `emit` builds the plaintext the
//! enclave will encrypt. Traffic-flow-confidentiality padding (RFC 4303 §2.7) is not
//! emitted.

use crate::bytes::ensure_room;
use crate::ip::IpProtocol;
use crate::{Error, Result};

/// Length of the pad length and next header fields.
pub const TRAILER_LEN: usize = 2;

/// The least alignment of the ciphertext: pad length and next header end a 4-byte word
/// even when the cipher has no block size (RFC 4303 §2.4).
pub const MIN_ALIGN: usize = 4;

/// The largest alignment `EspTrailer::new` accepts: its padding must fit the one-byte pad
/// length field.
pub const MAX_ALIGN: usize = 256;

/// The pad length and next header of a decrypted ESP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspTrailer {
    /// Number of padding bytes before the pad length field.
    pub pad_len: u8,
    /// Protocol of the inner payload: `IPV4`/`IPV6` in tunnel mode, `IPV6_NO_NEXT_HEADER`
    /// for a dummy packet the receiver discards (RFC 4303 §2.6).
    pub next_header: IpProtocol,
}

impl EspTrailer {
    /// Splits a decrypted plaintext into the inner payload and the trailer, checking that
    /// the padding is the default 1, 2, 3, … sequence (RFC 4303 §2.4, "the receiver SHOULD
    /// inspect the Padding field").
    pub fn parse(plaintext: &[u8]) -> Result<(&[u8], Self)> {
        let [rest @ .., pad_len, next_header] = plaintext else {
            return Err(Error::Truncated { what: "ESP trailer", need: TRAILER_LEN, have: plaintext.len() });
        };
        let (pad_len, next_header) = (*pad_len, IpProtocol(*next_header));
        let Some(payload_len) = rest.len().checked_sub(usize::from(pad_len)) else {
            return Err(Error::BadLength {
                what: "ESP pad length",
                len: usize::from(pad_len),
                why: "longer than the decrypted payload",
            });
        };
        let (payload, padding) = rest.split_at(payload_len);
        // At most 255 padding bytes, so the 1..=255 counter covers every one.
        for (expected, &found) in (1..=u8::MAX).zip(padding) {
            if found != expected {
                return Err(Error::BadValue { what: "ESP padding", value: u64::from(found) });
            }
        }
        Ok((payload, Self { pad_len, next_header }))
    }

    /// The trailer for a `payload_len`-byte payload whose ciphertext must be a multiple of
    /// `block_size` (a power of two; values below [`MIN_ALIGN`] mean 4-byte alignment).
    #[inline]
    pub fn new(payload_len: usize, block_size: usize, next_header: IpProtocol) -> Result<Self> {
        if !block_size.is_power_of_two() || block_size > MAX_ALIGN {
            return Err(Error::BadValue { what: "ESP padding alignment", value: block_size as u64 });
        }
        let align = block_size.max(MIN_ALIGN);
        // `align` is a power of two: masks, not a division per packet.
        let unaligned = payload_len
            .checked_add(TRAILER_LEN)
            .ok_or(Error::TooLong { what: "ESP payload", len: payload_len })?
            & (align - 1);
        // `align` is at most 256, so the padding is at most 255 and always fits.
        let pad_len = u8::try_from((align - unaligned) & (align - 1))
            .map_err(|_| Error::BadValue { what: "ESP padding alignment", value: block_size as u64 })?;
        Ok(Self { pad_len, next_header })
    }

    /// Length of payload, padding and trailer together.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        payload_len.saturating_add(self.pad_len as usize).saturating_add(TRAILER_LEN)
    }

    /// Lets `emit_payload` write the payload into the first `payload_len` bytes of
    /// `plaintext`, then writes the default padding, pad length and next header after it.
    pub fn emit<F: FnOnce(&mut [u8])>(
        &self,
        plaintext: &mut [u8],
        payload_len: usize,
        emit_payload: F,
    ) -> Result<()> {
        let len = self.buffer_len(payload_len);
        ensure_room("ESP plaintext", plaintext.len(), len)?;
        // `plaintext` holds at least `len` bytes, so every range below is in bounds.
        let (payload, rest) = plaintext[..len].split_at_mut(payload_len);
        emit_payload(payload);
        let (padding, trailer) = rest.split_at_mut(usize::from(self.pad_len));
        for (byte, value) in padding.iter_mut().zip(1..=u8::MAX) {
            *byte = value;
        }
        trailer.copy_from_slice(&[self.pad_len, self.next_header.0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// A 5-byte payload padded for a 16-byte block: 5 + 9 + 2 = 16, next header IPv4.
    static PLAINTEXT: [u8; 16] = hex!("4500 0014 00 0102 0304 0506 0708 09 09 04");

    #[test]
    fn parse_splits_payload_and_trailer() -> Result<()> {
        let (payload, trailer) = EspTrailer::parse(&PLAINTEXT)?;
        assert_eq!(payload, &hex!("4500 0014 00"));
        assert_eq!(trailer, EspTrailer { pad_len: 9, next_header: IpProtocol::IPV4 });
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        let trailer = EspTrailer::new(5, 16, IpProtocol::IPV4)?;
        assert_eq!(trailer.pad_len, 9);
        assert_eq!(trailer.buffer_len(5), 16);
        let mut plaintext = [0xa5; 16];
        trailer.emit(&mut plaintext, 5, |payload| payload.copy_from_slice(&hex!("4500 0014 00")))?;
        assert_eq!(plaintext, PLAINTEXT);
        Ok(())
    }

    #[test]
    fn padding_reaches_at_least_four_byte_alignment() -> Result<()> {
        // AES-GCM has no block size (RFC 4106 §3): 4-byte alignment still applies.
        for payload_len in 0..64 {
            let trailer = EspTrailer::new(payload_len, 1, IpProtocol::IPV6)?;
            assert_eq!(trailer.buffer_len(payload_len) % MIN_ALIGN, 0);
            assert!(usize::from(trailer.pad_len) < MIN_ALIGN);
            let trailer = EspTrailer::new(payload_len, 16, IpProtocol::IPV6)?;
            assert_eq!(trailer.buffer_len(payload_len) % 16, 0);
        }
        let widest = EspTrailer::new(0, MAX_ALIGN, IpProtocol::IPV4)?;
        assert_eq!(widest.pad_len, 254);
        Ok(())
    }

    #[test]
    fn empty_payload_dummy_packet_round_trips() -> Result<()> {
        let trailer = EspTrailer::new(0, 4, IpProtocol::IPV6_NO_NEXT_HEADER)?;
        let mut plaintext = [0; 4];
        trailer.emit(&mut plaintext, 0, |_| ())?;
        assert_eq!(plaintext, hex!("0102 023b"));
        assert_eq!(EspTrailer::parse(&plaintext)?, (&[][..], trailer));
        Ok(())
    }

    #[test]
    fn parse_rejects_wrong_padding() {
        let mut plaintext = PLAINTEXT;
        plaintext[9] = 0;
        assert_eq!(EspTrailer::parse(&plaintext), Err(Error::BadValue { what: "ESP padding", value: 0 }));
    }

    #[test]
    fn parse_rejects_pad_length_beyond_the_payload() {
        assert_eq!(
            EspTrailer::parse(&hex!("0102 03 04")),
            Err(Error::BadLength {
                what: "ESP pad length",
                len: 3,
                why: "longer than the decrypted payload"
            })
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        assert!(EspTrailer::parse(&[]).is_err());
        assert!(EspTrailer::parse(&[4]).is_err());
        // Cutting from the front keeps a valid trailer until the padding is cut.
        for start in 0..PLAINTEXT.len() {
            let result = EspTrailer::parse(&PLAINTEXT[start..]);
            assert_eq!(result.is_ok(), start <= 5, "start {start}");
        }
    }

    #[test]
    fn new_rejects_odd_alignments() {
        for block_size in [0, 3, 12, 512] {
            assert!(matches!(
                EspTrailer::new(10, block_size, IpProtocol::IPV4),
                Err(Error::BadValue { what: "ESP padding alignment", .. })
            ));
        }
    }

    #[test]
    fn emit_rejects_short_buffers() -> Result<()> {
        let trailer = EspTrailer::new(5, 16, IpProtocol::IPV4)?;
        let mut plaintext = [0; 15];
        assert_eq!(
            trailer.emit(&mut plaintext, 5, |_| ()),
            Err(Error::BufferTooSmall { what: "ESP plaintext", need: 16, have: 15 })
        );
        Ok(())
    }
}
