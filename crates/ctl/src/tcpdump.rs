//! `nfkit ctl tcpdump MODULE[:GATE] [in|out]`: make a FIFO, open it for
//! reading, ask the daemon for a `TcpDump` gate hook writing pcap into
//! it (ConfigureGateHook), and copy the stream to a writer (stdout or a
//! file) until a packet count, a stop flag, the writer closing (a
//! `tcpdump -r -` that exits) or the daemon going away; the hook is
//! removed on the way out. The FIFO lives in a directory of its own,
//! removed at the end.

use crate::client::Ctl;
use crate::CtlError;
use nfkit_daemon::mclass::pack;
use nfkit_daemon::pb;
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What was copied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub packets: u64,
    pub bytes: u64,
}

/// Counts whole pcap records in a stream (to stop after N packets at a
/// record boundary).
struct Records {
    /// Bytes of the global header still to pass.
    header_left: usize,
    /// Bytes of the current record header seen, and the record's body
    /// still to pass.
    rec_head: [u8; 16],
    rec_head_len: usize,
    body_left: usize,
    packets: u64,
}

impl Records {
    fn new() -> Records {
        Records {
            header_left: 24,
            rec_head: [0; 16],
            rec_head_len: 0,
            body_left: 0,
            packets: 0,
        }
    }

    /// How many bytes of `buf` to keep so that at most `limit` whole
    /// packets have passed; updates the count.
    fn take(&mut self, buf: &[u8], limit: Option<u64>) -> usize {
        let mut i = 0;
        while i < buf.len() {
            if self.header_left > 0 {
                let n = self.header_left.min(buf.len() - i);
                self.header_left -= n;
                i += n;
            } else if self.body_left > 0 {
                let n = self.body_left.min(buf.len() - i);
                self.body_left -= n;
                i += n;
                if self.body_left == 0 {
                    self.packets += 1;
                }
            } else {
                if limit.is_some_and(|l| self.packets >= l) {
                    return i;
                }
                let n = (16 - self.rec_head_len).min(buf.len() - i);
                self.rec_head[self.rec_head_len..self.rec_head_len + n]
                    .copy_from_slice(&buf[i..i + n]);
                self.rec_head_len += n;
                i += n;
                if self.rec_head_len == 16 {
                    self.rec_head_len = 0;
                    let caplen = u32::from_le_bytes(self.rec_head[8..12].try_into().unwrap());
                    self.body_left = caplen as usize;
                    if self.body_left == 0 {
                        self.packets += 1;
                    }
                }
            }
        }
        i
    }

    fn done(&self, limit: Option<u64>) -> bool {
        limit.is_some_and(|l| self.packets >= l && self.body_left == 0 && self.rec_head_len == 0)
    }
}

struct FifoDir(PathBuf);

impl Drop for FifoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hook(module: &str, gate: u64, out: bool, fifo: &str) -> pb::GateHookInfo {
    pb::GateHookInfo {
        class_name: "TcpDump".into(),
        hook_name: "tcpdump".into(),
        module_name: module.into(),
        gate: Some(if out {
            pb::gate_hook_info::Gate::Ogate(gate as i64)
        } else {
            pb::gate_hook_info::Gate::Igate(gate as i64)
        }),
        arg: Some(pack(
            &pb::TcpdumpArg {
                fifo: fifo.into(),
                defer: false,
                reconnect: false,
            },
            "TcpdumpArg",
        )),
    }
}

/// Capture `module`'s gate into `out` (pcap) until `count` packets, `stop`
/// or the end of the stream.
pub fn run(
    ctl: &mut Ctl,
    module: &str,
    gate: u64,
    ogate: bool,
    count: Option<u64>,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<Copied, CtlError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir().join(format!(
        "nfkit-tcpdump-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir(&dir)
        .map_err(|e| CtlError::Input(format!("cannot make {}: {e}", dir.display())))?;
    let dir = FifoDir(dir);
    let fifo = dir.0.join("capture.fifo");
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&fifo)
        .status()
        .map_err(|e| CtlError::Input(format!("mkfifo {}: {e}", fifo.display())))?;
    if !made.success() {
        return Err(CtlError::Input(format!("mkfifo {} failed", fifo.display())));
    }
    // Our read end first (non-blocking: nobody writes yet), so the
    // daemon's non-blocking open for writing finds a reader.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .map_err(|e| CtlError::Input(format!("open {}: {e}", fifo.display())))?;
    let fifo_s = fifo.display().to_string();
    ctl.configure_gate_hook(hook(module, gate, ogate, &fifo_s), true)?;
    let r = copy(&mut reader, count, stop, out);
    // Whatever happened, take the hook off (the daemon may be gone).
    let off = ctl.configure_gate_hook(hook(module, gate, ogate, &fifo_s), false);
    let copied = r?;
    if let Err(e) = off {
        if !matches!(e, CtlError::Transport(_)) {
            return Err(e);
        }
    }
    Ok(copied)
}

fn copy(
    reader: &mut File,
    count: Option<u64>,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<Copied, CtlError> {
    let mut rec = Records::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut copied = Copied::default();
    loop {
        if stop.load(Ordering::Relaxed) || rec.done(count) {
            break;
        }
        match reader.read(&mut buf) {
            // No writer any more: the hook was removed or the daemon died.
            Ok(0) => break,
            Ok(n) => {
                let keep = rec.take(&buf[..n], count);
                if out
                    .write_all(&buf[..keep])
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    // The reader of our output went away (tcpdump exited).
                    break;
                }
                copied.bytes += keep as u64;
                copied.packets = rec.packets;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(CtlError::Transport(format!(
                    "reading the capture FIFO: {e}"
                )))
            }
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(len: usize) -> Vec<u8> {
        let mut r = vec![0u8; 16];
        r[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        r[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        r.extend(std::iter::repeat_n(0xab, len));
        r
    }

    #[test]
    fn counts_records_across_reads_and_stops_at_a_boundary() {
        let mut stream = vec![0u8; 24];
        for _ in 0..5 {
            stream.extend(record(60));
        }
        let mut r = Records::new();
        // Odd-sized pieces.
        let mut kept = 0;
        for chunk in stream.chunks(37) {
            kept += r.take(chunk, Some(3));
        }
        assert_eq!(r.packets, 3);
        assert_eq!(kept, 24 + 3 * 76);
        assert!(r.done(Some(3)));
        let mut r = Records::new();
        assert_eq!(r.take(&stream, None), stream.len());
        assert_eq!(r.packets, 5);
    }
}
