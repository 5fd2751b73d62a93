//! The flow table FlowDirector and AdaptiveLB share (no class of its
//! own): 5-tuple keys to a gate, with the time each flow was last seen,
//! a size limit, and idle entries expired a few at a time (a sweep of a
//! bounded number of slots per batch, so no packet waits for a whole
//! table scan).
//!
//! Layout: a hash map from key to slot, and the slots in one vector
//! (removal swaps the last slot into the hole), so the sweep walks
//! memory in order and a lookup costs one hash probe and one slot read.

use super::classify::ip;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A flow's key: the protocol (bits 96-103), IPv4 source (64-95) and
/// destination (32-63), source (16-31) and destination port (0-15),
/// and a marker bit (127) so that no key is 0. Non-IPv4 frames have none.
pub type FlowKey = u128;

/// The 5-tuple key of an Ethernet/IPv4 frame (ports 0 when the
/// protocol has none or the packet is a later fragment).
#[inline]
pub fn five_tuple(d: &[u8]) -> Option<FlowKey> {
    let (ihl, proto) = ip::header(d)?;
    let (sp, dp) = ip::ports(d, ihl, proto).unwrap_or((0, 0));
    Some(pack(
        ip::addr(d, ip::IP_SRC),
        ip::addr(d, ip::IP_DST),
        proto,
        sp,
        dp,
    ))
}

/// A key from its parts (what commands name).
pub fn pack(src: u32, dst: u32, proto: u8, sport: u16, dport: u16) -> FlowKey {
    1u128 << 127
        | (proto as u128) << 96
        | (src as u128) << 64
        | (dst as u128) << 32
        | (sport as u128) << 16
        | dport as u128
}

/// One 64-bit hash of a key, every bit of the key reaching every bit of
/// the hash (two multiplies and folds: FxHash's single multiply leaves
/// the low bits, where the table looks, depending on the ports alone,
/// and a million flows that differ in an address fell into a few
/// buckets).
#[inline]
pub fn hash(k: FlowKey) -> u64 {
    let (lo, hi) = (k as u64, (k >> 64) as u64);
    let mut h = lo.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ hi.wrapping_mul(0xc2b2_ae3d_27d4_eb4f).rotate_left(31);
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    h ^ (h >> 32)
}

/// The table's hasher: [`hash`] of the key.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(16) {
            let mut w = [0u8; 16];
            w[..c.len()].copy_from_slice(c);
            self.write_u128(u128::from_ne_bytes(w));
        }
    }
    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.0 = hash(v ^ self.0 as u128);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyMap<V> = HashMap<FlowKey, V, BuildHasherDefault<KeyHasher>>;

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub key: FlowKey,
    pub gate: u16,
    /// Added by command: never expires.
    pub pinned: bool,
    pub last_ns: u64,
}

/// Keys to gates, at most `limit` of them.
pub struct FlowTable {
    map: KeyMap<u32>,
    slots: Vec<Entry>,
    limit: usize,
    cursor: usize,
    /// Flows per gate.
    per_gate: Vec<u64>,
}

impl FlowTable {
    pub fn new(limit: usize, gates: usize) -> FlowTable {
        FlowTable {
            map: KeyMap::default(),
            slots: Vec::new(),
            limit,
            cursor: 0,
            per_gate: vec![0; gates],
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Flows on each gate.
    pub fn per_gate(&self) -> &[u64] {
        &self.per_gate
    }

    /// The entry of `key`, its last-seen time set to `now`.
    #[inline]
    pub fn touch(&mut self, key: FlowKey, now: u64) -> Option<&mut Entry> {
        let &i = self.map.get(&key)?;
        let e = &mut self.slots[i as usize];
        e.last_ns = now;
        Some(e)
    }

    pub fn get(&self, key: FlowKey) -> Option<&Entry> {
        self.map.get(&key).map(|&i| &self.slots[i as usize])
    }

    /// Add or move `key` to `gate`; false (nothing changed) when the
    /// table is full and the key is new.
    pub fn insert(&mut self, key: FlowKey, gate: u16, pinned: bool, now: u64) -> bool {
        if let Some(&i) = self.map.get(&key) {
            let e = &mut self.slots[i as usize];
            self.per_gate[e.gate as usize] -= 1;
            self.per_gate[gate as usize] += 1;
            e.gate = gate;
            e.pinned |= pinned;
            e.last_ns = now;
            return true;
        }
        if self.slots.len() >= self.limit {
            return false;
        }
        self.map.insert(key, self.slots.len() as u32);
        self.slots.push(Entry {
            key,
            gate,
            pinned,
            last_ns: now,
        });
        self.per_gate[gate as usize] += 1;
        true
    }

    /// Remove `key`; whether it was there.
    pub fn remove(&mut self, key: FlowKey) -> bool {
        match self.map.get(&key).copied() {
            Some(i) => {
                self.remove_slot(i as usize);
                true
            }
            None => false,
        }
    }

    fn remove_slot(&mut self, i: usize) {
        let e = self.slots.swap_remove(i);
        self.per_gate[e.gate as usize] -= 1;
        self.map.remove(&e.key);
        if let Some(moved) = self.slots.get(i) {
            self.map.insert(moved.key, i as u32);
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.slots.clear();
        self.per_gate.iter_mut().for_each(|g| *g = 0);
        self.cursor = 0;
    }

    /// Look at up to `budget` slots from where the last sweep stopped
    /// and remove entries not pinned and idle since before `older_than`;
    /// returns how many were removed.
    pub fn sweep(&mut self, budget: usize, older_than: u64) -> u64 {
        let mut removed = 0;
        for _ in 0..budget {
            if self.cursor >= self.slots.len() {
                self.cursor = 0;
                if self.slots.is_empty() {
                    break;
                }
            }
            let e = &self.slots[self.cursor];
            if !e.pinned && e.last_ns < older_than {
                // The last slot moves here: look at this slot again.
                self.remove_slot(self.cursor);
                removed += 1;
            } else {
                self.cursor += 1;
            }
        }
        removed
    }

    /// Entries on `gate` that were not added by command, removed.
    pub fn forget_gate(&mut self, gate: u16) -> u64 {
        let mut removed = 0;
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots[i].gate == gate && !self.slots[i].pinned {
                self.remove_slot(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_tuples_differ() {
        let base = pack(0x0a63_0001, 0x0a63_0002, 17, 40000, 9);
        for other in [
            pack(0x0a63_0001, 0x0a63_0002, 17, 40032, 9),
            pack(0x0a63_0001, 0x0a63_0002, 6, 40000, 9),
            pack(0x0a63_0002, 0x0a63_0001, 17, 40000, 9),
            pack(0x0a63_0001, 0x0a63_0002, 17, 9, 40000),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base >> 96 & 0xff, 17);
        assert_eq!(base as u16, 9);
        assert_eq!((base >> 16) as u16, 40000);
    }

    #[test]
    fn insert_remove_and_sweep_keep_the_map_and_slots_in_step() {
        let mut t = FlowTable::new(100, 4);
        for i in 0..100u32 {
            assert!(t.insert(pack(i, 1, 17, 1, 2), (i % 4) as u16, i % 10 == 0, i as u64));
        }
        assert!(!t.insert(pack(1000, 1, 17, 1, 2), 0, false, 0), "full");
        assert!(t.remove(pack(5, 1, 17, 1, 2)));
        assert!(!t.remove(pack(5, 1, 17, 1, 2)));
        // Everything idle before 50 and not pinned goes.
        let mut gone = 0;
        for _ in 0..10 {
            gone += t.sweep(16, 50);
        }
        // 0..50 less flow 5 (removed) and the pinned 0, 10, .., 40.
        assert_eq!(gone, 44);
        for i in 0..100u32 {
            let k = pack(i, 1, 17, 1, 2);
            let want = i != 5 && (i >= 50 || i % 10 == 0);
            assert_eq!(t.get(k).is_some(), want, "flow {i}");
            if let Some(e) = t.get(k) {
                assert_eq!(e.key, k);
                assert_eq!(e.gate, (i % 4) as u16);
            }
        }
        assert_eq!(t.per_gate().iter().sum::<u64>(), t.len() as u64);
        // Gate 2: 54, 58, .., 98 less the pinned 70 and 90 go.
        assert_eq!(t.forget_gate(2), 10);
        assert_eq!(t.per_gate()[2], 5, "the pinned 10, 30, 50, 70, 90 stay");
    }
}
