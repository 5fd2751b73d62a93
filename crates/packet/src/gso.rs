//! TCP segmentation (TSO) and coalescing (LRO, by Linux GRO's rules) of
//! whole frames, plain or inside a VXLAN or Geneve tunnel: the header
//! work of the pipeline's `TSO` and `LRO` modules, on bytes.
//!
//! [`TcpLayout::of`] finds a frame's headers ([`describe`]: Ethernet,
//! IPv4/IPv6, TCP, and the same inside a tunnel) and checks that its
//! lengths agree (inner and outer IP, outer UDP); [`check_meta`] checks
//! a packet's offload metadata against them (a request that lies is
//! refused with a [`GsoError`], never followed). [`segment`] cuts a
//! frame into MSS-sized ones; [`fix_headers`] sets lengths, IP
//! identifiers and every checksum (outer and inner) of a frame whose
//! payload sum is known, for both directions. [`gro_verdict`] is GRO's
//! decision for one more segment of a held flow.

use crate::checksum::Sum;
use crate::offload_meta::{Offload, Tunnel, L3, L4};
use nfkit_hw::pool::offload::Gso;

/// TCP flags.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;
pub const CWR: u8 = 0x80;

/// Why a frame was not segmented or coalesced (each a counted reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    #[error("segmentation asked of a frame that is not TCP")]
    NotTcp,
    #[error("headers cut short, or lengths that disagree with the frame")]
    Truncated,
    #[error("a segment size of 0 or larger than the frame")]
    BadMss,
    #[error("offload offsets (checksum start, header length) that are not the frame's")]
    BadOffsets,
    #[error("more segments than allowed")]
    TooManySegments,
}

impl GsoError {
    pub const ALL: [GsoError; 5] = [
        GsoError::NotTcp,
        GsoError::Truncated,
        GsoError::BadMss,
        GsoError::BadOffsets,
        GsoError::TooManySegments,
    ];
    /// The statistic's name.
    pub fn reason(self) -> &'static str {
        match self {
            GsoError::NotTcp => "not_tcp",
            GsoError::Truncated => "truncated",
            GsoError::BadMss => "bad_mss",
            GsoError::BadOffsets => "bad_offsets",
            GsoError::TooManySegments => "too_many_segments",
        }
    }
}

/// Where a TCP frame's headers are ([`Offload`]'s lengths, no flags),
/// and where its innermost IP packet ends (Ethernet padding after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLayout {
    pub o: Offload,
    pub end: usize,
}

fn be16(d: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([d[at], d[at + 1]]))
}

/// Where the IP packet at `l3` ends.
fn ip_end(d: &[u8], l3: usize) -> usize {
    if d[l3] >> 4 == 4 {
        l3 + be16(d, l3 + 2)
    } else {
        l3 + 40 + be16(d, l3 + 4)
    }
}

impl TcpLayout {
    /// The layout of a TCP frame (plain, or in VXLAN/Geneve on their
    /// ports): [`GsoError::NotTcp`] for other frames,
    /// [`GsoError::Truncated`] when headers are cut or lengths disagree.
    pub fn of(frame: &[u8]) -> Result<TcpLayout, GsoError> {
        TcpLayout::of_prefix(frame, frame.len())
    }

    /// [`TcpLayout::of`] for a frame of `len` bytes of which `head` holds
    /// the first (at least its headers: a chain's, copied out). Headers
    /// that do not lie within `head` are [`GsoError::Truncated`].
    pub fn of_prefix(head: &[u8], len: usize) -> Result<TcpLayout, GsoError> {
        let frame = head;
        let o = crate::offload_meta::describe_prefix(head, len).ok_or(GsoError::Truncated)?;
        if o.l4 != L4::Tcp {
            return Err(GsoError::NotTcp);
        }
        if o.header_len() > head.len() {
            return Err(GsoError::Truncated);
        }
        let end = ip_end(frame, o.l3_start());
        if end < o.header_len() || end > len {
            return Err(GsoError::Truncated);
        }
        if o.tunnel != Tunnel::None {
            let outer = usize::from(o.outer_l2_len);
            let udp = outer + usize::from(o.outer_l3_len);
            if ip_end(frame, outer) != end || udp + be16(frame, udp + 4) != end {
                return Err(GsoError::Truncated);
            }
        }
        if o.l3 == L3::Ipv4 && be16(frame, o.l3_start() + 6) & 0x3fff != 0 {
            return Err(GsoError::NotTcp); // a fragment
        }
        Ok(TcpLayout { o, end })
    }
    pub fn header_len(&self) -> usize {
        self.o.header_len()
    }
    pub fn payload_len(&self) -> usize {
        self.end - self.o.header_len()
    }
}

/// Check a packet's segmentation request `meta` against the frame's own
/// layout (`frame_len` bytes): TCP segmentation of a TCP frame, a
/// segment size from 1 to the frame's length, and the checksum start
/// and header length the frame's (when the metadata gives them).
pub fn check_meta(lay: &TcpLayout, meta: &Offload, frame_len: usize) -> Result<(), GsoError> {
    if meta.gso != Gso::Tcp || meta.l4 == L4::Udp {
        return Err(GsoError::NotTcp);
    }
    if meta.gso_size == 0 || usize::from(meta.gso_size) > frame_len {
        return Err(GsoError::BadMss);
    }
    if meta.l4_start() >= frame_len || meta.l4_start() != lay.o.l4_start() {
        return Err(GsoError::BadOffsets);
    }
    if meta.l4_len != 0 && meta.header_len() != lay.header_len() {
        return Err(GsoError::BadOffsets);
    }
    Ok(())
}

/// Sum of bytes that follow one another in a frame, given in pieces of
/// any length (a chain's segments).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunningSum {
    sum: u64,
    odd: bool,
}

impl RunningSum {
    pub fn add(&mut self, b: &[u8]) {
        if b.is_empty() {
            return;
        }
        self.add_sum(Sum::ZERO.add_bytes(b), b.len());
    }
    /// Add a piece of `len` bytes whose own sum is `s`.
    pub fn add_sum(&mut self, s: Sum, len: usize) {
        let s = s.fold();
        // A piece starting at an odd offset has its bytes in the other
        // halves of the words: its sum, byte-swapped (RFC 1071 §2(B)).
        self.sum += u64::from(if self.odd { s.swap_bytes() } else { s });
        self.odd ^= len % 2 == 1;
    }
    pub fn sum(&self) -> Sum {
        Sum::ZERO
            .add_u32(self.sum as u32)
            .add_u32((self.sum >> 32) as u32)
    }
}

fn ipv4_csum(h: &mut [u8], l3: usize) {
    let ihl = usize::from(h[l3] & 0x0f) * 4;
    h[l3 + 10..l3 + 12].fill(0);
    let c = crate::checksum::checksum(&h[l3..l3 + ihl]);
    h[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Set the lengths of every header of a frame of `total` bytes (no
/// padding) whose headers `hdrs` (at least [`TcpLayout::header_len`]
/// bytes) are laid out as `o`; add `id_delta` to the IPv4 identifiers;
/// and set every checksum: inner TCP over its pseudo-header, the header
/// and `payload` (the sum of the bytes after the headers), inner and
/// outer IPv4 headers, and the outer UDP checksum when it was not 0 (or
/// is over IPv6, where 0 is not allowed).
pub fn fix_headers(hdrs: &mut [u8], o: &Offload, total: usize, id_delta: u16, payload: Sum) {
    let (l3, l4, hl) = (o.l3_start(), o.l4_start(), o.header_len());
    let set16 = |h: &mut [u8], at: usize, v: usize| {
        h[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
    };
    let bump_id = |h: &mut [u8], l3: usize| {
        let id = u16::from_be_bytes([h[l3 + 4], h[l3 + 5]]).wrapping_add(id_delta);
        h[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
    };
    // The inner (or only) IP header and its pseudo-header.
    let tcp_len = total - l4;
    let pseudo = if hdrs[l3] >> 4 == 4 {
        set16(hdrs, l3 + 2, total - l3);
        bump_id(hdrs, l3);
        ipv4_csum(hdrs, l3);
        Sum::ZERO
            .add_bytes(&hdrs[l3 + 12..l3 + 20])
            .add_u16(6)
            .add_u16(tcp_len as u16)
    } else {
        set16(hdrs, l3 + 4, total - l3 - 40);
        Sum::ZERO
            .add_bytes(&hdrs[l3 + 8..l3 + 40])
            .add_u32(tcp_len as u32)
            .add_u16(6)
    };
    hdrs[l4 + 16..l4 + 18].fill(0);
    let c = pseudo
        .add_bytes(&hdrs[l4..hl])
        .add_u32(payload.fold().into())
        .checksum();
    hdrs[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    if o.tunnel == Tunnel::None {
        return;
    }
    let outer = usize::from(o.outer_l2_len);
    let udp = outer + usize::from(o.outer_l3_len);
    let udp_len = total - udp;
    set16(hdrs, udp + 4, udp_len);
    let v4 = hdrs[outer] >> 4 == 4;
    let had_csum = hdrs[udp + 6..udp + 8] != [0, 0];
    let pseudo = if v4 {
        set16(hdrs, outer + 2, total - outer);
        bump_id(hdrs, outer);
        ipv4_csum(hdrs, outer);
        Sum::ZERO
            .add_bytes(&hdrs[outer + 12..outer + 20])
            .add_u16(17)
            .add_u16(udp_len as u16)
    } else {
        set16(hdrs, outer + 4, total - outer - 40);
        Sum::ZERO
            .add_bytes(&hdrs[outer + 8..outer + 40])
            .add_u32(udp_len as u32)
            .add_u16(17)
    };
    if had_csum || !v4 {
        hdrs[udp + 6..udp + 8].fill(0);
        let mut c = pseudo
            .add_bytes(&hdrs[udp..hl])
            .add_u32(payload.fold().into())
            .checksum();
        if c == 0 {
            c = 0xffff;
        }
        hdrs[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
    }
}

/// Cut the TCP frame `frame` (layout `lay`) into frames of at most `mss`
/// payload bytes, as a NIC with TSO would: the headers replicated,
/// sequence numbers advanced, IPv4 identifiers (inner and outer)
/// counted up from the frame's, FIN and PSH on the last segment only,
/// CWR on the first only, and every length and checksum set
/// ([`fix_headers`]). Each segment is built in `scratch` and handed to
/// `emit`; returns how many. A frame whose payload fits one segment is
/// emitted as one (its checksums set).
pub fn segment(
    frame: &[u8],
    lay: &TcpLayout,
    mss: usize,
    max_segments: usize,
    scratch: &mut Vec<u8>,
    emit: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    let n = segments(lay, mss)?;
    if n > max_segments {
        return Err(GsoError::TooManySegments);
    }
    segment_range(frame, lay, mss, 0..n, scratch, emit)
}

/// How many segments [`segment`] cuts a frame of layout `lay` into.
pub fn segments(lay: &TcpLayout, mss: usize) -> Result<usize, GsoError> {
    if mss == 0 {
        return Err(GsoError::BadMss);
    }
    Ok(lay.payload_len().div_ceil(mss).max(1))
}

/// Segments `range` (indices from 0) of [`segment`]'s cut, for a caller
/// that sends a frame's segments over several batches.
pub fn segment_range(
    frame: &[u8],
    lay: &TcpLayout,
    mss: usize,
    range: std::ops::Range<usize>,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    let n = segments(lay, mss)?;
    let (hl, l4) = (lay.header_len(), lay.o.l4_start());
    let payload = frame.get(hl..lay.end).ok_or(GsoError::Truncated)?;
    let seq0 = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
    let range = range.start.min(n)..range.end.min(n);
    for i in range.clone() {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        scratch.clear();
        scratch.extend_from_slice(&frame[..hl]);
        scratch.extend_from_slice(chunk);
        let seq = seq0.wrapping_add((i * mss) as u32);
        scratch[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < n {
            scratch[l4 + 13] &= !(FIN | PSH);
        }
        if i > 0 {
            scratch[l4 + 13] &= !CWR;
        }
        let total = scratch.len();
        let sum = Sum::ZERO.add_bytes(chunk);
        fix_headers(&mut scratch[..hl], &lay.o, total, i as u16, sum);
        emit(scratch);
    }
    Ok(range.len())
}

/// Bytes of a frame read front to back from its pieces (a chain's
/// segments), for [`segment_chain`].
pub struct Pieces<'a, I: Iterator<Item = &'a [u8]>> {
    it: I,
    cur: &'a [u8],
}

impl<'a, I: Iterator<Item = &'a [u8]>> Pieces<'a, I> {
    /// The pieces `it`, from the first byte of the frame.
    pub fn new(it: I) -> Self {
        Pieces { it, cur: &[] }
    }
    /// Pass over `n` bytes; false if the frame is shorter.
    pub fn skip(&mut self, mut n: usize) -> bool {
        while n > 0 {
            if self.cur.is_empty() {
                match self.it.next() {
                    Some(p) => self.cur = p,
                    None => return false,
                }
                continue;
            }
            let k = n.min(self.cur.len());
            self.cur = &self.cur[k..];
            n -= k;
        }
        true
    }
    /// Copy the next `dst.len()` bytes into `dst`, adding them to `sum`
    /// in the same pass; false if the frame is shorter.
    fn copy_into(&mut self, mut dst: &mut [u8], sum: &mut RunningSum) -> bool {
        while !dst.is_empty() {
            if self.cur.is_empty() {
                match self.it.next() {
                    Some(p) => self.cur = p,
                    None => return false,
                }
                continue;
            }
            let k = dst.len().min(self.cur.len());
            let (now, rest) = std::mem::take(&mut dst).split_at_mut(k);
            sum.add_sum(crate::checksum::copy_sum(now, &self.cur[..k]), k);
            self.cur = &self.cur[k..];
            dst = rest;
        }
        true
    }
}

/// What [`segment_chain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Segments handed to `emit`.
    pub emitted: usize,
    /// The allocator ran dry (or a segment could not be chained): the
    /// cut stopped there.
    pub short: bool,
    /// The frame could not be cut (after `emitted` segments).
    pub error: Option<GsoError>,
}

/// Segments `range` of [`segment`]'s cut of a frame held as pieces (a
/// chain of buffers), without making it contiguous: `hdr` holds its
/// first bytes (at least the headers of layout `lay`), `payload` reads
/// it from byte `lay.header_len() + range.start * mss` on. Each
/// segment is a fresh buffer from `alloc` (chained over more when it
/// does not fit one): the headers copied from `hdr` and patched, the
/// payload copied once from the pieces with its checksum summed in the
/// same pass ([`crate::checksum::copy_sum`]), then every length and
/// checksum set ([`fix_headers`]); it goes to `emit`. Segments are the
/// same bytes as [`segment_range`]'s.
pub fn segment_chain<'a, I: Iterator<Item = &'a [u8]>>(
    hdr: &[u8],
    lay: &TcpLayout,
    mss: usize,
    range: std::ops::Range<usize>,
    payload: &mut Pieces<'a, I>,
    mut alloc: impl FnMut() -> Option<nfkit_hw::PktBuf>,
    mut emit: impl FnMut(nfkit_hw::PktBuf),
) -> Cut {
    let mut cut = Cut {
        emitted: 0,
        short: false,
        error: None,
    };
    let n = match segments(lay, mss) {
        Ok(n) => n,
        Err(e) => {
            cut.error = Some(e);
            return cut;
        }
    };
    let (hl, l4) = (lay.header_len(), lay.o.l4_start());
    let Some(hdr) = hdr.get(..hl) else {
        cut.error = Some(GsoError::Truncated);
        return cut;
    };
    let seq0 = u32::from_be_bytes([hdr[l4 + 4], hdr[l4 + 5], hdr[l4 + 6], hdr[l4 + 7]]);
    let plen_all = lay.payload_len();
    for i in range.start.min(n)..range.end.min(n) {
        let plen = mss.min(plen_all - (i * mss).min(plen_all));
        let total = hl + plen;
        let Some(mut b) = alloc() else {
            cut.short = true;
            return cut;
        };
        let room = b.pool().data_room();
        if hl > room {
            cut.error = Some(GsoError::Truncated);
            return cut;
        }
        let first = total.min(room);
        let mut sum = RunningSum::default();
        if b.set_len(first).is_err() {
            cut.error = Some(GsoError::Truncated);
            return cut;
        }
        {
            let d = b.data_mut();
            d[..hl].copy_from_slice(hdr);
            if !payload.copy_into(&mut d[hl..first], &mut sum) {
                cut.error = Some(GsoError::Truncated);
                return cut;
            }
        }
        let mut left = total - first;
        while left > 0 {
            let Some(mut s) = alloc() else {
                cut.short = true;
                return cut;
            };
            let k = left.min(room);
            if s.set_len(k).is_err() {
                cut.error = Some(GsoError::Truncated);
                return cut;
            }
            if !payload.copy_into(s.data_mut(), &mut sum) {
                cut.error = Some(GsoError::Truncated);
                return cut;
            }
            if b.append(s).is_err() {
                cut.short = true;
                return cut;
            }
            left -= k;
        }
        let h = &mut b.data_mut()[..hl];
        let seq = seq0.wrapping_add((i * mss) as u32);
        h[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < n {
            h[l4 + 13] &= !(FIN | PSH);
        }
        if i > 0 {
            h[l4 + 13] &= !CWR;
        }
        fix_headers(h, &lay.o, total, i as u16, sum.sum());
        emit(b);
        cut.emitted += 1;
    }
    cut
}

/// Whether the TCP checksum (and the IPv4 header checksum) of the
/// innermost packet of `frame` verifies; also returns the payload's sum.
pub fn verify_inner(frame: &[u8], lay: &TcpLayout) -> Option<Sum> {
    let payload = Sum::ZERO.add_bytes(&frame[lay.header_len()..lay.end]);
    verify_headers(frame, lay, payload).then_some(payload)
}

/// [`verify_inner`] of a frame whose first bytes `frame` are (at least
/// its headers: a chain's first segment) and whose payload sums to
/// `payload`.
pub fn verify_headers(frame: &[u8], lay: &TcpLayout, payload: Sum) -> bool {
    let (l3, l4, hl) = (lay.o.l3_start(), lay.o.l4_start(), lay.header_len());
    let v4 = frame[l3] >> 4 == 4;
    if v4 && crate::checksum::checksum(&frame[l3..l4]) != 0 {
        return false;
    }
    let tcp_len = lay.end - l4;
    let pseudo = if v4 {
        Sum::ZERO
            .add_bytes(&frame[l3 + 12..l3 + 20])
            .add_u16(6)
            .add_u16(tcp_len as u16)
    } else {
        Sum::ZERO
            .add_bytes(&frame[l3 + 8..l3 + 40])
            .add_u32(tcp_len as u32)
            .add_u16(6)
    };
    pseudo
        .add_bytes(&frame[l4..hl])
        .add_u32(payload.fold().into())
        .fold()
        == 0xffff
}

/// The sum of bytes `from..to` of a frame held as pieces (a chain's
/// segments), odd piece lengths accounted for.
pub fn pieces_sum<'a>(pieces: impl Iterator<Item = &'a [u8]>, from: usize, to: usize) -> Sum {
    let mut sum = RunningSum::default();
    let mut at = 0;
    for p in pieces {
        let (s, e) = (from.max(at), to.min(at + p.len()));
        if s < e {
            sum.add(&p[s - at..e - at]);
        }
        at += p.len();
        if at >= to {
            break;
        }
    }
    sum.sum()
}

/// A flow GRO holds: the first frame's headers and layout, and what
/// has been added to it.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub lay: TcpLayout,
    /// The sequence number the next segment must have.
    pub next_seq: u32,
    /// The first segment's payload (the flow's MSS).
    pub mss: usize,
    /// Frame bytes so far (headers once, every payload).
    pub len: usize,
    pub segs: usize,
    /// The last segment's IPv4 identifiers (inner, outer).
    pub id: u16,
    pub outer_id: u16,
    /// FIN/PSH of later segments, for the merged header.
    pub flags: u8,
}

impl Held {
    /// Start holding `frame` (its layout `lay`).
    pub fn new(frame: &[u8], lay: TcpLayout) -> Held {
        let l4 = lay.o.l4_start();
        let seq = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
        Held {
            lay,
            next_seq: seq.wrapping_add(lay.payload_len() as u32),
            mss: lay.payload_len(),
            len: lay.end,
            segs: 1,
            id: ip_id(frame, lay.o.l3_start()),
            outer_id: ip_id(frame, usize::from(lay.o.outer_l2_len)),
            flags: 0,
        }
    }
    /// Add a segment GRO said to merge.
    pub fn add(&mut self, frame: &[u8], lay: &TcpLayout) {
        let l4 = lay.o.l4_start();
        self.next_seq = self.next_seq.wrapping_add(lay.payload_len() as u32);
        self.len += lay.payload_len();
        self.segs += 1;
        self.id = ip_id(frame, lay.o.l3_start());
        self.outer_id = ip_id(frame, usize::from(lay.o.outer_l2_len));
        self.flags |= frame[l4 + 13] & (FIN | PSH);
    }
}

fn ip_id(d: &[u8], l3: usize) -> u16 {
    if d.get(l3).is_some_and(|v| v >> 4 == 4) {
        u16::from_be_bytes([d[l3 + 4], d[l3 + 5]])
    } else {
        0
    }
}

/// What GRO does with one more TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Another flow: the held one is unaffected.
    OtherFlow,
    /// The same flow, but it does not continue the held frame: send the
    /// held frame first.
    Flush,
    /// Add it; `then_flush`: the flow is complete after it.
    Merge { then_flush: bool },
}

/// Whether a segment that starts a flow may be held (Linux sends data
/// with URG/PSH/RST/SYN/FIN, and segments without data, at once).
pub fn holdable(frame: &[u8], lay: &TcpLayout) -> bool {
    let flags = frame[lay.o.l4_start() + 13];
    lay.payload_len() > 0
        && flags & (URG | PSH | RST | SYN | FIN) == 0
        && (lay.o.l3 == L3::Ipv6 || lay.o.l3_len == 20)
}

/// The ranges of a flow's key: addresses and ports (and, in a tunnel,
/// the outer addresses and the tunnel header).
fn same_flow(a: &[u8], b: &[u8], o: &Offload) -> bool {
    let (l3, l4) = (o.l3_start(), o.l4_start());
    let addrs = |d: &[u8]| {
        if d[l3] >> 4 == 4 {
            l3 + 12..l3 + 20
        } else {
            l3 + 8..l3 + 40
        }
    };
    if a[addrs(a)] != b[addrs(b)] || a[l4..l4 + 4] != b[l4..l4 + 4] {
        return false;
    }
    if o.tunnel != Tunnel::None {
        let outer = usize::from(o.outer_l2_len);
        let oa = if a[outer] >> 4 == 4 {
            outer + 12..outer + 20
        } else {
            outer + 8..outer + 40
        };
        let t = outer + usize::from(o.outer_l3_len) + 8;
        let th = t..o.l3_start() - usize::from(o.l2_len);
        return a[oa.clone()] == b[oa] && a[th.clone()] == b[th];
    }
    true
}

/// Bytes of headers that every segment of one GRO frame has alike:
/// all but lengths, identifiers, checksums, sequence number, flags
/// (compared apart) and the urgent pointer.
fn alike(a: &[u8], b: &[u8], o: &Offload) -> bool {
    let mut skip = [0u8; 256];
    let hl = o.header_len();
    if hl > skip.len() {
        return false;
    }
    let mut mask = |r: std::ops::Range<usize>| skip[r].fill(1);
    let ip = |mask: &mut dyn FnMut(std::ops::Range<usize>), l3: usize, v4: bool| {
        if v4 {
            mask(l3 + 2..l3 + 6);
            mask(l3 + 10..l3 + 12);
        } else {
            mask(l3 + 4..l3 + 6);
        }
    };
    let (l3, l4) = (o.l3_start(), o.l4_start());
    ip(&mut mask, l3, a[l3] >> 4 == 4);
    mask(l4 + 4..l4 + 8);
    mask(l4 + 13..l4 + 14);
    mask(l4 + 16..l4 + 20);
    if o.tunnel != Tunnel::None {
        let outer = usize::from(o.outer_l2_len);
        let udp = outer + usize::from(o.outer_l3_len);
        ip(&mut mask, outer, a[outer] >> 4 == 4);
        mask(udp + 4..udp + 8);
    }
    (0..hl).all(|i| skip[i] == 1 || a[i] == b[i])
}

/// GRO's decision (Linux `tcp_gro_receive`, `inet_gro_receive`) for
/// segment `next` (layout `nlay`, checksums verified by the caller)
/// against the flow held in `h`, whose first frame's headers are
/// `held`: same flow; same header lengths; headers alike (addresses,
/// ports, TTL, TOS, DF, ACK number, window, options: all but lengths,
/// identifiers, checksums); no CWR, and flags equal but for FIN/PSH;
/// the sequence number next; IPv4 identifiers counting up by one (or
/// fixed with DF); payload not empty and no larger than the first's;
/// the merged frame no larger than `max_len`. After a merge the flow is
/// complete if the segment was short or had URG/PSH/RST/SYN/FIN.
pub fn gro_verdict(
    held: &[u8],
    h: &Held,
    next: &[u8],
    nlay: &TcpLayout,
    max_len: usize,
) -> Verdict {
    let o = &h.lay.o;
    let no = &nlay.o;
    let shape = |x: &Offload| {
        (
            x.tunnel,
            x.outer_l2_len,
            x.outer_l3_len,
            x.tunnel_len,
            x.l2_len,
            x.l3,
            x.l3_len,
            x.l4_len,
        )
    };
    if o.tunnel != no.tunnel || o.l3_start() != no.l3_start() || o.l3 != no.l3 {
        return Verdict::OtherFlow;
    }
    if !same_flow(held, next, o) {
        return Verdict::OtherFlow;
    }
    if shape(o) != shape(no) || !alike(held, next, o) {
        return Verdict::Flush;
    }
    let l4 = o.l4_start();
    let (f0, f) = (held[l4 + 13], next[l4 + 13]);
    if f & CWR != 0 || (f0 ^ f) & !(CWR | FIN | PSH) != 0 {
        return Verdict::Flush;
    }
    let seq = u32::from_be_bytes([next[l4 + 4], next[l4 + 5], next[l4 + 6], next[l4 + 7]]);
    if seq != h.next_seq {
        return Verdict::Flush;
    }
    let ids_ok = |l3: usize, last: u16| {
        if next[l3] >> 4 != 4 {
            return true;
        }
        let id = ip_id(next, l3);
        let df = next[l3 + 6] & 0x40 != 0;
        id == last.wrapping_add(1) || (df && id == last)
    };
    if !ids_ok(o.l3_start(), h.id)
        || (o.tunnel != Tunnel::None && !ids_ok(usize::from(o.outer_l2_len), h.outer_id))
    {
        return Verdict::Flush;
    }
    let len = nlay.payload_len();
    if len == 0 || len > h.mss || h.len + len > max_len || !holdable_ip(next, nlay) {
        return Verdict::Flush;
    }
    Verdict::Merge {
        then_flush: len < h.mss || f & (URG | PSH | RST | SYN | FIN) != 0,
    }
}

fn holdable_ip(frame: &[u8], lay: &TcpLayout) -> bool {
    lay.o.l3 == L3::Ipv6 || (lay.o.l3_len == 20 && frame[lay.o.l3_start()] == 0x45)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrameBuilder;
    use std::net::Ipv4Addr;

    fn big(payload: usize, flags: u8) -> Vec<u8> {
        let p: Vec<u8> = (0..payload).map(|i| (i * 31 % 251) as u8).collect();
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut f = FrameBuilder::tcp((a, 1000), (z, 2000)).payload(&p).build();
        let l4 = 34;
        f[l4 + 13] = flags;
        let lay = TcpLayout::of(&f).unwrap();
        let sum = Sum::ZERO.add_bytes(&f[lay.header_len()..]);
        let n = f.len();
        fix_headers(&mut f, &lay.o, n, 0, sum);
        f
    }

    #[test]
    fn segments_verify_and_coalesce_back() {
        let f = big(5000, ACK | PSH | CWR);
        let lay = TcpLayout::of(&f).unwrap();
        assert!(verify_inner(&f, &lay).is_some());
        let mut segs = Vec::new();
        let mut s = Vec::new();
        let n = segment(&f, &lay, 1448, 64, &mut s, |x| segs.push(x.to_vec())).unwrap();
        assert_eq!(n, 4);
        for (i, x) in segs.iter().enumerate() {
            crate::verify_checksums(x).unwrap();
            assert_eq!(x[34 + 13] & CWR != 0, i == 0);
            assert_eq!(x[34 + 13] & PSH != 0, i == 3);
        }
        let first = TcpLayout::of(&segs[0]).unwrap();
        let mut h = Held::new(&segs[0], first);
        let mut merged = segs[0].clone();
        let mut sum = RunningSum::default();
        sum.add(&segs[0][54..]);
        for (i, x) in segs.iter().enumerate().skip(1) {
            let l = TcpLayout::of(x).unwrap();
            let v = gro_verdict(&segs[0], &h, x, &l, 65_535);
            assert_eq!(v, Verdict::Merge { then_flush: i == 3 });
            h.add(x, &l);
            merged.extend_from_slice(&x[54..]);
            sum.add(&x[54..]);
        }
        merged[34 + 13] |= h.flags;
        let total = merged.len();
        fix_headers(&mut merged, &lay.o, total, 0, sum.sum());
        assert_eq!(merged, f);
        // Out of order, or another flow.
        let l = TcpLayout::of(&segs[2]).unwrap();
        let h = Held::new(&segs[0], first);
        assert_eq!(
            gro_verdict(&segs[0], &h, &segs[2], &l, 65_535),
            Verdict::Flush
        );
        let mut other = segs[1].clone();
        other[34] ^= 1;
        assert_eq!(
            gro_verdict(&segs[0], &h, &other, &l, 65_535),
            Verdict::OtherFlow
        );
    }

    /// Cutting from pieces of any length (a chain, odd cuts included)
    /// gives the same bytes as cutting the flat frame, segments larger
    /// than a buffer chained.
    #[test]
    fn segments_cut_from_pieces_are_those_of_the_flat_frame() {
        let dma = nfkit_hw::sim::SimDma::new();
        let pool = nfkit_hw::Mempool::new(&*dma, "t", 64, 2048).unwrap();
        let f = big(9000, ACK | PSH);
        let lay = TcpLayout::of(&f).unwrap();
        for (mss, cuts) in [
            (1448, vec![54, 1001, 3333]),
            (3000, vec![7, 60, 5001]),
            (9000, vec![100]),
        ] {
            let mut flat = Vec::new();
            let mut s = Vec::new();
            let n = segment(&f, &lay, mss, 10_000, &mut s, |x| flat.push(x.to_vec())).unwrap();
            let mut pieces = Vec::new();
            let mut at = 0;
            for &c in &cuts {
                pieces.push(&f[at..c]);
                at = c;
            }
            pieces.push(&f[at..]);
            let mut got = Vec::new();
            let mut from = 0;
            // Two calls, as TSO spreads a frame over runs.
            for range in [0..n / 2, n / 2..n] {
                let mut p = Pieces::new(pieces.iter().copied());
                assert!(p.skip(lay.header_len() + from * mss));
                let cut = segment_chain(
                    &f[..64],
                    &lay,
                    mss,
                    range.clone(),
                    &mut p,
                    || pool.alloc(),
                    |b| got.push(b.segments().flatten().copied().collect::<Vec<u8>>()),
                );
                assert_eq!(
                    (cut.emitted, cut.short, cut.error),
                    (range.len(), false, None)
                );
                from = range.end;
            }
            assert_eq!(got, flat, "mss {mss}");
        }
    }

    #[test]
    fn running_sums_of_odd_pieces_are_the_whole_sum() {
        let b: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        for cut in [0, 1, 2, 333, 1000] {
            let mut r = RunningSum::default();
            r.add(&b[..cut]);
            r.add(&b[cut..cut + (1001 - cut) / 2]);
            r.add(&b[cut + (1001 - cut) / 2..]);
            assert_eq!(r.sum().fold(), Sum::ZERO.add_bytes(&b).fold(), "{cut}");
        }
    }
}
