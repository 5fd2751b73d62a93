//! `afpacket:IFACE[,queues=N]`: AF_PACKET sockets on a kernel interface.
//!
//! Each queue is one packet socket with a TPACKET_V3 RX ring ([`ring`])
//! and batched `sendmmsg` for TX (one system call per batch). With
//! `queues=N` the N sockets join one `PACKET_FANOUT_HASH` group, so the
//! kernel spreads flows over them. Frames the host itself sends out of the
//! interface are not received (`PACKET_IGNORE_OUTGOING`).
//!
//! Frames larger than a buffer (jumbo MTU, or segmentation/GRO offload
//! handing over 64 KiB super-frames) are dropped and counted in
//! `rx_errors` with a warning naming the fix; drops in the kernel ring
//! (`PACKET_STATISTICS`) are counted in `rx_dropped`.

#[allow(unsafe_code)]
pub mod ring;

use crate::open::{software_pool, OpenOptions};
use crate::spec::AfPacketSpec;
use crate::{sys, Batch, Mempool, PktBuf, Port, PortError, QueueStats};
use nfkit_hw::pool::MAX_BATCH;
use ring::{RxFrame, RxRing, TPACKET_V3};
use std::cell::Cell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

struct Queue {
    fd: OwnedFd,
    ring: RxRing,
    send: sys::SendBatch,
    stats: QueueStats,
    /// Kernel ring drops read so far (PACKET_STATISTICS resets on read).
    kernel_drops: Cell<u64>,
}

pub struct AfPacketPort {
    name: String,
    ifname: String,
    queues: Vec<Queue>,
    pool: Mempool,
    mac: [u8; 6],
    warned_oversize: bool,
    warned_tx: bool,
    error: Option<PortError>,
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
        let queues = (0..spec.queues)
            .map(|_| open_queue(name, ifindex, opts.ring_size, fanout))
            .collect::<Result<Vec<_>, _>>()?;
        check_mtu(name, &spec.iface, pool.data_room())?;
        Ok(AfPacketPort {
            name: name.to_string(),
            ifname: spec.iface.clone(),
            queues,
            pool,
            mac: crate::tap::read_mac(&spec.iface).unwrap_or([0; 6]),
            warned_oversize: false,
            warned_tx: false,
            error: None,
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

fn check_mtu(port: &str, iface: &str, room: usize) -> Result<(), PortError> {
    let mtu: Option<usize> = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    match mtu {
        // Ethernet header and one VLAN tag on top of the MTU.
        Some(m) if m + 18 > room => Err(PortError::config(
            port,
            format!("`{iface}` has MTU {m}, but buffers hold {room}-byte frames: lower it with `ip link set {iface} mtu {}`", room - 18),
        )),
        _ => Ok(()),
    }
}

fn open_queue(
    port: &str,
    ifindex: u32,
    ring_size: usize,
    fanout: Option<u32>,
) -> Result<Queue, PortError> {
    let os = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| {
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
    sys::setsockopt(s, libc::SOL_PACKET, libc::PACKET_VERSION, &TPACKET_V3)
        .map_err(os("PACKET_VERSION"))?;
    sys::setsockopt(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32)
        .map_err(os("PACKET_IGNORE_OUTGOING"))?;
    let ring = RxRing::new(s, ring_size).map_err(os("cannot set up the TPACKET_V3 RX ring"))?;
    sys::bind_packet(s, ifindex, libc::ETH_P_ALL as u16)
        .map_err(os("cannot bind to the interface"))?;
    if let Some(arg) = fanout {
        sys::setsockopt(s, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
            .map_err(os("cannot join the fanout group"))?;
    }
    Ok(Queue {
        ring,
        send: sys::SendBatch::new(MAX_BATCH),
        fd,
        stats: QueueStats::default(),
        kernel_drops: Cell::new(0),
    })
}

/// Copy a ring frame into `b`, putting back a VLAN tag the kernel took
/// out. Returns false if it does not fit.
fn copy_frame(f: &RxFrame<'_>, b: &mut PktBuf) -> bool {
    let tag = f.vlan.filter(|&(_, tci)| tci != 0 || f.data.len() >= 12);
    let extra = if tag.is_some() { 4 } else { 0 };
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

impl Port for AfPacketPort {
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
        let room = self.pool.data_room();
        let mut n = 0;
        let mut oversize = 0;
        while !batch.is_full() {
            let Some(mut b) = self.pool.alloc() else {
                break;
            };
            let mut got = false;
            let ready = q.ring.next(|f| {
                if f.pkttype == libc::PACKET_OUTGOING {
                    return;
                }
                if f.wire_len > f.data.len() || f.wire_len > room || !copy_frame(&f, &mut b) {
                    oversize += 1;
                    return;
                }
                got = true;
            });
            if !ready {
                break;
            }
            if got {
                q.stats.rx_bytes += b.len() as u64;
                batch.push(b);
                n += 1;
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
        let Some(q) = self.queues.get_mut(queue) else {
            return 0;
        };
        let mut done = 0;
        while !batch.is_empty() {
            match q.send.send(q.fd.as_fd(), batch.iter().map(|b| b.data())) {
                Ok(0) => break,
                Ok(k) => {
                    for b in batch.drain_front(k) {
                        q.stats.tx_bytes += b.len() as u64;
                    }
                    q.stats.tx_packets += k as u64;
                    done += k;
                }
                Err(e) => {
                    // The kernel refused the first frame (too long for the
                    // MTU, interface down or gone): drop and count it.
                    batch.drain_front(1);
                    q.stats.tx_errors += 1;
                    done += 1;
                    if !self.warned_tx {
                        self.warned_tx = true;
                        tracing::warn!(port = %self.name, "send on `{}` failed: {e} (frame longer than the MTU, or interface down?)", self.ifname);
                    }
                    if e.raw_os_error() == Some(libc::ENXIO)
                        || e.raw_os_error() == Some(libc::ENODEV)
                    {
                        self.error = Some(PortError::os(
                            &self.name,
                            format!("interface `{}` went away", self.ifname),
                            e,
                        ));
                        break;
                    }
                }
            }
        }
        done
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        let Some(q) = self.queues.get(queue) else {
            return QueueStats::default();
        };
        // struct tpacket_stats_v3: packets, drops, freeze_q_cnt.
        let mut st = [0u32; 3];
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

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }
}
