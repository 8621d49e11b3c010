#![no_main]
//! The platform process's launch channel: arbitrary bytes as the service's requests (the
//! platform parses them as hostile) and as the platform's replies. A request that decodes
//! encodes to bytes that decode to the same request.
use platform::wire::{decode_reply, decode_request, encode_request, op};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((id, request)) = decode_request(data) {
        let again = encode_request(id, &request);
        assert_eq!(decode_request(&again), Some((id, request)), "a decoded request round-trips");
    }
    for op in [None, Some(op::LAUNCH), Some(op::END)] {
        let _ = decode_reply(data, op);
    }
});
