//! The pool's chain tests (`chain.rs`, `chain_edit.rs`).

use super::*;
use crate::sim::SimDma;

fn frame(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn gathered(b: &PktBuf) -> Vec<u8> {
    let mut v = Vec::new();
    b.copy_frame_to(&mut v);
    v
}

#[test]
fn a_chain_holds_a_large_frame_and_frees_as_one() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "chain", 128, 2048).unwrap();
    for len in [0, 1, 1920, 1921, 9000, 65535] {
        let bytes = frame(len);
        let b = pool.alloc_frame(&bytes).unwrap();
        assert_eq!(b.pkt_len(), len);
        assert_eq!(b.nb_segs(), len.div_ceil(1920).max(1));
        assert_eq!(b.is_chained(), len > 1920);
        assert_eq!(gathered(&b), bytes);
        assert_eq!(b.segments().map(<[u8]>::len).sum::<usize>(), len);
        let c = b.try_clone().unwrap();
        assert_eq!(gathered(&c), bytes);
        drop((b, c));
        assert_eq!(pool.free_count(), 128, "{len}: every segment home");
    }
    // Every free path frees the whole chain: a batch, a cache, a ring.
    let mut batch = Batch::new();
    batch.push(pool.alloc_frame(&frame(9000)).unwrap());
    batch.push(pool.alloc().unwrap());
    batch.clear();
    assert_eq!(pool.free_count(), 128);
    let mut cache = pool.cache(32);
    cache.free(pool.alloc_frame(&frame(5000)).unwrap());
    drop(cache);
    assert_eq!(pool.free_count(), 128);
    let mut tx = TxBuffers::new(&pool, 8).unwrap();
    for n in [60, 4000, 60, 3000] {
        batch.push(pool.alloc_frame(&frame(n)).unwrap());
    }
    assert_eq!(tx.hold_front(&mut batch, 4), 4);
    tx.free_oldest(4);
    drop(tx);
    assert_eq!(pool.free_count(), 128);
    assert_eq!(
        pool.inner
            .chains_out
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn chains_are_bounded_and_of_one_pool() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "a", 256, 2048).unwrap();
    let other = Mempool::new(&*dma, "b", 4, 2048).unwrap();
    let mut b = pool.alloc().unwrap();
    assert_eq!(b.append(other.alloc().unwrap()), Err(ChainError::OtherPool));
    assert_eq!(other.free_count(), 4);
    for _ in 1..MAX_SEGS {
        b.append(pool.alloc().unwrap()).unwrap();
    }
    assert_eq!(b.nb_segs(), MAX_SEGS);
    assert_eq!(
        b.append(pool.alloc().unwrap()),
        Err(ChainError::TooManySegments)
    );
    assert!(matches!(
        pool.alloc_frame(&frame(MAX_FRAME + 1)),
        Err(ChainError::TooLong(_))
    ));
    assert!(matches!(
        pool.alloc_frame(&frame(1920 * MAX_SEGS + 1)),
        Err(ChainError::TooManySegments)
    ));
    drop(b);
    assert_eq!(pool.free_count(), 256);
    let small = Mempool::new(&*dma, "s", 3, 2048).unwrap();
    assert_eq!(
        small.alloc_frame(&frame(9000)).err(),
        Some(ChainError::NoBuffer)
    );
    assert_eq!(small.free_count(), 3, "a failed frame leaks nothing");
}

#[test]
fn headers_pull_up_without_moving_the_payload() {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "p", 64, 2048).unwrap();
    // Two small segments then a big one: 10 + 20 + 3000 bytes.
    let bytes = frame(3030);
    let mut b = pool.alloc().unwrap();
    b.copy_from(&bytes[..10]).unwrap();
    let mut s = pool.alloc().unwrap();
    s.copy_from(&bytes[10..30]).unwrap();
    b.append(s).unwrap();
    b.append(pool.alloc_frame(&bytes[30..]).unwrap()).unwrap();
    assert_eq!((b.pkt_len(), b.nb_segs()), (3030, 4));
    let last_addr = b.segments().last().unwrap().as_ptr();
    assert_eq!(b.pull_up(54).unwrap(), &bytes[..54]);
    assert_eq!(b.len(), 54);
    assert_eq!(b.nb_segs(), 3, "the emptied segment went home");
    assert_eq!(pool.free_count(), 64 - 3);
    assert_eq!(b.segments().last().unwrap().as_ptr(), last_addr);
    assert_eq!(gathered(&b), bytes);
    // Growing and shrinking the first segment keeps the total right.
    b.prepend(4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(b.pkt_len(), 3034);
    b.adj(4).unwrap();
    assert_eq!(gathered(&b), bytes);
    b.for_each_segment_mut(|s| s.iter_mut().for_each(|x| *x = !*x));
    let inv: Vec<u8> = bytes.iter().map(|x| !x).collect();
    assert_eq!(gathered(&b), inv);
    assert!(b.pull_up(4000).is_err(), "longer than the frame");
    assert!(b.pull_up(2500).is_err(), "more than a buffer");
    b.reset();
    assert_eq!((b.pkt_len(), b.nb_segs()), (0, 1));
    drop(b);
    assert_eq!(pool.free_count(), 64);
}
