//! The pipeline's rule-table classifiers (BESS's ExactMatch,
//! WildcardMatch, ACL, IPLookup, L2Forward, BPF) under arbitrary module
//! commands and frames, and the classic BPF checker and interpreter
//! under arbitrary programs.

use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::modules::cbpf::{Insn, Program};
use nfkit_pipeline::modules::{BuildEnv, Registry};

const NAMES: &[&str] = &[
    "gate",
    "fields",
    "values",
    "masks",
    "priority",
    "rules",
    "src_ip",
    "dst_ip",
    "src_port",
    "dst_port",
    "drop",
    "established",
    "prefix",
    "prefix_len",
    "entries",
    "addr",
    "addrs",
    "filters",
    "filter",
    "value_int",
    "value_bin",
    "base",
    "count",
    "gate_count",
];
const COMMANDS: &[&str] = &[
    "add",
    "delete",
    "clear",
    "set_default_gate",
    "lookup",
    "populate",
];
const STRINGS: &[&str] = &[
    "10.0.0.0/8",
    "10.0.0.1",
    "0.0.0.0",
    "10.0.0.1/8",
    "1.2.3.4/33",
    "",
    "02:00:00:00:00:01",
    "ff:ff:ff:ff:ff:ff",
    "tcp",
    "udp port 53",
    "ip[8] < 64",
    "tcp port",
    "arp or vlan",
];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn int(&mut self) -> u64 {
        match self.byte() % 4 {
            0 => self.byte() as u64 % 8,
            1 => self.byte() as u64,
            2 => u64::from_le_bytes([
                self.byte(),
                self.byte(),
                self.byte(),
                self.byte(),
                0,
                0,
                0,
                0,
            ]),
            _ => u64::from_le_bytes(std::array::from_fn(|_| self.byte())),
        }
    }
    fn value(&mut self, depth: u32) -> Value {
        match self.byte() % if depth > 2 { 3 } else { 5 } {
            0 => Value::Int(self.int()),
            1 => Value::Str(STRINGS[self.byte() as usize % STRINGS.len()].to_string()),
            2 => Value::Float(self.byte() as f64 / 7.0),
            3 => Value::List(
                (0..self.byte() % 5)
                    .map(|_| self.value(depth + 1))
                    .collect(),
            ),
            _ => self.record(depth + 1),
        }
    }
    fn record(&mut self, depth: u32) -> Value {
        Value::Map(
            (0..self.byte() % 5)
                .map(|_| {
                    (
                        NAMES[self.byte() as usize % NAMES.len()].to_string(),
                        self.value(depth),
                    )
                })
                .collect(),
        )
    }
}

const CLASSES: &[(&str, &str)] = &[
    ("ExactMatch", "e"),
    ("WildcardMatch", "w"),
    ("ACL", "a"),
    ("IPLookup", "i"),
    ("L2Forward", "l"),
    ("BPF", "b"),
];

fn args(class: &str) -> Args {
    let fields = Value::List(vec![
        Value::Map(vec![
            ("offset".into(), Value::Int(30)),
            ("num_bytes".into(), Value::Int(4)),
        ]),
        Value::Map(vec![
            ("offset".into(), Value::Int(36)),
            ("num_bytes".into(), Value::Int(2)),
        ]),
    ]);
    let mut a = vec![("gates", Value::Int(4))];
    match class {
        "ExactMatch" | "WildcardMatch" => {
            a.push(("fields", fields));
            a.push(("size", Value::Int(64)));
        }
        "ACL" => a.push(("max_rules", Value::Int(64))),
        "IPLookup" => {
            a.push(("max_rules", Value::Int(64)));
            a.push(("max_tbl8s", Value::Int(4)));
        }
        "L2Forward" => a.push(("size", Value::Int(64))),
        _ => a.push(("max_filters", Value::Int(8))),
    }
    Args::from_pairs(&a)
}

/// Every rule-table classifier driven with arbitrary module commands
/// (argument trees built from the input, mostly well-formed names and
/// values so the checks behind them are reached) and arbitrary frames:
/// no panic, every frame leaves by a gate or is counted as dropped.
pub fn classifiers(data: &[u8]) {
    let mut input = Input(data);
    let mut h = Harness::new();
    let env = BuildEnv {
        ports: Default::default(),
        pool: h.pool().clone(),
    };
    let registry = Registry::default();
    let (class, _) = CLASSES[input.byte() as usize % CLASSES.len()];
    let mut m = registry
        .build(class, &mut args(class), &env)
        .expect("valid arguments");
    // IPLookup rebuilds a 32 MiB table per change: few commands.
    for _ in 0..input.byte() % 6 {
        let cmd = COMMANDS[input.byte() as usize % COMMANDS.len()];
        let mut a = match Args::from_value("arg", input.record(0)) {
            Ok(a) => a,
            Err(_) => continue,
        };
        let _ = m.command(cmd, &mut a);
    }
    let frames: Vec<Vec<u8>> = input
        .0
        .chunks(97)
        .take(64)
        .enumerate()
        .map(|(i, c)| {
            let mut f = c.to_vec();
            // Mostly Ethernet/IPv4 so the lookups are reached.
            if i % 2 == 0 && f.len() >= 34 {
                f[12] = 8;
                f[13] = 0;
                f[14] = 0x45;
            }
            f
        })
        .collect();
    let n = frames.len() as u64;
    let out = h.run(&mut *m, 0, &frames);
    let sent: u64 = out.iter().map(|g| g.len() as u64).sum();
    assert_eq!(
        sent + h.counters().2,
        n,
        "{class}: every frame sent or dropped"
    );
}

/// The classic BPF checker and interpreter: any program the checker
/// accepts runs to a return on any packet, never panics.
pub fn cbpf(data: &[u8]) {
    let (prog, packet) = data.split_at(
        data.len()
            .min(8 * (data.first().copied().unwrap_or(0) as usize % 64 + 1)),
    );
    let insns: Vec<Insn> = prog
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1] & 0x01]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    if let Ok(p) = Program::new(insns) {
        let _ = p.run(packet);
    }
}
