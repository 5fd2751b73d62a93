//! Descriptor formats (§7.1.5 receive, §7.2.3.2 transmit) and the
//! descriptor ring memory they live in.
//!
//! Descriptors are 16 bytes: two little-endian quadwords. The driver
//! touches them only through the atomic accessors of
//! [`nfkit_hw::dma::DescRing`].

use crate::error::InitError;
use nfkit_hw::DmaAllocator;

pub use nfkit_hw::dma::{DescRing, DESC_BYTES};

/// Legacy receive descriptor, write-back quadword 1 (§7.1.5.1).
pub mod legacy_rx {
    pub const LENGTH_MASK: u64 = 0xFFFF;
    pub const DD: u64 = 1 << 32;
    pub const EOP: u64 = 1 << 33;
    /// Errors byte (bits 47:40): RXE/CE (bit 0), LE (1), PE (3), OSE (4),
    /// USE (5) are frame errors. Bits 6-7 (TCPE/IPE) are checksum
    /// results for a well-formed frame and do not drop it.
    pub const FRAME_ERRORS: u64 = 0b0011_1011 << 40;
}

/// Legacy transmit descriptor, quadword 1 (§7.2.3.2.2).
pub mod legacy_tx {
    // Length is bits 15:0; 0 makes a null descriptor that sends nothing.
    pub const CMD_EOP: u64 = 1 << 24;
    pub const CMD_IFCS: u64 = 1 << 25;
    pub const CMD_RS: u64 = 1 << 27;
}

/// Advanced receive descriptor (§7.1.6): read format is packet address /
/// header address; write-back quadword 1 holds status, errors, length.
pub mod adv_rx {
    pub const DD: u64 = 1 << 0;
    pub const EOP: u64 = 1 << 1;
    /// Extended errors 31:20: CE (24), LE (25), PE (27), OSE (28),
    /// RXE/USE (29) are frame errors; TCPE/IPE (30/31) are checksum
    /// results and, as for legacy descriptors, do not drop the frame.
    pub const FRAME_ERRORS: u64 = (1 << 24) | (1 << 25) | (1 << 27) | (1 << 28) | (1 << 29);
    pub const LENGTH_SHIFT: u32 = 32;
    pub const LENGTH_MASK: u64 = 0xFFFF;
}

/// Advanced transmit data descriptor (§7.2.3.2.4), quadword 1:
/// cmd_type_len in the low dword, olinfo_status in the high one.
pub mod adv_tx {
    // DTALEN is bits 15:0, as wide as a packet's length (u16).
    /// DTYP = 0011b: data descriptor.
    pub const DTYP_DATA: u64 = 0b0011 << 20;
    pub const CMD_EOP: u64 = 1 << 24;
    pub const CMD_IFCS: u64 = 1 << 25;
    pub const CMD_RS: u64 = 1 << 27;
    pub const CMD_DEXT: u64 = 1 << 29;
    /// STA.DD, written back when RS was set.
    pub const DD: u64 = 1 << 32;
    /// PAYLEN, bits 31:14 of olinfo_status.
    pub const PAYLEN_SHIFT: u32 = 32 + 14;
}

/// Largest ring the driver sets up, and the smallest.
pub const MAX_RING: usize = 8192;
pub const MIN_RING: usize = 64;

/// Allocate a descriptor ring of `size` descriptors (a power of two in
/// MIN_RING..=MAX_RING; RDLEN/TDLEN must be a multiple of 128 bytes,
/// §8.2.3.8.3): DMA memory contiguous in device address space, 128-byte
/// aligned. Indices wrap (the hardware-access layer's [`DescRing`] checks
/// the memory once, at creation, so a descriptor access on the data path
/// is one masked load or store).
pub fn new_ring(dma: &dyn DmaAllocator, size: usize) -> Result<DescRing, InitError> {
    check_ring_size(size)?;
    let bytes = size * DESC_BYTES;
    let mem = dma
        .allocate(bytes, true)
        .map_err(|e| InitError::Config(format!("descriptor ring of {size} entries: {e}")))?;
    if mem.contiguous_len() < bytes || mem.device_addr() % 128 != 0 {
        return Err(InitError::Config(format!(
            "descriptor ring at {:#x} is not 128-byte aligned and contiguous for {bytes} bytes",
            mem.device_addr()
        )));
    }
    DescRing::new(mem, size).map_err(|e| InitError::Config(e.to_string()))
}

pub fn check_ring_size(size: usize) -> Result<(), InitError> {
    if !size.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&size) {
        return Err(InitError::Config(format!(
            "ring size {size} must be a power of two between {MIN_RING} and {MAX_RING}"
        )));
    }
    Ok(())
}

/// Offload metadata ([`nfkit_hw::pool::Offload`]) to and from the
/// 82599's advanced descriptors: the transmit context descriptor
/// (§7.2.3.2.3), the data descriptor's DCMD and POPTS (§7.2.3.2.4), and
/// the receive write-back's status and errors (§7.1.6.2). The mapping
/// table is in `nfkit_hw::pool::offload`. The queue model's transmit
/// path for marked packets (`queue/marked.rs`) and its receive verdicts
/// (`queue/rx_chain.rs`) use them.
pub mod offload {
    use nfkit_hw::pool::offload::{self as f, Gso, Offload, Tunnel, L3, L4};

    /// Context descriptor, quadword 0 low dword (VLAN_MACIP_LENS):
    /// IPLEN 8:0, MACLEN 15:9, VLAN 31:16.
    pub const MACLEN_SHIFT: u32 = 9;
    pub const VLAN_SHIFT: u32 = 16;
    /// Quadword 1 low dword (TYPE_TUCMD_MLHL): TUCMD.IPV4 (bit 10),
    /// TUCMD.L4T (12:11: 00 UDP, 01 TCP), DTYP 0010b (23:20), DEXT (29).
    pub const TUCMD_IPV4: u32 = 1 << 10;
    pub const TUCMD_L4T_UDP: u32 = 0;
    pub const TUCMD_L4T_TCP: u32 = 1 << 11;
    pub const DTYP_CONTEXT: u32 = 0b0010 << 20;
    pub const DEXT: u32 = 1 << 29;
    /// Quadword 1 high dword (MSS_L4LEN_IDX): L4LEN 15:8, MSS 31:16.
    pub const L4LEN_SHIFT: u32 = 8;
    pub const MSS_SHIFT: u32 = 16;
    /// Data descriptor cmd_type_len: DCMD.VLE (30), DCMD.TSE (31).
    pub const DCMD_VLE: u32 = 1 << 30;
    pub const DCMD_TSE: u32 = 1 << 31;
    /// Data descriptor olinfo_status: CC (7), POPTS.IXSM (8), POPTS.TXSM (9).
    pub const OLINFO_CC: u32 = 1 << 7;
    pub const POPTS_IXSM: u32 = 1 << 8;
    pub const POPTS_TXSM: u32 = 1 << 9;
    /// Receive write-back quadword 1: STATUS.VP (3), STATUS.L4I (5),
    /// STATUS.IPCS (6), ERRORS.TCPE (30), ERRORS.IPE (31); VLAN tag in
    /// bits 63:48.
    pub const RX_VP: u64 = 1 << 3;
    pub const RX_L4I: u64 = 1 << 5;
    pub const RX_IPCS: u64 = 1 << 6;
    pub const RX_TCPE: u64 = 1 << 30;
    pub const RX_IPE: u64 = 1 << 31;
    pub const RX_VLAN_SHIFT: u32 = 48;

    /// What one packet's offload state asks of the 82599: a context
    /// descriptor (three dwords that differ per packet) and the bits of
    /// the data descriptor that refer to it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct TxOffload {
        pub vlan_macip_lens: u32,
        pub type_tucmd_mlhl: u32,
        pub mss_l4len_idx: u32,
        /// OR-ed into the data descriptor's cmd_type_len.
        pub dcmd: u32,
        /// OR-ed into the data descriptor's olinfo_status (PAYLEN apart).
        pub olinfo: u32,
        /// PAYLEN for a frame of `len` bytes is `len - paylen_less`
        /// (the headers, with TSE; 0 otherwise).
        pub paylen_less: u16,
    }

    /// The descriptor fields for `o`, or `None` when the 82599 cannot do
    /// all of it: it is not tunnel-aware, so an inner checksum or an
    /// inner segmentation stays software's; its MACLEN holds 127 bytes
    /// and IPLEN 511. Only the outer IPv4 checksum of a tunnel is its.
    pub fn tx(o: &Offload) -> Option<TxOffload> {
        let inner = o.has(f::IP_CSUM) || o.has(f::L4_CSUM) || o.gso != Gso::None;
        let (l2, l3, ipv4) = if o.tunnel == Tunnel::None {
            (u32::from(o.l2_len), u32::from(o.l3_len), o.l3 == L3::Ipv4)
        } else if inner {
            return None;
        } else {
            (u32::from(o.outer_l2_len), u32::from(o.outer_l3_len), true)
        };
        if l2 > 127 || l3 > 511 {
            return None;
        }
        let mut t = TxOffload {
            vlan_macip_lens: l3 | l2 << MACLEN_SHIFT,
            type_tucmd_mlhl: DTYP_CONTEXT | DEXT,
            olinfo: OLINFO_CC,
            ..TxOffload::default()
        };
        if ipv4 {
            t.type_tucmd_mlhl |= TUCMD_IPV4;
        }
        if o.has(f::IP_CSUM) || o.has(f::OUTER_IP_CSUM) {
            t.olinfo |= POPTS_IXSM;
        }
        if o.tunnel == Tunnel::None {
            t.type_tucmd_mlhl |= match o.l4 {
                L4::Tcp => TUCMD_L4T_TCP,
                _ => TUCMD_L4T_UDP,
            };
            if o.has(f::L4_CSUM) {
                t.olinfo |= POPTS_TXSM;
            }
            if o.gso != Gso::None {
                t.dcmd |= DCMD_TSE;
                t.olinfo |= POPTS_TXSM;
                t.mss_l4len_idx =
                    u32::from(o.l4_len) << L4LEN_SHIFT | u32::from(o.gso_size) << MSS_SHIFT;
                t.paylen_less = o.header_len() as u16;
            }
        }
        if o.has(f::VLAN_INSERT) {
            t.dcmd |= DCMD_VLE;
            t.vlan_macip_lens |= u32::from(o.vlan_tci) << VLAN_SHIFT;
        }
        Some(t)
    }

    /// The receive verdicts of a write-back quadword 1 (checksums the
    /// device checked, a tag it stripped), or `None` when it reports
    /// nothing.
    pub fn rx(qw1: u64) -> Option<Offload> {
        let mut o = Offload::default();
        if qw1 & RX_IPCS != 0 {
            o.flags |= if qw1 & RX_IPE != 0 {
                f::IP_CSUM_BAD
            } else {
                f::IP_CSUM_GOOD
            };
        }
        if qw1 & RX_L4I != 0 {
            o.flags |= if qw1 & RX_TCPE != 0 {
                f::L4_CSUM_BAD
            } else {
                f::L4_CSUM_GOOD
            };
        }
        if qw1 & RX_VP != 0 {
            o.flags |= f::VLAN_STRIPPED;
            o.vlan_tci = (qw1 >> RX_VLAN_SHIFT) as u16;
        }
        (o.flags != 0).then_some(o)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn tcp4() -> Offload {
            Offload {
                flags: f::IP_CSUM | f::L4_CSUM,
                l3: L3::Ipv4,
                l4: L4::Tcp,
                l2_len: 14,
                l3_len: 20,
                l4_len: 32,
                ..Offload::default()
            }
        }

        /// The dwords Linux's ixgbe writes for the same packet
        /// (ixgbe_tx_csum / ixgbe_tso), from the datasheet's fields.
        #[test]
        fn checksum_and_tso_requests_fill_the_context_descriptor() {
            let t = tx(&tcp4()).unwrap();
            assert_eq!(t.vlan_macip_lens, 20 | 14 << 9);
            assert_eq!(t.type_tucmd_mlhl, 0x2000_0000 | 0x0020_0000 | 0x400 | 0x800);
            assert_eq!(t.olinfo, (1 << 7) | (1 << 8) | (1 << 9));
            assert_eq!((t.dcmd, t.mss_l4len_idx, t.paylen_less), (0, 0, 0));
            let tso = Offload {
                gso: Gso::Tcp,
                gso_size: 1448,
                flags: f::L4_CSUM | f::VLAN_INSERT,
                vlan_tci: 0x2064,
                ..tcp4()
            };
            let t = tx(&tso).unwrap();
            assert_eq!(t.dcmd, DCMD_TSE | DCMD_VLE);
            assert_eq!(t.mss_l4len_idx, 1448 << 16 | 32 << 8);
            assert_eq!(t.paylen_less, 66);
            assert_eq!(t.vlan_macip_lens >> 16, 0x2064);
            assert_eq!(t.olinfo & POPTS_IXSM, 0, "no IPv4 checksum asked");
        }

        #[test]
        fn tunnels_leave_inner_work_to_software() {
            let tun = Offload {
                tunnel: Tunnel::Vxlan,
                outer_l2_len: 14,
                outer_l3_len: 20,
                tunnel_len: 16,
                ..tcp4()
            };
            assert_eq!(tx(&tun), None);
            let outer = Offload {
                flags: f::OUTER_IP_CSUM,
                ..tun
            };
            let t = tx(&outer).unwrap();
            assert_eq!(t.vlan_macip_lens, 20 | 14 << 9);
            assert_eq!(t.olinfo, OLINFO_CC | POPTS_IXSM);
            assert_eq!(
                tx(&Offload {
                    l2_len: 200,
                    ..tcp4()
                }),
                None
            );
        }

        #[test]
        fn receive_status_bits_become_verdicts() {
            assert_eq!(rx(0), None);
            let good = rx(RX_IPCS | RX_L4I).unwrap();
            assert_eq!(good.flags, f::IP_CSUM_GOOD | f::L4_CSUM_GOOD);
            let bad = rx(RX_IPCS | RX_IPE | RX_L4I | RX_TCPE | RX_VP | 0x0064 << 48).unwrap();
            assert_eq!(
                bad.flags,
                f::IP_CSUM_BAD | f::L4_CSUM_BAD | f::VLAN_STRIPPED
            );
            assert_eq!(bad.vlan_tci, 100);
            assert_eq!(bad.check(60), Ok(()));
        }
    }
}
