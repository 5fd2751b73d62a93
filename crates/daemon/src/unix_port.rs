//! BESS's `UnixSocketPort`: nfkit listens on a `SOCK_SEQPACKET` Unix
//! socket (a filesystem path, or `@name` in the abstract namespace) and
//! one client at a time connects; every message is one packet, both
//! ways. Packets sent while no client is connected stay in the batch
//! (the caller counts them as drops), as do packets the socket cannot
//! take now.
//!
//! As BESS: the client is accepted on the receive path (no extra
//! thread), `confirm_connect` sends the 4 bytes `"yes\0"` once the client
//! is accepted, and after a receive that found nothing the port waits
//! `min_rx_interval_ns` (default 50 µs) before asking the kernel again.

use nfkit_hw::{Batch, Mempool, PoolCache};
use nfkit_port::{LinkStatus, Port, PortError, QueueStats};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// BESS's default wait after an empty receive.
pub const DEFAULT_MIN_RX_INTERVAL_NS: u64 = 50_000;
/// How often, at most, the receive path looks for a new client.
const ACCEPT_INTERVAL: Duration = Duration::from_millis(1);
/// Buffer ids the port's cache keeps.
const CACHE_SIZE: usize = 256;
/// Locally administered MAC the port reports.
const MAC: [u8; 6] = [0x02, 0x6e, 0x66, 0x6b, 0x75, 0x01];

pub struct UnixSocketPort {
    name: String,
    listener: Socket,
    client: Option<Socket>,
    /// The filesystem path we bound (removed on drop), if not abstract.
    bound_path: Option<PathBuf>,
    confirm_connect: bool,
    min_rx_interval: Duration,
    idle_until: Option<Instant>,
    next_accept: Instant,
    pool: Mempool,
    cache: PoolCache,
    stats: QueueStats,
    warned_trunc: bool,
}

/// The socket address for `path`: `@name` is abstract.
fn addr_of(path: &str) -> std::io::Result<SockAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            let mut bytes = vec![0u8];
            bytes.extend_from_slice(name.as_bytes());
            SockAddr::unix(std::ffi::OsStr::from_bytes(&bytes))
        }
        None => SockAddr::unix(path),
    }
}

/// Whether something answers on the Unix socket at `path` (a live
/// listener); used before removing a stale socket file.
pub fn socket_is_live(path: &std::path::Path, ty: Type) -> bool {
    let Ok(s) = Socket::new(Domain::UNIX, ty, None) else {
        return false;
    };
    let Ok(addr) = SockAddr::unix(path) else {
        return false;
    };
    s.connect(&addr).is_ok()
}

/// Remove `path` only if it is a socket nobody listens on (a dead
/// daemon's leftover). Anything else there is an error naming it.
pub fn remove_stale_socket(path: &std::path::Path, ty: Type) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot inspect {}: {e}", path.display())),
        Ok(m) if !m.file_type().is_socket() => Err(format!(
            "{} exists and is not a socket; not removing it",
            path.display()
        )),
        Ok(_) if socket_is_live(path, ty) => Err(format!(
            "{} is in use: something answers there",
            path.display()
        )),
        Ok(_) => std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display())),
    }
}

impl UnixSocketPort {
    /// Listen on `path` (`@name`: abstract; empty: BESS's default
    /// `/tmp/bess_unix_<name>`).
    pub fn open(
        name: &str,
        path: &str,
        min_rx_interval_ns: i64,
        confirm_connect: bool,
        pool_buffers: usize,
    ) -> Result<UnixSocketPort, PortError> {
        let path = if path.is_empty() {
            format!("{}/bess_unix_{name}", std::env::temp_dir().display())
        } else {
            path.to_string()
        };
        let bound_path = (!path.starts_with('@')).then(|| PathBuf::from(&path));
        if let Some(p) = &bound_path {
            remove_stale_socket(p, Type::SEQPACKET).map_err(|m| PortError::config(name, m))?;
        }
        let addr = addr_of(&path).map_err(|e| PortError::os(name, format!("address {path}"), e))?;
        let listener = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)
            .map_err(|e| PortError::os(name, "socket(AF_UNIX, SOCK_SEQPACKET)", e))?;
        listener
            .bind(&addr)
            .map_err(|e| PortError::os(name, format!("bind({path})"), e))?;
        listener
            .listen(1)
            .map_err(|e| PortError::os(name, "listen", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| PortError::os(name, "set non-blocking", e))?;
        let pool = nfkit_port::software_pool(name, pool_buffers.max(64))?;
        let min_rx_interval = match min_rx_interval_ns {
            n if n < 0 => Duration::ZERO,
            0 => Duration::from_nanos(DEFAULT_MIN_RX_INTERVAL_NS),
            n => Duration::from_nanos(n as u64),
        };
        Ok(UnixSocketPort {
            name: name.to_string(),
            listener,
            client: None,
            bound_path,
            confirm_connect,
            min_rx_interval,
            idle_until: None,
            next_accept: Instant::now(),
            cache: pool.cache(CACHE_SIZE),
            pool,
            stats: QueueStats::default(),
            warned_trunc: false,
        })
    }

    /// Whether a client is connected now.
    pub fn connected(&self) -> bool {
        self.client.is_some()
    }

    fn try_accept(&mut self) {
        let now = Instant::now();
        if now < self.next_accept {
            return;
        }
        self.next_accept = now + ACCEPT_INTERVAL;
        match self.listener.accept() {
            Ok((s, _)) => {
                if s.set_nonblocking(true).is_err() {
                    return;
                }
                if self.confirm_connect {
                    let _ = s.send_with_flags(b"yes\0", libc::MSG_NOSIGNAL);
                }
                tracing::info!(port = %self.name, "client connected");
                self.client = Some(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => tracing::warn!(port = %self.name, "accept: {e}"),
        }
    }

    fn hang_up(&mut self) {
        tracing::info!(port = %self.name, "client disconnected");
        self.client = None;
        self.next_accept = Instant::now();
    }
}

impl Port for UnixSocketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        if queue != 0 {
            return 0;
        }
        if self.client.is_none() {
            self.try_accept();
            if self.client.is_none() {
                return 0;
            }
        }
        if let Some(t) = self.idle_until {
            if Instant::now() < t {
                return 0;
            }
            self.idle_until = None;
        }
        let mut n = 0;
        while !batch.is_full() {
            let Some(mut b) = self.cache.alloc() else {
                break;
            };
            let room = b.len() + b.tailroom();
            let _ = b.set_len(room);
            let Some(client) = self.client.as_ref() else {
                self.cache.free(b);
                break;
            };
            let mut reader: &Socket = client;
            let got = reader.read(b.data_mut());
            match got {
                Ok(0) => {
                    self.cache.free(b);
                    self.hang_up();
                    break;
                }
                Ok(len) if len >= room => {
                    // The message filled the buffer: it may have been cut short.
                    self.stats.rx_errors += 1;
                    self.cache.free(b);
                    if !self.warned_trunc {
                        self.warned_trunc = true;
                        tracing::warn!(port = %self.name, "a message of {room} bytes or more (longer than a buffer) was dropped (counted in rx_errors)");
                    }
                }
                Ok(len) => {
                    let _ = b.set_len(len);
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    let _ = batch.push(b);
                    n += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.cache.free(b);
                    if n == 0 && !self.min_rx_interval.is_zero() {
                        self.idle_until = Some(Instant::now() + self.min_rx_interval);
                    }
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => self.cache.free(b),
                Err(_) => {
                    self.cache.free(b);
                    self.hang_up();
                    break;
                }
            }
        }
        n
    }

    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        if queue != 0 || batch.is_empty() {
            return 0;
        }
        if self.client.is_none() {
            self.try_accept();
        }
        let Some(client) = self.client.as_ref() else {
            return 0;
        };
        let mut sent = 0;
        let mut bytes = 0u64;
        let mut lost = false;
        for p in batch.iter() {
            match client.send_with_flags(p.data(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) {
                Ok(_) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => break,
                Err(_) => {
                    lost = true;
                    break;
                }
            }
        }
        if sent > 0 {
            self.cache.free_bulk(batch.drain_front(sent));
        }
        self.stats.tx_packets += sent as u64;
        self.stats.tx_bytes += bytes;
        if lost {
            self.hang_up();
        }
        sent
    }

    fn queue_stats(&self, queue: usize) -> QueueStats {
        if queue == 0 {
            self.stats
        } else {
            QueueStats::default()
        }
    }

    fn link(&self) -> LinkStatus {
        LinkStatus {
            up: self.client.is_some(),
            speed_mbps: None,
        }
    }

    fn mac(&self) -> [u8; 6] {
        MAC
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }
}

impl Drop for UnixSocketPort {
    fn drop(&mut self) {
        if let Some(p) = &self.bound_path {
            let _ = std::fs::remove_file(p);
        }
    }
}
