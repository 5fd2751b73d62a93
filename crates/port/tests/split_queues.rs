//! `Port::split_queues` on the multi-queue kernel backends: a port with
//! two queues splits into two parts, each part sends on its own queue
//! from its own thread (no lock between them), refuses the other's
//! queue, and the frames and counters add up at the far end.

use nfkit_port::{open, Batch, OpenOptions, Port};
use nfkit_testkit::{require_root, wait_for, Veth};
use std::time::Duration;

/// Both queues together stay under the receiver's ring (512 slots): it
/// reads only after both parts are done.
const PER_QUEUE: u64 = 200;
/// An ethertype for local experiments (IEEE 802), so the receiver can
/// tell the test's frames from the kernel's own (IPv6 ND and such).
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn frame(queue: usize, i: u64) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, queue as u8, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14..22].copy_from_slice(&i.to_be_bytes());
    f
}

/// Send `PER_QUEUE` frames on queue `q` of `part`; returns the part.
fn send_all(mut part: Box<dyn Port>, q: usize) -> Box<dyn Port> {
    assert_eq!(
        part.tx_queues(),
        2,
        "a part reports the whole port's queues"
    );
    let mut other = Batch::new();
    let _ = other.push(part.pool().alloc().unwrap());
    assert_eq!(part.tx_batch(1 - q, &mut other), 0, "not this part's queue");
    let mut sent = 0;
    let mut batch = Batch::new();
    for _ in 0..100_000 {
        if sent == PER_QUEUE {
            break;
        }
        while batch.len() < 32 && sent + (batch.len() as u64) < PER_QUEUE {
            let mut p = part.pool().alloc().unwrap();
            p.copy_from(&frame(q, sent + batch.len() as u64)).unwrap();
            let _ = batch.push(p);
        }
        sent += part.tx_batch(q, &mut batch) as u64;
        if !batch.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(sent, PER_QUEUE, "queue {q} sent everything");
    part
}

fn split_parts_send_apart(spec: &str, v: &Veth) {
    let o = OpenOptions::default();
    let mut rx = open(&format!("afpacket:{}", v.b).parse().unwrap(), &o).unwrap();
    let mut tx = open(&spec.parse().unwrap(), &o).unwrap();
    let parts = tx.split_queues().expect("a multi-queue port splits");
    assert_eq!(parts.len(), 2);
    assert!(tx.split_queues().is_none(), "the shell has nothing left");
    let threads: Vec<_> = parts
        .into_iter()
        .enumerate()
        .map(|(q, p)| std::thread::spawn(move || send_all(p, q)))
        .collect();
    let parts: Vec<Box<dyn Port>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut got = [0u64; 2];
    let mut batch = Batch::new();
    let all = wait_for(Duration::from_secs(10), || {
        rx.rx_batch(0, &mut batch);
        for p in batch.drain() {
            let d = p.data();
            if d.len() >= 14 && d[12..14] == ETHERTYPE {
                got[usize::from(d[10] & 1)] += 1;
            }
        }
        got == [PER_QUEUE; 2]
    });
    assert!(
        all,
        "{spec}: received {got:?}, want {PER_QUEUE} from each part"
    );
    for (q, p) in parts.iter().enumerate() {
        assert_eq!(
            p.queue_stats(q).tx_packets,
            PER_QUEUE,
            "part {q}'s own counter"
        );
        assert_eq!(
            p.queue_stats(1 - q).tx_packets,
            0,
            "part {q} counts only its queue"
        );
    }
}

#[test]
fn af_packet_fanout_sockets_split_into_parts() {
    require_root!();
    let v = Veth::with_queues(2).unwrap();
    split_parts_send_apart(&format!("afpacket:{},queues=2", v.a), &v);
}

#[test]
fn af_xdp_sockets_split_into_parts() {
    require_root!();
    let v = Veth::with_queues(2).unwrap();
    split_parts_send_apart(&format!("afxdp:{}:0,queues=2,mode=copy", v.a), &v);
}
