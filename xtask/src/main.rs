//! `cargo xtask`: nfkit's developer and CI tasks.
//!
//! - `cargo xtask test`: install what the tests need (Debian packages, only
//!   when root and missing), then run every check and test: fmt, the
//!   workspace tests built with clippy's lints (`debug_env`; they replay the fuzz regression inputs on
//!   stable), the pool under loom and the agent protocol's model check
//!   (`verify.rs`), the long release-mode tests, the QEMU guest tests,
//!   miri over the pure data-path code (nightly, `verify.rs`), a smoke
//!   run of `nfkit bench rfc2544 --quick`, every fuzz target briefly
//!   (nightly; 3 minutes in all, build included), and a 60-second soak.
//!   `test` also runs the daemon's Python client test (`pyclient.rs`).
//!   The stages run in lanes side by side on machines of 4 cores or more
//!   (`plan.rs`), the debug test binaries two or more at a time on 2 or
//!   more (`testrun.rs`); `NFKIT_LANES` and `NFKIT_TEST_JOBS` override that.
//! - `cargo xtask daemon-python`: only that test (a venv under target/).
//! - `cargo xtask deps`: only the installation step (and nightly with miri).
//! - `cargo xtask miri`: only the miri step.
//! - `cargo xtask paths`: the data path's path counts beside TinyNF's
//!   (`verify.rs`; `test` runs it too).
//! - `cargo xtask guest ...`: the QEMU guest harness (see `guest.rs`).
//! - `cargo xtask bench ...`: benchmark commands that print figures.
//! - `cargo xtask fuzz [SECONDS]`: every fuzz target for SECONDS each (`fuzz.rs`).
//! - `cargo xtask soak [--seconds N]`: the soak (`crates/soak`; `test` runs 60 s).

mod fuzz;
mod guest;
mod plan;
mod pyclient;
mod testrun;
mod verify;

use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// Debian packages the tests use, by the command (or, starting with `/`,
/// the file) that proves each present.
const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("ethtool", "ethtool"),
    ("ping", "iputils-ping"),
    ("curl", "curl"),
    ("python3", "python3"),
    ("setpriv", "util-linux"),
    ("iperf3", "iperf3"),
    ("socat", "socat"),
    ("tcpdump", "tcpdump"),
    // The BPF module compiles tcpdump filters with libpcap (`pcap` crate).
    ("/usr/lib/x86_64-linux-gnu/libpcap.so", "libpcap-dev"),
    // the font `nfkit bench rfc2544` draws its plots' text with
    (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "fonts-dejavu-core",
    ),
    ("tshark", "tshark"),
    // the daemon's --metrics test scrapes it with a real Prometheus server
    ("prometheus", "prometheus"),
    // `nfkit ctl monitor` is checked on a terminal (tmux capture-pane)
    ("tmux", "tmux"),
    ("traceroute", "traceroute"),
    ("valgrind", "valgrind"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
    ("modprobe", "kmod"),
    ("dpdk-testpmd", "dpdk-dev"),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_null.so",
        "librte-net-null23",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_mempool_ring.so",
        "librte-mempool-ring23",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_af_packet.so",
        "librte-net-af-packet23",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_af_xdp.so",
        "librte-net-af-xdp23",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_vhost.so",
        "librte-net-vhost23",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_virtio.so",
        "librte-net-virtio23",
    ),
    ("python3", "python3"),
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root()?;
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("deps") => install_deps().and_then(|()| verify::miri_deps()),
        Some("guest") => guest::main(&args[1..]),
        Some("fuzz") => fuzz::main(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("miri") => verify::miri(),
        Some("paths") => verify::paths(),
        Some("daemon-python") => pyclient::daemon_python(),
        Some("bench") => bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test [--quick]   install test dependencies (as root) and run every test\n  \
                 deps             only install the Debian packages the tests use\n  \
                 guest ...        the QEMU guest harness\n  \
                 miri             miri over the pure data-path code (nightly)\n  \
                 paths            path counts per data-path function, beside TinyNF's\n  \
                 bench ...        benchmarks (print figures)"
            );
            bail!("no command given")
        }
    }
}

fn project_root() -> Result<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    Ok(dir
        .parent()
        .context("xtask has a parent directory")?
        .to_path_buf())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn have(cmd: &str) -> bool {
    if cmd.starts_with('/') {
        return std::path::Path::new(cmd).exists();
    }
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Every stage run so far: (lane, name, time, passed), for the summary.
type StageRecord = (&'static str, String, Duration, bool);
static STAGES: std::sync::Mutex<Vec<StageRecord>> = std::sync::Mutex::new(Vec::new());

/// Each lane's (name, time, passed) once it ended.
static LANE_TIMES: std::sync::Mutex<Vec<(&'static str, Duration, bool)>> =
    std::sync::Mutex::new(Vec::new());

thread_local! {
    /// Where the commands of a background lane write (see [`run_plan`]);
    /// the first lane writes to the terminal.
    static LANE_LOG: std::cell::RefCell<Option<std::fs::File>> =
        const { std::cell::RefCell::new(None) };
    /// The lane this thread runs.
    static LANE_NAME: std::cell::Cell<&'static str> = const { std::cell::Cell::new("main") };
}

/// The build directory (`CARGO_TARGET_DIR`, else `target`).
pub fn target_base() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target"))
}

/// Print `text` where this thread's commands write: its lane's log, or
/// the terminal.
pub fn say(text: &str) {
    use std::io::Write;
    let written = LANE_LOG.with(|log| {
        log.borrow_mut()
            .as_mut()
            .map(|f| writeln!(f, "{text}").is_ok())
    });
    if written.is_none() {
        eprintln!("{text}");
    }
}

/// `[lane] ` in front of progress lines of a background lane.
pub fn lane_prefix() -> String {
    let in_lane = LANE_LOG.with(|l| l.borrow().is_some());
    if in_lane {
        format!("[{}] ", LANE_NAME.with(|n| n.get()))
    } else {
        String::new()
    }
}

/// Send `cmd`'s output to this thread's lane log, if it has one.
fn to_lane_log(cmd: &mut Command) -> &mut Command {
    LANE_LOG.with(|log| {
        if let Some(file) = log.borrow().as_ref() {
            if let (Ok(out), Ok(err)) = (file.try_clone(), file.try_clone()) {
                cmd.stdout(out).stderr(err);
            }
        }
    });
    cmd
}

fn record_stage(name: &str, took: Duration, passed: bool) {
    let lane = LANE_NAME.with(|n| n.get());
    if let Ok(mut stages) = STAGES.lock() {
        stages.push((lane, name.to_string(), took, passed));
    }
}

fn run(name: &str, cmd: &mut Command) -> Result<()> {
    let start = Instant::now();
    eprintln!("==> {}{name}", lane_prefix());
    let status = to_lane_log(cmd)
        .status()
        .with_context(|| format!("starting {name}"));
    let took = start.elapsed();
    let passed = status.as_ref().is_ok_and(|s| s.success());
    record_stage(name, took, passed);
    let status = status?;
    eprintln!("<== {}{name}: {status} in {took:.1?}", lane_prefix());
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// A table of every stage's time by lane, each lane's time, and the plan
/// (a failed stage is the last of its lane).
fn print_stage_summary(plan: &plan::Plan, total: Duration) {
    let Ok(stages) = STAGES.lock() else { return };
    let lanes = LANE_TIMES.lock().map(|l| l.clone()).unwrap_or_default();
    eprintln!("\nstage times:");
    for lane in &plan.lanes {
        if plan.lanes.len() > 1 {
            let time = lanes.iter().find(|(n, _, _)| *n == lane.name);
            let time = time.map_or("not run".to_string(), |(_, t, ok)| {
                format!(
                    "{:.1} s{}",
                    t.as_secs_f64(),
                    if *ok { "" } else { ", FAILED" }
                )
            });
            eprintln!("  lane {} ({time}):", lane.name);
        }
        for (_, name, took, passed) in stages.iter().filter(|s| s.0 == lane.name) {
            let mark = if *passed { "" } else { "  FAILED" };
            eprintln!("  {:>8.1} s  {name}{mark}", took.as_secs_f64());
        }
    }
    eprintln!("  {:>8.1} s  in all", total.as_secs_f64());
    eprintln!("{}", plan.describe());
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Install missing Debian packages when root; otherwise say what is missing.
fn install_deps() -> Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .filter(|(cmd, _)| !have(cmd))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        eprintln!("all test packages present");
        return Ok(());
    }
    if !is_root() {
        eprintln!(
            "not root: not installing {} (tests that need them will print SKIP)",
            missing.join(" ")
        );
        return Ok(());
    }
    run(
        "apt-get update",
        Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=600", "update", "-q"]),
    )?;
    run(
        "apt-get install",
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args([
                "-o",
                "DPkg::Lock::Timeout=600",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
            ])
            .args(&missing),
    )
}

fn test(args: &[String]) -> Result<()> {
    let started = Instant::now();
    let quick = args.iter().any(|a| a == "--quick");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let var = |name| std::env::var(name).ok();
    let plan = plan::plan(
        cores,
        var("NFKIT_LANES").as_deref(),
        var("NFKIT_TEST_JOBS").as_deref(),
        quick,
    )?;
    eprintln!("{}", plan.describe());
    let result = install_deps().and_then(|()| run_plan(&plan));
    print_stage_summary(&plan, started.elapsed());
    result?;
    eprintln!("all tests passed in {:.1?}", started.elapsed());
    Ok(())
}

/// Run every lane of `plan`, the first on this thread (the terminal),
/// the others on threads writing to `target/lane-NAME.log`. Every lane
/// is waited for (no cargo, test or fuzzer outlives `test`); a lane
/// stops at its first failed stage, the others go on, and every lane's
/// failure is reported (a background lane's log ends are printed).
fn run_plan(plan: &plan::Plan) -> Result<()> {
    run_lanes(&plan.lanes, &target_base(), |lane| run_lane(lane, plan))
}

/// [`run_plan`] with `run` for each lane, the logs in `log_dir`.
fn run_lanes(
    lanes: &[plan::Lane],
    log_dir: &std::path::Path,
    run: impl Fn(&plan::Lane) -> Result<()> + Sync,
) -> Result<()> {
    let (first, others) = lanes.split_first().context("a plan has a lane")?;
    let run = &run;
    let mut failures: Vec<String> = Vec::new();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for lane in others {
            let log = log_dir.join(format!("lane-{}.log", lane.name));
            let file = std::fs::create_dir_all(log_dir).and_then(|()| std::fs::File::create(&log));
            let handle = file.map(|file| {
                eprintln!(
                    "==> lane {} beside the others; its output: {}",
                    lane.name,
                    log.display()
                );
                scope.spawn(move || {
                    LANE_LOG.with(|l| *l.borrow_mut() = Some(file));
                    LANE_NAME.with(|n| n.set(lane.name));
                    run(lane)
                })
            });
            handles.push((lane.name, log, handle));
        }
        LANE_NAME.with(|n| n.set(first.name));
        if let Err(e) = run(first) {
            failures.push(format!("lane {}: {e:#}", first.name));
        }
        for (name, log, handle) in handles {
            let result = match handle {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the lane panicked"))),
                Err(e) => Err(anyhow::anyhow!("cannot create {}: {e}", log.display())),
            };
            if let Err(e) = result {
                print_log_end(&log, 150);
                failures.push(format!(
                    "lane {name}: {e:#} (its output: {})",
                    log.display()
                ));
            }
        }
    });
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{}", failures.join("; "))
    }
}

/// The last `lines` lines of a failed lane's log, on the terminal (CI
/// keeps only what the terminal saw).
fn print_log_end(log: &std::path::Path, lines: usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    eprintln!(
        "\n---- the last {} lines of {} ----\n{}\n---- end of {} ----",
        all.len() - from,
        log.display(),
        all[from..].join("\n"),
        log.display()
    );
}

fn run_lane(lane: &plan::Lane, plan: &plan::Plan) -> Result<()> {
    let started = Instant::now();
    let result = lane
        .stages
        .iter()
        .try_for_each(|stage| run_stage(*stage, plan));
    if let Ok(mut ends) = LANE_TIMES.lock() {
        ends.push((lane.name, started.elapsed(), result.is_ok()));
    }
    result
}

/// What every debug build of the workspace (the tests, the daemon for
/// Python, the path counts) sets, so that they share one build:
/// - line tables instead of full debug information (backtraces keep file
///   and line; the test binaries link faster and take less disk);
/// - clippy's lints with `-D warnings`, as `cargo clippy --workspace
///   --all-targets -- -D warnings` gives them: `clippy-driver` compiles
///   the workspace's own crates (`RUSTC_WORKSPACE_WRAPPER`, what `cargo
///   clippy` sets; `CLIPPY_ARGS`, how it passes `-D warnings`), so the
///   test build is the lint pass too. A separate `cargo clippy` checked
///   every dependency once more (99 s of a cold run on 2 cores).
pub fn debug_env() -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("CARGO_PROFILE_DEV_DEBUG", "line-tables-only".into()),
        ("RUSTC_WORKSPACE_WRAPPER", clippy_driver()?),
        (
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__".into(),
        ),
    ])
}

/// The toolchain's `clippy-driver` (the same `rustc` cargo uses).
fn clippy_driver() -> Result<String> {
    static DRIVER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
            let out = Command::new(rustc)
                .args(["--print", "sysroot"])
                .output()
                .ok()?;
            let sysroot = String::from_utf8(out.stdout).ok()?;
            let driver = std::path::Path::new(sysroot.trim()).join("bin/clippy-driver");
            driver
                .exists()
                .then(|| driver.to_string_lossy().into_owned())
        })
        .clone()
        .context("clippy-driver is not in the toolchain: `rustup component add clippy`")
}

/// The nightly toolchain with miri (miri and the fuzz targets use it),
/// installed once: in lanes side by side, the second asker waits for
/// the first's rustup.
fn nightly_toolchain() -> Result<()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    verify::miri_deps()
}

fn run_stage(stage: plan::Stage, plan: &plan::Plan) -> Result<()> {
    use plan::Stage::*;
    match stage {
        Fmt => run(
            "cargo fmt --check",
            cargo().args(["fmt", "--all", "--", "--check"]),
        ),
        // Every skip (no root, a tool missing) fails here (nfkit-testkit's
        // NFKIT_NO_SKIP): CI runs as root with the packages above, so a
        // test that cannot run is a failure, not a pass.
        DebugTests if plan.test_jobs <= 1 => run(
            "cargo test (debug)",
            cargo()
                .envs(debug_env()?)
                .env("NFKIT_NO_SKIP", "1")
                .args(["test", "--workspace"]),
        ),
        DebugTests => {
            let env = debug_env()?;
            let bins = testrun::build(&env)?;
            testrun::run(bins, plan.test_jobs, &env)
        }
        // The daemon from Python (grpcio), as pybess users drive it.
        Python => pyclient::daemon_python(),
        Loom => verify::loom(),
        ModelCheck => verify::model_check(),
        Paths => verify::paths(),
        // Long runs: 10 million packets through each driver model against
        // the free-running 82599 model, in an optimised build.
        Long => run(
            "long tests (release, 10 million packets per model)",
            release_tests(&["queue_model", "agent_model", "init"], &["free_running"])
                .env("NFKIT_LONG", "1")
                .env("NFKIT_NO_SKIP", "1"),
        ),
        Guest => {
            let started = Instant::now();
            let result = guest::run_guest_tests();
            record_stage(
                "guest tests (build, pci-uio, pci-vfio, vhost-user, lacp)",
                started.elapsed(),
                result.is_ok(),
            );
            result
        }
        // miri over packet views, tables, Maglev, the scheduler, the pool.
        Miri => nightly_toolchain().and_then(|()| verify::miri()),
        // One release build of the command, the benchmarks and the soak:
        // built together, their dependencies get one feature set and are
        // compiled once (built apart, the soak's differ, e.g. libc's and
        // syn's, and nearly its whole tree was compiled again).
        Release => release_build(),
        Rfc2544 => rfc2544_smoke(),
        // Every fuzz target briefly (nightly), 3 minutes in all with the
        // build.
        Fuzz => {
            nightly_toolchain()?;
            let started = Instant::now();
            let fuzz = fuzz::ci(fuzz::CI_BUDGET);
            record_stage(
                "fuzz --ci (build and every target)",
                started.elapsed(),
                fuzz.is_ok(),
            );
            fuzz
        }
        Soak => run_soak(&["--seconds".into(), "60".into()], true),
    }
}

/// Everything `test` builds in release, as one cargo selection: the
/// binaries it runs (nfkit, nfkit-bench, nfkit-soak) and nfkit-ixgbe's
/// test targets for the model check and the long runs. Selected together,
/// their dependencies get one feature set and compile once; the release
/// build, [`release_tests`] and the runs after it compile nothing twice.
/// (`cargo test --release -p nfkit-ixgbe` alone resolved other features
/// for libc, syn, serde and rand and compiled 59 crates again: 216 s of a
/// cold run here, beside 1,105 s for the binaries, on a loaded machine.)
const RELEASE_PACKAGES: &[&str] = &[
    "-p",
    "nfkit",
    "-p",
    "nfkit-bench",
    "-p",
    "nfkit-soak",
    "-p",
    "nfkit-ixgbe",
];
/// nfkit-ixgbe's test targets the release stages run.
const RELEASE_TESTS: &[&str] = &["agent_protocol", "queue_model", "agent_model", "init"];

/// The release binaries and test targets ([`RELEASE_PACKAGES`]).
fn release_build() -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--release"])
        .args(RELEASE_PACKAGES)
        .arg("--bins");
    for t in RELEASE_TESTS {
        cmd.args(["--test", t]);
    }
    run(
        "build nfkit, nfkit-bench, nfkit-soak and nfkit-ixgbe's model tests (release)",
        &mut cmd,
    )
}

/// `cargo test --release` over [`RELEASE_PACKAGES`] for the test targets
/// `tests`, with `args` after `--`.
pub fn release_tests(tests: &[&str], args: &[&str]) -> Command {
    let mut cmd = cargo();
    cmd.args(["test", "--release"]).args(RELEASE_PACKAGES);
    for t in tests {
        cmd.args(["--test", t]);
    }
    cmd.arg("--").args(args);
    cmd
}

fn release_bin(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
        .join("release")
        .join(name)
}

/// `nfkit bench rfc2544 --quick` against the NAT in both driver models
/// over vhost-user and the simulated 82599 (64-byte frames): a smoke
/// test that checks the figures and plots exist, judging none.
/// (Built by [`release_build`].)
fn rfc2544_smoke() -> Result<()> {
    let target = std::path::PathBuf::from(
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
    );
    let out = target.join("rfc2544-smoke");
    let _ = std::fs::remove_dir_all(&out);
    run(
        "nfkit bench rfc2544 --quick (smoke)",
        Command::new(release_bin("nfkit"))
            .args(["bench", "rfc2544", "--quick", "--size", "64"])
            .args(["--dut", "nf:nat@agent", "--dut", "nf:nat@queue"])
            .args(["--wiring", "vhost", "--wiring", "sim", "--out"])
            .arg(&out),
    )?;
    let json = std::fs::read_to_string(out.join("rfc2544.json"))
        .context("reading the rfc2544 smoke run's JSON")?;
    for want in [
        "\"status\": \"complete\"",
        "\"throughput\"",
        "\"latency\"",
        "\"frame_loss\"",
        "\"back_to_back\"",
        "\"wiring\": \"sim\"",
        "\"wiring\": \"vhost\"",
    ] {
        if !json.contains(want) {
            bail!("the rfc2544 smoke run's JSON has no {want}");
        }
    }
    for plot in [
        "throughput",
        "agents-vs-queues",
        "latency-vhost-nat_agent-64-1fl",
    ] {
        for ext in ["svg", "png"] {
            let f = out.join(format!("{plot}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            if len == 0 {
                bail!("the rfc2544 smoke run drew no {}", f.display());
            }
        }
    }
    Ok(())
}

/// `cargo xtask soak [--seconds N] [--check N]`: every workload of
/// `crates/soak` at full rate for N seconds (default 60), checked every
/// few seconds (packets, buffers, wrapped counters, resident memory).
fn soak(args: &[String]) -> Result<()> {
    release_build()?;
    run_soak(args, false)
}

/// The soak binary [`release_build`] built.
/// `no_skip`: under `cargo xtask test` a workload that cannot run (the
/// veth one needs root) fails like every other test (nfkit-testkit's rule).
fn run_soak(args: &[String], no_skip: bool) -> Result<()> {
    let mut cmd = Command::new(release_bin("nfkit-soak"));
    if no_skip {
        cmd.env("NFKIT_NO_SKIP", "1");
    }
    run("soak", cmd.args(args))
}

fn bench(args: &[String]) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["run", "--release", "-p", "nfkit-bench", "--"])
        .args(args);
    run("nfkit bench", &mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &'static str) -> plan::Lane {
        plan::Lane {
            name,
            stages: vec![plan::Stage::Fmt],
        }
    }

    #[test]
    fn lanes_write_their_commands_output_to_their_logs_and_all_failures_are_reported() {
        let dir = std::env::temp_dir().join(format!("xtask-lane-{}", std::process::id()));
        let lanes = [lane("first"), lane("echo"), lane("fails")];
        let ran = std::sync::Mutex::new(Vec::new());
        let err = run_lanes(&lanes, &dir, |l| {
            ran.lock().unwrap().push(l.name);
            match l.name {
                "echo" => run(
                    "echo in a lane",
                    Command::new("echo").arg("written-to-the-lane-log"),
                ),
                "fails" => run("false in a lane", &mut Command::new("false")),
                _ => bail!("the first lane's own failure"),
            }
        })
        .unwrap_err();
        let mut ran = ran.into_inner().unwrap();
        ran.sort();
        assert_eq!(ran, ["echo", "fails", "first"]);
        let text = std::fs::read_to_string(dir.join("lane-echo.log")).unwrap();
        assert!(text.contains("written-to-the-lane-log"), "{text}");
        let err = format!("{err:#}");
        assert!(
            err.contains("lane first: the first lane's own failure"),
            "{err}"
        );
        assert!(err.contains("lane fails: false in a lane failed"), "{err}");
        assert!(err.contains("lane-fails.log"), "{err}");
        assert!(!err.contains("lane echo"), "{err}");
        let stages = STAGES.lock().unwrap();
        assert!(stages
            .iter()
            .any(|s| s.0 == "echo" && s.1 == "echo in a lane" && s.3));
        drop(stages);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
