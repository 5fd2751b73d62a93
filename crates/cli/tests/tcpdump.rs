//! Gate hooks over the service: `nfkit ctl tcpdump` captures a gate of
//! a running daemon as pcap that the real `tcpdump` reads (from a file
//! and from a pipe); a FIFO nobody reads only drops captures (counted),
//! forwarding goes on; a capture client killed mid-way leaves the
//! daemon forwarding. BESS's `defer` and `reconnect` options and gate −1
//! (every gate), GetModuleInfo's gate hooks, and a FIFO closed when its
//! module is destroyed.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod daemon_client;
use daemon_client::{ctl, Kill, NFKIT};

fn daemon(socket: &Path) -> (Kill, String) {
    let mut child = Command::new(NFKIT)
        .arg("daemon")
        .arg("--socket")
        .arg(socket)
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut addr = None;
    for l in lines.by_ref() {
        if let Some(a) = l
            .unwrap()
            .strip_prefix("nfkit daemon: listening on metrics:http://")
        {
            addr = Some(a.trim_end_matches("/metrics").to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (Kill(child), addr.unwrap())
}

fn metric(addr: &str, line_start: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    r.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn sink_packets(socket: &Path) -> u64 {
    let j: serde_json::Value =
        serde_json::from_str(&ctl(socket, &["show", "pipeline", "--format", "json"])).unwrap();
    j["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "sink")
        .and_then(|e| e["packets"].as_u64())
        .unwrap_or(0)
}

#[test]
fn tcpdump_a_gate_into_tcpdump() {
    nfkit_testkit::require_tool!("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let (_d, metrics) = daemon(&socket);
    ctl(&socket, &["add", "module", "src", "Source", "size=60"]);
    ctl(&socket, &["add", "module", "sink", "Sink"]);
    ctl(&socket, &["connect", "src", "sink"]);

    // To a file, read by tcpdump.
    let file = dir.path().join("cap.pcap");
    ctl(
        &socket,
        &[
            "tcpdump",
            "src:0",
            "out",
            "-c",
            "20",
            "-w",
            file.to_str().unwrap(),
        ],
    );
    let o = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = String::from_utf8_lossy(&o.stdout);
    assert_eq!(lines.lines().count(), 20, "{lines}");
    // The hook is gone afterwards.
    assert!(ctl(&socket, &["show", "version"]).starts_with("nfkit"));

    // Through a pipe: nfkit ctl tcpdump ... | tcpdump -r - (input gate).
    let sh = format!(
        "{NFKIT} ctl --socket {} tcpdump sink:0 in -c 10 | tcpdump -n -r -",
        socket.display()
    );
    let o = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 10);

    // A FIFO nobody reads: the hook's captures are dropped and counted,
    // the sink keeps receiving.
    let fifo = dir.path().join("stuck.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(&fifo)
        .unwrap();
    let mut c = nfkit_ctl::Ctl::connect(nfkit_ctl::Target::Unix(socket.clone())).unwrap();
    let hook = |enable| (tcpdump_hook("stuck", "src", 0, &fifo, false), enable);
    let (h, e) = hook(true);
    c.configure_gate_hook(h, e).unwrap();
    assert_eq!(c.gate_hooks().unwrap().len(), 1);
    let before = sink_packets(&socket);
    let key = "nfkit_capture_dropped_packets_total{module=\"src\",gate=\"0\",direction=\"out\"}";
    let t = Instant::now();
    while metric(&metrics, key).unwrap_or(0.0) <= 0.0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no capture drops counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sink_packets(&socket) > before, "forwarding stopped");
    let (h, e) = hook(false);
    c.configure_gate_hook(h, e).unwrap();
    assert!(c.gate_hooks().unwrap().is_empty());

    // A capture client killed mid-way: the daemon keeps forwarding.
    let mut cap = Kill(
        Command::new(NFKIT)
            .arg("ctl")
            .arg("--socket")
            .arg(&socket)
            .args(["tcpdump", "src"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut head = [0u8; 24];
    cap.0
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert_eq!(&head[..4], &0xa1b2_c3d4u32.to_le_bytes());
    let _ = cap.0.kill();
    let _ = cap.0.wait();
    let before = sink_packets(&socket);
    let t = Instant::now();
    while sink_packets(&socket) <= before {
        assert!(t.elapsed() < Duration::from_secs(10), "forwarding stopped");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Bad hooks: the daemon's message.
    let o = Command::new(NFKIT)
        .arg("ctl")
        .arg("--socket")
        .arg(&socket)
        .args(["tcpdump", "src:7"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("gate 7 does not exist"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    ctl(&socket, &["daemon", "stop"]);
}

/// A TcpDump hook on output gate `gate` of `module` into `fifo`, with
/// BESS's `defer` and `reconnect` both set when `later`.
fn tcpdump_hook(
    name: &str,
    module: &str,
    gate: i64,
    fifo: &Path,
    later: bool,
) -> nfkit_daemon::pb::GateHookInfo {
    use nfkit_daemon::pb;
    pb::GateHookInfo {
        class_name: "TcpDump".into(),
        hook_name: name.into(),
        module_name: module.into(),
        gate: Some(pb::gate_hook_info::Gate::Ogate(gate)),
        arg: Some(nfkit_daemon::mclass::pack(
            &pb::TcpdumpArg {
                fifo: fifo.display().to_string(),
                defer: later,
                reconnect: later,
            },
            "TcpdumpArg",
        )),
    }
}

/// Read one pcap stream's header and first record from `f`: the
/// record's captured length.
fn pcap_first_record(f: &mut std::fs::File) -> u32 {
    let mut head = [0u8; 24];
    f.read_exact(&mut head).unwrap();
    assert_eq!(&head[..4], &0xa1b2_c3d4u32.to_le_bytes(), "a pcap header");
    let mut rec = [0u8; 16];
    f.read_exact(&mut rec).unwrap();
    u32::from_le_bytes(rec[8..12].try_into().unwrap())
}

#[test]
fn deferred_reconnecting_hook_on_every_gate() {
    use nfkit_daemon::pb;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let (_d, _metrics) = daemon(&socket);
    let mut c = nfkit_ctl::Ctl::connect(nfkit_ctl::Target::Unix(socket.clone())).unwrap();
    c.create_module("src", "Source", "size=60").unwrap();
    c.create_module("rep", "Replicate", "gates=2").unwrap();
    c.create_module("a", "Sink", "").unwrap();
    c.create_module("b", "Sink", "").unwrap();
    c.connect_modules("src", 0, "rep", 0).unwrap();
    c.connect_modules("rep", 0, "a", 0).unwrap();
    c.connect_modules("rep", 1, "b", 0).unwrap();
    let fifo = dir.path().join("cap.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let hook = |gate| tcpdump_hook("cap", "rep", gate, &fifo, true);
    // Gate -1 with defer: accepted before anyone reads the FIFO.
    c.configure_gate_hook(hook(-1), true).unwrap();
    let hooks = c.gate_hooks().unwrap();
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    let arg: pb::TcpdumpArg =
        nfkit_daemon::mclass::decode(hooks[0].arg.as_ref(), "TcpdumpArg").unwrap();
    assert!(arg.defer && arg.reconnect);
    // GetModuleInfo lists the hooks of each gate.
    let info = c.module_info("rep").unwrap();
    assert_eq!(info.ogates.len(), 2);
    for og in &info.ogates {
        let names: Vec<(&str, &str)> = og
            .gatehooks
            .iter()
            .map(|h| (h.class_name.as_str(), h.hook_name.as_str()))
            .collect();
        assert_eq!(names, [("Track", "track"), ("TcpDump", "cap")]);
    }
    // Other negative gates are refused.
    let e = c.configure_gate_hook(hook(-2), true).unwrap_err();
    assert!(e.to_string().contains("-1 for every gate"), "{e}");

    // A first reader, then (reconnect) a second one: each gets a pcap
    // stream of its own.
    for _ in 0..2 {
        let mut r = std::fs::File::open(&fifo).unwrap();
        assert_eq!(pcap_first_record(&mut r), 60);
        drop(r);
        // The hook's next write finds the reader gone (EPIPE) and closes
        // its end; a reader opening before that would join the old
        // stream, as with any FIFO.
        std::thread::sleep(Duration::from_millis(200));
    }
    // Destroying the module closes the FIFO at once: the reader sees
    // the end of the stream without any other request.
    let mut r = std::fs::File::open(&fifo).unwrap();
    assert_eq!(pcap_first_record(&mut r), 60);
    c.disconnect_modules("src", 0).unwrap();
    c.disconnect_modules("rep", 0).unwrap();
    c.disconnect_modules("rep", 1).unwrap();
    c.destroy_module("rep").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = tx.send(r.read_to_end(&mut sink).is_ok());
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "the FIFO stayed open after its module was destroyed"
    );
    assert!(c.gate_hooks().unwrap().is_empty());
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(0o4000) // O_NONBLOCK
    }
}
