//! `nfkit nf NAME --lan SPEC --wan SPEC [--model agent|queue]
//! [--seconds N] [--table] [NF options...]`: the arguments and the
//! summary; the run is [`nfkit_lab::nf::run`].

use anyhow::{bail, Context, Result};
use nfkit_lab::nf::{nf_line, NfArgs, NfSummary, TABLE_LINES};
use nfkit_nf::nf_list;
use nfkit_port::{rate, Model};

pub const USAGE: &str = "\
usage: nfkit nf NAME --lan SPEC --wan SPEC [--model agent|queue] [--seconds N] [--table] [NF options]
       nfkit nf bridge --port SPEC --port SPEC [--port SPEC ...] [...]
  --lan SPEC, --wan SPEC   NF ports 0 and 1 (sim:N, pci:ADDR, afpacket:IF, afxdp:IF, tap:NAME, pcap:..., null:)
  --port SPEC              one more port (repeatable; the bridge's ports)
  --model agent|queue      driver model (default queue)
  --seconds N              stop after N seconds (default: Ctrl-C, or when every source is done)
  --poll                   pure polling (default: sleep after --idle-us N, 200, without a packet)
  --table                  print the NF's table every second too (bridge MACs, LB backends, NAT mappings)
  --cores LIST             the data path's core, DPDK style (2, 0-3): pinned to the first (default: where it starts)
With only sim:N ports the NF runs on simulated 82599s (real 82599 agents with --model agent)
and its benchmark workload (60,000 flows) feeds its input port; without NF options the
workload's are used: nfkit nf lb --lan sim:0 --wan sim:1 --model agent --seconds 5";

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
        force: false,
        cores: None,
        idle: nfkit_port::IdleOptions::default(),
    };
    let mut it = rest.iter();
    let mut seen: Vec<&str> = Vec::new();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if matches!(key, "--lan" | "--wan" | "--model" | "--seconds" | "--cores") {
            if seen.contains(&key) {
                bail!("`{key}` is given twice");
            }
            seen.push(key);
        }
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
                out.model = match value()?.parse() {
                    Ok(m @ (Model::Agent | Model::Queue)) => m,
                    Ok(m) => bail!("--model {m}: expected agent or queue"),
                    Err(e) => bail!("{e}"),
                }
            }
            "--seconds" => {
                let v = value()?;
                out.seconds = Some(v.parse().with_context(|| format!("--seconds {v}"))?);
            }
            "--table" => out.table_every_second = true,
            "--force" => out.force = true,
            "--cores" => out.cores = Some(nfkit_lab::cores::parse(&value()?)?),
            "--poll" => out.idle = nfkit_port::IdleOptions::polling(),
            "--idle-us" => {
                let v = value()?;
                let us: u64 = v.parse().with_context(|| format!("--idle-us {v}"))?;
                out.idle.sleep_after = Some(std::time::Duration::from_micros(us));
            }
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

pub fn print_summary(args: &NfArgs, s: &NfSummary) {
    for (i, p) in s.ports.iter().enumerate() {
        println!("{}", rate::summary(&args.ports[i], p));
        println!(
            "NF port {i} ({}): sent {}, refused by the port {}",
            args.ports[i], s.sent[i], s.send_dropped[i]
        );
    }
    println!("{}", nf_line(&args.name, &s.stats));
    let t = s.totals();
    println!(
        "every packet accounted for: in {} = forwarded {} + dropped {} ({} of them refused by a port)",
        t.packets_in, t.forwarded, t.dropped, t.refused
    );
    println!("table ({} entries):", s.table.len());
    for l in s.table.iter().take(TABLE_LINES) {
        println!("  {l}");
    }
    if s.table.len() > TABLE_LINES {
        println!("  ... {} more", s.table.len() - TABLE_LINES);
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
        // issue 14 item 8: the second silently won
        for twice in [
            "nat --lan null: --lan null: --wan null:",
            "nat --lan null: --wan null: --seconds 1 --seconds=2",
        ] {
            let e = parse_args(&args(twice)).unwrap_err().to_string();
            assert!(e.contains("given twice"), "{e}");
        }
    }
}
