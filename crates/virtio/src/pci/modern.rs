//! The modern VirtIO PCI interface (VirtIO 1.2 §4.1.4): vendor-specific
//! capabilities in configuration space point at register structures in
//! the device's BARs: common configuration (§4.1.4.3), notifications
//! (§4.1.4.4), ISR (§4.1.4.5: read only to acknowledge INTx on a device
//! without MSI-X; MSI-X needs no ISR read) and the device configuration
//! (§4.1.4.6).
//! MSI-X vectors are chosen in the common configuration
//! (`msix_config`, `queue_msix_vector`, §4.1.5.1.2).
//!
//! §4.1.3.1 requires each field to be accessed at its natural width (8,
//! 16 or 32 bits), so the registers are reached through a
//! [`RegisterSpace`] that keeps widths:
//!
//! - [`MappedBars`]: the BARs mapped into our address space (the uio
//!   `resourceN` file, a VFIO region), one load or store per access with
//!   `nfkit_hw::Bar::{read,write}{8,16,32}`. The fast path: a queue
//!   notification is a single 16-bit store.
//! - [`PciCfgAccess`]: the device's own `VIRTIO_PCI_CAP_PCI_CFG` window in
//!   configuration space (§4.1.4.9), the fallback when a BAR cannot be
//!   mapped; a few configuration-space accesses (system calls) per
//!   register.
//! - [`IoBars`]: [`IoBar`]s with all three widths (a region file, a test
//!   double).

use super::PciTransport;
use crate::error::VirtioError;
use crate::net::Notify;
use crate::virtqueue::{LayoutKind, Virtqueue};
use nfkit_hw::pci::config;
use nfkit_hw::{Bar, HwError, IoBar, PciFunction};

/// §4.1.4 `cfg_type` values and `struct virtio_pci_cap` offsets.
mod cap {
    pub const COMMON_CFG: u8 = 1;
    pub const NOTIFY_CFG: u8 = 2;
    pub const ISR_CFG: u8 = 3;
    pub const DEVICE_CFG: u8 = 4;
    pub const PCI_CFG: u8 = 5;
    pub const CFG_TYPE: u16 = 3;
    pub const BAR: u16 = 4;
    pub const OFFSET: u16 = 8;
    pub const LENGTH: u16 = 12;
    /// `notify_off_multiplier` follows the notify capability (§4.1.4.4).
    pub const NOTIFY_OFF_MULTIPLIER: u16 = 16;
    /// `pci_cfg_data` follows the PCI-configuration-access capability
    /// (§4.1.4.9).
    pub const PCI_CFG_DATA: u16 = 16;
}

/// §4.1.4.3 `struct virtio_pci_common_cfg`.
mod common {
    pub const DEVICE_FEATURE_SELECT: u64 = 0x00;
    pub const DEVICE_FEATURE: u64 = 0x04;
    pub const DRIVER_FEATURE_SELECT: u64 = 0x08;
    pub const DRIVER_FEATURE: u64 = 0x0c;
    pub const MSIX_CONFIG: u64 = 0x10;
    pub const DEVICE_STATUS: u64 = 0x14;
    pub const QUEUE_SELECT: u64 = 0x16;
    pub const QUEUE_SIZE: u64 = 0x18;
    pub const QUEUE_MSIX_VECTOR: u64 = 0x1a;
    pub const QUEUE_ENABLE: u64 = 0x1c;
    pub const QUEUE_NOTIFY_OFF: u64 = 0x1e;
    pub const QUEUE_DESC: u64 = 0x20;
    pub const QUEUE_DRIVER: u64 = 0x28;
    pub const QUEUE_DEVICE: u64 = 0x30;
    /// Bytes the driver touches.
    pub const LEN: u32 = 0x38;
}

/// Registers in a device's BARs, reached at their natural width
/// (`buf.len()` of 1, 2 or 4 bytes, little-endian).
pub trait RegisterSpace: Send + Sync {
    fn read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), HwError>;
    fn write(&self, bar: u8, offset: u64, data: &[u8]) -> Result<(), HwError>;
}

/// BAR registers through `VIRTIO_PCI_CAP_PCI_CFG` (§4.1.4.9.1): write
/// the BAR, offset and length into the capability, then read or write
/// `pci_cfg_data`. Needs nothing but configuration-space access.
#[derive(Debug)]
pub struct PciCfgAccess<P: PciFunction> {
    pci: P,
    cap: u16,
    lock: parking_lot::Mutex<()>,
}

impl<P: PciFunction> PciCfgAccess<P> {
    /// Find the capability on `pci` (which this access then owns).
    pub fn new(pci: P) -> Result<Self, VirtioError> {
        let cap = vendor_caps(&pci)?
            .into_iter()
            .find(|&at| pci.config_read8(at + cap::CFG_TYPE).ok() == Some(cap::PCI_CFG))
            .ok_or(VirtioError::Capability("PCI configuration access"))?;
        Ok(PciCfgAccess {
            pci,
            cap,
            lock: parking_lot::Mutex::new(()),
        })
    }

    /// The PCI function.
    pub fn pci(&self) -> &P {
        &self.pci
    }

    fn point(&self, bar: u8, offset: u64, len: usize) -> Result<(), HwError> {
        let offset =
            u32::try_from(offset).map_err(|_| HwError::Invalid("BAR offset above 4 GiB".into()))?;
        self.pci.config_write(self.cap + cap::BAR, &[bar])?;
        self.pci.config_write32(self.cap + cap::OFFSET, offset)?;
        self.pci.config_write32(self.cap + cap::LENGTH, len as u32)
    }
}

impl<P: PciFunction> RegisterSpace for PciCfgAccess<P> {
    fn read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), HwError> {
        // The window is one shared register: one access at a time.
        let _g = self.lock.lock();
        self.point(bar, offset, buf.len())?;
        self.pci.config_read(self.cap + cap::PCI_CFG_DATA, buf)
    }
    fn write(&self, bar: u8, offset: u64, data: &[u8]) -> Result<(), HwError> {
        let _g = self.lock.lock();
        self.point(bar, offset, data.len())?;
        self.pci.config_write(self.cap + cap::PCI_CFG_DATA, data)
    }
}

/// BAR registers through [`IoBar`]s (index = BAR number).
#[derive(Debug)]
pub struct IoBars<R: IoBar> {
    bars: Vec<Option<R>>,
}

impl<R: IoBar> IoBars<R> {
    /// `bars[i]` is BAR `i`, if the device has it.
    pub fn new(bars: Vec<Option<R>>) -> Self {
        IoBars { bars }
    }
    fn bar(&self, bar: u8) -> Result<&R, HwError> {
        self.bars
            .get(bar as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| HwError::Invalid(format!("BAR {bar} is not open")))
    }
}

impl<R: IoBar> RegisterSpace for IoBars<R> {
    fn read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), HwError> {
        let b = self.bar(bar)?;
        match buf.len() {
            1 => buf[0] = b.read8(offset)?,
            2 => buf.copy_from_slice(&b.read16(offset)?.to_le_bytes()),
            4 => buf.copy_from_slice(&b.read32(offset)?.to_le_bytes()),
            n => return Err(HwError::Invalid(format!("{n}-byte register access"))),
        }
        Ok(())
    }
    fn write(&self, bar: u8, offset: u64, data: &[u8]) -> Result<(), HwError> {
        let b = self.bar(bar)?;
        match *data {
            [v] => b.write8(offset, v),
            [a, c] => b.write16(offset, u16::from_le_bytes([a, c])),
            [a, c, d, e] => b.write32(offset, u32::from_le_bytes([a, c, d, e])),
            _ => Err(HwError::Invalid(format!(
                "{}-byte register access",
                data.len()
            ))),
        }
    }
}

/// BAR registers through memory mappings of the BARs the register
/// structures live in; owns the PCI function (closing a VFIO device fd
/// would disable the device under our feet).
pub struct MappedBars<P: PciFunction> {
    pci: P,
    bars: Vec<Option<P::Bar>>,
}

impl<P: PciFunction> std::fmt::Debug for MappedBars<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedBars")
            .field("pci", &self.pci.address())
            .finish()
    }
}

impl<P: PciFunction> MappedBars<P> {
    /// Map the BARs of `windows` and check that each window lies inside
    /// its BAR (a `Bar` turns stray accesses into all-ones reads; we want
    /// an error at open time instead).
    fn map(pci: &P, windows: &[Window]) -> Result<Vec<Option<P::Bar>>, VirtioError> {
        let mut bars: Vec<Option<P::Bar>> = (0..6).map(|_| None).collect();
        for w in windows {
            let slot = &mut bars[w.bar as usize];
            if slot.is_none() {
                *slot = Some(pci.map_bar(w.bar)?);
            }
            let len = slot.as_ref().map_or(0, |b| b.len()) as u64;
            if w.offset + w.len as u64 > len {
                return Err(VirtioError::Capability(
                    "a register structure that fits its BAR",
                ));
            }
        }
        Ok(bars)
    }

    /// The PCI function.
    pub fn pci(&self) -> &P {
        &self.pci
    }

    fn bar(&self, bar: u8, offset: u64, width: usize) -> Result<(&P::Bar, usize), HwError> {
        let b = self
            .bars
            .get(bar as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| HwError::Invalid(format!("BAR {bar} is not mapped")))?;
        let at = usize::try_from(offset)
            .ok()
            .filter(|&o| o.is_multiple_of(width) && o + width <= b.len())
            .ok_or_else(|| {
                HwError::Invalid(format!("{width}-byte register at {offset:#x} of BAR {bar}"))
            })?;
        Ok((b, at))
    }
}

impl<P: PciFunction> RegisterSpace for MappedBars<P> {
    fn read(&self, bar: u8, offset: u64, buf: &mut [u8]) -> Result<(), HwError> {
        let (b, at) = self.bar(bar, offset, buf.len())?;
        match buf.len() {
            1 => buf[0] = b.read8(at),
            2 => buf.copy_from_slice(&b.read16(at).to_le_bytes()),
            4 => buf.copy_from_slice(&b.read32(at).to_le_bytes()),
            n => return Err(HwError::Invalid(format!("{n}-byte register access"))),
        }
        Ok(())
    }
    fn write(&self, bar: u8, offset: u64, data: &[u8]) -> Result<(), HwError> {
        let (b, at) = self.bar(bar, offset, data.len())?;
        match *data {
            [v] => b.write8(at, v),
            [x, y] => b.write16(at, u16::from_le_bytes([x, y])),
            [w, x, y, z] => b.write32(at, u32::from_le_bytes([w, x, y, z])),
            _ => {
                return Err(HwError::Invalid(format!(
                    "{}-byte register access",
                    data.len()
                )))
            }
        }
        Ok(())
    }
}

/// A register structure: a window of one BAR.
#[derive(Debug, Clone, Copy)]
struct Window {
    bar: u8,
    offset: u64,
    len: u32,
}

/// A modern VirtIO PCI device's register structures.
#[derive(Debug)]
pub struct ModernTransport<S: RegisterSpace> {
    regs: S,
    common: Window,
    notify: Window,
    notify_multiplier: u32,
    device: Window,
    /// The ISR status byte, if the device has one.
    isr: Option<Window>,
    /// Notify address of each enabled queue (offset in the notify BAR).
    notify_at: Vec<u64>,
}

impl<S: RegisterSpace> ModernTransport<S> {
    /// Find the register structures from the capabilities of `pci`; reach
    /// them through `regs`.
    pub fn open(pci: &impl PciFunction, regs: S) -> Result<Self, VirtioError> {
        Ok(Self::with_caps(regs, read_caps(pci)?))
    }

    fn with_caps(regs: S, caps: Caps) -> Self {
        ModernTransport {
            regs,
            common: caps.common,
            notify: caps.notify,
            notify_multiplier: caps.notify_multiplier,
            device: caps.device,
            isr: caps.isr,
            notify_at: Vec::new(),
        }
    }

    /// The register space (e.g. to reach the PCI function).
    pub fn registers(&self) -> &S {
        &self.regs
    }

    fn c8(&self, off: u64) -> Result<u8, HwError> {
        let mut b = [0u8; 1];
        self.regs
            .read(self.common.bar, self.common.offset + off, &mut b)?;
        Ok(b[0])
    }
    fn c16(&self, off: u64) -> Result<u16, HwError> {
        let mut b = [0u8; 2];
        self.regs
            .read(self.common.bar, self.common.offset + off, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    fn c32(&self, off: u64) -> Result<u32, HwError> {
        let mut b = [0u8; 4];
        self.regs
            .read(self.common.bar, self.common.offset + off, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn w8(&self, off: u64, v: u8) -> Result<(), HwError> {
        self.regs
            .write(self.common.bar, self.common.offset + off, &[v])
    }
    fn w16(&self, off: u64, v: u16) -> Result<(), HwError> {
        self.regs
            .write(self.common.bar, self.common.offset + off, &v.to_le_bytes())
    }
    fn w32(&self, off: u64, v: u32) -> Result<(), HwError> {
        self.regs
            .write(self.common.bar, self.common.offset + off, &v.to_le_bytes())
    }
    /// 64-bit fields as two 32-bit writes, low half first (§4.1.3.1).
    fn w64(&self, off: u64, v: u64) -> Result<(), HwError> {
        self.w32(off, v as u32)?;
        self.w32(off + 4, (v >> 32) as u32)
    }
}

impl<P: PciFunction> ModernTransport<PciCfgAccess<P>> {
    /// Reach every register of `pci` through its configuration space
    /// (§4.1.4.9): works under uio and VFIO with no BAR mapping.
    pub fn over_config_space(pci: P) -> Result<Self, VirtioError> {
        let regs = PciCfgAccess::new(pci)?;
        let caps = read_caps(regs.pci())?;
        Ok(Self::with_caps(regs, caps))
    }
}

impl<P: PciFunction> ModernTransport<MappedBars<P>> {
    /// Reach the registers through mappings of the BARs they live in
    /// (uio `resourceN`, VFIO region mmap). Fails, handing `pci` back, if
    /// a BAR cannot be mapped: use [`ModernTransport::over_config_space`]
    /// then.
    pub fn over_mapped_bars(pci: P) -> Result<Self, (VirtioError, P)> {
        let caps = match read_caps(&pci) {
            Ok(c) => c,
            Err(e) => return Err((e, pci)),
        };
        let mut windows = vec![caps.common, caps.notify, caps.device];
        windows.extend(caps.isr);
        match MappedBars::map(&pci, &windows) {
            Ok(bars) => Ok(Self::with_caps(MappedBars { pci, bars }, caps)),
            Err(e) => Err((e, pci)),
        }
    }
}

/// Where the register structures are.
struct Caps {
    common: Window,
    notify: Window,
    notify_multiplier: u32,
    device: Window,
    isr: Option<Window>,
}

fn read_caps(pci: &impl PciFunction) -> Result<Caps, VirtioError> {
    let mut found: [Option<(Window, u16)>; 5] = [None; 5];
    for at in vendor_caps(pci)? {
        let ty = pci.config_read8(at + cap::CFG_TYPE)?;
        let bar = pci.config_read8(at + cap::BAR)?;
        let offset = pci.config_read32(at + cap::OFFSET)? as u64;
        let len = pci.config_read32(at + cap::LENGTH)?;
        // The first capability of each type is the preferred one (§4.1.4).
        if (1..=4).contains(&ty) && bar < 6 && found[ty as usize].is_none() {
            found[ty as usize] = Some((Window { bar, offset, len }, at));
        }
    }
    let window = |ty: u8, name: &'static str, min_len: u32| -> Result<(Window, u16), VirtioError> {
        match found[ty as usize] {
            Some((w, at)) if w.len >= min_len => Ok((w, at)),
            _ => Err(VirtioError::Capability(name)),
        }
    };
    let (common, _) = window(cap::COMMON_CFG, "common configuration", common::LEN)?;
    let (notify, notify_cap) = window(cap::NOTIFY_CFG, "notifications", 2)?;
    let (device, _) = window(cap::DEVICE_CFG, "device configuration", 6)?;
    let notify_multiplier = pci.config_read32(notify_cap + cap::NOTIFY_OFF_MULTIPLIER)?;
    let isr = window(cap::ISR_CFG, "ISR status", 1).ok().map(|(w, _)| w);
    Ok(Caps {
        common,
        notify,
        notify_multiplier,
        device,
        isr,
    })
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

impl<S: RegisterSpace> Notify for ModernTransport<S> {
    /// §4.1.4.4: write the queue index at the queue's notify address.
    fn notify(&self, queue: u16) -> Result<(), HwError> {
        let at = self
            .notify_at
            .get(queue as usize)
            .copied()
            .ok_or_else(|| HwError::Invalid(format!("queue {queue} was never enabled")))?;
        self.regs.write(self.notify.bar, at, &queue.to_le_bytes())
    }
}

impl<S: RegisterSpace> PciTransport for ModernTransport<S> {
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
            let at = self.device.offset + (offset + i) as u64;
            self.regs
                .read(self.device.bar, at, std::slice::from_mut(b))?;
        }
        Ok(())
    }
    fn has_features_ok(&self) -> bool {
        true
    }
    /// §4.1.5.1.2: write `queue_msix_vector` of the selected queue and
    /// read it back (the device answers NO_VECTOR when it could not
    /// take it).
    /// §4.1.4.5: one byte; reading it clears it and lowers INTx.
    fn read_isr(&self) -> Result<u8, HwError> {
        let w = self
            .isr
            .ok_or_else(|| HwError::Unsupported("no ISR capability".into()))?;
        let mut b = [0u8; 1];
        self.regs.read(w.bar, w.offset, &mut b)?;
        Ok(b[0])
    }
    fn set_queue_vector(&mut self, q: u16, vector: u16) -> Result<u16, HwError> {
        self.w16(common::QUEUE_SELECT, q)?;
        self.w16(common::QUEUE_MSIX_VECTOR, vector)?;
        self.c16(common::QUEUE_MSIX_VECTOR)
    }
    fn set_config_vector(&mut self, vector: u16) -> Result<u16, HwError> {
        self.w16(common::MSIX_CONFIG, vector)?;
        self.c16(common::MSIX_CONFIG)
    }
}
