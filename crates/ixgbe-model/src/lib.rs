//! # nfkit-ixgbe-model: the Intel 82599 in software
//!
//! A datasheet-faithful (82599 datasheet rev 3.3) model of one 82599 port:
//! PCI configuration space, the register file with its side effects, the
//! RX and TX DMA engines (legacy and advanced descriptors), RSS, the
//! statistics registers, a wire side that can be cabled to another port,
//! a traffic generator, a sink or a pcap file, and **strict mode**, which
//! records every datasheet rule a driver breaks with its section.
//!
//! ```
//! use nfkit_hw::{sim::SimDma, PciFunction, Bar};
//! use nfkit_ixgbe_model::{ModelConfig, Nic82599};
//! let nic = Nic82599::new(ModelConfig::default(), SimDma::new());
//! let bar = nic.pci().map_bar(0).unwrap();
//! assert_eq!(nic.pci().config_read16(0).unwrap(), 0x8086);
//! // CTRL.RST: self-clearing, restores the defaults (§8.2.3.1.1)
//! bar.write32(0x0, 1 << 26);
//! assert_eq!(bar.read32(0x0) & (1 << 26), 1 << 26, "still resetting");
//! ```
//!
//! Two ways to run the device:
//! - **lock-step** ([`Nic82599::attach_clock`], [`Nic82599::step`]): device
//!   time is a [`VirtualClock`]; deterministic, single-threaded;
//! - **free-running** ([`Nic82599::spawn`]): a thread polls tail registers
//!   and descriptors like the hardware, in real time.
//!
//! Files: `regs.rs` (the register table), `regfile.rs` (storage),
//! `device.rs` (register side effects, reset, timing, strict rules),
//! `rx.rs`/`tx.rs` (DMA engines), `rss.rs` (Toeplitz), `filter.rs` (MAC
//! filters, queue selection), `wire.rs` (cabling, pcap, generator, sink),
//! `pci.rs` (config space, BAR, MSI-X vectors as eventfds), `irq.rs`
//! (interrupt causes, masks, EITR throttling), `run.rs` (execution modes).

#![forbid(unsafe_code)]

mod config_space;
mod datapath;
mod device;
mod dmacache;
mod filter;
pub mod irq;
mod offload;
mod pci;
pub mod regfile;
pub mod regs;
pub mod rss;
mod run;
mod rx;
mod strict;
mod tx;
mod wire;

pub use config_space::{PCIE_DEVICE_STATUS, PMCSR};
pub use irq::IrqCounters;
pub use pci::{SimBar, SimPci};
pub use run::RunningNic;
pub use strict::Violation;
pub use wire::{cable, PcapError, SinkStats, TrafficGen, Wire};

use device::Device;
use nfkit_hw::sim::{SimDma, VirtualClock};
use std::sync::Arc;
use std::time::Duration;

/// How the link behaves (fault injection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LinkFault {
    /// Link comes up after the datasheet-ish auto-negotiation delay.
    #[default]
    Up,
    /// LINKS.LINK_UP never sets.
    Down,
    /// The link alternates up and down, `period` of device time each.
    Flapping { period: Duration },
}

/// Fault injection; the default is a healthy device.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// EEC.EE_PRES stays 0 (no EEPROM: the MAC address is not loaded).
    pub eeprom_absent: bool,
    /// FWSM.EXT_ERR_IND != 0 after the EEPROM auto-read.
    pub eeprom_bad_checksum: bool,
    /// RDRXCTL.DMAIDONE never sets.
    pub dma_init_never_done: bool,
    pub link: LinkFault,
    /// RX/TX descriptor (and head) write-back delayed by N device steps.
    pub writeback_delay: u32,
    /// RXDCTL/TXDCTL.ENABLE of this queue never reads back set.
    pub queue_never_enables: Option<usize>,
    /// Every Nth received frame gets RXE set in its RX descriptor.
    pub rx_error_every: Option<u32>,
    /// Each RX descriptor's length field says this many bytes more than
    /// were written (a faulty or hostile device; capped at 0xFFFF).
    pub rx_length_excess: u16,
    /// STATUS.PCIE_MASTER_ENABLE_STATUS never clears.
    pub master_disable_stuck: bool,
    /// Interrupts that never come, or never stop.
    pub irq: IrqFault,
}

/// How the device's MSI-X messages misbehave.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum IrqFault {
    #[default]
    None,
    /// Messages are decided (and counted) but no eventfd is signalled:
    /// a device that raises no interrupt.
    Silent,
    /// Every vector's eventfd is signalled at every device step, whatever
    /// the causes and masks: an interrupt that never stops.
    Storm,
}

/// Configuration of one simulated port.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// MAC in the simulated EEPROM, loaded into RAL0/RAH0 on reset.
    pub mac: [u8; 6],
    /// Record datasheet-rule violations.
    pub strict: bool,
    pub faults: Faults,
    /// PCI device ID; 0x10FB is the 82599ES SFI/SFP+.
    pub device_id: u16,
    /// PCI function number (also STATUS.LAN_ID).
    pub function: u8,
    /// Frames the RX packet buffer holds before it overflows (MPC).
    pub rx_fifo_frames: usize,
    /// Frames kept for [`Wire::drain_transmitted`] when not cabled.
    pub tx_capture_frames: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            mac: [0x02, 0, 0, 0, 0, 0x01],
            strict: true,
            faults: Faults::default(),
            device_id: 0x10FB,
            function: 0,
            rx_fifo_frames: 4096,
            tx_capture_frames: 65536,
        }
    }
}

/// Counters the model keeps for tests, independent of the clear-on-read
/// statistics registers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelCounters {
    /// Frames written into RX descriptors.
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames dropped for lack of a free RX descriptor (DROP_EN).
    pub rx_missed: u64,
    /// Frames dropped by the MAC address filters (FCTRL/RAL/RAH/MTA).
    pub rx_dropped_filter: u64,
    /// Frames dropped because the RX packet buffer was full (MPC).
    pub rx_fifo_overflow: u64,
    /// Frames dropped because receive was off (RXCTRL.RXEN, link down,
    /// the selected queue not enabled, undersize/oversize).
    pub rx_dropped_other: u64,
    /// Frames given RXE by fault injection.
    pub rx_errors_injected: u64,
    /// Frames put on the wire.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Null (zero-length) TX data descriptors consumed.
    pub tx_null_descriptors: u64,
    /// Frames the TX engine could not send (bad descriptor, bad FCS).
    pub tx_dropped: u64,
    /// DMA accesses outside DMA memory that were refused.
    pub dma_faults: u64,
}

/// One simulated 82599 port (one PCI function). Cheap to clone.
#[derive(Clone)]
pub struct Nic82599 {
    dev: Arc<Device>,
}

impl std::fmt::Debug for Nic82599 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic82599")
            .field("mac", &self.dev.cfg.mac)
            .finish()
    }
}

impl Nic82599 {
    /// A powered-on device: it behaves as if a reset began at device time
    /// zero (EEPROM auto-read, DMA init and link follow on their delays).
    pub fn new(cfg: ModelConfig, dma: Arc<SimDma>) -> Nic82599 {
        Nic82599 {
            dev: Device::new(cfg, dma),
        }
    }

    /// The PCI function the driver opens.
    pub fn pci(&self) -> SimPci {
        SimPci::new(self.dev.clone())
    }

    /// Lock-step mode: device time follows `clock`; every advance runs the
    /// device's timed behaviour and one [`step`](Self::step).
    pub fn attach_clock(&self, clock: &Arc<VirtualClock>) {
        run::attach_clock(&self.dev, clock)
    }

    /// Process all currently pending work once. Returns the number of
    /// descriptors and frames processed.
    pub fn step(&self) -> usize {
        self.dev.step()
    }

    /// Free-running mode: the device runs on its own thread.
    pub fn spawn(&self) -> RunningNic {
        run::spawn(self.dev.clone())
    }

    /// Strict-mode violations recorded so far (at most 1024 are kept).
    pub fn violations(&self) -> Vec<Violation> {
        self.dev.strict.list()
    }

    /// Total number of violations, including those not kept.
    pub fn violation_count(&self) -> u64 {
        self.dev.strict.total()
    }

    /// Forget the violations recorded so far.
    pub fn clear_violations(&self) {
        self.dev.strict.clear()
    }

    /// What the interrupt logic did (§7.3): messages per MSI-X vector,
    /// throttled causes, messages lost for want of a vector.
    pub fn irq_counters(&self) -> IrqCounters {
        self.dev.irq.counters()
    }

    /// The wire (MAC/PHY) side.
    pub fn wire(&self) -> Wire {
        Wire::new(self.dev.clone())
    }

    /// Counters the model keeps for tests.
    pub fn counters(&self) -> ModelCounters {
        self.dev.counters.snapshot()
    }

    /// The configuration this port was built with.
    pub fn config(&self) -> &ModelConfig {
        &self.dev.cfg
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Read a register without side effects (no clear-on-read, no strict
    /// checks): for tests that inspect the device.
    pub fn peek(&self, offset: usize) -> u32 {
        self.dev.regs.get(offset)
    }

    /// Set a statistics register (§8.2.3.23) to `value`, as if it had
    /// counted that far: soak tests preset the 32-bit counters near 2^32
    /// to check that their wrap adds up. Returns false (and changes
    /// nothing) for an offset that is not a statistics register.
    pub fn preset_stat(&self, offset: usize, value: u32) -> bool {
        match self.dev.regs.slot(offset) {
            Some(s) if s.def.id == regs::Id::Stat => {
                self.dev.regs.set(offset, value);
                true
            }
            _ => false,
        }
    }
}
