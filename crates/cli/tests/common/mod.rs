//! Helpers for the real-traffic tests: namespaces with one veth each, the
//! `nfkit` binary as a child with a bounded run, packet captures.
#![allow(dead_code)]

use nfkit_testkit::{Netns, Veth};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One `nfkit nf` at a time: each busy-polls a core, and the machine
/// running the tests may have only two.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A namespace with one veth end addressed in it; the other end stays in
/// the test's namespace for nfkit. Offloads stay at their defaults;
/// IPv6 is off (no router solicitations in the counters).
pub struct Host {
    pub veth: Veth,
    pub ns: Netns,
    /// The namespace's interface.
    pub dev: String,
    /// The end nfkit opens.
    pub outside: String,
    pub ip: String,
    pub mac: String,
}

impl Host {
    pub fn new(cidr: &str) -> Host {
        let ns = Netns::new().unwrap();
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            .unwrap();
        let mut veth = Veth::new().unwrap();
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", veth.b),
            "1",
        );
        veth.move_a(&ns, cidr).unwrap();
        let mac = mac_of(&ns, &veth.a);
        Host {
            dev: veth.a.clone(),
            outside: veth.b.clone(),
            ip: cidr.split('/').next().unwrap().to_string(),
            mac,
            veth,
            ns,
        }
    }

    /// A static neighbour entry (nfkit's NFs answer no ARP).
    pub fn neighbour(&self, ip: &str, mac: &str) {
        self.ns
            .run(&[
                "ip",
                "neigh",
                "replace",
                ip,
                "lladdr",
                mac,
                "dev",
                &self.dev,
                "nud",
                "permanent",
            ])
            .unwrap();
    }

    pub fn default_route(&self, via: &str) {
        self.ns
            .run(&["ip", "route", "add", "default", "via", via])
            .unwrap();
    }

    pub fn port(&self) -> String {
        format!("afpacket:{}", self.outside)
    }
}

/// The MAC address of `dev` in `ns`.
pub fn mac_of(ns: &Netns, dev: &str) -> String {
    let out = ns.run(&["ip", "-o", "link", "show", "dev", dev]).unwrap();
    out.split("link/ether ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_string()
}

/// A child process killed on drop, with its output read at the end.
pub struct Proc {
    child: Option<Child>,
    what: String,
}

impl Proc {
    pub fn spawn(mut cmd: Command, what: &str) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Proc {
            child: Some(child),
            what: what.to_string(),
        }
    }

    pub fn in_ns(ns: &Netns, args: &[&str]) -> Proc {
        Proc::spawn(ns.command(args), &args.join(" "))
    }

    /// SIGINT (tcpdump then writes out its capture), then wait.
    pub fn interrupt(self, timeout: Duration) -> String {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
        }
        self.wait(timeout)
    }

    /// Wait at most `timeout` for the process to end by itself (else kill
    /// it and fail); its stdout and stderr.
    pub fn wait(mut self, timeout: Duration) -> String {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + timeout;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{} still running after {timeout:?}:\n{}{}",
                    self.what,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() || self.what.starts_with("tcpdump"),
            "{} failed ({}):\n{text}",
            self.what,
            out.status
        );
        text
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `nfkit nf ARGS... --seconds SECONDS` in the test's namespace.
pub struct Nfkit(Proc, u64);

impl Nfkit {
    pub fn start(args: &[&str], seconds: u64) -> Nfkit {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nfkit"));
        cmd.arg("nf")
            .args(args)
            .args(["--seconds", &seconds.to_string()]);
        let p = Proc::spawn(cmd, &format!("nfkit nf {}", args.join(" ")));
        // Let it open its ports before traffic starts.
        std::thread::sleep(Duration::from_millis(700));
        Nfkit(p, seconds)
    }

    /// Wait for the timed stop; the output, after checking that every
    /// packet was accounted for.
    pub fn finish(self) -> String {
        let out = self.0.wait(Duration::from_secs(self.1 + 20));
        assert!(out.contains("every packet accounted for"), "{out}");
        eprintln!("{}", summary(&out));
        out
    }
}

/// The summary part of nfkit's output (after the per-second lines).
pub fn summary(out: &str) -> String {
    let start = out.find("########").unwrap_or(0);
    out[start..].to_string()
}

/// A drop counter (`reason N`) from the last `[NF: ...]` line.
pub fn drops(out: &str, reason: &str) -> u64 {
    out.lines()
        .rev()
        .find(|l| l.starts_with("[NF:"))
        .and_then(|l| l.split(&format!("{reason} ")).nth(1))
        .and_then(|s| {
            s.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The frames of a pcap file.
pub fn frames_of(path: &std::path::Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        match p {
            Ok(p) => v.push(p.data.to_vec()),
            Err(_) => break, // a capture cut short at its end
        }
    }
    v
}

/// `n` pseudo-random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
