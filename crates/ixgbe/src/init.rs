//! Device initialization: a walk through datasheet §4.6.3 "Initialization
//! Sequence", one function per step, in order.
//!
//! What is *not* written matters as much as what is. As in TinyNF, every
//! deliberate non-action and every departure from §4.6.3's order carries
//! a tag in one format (82599 datasheet rev. 3.3 sections), checked by
//! `tests/init_tags.rs`:
//!
//! ```text
//! // LEFT ALONE (§x.y): why the register keeps its default / the step is skipped
//! // DEVIATION (§x.y): what differs from the section, and why
//! ```

use crate::error::{InitError, Step};
use crate::pci;
use crate::regs::{self, Regs};
use crate::rss;
use crate::wait::{wait_for, wait_until};
use crate::DeviceConfig;
use nfkit_hw::{Bar, Clock, PciFunction};
use std::sync::Arc;
use std::time::Duration;

/// What initialization found out besides success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InitReport {
    /// STATUS.PCIE_MASTER_ENABLE_STATUS did not clear, so the data path
    /// was flushed and the device reset twice (§5.2.5.3.2).
    pub master_disable_fallback: bool,
    /// How long the link took to come up (on the driver's clock).
    pub link_wait: Duration,
}

/// The result of a successful initialization.
pub(crate) struct Initialized<B> {
    pub regs: Regs<B>,
    pub mac: [u8; 6],
    pub report: InitReport,
}

/// Initialize the 82599 behind `pci` (§4.6.3).
pub(crate) fn initialize<P: PciFunction>(
    pci: &P,
    clock: &dyn Clock,
    cfg: &DeviceConfig,
) -> Result<Initialized<P::Bar>, InitError> {
    let bar = pci::open(pci)?;
    let init = Init {
        regs: Regs::new(Arc::new(bar)),
        clock,
        cfg,
    };
    // LEFT ALONE (§4.6.3.1): interrupts are not masked before the reset,
    // only after it: the reset masks every cause itself, and nothing is
    // unmasked until `irq.rs` sets interrupts up after initialization.
    // DEVIATION (§4.6.3): receive queues a previous driver left running
    // are disabled before the reset, which the sequence does not list:
    // master disable needs them off first (§4.6.7.1.2, §5.2.5.3.2).
    init.disable_rx_queues()?;
    // DEVIATION (§4.6.3): bus mastering is disabled before the reset,
    // which the sequence does not list: a software reset needs it first
    // (§4.2.1.6.1), so no DMA is cut off half-way.
    let master_disable_fallback = init.master_disable(pci)?;
    init.global_reset()?;
    init.disable_interrupts();
    init.wait_eeprom_auto_read()?;
    init.wait_dma_init_done()?;
    // LEFT ALONE (§4.6.4): AUTOC/AUTOC2 are loaded from the EEPROM, which
    // describes the board's PHY/module; the driver trusts that set-up and
    // only waits for the link at the end, so link training overlaps the
    // rest of the set-up.
    init.map_queue_statistics();
    init.init_receive_filters();
    init.dcb_and_virtualization_off();
    init.init_transmit();
    // DEVIATION (§4.6.3): RXEN, the last step of receive initialization
    // (§4.6.7), comes after transmit initialization (§4.6.8): frames are
    // let in only once everything else is configured (no receive queue
    // is enabled yet either way). TinyNF sets it later still, with its
    // first receive queue.
    init.enable_receive()?;
    let link_wait = init.wait_link_up()?;
    let mac = init.read_mac();
    Ok(Initialized {
        regs: init.regs,
        mac,
        report: InitReport {
            master_disable_fallback,
            link_wait,
        },
    })
}

struct Init<'a, B> {
    regs: Regs<B>,
    clock: &'a dyn Clock,
    cfg: &'a DeviceConfig,
}

impl<B: Bar> Init<'_, B> {
    fn poll(
        &self,
        step: Step,
        waited_for: &'static str,
        cond: impl FnMut() -> bool,
    ) -> Result<(), InitError> {
        wait_for(self.clock, self.cfg.poll_timeout, step, waited_for, cond)
    }

    /// §4.6.7.1.2, required before master disable: a previous driver may
    /// have left receive queues running. Clear RXDCTL.ENABLE on each
    /// enabled queue, wait for it to read 0, then give in-flight DMA
    /// 100 µs to land. Queues already disabled (the power-on state) are
    /// left alone.
    fn disable_rx_queues(&self) -> Result<(), InitError> {
        let r = &self.regs;
        for q in 0..regs::QUEUES {
            if r.is_clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE) {
                continue;
            }
            r.clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE);
            self.poll(Step::DisableRxQueues, "RXDCTL.ENABLE to clear", || {
                r.is_clear(&regs::RXDCTL, q, regs::rxdctl::ENABLE)
            })?;
            self.clock.sleep(Duration::from_micros(100));
        }
        Ok(())
    }

    /// §5.2.5.3.2 "Master Disable" (required before a software reset by
    /// §4.2.1.6.1): set CTRL.MASTER_DISABLE and wait for
    /// STATUS.PCIE_MASTER_ENABLE_STATUS to clear. If it does not (flow
    /// control or link down can hold it, specification update #9), and
    /// no PCIe transaction is pending, flush the data path and issue the
    /// first of two consecutive resets; `global_reset` issues the second.
    /// Returns whether the fallback was taken.
    fn master_disable<P: PciFunction>(&self, pci: &P) -> Result<bool, InitError> {
        let r = &self.regs;
        r.set(&regs::CTRL, 0, regs::ctrl::MASTER_DISABLE);
        let cleared = wait_until(self.clock, self.cfg.poll_timeout, || {
            r.is_clear(&regs::STATUS, 0, regs::status::PCIE_MASTER_ENABLE_STATUS)
        });
        if cleared {
            return Ok(false);
        }
        if pci::transactions_pending(pci)? {
            return Err(InitError::Device {
                step: Step::MasterDisable,
                what:
                    "master enable status stuck and PCIe Device Status reports transactions pending"
                        .into(),
            });
        }
        tracing::warn!(
            "82599: master disable did not complete, flushing the data path and resetting twice"
        );
        self.flush_data_path();
        // The first of the "two consecutive software resets"; the
        // clarification asks for more than 1 µs between them, and
        // §8.2.3.1.1/§4.6.3.2 for no access within 1 ms / 10 ms of a
        // reset, so the first reset is simply run to completion.
        self.global_reset()?;
        Ok(true)
    }

    /// Specification update #9: inhibit transmission (loopback on,
    /// receive off), pulse GCR_EXT.BUFFERS_CLEAR_FUNC for 20 µs, undo.
    fn flush_data_path(&self) {
        let r = &self.regs;
        r.set(&regs::HLREG0, 0, regs::hlreg0::LPBK);
        r.clear(&regs::RXCTRL, 0, regs::rxctrl::RXEN);
        r.set(&regs::GCR_EXT, 0, regs::gcr_ext::BUFFERS_CLEAR_FUNC);
        self.clock.sleep(Duration::from_micros(20));
        r.clear(&regs::HLREG0, 0, regs::hlreg0::LPBK);
        r.clear(&regs::GCR_EXT, 0, regs::gcr_ext::BUFFERS_CLEAR_FUNC);
    }

    /// §4.6.3.2 "Global Reset and General Configuration": set CTRL.RST
    /// (with LRST, the "device reset" of §8.2.3.1.1), wait for the bit to
    /// self-clear, then wait the 10 ms the section asks for before
    /// touching the device further.
    fn global_reset(&self) -> Result<(), InitError> {
        let r = &self.regs;
        r.set(&regs::CTRL, 0, regs::ctrl::RST | regs::ctrl::LRST);
        // §8.2.3.1.1: the reset takes about 1 ms; the bit reads 1 until done.
        self.clock.sleep(Duration::from_millis(1));
        self.poll(Step::GlobalReset, "CTRL.RST to self-clear", || {
            r.is_clear(&regs::CTRL, 0, regs::ctrl::RST)
        })?;
        self.clock.sleep(Duration::from_millis(10));
        Ok(())
    }

    /// §4.6.3.1 "Interrupts During Initialization": mask every interrupt
    /// cause in all three EIMC registers (§7.3.1). Nothing is unmasked
    /// until `irq.rs` sets interrupts up (the disable before the reset is
    /// skipped, see `initialize`).
    fn disable_interrupts(&self) {
        let r = &self.regs;
        r.write(&regs::EIMC, 0, regs::eimc::ALL_0);
        for i in 0..regs::EIMC_EX.count() {
            r.write(&regs::EIMC_EX, i, regs::eimc::ALL_EX);
        }
    }

    /// §4.6.3: "wait for EEPROM auto read completion" (EEC.AUTO_RD), then
    /// require an EEPROM (EEC.EE_PRES) whose checksum firmware accepted
    /// (FWSM.EXT_ERR_IND = 0): the MAC address and link set-up come from it.
    fn wait_eeprom_auto_read(&self) -> Result<(), InitError> {
        let r = &self.regs;
        let step = Step::EepromAutoRead;
        self.poll(step, "EEC.AUTO_RD", || {
            r.is_set(&regs::EEC, 0, regs::eec::AUTO_RD)
        })?;
        if r.is_clear(&regs::EEC, 0, regs::eec::EE_PRES) {
            return Err(InitError::EepromAbsent { step });
        }
        let code = (r.read(&regs::FWSM, 0) & regs::fwsm::EXT_ERR_IND) >> 19;
        if code != 0 {
            return Err(InitError::EepromChecksum { step, code });
        }
        Ok(())
    }

    /// §4.6.3: "wait for DMA initialization done" (RDRXCTL.DMAIDONE).
    fn wait_dma_init_done(&self) -> Result<(), InitError> {
        let r = &self.regs;
        self.poll(Step::DmaInitDone, "RDRXCTL.DMAIDONE", || {
            r.is_set(&regs::RDRXCTL, 0, regs::rdrxctl::DMAIDONE)
        })
    }

    /// §4.6.5 "Statistics". There are 16 sets of per-queue counters
    /// (QPRC, QPTC, QPRDC...); by default every queue counts in set 0.
    /// Map queue q to set q mod 16: queues 0-15 get their own set, higher
    /// queues share.
    fn map_queue_statistics(&self) {
        let r = &self.regs;
        // LEFT ALONE (§4.6.5): no counter is read to clear it: the global
        // reset cleared every one, so they start from zero.
        for reg in 0..regs::RQSMR.count() {
            let mut value = 0u32;
            for byte in 0..4 {
                let queue = reg * 4 + byte;
                value |= ((queue % regs::QUEUE_STAT_SETS) as u32) << (8 * byte);
            }
            r.write(&regs::RQSMR, reg, value);
            r.write(&regs::TQSM, reg, value);
        }
    }

    /// §4.6.7 "Receive Initialization", global part (queues are set up
    /// one by one later, see `queue_setup`).
    fn init_receive_filters(&self) {
        let r = &self.regs;
        // LEFT ALONE (§4.6.7): RAL/RAH(0) hold the EEPROM's MAC address
        // after reset and RAH(1..127).AV is 0.
        // Unicast hash table (PFUTA), VLAN pool filters (PFVLVF/PFVLVFB)
        // and multicast table (MTA) are not reset by CTRL.RST and may hold
        // a previous driver's state: clear them.
        for i in 0..regs::PFUTA.count() {
            r.write(&regs::PFUTA, i, 0);
        }
        for i in 0..regs::PFVLVF.count() {
            r.write(&regs::PFVLVF, i, 0);
        }
        for i in 0..regs::PFVLVFB.count() {
            r.write(&regs::PFVLVFB, i, 0);
        }
        for i in 0..regs::MTA.count() {
            r.write(&regs::MTA, i, 0);
        }
        // MAC address 0 belongs to pool 0; no other address to any pool.
        r.write(&regs::MPSAR, 0, 1);
        for i in 1..regs::MPSAR.count() {
            r.write(&regs::MPSAR, i, 0);
        }
        // 5-tuple filters off, so they steer nothing.
        for i in 0..regs::FTQF.count() {
            r.clear(&regs::FTQF, i, regs::ftqf::QUEUE_ENABLE);
        }
        // LEFT ALONE (§4.6.7): VFTA is only consulted when VLNCTRL.VFE is
        // set (default 0), and ETQF/ETQS, RFCTL, MCSTCTRL, RXCSUM keep
        // their defaults: no ethertype filters, no RSC/NFS; RXCSUM
        // (§8.2.3.7.5) only adds fragments' payload checksums (IPPCSE) and
        // trades the RSS hash for them (PCSD): the IPv4/TCP/UDP verdicts
        // the driver reads (§7.1.11) are written back either way.
        // CRC: RDRXCTL.CRC_STRIP must match HLREG0.RXCRCSTRP (default 1).
        // RSCFRSTSIZE cleared, RSCACKC and FCOE_WRFIX set as §8.2.3.8.8
        // requires even though RSC/FCoE are not used.
        // Jumbo frames (§8.2.3.22.8 HLREG0.JUMBOEN, §8.2.3.22.13
        // MAXFRS.MFS, CRC included) only when asked: HLREG0 keeps its
        // default otherwise (§4.6.8).
        if self.cfg.max_frame > crate::device::STD_MAX_FRAME {
            r.write(&regs::MAXFRS, 0, self.cfg.max_frame << 16);
            r.set(&regs::HLREG0, 0, regs::hlreg0::JUMBOEN);
        }
        let rdrxctl = r.read(&regs::RDRXCTL, 0);
        let rdrxctl = (rdrxctl & !regs::rdrxctl::RSCFRSTSIZE_MASK)
            | regs::rdrxctl::CRC_STRIP
            | regs::rdrxctl::RSCACKC
            | regs::rdrxctl::FCOE_WRFIX;
        r.write(&regs::RDRXCTL, 0, rdrxctl);
        // Receive-side scaling (§7.1.2.8) when more than one queue;
        // with one queue MRQC stays 0 and everything goes to queue 0.
        if self.cfg.rx_queues > 1 {
            rss::configure(r, self.cfg.rx_queues);
        }
        // FCTRL is written while RXCTRL.RXEN is still clear (§8.2.3.7.1):
        // accept broadcast, and unicast/multicast promiscuous if asked.
        let mut fctrl = r.read(&regs::FCTRL, 0) | regs::fctrl::BAM;
        if self.cfg.promiscuous {
            fctrl |= regs::fctrl::UPE | regs::fctrl::MPE;
        }
        r.write(&regs::FCTRL, 0, fctrl);
    }

    /// §4.6.11.3.4 "DCB-Off, VT-Off": one packet buffer, one traffic
    /// class.
    fn dcb_and_virtualization_off(&self) {
        let r = &self.regs;
        // LEFT ALONE (§4.6.11.3.4): RXPBSIZE(0) keeps its default 0x200
        // (512 KB, the whole buffer); the other seven buffers get nothing.
        for i in 1..regs::RXPBSIZE.count() {
            r.write(&regs::RXPBSIZE, i, 0);
        }
        // Legacy (802.3x) flow control as the section lists: honour pause
        // frames from the link partner (MFLCN.RFCE) and allow sending them
        // (FCCFG.TFCE = 01b) above FCRTH(0).RTH = buffer - 0x6000.
        // LEFT ALONE (§4.6.11.3.4): the XOFF enable FCRTH.FCEN stays 0, so
        // the NIC never pauses its partner: when the driver falls behind,
        // frames are dropped and counted (MPC), not pushed back upstream.
        r.set(&regs::MFLCN, 0, regs::mflcn::RFCE);
        r.set_field(
            &regs::FCCFG,
            0,
            regs::fccfg::TFCE_MASK,
            regs::fccfg::TFCE_802_3X,
        );
        let rth = (512 * 1024 - 0x6000) as u32; // bytes; field is in 32-byte units at bit 5
        r.set_field(&regs::FCRTH, 0, regs::fcrth::RTH_MASK, rth);
        // No transmit rate limits on any queue.
        for q in 0..regs::QUEUES {
            r.write(&regs::RTTDQSEL, 0, q as u32);
            r.write(&regs::RTTDT1C, 0, 0);
        }
        // LEFT ALONE (§4.6.11.3.4): RTTDT2C, RTTPT2C, RTRPT4C, RTRUP2TC,
        // RTTUP2TC, MTQC, RTRPCS, RTTDCS and RTTPCS already hold the
        // DCB-off defaults.
    }

    /// §4.6.8 "Transmit Initialization", global part.
    fn init_transmit(&self) {
        let r = &self.regs;
        // LEFT ALONE (§4.6.8): HLREG0 keeps its defaults: TXCRCEN = 1
        // (append CRC), TXPADEN = 1 (pad short frames to 64 bytes),
        // JUMBOEN = 0.
        // Packet-buffer sizes change only with the arbiter disabled.
        r.set(&regs::RTTDCS, 0, regs::rttdcs::ARBDIS);
        // LEFT ALONE (§4.6.11.3.4): TXPBSIZE(0) keeps its default 0xA0
        // (160 KB); 1..7 get nothing.
        for i in 1..regs::TXPBSIZE.count() {
            r.write(&regs::TXPBSIZE, i, 0);
        }
        // §4.6.11.3.4 (DCB off) and §8.2.3.9.16: TXPBTHRESH(0).THRESH is
        // the packet buffer's size in KB less the largest packet sent, in
        // KB rounded up, so that a whole packet always fits once the
        // threshold lets it in: 0xA0 - 2 with standard frames (1518
        // bytes, what TinyNF sets), 0xA0 - 9 with 9,018-byte jumbo frames.
        r.set_field(
            &regs::TXPBTHRESH,
            0,
            regs::txpbthresh::THRESH_MASK,
            tx_threshold_kb(self.cfg.max_frame),
        );
        // Largest number of outstanding bytes per read request.
        r.set_field(
            &regs::DTXMXSZRQ,
            0,
            regs::dtxmxszrq::MAX_BYTES_NUM_REQ_MASK,
            regs::dtxmxszrq::MAX_BYTES_NUM_REQ_MASK,
        );
        r.clear(&regs::RTTDCS, 0, regs::rttdcs::ARBDIS);
        // "Enable transmit path by setting DMATXCTL.TE", needed once,
        // before the first transmit queue is enabled.
        r.set(&regs::DMATXCTL, 0, regs::dmatxctl::TE);
        // LEFT ALONE (§4.6.3.1): interrupts are never enabled here, the
        // last step of the sequence: `Device::enable_interrupts` (irq.rs)
        // sets up MSI-X afterwards where the platform gives it (VFIO);
        // without it the driver polls.
    }

    /// §4.6.7, last step: enable the receive path. Queues are enabled
    /// later, one by one, as §4.6.7.1.1 allows on a running receiver.
    /// The security block must be idle while RXEN changes: halt it
    /// (SECRXCTRL.RX_DIS), wait for SECRXSTAT.SECRX_RDY, set RXEN,
    /// release it.
    fn enable_receive(&self) -> Result<(), InitError> {
        let r = &self.regs;
        r.set(&regs::SECRXCTRL, 0, regs::secrxctrl::RX_DIS);
        self.poll(Step::ReceiveEnable, "SECRXSTAT.SECRX_RDY", || {
            r.is_set(&regs::SECRXSTAT, 0, regs::secrxstat::SECRX_RDY)
        })?;
        r.set(&regs::RXCTRL, 0, regs::rxctrl::RXEN);
        r.clear(&regs::SECRXCTRL, 0, regs::secrxctrl::RX_DIS);
        // No-snoop off: DMA writes must be coherent with the CPU caches.
        r.set(&regs::CTRL_EXT, 0, regs::ctrl_ext::NS_DIS);
        Ok(())
    }

    /// Wait (bounded by `link_timeout`) for LINKS.LINK_UP.
    fn wait_link_up(&self) -> Result<Duration, InitError> {
        let r = &self.regs;
        let start = self.clock.now();
        let timeout = self.cfg.link_timeout;
        if wait_until(self.clock, timeout, || {
            r.is_set(&regs::LINKS, 0, regs::links::LINK_UP)
        }) {
            Ok(self.clock.now().saturating_sub(start))
        } else {
            Err(InitError::LinkDown {
                step: Step::LinkUp,
                timeout,
            })
        }
    }

    /// The MAC address the EEPROM loaded into RAL(0)/RAH(0) (§8.2.3.7.8-9).
    fn read_mac(&self) -> [u8; 6] {
        read_mac(&self.regs)
    }
}

pub(crate) fn read_mac<B: Bar>(r: &Regs<B>) -> [u8; 6] {
    let low = r.read(&regs::RAL, 0).to_le_bytes();
    let high = r.read(&regs::RAH, 0).to_le_bytes();
    [low[0], low[1], low[2], low[3], high[0], high[1]]
}

/// TXPBSIZE(0)'s reset value, kept (§8.2.3.9.13): 160 KB.
const TX_PACKET_BUFFER_KB: u32 = 0xA0;

/// TXPBTHRESH(0).THRESH for frames of up to `max_frame` bytes (CRC
/// included): the transmit packet buffer (KB) less the largest frame in
/// KB, rounded up (§8.2.3.9.16, §4.6.11.3.4).
pub(crate) fn tx_threshold_kb(max_frame: u32) -> u32 {
    TX_PACKET_BUFFER_KB - max_frame.div_ceil(1024)
}

#[cfg(test)]
mod tests {
    use super::tx_threshold_kb;

    #[test]
    fn the_transmit_threshold_leaves_room_for_the_largest_frame() {
        assert_eq!(tx_threshold_kb(1518), 0xA0 - 2);
        assert_eq!(tx_threshold_kb(2048), 0xA0 - 2);
        assert_eq!(tx_threshold_kb(9018), 0xA0 - 9);
        assert_eq!(tx_threshold_kb(crate::device::MAX_JUMBO_FRAME), 0xA0 - 16);
    }
}
