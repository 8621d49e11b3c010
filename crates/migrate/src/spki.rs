//! RSA public keys as DER SubjectPublicKeyInfo (RFC 5280 §4.1.2.7, RFC 8017 A.1.1): the form
//! in which HSM public keys leave the HSM and destination enclave keys come in.

use sha2::{Digest, Sha256};
use spki::der::{asn1::BitStringRef, asn1::UintRef, AnyRef, Decode, Encode};
use spki::{AlgorithmIdentifierRef, ObjectIdentifier, SubjectPublicKeyInfoRef};

use crate::error::{MigrateError, PublicKeyFault, Result};

/// rsaEncryption (RFC 8017 A.1); evaluated at compile time, so it cannot fail at run time.
const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// The shortest destination modulus accepted: below 2048 bits RSA no longer protects a 256-bit
/// data key for its lifetime (NIST SP 800-57 part 1).
pub(crate) const MIN_MODULUS_BITS: usize = 2048;
/// The longest: bounds the HSM work one request can cause.
const MAX_MODULUS_BITS: usize = 8192;

/// The parts of an RSA public key that PKCS#11 takes (`CKA_MODULUS`, `CKA_PUBLIC_EXPONENT`),
/// big-endian without leading zeros.
pub(crate) struct RsaPublicKey {
    pub(crate) modulus: Vec<u8>,
    pub(crate) exponent: Vec<u8>,
    /// SHA-256 of the canonical DER SPKI.
    pub(crate) fingerprint: [u8; 32],
}

fn fault(fault: PublicKeyFault) -> MigrateError {
    MigrateError::BadPublicKey { fault }
}

/// Parses and checks an RSA SPKI. The key must re-encode to the same bytes, so that one key
/// has one fingerprint.
pub(crate) fn parse_rsa_spki(der: &[u8]) -> Result<RsaPublicKey> {
    let spki = SubjectPublicKeyInfoRef::from_der(der).map_err(|_| fault(PublicKeyFault::NotSpki))?;
    if spki.algorithm.oid != RSA_ENCRYPTION {
        return Err(fault(PublicKeyFault::NotRsa));
    }
    let raw = spki.subject_public_key.as_bytes().ok_or(fault(PublicKeyFault::NotSpki))?;
    let key = pkcs1::RsaPublicKey::from_der(raw).map_err(|_| fault(PublicKeyFault::NotSpki))?;
    let modulus = key.modulus.as_bytes();
    let exponent = key.public_exponent.as_bytes();
    let bits = bit_len(modulus);
    if bits < MIN_MODULUS_BITS {
        return Err(fault(PublicKeyFault::ModulusTooShort { bits }));
    }
    if bits > MAX_MODULUS_BITS {
        return Err(fault(PublicKeyFault::ModulusTooLong { bits }));
    }
    // e must be odd and > 1 for RSA to be a permutation; more than 8 bytes is no real key.
    let odd = exponent.last().is_some_and(|b| b & 1 == 1);
    if !odd || exponent == [1] || exponent.len() > 8 {
        return Err(fault(PublicKeyFault::BadExponent));
    }
    let canonical = encode_rsa_spki(modulus, exponent)?;
    if canonical != der {
        return Err(fault(PublicKeyFault::NotSpki));
    }
    Ok(RsaPublicKey {
        modulus: modulus.to_vec(),
        exponent: exponent.to_vec(),
        fingerprint: Sha256::digest(&canonical).into(),
    })
}

/// Encodes an RSA public key as DER SPKI (rsaEncryption with NULL parameters).
pub(crate) fn encode_rsa_spki(modulus: &[u8], exponent: &[u8]) -> Result<Vec<u8>> {
    let not_spki = |_| fault(PublicKeyFault::NotSpki);
    let key = pkcs1::RsaPublicKey {
        modulus: UintRef::new(modulus).map_err(not_spki)?,
        public_exponent: UintRef::new(exponent).map_err(not_spki)?,
    };
    let key_der = key.to_der().map_err(not_spki)?;
    let spki = SubjectPublicKeyInfoRef {
        algorithm: AlgorithmIdentifierRef { oid: RSA_ENCRYPTION, parameters: Some(AnyRef::NULL) },
        subject_public_key: BitStringRef::from_bytes(&key_der).map_err(not_spki)?,
    };
    spki.to_der().map_err(not_spki)
}

/// Bit length of a big-endian unsigned integer.
pub(crate) fn bit_len(be: &[u8]) -> usize {
    let skip = be.iter().take_while(|b| **b == 0).count();
    match be.get(skip) {
        Some(first) => (be.len() - skip) * 8 - first.leading_zeros() as usize,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modulus(bits: usize) -> Vec<u8> {
        let mut m = vec![0xc5; bits / 8];
        if let Some(last) = m.last_mut() {
            *last |= 1;
        }
        m
    }

    #[test]
    fn spki_round_trips() {
        let der = encode_rsa_spki(&modulus(2048), &[1, 0, 1]).unwrap();
        let key = parse_rsa_spki(&der).unwrap();
        assert_eq!(key.modulus, modulus(2048));
        assert_eq!(key.exponent, [1, 0, 1]);
        assert_eq!(key.fingerprint, <[u8; 32]>::from(Sha256::digest(&der)));
    }

    #[test]
    fn weak_or_odd_keys_are_refused() {
        let short = encode_rsa_spki(&modulus(1024), &[1, 0, 1]).unwrap();
        assert!(matches!(
            parse_rsa_spki(&short),
            Err(MigrateError::BadPublicKey { fault: PublicKeyFault::ModulusTooShort { bits: 1024 } })
        ));
        for e in [&[1u8][..], &[2], &[1, 0, 0]] {
            let der = encode_rsa_spki(&modulus(2048), e).unwrap();
            assert!(matches!(
                parse_rsa_spki(&der),
                Err(MigrateError::BadPublicKey { fault: PublicKeyFault::BadExponent })
            ));
        }
        let long = encode_rsa_spki(&modulus(8200), &[3]).unwrap();
        assert!(parse_rsa_spki(&long).is_err());
    }

    #[test]
    fn garbage_and_trailing_bytes_are_refused() {
        let mut der = encode_rsa_spki(&modulus(2048), &[1, 0, 1]).unwrap();
        assert!(parse_rsa_spki(&der[..der.len() - 1]).is_err());
        der.push(0);
        assert!(parse_rsa_spki(&der).is_err());
        assert!(parse_rsa_spki(b"").is_err());
        assert!(parse_rsa_spki(&[0x30, 0x03, 0x02, 0x01, 0x01]).is_err());
    }

    #[test]
    fn bit_len_counts_from_the_top_bit() {
        assert_eq!(bit_len(&[0, 0x01, 0]), 9);
        assert_eq!(bit_len(&[0x80]), 8);
        assert_eq!(bit_len(&[0, 0]), 0);
    }
}
