//! Receive-side scaling (datasheet §7.1.2.8): the Toeplitz hash over the
//! fields MRQC enables, and the redirection table (RETA) lookup.

/// The Toeplitz hash of `input` under `key` (§7.1.2.8.1): for every set
/// bit of the input, XOR in the 32 key bits starting at that bit position.
/// `key` must be at least `input.len() + 4` bytes (the 82599 key is 40).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    // `window` holds key bits [i, i+32) for the current input bit i, with
    // the following key byte waiting in `next`.
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = key.get(i + 4).copied().unwrap_or(0);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | u32::from((next >> (7 - bit)) & 1);
        }
    }
    hash
}

/// RSS types reported in the advanced RX descriptor (§7.1.6.2, "RSS Type").
pub mod rss_type {
    pub const NONE: u8 = 0x0;
    pub const TCP_IPV4: u8 = 0x1;
    pub const IPV4: u8 = 0x2;
    pub const TCP_IPV6: u8 = 0x3;
    pub const IPV6: u8 = 0x5;
    pub const UDP_IPV4: u8 = 0x7;
    pub const UDP_IPV6: u8 = 0x8;
}

/// The 40-byte key from the ten RSSRK registers (RSSRK(0) bits 7:0 is
/// the first key byte, §8.2.3.7.16).
pub fn key_from_registers(rssrk: [u32; 10]) -> [u8; 40] {
    let mut k = [0u8; 40];
    for (i, w) in rssrk.iter().enumerate() {
        k[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    k
}

/// The RSS output index from RETA for `hash`: entry `hash[6:0]` of the
/// 128-entry table, each entry one byte of RETA(n) (§8.2.3.7.15); the
/// 82599 uses its low 4 bits as the queue index when only RSS is on.
pub fn reta_lookup(reta: impl Fn(usize) -> u32, hash: u32) -> u16 {
    let e = (hash & 0x7F) as usize;
    let word = reta(e / 4);
    ((word >> (8 * (e % 4))) & 0xF) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of Microsoft's "Verifying the RSS Hash Calculation" page.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    fn input(src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        if let Some((s, d)) = ports {
            v.extend_from_slice(&s.to_be_bytes());
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    /// (source, destination, IPv4-only hash, IPv4+TCP hash) from Microsoft's
    /// verification table.
    #[allow(clippy::type_complexity)]
    const VECTORS: &[([u8; 4], u16, [u8; 4], u16, u32, u32)] = &[
        (
            [66, 9, 149, 187],
            2794,
            [161, 142, 100, 80],
            1766,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [199, 92, 111, 2],
            14230,
            [65, 69, 140, 83],
            4739,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [24, 19, 198, 95],
            12898,
            [12, 22, 207, 184],
            38024,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [38, 27, 205, 30],
            48228,
            [209, 142, 163, 6],
            2217,
            0x82989176,
            0xafc7327f,
        ),
        (
            [153, 39, 163, 191],
            44251,
            [202, 188, 127, 2],
            1303,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn microsoft_rss_verification_vectors_ipv4() {
        for &(src, sport, dst, dport, ip, tcp) in VECTORS {
            assert_eq!(
                toeplitz(&MS_KEY, &input(src, dst, None)),
                ip,
                "IPv4 {src:?} -> {dst:?}"
            );
            assert_eq!(
                toeplitz(&MS_KEY, &input(src, dst, Some((sport, dport)))),
                tcp,
                "TCP {src:?} -> {dst:?}"
            );
        }
    }

    #[test]
    fn key_bytes_come_from_rssrk_little_endian() {
        let mut regs = [0u32; 10];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = u32::from_le_bytes(MS_KEY[4 * i..4 * i + 4].try_into().unwrap());
        }
        assert_eq!(key_from_registers(regs), MS_KEY);
    }

    #[test]
    fn reta_entries_are_bytes_low_nibble() {
        let reta = |n: usize| if n == 1 { 0x0F03_0201 } else { 0 };
        assert_eq!(reta_lookup(reta, 4), 1);
        assert_eq!(reta_lookup(reta, 5), 2);
        assert_eq!(
            reta_lookup(reta, 0x80 | 6),
            3,
            "only hash bits 6:0 index RETA"
        );
        assert_eq!(reta_lookup(reta, 7), 15);
    }
}
