//! The XDP program that steers frames to our sockets, assembled here as
//! eBPF instruction words so no compiler is needed at build time:
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)      ; ctx->rx_queue_index
//! r1 = map_fd                 ; the XSKMAP (64-bit immediate, map fd)
//! r3 = XDP_PASS               ; returned if no socket is on that queue
//! call bpf_redirect_map       ; helper 51
//! exit
//! ```
//!
//! Encoding (linux/bpf.h, Documentation/bpf/standardization/
//! instruction-set.rst): each instruction is 8 bytes, little-endian:
//! opcode, destination register (low nibble) and source register (high
//! nibble), a 16-bit offset, a 32-bit immediate. A 64-bit immediate load
//! takes two slots.

/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// `XDP_PASS` action.
const XDP_PASS: i32 = 2;
/// Helper id of `bpf_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// Source-register marker of a 64-bit immediate that is a map fd.
const BPF_PSEUDO_MAP_FD: u8 = 1;

// Opcodes.
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LD_IMM_DW: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
const ALU64_MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const JMP_CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

fn insn(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(op)
        | u64::from((src << 4) | (dst & 0xf)) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// The redirect program for the XSKMAP `map_fd`.
pub fn redirect_program(map_fd: i32) -> [u64; 6] {
    [
        insn(LDX_MEM_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        insn(LD_IMM_DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0), // upper half of the immediate
        insn(ALU64_MOV_K, 3, 0, 0, XDP_PASS),
        insn(JMP_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(JMP_EXIT, 0, 0, 0, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_reference_bytes() {
        let p = redirect_program(7);
        // r2 = *(u32 *)(r1 + 16): 61 12 10 00 00 00 00 00
        assert_eq!(p[0].to_le_bytes(), [0x61, 0x12, 0x10, 0, 0, 0, 0, 0]);
        // r1 = map fd 7: 18 11 00 00 07 00 00 00
        assert_eq!(p[1].to_le_bytes(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(p[3].to_le_bytes(), [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(p[4].to_le_bytes(), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(p[5].to_le_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }
}
