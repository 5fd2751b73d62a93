//! `nfkit nf` on simulated 82599s (no root): real 82599 agents and the
//! queue loop with each NF's workload, and clear errors for bad use.

use std::process::Command;

fn nfkit(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nfkit"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The `[NF: ...]` line's `forwarded N`.
fn forwarded(out: &str) -> u64 {
    out.lines()
        .rev()
        .find(|l| l.starts_with("[NF:"))
        .and_then(|l| l.split("forwarded ").nth(1))
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn every_nf_on_simulated_82599s_in_both_models() {
    for (nf, model) in [("nat", "agent"), ("lb", "queue"), ("router", "agent")] {
        let (ok, out) = nfkit(&[
            "nf",
            nf,
            "--lan",
            "sim:0",
            "--wan",
            "sim:1",
            "--model",
            model,
            "--seconds",
            "1",
        ]);
        assert!(ok, "{out}");
        assert!(out.contains("every packet accounted for"), "{out}");
        assert!(
            forwarded(&out) > 0,
            "{nf} {model} forwarded nothing:\n{out}"
        );
    }
}

#[test]
fn bad_use_is_a_clear_error() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["nf", "nope", "--lan", "null:", "--wan", "null:"],
            "unknown network function",
        ),
        (&["nf", "nat", "--lan", "null:"], "at least two ports"),
        (
            &[
                "nf", "nat", "--ext-ip", "10.0.0.1", "--port", "null:", "--port", "null:",
                "--port", "null:",
            ],
            "has 2 ports, 3 were given",
        ),
        (
            &["nf", "nat", "--lan", "null:", "--wan", "null:"],
            "--ext-ip",
        ),
        (
            &[
                "nf", "nat", "--lan", "null:", "--wan", "null:", "--model", "x",
            ],
            "agent or queue",
        ),
    ];
    for (args, want) in cases {
        let (ok, out) = nfkit(args);
        assert!(
            !ok && out.contains(want),
            "{args:?}: expected `{want}`:\n{out}"
        );
    }
    let (ok, out) = nfkit(&["nf", "--help"]);
    assert!(ok && out.contains("router"), "{out}");
}
