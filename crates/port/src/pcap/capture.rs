//! A capture file read whole and checked at open, with an index of its
//! frames, so that replay is a copy from memory: no parsing, no I/O and
//! no allocation on the data path, and a corrupt or truncated file is
//! reported before the first packet, naming the frame and byte offset.

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;
use std::path::Path;
use std::time::Duration;

/// Largest capture file a port loads (the whole file is held in memory).
pub const MAX_FILE: u64 = 1 << 30;

const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0x4d, 0x3c, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
];
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// One frame: where its bytes are in the file and when it was captured.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub start: usize,
    pub len: usize,
    /// Capture time (since the epoch).
    pub ts: Duration,
}

/// A loaded capture.
#[derive(Debug)]
pub struct Capture {
    bytes: Vec<u8>,
    frames: Vec<Frame>,
    /// Why the file ended inside a record (a capture cut short by a killed
    /// writer): the frames before the cut are replayed.
    cut_short: Option<String>,
}

impl Capture {
    /// Read and check `path`. Errors are complete sentences for the user.
    pub fn load(path: &Path) -> Result<Capture, String> {
        let shown = path.display();
        let meta =
            std::fs::metadata(path).map_err(|e| format!("cannot open capture `{shown}`: {e}"))?;
        if meta.len() > MAX_FILE {
            return Err(format!(
                "capture `{shown}` is {} bytes; replay holds the file in memory and takes at most {MAX_FILE}: split it with `editcap -c`",
                meta.len()
            ));
        }
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read capture `{shown}`: {e}"))?;
        let c = Capture::from_bytes(bytes).map_err(|e| format!("capture `{shown}`: {e}"))?;
        if let Some(why) = &c.cut_short {
            tracing::warn!(
                "capture `{shown}` is {why}: replaying the {} frame(s) before the cut",
                c.frames.len()
            );
        }
        Ok(c)
    }

    /// Why the capture ended inside a record, if it did.
    pub fn cut_short(&self) -> Option<&str> {
        self.cut_short.as_deref()
    }

    /// Check and index a capture file's contents (pcap or pcapng).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Capture, String> {
        let frames = match bytes.get(..4) {
            Some(m) if PCAP_MAGICS.iter().any(|p| p == m) => index_pcap(&bytes),
            Some(m) if m == PCAPNG_MAGIC => index_pcapng(&bytes),
            _ => Err("not a pcap or pcapng file (unknown magic number)".to_string()),
        }?;
        let (frames, cut_short) = frames;
        Ok(Capture {
            bytes,
            frames,
            cut_short,
        })
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    #[inline(always)]
    pub fn data(&self, f: &Frame) -> &[u8] {
        &self.bytes[f.start..f.start + f.len]
    }
}

/// Where `data` starts in `file`. The parsers borrow frame data from the
/// file; anything else (a copy) is reported rather than trusted.
fn offset_in(file: &[u8], data: &[u8]) -> Result<usize, String> {
    let off = (data.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize);
    if off
        .checked_add(data.len())
        .is_some_and(|end| end <= file.len())
    {
        Ok(off)
    } else {
        Err("internal: frame data is not inside the file".into())
    }
}

fn describe(e: pcap_file::PcapError, frame: usize, at: usize, total: usize) -> String {
    match e {
        pcap_file::PcapError::IncompleteBuffer => format!(
            "truncated in frame {} at byte {at} of {total} (the file ends inside a record; \
             a capture cut short can be repaired with `pcapfix` or cut with `editcap -r`)",
            frame + 1
        ),
        other => format!(
            "corrupt at frame {} (byte {at} of {total}): {other}",
            frame + 1
        ),
    }
}

/// A record longer than this (and than the snap length) is corrupt.
const MAX_RECORD: u32 = 262_144;

/// The captured length a pcap record header announces, if it is whole.
fn record_len(rest: &[u8], endianness: pcap_file::Endianness) -> Option<u32> {
    let b: [u8; 4] = rest.get(8..12)?.try_into().ok()?;
    Some(match endianness {
        pcap_file::Endianness::Big => u32::from_be_bytes(b),
        pcap_file::Endianness::Little => u32::from_le_bytes(b),
    })
}

/// Frames, and why the file ended inside a record if it did.
type Index = (Vec<Frame>, Option<String>);

fn index_pcap(file: &[u8]) -> Result<Index, String> {
    let (mut rest, parser) = PcapParser::new(file).map_err(|e| describe(e, 0, 0, file.len()))?;
    let link = parser.header().datalink;
    if link != DataLink::ETHERNET {
        return Err(format!(
            "link type {link:?} is not Ethernet; nfkit ports carry Ethernet frames"
        ));
    }
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let at = file.len() - rest.len();
        let (r, pkt) = match parser.next_packet(rest) {
            Ok(x) => x,
            // A record cut off by the end of the file; one announcing
            // more than the snap length is corrupt, not cut.
            Err(e @ pcap_file::PcapError::IncompleteBuffer)
                if record_len(rest, parser.header().endianness)
                    .is_none_or(|n| n <= parser.header().snaplen.max(MAX_RECORD)) =>
            {
                let n = frames.len();
                return Ok((frames, Some(describe(e, n, at, file.len()))));
            }
            Err(e) => return Err(describe(e, frames.len(), at, file.len())),
        };
        frames.push(Frame {
            start: offset_in(file, &pkt.data)?,
            len: pkt.data.len(),
            ts: pkt.timestamp,
        });
        rest = r;
    }
    Ok((frames, None))
}

/// Nanoseconds per unit of an `if_tsresol` value (pcapng 4.2: high bit
/// clear = negative power of 10, set = negative power of 2).
fn ns_per_unit(tsresol: u8) -> f64 {
    if tsresol & 0x80 == 0 {
        10f64.powi(9 - i32::from(tsresol))
    } else {
        1e9 / 2f64.powi(i32::from(tsresol & 0x7f))
    }
}

fn index_pcapng(file: &[u8]) -> Result<Index, String> {
    let (mut rest, mut parser) =
        PcapNgParser::new(file).map_err(|e| describe(e, 0, 0, file.len()))?;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let at = file.len() - rest.len();
        let (r, block) = match parser.next_block(rest) {
            Ok(x) => x,
            Err(e @ pcap_file::PcapError::IncompleteBuffer) => {
                let n = frames.len();
                return Ok((frames, Some(describe(e, n, at, file.len()))));
            }
            Err(e) => return Err(describe(e, frames.len(), at, file.len())),
        };
        rest = r;
        let (iface, raw_ts, data) = match block {
            Block::EnhancedPacket(p) => (p.interface_id, p.timestamp, p.data),
            Block::SimplePacket(p) => (0, Duration::ZERO, p.data),
            Block::Packet(p) => (u32::from(p.interface_id), Duration::from_nanos(p.timestamp), p.data),
            Block::InterfaceDescription(i) if i.linktype != DataLink::ETHERNET => {
                return Err(format!(
                    "interface {} has link type {:?}, not Ethernet; nfkit ports carry Ethernet frames",
                    parser.interfaces().len() - 1,
                    i.linktype
                ))
            }
            _ => continue,
        };
        let idb = parser.interfaces().get(iface as usize).ok_or_else(|| {
            format!(
                "frame {} names interface {iface}, which is not described",
                frames.len() + 1
            )
        })?;
        let tsresol = idb
            .options
            .iter()
            .find_map(|o| match o {
                InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                _ => None,
            })
            .unwrap_or(6);
        // pcap-file hands the raw timestamp units over as nanoseconds.
        let ts = Duration::from_nanos((raw_ts.as_nanos() as f64 * ns_per_unit(tsresol)) as u64);
        frames.push(Frame {
            start: offset_in(file, &data)?,
            len: data.len(),
            ts,
        });
    }
    Ok((frames, None))
}
