//! Named network namespaces and veth links, removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::addr::TestAddr;
use crate::cmd::{run, run_ok, Output};
use crate::process::{tail, Process};
use crate::{Error, Result};

/// Every namespace this harness makes starts with this, so stale ones can be found.
const PREFIX: &str = "clt";
/// Bound for one `ip` invocation.
const IP_LIMIT: Duration = Duration::from_secs(10);
/// Where iproute2 keeps named namespaces.
const NETNS_DIR: &str = "/var/run/netns";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace made for one test; deleted (with its veth ends) on drop.
///
/// It also owns a scratch directory for config files and process logs, removed on drop
/// unless the thread is panicking, in which case its path is printed for the post-mortem.
#[derive(Debug)]
pub struct Netns {
    name: String,
    dir: PathBuf,
}

impl Netns {
    /// Creates a namespace named `clt<tag>-<pid>-<n>` with its loopback up.
    ///
    /// `tag` is a short word saying the namespace's role (`site`, `gw`, …), at most 8
    /// characters of `[a-z0-9]`. Stale namespaces of killed earlier runs are swept first.
    pub fn new(tag: &str) -> Result<Self> {
        if tag.is_empty()
            || tag.len() > 8
            || !tag.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(Error::Invalid { what: "namespace tag", value: tag.to_owned() });
        }
        sweep_stale();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{tag}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("cloister-testnet/{name}"));
        std::fs::create_dir_all(&dir)
            .map_err(|source| Error::Io { what: format!("create {}", dir.display()), source })?;
        run_ok(&["ip", "netns", "add", &name], IP_LIMIT)?;
        let ns = Self { name, dir };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's scratch directory (config files, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `argv` inside the namespace, bounded by `limit`.
    pub fn exec(&self, argv: &[&str], limit: Duration) -> Result<Output> {
        run(&self.wrap(argv), limit)
    }

    /// Like [`Netns::exec`], but a non-zero exit is an error.
    pub fn exec_ok(&self, argv: &[&str], limit: Duration) -> Result<Output> {
        run_ok(&self.wrap(argv), limit)
    }

    /// Runs `ip ARGS` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut argv = vec!["ip", "-n", &self.name];
        argv.extend_from_slice(args);
        run_ok(&argv, IP_LIMIT)
    }

    /// Adds an address from the test ranges to `dev` and brings it up.
    pub fn add_addr(&self, dev: &str, addr: &str) -> Result<TestAddr> {
        let a = TestAddr::parse(addr)?;
        let s = a.to_string();
        let mut args = vec!["addr", "add", &s, "dev", dev];
        if a.addr.is_ipv6() {
            // Duplicate address detection would delay the address by a second or more.
            args.push("nodad");
        }
        self.ip(&args)?;
        self.ip(&["link", "set", dev, "up"])?;
        Ok(a)
    }

    /// Adds a route to `dest` (a test-range prefix, or `default`) via `gateway`.
    pub fn add_route(&self, dest: &str, gateway: &str) -> Result<()> {
        if dest != "default" {
            TestAddr::parse(dest)?;
        }
        let gw: std::net::IpAddr =
            gateway.parse().map_err(|_| Error::Invalid { what: "gateway", value: gateway.to_owned() })?;
        crate::addr::check_test_addr(gw)?;
        let family = if gw.is_ipv6() { "-6" } else { "-4" };
        self.ip(&[family, "route", "add", dest, "via", gateway])?;
        Ok(())
    }

    /// Turns on IPv4 and IPv6 forwarding inside the namespace (a router or gateway host).
    pub fn enable_forwarding(&self) -> Result<()> {
        self.exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], IP_LIMIT)?;
        self.exec_ok(&["sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"], IP_LIMIT)?;
        Ok(())
    }

    /// Sends `count` pings to `dest` (0.2 s apart); true if all came back. Waits for every
    /// reply until a deadline (`-w`: half a second a ping plus 5 s), not only ping's own linger of
    /// twice the slowest round trip after the last request, which a loaded machine overruns.
    pub fn ping(&self, dest: &str, count: u32) -> Result<bool> {
        let c = count.to_string();
        let deadline = u64::from(count).div_ceil(2) + 5;
        let w = deadline.to_string();
        let limit = Duration::from_secs(deadline + 5);
        let out = self.exec(&["ping", "-n", "-q", "-c", &c, "-i", "0.2", "-w", &w, dest], limit)?;
        Ok(out.success && out.stdout.contains(&format!(" {count} received")))
    }

    /// Starts `argv` inside the namespace as a supervised [`Process`] logging to `<label>.log`.
    pub fn spawn(&self, label: &str, argv: &[&str]) -> Result<Process> {
        self.spawn_env(label, argv, &[])
    }

    /// Like [`Netns::spawn`], with extra environment variables.
    pub fn spawn_env(&self, label: &str, argv: &[&str], env: &[(&str, &str)]) -> Result<Process> {
        use std::os::unix::process::CommandExt;
        let log = self.dir.join(format!("{label}.log"));
        let file = std::fs::File::create(&log)
            .map_err(|source| Error::Io { what: format!("create {}", log.display()), source })?;
        let err = file.try_clone().map_err(|source| Error::Io { what: "dup log".to_owned(), source })?;
        let full = self.wrap(argv);
        let mut cmd = Command::new(full[0]);
        cmd.args(&full[1..]).stdin(Stdio::null()).stdout(file).stderr(err).process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|source| Error::Spawn { command: argv.join(" "), source })?;
        Ok(Process::new(child, format!("{label} in {}", self.name), log))
    }

    /// Writes a file into the scratch directory and returns its path.
    pub fn write_file(&self, rel: &str, contents: &str) -> Result<PathBuf> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|source| Error::Io { what: format!("create {}", parent.display()), source })?;
        }
        std::fs::write(&path, contents)
            .map_err(|source| Error::Io { what: format!("write {}", path.display()), source })?;
        Ok(path)
    }

    fn wrap<'a>(&'a self, argv: &[&'a str]) -> Vec<&'a str> {
        // `ip netns exec` execs the command after setns(2), so the PID we get is the command's.
        let mut v = vec!["ip", "netns", "exec", self.name.as_str()];
        v.extend_from_slice(argv);
        v
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = run_ok(&["ip", "netns", "del", &self.name], IP_LIMIT) {
            eprintln!("testnet: could not delete namespace {}: {e}", self.name);
        }
        if std::thread::panicking() {
            eprintln!("testnet: kept logs of {} in {}", self.name, self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A veth pair joining two namespaces; its ends vanish with their namespaces.
#[derive(Debug, Clone)]
pub struct Veth {
    /// Interface name in the first namespace.
    pub a: String,
    /// Interface name in the second namespace.
    pub b: String,
}

impl Veth {
    /// Creates a veth pair with end `a_dev` in `a` and `b_dev` in `b`, both up.
    ///
    /// The ends are created directly inside their namespaces, so the names only need to be
    /// unique there and never collide with parallel tests in the root namespace.
    pub fn connect(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<Self> {
        for d in [a_dev, b_dev] {
            if d.is_empty()
                || d.len() > 15
                || !d.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            {
                return Err(Error::Invalid { what: "interface name", value: d.to_owned() });
            }
        }
        // A temporary unique name in the root namespace, moved at once: `ip link add ... netns`
        // applies to the first end only on some iproute2 versions, so both are moved explicitly.
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp_a = format!("clv{}a{n}", std::process::id() % 100_000);
        let tmp_b = format!("clv{}b{n}", std::process::id() % 100_000);
        run_ok(&["ip", "link", "add", &tmp_a, "type", "veth", "peer", "name", &tmp_b], IP_LIMIT)?;
        let moved = run_ok(&["ip", "link", "set", &tmp_a, "netns", a.name(), "name", a_dev], IP_LIMIT)
            .and_then(|_| run_ok(&["ip", "link", "set", &tmp_b, "netns", b.name(), "name", b_dev], IP_LIMIT));
        if let Err(e) = moved {
            // Deleting either end removes the pair, wherever the other end is.
            let _ = run(&["ip", "link", "del", &tmp_a], IP_LIMIT);
            let _ = run(&["ip", "link", "del", &tmp_b], IP_LIMIT);
            return Err(e);
        }
        a.ip(&["link", "set", a_dev, "up"])?;
        b.ip(&["link", "set", b_dev, "up"])?;
        Ok(Self { a: a_dev.to_owned(), b: b_dev.to_owned() })
    }
}

/// Deletes namespaces left by earlier test processes that no longer exist.
///
/// Only names this harness makes (`clt<tag>-<pid>-<n>`) whose PID is gone are touched.
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = owner_pid(&name) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run(&["ip", "netns", "del", &name], IP_LIMIT);
            }
        }
    }
}

fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let _n: u32 = parts.next()?.parse().ok()?;
    let pid: u32 = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(pid)
}

/// Polls `cond` every 20 ms until it is true or `limit` passes.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Error::Timeout { command: what.to_owned(), limit })
}

/// A short excerpt of a log for error messages.
pub fn excerpt(log: &str) -> String {
    tail(log, 1500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_only_our_names() {
        assert_eq!(owner_pid("cltsite-1234-0"), Some(1234));
        assert_eq!(owner_pid("cltgw-99-17"), Some(99));
        assert_eq!(owner_pid("other-1234-0"), None);
        assert_eq!(owner_pid("cltsite-x-0"), None);
        assert_eq!(owner_pid("clt-1"), None);
    }

    #[test]
    fn bad_tags_are_refused_before_any_command() {
        for t in ["", "UPPER", "toolongtag", "a b"] {
            assert!(matches!(Netns::new(t), Err(Error::Invalid { .. })), "{t}");
        }
    }
}
