use super::*;
use crate::sim::SimDma;
use std::sync::Arc;

#[test]
fn buffers_return_to_their_pool() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "t", 64, 2048).unwrap();
    let mut b = pool.alloc().unwrap();
    b.copy_from(&[1, 2, 3, 4]).unwrap();
    assert_eq!(b.data(), &[1, 2, 3, 4]);
    b.prepend(2).unwrap().copy_from_slice(&[9, 9]);
    assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4]);
    b.adj(3).unwrap();
    assert_eq!(b.data(), &[2, 3, 4]);
    assert_eq!(b.device_addr() - b.rx_device_addr(), 1);
    assert_eq!(pool.free_count(), 63);
    drop(b);
    assert_eq!(pool.free_count(), 64);
    let mut cache = pool.cache(32);
    let bufs: Vec<_> = (0..64).map(|_| cache.alloc().unwrap()).collect();
    assert!(cache.alloc().is_none());
    for b in bufs {
        cache.free(b);
    }
    drop(cache);
    assert_eq!(pool.free_count(), 64);
}

#[test]
fn resizing_past_the_buffer_is_an_error() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "t", 4, 2048).unwrap();
    let mut b = pool.alloc().unwrap();
    assert!(b.set_len(2048 - HEADROOM).is_ok());
    assert!(b.set_len(2048 - HEADROOM + 1).is_err());
    assert!(b.prepend(HEADROOM + 1).is_err());
    assert!(Mempool::new(&*dma, "bad", 4, 1000).is_err());
    // The bytes in front: at most the headroom, the data start unmoved.
    b.copy_from(&[1, 2, 3]).unwrap();
    b.front_mut(2).unwrap().copy_from_slice(&[8, 9]);
    assert_eq!(b.front(2), Some(&[8, 9][..]));
    assert_eq!(b.with_front_mut(2).unwrap(), &[8, 9, 1, 2, 3]);
    assert_eq!(b.data(), &[1, 2, 3]);
    assert!(b.front(HEADROOM + 1).is_none() && b.with_front_mut(HEADROOM + 1).is_none());
    assert_eq!(b.front(HEADROOM).map(<[u8]>::len), Some(HEADROOM));
}

#[test]
fn rx_buffers_lend_by_id_and_go_home() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "rx", 512, 2048).unwrap();
    let mut ring = RxBuffers::new(&pool, 128).unwrap();
    let before = ring.rx_device_addr(5);
    assert_eq!(ring.rx_device_addr(5 + 128), before, "indices wrap");
    let (pkt, fresh) = ring.take(5, 60).unwrap();
    assert_eq!(pkt.len(), 60);
    assert_eq!(pkt.rx_device_addr(), before);
    assert_eq!(ring.rx_device_addr(5), fresh);
    assert_ne!(fresh, before);
    assert!(RxBuffers::new(&pool, 1000).is_none(), "not a power of two");
    drop(pkt);
    drop(ring);
    assert_eq!(pool.free_count(), 512);
    assert_eq!(Arc::strong_count(&pool.inner), 1, "no handle leaked");
}

#[test]
fn bulk_free_sends_foreign_buffers_home_and_keeps_own() {
    let dma = SimDma::new();
    let mine = Mempool::new(&*dma, "mine", 64, 2048).unwrap();
    let theirs = Mempool::new(&*dma, "theirs", 64, 2048).unwrap();
    let mut cache = mine.cache(32);
    let bufs: Vec<PktBuf> = (0..40)
        .map(|i| {
            if i % 3 == 0 {
                mine.alloc()
            } else {
                theirs.alloc()
            }
            .unwrap()
        })
        .collect();
    let own = bufs.iter().filter(|b| b.pool().same(&mine)).count();
    cache.free_bulk(bufs.into_iter());
    assert_eq!(theirs.free_count(), 64, "foreign buffers went home");
    assert_eq!(cache.cached(), own);
    let again: Vec<PktBuf> = (0..own).map(|_| cache.alloc().unwrap()).collect();
    drop(again);
    drop(cache);
    assert_eq!(mine.free_count(), 64);
    assert_eq!(Arc::strong_count(&mine.inner), 1, "no handle leaked");
    assert_eq!(Arc::strong_count(&theirs.inner), 1, "no handle leaked");
}

#[test]
fn a_cleared_or_dropped_batch_sends_every_buffer_home() {
    let dma = SimDma::new();
    let a = Mempool::new(&*dma, "a", 200, 2048).unwrap();
    let b = Mempool::new(&*dma, "b", 200, 2048).unwrap();
    let fill = |batch: &mut Batch| {
        // Runs of one pool, alternating, and runs longer than a chunk.
        for i in 0..MAX_BATCH {
            let pool = if (i / 3) % 2 == 0 || i > 40 { &a } else { &b };
            assert!(batch.push(pool.alloc().unwrap()).is_none());
        }
    };
    let mut batch = Batch::new();
    fill(&mut batch);
    assert!(a.free_count() < 200 && b.free_count() < 200);
    batch.clear();
    assert!(batch.is_empty());
    assert_eq!((a.free_count(), b.free_count()), (200, 200));
    fill(&mut batch);
    drop(batch);
    assert_eq!((a.free_count(), b.free_count()), (200, 200));
}

#[test]
fn buffers_keep_their_pool_alive_without_counting() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "gone", 8, 2048).unwrap();
    let weak = Arc::downgrade(&pool.inner);
    let mut a = pool.alloc().unwrap();
    let b = pool.alloc().unwrap();
    assert_eq!(
        Arc::strong_count(&pool.inner),
        2,
        "one keep-alive for all the buffers out"
    );
    drop(pool);
    a.copy_from(&[7; 60]).unwrap();
    assert_eq!(a.data(), &[7; 60][..], "the memory is still there");
    drop(a);
    assert!(weak.upgrade().is_some(), "one buffer is still out");
    drop(b);
    assert!(
        weak.upgrade().is_none(),
        "the last buffer home frees the pool"
    );
}

#[test]
fn tx_buffers_free_own_to_the_cache_and_foreign_home() {
    let dma = SimDma::new();
    let mine = Mempool::new(&*dma, "mine", 64, 2048).unwrap();
    let theirs = Mempool::new(&*dma, "theirs", 64, 2048).unwrap();
    let mut tx = TxBuffers::new(&mine, 16).unwrap();
    assert!(TxBuffers::new(&mine, 12).is_none());
    let mut batch = Batch::new();
    let fill = |batch: &mut Batch, n: usize, from: u16| {
        for k in 0..n as u16 {
            let pool = if (from + k).is_multiple_of(4) {
                &mine
            } else {
                &theirs
            };
            let mut p = pool.alloc().unwrap();
            p.copy_from(&(from + k).to_le_bytes()).unwrap();
            batch.push(p);
        }
    };
    // Around the ring five times: slots wrap.
    let mut next_seq = 0u16;
    for round in 0..6 {
        fill(&mut batch, 10, next_seq + 3);
        fill(&mut batch, 3, next_seq);
        assert_eq!(tx.hold_front(&mut batch, 13), 13, "round {round}");
        assert!(batch.is_empty());
        assert_eq!(tx.held(), 13);
        tx.free_oldest(5);
        tx.free_oldest(8);
        assert_eq!(tx.held(), 0);
        next_seq += 13;
    }
    // Room is bounded; what does not fit stays in the batch, in order.
    fill(&mut batch, 20, 0);
    assert_eq!(tx.hold_front(&mut batch, 20), 16);
    assert_eq!(batch.len(), 4);
    assert_eq!(batch[0].data(), &16u16.to_le_bytes());
    drop(batch);
    tx.free_oldest(3);
    drop(tx);
    assert_eq!(theirs.free_count(), 64, "foreign buffers went home");
    assert_eq!(mine.free_count(), 64);
    assert_eq!(Arc::strong_count(&mine.inner), 1, "no handle leaked");
    assert_eq!(Arc::strong_count(&theirs.inner), 1, "no handle leaked");
}

#[test]
fn rx_buffers_take_in_bulk() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "rx", 160, 2048).unwrap();
    let mut ring = RxBuffers::new(&pool, 128).unwrap();
    let lent: Vec<u64> = (120..130).map(|i| ring.rx_device_addr(i)).collect();
    let mut batch = Batch::new();
    let mut fresh = [0u64; MAX_BATCH];
    // Ten descriptors from 120, wrapping at 128; one length too long.
    let lens: Vec<u16> = (0..10).map(|k| 60 + k).chain([5000]).collect();
    let n = ring.take_bulk(120, &lens[..10], &mut batch, &mut fresh);
    assert_eq!(n, 10);
    for (k, pkt) in batch.iter().enumerate() {
        assert_eq!(pkt.len(), 60 + k);
        assert_eq!(pkt.rx_device_addr(), lent[k]);
        assert_eq!(ring.rx_device_addr(120 + k), fresh[k]);
    }
    let n = ring.take_bulk(130, &lens[10..], &mut batch, &mut fresh);
    assert_eq!(
        (n, batch[10].len()),
        (1, 2048 - HEADROOM),
        "clamped to the data room"
    );
    // The pool runs dry: 160 - 128 - 11 = 21 more at most.
    let many = [60u16; MAX_BATCH];
    let mut more = Batch::new();
    assert_eq!(ring.take_bulk(0, &many, &mut more, &mut fresh), 21);
    assert_eq!(ring.take_bulk(0, &many, &mut Batch::new(), &mut fresh), 0);
    drop((batch, more, ring));
    assert_eq!(pool.free_count(), 160);
    assert_eq!(Arc::strong_count(&pool.inner), 1, "no handle leaked");
}

#[test]
fn desc_ring_and_slots_check_their_shape_once() {
    use crate::dma::{DescRing, DmaSlots};
    use crate::DmaAllocator;
    let dma = SimDma::new();
    let ring = DescRing::new(dma.allocate(4096, true).unwrap(), 256).unwrap();
    ring.write_q1(3, 7);
    assert_eq!(ring.read_q1(3 + 256), 7, "indices wrap");
    assert_eq!(ring.desc(259).read_q1(), 7);
    assert!(DescRing::new(dma.allocate(4096, true).unwrap(), 512).is_err());
    assert!(DescRing::new(dma.allocate(4096, true).unwrap(), 100).is_err());
    let mut slots = DmaSlots::<2048>::new(dma.allocate(8192, false).unwrap(), 4).unwrap();
    slots.slot_mut(1)[0] = 9;
    assert_eq!(slots.slot_mut(5)[0], 9);
    assert_eq!(slots.device_addr(1) - slots.device_addr(0), 2048);
    assert!(DmaSlots::<2048>::new(dma.allocate(4096, false).unwrap(), 4).is_err());
}

/// A receive ring and a transmit ring of 512 on one pool of 1,536
/// buffers, forwarding: everything received is sent, and everything sent
/// is freed into the transmit ring's cache. Caches sized by the ring kept
/// up to 1,023 sent buffers there, and receiving stopped for good once
/// the pool's other 1,024 were in that cache; caches of `RING_CACHE` keep
/// at most `2 * RING_CACHE`, so the ring is always refilled.
#[test]
fn forwarding_through_two_rings_never_strands_the_pool_in_a_cache() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "fwd", 1536, 2048).unwrap();
    assert!(pool.capacity() >= min_pool_for_rx_ring(512));
    let mut rx = RxBuffers::new(&pool, 512).unwrap();
    let mut tx = TxBuffers::new(&pool, 512).unwrap();
    let mut batch = Batch::new();
    let lens = [60u16; MAX_BATCH];
    let mut fresh = [0u64; MAX_BATCH];
    let mut next = 0;
    // The old caches stranded the pool after about 16 rounds; miri runs
    // about a million times slower, so it checks fewer (100 s -> seconds).
    let rounds = if cfg!(miri) { 64 } else { 2000 };
    for round in 0..rounds {
        let n = rx.take_bulk(next, &lens, &mut batch, &mut fresh);
        assert_eq!(
            n, MAX_BATCH,
            "round {round}: the receive ring got no fresh buffers"
        );
        next += n;
        tx.hold_front(&mut batch, n);
        // The device sends a whole ring at a time.
        if tx.held() > 512 - MAX_BATCH {
            tx.free_oldest(tx.held());
        }
    }
    drop((rx, tx));
    assert_eq!(pool.free_count(), 1536);
}

#[test]
fn offload_state_lives_and_dies_with_its_packet() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "t", 1, 2048).unwrap();
    let mut b = pool.alloc().unwrap();
    assert!(b.offload().is_none(), "a new buffer has none");
    let o = Offload {
        flags: offload::L4_CSUM,
        l4: offload::L4::Tcp,
        ..Offload::default()
    };
    b.set_offload(o);
    assert_eq!(b.id(), 0, "the flag does not show in the id");
    assert_eq!(b.offload(), Some(&o));
    b.offload_mut().unwrap().gso_size = 1448;
    assert_eq!(b.take_offload().map(|o| o.gso_size), Some(1448));
    assert!(b.offload().is_none());
    b.set_offload(o);
    // the flagged id goes home clean: the same entry comes back without state
    drop(b);
    assert_eq!(pool.free_count(), 1);
    let mut cache = pool.cache(32);
    let mut b = cache.alloc().unwrap();
    assert!(b.offload().is_none());
    b.set_offload(o);
    cache.free(b);
    let mut b = cache.alloc().unwrap();
    assert!(b.offload().is_none());
    assert_eq!(b.id(), 0);
    // Headers put in front or taken off: the state follows its headers,
    // and goes when they go.
    b.set_len(100).unwrap();
    b.set_offload(Offload { l2_len: 14, ..o });
    b.prepend(4).unwrap();
    assert_eq!(b.offload().map(|o| o.l2_len), Some(18));
    b.adj(4).unwrap();
    assert_eq!(b.offload().map(|o| o.l2_len), Some(14));
    b.adj(20).unwrap();
    assert!(b.offload().is_none());
}

/// `Batch::any_offload` sees state on any packet of a batch, and none
/// once it is taken away (before any packet of the process had state it
/// answers from one flag; after, from the handles).
#[test]
fn a_batch_tells_whether_any_packet_has_offload_state() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "t", 8, 2048).unwrap();
    let mut batch = Batch::new();
    assert!(!batch.any_offload(), "empty");
    for _ in 0..8 {
        assert!(batch.push(pool.alloc().unwrap()).is_none());
    }
    assert!(!batch.any_offload(), "no packet has state");
    let o = Offload {
        flags: offload::IP_CSUM,
        l3: offload::L3::Ipv4,
        ..Offload::default()
    };
    batch[5].set_offload(o);
    assert!(batch.any_offload(), "the sixth has");
    assert_eq!(batch[5].take_offload(), Some(o));
    assert!(!batch.any_offload(), "taken away");
}

/// `PoolCache::free_batch`: this pool's packets stay in the cache, the
/// other pool's go home, flagged ids come back clean, the batch is empty.
#[test]
fn free_batch_sorts_packets_by_pool() {
    let dma = SimDma::new();
    let (a, b) = (
        Mempool::new(&*dma, "a", 64, 2048).unwrap(),
        Mempool::new(&*dma, "b", 64, 2048).unwrap(),
    );
    let mut cache = a.cache(32);
    let mut batch = Batch::new();
    for i in 0..40 {
        let pool = if i % 8 < 5 { &a } else { &b };
        let mut p = pool.alloc().unwrap();
        if i == 3 {
            p.set_offload(Offload::default());
        }
        assert!(batch.push(p).is_none());
    }
    cache.free_batch(&mut batch);
    assert!(batch.is_empty());
    assert_eq!(b.free_count(), 64, "b's went home");
    assert_eq!(a.free_count() + cache.cached(), 64, "a's are in the cache");
    let bufs: Vec<PktBuf> = (0..cache.cached())
        .map(|_| cache.alloc().unwrap())
        .collect();
    assert!(bufs.iter().all(|p| p.offload().is_none()));
    let mut ids: Vec<u32> = bufs.iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 25, "each id once, none flagged");
    assert!(ids.iter().all(|&id| id < 64));
}
