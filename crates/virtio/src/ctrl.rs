//! The control virtqueue (VirtIO 1.2 §5.1.6.5): one command at a time,
//! each a chain of three buffers in a small DMA page of its own:
//!
//! ```text
//!   [class u8, command u8]   device reads    (offset 0)
//!   command-specific data    device reads    (offset 64)
//!   ack u8                   device writes   (offset 128)
//! ```
//!
//! Three descriptors rather than one: a legacy device without
//! ANY_LAYOUT needs the parts apart (§5.1.6.5, legacy note), and every
//! device accepts them so.

use crate::error::VirtioError;
use crate::net::Notify;
use crate::spec::net as spec;
use crate::virtqueue::{LayoutKind, Segment, Virtqueue};
use nfkit_hw::{poll_until, Clock, DmaAllocator, DmaRegion};
use std::time::Duration;

const HDR: usize = 0;
const DATA: usize = 64;
const ACK: usize = 128;
/// How long a device may take to answer a command.
pub const CTRL_TIMEOUT: Duration = Duration::from_millis(500);

/// The control queue of a network device.
pub struct ControlQueue {
    vq: Virtqueue,
    buf: DmaRegion,
    index: u16,
}

impl std::fmt::Debug for ControlQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlQueue")
            .field("index", &self.index)
            .finish()
    }
}

impl ControlQueue {
    pub(crate) fn new(
        dma: &dyn DmaAllocator,
        kind: LayoutKind,
        size: u16,
        index: u16,
    ) -> Result<Self, VirtioError> {
        // `size` is what the transport settled: a legacy device's ring
        // size is fixed by the device and the layout must match it.
        let vq = Virtqueue::new(dma, kind, size, false)?;
        let buf = dma.allocate(4096, true)?;
        Ok(ControlQueue { vq, buf, index })
    }

    pub(crate) fn virtqueue(&self) -> &Virtqueue {
        &self.vq
    }

    /// Run one command and wait (bounded) for the device's ack.
    pub fn command(
        &mut self,
        notify: &dyn Notify,
        clock: &dyn Clock,
        class: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<(), VirtioError> {
        let fail = |why| VirtioError::Control { class, cmd, why };
        if data.is_empty() || data.len() > ACK - DATA {
            return Err(fail("command data must be 1 to 64 bytes"));
        }
        let hdr = self.buf.slice_mut(HDR, 2).ok_or(fail("buffer"))?;
        hdr.copy_from_slice(&[class, cmd]);
        self.buf
            .slice_mut(DATA, data.len())
            .ok_or(fail("buffer"))?
            .copy_from_slice(data);
        self.buf.slice_mut(ACK, 1).ok_or(fail("buffer"))?[0] = 0xff;
        let seg = |off: usize, len: usize, device_writes| Segment {
            addr: self.buf.device_addr_at(off),
            len: len as u32,
            device_writes,
        };
        let chain = [
            seg(HDR, 2, false),
            seg(DATA, data.len(), false),
            seg(ACK, 1, true),
        ];
        self.vq.add(&chain).ok_or(fail("control queue full"))?;
        self.vq.publish();
        // Always notify: the device may process the control queue only
        // when told, and this is not the data path.
        notify.notify(self.index)?;
        let mut done = false;
        let mut bad = false;
        poll_until(clock, CTRL_TIMEOUT, || {
            match self.vq.pop_used() {
                Ok(Some(_)) => done = true,
                Ok(None) => {}
                Err(_) => bad = true,
            }
            done || bad
        });
        if bad {
            return Err(fail("the device returned a bad used-ring entry"));
        }
        if !done {
            return Err(VirtioError::Timeout {
                step: "a control queue command",
                timeout_ms: CTRL_TIMEOUT.as_millis() as u64,
            });
        }
        match self.buf.slice(ACK, 1).map(|a| a[0]) {
            Some(spec::CTRL_OK) => Ok(()),
            _ => Err(fail("the device answered VIRTIO_NET_ERR")),
        }
    }

    /// §5.1.6.5.1: receive every packet whatever its destination MAC.
    pub fn set_promiscuous(
        &mut self,
        notify: &dyn Notify,
        clock: &dyn Clock,
        on: bool,
    ) -> Result<(), VirtioError> {
        self.command(
            notify,
            clock,
            spec::CTRL_RX,
            spec::CTRL_RX_PROMISC,
            &[on as u8],
        )
    }

    /// §5.1.6.5.5: use `pairs` queue pairs (VQ_PAIRS_SET, le16).
    pub fn set_queue_pairs(
        &mut self,
        notify: &dyn Notify,
        clock: &dyn Clock,
        pairs: u16,
    ) -> Result<(), VirtioError> {
        self.command(
            notify,
            clock,
            spec::CTRL_MQ,
            spec::CTRL_MQ_VQ_PAIRS_SET,
            &pairs.to_le_bytes(),
        )
    }

    /// §5.1.6.5.6.1: the guest offloads (GUEST_CSUM, GUEST_TSO4/6,
    /// GUEST_ECN feature bits) the device may use from now on
    /// (OFFLOADS_SET, le64).
    pub fn set_guest_offloads(
        &mut self,
        notify: &dyn Notify,
        clock: &dyn Clock,
        bits: u64,
    ) -> Result<(), VirtioError> {
        self.command(
            notify,
            clock,
            spec::CTRL_GUEST_OFFLOADS,
            spec::CTRL_GUEST_OFFLOADS_SET,
            &bits.to_le_bytes(),
        )
    }
}
