//! `nfkit ctl ...`: the arguments, and printing what `nfkit-ctl`
//! returns. Connecting, requests and formatting are in `nfkit-ctl`.

use anyhow::Result;
use clap::{Subcommand, ValueEnum};
use nfkit_ctl::{monitor, script, show, Ctl, Target};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand)]
pub enum CtlCmd {
    /// Show what the daemon has.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Add a module or a port.
    Add {
        #[command(subcommand)]
        what: Add,
    },
    /// Connect MODULE[:OGATE] to [IGATE:]MODULE (gates default to 0).
    Connect { from: String, to: String },
    /// Disconnect MODULE[:OGATE].
    Disconnect { from: String },
    /// Run a module command: `command em add gate=1, fields=[0x0a000001]`
    /// (arguments in nfkit's syntax; the reply is printed).
    Command {
        module: String,
        cmd: String,
        /// name=value arguments (joined with ", ").
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Load a pipeline file (.nfk) into the running daemon.
    Run { file: PathBuf },
    /// Per-second rates, redrawn in place until Ctrl-C.
    Monitor {
        what: MonitorWhat,
        /// Seconds between readings.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many frames.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Capture a gate as pcap (a TcpDump gate hook writing into a FIFO
    /// this command makes): `nfkit ctl tcpdump m:0 | tcpdump -r -`.
    Tcpdump {
        /// MODULE[:GATE] (gate 0 by default).
        gate: String,
        /// Which side of the module.
        #[arg(value_enum, default_value = "out")]
        dir: GateSide,
        /// Write to FILE instead of stdout.
        #[arg(short = 'w', long)]
        write: Option<PathBuf>,
        /// Stop after this many packets.
        #[arg(short = 'c', long)]
        count: Option<u64>,
    },
    /// Pause every worker (between two batches).
    Pause,
    /// Resume the workers.
    Resume,
    /// Reset the daemon (remove everything) or stop it.
    Daemon { action: DaemonAction },
}

#[derive(Subcommand)]
pub enum Show {
    /// The daemon's version.
    Version,
    /// Workers, their cores and state.
    Worker,
    /// Ports and their counters.
    Port { names: Vec<String> },
    /// Modules, their counters and gates.
    Module { names: Vec<String> },
    /// Module classes, their help and commands.
    Mclass { names: Vec<String> },
    /// Traffic classes per worker, as a tree with counters.
    Tc,
    /// The module graph with per-edge packet counts.
    Pipeline {
        #[arg(long, value_enum, default_value = "text")]
        format: PipelineFormat,
    },
}

#[derive(Subcommand)]
pub enum Add {
    /// Create module NAME of CLASS with nfkit arguments: `add module src
    /// Source size=60`.
    Module {
        name: String,
        class: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Create port NAME from an nfkit port spec: `add port p0 afpacket:veth0`.
    Port { name: String, spec: String },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PipelineFormat {
    Text,
    Dot,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum MonitorWhat {
    Port,
    Tc,
    Pipeline,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GateSide {
    In,
    Out,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DaemonAction {
    /// ResetAll: remove every module, class, port and worker.
    Reset,
    /// KillBess: the daemon stops and prints its final statistics.
    Stop,
}

pub fn run(target: Target, cmd: CtlCmd) -> Result<()> {
    let mut c = Ctl::connect(target)?;
    let out = match cmd {
        CtlCmd::Show { what } => match what {
            Show::Version => show::version(&mut c)?,
            Show::Worker => show::workers(&mut c)?,
            Show::Port { names } => show::ports(&mut c, &names)?,
            Show::Module { names } => show::modules(&mut c, &names)?,
            Show::Mclass { names } => show::mclasses(&mut c, &names)?,
            Show::Tc => show::tcs(&mut c)?,
            Show::Pipeline { format } => show::pipeline(
                &mut c,
                match format {
                    PipelineFormat::Text => show::Format::Text,
                    PipelineFormat::Dot => show::Format::Dot,
                    PipelineFormat::Json => show::Format::Json,
                },
            )?,
        },
        CtlCmd::Add { what } => match what {
            Add::Module { name, class, args } => {
                let n = c.create_module(&name, &class, &args.join(", "))?;
                format!("module {n} ({class}) created\n")
            }
            Add::Port { name, spec } => {
                let n = c.create_port(&name, &spec)?;
                format!("port {n} ({spec}) created\n")
            }
        },
        CtlCmd::Connect { from, to } => {
            let (m1, og) = nfkit_ctl::parse_gate(&from).map_err(anyhow::Error::msg)?;
            let (m2, ig) = nfkit_ctl::parse_in_gate(&to).map_err(anyhow::Error::msg)?;
            c.connect_modules(&m1, og, &m2, ig)?;
            String::new()
        }
        CtlCmd::Disconnect { from } => {
            let (m, og) = nfkit_ctl::parse_gate(&from).map_err(anyhow::Error::msg)?;
            c.disconnect_modules(&m, og)?;
            String::new()
        }
        CtlCmd::Command { module, cmd, args } => {
            let r = c.command(&module, &cmd, &args.join(", "))?;
            if r.is_empty() {
                r
            } else {
                r + "\n"
            }
        }
        CtlCmd::Run { file } => {
            let desc = script::parse(&file)?;
            let done = script::load(&mut c, desc)?;
            format!("{}: {done}\n", file.display())
        }
        CtlCmd::Monitor {
            what,
            interval,
            count,
        } => {
            if !(interval.is_finite() && interval >= 0.05) {
                anyhow::bail!("--interval {interval}: give at least 0.05 seconds");
            }
            let what = match what {
                MonitorWhat::Port => monitor::What::Port,
                MonitorWhat::Tc => monitor::What::Tc,
                MonitorWhat::Pipeline => monitor::What::Pipeline,
            };
            let tty = std::io::stdout().is_terminal();
            monitor::run(
                &mut c,
                what,
                Duration::from_secs_f64(interval),
                count,
                |frame| {
                    let mut o = std::io::stdout().lock();
                    // In place on a terminal (home, clear); one frame
                    // after another, separated, into a pipe or file.
                    let r = if tty {
                        write!(o, "\x1b[H\x1b[2J{frame}")
                    } else {
                        writeln!(o, "{frame}")
                    };
                    r.and_then(|_| o.flush()).is_ok()
                },
            )?;
            String::new()
        }
        CtlCmd::Tcpdump {
            gate,
            dir,
            write,
            count,
        } => {
            let (m, g) = nfkit_ctl::parse_gate(&gate).map_err(anyhow::Error::msg)?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s2 = stop.clone();
            // Ctrl-C: take the hook off before exiting.
            let _ =
                ctrlc::set_handler(move || s2.store(true, std::sync::atomic::Ordering::Relaxed));
            let mut out: Box<dyn Write> = match &write {
                Some(p) => Box::new(
                    std::fs::File::create(p)
                        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))?,
                ),
                None => Box::new(std::io::stdout().lock()),
            };
            let n = nfkit_ctl::tcpdump::run(
                &mut c,
                &m,
                g,
                dir == GateSide::Out,
                count,
                &stop,
                &mut out,
            )?;
            eprintln!("{} packets captured", n.packets);
            String::new()
        }
        CtlCmd::Pause => {
            c.pause_all()?;
            String::new()
        }
        CtlCmd::Resume => {
            c.resume_all()?;
            String::new()
        }
        CtlCmd::Daemon { action } => match action {
            DaemonAction::Reset => {
                c.reset_all()?;
                "daemon reset\n".into()
            }
            DaemonAction::Stop => {
                c.kill()?;
                "daemon stopping\n".into()
            }
        },
    };
    print!("{out}");
    Ok(())
}
