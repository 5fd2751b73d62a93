//! Summaries the commands print at the end (per-second lines come from
//! the one rate printer, `nfkit_port::rate`).

use nfkit_lab::demo::{DemoOptions, DemoReport};
use nfkit_lab::pktgen::PortResult;

/// `nfkit demo`: every frame accounted for.
pub fn demo_summary(opts: &DemoOptions, r: &DemoReport) {
    let elapsed = r.elapsed;
    println!(
        "\nSummary ({:?} model, {:.1} s):",
        opts.model,
        elapsed.as_secs_f64()
    );
    println!("  frames offered by the generators   {:>12}", r.offered);
    println!(
        "  refused at the wire (buffer full)  {:>12}",
        r.refused_at_wire
    );
    println!("  missed (no free RX descriptor)     {:>12}", r.missed);
    println!("  received by the driver             {:>12}", r.received);
    println!("  forwarded                          {:>12}", r.forwarded);
    println!("  dropped (transmit ring full)       {:>12}", r.tx_dropped);
    println!("  counted by the sinks               {:>12}", r.sunk);
    println!(
        "  forwarding rate                    {:>12.3} Mpps",
        r.forwarded as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!("  datasheet violations (strict mode) {:>12}", r.violations);
    // The rate above follows the model, starved on a small machine; this
    // does not.
    if let Some(c) = &r.driver {
        for l in c.lines() {
            println!("  {l}");
        }
    }
    match &r.lockstep {
        Some(Ok(c)) => {
            for l in c.lines() {
                println!("  {l}");
            }
        }
        Some(Err(e)) => println!("  driver cost, lock-step: not measured: {e}"),
        None => {}
    }
    println!(
        "  counters add up: {}",
        if r.adds_up() { "yes" } else { "NO" }
    );
}

/// `nfkit pktgen`: what each port sent (and received back, with `rx`).
pub fn pktgen_results(results: &[PortResult], rx: bool) {
    for r in results {
        print!("[Device: {}] sent {} packets", r.name, r.sent);
        if r.unsent > 0 {
            print!(
                " ({} more generated, not taken by the port at the end)",
                r.unsent
            );
        }
        if rx {
            print!(", received {} back", r.receiver.received);
            if r.dropped_by_port > 0 {
                print!(
                    ", dropped by the port {} (its own counters)",
                    r.dropped_by_port
                );
            }
            print!(
                ", lost {}, reordered {}; {}",
                r.lost(),
                r.receiver.reordered,
                r.receiver.latency_line()
            );
        }
        println!();
    }
}
