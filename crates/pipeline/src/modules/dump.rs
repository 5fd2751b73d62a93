//! Dump: print the first `limit` packets (length and hex bytes) to a
//! writer (standard error by default), then pass everything on to gate 0.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;
use std::io::Write;

crate::modules::declare_class!("Dump" => build);

pub struct Dump {
    out: Box<dyn Write + Send>,
    limit: u64,
    seen: u64,
    /// Bytes shown per packet.
    snap: usize,
}

impl Dump {
    pub fn new(out: Box<dyn Write + Send>, limit: u64, snap: usize) -> Dump {
        Dump {
            out,
            limit,
            seen: 0,
            snap,
        }
    }
}

impl Module for Dump {
    fn class(&self) -> &'static str {
        "Dump"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.iter() {
            if self.seen >= self.limit {
                break;
            }
            self.seen += 1;
            let data = p.data();
            // A failing writer must not stop the traffic.
            let _ = write!(self.out, "packet {} len={}:", self.seen, data.len());
            for b in &data[..data.len().min(self.snap)] {
                let _ = write!(self.out, " {b:02x}");
            }
            let _ = writeln!(self.out);
        }
        ctx.forward(0, batch);
    }
    fn on_pause(&mut self) {
        let _ = self.out.flush();
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let limit = args.u64_or("limit", 16)?;
    let snap = args.u64_or("snap", 64)? as usize;
    let out: Box<dyn Write + Send> = match args.str("file")? {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(&path)
                .map_err(|e| ArgError::new("file", format!("cannot create `{path}`: {e}")))?,
        )),
        None => Box::new(std::io::stderr()),
    };
    Ok(Box::new(Dump::new(out, limit, snap)))
}
