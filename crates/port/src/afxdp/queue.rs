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
/// `XDP_PKT_CONTD` (linux/if_xdp.h): in a descriptor's options, more
/// descriptors of the same frame follow (multi-buffer, `XDP_USE_SG`).
pub const XDP_PKT_CONTD: u32 = 1;
/// Descriptors one frame may take when sending: the kernel's copy mode
/// builds a frame of at most `MAX_SKB_FRAGS` (17) of them; 16 keeps a
/// margin. 32 KiB frames.
pub const MAX_TX_DESCS: usize = 16;

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
    /// Frames may span several descriptors (bound with `XDP_USE_SG`).
    multi_buffer: bool,
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
            multi_buffer: false,
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

    /// Frames may span several descriptors (the socket was bound with
    /// `XDP_USE_SG`).
    pub fn set_multi_buffer(&mut self, on: bool) {
        self.multi_buffer = on;
    }

    /// Largest frame [`Self::tx`] sends.
    pub fn max_tx_frame(&self) -> usize {
        if self.multi_buffer {
            MAX_TX_DESCS * FRAME
        } else {
            FRAME
        }
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
        let avail = self.rings.rx.available();
        let mut taken = 0;
        let mut n = 0;
        while taken < avail && !batch.is_full() {
            // A frame is the descriptors up to one without XDP_PKT_CONTD.
            let mut end = taken;
            let mut complete_frame = false;
            while end < avail && end - taken < nfkit_hw::MAX_SEGS as u32 {
                let d = self.rings.rx.peek(end);
                end += 1;
                if d.options & XDP_PKT_CONTD == 0 {
                    complete_frame = true;
                    break;
                }
            }
            if !complete_frame
                && end == avail
                && avail < self.ring
                && end - taken < nfkit_hw::MAX_SEGS as u32
            {
                // Its end is not published yet: next time.
                break;
            }
            let Some(mut head) = cache.alloc() else { break };
            // Every descriptor's frame comes back to us; the bytes go
            // into the chain while all is well.
            let mut good = complete_frame;
            for i in taken..end {
                let d = self.rings.rx.peek(i);
                // Aligned mode: the frame is the address rounded down; the
                // bytes start after the headroom and must end in the frame.
                let inside = d.addr % FRAME as u64 + u64::from(d.len) <= FRAME as u64
                    && (d.len > 0 || i > taken);
                let Some(f) = self.kernel_frame(d.addr, 0).filter(|_| inside) else {
                    good = false;
                    continue;
                };
                self.kernel[f] = false;
                self.free_rx.push((f * FRAME) as u64);
                if !good {
                    continue;
                }
                let Some(data) = self.umem.read(d.addr, d.len as usize) else {
                    good = false;
                    continue;
                };
                // A UMEM frame may hold more than a pool buffer.
                let room = cache.pool().data_room();
                for (j, part) in data.chunks(room).enumerate() {
                    good = good
                        && if i == taken && j == 0 {
                            head.copy_from(part).is_ok()
                        } else {
                            match cache.alloc() {
                                Some(mut seg) => {
                                    let _ = seg.copy_from(part);
                                    head.append(seg).is_ok()
                                }
                                None => false,
                            }
                        };
                }
            }
            taken = end;
            if !good {
                // A descriptor the kernel did not hold or past its frame,
                // a frame without its end (the whole ring, or more than a
                // chain holds), or no buffer for a segment.
                self.stats.rx_errors += 1;
                cache.free(head);
                continue;
            }
            self.stats.rx_bytes += head.pkt_len() as u64;
            if complete && !head.is_chained() {
                nfkit_packet::offload::complete_if_partial(head.data_mut());
            }
            batch.push(head);
            n += 1;
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
    /// the TX ring (taking them out of `batch`); how many. A frame larger
    /// than a UMEM frame takes several descriptors (multi-buffer); one
    /// larger than [`Self::max_tx_frame`] is dropped, counted in
    /// `tx_errors`.
    pub fn tx(&mut self, batch: &mut Batch) -> usize {
        self.reclaim();
        let mut taken = 0;
        let mut queued = 0;
        let max = self.max_tx_frame();
        for b in batch.iter() {
            let len = b.pkt_len();
            if len == 0 || len > max {
                self.stats.tx_errors += 1;
                taken += 1;
                continue;
            }
            let descs = len.div_ceil(FRAME);
            if descs > self.free_tx.len() || descs as u32 > self.rings.tx.free() {
                break;
            }
            taken += 1;
            let mut segs = b.segments();
            let mut cur: &[u8] = segs.next().unwrap_or(&[]);
            let mut left = len;
            for k in 0..descs {
                // Cannot fail: counted above.
                let Some(addr) = self.free_tx.pop() else {
                    break;
                };
                let chunk = left.min(FRAME);
                let Some(frame) = self.umem.write(addr, chunk) else {
                    self.free_tx.push(addr);
                    break;
                };
                let mut at = 0;
                while at < chunk {
                    if cur.is_empty() {
                        match segs.next() {
                            Some(s) => {
                                cur = s;
                                continue;
                            }
                            None => break,
                        }
                    }
                    let m = (chunk - at).min(cur.len());
                    frame[at..at + m].copy_from_slice(&cur[..m]);
                    cur = &cur[m..];
                    at += m;
                }
                left -= chunk;
                self.kernel[addr as usize / FRAME] = true;
                self.rings.tx.push(Desc {
                    addr,
                    len: chunk as u32,
                    options: if k + 1 < descs { XDP_PKT_CONTD } else { 0 },
                });
                queued += 1;
            }
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += len as u64;
        }
        batch.drain_front(taken);
        if queued > 0 {
            self.rings.tx.submit();
        }
        taken
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

    fn contd(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            options: XDP_PKT_CONTD,
        }
    }

    /// Multi-buffer: a frame over several descriptors becomes a chain;
    /// one whose end is not published yet waits; one without an end
    /// (the whole ring) or with a bad piece is dropped, counted once,
    /// and every frame keeps one holder. Sending a large chain takes
    /// several descriptors, all but the last marked.
    #[test]
    fn multi_buffer_frames_chain_and_frames_without_end_are_counted() {
        let pool = software_pool("t", 256).unwrap();
        let mut cache = pool.cache(64);
        let mut q = SocketRings::anonymous(8).unwrap();
        q.set_multi_buffer(true);
        let f = FRAME as u64;
        let mut batch = Batch::new();
        let k = q.kernel();
        assert!(k.rx.kernel_write_slot(0, contd(0, 2048)));
        assert!(k.rx.kernel_write_slot(1, desc(f, 100)));
        assert!(k.rx.kernel_write_slot(2, contd(2 * f, 100)));
        assert!(k.rx.kernel_set_producer(3));
        let (n, _) = q.rx(&mut cache, &mut batch, false);
        assert_eq!(n, 1, "the third descriptor's frame has no end yet");
        assert_eq!((batch[0].pkt_len(), batch[0].nb_segs()), (2148, 3));
        // Its end arrives.
        let k = q.kernel();
        assert!(k.rx.kernel_write_slot(3, desc(3 * f, 50)));
        assert!(k.rx.kernel_set_producer(4));
        let (n, _) = q.rx(&mut cache, &mut batch, false);
        assert_eq!((n, batch[1].pkt_len()), (1, 150));
        assert_eq!(q.stats.rx_errors, 0);
        // A piece past its frame's end spoils the frame (counted once).
        let k = q.kernel();
        assert!(k.rx.kernel_write_slot(4, contd(4 * f, 100)));
        assert!(k.rx.kernel_write_slot(5, desc(5 * f + 2000, 100)));
        assert!(k.rx.kernel_set_producer(6));
        assert_eq!(q.rx(&mut cache, &mut batch, false).0, 0);
        assert_eq!(q.stats.rx_errors, 1);
        // A whole ring of pieces without an end.
        let k = q.kernel();
        for i in 6..14 {
            assert!(k.rx.kernel_write_slot(i, contd((i as u64 % 8) * f, 64)));
        }
        assert!(k.rx.kernel_set_producer(14));
        assert_eq!(q.rx(&mut cache, &mut batch, false).0, 0);
        assert_eq!(q.stats.rx_errors, 2);
        assert!(q.frames_accounted());
        // Sending: 5,000 bytes in three descriptors.
        batch.clear();
        let big: Vec<u8> = (0..5000).map(|i| i as u8).collect();
        batch.push(pool.alloc_frame(&big).unwrap());
        assert_eq!(q.tx(&mut batch), 1);
        let k = q.kernel();
        let d: Vec<Desc> = (0..3).map(|i| k.tx.kernel_read_slot(i).unwrap()).collect();
        assert_eq!(
            d.iter().map(|d| d.len).collect::<Vec<_>>(),
            [2048, 2048, 904]
        );
        assert_eq!(
            d.iter().map(|d| d.options).collect::<Vec<_>>(),
            [XDP_PKT_CONTD, XDP_PKT_CONTD, 0]
        );
        // Larger than a frame may be: counted, not sent.
        batch.push(
            pool.alloc_frame(&vec![0; MAX_TX_DESCS * FRAME + 1])
                .unwrap(),
        );
        assert_eq!(q.tx(&mut batch), 1);
        assert_eq!(q.stats.tx_errors, 1);
        assert!(q.frames_accounted());
        drop(batch);
        drop(cache);
        assert_eq!(pool.free_count(), pool.capacity());
    }
}
