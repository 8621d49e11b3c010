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
//!  cloister_enclave_host::ProcessEnclave       guest::run ── owns an InlineEnclave
//!     (impl Enclave)
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
//! (`cloister_enclave_host::PacketArea`).
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
//! `cloister_enclave_host::ProcessSpec` names the program and arguments that start the guest: the gateway
//! passes `/proc/self/exe enclave-process` (the `cloister` binary's hidden subcommand), tests
//! pass this crate's small `cloister-enclave-process` binary. Both call [`guest::main`].

// The boundary both sides share (layout, rings, descriptors, codec, doorbells, the guest's
// arguments and config pipe) is the call surface's: `cloister_enclave_api::process`. The
// host side, `ProcessEnclave`, is `cloister-enclave-host`; this module is the enclave side.
pub use enclave_api::process::*;

pub mod guest;
pub mod harden;
pub mod staging;

#[cfg(any(test, fuzzing))]
pub mod mock;

#[cfg(fuzzing)]
pub mod fuzzing;
