//! The wire side of a port (MAC/PHY): frames arriving from the wire go
//! through the receive filters into the RX packet buffer (a bounded
//! lock-free FIFO); frames the TX engine sends go to whatever the port is
//! cabled to: another port, a sink, a pcap file, or a capture queue that
//! tests drain.
//!
//! Frames on this wire never carry the Ethernet CRC (the model appends or
//! checks it where the datasheet says the MAC does). Frame buffers are
//! recycled through free lists, so the steady state allocates nothing.

use crate::device::{bump, Device};
use crate::filter;
use crossbeam_queue::ArrayQueue;
use parking_lot::{Mutex, RwLock};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A frame in the RX packet buffer, with the queue the filters chose.
#[derive(Debug)]
pub(crate) struct RxFrame {
    pub data: Vec<u8>,
    pub class: filter::Class,
    /// Already counted as finding no descriptor (RNBC) while it waits.
    pub waited: bool,
}

/// Where transmitted frames go.
#[derive(Clone)]
pub(crate) enum Peer {
    /// Kept for `Wire::drain_transmitted`.
    Capture,
    Cable(Weak<Device>),
    Sink(Arc<SinkStats>),
    Pcap(Arc<Mutex<PcapWriter<BufWriter<File>>>>),
}

/// `Peer` resolved for one burst of transmissions.
pub(crate) enum PeerNow {
    Capture,
    Cable(Arc<Device>),
    Gone,
    Sink(Arc<SinkStats>),
    Pcap(Arc<Mutex<PcapWriter<BufWriter<File>>>>),
}

/// Counts of a traffic sink.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub frames: AtomicU64,
    pub bytes: AtomicU64,
}

impl SinkStats {
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// Errors of the pcap wire.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("pcap file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pcap file {path}: {source}")]
    Format {
        path: String,
        #[source]
        source: pcap_file::PcapError,
    },
}

pub(crate) struct WireState {
    pub rx_fifo: ArrayQueue<RxFrame>,
    rx_free: ArrayQueue<Vec<u8>>,
    rx_allocated: AtomicUsize,
    capture: ArrayQueue<Vec<u8>>,
    capture_free: ArrayQueue<Vec<u8>>,
    peer: RwLock<Peer>,
    /// Frames displaced from a full capture queue.
    pub capture_overwritten: AtomicU64,
}

impl WireState {
    pub fn new(cfg: &crate::ModelConfig) -> WireState {
        let fifo = cfg.rx_fifo_frames.max(1);
        let cap = cfg.tx_capture_frames.max(1);
        WireState {
            rx_fifo: ArrayQueue::new(fifo),
            rx_free: ArrayQueue::new(fifo),
            rx_allocated: AtomicUsize::new(0),
            capture: ArrayQueue::new(cap),
            capture_free: ArrayQueue::new(1024),
            peer: RwLock::new(Peer::Capture),
            capture_overwritten: AtomicU64::new(0),
        }
    }

    /// A reset empties the packet buffer.
    pub fn flush_rx(&self) {
        while let Some(f) = self.rx_fifo.pop() {
            self.recycle_rx(f.data);
        }
    }

    pub fn recycle_rx(&self, buf: Vec<u8>) {
        // the free list has room for every buffer ever allocated
        let _ = self.rx_free.push(buf);
    }

    /// A buffer for an arriving frame, or `None` when the packet buffer is full.
    fn rx_buffer(&self) -> Option<Vec<u8>> {
        if let Some(b) = self.rx_free.pop() {
            return Some(b);
        }
        let cap = self.rx_fifo.capacity();
        let n = self.rx_allocated.fetch_add(1, Ordering::Relaxed);
        if n < cap {
            Some(Vec::with_capacity(2048))
        } else {
            self.rx_allocated.fetch_sub(1, Ordering::Relaxed);
            None
        }
    }

    pub fn peer_now(&self) -> PeerNow {
        match &*self.peer.read() {
            Peer::Capture => PeerNow::Capture,
            Peer::Cable(w) => w.upgrade().map_or(PeerNow::Gone, PeerNow::Cable),
            Peer::Sink(s) => PeerNow::Sink(s.clone()),
            Peer::Pcap(p) => PeerNow::Pcap(p.clone()),
        }
    }

    fn set_peer(&self, p: Peer) {
        *self.peer.write() = p;
    }

    fn capture(&self, frame: &[u8]) {
        let mut b = self.capture_free.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        if let Some(old) = self.capture.force_push(b) {
            self.capture_overwritten.fetch_add(1, Ordering::Relaxed);
            let _ = self.capture_free.push(old);
        }
    }
}

/// A frame from the wire arrives at `dev` (MAC receive, §7.1.1-7.1.2).
pub(crate) fn receive(dev: &Device, frame: &[u8]) -> bool {
    let c = &dev.counters;
    let Some(class) = filter::admit(dev, frame) else {
        return false;
    };
    let Some(mut buf) = dev.wire.rx_buffer() else {
        // packet buffer full: a missed packet (MPC, §8.2.3.23.4)
        dev.regs.count(crate::regs::off::mpc(0), 1);
        bump(&c.rx_fifo_overflow, 1);
        return false;
    };
    buf.clear();
    buf.extend_from_slice(frame);
    match dev.wire.rx_fifo.push(RxFrame {
        data: buf,
        class,
        waited: false,
    }) {
        Ok(()) => {
            filter::count_received(dev, frame, &class);
            true
        }
        Err(f) => {
            dev.wire.recycle_rx(f.data);
            dev.regs.count(crate::regs::off::mpc(0), 1);
            bump(&c.rx_fifo_overflow, 1);
            false
        }
    }
}

/// The TX engine puts a finished frame (without CRC) on the wire.
pub(crate) fn transmit(dev: &Device, peer: &PeerNow, frame: &[u8]) {
    match peer {
        PeerNow::Capture => dev.wire.capture(frame),
        PeerNow::Cable(other) => {
            receive(other, frame);
        }
        PeerNow::Gone => {}
        PeerNow::Sink(s) => {
            bump(&s.frames, 1);
            bump(&s.bytes, frame.len() as u64);
        }
        PeerNow::Pcap(w) => {
            let ts = dev.now();
            let pkt = PcapPacket::new(ts, frame.len() as u32, frame);
            if w.lock().write_packet(&pkt).is_err() {
                bump(&dev.counters.tx_dropped, 1);
            }
        }
    }
}

/// The wire side of one port. Cheap to clone.
#[derive(Clone)]
pub struct Wire {
    dev: Arc<Device>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish()
    }
}

impl Wire {
    pub(crate) fn new(dev: Arc<Device>) -> Wire {
        Wire { dev }
    }

    /// A frame arrives from the wire (without CRC). It goes through the MAC
    /// filters, queue selection (RSS) and into the RX packet buffer; the
    /// DMA engine later moves it into a descriptor (or drops and counts it
    /// when none is free). Returns false if dropped at once (link down,
    /// receive off, filtered, bad size, packet buffer full).
    pub fn inject(&self, frame: &[u8]) -> bool {
        receive(&self.dev, frame)
    }

    /// Frames the NIC transmitted (without CRC, padded to 60 bytes if
    /// HLREG0.TXPADEN) that went nowhere else, oldest first.
    pub fn drain_transmitted(&self, mut f: impl FnMut(&[u8])) {
        while let Some(b) = self.dev.wire.capture.pop() {
            f(&b);
            let _ = self.dev.wire.capture_free.push(b);
        }
    }

    /// Number of frames waiting for `drain_transmitted`.
    pub fn transmitted_pending(&self) -> usize {
        self.dev.wire.capture.len()
    }

    /// Frames in the RX packet buffer, not yet in descriptors.
    pub fn rx_pending(&self) -> usize {
        self.dev.wire.rx_fifo.len()
    }

    /// Transmitted frames are counted and discarded.
    pub fn attach_sink(&self) -> Arc<SinkStats> {
        let s = Arc::new(SinkStats::default());
        self.dev.wire.set_peer(Peer::Sink(s.clone()));
        s
    }

    /// Transmitted frames are written to a pcap file (Ethernet link type,
    /// device-time timestamps). The file is complete after
    /// [`detach`](Self::detach) or when the port is dropped.
    pub fn capture_to_pcap(&self, path: impl AsRef<Path>) -> Result<(), PcapError> {
        let p = path.as_ref();
        let name = p.display().to_string();
        let file = File::create(p).map_err(|source| PcapError::Io {
            path: name.clone(),
            source,
        })?;
        let w = PcapWriter::new(BufWriter::new(file))
            .map_err(|source| PcapError::Format { path: name, source })?;
        self.dev.wire.set_peer(Peer::Pcap(Arc::new(Mutex::new(w))));
        Ok(())
    }

    /// Inject every frame of a pcap file (timestamps are not honoured: the
    /// frames arrive back to back). Returns (frames read, frames accepted).
    pub fn replay_pcap(&self, path: impl AsRef<Path>) -> Result<(usize, usize), PcapError> {
        let p = path.as_ref();
        let name = p.display().to_string();
        let file = File::open(p).map_err(|source| PcapError::Io {
            path: name.clone(),
            source,
        })?;
        let mut r = PcapReader::new(BufReader::new(file)).map_err(|source| PcapError::Format {
            path: name.clone(),
            source,
        })?;
        let (mut read, mut accepted) = (0, 0);
        while let Some(pkt) = r.next_packet() {
            let pkt = pkt.map_err(|source| PcapError::Format {
                path: name.clone(),
                source,
            })?;
            read += 1;
            accepted += usize::from(self.inject(&pkt.data));
        }
        Ok((read, accepted))
    }

    /// Back to the default: transmitted frames are kept for
    /// `drain_transmitted` (this also closes a pcap capture).
    pub fn detach(&self) {
        self.dev.wire.set_peer(Peer::Capture);
    }
}

/// Cable two ports: frames transmitted by one arrive at the other.
pub fn cable(a: &crate::Nic82599, b: &crate::Nic82599) {
    let (da, db) = (a.device(), b.device());
    da.wire.set_peer(Peer::Cable(Arc::downgrade(db)));
    db.wire.set_peer(Peer::Cable(Arc::downgrade(da)));
}

/// A traffic generator: UDP/IPv4 frames over a number of flows (the
/// source port varies, so RSS spreads them), injected into a wire.
#[derive(Debug, Clone)]
pub struct TrafficGen {
    frames: Vec<Vec<u8>>,
    next: usize,
}

impl TrafficGen {
    /// `flows` UDP/IPv4 frames of `len` bytes (without CRC, at least 42)
    /// from 02:00:00:00:00:fe to `dst_mac`, 10.0.0.1 -> 10.0.0.2, source
    /// ports 1024.. and destination port 5000.
    pub fn udp_flows(dst_mac: [u8; 6], flows: usize, len: usize) -> TrafficGen {
        let len = len.max(42);
        let frames = (0..flows.max(1))
            .map(|i| {
                let mut f = vec![0u8; len];
                f[0..6].copy_from_slice(&dst_mac);
                f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xfe]);
                f[12..14].copy_from_slice(&[0x08, 0x00]);
                let ip_len = (len - 14) as u16;
                let ip = &mut f[14..34];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
                ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
                let csum = ipv4_checksum(ip);
                ip[10..12].copy_from_slice(&csum.to_be_bytes());
                let sport = 1024 + (i as u16);
                f[34..36].copy_from_slice(&sport.to_be_bytes());
                f[36..38].copy_from_slice(&5000u16.to_be_bytes());
                f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
                f
            })
            .collect();
        TrafficGen { frames, next: 0 }
    }

    /// A generator cycling through the given frames.
    pub fn from_frames(frames: Vec<Vec<u8>>) -> TrafficGen {
        TrafficGen { frames, next: 0 }
    }

    /// The next frame (round-robin over the flows).
    pub fn next_frame(&mut self) -> &[u8] {
        let i = self.next;
        self.next = (self.next + 1) % self.frames.len().max(1);
        &self.frames[i]
    }

    /// Inject `count` frames back to back; returns how many were accepted.
    pub fn inject(&mut self, wire: &Wire, count: usize) -> usize {
        if self.frames.is_empty() {
            return 0;
        }
        (0..count)
            .filter(|_| wire.inject(self.next_frame()))
            .count()
    }
}

fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = hdr
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}
