//! One initialized 82599 port: its registers, its queues' ownership, its
//! statistics.

use crate::error::InitError;
use crate::init::{self, InitReport};
use crate::regs::{self, Regs};
use nfkit_hw::{Bar, Clock, DmaAllocator, PciAddress, PciFunction};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How to initialize a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// Receive queues (1..=128). With more than one, RSS spreads flows
    /// over the first 16 (the most RSS can address).
    pub rx_queues: usize,
    /// Transmit queues (1..=128).
    pub tx_queues: usize,
    /// Accept every unicast and multicast frame (FCTRL.UPE/MPE).
    pub promiscuous: bool,
    /// Bound on each register poll during initialization and queue set-up
    /// (TinyNF uses 1 s for all of them).
    pub poll_timeout: Duration,
    /// Bound on the wait for the link to come up.
    pub link_timeout: Duration,
    /// Minimum interval between two interrupts of one MSI-X vector (EITR,
    /// §8.2.3.5.12; 2 µs steps, at most 1022 µs), once
    /// [`Device::enable_interrupts`] set them up.
    pub interrupt_interval: Duration,
    /// The largest frame received and sent, CRC included. Above 1518
    /// (and up to [`MAX_JUMBO_FRAME`]) jumbo frames are on
    /// (HLREG0.JUMBOEN, MAXFRS.MFS, §8.2.3.22.8, §8.2.3.22.13) and a
    /// frame larger than one receive buffer arrives over several
    /// descriptors, as a chain.
    pub max_frame: u32,
    /// Receive checksum verdicts (§7.1.11: status IPCS/L4I, errors
    /// IPE/L4E) become each packet's offload state. Off, the receive
    /// path does nothing per packet for them.
    pub rx_checksum: bool,
}

/// Largest frame without jumbo frames, CRC included.
pub const STD_MAX_FRAME: u32 = 1518;
/// Largest jumbo frame the driver sets (the 82599's 15.5 KB, §1.3),
/// CRC included.
pub const MAX_JUMBO_FRAME: u32 = 15872;

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            rx_queues: 1,
            tx_queues: 1,
            promiscuous: true,
            poll_timeout: Duration::from_secs(1),
            link_timeout: Duration::from_secs(10),
            // Linux's ixgbe default (20,000 interrupts/s per vector)
            interrupt_interval: Duration::from_micros(50),
            max_frame: STD_MAX_FRAME,
            rx_checksum: false,
        }
    }
}

/// Device-wide counters, accumulated in software from the clear-on-read
/// statistics registers (§8.2.3.23).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeviceStats {
    /// Good packets received (GPRC).
    pub rx_packets: u64,
    /// Good octets received (GORC).
    pub rx_bytes: u64,
    /// Good packets transmitted (GPTC).
    pub tx_packets: u64,
    /// Good octets transmitted (GOTC).
    pub tx_bytes: u64,
    /// Frames missed because the packet buffer was full (MPC, all 8).
    pub rx_missed: u64,
    /// Frames dropped because their queue had no free descriptor (QPRDC,
    /// summed over the 16 sets).
    pub rx_no_descriptor: u64,
    /// Frames with a CRC error (CRCERRS).
    pub rx_crc_errors: u64,
    /// Frames with a length error (RLEC).
    pub rx_length_errors: u64,
    /// Frames dropped as longer than the largest frame (ROC): jumbo
    /// frames while `DeviceConfig::max_frame` is 1518 (no `mtu=`).
    pub rx_oversize: u64,
    /// Per-queue counter sets: queue q counts in set q mod 16.
    pub queues: [QueueHwStats; regs::QUEUE_STAT_SETS],
}

/// One set of per-queue hardware counters (§8.2.3.23.71-75).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueHwStats {
    /// Packets received into the queue(s) of this set (QPRC).
    pub rx_packets: u64,
    /// Packets transmitted from them (QPTC).
    pub tx_packets: u64,
    /// Frames dropped for want of a free descriptor (QPRDC).
    pub rx_no_descriptor: u64,
}

impl DeviceStats {
    /// Every frame the device dropped on receive.
    pub fn rx_dropped(&self) -> u64 {
        self.rx_missed + self.rx_no_descriptor
    }
}

/// Link state read from LINKS (§8.2.3.22.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub up: bool,
    /// Mbit/s when up.
    pub speed_mbps: Option<u32>,
}

pub(crate) struct Shared<B> {
    pub regs: Regs<B>,
    pub clock: Arc<dyn Clock>,
    pub dma: Arc<dyn DmaAllocator>,
    pub config: DeviceConfig,
    pub address: PciAddress,
    mac: [u8; 6],
    report: InitReport,
    rx_taken: Box<[AtomicBool]>,
    tx_taken: Box<[AtomicBool]>,
    stats: Mutex<DeviceStats>,
}

/// An initialized 82599 port. Cheap to clone (shared); queues and agents
/// keep a clone. Generic over the BAR type, so the same driver runs on
/// real hardware (sysfs or VFIO) and on the device model.
pub struct Device<B> {
    pub(crate) shared: Arc<Shared<B>>,
}

impl<B> Clone for Device<B> {
    fn clone(&self) -> Self {
        Device {
            shared: self.shared.clone(),
        }
    }
}

impl<B> std::fmt::Debug for Device<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("address", &self.shared.address.to_string())
            .field("mac", &format_args!("{:02x?}", self.shared.mac))
            .finish()
    }
}

impl<B: Bar + 'static> Device<B> {
    /// Initialize the 82599 behind `pci` (datasheet §4.6.3): PCI checks,
    /// reset, EEPROM and DMA waits, filters, DCB off, transmit set-up,
    /// receive enable, link wait. Queues are then opened with
    /// [`Device::rx_queue`]/[`Device::tx_queue`] or an
    /// [`Agent`](crate::Agent).
    pub fn init<P: PciFunction<Bar = B>>(
        pci: &P,
        dma: Arc<dyn DmaAllocator>,
        clock: Arc<dyn Clock>,
        config: DeviceConfig,
    ) -> Result<Device<B>, InitError> {
        for (what, n) in [
            ("receive", config.rx_queues),
            ("transmit", config.tx_queues),
        ] {
            if n == 0 || n > regs::QUEUES {
                return Err(InitError::Config(format!(
                    "{n} {what} queues: the 82599 has 1 to {}",
                    regs::QUEUES
                )));
            }
        }
        if !(STD_MAX_FRAME..=MAX_JUMBO_FRAME).contains(&config.max_frame) {
            return Err(InitError::Config(format!(
                "a largest frame of {} bytes: the 82599 takes {STD_MAX_FRAME} to {MAX_JUMBO_FRAME} (CRC included, §8.2.3.22.13)",
                config.max_frame
            )));
        }
        let done = init::initialize(pci, &*clock, &config)?;
        tracing::info!(
            "82599 {} up: MAC {:02x?}, {} rx / {} tx queues, largest frame {} bytes with CRC ({}), receive checksum verdicts {}",
            pci.address(),
            done.mac,
            config.rx_queues,
            config.tx_queues,
            config.max_frame,
            if config.max_frame > STD_MAX_FRAME {
                "jumbo frames on"
            } else {
                "standard frames"
            },
            if config.rx_checksum { "on" } else { "off" }
        );
        let flags = |n: usize| (0..n).map(|_| AtomicBool::new(false)).collect();
        Ok(Device {
            shared: Arc::new(Shared {
                regs: done.regs,
                rx_taken: flags(config.rx_queues),
                tx_taken: flags(config.tx_queues),
                clock,
                dma,
                config,
                address: pci.address(),
                mac: done.mac,
                report: done.report,
                stats: Mutex::new(DeviceStats::default()),
            }),
        })
    }
}

impl<B: Bar> Device<B> {
    /// The MAC address from the EEPROM (RAL0/RAH0).
    pub fn mac(&self) -> [u8; 6] {
        self.shared.mac
    }
    pub fn address(&self) -> PciAddress {
        self.shared.address
    }
    pub fn config(&self) -> &DeviceConfig {
        &self.shared.config
    }
    /// What happened during initialization.
    pub fn init_report(&self) -> InitReport {
        self.shared.report
    }

    /// Current link state (a register read: control path only).
    pub fn link(&self) -> Link {
        let links = self.shared.regs.read(&regs::LINKS, 0);
        let up = links & regs::links::LINK_UP != 0;
        let speed = match (links & regs::links::SPEED_MASK) >> regs::links::SPEED_SHIFT {
            0b01 => Some(100),
            0b10 => Some(1_000),
            0b11 => Some(10_000),
            _ => None,
        };
        Link {
            up,
            speed_mbps: if up { speed } else { None },
        }
    }

    /// Unicast/multicast promiscuous mode on or off. FCTRL may only change
    /// while receive is disabled (§8.2.3.7.1), so receive is halted around
    /// the write the way §4.6.7 enables it.
    pub fn set_promiscuous(&self, on: bool) -> Result<(), InitError> {
        let r = &self.shared.regs;
        let mask = regs::fctrl::UPE | regs::fctrl::MPE;
        r.set(&regs::SECRXCTRL, 0, regs::secrxctrl::RX_DIS);
        let ready =
            crate::wait::wait_until(&*self.shared.clock, self.shared.config.poll_timeout, || {
                r.is_set(&regs::SECRXSTAT, 0, regs::secrxstat::SECRX_RDY)
            });
        if ready {
            r.clear(&regs::RXCTRL, 0, regs::rxctrl::RXEN);
            r.set_field(&regs::FCTRL, 0, mask, if on { mask } else { 0 });
            r.set(&regs::RXCTRL, 0, regs::rxctrl::RXEN);
        }
        r.clear(&regs::SECRXCTRL, 0, regs::secrxctrl::RX_DIS);
        if ready {
            Ok(())
        } else {
            Err(InitError::Timeout {
                step: crate::Step::ReceiveEnable,
                waited_for: "SECRXSTAT.SECRX_RDY",
                timeout: self.shared.config.poll_timeout,
            })
        }
    }

    /// Read the clear-on-read statistics registers, add them to the
    /// running totals and return the totals. Control path: call it every
    /// second or so (the 32-bit counters wrap after ~290 s at 14.88 Mpps).
    pub fn stats(&self) -> DeviceStats {
        let r = &self.shared.regs;
        let mut totals = self.shared.stats.lock();
        let s = &mut *totals;
        s.rx_packets += r.read(&regs::GPRC, 0) as u64;
        s.tx_packets += r.read(&regs::GPTC, 0) as u64;
        // 36-bit octet counters: low register first, then high.
        let gorc = r.read(&regs::GORCL, 0) as u64 | ((r.read(&regs::GORCH, 0) as u64 & 0xF) << 32);
        let gotc = r.read(&regs::GOTCL, 0) as u64 | ((r.read(&regs::GOTCH, 0) as u64 & 0xF) << 32);
        s.rx_bytes += gorc;
        s.tx_bytes += gotc;
        s.rx_missed += (0..regs::MPC.count())
            .map(|i| r.read(&regs::MPC, i) as u64)
            .sum::<u64>();
        for (i, q) in s.queues.iter_mut().enumerate() {
            q.rx_packets += r.read(&regs::QPRC, i) as u64;
            q.tx_packets += r.read(&regs::QPTC, i) as u64;
            let no_descriptor = r.read(&regs::QPRDC, i) as u64;
            q.rx_no_descriptor += no_descriptor;
            s.rx_no_descriptor += no_descriptor;
        }
        s.rx_crc_errors += r.read(&regs::CRCERRS, 0) as u64;
        s.rx_length_errors += r.read(&regs::RLEC, 0) as u64;
        s.rx_oversize += r.read(&regs::ROC, 0) as u64;
        *s
    }

    /// Claim receive queue `q` for one user.
    pub(crate) fn take_rx(&self, q: usize) -> Result<QueueClaim<B>, InitError> {
        self.take(q, true)
    }
    /// Claim transmit queue `q` for one user.
    pub(crate) fn take_tx(&self, q: usize) -> Result<QueueClaim<B>, InitError> {
        self.take(q, false)
    }

    fn take(&self, q: usize, rx: bool) -> Result<QueueClaim<B>, InitError> {
        let (flags, kind) = if rx {
            (&self.shared.rx_taken, "receive")
        } else {
            (&self.shared.tx_taken, "transmit")
        };
        let flag = flags.get(q).ok_or_else(|| {
            InitError::Config(format!(
                "{kind} queue {q} does not exist: the device was initialized with {} {kind} queues",
                flags.len()
            ))
        })?;
        if flag.swap(true, Ordering::AcqRel) {
            return Err(InitError::QueueBusy { kind, index: q });
        }
        Ok(QueueClaim {
            device: self.clone(),
            index: q,
            rx,
        })
    }

    pub(crate) fn regs(&self) -> &Regs<B> {
        &self.shared.regs
    }
    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.shared.clock
    }
    pub(crate) fn dma(&self) -> &dyn DmaAllocator {
        &*self.shared.dma
    }
    pub(crate) fn poll_timeout(&self) -> Duration {
        self.shared.config.poll_timeout
    }
}

/// Exclusive use of one queue; released on drop.
pub(crate) struct QueueClaim<B> {
    pub device: Device<B>,
    pub index: usize,
    rx: bool,
}

impl<B: Bar> QueueClaim<B> {
    /// Disable the claimed queue (datasheet §4.6.7.1.2 for receive,
    /// §4.6.8.1 for transmit), as a queue or agent going away does. A
    /// queue that will not stop is logged, not fatal: the claim is still
    /// released and the caller has nothing better to do.
    pub fn stop(&self) {
        let dev = &self.device;
        let (what, stopped) = if self.rx {
            let r = crate::queue_setup::stop_rx_queue(
                dev.regs(),
                dev.clock(),
                dev.poll_timeout(),
                self.index,
            );
            ("rx", r)
        } else {
            let r = crate::queue_setup::stop_tx_queue(
                dev.regs(),
                dev.clock(),
                dev.poll_timeout(),
                self.index,
            );
            ("tx", r)
        };
        if let Err(e) = stopped {
            tracing::warn!("{what} queue {}: {e}", self.index);
        }
    }
}

impl<B> Drop for QueueClaim<B> {
    fn drop(&mut self) {
        let flags = if self.rx {
            &self.device.shared.rx_taken
        } else {
            &self.device.shared.tx_taken
        };
        if let Some(f) = flags.get(self.index) {
            f.store(false, Ordering::Release);
        }
    }
}
