//! ICMPv4 view (RFC 792): echo request/reply and "fragmentation needed" (RFC 1191 §4).

use core::fmt;

use crate::bytes::{ensure_room, read_u16, write_u16};
use crate::checksum;
use crate::{Error, Result};

mod field {
    use crate::bytes::{Field, Rest};

    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: Field = 2..4;
    pub(super) const ECHO_IDENT: Field = 4..6;
    pub(super) const ECHO_SEQ_NO: Field = 6..8;
    pub(super) const UNUSED: Field = 4..6;
    pub(super) const NEXT_HOP_MTU: Field = 6..8;
    pub(super) const DATA: Rest = 8..;
}

/// Length of the ICMPv4 header for every message here (type, code, checksum, 4 more bytes).
pub const HEADER_LEN: usize = field::DATA.start;

/// Most bytes of an ICMPv4 error datagram, IP header included (RFC 1812 §4.3.2.3).
pub const MAX_ERROR_LEN: usize = 576;

/// Code of Destination Unreachable meaning "fragmentation needed and DF set" (RFC 792).
pub const CODE_FRAG_NEEDED: u8 = 4;

/// An ICMPv4 message type; a newtype so unknown values round-trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Icmpv4Type(pub u8);

impl Icmpv4Type {
    /// Echo Reply.
    pub const ECHO_REPLY: Self = Self(0x00);
    /// Destination Unreachable.
    pub const DEST_UNREACHABLE: Self = Self(0x03);
    /// Echo Request.
    pub const ECHO_REQUEST: Self = Self(0x08);
    /// Time Exceeded.
    pub const TIME_EXCEEDED: Self = Self(0x0b);
}

impl fmt::Debug for Icmpv4Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::ECHO_REPLY => "ECHO_REPLY",
            Self::DEST_UNREACHABLE => "DEST_UNREACHABLE",
            Self::ECHO_REQUEST => "ECHO_REQUEST",
            Self::TIME_EXCEEDED => "TIME_EXCEEDED",
            _ => return write!(f, "Icmpv4Type({})", self.0),
        };
        write!(f, "Icmpv4Type::{name}")
    }
}

/// A read/write view of an ICMPv4 message; the message is the whole buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
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

    /// Checks that the eight header bytes are present.
    pub fn check_len(&self) -> Result<()> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(Error::Truncated { what: "ICMPv4 header", need: HEADER_LEN, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    pub fn msg_type(&self) -> Icmpv4Type {
        Icmpv4Type(self.buffer.as_ref()[field::TYPE])
    }

    /// The message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The echo identifier (echo request and reply).
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// The echo sequence number (echo request and reply).
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ_NO)
    }

    /// The next-hop MTU of "fragmentation needed" (RFC 1191 §4; zero from old routers).
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::NEXT_HOP_MTU)
    }

    /// The bytes after the header: echo data, or the start of the invoking datagram.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum over the whole message is correct (RFC 792).
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg_type: Icmpv4Type) {
        self.buffer.as_mut()[field::TYPE] = msg_type.0;
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, ident: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, ident);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ_NO, seq_no);
    }

    /// Sets the next-hop MTU and zeroes the unused word before it (RFC 1191 §4).
    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        write_u16(self.buffer.as_mut(), field::UNUSED, 0);
        write_u16(self.buffer.as_mut(), field::NEXT_HOP_MTU, mtu);
    }

    /// Computes the checksum over the whole message and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(checksum::finish(sum));
    }

    /// The bytes after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of the ICMPv4 messages the gateway sends and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Echo Request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed back.
        data: &'a [u8],
    },
    /// Echo Reply (type 0).
    EchoReply {
        /// Identifier copied from the request.
        ident: u16,
        /// Sequence number copied from the request.
        seq_no: u16,
        /// Data copied from the request.
        data: &'a [u8],
    },
    /// Destination Unreachable, "fragmentation needed and DF set" (type 3 code 4), which
    /// the ESP data plane sends inward when a DF packet would not fit the tunnel.
    FragNeeded {
        /// MTU of the next hop (RFC 1191 §4).
        next_hop_mtu: u16,
        /// The start of the datagram that did not fit: its IP header and at least the next
        /// 8 bytes (RFC 792), at most what keeps the error within 576 bytes (RFC 1812).
        invoking: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// A "fragmentation needed" for `invoking`, cut to keep the whole error datagram
    /// (20-byte IP header included) within [`MAX_ERROR_LEN`] (RFC 1812 §4.3.2.3).
    pub fn frag_needed(next_hop_mtu: u16, invoking: &'a [u8]) -> Self {
        let room = MAX_ERROR_LEN - crate::ipv4::HEADER_LEN - HEADER_LEN;
        let invoking = invoking.get(..room).unwrap_or(invoking);
        Self::FragNeeded { next_hop_mtu, invoking }
    }

    /// Reads a checked message, verifying its checksum; other types and codes are errors.
    pub fn parse<T: AsRef<[u8]>>(packet: &'a Icmpv4Packet<T>) -> Result<Self> {
        if !packet.verify_checksum() {
            return Err(Error::BadValue { what: "ICMPv4 checksum", value: u64::from(packet.checksum()) });
        }
        let code = packet.msg_code();
        match (packet.msg_type(), code) {
            (Icmpv4Type::ECHO_REQUEST, 0) => Ok(Self::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: packet.data(),
            }),
            (Icmpv4Type::ECHO_REPLY, 0) => Ok(Self::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: packet.data(),
            }),
            (Icmpv4Type::DEST_UNREACHABLE, CODE_FRAG_NEEDED) => {
                Ok(Self::FragNeeded { next_hop_mtu: packet.next_hop_mtu(), invoking: packet.data() })
            }
            (Icmpv4Type::ECHO_REQUEST | Icmpv4Type::ECHO_REPLY | Icmpv4Type::DEST_UNREACHABLE, _) => {
                Err(Error::BadValue { what: "ICMPv4 message code", value: u64::from(code) })
            }
            (msg_type, _) => {
                Err(Error::BadValue { what: "ICMPv4 message type", value: u64::from(msg_type.0) })
            }
        }
    }

    /// The bytes after the header.
    fn data(&self) -> &'a [u8] {
        match *self {
            Self::EchoRequest { data, .. } | Self::EchoReply { data, .. } => data,
            Self::FragNeeded { invoking, .. } => invoking,
        }
    }

    /// Length of the message.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the message and its checksum; the view's buffer must be exactly
    /// `buffer_len` bytes, since the checksum covers all of it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) -> Result<()> {
        ensure_room("ICMPv4 message", packet.buffer.as_ref().len(), self.buffer_len())?;
        // The buffer holds HEADER_LEN + data bytes, so the setters and the copy are in bounds.
        let (msg_type, code) = match *self {
            Self::EchoRequest { ident, seq_no, .. } | Self::EchoReply { ident, seq_no, .. } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                let is_request = matches!(self, Self::EchoRequest { .. });
                (if is_request { Icmpv4Type::ECHO_REQUEST } else { Icmpv4Type::ECHO_REPLY }, 0)
            }
            Self::FragNeeded { next_hop_mtu, .. } => {
                packet.set_next_hop_mtu(next_hop_mtu);
                (Icmpv4Type::DEST_UNREACHABLE, CODE_FRAG_NEEDED)
            }
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    static ECHO_BYTES: [u8; 12] = hex!("0800 2104 1234 0001 6162 6364");

    /// The first 28 bytes of a DF-set datagram from 198.18.0.1 to 198.19.0.1.
    static INVOKING: [u8; 28] = hex!("4500 001d 1c46 4000 4011 9262 c612 0001 c613 0001 1194 1194 0009 0000");

    static FRAG_NEEDED_BYTES: [u8; 36] = hex!(
        "0304 d452 0000 0578"
        "4500 001d 1c46 4000 4011 9262 c612 0001 c613 0001 1194 1194 0009 0000"
    );

    const ECHO_REPR: Icmpv4Repr<'static> =
        Icmpv4Repr::EchoRequest { ident: 0x1234, seq_no: 1, data: b"abcd" };

    #[test]
    fn deconstruct_echo_request() -> Result<()> {
        let packet = Icmpv4Packet::new_checked(&ECHO_BYTES[..])?;
        assert_eq!(packet.msg_type(), Icmpv4Type::ECHO_REQUEST);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.checksum(), 0x2104);
        assert_eq!(packet.echo_ident(), 0x1234);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), b"abcd");
        assert!(packet.verify_checksum());
        Ok(())
    }

    #[test]
    fn deconstruct_frag_needed() -> Result<()> {
        let packet = Icmpv4Packet::new_checked(&FRAG_NEEDED_BYTES[..])?;
        assert_eq!(packet.msg_type(), Icmpv4Type::DEST_UNREACHABLE);
        assert_eq!(packet.msg_code(), CODE_FRAG_NEEDED);
        assert_eq!(packet.next_hop_mtu(), 1400);
        assert_eq!(packet.data(), &INVOKING[..]);
        assert!(packet.verify_checksum());
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() {
        let mut bytes = [0xa5; 12];
        let mut packet = Icmpv4Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Icmpv4Type::ECHO_REQUEST);
        packet.set_msg_code(0);
        packet.set_echo_ident(0x1234);
        packet.set_echo_seq_no(1);
        packet.data_mut().copy_from_slice(b"abcd");
        packet.fill_checksum();
        assert_eq!(bytes, ECHO_BYTES);
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        let echo = Icmpv4Packet::new_checked(&ECHO_BYTES[..])?;
        assert_eq!(Icmpv4Repr::parse(&echo)?, ECHO_REPR);
        let frag = Icmpv4Packet::new_checked(&FRAG_NEEDED_BYTES[..])?;
        assert_eq!(
            Icmpv4Repr::parse(&frag)?,
            Icmpv4Repr::FragNeeded { next_hop_mtu: 1400, invoking: &INVOKING }
        );
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        let mut bytes = [0xa5; 12];
        assert_eq!(ECHO_REPR.buffer_len(), 12);
        ECHO_REPR.emit(&mut Icmpv4Packet::new_unchecked(&mut bytes[..]))?;
        assert_eq!(bytes, ECHO_BYTES);
        let mut bytes = [0xa5; 36];
        Icmpv4Repr::frag_needed(1400, &INVOKING).emit(&mut Icmpv4Packet::new_unchecked(&mut bytes[..]))?;
        assert_eq!(bytes, FRAG_NEEDED_BYTES);
        Ok(())
    }

    #[test]
    fn echo_reply_round_trips() -> Result<()> {
        let reply = Icmpv4Repr::EchoReply { ident: 0x1234, seq_no: 1, data: b"abcd" };
        let mut bytes = [0; 12];
        reply.emit(&mut Icmpv4Packet::new_unchecked(&mut bytes[..]))?;
        assert_eq!(bytes[0], 0);
        let packet = Icmpv4Packet::new_checked(&bytes[..])?;
        assert_eq!(Icmpv4Repr::parse(&packet)?, reply);
        Ok(())
    }

    #[test]
    fn frag_needed_cuts_the_invoking_datagram_to_576_bytes() {
        let big = [0x45; 1500];
        let repr = Icmpv4Repr::frag_needed(1400, &big);
        assert_eq!(repr.buffer_len() + crate::ipv4::HEADER_LEN, MAX_ERROR_LEN);
    }

    #[test]
    fn parse_rejects_bad_checksum_type_and_code() -> Result<()> {
        let mut bytes = ECHO_BYTES;
        bytes[11] ^= 1;
        assert_eq!(
            Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&bytes[..])?),
            Err(Error::BadValue { what: "ICMPv4 checksum", value: 0x2104 })
        );
        // Port unreachable (type 3 code 3) is not a message this gateway parses.
        let mut bytes = FRAG_NEEDED_BYTES;
        let mut packet = Icmpv4Packet::new_checked(&mut bytes[..])?;
        packet.set_msg_code(3);
        packet.fill_checksum();
        assert_eq!(
            Icmpv4Repr::parse(&packet),
            Err(Error::BadValue { what: "ICMPv4 message code", value: 3 })
        );
        packet.set_msg_type(Icmpv4Type::TIME_EXCEEDED);
        packet.fill_checksum();
        assert_eq!(
            Icmpv4Repr::parse(&packet),
            Err(Error::BadValue { what: "ICMPv4 message type", value: 11 })
        );
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_message() {
        for len in 0..HEADER_LEN {
            assert!(Icmpv4Packet::new_checked(&ECHO_BYTES[..len]).is_err(), "length {len}");
        }
        for len in HEADER_LEN..ECHO_BYTES.len() {
            // No length field: a cut message is a shorter one whose checksum no longer holds.
            let packet = Icmpv4Packet::new_unchecked(&ECHO_BYTES[..len]);
            assert!(Icmpv4Repr::parse(&packet).is_err(), "length {len}");
        }
    }

    #[test]
    fn emit_rejects_short_buffers() {
        let mut bytes = [0; 11];
        assert_eq!(
            ECHO_REPR.emit(&mut Icmpv4Packet::new_unchecked(&mut bytes[..])),
            Err(Error::BufferTooSmall { what: "ICMPv4 message", need: 12, have: 11 })
        );
    }
}
