#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cloister_ike::fuzzing::engine_input(data));
