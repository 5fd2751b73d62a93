//! The two execution modes: lock-step on a virtual clock, and a
//! free-running device thread.

use crate::device::Device;
use nfkit_hw::sim::VirtualClock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Lock-step: device time is `clock`; each advance runs the timeline and
/// one step of the data path.
pub(crate) fn attach_clock(dev: &Arc<Device>, clock: &Arc<VirtualClock>) {
    dev.use_virtual_clock(clock.clone());
    let weak = Arc::downgrade(dev);
    clock.on_advance(move |now| {
        if let Some(d) = weak.upgrade() {
            d.tick(now);
            d.data.lock().step(&d);
        }
    });
}

/// A device running on its own thread; stops when dropped.
#[derive(Debug)]
pub struct RunningNic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RunningNic {
    /// Stop the device thread and wait for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningNic {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Idle polls before the thread starts yielding, and before it sleeps.
const SPIN_POLLS: u32 = 256;
const YIELD_POLLS: u32 = 4096;
const IDLE_SLEEP: Duration = Duration::from_micros(50);

pub(crate) fn spawn(dev: Arc<Device>) -> RunningNic {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("82599-model".into())
        .spawn(move || {
            let mut idle = 0u32;
            let mut data = dev.data.lock();
            while !s.load(Ordering::Acquire) {
                dev.tick(dev.now());
                if data.step(&dev) > 0 {
                    idle = 0;
                    continue;
                }
                idle = idle.saturating_add(1);
                if idle < SPIN_POLLS {
                    std::hint::spin_loop();
                } else if idle < YIELD_POLLS {
                    std::thread::yield_now();
                } else {
                    // let a lock-step caller or a test in; real time moves on
                    parking_lot::MutexGuard::unlocked(&mut data, || std::thread::sleep(IDLE_SLEEP));
                }
            }
        })
        .expect("spawning the 82599 model thread");
    RunningNic {
        stop,
        thread: Some(thread),
    }
}
