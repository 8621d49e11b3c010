//! The control socket: a Unix stream socket (mode 0600) that answers one text request per
//! connection — `list`, `counters`, `initiate NAME`, `rekey-child SPI`, `terminate-ike ID` —
//! with text, as `swanctl` does over VICI. No reply ever carries a key: the gateway has none.

use core::fmt::Write as _;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dataplane::{Dataplane, IkeInbox, WorkerSnapshot};
use enclave::Enclave;
use ike::{Endpoint, SaId};

use crate::children::Children;
use crate::error::{Error, Result};

/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request line.
const MAX_REQUEST: u64 = 256;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// IKE and child SAs, like `swanctl --list-sas`.
    List,
    /// The engine's and data plane's counters.
    Counters,
    /// Start a connection as initiator.
    Initiate(String),
    /// Rekey the child SA with this inbound SPI.
    RekeyChild(u32),
    /// Rekey an IKE SA (its children move to the new one).
    RekeyIke(u64),
    /// Delete an IKE SA (and its children).
    TerminateIke(u64),
}

impl Request {
    /// Parses one request line.
    pub fn parse(line: &str) -> core::result::Result<Self, String> {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or("");
        let arg = words.next();
        let hex = |s: Option<&str>| {
            s.and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                .ok_or_else(|| "expected an SPI in hex".to_owned())
        };
        let r = match verb {
            "list" | "counters" if arg.is_some() => return Err("too many arguments".into()),
            "list" => Self::List,
            "counters" => Self::Counters,
            "initiate" => Self::Initiate(arg.ok_or("expected a connection name")?.to_owned()),
            "rekey-child" => Self::RekeyChild(hex(arg)?),
            "rekey-ike" => Self::RekeyIke(ike_number(arg)?),
            "terminate-ike" => Self::TerminateIke(ike_number(arg)?),
            other => return Err(format!("unknown request {:?}", other.chars().take(32).collect::<String>())),
        };
        if words.next().is_some() {
            return Err("too many arguments".into());
        }
        Ok(r)
    }
}

/// An IKE SA number as `list` prints it (`#N` or `N`).
fn ike_number(arg: Option<&str>) -> core::result::Result<u64, String> {
    arg.and_then(|s| s.trim_start_matches('#').parse().ok())
        .ok_or_else(|| "expected an IKE SA number".to_owned())
}

/// The listening socket.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds `path` (its directory is created; a stale socket file is replaced).
    pub fn bind(path: &Path) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let io = |what: &str, source| Error::Io {
            what: format!("control socket {}: {what}", path.display()),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating its directory", e))?;
        }
        if path.exists() {
            // A live gateway answers; only a dead one's socket may be replaced.
            if UnixStream::connect(path).is_ok() {
                return Err(Error::Config {
                    field: "gateway.control_socket",
                    why: format!("{} is in use by a running gateway", path.display()),
                });
            }
            std::fs::remove_file(path).map_err(|e| io("removing a stale socket", e))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| io("bind", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| io("chmod", e))?;
        listener.set_nonblocking(true).map_err(|e| io("non-blocking", e))?;
        Ok(Self { listener, path: path.to_path_buf() })
    }

    /// The next waiting client, if any.
    pub(crate) fn accept(&self) -> Option<Connection> {
        let (stream, _) = self.listener.accept().ok()?;
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(CLIENT_TIMEOUT)).ok()?;
        stream.set_write_timeout(Some(CLIENT_TIMEOUT)).ok()?;
        Some(Connection { stream })
    }

    /// Removes the socket file.
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl AsFd for ControlServer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

/// One client.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: UnixStream,
}

impl Connection {
    /// Reads the request line; `None` for a client that sent nothing (e.g. a second
    /// gateway checking whether this socket is live).
    pub(crate) fn request(&mut self) -> Option<core::result::Result<Request, String>> {
        let mut line = String::new();
        match BufReader::new((&self.stream).take(MAX_REQUEST)).read_line(&mut line) {
            Ok(_) if line.trim().is_empty() => None,
            Ok(_) => Some(Request::parse(line.trim())),
            Err(e) => Some(Err(e.to_string())),
        }
    }

    /// Writes the reply and closes.
    pub(crate) fn reply(mut self, text: &str) {
        let _ = self.stream.write_all(text.as_bytes());
    }
}

/// Sends one request to a gateway's control socket and returns its reply.
pub fn call(path: &Path, request: &str) -> Result<String> {
    let io = |source| Error::Io { what: format!("control socket {}", path.display()), source };
    let mut s = UnixStream::connect(path).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(io)?;
    s.write_all(format!("{request}\n").as_bytes()).map_err(io)?;
    s.shutdown(std::net::Shutdown::Write).map_err(io)?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(io)?;
    Ok(reply)
}

/// A transform suite as strongSwan prints it (`AES_GCM_16-256`, `AES_CBC-256/HMAC_SHA2_256_128`).
pub fn suite_name(s: enclave::Suite) -> String {
    use enclave::{Cipher, Integ};
    let cipher = match s.cipher {
        Cipher::AesCbc128 => "AES_CBC-128",
        Cipher::AesCbc256 => "AES_CBC-256",
        Cipher::AesGcm16_128 => "AES_GCM_16-128",
        Cipher::AesGcm16_256 => "AES_GCM_16-256",
        Cipher::ChaCha20Poly1305 => "CHACHA20_POLY1305-256",
    };
    let integ = s.integ.map(|i| match i {
        Integ::HmacSha256_128 => "HMAC_SHA2_256_128",
        Integ::HmacSha384_192 => "HMAC_SHA2_384_192",
        Integ::HmacSha512_256 => "HMAC_SHA2_512_256",
    });
    integ.map_or_else(|| cipher.to_owned(), |i| format!("{cipher}/{i}"))
}

/// An IKE PRF, key exchange and RFC 9370 additional key exchanges as strongSwan prints
/// them (`PRF_HMAC_SHA2_384/CURVE_25519/KE1_ML_KEM_768`).
fn prf_group_name(
    prf: enclave::Prf,
    group: enclave::DhGroup,
    additional: &[Option<enclave::DhGroup>],
) -> String {
    use enclave::{DhGroup, Prf};
    let p = match prf {
        Prf::HmacSha256 => "PRF_HMAC_SHA2_256",
        Prf::HmacSha384 => "PRF_HMAC_SHA2_384",
        Prf::HmacSha512 => "PRF_HMAC_SHA2_512",
    };
    let name = |g: DhGroup| match g {
        DhGroup::Modp2048 => "MODP_2048",
        DhGroup::Modp3072 => "MODP_3072",
        DhGroup::EcpP256 => "ECP_256",
        DhGroup::EcpP384 => "ECP_384",
        DhGroup::Curve25519 => "CURVE_25519",
        DhGroup::MlKem768 => "ML_KEM_768",
        DhGroup::MlKem1024 => "ML_KEM_1024",
    };
    let mut out = format!("{p}/{}", name(group));
    for (n, g) in (1..).zip(additional) {
        if let Some(g) = g {
            out.push_str(&format!("/KE{n}_{}", name(*g)));
        }
    }
    out
}

fn ago(since: Instant, now: Instant) -> String {
    format!("{}s ago", now.saturating_duration_since(since).as_secs())
}

/// `swanctl --list-sas`-like text: IKE SAs with their child SAs and usage.
pub(crate) fn list<E: Enclave + 'static>(
    engine: &Endpoint<E>,
    children: &Children,
    identities: &BTreeMap<SaId, (String, String)>,
    dp: &Dataplane<E>,
    now: Instant,
) -> String {
    let mut out = String::new();
    for sa in engine.ike_sas() {
        let (spi_i, spi_r) = sa.spis();
        let ours = if sa.role() == enclave::Role::Initiator { ('*', ' ') } else { (' ', '*') };
        let state = match sa.successor() {
            Some(new) => format!("Rekeyed (to #{})", new.0),
            None => format!("{:?}", sa.state()),
        };
        let _ = writeln!(
            out,
            "{}: #{}, {state}, IKEv2, {spi_i:016x}_i{} {spi_r:016x}_r{}",
            sa.connection(),
            sa.id().0,
            ours.0,
            ours.1
        );
        let (lid, rid) = identities.get(&sa.id()).cloned().unwrap_or_default();
        let _ = writeln!(out, "  local  '{lid}' @ {}", sa.local());
        let _ = writeln!(out, "  remote '{rid}' @ {}", sa.remote());
        if let Some(c) = sa.choice() {
            let _ =
                writeln!(out, "  {}/{}", suite_name(c.suite), prf_group_name(c.prf, c.group, &c.additional));
        }
        for c in children.iter().filter(|c| c.ike == sa.id()) {
            let ch = &c.child;
            let mode = match ch.encapsulation {
                ike::Encapsulation::Esp => "TUNNEL",
                ike::Encapsulation::Udp { .. } => "TUNNEL-in-UDP",
            };
            let state = if c.outbound.is_some() { "INSTALLED" } else { "REKEYED" };
            let _ = writeln!(
                out,
                "  {}: {state}, {mode}, ESP:{:?}{}",
                ch.name,
                ch.suite,
                if ch.esn { "/ESN" } else { "" }
            );
            let _ = writeln!(out, "    installed {}", ago(c.since, now));
            let usage = dp
                .read(|sad, _| {
                    let inb = sad.inbound(ch.spi_inbound).map(|s| s.runtime().usage());
                    let out = c.outbound.and_then(|id| sad.outbound(id)).map(|s| s.runtime().usage());
                    (inb, out)
                })
                .unwrap_or_default();
            let fmt = |u: Option<(u64, u64)>| {
                u.map_or_else(|| "-".to_owned(), |(p, b)| format!("{b} bytes, {p} packets"))
            };
            let _ = writeln!(out, "    in  {:08x}, {}", ch.spi_inbound, fmt(usage.0));
            let _ = writeln!(out, "    out {:08x}, {}", ch.spi_outbound, fmt(usage.1));
            let ts = |v: &[ike::ts::TrafficSelector]| {
                v.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
            };
            let _ = writeln!(out, "    local  {}", ts(&ch.local_ts));
            let _ = writeln!(out, "    remote {}", ts(&ch.remote_ts));
        }
    }
    if out.is_empty() {
        out.push_str("no IKE SAs\n");
    }
    out
}

/// The engine's drops and refusals and the data plane's totals.
pub(crate) fn counters<E: Enclave + 'static>(
    engine: &Endpoint<E>,
    dp: &Dataplane<E>,
    inbox: &IkeInbox,
) -> String {
    format!(
        "ike {:?}\nike inbox dropped={}\n{}\n",
        engine.counters(),
        inbox.dropped(),
        WorkerSnapshot::sum(&dp.snapshot())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_read_as_strongswan_prints_them() {
        use enclave_core::{Cipher, Integ, Suite};
        assert_eq!(suite_name(Suite { cipher: Cipher::AesGcm16_256, integ: None }), "AES_GCM_16-256");
        assert_eq!(
            suite_name(Suite { cipher: Cipher::AesCbc256, integ: Some(Integ::HmacSha256_128) }),
            "AES_CBC-256/HMAC_SHA2_256_128"
        );
        assert_eq!(
            prf_group_name(enclave_core::Prf::HmacSha384, enclave_core::DhGroup::EcpP384, &[]),
            "PRF_HMAC_SHA2_384/ECP_384"
        );
        use enclave_core::DhGroup as G;
        assert_eq!(
            prf_group_name(
                enclave_core::Prf::HmacSha256,
                G::Curve25519,
                &[Some(G::MlKem768), None, Some(G::EcpP256)]
            ),
            "PRF_HMAC_SHA2_256/CURVE_25519/KE1_ML_KEM_768/KE3_ECP_256"
        );
    }

    #[test]
    fn requests_parse_and_refuse_clearly() {
        assert_eq!(Request::parse("list"), Ok(Request::List));
        assert_eq!(Request::parse("initiate site-a"), Ok(Request::Initiate("site-a".into())));
        assert_eq!(Request::parse("rekey-child c0ffee01"), Ok(Request::RekeyChild(0xc0ff_ee01)));
        assert_eq!(Request::parse("rekey-child 0xc0ffee01"), Ok(Request::RekeyChild(0xc0ff_ee01)));
        assert_eq!(Request::parse("terminate-ike #7"), Ok(Request::TerminateIke(7)));
        assert_eq!(Request::parse("rekey-ike 7"), Ok(Request::RekeyIke(7)));
        assert!(Request::parse("rekey-ike x").is_err());
        assert!(Request::parse("initiate").is_err());
        assert!(Request::parse("list extra").is_err());
        assert!(Request::parse("rekey-child zz").is_err());
        assert!(Request::parse("shutdown now").unwrap_err().contains("unknown request"));
    }

    #[test]
    fn a_control_socket_answers_and_refuses_a_second_gateway() {
        let dir = std::env::temp_dir().join(format!("cl-gw-ctl-{}", std::process::id()));
        let path = dir.join("gw.sock");
        let server = ControlServer::bind(&path).unwrap();
        assert!(matches!(ControlServer::bind(&path), Err(Error::Config { .. })));
        let client = std::thread::spawn({
            let path = path.clone();
            move || call(&path, "counters").unwrap()
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let (conn, request) = loop {
            // The second bind's liveness probe comes first and sends nothing.
            if let Some(mut c) = server.accept() {
                if let Some(r) = c.request() {
                    break (c, r);
                }
            }
            assert!(Instant::now() < deadline, "no client");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(request, Ok(Request::Counters));
        conn.reply("ok\n");
        assert_eq!(client.join().unwrap(), "ok\n");
        server.remove();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
