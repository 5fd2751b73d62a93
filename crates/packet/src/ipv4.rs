//! The IPv4 header (RFC 791), options included.

use std::net::Ipv4Addr;

use crate::checksum::{self, update16, update32};
use crate::error::{need, Header, PacketError};

/// IP protocol numbers this crate knows by name.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
}

/// A view of an IPv4 header and its datagram.
///
/// [`Ipv4::new`] checks version, IHL (≥ 5 words, within the buffer) and
/// total length (≥ header length, within the buffer), so every accessor
/// is in bounds. Bytes after `total_len` (Ethernet padding) are ignored.
#[derive(Debug)]
pub struct Ipv4<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4<T> {
    pub const MIN_LEN: usize = 20;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        let b = buf.as_ref();
        need(Header::Ipv4, b, Self::MIN_LEN)?;
        let version = b[0] >> 4;
        if version != 4 {
            return Err(PacketError::BadIpVersion(version));
        }
        let ihl = b[0] & 0x0f;
        if ihl < 5 {
            return Err(PacketError::BadIhl(ihl));
        }
        let header_len = usize::from(ihl) * 4;
        need(Header::Ipv4, b, header_len)?;
        let total = u16::from_be_bytes([b[2], b[3]]);
        if usize::from(total) < header_len {
            return Err(PacketError::BadTotalLength { total, header_len });
        }
        need(Header::Ipv4, b, usize::from(total))?;
        Ok(Ipv4 { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    fn word(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.b()[at], self.b()[at + 1]])
    }

    /// Header length in bytes (IHL × 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    pub fn dscp_ecn(&self) -> u8 {
        self.b()[1]
    }

    pub fn total_len(&self) -> usize {
        usize::from(self.word(2))
    }

    pub fn ident(&self) -> u16 {
        self.word(4)
    }

    pub fn dont_fragment(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    pub fn more_fragments(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.word(6) & 0x1fff
    }

    /// Part of a fragmented datagram (first or later fragment).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments() || self.frag_offset() != 0
    }

    /// A fragment other than the first: it carries no L4 header.
    pub fn is_later_fragment(&self) -> bool {
        self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    pub fn checksum(&self) -> u16 {
        self.word(10)
    }

    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src_bytes())
    }

    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst_bytes())
    }

    pub fn src_bytes(&self) -> [u8; 4] {
        let b = self.b();
        [b[12], b[13], b[14], b[15]]
    }

    pub fn dst_bytes(&self) -> [u8; 4] {
        let b = self.b();
        [b[16], b[17], b[18], b[19]]
    }

    pub fn options(&self) -> &[u8] {
        &self.b()[Self::MIN_LEN..self.header_len()]
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }

    /// The datagram payload: from the end of the header to `total_len`.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }

    /// True if the header checksum is correct.
    pub fn checksum_ok(&self) -> bool {
        checksum::checksum(self.header()) == 0
    }

    pub fn into_inner(self) -> T {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }

    pub fn set_checksum(&mut self, c: u16) {
        self.bm()[10..12].copy_from_slice(&c.to_be_bytes());
    }

    /// Recompute the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// Set the TTL, updating the header checksum incrementally (RFC 1624).
    pub fn set_ttl(&mut self, ttl: u8) {
        let old = self.word(8);
        self.bm()[8] = ttl;
        let new = self.word(8);
        let c = update16(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Set the source address, updating the header checksum incrementally.
    pub fn set_src(&mut self, a: Ipv4Addr) {
        let old = self.src_bytes();
        self.bm()[12..16].copy_from_slice(&a.octets());
        let c = update32(self.checksum(), old, a.octets());
        self.set_checksum(c);
    }

    /// Set the destination address, updating the header checksum incrementally.
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        let old = self.dst_bytes();
        self.bm()[16..20].copy_from_slice(&a.octets());
        let c = update32(self.checksum(), old, a.octets());
        self.set_checksum(c);
    }

    /// Mutable payload (from the end of the header to `total_len`).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.bm()[h..t]
    }
}
