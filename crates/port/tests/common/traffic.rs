//! Real kernel traffic through a forwarder: ping, a TCP file transfer
//! checked byte for byte at the far end, and iperf3.

use nfkit_port::fwd::{fwd, FwdOptions, FwdReport};
use nfkit_port::Port;
use nfkit_testkit::{have_tool, Netns};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the forwarding thread hands back: its result and the ports.
type FwdOutcome = (Result<FwdReport, nfkit_port::PortError>, [Box<dyn Port>; 2]);

/// The forwarding loop in a thread, stopped and joined on `finish`.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<FwdOutcome>>,
    /// `/proc/<pid>/task/<tid>` of the forwarding thread.
    task: Arc<std::sync::OnceLock<std::path::PathBuf>>,
}

impl Forwarder {
    pub fn start(a: Box<dyn Port>, b: Box<dyn Port>) -> Forwarder {
        Forwarder::start_with(a, b, FwdOptions::default())
    }

    pub fn start_with(mut a: Box<dyn Port>, mut b: Box<dyn Port>, opts: FwdOptions) -> Forwarder {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = Arc::new(std::sync::OnceLock::new());
        let t = task.clone();
        let handle = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let _ = t.set(std::path::Path::new("/proc").join(me));
            let opts = FwdOptions {
                stop_when_done: false,
                ..opts
            };
            let r = fwd([&mut *a, &mut *b], &opts, &s, |_| {});
            (r, [a, b])
        });
        Forwarder {
            stop,
            handle: Some(handle),
            task,
        }
    }

    /// The forwarding thread's CPU time so far (schedstat: time on a CPU).
    pub fn cpu_time(&self) -> Duration {
        assert!(nfkit_testkit::wait_for(Duration::from_secs(10), || self
            .task
            .get()
            .is_some()));
        let task = self.task.get().unwrap();
        let s = std::fs::read_to_string(task.join("schedstat")).unwrap();
        let ns: u64 = s.split_whitespace().next().unwrap().parse().unwrap();
        Duration::from_nanos(ns)
    }

    /// Stop, and check that on every port and direction the counters add
    /// up: received = forwarded + dropped, and each port's own counters
    /// agree with the loop's.
    pub fn finish(mut self) -> FwdReport {
        self.stop.store(true, Ordering::Relaxed);
        let (r, ports) = self.handle.take().unwrap().join().unwrap();
        let r = r.unwrap();
        for (i, d) in r.dirs.iter().enumerate() {
            assert_eq!(d.received, d.forwarded + d.dropped, "direction {i}: {r:?}");
            let (rx, tx) = (&ports[i], &ports[1 - i]);
            assert_eq!(rx.stats().rx_packets, d.received, "port {} rx", rx.name());
            let t = tx.stats();
            assert_eq!(
                t.tx_packets + t.tx_errors,
                d.forwarded,
                "port {} tx",
                tx.name()
            );
        }
        eprintln!("forwarded: {:?}", r.dirs);
        r
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// ping from `a` to `ip` (a few packets, waiting for ARP).
pub fn ping(a: &Netns, ip: &str) {
    let out = a.run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", ip]);
    assert!(out.is_ok(), "ping {ip} through nfkit: {out:?}");
}

/// Send a file of pseudo-random bytes over TCP from `a` to `b` (at `b_ip`)
/// and compare what arrives. Uses socat, else python3; skips (returns
/// false) if neither is installed.
pub fn tcp_transfer(a: &Netns, b: &Netns, b_ip: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.bin");
    let dst = dir.path().join("out.bin");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..1_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&src, &data).unwrap();
    let (srcs, dsts) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let port = "5001";
    let (server, client): (Vec<String>, Vec<String>) = if have_tool("socat") {
        (
            vec![
                "socat".into(),
                "-u".into(),
                format!("TCP-LISTEN:{port},reuseaddr"),
                format!("CREATE:{dsts}"),
            ],
            vec![
                "socat".into(),
                "-u".into(),
                format!("OPEN:{srcs}"),
                format!("TCP:{b_ip}:{port},retry=20,interval=0.1"),
            ],
        )
    } else if have_tool("python3") {
        (
            vec!["python3".into(), "-c".into(), format!(
                "import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',{port}));s.listen(1)\nc,_=s.accept()\nf=open('{dsts}','wb')\nwhile True:\n d=c.recv(65536)\n if not d: break\n f.write(d)\nf.close()")],
            vec!["python3".into(), "-c".into(), format!(
                "import socket,time\nfor i in range(50):\n try:\n  s=socket.create_connection(('{b_ip}',{port}),timeout=5);break\n except OSError: time.sleep(0.1)\ns.sendall(open('{srcs}','rb').read());s.close()")],
        )
    } else {
        nfkit_testkit::skipping("TCP transfer: neither socat nor python3 is installed");
        return false;
    };
    let sv: Vec<&str> = server.iter().map(String::as_str).collect();
    // bounded: a transfer that stalls fails the test instead of hanging it
    let cv: Vec<&str> = ["timeout", "30"]
        .into_iter()
        .chain(client.iter().map(String::as_str))
        .collect();
    let server = b.spawn(&sv).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    a.run(&cv).unwrap();
    server.wait(Duration::from_secs(20)).unwrap();
    let got = std::fs::read(&dst).unwrap();
    assert_eq!(got.len(), data.len(), "bytes received");
    assert!(got == data, "file differs after the TCP transfer");
    true
}

/// A short iperf3 TCP run from `a` to `b`; skipped (false) without iperf3.
pub fn iperf3(a: &Netns, b: &Netns, b_ip: &str) -> bool {
    if !have_tool("iperf3") {
        nfkit_testkit::skipping("iperf3 part: iperf3 is not installed");
        return false;
    }
    let server = b.spawn(&["iperf3", "-s", "-1", "-p", "5201"]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = a
        .run(&["iperf3", "-c", b_ip, "-p", "5201", "-t", "1", "-J"])
        .unwrap();
    server.wait(Duration::from_secs(10)).unwrap();
    assert!(out.contains("\"sum_received\""), "{out}");
    let bytes = out
        .split("\"sum_received\"")
        .nth(1)
        .and_then(|s| s.split("\"bytes\":").nth(1))
        .map(|s| {
            s.trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(bytes > 0, "iperf3 moved no data: {out}");
    eprintln!("iperf3 through nfkit: {bytes} bytes in 1 s");
    true
}

/// The checksum errors the namespace's stack counted (`nstat -az`:
/// IP, TCP and UDP InCsumErrors); 0 without nstat.
pub fn csum_errors(ns: &Netns) -> u64 {
    if !have_tool("nstat") {
        nfkit_testkit::skipping("checksum error count: nstat is not installed");
        return 0;
    }
    let out = ns.run(&["nstat", "-az"]).unwrap_or_default();
    out.lines()
        .filter(|l| l.contains("InCsumErrors"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}
