//! Test tooling: network namespaces, veth pairs, skips, traffic checks,
//! and the system set-up DPDK's testpmd needs beside nfkit ([`DpdkEnv`]).
//!
//! Everything a test creates is an RAII guard that removes it on drop,
//! also when the test panics. Names are unique per process and test
//! (`nk<pid>_<kind><n>`), so tests run in parallel; namespaces and links
//! left behind by a killed test process are swept the next time a test
//! creates one.
//!
//! Skips: a test that cannot run here (no root, a tool missing) prints
//! `SKIP: why` and passes, so a developer without root sees what did not
//! run. Under `NFKIT_NO_SKIP=1` (set by `cargo xtask test`, as in CI)
//! the same skip is a failure: nothing may pass there without running.
//!
//! ```no_run
//! use nfkit_testkit::{require_root, require_tool, TwoHosts};
//! fn my_test() {
//!     require_root!();
//!     require_tool!("ping");
//!     let net = TwoHosts::new().unwrap();
//!     // forward between net.a.host_end and net.b.host_end, then:
//!     net.a.ns.run(&["ping", "-c", "1", &net.b.ip]).unwrap();
//! }
//! ```

#![forbid(unsafe_code)]

mod dpdk_env;
pub mod vxlan;
pub use dpdk_env::{DpdkEnv, DpdkEnvError};

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The variable under which a skip fails the test (`cargo xtask test`
/// sets it to 1).
pub const NO_SKIP_VAR: &str = "NFKIT_NO_SKIP";

/// Whether skips are failures here ([`NO_SKIP_VAR`] set to anything but
/// empty or `0`).
pub fn skips_fail() -> bool {
    no_skip_value(std::env::var(NO_SKIP_VAR).ok().as_deref())
}

fn no_skip_value(v: Option<&str>) -> bool {
    v.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Report that (part of) a test cannot run: `SKIP: <reason>` on stderr,
/// or, when [`skips_fail`], a panic saying so. For a skipped part of a
/// test that goes on; [`skip!`] returns from the test.
pub fn skipping(reason: &str) {
    skip_or_fail(skips_fail(), reason)
}

fn skip_or_fail(fail: bool, reason: &str) {
    if fail {
        panic!("SKIP is a failure under {NO_SKIP_VAR}=1 (cargo xtask test, CI): {reason}");
    }
    eprintln!("SKIP: {reason}");
}

/// Print `SKIP: <reason>` to stderr and return from the test (under
/// `NFKIT_NO_SKIP=1`: fail instead).
#[macro_export]
macro_rules! skip {
    ($($arg:tt)*) => {{
        $crate::skipping(&format!($($arg)*));
        return;
    }};
}

/// Skip the test unless running as root (fail under `NFKIT_NO_SKIP=1`).
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::is_root() {
            $crate::skip!(
                "needs root (network namespaces, veth pairs, raw sockets); CI runs as root"
            );
        }
    };
}

/// Skip the test unless `tool` is on the PATH (fail under
/// `NFKIT_NO_SKIP=1`).
#[macro_export]
macro_rules! require_tool {
    ($tool:expr) => {
        if let Err(reason) = $crate::require_tool($tool) {
            $crate::skip!("{}", reason);
        }
    };
}

/// Whether the effective user is root (from /proc, no libc).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Whether an executable named `tool` is on the PATH.
pub fn have_tool(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// `Ok` if `tool` is installed, else the reason to skip.
pub fn require_tool(tool: &str) -> std::result::Result<(), String> {
    if have_tool(tool) {
        Ok(())
    } else {
        Err(format!(
            "`{tool}` is not installed (apt-get install it; the xtask does in CI)"
        ))
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "nk";

fn base36(mut n: u32) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}

/// A name unique to this process and call: `nk<pid>_<kind><n>`, at most
/// 15 bytes (an interface name) for kinds of up to two letters.
pub fn unique_name(kind: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX}{}_{kind}{}", base36(std::process::id()), base36(n))
}

/// The pid encoded in a name made by [`unique_name`].
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, _) = rest.split_once('_')?;
    u32::from_str_radix(pid, 36).ok()
}

/// Run a command; error (with its stderr) unless it succeeds.
pub fn run(args: &[&str]) -> Result<String> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let out = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{}`", args.join(" ")))?;
    check_output(args, out)
}

fn check_output(args: &[&str], out: Output) -> Result<String> {
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS...`.
pub fn ip(args: &[&str]) -> Result<String> {
    let mut v = vec!["ip"];
    v.extend_from_slice(args);
    run(&v)
}

/// Remove namespaces and links whose creating process is gone (a test
/// killed before its guards ran). Once per process.
fn sweep_stale() {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| {
        let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
        if let Ok(list) = ip(&["netns", "list"]) {
            for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
                if owner_pid(name).is_some_and(|p| !alive(p)) {
                    let _ = ip(&["netns", "del", name]);
                }
            }
        }
        if let Ok(list) = ip(&["-o", "link", "show"]) {
            for l in list.lines() {
                let name = l
                    .split(':')
                    .nth(1)
                    .map(|s| s.trim().split('@').next().unwrap_or(""));
                if let Some(name) = name {
                    if owner_pid(name).is_some_and(|p| !alive(p)) {
                        let _ = ip(&["link", "del", name]);
                    }
                }
            }
        }
    });
}

/// A network namespace, deleted on drop (with every interface in it).
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new() -> Result<Netns> {
        sweep_stale();
        let name = unique_name("n");
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs inside the namespace (`ip netns exec`).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// Run a command inside the namespace; its stdout, or an error with
    /// its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command(args)
            .output()
            .with_context(|| format!("cannot run `{}` in {}", args.join(" "), self.name))?;
        check_output(args, out)
    }

    /// Start a command inside the namespace; killed when the guard drops.
    pub fn spawn(&self, args: &[&str]) -> Result<ChildGuard> {
        let child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start `{}` in {}", args.join(" "), self.name))?;
        Ok(ChildGuard(Some(child)))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("warning: cleaning up namespace {}: {e:#}", self.name);
        }
    }
}

/// A child process killed (and reaped) on drop.
#[derive(Debug)]
pub struct ChildGuard(Option<Child>);

impl ChildGuard {
    /// Wait for the process to end by itself, at most `timeout`; its
    /// output. Errors if it failed or is still running (then kills it).
    pub fn wait(mut self, timeout: Duration) -> Result<String> {
        let mut child = self.0.take().context("no child")?;
        let deadline = Instant::now() + timeout;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let out = child.wait_with_output()?;
                bail!(
                    "still running after {timeout:?}; output: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output()?;
        check_output(&["child"], out)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A veth pair. Deleting either end deletes both; dropping the guard
/// deletes the pair wherever its ends are (a namespace deleted first
/// takes its end, and so the pair, with it).
#[derive(Debug)]
pub struct Veth {
    pub a: String,
    pub b: String,
    /// Namespace of end `a`, if moved.
    a_ns: Option<String>,
}

impl Veth {
    /// A new pair in the current namespace, both ends up.
    pub fn new() -> Result<Veth> {
        Veth::with_queues(1)
    }

    /// A new pair with `queues` RX and TX queues on each end (for
    /// multi-queue ports; veth spreads flows over them), both ends up.
    pub fn with_queues(queues: usize) -> Result<Veth> {
        sweep_stale();
        let base = unique_name("v");
        let (a, b) = (format!("{base}a"), format!("{base}b"));
        let q = queues.to_string();
        let qs = ["numrxqueues", &q, "numtxqueues", &q];
        let mut args = vec!["link", "add", &a];
        args.extend(qs);
        args.extend(["type", "veth", "peer", "name", &b]);
        args.extend(qs);
        ip(&args)?;
        let v = Veth { a, b, a_ns: None };
        ip(&["link", "set", &v.a, "up"])?;
        ip(&["link", "set", &v.b, "up"])?;
        Ok(v)
    }

    /// Move end `a` into `ns`, bring it up and give it `addr` (CIDR).
    pub fn move_a(&mut self, ns: &Netns, addr: &str) -> Result<()> {
        ip(&["link", "set", &self.a, "netns", ns.name()])?;
        self.a_ns = Some(ns.name().to_string());
        ns.run(&["ip", "addr", "add", addr, "dev", &self.a])?;
        ns.run(&["ip", "link", "set", &self.a, "up"])?;
        Ok(())
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Either end may already be gone with its namespace.
        if ip(&["link", "del", &self.b]).is_err() {
            if let Some(ns) = &self.a_ns {
                let _ = ip(&["-n", ns, "link", "del", &self.a]);
            } else {
                let _ = ip(&["link", "del", &self.a]);
            }
        }
    }
}

/// Turn off checksum and segmentation offloads on `dev` inside `ns`, so
/// that frames leaving the namespace are complete, MTU-sized Ethernet
/// frames (what a forwarder outside can pass on). Needs `ethtool`;
/// returns false if it is missing.
pub fn offloads_off(ns: &Netns, dev: &str) -> Result<bool> {
    if !have_tool("ethtool") {
        return Ok(false);
    }
    ns.run(&[
        "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
    ])?;
    Ok(true)
}

/// One host of [`TwoHosts`]: a namespace with one veth end addressed, the
/// other end (`host_end`) in the test's namespace for a forwarder.
#[derive(Debug)]
pub struct Host {
    pub veth: Veth,
    pub ns: Netns,
    /// The address of the namespace's end (no prefix length).
    pub ip: String,
    /// The namespace's interface.
    pub dev: String,
    /// The end left in the test's namespace.
    pub host_end: String,
}

/// Two namespaces on one /24 whose only link is whatever forwards between
/// `a.host_end` and `b.host_end`. Offloads are turned off on both
/// namespace ends when `ethtool` is installed (see [`offloads_off`]).
#[derive(Debug)]
pub struct TwoHosts {
    pub a: Host,
    pub b: Host,
    /// Whether offloads could be turned off (TCP through a user-space
    /// forwarder needs it).
    pub offloads_off: bool,
}

impl TwoHosts {
    pub fn new() -> Result<TwoHosts> {
        TwoHosts::with_queues(1)
    }

    /// Veth pairs left at the kernel's default offload settings (transmit
    /// checksum offload and TSO on, as containers have them): frames
    /// reach a forwarder with partial checksums and as 64 KiB segments.
    pub fn at_default_offloads(queues: usize) -> Result<TwoHosts> {
        let a = Host::new("10.99.0.1", queues)?;
        let b = Host::new("10.99.0.2", queues)?;
        Ok(TwoHosts {
            a,
            b,
            offloads_off: false,
        })
    }

    /// Veth pairs with `queues` queues per end.
    pub fn with_queues(queues: usize) -> Result<TwoHosts> {
        let a = Host::new("10.99.0.1", queues)?;
        let b = Host::new("10.99.0.2", queues)?;
        let off = offloads_off(&a.ns, &a.dev)? & offloads_off(&b.ns, &b.dev)?;
        Ok(TwoHosts {
            a,
            b,
            offloads_off: off,
        })
    }
}

impl Host {
    fn new(ip: &str, queues: usize) -> Result<Host> {
        let ns = Netns::new()?;
        let mut veth = Veth::with_queues(queues)?;
        veth.move_a(&ns, &format!("{ip}/24"))?;
        Ok(Host {
            dev: veth.a.clone(),
            host_end: veth.b.clone(),
            ip: ip.to_string(),
            veth,
            ns,
        })
    }
}

/// Poll `cond` every 10 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_fails_only_under_no_skip() {
        for (value, fails) in [
            (None, false),
            (Some("0"), false),
            (Some(""), false),
            (Some("1"), true),
        ] {
            assert_eq!(no_skip_value(value), fails, "{value:?}");
            let r = std::panic::catch_unwind(|| skip_or_fail(fails, "no root"));
            assert_eq!(r.is_err(), fails, "{value:?}");
        }
    }

    #[test]
    fn names_are_unique_short_and_carry_the_pid() {
        let a = unique_name("v");
        let b = unique_name("v");
        assert_ne!(a, b);
        assert!(format!("{a}a").len() <= 15, "{a}");
        assert_eq!(owner_pid(&a), Some(std::process::id()));
        assert_eq!(owner_pid("eth0"), None);
    }

    #[test]
    fn namespace_and_veth_are_removed_on_drop_even_on_panic() {
        require_root!();
        let (ns_name, veth_name) = {
            let ns = Netns::new().unwrap();
            let mut v = Veth::new().unwrap();
            v.move_a(&ns, "10.98.0.1/24").unwrap();
            assert!(ns.run(&["ip", "addr"]).unwrap().contains("10.98.0.1"));
            (ns.name().to_string(), v.b.clone())
        };
        assert!(!ip(&["netns", "list"]).unwrap().contains(&ns_name));
        assert!(ip(&["link", "show", &veth_name]).is_err());

        let name = std::sync::Mutex::new(String::new());
        let r = std::panic::catch_unwind(|| {
            let ns = Netns::new().unwrap();
            *name.lock().unwrap() = ns.name().to_string();
            panic!("test failure");
        });
        assert!(r.is_err());
        assert!(!ip(&["netns", "list"])
            .unwrap()
            .contains(name.lock().unwrap().as_str()));
    }
}
