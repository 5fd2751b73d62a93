//! `cargo xtask daemon-python` (also part of `cargo xtask test`): the
//! daemon driven by a Python gRPC client, as BESS users' pybess scripts
//! drive bessd. Makes a venv under the target directory (grpcio and
//! grpcio-tools from PyPI), generates the Python stubs from nfkit's own
//! `.proto` files into the target directory (never committed), builds the
//! `nfkit-daemon` binary (with the workspace's debug tests, which start it
//! too) and runs `crates/daemon/tests/python/test_daemon.py`.

use crate::{cargo, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// grpcio-tools brings a matching grpcio and protobuf.
const GRPC_TOOLS: &str = "grpcio-tools==1.85.1";

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn python_has(py: &Path, module: &str) -> bool {
    Command::new(py)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn daemon_python() -> Result<()> {
    let target = std::fs::canonicalize(target_dir()).unwrap_or_else(|_| target_dir());
    std::fs::create_dir_all(&target)?;
    let venv = target.join("pyenv");
    let py = venv.join("bin").join("python");
    if !py.exists() {
        run(
            "python venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )
        .context("making a Python venv (Debian: apt-get install python3-venv)")?;
    }
    if !python_has(&py, "grpc_tools") || !python_has(&py, "grpc") {
        run(
            "pip install grpcio grpcio-tools",
            Command::new(&py).args(["-m", "pip", "install", "-q", GRPC_TOOLS]),
        )?;
    }
    let stubs = target.join("pystubs");
    let _ = std::fs::remove_dir_all(&stubs);
    std::fs::create_dir_all(&stubs)?;
    let proto = Path::new("crates/daemon/proto");
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [proto.to_path_buf(), proto.join("ports")] {
        for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "proto") {
                files.push(p);
            }
        }
    }
    run(
        "Python stubs from crates/daemon/proto",
        Command::new(&py)
            .args(["-m", "grpc_tools.protoc", "-I"])
            .arg(proto)
            .arg(format!("--python_out={}", stubs.display()))
            .arg(format!("--grpc_python_out={}", stubs.display()))
            .args(&files),
    )?;
    // The daemon binary the workspace's test build makes (its tests start
    // it): after `cargo xtask test`'s debug tests nothing is compiled
    // here. (`cargo build -p nfkit-daemon` resolved other features for
    // tokio, prost and more, compiled them again and replaced the binary.)
    run(
        "the debug test build (nfkit-daemon with it)",
        cargo()
            .envs(crate::debug_env()?)
            .args(["test", "--workspace", "--no-run", "--quiet"]),
    )?;
    let bin = target.join("debug").join("nfkit-daemon");
    if !bin.exists() {
        bail!("{} was not built", bin.display());
    }
    run(
        "Python client test (crates/daemon/tests/python)",
        Command::new(&py)
            .arg("crates/daemon/tests/python/test_daemon.py")
            .env("NFKIT_DAEMON", &bin)
            .env("PYTHONPATH", &stubs)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}
