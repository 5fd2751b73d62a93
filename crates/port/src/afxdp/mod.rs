//! `afxdp:IFACE[:QUEUE][,queues=N][,mode=auto|copy|zc]`: XDP sockets.
//!
//! One XDP socket per device queue, each with its own UMEM of 2 KiB
//! frames: the first half cycles between the fill and RX rings, the
//! second half is the TX pool (free list, TX ring, completion ring). A
//! small XDP program ([`prog`], assembled in-tree) redirects every frame
//! to the socket of its RX queue through an XSKMAP, and passes frames of
//! other queues to the stack; it is attached with a BPF link, so it goes
//! away with the port.
//!
//! Modes: `zc` binds with `XDP_ZEROCOPY`; `copy` binds with `XDP_COPY`;
//! `auto` (default) tries zero-copy and falls back to copy when the
//! driver says `EOPNOTSUPP`.
//!
//! Where the program runs (`attach=`): `native` in the driver
//! (`XDP_FLAGS_DRV_MODE`; veth has it, and so do most NIC drivers);
//! `generic` on the socket buffer after the driver (`XDP_FLAGS_SKB_MODE`,
//! any interface; not with zero-copy); `auto` (default) native, else
//! generic with the driver's reason logged. DPDK's `net_af_xdp` lets the
//! kernel choose, which is native wherever the driver has it. `auto`
//! also picks generic when the interface receives on queues this port
//! has no socket for: in the driver, those queues' frames would go to
//! the host stack, while generic XDP on veth sees a frame sent on queue
//! q as received on queue q-1 (0 for 0), so a queue-0 port on a
//! two-queue veth gets them all. On veth, native XDP runs on the veth's
//! NAPI poll (the peer's transmissions are queued to it) and takes
//! software segmentation off the peer.
//!
//! Ring sizes: `ring=SLOTS` (default [`DEFAULT_RING`]) slots in each of
//! the four rings, and twice as many UMEM frames. Larger rings cost more
//! per packet when few frames circulate: the kernel fills frames in
//! fill-ring order, so all of the UMEM's RX half cycles through the
//! cache (`nfkit bench ports` measured about 7% more CPU per packet with
//! 2048 slots than with 512).
//!
//! Frames are copied between the UMEM and pool buffers. A frame holds at
//! most 2048 - 256 (XDP headroom) = 1792 bytes: larger frames (MTU above
//! 1778) are dropped by the kernel and show in `rx_dropped`.
//!
//! Tried on veth (kernel 6.18, `nfkit bench ports --case af-xdp`, about
//! 2870 CPU cycles per packet, ~97% of them in the kernel) and left out
//! because they moved the cycles by no more than run-to-run noise (±3%):
//! preferred busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` 20 us,
//! `SO_BUSY_POLL_BUDGET` 64, a `recvfrom` whenever the RX ring is empty);
//! 64- or 128-slot rings; generic attach. With the veth's
//! `napi_defer_hard_irqs`=2 and `gro_flush_timeout`=200 us (what busy
//! polling wants) both nfkit and DPDK's busy-polling `net_af_xdp` fell to
//! about 0.13 Mpps: the veth's NAPI then runs only from the timer, so
//! neither side's busy poll reaches it (the socket learns no NAPI id
//! from veth, it seems). Per packet, the kernel builds a socket buffer
//! for each sent frame with only `NET_SKB_PAD` headroom, and veth's
//! native XDP on the peer copies it into a fresh page to get the 256
//! bytes XDP needs; the headroom follows the device's `needed_headroom`,
//! which veth only raises when a bridge or Open vSwitch asks, so there is
//! no knob for it (both sides pay the copy).
//!
//! Checked again on kernel 6.18 (`perf record -C 1` over `nfkit bench
//! ports --case af-xdp`): nfkit's and DPDK's profiles are the same kernel
//! functions in the same proportions. Each sent frame goes through
//! `__dev_direct_xmit`, whose `local_bh_enable` runs the peer's NAPI poll
//! right there, for that one frame (about 13% of the cycles are this
//! per-frame softirq work: `net_rx_action`, `__napi_schedule`,
//! `napi_complete_done`, `xsk_flush`); it is not batched whatever the
//! socket does. The socket cannot busy-poll the veth's NAPI instead:
//! `SO_INCOMING_NAPI_ID` reads 0 on it after traffic (veth registers no
//! NAPI for its queues). `XDP_MAX_TX_SKB_BUDGET` (6.17) is taken but
//! changes nothing with a few dozen frames per kick, and the batched
//! copy-mode transmit proposed upstream (`XDP_GENERIC_XMIT_BATCH`) is not
//! in this kernel (`ENOPROTOOPT`). What is left in user space is about 3%
//! of the cycles, so neither side can pull far ahead of the other here.

pub mod prog;
pub mod queue;
#[allow(unsafe_code)]
pub mod ring;

use crate::afpacket::interface_index;
use crate::open::{software_pool, OpenOptions};
use crate::spec::{AfXdpSpec, XdpAttach, XdpMode};
use crate::{sys, Batch, Mempool, Port, PortError, QueueStats};
use nfkit_hw::PoolCache;
use queue::{FourRings, SocketRings, FRAME};
use ring::{Ring, Umem};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Buffers the port's receive cache holds (two full batches).
const RX_CACHE: usize = 2 * nfkit_hw::pool::MAX_BATCH;
/// Ring slots when the spec does not say (`ring=SLOTS`).
pub const DEFAULT_RING: u32 = 512;
/// `XDP_FLAGS_SKB_MODE` / `XDP_FLAGS_DRV_MODE` (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `BPF_F_XDP_HAS_FRAGS` (linux/bpf.h): the program handles frames in
/// several buffers.
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// `XDP_USE_SG` (linux/if_xdp.h, kernel 6.6): frames may span several
/// UMEM frames (descriptors chained with `XDP_PKT_CONTD`).
const XDP_USE_SG: u16 = 1 << 4;

/// Kicks per `tx_batch` at most: in copy mode each `sendto` sends up to
/// 32 frames and answers EAGAIN when more are waiting.
const MAX_KICKS: usize = 8;

struct XskQueue {
    fd: OwnedFd,
    /// The data path: UMEM, rings and frame holders ([`queue`]).
    rings: SocketRings,
}

/// How long a bind that finds the queue busy is retried.
const BIND_BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(3);

pub struct AfXdpPort {
    name: String,
    ifname: String,
    /// The sockets held: `queues[i]` serves queue `base + i` (all of the
    /// port's from 0, or one of them in a part, [`Port::split_queues`]).
    queues: Vec<XskQueue>,
    base: usize,
    /// The whole port's queue count.
    count: usize,
    pool: Mempool,
    /// Buffers for received frames, taken from the pool a chunk at a
    /// time (no pool lock per frame).
    rx_cache: PoolCache,
    mac: [u8; 6],
    zero_copy: bool,
    native: bool,
    /// Largest frame carried: the interface's MTU with its header and
    /// a tag, within what the sockets take (several UMEM frames with
    /// `XDP_USE_SG`, else one buffer).
    max_frame: usize,
    error: Option<PortError>,
    /// Shared by the parts of a split port: the program stays attached
    /// while any part is open.
    _attached: Arc<Attached>,
}

/// The redirect program on the interface. Dropping the link detaches
/// the program; the map and program go when their last reference does.
struct Attached {
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
}

impl AfXdpPort {
    pub fn open(name: &str, spec: &AfXdpSpec, opts: &OpenOptions) -> Result<AfXdpPort, PortError> {
        let ifindex = interface_index(name, &spec.iface)?;
        let ring = spec.ring.unwrap_or(DEFAULT_RING);
        let (queues, zero_copy) = open_sockets(name, spec, ifindex, ring)?;
        let last_queue = spec.queue + spec.queues as u32 - 1;
        let bpf_err = |what: &str| {
            let what = what.to_string();
            move |e: io::Error| {
                let fix = if sys::is_permission(&e) {
                    ": loading XDP programs needs root (or CAP_BPF and CAP_NET_ADMIN)"
                } else {
                    ""
                };
                PortError::os(name, format!("{what}{fix}"), e)
            }
        };
        let map = sys::bpf_xskmap_create("nfkit_xsks", last_queue + 1)
            .map_err(bpf_err("cannot create the XSKMAP"))?;
        for (i, q) in queues.iter().enumerate() {
            let qid = spec.queue + i as u32;
            sys::bpf_map_update_u32(map.as_fd(), qid, q.fd.as_raw_fd() as u32)
                .map_err(bpf_err("cannot put the socket in the XSKMAP"))?;
        }
        let insns = prog::redirect_program(map.as_raw_fd());
        let license = c"Dual MIT/GPL";
        // Frags-aware (multi-buffer frames reach it, and an interface
        // with a jumbo MTU takes it); kernels before 5.18 know no such
        // flag: loaded without.
        let prog = sys::bpf_prog_load_xdp("nfkit_redirect", &insns, license, BPF_F_XDP_HAS_FRAGS)
            .or_else(|_| sys::bpf_prog_load_xdp("nfkit_redirect", &insns, license, 0))
            .map_err(bpf_err("the kernel refused the XDP redirect program"))?;
        let (link, native) = attach(name, spec, prog.as_fd(), ifindex, zero_copy)?;
        tracing::info!(
            port = name,
            zero_copy,
            native,
            queues = queues.len(),
            "AF_XDP port open"
        );
        if !zero_copy {
            if let Some(note) = copy_mode_note(&spec.iface) {
                tracing::warn!(port = name, "{note}");
            }
        }
        let pool = software_pool(name, opts.pool_buffers)?;
        let mtu: usize = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", spec.iface))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1500);
        let max_frame = match queues.first() {
            Some(q) if q.rings.max_tx_frame() > FRAME => (mtu + 18).min(q.rings.max_tx_frame()),
            _ => pool.data_room(),
        };
        Ok(AfXdpPort {
            name: name.to_string(),
            ifname: spec.iface.clone(),
            base: 0,
            count: queues.len(),
            queues,
            rx_cache: pool.cache(RX_CACHE),
            pool,
            mac: crate::netdev::read_mac(&spec.iface).unwrap_or([0; 6]),
            zero_copy,
            native,
            max_frame,
            error: None,
            _attached: Arc::new(Attached {
                _link: link,
                _prog: prog,
                _map: map,
            }),
        })
    }

    /// Whether the sockets are bound in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Whether the redirect program runs in the driver (native XDP).
    pub fn native(&self) -> bool {
        self.native
    }
}

/// `ETHTOOL_GTXCSUM`, `ETHTOOL_GTSO`, `ETHTOOL_GGSO` (linux/ethtool.h).
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;

fn sys_u32(ifname: &str, file: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{file}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The peer of a veth-like interface (its `iflink` names another
/// interface) in this network namespace: `Ok(name)`, or `Err(ifindex)`
/// when it is elsewhere; `None` for an interface without a peer.
fn peer_of(ifname: &str) -> Option<Result<String, u32>> {
    let (me, link) = (sys_u32(ifname, "ifindex")?, sys_u32(ifname, "iflink")?);
    if link == me || link == 0 {
        return None;
    }
    let here = std::fs::read_dir("/sys/class/net").ok()?.find_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        (sys_u32(&name, "ifindex") == Some(link) && sys_u32(&name, "iflink") == Some(me))
            .then_some(name)
    });
    Some(here.ok_or(link))
}

/// What copy mode means for checksums on `ifname`, to say at start-up
/// (issue 14): the kernel does not tell an AF_XDP socket in copy mode
/// that a frame's TCP/UDP checksum is partial, which it is when the
/// sender on the other end of a veth has transmit checksum offload on
/// (veth's default). `None` when there is nothing to say (no peer, or a
/// peer with transmit checksums and segmentation off).
pub fn copy_mode_note(ifname: &str) -> Option<String> {
    let what = "frames sent through it with partial TCP/UDP checksums (its transmit \
                checksum offload) reach this copy-mode socket unflagged; nfkit completes \
                every checksum whose field holds the pseudo-header sum, in software, \
                before forwarding";
    match peer_of(ifname)? {
        Ok(peer) => {
            let on = |cmd| sys::ethtool_value(&peer, cmd).is_ok_and(|v| v != 0);
            let mut settings = Vec::new();
            if on(ETHTOOL_GTXCSUM) {
                settings.push("tx-checksumming");
            }
            for (cmd, name) in [
                (ETHTOOL_GTSO, "tcp-segmentation-offload"),
                (ETHTOOL_GGSO, "generic-segmentation-offload"),
            ] {
                if on(cmd) {
                    settings.push(name);
                }
            }
            if settings.is_empty() {
                return None;
            }
            Some(format!(
                "AF_XDP in copy mode on `{ifname}`: its peer `{peer}` has {} on: {what}; \
                 super-frames larger than a 1792-byte frame are dropped by the kernel \
                 (rx_dropped). To have neither: `ethtool -K {peer} tx off tso off gso off`",
                settings.join(", ")
            ))
        }
        Err(index) => Some(format!(
            "AF_XDP in copy mode on `{ifname}`: its peer (ifindex {index}) is in another \
             network namespace, where nfkit cannot read its offload settings; if it has \
             tx-checksumming on (veth's default), {what}. To avoid it: `ethtool -K PEER tx off` \
             in that namespace"
        )),
    }
}

/// The interface's receive queues (from sysfs) that the spec's sockets do
/// not cover; empty if sysfs cannot tell.
fn uncovered_rx_queues(spec: &AfXdpSpec) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/sys/class/net/{}/queues", spec.iface)) else {
        return Vec::new();
    };
    let mine = spec.queue..spec.queue + spec.queues as u32;
    let mut v: Vec<u32> = dir
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("rx-")?
                .parse()
                .ok()
        })
        .filter(|q| !mine.contains(q))
        .collect();
    v.sort_unstable();
    v
}

/// Attach the redirect program `prog` to the interface where the spec
/// asks: in the driver (required for zero-copy), on the socket buffer,
/// or in the driver if it can and else on the socket buffer. Returns the
/// link and whether the program runs in the driver.
fn attach(
    name: &str,
    spec: &AfXdpSpec,
    prog: BorrowedFd<'_>,
    ifindex: u32,
    zero_copy: bool,
) -> Result<(OwnedFd, bool), PortError> {
    let refused = |e: io::Error, how: &str| {
        let fix = match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EEXIST) => format!(
                ": another XDP program is attached to `{0}` (see `ip link show {0}`; remove it with `ip link set {0} xdp off`)",
                spec.iface
            ),
            _ if sys::is_permission(&e) => ": attaching XDP needs root or CAP_NET_ADMIN".into(),
            Some(libc::EOPNOTSUPP) => format!(": the driver of `{}` has no native XDP; use attach=generic", spec.iface),
            _ => String::new(),
        };
        PortError::os(
            name,
            format!(
                "cannot attach the XDP program to `{}` {how}{fix}",
                spec.iface
            ),
            e,
        )
    };
    let uncovered = uncovered_rx_queues(spec);
    let try_native = match spec.attach {
        XdpAttach::Generic => false,
        XdpAttach::Native => true,
        XdpAttach::Auto if zero_copy || uncovered.is_empty() => true,
        XdpAttach::Auto => {
            tracing::info!(
                port = name,
                "`{}` also receives on queues {uncovered:?}, which have no socket of this port: \
                 running the program in generic mode (in the driver, those queues' frames \
                 would go to the host stack; generic XDP on veth sees most of them on queue 0); \
                 give `queues=N` for all of them, or `attach=native`",
                spec.iface
            );
            false
        }
    };
    if try_native {
        match sys::bpf_link_create_xdp(prog, ifindex, XDP_FLAGS_DRV_MODE) {
            Ok(link) => return Ok((link, true)),
            Err(e) if zero_copy || spec.attach == XdpAttach::Native => {
                return Err(refused(e, "in the driver"))
            }
            Err(e) => tracing::info!(
                port = name,
                "native XDP refused on `{}` ({e}); running the program in generic mode",
                spec.iface
            ),
        }
    }
    let link = sys::bpf_link_create_xdp(prog, ifindex, XDP_FLAGS_SKB_MODE)
        .map_err(|e| refused(e, "in generic mode"))?;
    Ok((link, false))
}

/// Open one socket per queue in the requested mode (with the zero-copy to
/// copy fallback of `auto`); returns the sockets and whether they are
/// zero-copy.
fn open_sockets(
    name: &str,
    spec: &AfXdpSpec,
    ifindex: u32,
    ring: u32,
) -> Result<(Vec<XskQueue>, bool), PortError> {
    let tries: &[bool] = match spec.mode {
        XdpMode::Auto => &[true, false],
        XdpMode::ZeroCopy => &[true],
        XdpMode::Copy => &[false],
    };
    let mut last = None;
    for &zc in tries {
        let r: Result<Vec<_>, _> = (0..spec.queues as u32)
            .map(|i| XskQueue::open(ifindex, spec.queue + i, ring, zc))
            .collect();
        match r {
            Ok(qs) => return Ok((qs, zc)),
            Err((step, e)) => {
                let unsupported = matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
                );
                last = Some((step, e));
                if !(zc && unsupported && spec.mode == XdpMode::Auto) {
                    break;
                }
                tracing::debug!(
                    port = name,
                    "zero-copy not supported on {}; using copy mode",
                    spec.iface
                );
            }
        }
    }
    let (step, e) = last.unwrap_or(("open", io::Error::other("no mode to try")));
    let fix = match e.raw_os_error() {
        _ if sys::is_permission(&e) => {
            ": AF_XDP needs root (or CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF)".to_string()
        }
        Some(libc::EOPNOTSUPP) if spec.mode == XdpMode::ZeroCopy => {
            format!(
                ": the driver of `{}` has no zero-copy AF_XDP; use mode=copy",
                spec.iface
            )
        }
        Some(libc::EINVAL) if step == "bind" => format!(
            ": does `{}` have queue {}..{}? (`ethtool -l {0}`; veth needs `numrxqueues`)",
            spec.iface,
            spec.queue,
            spec.queue + spec.queues as u32 - 1
        ),
        Some(libc::EAFNOSUPPORT) => ": the kernel has no AF_XDP (CONFIG_XDP_SOCKETS)".into(),
        _ => String::new(),
    };
    Err(PortError::os(
        name,
        format!("AF_XDP socket {step} failed{fix}"),
        e,
    ))
}

impl XskQueue {
    fn open(
        ifindex: u32,
        queue: u32,
        ring: u32,
        zero_copy: bool,
    ) -> Result<XskQueue, (&'static str, io::Error)> {
        let at = |step: &'static str| move |e: io::Error| (step, e);
        let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0).map_err(at("creation"))?;
        let s = fd.as_fd();
        let frames = 2 * ring as usize;
        let umem = Umem::new(frames, FRAME).map_err(at("UMEM allocation"))?;
        let (addr, len) = umem.region();
        let reg = libc::xdp_umem_reg {
            addr,
            len,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sys::setsockopt(s, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(at("UMEM registration"))?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            sys::setsockopt(s, libc::SOL_XDP, opt, &ring).map_err(at("ring sizing"))?;
        }
        let mut off = libc::xdp_mmap_offsets {
            rx: zero_off(),
            tx: zero_off(),
            fr: zero_off(),
            cr: zero_off(),
        };
        sys::getsockopt(s, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, &mut off)
            .map_err(at("XDP_MMAP_OFFSETS"))?;
        let rings = FourRings {
            fill: Ring::map(s, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING)
                .map_err(at("fill ring mapping"))?,
            comp: Ring::map(s, &off.cr, ring, libc::XDP_UMEM_PGOFF_COMPLETION_RING)
                .map_err(at("completion ring mapping"))?,
            rx: Ring::map(s, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64)
                .map_err(at("RX ring mapping"))?,
            tx: Ring::map(s, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64)
                .map_err(at("TX ring mapping"))?,
        };
        // Puts every receive frame on the fill ring.
        let mut q = XskQueue {
            rings: SocketRings::new(ring, rings, umem),
            fd,
        };
        let mode = if zero_copy {
            libc::XDP_ZEROCOPY
        } else {
            libc::XDP_COPY
        };
        // The kernel tears a previous socket on this queue down
        // asynchronously (a forwarder restarted at once): EBUSY for a
        // moment. Retry for a bounded time, saying so.
        let deadline = std::time::Instant::now() + BIND_BUSY_RETRY;
        let mut said = false;
        // Multi-buffer where the kernel has it (6.6), else without.
        let mut sg = XDP_USE_SG;
        loop {
            match sys::bind_xdp(
                q.fd.as_fd(),
                ifindex,
                queue,
                mode | libc::XDP_USE_NEED_WAKEUP | sg,
                None,
            ) {
                Err(e) if sg != 0 && e.raw_os_error() != Some(libc::EBUSY) => {
                    tracing::debug!(
                        "AF_XDP bind with XDP_USE_SG failed ({e}): frames of one buffer only"
                    );
                    sg = 0;
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        && std::time::Instant::now() < deadline =>
                {
                    if !said {
                        said = true;
                        tracing::warn!(
                            "AF_XDP queue {queue} is busy (a previous socket is still being torn down): retrying for up to {} s",
                            BIND_BUSY_RETRY.as_secs()
                        );
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                r => break r.map_err(at("bind"))?,
            }
        }
        q.rings.set_multi_buffer(sg != 0);
        Ok(q)
    }

    fn rx(&mut self, cache: &mut PoolCache, batch: &mut Batch, complete: bool) -> usize {
        let (n, wake) = self.rings.rx(cache, batch, complete);
        if wake {
            let _ = sys::recv(self.fd.as_fd(), &mut []);
        }
        n
    }

    /// Make the kernel send what is on the TX ring: a `sendto` per
    /// up-to-32 frames in copy mode; only when asked in zero-copy mode.
    fn kick(&mut self, zero_copy: bool) -> Result<(), io::Error> {
        for _ in 0..MAX_KICKS {
            if zero_copy && !self.rings.tx_needs_wakeup() {
                return Ok(());
            }
            match sys::kick_tx(self.fd.as_fd()) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                    ) => {}
                Err(e) => return Err(e),
            }
            if !self.rings.tx_pending() {
                break;
            }
        }
        Ok(())
    }
}

fn zero_off() -> libc::xdp_ring_offset {
    libc::xdp_ring_offset {
        producer: 0,
        consumer: 0,
        desc: 0,
        flags: 0,
    }
}

impl Port for AfXdpPort {
    /// The XDP socket polls readable when its RX ring holds descriptors;
    /// `poll` also gives a driver that set `XDP_RING_NEED_WAKEUP` its
    /// wake-up (the sockets are bound with `XDP_USE_NEED_WAKEUP`).
    fn rx_wake(&self, queue: usize) -> crate::RxWake {
        match self.queues.get(queue.wrapping_sub(self.base)) {
            Some(q) => crate::RxWake::Fd(q.fd.as_raw_fd()),
            None => crate::RxWake::Never,
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.count
    }
    fn tx_queues(&self) -> usize {
        self.count
    }

    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let zc = self.zero_copy;
        let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) else {
            return 0;
        };
        // Keep earlier sends moving even when nothing new is sent.
        if q.rings.tx_pending() {
            if let Err(e) = q.kick(zc) {
                self.error.get_or_insert(PortError::os(
                    &self.name,
                    format!("sending on `{}`", self.ifname),
                    e,
                ));
            }
        }
        q.rx(&mut self.rx_cache, batch, !zc)
    }

    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let zc = self.zero_copy;
        let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) else {
            return 0;
        };
        let n = q.rings.tx(batch);
        if let Err(e) = q.kick(zc) {
            self.error.get_or_insert(PortError::os(
                &self.name,
                format!("sending on `{}`", self.ifname),
                e,
            ));
        }
        n
    }

    fn tx_refused(&mut self, queue: usize, n: u64) {
        if let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) {
            q.rings.stats.tx_dropped += n;
        }
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        let Some(q) = self.queues.get(queue.wrapping_sub(self.base)) else {
            return QueueStats::default();
        };
        let mut s = q.rings.stats;
        let mut k = libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        };
        if sys::getsockopt(q.fd.as_fd(), libc::SOL_XDP, libc::XDP_STATISTICS, &mut k).is_ok() {
            s.rx_dropped += k.rx_dropped + k.rx_ring_full;
            s.rx_errors += k.rx_invalid_descs;
            // Frames we put on the TX ring that the kernel then refused
            // (longer than the MTU): errors, not sent.
            s.tx_packets = s.tx_packets.saturating_sub(k.tx_invalid_descs);
            s.tx_errors += k.tx_invalid_descs;
        }
        s
    }

    fn link(&self) -> crate::LinkStatus {
        crate::netdev::link_status(&self.ifname)
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn tx_chains(&self) -> bool {
        self.max_frame > self.pool.data_room()
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }

    /// One part per socket: each queue id has its own XDP socket, UMEM
    /// and rings, so parts share only the pool (thread-safe; each part
    /// gets its own receive cache) and the attached program.
    fn split_queues(&mut self) -> Option<Vec<Box<dyn Port>>> {
        if self.base != 0 || self.queues.len() != self.count {
            return None; // already a part
        }
        let parts = std::mem::take(&mut self.queues)
            .into_iter()
            .enumerate()
            .map(|(q, xsk)| {
                Box::new(AfXdpPort {
                    name: self.name.clone(),
                    ifname: self.ifname.clone(),
                    queues: vec![xsk],
                    base: q,
                    count: self.count,
                    pool: self.pool.clone(),
                    rx_cache: self.pool.cache(RX_CACHE),
                    mac: self.mac,
                    zero_copy: self.zero_copy,
                    native: self.native,
                    max_frame: self.max_frame,
                    error: None,
                    _attached: self._attached.clone(),
                }) as Box<dyn Port>
            })
            .collect();
        Some(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PortSpec;
    use nfkit_testkit::{require_root, Veth};

    fn open(spec: &str) -> AfXdpPort {
        let Ok(PortSpec::AfXdp(s)) = spec.parse::<PortSpec>() else {
            panic!("{spec} is not an AF_XDP spec");
        };
        AfXdpPort::open(spec, &s, &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// On a two-queue veth, `auto` runs the program in the driver only
    /// when the port has a socket on both queues; `attach=` decides
    /// otherwise.
    #[test]
    fn auto_attach_is_native_when_every_queue_has_a_socket() {
        require_root!();
        // A freshly closed socket keeps its queue busy for a moment, so
        // each case gets an interface of its own.
        let (v, w) = (Veth::with_queues(2).unwrap(), Veth::with_queues(2).unwrap());
        assert!(
            !open(&format!("afxdp:{},mode=copy", v.a)).native(),
            "queue 1 of {} has no socket",
            v.a
        );
        assert!(open(&format!("afxdp:{},mode=copy,attach=native", w.a)).native());
        assert!(open(&format!("afxdp:{}:0,queues=2,mode=copy", v.b)).native());
        assert!(!open(&format!("afxdp:{}:0,queues=2,attach=generic", w.b)).native());
    }
}
