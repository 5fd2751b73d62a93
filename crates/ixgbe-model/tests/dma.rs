//! RX and TX DMA in both descriptor formats, write-back rules, CRC and
//! padding, drops without descriptors, RSS and statistics.

mod common;
use common::*;
use nfkit_ixgbe_model::ModelConfig;

fn ready() -> Bench {
    let b = Bench::healthy();
    b.init();
    b.wait_link();
    b
}

fn transmitted(b: &Bench) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    b.nic.wire().drain_transmitted(|f| out.push(f.to_vec()));
    out
}

#[test]
fn rx_legacy_writes_length_dd_eop_and_keeps_the_address() {
    let b = ready();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let f = udp_frame(MAC, 100, 1);
    assert!(b.nic.wire().inject(&f));
    assert!(!rx.legacy(0).1, "nothing before the device steps");
    b.nic.step();
    let (len, dd, eop, err) = rx.legacy(0);
    assert_eq!((len, dd, eop, err), (100, true, true, 0));
    assert_eq!(rx.data(0, 100), f);
    assert_eq!(
        rx.qword0(0),
        rx.bufs.device_addr(),
        "legacy write-back leaves the buffer address"
    );
    assert_eq!(b.rd(r::rdh(0)), 1, "RDH advances");
    assert_eq!(b.nic.counters().rx_frames, 1);
    b.assert_clean();
}

#[test]
fn rx_advanced_writes_rss_and_length() {
    let b = ready();
    let rx = b.rx_queue(0, 128, DROP_EN | DESCTYPE_ADV);
    b.wr(r::MRQC, 1 | (1 << 17) | (1 << 22)); // RSS, IPv4, UDP/IPv4
    for i in 0..10 {
        b.wr(r::rssrk(i), 0x6d5a_56da_u32.rotate_left(i as u32));
    }
    b.enable_rx();
    b.nic.wire().inject(&udp_frame(MAC, 80, 7));
    b.nic.step();
    let (len, dd, eop, rxe, ty, hash) = rx.advanced(0);
    assert_eq!((len, dd, eop, rxe), (80, true, true, false));
    assert_eq!(ty, 0x7, "UDP/IPv4");
    assert_ne!(hash, 0);
    b.assert_clean();
}

#[test]
fn rx_crc_is_kept_when_stripping_is_off() {
    let b = ready();
    b.clear(r::HLREG0, 1 << 1);
    b.clear(r::RDRXCTL, CRCSTRIP);
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let f = udp_frame(MAC, 60, 1);
    b.nic.wire().inject(&f);
    b.nic.step();
    assert_eq!(rx.legacy(0).0, 64);
    let data = rx.data(0, 64);
    assert_eq!(&data[60..], &crc32fast::hash(&f).to_le_bytes());
    b.assert_clean();
}

#[test]
fn rx_frame_larger_than_a_buffer_spans_descriptors() {
    let b = ready();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.wr(r::srrctl(0), 1 | DROP_EN); // 1 KB buffers; written while enabled
    b.enable_rx();
    b.nic.wire().inject(&udp_frame(MAC, 1500, 1));
    b.nic.step();
    assert_eq!(rx.legacy(0), (1024, true, false, 0));
    assert_eq!(rx.legacy(1), (476, true, true, 0));
    assert!(
        b.flagged("8.2.3.8.7"),
        "SRRCTL changed while enabled is flagged"
    );
}

#[test]
fn rx_drops_and_counts_without_free_descriptors_with_drop_en() {
    let b = ready();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let w = b.nic.wire();
    for i in 0..200 {
        w.inject(&udp_frame(MAC, 60, i));
    }
    b.nic.step();
    // RDT = 127: 127 descriptors free (head == tail means none)
    assert_eq!(b.nic.counters().rx_frames, 127);
    assert_eq!(b.nic.counters().rx_missed, 73);
    assert_eq!(b.rd(r::qprdc(0)), 73, "QPRDC");
    assert_eq!(b.rd(r::qprdc(0)), 0, "clear on read");
    assert_eq!(b.rd(r::rdh(0)), 127);
    assert!(!rx.legacy(127).1);
    b.assert_clean();
}

#[test]
fn rx_without_drop_en_waits_in_the_packet_buffer() {
    let b = ready();
    let mut rx = b.rx_queue(0, 128, 0);
    b.enable_rx();
    let w = b.nic.wire();
    for i in 0..130 {
        w.inject(&udp_frame(MAC, 60, i));
    }
    b.nic.step();
    assert_eq!(b.nic.counters().rx_frames, 127);
    assert_eq!(b.nic.counters().rx_missed, 0);
    assert_eq!(
        w.rx_pending(),
        2,
        "one frame held for a descriptor, two behind it"
    );
    // the driver returns descriptors: the rest arrives
    for i in 0..3 {
        rx.ring.write_u64(i * 16 + 8, 0);
    }
    rx.next = 3;
    b.wr(r::rdt(0), 2);
    b.nic.step();
    assert_eq!(b.nic.counters().rx_frames, 130);
    b.assert_clean();
}

#[test]
fn rx_packet_buffer_overflow_counts_mpc() {
    let cfg = ModelConfig {
        rx_fifo_frames: 8,
        ..ModelConfig::default()
    };
    let b = Bench::new(cfg);
    b.init();
    b.wait_link();
    let _rx = b.rx_queue(0, 128, 0);
    b.enable_rx();
    let w = b.nic.wire();
    let accepted = (0..20)
        .filter(|&i| w.inject(&udp_frame(MAC, 60, i)))
        .count();
    assert_eq!(accepted, 8);
    assert_eq!(b.rd(r::mpc(0)), 12);
    assert_eq!(b.nic.counters().rx_fifo_overflow, 12);
}

#[test]
fn unicast_filter_promiscuous_and_broadcast() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let w = b.nic.wire();
    let other = [0x02, 0, 0, 0, 0, 0x99];
    assert!(w.inject(&udp_frame(MAC, 60, 1)), "our MAC");
    assert!(!w.inject(&udp_frame(other, 60, 1)), "another MAC");
    assert!(
        !w.inject(&udp_frame([0xFF; 6], 60, 1)),
        "broadcast without BAM"
    );
    assert!(
        !w.inject(&udp_frame([0x01, 0, 0x5e, 0, 0, 1], 60, 1)),
        "multicast"
    );
    assert_eq!(b.nic.counters().rx_dropped_filter, 3);
    // filters change with RXEN clear (§8.2.3.7.1)
    b.clear(r::RXCTRL, RXEN);
    b.wr(r::FCTRL, UPE | MPE | BAM);
    b.enable_rx();
    assert!(w.inject(&udp_frame(other, 60, 1)));
    assert!(w.inject(&udp_frame([0xFF; 6], 60, 1)));
    assert!(w.inject(&udp_frame([0x01, 0, 0x5e, 0, 0, 1], 60, 1)));
    // a second exact filter
    b.clear(r::RXCTRL, RXEN);
    b.wr(r::FCTRL, 0);
    b.wr(r::ral(3), u32::from_le_bytes([2, 0, 0, 0]));
    b.wr(r::rah(3), 0x9900 | (1 << 31));
    b.enable_rx();
    assert!(w.inject(&udp_frame(other, 60, 1)));
    b.assert_clean();
}

#[test]
fn rx_undersize_frames_are_counted_and_dropped() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let mut f = udp_frame(MAC, 60, 1);
    f.truncate(50);
    assert!(!b.nic.wire().inject(&f));
    assert_eq!(b.rd(r::RUC), 1);
}

#[test]
fn rss_spreads_flows_over_queues_by_reta() {
    let b = ready();
    let rings: Vec<_> = (0..4)
        .map(|q| b.rx_queue(q, 128, DROP_EN | DESCTYPE_ADV))
        .collect();
    // RETA entry i -> queue i % 4
    for n in 0..32 {
        b.wr(r::reta(n), 0x0302_0100);
    }
    let key: [u8; 40] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    for i in 0..10 {
        b.wr(
            r::rssrk(i),
            u32::from_le_bytes(key[4 * i..4 * i + 4].try_into().unwrap()),
        );
    }
    b.wr(r::MRQC, 1 | (1 << 17) | (1 << 22));
    // per-queue stats: queue q -> counter q
    b.wr(r::rqsmr(0), 0x0302_0100);
    b.enable_rx();
    let w = b.nic.wire();
    let mut expect = [0usize; 4];
    for sport in 0..64u16 {
        let f = udp_frame(MAC, 60, 1000 + sport);
        let mut input = Vec::new();
        input.extend_from_slice(&f[26..34]);
        input.extend_from_slice(&f[34..38]);
        let h = nfkit_ixgbe_model::rss::toeplitz(&key, &input);
        expect[(h & 0x7F) as usize % 4] += 1;
        w.inject(&f);
    }
    b.nic.step();
    for (q, ring) in rings.iter().enumerate() {
        let got = (0..128).filter(|&i| ring.advanced(i).1).count();
        assert_eq!(got, expect[q], "queue {q}");
        assert_eq!(b.rd(r::qprc(q)) as usize, expect[q], "QPRC[{q}]");
        for i in 0..got {
            let (_, _, _, _, ty, h) = ring.advanced(i);
            assert_eq!(ty, 0x7);
            assert_eq!((h & 0x7F) as usize % 4, q);
        }
    }
    assert!(
        expect.iter().all(|&n| n > 0),
        "64 flows reach all 4 queues: {expect:?}"
    );
    b.assert_clean();
}

#[test]
fn tx_legacy_with_rs_writes_dd_and_without_rs_does_not() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, false);
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 100, 1);
    let a = tx.push(&f, EOP | IFCS);
    let c = tx.push(&f, EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(tx.qword1(a) & DD, 0, "no RS: no DD write-back");
    assert_ne!(tx.qword1(c) & DD, 0, "RS: DD written back");
    assert_eq!(b.rd(r::tdh(0)), 2);
    let out = transmitted(&b);
    assert_eq!(out, vec![f.clone(), f]);
    assert_eq!(b.rd(r::GPTC), 2);
    assert_eq!(b.rd(r::GOTCL), 2 * 104, "octets include the CRC");
    assert_eq!(b.rd(r::GPTC), 0, "clear on read");
    b.assert_clean();
}

#[test]
fn tx_null_descriptors_send_nothing_but_are_consumed() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, false);
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 100, 1);
    let n = tx.push(&[], EOP | IFCS | RS);
    tx.push(&f, EOP | IFCS);
    tx.bump(&b);
    b.nic.step();
    assert_ne!(tx.qword1(n) & DD, 0, "null descriptor written back");
    assert_eq!(transmitted(&b).len(), 1);
    assert_eq!(b.nic.counters().tx_null_descriptors, 1);
    assert_eq!(b.rd(r::tdh(0)), 2);
    b.assert_clean();
}

#[test]
fn tx_head_write_back_replaces_dd() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, true);
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 64, 1);
    for _ in 0..5 {
        tx.push(&f, EOP | IFCS);
    }
    let last = tx.push(&f, EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(tx.head_wb(), 6, "head written to memory");
    assert_eq!(
        tx.qword1(last) & DD,
        0,
        "no descriptor write-back with Head_WB_En"
    );
    b.assert_clean();
}

#[test]
fn tx_advanced_data_and_context_descriptors() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, false);
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 90, 1);
    let ctx = tx.push(&[], DEXT | DTYP_CTX);
    let d = tx.push(&f, DEXT | DTYP_DATA | EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_ne!(tx.qword1(d) & DD, 0);
    assert_eq!(tx.qword1(ctx) & DD, 0);
    assert_eq!(transmitted(&b), vec![f]);
    b.assert_clean();
}

#[test]
fn tx_multi_descriptor_packet_waits_for_eop() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, false);
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 200, 1);
    tx.push(&f[..100], IFCS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(b.rd(r::tdh(0)), 0, "no EOP yet: nothing consumed");
    tx.push(&f[100..], EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(transmitted(&b), vec![f]);
    assert_eq!(b.rd(r::tdh(0)), 2);
}

#[test]
fn tx_pads_short_frames_and_checks_fcs_without_ifcs() {
    let b = ready();
    let mut tx = b.tx_queue(0, 128, false);
    let mut short = udp_frame([0x02, 0, 0, 0, 0, 0x77], 60, 1);
    short.truncate(42);
    tx.push(&short, EOP | IFCS | RS);
    // without IFCS the buffer carries its own FCS
    let f = udp_frame([0x02, 0, 0, 0, 0, 0x77], 70, 1);
    let mut with_fcs = f.clone();
    with_fcs.extend_from_slice(&crc32fast::hash(&f).to_le_bytes());
    tx.push(&with_fcs, EOP | RS);
    let mut bad = f.clone();
    bad.extend_from_slice(&[0, 0, 0, 0]);
    tx.push(&bad, EOP | RS);
    tx.bump(&b);
    b.nic.step();
    let out = transmitted(&b);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].len(), 60, "padded to 60 (+CRC = 64)");
    assert_eq!(&out[0][..42], &short[..]);
    assert_eq!(out[1], f);
    assert_eq!(b.nic.counters().tx_dropped, 1, "bad FCS");
    // no padding without TXPADEN
    b.clear(r::HLREG0, 1 << 10);
    tx.push(&short, EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(transmitted(&b)[0].len(), 42);
}

#[test]
fn statistics_count_and_clear_on_read() {
    let b = ready();
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    for i in 0..10 {
        b.nic.wire().inject(&udp_frame(MAC, 100, i));
    }
    b.nic.step();
    assert_eq!(b.rd(r::GPRC), 10);
    assert_eq!(b.rd(r::GPRC), 0);
    assert_eq!(b.rd(r::TPR), 10);
    assert_eq!(b.rd(r::GORCL), 1040);
    assert_eq!(b.rd(r::GORCH), 0);
    assert_eq!(b.rd(r::GORCL), 0);
    assert_eq!(b.rd(r::qprc(0)), 10);
    b.assert_clean();
}
