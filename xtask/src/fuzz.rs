//! `cargo xtask fuzz [SECONDS]`: build every cargo-fuzz target of the
//! top-level `fuzz/` crate once (nightly, AddressSanitizer; cargo-fuzz is
//! installed first if missing), then run each for SECONDS (default 60),
//! one after the other, and print each target's executions per second.
//! `cargo xtask test` calls [`ci`] (also `cargo xtask fuzz --ci`), which
//! shares a fixed time budget (build included) among the targets.
//!
//! Each target starts from its committed inputs in
//! `fuzz/regressions/TARGET/` and grows a corpus in `fuzz/corpus/TARGET/`
//! (git-ignored, never committed). A target that finds a crash, hang or
//! leak fails the command; libFuzzer leaves the input in
//! `fuzz/artifacts/TARGET/`. Fix the bug, then add the (minimised:
//! `cargo +nightly fuzz tmin TARGET INPUT`) input to
//! `fuzz/regressions/TARGET/`, which `cargo test` replays on stable
//! (`crates/fuzz-harness/tests/regressions.rs`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FUZZ_DIR: &str = "fuzz";
const DEFAULT_SECONDS: u64 = 60;
/// What `cargo xtask test` gives the fuzz stage in all, the build and
/// the installation of cargo-fuzz included: a smoke run (each target
/// starts from its regression inputs and runs a few seconds); the
/// searching is `cargo xtask fuzz SECONDS`.
pub const CI_BUDGET: Duration = Duration::from_secs(180);
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

pub fn main(args: &[String]) -> Result<()> {
    if args.first().is_some_and(|a| a == "--ci") {
        // What `cargo xtask test` runs.
        return ci(CI_BUDGET);
    }
    let seconds = match args.first() {
        None => DEFAULT_SECONDS,
        Some(s) => s.parse().with_context(|| {
            format!("usage: cargo xtask fuzz [SECONDS | --ci]; `{s}` is not a number")
        })?,
    };
    let targets = build()?;
    run_all(&targets, |_| seconds)
}

/// Build and run every target within `budget` in all (the build's time
/// included; each target gets an equal share of what is left, at least
/// one second: an ASan rebuild after a change to a core crate can take
/// most of the budget on a loaded machine).
pub fn ci(budget: Duration) -> Result<()> {
    let started = Instant::now();
    let targets = build()?;
    let left = budget
        .saturating_sub(started.elapsed())
        .saturating_sub(Duration::from_secs(5));
    let each = (left.as_secs() / targets.len().max(1) as u64).max(1);
    eprintln!(
        "fuzz: built in {:.1?}; {} targets, {each} s each",
        started.elapsed(),
        targets.len()
    );
    run_all(&targets, |_| each)?;
    eprintln!("fuzz: all targets in {:.1?}", started.elapsed());
    Ok(())
}

fn run_all(targets: &[String], seconds: impl Fn(&str) -> u64) -> Result<()> {
    let mut failed = Vec::new();
    let mut table = Vec::new();
    for t in targets {
        let s = seconds(t);
        match run_one(t, s)? {
            Ok(stats) => table.push((t.clone(), stats)),
            Err(report) => {
                eprintln!("{report}");
                failed.push(t.clone());
            }
        }
    }
    eprintln!(
        "{:<20} {:>12} {:>10} {:>9}",
        "target", "executions", "execs/s", "seconds"
    );
    for (t, s) in &table {
        eprintln!(
            "{t:<20} {:>12} {:>10} {:>9.1}",
            s.execs, s.per_sec, s.seconds
        );
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (inputs in {FUZZ_DIR}/artifacts/TARGET/)",
            failed.join(", ")
        );
    }
    eprintln!("fuzzing: {} targets, no finding", targets.len());
    Ok(())
}

struct Stats {
    execs: u64,
    per_sec: u64,
    seconds: f64,
}

/// Run one target's binary for `seconds`; its statistics, or the tail of
/// libFuzzer's report if it found something.
fn run_one(target: &str, seconds: u64) -> Result<Result<Stats, String>> {
    let bin = target_dir().join(TRIPLE).join("release").join(target);
    let corpus = Path::new(FUZZ_DIR).join("corpus").join(target);
    let seeds = Path::new(FUZZ_DIR).join("regressions").join(target);
    let artifacts = Path::new(FUZZ_DIR).join("artifacts").join(target);
    std::fs::create_dir_all(&corpus)?;
    std::fs::create_dir_all(&artifacts)?;
    let mut cmd = Command::new(&bin);
    cmd.arg(&corpus);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    cmd.arg(format!("-max_total_time={seconds}"))
        .arg("-timeout=10")
        .arg("-rss_limit_mb=4096")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()));
    eprintln!("==> fuzz {target} for {seconds} s");
    let started = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let elapsed = started.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&out.stderr);
    let stat = |name: &str| -> u64 {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    if !out.status.success() {
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Ok(Err(format!(
            "<== fuzz {target}: {} after {elapsed:.1} s\n{}",
            out.status,
            tail.join("\n")
        )));
    }
    let stats = Stats {
        execs: stat("number_of_executed_units"),
        per_sec: stat("average_exec_per_sec"),
        seconds: elapsed,
    };
    eprintln!(
        "<== fuzz {target}: {} executions, {} per second",
        stats.execs, stats.per_sec
    );
    Ok(Ok(stats))
}

/// Where cargo-fuzz builds: its own directory (sanitizer builds share
/// nothing with the workspace's), under CARGO_TARGET_DIR when set.
fn target_dir() -> PathBuf {
    match std::env::var("CARGO_TARGET_DIR") {
        Ok(dir) => PathBuf::from(dir).join("fuzz"),
        Err(_) => Path::new(FUZZ_DIR).join("target"),
    }
}

fn fuzz_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly")
        .current_dir(".")
        .env("CARGO_TARGET_DIR", absolute(&target_dir()));
    c
}

fn absolute(p: &Path) -> PathBuf {
    std::env::current_dir()
        .map(|d| d.join(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

/// Build every target once; their names.
fn build() -> Result<Vec<String>> {
    ensure_cargo_fuzz()?;
    let targets = list_targets()?;
    if targets.is_empty() {
        bail!("{FUZZ_DIR}/ has no fuzz targets");
    }
    let started = Instant::now();
    eprintln!(
        "==> {}cargo fuzz build ({} targets)",
        crate::lane_prefix(),
        targets.len()
    );
    let status = crate::to_lane_log(fuzz_cargo().args(["fuzz", "build", "--fuzz-dir", FUZZ_DIR]))
        .status()
        .context("running cargo fuzz build")?;
    eprintln!(
        "<== {}cargo fuzz build: {status} in {:.1?}",
        crate::lane_prefix(),
        started.elapsed()
    );
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    Ok(targets)
}

fn ensure_cargo_fuzz() -> Result<()> {
    let nightly = Command::new("cargo")
        .args(["+nightly", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !nightly {
        bail!("the nightly toolchain is missing: `rustup toolchain install nightly --profile minimal`");
    }
    let have = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        return Ok(());
    }
    eprintln!("==> cargo install cargo-fuzz");
    let status = crate::to_lane_log(Command::new("cargo").args(["install", "cargo-fuzz"]))
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    Ok(())
}

fn list_targets() -> Result<Vec<String>> {
    let out = fuzz_cargo()
        .args(["fuzz", "list", "--fuzz-dir", FUZZ_DIR])
        .output()
        .context("running cargo fuzz list")?;
    if !out.status.success() {
        bail!(
            "cargo fuzz list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}
