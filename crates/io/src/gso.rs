//! Cutting a TSO/USO super-packet from a TUN queue into the IP packets it stands for, and
//! completing checksums the kernel left partial. Pure functions over byte slices.
//!
//! With `TUNSETOFFLOAD` the kernel hands a TUN reader what a NIC driver would get: up to
//! 64 KiB of TCP (or UDP) payload behind one set of headers, plus a [`VnetHeader`] saying
//! the segment size (`gso_size`) and where the transport checksum goes. Each segment gets:
//!
//! * a copy of the IP and transport headers;
//! * IPv4: its own Total Length, an Identification incremented per segment (as NICs do,
//!   RFC 6864 allows it for atomic datagrams) and a new header checksum; IPv6: its own
//!   Payload Length (extension headers are copied as they are);
//! * TCP: the sequence number advanced by the payload before it; FIN and PSH only on the
//!   last segment and CWR only on the first (what Linux's own `tcp_gso_segment` does);
//! * UDP (USO): its own Length;
//! * a complete transport checksum, computed from scratch over the RFC 793 / RFC 768 /
//!   RFC 8200 §8.1 pseudo-header: the partial sum the kernel left covers the whole
//!   super-packet's length, not the segment's.
//!
//! A plain packet with `F_NEEDS_CSUM` is completed as virtio defines it: the one's-complement
//! sum from `csum_start` to the end (which includes the pseudo-header sum already in the
//! field) goes, complemented, to `csum_start + csum_offset`; a zero result is sent as
//! `0xffff`, as Linux's `skb_checksum_help` does (equivalent for TCP, required for UDP).
//!
//! Nothing here trusts the header: every offset is checked against the packet, and a
//! packet that does not add up is an error (the caller counts it), never a panic.

use wire::checksum;

use crate::tcpip::{be16, pseudo_header_sum, PROTO_TCP, PROTO_UDP, TCP_CWR, TCP_FIN, TCP_PSH};
use crate::vnet::{self, VnetHeader};

/// The most segments one super-packet may be cut into (64 KiB of 64-byte segments);
/// a sanity bound against a nonsensical `gso_size`.
pub const MAX_SEGMENTS: usize = 1024;

/// Why a packet read from a TUN queue cannot be cut or completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GsoError {
    /// Shorter than its headers, or than its IP length says.
    #[error("packet truncated")]
    Truncated,
    /// An IP or transport header that cannot be what the GSO type says.
    #[error("bad {0} header")]
    BadHeader(&'static str),
    /// A GSO type this module does not cut (UFO).
    #[error("unsupported GSO type {0}")]
    Unsupported(u8),
    /// `csum_start`/`csum_offset` point outside the packet.
    #[error("checksum offsets outside the packet")]
    BadChecksumOffsets,
    /// `gso_size` is zero or yields more than [`MAX_SEGMENTS`] segments.
    #[error("bad segment size")]
    BadSegmentSize,
    /// The output buffer is smaller than the segment.
    #[error("output buffer too small")]
    NoRoom,
}

/// The transport a super-packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Udp,
}

/// How to produce each segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// One packet, copied as it is, its checksum completed at `(start, offset)` if given.
    Plain { csum: Option<(usize, usize)> },
    /// A super-packet cut into `mss`-byte payloads behind `hdr_end` bytes of headers.
    Cut { v6: bool, transport: Transport, l4: usize, hdr_end: usize, mss: usize },
}

/// A packet from a TUN queue with its virtio-net header, checked and ready to be written
/// out as [`Segments::count`] IP packets.
#[derive(Debug, Clone, Copy)]
pub struct Segments<'a> {
    packet: &'a [u8],
    plan: Plan,
    count: usize,
}

fn put16(b: &mut [u8], at: usize, v: u16) -> Result<(), GsoError> {
    b.get_mut(at..at + 2).ok_or(GsoError::NoRoom)?.copy_from_slice(&v.to_be_bytes());
    Ok(())
}

impl<'a> Segments<'a> {
    /// Checks `packet` (an IP packet, without the virtio-net header) against `header`.
    pub fn new(header: &VnetHeader, packet: &'a [u8]) -> Result<Self, GsoError> {
        let transport = match header.gso_kind() {
            vnet::GSO_NONE => return Self::plain(header, packet),
            vnet::GSO_TCPV4 | vnet::GSO_TCPV6 => Transport::Tcp,
            vnet::GSO_UDP_L4 => Transport::Udp,
            other => return Err(GsoError::Unsupported(other)),
        };
        let version = packet.first().map(|b| b >> 4);
        let (v6, packet, l4) = match version {
            Some(4) => {
                if header.gso_kind() == vnet::GSO_TCPV6 {
                    return Err(GsoError::BadHeader("IPv4"));
                }
                let (packet, l4) = Self::ipv4(packet, transport)?;
                (false, packet, l4)
            }
            Some(6) => {
                if header.gso_kind() == vnet::GSO_TCPV4 {
                    return Err(GsoError::BadHeader("IPv6"));
                }
                let (packet, l4) = Self::ipv6(header, packet, transport)?;
                (true, packet, l4)
            }
            _ => return Err(GsoError::BadHeader("IP")),
        };
        let hdr_end = match transport {
            Transport::Tcp => {
                let doff = usize::from(packet.get(l4 + 12).ok_or(GsoError::Truncated)? >> 4) * 4;
                if doff < 20 {
                    return Err(GsoError::BadHeader("TCP"));
                }
                l4 + doff
            }
            Transport::Udp => l4 + 8,
        };
        if hdr_end > packet.len() {
            return Err(GsoError::Truncated);
        }
        let mss = usize::from(header.gso_size);
        if mss == 0 {
            return Err(GsoError::BadSegmentSize);
        }
        let payload = packet.len() - hdr_end;
        let count = payload.div_ceil(mss).max(1);
        if count > MAX_SEGMENTS {
            return Err(GsoError::BadSegmentSize);
        }
        Ok(Self { packet, plan: Plan::Cut { v6, transport, l4, hdr_end, mss }, count })
    }

    /// A packet that is not a super-packet: at most a checksum to complete.
    fn plain(header: &VnetHeader, packet: &'a [u8]) -> Result<Self, GsoError> {
        let csum = if header.needs_csum() {
            let start = usize::from(header.csum_start);
            let offset = usize::from(header.csum_offset);
            if start + offset + 2 > packet.len() {
                return Err(GsoError::BadChecksumOffsets);
            }
            Some((start, offset))
        } else {
            None
        };
        if packet.is_empty() {
            return Err(GsoError::Truncated);
        }
        Ok(Self { packet, plan: Plan::Plain { csum }, count: 1 })
    }

    /// Checks an IPv4 header; returns the packet cut to its Total Length and the transport
    /// header's offset.
    fn ipv4(packet: &'a [u8], transport: Transport) -> Result<(&'a [u8], usize), GsoError> {
        let ihl = usize::from(packet.first().ok_or(GsoError::Truncated)? & 0x0f) * 4;
        if ihl < 20 {
            return Err(GsoError::BadHeader("IPv4"));
        }
        let total = usize::from(be16(packet, 2).ok_or(GsoError::Truncated)?);
        // A total length of 0 would be a BIG TCP packet (over 64 KiB): not enabled on TUN.
        if total < ihl {
            return Err(GsoError::BadHeader("IPv4"));
        }
        let packet = packet.get(..total).ok_or(GsoError::Truncated)?;
        let frag = be16(packet, 6).ok_or(GsoError::Truncated)?;
        if frag & 0x3fff != 0 {
            // A fragment (MF set or an offset) is never a GSO super-packet.
            return Err(GsoError::BadHeader("IPv4"));
        }
        let proto = *packet.get(9).ok_or(GsoError::Truncated)?;
        let want = match transport {
            Transport::Tcp => PROTO_TCP,
            Transport::Udp => PROTO_UDP,
        };
        if proto != want {
            return Err(GsoError::BadHeader("IPv4"));
        }
        Ok((packet, ihl))
    }

    /// Checks an IPv6 header; returns the packet cut to its Payload Length and the transport
    /// header's offset (after any extension headers, from `csum_start`).
    fn ipv6(
        header: &VnetHeader,
        packet: &'a [u8],
        transport: Transport,
    ) -> Result<(&'a [u8], usize), GsoError> {
        let payload = usize::from(be16(packet, 4).ok_or(GsoError::Truncated)?);
        if payload == 0 {
            // Jumbograms (RFC 2675, BIG TCP) are not enabled on TUN.
            return Err(GsoError::BadHeader("IPv6"));
        }
        let packet = packet.get(..40 + payload).ok_or(GsoError::Truncated)?;
        let next = *packet.get(6).ok_or(GsoError::Truncated)?;
        let want = match transport {
            Transport::Tcp => PROTO_TCP,
            Transport::Udp => PROTO_UDP,
        };
        // Extension headers: the kernel says where the transport header starts.
        let l4 = if next == want {
            40
        } else if header.needs_csum() {
            usize::from(header.csum_start)
        } else {
            return Err(GsoError::BadHeader("IPv6"));
        };
        if l4 < 40 || l4 >= packet.len() {
            return Err(GsoError::BadChecksumOffsets);
        }
        Ok((packet, l4))
    }

    /// How many IP packets this becomes.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether the packet was a super-packet (cut, not only completed).
    pub fn is_super(&self) -> bool {
        matches!(self.plan, Plan::Cut { .. })
    }

    /// The length of segment `i`.
    pub fn segment_len(&self, i: usize) -> usize {
        match self.plan {
            Plan::Plain { .. } => self.packet.len(),
            Plan::Cut { hdr_end, mss, .. } => {
                let payload = self.packet.len() - hdr_end;
                hdr_end + payload.saturating_sub(i * mss).min(mss)
            }
        }
    }

    /// The longest segment.
    pub fn max_segment_len(&self) -> usize {
        self.segment_len(0)
    }

    /// Writes segment `i` (0-based, below [`Segments::count`]) at the start of `out` as a
    /// complete IP packet; returns its length.
    pub fn write(&self, i: usize, out: &mut [u8]) -> Result<usize, GsoError> {
        if i >= self.count {
            return Err(GsoError::BadSegmentSize);
        }
        match self.plan {
            Plan::Plain { csum } => {
                let len = self.packet.len();
                let dst = out.get_mut(..len).ok_or(GsoError::NoRoom)?;
                dst.copy_from_slice(self.packet);
                if let Some((start, offset)) = csum {
                    complete_partial(dst, start, offset)?;
                }
                Ok(len)
            }
            Plan::Cut { v6, transport, l4, hdr_end, mss } => {
                self.write_cut(i, out, v6, transport, l4, hdr_end, mss)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_cut(
        &self,
        i: usize,
        out: &mut [u8],
        v6: bool,
        transport: Transport,
        l4: usize,
        hdr_end: usize,
        mss: usize,
    ) -> Result<usize, GsoError> {
        let start = hdr_end + i * mss;
        let end = (start + mss).min(self.packet.len());
        let payload = self.packet.get(start..end).ok_or(GsoError::Truncated)?;
        let headers = self.packet.get(..hdr_end).ok_or(GsoError::Truncated)?;
        let total = hdr_end + payload.len();
        let seg = out.get_mut(..total).ok_or(GsoError::NoRoom)?;
        seg[..hdr_end].copy_from_slice(headers);
        seg[hdr_end..].copy_from_slice(payload);
        let last = i + 1 == self.count;
        let to_u16 = |n: usize| u16::try_from(n).map_err(|_| GsoError::BadHeader("IP"));
        if v6 {
            put16(seg, 4, to_u16(total - 40)?)?;
        } else {
            put16(seg, 2, to_u16(total)?)?;
            let ident = be16(seg, 4).ok_or(GsoError::Truncated)?;
            // i < MAX_SEGMENTS, so it fits in 16 bits.
            put16(seg, 4, ident.wrapping_add(u16::try_from(i).unwrap_or(0)))?;
            put16(seg, 10, 0)?;
            let ihl = l4;
            put16(seg, 10, checksum::finish(checksum::data(&seg[..ihl])))?;
        }
        let l4_len = total - l4;
        let csum_at = match transport {
            Transport::Tcp => {
                let seq = u32::from_be_bytes(
                    seg.get(l4 + 4..l4 + 8)
                        .ok_or(GsoError::Truncated)?
                        .try_into()
                        .map_err(|_| GsoError::Truncated)?,
                );
                // Sequence numbers wrap modulo 2^32 (RFC 793 §3.3); i * mss < 64 KiB.
                let advance = u32::try_from(i * mss).map_err(|_| GsoError::BadSegmentSize)?;
                seg[l4 + 4..l4 + 8].copy_from_slice(&seq.wrapping_add(advance).to_be_bytes());
                let flags = seg.get_mut(l4 + 13).ok_or(GsoError::Truncated)?;
                if !last {
                    *flags &= !(TCP_FIN | TCP_PSH);
                }
                if i > 0 {
                    *flags &= !TCP_CWR;
                }
                l4 + 16
            }
            Transport::Udp => {
                put16(seg, l4 + 4, to_u16(l4_len)?)?;
                l4 + 6
            }
        };
        put16(seg, csum_at, 0)?;
        let proto = match transport {
            Transport::Tcp => PROTO_TCP,
            Transport::Udp => PROTO_UDP,
        };
        let pseudo = pseudo_header_sum(seg, v6, proto, l4_len).ok_or(GsoError::BadHeader("IP"))?;
        let sum = checksum::combine(&[pseudo, checksum::data(&seg[l4..])]);
        let mut c = checksum::finish(sum);
        if c == 0 && transport == Transport::Udp {
            // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
            c = 0xffff;
        }
        put16(seg, csum_at, c)?;
        Ok(total)
    }
}

/// Completes a partial checksum in place (virtio `F_NEEDS_CSUM` semantics).
pub fn complete_partial(packet: &mut [u8], start: usize, offset: usize) -> Result<(), GsoError> {
    let at = start.checked_add(offset).ok_or(GsoError::BadChecksumOffsets)?;
    if at + 2 > packet.len() {
        return Err(GsoError::BadChecksumOffsets);
    }
    let region = packet.get(start..).ok_or(GsoError::BadChecksumOffsets)?;
    let mut c = checksum::finish(checksum::data(region));
    if c == 0 {
        c = 0xffff;
    }
    put16(packet, at, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vnet::{F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP, GSO_UDP_L4};
    use proptest::prelude::*;

    // ---- an independent Internet checksum: 16-bit words, end-around carry each step ----

    fn naive_sum(words: &[u8]) -> u32 {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i < words.len() {
            let hi = u32::from(words[i]);
            let lo = if i + 1 < words.len() { u32::from(words[i + 1]) } else { 0 };
            sum += (hi << 8) | lo;
            if sum > 0xffff {
                sum = (sum & 0xffff) + 1;
            }
            i += 2;
        }
        sum
    }

    /// Whether the transport checksum of a whole IP packet verifies (sum with pseudo-header
    /// is all ones).
    fn l4_ok(p: &[u8], l4: usize, proto: u8) -> bool {
        let v6 = p[0] >> 4 == 6;
        let mut pseudo = Vec::new();
        if v6 {
            pseudo.extend_from_slice(&p[8..40]);
        } else {
            pseudo.extend_from_slice(&p[12..20]);
        }
        let len = p.len() - l4;
        pseudo.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, proto]);
        let mut all = pseudo;
        all.extend_from_slice(&p[l4..]);
        naive_sum(&all) == 0xffff
    }

    fn ipv4_ok(p: &[u8]) -> bool {
        let ihl = usize::from(p[0] & 0xf) * 4;
        naive_sum(&p[..ihl]) == 0xffff
    }

    // ---- super-packet builders: headers as a kernel would pass them ----

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| u8::try_from((i * 7 + i / 251) % 256).unwrap()).collect()
    }

    /// IPv4 or IPv6 header + TCP header with 12 bytes of options (timestamps) + payload.
    fn tcp_super(v6: bool, data: &[u8], flags: u8) -> (Vec<u8>, usize) {
        let tcp_len = 32 + data.len();
        let mut p = Vec::new();
        if v6 {
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&u16::try_from(tcp_len).unwrap().to_be_bytes());
            p.extend_from_slice(&[PROTO_TCP, 64]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0xb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20]);
        } else {
            let total = u16::try_from(20 + tcp_len).unwrap();
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, PROTO_TCP, 0, 0]);
            p.extend_from_slice(&[198, 18, 10, 10, 198, 18, 20, 20]);
            let c = !u16::try_from(naive_sum(&p)).unwrap();
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let l4 = p.len();
        p.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]); // ports 40000 -> 5201
        p.extend_from_slice(&0xffff_f000u32.to_be_bytes()); // seq: wraps within the packet
        p.extend_from_slice(&0x0102_0304u32.to_be_bytes()); // ack
        p.extend_from_slice(&[0x80, flags, 0x01, 0xf5, 0xaa, 0xbb, 0, 0]); // doff 8, flags, window, csum, urg
        p.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP TS
        p.extend_from_slice(data);
        (p, l4)
    }

    fn udp_super(v6: bool, data: &[u8]) -> (Vec<u8>, usize) {
        let udp_len = 8 + data.len();
        let mut p = Vec::new();
        if v6 {
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&u16::try_from(udp_len).unwrap().to_be_bytes());
            p.extend_from_slice(&[PROTO_UDP, 64]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0xb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20]);
        } else {
            let total = u16::try_from(20 + udp_len).unwrap();
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0xff, 0xff, 0x40, 0, 64, PROTO_UDP, 0, 0]);
            p.extend_from_slice(&[198, 18, 10, 10, 198, 18, 20, 20]);
            let c = !u16::try_from(naive_sum(&p)).unwrap();
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let l4 = p.len();
        p.extend_from_slice(&[0x30, 0x39, 0x14, 0x51]);
        p.extend_from_slice(&u16::try_from(udp_len).unwrap().to_be_bytes());
        p.extend_from_slice(&[0xde, 0xad]); // a stale partial sum: must be replaced
        p.extend_from_slice(data);
        (p, l4)
    }

    fn gso_header(kind: u8, mss: u16, l4: usize, csum_offset: u16) -> VnetHeader {
        VnetHeader {
            flags: F_NEEDS_CSUM,
            gso_type: kind,
            hdr_len: 0,
            gso_size: mss,
            csum_start: u16::try_from(l4).unwrap(),
            csum_offset,
        }
    }

    fn split(h: &VnetHeader, p: &[u8]) -> Vec<Vec<u8>> {
        let s = Segments::new(h, p).unwrap();
        (0..s.count())
            .map(|i| {
                let mut out = vec![0u8; 2048];
                let n = s.write(i, &mut out).unwrap();
                assert_eq!(n, s.segment_len(i));
                out.truncate(n);
                out
            })
            .collect()
    }

    #[test]
    fn tso_v4_super_packet_becomes_mss_sized_packets() {
        let data = payload(5000);
        let flags = 0x10 | TCP_PSH | TCP_FIN | TCP_CWR; // ACK PSH FIN CWR
        let (p, l4) = tcp_super(false, &data, flags);
        let h = gso_header(GSO_TCPV4 | GSO_ECN, 1400, l4, 16);
        let segs = split(&h, &p);
        assert_eq!(segs.len(), 4);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let body = &s[l4 + 32..];
            assert_eq!(body.len(), if i < 3 { 1400 } else { 800 });
            assert_eq!(usize::from(u16::from_be_bytes([s[2], s[3]])), s.len(), "IPv4 total length");
            assert_eq!(u16::from_be_bytes([s[4], s[5]]), 0x1234 + u16::try_from(i).unwrap(), "ident");
            assert!(ipv4_ok(s), "IPv4 header checksum of segment {i}");
            assert!(l4_ok(s, l4, PROTO_TCP), "TCP checksum of segment {i}");
            let seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
            assert_eq!(seq, 0xffff_f000u32.wrapping_add(u32::try_from(i * 1400).unwrap()));
            let f = s[l4 + 13];
            assert_eq!(f & 0x10, 0x10, "ACK everywhere");
            assert_eq!(f & (TCP_FIN | TCP_PSH) != 0, i == 3, "FIN/PSH only on the last");
            assert_eq!(f & TCP_CWR != 0, i == 0, "CWR only on the first");
            assert_eq!(&s[l4 + 20..l4 + 32], &p[l4 + 20..l4 + 32], "options copied");
            joined.extend_from_slice(body);
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn tso_v6_super_packet_becomes_mss_sized_packets() {
        let data = payload(4000);
        let (p, l4) = tcp_super(true, &data, 0x18);
        let segs = split(&gso_header(GSO_TCPV6, 1220, l4, 16), &p);
        assert_eq!(segs.len(), 4);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert_eq!(usize::from(u16::from_be_bytes([s[4], s[5]])), s.len() - 40, "payload length");
            assert!(l4_ok(s, l4, PROTO_TCP), "TCP checksum of segment {i}");
            assert_eq!(s[l4 + 13] & TCP_PSH != 0, i == 3);
            joined.extend_from_slice(&s[l4 + 32..]);
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn uso_super_packets_become_datagrams() {
        for v6 in [false, true] {
            let data = payload(3 * 1200 + 17);
            let (p, l4) = udp_super(v6, &data);
            let segs = split(&gso_header(GSO_UDP_L4, 1200, l4, 6), &p);
            assert_eq!(segs.len(), 4);
            for (i, s) in segs.iter().enumerate() {
                let udp_len = usize::from(u16::from_be_bytes([s[l4 + 4], s[l4 + 5]]));
                assert_eq!(udp_len, s.len() - l4);
                assert_eq!(udp_len - 8, if i < 3 { 1200 } else { 17 });
                assert!(l4_ok(s, l4, PROTO_UDP), "UDP checksum, v6 {v6}, segment {i}");
                assert_eq!(&s[l4 + 8..], &data[i * 1200..(i * 1200 + 1200).min(data.len())]);
                if !v6 {
                    assert!(ipv4_ok(s));
                    // The identification wraps.
                    assert_eq!(
                        u16::from_be_bytes([s[4], s[5]]),
                        0xffffu16.wrapping_add(u16::try_from(i).unwrap())
                    );
                }
            }
        }
    }

    #[test]
    fn a_super_packet_with_one_segment_only_gets_its_checksum() {
        let data = payload(100);
        let (p, l4) = tcp_super(false, &data, 0x18);
        let segs = split(&gso_header(GSO_TCPV4, 1400, l4, 16), &p);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].len(), p.len());
        assert!(l4_ok(&segs[0], l4, PROTO_TCP));
        assert_eq!(segs[0][l4 + 13], 0x18, "PSH stays on the only segment");
    }

    #[test]
    fn partial_checksums_of_plain_packets_are_completed() {
        for v6 in [false, true] {
            let data = payload(333);
            let (mut p, l4) = udp_super(v6, &data);
            // What the kernel leaves: the folded pseudo-header sum, not complemented.
            let len = p.len() - l4;
            let mut pseudo = if v6 { p[8..40].to_vec() } else { p[12..20].to_vec() };
            pseudo.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, PROTO_UDP]);
            let seed = u16::try_from(naive_sum(&pseudo)).unwrap();
            p[l4 + 6..l4 + 8].copy_from_slice(&seed.to_be_bytes());
            let h = VnetHeader {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_NONE,
                csum_start: u16::try_from(l4).unwrap(),
                csum_offset: 6,
                ..VnetHeader::PLAIN
            };
            let segs = split(&h, &p);
            assert_eq!(segs.len(), 1);
            assert!(l4_ok(&segs[0], l4, PROTO_UDP), "v6 {v6}");
            assert_eq!(&segs[0][..l4 + 6], &p[..l4 + 6], "nothing else changes");
        }
    }

    #[test]
    fn plain_packets_without_flags_are_copied_unchanged() {
        let (p, _) = udp_super(false, &payload(10));
        let segs = split(&VnetHeader::PLAIN, &p);
        assert_eq!(segs, vec![p]);
    }

    #[test]
    fn inconsistent_packets_are_refused() {
        let (p, l4) = tcp_super(false, &payload(3000), 0x10);
        let h = gso_header(GSO_TCPV4, 1400, l4, 16);
        assert_eq!(Segments::new(&h, &p[..30]).unwrap_err(), GsoError::Truncated);
        assert_eq!(Segments::new(&h, &p[..p.len() - 1]).unwrap_err(), GsoError::Truncated);
        assert_eq!(
            Segments::new(&gso_header(GSO_TCPV4, 0, l4, 16), &p).unwrap_err(),
            GsoError::BadSegmentSize
        );
        assert_eq!(
            Segments::new(&gso_header(GSO_TCPV4, 1, l4, 16), &p).unwrap_err(),
            GsoError::BadSegmentSize
        );
        assert!(matches!(
            Segments::new(&gso_header(GSO_TCPV6, 1400, l4, 16), &p),
            Err(GsoError::BadHeader(_))
        ));
        assert!(matches!(
            Segments::new(&gso_header(GSO_UDP_L4, 1400, l4, 6), &p),
            Err(GsoError::BadHeader(_))
        ));
        assert_eq!(
            Segments::new(&gso_header(GSO_UDP, 1400, l4, 6), &p).unwrap_err(),
            GsoError::Unsupported(GSO_UDP)
        );
        let mut bad = p.clone();
        bad[0] = 0x44; // IHL 16 bytes
        assert!(matches!(Segments::new(&h, &bad), Err(GsoError::BadHeader(_))));
        let mut frag = p.clone();
        frag[6] = 0x20; // MF
        assert!(matches!(Segments::new(&h, &frag), Err(GsoError::BadHeader(_))));
        let plain =
            VnetHeader { flags: F_NEEDS_CSUM, csum_start: 60000, csum_offset: 6, ..VnetHeader::PLAIN };
        assert_eq!(Segments::new(&plain, &p).unwrap_err(), GsoError::BadChecksumOffsets);
        assert_eq!(Segments::new(&VnetHeader::PLAIN, &[]).unwrap_err(), GsoError::Truncated);
        // A too small output buffer, and a segment past the end.
        let s = Segments::new(&h, &p).unwrap();
        assert_eq!(s.write(0, &mut [0u8; 100]).unwrap_err(), GsoError::NoRoom);
        assert_eq!(s.write(s.count(), &mut [0u8; 2048]).unwrap_err(), GsoError::BadSegmentSize);
    }

    proptest! {
        /// Whatever the header and bytes, checking and writing never panic, and segments
        /// fit the length they announce.
        #[test]
        fn arbitrary_input_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            flags in any::<u8>(),
            gso_type in any::<u8>(),
            gso_size in 0u16..200,
            csum_start in 0u16..300,
            csum_offset in 0u16..300,
            v6 in any::<bool>(),
        ) {
            let mut p = bytes;
            if let Some(b) = p.first_mut() {
                *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
            }
            let h = VnetHeader { flags, gso_type, hdr_len: 0, gso_size, csum_start, csum_offset };
            if let Ok(s) = Segments::new(&h, &p) {
                let mut out = vec![0u8; 4096];
                for i in 0..s.count() {
                    let n = s.write(i, &mut out).unwrap();
                    prop_assert_eq!(n, s.segment_len(i));
                }
            }
        }

        /// Any TCP super-packet cut at any MSS reassembles to its payload, every segment's
        /// checksums verifying.
        #[test]
        fn tso_cuts_reassemble(len in 1usize..6000, mss in 536u16..1500, v6 in any::<bool>()) {
            let data = payload(len);
            let (p, l4) = tcp_super(v6, &data, 0x18);
            let kind = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
            let segs = split(&gso_header(kind, mss, l4, 16), &p);
            let mut joined = Vec::new();
            for s in &segs {
                prop_assert!(l4_ok(s, l4, PROTO_TCP));
                prop_assert!(v6 || ipv4_ok(s));
                joined.extend_from_slice(&s[l4 + 32..]);
            }
            prop_assert_eq!(joined, data);
        }
    }
}
