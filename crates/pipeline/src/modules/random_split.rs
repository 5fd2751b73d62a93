//! RandomSplit: drop a packet with probability `drop_rate`, else send it
//! out of a gate chosen uniformly from `gates`.
//!
//! The generator is a seeded xorshift64* in the module: a few
//! instructions per packet and reproducible runs (tests fix the seed).

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("RandomSplit" => build);

#[derive(Debug)]
pub struct RandomSplit {
    gates: Vec<usize>,
    /// Drop when a 32-bit draw is below this.
    drop_below: u64,
    state: u64,
}

impl RandomSplit {
    pub fn new(gates: Vec<usize>, drop_rate: f64, seed: u64) -> RandomSplit {
        RandomSplit {
            gates,
            drop_below: (drop_rate.clamp(0.0, 1.0) * (1u64 << 32) as f64) as u64,
            state: seed | 1,
        }
    }
    fn draw(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32
    }
}

impl Module for RandomSplit {
    fn class(&self) -> &'static str {
        "RandomSplit"
    }
    fn ogates(&self) -> usize {
        self.gates.iter().max().map_or(0, |g| g + 1)
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            if self.gates.is_empty() || self.draw() < self.drop_below {
                ctx.drop_packet(p);
                continue;
            }
            let pick = (self.draw() % self.gates.len() as u64) as usize;
            let g = self.gates[pick];
            ctx.emit(g, p);
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates: Vec<usize> = args
        .u64_list("gates")?
        .unwrap_or(vec![0])
        .into_iter()
        .map(|g| g as usize)
        .collect();
    if let Some(g) = gates.iter().find(|&&g| g >= MAX_GATES) {
        return Err(ArgError::new(
            "gates",
            format!("gate {g} is beyond {}", MAX_GATES - 1),
        ));
    }
    let rate = args.f64("drop_rate")?.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&rate) {
        return Err(ArgError::new(
            "drop_rate",
            format!("{rate} is not between 0 and 1"),
        ));
    }
    let seed = args.u64_or("seed", 0x9E37_79B9_7F4A_7C15)?;
    Ok(Box::new(RandomSplit::new(gates, rate, seed)))
}
