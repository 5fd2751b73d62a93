//! TCP (RFC 793), UDP (RFC 768) and ICMP (RFC 792) headers.

use crate::error::{need, Header, PacketError};

fn word(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn set_word(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// A view of a TCP header; [`Tcp::new`] checks the data offset (≥ 5
/// words, within the buffer).
#[derive(Debug)]
pub struct Tcp<T> {
    buf: T,
}

/// Byte offset of the TCP checksum field.
pub const TCP_CHECKSUM_AT: usize = 16;
/// Byte offset of the UDP checksum field.
pub const UDP_CHECKSUM_AT: usize = 6;
/// Byte offset of the ICMP checksum field.
pub const ICMP_CHECKSUM_AT: usize = 2;

impl<T: AsRef<[u8]>> Tcp<T> {
    pub const MIN_LEN: usize = 20;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        let b = buf.as_ref();
        need(Header::Tcp, b, Self::MIN_LEN)?;
        let off = b[12] >> 4;
        if off < 5 {
            return Err(PacketError::BadTcpOffset(off));
        }
        need(Header::Tcp, b, usize::from(off) * 4)?;
        Ok(Tcp { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn src_port(&self) -> u16 {
        word(self.b(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        word(self.b(), 2)
    }

    pub fn seq(&self) -> u32 {
        u32::from_be_bytes([self.b()[4], self.b()[5], self.b()[6], self.b()[7]])
    }

    pub fn ack(&self) -> u32 {
        u32::from_be_bytes([self.b()[8], self.b()[9], self.b()[10], self.b()[11]])
    }

    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// The flag bits (FIN = 0x01, SYN = 0x02, RST = 0x04, PSH, ACK = 0x10, URG...).
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }

    pub fn window(&self) -> u16 {
        word(self.b(), 14)
    }

    pub fn checksum(&self) -> u16 {
        word(self.b(), TCP_CHECKSUM_AT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tcp<T> {
    pub fn set_src_port(&mut self, p: u16) {
        set_word(self.buf.as_mut(), 0, p);
    }

    pub fn set_dst_port(&mut self, p: u16) {
        set_word(self.buf.as_mut(), 2, p);
    }

    pub fn set_checksum(&mut self, c: u16) {
        set_word(self.buf.as_mut(), TCP_CHECKSUM_AT, c);
    }
}

/// A view of a UDP header (8 bytes).
#[derive(Debug)]
pub struct Udp<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Udp<T> {
    pub const LEN: usize = 8;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        need(Header::Udp, buf.as_ref(), Self::LEN)?;
        Ok(Udp { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn src_port(&self) -> u16 {
        word(self.b(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        word(self.b(), 2)
    }

    /// The length field (header + data).
    pub fn length(&self) -> u16 {
        word(self.b(), 4)
    }

    /// 0 means the sender computed no checksum.
    pub fn checksum(&self) -> u16 {
        word(self.b(), UDP_CHECKSUM_AT)
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[Self::LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Udp<T> {
    pub fn set_src_port(&mut self, p: u16) {
        set_word(self.buf.as_mut(), 0, p);
    }

    pub fn set_dst_port(&mut self, p: u16) {
        set_word(self.buf.as_mut(), 2, p);
    }

    pub fn set_length(&mut self, l: u16) {
        set_word(self.buf.as_mut(), 4, l);
    }

    pub fn set_checksum(&mut self, c: u16) {
        set_word(self.buf.as_mut(), UDP_CHECKSUM_AT, c);
    }
}

/// ICMP message types this crate knows by name.
pub mod icmp_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const SOURCE_QUENCH: u8 = 4;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// A view of an ICMP message: type, code, checksum and the 4-byte "rest
/// of header" (identifier and sequence for echo), then the payload.
#[derive(Debug)]
pub struct Icmp<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmp<T> {
    pub const LEN: usize = 8;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        need(Header::Icmp, buf.as_ref(), Self::LEN)?;
        Ok(Icmp { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn icmp_type(&self) -> u8 {
        self.b()[0]
    }

    pub fn code(&self) -> u8 {
        self.b()[1]
    }

    pub fn checksum(&self) -> u16 {
        word(self.b(), ICMP_CHECKSUM_AT)
    }

    /// Echo identifier (bytes 4..6).
    pub fn identifier(&self) -> u16 {
        word(self.b(), 4)
    }

    pub fn sequence(&self) -> u16 {
        word(self.b(), 6)
    }

    pub fn is_echo(&self) -> bool {
        matches!(
            self.icmp_type(),
            icmp_type::ECHO_REQUEST | icmp_type::ECHO_REPLY
        )
    }

    /// An error message that quotes the offending datagram (RFC 792):
    /// destination unreachable, source quench, redirect, time exceeded,
    /// parameter problem.
    pub fn is_error(&self) -> bool {
        is_error_type(self.icmp_type())
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[Self::LEN..]
    }
}

/// See [`Icmp::is_error`].
pub fn is_error_type(t: u8) -> bool {
    matches!(
        t,
        icmp_type::DEST_UNREACHABLE
            | icmp_type::SOURCE_QUENCH
            | icmp_type::REDIRECT
            | icmp_type::TIME_EXCEEDED
            | icmp_type::PARAMETER_PROBLEM
    )
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmp<T> {
    pub fn set_identifier(&mut self, id: u16) {
        set_word(self.buf.as_mut(), 4, id);
    }

    pub fn set_checksum(&mut self, c: u16) {
        set_word(self.buf.as_mut(), ICMP_CHECKSUM_AT, c);
    }
}
