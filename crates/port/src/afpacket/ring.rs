//! The TPACKET_V2 rings of a packet socket: memory shared with the
//! kernel, walked slot by slot (Documentation/networking/packet_mmap.rst,
//! "TPACKET versions" and "Transmission process").
//!
//! One mapping holds the RX ring and, right after it, the TX ring. A ring
//! is a number of `SLOT`-byte slots; each starts with a
//! `struct tpacket2_hdr` whose first word, `tp_status`, says who owns it:
//!
//! * RX: the kernel fills a `TP_STATUS_KERNEL` slot and sets
//!   `TP_STATUS_USER`; we read it and write `TP_STATUS_KERNEL` back.
//! * TX: we fill a `TP_STATUS_AVAILABLE` slot and set
//!   `TP_STATUS_SEND_REQUEST`; a `send` makes the kernel walk the ring
//!   from where it stopped, and it writes `TP_STATUS_AVAILABLE` back once
//!   the frame's socket buffer is freed (the frame has left).
//!
//! The status word is the only field both sides write, so it is accessed
//! with atomics (acquire when taking a slot, release when handing it
//! over); the rest of a slot is touched only while we own it.
//!
//! Why TPACKET_V2: it hands every frame over as soon as it is written.
//! TPACKET_V3 hands over whole blocks, a partly filled one only when its
//! timer (a millisecond at least) runs out, so with a few dozen frames in
//! flight forwarding waited on that timer.
//!
//! The socket has `PACKET_VNET_HDR` on, so a `struct virtio_net_hdr`
//! precedes every frame: on RX the kernel writes it (we skip it, `tp_mac`
//! points past it); on TX we write one that says "no offload" with
//! `hdr_len` = the whole frame, which makes the kernel copy the frame
//! into one linear socket buffer instead of attaching the ring's page
//! behind a 14-byte head (the linear buffer is cheaper to forward).

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// `PACKET_VERSION` value for TPACKET_V2 (linux/if_packet.h).
pub const TPACKET_V2: libc::c_int = 1;

/// Slot size: a 1500-byte-MTU frame with its headers fits.
const SLOT: usize = 2048;
/// Slots per kernel block (a block is one contiguous allocation, a
/// multiple of the page size; slots never straddle blocks).
const SLOTS_PER_BLOCK: usize = 16;

/// Offsets in `struct tpacket2_hdr` and the `sockaddr_ll` after it.
mod hdr {
    pub const STATUS: usize = 0;
    pub const LEN: usize = 4;
    pub const SNAPLEN: usize = 8;
    pub const MAC: usize = 12;
    pub const VLAN_TCI: usize = 24;
    pub const VLAN_TPID: usize = 26;
    /// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))`: where the
    /// `sockaddr_ll` starts on RX, and where TX data starts
    /// (`TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`).
    pub const END: usize = 32;
    /// `sll_pkttype` in the `sockaddr_ll`.
    pub const PKTTYPE: usize = END + 10;
}

/// `struct virtio_net_hdr` (VirtIO 1.2 §5.1.6, legacy layout without
/// `num_buffers`): flags, gso_type, hdr_len, gso_size, csum_start,
/// csum_offset, in host byte order (legacy VirtIO, as packet sockets use
/// it).
const VNET_HDR_LEN: usize = 10;
const VNET_HDR_LEN_AT: usize = 2;

/// TX status values (linux/if_packet.h). The kernel may add timestamp
/// flags to `TP_STATUS_AVAILABLE` when a frame completes.
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_TS_FLAGS: u32 = (1 << 29) | (1 << 31);

/// Bytes of frame a TX slot holds.
pub const TX_ROOM: usize = SLOT - hdr::END - VNET_HDR_LEN;
// A 1500-byte-MTU frame with a VLAN tag fits.
const _: () = assert!(TX_ROOM >= 1518);

/// `struct tpacket_req`.
#[repr(C)]
#[derive(Clone, Copy)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

impl TpacketReq {
    /// A ring of at least `slots` slots (whole blocks).
    fn for_slots(slots: usize) -> TpacketReq {
        let block_nr = slots.div_ceil(SLOTS_PER_BLOCK).max(1);
        TpacketReq {
            block_size: (SLOT * SLOTS_PER_BLOCK) as u32,
            block_nr: block_nr as u32,
            frame_size: SLOT as u32,
            frame_nr: (block_nr * SLOTS_PER_BLOCK) as u32,
        }
    }
    fn bytes(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }
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

/// The shared mapping: RX ring, then TX ring.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only touched through
// `&mut Rings` (plus the kernel, through the status protocol).
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `Rings::new`; no
        // borrow of it outlives `&mut Rings`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One ring's walk over its slots.
struct Walk {
    /// Byte offset of the ring in the mapping.
    base: usize,
    slots: usize,
    /// The next slot to take.
    next: usize,
}

impl Walk {
    fn slot(&self, i: usize) -> usize {
        self.base + i * SLOT
    }
    fn current(&self) -> usize {
        self.slot(self.next)
    }
    /// The slot taken last.
    fn previous(&self) -> usize {
        self.slot((self.next + self.slots - 1) % self.slots)
    }
    fn advance(&mut self) {
        self.next += 1;
        if self.next == self.slots {
            self.next = 0;
        }
    }
}

/// The RX and TX rings of one packet socket.
pub struct Rings {
    map: Mapping,
    rx: Walk,
    tx: Walk,
}

impl Rings {
    /// Set up TPACKET_V2 RX and TX rings of at least `rx_slots` and
    /// `tx_slots` slots on `fd` (which must already be set to
    /// `TPACKET_V2` with `PACKET_VNET_HDR`, and not yet bound) and map
    /// them.
    pub fn new(fd: BorrowedFd<'_>, rx_slots: usize, tx_slots: usize) -> io::Result<Rings> {
        let rx = TpacketReq::for_slots(rx_slots);
        let tx = TpacketReq::for_slots(tx_slots);
        sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx)?;
        sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx)?;
        let len = rx.bytes() + tx.bytes();
        // SAFETY: maps the rings the kernel just allocated for this
        // socket (RX first, then TX, as packet_mmap lays them out); no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Rings {
            map: Mapping { ptr, len },
            rx: Walk {
                base: 0,
                slots: rx.frame_nr as usize,
                next: 0,
            },
            tx: Walk {
                base: rx.bytes(),
                slots: tx.frame_nr as usize,
                next: 0,
            },
        })
    }

    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.map.len);
        // SAFETY: every caller passes an offset inside a slot, and slots
        // lie inside the mapping.
        unsafe { self.map.ptr.as_ptr().add(off) }
    }

    fn status(&self, slot: usize) -> &AtomicU32 {
        // SAFETY: `tp_status` is the first word of a slot, 4-byte
        // aligned (slots are 2 KiB aligned), written by the kernel and by
        // us; both treat it as one 32-bit word, so an atomic view is
        // sound.
        unsafe { &*(self.at(slot + hdr::STATUS) as *const AtomicU32) }
    }

    fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: inside a slot we own (status read with acquire);
        // unaligned read of plain bytes.
        unsafe { std::ptr::read_unaligned(self.at(off) as *const u32) }
    }

    fn read_u16(&self, off: usize) -> u16 {
        // SAFETY: as for `read_u32`.
        unsafe { std::ptr::read_unaligned(self.at(off) as *const u16) }
    }

    /// Copy `bytes` to `off`, inside a TX slot we own.
    fn write(&mut self, off: usize, bytes: &[u8]) {
        debug_assert!(off + bytes.len() <= self.map.len);
        // SAFETY: the caller owns the slot (status AVAILABLE read with
        // acquire, not yet handed back) and keeps the bytes inside it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at(off), bytes.len()) };
    }

    /// Whether the kernel has handed over the next received frame.
    pub fn rx_ready(&self) -> bool {
        self.status(self.rx.current()).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Take the next received frame, if the kernel has handed one over,
    /// and give it to `f`. Returns false when no frame is ready.
    pub fn rx_next(&mut self, f: impl FnOnce(RxFrame<'_>)) -> bool {
        let slot = self.rx.current();
        let status = self.status(slot).load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return false;
        }
        let snaplen = self.read_u32(slot + hdr::SNAPLEN) as usize;
        let mac = self.read_u16(slot + hdr::MAC) as usize;
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                self.read_u16(slot + hdr::VLAN_TPID)
            } else {
                0x8100
            };
            (tpid, self.read_u16(slot + hdr::VLAN_TCI))
        });
        // SAFETY: pkttype is one byte inside the slot header.
        let pkttype = unsafe { *self.at(slot + hdr::PKTTYPE) };
        // The kernel keeps mac + snaplen inside the slot; clamp anyway.
        let start = mac.min(SLOT);
        let len = snaplen.min(SLOT - start);
        // SAFETY: [slot+start, slot+start+len) is inside the slot, which
        // the kernel does not write while we own it; the slice lives only
        // for the call of `f`.
        let data = unsafe { std::slice::from_raw_parts(self.at(slot + start), len) };
        f(RxFrame {
            data,
            wire_len: self.read_u32(slot + hdr::LEN) as usize,
            pkttype,
            vlan,
        });
        self.status(slot)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx.advance();
        true
    }

    /// Copy `frame` (at most [`TX_ROOM`] bytes; the caller checks) into
    /// the next TX slot, if the kernel has given it back, and hand it
    /// over: it leaves at the next `send` on the socket. Returns false
    /// when every slot is still waiting for the kernel.
    pub fn tx_push(&mut self, frame: &[u8]) -> bool {
        debug_assert!(frame.len() <= TX_ROOM);
        let slot = self.tx.current();
        let status = self.status(slot).load(Ordering::Acquire) & !TP_STATUS_TS_FLAGS;
        if status != TP_STATUS_AVAILABLE {
            return false;
        }
        let len = frame.len().min(TX_ROOM);
        let mut vnet = [0u8; VNET_HDR_LEN];
        vnet[VNET_HDR_LEN_AT..VNET_HDR_LEN_AT + 2].copy_from_slice(&(len as u16).to_ne_bytes());
        self.write(slot + hdr::END, &vnet);
        self.write(slot + hdr::END + VNET_HDR_LEN, &frame[..len]);
        let tp_len = ((VNET_HDR_LEN + len) as u32).to_ne_bytes();
        self.write(slot + hdr::LEN, &tp_len);
        self.write(slot + hdr::SNAPLEN, &tp_len);
        self.status(slot)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx.advance();
        true
    }

    /// Whether the frame pushed last still waits for a `send`. The kernel
    /// takes slots in order, so once it has taken that one it has taken
    /// every earlier one.
    pub fn tx_waiting(&self) -> bool {
        let status = self.status(self.tx.previous()).load(Ordering::Acquire);
        status & !TP_STATUS_TS_FLAGS == TP_STATUS_SEND_REQUEST
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_whole_blocks_of_whole_slots() {
        let r = TpacketReq::for_slots(500);
        assert_eq!(r.frame_nr, 512);
        assert_eq!(r.block_nr * (r.block_size / r.frame_size), r.frame_nr);
        assert_eq!(r.block_size % 4096, 0);
        assert_eq!(TpacketReq::for_slots(0).frame_nr as usize, SLOTS_PER_BLOCK);
    }
}
