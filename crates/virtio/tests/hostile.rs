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
        for _ in 0..2 * QSIZE {
            match q.pop_tx(12, &mut out) {
                Moved::Packet(n) => prop_assert!(n <= out.len()),
                Moved::Empty => break,
                Moved::Bad => {}
            }
        }
        q.publish_used();
        for _ in 0..2 * QSIZE {
            if q.push_rx(12, &[0x5a; 1500]) == Moved::Empty {
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
        let be = VhostUserBackend::listen(BackendConfig { name: "be".into(), path: path.clone(), queue_pairs: 1, mac: [2, 0, 0, 0, 0, 9] }, pool).unwrap();
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
        match q.pop_tx(12, &mut out) {
            Moved::Packet(n) => assert!(n <= out.len()),
            Moved::Empty => break,
            Moved::Bad => bad += 1,
        }
        let _ = q.push_rx(12, &[0x5a; 100]);
    }
    assert!(bad > 0, "the overflowing chain is refused as bad");
}
