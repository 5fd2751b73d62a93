//! The classic BPF checker and interpreter: any program the checker
//! accepts runs to a return on any packet, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfkit_pipeline::modules::cbpf::{Insn, Program};

fuzz_target!(|data: &[u8]| {
    let (prog, packet) = data.split_at(data.len().min(8 * (data.first().copied().unwrap_or(0) as usize % 64 + 1)));
    let insns: Vec<Insn> = prog
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1] & 0x01]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    if let Ok(p) = Program::new(insns) {
        let _ = p.run(packet);
    }
});
