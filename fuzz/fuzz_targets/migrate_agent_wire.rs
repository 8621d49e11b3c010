#![no_main]
//! The HSM agent's pipe protocol: arbitrary bytes as frames, requests and responses. A
//! request that decodes encodes to bytes that decode to the same request.
use cloister_migrate::agent::wire::{decode_response, read_frame, Request};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(request) = Request::decode(data) {
        let again = request.encode().expect("a decoded request encodes");
        let third = Request::decode(&again).expect("an encoded request decodes").encode().expect("encodes");
        assert_eq!(again.as_slice(), third.as_slice(), "encoding is stable");
    }
    for fields in 0..4 {
        let _ = decode_response(data, fields);
    }
    let mut stream = data;
    for _ in 0..8 {
        match read_frame(&mut stream) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});
