//! Workloads over real ports: a generator port G sends at full rate to
//! port I, a forwarder moves everything I receives to port O, and port
//! S receives what O sends.
//!
//! - `veth`: G and S are AF_PACKET ports, I and O AF_XDP ports, on two
//!   veth pairs the soak makes (G-I, O-S) and removes (IPv6 off on them,
//!   so that the kernel sends nothing of its own);
//! - `vhost-user`: G and S are nfkit's virtio-user driver, I and O
//!   nfkit's vhost-user backend, on two sockets.
//!
//! Checked while running: the forwarder's received = sent + dropped
//! (O refused them, counted in O's `tx_dropped`) + held, exactly. At the
//! end, the generator stops, the forwarder drains, and then on each
//! link what the sender sent = what the receiver took + what the
//! receiving socket or queue dropped, as the port counts it (with the
//! kernel's own counters for kernel sockets: `PACKET_STATISTICS`,
//! `XDP_STATISTICS`) + what the veth dropped (its netdev counters);
//! the forwarder's books match I's and O's counters; and every buffer of
//! every port's pool is back.

use anyhow::{bail, ensure, Context, Result};
use nfkit_port::{Batch, Mempool, OpenOptions, Port, QueueStats, Registry};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Counters the forwarding thread publishes after each loop.
#[derive(Default)]
struct Books {
    rx: AtomicU64,
    tx: AtomicU64,
    dropped: AtomicU64,
    held: AtomicU64,
    sunk: AtomicU64,
}

/// Which ports and links a [`PortLoad`] runs over.
pub enum Kind {
    Veth,
    VhostUser,
}

/// What the soak made for the workload, removed when dropped.
enum Setup {
    /// Removed when dropped.
    Veth {
        _pairs: Vec<nfkit_testkit::Veth>,
    },
    Sockets(Vec<std::path::PathBuf>),
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Setup::Sockets(paths) = self {
            for p in paths {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

pub struct PortLoad {
    name: &'static str,
    stop: Arc<AtomicBool>,
    /// Set once the generator has returned: the forwarder drains.
    drain: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    books: Arc<Books>,
    gen: Option<JoinHandle<Box<dyn Port>>>,
    fwd: Option<JoinHandle<[Box<dyn Port>; 3]>>,
    pools: Vec<Mempool>,
    /// (sender interface, receiver interface) of each veth link.
    links: Vec<(String, String)>,
    _setup: Setup,
}

/// A 60-byte frame of a local experimental EtherType (nothing in the
/// kernel handles it), numbered.
fn frame(n: u64) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0x5a, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x5a, 0x01]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..22].copy_from_slice(&n.to_be_bytes());
    f
}

/// Turn IPv6 off on an interface, so that the kernel sends no router
/// solicitations or MLD reports of its own onto the link.
fn no_ipv6(iface: &str) -> Result<()> {
    let p = format!("/proc/sys/net/ipv6/conf/{iface}/disable_ipv6");
    if std::path::Path::new(&p).exists() {
        std::fs::write(&p, "1").with_context(|| format!("writing {p}"))?;
    }
    Ok(())
}

fn netdev_stat(iface: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

impl PortLoad {
    pub fn start(kind: Kind) -> Result<PortLoad> {
        let opts = OpenOptions::default();
        let reg = Registry::new().with(nfkit_virtio::opener());
        let open = |spec: &str| -> Result<Box<dyn Port>> {
            reg.open_str(spec, &opts)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("opening {spec}"))
        };
        let (name, g, i, o, s, links, setup) = match kind {
            Kind::Veth => {
                let gi = nfkit_testkit::Veth::new()?;
                let os = nfkit_testkit::Veth::new()?;
                for v in [&gi.a, &gi.b, &os.a, &os.b] {
                    no_ipv6(v)?;
                }
                let i = open(&format!("afxdp:{},mode=copy", gi.b))?;
                let o = open(&format!("afxdp:{},mode=copy", os.a))?;
                let s = open(&format!("afpacket:{}", os.b))?;
                let g = open(&format!("afpacket:{}", gi.a))?;
                let links = vec![(gi.a.clone(), gi.b.clone()), (os.a.clone(), os.b.clone())];
                (
                    "veth",
                    g,
                    i,
                    o,
                    s,
                    links,
                    Setup::Veth {
                        _pairs: vec![gi, os],
                    },
                )
            }
            Kind::VhostUser => {
                let dir = std::env::temp_dir();
                let pid = std::process::id();
                let (p1, p2) = (
                    dir.join(format!("nfkit-soak-{pid}-in.sock")),
                    dir.join(format!("nfkit-soak-{pid}-out.sock")),
                );
                let i = open(&format!("vhost-user:{}", p1.display()))?;
                let g = open(&format!("virtio-user:{}", p1.display()))?;
                let o = open(&format!("vhost-user:{}", p2.display()))?;
                let s = open(&format!("virtio-user:{}", p2.display()))?;
                (
                    "vhost-user",
                    g,
                    i,
                    o,
                    s,
                    Vec::new(),
                    Setup::Sockets(vec![p1, p2]),
                )
            }
        };
        let pools = [&g, &i, &o, &s].map(|p| p.pool().clone()).to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let drain = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let books = Arc::new(Books::default());
        let gen = {
            let (stop, accepted) = (stop.clone(), accepted.clone());
            std::thread::Builder::new()
                .name(format!("soak-{name}-gen"))
                .spawn(move || generate(g, &stop, &accepted))?
        };
        let fwd = {
            let (drain, books) = (drain.clone(), books.clone());
            std::thread::Builder::new()
                .name(format!("soak-{name}-fwd"))
                .spawn(move || forward([i, o, s], &drain, &books))?
        };
        Ok(PortLoad {
            name,
            stop,
            drain,
            accepted,
            books,
            gen: Some(gen),
            fwd: Some(fwd),
            pools,
            links,
            _setup: setup,
        })
    }
}

/// Send numbered frames on `g` as fast as it takes them; frames it
/// refuses are dropped and counted in its `tx_dropped`.
fn generate(mut g: Box<dyn Port>, stop: &AtomicBool, accepted: &AtomicU64) -> Box<dyn Port> {
    let mut cache = g.pool().cache(64);
    let mut batch = Batch::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        while batch.room() > 0 {
            let Some(mut b) = cache.alloc() else { break };
            if b.copy_from(&frame(n)).is_err() {
                break;
            }
            n += 1;
            batch.push(b);
        }
        let sent = g.tx_batch(0, &mut batch);
        accepted.fetch_add(sent as u64, Ordering::Relaxed);
        if !batch.is_empty() {
            g.tx_refused(0, batch.len() as u64);
            batch.clear();
            std::thread::yield_now();
        }
        // Nothing comes back on G; keep its receive side drained anyway.
        let mut rx = Batch::new();
        if g.rx_batch(0, &mut rx) > 0 {
            rx.clear();
        }
    }
    // Let the port push out what it queued.
    for _ in 0..100 {
        g.tx_batch(0, &mut batch);
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(cache);
    g
}

/// Forward I to O; count what S receives. Once `drain` is set (the
/// generator has returned), run until nothing has moved for 300 ms (at
/// most 5 s), then hand the ports back.
fn forward(ports: [Box<dyn Port>; 3], drain: &AtomicBool, books: &Books) -> [Box<dyn Port>; 3] {
    let [mut i, mut o, mut s] = ports;
    let mut batch = Batch::new();
    let mut sink = Batch::new();
    let (mut rx, mut tx, mut dropped, mut sunk) = (0u64, 0u64, 0u64, 0u64);
    let mut quiet_since: Option<Instant> = None;
    let mut stopping_at: Option<Instant> = None;
    loop {
        let n = i.rx_batch(0, &mut batch) as u64;
        rx += n;
        tx += o.tx_batch(0, &mut batch) as u64;
        if !batch.is_empty() {
            o.tx_refused(0, batch.len() as u64);
            dropped += batch.len() as u64;
            batch.clear();
        }
        let m = s.rx_batch(0, &mut sink) as u64;
        sunk += m;
        sink.clear();
        books.rx.store(rx, Ordering::Relaxed);
        books.tx.store(tx, Ordering::Relaxed);
        books.dropped.store(dropped, Ordering::Relaxed);
        books.sunk.store(sunk, Ordering::Relaxed);
        books.held.store(batch.len() as u64, Ordering::Release);
        if drain.load(Ordering::Relaxed) {
            let now = Instant::now();
            let since = *stopping_at.get_or_insert(now);
            if n + m > 0 {
                quiet_since = None;
            } else if now.duration_since(*quiet_since.get_or_insert(now))
                > Duration::from_millis(300)
                || now.duration_since(since) > Duration::from_secs(5)
            {
                break;
            }
        }
        if n + m == 0 {
            std::thread::yield_now();
        }
    }
    [i, o, s]
}

impl crate::Workload for PortLoad {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&mut self) -> Result<String> {
        let held = self.books.held.load(Ordering::Acquire);
        let rx = self.books.rx.load(Ordering::Relaxed);
        let tx = self.books.tx.load(Ordering::Relaxed);
        let dropped = self.books.dropped.load(Ordering::Relaxed);
        ensure!(
            rx == tx + dropped + held,
            "forwarder: received {rx} != sent {tx} + dropped {dropped} + held {held}"
        );
        Ok(format!(
            "sent by G {}; fwd rx {rx} tx {tx} dropped {dropped}; S received {}",
            self.accepted.load(Ordering::Relaxed),
            self.books.sunk.load(Ordering::Relaxed)
        ))
    }

    fn finish(mut self: Box<Self>) -> Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let panicked = |_| anyhow::anyhow!("a thread of {} panicked", self.name);
        let g = self
            .gen
            .take()
            .context("no generator")?
            .join()
            .map_err(panicked)?;
        self.drain.store(true, Ordering::Relaxed);
        let [i, o, s] = self
            .fwd
            .take()
            .context("no forwarder")?
            .join()
            .map_err(panicked)?;
        let line = self.check()?;
        let (gs, is, os, ss) = (g.stats(), i.stats(), o.stats(), s.stats());
        let accepted = self.accepted.load(Ordering::Relaxed);
        let [rx, tx, dropped] = [&self.books.rx, &self.books.tx, &self.books.dropped]
            .map(|a| a.load(Ordering::Relaxed));
        let sunk = self.books.sunk.load(Ordering::Relaxed);
        ensure!(
            gs.tx_packets + gs.tx_errors == accepted,
            "G: sent {} + errors {} != {accepted} it took",
            gs.tx_packets,
            gs.tx_errors
        );
        ensure!(
            is.rx_packets == rx && os.tx_packets + os.tx_errors == tx && os.tx_dropped == dropped,
            "forwarder's books (rx {rx} tx {tx} dropped {dropped}) != I's {is:?} / O's {os:?}"
        );
        ensure!(
            ss.rx_packets == sunk,
            "S counted {} received, the loop {sunk}",
            ss.rx_packets
        );
        let mut lines = vec![line];
        lines.push(self.check_link("G -> I", self.link(0), &gs, &is, true)?);
        lines.push(self.check_link("O -> S", self.link(1), &os, &ss, false)?);
        drop((g, i, o, s));
        for p in &self.pools {
            ensure!(
                p.free_count() == p.capacity(),
                "pool {}: {} of {} buffers back",
                p.name(),
                p.free_count(),
                p.capacity()
            );
        }
        lines.push("every buffer back".into());
        Ok(lines.join("; "))
    }
}

impl PortLoad {
    fn link(&self, k: usize) -> (Option<&str>, Option<&str>) {
        match self.links.get(k) {
            Some((a, b)) => (Some(a.as_str()), Some(b.as_str())),
            None => (None, None),
        }
    }

    /// Sent = received + dropped at the receiver + dropped by the link.
    /// `xdp`: the receiver is an XDP socket on the veth, where a frame
    /// the program cannot redirect to the socket (its fill ring empty,
    /// its RX ring full) is counted twice by the kernel: in the socket's
    /// `XDP_STATISTICS` and in the veth's `rx_dropped`; counted once here.
    fn check_link(
        &self,
        what: &str,
        (from, to): (Option<&str>, Option<&str>),
        sent: &QueueStats,
        got: &QueueStats,
        xdp: bool,
    ) -> Result<String> {
        let tx_dropped = from.map_or(0, |f| netdev_stat(f, "tx_dropped"));
        let rx_dropped = to.map_or(0, |t| netdev_stat(t, "rx_dropped"));
        let mut link_drops = tx_dropped + rx_dropped;
        if xdp && to.is_some() {
            ensure!(
                got.rx_dropped <= rx_dropped,
                "{what}: the XDP socket dropped {} frames, the veth counted only {rx_dropped}",
                got.rx_dropped
            );
            link_drops -= got.rx_dropped;
        }
        let arrived = got.rx_packets + got.rx_dropped + got.rx_errors + link_drops;
        if sent.tx_packets != arrived {
            bail!(
                "{what}: sent {} != received {} + dropped at the receiver {} + errors {} + dropped by the link {link_drops} (veth tx_dropped {tx_dropped}, rx_dropped {rx_dropped})",
                sent.tx_packets,
                got.rx_packets,
                got.rx_dropped,
                got.rx_errors
            );
        }
        Ok(format!(
            "{what}: sent {} = received {} + receiver drops {} + link drops {link_drops}",
            sent.tx_packets,
            got.rx_packets,
            got.rx_dropped + got.rx_errors
        ))
    }
}
