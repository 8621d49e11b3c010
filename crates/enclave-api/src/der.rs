//! A minimal DER reader: just enough for SubjectPublicKeyInfo, RFC 7427 AlgorithmIdentifiers
//! and ECDSA-Sig-Value. Every read is bounds-checked; nothing here can panic on any input.

/// DER tags this crate reads.
pub mod tag {
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const NULL: u8 = 0x05;
    pub const OID: u8 = 0x06;
    pub const SEQUENCE: u8 = 0x30;
    /// `[0]` constructed, context-specific.
    pub const CTX0: u8 = 0xa0;
    /// `[1]` constructed.
    pub const CTX1: u8 = 0xa1;
    /// `[2]` constructed.
    pub const CTX2: u8 = 0xa2;
}

/// A cursor over DER bytes.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next tag without consuming it.
    pub fn peek_tag(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// Reads one TLV with the given tag; returns its contents. Only definite, minimal lengths.
    pub fn read(&mut self, want: u8) -> Option<&'a [u8]> {
        let (&t, rest) = self.rest.split_first()?;
        if t != want {
            return None;
        }
        let (&l0, mut rest) = rest.split_first()?;
        let len = if l0 < 0x80 {
            usize::from(l0)
        } else {
            let n = usize::from(l0 & 0x7f);
            if n == 0 || n > 3 {
                return None;
            }
            let (lb, r) = rest.split_at_checked(n)?;
            rest = r;
            let len = lb.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            // DER: the long form only when needed, no leading zero octets.
            if len < 0x80 || lb.first() == Some(&0) {
                return None;
            }
            len
        };
        let (body, r) = rest.split_at_checked(len)?;
        self.rest = r;
        Some(body)
    }

    /// Reads a TLV and returns a reader over its contents.
    pub fn nested(&mut self, want: u8) -> Option<Reader<'a>> {
        self.read(want).map(Reader::new)
    }
}

/// Reads an unsigned INTEGER into `out` right-aligned (big-endian, `out.len()` bytes).
pub fn read_uint_fixed(r: &mut Reader<'_>, out: &mut [u8]) -> Option<()> {
    let v = r.read(tag::INTEGER)?;
    let (&first, _) = v.split_first()?;
    if first & 0x80 != 0 {
        return None; // negative
    }
    let v = if first == 0 {
        let stripped = v.get(1..)?;
        // Minimal encoding: a leading zero only before a byte with the top bit set.
        if stripped.first().is_some_and(|b| b & 0x80 == 0) {
            return None;
        }
        stripped
    } else {
        v
    };
    let pad = out.len().checked_sub(v.len())?;
    let (zeros, tail) = out.split_at_mut(pad);
    zeros.fill(0);
    tail.copy_from_slice(v);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_sequence_and_rejects_overruns() {
        let der = [0x30, 0x05, 0x02, 0x01, 0x05, 0x05, 0x00, 0xff];
        let mut r = Reader::new(&der);
        let mut seq = r.nested(tag::SEQUENCE).unwrap_or_else(|| Reader::new(&[]));
        assert_eq!(seq.read(tag::INTEGER), Some(&[5u8][..]));
        assert_eq!(seq.read(tag::NULL), Some(&[][..]));
        assert!(seq.is_empty());
        assert!(!r.is_empty(), "the trailing byte is outside the sequence");
        assert!(Reader::new(&[0x30, 0x05, 0x00]).clone().read(tag::SEQUENCE).is_none());
        assert!(Reader::new(&[0x30, 0x81, 0x05]).read(tag::SEQUENCE).is_none());
    }

    #[test]
    fn fixed_uint_rejects_negative_and_non_minimal() {
        let mut out = [0u8; 4];
        assert!(read_uint_fixed(&mut Reader::new(&[0x02, 0x02, 0x00, 0x80]), &mut out).is_some());
        assert_eq!(out, [0, 0, 0, 0x80]);
        assert!(read_uint_fixed(&mut Reader::new(&[0x02, 0x01, 0x80]), &mut out).is_none());
        assert!(read_uint_fixed(&mut Reader::new(&[0x02, 0x02, 0x00, 0x01]), &mut out).is_none());
        assert!(read_uint_fixed(&mut Reader::new(&[0x02, 0x05, 1, 2, 3, 4, 5]), &mut out).is_none());
    }
}
