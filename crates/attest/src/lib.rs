//! Attestation and the cryptography of the public formats, for every party but the enclave's
//! trusted core itself: the platform's evidence signer ([`evidence::SoftwareAttestation`]),
//! the checks a verifier runs on evidence, offers, destination keys and packages, the report
//! data and measurements they cover, and the tenant's tools that seal secrets to an enclave
//! ([`provision::seal_to_offer`], [`provision::wrap_secret`], [`provision::TenantSigner`]).
//!
//! Nothing here holds a tenant's key after it returns: the tenant's tools take the secret
//! they seal and the key they seal it with from their caller, who already holds both. Each
//! module re-exports the formats it works on from `cloister_enclave_api`.
#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod evidence;
pub mod migration;
pub mod provision;
