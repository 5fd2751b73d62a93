//! The bytes just in front of a packet, in its buffer's headroom: where a
//! device header (VirtIO's `virtio_net_hdr`) is read or written without
//! moving the data start (no `prepend`/`adj` pair, and no offload or
//! chain bookkeeping, per packet).

use super::pktbuf::PktBuf;

impl PktBuf {
    /// The `n` bytes in front of the data, if the headroom has them.
    #[inline(always)]
    pub fn front(&self, n: usize) -> Option<&[u8]> {
        if n > self.offset as usize {
            return None;
        }
        // SAFETY: `offset - n .. offset + len` lies in this entry (the
        // invariant of `data_ptr`, and n <= offset), which this PktBuf
        // alone owns; `&self` excludes `&mut` access through it.
        Some(unsafe { std::slice::from_raw_parts(self.data_ptr().sub(n), n) })
    }

    /// The `n` bytes in front of the data, mutable, if the headroom has
    /// them.
    #[inline(always)]
    pub fn front_mut(&mut self, n: usize) -> Option<&mut [u8]> {
        self.with_front_mut(n).map(|b| &mut b[..n])
    }

    /// The `n` bytes in front of the data and the data, as one slice (a
    /// header and its packet read or written in one copy), if the
    /// headroom has them. The data start does not move.
    #[inline(always)]
    pub fn with_front_mut(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.offset as usize {
            return None;
        }
        // SAFETY: as in `front`; `&mut self` excludes other references
        // through this PktBuf, and a device touches an entry only while a
        // driver ring owns it.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.data_ptr().sub(n), n + self.len as usize)
        })
    }
}
