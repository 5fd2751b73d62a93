//! Arbitrary ring contents from a frontend: walking them must stay
//! inside the shared memory and terminate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfkit_hw::DmaAllocator;
use nfkit_virtio::vhost_user::device::{DeviceQueue, Moved};
use nfkit_virtio::vhost_user::memory::{FrontendMemory, RegionDesc};
use nfkit_virtio::vhost_user::shared_ring::RingAddrs;
use nfkit_virtio::MemfdArena;
use std::sync::Arc;

const QSIZE: u16 = 16;

fuzz_target!(|data: &[u8]| {
    let arena = MemfdArena::new("fuzz", 64 * 1024).unwrap();
    let mut ring = arena.allocate(4096, true).unwrap();
    let n = data.len().min(4096);
    ring.slice_mut(0, n).unwrap().copy_from_slice(&data[..n]);
    let base = arena.base_addr();
    let region = RegionDesc { guest_phys_addr: base, memory_size: arena.len() as u64, userspace_addr: base, mmap_offset: 0 };
    let mem = FrontendMemory::map(&[region], vec![arena.file().try_clone().unwrap()]).unwrap();
    let addrs = RingAddrs { desc: base, avail: base + 256, used: base + 2048 };
    let event_idx = data.first().is_some_and(|b| b & 1 != 0);
    let mut q = DeviceQueue::start(Arc::new(mem), addrs, QSIZE, 0, event_idx).unwrap();
    let mut out = [0u8; 2048];
    for _ in 0..2 * QSIZE {
        match q.pop_tx(12, &mut out) {
            Moved::Packet(n) => assert!(n <= out.len()),
            Moved::Empty => break,
            Moved::Bad => {}
        }
        let _ = q.push_rx(12, &[0x5a; 100]);
        let _ = q.publish_used();
    }
});
