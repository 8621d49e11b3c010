//! The IKEv2 engine of Cloister (RFC 7296), sans-IO: it turns datagrams, time and commands
//! into datagrams, timeouts and events, and calls the enclave for every key operation.
//!
//! What it does:
//!
//! * [`proposal`]: strongSwan's proposal syntax (`aes256gcm16-prfsha256-ecp256`) into
//!   transforms the enclave implements, SA payloads, and the RFC 7296 §2.7 choice;
//! * [`config`]: connections in TOML with swanctl.conf's vocabulary, validated;
//! * [`Endpoint`]: one tenant's IKE SAs, as initiator and responder: IKE_SA_INIT with
//!   INVALID_KE_PAYLOAD retry, cookies above a half-open threshold and NAT detection (with
//!   the move to port 4500); IKE_AUTH with pre-shared keys and the first child SA, with
//!   traffic selector narrowing; clear-and-seal of SK_d once authenticated;
//!   retransmission with exponential backoff and message-ID windows; INFORMATIONAL
//!   Deletes (child and IKE) and liveness checks; CREATE_CHILD_SA child rekeys and new
//!   child SAs (every child of a connection as initiator), with or without PFS, keyed
//!   from the sealed SK_d; IKE SA rekeys (CREATE_CHILD_SA, §1.3.2) as initiator (on
//!   command and at the connection's `rekey_time`) and responder, the new SKEYSEED derived
//!   in the enclave from the sealed SK_d, the children moved to the new SA, and collisions
//!   of child and of IKE SA rekeys (§2.8.1, §2.8.2); INITIAL_CONTACT (§2.4, per
//!   connection `unique`); IKE fragmentation (RFC 7383, `fragment.rs`);
//!   post-quantum hybrid key exchange (RFC 9370: ML-KEM in IKE_INTERMEDIATE, RFC 9242,
//!   and in IKE_FOLLOWUP_KE when such an IKE SA is rekeyed);
//! * [`cert`] and [`auth`]: IKE_AUTH with X.509 certificates (RSA PKCS#1 v1.5 and PSS,
//!   ECDSA P-256/P-384; RFC 7427 and RFC 4754), CERT/CERTREQ, chain validation against
//!   configured CAs at a wall-clock time the caller supplies, identities matched to
//!   certificates; the private key never leaves the enclave;
//! * [`CarriedIkeSa`]: established IKE SAs as data (handles and sealed blobs, never a key
//!   byte) for a live move to another host's endpoint, whose enclave imported the source
//!   enclave's state: [`Endpoint::export_sas`], [`Endpoint::import_sas`].
//!
//! What it does not do: open sockets, read the clock, spawn threads or sleep (time is an
//! argument to every call); hold key bytes (it holds enclave handles, nonces and public
//! values only); certificate revocation (CRL, OCSP), child lifetimes (the gateway acts on
//! them), MOBIKE, EAP, additional key exchanges in child SAs. See `docs/ike.md`.
//!
//! ```text
//! handle_datagram(now, from, to, bytes) ─┐            ┌─> poll_transmit() -> Transmit
//! handle_timeout(now) ───────────────────┼─ Endpoint ─┼─> poll_timeout()  -> Instant
//! initiate / rekey_child / delete_* ─────┘     │      └─> poll_event()    -> Event
//!                                         Enclave (handles only)
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod auth;
pub mod cert;
pub mod config;
mod cookie;
mod endpoint;
mod error;
mod event;
mod fragment;
#[cfg(fuzzing)]
pub mod fuzzing;
pub mod nat;
mod peers;
pub mod proposal;
mod random;
mod sa;
mod sk;
mod timers;
pub mod ts;

pub use auth::{AuthPolicy, HashAlgorithm, SignatureFamily, SignaturePolicy};
pub use cert::{CertError, Certificate};
pub use config::{ChildConfig, Config, Connection, Unique, VolumeLimits};
pub use endpoint::{Endpoint, EndpointConfig};
pub use error::{Error, Result, Side};
pub use event::{
    ChildSa, Counters, DeleteReason, DropReason, Encapsulation, Event, OutboundSwitch, Refusal, SaId,
    SealReport, Transmit,
};
pub use fragment::{FragmentationPolicy, DEFAULT_FRAGMENT_SIZE};
pub use sa::{Carried, CarriedIkeSa, IkeSa, IkeSaState, PeerAuth, IKE_PORT, NATT_PORT, RETIRE_GRACE};
