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

use super::desc::CallDescriptor;
use crate::api::esp::{EspDescriptor, EspOpcode, EspStatus};

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
    /// The request ring's head claimed more entries than the ring holds; the batch was
    /// skipped unread.
    OversizedBatch = 7,
    /// The completion ring's tail (the gateway's index) is inconsistent with ours.
    CorruptIndex = 8,
    /// A call's serialized arguments do not decode.
    BadArguments = 9,
    /// A call's result does not fit the result region the gateway gave.
    ResultTooLarge = 10,
}

impl RejectReason {
    /// Number of reasons, for counter arrays.
    pub const COUNT: usize = 10;

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
    use crate::api::handle::EspSaHandle;

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
        assert_eq!(RejectReason::from_code(11), None);
        let mut c = RejectCounters::default();
        c.record(RejectReason::OutOfBounds);
        c.record(RejectReason::OutOfBounds);
        assert_eq!(c.get(RejectReason::OutOfBounds), 2);
        assert_eq!(c.total(), 2);
    }
}
