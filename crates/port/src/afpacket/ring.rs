//! The rings of a packet socket: memory shared with the kernel
//! (Documentation/networking/packet_mmap.rst, "TPACKET versions",
//! "AF_PACKET TPACKET_V3 example" and "Transmission process").
//!
//! One mapping holds the RX ring and, right after it, the TX ring. Both
//! are cut into blocks (contiguous allocations, a multiple of the page
//! size). Every frame starts with a header (`struct tpacket2_hdr` or
//! `struct tpacket3_hdr`, [`Layout`]) whose `tp_status` word says who
//! owns it. The status words are the only fields both sides write, so
//! they are accessed with atomics (acquire when taking, release when
//! handing over); everything else is touched only while we own it.
//!
//! * TX (both versions): the ring is `SLOT`-byte slots. We fill a
//!   `TP_STATUS_AVAILABLE` slot and set `TP_STATUS_SEND_REQUEST`; a `send`
//!   makes the kernel walk the ring from where it stopped, and it writes
//!   `TP_STATUS_AVAILABLE` back once the frame's socket buffer is freed.
//! * RX, TPACKET_V2 (`tpacket=2`, the default): the ring is slots too.
//!   The kernel fills a `TP_STATUS_KERNEL` slot and sets
//!   `TP_STATUS_USER`; we copy the frame out and write `TP_STATUS_KERNEL`
//!   back. Each frame is ours as soon as it is written.
//! * RX, TPACKET_V3 (`tpacket=3`): the kernel packs frames back to
//!   back into a block (`struct tpacket_block_desc` at its start, frames
//!   linked by `tp_next_offset`) and hands over the whole block, by
//!   `block_status`, when it is full or when its timer (`block_ms`) runs
//!   out. Small frames take less memory (fewer cache lines per frame),
//!   but a frame can wait up to `block_ms` for its block: with a few dozen
//!   frames in flight, forwarding then runs at the timer's pace, which is
//!   why V2 is the default.
//!
//! The socket has `PACKET_VNET_HDR` on, so a `struct virtio_net_hdr`
//! precedes every frame: on RX the kernel writes it (`tp_mac` points
//! past it; we read its checksum flags); on TX we write one that asks
//! for the TCP/UDP checksum when the packet's offload state does, with
//! `hdr_len` = the whole frame, which makes the kernel copy the frame
//! into one linear socket buffer instead of attaching the ring's page
//! behind a 14-byte head (the linear buffer is cheaper to forward).

use crate::spec::TpacketVersion as Version;
use crate::sys;
use nfkit_hw::linux::Mapping;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// The `PACKET_VERSION` value for `version` (linux/if_packet.h `enum
/// tpacket_versions`).
pub fn version_sockopt(version: Version) -> libc::c_int {
    match version {
        Version::V2 => 1,
        Version::V3 { .. } => 2,
    }
}

fn layout(version: Version) -> &'static Layout {
    match version {
        Version::V2 => &V2_LAYOUT,
        Version::V3 { .. } => &V3_LAYOUT,
    }
}

/// Where the fields nfkit uses sit in a frame header.
#[derive(Debug)]
struct Layout {
    status: usize,
    len: usize,
    snaplen: usize,
    mac: usize,
    vlan_tci: usize,
    vlan_tpid: usize,
    /// `TPACKET_ALIGN(sizeof(header))`: where the `sockaddr_ll` starts
    /// on RX, and where TX data starts (`TPACKET{2,3}_HDRLEN -
    /// sizeof(struct sockaddr_ll)`).
    end: usize,
}

impl Layout {
    /// `sll_pkttype` in the `sockaddr_ll` after the header.
    fn pkttype(&self) -> usize {
        self.end + 10
    }
}

/// `struct tpacket2_hdr`.
const V2_LAYOUT: Layout = Layout {
    status: 0,
    len: 4,
    snaplen: 8,
    mac: 12,
    vlan_tci: 24,
    vlan_tpid: 26,
    end: 32,
};

/// `struct tpacket3_hdr` (the VLAN fields are in `hv1`).
const V3_LAYOUT: Layout = Layout {
    status: 20,
    len: 16,
    snaplen: 12,
    mac: 24,
    vlan_tci: 32,
    vlan_tpid: 36,
    end: 48,
};

/// `struct tpacket3_hdr`'s `tp_next_offset`: the next frame of a block.
const V3_NEXT_OFFSET: usize = 0;
/// `struct tpacket_block_desc` → `struct tpacket_hdr_v1`.
mod block {
    pub const STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const OFFSET_TO_FIRST_PKT: usize = 16;
}

/// Slot size: a 1500-byte-MTU frame with its headers fits.
const SLOT: usize = 2048;
/// Slots per kernel block (slots never straddle blocks). V3 RX blocks
/// have the same size, so `ring=SLOTS` means the same memory either way.
const SLOTS_PER_BLOCK: usize = 16;
const BLOCK: usize = SLOT * SLOTS_PER_BLOCK;

/// `struct virtio_net_hdr` (VirtIO 1.2 §5.1.6, legacy layout without
/// `num_buffers`): flags, gso_type, hdr_len, gso_size, csum_start,
/// csum_offset, in host byte order (legacy VirtIO, as packet sockets use
/// it).
pub const VNET_HDR_LEN: usize = 10;
const VNET_HDR_LEN_AT: usize = 2;

/// TX status values (linux/if_packet.h). The kernel may add timestamp
/// flags to `TP_STATUS_AVAILABLE` when a frame completes.
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_TS_FLAGS: u32 = (1 << 29) | (1 << 31);

/// Bytes of frame a TX slot holds (with the larger, V3, header).
pub const TX_ROOM: usize = SLOT - V3_LAYOUT.end - VNET_HDR_LEN;
// A 1500-byte-MTU frame with a VLAN tag fits.
const _: () = assert!(TX_ROOM >= 1518);

/// `struct tpacket_req3` (its first four fields are `struct
/// tpacket_req`, which is what TPACKET_V2 reads).
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

impl TpacketReq3 {
    /// A ring of at least `slots` slots (whole blocks); `block_ms` is the
    /// V3 RX block timer (0 everywhere else: the kernel refuses it on TX
    /// rings).
    fn for_slots(slots: usize, block_ms: u32) -> TpacketReq3 {
        let block_nr = slots.div_ceil(SLOTS_PER_BLOCK).max(1);
        TpacketReq3 {
            block_size: BLOCK as u32,
            block_nr: block_nr as u32,
            frame_size: SLOT as u32,
            frame_nr: (block_nr * SLOTS_PER_BLOCK) as u32,
            retire_blk_tov: block_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
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
    /// From the frame's `virtio_net_hdr`: the TCP/UDP checksum is partial
    /// (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, the kernel's `CHECKSUM_PARTIAL`),
    /// to be completed from `csum_start` (from the frame's start, before
    /// any VLAN tag is put back) into the field `csum_offset` further.
    pub needs_csum: Option<(u16, u16)>,
    /// The kernel verified the TCP/UDP checksum
    /// (`VIRTIO_NET_HDR_F_DATA_VALID`, its `CHECKSUM_UNNECESSARY`).
    pub data_valid: bool,
    /// The frame is a segmentation-offload super-frame (`gso_type` set).
    pub gso: bool,
    /// The frame did not fit its slot, and the kernel queued all of it
    /// on the socket too (`TP_STATUS_COPY`, with `PACKET_COPY_THRESH`):
    /// `recv` gets it whole.
    pub copied: bool,
}

/// A frame header the kernel wrote that points outside its slot or
/// block (never seen; checked so that no slice leaves the mapping).
const MALFORMED: RxFrame<'static> = RxFrame {
    data: &[],
    wire_len: usize::MAX,
    pkttype: 0,
    vlan: None,
    needs_csum: None,
    data_valid: false,
    gso: false,
    copied: false,
};

/// `TP_STATUS_COPY` (linux/if_packet.h).
const TP_STATUS_COPY: u32 = 1 << 1;

/// `virtio_net_hdr` flags and fields the receive side reads.
pub const VNET_F_NEEDS_CSUM: u8 = 1;
pub const VNET_F_DATA_VALID: u8 = 2;
pub const VNET_GSO_TYPE_AT: usize = 1;
pub const VNET_GSO_SIZE_AT: usize = 4;
pub const VNET_CSUM_START_AT: usize = 6;
pub const VNET_CSUM_OFFSET_AT: usize = 8;

/// A walk over fixed-size slots (TX; V2 RX).
struct Slots {
    /// Byte offset of the ring in the mapping.
    base: usize,
    count: usize,
    /// The next slot to take.
    next: usize,
}

impl Slots {
    fn new(base: usize, req: &TpacketReq3) -> Slots {
        Slots {
            base,
            count: req.frame_nr as usize,
            next: 0,
        }
    }
    fn slot(&self, i: usize) -> usize {
        self.base + i * SLOT
    }
    fn current(&self) -> usize {
        self.slot(self.next)
    }
    /// The slot taken last.
    fn previous(&self) -> usize {
        self.slot((self.next + self.count - 1) % self.count)
    }
    fn advance(&mut self) {
        self.next = (self.next + 1) % self.count;
    }
}

/// A walk over V3 RX blocks, frame by frame.
struct Blocks {
    base: usize,
    count: usize,
    /// The block we are in (or wait for).
    next: usize,
    /// Frames of the current block not yet taken (0: we do not own it).
    left: u32,
    /// Offset of the next frame, in the mapping.
    frame: usize,
}

impl Blocks {
    fn block(&self) -> usize {
        self.base + self.next * BLOCK
    }
}

enum Rx {
    Slots(Slots),
    Blocks(Blocks),
}

/// The RX and TX rings of one packet socket.
pub struct Rings {
    map: Mapping,
    layout: &'static Layout,
    rx: Rx,
    tx: Slots,
    /// Private memory, no socket ([`Rings::anonymous`]).
    anonymous: bool,
}

impl Rings {
    /// Set up RX and TX rings of at least `rx_slots` and `tx_slots` slots
    /// on `fd` (which must already be set to `version` with
    /// `PACKET_VNET_HDR`, and not yet bound) and map them.
    pub fn new(
        fd: BorrowedFd<'_>,
        version: Version,
        rx_slots: usize,
        tx_slots: usize,
    ) -> io::Result<Rings> {
        let block_ms = match version {
            Version::V2 => 0,
            Version::V3 { block_ms } => block_ms,
        };
        let rx = TpacketReq3::for_slots(rx_slots, block_ms);
        let tx = TpacketReq3::for_slots(tx_slots, 0);
        match version {
            // TPACKET_V2 takes a `struct tpacket_req`, the first 16 bytes.
            Version::V2 => {
                let req = |r: TpacketReq3| [r.block_size, r.block_nr, r.frame_size, r.frame_nr];
                sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req(rx))?;
                sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &req(tx))?;
            }
            Version::V3 { .. } => {
                sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx)?;
                sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx)?;
            }
        }
        // RX first, then TX, as packet_mmap lays them out.
        let map = Mapping::file(fd, rx.bytes() + tx.bytes(), 0)?;
        Ok(Rings::over(map, version, &rx, &tx, false))
    }

    /// Rings in private anonymous memory, with no socket behind them: for
    /// tests and fuzzing, which play the kernel with
    /// [`Rings::kernel_write`].
    #[doc(hidden)]
    pub fn anonymous(version: Version, rx_slots: usize, tx_slots: usize) -> io::Result<Rings> {
        let block_ms = match version {
            Version::V2 => 0,
            Version::V3 { block_ms } => block_ms,
        };
        let rx = TpacketReq3::for_slots(rx_slots, block_ms);
        let tx = TpacketReq3::for_slots(tx_slots, 0);
        let map = Mapping::anonymous(rx.bytes() + tx.bytes())?;
        Ok(Rings::over(map, version, &rx, &tx, true))
    }

    /// Bytes of the mapping (RX ring, then TX ring).
    #[doc(hidden)]
    pub fn mapped_len(&self) -> usize {
        self.map.len()
    }

    /// Write `bytes` at `off` as the kernel would (any slot, block or
    /// status word). Only for [`Rings::anonymous`] rings; false (nothing
    /// written) for a socket's rings or outside the mapping.
    #[doc(hidden)]
    pub fn kernel_write(&mut self, off: usize, bytes: &[u8]) -> bool {
        if !self.anonymous
            || off
                .checked_add(bytes.len())
                .is_none_or(|e| e > self.map.len())
        {
            return false;
        }
        // SAFETY: inside the mapping (checked), which is private anonymous
        // memory no kernel or other thread writes; `&mut self` excludes
        // every borrow of a frame.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at(off), bytes.len()) };
        true
    }

    fn over(
        map: Mapping,
        version: Version,
        rx: &TpacketReq3,
        tx: &TpacketReq3,
        anonymous: bool,
    ) -> Rings {
        let rx_walk = match version {
            Version::V2 => Rx::Slots(Slots::new(0, rx)),
            Version::V3 { .. } => Rx::Blocks(Blocks {
                base: 0,
                count: rx.block_nr as usize,
                next: 0,
                left: 0,
                frame: 0,
            }),
        };
        Rings {
            map,
            layout: layout(version),
            rx: rx_walk,
            tx: Slots::new(rx.bytes(), tx),
            anonymous,
        }
    }

    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.map.len());
        // SAFETY: every caller passes an offset inside a slot or block,
        // and those lie inside the mapping.
        unsafe { self.map.ptr().as_ptr().add(off) }
    }

    /// The 32-bit status word at `off` (a slot's `tp_status`, a block's
    /// `block_status`).
    fn status(&self, off: usize) -> &AtomicU32 {
        // SAFETY: status words are 4-byte aligned (slots and blocks are
        // 2 KiB aligned, the fields at multiples of 4), written by the
        // kernel and by us; both treat them as one 32-bit word, so an
        // atomic view is sound.
        unsafe { &*(self.at(off) as *const AtomicU32) }
    }

    fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: inside a slot or block we own (status read with
        // acquire); unaligned read of plain bytes.
        unsafe { std::ptr::read_unaligned(self.at(off) as *const u32) }
    }

    fn read_u16(&self, off: usize) -> u16 {
        // SAFETY: as for `read_u32`.
        unsafe { std::ptr::read_unaligned(self.at(off) as *const u16) }
    }

    /// Copy `bytes` to `off`, inside a TX slot we own.
    fn write(&mut self, off: usize, bytes: &[u8]) {
        debug_assert!(off + bytes.len() <= self.map.len());
        // SAFETY: the caller owns the slot (status AVAILABLE read with
        // acquire, not yet handed back) and keeps the bytes inside it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at(off), bytes.len()) };
    }

    /// Whether the kernel has handed over a received frame we have not
    /// taken.
    pub fn rx_ready(&self) -> bool {
        match &self.rx {
            Rx::Slots(s) => {
                self.status(s.current() + self.layout.status)
                    .load(Ordering::Acquire)
                    & libc::TP_STATUS_USER
                    != 0
            }
            Rx::Blocks(b) => {
                b.left > 0
                    || self
                        .status(b.block() + block::STATUS)
                        .load(Ordering::Acquire)
                        & libc::TP_STATUS_USER
                        != 0
            }
        }
    }

    /// Take the next received frame, if the kernel has handed one over,
    /// and give it to `f`. Returns false when no frame is ready; true when
    /// it took one, or gave back an empty V3 block without calling `f`
    /// (a block the kernel marked ready with no frames in it).
    pub fn rx_next(&mut self, f: impl FnOnce(RxFrame<'_>)) -> bool {
        match &self.rx {
            Rx::Slots(s) => {
                let slot = s.current();
                if !self.rx_ready() {
                    return false;
                }
                f(self.frame(slot, slot + SLOT));
                self.status(slot + self.layout.status)
                    .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                if let Rx::Slots(s) = &mut self.rx {
                    s.advance();
                }
                true
            }
            Rx::Blocks(_) => self.rx_next_in_block(f),
        }
    }

    /// [`Rings::rx_next`] for V3: open the next block if we hold none,
    /// take its next frame, and give the block back after its last one.
    fn rx_next_in_block(&mut self, f: impl FnOnce(RxFrame<'_>)) -> bool {
        let Rx::Blocks(b) = &self.rx else {
            return false;
        };
        let (block, mut left, mut frame) = (b.block(), b.left, b.frame);
        let end = block + BLOCK;
        if left == 0 {
            let status = self.status(block + block::STATUS).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return false;
            }
            left = self.read_u32(block + block::NUM_PKTS);
            frame = block + self.read_u32(block + block::OFFSET_TO_FIRST_PKT) as usize;
        }
        let header_fits = frame
            .checked_add(self.layout.pkttype() + 1)
            .is_some_and(|e| e <= end);
        let give_back = if left == 0 {
            // An empty block (the kernel does not hand those over).
            true
        } else if header_fits {
            f(self.frame(frame, end));
            left -= 1;
            let next = self.read_u32(frame + V3_NEXT_OFFSET) as usize;
            frame += next;
            left == 0
        } else {
            f(MALFORMED);
            left = 0;
            true
        };
        if give_back {
            self.status(block + block::STATUS)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        if let Rx::Blocks(b) = &mut self.rx {
            b.left = left;
            b.frame = frame;
            if give_back {
                b.next = (b.next + 1) % b.count;
            }
        }
        true
    }

    /// The frame whose header is at `hdr`, which must lie inside
    /// `[hdr, end)` with its data; [`MALFORMED`] if the kernel's offsets
    /// say otherwise. The header and `sockaddr_ll` fit (callers check).
    fn frame(&self, hdr: usize, end: usize) -> RxFrame<'_> {
        let l = self.layout;
        let status = self.read_u32(hdr + l.status);
        let snaplen = self.read_u32(hdr + l.snaplen) as usize;
        let mac = self.read_u16(hdr + l.mac) as usize;
        let start = hdr + mac;
        if mac < l.end || start.checked_add(snaplen).is_none_or(|e| e > end) {
            return MALFORMED;
        }
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                self.read_u16(hdr + l.vlan_tpid)
            } else {
                0x8100
            };
            (tpid, self.read_u16(hdr + l.vlan_tci))
        });
        // SAFETY: [start, start + snaplen) lies inside the slot or block
        // (checked above), which the kernel does not write while we own
        // it; the slice borrows `self`, so it ends before we hand the
        // memory back.
        let data = unsafe { std::slice::from_raw_parts(self.at(start), snaplen) };
        // SAFETY: pkttype is one byte inside the header area (callers
        // check that the header and its `sockaddr_ll` fit).
        let pkttype = unsafe { *self.at(hdr + l.pkttype()) };
        // The kernel writes the frame's virtio_net_hdr right before it
        // (tp_mac leaves room for it behind the header).
        let (mut needs_csum, mut gso, mut data_valid) = (None, false, false);
        if mac >= l.end + VNET_HDR_LEN {
            let v = start - VNET_HDR_LEN;
            // SAFETY: two bytes inside the slot, between the frame header
            // and the frame (checked just above).
            let (flags, gso_type) = unsafe { (*self.at(v), *self.at(v + 1)) };
            gso = gso_type != 0;
            data_valid = flags & VNET_F_DATA_VALID != 0;
            if flags & VNET_F_NEEDS_CSUM != 0 {
                needs_csum = Some((
                    self.read_u16(v + VNET_CSUM_START_AT),
                    self.read_u16(v + VNET_CSUM_OFFSET_AT),
                ));
            }
        }
        RxFrame {
            data,
            wire_len: self.read_u32(hdr + l.len) as usize,
            pkttype,
            vlan,
            needs_csum,
            data_valid,
            gso,
            copied: status & TP_STATUS_COPY != 0,
        }
    }

    /// Copy `frame` (at most [`TX_ROOM`] bytes; the caller checks) into
    /// the next TX slot, if the kernel has given it back, and hand it
    /// over: it leaves at the next `send` on the socket. Returns false
    /// when every slot is still waiting for the kernel. `csum`: the
    /// kernel is to fill in the TCP/UDP checksum (`csum_start`,
    /// `csum_offset`; the field holds the pseudo-header sum), in the
    /// interface's hardware or in software on its way out.
    pub fn tx_push(&mut self, frame: &[u8], csum: Option<(u16, u16)>) -> bool {
        debug_assert!(frame.len() <= TX_ROOM);
        let l = self.layout;
        let slot = self.tx.current();
        let status = self.status(slot + l.status).load(Ordering::Acquire) & !TP_STATUS_TS_FLAGS;
        if status != TP_STATUS_AVAILABLE {
            return false;
        }
        let len = frame.len().min(TX_ROOM);
        let mut vnet = [0u8; VNET_HDR_LEN];
        vnet[VNET_HDR_LEN_AT..VNET_HDR_LEN_AT + 2].copy_from_slice(&(len as u16).to_ne_bytes());
        if let Some((start, offset)) = csum {
            vnet[0] = VNET_F_NEEDS_CSUM;
            vnet[VNET_CSUM_START_AT..VNET_CSUM_START_AT + 2].copy_from_slice(&start.to_ne_bytes());
            vnet[VNET_CSUM_OFFSET_AT..VNET_CSUM_OFFSET_AT + 2]
                .copy_from_slice(&offset.to_ne_bytes());
        }
        self.write(slot + l.end, &vnet);
        self.write(slot + l.end + VNET_HDR_LEN, &frame[..len]);
        let tp_len = ((VNET_HDR_LEN + len) as u32).to_ne_bytes();
        self.write(slot + l.len, &tp_len);
        self.write(slot + l.snaplen, &tp_len);
        self.status(slot + l.status)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx.advance();
        true
    }

    /// Whether the frame pushed last still waits for a `send`. The kernel
    /// takes slots in order, so once it has taken that one it has taken
    /// every earlier one.
    pub fn tx_waiting(&self) -> bool {
        let status = self
            .status(self.tx.previous() + self.layout.status)
            .load(Ordering::Acquire);
        status & !TP_STATUS_TS_FLAGS == TP_STATUS_SEND_REQUEST
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_whole_blocks_of_whole_slots() {
        let r = TpacketReq3::for_slots(500, 0);
        assert_eq!(r.frame_nr, 512);
        assert_eq!(r.block_nr * (r.block_size / r.frame_size), r.frame_nr);
        assert_eq!(r.block_size % 4096, 0);
        assert_eq!(
            TpacketReq3::for_slots(0, 0).frame_nr as usize,
            SLOTS_PER_BLOCK
        );
    }

    #[test]
    fn request_has_the_kernel_layout() {
        // struct tpacket_req3 is seven u32s.
        assert_eq!(std::mem::size_of::<TpacketReq3>(), 28);
    }

    #[test]
    fn headers_match_the_kernel_structs() {
        // TPACKET2_HDRLEN and TPACKET3_HDRLEN are the aligned header plus
        // a 20-byte sockaddr_ll.
        assert_eq!(V2_LAYOUT.end + 20, 52);
        assert_eq!(V3_LAYOUT.end + 20, 68);
        for l in [&V2_LAYOUT, &V3_LAYOUT] {
            assert_eq!(l.status % 4, 0);
            assert!(l.pkttype() < l.end + 20);
        }
    }
}
