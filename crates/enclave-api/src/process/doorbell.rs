//! Doorbells: non-blocking eventfds, rung only when the other side said it is asleep.
//!
//! A sleeper sets its "sleeping" flag in the control block, issues a full fence, re-checks
//! its ring, and only then waits here; a producer publishes its entries (stamps), issues a full
//! fence, and rings only if the flag is set. One of the two always sees the other's store,
//! so no wake-up is lost, and a busy peer costs no system call at all.
#![allow(unsafe_code)]

use super::ProcessError;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// One eventfd.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    /// A new doorbell (close-on-exec; the host clears that only in the child it starts).
    pub fn new() -> Result<Self, ProcessError> {
        // SAFETY: plain syscall with constant flags.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(ProcessError::last_os("eventfd"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(raw) } })
    }

    /// Wraps an inherited descriptor after checking that it is an eventfd, and makes it
    /// non-blocking (waits go through [`wait`], never through a blocking read).
    pub fn from_fd(fd: OwnedFd) -> Result<Self, ProcessError> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| {
            ProcessError::Os { what: "readlink(doorbell)", errno: e.raw_os_error().unwrap_or(0) }
        })?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(ProcessError::Args { why: "doorbell descriptor is not an eventfd" });
        }
        // SAFETY: plain syscalls on a descriptor we own.
        let ok = unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(ProcessError::last_os("fcntl(doorbell O_NONBLOCK)"));
        }
        Ok(Self { fd })
    }

    /// Rings: adds 1 to the counter. A full counter (`EAGAIN`) is already ringing.
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to a descriptor we own.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Clears the counter (non-blocking; `EAGAIN` means it was clear).
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from a descriptor we own.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
    }

    /// The descriptor, to wait on or to pass to the child.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until one of `fds` is readable, or `timeout` passes (`None`: forever). Returns a
/// bit mask of the readable (or hung-up) ones; 0 on timeout or on a signal.
pub fn wait(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Result<u32, ProcessError> {
    let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; 4];
    let n = fds.len().min(pfds.len());
    for (p, fd) in pfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    }
    let ms = match timeout {
        None => -1,
        Some(d) => libc::c_int::try_from(d.as_millis()).unwrap_or(libc::c_int::MAX),
    };
    // SAFETY: `pfds[..n]` is a live, writable array of `n` pollfd structs.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, ms) };
    if r < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno == libc::EINTR {
            return Ok(0);
        }
        return Err(ProcessError::Os { what: "poll", errno });
    }
    let mut mask = 0u32;
    for (i, p) in pfds.iter().take(n).enumerate() {
        if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            mask |= 1 << i;
        }
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rung_doorbell_wakes_the_waiter_once_drained_it_sleeps() {
        let d = Doorbell::new().unwrap();
        assert_eq!(wait(&[d.fd()], Some(Duration::ZERO)).unwrap(), 0);
        d.ring();
        d.ring();
        assert_eq!(wait(&[d.fd()], Some(Duration::from_millis(100))).unwrap(), 1);
        d.drain();
        assert_eq!(wait(&[d.fd()], Some(Duration::ZERO)).unwrap(), 0);
        d.drain(); // draining an empty doorbell does not block
    }

    #[test]
    fn an_inherited_descriptor_must_be_an_eventfd() {
        let d = Doorbell::new().unwrap();
        let dup = d.fd().try_clone_to_owned().unwrap();
        assert!(Doorbell::from_fd(dup).is_ok());
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(matches!(Doorbell::from_fd(f.into()), Err(ProcessError::Args { .. })));
    }
}
