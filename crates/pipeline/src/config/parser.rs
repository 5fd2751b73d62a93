//! Statements of the config language into a [`Desc`], checking names as
//! it goes.

use super::lexer::Tok;
use super::{
    AttachDecl, CommandDecl, ConfigError, Desc, Link, ModuleDecl, PortDecl, TcDecl, WorkerDecl,
};
use crate::args::{Args, Pos, Value};
use crate::graph::ROOT_TC;
use crate::modules::Registry;
use crate::sched::{Placement, PolicySpec, Resource};
use std::collections::HashSet;

pub struct Parser<'a> {
    toks: Vec<(Tok, Pos)>,
    at: usize,
    file: &'a str,
    registry: &'a Registry,
    desc: Desc,
    /// Names of the modules declared so far (a file of thousands of
    /// modules parses in linear time).
    module_names: HashSet<String>,
}

/// A node in a chain: the module's name.
struct Endpoint {
    name: String,
    igate: usize,
    ogate: usize,
    pos: Pos,
}

impl<'a> Parser<'a> {
    pub fn new(toks: Vec<(Tok, Pos)>, file: &'a str, registry: &'a Registry) -> Parser<'a> {
        Parser {
            toks,
            at: 0,
            file,
            registry,
            desc: Desc {
                file: file.to_string(),
                ..Desc::default()
            },
            module_names: HashSet::new(),
        }
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.at].0
    }
    fn peek2(&self) -> &Tok {
        &self.toks[(self.at + 1).min(self.toks.len() - 1)].0
    }
    fn pos(&self) -> Pos {
        self.toks[self.at].1
    }
    fn bump(&mut self) -> (Tok, Pos) {
        let t = self.toks[self.at].clone();
        if self.at + 1 < self.toks.len() {
            self.at += 1;
        }
        t
    }
    fn error(&self, pos: Pos, msg: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, pos, msg.into())
    }
    fn expected(&self, what: &str) -> ConfigError {
        self.error(
            self.pos(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }
    fn expect(&mut self, t: Tok, what: &str) -> Result<Pos, ConfigError> {
        if *self.peek() == t {
            Ok(self.bump().1)
        } else {
            Err(self.expected(what))
        }
    }
    fn name(&mut self, what: &str) -> Result<(String, Pos), ConfigError> {
        match self.peek().clone() {
            Tok::Name(n) => {
                let p = self.bump().1;
                Ok((n, p))
            }
            _ => Err(self.expected(what)),
        }
    }
    fn skip_ends(&mut self) {
        while *self.peek() == Tok::End {
            self.bump();
        }
    }

    pub fn parse(mut self) -> Result<Desc, ConfigError> {
        loop {
            self.skip_ends();
            if *self.peek() == Tok::Eof {
                return Ok(self.desc);
            }
            self.statement()?;
            match self.peek() {
                Tok::End | Tok::Eof => {}
                _ => return Err(self.expected("`->` or the end of the statement")),
            }
        }
    }

    fn statement(&mut self) -> Result<(), ConfigError> {
        match (self.peek().clone(), self.peek2().clone()) {
            (Tok::Name(k), Tok::Name(_)) if k == "port" => self.port(),
            (Tok::Name(k), Tok::Name(_)) if k == "worker" => self.worker(),
            (Tok::Name(k), Tok::Name(_)) if k == "tc" => self.tc(),
            (Tok::Name(_), Tok::Dot) => self.attach(),
            _ => self.chain(),
        }
    }

    /// `port NAME = "spec"`
    fn port(&mut self) -> Result<(), ConfigError> {
        self.bump();
        let (name, pos) = self.name("a port name")?;
        if self.desc.ports.iter().any(|p| p.name == name) {
            return Err(self.error(pos, format!("port `{name}` is already declared")));
        }
        self.expect(Tok::Equals, "`=` after the port name")?;
        let spec = match self.bump() {
            (Tok::Str(s), _) => s,
            (t, p) => {
                return Err(self.error(
                    p,
                    format!(
                        "expected the port spec as a string (like \"sim:0\"), found {}",
                        t.describe()
                    ),
                ))
            }
        };
        self.desc.ports.push(PortDecl { name, spec, pos });
        Ok(())
    }

    /// `worker NAME [core=N]`
    fn worker(&mut self) -> Result<(), ConfigError> {
        self.bump();
        let (name, pos) = self.name("a worker name")?;
        if self.desc.workers.iter().any(|w| w.name == name) {
            return Err(self.error(pos, format!("worker `{name}` is already declared")));
        }
        let mut core = None;
        while let Tok::Name(k) = self.peek().clone() {
            let kp = self.bump().1;
            self.expect(Tok::Equals, "`=` after the worker option")?;
            match (k.as_str(), self.bump()) {
                ("core", (Tok::Int(c), _)) => core = Some(c as usize),
                ("core", (t, p)) => {
                    return Err(
                        self.error(p, format!("expected a core number, found {}", t.describe()))
                    )
                }
                (other, _) => {
                    return Err(self.error(
                        kp,
                        format!("unknown worker option `{other}` (expected core=N)"),
                    ))
                }
            }
        }
        self.desc.workers.push(WorkerDecl { name, core, pos });
        Ok(())
    }

    /// `tc NAME = POLICY(args)`
    fn tc(&mut self) -> Result<(), ConfigError> {
        self.bump();
        let (name, pos) = self.name("a traffic class name")?;
        if name == ROOT_TC || self.desc.tcs.iter().any(|t| t.name == name) {
            return Err(self.error(pos, format!("traffic class `{name}` is already declared")));
        }
        self.expect(Tok::Equals, "`=` after the class name")?;
        let (policy, ppos) =
            self.name("a policy (priority, weighted_fair, round_robin or rate_limit)")?;
        let mut args = self.args()?;
        let arg_err = |p: &Parser, args: &Args, e: crate::args::ArgError| {
            let pos = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(ppos);
            p.error(pos, e.to_string())
        };
        let worker = args.str("worker").map_err(|e| arg_err(self, &args, e))?;
        let parent = args
            .str("parent")
            .map_err(|e| arg_err(self, &args, e))?
            .unwrap_or(ROOT_TC.into());
        let placement = placement(&mut args).map_err(|e| arg_err(self, &args, e))?;
        let spec = policy_spec(&policy, &mut args).map_err(|e| arg_err(self, &args, e))?;
        args.finish(&policy).map_err(|e| arg_err(self, &args, e))?;
        if let Some(w) = &worker {
            if !self.desc.workers.iter().any(|d| &d.name == w) {
                return Err(self.error(
                    args.pos("worker").unwrap_or(pos),
                    format!("no worker named `{w}` (declare it first: worker {w} core=N)"),
                ));
            }
        }
        if parent != ROOT_TC && !self.desc.tcs.iter().any(|t| t.name == parent) {
            return Err(self.error(
                args.pos("parent").unwrap_or(pos),
                format!("no traffic class named `{parent}` declared before this line (or `root`)"),
            ));
        }
        self.desc.tcs.push(TcDecl {
            name,
            policy: spec,
            worker,
            parent,
            placement,
            pos,
        });
        Ok(())
    }

    /// `MODULE.attach(tc=NAME, priority=N | share=N, worker=NAME)`
    fn attach(&mut self) -> Result<(), ConfigError> {
        let (module, pos) = self.name("a module name")?;
        self.expect(Tok::Dot, "`.`")?;
        let (method, mpos) = self.name("`attach` or a module command")?;
        if !self.module_names.contains(&module) {
            return Err(self.error(
                pos,
                format!("no module named `{module}` declared before this line"),
            ));
        }
        let mut args = self.args()?;
        if method != "attach" {
            // `MODULE.CMD(args)`: a module command run when the module is
            // built (initial table entries).
            self.desc.commands.push(CommandDecl {
                module,
                cmd: method,
                args,
                pos: mpos,
            });
            return Ok(());
        }
        let arg_err = |p: &Parser, args: &Args, e: crate::args::ArgError| {
            let at = e.arg.as_deref().and_then(|a| args.pos(a)).unwrap_or(mpos);
            p.error(at, e.to_string())
        };
        let tc = args.str("tc").map_err(|e| arg_err(self, &args, e))?;
        let worker = args.str("worker").map_err(|e| arg_err(self, &args, e))?;
        let placement = placement(&mut args).map_err(|e| arg_err(self, &args, e))?;
        args.finish("attach").map_err(|e| arg_err(self, &args, e))?;
        if let Some(t) = tc.as_deref().filter(|&t| t != ROOT_TC) {
            if !self.desc.tcs.iter().any(|d| d.name == t) {
                return Err(self.error(
                    args.pos("tc").unwrap_or(pos),
                    format!("no traffic class named `{t}` declared before this line"),
                ));
            }
        }
        if let Some(w) = &worker {
            if !self.desc.workers.iter().any(|d| &d.name == w) {
                return Err(self.error(
                    args.pos("worker").unwrap_or(pos),
                    format!("no worker named `{w}`"),
                ));
            }
        }
        self.desc.attachments.push(AttachDecl {
            module,
            tc,
            worker,
            placement,
            pos,
        });
        Ok(())
    }

    /// `endpoint { -> endpoint }`, continuing over line ends next to `->`.
    fn chain(&mut self) -> Result<(), ConfigError> {
        let mut prev = self.endpoint()?;
        loop {
            // A chain may continue on the next line if that line starts with `->`.
            let save = self.at;
            self.skip_ends();
            if *self.peek() != Tok::Arrow {
                self.at = save;
                return Ok(());
            }
            let apos = self.bump().1;
            self.skip_ends();
            let next = self.endpoint()?;
            self.desc.links.push(Link {
                from: prev.name.clone(),
                ogate: prev.ogate,
                to: next.name.clone(),
                igate: next.igate,
                pos: apos,
            });
            let _ = prev.pos;
            prev = next;
        }
    }

    /// `[IGATE:] node [:OGATE]`
    fn endpoint(&mut self) -> Result<Endpoint, ConfigError> {
        let mut igate = 0;
        if let Tok::Int(g) = *self.peek() {
            self.bump();
            self.expect(Tok::Colon, "`:` after an input gate number (like `1:name`)")?;
            igate = g as usize;
        }
        let (name, pos) = self.node()?;
        let mut ogate = 0;
        if *self.peek() == Tok::Colon {
            self.bump();
            match self.bump() {
                (Tok::Int(g), _) => ogate = g as usize,
                (t, p) => {
                    return Err(self.error(
                        p,
                        format!(
                            "expected an output gate number after `:`, found {}",
                            t.describe()
                        ),
                    ))
                }
            }
        }
        Ok(Endpoint {
            name,
            igate,
            ogate,
            pos,
        })
    }

    /// `name::Class(args)`, `Class(args)` or `name`.
    fn node(&mut self) -> Result<(String, Pos), ConfigError> {
        let (first, pos) =
            self.name("a module (`name::Class(...)`, `Class(...)` or a module name)")?;
        match self.peek() {
            Tok::DoubleColon => {
                self.bump();
                let (class, cpos) = self.name("a module class after `::`")?;
                if self.module_names.contains(&first) {
                    return Err(self.error(pos, format!("module `{first}` is already declared")));
                }
                self.declare(first.clone(), class, pos, cpos)?;
                Ok((first, pos))
            }
            Tok::LParen => {
                let n = self.desc.modules.len();
                let name = format!("{}{n}", first.to_lowercase());
                self.declare(name.clone(), first, pos, pos)?;
                Ok((name, pos))
            }
            _ => {
                if !self.module_names.contains(&first) {
                    let hint = if self.registry.contains(&first) {
                        format!(" (to create a {first}, write `{first}()`)")
                    } else {
                        String::new()
                    };
                    return Err(self.error(
                        pos,
                        format!("no module named `{first}` declared before this line{hint}"),
                    ));
                }
                Ok((first, pos))
            }
        }
    }

    fn declare(
        &mut self,
        name: String,
        class: String,
        pos: Pos,
        class_pos: Pos,
    ) -> Result<(), ConfigError> {
        if !self.registry.contains(&class) {
            let known: Vec<&str> = self.registry.classes().collect();
            return Err(self.error(
                class_pos,
                format!(
                    "unknown module class `{class}` (known: {})",
                    known.join(", ")
                ),
            ));
        }
        let args = self.args()?;
        self.module_names.insert(name.clone());
        self.desc.modules.push(ModuleDecl {
            name,
            class,
            args,
            pos,
        });
        Ok(())
    }

    /// `( [name=value {, name=value}] )`
    fn args(&mut self) -> Result<Args, ConfigError> {
        self.expect(Tok::LParen, "`(`")?;
        let mut items: Vec<(String, Value, Pos)> = Vec::new();
        while *self.peek() != Tok::RParen {
            let (k, kp) = self.name("an argument name (`name=value`) or `)`")?;
            if items.iter().any(|i| i.0 == k) {
                return Err(self.error(kp, format!("argument `{k}` is given twice")));
            }
            self.expect(Tok::Equals, "`=` after the argument name")?;
            let v = self.value()?;
            items.push((k, v, kp));
            if *self.peek() == Tok::Comma {
                self.bump();
            } else if *self.peek() != Tok::RParen {
                return Err(self.expected("`,` or `)`"));
            }
        }
        self.bump();
        Ok(Args::new(items))
    }

    fn value(&mut self) -> Result<Value, ConfigError> {
        match self.bump() {
            (Tok::Int(v), _) => Ok(Value::Int(v)),
            (Tok::Float(v), _) => Ok(Value::Float(v)),
            (Tok::Str(s), _) => Ok(Value::Str(s)),
            (Tok::Name(n), _) => Ok(Value::Ident(n)),
            (Tok::LParen, _) => {
                // A record `(name=value, ...)`.
                self.at -= 1;
                Ok(self.args()?.into_value())
            }
            (Tok::LBracket, _) => {
                let mut list = Vec::new();
                while *self.peek() != Tok::RBracket {
                    list.push(self.value()?);
                    if *self.peek() == Tok::Comma {
                        self.bump();
                    } else if *self.peek() != Tok::RBracket {
                        return Err(self.expected("`,` or `]`"));
                    }
                }
                self.bump();
                Ok(Value::List(list))
            }
            (t, p) => Err(self.error(
                p,
                format!(
                    "expected a value (number, string, name, [list] or (record)), found {}",
                    t.describe()
                ),
            )),
        }
    }
}

fn placement(args: &mut Args) -> Result<Placement, crate::args::ArgError> {
    let priority = match args.u64("priority")? {
        Some(p) if p > u32::MAX as u64 => {
            return Err(crate::args::ArgError::new(
                "priority",
                "must fit in 32 bits",
            ))
        }
        p => p.map(|p| p as u32),
    };
    Ok(Placement {
        priority,
        share: args.u64("share")?,
    })
}

fn resource(args: &mut Args, default: Resource) -> Result<Resource, crate::args::ArgError> {
    match args.str("resource")? {
        None => Ok(default),
        Some(r) => Resource::parse(&r).ok_or_else(|| {
            crate::args::ArgError::new(
                "resource",
                format!("expected count, cycle, packet or bit, found `{r}`"),
            )
        }),
    }
}

fn policy_spec(policy: &str, args: &mut Args) -> Result<PolicySpec, crate::args::ArgError> {
    use crate::args::ArgError;
    Ok(match policy {
        "priority" => PolicySpec::Priority,
        "round_robin" => PolicySpec::RoundRobin,
        "weighted_fair" => PolicySpec::WeightedFair {
            resource: resource(args, Resource::Count)?,
        },
        "rate_limit" => {
            let resource = resource(args, Resource::Bit)?;
            let limit = args.u64("limit")?.ok_or_else(|| ArgError::new("limit", "is required (units per second, like 10M)"))?;
            if limit == 0 {
                return Err(ArgError::new("limit", "must be above 0"));
            }
            PolicySpec::RateLimit {
                resource,
                limit,
                max_burst: args.u64("max_burst")?,
            }
        }
        other => {
            return Err(ArgError::general(format!(
                "unknown policy `{other}` (expected priority, weighted_fair, round_robin or rate_limit)"
            )))
        }
    })
}
