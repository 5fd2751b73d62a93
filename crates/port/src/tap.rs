//! `tap:NAME`: a kernel TAP interface created by nfkit (`/dev/net/tun`,
//! `TUNSETIFF` with `IFF_TAP | IFF_NO_PI`), so the host stack and
//! unmodified applications send and receive through nfkit: what the
//! kernel sends out of NAME arrives on this port's RX, what this port
//! sends appears as received on NAME.
//!
//! The interface exists while the port is open and starts down; bring it
//! up (and address it, move it to a namespace...) with `ip link`. One
//! frame per `read`/`write` system call.

use crate::open::{software_pool, OpenOptions};
use crate::spec::TapSpec;
use crate::{netdev, sys, Batch, LinkStatus, Mempool, Port, PortError, QueueStats};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

pub struct TapPort {
    name: String,
    ifname: String,
    file: File,
    pool: Mempool,
    stats: QueueStats,
    error: Option<PortError>,
    warned_tx: bool,
    warned_rx: bool,
}

impl TapPort {
    pub fn open(name: &str, spec: &TapSpec, opts: &OpenOptions) -> Result<TapPort, PortError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(|e| {
                let fix = match e.kind() {
                    ErrorKind::NotFound => {
                        ": the kernel has no TUN/TAP support (load the `tun` module)"
                    }
                    ErrorKind::PermissionDenied => ": run as root or with CAP_NET_ADMIN",
                    _ => "",
                };
                PortError::os(name, format!("cannot open /dev/net/tun{fix}"), e)
            })?;
        let flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        let ifname = sys::tun_set_iff(file.as_fd(), &spec.name, flags).map_err(|e| {
            let fix = if sys::is_permission(&e) {
                ": creating a TAP interface needs root or CAP_NET_ADMIN"
            } else if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EINVAL) {
                ": an interface of that name exists and is not a free TAP; pick another name or delete it (`ip link del NAME`)"
            } else {
                ""
            };
            PortError::os(name, format!("cannot create TAP interface `{}`{fix}", spec.name), e)
        })?;
        Ok(TapPort {
            name: name.to_string(),
            ifname,
            file,
            pool: software_pool(name, opts.pool_buffers)?,
            stats: QueueStats::default(),
            error: None,
            warned_tx: false,
            warned_rx: false,
        })
    }

    /// The kernel's name of the interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            let Some(mut b) = self.pool.alloc() else {
                // Frames wait in the kernel's queue (which drops and
                // counts on its side when full).
                break;
            };
            let room = b.len() + b.tailroom();
            let _ = b.set_len(room);
            match self.file.read(b.data_mut()) {
                Ok(len) if len >= room => {
                    // The frame filled the buffer: it was cut short.
                    self.stats.rx_errors += 1;
                    if !self.warned_rx {
                        self.warned_rx = true;
                        tracing::warn!(
                            port = %self.name,
                            "a frame did not fit a {room}-byte buffer and was dropped (counted in rx_errors): lower the MTU (`ip link set {} mtu 1500`)",
                            self.ifname
                        );
                    }
                }
                Ok(len) => {
                    let _ = b.set_len(len);
                    self.stats.rx_bytes += len as u64;
                    batch.push(b);
                    n += 1;
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    break
                }
                Err(e) => {
                    self.stats.rx_errors += 1;
                    self.error = Some(PortError::os(
                        &self.name,
                        "reading from the TAP interface",
                        e,
                    ));
                    break;
                }
            }
        }
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, _queue: usize, batch: &mut Batch) -> usize {
        let mut sent = 0;
        for b in batch.iter() {
            match self.file.write(b.data()) {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += b.len() as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    // The kernel refused this frame (interface down, bad
                    // frame): it is gone, counted as an error.
                    self.stats.tx_errors += 1;
                    if !self.warned_tx {
                        self.warned_tx = true;
                        tracing::warn!(port = %self.name, "TAP write failed: {e} (is `{}` up?)", self.ifname);
                    }
                }
            }
            sent += 1;
        }
        batch.drain_front(sent);
        sent
    }

    fn queue_stats(&self, _queue: usize) -> QueueStats {
        self.stats
    }

    /// The interface's state while it is in this network namespace. Once
    /// moved to another (as tests and containers do) sysfs here cannot
    /// see it; the link is then reported up, as it is from our side: the
    /// carrier stays on while nfkit holds the TAP open.
    fn link(&self) -> LinkStatus {
        if std::path::Path::new(&format!("/sys/class/net/{}", self.ifname)).exists() {
            netdev::link_status(&self.ifname)
        } else {
            LinkStatus {
                up: true,
                speed_mbps: None,
            }
        }
    }

    fn mac(&self) -> [u8; 6] {
        netdev::read_mac(&self.ifname).unwrap_or([0x02, 0, 0, 0, 0x7a, 0x01])
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    fn take_error(&mut self) -> Option<PortError> {
        self.error.take()
    }
}
