//! Raw IP protocol 50 (ESP, RFC 4303) sockets for IPv4 and IPv6.
//!
//! The two families differ on receive: an IPv4 raw socket delivers the IP header with the
//! payload, an IPv6 one only the payload (RFC 3542 §3), with the addresses in the sender
//! name and `IPV6_PKTINFO`. [`RawEspSocket::recv`] normalises both, so callers always get
//! the ESP packet, the sender, our address and the TOS / traffic class byte.
//!
//! On send the caller hands a whole outer IP packet (`IP_HDRINCL` / `IPV6_HDRINCL`), so the
//! header the ESP core built (DSCP, ECN per RFC 6040, DF, TTL) goes out as it is.
//!
//! A raw socket receives a copy of every ESP packet that reaches the host, and raw sockets
//! have no `SO_REUSEPORT`: open one per family and share it between workers (the kernel
//! gives each packet to one of the threads reading the same socket).

use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::mmsg::{self, Outgoing, RecvBuffers, SendMode, SendReport};
use crate::sys;
use crate::udp::SEND_TIMEOUT;
use crate::{Error, Result};

/// IP protocol number of ESP.
const IPPROTO_ESP: libc::c_int = 50;
/// Socket buffer size asked for.
const BUFFER_BYTES: i32 = 4 << 20;

/// A raw ESP socket of one family.
#[derive(Debug)]
pub struct RawEspSocket {
    fd: OwnedFd,
    v6: bool,
}

impl RawEspSocket {
    /// Opens a raw ESP socket for IPv6 (`v6`) or IPv4; needs `CAP_NET_RAW`.
    pub fn open(v6: bool) -> Result<Self> {
        let obj = if v6 { "raw ESP/IPv6" } else { "raw ESP/IPv4" };
        let syscall = |call| move |source| Error::Syscall { call, object: obj.to_owned(), source };
        let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        let fd = sys::socket(domain, libc::SOCK_RAW, IPPROTO_ESP).map_err(syscall("socket"))?;
        let s = fd.as_fd();
        if v6 {
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_HDRINCL, 1i32)
                .map_err(syscall("IPV6_HDRINCL"))?;
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1i32)
                .map_err(syscall("IPV6_RECVPKTINFO"))?;
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1i32)
                .map_err(syscall("IPV6_RECVTCLASS"))?;
        } else {
            sys::setsockopt(s, libc::IPPROTO_IP, libc::IP_HDRINCL, 1i32).map_err(syscall("IP_HDRINCL"))?;
        }
        sys::set_timeout(s, libc::SO_SNDTIMEO, SEND_TIMEOUT).map_err(syscall("SO_SNDTIMEO"))?;
        sys::grow_buffer(s, false, BUFFER_BYTES);
        sys::grow_buffer(s, true, BUFFER_BYTES);
        Ok(Self { fd, v6 })
    }

    /// Whether this is the IPv6 socket.
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// Receives what is waiting, without blocking; afterwards every datagram of `bufs` is
    /// an ESP packet with both addresses. IPv4 packets whose header does not add up are
    /// left without a sender and so dropped (see [`RecvBuffers::dropped`]).
    pub fn recv(&self, bufs: &mut RecvBuffers) -> io::Result<usize> {
        let n = mmsg::recv(self.fd.as_fd(), bufs)?;
        if !self.v6 {
            for i in 0..n {
                if let Some((m, buf)) = bufs.message_mut(i) {
                    let packet = buf.get(..m.len).unwrap_or(&[]);
                    match strip_ipv4(packet) {
                        Some((src, dst, tos, start, len)) => {
                            m.remote = Some(SocketAddr::new(IpAddr::V4(src), 0));
                            m.local = Some(IpAddr::V4(dst));
                            m.tos = tos;
                            m.start = start;
                            m.len = len;
                        }
                        None => m.remote = None,
                    }
                }
            }
        }
        Ok(n)
    }

    /// Sends whole outer IP packets of this socket's family (`dst` chooses the route).
    pub fn send<'a>(&self, packets: impl IntoIterator<Item = Outgoing<'a>>) -> SendReport {
        mmsg::send(self.fd.as_fd(), packets, &SendMode { gso: None, tos: None })
    }
}

/// An IPv4 packet's source, destination, TOS and payload range, if its header is whole.
fn strip_ipv4(p: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, u8, usize, usize)> {
    let first = *p.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || ihl > p.len() {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
    // The kernel delivers the whole (reassembled) packet; a shorter Total Length means
    // trailing bytes that are not part of it.
    let end = if total >= ihl { total.min(p.len()) } else { p.len() };
    let src = Ipv4Addr::from(<[u8; 4]>::try_from(p.get(12..16)?).ok()?);
    let dst = Ipv4Addr::from(<[u8; 4]>::try_from(p.get(16..20)?).ok()?);
    Some((src, dst, *p.get(1)?, ihl, end - ihl))
}

impl AsFd for RawEspSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_headers_are_stripped() {
        let mut p = vec![0x45, 0x02, 0, 28, 0, 0, 0, 0, 64, 50, 0, 0, 198, 18, 0, 2, 198, 18, 0, 1];
        p.extend_from_slice(&[0xaa; 8]);
        let (src, dst, tos, start, len) = strip_ipv4(&p).unwrap();
        assert_eq!((src, dst), ("198.18.0.2".parse().unwrap(), "198.18.0.1".parse().unwrap()));
        assert_eq!((tos, start, len), (0x02, 20, 8));
        assert_eq!(strip_ipv4(&p[..19]), None);
        p[0] = 0x4f;
        assert_eq!(strip_ipv4(&p), None, "IHL beyond the packet");
        assert_eq!(strip_ipv4(&[]), None);
    }
}
