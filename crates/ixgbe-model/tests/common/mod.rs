//! A hand-written, datasheet-ordered register sequence (§4.6.3 init,
//! §4.6.7 RX, §4.6.8 TX) that the model's tests use as the "correct
//! driver", and helpers to build rings. Independent of crates/ixgbe.
#![allow(dead_code)]

use nfkit_hw::sim::{SimDma, VirtualClock};
use nfkit_hw::{poll_until, Bar, Clock, DmaAllocator, DmaRegion, PciFunction};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, SimBar};
use std::sync::Arc;
use std::time::Duration;

pub mod r {
    pub const CTRL: usize = 0x00000;
    pub const STATUS: usize = 0x00008;
    pub const EEC: usize = 0x10010;
    pub const FWSM: usize = 0x10148;
    pub const EICR: usize = 0x00800;
    pub const EIMS: usize = 0x00880;
    pub const EIMC: usize = 0x00888;
    pub const RDRXCTL: usize = 0x02F00;
    pub const RXCTRL: usize = 0x03000;
    pub const FCTRL: usize = 0x05080;
    pub const HLREG0: usize = 0x04240;
    pub const AUTOC: usize = 0x042A0;
    pub const LINKS: usize = 0x042A4;
    pub const DMATXCTL: usize = 0x04A80;
    pub const SECRXCTRL: usize = 0x08D00;
    pub const SECRXSTAT: usize = 0x08D04;
    pub const MRQC: usize = 0x0EC80;
    pub const GPRC: usize = 0x04074;
    pub const GPTC: usize = 0x04080;
    pub const GORCL: usize = 0x04088;
    pub const GORCH: usize = 0x0408C;
    pub const GOTCL: usize = 0x04090;
    pub const TPR: usize = 0x040D0;
    pub const TPT: usize = 0x040D4;
    pub const RUC: usize = 0x040A4;
    pub fn ral(n: usize) -> usize {
        0x0A200 + 8 * n
    }
    pub fn rah(n: usize) -> usize {
        0x0A204 + 8 * n
    }
    pub fn mpc(n: usize) -> usize {
        0x03FA0 + 4 * n
    }
    pub fn qprc(n: usize) -> usize {
        0x01030 + 0x40 * n
    }
    pub fn qprdc(n: usize) -> usize {
        0x01430 + 0x40 * n
    }
    pub fn qptc(n: usize) -> usize {
        0x08680 + 4 * n
    }
    pub fn rqsmr(n: usize) -> usize {
        0x02300 + 4 * n
    }
    pub fn reta(n: usize) -> usize {
        0x0EB00 + 4 * n
    }
    pub fn rssrk(n: usize) -> usize {
        0x0EB80 + 4 * n
    }
    fn rxq(n: usize, o: usize) -> usize {
        if n < 64 {
            0x01000 + 0x40 * n + o
        } else {
            0x0D000 + 0x40 * (n - 64) + o
        }
    }
    pub fn rdbal(n: usize) -> usize {
        rxq(n, 0)
    }
    pub fn rdbah(n: usize) -> usize {
        rxq(n, 4)
    }
    pub fn rdlen(n: usize) -> usize {
        rxq(n, 8)
    }
    pub fn rdh(n: usize) -> usize {
        rxq(n, 0x10)
    }
    pub fn srrctl(n: usize) -> usize {
        rxq(n, 0x14)
    }
    pub fn rdt(n: usize) -> usize {
        rxq(n, 0x18)
    }
    pub fn rxdctl(n: usize) -> usize {
        rxq(n, 0x28)
    }
    pub fn tdbal(n: usize) -> usize {
        0x06000 + 0x40 * n
    }
    pub fn tdbah(n: usize) -> usize {
        0x06004 + 0x40 * n
    }
    pub fn tdlen(n: usize) -> usize {
        0x06008 + 0x40 * n
    }
    pub fn tdh(n: usize) -> usize {
        0x06010 + 0x40 * n
    }
    pub fn tdt(n: usize) -> usize {
        0x06018 + 0x40 * n
    }
    pub fn txdctl(n: usize) -> usize {
        0x06028 + 0x40 * n
    }
    pub fn tdwbal(n: usize) -> usize {
        0x06038 + 0x40 * n
    }
    pub fn tdwbah(n: usize) -> usize {
        0x0603C + 0x40 * n
    }
}

pub const RST: u32 = 1 << 26;
pub const MASTER_DISABLE: u32 = 1 << 2;
pub const MASTER_ENABLE_STATUS: u32 = 1 << 19;
pub const AUTO_RD: u32 = 1 << 9;
pub const EE_PRES: u32 = 1 << 8;
pub const DMAIDONE: u32 = 1 << 3;
pub const CRCSTRIP: u32 = 1 << 1;
pub const ENABLE: u32 = 1 << 25;
pub const RXEN: u32 = 1;
pub const RX_DIS: u32 = 1 << 1;
pub const SECRX_RDY: u32 = 1;
pub const TE: u32 = 1;
pub const DROP_EN: u32 = 1 << 28;
pub const DESCTYPE_ADV: u32 = 1 << 25;
pub const UPE: u32 = 1 << 9;
pub const MPE: u32 = 1 << 8;
pub const BAM: u32 = 1 << 10;
pub const LINK_UP: u32 = 1 << 30;

pub const TIMEOUT: Duration = Duration::from_secs(1);

/// A lock-step test bench: one port, its BAR, DMA memory and clock.
pub struct Bench {
    pub nic: Nic82599,
    pub bar: SimBar,
    pub dma: Arc<SimDma>,
    pub clock: Arc<VirtualClock>,
}

impl Bench {
    pub fn new(cfg: ModelConfig) -> Bench {
        let dma = SimDma::new();
        Self::with_dma(cfg, dma)
    }

    pub fn with_dma(cfg: ModelConfig, dma: Arc<SimDma>) -> Bench {
        let nic = Nic82599::new(cfg, dma.clone());
        let clock = VirtualClock::new();
        nic.attach_clock(&clock);
        let bar = nic.pci().map_bar(0).unwrap();
        Bench {
            nic,
            bar,
            dma,
            clock,
        }
    }

    pub fn healthy() -> Bench {
        Self::new(ModelConfig::default())
    }

    pub fn rd(&self, off: usize) -> u32 {
        self.bar.read32(off)
    }
    pub fn wr(&self, off: usize, v: u32) {
        self.bar.write32(off, v)
    }
    pub fn set(&self, off: usize, bits: u32) {
        self.wr(off, self.rd(off) | bits)
    }
    pub fn clear(&self, off: usize, bits: u32) {
        self.wr(off, self.rd(off) & !bits)
    }
    pub fn sleep(&self, d: Duration) {
        self.clock.sleep(d)
    }
    pub fn wait(&self, off: usize, mask: u32, want: u32) -> bool {
        poll_until(&*self.clock, TIMEOUT, || self.rd(off) & mask == want)
    }

    pub fn violations(&self) -> Vec<String> {
        self.nic
            .violations()
            .iter()
            .map(|v| v.to_string())
            .collect()
    }

    pub fn assert_clean(&self) {
        let v = self.violations();
        assert!(v.is_empty(), "unexpected violations: {v:#?}");
    }

    /// Whether a violation citing `section` was recorded.
    pub fn flagged(&self, section: &str) -> bool {
        self.nic
            .violations()
            .iter()
            .any(|v| v.section.contains(section))
    }

    /// PCI: bus master + memory enable, INTx off (§9.3.3.3).
    pub fn pci_enable(&self) {
        let pci = self.nic.pci();
        let cmd = pci.config_read16(4).unwrap();
        pci.config_write16(4, cmd | 0x2 | 0x4 | 0x400).unwrap();
    }

    /// §4.6.3: master disable, global reset, wait, interrupts off, EEPROM
    /// auto-read and DMA init done.
    pub fn init(&self) {
        self.pci_enable();
        self.set(r::CTRL, MASTER_DISABLE);
        assert!(
            self.wait(r::STATUS, MASTER_ENABLE_STATUS, 0),
            "master disable"
        );
        self.wr(r::CTRL, RST);
        self.sleep(Duration::from_millis(1));
        self.sleep(Duration::from_millis(10));
        self.wr(r::EIMC, 0x7FFF_FFFF);
        assert!(self.wait(r::EEC, AUTO_RD, AUTO_RD), "EEPROM auto-read");
        assert_ne!(self.rd(r::EEC) & EE_PRES, 0);
        assert_eq!(self.rd(r::FWSM) & (0x3F << 19), 0);
        assert!(self.wait(r::RDRXCTL, DMAIDONE, DMAIDONE), "DMA init");
        self.set(r::RDRXCTL, CRCSTRIP);
    }

    /// §4.6.7 final steps: enable receive with the security block halted.
    pub fn enable_rx(&self) {
        self.set(r::SECRXCTRL, RX_DIS);
        assert!(self.wait(r::SECRXSTAT, SECRX_RDY, SECRX_RDY));
        self.set(r::RXCTRL, RXEN);
        self.clear(r::SECRXCTRL, RX_DIS);
    }

    pub fn wait_link(&self) {
        assert!(poll_until(&*self.clock, Duration::from_secs(10), || self
            .rd(r::LINKS)
            & LINK_UP
            != 0));
    }

    pub fn alloc(&self, size: usize) -> DmaRegion {
        self.dma.allocate(size, true).unwrap()
    }

    /// §4.6.7: an RX queue of `n` descriptors with 2 KB buffers.
    pub fn rx_queue(&self, q: usize, n: usize, srrctl_extra: u32) -> RxRing {
        let ring = self.alloc(n * 16);
        let bufs = self.alloc(n * 2048);
        for i in 0..n {
            ring.write_u64(i * 16, bufs.device_addr_at(i * 2048));
            ring.write_u64(i * 16 + 8, 0);
        }
        self.program_rx(q, &ring, n, srrctl_extra);
        RxRing {
            ring,
            bufs,
            n,
            next: 0,
            q,
        }
    }

    pub fn program_rx(&self, q: usize, ring: &DmaRegion, n: usize, srrctl_extra: u32) {
        let a = ring.device_addr();
        self.wr(r::rdbal(q), a as u32);
        self.wr(r::rdbah(q), (a >> 32) as u32);
        self.wr(r::rdlen(q), (n * 16) as u32);
        self.wr(r::srrctl(q), 2 | srrctl_extra);
        self.set(r::rxdctl(q), ENABLE);
        assert!(
            self.wait(r::rxdctl(q), ENABLE, ENABLE),
            "RXDCTL[{q}].ENABLE"
        );
        self.wr(r::rdt(q), (n - 1) as u32);
    }

    /// §4.6.8: a TX queue of `n` descriptors, optionally with head write-back.
    pub fn tx_queue(&self, q: usize, n: usize, head_wb: bool) -> TxRing {
        let ring = self.alloc(n * 16);
        let bufs = self.alloc(n * 2048);
        let head = self.alloc(64);
        let a = ring.device_addr();
        self.wr(r::tdbal(q), a as u32);
        self.wr(r::tdbah(q), (a >> 32) as u32);
        self.wr(r::tdlen(q), (n * 16) as u32);
        if head_wb {
            let h = head.device_addr();
            self.wr(r::tdwbah(q), (h >> 32) as u32);
            self.wr(r::tdwbal(q), h as u32 | 1);
        }
        self.set(r::DMATXCTL, TE);
        self.set(r::txdctl(q), ENABLE);
        assert!(
            self.wait(r::txdctl(q), ENABLE, ENABLE),
            "TXDCTL[{q}].ENABLE"
        );
        TxRing {
            ring,
            bufs,
            head,
            n,
            tail: 0,
            q,
        }
    }
}

pub struct RxRing {
    pub ring: DmaRegion,
    pub bufs: DmaRegion,
    pub n: usize,
    pub next: usize,
    pub q: usize,
}

impl RxRing {
    pub fn qword1(&self, i: usize) -> u64 {
        self.ring.read_u64(i * 16 + 8)
    }
    pub fn qword0(&self, i: usize) -> u64 {
        self.ring.read_u64(i * 16)
    }
    /// Legacy write-back: (length, DD, EOP, errors byte).
    pub fn legacy(&self, i: usize) -> (usize, bool, bool, u8) {
        let w = self.qword1(i);
        (
            (w & 0xFFFF) as usize,
            w >> 32 & 1 == 1,
            w >> 33 & 1 == 1,
            (w >> 40) as u8,
        )
    }
    /// Advanced write-back: (length, DD, EOP, RXE, rss type, rss hash).
    pub fn advanced(&self, i: usize) -> (usize, bool, bool, bool, u8, u32) {
        let hi = self.qword1(i);
        let lo = self.qword0(i);
        (
            (hi >> 32 & 0xFFFF) as usize,
            hi & 1 == 1,
            hi >> 1 & 1 == 1,
            hi >> 29 & 1 == 1,
            (lo & 0xF) as u8,
            (lo >> 32) as u32,
        )
    }
    pub fn data(&self, i: usize, len: usize) -> Vec<u8> {
        self.bufs.slice(i * 2048, len).unwrap().to_vec()
    }
}

pub struct TxRing {
    pub ring: DmaRegion,
    pub bufs: DmaRegion,
    pub head: DmaRegion,
    pub n: usize,
    pub tail: usize,
    pub q: usize,
}

pub const EOP: u64 = 1 << 24;
pub const IFCS: u64 = 1 << 25;
pub const RS: u64 = 1 << 27;
pub const DEXT: u64 = 1 << 29;
pub const DTYP_DATA: u64 = 0b0011 << 20;
pub const DTYP_CTX: u64 = 0b0010 << 20;
pub const DD: u64 = 1 << 32;

impl TxRing {
    /// Put `frame` in the next buffer and descriptor with `cmd` bits
    /// (legacy unless `cmd` has DEXT); returns the descriptor index.
    pub fn push(&mut self, frame: &[u8], cmd: u64) -> usize {
        let i = self.tail;
        self.bufs
            .slice_mut(i * 2048, frame.len())
            .unwrap()
            .copy_from_slice(frame);
        self.ring
            .write_u64(i * 16, self.bufs.device_addr_at(i * 2048));
        let mut q1 = frame.len() as u64 | cmd;
        if cmd & DEXT != 0 {
            q1 |= (frame.len() as u64) << 46;
        }
        self.ring.write_u64(i * 16 + 8, q1);
        self.tail = (self.tail + 1) % self.n;
        i
    }
    pub fn qword1(&self, i: usize) -> u64 {
        self.ring.read_u64(i * 16 + 8)
    }
    pub fn head_wb(&self) -> u32 {
        self.head.read_u32(0)
    }
    pub fn bump(&self, bench: &Bench) {
        bench.wr(r::tdt(self.q), self.tail as u32);
    }
}

/// A UDP/IPv4 frame (without CRC) to `dst` from 10.0.0.1:sport to 10.0.0.2:5000.
pub fn udp_frame(dst: [u8; 6], len: usize, sport: u16) -> Vec<u8> {
    let mut g = nfkit_ixgbe_model::TrafficGen::udp_flows(dst, 1, len);
    let mut f = g.next_frame().to_vec();
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f
}

pub const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
