//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! A checksum is the one's complement of the one's complement sum of the
//! 16-bit big-endian words of the data. [`Sum`] is the running sum, kept
//! wide (u64) so that folding the carries happens once, at the end.

/// A running one's complement sum of 16-bit big-endian words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum(u64);

impl Sum {
    pub const ZERO: Sum = Sum(0);

    /// Add `data`; an odd final byte is padded with a zero byte (RFC 1071 §4.1).
    /// Successive calls must add even-length chunks except possibly the last.
    #[inline]
    pub fn add_bytes(self, data: &[u8]) -> Sum {
        let mut acc = self.0;
        let mut words = data.chunks_exact(4);
        for w in &mut words {
            acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        }
        let rest = words.remainder();
        let mut pairs = rest.chunks_exact(2);
        for p in &mut pairs {
            acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
        }
        if let [last] = pairs.remainder() {
            acc += u64::from(*last) << 8;
        }
        Sum(acc)
    }

    #[inline]
    pub fn add_u16(self, v: u16) -> Sum {
        Sum(self.0 + u64::from(v))
    }

    #[inline]
    pub fn add_u32(self, v: u32) -> Sum {
        Sum(self.0 + u64::from(v >> 16) + u64::from(v & 0xffff))
    }

    /// The sum folded to 16 bits (end-around carry).
    #[inline]
    pub fn fold(self) -> u16 {
        let mut s = self.0;
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The checksum field value: the complement of the folded sum.
    #[inline]
    pub fn checksum(self) -> u16 {
        !self.fold()
    }
}

/// Copy `src` into `dst` (the same length) and return `src`'s sum, in
/// one pass over the bytes (TSO's segment payloads: each byte is read
/// once, for the copy and the checksum alike). The words are added in
/// the machine's byte order and the folded sum swapped once at the end
/// (RFC 1071 §2(B): the sum is independent of byte order).
#[inline]
pub fn copy_sum(dst: &mut [u8], src: &[u8]) -> Sum {
    assert_eq!(dst.len(), src.len(), "copy_sum: lengths differ");
    let mut acc = 0u64;
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let mut w = [0u8; 8];
        w.copy_from_slice(sc);
        dc.copy_from_slice(&w);
        let v = u64::from_ne_bytes(w);
        acc += (v & 0xffff_ffff) + (v >> 32);
    }
    let tail = s.remainder();
    d.into_remainder().copy_from_slice(tail);
    let folded = Sum(acc).fold();
    let be = if cfg!(target_endian = "little") {
        folded.swap_bytes()
    } else {
        folded
    };
    Sum::ZERO.add_u16(be).add_bytes(tail)
}

/// RFC 1071 checksum of `data` (for example an IPv4 header with its
/// checksum field zeroed). Over data that includes a correct checksum
/// field, the result is 0.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    Sum::ZERO.add_bytes(data).checksum()
}

/// The sum of the IPv4 pseudo-header used by TCP and UDP (RFC 793 §3.1,
/// RFC 768): source, destination, zero+protocol, L4 length.
#[inline]
pub fn pseudo_header(src: [u8; 4], dst: [u8; 4], proto: u8, l4_len: u16) -> Sum {
    Sum::ZERO
        .add_u32(u32::from_be_bytes(src))
        .add_u32(u32::from_be_bytes(dst))
        .add_u16(u16::from(proto))
        .add_u16(l4_len)
}

/// TCP or UDP checksum over `segment` (header with its checksum field
/// zeroed, plus payload) for an IPv4 flow.
pub fn l4_checksum(src: [u8; 4], dst: [u8; 4], proto: u8, segment: &[u8]) -> u16 {
    pseudo_header(src, dst, proto, segment.len() as u16)
        .add_bytes(segment)
        .checksum()
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered
/// data changes from `old` to `new`: HC' = ~(~HC + ~m + m').
///
/// Unlike eqn. 2 this never produces the "negative zero" 0xFFFF
/// for a header that sums to zero.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    let s = Sum(u64::from(!csum) + u64::from(!old) + u64::from(new));
    !s.fold()
}

/// [`update16`] for a 32-bit field (an IPv4 address), word by word.
#[inline]
pub fn update32(csum: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    let c = update16(
        csum,
        u16::from_be_bytes([old[0], old[1]]),
        u16::from_be_bytes([new[0], new[1]]),
    );
    update16(
        c,
        u16::from_be_bytes([old[2], old[3]]),
        u16::from_be_bytes([new[2], new[3]]),
    )
}

/// [`update16`] for a field of even length that starts at an even offset
/// of the covered data.
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    let mut s = Sum(u64::from(!csum));
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        s = s
            .add_u16(!u16::from_be_bytes([o[0], o[1]]))
            .add_u16(u16::from_be_bytes([n[0], n[1]]));
    }
    !s.fold()
}

/// The UDP rule (RFC 768): a transmitted checksum of 0 means "none", so a
/// computed 0 is sent as 0xFFFF; and a packet without checksum keeps none.
#[inline]
pub fn udp_update16(csum: u16, old: u16, new: u16) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update16(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// [`udp_update16`] for an IPv4 address.
#[inline]
pub fn udp_update32(csum: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update32(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 numerical example: words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::ZERO.add_bytes(&data).fold(), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn copy_sum_copies_and_sums_like_add_bytes() {
        let src: Vec<u8> = (0..1500u32).map(|i| (i * 131 + 7) as u8).collect();
        for len in [0, 1, 7, 8, 9, 63, 1448, 1499, 1500] {
            let mut dst = vec![0u8; len];
            let s = copy_sum(&mut dst, &src[..len]);
            assert_eq!(dst, src[..len]);
            assert_eq!(s.fold(), Sum::ZERO.add_bytes(&src[..len]).fold(), "{len}");
        }
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0x12]), checksum(&[0x12, 0x00]));
    }

    #[test]
    fn rfc1624_example() {
        // RFC 1624 §4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives 0x0000 (eqn. 3).
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    proptest::proptest! {
        #[test]
        fn incremental_equals_recomputed(mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 2..64),
                                         idx in 0usize..32, new in proptest::prelude::any::<u16>()) {
            if data.len() % 2 == 1 { data.push(0); }
            let i = (idx * 2) % data.len();
            let before = checksum(&data);
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = checksum(&data);
            let inc = update16(before, old, new);
            // Both are valid representations; they agree unless the sum is zero
            // (0x0000 vs 0xFFFF), which verification accepts either way.
            proptest::prop_assert!(inc == after || (inc ^ after) == 0xffff && (inc == 0 || after == 0));
            proptest::prop_assert_eq!(Sum::ZERO.add_bytes(&data).add_u16(inc).fold() , 0xffff);
        }
    }
}
