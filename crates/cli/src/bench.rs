//! `nfkit bench X ...` runs `nfkit-bench X ...`: the benchmarks live in
//! their own crate (`crates/bench`) and binary, installed beside `nfkit`
//! by `cargo build --release`.

use anyhow::{Context, Result};
use std::path::PathBuf;

/// Where `nfkit-bench` is: beside this executable, else on `PATH`.
pub fn find() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent()?.join("nfkit-bench");
    if beside.is_file() {
        return Some(beside);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("nfkit-bench"))
            .find(|p| p.is_file())
    })
}

/// Run `nfkit-bench` with `args`; returns its exit code.
pub fn run(args: &[String]) -> Result<i32> {
    let Some(bench) = find() else {
        anyhow::bail!(
            "the benchmarks are a separate binary, nfkit-bench, not found beside nfkit or on PATH: \
             build it with `cargo build --release` at the workspace root (or \
             `cargo build --release -p nfkit-bench`) and run target/release/nfkit bench ..."
        );
    };
    let status = std::process::Command::new(&bench)
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    Ok(status.code().unwrap_or(1))
}
