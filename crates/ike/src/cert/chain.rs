//! Certificate path validation (a subset of RFC 5280 §6): from the peer's end-entity
//! certificate, through the intermediates it sent, to one of the configured CAs.
//!
//! Checked on every certificate of the path, the CA included: validity at the endpoint's
//! wall-clock time and no unprocessed critical extension. On each issuer: its signature on
//! the certificate below (RSA PKCS#1 v1.5 and PSS, ECDSA; SHA-256/384/512), basicConstraints
//! cA, pathLenConstraint, keyUsage keyCertSign if keyUsage is present. On the end entity:
//! keyUsage digitalSignature if present. Not checked: revocation (CRL, OCSP), name
//! constraints and policies (refused when critical), extended key usage.

use std::time::SystemTime;

use enclave::{PublicKey, PublicKeyKind};
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};

use super::{name, CertError, Certificate, SignatureAlgorithm};
use crate::auth::HashAlgorithm;

/// The most issuers a path may have above the end entity, the CA included.
pub(crate) const MAX_PATH: usize = 8;

/// Validates `end_entity` against `anchors` (the configured CAs), using `intermediates` (as
/// the peer sent them, any order) to get there, at wall-clock time `now`.
pub(crate) fn validate(
    end_entity: &Certificate,
    intermediates: &[Certificate],
    anchors: &[Certificate],
    now: SystemTime,
) -> Result<(), CertError> {
    check_common(end_entity, 0, now)?;
    if end_entity.key_usage.as_ref().is_some_and(|k| !k.digital_signature()) {
        return Err(CertError::KeyUsage { depth: 0 });
    }
    let mut used = vec![false; intermediates.len()];
    let mut current = end_entity;
    for depth in 0..MAX_PATH {
        let issued_by = |c: &Certificate| name::equal(&c.subject, &current.issuer);
        // A configured CA ends the path; try them first so that a CA the peer also sent is
        // taken from our configuration, not from the peer.
        let mut failure = None;
        for anchor in anchors.iter().filter(|a| issued_by(a)) {
            match verify_signature(current, &anchor.public_key, depth) {
                Ok(()) => return check_issuer(anchor, depth + 1, now),
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        let mut next = None;
        for (i, candidate) in intermediates.iter().enumerate() {
            if used.get(i).copied().unwrap_or(true) || !issued_by(candidate) {
                continue;
            }
            match verify_signature(current, &candidate.public_key, depth) {
                Ok(()) => {
                    next = Some((i, candidate));
                    break;
                }
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        let Some((i, issuer)) = next else {
            return Err(failure.unwrap_or(CertError::UntrustedIssuer { depth }));
        };
        if let Some(u) = used.get_mut(i) {
            *u = true;
        }
        check_issuer(issuer, depth + 1, now)?;
        current = issuer;
    }
    Err(CertError::ChainTooLong { max: MAX_PATH })
}

/// What every certificate of the path must satisfy.
fn check_common(cert: &Certificate, depth: usize, now: SystemTime) -> Result<(), CertError> {
    if now < cert.not_before {
        return Err(CertError::NotYetValid { depth });
    }
    if now > cert.not_after {
        return Err(CertError::Expired { depth });
    }
    if cert.unknown_critical {
        return Err(CertError::UnknownCriticalExtension { depth });
    }
    Ok(())
}

/// What an issuer at `depth` must satisfy: a CA, allowed to sign certificates, with room
/// for the `depth - 1` intermediates below it.
fn check_issuer(issuer: &Certificate, depth: usize, now: SystemTime) -> Result<(), CertError> {
    check_common(issuer, depth, now)?;
    if !issuer.ca {
        return Err(CertError::NotCa { depth });
    }
    if issuer.key_usage.as_ref().is_some_and(|k| !k.key_cert_sign()) {
        return Err(CertError::KeyUsage { depth });
    }
    if issuer.path_len.is_some_and(|max| usize::from(max) < depth.saturating_sub(1)) {
        return Err(CertError::PathLength { depth });
    }
    Ok(())
}

/// Verifies the issuer's signature on `cert` (at `depth`) with the issuer's key.
fn verify_signature(cert: &Certificate, issuer: &PublicKey, depth: usize) -> Result<(), CertError> {
    use HashAlgorithm as H;
    use PublicKeyKind as K;
    use SignatureAlgorithm as A;
    let algorithm: &'static dyn VerificationAlgorithm = match (issuer.kind, cert.algorithm) {
        (K::Rsa, A::RsaPkcs1(H::Sha256)) => &signature::RSA_PKCS1_2048_8192_SHA256,
        (K::Rsa, A::RsaPkcs1(H::Sha384)) => &signature::RSA_PKCS1_2048_8192_SHA384,
        (K::Rsa, A::RsaPkcs1(H::Sha512)) => &signature::RSA_PKCS1_2048_8192_SHA512,
        (K::Rsa, A::RsaPss(H::Sha256)) => &signature::RSA_PSS_2048_8192_SHA256,
        (K::Rsa, A::RsaPss(H::Sha384)) => &signature::RSA_PSS_2048_8192_SHA384,
        (K::Rsa, A::RsaPss(H::Sha512)) => &signature::RSA_PSS_2048_8192_SHA512,
        (K::EcdsaP256, A::Ecdsa(H::Sha256)) => &signature::ECDSA_P256_SHA256_ASN1,
        (K::EcdsaP256, A::Ecdsa(H::Sha384)) => &signature::ECDSA_P256_SHA384_ASN1,
        (K::EcdsaP384, A::Ecdsa(H::Sha256)) => &signature::ECDSA_P384_SHA256_ASN1,
        (K::EcdsaP384, A::Ecdsa(H::Sha384)) => &signature::ECDSA_P384_SHA384_ASN1,
        _ => return Err(CertError::UnsupportedSignatureAlgorithm { depth }),
    };
    UnparsedPublicKey::new(algorithm, &issuer.bytes)
        .verify(cert.tbs(), &cert.signature)
        .map_err(|_| CertError::BadSignature { depth })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cert, fixture};
    use super::*;
    use std::time::Duration;

    /// 2026-01-01, inside the fixtures' 2025..2035 validity.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
    }

    #[test]
    fn good_paths_validate() {
        let rsa = [cert("ca-rsa.pem")];
        assert_eq!(validate(&cert("a-rsa.pem"), &[], &rsa, now()), Ok(()));
        let ec = [cert("ca-ec.pem")];
        assert_eq!(validate(&cert("a-p256.pem"), &[], &ec, now()), Ok(()));
        assert_eq!(validate(&cert("b-p384.pem"), &[], &ec, now()), Ok(()));
        // Through a PSS-signing intermediate, with the CA itself and junk also sent.
        let chain = Certificate::load(&fixture("b-int-chain.pem")).unwrap();
        let sent = [cert("a-rsa.pem"), chain[1].clone(), cert("ca-rsa.pem")];
        assert_eq!(validate(&chain[0], &sent, &rsa, now()), Ok(()));
        // Either CA of several.
        let both = [cert("ca-ec.pem"), cert("ca-rsa.pem")];
        assert_eq!(validate(&cert("b-rsa.pem"), &[], &both, now()), Ok(()));
    }

    #[test]
    fn bad_paths_say_what_is_wrong_and_where() {
        let rsa = [cert("ca-rsa.pem")];
        let v = |name: &str, sent: &[Certificate]| validate(&cert(name), sent, &rsa, now());
        assert_eq!(v("a-other.pem", &[]), Err(CertError::UntrustedIssuer { depth: 0 }));
        assert_eq!(v("b-int.pem", &[]), Err(CertError::UntrustedIssuer { depth: 0 }), "intermediate missing");
        assert_eq!(v("a-expired.pem", &[]), Err(CertError::Expired { depth: 0 }));
        assert_eq!(v("a-keyenc.pem", &[]), Err(CertError::KeyUsage { depth: 0 }));
        assert_eq!(v("a-by-ee.pem", &[cert("b-rsa.pem")]), Err(CertError::NotCa { depth: 1 }));
        let early = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(validate(&cert("a-rsa.pem"), &[], &rsa, early), Err(CertError::NotYetValid { depth: 0 }));
        let late = SystemTime::UNIX_EPOCH + Duration::from_secs(2_100_000_000);
        assert_eq!(validate(&cert("ca-rsa.pem"), &[], &rsa, late), Err(CertError::Expired { depth: 0 }));
        // A CA of the same name but another key: its signature does not verify.
        let mut impostor = cert("ca-other.pem");
        impostor.subject = cert("ca-rsa.pem").subject;
        assert_eq!(
            validate(&cert("a-rsa.pem"), &[], &[impostor], now()),
            Err(CertError::BadSignature { depth: 0 })
        );
        // A tampered certificate.
        let mut tampered = cert("a-rsa.pem");
        let at = tampered.tbs.start + 40;
        tampered.der[at] ^= 1;
        assert_eq!(validate(&tampered, &[], &rsa, now()), Err(CertError::BadSignature { depth: 0 }));
    }

    #[test]
    fn path_length_and_loops_are_bounded() {
        let chain = Certificate::load(&fixture("b-int-chain.pem")).unwrap();
        let mut intermediate = chain[1].clone();
        intermediate.path_len = Some(0);
        assert_eq!(check_issuer(&intermediate, 1, now()), Ok(()));
        assert_eq!(check_issuer(&intermediate, 2, now()), Err(CertError::PathLength { depth: 2 }));
        // A self-issued certificate that is not a configured CA never ends the loop by itself.
        let mut ca = cert("ca-other.pem");
        ca.key_usage = None;
        let sent = vec![ca.clone(); 20];
        assert_eq!(
            validate(&ca, &sent, &[cert("ca-rsa.pem")], now()),
            Err(CertError::ChainTooLong { max: MAX_PATH })
        );
    }
}
