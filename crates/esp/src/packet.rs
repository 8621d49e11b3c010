//! Inner and outer IP header handling shared by both directions: parsing what the selectors
//! and the forwarding rules need, TTL and ECN rewriting, outer header construction, IPv4
//! fragmentation and the ICMP errors sent inward.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::ops::Range;

use wire::{
    Ecn, EspTrailer, Icmpv4Packet, Icmpv4Type, Icmpv6Packet, Icmpv6Type, IpProtocol, Ipv4Packet, Ipv4Repr,
    Ipv6Packet, Ipv6Repr, UdpPacket, UdpRepr,
};

use crate::batch::{Action, Batch, Frame, Packet};
use crate::drop::DropReason;
use crate::sad::{Encapsulation, SaConfig};
use crate::selector::FlowKey;

/// What the data path needs to know about an inner packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inner {
    pub(crate) v6: bool,
    /// The packet's own length (IPv4 total length, or 40 + IPv6 payload length).
    pub(crate) len: usize,
    pub(crate) ttl: u8,
    pub(crate) df: bool,
    pub(crate) ecn: Ecn,
    pub(crate) dscp: u8,
    pub(crate) flow_label: u32,
    /// Selector fields, packed (`key.tuple()` unpacks them).
    pub(crate) key: FlowKey,
    /// Whether this is a non-first IPv4 fragment.
    pub(crate) later_fragment: bool,
}

impl Inner {
    /// Parses an inner IPv4/IPv6 packet; the buffer may run past the packet's own length.
    // Inlined into its two per-packet callers: returned through memory, the result was
    // read back with loads that waited on the stores just made (perf put a third of
    // `encap_prepare`'s samples there).
    #[inline(always)]
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, DropReason> {
        match bytes.first().map(|b| b >> 4) {
            Some(4) => {
                let p = Ipv4Packet::new_checked(bytes).map_err(|_| DropReason::Malformed)?;
                if !p.verify_checksum() {
                    return Err(DropReason::Malformed);
                }
                let len = usize::from(p.total_len());
                let key = FlowKey::parse(bytes.get(..len).ok_or(DropReason::Malformed)?)?;
                Ok(Self {
                    v6: false,
                    len,
                    ttl: p.ttl(),
                    df: p.dont_frag(),
                    ecn: p.ecn(),
                    dscp: p.dscp(),
                    flow_label: 0,
                    key,
                    later_fragment: p.frag_offset() != 0,
                })
            }
            Some(6) => {
                let p = Ipv6Packet::new_checked(bytes).map_err(|_| DropReason::Malformed)?;
                let len = wire::ipv6::HEADER_LEN + usize::from(p.payload_len());
                let key = FlowKey::parse(bytes.get(..len).ok_or(DropReason::Malformed)?)?;
                Ok(Self {
                    v6: true,
                    len,
                    ttl: p.hop_limit(),
                    df: true,
                    ecn: p.ecn(),
                    dscp: p.dscp(),
                    flow_label: p.flow_label(),
                    key,
                    later_fragment: key.protocol() == IpProtocol::IPV6_FRAGMENT,
                })
            }
            _ => Err(DropReason::Malformed),
        }
    }

    /// Whether an ICMP error about this packet may be sent (RFC 1122 §3.2.2, RFC 4443
    /// §2.4(e)): not about an ICMP error, a later fragment, or an unusable source.
    pub(crate) fn may_get_icmp_error(&self) -> bool {
        let [type_code, _] = self.key.src_port().unwrap_or(0).to_be_bytes();
        match self.key.src() {
            IpAddr::V4(src) => {
                let icmp_error =
                    self.key.protocol() == IpProtocol::ICMP && matches!(type_code, 3 | 4 | 5 | 11 | 12);
                !(icmp_error
                    || self.later_fragment
                    || src.is_unspecified()
                    || src.is_broadcast()
                    || src.is_multicast()
                    || src.is_loopback())
            }
            IpAddr::V6(src) => {
                let icmp_error = self.key.protocol() == IpProtocol::ICMPV6 && type_code < 128;
                !(icmp_error || self.later_fragment || src.is_unspecified() || src.is_multicast())
            }
        }
    }

    /// The outer IPv6 flow label: the inner one, or a hash of the 5-tuple (RFC 6438 §3).
    pub(crate) fn outer_flow_label(&self) -> u32 {
        if self.flow_label != 0 {
            return self.flow_label;
        }
        // FNV-1a over the selector fields; any stable spread will do.
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
            }
        };
        let t = self.key.tuple();
        match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                eat(&s.octets());
                eat(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                eat(&s.octets());
                eat(&d.octets());
            }
            _ => {}
        }
        eat(&[t.protocol.0]);
        eat(&t.src_port.unwrap_or(0).to_be_bytes());
        eat(&t.dst_port.unwrap_or(0).to_be_bytes());
        h & wire::ipv6::FLOW_LABEL_MAX
    }
}

/// Decrements the TTL / hop limit and sets the ECN field of a parsed inner packet, fixing
/// the IPv4 header checksum.
pub(crate) fn forward_rewrite(packet: &mut [u8], inner: &Inner, ecn: Ecn) -> Result<(), DropReason> {
    let ttl = inner.ttl.checked_sub(1).filter(|t| *t > 0).ok_or(DropReason::TtlExceeded)?;
    if inner.v6 {
        let header = packet.get_mut(..wire::ipv6::HEADER_LEN).ok_or(DropReason::Malformed)?;
        let mut p = Ipv6Packet::new_unchecked(header);
        p.set_hop_limit(ttl);
        p.set_ecn(ecn);
    } else {
        forward_rewrite_v4(packet, ttl, ecn)?;
    }
    Ok(())
}

/// Sets the TTL and the ECN field of an IPv4 header at the start of `packet` whose
/// checksum is right: the two 16-bit words that change are updated in place with RFC 1624's
/// incremental checksum, not re-summed.
#[inline(always)]
pub(crate) fn forward_rewrite_v4(packet: &mut [u8], ttl: u8, ecn: Ecn) -> Result<(), DropReason> {
    let header: &mut [u8; wire::ipv4::HEADER_LEN] = packet
        .get_mut(..wire::ipv4::HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(DropReason::Malformed)?;
    let new_tos = (header[1] & !0b11) | ecn.bits();
    let word = |a: u8, b: u8| u16::from_be_bytes([a, b]);
    let old_words = [word(header[0], header[1]), word(header[8], header[9])];
    let new_words = [word(header[0], new_tos), word(ttl, header[9])];
    let sum = wire::checksum::update_words(word(header[10], header[11]), old_words, new_words);
    header[1] = new_tos;
    header[8] = ttl;
    header[10..12].copy_from_slice(&sum.to_be_bytes());
    Ok(())
}

/// An IPv4 header without options: version 4, IHL 5.
pub(crate) const V4_NO_OPTIONS: u8 = 0x45;
/// An option-less IPv4 header and the four bytes after it (ports, or ICMP type and code):
/// all a plain IPv4 packet's flow key is read from.
pub(crate) const V4_FLOW_BYTES: usize = wire::ipv4::HEADER_LEN + 4;
/// The fragment offset bits of the IPv4 flags/fragment-offset word.
const FRAG_OFFSET: u16 = 0x1fff;

/// The flow bytes of the plain IPv4 packet at the start of `packet`: IHL 5, not a later
/// fragment, at least [`V4_FLOW_BYTES`] long. Two such packets with the same protocol,
/// addresses and first four L4 bytes have the same [`FlowKey`].
pub(crate) fn plain_v4_flow(packet: &[u8]) -> Option<[u8; V4_FLOW_BYTES]> {
    let h: [u8; V4_FLOW_BYTES] = *packet.first_chunk()?;
    let plain = h[0] == V4_NO_OPTIONS
        && usize::from(u16::from_be_bytes([h[2], h[3]])) >= V4_FLOW_BYTES
        && u16::from_be_bytes([h[6], h[7]]) & FRAG_OFFSET == 0;
    plain.then_some(h)
}

/// The length of the IPv4 packet at the start of `packet`, if it is a plain one (see
/// [`plain_v4_flow`]) of flow `flow`, no longer than `room`, with a right header checksum
/// and a TTL above 1: a packet both fast paths forward from fixed offsets, as the general
/// path's full parse, selector check and TTL rule would.
#[inline(always)]
pub(crate) fn plain_v4_len(packet: &[u8], room: usize, flow: &[u8; V4_FLOW_BYTES]) -> Option<usize> {
    let h: &[u8; V4_FLOW_BYTES] = packet.first_chunk()?;
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let plain = h[0] == V4_NO_OPTIONS
        && (V4_FLOW_BYTES..=room).contains(&len)
        && u16::from_be_bytes([h[6], h[7]]) & FRAG_OFFSET == 0
        && h[8] > 1
        && h[9] == flow[9]
        && h[12..] == flow[12..]
        && h.first_chunk().is_some_and(|h| wire::checksum::ipv4_header(h) == 0xffff);
    plain.then_some(len)
}

/// The byte layout of one SA's ESP packets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Outer IP (+ UDP) header bytes.
    pub(crate) outer: usize,
    pub(crate) iv: usize,
    pub(crate) icv: usize,
    /// The ESP payload alignment (4, or the CBC block): a power of two, so rounding to it
    /// is a mask, not the 64-bit division per packet that profiles showed.
    pub(crate) align: usize,
}

impl Shape {
    pub(crate) fn of(cfg: &SaConfig) -> Self {
        debug_assert!(cfg.suite.esp_payload_align().is_power_of_two());
        Self {
            outer: cfg.outer_header_len(),
            iv: cfg.suite.cipher.iv_len(),
            icv: cfg.suite.icv_len(),
            align: cfg.suite.esp_payload_align(),
        }
    }

    /// Bytes in front of the inner packet.
    pub(crate) fn before(&self) -> usize {
        self.outer + wire::esp::HEADER_LEN + self.iv
    }

    /// The trailer for an inner packet of `len` bytes.
    pub(crate) fn trailer(&self, len: usize, v6: bool) -> Result<EspTrailer, DropReason> {
        let next = if v6 { IpProtocol::IPV6 } else { IpProtocol::IPV4 };
        EspTrailer::new(len, self.align, next).map_err(|_| DropReason::Malformed)
    }

    /// The whole outer packet's length for an inner packet of `len` bytes.
    pub(crate) fn total(&self, len: usize) -> usize {
        let payload = (len + wire::esp_trailer::TRAILER_LEN + self.align - 1) & !(self.align - 1);
        self.before() + payload + self.icv
    }

    /// The longest inner packet whose outer packet fits `mtu` (0 if none does).
    pub(crate) fn max_inner(&self, mtu: usize) -> usize {
        let room = mtu.saturating_sub(self.before() + self.icv);
        (room & !(self.align - 1)).saturating_sub(wire::esp_trailer::TRAILER_LEN)
    }
}

/// What the outer header copies from the inner one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OuterFields {
    pub(crate) dscp: u8,
    pub(crate) ecn: Ecn,
    pub(crate) df: bool,
    pub(crate) flow_label: u32,
    pub(crate) ttl: u8,
    pub(crate) ident: u16,
}

/// Writes the outer IP header (and UDP header) at the start of `region`, which is exactly
/// the outer packet. The ESP part is left for the enclave; a UDP checksum over IPv6 is
/// filled after encryption ([`fill_udp6_checksum`]).
#[inline]
pub(crate) fn write_outer(region: &mut [u8], cfg: &SaConfig, f: &OuterFields) -> Result<(), DropReason> {
    let total = region.len();
    let protocol = match cfg.encapsulation {
        Encapsulation::Esp => IpProtocol::ESP,
        Encapsulation::Udp { .. } => IpProtocol::UDP,
    };
    let bad = |_| DropReason::Malformed;
    let ip_len = match (cfg.local, cfg.remote) {
        (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
            let repr = Ipv4Repr {
                src_addr,
                dst_addr,
                protocol,
                payload_len: total.checked_sub(wire::ipv4::HEADER_LEN).ok_or(DropReason::Malformed)?,
                ttl: f.ttl,
                dscp: f.dscp,
                ecn: f.ecn,
                ident: f.ident,
                dont_frag: f.df,
                more_frags: false,
                frag_offset: 0,
            };
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut *region)).map_err(bad)?;
            wire::ipv4::HEADER_LEN
        }
        (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
            let repr = Ipv6Repr {
                src_addr,
                dst_addr,
                next_header: protocol,
                payload_len: total.checked_sub(wire::ipv6::HEADER_LEN).ok_or(DropReason::Malformed)?,
                hop_limit: f.ttl,
                dscp: f.dscp,
                ecn: f.ecn,
                flow_label: f.flow_label,
            };
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut *region)).map_err(bad)?;
            wire::ipv6::HEADER_LEN
        }
        _ => return Err(DropReason::Malformed),
    };
    if let Encapsulation::Udp { local_port, remote_port } = cfg.encapsulation {
        let udp = region.get_mut(ip_len..).ok_or(DropReason::Malformed)?;
        let payload_len = udp.len().checked_sub(wire::udp::HEADER_LEN).ok_or(DropReason::Malformed)?;
        // Zero checksum over IPv4 (RFC 3948 §3.1); over IPv6 it is filled after encryption.
        UdpRepr { src_port: local_port, dst_port: remote_port }
            .emit_header(&mut UdpPacket::new_unchecked(udp), payload_len)
            .map_err(bad)?;
    }
    Ok(())
}

/// One SA's outer IPv4 header (with its UDP header for ESP-in-UDP) as [`write_outer`]
/// writes it, the fields that vary per packet left zero, and the folded sum of the rest: a
/// packet's header is then one copy, four fields and a checksum from five words, where
/// [`write_outer`] builds and sums it whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OuterV4 {
    bytes: [u8; OUTER_V4_MAX],
    len: usize,
    sum: u16,
}

/// An outer IPv4 header and a UDP header.
const OUTER_V4_MAX: usize = wire::ipv4::HEADER_LEN + wire::udp::HEADER_LEN;
/// The IPv4 header's length as the 16-bit length fields count.
const IPV4_HEADER_LEN16: u16 = 20;

impl OuterV4 {
    /// The template of `cfg`'s outer header with TTL `ttl`; `None` unless both tunnel
    /// endpoints are IPv4.
    pub(crate) fn new(cfg: &SaConfig, ttl: u8) -> Option<Self> {
        if !(cfg.local.is_ipv4() && cfg.remote.is_ipv4()) {
            return None;
        }
        let len = cfg.outer_header_len();
        // `write_outer` lays the header out (one definition of it); the ESP bytes after it
        // are scratch.
        let mut scratch = [0u8; OUTER_V4_MAX + wire::esp::HEADER_LEN];
        let fields = OuterFields { dscp: 0, ecn: Ecn::NotEct, df: false, flow_label: 0, ttl, ident: 0 };
        write_outer(scratch.get_mut(..len + wire::esp::HEADER_LEN)?, cfg, &fields).ok()?;
        let mut bytes = [0u8; OUTER_V4_MAX];
        bytes.get_mut(..len)?.copy_from_slice(scratch.get(..len)?);
        // Total length, checksum and the UDP length vary per packet (TOS, identification
        // and flags were written zero).
        for i in [2, 3, 10, 11, 24, 25] {
            if let Some(b) = bytes.get_mut(i) {
                *b = 0;
            }
        }
        let sum = wire::checksum::data(bytes.get(..wire::ipv4::HEADER_LEN)?);
        Some(Self { bytes, len, sum })
    }

    /// Writes the outer header of an outer packet of `total` bytes at the start of
    /// `region`: the bytes [`write_outer`] writes for the same fields (TTL and flow label
    /// come from the template).
    #[inline]
    pub(crate) fn write(&self, region: &mut [u8], total: usize, f: &OuterFields) -> Result<(), DropReason> {
        let total16 = u16::try_from(total).map_err(|_| DropReason::Malformed)?;
        if f.dscp > wire::ip::DSCP_MAX || total < self.len {
            return Err(DropReason::Malformed);
        }
        let tos = (f.dscp << 2) | f.ecn.bits();
        let flags: u16 = if f.df { 0x4000 } else { 0 };
        let mut h = self.bytes;
        h[1] = tos;
        h[2..4].copy_from_slice(&total16.to_be_bytes());
        h[4..6].copy_from_slice(&f.ident.to_be_bytes());
        h[6..8].copy_from_slice(&flags.to_be_bytes());
        // One's-complement addition is associative: the constant part's folded sum plus
        // the four varying words is the header's sum.
        let sum = wire::checksum::combine(&[self.sum, u16::from(tos), total16, f.ident, flags]);
        h[10..12].copy_from_slice(&wire::checksum::finish(sum).to_be_bytes());
        if self.len == OUTER_V4_MAX {
            // `total` is at least the header (checked above).
            let udp_len = total16.saturating_sub(IPV4_HEADER_LEN16);
            h[24..26].copy_from_slice(&udp_len.to_be_bytes());
        }
        // Copies of a constant length, which compile to a few moves; one of `self.len`
        // bytes was a call to `memcpy` per packet.
        match region.get_mut(..self.len) {
            Some(dst) if self.len == OUTER_V4_MAX => dst.copy_from_slice(&h),
            Some(dst) => dst.copy_from_slice(h.get(..wire::ipv4::HEADER_LEN).ok_or(DropReason::Malformed)?),
            None => return Err(DropReason::Malformed),
        }
        Ok(())
    }
}

/// Computes the UDP checksum of an encrypted ESP-in-UDP packet over IPv6 (RFC 8200 §8.1
/// forbids a zero one; it covers the ciphertext, so it can only be done now). The
/// ciphertext is public: this runs on the untrusted side.
pub(crate) fn fill_udp6_checksum(outer: &mut [u8], cfg: &SaConfig) -> Result<(), DropReason> {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (cfg.local, cfg.remote) else { return Ok(()) };
    if !matches!(cfg.encapsulation, Encapsulation::Udp { .. }) {
        return Ok(());
    }
    let udp = outer.get_mut(wire::ipv6::HEADER_LEN..).ok_or(DropReason::Malformed)?;
    let mut p = UdpPacket::new_checked(udp).map_err(|_| DropReason::Malformed)?;
    p.fill_checksum(&wire::IpPair::V6 { src, dst });
    Ok(())
}

/// Where the ICMP error's source address comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IcmpSources {
    pub(crate) v4: Option<Ipv4Addr>,
    pub(crate) v6: Option<Ipv6Addr>,
}

/// Builds, in front of and over the inner packet at `slot[offset..offset + len]`, an ICMP
/// "fragmentation needed" (RFC 1191) or ICMPv6 "packet too big" (RFC 4443 §3.2) for its
/// source, advertising `mtu`. Returns the error packet's (offset, length) in the slot.
pub(crate) fn build_too_big(
    slot: &mut [u8],
    offset: usize,
    inner: &Inner,
    mtu: usize,
    src: IcmpSources,
) -> Option<(usize, usize)> {
    let invoking_len = inner.len;
    match inner.key.src() {
        IpAddr::V4(dst_addr) => {
            let src_addr = src.v4?;
            let head = wire::ipv4::HEADER_LEN + wire::icmpv4::HEADER_LEN;
            let data = invoking_len.min(wire::icmpv4::MAX_ERROR_LEN - head);
            let start = offset.checked_sub(head)?;
            let packet = slot.get_mut(start..offset.checked_add(data)?)?;
            let repr = Ipv4Repr {
                src_addr,
                dst_addr,
                protocol: IpProtocol::ICMP,
                payload_len: wire::icmpv4::HEADER_LEN + data,
                ttl: 64,
                dscp: 0,
                ecn: Ecn::NotEct,
                ident: 0,
                dont_frag: false,
                more_frags: false,
                frag_offset: 0,
            };
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut *packet)).ok()?;
            let mut icmp = Icmpv4Packet::new_checked(packet.get_mut(wire::ipv4::HEADER_LEN..)?).ok()?;
            icmp.set_msg_type(Icmpv4Type::DEST_UNREACHABLE);
            icmp.set_msg_code(wire::icmpv4::CODE_FRAG_NEEDED);
            icmp.set_next_hop_mtu(u16::try_from(mtu).unwrap_or(u16::MAX));
            icmp.fill_checksum();
            Some((start, head + data))
        }
        IpAddr::V6(dst_addr) => {
            let src_addr = src.v6?;
            let head = wire::ipv6::HEADER_LEN + wire::icmpv6::HEADER_LEN;
            let data = invoking_len.min(wire::icmpv6::MIN_MTU - head);
            let start = offset.checked_sub(head)?;
            let packet = slot.get_mut(start..offset.checked_add(data)?)?;
            let repr = Ipv6Repr {
                src_addr,
                dst_addr,
                next_header: IpProtocol::ICMPV6,
                payload_len: wire::icmpv6::HEADER_LEN + data,
                hop_limit: 64,
                dscp: 0,
                ecn: Ecn::NotEct,
                flow_label: 0,
            };
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut *packet)).ok()?;
            let mut icmp = Icmpv6Packet::new_checked(packet.get_mut(wire::ipv6::HEADER_LEN..)?).ok()?;
            icmp.set_msg_type(Icmpv6Type::PACKET_TOO_BIG);
            icmp.set_msg_code(0);
            icmp.set_mtu(u32::try_from(mtu.max(wire::icmpv6::MIN_MTU)).unwrap_or(u32::MAX));
            icmp.fill_checksum(src_addr, dst_addr);
            Some((start, head + data))
        }
    }
}

/// The header for IPv4 fragments after the first: the fixed header and the options whose
/// "copied" flag is set (RFC 791 §3.1), padded with End of Option List. Returns its length.
fn later_fragment_header(header: &[u8], out: &mut [u8; 60]) -> Result<usize, DropReason> {
    let fixed = header.get(..wire::ipv4::HEADER_LEN).ok_or(DropReason::Malformed)?;
    out.get_mut(..wire::ipv4::HEADER_LEN).ok_or(DropReason::Malformed)?.copy_from_slice(fixed);
    let mut len = wire::ipv4::HEADER_LEN;
    let mut options = header.get(wire::ipv4::HEADER_LEN..).unwrap_or(&[]);
    while let [kind, rest @ ..] = options {
        let opt_len = match *kind {
            0 => break,
            1 => 1,
            _ => usize::from(*rest.first().ok_or(DropReason::Malformed)?),
        };
        let opt = options.get(..opt_len).filter(|_| opt_len >= 1).ok_or(DropReason::Malformed)?;
        if *kind != 1 && opt_len < 2 {
            return Err(DropReason::Malformed);
        }
        if kind & 0x80 != 0 {
            out.get_mut(len..len + opt_len).ok_or(DropReason::Malformed)?.copy_from_slice(opt);
            len += opt_len;
        }
        options = options.get(opt_len..).unwrap_or(&[]);
    }
    let padded = len.div_ceil(4) * 4;
    out.get_mut(len..padded).ok_or(DropReason::Malformed)?.fill(0);
    let ihl = u8::try_from(padded / 4).map_err(|_| DropReason::Malformed)?;
    if let Some(b) = out.first_mut() {
        *b = 0x40 | ihl;
    }
    Ok(padded)
}

/// Fragments the IPv4 packet `i` (RFC 791 §3.2) so that no fragment is longer than
/// `max_len`: the first stays in its slot, the others are appended to the batch in free
/// slots at the same offset. Returns the indices of the appended packets.
pub(crate) fn fragment_v4(
    batch: &mut Batch<'_>,
    i: usize,
    max_len: usize,
) -> Result<Range<usize>, DropReason> {
    let slot_len = batch.slot_len;
    let pkt = *batch.packets.get(i).ok_or(DropReason::Malformed)?;
    let base =
        i.checked_mul(slot_len).and_then(|b| b.checked_add(pkt.offset)).ok_or(DropReason::Malformed)?;
    let bytes = batch.area.get(base..base + pkt.len).ok_or(DropReason::Malformed)?;
    let p = Ipv4Packet::new_checked(bytes).map_err(|_| DropReason::Malformed)?;
    let (hl, total) = (usize::from(p.header_len()), usize::from(p.total_len()));
    let (orig_offset, orig_mf) = (usize::from(p.frag_offset()), p.more_frags());
    let mut later = [0u8; 60];
    let later_len = later_fragment_header(p.as_ref().get(..hl).ok_or(DropReason::Malformed)?, &mut later)?;
    // Fragment data is a multiple of 8 bytes, except in the last fragment.
    let first_data = max_len.saturating_sub(hl) / 8 * 8;
    let rest_data = max_len.saturating_sub(later_len) / 8 * 8;
    let data = total - hl;
    if first_data == 0 || rest_data == 0 || data <= first_data {
        return Err(DropReason::MtuExceeded);
    }
    let extra = (data - first_data).div_ceil(rest_data);
    if batch.len + extra > batch.capacity() || pkt.offset + later_len + rest_data > slot_len {
        return Err(DropReason::NoRoom);
    }
    let first_new = batch.len;
    for k in 0..extra {
        let from = hl + first_data + k * rest_data;
        let n = rest_data.min(total - from);
        let j = batch.len;
        let (head, tail) = batch.area.split_at_mut_checked(j * slot_len).ok_or(DropReason::NoRoom)?;
        let src = head.get(base + from..base + from + n).ok_or(DropReason::Malformed)?;
        let at = pkt.offset;
        let dst = tail.get_mut(at..at + later_len + n).ok_or(DropReason::NoRoom)?;
        let (dst_header, dst_data) = dst.split_at_mut_checked(later_len).ok_or(DropReason::NoRoom)?;
        dst_header.copy_from_slice(later.get(..later_len).ok_or(DropReason::Malformed)?);
        dst_data.copy_from_slice(src);
        let mut h = Ipv4Packet::new_unchecked(dst);
        h.set_total_len(u16::try_from(later_len + n).map_err(|_| DropReason::Malformed)?);
        h.set_frag_offset(
            u16::try_from(orig_offset + first_data + k * rest_data).map_err(|_| DropReason::Malformed)?,
        );
        h.set_more_frags(k + 1 < extra || orig_mf);
        h.fill_checksum();
        let slot = batch.packets.get_mut(j).ok_or(DropReason::NoRoom)?;
        *slot = Packet { offset: at, len: later_len + n, frame: Frame::Ip, action: Action::Pending };
        batch.len += 1;
    }
    let first = batch.area.get_mut(base..base + hl + first_data).ok_or(DropReason::Malformed)?;
    let mut h = Ipv4Packet::new_unchecked(first);
    h.set_total_len(u16::try_from(hl + first_data).map_err(|_| DropReason::Malformed)?);
    h.set_more_frags(true);
    h.fill_checksum();
    if let Some(p) = batch.packets.get_mut(i) {
        p.len = hl + first_data;
    }
    Ok(first_new..batch.len)
}

/// Where the ESP (or UDP payload) of a received outer packet is.
#[derive(Debug, Clone)]
pub(crate) struct Outer {
    pub(crate) remote: IpAddr,
    pub(crate) local: IpAddr,
    pub(crate) ecn: Ecn,
    /// (source port, destination port, offset of the UDP header) for ESP-in-UDP.
    pub(crate) udp: Option<(u16, u16, usize)>,
    /// The ESP packet, or the UDP payload, within the received bytes.
    pub(crate) payload: Range<usize>,
}

impl Outer {
    /// Parses a received outer IPv4/IPv6 packet down to ESP or UDP.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, DropReason> {
        let m = |_| DropReason::Malformed;
        let (remote, local, ecn, protocol, l4) = match bytes.first().map(|b| b >> 4) {
            Some(4) => {
                let p = Ipv4Packet::new_checked(bytes).map_err(m)?;
                if !p.verify_checksum() {
                    return Err(DropReason::Malformed);
                }
                if p.is_fragment() {
                    return Err(DropReason::OuterFragment);
                }
                let l4 = usize::from(p.header_len())..usize::from(p.total_len());
                (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()), p.ecn(), p.protocol(), l4)
            }
            Some(6) => {
                let p = Ipv6Packet::new_checked(bytes).map_err(m)?;
                let (protocol, at) = p.upper_layer().map_err(m)?;
                if protocol == IpProtocol::IPV6_FRAGMENT {
                    return Err(DropReason::OuterFragment);
                }
                let end = wire::ipv6::HEADER_LEN + usize::from(p.payload_len());
                (IpAddr::V6(p.src_addr()), IpAddr::V6(p.dst_addr()), p.ecn(), protocol, at..end)
            }
            _ => return Err(DropReason::Malformed),
        };
        match protocol {
            IpProtocol::ESP => Ok(Self { remote, local, ecn, udp: None, payload: l4 }),
            IpProtocol::UDP => {
                let u =
                    UdpPacket::new_checked(bytes.get(l4.clone()).ok_or(DropReason::Malformed)?).map_err(m)?;
                let start = l4.start + wire::udp::HEADER_LEN;
                let payload = start..l4.start + usize::from(u.datagram_len());
                Ok(Self { remote, local, ecn, udp: Some((u.src_port(), u.dst_port(), l4.start)), payload })
            }
            _ => Err(DropReason::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    /// UDP 198.18.0.1:4500 -> 198.19.0.1:4500, DF, TTL 64, one payload byte.
    static UDP_V4: [u8; 29] =
        hex!("4500 001d 1c46 4000 4011 9262 c612 0001 c613 0001 1194 1194 0009 0000 ff");

    #[test]
    fn forwarding_decrements_ttl_and_fixes_the_checksum() {
        let mut p = UDP_V4;
        let inner = Inner::parse(&p).unwrap();
        forward_rewrite(&mut p, &inner, Ecn::Ce).unwrap();
        let v = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!((v.ttl(), v.ecn()), (63, Ecn::Ce));
        assert!(v.verify_checksum());
        let mut last = UDP_V4;
        last[8] = 1;
        last[10..12].copy_from_slice(&[0, 0]);
        Ipv4Packet::new_unchecked(&mut last[..]).fill_checksum();
        let inner = Inner::parse(&last).unwrap();
        assert_eq!(forward_rewrite(&mut last, &inner, Ecn::NotEct), Err(DropReason::TtlExceeded));
    }

    #[test]
    fn the_incremental_checksum_matches_a_full_one_for_every_ttl_tos_and_ecn() -> Result<(), DropReason> {
        let ecns = [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce];
        for ttl in 2..=255u8 {
            for tos in [0u8, 1, 2, 3, 0xb8, 0xfc, 0xff] {
                for ecn in ecns {
                    let mut p = UDP_V4;
                    p[1] = tos;
                    p[8] = ttl;
                    Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
                    let inner = Inner::parse(&p)?;
                    forward_rewrite(&mut p, &inner, ecn)?;
                    let mut full = p;
                    Ipv4Packet::new_unchecked(&mut full[..]).fill_checksum();
                    assert_eq!(p, full, "ttl {ttl} tos {tos:#x} {ecn:?}");
                    assert_eq!((p[8], p[1] >> 2, p[1] & 0b11), (ttl - 1, tos >> 2, ecn.bits()));
                }
            }
        }
        Ok(())
    }

    #[test]
    fn shape_inverts_for_every_alignment() {
        for (outer, iv, icv, align) in [(20, 8, 16, 4), (48, 16, 32, 16), (28, 16, 24, 16), (40, 8, 16, 4)] {
            let s = Shape { outer, iv, icv, align };
            for mtu in 576..1600 {
                let l = s.max_inner(mtu);
                assert!(s.total(l) <= mtu && s.total(l + align) > mtu, "mtu {mtu}");
            }
        }
    }

    #[test]
    fn later_fragments_keep_only_copied_options() {
        // IHL 8: NOP, Record Route (7, not copied, 7 bytes), Security-ish copied option 0x82 len 4.
        let mut h = [0u8; 32];
        h[..20].copy_from_slice(&UDP_V4[..20]);
        h[0] = 0x48;
        h[20..32].copy_from_slice(&hex!("01 07 07 04 00000000 82 04 aabb"));
        let mut out = [0u8; 60];
        let n = later_fragment_header(&h, &mut out).unwrap();
        assert_eq!(n, 24);
        assert_eq!(out[0], 0x46);
        assert_eq!(&out[20..24], &hex!("8204 aabb"));
        h[22] = 0; // Record Route with length 0
        assert_eq!(later_fragment_header(&h, &mut out), Err(DropReason::Malformed));
    }

    #[test]
    fn outer_parse_finds_udp_payload_and_refuses_fragments() {
        let o = Outer::parse(&UDP_V4).unwrap();
        assert_eq!((o.udp, o.payload.clone()), (Some((4500, 4500, 20)), 28..29));
        let mut frag = UDP_V4;
        frag[6] = 0x20; // MF
        frag[10..12].copy_from_slice(&[0, 0]);
        Ipv4Packet::new_unchecked(&mut frag[..]).fill_checksum();
        assert_eq!(Outer::parse(&frag).unwrap_err(), DropReason::OuterFragment);
        let mut bad = UDP_V4;
        bad[11] ^= 1;
        assert_eq!(Outer::parse(&bad).unwrap_err(), DropReason::Malformed);
    }
}
