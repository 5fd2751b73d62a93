//! Per-queue set-up and tear-down, shared by the agent and queue models:
//! §4.6.7 (receive queue), §4.6.8 (transmit queue) and their dynamic
//! disabling (§4.6.7.1.2, §4.6.8.1).

use crate::desc::DescRing;
use crate::error::{InitError, Step};
use crate::regs::{self, Regs};
use nfkit_hw::{Bar, Clock};
use std::time::Duration;

/// Descriptor format of a receive queue (SRRCTL.DESCTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxDescType {
    Legacy,
    AdvancedOneBuffer,
}

/// Transmit thresholds (TXDCTL, §8.2.3.9.10; §7.2.3.4 descriptor fetch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxThresholds {
    pub prefetch: u32,
    pub host: u32,
    pub write_back: u32,
}

fn poll(
    clock: &dyn Clock,
    timeout: Duration,
    step: Step,
    waited_for: &'static str,
    cond: impl FnMut() -> bool,
) -> Result<(), InitError> {
    crate::wait::wait_for(clock, timeout, step, waited_for, cond)
}

fn split(addr: u64) -> (u32, u32) {
    (addr as u32, (addr >> 32) as u32)
}

/// §4.6.7 per-queue steps: ring base and length, buffer size and
/// descriptor type, drop when out of descriptors, enable, wait for the
/// enable to read back, then bump the tail to hand the device
/// `ring.entries() - 1` descriptors (one stays back: RDH == RDT means empty).
/// The caller has already written a buffer address into every descriptor.
pub(crate) fn start_rx_queue<B: Bar>(
    r: &Regs<B>,
    clock: &dyn Clock,
    timeout: Duration,
    q: usize,
    ring: &DescRing,
    buffer_kib: u32,
    desc_type: RxDescType,
) -> Result<(), InitError> {
    let step = Step::RxQueueSetup;
    if r.is_set(&regs::RXDCTL, q, regs::rxdctl::ENABLE) {
        return Err(InitError::Device {
            step,
            what: format!("receive queue {q} is already enabled"),
        });
    }
    let (low, high) = split(ring.device_addr());
    r.write(&regs::RDBAL, q, low);
    r.write(&regs::RDBAH, q, high);
    r.write(&regs::RDLEN, q, ring.bytes() as u32);
    // Head and tail may only be written while the queue is disabled.
    r.write(&regs::RDH, q, 0);
    r.write(&regs::RDT, q, 0);
    let desc = match desc_type {
        RxDescType::Legacy => regs::srrctl::DESCTYPE_LEGACY,
        RxDescType::AdvancedOneBuffer => regs::srrctl::DESCTYPE_ADV_ONEBUF,
    };
    // BSIZEHEADER stays 0: no header split. DROP_EN: a frame that finds
    // no free descriptor is dropped and counted (QPRDC), it does not
    // block the shared packet buffer for the other queues.
    let srrctl = (r.read(&regs::SRRCTL, q)
        & !(regs::srrctl::BSIZEPACKET_MASK | regs::srrctl::DESCTYPE_MASK))
        | (buffer_kib & regs::srrctl::BSIZEPACKET_MASK)
        | desc
        | regs::srrctl::DROP_EN;
    r.write(&regs::SRRCTL, q, srrctl);
    // PSRTYPE (header split) and RSCCTL (coalescing) stay at their
    // defaults: neither feature is used.
    // DCA_RXCTRL bit 12 is reserved, defaults to 1, and must be 0.
    r.clear(&regs::DCA_RXCTRL, q, regs::dca_rxctrl::RESERVED_12);
    r.set(&regs::RXDCTL, q, regs::rxdctl::ENABLE);
    poll(
        clock,
        timeout,
        step,
        "RXDCTL.ENABLE to read back set",
        || r.is_set(&regs::RXDCTL, q, regs::rxdctl::ENABLE),
    )
    .inspect_err(|_| {
        // Withdraw the request: the ring is about to be freed, and a
        // queue that enabled late must not DMA into it.
        r.clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE);
    })?;
    r.write(&regs::RDT, q, (ring.entries() - 1) as u32);
    Ok(())
}

/// §4.6.8 per-queue steps: ring base and length, thresholds, optional
/// head write-back, enable and wait. The tail stays at 0 (empty ring).
/// DMATXCTL.TE was set by device initialization.
pub(crate) fn start_tx_queue<B: Bar>(
    r: &Regs<B>,
    clock: &dyn Clock,
    timeout: Duration,
    q: usize,
    ring: &DescRing,
    thresholds: TxThresholds,
    head_write_back: Option<u64>,
) -> Result<(), InitError> {
    let step = Step::TxQueueSetup;
    if r.is_set(&regs::TXDCTL, q, regs::txdctl::ENABLE) {
        return Err(InitError::Device {
            step,
            what: format!("transmit queue {q} is already enabled"),
        });
    }
    let (low, high) = split(ring.device_addr());
    r.write(&regs::TDBAL, q, low);
    r.write(&regs::TDBAH, q, high);
    r.write(&regs::TDLEN, q, ring.bytes() as u32);
    r.write(&regs::TDH, q, 0);
    r.write(&regs::TDT, q, 0);
    let txdctl = ((thresholds.prefetch & 0x7F) << regs::txdctl::PTHRESH_SHIFT)
        | ((thresholds.host & 0x7F) << regs::txdctl::HTHRESH_SHIFT)
        | ((thresholds.write_back & 0x7F) << regs::txdctl::WTHRESH_SHIFT);
    r.write(&regs::TXDCTL, q, txdctl);
    // Descriptor write-back with relaxed ordering could let a written-back
    // head be seen before the data it covers: keep ordering strict.
    r.clear(&regs::DCA_TXCTRL, q, regs::dca_txctrl::TX_DESC_WB_RO_EN);
    match head_write_back {
        Some(addr) => {
            let (low, high) = split(addr);
            r.write(&regs::TDWBAH, q, high);
            r.write(&regs::TDWBAL, q, low | regs::tdwbal::HEAD_WB_EN);
        }
        None => {
            r.write(&regs::TDWBAL, q, 0);
            r.write(&regs::TDWBAH, q, 0);
        }
    }
    r.set(&regs::TXDCTL, q, regs::txdctl::ENABLE);
    poll(
        clock,
        timeout,
        step,
        "TXDCTL.ENABLE to read back set",
        || r.is_set(&regs::TXDCTL, q, regs::txdctl::ENABLE),
    )
    .inspect_err(|_| r.clear(&regs::TXDCTL, q, regs::txdctl::ENABLE))
}

/// §4.6.7.1.2: disable a receive queue, wait for the enable bit to read 0,
/// then let in-flight DMA land before the buffers may be reused.
pub(crate) fn stop_rx_queue<B: Bar>(
    r: &Regs<B>,
    clock: &dyn Clock,
    timeout: Duration,
    q: usize,
) -> Result<(), InitError> {
    r.clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE);
    let done = poll(
        clock,
        timeout,
        Step::RxQueueStop,
        "RXDCTL.ENABLE to clear",
        || r.is_clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE),
    );
    clock.sleep(Duration::from_micros(100));
    done
}

/// §4.6.8.1: wait until the device has fetched everything up to the tail
/// (TDH == TDT), then disable the queue and wait for it to read 0.
pub(crate) fn stop_tx_queue<B: Bar>(
    r: &Regs<B>,
    clock: &dyn Clock,
    timeout: Duration,
    q: usize,
) -> Result<(), InitError> {
    let drained = poll(
        clock,
        timeout,
        Step::TxQueueStop,
        "TDH to reach TDT",
        || r.read(&regs::TDH, q) == r.read(&regs::TDT, q),
    );
    r.clear(&regs::TXDCTL, q, regs::txdctl::ENABLE);
    let disabled = poll(
        clock,
        timeout,
        Step::TxQueueStop,
        "TXDCTL.ENABLE to clear",
        || r.is_clear(&regs::TXDCTL, q, regs::txdctl::ENABLE),
    );
    drained.and(disabled)
}
