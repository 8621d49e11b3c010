//! The platform process's loop: it answers one service over the launch channel, starts
//! each enclave process itself (with the tenant's root and the attestation key, which
//! never leave this process but into the child's config pipe), answers each child's
//! ledger, and ends every child when the service goes.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use enclave_api::handle::TenantId;
use enclave_host::{ChildEnd, ChildFds, Credentials, Direct, Launch};

use crate::channel::{self, Received};
use crate::files::Secrets;
use crate::wire::{self, LaunchRequest, Reply, Request, LAUNCH_FDS, MAX_MESSAGE};

/// Most children one service may have running at once (a tenant has one, a move two).
pub const MAX_CHILDREN: usize = 4096;

/// How the platform starts an enclave process: the program is the platform's choice,
/// never the service's, since the child gets the tenant's root.
#[derive(Debug, Clone)]
pub struct EnclaveProgram {
    /// The executable (the platform's own binary).
    pub program: PathBuf,
    /// Arguments before the guest's own (`enclave-process`).
    pub args: Vec<OsString>,
}

/// How the platform starts the HSM agent: all of it is the platform's configuration. The
/// platform adds `--platform-key` with its own key, so the agent rewraps only to enclaves
/// whose evidence this platform signed.
#[derive(Debug, Clone)]
pub struct AgentProgram {
    /// The executable (the platform's own binary).
    pub program: PathBuf,
    /// Its arguments (`hsm-agent` and the agent's flags).
    pub args: Vec<OsString>,
    /// The user it runs as (`None`: the platform's own).
    pub user: Option<Credentials>,
}

/// The user each tenant's enclave runs as: `None` runs it as the platform's own user;
/// an error refuses the launch.
pub type UserOf<'a> = &'a dyn Fn(TenantId) -> Result<Option<Credentials>, String>;

/// Users from `base`: tenant `t`'s enclave runs as user and group `base + t`, so no
/// tenant's enclave process, nor the service, may read another's memory.
pub fn users_from(base: u32) -> impl Fn(TenantId) -> Result<Option<Credentials>, String> {
    move |t: TenantId| {
        let uid = base.checked_add(t.0).filter(|&u| u < u32::MAX - 1).ok_or_else(|| {
            format!("tenant {} has no user above {base}: choose a lower enclave user base", t.0)
        })?;
        Ok(Some(Credentials { uid, gid: uid }))
    }
}

/// Serves the service at the other end of `socket` until it closes its end, then ends
/// every child still running. Refusals go to standard error, one line each, with their
/// reason (never a secret).
pub fn serve(
    secrets: &Secrets,
    socket: &OwnedFd,
    enclave: &EnclaveProgram,
    user_of: UserOf<'_>,
    agent: Option<&AgentProgram>,
) {
    let hello = wire::encode_reply(0, &Reply::Hello { public_key: secrets.public_key().to_vec() });
    if channel::send(socket, &hello, &[]).is_err() {
        return;
    }
    let mut children: HashMap<u64, Box<dyn ChildEnd>> = HashMap::new();
    let mut next: u64 = 1;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (n, fds) = match channel::recv(socket, &mut buf) {
            Ok(Received::Message(n, fds)) => (n, fds),
            Ok(Received::Truncated) => {
                eprintln!(
                    "platform: refused a request: longer than {MAX_MESSAGE} bytes or too many descriptors"
                );
                continue;
            }
            Ok(Received::Closed) | Err(_) => break,
        };
        let Some((id, req)) = buf.get(..n).and_then(wire::decode_request) else {
            eprintln!("platform: refused a request that does not decode ({n} bytes)");
            continue;
        };
        let (reply, carried): (Reply, Vec<OwnedFd>) = match req {
            Request::Launch(_) | Request::Agent if children.len() >= MAX_CHILDREN => {
                (Reply::Refused(format!("already {MAX_CHILDREN} children")), vec![])
            }
            Request::Agent => match agent
                .ok_or_else(|| "this platform has no HSM agent".to_owned())
                .and_then(|a| start_agent(a, secrets.public_key()))
            {
                Ok((started, pipes)) => {
                    let child = next;
                    next += 1;
                    children.insert(child, started.end);
                    let mut fds = Vec::from(pipes);
                    fds.push(started.pidfd);
                    (Reply::Launched { child, pid: started.pid }, fds)
                }
                Err(why) => {
                    eprintln!("platform: refused to start the HSM agent: {why}");
                    (Reply::Refused(why), vec![])
                }
            },
            Request::Launch(l) => match launch(secrets, enclave, user_of, &l, fds) {
                Ok(started) => {
                    let child = next;
                    next += 1;
                    children.insert(child, started.end);
                    (Reply::Launched { child, pid: started.pid }, vec![started.pidfd])
                }
                Err(why) => {
                    eprintln!("platform: refused to start tenant {}'s enclave: {why}", l.config.tenant.0);
                    (Reply::Refused(why), vec![])
                }
            },
            Request::End { child } => match children.remove(&child) {
                Some(mut c) => (Reply::Ended(c.end()), vec![]),
                None => (Reply::Refused(format!("no child {child}")), vec![]),
            },
            Request::Lend { name, queues } => match lend(&name, queues) {
                Ok(lent) => lent,
                Err(why) => {
                    eprintln!("platform: refused to open namespace {name:?}: {why}");
                    (Reply::Refused(why), vec![])
                }
            },
        };
        let lend: Vec<_> = carried.iter().map(AsFd::as_fd).collect();
        if channel::send(socket, &wire::encode_reply(id, &reply), &lend).is_err() {
            break;
        }
    }
    for (_, mut c) in children {
        c.end();
    }
}

/// Opens what a LEND asks for inside the namespace. Sockets there let the service configure
/// that namespace's devices with the `CAP_NET_ADMIN` it kept; they reach no secret.
fn lend(name: &str, queues: u16) -> Result<(Reply, Vec<OwnedFd>), String> {
    let lent = cio::netns::open_in(name, usize::from(queues)).map_err(|e| e.to_string())?;
    let (v4, rtnl, v6) = lent.control.sockets().map_err(|e| e.to_string())?;
    let has_v6 = v6.is_some();
    let mut fds = vec![v4, rtnl];
    fds.extend(v6);
    fds.extend(lent.tun);
    Ok((Reply::Lent { v6: has_v6, queues }, fds))
}

/// Starts the HSM agent with pipes on its standard input and output, which go to the
/// service; its standard error is the platform's.
fn start_agent(
    a: &AgentProgram,
    public_key: &[u8],
) -> Result<(enclave_host::Launched, [OwnedFd; 2]), String> {
    use std::process::{Command, Stdio};
    // As its own user, it keeps CAP_IPC_LOCK alone: it locks its memory, which holds the PIN.
    let mut cmd = match a.user {
        Some(c) => enclave_host::launch::command_as(&a.program, c),
        None => Command::new(&a.program),
    };
    cmd.args(&a.args)
        .arg("--platform-key")
        .arg(crate::files::hex(public_key))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", a.program.display()))?;
    let (input, output) = (child.stdin.take(), child.stdout.take());
    let started = enclave_host::launch::adopt(child).map_err(|e| e.to_string())?;
    match (input, output) {
        (Some(i), Some(o)) => Ok((started, [OwnedFd::from(i), OwnedFd::from(o)])),
        _ => {
            let mut end = started.end;
            end.end();
            Err("no pipes to the agent".into())
        }
    }
}

fn launch(
    secrets: &Secrets,
    enclave: &EnclaveProgram,
    user_of: UserOf<'_>,
    l: &LaunchRequest,
    fds: Vec<OwnedFd>,
) -> Result<enclave_host::Launched, String> {
    let [shm, request, completion]: [OwnedFd; LAUNCH_FDS] =
        fds.try_into().map_err(|v: Vec<OwnedFd>| format!("{} descriptors, not {LAUNCH_FDS}", v.len()))?;
    let tenant = l.config.tenant;
    let key =
        secrets.tenant_key(tenant.0).ok_or_else(|| format!("this platform serves no tenant {}", tenant.0))?;
    let ledger = secrets.ledger(tenant.0).map_err(|e| e.to_string())?;
    let mut direct = Direct::new(
        enclave.program.clone(),
        enclave.args.clone(),
        tenant,
        key,
        secrets.attestation_key(),
        ledger,
    );
    if let Some(c) = user_of(tenant)? {
        direct = direct.run_as(c);
    }
    let child = ChildFds {
        shm: shm.as_fd(),
        request: request.as_fd(),
        completion: completion.as_fd(),
        geometry: l.geometry,
        spin: l.spin,
        cpus: (!l.cpus.is_empty()).then_some(l.cpus.as_slice()),
    };
    direct.launch(&child, &l.config).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{op, MAX_MESSAGE};
    use enclave_api::report::{Limits, PublicConfig};
    use enclave_host::Geometry;
    use std::time::Duration;

    fn ask(
        socket: &OwnedFd,
        bytes: &[u8],
        fds: &[std::os::fd::BorrowedFd<'_>],
        op: u8,
    ) -> (Reply, Vec<OwnedFd>) {
        channel::send(socket, bytes, fds).unwrap();
        let mut buf = vec![0u8; MAX_MESSAGE];
        let Received::Message(n, got) = channel::recv(socket, &mut buf).unwrap() else { panic!("no reply") };
        (wire::decode_reply(&buf[..n], Some(op)).unwrap().1, got)
    }

    fn launch_request(tenant: u32) -> Vec<u8> {
        wire::encode_request(
            7,
            &Request::Launch(LaunchRequest {
                geometry: Geometry::default(),
                spin: Duration::from_micros(10),
                cpus: vec![],
                config: PublicConfig {
                    tenant: TenantId(tenant),
                    limits: Limits::default(),
                    trusted_platforms: vec![],
                    backup_roots: vec![],
                    tenant_signers: vec![],
                },
            }),
        )
    }

    /// A hostile service on the channel: junk, a launch without the memory it must lend,
    /// an END of a child that is not its, and a launch of a program that dies at once. Each
    /// is refused with a reason, and the platform goes on serving; it stops when the
    /// service closes its end.
    #[test]
    fn a_hostile_service_gets_refusals_and_the_platform_keeps_serving() {
        let dir = std::env::temp_dir().join(format!("cl-platform-serve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let secrets = Secrets::load_or_create(&dir.join("platform.key"), &dir.join("sealing.key")).unwrap();
        let public_key = secrets.public_key().to_vec();
        let (ours, theirs) = enclave_host::launch::seqpacket_pair().unwrap();
        // A program that exits before reading its configuration.
        let enclave = EnclaveProgram { program: "/bin/false".into(), args: vec![] };
        let server = std::thread::spawn(move || serve(&secrets, &theirs, &enclave, &|_| Ok(None), None));

        let mut buf = vec![0u8; MAX_MESSAGE];
        let Received::Message(n, _) = channel::recv(&ours, &mut buf).unwrap() else { panic!("no hello") };
        assert_eq!(wire::decode_reply(&buf[..n], None), Some((0, Reply::Hello { public_key })));

        // Junk gets no reply at all (there is no id to answer); the next request is answered.
        channel::send(&ours, &[0xff; 40], &[]).unwrap();
        let (reply, _) = ask(&ours, &launch_request(1), &[], op::LAUNCH);
        assert!(matches!(&reply, Reply::Refused(why) if why.contains("0 descriptors")), "{reply:?}");

        let (reply, _) = ask(&ours, &wire::encode_request(10, &Request::Agent), &[], op::AGENT);
        assert!(matches!(&reply, Reply::Refused(why) if why.contains("no HSM agent")), "{reply:?}");

        let end = wire::encode_request(8, &Request::End { child: 99 });
        let (reply, _) = ask(&ours, &end, &[], op::END);
        assert!(matches!(&reply, Reply::Refused(why) if why.contains("no child 99")), "{reply:?}");

        // Three descriptors of the right number but a child that dies: refused, no pidfd.
        let memory = [
            std::fs::File::open("/dev/null").unwrap(),
            std::fs::File::open("/dev/null").unwrap(),
            std::fs::File::open("/dev/null").unwrap(),
        ];
        let lend: Vec<_> = memory.iter().map(AsFd::as_fd).collect();
        let (reply, fds) = ask(&ours, &launch_request(1), &lend, op::LAUNCH);
        match reply {
            // Either the pipe broke before the configuration went in, or it went in and
            // the child is dying: both are fine; a refusal must carry no pidfd.
            Reply::Refused(why) => {
                assert!(why.contains("exited"), "{why}");
                assert!(fds.is_empty());
            }
            Reply::Launched { child, .. } => {
                assert_eq!(fds.len(), 1, "a launch carries its pidfd");
                // Once the pidfd says it exited, END reports its own status, not a kill.
                let ready =
                    enclave_api::process::doorbell::wait(&[fds[0].as_fd()], Some(Duration::from_secs(5)));
                assert_eq!(ready.unwrap(), 1);
                let end = wire::encode_request(9, &Request::End { child });
                let (reply, _) = ask(&ours, &end, &[], op::END);
                assert_eq!(reply, Reply::Ended(enclave_api::process::ExitReport::Exited(1)));
            }
            other => panic!("{other:?}"),
        }

        drop(ours);
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
