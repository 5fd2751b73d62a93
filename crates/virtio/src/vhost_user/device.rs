//! The device side of a VirtIO-net queue, on `virtio-queue` (rust-vmm's
//! device-side split virtqueue): what a vhost-user backend does with the
//! frontend's rings (VirtIO 1.2 §5.1.6.2 and §5.1.6.4 seen from the
//! device). `virtio-queue` validates the rings as it walks them: ring
//! indices beyond the queue size, descriptor indices out of range and
//! chains longer than the queue (loops) end the walk, and every byte is
//! reached through bounds-checked `GuestMemory`.

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// What happened to one packet moved through a device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A packet of this many bytes (header excluded).
    Packet(usize),
    /// The driver has posted nothing.
    Empty,
    /// The chain was malformed or too small; it was returned unused.
    Bad,
}

/// Copy the next packet the driver transmitted into `out` (without its
/// `hdr_len`-byte header) and return the chain to the driver.
pub fn pop_tx(q: &mut Queue, mem: &GuestMemoryMmap, hdr_len: usize, out: &mut [u8]) -> Moved {
    let Some(chain) = q.pop_descriptor_chain(mem) else {
        return Moved::Empty;
    };
    let head = chain.head_index();
    // Read the chain as one byte stream: header first, then the packet.
    let mut skip = hdr_len;
    let mut n = 0usize;
    let mut bad = false;
    for d in chain {
        if d.is_write_only() {
            bad = true;
            break;
        }
        let mut len = d.len() as usize;
        let s = skip.min(len);
        skip -= s;
        // The frontend picks the address: one near u64::MAX must not wrap
        // around to memory it did not name.
        let Some(addr) = d.addr().0.checked_add(s as u64) else {
            bad = true;
            break;
        };
        len -= s;
        if len == 0 {
            continue;
        }
        if n + len > out.len()
            || mem
                .read_slice(&mut out[n..n + len], GuestAddress(addr))
                .is_err()
        {
            bad = true;
            break;
        }
        n += len;
    }
    // add_used fails only for an out-of-range head, which pop excluded.
    let _ = q.add_used(mem, head, 0);
    if bad || skip > 0 {
        Moved::Bad
    } else {
        Moved::Packet(n)
    }
}

/// Write `pkt` behind a zeroed `hdr_len`-byte header into the next
/// receive buffer the driver posted, and hand it back.
pub fn push_rx(q: &mut Queue, mem: &GuestMemoryMmap, hdr_len: usize, pkt: &[u8]) -> Moved {
    let Some(chain) = q.pop_descriptor_chain(mem) else {
        return Moved::Empty;
    };
    let head = chain.head_index();
    let mut hdr = [0u8; 12];
    if hdr_len == 12 {
        hdr[10] = 1; // num_buffers = 1 (§5.1.6.4)
    }
    let mut src = [&hdr[..hdr_len], pkt];
    let mut written = 0usize;
    let mut bad = false;
    for d in chain {
        if !d.is_write_only() {
            bad = true;
            break;
        }
        let mut addr = d.addr().0;
        let mut room = d.len() as usize;
        for part in src.iter_mut() {
            let take = part.len().min(room);
            if take == 0 {
                continue;
            }
            if mem.write_slice(&part[..take], GuestAddress(addr)).is_err() {
                bad = true;
                break;
            }
            *part = &part[take..];
            // Cannot overflow: the write above covered addr..addr+take.
            addr = addr.saturating_add(take as u64);
            room -= take;
            written += take;
        }
        if bad || src.iter().all(|p| p.is_empty()) {
            break;
        }
    }
    let complete = !bad && src.iter().all(|p| p.is_empty());
    let _ = q.add_used(mem, head, if complete { written as u32 } else { 0 });
    if complete {
        Moved::Packet(pkt.len())
    } else {
        Moved::Bad
    }
}

/// Whether the driver asked to be told about the buffers just used
/// (§2.7.7: used_event with EVENT_IDX, else avail.flags).
pub fn wants_interrupt(q: &mut Queue, mem: &GuestMemoryMmap) -> bool {
    q.needs_notification(mem).unwrap_or(true)
}
