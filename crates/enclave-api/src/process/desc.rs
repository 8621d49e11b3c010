//! Wire formats of ring slots and table entries, read and written as bytes at fixed offsets.
//!
//! Nothing here is cast from shared memory: the guest copies a slot out once
//! ([`super::ring::Consumer::read`]), and a batch's run of the descriptor table once, and
//! decodes those private copies, so a value cannot change between its check and its use.
//!
//! Request slot (64 bytes, one cache line), little-endian:
//!
//! ```text
//!  0      kind u8          2 = call (one IKE step), 3 = ESP batch
//!  1..8   reserved, zero
//!  8..16  cookie u64       opaque, echoed in the completion
//! 16..48  body             call:  opcode u16 | 0 u16 | arg_off u32 | arg_len u32
//!                                 | res_off u32 | res_cap u32 | 0 x12
//!                          batch: first u32 | count u32 | 0 x24
//! 48..60  reserved, zero
//! 60..64  ring stamp       written by the ring when it publishes the slot (ring.rs)
//! ```
//!
//! A batch is descriptor table entries `first .. first + count`, each the 32-byte
//! [`crate::EspDescriptor`] encoding; the enclave answers with status table
//! entries `first .. first + count`, two bytes each: the [`crate::EspStatus`] code, then 0 or
//! the [`RejectReason`] code of a descriptor the transport refused.
//!
//! Completion slot (64 bytes, one cache line), little-endian:
//!
//! ```text
//!  0..8   cookie u64       the request's
//!  8      kind u8          the request's (0 if its kind was unknown)
//!  9      status u8        CallStatus code (a batch: Ok = statuses written, Rejected = none)
//! 10      reject u8        0, or the RejectReason code if the transport refused the slot
//! 11      reserved, zero
//! 12..16  result_len u32   call: bytes written at res_off (result or encoded error);
//!                          batch: statuses written (its count)
//! 16..60  reserved, zero
//! 60..64  ring stamp
//! ```

use super::layout::{COMPLETION_SLOT, REQUEST_SLOT, STATUS_BYTES};
use super::validate::RejectReason;
use crate::esp::EspStatus;

/// Slot kind: one call (an IKE step or a query), arguments in the call area.
pub const KIND_CALL: u8 = 2;
/// Slot kind: one ESP batch, descriptors in the descriptor table.
pub const KIND_BATCH: u8 = 3;

/// A call: which operation, and where its serialized arguments and result go, as offsets
/// into the call area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallDescriptor {
    /// The operation ([`super::codec::op`]).
    pub opcode: u16,
    /// Offset of the arguments.
    pub arg_off: u32,
    /// Bytes of arguments.
    pub arg_len: u32,
    /// Offset of the result region.
    pub res_off: u32,
    /// Bytes the result may take.
    pub res_cap: u32,
}

/// An ESP batch: a run of the descriptor table (and of the status table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchDescriptor {
    /// Index of the first descriptor.
    pub first: u32,
    /// Number of descriptors.
    pub count: u32,
}

/// A decoded request slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// One ESP batch.
    Batch(BatchDescriptor),
    /// One call.
    Call(CallDescriptor),
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(i..i + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(i..i + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// Whether every byte is zero, a word at a time (this runs on every slot).
fn all_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(8);
    let or = words.by_ref().fold(0u64, |acc, c| {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        acc | u64::from_ne_bytes(a)
    });
    or == 0 && words.remainder().iter().all(|&x| x == 0)
}

/// Encodes an ESP batch request slot.
pub fn encode_batch(cookie: u64, b: &BatchDescriptor) -> [u8; REQUEST_SLOT] {
    let mut s = [0u8; REQUEST_SLOT];
    s[0] = KIND_BATCH;
    s[8..16].copy_from_slice(&cookie.to_le_bytes());
    s[16..20].copy_from_slice(&b.first.to_le_bytes());
    s[20..24].copy_from_slice(&b.count.to_le_bytes());
    s
}

/// Encodes a call request slot.
pub fn encode_call(cookie: u64, c: &CallDescriptor) -> [u8; REQUEST_SLOT] {
    let mut s = [0u8; REQUEST_SLOT];
    s[0] = KIND_CALL;
    s[8..16].copy_from_slice(&cookie.to_le_bytes());
    s[16..18].copy_from_slice(&c.opcode.to_le_bytes());
    s[20..24].copy_from_slice(&c.arg_off.to_le_bytes());
    s[24..28].copy_from_slice(&c.arg_len.to_le_bytes());
    s[28..32].copy_from_slice(&c.res_off.to_le_bytes());
    s[32..36].copy_from_slice(&c.res_cap.to_le_bytes());
    s
}

/// The slot's kind and cookie, readable even when the rest is refused (the cookie goes back).
pub fn request_header(s: &[u8; REQUEST_SLOT]) -> (u8, u64) {
    (s[0], u64_at(s, 8))
}

/// Decodes a private copy of a request slot; reserved bytes must be zero (the ring's stamp
/// is not the slot format's).
pub fn decode_request(s: &[u8; REQUEST_SLOT]) -> Result<Request, RejectReason> {
    if !all_zero(&s[1..8]) || !all_zero(&s[48..60]) {
        return Err(RejectReason::ReservedBytes);
    }
    match s[0] {
        KIND_BATCH => {
            if !all_zero(&s[24..48]) {
                return Err(RejectReason::ReservedBytes);
            }
            Ok(Request::Batch(BatchDescriptor { first: u32_at(s, 16), count: u32_at(s, 20) }))
        }
        KIND_CALL => {
            if !all_zero(&s[18..20]) || !all_zero(&s[36..48]) {
                return Err(RejectReason::ReservedBytes);
            }
            Ok(Request::Call(CallDescriptor {
                opcode: u16::from_le_bytes([s[16], s[17]]),
                arg_off: u32_at(s, 20),
                arg_len: u32_at(s, 24),
                res_off: u32_at(s, 28),
                res_cap: u32_at(s, 32),
            }))
        }
        _ => Err(RejectReason::UnknownSlotKind),
    }
}

/// A status table entry.
pub fn encode_status(status: EspStatus, reject: Option<RejectReason>) -> [u8; STATUS_BYTES] {
    [status.code(), reject.map_or(0, RejectReason::code)]
}

/// Decodes a status table entry: the status (an unknown code reads as
/// [`EspStatus::NotProcessed`]) and the reject reason, if any.
pub fn decode_status(e: [u8; STATUS_BYTES]) -> (EspStatus, Option<RejectReason>) {
    let s = EspStatus::ALL.get(usize::from(e[0])).copied().unwrap_or(EspStatus::NotProcessed);
    (s, RejectReason::from_code(e[1]))
}

/// Outcome of a call or batch slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CallStatus {
    /// Done; a call's result region holds the encoded result, a batch's status entries are
    /// written.
    Ok = 0,
    /// The trusted core refused a call; the result region holds the encoded [`crate::Error`].
    Refused = 1,
    /// The transport refused the slot; see the completion's reject reason.
    Rejected = 2,
}

impl CallStatus {
    /// The status for a wire code.
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Self::Ok),
            1 => Some(Self::Refused),
            2 => Some(Self::Rejected),
            _ => None,
        }
    }
}

/// A completion slot's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// The request's cookie.
    pub cookie: u64,
    /// The request's kind.
    pub kind: u8,
    /// [`CallStatus`] code.
    pub status: u8,
    /// 0, or the [`RejectReason`] code.
    pub reject: u8,
    /// Bytes of result (calls), statuses written (batches).
    pub result_len: u32,
}

impl Completion {
    /// Encodes the slot.
    pub fn encode(&self) -> [u8; COMPLETION_SLOT] {
        let mut s = [0u8; COMPLETION_SLOT];
        s[0..8].copy_from_slice(&self.cookie.to_le_bytes());
        s[8] = self.kind;
        s[9] = self.status;
        s[10] = self.reject;
        s[12..16].copy_from_slice(&self.result_len.to_le_bytes());
        s
    }

    /// Decodes the slot (the host trusts the guest, but still reads it as bytes).
    pub fn decode(s: &[u8; COMPLETION_SLOT]) -> Self {
        Self { cookie: u64_at(s, 0), kind: s[8], status: s[9], reject: s[10], result_len: u32_at(s, 12) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_slot_round_trips() {
        let b = BatchDescriptor { first: 64, count: 32 };
        let s = encode_batch(0xDEAD_BEEF, &b);
        assert_eq!(request_header(&s), (KIND_BATCH, 0xDEAD_BEEF));
        assert_eq!(decode_request(&s), Ok(Request::Batch(b)));
    }

    #[test]
    fn call_slot_round_trips() {
        let c = CallDescriptor { opcode: 7, arg_off: 0, arg_len: 99, res_off: 128, res_cap: 4096 };
        let s = encode_call(5, &c);
        assert_eq!(request_header(&s), (KIND_CALL, 5));
        assert_eq!(decode_request(&s), Ok(Request::Call(c)));
    }

    #[test]
    fn every_reserved_byte_is_checked() {
        let batch = encode_batch(1, &BatchDescriptor { first: 0, count: 1 });
        let call =
            encode_call(1, &CallDescriptor { opcode: 1, arg_off: 0, arg_len: 0, res_off: 0, res_cap: 0 });
        for i in (1..8).chain(24..60) {
            let mut s = batch;
            s[i] = 0x80;
            assert_eq!(decode_request(&s), Err(RejectReason::ReservedBytes), "batch byte {i}");
        }
        for i in (1..8).chain(18..20).chain(36..60) {
            let mut s = call;
            s[i] = 1;
            assert_eq!(decode_request(&s), Err(RejectReason::ReservedBytes), "call byte {i}");
        }
    }

    #[test]
    fn the_ring_stamp_is_not_part_of_a_slot() {
        let b = BatchDescriptor { first: 8, count: 2 };
        let mut s = encode_batch(3, &b);
        assert!(s[60..].iter().all(|&x| x == 0), "left for the ring");
        s[60..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_request(&s), Ok(Request::Batch(b)));
        let c = Completion { cookie: 1, kind: KIND_BATCH, status: 0, reject: 0, result_len: 2 };
        let mut e = c.encode();
        assert!(e[60..].iter().all(|&x| x == 0), "left for the ring");
        e[60..].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(Completion::decode(&e), c);
    }

    #[test]
    fn unknown_kinds_are_refused() {
        // 1 was the per-packet ESP slot of layout version 1: gone.
        for k in [0u8, 1, 4, 0x7f, 0xff] {
            let mut s = [0u8; REQUEST_SLOT];
            s[0] = k;
            assert_eq!(decode_request(&s), Err(RejectReason::UnknownSlotKind));
        }
    }

    #[test]
    fn completions_and_statuses_round_trip() {
        let c = Completion { cookie: u64::MAX, kind: KIND_CALL, status: 1, reject: 4, result_len: 1234 };
        assert_eq!(Completion::decode(&c.encode()), c);
        let e = encode_status(EspStatus::OutOfBounds, Some(RejectReason::OutOfBounds));
        assert_eq!(decode_status(e), (EspStatus::OutOfBounds, Some(RejectReason::OutOfBounds)));
        assert_eq!(decode_status(encode_status(EspStatus::Ok, None)), (EspStatus::Ok, None));
        assert_eq!(decode_status([0xff, 0xff]), (EspStatus::NotProcessed, None));
    }
}
