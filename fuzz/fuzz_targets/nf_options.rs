#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nfkit_fuzz_harness::nf_options(data));
