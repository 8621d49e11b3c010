#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cloister_enclave::fuzzing::caller_input(data));
