//! Module tests in the BESS style: crafted frames into an input gate,
//! exact bytes out of each output gate.

mod common;

use common::{tcp, udp, MemPort};
use nfkit_hw::Batch;
use nfkit_pipeline::harness::{run_module, Harness};
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::*;
use std::io::Write;
use std::sync::Arc;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| udp(A, B, 1000 + i as u16, 53, &[i as u8; 6]))
        .collect()
}

#[test]
fn macswap_swaps_addresses_and_drops_runts() {
    let mut h = Harness::new();
    let out = h.run(&mut MacSwap, 0, &[udp(A, B, 1, 2, b"x"), vec![1, 2, 3]]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0], vec![udp(B, A, 1, 2, b"x")]);
    assert_eq!(h.counters(), (0, 0, 1), "the runt is a counted drop");
}

#[test]
fn bypass_maps_gate_to_gate() {
    let out = run_module(&mut Bypass::new(3), 2, &frames(2));
    assert_eq!(out, vec![vec![], vec![], frames(2)]);
}

#[test]
fn merge_sends_every_input_to_gate_0() {
    let mut m = Merge;
    assert!(m.igates() >= 8);
    let out = run_module(&mut m, 7, &frames(3));
    assert_eq!(out, vec![frames(3)]);
}

#[test]
fn sink_consumes_everything() {
    let mut h = Harness::new();
    let mut sink = Sink::new(h.pool());
    let out = h.run(&mut sink, 0, &frames(5));
    assert!(out.is_empty());
    assert_eq!(h.counters(), (0, 5, 0));
    // Freed into the sink's cache, and home when the sink goes.
    drop(sink);
    assert_eq!(
        h.pool().free_count(),
        h.pool().capacity(),
        "buffers went home"
    );
}

#[test]
fn split_on_a_packet_field() {
    // IPv4 protocol byte: UDP (17) to gate 17, TCP (6) to gate 6.
    let u = udp(A, B, 1, 2, b"u");
    let t = tcp([1, 1, 1, 1], [2, 2, 2, 2], 3, 4);
    let mut s = Split::new(
        SplitOn::Field {
            offset: 14 + 9,
            size: 1,
        },
        18,
    );
    let out = run_module(&mut s, 0, &[u.clone(), t.clone(), vec![0; 10]]);
    assert_eq!(out[17], vec![u]);
    assert_eq!(out[6], vec![t]);
    assert_eq!(
        out.iter().map(Vec::len).sum::<usize>(),
        2,
        "the short frame is dropped"
    );
}

#[test]
fn split_on_an_attribute_drops_values_without_a_gate() {
    let mut h = Harness::new();
    let mut s = Split::new(
        SplitOn::Attr {
            name: "out".into(),
            size: 2,
        },
        2,
    );
    let values = [1u64, 0, 5, 1];
    let out = h.run_with(&mut s, 0, &frames(4), |i, p, attrs| {
        attrs[0].set_u64(p, values[i])
    });
    let f = frames(4);
    assert_eq!(out[0], vec![f[1].clone()]);
    assert_eq!(out[1], vec![f[0].clone(), f[3].clone()]);
    assert_eq!(h.counters().2, 1);
}

#[test]
fn round_robin_by_packet_and_by_batch() {
    let f = frames(6);
    let out = run_module(&mut RoundRobinSplit::new(3, false), 0, &f);
    assert_eq!(out[0], vec![f[0].clone(), f[3].clone()]);
    assert_eq!(out[1], vec![f[1].clone(), f[4].clone()]);
    assert_eq!(out[2], vec![f[2].clone(), f[5].clone()]);
    let mut h = Harness::new();
    let mut rr = RoundRobinSplit::new(2, true);
    let first = h.run(&mut rr, 0, &f[..2]);
    let second = h.run(&mut rr, 0, &f[2..]);
    assert_eq!(first, vec![f[..2].to_vec(), vec![]]);
    assert_eq!(second, vec![vec![], f[2..].to_vec()]);
}

#[test]
fn replicate_copies_to_every_gate() {
    let mut h = Harness::new();
    let f = frames(3);
    let out = h.run(&mut Replicate::new(3), 0, &f);
    assert_eq!(out, vec![f.clone(), f.clone(), f]);
    assert_eq!(h.counters(), (6, 0, 0), "two copies of each of three");
}

#[test]
fn random_split_spreads_and_drops() {
    let f = frames(40);
    let out = run_module(&mut RandomSplit::new(vec![0, 2], 0.0, 7), 0, &f);
    assert_eq!(out.len(), 3);
    assert!(out[1].is_empty(), "gate 1 is not in the list");
    let mut all: Vec<Vec<u8>> = out[0].iter().chain(&out[2]).cloned().collect();
    all.sort();
    let mut want = f.clone();
    want.sort();
    assert_eq!(all, want, "nothing lost, nothing changed");
    assert!(!out[0].is_empty() && !out[2].is_empty());

    let mut h = Harness::new();
    let out = h.run(&mut RandomSplit::new(vec![0], 1.0, 7), 0, &f);
    assert!(out[0].is_empty());
    assert_eq!(h.counters().2, 40);

    let mut h = Harness::new();
    let big: Vec<Vec<u8>> = (0..2000).map(|_| f[0].clone()).collect();
    let out = h.run(&mut RandomSplit::new(vec![0], 0.25, 11), 0, &big);
    let kept = out[0].len() as f64 / 2000.0;
    assert!((kept - 0.75).abs() < 0.05, "kept {kept}");
}

#[test]
fn hash_lb_keeps_flows_together() {
    let flows: Vec<Vec<u8>> = (0..64)
        .map(|i| tcp([10, 0, 0, i], [10, 0, 1, 1], 1000 + i as u16, 80))
        .collect();
    let mut lb = HashLb::new(4, HashFields::L4);
    let once = run_module(&mut lb, 0, &flows);
    let twice = run_module(&mut lb, 0, &flows);
    assert_eq!(once, twice, "same flow, same gate");
    assert_eq!(once.iter().map(Vec::len).sum::<usize>(), 64);
    assert!(
        once.iter().all(|g| !g.is_empty()),
        "64 flows spread over 4 gates"
    );
    // Ports matter for l4, not for l3.
    let a = tcp([10, 0, 0, 1], [10, 0, 0, 2], 1, 80);
    let l3 = HashLb::new(1 << 20, HashFields::L3);
    let l4 = HashLb::new(1 << 20, HashFields::L4);
    let b = tcp([10, 0, 0, 1], [10, 0, 0, 2], 2, 80);
    assert_eq!(l3.hash(&a), l3.hash(&b));
    assert_ne!(l4.hash(&a), l4.hash(&b));
    // l2 looks at MACs only; non-IP frames fall back to MACs.
    let l2 = HashLb::new(4, HashFields::L2);
    assert_eq!(l2.hash(&a), l2.hash(&b));
    let arp = [vec![0xff; 6], A.to_vec(), vec![0x08, 0x06], vec![0; 28]].concat();
    assert_eq!(l4.hash(&arp), HashLb::new(4, HashFields::L2).hash(&arp));
}

#[test]
fn update_writes_fields_big_endian() {
    let f = udp(A, B, 1, 2, b"payload");
    let mut u = Update::new(vec![
        FieldUpdate {
            offset: 22,
            size: 1,
            value: 7,
        },
        FieldUpdate {
            offset: 0,
            size: 6,
            value: 0x0200_0000_00ff,
        },
    ]);
    let mut h = Harness::new();
    let out = h.run(&mut u, 0, &[f.clone(), vec![0; 20]]);
    let mut want = f;
    want[22] = 7;
    want[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xff]);
    assert_eq!(out[0], vec![want]);
    assert_eq!(h.counters().2, 1, "too short for offset 22");
}

#[test]
fn set_metadata_writes_the_attribute_and_leaves_bytes_alone() {
    let mut h = Harness::new();
    let mut m = SetMetadata::int("color", 4, 0xdead);
    let attr = Harness::attrs(&m)[0];
    let mut batch = Batch::new();
    for f in frames(2) {
        let _ = batch.push(h.packet(&f));
    }
    let outs = h.process(&mut m, 0, batch);
    assert_eq!(outs[0].len(), 2);
    for (p, f) in outs[0].iter().zip(frames(2)) {
        assert_eq!(attr.get_u64(p), 0xdead);
        assert_eq!(p.data(), &f[..]);
    }
}

#[test]
fn timestamp_and_measure_in_metadata_and_in_packets() {
    let mut h = Harness::new();
    h.set_time(1_000);
    let mut ts = Timestamp::new();
    let attr = Harness::attrs(&ts)[0];
    let mut batch = Batch::new();
    let _ = batch.push(h.packet(&frames(1)[0]));
    let outs = h.process(&mut ts, 0, batch);
    assert_eq!(attr.get_u64(&outs[0][0]), 1_000);
    assert_eq!(outs[0][0].data(), &frames(1)[0][..]);

    // In the packet: 8 bytes big-endian at offset 42 (the UDP payload).
    let f = udp(A, B, 1, 2, &[0; 8]);
    h.set_time(0x0102_0304_0506_0708);
    let out = h.run(&mut Timestamp::in_packet(42), 0, std::slice::from_ref(&f));
    let mut want = f.clone();
    want[42..50].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(out[0], vec![want.clone()]);

    let mut m = Measure::in_packet(42);
    h.set_time(0x0102_0304_0506_0708 + 2_500);
    let out = h.run(&mut m, 0, &[want.clone(), want.clone()]);
    assert_eq!(
        out[0],
        vec![want.clone(), want],
        "Measure passes packets on untouched"
    );
    let stats: std::collections::HashMap<_, _> = m.extra_stats().into_iter().collect();
    assert_eq!(stats["count"], 2);
    assert!((2_495..=2_505).contains(&stats["p50_ns"]), "{stats:?}");

    // Metadata mode: latency from the attribute.
    let mut m = Measure::new();
    h.set_time(10_000);
    h.run_with(&mut m, 0, &frames(3), |i, p, attrs| {
        attrs[0].set_u64(p, 10_000 - 100 * (i as u64 + 1))
    });
    let stats: std::collections::HashMap<_, _> = m.extra_stats().into_iter().collect();
    assert_eq!(
        (stats["count"], stats["min_ns"], stats["max_ns"]),
        (3, 100, 300)
    );
}

#[derive(Clone, Default)]
struct Captured(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn dump_prints_the_first_packets_and_passes_all() {
    let text = Captured::default();
    let mut d = Dump::new(Box::new(text.clone()), 2, 4);
    let f = frames(3);
    let out = run_module(&mut d, 0, &f);
    assert_eq!(out[0], f);
    let s = String::from_utf8(text.0.lock().clone()).unwrap();
    assert_eq!(
        s,
        format!(
            "packet 1 len={}: 02 00 00 00\npacket 2 len={}: 02 00 00 00\n",
            f[0].len(),
            f[1].len()
        )
    );
}

#[test]
fn pcap_capture_writes_a_readable_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.pcap");
    let mut cap = PcapCapture::create(&path).unwrap();
    let mut h = Harness::new();
    h.set_time(1_500_000_000);
    let f = frames(3);
    let out = h.run(&mut cap, 0, &f);
    assert_eq!(out[0], f);
    cap.on_pause();
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut got = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.timestamp, std::time::Duration::from_millis(1500));
        got.push(p.data.to_vec());
    }
    assert_eq!(got, f);
}

#[test]
fn source_makes_template_packets() {
    let mut h = Harness::new();
    let mut s = Source::new(h.pool().clone(), &[0xaa, 0xbb], 60, 8);
    let out = h.run_task(&mut s);
    let mut want = vec![0u8; 60];
    want[..2].copy_from_slice(&[0xaa, 0xbb]);
    assert_eq!(out[0], vec![want; 8]);
    assert_eq!(h.counters().0, 8);
}

#[test]
fn queue_buffers_then_releases_with_a_growing_burst() {
    let mut h = Harness::new();
    let mut q = Queue::new(16, 32);
    let f = frames(20);
    let out = h.run(&mut q, 0, &f);
    assert!(out[0].is_empty(), "nothing leaves until the task runs");
    assert_eq!(h.counters().2, 4, "16 fit, 4 dropped");
    assert_eq!(q.extra_stats(), vec![("queued", 16)]);
    // The task half, as another worker would run it, shares the ring.
    let mut half = q.task_half().unwrap();
    let first = h.run_task(&mut *half);
    assert_eq!(first[0], f[..4].to_vec(), "the burst starts small");
    let second = h.run_task(&mut *half);
    assert_eq!(
        second[0],
        f[4..12].to_vec(),
        "and doubles while the queue is full"
    );
    let third = h.run_task(&mut q);
    assert_eq!(third[0], f[12..16].to_vec());
}

#[test]
fn port_inc_and_queue_inc_receive() {
    let (port, wire) = MemPort::shared("mem0", 2);
    {
        let mut w = wire.lock();
        w.rx[0].extend(frames(2));
        w.rx[1].extend(frames(3)[2..].iter().cloned());
    }
    let mut h = Harness::new();
    let mut inc = PortInc::new(port.clone());
    assert_eq!(h.run_task(&mut inc)[0], frames(2), "queue 0 first");
    assert_eq!(
        h.run_task(&mut inc)[0],
        vec![frames(3)[2].clone()],
        "then queue 1"
    );
    assert_eq!(h.counters().0, 3);
    wire.lock().rx[1].push_back(frames(1)[0].clone());
    wire.lock().rx[0].push_back(frames(2)[1].clone());
    let mut qi = PortInc::queue(port, 1);
    assert_eq!(qi.class(), "QueueInc");
    assert_eq!(h.run_task(&mut qi)[0], frames(1));
    assert_eq!(wire.lock().rx[0].len(), 1, "queue 0 untouched");
}

#[test]
fn port_out_and_queue_out_send_and_count_refusals() {
    let (port, wire) = MemPort::shared("mem0", 2);
    let mut h = Harness::new();
    h.set_worker(1);
    let out = h.run(&mut PortOut::new(port.clone()), 0, &frames(3));
    assert!(out.is_empty());
    assert_eq!(wire.lock().tx[1], frames(3), "worker 1 uses queue 1");
    assert_eq!(h.counters(), (0, 3, 0));
    wire.lock().tx_limit = Some(1);
    let mut h = Harness::new();
    h.run(&mut PortOut::queue(port, 0), 0, &frames(3));
    assert_eq!(wire.lock().tx[0], frames(1));
    assert_eq!(h.counters(), (0, 1, 2), "two refused, counted as drops");
}
