//! The tester: nfkit's own packet generator and receiver
//! ([`nfkit_lab::pktgen`]: sequence numbers and send timestamps in every
//! frame) on the tester's ends of the DUT's two ports. One trial sends
//! into the DUT's input port at a paced rate (or a burst as fast as the
//! tester can), receives on the other port, then waits for the frames
//! still in flight (until none came for [`QUIET`], at most [`SETTLE`]).

use anyhow::Result;
use hdrhistogram::Histogram;
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool, PoolCache};
use nfkit_ixgbe_model::Wire;
use nfkit_lab::pktgen::{GenConfig, Generator, RateLimit, Receiver};
use nfkit_port::Port;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A trial ends once no frame arrived for this long after sending...
pub const QUIET: Duration = Duration::from_millis(50);
/// ...or this long after sending, whichever comes first (RFC 2544 §23
/// waits 2 s; frames later than this are lost here).
pub const SETTLE: Duration = Duration::from_millis(500);
/// Most frames made per loop.
const BURST: usize = 32;

enum Ends {
    Ports {
        ports: [Box<dyn Port>; 2],
        caches: [PoolCache; 2],
    },
    Wires {
        wires: [Wire; 2],
        cache: PoolCache,
        _pool: Mempool,
        _dma: Arc<SimDma>,
    },
}

/// The tester's ends of the DUT's ports.
pub struct Tester {
    ends: Ends,
    /// The time base of every trial's stamps: a frame stamped before
    /// the current trial began is a late one of an earlier trial, and
    /// is not counted.
    epoch: Instant,
}

/// What one trial asks for.
#[derive(Debug, Clone)]
pub struct Offer {
    pub gen: GenConfig,
    /// Packets per second (`None`: as fast as the tester can).
    pub pps: Option<f64>,
    /// How long to send...
    pub duration: Duration,
    /// ...or how many frames (back-to-back bursts).
    pub count: Option<u64>,
    /// The DUT port the tester sends into; it receives on the other.
    pub input: usize,
}

/// What one trial saw.
#[derive(Debug)]
pub struct Seen {
    pub sent: u64,
    /// Frames the tester's own port refused (counted as lost: the DUT
    /// did not take them).
    pub refused: u64,
    pub received: u64,
    pub reordered: u64,
    /// Frames of earlier trials that arrived during this one (ignored).
    pub late: u64,
    /// The sending time.
    pub sending: Duration,
    pub latency_ns: Histogram<u64>,
}

impl Tester {
    pub fn ports(ports: [Box<dyn Port>; 2]) -> Tester {
        let caches = [ports[0].pool().cache(256), ports[1].pool().cache(256)];
        Tester {
            ends: Ends::Ports { ports, caches },
            epoch: Instant::now(),
        }
    }

    pub fn wires(wires: [Wire; 2]) -> Result<Tester> {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "rfc2544-tester", 4096, 2048)?;
        let cache = pool.cache(256);
        Ok(Tester {
            ends: Ends::Wires {
                wires,
                cache,
                _pool: pool,
                _dma: dma,
            },
            epoch: Instant::now(),
        })
    }

    /// Run one trial (`stop` cuts the sending short).
    pub fn trial(&mut self, offer: &Offer, stop: &AtomicBool) -> Seen {
        let mut gen_cfg = offer.gen.clone();
        gen_cfg.rate = offer.pps.map(RateLimit::Pps);
        let base = self.epoch.elapsed().as_nanos() as u64;
        gen_cfg.stamp_offset_ns = base;
        let mut late = 0u64;
        let mut g = Generator::new(gen_cfg);
        let mut rx = Receiver::default();
        let (input, output) = (offer.input.min(1), 1 - offer.input.min(1));
        let mut batch = Batch::new();
        let mut rxb = Batch::new();
        let mut refused = 0u64;
        let limit = offer.count.unwrap_or(u64::MAX);
        let start = Instant::now();
        let mut sending_for = None;
        let mut last_rx = start;
        loop {
            let el = start.elapsed();
            let sending = sending_for.is_none()
                && el < offer.duration
                && g.sent() < limit
                && !stop.load(Ordering::Relaxed);
            if sending {
                let room = (limit - g.sent()).min(BURST as u64) as usize;
                match &mut self.ends {
                    Ends::Ports { ports, caches } => {
                        g.fill(&mut batch, &mut caches[input], el, room);
                        if !batch.is_empty() {
                            ports[input].tx_batch(0, &mut batch);
                        }
                    }
                    Ends::Wires { wires, cache, .. } => {
                        g.fill(&mut batch, cache, el, room);
                        for p in batch.drain() {
                            if !wires[input].inject(p.data()) {
                                refused += 1;
                            }
                        }
                    }
                }
                refused += batch.len() as u64;
                batch.clear();
            } else if sending_for.is_none() {
                sending_for = Some(el);
            }
            let before = rx.received;
            match &mut self.ends {
                Ends::Ports { ports, .. } => {
                    ports[output].rx_batch(0, &mut rxb);
                    let now = base + start.elapsed().as_nanos() as u64;
                    for p in rxb.drain() {
                        observe(&mut rx, &mut late, base, p.data(), now);
                    }
                    // whatever comes back out of the input port is dropped
                    ports[input].rx_batch(0, &mut rxb);
                    rxb.clear();
                }
                Ends::Wires { wires, .. } => {
                    let now = base + start.elapsed().as_nanos() as u64;
                    wires[output].drain_transmitted(|f| observe(&mut rx, &mut late, base, f, now));
                    wires[input].drain_transmitted(|_| {});
                }
            }
            if rx.received != before {
                last_rx = Instant::now();
            }
            if let Some(s) = sending_for {
                let now = start.elapsed();
                if (last_rx.elapsed() >= QUIET && now >= s + QUIET) || now >= s + SETTLE {
                    break;
                }
            }
        }
        Seen {
            sent: g.sent(),
            refused,
            received: rx.received,
            reordered: rx.reordered,
            late,
            sending: sending_for.unwrap_or_default(),
            latency_ns: rx.latency_ns,
        }
    }
}

/// Count a received frame unless it was sent before this trial began.
fn observe(rx: &mut Receiver, late: &mut u64, base: u64, frame: &[u8], now: u64) {
    match nfkit_lab::pktgen::stamp(frame) {
        Some(s) if s.sent_ns < base => *late += 1,
        _ => rx.observe(frame, now),
    }
}
