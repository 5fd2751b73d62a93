//! Module classes by name: what the config language's `Class(args)`
//! builds. Each class file declares its classes once with
//! `declare_class!`; the default
//! registry collects every declaration (see `src/modules/README.md`).

use crate::args::{ArgError, Args};
use crate::module::Module;
use crate::ports::SharedPort;
use nfkit_hw::Mempool;
use std::collections::{BTreeMap, HashMap};

/// What constructors may use besides their arguments.
pub struct BuildEnv {
    /// Ports declared in the config, by name.
    pub ports: HashMap<String, SharedPort>,
    /// Buffers for packets the pipeline makes itself (Source), and the
    /// pool whose buffers a Sink keeps cached.
    pub pool: Mempool,
}

impl BuildEnv {
    /// The port named by argument `arg`.
    pub fn port(&self, args: &mut Args, arg: &str) -> Result<SharedPort, ArgError> {
        let name = args.required_str(arg)?;
        self.ports.get(&name).cloned().ok_or_else(|| {
            let mut known: Vec<&String> = self.ports.keys().collect();
            known.sort();
            ArgError::new(arg, format!("no port named `{name}` (declared: {known:?})"))
        })
    }
}

/// Builds a module from its arguments.
pub type Constructor = fn(&mut Args, &BuildEnv) -> Result<Box<dyn Module>, ArgError>;

/// One class as its file declares it.
#[derive(Clone, Copy)]
pub struct ClassDecl {
    /// The name the config language uses (`MACSwap`).
    pub name: &'static str,
    pub build: Constructor,
}

/// Module classes by name.
#[derive(Clone)]
pub struct Registry {
    classes: BTreeMap<String, Constructor>,
}

impl Registry {
    /// A registry with no classes.
    pub fn empty() -> Registry {
        Registry {
            classes: BTreeMap::new(),
        }
    }
    /// A registry of the given declarations (file by file); a name
    /// declared twice keeps its last declaration (a test of the crate
    /// checks that no name is).
    pub fn from_decls(files: &[&[ClassDecl]]) -> Registry {
        let mut r = Registry::empty();
        for d in files.iter().flat_map(|f| f.iter()) {
            r.register(d.name, d.build);
        }
        r
    }
    /// Add (or replace) a class.
    pub fn register(&mut self, class: &str, ctor: Constructor) {
        self.classes.insert(class.to_string(), ctor);
    }
    pub fn contains(&self, class: &str) -> bool {
        self.classes.contains_key(class)
    }
    pub fn classes(&self) -> impl Iterator<Item = &str> {
        self.classes.keys().map(String::as_str)
    }
    /// Build a module of `class`; unknown arguments are errors.
    pub fn build(
        &self,
        class: &str,
        args: &mut Args,
        env: &BuildEnv,
    ) -> Result<Box<dyn Module>, ArgError> {
        let ctor = self
            .classes
            .get(class)
            .ok_or_else(|| ArgError::general(format!("unknown module class `{class}`")))?;
        let m = ctor(args, env)?;
        args.finish(class)?;
        Ok(m)
    }
}
