//! The launch channel between a service and its platform process: one `SOCK_SEQPACKET`
//! message per request and per reply, integers little-endian. The service is untrusted:
//! the platform parses every request as hostile, and nothing it can ask for yields a
//! secret — it names a tenant and a public configuration, lends the shared memory, and
//! gets a process ID and a pidfd back.
//!
//! ```text
//! hello (platform, once): 0 u32 | status u8 | 0 0 0 | public key, or why it cannot serve
//! LAUNCH: 1 u8 | 0 0 0 | id u32 | slots u32 | descriptors u32 | packet_len u32 | call_len u32
//!         | spin µs u32 | cpu count u16 | cpu u16 * count | public configuration
//!         + SCM_RIGHTS: shared memory, request doorbell, completion doorbell
//! END:    2 u8 | 0 0 0 | id u32 | child u64
//! LEND:   3 u8 | 0 0 0 | id u32 | queues u16 | name length u8 | namespace name, UTF-8
//!         (1 to 255 bytes, no NUL)
//! AGENT:  4 u8 | 0 0 0 | id u32
//! reply:  id u32 | status u8 | 0 0 0 | body
//!   status 0, LAUNCH: child u64 | pid u32 + SCM_RIGHTS: pidfd
//!   status 0, END:    how u8 (0 unknown, 1 exited, 2 signalled) | value i32
//!   status 0, LEND:   v6 u8 (0 or 1) | queues u16 + SCM_RIGHTS: AF_INET socket,
//!                     AF_INET6 socket if v6, /dev/net/tun * queues (all opened there)
//!   status 0, AGENT:  child u64 | pid u32 + SCM_RIGHTS: the agent's input, its output,
//!                     its pidfd
//!   status 1:         why, UTF-8 (no secret is ever in it)
//! ```
//! The public configuration is [`enclave_api::process::config::encode_public`]'s.

use std::time::Duration;

use enclave_api::process::config;
use enclave_api::process::ExitReport;
use enclave_api::report::PublicConfig;
use enclave_host::Geometry;

/// The request operations.
pub mod op {
    /// Start an enclave process.
    pub const LAUNCH: u8 = 1;
    /// End one and say how it ended.
    pub const END: u8 = 2;
    /// Open descriptors inside a named network namespace.
    pub const LEND: u8 = 3;
    /// Start the HSM agent.
    pub const AGENT: u8 = 4;
}

/// Longest message either side sends or takes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Most CPUs one launch may name.
pub const MAX_CPUS: usize = 1024;
/// Longest refusal text kept.
pub const MAX_WHY: usize = 512;
/// Descriptors a LAUNCH carries.
pub const LAUNCH_FDS: usize = 3;
/// Longest namespace name a LEND takes (`NAME_MAX`: it is a file name).
pub const MAX_NAMESPACE: usize = 255;

const STATUS_OK: u8 = 0;
const STATUS_REFUSED: u8 = 1;

/// What a service asks of its platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Start an enclave process on the lent shared memory.
    Launch(LaunchRequest),
    /// End a child this channel launched.
    End {
        /// The child, as the LAUNCH reply named it.
        child: u64,
    },
    /// Open, inside the network namespace `ip netns` knows as `name`, the sockets that
    /// configure its devices and `queues` descriptors of `/dev/net/tun`: a service that may
    /// not enter namespaces makes its tenants' TUN devices there with them.
    Lend {
        /// The namespace.
        name: String,
        /// How many TUN queues.
        queues: u16,
    },
    /// Start the HSM agent the platform was configured with (its program, arguments and
    /// user are the platform's, never the service's), and hand over its pipes.
    Agent,
}

/// A LAUNCH's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRequest {
    /// The rings' geometry (the guest checks it against the memory it maps).
    pub geometry: Geometry,
    /// The guest's busy-poll time.
    pub spin: Duration,
    /// CPUs it may run on; empty: any.
    pub cpus: Vec<usize>,
    /// The enclave's public configuration; the platform adds the tenant's root.
    pub config: PublicConfig,
}

/// What the platform answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The platform's evidence public key (its first message).
    Hello {
        /// Uncompressed SEC1.
        public_key: Vec<u8>,
    },
    /// The child started (its pidfd rides along, after the agent's pipes for AGENT).
    Launched {
        /// The name END takes.
        child: u64,
        /// Its process ID.
        pid: u32,
    },
    /// The child ended.
    Ended(ExitReport),
    /// The namespace's descriptors ride along: an `AF_INET` and a `NETLINK_ROUTE` socket,
    /// an `AF_INET6` one if the namespace has IPv6, then the TUN descriptors.
    Lent {
        /// Whether an `AF_INET6` socket is among them (the namespace has IPv6).
        v6: bool,
        /// How many TUN descriptors follow the sockets.
        queues: u16,
    },
    /// The request was refused or failed.
    Refused(String),
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Encodes request `id`.
pub fn encode_request(id: u32, req: &Request) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    match req {
        Request::Launch(l) => {
            v.extend_from_slice(&[op::LAUNCH, 0, 0, 0]);
            v.extend_from_slice(&id.to_le_bytes());
            let g = l.geometry;
            for n in [g.slots, g.descriptors, g.packet_len, g.call_len] {
                v.extend_from_slice(&n.to_le_bytes());
            }
            v.extend_from_slice(&u32::try_from(l.spin.as_micros()).unwrap_or(u32::MAX).to_le_bytes());
            v.extend_from_slice(&u16::try_from(l.cpus.len()).unwrap_or(u16::MAX).to_le_bytes());
            for &c in &l.cpus {
                v.extend_from_slice(&u16::try_from(c).unwrap_or(u16::MAX).to_le_bytes());
            }
            v.extend_from_slice(&config::encode_public(&l.config));
        }
        Request::End { child } => {
            v.extend_from_slice(&[op::END, 0, 0, 0]);
            v.extend_from_slice(&id.to_le_bytes());
            v.extend_from_slice(&child.to_le_bytes());
        }
        Request::Agent => {
            v.extend_from_slice(&[op::AGENT, 0, 0, 0]);
            v.extend_from_slice(&id.to_le_bytes());
        }
        Request::Lend { name, queues } => {
            v.extend_from_slice(&[op::LEND, 0, 0, 0]);
            v.extend_from_slice(&id.to_le_bytes());
            v.extend_from_slice(&queues.to_le_bytes());
            v.push(u8::try_from(name.len()).unwrap_or(0));
            v.extend_from_slice(name.as_bytes());
        }
    }
    v
}

/// Decodes a request: its id and body, or `None` for anything malformed.
pub fn decode_request(b: &[u8]) -> Option<(u32, Request)> {
    if b.len() > MAX_MESSAGE || b.get(1..4)? != [0, 0, 0] {
        return None;
    }
    let id = u32_at(b, 4)?;
    match *b.first()? {
        op::LAUNCH => {
            let geometry = Geometry {
                slots: u32_at(b, 8)?,
                descriptors: u32_at(b, 12)?,
                packet_len: u32_at(b, 16)?,
                call_len: u32_at(b, 20)?,
            };
            let spin = Duration::from_micros(u64::from(u32_at(b, 24)?).min(1_000_000));
            let n = usize::from(u16::from_le_bytes(b.get(28..30)?.try_into().ok()?));
            if n > MAX_CPUS {
                return None;
            }
            let end = 30 + 2 * n;
            let cpus = b
                .get(30..end)?
                .chunks_exact(2)
                .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])))
                .collect();
            let config = config::decode_public(b.get(end..)?)?;
            Some((id, Request::Launch(LaunchRequest { geometry, spin, cpus, config })))
        }
        op::END if b.len() == 16 => {
            Some((id, Request::End { child: u64::from_le_bytes(b.get(8..16)?.try_into().ok()?) }))
        }
        op::AGENT if b.len() == 8 => Some((id, Request::Agent)),
        op::LEND => {
            let queues = u16::from_le_bytes(b.get(8..10)?.try_into().ok()?);
            let len = usize::from(*b.get(10)?);
            let name = b.get(11..)?;
            if len == 0 || name.len() != len || name.contains(&0) {
                return None;
            }
            let name = core::str::from_utf8(name).ok()?.to_owned();
            Some((id, Request::Lend { name, queues }))
        }
        _ => None,
    }
}

/// Encodes the reply to request `id` (0 for the hello).
pub fn encode_reply(id: u32, reply: &Reply) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    match reply {
        Reply::Hello { public_key } => {
            v.extend_from_slice(&[STATUS_OK, 0, 0, 0]);
            v.extend_from_slice(public_key);
        }
        Reply::Launched { child, pid } => {
            v.extend_from_slice(&[STATUS_OK, 0, 0, 0]);
            v.extend_from_slice(&child.to_le_bytes());
            v.extend_from_slice(&pid.to_le_bytes());
        }
        Reply::Ended(exit) => {
            v.extend_from_slice(&[STATUS_OK, 0, 0, 0]);
            let (how, value) = match *exit {
                ExitReport::Unknown => (0u8, 0i32),
                ExitReport::Exited(c) => (1, c),
                ExitReport::Signaled(s) => (2, s),
            };
            v.push(how);
            v.extend_from_slice(&value.to_le_bytes());
        }
        Reply::Lent { v6, queues } => {
            v.extend_from_slice(&[STATUS_OK, 0, 0, 0]);
            v.push(u8::from(*v6));
            v.extend_from_slice(&queues.to_le_bytes());
        }
        Reply::Refused(why) => {
            v.extend_from_slice(&[STATUS_REFUSED, 0, 0, 0]);
            let mut end = why.len().min(MAX_WHY);
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            v.extend_from_slice(&why.as_bytes()[..end]);
        }
    }
    v
}

/// Decodes a reply to a request of `op` (`None`: the hello): its id and body.
pub fn decode_reply(b: &[u8], op: Option<u8>) -> Option<(u32, Reply)> {
    let id = u32_at(b, 0)?;
    let body = b.get(8..)?;
    if b.get(5..8)? != [0, 0, 0] {
        return None;
    }
    let reply = match (*b.get(4)?, op) {
        (STATUS_REFUSED, _) => {
            Reply::Refused(String::from_utf8_lossy(body.get(..body.len().min(MAX_WHY))?).into())
        }
        (STATUS_OK, None) => Reply::Hello { public_key: body.to_vec() },
        (STATUS_OK, Some(op::LAUNCH | op::AGENT)) if body.len() == 12 => Reply::Launched {
            child: u64::from_le_bytes(body.get(..8)?.try_into().ok()?),
            pid: u32_at(body, 8)?,
        },
        (STATUS_OK, Some(op::END)) if body.len() == 5 => {
            let value = i32::from_le_bytes(body.get(1..5)?.try_into().ok()?);
            Reply::Ended(match body[0] {
                1 => ExitReport::Exited(value),
                2 => ExitReport::Signaled(value),
                _ => ExitReport::Unknown,
            })
        }
        (STATUS_OK, Some(op::LEND)) if body.len() == 3 && body[0] <= 1 => {
            Reply::Lent { v6: body[0] == 1, queues: u16::from_le_bytes(body.get(1..3)?.try_into().ok()?) }
        }
        _ => return None,
    };
    Some((id, reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use enclave_api::handle::TenantId;
    use enclave_api::report::Limits;

    fn launch() -> Request {
        Request::Launch(LaunchRequest {
            geometry: Geometry::default(),
            spin: Duration::from_micros(50),
            cpus: vec![1, 3],
            config: PublicConfig {
                tenant: TenantId(7),
                limits: Limits::default(),
                trusted_platforms: vec![vec![4; 65]],
                backup_roots: vec![],
                tenant_signers: vec![vec![4; 65], vec![5; 65]],
            },
        })
    }

    #[test]
    fn requests_round_trip_and_junk_is_refused() {
        for req in
            [launch(), Request::End { child: 9 }, Request::Lend { name: "acme-cloud".into(), queues: 2 }]
        {
            let b = encode_request(42, &req);
            assert_eq!(decode_request(&b), Some((42, req.clone())));
            for cut in 0..b.len() {
                assert!(decode_request(&b[..cut]).is_none(), "{cut} of {} bytes", b.len());
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(decode_request(&longer).is_none(), "a trailing byte");
            let mut bad = b.clone();
            bad[2] = 1;
            assert!(decode_request(&bad).is_none(), "reserved bytes");
        }
        assert!(decode_request(&[9, 0, 0, 0, 1, 0, 0, 0]).is_none(), "unknown op");
        assert!(
            decode_request(&[op::LEND, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0xff]).is_none(),
            "a name not UTF-8"
        );
        assert!(decode_request(&[op::LEND, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0]).is_none(), "a NUL in the name");
        let long = encode_request(1, &Request::Lend { name: "n".repeat(MAX_NAMESPACE + 1), queues: 1 });
        assert!(decode_request(&long).is_none(), "a name longer than a file name");
        // The signers come last, sorted ([4; 65] then [5; 65]): swapped, or repeated, they
        // are not the encoding of any configuration.
        let b = encode_request(42, &launch());
        let (first, second) = (b.len() - 2 * (4 + 65) + 4, b.len() - 65);
        let mut swapped = b.clone();
        swapped[first..first + 65].copy_from_slice(&[5; 65]);
        swapped[second..].copy_from_slice(&[4; 65]);
        assert!(decode_request(&swapped).is_none(), "an unsorted key set");
        let mut repeated = b.clone();
        repeated[second..].copy_from_slice(&[4; 65]);
        assert!(decode_request(&repeated).is_none(), "a repeated key");
    }

    #[test]
    fn replies_round_trip() {
        let cases = [
            (None, Reply::Hello { public_key: vec![4; 65] }),
            (Some(op::LAUNCH), Reply::Launched { child: 3, pid: 4321 }),
            (Some(op::END), Reply::Ended(ExitReport::Exited(0))),
            (Some(op::END), Reply::Ended(ExitReport::Signaled(9))),
            (Some(op::END), Reply::Ended(ExitReport::Unknown)),
            (Some(op::LAUNCH), Reply::Refused("no such thing".into())),
            (Some(op::LEND), Reply::Lent { v6: true, queues: 4 }),
            (Some(op::LEND), Reply::Lent { v6: false, queues: 1 }),
            (Some(op::AGENT), Reply::Launched { child: 2, pid: 77 }),
        ];
        for (op, r) in cases {
            assert_eq!(decode_reply(&encode_reply(5, &r), op), Some((5, r)));
        }
        assert!(
            decode_reply(&encode_reply(5, &Reply::Launched { child: 1, pid: 2 }), Some(op::END)).is_none()
        );
        let long = "é".repeat(MAX_WHY);
        let Some((_, Reply::Refused(why))) = decode_reply(&encode_reply(1, &Reply::Refused(long)), None)
        else {
            panic!("a long refusal decodes");
        };
        assert!(why.len() <= MAX_WHY && why.chars().all(|c| c == 'é'), "cut on a character boundary");
    }
}
