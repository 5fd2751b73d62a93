//! An eventfd (`eventfd(2)`): the way a device's interrupt reaches user
//! space. VFIO signals one per MSI-X vector (`VFIO_DEVICE_SET_IRQS` with
//! `VFIO_IRQ_SET_DATA_EVENTFD`); the 82599 model signals the same kind of
//! descriptor, so a driver's interrupt path is the same for both.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; a non-negative return is a
        // new descriptor that nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned here only.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Add one to the counter (what the kernel does on an interrupt).
    pub fn signal(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to our descriptor.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // A counter at its maximum is still signalled.
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(());
        }
        Err(e)
    }

    /// Read and reset the counter: the number of signals since the last
    /// drain (0 when none; never blocks).
    pub fn drain(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n == 8 {
            return Ok(u64::from_ne_bytes(buf));
        }
        let e = io::Error::last_os_error();
        if n < 0 && e.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        if n >= 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("eventfd read returned {n} bytes"),
            ));
        }
        Err(e)
    }

    /// Wait up to `timeout` for a signal (without consuming it): true if
    /// one is pending.
    pub fn wait(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one live pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc == 1 && p.revents & libc::POLLIN != 0)
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn signal_wait_drain() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.drain().unwrap(), 0);
        assert!(!e.wait(Duration::ZERO).unwrap());
        e.signal().unwrap();
        e.signal().unwrap();
        assert!(e.wait(Duration::from_millis(10)).unwrap());
        assert_eq!(e.drain().unwrap(), 2);
        assert!(!e.wait(Duration::ZERO).unwrap());
    }
}
