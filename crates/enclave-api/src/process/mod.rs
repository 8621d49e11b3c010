//! The process backend's boundary as both sides see it: the shared memory's layout, the
//! rings and their stamped slots, the descriptors and the call codec, the doorbells, the
//! guest's command line and config pipe, how the backend fails, and the two hardening steps
//! every process that holds secrets takes first (the enclave process, the HSM agent).
//!
//! The untrusted host side is `cloister-enclave-host`; the enclave side (the guest, its
//! hardening and dispatch into the trusted core) is `cloister-enclave`'s `process` module.
//! Everything here is plain data and its validation: no key, no cryptography.
#![allow(unsafe_code)] // shared memory, atomics and a few syscalls, each with its SAFETY note

pub mod codec;
pub mod desc;
pub mod doorbell;
pub mod layout;
pub mod ring;
pub mod shm;
pub mod validate;
pub mod wire;

use layout::Geometry;
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::time::Duration;

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
    /// The enclave process has died; every call fails with this until `cloister_enclave_host::ProcessEnclave::restart`.
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
    /// The platform process did not start the enclave process, or is gone.
    #[error("the platform: {why}")]
    Platform {
        /// Its reason, or what failed on the way to it.
        why: String,
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

/// What the host passes on the child's command line (after the program's own arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestArgs {
    /// The shared memfd.
    pub shm_fd: RawFd,
    /// The request doorbell (host rings, guest waits).
    pub request_fd: RawFd,
    /// The completion doorbell (guest rings, host waits).
    pub completion_fd: RawFd,
    /// The read end of the config pipe (root secret and limits; read once, then closed).
    pub config_fd: RawFd,
    /// The enclave's end of the channel to its platform's ledger ([`crate::ledger`]).
    pub ledger_fd: RawFd,
    /// The ring geometry; the guest derives the layout from it, never from shared memory.
    pub geometry: Geometry,
    /// How long the guest busy-polls after its last request before sleeping.
    pub spin: Duration,
    /// The gateway's process ID: the guest checks that this is its parent before it
    /// trusts the parent's pidfd to tell it when the gateway is gone.
    pub parent_pid: u32,
}

impl GuestArgs {
    /// The arguments, as the host passes them.
    pub fn to_args(&self) -> Vec<String> {
        let g = self.geometry;
        [
            ("--shm-fd", self.shm_fd.to_string()),
            ("--request-fd", self.request_fd.to_string()),
            ("--completion-fd", self.completion_fd.to_string()),
            ("--config-fd", self.config_fd.to_string()),
            ("--ledger-fd", self.ledger_fd.to_string()),
            ("--slots", g.slots.to_string()),
            ("--descriptors", g.descriptors.to_string()),
            ("--packet-len", g.packet_len.to_string()),
            ("--call-len", g.call_len.to_string()),
            ("--spin-us", self.spin.as_micros().to_string()),
            ("--parent-pid", self.parent_pid.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect()
    }

    /// Parses [`Self::to_args`]'s output; every flag is required exactly once.
    pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Self, ProcessError> {
        let bad = |why| ProcessError::Args { why };
        let mut v: [Option<u64>; 11] = [None; 11];
        let names = [
            "--shm-fd",
            "--request-fd",
            "--completion-fd",
            "--config-fd",
            "--slots",
            "--packet-len",
            "--call-len",
            "--spin-us",
            "--parent-pid",
            "--descriptors",
            "--ledger-fd",
        ];
        let mut it = args.into_iter();
        while let Some(k) = it.next() {
            let k = k.into_string().map_err(|_| bad("non-UTF-8 argument"))?;
            let i = names.iter().position(|n| *n == k).ok_or(bad("unknown flag"))?;
            let val = it.next().ok_or(bad("flag without a value"))?;
            let val = val.to_str().and_then(|s| s.parse::<u64>().ok()).ok_or(bad("not a number"))?;
            let slot = v.get_mut(i).ok_or(bad("unknown flag"))?;
            if slot.replace(val).is_some() {
                return Err(bad("flag given twice"));
            }
        }
        let get = |i: usize| v.get(i).copied().flatten().ok_or(bad("missing flag"));
        let fd = |i: usize| get(i).and_then(|x| RawFd::try_from(x).map_err(|_| bad("bad descriptor")));
        let u32_of = |i: usize| get(i).and_then(|x| u32::try_from(x).map_err(|_| bad("value too large")));
        Ok(Self {
            shm_fd: fd(0)?,
            request_fd: fd(1)?,
            completion_fd: fd(2)?,
            config_fd: fd(3)?,
            ledger_fd: fd(10)?,
            geometry: Geometry {
                slots: u32_of(4)?,
                descriptors: u32_of(9)?,
                packet_len: u32_of(5)?,
                call_len: u32_of(6)?,
            },
            spin: Duration::from_micros(get(7)?.min(1_000_000)),
            parent_pid: u32_of(8)?,
        })
    }
}

/// The root secret and limits, as they cross the config pipe (never argv or the
/// environment, which other processes of the same user can read), and the public part
/// alone, as a launcher without the secrets asks the platform for an enclave.
///
/// ```text
/// pipe:   root key (32) | platform key length u32 | platform key (PKCS#8) | public
/// public: tenant u32 | five limits u64 | inbound mode u8 | three key sets
/// set:    count u32 | (length u32 | key)*
/// ```
/// Integers are little-endian.
pub mod config {
    use crate::handle::TenantId;
    use crate::report::{
        EnclaveConfig, InboundMode, Limits, ProvisioningKey, PublicConfig, MAX_PLATFORM_PUBLIC_KEY,
        MAX_TRUSTED_PLATFORMS,
    };

    /// Bytes of the pipe's fixed head: the key and the platform key's length.
    pub const FIXED_LEN: usize = 32 + 4;
    /// Bytes of the public part's fixed head: tenant, five limits, inbound mode.
    pub const PUBLIC_FIXED_LEN: usize = 4 + 5 * 8 + 1;
    /// Longest platform key (PKCS#8) accepted.
    pub const MAX_PLATFORM_KEY: usize = 1024;
    /// Longest public part: the fixed head and the three measured key sets (trusted
    /// platforms, backup roots, tenant signers).
    pub const MAX_PUBLIC_LEN: usize =
        PUBLIC_FIXED_LEN + 3 * (4 + MAX_TRUSTED_PLATFORMS * (4 + MAX_PLATFORM_PUBLIC_KEY));
    /// Longest pipe encoding.
    pub const MAX_LEN: usize = FIXED_LEN + MAX_PLATFORM_KEY + MAX_PUBLIC_LEN;

    /// Encodes the configuration `public` with its root `key` and the attestation platform
    /// key (PKCS#8 P-256) for the pipe.
    pub fn encode(
        key: &ProvisioningKey,
        platform_key: &[u8],
        public: &PublicConfig,
    ) -> zeroize::Zeroizing<Vec<u8>> {
        let mut v = zeroize::Zeroizing::new(Vec::with_capacity(FIXED_LEN + platform_key.len() + 256));
        v.extend_from_slice(&key.expose()[..]);
        v.extend_from_slice(&u32::try_from(platform_key.len()).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(platform_key);
        put_public(&mut v, public);
        v
    }

    /// Decodes [`encode`]'s output: the config and where the platform key lies in `b`.
    pub fn decode(b: &[u8]) -> Option<(EnclaveConfig, core::ops::Range<usize>)> {
        let key: [u8; 32] = b.get(..32)?.try_into().ok()?;
        let pk_len = u32::from_le_bytes(b.get(32..36)?.try_into().ok()?) as usize;
        if pk_len > MAX_PLATFORM_KEY {
            return None;
        }
        let end = FIXED_LEN.checked_add(pk_len)?;
        let public = decode_public(b.get(end..)?)?;
        Some((EnclaveConfig::from_public(public, ProvisioningKey::from_bytes(key)), FIXED_LEN..end))
    }

    /// Encodes the public part alone.
    pub fn encode_public(config: &PublicConfig) -> Vec<u8> {
        let mut v = Vec::with_capacity(PUBLIC_FIXED_LEN + 256);
        put_public(&mut v, config);
        v
    }

    fn put_public(v: &mut Vec<u8>, config: &PublicConfig) {
        v.extend_from_slice(&config.tenant.0.to_le_bytes());
        let l = config.limits;
        for n in [l.max_ike_sas, l.max_esp_sas, l.max_dh, l.max_secrets, l.max_batch] {
            v.extend_from_slice(&(n as u64).to_le_bytes());
        }
        v.push(l.inbound.code());
        for keys in [&config.trusted_platforms, &config.backup_roots, &config.tenant_signers] {
            let set = crate::report::key_set(keys);
            v.extend_from_slice(&u32::try_from(set.len()).unwrap_or(u32::MAX).to_le_bytes());
            for key in set {
                v.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
                v.extend_from_slice(key);
            }
        }
    }

    /// Decodes [`encode_public`]'s output (all of `b`, nothing after it; each key set sorted
    /// and without repeats, as encoded).
    pub fn decode_public(b: &[u8]) -> Option<PublicConfig> {
        let u64_at =
            |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?)) };
        let u32_at =
            |i: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?)) };
        let tenant = TenantId(u32_at(0)?);
        let lim = |k: usize| u64_at(4 + 8 * k).and_then(|x| usize::try_from(x).ok());
        let limits = Limits {
            max_ike_sas: lim(0)?,
            max_esp_sas: lim(1)?,
            max_dh: lim(2)?,
            max_secrets: lim(3)?,
            max_batch: lim(4)?,
            inbound: InboundMode::from_code(*b.get(44)?)?,
        };
        let mut at = PUBLIC_FIXED_LEN;
        let mut set = || -> Option<Vec<Vec<u8>>> {
            let count = u32_at(at)? as usize;
            if count > MAX_TRUSTED_PLATFORMS {
                return None;
            }
            at += 4;
            let mut keys = Vec::with_capacity(count);
            for _ in 0..count {
                let n = u32_at(at)? as usize;
                if n > MAX_PLATFORM_PUBLIC_KEY {
                    return None;
                }
                let key = b.get(at + 4..at + 4 + n)?;
                // As measured: sorted, without repeats (one encoding per configuration).
                if keys.last().is_some_and(|last: &Vec<u8>| last.as_slice() >= key) {
                    return None;
                }
                keys.push(key.to_vec());
                at += 4 + n;
            }
            Some(keys)
        };
        let trusted_platforms = set()?;
        let backup_roots = set()?;
        let tenant_signers = set()?;
        if b.len() != at {
            return None;
        }
        Some(PublicConfig { tenant, limits, trusted_platforms, backup_roots, tenant_signers })
    }
}

/// Hardening step bits, as the guest reports them in the control block.
pub mod bits {
    /// `PR_SET_DUMPABLE` 0 is in force.
    pub const NON_DUMPABLE: u32 = 1 << 0;
    /// The process is in a fresh, empty network namespace.
    pub const EMPTY_NETNS: u32 = 1 << 1;
    /// That namespace needed a user namespace too (not root, or no `CAP_SYS_ADMIN`).
    pub const NETNS_VIA_USERNS: u32 = 1 << 2;
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` is in force.
    pub const MEMORY_LOCKED: u32 = 1 << 3;
    /// The root secret arrived in `memfd_secret` memory.
    pub const MEMFD_SECRET: u32 = 1 << 4;
    /// The root secret arrived in `mlock`ed anonymous memory (no `memfd_secret`).
    pub const MLOCK_ARENA: u32 = 1 << 5;
    /// The seccomp allow-list is installed (with `PR_SET_NO_NEW_PRIVS`).
    pub const SECCOMP: u32 = 1 << 6;
    /// Inherited descriptors other than the rings' were closed.
    pub const FDS_CLOSED: u32 = 1 << 7;
}
