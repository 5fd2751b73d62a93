//! Verification steps of `cargo xtask test` beyond the ordinary tests:
//! the pool under loom and the agent protocol's model check.

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
        cargo().args([
            "test",
            "--release",
            "-p",
            "nfkit-ixgbe",
            "--test",
            "agent_protocol",
            "--",
            "--include-ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ]),
    )
}
