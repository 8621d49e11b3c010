//! IPv6 fixed header view (RFC 8200 §3); extension headers are walked in `ipv6_ext`.

use core::net::Ipv6Addr;

use crate::bytes::{ensure_room, read_u16, read_u32, write_u16, write_u32};
use crate::ip::{Ecn, IpProtocol, DSCP_MAX};
use crate::{Error, Result};

mod field {
    use crate::bytes::{Field, Rest};

    pub(super) const VER_TC_FLOW: Field = 0..4;
    pub(super) const LENGTH: Field = 4..6;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: Field = 8..24;
    pub(super) const DST_ADDR: Field = 24..40;
    pub(super) const PAYLOAD: Rest = DST_ADDR.end..;
}

/// Length of the fixed IPv6 header (RFC 8200 §3).
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// Highest flow label: the field is 20 bits (RFC 8200 §6).
pub const FLOW_LABEL_MAX: u32 = 0x000f_ffff;

/// A read/write view of an IPv6 packet: fixed header and payload (extension headers included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
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

    /// Checks that the fixed header and the payload length fit the buffer.
    ///
    /// A zero payload length with a Jumbo Payload option (RFC 2675) is not supported: the
    /// payload is then empty.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated { what: "IPv6 header", need: HEADER_LEN, have });
        }
        let need = HEADER_LEN + usize::from(self.payload_len());
        if have < need {
            return Err(Error::Truncated { what: "IPv6 packet", need, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first word: version, traffic class and flow label.
    fn first_word(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// The version field (6 for a well-formed packet; checked by `Ipv6Repr::parse`).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The whole traffic class byte (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        // The byte straddles the first two octets: 4 bits of version precede it.
        let [_, tc] = (read_u16(self.buffer.as_ref(), 0..2) >> 4).to_be_bytes();
        tc
    }

    /// The Differentiated Services codepoint (RFC 2474 §3).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// The ECN codepoint (RFC 3168 §5).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }

    /// The 20-bit flow label (RFC 6437).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & FLOW_LABEL_MAX
    }

    /// The payload length: everything after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The type of the first header after the fixed one.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NEXT_HEADER])
    }

    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut octets = [0; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(octets)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut octets = [0; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(octets)
    }

    /// The payload up to the payload length (extension headers, then the upper layer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[Self::payload_range(self.payload_len())]
    }

    /// Where the payload lies in the buffer.
    fn payload_range(payload_len: u16) -> core::ops::Range<usize> {
        let start = field::PAYLOAD.start;
        start..start + usize::from(payload_len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Replaces the bits of the first word under `mask` with `bits`.
    fn update_first_word(&mut self, mask: u32, bits: u32) {
        let word = (self.first_word() & !mask) | (bits & mask);
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, word);
    }

    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        self.update_first_word(0xf000_0000, u32::from(version) << 28);
    }

    /// Sets the whole traffic class byte.
    pub fn set_traffic_class(&mut self, traffic_class: u8) {
        self.update_first_word(0x0ff0_0000, u32::from(traffic_class) << 20);
    }

    /// Sets the DSCP (six bits; higher bits are dropped).
    pub fn set_dscp(&mut self, dscp: u8) {
        self.update_first_word(0x0fc0_0000, u32::from(dscp) << 22);
    }

    /// Sets the ECN codepoint.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        self.update_first_word(0x0030_0000, u32::from(ecn.bits()) << 20);
    }

    /// Sets the flow label (20 bits; higher bits are dropped).
    pub fn set_flow_label(&mut self, flow_label: u32) {
        self.update_first_word(FLOW_LABEL_MAX, flow_label);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the type of the first header after the fixed one.
    pub fn set_next_header(&mut self, next_header: IpProtocol) {
        self.buffer.as_mut()[field::NEXT_HEADER] = next_header.0;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The payload up to the payload length, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = Self::payload_range(self.payload_len());
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of an IPv6 fixed header; extension headers belong to the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Type of the first header after the fixed one.
    pub next_header: IpProtocol,
    /// Payload length in bytes, extension headers included.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Differentiated Services codepoint (six bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Reads a checked packet, rejecting a wrong version.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Self> {
        if packet.version() != 6 {
            return Err(Error::BadVersion { what: "IPv6 header", version: packet.version() });
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            flow_label: packet.flow_label(),
        })
    }

    /// Length of the fixed header this emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the whole packet, header and payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }

    /// Writes the fixed header into a buffer of at least `buffer_len` bytes; the payload
    /// is left for the caller to fill.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) -> Result<()> {
        let payload_len = u16::try_from(self.payload_len)
            .map_err(|_| Error::TooLong { what: "IPv6 payload", len: self.payload_len })?;
        if self.dscp > DSCP_MAX {
            return Err(Error::BadValue { what: "IPv6 DSCP", value: u64::from(self.dscp) });
        }
        if self.flow_label > FLOW_LABEL_MAX {
            return Err(Error::BadValue { what: "IPv6 flow label", value: u64::from(self.flow_label) });
        }
        ensure_room("IPv6 packet", packet.buffer.as_ref().len(), self.buffer_len())?;
        // The buffer holds at least HEADER_LEN bytes, so the setters below are in bounds.
        packet.set_version(6);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// UDP 4500 → 4500 carrying ESP (SPI 0x1001, sequence 1), DSCP 46, flow label 0x12345.
    static PACKET_BYTES: [u8; 60] = hex!(
        "6b81 2345 0014 1140"
        "2001 0db8 0000 0000 0000 0000 0000 0001"
        "2001 0db8 0000 0000 0000 0000 0000 0002"
        "1194 1194 0014 d389 0000 1001 0000 0001 dead beef"
    );

    static PAYLOAD_BYTES: [u8; 20] = hex!("1194 1194 0014 d389 0000 1001 0000 0001 dead beef");

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    fn packet_repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: SRC,
            dst_addr: DST,
            next_header: IpProtocol::UDP,
            payload_len: 20,
            hop_limit: 64,
            dscp: 46,
            ecn: Ecn::NotEct,
            flow_label: 0x12345,
        }
    }

    #[test]
    fn deconstruct_reads_every_field() -> Result<()> {
        let packet = Ipv6Packet::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0xb8);
        assert_eq!(packet.dscp(), 46);
        assert_eq!(packet.ecn(), Ecn::NotEct);
        assert_eq!(packet.flow_label(), 0x12345);
        assert_eq!(packet.payload_len(), 20);
        assert_eq!(packet.next_header(), IpProtocol::UDP);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.src_addr(), SRC);
        assert_eq!(packet.dst_addr(), DST);
        assert_eq!(packet.payload(), &PAYLOAD_BYTES[..]);
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() {
        let mut bytes = [0xa5; 60];
        let mut packet = Ipv6Packet::new_unchecked(&mut bytes[..]);
        packet.set_version(6);
        packet.set_traffic_class(0xb8);
        packet.set_flow_label(0x12345);
        packet.set_payload_len(20);
        packet.set_next_header(IpProtocol::UDP);
        packet.set_hop_limit(64);
        packet.set_src_addr(SRC);
        packet.set_dst_addr(DST);
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(bytes, PACKET_BYTES);
    }

    #[test]
    fn dscp_and_ecn_setters_touch_only_their_bits() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        let mut packet = Ipv6Packet::new_checked(&mut bytes[..])?;
        packet.set_ecn(Ecn::Ce);
        assert_eq!((packet.dscp(), packet.ecn(), packet.flow_label()), (46, Ecn::Ce, 0x12345));
        packet.set_dscp(10);
        assert_eq!((packet.dscp(), packet.ecn(), packet.version()), (10, Ecn::Ce, 6));
        assert_eq!(packet.traffic_class(), 0x2b);
        Ok(())
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        let packet = Ipv6Packet::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(Ipv6Repr::parse(&packet)?, packet_repr());
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        let repr = packet_repr();
        assert_eq!(repr.buffer_len(), PACKET_BYTES.len());
        let mut bytes = [0xa5; 60];
        let mut packet = Ipv6Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet)?;
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(bytes, PACKET_BYTES);
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..PACKET_BYTES.len() {
            assert!(Ipv6Packet::new_checked(&PACKET_BYTES[..len]).is_err(), "length {len}");
        }
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET_BYTES[..59]),
            Err(Error::Truncated { what: "IPv6 packet", need: 60, have: 59 })
        );
    }

    #[test]
    fn parse_rejects_wrong_version() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        bytes[0] = 0x4b;
        let packet = Ipv6Packet::new_checked(&bytes[..])?;
        assert_eq!(Ipv6Repr::parse(&packet), Err(Error::BadVersion { what: "IPv6 header", version: 4 }));
        Ok(())
    }

    #[test]
    fn emit_rejects_unencodable_reprs() {
        let mut bytes = [0; 60];
        let too_long = Ipv6Repr { payload_len: 65536, ..packet_repr() };
        assert_eq!(
            too_long.emit(&mut Ipv6Packet::new_unchecked(&mut bytes[..])),
            Err(Error::TooLong { what: "IPv6 payload", len: 65536 })
        );
        let bad_flow = Ipv6Repr { flow_label: 0x10_0000, ..packet_repr() };
        assert!(bad_flow.emit(&mut Ipv6Packet::new_unchecked(&mut bytes[..])).is_err());
        let bad_dscp = Ipv6Repr { dscp: 64, ..packet_repr() };
        assert!(bad_dscp.emit(&mut Ipv6Packet::new_unchecked(&mut bytes[..])).is_err());
        assert_eq!(
            packet_repr().emit(&mut Ipv6Packet::new_unchecked(&mut bytes[..59])),
            Err(Error::BufferTooSmall { what: "IPv6 packet", need: 60, have: 59 })
        );
    }
}
