//! TUN queues with the virtio-net header and offloads.
//!
//! A [`Tun`] is one layer-3 device with one queue per worker (`IFF_MULTI_QUEUE`): the kernel
//! spreads the packets it routes into the device over the queues by flow, and answers
//! written on a queue steer their flow's later packets to it. Every queue has
//! `IFF_NO_PI` (no packet-information prefix) and `IFF_VNET_HDR`: each read starts with a
//! [`VnetHeader`], which is what lets the kernel hand over TSO/USO super-packets and
//! packets whose checksum is still partial, instead of segmenting and checksumming each
//! one itself before the copy to user space.
//!
//! The offloads are probed from the largest set down, because `TUNSETOFFLOAD` refuses a
//! whole set when it knows one bit of it not (USO needs Linux 6.2), and reported as
//! [`TunOffloads`].

use core::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::sys::{self, cvt, cvt_len};
use crate::vnet::{VnetHeader, VNET_HDR_LEN};
use crate::{Error, Result};

/// The largest read from a queue: a 64 KiB super-packet and its virtio-net header.
pub const MAX_READ: usize = VNET_HDR_LEN + 65_535;

/// The offloads the kernel accepted for a TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TunOffloads {
    /// Partial checksums may be handed over (`TUN_F_CSUM`).
    pub csum: bool,
    /// TCP/IPv4 super-packets (`TUN_F_TSO4`).
    pub tso4: bool,
    /// TCP/IPv6 super-packets (`TUN_F_TSO6`).
    pub tso6: bool,
    /// UDP/IPv4 segmentation (`TUN_F_USO4`, Linux 6.2).
    pub uso4: bool,
    /// UDP/IPv6 segmentation (`TUN_F_USO6`, Linux 6.2).
    pub uso6: bool,
}

impl TunOffloads {
    /// The `TUNSETOFFLOAD` argument for this set.
    fn bits(&self) -> libc::c_uint {
        let mut b = 0;
        for (on, bit) in [
            (self.csum, libc::TUN_F_CSUM),
            (self.tso4, libc::TUN_F_TSO4),
            (self.tso6, libc::TUN_F_TSO6),
            (self.uso4, libc::TUN_F_USO4),
            (self.uso6, libc::TUN_F_USO6),
        ] {
            if on {
                b |= bit;
            }
        }
        b
    }

    /// Whether any super-packets may arrive.
    pub fn any_gso(&self) -> bool {
        self.tso4 || self.tso6 || self.uso4 || self.uso6
    }
}

impl fmt::Display for TunOffloads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.csum, "csum"),
            (self.tso4, "tso4"),
            (self.tso6, "tso6"),
            (self.uso4, "uso4"),
            (self.uso6, "uso6"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join("+"))
        }
    }
}

/// One queue of a TUN device: reads give a virtio-net header and a packet, writes take a
/// plain packet.
#[derive(Debug)]
pub struct TunQueue {
    fd: OwnedFd,
}

/// A TUN device and its queues; the device disappears when the last queue is closed.
#[derive(Debug)]
pub struct Tun {
    name: String,
    queues: Vec<TunQueue>,
    offloads: TunOffloads,
}

/// Opens `/dev/net/tun` in the calling thread's namespace.
pub(crate) fn open_clone_device() -> io::Result<OwnedFd> {
    // SAFETY: the path is a NUL-terminated literal; open(2) returns a new descriptor or -1.
    let fd = cvt(unsafe {
        libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
    })?;
    // SAFETY: `fd` was just returned by open(2): open, and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches an open `/dev/net/tun` to the device `name` (creating it if needed) in the
/// namespace the descriptor was opened in.
fn attach(fd: &OwnedFd, name: &[libc::c_char; libc::IFNAMSIZ], multi_queue: bool) -> io::Result<String> {
    // SAFETY: ifreq is plain old data (a name array and a union of integers and addresses);
    // all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { core::mem::zeroed() };
    ifr.ifr_name = *name;
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
    if multi_queue {
        flags |= libc::IFF_MULTI_QUEUE;
    }
    // The flags are below 0x8000: they fit the c_short of ifr_flags.
    ifr.ifr_ifru.ifru_flags = libc::c_short::try_from(flags).unwrap_or(0);
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `ifr` is, on our stack
    // for the duration of the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &raw mut ifr) })?;
    Ok(sys::ifname_string(&ifr.ifr_name))
}

/// An ioctl taking a pointer to an `int` argument (`TUNSETVNETHDRSZ`, `TUNSETVNETLE`).
fn ioctl_int(fd: BorrowedFd<'_>, request: libc::Ioctl, value: libc::c_int) -> io::Result<()> {
    let v = value;
    // SAFETY: the request reads one int through the pointer, which points to `v` on our stack.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), request, &raw const v) }).map(drop)
}

/// `TUNSETOFFLOAD`, which takes the flags as the argument's value, not through a pointer.
fn set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD reads no memory: the flags are the third argument itself.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, libc::c_ulong::from(flags)) }).map(drop)
}

impl Tun {
    /// Creates (or attaches to) the TUN device `name` with `queues` queues and, if
    /// `offload` is set, the largest set of offloads the kernel accepts, in the calling
    /// thread's namespace.
    pub fn open(name: &str, queues: usize, offload: bool) -> Result<Self> {
        let devices = (0..queues)
            .map(|_| open_clone_device())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|source| Error::Syscall { call: "open", object: "/dev/net/tun".into(), source })?;
        Self::open_on(devices, name, offload)
    }

    /// [`Self::open`] on descriptors of `/dev/net/tun` that are open already, one per
    /// queue: the device is made in the namespace they were opened in, which need not be
    /// this thread's ([`crate::netns::lend`]).
    pub fn open_on(devices: Vec<OwnedFd>, name: &str, offload: bool) -> Result<Self> {
        let raw = sys::ifname(name).ok_or_else(|| Error::Invalid {
            what: "TUN name",
            value: name.to_owned(),
            why: "1 to 15 bytes, no NUL or '/'",
        })?;
        let multi = devices.len() > 1;
        let mut devices = devices.into_iter();
        let Some(first) = devices.next() else {
            return Err(Error::Invalid { what: "TUN queues", value: "0".into(), why: "at least one" });
        };
        let actual = attach(&first, &raw, multi).map_err(|source| Error::Syscall {
            call: "TUNSETIFF",
            object: name.to_owned(),
            source,
        })?;
        let fd = first.as_fd();
        // The header is exactly the 10-byte `virtio_net_hdr` (no `num_buffers`).
        ioctl_int(fd, libc::TUNSETVNETHDRSZ, 10).map_err(|source| Error::Syscall {
            call: "TUNSETVNETHDRSZ",
            object: actual.clone(),
            source,
        })?;
        // Little-endian headers as in virtio 1.x; on a little-endian host the default is
        // the same, so a refusal there changes nothing.
        if let Err(source) = ioctl_int(fd, libc::TUNSETVNETLE, 1) {
            if cfg!(target_endian = "big") {
                return Err(Error::Syscall { call: "TUNSETVNETLE", object: actual, source });
            }
        }
        let offloads = if offload { Self::probe_offloads(fd) } else { Self::set_none(fd, &actual)? };
        let mut all = vec![TunQueue { fd: first }];
        let raw_actual = sys::ifname(&actual).unwrap_or(raw);
        for fd in devices {
            attach(&fd, &raw_actual, multi).map_err(|source| Error::Syscall {
                call: "TUNSETIFF",
                object: actual.clone(),
                source,
            })?;
            all.push(TunQueue { fd });
        }
        Ok(Self { name: actual, queues: all, offloads })
    }

    /// Tries the offload sets from the largest down; returns the first accepted.
    fn probe_offloads(fd: BorrowedFd<'_>) -> TunOffloads {
        let full = TunOffloads { csum: true, tso4: true, tso6: true, uso4: true, uso6: true };
        let tso = TunOffloads { uso4: false, uso6: false, ..full };
        let csum = TunOffloads { csum: true, ..TunOffloads::default() };
        for set in [full, tso, csum] {
            if set_offload(fd, set.bits()).is_ok() {
                return set;
            }
        }
        TunOffloads::default()
    }

    fn set_none(fd: BorrowedFd<'_>, name: &str) -> Result<TunOffloads> {
        set_offload(fd, 0).map_err(|source| Error::Syscall {
            call: "TUNSETOFFLOAD",
            object: name.to_owned(),
            source,
        })?;
        Ok(TunOffloads::default())
    }

    /// The device's name (the kernel's, if `name` had a `%d`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offloads the kernel accepted.
    pub fn offloads(&self) -> TunOffloads {
        self.offloads
    }

    /// The queues, one per worker.
    pub fn queues(&self) -> &[TunQueue] {
        &self.queues
    }

    /// Takes the queues out, to move one into each worker; the device lives while any is open.
    pub fn into_queues(self) -> Vec<TunQueue> {
        self.queues
    }
}

impl TunQueue {
    /// Reads one packet with its virtio-net header into `buf` (at least [`MAX_READ`] bytes
    /// for super-packets); `Ok(None)` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: read(2) writes at most `buf.len()` bytes into `buf`, which we borrow
        // mutably for the call.
        let rc = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match cvt_len(rc) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads one packet and splits off its header: `Ok(None)` when none is waiting,
    /// `Ok(Some(Err(len)))` for a read shorter than the header.
    pub fn read_packet<'b>(&self, buf: &'b mut [u8]) -> io::Result<Option<(VnetHeader, &'b [u8])>> {
        let Some(n) = self.read(buf)? else { return Ok(None) };
        let bytes = buf.get(..n).unwrap_or(&[]);
        match VnetHeader::parse(bytes) {
            Some(h) => Ok(Some((h, bytes.get(VNET_HDR_LEN..).unwrap_or(&[])))),
            None => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
        }
    }

    /// Writes one complete IP packet (checksums done, no GSO) behind a zero header.
    pub fn write(&self, packet: &[u8]) -> io::Result<()> {
        self.write_with(&VnetHeader::PLAIN, packet)
    }

    /// Writes one packet behind `header`: a super-packet for the kernel to cut (GSO), or a
    /// packet whose checksum it completes.
    pub fn write_with(&self, header: &VnetHeader, packet: &[u8]) -> io::Result<()> {
        let header = header.to_bytes();
        let iov = [
            libc::iovec { iov_base: header.as_ptr().cast_mut().cast(), iov_len: header.len() },
            libc::iovec { iov_base: packet.as_ptr().cast_mut().cast(), iov_len: packet.len() },
        ];
        // SAFETY: writev(2) only reads through the two iovecs, which point into `header`
        // and `packet`, both borrowed for the call; 2 is the array's length.
        let rc = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
        cvt_len(rc).map(drop)
    }
}

impl AsFd for TunQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_sets_print_their_members() {
        assert_eq!(TunOffloads::default().to_string(), "none");
        let t = TunOffloads { csum: true, tso4: true, tso6: true, uso4: false, uso6: false };
        assert_eq!(t.to_string(), "csum+tso4+tso6");
        assert!(t.any_gso());
        assert_eq!(t.bits(), libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6);
    }

    #[test]
    fn bad_names_are_refused_before_any_call() {
        assert!(matches!(Tun::open("", 1, true), Err(Error::Invalid { .. })));
        assert!(matches!(Tun::open("x", 0, true), Err(Error::Invalid { .. })));
    }
}
