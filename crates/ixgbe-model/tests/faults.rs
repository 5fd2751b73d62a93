//! Fault injection: each fault shows up where the datasheet says a driver
//! would see it.

mod common;
use common::*;
use nfkit_ixgbe_model::{Faults, LinkFault, ModelConfig};
use std::time::Duration;

fn faulty(faults: Faults) -> Bench {
    Bench::new(ModelConfig {
        faults,
        ..ModelConfig::default()
    })
}

/// The §4.6.3 steps up to (not including) the EEPROM check.
fn reset(b: &Bench) {
    b.pci_enable();
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.wr(r::CTRL, RST);
    b.sleep(Duration::from_millis(11));
}

#[test]
fn eeprom_absent() {
    let b = faulty(Faults {
        eeprom_absent: true,
        ..Faults::default()
    });
    reset(&b);
    assert!(b.wait(r::EEC, AUTO_RD, AUTO_RD));
    assert_eq!(b.rd(r::EEC) & EE_PRES, 0);
    assert_eq!(b.rd(r::rah(0)), 0, "no MAC loaded");
}

#[test]
fn eeprom_bad_checksum() {
    let b = faulty(Faults {
        eeprom_bad_checksum: true,
        ..Faults::default()
    });
    reset(&b);
    assert!(b.wait(r::EEC, AUTO_RD, AUTO_RD));
    assert_ne!(b.rd(r::FWSM) & (0x3F << 19), 0, "FWSM.EXT_ERR_IND");
}

#[test]
fn dma_init_never_completes() {
    let b = faulty(Faults {
        dma_init_never_done: true,
        ..Faults::default()
    });
    reset(&b);
    assert!(b.wait(r::EEC, AUTO_RD, AUTO_RD));
    assert!(!b.wait(r::RDRXCTL, DMAIDONE, DMAIDONE));
}

#[test]
fn link_down() {
    let b = faulty(Faults {
        link: LinkFault::Down,
        ..Faults::default()
    });
    b.init();
    b.sleep(Duration::from_secs(1));
    assert_eq!(b.rd(r::LINKS) & LINK_UP, 0);
    let _rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    assert!(
        !b.nic.wire().inject(&udp_frame(MAC, 64, 1)),
        "nothing arrives without link"
    );
}

#[test]
fn link_flapping() {
    let b = faulty(Faults {
        link: LinkFault::Flapping {
            period: Duration::from_millis(50),
        },
        ..Faults::default()
    });
    b.init();
    b.wait_link();
    let mut states = Vec::new();
    for _ in 0..8 {
        states.push(b.rd(r::LINKS) & LINK_UP != 0);
        b.sleep(Duration::from_millis(50));
    }
    assert!(
        states.contains(&true) && states.contains(&false),
        "{states:?}"
    );
}

#[test]
fn delayed_descriptor_write_back() {
    let b = faulty(Faults {
        writeback_delay: 3,
        ..Faults::default()
    });
    b.init();
    b.wait_link();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    b.nic.wire().inject(&udp_frame(MAC, 64, 1));
    b.nic.step();
    assert!(!rx.legacy(0).1, "not yet");
    b.nic.step();
    b.nic.step();
    assert!(!rx.legacy(0).1, "not yet");
    b.nic.step();
    assert!(rx.legacy(0).1, "after 3 more steps");
    let mut tx = b.tx_queue(0, 128, false);
    let i = tx.push(&udp_frame(MAC, 64, 1), EOP | IFCS | RS);
    tx.bump(&b);
    b.nic.step();
    assert_eq!(tx.qword1(i) & DD, 0);
    for _ in 0..3 {
        b.nic.step();
    }
    assert_ne!(tx.qword1(i) & DD, 0);
}

#[test]
fn queue_never_enables() {
    let b = faulty(Faults {
        queue_never_enables: Some(2),
        ..Faults::default()
    });
    b.init();
    let ring = b.alloc(128 * 16);
    b.wr(r::rdbal(2), ring.device_addr() as u32);
    b.wr(r::rdbah(2), (ring.device_addr() >> 32) as u32);
    b.wr(r::rdlen(2), 128 * 16);
    b.set(r::rxdctl(2), ENABLE);
    assert!(!b.wait(r::rxdctl(2), ENABLE, ENABLE));
    // other queues are fine
    let _ok = b.rx_queue(1, 128, DROP_EN);
    b.assert_clean();
}

#[test]
fn rx_errors_flagged_in_descriptors() {
    let b = faulty(Faults {
        rx_error_every: Some(3),
        ..Faults::default()
    });
    b.init();
    b.wait_link();
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    for i in 0..6 {
        b.nic.wire().inject(&udp_frame(MAC, 64, i));
    }
    b.nic.step();
    let errs: Vec<bool> = (0..6).map(|i| rx.legacy(i).3 & 0x01 != 0).collect();
    assert_eq!(errs, [false, false, true, false, false, true]);
    assert_eq!(b.nic.counters().rx_errors_injected, 2);
}

#[test]
fn master_disable_stuck() {
    let b = faulty(Faults {
        master_disable_stuck: true,
        ..Faults::default()
    });
    b.pci_enable();
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(!b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    // TinyNF's fallback: two resets; the device still comes up
    b.wr(r::CTRL, RST);
    b.sleep(Duration::from_millis(11));
    assert!(b.wait(r::EEC, AUTO_RD, AUTO_RD));
    b.assert_clean();
}
