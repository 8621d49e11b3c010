//! UDP sockets for ESP-in-UDP (RFC 3948): batched receive and send, UDP GSO and GRO.
//!
//! Each worker binds its own socket to the same address with `SO_REUSEPORT`; the kernel
//! then spreads peers over the sockets by their address and port. GRO (`UDP_GRO`) lets the
//! kernel hand over a burst of equal-sized datagrams from one peer in one buffer, with the
//! size in a cmsg; GSO (`UDP_SEGMENT`) sends equal-sized datagrams to one peer in one
//! `sendmsg`. Both are probed when the socket is made; a GSO send the kernel refuses later
//! (a route without checksum offload) turns GSO off for that socket and the datagrams go
//! one by one.

use core::fmt;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, Ordering};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::mmsg::{self, Outgoing, RecvBuffers, SendMode, SendReport};
use crate::sys::{self, RawAddr};
use crate::{Error, Result};

/// How long a send may wait for room in the socket buffer before the packets are dropped.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// Socket buffer size asked for (bursts of 64 KiB super-packets become many datagrams).
const BUFFER_BYTES: i32 = 4 << 20;

/// The UDP offloads a socket uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpOffloads {
    /// Segmentation on send (`UDP_SEGMENT`).
    pub gso: bool,
    /// Coalescing on receive (`UDP_GRO`).
    pub gro: bool,
}

impl fmt::Display for UdpOffloads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.gso, self.gro) {
            (true, true) => f.write_str("gso+gro"),
            (true, false) => f.write_str("gso"),
            (false, true) => f.write_str("gro"),
            (false, false) => f.write_str("none"),
        }
    }
}

/// Raises a socket's receive buffer towards `bytes` (SO_RCVBUFFORCE, else SO_RCVBUF), best
/// effort: for sockets bound elsewhere (the gateway's IKE sockets) that take bursts.
pub fn grow_receive_buffer(socket: &impl AsFd, bytes: i32) {
    sys::grow_buffer(socket.as_fd(), false, bytes);
}

/// A bound UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    fd: OwnedFd,
    local: SocketAddr,
    gso: AtomicBool,
    gro: bool,
}

/// Consecutive ESP sequence numbers steered to one socket by
/// [`UdpSocket::steer_by_esp_sequence`]: one batch's worth, so that a worker's batch holds a
/// run of one SA's numbers (one replay-window update per run, inner TCP segments in order
/// for GRO) while the runs spread over the workers.
pub const STEER_RUN: u32 = 32;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
/// BPF_LD | BPF_W | BPF_ABS.
const BPF_LD_W_ABS: u16 = 0x20;
/// BPF_ALU | BPF_RSH | BPF_K.
const BPF_ALU_RSH_K: u16 = 0x74;
/// BPF_ALU | BPF_MOD | BPF_K.
const BPF_ALU_MOD_K: u16 = 0x94;
/// BPF_RET | BPF_A.
const BPF_RET_A: u16 = 0x16;

impl UdpSocket {
    /// Binds to `addr` (port 0: any), with `SO_REUSEPORT` if `reuse_port`, and the offloads
    /// the kernel accepts if `offload`.
    pub fn bind(addr: SocketAddr, reuse_port: bool, offload: bool) -> Result<Self> {
        let obj = addr.to_string();
        let syscall = |call| move |source| Error::Syscall { call, object: addr.to_string(), source };
        let fd = sys::socket(sys::family(addr.ip()), libc::SOCK_DGRAM, libc::IPPROTO_UDP)
            .map_err(syscall("socket"))?;
        let s = fd.as_fd();
        if reuse_port {
            sys::setsockopt(s, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1i32)
                .map_err(syscall("SO_REUSEPORT"))?;
        }
        if addr.is_ipv6() {
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1i32)
                .map_err(syscall("IPV6_V6ONLY"))?;
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1i32)
                .map_err(syscall("IPV6_RECVTCLASS"))?;
            sys::setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1i32)
                .map_err(syscall("IPV6_RECVPKTINFO"))?;
        } else {
            sys::setsockopt(s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1i32).map_err(syscall("IP_RECVTOS"))?;
            sys::setsockopt(s, libc::IPPROTO_IP, libc::IP_PKTINFO, 1i32).map_err(syscall("IP_PKTINFO"))?;
        }
        sys::set_timeout(s, libc::SO_SNDTIMEO, SEND_TIMEOUT).map_err(syscall("SO_SNDTIMEO"))?;
        sys::grow_buffer(s, false, BUFFER_BYTES);
        sys::grow_buffer(s, true, BUFFER_BYTES);
        let raw = RawAddr::from(addr);
        // SAFETY: `raw.storage` holds a valid sockaddr of `raw.len` bytes, read by the kernel.
        let rc = unsafe { libc::bind(s.as_raw_fd(), (&raw const raw.storage).cast(), raw.len) };
        sys::cvt(rc).map_err(syscall("bind"))?;
        let mut name = RawAddr::empty();
        // SAFETY: the kernel writes at most `name.len` bytes into `name.storage` and the
        // length it wrote into `name.len`; both are ours for the call.
        let rc =
            unsafe { libc::getsockname(s.as_raw_fd(), (&raw mut name.storage).cast(), &raw mut name.len) };
        sys::cvt(rc).map_err(syscall("getsockname"))?;
        let local = name.socket_addr().ok_or(Error::Invalid {
            what: "bound address",
            value: obj,
            why: "the kernel reported no IP address",
        })?;
        // Probes: reading UDP_SEGMENT fails on kernels without UDP GSO (before 4.18).
        let gso = offload && sys::getsockopt_int(s, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        let gro = offload && sys::setsockopt(s, libc::SOL_UDP, libc::UDP_GRO, 1i32).is_ok();
        Ok(Self { fd, local, gso: AtomicBool::new(gso), gro })
    }

    /// Steers the datagrams arriving on this socket's `SO_REUSEPORT` group (the sockets bound
    /// to its address, numbered in the order they were bound) by the ESP sequence number in
    /// their bytes 4..8: runs of [`STEER_RUN`] consecutive numbers go to one socket, the
    /// runs round robin over the first `sockets` of the group. One peer's SA then spreads
    /// over every socket, where the kernel's hash of addresses and ports would keep it on
    /// one. Datagrams shorter than 8 bytes (NAT keepalives) go to the first socket. The
    /// program (classic BPF) is the group's; attaching it again replaces it.
    pub fn steer_by_esp_sequence(&self, sockets: u32) -> Result<()> {
        if sockets == 0 {
            return Err(Error::Invalid { what: "steering", value: "0 sockets".into(), why: "at least one" });
        }
        let insn = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
        // ld [4]; rsh #log2(run); mod #sockets; ret a. A load past the end makes the
        // program return 0: the first socket.
        let mut program = [
            insn(BPF_LD_W_ABS, 4),
            insn(BPF_ALU_RSH_K, STEER_RUN.trailing_zeros()),
            insn(BPF_ALU_MOD_K, sockets),
            insn(BPF_RET_A, 0),
        ];
        let fprog = libc::sock_fprog {
            len: u16::try_from(program.len()).unwrap_or(u16::MAX),
            filter: program.as_mut_ptr(),
        };
        sys::setsockopt(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_CBPF, fprog).map_err(
            |source| Error::Syscall {
                call: "SO_ATTACH_REUSEPORT_CBPF",
                object: self.local.to_string(),
                source,
            },
        )
    }

    /// The address and port the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The offloads in use now (GSO turns off for good when the kernel refuses a GSO send).
    pub fn offloads(&self) -> UdpOffloads {
        UdpOffloads { gso: self.gso.load(Ordering::Relaxed), gro: self.gro }
    }

    /// Buffers sized for this socket: 64 KiB each with GRO (a coalesced burst), else
    /// `max_datagram` bytes.
    pub fn recv_buffers(&self, messages: usize, max_datagram: usize) -> RecvBuffers {
        let size = if self.gro { 65_536 } else { max_datagram };
        RecvBuffers::new(messages, size)
    }

    /// Receives what is waiting, without blocking; returns the number of messages (GRO
    /// bursts count once; see [`RecvBuffers::datagrams`]). Our address falls back to the
    /// bound one where the kernel gave no `PKTINFO`.
    pub fn recv(&self, bufs: &mut RecvBuffers) -> io::Result<usize> {
        let n = mmsg::recv(self.fd.as_fd(), bufs)?;
        for i in 0..n {
            if let Some((m, _)) = bufs.message_mut(i) {
                m.local = m.local.or(Some(self.local.ip()));
            }
        }
        Ok(n)
    }

    /// Sends `packets` (UDP payloads), grouping runs of equal-sized datagrams to one peer
    /// into GSO sends where enabled.
    pub fn send<'a>(&self, packets: impl IntoIterator<Item = Outgoing<'a>>) -> SendReport {
        let tos = if self.local.is_ipv6() {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        mmsg::send(self.fd.as_fd(), packets, &SendMode { gso: Some(&self.gso), tos: Some(tos) })
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::poll;

    fn loopback_pair(offload: bool) -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), false, offload).unwrap();
        let b = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), false, offload).unwrap();
        (a, b)
    }

    /// Receives until `want` datagrams arrived or a second passed.
    fn collect(sock: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let mut bufs = sock.recv_buffers(MAX, 2048);
        let mut got = Vec::new();
        for _ in 0..50 {
            let _ = poll::wait_readable(&[sock.as_fd()], Duration::from_millis(20));
            sock.recv(&mut bufs).unwrap();
            got.extend(bufs.datagrams().map(|d| d.bytes.to_vec()));
            if got.len() >= want {
                break;
            }
        }
        got
    }

    const MAX: usize = crate::MAX_MESSAGES;

    #[test]
    fn esp_sequence_steering_spreads_one_peer_over_the_group_in_runs() {
        // Four sockets on one port, one sender: without steering the kernel's hash puts
        // every datagram on one socket; with it, numbers k go to socket (k / 32) % 4.
        let first = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), true, false).unwrap();
        let addr = first.local_addr();
        let mut group = vec![first];
        for _ in 1..4 {
            group.push(UdpSocket::bind(addr, true, false).unwrap());
        }
        group[0].steer_by_esp_sequence(4).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for k in 0u32..256 {
            let mut esp = [0u8; 24];
            esp[..4].copy_from_slice(&0x0102_0304u32.to_be_bytes());
            esp[4..8].copy_from_slice(&k.to_be_bytes());
            sender.send_to(&esp, addr).unwrap();
        }
        sender.send_to(&[0xff], addr).unwrap(); // a NAT keepalive: too short, socket 0
        for (i, sock) in group.iter().enumerate() {
            let want = if i == 0 { 65 } else { 64 };
            let got = collect(sock, want);
            let mut seqs: Vec<u32> = got
                .iter()
                .filter(|d| d.len() == 24)
                .map(|d| u32::from_be_bytes(d[4..8].try_into().unwrap()))
                .collect();
            seqs.sort_unstable();
            let expected: Vec<u32> = (0u32..256).filter(|k| (k / STEER_RUN) as usize % 4 == i).collect();
            assert_eq!(seqs, expected, "socket {i}");
            assert_eq!(got.iter().filter(|d| d.len() == 1).count(), usize::from(i == 0), "socket {i}");
        }
        assert!(matches!(group[0].steer_by_esp_sequence(0), Err(Error::Invalid { .. })));
    }

    #[test]
    fn offloads_print_what_is_on() {
        assert_eq!(UdpOffloads { gso: true, gro: true }.to_string(), "gso+gro");
        assert_eq!(UdpOffloads::default().to_string(), "none");
    }

    #[test]
    fn batches_cross_loopback_with_and_without_offloads() {
        for offload in [false, true] {
            let (a, b) = loopback_pair(offload);
            // 40 equal datagrams and a short one (one GSO group when enabled), then others.
            let mut payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1200]).collect();
            payloads.push(vec![0xee; 300]);
            payloads.push(vec![0xdd; 1300]);
            let dst = b.local_addr();
            let r = a.send(payloads.iter().map(|p| Outgoing { dst, tos: 0, bytes: p }));
            assert_eq!((r.sent, r.failed), (42, 0), "offload {offload}: {r:?}");
            if a.offloads().gso {
                assert!(r.messages < 42, "GSO grouped the equal datagrams: {r:?}");
            }
            let got = collect(&b, 42);
            assert_eq!(got, payloads, "offload {offload}, {}", b.offloads());
        }
    }

    #[test]
    fn the_sender_and_tos_are_reported() {
        let (a, b) = loopback_pair(true);
        let r = a.send([Outgoing { dst: b.local_addr(), tos: 0x02, bytes: b"esp" }]);
        assert_eq!(r.sent, 1);
        let mut bufs = b.recv_buffers(4, 2048);
        for _ in 0..50 {
            let _ = poll::wait_readable(&[b.as_fd()], Duration::from_millis(20));
            if b.recv(&mut bufs).unwrap() > 0 {
                break;
            }
        }
        let d = bufs.datagrams().next().unwrap();
        assert_eq!(d.remote, a.local_addr());
        assert_eq!(d.local, Some(b.local_addr().ip()));
        assert_eq!(d.tos & 0x03, 0x02, "ECN bits survive");
        assert_eq!(d.bytes, b"esp");
    }
}
