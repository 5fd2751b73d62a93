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

pub struct Tso {
    max_segments: usize,
    backlog: VecDeque<PktBuf>,
    backlog_cap: usize,
    /// The frame being cut (the backlog's first), flattened, its layout
    /// and MSS, and the next segment to send.
    flat: Vec<u8>,
    cur: Option<(TcpLayout, usize, usize)>,
    scratch: Vec<u8>,
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
            flat: Vec::with_capacity(64 * 1024 + 256),
            cur: None,
            scratch: Vec::with_capacity(16 * 1024),
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

    /// Check the backlog's first frame and flatten it; a frame that
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
            p.copy_frame_to(&mut self.flat);
            let res = TcpLayout::of(&self.flat).and_then(|lay| {
                let meta = meta.ok_or(GsoError::NotTcp)?;
                gso::check_meta(&lay, &meta, self.flat.len())?;
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
            let (pool, meta) = (head.pool().clone(), *head.metadata());
            let mut short = false;
            let mut emitted = 0;
            let res = gso::segment_range(&self.flat, &lay, mss, next..end, &mut self.scratch, |s| {
                match pool.alloc_frame(s) {
                    Ok(mut b) => {
                        *b.metadata_mut() = meta;
                        ctx.emit(0, b);
                        emitted += 1;
                    }
                    Err(_) => short = true,
                }
            });
            self.segments += emitted;
            ctx.count_created(emitted);
            if short || res.is_err() {
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
