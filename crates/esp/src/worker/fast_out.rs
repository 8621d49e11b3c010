//! The outbound fast path: a batch that is one flow of plain IPv4 packets for one SA with an
//! IPv4 outer header, every packet fitting the path MTU, is laid out and numbered in one
//! pass, and finished in another, instead of the general path's passes that carry every
//! case (IPv6, fragmentation, ICMP errors, bypass, several SAs per batch) through every
//! packet. The enclave crossing between them is the general path's.
//!
//! All or nothing: a first, read-only pass checks every packet, and only if all pass does
//! the second one write a byte or count anything; otherwise the general path takes the
//! batch from the start. The output is byte for byte the general path's
//! (`crates/esp/tests/fast_path.rs` holds the two to that).

use enclave::{EspDescriptor, EspStatus};

use super::{drop_packet, low16, transmit, BatchReport, Owner, Pending, Worker, OUTER_TTL};
use crate::batch::{Action, Batch, Transmit};
use crate::drop::DropReason;
use crate::packet::{self, Inner, OuterFields, OuterV4, Shape, V4_FLOW_BYTES};
use crate::sad::{OutboundSa, OutboundSaId, Sad};
use crate::spd::{PolicyAction, Spd};

/// IPv4 flag "don't fragment" in the flags/fragment-offset word.
const FLAG_DF: u16 = 0x4000;

/// A batch the checking pass accepted: its one SA, and what writing its packets needs.
pub(super) struct Plan<'s> {
    id: OutboundSaId,
    sa: &'s OutboundSa,
    shape: Shape,
    outer: OuterV4,
    /// Bytes of all inner packets, for the lifetime reservation.
    bytes: u64,
}

impl Worker {
    /// Lays out and numbers the whole batch if it qualifies (see the module), queuing its
    /// descriptors and pending entries as the general path would have, and returns what
    /// [`Self::encap_finish_fast`] needs; `None`, having touched nothing, if any packet
    /// does not qualify.
    pub(super) fn encap_fast<'s>(
        &mut self,
        sad: &'s Sad,
        spd: &Spd,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) -> Option<Plan<'s>> {
        if !self.fast_path {
            return None;
        }
        let plan = plan(sad, spd, batch)?;
        self.fast.outbound += 1;
        self.encap_run(batch, &plan, report);
        Some(plan)
    }

    /// The writing pass over a batch [`plan`] accepted: per packet the general path's
    /// steps in its order (inner TTL, trailer, then lifetime and number, outer header).
    fn encap_run(&mut self, batch: &mut Batch<'_>, plan: &Plan<'_>, report: &mut BatchReport) {
        let (sa, shape) = (plan.sa, plan.shape);
        let cfg = sa.config();
        let rt = sa.runtime();
        let before = shape.before();
        let n = batch.len;
        let count = u64::try_from(n).unwrap_or(u64::MAX);
        let reservation = rt.reserve(count, plan.bytes);
        // Most runs are far from every limit: then each packet's number is the next one.
        let clear = reservation.is_clear(count, plan.bytes, cfg.esn, &cfg.lifetime);
        let mut bytes_before = 0u64;
        'packets: for i in 0..n {
            // `plan` checked every bound used here: of these reasons only the lifetime's
            // can come up.
            let failed = 'one: {
                let Some(pkt) = batch.packets.get_mut(i) else { break 'one DropReason::NoRoom };
                let slot_start = i * batch.slot_len;
                let Some(slot) = batch.area.get_mut(slot_start..slot_start + batch.slot_len) else {
                    break 'one DropReason::NoRoom;
                };
                let Some(h) = slot.get(pkt.offset..pkt.offset + V4_FLOW_BYTES) else {
                    break 'one DropReason::NoRoom;
                };
                let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
                let (tos, frag_word, ttl) = (h[1], u16::from_be_bytes([h[6], h[7]]), h[8]);
                pkt.len = len;
                let Some(payload) = slot.get_mut(pkt.offset..) else { break 'one DropReason::NoRoom };
                // The inner header: TTL decremented (RFC 4301 §5.1.2.1), ECN kept.
                let ecn = wire::Ecn::from_bits(tos);
                if let Err(r) = packet::forward_rewrite_v4(payload, ttl.saturating_sub(1), ecn) {
                    break 'one r;
                }
                // Padding and trailer after the inner packet (RFC 4303 §2.4).
                let trailer = match shape.trailer(len, false) {
                    Ok(t) => t,
                    Err(r) => break 'one r,
                };
                if trailer.emit(payload, len, |_| {}).is_err() {
                    break 'one DropReason::NoRoom;
                }
                let len64 = u64::try_from(len).unwrap_or(u64::MAX);
                let nth = u64::try_from(i).unwrap_or(u64::MAX);
                let judged = if clear {
                    Ok((reservation.first_seq() + nth, false))
                } else {
                    rt.judge(&reservation, nth, bytes_before, len64, cfg.esn, &cfg.lifetime)
                };
                bytes_before = bytes_before.saturating_add(len64);
                let (seq, crossed) = match judged {
                    Ok(v) => v,
                    Err(r) => break 'one r,
                };
                report.lifetime_check_due |= crossed;
                // The outer header (RFC 4301 §5.1.2.1: DSCP, ECN and DF copied).
                let start = pkt.offset - before;
                let total = shape.total(len);
                let fields = OuterFields {
                    dscp: tos >> 2,
                    ecn: crate::ecn::encapsulated(ecn),
                    df: frag_word & FLAG_DF != 0,
                    flow_label: 0,
                    ttl: OUTER_TTL,
                    ident: low16(seq),
                };
                let Some(outer) = slot.get_mut(start..start + total) else { break 'one DropReason::NoRoom };
                if let Err(r) = plan.outer.write(outer, total, &fields) {
                    break 'one r;
                }
                let esp = slot_start + start + shape.outer;
                let (Ok(offset), Ok(esp_len)) = (u32::try_from(esp), u32::try_from(total - shape.outer))
                else {
                    break 'one DropReason::NoRoom;
                };
                self.descriptors.push(EspDescriptor::encrypt(cfg.handle, offset, esp_len, seq));
                self.pending.push(Pending {
                    packet: i,
                    owner: Owner::Out { id: plan.id, fields, inner_len: len },
                    seq,
                    start,
                    len: total,
                });
                continue 'packets;
            };
            drop_packet(&mut self.drops, report, batch, i, failed, Some(rt.drops()));
        }
    }

    /// After the crossing: each sealed packet is to be sent, each refused one dropped under
    /// the enclave's reason (the general `encap_finish` for one SA over IPv4, where no UDP
    /// checksum is due).
    pub(super) fn encap_finish_fast(
        &mut self,
        plan: &Plan<'_>,
        batch: &mut Batch<'_>,
        report: &mut BatchReport,
    ) {
        let sa_drops = Some(plan.sa.runtime().drops());
        let transmit = transmit(plan.id, plan.sa.config(), 0);
        for (p, &status) in self.pending.iter().zip(&self.status) {
            if status != EspStatus::Ok {
                let reason = DropReason::from_status(status);
                drop_packet(&mut self.drops, report, batch, p.packet, reason, sa_drops);
                continue;
            }
            if let Some(pkt) = batch.packets.get_mut(p.packet) {
                pkt.offset = p.start;
                pkt.len = p.len;
                pkt.action =
                    Action::Transmit(Transmit { esp_offset: p.start + plan.shape.outer, ..transmit });
                report.transmit += 1;
            }
        }
    }
}

/// The checking pass: the batch's SA and layout if every packet qualifies, reading the
/// packets and the SA's state but writing nothing.
fn plan<'s>(sad: &'s Sad, spd: &Spd, batch: &Batch<'_>) -> Option<Plan<'s>> {
    let first = batch.packets.first()?;
    let slot_len = batch.slot_len;
    let head = batch.area.get(first.offset..first.offset + first.len)?;
    // The first packet is parsed in full: its flow key picks the policy. Every other packet
    // carries the same bytes where the key comes from, and so the same key.
    let inner = Inner::parse(head).ok()?;
    let key = packet::plain_v4_flow(head)?;
    let Some(PolicyAction::Protect(id)) = spd.lookup(&inner.key.tuple()).map(|p| p.action) else {
        return None;
    };
    let sa = sad.outbound(id)?;
    let cfg = sa.config();
    let outer = OuterV4::new(cfg, OUTER_TTL)?;
    if sa.runtime().is_expired() {
        return None;
    }
    let shape = Shape::of(cfg);
    let mtu = usize::from(sa.runtime().path_mtu());
    let before = shape.before();
    // Descriptors carry 32-bit offsets (`Batch::new` holds the area to that).
    u32::try_from(batch.area.len()).ok()?;
    let mut bytes = 0u64;
    for i in 0..batch.len {
        let pkt = batch.packets.get(i)?;
        if pkt.action != Action::Pending {
            return None;
        }
        let at = i * slot_len + pkt.offset;
        let len = packet::plain_v4_len(batch.area.get(at..at + pkt.len)?, pkt.len, &key)?;
        let total = shape.total(len);
        let room = pkt.offset >= before && pkt.offset - before + total <= slot_len;
        if !(room && total <= mtu) {
            return None;
        }
        bytes = bytes.saturating_add(u64::try_from(len).unwrap_or(u64::MAX));
    }
    Some(Plan { id, sa, shape, outer, bytes })
}
