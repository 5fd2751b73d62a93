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
                host_tso: false,
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
        match q.pop_tx(12, false, &mut out, &mut Vec::new(), 65_600) {
            Moved::Packet(n) => assert!(n <= out.len()),
            Moved::Empty => break,
            Moved::Bad(_) => {}
        }
        let _ = q.push_rx(12, &[0x5a; 100], true);
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
                let _ = rings.tx_push(&[0x5a; 60], None);
                let _ = rings.tx_waiting();
            }
        }
    }
}

/// nfkit's AF_XDP data path (one socket's UMEM and fill, completion, RX
/// and TX rings, [`nfkit_port::afxdp::queue::SocketRings`], over private
/// memory) against a kernel that writes anything into them: RX
/// descriptors and completion entries naming any address and length,
/// producer and consumer indices that jump, wakeup flags; mixed with an
/// honest kernel's steps (fill ring to RX ring, TX ring to completion
/// ring) so that the rings also reach deep legitimate states. Every bad
/// entry must be a counted error: no read outside the UMEM, no frame
/// with two holders, every pool buffer back at the end.
///
/// The first byte picks the ring size (4, 8 or 16 slots) and checksum
/// completion; each op is one byte, then its arguments:
/// `0` RX descriptor `[slot][addr: 4][len: 2]` (op bit 7: address << 24),
/// `1` completion entry `[slot][addr: 4]`, `2` a ring's producer
/// `[ring][u32]`, `3` a ring's consumer `[ring][u32]`, `4` receive,
/// `5` send `[count][len]`, `6` honest kernel `[count]`, `7` flags `[ring][u32]`.
pub fn afxdp_ring(data: &[u8]) {
    use nfkit_port::afxdp::queue::{Desc, SocketRings, FRAME};
    use nfkit_port::open::software_pool;
    use nfkit_port::Batch;
    let Some((&cfg, mut ops)) = data.split_first() else {
        return;
    };
    let ring = 4u32 << (cfg % 3);
    let complete = cfg & 8 != 0;
    let pool = software_pool("fuzz", 96).expect("pool");
    let mut cache = pool.cache(32);
    let mut q = SocketRings::anonymous(ring).expect("rings");
    let mut batch = Batch::new();
    let mut fill_data = 0u8;
    let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    while let Some((&op, rest)) = ops.split_first() {
        let need = match op % 8 {
            0 => 7,
            1 | 2 | 3 | 7 => 5,
            5 => 2,
            6 => 1,
            _ => 0,
        };
        if rest.len() < need {
            break;
        }
        let (a, rest) = rest.split_at(need);
        ops = rest;
        let k = q.kernel();
        match op % 8 {
            0 => {
                let mut addr = u64::from(u32_at(&a[1..]));
                if op & 0x80 != 0 {
                    addr <<= 24;
                }
                let len = u32::from(u16::from_le_bytes([a[5], a[6]]));
                let d = Desc {
                    addr,
                    len,
                    options: 0,
                };
                assert!(k.rx.kernel_write_slot(u32::from(a[0]), d));
            }
            1 => assert!(k
                .comp
                .kernel_write_slot(u32::from(a[0]), u64::from(u32_at(&a[1..])))),
            2 | 3 | 7 => {
                let v = u32_at(&a[1..]);
                let set = |r: &nfkit_port::afxdp::ring::Ring<u64>| match op % 8 {
                    2 => r.kernel_set_producer(v),
                    3 => r.kernel_set_consumer(v),
                    _ => r.kernel_set_flags(v),
                };
                let setd = |r: &nfkit_port::afxdp::ring::Ring<Desc>| match op % 8 {
                    2 => r.kernel_set_producer(v),
                    3 => r.kernel_set_consumer(v),
                    _ => r.kernel_set_flags(v),
                };
                assert!(match a[0] % 4 {
                    0 => set(&k.fill),
                    1 => set(&k.comp),
                    2 => setd(&k.rx),
                    _ => setd(&k.tx),
                });
            }
            4 => {
                let before = batch.len();
                let (n, _) = q.rx(&mut cache, &mut batch, complete);
                assert_eq!(batch.len(), before + n);
                // Forward half, drop the rest: buffers must come back.
                if batch.len() > 16 {
                    batch.clear();
                }
            }
            5 => {
                for _ in 0..a[0] % 8 {
                    let Some(mut b) = cache.alloc() else { break };
                    let len = 14 + usize::from(a[1]);
                    if b.copy_from(&vec![fill_data; len]).is_ok() && batch.room() > 0 {
                        batch.push(b);
                    } else {
                        cache.free(b);
                    }
                    fill_data = fill_data.wrapping_add(1);
                }
                let before = batch.len();
                let n = q.tx(&mut batch);
                assert_eq!(batch.len(), before - n);
            }
            _ => {
                // An honest kernel: take fill entries and return them as
                // received frames; take sent frames and complete them.
                for _ in 0..a[0] % 16 {
                    let (fp, fc) = k.fill.kernel_indices();
                    let (rp, rc) = k.rx.kernel_indices();
                    if fp != fc && rp.wrapping_sub(rc) < ring {
                        let addr = k.fill.kernel_read_slot(fc).unwrap_or(0);
                        let d = Desc {
                            addr: addr + 256,
                            len: 60,
                            options: 0,
                        };
                        k.rx.kernel_write_slot(rp, d);
                        k.rx.kernel_set_producer(rp.wrapping_add(1));
                        k.fill.kernel_set_consumer(fc.wrapping_add(1));
                    }
                    let (tp, tc) = k.tx.kernel_indices();
                    let (cp, cc) = k.comp.kernel_indices();
                    if tp != tc && cp.wrapping_sub(cc) < ring {
                        let d = k.tx.kernel_read_slot(tc).unwrap_or(Desc {
                            addr: 0,
                            len: 0,
                            options: 0,
                        });
                        assert!(d.len as usize <= FRAME, "a TX descriptor past its frame");
                        k.comp.kernel_write_slot(cp, d.addr);
                        k.comp.kernel_set_producer(cp.wrapping_add(1));
                        k.tx.kernel_set_consumer(tc.wrapping_add(1));
                    }
                }
            }
        }
        assert!(q.frames_accounted(), "a frame with two holders, or none");
    }
    drop(batch);
    drop(cache);
    assert_eq!(pool.free_count(), pool.capacity(), "pool buffers lost");
}
