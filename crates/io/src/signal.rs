//! Waiting for termination signals without a signal handler: the signals are blocked in
//! the calling thread (and so in every thread it starts afterwards) and fetched with
//! `sigtimedwait(2)`, in a loop the caller bounds with the timeout.

use std::io;
use std::time::Duration;

use crate::{Error, Result};

/// A set of blocked signals to wait for.
#[derive(Clone, Copy)]
pub struct Signals {
    set: libc::sigset_t,
}

impl core::fmt::Debug for Signals {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Signals")
    }
}

impl Signals {
    /// Blocks `signals` in the calling thread. Call it before starting other threads, so
    /// they inherit the mask and the signals stay pending for [`Signals::wait`].
    pub fn block(signals: &[libc::c_int]) -> Result<Self> {
        // SAFETY: sigset_t is plain old data; sigemptyset initialises it fully.
        let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t on our stack.
        unsafe { libc::sigemptyset(&raw mut set) };
        for &s in signals {
            // SAFETY: as above; sigaddset refuses invalid numbers with -1.
            if unsafe { libc::sigaddset(&raw mut set, s) } != 0 {
                return Err(Error::Invalid {
                    what: "signal",
                    value: s.to_string(),
                    why: "not a signal number",
                });
            }
        }
        // SAFETY: `set` is initialised; the old mask is not asked for (null).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, core::ptr::null_mut()) };
        if rc != 0 {
            let source = io::Error::from_raw_os_error(rc);
            return Err(Error::Syscall { call: "pthread_sigmask", object: "SIG_BLOCK".into(), source });
        }
        Ok(Self { set })
    }

    /// Blocks SIGINT and SIGTERM (see [`Signals::block`]).
    pub fn block_termination() -> Result<Self> {
        Self::block(&[libc::SIGINT, libc::SIGTERM])
    }

    /// The name of a signal number this module handles, for messages.
    pub fn name(signal: libc::c_int) -> &'static str {
        match signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            _ => "signal",
        }
    }

    /// Waits up to `timeout` for one of the signals; `Ok(None)` on timeout.
    pub fn wait(&self, timeout: Duration) -> io::Result<Option<libc::c_int>> {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos().min(999_999_999)),
        };
        // SAFETY: `self.set` is an initialised sigset_t; no siginfo is asked for (null);
        // `ts` is a valid timespec on our stack.
        let rc = unsafe { libc::sigtimedwait(&raw const self.set, core::ptr::null_mut(), &raw const ts) };
        if rc >= 0 {
            return Ok(Some(rc));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => Ok(None),
            _ => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_fetched_by_wait() {
        // In a thread of its own, so the test harness's other threads keep their masks.
        std::thread::spawn(|| {
            let s = Signals::block(&[libc::SIGUSR2]).unwrap();
            assert_eq!(s.wait(Duration::from_millis(10)).unwrap(), None);
            // SAFETY: raise(3) sends SIGUSR2 to this thread, where it is blocked.
            unsafe { libc::raise(libc::SIGUSR2) };
            assert_eq!(s.wait(Duration::from_secs(5)).unwrap(), Some(libc::SIGUSR2));
            assert!(Signals::block(&[12345]).is_err());
        })
        .join()
        .unwrap();
    }
}
