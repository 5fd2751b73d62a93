//! `nfkit nf NAME --lan SPEC --wan SPEC [--model agent|queue]
//! [--seconds N] [--table] [NF options...]`: one network function of
//! `nfkit-nf` between ports, printing per-second lines like `nfkit fwd`
//! and the NF's counters; the caller prints the [`NfSummary`] (the NF's
//! counters, every packet forwarded or counted as dropped, and its
//! table: bridge MACs, LB backends, NAT mappings).
//!
//! - Port `k` of the NF is the `k`-th port given: `--lan` is 0, `--wan`
//!   is 1, then each `--port SPEC` (the bridge takes 2 to 64 of them).
//! - Ports open through the one registry ([`crate::registry`]), and the
//!   NF runs in its driver model with [`with_ports`]: `queue` (default)
//!   the queue-model loop, `agent` the agent handlers through the adapter.
//! - When every port is `sim:N`, the ports are simulated 82599s
//!   ([`SimNics`]) and the NF runs with [`with_form`]: `--model agent`
//!   runs the handlers on `nfkit_ixgbe::Agent`s, `--model queue` the loop
//!   on 82599 queues, and the NF's workload (60,000 flows,
//!   [`nfkit_nf::workload`]) feeds its input port; without NF options the
//!   workload's options are used.
//!
//! The clock is read once per round of batches.

use crate::forms::{with_form, with_ports, Rounds, SimNics};
use crate::{registry, stop_flag, Feeder, SimLab, SimWire};
use anyhow::{bail, Context, Result};
use nfkit_ixgbe_model::TrafficGen;
use nfkit_nf::workload::{workload, FLOWS};
use nfkit_nf::{build_for_ports, NetworkFunction, NfStats};
use nfkit_port::rate::RateLines;
use nfkit_port::{Model, OpenOptions, Port, PortSpec, QueueStats};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What `nfkit nf` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfArgs {
    pub name: String,
    /// Port specs in NF port order.
    pub ports: Vec<String>,
    pub model: Model,
    pub seconds: Option<u64>,
    pub table_every_second: bool,
    /// Everything else, for the NF.
    pub nf_options: Vec<String>,
    /// Take pci: devices the kernel is using (`--force`).
    pub force: bool,
    /// Hybrid polling (sleep when idle, the default) or pure polling
    /// (`--poll`).
    pub idle: nfkit_port::IdleOptions,
    /// `--cores LIST` (parsed): the data path runs on the first.
    pub cores: Option<Vec<usize>>,
}

/// The NF's counters on one line.
pub fn nf_line(name: &str, s: &NfStats) -> String {
    let mut line = format!(
        "[NF: {name}] in {}, forwarded {} (flooded {}, icmp errors {}), dropped {}",
        s.packets_in,
        s.forwarded,
        s.flooded,
        s.icmp_generated,
        s.dropped_total()
    );
    let drops: Vec<String> = s
        .drops()
        .map(|(r, n)| format!("{} {n}", r.name()))
        .collect();
    if !drops.is_empty() {
        line.push_str(&format!(" ({})", drops.join(", ")));
    }
    line.push_str(&format!(
        ", flows created {}, expired {}",
        s.flows_created, s.flows_expired
    ));
    line
}

/// What a run ends with.
#[derive(Debug, Clone)]
pub struct NfSummary {
    pub stats: NfStats,
    pub ports: Vec<QueueStats>,
    /// Per port: packets the NF sent there, and those the port refused.
    pub sent: Vec<u64>,
    pub send_dropped: Vec<u64>,
    pub table: Vec<String>,
}

/// The run's books, with frames a port refused counted as drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub packets_in: u64,
    /// Forwarded by the NF and taken by the port.
    pub forwarded: u64,
    /// Dropped by the NF, or refused by the port it was sent to.
    pub dropped: u64,
    /// Of `dropped`, refused by a port (its ring full): each is also in
    /// that port's `tx_dropped`.
    pub refused: u64,
}

impl NfSummary {
    /// Every packet in was forwarded (and taken by its port) or dropped
    /// (by the NF, or refused by the port). A flooded packet is several
    /// frames: at most the NF's forwarded count is moved to the drops.
    pub fn totals(&self) -> Totals {
        let s = &self.stats;
        let refused = self.send_dropped.iter().sum::<u64>().min(s.forwarded);
        Totals {
            packets_in: s.packets_in,
            forwarded: s.forwarded - refused,
            dropped: s.dropped_total() + refused,
            refused,
        }
    }

    /// The NF's books: every packet in was forwarded or dropped.
    pub fn check(&self) -> Result<()> {
        let s = &self.stats;
        let t = self.totals();
        if s.packets_in != s.forwarded + s.dropped_total()
            || t.packets_in != t.forwarded + t.dropped
        {
            bail!("the NF's counters do not add up: {s:?}, {t:?}");
        }
        Ok(())
    }
}

/// Table entries printed in the summary and each second.
pub const TABLE_LINES: usize = 64;

/// Rounds between checks of the clock for lines, the stop flag and port
/// errors.
const CHECK_EVERY: u32 = 256;

/// Run the NF until `args.seconds` pass, Ctrl-C, or every source is done.
pub fn run(args: &NfArgs) -> Result<NfSummary> {
    let specs: Vec<PortSpec> = args
        .ports
        .iter()
        .map(|s| s.parse().with_context(|| format!("port `{s}`")))
        .collect::<Result<_>>()?;
    nfkit_port::check_distinct(&specs).map_err(anyhow::Error::msg)?;
    let sim = all_sim(&specs);
    let options = match sim {
        true if args.nf_options.is_empty() => workload(&args.name, FLOWS)?.options,
        _ => args.nf_options.clone(),
    };
    let mut nf = build_for_ports(&args.name, &options, specs.len())
        .with_context(|| format!("nf {}", args.name))?;
    let count = nf.port_count();
    if count != specs.len() {
        bail!(
            "nf {} has {count} ports, {} were given (--lan, --wan, --port)",
            args.name,
            specs.len()
        );
    }
    let (ports, sent, send_dropped) = if sim {
        run_sim(args, &mut *nf)?
    } else {
        run_ports(args, &specs, &mut *nf)?
    };
    Ok(NfSummary {
        stats: nf.stats().clone(),
        ports,
        sent,
        send_dropped,
        table: nf.table(),
    })
}

/// Counters of a run: per port, the port's own, packets sent there, and
/// packets the port refused.
type PortCounts = (Vec<QueueStats>, Vec<u64>, Vec<u64>);

/// Whether every port is a distinct `sim:N` without options (those run
/// on the NF's own simulated devices; `sim:N,mtu=...` through the registry).
fn all_sim(specs: &[PortSpec]) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    specs
        .iter()
        .all(|s| matches!(s, PortSpec::Sim(n, o) if o.is_default() && seen.insert(*n)))
}

/// Run rounds until `stop`, or until `check` (called every
/// [`CHECK_EVERY`] rounds, after the per-second lines when due) says the
/// run is over.
fn drive(
    r: &mut Rounds<'_>,
    args: &NfArgs,
    stop: &AtomicBool,
    lines: &mut RateLines,
    port_stats: &dyn Fn() -> Vec<QueueStats>,
    mut check: impl FnMut() -> Result<bool>,
    sleep_on: Option<&RefCell<Vec<&mut dyn Port>>>,
) -> Result<()> {
    let start = Instant::now();
    let mut rounds = 0u32;
    let mut idle = nfkit_port::Idle::new(args.idle);
    let mut last = nfkit_port::IdleTimes::default();
    loop {
        let n = (r.round)(start.elapsed());
        if let Some(ports) = sleep_on.filter(|_| idle.round(n > 0)) {
            // Arm, re-check with one more round, sleep if it found
            // nothing (see nfkit_port::idle); at most until the next
            // rate line.
            if idle.arm(&mut ports.borrow_mut()) {
                if (r.round)(start.elapsed()) > 0 {
                    idle.found(&mut ports.borrow_mut());
                } else {
                    let next =
                        Instant::now() + Duration::from_secs(1).saturating_sub(lines.since_print());
                    idle.wait(&mut ports.borrow_mut(), Some(next));
                }
            }
            rounds = CHECK_EVERY - 1;
        }
        rounds += 1;
        if rounds < CHECK_EVERY {
            continue;
        }
        rounds = 0;
        if lines.due() {
            lines.print(port_stats());
            println!("{}", nf_line(&args.name, &(r.stats)()));
            if sleep_on.is_some() {
                let now = idle.times(start.elapsed());
                println!("{}", now.since(&last).line("nf"));
                last = now;
            }
            if args.table_every_second {
                let t = (r.table)();
                let shown = &t[..t.len().min(TABLE_LINES)];
                println!("table ({} entries): {}", t.len(), shown.join("; "));
            }
        }
        if check()? || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// The NF between ports opened through the registry.
fn run_ports(
    args: &NfArgs,
    specs: &[PortSpec],
    nf: &mut dyn NetworkFunction,
) -> Result<PortCounts> {
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 1024,
        },
        1,
    );
    let reg = registry(lab.clone(), 1);
    let mut owned: Vec<Box<dyn Port>> = specs
        .iter()
        .map(|s| {
            let opts = OpenOptions {
                force: args.force,
                ..OpenOptions::default()
            };
            reg.open(s, &opts)
                .inspect(|p| eprintln!("{}", nfkit_port::capability_line(&**p)))
        })
        .collect::<Result<_, _>>()?;
    let ports: RefCell<Vec<&mut dyn Port>> =
        RefCell::new(owned.iter_mut().map(|p| &mut **p as _).collect());
    let stop = stop_flag(args.seconds);
    lab.start_load();
    eprintln!("{}", crate::cores::pin_data_path(args.cores.as_deref())?);
    let port_stats = || -> Vec<QueueStats> { ports.borrow().iter().map(|p| p.stats()).collect() };
    let names = ports
        .borrow()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    let mut lines = RateLines::new(names, port_stats());
    let counts = with_ports(args.model, &ports, nf, |mut r| -> Result<_> {
        drive(
            &mut r,
            args,
            &stop,
            &mut lines,
            &port_stats,
            || {
                let mut ports = ports.borrow_mut();
                for p in ports.iter_mut() {
                    if let Some(e) = p.take_error() {
                        return Err(e.into());
                    }
                }
                Ok(ports.iter().all(|p| p.rx_done()))
            },
            Some(&ports),
        )?;
        Ok(((r.sent)(), (r.refused)()))
    });
    lab.stop_load();
    let (sent, refused) = counts?;
    let mut ports = ports.into_inner();
    for p in ports.iter_mut() {
        p.flush()?;
    }
    Ok((ports.iter().map(|p| p.stats()).collect(), sent, refused))
}

/// The NF on simulated 82599s with its workload feeding its input port.
fn run_sim(args: &NfArgs, nf: &mut dyn NetworkFunction) -> Result<PortCounts> {
    let n = args.ports.len();
    let nics = SimNics::free_running(n)?;
    let w = workload(&args.name, FLOWS)?;
    for nic in &nics.nics {
        nic.wire().attach_sink();
    }
    let feeder = Feeder::start(
        nics.nics[w.input.min(n - 1)].wire(),
        TrafficGen::from_frames(w.frames),
    );
    let stop = stop_flag(args.seconds);
    let device_stats = || -> Vec<QueueStats> {
        nics.devs
            .iter()
            .map(|d| d.stats().as_port_stats())
            .collect()
    };
    let mut lines = RateLines::new(args.ports.clone(), device_stats());
    let refused = with_form(args.model, &nics, nf, |mut r| -> Result<_> {
        drive(
            &mut r,
            args,
            &stop,
            &mut lines,
            &device_stats,
            || Ok(false),
            None,
        )?;
        Ok((r.refused)())
    });
    drop(feeder);
    let refused = refused??;
    let ports = device_stats();
    let sent = ports.iter().map(|p| p.tx_packets).collect();
    Ok((ports, sent, refused))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_nf::Verdict;

    /// Issue 14 item 12: frames a port refused were inside "forwarded".
    #[test]
    fn refused_frames_are_drops_in_the_totals() {
        let mut stats = NfStats::default();
        for _ in 0..10 {
            stats.record(&Verdict::Forward { port: 1, len: 60 });
        }
        let summary = NfSummary {
            stats,
            ports: vec![QueueStats::default(); 2],
            sent: vec![0, 10],
            send_dropped: vec![0, 3],
            table: Vec::new(),
        };
        let t = summary.totals();
        assert_eq!(
            (t.packets_in, t.forwarded, t.dropped, t.refused),
            (10, 7, 3, 3)
        );
        summary.check().unwrap();
    }
}
