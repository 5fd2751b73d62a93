//! TSO, LRO and `virtio_net_hdr` parsing under arbitrary frames and
//! metadata (issue 19): no panic; a super-frame TSO accepts leaves as
//! segments whose inner TCP checksums verify, or is counted as dropped;
//! LRO sends at most what it got and drops nothing.

use nfkit_hw::pool::offload::{Gso, Offload, L3, L4};
use nfkit_hw::Batch;
use nfkit_packet::gso::TcpLayout;
use nfkit_packet::offload_meta;
use nfkit_pipeline::args::Args;
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::{BuildEnv, Registry};

fn module(h: &Harness, class: &str) -> Box<dyn Module> {
    let env = BuildEnv {
        ports: Default::default(),
        pool: h.pool().clone(),
    };
    Registry::default()
        .build(class, &mut Args::from_pairs(&[]), &env)
        .expect("valid arguments")
}

/// First byte: how the metadata is made (bit 0: from the header, else
/// from the next bytes as raw lengths); bytes 1..11: a `virtio_net_hdr`
/// (or the raw lengths and MSS); the rest: the frame (at most 9,000
/// bytes, a chain when longer than a buffer).
pub fn offloads(data: &[u8]) {
    let (Some(&sel), Some(hdr)) = (data.first(), data.get(1..11)) else {
        return;
    };
    let frame = &data[11..data.len().min(11 + 9_000)];
    let meta = if sel & 1 == 1 {
        match offload_meta::from_virtio_net_hdr(hdr, frame) {
            Ok(Some(o)) => o,
            _ => return,
        }
    } else {
        Offload {
            l3: if hdr[0] & 1 == 0 { L3::Ipv4 } else { L3::Ipv6 },
            l4: [L4::Tcp, L4::Udp, L4::None][usize::from(hdr[1] % 3)],
            gso: [Gso::Tcp, Gso::Udp, Gso::None][usize::from(hdr[2] % 3)],
            l2_len: hdr[3],
            l3_len: u16::from(hdr[4]),
            l4_len: hdr[5],
            gso_size: u16::from_le_bytes([hdr[6], hdr[7]]),
            flags: u16::from_le_bytes([hdr[8], hdr[9]]),
            ..Offload::default()
        }
    };
    let mut h = Harness::new();
    let Ok(mut p) = h.pool().alloc_frame(frame) else {
        return;
    };
    p.set_offload(meta);
    let mut tso = module(&h, "TSO");
    let mut b = Batch::new();
    let _ = b.push(p);
    let _ = h.process(&mut *tso, 0, b);
    let mut segs = h.run_task_batch(&mut *tso).remove(0);
    for _ in 0..4 {
        let more = h.run_task(&mut *tso).remove(0);
        for s in more {
            let mut p = h.packet(&s[..s.len().min(1_900)]);
            if s.len() > 1_900 {
                p = h.pool().alloc_frame(&s).expect("room");
            }
            let _ = segs.push(p);
        }
    }
    let (_, _, dropped) = h.counters();
    let backlog = tso
        .extra_stats()
        .iter()
        .find(|(n, _)| *n == "backlog")
        .map_or(0, |s| s.1);
    if meta.gso != Gso::None {
        assert!(segs.is_empty() || dropped == 0, "segments or a drop");
        assert!(!segs.is_empty() || dropped == 1 || backlog == 1);
    }
    let mut copies = Vec::new();
    for s in segs.iter() {
        let mut v = Vec::new();
        s.copy_frame_to(&mut v);
        if meta.gso == Gso::Tcp && dropped == 0 {
            let lay = TcpLayout::of(&v).expect("a segment TSO made parses");
            assert!(
                nfkit_packet::gso::verify_inner(&v, &lay).is_some(),
                "a segment's checksums verify"
            );
        }
        copies.push(v);
    }
    // LRO over the segments, the frame and the segments again.
    let mut lro = module(&h, "LRO");
    let mut input = Batch::new();
    let mut n = 0;
    for s in segs
        .drain()
        .chain(std::iter::once(h.pool().alloc_frame(frame).expect("room")))
    {
        if input.push(s).is_none() {
            n += 1;
        }
    }
    let before = h.counters().2;
    let out = h.process(&mut *lro, 0, input).remove(0);
    assert!(out.len() <= n);
    assert_eq!(h.counters().2, before, "LRO drops nothing");
}
