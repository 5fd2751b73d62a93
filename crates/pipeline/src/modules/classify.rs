//! What the rule-table classifiers share: gate arguments, BESS's
//! `Field`/`FieldData` (where a key field is, and a value for it), the
//! fixed-size key they extract per packet, and a cheap hasher for it.

use crate::args::{ArgError, Args, Value};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, MAX_GATES};
use nfkit_hw::PktBuf;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;

/// The "gate" of a packet that matched nothing and has no default gate.
pub const DROP: u16 = u16::MAX;
/// Most fields in a key (BESS's `MAX_FIELDS`).
pub const MAX_FIELDS: usize = 8;

/// A key: one big-endian value per field, unused fields 0.
pub type Key = [u64; MAX_FIELDS];

/// The number of output gates (`gates=`, default [`MAX_GATES`]).
pub fn gates_arg(args: &mut Args) -> Result<usize, ArgError> {
    args.usize_in("gates", MAX_GATES, 1, MAX_GATES)
}

/// A gate argument that must be below `ogates`; absent is gate 0 (as
/// a BESS message leaves a zero field out).
pub fn gate(args: &mut Args, name: &str, ogates: usize) -> Result<u16, ArgError> {
    let g = args.u64_or(name, 0)?;
    check_gate(name, g, ogates)
}

/// A signed priority: an integer, or a negative one (which BESS's
/// messages carry and the config language writes as a number).
pub fn priority(args: &mut Args, name: &str) -> Result<i64, ArgError> {
    match args.take(name) {
        None => Ok(0),
        Some(Value::Int(v)) => {
            i64::try_from(v).map_err(|_| ArgError::new(name, format!("{v} is too large")))
        }
        Some(Value::Float(f)) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(f as i64),
        Some(v) => Err(ArgError::new(name, format!("`{v}` is not an integer"))),
    }
}

pub fn check_gate(name: &str, g: u64, ogates: usize) -> Result<u16, ArgError> {
    if g >= ogates as u64 {
        return Err(ArgError::new(
            name,
            format!("gate {g} is out of range (the module has {ogates} output gates)"),
        ));
    }
    Ok(g as u16)
}

/// Send `p` to `gate`, or drop it if `gate` is [`DROP`].
#[inline]
pub fn emit_or_drop(ctx: &mut Ctx<'_>, gate: u16, p: PktBuf) {
    if gate == DROP {
        ctx.drop_packet(p);
    } else {
        ctx.emit(gate as usize, p);
    }
}

/// Where one key field is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPos {
    /// Packet bytes at an offset, big-endian.
    Offset(usize),
    /// A metadata attribute (its `n`th among the key's attributes).
    Attr { name: String, index: usize },
}

/// One key field (BESS's `Field`: `offset=N` or `attr_name=NAME`, and
/// `num_bytes=1..8`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub pos: FieldPos,
    pub size: usize,
}

/// The key fields of a classifier.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub fields: Vec<Field>,
    /// Shortest packet holding every offset field.
    min_len: usize,
}

impl Fields {
    /// `fields=[(offset=N | attr_name=NAME, num_bytes=N), ...]`.
    pub fn parse(args: &mut Args) -> Result<Fields, ArgError> {
        let recs = args
            .records("fields")?
            .ok_or_else(|| ArgError::new("fields", "is required"))?;
        if recs.is_empty() || recs.len() > MAX_FIELDS {
            return Err(ArgError::new(
                "fields",
                format!("needs 1 to {MAX_FIELDS} fields, not {}", recs.len()),
            ));
        }
        let mut fields = Vec::new();
        let mut attrs = 0;
        for mut r in recs {
            let wrap = |e: ArgError| ArgError::new("fields", e.to_string());
            let size = r.u64("num_bytes").map_err(wrap)?.unwrap_or(0);
            if !(1..=8).contains(&size) {
                return Err(ArgError::new(
                    "fields",
                    format!("num_bytes {size} is not 1 to 8"),
                ));
            }
            let pos = match (
                r.str("attr_name").map_err(wrap)?,
                r.u64("offset").map_err(wrap)?,
            ) {
                (Some(name), None) => {
                    attrs += 1;
                    FieldPos::Attr {
                        name,
                        index: attrs - 1,
                    }
                }
                // Offset 0 is what a BESS message without either means.
                (None, None) => FieldPos::Offset(0),
                (None, Some(o)) if o <= u16::MAX as u64 => FieldPos::Offset(o as usize),
                (None, Some(o)) => {
                    return Err(ArgError::new(
                        "fields",
                        format!("offset {o} is beyond any packet"),
                    ))
                }
                (Some(_), Some(_)) => {
                    return Err(ArgError::new(
                        "fields",
                        "a field has either offset=N or attr_name=NAME, not both",
                    ))
                }
            };
            r.finish("a field").map_err(wrap)?;
            fields.push(Field {
                pos,
                size: size as usize,
            });
        }
        Ok(Fields::new(fields))
    }

    pub fn new(fields: Vec<Field>) -> Fields {
        let min_len = fields
            .iter()
            .map(|f| match f.pos {
                FieldPos::Offset(o) => o + f.size,
                FieldPos::Attr { .. } => 0,
            })
            .max()
            .unwrap_or(0);
        Fields { fields, min_len }
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The attributes the key reads, in field order.
    pub fn attrs(&self) -> Vec<AttrSpec> {
        self.fields
            .iter()
            .filter_map(|f| match &f.pos {
                FieldPos::Attr { name, .. } => {
                    Some(AttrSpec::new(name.clone(), f.size, Access::Read))
                }
                FieldPos::Offset(_) => None,
            })
            .collect()
    }

    /// The packet's key, or `None` if it is too short for a field.
    #[inline]
    pub fn key(&self, ctx: &Ctx<'_>, p: &PktBuf) -> Option<Key> {
        let data = p.data();
        if data.len() < self.min_len {
            return None;
        }
        let mut key = [0u64; MAX_FIELDS];
        for (k, f) in key.iter_mut().zip(&self.fields) {
            *k = match f.pos {
                FieldPos::Offset(o) => be(&data[o..o + f.size]),
                FieldPos::Attr { index, .. } => ctx.attr(index).get_u64(p),
            };
        }
        Some(key)
    }

    /// A list of values, one per field (BESS's `repeated FieldData`).
    pub fn values(&self, args: &mut Args, name: &str) -> Result<Key, ArgError> {
        let list = match args.take(name) {
            None => return Err(ArgError::new(name, "is required")),
            Some(Value::List(l)) => l,
            Some(v) => vec![v],
        };
        if list.len() != self.fields.len() {
            return Err(ArgError::new(
                name,
                format!("has {} values for {} fields", list.len(), self.fields.len()),
            ));
        }
        let mut key = [0u64; MAX_FIELDS];
        for (i, (v, f)) in list.into_iter().zip(&self.fields).enumerate() {
            key[i] = field_data(name, v, f)?;
        }
        Ok(key)
    }
}

/// Big-endian value of up to 8 bytes.
#[inline(always)]
pub fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |v, &x| v << 8 | x as u64)
}

/// All ones over `size` bytes.
pub fn full_mask(size: usize) -> u64 {
    if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (size * 8)) - 1
    }
}

/// One BESS `FieldData`: an integer (`value_int`), or bytes
/// (`value_bin`: a string or a list of bytes, exactly the field's size,
/// in packet order for an offset field, in memory order for an
/// attribute), or a record holding one of those two.
pub fn field_data(name: &str, v: Value, f: &Field) -> Result<u64, ArgError> {
    let v = match v {
        Value::Map(m) => {
            let mut r = Args::from_value(name, Value::Map(m))?;
            let v = match (r.take("value_int"), r.take("value_bin")) {
                (Some(v), None) => v,
                (None, Some(v @ (Value::Str(_) | Value::List(_)))) => v,
                _ => {
                    return Err(ArgError::new(
                        name,
                        "a field value record needs exactly one of value_int or value_bin",
                    ))
                }
            };
            r.finish("a field value")
                .map_err(|e| ArgError::new(name, e.to_string()))?;
            v
        }
        v => v,
    };
    let bytes: Vec<u8> = match v {
        Value::Int(i) => {
            if i & !full_mask(f.size) != 0 {
                return Err(ArgError::new(
                    name,
                    format!("{i:#x} does not fit in {} bytes", f.size),
                ));
            }
            return Ok(i);
        }
        Value::Str(s) => s.into_bytes(),
        Value::List(l) => l
            .into_iter()
            .map(|b| match b {
                Value::Int(b) if b <= 255 => Ok(b as u8),
                b => Err(ArgError::new(name, format!("`{b}` is not a byte"))),
            })
            .collect::<Result<_, _>>()?,
        v => {
            return Err(ArgError::new(
                name,
                format!("`{v}` is not a field value (an integer or bytes)"),
            ))
        }
    };
    if bytes.len() != f.size {
        return Err(ArgError::new(
            name,
            format!("{} bytes given for a {}-byte field", bytes.len(), f.size),
        ));
    }
    Ok(match f.pos {
        FieldPos::Offset(_) => be(&bytes),
        FieldPos::Attr { .. } => bytes.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64),
    })
}

/// An IPv4 block in CIDR (`10.0.0.0/8`; an address alone is a /32; `""`
/// is everything), as (network, mask). Host bits set are an error.
pub fn cidr(name: &str, s: &str) -> Result<(u32, u32), ArgError> {
    if s.is_empty() {
        return Ok((0, 0));
    }
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (
            a,
            l.parse::<u8>()
                .map_err(|_| ArgError::new(name, format!("`{s}`: bad prefix length `{l}`")))?,
        ),
        None => (s, 32),
    };
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| ArgError::new(name, format!("`{s}`: `{a}` is not an IPv4 address")))?;
    let p = nfkit_nf::Ipv4Prefix::new(addr, len).map_err(|e| ArgError::new(name, e.to_string()))?;
    Ok((u32::from(p.addr), nfkit_nf::Ipv4Prefix::mask(p.len)))
}

/// A MAC address `aa:bb:cc:dd:ee:ff`.
pub fn mac(name: &str, s: &str) -> Result<[u8; 6], ArgError> {
    let mut out = [0u8; 6];
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(ArgError::new(name, format!("`{s}` is not a MAC address")));
    }
    for (o, p) in out.iter_mut().zip(parts) {
        *o = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .ok_or_else(|| ArgError::new(name, format!("`{s}` is not a MAC address")))?;
    }
    Ok(out)
}

/// An IPv4 address argument.
pub fn ipv4(name: &str, s: &str) -> Result<Ipv4Addr, ArgError> {
    s.parse()
        .map_err(|_| ArgError::new(name, format!("`{s}` is not an IPv4 address")))
}

/// FxHash (rustc's): one multiply per word; enough for keys that are
/// not chosen by an attacker who can see the table.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_ne_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.write_u64(be(rest));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

/// Offsets in an Ethernet + IPv4 frame.
pub mod ip {
    pub const ETH_LEN: usize = 14;
    pub const IP_SRC: usize = ETH_LEN + 12;
    pub const IP_DST: usize = ETH_LEN + 16;

    /// The IPv4 header of an Ethernet frame: (header length, protocol),
    /// or `None` for another EtherType, a truncated or bad header.
    #[inline]
    pub fn header(d: &[u8]) -> Option<(usize, u8)> {
        if d.len() < ETH_LEN + 20 || d[12..14] != [0x08, 0x00] || d[ETH_LEN] >> 4 != 4 {
            return None;
        }
        let ihl = ((d[ETH_LEN] & 0x0f) as usize) * 4;
        if ihl < 20 || d.len() < ETH_LEN + ihl {
            return None;
        }
        Some((ihl, d[ETH_LEN + 9]))
    }

    #[inline]
    pub fn addr(d: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
    }

    /// TCP/UDP ports of a first (or only) fragment, if the frame holds them.
    #[inline]
    pub fn ports(d: &[u8], ihl: usize, proto: u8) -> Option<(u16, u16)> {
        let frag = u16::from_be_bytes([d[ETH_LEN + 6], d[ETH_LEN + 7]]) & 0x1fff;
        if !(proto == 6 || proto == 17) || frag != 0 {
            return None;
        }
        let l4 = ETH_LEN + ihl;
        let p = d.get(l4..l4 + 4)?;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    }

    /// Add `old -> new` (16-bit words) to an Internet checksum (RFC 1624).
    #[inline]
    pub fn csum_update(sum: u16, old: u16, new: u16) -> u16 {
        let mut s = (!sum as u32) + (!old as u32 & 0xffff) + new as u32;
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        !(s as u16)
    }

    /// [`csum_update`] for a 32-bit value.
    #[inline]
    pub fn csum_update32(sum: u16, old: u32, new: u32) -> u16 {
        let s = csum_update(sum, (old >> 16) as u16, (new >> 16) as u16);
        csum_update(s, old as u16, new as u16)
    }

    /// The IPv4 header checksum of `h` (its checksum field counted as is).
    pub fn checksum(h: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in h.chunks(2) {
            s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }
}
