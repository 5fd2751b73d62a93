//! Per-packet metadata attributes and their offset allocator.
//!
//! Modules declare attributes by name, size and access ([`AttrSpec`]).
//! When the pipeline is committed, [`assign_offsets`] gives every
//! attribute of every module a fixed offset in the packet's 128-byte
//! metadata area ([`nfkit_hw::pool::META_SIZE`]), so the data path never
//! looks a name up.
//!
//! How offsets are chosen (the idea is SoftNIC's §3.3/§4.5; this is our
//! own formulation):
//!
//! 1. A *value* of attribute `a` is born at a module that writes `a` and
//!    flows downstream until a module writes `a` again. The modules that
//!    read (or update) `a` on the way are the value's readers. The
//!    value's *lifetime* is the set of modules on some path from the
//!    writer to one of its readers.
//! 2. Writers that reach a common reader must agree on the location;
//!    a union-find groups them, with their readers, into *components*.
//! 3. Two components *conflict* if their lifetimes share a module (both
//!    values are alive there). Components that do not conflict may use
//!    the same bytes.
//! 4. Components are placed greedily, most conflicted first, at the
//!    lowest offset aligned to the size's next power of two that no
//!    already-placed conflicting component uses.
//!
//! A reader that no writer reaches is a configuration error naming the
//! reader and the attribute; a component that does not fit is an error
//! naming the attribute. A writer whose value nobody reads gets no space
//! (its writes are skipped).

pub use nfkit_hw::pool::META_SIZE;
/// Bytes of per-packet metadata (the pool's metadata area).
pub const META_SIZE_BYTES: usize = META_SIZE;
use nfkit_hw::PktBuf;
use std::collections::BTreeMap;

/// Largest attribute, in bytes.
pub const MAX_ATTR_SIZE: usize = 32;

/// How a module uses an attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    /// Read, then write back (needs an upstream writer).
    Update,
}

impl Access {
    fn reads(self) -> bool {
        matches!(self, Access::Read | Access::Update)
    }
    fn writes(self) -> bool {
        matches!(self, Access::Write | Access::Update)
    }
}

/// One attribute a module declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: String,
    pub size: usize,
    pub access: Access,
}

impl AttrSpec {
    pub fn new(name: impl Into<String>, size: usize, access: Access) -> AttrSpec {
        AttrSpec {
            name: name.into(),
            size,
            access,
        }
    }
}

/// A resolved attribute: where a module finds it in the metadata area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    offset: u8,
    size: u8,
    live: bool,
}

impl Attr {
    /// An attribute nobody downstream reads: writes are skipped, reads
    /// return zeros.
    pub const UNUSED: Attr = Attr {
        offset: 0,
        size: 0,
        live: false,
    };

    /// An attribute at a fixed place (for harnesses and tests).
    pub fn at(offset: usize, size: usize) -> Attr {
        assert!(offset + size <= META_SIZE && size <= MAX_ATTR_SIZE);
        Attr {
            offset: offset as u8,
            size: size as u8,
            live: true,
        }
    }

    pub fn offset(&self) -> Option<usize> {
        self.live.then_some(self.offset as usize)
    }
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// The attribute's bytes in `pkt`.
    #[inline(always)]
    pub fn bytes<'p>(&self, pkt: &'p PktBuf) -> &'p [u8] {
        let o = self.offset as usize;
        &pkt.metadata()[o..o + self.size as usize]
    }

    /// Copy `value` (truncated or zero-padded to the size) into `pkt`.
    #[inline(always)]
    pub fn set_bytes(&self, pkt: &mut PktBuf, value: &[u8]) {
        if !self.live {
            return;
        }
        let o = self.offset as usize;
        let dst = &mut pkt.metadata_mut()[o..o + self.size as usize];
        let n = value.len().min(dst.len());
        dst[..n].copy_from_slice(&value[..n]);
        dst[n..].fill(0);
    }

    /// The attribute as an unsigned integer (little-endian, at most 8 bytes).
    #[inline(always)]
    pub fn get_u64(&self, pkt: &PktBuf) -> u64 {
        let mut b = [0u8; 8];
        let src = self.bytes(pkt);
        let n = src.len().min(8);
        b[..n].copy_from_slice(&src[..n]);
        u64::from_le_bytes(b)
    }

    /// Store an unsigned integer (little-endian, truncated to the size).
    #[inline(always)]
    pub fn set_u64(&self, pkt: &mut PktBuf, v: u64) {
        self.set_bytes(pkt, &v.to_le_bytes()[..(self.size as usize).min(8)]);
    }
}

/// Errors from placing attributes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("module `{module}` reads attribute `{attr}`, but no upstream module writes it (no upstream writer)")]
    NoWriter { module: String, attr: String },
    #[error("attribute `{attr}` is {size_a} bytes in module `{module_a}` but {size_b} bytes in module `{module_b}`")]
    SizeMismatch {
        attr: String,
        module_a: String,
        size_a: usize,
        module_b: String,
        size_b: usize,
    },
    #[error("module `{module}`: attribute `{attr}` has size {size}; sizes are 1 to {MAX_ATTR_SIZE} bytes")]
    BadSize {
        module: String,
        attr: String,
        size: usize,
    },
    #[error("out of metadata space: attribute `{attr}` ({size} bytes, written by `{module}`) does not fit in the {META_SIZE}-byte metadata area beside the attributes alive at the same time ({live})")]
    NoSpace {
        attr: String,
        size: usize,
        module: String,
        live: String,
    },
}

/// One module as the allocator sees it.
#[derive(Debug, Clone)]
pub struct MetaNode {
    pub name: String,
    pub attrs: Vec<AttrSpec>,
    /// Modules this one's output gates lead to.
    pub next: Vec<usize>,
}

/// Offsets for every node's attributes, in declaration order.
pub fn assign_offsets(nodes: &[MetaNode]) -> Result<Vec<Vec<Attr>>, MetadataError> {
    assign_offsets_with(nodes, false)
}

/// [`assign_offsets`]; with `unwritten_reads_ok`, a module that only
/// reads an attribute no upstream module writes is not an error: its
/// reads see zero ([`Attr::UNUSED`]), as BESS lets a graph being built
/// module by module have such readers for a while.
pub fn assign_offsets_with(
    nodes: &[MetaNode],
    unwritten_reads_ok: bool,
) -> Result<Vec<Vec<Attr>>, MetadataError> {
    let sizes = check_sizes(nodes)?;
    let mut comps = Vec::new();
    // (node, attr index) -> component index
    let mut member: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (attr, &size) in &sizes {
        for c in components_of(nodes, attr, size, unwritten_reads_ok)? {
            for &(n, i) in &c.members {
                member.insert((n, i), comps.len());
            }
            comps.push(c);
        }
    }
    let offsets = place(nodes, &comps)?;
    Ok(nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            (0..node.attrs.len())
                .map(|i| {
                    match member
                        .get(&(n, i))
                        .and_then(|&c| offsets[c].map(|o| (o, &comps[c])))
                    {
                        Some((o, c)) => Attr {
                            offset: o as u8,
                            size: c.size as u8,
                            live: true,
                        },
                        None => Attr::UNUSED,
                    }
                })
                .collect()
        })
        .collect())
}

fn check_sizes(nodes: &[MetaNode]) -> Result<BTreeMap<String, usize>, MetadataError> {
    let mut sizes: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (n, node) in nodes.iter().enumerate() {
        for a in &node.attrs {
            if a.size == 0 || a.size > MAX_ATTR_SIZE {
                return Err(MetadataError::BadSize {
                    module: node.name.clone(),
                    attr: a.name.clone(),
                    size: a.size,
                });
            }
            let &mut (size, first) = sizes.entry(a.name.clone()).or_insert((a.size, n));
            if size != a.size {
                return Err(MetadataError::SizeMismatch {
                    attr: a.name.clone(),
                    module_a: nodes[first].name.clone(),
                    size_a: size,
                    module_b: node.name.clone(),
                    size_b: a.size,
                });
            }
        }
    }
    Ok(sizes.into_iter().map(|(k, (s, _))| (k, s)).collect())
}

/// A set of nodes as a bitset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeSet(Vec<u64>);

impl NodeSet {
    fn new(n: usize) -> NodeSet {
        NodeSet(vec![0; n.div_ceil(64)])
    }
    fn insert(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let fresh = self.0[w] & b == 0;
        self.0[w] |= b;
        fresh
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
    fn union(&mut self, o: &NodeSet) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }
    fn meets(&self, o: &NodeSet) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }
}

/// One group of writers and readers that share a location.
#[derive(Debug)]
struct Component {
    attr: String,
    size: usize,
    /// (node, index of the attribute in the node's list)
    members: Vec<(usize, usize)>,
    /// First writer, for messages.
    writer: usize,
    /// Empty when nobody reads the value.
    lifetime: Option<NodeSet>,
}

/// The components of one attribute.
fn components_of(
    nodes: &[MetaNode],
    attr: &str,
    size: usize,
    unwritten_reads_ok: bool,
) -> Result<Vec<Component>, MetadataError> {
    let access = |n: usize| {
        nodes[n]
            .attrs
            .iter()
            .position(|a| a.name == attr)
            .map(|i| (i, nodes[n].attrs[i].access))
    };
    let users: Vec<usize> = (0..nodes.len()).filter(|&n| access(n).is_some()).collect();
    let mut uf = UnionFind::new(nodes.len());
    let mut reached = NodeSet::new(nodes.len());
    let mut lifetimes: BTreeMap<usize, NodeSet> = BTreeMap::new();
    for &w in users
        .iter()
        .filter(|&&n| access(n).is_some_and(|(_, a)| a.writes()))
    {
        let (readers, life) = trace_value(nodes, w, |n| access(n).map(|(_, a)| a));
        for &r in &readers {
            uf.union(w, r);
            reached.insert(r);
        }
        if !readers.is_empty() {
            lifetimes.insert(w, life);
        }
    }
    let unwritten = |n: usize| access(n).is_some_and(|(_, a)| a.reads()) && !reached.contains(n);
    let mut users = users;
    if unwritten_reads_ok {
        // Pure readers nobody writes for get no offset (read as zero).
        users.retain(|&n| !unwritten(n) || access(n).is_some_and(|(_, a)| a.writes()));
    }
    if let Some(&r) = users.iter().find(|&&n| unwritten(n)) {
        return Err(MetadataError::NoWriter {
            module: nodes[r].name.clone(),
            attr: attr.to_string(),
        });
    }
    let mut by_root: BTreeMap<usize, Component> = BTreeMap::new();
    for &n in &users {
        let c = by_root.entry(uf.find(n)).or_insert_with(|| Component {
            attr: attr.to_string(),
            size,
            members: Vec::new(),
            writer: n,
            lifetime: None,
        });
        c.members.push((n, access(n).map(|(i, _)| i).unwrap_or(0)));
        if let Some(life) = lifetimes.get(&n) {
            match &mut c.lifetime {
                Some(l) => l.union(life),
                None => {
                    c.writer = n;
                    c.lifetime = Some(life.clone());
                }
            }
        }
    }
    Ok(by_root.into_values().collect())
}

/// Follow the value written at `w` downstream. Returns the readers it
/// reaches and the modules on paths from `w` to them.
fn trace_value(
    nodes: &[MetaNode],
    w: usize,
    access: impl Fn(usize) -> Option<Access>,
) -> (Vec<usize>, NodeSet) {
    let n = nodes.len();
    let mut seen = NodeSet::new(n);
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut readers = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for &s in &nodes[w].next {
        preds[s].push(w);
        if seen.insert(s) {
            stack.push(s);
        }
    }
    while let Some(u) = stack.pop() {
        let a = access(u);
        if a.is_some_and(Access::reads) {
            readers.push(u);
        }
        if a.is_some_and(Access::writes) {
            continue; // a new value starts here
        }
        for &s in &nodes[u].next {
            preds[s].push(u);
            if seen.insert(s) {
                stack.push(s);
            }
        }
    }
    // Walk back from the readers along the edges just followed.
    let mut life = NodeSet::new(n);
    life.insert(w);
    let mut back: Vec<usize> = readers.clone();
    for &r in &readers {
        life.insert(r);
    }
    while let Some(u) = back.pop() {
        for &p in &preds[u] {
            if life.insert(p) {
                back.push(p);
            }
        }
    }
    readers.sort_unstable();
    (readers, life)
}

fn place(nodes: &[MetaNode], comps: &[Component]) -> Result<Vec<Option<usize>>, MetadataError> {
    let live: Vec<usize> = (0..comps.len())
        .filter(|&c| comps[c].lifetime.is_some())
        .collect();
    let conflicts = |a: usize, b: usize| match (&comps[a].lifetime, &comps[b].lifetime) {
        (Some(x), Some(y)) => a != b && x.meets(y),
        _ => false,
    };
    let degree: Vec<usize> = (0..comps.len())
        .map(|c| live.iter().filter(|&&o| conflicts(c, o)).count())
        .collect();
    let mut order = live.clone();
    order.sort_by(|&a, &b| {
        degree[b]
            .cmp(&degree[a])
            .then(comps[b].size.cmp(&comps[a].size))
            .then(comps[a].attr.cmp(&comps[b].attr))
            .then(comps[a].writer.cmp(&comps[b].writer))
    });
    let mut offsets: Vec<Option<usize>> = vec![None; comps.len()];
    for &c in &order {
        let size = comps[c].size;
        let align = size.next_power_of_two();
        let taken: Vec<(usize, usize)> = order
            .iter()
            .filter(|&&o| conflicts(c, o))
            .filter_map(|&o| offsets[o].map(|off| (off, off + comps[o].size)))
            .collect();
        let spot = (0..=META_SIZE - size)
            .step_by(align)
            .find(|&off| taken.iter().all(|&(s, e)| off + size <= s || off >= e));
        match spot {
            Some(off) => offsets[c] = Some(off),
            None => {
                let mut names: Vec<String> = order
                    .iter()
                    .filter(|&&o| conflicts(c, o) && offsets[o].is_some())
                    .map(|&o| format!("{}:{}", comps[o].attr, comps[o].size))
                    .collect();
                names.dedup();
                return Err(MetadataError::NoSpace {
                    attr: comps[c].attr.clone(),
                    size,
                    module: nodes[comps[c].writer].name.clone(),
                    live: names.join(", "),
                });
            }
        }
    }
    Ok(offsets)
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn new(n: usize) -> UnionFind {
        UnionFind((0..n).collect())
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}
