//! Arbitrary ring contents from a frontend: walking them must stay
//! inside the shared memory and terminate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfkit_hw::DmaAllocator;
use nfkit_virtio::vhost_user::device::{pop_tx, push_rx, Moved};
use nfkit_virtio::vhost_user::memory::{FrontendMemory, RegionDesc};
use nfkit_virtio::MemfdArena;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

const QSIZE: u16 = 16;

fuzz_target!(|data: &[u8]| {
    let arena = MemfdArena::new("fuzz", 64 * 1024).unwrap();
    let mut ring = arena.allocate(4096, true).unwrap();
    let n = data.len().min(4096);
    ring.slice_mut(0, n).unwrap().copy_from_slice(&data[..n]);
    let base = arena.base_addr();
    let region = RegionDesc { guest_phys_addr: base, memory_size: arena.len() as u64, userspace_addr: base, mmap_offset: 0 };
    let mem = FrontendMemory::map(&[region], vec![arena.file().try_clone().unwrap()]).unwrap();
    let mut q = Queue::new(QSIZE).unwrap();
    let _ = q.try_set_desc_table_address(GuestAddress(base));
    let _ = q.try_set_avail_ring_address(GuestAddress(base + 256));
    let _ = q.try_set_used_ring_address(GuestAddress(base + 2048));
    q.set_ready(true);
    let mut out = [0u8; 2048];
    for _ in 0..2 * QSIZE {
        match pop_tx(&mut q, &mem.mem, 12, &mut out) {
            Moved::Packet(n) => assert!(n <= out.len()),
            Moved::Empty => break,
            Moved::Bad => {}
        }
        let _ = push_rx(&mut q, &mem.mem, 12, &[0x5a; 100]);
    }
});
