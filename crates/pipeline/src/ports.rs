//! Ports in a pipeline: one owner per queue, no lock on the data path.
//!
//! A [`SharedPort`] is the pipeline's handle on a port: modules name it
//! (`PortInc(port=p0)`) and declare which of its queues they poll
//! ([`Module::ports`](crate::Module::ports)). While the pipeline is
//! paused the port rests in its *home*; when workers run, each worker's
//! [`PortTable`] holds the port, or the queues of it, that the worker
//! polls, and modules reach them through their
//! [`Ctx`](crate::Ctx::port_rx) with a plain `&mut`: no lock and no
//! atomic read-modify-write per poll or per packet.
//!
//! At commit the graph gives every receive and transmit queue one
//! owning worker and refuses a graph in which two workers would poll one
//! queue. A port used by one worker moves into it whole. A port whose
//! queues are spread over several workers is split into per-queue parts
//! ([`Port::split_queues`]); a backend that cannot split is shared by
//! those workers under a lock (one per batch), as every port was before.
//! Ports move only while the workers are paused, that is at a batch
//! boundary.

use nfkit_hw::Batch;
use nfkit_port::{Port, QueueStats, RxWake};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// A port of the pipeline, as modules name it. Cheap to clone.
#[derive(Clone)]
pub struct SharedPort(Arc<Home>);

struct Home {
    /// The name the config gave it (else the port's own name).
    name: String,
    rx_queues: usize,
    tx_queues: usize,
    /// Whether the port sends chained frames, and its largest frame.
    tx_chains: bool,
    max_frame: usize,
    /// What the port does itself (fixed when it was opened).
    caps: nfkit_port::Caps,
    /// Control path only: taken at commit, check-out and check-in.
    held: Mutex<Held>,
    /// Counters of the parts workers hold, as each worker last
    /// published them ([`PortTable::publish`]), by check-out id; an
    /// entry goes when its part comes home.
    published: Mutex<Vec<(u64, Vec<QueueStats>)>>,
}

/// Ids of check-outs (which published counters belong to which part).
static CHECKOUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Where a port's parts are while the pipeline is paused.
enum Held {
    /// One object for every queue.
    Whole(Box<dyn Port>),
    /// Split: part `q` serves queue `q`; `None` while a worker has it.
    Parts(Vec<Option<Box<dyn Port>>>),
    /// Shared under a lock by several workers (the backend cannot split).
    Locked(Arc<Mutex<Box<dyn Port>>>),
    /// A worker has the whole port; per-queue counters as of the
    /// check-out.
    Out(Vec<QueueStats>),
}

/// Which way a module moves packets through a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Rx,
    Tx,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Rx => "receive",
            Dir::Tx => "transmit",
        }
    }
}

/// The queues a module polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queues {
    /// Queue `q` only.
    One(usize),
    /// Every queue of that direction in turn (PortInc).
    All,
    /// Queue `worker % count` of the worker running the module (PortOut).
    OfWorker,
}

/// One port use a module declares in [`Module::ports`](crate::Module::ports).
#[derive(Clone)]
pub struct PortUse {
    pub port: SharedPort,
    pub dir: Dir,
    pub queues: Queues,
}

impl PortUse {
    /// The queue numbers this use polls when run on worker `worker`.
    pub fn resolve(&self, worker: usize) -> Vec<usize> {
        let count = match self.dir {
            Dir::Rx => self.port.rx_queues(),
            Dir::Tx => self.port.tx_queues(),
        };
        match self.queues {
            Queues::One(q) => vec![q],
            Queues::All => (0..count).collect(),
            Queues::OfWorker => vec![worker % count.max(1)],
        }
    }
}

impl SharedPort {
    /// A pipeline port named after the port itself.
    pub fn new(port: Box<dyn Port>) -> SharedPort {
        let name = port.name().to_string();
        SharedPort::named(&name, port)
    }

    /// A pipeline port under the name the config gave it.
    pub fn named(name: &str, port: Box<dyn Port>) -> SharedPort {
        SharedPort(Arc::new(Home {
            name: name.to_string(),
            rx_queues: port.rx_queues(),
            tx_queues: port.tx_queues(),
            tx_chains: port.tx_chains(),
            max_frame: port.max_frame(),
            caps: port.capabilities(),
            held: Mutex::new(Held::Whole(port)),
            published: Mutex::new(Vec::new()),
        }))
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn rx_queues(&self) -> usize {
        self.0.rx_queues
    }
    pub fn tx_queues(&self) -> usize {
        self.0.tx_queues
    }
    /// Whether the port sends chained frames ([`Port::tx_chains`]).
    pub fn tx_chains(&self) -> bool {
        self.0.tx_chains
    }
    /// The largest frame the port carries ([`Port::max_frame`]).
    pub fn max_frame(&self) -> usize {
        self.0.max_frame
    }
    /// What the port does with offload state itself.
    pub fn capabilities(&self) -> nfkit_port::Caps {
        self.0.caps
    }

    /// Whether `self` and `other` are the same port.
    pub fn same(&self, other: &SharedPort) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A number naming this port while it lives (for plan fingerprints).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Counters summed over all queues: live while the port is home or
    /// shared under a lock; while workers hold it (or parts of it), as
    /// they last published them ([`Pipeline::publish_port_stats`]), else
    /// as of the moment they took it.
    ///
    /// [`Pipeline::publish_port_stats`]: crate::Pipeline::publish_port_stats
    pub fn stats(&self) -> QueueStats {
        let mut s = QueueStats::default();
        for q in self.queue_stats() {
            s += q;
        }
        s
    }

    /// Counters of each queue (index: queue number, as many as the
    /// port has receive or transmit queues), read as [`SharedPort::stats`]
    /// reads them; their sum is [`SharedPort::stats`].
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        let queues = self.0.rx_queues.max(self.0.tx_queues);
        let held = self.0.held.lock();
        let published = self.0.published.lock();
        let mut away = vec![QueueStats::default(); queues];
        for (_, s) in published.iter() {
            add_queues(&mut away, s);
        }
        match &*held {
            Held::Whole(p) => whole_queue_stats(&**p, queues),
            Held::Parts(parts) => {
                add_queues(&mut away, &parts_queue_stats(parts, queues));
                away
            }
            Held::Locked(p) => whole_queue_stats(&**p.lock(), queues),
            Held::Out(s) if published.is_empty() => s.clone(),
            Held::Out(_) => away,
        }
    }

    /// Record the counters of a part a worker holds (check-out `id`).
    fn publish(&self, id: u64, stats: Vec<QueueStats>) {
        let mut published = self.0.published.lock();
        match published.iter_mut().find(|(i, _)| *i == id) {
            Some(e) => e.1 = stats,
            None => published.push((id, stats)),
        }
    }

    /// Whether the port is split into per-queue parts that workers own
    /// with no lock (its queues are spread over several workers and its
    /// backend splits); false while whole, or shared under a lock.
    pub fn is_split(&self) -> bool {
        matches!(&*self.0.held.lock(), Held::Parts(_))
    }

    /// Run `f` on the port while the pipeline is paused (`None` while a
    /// worker holds it or it is split into parts).
    pub fn with_port<R>(&self, f: impl FnOnce(&mut dyn Port) -> R) -> Option<R> {
        match &mut *self.0.held.lock() {
            Held::Whole(p) => Some(f(&mut **p)),
            Held::Locked(p) => Some(f(&mut **p.lock())),
            Held::Parts(_) | Held::Out(_) => None,
        }
    }

    /// Prepare the port for owners on several workers: split it into
    /// per-queue parts, or, if the backend cannot or `lock` asks so,
    /// share it under a lock.
    fn spread(&self, lock: bool) {
        let mut held = self.0.held.lock();
        if let Held::Whole(p) = &mut *held {
            *held = match p.split_queues().filter(|_| !lock) {
                Some(parts) => {
                    let mut by_queue: Vec<Option<Box<dyn Port>>> =
                        parts.into_iter().map(Some).collect();
                    let queues = self.0.rx_queues.max(self.0.tx_queues);
                    by_queue.resize_with(queues, || None);
                    Held::Parts(by_queue)
                }
                None => {
                    tracing::info!(
                        port = %self.0.name,
                        "the port's queues are polled by several workers and its backend \
                         cannot split them: the workers share it under a lock"
                    );
                    let Held::Whole(p) = std::mem::replace(&mut *held, Held::Out(Vec::new()))
                    else {
                        return;
                    };
                    Held::Locked(Arc::new(Mutex::new(p)))
                }
            };
        }
    }

    /// Take what a worker claims out of the home.
    fn check_out(&self, claim: &Claim) -> Option<Slot> {
        let mut held = self.0.held.lock();
        match (&mut *held, claim) {
            (Held::Locked(p), _) => Some(Slot::Locked(p.clone())),
            (Held::Parts(parts), Claim::Queues(qs)) => {
                let mut mine: Vec<Option<Box<dyn Port>>> = (0..parts.len()).map(|_| None).collect();
                for &q in qs {
                    if let Some(p) = parts.get_mut(q).and_then(Option::take) {
                        mine[q] = Some(p);
                    }
                }
                Some(Slot::Parts(mine.into()))
            }
            (Held::Parts(parts), Claim::Whole) => {
                let mine: Vec<Option<Box<dyn Port>>> = parts.iter_mut().map(Option::take).collect();
                Some(Slot::Parts(mine.into()))
            }
            (Held::Whole(p), _) => {
                let stats = whole_queue_stats(&**p, self.0.rx_queues.max(self.0.tx_queues));
                let Held::Whole(p) = std::mem::replace(&mut *held, Held::Out(stats)) else {
                    return None;
                };
                Some(Slot::Whole(p))
            }
            (Held::Out(_), _) => None,
        }
    }

    /// Give back what a worker held (check-out `id`).
    fn check_in(&self, slot: Slot, id: u64) {
        let mut held = self.0.held.lock();
        self.0.published.lock().retain(|(i, _)| *i != id);
        match slot {
            Slot::Whole(p) => *held = Held::Whole(p),
            Slot::Parts(mine) => {
                if let Held::Parts(parts) = &mut *held {
                    for (q, p) in mine.into_vec().into_iter().enumerate() {
                        if let Some(p) = p {
                            parts[q] = Some(p);
                        }
                    }
                }
            }
            Slot::Locked(p) => {
                drop(p);
                // The last worker to give it back makes it whole again.
                if let Held::Locked(shared) = &*held {
                    if Arc::strong_count(shared) == 1 {
                        let Held::Locked(shared) =
                            std::mem::replace(&mut *held, Held::Out(Vec::new()))
                        else {
                            return;
                        };
                        match Arc::try_unwrap(shared) {
                            Ok(m) => *held = Held::Whole(m.into_inner()),
                            Err(shared) => *held = Held::Locked(shared),
                        }
                    }
                }
            }
            Slot::Empty => {}
        }
    }

    /// Push buffered output to its destination (a capture file).
    fn flush(&self) {
        let flush = |p: &mut dyn Port| {
            if let Err(e) = p.flush() {
                tracing::warn!(error = %e, "flushing a port on pause failed");
            }
        };
        match &mut *self.0.held.lock() {
            Held::Whole(p) => flush(&mut **p),
            Held::Parts(parts) => parts.iter_mut().flatten().for_each(|p| flush(&mut **p)),
            Held::Locked(p) => flush(&mut **p.lock()),
            Held::Out(_) => {}
        }
    }
}

/// Per-queue counters of a whole port.
fn whole_queue_stats(p: &dyn Port, queues: usize) -> Vec<QueueStats> {
    (0..queues).map(|q| p.queue_stats(q)).collect()
}

/// Per-queue counters of the parts present (part `q` counts queue `q`).
fn parts_queue_stats(parts: &[Option<Box<dyn Port>>], queues: usize) -> Vec<QueueStats> {
    let mut s = vec![QueueStats::default(); queues];
    for (q, p) in parts.iter().enumerate() {
        if let (Some(p), Some(e)) = (p, s.get_mut(q)) {
            *e = p.queue_stats(q);
        }
    }
    s
}

fn add_queues(to: &mut [QueueStats], from: &[QueueStats]) {
    for (t, f) in to.iter_mut().zip(from) {
        *t += *f;
    }
}

impl fmt::Debug for SharedPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedPort({})", self.0.name)
    }
}

/// What a worker takes of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// All of it (the port's only user).
    Whole,
    /// These queues (the port is spread over several workers).
    Queues(Vec<usize>),
}

/// A port, or part of one, as a worker holds it.
pub(crate) enum Slot {
    Empty,
    Whole(Box<dyn Port>),
    /// Part `q` serves queue `q`.
    Parts(Box<[Option<Box<dyn Port>>]>),
    Locked(Arc<Mutex<Box<dyn Port>>>),
}

impl Slot {
    #[inline(always)]
    fn with<R>(&mut self, queue: usize, f: impl FnOnce(&mut dyn Port) -> R) -> Option<R> {
        match self {
            Slot::Whole(p) => Some(f(&mut **p)),
            Slot::Parts(parts) => parts.get_mut(queue)?.as_mut().map(|p| f(&mut **p)),
            Slot::Locked(p) => Some(f(&mut **p.lock())),
            Slot::Empty => None,
        }
    }
}

/// The ports (or parts of them) one worker polls, in the order its plan
/// lists them; modules reach them through their binding.
#[derive(Default)]
pub struct PortTable {
    plan: Vec<(SharedPort, Claim)>,
    slots: Vec<Slot>,
    /// Check-out id of each slot (0: none).
    ids: Vec<u64>,
}

impl PortTable {
    /// The index of `port` in the plan, added with `claim` if new.
    pub(crate) fn plan(&mut self, port: &SharedPort, claim: Claim) -> usize {
        if let Some(i) = self.plan.iter().position(|(p, _)| p.same(port)) {
            return i;
        }
        self.plan.push((port.clone(), claim));
        self.slots.push(Slot::Empty);
        self.ids.push(0);
        self.plan.len() - 1
    }

    /// Take the planned ports out of their homes.
    pub(crate) fn check_out(&mut self) {
        for (i, (port, claim)) in self.plan.iter().enumerate() {
            if matches!(self.slots[i], Slot::Empty) {
                if let Some(s) = port.check_out(claim) {
                    self.slots[i] = s;
                    self.ids[i] = CHECKOUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    /// Give every port back to its home (flushing it when `flush`).
    pub(crate) fn check_in(&mut self, flush: bool) {
        for (i, (port, _)) in self.plan.iter().enumerate() {
            let s = std::mem::replace(&mut self.slots[i], Slot::Empty);
            port.check_in(s, std::mem::take(&mut self.ids[i]));
            if flush {
                port.flush();
            }
        }
    }

    /// Push the buffered output of every port (or part) this worker
    /// holds to its destination (a worker held between two rounds).
    pub(crate) fn flush(&mut self) {
        let flush = |p: &mut dyn Port| {
            if let Err(e) = p.flush() {
                tracing::warn!(error = %e, "flushing a port failed");
            }
        };
        for s in &mut self.slots {
            match s {
                Slot::Whole(p) => flush(&mut **p),
                Slot::Parts(parts) => parts.iter_mut().flatten().for_each(|p| flush(&mut **p)),
                Slot::Locked(p) => flush(&mut **p.lock()),
                Slot::Empty => {}
            }
        }
    }

    /// Publish the counters of every port (or part) this worker holds,
    /// so that [`SharedPort::stats`] reads them while the worker runs
    /// (called by the worker between two rounds, when asked).
    pub(crate) fn publish(&mut self) {
        for (i, (port, _)) in self.plan.iter().enumerate() {
            let queues = port.rx_queues().max(port.tx_queues());
            let stats = match &self.slots[i] {
                Slot::Whole(p) => whole_queue_stats(&**p, queues),
                Slot::Parts(parts) => parts_queue_stats(parts, queues),
                // Live through the lock; nothing held here.
                Slot::Locked(_) | Slot::Empty => continue,
            };
            port.publish(self.ids[i], stats);
        }
    }

    /// Run `f` on the port at table index `i` for queue `queue`; `None`
    /// if this worker does not hold that queue.
    #[inline(always)]
    pub(crate) fn with<R>(
        &mut self,
        i: usize,
        queue: usize,
        f: impl FnOnce(&mut dyn Port) -> R,
    ) -> Option<R> {
        self.slots.get_mut(i)?.with(queue, f)
    }

    /// A table holding whatever its users' homes have, all of it (a
    /// module run outside any pipeline: the harness).
    pub(crate) fn claim_all(uses: &[PortUse]) -> (PortTable, Vec<usize>) {
        let mut t = PortTable::default();
        let bind = uses.iter().map(|u| t.plan(&u.port, Claim::Whole)).collect();
        t.check_out();
        (t, bind)
    }
}

impl Drop for PortTable {
    fn drop(&mut self) {
        // Ports never vanish with a worker's table: they go home.
        self.check_in(false);
    }
}

/// Who polls each queue: checks one owning worker per queue, and plans
/// the worker tables.
#[derive(Default)]
pub(crate) struct Owners {
    /// (port, direction, queue) -> (worker, module).
    queues: Vec<(SharedPort, Dir, usize, usize, String)>,
}

/// Two workers would poll one queue.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} queue {queue} of port `{port}` would be polled by two workers: by `{first_module}` on worker `{first_worker}` and by `{second_module}` on worker `{second_worker}`; give each worker its own queue (QueueInc/QueueOut with qid=N)", .dir.name())]
pub struct QueueConflict {
    pub port: String,
    pub dir: Dir,
    pub queue: usize,
    pub first_module: String,
    pub first_worker: String,
    pub second_module: String,
    pub second_worker: String,
}

impl Owners {
    /// Record that `module` on `worker` polls `use_`'s queues
    /// (`worker_name` names workers in the error).
    pub fn add(
        &mut self,
        module: &str,
        worker: usize,
        use_: &PortUse,
        worker_name: impl Fn(usize) -> String,
    ) -> Result<(), Box<QueueConflict>> {
        for q in use_.resolve(worker) {
            if let Some((_, _, _, w, m)) = self
                .queues
                .iter()
                .find(|(p, d, qq, _, _)| p.same(&use_.port) && *d == use_.dir && *qq == q)
            {
                if *w != worker {
                    return Err(Box::new(QueueConflict {
                        port: use_.port.name().to_string(),
                        dir: use_.dir,
                        queue: q,
                        first_module: m.clone(),
                        first_worker: worker_name(*w),
                        second_module: module.to_string(),
                        second_worker: worker_name(worker),
                    }));
                }
                continue;
            }
            self.queues
                .push((use_.port.clone(), use_.dir, q, worker, module.to_string()));
        }
        Ok(())
    }

    /// Whether `worker` owns every queue `use_` polls there.
    pub fn owns(&self, use_: &PortUse, worker: usize) -> bool {
        use_.resolve(worker).into_iter().all(|q| {
            self.queues.iter().any(|(p, d, qq, w, _)| {
                p.same(&use_.port) && *d == use_.dir && *qq == q && *w == worker
            })
        })
    }

    /// What `worker` claims of `port`: the whole port when it is the
    /// port's only owner, else its queues (and the port is spread).
    pub fn claim(&self, port: &SharedPort, worker: usize) -> Claim {
        let claim = self.claim_of(port, worker);
        if claim != Claim::Whole {
            port.spread(self.crossed(port));
        }
        claim
    }

    /// What `worker` claims of `port` (as [`Owners::claim`], without
    /// preparing the port), and whether a spread port would be shared
    /// under a lock: what a worker's plan holds of it.
    pub fn plan_of(&self, port: &SharedPort, worker: usize) -> (Claim, bool) {
        let claim = self.claim_of(port, worker);
        let locked = claim != Claim::Whole && self.crossed(port);
        (claim, locked)
    }

    fn claim_of(&self, port: &SharedPort, worker: usize) -> Claim {
        let users: BTreeSet<usize> = self
            .queues
            .iter()
            .filter(|(p, ..)| p.same(port))
            .map(|&(_, _, _, w, _)| w)
            .collect();
        if users.len() <= 1 {
            return Claim::Whole;
        }
        let mut qs: Vec<usize> = self
            .queues
            .iter()
            .filter(|(p, _, _, w, _)| p.same(port) && *w == worker)
            .map(|&(_, _, q, _, _)| q)
            .collect();
        qs.sort_unstable();
        qs.dedup();
        Claim::Queues(qs)
    }

    /// Whether a split port's receive queue `q` and transmit queue `q`
    /// have different owners (a part serves both, so such a port is
    /// shared under a lock instead).
    fn crossed(&self, port: &SharedPort) -> bool {
        let owner = |d: Dir, q: usize| {
            self.queues
                .iter()
                .find(|(p, dd, qq, _, _)| p.same(port) && *dd == d && *qq == q)
                .map(|&(_, _, _, w, _)| w)
        };
        self.queues
            .iter()
            .filter(|(p, d, ..)| p.same(port) && *d == Dir::Rx)
            .any(|&(_, _, q, w, _)| owner(Dir::Tx, q).is_some_and(|t| t != w))
    }
}

/// The receive queues one worker polls, then its tasks' doorbells, as
/// the set its sleeps watch.
pub struct WorkerWake<'a> {
    table: &'a mut PortTable,
    queues: &'a [(usize, usize)],
    bells: &'a [std::sync::Arc<nfkit_port::Doorbell>],
}

impl<'a> WorkerWake<'a> {
    pub(crate) fn new(
        table: &'a mut PortTable,
        queues: &'a [(usize, usize)],
        bells: &'a [std::sync::Arc<nfkit_port::Doorbell>],
    ) -> Self {
        WorkerWake {
            table,
            queues,
            bells,
        }
    }
    fn bell(&self, i: usize) -> Option<&nfkit_port::Doorbell> {
        i.checked_sub(self.queues.len())
            .and_then(|b| self.bells.get(b))
            .map(|b| &**b)
    }
}

impl nfkit_port::WakeSet for WorkerWake<'_> {
    fn len(&self) -> usize {
        self.queues.len() + self.bells.len()
    }
    fn label(&self, i: usize) -> String {
        if self.bell(i).is_some() {
            return format!("doorbell {}", i - self.queues.len());
        }
        let (p, q) = self.queues[i];
        format!("port `{}` queue {q}", self.table.plan[p].0.name())
    }
    fn rx_wake(&mut self, i: usize) -> RxWake {
        if let Some(b) = self.bell(i) {
            return RxWake::Fd(b.fd());
        }
        let (p, q) = self.queues[i];
        // A queue this worker does not hold now: nothing to watch.
        self.table
            .with(p, q, |port| port.rx_wake(q))
            .unwrap_or(RxWake::Never)
    }
    fn rx_arm(&mut self, i: usize) -> bool {
        if let Some(b) = self.bell(i) {
            b.arm();
            return true;
        }
        let (p, q) = self.queues[i];
        self.table.with(p, q, |port| port.rx_arm(q)).unwrap_or(true)
    }
    fn rx_disarm(&mut self, i: usize) {
        if let Some(b) = self.bell(i) {
            b.disarm();
            return;
        }
        let (p, q) = self.queues[i];
        self.table.with(p, q, |port| port.rx_disarm(q));
    }
}

#[inline]
pub(crate) fn rx(table: &mut PortTable, i: usize, queue: usize, batch: &mut Batch) -> usize {
    table
        .with(i, queue, |p| p.rx_batch(queue, batch))
        .unwrap_or(0)
}

#[inline]
pub(crate) fn tx(table: &mut PortTable, i: usize, queue: usize, batch: &mut Batch) -> usize {
    table
        .with(i, queue, |p| p.tx_batch(queue, batch))
        .unwrap_or(0)
}
