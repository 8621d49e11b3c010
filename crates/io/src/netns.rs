//! Moving the calling thread into a network namespace (`setns(2)`), so that the devices
//! and sockets it then opens, and the threads it then starts, live there. The rest of the
//! process stays where it was; this is how tests run gateways in `ip netns` namespaces
//! inside one test process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

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

/// A named namespace that a thread visits for a moment and leaves again: a tenant's TUN
/// device lives in the tenant's own namespace (its cloud side, so tenants may use the same
/// addresses), while the gateway's sockets stay where the gateway runs.
#[derive(Debug)]
pub struct Visit {
    name: String,
    target: OwnedFd,
}

impl Visit {
    /// Opens the namespace `ip netns` knows as `name`.
    pub fn named(name: &str) -> Result<Self> {
        check_name(name)?;
        Ok(Self { name: name.to_owned(), target: open(&Path::new(NETNS_DIR).join(name))? })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` with the calling thread in the namespace, then moves it back to the
    /// namespace it was in (whatever `f` returned). Devices and sockets opened by `f` stay
    /// in the visited namespace.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let home = open(Path::new("/proc/thread-self/ns/net"))?;
        set(&self.target, &self.name)?;
        let out = f();
        // Failing to return would leave this thread's later sockets in the tenant's
        // namespace; the caller must not go on as if nothing happened.
        set(&home, "the thread's own namespace")?;
        Ok(out)
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
        assert!(matches!(Visit::named("a/b"), Err(Error::Invalid { .. })));
        assert!(matches!(Visit::named("cloister-no-such-ns"), Err(Error::Syscall { call: "open", .. })));
    }
}
