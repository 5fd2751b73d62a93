//! `nfkit daemon --metrics`: a real Prometheus server (Debian's
//! `prometheus`), started by the test with a 1 s scrape interval,
//! scrapes the daemon; its HTTP query API returns nfkit series equal to
//! the daemon's own counters (read with `nfkit ctl` while the workers
//! are paused), per port and per queue (two transmit queues of a simulated 82599). A metrics port in use is a clear start-up error.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod daemon_client;
use daemon_client::{ctl, Kill, NFKIT};

/// Start the daemon; (child, metrics HOST:PORT).
fn daemon(socket: &Path, metrics: &str) -> (Kill, String) {
    let mut child = Command::new(NFKIT)
        .arg("daemon")
        .arg("--socket")
        .arg(socket)
        .args(["--metrics", metrics])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut addr = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        // The metrics address comes last.
        if let Some(a) = l.strip_prefix("nfkit daemon: listening on metrics:http://") {
            addr = Some(a.trim_end_matches("/metrics").to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (
        Kill(child),
        addr.expect("the daemon printed its metrics address"),
    )
}

/// GET `path` from `addr`: the body.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant query with one result.
fn prom_value(prom: &str, query: &str) -> Option<f64> {
    let body = http_get(prom, &format!("/api/v1/query?query={}", urlencode(query)))?;
    let j: serde_json::Value = serde_json::from_str(&body).ok()?;
    let r = j["data"]["result"].as_array()?;
    if r.len() != 1 {
        return None;
    }
    r[0]["value"][1].as_str()?.parse().ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn num(s: &str) -> u64 {
    s.replace(',', "").parse().unwrap()
}

#[test]
fn prometheus_scrapes_the_daemons_counters() {
    nfkit_testkit::require_tool!("prometheus");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let (_d, metrics) = daemon(&socket, "127.0.0.1:0");

    // The endpoint itself.
    let text = http_get(&metrics, "/metrics").expect("GET /metrics");
    assert!(
        text.contains("# TYPE nfkit_port_rx_packets_total counter"),
        "{text}"
    );
    assert!(
        text.contains("nfkit_pool_buffers{pool=\"daemon\"}"),
        "{text}"
    );

    // A second daemon asking for the same metrics port is refused.
    let o = Command::new(NFKIT)
        .arg("daemon")
        .arg("--socket")
        .arg(dir.path().join("d2.sock"))
        .args(["--metrics", &metrics])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&format!("--metrics {metrics}: the port is in use")),
        "{e}"
    );

    // Traffic: a port read by PortInc into a Sink, a Source into a Sink.
    ctl(&socket, &["add", "port", "p0", "null:size=60"]);
    ctl(&socket, &["add", "module", "in", "PortInc", "port=p0"]);
    ctl(&socket, &["add", "module", "drop", "Sink"]);
    ctl(&socket, &["connect", "in", "drop"]);
    ctl(&socket, &["add", "module", "src", "Source", "size=60"]);
    ctl(&socket, &["add", "module", "sink", "Sink"]);
    ctl(&socket, &["connect", "src", "sink"]);
    // A simulated 82599 with two transmit queues, one Source into each:
    // per-queue series and their total.
    ctl(&socket, &["add", "port", "s0", "sim:0"]);
    for q in ["0", "1"] {
        let (g, o) = (format!("g{q}"), format!("q{q}"));
        ctl(&socket, &["add", "module", &g, "Source", "size=60"]);
        let arg = format!("port=s0, qid={q}");
        ctl(&socket, &["add", "module", &o, "QueueOut", &arg]);
        ctl(&socket, &["connect", &g, &o]);
    }

    // Prometheus scraping the daemon once a second.
    let prom = format!("127.0.0.1:{}", free_port());
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: nfkit\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let data: PathBuf = dir.path().join("tsdb");
    let _p = Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );

    // Wait for a first scrape with traffic in it, then freeze the counters.
    let t = Instant::now();
    while prom_value(
        &prom,
        "nfkit_gate_packets_total{module=\"src\",direction=\"out\"}",
    )
    .is_none_or(|v| v <= 0.0)
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no nfkit series in Prometheus"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ctl(&socket, &["pause"]);

    // The daemon's counters, as `nfkit ctl` reads them.
    let j: serde_json::Value =
        serde_json::from_str(&ctl(&socket, &["show", "pipeline", "--format", "json"])).unwrap();
    let edge = |from: &str| {
        j["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["from"] == from)
            .map(|e| {
                (
                    e["packets"].as_u64().unwrap(),
                    e["batches"].as_u64().unwrap(),
                )
            })
            .unwrap()
    };
    let (src_pkts, src_batches) = edge("src");
    let (in_pkts, _) = edge("in");
    let port_count = |name: &str, side: &str| -> u64 {
        let ports = ctl(&socket, &["show", "port", name]);
        ports
            .lines()
            .find(|l| l.trim_start().starts_with(side))
            .and_then(|l| l.split_whitespace().nth(2))
            .map(num)
            .unwrap_or_else(|| panic!("{ports}"))
    };
    let (rx, sim_tx) = (port_count("p0", "Inc:"), port_count("s0", "Out:"));
    assert!(src_pkts > 0 && in_pkts > 0 && rx > 0 && sim_tx > 0, "{j}");

    // Prometheus sees the same numbers after its next scrape.
    let want = [
        (
            "nfkit_gate_packets_total{module=\"src\",gate=\"0\",direction=\"out\"}",
            src_pkts,
        ),
        (
            "nfkit_gate_batches_total{module=\"src\",gate=\"0\",direction=\"out\"}",
            src_batches,
        ),
        (
            "nfkit_gate_packets_total{module=\"in\",gate=\"0\",direction=\"out\"}",
            in_pkts,
        ),
        ("nfkit_port_rx_packets_total{port=\"p0\"}", rx),
        (
            "nfkit_port_queue_rx_packets_total{port=\"p0\",queue=\"0\"}",
            rx,
        ),
        // The total of a two-queue port is the sum of its queues.
        ("nfkit_port_tx_packets_total{port=\"s0\"}", sim_tx),
        (
            "sum(nfkit_port_queue_tx_packets_total{port=\"s0\"})",
            sim_tx,
        ),
        ("count(nfkit_port_queue_tx_packets_total{port=\"s0\"})", 2),
    ];
    let t = Instant::now();
    loop {
        let got: Vec<Option<f64>> = want.iter().map(|(q, _)| prom_value(&prom, q)).collect();
        if want
            .iter()
            .zip(&got)
            .all(|((_, w), g)| *g == Some(*w as f64))
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "Prometheus {got:?} vs the daemon {:?}",
            want.iter().map(|w| w.1).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Both queues carried traffic.
    assert!(
        prom_value(&prom, "min(nfkit_port_queue_tx_packets_total{port=\"s0\"})")
            .is_some_and(|v| v > 0.0),
        "a queue of s0 carried nothing"
    );
    // Worker time and the pool are there too.
    assert!(prom_value(&prom, "nfkit_worker_busy_seconds_total{worker=\"w0\"}").is_some());
    assert!(prom_value(&prom, "nfkit_pool_in_use_buffers").is_some());
    ctl(&socket, &["daemon", "stop"]);
}
