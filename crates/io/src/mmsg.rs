//! Batched datagram I/O shared by the UDP and raw ESP sockets: `recvmmsg` into
//! [`RecvBuffers`] with the ancillary data parsed (sender, our address, TOS / traffic class,
//! GRO segment size), and `sendmmsg` of [`Outgoing`] packets, grouped for UDP GSO.
//!
//! The `mmsghdr`/`iovec` arrays hold raw pointers into the buffers, so they are built on
//! the stack for each call and never outlive it; the buffers themselves are plain bytes.

use core::mem::{size_of, zeroed};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sys::{self, RawAddr};

/// The most messages one `recvmmsg`/`sendmmsg` call carries.
pub const MAX_MESSAGES: usize = 64;
/// Room for the ancillary data of one message: a few `cmsghdr`s with small payloads.
const CONTROL_LEN: usize = 256;
/// The most datagrams of one UDP GSO send (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// The most payload bytes of one UDP GSO send (below 64 KiB less IPv6 and UDP headers).
const GSO_MAX_BYTES: usize = 65_000;

/// A control buffer, aligned for `cmsghdr` (which holds a `size_t`).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

/// What was learnt about one received message.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meta {
    /// The sender (port 0 for raw sockets); `None` drops the message.
    pub(crate) remote: Option<SocketAddr>,
    /// Our address it was sent to, from `IP_PKTINFO`/`IPV6_PKTINFO` or the IPv4 header.
    pub(crate) local: Option<IpAddr>,
    /// The TOS / traffic class byte (DSCP and ECN).
    pub(crate) tos: u8,
    /// Where the payload starts in the message's buffer.
    pub(crate) start: usize,
    /// How long it is.
    pub(crate) len: usize,
    /// GRO: the size of each coalesced datagram (0: one datagram).
    pub(crate) segment: usize,
    /// The message did not fit its buffer (`MSG_TRUNC`/`MSG_CTRUNC`): dropped.
    pub(crate) truncated: bool,
}

/// Buffers for one batched receive: `messages` buffers of `size` bytes each.
pub struct RecvBuffers {
    data: Vec<u8>,
    size: usize,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<Control>,
    meta: Vec<Meta>,
    received: usize,
}

impl core::fmt::Debug for RecvBuffers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvBuffers")
            .field("messages", &self.meta.len())
            .field("size", &self.size)
            .field("received", &self.received)
            .finish()
    }
}

/// One received datagram (one GRO segment counts as one).
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// The sender (port 0 for raw ESP).
    pub remote: SocketAddr,
    /// Our address it was sent to, where known.
    pub local: Option<IpAddr>,
    /// The TOS / traffic class byte.
    pub tos: u8,
    /// The payload: UDP payload, or ESP for raw sockets.
    pub bytes: &'a [u8],
}

impl RecvBuffers {
    /// `messages` buffers (at most [`MAX_MESSAGES`]) of `size` bytes each. For UDP with GRO,
    /// `size` must hold a coalesced burst (64 KiB), else the burst is truncated and dropped.
    pub fn new(messages: usize, size: usize) -> Self {
        let messages = messages.clamp(1, MAX_MESSAGES);
        let size = size.max(1);
        Self {
            data: vec![0; messages * size],
            size,
            // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
            names: vec![unsafe { zeroed() }; messages],
            controls: vec![Control([0; CONTROL_LEN]); messages],
            meta: vec![Meta::default(); messages],
            received: 0,
        }
    }

    /// How many messages one receive can take.
    pub fn capacity(&self) -> usize {
        self.meta.len()
    }

    /// Messages the last receive got (a GRO message may hold several datagrams).
    pub fn messages(&self) -> usize {
        self.received
    }

    /// Messages of the last receive dropped because they did not fit their buffer or had
    /// no usable sender.
    pub fn dropped(&self) -> usize {
        self.meta.iter().take(self.received).filter(|m| m.truncated || m.remote.is_none()).count()
    }

    /// The datagrams of the last receive, GRO bursts cut into their datagrams.
    pub fn datagrams(&self) -> impl Iterator<Item = Datagram<'_>> + '_ {
        self.meta.iter().take(self.received).enumerate().flat_map(move |(i, m)| {
            let remote = if m.truncated { None } else { m.remote };
            let bytes = remote
                .and_then(|_| {
                    let start = i.checked_mul(self.size)?.checked_add(m.start)?;
                    self.data.get(start..start.checked_add(m.len)?)
                })
                .unwrap_or(&[]);
            let seg = if m.segment == 0 { bytes.len().max(1) } else { m.segment };
            // An empty datagram is still one datagram (the caller counts it as a drop);
            // `chunks` of an empty slice would make it vanish uncounted.
            let count =
                if bytes.is_empty() { usize::from(remote.is_some()) } else { bytes.len().div_ceil(seg) };
            (0..count).filter_map(move |k| {
                let chunk = bytes
                    .get(k.checked_mul(seg)?..bytes.len().min(k.saturating_add(1).saturating_mul(seg)))?;
                Some(Datagram { remote: remote?, local: m.local, tos: m.tos, bytes: chunk })
            })
        })
    }

    /// Message `i`'s bytes and metadata, for a socket to normalise.
    pub(crate) fn message_mut(&mut self, i: usize) -> Option<(&mut Meta, &[u8])> {
        let start = i.checked_mul(self.size)?;
        let buf = self.data.get(start..start.checked_add(self.size)?)?;
        Some((self.meta.get_mut(i)?, buf))
    }
}

/// Reads the ancillary data of one received message into `meta`.
fn parse_control(control: &[u8], meta: &mut Meta) {
    // SAFETY: CMSG_LEN is a pure computation on its argument (the libc fn is only unsafe
    // for historical reasons).
    let header = unsafe { libc::CMSG_LEN(0) } as usize;
    let mut at = 0usize;
    while let Some(h) = control.get(at..at + size_of::<libc::cmsghdr>()) {
        // SAFETY: `h` is exactly size_of::<cmsghdr>() initialised bytes; cmsghdr is plain
        // old data, and read_unaligned needs no alignment.
        let cmsg = unsafe { ptr::read_unaligned(h.as_ptr().cast::<libc::cmsghdr>()) };
        let len = cmsg.cmsg_len as usize;
        if len < header {
            break;
        }
        let Some(data) = control.get(at + header..at + len) else { break };
        let int = || data.get(..4).and_then(|b| b.try_into().ok()).map(i32::from_ne_bytes);
        match (cmsg.cmsg_level, cmsg.cmsg_type) {
            (libc::SOL_UDP, libc::UDP_GRO) => {
                meta.segment = int().and_then(|v| usize::try_from(v).ok()).unwrap_or(0);
            }
            (libc::IPPROTO_IP, libc::IP_TOS) => meta.tos = data.first().copied().unwrap_or(0),
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                meta.tos = int().and_then(|v| u8::try_from(v & 0xff).ok()).unwrap_or(0);
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                // struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
                if let Some(a) = data.get(8..12).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
                    meta.local = Some(IpAddr::V4(Ipv4Addr::from(a)));
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                // struct in6_pktinfo { in6_addr addr; unsigned ifindex; }
                if let Some(a) = data.get(..16).and_then(|b| <[u8; 16]>::try_from(b).ok()) {
                    meta.local = Some(IpAddr::V6(Ipv6Addr::from(a)));
                }
            }
            _ => {}
        }
        // CMSG_ALIGN: the next header starts at a size_t boundary.
        let align = size_of::<usize>();
        at += len.div_ceil(align) * align;
    }
}

/// One `recvmmsg` (non-blocking) into `bufs`; returns how many messages arrived (0 when
/// none was waiting).
pub(crate) fn recv(fd: BorrowedFd<'_>, bufs: &mut RecvBuffers) -> io::Result<usize> {
    bufs.received = 0;
    let n = bufs.meta.len().min(MAX_MESSAGES);
    // SAFETY: iovec and mmsghdr are plain old data (pointers and integers); all-zero
    // (null pointers, zero lengths) is valid.
    let mut iov: [libc::iovec; MAX_MESSAGES] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_MESSAGES] = unsafe { zeroed() };
    let base = bufs.data.as_mut_ptr();
    for i in 0..n {
        let (Some(v), Some(h), Some(name), Some(control)) =
            (iov.get_mut(i), hdrs.get_mut(i), bufs.names.get_mut(i), bufs.controls.get_mut(i))
        else {
            break;
        };
        // `data` holds `n * size` bytes (RecvBuffers::new), so buffer i is inside it.
        v.iov_base = base.wrapping_add(i * bufs.size).cast();
        v.iov_len = bufs.size;
        h.msg_hdr.msg_name = (&raw mut *name).cast();
        h.msg_hdr.msg_namelen = sys::socklen::<libc::sockaddr_storage>();
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
        h.msg_hdr.msg_controllen = CONTROL_LEN;
    }
    let vlen = libc::c_uint::try_from(n).unwrap_or(0);
    // SAFETY: each of the first `n` headers points to one iovec over its own `size`-byte
    // slice of `bufs.data`, to its own sockaddr_storage and its own control buffer, with
    // lengths saying their sizes; all are borrowed mutably for the call and the kernel
    // writes only within those lengths. MSG_DONTWAIT makes the call return at once.
    let rc = unsafe {
        libc::recvmmsg(fd.as_raw_fd(), hdrs.as_mut_ptr(), vlen, libc::MSG_DONTWAIT, ptr::null_mut())
    };
    let got = match sys::cvt(rc) {
        Ok(k) => usize::try_from(k).unwrap_or(0),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
        Err(e) => return Err(e),
    };
    for (i, h) in hdrs.iter().enumerate().take(got.min(n)) {
        let mut m = Meta { len: (h.msg_len as usize).min(bufs.size), ..Meta::default() };
        m.truncated = h.msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
        if let Some(name) = bufs.names.get(i) {
            m.remote = sys::to_socket_addr(name, h.msg_hdr.msg_namelen);
        }
        let clen = h.msg_hdr.msg_controllen.min(CONTROL_LEN);
        if let Some(c) = bufs.controls.get(i) {
            parse_control(c.0.get(..clen).unwrap_or(&[]), &mut m);
        }
        if let Some(slot) = bufs.meta.get_mut(i) {
            *slot = m;
        }
    }
    bufs.received = got.min(n);
    Ok(bufs.received)
}

/// One packet to send.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Where to (the port is ignored by raw sockets).
    pub dst: SocketAddr,
    /// The TOS / traffic class byte to send with (UDP; raw sockets carry it in the header).
    pub tos: u8,
    /// The bytes: UDP payload, or a whole IP packet for raw sockets.
    pub bytes: &'a [u8],
}

/// What one send call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendReport {
    /// Packets the kernel took.
    pub sent: usize,
    /// Packets refused (counted as drops by the caller).
    pub failed: usize,
    /// Messages (syscall units): fewer than `sent` when GSO grouped them.
    pub messages: usize,
    /// The kind of the last error, if any.
    pub last_error: Option<io::ErrorKind>,
}

/// How a socket sends.
#[derive(Debug)]
pub(crate) struct SendMode<'a> {
    /// UDP GSO allowed (cleared for good when the kernel refuses a GSO send).
    pub(crate) gso: Option<&'a AtomicBool>,
    /// The cmsg carrying the TOS byte: `(level, type)`, or `None` for raw sockets.
    pub(crate) tos: Option<(libc::c_int, libc::c_int)>,
}

/// Writes one cmsg with a `T` payload at `at` in `control`; returns the next offset.
fn put_cmsg<T: Copy>(
    control: &mut Control,
    at: usize,
    level: libc::c_int,
    ty: libc::c_int,
    value: T,
) -> usize {
    let size = libc::c_uint::try_from(size_of::<T>()).unwrap_or(0);
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure computations on their argument.
    let (space, len) = unsafe { (libc::CMSG_SPACE(size) as usize, libc::CMSG_LEN(size) as usize) };
    // SAFETY: as above.
    let header = unsafe { libc::CMSG_LEN(0) } as usize;
    if at + space > CONTROL_LEN {
        return at;
    }
    // SAFETY: cmsghdr is plain old data; all-zero is valid.
    let mut h: libc::cmsghdr = unsafe { zeroed() };
    h.cmsg_len = len as _;
    h.cmsg_level = level;
    h.cmsg_type = ty;
    let base = control.0.as_mut_ptr();
    // SAFETY: `at + space <= CONTROL_LEN` was checked, and space covers the header and the
    // payload at `at + header`: both writes stay inside `control`, which we borrow mutably.
    unsafe {
        ptr::write_unaligned(base.add(at).cast::<libc::cmsghdr>(), h);
        ptr::write_unaligned(base.add(at + header).cast::<T>(), value);
    }
    at + space
}

/// Sends `items` with as few `sendmmsg` calls as it takes; never blocks longer than the
/// socket's send timeout.
pub(crate) fn send<'a>(
    fd: BorrowedFd<'_>,
    items: impl IntoIterator<Item = Outgoing<'a>>,
    mode: &SendMode<'_>,
) -> SendReport {
    let mut report = SendReport::default();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        send_chunk(fd, &mut items, mode, &mut report);
    }
    report
}

/// A group of iovecs sent as one message.
#[derive(Debug, Clone, Copy, Default)]
struct Group {
    first_iov: usize,
    count: usize,
}

fn send_chunk<'a, I: Iterator<Item = Outgoing<'a>>>(
    fd: BorrowedFd<'_>,
    items: &mut core::iter::Peekable<I>,
    mode: &SendMode<'_>,
    report: &mut SendReport,
) {
    const MAX_IOV: usize = MAX_MESSAGES * 4;
    // SAFETY: iovec, mmsghdr are plain old data; all-zero is valid.
    let mut iov: [libc::iovec; MAX_IOV] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_MESSAGES] = unsafe { zeroed() };
    let mut names = [RawAddr::empty(); MAX_MESSAGES];
    let mut controls = [Control([0; CONTROL_LEN]); MAX_MESSAGES];
    let mut groups = [Group::default(); MAX_MESSAGES];
    let gso = mode.gso.is_some_and(|g| g.load(Ordering::Relaxed));
    let (mut n_msg, mut n_iov) = (0usize, 0usize);
    while n_msg < MAX_MESSAGES && n_iov < MAX_IOV {
        let Some(first) = items.next() else { break };
        let seg = first.bytes.len();
        let mut g = Group { first_iov: n_iov, count: 1 };
        let mut total = seg;
        if let Some(v) = iov.get_mut(n_iov) {
            v.iov_base = first.bytes.as_ptr().cast_mut().cast();
            v.iov_len = seg;
        }
        n_iov += 1;
        // UDP GSO: equal-sized datagrams to one destination with one TOS; a shorter one
        // may end the group (the kernel cuts the last segment short).
        while gso && g.count < GSO_MAX_SEGMENTS && n_iov < MAX_IOV {
            let Some(next) = items.peek() else { break };
            let l = next.bytes.len();
            if next.dst != first.dst
                || next.tos != first.tos
                || l > seg
                || l == 0
                || total + l > GSO_MAX_BYTES
            {
                break;
            }
            if let Some(v) = iov.get_mut(n_iov) {
                v.iov_base = next.bytes.as_ptr().cast_mut().cast();
                v.iov_len = l;
            }
            n_iov += 1;
            g.count += 1;
            total += l;
            let _ = items.next();
            if l < seg {
                break;
            }
        }
        let (Some(h), Some(name), Some(control), Some(slot)) =
            (hdrs.get_mut(n_msg), names.get_mut(n_msg), controls.get_mut(n_msg), groups.get_mut(n_msg))
        else {
            break;
        };
        *name = RawAddr::from(first.dst);
        let mut clen = 0;
        if g.count > 1 {
            let s = u16::try_from(seg).unwrap_or(u16::MAX);
            clen = put_cmsg(control, clen, libc::SOL_UDP, libc::UDP_SEGMENT, s);
        }
        if let Some((level, ty)) = mode.tos {
            if first.tos != 0 {
                clen = put_cmsg(control, clen, level, ty, libc::c_int::from(first.tos));
            }
        }
        h.msg_hdr.msg_name = (&raw mut name.storage).cast();
        h.msg_hdr.msg_namelen = name.len;
        h.msg_hdr.msg_iov = iov.as_mut_ptr().wrapping_add(g.first_iov);
        h.msg_hdr.msg_iovlen = g.count;
        if clen > 0 {
            h.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = clen;
        }
        *slot = g;
        n_msg += 1;
    }
    let mut done = 0usize;
    while done < n_msg {
        let rest = libc::c_uint::try_from(n_msg - done).unwrap_or(0);
        // SAFETY: headers done..n_msg each point to their own name, control buffer and a
        // range of `iov` (first_iov..first_iov+count, inside the array), whose iovecs point
        // into the `bytes` of items borrowed for this call; the kernel only reads them.
        let rc = unsafe { libc::sendmmsg(fd.as_raw_fd(), hdrs.as_mut_ptr().wrapping_add(done), rest, 0) };
        match sys::cvt(rc) {
            Ok(k) if k > 0 => {
                let k = usize::try_from(k).unwrap_or(0);
                for g in groups.iter().skip(done).take(k) {
                    report.sent += g.count;
                    report.messages += 1;
                }
                done += k;
            }
            result => {
                let err = result.err().unwrap_or_else(|| io::Error::from(io::ErrorKind::WriteZero));
                let Some(g) = groups.get(done).copied() else { break };
                if g.count > 1 && gso_refused(&err) {
                    // The kernel refuses GSO on this path: fall back for good, and send
                    // this group's datagrams one by one.
                    if let Some(flag) = mode.gso {
                        flag.store(false, Ordering::Relaxed);
                    }
                    resend_singly(fd, &hdrs, &iov, done, g, report);
                } else {
                    report.failed += g.count;
                    report.last_error = Some(err.kind());
                }
                done += 1;
            }
        }
    }
}

/// Whether a GSO send failed because of GSO itself (no checksum offload on the route,
/// an XFRM path, or an old kernel).
fn gso_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT))
}

fn resend_singly(
    fd: BorrowedFd<'_>,
    hdrs: &[libc::mmsghdr],
    iov: &[libc::iovec],
    m: usize,
    g: Group,
    report: &mut SendReport,
) {
    let Some(h) = hdrs.get(m) else { return };
    for j in g.first_iov..g.first_iov + g.count {
        let Some(v) = iov.get(j) else { break };
        let mut one = *v;
        let mut msg = h.msg_hdr;
        msg.msg_iov = &raw mut one;
        msg.msg_iovlen = 1;
        // No ancillary data: without UDP_SEGMENT, and (a rare fallback) with the socket's
        // default TOS rather than re-encoding the TOS cmsg.
        msg.msg_control = ptr::null_mut();
        msg.msg_controllen = 0;
        // SAFETY: `msg` points to the same name as the group's header and to `one`, a copy
        // of an iovec into bytes borrowed by our caller for the call; the kernel only reads.
        let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &raw const msg, 0) };
        match sys::cvt_len(rc) {
            Ok(_) => {
                report.sent += 1;
                report.messages += 1;
            }
            Err(e) => {
                report.failed += 1;
                report.last_error = Some(e.kind());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_are_parsed() {
        let mut c = Control([0; CONTROL_LEN]);
        let mut at = put_cmsg(&mut c, 0, libc::SOL_UDP, libc::UDP_GRO, 1400i32);
        at = put_cmsg(&mut c, at, libc::IPPROTO_IP, libc::IP_TOS, 0x2au8);
        let pktinfo: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 198, 18, 0, 1];
        at = put_cmsg(&mut c, at, libc::IPPROTO_IP, libc::IP_PKTINFO, pktinfo);
        let mut m = Meta::default();
        parse_control(&c.0[..at], &mut m);
        assert_eq!(m.segment, 1400);
        assert_eq!(m.tos, 0x2a);
        assert_eq!(m.local, Some("198.18.0.1".parse().unwrap()));
        // A length pointing past the buffer ends the parse without a panic.
        let mut bad = Control([0xff; CONTROL_LEN]);
        parse_control(&bad.0, &mut m);
        bad.0[..8].copy_from_slice(&4usize.to_ne_bytes());
        parse_control(&bad.0, &mut m);
    }

    #[test]
    fn gro_bursts_are_cut_into_datagrams() {
        let mut b = RecvBuffers::new(2, 4000);
        b.data[..3000].iter_mut().enumerate().for_each(|(i, x)| *x = u8::try_from(i % 200).unwrap());
        let remote = Some("198.18.0.2:4500".parse().unwrap());
        b.meta[0] = Meta { remote, len: 2500, segment: 1000, ..Meta::default() };
        b.meta[1] = Meta { remote, len: 10, truncated: true, ..Meta::default() };
        b.received = 2;
        let d: Vec<_> = b.datagrams().map(|d| d.bytes.len()).collect();
        assert_eq!(d, [1000, 1000, 500]);
        assert_eq!(b.dropped(), 1);
    }

    #[test]
    fn an_empty_datagram_is_still_one() {
        let mut b = RecvBuffers::new(2, 100);
        let remote = Some("198.18.0.2:4500".parse().unwrap());
        b.meta[0] = Meta { remote, len: 0, ..Meta::default() };
        b.meta[1] = Meta { remote, len: 0, segment: 1000, ..Meta::default() };
        b.received = 2;
        let d: Vec<_> = b.datagrams().map(|d| d.bytes.len()).collect();
        assert_eq!(d, [0, 0]);
    }

    #[test]
    fn capacity_is_the_message_count_clamped() {
        assert_eq!(RecvBuffers::new(8, 100).capacity(), 8);
        assert_eq!(RecvBuffers::new(0, 100).capacity(), 1);
        assert_eq!(RecvBuffers::new(MAX_MESSAGES + 1, 1).capacity(), MAX_MESSAGES);
    }
}
