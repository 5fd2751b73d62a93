//! The PCI drivers (legacy and modern) against a small VirtIO-net device
//! model, no VM needed. The model's register files follow VirtIO 1.2
//! §4.1.4.3 and §4.1.4.8; its queues are rust-vmm's `virtio-queue` (an
//! independent device-side implementation) over the driver's DMA memory,
//! which is a memfd the model maps as the device would. Transmitted
//! packets loop back into the receive queue of the same pair; the
//! control queue records and acks commands.

use nfkit_hw::pci::config;
use nfkit_hw::{Bar, Batch, HwError, IoBar, PciAddress, PciFunction, SystemClock};
use nfkit_port::Port;
use nfkit_virtio::spec::{feature, net as spec, status};
use nfkit_virtio::{
    IoBars, LegacyTransport, MappedBars, MemfdArena, ModernTransport, NetConfig, PciNet,
    VirtioError,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

/// How the model misbehaves, if at all.
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    /// Never finishes a reset (status never reads 0).
    hang_on_reset: bool,
    /// Clears FEATURES_OK when the driver sets it.
    refuse_features: bool,
}

#[derive(Default)]
struct State {
    status: u8,
    offered: u64,
    accepted: u64,
    device_feature_select: u32,
    driver_feature_select: u32,
    queue_select: u16,
    queues: Vec<Option<Queue>>,
    /// Modern: the addresses being written before queue_enable.
    pending: [u64; 3],
    pending_size: u16,
    max_pairs: u16,
    pairs_set: Option<u16>,
    promiscuous: Option<bool>,
    looped: u64,
    faults: Faults,
}

struct Model {
    state: Mutex<State>,
    /// The driver's memory, as the device maps it.
    mem: GuestMemoryMmap,
}

const QUEUE_MAX: u16 = 256;
const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

impl Model {
    fn new(arena: &MemfdArena, offered: u64, max_pairs: u16, faults: Faults) -> Arc<Self> {
        let file = FileOffset::new(arena.file().try_clone().unwrap(), 0);
        let map = MmapRegion::from_file(file, arena.len()).unwrap();
        let region = GuestRegionMmap::new(map, GuestAddress(arena.device_base())).unwrap();
        let mem = GuestMemoryMmap::from_regions(vec![region]).unwrap();
        let state = State {
            // A hung device still shows what an earlier driver set.
            status: if faults.hang_on_reset {
                status::ACKNOWLEDGE | status::DRIVER
            } else {
                0
            },
            offered,
            max_pairs,
            queues: (0..2 * max_pairs + 1).map(|_| None).collect(),
            faults,
            ..State::default()
        };
        Arc::new(Model {
            state: Mutex::new(state),
            mem,
        })
    }

    fn ctrl_index(s: &State) -> u16 {
        2 * s.max_pairs
    }

    fn set_status(&self, v: u8) {
        let mut s = self.state.lock();
        if v == 0 {
            if !s.faults.hang_on_reset {
                s.status = 0;
                s.queues.iter_mut().for_each(|q| *q = None);
            }
            return;
        }
        let mut v = v;
        if v & status::FEATURES_OK != 0
            && (s.faults.refuse_features || s.accepted & !s.offered != 0)
        {
            v &= !status::FEATURES_OK;
        }
        s.status = v;
    }

    fn config_byte(&self, off: usize) -> u8 {
        let s = self.state.lock();
        let mut cfg = [0u8; 10];
        cfg[..6].copy_from_slice(&MAC);
        cfg[6..8].copy_from_slice(&spec::S_LINK_UP.to_le_bytes());
        cfg[8..10].copy_from_slice(&s.max_pairs.to_le_bytes());
        cfg.get(off).copied().unwrap_or(0)
    }

    fn make_queue(&self, s: &mut State, q: u16, size: u16, desc: u64, avail: u64, used: u64) {
        let mut queue = Queue::new(QUEUE_MAX).unwrap();
        queue.set_size(size);
        queue
            .try_set_desc_table_address(GuestAddress(desc))
            .unwrap();
        queue
            .try_set_avail_ring_address(GuestAddress(avail))
            .unwrap();
        queue.try_set_used_ring_address(GuestAddress(used)).unwrap();
        queue.set_event_idx(s.accepted & feature::F_EVENT_IDX != 0);
        queue.set_ready(true);
        assert!(
            queue.is_valid(&self.mem),
            "driver gave queue {q} addresses outside its memory"
        );
        s.queues[q as usize] = Some(queue);
    }

    /// Legacy QUEUE_ADDRESS (§4.1.4.8): the rest follows the layout of §2.7.2.
    fn legacy_queue_address(&self, pfn: u32) {
        let mut s = self.state.lock();
        let q = s.queue_select;
        let n = QUEUE_MAX as u64;
        let desc = (pfn as u64) << 12;
        let avail = desc + 16 * n;
        let used = (avail + 6 + 2 * n).div_ceil(4096) * 4096;
        self.make_queue(&mut s, q, QUEUE_MAX, desc, avail, used);
    }

    /// A queue was notified: loop transmitted packets back, answer
    /// control commands.
    fn notify(&self, q: u16) {
        let mut s = self.state.lock();
        if q == Self::ctrl_index(&s) {
            return self.control(&mut s, q);
        }
        if q.is_multiple_of(2) {
            return; // new receive buffers: nothing to do
        }
        let mut buf = [0u8; 2048];
        let hdr = if s.accepted & feature::F_VERSION_1 != 0 {
            12
        } else {
            10
        };
        loop {
            let Some(txq) = s.queues[q as usize].as_mut() else {
                return;
            };
            let n = match pop_tx(txq, &self.mem, hdr, &mut buf) {
                Moved::Packet(n) => n,
                Moved::Empty => {
                    // Re-arm: with EVENT_IDX, ask to be notified of the
                    // next buffer (§2.7.10), as a real device does.
                    let _ = txq.enable_notification(&self.mem);
                    return;
                }
                Moved::Bad => panic!("driver posted a malformed transmit chain"),
            };
            let Some(rxq) = s.queues[q as usize - 1].as_mut() else {
                return;
            };
            if push_rx(rxq, &self.mem, hdr, &buf[..n]) == Moved::Packet(n) {
                s.looped += 1;
            }
        }
    }

    fn control(&self, s: &mut State, q: u16) {
        let Some(queue) = s.queues[q as usize].as_mut() else {
            return;
        };
        let mem = &self.mem;
        let chains: Vec<_> = queue.iter(mem).unwrap().collect();
        for chain in chains {
            let head = chain.head_index();
            let mut cmd = Vec::new();
            let mut ack = None;
            for d in chain {
                if d.is_write_only() {
                    ack = Some(d.addr());
                } else {
                    let mut b = vec![0u8; d.len() as usize];
                    mem.read_slice(&mut b, d.addr()).unwrap();
                    cmd.extend_from_slice(&b);
                }
            }
            let ok = match (cmd[0], cmd[1]) {
                (spec::CTRL_RX, spec::CTRL_RX_PROMISC) => {
                    s.promiscuous = Some(cmd[2] != 0);
                    true
                }
                (spec::CTRL_MQ, spec::CTRL_MQ_VQ_PAIRS_SET) => {
                    s.pairs_set = Some(u16::from_le_bytes([cmd[2], cmd[3]]));
                    true
                }
                _ => false,
            };
            let ack_byte = if ok { spec::CTRL_OK } else { spec::CTRL_ERR };
            mem.write_slice(
                &[ack_byte],
                ack.expect("control command without an ack buffer"),
            )
            .unwrap();
            let queue = s.queues[q as usize].as_mut().unwrap();
            queue.add_used(mem, head, 1).unwrap();
        }
        if let Some(queue) = s.queues[q as usize].as_mut() {
            let _ = queue.enable_notification(mem);
        }
    }
}

/// What happened to one packet moved through a device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moved {
    Packet(usize),
    Empty,
    Bad,
}

/// Copy the next packet the driver transmitted into `out` (without its
/// `hdr_len`-byte header) and return the chain to the driver.
fn pop_tx(q: &mut Queue, mem: &GuestMemoryMmap, hdr_len: usize, out: &mut [u8]) -> Moved {
    let Some(chain) = q.pop_descriptor_chain(mem) else {
        return Moved::Empty;
    };
    let head = chain.head_index();
    let mut skip = hdr_len;
    let mut n = 0usize;
    let mut bad = false;
    for d in chain {
        let len = d.len() as usize;
        let s = skip.min(len);
        skip -= s;
        let rest = len - s;
        if d.is_write_only()
            || n + rest > out.len()
            || mem
                .read_slice(&mut out[n..n + rest], GuestAddress(d.addr().0 + s as u64))
                .is_err()
        {
            bad = true;
            break;
        }
        n += rest;
    }
    q.add_used(mem, head, 0).unwrap();
    if bad || skip > 0 {
        Moved::Bad
    } else {
        Moved::Packet(n)
    }
}

/// Write `pkt` behind a zeroed header (num_buffers = 1) into the next
/// receive buffer the driver posted (one descriptor, as ours are).
fn push_rx(q: &mut Queue, mem: &GuestMemoryMmap, hdr_len: usize, pkt: &[u8]) -> Moved {
    let Some(mut chain) = q.pop_descriptor_chain(mem) else {
        return Moved::Empty;
    };
    let head = chain.head_index();
    let Some(d) = chain.next() else {
        return Moved::Bad;
    };
    let mut hdr = [0u8; 12];
    hdr[10] = 1;
    let fits = d.is_write_only() && d.len() as usize >= hdr_len + pkt.len();
    let ok = fits
        && mem.write_slice(&hdr[..hdr_len], d.addr()).is_ok()
        && mem
            .write_slice(pkt, GuestAddress(d.addr().0 + hdr_len as u64))
            .is_ok();
    let len = if ok { hdr_len + pkt.len() } else { 0 };
    q.add_used(mem, head, len as u32).unwrap();
    if ok {
        Moved::Packet(pkt.len())
    } else {
        Moved::Bad
    }
}

/// The legacy register block (§4.1.4.8) as an I/O BAR.
struct LegacyBar(Arc<Model>);

impl IoBar for LegacyBar {
    fn read8(&self, off: u64) -> Result<u8, HwError> {
        Ok(match off {
            18 => self.0.state.lock().status,
            19 => 0,
            20.. => self.0.config_byte(off as usize - 20),
            _ => 0xff,
        })
    }
    fn read16(&self, off: u64) -> Result<u16, HwError> {
        Ok(match off {
            12 => QUEUE_MAX,
            _ => 0xffff,
        })
    }
    fn read32(&self, off: u64) -> Result<u32, HwError> {
        let s = self.0.state.lock();
        Ok(match off {
            0 => s.offered as u32,
            4 => s.accepted as u32,
            _ => u32::MAX,
        })
    }
    fn write8(&self, off: u64, v: u8) -> Result<(), HwError> {
        if off == 18 {
            self.0.set_status(v);
        }
        Ok(())
    }
    fn write16(&self, off: u64, v: u16) -> Result<(), HwError> {
        match off {
            14 => self.0.state.lock().queue_select = v,
            16 => self.0.notify(v),
            _ => {}
        }
        Ok(())
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), HwError> {
        match off {
            4 => self.0.state.lock().accepted = v as u64,
            8 => self.0.legacy_queue_address(v),
            _ => {}
        }
        Ok(())
    }
}

/// Modern BAR 4: common configuration at 0, notifications at 0x1000
/// (multiplier 4), device configuration at 0x2000.
struct ModernBar(Arc<Model>);

const NOTIFY_BASE: u64 = 0x1000;
const DEVICE_BASE: u64 = 0x2000;

impl IoBar for ModernBar {
    fn read8(&self, off: u64) -> Result<u8, HwError> {
        Ok(match off {
            0x14 => self.0.state.lock().status,
            o if o >= DEVICE_BASE => self.0.config_byte((o - DEVICE_BASE) as usize),
            _ => 0,
        })
    }
    fn read16(&self, off: u64) -> Result<u16, HwError> {
        let s = self.0.state.lock();
        Ok(match off {
            0x12 => 2 * s.max_pairs + 1,
            0x16 => s.queue_select,
            0x18 if (s.queue_select as usize) < s.queues.len() => QUEUE_MAX,
            0x1e => s.queue_select, // queue_notify_off
            _ => 0,
        })
    }
    fn read32(&self, off: u64) -> Result<u32, HwError> {
        let s = self.0.state.lock();
        Ok(match off {
            0x04 => (s.offered >> (32 * s.device_feature_select.min(1))) as u32,
            _ => 0,
        })
    }
    fn write8(&self, off: u64, v: u8) -> Result<(), HwError> {
        if off == 0x14 {
            self.0.set_status(v);
        }
        Ok(())
    }
    fn write16(&self, off: u64, v: u16) -> Result<(), HwError> {
        if (NOTIFY_BASE..DEVICE_BASE).contains(&off) {
            assert_eq!(
                (off - NOTIFY_BASE) / 4,
                v as u64,
                "notify written at another queue's address"
            );
            self.0.notify(v);
            return Ok(());
        }
        let mut s = self.0.state.lock();
        match off {
            0x16 => s.queue_select = v,
            0x18 => s.pending_size = v,
            0x1c if v == 1 => {
                let (q, size, [d, a, u]) = (s.queue_select, s.pending_size, s.pending);
                self.0.make_queue(&mut s, q, size, d, a, u);
            }
            _ => {}
        }
        Ok(())
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), HwError> {
        let mut s = self.0.state.lock();
        match off {
            0x00 => s.device_feature_select = v,
            0x08 => s.driver_feature_select = v,
            0x0c => {
                let shift = 32 * s.driver_feature_select.min(1);
                s.accepted = (s.accepted & !(0xffff_ffffu64 << shift)) | (v as u64) << shift;
            }
            0x20..=0x37 => {
                let i = ((off - 0x20) / 8) as usize;
                let high = (off - 0x20) % 8 == 4;
                let cur = s.pending[i];
                s.pending[i] = if high {
                    (cur & 0xffff_ffff) | (v as u64) << 32
                } else {
                    (cur & !0xffff_ffff) | v as u64
                };
            }
            _ => {}
        }
        Ok(())
    }
}

/// A PCI function with a configuration space given as bytes, and BAR 4
/// mappable when a model sits behind it.
struct FakePci {
    cfg: Mutex<[u8; 256]>,
    bar4: Option<Arc<Model>>,
}

/// BAR 4 as a memory mapping: every access at its own width goes to the
/// model (which asserts widths by answering only the right one).
struct MappedModel(Arc<Model>);

const BAR4_LEN: usize = 0x4000;

impl Bar for MappedModel {
    fn read32(&self, off: usize) -> u32 {
        ModernBar(self.0.clone()).read32(off as u64).unwrap()
    }
    fn write32(&self, off: usize, v: u32) {
        ModernBar(self.0.clone()).write32(off as u64, v).unwrap()
    }
    fn len(&self) -> usize {
        BAR4_LEN
    }
    fn read16(&self, off: usize) -> u16 {
        ModernBar(self.0.clone()).read16(off as u64).unwrap()
    }
    fn write16(&self, off: usize, v: u16) {
        ModernBar(self.0.clone()).write16(off as u64, v).unwrap()
    }
    fn read8(&self, off: usize) -> u8 {
        ModernBar(self.0.clone()).read8(off as u64).unwrap()
    }
    fn write8(&self, off: usize, v: u8) {
        ModernBar(self.0.clone()).write8(off as u64, v).unwrap()
    }
}

impl PciFunction for FakePci {
    type Bar = MappedModel;
    fn address(&self) -> PciAddress {
        "0000:00:04.0".parse().unwrap()
    }
    fn config_read(&self, off: u16, buf: &mut [u8]) -> Result<(), HwError> {
        let cfg = self.cfg.lock();
        let o = off as usize;
        buf.copy_from_slice(
            cfg.get(o..o + buf.len())
                .ok_or(HwError::Invalid("past config space".into()))?,
        );
        Ok(())
    }
    fn config_write(&self, off: u16, bytes: &[u8]) -> Result<(), HwError> {
        let o = off as usize;
        self.cfg.lock()[o..o + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
    fn map_bar(&self, bar: u8) -> Result<MappedModel, HwError> {
        match (&self.bar4, bar) {
            (Some(m), 4) => Ok(MappedModel(m.clone())),
            _ => Err(HwError::Unsupported(format!("BAR {bar} cannot be mapped"))),
        }
    }
}

impl FakePci {
    /// A function with IDs `vendor:device` and, for a modern device, the
    /// §4.1.4 capabilities pointing into BAR 4.
    fn new(vendor: u16, device: u16, modern_caps: bool) -> Self {
        let mut c = [0u8; 256];
        c[0..2].copy_from_slice(&vendor.to_le_bytes());
        c[2..4].copy_from_slice(&device.to_le_bytes());
        if modern_caps {
            c[config::STATUS as usize] = config::STATUS_CAP_LIST as u8;
            c[config::CAP_PTR as usize] = 0x40;
            // (at, next, cfg_type, offset, length)
            let caps = [
                (0x40, 0x54, 1u8, 0u32, 0x38u32),
                (0x54, 0x68, 2, 0x1000, 0x1000),
                (0x68, 0, 4, 0x2000, 0x100),
            ];
            for (at, next, ty, offset, len) in caps {
                c[at] = config::CAP_ID_VENDOR;
                c[at + 1] = next;
                c[at + 2] = if ty == 2 { 20 } else { 16 };
                c[at + 3] = ty;
                c[at + 4] = 4; // BAR 4
                c[at + 8..at + 12].copy_from_slice(&offset.to_le_bytes());
                c[at + 12..at + 16].copy_from_slice(&len.to_le_bytes());
            }
            c[0x54 + 16..0x54 + 20].copy_from_slice(&4u32.to_le_bytes()); // notify_off_multiplier
        }
        FakePci {
            cfg: Mutex::new(c),
            bar4: None,
        }
    }
}

const LEGACY_OFFER: u64 = feature::NET_F_MAC
    | feature::NET_F_STATUS
    | feature::NET_F_CTRL_VQ
    | feature::NET_F_CTRL_RX
    | feature::F_ANY_LAYOUT
    | feature::F_EVENT_IDX;
const MODERN_OFFER: u64 =
    LEGACY_OFFER & !feature::F_ANY_LAYOUT | feature::F_VERSION_1 | feature::NET_F_MQ;

fn config(pairs: u16) -> NetConfig {
    NetConfig {
        queue_pairs: pairs,
        pool_size: 2048,
        timeout: Duration::from_millis(50),
        ..NetConfig::default()
    }
}

fn legacy(
    offer: u64,
    faults: Faults,
) -> (
    MemfdArena,
    Arc<Model>,
    Result<PciNet<LegacyTransport<LegacyBar>>, VirtioError>,
) {
    // Legacy queue addresses are 32-bit page numbers: below 16 TiB.
    let arena = MemfdArena::with_device_base("legacy-model", 16 << 20, 1 << 32).unwrap();
    let model = Model::new(&arena, offer, 1, faults);
    let t = LegacyTransport::new(LegacyBar(model.clone()));
    let net = PciNet::init(t, &arena, Arc::new(SystemClock::default()), &config(1));
    (arena, model, net)
}

type ModernNet = PciNet<ModernTransport<IoBars<ModernBar>>>;

fn modern(
    max_pairs: u16,
    pairs: u16,
    faults: Faults,
) -> (MemfdArena, Arc<Model>, Result<ModernNet, VirtioError>) {
    let arena = MemfdArena::new("modern-model", 32 << 20).unwrap();
    let model = Model::new(&arena, MODERN_OFFER, max_pairs, faults);
    let pci = FakePci::new(spec::PCI_VENDOR_ID, spec::PCI_DEVICE_ID_MODERN, true);
    nfkit_virtio::pci::check_device(&pci).unwrap();
    let bars = (0..6)
        .map(|i| (i == 4).then(|| ModernBar(model.clone())))
        .collect();
    let t = ModernTransport::open(&pci, IoBars::new(bars)).unwrap();
    let net = PciNet::init(t, &arena, Arc::new(SystemClock::default()), &config(pairs));
    (arena, model, net)
}

/// Send `n` distinct frames on queue `q`; they loop back; check them.
fn loopback(port: &mut dyn Port, q: usize, n: usize) {
    let frame = |i: usize| -> Vec<u8> { (0..60 + i).map(|j| (i + j * 7 + q) as u8).collect() };
    let mut batch = Batch::new();
    for i in 0..n {
        let mut b = port.pool().alloc().unwrap();
        b.copy_from(&frame(i)).unwrap();
        batch.push(b);
    }
    assert_eq!(port.tx_batch(q, &mut batch), n);
    let mut rx = Batch::new();
    assert_eq!(port.rx_batch(q, &mut rx), n);
    for (i, p) in rx.iter().enumerate() {
        assert_eq!(p.data(), &frame(i)[..], "frame {i} on queue {q}");
    }
}

#[test]
fn legacy_device_comes_up_and_loops_packets_back() {
    let (_arena, model, net) = legacy(LEGACY_OFFER, Faults::default());
    let mut net = net.unwrap();
    assert_eq!(net.mac(), MAC);
    assert_eq!(net.device().header_len(), spec::HDR_LEN_LEGACY);
    {
        let s = model.state.lock();
        assert_eq!(s.status & status::DRIVER_OK, status::DRIVER_OK);
        assert_eq!(
            s.status & status::FEATURES_OK,
            0,
            "legacy devices have no FEATURES_OK (§3.1.2)"
        );
        assert_eq!(s.promiscuous, Some(true));
    }
    // Several rounds: rings wrap, buffers are reclaimed and reposted.
    for _ in 0..20 {
        loopback(&mut net, 0, 64);
    }
    assert_eq!(net.stats().rx_packets, 1280);
    assert_eq!(net.stats().rx_errors + net.stats().tx_errors, 0);
    drop(net);
    assert_eq!(
        model.state.lock().status,
        0,
        "closing the port resets the device before freeing its rings"
    );
}

#[test]
fn modern_device_with_several_queue_pairs() {
    let (_arena, model, net) = modern(4, 2, Faults::default());
    let mut net = net.unwrap();
    assert_eq!(net.rx_queues(), 2);
    assert_eq!(net.device().header_len(), spec::HDR_LEN_MODERN);
    assert_eq!(
        model.state.lock().pairs_set,
        Some(2),
        "VQ_PAIRS_SET after DRIVER_OK (§5.1.6.5.5)"
    );
    for _ in 0..10 {
        loopback(&mut net, 0, 50);
        loopback(&mut net, 1, 30);
    }
    assert_eq!(net.queue_stats(0).rx_packets, 500);
    assert_eq!(net.queue_stats(1).rx_packets, 300);
    net.set_promiscuous(false).unwrap();
    assert_eq!(model.state.lock().promiscuous, Some(false));
}

#[test]
fn device_errors_are_typed() {
    let (_a, _m, net) = legacy(LEGACY_OFFER & !feature::F_ANY_LAYOUT, Faults::default());
    assert!(
        matches!(net, Err(VirtioError::MissingFeature { bit: 27, .. })),
        "{net:?}"
    );
    let hang = Faults {
        hang_on_reset: true,
        ..Faults::default()
    };
    let (_a, _m, net) = legacy(LEGACY_OFFER, hang);
    assert!(
        matches!(net, Err(VirtioError::Timeout { step: "reset", .. })),
        "{net:?}"
    );
    let refuse = Faults {
        refuse_features: true,
        ..Faults::default()
    };
    let (_a, model, net) = modern(1, 1, refuse);
    assert!(
        matches!(net, Err(VirtioError::FeaturesRefused { .. })),
        "{net:?}"
    );
    assert_eq!(model.state.lock().status, status::FAILED);

    let intel = FakePci::new(0x8086, 0x10fb, false);
    assert!(matches!(
        nfkit_virtio::pci::check_device(&intel),
        Err(VirtioError::NotVirtioNet { vendor: 0x8086, .. })
    ));
    let absent = FakePci::new(0xffff, 0xffff, false);
    assert!(matches!(
        nfkit_virtio::pci::check_device(&absent),
        Err(VirtioError::NoDevice { .. })
    ));
    let bare = FakePci::new(spec::PCI_VENDOR_ID, spec::PCI_DEVICE_ID_MODERN, false);
    let no_bars: IoBars<ModernBar> = IoBars::new(vec![]);
    assert!(matches!(
        ModernTransport::open(&bare, no_bars),
        Err(VirtioError::Capability(_))
    ));
}

#[test]
fn modern_device_through_mapped_bars_and_the_fallback() {
    let arena = MemfdArena::new("mapped-model", 32 << 20).unwrap();
    let model = Model::new(&arena, MODERN_OFFER, 2, Faults::default());
    let mut pci = FakePci::new(spec::PCI_VENDOR_ID, spec::PCI_DEVICE_ID_MODERN, true);
    pci.bar4 = Some(model.clone());
    let t: ModernTransport<MappedBars<FakePci>> = ModernTransport::over_mapped_bars(pci)
        .map_err(|(e, _)| e)
        .unwrap();
    let mut net = PciNet::init(t, &arena, Arc::new(SystemClock::default()), &config(2)).unwrap();
    assert_eq!(net.mac(), MAC);
    for _ in 0..5 {
        loopback(&mut net, 0, 40);
        loopback(&mut net, 1, 20);
    }
    assert_eq!(net.stats().rx_packets, 300);
    drop(net);
    assert_eq!(model.state.lock().status, 0, "reset on close");

    // A BAR that cannot be mapped hands the function back for the
    // configuration-space window.
    let pci = FakePci::new(spec::PCI_VENDOR_ID, spec::PCI_DEVICE_ID_MODERN, true);
    let (e, pci) = ModernTransport::over_mapped_bars(pci).err().unwrap();
    assert!(e.to_string().contains("BAR 4"), "{e}");
    assert_eq!(pci.address().to_string(), "0000:00:04.0");
    // A register structure past the end of its BAR is refused at open.
    let mut pci = FakePci::new(spec::PCI_VENDOR_ID, spec::PCI_DEVICE_ID_MODERN, true);
    pci.config_write(0x68 + 8, &0x3f80u32.to_le_bytes())
        .unwrap();
    pci.bar4 = Some(model);
    let (e, _) = ModernTransport::over_mapped_bars(pci).err().unwrap();
    assert!(matches!(e, VirtioError::Capability(_)), "{e}");
}

#[test]
fn buffers_of_other_pools_are_copied_into_the_devices_own() {
    let (_arena, _model, net) = modern(1, 1, Faults::default());
    let mut net = net.unwrap();
    // A software port's pool: addresses the device cannot reach.
    let dma = nfkit_hw::sim::SimDma::new();
    let other = nfkit_hw::Mempool::new(&*dma, "other", 64, 2048).unwrap();
    let frame: Vec<u8> = (0..100u8).collect();
    let mut batch = Batch::new();
    for _ in 0..8 {
        let mut b = other.alloc().unwrap();
        b.copy_from(&frame).unwrap();
        batch.push(b);
    }
    assert_eq!(net.tx_batch(0, &mut batch), 8);
    assert_eq!(other.free_count(), 64, "the originals went home");
    let mut rx = Batch::new();
    assert_eq!(net.rx_batch(0, &mut rx), 8);
    assert!(rx.iter().all(|p| p.data() == &frame[..]));
    assert_eq!(net.stats().tx_errors + net.stats().tx_dropped, 0);
}
