//! Interoperation with DPDK (Debian's `dpdk-testpmd`, 22.11): DPDK's
//! virtio-user against our vhost-user backend, and our virtio-user
//! frontend against DPDK's vhost PMD. testpmd runs in `io` forwarding
//! mode on one port, so it sends every packet back where it came from.
//!
//! Needs root (hugepages, hugetlbfs) and dpdk-testpmd; skips otherwise.

use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_port::Port;
use nfkit_testkit::DpdkEnv;
use nfkit_virtio::vhost_user::{self, BackendConfig, FrontendConfig, VhostUserBackend};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// While a test runs testpmd: the hugepages and hugetlbfs it needs.
/// Dropping it gives them back and removes the (empty) runtime
/// directories this process's testpmds left in /var/run/dpdk.
struct Dpdk {
    _env: DpdkEnv,
}

impl Drop for Dpdk {
    fn drop(&mut self) {
        for tag in ["vu", "vh"] {
            let _ = std::fs::remove_dir(format!("/var/run/dpdk/{}", prefix(tag)));
        }
    }
}

/// testpmd's `--file-prefix` for a test.
fn prefix(tag: &str) -> String {
    format!("nfkit-{tag}-{}", std::process::id())
}

/// [`Dpdk`], or why DPDK cannot run here.
fn dpdk_env() -> Result<Dpdk, String> {
    let which = Command::new("sh")
        .args(["-c", "command -v dpdk-testpmd"])
        .output();
    if !which.is_ok_and(|o| o.status.success()) {
        return Err("dpdk-testpmd is not installed (Debian package dpdk)".into());
    }
    if !nfkit_testkit::is_root() {
        return Err("DPDK needs root for hugepages".into());
    }
    // testpmd's `-m 256` below, and room for EAL's own structures.
    let env = DpdkEnv::prepare(160).map_err(|e| e.to_string())?;
    Ok(Dpdk { _env: env })
}

/// One testpmd at a time: they share the hugepages and the cores.
static TESTPMD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// testpmd with one vdev, io forwarding, stats every second (which also
/// keeps it from waiting for a key press). Stopped with SIGINT.
/// `--in-memory`: no hugepage files are left behind if it dies, and no
/// hugetlbfs files at all (EAL still makes an empty runtime directory,
/// removed with [`Dpdk`]).
fn testpmd(tag: &str, vdev: &str, tx_first: bool) -> Child {
    let mut c = Command::new("dpdk-testpmd");
    c.args([
        "--lcores",
        "0@0,1@0",
        "-n",
        "1",
        "--no-pci",
        "--in-memory",
        "--single-file-segments",
        "-m",
        "256",
    ])
    .args(["--file-prefix", &prefix(tag)])
    .args(["--vdev", vdev, "--"])
    .args([
        "--forward-mode=io",
        "--auto-start",
        "--nb-cores=1",
        "--total-num-mbufs=8192",
        "--stats-period",
        "1",
    ]);
    if tx_first {
        c.arg("--tx-first");
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting dpdk-testpmd")
}

/// Stop testpmd and return the last `RX-packets` it reported, and its
/// output.
fn stop(mut child: Child) -> (u64, String) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("testpmd output");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let rx = text
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix("RX-packets:"))
        .find_map(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (rx, text)
}

fn socket(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfkit-dpdk-{tag}-{}.sock", std::process::id()))
}

/// Wait for `cond`; on time-out stop testpmd and fail with its output.
fn wait_for(
    pmd: &mut Option<Child>,
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            let (_, out) = stop(pmd.take().expect("testpmd"));
            panic!("timed out waiting for {what}; testpmd said:\n{out}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dpdk_virtio_user_against_our_backend() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "be", 4096, 2048).unwrap();
    let path = socket("be");
    let cfg = BackendConfig {
        name: "vhost-user:dpdk".into(),
        path: path.clone(),
        queue_pairs: 1,
        mac: [2, 0, 0, 0, 0, 7],
        host_tso: false,
    };
    let mut be = VhostUserBackend::listen(cfg, pool).unwrap();
    let _one = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    // Given back before the lock (dropped in reverse order).
    let _env = match dpdk_env() {
        Ok(env) => env,
        Err(why) => nfkit_testkit::skip!("{why}"),
    };
    let mut pmd = Some(testpmd(
        "vu",
        &format!("net_virtio_user0,path={},queues=1", path.display()),
        true,
    ));
    wait_for(
        &mut pmd,
        "testpmd to start its rings",
        Duration::from_secs(30),
        || be.ready(0),
    );
    // Echo for a while: testpmd echoes too, so packets go round and round.
    let start = Instant::now();
    let mut batch = Batch::new();
    while start.elapsed() < Duration::from_secs(2) {
        be.rx_batch(0, &mut batch);
        be.tx_batch(0, &mut batch);
        batch.clear();
    }
    let (dpdk_rx, _) = stop(pmd.take().expect("testpmd"));
    let ours = be.stats();
    eprintln!("ours: {ours:?}; testpmd received {dpdk_rx}");
    assert!(
        ours.rx_packets >= 1000,
        "we received only {}",
        ours.rx_packets
    );
    assert!(dpdk_rx >= 1000, "testpmd received only {dpdk_rx}");
    assert_eq!(ours.rx_errors + ours.tx_errors, 0);
}

#[test]
fn our_virtio_user_against_dpdk_vhost() {
    let path = socket("fe");
    let _ = std::fs::remove_file(&path);
    let _one = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    let _env = match dpdk_env() {
        Ok(env) => env,
        Err(why) => nfkit_testkit::skip!("{why}"),
    };
    let mut pmd = Some(testpmd(
        "vh",
        &format!("net_vhost0,iface={},queues=1", path.display()),
        false,
    ));
    wait_for(
        &mut pmd,
        "testpmd's socket",
        Duration::from_secs(30),
        || Path::new(&path).exists(),
    );
    let mut fe =
        vhost_user::connect(&path, &FrontendConfig::default()).expect("connecting to DPDK's vhost");
    let frame = |i: usize| -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 0x20, 0x88, 0xb5]);
        f.extend((0..50 + i).map(|j| (i * 13 + j) as u8));
        f
    };
    let n = 64;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let start = Instant::now();
    // testpmd may still be bringing its port up: resend until echoed.
    while got.is_empty() && start.elapsed() < Duration::from_secs(20) {
        let mut batch = Batch::new();
        for i in 0..n {
            let mut b = fe.pool().alloc().unwrap();
            b.copy_from(&frame(i)).unwrap();
            batch.push(b);
        }
        fe.tx_batch(0, &mut batch);
        let t = Instant::now();
        while got.len() < n && t.elapsed() < Duration::from_millis(500) {
            let mut rx = Batch::new();
            fe.rx_batch(0, &mut rx);
            got.extend(rx.drain().map(|p| p.data().to_vec()));
        }
        if got.len() < n {
            got.clear();
        }
    }
    let (dpdk_rx, out) = stop(pmd.take().expect("testpmd"));
    assert_eq!(
        got.len(),
        n,
        "echoed packets (testpmd received {dpdk_rx}); testpmd said:\n{out}"
    );
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p, &frame(i), "packet {i} came back changed");
    }
}
