//! The inbound fast path: a batch that is all ESP for one SA (ESP-in-UDP from the socket,
//! or raw ESP / ESP-in-UDP in an option-less, unfragmented IPv4 packet), every sequence
//! number inside the replay window, is queued for the enclave in one pass instead of the
//! general path's, which parses every outer header in full and classifies every payload
//! (IKE, keepalives, IPv6 headers, several SAs, ESN re-synchronisation). Anything else
//! takes the general path from the start: nothing is counted or written before the whole
//! batch qualified.
//!
//! After the crossing both paths share the finish, where [`open_fast`] takes each
//! authenticated packet that is a plain IPv4 packet of a flow the SA's selectors already
//! admitted in this run, and `decap_one` every other one. The output is byte for byte the
//! general path's (`crates/esp/tests/fast_path.rs` holds the two to that).

use enclave::EspDescriptor;
use wire::{checksum, Ecn};

use super::{Owner, Pending, Worker};
use crate::batch::{Action, Batch, Frame};
use crate::packet::{self, Shape, V4_FLOW_BYTES, V4_NO_OPTIONS};
use crate::sad::{Encapsulation, InboundSa, Sad};

/// IPv4 header length without options.
const V4_HEADER: usize = wire::ipv4::HEADER_LEN;
/// IPv4 "more fragments" and the fragment offset: either makes an outer packet a fragment.
const FRAGMENT: u16 = 0x3fff;

/// A batch the queuing pass accepted: its one SA.
pub(super) struct InPlan<'s> {
    pub(super) sa: &'s InboundSa,
    pub(super) spi: u32,
}

/// Where a received packet's ESP lies in its slot, and the outer ECN field.
struct EspAt {
    start: usize,
    len: usize,
    udp: bool,
    ecn: Ecn,
}

/// The ESP packet of received packet `i` if its outer header is one the fast path reads
/// (see the module); `None` for anything the general path must classify.
#[inline(always)]
fn esp_at(batch: &Batch<'_>, i: usize) -> Option<EspAt> {
    let pkt = batch.packets.get(i)?;
    if pkt.action != Action::Pending {
        return None;
    }
    let at = i * batch.slot_len + pkt.offset;
    let (start, len, udp, ecn) = match pkt.frame {
        // The socket stripped IP and UDP; a keepalive or IKE (zero marker) is not ESP.
        Frame::Udp { ecn, .. } => (pkt.offset, pkt.len, true, ecn),
        // A raw socket read the IP header, either family.
        Frame::Esp { ecn, .. } => (pkt.offset, pkt.len, false, ecn),
        Frame::Ip => {
            let h = batch.area.get(at..at + V4_HEADER + wire::udp::HEADER_LEN)?;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let fragment = u16::from_be_bytes([h[6], h[7]]) & FRAGMENT != 0;
            if h[0] != V4_NO_OPTIONS
                || !(h.len()..=pkt.len).contains(&total)
                || fragment
                || h.first_chunk().is_none_or(|h| checksum::ipv4_header(h) != 0xffff)
            {
                return None;
            }
            let ecn = Ecn::from_bits(h[1]);
            match wire::IpProtocol(h[9]) {
                wire::IpProtocol::ESP => (pkt.offset + V4_HEADER, total - V4_HEADER, false, ecn),
                wire::IpProtocol::UDP => {
                    let datagram = usize::from(u16::from_be_bytes([h[24], h[25]]));
                    if !(wire::udp::HEADER_LEN..=total - V4_HEADER).contains(&datagram) {
                        return None;
                    }
                    (h.len() + pkt.offset, datagram - wire::udp::HEADER_LEN, true, ecn)
                }
                _ => return None,
            }
        }
    };
    Some(EspAt { start, len, udp, ecn })
}

impl Worker {
    /// Queues the whole batch's descriptors and pending entries, as the general path would
    /// have, if it qualifies (see the module); `None`, with the queues empty again, if any
    /// packet does not.
    pub(super) fn decap_fast<'s>(&mut self, sad: &'s Sad, batch: &Batch<'_>) -> Option<InPlan<'s>> {
        if !self.fast_path {
            return None;
        }
        let plan = self.decap_queue(sad, batch);
        if plan.is_some() {
            self.fast.inbound += 1;
        } else {
            self.descriptors.clear();
            self.pending.clear();
        }
        plan
    }

    fn decap_queue<'s>(&mut self, sad: &'s Sad, batch: &Batch<'_>) -> Option<InPlan<'s>> {
        // Descriptors carry 32-bit offsets (`Batch::new` holds the area to that).
        u32::try_from(batch.area.len()).ok()?;
        let first = esp_at(batch, 0)?;
        let slot = batch.area.get(first.start..first.start + first.len)?;
        let spi = u32::from_be_bytes(slot.get(..4)?.try_into().ok()?);
        // Zero is the non-ESP marker (IKE) in UDP and no SA's SPI.
        if spi == 0 {
            return None;
        }
        let sa = sad.inbound(spi)?;
        let cfg = sa.config();
        let rt = sa.runtime();
        let udp = matches!(cfg.encapsulation, Encapsulation::Udp { .. });
        // The general path keeps a packet aside for ESN re-synchronisation once the ICV
        // failures reach this count.
        let after = self.config.esn_resync_after;
        if udp != first.udp || rt.is_expired() || (cfg.esn && after > 0 && rt.auth_failures() >= after) {
            return None;
        }
        let shape = Shape::of(cfg);
        let shortest = wire::esp::HEADER_LEN + shape.iv + shape.icv + wire::esp_trailer::TRAILER_LEN;
        let window = rt.window();
        for i in 0..batch.len {
            let esp = esp_at(batch, i)?;
            let at = i * batch.slot_len + esp.start;
            let h = batch.area.get(at..at + esp.len)?.get(..wire::esp::HEADER_LEN)?;
            if esp.udp != udp || h[..4] != spi.to_be_bytes() || esp.len < shortest {
                return None;
            }
            // CBC needs whole blocks (RFC 3602 §3).
            let body = esp.len - (wire::esp::HEADER_LEN + shape.iv + shape.icv);
            if shape.align > 4 && body & (shape.align - 1) != 0 {
                return None;
            }
            // Anti-replay check before the enclave spends work on the packet (RFC 4303 §3.4.3).
            let seq_lo = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let seq = window.infer(seq_lo, cfg.esn).filter(|&seq| window.check(seq).is_ok())?;
            let (offset, len) = (u32::try_from(at).ok()?, u32::try_from(esp.len).ok()?);
            self.descriptors.push(EspDescriptor::decrypt(cfg.handle, offset, len, seq));
            self.pending.push(Pending {
                packet: i,
                owner: Owner::In { spi, outer_ecn: esp.ecn },
                seq,
                start: esp.start,
                len: esp.len,
            });
        }
        Some(InPlan { sa, spi })
    }
}

/// Finishes an authenticated packet `p` the general `decap_one` would deliver, if it is a
/// plain IPv4 packet of the flow `flow` (bytes of an admitted packet, from
/// [`packet::plain_v4_flow`]; see [`packet::plain_v4_len`]) carrying a well-formed trailer
/// and an ECN pair RFC 6040 forwards: the same checks and rewrite, reading fixed offsets
/// instead of parsing. Returns the inner packet's
/// offset and length in its slot; `None` leaves the packet as it was for `decap_one`.
#[inline(always)]
pub(super) fn open_fast(
    shape: Shape,
    batch: &mut Batch<'_>,
    p: &Pending,
    outer_ecn: Ecn,
    flow: &[u8; V4_FLOW_BYTES],
) -> Option<(usize, usize)> {
    let slot_start = p.packet * batch.slot_len;
    let pt_start = p.start + wire::esp::HEADER_LEN + shape.iv;
    let pt_end = (p.start + p.len).checked_sub(shape.icv)?;
    let plaintext = batch.area.get_mut(slot_start + pt_start..slot_start + pt_end)?;
    // The trailer (RFC 4303 §2.4): padding 1, 2, 3, ... then its length and next header.
    let [rest @ .., pad_len, next_header] = &*plaintext else { return None };
    if *next_header != wire::IpProtocol::IPV4.0 {
        return None;
    }
    let inner_len = rest.len().checked_sub(usize::from(*pad_len))?;
    let padding = rest.get(inner_len..)?;
    if padding.iter().zip(1u8..).any(|(&b, n)| b != n) {
        return None;
    }
    let total = packet::plain_v4_len(plaintext, inner_len, flow)?;
    let (tos, ttl) = (*plaintext.get(1)?, *plaintext.get(8)?);
    let ecn = crate::ecn::decapsulated(Ecn::from_bits(tos), outer_ecn)?;
    // Forwarding: the decapsulator decrements the inner TTL (RFC 4301 §5.1.2.1 note 2).
    packet::forward_rewrite_v4(plaintext, ttl.checked_sub(1)?, ecn).ok()?;
    Some((pt_start, total))
}
