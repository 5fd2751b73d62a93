//! Maglev consistent hashing (Eisenbud et al., NSDI'16, §3.4).
//!
//! Each backend has a permutation of the `M` table slots (M prime),
//! `offset + j·skip mod M`; backends take turns claiming their next
//! unclaimed preferred slot until the table is full. Each backend gets
//! M/N slots ±1, and removing a backend changes few slots besides its own.
//! A flow's backend is `table[hash(flow) mod M]`.
//!
//! Building is allocation-free (buffers sized at construction), so a
//! backend appearing or disappearing can rebuild on the data path.

use crate::config::ConfigError;

/// No backend (empty set).
pub const EMPTY: u16 = u16::MAX;

/// A backend's permutation of table slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    pub offset: u64,
    pub skip: u64,
}

impl Permutation {
    /// The paper's offset = h1 mod M, skip = h2 mod (M−1) + 1, from two
    /// independent hashes of the backend's name.
    pub fn new(h1: u64, h2: u64, m: usize) -> Permutation {
        let m = m as u64;
        Permutation {
            offset: h1 % m,
            skip: h2 % (m - 1) + 1,
        }
    }
}

/// A Maglev lookup table of prime size with room for `max_backends`.
pub struct MaglevTable {
    table: Vec<u16>,
    /// Per backend: how far along its permutation it is (fill scratch).
    next: Vec<u64>,
}

pub fn is_prime(n: usize) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// The largest table size taken: a prime below 2^22. A build (at start
/// and at every backend change, on the data path) walks the whole table,
/// about M·ln M steps; the paper uses 65537 and 655373.
pub const MAX_TABLE_SIZE: usize = 4_194_301;

impl MaglevTable {
    /// `size` must be a prime larger than `max_backends`, at most
    /// [`MAX_TABLE_SIZE`] (checked first: testing a huge number for
    /// primality takes long by itself).
    pub fn new(size: usize, max_backends: usize) -> Result<MaglevTable, ConfigError> {
        if size > MAX_TABLE_SIZE {
            return Err(ConfigError::TableTooLarge(size));
        }
        if !is_prime(size) || size <= max_backends || max_backends >= usize::from(EMPTY) {
            return Err(ConfigError::BadTableSize(size, max_backends));
        }
        Ok(MaglevTable {
            table: vec![EMPTY; size],
            next: vec![0; max_backends],
        })
    }

    pub fn size(&self) -> usize {
        self.table.len()
    }

    /// The slots, each a backend id or [`EMPTY`].
    pub fn slots(&self) -> &[u16] {
        &self.table
    }

    /// Refill from `backends`, (id, permutation) pairs in a fixed order
    /// (the order breaks ties, so every LB instance must use the same).
    /// At most `max_backends` are used.
    pub fn populate(&mut self, backends: &[(u16, Permutation)]) {
        self.table.fill(EMPTY);
        let backends = &backends[..backends.len().min(self.next.len())];
        if backends.is_empty() {
            return;
        }
        let m = self.table.len() as u64;
        self.next[..backends.len()].fill(0);
        let mut filled = 0;
        loop {
            for (i, &(id, p)) in backends.iter().enumerate() {
                // Walk this backend's permutation to its next free slot.
                let slot = loop {
                    let j = self.next[i];
                    self.next[i] += 1;
                    let c = ((p.offset + j * p.skip) % m) as usize;
                    if self.table[c] == EMPTY {
                        break c;
                    }
                };
                self.table[slot] = id;
                filled += 1;
                if filled == self.table.len() {
                    return;
                }
            }
        }
    }

    /// The backend of a flow hash, or None if there are no backends.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<u16> {
        let b = self.table[(hash % self.table.len() as u64) as usize];
        (b != EMPTY).then_some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash, Hasher};

    type Oracle = maglev::Maglev<u32, BuildHasherDefault<DefaultHasher>>;

    /// The oracle crate's hash: a u32 seed, then the value.
    fn seeded<T: Hash>(seed: u32, v: &T) -> u64 {
        let mut h = BuildHasherDefault::<DefaultHasher>::default().build_hasher();
        h.write_u32(seed);
        v.hash(&mut h);
        h.finish()
    }

    /// Our table, built with the oracle's permutation hashes, equals the
    /// `maglev` crate's table slot for slot.
    #[test]
    fn matches_maglev_crate() {
        use maglev::ConsistentHasher;
        let sizes = [
            (vec![10u32, 20, 30], 101usize),
            ((0..7).collect(), 701),
            ((100..113).collect(), 1009),
        ];
        // Under miri (about a million times slower), the smallest table.
        let sizes = &sizes[..if cfg!(miri) { 1 } else { 3 }];
        for (nodes, m) in sizes.iter().cloned() {
            let oracle = Oracle::with_capacity(nodes.iter().copied(), m);
            assert_eq!(oracle.capacity(), m);
            let perms: Vec<(u16, Permutation)> = nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    (
                        i as u16,
                        Permutation::new(seeded(0xdeadbabe, &n), seeded(0xdeadbeef, &n), m),
                    )
                })
                .collect();
            let mut t = MaglevTable::new(m, nodes.len()).unwrap();
            t.populate(&perms);
            // The oracle exposes only get(key) = nodes[table[h(key) mod M]];
            // probe with keys until every slot has been compared.
            let mut seen = vec![false; m];
            let mut key = 0u64;
            while seen.iter().any(|s| !s) {
                let slot = (seeded(0xdeadbabe, &key) as usize) % m;
                let ours = nodes[usize::from(t.slots()[slot])];
                assert_eq!(Some(&ours), oracle.get(&key), "slot {slot}");
                seen[slot] = true;
                key += 1;
            }
        }
    }

    #[test]
    fn bad_sizes() {
        assert!(MaglevTable::new(100, 3).is_err());
        assert!(MaglevTable::new(3, 3).is_err());
        // issue 14 item 4: a huge prime built for minutes
        assert!(matches!(
            MaglevTable::new(2_305_843_009_213_693_951, 3),
            Err(ConfigError::TableTooLarge(_))
        ));
        if cfg!(miri) {
            return; // 4 million slots: hours under miri
        }
        let started = std::time::Instant::now();
        let mut t = MaglevTable::new(MAX_TABLE_SIZE, 2).unwrap();
        t.populate(&[
            (0, Permutation::new(7, 11, MAX_TABLE_SIZE)),
            (1, Permutation::new(3, 5, MAX_TABLE_SIZE)),
        ]);
        assert!(t.slots().iter().all(|&s| s != EMPTY));
        eprintln!(
            "Maglev table of {MAX_TABLE_SIZE} built in {:?}",
            started.elapsed()
        );
        assert!(MaglevTable::new(65537, 32).is_ok());
    }
}
