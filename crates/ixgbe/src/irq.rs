//! Interrupts (datasheet §7.3) for hybrid polling: MSI-X with one vector
//! per receive queue and one for the "other" causes (link status change),
//! set up after initialization when the platform gives MSI-X (VFIO, or
//! the model), and armed by the polling loop only before it sleeps.
//!
//! Set-up ([`Device::enable_interrupts`], §7.3.1 and the registers of
//! §8.2.3.5):
//! 1. MSI-X with `queues + 1` vectors from the platform
//!    (`PciFunction::enable_msix`: VFIO_DEVICE_SET_IRQS, one eventfd per
//!    vector). sysfs/uio has none: the caller then polls.
//! 2. GPIE: Multiple_MSIX (a vector per cause group), EIAME (auto-mask),
//!    PBA_support (§8.2.3.5.11).
//! 3. IVAR: receive queue q's cause to vector q (§8.2.3.5.13); IVAR_MISC:
//!    the other causes to vector `queues` (§8.2.3.5.14).
//! 4. EITR(v): the configured minimum interval between two messages of
//!    a vector ([`crate::DeviceConfig::interrupt_interval`], §8.2.3.5.12).
//! 5. EIAC: queue vectors' causes clear when their message is sent;
//!    EIAM_EX: queue vectors mask themselves when it is sent
//!    (§8.2.3.5.5, §8.2.3.5.10), so one sleep gets at most one message.
//! 6. EIMS: LSC enabled (§8.2.3.5.3); queue vectors stay masked.
//!
//! Arming ([`QueueIrq::arm`]) clears the vector's stale cause (EICR is
//! write-1-to-clear; while polling, every received packet set it) and
//! unmasks it (EIMS_EX); the loop then re-checks the ring before it
//! sleeps (`nfkit_port::idle`), so a packet that came before the unmask
//! is found by the re-check and one that came after raises the message.
//! [`QueueIrq::disarm`] masks it again (EIMC_EX).

use crate::regs::{self, Regs};
use crate::Device;
use nfkit_hw::{Bar, EventFd, HwError, PciFunction};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// Receive queues that get a vector: EICR and EIAC carry causes of
/// vectors 0-15 only (§8.2.3.5.1, §8.2.3.5.5), and RSS reaches 16 queues.
pub const MAX_QUEUE_VECTORS: usize = 16;

/// One receive queue's MSI-X vector.
pub struct QueueIrq<B> {
    regs: Regs<B>,
    vector: usize,
    fd: Arc<EventFd>,
}

impl<B: Bar> QueueIrq<B> {
    pub fn vector(&self) -> usize {
        self.vector
    }

    /// The eventfd the vector signals.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Before sleeping: forget old signals, clear the stale cause, unmask
    /// the vector. False if the eventfd failed (the loop then polls).
    pub fn arm(&self) -> bool {
        if self.fd.drain().is_err() {
            return false;
        }
        let bit = 1u32 << (self.vector % 32);
        self.regs.write(&regs::EICR, 0, bit & regs::eicr::RTXQ);
        self.regs.write(&regs::EIMS_EX, self.vector / 32, bit);
        true
    }

    /// Back to polling: mask the vector (the message, if one came, already
    /// masked it: auto-mask).
    pub fn disarm(&self) {
        let bit = 1u32 << (self.vector % 32);
        self.regs.write(&regs::EIMC_EX, self.vector / 32, bit);
    }
}

/// The vector of the other causes: link status change.
pub struct LinkIrq<B> {
    regs: Regs<B>,
    vector: usize,
    fd: Arc<EventFd>,
}

impl<B: Bar> LinkIrq<B> {
    pub fn vector(&self) -> usize {
        self.vector
    }

    /// The eventfd signalled when the link changes.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// After a signal: reset the eventfd and clear EICR.LSC (other causes
    /// are not auto-cleared), so the next change signals again. Returns
    /// the signals since the last call.
    pub fn ack(&self) -> u64 {
        let n = self.fd.drain().unwrap_or(0);
        self.regs.write(&regs::EICR, 0, regs::eicr::LSC);
        n
    }
}

/// The interrupt set-up of one device.
pub struct Interrupts<B> {
    /// Receive queue q's vector (`None` past [`MAX_QUEUE_VECTORS`]).
    pub queues: Vec<Option<QueueIrq<B>>>,
    pub link: LinkIrq<B>,
}

impl<B: Bar> Device<B> {
    /// MSI-X interrupts for this device's receive queues and its link
    /// (module documentation). `pci` must be the function the device was
    /// initialized from. `HwError::Unsupported` when the platform has no
    /// MSI-X (sysfs/uio): keep polling.
    pub fn enable_interrupts<P: PciFunction<Bar = B>>(
        &self,
        pci: &P,
    ) -> Result<Interrupts<B>, HwError> {
        let r = &self.shared.regs;
        let nrx = self.config().rx_queues;
        let nq = nrx.min(MAX_QUEUE_VECTORS);
        let other = nq;
        let fds = pci.enable_msix(nq as u32 + 1)?;
        let interval = regs::eitr::interval(self.config().interrupt_interval);
        r.write(
            &regs::GPIE,
            0,
            regs::gpie::MULTIPLE_MSIX | regs::gpie::EIAME | regs::gpie::PBA_SUPPORT,
        );
        for q in 0..nq {
            let sh = regs::ivar::shift(q, false);
            r.set_field(
                &regs::IVAR,
                q / 2,
                0xFF << sh,
                (q as u32 | regs::ivar::VALID) << sh,
            );
            r.write(&regs::EITR, q, interval | regs::eitr::CNT_WDIS);
        }
        // LEFT ALONE (§8.2.3.5.13): transmit causes map to no vector: the
        // queue model reclaims sent buffers when it next transmits, so a
        // sleeping loop has nothing to wake for on transmit.
        // LEFT ALONE (§8.2.3.5.13): receive queues past the sixteenth get
        // no vector (EICR and EIAC stop at vector 15): a loop holding one
        // keeps polling.
        let sh = regs::ivar_misc::OTHER_SHIFT;
        r.set_field(
            &regs::IVAR_MISC,
            0,
            0xFF << sh,
            (other as u32 | regs::ivar::VALID) << sh,
        );
        r.write(&regs::EITR, other, interval | regs::eitr::CNT_WDIS);
        let queue_bits = ((1u64 << nq) - 1) as u32;
        r.write(&regs::EIAC, 0, queue_bits);
        r.write(&regs::EIAM_EX, 0, queue_bits);
        // DEVIATION (§7.3.1): queue vectors stay masked after the set-up:
        // the loop polls with them masked and unmasks one only before it
        // sleeps (`QueueIrq::arm`), as Linux NAPI does.
        let _ = r.read(&regs::EICR, 0); // causes from before the set-up
        r.write(&regs::EIMS, 0, regs::eicr::LSC);
        let mut queues: Vec<Option<QueueIrq<B>>> = (0..nq)
            .map(|q| {
                Some(QueueIrq {
                    regs: r.clone(),
                    vector: q,
                    fd: fds[q].clone(),
                })
            })
            .collect();
        queues.resize_with(nrx, || None);
        Ok(Interrupts {
            queues,
            link: LinkIrq {
                regs: r.clone(),
                vector: other,
                fd: fds[other].clone(),
            },
        })
    }
}
