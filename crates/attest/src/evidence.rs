//! Attestation evidence: a provider trait for hardware roots (SGX DCAP, SEV-SNP, TDX via
//! the kernel's TSM interface — none on these machines yet) and a **software-rooted**
//! provider.
//!
//! The software provider's measurement is SHA-384 over the enclave's code (the bytes of the
//! running executable) and its public configuration, signed by a *platform key* that the
//! host holds in ordinary memory. It proves only "a process holding this platform key says it
//! runs this code with this configuration": it does not protect against root on the host,
//! which can read the platform key. It exists so that provisioning and SA-distribution
//! protocols can be built and tested against the same trait the hardware providers will
//! implement.
//!
//! The enclave never signs report data a caller chose: each piece of evidence is for one
//! [`EvidencePurpose`], whose code is inside the signed body, over report data the enclave
//! computed itself from values of that purpose (an offer's key, a destination key, a
//! package it exported, a verifier's challenge). Evidence for one purpose never verifies as
//! evidence for another, whatever its report data.
//!
//! Evidence format, software-rooted v2 (integers big-endian):
//!
//! ```text
//! 0   "CLEV"  magic
//! 4   2       version
//! 5   1       kind: software-rooted
//! 6   1       purpose (EvidencePurpose code)
//! 7   0       reserved
//! 8   48      measurement = SHA-384("cloister-measurement-v1" || u64 len || code || u64 len || config)
//! 56  64      report data (computed by the enclave for the purpose)
//! 120 4       tenant
//! 124 2       signature length n
//! 126 n       ECDSA P-256 SHA-256 signature (DER) over bytes 0..124, by the platform key
//! ```

pub use enclave_api::attest::*;
use enclave_api::error::{Error, Result};
use enclave_api::handle::TenantId;
use ring::digest;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use zeroize::Zeroizing;

const MAGIC: &[u8; 4] = b"CLEV";
const SIGNED_LEN: usize = 124;
const VERSION: u8 = 2;

/// The report data of [`EvidencePurpose::Identity`] evidence for a verifier's `challenge`.
pub fn identity_report_data(tenant: TenantId, challenge: &[u8; 32]) -> [u8; 64] {
    let mut ctx = digest::Context::new(&digest::SHA512);
    ctx.update(b"cloister-identity-v1");
    ctx.update(&tenant.0.to_be_bytes());
    ctx.update(challenge);
    let mut rd = [0u8; 64];
    rd.copy_from_slice(ctx.finish().as_ref());
    rd
}

/// What the enclave's code identity is measured from.
#[derive(Debug, Clone)]
pub enum CodeIdentity {
    /// The bytes of the running executable (`/proc/self/exe`).
    CurrentExecutable,
    /// Given bytes (tests, or a build artifact's digest input).
    Bytes(Vec<u8>),
}

/// A source of attestation evidence: software today, SGX/SEV-SNP/TDX later.
pub trait AttestationProvider: Send {
    /// Who vouches.
    fn kind(&self) -> EvidenceKind;
    /// The measurement that evidence will carry.
    fn measurement(&self) -> Measurement;
    /// Evidence binding `report_data` to the measurement, for `tenant` and `purpose`. Only
    /// the trusted core calls this, with report data it computed for the purpose.
    fn evidence(
        &self,
        tenant: TenantId,
        purpose: EvidencePurpose,
        report_data: &[u8; 64],
    ) -> Result<Evidence>;
}

/// The software-rooted provider (see the module doc for what it does and does not prove).
pub struct SoftwareAttestation {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    measurement: Measurement,
}

impl core::fmt::Debug for SoftwareAttestation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SoftwareAttestation").field("measurement", &self.measurement).finish_non_exhaustive()
    }
}

/// Computes the software measurement of `code` and `config`.
pub fn software_measurement(code: &[u8], config: &[u8]) -> Measurement {
    let mut ctx = digest::Context::new(&digest::SHA384);
    ctx.update(b"cloister-measurement-v1");
    ctx.update(&(code.len() as u64).to_be_bytes());
    ctx.update(code);
    ctx.update(&(config.len() as u64).to_be_bytes());
    ctx.update(config);
    let mut m = [0u8; 48];
    m.copy_from_slice(ctx.finish().as_ref());
    Measurement(m)
}

impl SoftwareAttestation {
    /// Generates a platform key (PKCS#8, ECDSA P-256); the host keeps it.
    pub fn generate_platform_key() -> Result<Zeroizing<Vec<u8>>> {
        let doc =
            EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &SystemRandom::new())
                .map_err(|_| Error::Attestation { why: "platform key generation failed" })?;
        Ok(Zeroizing::new(doc.as_ref().to_vec()))
    }

    /// A provider with `platform_key` (PKCS#8 P-256) measuring `code` and `config`
    /// (e.g. [`crate::EnclaveConfig::measured_bytes`]).
    pub fn new(platform_key: &[u8], code: CodeIdentity, config: &[u8]) -> Result<Self> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, platform_key, &rng)
            .map_err(|_| Error::Attestation { why: "platform key is not a P-256 PKCS#8 key" })?;
        let code_bytes = match code {
            CodeIdentity::Bytes(b) => b,
            CodeIdentity::CurrentExecutable => std::env::current_exe()
                .and_then(std::fs::read)
                .map_err(|_| Error::Attestation { why: "cannot read the running executable" })?,
        };
        Ok(Self { key, rng, measurement: software_measurement(&code_bytes, config) })
    }

    /// The platform public key (uncompressed SEC1), the verifier's trust anchor.
    pub fn platform_public_key(&self) -> &[u8] {
        self.key.public_key().as_ref()
    }
}

impl AttestationProvider for SoftwareAttestation {
    fn kind(&self) -> EvidenceKind {
        EvidenceKind::SoftwareRooted
    }

    fn measurement(&self) -> Measurement {
        self.measurement
    }

    fn evidence(
        &self,
        tenant: TenantId,
        purpose: EvidencePurpose,
        report_data: &[u8; 64],
    ) -> Result<Evidence> {
        let mut b = Vec::with_capacity(SIGNED_LEN + 2 + 72);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[VERSION, 1, purpose.code(), 0]);
        b.extend_from_slice(&self.measurement.0);
        b.extend_from_slice(report_data);
        b.extend_from_slice(&tenant.0.to_be_bytes());
        let sig = self.key.sign(&self.rng, &b).map_err(|_| Error::Attestation { why: "signing failed" })?;
        let sig = sig.as_ref();
        let sig_len =
            u16::try_from(sig.len()).map_err(|_| Error::Attestation { why: "signature too long" })?;
        b.extend_from_slice(&sig_len.to_be_bytes());
        b.extend_from_slice(sig);
        Ok(Evidence { kind: EvidenceKind::SoftwareRooted, bytes: b })
    }
}

/// The tenant field of software-rooted evidence, **unverified**: only for choosing the
/// report data to verify the evidence against (the signature covers the field, so
/// verification with report data built from a forged tenant fails).
#[doc(hidden)]
pub fn software_evidence_tenant(evidence: &[u8]) -> Option<TenantId> {
    let b = evidence.get(120..SIGNED_LEN)?;
    Some(TenantId(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
}

/// Verifies software-rooted evidence against the platform public key, the purpose it must
/// be for and the report data the verifier computed for that purpose. The caller still
/// compares the measurement with its reference value.
pub fn verify_software_evidence(
    evidence: &[u8],
    platform_public_key: &[u8],
    purpose: EvidencePurpose,
    report_data: &[u8; 64],
) -> Result<VerifiedEvidence> {
    let bad = |why| Error::Attestation { why };
    let signed = evidence.get(..SIGNED_LEN).ok_or(bad("evidence too short"))?;
    if &signed[0..4] != MAGIC || signed[4] != VERSION || signed[5] != 1 || signed[7] != 0 {
        return Err(bad("not software-rooted evidence v2"));
    }
    let len_bytes = evidence.get(SIGNED_LEN..SIGNED_LEN + 2).ok_or(bad("evidence too short"))?;
    let sig_len = usize::from(u16::from_be_bytes([len_bytes[0], len_bytes[1]]));
    let sig =
        evidence.get(SIGNED_LEN + 2..).filter(|s| s.len() == sig_len).ok_or(bad("bad signature length"))?;
    UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, platform_public_key)
        .verify(signed, sig)
        .map_err(|_| bad("signature does not verify"))?;
    if signed[6] != purpose.code() {
        return Err(bad("evidence is for another purpose"));
    }
    if &signed[56..120] != report_data {
        return Err(bad("report data does not match"));
    }
    let mut m = [0u8; 48];
    m.copy_from_slice(&signed[8..56]);
    let tenant = TenantId(u32::from_be_bytes([signed[120], signed[121], signed[122], signed[123]]));
    Ok(VerifiedEvidence { measurement: Measurement(m), tenant })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_verifies_and_tampering_is_refused() {
        let key = SoftwareAttestation::generate_platform_key().unwrap();
        let p = SoftwareAttestation::new(&key, CodeIdentity::Bytes(b"code".to_vec()), b"cfg").unwrap();
        let rd = [7u8; 64];
        let id = EvidencePurpose::Identity;
        let e = p.evidence(TenantId(3), id, &rd).unwrap();
        let v = verify_software_evidence(&e.bytes, p.platform_public_key(), id, &rd).unwrap();
        assert_eq!(v.measurement, software_measurement(b"code", b"cfg"));
        assert_eq!(v.tenant, TenantId(3));
        assert!(verify_software_evidence(&e.bytes, p.platform_public_key(), id, &[8; 64]).is_err());
        let mut t = e.bytes.clone();
        t[10] ^= 1;
        assert!(verify_software_evidence(&t, p.platform_public_key(), id, &rd).is_err());
        assert!(verify_software_evidence(&e.bytes[..100], p.platform_public_key(), id, &rd).is_err());
        // Evidence for one purpose never verifies for another, even over the same report data.
        for other in [EvidencePurpose::ProvisioningOffer, EvidencePurpose::MigrationSource] {
            assert_eq!(
                verify_software_evidence(&e.bytes, p.platform_public_key(), other, &rd),
                Err(Error::Attestation { why: "evidence is for another purpose" })
            );
        }
        // Nor does a purpose byte rewritten after signing.
        let mut t = e.bytes.clone();
        t[6] = EvidencePurpose::Backup.code();
        assert!(verify_software_evidence(&t, p.platform_public_key(), EvidencePurpose::Backup, &rd).is_err());
        for code in 0..=255u8 {
            assert_eq!(
                EvidencePurpose::from_code(code).map(EvidencePurpose::code),
                (1..=5).contains(&code).then_some(code)
            );
        }
    }

    #[test]
    fn measurements_round_trip_through_hex() {
        let m = software_measurement(b"code", b"cfg");
        let hex = m.to_hex();
        assert_eq!(hex.len(), 96);
        assert_eq!(parse_measurement_hex(&hex), Ok(m));
        assert_eq!(parse_measurement_hex(&format!(" {} \n", hex.to_uppercase())), Ok(m));
        for bad in [&hex[..94], "zz", &format!("{}0", hex), &format!("{}g", &hex[..95])] {
            assert!(parse_measurement_hex(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn measurement_covers_the_running_executable() {
        let key = SoftwareAttestation::generate_platform_key().unwrap();
        let p = SoftwareAttestation::new(&key, CodeIdentity::CurrentExecutable, b"cfg").unwrap();
        assert_ne!(p.measurement(), software_measurement(b"", b"cfg"));
    }
}
