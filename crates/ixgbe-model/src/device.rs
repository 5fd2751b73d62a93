//! The device: register side effects, reset and its timeline, link, queue
//! enabling, and the strict-mode rules about *how* registers are written.
//! The DMA engines are in `datapath.rs`, `rx.rs` and `tx.rs`.

use crate::datapath::DataPath;
use crate::irq::{Irq, IrqReg};
use crate::regfile::{RegFile, Slot};
use crate::regs::{bits::*, off, Access, Id};
use crate::strict::Strict;
use crate::wire::WireState;
use crate::{LinkFault, ModelConfig, ModelCounters};
use nfkit_hw::sim::{SimDma, VirtualClock};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// §8.2.3.1.1: software must wait ~1 ms after setting CTRL.RST before any
/// access (the bit self-clears when the reset is done).
pub const RESET_DURATION: Duration = Duration::from_millis(1);
/// §4.6.3.2: after a global reset, wait at least 10 ms before initialising.
pub const RESET_SETTLE: Duration = Duration::from_millis(10);
/// EEPROM auto-read (EEC.AUTO_RD) completes this long after a reset begins.
pub const EEPROM_AUTO_READ: Duration = Duration::from_millis(2);
/// DMA initialisation (RDRXCTL.DMAIDONE) completes this long after a reset.
pub const DMA_INIT: Duration = Duration::from_millis(3);
/// Link comes up this long after a reset or an AUTOC.RESTART_AN.
pub const LINK_UP_DELAY: Duration = Duration::from_millis(10);
/// RXDCTL/TXDCTL.ENABLE reads back its new value after this delay.
pub const QUEUE_ENABLE_DELAY: Duration = Duration::from_micros(10);
/// SECRXSTAT.SECRX_RDY sets this long after SECRXCTRL.RX_DIS.
pub const SECRX_DRAIN: Duration = Duration::from_micros(5);
/// STATUS.PCIE_MASTER_ENABLE_STATUS clears this long after master disable.
pub const MASTER_DISABLE_DELAY: Duration = Duration::from_micros(10);

pub const QUEUES: usize = 128;

/// Device time: real (free-running) or a virtual clock (lock-step).
enum TimeSource {
    Real(Instant),
    Virtual(Arc<VirtualClock>),
}

/// RX or TX queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Rx,
    Tx,
}

/// Something scheduled on the device timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    ResetDone,
    EepromAutoReadDone,
    DmaInitDone,
    LinkUp,
    SecRxReady,
    MasterDisabled,
    QueueEnable(Dir, usize, bool),
}

/// Slow-path state, under one mutex.
#[derive(Default)]
struct Control {
    events: Vec<(Duration, Event)>,
    /// While `Some(t)`: a reset began at `t` and CTRL.RST reads set.
    reset_started: Option<Duration>,
    /// The last reset's start (for the 10 ms settle rule).
    last_reset: Option<Duration>,
    /// The driver has read EEC with AUTO_RD set / RDRXCTL with DMAIDONE set
    /// since the last reset (§4.6.3 says to wait for both).
    seen_auto_read: bool,
    seen_dma_init: bool,
}

/// Live counters (the model's own, not the RC registers).
#[derive(Debug, Default)]
pub struct Counters {
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_missed: AtomicU64,
    pub rx_dropped_filter: AtomicU64,
    pub rx_fifo_overflow: AtomicU64,
    pub rx_dropped_other: AtomicU64,
    pub rx_errors_injected: AtomicU64,
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_null_descriptors: AtomicU64,
    pub tx_dropped: AtomicU64,
    pub dma_faults: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> ModelCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ModelCounters {
            rx_frames: g(&self.rx_frames),
            rx_bytes: g(&self.rx_bytes),
            rx_missed: g(&self.rx_missed),
            rx_dropped_filter: g(&self.rx_dropped_filter),
            rx_fifo_overflow: g(&self.rx_fifo_overflow),
            rx_dropped_other: g(&self.rx_dropped_other),
            rx_errors_injected: g(&self.rx_errors_injected),
            tx_frames: g(&self.tx_frames),
            tx_bytes: g(&self.tx_bytes),
            tx_null_descriptors: g(&self.tx_null_descriptors),
            tx_dropped: g(&self.tx_dropped),
            dma_faults: g(&self.dma_faults),
        }
    }
}

pub fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// PCI configuration state the device itself depends on.
pub struct PciState {
    /// COMMAND (mirrored from config space for the data path).
    pub command: AtomicU16,
    pub config: Arc<Mutex<crate::config_space::ConfigSpace>>,
}

pub struct Device {
    pub cfg: ModelConfig,
    pub regs: RegFile,
    pub strict: Strict,
    pub dma: Arc<SimDma>,
    pub counters: Counters,
    pub pci: PciState,
    pub wire: WireState,
    pub data: Mutex<DataPath>,
    /// Bumped whenever a queue's effective ENABLE changes, so the data
    /// path re-reads its queue set.
    pub queue_gen: AtomicU64,
    time: RwLock<TimeSource>,
    ctl: Mutex<Control>,
    /// Device time (ns) of the earliest scheduled event, u64::MAX if none.
    next_event: AtomicU64,
    in_reset: AtomicBool,
    /// Device time (ns) the link came up, u64::MAX while down.
    link_since: AtomicU64,
    /// Interrupt causes, masks, throttling and MSI-X delivery (§7.3).
    pub irq: Irq,
}

/// The interrupt register a slot of the table names.
fn irq_reg(slot: &Slot) -> Option<IrqReg> {
    let n = slot.n;
    Some(match slot.def.name {
        "EICR" => IrqReg::Eicr,
        "EICS" => IrqReg::Eics,
        "EIMS" => IrqReg::Eims,
        "EIMC" => IrqReg::Eimc,
        "EIAC" => IrqReg::Eiac,
        "EIAM" => IrqReg::Eiam,
        "GPIE" => IrqReg::Gpie,
        "IVAR_MISC" => IrqReg::IvarMisc,
        "IVAR" => IrqReg::Ivar(n),
        "EITR" => IrqReg::Eitr(n),
        "EICS_EX" => IrqReg::EicsEx(n),
        "EIMS_EX" => IrqReg::EimsEx(n),
        "EIMC_EX" => IrqReg::EimcEx(n),
        "EIAM_EX" => IrqReg::EiamEx(n),
        _ => return None,
    })
}

impl Device {
    pub fn new(cfg: ModelConfig, dma: Arc<SimDma>) -> Arc<Device> {
        let cfg_irq_fault = cfg.faults.irq;
        let dev = Arc::new(Device {
            strict: Strict::new(cfg.strict),
            wire: WireState::new(&cfg),
            regs: RegFile::new(),
            dma,
            counters: Counters::default(),
            pci: PciState {
                // the platform assigned the BARs and enabled memory decoding
                // (TinyNF's PCIBARS assumption); bus mastering is off
                command: AtomicU16::new(nfkit_hw::pci::config::COMMAND_MEMORY),
                config: crate::config_space::new_config(cfg.device_id),
            },
            data: Mutex::new(DataPath::new()),
            queue_gen: AtomicU64::new(0),
            cfg,
            time: RwLock::new(TimeSource::Real(Instant::now())),
            ctl: Mutex::new(Control::default()),
            next_event: AtomicU64::new(u64::MAX),
            in_reset: AtomicBool::new(false),
            link_since: AtomicU64::new(u64::MAX),
            irq: Irq::new(cfg_irq_fault),
        });
        // Power-on: the same timeline as a software reset, from time zero,
        // but nobody set CTRL.RST so nobody is waiting on it.
        {
            let mut ctl = dev.ctl.lock();
            dev.begin_reset(&mut ctl, Duration::ZERO);
            ctl.reset_started = None;
            ctl.last_reset = None;
            dev.regs.clear(off::CTRL, CTRL_RST);
            dev.in_reset.store(false, Ordering::Release);
            ctl.events.retain(|(_, e)| *e != Event::ResetDone);
            dev.rearm(&ctl);
        }
        dev
    }

    // ---------------------------------------------------------------- time

    pub fn now(&self) -> Duration {
        match &*self.time.read() {
            TimeSource::Real(origin) => origin.elapsed(),
            TimeSource::Virtual(c) => nfkit_hw::Clock::now(&**c),
        }
    }

    /// Switch device time to a virtual clock, keeping pending events at the
    /// same distance in the future.
    pub fn use_virtual_clock(&self, clock: Arc<VirtualClock>) {
        let old_now = self.now();
        let new_now = nfkit_hw::Clock::now(&*clock);
        let mut ctl = self.ctl.lock();
        let shift = |t: Duration| new_now + t.saturating_sub(old_now);
        for (t, _) in ctl.events.iter_mut() {
            *t = shift(*t);
        }
        ctl.reset_started = ctl
            .reset_started
            .map(|t| new_now.saturating_sub(old_now.saturating_sub(t)));
        ctl.last_reset = ctl
            .last_reset
            .map(|t| new_now.saturating_sub(old_now.saturating_sub(t)));
        let ls = self.link_since.load(Ordering::Acquire);
        if ls != u64::MAX {
            let t = Duration::from_nanos(ls);
            let t = new_now.saturating_sub(old_now.saturating_sub(t));
            self.link_since
                .store(t.as_nanos() as u64, Ordering::Release);
        }
        *self.time.write() = TimeSource::Virtual(clock);
        self.rearm(&ctl);
    }

    fn schedule(&self, ctl: &mut Control, at: Duration, e: Event) {
        ctl.events.push((at, e));
        self.rearm(ctl);
    }

    fn rearm(&self, ctl: &Control) {
        let next = ctl
            .events
            .iter()
            .map(|(t, _)| t.as_nanos() as u64)
            .min()
            .unwrap_or(u64::MAX);
        self.next_event.store(next, Ordering::Release);
    }

    /// Run every timed event that is due at device time `now`.
    pub fn tick(&self, now: Duration) {
        self.irq.tick(now, self.link_up(now));
        if (now.as_nanos() as u64) < self.next_event.load(Ordering::Acquire) {
            return;
        }
        let mut ctl = self.ctl.lock();
        // earliest due event first, so a reset's timeline runs in order
        let earliest_due = |ctl: &Control| {
            ctl.events
                .iter()
                .enumerate()
                .filter(|(_, (t, _))| *t <= now)
                .min_by_key(|(_, (t, _))| *t)
                .map(|(i, _)| i)
        };
        while let Some(i) = earliest_due(&ctl) {
            let (at, e) = ctl.events.swap_remove(i);
            self.fire(&mut ctl, at, e);
        }
        self.rearm(&ctl);
    }

    fn fire(&self, ctl: &mut Control, at: Duration, e: Event) {
        let faults = &self.cfg.faults;
        match e {
            Event::ResetDone => {
                self.regs.clear(off::CTRL, CTRL_RST | CTRL_LRST);
                ctl.reset_started = None;
                self.in_reset.store(false, Ordering::Release);
            }
            Event::EepromAutoReadDone => {
                let mut eec = EEC_AUTO_RD;
                if !faults.eeprom_absent {
                    eec |= EEC_EE_PRES;
                    self.load_mac_from_eeprom();
                    if faults.eeprom_bad_checksum {
                        self.regs.set(
                            off::FWSM,
                            FWSM_EXT_ERR_EEPROM_CHECKSUM << FWSM_EXT_ERR_IND_SHIFT,
                        );
                    }
                }
                self.regs.or(off::EEC, eec);
            }
            Event::DmaInitDone => {
                if !faults.dma_init_never_done {
                    self.regs.or(off::RDRXCTL, RDRXCTL_DMAIDONE);
                }
            }
            Event::LinkUp => {
                if faults.link != LinkFault::Down {
                    self.link_since
                        .store(at.as_nanos() as u64, Ordering::Release);
                }
            }
            Event::SecRxReady => {
                if self.regs.get(off::SECRXCTRL) & SECRXCTRL_RX_DIS != 0 {
                    self.regs.or(off::SECRXSTAT, SECRXSTAT_SECRX_RDY);
                }
            }
            Event::MasterDisabled => {
                if !faults.master_disable_stuck
                    && self.regs.get(off::CTRL) & CTRL_MASTER_DISABLE != 0
                {
                    self.regs.clear(off::STATUS, STATUS_PCIE_MASTER_ENABLE);
                }
            }
            Event::QueueEnable(dir, n, on) => {
                let reg = match dir {
                    Dir::Rx => off::rxdctl(n),
                    Dir::Tx => off::txdctl(n),
                };
                if on {
                    if faults.queue_never_enables == Some(n) {
                        return;
                    }
                    self.regs.or(reg, DCTL_ENABLE);
                } else {
                    self.regs.clear(reg, DCTL_ENABLE);
                }
                self.queue_gen.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// RAL0/RAH0 from the EEPROM (§8.2.3.7.8-9: loaded from the EEPROM).
    fn load_mac_from_eeprom(&self) {
        let m = self.cfg.mac;
        self.regs
            .set(off::ral(0), u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        self.regs
            .set(off::rah(0), u32::from(m[4]) | u32::from(m[5]) << 8 | RAH_AV);
    }

    /// A global reset (CTRL.RST or CTRL.LRST, §8.2.3.1.1, §4.2.1.6): every
    /// register back to its default, DMA stopped, queues disabled; then the
    /// EEPROM auto-read, DMA init and link follow on the timeline.
    fn begin_reset(&self, ctl: &mut Control, now: Duration) {
        self.regs.reset();
        self.irq.reset();
        self.regs.set(
            off::STATUS,
            STATUS_PCIE_MASTER_ENABLE | u32::from(self.cfg.function & 1) << 2,
        );
        self.regs.set(off::RXPBSIZE0, crate::regs::RXPBSIZE0_RESET);
        self.regs.set(off::TXPBSIZE0, crate::regs::TXPBSIZE0_RESET);
        self.regs.set(off::CTRL, CTRL_RST);
        self.in_reset.store(true, Ordering::Release);
        self.queue_gen.fetch_add(1, Ordering::AcqRel);
        self.wire.flush_rx();
        ctl.events.clear();
        ctl.reset_started = Some(now);
        ctl.last_reset = Some(now);
        ctl.seen_auto_read = false;
        ctl.seen_dma_init = false;
        self.link_since.store(u64::MAX, Ordering::Release);
        self.schedule(ctl, now + RESET_DURATION, Event::ResetDone);
        self.schedule(ctl, now + EEPROM_AUTO_READ, Event::EepromAutoReadDone);
        self.schedule(ctl, now + DMA_INIT, Event::DmaInitDone);
        self.schedule(ctl, now + LINK_UP_DELAY, Event::LinkUp);
    }

    /// Whether the link is up now (LINKS.LINK_UP), with flapping.
    pub fn link_up(&self, now: Duration) -> bool {
        let since = self.link_since.load(Ordering::Acquire);
        self.link_up_at(
            (since != u64::MAX).then(|| Duration::from_nanos(since)),
            now,
        )
    }

    fn link_up_at(&self, since: Option<Duration>, now: Duration) -> bool {
        match (since, self.cfg.faults.link) {
            (None, _) | (_, LinkFault::Down) => false,
            (Some(_), LinkFault::Up) => true,
            (Some(s), LinkFault::Flapping { period }) => {
                let p = period.as_nanos().max(1);
                (now.saturating_sub(s).as_nanos() / p).is_multiple_of(2)
            }
        }
    }

    /// Whether the device may master the bus (PCI COMMAND.BME, §9.3.3.3, and
    /// not CTRL.MASTER_DISABLE, §5.2.5.3.2).
    pub fn may_dma(&self) -> bool {
        self.pci.command.load(Ordering::Relaxed) & nfkit_hw::pci::config::COMMAND_BUS_MASTER != 0
            && self.regs.get(off::CTRL) & CTRL_MASTER_DISABLE == 0
            && !self.in_reset.load(Ordering::Acquire)
    }

    pub fn step(&self) -> usize {
        self.tick(self.now());
        self.data.lock().step(self)
    }

    // ----------------------------------------------------- driver accesses

    fn unmapped(&self, what: &str, offset: usize) {
        self.strict.record("8.2.2", || {
            format!("{what} of BAR0 offset {offset:#07x}, which is not a register of the 82599 (reserved or unaligned)")
        });
    }

    /// Accesses while a reset is in progress or settling (§8.2.3.1.1:
    /// wait ~1 ms after setting RST before any access; §4.6.3.2: wait
    /// 10 ms after a global reset before initialising).
    fn check_reset_timing(&self, now: Duration, slot: &Slot, is_read: bool) {
        if !self.strict.enabled() {
            return;
        }
        let ctl = self.ctl.lock();
        let Some(t) = ctl.last_reset else { return };
        let since = now.saturating_sub(t);
        let name = slot.def.name;
        if since < RESET_DURATION {
            self.strict.record("8.2.3.1.1", || {
                format!(
                    "{} {name} {:?} after setting CTRL.RST; wait ~1 ms after a reset before accessing any register",
                    if is_read { "read of" } else { "write to" },
                    since
                )
            });
        } else if since < RESET_SETTLE && !(is_read && matches!(slot.def.id, Id::Ctrl | Id::Status))
        {
            self.strict.record("4.6.3.2", || {
                format!(
                    "{} {name} {:?} after a global reset; wait at least 10 ms after a reset",
                    if is_read { "read of" } else { "write to" },
                    since
                )
            });
        }
    }

    /// §4.6.3: receive/transmit set-up only after the EEPROM auto-read and
    /// DMA initialisation are done (the driver polls EEC.AUTO_RD and
    /// RDRXCTL.DMAIDONE).
    fn check_init_done(&self, slot: &Slot) {
        if !self.strict.enabled() {
            return;
        }
        let ctl = self.ctl.lock();
        if !(ctl.seen_auto_read && ctl.seen_dma_init) {
            let (a, d) = (ctl.seen_auto_read, ctl.seen_dma_init);
            drop(ctl);
            self.strict.record("4.6.3", || {
                format!(
                    "write to {}[{}] before the driver saw {}; queue and RX/TX set-up must follow the EEPROM auto-read and DMA init",
                    slot.def.name,
                    slot.n,
                    match (a, d) {
                        (false, false) => "EEC.AUTO_RD and RDRXCTL.DMAIDONE",
                        (false, true) => "EEC.AUTO_RD",
                        _ => "RDRXCTL.DMAIDONE",
                    }
                )
            });
        }
    }

    pub fn read(&self, offset: usize) -> u32 {
        let now = self.now();
        self.tick(now);
        let Some(slot) = self.regs.slot(offset) else {
            self.unmapped("read", offset);
            return 0;
        };
        self.check_reset_timing(now, &slot, true);
        let w = slot.word;
        match (slot.def.access, slot.def.id) {
            (Access::Wo, _) => 0,
            (Access::Rc, _) => self.regs.take(w),
            (_, Id::Irq) => match irq_reg(&slot) {
                Some(r) => self.irq.read(r),
                None => 0,
            },
            (_, Id::Eec) => {
                let v = self.regs.word(w).load(Ordering::Acquire);
                if v & EEC_AUTO_RD != 0 {
                    self.ctl.lock().seen_auto_read = true;
                }
                v
            }
            (_, Id::Rdrxctl) => {
                let v = self.regs.word(w).load(Ordering::Acquire);
                if v & RDRXCTL_DMAIDONE != 0 {
                    self.ctl.lock().seen_dma_init = true;
                }
                v
            }
            (_, Id::Links) => {
                if self.link_up(now) {
                    LINKS_LINK_UP | LINKS_SPEED_10G
                } else {
                    0
                }
            }
            _ => self.regs.word(w).load(Ordering::Acquire),
        }
    }

    pub fn write(&self, offset: usize, v: u32) {
        let Some(slot) = self.regs.slot(offset) else {
            self.unmapped("write", offset);
            return;
        };
        // Tail registers are the data path's doorbells: a plain store.
        match slot.def.id {
            Id::Rdt => return self.write_tail(Dir::Rx, &slot, v),
            Id::Tdt => return self.write_tail(Dir::Tx, &slot, v),
            _ => {}
        }
        let now = self.now();
        self.tick(now);
        self.check_reset_timing(now, &slot, false);
        if slot.def.id == Id::Irq {
            if let Some(r) = irq_reg(&slot) {
                self.irq.write(r, v, now, &self.strict);
            }
            return;
        }
        let w = slot.word;
        let word = self.regs.word(w);
        match slot.def.access {
            Access::Ro | Access::Rc => {
                self.strict.record(slot.def.section, || {
                    format!(
                        "write of {v:#010x} to read-only register {}[{}]",
                        slot.def.name, slot.n
                    )
                });
                return;
            }
            Access::W1c => {
                word.fetch_and(!v, Ordering::AcqRel);
                return;
            }
            _ => {}
        }
        match slot.def.id {
            Id::Ctrl => self.write_ctrl(now, v),
            Id::Eec => {
                // AUTO_RD and EE_PRES are read-only status bits
                let ro = EEC_AUTO_RD | EEC_EE_PRES;
                let cur = word.load(Ordering::Acquire);
                word.store((v & !ro) | (cur & ro), Ordering::Release);
            }
            Id::Autoc => {
                word.store(v & !AUTOC_RESTART_AN, Ordering::Release);
                if v & AUTOC_RESTART_AN != 0 {
                    let mut ctl = self.ctl.lock();
                    self.link_since.store(u64::MAX, Ordering::Release);
                    ctl.events.retain(|(_, e)| *e != Event::LinkUp);
                    self.schedule(&mut ctl, now + LINK_UP_DELAY, Event::LinkUp);
                }
            }
            Id::Rdrxctl => {
                let cur = word.load(Ordering::Acquire);
                word.store(
                    (v & !RDRXCTL_DMAIDONE) | (cur & RDRXCTL_DMAIDONE),
                    Ordering::Release,
                );
            }
            Id::Rxctrl => self.write_rxctrl(&slot, v),
            Id::Fctrl => {
                if self.regs.get(off::RXCTRL) & RXCTRL_RXEN != 0 {
                    self.strict.record("8.2.3.7.1", || {
                        format!("FCTRL written ({v:#x}) while RXCTRL.RXEN is set; clear RXEN before changing receive filters")
                    });
                }
                word.store(v, Ordering::Release);
            }
            Id::Secrxctrl => {
                word.store(v, Ordering::Release);
                if v & SECRXCTRL_RX_DIS != 0 {
                    let mut ctl = self.ctl.lock();
                    self.schedule(
                        &mut ctl,
                        now + SECRX_DRAIN,
                        crate::device::Event::SecRxReady,
                    );
                } else {
                    self.regs.clear(off::SECRXSTAT, SECRXSTAT_SECRX_RDY);
                }
            }
            Id::Dmatxctl => {
                self.check_init_done(&slot);
                word.store(v, Ordering::Release);
            }
            Id::Rdbal
            | Id::Rdbah
            | Id::Rdlen
            | Id::Srrctl
            | Id::Tdbal
            | Id::Tdbah
            | Id::Tdlen
            | Id::Tdwbal
            | Id::Tdwbah => {
                self.write_queue_config(&slot, v);
            }
            Id::Rdh | Id::Tdh => {
                let (dir, ctl_reg) = if slot.def.id == Id::Rdh {
                    (Dir::Rx, off::rxdctl(slot.n))
                } else {
                    (Dir::Tx, off::txdctl(slot.n))
                };
                self.check_init_done(&slot);
                if self.regs.get(ctl_reg) & DCTL_ENABLE != 0 {
                    self.strict.record(slot.def.section, || {
                        format!("{}[{}] written while the {dir:?} queue is enabled; write the head only when the queue is disabled", slot.def.name, slot.n)
                    });
                    return;
                }
                word.store(v, Ordering::Release);
            }
            Id::Rxdctl => self.write_dctl(now, Dir::Rx, &slot, v),
            Id::Txdctl => self.write_dctl(now, Dir::Tx, &slot, v),
            _ => word.store(v, Ordering::Release),
        }
    }

    fn write_ctrl(&self, now: Duration, v: u32) {
        let mut ctl = self.ctl.lock();
        if v & (CTRL_RST | CTRL_LRST) != 0 {
            // §4.2.1.6.1: master disable (§5.2.5.3.2) before a software
            // reset; a driver that tried and timed out may reset anyway.
            let cur = self.regs.get(off::CTRL);
            let master_active = self.regs.get(off::STATUS) & STATUS_PCIE_MASTER_ENABLE != 0;
            if master_active && cur & CTRL_MASTER_DISABLE == 0 && !self.quiescent() {
                self.strict.record("4.2.1.6.1", || {
                    "CTRL.RST set with bus mastering still active; run the master-disable flow (§5.2.5.3.2) before a software reset".into()
                });
            }
            self.begin_reset(&mut ctl, now);
            return;
        }
        self.regs.set(off::CTRL, v);
        if v & CTRL_MASTER_DISABLE != 0 {
            self.schedule(&mut ctl, now + MASTER_DISABLE_DELAY, Event::MasterDisabled);
        } else {
            self.regs.or(off::STATUS, STATUS_PCIE_MASTER_ENABLE);
        }
    }

    /// No queue is enabled (nothing to quiesce before a reset).
    fn quiescent(&self) -> bool {
        (0..QUEUES).all(|n| {
            self.regs.get(off::rxdctl(n)) & DCTL_ENABLE == 0
                && self.regs.get(off::txdctl(n)) & DCTL_ENABLE == 0
        })
    }

    /// §4.6.7: RXCTRL.RXEN is set with the RX security block halted
    /// (SECRXCTRL.RX_DIS set and SECRXSTAT.SECRX_RDY read set), and
    /// RDRXCTL.CRCSTRIP must match HLREG0.RXCRCSTRP (§8.2.3.8.8).
    fn write_rxctrl(&self, slot: &Slot, v: u32) {
        let cur = self.regs.get(off::RXCTRL);
        if v & RXCTRL_RXEN != 0 && cur & RXCTRL_RXEN == 0 {
            self.check_init_done(slot);
            if self.regs.get(off::SECRXCTRL) & SECRXCTRL_RX_DIS == 0 {
                self.strict.record("4.6.7", || {
                    "RXCTRL.RXEN set while SECRXCTRL.RX_DIS is clear; halt the RX security path (RX_DIS, poll SECRXSTAT.SECRX_RDY) before enabling receive (§8.2.3.12.5)".into()
                });
            } else if self.regs.get(off::SECRXSTAT) & SECRXSTAT_SECRX_RDY == 0 {
                self.strict.record("4.6.7", || {
                    "RXCTRL.RXEN set before SECRXSTAT.SECRX_RDY reads set; poll SECRX_RDY after setting SECRXCTRL.RX_DIS".into()
                });
            }
            let strip_mac = self.regs.get(off::HLREG0) & HLREG0_RXCRCSTRP != 0;
            let strip_dma = self.regs.get(off::RDRXCTL) & RDRXCTL_CRCSTRIP != 0;
            if strip_mac != strip_dma {
                self.strict.record("8.2.3.8.8", || {
                    format!("RDRXCTL.CRCSTRIP ({strip_dma}) differs from HLREG0.RXCRCSTRP ({strip_mac}); they must be set the same")
                });
            }
        }
        self.regs.set(off::RXCTRL, v);
    }

    fn queue_regs(dir: Dir, n: usize) -> (usize, usize, usize, usize) {
        match dir {
            Dir::Rx => (off::rdbal(n), off::rdbah(n), off::rdlen(n), off::rxdctl(n)),
            Dir::Tx => (off::tdbal(n), off::tdbah(n), off::tdlen(n), off::txdctl(n)),
        }
    }

    /// Ring base/length/buffer/write-back registers.
    fn write_queue_config(&self, slot: &Slot, v: u32) {
        let n = slot.n;
        let name = slot.def.name;
        self.check_init_done(slot);
        let dir = if matches!(slot.def.id, Id::Rdbal | Id::Rdbah | Id::Rdlen | Id::Srrctl) {
            Dir::Rx
        } else {
            Dir::Tx
        };
        let (_, _, _, dctl) = Self::queue_regs(dir, n);
        if self.regs.get(dctl) & DCTL_ENABLE != 0 && !matches!(slot.def.id, Id::Tdwbal | Id::Tdwbah)
        {
            self.strict.record(slot.def.section, || {
                format!("{name}[{n}] changed while the queue is enabled; configure a queue before setting its ENABLE (§4.6.7/§4.6.8)")
            });
        }
        match slot.def.id {
            Id::Rdbal | Id::Tdbal if v & 0x7F != 0 => self.strict.record(slot.def.section, || {
                format!("{name}[{n}] = {v:#010x}: descriptor ring base must be 128-byte aligned")
            }),
            Id::Rdlen | Id::Tdlen if !v.is_multiple_of(128) || v == 0 => self.strict.record(slot.def.section, || {
                format!("{name}[{n}] = {v}: ring length must be a non-zero multiple of 128 bytes")
            }),
            Id::Tdwbal if v & TDWBAL_HEAD_WB_EN != 0 && v & 0b10 != 0 => self.strict.record("8.2.3.9.11", || {
                format!("TDWBAL[{n}] = {v:#010x}: head write-back address must be dword aligned")
            }),
            Id::Tdwbal if v & TDWBAL_HEAD_WB_EN != 0 && v & 0xC != 0 => {
                self.strict.record("TinyNF (empirical, 82599 §8.2.3.9.11)", || {
                    format!("TDWBAL[{n}] = {v:#010x}: the head write-back address must be 16-byte aligned in practice (the datasheet says dword/qword)")
                })
            }
            _ => {}
        }
        self.regs.word(slot.word).store(v, Ordering::Release);
    }

    /// The queue's ring as programmed: (base, length in bytes).
    pub fn ring(&self, dir: Dir, n: usize) -> (u64, u32) {
        let (bal, bah, len, _) = Self::queue_regs(dir, n);
        let base = u64::from(self.regs.get(bah)) << 32 | u64::from(self.regs.get(bal) & !0x7F);
        (base, self.regs.get(len))
    }

    /// RXDCTL/TXDCTL: ENABLE reads back set only once the queue is
    /// configured and the hardware enabled it (§4.6.7, §4.6.8).
    fn write_dctl(&self, now: Duration, dir: Dir, slot: &Slot, v: u32) {
        let n = slot.n;
        let reg = self.regs.word(slot.word);
        let effective = reg.load(Ordering::Acquire) & DCTL_ENABLE;
        let want = v & DCTL_ENABLE;
        reg.store((v & !DCTL_ENABLE) | effective, Ordering::Release);
        if want == effective {
            return;
        }
        if want != 0 {
            self.check_init_done(slot);
            if !self.queue_configured(dir, n, slot) {
                return; // never enables: the driver's poll times out
            }
            if dir == Dir::Tx && self.regs.get(off::DMATXCTL) & DMATXCTL_TE == 0 {
                self.strict.record("4.6.8", || {
                    format!(
                        "TXDCTL[{n}].ENABLE set before DMATXCTL.TE; enable the transmit path first"
                    )
                });
            }
            if dir == Dir::Tx {
                self.check_tx_threshold(n);
            }
        }
        let mut ctl = self.ctl.lock();
        self.schedule(
            &mut ctl,
            now + QUEUE_ENABLE_DELAY,
            Event::QueueEnable(dir, n, want != 0),
        );
    }

    /// §8.2.3.9.16, §4.6.11.3.4: TXPBTHRESH(0) must leave room in the
    /// transmit packet buffer for the largest frame: at most the buffer's
    /// size in KB less that frame in KB, rounded up (1518 bytes, or
    /// MAXFRS.MFS with HLREG0.JUMBOEN). Checked as a transmit queue is
    /// enabled, when both are set.
    fn check_tx_threshold(&self, n: usize) {
        let size_kb = (self.regs.get(off::TXPBSIZE0) >> 10) & 0x3FF;
        let thresh = self.regs.get(off::TXPBTHRESH0) & 0x3FF;
        let largest = if self.regs.get(off::HLREG0) & HLREG0_JUMBOEN != 0 {
            self.regs.get(off::MAXFRS) >> 16
        } else {
            1518
        };
        let room = size_kb.saturating_sub(largest.div_ceil(1024));
        if thresh > room {
            self.strict.record("8.2.3.9.16", || {
                format!(
                    "TXDCTL[{n}].ENABLE with TXPBTHRESH(0) = {thresh} KB: a {largest}-byte frame needs it at most {size_kb} - {} = {room} KB (the packet buffer less the largest frame, §4.6.11.3.4)",
                    largest.div_ceil(1024)
                )
            });
        }
    }

    /// A queue can be enabled when its ring is valid: aligned base, length a
    /// non-zero multiple of 128, and the whole ring inside DMA memory.
    fn queue_configured(&self, dir: Dir, n: usize, slot: &Slot) -> bool {
        let (base, len) = self.ring(dir, n);
        let (bal, ..) = Self::queue_regs(dir, n);
        let raw_base = self.regs.get(bal);
        let what = if dir == Dir::Rx { "RX" } else { "TX" };
        let section = if dir == Dir::Rx { "4.6.7" } else { "4.6.8" };
        if len == 0 || !len.is_multiple_of(128) || raw_base & 0x7F != 0 {
            self.strict.record(section, || {
                format!(
                    "{}[{n}].ENABLE set on an unconfigured {what} queue (base {base:#x}, length {len}); program a 128-byte aligned ring of a multiple of 128 bytes first",
                    slot.def.name
                )
            });
            return false;
        }
        if !self.dma.contains(base, len as usize) {
            self.strict.record(
                if dir == Dir::Rx {
                    "8.2.3.8.1"
                } else {
                    "8.2.3.9.5"
                },
                || format!("{what} ring {n} at {base:#x} (+{len} bytes) is not inside DMA memory"),
            );
            bump(&self.counters.dma_faults, 1);
            return false;
        }
        true
    }

    /// RDT/TDT: a doorbell; the data path polls it.
    fn write_tail(&self, dir: Dir, slot: &Slot, v: u32) {
        let n = slot.n;
        if self.strict.enabled() {
            let (_, _, len, dctl) = Self::queue_regs(dir, n);
            let enabled = self.regs.get(dctl) & DCTL_ENABLE != 0;
            let section = if dir == Dir::Rx { "4.6.7" } else { "4.6.8" };
            if self.in_reset.load(Ordering::Acquire) {
                self.strict.record("8.2.3.1.1", || {
                    format!("{}[{n}] written during a reset", slot.def.name)
                });
            } else if !enabled && v != 0 {
                self.strict.record(section, || {
                    format!(
                        "{}[{n}] = {v} written before {}[{n}].ENABLE reads back set",
                        slot.def.name,
                        if dir == Dir::Rx { "RXDCTL" } else { "TXDCTL" }
                    )
                });
            } else {
                let ring = self.regs.get(len) / 16;
                if ring != 0 && v >= ring {
                    self.strict.record(slot.def.section, || {
                        format!(
                            "{}[{n}] = {v} is beyond the ring of {ring} descriptors",
                            slot.def.name
                        )
                    });
                    return;
                }
            }
        }
        self.regs.word(slot.word).store(v, Ordering::Release);
    }
}
