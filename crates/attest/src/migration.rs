//! The cryptography of enclave state migration that every party runs: the report data of a
//! destination key and of an exported package, and their verification (the source's check of
//! a destination, the destination's agent's and an operator's check of a package's source;
//! the enclaves check the same inside). The formats are `cloister_enclave_api::migration`'s.

use crate::evidence as attest;
use enclave_api::attest::Measurement;
use enclave_api::error::{Error, Result};
use enclave_api::handle::TenantId;
pub use enclave_api::migration::*;

fn refused(why: &'static str) -> Error {
    Error::Migration { why }
}

/// The report data of a destination key's evidence: SHA-512("cloister-migration-destination-v1"
/// || tenant u32 || SPKI).
pub fn destination_report_data(tenant: TenantId, spki_der: &[u8]) -> [u8; 64] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(b"cloister-migration-destination-v1");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(spki_der);
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// The report data of the source's evidence at the end of a package: SHA-512(
/// "cloister-export-v2" || tenant u32 || SHA-256(`head` || `tag`) || SHA-256(bound_to)),
/// where `head` is the package's header and shares, `tag` its body's AES-GCM tag and
/// `bound_to` names whom the package is for (the destination enclave's SPKI; nothing for a
/// backup). The purpose in the evidence tells a move
/// ([`crate::attest::EvidencePurpose::MigrationSource`]) from a backup.
pub fn export_report_data(tenant: TenantId, head: &[u8], tag: &[u8], bound_to: &[u8]) -> [u8; 64] {
    let mut commit = ring::digest::Context::new(&ring::digest::SHA256);
    commit.update(head);
    commit.update(tag);
    let package_digest = commit.finish();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(b"cloister-export-v2");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(package_digest.as_ref());
    ctx.update(ring::digest::digest(&ring::digest::SHA256, bound_to).as_ref());
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// The report data the source's evidence must carry over `package`, bound to `bound_to`
/// (the destination's SPKI for a move, nothing for a backup): [`export_report_data`] of its
/// header and shares and its body's tag.
pub fn package_report_data(package: &MigrationPackage, bound_to: &[u8]) -> [u8; 64] {
    export_report_data(package.tenant(), package.aad(), package.tag(), bound_to)
}

/// The source side's check of a destination key before anything is wrapped to it: the
/// evidence verifies under `platform_public_key`, binds this SPKI, and names `tenant` and
/// the `expected` measurement.
pub fn verify_destination(
    key: &DestinationKey,
    platform_public_key: &[u8],
    expected: &Measurement,
    tenant: TenantId,
) -> Result<()> {
    let rd = destination_report_data(tenant, &key.spki_der);
    let purpose = attest::EvidencePurpose::MigrationDestination;
    let verified = attest::verify_software_evidence(&key.evidence.bytes, platform_public_key, purpose, &rd)?;
    if verified.tenant != tenant {
        return Err(refused(why::WRONG_TENANT));
    }
    if verified.measurement != *expected {
        return Err(Error::MeasurementMismatch {
            expected: Box::new(*expected),
            got: Box::new(verified.measurement),
        });
    }
    Ok(())
}

/// What a backup root signs to make an RSA key a backup key for enclaves of `measurement`
/// (ECDSA P-256 with SHA-256, the signature as r ‖ s): "cloister-backup-key-v1" ‖
/// measurement ‖ SHA-256(the key's SPKI).
pub fn backup_key_message(measurement: &Measurement, spki_der: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(22 + 48 + 32);
    m.extend_from_slice(b"cloister-backup-key-v1");
    m.extend_from_slice(&measurement.0);
    m.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, spki_der).as_ref());
    m
}

/// A verifier's check of a package's source (the destination's agent before an HSM rewrap,
/// an operator before a restore; the destination enclave checks the same itself): the
/// evidence verifies under `platform_public_key` for the package's kind, binds this package
/// to `bound_to`, and names the package's tenant and measurement.
pub fn verify_source(
    package: &MigrationPackage,
    platform_public_key: &[u8],
    bound_to: &[u8],
) -> Result<attest::VerifiedEvidence> {
    let rd = package_report_data(package, bound_to);
    let purpose = package.kind().purpose();
    let verified =
        attest::verify_software_evidence(package.source_evidence(), platform_public_key, purpose, &rd)?;
    if verified.tenant != package.tenant() {
        return Err(refused(why::WRONG_TENANT));
    }
    if verified.measurement != package.measurement() {
        return Err(Error::MeasurementMismatch {
            expected: Box::new(package.measurement()),
            got: Box::new(verified.measurement),
        });
    }
    Ok(verified)
}
