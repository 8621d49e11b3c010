//! Attestation evidence as it crosses the boundary: what kind, for which purpose, over which
//! measurement. Producing and verifying it is `cloister-attest`'s; the format is there too.

use crate::error::{Error, Result};
use crate::handle::TenantId;

/// Who vouches for the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceKind {
    /// Signed by a software platform key: no hardware root of trust.
    SoftwareRooted,
}

/// What a piece of evidence is for: signed with it, checked by every verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidencePurpose {
    /// "This enclave runs this measurement for this tenant", fresh for a verifier's
    /// challenge ([`crate::Enclave::identity_evidence`], `cloister_attest::evidence::identity_report_data`).
    Identity,
    /// An attested-provisioning offer's X25519 key (`cloister_attest::provision::offer_report_data`).
    ProvisioningOffer,
    /// A migration destination's RSA key (`cloister_attest::migration::destination_report_data`).
    MigrationDestination,
    /// A migration package this enclave exported, for one destination key
    /// (`cloister_attest::migration::export_report_data`).
    MigrationSource,
    /// A backup package this enclave exported, for one backup key
    /// (`cloister_attest::migration::export_report_data`).
    Backup,
}

impl EvidencePurpose {
    /// The code in the evidence.
    pub fn code(self) -> u8 {
        match self {
            Self::Identity => 1,
            Self::ProvisioningOffer => 2,
            Self::MigrationDestination => 3,
            Self::MigrationSource => 4,
            Self::Backup => 5,
        }
    }

    /// The purpose of a code, if it is one.
    pub fn from_code(code: u8) -> Option<Self> {
        [
            Self::Identity,
            Self::ProvisioningOffer,
            Self::MigrationDestination,
            Self::MigrationSource,
            Self::Backup,
        ]
        .into_iter()
        .find(|p| p.code() == code)
    }
}

/// A measurement: SHA-384 of code and configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Measurement(pub [u8; 48]);

impl Measurement {
    /// Lower-case hex (96 digits), the form reference values are published and configured in.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(96);
        for b in self.0 {
            s.push(char::from(DIGITS[usize::from(b >> 4)]));
            s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        s
    }
}

/// Parses a measurement from 96 hex digits (either case; surrounding whitespace ignored).
pub fn parse_measurement_hex(s: &str) -> Result<Measurement> {
    let bad = Error::Attestation { why: "a measurement is 96 hex digits" };
    let s = s.trim().as_bytes();
    if s.len() != 96 {
        return Err(bad);
    }
    let digit = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut m = [0u8; 48];
    for (out, pair) in m.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = (digit(pair[0]).ok_or(bad.clone())?, digit(pair[1]).ok_or(bad.clone())?);
        *out = (hi << 4) | lo;
    }
    Ok(Measurement(m))
}

/// Attestation evidence as produced by a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The provider kind.
    pub kind: EvidenceKind,
    /// The encoded evidence (format per kind).
    pub bytes: Vec<u8>,
}

/// What verified software-rooted evidence says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedEvidence {
    /// The measurement; compare it with the reference value you expect.
    pub measurement: Measurement,
    /// The tenant the enclave serves.
    pub tenant: TenantId,
}
