//! Hardening of the enclave process, in the order [`super::guest`] applies it:
//!
//! 1. [`non_dumpable`] first of all: no core file, and no same-uid `ptrace` or
//!    `/proc/PID/mem` access, before any key byte arrives.
//! 2. [`close_fds_except`]: nothing inherited by accident stays open.
//! 3. [`empty_network_namespace`]: the process can reach no network, even if compromised.
//! 4. [`lock_memory`]: every page, present and future, stays in RAM (never swapped out).
//! 5. [`SecretArena`] receives the root secret in `memfd_secret` memory (removed from the
//!    kernel's direct map and refused to `/proc/PID/mem`), or in `mlock`ed anonymous memory
//!    where the kernel offers no `memfd_secret`; zeroized on drop.
//! 6. [`install_seccomp`] last, once start-up is done: only what the ring loop needs.
#![allow(unsafe_code)]

use super::ProcessError;
pub use enclave_api::process::{lock_memory, non_dumpable};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Closes every descriptor except `keep` (and 0..=2, which the host points at /dev/null and
/// its own stderr), so nothing the gateway opened by accident stays reachable.
pub fn close_fds_except(keep: &[RawFd]) -> Result<(), ProcessError> {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&f| u32::try_from(f).ok()).collect();
    keep.extend([0, 1, 2]);
    keep.sort_unstable();
    keep.dedup();
    let mut from = 0u32;
    for &k in keep.iter().chain(core::iter::once(&u32::MAX)) {
        if k > from {
            let to = if k == u32::MAX { u32::MAX } else { k - 1 };
            // SAFETY: close_range closes descriptors this process owns; the ones still in
            // use (`keep`) are outside every range passed.
            let r = unsafe { libc::syscall(libc::SYS_close_range, from, to, 0u32) };
            if r != 0 {
                return Err(ProcessError::Os { what: "close_range", errno: errno() });
            }
        }
        from = k.saturating_add(1);
    }
    Ok(())
}

/// Moves the process into a new network namespace, which has only a `lo` that is down. Tries
/// `CLONE_NEWNET` (root), then stays in the namespace it was started in if that has no
/// device but `lo` (the platform made it), then `CLONE_NEWUSER | CLONE_NEWNET`
/// (unprivileged); returns whether the user namespace was needed. The process must still
/// be single-threaded.
pub fn empty_network_namespace() -> Result<bool, ProcessError> {
    // SAFETY: unshare with constant flags affects only this (single-threaded) process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
        return Ok(false);
    }
    // A platform that runs the enclave as a user of its own made a fresh namespace for it
    // before dropping to that user: a user namespace now would cost the process its
    // CAP_IPC_LOCK, which `mlockall` needs. Taken only if it has no device but loopback.
    if only_loopback() {
        return Ok(false);
    }
    // SAFETY: as above.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } == 0 {
        return Ok(true);
    }
    Err(ProcessError::Os { what: "unshare(CLONE_NEWNET)", errno: errno() })
}

/// Whether this process's network namespace has no device but `lo`.
fn only_loopback() -> bool {
    let Ok(dev) = std::fs::read_to_string("/proc/self/net/dev") else { return false };
    let names: Vec<&str> = dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
    names == ["lo"]
}

/// A pidfd for our parent, the gateway `expected`, which becomes readable when it exits:
/// the guest waits on it next to its doorbell and leaves with its keys when the gateway is
/// gone. Checked after opening, so a gateway that died during start-up (we would have been
/// re-parented, and would watch the wrong process) is noticed.
pub fn parent_pidfd(expected: u32) -> Result<OwnedFd, ProcessError> {
    let expected =
        libc::pid_t::try_from(expected).map_err(|_| ProcessError::Args { why: "bad parent pid" })?;
    // SAFETY: pidfd_open with a pid and no flags returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, expected, 0u32) };
    let raw = RawFd::try_from(raw).unwrap_or(-1);
    if raw < 0 {
        return Err(ProcessError::Os { what: "pidfd_open(parent)", errno: errno() });
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } != expected {
        return Err(ProcessError::Args { why: "the gateway is not our parent (it exited during start-up?)" });
    }
    Ok(fd)
}

/// Where a [`SecretArena`]'s pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretMemory {
    /// `memfd_secret(2)`: unmapped from the kernel's direct map, refused to
    /// `/proc/PID/mem` and `ptrace` even for root, never swapped.
    MemfdSecret,
    /// Anonymous memory with `mlock`, `MADV_DONTDUMP` and `MADV_WIPEONFORK`.
    Mlocked,
}

/// A small page-aligned arena for secrets, zeroized and unmapped on drop.
pub struct SecretArena {
    ptr: NonNull<u8>,
    len: usize,
    kind: SecretMemory,
    _fd: Option<OwnedFd>,
}

// SAFETY: the arena is private memory owned by this value; `&mut self` guards every write.
unsafe impl Send for SecretArena {}

impl core::fmt::Debug for SecretArena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SecretArena({} bytes, {:?})", self.len, self.kind)
    }
}

impl SecretArena {
    /// At least `len` bytes (rounded up to a page): `memfd_secret` if the kernel offers it,
    /// else locked anonymous memory.
    pub fn new(len: usize) -> Result<Self, ProcessError> {
        let len = len.max(1).div_ceil(4096) * 4096;
        match Self::memfd_secret(len) {
            Ok(a) => Ok(a),
            Err(_) => Self::mlocked(len),
        }
    }

    fn memfd_secret(len: usize) -> Result<Self, ProcessError> {
        // SAFETY: memfd_secret with flags 0 returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_memfd_secret, 0u32) };
        let raw = RawFd::try_from(raw).unwrap_or(-1);
        if raw < 0 {
            return Err(ProcessError::Os { what: "memfd_secret", errno: errno() });
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len).map_err(|_| ProcessError::Geometry { why: "arena" })?;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), size) } != 0 {
            return Err(ProcessError::Os { what: "ftruncate(memfd_secret)", errno: errno() });
        }
        // SAFETY: a fresh shared mapping of our secret memfd of exactly `len` bytes; the
        // kernel picks the address, so nothing existing is replaced.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ProcessError::Os { what: "mmap(memfd_secret)", errno: errno() });
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(ProcessError::Os { what: "mmap", errno: 0 })?;
        Ok(Self { ptr, len, kind: SecretMemory::MemfdSecret, _fd: Some(fd) })
    }

    fn mlocked(len: usize) -> Result<Self, ProcessError> {
        // SAFETY: a fresh private anonymous mapping at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ProcessError::Os { what: "mmap(secret arena)", errno: errno() });
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(ProcessError::Os { what: "mmap", errno: 0 })?;
        let arena = Self { ptr, len, kind: SecretMemory::Mlocked, _fd: None };
        // SAFETY: `p .. p + len` is the mapping made above.
        let locked = unsafe { libc::mlock(p, len) } == 0;
        if !locked {
            return Err(ProcessError::Os { what: "mlock(secret arena)", errno: errno() });
        }
        // SAFETY: advice on our own mapping; failure only loses the extra protection.
        unsafe {
            libc::madvise(p, len, libc::MADV_DONTDUMP);
            libc::madvise(p, len, libc::MADV_WIPEONFORK);
        }
        Ok(arena)
    }

    /// Which kind of memory backs the arena.
    pub fn kind(&self) -> SecretMemory {
        self.kind
    }

    /// The arena's bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr .. ptr + len` is our private mapping, alive until drop; `&mut self`
        // makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SecretArena {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(self.bytes_mut());
        // SAFETY: exactly the mapping made at construction, unmapped once, after which no
        // reference to it remains (`bytes_mut` borrows `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The descriptors the ring loop may still use after start-up.
#[derive(Debug, Clone, Copy)]
pub struct LoopFds {
    /// Request doorbell: the only descriptor the loop reads.
    pub requests: RawFd,
    /// Completion doorbell: written to wake the gateway.
    pub completions: RawFd,
    /// The platform ledger's channel: the only socket the loop sends and receives on.
    pub ledger: RawFd,
}

fn rule_arg0_is(fd: RawFd) -> Result<SeccompRule, ProcessError> {
    let bad = |_| ProcessError::Os { what: "seccomp rule", errno: 0 };
    let fd = u64::try_from(fd).map_err(|_| ProcessError::Args { why: "negative descriptor" })?;
    SeccompRule::new(vec![
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, fd).map_err(bad)?
    ])
    .map_err(bad)
}

/// The seccomp allow-list of the ring loop, as a BPF program. Anything else kills the
/// process (`SIGSYS`), which the gateway reports as the enclave's death.
///
/// | system call | why the loop needs it |
/// |---|---|
/// | `read` (request doorbell, ledger channel) | clear the doorbell after a wake-up; ledger answers |
/// | `write` (completion doorbell, fd 2, ledger channel) | wake the sleeping gateway; a last error line; ledger requests |
/// | `sendto`/`recvfrom` (ledger channel only) | the same ledger traffic, as the C library may issue it |
/// | `poll`/`ppoll` | sleep on the doorbell and the gateway's pidfd |
/// | `futex` | std's one-time initialization and glibc's internal locks |
/// | `mmap` (never `PROT_EXEC`), `munmap`, `mremap`, `brk`, `madvise` | the heap allocator |
/// | `getrandom` | CSPRNG for nonces, DH values and IVs |
/// | `clock_gettime` | busy-poll deadlines (normally the vDSO, no syscall) |
/// | `sched_yield` | back off while busy-polling |
/// | `close`, `fcntl(F_GETFD)` | descriptors dropped on the way out (std checks them first) |
/// | `rt_sigreturn` | return from a signal handler the runtime may have set up |
/// | `sigaltstack` | std tears down the main thread's overflow-handler stack at exit |
/// | `exit`, `exit_group` | leave |
///
/// Not allowed, among others: `open*`, `socket`, `connect`, `execve`, `fork`/`clone`,
/// `ptrace`, `process_vm_*`, `mprotect`, `ioctl`, `prctl`, `unshare`, `setns`, `kill`.
pub fn seccomp_program(fds: LoopFds) -> Result<BpfProgram, ProcessError> {
    let bad = |_| ProcessError::Os { what: "seccomp filter", errno: 0 };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_read, vec![rule_arg0_is(fds.requests)?, rule_arg0_is(fds.ledger)?]);
    rules.insert(
        libc::SYS_write,
        vec![rule_arg0_is(fds.completions)?, rule_arg0_is(2)?, rule_arg0_is(fds.ledger)?],
    );
    rules.insert(libc::SYS_sendto, vec![rule_arg0_is(fds.ledger)?]);
    rules.insert(libc::SYS_recvfrom, vec![rule_arg0_is(fds.ledger)?]);
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_poll, vec![]);
    rules.insert(libc::SYS_ppoll, vec![]);
    rules.insert(libc::SYS_futex, vec![]);
    // std's `OwnedFd` drop checks in debug builds that the descriptor is still open.
    let getfd = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc::F_GETFD as u64)
        .map_err(bad)?;
    rules.insert(libc::SYS_fcntl, vec![SeccompRule::new(vec![getfd]).map_err(bad)?]);
    let no_exec =
        SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64), 0)
            .map_err(bad)?;
    rules.insert(libc::SYS_mmap, vec![SeccompRule::new(vec![no_exec]).map_err(bad)?]);
    for nr in [
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_brk,
        libc::SYS_madvise,
        libc::SYS_getrandom,
        libc::SYS_clock_gettime,
        libc::SYS_sched_yield,
        libc::SYS_close,
        libc::SYS_rt_sigreturn,
        libc::SYS_sigaltstack,
        libc::SYS_exit,
        libc::SYS_exit_group,
    ] {
        rules.insert(nr, vec![]);
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| ProcessError::Os { what: "seccomp: unsupported architecture", errno: 0 })?;
    let filter =
        SeccompFilter::new(rules, SeccompAction::KillProcess, SeccompAction::Allow, arch).map_err(bad)?;
    BpfProgram::try_from(filter).map_err(bad)
}

/// Sets `PR_SET_NO_NEW_PRIVS` and installs [`seccomp_program`] on this (single) thread.
pub fn install_seccomp(fds: LoopFds) -> Result<(), ProcessError> {
    let prog = seccomp_program(fds)?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(ProcessError::Os { what: "prctl(PR_SET_NO_NEW_PRIVS)", errno: errno() });
    }
    seccompiler::apply_filter(&prog).map_err(|e| ProcessError::Os {
        what: "seccomp install",
        errno: match e {
            seccompiler::Error::Seccomp(io) => io.raw_os_error().unwrap_or(0),
            _ => 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seccomp_program_builds() {
        let prog = seccomp_program(LoopFds { requests: 4, completions: 5, ledger: 6 }).unwrap();
        assert!(prog.len() > 20);
    }

    #[test]
    fn secret_arena_is_usable_and_reports_its_kind() {
        let mut a = SecretArena::new(100).unwrap();
        assert_eq!(a.bytes_mut().len(), 4096);
        a.bytes_mut()[..4].copy_from_slice(b"key!");
        assert_eq!(&a.bytes_mut()[..4], b"key!");
        // Either kind is acceptable; which one depends on the kernel.
        assert!(matches!(a.kind(), SecretMemory::MemfdSecret | SecretMemory::Mlocked));
    }
}
