//! `nfkit bench ports`: nfkit's port backends against DPDK's, in one run,
//! on the same interfaces, with the same traffic, duration and cores.
//!
//! | case | nfkit | DPDK |
//! |---|---|---|
//! | AF_XDP | `fwd` between `afxdp:A` and `afxdp:B` | testpmd io over `net_af_xdp` on A and B |
//! | AF_PACKET | `fwd` between `afpacket:A` and `afpacket:B` | testpmd io over `net_af_packet` on A and B |
//! | null | `fwd` between two `null:size=60` | testpmd io over two `net_null` (size=60) |
//! | AF_PACKET V3 (on request: `--case af-packet-v3`; no target) | `fwd` between `afpacket:A,tpacket=3` and `afpacket:B,tpacket=3` | as for AF_PACKET (DPDK has no TPACKET_V3) |
//!
//! A and B are the two ends of one veth pair made for the case (and
//! removed after it). Each side forwards what one port receives out of
//! the other, so a frame sent on A arrives on B and is sent on A again:
//! the only traffic is one burst sent out of each port at start
//! (testpmd's `--tx-first`; nfkit sends the same number of 64-byte UDP
//! frames), which then circulates. The rate is therefore bound by the
//! round trip through the kernel, as it is for DPDK.
//!
//! Each side runs its ports' defaults. AF_XDP: both bind in copy mode
//! (veth has no zero-copy) and run the redirect program in the veth
//! driver (native XDP: DPDK's `net_af_xdp` lets the kernel choose, which
//! is native on veth; nfkit's `attach=auto` picks it on these one-queue
//! veths); DPDK adds its default busy polling (`busy_budget=64`), nfkit
//! uses 512-slot rings. AF_PACKET: both use TPACKET_V2 RX and TX rings;
//! DPDK's `net_af_packet` with 512 frames and the qdisc, nfkit with 512
//! RX slots, `PACKET_QDISC_BYPASS` and virtio-net headers (see
//! `nfkit_port::afpacket`).
//!
//! The V3 case shows what TPACKET_V3's block timer costs: with the
//! default 32 frames circulating, each block waits for its 1 ms timer
//! (0.032 Mpps, 0.13x); with `--burst 512` blocks fill and V3 forwards
//! as fast as V2 (0.396 against 0.395 Mpps, 1.61x DPDK).
//!
//! Both sides forward on one pinned core (core 1; testpmd's main lcore 0
//! only prints statistics), leave packet data untouched (testpmd's io
//! mode does not read it: `Touch::None`), and are measured as the mean of
//! the two ports' receive rates over the seconds after the first.

use crate::testpmd::{current_thread_cpu_time, tsc_hz, Testpmd, FORWARDING_CORE, WARMUP};
use anyhow::{Context, Result};
use nfkit_port::fwd::{fwd, FwdOptions, FwdReport, Touch};
use nfkit_port::null::udp_template;
use nfkit_port::{Batch, OpenOptions, Port};
use nfkit_testkit::Veth;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Frame size of the circulating traffic (testpmd's transmit default).
pub const FRAME_LEN: usize = 64;

/// One comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    AfXdp,
    AfPacket,
    Null,
    /// nfkit's AF_PACKET with a TPACKET_V3 RX ring (`tpacket=3`) against
    /// DPDK's `net_af_packet` (TPACKET_V2 only): not in the default set,
    /// no target; it shows what V3's block timer costs when few frames
    /// circulate.
    AfPacketV3,
}

impl Case {
    /// The cases issue #4 sets targets for (the default set).
    pub const ALL: [Case; 3] = [Case::AfXdp, Case::AfPacket, Case::Null];

    pub fn name(self) -> &'static str {
        match self {
            Case::AfXdp => "AF_XDP (veth)",
            Case::AfPacket => "AF_PACKET (veth)",
            Case::Null => "null",
            Case::AfPacketV3 => "AF_PACKET V3 veth",
        }
    }

    /// The ratio nfkit/DPDK issue #4 asks for.
    pub fn target(self) -> Option<f64> {
        match self {
            Case::AfXdp | Case::AfPacket => Some(1.2),
            Case::Null => Some(1.0),
            Case::AfPacketV3 => None,
        }
    }

    fn nfkit_specs(self, ends: Option<&Veth>) -> [String; 2] {
        match (self, ends) {
            (Case::AfXdp, Some(v)) => [format!("afxdp:{}", v.a), format!("afxdp:{}", v.b)],
            (Case::AfPacket, Some(v)) => [format!("afpacket:{}", v.a), format!("afpacket:{}", v.b)],
            (Case::AfPacketV3, Some(v)) => [
                format!("afpacket:{},tpacket=3", v.a),
                format!("afpacket:{},tpacket=3", v.b),
            ],
            _ => ["null:size=60".into(), "null:size=60".into()],
        }
    }

    fn dpdk_vdevs(self, ends: Option<&Veth>) -> Vec<String> {
        match (self, ends) {
            (Case::AfXdp, Some(v)) => vec![
                format!("net_af_xdp0,iface={},start_queue=0,queue_count=1", v.a),
                format!("net_af_xdp1,iface={},start_queue=0,queue_count=1", v.b),
            ],
            (Case::AfPacket | Case::AfPacketV3, Some(v)) => vec![
                format!("net_af_packet0,iface={},qpairs=1", v.a),
                format!("net_af_packet1,iface={},qpairs=1", v.b),
            ],
            _ => vec!["net_null0,size=60".into(), "net_null1,size=60".into()],
        }
    }

    fn uses_veth(self) -> bool {
        self != Case::Null
    }
}

#[derive(Debug, Clone)]
pub struct PortsOptions {
    pub cases: Vec<Case>,
    /// Measured seconds per side (after a one-second warm-up).
    pub seconds: u64,
    /// Frames sent out of each port at start on the veth cases.
    pub burst: usize,
}

/// What one side measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Side {
    /// Mpps per port (mean of the ports' receive rates).
    pub mpps: f64,
    /// The forwarding thread's CPU time over the measured seconds as a
    /// share of their wall-clock time (below 1 when other work on the
    /// machine preempted it).
    pub cpu_share: Option<f64>,
}

impl Side {
    /// CPU cycles per packet received (both ports), at `hz`.
    pub fn cycles_per_packet(&self, hz: f64) -> Option<f64> {
        let pps = self.mpps * 2.0 * 1e6;
        self.cpu_share.filter(|_| pps > 0.0).map(|s| s * hz / pps)
    }
}

/// One side's figure, or why there is none.
pub type Figure = std::result::Result<Side, String>;

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub case: String,
    pub nfkit: Figure,
    pub dpdk: Figure,
    /// nfkit/DPDK wanted, in Mpps (none for informational cases).
    pub target: Option<f64>,
}

impl Row {
    /// nfkit/DPDK in Mpps.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.nfkit, &self.dpdk) {
            (Ok(n), Ok(d)) if d.mpps > 0.0 => Some(n.mpps / d.mpps),
            _ => None,
        }
    }

    /// DPDK/nfkit in cycles per packet.
    pub fn cycle_ratio(&self, hz: f64) -> Option<f64> {
        let (Ok(n), Ok(d)) = (&self.nfkit, &self.dpdk) else {
            return None;
        };
        Some(d.cycles_per_packet(hz)? / n.cycles_per_packet(hz)?).filter(|x| x.is_finite())
    }
}

pub fn run(opts: &PortsOptions) -> Result<Vec<Row>> {
    let stop = nfkit_lab::stop_flag(None);
    let mut rows = Vec::new();
    for &case in &opts.cases {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        rows.push(run_case(case, opts, &stop)?);
    }
    Ok(rows)
}

fn run_case(case: Case, opts: &PortsOptions, stop: &Arc<AtomicBool>) -> Result<Row> {
    let veth = if case.uses_veth() {
        Some(quiet_veth().context("making the veth pair")?)
    } else {
        None
    };
    let specs = case.nfkit_specs(veth.as_ref());
    let burst = if case.uses_veth() { opts.burst } else { 0 };
    let nfkit = nfkit_mpps(&specs, burst, opts.seconds, stop).map_err(|e| format!("{e:#}"));
    if stop.load(Ordering::Relaxed) {
        return Ok(Row {
            case: case.name().into(),
            nfkit,
            dpdk: Err("interrupted".into()),
            target: case.target(),
        });
    }
    let dpdk = Testpmd::new(case.dpdk_vdevs(veth.as_ref()), opts.seconds)
        .tx_first(case.uses_veth())
        .burst((case.uses_veth() && opts.burst != 32).then_some(opts.burst))
        .warmup_periods(1)
        .abort_on(stop.clone())
        .measure_cpu(true)
        .run()
        .map(|r| Side {
            mpps: r.mean_rx_pps() / 1e6,
            cpu_share: r.forwarding_cpu_share,
        })
        .map_err(|e| e.to_string());
    Ok(Row {
        case: case.name().into(),
        nfkit,
        dpdk,
        target: case.target(),
    })
}

/// A veth pair with IPv6 off on both ends, so that the kernel sends
/// nothing of its own (router solicitations, MLD reports) into the
/// circulating traffic.
fn quiet_veth() -> Result<Veth> {
    let v = Veth::new()?;
    for end in [&v.a, &v.b] {
        let knob = format!("/proc/sys/net/ipv6/conf/{end}/disable_ipv6");
        if let Err(e) = std::fs::write(&knob, "1") {
            tracing::warn!("cannot turn IPv6 off on {end} ({knob}: {e}); stray packets may join");
        }
    }
    Ok(v)
}

/// nfkit's forwarding rate between two ports (Mpps per port, the mean of
/// both ports' receive rates after the warm-up) and its thread's CPU.
pub fn nfkit_mpps(
    specs: &[String; 2],
    burst: usize,
    seconds: u64,
    stop: &AtomicBool,
) -> Result<Side> {
    let opts = OpenOptions::default();
    let open = |s: &String| -> Result<Box<dyn Port>> {
        nfkit_port::open(&s.parse()?, &opts).with_context(|| format!("opening `{s}`"))
    };
    let mut a = open(&specs[0])?;
    let mut b = open(&specs[1])?;
    for p in [&mut a, &mut b] {
        send_burst(&mut **p, burst)?;
    }
    let total = WARMUP + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(FORWARDING_CORE);
            forward_measured(&mut *a, &mut *b, total, stop)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the forwarding thread panicked"))?
    })
}

/// Send `n` 64-byte UDP frames out of `port`, allocated from its pool.
fn send_burst(port: &mut dyn Port, n: usize) -> Result<()> {
    let frame = udp_template(FRAME_LEN);
    let mut left = n;
    let mut batch = Batch::new();
    while left > 0 {
        while left > 0 && !batch.is_full() {
            let mut buf = port.pool().alloc().with_context(|| {
                format!("{}: pool empty while sending the first burst", port.name())
            })?;
            buf.copy_from(&frame)
                .map_err(|_| anyhow::anyhow!("a {FRAME_LEN}-byte frame does not fit a buffer"))?;
            batch.push(buf);
            left -= 1;
        }
        let want = batch.len();
        let sent = port.tx_batch(0, &mut batch);
        anyhow::ensure!(
            sent == want,
            "{}: sent {sent} of the first burst's {want} frames",
            port.name()
        );
    }
    Ok(())
}

/// Pin the calling thread; a warning if the core does not exist.
pub fn pin_to(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        tracing::warn!("could not pin the forwarding thread to core {core}");
    }
}

/// Forward for `total`, measuring from [`WARMUP`] on.
fn forward_measured(
    a: &mut dyn Port,
    b: &mut dyn Port,
    total: Duration,
    interrupted: &AtomicBool,
) -> Result<Side> {
    let done = AtomicBool::new(false);
    let opts = FwdOptions {
        touch: Touch::None,
        stats_interval: Duration::from_millis(100),
        stop_when_done: false,
        idle: nfkit_port::IdleOptions::polling(),
    };
    let rx = |r: &FwdReport| r.ports[0].rx_packets + r.ports[1].rx_packets;
    let mut from: Option<(Duration, u64, Option<Duration>)> = None;
    let report = fwd([a, b], &opts, &done, |r| {
        if from.is_none() && r.elapsed >= WARMUP {
            from = Some((r.elapsed, rx(r), current_thread_cpu_time()));
        }
        if r.elapsed >= total || interrupted.load(Ordering::Relaxed) {
            done.store(true, Ordering::Relaxed);
        }
    })?;
    let cpu1 = current_thread_cpu_time();
    let (t0, n0, cpu0) = from.context("stopped before the warm-up ended")?;
    let over = (report.elapsed - t0).as_secs_f64();
    anyhow::ensure!(over > 0.0, "no time measured after the warm-up");
    Ok(Side {
        mpps: (rx(&report) - n0) as f64 / over / 2.0 / 1e6,
        cpu_share: cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64() / over),
    })
}

/// The table, the targets and whether each is met (by the Mpps ratio).
pub fn print_table(title: &str, rows: &[Row], hz: f64) {
    println!("{title}");
    println!(
        "{:<18} {:>10} {:>10} {:>7} {:>9} {:>8} {:>7} {:>9} {:>8} {:>7}  met",
        "case",
        "nfkit Mpps",
        "DPDK Mpps",
        "ratio",
        "nfkit c/p",
        "DPDK c/p",
        "c ratio",
        "nfkit CPU",
        "DPDK CPU",
        "target"
    );
    for r in rows {
        let fig = |f: &Figure| match f {
            Ok(v) => format!("{:.3}", v.mpps),
            Err(_) => "error".into(),
        };
        let cyc = |f: &Figure| match f.as_ref().ok().and_then(|v| v.cycles_per_packet(hz)) {
            Some(c) => format!("{c:.0}"),
            None => "-".into(),
        };
        let cpu = |f: &Figure| match f.as_ref().ok().and_then(|v| v.cpu_share) {
            Some(c) => format!("{:.0}%", c * 100.0),
            None => "-".into(),
        };
        let x = |r: Option<f64>| r.map_or("-".into(), |x| format!("{x:.2}x"));
        let met = match (r.ratio(), r.target) {
            (Some(x), Some(t)) if x >= t => "yes",
            (Some(_), Some(_)) => "no",
            _ => "-",
        };
        let target = r.target.map_or("-".into(), |t| format!("{t:.1}x"));
        println!(
            "{:<18} {:>10} {:>10} {:>7} {:>9} {:>8} {:>7} {:>9} {:>8} {:>7}  {}",
            r.case,
            fig(&r.nfkit),
            fig(&r.dpdk),
            x(r.ratio()),
            cyc(&r.nfkit),
            cyc(&r.dpdk),
            x(r.cycle_ratio(hz)),
            cpu(&r.nfkit),
            cpu(&r.dpdk),
            target,
            met
        );
    }
    for r in rows {
        for (side, f) in [("nfkit", &r.nfkit), ("DPDK", &r.dpdk)] {
            if let Err(e) = f {
                println!("{} / {side}: {e}", r.case);
            }
        }
    }
}

/// `nfkit bench ports`.
pub fn ports(opts: &PortsOptions) -> Result<()> {
    if cfg!(debug_assertions) {
        println!(
            "note: a debug build; run `cargo build --release` and target/release/nfkit bench ports for meaningful figures"
        );
    }
    let hz = tsc_hz()?;
    let rows = run(opts)?;
    print_table(
        &format!(
            "nfkit vs DPDK {} io forwarding, one forwarding core (core {FORWARDING_CORE}), \
             {} s measured after {} s warm-up; veth cases: {} x {FRAME_LEN}-byte frames \
             sent out of each port at start, circulating; Mpps per port",
            crate::testpmd::TESTPMD,
            opts.seconds,
            WARMUP.as_secs(),
            opts.burst
        ),
        &rows,
        hz,
    );
    println!(
        "ratio: nfkit/DPDK Mpps (judged against the target); c/p: CPU cycles per packet received, \
         from the forwarding thread's CPU time (/proc/.../schedstat) x {:.0} MHz nominal TSC, \
         including time spent polling empty rings and in system calls; c ratio: DPDK/nfkit c/p; \
         CPU: the forwarding thread's share of its core over the measured seconds (well below \
         100% means other work on the machine preempted it, and that side's Mpps is low)",
        hz / 1e6
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_testkit::{require_root, require_tool};

    /// Both sides give a figure on a veth case and on null, and the veth
    /// pair is gone afterwards. No figure is checked against a speed.
    #[test]
    fn both_sides_measure_and_the_veth_pair_is_removed() {
        require_root!();
        require_tool!(crate::testpmd::TESTPMD);
        let rows = run(&PortsOptions {
            cases: vec![Case::AfPacket, Case::Null],
            seconds: 1,
            burst: 32,
        })
        .unwrap();
        assert_eq!(rows.len(), 2);
        for r in &rows {
            let n = r
                .nfkit
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", r.case));
            let d = r
                .dpdk
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", r.case));
            assert!(n.mpps > 0.0 && d.mpps > 0.0, "{r:?}");
            assert!(r.ratio().is_some());
        }
        let links = nfkit_testkit::ip(&["-o", "link", "show"]).unwrap();
        let mine = nfkit_testkit::unique_name("v");
        let prefix = mine.split('_').next().unwrap();
        assert!(
            !links.lines().any(|l| l.contains(&format!("{prefix}_"))),
            "a veth of this process is left: {links}"
        );
    }

    #[test]
    fn cycles_per_packet_from_cpu_share() {
        let s = Side {
            mpps: 1.0,
            cpu_share: Some(0.5),
        };
        // 0.5 s of CPU per second for 2 Mpps (two ports) at 2 GHz.
        assert_eq!(s.cycles_per_packet(2e9), Some(500.0));
        let idle = Side {
            mpps: 0.0,
            cpu_share: Some(1.0),
        };
        assert_eq!(idle.cycles_per_packet(2e9), None);
        let row = Row {
            case: "x".into(),
            nfkit: Ok(s),
            dpdk: Ok(Side {
                mpps: 2.0,
                cpu_share: Some(1.0),
            }),
            target: Some(1.0),
        };
        assert_eq!(row.ratio(), Some(0.5));
        assert_eq!(row.cycle_ratio(2e9), Some(1.0));
    }
}
