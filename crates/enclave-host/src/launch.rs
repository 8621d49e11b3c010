//! Who starts an enclave process. The host makes the shared memory and the doorbells and
//! watches the child; a [`Launch`] makes the child itself, with the secrets it must start
//! with (the tenant's root and the platform's attestation key) and the channel to its
//! ledger. [`Direct`] does that in this process, so this process holds those secrets; the
//! service instead asks the platform process (`cloister-platform`), which holds them and
//! answers the ledger, so the service never does.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use enclave_api::process::{config, ExitReport, GuestArgs, ProcessError};
use enclave_api::report::{ProvisioningKey, PublicConfig};
use zeroize::Zeroizing;

use crate::{Geometry, SharedLedger};

/// What the host lends a child it asks for: its end of the shared memory and doorbells,
/// and how it should run.
#[derive(Debug, Clone, Copy)]
pub struct ChildFds<'a> {
    /// The shared memfd.
    pub shm: BorrowedFd<'a>,
    /// The request doorbell.
    pub request: BorrowedFd<'a>,
    /// The completion doorbell.
    pub completion: BorrowedFd<'a>,
    /// The ring geometry.
    pub geometry: Geometry,
    /// How long the guest busy-polls before sleeping.
    pub spin: Duration,
    /// CPUs the child may run on (`None`: any).
    pub cpus: Option<&'a [usize]>,
}

/// A started child, as the host watches it: `pidfd` becomes readable when it exits.
#[derive(Debug)]
pub struct Launched {
    /// Its process ID.
    pub pid: u32,
    /// A pidfd of it (readable once it has exited).
    pub pidfd: OwnedFd,
    /// How to end it and learn how it ended.
    pub end: Box<dyn ChildEnd>,
}

/// Ends one child.
pub trait ChildEnd: Send + core::fmt::Debug {
    /// Kills the child if it still runs, waits for it and says how it ended. Called once:
    /// after its pidfd became readable, or to end it.
    fn end(&mut self) -> ExitReport;
}

/// Starts enclave processes.
pub trait Launch: Send + Sync + core::fmt::Debug {
    /// Starts one enclave process for `config` on the shared memory and doorbells of
    /// `child`, with the tenant's root, the platform's attestation key and a channel to the
    /// tenant's ledger, and returns once the child has its configuration (not once it is
    /// ready: the host waits for that on the shared memory).
    fn launch(&self, child: &ChildFds<'_>, config: &PublicConfig) -> Result<Launched, ProcessError>;
}

/// The user and group a child runs as, set between fork and exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// Its user ID.
    pub uid: u32,
    /// Its group ID (and its only group).
    pub gid: u32,
}

/// Launches enclave processes of one tenant from this process, which holds the tenant's
/// root and the platform key, and answers the child's ledger from a thread of its own.
pub struct Direct {
    program: PathBuf,
    args: Vec<OsString>,
    key: ProvisioningKey,
    tenant: enclave_api::handle::TenantId,
    platform_key: Zeroizing<Vec<u8>>,
    ledger: SharedLedger,
    credentials: Option<Credentials>,
}

impl core::fmt::Debug for Direct {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Direct")
            .field("program", &self.program)
            .field("tenant", &self.tenant)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Direct {
    /// Runs `program args...` (then the guest's own arguments) for `tenant`, whose root is
    /// `key`, attested by `platform_key` (PKCS#8 P-256), on `ledger`.
    pub fn new(
        program: PathBuf,
        args: Vec<OsString>,
        tenant: enclave_api::handle::TenantId,
        key: ProvisioningKey,
        platform_key: &[u8],
        ledger: SharedLedger,
    ) -> Self {
        Self {
            program,
            args,
            key,
            tenant,
            platform_key: Zeroizing::new(platform_key.to_vec()),
            ledger,
            credentials: None,
        }
    }

    /// Runs the children as `credentials` (this process needs `CAP_SETUID` and
    /// `CAP_SETGID`), so that no other tenant's process, nor the caller, may read them.
    pub fn run_as(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }
}

/// The child of a [`Direct`] launch.
#[derive(Debug)]
struct OwnChild(Child);

impl ChildEnd for OwnChild {
    fn end(&mut self) -> ExitReport {
        let _ = self.0.kill();
        match self.0.wait() {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => ExitReport::Exited(c),
                (None, Some(sig)) => ExitReport::Signaled(sig),
                _ => ExitReport::Unknown,
            },
            Err(_) => ExitReport::Unknown,
        }
    }
}

impl Launch for Direct {
    fn launch(&self, child: &ChildFds<'_>, config: &PublicConfig) -> Result<Launched, ProcessError> {
        if config.tenant != self.tenant {
            return Err(ProcessError::Protocol { why: "this launcher starts another tenant's enclaves" });
        }
        let mut pipe = [-1 as RawFd; 2];
        // SAFETY: `pipe` is a writable array of two descriptors.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(ProcessError::last_os("pipe2(config)"));
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (config_rd, config_wr) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let (ledger_ours, ledger_theirs) = seqpacket_pair()?;
        let args = GuestArgs {
            shm_fd: child.shm.as_raw_fd(),
            request_fd: child.request.as_raw_fd(),
            completion_fd: child.completion.as_raw_fd(),
            config_fd: config_rd.as_raw_fd(),
            ledger_fd: ledger_theirs.as_raw_fd(),
            geometry: child.geometry,
            spin: child.spin,
            parent_pid: std::process::id(),
        };
        let pass = [args.shm_fd, args.request_fd, args.completion_fd, args.config_fd, args.ledger_fd];
        let cpus = match child.cpus {
            Some(list) => Some(cpu_set(list)?),
            None => None,
        };
        let ids = self.credentials;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .args(args.to_args())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: the closure runs in the forked child before exec and makes only system
        // calls, which are async-signal-safe (fcntl, sched_setaffinity, and `drop_to`'s; the
        // CPU set was built before the fork; the child has one thread, so the set*id calls
        // need no cross-thread signalling); it clears close-on-exec on exactly the five
        // descriptors this child must inherit (all others stay close-on-exec), and drops
        // to the tenant's user last.
        unsafe {
            cmd.pre_exec(move || {
                keep_across_exec(&pass)?;
                if let Some(set) = &cpus {
                    if libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(c) = ids {
                    drop_to(c)?;
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| ProcessError::Os {
            what: "spawn(enclave process)",
            errno: e.raw_os_error().unwrap_or(0),
        })?;
        drop((config_rd, ledger_theirs));
        let Launched { pid, pidfd, end: mut own } = adopt(child)?;
        // Answers this child until its end of the channel closes (it exited).
        let ledger = self.ledger.clone();
        let socket = std::os::unix::net::UnixDatagram::from(ledger_ours);
        if let Err(e) = std::thread::Builder::new()
            .name("enclave-ledger".into())
            .spawn(move || enclave_api::ledger::serve(&socket, &ledger))
        {
            own.end();
            return Err(ProcessError::Os {
                what: "spawn(ledger thread)",
                errno: e.raw_os_error().unwrap_or(0),
            });
        }
        // The root secret goes through the pipe and is zeroized here right after.
        let blob = config::encode(&self.key, &self.platform_key, config);
        let wrote = std::fs::File::from(config_wr).write_all(&blob);
        drop(blob);
        if wrote.is_err() {
            // The child closed the pipe unread: it is dying; say how it ended.
            return Err(ProcessError::Died { pid, exit: own.end() });
        }
        Ok(Launched { pid, pidfd, end: own })
    }
}

/// Takes `child` (just spawned, not yet waited for) as a [`Launched`]: its pidfd, and an end
/// that kills and reaps it. A child whose pidfd cannot be had is ended.
pub fn adopt(child: std::process::Child) -> Result<Launched, ProcessError> {
    let mut own = OwnChild(child);
    let pid = own.0.id();
    // SAFETY: pidfd_open on our own unreaped child (it cannot be recycled before we wait
    // for it) returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    match RawFd::try_from(raw) {
        Ok(fd) if fd >= 0 => {
            // SAFETY: a fresh descriptor owned by nobody else.
            let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
            Ok(Launched { pid, pidfd, end: Box::new(own) })
        }
        _ => {
            let e = ProcessError::Os { what: "pidfd_open(child)", errno: errno() };
            own.end();
            Err(e)
        }
    }
}

/// Puts the forked child (one thread, before exec) in a fresh, empty network namespace and
/// makes it user and group `c`, with no other group and one capability left: CAP_IPC_LOCK,
/// as an ambient capability so that it survives the exec. The enclave locks all its memory
/// (`mlockall`, `memfd_secret`), which without it is capped by RLIMIT_MEMLOCK, and raising
/// that limit needs CAP_SYS_RESOURCE, which a container's root often lacks.
fn drop_to(c: Credentials) -> std::io::Result<()> {
    // SAFETY: unshare(2) with a flag changes only this process's namespaces.
    // A fresh network namespace while still root: the child, as its own user, could make
    // one only inside a user namespace, which would cost it CAP_IPC_LOCK.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    become_user_locking(c)
}

/// [`become_user`] keeping CAP_IPC_LOCK alone, raised as an ambient capability so that it
/// survives the exec: for children that lock their memory (enclaves, the HSM agent).
fn become_user_locking(c: Credentials) -> std::io::Result<()> {
    const CAP_IPC_LOCK: u32 = 14;
    become_user(c, &[CAP_IPC_LOCK])?;
    let raise = libc::c_ulong::from(CAP_IPC_LOCK);
    // SAFETY: prctl(PR_CAP_AMBIENT_RAISE) with a capability number reads no memory.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong, raise, 0, 0) }
        != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A command for `program` that runs as user and group `c` (this process must be root)
/// with CAP_IPC_LOCK only, so that it may lock its memory as that user: how the HSM agent
/// is started under a user of its own.
pub fn command_as(program: &std::path::Path, c: Credentials) -> Command {
    let mut cmd = Command::new(program);
    // SAFETY: the closure runs in the forked child before exec and makes only the plain
    // system calls of `become_user_locking` on the child's own credentials.
    unsafe {
        cmd.pre_exec(move || become_user_locking(c));
    }
    cmd
}

/// Makes this process user and group `c` with no supplementary group and exactly the
/// capabilities `keep` (numbers below 32, e.g. 12 for CAP_NET_ADMIN) on the calling thread:
/// effective, permitted and inheritable. Root's other powers are gone for good. The user and
/// groups change for every thread (the C library's wrappers tell them all); other threads
/// that exist now lose every capability, and threads the caller starts later inherit its
/// set; neither it nor its children gain privileges by exec again. Call it from the thread
/// that starts the others, before it does.
pub fn become_user(c: Credentials, keep: &[u32]) -> std::io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut mask = 0u32;
    for &cap in keep {
        mask |= 1u32.checked_shl(cap).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    }
    let fail = || Err(std::io::Error::last_os_error());
    let data = [
        Data { effective: mask, permitted: mask, inheritable: mask },
        Data { effective: 0, permitted: 0, inheritable: 0 },
    ];
    let header = Header { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: prctl, setgroups (an empty list: no pointer is read), setresgid, setresuid and
    // capset (a version-3 header and the two data words it names, all on this stack) are
    // plain system calls on this process's own credentials.
    unsafe {
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0
            || libc::setgroups(0, core::ptr::null()) != 0
            || libc::setresgid(c.gid, c.gid, c.gid) != 0
            || libc::setresuid(c.uid, c.uid, c.uid) != 0
        {
            return fail();
        }
        if libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) != 0 {
            return fail();
        }
        // Nor may it gain any by exec (a set-user-ID program, file capabilities).
        if libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        {
            return fail();
        }
    }
    Ok(())
}

/// Clears close-on-exec on `fds`, so that a forked child about to exec inherits exactly
/// these: for `pre_exec` closures (fcntl is async-signal-safe).
pub fn keep_across_exec(fds: &[RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: fcntl(F_SETFD) on a descriptor number only changes its flags; an invalid
        // number fails with EBADF.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A connected `SOCK_SEQPACKET` pair, close-on-exec.
pub fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), ProcessError> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a writable array of two descriptors.
    let r = unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
    };
    if r != 0 {
        return Err(ProcessError::last_os("socketpair"));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A CPU set of `cpus` (each below `CPU_SETSIZE`; an empty list is refused).
fn cpu_set(cpus: &[usize]) -> Result<libc::cpu_set_t, ProcessError> {
    let bad = ProcessError::Os { what: "enclave process CPU set", errno: libc::EINVAL };
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    let max = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(bad);
    }
    for &c in cpus {
        // SAFETY: `c < CPU_SETSIZE` (checked above), so the bit lies inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    Ok(set)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
