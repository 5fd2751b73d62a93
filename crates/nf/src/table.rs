//! Fixed-capacity flow tables that allocate nothing after construction.
//!
//! Hand-written instead of a `HashMap` because the data path must not
//! allocate, must drop new flows when full (a `HashMap` grows), and must
//! expire idle entries in O(expired): a map of keys to slot numbers
//! ([`KeyIndex`], open addressing, linear probing, backward-shift
//! deletion, at most half full) plus a slot pool kept in least-recently-
//! used order ([`Slots`]), so the oldest entry is always at the head.

use std::net::Ipv4Addr;

use nfkit_packet::{mix, FlowKey, MacAddr};

/// A key of a [`KeyIndex`]: cheap to copy and compare, with a seeded hash.
pub trait TableKey: Copy + Eq + Default {
    fn hash64(&self, seed: u64) -> u64;
}

impl TableKey for FlowKey {
    fn hash64(&self, seed: u64) -> u64 {
        self.hash(seed)
    }
}

impl TableKey for MacAddr {
    fn hash64(&self, seed: u64) -> u64 {
        mix(self.to_u64() ^ seed)
    }
}

/// An IPv4 address as a table key (policer buckets, LB backends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpKey(pub u32);

impl From<Ipv4Addr> for IpKey {
    fn from(a: Ipv4Addr) -> Self {
        IpKey(u32::from(a))
    }
}

impl TableKey for IpKey {
    fn hash64(&self, seed: u64) -> u64 {
        mix(u64::from(self.0) ^ seed)
    }
}

/// Slot number in a [`Slots`] pool.
pub type SlotId = u32;
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Bucket<K> {
    key: K,
    slot: SlotId,
    /// The bucket the key hashes to.
    home: u32,
}

/// A fixed-capacity map from keys to slot numbers.
pub struct KeyIndex<K> {
    buckets: Vec<Bucket<K>>,
    mask: usize,
    seed: u64,
    len: usize,
    capacity: usize,
}

impl<K: TableKey> KeyIndex<K> {
    /// Room for `capacity` keys; the bucket array is at least twice that.
    pub fn new(capacity: usize, seed: u64) -> KeyIndex<K> {
        let n = (capacity.max(1) * 2).next_power_of_two().max(16);
        KeyIndex {
            buckets: vec![
                Bucket {
                    key: K::default(),
                    slot: NONE,
                    home: 0,
                };
                n
            ],
            mask: n - 1,
            seed,
            len: 0,
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn home(&self, k: &K) -> usize {
        (k.hash64(self.seed) as usize) & self.mask
    }

    fn find(&self, k: &K) -> Result<usize, usize> {
        let mut i = self.home(k);
        loop {
            let b = &self.buckets[i];
            if b.slot == NONE {
                return Err(i);
            }
            if b.key == *k {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    pub fn get(&self, k: &K) -> Option<SlotId> {
        self.find(k).ok().map(|i| self.buckets[i].slot)
    }

    /// Insert or replace; false if the index is at capacity.
    pub fn insert(&mut self, k: K, slot: SlotId) -> bool {
        match self.find(&k) {
            Ok(i) => {
                self.buckets[i].slot = slot;
                true
            }
            Err(_) if self.len >= self.capacity => false,
            Err(i) => {
                let home = self.home(&k) as u32;
                self.buckets[i] = Bucket { key: k, slot, home };
                self.len += 1;
                true
            }
        }
    }

    /// Remove `k`; returns its slot. Later entries of the probe run are
    /// shifted back so lookups never need tombstones.
    pub fn remove(&mut self, k: &K) -> Option<SlotId> {
        let mut hole = self.find(k).ok()?;
        let slot = self.buckets[hole].slot;
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let b = self.buckets[j];
            if b.slot == NONE {
                break;
            }
            // Distance from the entry's home to the hole vs. to where it is now:
            // it may move into the hole only if the hole is on its probe path.
            let home = b.home as usize;
            let to_hole = hole.wrapping_sub(home) & self.mask;
            let to_here = j.wrapping_sub(home) & self.mask;
            if to_hole < to_here {
                self.buckets[hole] = b;
                hole = j;
            }
        }
        self.buckets[hole].slot = NONE;
        self.len -= 1;
        Some(slot)
    }
}

struct Entry<V> {
    value: V,
    last_seen: u64,
    prev: SlotId,
    next: SlotId,
    used: bool,
    /// The LRU list the entry is on.
    list: u8,
}

/// A fixed pool of values in least-recently-used order, on one or more
/// LRU lists (one per idle timeout, e.g. the NAT's TCP-established and
/// UDP mappings), so the oldest entry of each list is at its head.
pub struct Slots<V> {
    entries: Vec<Entry<V>>,
    free: Vec<SlotId>,
    /// (head, tail) of each list.
    lists: Vec<(SlotId, SlotId)>,
}

impl<V: Default> Slots<V> {
    /// `capacity` slots on one LRU list.
    pub fn new(capacity: usize) -> Slots<V> {
        Slots::with_lists(capacity, 1)
    }

    /// `capacity` slots on `lists` LRU lists (1 to 256).
    pub fn with_lists(capacity: usize, lists: usize) -> Slots<V> {
        let entries = (0..capacity)
            .map(|_| Entry {
                value: V::default(),
                last_seen: 0,
                prev: NONE,
                next: NONE,
                used: false,
                list: 0,
            })
            .collect();
        Slots {
            entries,
            free: (0..capacity as u32).rev().collect(),
            lists: vec![(NONE, NONE); lists.clamp(1, 256)],
        }
    }
}

impl<V> Slots<V> {
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Take a slot for `value`, newest in LRU order. None when full.
    pub fn alloc(&mut self, value: V, now: u64) -> Option<SlotId> {
        self.alloc_on(0, value, now)
    }

    /// Take a slot for `value`, newest on LRU list `list`. None when full.
    pub fn alloc_on(&mut self, list: u8, value: V, now: u64) -> Option<SlotId> {
        let id = self.free.pop()?;
        let e = &mut self.entries[id as usize];
        e.value = value;
        e.used = true;
        e.last_seen = now;
        e.list = list.min((self.lists.len() - 1) as u8);
        self.push_tail(id);
        Some(id)
    }

    /// Mark `id` used at `now`: it becomes the newest of its list.
    pub fn touch(&mut self, id: SlotId, now: u64) {
        self.unlink(id);
        self.entries[id as usize].last_seen = now;
        self.push_tail(id);
    }

    /// Move `id` to list `list` as its newest entry (last seen: `now`).
    pub fn move_to(&mut self, id: SlotId, list: u8, now: u64) {
        self.unlink(id);
        let e = &mut self.entries[id as usize];
        e.last_seen = now;
        e.list = list.min((self.lists.len() - 1) as u8);
        self.push_tail(id);
    }

    /// The list `id` is on.
    pub fn list_of(&self, id: SlotId) -> u8 {
        self.entries[id as usize].list
    }

    pub fn free(&mut self, id: SlotId) {
        if self.entries[id as usize].used {
            self.unlink(id);
            self.entries[id as usize].used = false;
            self.free.push(id);
        }
    }

    pub fn get(&self, id: SlotId) -> &V {
        &self.entries[id as usize].value
    }

    pub fn get_mut(&mut self, id: SlotId) -> &mut V {
        &mut self.entries[id as usize].value
    }

    pub fn last_seen(&self, id: SlotId) -> u64 {
        self.entries[id as usize].last_seen
    }

    /// The least recently used slot if it has been idle for `timeout` ns or more.
    pub fn oldest_expired(&self, now: u64, timeout: u64) -> Option<SlotId> {
        self.oldest_expired_on(0, now, timeout)
    }

    /// The least recently used slot of list `list` if it has been idle
    /// for `timeout` ns or more.
    pub fn oldest_expired_on(&self, list: u8, now: u64, timeout: u64) -> Option<SlotId> {
        let head = self.lists.get(usize::from(list))?.0;
        if head == NONE {
            return None;
        }
        let e = &self.entries[head as usize];
        (now.saturating_sub(e.last_seen) >= timeout).then_some(head)
    }

    /// Used slots, list by list, oldest first in each.
    pub fn iter(&self) -> impl Iterator<Item = (SlotId, &V)> + '_ {
        let mut list = 0;
        let mut id = self.lists[0].0;
        std::iter::from_fn(move || {
            while id == NONE {
                list += 1;
                id = self.lists.get(list)?.0;
            }
            let cur = id;
            id = self.entries[cur as usize].next;
            Some((cur, &self.entries[cur as usize].value))
        })
    }

    fn unlink(&mut self, id: SlotId) {
        let (prev, next, list) = {
            let e = &self.entries[id as usize];
            (e.prev, e.next, usize::from(e.list))
        };
        if prev == NONE {
            self.lists[list].0 = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NONE {
            self.lists[list].1 = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
    }

    fn push_tail(&mut self, id: SlotId) {
        let list = usize::from(self.entries[id as usize].list);
        let tail = self.lists[list].1;
        let e = &mut self.entries[id as usize];
        e.prev = tail;
        e.next = NONE;
        if tail == NONE {
            self.lists[list].0 = id;
        } else {
            self.entries[tail as usize].next = id;
        }
        self.lists[list].1 = id;
    }
}

/// Why an insert failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

/// A fixed-capacity map with idle expiry: [`KeyIndex`] plus [`Slots`].
pub struct FlowTable<K, V> {
    index: KeyIndex<K>,
    slots: Slots<(K, V)>,
    timeout_ns: u64,
}

impl<K: TableKey, V: Default> FlowTable<K, V> {
    /// `capacity` entries, expired after `timeout_ns` without [`FlowTable::touch`].
    pub fn new(capacity: usize, timeout_ns: u64, seed: u64) -> FlowTable<K, V> {
        FlowTable {
            index: KeyIndex::new(capacity, seed),
            slots: Slots::new(capacity),
            timeout_ns,
        }
    }
}

impl<K: TableKey, V> FlowTable<K, V> {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    pub fn get(&self, k: &K) -> Option<SlotId> {
        self.index.get(k)
    }

    /// Insert `k` (or replace its value if present, making it newest).
    pub fn insert(&mut self, k: K, v: V, now: u64) -> Result<SlotId, TableFull> {
        if let Some(id) = self.index.get(&k) {
            self.slots.get_mut(id).1 = v;
            self.slots.touch(id, now);
            return Ok(id);
        }
        let id = self.slots.alloc((k, v), now).ok_or(TableFull)?;
        if !self.index.insert(k, id) {
            self.slots.free(id);
            return Err(TableFull);
        }
        Ok(id)
    }

    pub fn touch(&mut self, id: SlotId, now: u64) {
        self.slots.touch(id, now);
    }

    pub fn value(&self, id: SlotId) -> &V {
        &self.slots.get(id).1
    }

    pub fn value_mut(&mut self, id: SlotId) -> &mut V {
        &mut self.slots.get_mut(id).1
    }

    pub fn last_seen(&self, id: SlotId) -> u64 {
        self.slots.last_seen(id)
    }

    pub fn remove(&mut self, id: SlotId) {
        let k = self.slots.get(id).0;
        self.index.remove(&k);
        self.slots.free(id);
    }

    /// Remove entries idle for the timeout or longer, calling `gone` for
    /// each; returns how many. Idle entries are at the LRU head, so this
    /// costs O(expired).
    pub fn expire(&mut self, now: u64, mut gone: impl FnMut(&K, &V)) -> u64 {
        let mut n = 0;
        while let Some(id) = self.slots.oldest_expired(now, self.timeout_ns) {
            let (k, v) = self.slots.get(id);
            gone(k, v);
            self.remove(id);
            n += 1;
        }
        n
    }

    /// Entries, oldest first: (key, value, last seen).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V, u64)> + '_ {
        self.slots
            .iter()
            .map(|(id, (k, v))| (k, v, self.slots.last_seen(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Operations per case; under miri (`cargo xtask miri`) enough to
    /// fill the 40-key index and wrap its probe runs, not 400.
    const MAX_OPS: usize = if cfg!(miri) { 80 } else { 400 };

    proptest! {
        /// KeyIndex behaves like a HashMap under inserts and removes,
        /// with a tiny key space so probe runs collide and wrap.
        #[test]
        fn index_matches_hashmap(ops in proptest::collection::vec((any::<bool>(), 0u32..40, any::<u32>()), 1..MAX_OPS)) {
            let mut idx = KeyIndex::<IpKey>::new(40, 7);
            let mut model = HashMap::new();
            for (ins, k, v) in ops {
                if ins {
                    prop_assert!(idx.insert(IpKey(k), v % 1000));
                    model.insert(k, v % 1000);
                } else {
                    prop_assert_eq!(idx.remove(&IpKey(k)), model.remove(&k));
                }
                prop_assert_eq!(idx.len(), model.len());
            }
            for k in 0..40 {
                prop_assert_eq!(idx.get(&IpKey(k)), model.get(&k).copied());
            }
        }
    }

    #[test]
    fn full_table_refuses_and_expiry_frees() {
        let mut t = FlowTable::<IpKey, u8>::new(2, 10, 1);
        assert!(t.insert(IpKey(1), 1, 0).is_ok());
        assert!(t.insert(IpKey(2), 2, 5).is_ok());
        assert_eq!(t.insert(IpKey(3), 3, 6), Err(TableFull));
        let mut gone = Vec::new();
        assert_eq!(t.expire(10, |k, _| gone.push(k.0)), 1);
        assert_eq!(gone, [1]);
        assert!(t.insert(IpKey(3), 3, 10).is_ok());
        let id = t.get(&IpKey(2)).unwrap();
        t.touch(id, 19);
        assert_eq!(t.expire(20, |_, _| {}), 1); // key 3 (seen at 10) goes, key 2 stays
        assert!(t.get(&IpKey(2)).is_some());
        assert!(t.get(&IpKey(3)).is_none());
    }
}
