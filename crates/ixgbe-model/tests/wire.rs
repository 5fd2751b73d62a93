//! The wire side: cabling two ports, a pcap wire, a generator and a sink,
//! in both execution modes.

mod common;
use common::*;
use nfkit_hw::sim::SimDma;
use nfkit_ixgbe_model::{cable, ModelConfig, TrafficGen};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ready_with(dma: Arc<SimDma>, mac: [u8; 6]) -> Bench {
    let b = Bench::with_dma(
        ModelConfig {
            mac,
            ..ModelConfig::default()
        },
        dma,
    );
    b.init();
    b.wait_link();
    b
}

#[test]
fn cabled_ports_carry_frames_both_ways() {
    let dma = SimDma::new();
    let mac_b = [0x02, 0, 0, 0, 0, 0x02];
    let a = ready_with(dma.clone(), MAC);
    let b = ready_with(dma, mac_b);
    cable(&a.nic, &b.nic);
    let rx_b = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    let mut tx_a = a.tx_queue(0, 128, false);
    let f = udp_frame(mac_b, 80, 9);
    tx_a.push(&f, EOP | IFCS | RS);
    tx_a.bump(&a);
    a.nic.step();
    b.nic.step();
    assert_eq!(rx_b.legacy(0), (80, true, true, 0));
    assert_eq!(rx_b.data(0, 80), f);
    a.assert_clean();
    b.assert_clean();
}

#[test]
fn pcap_capture_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tx.pcap");
    let a = ready_with(SimDma::new(), MAC);
    a.nic.wire().capture_to_pcap(&path).unwrap();
    let mut tx = a.tx_queue(0, 128, false);
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| udp_frame(MAC, 60 + i * 10, i as u16))
        .collect();
    for f in &frames {
        tx.push(f, EOP | IFCS | RS);
    }
    tx.bump(&a);
    a.nic.step();
    a.nic.wire().detach();
    // replay into a receiving port
    let b = ready_with(SimDma::new(), MAC);
    let rx = b.rx_queue(0, 128, DROP_EN);
    b.enable_rx();
    assert_eq!(b.nic.wire().replay_pcap(&path).unwrap(), (5, 5));
    b.nic.step();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(rx.data(i, f.len()), *f);
    }
    assert!(b
        .nic
        .wire()
        .replay_pcap(dir.path().join("missing.pcap"))
        .is_err());
}

#[test]
fn generator_and_sink() {
    let a = ready_with(SimDma::new(), MAC);
    let sink = a.nic.wire().attach_sink();
    let _rx = a.rx_queue(0, 512, DROP_EN);
    a.enable_rx();
    let mut tx = a.tx_queue(0, 128, false);
    let mut g = TrafficGen::udp_flows(MAC, 4, 64);
    assert_eq!(g.inject(&a.nic.wire(), 100), 100);
    a.nic.step();
    assert_eq!(a.nic.counters().rx_frames, 100);
    tx.push(&udp_frame(MAC, 64, 1), EOP | IFCS);
    tx.bump(&a);
    a.nic.step();
    assert_eq!(sink.frames(), 1);
    assert_eq!(sink.bytes(), 64);
}

#[test]
fn lock_step_is_deterministic() {
    let run = || {
        let b = ready_with(SimDma::new(), MAC);
        let rx = b.rx_queue(0, 128, DROP_EN | DESCTYPE_ADV);
        b.wr(r::MRQC, 1 | (1 << 17) | (1 << 22));
        b.enable_rx();
        let mut g = TrafficGen::udp_flows(MAC, 16, 64);
        g.inject(&b.nic.wire(), 50);
        b.sleep(Duration::from_micros(1));
        (0..50).map(|i| rx.advanced(i)).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

/// A free-running forwarder: port A's thread receives, the test's
/// "driver" loop moves descriptors from RX ring to TX ring of the same
/// port (TinyNF style: one buffer area), cabled to port B which counts.
#[test]
fn free_running_forwarding_between_cabled_ports() {
    let dma = SimDma::new();
    let a = ready_with(dma.clone(), MAC);
    let sinkport = ready_with(dma, [0x02, 0, 0, 0, 0, 0x02]);
    cable(&a.nic, &sinkport.nic);
    let sink_rx = sinkport.rx_queue(0, 1024, DROP_EN);
    sinkport.wr(r::FCTRL, UPE);
    sinkport.enable_rx();
    let mut rx = a.rx_queue(0, 256, DROP_EN);
    a.enable_rx();
    let mut tx = a.tx_queue(0, 256, false);
    let running_a = a.nic.spawn();
    let running_b = sinkport.nic.spawn();
    let total = 2000usize;
    let mut g = TrafficGen::udp_flows(MAC, 8, 64);
    let wire = a.nic.wire();
    let mut sent = 0;
    let mut forwarded = 0;
    let mut recycle = 0usize;
    let mut recycled = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while forwarded < total && Instant::now() < deadline {
        // frames not yet back in the RX ring stay below its 255 descriptors
        if sent < total && sent - recycled < 200 {
            sent += usize::from(g.inject(&wire, 1) == 1);
        }
        // receive: DD set?
        let i = rx.next;
        let (len, dd, _, _) = rx.legacy(i);
        if dd {
            let data = rx.data(i, len);
            rx.ring.write_u64(i * 16 + 8, 0);
            tx.push(&data, EOP | IFCS | RS);
            tx.bump(&a);
            rx.next = (i + 1) % rx.n;
            forwarded += 1;
        }
        // recycle RX descriptors the TX side finished with
        while recycle != tx.tail && tx.qword1(recycle) & DD != 0 {
            a.wr(r::rdt(0), recycle as u32);
            recycled += 1;
            recycle = (recycle + 1) % tx.n;
        }
        std::hint::spin_loop();
    }
    // give the sink port time to write the last frames
    let until = Instant::now() + Duration::from_secs(5);
    let arrived = |c: nfkit_ixgbe_model::ModelCounters| c.rx_frames + c.rx_missed;
    while arrived(sinkport.nic.counters()) < forwarded as u64 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    running_a.stop();
    running_b.stop();
    assert_eq!(
        forwarded,
        total,
        "sent {sent}, A {:?} RDH {} RDT {} TDH {} TDT {} recycle {recycle} rx.next {} pending {} viol {:?}",
        a.nic.counters(),
        a.nic.peek(r::rdh(0)),
        a.nic.peek(r::rdt(0)),
        a.nic.peek(r::tdh(0)),
        a.nic.peek(r::tdt(0)),
        rx.next,
        wire.rx_pending(),
        a.violations()
    );
    assert_eq!(a.nic.counters().rx_missed, 0);
    let c = sinkport.nic.counters();
    assert_eq!(c.rx_frames + c.rx_missed, total as u64, "{c:?}");
    assert_eq!(
        c.rx_frames, 1023,
        "the sink's ring (RDT = 1023) is never recycled"
    );
    assert!(sink_rx.legacy(0).1);
}
