//! Per-second rate lines in the MoonGen/ixy style:
//!
//! `[Device: sim:0] TX: 14.88 Mpps, 7619 Mbit/s (10000 Mbit/s with framing)`
//!
//! Mbit/s counts the frame with its 4-byte CRC (our byte counters exclude
//! it); "with framing" adds the 20 bytes of preamble, start delimiter and
//! inter-frame gap that every frame costs on the wire, so 64-byte frames
//! at 10 GbE line rate read 10000.

use nfkit_port::QueueStats;
use std::time::Duration;

/// Bytes of CRC not included in byte counters.
pub const CRC: u64 = 4;
/// Preamble (7) + start delimiter (1) + inter-frame gap (12).
pub const FRAMING: u64 = 20;

/// A rate over an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub mpps: f64,
    pub mbit: f64,
    pub mbit_framed: f64,
}

impl Rate {
    pub fn new(packets: u64, bytes: u64, over: Duration) -> Rate {
        let secs = over.as_secs_f64().max(1e-9);
        let l2 = (bytes + packets * CRC) as f64 * 8.0;
        let wire = l2 + (packets * FRAMING) as f64 * 8.0;
        Rate {
            mpps: packets as f64 / secs / 1e6,
            mbit: l2 / secs / 1e6,
            mbit_framed: wire / secs / 1e6,
        }
    }
}

/// One line for one direction of one device.
pub fn line(device: &str, dir: &str, r: Rate) -> String {
    format!(
        "[Device: {device}] {dir}: {:.2} Mpps, {:.0} Mbit/s ({:.0} Mbit/s with framing)",
        r.mpps, r.mbit, r.mbit_framed
    )
}

/// RX and TX lines for the change between two snapshots of a port.
pub fn diff_lines(device: &str, old: &QueueStats, new: &QueueStats, over: Duration) -> [String; 2] {
    let rx = Rate::new(
        new.rx_packets - old.rx_packets,
        new.rx_bytes - old.rx_bytes,
        over,
    );
    let tx = Rate::new(
        new.tx_packets - old.tx_packets,
        new.tx_bytes - old.tx_bytes,
        over,
    );
    [line(device, "RX", rx), line(device, "TX", tx)]
}

/// Counters as a testpmd-style block.
pub fn summary(device: &str, s: &QueueStats) -> String {
    format!(
        "######## statistics for {device} ########\n\
         RX-packets: {} RX-dropped: {} RX-errors: {} RX-bytes: {}\n\
         TX-packets: {} TX-dropped: {} TX-errors: {} TX-bytes: {}",
        s.rx_packets,
        s.rx_dropped,
        s.rx_errors,
        s.rx_bytes,
        s.tx_packets,
        s.tx_dropped,
        s.tx_errors,
        s.tx_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rate_64_byte_frames_read_ten_gigabit_with_framing() {
        // 14.88 Mpps of 60-byte frames (64 with CRC) for one second
        let r = Rate::new(14_880_952, 14_880_952 * 60, Duration::from_secs(1));
        assert_eq!(
            line("sim:0", "TX", r),
            "[Device: sim:0] TX: 14.88 Mpps, 7619 Mbit/s (10000 Mbit/s with framing)"
        );
    }
}
