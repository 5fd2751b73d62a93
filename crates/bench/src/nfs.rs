//! `nfkit bench nfs`: every NF of `nfkit-nf` on both driver models over
//! simulated 82599s, with 60,000 flows (90% of the NFs' default 65,536
//! table capacity, the load TinyNF measured its NFs with), as
//! `nfkit bench drivers` does for TinyNF's trivial functions:
//!
//! - **Mpps per core** against the free-running model (one thread for the
//!   NF; the model's device threads and the generator compete with it on
//!   a small machine);
//! - **instructions per packet** from a lock-step run under callgrind,
//!   counting only `nf_round_agent`/`nf_round_queue` of `nfkit-lab`
//!   (driver, adapter
//!   and NF code; the model's own work, including inside a register write
//!   to its BAR, is excluded).
//!
//! Both models run the same NF code with two ports, an agent (or a queue
//! pair) per input port and outputs to both ports (the router sends ICMP
//! errors back out of the input). Tables are filled with one packet per
//! flow before measuring, so the figures are for the steady state.
//!
//! The set-up ([`SimNics`], [`with_form`]) is `nfkit-lab`'s, which also
//! runs the crafted-packet scenarios of every form in its tests.

use anyhow::{bail, Context, Result};
use nfkit_ixgbe_model::TrafficGen;
use nfkit_lab::forms::{with_form, SimNics};
use nfkit_lab::Feeder;
use nfkit_nf::workload::{prepared, workload, FLOWS};
use nfkit_nf::NFS;
use nfkit_port::Model;
use std::time::{Duration, Instant};

/// Forwarding rate of NF `name` in `model` against the free-running
/// model, over `seconds` after a warm-up.
pub fn mpps(model: Model, name: &str, seconds: f64) -> Result<f64> {
    let w = workload(name, FLOWS)?;
    let mut nf = prepared(name, &w)?;
    let nics = SimNics::free_running(2)?;
    let output = 1 - w.input;
    let sink = nics.nics[output].wire().attach_sink();
    let feeder = Feeder::start(
        nics.nics[w.input].wire(),
        TrafficGen::from_frames(w.frames.clone()),
    );
    let warmup = Duration::from_millis(300);
    let start = Instant::now();
    let measured = with_form(model, &nics, &mut *nf, |r| {
        let mut base = None;
        let mut done = 0u64;
        loop {
            let now = start.elapsed();
            done += (r.round)(now) as u64;
            if base.is_none() && now >= warmup {
                base = Some((done, Instant::now()));
            }
            if now.as_secs_f64() >= seconds + warmup.as_secs_f64() {
                return base.map(|(b, at)| (done - b, at.elapsed()));
            }
        }
    })?;
    drop(feeder);
    let (packets, over) = measured.context("the run was shorter than its warm-up")?;
    if sink.frames() == 0 {
        bail!("nf {name}: nothing came out of port {output}");
    }
    Ok(packets as f64 / over.as_secs_f64() / 1e6)
}

/// The lock-step run measured under callgrind: `packets` frames of NF
/// `name`'s workload. Returns the packets that came out.
pub fn lockstep(model: Model, name: &str, packets: u64) -> Result<u64> {
    let w = workload(name, FLOWS)?;
    let mut nf = prepared(name, &w)?;
    let nics = SimNics::lockstep(2)?;
    let output = 1 - w.input;
    let sink = nics.nics[output].wire().attach_sink();
    let wire = nics.nics[w.input].wire();
    let mut gen = TrafficGen::from_frames(w.frames.clone());
    with_form(model, &nics, &mut *nf, |r| {
        let (mut handled, mut idle) = (0u64, 0);
        let mut tick = 0u64;
        while handled < packets && idle < 1000 {
            let want = (packets - handled).min(128) as usize;
            if wire.rx_pending() < 256 {
                gen.inject(&wire, want);
            }
            nics.step();
            tick += 1;
            // Virtual time: 1 µs per round, read once per round.
            let n = (r.round)(Duration::from_micros(tick)) as u64;
            nics.step();
            handled += n;
            idle = if n == 0 { idle + 1 } else { 0 };
        }
    })?;
    nics.step();
    Ok(sink.frames())
}

/// Instructions per packet of the NF rounds, from callgrind (`None`
/// without valgrind).
pub fn instructions_per_packet(model: Model, name: &str, packets: u64) -> Result<Option<f64>> {
    let packets = packets.to_string();
    crate::callgrind::per_packet(
        "nf_round_",
        &[
            "bench-nf-lockstep",
            "--model",
            model.name(),
            "--nf",
            name,
            "--packets",
            &packets,
        ],
    )
}

/// One NF's figures on one model.
#[derive(Debug, Clone, Copy)]
struct Row {
    mpps: f64,
    instructions: Option<f64>,
}

/// The whole table, for the NFs in `only` (all when empty).
pub fn nfs(seconds: f64, packets: u64, only: &[String]) -> Result<()> {
    let have_valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if cfg!(debug_assertions) {
        println!(
            "note: a debug build; run `cargo build --release` and target/release/nfkit bench nfs for meaningful figures"
        );
    }
    println!("{FLOWS} flows per NF, 60-byte frames, one direction");
    println!(
        "{:<9} {:<6} {:>14} {:>16}",
        "NF", "model", "Mpps per core", "instr./packet"
    );
    let (mut faster, mut leaner, mut compared) = (0, 0, 0);
    for (name, _) in NFS
        .iter()
        .filter(|(n, _)| only.is_empty() || only.iter().any(|o| o == n))
    {
        let mut rows = Vec::new();
        for model in Model::CHOICES {
            let row = Row {
                mpps: mpps(model, name, seconds)?,
                instructions: if have_valgrind {
                    instructions_per_packet(model, name, packets)?
                } else {
                    None
                },
            };
            println!(
                "{:<9} {:<6} {:>14.3} {:>16}",
                name,
                model.name(),
                row.mpps,
                row.instructions
                    .map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "no valgrind".into())
            );
            rows.push(row);
        }
        compared += 1;
        faster += usize::from(rows[0].mpps > rows[1].mpps);
        if let (Some(a), Some(q)) = (rows[0].instructions, rows[1].instructions) {
            leaner += usize::from(a < q);
        }
    }
    println!(
        "agent model vs queue model: faster on {faster} of {compared} NFs, fewer instructions per packet on {leaner} of {compared}"
    );
    println!(
        "{}",
        if leaner == compared && compared > 0 {
            "as TinyNF found: the agent model beats the queue model on real NFs (by instructions per packet)"
        } else {
            "unlike TinyNF's finding, the agent model does not beat the queue model on every NF here"
        }
    );
    Ok(())
}
