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
//!
//! BESS's options: `defer` opens the FIFO only once a reader has it
//! open (the request returns at once; until then captures are counted
//! as dropped), `reconnect` opens it again, with a new pcap header,
//! after the reader went away. Both are done by a small opener thread
//! per hook that tries a non-blocking open every [`REOPEN_EVERY`]; it
//! ends with the hook. Gate −1 hooks every gate of that direction, all
//! writing into one FIFO through one tap (one pcap stream).

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

/// How often a deferred or reconnecting hook tries to open its FIFO.
pub const REOPEN_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

struct Sink {
    fifo: Option<File>,
    /// The FIFO was open once (a deferred hook's first reader came).
    opened: bool,
    /// The hook was removed: never open again.
    closed: bool,
    /// The rest of a record a full pipe cut; written before anything new.
    pending: Vec<u8>,
    record: Vec<u8>,
}

/// One pcap stream into a FIFO, shared by the gates of one hook
/// (gate −1: every gate writes into it).
pub struct Capture {
    sink: Mutex<Sink>,
    pub fifo_path: String,
    pub defer: bool,
    pub reconnect: bool,
}

/// One gate's writer into a [`Capture`], called by the worker that owns
/// the gate, with that gate's counts.
pub struct TcpDumpTap {
    pub capture: Arc<Capture>,
    written: AtomicU64,
    dropped: AtomicU64,
}

impl TcpDumpTap {
    pub fn new(capture: Arc<Capture>) -> TcpDumpTap {
        TcpDumpTap {
            capture,
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Packets written to the FIFO.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Packets the capture dropped (pipe full, reader gone, none yet).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn check_fifo(fifo: &str) -> Res<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta =
        std::fs::metadata(fifo).map_err(|e| Fail::inval(format!("TcpDump: fifo `{fifo}`: {e}")))?;
    if !meta.file_type().is_fifo() {
        return Err(Fail::inval(format!(
            "TcpDump: `{fifo}` is not a FIFO (make one with mkfifo, open it for reading, then configure the hook)"
        )));
    }
    Ok(())
}

/// Open `fifo` for writing without blocking (ENXIO: nobody reads it).
fn open_fifo(fifo: &str) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
}

impl Capture {
    /// Open `fifo` for writing without blocking: someone must already
    /// have it open for reading (the client does before asking).
    pub fn open(fifo: &str) -> Res<Capture> {
        check_fifo(fifo)?;
        let f = open_fifo(fifo).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENXIO) {
                Fail::inval(format!(
                    "TcpDump: nobody reads the FIFO `{fifo}`: open it for reading first (or set defer)"
                ))
            } else {
                Fail::inval(format!("TcpDump: cannot open `{fifo}`: {e}"))
            }
        })?;
        let c = Capture::closed(fifo, false, false);
        c.attach(f);
        Ok(c)
    }

    fn closed(fifo: &str, defer: bool, reconnect: bool) -> Capture {
        Capture {
            sink: Mutex::new(Sink {
                fifo: None,
                opened: false,
                closed: false,
                pending: Vec::new(),
                record: Vec::with_capacity(2048),
            }),
            fifo_path: fifo.to_string(),
            defer,
            reconnect,
        }
    }

    /// Start writing into `f`: a new pcap stream.
    fn attach(&self, f: File) {
        let mut s = self.sink.lock();
        s.fifo = Some(f);
        s.opened = true;
        s.pending.clear();
        // The pipe is empty: 24 bytes always fit.
        write_some(&mut s, &pcap_header());
    }

    /// A hook with BESS's options: `defer` (open once a reader comes;
    /// never blocks), `reconnect` (open again after the reader left).
    pub fn start(fifo: &str, defer: bool, reconnect: bool) -> Res<Arc<Capture>> {
        let tap = if defer {
            check_fifo(fifo)?;
            Capture::closed(fifo, defer, reconnect)
        } else {
            let mut t = Capture::open(fifo)?;
            t.reconnect = reconnect;
            t
        };
        let tap = Arc::new(tap);
        if defer || reconnect {
            let weak = Arc::downgrade(&tap);
            std::thread::Builder::new()
                .name("nfkit-tcpdump".into())
                .spawn(move || opener(weak))
                .map_err(|e| Fail::new(libc::EAGAIN, format!("TcpDump: opener thread: {e}")))?;
        }
        Ok(tap)
    }

    /// Close the FIFO for good (the hook or its module is gone).
    pub fn close(&self) {
        let mut s = self.sink.lock();
        s.closed = true;
        s.fifo = None;
        s.pending.clear();
    }

    /// Whether the FIFO is open now.
    pub fn is_open(&self) -> bool {
        self.sink.lock().fifo.is_some()
    }
}

/// A deferred or reconnecting hook's opener: tries to open the FIFO
/// while it is closed (first reader, or a new one after EPIPE), until
/// the hook goes, is closed, or (without `reconnect`) was opened once.
fn opener(tap: std::sync::Weak<Capture>) {
    loop {
        std::thread::sleep(REOPEN_EVERY);
        let Some(t) = tap.upgrade() else { return };
        {
            let s = t.sink.lock();
            if s.closed || (s.opened && !t.reconnect) {
                return;
            }
            if s.fifo.is_some() {
                continue;
            }
        }
        match open_fifo(&t.fifo_path) {
            Ok(f) => {
                if t.sink.lock().closed {
                    return;
                }
                tracing::info!(fifo = %t.fifo_path, "tcpdump hook: a reader opened the FIFO");
                t.attach(f);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
            Err(e) => {
                tracing::warn!(fifo = %t.fifo_path, error = %e, "tcpdump hook: cannot open the FIFO; giving up");
                return;
            }
        }
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
        let mut s = self.capture.sink.lock();
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

impl Hooks {
    /// The TcpDump hooks on one gate (for GetModuleInfo).
    pub fn on_gate(&self, module: &str, out: bool, gate: usize) -> Vec<&HookEntry> {
        self.taps
            .iter()
            .filter(|e| e.module == module && e.out == out && e.gate == gate)
            .collect()
    }

    /// Close and forget the hooks of modules no longer there (their
    /// FIFOs are closed now, not at the next listing).
    pub fn forget_modules(&mut self, gone: &[String]) {
        self.taps.retain(|e| {
            let keep = !gone.contains(&e.module);
            if !keep {
                e.tap.capture.close();
                tracing::info!(module = %e.module, gate = e.gate, written = e.tap.written(), dropped = e.tap.dropped(), "tcpdump hook closed with its module");
            }
            keep
        });
    }
}

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

/// The direction and gates a hook names: gate −1 is every gate of
/// that direction the module has (BESS's "all gates").
fn gates_of(d: &Daemon, h: &pb::GateHookInfo) -> Res<(GateDir, Vec<usize>)> {
    use pb::gate_hook_info::Gate;
    let (dir, g) = match h.gate {
        Some(Gate::Igate(g)) => (GateDir::In, g),
        Some(Gate::Ogate(g)) => (GateDir::Out, g),
        None => (GateDir::Out, 0),
    };
    match g {
        -1 => Ok((dir, (0..d.gate_count(&h.module_name, dir)?).collect())),
        g if g < 0 => Err(Fail::inval(format!(
            "gate {g}: give a gate number, or -1 for every gate"
        ))),
        g => {
            let g = usize::try_from(g).map_err(|_| Fail::inval(format!("gate {g}: too large")))?;
            d.check_gate(&h.module_name, dir, g)?;
            Ok((dir, vec![g]))
        }
    }
}

fn side(out: bool) -> &'static str {
    if out {
        "output"
    } else {
        "input"
    }
}

/// ConfigureGateHook.
pub fn configure(
    d: &mut Daemon,
    r: pb::ConfigureGateHookRequest,
) -> Res<pb::ConfigureGateHookResponse> {
    let h = r.hook.ok_or_else(|| Fail::inval("`hook` is required"))?;
    let (dir, gates) = gates_of(d, &h)?;
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
            let m = h.module_name.as_str();
            let hooked: Vec<usize> = gates
                .iter()
                .copied()
                .filter(|g| !d.hooks().on_gate(m, out, *g).is_empty())
                .collect();
            if !r.enable {
                if hooked.is_empty() {
                    return Err(Fail::noent(format!(
                        "no TcpDump hook on {} gate{} of `{m}`",
                        side(out),
                        match gates.as_slice() {
                            [g] => format!(" {g}"),
                            _ => "s".into(),
                        }
                    )));
                }
                d.clear_gate_taps(m, dir, &hooked)?;
                d.hooks().taps.retain(|e| {
                    let gone = e.module == m && e.out == out && hooked.contains(&e.gate);
                    if gone {
                        e.tap.capture.close();
                        tracing::info!(module = %e.module, gate = e.gate, written = e.tap.written(), dropped = e.tap.dropped(), "tcpdump hook removed");
                    }
                    !gone
                });
                return Ok(pb::ConfigureGateHookResponse { error: None, name });
            }
            if let Some(g) = hooked.first() {
                return Err(Fail::exist(format!(
                    "{} gate {g} of `{m}` already has a TcpDump hook",
                    side(out)
                )));
            }
            if gates.is_empty() {
                return Err(Fail::inval(format!(
                    "module `{m}` has no {} gates to hook",
                    side(out)
                )));
            }
            let arg: pb::TcpdumpArg = decode(h.arg.as_ref(), "TcpdumpArg")?;
            if arg.fifo.is_empty() {
                return Err(Fail::inval("TcpDump: `fifo` is required"));
            }
            let capture = Capture::start(&arg.fifo, arg.defer, arg.reconnect)?;
            let taps: Vec<Arc<TcpDumpTap>> = gates
                .iter()
                .map(|_| Arc::new(TcpDumpTap::new(capture.clone())))
                .collect();
            let set: Vec<(usize, nfkit_pipeline::hooks::Tap)> = gates
                .iter()
                .zip(&taps)
                .map(|(&g, t)| (g, t.clone() as nfkit_pipeline::hooks::Tap))
                .collect();
            if let Err(e) = d.set_gate_taps(m, dir, &set) {
                capture.close();
                return Err(e);
            }
            for (gate, tap) in gates.into_iter().zip(taps) {
                d.hooks().taps.push(HookEntry {
                    module: m.to_string(),
                    out,
                    gate,
                    name: name.clone(),
                    tap,
                });
            }
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
    let gone: Vec<String> = d
        .hooks()
        .taps
        .iter()
        .filter(|e| !live.contains(&e.module))
        .map(|e| e.module.clone())
        .collect();
    d.hooks().forget_modules(&gone);
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
                        fifo: e.tap.capture.fifo_path.clone(),
                        defer: e.tap.capture.defer,
                        reconnect: e.tap.capture.reconnect,
                    },
                    "TcpdumpArg",
                )),
            })
            .collect(),
    }
}
