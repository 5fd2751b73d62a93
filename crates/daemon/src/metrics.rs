//! `nfkit daemon --metrics HOST:PORT`: the daemon's counters in
//! Prometheus's text exposition format (version 0.0.4) at `/metrics`,
//! over a minimal HTTP/1.1 server on the control plane's runtime (no
//! work on the data path: a scrape reads the same counters the
//! `Get*Stats` requests read, with the daemon locked like a request).
//!
//! Names follow Prometheus's conventions (`nfkit_` prefix, base units,
//! `_total` for counters); labels are `port`, `queue`, `module`, `gate`,
//! `direction`, `tc`, `worker`, never per-flow values. Per-queue port
//! counters have their own names (`nfkit_port_queue_*`) beside the
//! per-port totals (`nfkit_port_*`), so that no sum counts twice.

use crate::state::Daemon;
use parking_lot::Mutex;
use std::fmt::Write;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Largest request head read (a scrape's is a few hundred bytes).
const MAX_HEAD: usize = 16 << 10;

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    /// `# HELP` and `# TYPE` lines, then one sample per (labels, value).
    fn metric(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, f64)>,
    ) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            self.out.push_str(name);
            if !labels.is_empty() {
                self.out.push('{');
                for (i, (k, val)) in labels.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(self.out, "{k}=\"{}\"", escape(val));
                }
                self.out.push('}');
            }
            let _ = writeln!(self.out, " {v}");
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text for the daemon's current counters.
pub fn render(d: &mut Daemon) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };
    f.metric(
        "nfkit_build_info",
        "gauge",
        "The daemon's version.",
        [(vec![("version", crate::state::VERSION.to_string())], 1.0)],
    );
    f.metric(
        "nfkit_requests_total",
        "counter",
        "Control requests served.",
        [(vec![], d.requests as f64)],
    );

    // Ports.
    let ports = match d.port_counters() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("metrics: port counters: {e}");
            Vec::new()
        }
    };
    type PortField = fn(&nfkit_port::QueueStats) -> u64;
    let port_metrics: [(&str, &str, PortField); 8] = [
        ("nfkit_port_rx_packets_total", "Packets received.", |s| {
            s.rx_packets
        }),
        (
            "nfkit_port_rx_bytes_total",
            "Bytes received (without CRC).",
            |s| s.rx_bytes,
        ),
        (
            "nfkit_port_rx_dropped_packets_total",
            "Packets the port received but could not hand over (no buffer, ring full, missed).",
            |s| s.rx_dropped,
        ),
        ("nfkit_port_rx_errors_total", "Receive errors.", |s| {
            s.rx_errors
        }),
        ("nfkit_port_tx_packets_total", "Packets sent.", |s| {
            s.tx_packets
        }),
        (
            "nfkit_port_tx_bytes_total",
            "Bytes sent (without CRC).",
            |s| s.tx_bytes,
        ),
        (
            "nfkit_port_tx_dropped_packets_total",
            "Packets the port could not send (ring full).",
            |s| s.tx_dropped,
        ),
        ("nfkit_port_tx_errors_total", "Transmit errors.", |s| {
            s.tx_errors
        }),
    ];
    // Totals per port, and the same counters per queue under their own
    // names (`nfkit_port_queue_*`), so that summing a family never adds
    // a total to its parts. Both come from one reading: a port's total is
    // the sum of its queues.
    let totals: Vec<nfkit_port::QueueStats> = ports
        .iter()
        .map(|(_, _, qs)| {
            let mut t = nfkit_port::QueueStats::default();
            for q in qs {
                t += *q;
            }
            t
        })
        .collect();
    for (name, help, get) in port_metrics {
        f.metric(
            name,
            "counter",
            help,
            ports.iter().zip(&totals).map(|((p, drv, _), s)| {
                (
                    vec![("port", p.clone()), ("driver", drv.clone())],
                    get(s) as f64,
                )
            }),
        );
    }
    for (name, help, get) in port_metrics {
        let name = name.replacen("nfkit_port_", "nfkit_port_queue_", 1);
        let help = format!("{} Per queue.", help);
        f.metric(
            &name,
            "counter",
            &help,
            ports.iter().flat_map(|(p, drv, qs)| {
                qs.iter().enumerate().map(move |(q, s)| {
                    (
                        vec![
                            ("port", p.clone()),
                            ("driver", drv.clone()),
                            ("queue", q.to_string()),
                        ],
                        get(s) as f64,
                    )
                })
            }),
        );
    }

    let stats = d.pipeline_stats();
    // Modules and gates.
    type ModField = fn(&nfkit_pipeline::counters::ModuleStats) -> u64;
    let mod_metrics: [(&str, &str, ModField); 3] = [
        (
            "nfkit_module_created_packets_total",
            "Packets the module made (sources, replicas).",
            |m| m.created,
        ),
        (
            "nfkit_module_consumed_packets_total",
            "Packets the module consumed as intended (sinks, ports it sent to).",
            |m| m.consumed,
        ),
        (
            "nfkit_module_dropped_packets_total",
            "Packets the module dropped (no connected gate, full queue, refused).",
            |m| m.dropped,
        ),
    ];
    for (name, help, get) in mod_metrics {
        f.metric(
            name,
            "counter",
            help,
            stats.modules.iter().map(|m| {
                (
                    vec![("module", m.name.clone()), ("class", m.class.to_string())],
                    get(m) as f64,
                )
            }),
        );
    }
    let gates = || {
        stats.modules.iter().flat_map(|m| {
            let ins = m
                .igates
                .iter()
                .enumerate()
                .filter(|(_, g)| g.packets > 0 || g.batches > 0)
                .map(move |(i, g)| (m.name.as_str(), "in", i, *g));
            let outs = m
                .ogates
                .iter()
                .enumerate()
                .map(move |(i, g)| (m.name.as_str(), "out", i, *g));
            ins.chain(outs)
        })
    };
    let labels = |m: &str, dir: &'static str, i: usize| {
        vec![
            ("module", m.to_string()),
            ("gate", i.to_string()),
            ("direction", dir.to_string()),
        ]
    };
    f.metric(
        "nfkit_gate_packets_total",
        "counter",
        "Packets through a module's gate.",
        gates().map(|(m, dir, i, g)| (labels(m, dir, i), g.packets as f64)),
    );
    f.metric(
        "nfkit_gate_batches_total",
        "counter",
        "Batches through a module's gate.",
        gates().map(|(m, dir, i, g)| (labels(m, dir, i), g.batches as f64)),
    );
    f.metric(
        "nfkit_gate_bytes_total",
        "counter",
        "Bytes through a module's gate.",
        gates().map(|(m, dir, i, g)| (labels(m, dir, i), (g.bits / 8) as f64)),
    );

    // Workers and their classes.
    let w = |name: &str| vec![("worker", name.to_string())];
    f.metric(
        "nfkit_worker_busy_seconds_total",
        "counter",
        "Time the worker's loop spent running tasks that did work.",
        stats
            .workers
            .iter()
            .map(|x| (w(&x.name), x.sched.busy_ns as f64 / 1e9)),
    );
    f.metric(
        "nfkit_worker_idle_seconds_total",
        "counter",
        "Time the worker's loop spent idle (rounds with no work, waits).",
        stats
            .workers
            .iter()
            .map(|x| (w(&x.name), x.sched.idle_ns as f64 / 1e9)),
    );
    f.metric(
        "nfkit_worker_rounds_total",
        "counter",
        "Scheduling rounds.",
        stats
            .workers
            .iter()
            .map(|x| (w(&x.name), x.sched.rounds as f64)),
    );
    f.metric(
        "nfkit_worker_empty_rounds_total",
        "counter",
        "Scheduling rounds that found no work.",
        stats
            .workers
            .iter()
            .map(|x| (w(&x.name), x.sched.empty_rounds as f64)),
    );
    type TcField = fn(&nfkit_pipeline::sched::TcStats) -> f64;
    let tc_metrics: [(&str, &str, TcField); 5] = [
        (
            "nfkit_tc_runs_total",
            "Times the class was scheduled.",
            |t| t.count as f64,
        ),
        (
            "nfkit_tc_seconds_total",
            "Time spent in the class's tasks.",
            |t| t.cycles as f64 / 1e9,
        ),
        (
            "nfkit_tc_packets_total",
            "Packets the class's tasks handled.",
            |t| t.packets as f64,
        ),
        (
            "nfkit_tc_bits_total",
            "Bits the class's tasks handled.",
            |t| t.bits as f64,
        ),
        (
            "nfkit_tc_throttled_total",
            "Times a rate limit held the class back.",
            |t| t.throttled as f64,
        ),
    ];
    for (name, help, get) in tc_metrics {
        f.metric(
            name,
            "counter",
            help,
            stats.workers.iter().flat_map(|x| {
                x.classes.iter().map(|t| {
                    (
                        vec![
                            ("tc", t.name.clone()),
                            ("policy", t.policy.to_string()),
                            ("worker", x.name.clone()),
                        ],
                        get(t),
                    )
                })
            }),
        );
    }

    // TcpDump gate hooks.
    let caps: Vec<_> = d
        .hooks()
        .taps
        .iter()
        .map(|e| {
            (
                vec![
                    ("module", e.module.clone()),
                    ("gate", e.gate.to_string()),
                    ("direction", if e.out { "out" } else { "in" }.to_string()),
                ],
                e.tap.written(),
                e.tap.dropped(),
            )
        })
        .collect();
    f.metric(
        "nfkit_capture_packets_total",
        "counter",
        "Packets a TcpDump gate hook wrote to its FIFO.",
        caps.iter().map(|c| (c.0.clone(), c.1 as f64)),
    );
    f.metric(
        "nfkit_capture_dropped_packets_total",
        "counter",
        "Packets a TcpDump gate hook could not write (FIFO full, reader gone); forwarding is unaffected.",
        caps.iter().map(|c| (c.0.clone(), c.2 as f64)),
    );

    // The buffer pool.
    let (cap, free) = d.pool_occupancy();
    f.metric(
        "nfkit_pool_buffers",
        "gauge",
        "Packet buffers in the daemon's pool.",
        [(vec![("pool", "daemon".to_string())], cap as f64)],
    );
    f.metric(
        "nfkit_pool_free_buffers",
        "gauge",
        "Buffers in the pool's shared free queue (per-core caches not counted).",
        [(vec![("pool", "daemon".to_string())], free as f64)],
    );
    f.metric(
        "nfkit_pool_in_use_buffers",
        "gauge",
        "Buffers not in the pool's shared free queue (in flight, queued, or in per-core caches).",
        [(
            vec![("pool", "daemon".to_string())],
            cap.saturating_sub(free) as f64,
        )],
    );
    out
}

/// Bind the metrics listener (before anything else starts, so a port
/// in use is a clear start-up error).
pub async fn bind(addr: &str, allow_remote: bool) -> Result<TcpListener, String> {
    let a = crate::check_grpc_url(addr, allow_remote)
        .map_err(|e| e.replace("--grpc-url", "--metrics"))?;
    TcpListener::bind(a).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("--metrics {addr}: the port is in use (another daemon or exporter?); pick another with --metrics HOST:PORT")
        } else {
            format!("--metrics {addr}: cannot listen: {e}")
        }
    })
}

/// Serve scrapes until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    daemon: Arc<Mutex<Daemon>>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r {
                Ok((s, _)) => {
                    tokio::spawn(handle(s, daemon.clone()));
                }
                Err(e) => {
                    tracing::warn!("metrics: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn handle(mut s: tokio::net::TcpStream, daemon: Arc<Mutex<Daemon>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let read = async {
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    };
    let complete = matches!(
        tokio::time::timeout(std::time::Duration::from_secs(10), read).await,
        Ok(Ok(true))
    );
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or(&[]))
        .trim()
        .to_string();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = if !complete {
        ("400 Bad Request", "text/plain", "bad request\n".to_string())
    } else if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".to_string(),
        )
    } else if path == "/metrics" || path.starts_with("/metrics?") {
        let d = daemon.clone();
        let body = tokio::task::spawn_blocking(move || render(&mut d.lock()))
            .await
            .unwrap_or_default();
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
    } else if path == "/" {
        (
            "200 OK",
            "text/html",
            "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".to_string(),
        )
    } else {
        (
            "404 Not Found",
            "text/plain",
            "not found: try /metrics\n".to_string(),
        )
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        resp.extend_from_slice(body.as_bytes());
    }
    let _ = s.write_all(&resp).await;
    let _ = s.shutdown().await;
}
