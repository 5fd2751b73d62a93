//! `null:`: a sink that discards everything sent to it and, with
//! `size=N`, a source of endless N-byte frames copied from one template
//! built at open. For measuring the overhead of everything else: the
//! receive path is a cached buffer allocation plus one small copy, the
//! send path returns buffers to a per-port cache.

use crate::open::{software_pool, OpenOptions};
use crate::spec::NullSpec;
use crate::{Batch, Mempool, Port, PortError, QueueStats};
use nfkit_hw::PoolCache;

/// Source MAC of null ports (locally administered).
const NULL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

pub struct NullPort {
    name: String,
    pool: Mempool,
    cache: PoolCache,
    template: Option<Vec<u8>>,
    stats: QueueStats,
}

impl NullPort {
    pub fn open(name: &str, spec: &NullSpec, opts: &OpenOptions) -> Result<NullPort, PortError> {
        let pool = software_pool(name, opts.pool_buffers)?;
        if let Some(size) = spec.size {
            if size > pool.data_room() {
                return Err(PortError::config(
                    name,
                    format!(
                        "size={size} is larger than a buffer ({} bytes)",
                        pool.data_room()
                    ),
                ));
            }
        }
        Ok(NullPort {
            name: name.to_string(),
            cache: pool.cache(64),
            pool,
            template: spec.size.map(udp_template),
            stats: QueueStats::default(),
        })
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
        let Some(t) = &self.template else { return 0 };
        let mut n = 0;
        while !batch.is_full() {
            let Some(mut b) = self.cache.alloc() else {
                // Every buffer is in flight: a source cannot drop what it
                // never made, so this is back-pressure, not a loss.
                break;
            };
            // Cannot fail: the size was checked against the data room.
            let _ = b.copy_from(t);
            batch.push(b);
            n += 1;
        }
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += (n * t.len()) as u64;
        n
    }

    fn tx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let n = batch.len();
        for b in batch.drain() {
            self.stats.tx_bytes += b.len() as u64;
            self.cache.free(b);
        }
        self.stats.tx_packets += n as u64;
        n
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

    fn rx_done(&self) -> bool {
        self.template.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_and_sink() {
        let spec = NullSpec { size: Some(64) };
        let mut p = NullPort::open("null:size=64", &spec, &OpenOptions::default()).unwrap();
        let mut b = Batch::new();
        assert_eq!(p.rx_batch(0, &mut b), 64);
        assert!(b
            .iter()
            .all(|x| x.len() == 64 && x.data()[12..14] == [8, 0]));
        assert_eq!(
            ipv4_checksum(&b[0].data()[14..34]),
            0,
            "header checksum verifies"
        );
        assert_eq!(p.tx_batch(0, &mut b), 64);
        assert!(b.is_empty());
        let s = p.stats();
        assert_eq!((s.rx_packets, s.tx_packets, s.rx_bytes), (64, 64, 64 * 64));
        assert!(!p.rx_done());

        let mut sink =
            NullPort::open("null:", &NullSpec::default(), &OpenOptions::default()).unwrap();
        assert_eq!(sink.rx_batch(0, &mut b), 0);
        assert!(sink.rx_done());
    }

    #[test]
    fn tiny_frames_are_cut_from_the_template() {
        assert_eq!(udp_template(14).len(), 14);
        assert_eq!(udp_template(1500).len(), 1500);
    }
}
