//! Network namespaces: moving the calling thread into one (`setns(2)`), so that the devices
//! and sockets it then opens, and the threads it then starts, live there (the rest of the
//! process stays where it was; this is how tests run gateways in `ip netns` namespaces
//! inside one test process), and descriptors opened inside one for a process that may not
//! enter it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::netdev::Control;
use crate::sys::cvt;
use crate::{Error, Result};

/// Where iproute2 keeps named namespaces.
const NETNS_DIR: &str = "/var/run/netns";

/// Moves the calling thread into the network namespace at `path` (a `/proc/PID/ns/net`
/// or a bind-mounted namespace file).
pub fn enter(path: &Path) -> Result<()> {
    let fd = open(path)?;
    set(&fd, &path.display().to_string())
}

/// Opens a namespace file.
fn open(path: &Path) -> Result<OwnedFd> {
    let shown = path.display().to_string();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Error::Invalid {
        what: "namespace path",
        value: shown.clone(),
        why: "contains a NUL byte",
    })?;
    // SAFETY: `c` is a NUL-terminated path; open(2) returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })
        .map_err(|source| Error::Syscall { call: "open", object: shown.clone(), source })?;
    // SAFETY: `fd` was just returned by open(2): open, and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves the calling thread into the namespace `fd` names.
fn set(fd: &OwnedFd, shown: &str) -> Result<()> {
    // SAFETY: setns(2) takes a descriptor we own and a flag; it changes only the calling
    // thread's network namespace.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }).map_err(|source| Error::Syscall {
        call: "setns",
        object: shown.to_owned(),
        source,
    })?;
    Ok(())
}

/// A named namespace that a thread visits for a moment and leaves again.
#[derive(Debug)]
struct Visit {
    name: String,
    target: OwnedFd,
}

impl Visit {
    /// Opens the namespace `ip netns` knows as `name`.
    fn named(name: &str) -> Result<Self> {
        check_name(name)?;
        Ok(Self { name: name.to_owned(), target: open(&Path::new(NETNS_DIR).join(name))? })
    }

    /// Runs `f` with the calling thread in the namespace, then moves it back to the
    /// namespace it was in (whatever `f` returned). Devices and sockets opened by `f` stay
    /// in the visited namespace.
    fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let home = open(Path::new("/proc/thread-self/ns/net"))?;
        set(&self.target, &self.name)?;
        let out = f();
        // Failing to return would leave this thread's later sockets in the tenant's
        // namespace; the caller must not go on as if nothing happened.
        set(&home, "the thread's own namespace")?;
        Ok(out)
    }
}

/// What a data plane needs of a namespace it does not run in: a tenant's TUN device lives
/// in the tenant's own namespace (its cloud side, so tenants may use the same addresses),
/// while the gateway's sockets stay where the gateway runs. Every descriptor here belongs
/// to that namespace, whichever thread or process uses it.
#[derive(Debug)]
pub struct Lent {
    /// The namespace's name.
    pub name: String,
    /// Sockets for configuring its devices.
    pub control: Control,
    /// Open descriptors of `/dev/net/tun`, one per queue ([`crate::tun::Tun::open_on`]).
    pub tun: Vec<OwnedFd>,
}

/// Most TUN queues one lending carries (a data plane has at most 64 workers).
pub const MAX_LENT_QUEUES: usize = 64;

/// Opens, inside the namespace `ip netns` knows as `name`, what [`Lent`] holds. Entering
/// a namespace takes `CAP_SYS_ADMIN`: a service that dropped it asks a [`Lender`] instead.
pub fn open_in(name: &str, tun_queues: usize) -> Result<Lent> {
    if tun_queues == 0 || tun_queues > MAX_LENT_QUEUES {
        return Err(Error::Invalid { what: "TUN queues", value: tun_queues.to_string(), why: "1 to 64" });
    }
    let visit = Visit::named(name)?;
    let (control, tun) = visit.run(|| -> Result<_> {
        let control = Control::here()?;
        let tun = (0..tun_queues)
            .map(|_| crate::tun::open_clone_device())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|source| Error::Syscall { call: "open", object: "/dev/net/tun".into(), source })?;
        Ok((control, tun))
    })??;
    Ok(Lent { name: visit.name, control, tun })
}

/// Who opens namespaces for this process when it may not enter them itself.
pub trait Lender: Send + Sync {
    /// [`open_in`], done by someone who may.
    fn lend(&self, name: &str, tun_queues: usize) -> Result<Lent>;
}

/// This process's lender, once it has dropped the right to enter namespaces.
static LENDER: std::sync::OnceLock<Box<dyn Lender>> = std::sync::OnceLock::new();

/// Makes `lender` open every namespace this process asks for from now on ([`lend`]). Which
/// namespaces a process may enter is a property of the process (its capabilities), so the
/// lender is too; it is set once, before the process drops `CAP_SYS_ADMIN`. Returns `false`
/// if one was set already (the first stays).
pub fn set_lender(lender: Box<dyn Lender>) -> bool {
    LENDER.set(lender).is_ok()
}

/// [`open_in`], through this process's lender where it has one.
pub fn lend(name: &str, tun_queues: usize) -> Result<Lent> {
    check_name(name)?;
    match LENDER.get() {
        Some(l) => l.lend(name, tun_queues),
        None => open_in(name, tun_queues),
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::Invalid {
            what: "namespace name",
            value: name.to_owned(),
            why: "not a plain name",
        });
    }
    Ok(())
}

/// Moves the calling thread into the namespace `ip netns` knows as `name`.
pub fn enter_named(name: &str) -> Result<()> {
    check_name(name)?;
    enter(&Path::new(NETNS_DIR).join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused() {
        assert!(matches!(enter_named("../x"), Err(Error::Invalid { .. })));
        assert!(matches!(enter_named(""), Err(Error::Invalid { .. })));
        assert!(matches!(enter(Path::new("/nonexistent/ns")), Err(Error::Syscall { call: "open", .. })));
        assert!(matches!(lend("a/b", 1), Err(Error::Invalid { .. })));
        assert!(matches!(open_in("cloister-no-such-ns", 1), Err(Error::Syscall { call: "open", .. })));
        assert!(matches!(open_in("x", 0), Err(Error::Invalid { .. })));
    }
}
