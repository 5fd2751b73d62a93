//! The modern VirtIO PCI interface (VirtIO 1.2 §4.1.4): vendor-specific
//! capabilities in configuration space point at register structures in
//! the device's BARs: common configuration (§4.1.4.3), notifications
//! (§4.1.4.4), ISR (§4.1.4.5, left alone: we use no interrupts) and the
//! device configuration (§4.1.4.6).
//!
//! §4.1.3.1 requires each field to be accessed at its natural width (8,
//! 16 or 32 bits), so the registers are reached through [`IoBar`], which
//! has all three: under VFIO that is a `pread`/`pwrite` on the BAR's
//! region of the device fd. (`nfkit_hw::Bar` has only 32-bit accesses,
//! which cannot reach `queue_select` at offset 0x16.)

use super::PciTransport;
use crate::error::VirtioError;
use crate::net::Notify;
use crate::virtqueue::{LayoutKind, Virtqueue};
use nfkit_hw::pci::config;
use nfkit_hw::{HwError, IoBar, PciFunction};
use std::sync::Arc;

/// §4.1.4 `cfg_type` values.
mod cap {
    pub const COMMON_CFG: u8 = 1;
    pub const NOTIFY_CFG: u8 = 2;
    pub const DEVICE_CFG: u8 = 4;
    /// Offsets within `struct virtio_pci_cap`.
    pub const CFG_TYPE: u16 = 3;
    pub const BAR: u16 = 4;
    pub const OFFSET: u16 = 8;
    pub const LENGTH: u16 = 12;
    /// `notify_off_multiplier` follows the notify capability (§4.1.4.4).
    pub const NOTIFY_OFF_MULTIPLIER: u16 = 16;
}

/// §4.1.4.3 `struct virtio_pci_common_cfg`.
mod common {
    pub const DEVICE_FEATURE_SELECT: u64 = 0x00;
    pub const DEVICE_FEATURE: u64 = 0x04;
    pub const DRIVER_FEATURE_SELECT: u64 = 0x08;
    pub const DRIVER_FEATURE: u64 = 0x0c;
    pub const DEVICE_STATUS: u64 = 0x14;
    pub const QUEUE_SELECT: u64 = 0x16;
    pub const QUEUE_SIZE: u64 = 0x18;
    pub const QUEUE_ENABLE: u64 = 0x1c;
    pub const QUEUE_NOTIFY_OFF: u64 = 0x1e;
    pub const QUEUE_DESC: u64 = 0x20;
    pub const QUEUE_DRIVER: u64 = 0x28;
    pub const QUEUE_DEVICE: u64 = 0x30;
    /// Bytes the driver touches.
    pub const LEN: u32 = 0x38;
}

/// A register structure: a window of one BAR.
#[derive(Debug)]
struct Window<R> {
    bar: Arc<R>,
    offset: u64,
    len: u32,
}

impl<R> Clone for Window<R> {
    fn clone(&self) -> Self {
        Window {
            bar: self.bar.clone(),
            offset: self.offset,
            len: self.len,
        }
    }
}

/// A modern VirtIO PCI device's register structures.
#[derive(Debug)]
pub struct ModernTransport<R: IoBar> {
    common: Window<R>,
    notify: Window<R>,
    notify_multiplier: u32,
    device: Window<R>,
    /// Notify address of each enabled queue (offset in the notify BAR).
    notify_at: Vec<u64>,
}

impl<R: IoBar> ModernTransport<R> {
    /// Find the capabilities of `pci` and open the BARs they name with
    /// `open_bar` (each BAR at most once).
    pub fn open(
        pci: &impl PciFunction,
        mut open_bar: impl FnMut(u8) -> Result<R, HwError>,
    ) -> Result<Self, VirtioError> {
        let mut bars: [Option<Arc<R>>; 6] = Default::default();
        let mut found: [Option<(u8, u64, u32, u16)>; 5] = [None; 5];
        for at in vendor_caps(pci)? {
            let ty = pci.config_read8(at + cap::CFG_TYPE)?;
            let bar = pci.config_read8(at + cap::BAR)?;
            let offset = pci.config_read32(at + cap::OFFSET)? as u64;
            let len = pci.config_read32(at + cap::LENGTH)?;
            // The first capability of each type is the preferred one (§4.1.4).
            if (1..=4).contains(&ty) && bar < 6 && found[ty as usize].is_none() {
                found[ty as usize] = Some((bar, offset, len, at));
            }
        }
        let mut window =
            |ty: u8, name: &'static str, min_len: u32| -> Result<Window<R>, VirtioError> {
                let (bar, offset, len, _) =
                    found[ty as usize].ok_or(VirtioError::Capability(name))?;
                if len < min_len {
                    return Err(VirtioError::Capability(name));
                }
                let b = match &bars[bar as usize] {
                    Some(b) => b.clone(),
                    None => {
                        let b = Arc::new(open_bar(bar)?);
                        bars[bar as usize] = Some(b.clone());
                        b
                    }
                };
                Ok(Window {
                    bar: b,
                    offset,
                    len,
                })
            };
        let common = window(cap::COMMON_CFG, "common configuration", common::LEN)?;
        let notify = window(cap::NOTIFY_CFG, "notifications", 2)?;
        let device = window(cap::DEVICE_CFG, "device configuration", 6)?;
        let notify_cap = found[cap::NOTIFY_CFG as usize].map(|f| f.3).unwrap_or(0);
        let notify_multiplier = pci.config_read32(notify_cap + cap::NOTIFY_OFF_MULTIPLIER)?;
        Ok(ModernTransport {
            common,
            notify,
            notify_multiplier,
            device,
            notify_at: Vec::new(),
        })
    }

    fn c8(&self, off: u64) -> Result<u8, HwError> {
        self.common.bar.read8(self.common.offset + off)
    }
    fn c16(&self, off: u64) -> Result<u16, HwError> {
        self.common.bar.read16(self.common.offset + off)
    }
    fn c32(&self, off: u64) -> Result<u32, HwError> {
        self.common.bar.read32(self.common.offset + off)
    }
    fn w8(&self, off: u64, v: u8) -> Result<(), HwError> {
        self.common.bar.write8(self.common.offset + off, v)
    }
    fn w16(&self, off: u64, v: u16) -> Result<(), HwError> {
        self.common.bar.write16(self.common.offset + off, v)
    }
    fn w32(&self, off: u64, v: u32) -> Result<(), HwError> {
        self.common.bar.write32(self.common.offset + off, v)
    }
    /// 64-bit fields as two 32-bit writes, low half first (§4.1.3.1).
    fn w64(&self, off: u64, v: u64) -> Result<(), HwError> {
        self.w32(off, v as u32)?;
        self.w32(off + 4, (v >> 32) as u32)
    }
}

/// Offsets of the vendor-specific capabilities (bounded walk).
fn vendor_caps(pci: &impl PciFunction) -> Result<Vec<u16>, VirtioError> {
    let mut out = Vec::new();
    if pci.config_read16(config::STATUS)? & config::STATUS_CAP_LIST == 0 {
        return Err(VirtioError::Capability("capability list"));
    }
    let mut ptr = pci.config_read8(config::CAP_PTR)? & 0xfc;
    for _ in 0..48 {
        if ptr < 0x40 {
            break;
        }
        if pci.config_read8(ptr as u16)? == config::CAP_ID_VENDOR {
            out.push(ptr as u16);
        }
        ptr = pci.config_read8(ptr as u16 + 1)? & 0xfc;
    }
    Ok(out)
}

impl<R: IoBar> Notify for ModernTransport<R> {
    /// §4.1.4.4: write the queue index at the queue's notify address.
    fn notify(&self, queue: u16) -> Result<(), HwError> {
        let at = self
            .notify_at
            .get(queue as usize)
            .copied()
            .ok_or_else(|| HwError::Invalid(format!("queue {queue} was never enabled")))?;
        self.notify.bar.write16(at, queue)
    }
}

impl<R: IoBar> PciTransport for ModernTransport<R> {
    fn layout(&self) -> LayoutKind {
        LayoutKind::Modern
    }
    fn status(&self) -> Result<u8, HwError> {
        self.c8(common::DEVICE_STATUS)
    }
    fn set_status(&self, status: u8) -> Result<(), HwError> {
        self.w8(common::DEVICE_STATUS, status)
    }
    fn device_features(&self) -> Result<u64, HwError> {
        self.w32(common::DEVICE_FEATURE_SELECT, 0)?;
        let lo = self.c32(common::DEVICE_FEATURE)? as u64;
        self.w32(common::DEVICE_FEATURE_SELECT, 1)?;
        let hi = self.c32(common::DEVICE_FEATURE)? as u64;
        Ok(hi << 32 | lo)
    }
    fn set_driver_features(&self, features: u64) -> Result<(), HwError> {
        self.w32(common::DRIVER_FEATURE_SELECT, 0)?;
        self.w32(common::DRIVER_FEATURE, features as u32)?;
        self.w32(common::DRIVER_FEATURE_SELECT, 1)?;
        self.w32(common::DRIVER_FEATURE, (features >> 32) as u32)
    }
    fn queue_size(&mut self, q: u16, wanted: u16) -> Result<u16, HwError> {
        self.w16(common::QUEUE_SELECT, q)?;
        let max = self.c16(common::QUEUE_SIZE)?;
        if max == 0 {
            return Ok(0);
        }
        // A power of two no larger than either (§2.7: split queues).
        let size = 1u16 << (15 - max.min(wanted.max(2)).leading_zeros().min(15));
        self.w16(common::QUEUE_SIZE, size)?;
        Ok(size)
    }
    fn enable_queue(&mut self, q: u16, vq: &Virtqueue) -> Result<(), HwError> {
        self.w16(common::QUEUE_SELECT, q)?;
        self.w64(common::QUEUE_DESC, vq.desc_addr())?;
        self.w64(common::QUEUE_DRIVER, vq.avail_addr())?;
        self.w64(common::QUEUE_DEVICE, vq.used_addr())?;
        let off = self.c16(common::QUEUE_NOTIFY_OFF)? as u64 * self.notify_multiplier as u64;
        if off + 2 > self.notify.len as u64 {
            return Err(HwError::Invalid(format!(
                "queue {q}: notify offset {off:#x} is outside the notify structure"
            )));
        }
        if self.notify_at.len() <= q as usize {
            self.notify_at.resize(q as usize + 1, 0);
        }
        self.notify_at[q as usize] = self.notify.offset + off;
        self.w16(common::QUEUE_ENABLE, 1)
    }
    fn read_config(&self, offset: usize, buf: &mut [u8]) -> Result<(), HwError> {
        if offset + buf.len() > self.device.len as usize {
            return Err(HwError::Invalid(
                "read past the device configuration".into(),
            ));
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self
                .device
                .bar
                .read8(self.device.offset + (offset + i) as u64)?;
        }
        Ok(())
    }
    fn has_features_ok(&self) -> bool {
        true
    }
}
