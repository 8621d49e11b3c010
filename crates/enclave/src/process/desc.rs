//! Wire formats of ring slots, read and written as bytes at fixed offsets.
//!
//! Nothing here is cast from shared memory: the guest copies a slot out once
//! ([`super::ring::Consumer::read`]) and decodes that private copy, so a value cannot change
//! between its check and its use.
//!
//! Request slot (64 bytes, one cache line), little-endian:
//!
//! ```text
//!  0      kind u8          1 = ESP packet, 2 = call (one IKE step)
//!  1..8   reserved, zero
//!  8..16  cookie u64       opaque, echoed in the completion
//! 16..48  body             ESP: the 32-byte EspDescriptor encoding (api::esp)
//!                          call: opcode u16 | 0 u16 | arg_off u32 | arg_len u32
//!                                | res_off u32 | res_cap u32 | 0 x12
//! 48..64  reserved, zero
//! ```
//!
//! Completion slot (32 bytes), little-endian:
//!
//! ```text
//!  0..8   cookie u64       the request's
//!  8      kind u8          the request's (0 if its kind was unknown)
//!  9      status u8        ESP: EspStatus code; call: CallStatus code
//! 10      reject u8        0, or the RejectReason code if the transport refused it
//! 11      reserved, zero
//! 12..16  result_len u32   call: bytes written at res_off (result or encoded error)
//! 16..32  reserved, zero
//! ```

use super::layout::{COMPLETION_SLOT, REQUEST_SLOT};
use super::validate::RejectReason;
use crate::api::esp::{EspDescriptor, ESP_DESCRIPTOR_LEN};

/// Slot kind: one ESP packet.
pub const KIND_ESP: u8 = 1;
/// Slot kind: one call (an IKE step or a query), arguments in the call area.
pub const KIND_CALL: u8 = 2;

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

/// A decoded request slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// One ESP packet of a batch.
    Esp(EspDescriptor),
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

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Encodes an ESP request slot.
pub fn encode_esp(cookie: u64, d: &EspDescriptor) -> [u8; REQUEST_SLOT] {
    let mut s = [0u8; REQUEST_SLOT];
    s[0] = KIND_ESP;
    s[8..16].copy_from_slice(&cookie.to_le_bytes());
    s[16..16 + ESP_DESCRIPTOR_LEN].copy_from_slice(&d.encode());
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

/// Decodes a private copy of a request slot; reserved bytes must be zero.
pub fn decode_request(s: &[u8; REQUEST_SLOT]) -> Result<Request, RejectReason> {
    if !all_zero(&s[1..8]) || !all_zero(&s[48..64]) {
        return Err(RejectReason::ReservedBytes);
    }
    match s[0] {
        KIND_ESP => {
            let mut body = [0u8; ESP_DESCRIPTOR_LEN];
            body.copy_from_slice(&s[16..16 + ESP_DESCRIPTOR_LEN]);
            EspDescriptor::decode(&body).map(Request::Esp).map_err(|_| RejectReason::ReservedBytes)
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

/// Outcome of a call slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CallStatus {
    /// Done; the result region holds the encoded result.
    Ok = 0,
    /// The trusted core refused; the result region holds the encoded [`crate::Error`].
    Refused = 1,
    /// The transport refused the descriptor; see the completion's reject reason.
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
    /// [`crate::EspStatus`] or [`CallStatus`] code.
    pub status: u8,
    /// 0, or the [`RejectReason`] code.
    pub reject: u8,
    /// Bytes of result (calls).
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
    use crate::api::handle::EspSaHandle;

    #[test]
    fn esp_slot_round_trips() {
        let d = EspDescriptor::decrypt_forward(EspSaHandle(0x0501_0002), 14, 48, 1400, 77);
        let s = encode_esp(0xDEAD_BEEF, &d);
        assert_eq!(request_header(&s), (KIND_ESP, 0xDEAD_BEEF));
        assert_eq!(decode_request(&s), Ok(Request::Esp(d)));
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
        let esp = encode_esp(1, &EspDescriptor::encrypt(EspSaHandle(1), 0, 64, 1));
        let call =
            encode_call(1, &CallDescriptor { opcode: 1, arg_off: 0, arg_len: 0, res_off: 0, res_cap: 0 });
        let esp_reserved = (1..8).chain(17..20).chain(44..64);
        for i in esp_reserved {
            let mut s = esp;
            s[i] = 0x80;
            assert_eq!(decode_request(&s), Err(RejectReason::ReservedBytes), "esp byte {i}");
        }
        for i in (1..8).chain(18..20).chain(36..64) {
            let mut s = call;
            s[i] = 1;
            assert_eq!(decode_request(&s), Err(RejectReason::ReservedBytes), "call byte {i}");
        }
    }

    #[test]
    fn unknown_kinds_are_refused() {
        for k in [0u8, 3, 0x7f, 0xff] {
            let mut s = [0u8; REQUEST_SLOT];
            s[0] = k;
            assert_eq!(decode_request(&s), Err(RejectReason::UnknownSlotKind));
        }
    }

    #[test]
    fn completion_round_trips() {
        let c = Completion { cookie: u64::MAX, kind: KIND_CALL, status: 1, reject: 4, result_len: 1234 };
        assert_eq!(Completion::decode(&c.encode()), c);
    }
}
