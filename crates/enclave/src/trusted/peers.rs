//! Where this enclave's state may go. Moves: to and from enclaves whose evidence verifies
//! under a platform key of its measured configuration
//! ([`crate::EnclaveConfig::trusted_platforms`]), for the purpose at hand, serving its tenant
//! and running its own measurement. Backups: to an HSM key that a backup root of its measured
//! configuration ([`crate::EnclaveConfig::backup_roots`]) certified for its measurement.
//! Nothing the caller says about a peer or a key counts: the evidence or the certificate is
//! checked here.

use crate::attest::{verify_software_evidence, EvidencePurpose, Measurement};
use crate::MAX_TRUSTED_PLATFORMS;
use enclave_api::error::{refusal, Error, Result};
use enclave_api::handle::TenantId;
use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

/// A measured set of P-256 public keys (uncompressed points).
struct KeySet(Vec<Vec<u8>>);

impl KeySet {
    /// Takes the configuration's keys; refuses a set nothing could verify under, so a
    /// configuration that starts is one whose moves and backups can work.
    fn new(keys: &[Vec<u8>], what: &'static str) -> Result<Self> {
        if keys.len() > MAX_TRUSTED_PLATFORMS {
            return Err(Error::BadLength {
                what,
                len: keys.len(),
                why: "at most MAX_TRUSTED_PLATFORMS keys",
            });
        }
        for k in keys {
            // An uncompressed P-256 point; ring checks it is on the curve at each use.
            if k.len() != 65 || k.first() != Some(&4) {
                return Err(Error::BadLength {
                    what,
                    len: k.len(),
                    why: "an uncompressed P-256 public key: 65 bytes from 0x04",
                });
            }
        }
        Ok(Self(keys.to_vec()))
    }

    fn keys(&self) -> &[Vec<u8>] {
        &self.0
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(Vec::capacity).sum::<usize>() + self.0.capacity() * core::mem::size_of::<Vec<u8>>()
    }
}

/// The measured backup roots.
pub(crate) struct BackupRoots(KeySet);

impl BackupRoots {
    pub(crate) fn new(keys: &[Vec<u8>]) -> Result<Self> {
        KeySet::new(keys, "backup root key").map(Self)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Checks that a backup root certified `spki` as a backup key for enclaves of
    /// `measurement`: `certificate` is its ECDSA P-256 signature (r ‖ s) over
    /// [`crate::migration::backup_key_message`].
    pub(crate) fn verify(&self, certificate: &[u8], measurement: &Measurement, spki: &[u8]) -> Result<()> {
        if self.0.keys().is_empty() {
            return Err(Error::ProtocolRefused { why: refusal::NO_BACKUP_ROOT });
        }
        let message = crate::migration::backup_key_message(measurement, spki);
        self.0
            .keys()
            .iter()
            .find(|k| {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, k).verify(&message, certificate).is_ok()
            })
            .map(|_| ())
            .ok_or(Error::ProtocolRefused { why: refusal::BACKUP_KEY_NOT_CERTIFIED })
    }
}

/// The measured set of platform public keys.
pub(crate) struct TrustedPlatforms(KeySet);

impl TrustedPlatforms {
    pub(crate) fn new(keys: &[Vec<u8>]) -> Result<Self> {
        KeySet::new(keys, "trusted platform key").map(Self)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Checks a peer enclave's `evidence` for `purpose` over `report_data`: a trusted
    /// platform signed it, for `tenant`, with `measurement`.
    pub(crate) fn verify(
        &self,
        evidence: &[u8],
        purpose: EvidencePurpose,
        report_data: &[u8; 64],
        tenant: TenantId,
        measurement: &Measurement,
    ) -> Result<()> {
        if self.0.keys().is_empty() {
            return Err(Error::ProtocolRefused { why: refusal::NO_TRUSTED_PLATFORM });
        }
        let verified = self
            .0
            .keys()
            .iter()
            .find_map(|k| verify_software_evidence(evidence, k, purpose, report_data).ok())
            .ok_or(Error::ProtocolRefused { why: refusal::PEER_NOT_ATTESTED })?;
        if verified.tenant != tenant || verified.measurement != *measurement {
            return Err(Error::ProtocolRefused { why: refusal::PEER_MISMATCH });
        }
        Ok(())
    }
}

/// The tenant's measured provisioning signers.
pub(crate) struct TenantSigners(KeySet);

impl TenantSigners {
    pub(crate) fn new(keys: &[Vec<u8>]) -> Result<Self> {
        KeySet::new(keys, "tenant signer key").map(Self)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Whether the tenant signs what it provisions: then nothing unsigned goes in.
    pub(crate) fn required(&self) -> bool {
        !self.0.keys().is_empty()
    }

    /// Refuses what only the provisioning key authenticates (a wrapped blob) once the
    /// tenant signs its secrets: the host holds that key too.
    pub(crate) fn allow_unsigned(&self) -> Result<()> {
        if self.required() {
            return Err(Error::ProtocolRefused { why: refusal::TENANT_SIGNATURE_REQUIRED });
        }
        Ok(())
    }

    /// Checks that a signer signed `message`: `signature` is its ECDSA P-256 signature
    /// (r ‖ s) over it.
    pub(crate) fn verify(&self, message: &[&[u8]], signature: &[u8]) -> Result<()> {
        if !self.required() {
            return Err(Error::ProtocolRefused { why: refusal::NO_TENANT_SIGNER });
        }
        let message = message.concat();
        self.0
            .keys()
            .iter()
            .find(|k| UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, k).verify(&message, signature).is_ok())
            .map(|_| ())
            .ok_or(Error::ProtocolRefused { why: refusal::NOT_THE_TENANTS_SIGNATURE })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::{AttestationProvider, CodeIdentity, SoftwareAttestation};

    fn platform(config: &[u8]) -> SoftwareAttestation {
        let key = SoftwareAttestation::generate_platform_key().unwrap();
        SoftwareAttestation::new(&key, CodeIdentity::Bytes(b"code".to_vec()), config).unwrap()
    }

    #[test]
    fn only_trusted_platforms_own_measurement_and_tenant_verify() {
        let (a, b, other_code) = (platform(b"cfg"), platform(b"cfg"), platform(b"other"));
        let set = TrustedPlatforms::new(&[a.platform_public_key().to_vec()]).unwrap();
        let (p, rd, m) = (EvidencePurpose::MigrationDestination, [5u8; 64], a.measurement());
        let ok = a.evidence(TenantId(1), p, &rd).unwrap();
        set.verify(&ok.bytes, p, &rd, TenantId(1), &m).unwrap();
        let refused = |why| Err(Error::ProtocolRefused { why });
        assert_eq!(set.verify(&ok.bytes, p, &[6; 64], TenantId(1), &m), refused(refusal::PEER_NOT_ATTESTED));
        let backup = EvidencePurpose::Backup;
        assert_eq!(set.verify(&ok.bytes, backup, &rd, TenantId(1), &m), refused(refusal::PEER_NOT_ATTESTED));
        let untrusted = b.evidence(TenantId(1), p, &rd).unwrap();
        assert_eq!(
            set.verify(&untrusted.bytes, p, &rd, TenantId(1), &m),
            refused(refusal::PEER_NOT_ATTESTED)
        );
        let other_tenant = a.evidence(TenantId(2), p, &rd).unwrap();
        assert_eq!(set.verify(&other_tenant.bytes, p, &rd, TenantId(1), &m), refused(refusal::PEER_MISMATCH));
        let set2 = TrustedPlatforms::new(&[other_code.platform_public_key().to_vec()]).unwrap();
        let ev = other_code.evidence(TenantId(1), p, &rd).unwrap();
        assert_eq!(set2.verify(&ev.bytes, p, &rd, TenantId(1), &m), refused(refusal::PEER_MISMATCH));
        let none = TrustedPlatforms::new(&[]).unwrap();
        assert_eq!(none.verify(&ok.bytes, p, &rd, TenantId(1), &m), refused(refusal::NO_TRUSTED_PLATFORM));
    }

    #[test]
    fn only_a_trusted_roots_certificate_for_this_measurement_makes_a_backup_key() {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let root = |rng: &ring::rand::SystemRandom| {
            let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, rng).unwrap();
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), rng).unwrap()
        };
        let (ours, other) = (root(&rng), root(&rng));
        let roots = BackupRoots::new(&[ours.public_key().as_ref().to_vec()]).unwrap();
        let (m, spki) = (Measurement([1; 48]), b"an RSA SPKI".as_slice());
        let cert = |k: &EcdsaKeyPair, m: &Measurement, spki: &[u8]| {
            k.sign(&rng, &crate::migration::backup_key_message(m, spki)).unwrap().as_ref().to_vec()
        };
        roots.verify(&cert(&ours, &m, spki), &m, spki).unwrap();
        let refused = Err(Error::ProtocolRefused { why: refusal::BACKUP_KEY_NOT_CERTIFIED });
        assert_eq!(roots.verify(&cert(&other, &m, spki), &m, spki), refused, "another root");
        assert_eq!(
            roots.verify(&cert(&ours, &Measurement([2; 48]), spki), &m, spki),
            refused,
            "another measurement"
        );
        assert_eq!(roots.verify(&cert(&ours, &m, b"another key"), &m, spki), refused, "another key");
        assert_eq!(roots.verify(b"", &m, spki), refused);
        let none = BackupRoots::new(&[]).unwrap();
        let no_root = Err(Error::ProtocolRefused { why: refusal::NO_BACKUP_ROOT });
        assert_eq!(none.verify(&cert(&ours, &m, spki), &m, spki), no_root);
    }

    #[test]
    fn keys_that_are_no_p256_points_are_refused_at_start() {
        assert!(BackupRoots::new(&[vec![4; 64]]).is_err());
        assert!(TenantSigners::new(&[vec![4; 66]]).is_err());
        assert!(TrustedPlatforms::new(&[vec![4; 64]]).is_err());
        assert!(TrustedPlatforms::new(&[vec![2; 65]]).is_err());
        assert!(TrustedPlatforms::new(&vec![vec![4; 65]; MAX_TRUSTED_PLATFORMS + 1]).is_err());
        assert!(TrustedPlatforms::new(&vec![vec![4; 65]; MAX_TRUSTED_PLATFORMS]).is_ok());
    }
}
