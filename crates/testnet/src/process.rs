//! Supervised processes: started by the harness, ended by it, by PID.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// How long a process gets between `SIGTERM` and `SIGKILL`.
const GRACE: Duration = Duration::from_secs(3);

/// A process the harness started; it is terminated when this is dropped.
///
/// The process leads its own process group (spawned with `process_group(0)`), so signals
/// go to `-pid`: the process and any helpers it forked, and nothing the harness did not start.
#[derive(Debug)]
pub struct Process {
    child: Child,
    label: String,
    log: PathBuf,
}

impl Process {
    pub(crate) fn new(child: Child, label: String, log: PathBuf) -> Self {
        Self { child, label, log }
    }

    /// The PID of the process (and of its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Path of the file collecting its standard output and error.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What it has printed so far (lossily decoded; empty if nothing yet).
    pub fn log(&self) -> String {
        std::fs::read(&self.log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// Whether it is still running (reaping it if it has exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until its log contains `needle`, failing early if it exits.
    pub fn wait_for_log(&mut self, needle: &str, limit: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.log().contains(needle) {
                return Ok(());
            }
            if !self.is_running() {
                return Err(Error::Failed {
                    command: self.label.clone(),
                    status: "exited before printing the awaited line".to_owned(),
                    stderr: tail(&self.log(), 2000),
                });
            }
            if start.elapsed() >= limit {
                return Err(Error::Timeout {
                    command: format!("{}: wait for {needle:?}", self.label),
                    limit,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` to its process group.
    pub fn signal(&self, signal: i32) -> Result<()> {
        let pgid = pid_t(self.pid())?;
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; the target is
        // the process group this harness created for its own child (pgid == child PID), which
        // cannot be reused by another group while the unreaped child still exists.
        let rc = unsafe { libc::kill(-pgid, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::Io {
                what: format!("signal {signal} to {}", self.label),
                source: std::io::Error::last_os_error(),
            })
        }
    }

    /// Terminates it: `SIGTERM`, then `SIGKILL` after a grace period; returns its log.
    pub fn stop(mut self) -> String {
        self.terminate();
        self.log()
    }

    fn terminate(&mut self) {
        if !self.is_running() {
            // Helpers it forked may outlive it; they are still in its group.
            let _ = self.signal(libc::SIGKILL);
            return;
        }
        let _ = self.signal(libc::SIGTERM);
        let start = Instant::now();
        while self.is_running() && start.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.signal(libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.terminate();
    }
}

fn pid_t(pid: u32) -> Result<libc::pid_t> {
    libc::pid_t::try_from(pid).map_err(|_| Error::Invalid { what: "pid", value: pid.to_string() })
}

/// Whether the effective user is root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The last `max` bytes of `s`, cut at a character boundary.
pub(crate) fn tail(s: &str, max: usize) -> String {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_cuts_at_char_boundary() {
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("ab", 10), "ab");
    }
}
