#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cloister_wire::fuzzing_views::packet_views(data));
