//! The IPv6 extension-header walk (RFC 8200 §4): from the fixed header to the upper layer.

use crate::ip::IpProtocol;
use crate::ipv6::{Ipv6Packet, HEADER_LEN};
use crate::{Error, Result};

/// The most extension headers `upper_layer` skips before giving up.
///
/// RFC 8200 §4.1 has each header appear at most once (Destination Options twice), so a
/// sensible chain skips at most five; the bound keeps a crafted chain from costing more.
pub const MAX_EXT_HEADERS: usize = 8;

/// Extension header lengths count 8-octet units, not including the first (RFC 8200 §4.3).
const UNIT: usize = 8;

/// The Fragment header has a fixed length and no length field (RFC 8200 §4.5).
const FRAGMENT_HEADER_LEN: usize = 8;

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Skips Hop-by-Hop, Routing, Fragment and Destination Options headers and returns the
    /// upper-layer protocol with the offset of its header in the packet.
    ///
    /// The walk stops at the first other value: ESP (50) ends the chain because what follows
    /// is encrypted (RFC 4303 §3.1.1), AH (51) is returned as a protocol of its own, No Next
    /// Header (59) means nothing follows, and headers this walk does not know (Mobility,
    /// HIP, Shim6) are returned for the caller to drop. A non-first fragment (non-zero
    /// offset) stops at its Fragment header, since the rest of the chain is in the first one.
    /// Hop-by-Hop anywhere but first is rejected (RFC 8200 §4.3), and so is a chain longer
    /// than [`MAX_EXT_HEADERS`]. Every header must end within the payload length.
    pub fn upper_layer(&self) -> Result<(IpProtocol, usize)> {
        let payload = self.payload();
        let mut next = self.next_header();
        let mut offset = 0;
        let mut skipped = 0;
        loop {
            let len = match next {
                IpProtocol::HOP_BY_HOP if offset != 0 => {
                    return Err(Error::BadValue {
                        what: "IPv6 Hop-by-Hop Options header offset",
                        value: (HEADER_LEN + offset) as u64,
                    })
                }
                IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTING | IpProtocol::IPV6_DESTINATION_OPTIONS => {
                    let hdr_ext_len = payload.get(offset + 1).ok_or(Error::Truncated {
                        what: "IPv6 extension header",
                        need: HEADER_LEN + offset + 2,
                        have: HEADER_LEN + payload.len(),
                    })?;
                    (usize::from(*hdr_ext_len) + 1) * UNIT
                }
                IpProtocol::IPV6_FRAGMENT => FRAGMENT_HEADER_LEN,
                upper => return Ok((upper, HEADER_LEN + offset)),
            };
            if skipped == MAX_EXT_HEADERS {
                return Err(Error::BadLength {
                    what: "IPv6 extension header chain",
                    len: skipped + 1,
                    why: "more extension headers than MAX_EXT_HEADERS",
                });
            }
            // `get` fails when the header runs past the payload length. Every extension
            // header is at least 8 bytes, so the pattern matches whenever `get` succeeds.
            let Some(&[next_header, _, offset_hi, offset_lo, ..]) = payload.get(offset..offset + len) else {
                return Err(Error::Truncated {
                    what: "IPv6 extension header",
                    need: HEADER_LEN + offset + len,
                    have: HEADER_LEN + payload.len(),
                });
            };
            // A non-first fragment carries no upper-layer header (RFC 8200 §4.5).
            if next == IpProtocol::IPV6_FRAGMENT && u16::from_be_bytes([offset_hi, offset_lo]) >> 3 != 0 {
                return Ok((next, HEADER_LEN + offset));
            }
            next = IpProtocol(next_header);
            offset += len;
            skipped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::Ecn;
    use crate::ipv6::Ipv6Repr;
    use core::net::Ipv6Addr;
    use hex_literal::hex;

    /// Hop-by-Hop (PadN) → Routing (type 4, segments left 0) → Fragment (first, M=1) →
    /// Destination Options (PadN) → ESP (SPI 0x1001, sequence 1, 4 bytes).
    static CHAIN: [u8; 60] = hex!(
        "2b00 0104 0000 0000"
        "2c02 0400 0000 0000 2001 0db8 0000 0000 0000 0000 0000 0002"
        "3c00 0001 0000 beef"
        "3200 0104 0000 0000"
        "0000 1001 0000 0001 dead beef"
    );

    /// An IPv6 packet from 2001:db8::1 to 2001:db8::2 with the given first next header.
    fn packet(next_header: u8, payload: &[u8]) -> Result<Vec<u8>> {
        let repr = Ipv6Repr {
            src_addr: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
            next_header: IpProtocol(next_header),
            payload_len: payload.len(),
            hop_limit: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            flow_label: 0,
        };
        let mut bytes = vec![0; repr.buffer_len()];
        let mut view = Ipv6Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut view)?;
        view.payload_mut().copy_from_slice(payload);
        Ok(bytes)
    }

    fn walk(bytes: &[u8]) -> Result<(IpProtocol, usize)> {
        Ipv6Packet::new_checked(bytes)?.upper_layer()
    }

    #[test]
    fn no_extension_headers_gives_the_fixed_header_end() -> Result<()> {
        let bytes = packet(0x11, &hex!("1194 1194 0008 0000"))?;
        assert_eq!(walk(&bytes)?, (IpProtocol::UDP, 40));
        Ok(())
    }

    #[test]
    fn chain_is_skipped_up_to_esp() -> Result<()> {
        let bytes = packet(0x00, &CHAIN)?;
        assert_eq!(walk(&bytes)?, (IpProtocol::ESP, 88));
        Ok(())
    }

    #[test]
    fn ah_and_no_next_header_end_the_walk() -> Result<()> {
        let ah = packet(0x33, &hex!("3204 0000 0000 1001 0000 0001 0000 0000 0000 0000 0000 0000"))?;
        assert_eq!(walk(&ah)?, (IpProtocol::AH, 40));
        let none = packet(0x3c, &hex!("3b00 0104 0000 0000"))?;
        assert_eq!(walk(&none)?, (IpProtocol::IPV6_NO_NEXT_HEADER, 48));
        Ok(())
    }

    #[test]
    fn non_first_fragment_stops_at_its_fragment_header() -> Result<()> {
        // Offset 185 × 8, the upper-layer header is in the first fragment.
        let bytes = packet(0x2c, &hex!("1100 05c8 0000 beef 6162 6364"))?;
        assert_eq!(walk(&bytes)?, (IpProtocol::IPV6_FRAGMENT, 40));
        Ok(())
    }

    #[test]
    fn hop_by_hop_after_the_first_header_is_rejected() -> Result<()> {
        let bytes = packet(0x3c, &hex!("0000 0104 0000 0000 1100 0104 0000 0000"))?;
        assert_eq!(
            walk(&bytes),
            Err(Error::BadValue { what: "IPv6 Hop-by-Hop Options header offset", value: 48 })
        );
        Ok(())
    }

    #[test]
    fn every_cut_inside_the_chain_is_an_error() -> Result<()> {
        // The ESP header starts 48 bytes into the payload; any payload length that ends the
        // packet before that must fail, and never panic.
        for len in 0..CHAIN.len() {
            let result = walk(&packet(0x00, &CHAIN[..len])?);
            if len < 48 {
                assert!(matches!(result, Err(Error::Truncated { .. })), "length {len}");
            } else {
                assert_eq!(result, Ok((IpProtocol::ESP, 88)), "length {len}");
            }
        }
        Ok(())
    }

    #[test]
    fn chains_longer_than_the_limit_are_rejected() -> Result<()> {
        // MAX_EXT_HEADERS Destination Options headers, the last one pointing at UDP.
        let mut payload = Vec::new();
        for _ in 1..MAX_EXT_HEADERS {
            payload.extend_from_slice(&hex!("3c00 0104 0000 0000"));
        }
        payload.extend_from_slice(&hex!("1100 0104 0000 0000 1194 1194 0008 0000"));
        let at_limit = packet(0x3c, &payload)?;
        assert_eq!(walk(&at_limit)?, (IpProtocol::UDP, 40 + 8 * MAX_EXT_HEADERS));
        payload.splice(0..0, hex!("3c00 0104 0000 0000"));
        let over = packet(0x3c, &payload)?;
        assert!(matches!(walk(&over), Err(Error::BadLength { what: "IPv6 extension header chain", .. })));
        Ok(())
    }
}
