//! Typed errors for malformed or truncated packets.

/// The header a [`PacketError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    Ethernet,
    Vlan,
    Ipv4,
    Tcp,
    Udp,
    Icmp,
}

impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Header::Ethernet => "Ethernet",
            Header::Vlan => "802.1Q VLAN",
            Header::Ipv4 => "IPv4",
            Header::Tcp => "TCP",
            Header::Udp => "UDP",
            Header::Icmp => "ICMP",
        };
        f.write_str(name)
    }
}

/// Why a header view could not be made over some bytes.
///
/// Views never panic: every constructor checks the bytes it will later
/// read and returns one of these instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("{header} header truncated: needs {need} bytes, {have} available")]
    Truncated {
        header: Header,
        need: usize,
        have: usize,
    },
    #[error("IPv4 header has version {0}, not 4")]
    BadIpVersion(u8),
    #[error("IPv4 header length {0} words is below the minimum of 5")]
    BadIhl(u8),
    #[error("IPv4 total length {total} is below the header length {header_len}")]
    BadTotalLength { total: u16, header_len: usize },
    #[error("TCP data offset {0} words is below the minimum of 5")]
    BadTcpOffset(u8),
    #[error("ethertype {0:#06x} is not IPv4")]
    NotIpv4(u16),
}

pub(crate) fn need(header: Header, buf: &[u8], need: usize) -> Result<(), PacketError> {
    if buf.len() < need {
        Err(PacketError::Truncated {
            header,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}
