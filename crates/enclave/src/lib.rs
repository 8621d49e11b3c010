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
//! any I/O. The call surface is [`Enclave`]; [`InlineEnclave`] runs the trusted code in
//! process; [`process`] runs the same trusted code in a hardened per-tenant process reached
//! only through shared-memory rings carrying exactly the [`EspDescriptor`]s defined here,
//! each validated on arrival. See `docs/threat-model.md`.
#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod api;
pub mod attest;
mod der;
mod error;
#[cfg(fuzzing)]
pub mod fuzzing;
mod inline;
pub mod migration;
pub mod process;
pub mod provision;
mod trusted;

pub use api::alg::{
    AuthMethod, Cipher, DhGroup, Integ, Prf, Role, SecretKind, SignatureScheme, SkLayout, Suite,
};
pub use api::esp::{BatchSummary, EspDescriptor, EspOpcode, EspSaParams, EspStatus, ESP_DESCRIPTOR_LEN};
pub use api::handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle, TenantId};
pub use api::ike::{
    AuthAnswered, AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal,
    IkeSaParams, OurAuth, PeerAuthCheck, PeerCredential, PublicKey, PublicKeyKind, SealedBlob,
};
pub use api::report::{
    Backend, Counters, EnclaveConfig, InboundMode, Limits, MemoryReport, ProvisioningKey,
    MAX_PLATFORM_PUBLIC_KEY, MAX_TRUSTED_PLATFORMS,
};
pub use api::{Enclave, EspCrossing};
pub use error::{refusal, BlobRejection, Error, ErrorKind, Result};
#[cfg(feature = "test-export")]
pub use inline::{EspKeysExport, IkeKeysExport};
pub use inline::{InlineEnclave, InlineEspLane};
pub use provision::{seal_format, ProvisioningOffer};

/// Bytes of one IKE nonce from [`Enclave::ike_nonces`].
pub const IKE_NONCE_LEN: usize = trusted::nonce::NONCE_LEN;
