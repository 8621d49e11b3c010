//! Field ranges and big-endian accessors shared by the packet views.
//!
//! The accessors index with ranges that the views' `check_len` has already proved in bounds;
//! each range is a constant of the right width, so `copy_from_slice` cannot see a length
//! mismatch.

use core::ops::{Range, RangeFrom};

/// A fixed field: its byte range within the header.
pub(crate) type Field = Range<usize>;
/// The rest of a packet after a fixed offset.
pub(crate) type Rest = RangeFrom<usize>;

/// Reads a big-endian `u16` from a two-byte field.
pub(crate) fn read_u16(data: &[u8], field: Field) -> u16 {
    let mut word = [0; 2];
    word.copy_from_slice(&data[field]);
    u16::from_be_bytes(word)
}

/// Reads a big-endian `u32` from a four-byte field.
pub(crate) fn read_u32(data: &[u8], field: Field) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&data[field]);
    u32::from_be_bytes(word)
}

/// Writes a big-endian `u16` into a two-byte field.
pub(crate) fn write_u16(data: &mut [u8], field: Field, value: u16) {
    data[field].copy_from_slice(&value.to_be_bytes());
}

/// Writes a big-endian `u32` into a four-byte field.
pub(crate) fn write_u32(data: &mut [u8], field: Field, value: u32) {
    data[field].copy_from_slice(&value.to_be_bytes());
}

/// Fails with `BufferTooSmall` when an emit target is shorter than `need`.
pub(crate) fn ensure_room(what: &'static str, have: usize, need: usize) -> crate::Result<()> {
    if have < need {
        return Err(crate::Error::BufferTooSmall { what, need, have });
    }
    Ok(())
}
