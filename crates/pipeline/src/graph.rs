//! The pipeline graph as the control side holds it: modules by name,
//! connections between gates, workers, traffic classes and task
//! attachments. Committing it (when a [`Pipeline`](crate::Pipeline) is made
//! or edited) checks it, places metadata and splits
//! it into one runtime (modules and gate batches) and one class tree
//! per worker.

use crate::counters::{GateCounters, ModuleCounters};
use crate::hooks::{GateDir, Tap};
use crate::metadata::{assign_offsets_with, Attr, AttrSpec, MetaNode, MetadataError};
use crate::module::{Module, MAX_GATES};
use crate::ports::{Dir, Owners, PortUse, QueueConflict};
use crate::runtime::{Runtime, Slot, Wiring};
use crate::sched::TcCounters;
use crate::sched::{Placement, PolicySpec, TcError, TcStats, TcTree};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Index of a module in its graph.
pub type ModuleId = usize;

/// Most modules one batch may cross after the task that made it (the
/// longest walk through the graph). Deeper graphs are refused when they
/// are committed; each worker keeps one spare batch per level of its
/// deepest walk.
pub const MAX_DEPTH: usize = 1024;

/// Name of the implicit round-robin root class of every worker.
pub const ROOT_TC: &str = "root";

/// Errors in the graph's shape.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("module `{0}` already exists")]
    DuplicateModule(String),
    #[error("no module named `{0}`")]
    NoModule(String),
    #[error("module `{module}` ({class}) has {have} {dir} gate(s); gate {gate} does not exist")]
    NoGate {
        module: String,
        class: &'static str,
        dir: &'static str,
        gate: usize,
        have: usize,
    },
    #[error("output gate {gate} of `{module}` is already connected to `{to}`")]
    GateBusy {
        module: String,
        gate: usize,
        to: String,
    },
    #[error("worker `{0}` already exists")]
    DuplicateWorker(String),
    #[error("no worker named `{0}`")]
    NoWorker(String),
    #[error("no traffic class named `{class}` on worker `{worker}`")]
    NoTc { class: String, worker: String },
    #[error("module `{0}` has no task to attach (only PortInc, QueueInc, Source, Queue and other producers do)")]
    NotATask(String),
    #[error("module `{module}` gets packets from tasks on workers `{a}` and `{b}` ({class}); nfkit runs a module on one worker (one owner per queue, no lock on the data path): give each worker its own copy (duplication) or put a Queue between them (chaining)")]
    TwoWorkers {
        module: String,
        class: &'static str,
        a: String,
        b: String,
    },
    #[error("module `{module}` ({class}) receives packets on worker `{input}` but its task is attached to worker `{task}`, and it cannot span two workers (use a Queue)")]
    CannotSplit {
        module: String,
        class: &'static str,
        input: String,
        task: String,
    },
    #[error(transparent)]
    QueueOwners(Box<QueueConflict>),
    #[error("modules {} form a loop with no task (Queue) in it: packets would circle until dropped; break the loop or put a Queue in it", .path.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(" -> "))]
    Loop { path: Vec<String> },
    #[error("a batch from task `{task}` would cross more than {limit} modules (the walk reaches `{module}` at depth {depth}); split the chain with a Queue")]
    TooDeep {
        task: String,
        module: String,
        depth: usize,
        limit: usize,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Tc(#[from] TcError),
}

pub(crate) struct Node {
    pub name: String,
    pub class: &'static str,
    /// `None` while a worker holds it.
    pub module: Option<Box<dyn Module>>,
    pub attrs: Vec<AttrSpec>,
    pub is_task: bool,
    /// Per output gate up to the highest one connected or hooked (the
    /// module may have more, up to `max_ogates`: a gate beyond this is
    /// unconnected, and what the module sends there is a counted drop).
    pub ogates: Vec<Option<(ModuleId, usize)>>,
    /// The gates the module has ([`Module::igates`], [`Module::ogates`],
    /// at most [`MAX_GATES`]); the per-gate vectors grow as gates are
    /// used, so a module with BESS's 8,192 gates costs the worker only
    /// the gates it uses.
    pub max_igates: usize,
    pub max_ogates: usize,
    pub counters: Arc<ModuleCounters>,
    /// Counters of the task half when the module spans two workers (each
    /// counter has one writing thread; statistics add both sets).
    pub half_counters: Arc<ModuleCounters>,
    pub igate_counters: Vec<Arc<GateCounters>>,
    pub ogate_counters: Vec<Arc<GateCounters>>,
    /// Gate hooks (`None`: no hook, the usual case).
    pub igate_taps: Vec<Option<Tap>>,
    pub ogate_taps: Vec<Option<Tap>>,
    /// The module's port uses ([`Module::ports`]), as of when it was
    /// last home: a layout needs them while a worker holds the module.
    pub uses: Vec<PortUse>,
    /// Whether the module can span two workers ([`Module::task_half`]).
    pub splittable: bool,
}

/// Which part of its module a slot runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Input side and task, on one worker.
    Whole,
    /// The input side of a module whose task runs on another worker. It
    /// hands packets on only through its task half, so its output gates
    /// lead nowhere here (each gate counter has one writing thread).
    InputHalf,
    /// The task of a module whose input side runs on another worker,
    /// counting into the module's second set of counters.
    TaskHalf,
}

impl Node {
    /// Make room for gates 0..`n` in direction `dir` (never more than
    /// the module has; never shrinks).
    fn grow(&mut self, dir: GateDir, n: usize) {
        match dir {
            GateDir::In => {
                let n = n.min(self.max_igates);
                while self.igate_counters.len() < n {
                    self.igate_counters.push(Arc::default());
                    self.igate_taps.push(None);
                }
            }
            GateDir::Out => {
                let n = n.min(self.max_ogates);
                while self.ogates.len() < n {
                    self.ogates.push(None);
                    self.ogate_counters.push(Arc::default());
                    self.ogate_taps.push(None);
                }
            }
        }
    }

    /// Where the gates of `part` of this module lead, and its counters.
    fn wiring(&self, part: Part) -> Wiring {
        Wiring {
            targets: match part {
                Part::InputHalf => vec![None; self.ogates.len()].into(),
                Part::Whole | Part::TaskHalf => self.ogates.clone().into(),
            },
            counters: match part {
                Part::TaskHalf => self.half_counters.clone(),
                Part::Whole | Part::InputHalf => self.counters.clone(),
            },
            igate_counters: self.igate_counters.clone().into(),
            ogate_counters: self.ogate_counters.clone().into(),
            igate_taps: self.igate_taps.clone().into(),
            ogate_taps: match part {
                Part::InputHalf => vec![None; self.ogates.len()].into(),
                Part::Whole | Part::TaskHalf => self.ogate_taps.clone().into(),
            },
        }
    }
}

pub(crate) struct WorkerSpec {
    pub name: String,
    pub core: Option<usize>,
    pub root: Arc<TcCounters>,
}

pub(crate) struct TcSpec {
    pub name: String,
    pub worker: usize,
    pub parent: String,
    pub policy: PolicySpec,
    pub placement: Placement,
    pub counters: Arc<TcCounters>,
}

pub(crate) struct Attachment {
    pub module: ModuleId,
    pub worker: usize,
    pub parent: String,
    pub placement: Placement,
    pub counters: Arc<TcCounters>,
    /// Made by the graph for a task nobody attached: it follows the
    /// worker that feeds what the task feeds (see `place_implicit`).
    pub implicit: bool,
}

/// The pipeline's modules, connections, workers and class trees.
#[derive(Default)]
pub struct Graph {
    pub(crate) nodes: Vec<Option<Node>>,
    names: HashMap<String, ModuleId>,
    pub(crate) workers: Vec<WorkerSpec>,
    pub(crate) tcs: Vec<TcSpec>,
    pub(crate) attachments: Vec<Attachment>,
    /// See [`Graph::allow_unwritten_reads`].
    unwritten_reads_ok: bool,
    /// Modules with an entry in `attachments`.
    attached: HashSet<ModuleId>,
    /// Index in `tcs` of the first class of each name.
    tc_names: HashMap<String, usize>,
    /// Per worker: the class tree as built so far, to check each new
    /// class or attachment without rebuilding it (`None`: rebuild).
    scratch: Vec<Option<TcTree>>,
}

/// What was just pushed, for [`Graph::check_tree`].
enum Added {
    Tc,
    Attachment,
}

/// Where everything runs, as [`Graph::layout`] decided it.
pub(crate) struct Layout {
    /// Per module: its metadata attributes' offsets.
    attrs: Vec<Vec<Attr>>,
    /// The longest walk a batch takes.
    depth: usize,
    /// Per module: the worker whose tasks feed it.
    input_worker: Vec<Option<usize>>,
    /// Per task module: the worker its task runs on.
    task_worker: HashMap<ModuleId, usize>,
    owners: Owners,
    /// Per worker: its class tree (taken by [`Graph::plans`]).
    trees: Vec<Option<TcTree>>,
}

/// What one worker runs after a commit.
pub(crate) struct WorkerPlan {
    pub runtime: Runtime,
    pub tree: TcTree,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Add a module under a unique name.
    pub fn add_module(
        &mut self,
        name: &str,
        module: Box<dyn Module>,
    ) -> Result<ModuleId, GraphError> {
        if self.names.contains_key(name) {
            return Err(GraphError::DuplicateModule(name.into()));
        }
        let id = self.nodes.len();
        let mut module = module;
        let uses = module.ports();
        let splittable = module.task_half().is_some();
        let max_igates = module.igates().min(MAX_GATES);
        let max_ogates = module.ogates().min(MAX_GATES);
        let mut node = Node {
            name: name.into(),
            class: module.class(),
            attrs: module.attrs(),
            is_task: module.is_task(),
            module: Some(module),
            ogates: Vec::new(),
            max_igates,
            max_ogates,
            counters: Arc::default(),
            half_counters: Arc::default(),
            igate_counters: Vec::new(),
            ogate_counters: Vec::new(),
            igate_taps: Vec::new(),
            ogate_taps: Vec::new(),
            uses,
            splittable,
        };
        // Gate 0 each way, as every module that has gates uses it.
        node.grow(GateDir::In, max_igates.min(1));
        node.grow(GateDir::Out, max_ogates.min(1));
        self.nodes.push(Some(node));
        self.names.insert(name.into(), id);
        Ok(id)
    }

    /// Remove a module and every connection to or from it. Returns the
    /// module, or `None` while a running worker holds it (inside
    /// [`Pipeline::edit`](crate::Pipeline::edit)): that worker's plan
    /// changes, so the edit pauses it and the module is dropped then.
    pub fn remove_module(&mut self, name: &str) -> Result<Option<Box<dyn Module>>, GraphError> {
        let id = self.id(name)?;
        for n in self.nodes.iter_mut().flatten() {
            for g in n.ogates.iter_mut() {
                if matches!(g, Some((to, _)) if *to == id) {
                    *g = None;
                }
            }
        }
        if self.attached.remove(&id) {
            self.attachments.retain(|a| a.module != id);
            self.scratch.clear();
        }
        self.names.remove(name);
        let node = self.nodes[id]
            .take()
            .ok_or_else(|| GraphError::NoModule(name.into()))?;
        Ok(node.module)
    }

    pub fn id(&self, name: &str) -> Result<ModuleId, GraphError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| GraphError::NoModule(name.into()))
    }

    pub(crate) fn node(&self, id: ModuleId) -> &Node {
        self.nodes[id].as_ref().expect("live module id")
    }

    /// Names of all modules, in the order they were added.
    pub fn module_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .flatten()
            .map(|n| n.name.clone())
            .collect()
    }

    /// The module's class.
    pub fn class_of(&self, name: &str) -> Result<&'static str, GraphError> {
        Ok(self.node(self.id(name)?).class)
    }

    /// Connect output gate `ogate` of `from` to input gate `igate` of `to`.
    pub fn connect(
        &mut self,
        from: &str,
        ogate: usize,
        to: &str,
        igate: usize,
    ) -> Result<(), GraphError> {
        let (f, t) = (self.id(from)?, self.id(to)?);
        let tn = self.node(t);
        if igate >= tn.max_igates {
            return Err(GraphError::NoGate {
                module: to.into(),
                class: tn.class,
                dir: "input",
                gate: igate,
                have: tn.max_igates,
            });
        }
        let fnode = self.node(f);
        if ogate >= fnode.max_ogates {
            return Err(GraphError::NoGate {
                module: from.into(),
                class: fnode.class,
                dir: "output",
                gate: ogate,
                have: fnode.max_ogates,
            });
        }
        if let Some(n) = self.nodes[t].as_mut() {
            n.grow(GateDir::In, igate + 1);
        }
        let busy = self.nodes[f]
            .as_ref()
            .and_then(|n| n.ogates.get(ogate).copied().flatten())
            .map(|(other, _)| self.node(other).name.clone());
        let fnode = self.nodes[f].as_mut().expect("live module id");
        fnode.grow(GateDir::Out, ogate + 1);
        match fnode.ogates.get_mut(ogate) {
            None => Err(GraphError::NoGate {
                module: from.into(),
                class: fnode.class,
                dir: "output",
                gate: ogate,
                have: fnode.ogates.len(),
            }),
            Some(Some(_)) => Err(GraphError::GateBusy {
                module: from.into(),
                gate: ogate,
                to: busy.unwrap_or_default(),
            }),
            Some(slot) => {
                *slot = Some((t, igate));
                Ok(())
            }
        }
    }

    /// Disconnect output gate `ogate` of `from`.
    pub fn disconnect(&mut self, from: &str, ogate: usize) -> Result<(), GraphError> {
        let f = self.id(from)?;
        if let Some(g) = self.nodes[f].as_mut().and_then(|n| n.ogates.get_mut(ogate)) {
            *g = None;
        }
        Ok(())
    }

    /// Set (or with `None` remove) the hook on one gate of `module`;
    /// returns the hook it replaces. Applied at the next commit
    /// ([`Pipeline::edit`](crate::Pipeline::edit)).
    pub fn set_gate_tap(
        &mut self,
        module: &str,
        dir: GateDir,
        gate: usize,
        tap: Option<Tap>,
    ) -> Result<Option<Tap>, GraphError> {
        let id = self.id(module)?;
        let n = self.nodes[id].as_mut().expect("a module id names a node");
        let have = match dir {
            GateDir::In => n.max_igates,
            GateDir::Out => n.max_ogates,
        };
        if gate < have && tap.is_some() {
            n.grow(dir, gate + 1);
        }
        let (taps, dir_name) = match dir {
            GateDir::In => (&mut n.igate_taps, "input"),
            GateDir::Out => (&mut n.ogate_taps, "output"),
        };
        if gate >= have {
            return Err(GraphError::NoGate {
                module: module.into(),
                class: n.class,
                dir: dir_name,
                gate,
                have,
            });
        }
        let Some(slot) = taps.get_mut(gate) else {
            return Ok(None); // removing the hook of a gate never used
        };
        Ok(std::mem::replace(slot, tap))
    }

    /// How many gates of `module` on side `dir` are in use: gates 0..N
    /// cover every one connected or hooked (BESS's "every gate" of a
    /// module is the gates it has made so far).
    pub fn gates_in_use(&self, module: &str, dir: GateDir) -> Result<usize, GraphError> {
        let n = self.node(self.id(module)?);
        Ok(match dir {
            GateDir::In => n.igate_counters.len(),
            GateDir::Out => n.ogates.len(),
        })
    }

    /// Every connected output gate of `from`: (output gate, module,
    /// input gate), in gate order.
    pub fn targets(&self, from: &str) -> Result<Vec<(usize, String, usize)>, GraphError> {
        let n = self.node(self.id(from)?);
        Ok(n.ogates
            .iter()
            .enumerate()
            .filter_map(|(g, t)| t.map(|(t, ig)| (g, self.node(t).name.clone(), ig)))
            .collect())
    }

    /// Where output gate `ogate` of `from` leads: (module, input gate).
    pub fn target(&self, from: &str, ogate: usize) -> Result<Option<(String, usize)>, GraphError> {
        let n = self.node(self.id(from)?);
        Ok(n.ogates
            .get(ogate)
            .copied()
            .flatten()
            .map(|(t, ig)| (self.node(t).name.clone(), ig)))
    }

    /// Add a worker, optionally pinned to `core`. Returns its index.
    pub fn add_worker(&mut self, name: &str, core: Option<usize>) -> Result<usize, GraphError> {
        if self.workers.iter().any(|w| w.name == name) {
            return Err(GraphError::DuplicateWorker(name.into()));
        }
        self.workers.push(WorkerSpec {
            name: name.into(),
            core,
            root: Arc::default(),
        });
        Ok(self.workers.len() - 1)
    }

    /// Pin worker `name` to `core` (or leave it where the kernel puts
    /// it); a running worker moves there when the edit restarts it.
    pub fn set_worker_core(&mut self, name: &str, core: Option<usize>) -> Result<(), GraphError> {
        let w = self.worker_index(name)?;
        self.workers[w].core = core;
        Ok(())
    }

    pub fn worker_index(&self, name: &str) -> Result<usize, GraphError> {
        self.workers
            .iter()
            .position(|w| w.name == name)
            .ok_or_else(|| GraphError::NoWorker(name.into()))
    }

    fn ensure_worker(&mut self) {
        if self.workers.is_empty() {
            self.workers.push(WorkerSpec {
                name: "w0".into(),
                core: None,
                root: Arc::default(),
            });
        }
    }

    fn check_parent(&self, worker: usize, parent: &str) -> Result<(), GraphError> {
        let first_here = self
            .tc_names
            .get(parent)
            .is_some_and(|&i| self.tcs[i].worker == worker);
        if parent == ROOT_TC
            || first_here
            || self
                .tcs
                .iter()
                .any(|t| t.worker == worker && t.name == parent)
        {
            return Ok(());
        }
        Err(GraphError::NoTc {
            class: parent.into(),
            worker: self.workers[worker].name.clone(),
        })
    }

    /// Add a traffic class under `parent` (a class of the same worker, or
    /// [`ROOT_TC`]). `worker` defaults to the first worker.
    pub fn add_tc(
        &mut self,
        name: &str,
        worker: Option<&str>,
        parent: &str,
        policy: PolicySpec,
        placement: Placement,
    ) -> Result<(), GraphError> {
        self.ensure_worker();
        let w = match worker {
            Some(w) => self.worker_index(w)?,
            None => self.tc_worker(parent).unwrap_or(0),
        };
        self.check_parent(w, parent)?;
        // Add it to the worker's scratch tree to check the policy and
        // placement now.
        self.tcs.push(TcSpec {
            name: name.into(),
            worker: w,
            parent: parent.into(),
            policy,
            placement,
            counters: Arc::default(),
        });
        if let Err(e) = self.check_tree(w, Added::Tc) {
            self.tcs.pop();
            return Err(e);
        }
        self.tc_names
            .entry(name.to_string())
            .or_insert(self.tcs.len() - 1);
        Ok(())
    }

    /// Change a class's policy or parameters (a new rate, a new
    /// resource), keeping its place and counters.
    pub fn set_tc_policy(&mut self, name: &str, policy: PolicySpec) -> Result<(), GraphError> {
        let i = self
            .tc_names
            .get(name)
            .copied()
            .ok_or_else(|| GraphError::NoTc {
                class: name.into(),
                worker: "any".into(),
            })?;
        let old = std::mem::replace(&mut self.tcs[i].policy, policy);
        self.scratch.clear();
        if let Err(e) = self.tree_for(self.tcs[i].worker) {
            self.tcs[i].policy = old;
            return Err(e);
        }
        Ok(())
    }

    /// Move traffic class `name` (with the classes and tasks under it)
    /// under `parent` (a class of the same worker, or [`ROOT_TC`]), with
    /// `placement` there (its priority or share under the new parent).
    /// Refused if `parent` is the class itself or under it.
    pub fn set_tc_parent(
        &mut self,
        name: &str,
        parent: &str,
        placement: Placement,
    ) -> Result<(), GraphError> {
        let no_tc = |class: &str, worker: &str| GraphError::NoTc {
            class: class.into(),
            worker: worker.into(),
        };
        let i = self
            .tc_names
            .get(name)
            .copied()
            .ok_or_else(|| no_tc(name, "any"))?;
        let w = self.tcs[i].worker;
        self.check_parent(w, parent)?;
        // Walk up from the new parent: the class must not be above it.
        let mut up = parent.to_string();
        while up != ROOT_TC {
            if up == name {
                return Err(GraphError::Tc(TcError::Placement {
                    class: name.into(),
                    msg: format!("cannot move it under `{parent}`, which is under it (a loop)"),
                }));
            }
            match self.tcs.iter().find(|t| t.worker == w && t.name == up) {
                Some(t) => up = t.parent.clone(),
                None => break,
            }
        }
        let old = (
            std::mem::replace(&mut self.tcs[i].parent, parent.to_string()),
            std::mem::replace(&mut self.tcs[i].placement, placement),
        );
        self.order_tcs();
        if let Err(e) = self.tree_for(w) {
            let j = self.tc_names[name];
            self.tcs[j].parent = old.0;
            self.tcs[j].placement = old.1;
            self.order_tcs();
            return Err(e);
        }
        Ok(())
    }

    /// Put every class after its parent (trees are built in this
    /// order), keeping the order of classes at one depth; rebuild the
    /// name index.
    fn order_tcs(&mut self) {
        let depth = |t: &TcSpec| {
            let mut d = 0;
            let mut up = t.parent.as_str();
            while up != ROOT_TC && d <= self.tcs.len() {
                match self
                    .tcs
                    .iter()
                    .find(|x| x.worker == t.worker && x.name == up)
                {
                    Some(x) => up = x.parent.as_str(),
                    None => break,
                }
                d += 1;
            }
            d
        };
        let depths: Vec<usize> = self.tcs.iter().map(depth).collect();
        let mut order: Vec<usize> = (0..self.tcs.len()).collect();
        order.sort_by_key(|&i| depths[i]);
        let mut old: Vec<Option<TcSpec>> = std::mem::take(&mut self.tcs)
            .into_iter()
            .map(Some)
            .collect();
        self.tcs = order.into_iter().filter_map(|i| old[i].take()).collect();
        self.tc_names.clear();
        for (j, t) in self.tcs.iter().enumerate() {
            self.tc_names.entry(t.name.clone()).or_insert(j);
        }
        self.scratch.clear();
    }

    /// The worker a traffic class belongs to.
    pub fn tc_worker(&self, tc: &str) -> Option<usize> {
        self.tc_names.get(tc).map(|&i| self.tcs[i].worker)
    }

    /// Attach `module`'s task under class `parent` (or [`ROOT_TC`]) of
    /// `worker` (default: the class's worker, else the first worker).
    pub fn attach(
        &mut self,
        module: &str,
        worker: Option<&str>,
        parent: &str,
        placement: Placement,
    ) -> Result<(), GraphError> {
        self.ensure_worker();
        let id = self.id(module)?;
        if !self.node(id).is_task {
            return Err(GraphError::NotATask(module.into()));
        }
        let w = match worker {
            Some(w) => self.worker_index(w)?,
            None => self.tc_worker(parent).unwrap_or(0),
        };
        self.check_parent(w, parent)?;
        let mut counters = Arc::default();
        if self.attached.contains(&id) {
            // Moving a task: its old leaf goes, trees are rebuilt.
            if let Some(i) = self.attachments.iter().position(|a| a.module == id) {
                counters = self.attachments.remove(i).counters;
            }
            self.scratch.clear();
        }
        self.attachments.push(Attachment {
            module: id,
            worker: w,
            parent: parent.into(),
            placement,
            counters,
            implicit: false,
        });
        if let Err(e) = self.check_tree(w, Added::Attachment) {
            self.attachments.pop();
            self.attached.remove(&id);
            return Err(e);
        }
        self.attached.insert(id);
        Ok(())
    }

    /// Check worker `w`'s class tree with the class or attachment just
    /// pushed: added to the kept scratch tree (each check costs one
    /// addition, so building thousands of classes stays linear), or the
    /// tree rebuilt when none is kept.
    fn check_tree(&mut self, w: usize, added: Added) -> Result<(), GraphError> {
        if self.scratch.len() < self.workers.len() {
            self.scratch.resize_with(self.workers.len(), || None);
        }
        let Some(mut tree) = self.scratch[w].take() else {
            self.scratch[w] = Some(self.tree_for(w)?);
            return Ok(());
        };
        // On an error the tree is dropped (rebuilt by the next check).
        match added {
            Added::Tc => {
                let t = self.tcs.last().expect("just pushed");
                let parent = tree.find(&t.parent).unwrap_or(0);
                tree.add_class(
                    &t.name,
                    parent,
                    t.policy,
                    t.placement,
                    Some(t.counters.clone()),
                )?;
            }
            Added::Attachment => {
                let a = self.attachments.last().expect("just pushed");
                let parent = tree.find(&a.parent).unwrap_or(0);
                tree.add_leaf(
                    &self.node(a.module).name,
                    parent,
                    a.module,
                    a.placement,
                    Some(a.counters.clone()),
                )?;
            }
        }
        self.scratch[w] = Some(tree);
        Ok(())
    }

    /// The class tree of worker `w`; a leaf's task number is its
    /// module's id.
    fn tree_for(&self, w: usize) -> Result<TcTree, GraphError> {
        let mut tree = TcTree::new(ROOT_TC, PolicySpec::RoundRobin);
        tree.set_counters(tree.root(), self.workers[w].root.clone());
        for t in self.tcs.iter().filter(|t| t.worker == w) {
            let parent = tree.find(&t.parent).unwrap_or(0);
            tree.add_class(
                &t.name,
                parent,
                t.policy,
                t.placement,
                Some(t.counters.clone()),
            )?;
        }
        for a in self.attachments.iter().filter(|a| a.worker == w) {
            let parent = tree.find(&a.parent).unwrap_or(0);
            let name = &self.node(a.module).name;
            tree.add_leaf(
                name,
                parent,
                a.module,
                a.placement,
                Some(a.counters.clone()),
            )?;
        }
        Ok(tree)
    }

    /// Counters of worker `w`'s classes, root first, then classes and
    /// task leaves in the order they were added.
    pub fn tc_stats(&self, w: usize) -> Vec<TcStats> {
        let stat =
            |name: &str, policy: Option<&PolicySpec>, parent: Option<&str>, c: &TcCounters| {
                TcStats {
                    name: name.to_string(),
                    policy: policy.map_or("leaf", PolicySpec::name),
                    limit: match policy {
                        Some(&PolicySpec::RateLimit {
                            resource, limit, ..
                        }) => Some((resource, limit)),
                        _ => None,
                    },
                    parent: parent.map(str::to_string),
                    count: c.count.get(),
                    cycles: c.cycles.get(),
                    packets: c.packets.get(),
                    bits: c.bits.get(),
                    throttled: c.throttled.get(),
                    tokens_lost: c.tokens_lost.get(),
                }
            };
        let Some(spec) = self.workers.get(w) else {
            return Vec::new();
        };
        let mut out = vec![stat(
            ROOT_TC,
            Some(&PolicySpec::RoundRobin),
            None,
            &spec.root,
        )];
        for t in self.tcs.iter().filter(|t| t.worker == w) {
            out.push(stat(&t.name, Some(&t.policy), Some(&t.parent), &t.counters));
        }
        for a in self.attachments.iter().filter(|a| a.worker == w) {
            if let Some(n) = self.nodes[a.module].as_ref() {
                out.push(stat(&n.name, None, Some(&a.parent), &a.counters));
            }
        }
        out
    }

    /// Check the graph and decide where everything runs (metadata
    /// offsets, the worker of each module and port queue, the class
    /// trees) without touching a module: running workers may hold them.
    pub(crate) fn layout(&mut self) -> Result<Layout, GraphError> {
        self.ensure_worker();
        let attrs = self.metadata_offsets()?;
        // Unattached tasks run under the first worker's root.
        let unattached: Vec<ModuleId> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().filter(|n| n.is_task).map(|_| i))
            .filter(|i| !self.attached.contains(i))
            .collect();
        if !unattached.is_empty() {
            self.scratch.clear();
        }
        for id in unattached {
            self.attached.insert(id);
            self.attachments.push(Attachment {
                module: id,
                worker: 0,
                parent: ROOT_TC.into(),
                placement: Placement::default(),
                counters: Arc::default(),
                implicit: true,
            });
        }
        self.place_implicit();
        let depth = self.check_walks()?;
        let input_worker = self.input_workers()?;
        let task_worker: HashMap<ModuleId, usize> = self
            .attachments
            .iter()
            .map(|a| (a.module, a.worker))
            .collect();
        // Check every task can run where it is attached before moving anything.
        for (&id, &tw) in &task_worker {
            if let Some(iw) = input_worker[id].filter(|&iw| iw != tw) {
                let n = self.node(id);
                if !n.splittable {
                    return Err(GraphError::CannotSplit {
                        module: n.name.clone(),
                        class: n.class,
                        input: self.workers[iw].name.clone(),
                        task: self.workers[tw].name.clone(),
                    });
                }
            }
        }
        let owners = self.port_owners(&input_worker, &task_worker)?;
        let mut trees = Vec::new();
        for w in 0..self.workers.len() {
            trees.push(Some(self.tree_for(w)?));
        }
        Ok(Layout {
            attrs,
            depth,
            input_worker,
            task_worker,
            owners,
            trees,
        })
    }

    /// The worker whose runtime holds module `id` (its input side, else
    /// its task), or none: a module no task feeds and with no task of
    /// its own never runs, and rests in the graph.
    pub(crate) fn home(layout: &Layout, id: ModuleId) -> Option<usize> {
        layout
            .input_worker
            .get(id)
            .copied()
            .flatten()
            .or(layout.task_worker.get(&id).copied())
    }

    /// Per worker, a text that differs whenever what the worker runs
    /// differs: its modules and halves with their wiring, metadata
    /// offsets, hooks and port claims, and its class tree. A running
    /// worker whose fingerprint an edit leaves alone runs on untouched.
    pub(crate) fn fingerprints(&self, layout: &Layout) -> Vec<String> {
        use std::fmt::Write;
        let mut fps = vec![String::new(); self.workers.len()];
        let ptr = |a: &Option<Tap>| {
            a.as_ref()
                .map_or(0, |t| Arc::as_ptr(t) as *const u8 as usize)
        };
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node.as_ref() else { continue };
            let Some(home) = Graph::home(layout, id) else {
                continue;
            };
            let task = layout.task_worker.get(&id).copied().filter(|&t| t != home);
            let mut entry = |w: usize, part: Part| {
                let Some(fp) = fps.get_mut(w) else { return };
                let wiring = node.wiring(part);
                let counters = Arc::as_ptr(&wiring.counters) as usize;
                let _ = write!(
                    fp,
                    "{id}:{part:?} c{counters:x} t{:?} a{:?} i{:?} o{:?} p",
                    wiring.targets,
                    layout.attrs[id],
                    wiring.igate_taps.iter().map(ptr).collect::<Vec<_>>(),
                    wiring.ogate_taps.iter().map(ptr).collect::<Vec<_>>(),
                );
                for u in &node.uses {
                    let (claim, locked) = layout.owners.plan_of(&u.port, w);
                    let _ = write!(
                        fp,
                        "[{:x} {:?} {:?} {} {claim:?} {locked}]",
                        u.port.id(),
                        u.dir,
                        u.queues,
                        layout.owners.owns(u, w)
                    );
                }
                fp.push('\n');
            };
            match task {
                Some(t) => {
                    entry(home, Part::InputHalf);
                    entry(t, Part::TaskHalf);
                }
                None => entry(home, Part::Whole),
            }
        }
        for (w, fp) in fps.iter_mut().enumerate() {
            let spec = &self.workers[w];
            let _ = writeln!(
                fp,
                "worker {} {:?} {:x}",
                spec.name,
                spec.core,
                Arc::as_ptr(&spec.root) as usize
            );
            for t in self.tcs.iter().filter(|t| t.worker == w) {
                let _ = writeln!(
                    fp,
                    "tc {} < {} {:?} {:?} {:x}",
                    t.name,
                    t.parent,
                    t.policy,
                    t.placement,
                    Arc::as_ptr(&t.counters) as usize
                );
            }
            for a in self.attachments.iter().filter(|a| a.worker == w) {
                let _ = writeln!(
                    fp,
                    "leaf {} < {} {:?} {:x}",
                    a.module,
                    a.parent,
                    a.placement,
                    Arc::as_ptr(&a.counters) as usize
                );
            }
        }
        fps
    }

    /// Modules whose input side and task run on two workers: (input
    /// worker, task worker). The task half is made from the module, so
    /// a change of either worker restarts both.
    pub(crate) fn split_pairs(&self, layout: &Layout) -> Vec<(usize, usize)> {
        layout
            .task_worker
            .iter()
            .filter_map(|(&id, &t)| {
                let iw = layout.input_worker.get(id).copied().flatten()?;
                (iw != t && self.nodes[id].is_some()).then_some((iw, t))
            })
            .collect()
    }

    /// The plans of the workers `which` selects, each module moving out
    /// of the graph into its worker's runtime. The modules of those
    /// workers must be home (after [`Graph::restore`]).
    pub(crate) fn plans(
        &mut self,
        mut layout: Layout,
        which: impl Fn(usize) -> bool,
    ) -> Vec<Option<WorkerPlan>> {
        let mut plans: Vec<Option<WorkerPlan>> = (0..self.workers.len())
            .map(|w| {
                let tree = layout.trees[w].take().filter(|_| which(w))?;
                Some(WorkerPlan {
                    runtime: Runtime::new(self.nodes.len(), layout.depth),
                    tree,
                })
            })
            .collect();
        for id in 0..self.nodes.len() {
            let Some(home) = Graph::home(&layout, id) else {
                continue;
            };
            let task = layout.task_worker.get(&id).copied();
            let Some(node) = self.nodes[id].as_mut() else {
                continue;
            };
            let attrs = &layout.attrs[id];
            let mut part = Part::Whole;
            if let Some(tw) = task.filter(|&tw| tw != home) {
                part = Part::InputHalf;
                if let Some(plan) = plans[tw].as_mut() {
                    let half = node
                        .module
                        .as_mut()
                        .expect("the input worker of a split module restarts with its task worker")
                        .task_half()
                        .expect("checked in the layout");
                    let rt = &mut plan.runtime;
                    let bind = rt.bind_ports(&layout.owners, &half.ports(), tw);
                    let wiring = node.wiring(Part::TaskHalf);
                    rt.slots[id] = Some(Slot::new(half, attrs.clone(), wiring, true, bind));
                }
            }
            let Some(plan) = plans[home].as_mut() else {
                continue;
            };
            let module = node.module.take().expect("modules are home at commit");
            let rt = &mut plan.runtime;
            let bind = rt.bind_ports(&layout.owners, &node.uses, home);
            rt.slots[id] = Some(Slot::new(
                module,
                attrs.clone(),
                node.wiring(part),
                false,
                bind,
            ));
        }
        plans
    }

    /// Give every port queue its one polling worker: a receive use runs
    /// where the module's task runs, a transmit use where its input
    /// side runs. Two workers on one queue are refused, naming both.
    fn port_owners(
        &self,
        input_worker: &[Option<usize>],
        task_worker: &HashMap<ModuleId, usize>,
    ) -> Result<Owners, GraphError> {
        let mut owners = Owners::default();
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node.as_ref() else { continue };
            let task = task_worker.get(&id).copied();
            for u in &node.uses {
                // A module that is never fed and has no task never polls.
                let Some(w) = (match u.dir {
                    Dir::Rx if node.is_task => task,
                    _ => input_worker[id].or(task),
                }) else {
                    continue;
                };
                owners
                    .add(&node.name, w, u, |w| self.workers[w].name.clone())
                    .map_err(GraphError::QueueOwners)?;
            }
        }
        Ok(owners)
    }

    /// Put modules back from worker runtimes (after a pause).
    pub(crate) fn restore(&mut self, runtimes: Vec<Runtime>) {
        for rt in runtimes {
            for (id, slot) in rt.slots.into_iter().enumerate() {
                let Some(slot) = slot else { continue };
                if slot.is_half {
                    continue;
                }
                if let Some(node) = self.nodes.get_mut(id).and_then(|n| n.as_mut()) {
                    node.uses = slot.module.ports();
                    node.module = Some(slot.module);
                }
            }
        }
    }

    fn metadata_offsets(&self) -> Result<Vec<Vec<Attr>>, GraphError> {
        let meta: Vec<MetaNode> = self
            .nodes
            .iter()
            .map(|n| match n {
                Some(n) => MetaNode {
                    name: n.name.clone(),
                    attrs: n.attrs.clone(),
                    next: n.ogates.iter().flatten().map(|&(t, _)| t).collect(),
                },
                None => MetaNode {
                    name: String::new(),
                    attrs: Vec::new(),
                    next: Vec::new(),
                },
            })
            .collect();
        Ok(assign_offsets_with(&meta, self.unwritten_reads_ok)?)
    }

    /// Put each task the graph attached by itself (nobody attached it)
    /// on the worker whose attached tasks already feed what it feeds,
    /// if any, else where it is (the first worker). BESS attaches such
    /// orphans only when the workers resume, so a script may attach a
    /// module's other feeders to another worker first (BESS's qtest
    /// sample); a task attached on purpose is never moved.
    fn place_implicit(&mut self) {
        if self.workers.len() < 2 || !self.attachments.iter().any(|a| a.implicit) {
            return;
        }
        let mut owner: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut stack: Vec<ModuleId> = Vec::new();
        let mut mark = |g: &Graph, from: ModuleId, w: usize, owner: &mut Vec<Option<usize>>| {
            stack.extend(g.node(from).ogates.iter().flatten().map(|&(t, _)| t));
            while let Some(m) = stack.pop() {
                if owner[m].is_some() {
                    continue;
                }
                owner[m] = Some(w);
                let n = g.node(m);
                if !n.is_task {
                    stack.extend(n.ogates.iter().flatten().map(|&(t, _)| t));
                }
            }
        };
        for a in self.attachments.iter().filter(|a| !a.implicit) {
            mark(self, a.module, a.worker, &mut owner);
        }
        let mut moved = false;
        for i in 0..self.attachments.len() {
            let a = &self.attachments[i];
            if !a.implicit {
                continue;
            }
            let (module, was) = (a.module, a.worker);
            // The first fed module that has an owner decides.
            let mut seen = HashSet::new();
            let mut walk: Vec<ModuleId> = self
                .node(module)
                .ogates
                .iter()
                .flatten()
                .map(|&(t, _)| t)
                .collect();
            let mut found = None;
            while let Some(m) = walk.pop() {
                if !seen.insert(m) {
                    continue;
                }
                if let Some(w) = owner[m] {
                    found = Some(w);
                    break;
                }
                let n = self.node(m);
                if !n.is_task {
                    walk.extend(n.ogates.iter().flatten().map(|&(t, _)| t));
                }
            }
            let w = found.unwrap_or(was);
            if w != was {
                self.attachments[i].worker = w;
                moved = true;
            }
            mark(self, module, w, &mut owner);
        }
        if moved {
            self.scratch.clear();
        }
    }

    /// For each module, the worker whose tasks push packets into it.
    /// Each module is entered once per worker at most (a second worker
    /// is an error), so this is linear in modules and connections.
    fn input_workers(&self) -> Result<Vec<Option<usize>>, GraphError> {
        let mut owner: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut stack: Vec<ModuleId> = Vec::new();
        for a in &self.attachments {
            stack.extend(self.node(a.module).ogates.iter().flatten().map(|&(t, _)| t));
            while let Some(m) = stack.pop() {
                match owner[m] {
                    Some(o) if o == a.worker => continue,
                    Some(o) => {
                        return Err(GraphError::TwoWorkers {
                            module: self.node(m).name.clone(),
                            class: self.node(m).class,
                            a: self.workers[o].name.clone(),
                            b: self.workers[a.worker].name.clone(),
                        })
                    }
                    None => owner[m] = Some(a.worker),
                }
                let n = self.node(m);
                if !n.is_task {
                    stack.extend(n.ogates.iter().flatten().map(|&(t, _)| t));
                }
            }
        }
        Ok(owner)
    }

    /// Refuse loops that hold no task (packets would circle until the
    /// walk is too deep) and walks longer than [`MAX_DEPTH`]; returns the
    /// longest walk, in modules crossed after a task. A walk ends at a
    /// task module (a Queue keeps what it receives for its task). Linear
    /// in modules and connections.
    fn check_walks(&self) -> Result<usize, GraphError> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let n = self.nodes.len();
        // Per module: the longest walk a batch it emits can still take.
        let mut below = vec![0usize; n];
        let mut state = vec![NEW; n];
        // Where the walk continues from `m`: nowhere after a task.
        let next = |m: ModuleId| -> &[Option<(ModuleId, usize)>] {
            match self.nodes[m].as_ref() {
                Some(node) => &node.ogates,
                None => &[],
            }
        };
        let is_task = |m: ModuleId| self.nodes[m].as_ref().is_some_and(|x| x.is_task);
        let mut deepest = 0;
        for start in 0..n {
            if state[start] != NEW || self.nodes[start].is_none() {
                continue;
            }
            // Depth-first, iteratively: (module, next gate to look at).
            let mut path: Vec<(ModuleId, usize)> = vec![(start, 0)];
            state[start] = OPEN;
            while let Some(&mut (m, ref mut g)) = path.last_mut() {
                let gates = next(m);
                if let Some(&out) = gates.get(*g) {
                    *g += 1;
                    let Some((t, _)) = out else { continue };
                    if is_task(t) {
                        // The walk ends inside the task module.
                        below[m] = below[m].max(1);
                        continue;
                    }
                    match state[t] {
                        NEW => {
                            state[t] = OPEN;
                            path.push((t, 0));
                        }
                        OPEN => {
                            let from = path.iter().position(|&(x, _)| x == t).unwrap_or(0);
                            let mut names: Vec<String> = path[from..]
                                .iter()
                                .map(|&(x, _)| self.node(x).name.clone())
                                .collect();
                            names.push(self.node(t).name.clone());
                            return Err(GraphError::Loop { path: names });
                        }
                        _ => below[m] = below[m].max(1 + below[t]),
                    }
                    continue;
                }
                state[m] = DONE;
                path.pop();
                if let Some(&(p, _)) = path.last() {
                    below[p] = below[p].max(1 + below[m]);
                }
            }
        }
        for (m, node) in self.nodes.iter().enumerate() {
            let Some(node) = node.as_ref() else { continue };
            if !node.is_task {
                continue;
            }
            if below[m] > MAX_DEPTH {
                // Follow the deepest branch to the module at the limit.
                let (mut at, mut depth) = (m, 0);
                while depth < MAX_DEPTH + 1 {
                    let Some(t) = next(at)
                        .iter()
                        .flatten()
                        .map(|&(t, _)| t)
                        .filter(|&t| !is_task(t))
                        .max_by_key(|&t| below[t])
                    else {
                        break;
                    };
                    at = t;
                    depth += 1;
                }
                return Err(GraphError::TooDeep {
                    task: node.name.clone(),
                    module: self.node(at).name.clone(),
                    depth,
                    limit: MAX_DEPTH,
                });
            }
            deepest = deepest.max(below[m]);
        }
        Ok(deepest)
    }
}

/// Removing classes, attachments and workers (for a control plane that
/// changes a running pipeline: `nfkit daemon`).
impl Graph {
    /// Accept modules that read a metadata attribute no upstream module
    /// writes (their reads see zero) instead of refusing the commit: a
    /// control plane builds a graph one module at a time, as BESS does.
    pub fn allow_unwritten_reads(&mut self, ok: bool) {
        self.unwritten_reads_ok = ok;
    }

    /// Remove traffic class `name`. Refused while a class or a task is
    /// under it.
    pub fn remove_tc(&mut self, name: &str) -> Result<(), GraphError> {
        let i = self
            .tcs
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| GraphError::NoTc {
                class: name.into(),
                worker: "any".into(),
            })?;
        let w = self.tcs[i].worker;
        let child = self
            .tcs
            .iter()
            .filter(|t| t.worker == w && t.parent == name)
            .map(|t| t.name.clone())
            .chain(
                self.attachments
                    .iter()
                    .filter(|a| a.worker == w && a.parent == name)
                    .filter_map(|a| self.nodes[a.module].as_ref().map(|n| n.name.clone())),
            )
            .next();
        if let Some(child) = child {
            return Err(GraphError::Tc(TcError::Placement {
                class: name.into(),
                msg: format!("`{child}` is still under it; move or remove it first"),
            }));
        }
        self.tcs.remove(i);
        self.tc_names.clear();
        for (j, t) in self.tcs.iter().enumerate() {
            self.tc_names.entry(t.name.clone()).or_insert(j);
        }
        self.scratch.clear();
        Ok(())
    }

    /// Put `module`'s task back under the first worker's root (the
    /// default for unattached tasks).
    pub fn detach(&mut self, module: &str) -> Result<(), GraphError> {
        let id = self.id(module)?;
        if self.attached.remove(&id) {
            self.attachments.retain(|a| a.module != id);
            self.scratch.clear();
        }
        Ok(())
    }

    /// Worker names and cores, in order.
    pub fn worker_list(&self) -> Vec<(String, Option<usize>)> {
        self.workers
            .iter()
            .map(|w| (w.name.clone(), w.core))
            .collect()
    }

    /// Traffic classes (not leaves): (name, worker index, parent, policy).
    pub fn tc_list(&self) -> Vec<(String, usize, String, PolicySpec, Placement)> {
        self.tcs
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.worker,
                    t.parent.clone(),
                    t.policy,
                    t.placement,
                )
            })
            .collect()
    }

    /// Task attachments: (module, worker index, parent class).
    pub fn attachment_list(&self) -> Vec<(String, usize, String)> {
        self.attachments
            .iter()
            .filter_map(|a| {
                self.nodes[a.module]
                    .as_ref()
                    .map(|n| (n.name.clone(), a.worker, a.parent.clone()))
            })
            .collect()
    }

    /// Remove the last worker (workers keep their indices, so only the
    /// last can go). Refused while a class or task is on it.
    pub(crate) fn remove_last_worker(&mut self, name: &str) -> Result<(), GraphError> {
        let w = self.worker_index(name)?;
        if w + 1 != self.workers.len() || w == 0 {
            return Err(GraphError::Tc(TcError::Placement {
                class: name.into(),
                msg: "only the most recently added worker (not the first) can be removed".into(),
            }));
        }
        let busy = self.tcs.iter().any(|t| t.worker == w)
            || self
                .attachments
                .iter()
                .any(|a| a.worker == w && self.nodes[a.module].is_some());
        if busy {
            return Err(GraphError::Tc(TcError::Placement {
                class: name.into(),
                msg: "the worker still has classes or tasks".into(),
            }));
        }
        let gone: Vec<ModuleId> = self
            .attachments
            .iter()
            .filter(|a| a.worker == w)
            .map(|a| a.module)
            .collect();
        for id in gone {
            self.attached.remove(&id);
        }
        self.attachments.retain(|a| a.worker != w);
        self.workers.pop();
        self.scratch.clear();
        Ok(())
    }
}
