//! The device's DMA accesses go through a handful of cached windows onto
//! the driver's live allocations (rings, packet pool), so the data path
//! does one bounds check per access instead of a registry lookup. Every
//! access is still checked against live DMA memory (`SimDma`).

use nfkit_hw::sim::{DmaFault, DmaWindow, SimDma};

/// Windows kept; a driver typically has a pool and a few rings.
const WINDOWS: usize = 8;

#[derive(Debug, Default)]
pub(crate) struct DmaCache {
    /// Most recently used first.
    windows: Vec<DmaWindow>,
}

impl DmaCache {
    pub fn new() -> DmaCache {
        DmaCache {
            windows: Vec::with_capacity(WINDOWS),
        }
    }

    /// Forget windows onto memory the driver freed.
    pub fn prune(&mut self) {
        self.windows.retain(DmaWindow::is_live);
    }

    fn window(&mut self, dma: &SimDma, addr: u64, len: usize) -> Result<&DmaWindow, DmaFault> {
        if let Some(i) = self.windows.iter().position(|w| w.contains(addr, len)) {
            if i > 0 {
                // keep the hottest window first
                self.windows[..=i].rotate_right(1);
            }
            return Ok(&self.windows[0]);
        }
        let w = dma.window(addr, len)?;
        if self.windows.len() == WINDOWS {
            self.windows.pop();
        }
        self.windows.insert(0, w);
        Ok(&self.windows[0])
    }

    pub fn read(&mut self, dma: &SimDma, addr: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        self.window(dma, addr, out.len())?.read(addr, out)
    }

    pub fn write(&mut self, dma: &SimDma, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.window(dma, addr, data.len())?.write(addr, data)
    }

    pub fn read_u64(&mut self, dma: &SimDma, addr: u64) -> Result<u64, DmaFault> {
        self.window(dma, addr, 8)?.read_u64(addr)
    }

    pub fn write_u64(&mut self, dma: &SimDma, addr: u64, v: u64) -> Result<(), DmaFault> {
        self.window(dma, addr, 8)?.write_u64(addr, v)
    }

    pub fn write_u32(&mut self, dma: &SimDma, addr: u64, v: u32) -> Result<(), DmaFault> {
        self.window(dma, addr, 4)?.write_u32(addr, v)
    }
}
