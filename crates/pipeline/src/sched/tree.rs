//! The class tree and the scheduling loop of one worker.

use super::{
    Placement, PolicySpec, Priority, RateLimit, RoundRobin, SchedClock, TcError, Usage,
    WeightedFair,
};
use crate::counters::Counter;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

/// Index of a class in its tree.
pub type TcId = usize;

#[derive(Debug)]
enum Policy {
    Priority(Priority),
    WeightedFair(WeightedFair),
    RoundRobin(RoundRobin),
    RateLimit(RateLimit, Option<TcId>),
    Leaf(usize),
}

#[derive(Debug)]
struct Class {
    name: String,
    parent: Option<TcId>,
    policy: Policy,
    counters: Arc<TcCounters>,
}

/// Usage a class accounted so far; readable while the worker runs.
#[derive(Debug, Default)]
pub struct TcCounters {
    pub count: Counter,
    pub cycles: Counter,
    pub packets: Counter,
    pub bits: Counter,
    /// Times a rate limit blocked the class.
    pub throttled: Counter,
    /// A rate limit's tokens cut off at its burst cap (units).
    pub tokens_lost: Counter,
}

/// A copy of one class's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TcStats {
    pub name: String,
    pub policy: &'static str,
    pub parent: Option<String>,
    pub count: u64,
    pub cycles: u64,
    pub packets: u64,
    pub bits: u64,
    pub throttled: u64,
    /// Tokens a rate limit lost at its burst cap (its units): the class
    /// was idle, or its worker late.
    pub tokens_lost: u64,
    /// A rate limit's resource and units per second.
    pub limit: Option<(super::Resource, u64)>,
}

/// A tree of traffic classes.
#[derive(Debug)]
pub struct TcTree {
    classes: Vec<Class>,
    /// Class ids by name (building a tree of thousands of classes stays
    /// linear).
    names: HashMap<String, TcId>,
    /// Per class: no runnable leaf below it now.
    blocked: Vec<bool>,
    /// Per class: children not blocked (so a wake-up or a throttle costs
    /// O(depth), not a scan of the siblings).
    runnable_children: Vec<u32>,
    /// Rate-limited classes waiting for tokens: (time, class), earliest
    /// first (a heap: waking costs O(log n) per due class, not a scan of
    /// every throttled class each round).
    wakeups: BinaryHeap<Reverse<(u64, TcId)>>,
}

impl TcTree {
    /// A tree whose root has `policy`.
    pub fn new(root: &str, policy: PolicySpec) -> TcTree {
        let mut t = TcTree {
            classes: Vec::new(),
            names: HashMap::new(),
            blocked: Vec::new(),
            runnable_children: Vec::new(),
            wakeups: BinaryHeap::new(),
        };
        t.push(root, None, make_policy(&policy), None);
        t
    }

    pub fn root(&self) -> TcId {
        0
    }
    pub fn len(&self) -> usize {
        self.classes.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn find(&self, name: &str) -> Option<TcId> {
        self.names.get(name).copied()
    }
    pub fn name(&self, id: TcId) -> &str {
        &self.classes[id].name
    }

    /// Add an inner class under `parent`.
    pub fn add_class(
        &mut self,
        name: &str,
        parent: TcId,
        policy: PolicySpec,
        placement: Placement,
        counters: Option<Arc<TcCounters>>,
    ) -> Result<TcId, TcError> {
        if let PolicySpec::RateLimit { limit: 0, .. } = policy {
            return Err(TcError::ZeroLimit { class: name.into() });
        }
        self.add(name, parent, make_policy(&policy), placement, counters)
    }

    /// Add a leaf that runs task `task` under `parent`.
    pub fn add_leaf(
        &mut self,
        name: &str,
        parent: TcId,
        task: usize,
        placement: Placement,
        counters: Option<Arc<TcCounters>>,
    ) -> Result<TcId, TcError> {
        self.add(name, parent, Policy::Leaf(task), placement, counters)
    }

    fn add(
        &mut self,
        name: &str,
        parent: TcId,
        policy: Policy,
        placement: Placement,
        counters: Option<Arc<TcCounters>>,
    ) -> Result<TcId, TcError> {
        if self.find(name).is_some() {
            return Err(TcError::Duplicate(name.into()));
        }
        let id = self.classes.len();
        let parent_name = self.classes[parent].name.clone();
        match &mut self.classes[parent].policy {
            Policy::Priority(p) => p.add_child(id, name, &placement)?,
            Policy::WeightedFair(p) => p.add_child(id, name, &placement)?,
            Policy::RoundRobin(p) => p.add_child(id),
            Policy::RateLimit(_, child @ None) => *child = Some(id),
            Policy::RateLimit(_, Some(_)) => {
                return Err(TcError::RateLimitFull {
                    class: name.into(),
                    parent: parent_name,
                })
            }
            Policy::Leaf(_) => {
                return Err(TcError::LeafParent {
                    class: name.into(),
                    parent: parent_name,
                })
            }
        }
        self.push(name, Some(parent), policy, counters);
        self.refresh(id);
        Ok(id)
    }

    fn push(
        &mut self,
        name: &str,
        parent: Option<TcId>,
        policy: Policy,
        counters: Option<Arc<TcCounters>>,
    ) {
        self.names
            .entry(name.to_string())
            .or_insert(self.classes.len());
        self.classes.push(Class {
            name: name.to_string(),
            parent,
            policy,
            counters: counters.unwrap_or_default(),
        });
        self.blocked.push(true);
        self.runnable_children.push(0);
    }

    /// Recompute whether `id` can run, and propagate a change upward.
    fn refresh(&mut self, mut id: TcId) {
        loop {
            let blocked = match &self.classes[id].policy {
                Policy::Leaf(_) => false,
                Policy::RateLimit(rl, child) => {
                    rl.throttled() || child.is_none_or(|c| self.blocked[c])
                }
                _ => self.runnable_children[id] == 0,
            };
            if self.blocked[id] == blocked {
                return;
            }
            self.blocked[id] = blocked;
            let Some(p) = self.classes[id].parent else {
                return;
            };
            if blocked {
                self.runnable_children[p] -= 1;
            } else {
                self.runnable_children[p] += 1;
            }
            id = p;
        }
    }

    /// The next leaf to run: (class, task).
    pub fn pick(&mut self) -> Option<(TcId, usize)> {
        let mut id = self.root();
        loop {
            if self.blocked[id] {
                return None;
            }
            let blocked = &self.blocked;
            let runnable = |c: TcId| !blocked[c];
            id = match &mut self.classes[id].policy {
                Policy::Leaf(task) => return Some((id, *task)),
                Policy::Priority(p) => p.pick(runnable)?,
                Policy::WeightedFair(p) => p.pick(runnable)?,
                Policy::RoundRobin(p) => p.pick(runnable)?,
                Policy::RateLimit(_, c) => c.filter(|&c| runnable(c))?,
            };
        }
    }

    /// Account a leaf's run on it and every class up to the root.
    pub fn finish(&mut self, leaf: TcId, usage: &Usage, now: u64) {
        let mut id = leaf;
        loop {
            let c = &self.classes[id].counters;
            c.count.add(usage.count);
            c.cycles.add(usage.cycles);
            c.packets.add(usage.packets);
            c.bits.add(usage.bits);
            if let Policy::RateLimit(rl, _) = &mut self.classes[id].policy {
                let wake = rl.consume(usage, now);
                let lost = rl.take_lost();
                if lost > 0 {
                    self.classes[id].counters.tokens_lost.add(lost);
                }
                if let Some(wake) = wake {
                    self.classes[id].counters.throttled.add(1);
                    self.wakeups.push(Reverse((wake, id)));
                    self.refresh(id);
                }
            }
            let Some(parent) = self.classes[id].parent else {
                return;
            };
            match &mut self.classes[parent].policy {
                Policy::Priority(p) => p.account(id, usage),
                Policy::WeightedFair(p) => p.account(id, usage),
                Policy::RoundRobin(p) => p.account(id, usage),
                _ => {}
            }
            id = parent;
        }
    }

    /// Unblock rate-limited classes whose tokens allow it at `now`.
    pub fn wake(&mut self, now: u64) {
        while let Some(&Reverse((t, id))) = self.wakeups.peek() {
            if t > now {
                return;
            }
            self.wakeups.pop();
            let Policy::RateLimit(rl, _) = &mut self.classes[id].policy else {
                continue;
            };
            let woke = rl.wake(now);
            let lost = rl.take_lost();
            if lost > 0 {
                self.classes[id].counters.tokens_lost.add(lost);
            }
            match woke {
                Ok(()) => self.refresh(id),
                Err(later) => self.wakeups.push(Reverse((later, id))),
            }
        }
    }

    /// The tasks of every leaf.
    pub fn tasks(&self) -> impl Iterator<Item = usize> + '_ {
        self.classes.iter().filter_map(|c| match c.policy {
            Policy::Leaf(t) => Some(t),
            _ => None,
        })
    }

    /// The earliest pending wake-up.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.wakeups.peek().map(|w| w.0 .0)
    }

    /// Whether some leaf can run now.
    pub fn runnable(&self) -> bool {
        !self.blocked[self.root()]
    }

    /// Counters of every class, root first.
    pub fn stats(&self) -> Vec<TcStats> {
        self.classes
            .iter()
            .map(|c| TcStats {
                name: c.name.clone(),
                policy: match c.policy {
                    Policy::Priority(_) => "priority",
                    Policy::WeightedFair(_) => "weighted_fair",
                    Policy::RoundRobin(_) => "round_robin",
                    Policy::RateLimit(..) => "rate_limit",
                    Policy::Leaf(_) => "leaf",
                },
                parent: c.parent.map(|p| self.classes[p].name.clone()),
                count: c.counters.count.get(),
                cycles: c.counters.cycles.get(),
                packets: c.counters.packets.get(),
                bits: c.counters.bits.get(),
                throttled: c.counters.throttled.get(),
                tokens_lost: c.counters.tokens_lost.get(),
                limit: match &c.policy {
                    Policy::RateLimit(rl, _) => Some((rl.resource(), rl.limit())),
                    _ => None,
                },
            })
            .collect()
    }

    /// Make class `id` count into `counters` (kept across commits).
    pub fn set_counters(&mut self, id: TcId, counters: Arc<TcCounters>) {
        self.classes[id].counters = counters;
    }

    /// The shared counters of class `id`.
    pub fn counters(&self, id: TcId) -> Arc<TcCounters> {
        self.classes[id].counters.clone()
    }
}

fn make_policy(spec: &PolicySpec) -> Policy {
    match *spec {
        PolicySpec::Priority => Policy::Priority(Priority::default()),
        PolicySpec::WeightedFair { resource } => Policy::WeightedFair(WeightedFair::new(resource)),
        PolicySpec::RoundRobin => Policy::RoundRobin(RoundRobin::default()),
        PolicySpec::RateLimit {
            resource,
            limit,
            max_burst,
        } => Policy::RateLimit(
            RateLimit::new(resource, limit, max_burst.unwrap_or((limit / 1000).max(1))),
            None,
        ),
    }
}

/// Scheduler-wide counters.
#[derive(Debug, Default)]
pub struct SchedCounters {
    pub rounds: Counter,
    /// Rounds whose task produced no packet.
    pub empty_rounds: Counter,
    /// Time with no runnable class (waiting for a rate limit).
    pub idle_ns: Counter,
    /// Time in rounds (`empty_ns` of it in rounds that moved nothing).
    pub busy_ns: Counter,
    pub empty_ns: Counter,
    /// Time asleep after an idle period (hybrid polling), outside the
    /// rounds; and how many sleeps.
    pub asleep_ns: Counter,
    pub sleeps: Counter,
}

/// A copy of [`SchedCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SchedStats {
    pub rounds: u64,
    pub empty_rounds: u64,
    pub idle_ns: u64,
    pub busy_ns: u64,
    pub empty_ns: u64,
    pub asleep_ns: u64,
    pub sleeps: u64,
}

impl SchedStats {
    /// (busy, polling idle, asleep) in nanoseconds: rounds that moved
    /// packets; empty rounds plus waits for a rate limit; sleeps.
    pub fn split(&self) -> (u64, u64, u64) {
        (
            self.busy_ns.saturating_sub(self.empty_ns),
            self.empty_ns + self.idle_ns,
            self.asleep_ns,
        )
    }
}

/// Longest idle wait before the loop looks around again (pause requests).
const MAX_IDLE_NS: u64 = 1_000_000;

/// A class tree plus its clock: the loop of one worker.
///
/// The clock is read once a round, as BESS reads its TSC: the end of one
/// round is the start of the next (a monotonic-clock read costs about as
/// much as the rest of the round's scheduling). The time between rounds
/// is therefore charged to the next round's class, and busy plus idle
/// time adds up to all the time the loop ran. After a pause, or when
/// time passed outside the rounds, [`Scheduler::resync`] takes the time
/// afresh.
pub struct Scheduler {
    pub tree: TcTree,
    clock: Arc<dyn SchedClock>,
    counters: Arc<SchedCounters>,
    /// When the last round ended.
    last_ns: u64,
}

impl Scheduler {
    pub fn new(tree: TcTree, clock: Arc<dyn SchedClock>) -> Scheduler {
        Scheduler {
            tree,
            last_ns: clock.now_ns(),
            clock,
            counters: Arc::default(),
        }
    }
    pub fn with_counters(mut self, counters: Arc<SchedCounters>) -> Scheduler {
        self.counters = counters;
        self
    }
    pub fn clock(&self) -> &Arc<dyn SchedClock> {
        &self.clock
    }
    pub fn counters(&self) -> Arc<SchedCounters> {
        self.counters.clone()
    }
    pub fn stats(&self) -> SchedStats {
        let c = &self.counters;
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

    /// Read the clock afresh for the next round's start (the loop was
    /// paused, or the time moved outside the rounds).
    pub fn resync(&mut self) {
        self.last_ns = self.clock.now_ns();
    }

    /// One round: pick a leaf and run its task with `run(task, now)`,
    /// which returns (packets, bits) produced; or, if no class can run,
    /// wait for the next wake-up and count the time as idle. Returns
    /// whether a task ran.
    pub fn run_once(&mut self, run: impl FnMut(usize, u64) -> (u64, u64)) -> bool {
        self.run_counted(run).is_some()
    }

    /// [`Scheduler::run_once`], returning the packets the task produced
    /// (`None`: no class could run, the loop waited).
    pub fn run_counted(&mut self, mut run: impl FnMut(usize, u64) -> (u64, u64)) -> Option<u64> {
        let start = self.last_ns;
        let mut now = start;
        self.tree.wake(now);
        let mut next = self.tree.pick();
        if next.is_none() {
            // Nothing runnable as of the last round's end: a rate limit
            // may have refilled since.
            now = self.clock.now_ns();
            self.tree.wake(now);
            next = self.tree.pick();
            if next.is_some() {
                // The time since the last round's end was spent waiting.
                self.counters.idle_ns.add(now.saturating_sub(start));
            }
        }
        let Some((leaf, task)) = next else {
            let until = self
                .tree
                .next_wakeup()
                .unwrap_or(now + MAX_IDLE_NS)
                .min(now + MAX_IDLE_NS);
            self.clock.idle_until(until);
            self.last_ns = self.clock.now_ns();
            self.counters
                .idle_ns
                .add(self.last_ns.saturating_sub(start));
            return None;
        };
        let (packets, bits) = run(task, now);
        let end = self.clock.now_ns();
        self.last_ns = end;
        let usage = Usage {
            count: 1,
            cycles: end.saturating_sub(now),
            packets,
            bits,
        };
        self.tree.finish(leaf, &usage, end);
        self.counters.rounds.add(1);
        self.counters.busy_ns.add(usage.cycles);
        if packets == 0 {
            self.counters.empty_rounds.add(1);
            self.counters.empty_ns.add(usage.cycles);
        }
        Some(packets)
    }

    /// The next rate-limit wake-up, as an instant (sleeps end there).
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        let at = self.tree.next_wakeup()?;
        let now = self.clock.now_ns();
        Some(std::time::Instant::now() + std::time::Duration::from_nanos(at.saturating_sub(now)))
    }

    /// Count a sleep of `ns` outside the rounds, and take the time afresh.
    pub fn slept(&mut self, ns: u64) {
        self.counters.asleep_ns.add(ns);
        self.counters.sleeps.add(1);
        self.resync();
    }
}
