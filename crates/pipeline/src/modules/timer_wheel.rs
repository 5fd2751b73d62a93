//! A hierarchical timer wheel of items (`u32` ids) due at integer ticks:
//! O(1) insertion, and each item moves down at most one level per pass
//! of time, so a run costs O(1) per item that falls due whatever the
//! number of items held (a heap costs O(log n) each). No allocation
//! once every id has been seen: the lists are links in one vector.
//!
//! Layout: [`LEVELS`] levels of 64 slots; an item due at tick `t` sits at
//! the level of the highest 6-bit digit in which `t` differs from the
//! wheel's current tick, in the slot of `t`'s digit there. So level 0
//! holds the current 64-tick block one tick per slot, and every slot of
//! a level starts before any slot of the levels above: the next slot to
//! open is the lowest slot of the lowest non-empty level (a bitmap per
//! level and one of levels find it in two instructions). Advancing
//! moves level 0's slots up to the target onto the ready list (first in
//! first out) in one sweep of its bitmap, then opens the next higher
//! slot, if it starts by the target, and spreads its items over the
//! levels below; idle stretches cost nothing.

const BITS: u32 = 6;
const SLOTS: usize = 1 << BITS;
/// Enough levels for any `u64` tick.
pub const LEVELS: usize = 64_usize.div_ceil(BITS as usize);
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

pub struct TimerWheel {
    /// The current tick: every item held is due after it (or ready).
    now: u64,
    /// Per item: the next item of its list.
    link: Vec<u32>,
    /// Per item: the tick it is due at.
    due: Vec<u64>,
    slots: Box<[[List; SLOTS]; LEVELS]>,
    bitmap: [u64; LEVELS],
    /// Levels with a non-empty slot.
    levels: u32,
    ready: List,
    held: usize,
}

impl Default for TimerWheel {
    fn default() -> Self {
        TimerWheel::new()
    }
}

impl TimerWheel {
    pub fn new() -> TimerWheel {
        TimerWheel {
            now: 0,
            link: Vec::new(),
            due: Vec::new(),
            slots: Box::new([[EMPTY; SLOTS]; LEVELS]),
            bitmap: [0; LEVELS],
            levels: 0,
            ready: EMPTY,
            held: 0,
        }
    }

    /// Room for ids below `n` without allocating later.
    pub fn reserve(&mut self, n: usize) {
        self.link.reserve(n.saturating_sub(self.link.len()));
        self.due.reserve(n.saturating_sub(self.due.len()));
    }

    /// Items held (waiting or ready).
    pub fn len(&self) -> usize {
        self.held
    }
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// The current tick.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Forget every item (the current tick stays).
    pub fn clear(&mut self) {
        for l in 0..LEVELS {
            let mut bits = self.bitmap[l];
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.slots[l][s] = EMPTY;
            }
            self.bitmap[l] = 0;
        }
        self.levels = 0;
        self.ready = EMPTY;
        self.held = 0;
    }

    /// Hold `item` (not already held) until tick `at`; at or before the
    /// current tick it is ready at once.
    #[inline]
    pub fn insert(&mut self, item: u32, at: u64) {
        let i = item as usize;
        if i >= self.link.len() {
            self.link.resize(i + 1, NIL);
            self.due.resize(i + 1, 0);
        }
        self.due[i] = at;
        self.held += 1;
        self.place(item, at);
    }

    #[inline(always)]
    fn place(&mut self, item: u32, at: u64) {
        if at <= self.now {
            push(&mut self.link, &mut self.ready, item);
            return;
        }
        // `at ^ now` is not zero: its log is 0..=63, the level 0..=10.
        let level = ((at ^ self.now).ilog2() / BITS) as usize;
        let slot = ((at >> (BITS as usize * level)) as usize) & (SLOTS - 1);
        push(&mut self.link, &mut self.slots[level][slot], item);
        self.bitmap[level] |= 1 << slot;
        self.levels |= 1 << level;
    }

    /// The tick at which slot `slot` of `level` begins, in the current
    /// block of the level above.
    fn start(&self, level: usize, slot: usize) -> u64 {
        let above = BITS as usize * (level + 1);
        let block = if above >= 64 {
            0
        } else {
            self.now & !((1u64 << above) - 1)
        };
        block | ((slot as u64) << (BITS as usize * level))
    }

    /// Move time to tick `to` (never backwards): every item due by then
    /// becomes ready, in order of due tick, except that items of one
    /// higher slot that all fall due within this call keep the slot's
    /// order (so the order is exact up to the span of one call: a run of
    /// a task that calls this as often as it sends sends them all
    /// anyway).
    pub fn advance(&mut self, to: u64) {
        if to <= self.now {
            return;
        }
        loop {
            // Level 0 is the current block, a tick a slot: every slot up
            // to `to` goes to the ready list, in one sweep.
            if self.bitmap[0] != 0 {
                let base = self.now & !(SLOTS as u64 - 1);
                let mask = match to - base {
                    d if d >= SLOTS as u64 - 1 => u64::MAX,
                    d => (2u64 << d) - 1,
                };
                let mut bits = self.bitmap[0] & mask;
                self.bitmap[0] &= !mask;
                while bits != 0 {
                    let s = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let list = std::mem::replace(&mut self.slots[0][s], EMPTY);
                    splice(&mut self.link, &mut self.ready, list);
                }
                if self.bitmap[0] != 0 {
                    // Level 0 holds a tick after `to`: nothing above
                    // opens before it.
                    break;
                }
                self.levels &= !1;
            }
            // The lowest level's lowest slot opens next.
            if self.levels == 0 {
                break;
            }
            let l = self.levels.trailing_zeros() as usize;
            let s = self.bitmap[l].trailing_zeros() as usize;
            let at = self.start(l, s);
            if at > to {
                break;
            }
            self.now = at;
            let list = std::mem::replace(&mut self.slots[l][s], EMPTY);
            self.bitmap[l] &= !(1 << s);
            if self.bitmap[l] == 0 {
                self.levels &= !(1 << l);
            }
            // Its items due by `to` are ready (in the slot's order: they
            // fall due within this one call), the others spread over the
            // levels below.
            let mut it = list.head;
            while it != NIL {
                let following = self.link[it as usize];
                let due = self.due[it as usize];
                if due <= to {
                    push(&mut self.link, &mut self.ready, it);
                } else {
                    self.place(it, due);
                }
                it = following;
            }
        }
        self.now = to;
    }

    /// The next ready item, first due first.
    #[inline]
    pub fn pop_ready(&mut self) -> Option<u32> {
        let item = self.ready.head;
        if item == NIL {
            return None;
        }
        self.ready.head = self.link[item as usize];
        if self.ready.head == NIL {
            self.ready.tail = NIL;
        }
        self.held -= 1;
        Some(item)
    }

    /// Whether an item is ready.
    pub fn has_ready(&self) -> bool {
        self.ready.head != NIL
    }

    /// When something next may fall due: the current tick if an item is
    /// ready, else the start of the next slot to open (no later than its
    /// items' ticks), `None` if nothing is held.
    pub fn next_due(&self) -> Option<u64> {
        if self.has_ready() {
            return Some(self.now);
        }
        if self.levels == 0 {
            return None;
        }
        let l = self.levels.trailing_zeros() as usize;
        Some(self.start(l, self.bitmap[l].trailing_zeros() as usize))
    }
}

#[inline(always)]
fn push(link: &mut [u32], list: &mut List, item: u32) {
    link[item as usize] = NIL;
    if list.tail == NIL {
        list.head = item;
    } else {
        link[list.tail as usize] = item;
    }
    list.tail = item;
}

#[inline(always)]
fn splice(link: &mut [u32], list: &mut List, other: List) {
    if other.head == NIL {
        return;
    }
    if list.tail == NIL {
        list.head = other.head;
    } else {
        link[list.tail as usize] = other.head;
    }
    list.tail = other.tail;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a sorted reference: every item comes out once, no earlier
    /// than its tick and before any item due later.
    #[test]
    fn items_come_out_in_due_order_at_their_tick() {
        let mut w = TimerWheel::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut due = Vec::new();
        for i in 0..5000u32 {
            let span = [10, 1_000, 100_000, 10_000_000, 1 << 40][i as usize % 5];
            let at = 5 + rand() % span;
            due.push(at);
            w.insert(i, at);
        }
        let mut out = Vec::new();
        let mut t = 0u64;
        while !w.is_empty() {
            t = match w.next_due() {
                Some(n) if n > t => n + rand() % 3,
                _ => t,
            };
            w.advance(t);
            while let Some(i) = w.pop_ready() {
                assert!(due[i as usize] <= t, "item {i} early");
                out.push(i);
            }
        }
        assert_eq!(out.len(), 5000);
        for pair in out.windows(2) {
            // In order of due tick, up to the 3 ticks a step may jump.
            assert!(due[pair[0] as usize] <= due[pair[1] as usize] + 3);
        }
        // Reinsert after time moved: relative to the new tick.
        w.insert(7, t + 100);
        w.advance(t + 99);
        assert_eq!(w.pop_ready(), None);
        w.advance(t + 100);
        assert_eq!(w.pop_ready(), Some(7));
        w.insert(1, u64::MAX);
        w.advance(u64::MAX);
        assert_eq!(w.pop_ready(), Some(1));
        w.clear();
        assert!(w.is_empty());
    }
}
