//! `afpacket:IFACE[,queues=N][,ring=SLOTS][,tpacket=2|3][,block_ms=N][,tso=1]`:
//! AF_PACKET sockets on a kernel interface.
//!
//! Each queue is one packet socket with an RX ring and a TX ring
//! ([`ring`]), TPACKET_V2 by default. `tpacket=3` makes the RX ring
//! TPACKET_V3: the kernel packs frames into blocks and hands a partly
//! filled block over after `block_ms` (default 1, the least it has);
//! that suits capture and high, steady rates, while V2 hands every frame
//! over at once, which suits forwarding (`nfkit bench ports` compares
//! both). Received frames are copied out of the RX ring into pool
//! buffers; frames to send are copied into TX slots and one `send` per
//! batch makes the kernel take them all. With `queues=N` the N sockets
//! join one `PACKET_FANOUT_HASH` group, so the kernel spreads flows over
//! them.
//!
//! Socket options, and why:
//! * `PACKET_IGNORE_OUTGOING`: frames the host itself sends out of the
//!   interface are not received (the kernel does not even copy them).
//! * `PACKET_QDISC_BYPASS`: our frames go straight to the driver, as a
//!   NIC driver's would. Traffic control (`tc`) does not apply to them,
//!   and packet captures on the interface do not see them.
//! * `PACKET_VNET_HDR`: lets a TX frame say "copy all of me into the
//!   socket buffer" (see [`ring`]); it also turns off the kernel's MTU
//!   check on the TX ring, so frames are checked here before they go
//!   into it: a frame longer than the MTU (plus Ethernet header and one
//!   802.1Q tag) or shorter than an Ethernet header is dropped and
//!   counted in `tx_errors`, with a warning.
//! * `PACKET_LOSS`: should the kernel still refuse a TX frame, it skips
//!   it rather than stopping the ring for good (the checks above keep
//!   that from happening).
//!
//! Ring sizes: `ring=SLOTS` RX slots (default 512, as DPDK's
//! `net_af_packet`) and 256 TX slots, 2 KiB each. Larger rings cost more
//! per packet when few frames circulate (`nfkit bench ports` measured
//! about 10% more CPU per packet with 2048 RX slots: the kernel and we
//! walk 4 MiB instead of 1 MiB).
//!
//! Interfaces keep their default offloads. The kernel's `virtio_net_hdr`
//! before each received frame says whether its TCP/UDP checksum is
//! partial (the sender's transmit checksum offload) or was verified:
//! the port puts that in the packet's offload metadata (`L4_CSUM`, a
//! checksum still to fill in; `L4_CSUM_GOOD`), and the port that sends
//! the packet fills it in (this one through the kernel: the transmit
//! `virtio_net_hdr` asks for it; others in software before they see
//! it). A partial checksum at an offset nfkit does not parse (IPv6
//! extension headers, unknown tunnels) is completed here in software.
//! Capabilities: `tx-l4-csum tx-inner-l4-csum rx-l4-csum
//! rx-partial-csum`; without `tso=1` the kernel's segmentation is not
//! offered and received super-frames are cut here.
//! A super-frame from segmentation offload (TSO: up to 64 KiB) does not
//! fit a slot; with `PACKET_COPY_THRESH` (TPACKET_V2) the kernel also
//! queues it whole on the socket, where nfkit reads it and cuts it into
//! MTU-sized segments as the NIC the sender expected would have
//! ([`nfkit_packet::offload::segment`]). With `tso=1` a TCP
//! super-frame (plain, or in VXLAN/Geneve) is not cut: it becomes a
//! chain carrying its segmentation request (`gso` TCP, `gso_size`,
//! header lengths, checksum state: its `virtio_net_hdr` checked against
//! its own headers, a lying one dropped and counted in `rx_errors`),
//! for the pipeline's `TSO` or a port that segments (a TAP takes it
//! whole); capability `lro`. It also sends a plain TCP super-frame
//! (no tunnel: `virtio_net_hdr` has no way to say one to a packet
//! socket) whole, its request in the `virtio_net_hdr` of one `sendmsg`
//! on the gathering socket, and the kernel segments it (the
//! interface's TSO, or GSO in software): capability `tso`, 64 KiB
//! frames. Jumbo frames (MTU up to 65,535)
//! arrive the same way, or whole in their slot, and become chained
//! buffers; frames larger than a TX slot are sent with one `sendmsg`
//! gathering their segments, on a second socket without rings (one
//! with a TX ring sends only what its ring holds). Under TPACKET_V3 (no such copy) frames
//! larger than a buffer are dropped and counted in `rx_errors` with a
//! warning naming the fix (and an MTU above a buffer is refused at
//! open); drops in the kernel ring (`PACKET_STATISTICS`) are counted in
//! `rx_dropped`.

#[allow(unsafe_code)]
pub mod ring;

use crate::open::{software_pool, OpenOptions};
use crate::spec::AfPacketSpec;
use crate::spec::TpacketVersion;
use crate::{sys, Batch, Mempool, PktBuf, Port, PortError, QueueStats};
use nfkit_hw::pool::offload::{self as ol, cap, Caps};
use nfkit_hw::PoolCache;
use nfkit_packet::offload::{self, GsoKind};
use ring::{version_sockopt, Rings, RxFrame, TX_ROOM, VNET_HDR_LEN};
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// RX ring slots when the spec does not say (`ring=SLOTS`).
pub const DEFAULT_RX_SLOTS: usize = 512;
/// Buffers the port's receive cache holds (two full batches).
const RX_CACHE: usize = 2 * nfkit_hw::pool::MAX_BATCH;
/// TX ring slots: the kernel gives a slot back as soon as its frame has
/// left, so a few batches' worth is plenty.
const TX_SLOTS: usize = 256;
/// `PACKET_COPY_THRESH` (linux/if_packet.h).
const PACKET_COPY_THRESH: libc::c_int = 7;
/// Ethernet header, and one 802.1Q tag the kernel allows on top of the MTU.
const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;

/// The largest frame the port carries with TPACKET_V2 (an MTU of 65,535
/// with its Ethernet header and one tag).
const MAX_FRAME: usize = 65_535 + ETH_HLEN + VLAN_HLEN;

/// The largest frame the kernel hands over whole (a 64 KiB GSO
/// super-frame with its Ethernet header and tag), with its vnet header.
const SUPER_FRAME: usize = VNET_HDR_LEN + 65_536 + ETH_HLEN + 2 * VLAN_HLEN;
/// The largest super-frame sent whole with `tso=1` (64 KiB of IP, its
/// Ethernet header and a tag).
const GSO_MAX: usize = 65_535 + ETH_HLEN + VLAN_HLEN;
/// Segments one super-frame may be cut into (64 KiB at an MSS of 536,
/// TCP's smallest default, is 123).
const MAX_SEGMENTS: usize = 128;
/// Socket receive buffer for whole super-frames (SO_RCVBUFFORCE).
const SUPER_RCVBUF: libc::c_int = 8 << 20;

struct Queue {
    fd: OwnedFd,
    /// A socket without rings for frames larger than a TX slot (a socket
    /// with a TX ring sends only what is on the ring), bound to the
    /// interface for sending only (protocol 0: it receives nothing).
    big_tx: OwnedFd,
    ring: Rings,
    stats: QueueStats,
    /// Kernel ring drops read so far (PACKET_STATISTICS resets on read).
    kernel_drops: Cell<u64>,
    /// A whole super-frame read from the socket, and the segment being
    /// built (allocated once).
    whole: Vec<u8>,
    scratch: Vec<u8>,
    /// Segments cut from a super-frame that did not fit the caller's
    /// batch; handed over first next time (at most [`MAX_SEGMENTS`]).
    pending: VecDeque<PktBuf>,
    /// `tso=1`: TCP super-frames are passed on whole (a chain with its
    /// segmentation request), not cut.
    tso: bool,
}

impl Queue {
    /// Read the super-frame the kernel queued on the socket for a ring
    /// slot marked `TP_STATUS_COPY`, cut it into segments (or complete
    /// its checksum) and queue them in `pending`. Returns false if it
    /// could not (counted by the caller).
    fn take_whole(&mut self, cache: &mut PoolCache, room: usize) -> bool {
        let n = match sys::recv(self.fd.as_fd(), &mut self.whole) {
            Ok(Some(n)) if n > VNET_HDR_LEN => n,
            _ => return false,
        };
        let (hdr, frame) = self.whole[..n].split_at_mut(VNET_HDR_LEN);
        let gso_type = hdr[ring::VNET_GSO_TYPE_AT];
        if self.tso && matches!(gso_type & 0x0f, 1 | 4) {
            // Whole, as the chain it is, with its request (the kernel's
            // UDP-tunnel bits 0x20/0x40 dropped: the frame's own headers
            // say where the tunnel is). A request that lies is dropped.
            let Some(o) = super_frame_offload(hdr, frame) else {
                return false;
            };
            match cache.pool().alloc_frame(frame) {
                Ok(mut c) => {
                    c.set_offload(o);
                    self.pending.push_back(c);
                }
                Err(_) => self.stats.rx_dropped += 1,
            }
            return true;
        }
        let rd16 = |at: usize| usize::from(u16::from_ne_bytes([hdr[at], hdr[at + 1]]));
        let mss = rd16(ring::VNET_GSO_SIZE_AT);
        if gso_type == 0 && hdr[0] & ring::VNET_F_NEEDS_CSUM != 0 {
            let (start, off) = (
                rd16(ring::VNET_CSUM_START_AT),
                rd16(ring::VNET_CSUM_OFFSET_AT),
            );
            offload::complete_partial(frame, start, off);
        }
        let pending = &mut self.pending;
        let mut short = false;
        let mut push = |seg: &[u8]| {
            if seg.len() > room {
                // A jumbo frame or segment: a chain of buffers.
                match cache.pool().alloc_frame(seg) {
                    Ok(b) => pending.push_back(b),
                    Err(_) => short = true,
                }
                return;
            }
            match cache.alloc() {
                Some(mut b) => {
                    if b.copy_from(seg).is_ok() {
                        pending.push_back(b);
                    } else {
                        short = true;
                        cache.free(b);
                    }
                }
                None => short = true,
            }
        };
        // TCP in a VXLAN/Geneve tunnel (the kernel's UDP-tunnel GSO:
        // `gso_type` TCPV4/TCPV6, with 6.16's tunnel bits 0x20/0x40 or
        // without): cut with the tunnel-aware segmentation.
        let tcp = matches!(gso_type & 0x0f, 1 | 4);
        if tcp {
            if let Ok(lay) = nfkit_packet::gso::TcpLayout::of(frame) {
                if lay.o.tunnel != ol::Tunnel::None {
                    let cut = nfkit_packet::gso::segment(
                        frame,
                        &lay,
                        mss,
                        MAX_SEGMENTS,
                        &mut self.scratch,
                        &mut push,
                    );
                    if cut.is_err() {
                        return false;
                    }
                    if short {
                        self.stats.rx_dropped += 1;
                    }
                    return true;
                }
            }
        }
        match GsoKind::from_vnet(gso_type) {
            Some(kind) => {
                if offload::segment(frame, kind, mss, MAX_SEGMENTS, &mut self.scratch, &mut push)
                    .is_err()
                {
                    return false;
                }
            }
            None if gso_type == 0 => push(frame),
            None => return false,
        }
        if short {
            self.stats.rx_dropped += 1;
        }
        true
    }
}

/// The offload state of a TCP super-frame read whole (`tso=1`): its
/// `virtio_net_hdr` checked against its own headers, as TAP and
/// vhost-user do; `None` when they disagree (a segment size of 0 or
/// larger than the frame, a header length or checksum offset not the
/// frame's, a frame over 64 KB of IP).
fn super_frame_offload(hdr: &[u8], frame: &[u8]) -> Option<ol::Offload> {
    if frame.len() > GSO_MAX {
        return None;
    }
    let mut h = [0u8; VNET_HDR_LEN];
    h.copy_from_slice(hdr.get(..VNET_HDR_LEN)?);
    h[ring::VNET_GSO_TYPE_AT] &= 0x0f | nfkit_packet::offload_meta::VNET_GSO_ECN;
    let mut o = nfkit_packet::offload_meta::from_virtio_net_hdr(&h, frame).ok()??;
    let lay = nfkit_packet::gso::TcpLayout::of(frame).ok()?;
    nfkit_packet::gso::check_meta(&lay, &o, frame.len()).ok()?;
    let l3 = if lay.o.outer_l2_len > 0 {
        usize::from(lay.o.outer_l2_len)
    } else {
        usize::from(lay.o.l2_len)
    };
    if o.gso != ol::Gso::Tcp || lay.end - l3 > 65_535 {
        return None;
    }
    o.flags &= ol::L4_CSUM | ol::L4_CSUM_GOOD | ol::GSO_ECN;
    Some(o)
}

pub struct AfPacketPort {
    name: String,
    ifname: String,
    /// The sockets held: `queues[i]` serves queue `base + i` (all of the
    /// port's from 0, or one of them in a part, [`Port::split_queues`]).
    queues: Vec<Queue>,
    base: usize,
    /// The whole port's queue count.
    count: usize,
    pool: Mempool,
    /// Buffers for received frames, taken from the pool a chunk at a
    /// time (no pool lock per frame).
    rx_cache: PoolCache,
    mac: [u8; 6],
    /// The interface's MTU when the port was opened.
    mtu: usize,
    /// Largest frame received and sent (MTU + header + tag; a buffer
    /// under TPACKET_V3).
    max_frame: usize,
    warned_oversize: bool,
    warned_tx_len: bool,
    warned_tx: bool,
    error: Option<PortError>,
    /// `tso=1` (see [`Queue::tso`]).
    tso: bool,
}

/// Fanout group ids handed out in this process (one per multi-queue port).
static NEXT_FANOUT: AtomicU32 = AtomicU32::new(0);

impl AfPacketPort {
    pub fn open(
        name: &str,
        spec: &AfPacketSpec,
        opts: &OpenOptions,
    ) -> Result<AfPacketPort, PortError> {
        let ifindex = interface_index(name, &spec.iface)?;
        let pool = software_pool(name, opts.pool_buffers)?;
        let fanout = (spec.queues > 1).then(|| {
            let id =
                (std::process::id() ^ (NEXT_FANOUT.fetch_add(1, Ordering::Relaxed) << 8)) & 0xffff;
            id | (libc::PACKET_FANOUT_HASH << 16)
        });
        let rx_slots = spec.ring.unwrap_or(DEFAULT_RX_SLOTS);
        let queues = (0..spec.queues)
            .map(|_| open_queue(name, ifindex, spec.tpacket, rx_slots, fanout, spec.tso))
            .collect::<Result<Vec<_>, _>>()?;
        // TPACKET_V2 receives a frame larger than a slot whole from the
        // socket (PACKET_COPY_THRESH); V3 has no such path.
        let room = match spec.tpacket {
            TpacketVersion::V2 => MAX_FRAME,
            _ => pool.data_room().min(TX_ROOM),
        };
        let mtu = check_mtu(name, &spec.iface, room)?;
        Ok(AfPacketPort {
            name: name.to_string(),
            ifname: spec.iface.clone(),
            base: 0,
            count: queues.len(),
            queues,
            rx_cache: pool.cache(RX_CACHE),
            pool,
            mac: crate::netdev::read_mac(&spec.iface).unwrap_or([0; 6]),
            mtu,
            max_frame: match spec.tpacket {
                // Super-frames, each way.
                TpacketVersion::V2 if spec.tso => GSO_MAX,
                TpacketVersion::V2 => mtu + ETH_HLEN + VLAN_HLEN,
                _ => room,
            },
            warned_oversize: false,
            warned_tx_len: false,
            warned_tx: false,
            error: None,
            tso: spec.tso,
        })
    }
}

/// The interface's index, or an error naming the fix.
pub(crate) fn interface_index(port: &str, iface: &str) -> Result<u32, PortError> {
    sys::if_nametoindex(iface).map_err(|e| {
        PortError::os(
            port,
            format!("no interface `{iface}` in this network namespace (list them with `ip link`; run inside the right namespace with `ip netns exec`)"),
            e,
        )
    })
}

/// The interface's MTU (1500 if unreadable), or an error if its frames
/// would not fit `room`-byte buffers.
fn check_mtu(port: &str, iface: &str, room: usize) -> Result<usize, PortError> {
    let mtu: Option<usize> = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    match mtu {
        // Ethernet header and one VLAN tag on top of the MTU.
        Some(m) if m + ETH_HLEN + VLAN_HLEN > room => Err(PortError::config(
            port,
            format!("`{iface}` has MTU {m}, but buffers hold {room}-byte frames: lower it with `ip link set {iface} mtu {}`", room - ETH_HLEN - VLAN_HLEN),
        )),
        Some(m) => Ok(m),
        None => Ok(1500),
    }
}

fn open_queue(
    port: &str,
    ifindex: u32,
    version: TpacketVersion,
    rx_slots: usize,
    fanout: Option<u32>,
    tso: bool,
) -> Result<Queue, PortError> {
    let os = |what: &str| {
        let what = what.to_string();
        move |e: io::Error| {
            let fix = if sys::is_permission(&e) {
                ": AF_PACKET needs root or CAP_NET_RAW"
            } else {
                ""
            };
            PortError::os(port, format!("{what}{fix}"), e)
        }
    };
    // Protocol 0: receive nothing until bound to the interface below.
    let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
        .map_err(os("cannot create a packet socket"))?;
    let s = fd.as_fd();
    // All of these must be set before the rings exist.
    for (opt, value, what) in [
        (
            libc::PACKET_VERSION,
            version_sockopt(version),
            "PACKET_VERSION",
        ),
        (libc::PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"),
        (libc::PACKET_LOSS, 1, "PACKET_LOSS"),
        (libc::PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS"),
        (libc::PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"),
    ] {
        sys::setsockopt(s, libc::SOL_PACKET, opt, &value).map_err(os(what))?;
    }
    if version == TpacketVersion::V2 {
        // A frame too long for its slot (a TSO super-frame) is also
        // queued whole on the socket (TP_STATUS_COPY), with room for a
        // few of them.
        sys::setsockopt(s, libc::SOL_PACKET, PACKET_COPY_THRESH, &1)
            .map_err(os("PACKET_COPY_THRESH"))?;
        if sys::setsockopt(s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &SUPER_RCVBUF).is_err() {
            let _ = sys::setsockopt(s, libc::SOL_SOCKET, libc::SO_RCVBUF, &SUPER_RCVBUF);
        }
    }
    let ring = Rings::new(s, version, rx_slots, TX_SLOTS)
        .map_err(os("cannot set up the PACKET_MMAP rings"))?;
    sys::bind_packet(s, ifindex, libc::ETH_P_ALL as u16)
        .map_err(os("cannot bind to the interface"))?;
    if let Some(arg) = fanout {
        sys::setsockopt(s, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
            .map_err(os("cannot join the fanout group"))?;
    }
    let big_tx = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)
        .map_err(os("cannot create a packet socket"))?;
    sys::setsockopt(
        big_tx.as_fd(),
        libc::SOL_PACKET,
        libc::PACKET_QDISC_BYPASS,
        &1,
    )
    .map_err(os("PACKET_QDISC_BYPASS"))?;
    if tso {
        // Super-frames go out whole with their segmentation request in
        // a `virtio_net_hdr` (the kernel segments, in the interface's
        // hardware or in software on the way out).
        sys::setsockopt(big_tx.as_fd(), libc::SOL_PACKET, libc::PACKET_VNET_HDR, &1)
            .map_err(os("PACKET_VNET_HDR"))?;
    }
    sys::bind_packet(big_tx.as_fd(), ifindex, 0).map_err(os("cannot bind to the interface"))?;
    Ok(Queue {
        ring,
        fd,
        big_tx,
        stats: QueueStats::default(),
        kernel_drops: Cell::new(0),
        whole: vec![0; SUPER_FRAME],
        scratch: Vec::with_capacity(SUPER_FRAME),
        pending: VecDeque::with_capacity(MAX_SEGMENTS),
        tso,
    })
}

/// Copy a ring frame into `b`, putting back a VLAN tag the kernel took
/// out, and giving it the checksum state the kernel reported: a partial
/// checksum (the sender's transmit checksum offload) becomes an
/// `L4_CSUM` request for the port that sends it, a verified one
/// `L4_CSUM_GOOD`. A partial checksum where nfkit's parser does not find
/// a TCP/UDP header is completed here. Returns false if it does not fit.
fn copy_frame(f: &RxFrame<'_>, b: &mut PktBuf) -> bool {
    if !copy_data(f, b) {
        return false;
    }
    if let Some((start, offset)) = f.needs_csum {
        let shift = b.len() - f.data.len(); // a VLAN tag put back
        let start = usize::from(start) + shift;
        match nfkit_packet::offload_meta::describe(b.data()) {
            Some(mut o)
                if o.l4_start() == start
                    && o.l4.csum_offset() == Some(offset)
                    && o.check(b.len()).is_ok() =>
            {
                o.flags = ol::L4_CSUM;
                b.set_offload(o);
            }
            _ => {
                nfkit_packet::offload::complete_partial(b.data_mut(), start, usize::from(offset));
            }
        }
    } else if f.data_valid {
        b.set_offload(ol::Offload {
            flags: ol::L4_CSUM_GOOD,
            ..ol::Offload::default()
        });
    }
    true
}

/// A ring frame larger than a buffer, as [`copy_frame`] would make it,
/// in a vector (to be chained).
fn frame_vec(f: &RxFrame<'_>) -> Vec<u8> {
    let tag = f.vlan.filter(|&(_, tci)| tci != 0 || f.data.len() >= 12);
    let mut v = Vec::with_capacity(f.data.len() + VLAN_HLEN);
    match tag {
        Some((tpid, tci)) if f.data.len() >= 12 => {
            v.extend_from_slice(&f.data[..12]);
            v.extend_from_slice(&tpid.to_be_bytes());
            v.extend_from_slice(&tci.to_be_bytes());
            v.extend_from_slice(&f.data[12..]);
        }
        _ => v.extend_from_slice(f.data),
    }
    if let Some((start, offset)) = f.needs_csum {
        let shift = v.len() - f.data.len();
        nfkit_packet::offload::complete_partial(
            &mut v,
            usize::from(start) + shift,
            usize::from(offset),
        );
    }
    v
}

fn copy_data(f: &RxFrame<'_>, b: &mut PktBuf) -> bool {
    let tag = f.vlan.filter(|&(_, tci)| tci != 0 || f.data.len() >= 12);
    let extra = if tag.is_some() { VLAN_HLEN } else { 0 };
    if b.set_len(f.data.len() + extra).is_err() {
        return false;
    }
    let out = b.data_mut();
    match tag {
        Some((tpid, tci)) if f.data.len() >= 12 => {
            out[..12].copy_from_slice(&f.data[..12]);
            out[12..14].copy_from_slice(&tpid.to_be_bytes());
            out[14..16].copy_from_slice(&tci.to_be_bytes());
            out[16..].copy_from_slice(&f.data[12..]);
        }
        _ => out.copy_from_slice(f.data),
    }
    true
}

/// Whether the kernel would take a frame of `len` bytes starting with
/// `head` on an interface with `mtu`: an Ethernet header at least, the
/// MTU plus the header (plus an 802.1Q tag if the frame has one) at most.
fn sendable(head: &[u8], len: usize, mtu: usize) -> bool {
    let tagged = head.get(12..14) == Some(&[0x81, 0x00][..]);
    let max = mtu + ETH_HLEN + if tagged { VLAN_HLEN } else { 0 };
    (ETH_HLEN..=max).contains(&len)
}

impl AfPacketPort {
    /// Make the kernel send what waits on queue `queue`'s TX ring. Frames
    /// it could not take now (socket buffer full, driver busy) stay on the
    /// ring for the next kick.
    fn kick(&mut self, queue: usize) {
        let Some(q) = self.queues.get(queue.wrapping_sub(self.base)) else {
            return;
        };
        let Err(e) = sys::kick_tx(q.fd.as_fd()) else {
            return;
        };
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {}
            Some(libc::ENXIO) | Some(libc::ENODEV) => {
                self.error.get_or_insert(PortError::os(
                    &self.name,
                    format!("interface `{}` went away", self.ifname),
                    e,
                ));
            }
            _ if !self.warned_tx => {
                self.warned_tx = true;
                tracing::warn!(port = %self.name, "send on `{}` failed: {e} (interface down?); frames wait on the TX ring", self.ifname);
            }
            _ => {}
        }
    }
}

impl Port for AfPacketPort {
    /// The socket polls readable when the RX ring holds a frame (level
    /// triggered: nothing to arm, no wake-up to lose).
    fn rx_wake(&self, queue: usize) -> crate::RxWake {
        match self.queues.get(queue.wrapping_sub(self.base)) {
            Some(q) => crate::RxWake::Fd(std::os::fd::AsRawFd::as_raw_fd(&q.fd)),
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
        // Keep earlier sends moving even when nothing new is sent.
        if self
            .queues
            .get(queue.wrapping_sub(self.base))
            .is_some_and(|q| q.ring.tx_waiting())
        {
            self.kick(queue);
        }
        let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) else {
            return 0;
        };
        let room = self.pool.data_room();
        let mut n = 0;
        let mut oversize = 0;
        loop {
            // segments of a super-frame first, in order
            while !batch.is_full() {
                let Some(b) = q.pending.pop_front() else {
                    break;
                };
                q.stats.rx_bytes += b.pkt_len() as u64;
                batch.push(b);
                n += 1;
            }
            if batch.is_full() || !q.pending.is_empty() || !q.ring.rx_ready() {
                break;
            }
            let Some(mut b) = self.rx_cache.alloc() else {
                break;
            };
            let mut got = false;
            let mut whole = false;
            let mut chain = None;
            q.ring.rx_next(|f| {
                if f.pkttype == libc::PACKET_OUTGOING {
                    return;
                }
                if f.copied {
                    whole = true;
                    return;
                }
                if f.wire_len > f.data.len() {
                    oversize += 1;
                    return;
                }
                if f.wire_len > room {
                    // Whole in its slot but larger than a buffer: a chain.
                    match self.pool.alloc_frame(&frame_vec(&f)) {
                        Ok(c) => chain = Some(c),
                        Err(_) => oversize += 1,
                    }
                    return;
                }
                if !copy_frame(&f, &mut b) {
                    oversize += 1;
                    return;
                }
                got = true;
            });
            if let Some(c) = chain {
                q.stats.rx_bytes += c.pkt_len() as u64;
                batch.push(c);
                n += 1;
            }
            if got {
                q.stats.rx_bytes += b.len() as u64;
                batch.push(b);
                n += 1;
            } else {
                self.rx_cache.free(b);
            }
            if whole && !q.take_whole(&mut self.rx_cache, room) {
                oversize += 1;
            }
        }
        q.stats.rx_packets += n as u64;
        if oversize > 0 {
            q.stats.rx_errors += oversize;
            if !self.warned_oversize {
                self.warned_oversize = true;
                tracing::warn!(
                    port = %self.name,
                    "frames larger than a {room}-byte buffer were dropped (counted in rx_errors): \
                     turn off segmentation offload on the sender and GRO on `{}` \
                     (`ethtool -K IFACE tso off gso off gro off`), or lower the MTU",
                    self.ifname
                );
            }
        }
        n
    }

    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let (mtu, tso) = (self.mtu, self.tso);
        let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) else {
            return 0;
        };
        let mut taken = 0;
        let mut queued = 0;
        let mut refused = 0;
        for b in batch.iter() {
            let frame = b.data();
            // Offload state reaching here is what this port does itself
            // (`capabilities`): the TCP/UDP checksum, through the kernel.
            let csum = b
                .offload()
                .filter(|o| o.has(ol::L4_CSUM))
                .and_then(|o| Some((u16::try_from(o.l4_start()).ok()?, o.l4.csum_offset()?)));
            // With `tso=1`, a TCP super-frame (its request checked by
            // the pipeline against this port's capabilities) goes whole.
            let gso = tso
                && b.offload().is_some_and(|o| {
                    o.gso == ol::Gso::Tcp
                        && o.tunnel == ol::Tunnel::None
                        && o.gso_size > 0
                        && b.pkt_len() <= GSO_MAX
                });
            if !gso && !sendable(frame, b.pkt_len(), mtu) {
                refused += 1;
            } else if gso || b.is_chained() || frame.len() > TX_ROOM {
                // Larger than a TX slot: gathered straight to the socket,
                // after what waits on the ring (with `tso=1`, behind its
                // `virtio_net_hdr`).
                if q.ring.tx_waiting() {
                    let _ = sys::kick_tx(q.fd.as_fd());
                }
                let vnet = if tso {
                    b.offload()
                        .map(nfkit_packet::offload_meta::to_virtio_net_hdr)
                        .unwrap_or([0; VNET_HDR_LEN])
                } else {
                    [0; VNET_HDR_LEN]
                };
                let mut parts = [&[][..]; 1 + nfkit_hw::MAX_SEGS];
                let mut k = 0;
                if tso {
                    parts[0] = &vnet[..];
                    k = 1;
                }
                for (slot, seg) in parts[k..].iter_mut().zip(b.segments()) {
                    *slot = seg;
                    k += 1;
                }
                match sys::send_parts(q.big_tx.as_fd(), &parts[..k]) {
                    Ok(_) => {
                        q.stats.tx_packets += 1;
                        q.stats.tx_bytes += b.pkt_len() as u64;
                    }
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
                        ) =>
                    {
                        break
                    }
                    Err(_) => refused += 1,
                }
            } else if q.ring.tx_push(frame, csum) {
                queued += 1;
                q.stats.tx_bytes += frame.len() as u64;
            } else {
                break;
            }
            taken += 1;
        }
        batch.drain_front(taken);
        q.stats.tx_packets += queued;
        q.stats.tx_errors += refused;
        if refused > 0 && !self.warned_tx_len {
            self.warned_tx_len = true;
            tracing::warn!(
                port = %self.name,
                "frames shorter than {ETH_HLEN} bytes or longer than MTU {mtu} + {ETH_HLEN} \
                 (+{VLAN_HLEN} with an 802.1Q tag) were dropped (counted in tx_errors); \
                 raise the MTU of `{}` if they are meant to go out",
                self.ifname
            );
        }
        if queued > 0 || q.ring.tx_waiting() {
            self.kick(queue);
        }
        taken
    }

    fn tx_refused(&mut self, queue: usize, n: u64) {
        if let Some(q) = self.queues.get_mut(queue.wrapping_sub(self.base)) {
            q.stats.tx_dropped += n;
        }
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        let Some(q) = self.queues.get(queue.wrapping_sub(self.base)) else {
            return QueueStats::default();
        };
        // struct tpacket_stats: packets, drops.
        let mut st = [0u32; 2];
        if sys::getsockopt(
            q.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st,
        )
        .is_ok()
        {
            q.kernel_drops.set(q.kernel_drops.get() + u64::from(st[1]));
        }
        let mut s = q.stats;
        s.rx_dropped += q.kernel_drops.get();
        s
    }

    fn link(&self) -> crate::LinkStatus {
        crate::netdev::link_status(&self.ifname)
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Through `PACKET_VNET_HDR`: the kernel fills in TCP/UDP checksums
    /// at any offset (the interface's hardware, or software on the way
    /// out) and reports partial and verified checksums of received
    /// frames.
    fn capabilities(&self) -> Caps {
        let lro = if self.tso {
            cap::RX_LRO | cap::TX_TSO
        } else {
            0
        };
        Caps::new(
            cap::TX_L4_CSUM | cap::TX_INNER_L4_CSUM | cap::RX_L4_CSUM | cap::RX_PARTIAL_CSUM | lro,
            (self.mtu + ETH_HLEN + VLAN_HLEN) as u32,
        )
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn tx_chains(&self) -> bool {
        true
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }

    /// One part per socket of the `PACKET_FANOUT` group: each socket has
    /// its own rings and the kernel steers each flow to one of them, so
    /// parts share only the pool (thread-safe; each part gets its own
    /// receive cache). A one-socket port splits into itself.
    fn split_queues(&mut self) -> Option<Vec<Box<dyn Port>>> {
        if self.base != 0 || self.queues.len() != self.count {
            return None; // already a part
        }
        let parts = std::mem::take(&mut self.queues)
            .into_iter()
            .enumerate()
            .map(|(q, sock)| {
                Box::new(AfPacketPort {
                    name: self.name.clone(),
                    ifname: self.ifname.clone(),
                    queues: vec![sock],
                    base: q,
                    count: self.count,
                    pool: self.pool.clone(),
                    rx_cache: self.pool.cache(RX_CACHE),
                    mac: self.mac,
                    mtu: self.mtu,
                    max_frame: self.max_frame,
                    warned_oversize: false,
                    warned_tx_len: false,
                    warned_tx: false,
                    error: None,
                    tso: self.tso,
                }) as Box<dyn Port>
            })
            .collect();
        Some(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sendable_follows_the_kernel_length_rules() {
        let plain = |len: usize| {
            let mut f = vec![0u8; len];
            if len >= 14 {
                f[12..14].copy_from_slice(&[0x08, 0x00]);
            }
            f
        };
        let tagged = |len: usize| {
            let mut f = plain(len);
            f[12..14].copy_from_slice(&[0x81, 0x00]);
            f
        };
        let ok = |f: Vec<u8>, mtu| sendable(&f, f.len(), mtu);
        assert!(!ok(plain(13), 1500));
        assert!(ok(plain(14), 1500));
        assert!(ok(plain(1514), 1500));
        assert!(!ok(plain(1515), 1500));
        assert!(ok(tagged(1518), 1500));
        assert!(!ok(tagged(1519), 1500));
        // Jumbo frames (past a TX slot) go straight to the socket.
        assert!(ok(plain(9014), 9000));
        assert!(!ok(plain(9015), 9000));
    }

    /// `tso=1`: a super-frame's `virtio_net_hdr` that lies is refused
    /// (the caller drops and counts the frame), never followed.
    #[test]
    fn super_frame_headers_that_lie_are_refused() {
        let (a, z) = (
            std::net::Ipv4Addr::new(10, 0, 0, 1),
            std::net::Ipv4Addr::new(10, 0, 0, 2),
        );
        let f = nfkit_packet::FrameBuilder::tcp((a, 1), (z, 2))
            .payload(&[7; 3000])
            .build();
        // NEEDS_CSUM, TCPV4 (with the kernel's tunnel bit), hdr_len 54,
        // gso_size 1448, csum_start 34, csum_offset 16.
        let hdr = |gso_type: u8, hdr_len: u16, mss: u16, start: u16| {
            let mut h = [0u8; VNET_HDR_LEN];
            h[0] = ring::VNET_F_NEEDS_CSUM;
            h[1] = gso_type;
            h[2..4].copy_from_slice(&hdr_len.to_ne_bytes());
            h[4..6].copy_from_slice(&mss.to_ne_bytes());
            h[6..8].copy_from_slice(&start.to_ne_bytes());
            h[8..10].copy_from_slice(&16u16.to_ne_bytes());
            h
        };
        let o = super_frame_offload(&hdr(1, 54, 1448, 34), &f).unwrap();
        assert_eq!((o.gso, o.gso_size), (ol::Gso::Tcp, 1448));
        assert!(super_frame_offload(&hdr(0x21, 54, 1448, 34), &f).is_some());
        for (what, h) in [
            ("gso_size 0", hdr(1, 54, 0, 34)),
            ("gso_size past the frame", hdr(1, 54, 9000, 34)),
            ("checksum start not the TCP header", hdr(1, 54, 1448, 30)),
            ("TCPV6 on IPv4", hdr(4, 54, 1448, 34)),
        ] {
            assert!(super_frame_offload(&h, &f).is_none(), "{what}");
        }
        assert!(super_frame_offload(&hdr(1, 54, 1448, 34), &f[..40]).is_none());
        let mut huge = f.clone();
        huge.resize(70_000, 0);
        huge[16..18].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(super_frame_offload(&hdr(1, 54, 1448, 34), &huge).is_none());
    }
}
