//! RandomDrop: drop each packet with probability `drop_rate` (0 to 1),
//! pass the rest to gate 0. Command `set_droprate(drop_rate=F)`.

use super::rng::{self, Rng};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("RandomDrop" => build);

pub struct RandomDrop {
    rate: f64,
    rng: Rng,
}

fn rate(args: &mut Args) -> Result<f64, ArgError> {
    let r = args
        .f64("drop_rate")?
        .ok_or_else(|| ArgError::new("drop_rate", "is required"))?;
    if !(0.0..=1.0).contains(&r) {
        return Err(ArgError::new(
            "drop_rate",
            format!("{r} is not between 0 and 1"),
        ));
    }
    Ok(r)
}

impl RandomDrop {
    pub fn new(rate: f64, seed: u64) -> RandomDrop {
        RandomDrop {
            rate,
            rng: Rng::new(seed),
        }
    }
}

impl Module for RandomDrop {
    fn class(&self) -> &'static str {
        "RandomDrop"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            if self.rng.unit() < self.rate {
                ctx.drop_packet(p);
            } else {
                ctx.emit(0, p);
            }
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        if cmd != "set_droprate" {
            return Err(ArgError::general(format!(
                "RandomDrop has no command `{cmd}`"
            )));
        }
        let r = rate(args)?;
        args.finish(cmd)?;
        self.rate = r;
        Ok(no_reply())
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let r = rate(args)?;
    Ok(Box::new(RandomDrop::new(r, rng::seed(args)?)))
}
