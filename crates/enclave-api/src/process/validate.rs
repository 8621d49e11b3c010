//! Descriptor validation on the enclave side, and the counters of what it refused.
//!
//! Slick (§4.6) checks that a buffer pointer from untrusted memory does not point into the
//! enclave. Our descriptors carry offsets relative to the shared packet or call area, so the
//! enclave forms addresses only as `area_base + offset` after checking
//! `offset + len <= area_len` in 64-bit arithmetic: no value of the two `u32`s can wrap or
//! reach enclave-private memory. The checks run on a private copy of the descriptor, so
//! the gateway cannot change a value between its check and its use. Handles (tenant tag,
//! generation) are checked next, by the trusted tables; per-suite lengths and headers after
//! that, by the trusted ESP code.
//!
//! A batch is checked twice over: as a whole (its run of the descriptor table lies inside
//! the table, and it is no larger than the trusted core takes), then descriptor by descriptor
//! (the above, and that no two regions of the batch share a byte, [`overlaps_any`]).

use super::desc::{BatchDescriptor, CallDescriptor};
use crate::esp::{EspDescriptor, EspOpcode, EspStatus, ESP_DESCRIPTOR_LEN};
use crate::handle::EspSaHandle;

/// Shortest ESP packet any suite accepts: header (8) + IV (8) + the smallest
/// payload holding Pad Length and Next Header (2) + ICV (16); the trusted code checks
/// each suite exactly.
pub const MIN_ESP_LEN: u32 = 8 + 8 + 2 + 16;
/// Longest ESP packet: it travels in one IP datagram.
pub const MAX_ESP_LEN: u32 = 65_535;
/// DECRYPT_FORWARD: fewest bytes between the outer IP header and the ESP header (IPv4).
pub const MIN_OUTER_HEADER: u32 = 20;
/// DECRYPT_FORWARD: most bytes between them (IPv4 with options, 60, + UDP encapsulation, 8).
pub const MAX_OUTER_HEADER: u32 = 60 + 8;

/// Why the transport refused a slot before any trusted code saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum RejectReason {
    /// The slot's kind byte is neither ESP nor call.
    UnknownSlotKind = 1,
    /// Reserved bytes of the slot or of the descriptor are not zero.
    ReservedBytes = 2,
    /// The ESP opcode or call opcode is unknown.
    UnknownOpcode = 3,
    /// A region (packet, outer header, call arguments, call result) leaves its area.
    OutOfBounds = 4,
    /// The ESP length is below header + IV + ICV or above an IP datagram.
    BadLength = 5,
    /// DECRYPT_FORWARD: the outer header offset is not 20..=68 bytes before the ESP header.
    BadOuterHeader = 6,
    /// Retired with layout version 3, which has no request ring head that could claim more
    /// entries than the ring holds; never counted now, kept so that the codes after it and
    /// the counters' positions stay as they were.
    OversizedBatch = 7,
    /// The completion ring's tail (the gateway's index) is inconsistent with ours.
    CorruptIndex = 8,
    /// A call's serialized arguments do not decode.
    BadArguments = 9,
    /// A call's result does not fit the result region the gateway gave.
    ResultTooLarge = 10,
    /// A batch's run of the descriptor table (first index + count) leaves the table.
    BatchOutOfBounds = 11,
    /// A batch names more descriptors than the trusted core takes in one call.
    BatchTooLarge = 12,
    /// A descriptor's region shares bytes with an earlier descriptor's of the same batch.
    Overlap = 13,
}

impl RejectReason {
    /// Number of reasons, for counter arrays.
    pub const COUNT: usize = 13;

    /// All reasons, in code order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::UnknownSlotKind,
        Self::ReservedBytes,
        Self::UnknownOpcode,
        Self::OutOfBounds,
        Self::BadLength,
        Self::BadOuterHeader,
        Self::OversizedBatch,
        Self::CorruptIndex,
        Self::BadArguments,
        Self::ResultTooLarge,
        Self::BatchOutOfBounds,
        Self::BatchTooLarge,
        Self::Overlap,
    ];

    /// The wire code (never 0: 0 means "not refused").
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The reason for a wire code.
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c).checked_sub(1)?).copied()
    }

    /// Index into a counter array.
    pub const fn index(self) -> usize {
        self as usize - 1
    }

    /// The per-packet status the caller sees for an ESP slot refused this way; the same
    /// status the trusted code would give, so both backends answer alike.
    pub const fn esp_status(self) -> EspStatus {
        match self {
            Self::UnknownSlotKind | Self::ReservedBytes => EspStatus::Malformed,
            Self::UnknownOpcode => EspStatus::UnknownOpcode,
            Self::OutOfBounds => EspStatus::OutOfBounds,
            Self::BadLength => EspStatus::BadLength,
            Self::BadOuterHeader => EspStatus::BadOuterHeader,
            Self::Overlap => EspStatus::Overlap,
            _ => EspStatus::NotProcessed,
        }
    }
}

/// Refusals per [`RejectReason`], counted since the enclave process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RejectCounters(pub [u64; RejectReason::COUNT]);

impl RejectCounters {
    /// Counts one refusal.
    pub fn record(&mut self, r: RejectReason) {
        if let Some(c) = self.0.get_mut(r.index()) {
            *c = c.saturating_add(1);
        }
    }

    /// Refusals for `r`.
    pub fn get(&self, r: RejectReason) -> u64 {
        self.0.get(r.index()).copied().unwrap_or(0)
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// `offset .. offset + len` lies inside an area of `area_len` bytes (no wrap: 64-bit sum of
/// two `u32`s).
pub fn in_bounds(offset: u32, len: u32, area_len: u32) -> bool {
    u64::from(offset) + u64::from(len) <= u64::from(area_len)
}

/// Checks an ESP descriptor against the packet area; the trusted code then checks the
/// handle, the suite's exact lengths and the headers.
pub fn validate_esp(d: &EspDescriptor, packet_len: u32) -> Result<(), RejectReason> {
    let forward = d.opcode == EspOpcode::DECRYPT_FORWARD;
    if !(d.opcode == EspOpcode::ENCRYPT || d.opcode == EspOpcode::DECRYPT || forward) {
        return Err(RejectReason::UnknownOpcode);
    }
    if !in_bounds(d.offset, d.len, packet_len) {
        return Err(RejectReason::OutOfBounds);
    }
    if d.len < MIN_ESP_LEN || d.len > MAX_ESP_LEN {
        return Err(RejectReason::BadLength);
    }
    if forward {
        // The outer header precedes the ESP header (so it is in bounds too) by a plausible
        // IPv4/IPv6 (+ UDP) header length.
        let gap = d.offset.checked_sub(d.outer_offset).ok_or(RejectReason::BadOuterHeader)?;
        if !(MIN_OUTER_HEADER..=MAX_OUTER_HEADER).contains(&gap) {
            return Err(RejectReason::BadOuterHeader);
        }
    }
    Ok(())
}

/// Decodes one descriptor from its private copy and checks it: in one pass over whole words,
/// what [`EspDescriptor::decode`] (reserved bytes) and then [`validate_esp`] check, with the
/// same outcome. This runs once per packet on the enclave's core, so it is kept to a few
/// instructions.
pub fn check_descriptor(
    b: &[u8; ESP_DESCRIPTOR_LEN],
    packet_len: u32,
) -> Result<EspDescriptor, RejectReason> {
    let mut w = [0u64; 4];
    for (w, c) in w.iter_mut().zip(b.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        *w = u64::from_le_bytes(a);
    }
    check_words(&w, packet_len)
}

/// [`check_descriptor`] on the encoding read as four little-endian words (as the guest
/// reads it out of the descriptor table: one load per word).
#[inline]
pub fn check_words(w: &[u64; 4], packet_len: u32) -> Result<EspDescriptor, RejectReason> {
    let lo = |x: u64| u32::try_from(x & 0xffff_ffff).unwrap_or(u32::MAX);
    let hi = |x: u64| u32::try_from(x >> 32).unwrap_or(u32::MAX);
    let [w0, w1, _, w3] = *w;
    // The usual descriptor (ENCRYPT or DECRYPT, reserved bytes zero, in bounds, a plausible
    // length) in one branch; `&` rather than `&&` so that the tests need no branch each.
    let (op, offset, len) = (w0 & 0xff, w1 & 0xffff_ffff, w1 >> 32);
    let usual = (((w0 & 0xffff_ff00) | (w3 >> 32)) == 0)
        & (op.wrapping_sub(1) < 2)
        & (offset + len <= u64::from(packet_len))
        & (len.wrapping_sub(u64::from(MIN_ESP_LEN)) <= u64::from(MAX_ESP_LEN - MIN_ESP_LEN));
    let d = EspDescriptor {
        opcode: EspOpcode(w0.to_le_bytes()[0]),
        sa: EspSaHandle(hi(w0)),
        offset: lo(w1),
        len: hi(w1),
        seq: w[2],
        outer_offset: lo(w3),
    };
    if usual {
        return Ok(d);
    }
    // Bytes 1..4 and 28..32 are reserved.
    if w0 & 0xffff_ff00 != 0 || hi(w3) != 0 {
        return Err(RejectReason::ReservedBytes);
    }
    let d = EspDescriptor {
        opcode: EspOpcode(w[0].to_le_bytes()[0]),
        sa: EspSaHandle(hi(w[0])),
        offset: lo(w[1]),
        len: hi(w[1]),
        seq: w[2],
        outer_offset: lo(w[3]),
    };
    validate_esp(&d, packet_len).map(|()| d)
}

/// The bytes a descriptor that passed [`validate_esp`] may touch: its packet, and for
/// DECRYPT_FORWARD the outer header before it.
pub fn region(d: &EspDescriptor) -> (u32, u64) {
    let start = if d.opcode == EspOpcode::DECRYPT_FORWARD { d.outer_offset } else { d.offset };
    (start, u64::from(d.offset) + u64::from(d.len))
}

/// Checks a batch against the descriptor table (`table` entries) and the most descriptors
/// the trusted core takes per call.
pub fn validate_batch(b: &BatchDescriptor, table: u32, max_batch: u32) -> Result<(), RejectReason> {
    if b.count > max_batch {
        return Err(RejectReason::BatchTooLarge);
    }
    if !in_bounds(b.first, b.count, table) {
        return Err(RejectReason::BatchOutOfBounds);
    }
    Ok(())
}

/// Whether `start .. end` shares a byte with the region of any of `accepted` (descriptors of
/// the same batch that passed). The trusted code transforms each region as if it owned it
/// (as an inline caller's disjoint `&mut` borrows would), so one packet's output must never
/// be another's input within a batch. The guest calls this only for a descriptor that
/// starts before the end of the furthest region so far, so a batch laid out in ascending
/// order never scans; any other order costs a scan bounded by the batch size.
pub fn overlaps_any(accepted: &[EspDescriptor], start: u32, end: u64) -> bool {
    let start = u64::from(start);
    accepted.iter().any(|d| {
        let (s, e) = region(d);
        start < e && u64::from(s) < end
    })
}

/// Checks a call descriptor against the call area. The opcode is checked by the dispatcher.
pub fn validate_call(c: &CallDescriptor, call_len: u32) -> Result<(), RejectReason> {
    if !in_bounds(c.arg_off, c.arg_len, call_len) || !in_bounds(c.res_off, c.res_cap, call_len) {
        return Err(RejectReason::OutOfBounds);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: u32 = 64 * 1024;
    const SA: EspSaHandle = EspSaHandle(0x0100_0001);

    #[test]
    fn a_good_descriptor_of_each_opcode_passes() {
        assert_eq!(validate_esp(&EspDescriptor::encrypt(SA, 0, 100, 1), AREA), Ok(()));
        assert_eq!(validate_esp(&EspDescriptor::decrypt(SA, AREA - 100, 100, 1), AREA), Ok(()));
        assert_eq!(validate_esp(&EspDescriptor::decrypt_forward(SA, 100, 128, 100, 1), AREA), Ok(()));
        assert_eq!(validate_esp(&EspDescriptor::decrypt_forward(SA, 60, 128, 100, 1), AREA), Ok(()));
    }

    #[test]
    fn forged_offsets_and_lengths_are_refused_without_wrapping() {
        let cases = [
            (EspDescriptor::encrypt(SA, AREA, 64, 1), RejectReason::OutOfBounds),
            (EspDescriptor::encrypt(SA, AREA - 63, 64, 1), RejectReason::OutOfBounds),
            (EspDescriptor::encrypt(SA, u32::MAX, 64, 1), RejectReason::OutOfBounds),
            // offset + len wraps to 63 in 32-bit arithmetic.
            (EspDescriptor::encrypt(SA, u32::MAX - 0x40 + 1, 0x80, 1), RejectReason::OutOfBounds),
            (EspDescriptor::encrypt(SA, 0, u32::MAX, 1), RejectReason::OutOfBounds),
            (EspDescriptor::encrypt(SA, 0, MIN_ESP_LEN - 1, 1), RejectReason::BadLength),
            (EspDescriptor::encrypt(SA, 0, 0, 1), RejectReason::BadLength),
        ];
        for (d, want) in cases {
            assert_eq!(validate_esp(&d, AREA), Err(want), "{d:?}");
        }
        let big = AREA * 4;
        assert_eq!(
            validate_esp(&EspDescriptor::decrypt(SA, 0, MAX_ESP_LEN + 1, 1), big),
            Err(RejectReason::BadLength)
        );
    }

    #[test]
    fn unknown_opcodes_are_refused() {
        for op in [0u8, 4, 0x80, 0xff] {
            let mut d = EspDescriptor::encrypt(SA, 0, 100, 1);
            d.opcode = EspOpcode(op);
            assert_eq!(validate_esp(&d, AREA), Err(RejectReason::UnknownOpcode));
        }
    }

    #[test]
    fn forward_outer_header_must_precede_the_esp_header() {
        for outer in [128u32, 129, 200, 0, u32::MAX, 128 - 19, 128 - 69] {
            let d = EspDescriptor::decrypt_forward(SA, outer, 128, 100, 1);
            assert_eq!(validate_esp(&d, AREA), Err(RejectReason::BadOuterHeader), "outer {outer}");
        }
    }

    #[test]
    fn call_regions_must_lie_in_the_call_area() {
        let ok = CallDescriptor { opcode: 1, arg_off: 0, arg_len: 10, res_off: 10, res_cap: AREA - 10 };
        assert_eq!(validate_call(&ok, AREA), Ok(()));
        for c in [
            CallDescriptor { arg_off: AREA, arg_len: 1, ..ok },
            CallDescriptor { arg_len: u32::MAX, ..ok },
            CallDescriptor { res_off: u32::MAX, res_cap: 2, ..ok },
            CallDescriptor { res_cap: AREA, ..ok },
        ] {
            assert_eq!(validate_call(&c, AREA), Err(RejectReason::OutOfBounds), "{c:?}");
        }
    }

    #[test]
    fn reasons_map_to_codes_and_statuses() {
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(RejectReason::from_code(r.code()), Some(*r));
        }
        assert_eq!(RejectReason::from_code(0), None);
        assert_eq!(RejectReason::from_code(14), None);
        assert_eq!(RejectReason::Overlap.esp_status(), EspStatus::Overlap);
        let mut c = RejectCounters::default();
        c.record(RejectReason::OutOfBounds);
        c.record(RejectReason::OutOfBounds);
        assert_eq!(c.get(RejectReason::OutOfBounds), 2);
        assert_eq!(c.total(), 2);
    }

    #[test]
    fn the_one_pass_check_agrees_with_decode_then_validate() {
        // A small xorshift generator: deterministic, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut cases: Vec<[u8; ESP_DESCRIPTOR_LEN]> = vec![
            EspDescriptor::encrypt(SA, 0, 100, 1).encode(),
            EspDescriptor::decrypt_forward(SA, 100, 128, 100, 7).encode(),
            EspDescriptor::decrypt(SA, AREA - 100, 100, u64::MAX).encode(),
        ];
        for _ in 0..20_000 {
            let mut b = EspDescriptor::encrypt(SA, 0, 100, 1).encode();
            // Perturb a few bytes towards interesting values.
            for _ in 0..(next() % 4) {
                let i = (next() % 32) as usize;
                b[i] = match next() % 4 {
                    0 => 0,
                    1 => 0xff,
                    2 => (next() % 4) as u8,
                    _ => next().to_le_bytes()[0],
                };
            }
            cases.push(b);
        }
        for b in cases {
            let slow = EspDescriptor::decode(&b)
                .map_err(|_| RejectReason::ReservedBytes)
                .and_then(|d| validate_esp(&d, AREA).map(|()| d));
            assert_eq!(check_descriptor(&b, AREA), slow, "{b:?}");
        }
    }

    #[test]
    fn batches_must_lie_in_the_table_and_respect_the_limit() {
        let ok = BatchDescriptor { first: 992, count: 32 };
        assert_eq!(validate_batch(&ok, 1024, 256), Ok(()));
        assert_eq!(validate_batch(&BatchDescriptor { first: 0, count: 0 }, 1024, 256), Ok(()));
        for (b, want) in [
            (BatchDescriptor { first: 993, count: 32 }, RejectReason::BatchOutOfBounds),
            (BatchDescriptor { first: 1024, count: 1 }, RejectReason::BatchOutOfBounds),
            // first + count wraps to 0 in 32-bit arithmetic.
            (BatchDescriptor { first: u32::MAX, count: 1 }, RejectReason::BatchOutOfBounds),
            (BatchDescriptor { first: 0, count: 257 }, RejectReason::BatchTooLarge),
            (BatchDescriptor { first: 0, count: u32::MAX }, RejectReason::BatchTooLarge),
        ] {
            assert_eq!(validate_batch(&b, 1024, 256), Err(want), "{b:?}");
        }
    }

    #[test]
    fn overlapping_regions_are_found_in_any_order() {
        let at = |off: u32, len: u32| EspDescriptor::encrypt(SA, off, len, 1);
        let accepted = [at(0, 100), at(100, 100), at(300, 100), at(200, 100)];
        for (s, e) in [(0, 1), (99, 101), (150, 160), (399, 500), (50, 350), (250, 251)] {
            assert!(overlaps_any(&accepted, s, e), "{s}..{e}");
        }
        for (s, e) in [(400, 401), (400, 2000), (1000, 1064)] {
            assert!(!overlaps_any(&accepted, s, e), "{s}..{e}");
        }
        assert!(!overlaps_any(&[], 0, 100));
        // A DECRYPT_FORWARD region starts at its outer header.
        let f = EspDescriptor::decrypt_forward(SA, 100, 128, 100, 1);
        assert_eq!(region(&f), (100, 228));
        assert!(overlaps_any(&[f], 120, 128), "inside its outer header");
        assert_eq!(region(&EspDescriptor::decrypt(SA, 128, 100, 1)), (128, 228));
        let big = EspDescriptor::encrypt(SA, u32::MAX - 64, 64, 1);
        assert_eq!(region(&big), (u32::MAX - 64, u64::from(u32::MAX)));
    }
}
