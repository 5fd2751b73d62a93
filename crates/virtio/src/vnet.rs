//! The `virtio_net_hdr` in front of every packet (VirtIO 1.1 §5.1.6), as
//! both sides of a VirtIO-net link use it: nfkit's driver
//! ([`crate::NetDevice`]) and its vhost-user backend
//! ([`crate::vhost_user::VhostUserBackend`]); the offload features each
//! side negotiated as port capabilities; and the reasons a chain or a
//! frame is dropped, counted per reason.
//!
//! | header field | offload metadata (`nfkit_hw::pool::offload`) |
//! |---|---|
//! | `flags` NEEDS_CSUM, `csum_start`, `csum_offset` | `L4_CSUM` at `l4_start()` (checked against the frame's own headers) |
//! | `flags` DATA_VALID | `L4_CSUM_GOOD` |
//! | `gso_type` TCPV4/TCPV6 (+ ECN), `gso_size`, `hdr_len` | `gso` = Tcp, `gso_size`, `GSO_ECN` |
//! | `num_buffers` (MRG_RXBUF, §5.1.6.3.1) | a chain of that many buffers |

use crate::spec::feature;
use nfkit_hw::pool::offload::{self as ol, cap, Caps, Gso, Offload, L3};
use nfkit_hw::PktBuf;
use nfkit_packet::offload_meta;

/// What nfkit's driver asks of a device (the features it offers are
/// kept): merged receive buffers, checksums both ways, the device's TSO.
/// Not GUEST_TSO: super-frames from the device would need a TSO module
/// or a segmenting port further on.
pub const DRIVER_OFFLOADS: u64 = feature::NET_F_MRG_RXBUF
    | feature::NET_F_CSUM
    | feature::NET_F_GUEST_CSUM
    | feature::NET_F_HOST_TSO4
    | feature::NET_F_HOST_TSO6
    | feature::NET_F_HOST_ECN;

/// The feature bits CTRL_GUEST_OFFLOADS turns on and off (§5.1.6.5.6).
pub const GUEST_OFFLOADS: u64 = feature::NET_F_GUEST_CSUM
    | feature::NET_F_GUEST_TSO4
    | feature::NET_F_GUEST_TSO6
    | feature::NET_F_GUEST_ECN;

/// Largest frame either side carries (as a chain of buffers): a 64 KiB
/// segmentation super-frame and its headers.
pub const MAX_FRAME: usize = 64 * 1024 + 64;

/// Why a chain or a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A descriptor index past the table.
    BadIndex,
    /// A descriptor chain that loops (longer than the queue).
    Loop,
    /// A buffer of the wrong direction (device-writable on transmit,
    /// read-only on receive) or an indirect one (not offered).
    Direction,
    /// A buffer (address, length) outside the shared memory.
    Outside,
    /// A frame longer than [`MAX_FRAME`] (or than the port takes).
    TooLong,
    /// A chain shorter than its `virtio_net_hdr`.
    ShortHeader,
    /// A frame larger than the buffers the other side posted can hold
    /// (no MRG_RXBUF, or more buffers than its ring has).
    NoRoom,
    /// Offload state in the header that is not the frame's (a checksum
    /// position that is not its TCP/UDP checksum, a segment size of 0,
    /// segmentation on a non-TCP packet, an offload not negotiated).
    BadOffload,
    /// `num_buffers` of 0, or more buffers than a chain may have, or
    /// buffers the device did not return.
    BadMerge,
    /// No free buffer for the frame's chain.
    NoBuffer,
}

impl DropReason {
    pub const ALL: [DropReason; 10] = [
        DropReason::BadIndex,
        DropReason::Loop,
        DropReason::Direction,
        DropReason::Outside,
        DropReason::TooLong,
        DropReason::ShortHeader,
        DropReason::NoRoom,
        DropReason::BadOffload,
        DropReason::BadMerge,
        DropReason::NoBuffer,
    ];
    pub fn name(self) -> &'static str {
        match self {
            DropReason::BadIndex => "descriptor index past the table",
            DropReason::Loop => "descriptor chain loops",
            DropReason::Direction => "buffer of the wrong direction or indirect",
            DropReason::Outside => "buffer outside the shared memory",
            DropReason::TooLong => "frame too long",
            DropReason::ShortHeader => "chain shorter than its virtio_net_hdr",
            DropReason::NoRoom => "frame larger than the posted receive buffers",
            DropReason::BadOffload => "offload header that lies or was not negotiated",
            DropReason::BadMerge => "bad num_buffers",
            DropReason::NoBuffer => "no free buffer for the chain",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Drops per reason (beside a port's `rx_errors`/`tx_errors`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DropCounts([u64; DropReason::ALL.len()]);

impl DropCounts {
    /// Count one; the first of its reason is logged (with `what`, the
    /// port and direction).
    pub fn count(&mut self, r: DropReason, what: &str) {
        let c = &mut self.0[r as usize];
        if *c == 0 {
            tracing::warn!("{what}: dropped a frame: {r} (counted; later ones are not logged)");
        }
        *c += 1;
    }
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r as usize]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// `reason: n` for each reason counted.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// The offloads of a link, from the features both sides agreed on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Frames we send may ask for their checksum (NEEDS_CSUM).
    pub send_csum: bool,
    /// Frames we send may be TSO super-frames, IPv4 / IPv6, with ECN.
    pub send_tso4: bool,
    pub send_tso6: bool,
    pub send_ecn: bool,
    /// Frames we receive may carry partial or verified checksums.
    pub recv_csum: bool,
    /// Frames we receive may be super-frames.
    pub recv_gso: bool,
    /// Received buffers may be merged (`num_buffers`).
    pub mergeable: bool,
}

impl Offloads {
    /// As the device (vhost-user backend): we send into the driver's
    /// receive queue (its GUEST_* features) and receive what it sends
    /// (CSUM, HOST_*).
    pub fn of_device(f: u64) -> Offloads {
        let csum = f & feature::NET_F_GUEST_CSUM != 0;
        Offloads {
            send_csum: csum,
            send_tso4: csum && f & feature::NET_F_GUEST_TSO4 != 0,
            send_tso6: csum && f & feature::NET_F_GUEST_TSO6 != 0,
            send_ecn: f & feature::NET_F_GUEST_ECN != 0,
            recv_csum: f & feature::NET_F_CSUM != 0,
            recv_gso: f & (feature::NET_F_HOST_TSO4 | feature::NET_F_HOST_TSO6) != 0,
            mergeable: f & feature::NET_F_MRG_RXBUF != 0,
        }
    }
    /// As the driver: we send to the device (CSUM, HOST_*) and receive
    /// from it (GUEST_*).
    pub fn of_driver(f: u64) -> Offloads {
        let csum = f & feature::NET_F_CSUM != 0;
        Offloads {
            send_csum: csum,
            send_tso4: csum && f & feature::NET_F_HOST_TSO4 != 0,
            send_tso6: csum && f & feature::NET_F_HOST_TSO6 != 0,
            send_ecn: f & feature::NET_F_HOST_ECN != 0,
            recv_csum: f & feature::NET_F_GUEST_CSUM != 0,
            recv_gso: f & (feature::NET_F_GUEST_TSO4 | feature::NET_F_GUEST_TSO6) != 0,
            mergeable: f & feature::NET_F_MRG_RXBUF != 0,
        }
    }
    /// Whether the header must be read on receive at all.
    pub fn reads_header(&self) -> bool {
        self.recv_csum || self.recv_gso || self.mergeable
    }
    /// The port's capabilities ([`Caps`]), with the largest frame.
    pub fn caps(&self, max_frame: usize) -> Caps {
        let mut c = 0;
        if self.send_csum {
            c |= cap::TX_L4_CSUM | cap::TX_INNER_L4_CSUM;
        }
        if self.send_tso4 && self.send_tso6 {
            c |= cap::TX_TSO;
        }
        if self.recv_csum {
            c |= cap::RX_PARTIAL_CSUM | cap::RX_L4_CSUM;
        }
        if self.recv_gso {
            c |= cap::RX_LRO;
        }
        Caps::new(c, max_frame as u32)
    }
    /// Whether the other side takes `o` as it is (after
    /// `offload_meta::finish_for` with [`Self::caps`]).
    pub fn sends(&self, o: &Offload) -> bool {
        let gso_ok = match (o.gso, o.l3) {
            (Gso::None, _) => true,
            (Gso::Tcp, L3::Ipv4) => self.send_tso4,
            (Gso::Tcp, L3::Ipv6) => self.send_tso6,
            _ => false,
        };
        gso_ok && (self.send_ecn || !o.has(ol::GSO_ECN)) && (self.send_csum || !o.has(ol::L4_CSUM))
    }
}

/// The header in front of a frame we send: what its offload state asks
/// (NEEDS_CSUM, GSO) and `num_buffers` in a 12-byte header.
pub fn write_header(o: Option<&Offload>, num_buffers: u16, hdr: &mut [u8]) {
    let h = o.map(offload_meta::to_virtio_net_hdr).unwrap_or([0; 10]);
    let n = hdr.len().min(10);
    hdr[..n].copy_from_slice(&h[..n]);
    if let Some(nb) = hdr.get_mut(10..12) {
        nb.copy_from_slice(&num_buffers.to_le_bytes());
    }
}

/// Offload state from the header in front of a received frame (`frame`:
/// all of it, contiguous): `from_virtio_net_hdr`'s reading, only what
/// `offloads` let the sender ask. A partial checksum on a frame that is
/// not a super-frame is completed here when `complete` (a chain: no
/// later step can complete it), or when the frame's headers are not
/// ones nfkit parses but the position is inside the frame; anything
/// else that does not fit the frame is [`DropReason::BadOffload`].
/// Returns the state and whether a checksum was written into `frame`.
pub fn read_header(
    hdr: &[u8],
    frame: &mut [u8],
    offloads: &Offloads,
    complete: bool,
) -> Result<(Option<Offload>, bool), DropReason> {
    if hdr.len() < offload_meta::VNET_HDR_LEN {
        return Ok((None, false));
    }
    let (flags, gso_type) = (hdr[0], hdr[1]);
    if flags == 0 && gso_type == 0 {
        return Ok((None, false));
    }
    let needs = flags & offload_meta::VNET_F_NEEDS_CSUM != 0;
    if (needs && !offloads.recv_csum) || (gso_type != 0 && !offloads.recv_gso) {
        return Err(DropReason::BadOffload);
    }
    let rd = |at: usize| usize::from(u16::from_le_bytes([hdr[at], hdr[at + 1]]));
    match offload_meta::from_virtio_net_hdr(hdr, frame) {
        Ok(Some(mut o)) => {
            if o.gso == Gso::Udp {
                return Err(DropReason::BadOffload); // UDP_L4 never offered
            }
            let mut wrote = false;
            if complete && o.gso == Gso::None && o.has(ol::L4_CSUM) {
                wrote = nfkit_packet::offload::complete_partial(frame, rd(6), rd(8));
                o.flags &= !ol::L4_CSUM;
            }
            Ok(((o.flags != 0 || o.gso != Gso::None).then_some(o), wrote))
        }
        Ok(None) => Ok((None, false)),
        Err(_) if needs && gso_type == 0 => {
            if nfkit_packet::offload::complete_partial(frame, rd(6), rd(8)) {
                Ok((None, true))
            } else {
                Err(DropReason::BadOffload)
            }
        }
        Err(_) => Err(DropReason::BadOffload),
    }
}

/// [`read_header`] for a received buffer, chained or not (`scratch`
/// holds a chain's bytes while they are read, and a completed checksum
/// is written back into its segment); the state goes on the buffer.
pub fn take_header(
    hdr: &[u8],
    buf: &mut PktBuf,
    offloads: &Offloads,
    scratch: &mut Vec<u8>,
) -> Result<(), DropReason> {
    if hdr.first().is_none_or(|&f| f == 0) && hdr.get(1).is_none_or(|&g| g == 0) {
        return Ok(());
    }
    let o = if buf.is_chained() {
        buf.copy_frame_to(scratch);
        let (o, wrote) = read_header(hdr, scratch, offloads, true)?;
        if wrote {
            // A completed checksum: put the frame's bytes back.
            let mut at = 0;
            buf.for_each_segment_mut(|seg| {
                let n = seg.len();
                seg.copy_from_slice(&scratch[at..at + n]);
                at += n;
            });
        }
        o
    } else {
        read_header(hdr, buf.data_mut(), offloads, false)?.0
    };
    if let Some(o) = o {
        buf.set_offload(o);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp() -> Vec<u8> {
        use std::net::Ipv4Addr;
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        nfkit_packet::FrameBuilder::tcp((a, 1000), (z, 2000))
            .payload(&[7; 100])
            .build()
    }

    /// A partial checksum asked through the header becomes a request in
    /// the metadata (or is completed, for a chain); a header that lies or
    /// asks what was not negotiated is dropped with its reason.
    #[test]
    fn headers_map_to_offload_state_and_lies_are_refused() {
        let all = Offloads::of_device(
            feature::NET_F_CSUM | feature::NET_F_HOST_TSO4 | feature::NET_F_MRG_RXBUF,
        );
        assert!(all.recv_csum && all.recv_gso && all.mergeable && !all.send_csum);
        let f = tcp();
        let mut o = offload_meta::describe(&f).unwrap();
        o.flags = ol::L4_CSUM;
        let mut h = [0u8; 12];
        write_header(Some(&o), 1, &mut h);
        assert_eq!(h[10..12], [1, 0], "num_buffers");
        let mut frame = f.clone();
        let (got, wrote) = read_header(&h, &mut frame, &all, false).unwrap();
        assert_eq!(got.map(|g| g.flags), Some(ol::L4_CSUM));
        assert!(!wrote);
        // Completed in place when asked (a chain): the builder's checksum.
        let mut partial = f.clone();
        let pseudo = nfkit_packet::checksum::Sum::ZERO
            .add_bytes(&f[26..34])
            .add_u16(6)
            .add_u16((f.len() - 34) as u16)
            .fold();
        partial[50..52].copy_from_slice(&pseudo.to_be_bytes());
        let (got, wrote) = read_header(&h, &mut partial, &all, true).unwrap();
        assert!(got.is_none() && wrote);
        assert_eq!(partial, f);
        // Not negotiated, or past the frame: dropped.
        let none = Offloads::default();
        assert_eq!(
            read_header(&h, &mut frame, &none, false),
            Err(DropReason::BadOffload)
        );
        let mut lie = h;
        lie[6..8].copy_from_slice(&2000u16.to_le_bytes());
        assert_eq!(
            read_header(&lie, &mut frame, &all, false),
            Err(DropReason::BadOffload)
        );
        let mut zero_mss = h;
        zero_mss[1] = offload_meta::VNET_GSO_TCPV4;
        assert_eq!(
            read_header(&zero_mss, &mut frame, &all, false),
            Err(DropReason::BadOffload)
        );
        // Capabilities are what was negotiated.
        let drv = Offloads::of_driver(feature::NET_F_CSUM | feature::NET_F_GUEST_CSUM);
        let caps = drv.caps(MAX_FRAME);
        assert!(caps.has(cap::TX_L4_CSUM) && caps.has(cap::RX_PARTIAL_CSUM));
        assert!(!caps.has(cap::TX_TSO) && !caps.has(cap::RX_LRO));
        assert_eq!(Offloads::default().caps(1514).flags, 0);
    }
}
