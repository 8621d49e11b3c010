//! Coalescing consecutive TCP segments, or UDP datagrams, of one flow into one super-packet
//! for a TUN queue (receive offload, the inverse of [`crate::gso`]). Pure functions over
//! byte slices.
//!
//! A gateway's receive side otherwise writes every decrypted inner packet into the TUN queue
//! with a syscall of its own, and the kernel routes each one on its own. Written as one
//! packet with a virtio-net header (`GSO_TCPV4`/`GSO_TCPV6`, or `GSO_UDP_L4`, with
//! `gso_size` = the segments' payload and `F_NEEDS_CSUM`), a run crosses once and travels as
//! one `sk_buff`, cut again only where a device or the receiving socket needs it, as Linux's
//! own GRO does for NICs. For small datagrams (a stream of 64-byte UDP packets) the write per
//! packet is most of the receive side's cost.
//!
//! A packet joins the pending super-packet only if cutting that super-packet gives it back
//! **byte for byte** (what [`crate::gso::Segments`] does, tested against it):
//!
//! * IPv4 without options, not a fragment, header checksum good; or IPv6 with TCP or UDP as
//!   its next header (no extension headers);
//! * TCP with ACK and at most PSH besides it (no SYN, FIN, RST, URG, CWR: they end runs, or
//!   need care GSO would not take), a payload, a good checksum; or UDP with a payload, its
//!   Length field matching the packet, and a good, present checksum (an IPv4 datagram sent
//!   without one would come out of the cut with one);
//! * the same IP header as the first packet but for the length fields, checksum and (IPv4)
//!   an Identification that goes up by one per packet; the same TCP header but for the
//!   sequence number, which must follow on, the checksum, and PSH; the same UDP ports;
//! * a payload of the first packet's length, except that a shorter one, or (TCP) one with
//!   PSH, may end the run (the super-packet is then written at once);
//! * at most 65,535 bytes in all (the IPv4 Total Length; no BIG TCP on TUN), and at most
//!   [`MAX_UDP_SEGMENTS`] datagrams.
//!
//! Anything else is written as it is, after the pending super-packet (order is kept). Only
//! consecutive segments are merged: a batch from one ESP SA carries a bulk flow's segments
//! back to back.

use wire::checksum;

use crate::tcpip::{
    be16, pseudo_header_sum, PROTO_TCP, PROTO_UDP, TCP_ACK, TCP_CWR, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN,
    TCP_URG,
};
use crate::vnet::{self, VnetHeader};

/// The largest super-packet (an IPv4 Total Length, an IPv6 header plus Payload Length
/// kept under the same bound).
pub const MAX_SUPER: usize = 65_535;

/// The most datagrams in one UDP super-packet: the value of Linux's bound on one USO send
/// (`UDP_MAX_SEGMENTS`) in the kernels that introduced it (later ones allow more).
pub const MAX_UDP_SEGMENTS: usize = 64;

/// A TCP segment or UDP datagram that may join a super-packet: where its parts are.
#[derive(Debug, Clone, Copy)]
struct Segment {
    v6: bool,
    /// UDP (else TCP).
    udp: bool,
    /// Offset of the TCP or UDP header (the IP header's length).
    l4: usize,
    /// Offset of the payload.
    hdr_end: usize,
    /// TCP's sequence number and flags (0 for UDP).
    seq: u32,
    flags: u8,
    /// IPv4 Identification (0 for IPv6).
    ident: u16,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `packet` as a segment or datagram that may be merged, or `None`.
fn parse(packet: &[u8]) -> Option<Segment> {
    let (v6, l4, ident, proto) = match packet.first()? >> 4 {
        4 => {
            // No options, the whole packet, not a fragment, a good header checksum.
            if *packet.first()? != 0x45
                || usize::from(be16(packet, 2)?) != packet.len()
                || be16(packet, 6)? & 0x3fff != 0
                || checksum::data(packet.get(..20)?) != 0xffff
            {
                return None;
            }
            (false, 20, be16(packet, 4)?, *packet.get(9)?)
        }
        6 => {
            if usize::from(be16(packet, 4)?) + 40 != packet.len() {
                return None;
            }
            (true, 40, 0, *packet.get(6)?)
        }
        _ => return None,
    };
    match proto {
        PROTO_TCP => parse_tcp(packet, v6, l4, ident),
        PROTO_UDP => {
            let hdr_end = l4 + 8;
            // The whole datagram, a payload, and a checksum that was sent (zero: none).
            if usize::from(be16(packet, l4 + 4)?) != packet.len() - l4
                || hdr_end >= packet.len()
                || be16(packet, l4 + 6)? == 0
            {
                return None;
            }
            Some(Segment { v6, udp: true, l4, hdr_end, seq: 0, flags: 0, ident })
        }
        _ => None,
    }
}

/// The TCP part of [`parse`].
fn parse_tcp(packet: &[u8], v6: bool, l4: usize, ident: u16) -> Option<Segment> {
    let doff = usize::from(packet.get(l4 + 12)? >> 4) * 4;
    let hdr_end = l4 + doff;
    if doff < 20 || hdr_end >= packet.len() {
        // A bad header, or no payload (a pure ACK has nothing to merge).
        return None;
    }
    let flags = *packet.get(l4 + 13)?;
    if flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_URG | TCP_CWR) != 0 || flags & TCP_ACK == 0 {
        return None;
    }
    Some(Segment { v6, udp: false, l4, hdr_end, seq: be32(packet, l4 + 4)?, flags, ident })
}

impl Segment {
    fn proto(&self) -> u8 {
        if self.udp {
            PROTO_UDP
        } else {
            PROTO_TCP
        }
    }
}

/// Whether the TCP or UDP checksum of `packet` (parsed as `seg`) is good. The kernel
/// recomputes a merged packet's checksum, so a packet that arrived damaged must not join one
/// (it would be laundered into a good packet); a packet written alone keeps its own checksum
/// and needs no check here.
fn l4_checksum_ok(packet: &[u8], seg: &Segment) -> bool {
    let Some(l4) = packet.get(seg.l4..) else { return false };
    pseudo_header_sum(packet, seg.v6, seg.proto(), l4.len())
        .is_some_and(|p| checksum::combine(&[p, checksum::data(l4)]) == 0xffff)
}

/// The run being built.
#[derive(Debug, Clone, Copy)]
struct Run {
    first: Segment,
    /// Payload bytes per segment (the first one's).
    mss: usize,
    /// Segments in it.
    count: usize,
    /// The sequence number the next segment must have.
    next_seq: u32,
    /// The PSH flag of the last segment.
    push: bool,
}

/// Builds super-packets out of the TCP segments and UDP datagrams offered to it, one run at
/// a time.
#[derive(Debug)]
pub struct Gro {
    /// The pending packet: the first segment's headers and every payload so far.
    buf: Vec<u8>,
    run: Option<Run>,
    /// Whether IPv4 and IPv6 TCP runs may be built (the queue accepted TSO for the family).
    v4: bool,
    v6: bool,
    /// The same for UDP runs (USO).
    udp4: bool,
    udp6: bool,
}

impl Gro {
    /// A coalescer of TCP segments for the families whose TSO super-packets the TUN queue
    /// takes (no UDP: see [`Self::with_udp`]).
    pub fn new(v4: bool, v6: bool) -> Self {
        Self { buf: Vec::with_capacity(MAX_SUPER), run: None, v4, v6, udp4: false, udp6: false }
    }

    /// Also merges UDP datagrams, for the families whose USO super-packets the queue takes.
    #[must_use]
    pub fn with_udp(mut self, v4: bool, v6: bool) -> Self {
        self.udp4 = v4;
        self.udp6 = v6;
        self
    }

    fn takes(&self, seg: &Segment) -> bool {
        match (seg.udp, seg.v6) {
            (false, false) => self.v4,
            (false, true) => self.v6,
            (true, false) => self.udp4,
            (true, true) => self.udp6,
        }
    }

    /// Offers one IP packet. What must be written first goes to `write` (header, packet,
    /// number of segments it carries): the pending super-packet when `packet` cannot join
    /// it, `packet` itself when it cannot be held, or the run it completes.
    pub fn push(&mut self, packet: &[u8], write: &mut impl FnMut(&VnetHeader, &[u8], usize)) {
        let seg = parse(packet).filter(|s| self.takes(s));
        let Some(seg) = seg else {
            self.flush(write);
            write(&VnetHeader::PLAIN, packet, 1);
            return;
        };
        let payload = packet.len() - seg.hdr_end;
        if let Some(run) = self.run.as_mut() {
            // Checksums are checked once there is something to merge: the held first segment
            // when a second joins it, then each one that joins.
            let joins = Self::joins(&self.buf, run, &seg, packet)
                && (run.count > 1 || l4_checksum_ok(&self.buf, &run.first));
            if joins && l4_checksum_ok(packet, &seg) {
                self.buf.extend_from_slice(&packet[seg.hdr_end..]);
                run.count += 1;
                run.next_seq = run.next_seq.wrapping_add(u32::try_from(payload).unwrap_or(u32::MAX));
                run.push = seg.flags & TCP_PSH != 0;
                // A short segment or PSH ends the run, as it ends Linux's.
                let full = self.buf.len() + run.mss > MAX_SUPER || (seg.udp && run.count >= MAX_UDP_SEGMENTS);
                if payload < run.mss || run.push || full {
                    self.flush(write);
                }
                return;
            }
            self.flush(write);
            if joins {
                // It would have joined but is damaged: alone, for the kernel to drop.
                write(&VnetHeader::PLAIN, packet, 1);
                return;
            }
        }
        if seg.flags & TCP_PSH != 0 || packet.len() + payload > MAX_SUPER {
            // Nothing could follow it.
            write(&VnetHeader::PLAIN, packet, 1);
            return;
        }
        self.buf.clear();
        self.buf.extend_from_slice(packet);
        self.run = Some(Run {
            first: seg,
            mss: payload,
            count: 1,
            next_seq: seg.seq.wrapping_add(u32::try_from(payload).unwrap_or(u32::MAX)),
            push: false,
        });
    }

    /// Whether `seg` (of `packet`) continues `run`, whose packet so far is `buf`.
    fn joins(buf: &[u8], run: &Run, seg: &Segment, packet: &[u8]) -> bool {
        let f = &run.first;
        let payload = packet.len() - seg.hdr_end;
        let same = |a: usize, b: usize| buf.get(a..b).is_some_and(|x| packet.get(a..b) == Some(x));
        let ip_same = if f.v6 {
            seg.v6 && same(0, 4) && same(6, 40)
        } else {
            // Version to TOS; flags and fragment offset to protocol; the addresses.
            !seg.v6
                && same(0, 2)
                && same(6, 10)
                && same(12, 20)
                && seg.ident == f.ident.wrapping_add(u16::try_from(run.count % 0x1_0000).unwrap_or(0))
        };
        let l4 = f.l4;
        let common = ip_same
            && seg.udp == f.udp
            && seg.hdr_end == f.hdr_end
            && payload <= run.mss
            && buf.len() + payload <= MAX_SUPER;
        if seg.udp {
            // The ports (length and checksum are the super-packet's own).
            return common && run.count < MAX_UDP_SEGMENTS && same(l4, l4 + 4);
        }
        common
            && seg.seq == run.next_seq
            && !run.push
            // Ports; acknowledgment number, data offset; window to the end of the options
            // (urgent pointer and options included); the flags but for PSH.
            && same(l4, l4 + 4)
            && same(l4 + 8, l4 + 13)
            && same(l4 + 14, l4 + 16)
            && same(l4 + 18, seg.hdr_end)
            && (seg.flags & !TCP_PSH) == (f.flags & !TCP_PSH)
    }

    /// Writes the pending super-packet, if any, to `write`.
    pub fn flush(&mut self, write: &mut impl FnMut(&VnetHeader, &[u8], usize)) {
        let Some(run) = self.run.take() else { return };
        if run.count == 1 {
            // The packet as it came: nothing to change.
            write(&VnetHeader::PLAIN, &self.buf, 1);
            return;
        }
        match Self::finish(&mut self.buf, &run) {
            Some(header) => write(&header, &self.buf, run.count),
            // Cannot happen (every length was checked as it grew); a packet is never lost:
            // the caller's count of what it wrote shows it.
            None => write(&VnetHeader::PLAIN, &self.buf, run.count),
        }
    }

    /// Turns the run's packet into a super-packet: lengths (UDP's too), IPv4 header
    /// checksum, PSH of the last segment, the TCP or UDP checksum field holding the
    /// pseudo-header sum.
    fn finish(buf: &mut [u8], run: &Run) -> Option<VnetHeader> {
        let f = &run.first;
        let len = u16::try_from(buf.len()).ok()?;
        if f.v6 {
            buf.get_mut(4..6)?.copy_from_slice(&(len - 40).to_be_bytes());
        } else {
            buf.get_mut(2..4)?.copy_from_slice(&len.to_be_bytes());
            buf.get_mut(10..12)?.copy_from_slice(&[0, 0]);
            let sum = checksum::finish(checksum::data(buf.get(..20)?));
            buf.get_mut(10..12)?.copy_from_slice(&sum.to_be_bytes());
        }
        if run.push {
            *buf.get_mut(f.l4 + 13)? |= TCP_PSH;
        }
        let l4_len = buf.len() - f.l4;
        let (gso_type, csum_offset) = if f.udp {
            // The kernel rewrites each datagram's Length, and adjusts the partial sum to it.
            buf.get_mut(f.l4 + 4..f.l4 + 6)?.copy_from_slice(&u16::try_from(l4_len).ok()?.to_be_bytes());
            (vnet::GSO_UDP_L4, 6)
        } else if f.v6 {
            (vnet::GSO_TCPV6, 16)
        } else {
            (vnet::GSO_TCPV4, 16)
        };
        // virtio's partial checksum: the field holds the pseudo-header sum (not
        // complemented); the kernel sums from csum_start and stores the complement.
        let pseudo = pseudo_header_sum(buf, f.v6, f.proto(), l4_len)?;
        let at = f.l4 + usize::from(csum_offset);
        buf.get_mut(at..at + 2)?.copy_from_slice(&pseudo.to_be_bytes());
        Some(VnetHeader {
            flags: vnet::F_NEEDS_CSUM,
            gso_type,
            hdr_len: u16::try_from(f.hdr_end).ok()?,
            gso_size: u16::try_from(run.mss).ok()?,
            csum_start: u16::try_from(f.l4).ok()?,
            csum_offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gso::Segments;

    /// An IPv4 or IPv6 TCP segment with good checksums.
    fn segment(v6: bool, ident: u16, seq: u32, flags: u8, payload: &[u8], options: &[u8]) -> Vec<u8> {
        let doff = 20 + options.len();
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&40000u16.to_be_bytes());
        tcp.extend_from_slice(&5201u16.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&0x1122_3344u32.to_be_bytes());
        tcp.push(u8::try_from(doff / 4).unwrap() << 4);
        tcp.push(flags);
        tcp.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
        tcp.extend_from_slice(options);
        tcp.extend_from_slice(payload);
        let mut p = if v6 {
            let mut h = vec![0x60, 0x00, 0x12, 0x34];
            h.extend_from_slice(&u16::try_from(tcp.len()).unwrap().to_be_bytes());
            h.extend_from_slice(&[PROTO_TCP, 64]);
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            h
        } else {
            let total = u16::try_from(20 + tcp.len()).unwrap();
            let mut h = vec![0x45, 0x02];
            h.extend_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&ident.to_be_bytes());
            h.extend_from_slice(&[0x40, 0, 63, PROTO_TCP, 0, 0, 198, 18, 1, 2, 198, 18, 2, 3]);
            let sum = checksum::finish(checksum::data(&h));
            h[10..12].copy_from_slice(&sum.to_be_bytes());
            h
        };
        let l4 = p.len();
        p.extend_from_slice(&tcp);
        let sum = checksum::combine(&[
            pseudo_header_sum(&p, v6, PROTO_TCP, tcp.len()).unwrap(),
            checksum::data(&p[l4..]),
        ]);
        p[l4 + 16..l4 + 18].copy_from_slice(&checksum::finish(sum).to_be_bytes());
        p
    }

    /// NOP, NOP, timestamps: what Linux puts on every segment of a bulk flow.
    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9];

    /// Recomputes an IPv4 segment's header and TCP checksums after a test edited it.
    fn reseal(p: &mut [u8]) {
        p[10..12].copy_from_slice(&[0, 0]);
        let sum = checksum::finish(checksum::data(&p[..20]));
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p[36..38].copy_from_slice(&[0, 0]);
        let sum = checksum::combine(&[
            pseudo_header_sum(p, false, PROTO_TCP, p.len() - 20).unwrap(),
            checksum::data(&p[20..]),
        ]);
        p[36..38].copy_from_slice(&checksum::finish(sum).to_be_bytes());
    }

    /// A bulk flow's next `n` segments of `mss` bytes from `seq`, the last one `last` long.
    fn flow(v6: bool, n: usize, mss: usize, last: usize, push_last: bool) -> Vec<Vec<u8>> {
        let mut seq = 0xffff_f000u32; // wraps on the way
        (0..n)
            .map(|i| {
                let len = if i + 1 == n { last } else { mss };
                let payload: Vec<u8> = (0..len).map(|j| u8::try_from((i * 7 + j) % 251).unwrap()).collect();
                let flags = if i + 1 == n && push_last { TCP_ACK | TCP_PSH } else { TCP_ACK };
                let p = segment(v6, 0x100 + u16::try_from(i).unwrap(), seq, flags, &payload, &TS);
                seq = seq.wrapping_add(u32::try_from(len).unwrap());
                p
            })
            .collect()
    }

    /// Pushes every packet, flushes, and returns what was written.
    fn run(gro: &mut Gro, packets: &[Vec<u8>]) -> Vec<(VnetHeader, Vec<u8>, usize)> {
        let mut out = Vec::new();
        let mut write = |h: &VnetHeader, p: &[u8], n: usize| out.push((*h, p.to_vec(), n));
        for p in packets {
            gro.push(p, &mut write);
        }
        gro.flush(&mut write);
        out
    }

    /// What the written packets stand for, cut again as the kernel would.
    fn cut(written: &[(VnetHeader, Vec<u8>, usize)]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (h, p, n) in written {
            let s = Segments::new(h, p).unwrap();
            assert_eq!(s.count(), *n);
            for i in 0..s.count() {
                let mut b = vec![0u8; s.segment_len(i)];
                s.write(i, &mut b).unwrap();
                out.push(b);
            }
        }
        out
    }

    /// Offers 4 packets, one of which cannot join the others, to a coalescer that takes
    /// every family and transport: something was written apart, nothing was lost, and every
    /// packet comes out exactly as it went in (merged ones through a cut).
    fn assert_kept_apart(what: &str, packets: &[Vec<u8>]) {
        let written = run(&mut Gro::new(true, true).with_udp(true, true), packets);
        assert!(written.len() >= 2, "{what}: merged across it");
        assert_eq!(written.iter().map(|w| w.2).sum::<usize>(), 4, "{what}: a packet lost");
        let mut back = Vec::new();
        for w in &written {
            if w.2 == 1 {
                assert_eq!(w.0, VnetHeader::PLAIN, "{what}");
                back.push(w.1.clone());
            } else {
                back.extend(cut(std::slice::from_ref(w)));
            }
        }
        assert_eq!(back, packets, "{what}");
    }

    #[test]
    fn a_run_becomes_one_super_packet_that_cuts_back_into_the_same_bytes() {
        for v6 in [false, true] {
            for (last, push) in [(1380, false), (700, true), (1380, true)] {
                let packets = flow(v6, 20, 1380, last, push);
                let written = run(&mut Gro::new(true, true), &packets);
                assert_eq!(written.len(), 1, "v6 {v6}: one write for the run");
                let (h, p, n) = &written[0];
                assert_eq!(*n, 20);
                assert_eq!(h.gso_type, if v6 { vnet::GSO_TCPV6 } else { vnet::GSO_TCPV4 });
                assert_eq!(usize::from(h.gso_size), 1380);
                assert!(h.needs_csum());
                let hdr = if v6 { 72 } else { 52 };
                assert_eq!(
                    p.len(),
                    packets[0].len() + packets[1..].iter().map(|q| q.len() - hdr).sum::<usize>()
                );
                assert_eq!(cut(&written), packets, "v6 {v6} last {last} push {push}");
            }
        }
    }

    #[test]
    fn runs_stop_at_64_kib_and_start_again() {
        let packets = flow(false, 100, 1448, 1448, false);
        let written = run(&mut Gro::new(true, true), &packets);
        assert!(written.len() >= 3, "{} writes", written.len());
        assert!(written.iter().all(|(_, p, _)| p.len() <= MAX_SUPER));
        assert_eq!(written.iter().map(|w| w.2).sum::<usize>(), 100);
        assert_eq!(cut(&written), packets);
    }

    #[test]
    fn what_cannot_join_is_written_as_it_is_and_in_order() {
        let base = flow(false, 4, 1000, 1000, false);
        let mut cases: Vec<(&str, Vec<Vec<u8>>)> = Vec::new();
        // A gap in the sequence numbers.
        let mut gap = base.clone();
        gap[2] = segment(false, 0x102, 0xffff_f000u32.wrapping_add(2001), TCP_ACK, &[5; 1000], &TS);
        cases.push(("sequence gap", gap));
        // Another flow in between (source address), another TTL, another TOS, no DF.
        for (at, bit) in [(15, 1), (8, 1), (1, 4), (6, 0x40)] {
            let mut other = base.clone();
            other[2][at] ^= bit;
            reseal(&mut other[2]);
            cases.push(("other IP header", other));
        }
        // Other ports, another acknowledgment number, another window.
        for at in [20, 29, 34] {
            let mut other = base.clone();
            other[2][at] ^= 1;
            reseal(&mut other[2]);
            cases.push(("other TCP header", other));
        }
        for flags in
            [TCP_ACK | TCP_FIN, TCP_ACK | TCP_SYN, TCP_ACK | TCP_RST, TCP_ACK | TCP_URG, TCP_ACK | TCP_CWR, 0]
        {
            let mut f = base.clone();
            f[2] = segment(false, 0x102, 0xffff_f000u32.wrapping_add(2000), flags, &[5; 1000], &TS);
            cases.push(("flags", f));
        }
        // A damaged payload (bad checksum), a longer segment, an IPv4 Identification out of
        // step, a different TTL, other TCP options.
        let mut bad = base.clone();
        bad[2][100] ^= 0x40;
        cases.push(("bad checksum", bad));
        let mut bad_first = base.clone();
        bad_first[0][100] ^= 0x40;
        cases.push(("bad checksum on the held first segment", bad_first));
        let mut long = base.clone();
        long[2] = segment(false, 0x102, 0xffff_f000u32.wrapping_add(2000), TCP_ACK, &[5; 1100], &TS);
        cases.push(("longer than the first", long));
        let mut id = base.clone();
        id[2] = segment(false, 0x1ff, 0xffff_f000u32.wrapping_add(2000), TCP_ACK, &[5; 1000], &TS);
        cases.push(("identification", id));
        let mut opts = base.clone();
        opts[2] = segment(
            false,
            0x102,
            0xffff_f000u32.wrapping_add(2000),
            TCP_ACK,
            &[5; 1000],
            &[1, 1, 8, 10, 0, 0, 0, 8, 0, 0, 0, 9],
        );
        cases.push(("timestamps", opts));
        let mut pure_ack = base.clone();
        pure_ack[2] = segment(false, 0x102, 0xffff_f000u32.wrapping_add(2000), TCP_ACK, &[], &TS);
        cases.push(("no payload", pure_ack));
        let mut udp = base.clone();
        udp[2][9] = 17;
        reseal(&mut udp[2]);
        cases.push(("not TCP", udp));
        let mut frag = base.clone();
        frag[2][6] |= 0x20;
        reseal(&mut frag[2]);
        cases.push(("a fragment", frag));
        for (what, packets) in cases {
            assert_kept_apart(what, &packets);
        }
    }

    /// An IPv4 or IPv6 UDP datagram 198.18.1.2:40000 (or 2001:db8::1) -> port 5201 with
    /// good checksums, DF on IPv4 (what Linux sends).
    fn datagram(v6: bool, ident: u16, payload: &[u8]) -> Vec<u8> {
        let udp_len = u16::try_from(8 + payload.len()).unwrap();
        let mut p = if v6 {
            let mut h = vec![0x60, 0x00, 0x12, 0x34];
            h.extend_from_slice(&udp_len.to_be_bytes());
            h.extend_from_slice(&[PROTO_UDP, 64]);
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            h
        } else {
            let total = 20 + udp_len;
            let mut h = vec![0x45, 0x00];
            h.extend_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&ident.to_be_bytes());
            h.extend_from_slice(&[0x40, 0, 63, PROTO_UDP, 0, 0, 198, 18, 1, 2, 198, 18, 2, 3]);
            h
        };
        let l4 = p.len();
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&5201u16.to_be_bytes());
        p.extend_from_slice(&udp_len.to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        reseal_udp(&mut p, l4);
        p
    }

    /// Recomputes a datagram's IPv4 header checksum and UDP checksum (0 sent as 0xffff).
    fn reseal_udp(p: &mut [u8], l4: usize) {
        if l4 == 20 {
            p[10..12].copy_from_slice(&[0, 0]);
            let sum = checksum::finish(checksum::data(&p[..20]));
            p[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        p[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
        let sum = checksum::combine(&[
            pseudo_header_sum(p, l4 == 40, PROTO_UDP, p.len() - l4).unwrap(),
            checksum::data(&p[l4..]),
        ]);
        let sum = match checksum::finish(sum) {
            0 => 0xffff,
            s => s,
        };
        p[l4 + 6..l4 + 8].copy_from_slice(&sum.to_be_bytes());
    }

    /// `n` datagrams of `size` payload bytes, the last one `last` long; Identifications
    /// from 0xfff0 (they wrap on the way).
    fn udp_flow(v6: bool, n: usize, size: usize, last: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let len = if i + 1 == n { last } else { size };
                let payload: Vec<u8> = (0..len).map(|j| u8::try_from((i * 13 + j) % 253).unwrap()).collect();
                datagram(v6, 0xfff0u16.wrapping_add(u16::try_from(i).unwrap()), &payload)
            })
            .collect()
    }

    #[test]
    fn a_udp_run_becomes_one_uso_super_packet_that_cuts_back_into_the_same_bytes() {
        for v6 in [false, true] {
            for (size, last) in [(64, 64), (64, 20), (1372, 1372), (1000, 1)] {
                let packets = udp_flow(v6, 30, size, last);
                let written = run(&mut Gro::new(true, true).with_udp(true, true), &packets);
                assert_eq!(written.len(), 1, "v6 {v6} size {size}: one write for the run");
                let (h, p, n) = &written[0];
                assert_eq!(*n, 30);
                assert_eq!((h.gso_type, usize::from(h.gso_size), h.csum_offset), (vnet::GSO_UDP_L4, size, 6));
                assert!(h.needs_csum());
                let l4 = if v6 { 40 } else { 20 };
                assert_eq!(
                    usize::from(be16(p, l4 + 4).unwrap()),
                    p.len() - l4,
                    "the super-packet's UDP length"
                );
                assert_eq!(cut(&written), packets, "v6 {v6} size {size} last {last}");
            }
        }
    }

    #[test]
    fn udp_runs_stop_at_the_segment_bound_and_never_mix_with_tcp() {
        let packets = udp_flow(false, 150, 64, 64);
        let written = run(&mut Gro::new(true, true).with_udp(true, true), &packets);
        assert!(written.iter().all(|w| w.2 <= MAX_UDP_SEGMENTS));
        assert_eq!(written.len(), 150usize.div_ceil(MAX_UDP_SEGMENTS));
        assert_eq!(cut(&written), packets);
        // Without USO for the family, or without with_udp, datagrams go one by one.
        for gro in [Gro::new(true, true), Gro::new(true, true).with_udp(false, true)] {
            let written = run(&mut { gro }, &packets[..5]);
            assert!(written.iter().all(|w| w.0 == VnetHeader::PLAIN && w.2 == 1));
        }
        // A TCP segment between datagrams of the same hosts ends the run and is not merged.
        let mut mixed = udp_flow(false, 4, 64, 64);
        mixed.insert(2, segment(false, 0xfff2, 7, TCP_ACK, &[1; 64], &TS));
        let written = run(&mut Gro::new(true, true).with_udp(true, true), &mixed);
        assert_eq!(written.iter().map(|w| w.2).collect::<Vec<_>>(), vec![2, 1, 2]);
    }

    #[test]
    fn udp_datagrams_that_cannot_join_are_written_as_they_are_and_in_order() {
        let base = udp_flow(false, 4, 200, 200);
        let mut cases: Vec<(&str, Vec<Vec<u8>>)> = Vec::new();
        // Other ports, another destination, another TTL, no DF.
        for at in [21, 23, 19, 8, 6] {
            let mut other = base.clone();
            other[2][at] ^= if at == 6 { 0x40 } else { 1 };
            reseal_udp(&mut other[2], 20);
            cases.push(("other header", other));
        }
        let mut bad = base.clone();
        bad[2][100] ^= 0x10;
        cases.push(("bad checksum", bad));
        let mut bad_first = base.clone();
        bad_first[0][100] ^= 0x10;
        cases.push(("bad checksum on the held first datagram", bad_first));
        let mut none = base.clone();
        none[2][26..28].copy_from_slice(&[0, 0]);
        cases.push(("no checksum", none));
        let mut long = base.clone();
        long[2] = datagram(false, 0xfff2, &[3; 201]);
        cases.push(("longer than the first", long));
        let mut id = base.clone();
        id[2] = datagram(false, 0x0100, &[3; 200]);
        cases.push(("identification", id));
        let mut length = base.clone();
        length[2][25] ^= 1;
        reseal_udp(&mut length[2], 20);
        cases.push(("UDP length", length));
        for (what, packets) in cases {
            assert_kept_apart(what, &packets);
        }
    }

    #[test]
    fn a_family_the_queue_cannot_take_is_never_merged() {
        let packets = flow(true, 5, 1200, 1200, false);
        let written = run(&mut Gro::new(true, false), &packets);
        assert_eq!(written.len(), 5);
        assert!(written.iter().all(|w| w.0 == VnetHeader::PLAIN && w.2 == 1));
    }

    #[test]
    fn junk_is_passed_through_untouched() {
        let mut gro = Gro::new(true, true);
        for junk in [&[][..], &[0x45][..], &[0x60; 39][..], &[0x45, 0, 0, 20][..], &[0xff; 80][..]] {
            let written = run(&mut gro, &[junk.to_vec()]);
            assert_eq!(written, vec![(VnetHeader::PLAIN, junk.to_vec(), 1)]);
        }
    }
}
