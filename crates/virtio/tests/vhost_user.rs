//! Our vhost-user frontend against our vhost-user backend, in one
//! process over a real Unix socket and shared memfd memory.

use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_port::Port;
use nfkit_virtio::vhost_user::{self, BackendConfig, FrontendConfig, VhostUserBackend};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfkit-vu-{tag}-{}.sock", std::process::id()))
}

fn backend(tag: &str, pairs: u16) -> VhostUserBackend {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "backend", 1024, 2048).unwrap();
    let cfg = BackendConfig {
        name: format!("vhost-user:{tag}"),
        path: socket_path(tag),
        queue_pairs: pairs,
        mac: [2, 0, 0, 0, 0, 1],
        host_tso: false,
    };
    VhostUserBackend::listen(cfg, pool).unwrap()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn packet(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Send `count` packets from `from` queue `q` and check they arrive
/// byte-exact at `to`.
fn exchange(from: &mut dyn Port, to: &mut dyn Port, q: usize, count: usize) {
    let mut batch = Batch::new();
    for i in 0..count {
        let mut b = from.pool().alloc().unwrap();
        b.copy_from(&packet(i, 60 + i % 1400)).unwrap();
        batch.push(b);
    }
    let mut sent = 0;
    let start = Instant::now();
    while !batch.is_empty() {
        sent += from.tx_batch(q, &mut batch);
        assert!(start.elapsed() < Duration::from_secs(5), "could not send");
    }
    assert_eq!(sent, count);
    let mut got = Vec::new();
    let mut rx = Batch::new();
    wait_for("packets", || {
        to.rx_batch(q, &mut rx);
        got.extend(rx.drain().map(|p| p.data().to_vec()));
        // the sender reclaims its transmitted buffers on its next call
        from.tx_batch(q, &mut Batch::new());
        got.len() >= count
    });
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p, &packet(i, 60 + i % 1400), "packet {i} differs");
    }
}

#[test]
fn frontend_and_backend_exchange_packets_byte_exact_and_survive_reconnects() {
    let mut be = backend("pair", 2);
    let cfg = FrontendConfig {
        queue_pairs: 2,
        ..FrontendConfig::default()
    };
    for round in 0..2 {
        let mut fe = vhost_user::connect(&socket_path("pair"), &cfg).unwrap();
        wait_for("rings", || be.ready(0) && be.ready(1));
        for q in 0..2 {
            exchange(&mut fe, &mut be, q, 64);
            exchange(&mut be, &mut fe, q, 64);
        }
        assert_eq!(fe.stats().tx_packets, 128, "round {round}");
        drop(fe);
        wait_for("disconnect", || !be.connected());
    }
    assert_eq!(be.stats().rx_packets, 256);
    assert_eq!(be.stats().rx_errors + be.stats().tx_errors, 0);
}

/// Send `frames` (chained where longer than a buffer) from `from` and
/// check they arrive whole and byte-exact at `to`.
fn exchange_frames(from: &mut dyn Port, to: &mut dyn Port, frames: &[Vec<u8>]) {
    let mut batch = Batch::new();
    for f in frames {
        batch.push(from.pool().alloc_frame(f).unwrap());
    }
    let start = Instant::now();
    while !batch.is_empty() {
        from.tx_batch(0, &mut batch);
        assert!(start.elapsed() < Duration::from_secs(5), "could not send");
    }
    let mut got = Vec::new();
    let mut rx = Batch::new();
    wait_for("frames", || {
        to.rx_batch(0, &mut rx);
        for p in rx.drain() {
            let mut whole = Vec::new();
            p.copy_frame_to(&mut whole);
            got.push(whole);
        }
        from.tx_batch(0, &mut Batch::new());
        got.len() >= frames.len()
    });
    for (i, (g, f)) in got.iter().zip(frames).enumerate() {
        assert!(
            g == f,
            "frame {i} ({} bytes) arrived as {} bytes or differs",
            f.len(),
            g.len()
        );
    }
}

/// Jumbo and 64 KiB frames both ways between nfkit's driver and its
/// backend: MRG_RXBUF and descriptor chains, held as chained buffers.
#[test]
fn jumbo_and_64k_frames_cross_as_chains_both_ways() {
    let mut be = backend("jumbo", 1);
    let mut fe = vhost_user::connect(&socket_path("jumbo"), &FrontendConfig::default()).unwrap();
    wait_for("rings", || be.ready(0));
    let offloads = fe.offloads();
    assert!(offloads.mergeable && offloads.send_csum && offloads.recv_csum);
    assert!(be.offloads().mergeable);
    assert!(be.max_frame() >= 65_536 && fe.max_frame() >= 65_536);
    assert!(be.capabilities().has(nfkit_port::cap::TX_L4_CSUM));
    let frames: Vec<Vec<u8>> = [9000, 60, 9018, 1920, 1921, 65_535, 4000]
        .iter()
        .enumerate()
        .map(|(i, &n)| packet(i, n))
        .collect();
    exchange_frames(&mut fe, &mut be, &frames);
    exchange_frames(&mut be, &mut fe, &frames);
    assert_eq!(be.stats().rx_errors + be.stats().tx_errors, 0);
    assert_eq!(be.drops(0).total() + fe.drops(0).total(), 0);
}

/// TSO both ways (issue 19 item 3): with HOST_TSO offered (`tso=on`)
/// and GUEST_TSO asked, a 60 KB TCP super-frame crosses as a chain with
/// its segmentation kind and size in the offload metadata, byte-exact;
/// without them, the same frame is refused with its reason.
#[test]
fn tso_super_frames_cross_with_their_offload_metadata() {
    use nfkit_hw::pool::offload::{self as ol, Gso};
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "backend", 1024, 2048).unwrap();
    let cfg = BackendConfig {
        name: "vhost-user:tso".into(),
        path: socket_path("tso"),
        queue_pairs: 1,
        mac: [2, 0, 0, 0, 0, 1],
        host_tso: true,
    };
    let mut be = VhostUserBackend::listen(cfg, pool).unwrap();
    let fcfg = FrontendConfig {
        guest_tso: true,
        ..FrontendConfig::default()
    };
    let mut fe = vhost_user::connect(&socket_path("tso"), &fcfg).unwrap();
    wait_for("rings", || be.ready(0));
    assert!(fe.offloads().send_tso4 && fe.offloads().recv_gso);
    assert!(be.offloads().send_tso4 && be.offloads().recv_gso);
    assert!(be.capabilities().has(nfkit_port::cap::TX_TSO));
    let (a, z) = (
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
    );
    let frame = nfkit_packet::FrameBuilder::tcp((a, 1000), (z, 2000))
        .payload(&packet(3, 60_000))
        .build();
    let mut o = nfkit_packet::offload_meta::describe(&frame).unwrap();
    o.flags = ol::L4_CSUM;
    o.gso = Gso::Tcp;
    o.gso_size = 1448;
    for (from, to) in [(0, 1), (1, 0)] {
        let mut ports: [&mut dyn Port; 2] = [&mut fe, &mut be];
        let mut p = ports[from].pool().alloc_frame(&frame).unwrap();
        p.set_offload(o);
        let mut batch = Batch::new();
        batch.push(p);
        let start = Instant::now();
        while !batch.is_empty() {
            ports[from].tx_batch(0, &mut batch);
            assert!(start.elapsed() < Duration::from_secs(5), "could not send");
        }
        let mut rx = Batch::new();
        wait_for("the super-frame", || {
            ports[to].rx_batch(0, &mut rx);
            ports[from].tx_batch(0, &mut Batch::new());
            !rx.is_empty()
        });
        let got = rx.pop().unwrap();
        let mut whole = Vec::new();
        got.copy_frame_to(&mut whole);
        assert!(whole == frame, "{from} -> {to}: the frame differs");
        let m = got
            .offload()
            .copied()
            .expect("segmentation in the metadata");
        assert_eq!((m.gso, m.gso_size, m.l4_start()), (Gso::Tcp, 1448, 34));
        assert!(got.is_chained());
    }
    assert_eq!(be.drops(0).total() + fe.drops(0).total(), 0);
}

#[test]
fn malformed_messages_drop_the_frontend_not_the_port() {
    let mut be = backend("garbage", 1);
    // A header announcing a 1 MiB body, then junk.
    let mut s = std::os::unix::net::UnixStream::connect(socket_path("garbage")).unwrap();
    let mut msg = Vec::new();
    msg.extend_from_slice(&9999u32.to_le_bytes());
    msg.extend_from_slice(&1u32.to_le_bytes());
    msg.extend_from_slice(&(1u32 << 20).to_le_bytes());
    msg.extend_from_slice(&[0xAB; 64]);
    let _ = s.write_all(&msg);
    wait_for("the backend to drop the bad frontend", || {
        be.counters()
            .protocol_errors
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            && !be.connected()
    });
    drop(s);
    // A well-behaved frontend still works.
    let mut fe = vhost_user::connect(&socket_path("garbage"), &FrontendConfig::default()).unwrap();
    wait_for("rings", || be.ready(0));
    exchange(&mut fe, &mut be, 0, 10);
}

#[test]
fn memory_tables_and_rings_outside_the_shared_memory_are_refused() {
    use nfkit_virtio::MemfdArena;
    use std::os::fd::AsRawFd;
    use vhost::vhost_user::message::VhostUserProtocolFeatures;
    use vhost::vhost_user::{Frontend, VhostUserFrontend};
    use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};

    let be = backend("hostile", 1);
    let mut fe = Frontend::connect(socket_path("hostile"), 2).unwrap();
    fe.set_owner().unwrap();
    let features = fe.get_features().unwrap();
    fe.set_features(features).unwrap();
    let pf = fe.get_protocol_features().unwrap();
    assert!(pf.contains(VhostUserProtocolFeatures::REPLY_ACK));
    fe.set_protocol_features(VhostUserProtocolFeatures::REPLY_ACK)
        .unwrap();
    // Ask for an ack of every request, so refusals come back as errors.
    fe.set_hdr_flags(vhost::vhost_user::message::VhostUserHeaderFlag::NEED_REPLY);
    let arena = MemfdArena::new("hostile", 64 * 1024).unwrap();
    let region = |size: u64, offset: u64| VhostUserMemoryRegionInfo {
        guest_phys_addr: 0x1000_0000,
        memory_size: size,
        userspace_addr: arena.base_addr(),
        mmap_offset: offset,
        mmap_handle: arena.file().as_raw_fd(),
    };
    // Larger than the file behind it: touching it would SIGBUS.
    assert!(fe.set_mem_table(&[region(1 << 30, 0)]).is_err());
    assert!(fe.set_mem_table(&[region(0, 0)]).is_err());
    // A sane table, then rings outside it.
    fe.set_mem_table(&[region(64 * 1024, 0)]).unwrap();
    fe.set_vring_num(0, 256).unwrap();
    assert!(fe.set_vring_num(0, 100).is_err(), "not a power of two");
    let outside = VringConfigData {
        queue_max_size: 256,
        queue_size: 256,
        flags: 0,
        desc_table_addr: arena.base_addr() + (1 << 20),
        used_ring_addr: arena.base_addr(),
        avail_ring_addr: arena.base_addr(),
        log_addr: None,
    };
    assert!(fe.set_vring_addr(0, &outside).is_err());
    assert!(fe.set_vring_addr(7, &outside).is_err(), "no ring 7");
    let refused = be
        .counters()
        .refused
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(refused >= 3, "refused {refused}");
    // A region whose end overflows is malformed at the protocol level:
    // refused, and the frontend is dropped.
    assert!(fe.set_mem_table(&[region(4096, u64::MAX - 100)]).is_err());
    wait_for("the backend to drop the frontend", || !be.connected());
}

#[test]
fn specs_open_through_a_registry_with_the_opener() {
    use nfkit_port::{OpenOptions, Registry};
    let reg = Registry::new().with(nfkit_virtio::opener());
    let path = socket_path("registry");
    // The struct update keeps this compiling if options are added.
    #[allow(clippy::needless_update)]
    let opts = OpenOptions {
        pool_buffers: 1024,
        ..OpenOptions::default()
    };
    let mut be = reg
        .open_str(&format!("vhost-user:{},queues=2", path.display()), &opts)
        .unwrap();
    let mut fe = reg
        .open_str(&format!("virtio-user:{},queues=2", path.display()), &opts)
        .unwrap();
    assert_eq!((be.rx_queues(), fe.tx_queues()), (2, 2));
    assert!(fe.name().starts_with("virtio-user:"));
    exchange(&mut *fe, &mut *be, 1, 64);
    // Specs this opener does not know pass on to the software backends.
    assert_eq!(reg.open_str("null:", &opts).unwrap().name(), "null:");
}

/// Frames the backend cannot hand to the frontend (here: none is
/// connected) are drops in the forwarding totals and in the port's own
/// TX-dropped counter, not "forwarded" (issue 14 item 12).
#[test]
fn frames_the_backend_refuses_are_its_tx_drops() {
    use nfkit_port::fwd::{fwd, FwdOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut be = backend("refuse", 1);
    let mut src = nfkit_port::open(
        &"null:size=60".parse().unwrap(),
        &nfkit_port::OpenOptions::default(),
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let opts = FwdOptions {
        stats_interval: Duration::ZERO,
        ..FwdOptions::default()
    };
    let r = fwd([&mut *src, &mut be], &opts, &stop, |r| {
        if r.dirs[0].received > 2_000 {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    let d = r.dirs[0];
    assert_eq!(d.forwarded, 0, "{d:?}");
    assert_eq!(d.dropped, d.received);
    assert_eq!(be.stats().tx_dropped, d.dropped);
    let _ = std::fs::remove_file(socket_path("refuse"));
}

/// The socket path: a regular file or a socket another backend answers
/// on is never removed (the listen is refused, naming why); a stale
/// socket nobody answers on is replaced (issue 14 item 2).
#[test]
fn only_a_stale_socket_is_replaced() {
    use nfkit_virtio::vhost_user::BackendConfig;
    let listen = |path: PathBuf| {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "b", 256, 2048).unwrap();
        VhostUserBackend::listen(
            BackendConfig {
                name: "vhost-user:x".into(),
                path,
                queue_pairs: 1,
                mac: [2, 0, 0, 0, 0, 1],
                host_tso: false,
            },
            pool,
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("precious.txt");
    std::fs::write(&file, b"user data").unwrap();
    let e = listen(file.clone()).unwrap_err().to_string();
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"user data");

    let live = dir.path().join("live.sock");
    let first = listen(live.clone()).unwrap();
    let e = listen(live.clone()).unwrap_err().to_string();
    assert!(e.contains("another process is serving"), "{e}");
    // the first still serves
    let mut fe = vhost_user::connect(&live, &FrontendConfig::default()).unwrap();
    let mut first = first;
    wait_for("rings", || first.ready(0));
    exchange(&mut fe, &mut first, 0, 4);
    drop(fe);
    drop(first);
    assert!(!live.exists(), "the port removes its own socket");

    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let be = listen(stale.clone()).unwrap();
    drop(be);
}

/// One frontend at a time: a second one is refused (its connection is
/// closed, with a log line) while the first keeps working; a frontend
/// that connects and stays silent is dropped after the set-up timeout so
/// that another can connect (issue 14 item 2).
#[test]
fn extra_and_idle_frontends_do_not_block_the_port() {
    use std::io::Read;
    use std::sync::atomic::Ordering::Relaxed;
    let mut be = backend("extra", 1);
    let path = socket_path("extra");
    let mut fe = vhost_user::connect(&path, &FrontendConfig::default()).unwrap();
    wait_for("rings", || be.ready(0));
    let mut second = std::os::unix::net::UnixStream::connect(&path).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(second.read(&mut buf).unwrap_or(0), 0, "closed at once");
    wait_for("the refusal count", || {
        be.counters().extra_refused.load(Relaxed) == 1
    });
    exchange(&mut fe, &mut be, 0, 8);
    drop(fe);
    wait_for("disconnect", || !be.connected());

    be.set_setup_timeout(Duration::from_millis(200));
    let idle = std::os::unix::net::UnixStream::connect(&path).unwrap();
    wait_for("the idle frontend to be dropped", || {
        be.counters().idle_dropped.load(Relaxed) == 1 && !be.connected()
    });
    drop(idle);
    let mut fe = vhost_user::connect(&path, &FrontendConfig::default()).unwrap();
    wait_for("rings", || be.ready(0));
    exchange(&mut fe, &mut be, 0, 8);
}

/// A forwarding loop from `port` to a sink in a thread (hybrid
/// polling): its CPU time, the packets it received so far, and its end.
struct Sleeper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    got: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: std::sync::Arc<std::sync::OnceLock<PathBuf>>,
    handle: std::thread::JoinHandle<(nfkit_port::fwd::FwdReport, Box<dyn Port>)>,
}

impl Sleeper {
    fn start(mut port: Box<dyn Port>) -> Sleeper {
        use nfkit_port::fwd::{fwd, FwdOptions};
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let got = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = std::sync::Arc::new(std::sync::OnceLock::new());
        let (s, g, t) = (stop.clone(), got.clone(), task.clone());
        let handle = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let _ = t.set(std::path::Path::new("/proc").join(me));
            let mut sink = nfkit_port::open(
                &"null:".parse().unwrap(),
                &nfkit_port::OpenOptions::default(),
            )
            .unwrap();
            let opts = FwdOptions {
                stats_interval: Duration::from_millis(20),
                stop_when_done: false,
                ..FwdOptions::default()
            };
            let r = fwd([&mut *port, &mut *sink], &opts, &s, |r| {
                g.store(r.dirs[0].received, Ordering::Relaxed)
            })
            .unwrap();
            (r, port)
        });
        wait_for("the thread", || task.get().is_some());
        Sleeper {
            stop,
            got,
            task,
            handle,
        }
    }

    /// The loop's share of a core over 2 s of quiet.
    fn idle_share(&self) -> f64 {
        let cpu = || -> Duration {
            let s = std::fs::read_to_string(self.task.get().unwrap().join("schedstat")).unwrap();
            Duration::from_nanos(s.split_whitespace().next().unwrap().parse().unwrap())
        };
        std::thread::sleep(Duration::from_millis(300));
        let (c0, t0) = (cpu(), Instant::now());
        std::thread::sleep(Duration::from_secs(2));
        (cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64()
    }

    fn got(&self) -> u64 {
        self.got.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn finish(self) -> (nfkit_port::fwd::FwdReport, Box<dyn Port>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

fn send_32(from: &mut dyn Port) {
    let mut batch = Batch::new();
    for i in 0..32 {
        let mut b = from.pool().alloc().unwrap();
        b.copy_from(&packet(i, 60)).unwrap();
        batch.push(b);
    }
    assert_eq!(from.tx_batch(0, &mut batch), 32);
}

/// An idle vhost-user port sleeps (its forwarding thread uses almost no
/// CPU: the goal is under 1% of a core, checked with a generous bound),
/// and the frontend's kick, requested only while the loop sleeps
/// (event index), wakes it: packets sent then all arrive. The same the
/// other way: an idle loop on the frontend (virtio-user) sleeps on its
/// call eventfd, and the backend's call (asked for with `used_event`)
/// wakes it.
#[test]
fn an_idle_vhost_user_port_sleeps_and_a_kick_wakes_it() {
    let be = backend("idle", 1);
    let mut fe = vhost_user::connect(&socket_path("idle"), &FrontendConfig::default()).unwrap();
    wait_for("rings", || be.ready(0));
    let loop_be = Sleeper::start(Box::new(be));
    let share = loop_be.idle_share();
    eprintln!(
        "idle vhost-user forwarding thread: {:.2}% of a core",
        share * 100.0
    );
    assert!(share < 0.05, "{:.1}% of a core", share * 100.0);
    send_32(&mut fe);
    wait_for("the packets", || loop_be.got() == 32);
    let (r, mut be) = loop_be.finish();
    eprintln!("{}", r.idle.summary());
    assert!(r.idle.woken >= 1, "a kick woke the loop: {:?}", r.idle);

    // The frontend side: virtio-user sleeps on the call eventfd.
    let loop_fe = Sleeper::start(Box::new(fe));
    let share = loop_fe.idle_share();
    eprintln!(
        "idle virtio-user forwarding thread: {:.2}% of a core",
        share * 100.0
    );
    assert!(share < 0.05, "{:.1}% of a core", share * 100.0);
    send_32(&mut *be);
    wait_for("the packets at the frontend", || loop_fe.got() == 32);
    let (r, _fe) = loop_fe.finish();
    eprintln!("{}", r.idle.summary());
    assert!(r.idle.woken >= 1, "a call woke the loop: {:?}", r.idle);
    let _ = std::fs::remove_file(socket_path("idle"));
}

/// Bad input: a frontend that never kicks. The backend's idle loop
/// sleeps; what the frontend sends without a kick is delivered when the
/// sleep's bound ends it, counted as late wake-ups (and logged once):
/// never a hang.
#[test]
fn a_frontend_that_never_kicks_is_served_by_the_sleep_bound() {
    let be = backend("nokick", 1);
    let cfg = FrontendConfig {
        never_kick: true,
        ..FrontendConfig::default()
    };
    let mut fe = vhost_user::connect(&socket_path("nokick"), &cfg).unwrap();
    wait_for("rings", || be.ready(0));
    let loop_be = Sleeper::start(Box::new(be));
    std::thread::sleep(Duration::from_millis(100)); // asleep by now
    send_32(&mut fe);
    wait_for("the packets without a kick", || loop_be.got() == 32);
    let (r, _be) = loop_be.finish();
    eprintln!("{}", r.idle.summary());
    assert!(r.idle.late >= 1, "no late delivery counted: {:?}", r.idle);
    let _ = std::fs::remove_file(socket_path("nokick"));
}
