//! What a hostile device or VM writes into memory nfkit shares with it:
//! a VirtIO device's used ring (nfkit as the driver), a vhost-user
//! frontend's socket messages and descriptor rings (nfkit as the device).

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nfkit_hw::sim::SimDma;
use nfkit_hw::{DmaAllocator, Mempool};
use nfkit_virtio::vhost_user::device::{DeviceQueue, Moved};
use nfkit_virtio::vhost_user::memory::{FrontendMemory, RegionDesc};
use nfkit_virtio::vhost_user::shared_ring::RingAddrs;
use nfkit_virtio::vhost_user::{BackendConfig, VhostUserBackend};
use nfkit_virtio::{LayoutKind, MemfdArena, Segment, Virtqueue};

/// nfkit's virtqueue (the driver side) against a device that writes any
/// used-ring index and entries: the first byte picks the layout, size,
/// event index and in-order; then each 8-byte op is "make buffers
/// available", "write used.idx", "write a used entry" or "pop used".
/// Popping must return only heads the driver made available, or an error.
pub fn virtio_used_ring(data: &[u8]) {
    let Some((&cfg, ops)) = data.split_first() else {
        return;
    };
    let dma = SimDma::new();
    let kind = if cfg & 1 == 0 {
        LayoutKind::Legacy
    } else {
        LayoutKind::Modern
    };
    let size = 2u16 << ((cfg >> 1) % 4);
    let mut q = Virtqueue::new(&*dma, kind, size, cfg & 0x10 != 0).expect("queue");
    if cfg & 0x20 != 0 {
        assert!(q.set_in_order(cfg & 0x40 != 0));
    }
    let bufs = dma.allocate(4096, true).expect("buffers");
    let used = q.used_addr();
    for op in ops.chunks_exact(8) {
        let arg = u32::from_le_bytes([op[4], op[5], op[6], op[7]]);
        match op[0] % 4 {
            0 => {
                for i in 0..op[1] % 4 {
                    let seg = |j: u8| Segment {
                        addr: bufs.device_addr_at(usize::from(i + j) * 256),
                        len: 256,
                        device_writes: op[2] & 1 != 0,
                    };
                    let chain = [seg(0), seg(1), seg(2)];
                    let n = usize::from(op[3] % 3) + 1;
                    let _ = q.add(&chain[..n]);
                }
                q.publish();
            }
            1 => {
                let _ = dma.write(used + 2, &[op[1], op[2]]);
            }
            2 => {
                let slot = u64::from(op[1] % (size as u8).max(1));
                let _ = dma.write(used + 4 + 8 * slot, &arg.to_le_bytes());
                let _ = dma.write(used + 8 + 8 * slot, &[op[2], op[3], 0, 0]);
            }
            _ => {
                for _ in 0..=size {
                    match q.pop_used() {
                        Ok(Some(u)) => assert!(u.head < size, "head {} of {size}", u.head),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
        assert!(q.in_flight() <= size);
        assert!(q.free_descriptors() <= usize::from(size));
    }
}

fn socket_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("nfkit-fuzz-{}.sock", std::process::id()))
}

fn backend() -> &'static VhostUserBackend {
    static BE: OnceLock<VhostUserBackend> = OnceLock::new();
    BE.get_or_init(|| {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "fuzz", 256, 2048).expect("pool");
        VhostUserBackend::listen(
            BackendConfig {
                name: "fuzz".into(),
                path: socket_path(),
                queue_pairs: 2,
                mac: [2, 0, 0, 0, 0, 1],
            },
            pool,
        )
        .expect("vhost-user backend")
    })
}

/// Bytes from a frontend, straight onto the vhost-user backend's socket:
/// the backend must neither crash nor stop accepting frontends.
pub fn vhost_user_message(data: &[u8]) {
    let be = backend();
    if let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket_path()) {
        let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = s.write_all(data);
    }
    let start = Instant::now();
    while be.connected() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "backend stuck on a closed connection"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Arbitrary split-ring contents from a frontend: walking them must stay
/// inside the shared memory and terminate.
pub fn descriptor_chain(data: &[u8]) {
    const QSIZE: u16 = 16;
    let arena = MemfdArena::new("fuzz", 64 * 1024).expect("arena");
    let mut ring = arena.allocate(4096, true).expect("ring");
    let n = data.len().min(4096);
    ring.slice_mut(0, n)
        .expect("ring bytes")
        .copy_from_slice(&data[..n]);
    let base = arena.base_addr();
    let region = RegionDesc {
        guest_phys_addr: base,
        memory_size: arena.len() as u64,
        userspace_addr: base,
        mmap_offset: 0,
    };
    let file = arena.file().try_clone().expect("memfd");
    let mem = FrontendMemory::map(&[region], vec![file]).expect("map");
    let addrs = RingAddrs {
        desc: base,
        avail: base + 256,
        used: base + 2048,
    };
    let event_idx = data.first().is_some_and(|b| b & 1 != 0);
    let mut q = DeviceQueue::start(Arc::new(mem), addrs, QSIZE, 0, event_idx).expect("queue");
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
}

/// nfkit's TPACKET_V2/V3 rings against a kernel that writes anything:
/// the first byte picks the version; then each op writes bytes anywhere
/// in the rings (slot headers, block descriptors, status words, offsets)
/// or takes received frames / pushes a frame to send. Every frame handed
/// over must be a slice inside the mapping (the borrow checker keeps it
/// there; the walk must not panic or loop).
pub fn afpacket_ring(data: &[u8]) {
    use nfkit_port::afpacket::ring::Rings;
    use nfkit_port::spec::TpacketVersion;
    let Some((&cfg, ops)) = data.split_first() else {
        return;
    };
    let version = if cfg & 1 == 0 {
        TpacketVersion::V2
    } else {
        TpacketVersion::V3 { block_ms: 1 }
    };
    let Ok(mut rings) = Rings::anonymous(version, 32, 16) else {
        return;
    };
    let len = rings.mapped_len();
    let mut rest = ops;
    while let Some((&op, r)) = rest.split_first() {
        rest = r;
        match op % 4 {
            0 | 1 => {
                // [offset: 3 bytes][n][n bytes]
                if rest.len() < 4 {
                    break;
                }
                let off =
                    usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
                let n = usize::from(rest[3]).min(rest.len() - 4);
                let _ = rings.kernel_write(off % len, &rest[4..4 + n]);
                rest = &rest[4 + n..];
            }
            2 => {
                for _ in 0..64 {
                    let mut got = None;
                    if !rings.rx_next(|f| got = Some((f.data.len(), f.wire_len))) {
                        break;
                    }
                    // An empty V3 block is given back without a frame.
                    if let Some((n, _wire)) = got {
                        assert!(n <= len);
                    }
                }
            }
            _ => {
                let _ = rings.tx_push(&[0x5a; 60]);
                let _ = rings.tx_waiting();
            }
        }
    }
}
