//! The 82599 register table (datasheet rev 3.3, chapter 8.2.3), as data.
//!
//! Each entry names the register, the section that defines it, its base
//! offset in BAR0 and how its instances are laid out. Per-queue receive
//! registers come in two halves: queues 0-63 sit at the low base, queues
//! 64-127 at a second base, both with a 0x40 stride (§8.2.3.8). Field
//! masks live in a module named after the register.
//!
//! The driver only ever reaches a register through this table and the
//! [`Regs`] accessor, so an offset is written down exactly once.

use nfkit_hw::Bar;
use std::sync::Arc;

/// How the instances of a register are laid out in BAR0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A single register.
    One,
    /// `count` registers, `stride` bytes apart.
    Array { count: usize, stride: usize },
    /// One register per receive queue (128): queues 0-63 at the base,
    /// queues 64-127 at `high_base`, 0x40 apart in both halves.
    RxQueues { high_base: usize },
    /// `count` registers, 4 bytes apart: the first `low` at the base, the
    /// rest from `high_base` (EITR, §8.2.3.5.12).
    Split {
        count: usize,
        low: usize,
        high_base: usize,
    },
}

/// One register (or register array) of the 82599.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg {
    pub name: &'static str,
    /// Datasheet section that defines it.
    pub section: &'static str,
    pub base: usize,
    pub layout: Layout,
}

/// Stride of per-queue registers.
pub const QUEUE_STRIDE: usize = 0x40;
/// Receive and transmit queues of one port (§1.3 feature summary).
pub const QUEUES: usize = 128;

impl Reg {
    const fn one(name: &'static str, section: &'static str, base: usize) -> Reg {
        Reg {
            name,
            section,
            base,
            layout: Layout::One,
        }
    }
    const fn array(
        name: &'static str,
        section: &'static str,
        base: usize,
        count: usize,
        stride: usize,
    ) -> Reg {
        Reg {
            name,
            section,
            base,
            layout: Layout::Array { count, stride },
        }
    }
    const fn rx_queue(
        name: &'static str,
        section: &'static str,
        base: usize,
        high_base: usize,
    ) -> Reg {
        Reg {
            name,
            section,
            base,
            layout: Layout::RxQueues { high_base },
        }
    }
    const fn tx_queue(name: &'static str, section: &'static str, base: usize) -> Reg {
        Reg::array(name, section, base, QUEUES, QUEUE_STRIDE)
    }

    /// Number of instances.
    pub const fn count(&self) -> usize {
        match self.layout {
            Layout::One => 1,
            Layout::Array { count, .. } => count,
            Layout::RxQueues { .. } => QUEUES,
            Layout::Split { count, .. } => count,
        }
    }

    /// Byte offset of instance `i` (0 for single registers). Callers
    /// validate `i` (queue indices are checked when a queue is created);
    /// an out-of-range index yields an offset past BAR0, which reads as
    /// all-ones and ignores writes (see `nfkit_hw::Bar`).
    pub const fn at(&self, i: usize) -> usize {
        if i >= self.count() {
            return usize::MAX & !3;
        }
        match self.layout {
            Layout::One => self.base,
            Layout::Array { stride, .. } => self.base + i * stride,
            Layout::Split { low, high_base, .. } => {
                if i < low {
                    self.base + i * 4
                } else {
                    high_base + (i - low) * 4
                }
            }
            Layout::RxQueues { high_base } => {
                if i < 64 {
                    self.base + i * QUEUE_STRIDE
                } else {
                    high_base + (i - 64) * QUEUE_STRIDE
                }
            }
        }
    }
}

// ---------------------------------------------------------------- general
pub const CTRL: Reg = Reg::one("CTRL", "8.2.3.1.1", 0x00000);
pub mod ctrl {
    pub const MASTER_DISABLE: u32 = 1 << 2;
    /// Link reset (§8.2.3.1.1); part of the "device reset" mask.
    pub const LRST: u32 = 1 << 3;
    pub const RST: u32 = 1 << 26;
}
pub const STATUS: Reg = Reg::one("STATUS", "8.2.3.1.2", 0x00008);
pub mod status {
    pub const PCIE_MASTER_ENABLE_STATUS: u32 = 1 << 19;
}
pub const CTRL_EXT: Reg = Reg::one("CTRL_EXT", "8.2.3.1.3", 0x00018);
pub mod ctrl_ext {
    /// No-snoop disable.
    pub const NS_DIS: u32 = 1 << 16;
}
pub const EEC: Reg = Reg::one("EEC", "8.2.3.2.1", 0x10010);
pub mod eec {
    pub const EE_PRES: u32 = 1 << 8;
    pub const AUTO_RD: u32 = 1 << 9;
}
pub const FWSM: Reg = Reg::one("FWSM", "8.2.3.4.10", 0x10148);
pub mod fwsm {
    /// External error indication, bits 24:19 (non-zero: EEPROM checksum
    /// or other firmware-detected error).
    pub const EXT_ERR_IND: u32 = 0x3F << 19;
}
pub const GCR_EXT: Reg = Reg::one("GCR_EXT", "8.2.3.4.12", 0x11050);
pub mod gcr_ext {
    pub const BUFFERS_CLEAR_FUNC: u32 = 1 << 30;
}

// ------------------------------------------------------------- interrupts
// §7.3.1: in MSI-X mode EICR/EICS/EIMS/EIMC/EIAC/EIAM bits 15:0 are MSI-X
// vectors 0-15 and bits 30:16 the "other" causes (LSC...); the _EX pairs
// hold one bit per vector 0-63 (EX(0): 0-31, EX(1): 32-63).
/// Interrupt cause: clear on read, write 1 to clear.
pub const EICR: Reg = Reg::one("EICR", "8.2.3.5.1", 0x00800);
pub mod eicr {
    /// Queue (vector) causes, bits 15:0.
    pub const RTXQ: u32 = 0xFFFF;
    /// Link status change.
    pub const LSC: u32 = 1 << 20;
}
pub const EICS: Reg = Reg::one("EICS", "8.2.3.5.2", 0x00808);
pub const EIAC: Reg = Reg::one("EIAC", "8.2.3.5.5", 0x00810);
/// Interrupt throttling, one per vector: 0-23 at 0x00820, 24-127 at 0x12300.
pub const EITR: Reg = Reg {
    name: "EITR",
    section: "8.2.3.5.12",
    base: 0x00820,
    layout: Layout::Split {
        count: 128,
        low: 24,
        high_base: 0x12300,
    },
};
pub mod eitr {
    /// Minimum interval between two messages, bits 11:3, in 2 µs units
    /// at 1 and 10 Gb/s.
    pub const INTERVAL_MASK: u32 = 0x1FF << 3;
    pub const INTERVAL_UNIT_NS: u64 = 2_000;
    /// Write the interval without resetting the running counter.
    pub const CNT_WDIS: u32 = 1 << 31;
    /// The field for `interval`, rounded down to the unit and capped.
    pub fn interval(interval: std::time::Duration) -> u32 {
        let units = (interval.as_nanos() / u128::from(INTERVAL_UNIT_NS)).min(0x1FF) as u32;
        units << 3
    }
}
pub const EIMS: Reg = Reg::one("EIMS", "8.2.3.5.3", 0x00880);
/// Interrupt mask clear: EIMC at 0x00888 and EIMC_EX(0..1) at
/// 0x00AB0/0x00AB4 (§7.3.1: three sets of interrupt registers).
pub const EIMC: Reg = Reg::one("EIMC", "8.2.3.5.4", 0x00888);
pub mod eimc {
    /// Bit 31 of EIMC(0) is reserved.
    pub const ALL_0: u32 = 0x7FFF_FFFF;
    pub const ALL_EX: u32 = 0xFFFF_FFFF;
}
pub const EIAM: Reg = Reg::one("EIAM", "8.2.3.5.6", 0x00890);
pub const GPIE: Reg = Reg::one("GPIE", "8.2.3.5.11", 0x00898);
pub mod gpie {
    /// Multiple MSI-X mode: one vector per cause group (IVAR).
    pub const MULTIPLE_MSIX: u32 = 1 << 4;
    /// Auto-mask enable (EIAM).
    pub const EIAME: u32 = 1 << 30;
    /// MSI-X pending bits in the PBA table, not in EICR.
    pub const PBA_SUPPORT: u32 = 1 << 31;
}
/// Queue cause to vector: IVAR(n) maps queues 2n and 2n+1.
pub const IVAR: Reg = Reg::array("IVAR", "8.2.3.5.13", 0x00900, 64, 4);
pub mod ivar {
    pub const VALID: u32 = 0x80;
    pub const VECTOR_MASK: u32 = 0x3F;
    /// Bit position of queue `q`'s entry in IVAR(q / 2): RX of the even
    /// queue at 7:0, its TX at 15:8, RX of the odd one at 23:16, TX 31:24.
    pub const fn shift(q: usize, tx: bool) -> u32 {
        16 * (q as u32 & 1) + if tx { 8 } else { 0 }
    }
}
pub const EICS_EX: Reg = Reg::array("EICS_EX", "8.2.3.5.7", 0x00A90, 2, 4);
pub const EIMS_EX: Reg = Reg::array("EIMS_EX", "8.2.3.5.8", 0x00AA0, 2, 4);
pub const EIMC_EX: Reg = Reg::array("EIMC_EX", "8.2.3.5.9", 0x00AB0, 2, 4);
pub const EIAM_EX: Reg = Reg::array("EIAM_EX", "8.2.3.5.10", 0x00AD0, 2, 4);
/// Vectors of the causes that are not queues: bits 15:8 the "other"
/// causes (LSC...), an entry as in IVAR.
pub const IVAR_MISC: Reg = Reg::one("IVAR_MISC", "8.2.3.5.14", 0x00A00);
pub mod ivar_misc {
    pub const OTHER_SHIFT: u32 = 8;
}

// ------------------------------------------------------------ flow control
pub const FCCFG: Reg = Reg::one("FCCFG", "8.2.3.3.7", 0x03D00);
pub mod fccfg {
    /// Transmit flow control enable, bits 4:3; 01b = link flow control.
    pub const TFCE_MASK: u32 = 0b11 << 3;
    pub const TFCE_802_3X: u32 = 0b01 << 3;
}
pub const FCRTH: Reg = Reg::array("FCRTH", "8.2.3.3.4", 0x03260, 8, 4);
pub mod fcrth {
    /// Receive threshold high, bits 18:5, in 32-byte units.
    pub const RTH_MASK: u32 = 0x3FFF << 5;
}
pub const MFLCN: Reg = Reg::one("MFLCN", "8.2.3.22.34", 0x04294);
pub mod mflcn {
    pub const RFCE: u32 = 1 << 3;
}

// ----------------------------------------------------------------- receive
pub const RDBAL: Reg = Reg::rx_queue("RDBAL", "8.2.3.8.1", 0x01000, 0x0D000);
pub const RDBAH: Reg = Reg::rx_queue("RDBAH", "8.2.3.8.2", 0x01004, 0x0D004);
pub const RDLEN: Reg = Reg::rx_queue("RDLEN", "8.2.3.8.3", 0x01008, 0x0D008);
pub const DCA_RXCTRL: Reg = Reg::rx_queue("DCA_RXCTRL", "8.2.3.11.1", 0x0100C, 0x0D00C);
pub mod dca_rxctrl {
    /// Reserved bit 12: defaults to 1 and must be written 0.
    pub const RESERVED_12: u32 = 1 << 12;
}
pub const RDH: Reg = Reg::rx_queue("RDH", "8.2.3.8.4", 0x01010, 0x0D010);
pub const SRRCTL: Reg = Reg::rx_queue("SRRCTL", "8.2.3.8.7", 0x01014, 0x0D014);
pub mod srrctl {
    /// Packet buffer size in KiB, bits 4:0.
    pub const BSIZEPACKET_MASK: u32 = 0x1F;
    /// Descriptor type, bits 27:25: 000b legacy, 001b advanced one buffer.
    pub const DESCTYPE_MASK: u32 = 0b111 << 25;
    pub const DESCTYPE_LEGACY: u32 = 0b000 << 25;
    pub const DESCTYPE_ADV_ONEBUF: u32 = 0b001 << 25;
    /// Drop packets when the queue has no free descriptor.
    pub const DROP_EN: u32 = 1 << 28;
}
pub const RDT: Reg = Reg::rx_queue("RDT", "8.2.3.8.5", 0x01018, 0x0D018);
pub const RXDCTL: Reg = Reg::rx_queue("RXDCTL", "8.2.3.8.6", 0x01028, 0x0D028);
pub mod rxdctl {
    pub const ENABLE: u32 = 1 << 25;
}
pub const RDRXCTL: Reg = Reg::one("RDRXCTL", "8.2.3.8.8", 0x02F00);
pub mod rdrxctl {
    pub const CRC_STRIP: u32 = 1 << 1;
    pub const DMAIDONE: u32 = 1 << 3;
    pub const RSCFRSTSIZE_MASK: u32 = 0x1F << 17;
    pub const RSCACKC: u32 = 1 << 25;
    pub const FCOE_WRFIX: u32 = 1 << 26;
}
pub const RXCTRL: Reg = Reg::one("RXCTRL", "8.2.3.8.10", 0x03000);
pub mod rxctrl {
    pub const RXEN: u32 = 1 << 0;
}
pub const RXPBSIZE: Reg = Reg::array("RXPBSIZE", "8.2.3.8.9", 0x03C00, 8, 4);
pub const HLREG0: Reg = Reg::one("HLREG0", "8.2.3.22.8", 0x04240);
/// MAXFRS.MFS (31:16): the largest frame received with JUMBOEN, CRC included.
pub const MAXFRS: Reg = Reg::one("MAXFRS", "8.2.3.22.13", 0x04268);
pub mod hlreg0 {
    pub const TXCRCEN: u32 = 1 << 0;
    pub const RXCRCSTRP: u32 = 1 << 1;
    pub const JUMBOEN: u32 = 1 << 2;
    pub const TXPADEN: u32 = 1 << 10;
    pub const LPBK: u32 = 1 << 15;
}
pub const LINKS: Reg = Reg::one("LINKS", "8.2.3.22.20", 0x042A4);
pub mod links {
    /// Link speed, bits 29:28: 01b 100 Mb/s, 10b 1 Gb/s, 11b 10 Gb/s.
    pub const SPEED_SHIFT: u32 = 28;
    pub const SPEED_MASK: u32 = 0b11 << 28;
    pub const LINK_UP: u32 = 1 << 30;
}
pub const SECRXCTRL: Reg = Reg::one("SECRXCTRL", "8.2.3.12.5", 0x08D00);
pub mod secrxctrl {
    pub const RX_DIS: u32 = 1 << 1;
}
pub const SECRXSTAT: Reg = Reg::one("SECRXSTAT", "8.2.3.12.6", 0x08D04);
pub mod secrxstat {
    pub const SECRX_RDY: u32 = 1 << 0;
}

// --------------------------------------------------------- receive filters
pub const FCTRL: Reg = Reg::one("FCTRL", "8.2.3.7.1", 0x05080);
pub mod fctrl {
    /// Multicast promiscuous.
    pub const MPE: u32 = 1 << 8;
    /// Unicast promiscuous.
    pub const UPE: u32 = 1 << 9;
    /// Broadcast accept mode.
    pub const BAM: u32 = 1 << 10;
}
pub const MTA: Reg = Reg::array("MTA", "8.2.3.7.7", 0x05200, 128, 4);
pub const RAL: Reg = Reg::array("RAL", "8.2.3.7.8", 0x0A200, 128, 8);
pub const RAH: Reg = Reg::array("RAH", "8.2.3.7.9", 0x0A204, 128, 8);
pub mod rah {
    /// Address valid.
    pub const AV: u32 = 1 << 31;
}
pub const MPSAR: Reg = Reg::array("MPSAR", "8.2.3.7.10", 0x0A600, 256, 4);
pub const MRQC: Reg = Reg::one("MRQC", "8.2.3.7.12", 0x0EC80);
pub mod mrqc {
    /// Multiple receive queues enable, bits 3:0: 0001b = RSS only.
    pub const MRQE_RSS: u32 = 0b0001;
    pub const RSS_FIELD_IPV4_TCP: u32 = 1 << 16;
    pub const RSS_FIELD_IPV4: u32 = 1 << 17;
    pub const RSS_FIELD_IPV6: u32 = 1 << 20;
    pub const RSS_FIELD_IPV6_TCP: u32 = 1 << 21;
    pub const RSS_FIELD_IPV4_UDP: u32 = 1 << 22;
    pub const RSS_FIELD_IPV6_UDP: u32 = 1 << 23;
}
pub const RETA: Reg = Reg::array("RETA", "8.2.3.7.15", 0x0EB00, 32, 4);
pub const RSSRK: Reg = Reg::array("RSSRK", "8.2.3.7.16", 0x0EB80, 10, 4);
pub const FTQF: Reg = Reg::array("FTQF", "8.2.3.7.19", 0x0E600, 128, 4);
pub mod ftqf {
    pub const QUEUE_ENABLE: u32 = 1 << 31;
}
pub const PFVLVF: Reg = Reg::array("PFVLVF", "8.2.3.27.15", 0x0F100, 64, 4);
pub const PFVLVFB: Reg = Reg::array("PFVLVFB", "8.2.3.27.16", 0x0F200, 128, 4);
pub const PFUTA: Reg = Reg::array("PFUTA", "8.2.3.27.17", 0x0F400, 128, 4);

// ---------------------------------------------------------------- transmit
pub const TDBAL: Reg = Reg::tx_queue("TDBAL", "8.2.3.9.5", 0x06000);
pub const TDBAH: Reg = Reg::tx_queue("TDBAH", "8.2.3.9.6", 0x06004);
pub const TDLEN: Reg = Reg::tx_queue("TDLEN", "8.2.3.9.7", 0x06008);
pub const DCA_TXCTRL: Reg = Reg::tx_queue("DCA_TXCTRL", "8.2.3.11.2", 0x0600C);
pub mod dca_txctrl {
    /// Relaxed ordering of descriptor write-back: off, so a written-back
    /// head can never be seen to go backwards.
    pub const TX_DESC_WB_RO_EN: u32 = 1 << 11;
}
pub const TDH: Reg = Reg::tx_queue("TDH", "8.2.3.9.8", 0x06010);
pub const TDT: Reg = Reg::tx_queue("TDT", "8.2.3.9.9", 0x06018);
pub const TXDCTL: Reg = Reg::tx_queue("TXDCTL", "8.2.3.9.10", 0x06028);
pub mod txdctl {
    pub const PTHRESH_SHIFT: u32 = 0;
    pub const HTHRESH_SHIFT: u32 = 8;
    pub const WTHRESH_SHIFT: u32 = 16;
    pub const ENABLE: u32 = 1 << 25;
}
pub const TDWBAL: Reg = Reg::tx_queue("TDWBAL", "8.2.3.9.11", 0x06038);
pub const TDWBAH: Reg = Reg::tx_queue("TDWBAH", "8.2.3.9.11", 0x0603C);
pub mod tdwbal {
    /// Head write-back enable (bit 0 of the address register).
    pub const HEAD_WB_EN: u32 = 1 << 0;
}
pub const DMATXCTL: Reg = Reg::one("DMATXCTL", "8.2.3.9.2", 0x04A80);
pub mod dmatxctl {
    pub const TE: u32 = 1 << 0;
}
pub const DTXMXSZRQ: Reg = Reg::one("DTXMXSZRQ", "8.2.3.9.1", 0x08100);
pub mod dtxmxszrq {
    pub const MAX_BYTES_NUM_REQ_MASK: u32 = 0xFFF;
}
pub const TXPBSIZE: Reg = Reg::array("TXPBSIZE", "8.2.3.9.13", 0x0CC00, 8, 4);
pub const TXPBTHRESH: Reg = Reg::array("TXPBTHRESH", "8.2.3.9.16", 0x04950, 8, 4);
pub mod txpbthresh {
    pub const THRESH_MASK: u32 = 0x3FF;
}
pub const RTTDCS: Reg = Reg::one("RTTDCS", "8.2.3.10.2", 0x04900);
pub mod rttdcs {
    pub const ARBDIS: u32 = 1 << 6;
}
pub const RTTDQSEL: Reg = Reg::one("RTTDQSEL", "8.2.3.10.13", 0x04904);
pub const RTTDT1C: Reg = Reg::one("RTTDT1C", "8.2.3.10.14", 0x04908);

// -------------------------------------------------------------- statistics
// All clear on read (§8.2.3.23); the driver accumulates them in software.
pub const CRCERRS: Reg = Reg::one("CRCERRS", "8.2.3.23.1", 0x04000);
pub const RLEC: Reg = Reg::one("RLEC", "8.2.3.23.7", 0x04040);
/// Receive Oversize Count: frames longer than the largest frame
/// (1518, or MAXFRS.MFS with HLREG0.JUMBOEN), dropped by the MAC.
pub const ROC: Reg = Reg::one("ROC", "8.2.3.23.32", 0x040AC);
pub const MPC: Reg = Reg::array("MPC", "8.2.3.23.4", 0x03FA0, 8, 4);
pub const GPRC: Reg = Reg::one("GPRC", "8.2.3.23.24", 0x04074);
pub const GPTC: Reg = Reg::one("GPTC", "8.2.3.23.27", 0x04080);
pub const GORCL: Reg = Reg::one("GORCL", "8.2.3.23.28", 0x04088);
pub const GORCH: Reg = Reg::one("GORCH", "8.2.3.23.28", 0x0408C);
pub const GOTCL: Reg = Reg::one("GOTCL", "8.2.3.23.29", 0x04090);
pub const GOTCH: Reg = Reg::one("GOTCH", "8.2.3.23.29", 0x04094);
/// Queue-to-statistics mapping: four queues per register, one byte each
/// holding the index (0-15) of the counter set the queue counts in.
pub const RQSMR: Reg = Reg::array("RQSMR", "8.2.3.8.15", 0x02300, 32, 4);
pub const TQSM: Reg = Reg::array("TQSM", "8.2.3.9.14", 0x08600, 32, 4);
/// Counter sets of per-queue statistics.
pub const QUEUE_STAT_SETS: usize = 16;
pub const QPRC: Reg = Reg::array("QPRC", "8.2.3.23.71", 0x01030, 16, QUEUE_STRIDE);
pub const QPRDC: Reg = Reg::array("QPRDC", "8.2.3.23.72", 0x01430, 16, QUEUE_STRIDE);
pub const QPTC: Reg = Reg::array("QPTC", "8.2.3.23.75", 0x08680, 16, 4);

/// Typed access to BAR0 through the table above.
#[derive(Debug)]
pub struct Regs<B> {
    bar: Arc<B>,
}

impl<B> Clone for Regs<B> {
    fn clone(&self) -> Self {
        Regs {
            bar: self.bar.clone(),
        }
    }
}

impl<B: Bar> Regs<B> {
    pub fn new(bar: Arc<B>) -> Self {
        Regs { bar }
    }
    #[inline(always)]
    pub fn read(&self, reg: &Reg, i: usize) -> u32 {
        self.bar.read32(reg.at(i))
    }
    #[inline(always)]
    pub fn write(&self, reg: &Reg, i: usize, value: u32) {
        self.bar.write32(reg.at(i), value)
    }
    /// Read-modify-write: set the bits of `mask`.
    pub fn set(&self, reg: &Reg, i: usize, mask: u32) {
        self.write(reg, i, self.read(reg, i) | mask)
    }
    /// Read-modify-write: clear the bits of `mask`.
    pub fn clear(&self, reg: &Reg, i: usize, mask: u32) {
        self.write(reg, i, self.read(reg, i) & !mask)
    }
    /// Read-modify-write: replace the bits of `mask` with `value`
    /// (already shifted into place).
    pub fn set_field(&self, reg: &Reg, i: usize, mask: u32, value: u32) {
        self.write(reg, i, (self.read(reg, i) & !mask) | (value & mask))
    }
    pub fn is_set(&self, reg: &Reg, i: usize, mask: u32) -> bool {
        self.read(reg, i) & mask == mask
    }
    pub fn is_clear(&self, reg: &Reg, i: usize, mask: u32) -> bool {
        self.read(reg, i) & mask == 0
    }
    /// Byte offset of a register instance, for data-path handles that
    /// keep the offset of their tail register.
    pub fn bar(&self) -> &Arc<B> {
        &self.bar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_registers_have_two_halves() {
        assert_eq!(RDBAL.at(0), 0x01000);
        assert_eq!(RDBAL.at(63), 0x01000 + 63 * 0x40);
        assert_eq!(RDBAL.at(64), 0x0D000);
        assert_eq!(RXDCTL.at(127), 0x0D028 + 63 * 0x40);
        assert_eq!(RDT.at(65), 0x0D058);
        assert_eq!(TDT.at(127), 0x06018 + 127 * 0x40);
        assert_eq!(TDWBAH.at(1), 0x0607C);
    }

    #[test]
    fn arrays_and_bounds() {
        assert_eq!(RAH.at(0), 0x0A204);
        assert_eq!(RAL.at(1), 0x0A208);
        assert_eq!(MPSAR.at(255), 0x0A600 + 255 * 4);
        assert_eq!(RETA.count(), 32);
        assert_eq!(CTRL.at(0), 0);
        // out-of-range instances land outside any BAR
        assert!(CTRL.at(1) > 0x20000);
        assert!(RDT.at(128) > 0x20000);
        assert!(QPRC.at(16) > 0x20000);
        assert_eq!(EITR.at(23), 0x0087C);
        assert_eq!(EITR.at(24), 0x12300);
        assert_eq!(EITR.at(127), 0x12300 + 103 * 4);
        assert!(EITR.at(128) > 0x20000);
        assert_eq!(IVAR.at(63), 0x009FC);
        assert_eq!(ivar::shift(3, true), 24);
        assert_eq!(
            eitr::interval(std::time::Duration::from_micros(50)),
            25 << 3
        );
        assert_eq!(
            eitr::interval(std::time::Duration::from_secs(1)),
            0x1FF << 3
        );
    }

    #[test]
    fn no_two_registers_share_an_offset() {
        let all = [
            CTRL, STATUS, CTRL_EXT, EEC, FWSM, GCR_EXT, EICR, EICS, EIAC, EITR, EIMS, EIMC, EIAM,
            GPIE, IVAR, EICS_EX, EIMS_EX, EIMC_EX, EIAM_EX, IVAR_MISC, FCCFG, FCRTH, MFLCN, RDBAL,
            RDBAH, RDLEN, DCA_RXCTRL, RDH, SRRCTL, RDT, RXDCTL, RDRXCTL, RXCTRL, RXPBSIZE, HLREG0,
            MAXFRS, LINKS, SECRXCTRL, SECRXSTAT, FCTRL, MTA, RAL, RAH, MPSAR, MRQC, RETA, RSSRK,
            FTQF, PFVLVF, PFVLVFB, PFUTA, TDBAL, TDBAH, TDLEN, DCA_TXCTRL, TDH, TDT, TXDCTL,
            TDWBAL, TDWBAH, DMATXCTL, DTXMXSZRQ, TXPBSIZE, TXPBTHRESH, RTTDCS, RTTDQSEL, RTTDT1C,
            RQSMR, TQSM, CRCERRS, RLEC, ROC, MPC, GPRC, GPTC, GORCL, GORCH, GOTCL, GOTCH, QPRC,
            QPRDC, QPTC,
        ];
        let mut seen = std::collections::HashMap::new();
        for r in all {
            for i in 0..r.count() {
                let off = r.at(i);
                assert!(off < 0x20000 && off.is_multiple_of(4), "{} {i}", r.name);
                if let Some(other) = seen.insert(off, (r.name, i)) {
                    panic!(
                        "{}[{i}] and {}[{}] share offset {off:#x}",
                        r.name, other.0, other.1
                    );
                }
            }
        }
    }
}
