//! The debug tests of `cargo xtask test` with several test binaries at a
//! time (machines of 8 cores or more, [`crate::plan`]): every test
//! binary is built once (`cargo test --workspace --no-run`), then run
//! from its package's directory as `cargo test` would, up to `jobs` at a
//! time, the longest known first. Each binary's output goes to
//! `target/test-logs/` and is printed in one piece when it ends; the
//! failing binaries are named at the end, after every binary has run.
//! The doc tests run beside them (`cargo test --workspace --doc`).
//!
//! Not everything may overlap:
//! - [`EXCLUSIVE`]: binaries that use one machine-wide thing (the
//!   hugepage pool, which each grows and shrinks back, and DPDK's
//!   testpmd) run one at a time among themselves;
//! - [`ALONE`]: binaries that measure how much CPU a thread gets run
//!   with no other test binary.
//!
//! The root tests' namespaces, veths and TAPs are named by nfkit-testkit
//! with the test process's pid (`nk<pid>_...`), sockets and captures live
//! in per-test temporary directories, TCP ports are picked by the kernel
//! (`127.0.0.1:0`): binaries running side by side do not collide.

use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Groups of binaries that run one at a time (by source path).
const EXCLUSIVE: &[&[&str]] = &[&[
    "crates/hw/tests/hugepages.rs",
    "crates/virtio/tests/dpdk.rs",
    "crates/bench/tests/smoke.rs",
]];

/// Binaries run with no other test binary beside them: a spinning
/// thread's CPU share is checked.
const ALONE: &[&str] = &["crates/port/tests/idle_sleep.rs"];

/// The longest binaries (about 10 s or more on a loaded 2-core machine),
/// longest first: started first so that they do not end the run alone.
const LONGEST: &[&str] = &[
    "crates/cli/tests/real_nf.rs",
    "crates/bench/tests/smoke.rs",
    "crates/cli/tests/nat_rfc_real.rs",
    "crates/pipeline/tests/classifiers_real.rs",
    "crates/bench/src/lib.rs",
    "crates/pipeline/tests/vxlan_kernel.rs",
    "crates/port/tests/real_traffic.rs",
    "crates/cli/tests/metrics.rs",
    "crates/virtio/tests/dpdk.rs",
    "crates/ixgbe/tests/agent_model.rs",
];

/// A test binary cargo built.
#[derive(Debug, Clone)]
pub struct TestBin {
    /// Its source file, relative to the workspace (`crates/cli/tests/real_nf.rs`).
    pub src: String,
    pub exe: PathBuf,
    /// Its package's directory (where `cargo test` runs it).
    pub dir: PathBuf,
}

/// Build every test binary of the workspace; the binaries, in cargo's
/// order.
pub fn build(debug_env: &[(&'static str, String)]) -> Result<Vec<TestBin>> {
    let root = std::env::current_dir()?;
    let started = Instant::now();
    eprintln!("==> cargo test --workspace --no-run");
    let mut cmd = crate::cargo();
    cmd.envs(debug_env.iter().cloned()).args([
        "test",
        "--workspace",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    crate::to_lane_log(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo test --no-run")?;
    let mut bins = Vec::new();
    let out = child.stdout.take().context("cargo's stdout")?;
    // Read to the end (a read error ends the loop; cargo is waited for).
    for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
        if let Some(bin) = parse_artifact(&line, &root) {
            bins.push(bin);
        }
    }
    let status = child.wait()?;
    let took = started.elapsed();
    crate::record_stage("build the debug tests", took, status.success());
    eprintln!("<== cargo test --workspace --no-run: {status} in {took:.1?}");
    if !status.success() {
        bail!("building the debug tests failed ({status})");
    }
    Ok(bins)
}

/// A test executable from one line of cargo's JSON messages.
fn parse_artifact(line: &str, root: &Path) -> Option<TestBin> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
        return None;
    }
    let exe = PathBuf::from(v["executable"].as_str()?);
    let src = Path::new(v["target"]["src_path"].as_str()?);
    let dir = Path::new(v["manifest_path"].as_str()?).parent()?;
    Some(TestBin {
        src: src
            .strip_prefix(root)
            .unwrap_or(src)
            .to_string_lossy()
            .into_owned(),
        exe,
        dir: dir.to_path_buf(),
    })
}

/// The order binaries are started in: [`ALONE`] first (nothing else is
/// running yet), then [`LONGEST`], then cargo's order.
pub fn order(mut bins: Vec<TestBin>) -> Vec<TestBin> {
    let rank = |b: &TestBin| {
        if ALONE.contains(&b.src.as_str()) {
            0
        } else {
            match LONGEST.iter().position(|s| *s == b.src) {
                Some(i) => 1 + i,
                None => 1 + LONGEST.len(),
            }
        }
    };
    bins.sort_by_key(rank); // stable: cargo's order within a rank
    bins
}

fn group(src: &str) -> Option<usize> {
    EXCLUSIVE.iter().position(|g| g.contains(&src))
}

struct Running {
    name: String,
    child: Child,
    log: PathBuf,
    started: Instant,
    group: Option<usize>,
    alone: bool,
}

/// A job of the pool: a test binary, or the doc tests.
struct Job {
    name: String,
    cmd: Command,
    group: Option<usize>,
    alone: bool,
}

/// Run `bins` (and the doc tests) `jobs` at a time; fails naming every
/// failed binary, after all have run.
pub fn run(bins: Vec<TestBin>, jobs: usize, debug_env: &[(&'static str, String)]) -> Result<()> {
    let started = Instant::now();
    let logs = crate::target_base().join("test-logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let n = bins.len();
    let mut queue: VecDeque<Job> = VecDeque::new();
    for b in order(bins) {
        let mut cmd = Command::new(&b.exe);
        cmd.current_dir(&b.dir)
            .env("CARGO_MANIFEST_DIR", &b.dir)
            .env(NO_SKIP.0, NO_SKIP.1);
        queue.push_back(Job {
            group: group(&b.src),
            alone: ALONE.contains(&b.src.as_str()),
            name: b.src,
            cmd,
        });
    }
    // The doc tests compile as they run: started after the longest
    // binaries, so that they overlap them.
    let mut doc = crate::cargo();
    doc.envs(debug_env.iter().cloned())
        .env(NO_SKIP.0, NO_SKIP.1)
        .args(["test", "--workspace", "--doc"]);
    let at = queue
        .iter()
        .position(|j| !j.alone && !LONGEST.contains(&j.name.as_str()))
        .unwrap_or(queue.len());
    queue.insert(
        at,
        Job {
            name: "doc tests (cargo test --workspace --doc)".into(),
            cmd: doc,
            group: None,
            alone: false,
        },
    );
    eprintln!(
        "==> debug tests: {n} test binaries and the doc tests, {jobs} at a time (output in {})",
        logs.display()
    );
    let failed = run_jobs(queue, jobs, &logs)?;
    let took = started.elapsed();
    let passed = failed.is_empty();
    crate::record_stage(
        &format!("run the debug tests ({n} binaries + doc tests, {jobs} at a time)"),
        took,
        passed,
    );
    if !passed {
        bail!(
            "debug tests failed in {} binar{}: {}",
            failed.len(),
            if failed.len() == 1 { "y" } else { "ies" },
            failed.join(", ")
        );
    }
    eprintln!("<== debug tests: all passed in {took:.1?}");
    Ok(())
}

/// Run every job, at most `jobs` at a time, each with its output in a
/// file of `logs` printed when it ends; the names of the failed ones.
/// Every child is waited for.
fn run_jobs(mut queue: VecDeque<Job>, jobs: usize, logs: &Path) -> Result<Vec<String>> {
    let mut running: Vec<Running> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut times: Vec<(Duration, String)> = Vec::new();
    while !queue.is_empty() || !running.is_empty() {
        // Start what may start.
        while running.len() < jobs.max(1) {
            let pick = queue.iter().position(|j| {
                let alone_ok = if j.alone {
                    running.is_empty()
                } else {
                    !running.iter().any(|r| r.alone)
                };
                let group_ok = j.group.is_none() || !running.iter().any(|r| r.group == j.group);
                alone_ok && group_ok
            });
            let Some(i) = pick else { break };
            let Some(mut job) = queue.remove(i) else {
                break;
            };
            let log = logs.join(format!("{}.log", job.name.replace(['/', ' '], "_")));
            let spawned = std::fs::File::create(&log)
                .and_then(|f| Ok((f.try_clone()?, f)))
                .and_then(|(out, err)| {
                    job.cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()
                });
            match spawned {
                Ok(child) => running.push(Running {
                    name: job.name,
                    child,
                    log,
                    started: Instant::now(),
                    group: job.group,
                    alone: job.alone,
                }),
                Err(e) => {
                    crate::say(&format!("---- {}: cannot start: {e}", job.name));
                    failed.push(job.name);
                }
            }
        }
        // Collect what ended.
        let mut ended = false;
        let mut i = 0;
        while i < running.len() {
            let status = match running[i].child.try_wait() {
                Ok(Some(status)) if status.success() => Ok(()),
                Ok(Some(status)) => Err(status.to_string()),
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => Err(format!("cannot wait: {e}")),
            };
            let mut r = running.swap_remove(i);
            if status.is_err() {
                // Not left running if waiting failed.
                let _ = r.child.kill();
                let _ = r.child.wait();
            }
            let took = r.started.elapsed();
            let text = std::fs::read_to_string(&r.log).unwrap_or_default();
            let verdict = match status {
                Ok(_) => "ok".to_string(),
                Err(why) => {
                    failed.push(r.name.clone());
                    format!("FAILED ({why})")
                }
            };
            crate::say(&format!(
                "---- {}: {verdict} in {:.1} s\n{text}",
                r.name,
                took.as_secs_f64()
            ));
            times.push((took, r.name));
            ended = true;
        }
        if !ended {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    times.sort_by_key(|t| std::cmp::Reverse(t.0));
    let mut longest = String::from("the longest test binaries:");
    for (t, name) in times.iter().take(10) {
        longest.push_str(&format!("\n  {:>7.1} s  {name}", t.as_secs_f64()));
    }
    crate::say(&longest);
    Ok(failed)
}

const NO_SKIP: (&str, &str) = ("NFKIT_NO_SKIP", "1");

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(src: &str) -> TestBin {
        TestBin {
            src: src.into(),
            exe: PathBuf::from("/bin/true"),
            dir: PathBuf::from("."),
        }
    }

    #[test]
    fn cargo_json_gives_test_executables_only() {
        let root = Path::new("/w");
        let test = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/cli#nfkit@0.1.0","manifest_path":"/w/crates/cli/Cargo.toml","target":{"kind":["test"],"name":"real_nf","src_path":"/w/crates/cli/tests/real_nf.rs","test":true},"profile":{"test":true},"executable":"/w/target/debug/deps/real_nf-0123"}"#;
        let b = parse_artifact(test, root).unwrap();
        assert_eq!(b.src, "crates/cli/tests/real_nf.rs");
        assert_eq!(b.dir, Path::new("/w/crates/cli"));
        assert_eq!(b.exe, Path::new("/w/target/debug/deps/real_nf-0123"));
        let lib = r#"{"reason":"compiler-artifact","manifest_path":"/w/crates/hw/Cargo.toml","target":{"src_path":"/w/crates/hw/src/lib.rs"},"profile":{"test":false},"executable":null}"#;
        assert!(parse_artifact(lib, root).is_none());
        assert!(parse_artifact(r#"{"reason":"build-finished","success":true}"#, root).is_none());
        assert!(parse_artifact("not json", root).is_none());
    }

    fn sh(name: &str, script: &str, group: Option<usize>, alone: bool) -> Job {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        Job {
            name: name.into(),
            cmd,
            group,
            alone,
        }
    }

    #[test]
    fn the_pool_runs_everything_names_failures_and_keeps_groups_apart() {
        let dir = std::env::temp_dir().join(format!("xtask-pool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("trace");
        let t = trace.display();
        // Each job writes "+name" when it starts and "-name" when it ends.
        let step = |n: &str| format!("echo +{n} >> {t}; sleep 0.3; echo -{n} >> {t}");
        let jobs: VecDeque<Job> = [
            sh("alone", &step("alone"), None, true),
            sh("g1", &step("g1"), Some(0), false),
            sh("g2", &step("g2"), Some(0), false),
            sh("free", &step("free"), None, false),
            sh("fails", "echo its-output; exit 3", None, false),
        ]
        .into();
        let failed = run_jobs(jobs, 3, &dir).unwrap();
        assert_eq!(failed, ["fails"]);
        let trace = std::fs::read_to_string(&trace).unwrap();
        let lines: Vec<&str> = trace.lines().collect();
        assert_eq!(lines.len(), 8, "{trace}");
        // Whenever "alone" or a group member runs, nothing it excludes does.
        let mut now: Vec<&str> = Vec::new();
        for l in &lines {
            let (sign, name) = l.split_at(1);
            if sign == "+" {
                now.push(name);
            } else {
                now.retain(|n| *n != name);
            }
            assert!(!now.contains(&"alone") || now.len() == 1, "{trace}");
            assert!(!(now.contains(&"g1") && now.contains(&"g2")), "{trace}");
            assert!(now.len() <= 3, "{trace}");
        }
        let log = std::fs::read_to_string(dir.join("fails.log")).unwrap();
        assert!(log.contains("its-output"), "{log}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alone_first_then_longest_then_cargos_order() {
        let bins = vec![
            bin("crates/a/src/lib.rs"),
            bin("crates/cli/tests/nat_rfc_real.rs"),
            bin("crates/b/tests/x.rs"),
            bin("crates/port/tests/idle_sleep.rs"),
            bin("crates/cli/tests/real_nf.rs"),
        ];
        let names: Vec<String> = order(bins).into_iter().map(|b| b.src).collect();
        assert_eq!(
            names,
            [
                "crates/port/tests/idle_sleep.rs",
                "crates/cli/tests/real_nf.rs",
                "crates/cli/tests/nat_rfc_real.rs",
                "crates/a/src/lib.rs",
                "crates/b/tests/x.rs",
            ]
        );
        assert_eq!(
            group("crates/virtio/tests/dpdk.rs"),
            group("crates/bench/tests/smoke.rs")
        );
        assert!(group("crates/virtio/tests/dpdk.rs").is_some());
        assert!(group("crates/cli/tests/real_nf.rs").is_none());
    }
}
