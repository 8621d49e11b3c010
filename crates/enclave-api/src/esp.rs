//! The ESP batch call: plain descriptors over one packet area, one status per descriptor.
//!
//! A batch is `(packet area: &mut [u8], descriptors: &[EspDescriptor], status: &mut [EspStatus])`
//! and crosses the boundary once. Each descriptor names an SA by handle and a region of the
//! packet area by offset and length; nothing else is trusted about it. The process backend
//! marshals exactly these fields ([`EspDescriptor::encode`], 32 bytes each, packed in its
//! descriptor table) through shared memory and validates them on the other side with
//! [`EspDescriptor::decode`].
//!
//! # What a descriptor covers
//!
//! `offset .. offset + len` is one ESP packet from the first byte of the ESP header to the
//! last byte of the ICV (RFC 4303 §2):
//!
//! ```text
//! offset                                                               offset + len
//! | SPI (4) | Seq lo (4) | IV (iv_len) | payload (P bytes)            | ICV (icv_len) |
//!                                      inner packet | padding | pad len | next header
//! ```
//!
//! * [`EspOpcode::ENCRYPT`]: the caller has laid out the whole packet with the plaintext
//!   payload *including* the ESP trailer (padding, Pad Length, Next Header) and left room for
//!   the IV and ICV. `P` must be a multiple of [`crate::Suite::esp_payload_align`]. The enclave
//!   writes the SPI and the low 32 bits of `seq`, the IV, encrypts the payload in place and
//!   writes the ICV. `seq` must be greater than every sequence number this SA has used, so
//!   an IV can never repeat under one key: the AEADs use the 64-bit sequence number as the
//!   IV (RFC 4106 §3.1); AES-CBC uses E_K("ESP-CBC-IV" || seq) as IV, the encrypted-nonce
//!   method of NIST SP 800-38A Appendix C, which is unpredictable without the key.
//! * [`EspOpcode::DECRYPT`]: the enclave checks the SPI and the low 32 bits of `seq` against
//!   the header, verifies the ICV (with the high 32 bits of `seq` when the SA uses ESN), and
//!   only then leaves the decrypted payload in place of the ciphertext. IV and ICV bytes are
//!   left as they were. On [`EspStatus::IcvMismatch`] the payload bytes may have been
//!   overwritten (with zeros): drop the packet.
//! * [`EspOpcode::DECRYPT_FORWARD`]: EnclaveVPN's AD-merging with In-Enclave Forwarding. As
//!   DECRYPT, but the plaintext stays in enclave-private scratch memory: the packet keeps its
//!   ciphertext and the enclave only rewrites the *outer* IP header's destination address
//!   (at `outer_offset`) with the inner packet's destination, fixing the IPv4 header checksum
//!   and a non-zero UDP checksum (ESP-in-UDP, RFC 3948) incrementally.
//!
//! The sequence number is always the full 64-bit value; with ESN (RFC 4303 §2.2.1) only the
//! low half is on the wire, and the caller infers the high half from its replay window.

use super::alg::Suite;
use super::handle::EspSaHandle;

/// One direction of a static ESP SA, as [`crate::Enclave::esp_sa_install_wrapped`] makes it
/// (the parameters of the test-only raw-key install, without the keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspSaParams {
    /// The SPI: ours for an inbound SA, the peer's for an outbound one; never 0.
    pub spi: u32,
    /// `true`: we receive with it; `false`: we send with it.
    pub inbound: bool,
    /// Extended Sequence Numbers (RFC 4303 §2.2.1).
    pub esn: bool,
    /// The transform.
    pub suite: Suite,
}

/// What to do with one packet; a newtype so that unknown values survive the trip through
/// shared memory and are refused per packet with [`EspStatus::UnknownOpcode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspOpcode(pub u8);

impl EspOpcode {
    /// Outbound: fill IV, encrypt, write ICV.
    pub const ENCRYPT: Self = Self(1);
    /// Inbound: verify the ICV, then decrypt in place.
    pub const DECRYPT: Self = Self(2);
    /// Inbound, In-Enclave Forwarding: verify, decrypt privately, rewrite the outer destination.
    pub const DECRYPT_FORWARD: Self = Self(3);
}

/// One packet of a batch. Plain integers only, so it can cross shared memory as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspDescriptor {
    /// What to do.
    pub opcode: EspOpcode,
    /// Which SA's keys to use; its direction must match the opcode.
    pub sa: EspSaHandle,
    /// Offset of the ESP header in the packet area.
    pub offset: u32,
    /// Bytes from the ESP header through the ICV.
    pub len: u32,
    /// The full 64-bit sequence number of this packet.
    pub seq: u64,
    /// DECRYPT_FORWARD only: offset of the outer IPv4/IPv6 header; ignored otherwise.
    pub outer_offset: u32,
}

/// Bytes of one descriptor in its shared-memory encoding.
pub const ESP_DESCRIPTOR_LEN: usize = 32;

impl EspDescriptor {
    /// An ENCRYPT descriptor.
    pub const fn encrypt(sa: EspSaHandle, offset: u32, len: u32, seq: u64) -> Self {
        Self { opcode: EspOpcode::ENCRYPT, sa, offset, len, seq, outer_offset: 0 }
    }

    /// A DECRYPT descriptor.
    pub const fn decrypt(sa: EspSaHandle, offset: u32, len: u32, seq: u64) -> Self {
        Self { opcode: EspOpcode::DECRYPT, sa, offset, len, seq, outer_offset: 0 }
    }

    /// A DECRYPT_FORWARD descriptor whose outer IP header starts at `outer_offset`.
    pub const fn decrypt_forward(
        sa: EspSaHandle,
        outer_offset: u32,
        offset: u32,
        len: u32,
        seq: u64,
    ) -> Self {
        Self { opcode: EspOpcode::DECRYPT_FORWARD, sa, offset, len, seq, outer_offset }
    }

    /// The shared-memory encoding, little-endian:
    /// `opcode u8 | 0 u8 x3 | sa u32 | offset u32 | len u32 | seq u64 | outer_offset u32 | 0 u32`.
    pub fn encode(&self) -> [u8; ESP_DESCRIPTOR_LEN] {
        let mut b = [0u8; ESP_DESCRIPTOR_LEN];
        b[0] = self.opcode.0;
        b[4..8].copy_from_slice(&self.sa.0.to_le_bytes());
        b[8..12].copy_from_slice(&self.offset.to_le_bytes());
        b[12..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.outer_offset.to_le_bytes());
        b
    }

    /// Decodes [`Self::encode`]'s format; non-zero reserved bytes give
    /// [`EspStatus::Malformed`]. Opcode, handle and ranges are checked later, per packet.
    pub fn decode(b: &[u8; ESP_DESCRIPTOR_LEN]) -> Result<Self, EspStatus> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if b[1..4] != [0, 0, 0] || b[28..32] != [0, 0, 0, 0] {
            return Err(EspStatus::Malformed);
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&b[16..24]);
        Ok(Self {
            opcode: EspOpcode(b[0]),
            sa: EspSaHandle(u32_at(4)),
            offset: u32_at(8),
            len: u32_at(12),
            seq: u64::from_le_bytes(seq),
            outer_offset: u32_at(24),
        })
    }
}

/// The outcome for one packet. `Copy`, counted, never logged per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum EspStatus {
    /// Done: encrypted, or authenticated and decrypted (and forwarded).
    Ok = 0,
    /// Not looked at (the initial value; also left when the whole batch is refused).
    #[default]
    NotProcessed = 1,
    /// The opcode is none of [`EspOpcode`]'s constants.
    UnknownOpcode = 2,
    /// The SA handle names no live SA (never issued, or deleted).
    UnknownSa = 3,
    /// The SA handle was issued by another enclave instance (another tenant).
    ForeignSa = 4,
    /// ENCRYPT on an inbound SA, or DECRYPT on an outbound one.
    WrongDirection = 5,
    /// The region (or the outer header) lies outside the packet area.
    OutOfBounds = 6,
    /// The length does not fit the transform (too short, misaligned payload).
    BadLength = 7,
    /// The ESP header's SPI is not this SA's.
    SpiMismatch = 8,
    /// The header's sequence number is not the low half of `seq`, or `seq` needs ESN.
    SeqMismatch = 9,
    /// ENCRYPT with a sequence number this SA already used: it would repeat an IV.
    SeqReused = 10,
    /// The sequence number space is used up: rekey.
    SeqExhausted = 11,
    /// The ICV is wrong: nothing was decrypted for the caller.
    IcvMismatch = 12,
    /// DECRYPT_FORWARD: the outer header is not IPv4/IPv6 directly followed by ESP or UDP+ESP.
    BadOuterHeader = 13,
    /// DECRYPT_FORWARD: the decrypted payload is not an IPv4/IPv6 packet.
    BadInnerHeader = 14,
    /// DECRYPT_FORWARD: inner and outer headers are of different IP versions.
    AddressFamilyMismatch = 15,
    /// The descriptor's reserved bytes are not zero.
    Malformed = 16,
    /// The region (with the outer header, for DECRYPT_FORWARD) shares bytes with an earlier
    /// descriptor's in the same batch (the process backend's transport refuses it).
    Overlap = 17,
    /// DECRYPT on an inbound SA that the measured configuration binds to DECRYPT_FORWARD, or
    /// the other way round ([`crate::InboundMode`]).
    ModeNotAllowed = 18,
    /// ENCRYPT with a number so far below the highest this SA used (2048 or more) that the
    /// enclave no longer knows whether it used it. Nothing was sealed and the number stays
    /// unused; the packet may go again under a fresh number (a worker that lost its core
    /// between drawing numbers and crossing, while others moved the SA on).
    SeqStale = 19,
}

impl EspStatus {
    /// Number of status values, for per-status counter arrays.
    pub const COUNT: usize = 20;

    /// All values, in code order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::Ok,
        Self::NotProcessed,
        Self::UnknownOpcode,
        Self::UnknownSa,
        Self::ForeignSa,
        Self::WrongDirection,
        Self::OutOfBounds,
        Self::BadLength,
        Self::SpiMismatch,
        Self::SeqMismatch,
        Self::SeqReused,
        Self::SeqExhausted,
        Self::IcvMismatch,
        Self::BadOuterHeader,
        Self::BadInnerHeader,
        Self::AddressFamilyMismatch,
        Self::Malformed,
        Self::Overlap,
        Self::ModeNotAllowed,
        Self::SeqStale,
    ];

    /// The status code, as it crosses shared memory.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Index into a per-status counter array.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What one batch call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchSummary {
    /// Descriptors with [`EspStatus::Ok`].
    pub ok: u32,
    /// Descriptors with any other status.
    pub failed: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_encoding_round_trips() {
        let d = EspDescriptor::decrypt_forward(EspSaHandle(0xAB01_0002), 14, 34, 1400, 0x1_0000_0002);
        let enc = d.encode();
        assert_eq!(enc.len(), ESP_DESCRIPTOR_LEN);
        assert_eq!(EspDescriptor::decode(&enc), Ok(d));
    }

    #[test]
    fn descriptor_with_reserved_bytes_set_is_malformed() {
        let mut enc = EspDescriptor::encrypt(EspSaHandle(1), 0, 64, 1).encode();
        enc[30] = 1;
        assert_eq!(EspDescriptor::decode(&enc), Err(EspStatus::Malformed));
    }

    #[test]
    fn status_codes_index_their_table() {
        for (i, s) in EspStatus::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }
}
