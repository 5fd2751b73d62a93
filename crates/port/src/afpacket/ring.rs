//! The TPACKET_V3 receive ring: memory shared with the kernel, walked
//! block by block (Documentation/networking/packet_mmap.rst, "TPACKET_V3").
//!
//! The ring is `block_nr` blocks of `block_size` bytes. The kernel fills a
//! block with frames, then hands it over by setting `TP_STATUS_USER` in the
//! block's status word; we read its frames and hand it back by writing
//! `TP_STATUS_KERNEL`. The status word is the only field both sides write,
//! so it is accessed with atomics (acquire on read, release on return);
//! everything else in a block is read only while we own it.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// `PACKET_VERSION` value for TPACKET_V3 (linux/if_packet.h).
pub const TPACKET_V3: libc::c_int = 2;

/// Offsets in `struct tpacket_block_desc` / `tpacket_hdr_v1`.
mod block {
    pub const STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const FIRST_PKT: usize = 16;
}

/// Offsets in `struct tpacket3_hdr` and the `sockaddr_ll` after it.
mod frame {
    pub const NEXT_OFFSET: usize = 0;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const STATUS: usize = 20;
    pub const MAC: usize = 24;
    pub const VLAN_TCI: usize = 32;
    pub const VLAN_TPID: usize = 36;
    /// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))` + offset of sll_pkttype.
    pub const PKTTYPE: usize = 48 + 10;
}

/// `struct tpacket_req3`.
#[repr(C)]
#[derive(Clone, Copy)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// One received frame, borrowed from the ring.
pub struct RxFrame<'a> {
    /// The captured bytes (`snaplen` of them).
    pub data: &'a [u8],
    /// The frame's length on the wire (larger than `data` if cut short).
    pub wire_len: usize,
    /// The `sll_pkttype` (PACKET_HOST, PACKET_OUTGOING, ...).
    pub pkttype: u8,
    /// A VLAN tag the kernel took out of the frame: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
}

pub struct RxRing {
    map: NonNull<u8>,
    size: usize,
    block_size: usize,
    block_nr: usize,
    /// The block we are reading, and where in it.
    cur: usize,
    pkts_left: u32,
    pkt_off: usize,
}

// SAFETY: the mapping is owned by this value and only touched through
// `&mut self` (plus the kernel, through the status protocol).
unsafe impl Send for RxRing {}

impl RxRing {
    /// Set up a TPACKET_V3 RX ring of about `frames` 2 KiB frames on `fd`
    /// (which must already be set to `TPACKET_V3`) and map it.
    pub fn new(fd: BorrowedFd<'_>, frames: usize) -> io::Result<RxRing> {
        const BLOCK: u32 = 1 << 18;
        const FRAME: u32 = 2048;
        let block_nr = ((frames as u32 * FRAME).div_ceil(BLOCK)).max(2);
        let req = TpacketReq3 {
            block_size: BLOCK,
            block_nr,
            frame_size: FRAME,
            frame_nr: block_nr * (BLOCK / FRAME),
            // Hand a partly filled block over after 1 ms, so that a trickle
            // of packets is not held back.
            retire_blk_tov: 1,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        let size = (BLOCK * block_nr) as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket;
        // no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RxRing {
            map: NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?,
            size,
            block_size: BLOCK as usize,
            block_nr: block_nr as usize,
            cur: 0,
            pkts_left: 0,
            pkt_off: 0,
        })
    }

    fn block_ptr(&self, b: usize) -> *mut u8 {
        // SAFETY: b < block_nr, so the offset is inside the mapping.
        unsafe { self.map.as_ptr().add(b * self.block_size) }
    }

    fn status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: the status word is 4-byte aligned (blocks are page
        // aligned) inside the mapping, written by the kernel and us; both
        // sides treat it as a 32-bit word, so an atomic view is sound.
        unsafe { &*(self.block_ptr(b).add(block::STATUS) as *const AtomicU32) }
    }

    fn read_u32(&self, off: usize) -> u32 {
        debug_assert!(off + 4 <= self.block_size);
        // SAFETY: inside the current block, which we own (status USER was
        // read with acquire ordering); unaligned read of plain bytes.
        unsafe { std::ptr::read_unaligned(self.block_ptr(self.cur).add(off) as *const u32) }
    }

    fn read_u16(&self, off: usize) -> u16 {
        // SAFETY: as for `read_u32`.
        unsafe { std::ptr::read_unaligned(self.block_ptr(self.cur).add(off) as *const u16) }
    }

    /// Take the next frame, if the kernel has handed one over, and give
    /// it to `f`. Returns false when no frame is ready.
    pub fn next(&mut self, f: impl FnOnce(RxFrame<'_>)) -> bool {
        if self.pkts_left == 0 && !self.open_block() {
            return false;
        }
        let off = self.pkt_off;
        let snaplen = self.read_u32(off + frame::SNAPLEN) as usize;
        let mac = self.read_u16(off + frame::MAC) as usize;
        let status = self.read_u32(off + frame::STATUS);
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                self.read_u16(off + frame::VLAN_TPID)
            } else {
                0x8100
            };
            (tpid, self.read_u32(off + frame::VLAN_TCI) as u16)
        });
        // SAFETY: pkttype is one byte inside the frame header.
        let pkttype = unsafe { *self.block_ptr(self.cur).add(off + frame::PKTTYPE) };
        let start = off + mac;
        let len = snaplen.min(self.block_size.saturating_sub(start));
        // SAFETY: [start, start+len) is inside the current block, which
        // the kernel does not write while we own it; the slice lives only
        // for the call of `f`.
        let data = unsafe { std::slice::from_raw_parts(self.block_ptr(self.cur).add(start), len) };
        f(RxFrame {
            data,
            wire_len: self.read_u32(off + frame::LEN) as usize,
            pkttype,
            vlan,
        });
        self.pkts_left -= 1;
        if self.pkts_left == 0 {
            self.close_block();
        } else {
            self.pkt_off += self.read_u32(off + frame::NEXT_OFFSET) as usize;
        }
        true
    }

    /// Start reading the current block if the kernel handed it over.
    fn open_block(&mut self) -> bool {
        let st = self.status(self.cur).load(Ordering::Acquire);
        if st & libc::TP_STATUS_USER == 0 {
            return false;
        }
        let n = self.read_u32(block::NUM_PKTS);
        if n == 0 {
            self.close_block();
            return false;
        }
        self.pkts_left = n;
        self.pkt_off = self.read_u32(block::FIRST_PKT) as usize;
        true
    }

    /// Give the current block back to the kernel and move on.
    fn close_block(&mut self) {
        self.status(self.cur)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.block_nr;
        self.pkts_left = 0;
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no borrow of it
        // outlives `&mut self`.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.size) };
    }
}
