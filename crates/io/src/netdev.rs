//! Configuring a network device: link up, MTU and routes through the device (no gateway: a
//! TUN device is point-to-point) with the classic socket ioctls, and addresses over
//! rtnetlink, which adds each beside the others (`SIOCSIFADDR` replaces a device's IPv4
//! address). Enough for the data plane to set its TUN device up from a config file without
//! shelling out to `ip`.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeader, AddressMessage, AddressScope};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;

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

/// How long the kernel may take to answer a netlink request.
const NETLINK_TIMEOUT: Duration = Duration::from_secs(5);

/// A `NETLINK_ROUTE` socket connected to the kernel, bound to no group (it hears only the
/// answers to its own requests).
fn rtnetlink_socket() -> io::Result<netlink_sys::Socket> {
    let mut s = netlink_sys::Socket::new(NETLINK_ROUTE)?;
    s.bind_auto()?;
    s.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    Ok(s)
}

/// The sockets the configuration goes through: ioctls of both families and rtnetlink. A
/// socket belongs to the namespace it was opened in, so a `Control` opened there (by this
/// process, or lent by one that may enter it, [`crate::netns::lend`]) configures that
/// namespace's devices from any thread.
#[derive(Debug)]
pub struct Control {
    v4: OwnedFd,
    /// `None` where the namespace has no IPv6.
    v6: Option<OwnedFd>,
    /// One request and its answer at a time, with the request's sequence number.
    rtnl: Mutex<(netlink_sys::Socket, u32)>,
}

impl Control {
    /// Sockets in the calling thread's namespace.
    pub fn here() -> Result<Self> {
        let v4 = control_socket(false).map_err(syscall("socket", "AF_INET"))?;
        let rtnl = rtnetlink_socket().map_err(syscall("socket", "NETLINK_ROUTE"))?;
        Ok(Self { v4, v6: control_socket(true).ok(), rtnl: Mutex::new((rtnl, 0)) })
    }

    /// Sockets another process opened (`SOCK_DGRAM` of families `AF_INET` and `AF_INET6`,
    /// and a `NETLINK_ROUTE` socket connected to the kernel); their namespace is the one they
    /// were opened in.
    pub fn from_sockets(v4: OwnedFd, rtnl: OwnedFd, v6: Option<OwnedFd>) -> Self {
        // SAFETY: `rtnl` is an open descriptor this call owns; the socket takes it over.
        let rtnl = unsafe { netlink_sys::Socket::from_raw_fd(rtnl.into_raw_fd()) };
        Self { v4, v6, rtnl: Mutex::new((rtnl, 0)) }
    }

    /// Runs `f` with the rtnetlink socket; `None` if a panic poisoned it.
    fn with_rtnl<R>(&self, f: impl FnOnce(&netlink_sys::Socket, &mut u32) -> R) -> Option<R> {
        let mut g = self.rtnl.lock().ok()?;
        let (sock, seq) = &mut *g;
        Some(f(sock, seq))
    }

    /// The sockets (IPv4, rtnetlink, IPv6), to lend to another process; `None` if the
    /// rtnetlink socket cannot be duplicated.
    pub fn sockets(&self) -> io::Result<(OwnedFd, OwnedFd, Option<OwnedFd>)> {
        let rtnl = self
            .with_rtnl(|s, _| s.as_fd().try_clone_to_owned())
            .unwrap_or_else(|| Err(io::Error::other("rtnetlink socket poisoned")))?;
        let v6 = self.v6.as_ref().map(|s| s.try_clone()).transpose()?;
        Ok((self.v4.try_clone()?, rtnl, v6))
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

    /// Adds the address `prefix` (e.g. `198.18.10.1/24`) to `name`, beside any it has
    /// (RTM_NEWADDR, as `ip address replace`: adding one it has already changes nothing).
    pub fn add_address(&self, name: &str, prefix: Prefix) -> Result<()> {
        let index = self.index(name)?;
        let family = if prefix.addr.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
        let mut msg = AddressMessage::default();
        msg.header = AddressHeader {
            family,
            prefix_len: prefix.len,
            scope: AddressScope::Universe,
            index,
            ..AddressHeader::default()
        };
        // IFA_LOCAL is the address; IFA_ADDRESS the peer's on point-to-point links, which
        // `ip` sets to the same address when none is given.
        msg.attributes = vec![AddressAttribute::Local(prefix.addr), AddressAttribute::Address(prefix.addr)];
        self.rtnetlink(RouteNetlinkMessage::NewAddress(msg), NLM_F_CREATE | NLM_F_REPLACE)
            .map_err(syscall("RTM_NEWADDR", name))
    }

    /// Sends one request and waits for its acknowledgement.
    fn rtnetlink(&self, request: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        self.with_rtnl(|sock, seq| {
            *seq = seq.wrapping_add(1);
            let mut header = NetlinkHeader::default();
            header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
            header.sequence_number = *seq;
            let mut msg = NetlinkMessage::new(header, NetlinkPayload::from(request));
            msg.finalize();
            let mut out = vec![0; msg.buffer_len()];
            msg.serialize(&mut out);
            sock.send(&out, 0)?;
            set_receive_timeout(sock.as_fd(), NETLINK_TIMEOUT)?;
            let mut buf = vec![0u8; 8192];
            // Answers to earlier requests that timed out are skipped by their number.
            for _ in 0..16 {
                let mut room = &mut buf[..];
                let n = sock.recv(&mut room, 0)?;
                let answer = <NetlinkMessage<RouteNetlinkMessage>>::deserialize(buf.get(..n).unwrap_or(&[]))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                if answer.header.sequence_number != *seq {
                    continue;
                }
                return match answer.payload {
                    NetlinkPayload::Error(e) => match e.code {
                        None => Ok(()),
                        Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                    },
                    _ => Err(io::Error::new(io::ErrorKind::InvalidData, "not an acknowledgement")),
                };
            }
            Err(io::Error::new(io::ErrorKind::InvalidData, "no acknowledgement among the answers"))
        })
        .unwrap_or_else(|| Err(io::Error::other("rtnetlink socket poisoned")))
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

fn set_receive_timeout(fd: BorrowedFd<'_>, t: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros()),
    };
    let len = libc::socklen_t::try_from(core::mem::size_of::<libc::timeval>()).unwrap_or(0);
    // SAFETY: SO_RCVTIMEO reads one timeval from the pointer, which lives across the call.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            core::ptr::from_ref(&tv).cast(),
            len,
        )
    })
    .map(drop)
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
