//! The 82599 register table (datasheet rev 3.3, §8.2.3), as declarative
//! data: name, byte offset, instance count and stride, reset value, access
//! kind and section. The model's behaviour lives elsewhere
//! (`device.rs`); this file only says *where* registers are and what they
//! are when the device comes out of reset.
//!
//! Queue registers come in two halves (§8.2.2, "register summary"): RX
//! queues 0-63 at 0x01000 + 0x40·n and 64-127 at 0x0D000 + 0x40·(n-64);
//! TX queues at 0x06000 + 0x40·n for all 128. SRRCTL and DCA_RXCTRL of
//! queues 0-15 also answer at legacy alias addresses (0x02100, 0x02200).

/// How a register reacts to reads and writes (Snabb-style RW/RO/RC...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read/write.
    Rw,
    /// Read-only: a write is a strict-mode violation and is ignored.
    Ro,
    /// Read-only statistics, cleared when read (§8.2.3.23).
    Rc,
    /// Read; writing 1 to a bit clears it (interrupt cause, §8.2.3.5.1).
    W1c,
    /// Write-only (set/clear strobes such as EIMC, EICS); reads as 0.
    Wo,
    /// Read/write with self-clearing bits (CTRL.RST, AUTOC.RESTART_AN).
    RwSc,
}

/// What the model does when the register is accessed. Most registers are
/// `Plain` storage; the others have the side effects in `device.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    Plain,
    Ctrl,
    Status,
    Eec,
    Fwsm,
    /// An interrupt register (§8.2.3.5), handled by `irq.rs`.
    Irq,
    Autoc,
    Links,
    Rxctrl,
    Fctrl,
    Rdrxctl,
    Secrxctrl,
    Secrxstat,
    Dmatxctl,
    Rdbal,
    Rdbah,
    Rdlen,
    Rdh,
    Rdt,
    Rxdctl,
    Srrctl,
    Tdbal,
    Tdbah,
    Tdlen,
    Tdh,
    Tdt,
    Txdctl,
    Tdwbal,
    Tdwbah,
    /// A statistics register (RC); high halves carry the upper bits.
    Stat,
}

/// One row of the register table.
#[derive(Debug, Clone, Copy)]
pub struct RegDef {
    pub name: &'static str,
    pub offset: u32,
    /// Number of instances (1 for a scalar register).
    pub count: u32,
    /// Bytes between instances.
    pub stride: u32,
    /// Index of the first instance in this row (64 for the upper halves of
    /// the RX queue registers).
    pub first: u32,
    pub reset: u32,
    pub access: Access,
    pub id: Id,
    pub section: &'static str,
    /// For alias rows: the name of the row holding the storage.
    pub alias_of: Option<&'static str>,
}

const fn r(
    name: &'static str,
    offset: u32,
    reset: u32,
    access: Access,
    id: Id,
    section: &'static str,
) -> RegDef {
    RegDef {
        name,
        offset,
        count: 1,
        stride: 4,
        first: 0,
        reset,
        access,
        id,
        section,
        alias_of: None,
    }
}

// one argument per table column, so rows read like the datasheet's table
#[allow(clippy::too_many_arguments)]
const fn arr(
    name: &'static str,
    offset: u32,
    count: u32,
    stride: u32,
    reset: u32,
    access: Access,
    id: Id,
    section: &'static str,
) -> RegDef {
    RegDef {
        name,
        offset,
        count,
        stride,
        first: 0,
        reset,
        access,
        id,
        section,
        alias_of: None,
    }
}

/// RX queue register `name` at `off` within the queue block: two rows, one
/// per half of the 128 queues.
const fn rxq(
    name: &'static str,
    off: u32,
    reset: u32,
    access: Access,
    id: Id,
    section: &'static str,
) -> [RegDef; 2] {
    let mut lo = arr(name, 0x01000 + off, 64, 0x40, reset, access, id, section);
    let mut hi = arr(name, 0x0D000 + off, 64, 0x40, reset, access, id, section);
    lo.first = 0;
    hi.first = 64;
    [lo, hi]
}

const fn alias(def: RegDef, of: &'static str) -> RegDef {
    let mut d = def;
    d.alias_of = Some(of);
    d
}

/// EITR 24-127 live at a second base (§8.2.3.5.12).
const fn eitr_high() -> RegDef {
    let mut d = arr(
        "EITR",
        0x12300,
        104,
        4,
        0,
        Access::Rw,
        Id::Irq,
        "8.2.3.5.12",
    );
    d.first = 24;
    d
}

use Access::*;

/// Power-on/reset value of RXPBSIZE(0): 512 KB in bits 19:10 (§8.2.3.8.9).
pub const RXPBSIZE0_RESET: u32 = 0x200 << 10;
/// Reset value of TXPBSIZE(0): 160 KB in bits 19:10 (§8.2.3.9.13).
pub const TXPBSIZE0_RESET: u32 = 0xA0 << 10;

/// Scalar registers.
#[rustfmt::skip]
pub const SCALARS: &[RegDef] = &[
    // General control (§8.2.3.1)
    r("CTRL", 0x00000, 0, RwSc, Id::Ctrl, "8.2.3.1.1"),
    r("STATUS", 0x00008, 0, Ro, Id::Status, "8.2.3.1.2"),
    r("CTRL_EXT", 0x00018, 0, Rw, Id::Plain, "8.2.3.1.3"),
    r("ESDP", 0x00020, 0, Rw, Id::Plain, "8.2.3.1.4"),
    r("LEDCTL", 0x00200, 0, Rw, Id::Plain, "8.2.3.1.6"),
    // EEPROM / flash (§8.2.3.2)
    r("EEC", 0x10010, 0, Rw, Id::Eec, "8.2.3.2.1"),
    r("EERD", 0x10014, 0, Rw, Id::Plain, "8.2.3.2.2"),
    r("FWSM", 0x10148, 0, Ro, Id::Fwsm, "8.2.3.4.10"),
    r("GCR_EXT", 0x11050, 0, Rw, Id::Plain, "8.2.3.4.12"),
    // Interrupts (§8.2.3.5): storage and side effects in irq.rs
    r("EICR", 0x00800, 0, W1c, Id::Irq, "8.2.3.5.1"),
    r("EICS", 0x00808, 0, Wo, Id::Irq, "8.2.3.5.2"),
    r("EIAC", 0x00810, 0, Rw, Id::Irq, "8.2.3.5.5"),
    r("EIMS", 0x00880, 0, Rw, Id::Irq, "8.2.3.5.3"),
    r("EIMC", 0x00888, 0, Wo, Id::Irq, "8.2.3.5.4"),
    r("EIAM", 0x00890, 0, Rw, Id::Irq, "8.2.3.5.6"),
    r("GPIE", 0x00898, 0, Rw, Id::Irq, "8.2.3.5.11"),
    r("IVAR_MISC", 0x00A00, 0, Rw, Id::Irq, "8.2.3.5.14"),
    // Receive (§8.2.3.8, §8.2.3.7)
    r("RDRXCTL", 0x02F00, 0x0000_0880, Rw, Id::Rdrxctl, "8.2.3.8.8"),
    r("RXCTRL", 0x03000, 0, Rw, Id::Rxctrl, "8.2.3.8.10"),
    r("RXCSUM", 0x05000, 0, Rw, Id::Plain, "8.2.3.7.5"),
    r("RFCTL", 0x05008, 0, Rw, Id::Plain, "8.2.3.7.6"),
    r("FCTRL", 0x05080, 0, Rw, Id::Fctrl, "8.2.3.7.1"),
    r("VLNCTRL", 0x05088, 0x0000_8100, Rw, Id::Plain, "8.2.3.7.2"),
    r("MCSTCTRL", 0x05090, 0, Rw, Id::Plain, "8.2.3.7.3"),
    r("MRQC", 0x0EC80, 0, Rw, Id::Plain, "8.2.3.7.12"),
    r("RQTC", 0x0EC70, 0, Rw, Id::Plain, "8.2.3.7.13"),
    r("PFVTCTL", 0x051B0, 0, Rw, Id::Plain, "8.2.3.27.1"),
    // MAC (§8.2.3.22)
    r("HLREG0", 0x04240, 0x0100_2403, Rw, Id::Plain, "8.2.3.22.8"),
    r("MAXFRS", 0x04268, 0x05EE_0000, Rw, Id::Plain, "8.2.3.22.13"),
    r("MFLCN", 0x04294, 0x0000_0002, Rw, Id::Plain, "8.2.3.22.34"),
    r("AUTOC", 0x042A0, 0x0000_6000, RwSc, Id::Autoc, "8.2.3.22.19"),
    r("LINKS", 0x042A4, 0, Ro, Id::Links, "8.2.3.22.20"),
    r("AUTOC2", 0x042A8, 0, Rw, Id::Plain, "8.2.3.22.21"),
    // Flow control (§8.2.3.3)
    r("FCRTV", 0x032A0, 0, Rw, Id::Plain, "8.2.3.3.5"),
    r("FCCFG", 0x03D00, 0, Rw, Id::Plain, "8.2.3.3.7"),
    // DCB (§8.2.3.10)
    r("RTRPCS", 0x02430, 0, Rw, Id::Plain, "8.2.3.10.1"),
    r("RTTDCS", 0x04900, 0, Rw, Id::Plain, "8.2.3.10.2"),
    r("RTTDQSEL", 0x04904, 0, Rw, Id::Plain, "8.2.3.10.13"),
    r("RTTDT1C", 0x04908, 0, Rw, Id::Plain, "8.2.3.10.14"),
    r("RTTPCS", 0x0CD00, 0, Rw, Id::Plain, "8.2.3.10.3"),
    // Transmit (§8.2.3.9)
    r("DMATXCTL", 0x04A80, 0, Rw, Id::Dmatxctl, "8.2.3.9.2"),
    r("DTXMXSZRQ", 0x08100, 0x0000_0010, Rw, Id::Plain, "8.2.3.9.1"),
    r("MTQC", 0x08120, 0, Rw, Id::Plain, "8.2.3.9.15"),
    // Security (§8.2.3.12)
    r("SECTXCTRL", 0x08800, 0, Rw, Id::Plain, "8.2.3.12.1"),
    r("SECRXCTRL", 0x08D00, 0, Rw, Id::Secrxctrl, "8.2.3.12.5"),
    r("SECRXSTAT", 0x08D04, 0, Ro, Id::Secrxstat, "8.2.3.12.6"),
    // Statistics (§8.2.3.23): all clear-on-read
    r("CRCERRS", 0x04000, 0, Rc, Id::Stat, "8.2.3.23.1"),
    r("ILLERRC", 0x04004, 0, Rc, Id::Stat, "8.2.3.23.2"),
    r("ERRBC", 0x04008, 0, Rc, Id::Stat, "8.2.3.23.3"),
    r("MLFC", 0x04034, 0, Rc, Id::Stat, "8.2.3.23.5"),
    r("MRFC", 0x04038, 0, Rc, Id::Stat, "8.2.3.23.6"),
    r("RLEC", 0x04040, 0, Rc, Id::Stat, "8.2.3.23.7"),
    r("PRC64", 0x0405C, 0, Rc, Id::Stat, "8.2.3.23.17"),
    r("PRC127", 0x04060, 0, Rc, Id::Stat, "8.2.3.23.18"),
    r("PRC255", 0x04064, 0, Rc, Id::Stat, "8.2.3.23.19"),
    r("PRC511", 0x04068, 0, Rc, Id::Stat, "8.2.3.23.20"),
    r("PRC1023", 0x0406C, 0, Rc, Id::Stat, "8.2.3.23.21"),
    r("PRC1522", 0x04070, 0, Rc, Id::Stat, "8.2.3.23.22"),
    r("GPRC", 0x04074, 0, Rc, Id::Stat, "8.2.3.23.24"),
    r("BPRC", 0x04078, 0, Rc, Id::Stat, "8.2.3.23.25"),
    r("MPRC", 0x0407C, 0, Rc, Id::Stat, "8.2.3.23.26"),
    r("GPTC", 0x04080, 0, Rc, Id::Stat, "8.2.3.23.27"),
    r("GORCL", 0x04088, 0, Rc, Id::Stat, "8.2.3.23.28"),
    r("GORCH", 0x0408C, 0, Rc, Id::Stat, "8.2.3.23.28"),
    r("GOTCL", 0x04090, 0, Rc, Id::Stat, "8.2.3.23.29"),
    r("GOTCH", 0x04094, 0, Rc, Id::Stat, "8.2.3.23.29"),
    r("RUC", 0x040A4, 0, Rc, Id::Stat, "8.2.3.23.30"),
    r("RFC", 0x040A8, 0, Rc, Id::Stat, "8.2.3.23.31"),
    r("ROC", 0x040AC, 0, Rc, Id::Stat, "8.2.3.23.32"),
    r("RJC", 0x040B0, 0, Rc, Id::Stat, "8.2.3.23.33"),
    r("TORL", 0x040C0, 0, Rc, Id::Stat, "8.2.3.23.37"),
    r("TORH", 0x040C4, 0, Rc, Id::Stat, "8.2.3.23.37"),
    r("TPR", 0x040D0, 0, Rc, Id::Stat, "8.2.3.23.38"),
    r("TPT", 0x040D4, 0, Rc, Id::Stat, "8.2.3.23.39"),
    r("PTC64", 0x040D8, 0, Rc, Id::Stat, "8.2.3.23.40"),
    r("PTC127", 0x040DC, 0, Rc, Id::Stat, "8.2.3.23.41"),
    r("PTC255", 0x040E0, 0, Rc, Id::Stat, "8.2.3.23.42"),
    r("PTC511", 0x040E4, 0, Rc, Id::Stat, "8.2.3.23.43"),
    r("PTC1023", 0x040E8, 0, Rc, Id::Stat, "8.2.3.23.44"),
    r("PTC1522", 0x040EC, 0, Rc, Id::Stat, "8.2.3.23.45"),
    r("MPTC", 0x040F0, 0, Rc, Id::Stat, "8.2.3.23.46"),
    r("BPTC", 0x040F4, 0, Rc, Id::Stat, "8.2.3.23.47"),
];

/// Register arrays (not per queue).
#[rustfmt::skip]
pub const ARRAYS: &[RegDef] = &[
    arr("EITR", 0x00820, 24, 4, 0, Rw, Id::Irq, "8.2.3.5.12"),
    eitr_high(),
    arr("IVAR", 0x00900, 64, 4, 0, Rw, Id::Irq, "8.2.3.5.13"),
    arr("EICS_EX", 0x00A90, 2, 4, 0, Wo, Id::Irq, "8.2.3.5.7"),
    arr("EIMS_EX", 0x00AA0, 2, 4, 0, Rw, Id::Irq, "8.2.3.5.8"),
    arr("EIMC_EX", 0x00AB0, 2, 4, 0, Wo, Id::Irq, "8.2.3.5.9"),
    arr("EIAM_EX", 0x00AD0, 2, 4, 0, Rw, Id::Irq, "8.2.3.5.10"),
    // Flow control
    arr("FCTTV", 0x03200, 4, 4, 0, Rw, Id::Plain, "8.2.3.3.3"),
    arr("FCRTL", 0x03220, 8, 4, 0, Rw, Id::Plain, "8.2.3.3.4"),
    arr("FCRTH", 0x03260, 8, 4, 0, Rw, Id::Plain, "8.2.3.3.4"),
    // Packet buffers and DCB
    arr("RXPBSIZE", 0x03C00, 8, 4, 0, Rw, Id::Plain, "8.2.3.8.9"),
    arr("TXPBSIZE", 0x0CC00, 8, 4, 0, Rw, Id::Plain, "8.2.3.9.13"),
    arr("TXPBTHRESH", 0x04950, 8, 4, 0, Rw, Id::Plain, "8.2.3.9.16"),
    arr("RTTDT2C", 0x04910, 8, 4, 0, Rw, Id::Plain, "8.2.3.10.9"),
    arr("RTTPT2C", 0x0CD20, 8, 4, 0, Rw, Id::Plain, "8.2.3.10.10"),
    arr("RTRPT4C", 0x02140, 8, 4, 0, Rw, Id::Plain, "8.2.3.10.4"),
    // Queue-to-statistics mapping (§8.2.3.8.15, §8.2.3.9.14)
    arr("RQSMR", 0x02300, 32, 4, 0, Rw, Id::Plain, "8.2.3.8.15"),
    arr("TQSM", 0x08600, 32, 4, 0, Rw, Id::Plain, "8.2.3.9.14"),
    // Receive filters (§8.2.3.7)
    arr("MTA", 0x05200, 128, 4, 0, Rw, Id::Plain, "8.2.3.7.7"),
    arr("ETQF", 0x05128, 8, 4, 0, Rw, Id::Plain, "8.2.3.7.18"),
    arr("VFTA", 0x0A000, 128, 4, 0, Rw, Id::Plain, "8.2.3.7.9"),
    arr("RAL", 0x0A200, 128, 8, 0, Rw, Id::Plain, "8.2.3.7.8"),
    arr("RAH", 0x0A204, 128, 8, 0, Rw, Id::Plain, "8.2.3.7.9"),
    arr("MPSAR", 0x0A600, 256, 4, 0, Rw, Id::Plain, "8.2.3.7.10"),
    arr("FTQF", 0x0E600, 128, 4, 0, Rw, Id::Plain, "8.2.3.7.19"),
    arr("ETQS", 0x0EC00, 8, 4, 0, Rw, Id::Plain, "8.2.3.7.20"),
    arr("RETA", 0x0EB00, 32, 4, 0, Rw, Id::Plain, "8.2.3.7.15"),
    arr("RSSRK", 0x0EB80, 10, 4, 0, Rw, Id::Plain, "8.2.3.7.16"),
    arr("ERETA", 0x0EE80, 96, 4, 0, Rw, Id::Plain, "8.2.3.7.17"),
    arr("PFVLVF", 0x0F100, 64, 4, 0, Rw, Id::Plain, "8.2.3.27.15"),
    arr("PFVLVFB", 0x0F200, 128, 4, 0, Rw, Id::Plain, "8.2.3.27.16"),
    arr("PFUTA", 0x0F400, 128, 4, 0, Rw, Id::Plain, "8.2.3.27.17"),
    // Statistics arrays
    arr("MPC", 0x03FA0, 8, 4, 0, Rc, Id::Stat, "8.2.3.23.4"),
    arr("RNBC", 0x03FC0, 8, 4, 0, Rc, Id::Stat, "8.2.3.23.36"),
    arr("QPRC", 0x01030, 16, 0x40, 0, Rc, Id::Stat, "8.2.3.23.71"),
    arr("QBRC_L", 0x01034, 16, 0x40, 0, Rc, Id::Stat, "8.2.3.23.73"),
    arr("QBRC_H", 0x01038, 16, 0x40, 0, Rc, Id::Stat, "8.2.3.23.74"),
    arr("QPRDC", 0x01430, 16, 0x40, 0, Rc, Id::Stat, "8.2.3.23.72"),
    arr("QPTC", 0x08680, 16, 4, 0, Rc, Id::Stat, "8.2.3.23.75"),
    arr("QBTC_L", 0x08700, 16, 8, 0, Rc, Id::Stat, "8.2.3.23.76"),
    arr("QBTC_H", 0x08704, 16, 8, 0, Rc, Id::Stat, "8.2.3.23.77"),
];

/// Per-queue receive registers (§8.2.3.8), two rows each.
#[rustfmt::skip]
pub const RX_QUEUES: &[[RegDef; 2]] = &[
    rxq("RDBAL", 0x00, 0, Rw, Id::Rdbal, "8.2.3.8.1"),
    rxq("RDBAH", 0x04, 0, Rw, Id::Rdbah, "8.2.3.8.2"),
    rxq("RDLEN", 0x08, 0, Rw, Id::Rdlen, "8.2.3.8.3"),
    rxq("DCA_RXCTRL", 0x0C, 0x0000_1000, Rw, Id::Plain, "8.2.3.11.1"),
    rxq("RDH", 0x10, 0, Rw, Id::Rdh, "8.2.3.8.4"),
    rxq("SRRCTL", 0x14, 0x0000_0402, Rw, Id::Srrctl, "8.2.3.8.7"),
    rxq("RDT", 0x18, 0, Rw, Id::Rdt, "8.2.3.8.5"),
    rxq("RXDCTL", 0x28, 0, Rw, Id::Rxdctl, "8.2.3.8.6"),
];

/// Legacy alias addresses for RX queues 0-15 (§8.2.2).
#[rustfmt::skip]
pub const RX_ALIASES: &[RegDef] = &[
    alias(arr("SRRCTL", 0x02100, 16, 4, 0x0000_0402, Rw, Id::Srrctl, "8.2.3.8.7"), "SRRCTL"),
    alias(arr("DCA_RXCTRL", 0x02200, 16, 4, 0x0000_1000, Rw, Id::Plain, "8.2.3.11.1"), "DCA_RXCTRL"),
];

/// Per-queue transmit registers (§8.2.3.9), 128 instances.
#[rustfmt::skip]
pub const TX_QUEUES: &[RegDef] = &[
    arr("TDBAL", 0x06000, 128, 0x40, 0, Rw, Id::Tdbal, "8.2.3.9.5"),
    arr("TDBAH", 0x06004, 128, 0x40, 0, Rw, Id::Tdbah, "8.2.3.9.6"),
    arr("TDLEN", 0x06008, 128, 0x40, 0, Rw, Id::Tdlen, "8.2.3.9.7"),
    arr("DCA_TXCTRL", 0x0600C, 128, 0x40, 0x0000_2000, Rw, Id::Plain, "8.2.3.11.2"),
    arr("TDH", 0x06010, 128, 0x40, 0, Rw, Id::Tdh, "8.2.3.9.8"),
    arr("TDT", 0x06018, 128, 0x40, 0, Rw, Id::Tdt, "8.2.3.9.9"),
    arr("TXDCTL", 0x06028, 128, 0x40, 0, Rw, Id::Txdctl, "8.2.3.9.10"),
    arr("TDWBAL", 0x06038, 128, 0x40, 0, Rw, Id::Tdwbal, "8.2.3.9.11"),
    arr("TDWBAH", 0x0603C, 128, 0x40, 0, Rw, Id::Tdwbah, "8.2.3.9.11"),
];

/// Every row of the table, in one iterator.
pub fn all() -> impl Iterator<Item = &'static RegDef> {
    SCALARS
        .iter()
        .chain(ARRAYS.iter())
        .chain(RX_QUEUES.iter().flat_map(|pair| pair.iter()))
        .chain(RX_ALIASES.iter())
        .chain(TX_QUEUES.iter())
}

/// Byte offsets of registers the model's own code touches, computed from
/// the same formulas as the table (with the RX halves).
pub mod off {
    pub const CTRL: usize = 0x00000;
    pub const STATUS: usize = 0x00008;
    pub const EEC: usize = 0x10010;
    pub const FWSM: usize = 0x10148;
    pub const EICR: usize = 0x00800;
    pub const EIMS: usize = 0x00880;
    pub const RDRXCTL: usize = 0x02F00;
    pub const RXCTRL: usize = 0x03000;
    pub const FCTRL: usize = 0x05080;
    pub const MRQC: usize = 0x0EC80;
    pub const MCSTCTRL: usize = 0x05090;
    pub const MAXFRS: usize = 0x04268;
    pub const HLREG0: usize = 0x04240;
    pub const AUTOC: usize = 0x042A0;
    pub const LINKS: usize = 0x042A4;
    pub const DMATXCTL: usize = 0x04A80;
    pub const SECRXCTRL: usize = 0x08D00;
    pub const SECRXSTAT: usize = 0x08D04;
    pub const RXPBSIZE0: usize = 0x03C00;
    pub const TXPBSIZE0: usize = 0x0CC00;
    pub const TXPBTHRESH0: usize = 0x04950;

    pub fn ral(n: usize) -> usize {
        0x0A200 + 8 * n
    }
    pub fn rah(n: usize) -> usize {
        0x0A204 + 8 * n
    }
    pub fn mta(n: usize) -> usize {
        0x05200 + 4 * n
    }
    pub fn reta(n: usize) -> usize {
        0x0EB00 + 4 * n
    }
    pub fn rssrk(n: usize) -> usize {
        0x0EB80 + 4 * n
    }
    pub fn rqsmr(n: usize) -> usize {
        0x02300 + 4 * n
    }
    pub fn tqsm(n: usize) -> usize {
        0x08600 + 4 * n
    }

    fn rxq(n: usize, off: usize) -> usize {
        if n < 64 {
            0x01000 + 0x40 * n + off
        } else {
            0x0D000 + 0x40 * (n - 64) + off
        }
    }
    pub fn rdbal(n: usize) -> usize {
        rxq(n, 0x00)
    }
    pub fn rdbah(n: usize) -> usize {
        rxq(n, 0x04)
    }
    pub fn rdlen(n: usize) -> usize {
        rxq(n, 0x08)
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

    fn txq(n: usize, off: usize) -> usize {
        0x06000 + 0x40 * n + off
    }
    pub fn tdbal(n: usize) -> usize {
        txq(n, 0x00)
    }
    pub fn tdbah(n: usize) -> usize {
        txq(n, 0x04)
    }
    pub fn tdlen(n: usize) -> usize {
        txq(n, 0x08)
    }
    pub fn tdh(n: usize) -> usize {
        txq(n, 0x10)
    }
    pub fn tdt(n: usize) -> usize {
        txq(n, 0x18)
    }
    pub fn txdctl(n: usize) -> usize {
        txq(n, 0x28)
    }
    pub fn tdwbal(n: usize) -> usize {
        txq(n, 0x38)
    }
    pub fn tdwbah(n: usize) -> usize {
        txq(n, 0x3C)
    }

    // statistics
    pub const CRCERRS: usize = 0x04000;
    pub const GPRC: usize = 0x04074;
    pub const BPRC: usize = 0x04078;
    pub const MPRC: usize = 0x0407C;
    pub const GPTC: usize = 0x04080;
    pub const GORCL: usize = 0x04088;
    pub const GOTCL: usize = 0x04090;
    pub const TORL: usize = 0x040C0;
    pub const RUC: usize = 0x040A4;
    pub const ROC: usize = 0x040AC;
    pub const PRC64: usize = 0x0405C;
    pub const PTC64: usize = 0x040D8;
    pub const TPR: usize = 0x040D0;
    pub const TPT: usize = 0x040D4;
    pub const MPTC: usize = 0x040F0;
    pub const BPTC: usize = 0x040F4;
    pub fn mpc(n: usize) -> usize {
        0x03FA0 + 4 * n
    }
    pub fn rnbc(n: usize) -> usize {
        0x03FC0 + 4 * n
    }
    pub fn qprc(n: usize) -> usize {
        0x01030 + 0x40 * n
    }
    pub fn qbrc_l(n: usize) -> usize {
        0x01034 + 0x40 * n
    }
    pub fn qprdc(n: usize) -> usize {
        0x01430 + 0x40 * n
    }
    pub fn qptc(n: usize) -> usize {
        0x08680 + 4 * n
    }
    pub fn qbtc_l(n: usize) -> usize {
        0x08700 + 8 * n
    }
}

/// Bit fields, named as in the datasheet.
pub mod bits {
    // CTRL (§8.2.3.1.1)
    pub const CTRL_MASTER_DISABLE: u32 = 1 << 2;
    pub const CTRL_LRST: u32 = 1 << 3;
    pub const CTRL_RST: u32 = 1 << 26;
    // STATUS (§8.2.3.1.2)
    pub const STATUS_PCIE_MASTER_ENABLE: u32 = 1 << 19;
    // EEC (§8.2.3.2.1)
    pub const EEC_EE_PRES: u32 = 1 << 8;
    pub const EEC_AUTO_RD: u32 = 1 << 9;
    // FWSM (§8.2.3.4.10): EXT_ERR_IND, bits 24:19
    pub const FWSM_EXT_ERR_IND_SHIFT: u32 = 19;
    pub const FWSM_EXT_ERR_IND_MASK: u32 = 0x3F << 19;
    /// EXT_ERR_IND code for "EEPROM checksum error" (any non-zero is an error).
    pub const FWSM_EXT_ERR_EEPROM_CHECKSUM: u32 = 0x01;
    // RDRXCTL (§8.2.3.8.8)
    pub const RDRXCTL_CRCSTRIP: u32 = 1 << 1;
    pub const RDRXCTL_DMAIDONE: u32 = 1 << 3;
    // RXCTRL (§8.2.3.8.10)
    pub const RXCTRL_RXEN: u32 = 1 << 0;
    // FCTRL (§8.2.3.7.1)
    pub const FCTRL_SBP: u32 = 1 << 1;
    pub const FCTRL_MPE: u32 = 1 << 8;
    pub const FCTRL_UPE: u32 = 1 << 9;
    pub const FCTRL_BAM: u32 = 1 << 10;
    // HLREG0 (§8.2.3.22.8)
    pub const HLREG0_TXCRCEN: u32 = 1 << 0;
    pub const HLREG0_RXCRCSTRP: u32 = 1 << 1;
    pub const HLREG0_JUMBOEN: u32 = 1 << 2;
    pub const HLREG0_TXPADEN: u32 = 1 << 10;
    pub const HLREG0_LPBK: u32 = 1 << 15;
    // AUTOC (§8.2.3.22.19)
    pub const AUTOC_RESTART_AN: u32 = 1 << 12;
    // LINKS (§8.2.3.22.20)
    pub const LINKS_LINK_UP: u32 = 1 << 30;
    pub const LINKS_SPEED_SHIFT: u32 = 28;
    pub const LINKS_SPEED_10G: u32 = 0b11 << 28;
    // SRRCTL (§8.2.3.8.7)
    pub const SRRCTL_BSIZEPACKET_MASK: u32 = 0x1F;
    pub const SRRCTL_DESCTYPE_SHIFT: u32 = 25;
    pub const SRRCTL_DESCTYPE_MASK: u32 = 0b111 << 25;
    pub const SRRCTL_DESCTYPE_LEGACY: u32 = 0b000;
    pub const SRRCTL_DESCTYPE_ADV_ONEBUF: u32 = 0b001;
    pub const SRRCTL_DROP_EN: u32 = 1 << 28;
    // RXDCTL / TXDCTL (§8.2.3.8.6, §8.2.3.9.10)
    pub const DCTL_ENABLE: u32 = 1 << 25;
    // TDWBAL (§8.2.3.9.11)
    pub const TDWBAL_HEAD_WB_EN: u32 = 1 << 0;
    // DMATXCTL (§8.2.3.9.2)
    pub const DMATXCTL_TE: u32 = 1 << 0;
    // SECRXCTRL / SECRXSTAT (§8.2.3.12.5-6)
    pub const SECRXCTRL_RX_DIS: u32 = 1 << 1;
    pub const SECRXSTAT_SECRX_RDY: u32 = 1 << 0;
    // RAH (§8.2.3.7.9)
    pub const RAH_AV: u32 = 1 << 31;
    // MRQC (§8.2.3.7.12)
    pub const MRQC_MRQE_MASK: u32 = 0xF;
    pub const MRQC_MRQE_RSS: u32 = 0x1;
    pub const MRQC_TCPIPV4: u32 = 1 << 16;
    pub const MRQC_IPV4: u32 = 1 << 17;
    pub const MRQC_IPV6: u32 = 1 << 20;
    pub const MRQC_TCPIPV6: u32 = 1 << 21;
    pub const MRQC_UDPIPV4: u32 = 1 << 22;
    pub const MRQC_UDPIPV6: u32 = 1 << 23;
}
