//! The enclave: the only part of Cloister that holds key bytes.
//!
//! It performs every operation on keys for one tenant: IKEv2 Diffie-Hellman (MODP 14/15,
//! ECP 19/20, Curve25519), SKEYSEED and SK_* derivation (also for IKE SA rekeying), AUTH
//! computation and verification (PSK, RSA PKCS#1 v1.5/PSS, ECDSA, RFC 7427), SK payload
//! protection, child SA KEYMAT, batched ESP encrypt and verify+decrypt (with ESN and
//! EnclaveVPN's AD-merging), provisioning of tenant secrets and of static ESP SA keys, clear-and-seal of SK_d,
//! attestation evidence, and export and import of its whole state for migration
//! ([`migration`]). Callers hold handles ([`IkeSaHandle`], [`EspSaHandle`], ...) and
//! see only public values, ciphertext and typed refusals.
//!
//! What it does not do: parse IKE messages, keep SA lifetimes, replay windows or policy
//! (the `ike` and `esp` crates do), validate certificate chains (the IKE engine's job), or
//! any I/O. The call surface is [`Enclave`], defined with every type that crosses it in
//! `cloister-enclave-api` (re-exported here); [`InlineEnclave`] runs the trusted code in
//! process; [`process`] runs the same trusted code in a hardened per-tenant process reached
//! only through shared-memory rings carrying exactly those [`EspDescriptor`]s, each
//! validated on arrival. See `docs/threat-model.md`.
//!
//! Only the binary links this crate: the untrusted crates, the service among them, depend on
//! the call surface alone, and on `cloister-attest` where they verify evidence.
#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub use enclave_api::*;

/// Evidence: its formats (`cloister_enclave_api::attest`), the platform's signer and every
/// verifier's checks (`cloister_attest::evidence`).
pub mod attest {
    pub use ::attest::evidence::*;
}
#[cfg(fuzzing)]
pub mod fuzzing;
mod inline;
/// Migration packages: their format and their verification (`cloister_attest::migration`).
pub mod migration {
    pub use ::attest::migration::*;
}
pub mod process;
/// Provisioning: the formats and the tenant's sealing tools (`cloister_attest::provision`).
pub mod provision {
    pub use ::attest::provision::*;
}
mod trusted;

#[cfg(feature = "test-export")]
pub use inline::{EspKeysExport, IkeKeysExport};
pub use inline::{InlineEnclave, InlineEspLane};
