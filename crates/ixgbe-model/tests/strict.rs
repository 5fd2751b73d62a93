//! Strict mode: hand-written register sequences that break one datasheet
//! rule each are flagged with the rule's section; the correct sequence
//! (common::Bench::init and the queue set-up) is not.

mod common;
use common::*;
use nfkit_hw::{Bar, DmaAllocator, PciFunction};
use nfkit_ixgbe_model::ModelConfig;
use std::time::Duration;

fn ready() -> Bench {
    let b = Bench::healthy();
    b.init();
    b.wait_link();
    b
}

#[test]
fn the_correct_sequence_is_clean() {
    let b = ready();
    let mut rx = b.rx_queue(0, 256, DROP_EN);
    let _rx64 = b.rx_queue(64, 128, DROP_EN | DESCTYPE_ADV);
    let mut tx = b.tx_queue(0, 256, true);
    let _tx127 = b.tx_queue(127, 128, false);
    b.enable_rx();
    b.nic.wire().inject(&udp_frame(MAC, 64, 1));
    tx.push(&udp_frame(MAC, 64, 1), EOP | IFCS | RS);
    tx.bump(&b);
    b.sleep(Duration::from_micros(10));
    assert!(rx.legacy(0).1);
    rx.next = 1;
    assert_eq!(tx.head_wb(), 1);
    b.assert_clean();
}

#[test]
fn the_violation_names_its_section() {
    let b = ready();
    b.wr(r::STATUS, 0);
    let v = b.nic.violations();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].section, "8.2.3.1.2");
    assert!(
        v[0].to_string().starts_with("§8.2.3.1.2: write"),
        "{}",
        v[0]
    );
}

#[test]
fn ring_base_not_128_byte_aligned() {
    let b = ready();
    let ring = b.alloc(4096);
    b.wr(r::rdbal(0), ring.device_addr() as u32 + 64);
    assert!(b.flagged("8.2.3.8.1"));
    b.nic.clear_violations();
    b.wr(r::tdbal(0), ring.device_addr() as u32 + 16);
    assert!(b.flagged("8.2.3.9.5"));
}

#[test]
fn ring_length_not_a_multiple_of_128() {
    let b = ready();
    b.wr(r::rdlen(0), 16 * 100);
    assert!(b.flagged("8.2.3.8.3"));
    b.nic.clear_violations();
    b.wr(r::tdlen(3), 16 * 9);
    assert!(b.flagged("8.2.3.9.7"));
}

#[test]
fn tail_written_before_enable_reads_back() {
    let b = ready();
    let ring = b.alloc(128 * 16);
    let a = ring.device_addr();
    b.wr(r::rdbal(1), a as u32);
    b.wr(r::rdbah(1), (a >> 32) as u32);
    b.wr(r::rdlen(1), 128 * 16);
    b.wr(r::rdt(1), 127);
    assert!(b.flagged("4.6.7"), "{:?}", b.violations());
    b.nic.clear_violations();
    // enable requested but not yet read back set
    b.set(r::rxdctl(1), ENABLE);
    b.wr(r::rdt(1), 127);
    assert!(b.flagged("4.6.7"));
    b.nic.clear_violations();
    b.wr(r::tdt(2), 5);
    assert!(b.flagged("4.6.8"));
}

#[test]
fn head_write_back_alignment_tinynf_rule_and_datasheet_rule() {
    let b = ready();
    let m = b.alloc(4096);
    let a = m.device_addr() as u32;
    b.wr(r::tdwbal(0), (a + 16) | 1);
    b.assert_clean();
    b.wr(r::tdwbal(0), (a + 8) | 1);
    assert!(
        b.flagged("TinyNF"),
        "8-byte aligned: TinyNF's empirical rule"
    );
    b.nic.clear_violations();
    b.wr(r::tdwbal(0), (a + 2) | 1);
    assert!(b.flagged("8.2.3.9.11"), "not dword aligned");
}

#[test]
fn ring_outside_dma_memory_never_enables() {
    let b = ready();
    b.wr(r::rdbal(0), 0x1000_0000);
    b.wr(r::rdbah(0), 0x7);
    b.wr(r::rdlen(0), 128 * 16);
    b.set(r::rxdctl(0), ENABLE);
    assert!(!b.wait(r::rxdctl(0), ENABLE, ENABLE));
    assert!(b.flagged("8.2.3.8.1"));
}

#[test]
fn descriptor_buffer_outside_dma_memory() {
    let b = ready();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    rx.ring.write_u64(0, 0xdead_0000_0000);
    b.nic.wire().inject(&udp_frame(MAC, 64, 1));
    b.nic.step();
    assert!(b.flagged("7.1.5"));
    assert_eq!(b.nic.counters().dma_faults, 1);
    let (_, dd, _, err) = rx.legacy(0);
    assert!(dd && err & 0x01 != 0, "written back with RXE");
    b.nic.clear_violations();
    let mut tx = b.tx_queue(0, 128, false);
    tx.push(&udp_frame(MAC, 64, 1), EOP | IFCS | RS);
    tx.ring.write_u64(0, 0x10);
    tx.bump(&b);
    b.nic.step();
    assert!(b.flagged("7.2.3.2.2"));
    assert_eq!(b.nic.counters().tx_dropped, 1);
}

#[test]
fn queue_setup_before_eeprom_and_dma_init_done() {
    let b = Bench::healthy();
    b.pci_enable();
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.wr(r::CTRL, RST);
    b.sleep(Duration::from_millis(11));
    // no polling of EEC.AUTO_RD / RDRXCTL.DMAIDONE
    b.wr(r::rdlen(0), 128 * 16);
    let v = b.violations();
    assert!(b.flagged("4.6.3"), "{v:?}");
    assert!(v[0].contains("EEC.AUTO_RD and RDRXCTL.DMAIDONE"), "{v:?}");
}

#[test]
fn access_during_reset_and_before_it_settles() {
    let b = ready();
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.wr(r::CTRL, RST);
    // Polling at once, ixy-style: the bit still reads 1.
    assert_ne!(b.rd(r::CTRL) & RST, 0, "RST reads 1 while the reset runs");
    assert!(b.flagged("8.2.3.1.1"));
    b.nic.clear_violations();
    b.sleep(Duration::from_millis(2));
    assert_eq!(b.rd(r::CTRL) & RST, 0, "RST self-cleared");
    b.assert_clean();
    b.wr(r::EIMC, 0x7FFF_FFFF);
    assert!(b.flagged("4.6.3.2"), "10 ms after a global reset");
}

#[test]
fn rxen_without_the_security_block_halted() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.set(r::RXCTRL, RXEN);
    assert!(b.flagged("4.6.7"));
    b.clear(r::RXCTRL, RXEN);
    b.nic.clear_violations();
    // RX_DIS set but SECRX_RDY not yet waited for
    b.set(r::SECRXCTRL, RX_DIS);
    b.set(r::RXCTRL, RXEN);
    assert!(b
        .nic
        .violations()
        .iter()
        .any(|v| v.rule.contains("SECRX_RDY")));
}

#[test]
fn crc_strip_settings_must_match() {
    let b = ready();
    b.clear(r::RDRXCTL, CRCSTRIP);
    b.enable_rx();
    assert!(b.flagged("8.2.3.8.8"));
}

#[test]
fn filters_changed_while_receiving() {
    let b = ready();
    b.enable_rx();
    b.wr(r::FCTRL, UPE);
    assert!(b.flagged("8.2.3.7.1"));
}

#[test]
fn tx_queue_enabled_before_dmatxctl_te() {
    let b = ready();
    let ring = b.alloc(128 * 16);
    b.wr(r::tdbal(0), ring.device_addr() as u32);
    b.wr(r::tdbah(0), (ring.device_addr() >> 32) as u32);
    b.wr(r::tdlen(0), 128 * 16);
    b.set(r::txdctl(0), ENABLE);
    assert!(b.flagged("4.6.8"));
}

#[test]
fn tx_threshold_must_leave_room_for_the_largest_frame() {
    const MAXFRS: usize = 0x04268;
    const TXPBTHRESH0: usize = 0x04950;
    const JUMBOEN: u32 = 1 << 2;
    // Standard frames: 0xA0 - 2 (a 1518-byte frame is 2 KB rounded up).
    let b = ready();
    b.wr(TXPBTHRESH0, 0xA0 - 2);
    let _tx = b.tx_queue(0, 128, false);
    b.assert_clean();
    // Jumbo frames of 9018 bytes with the standard threshold: flagged.
    let b = ready();
    b.set(r::HLREG0, JUMBOEN);
    b.wr(MAXFRS, 9018 << 16);
    b.wr(TXPBTHRESH0, 0xA0 - 2);
    let _tx = b.tx_queue(0, 128, false);
    assert!(b.flagged("8.2.3.9.16"), "{:?}", b.violations());
    // ... and with the threshold computed from the frame: clean.
    let b = ready();
    b.set(r::HLREG0, JUMBOEN);
    b.wr(MAXFRS, 9018 << 16);
    b.wr(TXPBTHRESH0, 0xA0 - 9);
    let _tx = b.tx_queue(0, 128, false);
    b.assert_clean();
}

#[test]
fn enable_on_an_unconfigured_queue() {
    let b = ready();
    b.set(r::rxdctl(9), ENABLE);
    assert!(
        !b.wait(r::rxdctl(9), ENABLE, ENABLE),
        "never reads back set"
    );
    assert!(b.flagged("4.6.7"));
}

#[test]
fn head_written_while_enabled() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.wr(r::rdh(0), 5);
    assert!(b.flagged("8.2.3.8.4"));
    assert_eq!(b.rd(r::rdh(0)), 0, "ignored");
}

#[test]
fn writes_to_read_only_and_reserved_registers() {
    let b = ready();
    b.wr(r::LINKS, 0);
    assert!(b.flagged("8.2.3.22.20"));
    b.nic.clear_violations();
    b.wr(r::GPRC, 5);
    assert!(b.flagged("8.2.3.23"));
    b.nic.clear_violations();
    b.wr(0x1F000, 1);
    assert!(b.flagged("8.2.2"));
    b.nic.clear_violations();
    assert_eq!(b.rd(0x3), 0, "an unmapped read returns 0");
    assert!(b.flagged("8.2.2"), "unaligned");
}

#[test]
fn reset_with_queues_running_and_no_master_disable() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.wr(r::CTRL, RST);
    assert!(b.flagged("4.2.1.6.1"));
}

#[test]
fn dma_with_bus_mastering_off() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let pci = b.nic.pci();
    pci.config_write16(4, 0x0002).unwrap(); // memory only
    b.nic.wire().inject(&udp_frame(MAC, 64, 1));
    b.nic.step();
    assert!(b.flagged("9.3.3.3"));
    assert_eq!(b.nic.counters().rx_frames, 0);
}

#[test]
fn bar_access_with_memory_decoding_off() {
    let b = ready();
    b.nic.pci().config_write16(4, 0).unwrap();
    assert_eq!(b.bar.read32(r::STATUS), u32::MAX);
    assert!(b.flagged("9.3.3.3"));
}

#[test]
fn strict_off_records_nothing() {
    let cfg = ModelConfig {
        strict: false,
        ..ModelConfig::default()
    };
    let b = Bench::new(cfg);
    b.wr(r::STATUS, 1);
    b.wr(r::rdt(0), 9);
    assert!(b.nic.violations().is_empty());
    assert!(b.dma.allocate(64, true).is_ok());
    assert!(b.nic.violations().is_empty(), "nor for DMA set-up");
}

#[test]
fn an_interrupt_enabled_with_no_vector() {
    // GPIE multiple-MSI-X mode, but MSI-X was never set up at the PCI
    // level (no eventfds): unmasking vector 0 has nothing to deliver to
    let b = ready();
    b.wr(0x00898, 1 << 4); // GPIE.Multiple_MSIX
    b.wr(0x00AA0, 1); // EIMS_EX(0): vector 0
    assert!(b.flagged("7.3.1"), "{:?}", b.nic.violations());
    b.nic.clear_violations();
    // LSC enabled with no IVAR_MISC vector for the other causes
    b.wr(0x00880, 1 << 20);
    assert!(b.flagged("8.2.3.5.14"), "{:?}", b.nic.violations());
    b.nic.clear_violations();
    // MSI-X set up, but GPIE left in single-vector mode
    let fds = b.nic.pci().enable_msix(2).unwrap();
    b.wr(0x00898, 0);
    b.wr(0x00AA0, 2);
    assert!(b.flagged("8.2.3.5.11"), "{:?}", b.nic.violations());
    // a vector that does exist, in MSI-X mode: clean
    b.nic.clear_violations();
    b.wr(0x00898, 1 << 4);
    b.wr(0x00AA0, 1);
    b.assert_clean();
    drop(fds);
}

/// A context descriptor (§7.2.3.2.3) at the tail: IPLEN/MACLEN, TUCMD
/// (IPV4 bit 10, L4T TCP bit 11), IDX, L4LEN, MSS.
fn push_context(tx: &mut TxRing, maclen: u64, iplen: u64, l4len: u64, mss: u64) {
    let i = tx.tail;
    tx.ring.write_u64(i * 16, iplen | maclen << 9);
    let mll = l4len << 8 | mss << 16;
    tx.ring
        .write_u64(i * 16 + 8, DEXT | DTYP_CTX | 1 << 10 | 1 << 11 | mll << 32);
    tx.tail = (tx.tail + 1) % tx.n;
}

const TXSM: u64 = 1 << (32 + 9);
const TSE: u64 = 1 << 31;

/// Offload misuse is flagged with its section and nothing is sent: a data
/// descriptor naming a context never set, TSO with an MSS of 0, headers
/// that end past the packet, PAYLEN that is not the packet's length; the
/// correct checksum request sends a frame whose UDP checksum verifies.
#[test]
fn offload_misuse_is_flagged_and_nothing_is_sent() {
    let b = ready();
    let mut tx = b.tx_queue(0, 256, true);
    let data = DEXT | DTYP_DATA | EOP | IFCS | RS;
    let frame = udp_frame(MAC, 128, 7);
    let send = |tx: &TxRing| {
        tx.bump(&b);
        b.sleep(Duration::from_micros(10));
        let mut n = 0;
        b.nic.wire().drain_transmitted(|_| n += 1);
        n
    };
    // 1. a checksum through a context never set
    tx.push(&frame, data | TXSM);
    assert_eq!(send(&tx), 0);
    assert!(b.flagged("7.2.3.2.4"), "{:?}", b.violations());
    b.nic.clear_violations();
    // 2. TSO with MSS 0
    push_context(&mut tx, 14, 20, 20, 0);
    tx.push(&frame, data | TSE);
    assert_eq!(send(&tx), 0);
    assert!(b.flagged("7.2.3.2.3"), "{:?}", b.violations());
    b.nic.clear_violations();
    // 3. headers past the packet (IPLEN 200 in a 128-byte frame)
    push_context(&mut tx, 14, 200, 20, 1000);
    tx.push(&frame, data | TXSM);
    assert_eq!(send(&tx), 0);
    assert!(b.flagged("7.2.3.2.3"), "{:?}", b.violations());
    b.nic.clear_violations();
    // 4. PAYLEN not the packet's length
    let i = tx.push(&frame, data);
    let q1 = tx.qword1(i);
    tx.ring.write_u64(i * 16 + 8, q1 + (1 << 46));
    assert_eq!(send(&tx), 1, "sent, but flagged");
    assert!(b.flagged("7.2.3.2.4"), "{:?}", b.violations());
    b.nic.clear_violations();
    // The correct request: a UDP checksum over the seeded pseudo-header.
    let i = tx.tail;
    tx.ring.write_u64(i * 16, 20 | 14 << 9);
    tx.ring.write_u64(i * 16 + 8, DEXT | DTYP_CTX | 1 << 10);
    tx.tail += 1;
    let mut f = frame.clone();
    let pseudo: u32 = f[26..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>()
        + 17
        + (f.len() - 34) as u32;
    let pseudo = (pseudo & 0xFFFF) + (pseudo >> 16);
    f[40..42].copy_from_slice(&(pseudo as u16).to_be_bytes());
    tx.push(&f, data | TXSM);
    tx.bump(&b);
    b.sleep(Duration::from_micros(10));
    let mut got = Vec::new();
    b.nic.wire().drain_transmitted(|x| got.push(x.to_vec()));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][..40], frame[..40]);
    let mut s: u64 = got[0][26..34]
        .chunks(2)
        .chain(got[0][34..].chunks(2))
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum::<u64>()
        + 17
        + (got[0].len() - 34) as u64;
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    assert_eq!(s, 0xFFFF, "the UDP checksum verifies");
    b.assert_clean();
}
