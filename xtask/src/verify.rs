//! Verification steps of `cargo xtask test` beyond the ordinary tests:
//! the pool under loom (and, added with their steps, the agent protocol's
//! model check and miri).

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
