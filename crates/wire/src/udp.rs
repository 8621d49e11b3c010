//! UDP datagram view (RFC 768) with pseudo-header checksums for IPv4 and IPv6.

use crate::bytes::{ensure_room, read_u16, write_u16};
use crate::checksum;
use crate::ip::{IpPair, IpProtocol};
use crate::{Error, Result};

mod field {
    use crate::bytes::{Field, Rest};

    pub(super) const SRC_PORT: Field = 0..2;
    pub(super) const DST_PORT: Field = 2..4;
    pub(super) const LENGTH: Field = 4..6;
    pub(super) const CHECKSUM: Field = 6..8;
    pub(super) const PAYLOAD: Rest = CHECKSUM.end..;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
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

    /// Checks that the header fits and the length field is within `8..=buffer length`.
    ///
    /// The length field is authoritative (RFC 768): bytes after it are not payload.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated { what: "UDP header", need: HEADER_LEN, have });
        }
        let len = usize::from(self.datagram_len());
        if len < HEADER_LEN {
            return Err(Error::BadLength { what: "UDP length", len, why: "shorter than the header" });
        }
        if have < len {
            return Err(Error::Truncated { what: "UDP datagram", need: len, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port (zero when the sender expects no reply).
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length of header and payload in bytes.
    pub fn datagram_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The checksum field (zero means "none" over IPv4).
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD.start..usize::from(self.datagram_len())]
    }

    /// Whether the checksum over the pseudo-header, header and payload is correct.
    ///
    /// Over IPv4 a zero checksum means the sender computed none and is accepted (RFC 768);
    /// over IPv6 it is invalid and the datagram must be discarded (RFC 8200 §8.1).
    pub fn verify_checksum(&self, addrs: &IpPair) -> bool {
        if self.checksum() == 0 {
            return !addrs.is_ipv6();
        }
        self.sum(addrs) == 0xffff
    }

    /// The one's-complement sum over the pseudo-header and the datagram as it stands.
    fn sum(&self, addrs: &IpPair) -> u16 {
        let len = self.datagram_len();
        let datagram = &self.buffer.as_ref()[..usize::from(len)];
        checksum::combine(&[
            addrs.pseudo_header_sum(IpProtocol::UDP, u32::from(len)),
            checksum::data(datagram),
        ])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the length field.
    pub fn set_datagram_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum field; zero means "none" and is only valid over IPv4.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Computes the checksum over the pseudo-header, header and payload and stores it.
    pub fn fill_checksum(&mut self, addrs: &IpPair) {
        self.set_checksum(0);
        let sum = checksum::finish(self.sum(addrs));
        // A computed zero is sent as all ones, since zero means "no checksum" (RFC 768).
        self.set_checksum(if sum == 0 { 0xffff } else { sum });
    }

    /// The payload up to the length field, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.datagram_len());
        &mut self.buffer.as_mut()[field::PAYLOAD.start..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of a UDP header; the payload stays with the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads a checked datagram carried between `addrs`, verifying its checksum.
    ///
    /// Callers whose NIC already verified the checksum can read the view directly.
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>, addrs: &IpPair) -> Result<Self> {
        // A destination port of zero is reserved and never addresses anything.
        if packet.dst_port() == 0 {
            return Err(Error::BadValue { what: "UDP destination port", value: 0 });
        }
        if !packet.verify_checksum(addrs) {
            return Err(Error::BadValue { what: "UDP checksum", value: u64::from(packet.checksum()) });
        }
        Ok(Self { src_port: packet.src_port(), dst_port: packet.dst_port() })
    }

    /// Length of the header this emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the datagram for a payload of `payload_len` bytes.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN.saturating_add(payload_len)
    }

    /// Writes the header with a zero ("none") checksum into a buffer of at least
    /// `buffer_len(payload_len)` bytes.
    ///
    /// Only valid over IPv4, where RFC 3948 §3.1 recommends it for ESP-in-UDP since ESP
    /// protects its own payload; over IPv6 call `fill_checksum` afterwards.
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        payload_len: usize,
    ) -> Result<()> {
        let len = self.buffer_len(payload_len);
        let len_field = u16::try_from(len).map_err(|_| Error::TooLong { what: "UDP datagram", len })?;
        ensure_room("UDP datagram", packet.buffer.as_ref().len(), len)?;
        // The buffer holds the whole datagram, so the setters and `payload_mut` are in bounds.
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_datagram_len(len_field);
        packet.set_checksum(0);
        Ok(())
    }

    /// Writes the header, lets `emit_payload` fill the `payload_len`-byte payload, then
    /// computes the checksum over `addrs`.
    pub fn emit<T, F>(
        &self,
        packet: &mut UdpPacket<T>,
        addrs: &IpPair,
        payload_len: usize,
        emit_payload: F,
    ) -> Result<()>
    where
        T: AsRef<[u8]> + AsMut<[u8]>,
        F: FnOnce(&mut [u8]),
    {
        self.emit_header(packet, payload_len)?;
        emit_payload(packet.payload_mut());
        packet.fill_checksum(addrs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use hex_literal::hex;

    const V4: IpPair = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 1), dst: Ipv4Addr::new(198, 19, 0, 1) };
    const V6: IpPair = IpPair::V6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    };

    /// ESP-in-UDP (RFC 3948) 4500 → 4500 over IPv4: SPI 0x1001, sequence 1, 4 bytes.
    static PACKET_BYTES: [u8; 20] = hex!("1194 1194 0014 a2d6 0000 1001 0000 0001 dead beef");
    /// The same datagram over IPv6.
    static PACKET_V6_BYTES: [u8; 20] = hex!("1194 1194 0014 d389 0000 1001 0000 0001 dead beef");
    static PAYLOAD_BYTES: [u8; 12] = hex!("0000 1001 0000 0001 dead beef");

    const REPR: UdpRepr = UdpRepr { src_port: 4500, dst_port: 4500 };

    #[test]
    fn deconstruct_reads_every_field() -> Result<()> {
        let packet = UdpPacket::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(packet.src_port(), 4500);
        assert_eq!(packet.dst_port(), 4500);
        assert_eq!(packet.datagram_len(), 20);
        assert_eq!(packet.checksum(), 0xa2d6);
        assert_eq!(packet.payload(), &PAYLOAD_BYTES[..]);
        assert!(packet.verify_checksum(&V4));
        assert!(!packet.verify_checksum(&V6));
        assert!(UdpPacket::new_checked(&PACKET_V6_BYTES[..])?.verify_checksum(&V6));
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() {
        let mut bytes = [0xa5; 20];
        let mut packet = UdpPacket::new_unchecked(&mut bytes[..]);
        packet.set_src_port(4500);
        packet.set_dst_port(4500);
        packet.set_datagram_len(20);
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        packet.fill_checksum(&V4);
        assert_eq!(bytes, PACKET_BYTES);
        packet = UdpPacket::new_unchecked(&mut bytes[..]);
        packet.fill_checksum(&V6);
        assert_eq!(bytes, PACKET_V6_BYTES);
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&PACKET_BYTES[..])?, &V4)?, REPR);
        assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&PACKET_V6_BYTES[..])?, &V6)?, REPR);
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        assert_eq!(REPR.buffer_len(PAYLOAD_BYTES.len()), 20);
        let mut bytes = [0xa5; 20];
        REPR.emit(&mut UdpPacket::new_unchecked(&mut bytes[..]), &V4, 12, |payload| {
            payload.copy_from_slice(&PAYLOAD_BYTES)
        })?;
        assert_eq!(bytes, PACKET_BYTES);
        REPR.emit(&mut UdpPacket::new_unchecked(&mut bytes[..]), &V6, 12, |payload| {
            payload.copy_from_slice(&PAYLOAD_BYTES)
        })?;
        assert_eq!(bytes, PACKET_V6_BYTES);
        Ok(())
    }

    #[test]
    fn emit_header_leaves_no_checksum() -> Result<()> {
        let mut bytes = [0xa5; 20];
        let mut packet = UdpPacket::new_unchecked(&mut bytes[..]);
        REPR.emit_header(&mut packet, 12)?;
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(packet.checksum(), 0);
        assert_eq!(UdpRepr::parse(&packet, &V4), Ok(REPR));
        assert_eq!(
            UdpRepr::parse(&packet, &V6),
            Err(Error::BadValue { what: "UDP checksum", value: 0 }),
            "IPv6 forbids a zero UDP checksum"
        );
        Ok(())
    }

    #[test]
    fn computed_zero_checksum_is_sent_as_all_ones() -> Result<()> {
        // The last payload word is chosen so the sum over everything is 0xffff.
        let mut bytes = hex!("1194 1194 0014 0000 0000 1001 0000 0001 dead 61c6");
        let mut packet = UdpPacket::new_checked(&mut bytes[..])?;
        packet.fill_checksum(&V4);
        assert_eq!(packet.checksum(), 0xffff);
        assert!(packet.verify_checksum(&V4));
        Ok(())
    }

    #[test]
    fn parse_rejects_bad_checksum_and_port_zero() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        bytes[19] ^= 1;
        assert_eq!(
            UdpRepr::parse(&UdpPacket::new_checked(&bytes[..])?, &V4),
            Err(Error::BadValue { what: "UDP checksum", value: 0xa2d6 })
        );
        let mut bytes = PACKET_BYTES;
        bytes[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(
            UdpRepr::parse(&UdpPacket::new_checked(&bytes[..])?, &V4),
            Err(Error::BadValue { what: "UDP destination port", value: 0 })
        );
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..PACKET_BYTES.len() {
            assert!(UdpPacket::new_checked(&PACKET_BYTES[..len]).is_err(), "length {len}");
        }
        let mut bytes = PACKET_BYTES;
        bytes[4..6].copy_from_slice(&hex!("0007"));
        assert!(matches!(
            UdpPacket::new_checked(&bytes[..]),
            Err(Error::BadLength { what: "UDP length", len: 7, .. })
        ));
    }

    #[test]
    fn emit_rejects_oversized_payloads_and_short_buffers() {
        let mut bytes = [0; 20];
        assert_eq!(
            REPR.emit_header(&mut UdpPacket::new_unchecked(&mut bytes[..]), 65528),
            Err(Error::TooLong { what: "UDP datagram", len: 65536 })
        );
        assert_eq!(
            REPR.emit(&mut UdpPacket::new_unchecked(&mut bytes[..]), &V4, 13, |_| ()),
            Err(Error::BufferTooSmall { what: "UDP datagram", need: 21, have: 20 })
        );
    }
}
