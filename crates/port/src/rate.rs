//! The one rate printer of every command: per-second rate lines in the
//! MoonGen/ixy style:
//!
//! `[Device: sim:0] TX: 14.88 Mpps, 7619 Mbit/s (10000 Mbit/s with framing)`
//!
//! Mbit/s counts the frame with its 4-byte CRC (our byte counters exclude
//! it); "with framing" adds the 20 bytes of preamble, start delimiter and
//! inter-frame gap that every frame costs on the wire, so 64-byte frames
//! at 10 GbE line rate read 10000.

use crate::{Port, QueueStats};
use std::time::{Duration, Instant};

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

/// Prints RX and TX lines for a set of named counters once a second:
/// [`RateLines::due`] says when, [`RateLines::print`] prints the change
/// since the last print.
pub struct RateLines {
    names: Vec<String>,
    last: Vec<QueueStats>,
    at: Instant,
}

impl RateLines {
    /// Start from `now`, the counters of the devices named `names`.
    pub fn new(names: Vec<String>, now: Vec<QueueStats>) -> RateLines {
        RateLines {
            names,
            last: now,
            at: Instant::now(),
        }
    }

    /// Start from the counters of `ports`.
    pub fn of_ports(ports: &[&mut dyn Port]) -> RateLines {
        RateLines::new(
            ports.iter().map(|p| p.name().to_string()).collect(),
            ports.iter().map(|p| p.stats()).collect(),
        )
    }

    /// A second has passed since the last print.
    pub fn due(&self) -> bool {
        self.at.elapsed() >= Duration::from_secs(1)
    }

    /// Time since the last print (or the start).
    pub fn since_print(&self) -> Duration {
        self.at.elapsed()
    }

    /// The `[RX, TX]` lines of each device for counters `now` (same
    /// order as the names); remembers `now`.
    pub fn lines(&mut self, now: Vec<QueueStats>) -> Vec<[String; 2]> {
        let over = self.at.elapsed();
        let out = self
            .names
            .iter()
            .zip(&self.last)
            .zip(&now)
            .map(|((name, last), now)| diff_lines(name, last, now, over))
            .collect();
        self.last = now;
        self.at = Instant::now();
        out
    }

    /// Print the RX and TX lines for counters `now`.
    pub fn print(&mut self, now: Vec<QueueStats>) {
        for [rx, tx] in self.lines(now) {
            println!("{rx}\n{tx}");
        }
    }
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
