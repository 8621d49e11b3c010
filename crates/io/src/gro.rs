//! Coalescing consecutive TCP segments of one flow into one super-packet for a TUN queue
//! (receive offload, the inverse of [`crate::gso`]). Pure functions over byte slices.
//!
//! A gateway's receive side otherwise writes every decrypted inner packet into the TUN queue
//! with a syscall of its own, and the kernel routes each one on its own. Written as one
//! packet with a virtio-net header (`GSO_TCPV4`/`GSO_TCPV6`, `gso_size` = the segments'
//! payload, `F_NEEDS_CSUM`), a run of segments crosses once and travels as one `sk_buff`,
//! cut again only where a device needs it, as Linux's own GRO does for NICs.
//!
//! A segment joins the pending super-packet only if cutting that super-packet gives it back
//! **byte for byte** (what [`crate::gso::Segments`] does, tested against it):
//!
//! * IPv4 without options, not a fragment, header checksum good; or IPv6 with TCP as its
//!   next header (no extension headers);
//! * TCP with ACK and at most PSH besides it (no SYN, FIN, RST, URG, CWR: they end runs, or
//!   need care GSO would not take), a payload, a good checksum;
//! * the same IP header as the first segment but for the length fields, checksum and (IPv4)
//!   an Identification that goes up by one per segment; the same TCP header but for the
//!   sequence number, which must follow on, the checksum, and PSH;
//! * a payload of the first segment's length, except that a shorter one, or one with PSH,
//!   may end the run (the super-packet is then written at once);
//! * at most 65,535 bytes in all (the IPv4 Total Length; no BIG TCP on TUN).
//!
//! Anything else is written as it is, after the pending super-packet (order is kept). Only
//! consecutive segments are merged: a batch from one ESP SA carries a bulk flow's segments
//! back to back.

use wire::checksum;

use crate::tcpip::{
    be16, pseudo_header_sum, PROTO_TCP, TCP_ACK, TCP_CWR, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, TCP_URG,
};
use crate::vnet::{self, VnetHeader};

/// The largest super-packet (an IPv4 Total Length, an IPv6 header plus Payload Length
/// kept under the same bound).
pub const MAX_SUPER: usize = 65_535;

/// A TCP segment that may join a super-packet: where its parts are.
#[derive(Debug, Clone, Copy)]
struct Segment {
    v6: bool,
    /// Offset of the TCP header (the IP header's length).
    l4: usize,
    /// Offset of the payload.
    hdr_end: usize,
    seq: u32,
    flags: u8,
    /// IPv4 Identification (0 for IPv6).
    ident: u16,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `packet` as a segment that may be merged, or `None`.
fn parse(packet: &[u8]) -> Option<Segment> {
    let (v6, l4, ident) = match packet.first()? >> 4 {
        4 => {
            // No options, the whole packet, not a fragment, TCP, a good header checksum.
            if *packet.first()? != 0x45
                || usize::from(be16(packet, 2)?) != packet.len()
                || be16(packet, 6)? & 0x3fff != 0
                || *packet.get(9)? != PROTO_TCP
                || checksum::data(packet.get(..20)?) != 0xffff
            {
                return None;
            }
            (false, 20, be16(packet, 4)?)
        }
        6 => {
            if usize::from(be16(packet, 4)?) + 40 != packet.len() || *packet.get(6)? != PROTO_TCP {
                return None;
            }
            (true, 40, 0)
        }
        _ => return None,
    };
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
    Some(Segment { v6, l4, hdr_end, seq: be32(packet, l4 + 4)?, flags, ident })
}

/// Whether the TCP checksum of `packet` (parsed as `seg`) is good. The kernel recomputes a
/// merged packet's checksum, so a segment that arrived damaged must not join one (it would
/// be laundered into a good packet); a segment written alone keeps its own checksum and
/// needs no check here.
fn tcp_checksum_ok(packet: &[u8], seg: &Segment) -> bool {
    let Some(tcp) = packet.get(seg.l4..) else { return false };
    pseudo_header_sum(packet, seg.v6, PROTO_TCP, tcp.len())
        .is_some_and(|p| checksum::combine(&[p, checksum::data(tcp)]) == 0xffff)
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

/// Builds super-packets out of the TCP segments offered to it, one run at a time.
#[derive(Debug)]
pub struct Gro {
    /// The pending packet: the first segment's headers and every payload so far.
    buf: Vec<u8>,
    run: Option<Run>,
    /// Whether IPv4 and IPv6 runs may be built (the queue accepted TSO for the family).
    v4: bool,
    v6: bool,
}

impl Gro {
    /// A coalescer for the families whose super-packets the TUN queue takes.
    pub fn new(v4: bool, v6: bool) -> Self {
        Self { buf: Vec::with_capacity(MAX_SUPER), run: None, v4, v6 }
    }

    /// Offers one IP packet. What must be written first goes to `write` (header, packet,
    /// number of segments it carries): the pending super-packet when `packet` cannot join
    /// it, `packet` itself when it cannot be held, or the run it completes.
    pub fn push(&mut self, packet: &[u8], write: &mut impl FnMut(&VnetHeader, &[u8], usize)) {
        let seg = parse(packet).filter(|s| if s.v6 { self.v6 } else { self.v4 });
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
                && (run.count > 1 || tcp_checksum_ok(&self.buf, &run.first));
            if joins && tcp_checksum_ok(packet, &seg) {
                self.buf.extend_from_slice(&packet[seg.hdr_end..]);
                run.count += 1;
                run.next_seq = run.next_seq.wrapping_add(u32::try_from(payload).unwrap_or(u32::MAX));
                run.push = seg.flags & TCP_PSH != 0;
                // A short segment or PSH ends the run, as it ends Linux's.
                if payload < run.mss || run.push || self.buf.len() + run.mss > MAX_SUPER {
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
        ip_same
            && seg.hdr_end == f.hdr_end
            && seg.seq == run.next_seq
            && !run.push
            && payload <= run.mss
            && buf.len() + payload <= MAX_SUPER
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

    /// Turns the run's packet into a super-packet: lengths, IPv4 header checksum, PSH of
    /// the last segment, the TCP checksum field holding the pseudo-header sum.
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
        // virtio's partial checksum: the field holds the pseudo-header sum (not
        // complemented); the kernel sums from csum_start and stores the complement.
        let pseudo = pseudo_header_sum(buf, f.v6, PROTO_TCP, buf.len() - f.l4)?;
        buf.get_mut(f.l4 + 16..f.l4 + 18)?.copy_from_slice(&pseudo.to_be_bytes());
        Some(VnetHeader {
            flags: vnet::F_NEEDS_CSUM,
            gso_type: if f.v6 { vnet::GSO_TCPV6 } else { vnet::GSO_TCPV4 },
            hdr_len: u16::try_from(f.hdr_end).ok()?,
            gso_size: u16::try_from(run.mss).ok()?,
            csum_start: u16::try_from(f.l4).ok()?,
            csum_offset: 16,
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
            let written = run(&mut Gro::new(true, true), &packets);
            assert!(written.len() >= 2, "{what}: merged across it");
            assert_eq!(written.iter().map(|w| w.2).sum::<usize>(), 4, "{what}: a packet lost");
            // Every packet comes out exactly as it went in (merged ones through a cut).
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
