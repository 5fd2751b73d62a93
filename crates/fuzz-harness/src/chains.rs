//! The `packet_chains` target: arbitrary chained packet buffers.

use nfkit_hw::{Batch, PktBuf, MAX_SEGS};

/// Build, join, cut and free chains of pool buffers as the bytes say,
/// checking against a model of each frame's bytes: every frame's
/// segments add up to its length, its bytes are the model's, nothing is
/// read outside a buffer, and every buffer goes home at the end.
///
/// Input: a list of operations `[op][slot][a][b]` on 6 slots: `0`
/// frame of `a*256+b` bytes (up to 65,535), `1` append slot `a` to the
/// slot, `2` pull up `a*8+b` bytes, `3` prepend `b`, `4` trim `a*8+b`
/// from the front, `5` set the first segment's length, `6` clone, `7`
/// drop, `8` free all through a batch, `9` invert every byte then reset.
pub fn packet_chains(data: &[u8]) {
    let pool = nfkit_port::open::software_pool("fuzz", 96).expect("pool");
    let mut slots: Vec<Option<(PktBuf, Vec<u8>)>> = (0..6).map(|_| None).collect();
    let gather = |b: &PktBuf| {
        let mut v = Vec::new();
        b.copy_frame_to(&mut v);
        v
    };
    for op in data.chunks_exact(4) {
        let (s, a, b) = (op[1] as usize % 6, op[2] as usize, op[3] as usize);
        match op[0] % 10 {
            0 => {
                let len = a * 256 + b;
                let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + a) as u8).collect();
                slots[s] = pool.alloc_frame(&bytes).ok().map(|p| (p, bytes));
            }
            1 => {
                let from = a % 6;
                if from != s {
                    if let (Some((tail, tb)), Some((head, hb))) =
                        (slots[from].take(), slots[s].as_mut())
                    {
                        if head.append(tail).is_ok() {
                            hb.extend_from_slice(&tb);
                        }
                    }
                }
            }
            2 => {
                if let Some((p, m)) = slots[s].as_mut() {
                    let n = a * 8 + b;
                    if let Ok(h) = p.pull_up(n) {
                        assert_eq!(h, &m[..n]);
                    }
                }
            }
            3 => {
                if let Some((p, m)) = slots[s].as_mut() {
                    if let Ok(h) = p.prepend(b) {
                        h.fill(0xab);
                        m.splice(0..0, std::iter::repeat_n(0xab, b));
                    }
                }
            }
            4 => {
                if let Some((p, m)) = slots[s].as_mut() {
                    let n = a * 8 + b;
                    if p.adj(n).is_ok() {
                        m.drain(..n);
                    }
                }
            }
            5 => {
                if let Some((p, m)) = slots[s].as_mut() {
                    if p.set_len(a * 8 + b).is_ok() {
                        // The first segment's new bytes are whatever the
                        // buffer held: the model follows the frame.
                        *m = gather(p);
                    }
                }
            }
            6 => {
                let copy = slots[s]
                    .as_ref()
                    .and_then(|(p, m)| Some((p.try_clone()?, m.clone())));
                if copy.is_some() {
                    slots[a % 6] = copy;
                }
            }
            7 => slots[s] = None,
            8 => {
                let mut batch = Batch::new();
                for (p, _) in slots.iter_mut().filter_map(Option::take) {
                    batch.push(p);
                }
                batch.clear();
            }
            _ => {
                if let Some((p, m)) = slots[s].as_mut() {
                    p.for_each_segment_mut(|seg| seg.iter_mut().for_each(|x| *x = !*x));
                    assert_eq!(gather(p), m.iter().map(|x| !x).collect::<Vec<_>>());
                    p.reset();
                    m.clear();
                }
            }
        }
        for (p, m) in slots.iter().flatten() {
            assert!(p.nb_segs() <= MAX_SEGS);
            assert_eq!(p.segments().count(), p.nb_segs());
            assert_eq!(p.segments().map(<[u8]>::len).sum::<usize>(), p.pkt_len());
            assert_eq!(&gather(p), m);
        }
    }
    drop(slots);
    assert_eq!(pool.free_count(), pool.capacity(), "every buffer home");
}
