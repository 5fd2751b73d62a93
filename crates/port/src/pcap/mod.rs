//! `pcap:` ports: replay a capture on RX, write TX to a capture.
//!
//! Replay reads the whole file at open ([`capture`]) and copies frames
//! from memory into pool buffers, as fast as the receiver polls or at the
//! file's pace (`timing=file`), `loop=N` times (0 = forever). A frame
//! larger than a buffer is received as a chain of buffers, up to
//! [`MAX_FRAME`] (65,535 bytes, pcap's usual snap length); larger ones
//! are dropped and counted in `rx_dropped`, the reason said once at open
//! (a warning) and at the first such frame. Output is a pcap file with nanosecond timestamps and
//! the Ethernet link type; a port without an output file discards what it
//! is sent and counts it in `tx_dropped`.

pub mod capture;

use crate::open::{software_pool, OpenOptions};
use crate::spec::{PcapSpec, Timing};
use crate::{Batch, Mempool, PktBuf, Port, PortError, QueueStats};
use capture::Capture;
use pcap_file::pcap::PcapHeader;
use pcap_file::{DataLink, Endianness, TsResolution};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant, SystemTime};

/// MAC reported by pcap ports (locally administered).
const PCAP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0c, 0x01];
/// Snap length written in output headers: the largest frame either way.
const OUT_SNAPLEN: u32 = 65535;
/// Largest frame a pcap port receives or writes.
pub const MAX_FRAME: usize = OUT_SNAPLEN as usize;

/// Where the replay is in the file.
struct Replay {
    capture: Capture,
    timing: Timing,
    /// Passes left after this one; `None` = forever.
    passes_left: Option<u32>,
    next: usize,
    /// Start of this pass, and the capture time of its first frame.
    pass_start: Option<Instant>,
    first_ts: Duration,
}

pub struct PcapPort {
    name: String,
    pool: Mempool,
    replay: Option<Replay>,
    out: Option<BufWriter<File>>,
    stats: QueueStats,
    error: Option<PortError>,
    warned_oversize: bool,
}

impl PcapPort {
    pub fn open(name: &str, spec: &PcapSpec, opts: &OpenOptions) -> Result<PcapPort, PortError> {
        crate::check_distinct(&[crate::PortSpec::Pcap(spec.clone())])
            .map_err(|m| PortError::config(name, m))?;
        let pool = software_pool(name, opts.pool_buffers)?;
        let replay = match &spec.rx {
            None => None,
            Some(path) => {
                let capture = Capture::load(path).map_err(|m| PortError::config(name, m))?;
                let first_ts = capture.frames().first().map_or(Duration::ZERO, |f| f.ts);
                let oversize = capture
                    .frames()
                    .iter()
                    .filter(|f| f.len > MAX_FRAME)
                    .count();
                if oversize > 0 {
                    tracing::warn!(
                        port = name,
                        "{oversize} frame(s) are larger than {MAX_FRAME} bytes: they will be dropped, counted in rx_dropped (reason: larger than the port carries)"
                    );
                }
                Some(Replay {
                    capture,
                    timing: spec.timing,
                    passes_left: (spec.loops != 0).then(|| spec.loops - 1),
                    next: 0,
                    pass_start: None,
                    first_ts,
                })
            }
        };
        let out = match &spec.tx {
            None => None,
            Some(path) => Some(create_output(name, path)?),
        };
        Ok(PcapPort {
            name: name.to_string(),
            pool,
            replay,
            out,
            stats: QueueStats::default(),
            error: None,
            warned_oversize: false,
        })
    }

    /// Frames in the input capture (one pass).
    pub fn capture_frames(&self) -> usize {
        self.replay.as_ref().map_or(0, |r| r.capture.frames().len())
    }
}

/// Create the output file and write its header (pcap-file writes the
/// header; records are written by [`write_record`] into the same buffered
/// file, which pcap-file's writer would not let us flush).
fn create_output(name: &str, path: &std::path::Path) -> Result<BufWriter<File>, PortError> {
    check_output(path).map_err(|m| PortError::config(name, m))?;
    let file = File::create(path).map_err(|e| {
        PortError::os(
            name,
            format!("cannot create output capture `{}`", path.display()),
            e,
        )
    })?;
    let header = PcapHeader {
        snaplen: OUT_SNAPLEN,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let mut w = BufWriter::with_capacity(1 << 20, file);
    header.write_to(&mut w).map_err(|e| {
        PortError::config(
            name,
            format!("cannot write output capture `{}`: {e}", path.display()),
        )
    })?;
    Ok(w)
}

/// An output capture may replace a capture (or an empty file), never
/// anything else: a file that is not a capture, a device, a directory.
fn check_output(path: &std::path::Path) -> Result<(), String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(()); // a new file
    };
    if path == std::path::Path::new("/dev/null") {
        return Ok(());
    }
    if !meta.is_file() {
        return Err(format!(
            "output capture `{}` exists and is not a regular file: not writing to it",
            path.display()
        ));
    }
    let mut magic = [0u8; 4];
    let n = std::io::Read::read(
        &mut File::open(path).map_err(|e| e.to_string())?,
        &mut magic,
    )
    .unwrap_or(0);
    let is_capture = n == 4
        && matches!(
            u32::from_le_bytes(magic),
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0x0a0d_0d0a
        );
    if meta.len() > 0 && !is_capture {
        return Err(format!(
            "output capture `{}` exists and is not a pcap or pcapng capture: not overwriting it (remove it or choose another name)",
            path.display()
        ));
    }
    Ok(())
}

/// One pcap record (little-endian, as the header says): seconds,
/// nanoseconds, captured length, original length, then the frame (every
/// segment of a chain).
fn write_record(w: &mut BufWriter<File>, ts: Duration, pkt: &PktBuf) -> std::io::Result<()> {
    let len = pkt.pkt_len() as u32;
    let mut head = [0u8; 16];
    head[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
    head[4..8].copy_from_slice(&ts.subsec_nanos().to_le_bytes());
    head[8..12].copy_from_slice(&len.to_le_bytes());
    head[12..16].copy_from_slice(&len.to_le_bytes());
    w.write_all(&head)?;
    for seg in pkt.segments() {
        w.write_all(seg)?;
    }
    Ok(())
}

impl Replay {
    /// Whether every pass is over.
    fn finished(&self) -> bool {
        self.next >= self.capture.frames().len() && self.passes_left == Some(0)
    }

    /// Move to the next pass at the end of the file, if one is left.
    fn wrap(&mut self) -> bool {
        if self.next < self.capture.frames().len() {
            return true;
        }
        match self.passes_left {
            Some(0) => return false,
            Some(n) => self.passes_left = Some(n - 1),
            None => {}
        }
        self.next = 0;
        self.pass_start = None;
        !self.capture.frames().is_empty()
    }

    /// Whether frame `next` is due: always when replaying fast (`now` is
    /// `None`), else once its gap from the pass's first frame has passed.
    fn due(&mut self, now: Option<Instant>) -> bool {
        let Some(now) = now else { return true };
        let start = *self.pass_start.get_or_insert(now);
        let ts = self.capture.frames()[self.next].ts;
        ts.saturating_sub(self.first_ts) <= now - start
    }
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let Some(r) = &mut self.replay else { return 0 };
        let now = (r.timing == Timing::File).then(Instant::now);
        let mut n = 0;
        while !batch.is_full() && r.wrap() && r.due(now) {
            let frame = r.capture.frames()[r.next];
            if frame.len > MAX_FRAME {
                r.next += 1;
                self.stats.rx_dropped += 1;
                if !self.warned_oversize {
                    self.warned_oversize = true;
                    tracing::warn!(port = %self.name, len = frame.len, "frame larger than {MAX_FRAME} bytes dropped (counted in rx_dropped)");
                }
                continue;
            }
            let b = if frame.len <= self.pool.data_room() {
                let Some(mut b) = self.pool.alloc() else {
                    // All buffers in flight: leave the frame for the next poll.
                    break;
                };
                // Cannot fail: checked against the data room above.
                let _ = b.copy_from(r.capture.data(&frame));
                b
            } else {
                // A chain; fails only for want of buffers (the length is
                // within MAX_FRAME): leave the frame for the next poll.
                let Ok(b) = self.pool.alloc_frame(r.capture.data(&frame)) else {
                    break;
                };
                b
            };
            batch.push(b);
            r.next += 1;
            n += 1;
            self.stats.rx_bytes += frame.len as u64;
        }
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let n = batch.len();
        let Some(out) = &mut self.out else {
            self.stats.tx_dropped += n as u64;
            batch.clear();
            return n;
        };
        let ts = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        for b in batch.drain() {
            if b.pkt_len() > MAX_FRAME {
                self.stats.tx_dropped += 1;
                continue;
            }
            match write_record(out, ts, &b) {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += b.pkt_len() as u64;
                }
                Err(e) => {
                    self.stats.tx_errors += 1;
                    if self.error.is_none() {
                        self.error = Some(PortError::config(
                            &self.name,
                            format!("writing the output capture: {e}"),
                        ));
                    }
                }
            }
        }
        n
    }

    fn tx_refused(&mut self, _queue: usize, n: u64) {
        self.stats.tx_dropped += n;
    }

    fn queue_stats(&self, _queue: usize) -> QueueStats {
        self.stats
    }

    fn mac(&self) -> [u8; 6] {
        PCAP_MAC
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn max_frame(&self) -> usize {
        MAX_FRAME
    }

    fn tx_chains(&self) -> bool {
        true
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }

    fn rx_done(&self) -> bool {
        self.replay.as_ref().is_none_or(Replay::finished)
    }

    fn rx_wake(&self, _queue: usize) -> crate::RxWake {
        if self.rx_done() {
            crate::RxWake::Never
        } else {
            crate::RxWake::Poll
        }
    }

    fn flush(&mut self) -> Result<(), PortError> {
        if let Some(out) = &mut self.out {
            out.flush()
                .map_err(|e| PortError::os(&self.name, "flushing the output capture", e))?;
        }
        Ok(())
    }
}

impl Drop for PcapPort {
    fn drop(&mut self) {
        if let Some(out) = &mut self.out {
            if let Err(e) = out.flush() {
                tracing::error!(port = %self.name, "flushing the output capture: {e}");
            }
        }
    }
}
