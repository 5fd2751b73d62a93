//! Descriptor formats (§7.1.5 receive, §7.2.3.2 transmit) and the
//! descriptor ring memory they live in.
//!
//! Descriptors are 16 bytes: two little-endian quadwords. The driver
//! touches them only through the atomic accessors of
//! [`nfkit_hw::dma::DescRing`].

use crate::error::InitError;
use nfkit_hw::DmaAllocator;

pub use nfkit_hw::dma::{DescRing, DESC_BYTES};

/// Legacy receive descriptor, write-back quadword 1 (§7.1.5.1).
pub mod legacy_rx {
    pub const LENGTH_MASK: u64 = 0xFFFF;
    pub const DD: u64 = 1 << 32;
    pub const EOP: u64 = 1 << 33;
    /// Errors byte (bits 47:40): RXE/CE (bit 0), LE (1), PE (3), OSE (4),
    /// USE (5) are frame errors. Bits 6-7 (TCPE/IPE) are checksum
    /// results for a well-formed frame and do not drop it.
    pub const FRAME_ERRORS: u64 = 0b0011_1011 << 40;
}

/// Legacy transmit descriptor, quadword 1 (§7.2.3.2.2).
pub mod legacy_tx {
    // Length is bits 15:0; 0 makes a null descriptor that sends nothing.
    pub const CMD_EOP: u64 = 1 << 24;
    pub const CMD_IFCS: u64 = 1 << 25;
    pub const CMD_RS: u64 = 1 << 27;
}

/// Advanced receive descriptor (§7.1.6): read format is packet address /
/// header address; write-back quadword 1 holds status, errors, length.
pub mod adv_rx {
    pub const DD: u64 = 1 << 0;
    pub const EOP: u64 = 1 << 1;
    /// Extended errors 31:20: CE (24), LE (25), PE (27), OSE (28),
    /// RXE/USE (29) are frame errors; TCPE/IPE (30/31) are checksum
    /// results and, as for legacy descriptors, do not drop the frame.
    pub const FRAME_ERRORS: u64 = (1 << 24) | (1 << 25) | (1 << 27) | (1 << 28) | (1 << 29);
    pub const LENGTH_SHIFT: u32 = 32;
    pub const LENGTH_MASK: u64 = 0xFFFF;
}

/// Advanced transmit data descriptor (§7.2.3.2.4), quadword 1:
/// cmd_type_len in the low dword, olinfo_status in the high one.
pub mod adv_tx {
    // DTALEN is bits 15:0, as wide as a packet's length (u16).
    /// DTYP = 0011b: data descriptor.
    pub const DTYP_DATA: u64 = 0b0011 << 20;
    pub const CMD_EOP: u64 = 1 << 24;
    pub const CMD_IFCS: u64 = 1 << 25;
    pub const CMD_RS: u64 = 1 << 27;
    pub const CMD_DEXT: u64 = 1 << 29;
    /// STA.DD, written back when RS was set.
    pub const DD: u64 = 1 << 32;
    /// PAYLEN, bits 31:14 of olinfo_status.
    pub const PAYLEN_SHIFT: u32 = 32 + 14;
}

/// Largest ring the driver sets up, and the smallest.
pub const MAX_RING: usize = 8192;
pub const MIN_RING: usize = 64;

/// Allocate a descriptor ring of `size` descriptors (a power of two in
/// MIN_RING..=MAX_RING; RDLEN/TDLEN must be a multiple of 128 bytes,
/// §8.2.3.8.3): DMA memory contiguous in device address space, 128-byte
/// aligned. Indices wrap (the hardware-access layer's [`DescRing`] checks
/// the memory once, at creation, so a descriptor access on the data path
/// is one masked load or store).
pub fn new_ring(dma: &dyn DmaAllocator, size: usize) -> Result<DescRing, InitError> {
    check_ring_size(size)?;
    let bytes = size * DESC_BYTES;
    let mem = dma
        .allocate(bytes, true)
        .map_err(|e| InitError::Config(format!("descriptor ring of {size} entries: {e}")))?;
    if mem.contiguous_len() < bytes || mem.device_addr() % 128 != 0 {
        return Err(InitError::Config(format!(
            "descriptor ring at {:#x} is not 128-byte aligned and contiguous for {bytes} bytes",
            mem.device_addr()
        )));
    }
    DescRing::new(mem, size).map_err(|e| InitError::Config(e.to_string()))
}

pub fn check_ring_size(size: usize) -> Result<(), InitError> {
    if !size.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&size) {
        return Err(InitError::Config(format!(
            "ring size {size} must be a power of two between {MIN_RING} and {MAX_RING}"
        )));
    }
    Ok(())
}
