//! Bounds-checked reading of big-endian fields from untrusted bytes.
//!
//! Every IKEv2 structure is read through a [`Reader`]. A structure whose length field says
//! `n` is read from a `sub(n)` reader, so it can neither run past its own end nor into its
//! neighbour's bytes, and `finish` rejects what it leaves unread: RFC 7296 §3.3 asks that
//! "the total Payload Length is consistent with the payload's internal lengths and counts",
//! and this is how every length in the codec is made consistent. Every method returns an
//! error naming the structure rather than panicking.

use crate::{Error, Result};

/// A cursor over a borrowed byte slice that hands out fields and length-limited sub-readers.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    /// The bytes not yet read.
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over all of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// How many bytes are left.
    pub(crate) fn left(&self) -> usize {
        self.rest.len()
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `len` bytes, or `Truncated` naming `what`.
    pub(crate) fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8]> {
        match self.rest.split_at_checked(len) {
            Some((head, tail)) => {
                self.rest = tail;
                Ok(head)
            }
            None => Err(Error::Truncated { what, need: len, have: self.rest.len() }),
        }
    }

    /// A reader over exactly the next `len` bytes; this reader skips past them.
    pub(crate) fn sub(&mut self, len: usize, what: &'static str) -> Result<Reader<'a>> {
        self.take(len, what).map(Reader::new)
    }

    /// All remaining bytes; the reader is empty afterwards.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.rest)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let have = self.left();
        // `take(N)` returns exactly N bytes, so the conversion cannot fail; map it anyway
        // rather than unwrap, to keep this path free of panics.
        self.take(N, what)?.try_into().map_err(|_| Error::Truncated { what, need: N, have })
    }

    /// One octet.
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        self.array::<1>(what).map(|[b]| b)
    }

    /// A big-endian 16-bit field.
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        self.array(what).map(u16::from_be_bytes)
    }

    /// A big-endian 32-bit field.
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_be_bytes)
    }

    /// A big-endian 64-bit field.
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_be_bytes)
    }

    /// Succeeds only if every byte was read: `TrailingBytes` naming `what` otherwise.
    pub(crate) fn finish(self, what: &'static str) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(Error::TrailingBytes { what, count: self.rest.len() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn fields_are_read_big_endian_in_order() {
        let bytes = hex!("01 0203 04050607 08090a0b0c0d0e0f");
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8("a"), Ok(0x01));
        assert_eq!(r.u16("b"), Ok(0x0203));
        assert_eq!(r.u32("c"), Ok(0x0405_0607));
        assert_eq!(r.u64("d"), Ok(0x0809_0a0b_0c0d_0e0f));
        assert!(r.is_empty());
        assert_eq!(r.finish("all"), Ok(()));
    }

    #[test]
    fn short_read_is_truncated_and_names_the_field() {
        let mut r = Reader::new(&hex!("0102 03"));
        assert_eq!(r.u16("first"), Ok(0x0102));
        assert_eq!(r.u16("second"), Err(Error::Truncated { what: "second", need: 2, have: 1 }));
        // A failed read consumes nothing.
        assert_eq!(r.left(), 1);
    }

    #[test]
    fn sub_reader_is_limited_to_its_length() -> Result<()> {
        let mut r = Reader::new(&hex!("aabbcc dd"));
        let mut sub = r.sub(3, "sub")?;
        assert_eq!(sub.u16("x"), Ok(0xaabb));
        assert!(matches!(sub.u16("y"), Err(Error::Truncated { .. })));
        assert_eq!(sub.finish("sub"), Err(Error::TrailingBytes { what: "sub", count: 1 }));
        assert_eq!(r.rest(), &hex!("dd"));
        assert!(r.is_empty());
        Ok(())
    }

    #[test]
    fn sub_longer_than_the_rest_is_truncated() {
        let mut r = Reader::new(&hex!("0102"));
        assert_eq!(r.sub(3, "body").map(|_| ()), Err(Error::Truncated { what: "body", need: 3, have: 2 }));
    }
}
