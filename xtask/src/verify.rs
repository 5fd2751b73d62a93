//! Verification steps of `cargo xtask test` beyond the ordinary tests:
//! the pool under loom, the agent protocol's model check, the data
//! path's path counts and miri.

use crate::{cargo, run};
use anyhow::Result;
use std::path::PathBuf;

/// A build directory of its own for a build with other flags, so the
/// ordinary one is not rebuilt afterwards.
fn target_dir(kind: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    base.join(kind)
}

/// The pool's shared paths under loom (`crates/hw/tests/loom_pool.rs`):
/// every interleaving within 3 preemptions, well under a minute once
/// built.
pub fn loom() -> Result<()> {
    run(
        "loom: the pool's shared paths under every interleaving",
        cargo()
            .env("RUSTFLAGS", "--cfg loom")
            .env("CARGO_TARGET_DIR", target_dir("loom"))
            .env("LOOM_MAX_PREEMPTIONS", "3")
            .args(["test", "--release", "-p", "nfkit-hw", "--test", "loom_pool"]),
    )
}

/// The agent protocol model-checked at full sizes (rings of 4 and 8,
/// 1 to 3 outputs; `crates/ixgbe/tests/agent_protocol.rs`), with every
/// broken variant caught, in release: state counts and times printed,
/// about 10 s once built.
pub fn model_check() -> Result<()> {
    run(
        "model check: the agent protocol, every state at full sizes",
        // The release stages' one selection (no second feature set).
        &mut crate::release_tests(
            &["agent_protocol"],
            &["--include-ignored", "--nocapture", "--test-threads", "1"],
        ),
    )
}

/// The data path's path counts (`cargo xtask paths`;
/// `crates/ixgbe/tests/paths.rs` with the `paths` feature, which records
/// every branch outcome): prints, per data-path function of both models,
/// the distinct sequences of branch outcomes per call beside TinyNF's
/// published counts, and fails if they differ from the table in
/// ARCHITECTURE.md. A debug build of the workspace's feature set (what
/// `cargo test --workspace` built), so only nfkit-ixgbe and the test are
/// compiled again (`-p nfkit-ixgbe` alone resolves other features for
/// libc, syn and more, and compiled their trees again).
pub fn paths() -> Result<()> {
    run(
        "path counts: the data path's branch outcomes per call",
        cargo().envs(crate::debug_env()?).args([
            "test",
            "--workspace",
            "--features",
            "nfkit-ixgbe/paths",
            "--test",
            "paths",
            "--",
            "--nocapture",
        ]),
    )
}

/// What miri runs: (what, `cargo miri test` arguments). Small sizes
/// under `cfg(miri)` (tables of at most 1k entries, the flow table's
/// proptest 80 operations a case, 3 segments of each GSO kind, frame
/// prefixes up to the end of the headers) and 4 proptest cases each
/// (miri runs about a million times slower; 16 cases of the packet views
/// alone took 5 minutes on a loaded 2-core machine).
///
/// `/usr/bin/time -v cargo xtask miri` on that machine (load about 9),
/// built: 56 s of CPU, 1 min 36 s wall (the runs 9.7 s pool, 57.7 s
/// packet views, 13.1 s flow table and Maglev, 8.6 s scheduler); before
/// the sizes above, the runs took 182 s wall (the flow table's 51 s).
/// From nothing built, the miri builds add about 4 minutes wall here.
const MIRI_RUNS: &[(&str, &[&str])] = &[
    (
        "the pool over simulated DMA (unsafe: borrowed handles, bulk moves)",
        &["-p", "nfkit-hw", "--lib", "--", "pool::tests"],
    ),
    ("packet views", &["-p", "nfkit-packet"]),
    (
        "the NF flow table and Maglev",
        &["-p", "nfkit-nf", "--lib", "--", "table::", "maglev::"],
    ),
    (
        "the scheduler (its short tests)",
        &[
            "-p",
            "nfkit-pipeline",
            "--test",
            "sched",
            "--",
            "a_burst_never_exceeds_the_bucket",
            "a_throttled_class_resumes",
            "usage_is_accounted",
            "tree_errors",
        ],
    ),
];

// Left out of miri, and why:
// - everything that reaches the kernel or a device (VFIO, hugepages,
//   pagemap, AF_XDP, AF_PACKET, TAP, namespaces, vhost-user sockets):
//   miri runs no such system calls;
// - the drivers against the 82599 and VirtIO device models: threads,
//   sleeps and up to millions of packets, hours under miri; the memory
//   they share (the pool over simulated DMA, descriptor rings) is covered
//   above through the pool's own tests;
// - the LPM (DIR-24-8): its first level alone has 2^24 entries, far past
//   the 1k-entry budget, and it has no unsafe code;
// - whole NFs and pipeline modules (crates/nf/tests, crates/pipeline
//   tests other than the scheduler's): large tables and real packet
//   streams, built from the pieces covered above;
// - the scheduler's long tests (shares and rate limits over 10^4 to
//   10^6 rounds, strict priority): minutes to hours each under miri; the
//   same code paths run in the short ones above;
// - the pool's loom tests: loom's own model replaces miri's there.

/// The nightly toolchain with miri, installed when missing (nightly is
/// used only for miri and fuzzing).
pub fn miri_deps() -> Result<()> {
    let have = std::process::Command::new("cargo")
        .args(["+nightly", "miri", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Ok(());
    }
    run(
        "rustup: nightly with miri",
        std::process::Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--component",
            "miri",
        ]),
    )
}

/// miri over the code whose logic does not touch real hardware
/// ([`MIRI_RUNS`]): built first, then run (each run's time is printed;
/// the longest are the packet views and the flow table's proptests).
pub fn miri() -> Result<()> {
    miri_deps()?;
    let miri_cargo = |args: &[&str], build_only: bool| {
        let mut c = std::process::Command::new("cargo");
        c.args(["+nightly", "miri", "test"])
            .env("CARGO_TARGET_DIR", target_dir("miri"))
            .env("PROPTEST_CASES", "4")
            .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
            // proptest asks for the working directory; nothing here
            // writes files.
            .env("MIRIFLAGS", "-Zmiri-disable-isolation");
        let (cargo_args, test_args) = match args.iter().position(|a| *a == "--") {
            Some(i) => (&args[..i], &args[i..]),
            None => (args, &[][..]),
        };
        c.args(cargo_args);
        if build_only {
            c.arg("--no-run");
        } else {
            c.args(test_args);
        }
        c
    };
    for (what, args) in MIRI_RUNS {
        run(&format!("miri build: {what}"), &mut miri_cargo(args, true))?;
    }
    for (what, args) in MIRI_RUNS {
        run(&format!("miri: {what}"), &mut miri_cargo(args, false))?;
    }
    Ok(())
}
