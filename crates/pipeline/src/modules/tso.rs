//! TSO (SoftNIC's name): TCP segmentation offload in software. A frame
//! whose offload metadata asks for TCP segmentation (`gso` TCP,
//! `gso_size` = MSS: a 64 KB frame from the host kernel through a TAP
//! with vnet headers, or one LRO made), plain or inside VXLAN/Geneve
//! (on their UDP ports, after VXLANEncap and IPEncap), usually a chain
//! of buffers, leaves as frames of at most MSS payload bytes: headers
//! replicated, sequence numbers advanced, IPv4 identifiers (inner and
//! outer) counted up, FIN/PSH on the last segment only, CWR on the
//! first only, every length and checksum (outer and inner) set
//! (`nfkit_packet::gso`). The segments carry no offload state and the
//! original's metadata attributes.
//!
//! Gate in 0, gate out 0. Frames without a segmentation request pass
//! unchanged. Arguments: `max_segments` (default 64, at most 256).
//!
//! A frame makes up to `max_segments` frames, more than one output batch
//! holds: TSO is a task. Frames (all, in order) wait in a backlog of
//! `backlog` frames (default 256) and each run of the task sends as many
//! segments and frames as the output batch has room for. The task lets
//! its worker sleep when idle (`Module::task_sleeps`).
//!
//! Drops, counted with their reason (statistics): metadata that lies
//! (`bad_offsets`: checksum start or header length not the frame's, or
//! past its end; `bad_mss`: a segment size of 0 or larger than the
//! frame; `not_tcp`: segmentation of anything but TCP), `truncated`
//! headers or lengths that disagree, `too_many_segments`, `no_buffer`
//! (the pool ran dry mid-frame: the rest of that frame),
//! `backlog_full`.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::pool::offload::Gso;
use nfkit_hw::pool::MAX_BATCH;
use nfkit_hw::{Batch, PktBuf};
use nfkit_packet::gso::{self, GsoError, TcpLayout};
use std::collections::VecDeque;

crate::modules::declare_class!("TSO" => build);

/// Header bytes copied out of a frame to find its layout (headers
/// longer than this are counted as `truncated`).
const HDR_MAX: usize = 512;

pub struct Tso {
    max_segments: usize,
    backlog: VecDeque<PktBuf>,
    backlog_cap: usize,
    /// The first bytes (headers) of the frame being cut (the backlog's
    /// first), its layout and MSS, and the next segment to send. The
    /// payload is read from the frame's own buffers, never flattened.
    hdr: Vec<u8>,
    cur: Option<(TcpLayout, usize, usize)>,
    bad: [u64; 5],
    no_buffer: u64,
    backlog_full: u64,
    segmented: u64,
    segments: u64,
}

impl Tso {
    pub fn new(max_segments: usize, backlog: usize) -> Tso {
        Tso {
            max_segments,
            backlog: VecDeque::with_capacity(backlog),
            backlog_cap: backlog,
            hdr: Vec::with_capacity(HDR_MAX),
            cur: None,
            bad: [0; 5],
            no_buffer: 0,
            backlog_full: 0,
            segmented: 0,
            segments: 0,
        }
    }

    fn count(&mut self, e: GsoError) {
        if let Some(i) = GsoError::ALL.iter().position(|&x| x == e) {
            self.bad[i] += 1;
        }
    }

    /// Check the backlog's first frame and copy its headers; a frame that
    /// cannot be cut is dropped here, with its reason.
    fn start(&mut self, ctx: &mut Ctx<'_>) -> bool {
        while let Some(p) = self.backlog.front() {
            let meta = p.offload().copied();
            if meta.is_none_or(|o| o.gso == Gso::None) {
                // Nothing to cut: it goes as it is, if there is room.
                let full = ctx.output(0).is_none_or(|o| o.is_full());
                if full {
                    return false;
                }
                if let Some(p) = self.backlog.pop_front() {
                    ctx.emit(0, p);
                }
                continue;
            }
            let len = p.pkt_len();
            self.hdr.clear();
            for s in p.segments() {
                let k = s.len().min(HDR_MAX - self.hdr.len());
                self.hdr.extend_from_slice(&s[..k]);
                if self.hdr.len() == HDR_MAX {
                    break;
                }
            }
            let res = TcpLayout::of_prefix(&self.hdr, len).and_then(|lay| {
                let meta = meta.ok_or(GsoError::NotTcp)?;
                gso::check_meta(&lay, &meta, len)?;
                let mss = usize::from(meta.gso_size);
                let n = lay.payload_len().div_ceil(mss).max(1);
                if n > self.max_segments {
                    return Err(GsoError::TooManySegments);
                }
                Ok((lay, mss))
            });
            match res {
                Ok((lay, mss)) => {
                    self.cur = Some((lay, mss, 0));
                    return true;
                }
                Err(e) => {
                    self.count(e);
                    if let Some(p) = self.backlog.pop_front() {
                        ctx.drop_packet(p);
                    }
                }
            }
        }
        false
    }

    /// Send segments while the output batch has room.
    fn drain(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            if self.cur.is_none() && !self.start(ctx) {
                return;
            }
            let (Some((lay, mss, next)), Some(head)) = (self.cur, self.backlog.front()) else {
                return;
            };
            let room = ctx.output(0).map_or(0, |o| MAX_BATCH - o.len());
            if room == 0 {
                return;
            }
            let n = lay.payload_len().div_ceil(mss).max(1);
            let end = (next + room).min(n);
            let meta = *head.metadata();
            let pool = head.pool();
            let mut payload = gso::Pieces::new(head.segments());
            let cut = if payload.skip(lay.header_len() + next * mss) {
                gso::segment_chain(
                    &self.hdr,
                    &lay,
                    mss,
                    next..end,
                    &mut payload,
                    || pool.alloc(),
                    |mut b| {
                        *b.metadata_mut() = meta;
                        ctx.emit(0, b);
                    },
                )
            } else {
                gso::Cut {
                    emitted: 0,
                    short: false,
                    error: Some(GsoError::Truncated),
                }
            };
            let (emitted, short) = (cut.emitted as u64, cut.short);
            if let Some(e) = cut.error {
                self.count(e);
            }
            self.segments += emitted;
            ctx.count_created(emitted);
            if short || cut.error.is_some() {
                self.no_buffer += u64::from(short);
                self.cur = None;
                if let Some(p) = self.backlog.pop_front() {
                    ctx.drop_packet(p);
                }
            } else if end == n {
                self.cur = None;
                self.segmented += 1;
                // The super-frame is consumed: its segments left.
                drop(self.backlog.pop_front());
                ctx.count_consumed(1);
            } else {
                self.cur = Some((lay, mss, end));
            }
        }
    }
}

impl Module for Tso {
    fn class(&self) -> &'static str {
        "TSO"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        // A task's input side sends nothing: its task does, in order.
        for p in batch.drain() {
            if self.backlog.len() < self.backlog_cap {
                self.backlog.push_back(p);
            } else {
                self.backlog_full += 1;
                ctx.drop_packet(p);
            }
        }
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        self.drain(ctx);
    }
    /// The backlog is filled only by the input side, which runs on this
    /// worker (TSO cannot span two), from what its other tasks received;
    /// and a run with a backlog always sends or drops (its output batch is
    /// empty at the start of each run). So once a run found nothing, only
    /// the worker's receive queues bring work: its worker may sleep.
    fn task_sleeps(&self) -> bool {
        true
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = GsoError::ALL
            .iter()
            .zip(self.bad)
            .map(|(e, n)| (e.reason(), n))
            .collect();
        v.push(("no_buffer", self.no_buffer));
        v.push(("backlog_full", self.backlog_full));
        v.push(("segmented", self.segmented));
        v.push(("segments", self.segments));
        v.push(("backlog", self.backlog.len() as u64));
        v
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max = args.u64_or("max_segments", 64)?;
    if !(1..=256).contains(&max) {
        return Err(ArgError::new("max_segments", format!("{max} is not 1..=256")));
    }
    let backlog = args.u64_or("backlog", 256)?;
    if !(1..=4096).contains(&backlog) {
        return Err(ArgError::new("backlog", format!("{backlog} is not 1..=4096")));
    }
    Ok(Box::new(Tso::new(max as usize, backlog as usize)))
}
