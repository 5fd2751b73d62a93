//! The register file against the datasheet: offsets and strides of both
//! queue halves, reset values, access kinds and side effects.

mod common;
use common::*;
use nfkit_hw::{Bar, PciFunction};
use nfkit_ixgbe_model::regfile::RegFile;
use nfkit_ixgbe_model::regs::{self, Access};
use nfkit_ixgbe_model::ModelConfig;
use std::time::Duration;

#[test]
fn table_rows_do_not_overlap_and_fit_the_bar() {
    let mut owner = vec![None; 128 * 1024 / 4];
    for def in regs::all().filter(|d| d.alias_of.is_none()) {
        for i in 0..def.count {
            let off = (def.offset + i * def.stride) as usize;
            assert!(off + 4 <= 128 * 1024, "{} beyond BAR0", def.name);
            assert_eq!(off % 4, 0);
            if let Some(other) = owner[off / 4].replace(def.name) {
                panic!("{} and {other} both at {off:#x}", def.name);
            }
        }
    }
}

#[test]
fn queue_registers_follow_the_two_halves() {
    let rf = RegFile::new();
    let check = |off: usize, name: &str, n: usize| {
        let s = rf.slot(off).unwrap_or_else(|| panic!("{off:#x} unmapped"));
        assert_eq!((s.def.name, s.n), (name, n), "at {off:#x}");
    };
    check(0x01000, "RDBAL", 0);
    check(0x01000 + 0x40 * 63 + 0x18, "RDT", 63);
    check(0x0D000, "RDBAL", 64);
    check(0x0D000 + 0x40 * 63 + 0x28, "RXDCTL", 127);
    check(0x0D014 + 0x40 * 10, "SRRCTL", 74);
    check(0x06000 + 0x40 * 127 + 0x18, "TDT", 127);
    check(0x06038 + 0x40 * 5, "TDWBAL", 5);
    check(0x0A204 + 8 * 127, "RAH", 127);
    check(0x01030 + 0x40 * 15, "QPRC", 15);
    check(0x01430, "QPRDC", 0);
    // the SRRCTL alias of queues 0-15 shares storage with the queue block
    let alias = rf.slot(0x02100 + 4 * 3).unwrap();
    let primary = rf.slot(0x01014 + 0x40 * 3).unwrap();
    assert_eq!(alias.word, primary.word);
    assert!(rf.slot(0x0D000 + 0x40 * 64).is_none(), "no queue 128");
}

#[test]
fn srrctl_alias_reads_what_the_queue_block_holds() {
    let b = Bench::healthy();
    b.init();
    b.wr(0x02100 + 4 * 3, 0x1234_0004);
    assert_eq!(b.rd(r::srrctl(3)), 0x1234_0004);
    b.assert_clean();
}

#[test]
fn reset_values_from_the_table() {
    let b = Bench::healthy();
    b.init();
    assert_eq!(b.rd(0x05088), 0x8100, "VLNCTRL");
    assert_eq!(b.rd(r::srrctl(0)), 0x402, "SRRCTL: 2 KB buffers, legacy");
    assert_eq!(b.rd(0x03C00), 0x200 << 10, "RXPBSIZE(0) = 512 KB");
    assert_eq!(b.rd(0x0CC00), 0xA0 << 10, "TXPBSIZE(0) = 160 KB");
    assert_eq!(b.rd(0x03C04), 0, "RXPBSIZE(1)");
    assert_ne!(b.rd(r::HLREG0) & 0x403, 0, "TXCRCEN, RXCRCSTRP, TXPADEN");
    b.assert_clean();
}

#[test]
fn ctrl_rst_self_clears_and_restores_defaults() {
    let b = Bench::healthy();
    b.init();
    b.wr(r::FCTRL, UPE | MPE);
    b.wr(r::reta(5), 0x0102_0304);
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.wr(r::CTRL, RST);
    assert_ne!(
        b.nic.peek(r::CTRL) & RST,
        0,
        "RST reads set during the reset"
    );
    b.sleep(Duration::from_millis(1));
    assert_eq!(b.rd(r::CTRL) & RST, 0, "self-clearing after ~1 ms");
    b.sleep(Duration::from_millis(10));
    assert_eq!(b.rd(r::FCTRL), 0);
    assert_eq!(b.rd(r::reta(5)), 0);
    assert_ne!(
        b.rd(r::STATUS) & MASTER_ENABLE_STATUS,
        0,
        "reset re-enables mastering"
    );
    b.assert_clean();
}

#[test]
fn ctrl_lrst_resets_too() {
    let b = Bench::healthy();
    b.init();
    b.wr(r::FCTRL, BAM);
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.wr(r::CTRL, 1 << 3);
    b.sleep(Duration::from_millis(11));
    assert_eq!(b.rd(r::CTRL) & (1 << 3), 0);
    assert_eq!(b.rd(r::FCTRL), 0);
    b.assert_clean();
}

#[test]
fn master_disable_clears_master_enable_status() {
    let b = Bench::healthy();
    b.pci_enable();
    assert_ne!(b.rd(r::STATUS) & MASTER_ENABLE_STATUS, 0);
    b.set(r::CTRL, MASTER_DISABLE);
    assert!(b.wait(r::STATUS, MASTER_ENABLE_STATUS, 0));
    b.clear(r::CTRL, MASTER_DISABLE);
    assert_ne!(b.rd(r::STATUS) & MASTER_ENABLE_STATUS, 0);
}

#[test]
fn eeprom_auto_read_loads_the_mac_into_ral0_rah0() {
    let cfg = ModelConfig {
        mac: [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc],
        ..ModelConfig::default()
    };
    let b = Bench::new(cfg);
    b.init();
    assert_eq!(b.rd(r::ral(0)), 0xaa21_1b00);
    assert_eq!(b.rd(r::rah(0)), 0x8000_ccbb, "AV set, bytes 4-5");
    assert_eq!(b.rd(r::rah(1)) & (1 << 31), 0, "other entries invalid");
    b.assert_clean();
}

#[test]
fn eec_status_bits_are_read_only() {
    let b = Bench::healthy();
    b.init();
    b.wr(r::EEC, 0);
    assert_eq!(b.rd(r::EEC) & (AUTO_RD | EE_PRES), AUTO_RD | EE_PRES);
    b.wr(r::RDRXCTL, 0);
    assert_ne!(b.rd(r::RDRXCTL) & DMAIDONE, 0);
    b.assert_clean();
}

#[test]
fn link_comes_up_at_10g_and_restarts_with_autoc() {
    let b = Bench::healthy();
    b.init();
    b.wait_link();
    assert_eq!(b.rd(r::LINKS) & (0b11 << 28), 0b11 << 28, "10 Gb/s");
    b.wr(r::AUTOC, b.rd(r::AUTOC) | (1 << 12));
    assert_eq!(b.rd(r::AUTOC) & (1 << 12), 0, "RESTART_AN self-clears");
    assert_eq!(b.rd(r::LINKS) & LINK_UP, 0, "link renegotiates");
    b.wait_link();
    b.assert_clean();
}

#[test]
fn interrupt_mask_set_and_clear() {
    let b = Bench::healthy();
    b.init();
    b.wr(r::EIMS, 0x0000_00F0);
    b.wr(r::EIMS, 0x0000_0003);
    assert_eq!(b.rd(r::EIMS), 0xF3);
    b.wr(r::EIMC, 0x30);
    assert_eq!(b.rd(r::EIMS), 0xC3);
    assert_eq!(b.rd(r::EIMC), 0, "EIMC is write-only");
    // the link came up during init: EICR.LSC (bit 20) is set; reading clears it
    assert_eq!(b.rd(r::EICR), 1 << 20);
    // EICS sets causes; EICR is write-1-to-clear and clear-on-read
    b.wr(0x00808, 0x5);
    b.wr(r::EICR, 0x1);
    assert_eq!(b.rd(r::EICR), 0x4);
    assert_eq!(b.rd(r::EICR), 0);
    // the extended sets
    b.wr(0x00AA4, 0xFF);
    b.wr(0x00AB4, 0x0F);
    assert_eq!(b.rd(0x00AA4), 0xF0);
    b.assert_clean();
}

#[test]
fn access_kinds_are_declared() {
    let kind = |name: &str| regs::all().find(|d| d.name == name).unwrap().access;
    assert_eq!(kind("GPRC"), Access::Rc);
    assert_eq!(kind("STATUS"), Access::Ro);
    assert_eq!(kind("EICR"), Access::W1c);
    assert_eq!(kind("EIMC"), Access::Wo);
    assert_eq!(kind("CTRL"), Access::RwSc);
    assert_eq!(kind("RDT"), Access::Rw);
}

#[test]
fn config_space_is_an_82599es_in_d0() {
    let b = Bench::healthy();
    let pci = b.nic.pci();
    assert_eq!(pci.config_read16(0).unwrap(), 0x8086);
    assert_eq!(pci.config_read16(2).unwrap(), 0x10FB);
    assert_eq!(pci.config_read32(8).unwrap() >> 8, 0x020000, "class");
    let bar0 = pci.config_read32(0x10).unwrap();
    assert_eq!(bar0 & 0b110, 0b100, "64-bit memory BAR");
    let pm = pci.find_capability(0x01).unwrap().expect("PM capability");
    assert_eq!(pci.config_read16(pm + 4).unwrap() & 3, 0, "PMCSR: D0");
    let pcie = pci.find_capability(0x10).unwrap().expect("PCIe capability");
    assert_eq!(
        pci.config_read16(pcie + 0x0A).unwrap() & (1 << 5),
        0,
        "no transaction pending"
    );
    pci.config_write16(4, 0x0406).unwrap();
    assert_eq!(pci.config_read16(4).unwrap(), 0x0406);
    // BAR sizing
    pci.config_write32(0x10, 0xFFFF_FFFF).unwrap();
    assert_eq!(
        pci.config_read32(0x10).unwrap() & !0xF,
        !(128 * 1024 - 1) & !0xF
    );
    assert_eq!(b.bar.len(), 128 * 1024);
    assert!(pci.map_bar(1).is_err());
}
