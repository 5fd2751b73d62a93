//! `cargo xtask`: nfkit's developer and CI tasks.
//!
//! - `cargo xtask test`: install what the tests need (Debian packages, only
//!   when root and missing), then run every check and test: fmt, clippy,
//!   the workspace tests (they replay the fuzz regression inputs on
//!   stable), the pool under loom and the agent protocol's model check
//!   (`verify.rs`), the long release-mode tests, the QEMU guest tests,
//!   miri over the pure data-path code (nightly, `verify.rs`), a smoke
//!   run of `nfkit bench rfc2544 --quick`, every fuzz target briefly
//!   (nightly; 4 minutes in all, build included), and a 60-second soak.
//!   `test` also runs the daemon's Python client test (`pyclient.rs`).
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
mod pyclient;
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

/// Every stage run so far: (name, time, passed), for the summary.
static STAGES: std::sync::Mutex<Vec<(String, Duration, bool)>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    /// Where the commands of a background lane write (see [`lane`]); the
    /// main lane writes to the terminal.
    static LANE_LOG: std::cell::RefCell<Option<std::fs::File>> =
        const { std::cell::RefCell::new(None) };
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
    if let Ok(mut stages) = STAGES.lock() {
        stages.push((name.to_string(), took, passed));
    }
}

fn run(name: &str, cmd: &mut Command) -> Result<()> {
    let start = Instant::now();
    eprintln!("==> {name}");
    let status = to_lane_log(cmd)
        .status()
        .with_context(|| format!("starting {name}"));
    let took = start.elapsed();
    let passed = status.as_ref().is_ok_and(|s| s.success());
    record_stage(name, took, passed);
    let status = status?;
    eprintln!("<== {name}: {status} in {took:.1?}");
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// A table of every stage's time (the last one failed if `test` did).
fn print_stage_summary(total: Duration) {
    let Ok(stages) = STAGES.lock() else { return };
    eprintln!("\nstage times:");
    for (name, took, passed) in stages.iter() {
        let mark = if *passed { "" } else { "  FAILED" };
        eprintln!("  {:>8.1} s  {name}{mark}", took.as_secs_f64());
    }
    eprintln!("  {:>8.1} s  in all", total.as_secs_f64());
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
    let result = test_stages(args);
    print_stage_summary(started.elapsed());
    result?;
    eprintln!("all tests passed in {:.1?}", started.elapsed());
    Ok(())
}

/// Whether `test` runs the nightly stages (miri, then the fuzz targets)
/// in a second lane beside the others: they share nothing with them
/// (their own toolchain and target directories) and are mostly
/// single-threaded, so on a machine of 4 cores or more they overlap the
/// debug tests instead of adding about 8 minutes at the end. On 2 cores
/// they would only slow the load-sensitive tests down. `NFKIT_LANES=1`
/// or `2` overrides the choice.
fn two_lanes() -> bool {
    match std::env::var("NFKIT_LANES").as_deref() {
        Ok("1") => false,
        Ok("2") => true,
        _ => std::thread::available_parallelism().is_ok_and(|n| n.get() >= 4),
    }
}

/// The nightly stages: miri over the pure data-path code, then every
/// fuzz target briefly (4 minutes in all, build included).
fn nightly_stages() -> Result<()> {
    verify::miri()?;
    let started = Instant::now();
    let fuzz = fuzz::ci(Duration::from_secs(240));
    record_stage(
        "fuzz --ci (build and every target)",
        started.elapsed(),
        fuzz.is_ok(),
    );
    fuzz
}

/// Run `stages` on a thread whose commands write to `log` (the file is
/// printed where it is if the lane fails).
fn lane(
    log: std::path::PathBuf,
    stages: fn() -> Result<()>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    eprintln!(
        "==> nightly lane (miri, fuzz) beside the others; its output: {}",
        log.display()
    );
    Ok(std::thread::spawn(move || {
        LANE_LOG.with(|l| *l.borrow_mut() = Some(file));
        stages().map_err(|e| {
            e.context(format!(
                "nightly lane failed; its output is in {}",
                log.display()
            ))
        })
    }))
}

fn test_stages(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    install_deps()?;
    let nightly = if !quick && two_lanes() {
        Some(lane(
            std::path::PathBuf::from(
                std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
            )
            .join("nightly-lane.log"),
            nightly_stages,
        )?)
    } else {
        None
    };
    let main_result = main_stages(quick, nightly.is_none());
    // The lane is always waited for: its cargo and fuzzer processes must
    // not outlive `test`, and both lanes' failures are reported.
    let lane = match nightly {
        Some(handle) => handle
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the nightly lane panicked"))),
        None => Ok(()),
    };
    match (main_result, lane) {
        (Err(m), Err(l)) => Err(anyhow::anyhow!("{m:#}; and the {l:#}")),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

fn main_stages(quick: bool, with_nightly: bool) -> Result<()> {
    run(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
    run(
        "cargo clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // Every skip (no root, a tool missing) fails here (nfkit-testkit's
    // NFKIT_NO_SKIP): CI runs as root with the packages above, so a test
    // that cannot run is a failure, not a pass.
    run(
        "cargo test (debug)",
        cargo()
            .env("NFKIT_NO_SKIP", "1")
            .args(["test", "--workspace"]),
    )?;
    // The daemon from Python (grpcio), as pybess users drive it.
    pyclient::daemon_python()?;
    verify::loom()?;
    verify::model_check()?;
    verify::paths()?;
    if !quick {
        // Long runs: 10 million packets through each driver model against
        // the free-running 82599 model, in an optimised build.
        run(
            "long tests (release, 10 million packets per model)",
            cargo()
                .env("NFKIT_LONG", "1")
                .env("NFKIT_NO_SKIP", "1")
                .args([
                    "test",
                    "--release",
                    "-p",
                    "nfkit-ixgbe",
                    "--",
                    "free_running",
                ]),
        )?;
        guest::run_guest_tests()?;
        // miri over packet views, tables, Maglev, the scheduler, the pool
        // (here, or in the nightly lane: [`two_lanes`]).
        if with_nightly {
            verify::miri()?;
        }
        // One release build of the command, the benchmarks and the soak:
        // built together, their dependencies get one feature set and are
        // compiled once (built apart, the soak's differ, e.g. libc's and
        // syn's, and nearly its whole tree was compiled again).
        release_build()?;
        rfc2544_smoke()?;
        // Every fuzz target briefly (nightly), 4 minutes in all with the
        // build (here, or in the nightly lane).
        if with_nightly {
            fuzz::ci(Duration::from_secs(240))?;
        }
        run_soak(&["--seconds".into(), "60".into()], true)?;
    }
    Ok(())
}

/// The release binaries `test` runs: nfkit, nfkit-bench, nfkit-soak.
fn release_build() -> Result<()> {
    run(
        "build nfkit, nfkit-bench and nfkit-soak (release)",
        cargo().args([
            "build",
            "--release",
            "-p",
            "nfkit",
            "-p",
            "nfkit-bench",
            "-p",
            "nfkit-soak",
        ]),
    )
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

    fn echo_stage() -> Result<()> {
        run(
            "echo in a lane",
            Command::new("echo").arg("written-to-the-lane-log"),
        )
    }

    fn failing_stage() -> Result<()> {
        run("false in a lane", &mut Command::new("false"))
    }

    #[test]
    fn a_lane_writes_its_commands_output_to_its_log_and_reports_failure() {
        let dir = std::env::temp_dir().join(format!("xtask-lane-{}", std::process::id()));
        let log = dir.join("lane.log");
        lane(log.clone(), echo_stage)
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("written-to-the-lane-log"), "{text}");
        let err = lane(log.clone(), failing_stage)
            .unwrap()
            .join()
            .unwrap()
            .unwrap_err();
        assert!(format!("{err:#}").contains("lane.log"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
