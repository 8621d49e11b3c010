//! Thin, checked wrappers over the libc calls the other modules share: sockets, socket
//! options, socket addresses.

use core::mem::{size_of, zeroed};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `AF_INET` as stored in a socket address.
#[allow(clippy::cast_possible_truncation)] // AF_INET is 2: it fits a sa_family_t.
pub(crate) const AF_INET: libc::sa_family_t = libc::AF_INET as libc::sa_family_t;
/// `AF_INET6` as stored in a socket address.
#[allow(clippy::cast_possible_truncation)] // AF_INET6 is 10: it fits a sa_family_t.
pub(crate) const AF_INET6: libc::sa_family_t = libc::AF_INET6 as libc::sa_family_t;

/// `rc` as an `io::Result`: `-1` becomes the thread's `errno`.
pub(crate) fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `rc` of a call returning `ssize_t` as a byte count.
pub(crate) fn cvt_len(rc: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// A new close-on-exec socket.
pub(crate) fn socket(domain: libc::c_int, ty: libc::c_int, protocol: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers and returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket(2): open, and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// setsockopt(2) with a value of type `T` (an `int`, `u16`, `timeval`, ...).
pub(crate) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: T,
) -> io::Result<()> {
    let len = socklen::<T>();
    // SAFETY: `value` lives on our stack for the call and `len` is its exact size; the
    // kernel only reads `len` bytes from it. `fd` is an open descriptor (borrowed).
    let rc = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const value).cast::<libc::c_void>(), len)
    };
    cvt(rc).map(drop)
}

/// getsockopt(2) of an `int` option.
pub(crate) fn getsockopt_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = socklen::<libc::c_int>();
    // SAFETY: `value` and `len` live on our stack for the call; `len` says how many bytes
    // the kernel may write into `value`, and it writes back how many it did.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), level, name, (&raw mut value).cast::<libc::c_void>(), &raw mut len)
    };
    cvt(rc).map(|_| value)
}

/// A send or receive timeout (`SO_SNDTIMEO` / `SO_RCVTIMEO`).
pub(crate) fn set_timeout(fd: BorrowedFd<'_>, name: libc::c_int, limit: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(limit.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(limit.subsec_micros()),
    };
    setsockopt(fd, libc::SOL_SOCKET, name, tv)
}

/// Raises a socket buffer towards `bytes`: the privileged `*FORCE` option first (it ignores
/// `rmem_max`/`wmem_max`), the ordinary one (capped by those sysctls) when refused.
pub(crate) fn grow_buffer(fd: BorrowedFd<'_>, send: bool, bytes: i32) {
    let (force, plain) =
        if send { (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF) } else { (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF) };
    if setsockopt(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        // Best effort: a smaller buffer only means more drops under bursts.
        let _ = setsockopt(fd, libc::SOL_SOCKET, plain, bytes);
    }
}

/// The size of `T` as a `socklen_t` (socket option and address structures are small).
pub(crate) fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

/// A socket address in the kernel's layout, with its length.
#[derive(Clone, Copy)]
pub(crate) struct RawAddr {
    pub(crate) storage: libc::sockaddr_storage,
    pub(crate) len: libc::socklen_t,
}

impl RawAddr {
    /// An all-zero address, for the kernel to fill.
    pub(crate) fn empty() -> Self {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
        Self { storage: unsafe { zeroed() }, len: socklen::<libc::sockaddr_storage>() }
    }

    /// `addr` in the kernel's layout.
    pub(crate) fn from(addr: SocketAddr) -> Self {
        let mut raw = Self::empty();
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: AF_INET,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in (that is
                // its purpose); we write one whole, valid sockaddr_in at its start.
                unsafe { (&raw mut raw.storage).cast::<libc::sockaddr_in>().write(sin) };
                raw.len = socklen::<libc::sockaddr_in>();
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: AF_INET6,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe { (&raw mut raw.storage).cast::<libc::sockaddr_in6>().write(sin6) };
                raw.len = socklen::<libc::sockaddr_in6>();
            }
        }
        raw
    }

    /// The address, if it is IPv4 or IPv6 and as long as its family says.
    pub(crate) fn socket_addr(&self) -> Option<SocketAddr> {
        to_socket_addr(&self.storage, self.len)
    }
}

/// Reads a `sockaddr_in`/`sockaddr_in6` the kernel wrote into `storage` (`len` bytes).
pub(crate) fn to_socket_addr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = usize::try_from(len).ok()?;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the kernel wrote a sockaddr_in, `len` confirms its
            // size, and sockaddr_storage is aligned for it; read_unaligned needs neither.
            let sin = unsafe { (&raw const *storage).cast::<libc::sockaddr_in>().read_unaligned() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { (&raw const *storage).cast::<libc::sockaddr_in6>().read_unaligned() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The address family constant of `ip`.
pub(crate) fn family(ip: IpAddr) -> libc::c_int {
    if ip.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    }
}

/// An interface name as the kernel's fixed-size, NUL-terminated array, or `None` if it is
/// empty, too long or contains a NUL or `/`.
pub(crate) fn ifname(name: &str) -> Option<[libc::c_char; libc::IFNAMSIZ]> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.iter().any(|&b| b == 0 || b == b'/') {
        return None;
    }
    let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
    for (dst, &src) in out.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    Some(out)
}

/// The name in a kernel `ifr_name` array, up to its NUL.
pub(crate) fn ifname_string(raw: &[libc::c_char; libc::IFNAMSIZ]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_the_kernel_layout() {
        for a in ["198.18.0.1:4500", "[2001:db8::1]:500", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(RawAddr::from(a).socket_addr(), Some(a));
        }
        assert_eq!(RawAddr::empty().socket_addr(), None);
    }

    #[test]
    fn interface_names_are_checked() {
        assert!(ifname("clt0").is_some());
        assert!(ifname("").is_none());
        assert!(ifname("a-name-too-long-x").is_none());
        assert!(ifname("a/b").is_none());
        assert_eq!(ifname_string(&ifname("tun7").unwrap()), "tun7");
    }
}
