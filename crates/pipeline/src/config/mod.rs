//! The config language (see the crate documentation for the grammar):
//! [`parse`]/[`load`] turn text into a checked [`Desc`], and
//! [`Desc::build`] opens the ports, makes the modules and commits the
//! pipeline.

mod build;
mod lexer;
mod parser;

pub use build::{BuildOptions, OpenPort};

use crate::args::{Args, Pos};
use crate::modules::Registry;
use crate::sched::{Placement, PolicySpec};
use std::fmt;
use std::path::Path;

/// An error in a config file, at a place in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    pub pos: Pos,
    pub msg: String,
}

impl ConfigError {
    pub fn new(file: &str, pos: Pos, msg: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            pos,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pos.line == 0 {
            // about the whole file (unreadable, empty): no position
            return write!(f, "{}: {}", self.file, self.msg);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.col, self.msg
        )
    }
}

/// `port NAME = "spec"`
#[derive(Debug, Clone)]
pub struct PortDecl {
    pub name: String,
    pub spec: String,
    pub pos: Pos,
}

/// `worker NAME core=N`
#[derive(Debug, Clone)]
pub struct WorkerDecl {
    pub name: String,
    pub core: Option<usize>,
    pub pos: Pos,
}

/// `name::Class(args)` or an anonymous `Class(args)` (named after its
/// class and position: `sink3`).
#[derive(Debug, Clone)]
pub struct ModuleDecl {
    pub name: String,
    pub class: String,
    pub args: Args,
    pub pos: Pos,
}

/// `from:ogate -> igate:to`
#[derive(Debug, Clone)]
pub struct Link {
    pub from: String,
    pub ogate: usize,
    pub to: String,
    pub igate: usize,
    /// Where the arrow is.
    pub pos: Pos,
}

/// `tc NAME = policy(parent=..., worker=..., priority=|share=..., ...)`
#[derive(Debug, Clone)]
pub struct TcDecl {
    pub name: String,
    pub policy: PolicySpec,
    pub worker: Option<String>,
    pub parent: String,
    pub placement: Placement,
    pub pos: Pos,
}

/// `module.attach(tc=NAME, priority=|share=..., worker=NAME)`
#[derive(Debug, Clone)]
pub struct AttachDecl {
    pub module: String,
    pub tc: Option<String>,
    pub worker: Option<String>,
    pub placement: Placement,
    pub pos: Pos,
}

/// `module.CMD(name=value, ...)`: a module command (BESS's
/// ModuleCommand) run on the module when it is built, in file order,
/// such as a classifier's initial entries: `em.add(gate=1, fields=[0x0a000001])`.
#[derive(Debug, Clone)]
pub struct CommandDecl {
    pub module: String,
    pub cmd: String,
    pub args: Args,
    pub pos: Pos,
}

/// A parsed and name-checked pipeline description.
#[derive(Debug, Clone, Default)]
pub struct Desc {
    /// File name used in messages.
    pub file: String,
    pub ports: Vec<PortDecl>,
    pub workers: Vec<WorkerDecl>,
    pub modules: Vec<ModuleDecl>,
    pub links: Vec<Link>,
    pub tcs: Vec<TcDecl>,
    pub attachments: Vec<AttachDecl>,
    /// Module commands, in file order.
    pub commands: Vec<CommandDecl>,
}

/// Parse config text with the core module classes. `file` names the
/// source in error messages.
pub fn parse(src: &str, file: &str) -> Result<Desc, ConfigError> {
    parse_with(src, file, &Registry::default())
}

/// Parse config text, knowing the classes of `registry`.
pub fn parse_with(src: &str, file: &str, registry: &Registry) -> Result<Desc, ConfigError> {
    let toks = lexer::lex(src, file)?;
    parser::Parser::new(toks, file, registry).parse()
}

/// Read and parse a config file.
pub fn load(path: impl AsRef<Path>) -> Result<Desc, ConfigError> {
    load_with(path, &Registry::default())
}

/// Read and parse a config file, knowing the classes of `registry`. A
/// file that is not text (invalid UTF-8 or a NUL byte) is refused at the
/// first such byte, and one that declares no port and no module (empty,
/// or only comments) is refused: there would be nothing to run.
pub fn load_with(path: impl AsRef<Path>, registry: &Registry) -> Result<Desc, ConfigError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let whole = |msg: String| ConfigError::new(&file, Pos { line: 0, col: 0 }, msg);
    let bytes = std::fs::read(path).map_err(|e| whole(format!("cannot read the file: {e}")))?;
    let src = text(&bytes).map_err(|(pos, byte)| {
        ConfigError::new(
            &file,
            pos,
            format!("not a text file: byte 0x{byte:02x} (a config is UTF-8 text)"),
        )
    })?;
    let desc = parse_with(src, &file, registry)?;
    if desc.ports.is_empty() && desc.modules.is_empty() {
        return Err(whole(
            "declares no port and no module: nothing to run (an empty file?)".into(),
        ));
    }
    Ok(desc)
}

/// `bytes` as text, or the position and value of the first byte that
/// is not (invalid UTF-8, or NUL).
fn text(bytes: &[u8]) -> Result<&str, (Pos, u8)> {
    let (valid, invalid_at) = match std::str::from_utf8(bytes) {
        Ok(s) => (s, None),
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
            (valid, Some(e.valid_up_to()))
        }
    };
    let bad = valid.find('\0').or(invalid_at);
    let Some(at) = bad else {
        return Ok(valid);
    };
    let before = &valid[..at.min(valid.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Err((Pos { line, col }, bytes[at]))
}
