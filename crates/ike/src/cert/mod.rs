//! X.509 certificates (RFC 5280) for IKE_AUTH (RFC 7296 §3.6, §3.7): PEM and DER files,
//! chain validation against configured CAs (`chain.rs`), and matching IKE identities to a
//! certificate's subject and subjectAltNames (`name.rs`).
//!
//! Certificates are public: nothing here touches a private key. The enclave makes and checks
//! the AUTH signature; this module decides which public key that check uses, and whether to
//! trust it. Decoding is RustCrypto's strict DER; the extensions IKE relies on are decoded
//! once, here, so that validation never meets a malformed one.

pub(crate) mod chain;
pub(crate) mod name;

use core::fmt;
use core::ops::Range;
use std::time::SystemTime;

use enclave::{PublicKey, PublicKeyKind};
use sha1::{Digest, Sha1};
use wire::ike::{IdType, Identification};
use x509_cert::der::asn1::{ObjectIdentifier, UintRef};
use x509_cert::der::oid::AssociatedOid;
use x509_cert::der::{Decode, Encode, Header, Reader, SliceReader, Tag, TagNumber};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, SubjectAltName};
use x509_cert::name::Name;
use x509_cert::spki::AlgorithmIdentifierOwned;

use crate::auth::HashAlgorithm;

/// Why a certificate was refused: when loading the configuration, or the peer's in IKE_AUTH
/// (the peer then gets AUTHENTICATION_FAILED). `depth` counts from the peer's end-entity
/// certificate (0) towards the CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The file could not be read.
    #[error("cannot read the file: {kind}")]
    Io {
        /// What the operating system said.
        kind: std::io::ErrorKind,
    },
    /// A file held no certificate.
    #[error("no certificate in the file (PEM \"CERTIFICATE\" blocks or one DER certificate)")]
    NoCertificate,
    /// Not a certificate this decoder accepts.
    #[error("not an X.509 certificate: {why}")]
    Malformed {
        /// What is wrong.
        why: &'static str,
    },
    /// The subject public key is not one IKE_AUTH can use here.
    #[error("the public key is not RSA (2048 to 8192 bits), ECDSA P-256 or ECDSA P-384")]
    UnsupportedKey,
    /// The peer sent no X.509 certificate in a CERT payload.
    #[error("the peer sent no X.509 certificate (CERT payload)")]
    Missing,
    /// No configured CA (`remote.cacerts`) issued the certificate at this depth, directly or
    /// through the intermediates the peer sent.
    #[error("certificate at depth {depth}: not issued by a configured CA (remote.cacerts)")]
    UntrustedIssuer {
        /// The certificate whose issuer was not found.
        depth: usize,
    },
    /// The issuer's signature on the certificate at this depth does not verify.
    #[error("certificate at depth {depth}: its issuer's signature does not verify")]
    BadSignature {
        /// The certificate.
        depth: usize,
    },
    /// The certificate at this depth is signed with an algorithm not verified here (SHA-1,
    /// ECDSA with SHA-512, ...).
    #[error("certificate at depth {depth}: unsupported signature algorithm")]
    UnsupportedSignatureAlgorithm {
        /// The certificate.
        depth: usize,
    },
    /// Not valid yet at the endpoint's wall-clock time.
    #[error("certificate at depth {depth}: not valid yet")]
    NotYetValid {
        /// The certificate.
        depth: usize,
    },
    /// Expired at the endpoint's wall-clock time.
    #[error("certificate at depth {depth}: expired")]
    Expired {
        /// The certificate.
        depth: usize,
    },
    /// The endpoint has no wall-clock time to check validity against.
    #[error("no wall-clock time to check certificate validity against (Endpoint::set_wall_clock)")]
    NoWallClock,
    /// An issuer without basicConstraints cA = TRUE.
    #[error("certificate at depth {depth}: issues certificates but is not a CA (basicConstraints)")]
    NotCa {
        /// The issuer.
        depth: usize,
    },
    /// An issuer whose pathLenConstraint the chain exceeds.
    #[error("certificate at depth {depth}: path length constraint exceeded")]
    PathLength {
        /// The issuer.
        depth: usize,
    },
    /// keyUsage present without digitalSignature (end entity) or keyCertSign (issuer).
    #[error("certificate at depth {depth}: keyUsage does not allow this use")]
    KeyUsage {
        /// The certificate.
        depth: usize,
    },
    /// A critical extension this validator does not process.
    #[error("certificate at depth {depth}: unsupported critical extension")]
    UnknownCriticalExtension {
        /// The certificate.
        depth: usize,
    },
    /// More certificates than a chain may have.
    #[error("certificate chain longer than {max}")]
    ChainTooLong {
        /// The limit.
        max: usize,
    },
    /// The peer's ID payload is not the certificate's subject or one of its subjectAltNames.
    #[error("the peer's identity is not certified by its certificate (subject or subjectAltName)")]
    IdentityNotCertified,
}

/// A signature algorithm of a certificate, resolved once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignatureAlgorithm {
    /// sha*WithRSAEncryption.
    RsaPkcs1(HashAlgorithm),
    /// RSASSA-PSS, MGF1 with the same hash, salt length = hash length.
    RsaPss(HashAlgorithm),
    /// ecdsa-with-SHA*.
    Ecdsa(HashAlgorithm),
    /// Anything else: only refused if a signature with it has to be verified.
    Unsupported,
}

/// A subjectAltName entry IKE identities can match.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AltName {
    Dns(String),
    Email(String),
    Ip(Vec<u8>),
    Directory(Name),
}

/// An X.509 certificate, decoded, with the fields IKE authentication uses.
#[derive(Clone)]
pub struct Certificate {
    der: Vec<u8>,
    tbs: Range<usize>,
    issuer: Name,
    subject: Name,
    subject_der: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
    public_key: PublicKey,
    spki_sha1: [u8; 20],
    /// basicConstraints: whether a CA, and its pathLenConstraint.
    ca: bool,
    path_len: Option<u8>,
    key_usage: Option<KeyUsage>,
    alt_names: Vec<AltName>,
    algorithm: SignatureAlgorithm,
    signature: Vec<u8>,
    unknown_critical: bool,
}

impl PartialEq for Certificate {
    fn eq(&self, other: &Self) -> bool {
        self.der == other.der
    }
}

impl Eq for Certificate {}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("subject", &name::to_string(&self.subject))
            .field("issuer", &name::to_string(&self.issuer))
            .field("key", &self.public_key.kind)
            .finish_non_exhaustive()
    }
}

// Extensions read but not enforced: they restrict nothing IKE_AUTH does here.
const ID_CE_SUBJECT_KEY_IDENTIFIER: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.14");
const ID_CE_AUTHORITY_KEY_IDENTIFIER: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.35");
const ID_CE_EXT_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
const ID_CE_CRL_DISTRIBUTION_POINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.31");
const ID_PE_AUTHORITY_INFO_ACCESS: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.1.1");

const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const RSASSA_PSS: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.10");
const MGF1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.8");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_WITH_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
const SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.3");

impl Certificate {
    /// Decodes one DER certificate (the whole input).
    pub fn from_der(der: &[u8]) -> Result<Self, CertError> {
        let malformed = |why| CertError::Malformed { why };
        let cert = x509_cert::Certificate::from_der(der).map_err(|_| malformed("DER decoding failed"))?;
        let tbs = tbs_range(der).ok_or(malformed("no TBSCertificate"))?;
        let t = &cert.tbs_certificate;
        if cert.signature_algorithm != t.signature {
            return Err(malformed("the two signature algorithm fields differ (RFC 5280 §4.1.1.2)"));
        }
        let spki = t.subject_public_key_info.to_der().map_err(|_| malformed("subjectPublicKeyInfo"))?;
        let public_key = PublicKey::from_spki_der(&spki).map_err(|_| CertError::UnsupportedKey)?;
        if public_key.kind == PublicKeyKind::Rsa && !rsa_size_ok(&public_key.bytes) {
            return Err(CertError::UnsupportedKey);
        }
        let mut c = Self {
            der: der.to_vec(),
            tbs,
            issuer: t.issuer.clone(),
            subject: t.subject.clone(),
            subject_der: t.subject.to_der().map_err(|_| malformed("subject"))?,
            not_before: t.validity.not_before.to_system_time(),
            not_after: t.validity.not_after.to_system_time(),
            public_key,
            spki_sha1: Sha1::digest(&spki).into(),
            ca: false,
            path_len: None,
            key_usage: None,
            alt_names: Vec::new(),
            algorithm: signature_algorithm(&cert.signature_algorithm),
            signature: cert.signature.as_bytes().ok_or(malformed("signature has unused bits"))?.to_vec(),
            unknown_critical: false,
        };
        let (mut basic, mut usage, mut san) = (false, false, false);
        for ext in t.extensions.iter().flatten() {
            let value = ext.extn_value.as_bytes();
            let once = |seen: &mut bool| {
                // RFC 5280 §4.2: at most one instance of an extension.
                if core::mem::replace(seen, true) {
                    Err(malformed("an extension appears twice"))
                } else {
                    Ok(())
                }
            };
            match ext.extn_id {
                BasicConstraints::OID => {
                    once(&mut basic)?;
                    let b = BasicConstraints::from_der(value).map_err(|_| malformed("basicConstraints"))?;
                    c.ca = b.ca;
                    c.path_len = b.path_len_constraint;
                }
                KeyUsage::OID => {
                    once(&mut usage)?;
                    c.key_usage = Some(KeyUsage::from_der(value).map_err(|_| malformed("keyUsage"))?);
                }
                SubjectAltName::OID => {
                    once(&mut san)?;
                    let names = SubjectAltName::from_der(value).map_err(|_| malformed("subjectAltName"))?;
                    c.alt_names = names.0.into_iter().filter_map(alt_name).collect();
                }
                ID_CE_SUBJECT_KEY_IDENTIFIER
                | ID_CE_AUTHORITY_KEY_IDENTIFIER
                | ID_CE_EXT_KEY_USAGE
                | ID_CE_CRL_DISTRIBUTION_POINTS
                | ID_PE_AUTHORITY_INFO_ACCESS => {}
                _ if ext.critical => c.unknown_critical = true,
                _ => {}
            }
        }
        Ok(c)
    }

    /// Every certificate of a PEM file (`CERTIFICATE` blocks, in order) or the one
    /// certificate of a DER file.
    pub fn load(bytes: &[u8]) -> Result<Vec<Self>, CertError> {
        if bytes.first() == Some(&0x30) {
            return Ok(vec![Self::from_der(bytes)?]);
        }
        let mut certs = Vec::new();
        let mut rest = bytes;
        while let Some(begin) = find(rest, b"-----BEGIN ") {
            let block = rest.get(begin..).unwrap_or_default();
            let end = find(block, b"-----END ")
                .and_then(|e| {
                    let after = e + b"-----END ".len();
                    find(block.get(after..)?, b"-----").map(|d| after + d + b"-----".len())
                })
                .ok_or(CertError::Malformed { why: "a PEM block without its END line" })?;
            let (label, der) = x509_cert::der::pem::decode_vec(block.get(..end).unwrap_or_default())
                .map_err(|_| CertError::Malformed { why: "bad PEM encoding" })?;
            if label != "CERTIFICATE" {
                return Err(CertError::Malformed { why: "a PEM block that is not a CERTIFICATE" });
            }
            certs.push(Self::from_der(&der)?);
            rest = block.get(end..).unwrap_or_default();
        }
        if certs.is_empty() {
            return Err(CertError::NoCertificate);
        }
        Ok(certs)
    }

    /// The DER encoding, as sent in a CERT payload.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The subject public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    /// The subject DN in strongSwan's notation (`C=CH, O=Example, CN=moon`).
    pub fn subject(&self) -> String {
        name::to_string(&self.subject)
    }

    /// The subject DN as a DER_ASN1_DN identity, exactly as encoded in the certificate.
    pub fn subject_identity(&self) -> Identification {
        Identification::new(IdType::DER_ASN1_DN, self.subject_der.clone())
    }

    /// SHA-1 of the DER SubjectPublicKeyInfo: how CERTREQ names a CA (RFC 7296 §3.7).
    pub fn spki_sha1(&self) -> [u8; 20] {
        self.spki_sha1
    }

    /// Whether `id` is this certificate's: an IPv4/IPv6 address, FQDN or RFC 822 address
    /// among its subjectAltNames, or a DN equal to its subject (or a directoryName).
    pub fn certifies(&self, id: &Identification) -> bool {
        let text = || core::str::from_utf8(&id.data).ok();
        match id.ty {
            IdType::IPV4_ADDR | IdType::IPV6_ADDR => {
                self.alt_names.iter().any(|n| matches!(n, AltName::Ip(ip) if *ip == id.data))
            }
            IdType::FQDN => text().is_some_and(|t| {
                self.alt_names.iter().any(|n| matches!(n, AltName::Dns(d) if d.eq_ignore_ascii_case(t)))
            }),
            IdType::RFC822_ADDR => text().is_some_and(|t| {
                self.alt_names.iter().any(|n| matches!(n, AltName::Email(e) if e.eq_ignore_ascii_case(t)))
            }),
            IdType::DER_ASN1_DN => Name::from_der(&id.data).is_ok_and(|dn| {
                name::equal(&dn, &self.subject)
                    || self
                        .alt_names
                        .iter()
                        .any(|n| matches!(n, AltName::Directory(d) if name::equal(d, &dn)))
            }),
            _ => false,
        }
    }

    /// Whether basicConstraints makes it a CA.
    pub fn is_ca(&self) -> bool {
        self.ca
    }

    /// The signed part.
    fn tbs(&self) -> &[u8] {
        self.der.get(self.tbs.clone()).unwrap_or_default()
    }
}

/// A DER distinguished name (a DER_ASN1_DN identity's data) in strongSwan's notation, for
/// logs and listings; `None` if it does not decode.
pub fn dn_to_string(der: &[u8]) -> Option<String> {
    Name::from_der(der).ok().map(|n| name::to_string(&n))
}

/// Where the TBSCertificate's own encoding lies in the certificate: the signature covers
/// these bytes as received, not a re-encoding.
fn tbs_range(der: &[u8]) -> Option<Range<usize>> {
    let mut r = SliceReader::new(der).ok()?;
    let outer = Header::decode(&mut r).ok()?;
    if outer.tag != Tag::Sequence {
        return None;
    }
    let start = usize::try_from(u32::from(r.position())).ok()?;
    let tbs = r.tlv_bytes().ok()?;
    Some(start..start.checked_add(tbs.len())?)
}

/// Whether a DER RSAPublicKey's modulus has 2048 to 8192 bits (what ring verifies).
fn rsa_size_ok(rsa_public_key: &[u8]) -> bool {
    let Ok(mut r) = SliceReader::new(rsa_public_key) else { return false };
    let modulus = r.sequence(|r| {
        let n = UintRef::decode(r)?;
        let _e = UintRef::decode(r)?;
        Ok(n.as_bytes().len())
    });
    // UintRef strips leading zeros; a 2048-bit modulus has its top bit in the first byte.
    modulus.is_ok_and(|n| (256..=1024).contains(&n))
}

fn alt_name(n: GeneralName) -> Option<AltName> {
    match n {
        GeneralName::DnsName(d) => Some(AltName::Dns(d.to_string())),
        GeneralName::Rfc822Name(e) => Some(AltName::Email(e.to_string())),
        GeneralName::IpAddress(ip) => Some(AltName::Ip(ip.as_bytes().to_vec())),
        GeneralName::DirectoryName(dn) => Some(AltName::Directory(dn)),
        _ => None,
    }
}

/// Resolves a certificate's signature AlgorithmIdentifier.
fn signature_algorithm(alg: &AlgorithmIdentifierOwned) -> SignatureAlgorithm {
    use SignatureAlgorithm as A;
    // RFC 4055 §5: NULL parameters; absent ones are tolerated, anything else is not.
    let null_or_absent = alg.parameters.as_ref().is_none_or(|p| p.is_null());
    match alg.oid {
        SHA256_WITH_RSA if null_or_absent => A::RsaPkcs1(HashAlgorithm::Sha256),
        SHA384_WITH_RSA if null_or_absent => A::RsaPkcs1(HashAlgorithm::Sha384),
        SHA512_WITH_RSA if null_or_absent => A::RsaPkcs1(HashAlgorithm::Sha512),
        ECDSA_WITH_SHA256 if alg.parameters.is_none() => A::Ecdsa(HashAlgorithm::Sha256),
        ECDSA_WITH_SHA384 if alg.parameters.is_none() => A::Ecdsa(HashAlgorithm::Sha384),
        ECDSA_WITH_SHA512 if alg.parameters.is_none() => A::Ecdsa(HashAlgorithm::Sha512),
        RSASSA_PSS => {
            alg.parameters.as_ref().and_then(|p| pss_hash(p).ok().flatten()).map_or(A::Unsupported, A::RsaPss)
        }
        _ => A::Unsupported,
    }
}

/// RSASSA-PSS-params (RFC 4055 §3.1) that ring verifies: an explicit SHA-2 hash, MGF1 with
/// the same hash, salt length = hash length, the default trailer.
fn pss_hash(params: &x509_cert::der::Any) -> x509_cert::der::Result<Option<HashAlgorithm>> {
    use x509_cert::der::asn1::ContextSpecific;
    let hash_of = |a: &AlgorithmIdentifierOwned| {
        let null_or_absent = a.parameters.as_ref().is_none_or(|p| p.is_null());
        match a.oid {
            SHA256 if null_or_absent => Some(HashAlgorithm::Sha256),
            SHA384 if null_or_absent => Some(HashAlgorithm::Sha384),
            SHA512 if null_or_absent => Some(HashAlgorithm::Sha512),
            _ => None,
        }
    };
    params.sequence(|r| {
        let hash = ContextSpecific::<AlgorithmIdentifierOwned>::decode_explicit(r, TagNumber::N0)?;
        let mgf = ContextSpecific::<AlgorithmIdentifierOwned>::decode_explicit(r, TagNumber::N1)?;
        let salt = ContextSpecific::<u16>::decode_explicit(r, TagNumber::N2)?;
        let trailer = ContextSpecific::<u8>::decode_explicit(r, TagNumber::N3)?;
        let Some(hash) = hash.and_then(|h| hash_of(&h.value)) else { return Ok(None) };
        let mgf_hash = mgf
            .filter(|m| m.value.oid == MGF1)
            .and_then(|m| m.value.parameters.and_then(|p| p.decode_as::<AlgorithmIdentifierOwned>().ok()))
            .and_then(|a| hash_of(&a));
        let salt_ok = salt.is_some_and(|s| usize::from(s.value) == hash_len(hash));
        let trailer_ok = trailer.is_none_or(|t| t.value == 1);
        Ok((mgf_hash == Some(hash) && salt_ok && trailer_ok).then_some(hash))
    })
}

fn hash_len(hash: HashAlgorithm) -> usize {
    match hash {
        HashAlgorithm::Sha256 => 32,
        HashAlgorithm::Sha384 => 48,
        HashAlgorithm::Sha512 => 64,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fixture of tests/certs/.
    pub(crate) fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/certs/");
        std::fs::read(format!("{path}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    pub(crate) fn cert(name: &str) -> Certificate {
        Certificate::load(&fixture(name)).unwrap().remove(0)
    }

    #[test]
    fn pem_and_der_files_load_to_the_same_certificate() {
        let pem = Certificate::load(&fixture("a-rsa.pem")).unwrap();
        let der = Certificate::load(&fixture("a-rsa.der")).unwrap();
        assert_eq!(pem, der);
        assert_eq!(pem[0].subject(), "C=CH, O=Cloister Test, CN=site-a.cloister.test");
        assert_eq!(pem[0].public_key().kind, PublicKeyKind::Rsa);
        let chain = Certificate::load(&fixture("b-int-chain.pem")).unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(chain[1].subject(), "C=CH, O=Cloister Test, CN=Cloister Test RSA Intermediate");
        assert!(chain[1].ca && chain[1].path_len == Some(0));
        assert_eq!(chain[0].algorithm, SignatureAlgorithm::RsaPss(HashAlgorithm::Sha256));
        assert_eq!(cert("b-p384.pem").algorithm, SignatureAlgorithm::Ecdsa(HashAlgorithm::Sha384));
        assert_eq!(cert("b-p384.pem").public_key().kind, PublicKeyKind::EcdsaP384);
    }

    #[test]
    fn files_without_certificates_are_refused_without_echoing_them() {
        assert_eq!(Certificate::load(b""), Err(CertError::NoCertificate));
        assert_eq!(Certificate::load(b"\n\n"), Err(CertError::NoCertificate));
        let key = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIHunter2hunter2hunter2hunter2hunter2hunt\n-----END PRIVATE KEY-----\n";
        let e = Certificate::load(key).unwrap_err();
        assert!(!e.to_string().contains("unter2"), "{e}");
        assert!(matches!(
            Certificate::load(b"-----BEGIN CERTIFICATE-----\nAAAA"),
            Err(CertError::Malformed { .. })
        ));
        assert!(Certificate::load(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_err());
    }

    #[test]
    fn truncated_or_flipped_certificates_never_panic() {
        let der = cert("a-p256.pem").der().to_vec();
        for n in 0..der.len() {
            let _ = Certificate::from_der(&der[..n]);
        }
        for i in 0..der.len() {
            let mut d = der.clone();
            d[i] ^= 0x41;
            let _ = Certificate::from_der(&d);
        }
    }

    #[test]
    fn identities_match_subject_alt_names_and_the_subject() {
        let a = cert("a-rsa.pem");
        let id = |ty, d: &[u8]| Identification::new(ty, d.to_vec());
        assert!(a.certifies(&id(IdType::FQDN, b"SITE-A.cloister.test")));
        assert!(a.certifies(&id(IdType::IPV4_ADDR, &[198, 18, 0, 1])));
        assert!(a.certifies(&Identification::from_ip("2001:db8::1".parse().unwrap())));
        assert!(a.certifies(&id(IdType::RFC822_ADDR, b"admin@site-a.cloister.test")));
        assert!(a.certifies(&a.subject_identity()));
        assert_eq!(
            dn_to_string(&a.subject_identity().data).as_deref(),
            Some("C=CH, O=Cloister Test, CN=site-a.cloister.test")
        );
        assert_eq!(dn_to_string(b"\x30\x03"), None);
        let dn = name::parse("C=CH, O=cloister test, CN=site-a.cloister.test").unwrap();
        assert!(a.certifies(&id(IdType::DER_ASN1_DN, &dn)), "DNs compare case-insensitively");
        assert!(!a.certifies(&id(IdType::FQDN, b"site-b.cloister.test")));
        assert!(!a.certifies(&id(IdType::IPV4_ADDR, &[198, 18, 0, 2])));
        assert!(!a.certifies(&id(IdType::KEY_ID, b"site-a.cloister.test")));
        let b_dn = name::parse("C=CH, O=Cloister Test, CN=site-b.cloister.test").unwrap();
        assert!(!a.certifies(&id(IdType::DER_ASN1_DN, &b_dn)));
        assert!(!a.certifies(&id(IdType::DER_ASN1_DN, b"\x30\x01")));
    }

    #[test]
    fn the_certreq_hash_is_sha1_of_the_subject_public_key_info() {
        // openssl x509 -in ca-rsa.pem -noout -pubkey | openssl pkey -pubin -outform DER | sha1sum
        let ca = cert("ca-rsa.pem");
        let spki = x509_cert::Certificate::from_der(ca.der())
            .unwrap()
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .unwrap();
        assert_eq!(ca.spki_sha1(), <[u8; 20]>::from(Sha1::digest(&spki)));
        assert_ne!(ca.spki_sha1(), cert("ca-other.pem").spki_sha1());
    }
}
