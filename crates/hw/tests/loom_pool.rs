//! The pool's shared paths under every interleaving loom finds (within a
//! preemption bound): the free stack, per-core caches refilling and
//! spilling, buffers handed over between threads in bulk, and the handle
//! that keeps the pool alive until the last buffer is home.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p nfkit-hw
//! --test loom_pool` (`cargo xtask test` does). Under loom a cache moves 2
//! ids at a time, so pools of a few buffers reach every path. Each test
//! checks, in every interleaving: no buffer has two owners at once
//! (an ownership flag per entry, claimed and released around each use),
//! every buffer comes home, and (loom's own check) nothing the pool
//! allocated leaks, which would be the keep-alive handle left behind.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool, PktBuf};

const BUFS: usize = 4;

/// One ownership flag per pool entry.
struct Owners([AtomicBool; BUFS]);

impl Owners {
    fn new() -> Arc<Owners> {
        Arc::new(Owners(std::array::from_fn(|_| AtomicBool::new(false))))
    }
    /// The caller now owns `buf`: nobody else may.
    fn claim(&self, buf: &PktBuf) {
        let was = self.0[buf.id() as usize].swap(true, Ordering::AcqRel);
        assert!(!was, "buffer {} has two owners", buf.id());
    }
    /// The caller gives `buf` up.
    fn release(&self, buf: &PktBuf) {
        self.0[buf.id() as usize].store(false, Ordering::Release);
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

fn pool(count: usize) -> Mempool {
    let dma = SimDma::new();
    Mempool::new(&*dma, "loom", count, 2048).unwrap()
}

#[test]
fn two_caches_share_the_free_stack() {
    model(|| {
        let pool = pool(BUFS);
        let owners = Owners::new();
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (pool, owners) = (pool.clone(), owners.clone());
                thread::spawn(move || {
                    let mut cache = pool.cache(1);
                    // Refill (2 ids), use, free; then again, so a cache
                    // that spilled refills from what the other gave back.
                    for _ in 0..2 {
                        if let Some(buf) = cache.alloc() {
                            owners.claim(&buf);
                            owners.release(&buf);
                            cache.free(buf);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(pool.free_count(), BUFS, "every id is home");
    });
}

#[test]
fn a_batch_handed_to_another_thread_goes_home() {
    model(|| {
        let pool = pool(BUFS);
        let owners = Owners::new();
        let mut batch = Batch::new();
        assert_eq!(pool.alloc_bulk(&mut batch, 3), 3);
        batch.iter().for_each(|b| owners.claim(b));
        // The receiving thread frees them through its own cache (the
        // buffers are its pool's: they stay cached, then spill home).
        let consumer = {
            let (pool, owners) = (pool.clone(), owners.clone());
            thread::spawn(move || {
                let mut cache = pool.cache(1);
                batch.iter().for_each(|b| owners.release(b));
                cache.free_bulk(batch.drain());
            })
        };
        // Meanwhile this thread takes and returns the one id left.
        if let Some(buf) = pool.alloc() {
            owners.claim(&buf);
            owners.release(&buf);
        }
        consumer.join().unwrap();
        assert_eq!(pool.free_count(), BUFS);
    });
}

#[test]
fn the_last_buffer_home_frees_the_pool_whoever_holds_it() {
    model(|| {
        let pool = pool(BUFS);
        let owners = Owners::new();
        let a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        owners.claim(&a);
        owners.claim(&b);
        // Every pool handle is gone: only the buffers keep it alive.
        drop(pool);
        let holders: Vec<_> = [a, b]
            .into_iter()
            .map(|mut buf| {
                let owners = owners.clone();
                thread::spawn(move || {
                    buf.copy_from(&[7; 60]).unwrap();
                    // A clone takes an id (the pool stays out of the
                    // stack's hands) while the other thread may free the
                    // last one it holds.
                    let copy = buf.try_clone();
                    if let Some(copy) = &copy {
                        owners.claim(copy);
                        assert_eq!(copy.data(), buf.data());
                        owners.release(copy);
                    }
                    owners.release(&buf);
                })
            })
            .collect();
        for h in holders {
            h.join().unwrap();
        }
        // loom reports the pool as leaked if no thread let it go.
    });
}
