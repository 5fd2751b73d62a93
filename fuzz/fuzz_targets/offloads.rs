#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nfkit_fuzz_harness::offloads(data));
