//! The virtio-net header (`struct virtio_net_hdr`, virtio 1.x §5.1.6) that precedes every
//! packet on a TUN queue opened with `IFF_VNET_HDR`.
//!
//! ```text
//!  0        1        2                 4                 6                 8                10
//! | flags  |gso_type| hdr_len         | gso_size        | csum_start      | csum_offset     |
//! ```
//!
//! The queue is switched to little-endian headers (`TUNSETVNETLE`), as virtio 1.x defines
//! them, so the layout does not depend on the host's byte order.

/// Length of the header as configured with `TUNSETVNETHDRSZ` (no `num_buffers` field).
pub const VNET_HDR_LEN: usize = 10;

/// `flags`: the checksum from `csum_start` to the end is still to be computed and stored at
/// `csum_start + csum_offset` (the field holds the pseudo-header sum).
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum is known to be good.
pub const F_DATA_VALID: u8 = 2;

/// `gso_type`: not a super-packet.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: TCP over IPv4, cut at `gso_size` (TSO).
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: UDP fragmentation offload (UFO, deprecated; never enabled here).
pub const GSO_UDP: u8 = 3;
/// `gso_type`: TCP over IPv6 (TSO).
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: UDP segmentation (USO): datagrams of `gso_size` payload bytes.
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` flag: the TCP stream uses ECN, CWR belongs on the first segment only.
pub const GSO_ECN: u8 = 0x80;

/// One virtio-net header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHeader {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`.
    pub flags: u8,
    /// `GSO_*`, possibly with `GSO_ECN`.
    pub gso_type: u8,
    /// Length of the headers (a hint: Linux reports the linear part's length here).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed region starts (the transport header).
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum field is.
    pub csum_offset: u16,
}

impl VnetHeader {
    /// The header of a plain packet: no GSO, checksums complete.
    pub const PLAIN: Self =
        Self { flags: 0, gso_type: GSO_NONE, hdr_len: 0, gso_size: 0, csum_start: 0, csum_offset: 0 };

    /// Reads a header from the first [`VNET_HDR_LEN`] bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let b: &[u8; VNET_HDR_LEN] = bytes.get(..VNET_HDR_LEN)?.try_into().ok()?;
        let word = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: word(2),
            gso_size: word(4),
            csum_start: word(6),
            csum_offset: word(8),
        })
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// The GSO type without the ECN flag.
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !GSO_ECN
    }

    /// Whether a checksum is left to complete.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_little_endian() {
        let h = VnetHeader {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4 | GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let b = h.to_bytes();
        assert_eq!(b, [1, 0x81, 66, 0, 0xa8, 0x05, 20, 0, 16, 0]);
        assert_eq!(VnetHeader::parse(&b), Some(h));
        assert_eq!(h.gso_kind(), GSO_TCPV4);
        assert!(h.needs_csum());
        assert_eq!(VnetHeader::parse(&b[..9]), None);
        assert_eq!(VnetHeader::PLAIN.to_bytes(), [0; VNET_HDR_LEN]);
    }
}
