#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cloister_esp::fuzzing::decap_input(data));
