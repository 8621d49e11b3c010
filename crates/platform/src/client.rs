//! The service's side of the launch channel: [`PlatformClient`] starts the platform
//! process, learns its public key, and is a [`Launch`] for
//! [`enclave_host::ProcessEnclave::launch`], so the service starts enclave processes
//! without ever holding the secrets they start with.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use enclave_api::process::{ExitReport, ProcessError};
use enclave_api::report::PublicConfig;
use enclave_host::{ChildEnd, ChildFds, Launch, Launched};

use crate::channel::{self, Received};
use crate::wire::{self, op, LaunchRequest, Reply, Request, MAX_MESSAGE};

/// How long one request may wait for its reply (a launch returns once the child has its
/// configuration; ending a child waits for it to go).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The service's handle on its platform process; clones share it, and the last one to go
/// closes the channel, whereupon the platform ends its children and exits.
#[derive(Debug, Clone)]
pub struct PlatformClient(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    channel: Mutex<Channel>,
    public_key: Vec<u8>,
    process: Mutex<Child>,
    pid: u32,
}

#[derive(Debug)]
struct Channel {
    /// `None` once it broke: every request fails from then on.
    socket: Option<OwnedFd>,
    next_id: u32,
    buf: Vec<u8>,
}

fn platform_error(why: impl Into<String>) -> ProcessError {
    ProcessError::Platform { why: why.into() }
}

impl PlatformClient {
    /// Starts `program args... --channel-fd N` (the platform process) and waits up to
    /// `timeout` for its hello; its standard error and its environment are this process's
    /// (an HSM agent's PKCS#11 module may read its settings from there; enclave processes
    /// start with an empty one).
    pub fn start(program: &Path, args: &[OsString], timeout: Duration) -> Result<Self, ProcessError> {
        let (ours, theirs) = enclave_host::launch::seqpacket_pair()?;
        let fd = theirs.as_raw_fd();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .arg("--channel-fd")
            .arg(fd.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: the closure runs in the forked child before exec and calls only fcntl, an
        // async-signal-safe system call, to let the child inherit its end of the channel.
        unsafe {
            cmd.pre_exec(move || enclave_host::launch::keep_across_exec(&[fd]));
        }
        let mut process =
            cmd.spawn().map_err(|e| platform_error(format!("starting {}: {e}", program.display())))?;
        drop(theirs);
        let pid = process.id();
        let fail = |process: &mut Child, why: String| {
            let _ = process.kill();
            let _ = process.wait();
            platform_error(why)
        };
        if let Err(e) = rustix::net::sockopt::set_socket_timeout(
            &ours,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout),
        ) {
            return Err(fail(&mut process, format!("setting the channel's timeout: {e}")));
        }
        let mut buf = vec![0u8; MAX_MESSAGE];
        let hello = match channel::recv(&ours, &mut buf) {
            Ok(Received::Message(n, _)) => buf.get(..n).and_then(|b| wire::decode_reply(b, None)),
            Ok(_) => None,
            Err(e) => return Err(fail(&mut process, format!("no hello from the platform process: {e}"))),
        };
        let public_key = match hello {
            Some((0, Reply::Hello { public_key })) => public_key,
            Some((_, Reply::Refused(why))) => return Err(fail(&mut process, why)),
            _ => {
                return Err(fail(&mut process, "the platform process said something else than hello".into()))
            }
        };
        if let Err(e) = rustix::net::sockopt::set_socket_timeout(
            &ours,
            rustix::net::sockopt::Timeout::Recv,
            Some(REPLY_TIMEOUT),
        ) {
            return Err(fail(&mut process, format!("setting the channel's timeout: {e}")));
        }
        Ok(Self(Arc::new(Inner {
            channel: Mutex::new(Channel { socket: Some(ours), next_id: 1, buf }),
            public_key,
            process: Mutex::new(process),
            pid,
        })))
    }

    /// The key that verifies this platform's evidence (uncompressed SEC1).
    pub fn public_key(&self) -> &[u8] {
        &self.0.public_key
    }

    /// The platform process's ID.
    pub fn pid(&self) -> u32 {
        self.0.pid
    }

    /// `Ok` while the platform process runs; how it ended otherwise.
    pub fn check(&self) -> Result<(), ExitReport> {
        let mut p = self.0.process.lock().unwrap_or_else(PoisonError::into_inner);
        match p.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(s)) => Err(exit_report(s)),
            Err(_) => Err(ExitReport::Unknown),
        }
    }

    /// Sends `req` with `fds` and waits for its reply (with the descriptors it carries).
    fn ask(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(Reply, Vec<OwnedFd>), ProcessError> {
        let mut ch = self.0.channel.lock().unwrap_or_else(PoisonError::into_inner);
        let ch = &mut *ch;
        let Some(socket) = ch.socket.as_ref() else {
            return Err(platform_error("the channel to the platform process is closed"));
        };
        let id = ch.next_id;
        ch.next_id = ch.next_id.wrapping_add(1).max(1);
        let opcode = match req {
            Request::Launch(_) => op::LAUNCH,
            Request::End { .. } => op::END,
            Request::Lend { .. } => op::LEND,
            Request::Agent => op::AGENT,
        };
        if let Err(e) = channel::send(socket, &wire::encode_request(id, req), fds) {
            ch.socket = None;
            return Err(platform_error(format!("sending to the platform process: {e}")));
        }
        let deadline = Instant::now() + REPLY_TIMEOUT;
        // Replies to requests that timed out earlier may still come: skip them by id.
        while Instant::now() < deadline {
            match channel::recv(socket, &mut ch.buf) {
                Ok(Received::Message(n, got)) => {
                    match ch.buf.get(..n).and_then(|b| wire::decode_reply(b, Some(opcode))) {
                        Some((rid, reply)) if rid == id => return Ok((reply, got)),
                        _ => continue,
                    }
                }
                Ok(Received::Truncated) => continue,
                Ok(Received::Closed) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(platform_error("the platform process did not answer in time"));
                }
                Err(e) => return Err(platform_error(format!("reading from the platform process: {e}"))),
            }
        }
        ch.socket = None;
        Err(platform_error("the platform process closed the channel"))
    }
}

fn exit_report(s: std::process::ExitStatus) -> ExitReport {
    use std::os::unix::process::ExitStatusExt as _;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitReport::Exited(c),
        (None, Some(sig)) => ExitReport::Signaled(sig),
        _ => ExitReport::Unknown,
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel makes the platform end its children and exit.
        self.channel.get_mut().unwrap_or_else(PoisonError::into_inner).socket = None;
        let p = self.process.get_mut().unwrap_or_else(PoisonError::into_inner);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            if !matches!(p.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// A child the platform started for this service.
#[derive(Debug)]
struct RemoteChild {
    client: PlatformClient,
    child: u64,
}

impl ChildEnd for RemoteChild {
    fn end(&mut self) -> ExitReport {
        match self.client.ask(&Request::End { child: self.child }, &[]) {
            Ok((Reply::Ended(exit), _)) => exit,
            _ => ExitReport::Unknown,
        }
    }
}

impl PlatformClient {
    /// Has the platform start the HSM agent it was configured with (under the agent's own
    /// user): its input, its output, and the process.
    pub fn start_agent(&self) -> Result<(OwnedFd, OwnedFd, RemoteProcess), ProcessError> {
        let (reply, fds) = self.ask(&Request::Agent, &[])?;
        let (end, pid, [input, output, pidfd]) = self.launched(reply, fds, "an agent's")?;
        Ok((input, output, RemoteProcess { pid, pidfd, end: Some(end) }))
    }

    /// Makes the calling process user and group `uid` with [`NETWORK_CAPABILITIES`] only,
    /// once it has read every private file it needs and opened its devices and ports (the
    /// service, a gateway): from then on it can read neither this platform's memory and
    /// files nor any enclave's. The namespaces it may no longer enter, this platform opens
    /// for it (`cio::netns::Lender`). Call it from the thread that starts the others (see
    /// `enclave_host::launch::become_user`). Refused for a second client in one process.
    pub fn become_network_user(&self, uid: u32) -> Result<(), ProcessError> {
        if !cio::netns::set_lender(Box::new(self.clone())) {
            return Err(platform_error("a second platform client in one process"));
        }
        enclave_host::launch::become_user(enclave_host::Credentials { uid, gid: uid }, &NETWORK_CAPABILITIES)
            .map_err(|e| ProcessError::Os {
                what: "becoming a user of its own",
                errno: e.raw_os_error().unwrap_or(0),
            })
    }

    /// A `Launched` reply with exactly `N` descriptors: the child's handle, pid and
    /// descriptors. Any other reply is refused; a child whose descriptors did not all come
    /// is ended at once, so no process outlives a failed start.
    fn launched<const N: usize>(
        &self,
        reply: Reply,
        fds: Vec<OwnedFd>,
        what: &str,
    ) -> Result<(RemoteChild, u32, [OwnedFd; N]), ProcessError> {
        match reply {
            Reply::Launched { child, pid } => {
                let mut end = RemoteChild { client: self.clone(), child };
                match <[OwnedFd; N]>::try_from(fds) {
                    Ok(fds) => Ok((end, pid, fds)),
                    Err(_) => {
                        end.end();
                        Err(platform_error(format!("{what} reply without its {N} descriptors")))
                    }
                }
            }
            Reply::Refused(why) => Err(platform_error(why)),
            _ => Err(platform_error(format!("an answer that is not {what}"))),
        }
    }
}

/// What a platform's caller keeps as its own user ([`PlatformClient::become_network_user`]):
/// making and configuring TUN devices (CAP_NET_ADMIN, 12), the raw ESP sockets
/// (CAP_NET_RAW, 13) and IKE's ports 500 and 4500 (CAP_NET_BIND_SERVICE, 10). None of them
/// reads another user's memory or files.
pub const NETWORK_CAPABILITIES: [u32; 3] = [10, 12, 13];
/// [`NETWORK_CAPABILITIES`] by name, for logs.
pub const NETWORK_CAPABILITY_NAMES: &str = "CAP_NET_ADMIN, CAP_NET_RAW and CAP_NET_BIND_SERVICE";

/// A process the platform started for this service, other than an enclave (the HSM agent).
#[derive(Debug)]
pub struct RemoteProcess {
    pid: u32,
    pidfd: OwnedFd,
    /// `None` once ended.
    end: Option<RemoteChild>,
}

impl RemoteProcess {
    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it has exited (its pidfd is readable), without waiting.
    pub fn exited(&self) -> bool {
        use std::os::fd::AsFd as _;
        !matches!(enclave_api::process::doorbell::wait(&[self.pidfd.as_fd()], Some(Duration::ZERO)), Ok(0))
    }

    /// Has the platform end it if it still runs, and reap it; how it ended.
    pub fn end(&mut self) -> ExitReport {
        self.end.take().map_or(ExitReport::Unknown, |mut e| e.end())
    }
}

impl Drop for RemoteProcess {
    fn drop(&mut self) {
        self.end();
    }
}

impl Launch for PlatformClient {
    fn launch(&self, child: &ChildFds<'_>, config: &PublicConfig) -> Result<Launched, ProcessError> {
        let req = Request::Launch(LaunchRequest {
            geometry: child.geometry,
            spin: child.spin,
            cpus: child.cpus.map(<[usize]>::to_vec).unwrap_or_default(),
            config: config.clone(),
        });
        let (reply, fds) = self.ask(&req, &[child.shm, child.request, child.completion])?;
        let (end, pid, [pidfd]) = self.launched(reply, fds, "a launch's")?;
        Ok(Launched { pid, pidfd, end: Box::new(end) })
    }
}

impl cio::netns::Lender for PlatformClient {
    fn lend(&self, name: &str, tun_queues: usize) -> cio::Result<cio::netns::Lent> {
        let refused = |why: String| cio::Error::Lender { name: name.to_owned(), why };
        let queues = u16::try_from(tun_queues).map_err(|_| refused(format!("{tun_queues} TUN queues")))?;
        if name.is_empty() || name.len() > wire::MAX_NAMESPACE {
            return Err(refused(format!("a name of 1 to {} bytes", wire::MAX_NAMESPACE)));
        }
        let req = Request::Lend { name: name.to_owned(), queues };
        let (reply, fds) = self.ask(&req, &[]).map_err(|e| refused(e.to_string()))?;
        match reply {
            Reply::Lent { v6, queues: got }
                if got == queues && fds.len() == 2 + usize::from(v6) + tun_queues =>
            {
                let mut fds = fds.into_iter();
                let (Some(v4), Some(rtnl)) = (fds.next(), fds.next()) else {
                    return Err(refused("no sockets in the reply".into()));
                };
                let v6 = if v6 { fds.next() } else { None };
                Ok(cio::netns::Lent {
                    name: name.to_owned(),
                    control: cio::netdev::Control::from_sockets(v4, rtnl, v6),
                    tun: fds.collect(),
                })
            }
            Reply::Refused(why) => Err(refused(why)),
            _ => Err(refused("an answer that does not carry what was asked for".into())),
        }
    }
}
