//! `nfkit run FILE`: load a pipeline description (the SoftNIC layer's
//! config language, see `nfkit-pipeline`), open its ports through the
//! one registry ([`crate::registry`]), run it, and print a `show pipeline`-style report.
//!
//! Simulated ports (`sim:N`) named by the file get a generator and a sink
//! on their wires, so every example runs anywhere with live traffic.

use crate::{registry, stop_flag, SimLab, SimWire};
use anyhow::{Context, Result};
use nfkit_port::{OpenOptions, Port, PortError};
use std::path::Path;
use std::time::Duration;

/// Queues per simulated port (examples use up to 2 for duplication).
const SIM_QUEUES: usize = 2;

pub fn run(
    path: &Path,
    seconds: Option<u64>,
    idle: nfkit_port::IdleOptions,
    cores: Option<&[usize]>,
) -> Result<nfkit_pipeline::PipelineStats> {
    let desc = nfkit_pipeline::load(path)?;
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 1024,
        },
        SIM_QUEUES,
    );
    let reg = registry(lab.clone(), SIM_QUEUES);
    let open = |spec: &str| -> Result<Box<dyn Port>, PortError> {
        reg.open_str(spec, &OpenOptions::default())
            .inspect(|p| eprintln!("{}", nfkit_port::capability_line(&**p)))
    };
    let mut pipeline = desc
        .build(&open)
        .with_context(|| format!("building {}", path.display()))?;
    pipeline.set_idle(idle);
    // Workers without `core=` run on the `--cores` list in turn, or by
    // default on the cores this process may use, in turn.
    let (list, how) = match cores {
        Some(c) => (c.to_vec(), "--cores"),
        None => (
            crate::cores::allowed(),
            "the allowed cores in turn; --cores LIST to choose",
        ),
    };
    for line in pipeline.pin_unpinned(&list, how) {
        eprintln!("{line}");
    }
    lab.start_load();
    let stop = stop_flag(None);
    let limit = seconds.map(Duration::from_secs);
    let result = pipeline.run_until(&stop, limit);
    lab.stop_load();
    let stats = result?;
    pipeline.shutdown()?;
    Ok(stats)
}
