//! A committed graph and the workers that run it: start, pause, change,
//! resume, statistics.
//!
//! Each worker is a thread (pinned when the worker names a core) that
//! owns its part of the graph and its class tree while it runs. Pausing
//! makes every worker finish its current round and hand its part back;
//! [`Pipeline::edit`] then changes the graph or the trees, recomputes
//! metadata offsets and worker placement, and resumes, with module state
//! (tables, histograms, open files) and ports kept.

use crate::counters::ModuleStats;
use crate::graph::{Graph, GraphError, WorkerPlan};
use crate::runtime::Runtime;
use crate::sched::{SchedClock, SchedCounters, SchedStats, Scheduler, TcStats};
use nfkit_port::{Idle, IdleOptions, QueueStats, Waker};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use crate::ports::SharedPort;

/// Stack of a worker thread: room for the deepest walk the graph allows.
const WORKER_STACK: usize = 32 << 20;

/// Errors from running a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(
        "worker `{worker}`: core {core} is not available to this process (available: {available})"
    )]
    NoCore {
        worker: String,
        core: usize,
        available: String,
    },
    #[error("worker `{0}` stopped unexpectedly (a module panicked)")]
    WorkerLost(String),
    #[error("the pipeline is running; pause it first")]
    Running,
    #[error("module `{module}` command `{cmd}`: {source}")]
    Command {
        module: String,
        cmd: String,
        #[source]
        source: crate::args::ArgError,
    },
    #[error("cannot create capture file {path}: {source}")]
    Capture {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

struct WorkerState {
    runtime: Runtime,
    sched: Scheduler,
    /// Hybrid polling or pure polling, as the pipeline was told.
    idle: IdleOptions,
    /// The core the worker runs on (its thread pins itself when this
    /// differs from where it is pinned).
    core: Option<usize>,
}

struct WorkerThread {
    handle: Option<JoinHandle<()>>,
    cmd: mpsc::Sender<WorkerState>,
    back: mpsc::Receiver<WorkerState>,
    /// [`RUN`], [`PAUSE`], [`PUBLISH`], [`HOLD`] or [`HELD`]: read once
    /// a round.
    pause: Arc<AtomicU8>,
    /// Wakes the worker if it sleeps (after each change of `pause`);
    /// `None` if no eventfd could be made (the worker then never sleeps).
    waker: Option<Waker>,
    /// The thread's kernel id (for its CPU time in `/proc`).
    tid: Arc<std::sync::OnceLock<u32>>,
}

impl WorkerThread {
    /// Set the worker's flag and wake it if it sleeps.
    fn signal(&self, flag: u8) {
        self.pause.store(flag, Ordering::SeqCst);
        self.wake();
    }

    /// Wake the worker if it sleeps or is held.
    fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }

    /// The flag a worker resumes with: [`HOLD`] if it is held.
    fn resume_flag(held: bool) -> u8 {
        if held {
            HOLD
        } else {
            RUN
        }
    }
}

/// Worker flag: run rounds.
const RUN: u8 = 0;
/// Worker flag: finish the round and hand the worker's part back.
const PAUSE: u8 = 1;
/// Worker flag: publish the counters of the ports it holds, then run on.
const PUBLISH: u8 = 2;
/// Worker flag: stop running tasks after this round, keeping its part
/// (BESS's PauseWorker); the worker answers [`HELD`].
const HOLD: u8 = 3;
/// Worker flag: held, between two rounds, its ports' counters published;
/// it waits until the flag changes.
const HELD: u8 = 4;

/// A pipeline ready to run.
pub struct Pipeline {
    graph: Graph,
    clock: Arc<dyn SchedClock>,
    ports: Vec<(String, SharedPort)>,
    /// Committed worker parts while not running.
    parked: Option<Vec<WorkerState>>,
    running: bool,
    threads: Vec<WorkerThread>,
    sched_counters: Vec<Arc<SchedCounters>>,
    /// Times the running workers were paused (edits, commands, pauses).
    pauses: u64,
    /// Whether idle workers sleep (hybrid polling, the default) or poll.
    idle: IdleOptions,
    /// Per worker: times it was paused.
    worker_pauses: Vec<u64>,
    /// Per module id: the worker whose runtime holds the module (not a
    /// task half), as of the last commit; `None`: the graph holds it.
    homes: Vec<Option<usize>>,
    /// Per worker: the fingerprint of the plan it was last given
    /// ([`Graph::fingerprints`]); an edit restarts only the running
    /// workers whose fingerprint changes.
    fingerprints: Vec<String>,
    /// Per worker: held ([`Pipeline::hold_worker`]): it runs no task
    /// while the others run, and stays held across edits and restarts.
    held: Vec<bool>,
}

impl Pipeline {
    /// Commit `graph` (checks, metadata, placement) with time from `clock`.
    pub fn new(graph: Graph, clock: Arc<dyn SchedClock>) -> Result<Pipeline, PipelineError> {
        let mut p = Pipeline {
            graph,
            clock,
            ports: Vec::new(),
            parked: None,
            running: false,
            threads: Vec::new(),
            sched_counters: Vec::new(),
            pauses: 0,
            idle: IdleOptions::default(),
            worker_pauses: Vec::new(),
            homes: Vec::new(),
            fingerprints: Vec::new(),
            held: Vec::new(),
        };
        p.commit()?;
        Ok(p)
    }

    /// Record a port so that statistics show it.
    pub fn add_port(&mut self, name: &str, port: SharedPort) {
        self.ports.push((name.to_string(), port));
    }

    pub fn ports(&self) -> &[(String, SharedPort)] {
        &self.ports
    }

    /// The graph (names, connections). Change it with [`Pipeline::edit`].
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Hybrid polling (the default: a worker idle for
    /// [`IdleOptions::sleep_after`] sleeps on its receive queues' wake-up
    /// descriptors until a packet, its next rate-limit timer or a control
    /// request) or pure polling ([`IdleOptions::polling`]). A worker
    /// sleeps only if every task it runs allows it
    /// ([`Module::task_sleeps`](crate::Module::task_sleeps)) and every
    /// queue it polls can wake it; with a virtual clock it always polls.
    /// Applies from the next start.
    pub fn set_idle(&mut self, opts: IdleOptions) {
        self.idle = opts;
    }

    pub fn idle(&self) -> IdleOptions {
        self.idle
    }

    /// Pin every worker the description left unpinned (no `core=`) to
    /// the cores of `cores` in turn, as DPDK runs each lcore on its own
    /// core (issue 14 item 11: an unpinned data path lost a third of its
    /// packet rate to the kernel moving it). Takes effect when the
    /// workers start; returns one line per worker saying where it runs.
    pub fn pin_unpinned(&mut self, cores: &[usize], how: &str) -> Vec<String> {
        let mut next = cores.iter().cycle();
        self.graph
            .workers
            .iter_mut()
            .map(|w| match (w.core, next.next()) {
                (Some(c), _) => format!("worker {}: pinned to core {c} (its core=)", w.name),
                (None, Some(&c)) => {
                    w.core = Some(c);
                    format!("worker {}: pinned to core {c} ({how})", w.name)
                }
                (None, None) => format!("worker {}: not pinned (no core to pin to)", w.name),
            })
            .collect()
    }

    /// The kernel thread id of each worker's thread (`None` before its
    /// first start): its CPU time is in `/proc/self/task/TID/schedstat`.
    pub fn worker_tids(&self) -> Vec<Option<u32>> {
        (0..self.graph.workers.len())
            .map(|w| self.threads.get(w).and_then(|t| t.tid.get().copied()))
            .collect()
    }

    /// How many times running workers have been paused so far.
    pub fn pauses(&self) -> u64 {
        self.pauses
    }

    /// How many times worker `w` was paused so far (every pause of the
    /// whole pipeline, and those of it alone: commands on its modules).
    pub fn worker_pauses(&self, w: usize) -> u64 {
        self.worker_pauses.get(w).copied().unwrap_or(0)
    }

    fn commit(&mut self) -> Result<(), PipelineError> {
        let layout = self.graph.layout()?;
        self.record(&layout);
        let plans = self.graph.plans(layout, |_| true);
        let states = plans
            .into_iter()
            .enumerate()
            .map(|(w, plan)| self.state(w, plan.expect("every plan asked for")))
            .collect::<Vec<WorkerState>>();
        self.parked = Some(states);
        Ok(())
    }

    /// Remember where `layout` puts each module and each worker's
    /// fingerprint.
    fn record(&mut self, layout: &crate::graph::Layout) {
        self.homes = (0..self.graph.nodes.len())
            .map(|id| Graph::home(layout, id))
            .collect();
        self.fingerprints = self.graph.fingerprints(layout);
    }

    /// Worker `w`'s state from its plan.
    fn state(&mut self, w: usize, plan: WorkerPlan) -> WorkerState {
        while self.sched_counters.len() <= w {
            self.sched_counters.push(Arc::default());
        }
        let WorkerPlan { mut runtime, tree } = plan;
        runtime.set_worker(w);
        WorkerState {
            runtime,
            sched: Scheduler::new(tree, self.clock.clone())
                .with_counters(self.sched_counters[w].clone()),
            idle: self.idle,
            core: self.graph.workers[w].core,
        }
    }

    /// Bring the running workers to the graph as it now is (issue 16:
    /// each change at a batch boundary, pausing only the workers that
    /// need it): lay it out, and pause, re-plan and resume only the
    /// workers whose plan changes (with the other side of any module
    /// split between two workers), plus any worker beyond the graph's
    /// (removed: its thread ends). The others run on untouched. If the
    /// layout fails, every worker stops (as [`Pipeline::edit`] says).
    fn apply(&mut self) -> Result<(), PipelineError> {
        let layout = match self.graph.layout() {
            Ok(l) => l,
            Err(e) => {
                self.halt()?;
                return Err(e.into());
            }
        };
        let n = self.graph.workers.len();
        let fps = self.graph.fingerprints(&layout);
        let mut changed: Vec<bool> = (0..n)
            .map(|w| w >= self.threads.len() || self.fingerprints.get(w) != Some(&fps[w]))
            .collect();
        let pairs = self.graph.split_pairs(&layout);
        let mut again = true;
        while again {
            again = false;
            for &(a, b) in &pairs {
                if changed[a] != changed[b] {
                    changed[a] = true;
                    changed[b] = true;
                    again = true;
                }
            }
        }
        let stop: Vec<usize> = (0..self.threads.len())
            .filter(|&w| w >= n || changed[w])
            .collect();
        if !stop.is_empty() {
            self.pauses += 1;
            self.count_pause(stop.iter().copied().filter(|&w| w < n));
        }
        for &w in &stop {
            self.threads[w].signal(PAUSE);
        }
        let mut runtimes = Vec::new();
        let mut lost = None;
        for &w in &stop {
            match self.threads[w].back.recv() {
                Ok(mut st) => {
                    st.runtime.on_pause();
                    st.runtime.ports.check_in(true);
                    runtimes.push(st.runtime);
                }
                Err(_) => lost = Some(w),
            }
        }
        self.graph.restore(runtimes);
        while self.threads.len() > n {
            let mut t = self.threads.pop().expect("len checked");
            // Closing the command channel ends the thread's loop.
            let (dead_tx, _) = mpsc::channel();
            t.cmd = dead_tx;
            if let Some(h) = t.handle.take() {
                let _ = h.join();
            }
        }
        self.sched_counters.truncate(n);
        self.held.truncate(n);
        if let Some(w) = lost {
            let name = self
                .graph
                .workers
                .get(w)
                .map_or_else(|| format!("#{w}"), |s| s.name.clone());
            self.halt()?;
            return Err(PipelineError::WorkerLost(name));
        }
        self.record(&layout);
        let plans = self.graph.plans(layout, |w| changed[w]);
        for (w, plan) in plans.into_iter().enumerate() {
            let Some(plan) = plan else { continue };
            let mut st = self.state(w, plan);
            st.runtime.ports.check_out();
            if w >= self.threads.len() {
                let t = self.spawn(w)?;
                self.threads.push(t);
            }
            let t = &self.threads[w];
            t.pause
                .store(WorkerThread::resume_flag(self.is_held(w)), Ordering::SeqCst);
            if t.cmd.send(st).is_err() {
                return Err(PipelineError::WorkerLost(
                    self.graph.workers[w].name.clone(),
                ));
            }
        }
        Ok(())
    }

    /// Stop every worker and put every module back in the graph (the
    /// state an edit that failed leaves: paused, nothing committed).
    fn halt(&mut self) -> Result<(), PipelineError> {
        self.pause()?;
        if let Some(states) = self.parked.take() {
            self.graph
                .restore(states.into_iter().map(|s| s.runtime).collect());
        }
        Ok(())
    }

    /// Run `rounds` scheduling rounds of every worker on the calling
    /// thread, worker after worker (deterministic; for tests and virtual
    /// clocks).
    pub fn step(&mut self, rounds: u64) -> Result<(), PipelineError> {
        if self.running {
            return Err(PipelineError::Running);
        }
        let Some(states) = self.parked.as_mut() else {
            return Ok(());
        };
        for st in states.iter_mut() {
            st.sched.resync();
            st.runtime.ports.check_out();
        }
        for _ in 0..rounds {
            for st in states.iter_mut() {
                let rt = &mut st.runtime;
                st.sched.run_once(|task, now| rt.run_task(task, now));
            }
        }
        for st in states.iter_mut() {
            st.runtime.ports.check_in(false);
        }
        Ok(())
    }

    /// Start (or resume) the worker threads.
    pub fn start(&mut self) -> Result<(), PipelineError> {
        if self.running {
            return Ok(());
        }
        let Some(states) = self.parked.take() else {
            return Ok(());
        };
        for (w, mut st) in states.into_iter().enumerate() {
            // The worker takes its ports (a batch boundary: all are home).
            st.runtime.ports.check_out();
            if w >= self.threads.len() {
                let t = self.spawn(w)?;
                self.threads.push(t);
            }
            let t = &self.threads[w];
            t.pause
                .store(WorkerThread::resume_flag(self.is_held(w)), Ordering::SeqCst);
            st.idle = self.idle;
            if t.cmd.send(st).is_err() {
                return Err(PipelineError::WorkerLost(
                    self.graph.workers[w].name.clone(),
                ));
            }
        }
        self.running = true;
        Ok(())
    }

    fn spawn(&self, w: usize) -> Result<WorkerThread, PipelineError> {
        let spec = &self.graph.workers[w];
        if let Some(c) = spec.core {
            let ids = core_affinity::get_core_ids().unwrap_or_default();
            if !ids.iter().any(|i| i.id == c) {
                return Err(PipelineError::NoCore {
                    worker: spec.name.clone(),
                    core: c,
                    available: ids
                        .iter()
                        .map(|i| i.id.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                });
            }
        }
        let (cmd_tx, cmd_rx) = mpsc::channel::<WorkerState>();
        let (back_tx, back_rx) = mpsc::channel::<WorkerState>();
        let pause = Arc::new(AtomicU8::new(RUN));
        let flag = pause.clone();
        let name = spec.name.clone();
        let waker = match Waker::new() {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(worker = %name, error = %e, "no eventfd to wake the worker: it will not sleep when idle");
                None
            }
        };
        let wake = waker.clone();
        let tid = Arc::new(std::sync::OnceLock::new());
        let my_tid = tid.clone();
        let handle = std::thread::Builder::new()
            .name(format!("nfkit-{name}"))
            // A walk may cross `graph::MAX_DEPTH` modules, a few stack
            // frames each.
            .stack_size(WORKER_STACK)
            .spawn(move || {
                // `/proc/thread-self` links to `PID/task/TID`.
                if let Some(t) = std::fs::read_link("/proc/thread-self")
                    .ok()
                    .and_then(|p| p.file_name()?.to_str()?.parse().ok())
                {
                    let _ = my_tid.set(t);
                }
                let mut pinned = None;
                while let Ok(mut st) = cmd_rx.recv() {
                    if let Some(c) = st.core.filter(|&c| pinned != Some(c)) {
                        if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                            tracing::warn!(worker = %name, core = c, "could not pin the worker");
                        }
                        pinned = Some(c);
                    }
                    // Afresh for each run: the ports may have changed.
                    let mut idle = Idle::new(st.idle);
                    idle.set_control(wake.as_ref().map(Waker::fd));
                    let tasks = st.sched.tree.tasks().count();
                    let sleepy = wake.is_some()
                        && st.idle.sleep_after.is_some()
                        && st.sched.clock().is_real()
                        && st.runtime.tasks_sleep(st.sched.tree.tasks());
                    st.sched.resync();
                    // The idle loop judges rounds over every task: a run
                    // of one task that found nothing, right after another
                    // task's queue woke the worker, is no spurious wake-up.
                    let (mut runs, mut moved) = (0, false);
                    // One relaxed load a round: free next to a task run.
                    loop {
                        match flag.load(Ordering::Relaxed) {
                            RUN => {
                                let rt = &mut st.runtime;
                                let n = st.sched.run_counted(|task, now| rt.run_task(task, now));
                                moved |= n.is_some_and(|n| n > 0);
                                runs += 1;
                                if runs < tasks {
                                    continue;
                                }
                                let worked = std::mem::take(&mut moved);
                                runs = 0;
                                if sleepy && idle.round(worked) {
                                    if let Some(w) = &wake {
                                        sleep(&mut st, &mut idle, tasks, &flag, w);
                                    }
                                }
                            }
                            PUBLISH => {
                                st.runtime.ports.publish();
                                // A pause that came meanwhile stays.
                                let _ = flag.compare_exchange(
                                    PUBLISH,
                                    RUN,
                                    Ordering::AcqRel,
                                    Ordering::Relaxed,
                                );
                            }
                            HOLD => {
                                // Held between two rounds: buffered output
                                // out, counters current, then wait.
                                st.runtime.on_pause();
                                st.runtime.ports.flush();
                                st.runtime.ports.publish();
                                if flag
                                    .compare_exchange(
                                        HOLD,
                                        HELD,
                                        Ordering::AcqRel,
                                        Ordering::Relaxed,
                                    )
                                    .is_ok()
                                {
                                    while flag.load(Ordering::Acquire) == HELD {
                                        std::thread::park_timeout(Duration::from_millis(100));
                                    }
                                    if let Some(w) = &wake {
                                        w.drain();
                                    }
                                    // Time held is not owed to the classes.
                                    st.sched.resync();
                                }
                            }
                            HELD => std::thread::park_timeout(Duration::from_millis(100)),
                            _ => break,
                        }
                    }
                    if back_tx.send(st).is_err() {
                        return;
                    }
                }
            })
            .map_err(|_| PipelineError::WorkerLost(spec.name.clone()))?;
        Ok(WorkerThread {
            handle: Some(handle),
            cmd: cmd_tx,
            back: back_rx,
            pause,
            waker,
            tid,
        })
    }

    /// Stop the workers after their current round and take their parts
    /// back. Modules get [`on_pause`](crate::module::Module::on_pause).
    pub fn pause(&mut self) -> Result<(), PipelineError> {
        if !self.running {
            return Ok(());
        }
        self.pauses += 1;
        self.count_pause(0..self.threads.len());
        for t in &self.threads {
            t.signal(PAUSE);
        }
        let mut states = Vec::new();
        let mut lost = None;
        for (w, t) in self.threads.iter().enumerate() {
            match t.back.recv() {
                Ok(mut st) => {
                    st.runtime.on_pause();
                    // Ports go home, their buffered output flushed.
                    st.runtime.ports.check_in(true);
                    states.push(st);
                }
                Err(_) => lost = Some(self.graph.workers[w].name.clone()),
            }
        }
        self.running = false;
        if let Some(w) = lost {
            return Err(PipelineError::WorkerLost(w));
        }
        self.parked = Some(states);
        Ok(())
    }

    /// Whether worker `w` is held ([`Pipeline::hold_worker`]).
    pub fn is_held(&self, w: usize) -> bool {
        self.held.get(w).copied().unwrap_or(false)
    }

    /// Whether worker `w` runs tasks now: the pipeline runs and `w` is
    /// not held.
    pub fn is_worker_running(&self, w: usize) -> bool {
        self.running && w < self.graph.workers.len() && !self.is_held(w)
    }

    /// Hold worker `w` (BESS's PauseWorker): it finishes its round,
    /// flushes and publishes its ports' counters, and runs no task until
    /// [`Pipeline::release_worker`]; the other workers run on. Its part
    /// stays with it (commands and edits still reach it, and it stays
    /// held across them and across [`Pipeline::pause`] and
    /// [`Pipeline::start`]). Returns once it has stopped.
    pub fn hold_worker(&mut self, w: usize) -> Result<(), PipelineError> {
        let name = match self.graph.workers.get(w) {
            Some(s) => s.name.clone(),
            None => return Err(GraphError::NoWorker(format!("#{w}")).into()),
        };
        if self.held.len() <= w {
            self.held.resize(w + 1, false);
        }
        if self.held[w] {
            return Ok(());
        }
        self.held[w] = true;
        if !self.running || w >= self.threads.len() {
            return Ok(());
        }
        self.pauses += 1;
        self.count_pause([w]);
        let t = &self.threads[w];
        // From RUN or PUBLISH (a publish it skips: it publishes when held).
        t.signal(HOLD);
        loop {
            match t.pause.load(Ordering::Acquire) {
                HELD => return Ok(()),
                _ if t.handle.as_ref().is_none_or(|h| h.is_finished()) => {
                    return Err(PipelineError::WorkerLost(name))
                }
                _ => std::thread::sleep(Duration::from_micros(20)),
            }
        }
    }

    /// Let a held worker run its tasks again (BESS's ResumeWorker); a
    /// worker not held is left as it is.
    pub fn release_worker(&mut self, w: usize) -> Result<(), PipelineError> {
        if w >= self.graph.workers.len() {
            return Err(GraphError::NoWorker(format!("#{w}")).into());
        }
        if !self.is_held(w) {
            return Ok(());
        }
        self.held[w] = false;
        if let Some(t) = self.threads.get(w).filter(|_| self.running) {
            // HOLD not yet seen, or HELD: either way it runs on.
            for from in [HOLD, HELD] {
                let _ = t
                    .pause
                    .compare_exchange(from, RUN, Ordering::AcqRel, Ordering::Relaxed);
            }
            t.wake();
        }
        Ok(())
    }

    fn count_pause(&mut self, workers: impl IntoIterator<Item = usize>) {
        for w in workers {
            if self.worker_pauses.len() <= w {
                self.worker_pauses.resize(w + 1, 0);
            }
            self.worker_pauses[w] += 1;
        }
    }

    /// Have every running worker publish the counters of the ports it
    /// holds (between two of its rounds, without pausing), so that
    /// [`SharedPort::stats`] is current; waits up to `timeout` for them
    /// (a worker that does not answer in time leaves its last values).
    /// Returns whether every worker answered.
    pub fn publish_port_stats(&self, timeout: Duration) -> bool {
        if !self.running {
            return true;
        }
        let asked: Vec<&WorkerThread> = self
            .threads
            .iter()
            .filter(|t| {
                let asked = t
                    .pause
                    .compare_exchange(RUN, PUBLISH, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                if asked {
                    if let Some(w) = &t.waker {
                        w.wake();
                    }
                }
                asked
            })
            .collect();
        let until = std::time::Instant::now() + timeout;
        loop {
            if asked
                .iter()
                .all(|t| t.pause.load(Ordering::Acquire) != PUBLISH)
            {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Run the workers for `d` of wall-clock time, then pause.
    pub fn run_for(&mut self, d: Duration) -> Result<PipelineStats, PipelineError> {
        self.start()?;
        std::thread::sleep(d);
        self.pause()?;
        Ok(self.stats())
    }

    /// Run until `stop` is set (checked every 10 ms) or `limit` passes.
    pub fn run_until(
        &mut self,
        stop: &AtomicBool,
        limit: Option<Duration>,
    ) -> Result<PipelineStats, PipelineError> {
        self.start()?;
        let started = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) && limit.is_none_or(|l| started.elapsed() < l) {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.pause()?;
        Ok(self.stats())
    }

    /// Change the graph or the class trees without a restart: apply
    /// `f`, recommit (metadata offsets, placement) and, if the pipeline
    /// runs, pause only the workers whose plan the change alters, each
    /// between two of its rounds, and resume them on their new plans;
    /// the other workers run on (their modules stay with them, so `f`
    /// must not need them: graph edits do not). If `f` or the commit
    /// fails, the pipeline stays paused with the graph as `f` left it.
    pub fn edit<R>(
        &mut self,
        f: impl FnOnce(&mut Graph) -> Result<R, GraphError>,
    ) -> Result<R, PipelineError> {
        if !self.running {
            if let Some(states) = self.parked.take() {
                self.graph
                    .restore(states.into_iter().map(|s| s.runtime).collect());
            }
            let r = f(&mut self.graph)?;
            self.commit()?;
            return Ok(r);
        }
        let r = match f(&mut self.graph) {
            Ok(r) => r,
            Err(e) => {
                self.halt()?;
                return Err(e.into());
            }
        };
        self.apply()?;
        Ok(r)
    }

    /// Run module command `cmd` (BESS's ModuleCommand) on `module` with
    /// its argument record, between two batches: on a running pipeline
    /// the worker that holds the module finishes its round and stops
    /// (the other workers run on), the module runs the command, and the
    /// worker resumes with its ports as they were. A failing command changes
    /// nothing. The argument is a [`Value`](crate::args::Value) tree:
    /// a record (`Value::Map`) of integers, floats, strings, lists and
    /// nested records; a BESS `*CommandArg` message maps field by field
    /// (bools as 0/1, `bytes` as a list of integers).
    pub fn command(
        &mut self,
        module: &str,
        cmd: &str,
        arg: crate::args::Value,
    ) -> Result<crate::args::Value, PipelineError> {
        let fail = |source| PipelineError::Command {
            module: module.to_string(),
            cmd: cmd.to_string(),
            source,
        };
        let mut args = crate::args::Args::from_value("arg", arg).map_err(fail)?;
        self.with_module(module, |m| m.command(cmd, &mut args).map_err(fail))?
    }

    /// The module-specific values of `module` (a Measure's histogram, a
    /// Queue's occupancy), current: on a running pipeline only the
    /// worker holding the module stops, between two of its rounds.
    pub fn module_extra(
        &mut self,
        module: &str,
    ) -> Result<Vec<(&'static str, u64)>, PipelineError> {
        self.with_module(module, |m| m.extra_stats())
    }

    /// Run `f` on `module` between two batches: on a running pipeline
    /// the worker that holds the module finishes its round and stops
    /// (the other workers run on), `f` runs, and the worker resumes with
    /// its ports as they were (held if it was held).
    fn with_module<R>(
        &mut self,
        module: &str,
        f: impl FnOnce(&mut Box<dyn crate::Module>) -> R,
    ) -> Result<R, PipelineError> {
        let id = self.graph.id(module)?;
        let gone = || PipelineError::Graph(GraphError::NoModule(module.into()));
        // A module no worker runs rests in the graph: nothing stops.
        if let Some(m) = self.graph.nodes[id]
            .as_mut()
            .and_then(|n| n.module.as_mut())
        {
            return Ok(f(m));
        }
        // Running: only the worker holding the module stops, between two
        // of its rounds, keeping its ports; the others run on.
        if let Some(w) = self
            .homes
            .get(id)
            .copied()
            .flatten()
            .filter(|_| self.running)
        {
            let name = self.graph.workers[w].name.clone();
            self.pauses += 1;
            self.count_pause([w]);
            let held = self.is_held(w);
            let t = &self.threads[w];
            t.signal(PAUSE);
            let mut st = t
                .back
                .recv()
                .map_err(|_| PipelineError::WorkerLost(name.clone()))?;
            let r = st
                .runtime
                .slots
                .get_mut(id)
                .and_then(|s| s.as_mut())
                .filter(|s| !s.is_half)
                .map(|s| f(&mut s.module))
                .ok_or_else(gone);
            t.pause
                .store(WorkerThread::resume_flag(held), Ordering::SeqCst);
            if t.cmd.send(st).is_err() {
                return Err(PipelineError::WorkerLost(name));
            }
            return r;
        }
        let was_running = self.running;
        self.pause()?;
        let in_slot = self.parked.as_mut().and_then(|states| {
            states.iter_mut().find_map(|st| {
                st.runtime
                    .slots
                    .get_mut(id)
                    .and_then(|s| s.as_mut())
                    .filter(|s| !s.is_half)
                    .map(|s| &mut s.module)
            })
        });
        let m = match in_slot {
            Some(m) => Some(m),
            None => self.graph.nodes[id]
                .as_mut()
                .and_then(|n| n.module.as_mut()),
        };
        let r = m.map(f).ok_or_else(gone);
        if was_running {
            self.start()?;
        }
        r
    }

    /// Copy the traffic of output gate `ogate` of `module` into a pcap
    /// file, without stopping the pipeline for longer than a pause: a
    /// PcapCapture module named `name` is spliced into that edge (or
    /// ends the gate if it was unconnected).
    pub fn capture(
        &mut self,
        module: &str,
        ogate: usize,
        name: &str,
        path: &std::path::Path,
    ) -> Result<(), PipelineError> {
        let cap =
            crate::modules::PcapCapture::create(path).map_err(|source| PipelineError::Capture {
                path: path.display().to_string(),
                source,
            })?;
        self.edit(|g| {
            let next = g.target(module, ogate)?;
            g.add_module(name, Box::new(cap))?;
            g.disconnect(module, ogate)?;
            g.connect(module, ogate, name, 0)?;
            if let Some((to, igate)) = next {
                g.connect(name, 0, &to, igate)?;
            }
            Ok(())
        })
    }

    /// Counters of every module, worker, class and port. Module-specific
    /// values (`extra`) are filled only while paused.
    pub fn stats(&self) -> PipelineStats {
        let mut extra: Vec<Vec<(&'static str, u64)>> = self
            .graph
            .nodes
            .iter()
            .map(|n| {
                n.as_ref()
                    .and_then(|n| n.module.as_ref())
                    .map(|m| m.extra_stats())
                    .unwrap_or_default()
            })
            .collect();
        if let Some(states) = &self.parked {
            for st in states {
                for (id, slot) in st.runtime.slots.iter().enumerate() {
                    if let Some(s) = slot.as_ref().filter(|s| !s.is_half) {
                        extra[id] = s.module.extra_stats();
                    }
                }
            }
        }
        let modules = self
            .graph
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id, n)))
            .map(|(id, n)| ModuleStats {
                name: n.name.clone(),
                class: n.class,
                created: n.counters.created.get() + n.half_counters.created.get(),
                consumed: n.counters.consumed.get() + n.half_counters.consumed.get(),
                dropped: n.counters.dropped.get() + n.half_counters.dropped.get(),
                igates: n.igate_counters.iter().map(|c| c.snapshot()).collect(),
                ogates: n.ogate_counters.iter().map(|c| c.snapshot()).collect(),
                extra: std::mem::take(&mut extra[id]),
            })
            .collect();
        let edges = self
            .graph
            .nodes
            .iter()
            .flatten()
            .flat_map(|n| {
                n.ogates.iter().enumerate().filter_map(move |(g, t)| {
                    t.map(|(to, ig)| Edge {
                        from: n.name.clone(),
                        ogate: g,
                        to: self.graph.node(to).name.clone(),
                        igate: ig,
                        stats: n.ogate_counters[g].snapshot(),
                    })
                })
            })
            .collect();
        let workers = self
            .graph
            .workers
            .iter()
            .enumerate()
            .map(|(w, spec)| WorkerStats {
                name: spec.name.clone(),
                core: spec.core,
                sched: self
                    .sched_counters
                    .get(w)
                    .map(|c| snapshot(c))
                    .unwrap_or_default(),
                classes: self.graph.tc_stats(w),
            })
            .collect();
        let ports = self
            .ports
            .iter()
            .map(|(n, p)| (n.clone(), p.stats()))
            .collect();
        PipelineStats {
            modules,
            edges,
            workers,
            ports,
        }
    }

    /// Forget a port recorded with [`Pipeline::add_port`] (statistics no
    /// longer show it); returns it.
    pub fn remove_port(&mut self, name: &str) -> Option<SharedPort> {
        let i = self.ports.iter().position(|(n, _)| n == name)?;
        Some(self.ports.remove(i).1)
    }

    /// Remove worker `name` and end its thread. Only the most recently
    /// added worker can go, and only once no class or task is on it;
    /// the other workers run on.
    pub fn remove_worker(&mut self, name: &str) -> Result<(), PipelineError> {
        if !self.running {
            if let Some(states) = self.parked.take() {
                self.graph
                    .restore(states.into_iter().map(|s| s.runtime).collect());
            }
        }
        let removed = self.graph.remove_last_worker(name);
        let n = self.graph.workers.len();
        if self.running {
            self.apply()?;
        } else {
            while self.threads.len() > n {
                let mut t = self.threads.pop().expect("len checked");
                let (dead_tx, _) = mpsc::channel();
                t.cmd = dead_tx;
                if let Some(h) = t.handle.take() {
                    let _ = h.join();
                }
            }
            self.sched_counters.truncate(n);
            self.held.truncate(n);
            self.commit()?;
        }
        Ok(removed?)
    }

    /// Stop the workers and end their threads.
    pub fn shutdown(mut self) -> Result<PipelineStats, PipelineError> {
        self.pause()?;
        Ok(self.stats())
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.pause();
        for t in &mut self.threads {
            // Closing the command channel ends the thread's loop.
            let (dead_tx, _) = mpsc::channel();
            t.cmd = dead_tx;
            if let Some(h) = t.handle.take() {
                let _ = h.join();
            }
        }
    }
}

fn snapshot(c: &SchedCounters) -> SchedStats {
    SchedStats {
        rounds: c.rounds.get(),
        empty_rounds: c.empty_rounds.get(),
        idle_ns: c.idle_ns.get(),
        busy_ns: c.busy_ns.get(),
        empty_ns: c.empty_ns.get(),
        asleep_ns: c.asleep_ns.get(),
        sleeps: c.sleeps.get(),
    }
}

/// An idle worker's sleep (hybrid polling): arm its receive queues, run
/// a round over every task once more (`tasks` rounds twice: the re-check
/// that finds a packet which arrived before the arm and signalled
/// nothing), and if that found nothing sleep until a queue's descriptor,
/// the next rate-limit timer, a control request (`waker`) or the
/// longest sleep.
fn sleep(st: &mut WorkerState, idle: &mut Idle, tasks: usize, flag: &AtomicU8, waker: &Waker) {
    let deadline = st.sched.next_deadline();
    if !idle.arm_set(&mut st.runtime.wake_set()) {
        return;
    }
    let mut found = false;
    for _ in 0..2 * tasks.max(1) {
        if flag.load(Ordering::Relaxed) != RUN {
            found = true;
            break;
        }
        let rt = &mut st.runtime;
        if st
            .sched
            .run_counted(|task, now| rt.run_task(task, now))
            .is_some_and(|n| n > 0)
        {
            found = true;
            break;
        }
    }
    if found {
        idle.found_set(&mut st.runtime.wake_set());
        return;
    }
    let t = std::time::Instant::now();
    idle.wait_set(&mut st.runtime.wake_set(), deadline);
    waker.drain();
    st.sched.slept(t.elapsed().as_nanos() as u64);
}

/// One connection and its traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub ogate: usize,
    pub to: String,
    pub igate: usize,
    pub stats: crate::counters::GateStats,
}

/// One worker's scheduler and classes.
#[derive(Debug, Clone)]
pub struct WorkerStats {
    pub name: String,
    pub core: Option<usize>,
    pub sched: SchedStats,
    pub classes: Vec<TcStats>,
}

/// Everything [`Pipeline::stats`] reports.
#[derive(Debug, Clone)]
pub struct PipelineStats {
    pub modules: Vec<ModuleStats>,
    pub edges: Vec<Edge>,
    pub workers: Vec<WorkerStats>,
    pub ports: Vec<(String, QueueStats)>,
}

impl PipelineStats {
    pub fn module(&self, name: &str) -> Option<&ModuleStats> {
        self.modules.iter().find(|m| m.name == name)
    }
    /// Sum of packets dropped by all modules.
    pub fn dropped(&self) -> u64 {
        self.modules.iter().map(|m| m.dropped).sum()
    }
}

/// `12.35G`, `833.3k`, `950`.
fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.3}G", v / 1e9),
        v if v >= 1e6 => format!("{:.3}M", v / 1e6),
        v if v >= 1e3 => format!("{:.3}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

impl fmt::Display for PipelineStats {
    /// A `show pipeline`-style listing: edges, drops, classes, ports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "edges:")?;
        for e in &self.edges {
            writeln!(
                f,
                "  {}:{} -> {}:{}  packets={} batches={} bits={}",
                e.from, e.ogate, e.igate, e.to, e.stats.packets, e.stats.batches, e.stats.bits
            )?;
        }
        writeln!(f, "modules:")?;
        for m in &self.modules {
            write!(
                f,
                "  {} ({}) in={} out={} created={} consumed={} dropped={}",
                m.name,
                m.class,
                m.received(),
                m.sent(),
                m.created,
                m.consumed,
                m.dropped
            )?;
            for (k, v) in &m.extra {
                write!(f, " {k}={v}")?;
            }
            writeln!(f)?;
        }
        for w in &self.workers {
            writeln!(
                f,
                "worker {}{}: rounds={} empty={} busy_ns={} idle_ns={} asleep_ns={} sleeps={}",
                w.name,
                w.core.map(|c| format!(" (core {c})")).unwrap_or_default(),
                w.sched.rounds,
                w.sched.empty_rounds,
                w.sched.busy_ns,
                w.sched.idle_ns,
                w.sched.asleep_ns,
                w.sched.sleeps
            )?;
            // The loop's busy, idle and asleep time is all the time it
            // ran: rates over it, and each class against its parent and
            // limit.
            let secs = (w.sched.busy_ns + w.sched.idle_ns + w.sched.asleep_ns) as f64 / 1e9;
            for c in &w.classes {
                write!(
                    f,
                    "  tc {} ({}{}) count={} cpu_ns={} packets={} bits={} throttled={}",
                    c.name,
                    c.policy,
                    c.parent
                        .as_ref()
                        .map(|p| format!(", parent {p}"))
                        .unwrap_or_default(),
                    c.count,
                    c.cycles,
                    c.packets,
                    c.bits,
                    c.throttled
                )?;
                if secs > 0.0 {
                    write!(f, " rate={}bit/s", si(c.bits as f64 / secs))?;
                }
                let parent = c
                    .parent
                    .as_ref()
                    .and_then(|p| w.classes.iter().find(|x| &x.name == p));
                if let Some(p) = parent.filter(|p| p.bits > 0) {
                    write!(f, " share={:.2}%", c.bits as f64 * 100.0 / p.bits as f64)?;
                }
                if let (Some((res, limit)), true) = (c.limit, secs > 0.0) {
                    let used = match res {
                        crate::sched::Resource::Bit => c.bits,
                        crate::sched::Resource::Packet => c.packets,
                        crate::sched::Resource::Count => c.count,
                        crate::sched::Resource::Cycle => c.cycles,
                    } as f64;
                    let owed = limit as f64 * secs;
                    write!(
                        f,
                        " limit={}{res}/s used={:.2}% tokens_lost={} (used+lost={:.2}%)",
                        si(limit as f64),
                        used * 100.0 / owed,
                        c.tokens_lost,
                        (used + c.tokens_lost as f64) * 100.0 / owed
                    )?;
                }
                writeln!(f)?;
            }
        }
        for (name, s) in &self.ports {
            writeln!(
                f,
                "port {name}: rx={} rx_dropped={} tx={} tx_dropped={}",
                s.rx_packets, s.rx_dropped, s.tx_packets, s.tx_dropped
            )?;
        }
        Ok(())
    }
}
