//! `nfkit bench control`: what the daemon's control plane costs (issue 16).
//!
//! An `nfkit daemon` runs in this process (TCP on 127.0.0.1, an ephemeral
//! port) and a tonic client talks to it over real gRPC:
//!
//! - **GetPortStats**: requests per second from one client, back to
//!   back, on a port no module uses (read as it is) and on one a module
//!   uses (its worker publishes the counters between two rounds, no
//!   pause).
//! - **add/connect/remove cycle**: CreateModule(Sink) + ConnectModules
//!   (a free Replicate gate to it) + DisconnectModules + DestroyModule,
//!   cycles per second, while traffic flows.
//! - **data path while polled**: Source -> Replicate -> Sink on worker 1
//!   (pinned to core 1), cycles per packet of the worker thread (kernel
//!   CPU time at the nominal TSC frequency, as `bench pipeline`), unpolled
//!   and then with GetPortStats (of the port in use) and GetTcStats polled
//!   100 times a second; `runs` pairs of runs, alternating in ABBA order
//!   (unpolled first in even pairs, polled first in odd ones, so that a
//!   load that drifts weighs on both alike). Printed: every run, the
//!   median of each kind, the median of the per-pair ratios (polled over
//!   the unpolled run beside it), the worker's share of a core in each
//!   kind (below 1: the kernel ran something else on its core) and the
//!   machine's load average before and after.

use crate::testpmd::{thread_cpu_time, tsc_hz, FORWARDING_CORE, WARMUP};
use anyhow::{anyhow, bail, Context, Result};
use nfkit_daemon::mclass::pack;
use nfkit_daemon::pb;
use nfkit_daemon::pb::bess_control_client::BessControlClient;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Client = BessControlClient<tonic::transport::Channel>;

macro_rules! ok {
    ($e:expr) => {{
        let r = $e.await?.into_inner();
        if let Some(err) = r.error.as_ref().filter(|e| e.code != 0) {
            bail!("{}: {}", stringify!($e), err.errmsg);
        }
        r
    }};
}

/// The figures `bench control` prints.
#[derive(Debug, Clone, Copy)]
pub struct ControlFigures {
    /// A port no module uses.
    pub port_stats_per_s: f64,
    /// A port a module uses (published by its worker, no pause).
    pub port_stats_in_use_per_s: f64,
    pub cycles_per_s: f64,
    pub unpolled_cpp: f64,
    pub polled_cpp: f64,
    /// Median over the pairs of polled / unpolled cycles per packet.
    pub pair_ratio: f64,
}

pub fn control(seconds: u64, runs: usize) -> Result<ControlFigures> {
    let dir = tempfile_dir()?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let opts = nfkit_daemon::Options {
        socket: Some(dir.join("bench.sock")),
        grpc_url: Some("127.0.0.1:0".into()),
        ..Default::default()
    };
    let open = Arc::new(|spec: &str| {
        let s: nfkit_port::PortSpec = spec.parse().map_err(|e: nfkit_port::SpecError| {
            nfkit_port::PortError::config(spec, e.to_string())
        })?;
        nfkit_port::open(&s, &nfkit_port::OpenOptions::default())
    });
    let daemon = std::thread::spawn(move || {
        nfkit_daemon::run(opts, open, move |addr| {
            let _ = tx.send(addr.to_string());
        })
    });
    let tcp = loop {
        let a = rx
            .recv_timeout(Duration::from_secs(10))
            .context("the daemon did not start")?;
        if let Some(t) = a.strip_prefix("tcp:") {
            break t.to_string();
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let figures = rt.block_on(measure(
        &tcp,
        Duration::from_secs(seconds.max(1)),
        runs.max(1),
    ));
    rt.block_on(async {
        if let Ok(mut c) = Client::connect(format!("http://{tcp}")).await {
            let _ = c.kill_bess(pb::EmptyRequest {}).await;
        }
    });
    match daemon.join() {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => bail!("daemon: {e}"),
        Err(_) => bail!("the daemon thread panicked"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    let f = figures?;
    println!(
        "control: GetPortStats {:.0} requests/s (a port in use: {:.0}/s); add/connect/disconnect/destroy {:.0} cycles/s",
        f.port_stats_per_s, f.port_stats_in_use_per_s, f.cycles_per_s
    );
    println!(
        "control: data path {:.1} cycles/packet unpolled, {:.1} polled 100/s ({:+.1}%), medians; median of the pairs' ratios {:+.1}%",
        f.unpolled_cpp,
        f.polled_cpp,
        (f.polled_cpp / f.unpolled_cpp - 1.0) * 100.0,
        (f.pair_ratio - 1.0) * 100.0
    );
    Ok(f)
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("nfkit-bench-control-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn create(name: &str, class: &str, arg: Option<prost_types::Any>) -> pb::CreateModuleRequest {
    pb::CreateModuleRequest {
        name: name.into(),
        mclass: class.into(),
        arg,
    }
}

fn connect(m1: &str, og: u64, m2: &str) -> pb::ConnectModulesRequest {
    pb::ConnectModulesRequest {
        m1: m1.into(),
        m2: m2.into(),
        ogate: og,
        igate: 0,
        skip_default_hooks: false,
    }
}

async fn consumed(c: &mut Client, m: &str) -> Result<u64> {
    let r = ok!(c.get_module_info(pb::GetModuleInfoRequest { name: m.into() }));
    r.desc
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("consumed="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no consumed= in `{}`", r.desc))
}

async fn measure(tcp: &str, d: Duration, runs: usize) -> Result<ControlFigures> {
    let mut c = Client::connect(format!("http://{tcp}")).await?;
    ok!(c.add_worker(pb::AddWorkerRequest {
        wid: 1,
        core: FORWARDING_CORE as i64,
        scheduler: String::new(),
    }));
    ok!(c.create_port(pb::CreatePortRequest {
        name: "p0".into(),
        driver: "NfkitPort".into(),
        arg: Some(pack(
            &pb::NfkitPortArg {
                spec: "null:".into()
            },
            "NfkitPortArg"
        )),
        ..Default::default()
    }));
    // p1 is used by a module (a PortOut nothing feeds): reading it asks
    // the running workers to publish their ports' counters between two
    // rounds; p0 is used by none and is read as it is.
    ok!(c.create_port(pb::CreatePortRequest {
        name: "p1".into(),
        driver: "NfkitPort".into(),
        arg: Some(pack(
            &pb::NfkitPortArg {
                spec: "null:".into()
            },
            "NfkitPortArg"
        )),
        ..Default::default()
    }));
    ok!(c.create_module(create(
        "po",
        "PortOut",
        Some(pack(&pb::PortOutArg { port: "p1".into() }, "PortOutArg"))
    )));
    ok!(c.create_module(create(
        "src",
        "Source",
        Some(pack(&pb::SourceArg { pkt_size: 60 }, "SourceArg"))
    )));
    ok!(c.create_module(create(
        "rep",
        "Replicate",
        Some(pack(
            &pb::ReplicateArg { gates: vec![0, 1] },
            "ReplicateArg"
        ))
    )));
    ok!(c.create_module(create("snk", "Sink", None)));
    ok!(c.connect_modules(connect("src", 0, "rep")));
    ok!(c.connect_modules(connect("rep", 0, "snk")));
    ok!(c.update_tc_parent(pb::UpdateTcParentRequest {
        class: Some(pb::TrafficClass {
            leaf_module_name: "src".into(),
            wid: 1,
            ..Default::default()
        })
    }));

    // GetPortStats, back to back.
    let mut per_s = [0.0; 2];
    for (i, port) in ["p0", "p1"].into_iter().enumerate() {
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < d {
            ok!(c.get_port_stats(pb::GetPortStatsRequest { name: port.into() }));
            n += 1;
        }
        per_s[i] = n as f64 / t.elapsed().as_secs_f64();
    }
    let [port_stats_per_s, port_stats_in_use_per_s] = per_s;

    // Module add/connect/disconnect/destroy, under traffic.
    let t = Instant::now();
    let mut cycles = 0u64;
    while t.elapsed() < d {
        ok!(c.create_module(create("extra", "Sink", None)));
        ok!(c.connect_modules(connect("rep", 1, "extra")));
        ok!(c.disconnect_modules(pb::DisconnectModulesRequest {
            name: "rep".into(),
            ogate: 1
        }));
        ok!(c.destroy_module(pb::DestroyModuleRequest {
            name: "extra".into()
        }));
        cycles += 1;
    }
    let cycles_per_s = cycles as f64 / t.elapsed().as_secs_f64();

    // The data path, unpolled and polled 100/s.
    let hz = tsc_hz()?;
    let pid = std::process::id();
    let worker = "nfkit-w1";
    tokio::time::sleep(WARMUP).await;
    let run = |polled: bool| {
        let mut c = c.clone();
        async move {
            let (p0, t0) = (
                consumed(&mut c, "snk").await?,
                thread_cpu_time(pid, worker).context("worker thread time")?,
            );
            let start = Instant::now();
            let mut next = start;
            while start.elapsed() < d {
                if polled {
                    ok!(c.get_port_stats(pb::GetPortStatsRequest { name: "p1".into() }));
                    ok!(c.get_tc_stats(pb::GetTcStatsRequest {
                        name: "!leaf_src:0".into()
                    }));
                    next += Duration::from_millis(10);
                    tokio::time::sleep_until(next.into()).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            let (p1, t1) = (
                consumed(&mut c, "snk").await?,
                thread_cpu_time(pid, worker).context("worker thread time")?,
            );
            let packets = p1.saturating_sub(p0).max(1);
            let cpu = (t1 - t0).as_secs_f64();
            Ok::<(f64, f64), anyhow::Error>((
                cpu * hz / packets as f64,
                cpu / start.elapsed().as_secs_f64(),
            ))
        }
    };
    let load_before = loadavg();
    let (mut un, mut po, mut share_un, mut share_po) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        // ABBA: which kind goes first alternates from pair to pair.
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for polled in order {
            let (cpp, share) = run(polled).await?;
            if polled {
                po.push(cpp);
                share_po.push(share);
            } else {
                un.push(cpp);
                share_un.push(share);
            }
        }
    }
    let spread = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut ratios: Vec<f64> = po.iter().zip(&un).map(|(p, u)| p / u).collect();
    println!(
        "control: data path cycles/packet, {runs} pairs of {d:?} runs (ABBA): unpolled [{}], polled 100/s [{}]; pair ratios [{}]",
        spread(&un),
        spread(&po),
        ratios
            .iter()
            .map(|r| format!("{:+.1}%", (r - 1.0) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "control: worker's share of its core: unpolled {:.2}, polled {:.2} (medians); load average {} before, {} after",
        median(&mut share_un),
        median(&mut share_po),
        load_before,
        loadavg()
    );
    let unpolled_cpp = median(&mut un);
    let polled_cpp = median(&mut po);
    let pair_ratio = median(&mut ratios);
    Ok(ControlFigures {
        port_stats_per_s,
        port_stats_in_use_per_s,
        cycles_per_s,
        unpolled_cpp,
        polled_cpp,
        pair_ratio,
    })
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
