//! Bounded waiting: `poll(2)` over a few descriptors with a timeout, an eventfd that wakes
//! every worker at once for a prompt shutdown, and the timer slack that short naps need.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::sys::{cvt, cvt_len};
use crate::{Error, Result};

/// The most descriptors [`wait_readable`] watches.
pub const MAX_FDS: usize = 16;

/// Waits until one of `fds` (at most [`MAX_FDS`]) is readable or `timeout` passes; returns
/// a bit set of the readable ones (bit `i` for `fds[i]`), 0 on timeout or interruption.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<u32> {
    let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; MAX_FDS];
    let n = fds.len().min(MAX_FDS);
    for (p, fd) in pfds.iter_mut().zip(fds) {
        *p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    }
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let nfds = libc::nfds_t::try_from(n).unwrap_or(0);
    // SAFETY: poll(2) reads and writes `n` pollfd entries of `pfds`, an array of MAX_FDS >= n
    // entries on our stack.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), nfds, ms) };
    match cvt(rc) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
        Err(e) => return Err(e),
    }
    let mut set = 0u32;
    for (i, p) in pfds.iter().take(n).enumerate() {
        // Errors and hang-ups count as readable: the read reports them.
        if p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
            set |= 1 << i;
        }
    }
    Ok(set)
}

/// Sets the calling thread's timer slack: how much later than asked the kernel may end the
/// thread's sleeps. The default (50 µs) would stretch a nap of a few tens of microseconds
/// several times over.
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(slack.as_nanos()).unwrap_or(libc::c_ulong::MAX).max(1);
    let none: libc::c_ulong = 0;
    // SAFETY: PR_SET_TIMERSLACK takes its value by value and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, none, none, none) };
    cvt(rc).map(drop)
}

/// An eventfd: once notified it stays readable until [`EventFd::clear`], so every `poll`
/// that includes it returns at once until then (the stop event is never cleared).
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new, unnotified eventfd.
    pub fn new() -> Result<Self> {
        // SAFETY: eventfd(2) takes plain integers and returns a new descriptor or -1.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
            .map_err(|source| Error::Syscall { call: "eventfd", object: "stop event".into(), source })?;
        // SAFETY: `fd` was just returned by eventfd(2): open, and owned by nothing else.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Makes it readable.
    pub fn notify(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) reads the 8 bytes of `one`, on our stack for the call.
        let rc = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        cvt_len(rc).map(drop)
    }

    /// Makes it unreadable again (a wake-up event that was handled); never blocks.
    pub fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: read(2) writes at most the 8 bytes of `count`, on our stack for the call;
        // the descriptor is non-blocking, so an unnotified eventfd returns EAGAIN.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_wakes_a_wait_and_stays_readable() {
        let e = EventFd::new().unwrap();
        let other = EventFd::new().unwrap();
        let fds = [other.as_fd(), e.as_fd()];
        assert_eq!(wait_readable(&fds, Duration::from_millis(10)).unwrap(), 0);
        e.notify().unwrap();
        assert_eq!(wait_readable(&fds, Duration::from_secs(5)).unwrap(), 0b10);
        assert_eq!(wait_readable(&fds, Duration::from_secs(5)).unwrap(), 0b10);
        e.clear();
        assert_eq!(wait_readable(&fds, Duration::from_millis(10)).unwrap(), 0, "cleared");
        e.clear();
        e.notify().unwrap();
        assert_eq!(wait_readable(&fds, Duration::from_secs(5)).unwrap(), 0b10, "notified again");
    }

    /// The slack the kernel now applies to the calling thread's sleeps, in nanoseconds.
    fn timer_slack_ns() -> libc::c_int {
        let none: libc::c_ulong = 0;
        // SAFETY: PR_GET_TIMERSLACK returns the value and touches no memory of ours.
        unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, none, none, none, none) }
    }

    #[test]
    fn timer_slack_is_set_for_the_calling_thread_only_and_never_reset_by_zero() {
        let before = timer_slack_ns();
        std::thread::spawn(|| {
            set_timer_slack(Duration::from_micros(1)).unwrap();
            assert_eq!(timer_slack_ns(), 1000);
            // Zero would mean "back to the default" to the kernel: the smallest slack instead.
            set_timer_slack(Duration::ZERO).unwrap();
            assert_eq!(timer_slack_ns(), 1);
        })
        .join()
        .unwrap();
        assert_eq!(timer_slack_ns(), before, "another thread's slack is its own");
    }
}
