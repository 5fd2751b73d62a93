//! Ethernet II and 802.1Q VLAN headers.

use crate::error::{need, Header, PacketError};

/// Ethertypes this crate knows by name.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The I/G bit: group (multicast or broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// The address as the low 48 bits of a u64 (for hashing).
    pub fn to_u64(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// A MAC address string was not six colon-separated hex bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a MAC address (expected six hex bytes like 02:00:00:00:00:01)")]
pub struct BadMac(pub String);

impl std::str::FromStr for MacAddr {
    type Err = BadMac;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(|| BadMac(s.into()))?;
            if p.is_empty() || p.len() > 2 {
                return Err(BadMac(s.into()));
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| BadMac(s.into()))?;
        }
        if parts.next().is_some() {
            return Err(BadMac(s.into()));
        }
        Ok(MacAddr(out))
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> Self {
        MacAddr(b)
    }
}

/// A view of an Ethernet II header: destination, source, ethertype.
#[derive(Debug)]
pub struct Ethernet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ethernet<T> {
    pub const LEN: usize = 14;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        need(Header::Ethernet, buf.as_ref(), Self::LEN)?;
        Ok(Ethernet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn dst(&self) -> MacAddr {
        MacAddr(self.b()[0..6].try_into().unwrap_or_default())
    }

    pub fn src(&self) -> MacAddr {
        MacAddr(self.b()[6..12].try_into().unwrap_or_default())
    }

    /// The outer ethertype (0x8100 for a tagged frame).
    pub fn ethertype(&self) -> u16 {
        u16::from_be_bytes([self.b()[12], self.b()[13]])
    }

    pub fn into_inner(self) -> T {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ethernet<T> {
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buf.as_mut()[0..6].copy_from_slice(&mac.0);
    }

    pub fn set_src(&mut self, mac: MacAddr) {
        self.buf.as_mut()[6..12].copy_from_slice(&mac.0);
    }

    pub fn set_ethertype(&mut self, t: u16) {
        self.buf.as_mut()[12..14].copy_from_slice(&t.to_be_bytes());
    }
}

/// A view of one 802.1Q tag (TCI and the inner ethertype), starting at the
/// tag's TCI, i.e. 2 bytes after the TPID.
#[derive(Debug)]
pub struct Vlan<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Vlan<T> {
    pub const LEN: usize = 4;

    pub fn new(buf: T) -> Result<Self, PacketError> {
        need(Header::Vlan, buf.as_ref(), Self::LEN)?;
        Ok(Vlan { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    pub fn tci(&self) -> u16 {
        u16::from_be_bytes([self.b()[0], self.b()[1]])
    }

    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    pub fn inner_ethertype(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
}
