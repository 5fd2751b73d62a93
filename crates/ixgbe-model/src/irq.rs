//! Interrupts (datasheet §7.3) as the model raises them: queue causes
//! mapped to MSI-X vectors by IVAR, "other" causes (LSC) by IVAR_MISC,
//! per-vector masks (EIMS/EIMC and their _EX halves), auto-clear (EIAC),
//! auto-mask (EIAM with GPIE.EIAME), and EITR throttling on device time.
//! A message is delivered by signalling the vector's eventfd, which is
//! what VFIO gives a user-space driver (`VFIO_DEVICE_SET_IRQS`); the
//! vectors are set up through [`crate::SimPci`]'s `enable_msix`.
//!
//! The model's reading of the registers (82599 datasheet rev 3.3):
//! - §8.2.3.5.11 GPIE: bit 4 Multiple_MSIX (one vector per cause group;
//!   clear, the model delivers nothing: it offers no INTx or MSI), bit 30
//!   EIAME (auto-mask on), bit 31 PBA_support.
//! - §8.2.3.5.13 IVAR(n), n = queue / 2: four 8-bit entries, RX of queue
//!   2n at bits 7:0, TX of 2n at 15:8, RX of 2n+1 at 23:16, TX of 2n+1 at
//!   31:24; each entry is a 6-bit vector and a valid bit (7).
//!   §8.2.3.5.14 IVAR_MISC: bits 15:8 the vector of the other causes.
//! - §8.2.3.5.1 EICR, MSI-X mode: bits 15:0 the causes of vectors 0-15,
//!   bits 30:16 other causes (LSC is bit 20). Vectors 16-63 have no EICR
//!   bit, so their cause always clears when the message is sent. EICR
//!   reads clear it; writing 1s clears those bits.
//! - §8.2.3.5.3-4/.8-9 EIMS/EIMC: EIMS bits 15:0 are vectors 0-15 (the
//!   same bits as EIMS_EX(0) 15:0), 30:16 the other causes; EIMS_EX(0/1)
//!   vectors 0-31/32-63. An unmasked vector whose cause is pending fires.
//! - §8.2.3.5.5 EIAC: bits 15:0 auto-clear the cause of vectors 0-15 when
//!   the message is sent. §8.2.3.5.6/.10 EIAM, EIAM_EX: with GPIE.EIAME,
//!   the vector's EIMS bit clears when its message is sent (auto-mask);
//!   the driver re-enables it.
//! - §8.2.3.5.12 EITR(v): bits 11:3 the minimum interval between two
//!   messages of vector v in 2 µs units (at 1 and 10 Gb/s); a cause
//!   raised sooner waits until the interval has passed (throttled), then
//!   fires if still pending and unmasked.
//! - Other causes fire their vector when one becomes set while enabled
//!   (an edge), throttled by that vector's EITR; they are never
//!   auto-cleared: the driver clears EICR.
//!
//! Strict rules (a cause enabled with no vector): unmasking a vector
//! that MSI-X has not set up (§7.3.1), unmasking vectors in MSI-X with
//! GPIE.Multiple_MSIX clear (§8.2.3.5.11), enabling an other cause
//! with no valid IVAR_MISC entry (§8.2.3.5.14), and a raised vector with
//! no eventfd (counted as lost).

use crate::strict::Strict;
use nfkit_hw::EventFd;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// MSI-X vectors of one 82599 port (§7.3.1).
pub const VECTORS: usize = 64;
/// EITR registers: 0-23 at 0x00820, 24-127 at 0x12300 (§8.2.3.5.12).
pub const EITRS: usize = 128;

pub mod bits {
    // GPIE (§8.2.3.5.11)
    pub const GPIE_MULTIPLE_MSIX: u32 = 1 << 4;
    pub const GPIE_EIAME: u32 = 1 << 30;
    // EICR (§8.2.3.5.1)
    pub const EICR_RTXQ: u32 = 0xFFFF;
    pub const EICR_OTHER: u32 = 0x7FFF_0000;
    pub const EICR_LSC: u32 = 1 << 20;
    // IVAR (§8.2.3.5.13-14)
    pub const IVAR_VALID: u32 = 0x80;
    pub const IVAR_VECTOR: u32 = 0x3F;
    pub const IVAR_MISC_OTHER_SHIFT: u32 = 8;
    // EITR (§8.2.3.5.12)
    pub const EITR_INTERVAL_MASK: u32 = 0x1FF << 3;
    /// Units of the interval field at 1 and 10 Gb/s.
    pub const EITR_UNIT_NS: u64 = 2_000;
}
use bits::*;

/// The interrupt registers the model routes here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqReg {
    Eicr,
    Eics,
    Eims,
    Eimc,
    Eiac,
    Eiam,
    Gpie,
    IvarMisc,
    Ivar(usize),
    Eitr(usize),
    EicsEx(usize),
    EimsEx(usize),
    EimcEx(usize),
    EiamEx(usize),
}

/// What the interrupt logic did, for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IrqCounters {
    /// Messages sent (eventfds signalled), per vector.
    pub delivered: Vec<u64>,
    /// Causes that found their vector inside its EITR interval.
    pub throttled: u64,
    /// Messages due on a vector with no eventfd (MSI-X not set up).
    pub lost_no_vector: u64,
    /// Eventfd writes that failed.
    pub signal_errors: u64,
}

impl IrqCounters {
    pub fn total(&self) -> u64 {
        self.delivered.iter().sum()
    }
}

struct State {
    gpie: u32,
    /// Pending cause per vector (EICR 15:0 for vectors 0-15).
    cause: u64,
    /// Unmasked vectors (EIMS_EX).
    mask: u64,
    /// EICR 30:16 and EIMS 30:16.
    other_cause: u32,
    other_mask: u32,
    /// The other vector owes a message (an other cause rose while enabled).
    other_pending: bool,
    eiac: u32,
    eiam: u64,
    eiam_other: u32,
    ivar: [u32; VECTORS],
    ivar_misc: u32,
    eitr: [u32; EITRS],
    last_fire: [Option<Duration>; VECTORS],
    due: [Option<Duration>; VECTORS],
    counters: IrqCounters,
    /// Link state last seen (for LSC).
    link_up: bool,
}

impl State {
    fn new() -> State {
        State {
            gpie: 0,
            cause: 0,
            mask: 0,
            other_cause: 0,
            other_mask: 0,
            other_pending: false,
            eiac: 0,
            eiam: 0,
            eiam_other: 0,
            ivar: [0; VECTORS],
            ivar_misc: 0,
            eitr: [0; EITRS],
            last_fire: [None; VECTORS],
            due: [None; VECTORS],
            counters: IrqCounters {
                delivered: vec![0; VECTORS],
                ..IrqCounters::default()
            },
            link_up: false,
        }
    }

    fn msix(&self) -> bool {
        self.gpie & GPIE_MULTIPLE_MSIX != 0
    }

    fn other_vector(&self) -> Option<usize> {
        let e = self.ivar_misc >> IVAR_MISC_OTHER_SHIFT;
        (e & IVAR_VALID != 0).then_some((e & IVAR_VECTOR) as usize)
    }

    fn interval(&self, v: usize) -> Duration {
        let units = u64::from((self.eitr[v] & EITR_INTERVAL_MASK) >> 3);
        Duration::from_nanos(units * EITR_UNIT_NS)
    }

    fn eicr(&self) -> u32 {
        (self.cause as u32 & EICR_RTXQ) | self.other_cause
    }

    /// Send vector `v`'s message if it is owed, unmasked and outside its
    /// EITR interval; else remember when to look again.
    fn consider(&mut self, v: usize, now: Duration, out: &mut Vec<usize>) {
        let bit = 1u64 << v;
        let is_other = self.other_vector() == Some(v);
        let owed = (self.msix() && self.cause & bit != 0 && self.mask & bit != 0)
            || (is_other && self.other_pending && self.other_cause & self.other_mask != 0);
        if !owed {
            self.due[v] = None;
            return;
        }
        if let Some(last) = self.last_fire[v] {
            let at = last + self.interval(v);
            if now < at {
                if self.due[v].is_none() {
                    self.counters.throttled += 1;
                }
                self.due[v] = Some(at);
                return;
            }
        }
        self.due[v] = None;
        self.last_fire[v] = Some(now);
        if self.cause & bit != 0 && (v >= 16 || self.eiac & (1 << v) != 0) {
            self.cause &= !bit;
        }
        if self.gpie & GPIE_EIAME != 0 && self.eiam & bit != 0 {
            self.mask &= !bit;
        }
        if is_other {
            self.other_pending = false;
            if self.gpie & GPIE_EIAME != 0 {
                self.other_mask &= !self.eiam_other;
            }
        }
        out.push(v);
    }

    fn next_due(&self) -> u64 {
        self.due
            .iter()
            .flatten()
            .map(|d| d.as_nanos() as u64)
            .min()
            .unwrap_or(u64::MAX)
    }
}

pub(crate) struct Irq {
    fault: crate::IrqFault,
    st: Mutex<State>,
    /// The MSI-X vectors' eventfds (empty: MSI-X not enabled).
    vectors: RwLock<Vec<Arc<EventFd>>>,
    /// Earliest throttled message (device ns), u64::MAX if none.
    next_due: AtomicU64,
    /// Link state last seen, to look at the lock only on a change.
    link_seen: AtomicBool,
}

impl Irq {
    pub fn new(fault: crate::IrqFault) -> Irq {
        Irq {
            fault,
            st: Mutex::new(State::new()),
            vectors: RwLock::new(Vec::new()),
            next_due: AtomicU64::new(u64::MAX),
            link_seen: AtomicBool::new(false),
        }
    }

    /// A device reset (§4.2.1.6): every interrupt register to its
    /// default (all masked); the MSI-X set-up, which lives in PCI
    /// configuration space, is kept.
    pub fn reset(&self) {
        let mut st = self.st.lock();
        let counters = std::mem::take(&mut st.counters);
        let link_up = st.link_up;
        *st = State::new();
        st.counters = counters;
        st.link_up = link_up;
        self.next_due.store(u64::MAX, Ordering::Release);
    }

    /// MSI-X enabled with these vectors (what VFIO_DEVICE_SET_IRQS does).
    pub fn set_vectors(&self, fds: Vec<Arc<EventFd>>) {
        *self.vectors.write() = fds;
    }

    pub fn counters(&self) -> IrqCounters {
        self.st.lock().counters.clone()
    }

    pub fn read(&self, reg: IrqReg) -> u32 {
        let mut st = self.st.lock();
        match reg {
            IrqReg::Eicr => {
                // §8.2.3.5.1: clear on read
                let v = st.eicr();
                st.cause &= !u64::from(EICR_RTXQ);
                st.other_cause = 0;
                v
            }
            IrqReg::Eims => (st.mask as u32 & EICR_RTXQ) | st.other_mask,
            IrqReg::Eiac => st.eiac,
            IrqReg::Eiam => (st.eiam as u32 & EICR_RTXQ) | st.eiam_other,
            IrqReg::Gpie => st.gpie,
            IrqReg::IvarMisc => st.ivar_misc,
            IrqReg::Ivar(n) => st.ivar.get(n).copied().unwrap_or(0),
            IrqReg::Eitr(n) => st.eitr.get(n).copied().unwrap_or(0),
            IrqReg::EimsEx(n) => (st.mask >> (32 * (n & 1))) as u32,
            IrqReg::EiamEx(n) => (st.eiam >> (32 * (n & 1))) as u32,
            IrqReg::Eics | IrqReg::Eimc | IrqReg::EicsEx(_) | IrqReg::EimcEx(_) => 0,
        }
    }

    pub fn write(&self, reg: IrqReg, v: u32, now: Duration, strict: &Strict) {
        let mut out = Vec::new();
        {
            let mut st = self.st.lock();
            let nvec = self.vectors.read().len();
            let before = st.mask;
            let other_before = st.other_cause & st.other_mask;
            match reg {
                IrqReg::Eicr => {
                    st.cause &= !u64::from(v & EICR_RTXQ);
                    st.other_cause &= !(v & EICR_OTHER);
                }
                IrqReg::Eics => {
                    st.cause |= u64::from(v & EICR_RTXQ);
                    st.other_cause |= v & EICR_OTHER;
                }
                IrqReg::EicsEx(n) => st.cause |= u64::from(v) << (32 * (n & 1)),
                IrqReg::Eims => {
                    st.mask |= u64::from(v & EICR_RTXQ);
                    st.other_mask |= v & EICR_OTHER;
                }
                IrqReg::EimsEx(n) => st.mask |= u64::from(v) << (32 * (n & 1)),
                IrqReg::Eimc => {
                    st.mask &= !u64::from(v & EICR_RTXQ);
                    st.other_mask &= !(v & EICR_OTHER);
                }
                IrqReg::EimcEx(n) => st.mask &= !(u64::from(v) << (32 * (n & 1))),
                IrqReg::Eiac => st.eiac = v & EICR_RTXQ,
                IrqReg::Eiam => {
                    st.eiam = (st.eiam & !u64::from(EICR_RTXQ)) | u64::from(v & EICR_RTXQ);
                    st.eiam_other = v & EICR_OTHER;
                }
                IrqReg::EiamEx(n) => {
                    let sh = 32 * (n & 1);
                    st.eiam = (st.eiam & !(0xFFFF_FFFFu64 << sh)) | u64::from(v) << sh;
                }
                IrqReg::Gpie => st.gpie = v,
                IrqReg::IvarMisc => st.ivar_misc = v,
                IrqReg::Ivar(n) => {
                    if let Some(r) = st.ivar.get_mut(n) {
                        *r = v;
                    }
                }
                IrqReg::Eitr(n) => {
                    // bit 31 (CNT_WDIS) is an instruction, not state
                    if let Some(r) = st.eitr.get_mut(n) {
                        *r = v & !(1 << 31);
                    }
                }
            }
            let unmasked = st.mask & !before;
            if unmasked != 0 {
                check_unmask(&st, unmasked, nvec, strict);
            }
            if matches!(reg, IrqReg::Eims) && v & EICR_OTHER != 0 && st.other_vector().is_none() {
                strict.record("8.2.3.5.14", || {
                    format!("other interrupt causes {:#x} enabled (EIMS) with no valid IVAR_MISC vector for them", v & EICR_OTHER)
                });
            }
            // an other cause that is now set and enabled, and was not, is owed
            if st.other_cause & st.other_mask & !other_before != 0 {
                st.other_pending = true;
            }
            for vec in 0..VECTORS {
                st.consider(vec, now, &mut out);
            }
            self.next_due.store(st.next_due(), Ordering::Release);
        }
        self.deliver(&out);
    }

    /// The queue cause of RX or TX queue `q` (a descriptor written back).
    pub fn queue_cause(&self, tx: bool, q: usize, now: Duration) {
        let mut out = Vec::new();
        {
            let mut st = self.st.lock();
            let Some(&reg) = st.ivar.get(q / 2) else {
                return;
            };
            let shift = 16 * (q as u32 & 1) + if tx { 8 } else { 0 };
            let entry = (reg >> shift) & 0xFF;
            if entry & IVAR_VALID == 0 {
                return; // the cause is mapped to no vector: no interrupt
            }
            let v = (entry & IVAR_VECTOR) as usize;
            // outside MSI-X the vector index names an EICR bit (15:0)
            let v = if st.msix() { v } else { v & 15 };
            st.cause |= 1 << v;
            st.consider(v, now, &mut out);
            self.next_due.store(st.next_due(), Ordering::Release);
        }
        self.deliver(&out);
    }

    /// Raise other cause bits (EICR 30:16), e.g. LSC.
    pub fn other_cause(&self, cause: u32, now: Duration) {
        let mut out = Vec::new();
        {
            let mut st = self.st.lock();
            let new = cause & !st.other_cause;
            st.other_cause |= cause;
            if new & st.other_mask != 0 {
                st.other_pending = true;
            }
            if let Some(v) = st.other_vector() {
                st.consider(v, now, &mut out);
            }
            self.next_due.store(st.next_due(), Ordering::Release);
        }
        self.deliver(&out);
    }

    /// Device time moved on: send throttled messages that are now due,
    /// and raise LSC if the link changed.
    pub fn tick(&self, now: Duration, link_up: bool) {
        if self.fault == crate::IrqFault::Storm {
            for fd in self.vectors.read().iter() {
                let _ = fd.signal();
            }
        }
        let link_changed = self.link_seen.load(Ordering::Acquire) != link_up;
        if !link_changed && (now.as_nanos() as u64) < self.next_due.load(Ordering::Acquire) {
            return;
        }
        if link_changed {
            self.link_seen.store(link_up, Ordering::Release);
            let changed = {
                let mut st = self.st.lock();
                let c = st.link_up != link_up;
                st.link_up = link_up;
                c
            };
            if changed {
                self.other_cause(EICR_LSC, now);
            }
        }
        let mut out = Vec::new();
        {
            let mut st = self.st.lock();
            for v in 0..VECTORS {
                if st.due[v].is_some_and(|d| d <= now) {
                    st.consider(v, now, &mut out);
                }
            }
            self.next_due.store(st.next_due(), Ordering::Release);
        }
        self.deliver(&out);
    }

    fn deliver(&self, vectors: &[usize]) {
        if vectors.is_empty() {
            return;
        }
        let fds = self.vectors.read();
        let mut lost = 0;
        let mut errors = 0;
        for &v in vectors {
            match fds.get(v) {
                Some(_) if self.fault == crate::IrqFault::Silent => {}
                Some(fd) => {
                    if fd.signal().is_err() {
                        errors += 1;
                    }
                }
                None => lost += 1,
            }
        }
        drop(fds);
        let mut st = self.st.lock();
        for &v in vectors {
            st.counters.delivered[v] += 1;
        }
        st.counters.lost_no_vector += lost;
        st.counters.signal_errors += errors;
    }
}

fn check_unmask(st: &State, unmasked: u64, nvec: usize, strict: &Strict) {
    if !st.msix() {
        if nvec > 0 {
            strict.record("8.2.3.5.11", || {
                format!("vectors {unmasked:#x} unmasked with MSI-X enabled but GPIE.Multiple_MSIX clear; set it before using per-vector interrupts")
            });
        }
        return;
    }
    let beyond = if nvec >= VECTORS {
        0
    } else {
        unmasked & !((1u64 << nvec) - 1)
    };
    if beyond != 0 {
        strict.record("7.3.1", || {
            format!("MSI-X vectors {beyond:#x} unmasked (EIMS) but MSI-X has {nvec} vectors set up: an interrupt enabled with no vector")
        });
    }
}
