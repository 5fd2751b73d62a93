//! `cargo xtask fuzz [SECONDS]`: run every cargo-fuzz target of
//! `crates/virtio/fuzz` (what a vhost-user frontend can send the backend:
//! socket messages, ring contents) for SECONDS each (default 60), on the
//! nightly toolchain, installing cargo-fuzz first if it is missing.
//!
//! A target that finds a crash fails the command; libFuzzer leaves the
//! input in `crates/virtio/fuzz/artifacts/TARGET/`. Replay it with
//! `cargo +nightly fuzz run TARGET ARTIFACT` (from `crates/virtio`) and
//! add it to the crate's tests once fixed.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The crate whose `fuzz/` directory holds the targets.
const FUZZ_CRATE: &str = "crates/virtio";
const DEFAULT_SECONDS: u64 = 60;

pub fn main(args: &[String]) -> Result<()> {
    let seconds = match args.first() {
        None => DEFAULT_SECONDS,
        Some(s) => s
            .parse()
            .with_context(|| format!("usage: cargo xtask fuzz [SECONDS]; `{s}` is not a number"))?,
    };
    ensure_cargo_fuzz()?;
    let targets = list_targets()?;
    if targets.is_empty() {
        bail!("{FUZZ_CRATE}/fuzz has no fuzz targets");
    }
    let mut failed = Vec::new();
    for t in &targets {
        let started = Instant::now();
        eprintln!("==> fuzz {t} for {seconds} s");
        let status = fuzz_cargo()
            .args(["fuzz", "run", t, "--"])
            .arg(format!("-max_total_time={seconds}"))
            // The message target starts a thread per connection.
            .arg("-rss_limit_mb=4096")
            .status()
            .with_context(|| format!("running cargo fuzz run {t}"))?;
        eprintln!("<== fuzz {t}: {status} in {:.1?}", started.elapsed());
        if !status.success() {
            failed.push(t.clone());
        }
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets found crashes: {} (inputs in {FUZZ_CRATE}/fuzz/artifacts/)",
            failed.join(", ")
        );
    }
    eprintln!("fuzzing: {} targets, no crash", targets.len());
    Ok(())
}

/// `cargo +nightly` in the fuzzed crate, with its own target directory
/// (sanitizer builds share nothing with the workspace's).
fn fuzz_cargo() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly").current_dir(FUZZ_CRATE);
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        c.env("CARGO_TARGET_DIR", PathBuf::from(dir).join("fuzz"));
    }
    c
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
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz"])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    Ok(())
}

fn list_targets() -> Result<Vec<String>> {
    let out = fuzz_cargo()
        .args(["fuzz", "list"])
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
