//! The **process** backend: one hardened process per tenant holds the keys, and the
//! gateway reaches it only through shared-memory rings.
//!
//! # What it protects, and what not
//!
//! The enclave process protects a tenant's keys from a compromised *gateway process* (and
//! from other tenants' enclave processes): the gateway never maps the enclave's memory, the
//! enclave is not dumpable (no core file, no same-uid `ptrace` or `/proc/PID/mem`), has an
//! empty network namespace, runs under a seccomp allow-list once started, and keeps its pages
//! locked in RAM. It does **not** protect against root on the host (root can still read the
//! process's memory); the hardware backends are what protect against root.
//!
//! # Shape
//!
//! ```text
//!  gateway (untrusted)                         enclave process (trusted, one per tenant)
//!  host::ProcessEnclave ── impl Enclave        guest::run ── owns an InlineEnclave
//!     │  writes a batch's descriptors into         │  copies the slot, then the batch's
//!     │  the descriptor table, one request         │  descriptors, out once (TOCTOU),
//!     │  slot per batch, head++                    │  validates every copy, runs the valid
//!     │  doorbell only if the guest sleeps ───────>│  ones as one trusted batch, writes the
//!     │                                            │  statuses, one completion, head++
//!     │<─────────── doorbell only if the host sleeps
//!     └─ packets stay in the shared packet area and are transformed there, in place
//! ```
//!
//! The shared memory is one sealed memfd (size fixed by `F_SEAL_SHRINK | F_SEAL_GROW`, so the
//! gateway cannot truncate it under the enclave and fault it with `SIGBUS`), laid out by
//! [`layout`]: a control block, a request ring, a completion ring, the descriptor and status
//! tables, the packet area and the call area. An ESP batch is *one* request slot naming a run
//! of the descriptor table (packed 32-byte descriptors) and *one* completion; the statuses go
//! to the same run of the status table (2 bytes each). Slots and table entries are read and
//! written as bytes at fixed offsets ([`desc`]), never as Rust structs; the guest keeps its
//! own ring indices privately and only *publishes* them, and takes an entry only when its
//! slot carries exactly the entry's index (the producer's stamp), so a gateway that scribbles
//! over indices or stamps can make the guest skip or stall, never index outside a ring
//! ([`ring`]).
//!
//! # Iago defence (Slick §4.6, applied to offsets)
//!
//! Slick validates that every DPDK buffer pointer handed to the enclave lies outside enclave
//! memory. Here descriptors carry *offsets into the shared area*, not pointers, so they cannot
//! name enclave memory at all; what remains is checked on a private copy ([`validate`]): a
//! batch's run lies inside the descriptor table and is no larger than the trusted core takes
//! (else the whole batch is refused, unread); then, per descriptor, the region lies inside the
//! packet area (`offset + len <= area`, in 64-bit arithmetic, no wrap) and shares no byte with
//! another descriptor's of the batch, the length fits ESP (header + IV + ICV at least, an IP
//! datagram at most), the opcode is known, reserved bytes are zero. Handles are checked by the
//! trusted tables themselves (tenant tag, generation), inside the enclave process, and the
//! exact lengths of the SA's transform by the trusted ESP code. Every refusal is counted
//! ([`RejectReason`]) and answered per descriptor (or per batch); none crashes the enclave or
//! makes it write anything but the packets' own bytes and the batch's status entries.
//!
//! # Speed
//!
//! One batch is one crossing and one ring entry each way: the gateway writes its descriptors
//! (two to a cache line) into the descriptor table, one request slot, stamps that slot (no
//! ring head: the enclave learns of the entry from the slot it reads anyway) and rings the doorbell (an eventfd write) only if the enclave went to sleep; the
//! enclave answers with the batch's statuses (32 to a cache line) and one completion slot.
//! Per packet, only half a cache line of descriptor and two status bytes cross between the
//! two cores (a slot of its own per packet each way, as in the first ring format, made the
//! transport cost about 25 ns per packet). The enclave busy-polls for a short while after
//! each batch before sleeping, yielding its core every few microseconds so that a gateway or
//! peer sharing it can run, so under load a batch costs no system call on either side and
//! no copy: packets are transformed in the shared packet area, where the gateway put them
//! ([`host::PacketArea`]).
//!
//! What is left per batch is kept off the enclave core's critical path: while a batch's
//! crypto runs, the enclave prefetches the next request slot and the descriptor run the
//! gateway will most likely use next, and takes its status and completion lines for writing;
//! neither side fences per batch (the wake-up handshake fences only when a side runs out of
//! work); each side reads the other's consumer index only when its cached free count runs
//! out; shared bytes are copied a word per load (a volatile byte array compiles to a load
//! per byte).
//!
//! The [`Enclave`](crate::Enclave) calls are synchronous (one crossing, then wait). For
//! throughput the data plane can pipeline instead: [`ProcessEnclave::submit_esp`] queues a
//! batch and returns, [`ProcessEnclave::complete_esp`] collects it, so the gateway prepares
//! batch *n + 1* while the enclave process encrypts batch *n* on its own core. Both sides
//! busy-poll under load, so each enclave process wants a core of its own
//! ([`ProcessSpec::cpus`] pins it).
//!
//! # Residual risks
//!
//! * Packets are transformed in the shared area, so the gateway can change a packet's bytes
//!   while the trusted code works on them. No key byte is ever written there, and every
//!   region was bounds-checked against the area; but trusted code that reads the same packet
//!   byte twice can be raced. The AEAD paths authenticate and decrypt in one pass (and
//!   DECRYPT_FORWARD first copies the ciphertext to private scratch); the AES-CBC + HMAC
//!   paths of `trusted/esp.rs` verify and decrypt one private copy (see the threat model,
//!   docs/threat-model.md, on DECRYPT's in-place AEAD open).
//! * The root secret of the instance passes through the gateway at start-up (today's
//!   provisioning model, see [`crate::ProvisioningKey`]); the gateway keeps no copy, and a
//!   restart needs it handed in again.
//! * Status precedence differs slightly from the inline backend: the transport refuses an
//!   out-of-bounds or unknown-opcode descriptor before the trusted table looks at its
//!   handle, so a descriptor that is wrong in both ways reports the transport's reason. Only
//!   the transport refuses overlapping regions ([`crate::EspStatus::Overlap`]): an inline
//!   caller owns all of its memory anyway.
//!
//! # The child program
//!
//! [`host::ProcessSpec`] names the program and arguments that start the guest: the gateway
//! passes `/proc/self/exe enclave-process` (the `cloister` binary's hidden subcommand), tests
//! pass this crate's small `cloister-enclave-process` binary. Both call [`guest::main`].

pub mod codec;
pub mod desc;
pub mod doorbell;
pub mod guest;
pub mod harden;
pub mod host;
pub mod layout;
pub mod ring;
pub mod shm;
pub mod staging;
pub mod validate;

#[cfg(any(test, fuzzing))]
pub mod mock;

#[cfg(fuzzing)]
pub mod fuzzing;

pub use host::{HardeningReport, InFlight, PacketArea, ProcessEnclave, ProcessSpec};
pub use layout::Geometry;
pub use validate::{RejectCounters, RejectReason};

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
    /// The enclave process has died; every call fails with this until [`ProcessEnclave::restart`].
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
    pub(crate) fn last_os(what: &'static str) -> Self {
        Self::Os { what, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) }
    }
}
