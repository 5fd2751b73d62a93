//! `tap:NAME[,queues=N]`: a kernel TAP interface created by nfkit
//! (`/dev/net/tun`, `TUNSETIFF` with `IFF_TAP | IFF_NO_PI`), so the host
//! stack and unmodified applications send and receive through nfkit:
//! what the kernel sends out of NAME arrives on this port's RX, what this
//! port sends appears as received on NAME.
//!
//! With `queues=N` the interface is made with `IFF_MULTI_QUEUE` and the
//! port holds one file descriptor per queue: the kernel spreads the flows
//! it sends over them (by flow hash), and what a queue's descriptor
//! writes is received on that queue.
//!
//! The interface exists while the port is open and starts down; bring it
//! up (and address it, move it to a namespace...) with `ip link`. One
//! frame per `read`/`write` system call; a frame larger than a buffer
//! (jumbo MTU, up to [`MAX_FRAME`]) is read into a buffer and a spill
//! area and becomes a chain (its partial checksum completed in software
//! first), and a chain is written with one `writev`.
//!
//! The interface is made with `IFF_VNET_HDR`, and nfkit tells the kernel
//! it takes partial checksums (`TUNSETOFFLOAD` with `TUN_F_CSUM`, as
//! QEMU does for a guest that has VirtIO's CSUM): a `virtio_net_hdr`
//! goes before every frame, each way. Received, its checksum flags
//! become the packet's offload metadata (`L4_CSUM` for a partial
//! checksum, `L4_CSUM_GOOD` for a verified one); sent, a packet's
//! `L4_CSUM` request becomes NEEDS_CSUM and the kernel fills it in.
//!
//! Segmentation, both ways: `tso=1` adds `TUN_F_TSO4 | TUN_F_TSO6 |
//! TUN_F_TSO_ECN` to `TUNSETOFFLOAD`, so the kernel hands over its TCP
//! super-frames (up to 64 KB) whole; each becomes a chain carrying its
//! segmentation request (`gso` TCP, `gso_size`, header lengths: the
//! `virtio_net_hdr` mapped one-to-one, lying headers dropped and counted
//! in `rx_errors`) for the pipeline's `TSO` module or a port that
//! segments. Without it the kernel segments before nfkit sees a frame.
//! Sending, a packet's segmentation request becomes the header's
//! `gso_type`/`gso_size`/`hdr_len` and the kernel takes the frame as one
//! (a GRO frame, as `LRO` makes them): capabilities `tso` always, `lro`
//! with `tso=1`.

use crate::open::{software_pool, OpenOptions};
use crate::spec::TapSpec;
use crate::{netdev, sys, Batch, LinkStatus, Mempool, Port, PortError, QueueStats};
use nfkit_hw::pool::offload::{self as ol, cap, Caps};
use nfkit_hw::PoolCache;
use nfkit_packet::offload_meta::{self, VNET_HDR_LEN};
use std::fs::File;
use std::io::{ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

/// `IFF_MULTI_QUEUE`, `IFF_VNET_HDR`, `TUN_F_CSUM` (linux/if_tun.h).
const IFF_MULTI_QUEUE: libc::c_int = 0x0100;
const IFF_VNET_HDR: libc::c_int = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;

struct TapQueue {
    file: File,
    stats: QueueStats,
    /// Where a read puts the part of a frame past its first buffer (a
    /// jumbo frame), one byte more than the largest so a cut is seen.
    spill: Vec<u8>,
}

/// Largest frame through a TAP port: an MTU of 65,535 with its Ethernet
/// header and one 802.1Q tag.
pub const MAX_FRAME: usize = 65_535 + 14 + 4;

pub struct TapPort {
    name: String,
    ifname: String,
    queues: Vec<TapQueue>,
    pool: Mempool,
    /// Buffers for reads, taken from the pool a chunk at a time; a
    /// read that finds nothing puts its buffer back here (no pool lock
    /// per poll or frame).
    rx_cache: PoolCache,
    error: Option<PortError>,
    warned_tx: bool,
    warned_rx: bool,
    /// The kernel hands over TSO super-frames (`tso=1`).
    tso: bool,
}

impl TapPort {
    pub fn open(name: &str, spec: &TapSpec, opts: &OpenOptions) -> Result<TapPort, PortError> {
        let mut flags = libc::IFF_TAP | libc::IFF_NO_PI | IFF_VNET_HDR;
        if spec.queues > 1 {
            flags |= IFF_MULTI_QUEUE;
        }
        let mut ifname = spec.name.clone();
        let mut queues = Vec::with_capacity(spec.queues);
        for _ in 0..spec.queues {
            let offloads = if spec.tso {
                TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
            } else {
                TUN_F_CSUM
            };
            let (file, got) = open_queue(name, &ifname, flags as libc::c_short, offloads)?;
            // Every queue names the interface the first one got.
            ifname = got;
            queues.push(TapQueue {
                file,
                stats: QueueStats::default(),
                spill: vec![0; MAX_FRAME + 1],
            });
        }
        let pool = software_pool(name, opts.pool_buffers)?;
        Ok(TapPort {
            name: name.to_string(),
            ifname,
            queues,
            rx_cache: pool.cache(2 * nfkit_hw::pool::MAX_BATCH),
            pool,
            error: None,
            warned_tx: false,
            warned_rx: false,
            tso: spec.tso,
        })
    }

    /// The kernel's name of the interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

/// The checksum and segmentation state the kernel's `virtio_net_hdr`
/// gives a received frame (`frame`, all of it), as offload metadata to
/// put on its packet; a partial checksum at a place nfkit's parser does
/// not find a TCP/UDP header is completed here instead. `Err`: the
/// header asks for segmentation and lies about the frame (or
/// segmentation was not offered): the frame is dropped.
fn take_vnet_hdr(
    hdr: &[u8; VNET_HDR_LEN],
    frame: &mut [u8],
    tso: bool,
) -> Result<Option<ol::Offload>, ()> {
    let gso = hdr[1] & !offload_meta::VNET_GSO_ECN != offload_meta::VNET_GSO_NONE;
    if hdr[0] == 0 && !gso {
        return Ok(None);
    }
    match offload_meta::from_virtio_net_hdr(hdr, frame) {
        Ok(Some(mut o)) => {
            if o.gso != ol::Gso::None && !(tso && o.gso == ol::Gso::Tcp) {
                return Err(());
            }
            o.flags &= ol::L4_CSUM | ol::L4_CSUM_GOOD | ol::GSO_ECN;
            Ok(Some(o))
        }
        Ok(None) => Ok(None),
        Err(_) if gso => Err(()),
        Err(_) if hdr[0] & offload_meta::VNET_F_NEEDS_CSUM != 0 => {
            let rd = |at: usize| usize::from(u16::from_le_bytes([hdr[at], hdr[at + 1]]));
            nfkit_packet::offload::complete_partial(frame, rd(6), rd(8));
            Ok(None)
        }
        Err(_) => Ok(None),
    }
}

/// [`take_vnet_hdr`] for a frame of `len` bytes whose first buffer is
/// `head`, without the frame's other bytes: `None` when that cannot be
/// told from the headers alone (a partial checksum at an offset nfkit
/// does not parse is completed over the whole frame, by the caller).
fn take_vnet_hdr_head(
    hdr: &[u8; VNET_HDR_LEN],
    head: &[u8],
    len: usize,
    tso: bool,
) -> Option<Result<Option<ol::Offload>, ()>> {
    let gso = hdr[1] & !offload_meta::VNET_GSO_ECN != offload_meta::VNET_GSO_NONE;
    if hdr[0] == 0 && !gso {
        return Some(Ok(None));
    }
    match offload_meta::from_virtio_net_hdr_prefix(hdr, head, len) {
        Ok(Some(mut o)) => {
            if o.gso != ol::Gso::None && !(tso && o.gso == ol::Gso::Tcp) {
                return Some(Err(()));
            }
            o.flags &= ol::L4_CSUM | ol::L4_CSUM_GOOD | ol::GSO_ECN;
            Some(Ok(Some(o)))
        }
        Ok(None) => Some(Ok(None)),
        Err(_) if gso => Some(Err(())),
        Err(_) if hdr[0] & offload_meta::VNET_F_NEEDS_CSUM != 0 => None,
        Err(_) => Some(Ok(None)),
    }
}

/// `head` (full) with `rest` appended in buffers from `cache`: one copy
/// of the bytes past the first buffer. `None` (all freed) when the pool
/// ran dry or the chain would be too long.
fn chain_spill(
    cache: &mut PoolCache,
    mut head: nfkit_hw::PktBuf,
    rest: &[u8],
) -> Option<nfkit_hw::PktBuf> {
    let room = head.pool().data_room();
    for part in rest.chunks(room) {
        let mut seg = cache.alloc()?;
        if seg.copy_from(part).is_err() {
            cache.free(seg);
            return None;
        }
        head.append(seg).ok()?;
    }
    Some(head)
}

/// One descriptor of the TAP interface `ifname` (made by the first).
fn open_queue(
    port: &str,
    ifname: &str,
    flags: libc::c_short,
    offloads: libc::c_uint,
) -> Result<(File, String), PortError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| {
            let fix = match e.kind() {
                ErrorKind::NotFound => {
                    ": the kernel has no TUN/TAP support (load the `tun` module)"
                }
                ErrorKind::PermissionDenied => ": run as root or with CAP_NET_ADMIN",
                _ => "",
            };
            PortError::os(port, format!("cannot open /dev/net/tun{fix}"), e)
        })?;
    let got = sys::tun_set_iff(file.as_fd(), ifname, flags).map_err(|e| {
        let fix = if sys::is_permission(&e) {
            ": creating a TAP interface needs root or CAP_NET_ADMIN"
        } else if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EINVAL) {
            ": an interface of that name exists and is not a free TAP of this kind (queues= must match how it was made); pick another name or delete it (`ip link del NAME`)"
        } else {
            ""
        };
        PortError::os(port, format!("cannot create TAP interface `{ifname}`{fix}"), e)
    })?;
    sys::tun_set_offload(file.as_fd(), offloads)
        .map_err(|e| PortError::os(port, "cannot set the TAP's offloads (TUNSETOFFLOAD)", e))?;
    Ok((file, got))
}

impl Port for TapPort {
    /// The queue's descriptor polls readable when the kernel queued a
    /// frame for it.
    fn rx_wake(&self, queue: usize) -> crate::RxWake {
        match self.queues.get(queue) {
            Some(q) => crate::RxWake::Fd(std::os::fd::AsRawFd::as_raw_fd(&q.file)),
            None => crate::RxWake::Never,
        }
    }
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_queues(&self) -> usize {
        self.queues.len()
    }
    fn tx_queues(&self) -> usize {
        self.queues.len()
    }

    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let Some(q) = self.queues.get_mut(queue) else {
            return 0;
        };
        let mut n = 0;
        while !batch.is_full() {
            let Some(mut b) = self.rx_cache.alloc() else {
                // Frames wait in the kernel's queue (which drops and
                // counts on its side when full).
                break;
            };
            let room = b.len() + b.tailroom();
            let _ = b.set_len(room);
            let mut hdr = [0u8; VNET_HDR_LEN];
            let read = q.file.read_vectored(&mut [
                IoSliceMut::new(&mut hdr),
                IoSliceMut::new(b.data_mut()),
                IoSliceMut::new(&mut q.spill),
            ]);
            let read = match read {
                Ok(n) if n < VNET_HDR_LEN => Ok(0),
                Ok(n) => Ok(n - VNET_HDR_LEN),
                Err(e) => Err(e),
            };
            match read {
                Ok(0) => {
                    q.stats.rx_errors += 1;
                    self.rx_cache.free(b);
                }
                Ok(len) if len > MAX_FRAME => {
                    // Larger than any MTU allows: cut short.
                    q.stats.rx_errors += 1;
                    self.rx_cache.free(b);
                    if !self.warned_rx {
                        self.warned_rx = true;
                        tracing::warn!(
                            port = %self.name,
                            "a frame larger than {MAX_FRAME} bytes was dropped (counted in rx_errors)"
                        );
                    }
                }
                Ok(len) if len > room => {
                    // A jumbo or TSO frame: a chain, carrying the
                    // kernel's requests. The buffer read into stays its
                    // first segment and the rest is copied once from the
                    // spill area into more buffers, when the headers are
                    // in that first buffer and the request is one we
                    // carry.
                    let _ = b.set_len(room);
                    match take_vnet_hdr_head(&hdr, b.data(), len, self.tso) {
                        Some(Ok(state)) => {
                            match chain_spill(&mut self.rx_cache, b, &q.spill[..len - room]) {
                                Some(mut c) => {
                                    if let Some(o) = state {
                                        c.set_offload(o);
                                    }
                                    q.stats.rx_bytes += len as u64;
                                    batch.push(c);
                                    n += 1;
                                }
                                None => q.stats.rx_dropped += 1,
                            }
                            continue;
                        }
                        Some(Err(())) => {
                            q.stats.rx_errors += 1;
                            self.rx_cache.free(b);
                            continue;
                        }
                        None => {}
                    }
                    // Else (a partial checksum we do not parse, completed
                    // over all of it first): made contiguous.
                    let mut whole = Vec::with_capacity(len);
                    whole.extend_from_slice(b.data());
                    whole.extend_from_slice(&q.spill[..len - room]);
                    self.rx_cache.free(b);
                    let Ok(state) = take_vnet_hdr(&hdr, &mut whole, self.tso) else {
                        q.stats.rx_errors += 1;
                        continue;
                    };
                    match self.pool.alloc_frame(&whole) {
                        Ok(mut c) => {
                            if let Some(o) = state {
                                c.set_offload(o);
                            }
                            q.stats.rx_bytes += len as u64;
                            batch.push(c);
                            n += 1;
                        }
                        Err(_) => q.stats.rx_dropped += 1,
                    }
                }
                Ok(len) => {
                    let _ = b.set_len(len);
                    match take_vnet_hdr(&hdr, b.data_mut(), self.tso) {
                        Ok(Some(o)) => b.set_offload(o),
                        Ok(None) => {}
                        Err(()) => {
                            q.stats.rx_errors += 1;
                            self.rx_cache.free(b);
                            continue;
                        }
                    }
                    q.stats.rx_bytes += len as u64;
                    batch.push(b);
                    n += 1;
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    self.rx_cache.free(b);
                    break;
                }
                Err(e) => {
                    q.stats.rx_errors += 1;
                    self.rx_cache.free(b);
                    self.error = Some(PortError::os(
                        &self.name,
                        "reading from the TAP interface",
                        e,
                    ));
                    break;
                }
            }
        }
        q.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let Some(q) = self.queues.get_mut(queue) else {
            return 0;
        };
        let mut sent = 0;
        for b in batch.iter() {
            // Offload state reaching here is what this port does itself
            // (`capabilities`): the TCP/UDP checksum and TCP
            // segmentation, by the kernel.
            let hdr = b
                .offload()
                .map(offload_meta::to_virtio_net_hdr)
                .unwrap_or([0; VNET_HDR_LEN]);
            let wrote = if b.is_chained() {
                // The header and at most MAX_SEGS segments, on the stack:
                // nothing allocated per frame.
                let mut parts = [IoSlice::new(&[]); 1 + nfkit_hw::MAX_SEGS];
                parts[0] = IoSlice::new(&hdr);
                let mut n = 1;
                for (slot, seg) in parts[1..].iter_mut().zip(b.segments()) {
                    *slot = IoSlice::new(seg);
                    n += 1;
                }
                q.file.write_vectored(&parts[..n])
            } else {
                q.file
                    .write_vectored(&[IoSlice::new(&hdr), IoSlice::new(b.data())])
            };
            match wrote {
                Ok(_) => {
                    q.stats.tx_packets += 1;
                    q.stats.tx_bytes += b.pkt_len() as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    // The kernel refused this frame (interface down, bad
                    // frame): it is gone, counted as an error.
                    q.stats.tx_errors += 1;
                    if !self.warned_tx {
                        self.warned_tx = true;
                        tracing::warn!(port = %self.name, "TAP write failed: {e} (is `{}` up?)", self.ifname);
                    }
                }
            }
            sent += 1;
        }
        batch.drain_front(sent);
        sent
    }

    /// Through its `virtio_net_hdr` (the kernel's side of the TAP).
    fn capabilities(&self) -> Caps {
        let lro = if self.tso { cap::RX_LRO } else { 0 };
        Caps::new(
            cap::TX_L4_CSUM
                | cap::TX_INNER_L4_CSUM
                | cap::TX_TSO
                | cap::RX_L4_CSUM
                | cap::RX_PARTIAL_CSUM
                | lro,
            0,
        )
    }

    fn tx_refused(&mut self, queue: usize, n: u64) {
        if let Some(q) = self.queues.get_mut(queue) {
            q.stats.tx_dropped += n;
        }
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        self.queues.get(queue).map(|q| q.stats).unwrap_or_default()
    }

    /// The interface's state while it is in this network namespace. Once
    /// moved to another (as tests and containers do) sysfs here cannot
    /// see it; the link is then reported up, as it is from our side: the
    /// carrier stays on while nfkit holds the TAP open.
    fn link(&self) -> LinkStatus {
        if std::path::Path::new(&format!("/sys/class/net/{}", self.ifname)).exists() {
            netdev::link_status(&self.ifname)
        } else {
            LinkStatus {
                up: true,
                speed_mbps: None,
            }
        }
    }

    fn mac(&self) -> [u8; 6] {
        netdev::read_mac(&self.ifname).unwrap_or([0x02, 0, 0, 0, 0x7a, 0x01])
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn max_frame(&self) -> usize {
        MAX_FRAME
    }

    fn tx_chains(&self) -> bool {
        true
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }
}
