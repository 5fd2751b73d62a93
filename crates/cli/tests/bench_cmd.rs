//! `nfkit bench` starts `nfkit-bench` from beside `nfkit`; without it,
//! it says how to build it and fails.

use std::process::Command;

#[test]
fn bench_without_nfkit_bench_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("nfkit");
    std::fs::copy(env!("CARGO_BIN_EXE_nfkit"), &alone).unwrap();
    let out = Command::new(&alone)
        .args(["bench", "drivers"])
        .env("PATH", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("nfkit-bench"), "{err}");
    assert!(err.contains("cargo build --release"), "{err}");
}
