//! ICMPv6 view (RFC 4443): echo request/reply and "packet too big" (§3.2).

use core::fmt;
use core::net::Ipv6Addr;

use crate::bytes::{ensure_room, read_u16, read_u32, write_u16, write_u32};
use crate::checksum;
use crate::ip::{IpPair, IpProtocol};
use crate::{Error, Result};

mod field {
    use crate::bytes::{Field, Rest};

    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: Field = 2..4;
    pub(super) const ECHO_IDENT: Field = 4..6;
    pub(super) const ECHO_SEQ_NO: Field = 6..8;
    pub(super) const MTU: Field = 4..8;
    pub(super) const DATA: Rest = 8..;
}

/// Length of the ICMPv6 header for every message here (type, code, checksum, 4 more bytes).
pub const HEADER_LEN: usize = field::DATA.start;

/// The IPv6 minimum link MTU, which bounds an ICMPv6 error packet (RFC 8200 §5, RFC 4443 §2.4(c)).
pub const MIN_MTU: usize = 1280;

/// An ICMPv6 message type; a newtype so unknown values round-trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Icmpv6Type(pub u8);

impl Icmpv6Type {
    /// Destination Unreachable (§3.1).
    pub const DEST_UNREACHABLE: Self = Self(0x01);
    /// Packet Too Big (§3.2).
    pub const PACKET_TOO_BIG: Self = Self(0x02);
    /// Time Exceeded (§3.3).
    pub const TIME_EXCEEDED: Self = Self(0x03);
    /// Parameter Problem (§3.4).
    pub const PARAM_PROBLEM: Self = Self(0x04);
    /// Echo Request (§4.1).
    pub const ECHO_REQUEST: Self = Self(0x80);
    /// Echo Reply (§4.2).
    pub const ECHO_REPLY: Self = Self(0x81);
}

impl fmt::Debug for Icmpv6Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::DEST_UNREACHABLE => "DEST_UNREACHABLE",
            Self::PACKET_TOO_BIG => "PACKET_TOO_BIG",
            Self::TIME_EXCEEDED => "TIME_EXCEEDED",
            Self::PARAM_PROBLEM => "PARAM_PROBLEM",
            Self::ECHO_REQUEST => "ECHO_REQUEST",
            Self::ECHO_REPLY => "ECHO_REPLY",
            _ => return write!(f, "Icmpv6Type({})", self.0),
        };
        write!(f, "Icmpv6Type::{name}")
    }
}

/// A read/write view of an ICMPv6 message; the message is the whole buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
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
            return Err(Error::Truncated { what: "ICMPv6 header", need: HEADER_LEN, have });
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    pub fn msg_type(&self) -> Icmpv6Type {
        Icmpv6Type(self.buffer.as_ref()[field::TYPE])
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

    /// The MTU of the next-hop link (packet too big).
    pub fn mtu(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MTU)
    }

    /// The bytes after the header: echo data, or the start of the invoking packet.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum over the pseudo-header and the message is correct (RFC 4443 §2.3).
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.sum(src, dst) == 0xffff
    }

    /// The one's-complement sum over the pseudo-header and the message as it stands.
    fn sum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let message = self.buffer.as_ref();
        // An ICMPv6 message lives in an IPv6 payload, far below 4 GiB; saturating keeps a
        // caller's oversized buffer from panicking (its checksum simply fails).
        let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
        checksum::combine(&[
            IpPair::V6 { src, dst }.pseudo_header_sum(IpProtocol::ICMPV6, len),
            checksum::data(message),
        ])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg_type: Icmpv6Type) {
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

    /// Sets the MTU (packet too big).
    pub fn set_mtu(&mut self, mtu: u32) {
        write_u32(self.buffer.as_mut(), field::MTU, mtu);
    }

    /// Computes the checksum over the pseudo-header and the message and stores it.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let sum = self.sum(src, dst);
        self.set_checksum(checksum::finish(sum));
    }

    /// The bytes after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv6Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The meaning of the ICMPv6 messages the gateway sends and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr<'a> {
    /// Echo Request (type 128).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed back.
        data: &'a [u8],
    },
    /// Echo Reply (type 129).
    EchoReply {
        /// Identifier copied from the request.
        ident: u16,
        /// Sequence number copied from the request.
        seq_no: u16,
        /// Data copied from the request.
        data: &'a [u8],
    },
    /// Packet Too Big (type 2), which the ESP data plane sends inward when an inner packet
    /// would not fit the tunnel (IPv6 routers never fragment, RFC 8200 §5).
    PacketTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// As much of the invoking packet as keeps the error within [`MIN_MTU`].
        invoking: &'a [u8],
    },
}

impl<'a> Icmpv6Repr<'a> {
    /// A "packet too big" for `invoking`, cut to keep the whole error packet (40-byte IPv6
    /// header included) within [`MIN_MTU`] (RFC 4443 §3.2).
    pub fn packet_too_big(mtu: u32, invoking: &'a [u8]) -> Self {
        let room = MIN_MTU - crate::ipv6::HEADER_LEN - HEADER_LEN;
        let invoking = invoking.get(..room).unwrap_or(invoking);
        Self::PacketTooBig { mtu, invoking }
    }

    /// Reads a checked message sent from `src` to `dst`, verifying its checksum; other
    /// types, and echo codes other than zero, are errors.
    pub fn parse<T: AsRef<[u8]>>(packet: &'a Icmpv6Packet<T>, src: Ipv6Addr, dst: Ipv6Addr) -> Result<Self> {
        if !packet.verify_checksum(src, dst) {
            return Err(Error::BadValue { what: "ICMPv6 checksum", value: u64::from(packet.checksum()) });
        }
        let code = packet.msg_code();
        match (packet.msg_type(), code) {
            (Icmpv6Type::ECHO_REQUEST, 0) => Ok(Self::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: packet.data(),
            }),
            (Icmpv6Type::ECHO_REPLY, 0) => Ok(Self::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data: packet.data(),
            }),
            (Icmpv6Type::ECHO_REQUEST | Icmpv6Type::ECHO_REPLY, _) => {
                Err(Error::BadValue { what: "ICMPv6 message code", value: u64::from(code) })
            }
            // The code of Packet Too Big is ignored by the receiver (RFC 4443 §3.2).
            (Icmpv6Type::PACKET_TOO_BIG, _) => {
                Ok(Self::PacketTooBig { mtu: packet.mtu(), invoking: packet.data() })
            }
            (msg_type, _) => {
                Err(Error::BadValue { what: "ICMPv6 message type", value: u64::from(msg_type.0) })
            }
        }
    }

    /// The bytes after the header.
    fn data(&self) -> &'a [u8] {
        match *self {
            Self::EchoRequest { data, .. } | Self::EchoReply { data, .. } => data,
            Self::PacketTooBig { invoking, .. } => invoking,
        }
    }

    /// Length of the message.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Writes the message and its checksum for `src` → `dst`; the view's buffer must be
    /// exactly `buffer_len` bytes, since the checksum covers all of it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Icmpv6Packet<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<()> {
        ensure_room("ICMPv6 message", packet.buffer.as_ref().len(), self.buffer_len())?;
        // The buffer holds HEADER_LEN + data bytes, so the setters and the copy are in bounds.
        let msg_type = match *self {
            Self::EchoRequest { ident, seq_no, .. } | Self::EchoReply { ident, seq_no, .. } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                let is_request = matches!(self, Self::EchoRequest { .. });
                if is_request {
                    Icmpv6Type::ECHO_REQUEST
                } else {
                    Icmpv6Type::ECHO_REPLY
                }
            }
            Self::PacketTooBig { mtu, .. } => {
                packet.set_mtu(mtu);
                Icmpv6Type::PACKET_TOO_BIG
            }
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(0);
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        packet.fill_checksum(src, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    static ECHO_BYTES: [u8; 12] = hex!("8000 4d48 1234 0001 6162 6364");

    /// The start of a packet from 2001:db8::2 back to 2001:db8::1 that did not fit.
    static INVOKING: [u8; 48] = hex!(
        "6b81 2345 0014 1140"
        "2001 0db8 0000 0000 0000 0000 0000 0002"
        "2001 0db8 0000 0000 0000 0000 0000 0001"
        "1194 1194 0014 d389"
    );

    static TOO_BIG_BYTES: [u8; 56] = hex!(
        "0200 aac2 0000 0500"
        "6b81 2345 0014 1140"
        "2001 0db8 0000 0000 0000 0000 0000 0002"
        "2001 0db8 0000 0000 0000 0000 0000 0001"
        "1194 1194 0014 d389"
    );

    const ECHO_REPR: Icmpv6Repr<'static> =
        Icmpv6Repr::EchoRequest { ident: 0x1234, seq_no: 1, data: b"abcd" };

    #[test]
    fn deconstruct_echo_request() -> Result<()> {
        let packet = Icmpv6Packet::new_checked(&ECHO_BYTES[..])?;
        assert_eq!(packet.msg_type(), Icmpv6Type::ECHO_REQUEST);
        assert_eq!(packet.msg_code(), 0);
        assert_eq!(packet.checksum(), 0x4d48);
        assert_eq!(packet.echo_ident(), 0x1234);
        assert_eq!(packet.echo_seq_no(), 1);
        assert_eq!(packet.data(), b"abcd");
        assert!(packet.verify_checksum(SRC, DST));
        assert!(!packet.verify_checksum(DST, DST), "the pseudo-header is covered");
        Ok(())
    }

    #[test]
    fn deconstruct_packet_too_big() -> Result<()> {
        let packet = Icmpv6Packet::new_checked(&TOO_BIG_BYTES[..])?;
        assert_eq!(packet.msg_type(), Icmpv6Type::PACKET_TOO_BIG);
        assert_eq!(packet.mtu(), 1280);
        assert_eq!(packet.data(), &INVOKING[..]);
        assert!(packet.verify_checksum(SRC, DST));
        Ok(())
    }

    #[test]
    fn construct_with_setters_gives_the_literal() {
        let mut bytes = [0xa5; 12];
        let mut packet = Icmpv6Packet::new_unchecked(&mut bytes[..]);
        packet.set_msg_type(Icmpv6Type::ECHO_REQUEST);
        packet.set_msg_code(0);
        packet.set_echo_ident(0x1234);
        packet.set_echo_seq_no(1);
        packet.data_mut().copy_from_slice(b"abcd");
        packet.fill_checksum(SRC, DST);
        assert_eq!(bytes, ECHO_BYTES);
    }

    #[test]
    fn parse_gives_the_repr() -> Result<()> {
        let echo = Icmpv6Packet::new_checked(&ECHO_BYTES[..])?;
        assert_eq!(Icmpv6Repr::parse(&echo, SRC, DST)?, ECHO_REPR);
        let too_big = Icmpv6Packet::new_checked(&TOO_BIG_BYTES[..])?;
        assert_eq!(
            Icmpv6Repr::parse(&too_big, SRC, DST)?,
            Icmpv6Repr::PacketTooBig { mtu: 1280, invoking: &INVOKING }
        );
        Ok(())
    }

    #[test]
    fn emit_gives_the_literal() -> Result<()> {
        let mut bytes = [0xa5; 12];
        ECHO_REPR.emit(&mut Icmpv6Packet::new_unchecked(&mut bytes[..]), SRC, DST)?;
        assert_eq!(bytes, ECHO_BYTES);
        let mut bytes = [0xa5; 56];
        Icmpv6Repr::packet_too_big(1280, &INVOKING).emit(
            &mut Icmpv6Packet::new_unchecked(&mut bytes[..]),
            SRC,
            DST,
        )?;
        assert_eq!(bytes, TOO_BIG_BYTES);
        Ok(())
    }

    #[test]
    fn echo_reply_round_trips() -> Result<()> {
        let reply = Icmpv6Repr::EchoReply { ident: 0x1234, seq_no: 1, data: b"abcd" };
        let mut bytes = [0; 12];
        reply.emit(&mut Icmpv6Packet::new_unchecked(&mut bytes[..]), SRC, DST)?;
        assert_eq!(bytes[..4], hex!("8100 4c48"));
        let packet = Icmpv6Packet::new_checked(&bytes[..])?;
        assert_eq!(Icmpv6Repr::parse(&packet, SRC, DST)?, reply);
        Ok(())
    }

    #[test]
    fn packet_too_big_cuts_the_invoking_packet_to_the_minimum_mtu() {
        let big = [0x60; 1500];
        let repr = Icmpv6Repr::packet_too_big(1400, &big);
        assert_eq!(repr.buffer_len() + crate::ipv6::HEADER_LEN, MIN_MTU);
    }

    #[test]
    fn parse_rejects_bad_checksum_type_and_code() -> Result<()> {
        let packet = Icmpv6Packet::new_checked(&ECHO_BYTES[..])?;
        assert_eq!(
            Icmpv6Repr::parse(&packet, DST, SRC),
            Ok(ECHO_REPR),
            "swapping source and destination keeps the sum"
        );
        assert_eq!(
            Icmpv6Repr::parse(&packet, SRC, SRC),
            Err(Error::BadValue { what: "ICMPv6 checksum", value: 0x4d48 })
        );
        let mut bytes = ECHO_BYTES;
        let mut packet = Icmpv6Packet::new_checked(&mut bytes[..])?;
        packet.set_msg_code(1);
        packet.fill_checksum(SRC, DST);
        assert_eq!(
            Icmpv6Repr::parse(&packet, SRC, DST),
            Err(Error::BadValue { what: "ICMPv6 message code", value: 1 })
        );
        packet.set_msg_type(Icmpv6Type::PARAM_PROBLEM);
        packet.fill_checksum(SRC, DST);
        assert_eq!(
            Icmpv6Repr::parse(&packet, SRC, DST),
            Err(Error::BadValue { what: "ICMPv6 message type", value: 4 })
        );
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_message() {
        for len in 0..HEADER_LEN {
            assert!(Icmpv6Packet::new_checked(&TOO_BIG_BYTES[..len]).is_err(), "length {len}");
        }
        for len in HEADER_LEN..TOO_BIG_BYTES.len() {
            let packet = Icmpv6Packet::new_unchecked(&TOO_BIG_BYTES[..len]);
            assert!(Icmpv6Repr::parse(&packet, SRC, DST).is_err(), "length {len}");
        }
    }

    #[test]
    fn emit_rejects_short_buffers() {
        let mut bytes = [0; 11];
        assert_eq!(
            ECHO_REPR.emit(&mut Icmpv6Packet::new_unchecked(&mut bytes[..]), SRC, DST),
            Err(Error::BufferTooSmall { what: "ICMPv6 message", need: 12, have: 11 })
        );
    }
}
