//! Gate hooks over the service (BESS's ListGateHookClass,
//! ConfigureGateHook, ListGateHooks): `Track` (nfkit counts every gate
//! always: packets, batches, bits, one add per batch) and `TcpDump`
//! (every packet through the gate written as pcap into a FIFO the
//! client made and opened for reading, as BESS's tcpdump hook does).
//!
//! A TcpDump tap is a [`GateTap`] the worker calls with each batch
//! through the gate; gates without one cost nothing more than before (a
//! `None` checked per batch). Writes never block the worker: the FIFO is
//! opened non-blocking; a record that does not fit is a counted capture
//! drop (a record cut by a full pipe is finished first, so the stream
//! stays a valid pcap); a reader that went away (EPIPE) closes the tap,
//! and what follows is counted as dropped. Forwarding is unaffected.

use crate::error::{Fail, Res};
use nfkit_hw::Batch;
use nfkit_pipeline::hooks::GateTap;
use parking_lot::Mutex;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// BESS's hook class names.
pub const TRACK: &str = "Track";
pub const TCPDUMP: &str = "TcpDump";
/// BESS's default hook names.
pub const TRACK_NAME: &str = "track";
pub const TCPDUMP_NAME: &str = "tcpdump";

/// Largest frame bytes kept per packet (the pcap snap length).
pub const SNAPLEN: u32 = 65535;

/// pcap's global header: microsecond timestamps, Ethernet.
fn pcap_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone 0, sigfigs 0
    h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

struct Sink {
    fifo: Option<File>,
    /// The rest of a record a full pipe cut; written before anything new.
    pending: Vec<u8>,
    record: Vec<u8>,
}

/// A pcap writer into a FIFO, called by the worker that owns the gate.
pub struct TcpDumpTap {
    sink: Mutex<Sink>,
    written: AtomicU64,
    dropped: AtomicU64,
    pub fifo_path: String,
}

impl TcpDumpTap {
    /// Open `fifo` for writing without blocking: someone must already
    /// have it open for reading (the client does before asking).
    pub fn open(fifo: &str) -> Res<TcpDumpTap> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let meta = std::fs::metadata(fifo)
            .map_err(|e| Fail::inval(format!("TcpDump: fifo `{fifo}`: {e}")))?;
        if !meta.file_type().is_fifo() {
            return Err(Fail::inval(format!(
                "TcpDump: `{fifo}` is not a FIFO (make one with mkfifo, open it for reading, then configure the hook)"
            )));
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ENXIO) {
                    Fail::inval(format!(
                        "TcpDump: nobody reads the FIFO `{fifo}`: open it for reading first"
                    ))
                } else {
                    Fail::inval(format!("TcpDump: cannot open `{fifo}`: {e}"))
                }
            })?;
        let tap = TcpDumpTap {
            sink: Mutex::new(Sink {
                fifo: Some(f),
                pending: Vec::new(),
                record: Vec::with_capacity(2048),
            }),
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            fifo_path: fifo.to_string(),
        };
        {
            let mut s = tap.sink.lock();
            let h = pcap_header();
            // The pipe is empty: 24 bytes always fit.
            write_some(&mut s, &h);
        }
        Ok(tap)
    }

    /// Packets written to the FIFO.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Packets the capture dropped (pipe full, reader gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Write what fits; the rest of `buf` goes to `pending`. Returns false
/// when the reader is gone (the FIFO is closed).
fn write_some(s: &mut Sink, buf: &[u8]) -> bool {
    let Some(f) = s.fifo.as_mut() else {
        return false;
    };
    let mut off = 0;
    while off < buf.len() {
        match f.write(&buf[off..]) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                // EPIPE: the reader went away.
                s.fifo = None;
                s.pending.clear();
                return false;
            }
        }
    }
    if off < buf.len() {
        s.pending.extend_from_slice(&buf[off..]);
    }
    true
}

/// Finish a cut record. Returns whether the pipe took all of it.
fn flush_pending(s: &mut Sink) -> bool {
    if s.pending.is_empty() {
        return true;
    }
    let p = std::mem::take(&mut s.pending);
    write_some(s, &p) && s.pending.is_empty()
}

impl GateTap for TcpDumpTap {
    fn tap(&self, batch: &Batch) {
        let mut s = self.sink.lock();
        let n = batch.len() as u64;
        if s.fifo.is_none() || !flush_pending(&mut s) {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (sec, usec) = (now.as_secs() as u32, now.subsec_micros());
        let mut written = 0;
        for p in batch.iter() {
            let data = p.data();
            let cap = data.len().min(SNAPLEN as usize);
            let mut rec = std::mem::take(&mut s.record);
            rec.clear();
            rec.extend_from_slice(&sec.to_le_bytes());
            rec.extend_from_slice(&usec.to_le_bytes());
            rec.extend_from_slice(&(cap as u32).to_le_bytes());
            rec.extend_from_slice(&(data.len() as u32).to_le_bytes());
            rec.extend_from_slice(&data[..cap]);
            let alive = write_some(&mut s, &rec);
            s.record = rec;
            if !alive {
                break;
            }
            written += 1;
            if !s.pending.is_empty() {
                // The pipe is full: this record finishes later, the
                // rest of the batch is dropped.
                break;
            }
        }
        self.written.fetch_add(written, Ordering::Relaxed);
        self.dropped.fetch_add(n - written, Ordering::Relaxed);
    }
}

/// The hooks the daemon has set, by (module, direction, gate).
#[derive(Default)]
pub struct Hooks {
    pub taps: Vec<HookEntry>,
}

/// One TcpDump hook.
pub struct HookEntry {
    pub module: String,
    pub out: bool,
    pub gate: usize,
    pub name: String,
    pub tap: std::sync::Arc<TcpDumpTap>,
}

use crate::mclass::decode;
use crate::pb;
use crate::state::Daemon;
use nfkit_pipeline::hooks::GateDir;
use std::sync::Arc;

/// ListGateHookClass.
pub fn classes() -> pb::ListGateHookClassResponse {
    pb::ListGateHookClassResponse {
        error: None,
        names: vec![TRACK.into(), TCPDUMP.into()],
    }
}

/// GetGateHookClassInfo.
pub fn class_info(name: &str) -> Res<pb::GetGateHookClassInfoResponse> {
    let help = match name {
        TRACK => "counts packets, batches and bytes per gate (always on in nfkit)",
        TCPDUMP => "writes every packet through the gate as pcap into a FIFO (bess.pb.TcpdumpArg {fifo}); a full FIFO drops captures, never packets",
        _ => return Err(Fail::noent(format!("no gate hook class named `{name}` (nfkit has Track, TcpDump)"))),
    };
    Ok(pb::GetGateHookClassInfoResponse {
        error: None,
        name: name.into(),
        help: help.into(),
        cmds: Vec::new(),
        cmd_args: Vec::new(),
    })
}

fn gate_of(h: &pb::GateHookInfo) -> Res<(GateDir, usize)> {
    use pb::gate_hook_info::Gate;
    let (dir, g) = match h.gate {
        Some(Gate::Igate(g)) => (GateDir::In, g),
        Some(Gate::Ogate(g)) => (GateDir::Out, g),
        None => (GateDir::Out, 0),
    };
    if g < 0 {
        return Err(Fail::inval(format!(
            "gate {g}: nfkit hooks one gate at a time (give its number)"
        )));
    }
    Ok((dir, g as usize))
}

/// ConfigureGateHook.
pub fn configure(
    d: &mut Daemon,
    r: pb::ConfigureGateHookRequest,
) -> Res<pb::ConfigureGateHookResponse> {
    let h = r.hook.ok_or_else(|| Fail::inval("`hook` is required"))?;
    let (dir, gate) = gate_of(&h)?;
    d.check_gate(&h.module_name, dir, gate)?;
    match h.class_name.as_str() {
        TRACK => {
            if r.enable {
                Ok(pb::ConfigureGateHookResponse {
                    error: None,
                    name: if h.hook_name.is_empty() {
                        TRACK_NAME.into()
                    } else {
                        h.hook_name
                    },
                })
            } else {
                Err(Fail::notsup(
                    "Track: nfkit counts every gate always (one add per batch); it cannot be turned off",
                ))
            }
        }
        TCPDUMP => {
            let name = if h.hook_name.is_empty() {
                TCPDUMP_NAME.to_string()
            } else {
                h.hook_name.clone()
            };
            let out = dir == GateDir::Out;
            let existing = d
                .hooks()
                .taps
                .iter()
                .position(|e| e.module == h.module_name && e.out == out && e.gate == gate);
            if !r.enable {
                let Some(i) = existing else {
                    return Err(Fail::noent(format!(
                        "no TcpDump hook on {} gate {gate} of `{}`",
                        if out { "output" } else { "input" },
                        h.module_name
                    )));
                };
                d.set_gate_tap(&h.module_name, dir, gate, None)?;
                let e = d.hooks().taps.remove(i);
                tracing::info!(module = %e.module, gate, written = e.tap.written(), dropped = e.tap.dropped(), "tcpdump hook removed");
                return Ok(pb::ConfigureGateHookResponse { error: None, name });
            }
            if existing.is_some() {
                return Err(Fail::exist(format!(
                    "{} gate {gate} of `{}` already has a TcpDump hook",
                    if out { "output" } else { "input" },
                    h.module_name
                )));
            }
            let arg: pb::TcpdumpArg = decode(h.arg.as_ref(), "TcpdumpArg")?;
            if arg.fifo.is_empty() {
                return Err(Fail::inval("TcpDump: `fifo` is required"));
            }
            if arg.defer || arg.reconnect {
                return Err(Fail::notsup(
                    "TcpDump: defer and reconnect are not supported by nfkit (open the FIFO for reading first)",
                ));
            }
            let tap = Arc::new(TcpDumpTap::open(&arg.fifo)?);
            d.set_gate_tap(&h.module_name, dir, gate, Some(tap.clone()))?;
            d.hooks().taps.push(HookEntry {
                module: h.module_name.clone(),
                out,
                gate,
                name: name.clone(),
                tap,
            });
            Ok(pb::ConfigureGateHookResponse { error: None, name })
        }
        other => Err(Fail::noent(format!(
            "no gate hook class named `{other}` (nfkit has Track, TcpDump)"
        ))),
    }
}

/// ListGateHooks: the TcpDump hooks set (Track is on every gate).
pub fn list(d: &mut Daemon) -> pb::ListGateHooksResponse {
    let live: Vec<String> = d.module_names();
    d.hooks().taps.retain(|e| live.contains(&e.module));
    pb::ListGateHooksResponse {
        error: None,
        hooks: d
            .hooks()
            .taps
            .iter()
            .map(|e| pb::GateHookInfo {
                class_name: TCPDUMP.into(),
                hook_name: e.name.clone(),
                module_name: e.module.clone(),
                gate: Some(if e.out {
                    pb::gate_hook_info::Gate::Ogate(e.gate as i64)
                } else {
                    pb::gate_hook_info::Gate::Igate(e.gate as i64)
                }),
                arg: Some(crate::mclass::pack(
                    &pb::TcpdumpArg {
                        fifo: e.tap.fifo_path.clone(),
                        defer: false,
                        reconnect: false,
                    },
                    "TcpdumpArg",
                )),
            })
            .collect(),
    }
}
