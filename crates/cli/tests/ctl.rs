//! `nfkit ctl` against an `nfkit daemon` the test starts (both the real
//! command, over the daemon's Unix socket): show, add, connect,
//! disconnect, command, run, monitor, daemon reset|stop; the daemon's
//! errors and a missing or wrong socket are clear messages and a
//! non-zero exit. Plus `nfkit completions`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NFKIT: &str = env!("CARGO_BIN_EXE_nfkit");

struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        let mut child = Command::new(NFKIT)
            .arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nfkit daemon");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut ready = false;
        for l in lines.by_ref() {
            if l.unwrap().contains("listening on unix:") {
                ready = true;
                break;
            }
        }
        assert!(ready, "the daemon did not say it listens");
        std::thread::spawn(move || for _ in lines {});
        Daemon {
            child: Some(child),
            socket,
            _dir: dir,
        }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        ctl_at(&self.socket, args)
    }

    /// Succeeds; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert!(
            o.status.success(),
            "nfkit ctl {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// Fails; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "nfkit ctl {args:?} should fail");
        err
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ctl_at(socket: &Path, args: &[&str]) -> Output {
    Command::new(NFKIT)
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run nfkit ctl")
}

/// Packets on the edge `from:0 -> to` in `show pipeline --format json`.
fn edge_packets(d: &Daemon, from: &str, to: &str) -> u64 {
    let j: serde_json::Value =
        serde_json::from_str(&d.ok(&["show", "pipeline", "--format", "json"])).unwrap();
    j["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["from"] == from && e["to"] == to)
        .and_then(|e| e["packets"].as_u64())
        .unwrap_or(0)
}

fn wait_for_packets(d: &Daemon, from: &str, to: &str) -> u64 {
    let t = Instant::now();
    loop {
        let n = edge_packets(d, from, to);
        if n > 0 {
            return n;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no packets on {from} -> {to}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctl_builds_shows_changes_and_stops_a_daemon() {
    let d = Daemon::start();
    assert!(d.ok(&["show", "version"]).starts_with("nfkit "));
    assert!(d.ok(&["show", "worker"]).contains("WID"));
    assert!(d.ok(&["show", "mclass", "Source"]).contains("Source"));

    // src -> q::Queue -> sink, built command by command.
    d.ok(&["add", "module", "src", "Source", "size=60"]);
    d.ok(&["add", "module", "q", "Queue", "size=1024"]);
    d.ok(&["add", "module", "sink", "Sink"]);
    d.ok(&["connect", "src", "q"]);
    d.ok(&["connect", "q:0", "0:sink"]);
    wait_for_packets(&d, "q", "sink");

    let text = d.ok(&["show", "pipeline"]);
    assert!(text.starts_with("src::Source\n"), "{text}");
    assert!(text.contains("pkts ]--> 0:q::Queue"), "{text}");
    assert!(text.contains("pkts ]--> 0:sink::Sink"), "{text}");
    let dot = d.ok(&["show", "pipeline", "--format", "dot"]);
    assert!(dot.starts_with("digraph pipeline {"), "{dot}");
    assert!(dot.contains("\"q\" -> \"sink\""), "{dot}");
    let m = d.ok(&["show", "module", "q"]);
    assert!(m.starts_with("q::Queue"), "{m}");
    assert!(m.contains("to sink:0"), "{m}");

    // A module command and its reply.
    let status = d.ok(&["command", "q", "get_status"]);
    assert!(status.contains("QueueCommandGetStatusResponse"), "{status}");

    // The daemon's errors: its message, a non-zero exit.
    let e = d.fails(&["add", "module", "src", "Source"]);
    assert!(e.contains("already exists") && e.contains("EEXIST"), "{e}");
    let e = d.fails(&["add", "module", "x", "NoSuchClass"]);
    assert!(e.contains("no module class named `NoSuchClass`"), "{e}");
    let e = d.fails(&["command", "sink", "no_such_cmd"]);
    assert!(e.contains("ModuleCommand"), "{e}");
    let e = d.fails(&["connect", "src", "nowhere"]);
    assert!(e.contains("nowhere"), "{e}");

    // Rewire: the queue's output goes away, packets stop reaching sink.
    d.ok(&["disconnect", "q:0"]);
    let text = d.ok(&["show", "pipeline"]);
    assert!(!text.contains("0:sink::Sink"), "{text}");

    // A port and `monitor port` (two frames, not a terminal).
    d.ok(&["add", "port", "p0", "null:size=60"]);
    let ports = d.ok(&["show", "port"]);
    assert!(
        ports.contains("p0") && ports.contains("NfkitPort"),
        "{ports}"
    );
    let mon = d.ok(&["monitor", "port", "--interval", "0.2", "--count", "2"]);
    assert_eq!(mon.matches("[Device: p0] RX:").count(), 2, "{mon}");
    let mon = d.ok(&["monitor", "pipeline", "--interval", "0.2", "--count", "1"]);
    assert!(mon.contains("Mpps") && mon.contains("src::Source"), "{mon}");

    // A `sim:` port added at run time gets the lab's generated traffic.
    d.ok(&["add", "port", "s0", "sim:0"]);
    d.ok(&["add", "module", "sin", "PortInc", "port=s0"]);
    d.ok(&["add", "module", "ssink", "Sink"]);
    d.ok(&["connect", "sin", "ssink"]);
    wait_for_packets(&d, "sin", "ssink");

    // Workers without a core (worker 0, and wid 1 added with core -1)
    // are pinned, as `nfkit run` pins them (issue 14 item 11).
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("w.nfk");
    std::fs::write(
        &f,
        "worker a\nworker b\nws::Source() -> Sink()\nws.attach(worker=b)\n",
    )
    .unwrap();
    d.ok(&["run", f.to_str().unwrap()]);
    let w = d.ok(&["show", "worker"]);
    let cores: Vec<&str> = w
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(cores.len(), 2, "{w}");
    assert!(
        cores.iter().all(|c| c.parse::<usize>().is_ok()),
        "every worker pinned: {w}"
    );

    // Reset: nothing left.
    d.ok(&["daemon", "reset"]);
    assert_eq!(d.ok(&["show", "pipeline"]), "(no modules)\n");
    assert!(d.ok(&["show", "port"]).contains("(no ports)"));

    // A pipeline file loaded into the running daemon.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.nfk");
    std::fs::write(
        &f,
        "tc rl = rate_limit(resource=packet, limit=100k)\n\
         gen::Source(size=60) -> Timestamp() -> m::Measure() -> out::Sink()\n\
         gen.attach(tc=rl)\n",
    )
    .unwrap();
    let r = d.ok(&["run", f.to_str().unwrap()]);
    assert!(
        r.contains("1 traffic classes, 4 modules, 3 links, 1 attachments"),
        "{r}"
    );
    wait_for_packets(&d, "m", "out");
    let tc = d.ok(&["show", "tc"]);
    assert!(tc.contains("rl") && tc.contains("rate_limit"), "{tc}");
    assert!(tc.contains("!leaf_gen:0"), "{tc}");
    let mon = d.ok(&["monitor", "tc", "--interval", "0.2", "--count", "1"]);
    assert!(mon.contains("cycles/p") && mon.contains("rl"), "{mon}");
    // A file that does not parse: its line and column, nothing sent.
    std::fs::write(&f, "a::Source( -> b\n").unwrap();
    let e = d.fails(&["run", f.to_str().unwrap()]);
    assert!(e.contains("p.nfk:1:"), "{e}");

    // Stop: the daemon exits cleanly and removes its socket.
    assert!(d.ok(&["daemon", "stop"]).contains("stopping"));
    let mut d = d;
    let mut child = d.child.take().unwrap();
    let t = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "daemon did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "{st:?}");
    assert!(!d.socket.exists());
    // Now nobody is there: the message names the path.
    let e = d.fails(&["show", "version"]);
    assert!(e.contains(&d.socket.display().to_string()), "{e}");
    assert!(e.contains("no nfkit daemon"), "{e}");
}

#[test]
fn ctl_without_a_daemon_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let o = ctl_at(&missing, &["show", "version"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains(&format!(
            "no nfkit daemon at {}: no such file",
            missing.display()
        )),
        "{e}"
    );

    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let o = ctl_at(&file, &["show", "pipeline"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("is not a socket"), "{e}");

    // A socket nobody listens on any more.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let o = ctl_at(&stale, &["show", "version"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("nothing listens on it"), "{e}");

    // A listener that is not a gRPC server.
    let other = dir.path().join("other.sock");
    let l = std::os::unix::net::UnixListener::bind(&other).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            use std::io::Write;
            let mut s = s;
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\nhello");
        }
    });
    let o = ctl_at(&other, &["show", "version"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains(&other.display().to_string()), "{e}");
}

#[test]
fn completions_are_generated() {
    let o = Command::new(NFKIT)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("_nfkit") && s.contains("ctl"),
        "{}",
        &s[..200.min(s.len())]
    );
    let o = Command::new(NFKIT)
        .args(["completions", "zsh"])
        .output()
        .unwrap();
    assert!(o.status.success());
}
