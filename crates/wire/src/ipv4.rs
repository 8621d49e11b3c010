//! IPv4 header view (RFC 791): options through IHL, header checksum, fragmentation fields.

use core::net::Ipv4Addr;

use crate::bytes::{ensure_room, read_u16, write_u16};
use crate::checksum;
use crate::ip::{Ecn, IpProtocol, DSCP_MAX};
use crate::{Error, Result};

mod field {
    use crate::bytes::Field;

    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOS: usize = 1;
    pub(super) const LENGTH: Field = 2..4;
    pub(super) const IDENT: Field = 4..6;
    pub(super) const FLAGS_FRAG: Field = 6..8;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Field = 10..12;
    pub(super) const SRC_ADDR: Field = 12..16;
    pub(super) const DST_ADDR: Field = 16..20;
}

/// Length of an IPv4 header without options (IHL = 5, RFC 791 §3.1).
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// IHL of a header without options, in 32-bit words.
const MIN_IHL: u8 = 5;

/// Flag bit "Don't Fragment" in the flags/fragment-offset word (RFC 791 §3.1).
const FLAG_DF: u16 = 0x4000;
/// Flag bit "More Fragments".
const FLAG_MF: u16 = 0x2000;
/// The 13-bit fragment offset, counted in 8-octet units.
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A read/write view of an IPv4 packet: header, options and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
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

    /// Checks that the fixed header, the options (IHL) and the total length fit the buffer.
    ///
    /// The buffer may be longer than the total length (link-layer padding); the payload
    /// stops at the total length.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated { what: "IPv4 header", need: HEADER_LEN, have });
        }
        let header_len = usize::from(self.header_len());
        if header_len < HEADER_LEN {
            return Err(Error::BadLength {
                what: "IPv4 header",
                len: header_len,
                why: "IHL is below 5 words",
            });
        }
        if have < header_len {
            return Err(Error::Truncated { what: "IPv4 options", need: header_len, have });
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::BadLength {
                what: "IPv4 total length",
                len: total_len,
                why: "shorter than the header",
            });
        }
        if have < total_len {
            return Err(Error::Truncated { what: "IPv4 packet", need: total_len, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 for a well-formed packet; checked by `Ipv4Repr::parse`).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes, options included (IHL × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The Differentiated Services codepoint (RFC 2474 §3).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::TOS] >> 2
    }

    /// The ECN codepoint (RFC 3168 §5).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[field::TOS])
    }

    /// The total length of header and payload in bytes.
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The identification field used to reassemble fragments.
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Whether "Don't Fragment" is set: an oversized packet earns an ICMP "fragmentation
    /// needed" (RFC 1191) instead of being fragmented.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }

    /// Whether "More Fragments" is set.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field counts 8-octet units).
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLAGS_FRAG) & FRAG_OFFSET_MASK) * 8
    }

    /// Whether this packet is a fragment (MF set or a non-zero offset), which needs
    /// reassembly before its payload means anything.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// The time-to-live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let mut octets = [0; 4];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv4Addr::from(octets)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let mut octets = [0; 4];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv4Addr::from(octets)
    }

    /// Whether the header checksum, options included, is correct (RFC 791 §3.1).
    // Inlined: it runs once per forwarded packet, and as a call it cost more in register
    // spills around it than the sum itself.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let header = &self.buffer.as_ref()[..usize::from(self.header_len())];
        checksum::data(header) == 0xffff
    }

    /// The options bytes between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }

    /// The payload, up to the total length.
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[usize::from(self.header_len())..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0x0f) | (version << 4);
    }

    /// Sets the header length in bytes (a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0xf0) | ((len / 4) & 0x0f);
    }

    /// Sets the DSCP (six bits; higher bits are dropped).
    pub fn set_dscp(&mut self, dscp: u8) {
        let byte = &mut self.buffer.as_mut()[field::TOS];
        *byte = (*byte & 0b11) | (dscp << 2);
    }

    /// Sets the ECN codepoint.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let byte = &mut self.buffer.as_mut()[field::TOS];
        *byte = (*byte & !0b11) | ecn.bits();
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, ident: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    /// Clears all three flag bits, the reserved one included.
    pub fn clear_flags(&mut self) {
        self.update_flags_frag(!(FLAG_DF | FLAG_MF | 0x8000), 0);
    }

    /// Sets or clears "Don't Fragment".
    pub fn set_dont_frag(&mut self, value: bool) {
        self.update_flags_frag(!FLAG_DF, if value { FLAG_DF } else { 0 });
    }

    /// Sets or clears "More Fragments".
    pub fn set_more_frags(&mut self, value: bool) {
        self.update_flags_frag(!FLAG_MF, if value { FLAG_MF } else { 0 });
    }

    /// Sets the fragment offset in bytes (a multiple of 8; the remainder is dropped).
    pub fn set_frag_offset(&mut self, offset: u16) {
        self.update_flags_frag(!FRAG_OFFSET_MASK, offset / 8);
    }

    /// Keeps the bits of the flags/offset word under `keep` and ors in `set`.
    fn update_flags_frag(&mut self, keep: u16, set: u16) {
        let word = read_u16(self.buffer.as_ref(), field::FLAGS_FRAG);
        write_u16(self.buffer.as_mut(), field::FLAGS_FRAG, (word & keep) | set);
    }

    /// Sets the time-to-live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol of the payload.
    pub fn set_protocol(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.0;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// Computes the header checksum over the header and options and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let header = &self.buffer.as_ref()[..usize::from(self.header_len())];
        let sum = checksum::data(header);
        self.set_checksum(checksum::finish(sum));
    }

    /// The options bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload up to the total length, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of an IPv4 header; options are skipped on parse and never emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
    /// Time-to-live.
    pub ttl: u8,
    /// Differentiated Services codepoint (six bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Identification field.
    pub ident: u16,
    /// "Don't Fragment" flag.
    pub dont_frag: bool,
    /// "More Fragments" flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// Reads a checked packet, rejecting a wrong version or header checksum.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        if packet.version() != 4 {
            return Err(Error::BadVersion { what: "IPv4 header", version: packet.version() });
        }
        if !packet.verify_checksum() {
            return Err(Error::BadValue {
                what: "IPv4 header checksum",
                value: u64::from(packet.checksum()),
            });
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.payload().len(),
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
        })
    }

    /// Length of the header this emits (no options).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the whole packet, header and payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }

    /// Writes the header (no options) with its checksum into a buffer of at least
    /// `buffer_len` bytes; the payload is left for the caller to fill.
    // Inlined into the per-packet callers: called out of line, it read the representation
    // back with loads that waited on the caller's narrower stores of it.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        let total_len = u16::try_from(self.buffer_len())
            .map_err(|_| Error::TooLong { what: "IPv4 packet", len: self.buffer_len() })?;
        if self.dscp > DSCP_MAX {
            return Err(Error::BadValue { what: "IPv4 DSCP", value: u64::from(self.dscp) });
        }
        if !self.frag_offset.is_multiple_of(8) {
            return Err(Error::BadValue { what: "IPv4 fragment offset", value: u64::from(self.frag_offset) });
        }
        ensure_room("IPv4 packet", packet.buffer.as_ref().len(), self.buffer_len())?;
        // Built in a local array and stored with one copy: this runs once per packet on the
        // data path, where field-by-field read-modify-writes of the buffer cost more than
        // the header is worth.
        let flags = if self.dont_frag { FLAG_DF } else { 0 } | if self.more_frags { FLAG_MF } else { 0 };
        let [len_hi, len_lo] = total_len.to_be_bytes();
        let [id_hi, id_lo] = self.ident.to_be_bytes();
        let [ff_hi, ff_lo] = (flags | (self.frag_offset / 8)).to_be_bytes();
        let [s0, s1, s2, s3] = self.src_addr.octets();
        let [d0, d1, d2, d3] = self.dst_addr.octets();
        let mut h: [u8; HEADER_LEN] = [
            0x40 | MIN_IHL,
            (self.dscp << 2) | self.ecn.bits(),
            len_hi,
            len_lo,
            id_hi,
            id_lo,
            ff_hi,
            ff_lo,
            self.ttl,
            self.protocol.0,
            0,
            0,
            s0,
            s1,
            s2,
            s3,
            d0,
            d1,
            d2,
            d3,
        ];
        let [c_hi, c_lo] = checksum::finish(checksum::data(&h)).to_be_bytes();
        h[10] = c_hi;
        h[11] = c_lo;
        let buf = packet.buffer.as_mut();
        let have = buf.len();
        let dst = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall {
            what: "IPv4 packet",
            need: HEADER_LEN,
            have,
        })?;
        dst.copy_from_slice(&h);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// A NAT-keepalive (RFC 3948 §2.3) in UDP 4500 → 4500, DF set, TTL 64.
    static PACKET_BYTES: [u8; 29] = hex!(
        "4500 001d 1c46 4000 4011 9262 c612 0001 c613 0001"
        "1194 1194 0009 0000 ff"
    );

    static PAYLOAD_BYTES: [u8; 9] = hex!("1194 1194 0009 0000 ff");

    fn packet_repr() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: Ipv4Addr::new(198, 18, 0, 1),
            dst_addr: Ipv4Addr::new(198, 19, 0, 1),
            protocol: IpProtocol::UDP,
            payload_len: 9,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0x1c46,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    }

    #[test]
    fn deconstruct_reads_every_field() -> Result<()> {
        let packet = Ipv4Packet::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.dscp(), 0);
        assert_eq!(packet.ecn(), Ecn::NotEct);
        assert_eq!(packet.total_len(), 29);
        assert_eq!(packet.ident(), 0x1c46);
        assert!(packet.dont_frag());
        assert!(!packet.more_frags());
        assert_eq!(packet.frag_offset(), 0);
        assert!(!packet.is_fragment());
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), IpProtocol::UDP);
        assert_eq!(packet.checksum(), 0x9262);
        assert_eq!(packet.src_addr(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(198, 19, 0, 1));
        assert!(packet.verify_checksum());
        assert_eq!(packet.options(), &[] as &[u8]);
        assert_eq!(packet.payload(), &PAYLOAD_BYTES[..]);
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() {
        let mut bytes = [0xa5; 29];
        let mut packet = Ipv4Packet::new_unchecked(&mut bytes[..]);
        packet.set_version(4);
        packet.set_header_len(20);
        packet.set_dscp(0);
        packet.set_ecn(Ecn::NotEct);
        packet.set_total_len(29);
        packet.set_ident(0x1c46);
        packet.clear_flags();
        packet.set_dont_frag(true);
        packet.set_more_frags(false);
        packet.set_frag_offset(0);
        packet.set_ttl(64);
        packet.set_protocol(IpProtocol::UDP);
        packet.set_src_addr(Ipv4Addr::new(198, 18, 0, 1));
        packet.set_dst_addr(Ipv4Addr::new(198, 19, 0, 1));
        packet.fill_checksum();
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(bytes, PACKET_BYTES);
    }

    #[test]
    fn options_sit_between_header_and_payload() -> Result<()> {
        // IHL 6 with options NOP NOP NOP EOL, carrying an ESP header and 4 bytes.
        let bytes = hex!(
            "4600 0024 1c47 0000 4032 cf38 c612 0001 c613 0001 0101 0100"
            "0000 1001 0000 0001 dead beef"
        );
        let mut packet = Ipv4Packet::new_checked(bytes)?;
        assert_eq!(packet.header_len(), 24);
        assert_eq!(packet.options(), &hex!("0101 0100"));
        assert_eq!(packet.payload(), &hex!("0000 1001 0000 0001 dead beef"));
        assert!(packet.verify_checksum());
        let repr = Ipv4Repr::parse(&packet)?;
        assert_eq!(repr.payload_len, 12);
        assert_eq!(repr.protocol, IpProtocol::ESP);
        packet.options_mut().copy_from_slice(&hex!("0000 0000"));
        assert!(!packet.verify_checksum());
        Ok(())
    }

    #[test]
    fn fragment_fields_and_tos_split() -> Result<()> {
        // DSCP 46 (EF), ECT(1), MF set, offset 1 unit.
        let bytes = hex!(
            "45b9 001d 1c46 2001 4011 b1a8 c612 0001 c613 0001"
            "1194 1194 0009 0000 ff"
        );
        let packet = Ipv4Packet::new_checked(&bytes[..])?;
        assert_eq!(packet.dscp(), 46);
        assert_eq!(packet.ecn(), Ecn::Ect1);
        assert!(packet.more_frags());
        assert!(!packet.dont_frag());
        assert_eq!(packet.frag_offset(), 8);
        assert!(packet.is_fragment());
        let repr = Ipv4Repr::parse(&packet)?;
        let mut out = [0; 29];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))?;
        out[HEADER_LEN..].copy_from_slice(packet.payload());
        assert_eq!(out, bytes);
        Ok(())
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        let packet = Ipv4Packet::new_checked(&PACKET_BYTES[..])?;
        assert_eq!(Ipv4Repr::parse(&packet)?, packet_repr());
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        let repr = packet_repr();
        assert_eq!(repr.buffer_len(), PACKET_BYTES.len());
        let mut bytes = [0xa5; 29];
        let mut packet = Ipv4Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet)?;
        packet.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(bytes, PACKET_BYTES);
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..PACKET_BYTES.len() {
            assert!(Ipv4Packet::new_checked(&PACKET_BYTES[..len]).is_err(), "length {len}");
        }
        let mut padded = [0; 64];
        padded[..29].copy_from_slice(&PACKET_BYTES);
        assert_eq!(
            Ipv4Packet::new_checked(&padded[..]).map(|p| p.payload().len()),
            Ok(9),
            "link padding after the total length is not payload"
        );
    }

    #[test]
    fn check_len_rejects_inconsistent_lengths() {
        let mut bytes = PACKET_BYTES;
        bytes[0] = 0x44;
        assert!(matches!(
            Ipv4Packet::new_checked(&bytes[..]),
            Err(Error::BadLength { what: "IPv4 header", len: 16, .. })
        ));
        bytes[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&bytes[..]),
            Err(Error::Truncated { what: "IPv4 options", need: 60, have: 29 })
        );
        let mut bytes = PACKET_BYTES;
        bytes[2..4].copy_from_slice(&hex!("0013"));
        assert!(matches!(
            Ipv4Packet::new_checked(&bytes[..]),
            Err(Error::BadLength { what: "IPv4 total length", len: 19, .. })
        ));
    }

    #[test]
    fn parse_rejects_wrong_version_and_checksum() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        bytes[0] = 0x65;
        let packet = Ipv4Packet::new_checked(&bytes[..])?;
        assert_eq!(Ipv4Repr::parse(&packet), Err(Error::BadVersion { what: "IPv4 header", version: 6 }));
        let mut bytes = PACKET_BYTES;
        bytes[8] = 63;
        let packet = Ipv4Packet::new_checked(&bytes[..])?;
        assert_eq!(
            Ipv4Repr::parse(&packet),
            Err(Error::BadValue { what: "IPv4 header checksum", value: 0x9262 })
        );
        Ok(())
    }

    #[test]
    fn incremental_ttl_update_keeps_the_checksum_valid() -> Result<()> {
        let mut bytes = PACKET_BYTES;
        let mut packet = Ipv4Packet::new_checked(&mut bytes[..])?;
        // TTL shares a 16-bit word with the protocol (RFC 1624 §3 works on whole words).
        let old = [packet.ttl(), packet.protocol().0];
        packet.set_ttl(63);
        let new = [packet.ttl(), packet.protocol().0];
        packet.set_checksum(checksum::update(packet.checksum(), &old, &new));
        assert!(packet.verify_checksum());
        Ok(())
    }

    #[test]
    fn emit_rejects_unencodable_reprs() {
        let mut bytes = [0; 64];
        let too_long = Ipv4Repr { payload_len: 65516, ..packet_repr() };
        assert_eq!(
            too_long.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[..])),
            Err(Error::TooLong { what: "IPv4 packet", len: 65536 })
        );
        let bad_dscp = Ipv4Repr { dscp: 64, ..packet_repr() };
        assert!(bad_dscp.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[..])).is_err());
        let bad_offset = Ipv4Repr { frag_offset: 4, ..packet_repr() };
        assert!(bad_offset.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[..])).is_err());
        assert_eq!(
            packet_repr().emit(&mut Ipv4Packet::new_unchecked(&mut bytes[..28])),
            Err(Error::BufferTooSmall { what: "IPv4 packet", need: 29, have: 28 })
        );
    }
}
