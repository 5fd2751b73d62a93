//! Hybrid polling: a loop polls while there is work and, after an idle
//! period, arms its ports' notifications and sleeps until a port wakes
//! it or its next timer is due (ixy's interrupt section: polling at high
//! load, sleeping at low load; Linux NAPI does the same in the kernel).
//!
//! The order that matters (ixy issue #21, a lost wake-up): a packet that
//! arrives after the loop's last empty poll but before notifications are
//! armed raises no notification (VirtIO's event index, an 82599 queue
//! interrupt and AF_XDP's need-wakeup all signal only what arrives while
//! armed). So [`Idle::sleep`] arms first, then runs one more round over
//! the rings (the re-check), and sleeps only if that round found
//! nothing. The test `arm_then_recheck_finds_the_packet_the_naive_order_sleeps_on`
//! reproduces the race deterministically with a port that delivers a
//! packet exactly between the check and the arm.
//!
//! Default idle period: [`DEFAULT_SLEEP_AFTER`] (200 µs). At any rate
//! above 5 kpps the gap between packets is shorter, so a busy loop never
//! sleeps and pays nothing but one clock read per switch from work to an
//! empty round; a sleep and its wake-up cost a few µs of system calls
//! plus the scheduler's wake-up latency (tens of µs), so sleeping on
//! shorter gaps would spend more than polling saves. Linux's
//! `busy_poll` (50 µs) and DPDK `l3fwd-power` (about 300 empty polls
//! before a pause) pick the same order of magnitude.
//!
//! While it polls idle, a hybrid loop yields its core after each empty
//! round (`sched_yield(2)`: a no-op when nothing else is runnable on
//! it). When the thread that feeds it shares its core (the wake-up of a
//! kick or a doorbell often lands the woken loop on the waker's core),
//! spinning through the idle period would keep the producer off the core
//! for all of it, the loop would then sleep, the producer run, and so on:
//! measured with `nfkit bench idle --kind vhost-user` on one core, 120
//! kpps at 9,185 DUT cycles per packet instead of the polling loop's
//! rate. A pure polling loop ([`IdleOptions::polling`]) never yields.
//!
//! The loop never sleeps on a port that cannot wake it ([`RxWake::Poll`]:
//! it keeps polling, logged once and counted in
//! [`IdleTimes::fallbacks`]); a descriptor that reports an error or
//! hang-up is dropped from later sleeps (that queue is polled instead);
//! every sleep is bounded by [`IdleOptions::max_sleep`] and the caller's
//! deadline, so a port that never signals delays nothing by more than
//! that (each timer wake-up that finds packets is counted in
//! [`IdleTimes::late`], the first one logged). A descriptor that wakes
//! the loop [`STORM_WAKES`] times in a row with nothing to receive (an
//! interrupt that never stops, an eventfd nobody resets) would make
//! the loop poll while claiming to sleep: that queue is polled instead,
//! logged and counted ([`IdleTimes::spurious`], [`IdleTimes::fallbacks`]).

use crate::Port;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How a receive queue can wake a sleeping loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxWake {
    /// It cannot: a loop that polls it must keep polling.
    Poll,
    /// It will never receive again (a sink, a finished capture): nothing
    /// to watch.
    Never,
    /// This descriptor polls readable (`POLLIN`) when packets may be
    /// waiting, once [`Port::rx_arm`] armed the queue.
    Fd(RawFd),
}

/// Whether `fd` polls readable right now (no wait): a port that must
/// read an eventfd's count to reset it reads only when this holds, so a
/// blocking descriptor never blocks the loop.
pub fn readable_now(fd: RawFd) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(crate::sys::poll(&mut p, 0), Ok(1)) && p[0].revents & libc::POLLIN != 0
}

/// What another thread uses to wake a sleeping loop at once (a control
/// request: pause, statistics, a module command): an `eventfd` the loop
/// watches next to its ports ([`Idle::set_control`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Waker(std::sync::Arc<std::fs::File>);

impl Waker {
    pub fn new() -> std::io::Result<Waker> {
        Ok(Waker(std::sync::Arc::new(std::fs::File::from(
            crate::sys::eventfd()?,
        ))))
    }
    /// Wake the loop (a no-op while it runs; the next sleep returns at
    /// once, and the loop drains it with [`Waker::drain`]).
    pub fn wake(&self) {
        use std::io::Write;
        // EAGAIN: the counter is full, the loop is woken anyway.
        let _ = (&*self.0).write(&1u64.to_ne_bytes());
    }
    /// Reset the counter (the loop, after a wake-up).
    pub fn drain(&self) {
        use std::io::Read;
        let mut b = [0u8; 8];
        let _ = (&*self.0).read(&mut b);
    }
    pub fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }
}

/// A doorbell for work another thread hands over through memory (a
/// pipeline `Queue` between two workers): the consumer says it is about
/// to sleep ([`Doorbell::arm`]), re-checks its ring, and sleeps on
/// [`Doorbell::fd`]; the producer, after publishing work, rings
/// ([`Doorbell::ring`]), which costs a fence and a load while the
/// consumer is awake and one `write(2)` per sleep otherwise, never one
/// per packet.
///
/// The lost wake-up (ixy #21 again, between threads): the consumer's
/// store of "asleep" and its re-check of the ring, and the producer's
/// store into the ring and its load of "asleep", are each ordered by a
/// `SeqCst` fence, so at least one side sees the other's store: either
/// the re-check finds the work, or the producer sees the flag and
/// signals (the eventfd keeps the signal until the consumer's `poll`).
#[derive(Debug)]
pub struct Doorbell {
    asleep: std::sync::atomic::AtomicBool,
    waker: Waker,
    rung: std::sync::atomic::AtomicU64,
}

impl Doorbell {
    pub fn new() -> std::io::Result<Doorbell> {
        Ok(Doorbell {
            asleep: std::sync::atomic::AtomicBool::new(false),
            waker: Waker::new()?,
            rung: std::sync::atomic::AtomicU64::new(0),
        })
    }
    /// The producer, after its work is visible (pushed into the ring).
    #[inline]
    pub fn ring(&self) {
        use std::sync::atomic::{fence, Ordering};
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::SeqCst) {
            self.waker.wake();
            self.rung.fetch_add(1, Ordering::Relaxed);
        }
    }
    /// The consumer, before its re-check: from here on a producer signals.
    pub fn arm(&self) {
        use std::sync::atomic::{fence, Ordering};
        self.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    /// The consumer, awake again: no more signals; reset the descriptor.
    pub fn disarm(&self) {
        self.asleep
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.waker.drain();
    }
    /// Readable once rung while armed.
    pub fn fd(&self) -> RawFd {
        self.waker.fd()
    }
    /// Signals sent (sleeps a producer ended).
    pub fn rung(&self) -> u64 {
        self.rung.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The receive queues a sleeping loop watches, numbered `0..len()`
/// (a slice of ports gives every receive queue of each; a pipeline
/// worker the queues its tasks poll).
pub trait WakeSet {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What queue `i` names in log lines (`port `p` queue 0`).
    fn label(&self, i: usize) -> String;
    fn rx_wake(&mut self, i: usize) -> RxWake;
    fn rx_arm(&mut self, i: usize) -> bool;
    fn rx_disarm(&mut self, i: usize);
}

/// Every receive queue of every port of a slice, as a [`WakeSet`].
struct PortQueues<'a, 'b> {
    ports: &'a mut [&'b mut dyn Port],
    at: Vec<(usize, usize)>,
}

impl<'a, 'b> PortQueues<'a, 'b> {
    fn new(ports: &'a mut [&'b mut dyn Port]) -> Self {
        let at = ports
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..p.rx_queues()).map(move |q| (i, q)))
            .collect();
        PortQueues { ports, at }
    }
}

impl WakeSet for PortQueues<'_, '_> {
    fn len(&self) -> usize {
        self.at.len()
    }
    fn label(&self, i: usize) -> String {
        let (p, q) = self.at[i];
        format!("port `{}` queue {q}", self.ports[p].name())
    }
    fn rx_wake(&mut self, i: usize) -> RxWake {
        let (p, q) = self.at[i];
        self.ports[p].rx_wake(q)
    }
    fn rx_arm(&mut self, i: usize) -> bool {
        let (p, q) = self.at[i];
        self.ports[p].rx_arm(q)
    }
    fn rx_disarm(&mut self, i: usize) {
        let (p, q) = self.at[i];
        self.ports[p].rx_disarm(q)
    }
}

/// The idle period before a loop sleeps (see the module documentation).
pub const DEFAULT_SLEEP_AFTER: Duration = Duration::from_micros(200);

/// The longest single sleep by default: a queue that never signals is
/// still polled 20 times a second, and a stop request is seen within it.
pub const DEFAULT_MAX_SLEEP: Duration = Duration::from_millis(50);

/// Empty rounds between clock reads while polling idle.
const CLOCK_EVERY: u32 = 16;

/// Port wake-ups in a row whose next round found nothing, after which
/// the descriptors behind them are no longer slept on (an interrupt
/// storm).
pub const STORM_WAKES: u32 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleOptions {
    /// Sleep after this long without work; `None`: pure polling (lowest
    /// latency, one core per loop at 100%).
    pub sleep_after: Option<Duration>,
    /// Upper bound on one sleep.
    pub max_sleep: Duration,
}

impl Default for IdleOptions {
    fn default() -> Self {
        IdleOptions {
            sleep_after: Some(DEFAULT_SLEEP_AFTER),
            max_sleep: DEFAULT_MAX_SLEEP,
        }
    }
}

impl IdleOptions {
    /// Pure polling: never sleep.
    pub fn polling() -> IdleOptions {
        IdleOptions {
            sleep_after: None,
            ..IdleOptions::default()
        }
    }
}

/// Where a loop's time went, and how its sleeps ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IdleTimes {
    /// Rounds that moved packets (the rest of the elapsed time).
    pub busy: Duration,
    /// Polling rounds that found nothing.
    pub polling_idle: Duration,
    /// Asleep in `poll(2)`.
    pub asleep: Duration,
    pub sleeps: u64,
    /// Sleeps a port's notification ended.
    pub woken: u64,
    /// Sleeps the timer ended (a deadline, [`IdleOptions::max_sleep`]).
    pub timeouts: u64,
    /// Re-checks after arming that found packets (each one a wake-up the
    /// naive order would have lost).
    pub rechecks: u64,
    /// Times the loop polled instead of sleeping: a port that cannot
    /// wake it, a descriptor that failed.
    pub fallbacks: u64,
    /// Timer wake-ups whose next round found packets: a port that did
    /// not signal them (a frontend that never kicks); the sleep bound is
    /// what delivered them.
    pub late: u64,
    /// Port wake-ups whose next round found nothing.
    pub spurious: u64,
}

impl IdleTimes {
    /// The change since `old` (an earlier reading of the same loop).
    pub fn since(&self, old: &IdleTimes) -> IdleTimes {
        IdleTimes {
            busy: self.busy.saturating_sub(old.busy),
            polling_idle: self.polling_idle.saturating_sub(old.polling_idle),
            asleep: self.asleep.saturating_sub(old.asleep),
            sleeps: self.sleeps.saturating_sub(old.sleeps),
            woken: self.woken.saturating_sub(old.woken),
            timeouts: self.timeouts.saturating_sub(old.timeouts),
            rechecks: self.rechecks.saturating_sub(old.rechecks),
            fallbacks: self.fallbacks.saturating_sub(old.fallbacks),
            late: self.late.saturating_sub(old.late),
            spurious: self.spurious.saturating_sub(old.spurious),
        }
    }

    /// `[Thread: NAME] busy x%, polling idle y%, asleep z%`: one rate
    /// line for a polling thread.
    pub fn line(&self, thread: &str) -> String {
        let total = (self.busy + self.polling_idle + self.asleep)
            .as_secs_f64()
            .max(1e-9);
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / total;
        format!(
            "[Thread: {thread}] busy {:.1}%, polling idle {:.1}%, asleep {:.1}%",
            pct(self.busy),
            pct(self.polling_idle),
            pct(self.asleep)
        )
    }

    /// `busy / polling idle / asleep` as shares of the total, for rate
    /// lines and reports.
    pub fn summary(&self) -> String {
        let total = (self.busy + self.polling_idle + self.asleep)
            .as_secs_f64()
            .max(1e-9);
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / total;
        format!(
            "busy {:.1}%, polling idle {:.1}%, asleep {:.1}% ({} sleeps: {} woken, {} timed out, {} of them with packets waiting; {} re-checks found packets)",
            pct(self.busy),
            pct(self.polling_idle),
            pct(self.asleep),
            self.sleeps,
            self.woken,
            self.timeouts,
            self.late,
            self.rechecks
        )
    }
}

/// The idle state of one polling loop (one per thread).
#[derive(Debug)]
pub struct Idle {
    opts: IdleOptions,
    idle_since: Option<Instant>,
    empty: u32,
    times: IdleTimes,
    /// Set once a port cannot wake the loop or `poll(2)` failed: poll on.
    cannot_sleep: bool,
    /// The last sleep ended on the timer.
    after_timeout: bool,
    fds: Vec<libc::pollfd>,
    /// The queue (in the wake set) of each entry of `fds`, but the
    /// control descriptor's (last, if any).
    armed: Vec<usize>,
    /// Queues whose descriptor reported an error or hang-up (a port
    /// that gives a new descriptor, a reconnected frontend, is watched
    /// again).
    broken: Vec<(usize, RawFd)>,
    /// Also watched in every sleep ([`Idle::set_control`]).
    control: Option<RawFd>,
    /// The last sleep ended on a port's descriptor: these were readable.
    after_wake: Vec<(usize, RawFd)>,
    /// Port wake-ups in a row that found nothing.
    empty_wakes: u32,
    /// [`STORM_WAKES`] reached: the next arm stops sleeping on these.
    storm: Vec<(usize, RawFd)>,
    #[cfg(test)]
    naive: bool,
}

impl Idle {
    pub fn new(opts: IdleOptions) -> Idle {
        Idle {
            opts,
            idle_since: None,
            empty: 0,
            times: IdleTimes::default(),
            cannot_sleep: false,
            after_timeout: false,
            fds: Vec::new(),
            armed: Vec::new(),
            broken: Vec::new(),
            control: None,
            after_wake: Vec::new(),
            empty_wakes: 0,
            storm: Vec::new(),
            #[cfg(test)]
            naive: false,
        }
    }

    pub fn options(&self) -> IdleOptions {
        self.opts
    }

    /// Watch `fd` (a [`Waker`]'s) in every sleep too: it ends the sleep
    /// at once when readable (the caller drains it).
    pub fn set_control(&mut self, fd: Option<RawFd>) {
        self.control = fd;
    }

    /// The counters, with `busy` = `elapsed` less the idle and asleep
    /// time (`elapsed`: since the loop started).
    pub fn times(&self, elapsed: Duration) -> IdleTimes {
        let mut t = self.times;
        if let Some(s) = self.idle_since {
            t.polling_idle += s.elapsed();
        }
        t.busy = elapsed.saturating_sub(t.polling_idle + t.asleep);
        t
    }

    /// After each round of the loop: `worked` if it moved any packet.
    /// Returns true when the loop has been idle for
    /// [`IdleOptions::sleep_after`]: call [`Idle::sleep`]. Costs nothing
    /// while every round works; one clock read per switch to idle and
    /// back, and one per [`CLOCK_EVERY`] empty rounds.
    #[inline]
    pub fn round(&mut self, worked: bool) -> bool {
        if self.after_timeout {
            self.after_timeout = false;
            if worked {
                if self.times.late == 0 {
                    tracing::info!("a sleep bound delivered packets that no port signalled (a port that raises no interrupt or a frontend that never kicks); counted as late wake-ups");
                }
                self.times.late += 1;
            }
        }
        if !self.after_wake.is_empty() {
            self.woke_with(worked);
        }
        if worked {
            if let Some(t) = self.idle_since.take() {
                self.times.polling_idle += t.elapsed();
            }
            return false;
        }
        if self.opts.sleep_after.is_some() {
            // Polling idle, hand the core to whatever else is runnable on
            // it (see the module documentation: the producer feeding us).
            std::thread::yield_now();
        }
        let Some(t) = self.idle_since else {
            self.idle_since = Some(Instant::now());
            self.empty = 0;
            return false;
        };
        self.empty += 1;
        if self.empty < CLOCK_EVERY {
            return false;
        }
        self.empty = 0;
        match self.opts.sleep_after {
            Some(after) if !self.cannot_sleep => t.elapsed() >= after,
            _ => false,
        }
    }

    /// The round after a port's wake-up: `worked` or not.
    #[cold]
    fn woke_with(&mut self, worked: bool) {
        let ready = std::mem::take(&mut self.after_wake);
        if worked {
            self.empty_wakes = 0;
            return;
        }
        self.times.spurious += 1;
        self.empty_wakes += 1;
        if self.empty_wakes >= STORM_WAKES {
            self.storm = ready;
        }
    }

    /// Arm every receive queue of `ports`, run `round` once more (the
    /// re-check), and if it moved nothing sleep until a port's descriptor
    /// is readable, `deadline` (the next timer or stats line) or
    /// [`IdleOptions::max_sleep`]; then disarm. Returns what the re-check
    /// round returned.
    pub fn sleep(
        &mut self,
        ports: &mut [&mut dyn Port],
        deadline: Option<Instant>,
        mut round: impl FnMut(&mut [&mut dyn Port]) -> bool,
    ) -> bool {
        if !self.arm(ports) {
            return false;
        }
        // The re-check: a packet that arrived before the arm signalled
        // nothing; find it now instead of sleeping on it.
        #[cfg(test)]
        let recheck = !self.naive;
        #[cfg(not(test))]
        let recheck = true;
        if recheck && round(ports) {
            self.found(ports);
            return true;
        }
        self.wait(ports, deadline);
        false
    }

    /// [`Idle::sleep`] in steps, for a loop whose round cannot take the
    /// ports as an argument: `arm`; if true, run one round (the
    /// re-check); then [`Idle::found`] if it moved packets, else
    /// [`Idle::wait`]. False: keep polling (nothing is armed).
    pub fn arm(&mut self, ports: &mut [&mut dyn Port]) -> bool {
        self.arm_set(&mut PortQueues::new(ports))
    }

    /// The re-check after [`Idle::arm`] found packets: disarm, keep
    /// polling.
    pub fn found(&mut self, ports: &mut [&mut dyn Port]) {
        self.found_set(&mut PortQueues::new(ports))
    }

    /// The re-check after [`Idle::arm`] found nothing: sleep until a port
    /// signals, `deadline` or [`IdleOptions::max_sleep`], then disarm.
    pub fn wait(&mut self, ports: &mut [&mut dyn Port], deadline: Option<Instant>) {
        self.wait_set(&mut PortQueues::new(ports), deadline)
    }

    /// [`Idle::arm`] over any [`WakeSet`].
    pub fn arm_set(&mut self, set: &mut dyn WakeSet) -> bool {
        let now = Instant::now();
        if let Some(t) = self.idle_since.take() {
            self.times.polling_idle += now - t;
        }
        self.fds.clear();
        self.armed.clear();
        let storm = std::mem::take(&mut self.storm);
        if !storm.is_empty() {
            for &(i, fd) in &storm {
                tracing::warn!(
                    "{}: woke the loop {STORM_WAKES} times in a row with nothing to receive (an interrupt that never stops?); polling that queue",
                    set.label(i)
                );
                if !self.broken.contains(&(i, fd)) {
                    self.broken.push((i, fd));
                }
            }
            self.empty_wakes = 0;
        }
        let mut unable = None;
        for i in 0..set.len() {
            match set.rx_wake(i) {
                RxWake::Never => {}
                RxWake::Poll => {
                    unable = Some((i, "it has no notification"));
                    break;
                }
                RxWake::Fd(fd) => {
                    if self.broken.contains(&(i, fd)) {
                        unable = Some((i, "its descriptor failed"));
                        break;
                    }
                    if !set.rx_arm(i) {
                        unable = Some((i, "arming failed"));
                        break;
                    }
                    self.fds.push(libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    self.armed.push(i);
                }
            }
        }
        if let Some((i, why)) = unable {
            self.disarm(set);
            self.times.fallbacks += 1;
            self.cannot_sleep = true;
            tracing::info!(
                "{} cannot wake a sleeping loop ({why}): polling",
                set.label(i)
            );
            self.idle_since = Some(Instant::now());
            return false;
        }
        if let Some(fd) = self.control {
            self.fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        true
    }

    /// [`Idle::found`] over any [`WakeSet`].
    pub fn found_set(&mut self, set: &mut dyn WakeSet) {
        self.times.rechecks += 1;
        self.disarm(set);
    }

    /// [`Idle::wait`] over any [`WakeSet`].
    pub fn wait_set(&mut self, set: &mut dyn WakeSet, deadline: Option<Instant>) {
        let now = Instant::now();
        let mut until = now + self.opts.max_sleep;
        if let Some(d) = deadline {
            until = until.min(d);
        }
        let wait = until.saturating_duration_since(now);
        let mut timed_out = true;
        let slept = !wait.is_zero();
        if slept {
            let r = crate::sys::ppoll(&mut self.fds, wait);
            let woke = Instant::now();
            self.times.asleep += woke - now;
            self.times.sleeps += 1;
            match r {
                Ok(0) => {}
                Ok(_) => {
                    timed_out = false;
                    self.after_wake.clear();
                    for (f, &i) in self.fds.iter().zip(&self.armed) {
                        if f.revents & libc::POLLIN != 0 {
                            self.after_wake.push((i, f.fd));
                        }
                        let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
                        if f.revents & bad != 0 && !self.broken.contains(&(i, f.fd)) {
                            self.broken.push((i, f.fd));
                            tracing::warn!(
                                "{}: its wake-up descriptor reports an error (poll events {:#x}); polling that queue",
                                set.label(i),
                                f.revents
                            );
                        }
                    }
                }
                Err(e) => {
                    self.times.fallbacks += 1;
                    self.cannot_sleep = true;
                    tracing::warn!("sleeping on the ports failed ({e}): polling from now on");
                }
            }
        }
        self.after_timeout = slept && timed_out;
        if slept {
            if timed_out {
                self.times.timeouts += 1;
            } else {
                self.times.woken += 1;
            }
        }
        self.disarm(set);
        // After a timer wake-up the loop may sleep again at its next empty
        // round; after a port's, it polls for a whole idle period first.
        let t = Instant::now();
        self.idle_since = Some(match (timed_out, self.opts.sleep_after) {
            (true, Some(after)) => t.checked_sub(after).unwrap_or(t),
            _ => t,
        });
        self.empty = CLOCK_EVERY;
    }

    fn disarm(&mut self, set: &mut dyn WakeSet) {
        for &i in &self.armed {
            set.rx_disarm(i);
        }
        self.armed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{software_pool, Batch, Mempool, QueueStats};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// A port whose notification, like VirtIO's event index or an 82599
    /// queue interrupt, signals only packets that arrive while armed;
    /// `arrive_at_arm` delivers one packet exactly between the loop's
    /// last empty poll and its arm, where it signals nothing.
    struct Racy {
        pool: Mempool,
        waiting: usize,
        received: usize,
        armed: bool,
        arrive_at_arm: bool,
        wake_rx: UnixStream,
        wake_tx: UnixStream,
    }

    impl Racy {
        fn new() -> Racy {
            let (wake_rx, wake_tx) = UnixStream::pair().unwrap();
            wake_rx.set_nonblocking(true).unwrap();
            Racy {
                pool: software_pool("racy", 64).unwrap(),
                waiting: 0,
                received: 0,
                armed: false,
                arrive_at_arm: true,
                wake_rx,
                wake_tx,
            }
        }
        /// A packet arrives: it signals only if armed.
        fn deliver(&mut self) {
            self.waiting += 1;
            if self.armed {
                self.wake_tx.write_all(&[1]).unwrap();
            }
        }
    }

    impl Port for Racy {
        fn name(&self) -> &str {
            "racy"
        }
        fn rx_batch(&mut self, _q: usize, batch: &mut Batch) -> usize {
            let mut n = 0;
            while self.waiting > 0 && !batch.is_full() {
                let mut b = self.pool.alloc().unwrap();
                b.set_len(60).unwrap();
                batch.push(b);
                self.waiting -= 1;
                n += 1;
            }
            self.received += n;
            n
        }
        fn tx_batch(&mut self, _q: usize, _b: &mut Batch) -> usize {
            0
        }
        fn queue_stats(&self, _q: usize) -> QueueStats {
            QueueStats::default()
        }
        fn mac(&self) -> [u8; 6] {
            [0; 6]
        }
        fn pool(&self) -> &Mempool {
            &self.pool
        }
        fn rx_wake(&self, _q: usize) -> RxWake {
            RxWake::Fd(self.wake_rx.as_raw_fd())
        }
        fn rx_arm(&mut self, _q: usize) -> bool {
            if std::mem::take(&mut self.arrive_at_arm) {
                self.deliver(); // not armed yet: no signal
            }
            self.armed = true;
            true
        }
        fn rx_disarm(&mut self, _q: usize) {
            self.armed = false;
            let mut b = [0u8; 16];
            while matches!(self.wake_rx.read(&mut b), Ok(n) if n > 0) {}
        }
    }

    fn rx_round(ps: &mut [&mut dyn Port]) -> bool {
        let mut b = Batch::new();
        let n = ps[0].rx_batch(0, &mut b);
        b.clear();
        n > 0
    }

    fn idle_now(max_sleep: Duration) -> Idle {
        Idle::new(IdleOptions {
            sleep_after: Some(Duration::ZERO),
            max_sleep,
        })
    }

    #[test]
    fn arm_then_recheck_finds_the_packet_the_naive_order_sleeps_on() {
        // Arm, re-check, sleep: the packet is found by the re-check, and
        // the loop never sleeps on it.
        let mut port = Racy::new();
        let mut idle = idle_now(Duration::from_secs(30));
        let t = Instant::now();
        let found = idle.sleep(&mut [&mut port], None, rx_round);
        assert!(found, "the re-check after arming must find the packet");
        assert_eq!(port.received, 1);
        let times = idle.times(t.elapsed());
        assert_eq!((times.sleeps, times.rechecks), (0, 1), "{times:?}");
        assert!(!port.armed, "disarmed after");

        // The naive order (check, then arm and sleep) loses the wake-up:
        // the packet sits in the ring until the timer ends the sleep.
        let mut port = Racy::new();
        let mut idle = idle_now(Duration::from_millis(100));
        idle.naive = true;
        let t = Instant::now();
        let found = idle.sleep(&mut [&mut port], None, rx_round);
        assert!(!found);
        assert_eq!(port.received, 0, "the packet waited through the sleep");
        assert_eq!(port.waiting, 1);
        let times = idle.times(t.elapsed());
        assert_eq!((times.sleeps, times.timeouts), (1, 1), "{times:?}");
        assert!(t.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn a_packet_that_arrives_while_asleep_wakes_the_loop() {
        let mut port = Racy::new();
        port.arrive_at_arm = false;
        let tx = port.wake_tx.try_clone().unwrap();
        let mut idle = idle_now(Duration::from_secs(30));
        // Another thread signals (a packet arrived while armed) after
        // 50 ms; the sleep ends then, not after 30 s.
        let signal = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            (&tx).write_all(&[1]).unwrap();
        });
        let t = Instant::now();
        assert!(!idle.sleep(&mut [&mut port], None, rx_round));
        signal.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(10));
        let times = idle.times(t.elapsed());
        assert_eq!((times.sleeps, times.woken, times.timeouts), (1, 1, 0));
    }

    #[test]
    fn a_deadline_bounds_the_sleep() {
        let mut port = Racy::new();
        port.arrive_at_arm = false;
        let mut idle = idle_now(Duration::from_secs(30));
        let t = Instant::now();
        idle.sleep(
            &mut [&mut port],
            Some(t + Duration::from_millis(20)),
            rx_round,
        );
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(idle.times(t.elapsed()).timeouts, 1);
    }

    #[test]
    fn a_port_that_cannot_wake_the_loop_keeps_it_polling() {
        let o = crate::OpenOptions::default();
        let mut src = crate::open(&"null:size=60".parse().unwrap(), &o).unwrap();
        let mut idle = idle_now(Duration::from_secs(30));
        let t = Instant::now();
        assert!(!idle.sleep(&mut [&mut *src], None, |_| false));
        assert!(t.elapsed() < Duration::from_secs(10));
        let times = idle.times(t.elapsed());
        assert_eq!((times.sleeps, times.fallbacks), (0, 1));
        // and it does not try again
        for _ in 0..100 {
            assert!(!idle.round(false));
        }
    }

    #[test]
    fn a_doorbell_loses_no_wake_up_between_threads() {
        // A producer hands items over one at a time, ringing after each;
        // the consumer sleeps whenever the ring is empty (arm, re-check,
        // poll). A lost wake-up would stall the consumer for the whole
        // 10 s poll; all items must arrive well before.
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        const N: u64 = 5000;
        let bell = Arc::new(Doorbell::new().unwrap());
        let sent = Arc::new(AtomicU64::new(0));
        let (b, s) = (bell.clone(), sent.clone());
        let producer = std::thread::spawn(move || {
            for i in 1..=N {
                s.store(i, Ordering::Release);
                b.ring();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let t = Instant::now();
        let (mut seen, mut sleeps) = (0, 0u64);
        while seen < N {
            let now = sent.load(Ordering::Acquire);
            if now > seen {
                seen = now;
                continue;
            }
            bell.arm();
            if sent.load(Ordering::Acquire) > seen {
                bell.disarm(); // the re-check found work
                continue;
            }
            let mut p = [libc::pollfd {
                fd: bell.fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            crate::sys::poll(&mut p, 10_000).unwrap();
            bell.disarm();
            sleeps += 1;
            assert!(t.elapsed() < Duration::from_secs(5), "a wake-up was lost");
        }
        producer.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "a wake-up was lost");
        assert!(
            bell.rung() >= sleeps.min(1),
            "the sleeps were ended by rings"
        );
    }

    /// A queue with no packets whose wake-up is only a descriptor:
    /// readable for ever (an interrupt that never stops), hung up (its
    /// peer gone), or one that cannot be armed (`arms: false`, an eventfd
    /// `QueueIrq::arm` cannot read).
    struct FdOnly {
        pool: Mempool,
        fd: UnixStream,
        _peer: Option<UnixStream>,
        arms: bool,
    }

    impl FdOnly {
        fn new(fd: UnixStream, peer: Option<UnixStream>, arms: bool) -> FdOnly {
            FdOnly {
                pool: software_pool("fd-only", 8).unwrap(),
                fd,
                _peer: peer,
                arms,
            }
        }
    }

    impl Port for FdOnly {
        fn name(&self) -> &str {
            "fd-only"
        }
        fn rx_batch(&mut self, _q: usize, _b: &mut Batch) -> usize {
            0
        }
        fn tx_batch(&mut self, _q: usize, _b: &mut Batch) -> usize {
            0
        }
        fn queue_stats(&self, _q: usize) -> QueueStats {
            QueueStats::default()
        }
        fn mac(&self) -> [u8; 6] {
            [0; 6]
        }
        fn pool(&self) -> &Mempool {
            &self.pool
        }
        fn rx_wake(&self, _q: usize) -> RxWake {
            RxWake::Fd(self.fd.as_raw_fd())
        }
        fn rx_arm(&mut self, _q: usize) -> bool {
            self.arms
        }
    }

    /// Idle rounds (sleeping when asked) until the loop falls back to
    /// polling, at most 100,000; its times then, and the time taken.
    fn until_fallback(port: &mut FdOnly) -> (IdleTimes, Duration) {
        let mut idle = idle_now(Duration::from_secs(30));
        let t = Instant::now();
        let mut rounds = 0;
        while idle.times(t.elapsed()).fallbacks == 0 && rounds < 100_000 {
            rounds += 1;
            if idle.round(false) {
                idle.sleep(&mut [&mut *port], None, |_| false);
            }
        }
        let times = idle.times(t.elapsed());
        // and from then on it polls, honestly
        for _ in 0..1000 {
            assert!(!idle.round(false), "it asked to sleep again");
        }
        (times, t.elapsed())
    }

    #[test]
    fn a_queue_that_wakes_the_loop_continuously_is_polled_instead() {
        let (fd, mut peer) = UnixStream::pair().unwrap();
        peer.write_all(&[1]).unwrap(); // readable for ever: never read
        let (times, took) = until_fallback(&mut FdOnly::new(fd, Some(peer), true));
        assert_eq!(times.fallbacks, 1, "{times:?}");
        assert_eq!(times.spurious, u64::from(STORM_WAKES), "{times:?}");
        assert_eq!(times.woken, u64::from(STORM_WAKES), "{times:?}");
        assert!(took < Duration::from_secs(10));
    }

    /// Bad input: a wake-up descriptor that errors (hung up) or an
    /// eventfd that cannot be armed: the loop polls from then on,
    /// counted in `fallbacks` and logged; never a hang, never a busy
    /// loop that claims to sleep.
    #[test]
    fn a_wake_up_descriptor_that_errors_makes_the_loop_poll_and_is_counted() {
        for hang_up in [true, false] {
            let (fd, peer) = UnixStream::pair().unwrap();
            drop(peer); // POLLHUP from now on
            let (times, took) = until_fallback(&mut FdOnly::new(fd, None, hang_up));
            assert_eq!(times.fallbacks, 1, "hang_up {hang_up}: {times:?}");
            // a hung-up descriptor ended one sleep at once; a failed arm
            // never slept
            assert_eq!(times.sleeps, u64::from(hang_up), "{times:?}");
            assert_eq!(times.timeouts, 0, "{times:?}");
            assert!(took < Duration::from_secs(10));
        }
    }

    #[test]
    fn packets_no_port_signalled_are_delivered_by_the_sleep_bound_and_counted() {
        // A port that raises no interrupt (a frontend that never kicks):
        // its packet waits for the timer, which ends the sleep; the next
        // round finds it and counts a late wake-up.
        let mut port = Racy::new();
        port.arrive_at_arm = false;
        let mut idle = idle_now(Duration::from_millis(20));
        let t = Instant::now();
        assert!(!idle.sleep(&mut [&mut port], None, rx_round));
        port.waiting += 1; // arrived while asleep, signalled nothing
        let mut ports: [&mut dyn Port; 1] = [&mut port];
        let worked = rx_round(&mut ports);
        idle.round(worked);
        let times = idle.times(t.elapsed());
        assert!(worked);
        assert_eq!((times.timeouts, times.late, times.woken), (1, 1, 0));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn pure_polling_never_asks_to_sleep() {
        let mut idle = Idle::new(IdleOptions::polling());
        for _ in 0..10_000 {
            assert!(!idle.round(false));
        }
        let mut idle = idle_now(Duration::from_secs(1));
        assert!((0..100).any(|_| idle.round(false)));
        assert!(!idle.round(true));
    }
}
