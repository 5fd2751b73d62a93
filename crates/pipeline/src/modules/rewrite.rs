//! Rewrite (BESS): replace each packet's bytes with the next of a list
//! of templates, in turn (its length becomes the template's). With no
//! template, packets pass unchanged.
//!
//! Arguments: `templates=["bytes", [1, 2, 3], ...]` (at most 64, each
//! 14 bytes to a packet buffer). Commands: `add(templates=[...])`,
//! `clear()`.

use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("Rewrite" => build);

/// Most templates.
pub const MAX_TEMPLATES: usize = 64;
/// Largest template (a packet buffer's data room in the default pools).
pub const MAX_TEMPLATE: usize = 1920;

pub struct Rewrite {
    templates: Vec<Vec<u8>>,
    next: usize,
}

impl Rewrite {
    pub fn new() -> Rewrite {
        Rewrite {
            templates: Vec::new(),
            next: 0,
        }
    }

    fn parse(&self, args: &mut Args) -> Result<Vec<Vec<u8>>, ArgError> {
        let list = match args.take("templates") {
            None => return Err(ArgError::new("templates", "is required")),
            Some(Value::List(l)) => l,
            Some(v) => {
                return Err(ArgError::new(
                    "templates",
                    format!("expected a list, found `{v}`"),
                ))
            }
        };
        let mut out = Vec::new();
        for v in list {
            let mut one = Args::from_pairs(&[("templates", v)]);
            let t = one.bytes("templates")?.unwrap_or_default();
            if !(14..=MAX_TEMPLATE).contains(&t.len()) {
                return Err(ArgError::new(
                    "templates",
                    format!(
                        "a template of {} bytes is not 14 to {MAX_TEMPLATE}",
                        t.len()
                    ),
                ));
            }
            out.push(t);
        }
        if self.templates.len() + out.len() > MAX_TEMPLATES {
            return Err(ArgError::new(
                "templates",
                format!("more than {MAX_TEMPLATES} templates"),
            ));
        }
        Ok(out)
    }
}

impl Default for Rewrite {
    fn default() -> Self {
        Rewrite::new()
    }
}

impl Module for Rewrite {
    fn class(&self) -> &'static str {
        "Rewrite"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        if !self.templates.is_empty() {
            let before = batch.len();
            let (templates, next) = (&self.templates, &mut self.next);
            batch.retain(|p| {
                let t = &templates[*next];
                *next = (*next + 1) % templates.len();
                p.copy_from(t).is_ok()
            });
            ctx.count_dropped((before - batch.len()) as u64);
        }
        ctx.forward(0, batch);
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let t = self.parse(args)?;
                args.finish(cmd)?;
                self.templates.extend(t);
            }
            "clear" => {
                args.finish(cmd)?;
                self.templates.clear();
                self.next = 0;
            }
            _ => return Err(ArgError::general(format!("Rewrite has no command `{cmd}`"))),
        }
        Ok(no_reply())
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut r = Rewrite::new();
    if args.pos("templates").is_some() {
        r.templates = r.parse(args)?;
    }
    Ok(Box::new(r))
}
