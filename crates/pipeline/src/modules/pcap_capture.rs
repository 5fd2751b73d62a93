//! PcapCapture: write every packet to a pcap file (stamped with the
//! scheduler time), then pass it on to gate 0. Put it on any edge to see
//! that gate's traffic ([`Pipeline::capture`](crate::pipeline::Pipeline)).
//! A write failure stops the capture (counted in `write_errors`), never
//! the traffic.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;
use parking_lot::Mutex;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

crate::modules::declare_class!("PcapCapture" => build);

/// The capture file, reachable both through the pcap writer and for
/// flushing (`PcapWriter` does not lend its inner writer out).
#[derive(Clone)]
struct SharedFile(Arc<Mutex<BufWriter<File>>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().flush()
    }
}

pub struct PcapCapture {
    file: SharedFile,
    writer: Option<PcapWriter<SharedFile>>,
    written: u64,
    write_errors: u64,
}

impl PcapCapture {
    /// Create (truncate) `path` and write an Ethernet pcap header.
    pub fn create(path: &Path) -> Result<PcapCapture, std::io::Error> {
        let file = SharedFile(Arc::new(Mutex::new(BufWriter::new(File::create(path)?))));
        let header = PcapHeader {
            snaplen: 65535,
            ..PcapHeader::default()
        };
        let writer =
            PcapWriter::with_header(file.clone(), header).map_err(std::io::Error::other)?;
        Ok(PcapCapture {
            file,
            writer: Some(writer),
            written: 0,
            write_errors: 0,
        })
    }
}

impl Module for PcapCapture {
    fn class(&self) -> &'static str {
        "PcapCapture"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        if let Some(w) = self.writer.as_mut() {
            let ts = Duration::from_nanos(ctx.now_ns());
            for p in batch.iter() {
                let data = p.data();
                let pkt = PcapPacket::new(ts, data.len() as u32, data);
                if w.write_packet(&pkt).is_err() {
                    self.write_errors += 1;
                    self.writer = None;
                    break;
                }
                self.written += 1;
            }
        }
        ctx.forward(0, batch);
    }
    fn on_pause(&mut self) {
        if self.file.flush().is_err() {
            self.write_errors += 1;
        }
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("written", self.written),
            ("write_errors", self.write_errors),
        ]
    }
}

impl Drop for PcapCapture {
    fn drop(&mut self) {
        self.on_pause();
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let path = args.required_str("file")?;
    Ok(Box::new(PcapCapture::create(Path::new(&path)).map_err(
        |e| ArgError::new("file", format!("cannot create `{path}`: {e}")),
    )?))
}
