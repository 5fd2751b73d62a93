//! Measure: latency since Timestamp, into an HDR histogram (ns, three
//! significant digits); packets pass on to gate 0. Statistics: count,
//! min, mean, p50, p99, p999, max (ns). A stamp from the future (clock
//! skew between workers) counts as zero.

use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module};
use crate::modules::TIMESTAMP_ATTR;
use hdrhistogram::Histogram;
use nfkit_hw::Batch;

crate::modules::declare_class!("Measure" => build);

pub struct Measure {
    offset: Option<usize>,
    hist: Histogram<u64>,
}

impl Measure {
    /// Read the `timestamp` attribute.
    pub fn new() -> Measure {
        Measure::with(None)
    }
    /// Read the stamp from packet bytes `offset..offset + 8`.
    pub fn in_packet(offset: usize) -> Measure {
        Measure::with(Some(offset))
    }
    fn with(offset: Option<usize>) -> Measure {
        Measure {
            offset,
            // Auto-resizing: records never fail for large values.
            hist: Histogram::new(3).expect("3 significant digits is valid"),
        }
    }
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }
}

impl Default for Measure {
    fn default() -> Self {
        Measure::new()
    }
}

impl Module for Measure {
    fn class(&self) -> &'static str {
        "Measure"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        match self.offset {
            None => vec![AttrSpec::new(TIMESTAMP_ATTR, 8, Access::Read)],
            Some(_) => Vec::new(),
        }
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        let attr = ctx.attr(0);
        for p in batch.iter() {
            let stamp = match self.offset {
                None => Some(attr.get_u64(p)),
                Some(o) => p
                    .data()
                    .get(o..o + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes),
            };
            if let Some(t) = stamp {
                let _ = self.hist.record(now.saturating_sub(t));
            }
        }
        ctx.forward(0, batch);
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        let h = &self.hist;
        vec![
            ("count", h.len()),
            ("min_ns", h.min()),
            ("mean_ns", h.mean() as u64),
            ("p50_ns", h.value_at_quantile(0.5)),
            ("p99_ns", h.value_at_quantile(0.99)),
            ("p999_ns", h.value_at_quantile(0.999)),
            ("max_ns", h.max()),
        ]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(match args.u64("offset")? {
        Some(o) if o <= u16::MAX as u64 => Measure::in_packet(o as usize),
        Some(o) => return Err(ArgError::new("offset", format!("{o} is beyond any packet"))),
        None => Measure::new(),
    }))
}
