//! `null:`: a sink that discards everything sent to it and, with
//! `size=N`, a source of endless N-byte frames, like DPDK's `net_null`:
//! for measuring the overhead of everything else.
//!
//! What a source delivers. Every frame is N bytes long. By default (as
//! `net_null` without `copy=1`) receiving writes nothing into the
//! packet: each buffer of the port's pool is given the UDP frame of
//! [`udp_template`] when the port opens, and a received frame's bytes are
//! whatever its buffer holds when handed out. That is the template
//! unless a user of the buffer changed it on an earlier trip (an NF that
//! rewrote a header, a generator that allocated from the port's pool and
//! wrote its own frame). With `copy=1` every received frame is written
//! from the template, so its bytes are always exactly the template's
//! (DPDK's `copy=1` also copies on transmit; ours does not).
//!
//! A receive call hands out at most [`BURST`] frames (testpmd's default
//! burst, which it asks of `net_null`): the receive path is a cached
//! buffer allocation and a length per packet (plus the copy with
//! `copy=1`). The send path returns a whole batch to a per-port pool
//! cache ([`PoolCache::free_batch`]): no lock per packet, buffers of
//! another port's pool going home under one lock per run of them.

use crate::open::{software_pool, OpenOptions};
use crate::spec::NullSpec;
use crate::{Batch, Mempool, Port, PortError, QueueStats};
use nfkit_hw::PoolCache;

/// Source MAC of null ports (locally administered).
const NULL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Most frames one receive call hands out.
pub const BURST: usize = 32;
/// Buffer ids the port's cache keeps (refills and spills move half).
const CACHE_SIZE: usize = 256;

/// What a null port receives.
#[derive(Debug)]
struct Frames {
    template: Vec<u8>,
    /// Write the template into every frame (`copy=1`).
    copy: bool,
}

pub struct NullPort {
    name: String,
    pool: Mempool,
    cache: PoolCache,
    /// `None`: a sink only.
    frames: Option<Frames>,
    stats: QueueStats,
}

impl NullPort {
    pub fn open(name: &str, spec: &NullSpec, opts: &OpenOptions) -> Result<NullPort, PortError> {
        let pool = software_pool(name, opts.pool_buffers)?;
        let frames = spec.size.map(|size| Frames {
            template: udp_template(size),
            // A frame larger than a buffer is a chain, written each time.
            copy: spec.copy || size > pool.data_room(),
        });
        if let Some(f) = frames.as_ref().filter(|f| !f.copy) {
            fill_pool(&pool, &f.template);
        }
        Ok(NullPort {
            name: name.to_string(),
            cache: pool.cache(CACHE_SIZE),
            pool,
            frames,
            stats: QueueStats::default(),
        })
    }
}

/// Write `template` into every buffer of `pool` (all of them free: the
/// port has just made it).
fn fill_pool(pool: &Mempool, template: &[u8]) {
    let mut bufs = Vec::with_capacity(pool.capacity());
    while let Some(mut b) = pool.alloc() {
        // Cannot fail: the size was checked against the data room.
        let _ = b.copy_from(template);
        bufs.push(b);
    }
}

/// An Ethernet/IPv4/UDP frame of `size` bytes (cut short if smaller than
/// the headers), 10.0.0.1:1024 -> 10.0.0.2:1024, valid IPv4 checksum.
pub fn udp_template(size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size.max(42)];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&NULL_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let csum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&1024u16.to_be_bytes());
    udp[2..4].copy_from_slice(&1024u16.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f.truncate(size);
    f
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Port for NullPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let Some(f) = &self.frames else { return 0 };
        let len = f.template.len();
        let want = batch.room().min(BURST);
        let mut n = 0;
        let jumbo = len > self.pool.data_room();
        while n < want {
            if jumbo {
                // A jumbo source: a chain per frame. No buffer is
                // back-pressure, as below.
                let Ok(b) = self.pool.alloc_frame(&f.template) else {
                    break;
                };
                let _ = batch.push(b);
                n += 1;
                continue;
            }
            // Each handle built in one piece (`PoolCache::alloc_received`
            // says why). Neither push can fail: the size was checked
            // against the data room, and the batch has room.
            let b = if f.copy {
                self.cache.alloc_copy(&f.template)
            } else {
                self.cache.alloc_received(len)
            };
            let Some(b) = b else {
                // Every buffer is in flight: a source cannot drop what it
                // never made, so this is back-pressure, not a loss.
                break;
            };
            let _ = batch.push(b);
            n += 1;
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += (n * len) as u64;
        n
    }

    fn tx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let n = batch.len();
        // Summed over first segments (one vectorized pass), the chains'
        // other bytes only when there are chains.
        let mut bytes: usize = batch.iter().map(|b| b.len()).sum();
        if batch.any_chained() {
            bytes += batch.iter().map(|b| b.pkt_len() - b.len()).sum::<usize>();
        }
        self.cache.free_batch(batch);
        self.stats.tx_packets += n as u64;
        self.stats.tx_bytes += bytes as u64;
        n
    }

    fn tx_refused(&mut self, _queue: usize, n: u64) {
        self.stats.tx_dropped += n;
    }

    fn queue_stats(&self, _queue: usize) -> QueueStats {
        self.stats
    }

    fn mac(&self) -> [u8; 6] {
        NULL_MAC
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn max_frame(&self) -> usize {
        nfkit_hw::MAX_FRAME
    }

    fn tx_chains(&self) -> bool {
        true
    }

    fn rx_done(&self) -> bool {
        self.frames.is_none()
    }
    fn rx_wake(&self, _queue: usize) -> crate::RxWake {
        // A sink never receives; a source always has a frame (a loop on
        // it never goes idle).
        if self.frames.is_none() {
            crate::RxWake::Never
        } else {
            crate::RxWake::Poll
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(copy: bool) -> NullPort {
        let spec = NullSpec {
            size: Some(64),
            copy,
        };
        NullPort::open("null:size=64", &spec, &OpenOptions::default()).unwrap()
    }

    #[test]
    fn source_and_sink() {
        let mut p = source(false);
        let mut b = Batch::new();
        assert_eq!(p.rx_batch(0, &mut b), BURST, "one burst a call");
        assert!(b
            .iter()
            .all(|x| x.len() == 64 && x.data() == udp_template(64)));
        assert_eq!(
            ipv4_checksum(&b[0].data()[14..34]),
            0,
            "header checksum verifies"
        );
        assert_eq!(p.tx_batch(0, &mut b), BURST);
        assert!(b.is_empty());
        let s = p.stats();
        assert_eq!(
            (s.rx_packets, s.tx_packets, s.rx_bytes, s.tx_bytes),
            (32, 32, 32 * 64, 32 * 64)
        );
        assert!(!p.rx_done());

        let mut sink =
            NullPort::open("null:", &NullSpec::default(), &OpenOptions::default()).unwrap();
        assert_eq!(sink.rx_batch(0, &mut b), 0);
        assert!(sink.rx_done());
    }

    /// Without `copy=1` a frame holds what its buffer's last user left;
    /// with it, always the template.
    #[test]
    fn frames_hold_the_template_or_what_the_last_user_wrote() {
        for copy in [false, true] {
            let mut p = source(copy);
            let pool_size = p.pool().capacity();
            let mut seen = 0;
            let mut b = Batch::new();
            // Scribble on every buffer once, and see each come back.
            while seen < 2 * pool_size {
                p.rx_batch(0, &mut b);
                for x in b.iter_mut() {
                    let fresh = x.data() == udp_template(64);
                    assert!(fresh || (!copy && x.data()[0] == 0xee), "copy={copy}");
                    x.data_mut()[0] = 0xee;
                }
                seen += b.len();
                p.tx_batch(0, &mut b);
            }
        }
    }

    #[test]
    fn buffers_of_another_port_go_home() {
        let mut a = source(false);
        let mut sink =
            NullPort::open("null:", &NullSpec::default(), &OpenOptions::default()).unwrap();
        let mut b = Batch::new();
        for _ in 0..1000 {
            a.rx_batch(0, &mut b);
            sink.tx_batch(0, &mut b);
        }
        assert_eq!(sink.stats().tx_packets, 1000 * BURST as u64);
        let pool = a.pool().clone();
        drop(a);
        assert_eq!(pool.free_count(), pool.capacity(), "none kept by the sink");
    }

    #[test]
    fn tiny_frames_are_cut_from_the_template() {
        assert_eq!(udp_template(14).len(), 14);
        assert_eq!(udp_template(1500).len(), 1500);
    }
}
