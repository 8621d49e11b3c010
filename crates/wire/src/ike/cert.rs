//! Certificate and Certificate Request payloads (RFC 7296 §3.6, §3.7).

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::Writer;
use crate::Result;

registry! {
    /// Certificate encodings of CERT and CERTREQ (RFC 7296 §3.6, IANA "IKEv2 Certificate
    /// Encodings").
    pub struct CertEncoding(u8) {
        /// PKCS7_WRAPPED_X509 (1): PKCS #7 wrapped X.509 certificate.
        PKCS7_WRAPPED_X509 = 0x01,
        /// PGP (2): PGP certificate.
        PGP = 0x02,
        /// DNS_SIGNED_KEY (3): DNS signed key.
        DNS_SIGNED_KEY = 0x03,
        /// X509_SIGNATURE (4): DER-encoded X.509 certificate, signature.
        X509_SIGNATURE = 0x04,
        /// KERBEROS_TOKEN (6): Kerberos token.
        KERBEROS_TOKEN = 0x06,
        /// CRL (7): Certificate revocation list.
        CRL = 0x07,
        /// ARL (8): Authority revocation list.
        ARL = 0x08,
        /// SPKI (9): SPKI certificate.
        SPKI = 0x09,
        /// X509_ATTRIBUTE (10): X.509 certificate, attribute.
        X509_ATTRIBUTE = 0x0a,
        /// RAW_RSA_KEY (11): Raw RSA key; deprecated by RFC 7296.
        RAW_RSA_KEY = 0x0b,
        /// HASH_URL_X509_CERT (12): Hash and URL of an X.509 certificate.
        HASH_URL_X509_CERT = 0x0c,
        /// HASH_URL_X509_BUNDLE (13): Hash and URL of an X.509 bundle.
        HASH_URL_X509_BUNDLE = 0x0d,
        /// OCSP_CONTENT (14): OCSP content (RFC 4806).
        OCSP_CONTENT = 0x0e,
        /// RAW_PUBLIC_KEY (15): Raw public key (RFC 7670).
        RAW_PUBLIC_KEY = 0x0f,
    }
}

/// Certificate payload, CERT (RFC 7296 §3.6): a certificate or related material.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Cert Encoding |                                               |
/// +-+-+-+-+-+-+-+-+                                               |
/// ~                       Certificate Data                        ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Certificate {
    /// How the data is encoded, e.g. X509_SIGNATURE for a DER certificate.
    pub encoding: CertEncoding,
    /// The certificate data, opaque here.
    pub data: Vec<u8>,
}

/// Certificate Request payload, CERTREQ (RFC 7296 §3.7): the trust anchors the sender
/// accepts.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Cert Encoding |                                               |
/// +-+-+-+-+-+-+-+-+                                               |
/// ~                    Certification Authority                    ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertificateRequest {
    /// The certificate encoding asked for.
    pub encoding: CertEncoding,
    /// For X509_SIGNATURE, concatenated SHA-1 hashes of the accepted CAs' public keys.
    pub authorities: Vec<u8>,
}

impl CertificateRequest {
    /// The 20-octet SHA-1 key hashes of an X509_SIGNATURE request (§3.7), or `None` if the
    /// encoding differs or the length is not a multiple of 20.
    pub fn sha1_key_hashes(&self) -> Option<impl Iterator<Item = &[u8]>> {
        let whole = self.authorities.len().is_multiple_of(20);
        (self.encoding == CertEncoding::X509_SIGNATURE && whole).then(|| self.authorities.chunks_exact(20))
    }
}

impl Body for Certificate {
    const WHAT: &'static str = "CERT payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self { encoding: CertEncoding(r.u8(Self::WHAT)?), data: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.encoding.0);
        w.bytes(&self.data);
        Ok(())
    }
}

impl Body for CertificateRequest {
    const WHAT: &'static str = "CERTREQ payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self { encoding: CertEncoding(r.u8(Self::WHAT)?), authorities: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.encoding.0);
        w.bytes(&self.authorities);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_round_trip, decode_one};
    use super::*;
    use crate::Error;
    use hex_literal::hex;

    #[test]
    fn certificate_round_trips() {
        let bytes = hex!("00 00 0009 04 3082 0102");
        let expected = Payload::Certificate(Certificate {
            encoding: CertEncoding::X509_SIGNATURE,
            data: hex!("30820102").to_vec(),
        });
        assert_round_trip(PayloadType::CERT, &bytes, &expected);
    }

    #[test]
    fn certificate_request_round_trips_and_splits_key_hashes() {
        let bytes = hex!(
            "00 00 0035 04"
            "0102030405060708090a0b0c0d0e0f1011121314"
            "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4"
            "c1c2c3c4c5c6c7c8"
        );
        let request =
            CertificateRequest { encoding: CertEncoding::X509_SIGNATURE, authorities: bytes[5..].to_vec() };
        assert!(request.sha1_key_hashes().is_none(), "48 octets are not whole hashes");
        assert_round_trip(PayloadType::CERTREQ, &bytes, &Payload::CertificateRequest(request.clone()));
        let whole = CertificateRequest { authorities: bytes[5..45].to_vec(), ..request };
        let hashes: Vec<_> = whole.sha1_key_hashes().into_iter().flatten().collect();
        assert_eq!(hashes, [&bytes[5..25], &bytes[25..45]]);
    }

    #[test]
    fn missing_encoding_octet_is_truncated() {
        assert!(matches!(
            decode_one(PayloadType::CERT, &hex!("00 00 0004")),
            Err(Error::Truncated { what: "CERT payload", .. })
        ));
    }
}
