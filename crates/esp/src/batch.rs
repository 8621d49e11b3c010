//! A batch: packets laid out in one caller-owned area cut into equal slots, so that the whole
//! batch crosses into the enclave in one `esp_batch` call (offsets into one area).
//!
//! ```text
//! area: | slot 0                     | slot 1                     | ...
//!       | headroom | packet | tail   | headroom | packet | tail   |
//!                  ^offset
//! ```
//!
//! On encapsulation the inner packet sits at `offset` with at least [`HEADROOM`] bytes in
//! front (outer IP, UDP, ESP header, IV) and [`TAILROOM`] behind (padding, trailer, ICV); the
//! outer packet is built around it without moving it. On decapsulation the received packet
//! is decrypted in place and the inner packet is left where the plaintext was. Slots past
//! [`Batch::len`] are free: IPv4 fragmentation puts additional fragments there.

use core::net::{IpAddr, SocketAddr};

use wire::Ecn;

use crate::drop::DropReason;
use crate::error::{Error, Result};
use crate::sad::{Encapsulation, OutboundSaId};

/// Room needed in front of an inner packet for the largest outer headers: IPv6 (40), UDP
/// (8), ESP header (8) and a CBC IV (16).
pub const HEADROOM: usize = 40 + 8 + 8 + 16;
/// Room needed behind an inner packet: up to 15 bytes of CBC padding, the 2-byte trailer
/// and the largest ICV (32, HMAC-SHA-512-256).
pub const TAILROOM: usize = 15 + 2 + 32;

/// What the bytes of a received packet are (decapsulation input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Frame {
    /// A whole IP packet (raw socket, AF_XDP, TUN); also every encapsulation input.
    Ip,
    /// The payload of a UDP datagram received on a socket, with what the socket told.
    Udp {
        /// The sender.
        remote: SocketAddr,
        /// Our address and port it was sent to.
        local: SocketAddr,
        /// The ECN field of the outer IP header (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
        ecn: Ecn,
    },
    /// An ESP packet received on a raw IP socket (protocol 50), its IP header read by the
    /// socket layer and handed over as these fields.
    Esp {
        /// The sender.
        remote: IpAddr,
        /// Our address it was sent to.
        local: IpAddr,
        /// The ECN field of the outer IP header.
        ecn: Ecn,
    },
}

/// Where an encapsulated packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// The SA that protected it.
    pub sa: OutboundSaId,
    /// Our tunnel endpoint (the outer source).
    pub local: IpAddr,
    /// The peer (the outer destination).
    pub remote: IpAddr,
    /// Raw ESP or ESP-in-UDP, with the ports.
    pub encapsulation: Encapsulation,
    /// Offset of the ESP header within the slot: the payload for a UDP or raw-ESP socket,
    /// where `offset` is the outer IP header for a raw IP socket.
    pub esp_offset: usize,
}

/// The outcome for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Not processed yet.
    Pending,
    /// Encapsulated: send the outer packet.
    Transmit(Transmit),
    /// Decapsulated: forward the inner packet on the cloud side.
    Deliver {
        /// The inbound SA that authenticated it.
        spi: u32,
    },
    /// An ICMP error (fragmentation needed / packet too big) for the inner source, built in
    /// place of the packet: send it inward, after rate limiting.
    IcmpError,
    /// BYPASS: forward the inner packet unprotected.
    Bypass,
    /// An IKE message on the NAT-T port (non-ESP marker removed): for the IKE engine.
    Ike {
        /// The sender.
        remote: SocketAddr,
        /// Where it was sent.
        local: SocketAddr,
    },
    /// A NAT-keepalive (RFC 3948 §2.3): consumed.
    Keepalive {
        /// The sender.
        remote: SocketAddr,
    },
    /// Dropped and counted.
    Drop(DropReason),
}

/// One packet of a batch: where its bytes are within its slot, and what became of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Packet {
    /// First byte within the slot.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
    /// What the bytes are (decapsulation input).
    pub frame: Frame,
    /// The outcome.
    pub action: Action,
}

impl Packet {
    /// An unused entry.
    pub const EMPTY: Self = Self { offset: 0, len: 0, frame: Frame::Ip, action: Action::Pending };
}

/// Packets in one area of equal slots, plus their metadata.
#[derive(Debug)]
pub struct Batch<'a> {
    pub(crate) area: &'a mut [u8],
    pub(crate) slot_len: usize,
    pub(crate) packets: &'a mut [Packet],
    pub(crate) len: usize,
}

impl<'a> Batch<'a> {
    /// A batch of `packets.len()` slots of `slot_len` bytes over `area`, empty.
    pub fn new(area: &'a mut [u8], slot_len: usize, packets: &'a mut [Packet]) -> Result<Self> {
        if slot_len < HEADROOM + TAILROOM + wire::ipv4::HEADER_LEN {
            return Err(Error::InvalidBatch { why: "slots too small for headroom and tailroom" });
        }
        if slot_len.checked_mul(packets.len()).is_none_or(|n| n > area.len()) {
            return Err(Error::InvalidBatch { why: "area shorter than its slots" });
        }
        // Enclave descriptors carry 32-bit offsets.
        if u32::try_from(slot_len.saturating_mul(packets.len())).is_err() {
            return Err(Error::InvalidBatch { why: "area larger than 4 GiB" });
        }
        Ok(Self { area, slot_len, packets, len: 0 })
    }

    /// Packets in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in the area.
    pub fn capacity(&self) -> usize {
        self.packets.len()
    }

    /// The length of every slot.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Empties the batch (the bytes stay).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The bytes of slot `i`, for the I/O layer to receive into.
    pub fn slot_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let start = i.checked_mul(self.slot_len)?;
        self.area.get_mut(start..start.checked_add(self.slot_len)?)
    }

    /// Appends a packet already written into the next free slot at `offset`.
    pub fn push_in_place(&mut self, frame: Frame, offset: usize, len: usize) -> Result<usize> {
        let i = self.len;
        let slot = self.packets.get_mut(i).ok_or(Error::InvalidBatch { why: "batch is full" })?;
        if offset.checked_add(len).is_none_or(|end| end > self.slot_len) {
            return Err(Error::InvalidBatch { why: "packet does not fit its slot" });
        }
        *slot = Packet { offset, len, frame, action: Action::Pending };
        self.len += 1;
        Ok(i)
    }

    /// Copies `bytes` into the next free slot at `offset` and appends it.
    pub fn push(&mut self, frame: Frame, offset: usize, bytes: &[u8]) -> Result<usize> {
        let i = self.len;
        let slot = self.slot_mut(i).ok_or(Error::InvalidBatch { why: "batch is full" })?;
        let dst = offset
            .checked_add(bytes.len())
            .and_then(|end| slot.get_mut(offset..end))
            .ok_or(Error::InvalidBatch { why: "packet does not fit its slot" })?;
        dst.copy_from_slice(bytes);
        self.push_in_place(frame, offset, bytes.len())
    }

    /// The packets, in order.
    pub fn packets(&self) -> &[Packet] {
        self.packets.get(..self.len).unwrap_or(&[])
    }

    /// The bytes of packet `i` as its action left them (outer packet, inner packet, ICMP
    /// error or IKE message).
    pub fn bytes(&self, i: usize) -> Option<&[u8]> {
        let p = self.packets().get(i)?;
        let start = i.checked_mul(self.slot_len)?.checked_add(p.offset)?;
        self.area.get(start..start.checked_add(p.len)?)
    }

    /// Packets with their bytes.
    pub fn iter(&self) -> impl Iterator<Item = (&Packet, &[u8])> {
        (0..self.len).filter_map(|i| Some((self.packets.get(i)?, self.bytes(i)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_copies_into_consecutive_slots() {
        let mut area = vec![0u8; 4 * 256];
        let mut packets = [Packet::EMPTY; 4];
        let mut b = Batch::new(&mut area, 256, &mut packets).unwrap();
        assert_eq!(b.push(Frame::Ip, HEADROOM, b"abc").unwrap(), 0);
        assert_eq!(b.push(Frame::Ip, HEADROOM, b"defg").unwrap(), 1);
        assert_eq!(b.bytes(1), Some(&b"defg"[..]));
        assert_eq!(b.len(), 2);
        assert!(b.push(Frame::Ip, 250, b"too long").is_err());
        assert_eq!(b.iter().count(), 2);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn areas_must_hold_their_slots() {
        let mut area = vec![0u8; 1000];
        let mut packets = [Packet::EMPTY; 4];
        assert!(Batch::new(&mut area, 256, &mut packets).is_err());
        assert!(Batch::new(&mut area, 64, &mut packets).is_err());
        assert!(Batch::new(&mut area, 250, &mut packets).is_ok());
    }
}
