//! What arrives on UDP port 4500 (RFC 3948 §2): NAT-keepalive, IKE after the non-ESP
//! marker, or ESP.

use crate::bytes::ensure_room;
use crate::esp;
use crate::{Error, Result};

/// The UDP port for IKE and ESP behind a NAT (RFC 3948 §2, RFC 7296 §2.23).
pub const PORT: u16 = 4500;

/// Four zero bytes in the SPI's place, marking an IKE message (RFC 3948 §2.2).
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];

/// How ESP travels between two tunnel endpoints: the one definition the IKE engine
/// negotiates (NAT detection, RFC 7296 §2.23) and the ESP data plane sends by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encapsulation {
    /// Directly in IP, protocol 50 (RFC 4303).
    Esp,
    /// In UDP (RFC 3948), behind a NAT or when forced: usually port 4500 on both sides.
    Udp {
        /// Our UDP port.
        local_port: u16,
        /// The peer's UDP port (as seen after its NAT).
        remote_port: u16,
    },
}

/// The one-byte NAT-keepalive payload (RFC 3948 §2.3).
pub const NAT_KEEPALIVE: [u8; 1] = [0xff];

/// A UDP payload on port 4500, classified by its first bytes (RFC 3948 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpEncapPayload<'a> {
    /// A NAT-keepalive, to be discarded once it has refreshed the NAT mapping.
    Keepalive,
    /// An IKE message, the non-ESP marker already removed.
    Ike(&'a [u8]),
    /// An ESP packet, starting with its non-zero SPI.
    Esp(&'a [u8]),
}

impl<'a> UdpEncapPayload<'a> {
    /// Tells the three payloads apart. Only valid on port 4500: on port 500 IKE has no
    /// marker (RFC 7296 §2.23).
    ///
    /// A single byte other than 0xFF, a payload too short for the marker or SPI, and ESP
    /// shorter than its 8-byte header are errors.
    pub fn classify(payload: &'a [u8]) -> Result<Self> {
        match payload {
            [0xff] => Ok(Self::Keepalive),
            [other] => Err(Error::BadValue { what: "NAT-keepalive", value: u64::from(*other) }),
            [0, 0, 0, 0, ike @ ..] => Ok(Self::Ike(ike)),
            _ if payload.len() < NON_ESP_MARKER.len() => Err(Error::Truncated {
                what: "UDP-encapsulated payload",
                need: NON_ESP_MARKER.len(),
                have: payload.len(),
            }),
            _ if payload.len() < esp::HEADER_LEN => Err(Error::Truncated {
                what: "UDP-encapsulated ESP",
                need: esp::HEADER_LEN,
                have: payload.len(),
            }),
            esp => Ok(Self::Esp(esp)),
        }
    }

    /// Length of the UDP payload this emits.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::Keepalive => NAT_KEEPALIVE.len(),
            Self::Ike(ike) => NON_ESP_MARKER.len() + ike.len(),
            Self::Esp(esp) => esp.len(),
        }
    }

    /// Writes the keepalive byte, the marker and IKE message, or the ESP packet into the
    /// first `buffer_len` bytes of `buffer`.
    ///
    /// ESP must be at least a header long and start with a non-zero SPI, or the receiver
    /// would classify it as something else.
    pub fn emit(&self, buffer: &mut [u8]) -> Result<()> {
        if let Self::Esp(esp) = self {
            match esp {
                [0, 0, 0, 0, ..] => return Err(Error::BadValue { what: "ESP SPI", value: 0 }),
                _ if esp.len() < esp::HEADER_LEN => {
                    return Err(Error::BadLength {
                        what: "UDP-encapsulated ESP",
                        len: esp.len(),
                        why: "shorter than the ESP header",
                    })
                }
                _ => {}
            }
        }
        ensure_room("UDP-encapsulated payload", buffer.len(), self.buffer_len())?;
        // `buffer` holds at least `buffer_len` bytes, so the ranges below are in bounds.
        match self {
            Self::Keepalive => buffer[..1].copy_from_slice(&NAT_KEEPALIVE),
            Self::Ike(ike) => {
                let (marker, rest) = buffer.split_at_mut(NON_ESP_MARKER.len());
                marker.copy_from_slice(&NON_ESP_MARKER);
                rest[..ike.len()].copy_from_slice(ike);
            }
            Self::Esp(esp) => buffer[..esp.len()].copy_from_slice(esp),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// The start of an IKE_SA_INIT request after the marker (RFC 7296 §3.1 header).
    static IKE_BYTES: [u8; 32] = hex!(
        "0000 0000"
        "8a3f 12c4 5b6e 7d90 0000 0000 0000 0000 2120 2208 0000 0000 0000 001c"
    );
    static ESP_BYTES: [u8; 12] = hex!("c0ff ee01 0000 0007 0001 0203");

    #[test]
    fn classifies_keepalive() {
        assert_eq!(UdpEncapPayload::classify(&hex!("ff")), Ok(UdpEncapPayload::Keepalive));
    }

    #[test]
    fn classifies_ike_after_the_marker() {
        assert_eq!(UdpEncapPayload::classify(&IKE_BYTES), Ok(UdpEncapPayload::Ike(&IKE_BYTES[4..])));
    }

    #[test]
    fn classifies_esp_by_its_non_zero_spi() {
        assert_eq!(UdpEncapPayload::classify(&ESP_BYTES), Ok(UdpEncapPayload::Esp(&ESP_BYTES)));
    }

    #[test]
    fn emit_gives_the_literals() -> Result<()> {
        let mut buffer = [0xa5; 32];
        UdpEncapPayload::Keepalive.emit(&mut buffer)?;
        assert_eq!(buffer[0], 0xff);
        let ike = UdpEncapPayload::Ike(&IKE_BYTES[4..]);
        assert_eq!(ike.buffer_len(), 32);
        ike.emit(&mut buffer)?;
        assert_eq!(buffer, IKE_BYTES);
        let esp = UdpEncapPayload::Esp(&ESP_BYTES);
        esp.emit(&mut buffer)?;
        assert_eq!(buffer[..12], ESP_BYTES);
        Ok(())
    }

    #[test]
    fn rejects_short_and_odd_payloads() {
        assert_eq!(
            UdpEncapPayload::classify(&[]),
            Err(Error::Truncated { what: "UDP-encapsulated payload", need: 4, have: 0 })
        );
        assert_eq!(UdpEncapPayload::classify(&[0]), Err(Error::BadValue { what: "NAT-keepalive", value: 0 }));
        for len in 2..4 {
            assert!(matches!(
                UdpEncapPayload::classify(&ESP_BYTES[..len]),
                Err(Error::Truncated { what: "UDP-encapsulated payload", .. })
            ));
        }
        for len in 4..8 {
            assert_eq!(
                UdpEncapPayload::classify(&ESP_BYTES[..len]),
                Err(Error::Truncated { what: "UDP-encapsulated ESP", need: 8, have: len })
            );
        }
    }

    #[test]
    fn emit_refuses_esp_that_would_read_back_as_something_else() {
        let mut buffer = [0; 16];
        assert_eq!(
            UdpEncapPayload::Esp(&hex!("0000 0000 0000 0001")).emit(&mut buffer),
            Err(Error::BadValue { what: "ESP SPI", value: 0 })
        );
        assert!(UdpEncapPayload::Esp(&hex!("ff")).emit(&mut buffer).is_err());
        assert_eq!(
            UdpEncapPayload::Ike(&IKE_BYTES[4..]).emit(&mut buffer),
            Err(Error::BufferTooSmall { what: "UDP-encapsulated payload", need: 32, have: 16 })
        );
    }
}
