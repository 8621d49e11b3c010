#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cloister_wire::ike::fuzzing::ike_message(data));
