//! How the process backend fails, as every caller sees it, and the two hardening steps
//! every process that holds secrets takes first (the enclave process, the HSM agent).
#![allow(unsafe_code)] // two syscalls with integer arguments, each with its SAFETY note

/// How an enclave process ended, as the gateway saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitReport {
    /// It exited with this status code.
    Exited(i32),
    /// It was killed by this signal (`SIGSYS` = 31 means the seccomp filter stopped it).
    Signaled(i32),
    /// It is gone but its status could not be read.
    Unknown,
}

impl core::fmt::Display for ExitReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Exited(c) => write!(f, "exited with status {c}"),
            Self::Signaled(s) if *s == libc::SIGSYS => {
                write!(f, "killed by signal {s} (SIGSYS: a system call outside its seccomp filter)")
            }
            Self::Signaled(s) => write!(f, "killed by signal {s}"),
            Self::Unknown => f.write_str("gone, status unknown"),
        }
    }
}

/// Why the process backend failed: spawning, hardening, the transport, or the child's death.
/// Folded into [`crate::Error::Process`]; carries no key bytes, only numbers and reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// A system call failed.
    #[error("{what} failed (errno {errno})")]
    Os {
        /// The call or step.
        what: &'static str,
        /// `errno` as the kernel returned it.
        errno: i32,
    },
    /// The enclave process has died; every call fails with this until [`ProcessEnclave::restart`].
    #[error("enclave process {pid} {exit}")]
    Died {
        /// Its process ID.
        pid: u32,
        /// How it ended.
        exit: ExitReport,
    },
    /// The enclave process did not become ready in time.
    #[error("enclave process {pid} did not become ready within {millis} ms")]
    StartTimeout {
        /// Its process ID.
        pid: u32,
        /// The time allowed.
        millis: u64,
    },
    /// The enclave process did not answer a call in time (it is killed and reported dead).
    #[error("enclave process {pid} did not answer within {millis} ms")]
    CallTimeout {
        /// Its process ID.
        pid: u32,
        /// The time allowed.
        millis: u64,
    },
    /// The ring geometry is unusable.
    #[error("bad ring geometry: {why}")]
    Geometry {
        /// The rule it breaks.
        why: &'static str,
    },
    /// The guest's command line is wrong (it is built by the host, so this is a bug or an
    /// attempt to start the guest by hand).
    #[error("bad enclave-process arguments: {why}")]
    Args {
        /// What is wrong.
        why: &'static str,
    },
    /// The shared memory handed to the guest is not what the layout needs.
    #[error("shared memory refused: {why}")]
    SharedMemory {
        /// What is wrong.
        why: &'static str,
    },
    /// The other side broke the ring protocol (an answer that matches no request).
    #[error("ring protocol violation: {why}")]
    Protocol {
        /// What was seen.
        why: &'static str,
    },
    /// A serialized call argument or result does not decode.
    #[error("call encoding: {why}")]
    Codec {
        /// What is wrong.
        why: &'static str,
    },
    /// More descriptors would be in flight than the descriptor table holds, or more batches
    /// than the ring has slots (pipelined batches), or a synchronous call was made while
    /// pipelined batches are still in flight.
    #[error("{in_flight} descriptors in flight, {wanted} more asked for, descriptor table holds {capacity}")]
    RingBusy {
        /// Descriptors submitted and not yet completed.
        in_flight: u32,
        /// Descriptors the call wanted to add.
        wanted: u32,
        /// Entries of the descriptor table.
        capacity: u32,
    },
    /// The caller's packet buffer is larger than the shared packet area and is not it.
    #[error("packet buffer of {len} bytes does not fit the {area} byte shared packet area")]
    PacketsTooLarge {
        /// The caller's buffer length.
        len: usize,
        /// The packet area's length.
        area: usize,
    },
}

impl ProcessError {
    /// `Os` with the calling thread's current `errno`.
    pub fn last_os(what: &'static str) -> Self {
        Self::Os { what, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `PR_SET_DUMPABLE` 0, checked by reading it back.
pub fn non_dumpable() -> Result<(), ProcessError> {
    // SAFETY: prctl with integer arguments only.
    let set = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: as above.
    let now = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    if set != 0 || now != 0 {
        return Err(ProcessError::Os { what: "prctl(PR_SET_DUMPABLE, 0)", errno: errno() });
    }
    Ok(())
}

/// Locks every page of the process, present and future, in RAM. `MCL_ONFAULT` locks pages
/// as they are touched instead of populating every reserved mapping up front.
pub fn lock_memory() -> Result<(), ProcessError> {
    // SAFETY: mlockall with constant flags.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) } != 0 {
        return Err(ProcessError::Os { what: "mlockall", errno: errno() });
    }
    Ok(())
}
