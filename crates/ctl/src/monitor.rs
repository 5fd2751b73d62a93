//! `nfkit ctl monitor port|tc|pipeline`: per-interval rates from two
//! readings of the daemon's counters, in the units nfkit's commands
//! print (MoonGen/ixy lines for ports; Mpps and Mbit/s for classes and
//! edges). Each frame is a whole screen the command redraws in place.

use crate::client::Ctl;
use crate::show::{thousands, EdgeSnap, ModSnap, PipelineSnap};
use crate::CtlError;
use nfkit_port::rate::{line, Rate};
use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// What to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Port,
    Tc,
    Pipeline,
}

impl std::str::FromStr for What {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "port" => Ok(What::Port),
            "tc" => Ok(What::Tc),
            "pipeline" => Ok(What::Pipeline),
            _ => Err(format!("monitor `{s}`: expected port, tc or pipeline")),
        }
    }
}

#[derive(Clone, Default)]
struct PortSnap {
    name: String,
    rx: (u64, u64, u64),
    tx: (u64, u64, u64),
}

enum Snap {
    Ports(Vec<PortSnap>),
    Tcs(Vec<(String, String, u64, u64, u64)>),
    Pipeline(PipelineSnap),
}

fn read(ctl: &mut Ctl, what: What) -> Result<Snap, CtlError> {
    Ok(match what {
        What::Port => {
            let mut v = Vec::new();
            for p in ctl.ports()? {
                let s = ctl.port_stats(&p.name)?;
                let i = s.inc.unwrap_or_default();
                let o = s.out.unwrap_or_default();
                v.push(PortSnap {
                    name: p.name,
                    rx: (i.packets, i.bytes, i.dropped),
                    tx: (o.packets, o.bytes, o.dropped),
                });
            }
            Snap::Ports(v)
        }
        What::Tc => {
            let mut v = Vec::new();
            for c in ctl.tcs()?.into_iter().filter_map(|c| c.class) {
                if let Ok(s) = ctl.tc_stats(&c.name) {
                    v.push((c.name, c.policy, s.packets, s.bits, s.cycles));
                }
            }
            Snap::Tcs(v)
        }
        What::Pipeline => Snap::Pipeline(PipelineSnap::read(ctl)?),
    })
}

fn frame(old: &Snap, new: &Snap, dt: Duration) -> String {
    let secs = dt.as_secs_f64().max(1e-9);
    let mut out = String::new();
    match (old, new) {
        (Snap::Ports(a), Snap::Ports(b)) => {
            for p in b {
                let o = a
                    .iter()
                    .find(|x| x.name == p.name)
                    .cloned()
                    .unwrap_or_else(|| PortSnap {
                        name: p.name.clone(),
                        ..p.clone()
                    });
                let rx = Rate::new(p.rx.0 - o.rx.0.min(p.rx.0), p.rx.1 - o.rx.1.min(p.rx.1), dt);
                let tx = Rate::new(p.tx.0 - o.tx.0.min(p.tx.0), p.tx.1 - o.tx.1.min(p.tx.1), dt);
                let _ = writeln!(
                    out,
                    "{}, dropped {}/s",
                    line(&p.name, "RX", rx),
                    thousands(((p.rx.2.saturating_sub(o.rx.2)) as f64 / secs) as u64)
                );
                let _ = writeln!(
                    out,
                    "{}, dropped {}/s",
                    line(&p.name, "TX", tx),
                    thousands(((p.tx.2.saturating_sub(o.tx.2)) as f64 / secs) as u64)
                );
            }
            if b.is_empty() {
                out.push_str("(no ports)\n");
            }
        }
        (Snap::Tcs(a), Snap::Tcs(b)) => {
            let _ = writeln!(
                out,
                "{:<24} {:<13} {:>10} {:>10} {:>12} {:>10}",
                "CLASS", "POLICY", "Mpps", "Mbit/s", "cycles/s", "cycles/p"
            );
            let before: HashMap<&str, _> = a.iter().map(|t| (t.0.as_str(), t)).collect();
            for t in b {
                let o = before.get(t.0.as_str());
                let d = |now: u64, f: fn(&(String, String, u64, u64, u64)) -> u64| {
                    now.saturating_sub(o.map(|o| f(o)).unwrap_or(now))
                };
                let (p, bits, cyc) = (d(t.2, |x| x.2), d(t.3, |x| x.3), d(t.4, |x| x.4));
                let _ = writeln!(
                    out,
                    "{:<24} {:<13} {:>10.3} {:>10.1} {:>12} {:>10}",
                    t.0,
                    t.1,
                    p as f64 / secs / 1e6,
                    bits as f64 / secs / 1e6,
                    thousands((cyc as f64 / secs) as u64),
                    if p > 0 {
                        format!("{:.1}", cyc as f64 / p as f64)
                    } else {
                        "-".into()
                    }
                );
            }
        }
        (Snap::Pipeline(a), Snap::Pipeline(b)) => {
            let before: HashMap<(&str, u64), &EdgeSnap> = a
                .modules
                .iter()
                .flat_map(|m| m.edges.iter().map(move |e| ((m.name.as_str(), e.ogate), e)))
                .collect();
            let label = |m: &ModSnap, e: &EdgeSnap| {
                let o = before.get(&(m.name.as_str(), e.ogate));
                let p = e
                    .packets
                    .saturating_sub(o.map(|o| o.packets).unwrap_or(e.packets));
                let bytes = e
                    .bytes
                    .saturating_sub(o.map(|o| o.bytes).unwrap_or(e.bytes));
                let r = Rate::new(p, bytes, dt);
                format!("{:.3} Mpps {:.0} Mbit/s", r.mpps, r.mbit)
            };
            out.push_str(&b.render_text(&label));
        }
        _ => {}
    }
    out
}

/// Read every `interval` and hand each frame (rates over the last
/// interval, with a header line) to `show`; `count` frames, or until
/// `show` returns false or the daemon goes away.
pub fn run(
    ctl: &mut Ctl,
    what: What,
    interval: Duration,
    count: Option<u64>,
    mut show: impl FnMut(&str) -> bool,
) -> Result<(), CtlError> {
    let mut old = read(ctl, what)?;
    let mut at = Instant::now();
    let mut n = 0;
    while count.is_none_or(|c| n < c) {
        std::thread::sleep(interval.saturating_sub(at.elapsed()));
        let new = read(ctl, what)?;
        let now = Instant::now();
        let dt = now - at;
        n += 1;
        let head = format!(
            "nfkit ctl monitor {} ({}, every {:.1} s, frame {n}; Ctrl-C to stop)\n",
            match what {
                What::Port => "port",
                What::Tc => "tc",
                What::Pipeline => "pipeline",
            },
            ctl.target(),
            interval.as_secs_f64()
        );
        if !show(&(head + &frame(&old, &new, dt))) {
            break;
        }
        old = new;
        at = now;
    }
    Ok(())
}
