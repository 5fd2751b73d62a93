//! The simulated platform: DMA memory is ordinary heap memory whose device
//! address is its virtual address, and every allocation is registered so
//! that a device model can check each DMA access against live memory (a
//! driver bug then becomes a reported violation, never memory corruption).
//! Also a virtual clock for deterministic, lock-step simulation.

use crate::dma::{DmaAllocator, DmaBacking, DmaRegion, Translation};
use crate::error::HwError;
use crate::time::Clock;
use parking_lot::{Mutex, RwLock};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

const ALIGN: usize = 4096;

/// One heap allocation standing in for DMA memory.
struct SimBacking {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain heap memory owned by this value.
unsafe impl Send for SimBacking {}
// SAFETY: no interior state besides the owned memory.
unsafe impl Sync for SimBacking {}

impl Drop for SimBacking {
    fn drop(&mut self) {
        // SAFETY: allocated in `SimDma::allocate` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered region: the region's `DmaRegion` holds a strong reference
/// to `Registration`, the registry a weak one. Device-side access upgrades
/// the weak reference, so memory cannot be freed under an access.
struct Registration {
    backing: SimBacking,
    start: usize,
    len: usize,
    /// Set when the driver drops its `DmaRegion`: a [`DmaWindow`] may keep
    /// the memory allocated, but it is no longer DMA memory.
    freed: AtomicBool,
}

struct Held(Arc<Registration>);
impl DmaBacking for Held {}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.freed.store(true, Ordering::Release);
    }
}

/// Simulated DMA memory, shared between the driver (which allocates) and
/// device models (which access by device address).
#[derive(Default)]
pub struct SimDma {
    regions: RwLock<Vec<Weak<Registration>>>,
    allocated: AtomicU64,
}

impl std::fmt::Debug for SimDma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDma")
            .field("regions", &self.regions.read().len())
            .finish()
    }
}

/// A device-side DMA access that did not land entirely inside live DMA
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("DMA access of {len} bytes at device address {addr:#x} is outside DMA memory")]
pub struct DmaFault {
    pub addr: u64,
    pub len: usize,
}

impl SimDma {
    pub fn new() -> Arc<Self> {
        Arc::new(SimDma::default())
    }

    /// Total bytes currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    fn find(&self, addr: u64, len: usize) -> Result<Arc<Registration>, DmaFault> {
        let fault = DmaFault { addr, len };
        let a = usize::try_from(addr).map_err(|_| fault)?;
        let end = a.checked_add(len).ok_or(fault)?;
        let regions = self.regions.read();
        for w in regions.iter() {
            if let Some(r) = w.upgrade() {
                if a >= r.start && end <= r.start + r.len && !r.freed.load(Ordering::Acquire) {
                    return Ok(r);
                }
            }
        }
        Err(fault)
    }

    /// Whether `[addr, addr+len)` is inside one live DMA allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        self.find(addr, len).is_ok()
    }

    /// Device reads bytes at a device address.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let r = self.find(addr, out.len())?;
        // SAFETY: `find` checked the range lies inside a live allocation,
        // kept alive by `r` during the copy. The driver protocol gives the
        // device this range (it does not write it concurrently).
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), out.len())
        };
        drop(r);
        Ok(())
    }

    /// Device writes bytes at a device address.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        let r = self.find(addr, data.len())?;
        // SAFETY: as for `read`; the driver gave this buffer to the device.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        drop(r);
        Ok(())
    }

    /// Device reads a little-endian u64 (a descriptor word), `Acquire`.
    pub fn read_u64(&self, addr: u64) -> Result<u64, DmaFault> {
        if !addr.is_multiple_of(8) {
            return Err(DmaFault { addr, len: 8 });
        }
        let r = self.find(addr, 8)?;
        // SAFETY: in a live allocation and 8-byte aligned; the CPU side
        // accesses descriptor words with atomics too.
        let v = unsafe { (*(addr as usize as *const AtomicU64)).load(Ordering::Acquire) };
        drop(r);
        Ok(u64::from_le(v))
    }

    /// Device writes a little-endian u64 (descriptor write-back), `Release`
    /// so that packet data written before it is visible to the driver.
    pub fn write_u64(&self, addr: u64, value: u64) -> Result<(), DmaFault> {
        if !addr.is_multiple_of(8) {
            return Err(DmaFault { addr, len: 8 });
        }
        let r = self.find(addr, 8)?;
        // SAFETY: as for `read_u64`.
        unsafe { (*(addr as usize as *const AtomicU64)).store(value.to_le(), Ordering::Release) };
        drop(r);
        Ok(())
    }

    /// Device writes a little-endian u32 (transmit head write-back).
    pub fn write_u32(&self, addr: u64, value: u32) -> Result<(), DmaFault> {
        if !addr.is_multiple_of(4) {
            return Err(DmaFault { addr, len: 4 });
        }
        let r = self.find(addr, 4)?;
        // SAFETY: in a live allocation and 4-byte aligned.
        unsafe { (*(addr as usize as *const AtomicU32)).store(value.to_le(), Ordering::Release) };
        drop(r);
        Ok(())
    }
}

/// A device-side view of one live DMA allocation, for a device model that
/// accesses the same rings and buffers over and over (millions of times a
/// second) without a registry lookup each time. Every access is still
/// bounds-checked against the allocation and refused once the driver has
/// freed it.
#[derive(Clone)]
pub struct DmaWindow {
    reg: Arc<Registration>,
}

impl std::fmt::Debug for DmaWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaWindow")
            .field("start", &format_args!("{:#x}", self.reg.start))
            .field("len", &self.reg.len)
            .finish()
    }
}

impl SimDma {
    /// The window of the live allocation holding `[addr, addr+len)`.
    pub fn window(&self, addr: u64, len: usize) -> Result<DmaWindow, DmaFault> {
        let reg = self.find(addr, len)?;
        if reg.freed.load(Ordering::Acquire) {
            return Err(DmaFault { addr, len });
        }
        Ok(DmaWindow { reg })
    }
}

impl DmaWindow {
    /// Whether the driver still holds this memory.
    pub fn is_live(&self) -> bool {
        !self.reg.freed.load(Ordering::Acquire)
    }

    /// Whether `[addr, addr+len)` is inside this allocation (and it is live).
    #[inline]
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let Ok(a) = usize::try_from(addr) else {
            return false;
        };
        a >= self.reg.start
            && a.checked_add(len)
                .is_some_and(|e| e <= self.reg.start + self.reg.len)
            && self.is_live()
    }

    #[inline]
    fn check(&self, addr: u64, len: usize, align: usize) -> Result<usize, DmaFault> {
        if self.contains(addr, len) && (addr as usize).is_multiple_of(align) {
            Ok(addr as usize)
        } else {
            Err(DmaFault { addr, len })
        }
    }

    /// Device reads bytes (see [`SimDma::read`]).
    #[inline]
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let a = self.check(addr, out.len(), 1)?;
        // SAFETY: `check` proved the range is inside this allocation, which
        // `self.reg` keeps allocated; the driver gave it to the device.
        unsafe { std::ptr::copy_nonoverlapping(a as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Device writes bytes (see [`SimDma::write`]).
    #[inline]
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        let a = self.check(addr, data.len(), 1)?;
        // SAFETY: as for `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), a as *mut u8, data.len()) };
        Ok(())
    }

    /// Device reads a little-endian u64 descriptor word, `Acquire`.
    #[inline]
    pub fn read_u64(&self, addr: u64) -> Result<u64, DmaFault> {
        let a = self.check(addr, 8, 8)?;
        // SAFETY: inside the allocation and 8-byte aligned.
        let v = unsafe { (*(a as *const AtomicU64)).load(Ordering::Acquire) };
        Ok(u64::from_le(v))
    }

    /// Device writes a little-endian u64 (write-back), `Release`.
    #[inline]
    pub fn write_u64(&self, addr: u64, value: u64) -> Result<(), DmaFault> {
        let a = self.check(addr, 8, 8)?;
        // SAFETY: inside the allocation and 8-byte aligned.
        unsafe { (*(a as *const AtomicU64)).store(value.to_le(), Ordering::Release) };
        Ok(())
    }

    /// Device writes a little-endian u32 (head write-back), `Release`.
    #[inline]
    pub fn write_u32(&self, addr: u64, value: u32) -> Result<(), DmaFault> {
        let a = self.check(addr, 4, 4)?;
        // SAFETY: inside the allocation and 4-byte aligned.
        unsafe { (*(a as *const AtomicU32)).store(value.to_le(), Ordering::Release) };
        Ok(())
    }
}

impl DmaAllocator for SimDma {
    fn allocate(&self, size: usize, _contiguous: bool) -> Result<DmaRegion, HwError> {
        if size == 0 {
            return Err(HwError::Invalid("zero-sized DMA allocation".into()));
        }
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|e| HwError::Invalid(format!("DMA allocation of {size} bytes: {e}")))?;
        // SAFETY: layout has non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| HwError::Invalid(format!("out of memory allocating {size} bytes")))?;
        let reg = Arc::new(Registration {
            backing: SimBacking { ptr, layout },
            start: ptr.as_ptr() as usize,
            len: size,
            freed: AtomicBool::new(false),
        });
        {
            let mut regions = self.regions.write();
            regions.retain(|w| w.strong_count() > 0);
            regions.push(Arc::downgrade(&reg));
        }
        self.allocated.fetch_add(size as u64, Ordering::Relaxed);
        let addr = reg.backing.ptr.as_ptr() as u64;
        // SAFETY: `ptr` is a fresh zeroed allocation of `size` bytes owned by
        // `reg`, which the region keeps alive; identity translation.
        Ok(unsafe {
            DmaRegion::from_raw_parts(
                ptr,
                size,
                Translation::Contiguous(addr),
                size,
                Box::new(Held(reg)),
            )
        })
    }

    fn page_size(&self) -> usize {
        2 << 20
    }
}

/// A virtual clock. `sleep` advances virtual time instantly and runs the
/// registered hooks, so a lock-step device model progresses exactly as
/// far as the driver waits: deterministic and fast.
#[derive(Default)]
pub struct VirtualClock {
    nanos: AtomicU64,
    #[allow(clippy::type_complexity)]
    hooks: Mutex<Vec<Box<dyn Fn(Duration) + Send + Sync>>>,
}

impl std::fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualClock")
            .field("nanos", &self.nanos)
            .finish()
    }
}

impl VirtualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(VirtualClock::default())
    }

    /// Run `hook(now)` after every advance of the clock.
    pub fn on_advance(&self, hook: impl Fn(Duration) + Send + Sync + 'static) {
        self.hooks.lock().push(Box::new(hook));
    }

    /// Advance virtual time by `d` and run the hooks.
    pub fn advance(&self, d: Duration) {
        let now = self.nanos.fetch_add(d.as_nanos() as u64, Ordering::SeqCst) + d.as_nanos() as u64;
        let now = Duration::from_nanos(now);
        for h in self.hooks.lock().iter() {
            h(now);
        }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) {
        self.advance(d)
    }
}

impl Clock for Arc<VirtualClock> {
    fn now(&self) -> Duration {
        (**self).now()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_access_is_checked_against_live_memory() {
        let dma = SimDma::new();
        let region = dma.allocate(4096, true).unwrap();
        let base = region.device_addr();
        dma.write(base + 100, &[1, 2, 3]).unwrap();
        assert_eq!(region.slice(100, 3).unwrap(), &[1, 2, 3]);
        dma.write_u64(base + 8, 0xdead_beef).unwrap();
        assert_eq!(region.read_u64(8), 0xdead_beef);
        assert!(dma.write(base + 4095, &[0, 0]).is_err());
        assert!(dma.read_u64(base + 3).is_err());
        drop(region);
        assert!(
            dma.read_u64(base).is_err(),
            "freed memory is no longer DMA memory"
        );
    }

    #[test]
    fn a_window_is_bounded_and_dies_with_the_region() {
        let dma = SimDma::new();
        let region = dma.allocate(4096, true).unwrap();
        let base = region.device_addr();
        let w = dma.window(base + 64, 8).unwrap();
        w.write_u64(base + 8, 7).unwrap();
        assert_eq!(w.read_u64(base + 8).unwrap(), 7);
        w.write(base + 4090, &[1; 6]).unwrap();
        assert!(w.write(base + 4095, &[0, 0]).is_err());
        assert!(w.read_u64(base + 4).is_err(), "unaligned");
        assert!(!w.contains(base + 4096, 1));
        drop(region);
        assert!(!w.is_live());
        assert!(w.read_u64(base).is_err(), "freed: no longer DMA memory");
        assert!(dma.window(base, 8).is_err());
    }

    #[test]
    fn virtual_clock_runs_hooks() {
        let clock = VirtualClock::new();
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        clock.on_advance(move |now| s.store(now.as_micros() as u64, Ordering::SeqCst));
        clock.sleep(Duration::from_micros(250));
        assert_eq!(seen.load(Ordering::SeqCst), 250);
        assert!(crate::time::poll_until(
            &*clock,
            Duration::from_millis(1),
            || clock.now() > Duration::from_micros(700)
        ));
    }
}
