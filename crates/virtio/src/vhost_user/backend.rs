//! A vhost-user backend port: nfkit as the switch that VMs (QEMU) and
//! other vhost-user frontends (DPDK's virtio-user, our own
//! [`super::VirtioUser`]) plug into.
//!
//! The protocol (message framing, file descriptors over SCM_RIGHTS,
//! reply-ack) is rust-vmm's `vhost` crate; the rings are walked with
//! `virtio-queue` ([`super::device`]); what this file adds is the state
//! machine of the vhost-user specification ("Ring states": stopped,
//! started, enabled) and the checks on what the frontend tells us.
//!
//! A thread owns the listening socket and serves one frontend at a time.
//! When the frontend goes away (or breaks the protocol), its session
//! (memory, rings) is dropped and the next frontend can connect: the
//! port, its counters and its pool survive.
//!
//! Queue naming follows the device: the frontend's transmitq *k*
//! (virtqueue 2*k*+1) is this port's receive queue *k*, and its
//! receiveq *k* (2*k*) is our transmit queue *k*.

use super::device::{pop_tx, push_rx, wants_interrupt, Moved};
use super::memory::{FrontendMemory, RegionDesc};
use crate::error::VirtioError;
use crate::spec::feature;
use nfkit_hw::{Batch, Mempool};
use nfkit_port::{LinkStatus, Port, QueueStats};
use parking_lot::Mutex;
use std::fs::File;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vhost::vhost_user::message::*;
use vhost::vhost_user::{BackendReqHandler, Error as VuError, VhostUserBackendReqHandlerMut};
use virtio_queue::{Queue, QueueT};

/// Largest ring a frontend may ask for (§2.7: split rings).
const MAX_RING: u16 = 1024;

/// One ring as the frontend configured it.
struct Vring {
    queue: Queue,
    call: Option<File>,
    /// SET_VRING_KICK received: the ring is started.
    started: bool,
    /// SET_VRING_ENABLE(1), or implied without PROTOCOL_FEATURES.
    enabled: bool,
    /// Ring addresses, as frontend virtual addresses.
    addrs: Option<(u64, u64, u64)>,
}

impl Vring {
    fn new() -> Self {
        Vring {
            // Cannot fail: MAX_RING is a power of two.
            queue: Queue::new(MAX_RING).unwrap_or_else(|_| unreachable!()),
            call: None,
            started: false,
            enabled: false,
            addrs: None,
        }
    }
    fn live(&self) -> bool {
        self.started && self.enabled && self.queue.ready()
    }
    /// §2.7.7: tell the frontend, through its call eventfd, that buffers
    /// were used, if it asked.
    fn interrupt(&mut self, mem: &FrontendMemory) {
        if wants_interrupt(&mut self.queue, &mem.mem) {
            if let Some(call) = &mut self.call {
                let _ = call.write(&1u64.to_ne_bytes());
            }
        }
    }
}

/// What one connected frontend set up.
struct Session {
    mem: Option<FrontendMemory>,
    vrings: Vec<Vring>,
    features: u64,
    protocol: u64,
    hdr_len: usize,
    /// A SET_VRING_ENABLE came before the features were set.
    early_enable: bool,
}

impl Session {
    fn new(rings: usize) -> Self {
        Session {
            mem: None,
            vrings: (0..rings).map(|_| Vring::new()).collect(),
            features: 0,
            protocol: 0,
            hdr_len: crate::spec::net::HDR_LEN_LEGACY,
            early_enable: false,
        }
    }
}

/// Counters of the control side.
#[derive(Debug, Default)]
pub struct BackendCounters {
    /// Frontends that connected.
    pub connections: AtomicU64,
    /// Messages refused (bad values, unsupported requests).
    pub refused: AtomicU64,
    /// Connections dropped for breaking the protocol.
    pub protocol_errors: AtomicU64,
}

struct Shared {
    session: Mutex<Session>,
    rings: usize,
    connected: AtomicBool,
    stop: AtomicBool,
    /// The live connection, to shut it down when the port goes.
    conn: Mutex<Option<UnixStream>>,
    counters: BackendCounters,
}

/// Settings of a backend port.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// Port name (its spec).
    pub name: String,
    /// Socket path to listen on (replaced if it exists).
    pub path: PathBuf,
    /// Queue pairs offered (VIRTIO_NET_F_MQ when more than one).
    pub queue_pairs: u16,
    pub mac: [u8; 6],
}

/// The vhost-user backend port.
pub struct VhostUserBackend {
    name: String,
    mac: [u8; 6],
    pool: Mempool,
    shared: Arc<Shared>,
    stats: Vec<QueueStats>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl std::fmt::Debug for VhostUserBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VhostUserBackend")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

impl VhostUserBackend {
    /// Listen on `cfg.path`; received packets are copied into buffers of
    /// `pool`.
    pub fn listen(cfg: BackendConfig, pool: Mempool) -> Result<Self, VirtioError> {
        let pairs = cfg.queue_pairs.max(1);
        let _ = std::fs::remove_file(&cfg.path);
        let listener = UnixListener::bind(&cfg.path).map_err(|e| {
            VirtioError::VhostUser(format!("listening on {}: {e}", cfg.path.display()))
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| VirtioError::VhostUser(format!("socket: {e}")))?;
        let rings = 2 * pairs as usize;
        let shared = Arc::new(Shared {
            session: Mutex::new(Session::new(rings)),
            rings,
            connected: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conn: Mutex::new(None),
            counters: BackendCounters::default(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("vhost-user {}", cfg.name))
            .spawn(move || serve(listener, s))
            .map_err(|e| VirtioError::VhostUser(format!("spawning the socket thread: {e}")))?;
        Ok(VhostUserBackend {
            name: cfg.name,
            mac: cfg.mac,
            pool,
            shared,
            stats: vec![QueueStats::default(); pairs as usize],
            thread: Some(thread),
            path: cfg.path,
        })
    }

    /// Whether a frontend is connected.
    pub fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire)
    }

    /// Whether the frontend has started and enabled both rings of pair
    /// `queue` (traffic can flow).
    pub fn ready(&self, queue: usize) -> bool {
        let s = self.shared.session.lock();
        s.mem.is_some()
            && [2 * queue, 2 * queue + 1]
                .iter()
                .all(|&i| s.vrings.get(i).is_some_and(Vring::live))
    }

    pub fn counters(&self) -> &BackendCounters {
        &self.shared.counters
    }
}

impl Drop for VhostUserBackend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(c) = self.shared.conn.lock().take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accept frontends one after another until the port is dropped.
fn serve(listener: UnixListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => {
                tracing::warn!("vhost-user accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        *shared.conn.lock() = stream.try_clone().ok();
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        shared.connected.store(true, Ordering::Release);
        serve_one(stream, &shared);
        shared.connected.store(false, Ordering::Release);
        *shared.conn.lock() = None;
        // The frontend is gone: forget what it set up.
        *shared.session.lock() = Session::new(shared.rings);
    }
}

fn serve_one(stream: UnixStream, shared: &Arc<Shared>) {
    let handler = Arc::new(std::sync::Mutex::new(Handler {
        shared: shared.clone(),
    }));
    let mut conn = BackendReqHandler::from_stream(stream, handler);
    loop {
        match conn.handle_request() {
            Ok(()) => {}
            // Our own refusal, already answered: the stream is in step.
            Err(VuError::ReqHandlerError(e)) => {
                tracing::debug!("vhost-user request refused: {e}");
            }
            // QEMU (7.2) sends SET_VRING_ENABLE(1) for the rings it will
            // use *before* SET_FEATURES acks VHOST_USER_F_PROTOCOL_FEATURES
            // (it "restores" the enable state before starting the device)
            // and does not send it again. The vhost crate refuses such a
            // request before we see it, so what it said is lost; the
            // message was read whole, so the stream is in step. We take
            // it as QEMU means it: the rings start enabled.
            Err(VuError::InactiveFeature(f)) => {
                shared.session.lock().early_enable = true;
                tracing::debug!(
                    "vhost-user: SET_VRING_ENABLE before {f:?} was acked: rings start enabled"
                );
            }
            Err(VuError::Disconnected)
            | Err(VuError::PartialMessage)
            | Err(VuError::SocketBroken(_)) => return,
            Err(e) => {
                // Framing broken: the stream cannot be trusted to be in
                // step any more. Drop the frontend; it may reconnect.
                shared
                    .counters
                    .protocol_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!("vhost-user frontend broke the protocol, disconnecting: {e}");
                return;
            }
        }
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
    }
}

/// Answers the frontend's requests for one connection.
struct Handler {
    shared: Arc<Shared>,
}

type VuResult<T> = vhost::vhost_user::Result<T>;

fn refuse<T>(shared: &Shared, why: &str) -> VuResult<T> {
    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
    tracing::debug!("vhost-user: refusing: {why}");
    Err(VuError::ReqHandlerError(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        why.to_string(),
    )))
}

impl Handler {
    /// The features this port offers (vhost-user "GET_FEATURES").
    fn offered(&self) -> u64 {
        let mut f =
            feature::F_VERSION_1 | feature::VHOST_USER_F_PROTOCOL_FEATURES | feature::F_EVENT_IDX;
        if self.shared.rings > 2 {
            f |= feature::NET_F_MQ;
        }
        f
    }

    fn with_ring<T>(
        &self,
        index: u32,
        f: impl FnOnce(&mut Session, usize) -> VuResult<T>,
    ) -> VuResult<T> {
        let mut s = self.shared.session.lock();
        let i = index as usize;
        if i >= s.vrings.len() {
            return refuse(&self.shared, "ring index out of range");
        }
        f(&mut s, i)
    }
}

fn unsupported<T>(shared: &Shared) -> VuResult<T> {
    refuse(shared, "request not supported by this backend")
}

impl VhostUserBackendReqHandlerMut for Handler {
    fn set_owner(&mut self) -> VuResult<()> {
        Ok(())
    }
    fn reset_owner(&mut self) -> VuResult<()> {
        *self.shared.session.lock() = Session::new(self.shared.rings);
        Ok(())
    }
    fn reset_device(&mut self) -> VuResult<()> {
        self.reset_owner()
    }
    fn get_features(&mut self) -> VuResult<u64> {
        Ok(self.offered())
    }
    fn set_features(&mut self, features: u64) -> VuResult<()> {
        if features & !self.offered() != 0 {
            return refuse(&self.shared, "features not offered");
        }
        let mut s = self.shared.session.lock();
        s.features = features;
        s.hdr_len = if features & (feature::F_VERSION_1 | feature::NET_F_MRG_RXBUF) != 0 {
            crate::spec::net::HDR_LEN_MODERN
        } else {
            crate::spec::net::HDR_LEN_LEGACY
        };
        let event_idx = features & feature::F_EVENT_IDX != 0;
        // Without PROTOCOL_FEATURES rings are enabled as they start; with
        // it, after an early SET_VRING_ENABLE (see `serve_one`) too.
        let implied = features & feature::VHOST_USER_F_PROTOCOL_FEATURES == 0 || s.early_enable;
        for v in s.vrings.iter_mut() {
            v.queue.set_event_idx(event_idx);
            if implied {
                v.enabled = true;
            }
        }
        Ok(())
    }
    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy: Option<bool>,
    ) -> VuResult<Option<Vec<vhost::VhostUserMemoryRegionBase>>> {
        let regions: Vec<RegionDesc> = ctx
            .iter()
            .map(|r| RegionDesc {
                guest_phys_addr: r.guest_phys_addr,
                memory_size: r.memory_size,
                userspace_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
            })
            .collect();
        match FrontendMemory::map(&regions, files) {
            Ok(m) => {
                let mut s = self.shared.session.lock();
                s.mem = Some(m);
                // Ring addresses are frontend virtual addresses: place
                // them again in the new table.
                let Session { mem, vrings, .. } = &mut *s;
                for v in vrings.iter_mut() {
                    if let (Some(mem), Some(a)) = (mem.as_ref(), v.addrs) {
                        let _ = place_ring(&mut v.queue, mem, a);
                    }
                }
                Ok(None)
            }
            Err(e) => refuse(&self.shared, &e.to_string()),
        }
    }
    fn set_vring_num(&mut self, index: u32, num: u32) -> VuResult<()> {
        let shared = self.shared.clone();
        self.with_ring(index, |s, i| {
            if num == 0 || num > MAX_RING as u32 || !num.is_power_of_two() {
                return refuse(&shared, "ring size must be a power of two up to 1024");
            }
            s.vrings[i].queue.set_size(num as u16);
            Ok(())
        })
    }
    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> VuResult<()> {
        let shared = self.shared.clone();
        self.with_ring(index, |s, i| {
            let Some(mem) = s.mem.as_ref() else {
                return refuse(&shared, "SET_VRING_ADDR before SET_MEM_TABLE");
            };
            let a = (descriptor, available, used);
            if let Err(e) = place_ring(&mut s.vrings[i].queue, mem, a) {
                return refuse(&shared, &e);
            }
            s.vrings[i].addrs = Some(a);
            Ok(())
        })
    }
    fn set_vring_base(&mut self, index: u32, base: u32) -> VuResult<()> {
        self.with_ring(index, |s, i| {
            let q = &mut s.vrings[i].queue;
            q.set_next_avail(base as u16);
            q.set_next_used(base as u16);
            Ok(())
        })
    }
    fn get_vring_base(&mut self, index: u32) -> VuResult<VhostUserVringState> {
        // The frontend stops the ring to read where it stands.
        self.with_ring(index, |s, i| {
            let v = &mut s.vrings[i];
            v.started = false;
            v.queue.set_ready(false);
            Ok(VhostUserVringState::new(index, v.queue.next_avail() as u32))
        })
    }
    fn set_vring_kick(&mut self, index: u8, _fd: Option<File>) -> VuResult<()> {
        // We poll the rings, so the kick eventfd is not read; receiving
        // it starts the ring (vhost-user "Ring states").
        let shared = self.shared.clone();
        self.with_ring(index as u32, |s, i| {
            let Session { mem, vrings, .. } = s;
            let Some(mem) = mem.as_ref() else {
                return refuse(&shared, "SET_VRING_KICK before SET_MEM_TABLE");
            };
            let v = &mut vrings[i];
            if v.addrs.is_none() {
                return refuse(&shared, "SET_VRING_KICK before SET_VRING_ADDR");
            }
            v.queue.set_ready(true);
            if !v.queue.is_valid(&mem.mem) {
                v.queue.set_ready(false);
                return refuse(&shared, "ring does not lie inside the memory table");
            }
            // Resume after the used entries the ring already holds.
            if let Ok(u) = v
                .queue
                .used_idx(&mem.mem, std::sync::atomic::Ordering::Acquire)
            {
                v.queue.set_next_used(u.0);
            }
            // We poll: ask the frontend not to kick (used.flags
            // NO_NOTIFY, §2.7.10; with EVENT_IDX, avail_event is never
            // moved on, so it kicks at most once per 65536 buffers).
            let _ = v.queue.disable_notification(&mem.mem);
            v.started = true;
            Ok(())
        })
    }
    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        self.with_ring(index as u32, |s, i| {
            s.vrings[i].call = fd;
            Ok(())
        })
    }
    fn set_vring_err(&mut self, _index: u8, _fd: Option<File>) -> VuResult<()> {
        Ok(())
    }
    fn get_protocol_features(&mut self) -> VuResult<VhostUserProtocolFeatures> {
        Ok(VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK)
    }
    fn set_protocol_features(&mut self, features: u64) -> VuResult<()> {
        let ours = (VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK).bits();
        if features & !ours != 0 {
            return refuse(&self.shared, "protocol features not offered");
        }
        self.shared.session.lock().protocol = features;
        Ok(())
    }
    fn get_queue_num(&mut self) -> VuResult<u64> {
        Ok(self.shared.rings as u64)
    }
    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VuResult<()> {
        self.with_ring(index, |s, i| {
            s.vrings[i].enabled = enable;
            Ok(())
        })
    }
    fn get_config(&mut self, _o: u32, _s: u32, _f: VhostUserConfigFlags) -> VuResult<Vec<u8>> {
        unsupported(&self.shared)
    }
    fn set_config(&mut self, _o: u32, _b: &[u8], _f: VhostUserConfigFlags) -> VuResult<()> {
        unsupported(&self.shared)
    }
    fn set_gpu_socket(&mut self, _g: vhost::vhost_user::GpuBackend) -> VuResult<()> {
        unsupported(&self.shared)
    }
    fn get_shared_object(&mut self, _u: VhostUserSharedMsg) -> VuResult<File> {
        unsupported(&self.shared)
    }
    fn get_inflight_fd(&mut self, _i: &VhostUserInflight) -> VuResult<(VhostUserInflight, File)> {
        unsupported(&self.shared)
    }
    fn set_inflight_fd(&mut self, _i: &VhostUserInflight, _f: File) -> VuResult<()> {
        unsupported(&self.shared)
    }
    fn get_max_mem_slots(&mut self) -> VuResult<u64> {
        Ok(super::memory::MAX_REGIONS as u64)
    }
    fn add_mem_region(
        &mut self,
        _r: &VhostUserSingleMemoryRegion,
        _fd: File,
        _p: Option<bool>,
    ) -> VuResult<Option<vhost::VhostUserMemoryRegionBase>> {
        unsupported(&self.shared)
    }
    fn remove_mem_region(&mut self, _r: &VhostUserSingleMemoryRegion) -> VuResult<()> {
        unsupported(&self.shared)
    }
    fn set_device_state_fd(
        &mut self,
        _d: VhostTransferStateDirection,
        _p: VhostTransferStatePhase,
        _f: File,
    ) -> VuResult<Option<File>> {
        unsupported(&self.shared)
    }
    fn check_device_state(&mut self) -> VuResult<()> {
        unsupported(&self.shared)
    }
    fn get_shmem_config(&mut self) -> VuResult<VhostUserShMemConfig> {
        unsupported(&self.shared)
    }
    fn set_log_base(&mut self, _l: &VhostUserLog, _f: File) -> VuResult<()> {
        unsupported(&self.shared)
    }
}

/// Point `q` at ring addresses given as frontend virtual addresses.
fn place_ring(
    q: &mut Queue,
    mem: &FrontendMemory,
    (desc, avail, used): (u64, u64, u64),
) -> Result<(), String> {
    let gpa = |va| {
        mem.va_to_gpa(va)
            .map(vm_memory::GuestAddress)
            .map_err(|e| e.to_string())
    };
    q.try_set_desc_table_address(gpa(desc)?)
        .map_err(|e| format!("descriptor table: {e}"))?;
    q.try_set_avail_ring_address(gpa(avail)?)
        .map_err(|e| format!("available ring: {e}"))?;
    q.try_set_used_ring_address(gpa(used)?)
        .map_err(|e| format!("used ring: {e}"))
}

impl Port for VhostUserBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.stats.len()
    }
    fn tx_queues(&self) -> usize {
        self.stats.len()
    }

    /// Packets the frontend transmitted (its transmitq, ring 2q+1).
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let Some(stats) = self.stats.get_mut(queue) else {
            return 0;
        };
        let mut s = self.shared.session.lock();
        let Session {
            mem,
            vrings,
            hdr_len,
            ..
        } = &mut *s;
        let (Some(mem), Some(v)) = (mem.as_ref(), vrings.get_mut(2 * queue + 1)) else {
            return 0;
        };
        if !v.live() {
            return 0;
        }
        let mut got = 0;
        while !batch.is_full() {
            let Some(mut buf) = self.pool.alloc() else {
                break;
            };
            let room = self.pool.data_room();
            if buf.set_len(room).is_err() {
                break;
            }
            match pop_tx(&mut v.queue, &mem.mem, *hdr_len, buf.data_mut()) {
                Moved::Packet(n) => {
                    let _ = buf.set_len(n);
                    stats.rx_packets += 1;
                    stats.rx_bytes += n as u64;
                    batch.push(buf);
                    got += 1;
                }
                Moved::Empty => break,
                Moved::Bad => stats.rx_errors += 1,
            }
        }
        if got > 0 {
            v.interrupt(mem);
        }
        got
    }

    /// Packets to the frontend (into its receiveq, ring 2q).
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let Some(stats) = self.stats.get_mut(queue) else {
            return 0;
        };
        let mut s = self.shared.session.lock();
        let Session {
            mem,
            vrings,
            hdr_len,
            ..
        } = &mut *s;
        let (Some(mem), Some(v)) = (mem.as_ref(), vrings.get_mut(2 * queue)) else {
            return 0;
        };
        if !v.live() {
            return 0;
        }
        let mut taken = 0;
        let mut sent = 0;
        for pkt in batch.iter() {
            match push_rx(&mut v.queue, &mem.mem, *hdr_len, pkt.data()) {
                Moved::Packet(n) => {
                    stats.tx_packets += 1;
                    stats.tx_bytes += n as u64;
                    sent += 1;
                }
                Moved::Empty => break,
                Moved::Bad => stats.tx_errors += 1,
            }
            taken += 1;
        }
        batch.drain_front(taken);
        if taken > 0 {
            v.interrupt(mem);
        }
        sent
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        self.stats.get(queue).copied().unwrap_or_default()
    }
    fn link(&self) -> LinkStatus {
        LinkStatus {
            up: self.connected(),
            speed_mbps: None,
        }
    }
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn pool(&self) -> &Mempool {
        &self.pool
    }
}

/// The default socket path for a port name.
pub fn default_socket_path(name: &str) -> PathBuf {
    Path::new("/tmp").join(format!("nfkit-{name}.sock"))
}
