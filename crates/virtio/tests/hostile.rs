//! Property tests (stable, part of `cargo test`) of what a hostile
//! vhost-user frontend controls: the descriptor rings it shares and the
//! bytes it sends on the socket. The same properties are fuzzed by the
//! targets in `fuzz/` (nightly).

use nfkit_hw::sim::SimDma;
use nfkit_hw::{DmaAllocator, Mempool};
use nfkit_virtio::vhost_user::device::{DeviceQueue, Moved};
use nfkit_virtio::vhost_user::memory::{FrontendMemory, RegionDesc};
use nfkit_virtio::vhost_user::shared_ring::RingAddrs;
use nfkit_virtio::vhost_user::{self, BackendConfig, FrontendConfig, VhostUserBackend};
use nfkit_virtio::MemfdArena;
use proptest::prelude::*;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const QSIZE: u16 = 16;

/// One descriptor as the frontend wrote it: an offset into the shared
/// memory (possibly past its end), or with `far`, an arbitrary address.
type RawDesc = (u64, bool, u32, u16, u16);

/// Shared memory holding rings whose every byte the "frontend" chose.
fn hostile_queue(desc: &[RawDesc], avail: &[u16], avail_idx: u16) -> (MemfdArena, DeviceQueue) {
    let arena = MemfdArena::new("hostile", 64 * 1024).unwrap();
    let ring = arena.allocate(4096, true).unwrap();
    for (i, &(off, far, len, flags, next)) in desc.iter().enumerate().take(QSIZE as usize) {
        let addr = if far {
            off.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        } else {
            arena.base_addr().wrapping_add(off)
        };
        ring.write_u64(i * 16, addr);
        ring.write_u32(i * 16 + 8, len);
        ring.write_u32(i * 16 + 12, flags as u32 | (next as u32) << 16);
    }
    let avail_off = 16 * QSIZE as usize;
    ring.write_u32(avail_off, (avail_idx as u32) << 16);
    for (i, pair) in avail.chunks(2).enumerate().take(QSIZE as usize / 2) {
        let hi = pair.get(1).copied().unwrap_or(0) as u32;
        ring.write_u32(avail_off + 4 + 4 * i, pair[0] as u32 | hi << 16);
    }
    let q = device_queue(&arena, ring.device_addr());
    std::mem::forget(ring); // the arena owns the memory
    (arena, q)
}

/// The device side of a queue whose rings lie at `base` in the arena
/// (descriptors, available ring at +256, used ring at +2048), as the
/// fuzz target `descriptor_chain` lays them out.
fn device_queue(arena: &MemfdArena, base: u64) -> DeviceQueue {
    let start = arena.base_addr();
    let region = RegionDesc {
        guest_phys_addr: start,
        memory_size: arena.len() as u64,
        userspace_addr: start,
        mmap_offset: 0,
    };
    let mem = FrontendMemory::map(&[region], vec![arena.file().try_clone().unwrap()]).unwrap();
    let addrs = RingAddrs {
        desc: base,
        avail: base + 16 * QSIZE as u64,
        used: base + 2048,
    };
    DeviceQueue::start(Arc::new(mem), addrs, QSIZE, 0, false).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the rings say (indices out of range, loops, lengths past
    /// the memory, addresses anywhere), walking them neither panics nor
    /// hangs, and never reports more bytes than it had room for.
    #[test]
    fn walking_hostile_descriptor_chains_is_bounded(
        desc in proptest::collection::vec((0u64..80 * 1024, any::<bool>(), any::<u32>(), 0u16..8, 0u16..40), 16),
        avail in proptest::collection::vec(0u16..40, 16),
        avail_idx in any::<u16>(),
    ) {
        let (_arena, mut q) = hostile_queue(&desc, &avail, avail_idx);
        let mut out = [0u8; 2048];
        let mut spill = Vec::new();
        for _ in 0..2 * QSIZE {
            match q.pop_tx(12, false, &mut out, &mut spill, 65_600) {
                Moved::Packet(n) => prop_assert!(n <= out.len() || spill.len() == n),
                Moved::Empty => break,
                Moved::Bad(_) => {}
            }
        }
        q.publish_used();
        for _ in 0..2 * QSIZE {
            if q.push_rx(12, &[0x5a; 1500], true) == Moved::Empty {
                break;
            }
        }
        q.publish_used();
        // An index more than a queue ahead stops the queue.
        let jumped = avail_idx > QSIZE;
        prop_assert_eq!(q.fault().is_some(), jumped);
    }
}

fn socket(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("nfkit-hostile-{tag}-{}.sock", std::process::id()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Arbitrary bytes on the socket (random, or a valid header with a
    /// random body) never take the backend down: a proper frontend can
    /// connect afterwards.
    #[test]
    fn arbitrary_messages_do_not_break_the_backend(
        code in 0u32..50,
        flags in prop_oneof![Just(1u32), any::<u32>()],
        body in proptest::collection::vec(any::<u8>(), 0..300),
        claim in prop_oneof![Just(None), (0u32..0x2000).prop_map(Some)],
    ) {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "be", 256, 2048).unwrap();
        let path = socket("msg");
        let be = VhostUserBackend::listen(BackendConfig { name: "be".into(), path: path.clone(), queue_pairs: 1, mac: [2, 0, 0, 0, 0, 9], host_tso: false }, pool).unwrap();
        {
            let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
            let mut msg = Vec::new();
            msg.extend_from_slice(&code.to_le_bytes());
            msg.extend_from_slice(&flags.to_le_bytes());
            msg.extend_from_slice(&claim.unwrap_or(body.len() as u32).to_le_bytes());
            msg.extend_from_slice(&body);
            let _ = s.write_all(&msg);
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = Instant::now();
        while be.connected() {
            prop_assert!(start.elapsed() < Duration::from_secs(5), "backend stuck on a dead frontend");
            std::thread::sleep(Duration::from_millis(2));
        }
        let fe = vhost_user::connect(&path, &FrontendConfig { pool_size: 256, ..FrontendConfig::default() });
        prop_assert!(fe.is_ok(), "a good frontend was refused: {:?}", fe.err());
    }
}

/// Inputs the fuzz targets found crashes with, replayed as the target
/// does (`fuzz/fuzz_targets/descriptor_chain.rs`): the ring memory holds
/// the input's bytes.
#[test]
fn fuzz_regressions_descriptor_chain() {
    // A descriptor address near u64::MAX: skipping the net header
    // overflowed the address (a panic in debug builds, a wrapped address
    // in release builds).
    let input = include_bytes!("fuzz_regressions/descriptor_chain_addr_overflow.bin");
    let arena = MemfdArena::new("fuzz-regression", 64 * 1024).unwrap();
    let mut ring = arena.allocate(4096, true).unwrap();
    ring.slice_mut(0, input.len())
        .unwrap()
        .copy_from_slice(input);
    let mut q = device_queue(&arena, ring.device_addr());
    let mut out = [0u8; 2048];
    let mut bad = 0;
    for _ in 0..2 * QSIZE {
        match q.pop_tx(12, false, &mut out, &mut Vec::new(), 65_600) {
            Moved::Packet(n) => assert!(n <= out.len()),
            Moved::Empty => break,
            Moved::Bad(_) => bad += 1,
        }
        let _ = q.push_rx(12, &[0x5a; 100], true);
    }
    assert!(bad > 0, "the overflowing chain is refused as bad");
}

/// Chains that lie are dropped with their reason, never read past: a
/// loop, a buffer past the shared memory, a frame past the limit; an
/// honest jumbo chain (header in a descriptor of its own) is read whole,
/// and a jumbo frame pushed into small receive buffers with MRG_RXBUF
/// spans as many as it needs, `num_buffers` saying how many.
#[test]
fn lying_chains_are_dropped_with_their_reason_and_jumbo_chains_carried() {
    use nfkit_virtio::vnet::DropReason;
    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    let pop = |desc: &[RawDesc], max: usize| {
        let (_arena, mut q) = hostile_queue(desc, &[0], 1);
        let mut out = [0u8; 2048];
        let mut spill = Vec::new();
        let m = q.pop_tx(12, true, &mut out, &mut spill, max);
        (m, spill.len())
    };
    let looped = [(8192, false, 100, NEXT, 1), (8192, false, 100, NEXT, 0)];
    assert_eq!(pop(&looped, 65_600).0, Moved::Bad(DropReason::Loop));
    let past = [(60 * 1024, false, 8192, 0, 0)];
    assert_eq!(pop(&past, 65_600).0, Moved::Bad(DropReason::Outside));
    let long = [(8192, false, 8000, NEXT, 1), (8192, false, 8000, 0, 0)];
    assert_eq!(pop(&long, 9018).0, Moved::Bad(DropReason::TooLong));
    let short = [(8192, false, 6, 0, 0)];
    assert_eq!(pop(&short, 9018).0, Moved::Bad(DropReason::ShortHeader));
    let written = [(8192, false, 100, WRITE, 0)];
    assert_eq!(pop(&written, 9018).0, Moved::Bad(DropReason::Direction));
    let jumbo = [(8192, false, 12, NEXT, 1), (12288, false, 9000, 0, 0)];
    // Header and packet, kept together: 12 + 9000 bytes.
    assert_eq!(pop(&jumbo, 9030), (Moved::Packet(9012), 9012));

    // Eight posted receive buffers of 1536 bytes: a 9000-byte frame and
    // its 12-byte header take six.
    let bufs: Vec<RawDesc> = (0..8)
        .map(|i| (8192 + 2048 * i, false, 1536, WRITE, 0))
        .collect();
    let (arena, mut q) = hostile_queue(&bufs, &[0, 1, 2, 3, 4, 5, 6, 7], 8);
    let frame: Vec<u8> = (0..9000).map(|i| (i * 7) as u8).collect();
    assert_eq!(q.push_rx(12, &frame, true), Moved::Packet(9000));
    q.publish_used();
    let start = arena.base_addr();
    let region = RegionDesc {
        guest_phys_addr: start,
        memory_size: arena.len() as u64,
        userspace_addr: start,
        mmap_offset: 0,
    };
    let mem = FrontendMemory::map(&[region], vec![arena.file().try_clone().unwrap()]).unwrap();
    let mut hint = 0;
    let mut hdr = [0u8; 12];
    mem.read(&mut hint, start + 8192, &mut hdr).unwrap();
    assert_eq!(u16::from_le_bytes([hdr[10], hdr[11]]), 6, "num_buffers");
    let mut got = Vec::new();
    for i in 0..6u64 {
        let mut b = vec![0u8; 1536];
        mem.read(&mut hint, start + 8192 + 2048 * i, &mut b)
            .unwrap();
        got.extend_from_slice(if i == 0 { &b[12..] } else { &b[..] });
    }
    assert_eq!(&got[..9000], &frame[..]);
    // Without MRG_RXBUF it does not fit one buffer: dropped, not cut.
    assert_eq!(q.push_rx(12, &frame, false), Moved::Bad(DropReason::NoRoom));
    // More than the ring's posted buffers can ever hold: dropped.
    let huge = vec![0u8; 30_000];
    assert!(matches!(
        q.push_rx(12, &huge, true),
        Moved::Empty | Moved::Bad(DropReason::NoRoom)
    ));
}
