//! Helpers shared by the payload unit tests: one payload in, one payload out.

use super::payload::{read_chain, write_chain, Chain, Payload, PayloadEntry, PayloadType};
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

/// Decodes `bytes` as an outer chain (where SK and SKF may appear) of exactly one payload
/// of type `ty`.
pub(crate) fn decode_one(ty: PayloadType, bytes: &[u8]) -> Result<Payload> {
    let mut r = Reader::new(bytes);
    let mut chain = read_chain(ty, &mut r, Chain::Outer)?;
    r.finish("test chain")?;
    match (chain.pop(), chain.is_empty()) {
        (Some(entry), true) => Ok(entry.payload),
        _ => Err(Error::BadValue { what: "test: not exactly one payload", value: 0 }),
    }
}

/// Encodes one payload with a zero flags octet.
pub(crate) fn encode_one(payload: Payload) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_chain(&[PayloadEntry::from(payload)], &mut Writer::new(&mut out), Chain::Outer)?;
    Ok(out)
}

/// Asserts that `bytes` decodes to `expected` and encodes back to `bytes` exactly, and that
/// every strict prefix of `bytes` is an error rather than a panic.
pub(crate) fn assert_round_trip(ty: PayloadType, bytes: &[u8], expected: &Payload) {
    assert_eq!(decode_one(ty, bytes).as_ref(), Ok(expected), "decode");
    assert_eq!(encode_one(expected.clone()).as_deref(), Ok(bytes), "encode");
    for len in 0..bytes.len() {
        assert!(decode_one(ty, &bytes[..len]).is_err(), "prefix of {len} bytes decoded");
    }
}

/// Asserts that `bytes` with one more octet inside the payload (length field adjusted) is
/// rejected with `TrailingBytes` or `BadLength`: the body must consume exactly its length.
pub(crate) fn assert_rejects_extra_octet(ty: PayloadType, bytes: &[u8]) {
    let mut longer = bytes.to_vec();
    longer.push(0);
    let len = u16::from_be_bytes([bytes[2], bytes[3]]) + 1;
    longer[2..4].copy_from_slice(&len.to_be_bytes());
    let result = decode_one(ty, &longer);
    assert!(
        matches!(result, Err(Error::TrailingBytes { .. } | Error::BadLength { .. } | Error::BadValue { .. })),
        "{result:?}"
    );
}
