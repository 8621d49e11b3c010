//! Appending big-endian fields to a `Vec<u8>`, with length fields filled in afterwards.
//!
//! Lengths are never stored in the typed payloads: the writer reserves the length field,
//! emits the body, then patches in how many bytes it took. A length that does not fit its
//! field is a `TooLong` error, never a silent truncation.

use crate::{Error, Result};

/// An append-only writer over the output vector.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    /// Where the bytes go; anything before the writer was made is left alone.
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    /// The length of the whole output so far, the origin of positions used by the patches.
    pub(crate) fn position(&self) -> usize {
        self.out.len()
    }

    /// Appends one octet.
    pub(crate) fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    /// Appends a big-endian 16-bit field.
    pub(crate) fn u16(&mut self, value: u16) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian 32-bit field.
    pub(crate) fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends a big-endian 64-bit field.
    pub(crate) fn u64(&mut self, value: u64) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    /// Appends raw bytes.
    pub(crate) fn bytes(&mut self, value: &[u8]) {
        self.out.extend_from_slice(value);
    }

    /// Reserves a 16-bit length field and returns its position for [`Self::patch_len16`].
    pub(crate) fn len16(&mut self) -> usize {
        let at = self.position();
        self.u16(0);
        at
    }

    /// Reserves a 32-bit length field and returns its position for [`Self::patch_len32`].
    pub(crate) fn len32(&mut self) -> usize {
        let at = self.position();
        self.u32(0);
        at
    }

    /// Writes into the 16-bit field at `at` the number of bytes emitted since `start`.
    pub(crate) fn patch_len16(&mut self, start: usize, at: usize, what: &'static str) -> Result<()> {
        let len = self.position().saturating_sub(start);
        let value = u16::try_from(len).map_err(|_| Error::TooLong { what, len })?;
        self.patch(at, &value.to_be_bytes(), what)
    }

    /// Writes into the 32-bit field at `at` the number of bytes emitted since `start`.
    pub(crate) fn patch_len32(&mut self, start: usize, at: usize, what: &'static str) -> Result<()> {
        let len = self.position().saturating_sub(start);
        let value = u32::try_from(len).map_err(|_| Error::TooLong { what, len })?;
        self.patch(at, &value.to_be_bytes(), what)
    }

    /// Overwrites already-emitted bytes at `at`.
    fn patch(&mut self, at: usize, value: &[u8], what: &'static str) -> Result<()> {
        let have = self.out.len();
        // The positions come from `len16`/`len32` on this same vector, so the range exists;
        // a wrong position is reported rather than allowed to panic.
        let field = at
            .checked_add(value.len())
            .and_then(|end| self.out.get_mut(at..end))
            .ok_or(Error::BufferTooSmall { what, need: at.saturating_add(value.len()), have })?;
        field.copy_from_slice(value);
        Ok(())
    }
}

/// Converts a count or size to the width of its wire field, or `TooLong` naming `what`.
pub(crate) fn fit<T: TryFrom<usize>>(len: usize, what: &'static str) -> Result<T> {
    T::try_from(len).map_err(|_| Error::TooLong { what, len })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn fields_are_written_big_endian() {
        let mut out = vec![0xff];
        let mut w = Writer::new(&mut out);
        w.u8(0x01);
        w.u16(0x0203);
        w.u32(0x0405_0607);
        w.u64(0x0809_0a0b_0c0d_0e0f);
        w.bytes(&hex!("1011"));
        assert_eq!(out, hex!("ff 01 0203 04050607 08090a0b0c0d0e0f 1011"));
    }

    #[test]
    fn length_fields_count_from_the_start_of_their_structure() -> Result<()> {
        let mut out = vec![0xee];
        let mut w = Writer::new(&mut out);
        let start = w.position();
        let at = w.len16();
        let at32 = w.len32();
        w.bytes(&hex!("aabb"));
        w.patch_len16(start, at, "outer")?;
        w.patch_len32(start, at32, "outer32")?;
        assert_eq!(out, hex!("ee 0008 00000008 aabb"));
        Ok(())
    }

    #[test]
    fn overlong_structure_is_too_long_not_truncated() {
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        let at = w.len16();
        w.bytes(&[0; 0x1_0000]);
        assert_eq!(w.patch_len16(0, at, "big"), Err(Error::TooLong { what: "big", len: 0x1_0002 }));
        assert_eq!(fit::<u8>(256, "count"), Err(Error::TooLong { what: "count", len: 256 }));
        assert_eq!(fit::<u8>(255, "count"), Ok(255));
    }
}
