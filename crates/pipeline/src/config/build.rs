//! From a [`Desc`] to a committed [`Pipeline`].

use super::{ConfigError, Desc};
use crate::args::Pos;
use crate::graph::{Graph, GraphError, ROOT_TC};
use crate::metadata::MetadataError;
use crate::modules::{BuildEnv, Registry};
use crate::pipeline::{Pipeline, PipelineError};
use crate::ports::SharedPort;
use crate::sched::{RealClock, SchedClock};
use nfkit_hw::sim::SimDma;
use nfkit_hw::Mempool;
use nfkit_port::{Port, PortError};
use std::collections::HashMap;
use std::sync::Arc;

/// Opens a port from its spec string (the CLI passes its port registry).
pub type OpenPort<'a> = dyn Fn(&str) -> Result<Box<dyn Port>, PortError> + 'a;

/// How to build: module classes, time source, and the pool for packets
/// the pipeline makes itself.
pub struct BuildOptions {
    pub registry: Registry,
    pub clock: Arc<dyn SchedClock>,
    /// Buffers in the pipeline's own pool (Source).
    pub pool_buffers: usize,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            registry: Registry::default(),
            clock: Arc::new(RealClock::default()),
            pool_buffers: 8192,
        }
    }
}

impl Desc {
    /// Open the ports with `open_port(spec)`, make the modules, connect
    /// them, set up workers and classes, and commit (metadata, placement).
    pub fn build(&self, open_port: &OpenPort<'_>) -> Result<Pipeline, ConfigError> {
        self.build_with(open_port, BuildOptions::default())
    }

    /// [`Desc::build`] with explicit options (a virtual clock in tests).
    pub fn build_with(
        &self,
        open_port: &OpenPort<'_>,
        opts: BuildOptions,
    ) -> Result<Pipeline, ConfigError> {
        let err = |pos: Pos, msg: String| ConfigError::new(&self.file, pos, msg);
        // The same interface, device or file twice is refused before
        // anything opens (specs the port crate does not know are left to
        // `open_port`).
        let specs: Vec<(usize, nfkit_port::PortSpec)> = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.spec.parse().ok().map(|s| (i, s)))
            .collect();
        for k in 1..specs.len() {
            let prefix: Vec<nfkit_port::PortSpec> =
                specs[..=k].iter().map(|(_, s)| s.clone()).collect();
            if let Err(msg) = nfkit_port::check_distinct(&prefix) {
                let p = &self.ports[specs[k].0];
                return Err(err(
                    p.pos,
                    format!("port `{}` (\"{}\"): {msg}", p.name, p.spec),
                ));
            }
        }
        let mut ports: Vec<(String, SharedPort)> = Vec::new();
        for p in &self.ports {
            let port = open_port(&p.spec).map_err(|e| {
                err(
                    p.pos,
                    format!("cannot open port `{}` (\"{}\"): {e}", p.name, p.spec),
                )
            })?;
            ports.push((p.name.clone(), SharedPort::named(&p.name, port)));
        }
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "pipeline", opts.pool_buffers.max(64), 2048)
            .map_err(|e| err(Pos::default(), format!("cannot make the packet pool: {e}")))?;
        let env = BuildEnv {
            ports: ports.iter().cloned().collect::<HashMap<_, _>>(),
            pool,
        };
        let mut g = Graph::new();
        for w in &self.workers {
            g.add_worker(&w.name, w.core)
                .map_err(|e| err(w.pos, e.to_string()))?;
        }
        for m in &self.modules {
            let mut args = m.args.clone();
            let mut module = opts
                .registry
                .build(&m.class, &mut args, &env)
                .map_err(|e| {
                    let pos = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(m.pos);
                    err(pos, format!("{} `{}`: {e}", m.class, m.name))
                })?;
            for c in self.commands.iter().filter(|c| c.module == m.name) {
                let mut args = c.args.clone();
                module.command(&c.cmd, &mut args).map_err(|e| {
                    let pos = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(c.pos);
                    err(pos, format!("{}.{}: {e}", c.module, c.cmd))
                })?;
            }
            g.add_module(&m.name, module)
                .map_err(|e| err(m.pos, e.to_string()))?;
        }
        for l in &self.links {
            g.connect(&l.from, l.ogate, &l.to, l.igate)
                .map_err(|e| err(l.pos, e.to_string()))?;
        }
        for t in &self.tcs {
            g.add_tc(
                &t.name,
                t.worker.as_deref(),
                &t.parent,
                t.policy,
                t.placement,
            )
            .map_err(|e| err(t.pos, e.to_string()))?;
        }
        for a in &self.attachments {
            let parent = a.tc.as_deref().unwrap_or(ROOT_TC);
            g.attach(&a.module, a.worker.as_deref(), parent, a.placement)
                .map_err(|e| err(a.pos, e.to_string()))?;
        }
        let mut p = Pipeline::new(g, opts.clock).map_err(|e| self.commit_error(e))?;
        for (name, port) in ports {
            p.add_port(&name, port);
        }
        Ok(p)
    }

    /// Place a commit error at the module it names.
    fn commit_error(&self, e: PipelineError) -> ConfigError {
        let module = match &e {
            PipelineError::Graph(g) => match g {
                GraphError::Metadata(m) => match m {
                    MetadataError::NoWriter { module, .. }
                    | MetadataError::BadSize { module, .. }
                    | MetadataError::NoSpace { module, .. } => Some(module.clone()),
                    MetadataError::SizeMismatch { module_b, .. } => Some(module_b.clone()),
                },
                GraphError::TwoWorkers { module, .. } | GraphError::CannotSplit { module, .. } => {
                    Some(module.clone())
                }
                GraphError::QueueOwners(c) => Some(c.second_module.clone()),
                GraphError::Loop { path } => path.first().cloned(),
                GraphError::TooDeep { module, .. } => Some(module.clone()),
                _ => None,
            },
            _ => None,
        };
        let pos = module
            .and_then(|m| self.modules.iter().find(|d| d.name == m))
            .map(|d| d.pos)
            .unwrap_or(Pos { line: 1, col: 1 });
        ConfigError::new(&self.file, pos, e.to_string())
    }
}
