//! `nfkit bench classify`: cycles per packet of the rule-table
//! classifiers (ExactMatch, WildcardMatch, IPLookup, ACL, BPF) against
//! table size (1k, 64k, 1M entries where the class allows), same run
//! (issue 20).
//!
//! Each case builds the module through its Rust API, fills the table,
//! and feeds it batches of 32 packets drawn from 8192 distinct frames
//! that hit random entries, on one core; the time per packet (after a
//! warm-up) is converted to cycles with the CPU clock of /proc/cpuinfo.
//! The figure includes moving the packets back to the input (the
//! `Bypass` row). ACL is a linear scan as BESS's (no 1M case); BPF runs
//! its filters one after another (1, 64, 1024 filters).

use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_pipeline::counters::ModuleCounters;
use nfkit_pipeline::module::{Ctx, Module};
use nfkit_pipeline::modules::classify::{Field, FieldPos, Fields, MAX_FIELDS};
use nfkit_pipeline::modules::{Acl, AclRule, Bpf, Bypass, ExactMatch, IpLookup, WildcardMatch};
use std::collections::BTreeMap;
use std::time::Instant;

const FRAMES: usize = 8192;

pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// An Ethernet/IPv4/TCP SYN from `src`:1000 to `dst`:`dport` (checksums
/// are not looked at by the classifiers).
pub(crate) fn frame(src: u32, dst: u32, dport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&dst.to_be_bytes());
    f.extend_from_slice(&1000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    f
}

fn cpu_hz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|i| {
            i.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        })
        .map_or(1e9, |m| m * 1e6)
}

/// Nanoseconds per packet of `m` over `frames`.
pub(crate) fn measure(m: &mut dyn Module, frames: &[Vec<u8>], packets: usize) -> f64 {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "bench", FRAMES + 256, 2048).unwrap();
    let mut batches: Vec<Batch> = frames
        .chunks(32)
        .map(|c| {
            let mut b = Batch::new();
            for f in c {
                let mut p = pool.alloc().unwrap();
                p.copy_from(f).unwrap();
                let _ = b.push(p);
            }
            b
        })
        .collect();
    let mut outs: Vec<Batch> = (0..m.ogates()).map(|_| Batch::new()).collect();
    let mut trash = Batch::new();
    let counters = ModuleCounters::default();
    let nb = batches.len();
    let mut run = |m: &mut dyn Module, rounds: usize| {
        for r in 0..rounds {
            let b = &mut batches[r % nb];
            let mut ctx = Ctx::new(&mut outs, &mut trash, &[], &counters, 0, 0);
            m.process(&mut ctx, 0, b);
            for o in outs.iter_mut() {
                for p in o.drain() {
                    let _ = b.push(p);
                }
            }
            for p in trash.drain() {
                let _ = b.push(p);
            }
        }
    };
    run(m, nb * 2);
    let rounds = packets.div_ceil(32);
    let t = Instant::now();
    run(m, rounds);
    t.elapsed().as_nanos() as f64 / (rounds * 32) as f64
}

fn field(offset: usize, size: usize) -> Field {
    Field {
        pos: FieldPos::Offset(offset),
        size,
    }
}

fn key(v: &[u64]) -> [u64; MAX_FIELDS] {
    let mut k = [0; MAX_FIELDS];
    k[..v.len()].copy_from_slice(v);
    k
}

/// Run every case with `packets` packets each (fewer for the slow linear
/// ones); `quick` stops at 1k entries and 64 filters (a smoke run).
pub fn classify(packets: usize, quick: bool) -> anyhow::Result<()> {
    let hz = cpu_hz();
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 65_536, 1_048_576]
    };
    let mut rng = Rng(0x1234_5678_9abc_def1);
    println!("classify: cycles per packet (CPU clock {:.0} MHz, {packets} packets a case, batches of 32)", hz / 1e6);
    println!(
        "{:<14} {:>9} {:>9} {:>8}",
        "class", "entries", "cycles", "ns"
    );
    let row = |class: &str, n: usize, ns: f64| {
        println!("{class:<14} {n:>9} {:>9.1} {ns:>8.1}", ns * hz / 1e9);
    };
    let base_frames: Vec<Vec<u8>> = (0..FRAMES)
        .map(|i| frame(0x0a00_0001, 0x0b00_0000 + i as u32, 80))
        .collect();
    row(
        "Bypass",
        0,
        measure(&mut Bypass::new(1), &base_frames, packets),
    );

    for &n in sizes {
        // ExactMatch on (dst IP, dst port).
        let mut em = ExactMatch::new(
            Fields::new(vec![field(30, 4), field(36, 2)]),
            key(&[0xffff_ffff, 0xffff]),
            n,
            2,
        );
        for i in 0..n as u64 {
            em.add(key(&[0x0b00_0000 + i, 80]), 1)?;
        }
        let frames: Vec<Vec<u8>> = (0..FRAMES)
            .map(|_| {
                frame(
                    0x0a00_0001,
                    0x0b00_0000 + (rng.next() % n as u64) as u32,
                    80,
                )
            })
            .collect();
        row("ExactMatch", n, measure(&mut em, &frames, packets));

        // WildcardMatch on (src IP, dst IP, dst port), rules over 4 mask tuples.
        let mut wm = WildcardMatch::new(
            Fields::new(vec![field(26, 4), field(30, 4), field(36, 2)]),
            n,
            2,
        );
        let masks = [
            key(&[0, 0xffff_ffff, 0xffff]),
            key(&[0xffff_ff00, 0xffff_ffff, 0]),
            key(&[0xffff_0000, 0xffff_ff00, 0xffff]),
            key(&[0, 0xffff_ffff, 0]),
        ];
        for i in 0..n as u64 {
            let m = masks[(i % 4) as usize];
            let v = key(&[0x0a00_0000 + (i & 0xffff) * 256, 0x0b00_0000 + i, 80]);
            wm.add(v, m, (i % 7) as i64, 1)?;
        }
        let frames: Vec<Vec<u8>> = (0..FRAMES)
            .map(|_| {
                let i = rng.next() % n as u64;
                frame(
                    (0x0a00_0000 + (i & 0xffff) * 256 + 1) as u32,
                    0x0b00_0000 + i as u32,
                    80,
                )
            })
            .collect();
        row("WildcardMatch", n, measure(&mut wm, &frames, packets));

        // IPLookup: mostly /24s, some shorter, some longer (in 8k /24 blocks).
        let mut lpm = IpLookup::new(n, 32_768, 2);
        let mut routes = BTreeMap::new();
        let mut addrs = Vec::new();
        while routes.len() < n {
            let r = rng.next();
            let len = match r % 10 {
                0 => 16 + (r >> 8) % 8,
                1 => 25 + (r >> 8) % 8,
                _ => 24,
            } as u8;
            let base = if len > 24 {
                0x1400_0000 | ((r >> 16) as u32 % 8192) << 8 | (r >> 40) as u32 & 0xff
            } else {
                (r >> 16) as u32
            };
            let a = base & nfkit_nf::Ipv4Prefix::mask(len);
            if routes.insert((a, len), 1u16).is_none() {
                addrs.push(a);
            }
        }
        lpm.set_rules(routes)?;
        let frames: Vec<Vec<u8>> = (0..FRAMES)
            .map(|_| frame(0x0a00_0001, addrs[(rng.next() % n as u64) as usize], 80))
            .collect();
        row("IPLookup", n, measure(&mut lpm, &frames, packets));

        // ACL: a linear scan (as BESS's); 1M rules would take seconds per batch.
        if n <= 65_536 {
            let mut acl = Acl::new(n, 1);
            let rules: Vec<AclRule> = (0..n as u32)
                .map(|i| AclRule {
                    src: (0x0a00_0000 + i, u32::MAX),
                    dst: (0, 0),
                    src_port: 0,
                    dst_port: 80,
                    drop: false,
                })
                .collect();
            acl.add(&rules)?;
            let frames: Vec<Vec<u8>> = (0..FRAMES)
                .map(|_| {
                    frame(
                        0x0a00_0000 + (rng.next() % n as u64) as u32,
                        0x0b00_0001,
                        80,
                    )
                })
                .collect();
            row(
                "ACL",
                n,
                measure(
                    &mut acl,
                    &frames,
                    if n > 1000 { packets / 100 } else { packets },
                ),
            );
        }
    }
    // BPF: filters run one after another; at most 1024.
    let filters: &[usize] = if quick { &[1, 64] } else { &[1, 64, 1024] };
    for &n in filters {
        let mut bpf = Bpf::new(1024, 2);
        for i in 0..n {
            bpf.add(
                &format!("tcp dst port {} and net 11.0.0.0/8", 1000 + i),
                0,
                1,
            )
            .unwrap();
        }
        let frames: Vec<Vec<u8>> = (0..FRAMES)
            .map(|_| {
                frame(
                    0x0a00_0001,
                    0x0b00_0001,
                    1000 + (rng.next() % n as u64) as u16,
                )
            })
            .collect();
        row(
            "BPF",
            n,
            measure(
                &mut bpf,
                &frames,
                if n > 64 { packets / 20 } else { packets },
            ),
        );
    }
    Ok(())
}
