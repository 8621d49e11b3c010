//! Fuzzing entry points, compiled only under `cfg(fuzzing)` (cargo-fuzz sets it); the
//! targets in `fuzz/fuzz_targets/` are thin wrappers around these.

use super::{decode_chain, encode_chain, Message, PayloadType};

/// Decodes `data` as a datagram and, if that succeeds, checks that encoding reproduces it
/// byte for byte and decodes to the same message; then decodes `data[1..]` as a decrypted
/// inner chain whose first payload type is `data[0]`, with the same checks. Panics (the
/// fuzzer's signal) on any mismatch.
pub fn ike_message(data: &[u8]) {
    if let Ok(message) = Message::decode(data) {
        let mut out = Vec::new();
        if let Err(error) = message.encode(&mut out) {
            panic!("decoded message does not encode: {error}");
        }
        assert_eq!(out, data, "re-encoding is not byte-exact");
        assert_eq!(Message::decode(&out).as_ref(), Ok(&message), "decode is not stable");
    }
    if let Some((first, plaintext)) = data.split_first() {
        if let Ok(chain) = decode_chain(PayloadType(*first), plaintext) {
            let mut out = Vec::new();
            match encode_chain(&chain, &mut out) {
                Ok(ty) => assert_eq!(ty, super::payload::first_type(&chain)),
                Err(error) => panic!("decoded chain does not encode: {error}"),
            }
            assert_eq!(out, plaintext, "re-encoding the chain is not byte-exact");
        }
    }
}
