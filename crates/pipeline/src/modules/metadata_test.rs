//! MetadataTest (BESS): declares metadata attributes it reads, writes
//! and updates (to test the attribute allocator), and passes packets
//! from input gate i to output gate i. Attributes it writes get the
//! value 1, those it updates are incremented.
//!
//! Arguments: `read=(name=size, ...)`, `write=(...)`, `update=(...)`
//! (sizes 1 to 32), `gates=N` (default 1).

use crate::args::{ArgError, Args, Value};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("MetadataTest" => build);

pub struct MetadataTest {
    attrs: Vec<AttrSpec>,
    gates: usize,
}

impl Module for MetadataTest {
    fn class(&self) -> &'static str {
        "MetadataTest"
    }
    fn igates(&self) -> usize {
        self.gates
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        self.attrs.clone()
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        for p in batch.iter_mut() {
            for (i, a) in self.attrs.iter().enumerate() {
                let at = ctx.attr(i);
                match a.access {
                    Access::Write => at.set_u64(p, 1),
                    Access::Update => {
                        let v = at.get_u64(p);
                        at.set_u64(p, v.wrapping_add(1));
                    }
                    Access::Read => {}
                }
            }
        }
        ctx.forward(igate, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut attrs = Vec::new();
    for (arg, access) in [
        ("read", Access::Read),
        ("write", Access::Write),
        ("update", Access::Update),
    ] {
        let Some(v) = args.take(arg) else { continue };
        let Value::Map(m) = v else {
            return Err(ArgError::new(
                arg,
                format!("expected a record (name=size, ...), found `{v}`"),
            ));
        };
        for (name, size) in m {
            match size {
                Value::Int(s) if (1..=32).contains(&s) => {
                    attrs.push(AttrSpec::new(name, s as usize, access))
                }
                v => {
                    return Err(ArgError::new(
                        arg,
                        format!("`{name}`: size `{v}` is not 1 to 32"),
                    ))
                }
            }
        }
    }
    let gates = args.usize_in("gates", 1, 1, MAX_GATES)?;
    Ok(Box::new(MetadataTest { attrs, gates }))
}
