//! The raw system calls of the kernel-facing ports, each behind a safe
//! function: sockets and their options, binding, the TUN ioctl, the
//! `send` that kicks a TX ring, and the few `bpf(2)` commands AF_XDP
//! needs. Every
//! `unsafe` block passes the kernel pointers to memory the function owns
//! or borrows for the call.
//! (Shared-memory rings are in `afpacket::ring` and `afxdp::ring`.)

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Turn a `-1` return into the `errno` error.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `socket(2)`, close-on-exec.
pub fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a fresh descriptor is owned by the OwnedFd.
    let fd = check(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` was just returned by socket(2) and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(2)` with a plain-data value.
pub fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to size_of::<T>() readable bytes for the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `getsockopt(2)` into a plain-data value (zeroed first); returns the
/// length the kernel wrote.
pub fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` points to size_of::<T>() writable bytes; `len` says
    // so; T is plain data for which any bytes the kernel writes are valid
    // (only used with integer-only C structs).
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *mut T).cast(),
            &mut len,
        )
    })?;
    Ok(len as usize)
}

/// The index of interface `name`.
pub fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// Bind a packet socket to an interface and protocol (host order).
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = protocol.to_be();
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: `sa` is a valid sockaddr_ll of the length passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Bind an XDP socket to a device queue (`shared_umem`: the socket whose
/// UMEM this one shares, with `XDP_SHARED_UMEM`).
pub fn bind_xdp(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem: Option<RawFd>,
) -> io::Result<()> {
    // SAFETY: sockaddr_xdp is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_xdp = unsafe { zeroed() };
    sa.sxdp_family = libc::AF_XDP as u16;
    sa.sxdp_ifindex = ifindex;
    sa.sxdp_queue_id = queue;
    sa.sxdp_flags = flags;
    if let Some(f) = shared_umem {
        sa.sxdp_flags |= libc::XDP_SHARED_UMEM;
        sa.sxdp_shared_umem_fd = f as u32;
    }
    // SAFETY: `sa` is a valid sockaddr_xdp of the length passed.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `TUNSETIFF` (linux/if_tun.h: `_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Attach a `/dev/net/tun` descriptor to interface `name` with `flags`
/// (creating it); returns the name the kernel gave it.
pub fn tun_set_iff(fd: BorrowedFd<'_>, name: &str, flags: libc::c_short) -> io::Result<String> {
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    if name.len() >= ifr.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = flags;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `ifr` is.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut ifr as *mut libc::ifreq) })?;
    let bytes: Vec<u8> = ifr
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// One `ETHTOOL_G*` command that answers with a `struct ethtool_value`
/// (`ETHTOOL_GTXCSUM`, `ETHTOOL_GTSO`, ...) on interface `ifname` of
/// this network namespace.
pub fn ethtool_value(ifname: &str, cmd: u32) -> io::Result<u32> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)?;
    let mut v = EthtoolValue { cmd, data: 0 };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    if ifname.len() >= ifr.ifr_name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq and, for these commands, reads
    // and writes the one `ethtool_value` its data pointer names, which
    // lives until the call returns.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            SIOCETHTOOL as _,
            &mut ifr as *mut libc::ifreq,
        )
    })?;
    Ok(v.data)
}

/// `TUNSETOFFLOAD` (linux/if_tun.h: `_IOW('T', 208, unsigned int)`).
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;

/// Tell the kernel which offloads a TAP's reader takes (`TUN_F_*`): it
/// then sends frames needing them (with `TUN_F_CSUM`, partial checksums
/// flagged in the `virtio_net_hdr`).
pub fn tun_set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is
    // passed.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD as _, flags as libc::c_ulong) })?;
    Ok(())
}

/// `send(fd, NULL, 0, MSG_DONTWAIT)`: the kick that makes the kernel walk
/// a TX ring (AF_XDP, PACKET_TX_RING).
pub fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send reads no memory.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `recv(2)` without blocking into `buf`; `Ok(None)` if nothing waits.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is writable for its length during the call.
    let r = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as usize))
}

/// `bpf(2)` commands and types used here (linux/bpf.h).
mod bpf_abi {
    pub const MAP_CREATE: libc::c_int = 0;
    pub const MAP_UPDATE_ELEM: libc::c_int = 2;
    pub const PROG_LOAD: libc::c_int = 5;
    pub const LINK_CREATE: libc::c_int = 28;
    pub const MAP_TYPE_XSKMAP: u32 = 17;
    pub const PROG_TYPE_XDP: u32 = 6;
    pub const ATTACH_TYPE_XDP: u32 = 37;
    /// Bytes of `union bpf_attr` we fill (the kernel accepts shorter or
    /// longer blocks as long as unknown bytes are zero).
    pub const ATTR_SIZE: usize = 128;
}

/// An attribute block being filled field by field at its C offsets.
struct Attr([u8; bpf_abi::ATTR_SIZE]);

impl Attr {
    fn new() -> Attr {
        Attr([0; bpf_abi::ATTR_SIZE])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(&mut self, off: usize, name: &str) -> &mut Attr {
        for (d, s) in self.0[off..off + 15].iter_mut().zip(name.bytes()) {
            *d = s;
        }
        self
    }
    /// Run `cmd` with this block; its pointers must borrow live memory
    /// (every caller below passes slices it borrows for the call).
    fn call(&mut self, cmd: libc::c_int) -> io::Result<libc::c_int> {
        // SAFETY: the block is readable/writable for its size; the
        // pointers inside come from borrows held by the calling function
        // across this call, with the lengths written beside them.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_uint,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as libc::c_int)
        }
    }
}

fn own(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` is fresh from bpf(2) and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Create an XSKMAP (u32 queue index -> XDP socket) of `entries` slots.
pub fn bpf_xskmap_create(name: &str, entries: u32) -> io::Result<OwnedFd> {
    let fd = Attr::new()
        .u32(0, bpf_abi::MAP_TYPE_XSKMAP)
        .u32(4, 4) // key: queue index
        .u32(8, 4) // value: socket fd
        .u32(12, entries)
        .name(28, name)
        .call(bpf_abi::MAP_CREATE)?;
    Ok(own(fd))
}

/// Set `map[key] = value` (both u32).
pub fn bpf_map_update_u32(map: BorrowedFd<'_>, key: u32, value: u32) -> io::Result<()> {
    let (k, v) = (key, value);
    Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, &k as *const u32 as u64)
        .u64(16, &v as *const u32 as u64)
        .call(bpf_abi::MAP_UPDATE_ELEM)?;
    Ok(())
}

/// Load an XDP program from instruction words. On a verifier refusal the
/// error carries the verifier log.
pub fn bpf_prog_load_xdp(
    name: &str,
    insns: &[u64],
    license: &std::ffi::CStr,
    prog_flags: u32,
) -> io::Result<OwnedFd> {
    let mut log = vec![0u8; 64 * 1024];
    let r = Attr::new()
        .u32(44, prog_flags)
        .u32(0, bpf_abi::PROG_TYPE_XDP)
        .u32(4, insns.len() as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1) // log level
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .name(48, name)
        .u32(68, bpf_abi::ATTACH_TYPE_XDP)
        .call(bpf_abi::PROG_LOAD);
    match r {
        Ok(fd) => Ok(own(fd)),
        Err(e) => {
            let text =
                String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)])
                    .into_owned();
            if text.trim().is_empty() {
                Err(e)
            } else {
                Err(io::Error::new(
                    e.kind(),
                    format!("{e}; verifier log:\n{text}"),
                ))
            }
        }
    }
}

/// Attach an XDP program to an interface through a BPF link; the program
/// is detached when the returned descriptor closes. `flags` are the
/// `XDP_FLAGS_*` mode bits.
pub fn bpf_link_create_xdp(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let fd = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, bpf_abi::ATTACH_TYPE_XDP)
        .u32(12, flags)
        .call(bpf_abi::LINK_CREATE)?;
    Ok(own(fd))
}

/// Whether an OS error means "not permitted", for messages that name the
/// fix.
pub fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// `ppoll(2)` on `fds` for up to `timeout` (microsecond precision, where
/// [`poll`] rounds to milliseconds: a sleep until a rate-limit timer).
/// `EINTR` counts as a wake-up with none.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: std::time::Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfd
    // structures and `ts` a valid timespec for the duration of the call;
    // a null signal mask leaves the mask as it is.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// `eventfd(2)`, non-blocking and close-on-exec: a counter another
/// thread writes to wake a loop asleep in [`poll`].
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a fresh descriptor is owned by the OwnedFd.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    Ok(own(fd))
}

/// `poll(2)` on `fds` for up to `timeout_ms` milliseconds (the hybrid
/// loops' sleep: only after an idle period, never per packet). Returns
/// how many descriptors have events; `EINTR` counts as a wake-up with
/// none.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfd
    // structures for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// `sendmsg(2)` of one datagram gathered from `parts`, without blocking
/// (a packet socket sends it on its bound interface; a frame larger
/// than its TX ring's slots goes this way).
pub fn send_parts(fd: BorrowedFd<'_>, parts: &[&[u8]]) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = parts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    // SAFETY: zeroed msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at `iov`, whose entries point at `parts`,
    // all readable for their lengths during the call; the kernel only
    // reads them.
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `epoll_create1(2)`, close-on-exec: one descriptor that polls readable
/// while any descriptor added to it does (a bond's members' queues).
pub fn epoll() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a fresh descriptor is owned by the OwnedFd.
    let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    Ok(own(fd))
}

/// Watch `fd` for input in the epoll set `ep` (level-triggered).
pub fn epoll_add(ep: BorrowedFd<'_>, fd: RawFd) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call
    // (the kernel copies it); the descriptors are only numbers to it.
    check(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    Ok(())
}
