//! One XDP socket's data path without the socket: its UMEM, its four
//! rings, and who holds each frame. [`super::AfXdpPort`] drives it with
//! a socket behind the rings; the `afxdp_ring` fuzz target drives it over
//! [`SocketRings::anonymous`] rings, writing what a hostile kernel could.
//!
//! The UMEM's first `ring` frames are for receiving (fill ring -> RX
//! ring -> back to the fill ring), the next `ring` for sending (free
//! list -> TX ring -> completion ring -> free list). Each frame is held
//! either by us or by the kernel. An RX or completion entry is taken only
//! if it names a frame of its half that the kernel holds, and an RX
//! descriptor only if its bytes lie inside that frame; anything else is
//! counted (`rx_errors` for RX descriptors, [`SocketRings::bad_completions`]
//! for completions) and nothing is read. A kernel that writes nonsense
//! keeps its frames; it never makes us read outside the UMEM, write a
//! frame it holds, or hand one frame out twice.

use super::ring::{Ring, Umem};
use crate::{Batch, QueueStats};
use nfkit_hw::PoolCache;
use std::io;

/// UMEM frame size.
pub const FRAME: usize = 2048;

/// A descriptor of the RX and TX rings.
pub type Desc = libc::xdp_desc;

/// The four rings of one socket.
pub struct FourRings {
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
    pub rx: Ring<Desc>,
    pub tx: Ring<Desc>,
}

/// The UMEM, the four rings and the frames' holders of one socket.
pub struct SocketRings {
    umem: Umem,
    rings: FourRings,
    /// Receive frames we hold, waiting for room on the fill ring.
    free_rx: Vec<u64>,
    /// Send frames we hold.
    free_tx: Vec<u64>,
    /// Per frame: whether the kernel holds it.
    kernel: Vec<bool>,
    /// Slots per ring, and frames per half of the UMEM.
    ring: u32,
    /// Completion entries that named no frame in flight.
    bad_completions: u64,
    pub stats: QueueStats,
}

impl SocketRings {
    /// Over `rings` of `ring` slots each and `umem` (`2 * ring` frames);
    /// every receive frame goes on the fill ring.
    pub fn new(ring: u32, rings: FourRings, umem: Umem) -> SocketRings {
        let frames = 2 * ring as usize;
        let mut s = SocketRings {
            umem,
            rings,
            free_rx: (0..ring as usize).map(|f| (f * FRAME) as u64).collect(),
            free_tx: (ring as usize..frames)
                .map(|f| (f * FRAME) as u64)
                .collect(),
            kernel: vec![false; frames],
            ring,
            bad_completions: 0,
            stats: QueueStats::default(),
        };
        s.refill();
        s
    }

    /// Rings of `ring` slots (a power of two) in private memory, with no
    /// socket: for tests and fuzzing, which play the kernel through
    /// [`SocketRings::kernel`].
    pub fn anonymous(ring: u32) -> io::Result<SocketRings> {
        let rings = FourRings {
            fill: Ring::anonymous(ring)?,
            comp: Ring::anonymous(ring)?,
            rx: Ring::anonymous(ring)?,
            tx: Ring::anonymous(ring)?,
        };
        let umem = Umem::new(2 * ring as usize, FRAME)?;
        Ok(SocketRings::new(ring, rings, umem))
    }

    /// The rings, for the kernel's side of anonymous ones (their
    /// `kernel_*` methods do nothing on rings mapped from a socket).
    pub fn kernel(&mut self) -> &mut FourRings {
        &mut self.rings
    }

    /// Completion entries that named no frame in flight.
    pub fn bad_completions(&self) -> u64 {
        self.bad_completions
    }

    /// Times an index the kernel wrote was out of range, all rings.
    pub fn bad_indices(&self) -> u64 {
        let r = &self.rings;
        r.fill.bad_indices() + r.comp.bad_indices() + r.rx.bad_indices() + r.tx.bad_indices()
    }

    /// Whether every frame has exactly one holder: each half's frames
    /// are either the kernel's or on our list for that half, once.
    pub fn frames_accounted(&self) -> bool {
        let ring = self.ring as usize;
        let mut ours = vec![false; 2 * ring];
        for (list, half) in [(&self.free_rx, 0), (&self.free_tx, 1)] {
            for &a in list {
                let f = (a / FRAME as u64) as usize;
                if !a.is_multiple_of(FRAME as u64) || f / ring != half || ours[f] || self.kernel[f]
                {
                    return false;
                }
                ours[f] = true;
            }
        }
        ours.iter().zip(&self.kernel).all(|(o, k)| o ^ k)
    }

    /// The frame `addr` falls in, if it is in `half` (0 receive, 1 send)
    /// and the kernel holds it.
    fn kernel_frame(&self, addr: u64, half: usize) -> Option<usize> {
        let f = usize::try_from(addr / FRAME as u64).ok()?;
        (f / self.ring as usize == half && self.kernel[f]).then_some(f)
    }

    /// Put the receive frames we hold on the fill ring, as far as it has
    /// room; how many.
    fn refill(&mut self) -> u32 {
        let n = self.rings.fill.free().min(self.free_rx.len() as u32);
        for _ in 0..n {
            let Some(a) = self.free_rx.pop() else { break };
            self.kernel[a as usize / FRAME] = true;
            self.rings.fill.push(a);
        }
        if n > 0 {
            self.rings.fill.submit();
        }
        n
    }

    /// Take received frames into `batch` (buffers from `cache`); how
    /// many, and whether the kernel wants a wakeup for the fill ring.
    /// `complete`: finish TCP/UDP checksums the sender left partial (copy
    /// mode, where the kernel does not tell; see
    /// [`nfkit_packet::offload::complete_if_partial`]).
    pub fn rx(
        &mut self,
        cache: &mut PoolCache,
        batch: &mut Batch,
        complete: bool,
    ) -> (usize, bool) {
        let avail = self.rings.rx.available().min(batch.room() as u32);
        let mut taken = 0;
        let mut n = 0;
        while taken < avail {
            let d = self.rings.rx.peek(taken);
            let Some(mut b) = cache.alloc() else { break };
            taken += 1;
            // Aligned mode: the frame is the address rounded down; the
            // bytes start after the headroom and must end in the frame.
            let inside = d.len > 0 && d.addr % FRAME as u64 + u64::from(d.len) <= FRAME as u64;
            let Some(f) = self.kernel_frame(d.addr, 0).filter(|_| inside) else {
                self.stats.rx_errors += 1;
                cache.free(b);
                continue;
            };
            self.kernel[f] = false;
            match self.umem.read(d.addr, d.len as usize) {
                Some(data) if b.copy_from(data).is_ok() => {
                    self.stats.rx_bytes += data.len() as u64;
                    if complete {
                        nfkit_packet::offload::complete_if_partial(b.data_mut());
                    }
                    batch.push(b);
                    n += 1;
                }
                _ => {
                    self.stats.rx_errors += 1;
                    cache.free(b);
                }
            }
            self.free_rx.push((f * FRAME) as u64);
        }
        if taken > 0 {
            self.rings.rx.release(taken);
        }
        let wake = self.refill() > 0 && self.rings.fill.needs_wakeup();
        self.stats.rx_packets += n as u64;
        (n, wake)
    }

    /// Move completed send frames back to the free list.
    pub fn reclaim(&mut self) {
        let done = self.rings.comp.available();
        for i in 0..done {
            let a = self.rings.comp.peek(i);
            match self.kernel_frame(a, 1) {
                Some(f) => {
                    self.kernel[f] = false;
                    self.free_tx.push((f * FRAME) as u64);
                }
                None => self.bad_completions += 1,
            }
        }
        if done > 0 {
            self.rings.comp.release(done);
        }
    }

    /// Copy what fits of `batch` into free send frames and put them on
    /// the TX ring (taking them out of `batch`); how many.
    pub fn tx(&mut self, batch: &mut Batch) -> usize {
        self.reclaim();
        let n = batch
            .len()
            .min(self.free_tx.len())
            .min(self.rings.tx.free() as usize);
        for b in batch.drain_front(n) {
            // Cannot fail: a free frame was counted above, and a pool
            // buffer (at most 1920 bytes) fits a 2048-byte frame.
            let Some(addr) = self.free_tx.pop() else {
                break;
            };
            let Some(frame) = self.umem.write(addr, b.len()) else {
                self.free_tx.push(addr);
                self.stats.tx_errors += 1;
                continue;
            };
            frame.copy_from_slice(b.data());
            self.kernel[addr as usize / FRAME] = true;
            self.rings.tx.push(Desc {
                addr,
                len: b.len() as u32,
                options: 0,
            });
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += b.len() as u64;
        }
        if n > 0 {
            self.rings.tx.submit();
        }
        n
    }

    /// Frames on the TX ring the kernel has not taken yet.
    pub fn tx_pending(&self) -> bool {
        self.rings.tx.free() < self.ring
    }

    /// Whether the kernel asks for a wakeup to send.
    pub fn tx_needs_wakeup(&self) -> bool {
        self.rings.tx.needs_wakeup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open::software_pool;

    fn desc(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            options: 0,
        }
    }

    /// A kernel that hands back frames it does not hold, out of the
    /// UMEM, past their frame's end, twice, or with its producer index
    /// far ahead: every such descriptor is a counted error, the good
    /// ones arrive, and every frame keeps one holder.
    #[test]
    fn hostile_rx_and_completion_entries_are_counted_not_read() {
        let pool = software_pool("t", 256).unwrap();
        let mut cache = pool.cache(64);
        let mut q = SocketRings::anonymous(8).unwrap();
        let f = FRAME as u64;
        let k = q.kernel();
        for (i, d) in [
            desc(256, 60),          // good, frame 0
            desc(256, 60),          // frame 0 again: no longer the kernel's
            desc(8 * f, 60),        // a send frame
            desc(1 << 40, 60),      // outside the UMEM
            desc(f + 2000, 60),     // past the end of frame 1
            desc(2 * f + 256, 0),   // empty
            desc(3 * f + 256, 100), // good, frame 3
        ]
        .into_iter()
        .enumerate()
        {
            assert!(k.rx.kernel_write_slot(i as u32, d));
        }
        assert!(k.rx.kernel_set_producer(7));
        let mut batch = Batch::new();
        let (n, _) = q.rx(&mut cache, &mut batch, false);
        assert_eq!((n, q.stats.rx_packets, q.stats.rx_errors), (2, 2, 5));
        assert_eq!(batch.len(), 2);
        assert!(q.frames_accounted());
        // A producer index a million ahead: at most one ring's worth is
        // read, each slot checked: all stale (frames 0 and 3 are still
        // ours: the kernel consumed nothing of the full fill ring).
        assert!(q.kernel().rx.kernel_set_producer(1_000_000));
        batch.clear();
        q.rx(&mut cache, &mut batch, false);
        assert!(q.bad_indices() > 0);
        assert_eq!(q.stats.rx_packets + q.stats.rx_errors, 7 + 8);
        assert!(q.frames_accounted());
        // Completions of frames never sent, and a consumer index on the
        // TX ring that runs ahead of what we produced.
        let k = q.kernel();
        assert!(k.comp.kernel_write_slot(0, 9 * f));
        assert!(k.comp.kernel_write_slot(1, 3 * f));
        assert!(k.comp.kernel_set_producer(2));
        assert!(k.tx.kernel_set_consumer(100));
        batch.clear();
        let n = q.tx(&mut batch);
        assert_eq!((n, q.bad_completions()), (0, 2));
        // Nothing counts as free on that TX ring, so nothing is pushed.
        assert!(q.tx_pending());
        assert!(q.frames_accounted());
        drop(batch);
        drop(cache);
        assert_eq!(pool.free_count(), pool.capacity());
    }
}
