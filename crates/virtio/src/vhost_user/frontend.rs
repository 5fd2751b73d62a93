//! The vhost-user frontend ("virtio-user"): our virtqueue driver with a
//! vhost-user backend process as the device. The rings and packet
//! buffers live in a [`MemfdArena`] whose file descriptor is sent with
//! SET_MEM_TABLE; notifications are eventfds (kick: we notify the
//! backend; call: the backend notifies us of used buffers, which we ask
//! for only while an idle loop sleeps on the receive rings, see
//! `Port::rx_wake`).
//!
//! Set-up follows the vhost-user specification's order: SET_OWNER,
//! features, protocol features, memory table, then per ring NUM, ADDR,
//! BASE, CALL, KICK (which starts it) and ENABLE.

use crate::error::VirtioError;
use crate::net::{NetDevice, NetParts, Notify, RxQueue, TxQueue};
use crate::shm::MemfdArena;
use crate::spec::{feature, net as spec};
use crate::virtqueue::{LayoutKind, Virtqueue};
use nfkit_hw::{HwError, Mempool};
use std::os::fd::AsRawFd;
use std::path::Path;
use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// Settings of a frontend port.
#[derive(Debug, Clone)]
pub struct FrontendConfig {
    pub name: String,
    pub queue_pairs: u16,
    pub queue_size: u16,
    /// Packet buffers in the pool (shared with the backend).
    pub pool_size: usize,
    pub mac: [u8; 6],
    /// Ask for GUEST_TSO4/6 and GUEST_ECN: the backend may hand us TSO
    /// super-frames (held as chains, their segmentation in the offload
    /// metadata).
    pub guest_tso: bool,
    /// Never kick the backend (fault injection, for tests of a frontend
    /// that never kicks: the backend must still deliver, late).
    pub never_kick: bool,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        FrontendConfig {
            name: "virtio-user".into(),
            queue_pairs: 1,
            queue_size: 256,
            pool_size: 2048,
            mac: [0x02, 0, 0, 0, 0, 0x20],
            guest_tso: false,
            never_kick: false,
        }
    }
}

/// The connection to the backend: socket and eventfds. Dropping it
/// closes the socket, which the backend sees as a disconnect.
pub struct VhostUserLink {
    frontend: Frontend,
    kicks: Vec<EventFd>,
    calls: Vec<EventFd>,
    /// [`FrontendConfig::never_kick`].
    never_kick: bool,
    _arena: MemfdArena,
}

impl std::fmt::Debug for VhostUserLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserLink")
            .field("rings", &self.kicks.len())
            .finish()
    }
}

impl Notify for VhostUserLink {
    fn notify(&self, queue: u16) -> Result<(), HwError> {
        let kick = self
            .kicks
            .get(queue as usize)
            .ok_or_else(|| HwError::Invalid(format!("no ring {queue}")))?;
        if self.never_kick {
            return Ok(());
        }
        kick.write(1)
            .map_err(|e| HwError::Unsupported(format!("kick eventfd of ring {queue}: {e}")))
    }
    fn call_fd(&self, queue: u16) -> Option<std::os::fd::RawFd> {
        self.calls.get(queue as usize).map(|c| c.as_raw_fd())
    }
    fn drain_call(&self, queue: u16) {
        if let Some(c) = self.calls.get(queue as usize) {
            // Non-blocking: nothing to read is fine.
            let _ = c.read();
        }
    }
}

/// A network port that is a vhost-user frontend.
pub type VirtioUser = NetDevice<VhostUserLink>;

fn vu(what: &str) -> impl Fn(vhost::Error) -> VirtioError + '_ {
    move |e| VirtioError::VhostUser(format!("{what}: {e}"))
}

/// Connect to the backend at `path` and set up `cfg.queue_pairs`
/// queue pairs.
pub fn connect(path: &Path, cfg: &FrontendConfig) -> Result<VirtioUser, VirtioError> {
    let pairs = cfg.queue_pairs.max(1);
    let rings = 2 * pairs as usize;
    let mut fe = Frontend::connect(path, rings as u64)
        .map_err(|e| VirtioError::VhostUser(format!("connecting to {}: {e}", path.display())))?;
    fe.set_owner().map_err(vu("SET_OWNER"))?;
    let offered = fe.get_features().map_err(vu("GET_FEATURES"))?;
    // IN_ORDER (§2.7.9): our queues post one descriptor per chain, so
    // the driver can keep its books by position (`Virtqueue::set_in_order`).
    let mut want = feature::F_VERSION_1
        | feature::VHOST_USER_F_PROTOCOL_FEATURES
        | feature::F_EVENT_IDX
        | feature::F_IN_ORDER
        | crate::vnet::DRIVER_OFFLOADS;
    if cfg.guest_tso {
        // The device's TSO super-frames, into merged receive buffers.
        want |= feature::NET_F_GUEST_TSO4 | feature::NET_F_GUEST_TSO6 | feature::NET_F_GUEST_ECN;
    }
    if pairs > 1 {
        want |= feature::NET_F_MQ;
    }
    let features = offered & want;
    if features & feature::F_VERSION_1 == 0 {
        return Err(VirtioError::MissingFeature {
            name: "VIRTIO_F_VERSION_1",
            bit: 32,
        });
    }
    fe.set_features(features).map_err(vu("SET_FEATURES"))?;
    let protocol = features & feature::VHOST_USER_F_PROTOCOL_FEATURES != 0;
    if protocol {
        let pf = fe
            .get_protocol_features()
            .map_err(vu("GET_PROTOCOL_FEATURES"))?;
        let pf = pf & (VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK);
        fe.set_protocol_features(pf)
            .map_err(vu("SET_PROTOCOL_FEATURES"))?;
        if pf.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            // Every request acked: a refusal is an error here, not a
            // silently dead ring later.
            fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        if pairs > 1 {
            let n = fe.get_queue_num().map_err(vu("GET_QUEUE_NUM"))?;
            if (n as usize) < rings {
                return Err(VirtioError::Config(format!(
                    "the backend has {n} rings, {rings} wanted"
                )));
            }
        }
    } else if pairs > 1 {
        return Err(VirtioError::Config(
            "several queue pairs need vhost-user protocol features".into(),
        ));
    }

    // Rings and buffers in one memfd: one memory-table entry.
    let size = cfg.queue_size;
    let ring_bytes = crate::virtqueue::RingLayout::new(LayoutKind::Modern, size)?.len;
    let arena_len =
        rings * ring_bytes + cfg.pool_size * nfkit_hw::pool::DEFAULT_BUF_SIZE + (4 << 20);
    let arena = MemfdArena::new(&cfg.name, arena_len)?;
    let pool = Mempool::new(
        &arena,
        &format!("{}-pool", cfg.name),
        cfg.pool_size,
        nfkit_hw::pool::DEFAULT_BUF_SIZE,
    )?;
    let event_idx = features & feature::F_EVENT_IDX != 0;
    let mut vqs = Vec::with_capacity(rings);
    for ring in 0..rings {
        let mut vq = Virtqueue::new(&arena, LayoutKind::Modern, size, event_idx)?;
        if features & feature::F_IN_ORDER != 0 {
            // Receive rings (even) need the lengths the device wrote.
            vq.set_in_order(ring % 2 == 0);
        }
        vqs.push(vq);
    }
    let region = VhostUserMemoryRegionInfo {
        guest_phys_addr: arena.device_base(),
        memory_size: arena.len() as u64,
        userspace_addr: arena.base_addr(),
        mmap_offset: 0,
        mmap_handle: arena.file().as_raw_fd(),
    };
    fe.set_mem_table(&[region]).map_err(vu("SET_MEM_TABLE"))?;

    let eventfd = || {
        EventFd::new(libc::EFD_NONBLOCK)
            .map_err(|e| VirtioError::VhostUser(format!("eventfd: {e}")))
    };
    let mut kicks = Vec::with_capacity(rings);
    let mut calls = Vec::with_capacity(rings);
    for (i, vq) in vqs.iter().enumerate() {
        let (kick, call) = (eventfd()?, eventfd()?);
        fe.set_vring_num(i, size).map_err(vu("SET_VRING_NUM"))?;
        let addrs = VringConfigData {
            queue_max_size: size,
            queue_size: size,
            flags: 0,
            desc_table_addr: vq.desc_virt() as u64,
            used_ring_addr: vq.used_virt() as u64,
            avail_ring_addr: vq.avail_virt() as u64,
            log_addr: None,
        };
        fe.set_vring_addr(i, &addrs).map_err(vu("SET_VRING_ADDR"))?;
        fe.set_vring_base(i, 0).map_err(vu("SET_VRING_BASE"))?;
        fe.set_vring_call(i, &call).map_err(vu("SET_VRING_CALL"))?;
        fe.set_vring_kick(i, &kick).map_err(vu("SET_VRING_KICK"))?;
        if protocol {
            fe.set_vring_enable(i, true)
                .map_err(vu("SET_VRING_ENABLE"))?;
        }
        kicks.push(kick);
        calls.push(call);
    }

    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for (i, vq) in vqs.into_iter().enumerate() {
        if i % 2 == 0 {
            rx.push(RxQueue::new(vq, i as u16));
        } else {
            tx.push(TxQueue::new(vq, i as u16));
        }
    }
    let link = VhostUserLink {
        frontend: fe,
        kicks,
        calls,
        never_kick: cfg.never_kick,
        _arena: arena,
    };
    Ok(NetDevice::start(NetParts {
        name: cfg.name.clone(),
        mac: cfg.mac,
        notify: link,
        hdr_len: spec::HDR_LEN_MODERN,
        features,
        pool,
        rx,
        tx,
    })?)
}

impl VhostUserLink {
    /// The vhost-user connection (for diagnostics).
    pub fn frontend(&self) -> &Frontend {
        &self.frontend
    }
}
