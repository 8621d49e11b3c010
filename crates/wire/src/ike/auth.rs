//! Authentication payload (RFC 7296 §3.8) and the RFC 7427 hash algorithm registry.

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::Writer;
use crate::Result;

registry! {
    /// Authentication methods of the AUTH payload (RFC 7296 §3.8, IANA "IKEv2 Authentication
    /// Method").
    pub struct AuthMethod(u8) {
        /// RSA_DIGITAL_SIGNATURE (1): RSASSA-PKCS1-v1_5 signature with SHA-1.
        RSA_DIGITAL_SIGNATURE = 0x01,
        /// SHARED_KEY_MIC (2): Shared key message integrity code (PSK).
        SHARED_KEY_MIC = 0x02,
        /// DSS_DIGITAL_SIGNATURE (3): DSS signature with SHA-1.
        DSS_DIGITAL_SIGNATURE = 0x03,
        /// ECDSA_SHA256_P256 (9): ECDSA with SHA-256 on P-256 (RFC 4754).
        ECDSA_SHA256_P256 = 0x09,
        /// ECDSA_SHA384_P384 (10): ECDSA with SHA-384 on P-384 (RFC 4754).
        ECDSA_SHA384_P384 = 0x0a,
        /// ECDSA_SHA512_P521 (11): ECDSA with SHA-512 on P-521 (RFC 4754).
        ECDSA_SHA512_P521 = 0x0b,
        /// GENERIC_SECURE_PASSWORD (12): Generic Secure Password Authentication Method (RFC 6467).
        GENERIC_SECURE_PASSWORD = 0x0c,
        /// NULL (13): NULL authentication (RFC 7619).
        NULL = 0x0d,
        /// DIGITAL_SIGNATURE (14): Digital signature with an AlgorithmIdentifier prefix (RFC 7427).
        DIGITAL_SIGNATURE = 0x0e,
    }
}

registry! {
    /// Hash algorithms of SIGNATURE_HASH_ALGORITHMS (RFC 7427 §4, IANA "IKEv2 Hash Algorithms").
    pub struct HashAlgorithm(u16) {
        /// SHA1 (1): SHA-1.
        SHA1 = 0x0001,
        /// SHA2_256 (2): SHA-256.
        SHA2_256 = 0x0002,
        /// SHA2_384 (3): SHA-384.
        SHA2_384 = 0x0003,
        /// SHA2_512 (4): SHA-512.
        SHA2_512 = 0x0004,
        /// IDENTITY (5): Identity, for Ed25519/Ed448 signatures (RFC 8420).
        IDENTITY = 0x0005,
        /// STREEBOG_256 (6): Streebog-256 (RFC 9385).
        STREEBOG_256 = 0x0006,
        /// STREEBOG_512 (7): Streebog-512 (RFC 9385).
        STREEBOG_512 = 0x0007,
    }
}

/// Authentication payload, AUTH (RFC 7296 §3.8): the proof of identity over the signed
/// octets of §2.15.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Auth Method   |                RESERVED                       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                      Authentication Data                      ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// For DIGITAL_SIGNATURE (RFC 7427 §3) the data starts with a length-prefixed ASN.1
/// AlgorithmIdentifier; it stays opaque here, since the enclave verifies it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authentication {
    /// How the data was computed.
    pub method: AuthMethod,
    /// The RESERVED octets, kept as received so encoding is byte-exact; send zero.
    pub reserved: [u8; 3],
    /// The MIC or signature.
    pub data: Vec<u8>,
}

impl Authentication {
    /// An AUTH payload with zero RESERVED octets.
    pub fn new(method: AuthMethod, data: Vec<u8>) -> Self {
        Self { method, reserved: [0; 3], data }
    }
}

impl Body for Authentication {
    const WHAT: &'static str = "AUTH payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            method: AuthMethod(r.u8(Self::WHAT)?),
            reserved: r.array(Self::WHAT)?,
            data: r.rest().to_vec(),
        })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.method.0);
        w.bytes(&self.reserved);
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::assert_round_trip;
    use super::*;
    use hex_literal::hex;

    #[test]
    fn auth_methods_carry_the_rfc_values() {
        let values: Vec<u8> = [
            AuthMethod::RSA_DIGITAL_SIGNATURE,
            AuthMethod::SHARED_KEY_MIC,
            AuthMethod::DSS_DIGITAL_SIGNATURE,
            AuthMethod::ECDSA_SHA256_P256,
            AuthMethod::ECDSA_SHA384_P384,
            AuthMethod::ECDSA_SHA512_P521,
            AuthMethod::DIGITAL_SIGNATURE,
        ]
        .iter()
        .map(|m| m.0)
        .collect();
        assert_eq!(values, [1, 2, 3, 9, 10, 11, 14]);
        assert_eq!(HashAlgorithm::SHA2_256.0, 2);
        assert_eq!(HashAlgorithm::IDENTITY.0, 5);
    }

    #[test]
    fn psk_auth_round_trips() {
        let bytes = hex!("00 00 0010 02 000000 0011223344556677");
        let expected =
            Payload::Auth(Authentication::new(AuthMethod::SHARED_KEY_MIC, hex!("0011223344556677").to_vec()));
        assert_round_trip(PayloadType::AUTH, &bytes, &expected);
    }

    #[test]
    fn reserved_octets_are_kept() {
        let bytes = hex!("00 00 0009 0e 00ff00 aa");
        let expected = Payload::Auth(Authentication {
            method: AuthMethod::DIGITAL_SIGNATURE,
            reserved: [0, 0xff, 0],
            data: vec![0xaa],
        });
        assert_round_trip(PayloadType::AUTH, &bytes, &expected);
    }
}
