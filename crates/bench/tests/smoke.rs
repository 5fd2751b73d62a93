//! The comparison benchmarks run end to end as the real `nfkit-bench`
//! binary (what `nfkit bench` runs)
//! (root and dpdk-testpmd; else SKIP): every case prints a row with both
//! sides' figures and a ratio. Nothing here judges a figure (that is
//! what the benchmarks are for, in release builds); a debug build only
//! shows that the commands, testpmd's start-up and its parsing still
//! work, for the shortest `--seconds` they take.

use nfkit_testkit::{require_root, require_tool};
use std::process::Command;

/// One benchmark at a time: they pin the same core, and each reserves
/// hugepages and gives them back when it ends (two at once could leave
/// the pool at the size the other saw).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bench(args: &[&str]) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_nfkit-bench"))
        .args(args)
        .output()
        .expect("running nfkit-bench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "nfkit bench {args:?} failed:\n{text}");
    text
}

/// The table row of `case`: present, with figures on both sides.
fn row<'a>(text: &'a str, case: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.starts_with(case))
        .unwrap_or_else(|| panic!("no row for `{case}` in:\n{text}"));
    assert!(!line.contains("error"), "`{case}` failed:\n{text}");
    assert!(
        line.split_whitespace().any(|w| w.ends_with('x')),
        "`{case}` has no ratio:\n{text}"
    );
    line
}

#[test]
fn bench_ports_prints_every_case() {
    require_root!();
    require_tool!("dpdk-testpmd");
    let text = bench(&["ports", "--seconds", "1"]);
    for case in ["AF_XDP (veth)", "AF_PACKET (veth)", "null"] {
        row(&text, case);
    }
}

#[test]
fn bench_pipeline_prints_every_case() {
    require_root!();
    require_tool!("dpdk-testpmd");
    let text = bench(&["pipeline", "--seconds", "1"]);
    for case in [
        "pipeline Source -> Sink",
        "pipeline PortInc -> PortOut, 2 null",
    ] {
        row(&text, case);
    }
    let dpdk = text
        .lines()
        .find(|l| l.starts_with("dpdk-testpmd io"))
        .unwrap_or_else(|| panic!("no DPDK line in:\n{text}"));
    assert!(!dpdk.contains("error"), "{text}");
}

#[test]
fn traffic_prints_a_row_per_flow_count() {
    // No root or tool needed: the shaper runs in the pipeline alone.
    let text = bench(&["traffic", "--seconds", "1", "--quick"]);
    for flows in ["1", "10", "100", "1000", "4096"] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(flows)),
            "no row for {flows} flows:\n{text}"
        );
    }
    assert!(text.contains("targets: accuracy >= 0.999"), "{text}");
    for row in ["AdaptiveLB", "HashLB"] {
        assert!(
            text.lines().any(|l| l.starts_with(row)),
            "no {row} row:\n{text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().next() == Some("1000")
                && l.split_whitespace().count() == 3),
        "no FlowDirector row:\n{text}"
    );
}

#[test]
fn bench_classify_prints_every_class() {
    let text = bench(&["classify", "--quick", "--packets", "20000"]);
    for class in ["ExactMatch", "WildcardMatch", "IPLookup", "ACL", "BPF"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(class))
            .unwrap_or_else(|| panic!("no row for {class}:\n{text}"));
        let cycles: f64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(cycles > 0.0, "{line}");
    }
}

#[test]
fn bench_offloads_prints_both_paths_and_the_ratio() {
    require_root!();
    for t in ["iperf3", "ethtool", "ping"] {
        require_tool!(t);
    }
    let text = bench(&[
        "offloads",
        "--bytes",
        "4M",
        "--underlay",
        "wire",
        "--sends",
        "0",
    ]);
    for dir in ["A->B tx", "B->A rx"] {
        for path in ["kernel VXLAN", "nfkit VXLAN+TSO/LRO"] {
            let line = text
                .lines()
                .find(|l| l.contains(dir) && l.contains(path))
                .unwrap_or_else(|| panic!("no row {dir} {path}:\n{text}"));
            let gbps: f64 = line
                .split('|')
                .next()
                .and_then(|s| s.split_whitespace().last()?.parse().ok())
                .unwrap_or_else(|| panic!("no Gbit/s in {line}"));
            assert!(gbps > 0.0, "{line}");
        }
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("ratio nfkit/kernel, wire: tx (TSO) ") && l.contains("x bits")),
        "no ratio:\n{text}"
    );
    // The kernel's 64 KB frames reached TSO, and LRO coalesced.
    let count = |prefix: &str, word: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{text}"));
        let w: Vec<&str> = line.split_whitespace().collect();
        let i = w.iter().position(|x| *x == word).unwrap();
        w[i + 1].parse().unwrap()
    };
    assert!(count("nfkit wire A->B", "cut") > 0, "{text}");
    assert!(count("nfkit wire B->A", "made") > 0, "{text}");
    // The 82599 half's lock-step entry (callgrind measures it in
    // release: `nfkit bench offloads` or `drivers`).
    let out = bench(&["bench-tso-lockstep", "--sends", "3"]);
    assert!(!out.contains("refused"), "{out}");
}
