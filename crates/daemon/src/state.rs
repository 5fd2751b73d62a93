//! What the daemon owns (one running [`Pipeline`], its ports, the
//! modules' BESS-side descriptions, traffic-class parameters) and one
//! method per request. Every change to the graph goes through
//! [`Pipeline::edit`] (pause at a batch boundary, change, recommit
//! metadata and placement, resume); a change that fails is undone and
//! the pipeline resumes as it was.

use crate::drivers::{self, OpenFn, PortRequest};
use crate::error::{Fail, Res};
use crate::mclass::{self, bess_args, decode, pack, to_args};
use crate::pb;
use nfkit_hw::Mempool;
use nfkit_pipeline::graph::{Graph, GraphError, ROOT_TC};
use nfkit_pipeline::metadata::{Access, AttrSpec};
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_pipeline::sched::{Placement, PolicySpec, RealClock, Resource};
use nfkit_pipeline::{Pipeline, SharedPort};
use prost_types::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The version GetVersion reports.
pub const VERSION: &str = concat!("nfkit ", env!("CARGO_PKG_VERSION"));
/// How long GetPortStats waits for the workers to publish counters.
const PUBLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);
/// Longest module, port or class name accepted.
const MAX_NAME: usize = 128;

struct PortEntry {
    name: String,
    driver: String,
    spec: String,
    mac: [u8; 6],
    port: SharedPort,
    arg: Option<Any>,
}

struct ModEntry {
    class: String,
    igates: usize,
    ogates: usize,
    is_task: bool,
    port: Option<String>,
    attrs: Vec<AttrSpec>,
}

/// Inner class parameters as BESS lists them.
#[derive(Clone, Default)]
struct TcEntry {
    resource: String,
    limit: HashMap<String, i64>,
    max_burst: HashMap<String, i64>,
}

pub struct Daemon {
    pipeline: Pipeline,
    registry: Registry,
    pool: Mempool,
    open: Arc<OpenFn>,
    ports: Vec<PortEntry>,
    modules: BTreeMap<String, ModEntry>,
    tcs: HashMap<String, TcEntry>,
    /// Paused by PauseAll/PauseWorker (edits keep it paused).
    user_paused: bool,
    /// Worker 0 exists from the start (nfkit's default worker); the
    /// first AddWorker(wid=0) adopts it.
    w0_adopted: bool,
    /// Requests served, for the log at exit.
    pub requests: u64,
    tsc_mhz: f64,
    /// Gate hooks set over the service (TcpDump taps).
    hooks: crate::hooks::Hooks,
    /// Where workers added without a core run ([`Daemon::pin_workers`]):
    /// worker `i` on core `i % len`, and what chose the list.
    pins: Option<(Vec<usize>, String)>,
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The nominal TSC frequency in MHz (`cpu MHz` of /proc/cpuinfo), to
/// report scheduler time in cycles as BESS does; 1000 (1 cycle per ns)
/// if unknown.
fn tsc_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .filter(|m| *m > 0.0)
        .unwrap_or(1000.0)
}

fn check_name(what: &str, name: &str) -> Res<()> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(Fail::inval(format!(
            "{what} name `{name}` must be 1 to {MAX_NAME} characters"
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(Fail::inval(format!(
            "{what} name `{}`: character {c:?} is not allowed (letters, digits, _ - .)",
            name.escape_default()
        )));
    }
    Ok(())
}

fn worker_name(wid: i64) -> String {
    format!("w{wid}")
}

fn wid_of(name: &str) -> i64 {
    name.strip_prefix('w')
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// `!leaf_MODULE:TASKID` (BESS's leaf class names) to the module.
fn leaf_module(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("!leaf_")?;
    Some(rest.rsplit_once(':').map(|(m, _)| m).unwrap_or(rest))
}

fn leaf_name(module: &str) -> String {
    format!("!leaf_{module}:0")
}

fn policy_from(class: &pb::TrafficClass, old: Option<PolicySpec>) -> Res<PolicySpec> {
    let resource = |def: Resource| -> Res<Resource> {
        if class.resource.is_empty() {
            return Ok(def);
        }
        Resource::parse(&class.resource).ok_or_else(|| {
            Fail::inval(format!(
                "resource `{}`: expected count, cycle, packet or bit",
                class.resource
            ))
        })
    };
    let policy = if class.policy.is_empty() {
        old.map(|p| p.name()).unwrap_or("")
    } else {
        class.policy.as_str()
    };
    Ok(match policy {
        "priority" => PolicySpec::Priority,
        "round_robin" => PolicySpec::RoundRobin,
        "weighted_fair" => {
            let def = match old {
                Some(PolicySpec::WeightedFair { resource }) => resource,
                _ => Resource::Cycle,
            };
            PolicySpec::WeightedFair {
                resource: resource(def)?,
            }
        }
        "rate_limit" => {
            let (def_r, def_l, def_b) = match old {
                Some(PolicySpec::RateLimit {
                    resource,
                    limit,
                    max_burst,
                }) => (resource, Some(limit), max_burst),
                _ => (Resource::Cycle, None, None),
            };
            let r = resource(def_r)?;
            let key = r.to_string();
            let limit = match class.limit.get(&key) {
                Some(&l) if l > 0 => l as u64,
                Some(&l) => {
                    return Err(Fail::inval(format!(
                        "rate_limit `{}`: limit {l} must be above 0",
                        class.name
                    )))
                }
                None => def_l.ok_or_else(|| {
                    Fail::inval(format!(
                        "rate_limit `{}`: give limit {{\"{key}\": N}} (the resource's units per second)",
                        class.name
                    ))
                })?,
            };
            let max_burst = match class.max_burst.get(&key) {
                Some(&b) if b > 0 => Some(b as u64),
                Some(_) => None,
                None => def_b,
            };
            PolicySpec::RateLimit {
                resource: r,
                limit,
                max_burst,
            }
        }
        "leaf" => return Err(Fail::inval("a leaf class is a module's task")),
        other => {
            return Err(Fail::inval(format!(
            "policy `{other}`: expected priority, weighted_fair, round_robin, rate_limit or leaf"
        )))
        }
    })
}

fn placement_from(class: &pb::TrafficClass) -> Res<Placement> {
    let mut p = Placement::default();
    match class.arg {
        Some(pb::traffic_class::Arg::Priority(v)) => {
            p.priority = Some(
                u32::try_from(v)
                    .map_err(|_| Fail::inval(format!("priority {v} is out of range")))?,
            )
        }
        Some(pb::traffic_class::Arg::Share(v)) => {
            p.share = Some(
                u64::try_from(v)
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| Fail::inval(format!("share {v} must be above 0")))?,
            )
        }
        None => {}
    }
    Ok(p)
}

impl Daemon {
    /// An empty daemon: no ports or modules, worker `w0` (wid 0) idle.
    pub fn new(open: Arc<OpenFn>) -> Res<Daemon> {
        let pool = nfkit_port::software_pool("daemon", 8192)
            .map_err(|e| Fail::new(libc::ENOMEM, e.to_string()))?;
        let mut graph = Graph::new();
        // Modules arrive one at a time: a reader may come before its writer.
        graph.allow_unwritten_reads(true);
        let mut pipeline = Pipeline::new(graph, Arc::new(RealClock::default()))?;
        pipeline.start()?;
        Ok(Daemon {
            pipeline,
            registry: Registry::default(),
            pool,
            open,
            ports: Vec::new(),
            modules: BTreeMap::new(),
            tcs: HashMap::new(),
            user_paused: false,
            w0_adopted: false,
            requests: 0,
            tsc_mhz: tsc_mhz(),
            hooks: Default::default(),
            pins: None,
        })
    }

    /// Pin every worker without a core, now and when added (AddWorker
    /// with core -1, as BESS clients send when they leave the choice),
    /// to the cores of `cores` in turn, as `nfkit run` does (issue 14
    /// item 11: an unpinned data path lost a third of its packet rate);
    /// `how` says what chose the list. Returns one line per worker
    /// pinned now, saying where.
    pub fn pin_workers(&mut self, cores: Vec<usize>, how: &str) -> Res<Vec<String>> {
        if cores.is_empty() {
            return Ok(vec!["workers: not pinned (no core to pin to)".into()]);
        }
        self.pins = Some((cores.clone(), how.to_string()));
        let mut lines = Vec::new();
        let workers = self.pipeline.graph().worker_list();
        for (i, (name, core)) in workers.into_iter().enumerate() {
            if core.is_some() {
                continue;
            }
            let c = cores[i % cores.len()];
            let n = name.clone();
            self.edit(
                |g| g.set_worker_core(&n, Some(c)),
                |g| {
                    let _ = g.set_worker_core(&name, None);
                },
            )?;
            lines.push(format!("worker {name}: pinned to core {c} ({how})"));
        }
        Ok(lines)
    }

    /// Change the graph; undo and resume as before if the change or the
    /// recommit fails. `undo` reverses what `f` did when `f` succeeded.
    fn edit<R>(
        &mut self,
        f: impl FnOnce(&mut Graph) -> Result<R, GraphError>,
        undo: impl FnOnce(&mut Graph),
    ) -> Res<R> {
        let was_running = self.pipeline.is_running();
        let mut applied = false;
        let r = self.pipeline.edit(|g| {
            let r = f(g)?;
            applied = true;
            Ok(r)
        });
        match r {
            Ok(r) => Ok(r),
            Err(e) => {
                let fail = Fail::from(e);
                let restored = self.pipeline.edit(|g| {
                    if applied {
                        undo(g);
                    }
                    Ok(())
                });
                if let Err(e2) = restored {
                    tracing::error!("could not restore the pipeline after `{fail}`: {e2}");
                }
                if was_running {
                    let _ = self.pipeline.start();
                }
                Err(fail)
            }
        }
    }

    /// Hybrid polling (the default) or pure polling for the workers
    /// (`nfkit daemon --poll`, `--idle-us`); running workers restart
    /// with it.
    pub fn set_idle(&mut self, opts: nfkit_port::IdleOptions) -> Res<()> {
        self.pipeline.set_idle(opts);
        if self.pipeline.is_running() {
            self.pipeline.pause()?;
            self.pipeline.start()?;
        }
        Ok(())
    }

    /// The kernel thread id of each worker's thread (its CPU time is in
    /// `/proc/self/task/TID/schedstat`).
    pub fn worker_tids(&self) -> Vec<Option<u32>> {
        self.pipeline.worker_tids()
    }

    /// How many times the running workers have been paused (by
    /// changes, commands and PauseAll).
    pub fn pauses(&self) -> u64 {
        self.pipeline.pauses()
    }

    /// How many times worker `wid` was paused (by changes of the whole
    /// pipeline, and by commands on modules it holds).
    pub fn worker_pauses(&self, wid: i64) -> u64 {
        self.pipeline
            .graph()
            .worker_index(&worker_name(wid))
            .map(|w| self.pipeline.worker_pauses(w))
            .unwrap_or(0)
    }

    /// Stop everything (SIGTERM, KillBess): the final statistics.
    pub fn shutdown(&mut self) -> String {
        let _ = self.pipeline.pause();
        self.user_paused = true;
        let report = self.pipeline.stats().to_string();
        // Release modules, then ports (a UnixSocketPort removes its file).
        let _ = self.reset_modules();
        for p in std::mem::take(&mut self.ports) {
            let _ = p.port.with_port(|p| p.flush());
            self.pipeline.remove_port(&p.name);
        }
        report
    }

    // ---- workers ----

    pub fn list_workers(&self) -> pb::ListWorkersResponse {
        let g = self.pipeline.graph();
        let attached = g.attachment_list();
        let tcs = g.tc_list();
        let stats = self.pipeline.stats().workers;
        pb::ListWorkersResponse {
            error: None,
            workers_status: g
                .worker_list()
                .into_iter()
                .enumerate()
                .map(|(i, (name, core))| {
                    let (busy_ns, idle_ns, asleep_ns) = stats
                        .iter()
                        .find(|w| w.name == name)
                        .map(|w| w.sched.split())
                        .unwrap_or_default();
                    pb::list_workers_response::WorkerStatus {
                        wid: wid_of(&name),
                        core: core.map(|c| c as i64).unwrap_or(-1),
                        running: self.pipeline.is_worker_running(i),
                        num_tcs: (tcs.iter().filter(|t| t.1 == i).count()
                            + attached.iter().filter(|a| a.1 == i).count())
                            as i64,
                        silent_drops: 0,
                        busy_ns,
                        idle_ns,
                        asleep_ns,
                        sleeps: stats
                            .iter()
                            .find(|w| w.name == name)
                            .map_or(0, |w| w.sched.sleeps),
                    }
                })
                .collect(),
        }
    }

    pub fn add_worker(&mut self, r: pb::AddWorkerRequest) -> Res<()> {
        if r.wid < 0 || r.wid > 1023 {
            return Err(Fail::inval(format!("wid {} must be 0 to 1023", r.wid)));
        }
        if !matches!(r.scheduler.as_str(), "" | "default") {
            return Err(Fail::notsup(format!(
                "scheduler `{}`: nfkit has one scheduler (\"default\")",
                r.scheduler
            )));
        }
        let index = self.pipeline.graph().worker_list().len();
        let core = if r.core >= 0 {
            let c = r.core as usize;
            let ids = core_affinity::get_core_ids().unwrap_or_default();
            if !ids.iter().any(|i| i.id == c) {
                return Err(Fail::inval(format!(
                    "core {c} is not available to this process (available: {})",
                    ids.iter()
                        .map(|i| i.id.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
            Some(c)
        } else {
            None
        };
        let name = worker_name(r.wid);
        if r.wid == 0 && !self.w0_adopted {
            // nfkit's default worker, there from the start: it moves to
            // the core asked for.
            self.w0_adopted = true;
            if let Some(c) = core {
                let n = name.clone();
                let old = self
                    .pipeline
                    .graph()
                    .worker_list()
                    .first()
                    .and_then(|w| w.1);
                self.edit(
                    |g| g.set_worker_core(&n, Some(c)),
                    |g| {
                        let _ = g.set_worker_core(&name, old);
                    },
                )?;
                tracing::info!(worker = %n, "pinned to core {c} (AddWorker)");
            }
            return Ok(());
        }
        // No core given: the next of the daemon's cores, as `nfkit run`
        // pins workers without `core=`.
        let auto = match (core, &self.pins) {
            (None, Some((cores, how))) => Some((cores[index % cores.len()], how.clone())),
            _ => None,
        };
        let core = core.or(auto.as_ref().map(|a| a.0));
        let n2 = name.clone();
        self.edit(|g| g.add_worker(&name, core).map(|_| ()), move |_| drop(n2))?;
        match auto {
            Some((c, how)) => {
                eprintln!("worker {name}: pinned to core {c} ({how})");
                tracing::info!(worker = %name, "pinned to core {c} ({how})");
            }
            None => tracing::info!(worker = %name, core = ?core, "worker added"),
        }
        Ok(())
    }

    pub fn destroy_worker(&mut self, wid: i64) -> Res<()> {
        if wid == 0 {
            return Err(Fail::busy("worker 0 is nfkit's default worker and stays"));
        }
        let name = worker_name(wid);
        self.pipeline.graph().worker_index(&name)?;
        let was = self.pipeline.is_running();
        let r = self.pipeline.remove_worker(&name);
        if was && !self.pipeline.is_running() {
            let _ = self.pipeline.start();
        }
        r.map_err(Fail::from)
    }

    pub fn reset_workers(&mut self) -> Res<()> {
        let names: Vec<String> = self
            .pipeline
            .graph()
            .worker_list()
            .into_iter()
            .map(|w| w.0)
            .skip(1)
            .collect();
        for n in names.iter().rev() {
            self.destroy_worker(wid_of(n))?;
        }
        // As after BESS's ResetWorkers, the next AddWorker(wid 0) is
        // accepted (it adopts worker 0 again), and worker 0 runs.
        self.w0_adopted = false;
        self.pipeline.release_worker(0)?;
        Ok(())
    }

    pub fn pause_all(&mut self) -> Res<()> {
        self.pipeline.pause()?;
        self.user_paused = true;
        Ok(())
    }

    /// Every worker runs again, those paused alone too.
    pub fn resume_all(&mut self) -> Res<()> {
        self.user_paused = false;
        for w in 0..self.pipeline.graph().worker_list().len() {
            self.pipeline.release_worker(w)?;
        }
        self.pipeline.start()?;
        Ok(())
    }

    fn check_wid(&self, wid: i64) -> Res<usize> {
        Ok(self.pipeline.graph().worker_index(&worker_name(wid))?)
    }

    /// Worker `wid` stops between two of its rounds and runs no task
    /// until ResumeWorker or ResumeAll; the other workers run on. It
    /// stays paused across changes (which still reach its modules).
    pub fn pause_worker(&mut self, wid: i64) -> Res<()> {
        let w = self.check_wid(wid)?;
        self.pipeline.hold_worker(w)?;
        tracing::info!(wid, "worker paused");
        Ok(())
    }

    /// Worker `wid` runs again; after PauseAll, the others stay paused.
    pub fn resume_worker(&mut self, wid: i64) -> Res<()> {
        let w = self.check_wid(wid)?;
        if !self.pipeline.is_running() {
            // Under PauseAll: only this one resumes.
            for o in 0..self.pipeline.graph().worker_list().len() {
                if o != w {
                    self.pipeline.hold_worker(o)?;
                }
            }
            self.user_paused = false;
            self.pipeline.release_worker(w)?;
            self.pipeline.start()?;
        } else {
            self.pipeline.release_worker(w)?;
        }
        tracing::info!(wid, "worker resumed");
        Ok(())
    }

    // ---- traffic classes ----

    pub fn list_tcs(&self, wid: i64) -> Res<pb::ListTcsResponse> {
        let g = self.pipeline.graph();
        let workers = g.worker_list();
        if wid >= 0 {
            self.check_wid(wid)?;
        }
        let mut out = Vec::new();
        for (i, (wname, _)) in workers.iter().enumerate() {
            let w = wid_of(wname);
            if wid >= 0 && w != wid {
                continue;
            }
            for (name, tw, parent, policy, place) in g.tc_list() {
                if tw != i {
                    continue;
                }
                let e = self.tcs.get(&name).cloned().unwrap_or_default();
                let (resource, limit, max_burst) = match policy {
                    PolicySpec::RateLimit {
                        resource,
                        limit,
                        max_burst,
                    } => {
                        let mut l = HashMap::new();
                        l.insert(resource.to_string(), limit as i64);
                        let mut b = HashMap::new();
                        if let Some(mb) = max_burst {
                            b.insert(resource.to_string(), mb as i64);
                        }
                        (resource.to_string(), l, b)
                    }
                    PolicySpec::WeightedFair { resource } => {
                        (resource.to_string(), e.limit, e.max_burst)
                    }
                    _ => (e.resource, e.limit, e.max_burst),
                };
                out.push(pb::list_tcs_response::TrafficClassStatus {
                    class: Some(pb::TrafficClass {
                        parent: parent.clone(),
                        name: name.clone(),
                        blocked: false,
                        policy: policy.name().into(),
                        resource,
                        arg: placement_arg(place),
                        wid: w,
                        limit,
                        max_burst,
                        leaf_module_name: String::new(),
                        leaf_module_taskid: 0,
                    }),
                    parent,
                });
            }
            for (module, aw, parent) in g.attachment_list() {
                if aw != i {
                    continue;
                }
                out.push(pb::list_tcs_response::TrafficClassStatus {
                    class: Some(pb::TrafficClass {
                        parent: parent.clone(),
                        name: leaf_name(&module),
                        policy: "leaf".into(),
                        wid: w,
                        leaf_module_name: module,
                        ..Default::default()
                    }),
                    parent,
                });
            }
        }
        Ok(pb::ListTcsResponse {
            error: None,
            classes_status: out,
        })
    }

    fn worker_arg(wid: i64) -> Option<String> {
        (wid >= 0).then(|| worker_name(wid))
    }

    pub fn add_tc(&mut self, class: Option<pb::TrafficClass>) -> Res<()> {
        let c = class.ok_or_else(|| Fail::inval("`class` is required"))?;
        if c.policy == "leaf" {
            return self.attach(&c);
        }
        check_name("traffic class", &c.name)?;
        if c.name == ROOT_TC || self.modules.contains_key(&c.name) {
            return Err(Fail::exist(format!(
                "`{}` already names a class or module",
                c.name
            )));
        }
        let policy = policy_from(&c, None)?;
        let place = placement_from(&c)?;
        let parent = if c.parent.is_empty() {
            ROOT_TC.to_string()
        } else {
            c.parent.clone()
        };
        let worker = Self::worker_arg(c.wid);
        if let Some(w) = &worker {
            self.pipeline.graph().worker_index(w)?;
        }
        let name = c.name.clone();
        let n2 = name.clone();
        self.edit(
            |g| g.add_tc(&name, worker.as_deref(), &parent, policy, place),
            |g| {
                let _ = g.remove_tc(&n2);
            },
        )?;
        self.tcs.insert(
            c.name.clone(),
            TcEntry {
                resource: c.resource.clone(),
                limit: c.limit.clone(),
                max_burst: c.max_burst.clone(),
            },
        );
        Ok(())
    }

    fn attach(&mut self, c: &pb::TrafficClass) -> Res<()> {
        let module = if !c.leaf_module_name.is_empty() {
            c.leaf_module_name.clone()
        } else {
            leaf_module(&c.name).map(str::to_string).ok_or_else(|| {
                Fail::inval("give leaf_module_name (the module whose task to attach)")
            })?
        };
        if c.leaf_module_taskid != 0 {
            return Err(Fail::inval(format!(
                "module `{module}` has one task (0), not {}",
                c.leaf_module_taskid
            )));
        }
        let m = self
            .modules
            .get(&module)
            .ok_or_else(|| Fail::noent(format!("no module named `{module}`")))?;
        if !m.is_task {
            return Err(Fail::inval(format!(
                "module `{module}` ({}) has no task",
                m.class
            )));
        }
        let parent = if c.parent.is_empty() {
            ROOT_TC.to_string()
        } else {
            c.parent.clone()
        };
        let worker = Self::worker_arg(c.wid);
        let place = placement_from(c)?;
        let old = self
            .pipeline
            .graph()
            .attachment_list()
            .into_iter()
            .find(|a| a.0 == module);
        let workers = self.pipeline.graph().worker_list();
        self.edit(
            |g| g.attach(&module, worker.as_deref(), &parent, place),
            |g| match old {
                Some((m, w, p)) => {
                    let wn = workers.get(w).map(|x| x.0.clone());
                    let _ = g.attach(&m, wn.as_deref(), &p, Placement::default());
                }
                None => {
                    let _ = g.detach(&module);
                }
            },
        )
    }

    pub fn update_tc_params(&mut self, class: Option<pb::TrafficClass>) -> Res<()> {
        let c = class.ok_or_else(|| Fail::inval("`class` is required"))?;
        let old = self
            .pipeline
            .graph()
            .tc_list()
            .into_iter()
            .find(|t| t.0 == c.name)
            .ok_or_else(|| Fail::noent(format!("no traffic class named `{}`", c.name)))?;
        if !c.policy.is_empty() && c.policy != old.3.name() {
            return Err(Fail::inval(format!(
                "class `{}` is {}; its policy cannot change to {}",
                c.name,
                old.3.name(),
                c.policy
            )));
        }
        let policy = policy_from(&c, Some(old.3))?;
        let (name, prev) = (c.name.clone(), old.3);
        self.edit(
            |g| g.set_tc_policy(&name, policy),
            |g| {
                let _ = g.set_tc_policy(&c.name, prev);
            },
        )
    }

    pub fn update_tc_parent(&mut self, class: Option<pb::TrafficClass>) -> Res<()> {
        let c = class.ok_or_else(|| Fail::inval("`class` is required"))?;
        if !c.leaf_module_name.is_empty() || leaf_module(&c.name).is_some() {
            return self.attach(&c);
        }
        let old = self
            .pipeline
            .graph()
            .tc_list()
            .into_iter()
            .find(|t| t.0 == c.name)
            .ok_or_else(|| Fail::noent(format!("no traffic class named `{}`", c.name)))?;
        let (_, w, old_parent, _, old_place) = old;
        let workers = self.pipeline.graph().worker_list();
        let here = workers.get(w).map(|x| wid_of(&x.0)).unwrap_or(-1);
        if c.wid >= 0 && c.wid != here {
            return Err(Fail::notsup(format!(
                "moving class `{}` from worker {here} to worker {}: nfkit moves inner classes within their worker; remove and re-add it there",
                c.name, c.wid
            )));
        }
        let parent = if c.parent.is_empty() {
            ROOT_TC.to_string()
        } else {
            c.parent.clone()
        };
        let place = placement_from(&c)?;
        let name = c.name.clone();
        self.edit(
            |g| g.set_tc_parent(&name, &parent, place),
            |g| {
                let _ = g.set_tc_parent(&c.name, &old_parent, old_place);
            },
        )
    }

    pub fn reset_tcs(&mut self) -> Res<()> {
        let g = self.pipeline.graph();
        let attached: Vec<String> = g
            .attachment_list()
            .into_iter()
            .filter(|a| a.2 != ROOT_TC || a.1 != 0)
            .map(|a| a.0)
            .collect();
        let mut tcs: Vec<String> = g.tc_list().into_iter().map(|t| t.0).collect();
        tcs.reverse();
        self.edit(
            |g| {
                for m in &attached {
                    g.detach(m)?;
                }
                // Children were added after their parents.
                for t in &tcs {
                    g.remove_tc(t)?;
                }
                Ok(())
            },
            |_| {},
        )?;
        self.tcs.clear();
        Ok(())
    }

    pub fn get_tc_stats(&self, name: &str) -> Res<pb::GetTcStatsResponse> {
        let target = leaf_module(name).unwrap_or(name);
        let g = self.pipeline.graph();
        for w in 0..g.worker_list().len() {
            if let Some(s) = g.tc_stats(w).into_iter().find(|s| s.name == target) {
                return Ok(pb::GetTcStatsResponse {
                    error: None,
                    timestamp: now_secs(),
                    count: s.count,
                    cycles: (s.cycles as f64 * self.tsc_mhz / 1000.0) as u64,
                    packets: s.packets,
                    bits: s.bits,
                });
            }
        }
        Err(Fail::noent(format!("no traffic class named `{name}`")))
    }

    // ---- ports ----

    fn port(&self, name: &str) -> Res<&PortEntry> {
        self.ports
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Fail::noent(format!("no port named `{name}`")))
    }

    fn default_name(&self, class: &str, taken: impl Fn(&str) -> bool) -> String {
        let base = mclass::snake(class);
        (0..)
            .map(|i| format!("{base}{i}"))
            .find(|n| !taken(n))
            .expect("an unused number")
    }

    pub fn list_ports(&self) -> pb::ListPortsResponse {
        pb::ListPortsResponse {
            error: None,
            ports: self
                .ports
                .iter()
                .map(|p| {
                    let port = &p.port;
                    pb::list_ports_response::Port {
                        name: p.name.clone(),
                        driver: p.driver.clone(),
                        mac_addr: mac_str(p.mac),
                        num_inc_q: port.rx_queues() as u64,
                        num_out_q: port.tx_queues() as u64,
                        size_inc_q: 0,
                        size_out_q: 0,
                        driver_arg: p.arg.clone(),
                    }
                })
                .collect(),
        }
    }

    pub fn create_port(&mut self, r: pb::CreatePortRequest) -> Res<pb::CreatePortResponse> {
        let name = if r.name.is_empty() {
            self.default_name(&r.driver, |n| self.ports.iter().any(|p| p.name == n))
        } else {
            r.name.clone()
        };
        check_name("port", &name)?;
        if self.ports.iter().any(|p| p.name == name) {
            return Err(Fail::exist(format!("port `{name}` already exists")));
        }
        let req = PortRequest {
            name: &name,
            driver: &r.driver,
            num_inc_q: r.num_inc_q,
            num_out_q: r.num_out_q,
            arg: r.arg.as_ref(),
        };
        let (port, spec) = drivers::create(&req, &*self.open)?;
        let mac_bytes = port.mac();
        let mac = mac_str(mac_bytes);
        let port = SharedPort::named(&name, port);
        self.pipeline.add_port(&name, port.clone());
        tracing::info!(port = %name, driver = %r.driver, %spec, "port created");
        self.ports.push(PortEntry {
            name: name.clone(),
            driver: r.driver,
            spec,
            mac: mac_bytes,
            port,
            arg: r.arg,
        });
        Ok(pb::CreatePortResponse {
            error: None,
            name,
            mac_addr: mac,
        })
    }

    pub fn destroy_port(&mut self, name: &str) -> Res<()> {
        self.port(name)?;
        let users: Vec<&String> = self
            .modules
            .iter()
            .filter(|(_, m)| m.port.as_deref() == Some(name))
            .map(|(n, _)| n)
            .collect();
        if !users.is_empty() {
            return Err(Fail::busy(format!(
                "port `{name}` is used by module(s) {users:?}; destroy them first"
            )));
        }
        let i = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .expect("checked");
        let e = self.ports.remove(i);
        self.pipeline.remove_port(name);
        let _ = e.port.with_port(|p| p.flush());
        tracing::info!(port = %name, spec = %e.spec, "port destroyed");
        Ok(())
    }

    pub fn reset_ports(&mut self) -> Res<()> {
        let names: Vec<String> = self.ports.iter().map(|p| p.name.clone()).collect();
        for n in names {
            self.destroy_port(&n)?;
        }
        Ok(())
    }

    /// Run `f` with the workers paused (ports home, their counters and
    /// state current), then resume them if they ran.
    fn paused<R>(&mut self, f: impl FnOnce(&Self) -> R) -> Res<R> {
        let was = self.pipeline.is_running();
        if was {
            self.pipeline.pause()?;
        }
        let r = f(self);
        if was {
            self.pipeline.start()?;
        }
        Ok(r)
    }

    pub fn get_port_stats(&mut self, name: &str) -> Res<pb::GetPortStatsResponse> {
        let port = self.port(name)?.port.clone();
        // A port no module uses rests home: its counters are live. The
        // workers holding one publish its counters between two of their
        // rounds, without pausing (a worker that does not answer within
        // the timeout leaves its previous values).
        let in_use = self
            .modules
            .values()
            .any(|m| m.port.as_deref() == Some(name));
        if in_use && !self.pipeline.publish_port_stats(PUBLISH_TIMEOUT) {
            tracing::debug!(port = %name, "a worker did not publish port counters in time");
        }
        let s = port.stats();
        let stat = |packets, dropped, bytes| pb::get_port_stats_response::Stat {
            packets,
            dropped,
            bytes,
            ..Default::default()
        };
        Ok(pb::GetPortStatsResponse {
            error: None,
            inc: Some(stat(s.rx_packets, s.rx_dropped + s.rx_errors, s.rx_bytes)),
            out: Some(stat(s.tx_packets, s.tx_dropped + s.tx_errors, s.tx_bytes)),
            timestamp: now_secs(),
        })
    }

    fn link(&mut self, name: &str) -> Res<nfkit_port::LinkStatus> {
        self.port(name)?;
        self.paused(|d| {
            d.port(name)
                .ok()
                .and_then(|p| p.port.with_port(|p| p.link()))
        })?
        .ok_or_else(|| Fail::busy(format!("port `{name}` is in use by a worker")))
    }

    pub fn get_link_status(&mut self, name: &str) -> Res<pb::GetLinkStatusResponse> {
        let l = self.link(name)?;
        Ok(pb::GetLinkStatusResponse {
            error: None,
            speed: l.speed_mbps.unwrap_or(0),
            full_duplex: true,
            autoneg: false,
            link_up: l.up,
        })
    }

    pub fn get_port_conf(&mut self, name: &str) -> Res<pb::GetPortConfResponse> {
        let l = self.link(name)?;
        let mac = self.port(name)?.mac;
        Ok(pb::GetPortConfResponse {
            error: None,
            conf: Some(pb::PortConf {
                mac_addr: mac_str(mac),
                mtu: 1500,
                admin_up: l.up,
            }),
        })
    }

    // ---- modules ----

    pub fn list_mclass(&self) -> pb::ListMclassResponse {
        pb::ListMclassResponse {
            error: None,
            names: self.registry.classes().map(str::to_string).collect(),
        }
    }

    pub fn get_mclass_info(&self, name: &str) -> Res<pb::GetMclassInfoResponse> {
        if !self.registry.contains(name) {
            return Err(Fail::noent(format!("no module class named `{name}`")));
        }
        let info = mclass::info(name);
        Ok(pb::GetMclassInfoResponse {
            error: None,
            name: name.to_string(),
            help: info.map(|i| i.help).unwrap_or("").to_string(),
            cmds: mclass::commands(name).into_iter().map(|c| c.0).collect(),
            cmd_args: mclass::commands(name).into_iter().map(|c| c.1).collect(),
        })
    }

    pub fn list_modules(&self) -> pb::ListModulesResponse {
        pb::ListModulesResponse {
            error: None,
            modules: self
                .pipeline
                .graph()
                .module_names()
                .into_iter()
                .map(|n| pb::list_modules_response::Module {
                    mclass: self
                        .modules
                        .get(&n)
                        .map(|m| m.class.clone())
                        .unwrap_or_default(),
                    desc: String::new(),
                    name: n,
                })
                .collect(),
        }
    }

    pub fn create_module(&mut self, r: pb::CreateModuleRequest) -> Res<pb::CreateModuleResponse> {
        if !self.registry.contains(&r.mclass) {
            return Err(Fail::noent(format!(
                "no module class named `{}` (nfkit has: {})",
                r.mclass,
                self.registry.classes().collect::<Vec<_>>().join(", ")
            )));
        }
        let name = if r.name.is_empty() {
            self.default_name(&r.mclass, |n| self.modules.contains_key(n))
        } else {
            r.name.clone()
        };
        check_name("module", &name)?;
        if self.modules.contains_key(&name) {
            return Err(Fail::exist(format!("module `{name}` already exists")));
        }
        let pairs = bess_args(&r.mclass, r.arg.as_ref())?;
        let port = pairs.iter().find(|p| p.0 == "port").map(|p| match &p.1 {
            nfkit_pipeline::args::Value::Ident(s) | nfkit_pipeline::args::Value::Str(s) => {
                s.clone()
            }
            other => other.to_string(),
        });
        if let Some(p) = &port {
            self.port(p)?;
        }
        let env = BuildEnv {
            ports: self
                .ports
                .iter()
                .map(|p| (p.name.clone(), p.port.clone()))
                .collect(),
            pool: self.pool.clone(),
        };
        let mut args = to_args(&pairs);
        let module = self
            .registry
            .build(&r.mclass, &mut args, &env)
            .map_err(|e| Fail::inval(format!("{} `{name}`: {e}", r.mclass)))?;
        let entry = ModEntry {
            class: r.mclass.clone(),
            igates: module.igates(),
            ogates: module.ogates(),
            is_task: module.is_task(),
            port,
            attrs: module.attrs(),
        };
        let n2 = name.clone();
        self.edit(
            |g| g.add_module(&name, module).map(|_| ()),
            |g| {
                let _ = g.remove_module(&n2);
            },
        )?;
        self.modules.insert(name.clone(), entry);
        tracing::debug!(module = %name, class = %r.mclass, "module created");
        Ok(pb::CreateModuleResponse { error: None, name })
    }

    fn module(&self, name: &str) -> Res<&ModEntry> {
        self.modules
            .get(name)
            .ok_or_else(|| Fail::noent(format!("no module named `{name}`")))
    }

    /// (from, ogate) pairs that feed `name`.
    fn upstream(&self, name: &str) -> Vec<(String, usize)> {
        let g = self.pipeline.graph();
        let mut out = Vec::new();
        for m in self.modules.keys() {
            for (og, to, _) in g.targets(m).unwrap_or_default() {
                if to == name {
                    out.push((m.clone(), og));
                }
            }
        }
        out
    }

    fn downstream(&self, name: &str) -> Vec<(usize, String, usize)> {
        self.pipeline.graph().targets(name).unwrap_or_default()
    }

    pub fn destroy_module(&mut self, name: &str) -> Res<()> {
        self.module(name)?;
        let up = self.upstream(name);
        let down = self.downstream(name);
        if !up.is_empty() || !down.is_empty() {
            let mut links: Vec<String> = up
                .iter()
                .map(|(m, g)| format!("{m}:{g} -> {name}"))
                .collect();
            links.extend(
                down.iter()
                    .map(|(g, t, ig)| format!("{name}:{g} -> {ig}:{t}")),
            );
            return Err(Fail::busy(format!(
                "module `{name}` is connected ({}); disconnect it first",
                links.join(", ")
            )));
        }
        let n = name.to_string();
        self.edit(|g| g.remove_module(&n).map(|_| ()), |_| {})?;
        self.modules.remove(name);
        self.hooks.forget_modules(&[n]);
        Ok(())
    }

    pub fn reset_modules(&mut self) -> Res<()> {
        let names: Vec<String> = self.modules.keys().cloned().collect();
        self.edit(
            |g| {
                for n in &names {
                    g.remove_module(n)?;
                }
                Ok(())
            },
            |_| {},
        )?;
        self.modules.clear();
        self.hooks.forget_modules(&names);
        Ok(())
    }

    /// Whether following output gates from `from` through modules that
    /// are not tasks reaches `to` (a loop no queue breaks would make one
    /// batch run forever).
    fn reaches(&self, from: &str, to: &str) -> bool {
        let g = self.pipeline.graph();
        let mut stack = vec![from.to_string()];
        let mut seen = std::collections::HashSet::new();
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if !seen.insert(m.clone()) {
                continue;
            }
            let Some(e) = self.modules.get(&m) else {
                continue;
            };
            if e.is_task && m != from {
                continue;
            }
            for (_, t, _) in g.targets(&m).unwrap_or_default() {
                stack.push(t);
            }
        }
        false
    }

    pub fn connect(&mut self, r: pb::ConnectModulesRequest) -> Res<()> {
        let a = self.module(&r.m1)?;
        let b = self.module(&r.m2)?;
        let (og, ig) = (r.ogate as usize, r.igate as usize);
        if r.ogate >= a.ogates as u64 {
            return Err(Fail::inval(format!(
                "module `{}` ({}) has {} output gate(s); gate {} does not exist",
                r.m1, a.class, a.ogates, r.ogate
            )));
        }
        if r.igate >= b.igates as u64 {
            return Err(Fail::inval(format!(
                "module `{}` ({}) has {} input gate(s); gate {} does not exist",
                r.m2, b.class, b.igates, r.igate
            )));
        }
        if let Ok(Some((to, tig))) = self.pipeline.graph().target(&r.m1, og) {
            return Err(Fail::busy(format!(
                "output gate {og} of `{}` is already connected to {tig}:{to}",
                r.m1
            )));
        }
        let b_task = b.is_task;
        if !b_task && (r.m1 == r.m2 || self.reaches(&r.m2, &r.m1)) {
            return Err(Fail::inval(format!(
                "connecting `{}`:{og} -> {ig}:`{}` makes a loop with no Queue in it",
                r.m1, r.m2
            )));
        }
        let (m1, m2) = (r.m1.clone(), r.m2.clone());
        self.edit(
            |g| g.connect(&m1, og, &m2, ig),
            |g| {
                let _ = g.disconnect(&r.m1, og);
            },
        )
    }

    pub fn disconnect(&mut self, r: pb::DisconnectModulesRequest) -> Res<()> {
        let a = self.module(&r.name)?;
        if r.ogate >= a.ogates as u64 {
            return Err(Fail::inval(format!(
                "module `{}` ({}) has {} output gate(s); gate {} does not exist",
                r.name, a.class, a.ogates, r.ogate
            )));
        }
        let og = r.ogate as usize;
        let old = self.pipeline.graph().target(&r.name, og)?;
        if old.is_none() {
            return Err(Fail::noent(format!(
                "output gate {og} of `{}` is not connected",
                r.name
            )));
        }
        let name = r.name.clone();
        self.edit(
            |g| g.disconnect(&name, og),
            |g| {
                if let Some((t, ig)) = old {
                    let _ = g.connect(&r.name, og, &t, ig);
                }
            },
        )
    }

    pub fn get_module_info(&self, name: &str) -> Res<pb::GetModuleInfoResponse> {
        let e = self.module(name)?;
        let stats = self.pipeline.stats();
        let ms = stats.module(name);
        let ts = now_secs();
        let up = self.upstream(name);
        // Gates beyond the module's per-gate counters were never used.
        let used = ms.map_or(0, |m| m.igates.len()).min(e.igates);
        let igates = (0..used)
            .filter_map(|ig| {
                let feeders: Vec<_> = stats
                    .edges
                    .iter()
                    .filter(|x| x.to == name && x.igate == ig)
                    .collect();
                let gs = ms
                    .and_then(|m| m.igates.get(ig))
                    .copied()
                    .unwrap_or_default();
                if feeders.is_empty() && gs.packets == 0 {
                    return None;
                }
                Some(pb::get_module_info_response::IGate {
                    igate: ig as u64,
                    ogates: up
                        .iter()
                        .filter(|(m, og)| feeders.iter().any(|f| &f.from == m && f.ogate == *og))
                        .map(|(m, og)| pb::get_module_info_response::i_gate::OGate {
                            ogate: *og as u64,
                            name: m.clone(),
                        })
                        .collect(),
                    cnt: gs.batches,
                    pkts: gs.packets,
                    bytes: gs.bits / 8,
                    timestamp: ts,
                    gatehooks: self.gate_hooks(name, false, ig),
                })
            })
            .collect();
        let ogates = self
            .downstream(name)
            .into_iter()
            .map(|(og, to, ig)| {
                let gs = ms
                    .and_then(|m| m.ogates.get(og))
                    .copied()
                    .unwrap_or_default();
                pb::get_module_info_response::OGate {
                    ogate: og as u64,
                    cnt: gs.batches,
                    pkts: gs.packets,
                    bytes: gs.bits / 8,
                    timestamp: ts,
                    name: to,
                    igate: ig as u64,
                    gatehooks: self.gate_hooks(name, true, og),
                }
            })
            .collect();
        let desc = ms
            .map(|m| {
                let mut d = format!(
                    "in={} out={} created={} consumed={} dropped={}",
                    m.received(),
                    m.sent(),
                    m.created,
                    m.consumed,
                    m.dropped
                );
                for (k, v) in &m.extra {
                    d.push_str(&format!(" {k}={v}"));
                }
                d
            })
            .unwrap_or_default();
        Ok(pb::GetModuleInfoResponse {
            error: None,
            name: name.to_string(),
            mclass: e.class.clone(),
            desc,
            igates,
            ogates,
            metadata: e
                .attrs
                .iter()
                .map(|a| pb::get_module_info_response::Attribute {
                    name: a.name.clone(),
                    size: a.size as u64,
                    mode: match a.access {
                        Access::Read => "read",
                        Access::Write => "write",
                        Access::Update => "update",
                    }
                    .into(),
                    offset: -1,
                })
                .collect(),
            deadends: ms.map(|m| m.dropped).unwrap_or(0),
        })
    }

    /// The hooks on one gate as GetModuleInfo lists them: Track (always
    /// on in nfkit), then the TcpDump hooks set.
    fn gate_hooks(
        &self,
        module: &str,
        out: bool,
        gate: usize,
    ) -> Vec<pb::get_module_info_response::GateHook> {
        let mut v = vec![pb::get_module_info_response::GateHook {
            class_name: crate::hooks::TRACK.into(),
            hook_name: crate::hooks::TRACK_NAME.into(),
        }];
        v.extend(self.hooks.on_gate(module, out, gate).into_iter().map(|e| {
            pb::get_module_info_response::GateHook {
                class_name: crate::hooks::TCPDUMP.into(),
                hook_name: e.name.clone(),
            }
        }));
        v
    }

    /// Module-specific values, read with only the worker holding the
    /// module briefly paused.
    fn extra_stats(&mut self, name: &str) -> Res<Vec<(&'static str, u64)>> {
        Ok(self.pipeline.module_extra(name)?)
    }

    pub fn module_command(&mut self, r: pb::CommandRequest) -> Res<pb::CommandResponse> {
        let class = self.module(&r.name)?.class.clone();
        let get = |extra: &[(&str, u64)], k: &str| {
            extra.iter().find(|e| e.0 == k).map(|e| e.1).unwrap_or(0)
        };
        match (class.as_str(), r.cmd.as_str()) {
            ("Measure", "get_summary") => {
                let a: pb::MeasureCommandGetSummaryArg =
                    decode(r.arg.as_ref(), "MeasureCommandGetSummaryArg")?;
                if a.clear {
                    return Err(Fail::notsup(
                        "Measure get_summary: clear is not supported by nfkit",
                    ));
                }
                let extra = self.extra_stats(&r.name)?;
                let stats = self.pipeline.stats();
                let m = stats.module(&r.name);
                let count = get(&extra, "count");
                let mean = get(&extra, "mean_ns");
                let pct = |p: f64| -> u64 {
                    match p {
                        p if p <= 50.0 => get(&extra, "p50_ns"),
                        p if p <= 99.0 => get(&extra, "p99_ns"),
                        p if p <= 99.9 => get(&extra, "p999_ns"),
                        _ => get(&extra, "max_ns"),
                    }
                };
                let resp = pb::MeasureCommandGetSummaryResponse {
                    timestamp: now_secs(),
                    packets: m.map(|m| m.received()).unwrap_or(0),
                    bits: m
                        .and_then(|m| m.igates.first())
                        .map(|g| g.bits)
                        .unwrap_or(0),
                    latency: Some(pb::measure_command_get_summary_response::Histogram {
                        count,
                        above_range: 0,
                        resolution_ns: 1,
                        min_ns: get(&extra, "min_ns"),
                        avg_ns: mean,
                        max_ns: get(&extra, "max_ns"),
                        total_ns: mean.saturating_mul(count),
                        percentile_values_ns: a
                            .latency_percentiles
                            .iter()
                            .map(|&p| pct(p))
                            .collect(),
                    }),
                    jitter: None,
                };
                Ok(pb::CommandResponse {
                    error: None,
                    data: Some(pack(&resp, "MeasureCommandGetSummaryResponse")),
                })
            }
            ("Queue", "get_status") => {
                let extra = self.extra_stats(&r.name)?;
                let stats = self.pipeline.stats();
                let m = stats.module(&r.name);
                let resp = pb::QueueCommandGetStatusResponse {
                    count: get(&extra, "queued"),
                    size: 0,
                    enqueued: m.map(|m| m.received()).unwrap_or(0),
                    dequeued: m.map(|m| m.sent()).unwrap_or(0),
                    dropped: m.map(|m| m.dropped).unwrap_or(0),
                };
                Ok(pb::CommandResponse {
                    error: None,
                    data: Some(pack(&resp, "QueueCommandGetStatusResponse")),
                })
            }
            _ => self.generic_command(&class, r),
        }
    }

    /// A command the module implements ([`Module::command`]): the BESS
    /// argument message as a record, the reply as BESS's
    /// `<Class>Command<Cmd>Response` when there is one, else as
    /// `NfkitCommandArg` text.
    ///
    /// [`Module::command`]: nfkit_pipeline::Module::command
    fn generic_command(&mut self, class: &str, r: pb::CommandRequest) -> Res<pb::CommandResponse> {
        let arg = match r
            .arg
            .as_ref()
            .filter(|a| !(a.type_url.is_empty() && a.value.is_empty()))
        {
            Some(a) if mclass::type_name(a) == "bess.pb.NfkitCommandArg" => {
                let t: pb::NfkitCommandArg = decode(Some(a), "NfkitCommandArg")?;
                let pairs = mclass::parse_nfkit_args(class, &t.text)?;
                nfkit_pipeline::args::Value::Map(pairs)
            }
            Some(a) => crate::reflect::any_to_value(a)?.1,
            None => nfkit_pipeline::args::Value::Map(Vec::new()),
        };
        let reply = self.pipeline.command(&r.name, &r.cmd, arg).map_err(|e| {
            let msg = e.to_string();
            if msg.contains("has no command") {
                Fail::notsup(msg)
            } else {
                Fail::inval(msg)
            }
        })?;
        let empty = matches!(&reply, nfkit_pipeline::args::Value::List(l) if l.is_empty())
            || matches!(&reply, nfkit_pipeline::args::Value::Map(m) if m.is_empty());
        if empty {
            return Ok(pb::CommandResponse::default());
        }
        let name = crate::reflect::reply_name(class, &r.cmd);
        let data = crate::reflect::value_to_any(&reply, &name).unwrap_or_else(|_| {
            pack(
                &pb::NfkitCommandArg {
                    text: reply.to_string(),
                },
                "NfkitCommandArg",
            )
        });
        Ok(pb::CommandResponse {
            error: None,
            data: Some(data),
        })
    }

    /// Build the pipeline a `.nfk` file describes (ports, workers,
    /// modules and their commands, connections, classes, task
    /// placement) into this daemon, as `nfkit daemon --config FILE`
    /// does before serving. An error names the file and line.
    pub fn load_config(&mut self, file: &str, src: &str) -> Res<()> {
        use nfkit_pipeline::args::Pos;
        let desc = nfkit_pipeline::config::parse_with(src, file, &self.registry)
            .map_err(|e| Fail::inval(e.to_string()))?;
        let at = |pos: Pos, f: Fail| Fail::new(f.code, format!("{file}:{}: {}", pos.line, f.msg));
        for p in &desc.ports {
            self.create_port(pb::CreatePortRequest {
                name: p.name.clone(),
                driver: "NfkitPort".into(),
                arg: Some(pack(
                    &pb::NfkitPortArg {
                        spec: p.spec.clone(),
                    },
                    "NfkitPortArg",
                )),
                ..Default::default()
            })
            .map_err(|f| at(p.pos, f))?;
        }
        let env = BuildEnv {
            ports: self
                .ports
                .iter()
                .map(|p| (p.name.clone(), p.port.clone()))
                .collect(),
            pool: self.pool.clone(),
        };
        let mut built = Vec::new();
        for m in &desc.modules {
            if self.modules.contains_key(&m.name) {
                return Err(at(
                    m.pos,
                    Fail::exist(format!("module `{}` already exists", m.name)),
                ));
            }
            let mut args = m.args.clone();
            let port = args.pos("port").and_then(|_| {
                let mut a = m.args.clone();
                a.str("port").ok().flatten()
            });
            let mut module = self
                .registry
                .build(&m.class, &mut args, &env)
                .map_err(|e| {
                    let pos = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(m.pos);
                    at(pos, Fail::inval(format!("{} `{}`: {e}", m.class, m.name)))
                })?;
            for c in desc.commands.iter().filter(|c| c.module == m.name) {
                let mut args = c.args.clone();
                module.command(&c.cmd, &mut args).map_err(|e| {
                    let pos = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(c.pos);
                    at(pos, Fail::inval(format!("{}.{}: {e}", c.module, c.cmd)))
                })?;
            }
            let entry = ModEntry {
                class: m.class.clone(),
                igates: module.igates(),
                ogates: module.ogates(),
                is_task: module.is_task(),
                port,
                attrs: module.attrs(),
            };
            built.push((m.name.clone(), m.pos, module, entry));
        }
        // The graph in one change: intermediate states never commit.
        let mut pos = Pos::default();
        let mut entries: Vec<(String, ModEntry)> = Vec::new();
        let r = self.pipeline.edit(|g| {
            for w in &desc.workers {
                pos = w.pos;
                g.add_worker(&w.name, w.core)?;
            }
            for (name, p, module, entry) in built {
                pos = p;
                g.add_module(&name, module)?;
                entries.push((name, entry));
            }
            for l in &desc.links {
                pos = l.pos;
                g.connect(&l.from, l.ogate, &l.to, l.igate)?;
            }
            for t in &desc.tcs {
                pos = t.pos;
                g.add_tc(
                    &t.name,
                    t.worker.as_deref(),
                    &t.parent,
                    t.policy,
                    t.placement,
                )?;
            }
            for a in &desc.attachments {
                pos = a.pos;
                let parent = a.tc.as_deref().unwrap_or(ROOT_TC);
                g.attach(&a.module, a.worker.as_deref(), parent, a.placement)?;
            }
            pos = Pos::default();
            Ok(())
        });
        match r {
            Ok(()) => {
                for t in &desc.tcs {
                    self.tcs.insert(t.name.clone(), TcEntry::default());
                }
                self.modules.extend(entries);
                Ok(())
            }
            Err(e) => {
                let f = Fail::from(e);
                if pos.line > 0 {
                    Err(at(pos, f))
                } else {
                    Err(Fail::new(f.code, format!("{file}: {}", f.msg)))
                }
            }
        }
    }

    pub fn reset_all(&mut self) -> Res<()> {
        self.reset_modules()?;
        self.reset_tcs()?;
        self.reset_ports()?;
        self.reset_workers()?;
        Ok(())
    }
}

fn placement_arg(p: Placement) -> Option<pb::traffic_class::Arg> {
    match (p.priority, p.share) {
        (Some(v), _) => Some(pb::traffic_class::Arg::Priority(v as i64)),
        (None, Some(s)) => Some(pb::traffic_class::Arg::Share(s as i64)),
        _ => None,
    }
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ---- read-only views for the metrics endpoint (crate::metrics) ----

impl Daemon {
    /// Every counter of the pipeline: modules, gates, workers, classes.
    pub fn pipeline_stats(&self) -> nfkit_pipeline::PipelineStats {
        self.pipeline.stats()
    }

    /// Every port's counters as (name, driver, per-queue counters), read
    /// as GetPortStats reads them: ports the workers hold are published
    /// by them between two rounds (one request for all), without
    /// pausing. The port's totals are the sum over its queues.
    pub fn port_counters(&mut self) -> Res<Vec<(String, String, Vec<nfkit_port::QueueStats>)>> {
        let in_use = self.modules.values().any(|m| m.port.is_some());
        if in_use && !self.pipeline.publish_port_stats(PUBLISH_TIMEOUT) {
            tracing::debug!("a worker did not publish port counters in time");
        }
        Ok(self
            .ports
            .iter()
            .map(|p| (p.name.clone(), p.driver.clone(), p.port.queue_stats()))
            .collect())
    }

    /// The gate hooks set over the service.
    pub fn hooks(&mut self) -> &mut crate::hooks::Hooks {
        &mut self.hooks
    }

    /// The modules' names.
    pub fn module_names(&self) -> Vec<String> {
        self.modules.keys().cloned().collect()
    }

    /// That `module` has gate `gate` on side `dir`.
    pub fn check_gate(
        &self,
        module: &str,
        dir: nfkit_pipeline::hooks::GateDir,
        gate: usize,
    ) -> Res<()> {
        let m = self.module(module)?;
        let (have, side) = match dir {
            nfkit_pipeline::hooks::GateDir::In => (m.igates, "input"),
            nfkit_pipeline::hooks::GateDir::Out => (m.ogates, "output"),
        };
        if gate >= have {
            return Err(Fail::inval(format!(
                "module `{module}` ({}) has {have} {side} gate(s); gate {gate} does not exist",
                m.class
            )));
        }
        Ok(())
    }

    /// How many gates of `module` on side `dir` are in use (gates 0..N:
    /// every one connected or hooked; a module may have up to 8,192).
    pub fn gate_count(&self, module: &str, dir: nfkit_pipeline::hooks::GateDir) -> Res<usize> {
        self.module(module)?;
        Ok(self.pipeline.graph().gates_in_use(module, dir)?)
    }

    /// Set a hook on some gates, between two batches (one change for
    /// all of them): (gate, tap) pairs.
    pub fn set_gate_taps(
        &mut self,
        module: &str,
        dir: nfkit_pipeline::hooks::GateDir,
        taps: &[(usize, nfkit_pipeline::hooks::Tap)],
    ) -> Res<()> {
        let m = module.to_string();
        let taps = taps.to_vec();
        let (m2, gates): (String, Vec<usize>) = (m.clone(), taps.iter().map(|t| t.0).collect());
        self.edit(
            move |g| {
                for (gate, tap) in taps {
                    g.set_gate_tap(&m, dir, gate, Some(tap))?;
                }
                Ok(())
            },
            move |g| {
                for &gate in &gates {
                    let _ = g.set_gate_tap(&m2, dir, gate, None);
                }
            },
        )
    }

    /// Remove the hooks of some gates, between two batches.
    pub fn clear_gate_taps(
        &mut self,
        module: &str,
        dir: nfkit_pipeline::hooks::GateDir,
        gates: &[usize],
    ) -> Res<()> {
        let m = module.to_string();
        let gates = gates.to_vec();
        self.edit(
            move |g| {
                for &gate in &gates {
                    g.set_gate_tap(&m, dir, gate, None)?;
                }
                Ok(())
            },
            |_| {},
        )
    }

    /// The daemon's packet buffer pool: (buffers, free buffers).
    pub fn pool_occupancy(&self) -> (usize, usize) {
        (self.pool.capacity(), self.pool.free_count())
    }
}
