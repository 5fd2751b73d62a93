//! The packet generator: UDP/IPv4 frames with sequence numbers and send
//! timestamps, at a controlled rate, over any [`Port`]; optionally
//! receiving its own traffic back to report loss, reordering and latency.
//!
//! Frame layout (sizes exclude the CRC; the minimum, 60, is the 64-byte
//! Ethernet minimum):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0  | 14 | Ethernet (IPv4) |
//! | 14 | 20 | IPv4 (UDP, checksum computed per size) |
//! | 34 | 8  | UDP (source port varies per flow, checksum 0) |
//! | 42 | 2  | magic `MAGIC` |
//! | 44 | 8  | sequence number, little-endian |
//! | 52 | 8  | send time in ns since the generator started, little-endian |
//! | 60 | .. | zero padding |

use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use nfkit_hw::{Batch, PoolCache};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

pub const MAGIC: u16 = 0x6e66; // "nf"
pub const MIN_FRAME: usize = 60;
pub const MAX_FRAME: usize = 1514;
const SEQ_OFF: usize = 44;
const TS_OFF: usize = 52;

/// Frame sizes to generate (without CRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    Fixed(usize),
    /// Uniformly random in `[min, max]`.
    Random(usize, usize),
    /// Simple IMIX: 64, 594 and 1518-byte frames (60, 590, 1514 without
    /// CRC) in the proportions 7:4:1, in a fixed repeating order.
    Imix,
}

/// Simple IMIX's cycle of frame sizes (without CRC): 7 x 60, 4 x 590,
/// 1 x 1514, interleaved.
pub const IMIX: [usize; 12] = [60, 590, 60, 60, 590, 60, 1514, 60, 590, 60, 590, 60];

impl FromStr for Sizes {
    type Err = anyhow::Error;
    /// `60`, `60-1514` or `imix`.
    fn from_str(s: &str) -> Result<Sizes> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(Sizes::Imix);
        }
        let parse = |v: &str| -> Result<usize> {
            let n: usize = v
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("`{v}` is not a frame size"))?;
            if !(MIN_FRAME..=MAX_FRAME).contains(&n) {
                bail!("frame size {n} is outside {MIN_FRAME}..={MAX_FRAME} (bytes without CRC)");
            }
            Ok(n)
        };
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    bail!("size range {a}-{b} is inverted");
                }
                Ok(Sizes::Random(a, b))
            }
            None => Ok(Sizes::Fixed(parse(s)?)),
        }
    }
}

/// A rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// Packets per second.
    Pps(f64),
    /// Mbit/s on the wire (with CRC and framing), like MoonGen's rates.
    WireMbit(f64),
}

/// Generator settings.
#[derive(Debug, Clone)]
pub struct GenConfig {
    pub sizes: Sizes,
    /// Flows (UDP source ports counted up from `src_port`, wrapping):
    /// 1 to 65,536.
    pub flows: u32,
    pub rate: Option<RateLimit>,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub seed: u64,
    /// Added to the send times stamped in frames, so that several runs
    /// can share one time base (and tell their frames apart).
    pub stamp_offset_ns: u64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            sizes: Sizes::Fixed(MIN_FRAME),
            flows: 1,
            rate: None,
            src_mac: [0x02, 0, 0, 0, 0, 0x10],
            dst_mac: [0x02, 0, 0, 0, 0, 0x20],
            src_ip: Ipv4Addr::new(198, 18, 0, 1),
            dst_ip: Ipv4Addr::new(198, 19, 0, 1),
            src_port: 1024,
            dst_port: 1234,
            seed: 1,
            stamp_offset_ns: 0,
        }
    }
}

/// Builds frames with sequence numbers and paces them.
#[derive(Debug)]
pub struct Generator {
    cfg: GenConfig,
    template: [u8; MAX_FRAME],
    seq: u64,
    rng: SmallRng,
    /// Work done, in the rate limit's unit (packets or wire bits).
    spent: f64,
}

impl Generator {
    pub fn new(cfg: GenConfig) -> Generator {
        let mut template = [0u8; MAX_FRAME];
        template[0..6].copy_from_slice(&cfg.dst_mac);
        template[6..12].copy_from_slice(&cfg.src_mac);
        template[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut template[14..34];
        ip[0] = 0x45;
        ip[8] = 64; // TTL
        ip[9] = 17; // UDP
        ip[12..16].copy_from_slice(&cfg.src_ip.octets());
        ip[16..20].copy_from_slice(&cfg.dst_ip.octets());
        template[36..38].copy_from_slice(&cfg.dst_port.to_be_bytes());
        template[42..44].copy_from_slice(&MAGIC.to_be_bytes());
        let rng = SmallRng::seed_from_u64(cfg.seed);
        Generator {
            cfg,
            template,
            seq: 0,
            rng,
            spent: 0.0,
        }
    }

    /// Packets generated so far (the next sequence number).
    pub fn sent(&self) -> u64 {
        self.seq
    }

    fn next_size(&mut self) -> usize {
        match self.cfg.sizes {
            Sizes::Fixed(n) => n,
            Sizes::Random(a, b) => self.rng.gen_range(a..=b),
            Sizes::Imix => IMIX[(self.seq % IMIX.len() as u64) as usize],
        }
    }

    /// Write frame number `seq` of length `len` into `out`.
    fn build(&mut self, out: &mut [u8], len: usize, now_ns: u64) {
        out.copy_from_slice(&self.template[..len]);
        let ip_len = (len - 14) as u16;
        out[16..18].copy_from_slice(&ip_len.to_be_bytes());
        let sum = ipv4_checksum(&out[14..34]);
        out[24..26].copy_from_slice(&sum.to_be_bytes());
        let flow = (self.seq % self.cfg.flows.max(1) as u64) as u16;
        out[34..36].copy_from_slice(&self.cfg.src_port.wrapping_add(flow).to_be_bytes());
        out[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        out[SEQ_OFF..SEQ_OFF + 8].copy_from_slice(&self.seq.to_le_bytes());
        out[TS_OFF..TS_OFF + 8].copy_from_slice(&now_ns.to_le_bytes());
        self.seq += 1;
    }

    /// How many packets the rate limit allows now, at most `max`.
    fn allowance(&self, elapsed: Duration, max: usize) -> usize {
        match self.cfg.rate {
            None => max,
            Some(RateLimit::Pps(pps)) => {
                let budget = pps * elapsed.as_secs_f64() - self.spent;
                (budget.max(0.0) as usize).min(max)
            }
            Some(RateLimit::WireMbit(mbit)) => {
                let budget = mbit * 1e6 * elapsed.as_secs_f64() - self.spent;
                let per = ((self.avg_size() + 24) * 8) as f64;
                ((budget / per).max(0.0) as usize).min(max)
            }
        }
    }

    fn avg_size(&self) -> usize {
        match self.cfg.sizes {
            Sizes::Fixed(n) => n,
            Sizes::Random(a, b) => (a + b) / 2,
            Sizes::Imix => IMIX.iter().sum::<usize>() / IMIX.len(),
        }
    }

    /// Fill `batch` with as many new frames as the rate allows at
    /// `elapsed` since start (and buffers allow); returns how many.
    pub fn fill(
        &mut self,
        batch: &mut Batch,
        cache: &mut PoolCache,
        elapsed: Duration,
        max: usize,
    ) -> usize {
        let n = self.allowance(elapsed, max.min(batch.room()));
        let now_ns = elapsed.as_nanos() as u64 + self.cfg.stamp_offset_ns;
        let mut made = 0;
        for _ in 0..n {
            let Some(mut buf) = cache.alloc() else { break };
            let len = self.next_size();
            if buf.set_len(len).is_err() {
                break;
            }
            self.build(buf.data_mut(), len, now_ns);
            match self.cfg.rate {
                Some(RateLimit::WireMbit(_)) => self.spent += ((len + 24) * 8) as f64,
                _ => self.spent += 1.0,
            }
            batch.push(buf);
            made += 1;
        }
        made
    }
}

/// RFC 1071 checksum of an IPv4 header whose checksum field is zero or
/// stale (bytes 10-11 are skipped).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum = 0u32;
    for (i, pair) in hdr.chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += word as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What a frame received back says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub seq: u64,
    pub sent_ns: u64,
}

/// Read the generator's stamp from a frame, if it is one of ours.
pub fn stamp(frame: &[u8]) -> Option<Stamp> {
    if frame.len() < MIN_FRAME
        || frame[42..44] != MAGIC.to_be_bytes()
        || frame[12..14] != [0x08, 0x00]
    {
        return None;
    }
    Some(Stamp {
        seq: u64::from_le_bytes(frame[SEQ_OFF..SEQ_OFF + 8].try_into().ok()?),
        sent_ns: u64::from_le_bytes(frame[TS_OFF..TS_OFF + 8].try_into().ok()?),
    })
}

/// Tracks frames received back: count, order and latency.
#[derive(Debug)]
pub struct Receiver {
    pub received: u64,
    pub foreign: u64,
    pub reordered: u64,
    next_seq: u64,
    pub latency_ns: Histogram<u64>,
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver {
            received: 0,
            foreign: 0,
            reordered: 0,
            next_seq: 0,
            latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }
}

impl Receiver {
    /// Account one received frame at `now_ns` (same time base as the
    /// generator).
    pub fn observe(&mut self, frame: &[u8], now_ns: u64) {
        let Some(s) = stamp(frame) else {
            self.foreign += 1;
            return;
        };
        self.received += 1;
        if s.seq < self.next_seq {
            self.reordered += 1;
        } else {
            self.next_seq = s.seq + 1;
        }
        let _ = self
            .latency_ns
            .record(now_ns.saturating_sub(s.sent_ns).max(1));
    }

    /// Loss given how many were sent.
    pub fn lost(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.received)
    }

    /// One summary line of latency percentiles.
    pub fn latency_line(&self) -> String {
        if self.latency_ns.is_empty() {
            return "latency: no samples".into();
        }
        let us = |v: u64| v as f64 / 1000.0;
        format!(
            "latency: min {:.1} us, median {:.1} us, p99 {:.1} us, max {:.1} us ({} samples)",
            us(self.latency_ns.min()),
            us(self.latency_ns.value_at_quantile(0.5)),
            us(self.latency_ns.value_at_quantile(0.99)),
            us(self.latency_ns.max()),
            self.latency_ns.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_hw::{sim::SimDma, Mempool};

    #[test]
    fn frames_are_valid_udp_with_stamps() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "g", 256, 2048).unwrap();
        let mut cache = pool.cache(32);
        let mut g = Generator::new(GenConfig {
            sizes: "60-1514".parse().unwrap(),
            flows: 4,
            ..GenConfig::default()
        });
        let mut batch = Batch::new();
        let n = g.fill(&mut batch, &mut cache, Duration::from_micros(5), 32);
        assert_eq!(n, 32);
        let mut rx = Receiver::default();
        for (i, p) in batch.iter().enumerate() {
            let parsed = etherparse::SlicedPacket::from_ethernet(p.data()).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = parsed.net else {
                panic!("not IPv4")
            };
            assert_eq!(ip.header().total_len() as usize, p.len() - 14);
            assert_eq!(
                ip.header().header_checksum(),
                ip.header().to_header().calc_header_checksum()
            );
            assert_eq!(stamp(p.data()).unwrap().seq, i as u64);
            rx.observe(p.data(), 10_000);
        }
        assert_eq!(rx.received, 32);
        assert_eq!(rx.lost(g.sent()), 0);
        assert_eq!(rx.latency_ns.max() / 1000, 5);
    }

    #[test]
    fn rate_limit_paces_packets() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "g", 256, 2048).unwrap();
        let mut cache = pool.cache(32);
        let mut g = Generator::new(GenConfig {
            rate: Some(RateLimit::Pps(1000.0)),
            ..GenConfig::default()
        });
        let mut batch = Batch::new();
        assert_eq!(
            g.fill(&mut batch, &mut cache, Duration::from_millis(10), 64),
            10
        );
        assert_eq!(
            g.fill(&mut batch, &mut cache, Duration::from_millis(10), 64),
            0
        );
        assert_eq!(
            g.fill(&mut batch, &mut cache, Duration::from_millis(20), 64),
            10
        );
    }

    #[test]
    fn size_specs_are_checked() {
        assert_eq!("64".parse::<Sizes>().unwrap(), Sizes::Fixed(64));
        assert!("59".parse::<Sizes>().is_err());
        assert_eq!("IMIX".parse::<Sizes>().unwrap(), Sizes::Imix);
        let n = |s| IMIX.iter().filter(|&&x| x == s).count();
        assert_eq!((n(60), n(590), n(1514)), (7, 4, 1));
        assert!("100-60".parse::<Sizes>().is_err());
        assert!("60-9000".parse::<Sizes>().is_err());
    }
}

/// Settings of the `nfkit pktgen` command.
#[derive(Debug, Clone)]
pub struct PktgenArgs {
    pub ports: Vec<String>,
    pub gen: GenConfig,
    /// Stop after this many packets per port.
    pub count: Option<u64>,
    pub seconds: Option<u64>,
    /// Receive the traffic back on the same ports and report loss and
    /// latency.
    pub rx: bool,
    /// Take pci: devices the kernel is using (`--force`).
    pub force: bool,
    /// `--cores LIST` (parsed): the generator runs on the first.
    pub cores: Option<Vec<usize>>,
}

/// What one port's generator did.
#[derive(Debug)]
pub struct PortResult {
    pub name: String,
    /// Frames the port took.
    pub sent: u64,
    /// Frames generated that the port had not taken when the run ended
    /// (its ring stayed full for [`FLUSH_TIME`]): freed, not sent, and
    /// so not counted as lost.
    pub unsent: u64,
    /// Frames the port itself counted as dropped on receive during the
    /// run (no buffer, ring full, NIC missed: `rx_dropped` +
    /// `rx_errors`): a starved receiver's loss, counted where it
    /// happened, like DPDK's `imissed`.
    pub dropped_by_port: u64,
    pub receiver: Receiver,
}

impl PortResult {
    /// Frames sent that neither came back nor were counted by the port.
    pub fn lost(&self) -> u64 {
        self.receiver
            .lost(self.sent)
            .saturating_sub(self.dropped_by_port)
    }
}

/// How long, after the end (count reached, `--seconds`, Ctrl-C), the
/// frames already generated may wait for a port to take them, and the
/// frames on their way may take to come back.
pub const FLUSH_TIME: Duration = Duration::from_millis(300);

/// The longest the end waits for frames still coming back, however
/// steadily they come.
pub const FLUSH_CAP: Duration = Duration::from_secs(5);

/// A rate limit must be a positive finite number (0 would never send,
/// and with `--count` never end).
pub fn check_rate(rate: &RateLimit) -> Result<()> {
    let (v, what) = match *rate {
        RateLimit::Pps(v) => (v, "--rate-pps"),
        RateLimit::WireMbit(v) => (v, "--rate-mbit"),
    };
    if !(v.is_finite() && v > 0.0) {
        anyhow::bail!("{what} {v}: a rate must be a positive number (leave it out for no limit)");
    }
    Ok(())
}

/// Run the generator on every port until the count or time is reached
/// (or Ctrl-C), printing a TX (and RX) line per port each second;
/// returns what each port's generator sent and received.
pub fn run(args: &PktgenArgs) -> Result<Vec<PortResult>> {
    use crate::{registry, stop_flag, SimLab, SimWire};
    use nfkit_port::rate::RateLines;
    use nfkit_port::{OpenOptions, Port};
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    if let Some(rate) = &args.gen.rate {
        check_rate(rate)?;
    }
    let specs = args
        .ports
        .iter()
        .map(|s| {
            s.parse::<nfkit_port::PortSpec>()
                .map_err(|e| anyhow::anyhow!("port `{s}`: {}", e.msg))
        })
        .collect::<Result<Vec<_>>>()?;
    nfkit_port::check_distinct(&specs).map_err(anyhow::Error::msg)?;
    // Simulated ports are cabled back to themselves so traffic returns.
    let lab = SimLab::new(SimWire::Loopback, 1);
    let reg = registry(lab, 1);
    let mut ports: Vec<Box<dyn Port>> = args
        .ports
        .iter()
        .map(|s| {
            let opts = OpenOptions {
                force: args.force,
                ..OpenOptions::default()
            };
            reg.open_str(s, &opts)
                .inspect(|p| eprintln!("{}", nfkit_port::capability_line(&**p)))
        })
        .collect::<Result<_, _>>()?;
    let mut gens: Vec<Generator> = (0..ports.len())
        .map(|i| {
            Generator::new(GenConfig {
                seed: args.gen.seed + i as u64,
                ..args.gen.clone()
            })
        })
        .collect();
    let mut caches: Vec<PoolCache> = ports.iter().map(|p| p.pool().cache(256)).collect();
    let mut pending: Vec<Batch> = ports.iter().map(|_| Batch::new()).collect();
    let mut receivers: Vec<Receiver> = ports.iter().map(|_| Receiver::default()).collect();
    let mut rx = Batch::new();
    let stop = stop_flag(args.seconds);
    eprintln!("{}", crate::cores::pin_data_path(args.cores.as_deref())?);
    let start = Instant::now();
    let rx_drops = |p: &dyn Port| {
        let s = p.stats();
        s.rx_dropped + s.rx_errors
    };
    let drops_at_start: Vec<u64> = ports.iter().map(|p| rx_drops(p.as_ref())).collect();
    let mut lines = RateLines::new(
        ports.iter().map(|p| p.name().to_string()).collect(),
        ports.iter().map(|p| p.stats()).collect(),
    );
    let limit = args.count.unwrap_or(u64::MAX);
    let mut done_at: Option<Instant> = None;
    let mut unsent = vec![0u64; ports.len()];
    // When generation ended (count reached everywhere, or stop).
    let mut ending: Option<Instant> = None;
    // When a frame last came back.
    let mut last_rx = start;
    loop {
        let elapsed = start.elapsed();
        let stopping = stop.load(Ordering::Relaxed);
        let mut all_done = true;
        let mut generating = false;
        for i in 0..ports.len() {
            let room = limit.saturating_sub(gens[i].sent()).min(MAX_BATCH_FILL) as usize;
            if room > 0 && !stopping {
                all_done = false;
                generating = true;
                gens[i].fill(&mut pending[i], &mut caches[i], elapsed, room);
            }
            if !pending[i].is_empty() {
                all_done = false;
                ports[i].tx_batch(0, &mut pending[i]);
            }
            if !generating && !pending[i].is_empty() {
                // The end: a port that does not take the last frames
                // within FLUSH_TIME keeps them no longer.
                if ending.is_some_and(|t| t.elapsed() > FLUSH_TIME) {
                    unsent[i] += pending[i].len() as u64;
                    pending[i].clear();
                }
            }
            if args.rx {
                for q in 0..ports[i].rx_queues() {
                    ports[i].rx_batch(q, &mut rx);
                    let now = start.elapsed().as_nanos() as u64;
                    if !rx.is_empty() {
                        last_rx = Instant::now();
                    }
                    for p in rx.drain() {
                        receivers[i].observe(p.data(), now);
                    }
                }
            }
        }
        if lines.due() {
            for [rxl, txl] in lines.lines(ports.iter().map(|p| p.stats()).collect()) {
                println!("{txl}");
                if args.rx {
                    println!("{rxl}");
                }
            }
        }
        if !generating {
            ending.get_or_insert_with(Instant::now);
        }
        if all_done {
            // Give the frames on their way time to come back: until all
            // are back, or none has come for FLUSH_TIME (a starved
            // simulated NIC may hold them longer than that in all), and
            // never longer than FLUSH_CAP.
            let d = *done_at.get_or_insert_with(Instant::now);
            let all_back = receivers
                .iter()
                .zip(&gens)
                .zip(&unsent)
                .zip(ports.iter().zip(&drops_at_start))
                .all(|(((r, g), u), (p, d0))| {
                    // the port's counters (NIC registers) only when frames are missing
                    r.received >= g.sent() - u
                        || r.received + rx_drops(p.as_ref()).saturating_sub(*d0) >= g.sent() - u
                });
            let quiet = last_rx.max(d).elapsed() > FLUSH_TIME;
            if !args.rx || all_back || quiet || d.elapsed() > FLUSH_CAP {
                break;
            }
        }
    }
    let results: Vec<PortResult> = ports
        .iter()
        .zip(gens)
        .zip(receivers)
        .zip(unsent)
        .zip(drops_at_start)
        .map(|((((p, g), receiver), unsent), d0)| PortResult {
            name: p.name().to_string(),
            sent: g.sent() - unsent,
            unsent,
            dropped_by_port: rx_drops(p.as_ref()).saturating_sub(d0),
            receiver,
        })
        .collect();
    Ok(results)
}

/// Most packets one port's generator makes per loop.
const MAX_BATCH_FILL: u64 = 32;
