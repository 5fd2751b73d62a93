//! The decapsulators (VXLANDecap, GeneveDecap, GenericDecap, VLANPop,
//! MPLSPop) and the checksum modules (IPChecksum, L4Checksum, set and
//! verify, inner headers of tunnels included) under arbitrary frames,
//! and offload metadata from an arbitrary `virtio_net_hdr`: no panic,
//! every frame leaves by a gate or is counted as dropped, a checksum
//! just set verifies, and metadata that is accepted fits its frame.

use nfkit_packet::offload_meta;
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::modules::{BuildEnv, Registry};

const DECAPS: &[(&str, &[(&str, u64)])] = &[
    ("VXLANDecap", &[]),
    ("GeneveDecap", &[]),
    ("GenericDecap", &[("bytes", 4)]),
    ("VLANPop", &[]),
    ("MPLSPop", &[]),
];

fn module(
    h: &Harness,
    class: &str,
    args: &[(&str, u64)],
) -> Box<dyn nfkit_pipeline::module::Module> {
    let env = BuildEnv {
        ports: Default::default(),
        pool: h.pool().clone(),
    };
    let pairs: Vec<(&str, Value)> = args.iter().map(|&(k, v)| (k, Value::Int(v))).collect();
    Registry::default()
        .build(class, &mut Args::from_pairs(&pairs), &env)
        .expect("valid arguments")
}

/// First byte: which decapsulator; the next 10: a `virtio_net_hdr`; the
/// rest: the frame (at most a buffer's worth).
pub fn tunnels(data: &[u8]) {
    let (Some(&sel), Some(hdr)) = (data.first(), data.get(1..11)) else {
        return;
    };
    let frame = &data[11..data.len().min(11 + 1900)];
    let mut h = Harness::new();
    // every decapsulator: each frame out of a gate or counted
    let (class, args) = DECAPS[usize::from(sel) % DECAPS.len()];
    let mut m = module(&h, class, args);
    let out = h.run(&mut *m, 0, &[frame.to_vec()]);
    let (_, _, dropped) = h.counters();
    let left: usize = out.iter().map(Vec::len).sum();
    assert_eq!(left as u64 + dropped, 1, "{class}: a frame out or counted");
    // set, then verify: a checksum just set verifies
    for class in ["IPChecksum", "L4Checksum"] {
        let mut h = Harness::new();
        let set = h.run(&mut *module(&h, class, &[]), 0, &[frame.to_vec()]);
        let verified = h.run(&mut *module(&h, class, &[("verify", 1)]), 0, &set[0]);
        assert!(verified[1].is_empty(), "{class}: set, then found bad");
        let _ = h.run(
            &mut *module(&h, class, &[("verify", 1)]),
            0,
            &[frame.to_vec()],
        );
    }
    // offload metadata from an arbitrary header: accepted only if it fits
    let _ = offload_meta::describe(frame);
    if let Ok(Some(o)) = offload_meta::from_virtio_net_hdr(hdr, frame) {
        assert_eq!(o.check(frame.len()), Ok(()));
        assert_eq!(
            offload_meta::from_virtio_net_hdr(&offload_meta::to_virtio_net_hdr(&o), frame),
            Ok(Some(o))
        );
        let mut p = h.packet(frame);
        p.set_offload(o);
        let _ = offload_meta::finish_in_software(&mut p);
        assert!(p.offload().is_none());
    }
}
