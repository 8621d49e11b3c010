//! Enclave state migration with HSM-held keys (TEEnder §3.5, R_S5), the HSM side.
//!
//! A tenant enclave's state moves between gateway hosts as a package encrypted at memory speed
//! under a fresh AES-256-GCM data key. Only the data key goes through the HSM, and only
//! wrapped: the source enclave wraps it with the public half of an HSM key pair; the HSM
//! unwraps it inside itself and wraps it again for the destination enclave once the
//! destination's attested measurement matches the key's label. The untrusted gateway carries
//! wrapped keys and ciphertext, never a clear key.
//!
//! - [`hsm`]: PKCS#11 access (any vendor's module): one-time migration keys, backup keys with
//!   a security-officer step, public-key export, rewrap, deletion after restore.
//! - [`audit`]: the hash-chained, append-only log every HSM operation writes to, and its
//!   verifier.
//! - [`label`]: key labels binding keys to enclave measurements.
//! - [`flow`]: one migration end to end over the enclaves' package export and import
//!   (`enclave::migration`): HSM envelope, the enclave-only baseline, and the HSM
//!   encrypting the whole package, for comparison (`bench/migrate.sh`).
//! - [`agent`]: the HSM agent, the separate process that alone reads the user PIN, holds the
//!   PKCS#11 session and verifies each destination's evidence before a rewrap; the gateway
//!   service talks to it over a pipe.
//!
//! The live move and backups (`cloister migrate`) are built on these in `cloister-control`.
//! See docs/migration.md for the design, the trust placed in the PIN holder, and what is left.
#![forbid(unsafe_code)]

pub mod agent;
pub mod audit;
mod error;
pub mod flow;
pub mod hsm;
pub mod label;
mod spki;

pub use agent::{AgentProcess, AgentSettings, HsmAgent};
pub use audit::{verify, AuditHead, AuditLog, Operation};
pub use cryptoki::{context::Function, error::RvError};
pub use error::{ChainFault, MigrateError, PublicKeyFault, Result};
pub use flow::{Flow, HsmKeys, Mode, Transfer};
pub use hsm::{Hsm, HsmConfig, KeyInfo, OaepHash, Pin, BULK_CHUNK, DEFAULT_MODULE_PATH, DEFAULT_RSA_BITS};
pub use label::{BackupDate, KeyLabel, Measurement, MigrationId};
