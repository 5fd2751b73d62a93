//! `nfkit nf NAME --lan SPEC --wan SPEC [--model agent|queue]
//! [--seconds N] [--table] [NF options...]`: one network function of
//! `nfkit-nf` between real ports, printing per-second lines like
//! `nfkit fwd`, then a summary with the NF's counters (every packet
//! forwarded or counted as dropped) and its table (bridge MACs, LB
//! backends, NAT mappings).
//!
//! - Port `k` of the NF is the `k`-th port given: `--lan` is 0, `--wan`
//!   is 1, then each `--port SPEC` (the bridge takes 2 to 64 of them).
//! - `--model queue` (default): [`QueueNf`], batches from a pool.
//! - `--model agent`: the agent handlers of [`AgentNf`] through
//!   [`AgentAdapter`] on the ports.
//! - When every port is `sim:N`, the ports are simulated 82599s (see
//!   [`crate::bench_nf::SimNics`]): `--model agent` runs the handlers on
//!   `nfkit_ixgbe::Agent`s, `--model queue` the loop on 82599 queues, and
//!   the NF's benchmark workload (60,000 flows,
//!   [`crate::bench_nf::workload`]) feeds its input port; without NF
//!   options the workload's options are used.
//!
//! The clock is read once per round of batches.

use crate::bench_nf::{with_form, workload, SimNics, FLOWS};
use crate::demo::Model;
use crate::lab::{registry, SimLab, SimWire};
use crate::stats;
use anyhow::{bail, Context, Result};
use nfkit_ixgbe_model::TrafficGen;
use nfkit_nf::adapt::{AgentNf, QueueNf};
use nfkit_nf::{
    Bridge, BridgeConfig, LbConfig, LoadBalancer, Nat, NatConfig, NetworkFunction, NfStats, NFS,
};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::{OpenOptions, Port, PortSpec, QueueStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const USAGE: &str = "\
usage: nfkit nf NAME --lan SPEC --wan SPEC [--model agent|queue] [--seconds N] [--table] [NF options]
       nfkit nf bridge --port SPEC --port SPEC [--port SPEC ...] [...]
  --lan SPEC, --wan SPEC   NF ports 0 and 1 (sim:N, pci:ADDR, afpacket:IF, afxdp:IF, tap:NAME, pcap:..., null:)
  --port SPEC              one more port (repeatable; the bridge's ports)
  --model agent|queue      driver model (default queue)
  --seconds N              stop after N seconds (default: Ctrl-C, or when every source is done)
  --table                  print the NF's table every second too (bridge MACs, LB backends, NAT mappings)
With only sim:N ports the NF runs on simulated 82599s (real 82599 agents with --model agent)
and its benchmark workload (60,000 flows) feeds its input port; without NF options the
workload's are used: nfkit nf lb --lan sim:0 --wan sim:1 --model agent --seconds 5";

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
}

/// Split `nfkit nf` arguments into the adapter's and the NF's.
pub fn parse_args(args: &[String]) -> Result<NfArgs> {
    let Some((name, rest)) = args.split_first() else {
        bail!("which NF?\n{USAGE}\n{}", nf_list());
    };
    if name.starts_with('-') {
        bail!("{USAGE}\n{}", nf_list());
    }
    let (mut lan, mut wan, mut extra) = (None, None, Vec::new());
    let mut out = NfArgs {
        name: name.clone(),
        ports: Vec::new(),
        model: Model::Queue,
        seconds: None,
        table_every_second: false,
        nf_options: Vec::new(),
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || -> Result<String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .with_context(|| format!("`{key}` needs a value"))
        };
        match key {
            "--lan" => lan = Some(value()?),
            "--wan" => wan = Some(value()?),
            "--port" => extra.push(value()?),
            "--model" => {
                out.model = match value()?.as_str() {
                    "agent" => Model::Agent,
                    "queue" => Model::Queue,
                    m => bail!("--model {m}: expected agent or queue"),
                }
            }
            "--seconds" => {
                let v = value()?;
                out.seconds = Some(v.parse().with_context(|| format!("--seconds {v}"))?);
            }
            "--table" => out.table_every_second = true,
            "-h" | "--help" => bail!("{USAGE}\n{}", nf_list()),
            _ => out.nf_options.push(a.clone()),
        }
    }
    out.ports.extend(lan);
    out.ports.extend(wan);
    out.ports.extend(extra);
    if out.ports.len() < 2 {
        bail!("an NF needs at least two ports (--lan and --wan, or --port twice)\n{USAGE}");
    }
    Ok(out)
}

/// Whether the arguments ask for the usage text (none, or `-h`/`--help`
/// where the NF name goes).
pub fn wants_help(args: &[String]) -> bool {
    args.first()
        .is_none_or(|a| matches!(a.as_str(), "-h" | "--help" | "help"))
}

/// The usage text with the list of NFs.
pub fn usage() -> String {
    format!("{USAGE}\n{}", nf_list())
}

fn nf_list() -> String {
    let mut s = String::from("network functions:");
    for (n, d) in NFS {
        s.push_str(&format!("\n  {n:<9} {d}"));
    }
    s
}

/// The NF, kept as its own type where the summary prints its table.
pub enum Built {
    Bridge(Bridge),
    Lb(LoadBalancer),
    Nat(Nat),
    Other(nfkit_nf::BoxedNf),
}

impl Built {
    /// Build `name` for `ports` ports from its options (the bridge gets
    /// `--ports` from the port count unless given).
    pub fn new(name: &str, options: &[String], ports: usize) -> Result<Built> {
        let context = || format!("nf {name}");
        Ok(match name {
            "bridge" => {
                let mut opts = options.to_vec();
                if !opts
                    .iter()
                    .any(|o| o == "--ports" || o.starts_with("--ports="))
                {
                    opts.extend(["--ports".into(), ports.to_string()]);
                }
                Built::Bridge(
                    Bridge::new(BridgeConfig::from_args(&opts).with_context(context)?)
                        .with_context(context)?,
                )
            }
            "lb" => Built::Lb(
                LoadBalancer::new(LbConfig::from_args(options).with_context(context)?)
                    .with_context(context)?,
            ),
            "nat" => Built::Nat(
                Nat::new(NatConfig::from_args(options).with_context(context)?)
                    .with_context(context)?,
            ),
            _ => Built::Other(nfkit_nf::build(name, options).with_context(context)?),
        })
    }

    pub fn nf(&mut self) -> &mut dyn NetworkFunction {
        match self {
            Built::Bridge(b) => b,
            Built::Lb(l) => l,
            Built::Nat(n) => n,
            Built::Other(o) => &mut **o,
        }
    }

    /// The NF's table, one line per entry (empty for NFs without one
    /// worth printing).
    pub fn table(&self) -> Vec<String> {
        match self {
            Built::Bridge(b) => b
                .entries()
                .iter()
                .map(|e| {
                    format!(
                        "mac {} port {} {}",
                        e.mac,
                        e.port,
                        if e.is_static { "static" } else { "learned" }
                    )
                })
                .collect(),
            Built::Lb(l) => l
                .backends()
                .iter()
                .map(|b| {
                    format!(
                        "backend {} mac {} {}",
                        b.ip,
                        b.mac,
                        if b.is_static { "static" } else { "heartbeat" }
                    )
                })
                .collect(),
            Built::Nat(n) => n
                .mappings()
                .map(|m| {
                    format!(
                        "mapping proto {} {}:{} -> {}:{}",
                        m.protocol,
                        m.internal_ip,
                        m.internal_port,
                        n.config().external_ip,
                        m.external_port
                    )
                })
                .collect(),
            Built::Other(_) => Vec::new(),
        }
    }
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

/// Counters of a run: per port, the port's own, packets sent there, and
/// packets the port refused.
type PortCounts = (Vec<QueueStats>, Vec<u64>, Vec<u64>);

pub fn run(args: &NfArgs) -> Result<NfSummary> {
    let specs: Vec<PortSpec> = args
        .ports
        .iter()
        .map(|s| s.parse().with_context(|| format!("port `{s}`")))
        .collect::<Result<_>>()?;
    let sim = all_sim(&specs);
    let options = match sim {
        true if args.nf_options.is_empty() => workload(&args.name, FLOWS)?.options,
        _ => args.nf_options.clone(),
    };
    let mut built = Built::new(&args.name, &options, specs.len())?;
    let count = built.nf().port_count();
    if count != specs.len() {
        bail!(
            "nf {} has {count} ports, {} were given (--lan, --wan, --port)",
            args.name,
            specs.len()
        );
    }
    let (ports, sent, refused) = if sim {
        run_sim(args, &mut built)?
    } else {
        run_ports(args, &specs, &mut built)?
    };
    finish(args, &mut built, ports, sent, refused)
}

/// The NF between ports opened through the command's registry.
fn run_ports(args: &NfArgs, specs: &[PortSpec], built: &mut Built) -> Result<PortCounts> {
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
        .map(|s| reg.open(s, &OpenOptions::default()))
        .collect::<Result<_, _>>()?;
    let mut ports: Vec<&mut dyn Port> = owned.iter_mut().map(|p| &mut **p as _).collect();
    let stop = crate::fwd::stop_flag(args.seconds);
    lab.start_load();
    let mut lines = Lines::new(&ports);
    let (name, every_second) = (args.name.as_str(), args.table_every_second);
    let (sent, refused) = match args.model {
        Model::Queue => run_queue(built, &mut ports, &stop, &mut lines, name, every_second)?,
        Model::Agent => run_agents(built, &mut ports, &stop, &mut lines, name, every_second)?,
    };
    lab.stop_load();
    for p in ports.iter_mut() {
        p.flush()?;
    }
    Ok((ports.iter().map(|p| p.stats()).collect(), sent, refused))
}

/// Print the summary and check the NF's books.
fn finish(
    args: &NfArgs,
    built: &mut Built,
    ports: Vec<QueueStats>,
    sent: Vec<u64>,
    send_dropped: Vec<u64>,
) -> Result<NfSummary> {
    let summary = NfSummary {
        stats: built.nf().stats().clone(),
        ports,
        sent,
        send_dropped,
        table: built.table(),
    };
    print_summary(args, &summary);
    let s = &summary.stats;
    if s.packets_in != s.forwarded + s.dropped_total() {
        bail!("the NF's counters do not add up: {s:?}");
    }
    Ok(summary)
}

/// Whether every port is a distinct `sim:N`.
fn all_sim(specs: &[PortSpec]) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    specs
        .iter()
        .all(|s| matches!(s, PortSpec::Sim(n) if seen.insert(*n)))
}

/// The NF on simulated 82599s with its workload feeding its input port.
fn run_sim(args: &NfArgs, built: &mut Built) -> Result<PortCounts> {
    let n = args.ports.len();
    let nics = SimNics::free_running(n)?;
    let w = workload(&args.name, FLOWS)?;
    for nic in &nics.nics {
        nic.wire().attach_sink();
    }
    let pump_stop = Arc::new(AtomicBool::new(false));
    let pump = {
        let wire = nics.nics[w.input.min(n - 1)].wire();
        let mut gen = TrafficGen::from_frames(w.frames);
        let stop = pump_stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if wire.rx_pending() < 256 {
                    gen.inject(&wire, 64);
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };
    let stop = crate::fwd::stop_flag(args.seconds);
    let device_stats = || -> Vec<QueueStats> {
        nics.devs
            .iter()
            .map(|d| as_port_stats(&d.stats()))
            .collect()
    };
    let mut last = device_stats();
    let mut at = Instant::now();
    let start = Instant::now();
    let refused = with_form(args.model.into(), &nics, built.nf(), |r| {
        let mut rounds = 0u32;
        while !stop.load(Ordering::Relaxed) {
            (r.round)(start.elapsed());
            rounds += 1;
            if rounds < CHECK_EVERY || at.elapsed() < Duration::from_secs(1) {
                continue;
            }
            rounds = 0;
            let now = device_stats();
            for (i, (old, new)) in last.iter().zip(&now).enumerate() {
                for l in stats::diff_lines(&args.ports[i], old, new, at.elapsed()) {
                    println!("{l}");
                }
            }
            println!("{}", nf_line(&args.name, &(r.stats)()));
            last = now;
            at = Instant::now();
        }
        (r.refused)()
    })?;
    pump_stop.store(true, Ordering::Relaxed);
    let _ = pump.join();
    let ports = device_stats();
    let sent = ports.iter().map(|p| p.tx_packets).collect();
    Ok((ports, sent, refused))
}

/// An 82599's counters as a port's.
fn as_port_stats(d: &nfkit_ixgbe::DeviceStats) -> QueueStats {
    QueueStats {
        rx_packets: d.rx_packets,
        rx_bytes: d.rx_bytes,
        rx_dropped: d.rx_missed + d.rx_no_descriptor,
        rx_errors: d.rx_crc_errors + d.rx_length_errors,
        tx_packets: d.tx_packets,
        tx_bytes: d.tx_bytes,
        ..QueueStats::default()
    }
}

fn print_summary(args: &NfArgs, s: &NfSummary) {
    for (i, p) in s.ports.iter().enumerate() {
        println!("{}", stats::summary(&args.ports[i], p));
        println!(
            "NF port {i} ({}): sent {}, refused by the port {}",
            args.ports[i], s.sent[i], s.send_dropped[i]
        );
    }
    println!("{}", nf_line(&args.name, &s.stats));
    println!(
        "every packet accounted for: in {} = forwarded {} + dropped {}",
        s.stats.packets_in,
        s.stats.forwarded,
        s.stats.dropped_total()
    );
    println!("table ({} entries):", s.table.len());
    for l in s.table.iter().take(TABLE_LINES) {
        println!("  {l}");
    }
    if s.table.len() > TABLE_LINES {
        println!("  ... {} more", s.table.len() - TABLE_LINES);
    }
}

/// Table entries printed in the summary.
const TABLE_LINES: usize = 64;

/// Rounds between checks of the clock for lines, the stop flag and port
/// errors.
const CHECK_EVERY: u32 = 256;

fn run_queue(
    built: &mut Built,
    ports: &mut [&mut dyn Port],
    stop: &AtomicBool,
    lines: &mut Lines,
    name: &str,
    every_second: bool,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let mut q = QueueNf::new(ports.len());
    let start = Instant::now();
    let mut rounds = 0u32;
    loop {
        q.poll(ports, built.nf(), start.elapsed());
        rounds += 1;
        if rounds < CHECK_EVERY {
            continue;
        }
        rounds = 0;
        if lines.due() {
            lines.print(ports, name, built.nf().stats());
            if every_second {
                print_table(built);
            }
        }
        check_ports(ports)?;
        if stop.load(Ordering::Relaxed) || ports.iter().all(|p| p.rx_done()) {
            break;
        }
    }
    let s = q.stats();
    Ok((s.sent.clone(), s.dropped.clone()))
}

fn run_agents(
    built: &mut Built,
    ports: &mut [&mut dyn Port],
    stop: &AtomicBool,
    lines: &mut Lines,
    name: &str,
    every_second: bool,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let mut adapter = AgentAdapter::new(ports.len());
    {
        let agent_nf = AgentNf::new(built.nf());
        let mut handlers = agent_nf.handlers();
        let start = Instant::now();
        let mut rounds = 0u32;
        loop {
            agent_nf.set_now(start.elapsed());
            adapter.poll(ports, &mut handlers);
            rounds += 1;
            if rounds < CHECK_EVERY {
                continue;
            }
            rounds = 0;
            if lines.due() {
                lines.print(ports, name, agent_nf.nf().stats());
            }
            check_ports(ports)?;
            if stop.load(Ordering::Relaxed) || ports.iter().all(|p| p.rx_done()) {
                break;
            }
        }
    }
    if every_second {
        print_table(built);
    }
    let s = adapter.stats();
    Ok((s.sent.clone(), s.dropped.clone()))
}

fn print_table(built: &Built) {
    let t = built.table();
    let shown = &t[..t.len().min(TABLE_LINES)];
    println!("table ({} entries): {}", t.len(), shown.join("; "));
}

fn check_ports(ports: &mut [&mut dyn Port]) -> Result<()> {
    for p in ports.iter_mut() {
        if let Some(e) = p.take_error() {
            return Err(e.into());
        }
    }
    Ok(())
}

/// Per-second lines from port counters, and the NF's.
struct Lines {
    last: Vec<QueueStats>,
    at: Instant,
}

impl Lines {
    fn new(ports: &[&mut dyn Port]) -> Lines {
        Lines {
            last: ports.iter().map(|p| p.stats()).collect(),
            at: Instant::now(),
        }
    }

    fn due(&self) -> bool {
        self.at.elapsed() >= Duration::from_secs(1)
    }

    fn print(&mut self, ports: &[&mut dyn Port], name: &str, nf: &NfStats) {
        let over = self.at.elapsed();
        for (p, last) in ports.iter().zip(self.last.iter_mut()) {
            let now = p.stats();
            for l in stats::diff_lines(p.name(), last, &now, over) {
                println!("{l}");
            }
            *last = now;
        }
        println!("{}", nf_line(name, nf));
        self.at = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn adapter_options_are_split_from_the_nfs() {
        let a = parse_args(&args(
            "nat --lan afpacket:a --ext-ip 10.0.1.1 --wan=afpacket:b --model agent --ports 1024-65535 --seconds 3",
        ))
        .unwrap();
        assert_eq!(a.name, "nat");
        assert_eq!(a.ports, ["afpacket:a", "afpacket:b"]);
        assert_eq!(a.model, Model::Agent);
        assert_eq!(a.seconds, Some(3));
        assert_eq!(a.nf_options, args("--ext-ip 10.0.1.1 --ports 1024-65535"));
        let b = parse_args(&args(
            "bridge --port null: --port null: --port null: --table",
        ))
        .unwrap();
        assert_eq!(b.ports.len(), 3);
        assert!(b.table_every_second);
        assert!(parse_args(&args("nat --lan null:")).is_err());
        assert!(parse_args(&args("nat --lan null: --wan null: --model x")).is_err());
        assert!(parse_args(&args("nat --lan")).is_err());
    }

    #[test]
    fn the_bridge_gets_its_port_count() {
        let mut b = Built::new("bridge", &[], 3).unwrap();
        assert_eq!(b.nf().port_count(), 3);
        let e = Built::new("nat", &args("--ext-ip nope"), 2).err().unwrap();
        assert!(format!("{e:#}").contains("ext-ip"), "{e:#}");
    }
}
