//! Configuring a network device through the classic socket ioctls: link up, MTU, IPv4 and
//! IPv6 addresses, and routes through the device (no gateway: a TUN device is
//! point-to-point). Enough for the data plane to set its TUN device up from a config file
//! without shelling out to `ip`.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::sys::{self, cvt};
use crate::{Error, Result};

/// An IP prefix such as `198.18.20.0/24` or `2001:db8:b::/48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address (host bits may be set, as in an interface address `198.18.10.1/24`).
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

impl Prefix {
    /// The network address: host bits cleared.
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        }
    }
}

impl FromStr for Prefix {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why| Error::Invalid { what: "prefix", value: s.to_owned(), why };
        let (a, l) = s.trim().split_once('/').unwrap_or((s.trim(), ""));
        let addr: IpAddr = a.parse().map_err(|_| bad("not an IP address"))?;
        let max = if addr.is_ipv6() { 128 } else { 32 };
        let len = if l.is_empty() { max } else { l.parse::<u8>().map_err(|_| bad("bad prefix length"))? };
        if len > max {
            return Err(bad("prefix length too long for the family"));
        }
        Ok(Self { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// `struct in6_rtmsg` of `<linux/ipv6_route.h>` (libc's copy has private fields).
#[repr(C)]
struct In6Rtmsg {
    dst: libc::in6_addr,
    src: libc::in6_addr,
    gateway: libc::in6_addr,
    rt_type: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

/// The metric `ip -6 route` gives user routes (`IP6_RT_PRIO_USER`).
const IP6_RT_PRIO_USER: u32 = 1024;

fn control_socket(v6: bool) -> io::Result<OwnedFd> {
    sys::socket(if v6 { libc::AF_INET6 } else { libc::AF_INET }, libc::SOCK_DGRAM, 0)
}

/// The sockets the configuration ioctls go through. A socket belongs to the namespace it was
/// opened in, so a `Control` opened there (by this process, or lent by one that may enter
/// it, [`crate::netns::lend`]) configures that namespace's devices from any thread.
#[derive(Debug)]
pub struct Control {
    v4: OwnedFd,
    /// `None` where the namespace has no IPv6.
    v6: Option<OwnedFd>,
}

impl Control {
    /// Sockets in the calling thread's namespace.
    pub fn here() -> Result<Self> {
        let v4 = control_socket(false).map_err(syscall("socket", "AF_INET"))?;
        Ok(Self { v4, v6: control_socket(true).ok() })
    }

    /// Sockets another process opened (both `SOCK_DGRAM`, of families `AF_INET` and
    /// `AF_INET6`); their namespace is the one they were opened in.
    pub fn from_sockets(v4: OwnedFd, v6: Option<OwnedFd>) -> Self {
        Self { v4, v6 }
    }

    /// The sockets, to lend to another process.
    pub fn sockets(&self) -> (BorrowedFd<'_>, Option<BorrowedFd<'_>>) {
        (self.v4.as_fd(), self.v6.as_ref().map(AsFd::as_fd))
    }

    fn v6(&self, name: &str) -> Result<BorrowedFd<'_>> {
        self.v6.as_ref().map(AsFd::as_fd).ok_or_else(|| Error::Invalid {
            what: "IPv6 configuration of",
            value: name.to_owned(),
            why: "the device's namespace has no IPv6",
        })
    }

    /// The interface index of `name` in the sockets' namespace.
    pub fn index(&self, name: &str) -> Result<u32> {
        let mut ifr = ifreq(name)?;
        ioctl_ptr(self.v4.as_fd(), libc::SIOCGIFINDEX, &mut ifr).map_err(syscall("SIOCGIFINDEX", name))?;
        // SAFETY: SIOCGIFINDEX filled the index member of the union.
        let i = unsafe { ifr.ifr_ifru.ifru_ifindex };
        u32::try_from(i).map_err(|_| Error::Invalid {
            what: "interface index of",
            value: name.to_owned(),
            why: "negative",
        })
    }

    /// Brings `name` up.
    pub fn set_up(&self, name: &str) -> Result<()> {
        let s = self.v4.as_fd();
        let mut ifr = ifreq(name)?;
        ioctl_ptr(s, libc::SIOCGIFFLAGS, &mut ifr).map_err(syscall("SIOCGIFFLAGS", name))?;
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        // IFF_UP is 1: it fits the c_short.
        ifr.ifr_ifru.ifru_flags = flags | libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
        ioctl_ptr(s, libc::SIOCSIFFLAGS, &mut ifr).map_err(syscall("SIOCSIFFLAGS", name))
    }

    /// Sets the MTU of `name`.
    pub fn set_mtu(&self, name: &str, mtu: u32) -> Result<()> {
        let mut ifr = ifreq(name)?;
        ifr.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).map_err(|_| Error::Invalid {
            what: "MTU",
            value: mtu.to_string(),
            why: "too large",
        })?;
        ioctl_ptr(self.v4.as_fd(), libc::SIOCSIFMTU, &mut ifr).map_err(syscall("SIOCSIFMTU", name))
    }

    /// Adds the address `prefix` (e.g. `198.18.10.1/24`) to `name`.
    pub fn add_address(&self, name: &str, prefix: Prefix) -> Result<()> {
        match prefix.addr {
            IpAddr::V4(a) => {
                let s = self.v4.as_fd();
                let mut ifr = ifreq(name)?;
                ifr.ifr_ifru.ifru_addr = sockaddr_v4(a);
                ioctl_ptr(s, libc::SIOCSIFADDR, &mut ifr).map_err(syscall("SIOCSIFADDR", name))?;
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix.len)).unwrap_or(0);
                ifr.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::from(mask));
                ioctl_ptr(s, libc::SIOCSIFNETMASK, &mut ifr).map_err(syscall("SIOCSIFNETMASK", name))
            }
            IpAddr::V6(a) => {
                let mut req = libc::in6_ifreq {
                    ifr6_addr: libc::in6_addr { s6_addr: a.octets() },
                    ifr6_prefixlen: u32::from(prefix.len),
                    ifr6_ifindex: libc::c_int::try_from(self.index(name)?).unwrap_or(0),
                };
                ioctl_ptr(self.v6(name)?, libc::SIOCSIFADDR, &mut req).map_err(syscall("SIOCSIFADDR", name))
            }
        }
    }

    /// Adds a route to `prefix` through `name` (no gateway).
    pub fn add_route(&self, name: &str, prefix: Prefix) -> Result<()> {
        match prefix.network() {
            IpAddr::V4(net) => {
                let dev = std::ffi::CString::new(name).map_err(|_| Error::Invalid {
                    what: "device name",
                    value: name.to_owned(),
                    why: "contains a NUL byte",
                })?;
                // SAFETY: rtentry is plain old data with one pointer; all-zero (null) is valid.
                let mut rt: libc::rtentry = unsafe { core::mem::zeroed() };
                rt.rt_dst = sockaddr_v4(net);
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix.len)).unwrap_or(0);
                rt.rt_genmask = sockaddr_v4(Ipv4Addr::from(mask));
                rt.rt_flags = libc::RTF_UP;
                // The kernel only reads the name through this pointer, during the call below,
                // while `dev` is alive.
                rt.rt_dev = dev.as_ptr().cast_mut();
                ioctl_ptr(self.v4.as_fd(), libc::SIOCADDRT, &mut rt).map_err(syscall("SIOCADDRT", name))
            }
            IpAddr::V6(net) => {
                let unspecified = libc::in6_addr { s6_addr: [0; 16] };
                let mut rt = In6Rtmsg {
                    dst: libc::in6_addr { s6_addr: net.octets() },
                    src: unspecified,
                    gateway: unspecified,
                    rt_type: 0,
                    dst_len: u16::from(prefix.len),
                    src_len: 0,
                    metric: IP6_RT_PRIO_USER,
                    info: 0,
                    flags: u32::from(libc::RTF_UP),
                    ifindex: libc::c_int::try_from(self.index(name)?).unwrap_or(0),
                };
                ioctl_ptr(self.v6(name)?, libc::SIOCADDRT, &mut rt).map_err(syscall("SIOCADDRT", name))
            }
        }
    }
}

fn ifreq(name: &str) -> Result<libc::ifreq> {
    let raw = sys::ifname(name).ok_or_else(|| Error::Invalid {
        what: "device name",
        value: name.to_owned(),
        why: "1 to 15 bytes, no NUL or '/'",
    })?;
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { core::mem::zeroed() };
    ifr.ifr_name = raw;
    Ok(ifr)
}

/// ioctl(2) with a pointer to `T`, which the request reads (and may write).
fn ioctl_ptr<T>(fd: BorrowedFd<'_>, request: libc::Ioctl, arg: &mut T) -> io::Result<()> {
    // SAFETY: every request used here takes a pointer to exactly the structure `T` the
    // caller passes (ifreq, in6_ifreq, rtentry, in6_rtmsg), borrowed mutably for the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), request, core::ptr::from_mut(arg)) }).map(drop)
}

fn syscall<'a>(call: &'static str, name: &'a str) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Syscall { call, object: name.to_owned(), source }
}

/// Brings `name` (in the calling thread's namespace) up.
pub fn set_up(name: &str) -> Result<()> {
    Control::here()?.set_up(name)
}

/// Sets the MTU of `name` (in the calling thread's namespace).
pub fn set_mtu(name: &str, mtu: u32) -> Result<()> {
    Control::here()?.set_mtu(name, mtu)
}

fn sockaddr_v4(a: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: sys::AF_INET,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.octets()) },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes of plain old data; this is the
    // conversion the ioctl ABI expects.
    unsafe { core::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Adds the address `prefix` (e.g. `198.18.10.1/24`) to `name` (in the calling thread's
/// namespace).
pub fn add_address(name: &str, prefix: Prefix) -> Result<()> {
    Control::here()?.add_address(name, prefix)
}

/// Adds a route to `prefix` through `name` (no gateway; in the calling thread's namespace).
pub fn add_route(name: &str, prefix: Prefix) -> Result<()> {
    Control::here()?.add_route(name, prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_give_their_network() {
        let p: Prefix = "198.18.20.7/24".parse().unwrap();
        assert_eq!(p.network(), "198.18.20.0".parse::<IpAddr>().unwrap());
        assert_eq!(p.to_string(), "198.18.20.7/24");
        let p: Prefix = "2001:db8:b::1/48".parse().unwrap();
        assert_eq!(p.network(), "2001:db8:b::".parse::<IpAddr>().unwrap());
        let p: Prefix = "198.18.0.1".parse().unwrap();
        assert_eq!(p.len, 32);
        let p: Prefix = "0.0.0.0/0".parse().unwrap();
        assert_eq!(p.network(), "0.0.0.0".parse::<IpAddr>().unwrap());
        for bad in ["198.18.0.1/33", "2001:db8::/129", "x/8", "198.18.0.1/x"] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn in6_rtmsg_has_the_kernel_layout() {
        // 3 * 16 + 4 + 2 + 2 + 4 (+4 padding) + 8 + 4 + 4 on 64-bit Linux.
        if cfg!(target_pointer_width = "64") {
            assert_eq!(core::mem::size_of::<In6Rtmsg>(), 80);
        }
    }
}
