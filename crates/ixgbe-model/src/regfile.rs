//! Register storage: one atomic word per 32-bit register of the 128 KiB
//! BAR, plus a word-indexed lookup built from the declarative table in
//! `regs.rs`. Atomic words let the driver thread and the device thread
//! share registers without a lock (a tail write is a plain store).

use crate::regs::{self, RegDef};
use std::sync::atomic::{AtomicU32, Ordering};

/// Size of the register window of BAR0 (§8.1: 128 KB + flash).
pub const BAR0_LEN: usize = 128 * 1024;
const WORDS: usize = BAR0_LEN / 4;
const UNMAPPED: u16 = u16::MAX;

/// Where a register offset lands: its table row, instance and storage word.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub def: &'static RegDef,
    /// Instance index (queue number for queue registers).
    pub n: usize,
    /// Storage word (alias rows share their primary row's word).
    pub word: usize,
}

pub struct RegFile {
    words: Box<[AtomicU32]>,
    /// word -> row index in `defs`
    row: Box<[u16]>,
    /// word -> storage word (differs only for aliases)
    canon: Box<[u16]>,
    defs: Vec<&'static RegDef>,
}

impl std::fmt::Debug for RegFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegFile")
            .field("rows", &self.defs.len())
            .finish()
    }
}

/// A table row's instance offsets.
fn instances(def: &RegDef) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..def.count as usize).map(move |i| {
        (
            def.first as usize + i,
            def.offset as usize + i * def.stride as usize,
        )
    })
}

impl RegFile {
    pub fn new() -> Self {
        let words = (0..WORDS).map(|_| AtomicU32::new(0)).collect();
        let mut row = vec![UNMAPPED; WORDS].into_boxed_slice();
        let mut canon: Box<[u16]> = (0..WORDS as u32).map(|w| w as u16).collect();
        let defs: Vec<&'static RegDef> = regs::all().collect();
        for (i, def) in defs.iter().enumerate() {
            for (n, off) in instances(def) {
                row[off / 4] = i as u16;
                if let Some(primary) = def.alias_of {
                    let p = defs
                        .iter()
                        .find(|d| {
                            d.name == primary
                                && d.alias_of.is_none()
                                && (d.first as usize..(d.first + d.count) as usize).contains(&n)
                        })
                        .expect("alias of a row in the table");
                    let p_off = p.offset as usize + (n - p.first as usize) * p.stride as usize;
                    canon[off / 4] = (p_off / 4) as u16;
                }
            }
        }
        let rf = RegFile {
            words,
            row,
            canon,
            defs,
        };
        rf.reset();
        rf
    }

    /// Every register back to its table reset value.
    pub fn reset(&self) {
        for def in self.defs.iter().filter(|d| d.alias_of.is_none()) {
            for (_, off) in instances(def) {
                self.words[off / 4].store(def.reset, Ordering::Relaxed);
            }
        }
    }

    /// Look up a byte offset; `None` for offsets that are not registers of
    /// the table (reserved space) or not 4-byte aligned.
    #[inline]
    pub fn slot(&self, offset: usize) -> Option<Slot> {
        if !offset.is_multiple_of(4) || offset >= BAR0_LEN {
            return None;
        }
        let w = offset / 4;
        let r = self.row[w];
        if r == UNMAPPED {
            return None;
        }
        let def = self.defs[r as usize];
        let n = def.first as usize + (offset - def.offset as usize) / def.stride as usize;
        Some(Slot {
            def,
            n,
            word: self.canon[w] as usize,
        })
    }

    /// The table rows (for documentation and tests).
    pub fn defs(&self) -> &[&'static RegDef] {
        &self.defs
    }

    #[inline]
    pub fn word(&self, word: usize) -> &AtomicU32 {
        &self.words[word]
    }

    /// Current value at a byte offset (no side effects).
    #[inline]
    pub fn get(&self, offset: usize) -> u32 {
        self.words[offset / 4].load(Ordering::Acquire)
    }

    #[inline]
    pub fn set(&self, offset: usize, v: u32) {
        self.words[offset / 4].store(v, Ordering::Release)
    }

    #[inline]
    pub fn or(&self, offset: usize, bits: u32) {
        self.words[offset / 4].fetch_or(bits, Ordering::AcqRel);
    }

    #[inline]
    pub fn clear(&self, offset: usize, bits: u32) {
        self.words[offset / 4].fetch_and(!bits, Ordering::AcqRel);
    }

    /// Add to a 32-bit statistics register (wrapping, as hardware counters do).
    #[inline]
    pub fn count(&self, offset: usize, n: u32) {
        if n != 0 {
            self.words[offset / 4].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Add to a split 64-bit statistics counter: the low register at
    /// `low`, the high one 4 bytes above (GORCL/GORCH, QBRC_L/QBRC_H...).
    #[inline]
    pub fn count64(&self, low: usize, n: u64) {
        if n == 0 {
            return;
        }
        let lo = n as u32;
        let old = self.words[low / 4].fetch_add(lo, Ordering::Relaxed);
        let carry = u32::from(old.checked_add(lo).is_none());
        let hi = (n >> 32) as u32 + carry;
        if hi != 0 {
            self.words[low / 4 + 1].fetch_add(hi, Ordering::Relaxed);
        }
    }

    /// Read and clear (statistics registers, §8.2.3.23).
    #[inline]
    pub fn take(&self, word: usize) -> u32 {
        self.words[word].swap(0, Ordering::AcqRel)
    }
}

impl Default for RegFile {
    fn default() -> Self {
        Self::new()
    }
}
