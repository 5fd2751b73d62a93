//! `nfkit-daemon`: the daemon with nfkit's software ports only (no
//! `sim:` or `pci:`; `nfkit daemon` has those). Tests start this one.
//!
//! nfkit-daemon [--socket PATH] [--grpc-url HOST:PORT] [--allow-remote] [--max-request BYTES] [--config FILE.nfk]

use nfkit_port::{OpenOptions, Port, PortError, PortSpec};
use std::io::Write;
use std::sync::Arc;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut opts = nfkit_daemon::Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("nfkit-daemon: {name} needs a value");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--socket" => opts.socket = Some(val("--socket").into()),
            "--grpc-url" => opts.grpc_url = Some(val("--grpc-url")),
            "--allow-remote" => opts.allow_remote = true,
            "--config" => opts.config = Some(val("--config").into()),
            "--max-request" => {
                opts.max_request = val("--max-request").parse().unwrap_or_else(|_| {
                    eprintln!("nfkit-daemon: --max-request takes a number of bytes");
                    std::process::exit(2)
                })
            }
            other => {
                eprintln!(
                    "nfkit-daemon: unknown argument `{other}`\nusage: nfkit-daemon [--socket PATH] [--grpc-url HOST:PORT] [--allow-remote] [--max-request BYTES] [--config FILE.nfk]"
                );
                std::process::exit(2)
            }
        }
    }
    let open = Arc::new(|spec: &str| -> Result<Box<dyn Port>, PortError> {
        let s: PortSpec = spec
            .parse()
            .map_err(|e: nfkit_port::SpecError| PortError::config(spec, e.to_string()))?;
        nfkit_port::open(&s, &OpenOptions::default())
    });
    match nfkit_daemon::run(opts, open, |addr| {
        println!("nfkit daemon: listening on {addr}");
        let _ = std::io::stdout().flush();
    }) {
        Ok(report) => eprint!("{report}"),
        Err(e) => {
            eprintln!("nfkit-daemon: {e}");
            std::process::exit(1)
        }
    }
}
