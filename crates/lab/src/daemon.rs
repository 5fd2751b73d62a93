//! `nfkit daemon`: starts `nfkit-daemon` (the gRPC control plane,
//! wire-compatible with BESS) with the command's port registry, so
//! `sim:` ports (with a generator and a sink on their wires) and `pci:`
//! ports open as in `nfkit run`.

use crate::{registry, SimLab, SimWire};
use anyhow::Result;
use nfkit_port::{OpenOptions, Port, PortError};
use std::io::Write;
use std::sync::Arc;

/// Queues per simulated port.
const SIM_QUEUES: usize = 2;

pub use nfkit_daemon::{Options, DEFAULT_MAX_REQUEST};

pub fn run(opts: Options) -> Result<()> {
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 1024,
        },
        SIM_QUEUES,
    );
    let reg = registry(lab.clone(), SIM_QUEUES);
    let open = Arc::new(move |spec: &str| -> Result<Box<dyn Port>, PortError> {
        reg.open_str(spec, &OpenOptions::default())
            .inspect(|p| eprintln!("{}", nfkit_port::capability_line(&**p)))
    });
    lab.start_load();
    let report = nfkit_daemon::run(opts, open, |addr| {
        println!("nfkit daemon: listening on {addr}");
        let _ = std::io::stdout().flush();
    });
    lab.stop_load();
    eprint!("{}", report?);
    Ok(())
}
