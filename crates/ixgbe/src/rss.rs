//! Receive-side scaling (§7.1.2.8): spread received flows over the RX
//! queues by a Toeplitz hash of their addresses and ports.

use crate::regs::{self, Regs};
use nfkit_hw::Bar;

/// RSS reaches at most 16 queues: RETA entries are 4 bits (§7.1.2.8, §8.2.3.7.15).
/// Queues above 15 can still be opened, but RSS sends them nothing.
pub const RSS_MAX_QUEUES: usize = 16;

/// A fixed 40-byte hash key. Any key works; a fixed one makes queue
/// choice reproducible across runs (tests rely on it). This is the
/// widely published symmetric-friendly pattern 0x6d5a repeated.
const KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Program RSSRK, RETA and MRQC for `queues` receive queues.
pub(crate) fn configure<B: Bar>(r: &Regs<B>, queues: usize) {
    let spread = queues.clamp(1, RSS_MAX_QUEUES);
    for (i, chunk) in KEY.chunks_exact(4).enumerate() {
        r.write(
            &regs::RSSRK,
            i,
            u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
        );
    }
    // 128 entries, four per register, byte-wide with the queue in bits 3:0.
    for reg in 0..regs::RETA.count() {
        let mut value = 0u32;
        for byte in 0..4 {
            let entry = reg * 4 + byte;
            value |= ((entry % spread) as u32) << (8 * byte);
        }
        r.write(&regs::RETA, reg, value);
    }
    r.write(
        &regs::MRQC,
        0,
        regs::mrqc::MRQE_RSS
            | regs::mrqc::RSS_FIELD_IPV4
            | regs::mrqc::RSS_FIELD_IPV4_TCP
            | regs::mrqc::RSS_FIELD_IPV4_UDP
            | regs::mrqc::RSS_FIELD_IPV6
            | regs::mrqc::RSS_FIELD_IPV6_TCP
            | regs::mrqc::RSS_FIELD_IPV6_UDP,
    );
}
