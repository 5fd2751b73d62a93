//! The forwarding loop behind `nfkit fwd`: two ports, both directions,
//! every packet touched (its first byte read, so the data is pulled into
//! the cache as an NF would), and every packet the receiving side cannot
//! take counted as dropped: on each direction
//! `received = forwarded + dropped`.
//!
//! This is the queue-model loop ([`QueueLoop`]) with a pass-through
//! handler: each received batch moves whole to the other port. Queues: RX
//! queue `q` of one port feeds TX queue `q % tx_queues` of the other; one
//! thread polls every queue in turn.

use crate::idle::{Idle, IdleOptions, IdleTimes};
use crate::queue::{Outputs, QueueHandler, QueueLoop};
use crate::{Batch, Port, PortError, QueueStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to do to each packet on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Touch {
    /// Read the first byte (the default: real traffic passes unchanged).
    #[default]
    Read,
    /// Increment byte 1 of the destination MAC, as ixy-fwd does (breaks
    /// real traffic; for benchmarks).
    Write,
    /// Leave packets alone.
    None,
}

#[derive(Debug, Clone)]
pub struct FwdOptions {
    pub touch: Touch,
    /// How often the stats callback runs.
    pub stats_interval: Duration,
    /// Stop once both ports say they will receive nothing more (finite
    /// sources such as a capture replay).
    pub stop_when_done: bool,
    /// Hybrid polling (the default) or pure polling ([`IdleOptions::polling`]).
    pub idle: IdleOptions,
}

impl Default for FwdOptions {
    fn default() -> Self {
        FwdOptions {
            touch: Touch::Read,
            stats_interval: Duration::from_secs(1),
            stop_when_done: true,
            idle: IdleOptions::default(),
        }
    }
}

/// Counters of one direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DirStats {
    pub received: u64,
    pub forwarded: u64,
    /// Refused by the sending port (TX ring full) and freed; the port
    /// counts them in its `tx_dropped` too.
    pub dropped: u64,
    pub bytes: u64,
}

/// What the loop did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FwdReport {
    /// `dirs[0]`: port 0 to port 1; `dirs[1]`: port 1 to port 0.
    pub dirs: [DirStats; 2],
    /// Each port's own counters.
    pub ports: [QueueStats; 2],
    pub elapsed: Duration,
    /// The loop's time busy, polling idle and asleep.
    pub idle: IdleTimes,
}

/// Polls between checks of the clock, the stop flag and port errors
/// (cheap enough to keep out of every iteration).
const CHECK_EVERY: u32 = 256;

/// Forward between `ports[0]` and `ports[1]` until `stop` is set (or both
/// sources are done, see [`FwdOptions::stop_when_done`]), calling
/// `on_stats` every `stats_interval`. Returns the final counters, or the
/// first error a port reported on its data path.
pub fn fwd(
    ports: [&mut dyn Port; 2],
    opts: &FwdOptions,
    stop: &AtomicBool,
    mut on_stats: impl FnMut(&FwdReport),
) -> Result<FwdReport, PortError> {
    let mut ports = ports;
    let mut lp = QueueLoop::new(2);
    let mut pass = PassThrough {
        touch: opts.touch,
        bytes: [0; 2],
    };
    let mut report = FwdReport::default();
    let start = Instant::now();
    let mut last_stats = start;
    let mut polls = 0u32;
    let mut idle = Idle::new(opts.idle);
    loop {
        let moved = lp.poll(&mut ports, &mut pass);
        if idle.round(moved > 0) {
            // Idle long enough: arm, re-check both directions, sleep until
            // a port wakes the loop or the next stats line is due.
            idle.sleep(&mut ports, Some(last_stats + opts.stats_interval), |ps| {
                lp.poll(ps, &mut pass) > 0
            });
            // Look at the clock, the stop flag and errors now.
            polls = CHECK_EVERY - 1;
        }
        polls += 1;
        if polls < CHECK_EVERY {
            continue;
        }
        polls = 0;
        for p in ports.iter_mut() {
            if let Some(e) = p.take_error() {
                return Err(e);
            }
        }
        let done = opts.stop_when_done && ports.iter().all(|p| p.rx_done());
        let now = Instant::now();
        if now - last_stats >= opts.stats_interval {
            last_stats = now;
            fill(&mut report, &lp, &pass, &ports, start, &idle);
            on_stats(&report);
        }
        if done || stop.load(Ordering::Relaxed) {
            break;
        }
    }
    for p in ports.iter_mut() {
        p.flush()?;
    }
    fill(&mut report, &lp, &pass, &ports, start, &idle);
    on_stats(&report);
    Ok(report)
}

fn fill(
    r: &mut FwdReport,
    lp: &QueueLoop,
    pass: &PassThrough,
    ports: &[&mut dyn Port; 2],
    start: Instant,
    idle: &Idle,
) {
    let s = lp.stats();
    for (d, dir) in r.dirs.iter_mut().enumerate() {
        *dir = DirStats {
            received: s.received[d],
            forwarded: s.sent[1 - d],
            dropped: s.dropped[1 - d],
            bytes: pass.bytes[d],
        };
    }
    r.ports = [ports[0].stats(), ports[1].stats()];
    r.elapsed = start.elapsed();
    r.idle = idle.times(r.elapsed);
}

/// The forwarder's handler: touch each packet, count its bytes, and move
/// the batch to the other port.
struct PassThrough {
    touch: Touch,
    /// Bytes received per input.
    bytes: [u64; 2],
}

impl QueueHandler for PassThrough {
    #[inline(always)]
    fn handle(&mut self, input: usize, rx: &mut Batch, out: &mut Outputs) {
        let mut bytes = 0;
        for p in rx.iter_mut() {
            bytes += p.len() as u64;
            touch_packet(p, self.touch);
        }
        self.bytes[input & 1] += bytes;
        out.send_batch(1 - (input & 1), rx);
    }
}

#[inline(always)]
fn touch_packet(p: &mut nfkit_hw::PktBuf, touch: Touch) {
    match touch {
        Touch::Read => {
            std::hint::black_box(p.data().first().copied());
        }
        Touch::Write => {
            if let Some(x) = p.data_mut().get_mut(1) {
                *x = x.wrapping_add(1);
            }
        }
        Touch::None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{open, OpenOptions};

    #[test]
    fn null_source_to_sink_adds_up() {
        let o = OpenOptions::default();
        let mut src = open(&"null:size=60".parse().unwrap(), &o).unwrap();
        let mut sink = open(&"null:".parse().unwrap(), &o).unwrap();
        let stop = AtomicBool::new(false);
        let mut calls = 0;
        let opts = FwdOptions {
            stats_interval: Duration::ZERO,
            ..FwdOptions::default()
        };
        let r = fwd([&mut *src, &mut *sink], &opts, &stop, |r| {
            calls += 1;
            if r.dirs[0].received > 10_000 {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
        assert!(calls >= 2);
        let d = r.dirs[0];
        assert!(d.received > 10_000);
        assert_eq!(d.received, d.forwarded + d.dropped);
        assert_eq!(r.ports[1].tx_packets, d.forwarded);
        assert_eq!(r.dirs[1], DirStats::default());
    }

    /// A sink that takes every other frame and refuses the rest (a full
    /// ring); its own counters show the refusals as TX drops.
    struct HalfSink {
        inner: Box<dyn Port>,
        dropped: u64,
    }

    impl Port for HalfSink {
        fn name(&self) -> &str {
            "half"
        }
        fn rx_batch(&mut self, _q: usize, _b: &mut Batch) -> usize {
            0
        }
        fn tx_batch(&mut self, q: usize, batch: &mut Batch) -> usize {
            let take = batch.len().div_ceil(2);
            let mut first = Batch::new();
            for p in batch.drain_front(take) {
                let _ = first.push(p);
            }
            self.inner.tx_batch(q, &mut first)
        }
        fn tx_refused(&mut self, _q: usize, n: u64) {
            self.dropped += n;
        }
        fn queue_stats(&self, q: usize) -> QueueStats {
            let mut s = self.inner.queue_stats(q);
            s.tx_dropped += self.dropped;
            s
        }
        fn mac(&self) -> [u8; 6] {
            [0; 6]
        }
        fn pool(&self) -> &crate::Mempool {
            self.inner.pool()
        }
    }

    #[test]
    fn frames_a_port_refuses_are_drops_in_the_totals_and_its_counters() {
        let o = OpenOptions::default();
        let mut src = open(&"null:size=60".parse().unwrap(), &o).unwrap();
        let mut sink = HalfSink {
            inner: open(&"null:".parse().unwrap(), &o).unwrap(),
            dropped: 0,
        };
        let stop = AtomicBool::new(false);
        let opts = FwdOptions {
            stats_interval: Duration::ZERO,
            ..FwdOptions::default()
        };
        let r = fwd([&mut *src, &mut sink], &opts, &stop, |r| {
            if r.dirs[0].received > 5_000 {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
        let d = r.dirs[0];
        assert!(d.dropped > 0, "{d:?}");
        assert_eq!(d.received, d.forwarded + d.dropped);
        assert_eq!(r.ports[1].tx_packets, d.forwarded);
        assert_eq!(r.ports[1].tx_dropped, d.dropped, "the port's own counter");
    }
}
