//! One message with descriptors over a `SOCK_SEQPACKET` socket (SCM_RIGHTS), through
//! rustix's safe wrappers.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most descriptors one message carries (a LEND's reply: three sockets and a data plane's
/// TUN queues).
pub const MAX_FDS: usize = 3 + cio::netns::MAX_LENT_QUEUES;

/// Sends `bytes` and `fds` as one message.
pub fn send(socket: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && (fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds))) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let sent = sendmsg(socket, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(std::io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok(())
}

/// What [`recv`] got.
#[derive(Debug)]
pub enum Received {
    /// One whole message and the descriptors that came with it (close-on-exec).
    Message(usize, Vec<OwnedFd>),
    /// A message cut short (too long for `buf`, or too many descriptors): dropped, with
    /// whatever descriptors did arrive.
    Truncated,
    /// The other end closed.
    Closed,
}

/// Receives one message into `buf`.
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> std::io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match recvmsg(&socket, &mut [IoSliceMut::new(buf)], &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if got.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC) {
        return Ok(Received::Truncated);
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    Ok(Received::Message(got.bytes, fds))
}
