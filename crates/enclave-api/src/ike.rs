//! Inputs and outputs of the IKE calls: public values only, never key bytes.

use super::alg::{AuthMethod, Prf, Role, SignatureScheme, Suite};
use super::handle::{DhHandle, EspSaHandle, SecretHandle};
use crate::der::{self, tag, Reader};
use crate::error::{Error, Result};

/// One side of a Diffie-Hellman agreement: our private value (consumed) and the peer's
/// Key Exchange Data as received.
#[derive(Debug, Clone, Copy)]
pub struct DhExchange<'a> {
    /// Our ephemeral private value, from [`crate::Enclave::dh_generate`]; consumed by the call
    /// whether it succeeds or not.
    pub dh: DhHandle,
    /// The peer's public value: Key Exchange Data of its KE payload (for ECP: x || y).
    pub peer_public: &'a [u8],
}

/// One IKE_INTERMEDIATE exchange that carries an additional key exchange of IKE_SA_INIT
/// (RFC 9370 §2.2.2), for [`crate::Enclave::ike_sa_intermediate`]. The messages come in
/// the form RFC 9242 §3.3.2 authenticates (`IntAuth_[i|r]*A | IntAuth_[i|r]*P`): the IKE
/// header and the Encrypted payload's header, their lengths counting the inner payloads
/// only, then the inner payloads in plaintext; as if unfragmented.
#[derive(Debug, Clone, Copy)]
pub struct IntermediateExchange<'a> {
    /// Ni of the IKE SA's IKE_SA_INIT.
    pub nonce_i: &'a [u8],
    /// Nr of the IKE SA's IKE_SA_INIT.
    pub nonce_r: &'a [u8],
    /// The initiator's IKE_INTERMEDIATE request, as described above.
    pub request: &'a [u8],
    /// The responder's IKE_INTERMEDIATE response, as described above.
    pub response: &'a [u8],
}

/// Everything public that an IKE SA's key derivation needs (RFC 7296 §2.14, §2.18).
#[derive(Debug, Clone, Copy)]
pub struct IkeSaParams<'a> {
    /// Our role in the exchange that creates this SA (IKE_SA_INIT, or the CREATE_CHILD_SA
    /// that rekeys: its initiator becomes the new SA's original initiator, §2.18).
    pub role: Role,
    /// The negotiated PRF of the new SA.
    pub prf: Prf,
    /// The negotiated encryption (and integrity) of the new SA.
    pub suite: Suite,
    /// Ni: the initiator's Nonce Data (16..=256 bytes).
    pub nonce_i: &'a [u8],
    /// Nr: the responder's Nonce Data (16..=256 bytes).
    pub nonce_r: &'a [u8],
    /// SPIi of the new SA.
    pub spi_i: u64,
    /// SPIr of the new SA.
    pub spi_r: u64,
}

/// Everything public that a child SA's KEYMAT derivation needs (RFC 7296 §2.17).
#[derive(Debug, Clone, Copy)]
pub struct ChildSaParams<'a> {
    /// Our role in the exchange that creates the child SA (IKE_AUTH or CREATE_CHILD_SA):
    /// the initiator-to-responder keys come first in KEYMAT.
    pub role: Role,
    /// The negotiated ESP transform.
    pub suite: Suite,
    /// Whether the SA uses 64-bit Extended Sequence Numbers.
    pub esn: bool,
    /// Ni of that exchange.
    pub nonce_i: &'a [u8],
    /// Nr of that exchange.
    pub nonce_r: &'a [u8],
    /// The SPI we chose: packets to us carry it.
    pub spi_inbound: u32,
    /// The SPI the peer chose: packets we send carry it.
    pub spi_outbound: u32,
}

/// The two directions of a new child SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildSaPair {
    /// Decrypts what the peer sends.
    pub inbound: EspSaHandle,
    /// Encrypts what we send.
    pub outbound: EspSaHandle,
}

/// What [`crate::Enclave::establish_seal`] hands back at the end of IKE_AUTH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EstablishSeal {
    /// SK_d, sealed for later rekeys ([`crate::Enclave::clear_and_seal`]).
    pub sk_d: SealedBlob,
    /// What a restarted enclave needs ([`crate::Enclave::ike_sa_seal_state`]).
    pub state: SealedBlob,
    /// Trusted bytes of this IKE SA just before the clear-and-seal.
    pub ike_sa_bytes_before: usize,
    /// And just after.
    pub ike_sa_bytes_after: usize,
}

/// The peer's AUTH payload and what it covers, for [`crate::Enclave::auth_verify_compute`].
#[derive(Debug, Clone, Copy)]
pub struct PeerAuthCheck<'a> {
    /// What to check it against.
    pub credential: PeerCredential<'a>,
    /// Its Auth Method, as received.
    pub method: u8,
    /// Its Authentication Data, as received.
    pub auth_data: &'a [u8],
    /// The octets it signs or MACs.
    pub input: AuthInput<'a>,
}

/// How to compute our AUTH payload, for [`crate::Enclave::auth_verify_compute`].
#[derive(Debug, Clone, Copy)]
pub struct OurAuth<'a> {
    /// The provisioned secret (PSK or private key).
    pub credential: SecretHandle,
    /// Which method and scheme.
    pub spec: AuthSpec,
    /// The octets to sign or MAC.
    pub input: AuthInput<'a>,
}

/// What [`crate::Enclave::auth_verify_compute`] hands back once the peer's AUTH verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthAnswered {
    /// What the peer's AUTH was accepted as.
    pub verified: AuthVerified,
    /// Our AUTH: its method and its length at the start of the output buffer, or why it
    /// could not be computed.
    pub ours: crate::Result<(AuthMethod, usize)>,
}

/// A sealed blob from [`crate::Enclave::clear_and_seal`]: opaque, AEAD-protected, safe to
/// store on the untrusted side. See [`crate::seal_format`] for the layout.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedBlob(pub Vec<u8>);

impl SealedBlob {
    /// The version counter in the blob's (authenticated, cleartext) header, for the store
    /// to keep next to it; `None` if the header is cut short.
    pub fn counter(&self) -> Option<u64> {
        let b = self.0.get(8..16)?;
        let mut c = [0u8; 8];
        c.copy_from_slice(b);
        Some(u64::from_be_bytes(c))
    }
}

impl core::fmt::Debug for SealedBlob {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SealedBlob({} bytes, counter {:?})", self.0.len(), self.counter())
    }
}

/// The public inputs of an AUTH payload (RFC 7296 §2.15): the signed octets are
/// `real_message | peer_nonce | prf(SK_px, id_body)`.
#[derive(Debug, Clone, Copy)]
pub struct AuthInput<'a> {
    /// The IKE_SA_INIT message sent by the party whose AUTH this is (RealMessage1 for the
    /// initiator, RealMessage2 for the responder), from the IKE header on.
    pub real_message: &'a [u8],
    /// The *other* party's Nonce Data (Nr in the initiator's AUTH, Ni in the responder's).
    pub peer_nonce: &'a [u8],
    /// The body of the ID payload of the party whose AUTH this is (IDi' or IDr'): ID Type,
    /// three reserved octets, Identification Data.
    pub id_body: &'a [u8],
}

/// How to compute our AUTH payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthSpec {
    /// Shared Key MIC with a provisioned PSK.
    SharedKey,
    /// RFC 4754 ECDSA (method 9 or 10, by the key's curve) with a provisioned ECDSA key.
    Ecdsa,
    /// RFC 7427 Digital Signature with this scheme and a provisioned private key.
    DigitalSignature(SignatureScheme),
}

impl AuthSpec {
    /// The Auth Method to put in the AUTH payload, given the credential's kind.
    pub fn method(self, ecdsa_p384: bool) -> AuthMethod {
        match self {
            Self::SharedKey => AuthMethod::SharedKey,
            Self::Ecdsa if ecdsa_p384 => AuthMethod::EcdsaSha384P384,
            Self::Ecdsa => AuthMethod::EcdsaSha256P256,
            Self::DigitalSignature(_) => AuthMethod::DigitalSignature,
        }
    }
}

/// What to check the peer's AUTH payload against.
#[derive(Debug, Clone, Copy)]
pub enum PeerCredential<'a> {
    /// The provisioned pre-shared key.
    SharedKey(SecretHandle),
    /// The public key from the peer's (already validated) certificate.
    PublicKey(&'a PublicKey),
}

/// What [`crate::Enclave::auth_verify`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthVerified {
    /// The method of the AUTH payload.
    pub method: AuthMethod,
    /// The RFC 7427 signature scheme, for the engine's policy; `None` for other methods.
    pub scheme: Option<SignatureScheme>,
}

/// The algorithm family of a [`PublicKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PublicKeyKind {
    /// RSA; bytes are a DER RSAPublicKey (PKCS#1).
    Rsa,
    /// ECDSA P-256; bytes are an uncompressed SEC1 point (65 bytes).
    EcdsaP256,
    /// ECDSA P-384; bytes are an uncompressed SEC1 point (97 bytes).
    EcdsaP384,
}

/// A peer's public key (not secret), as taken from its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The family.
    pub kind: PublicKeyKind,
    /// The key in the encoding `kind` names.
    pub bytes: Vec<u8>,
}

const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];

impl PublicKey {
    /// Parses a DER SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) holding an RSA, P-256 or
    /// P-384 key.
    pub fn from_spki_der(spki: &[u8]) -> Result<Self> {
        let bad = Error::BadPublicKey { why: "not a supported SubjectPublicKeyInfo" };
        let mut outer = Reader::new(spki);
        let mut seq = outer.nested(tag::SEQUENCE).ok_or(bad.clone())?;
        let mut alg = seq.nested(tag::SEQUENCE).ok_or(bad.clone())?;
        let bits = seq.read(tag::BIT_STRING).ok_or(bad.clone())?;
        if !outer.is_empty() || !seq.is_empty() {
            return Err(bad);
        }
        let (&unused, key) = bits.split_first().ok_or(bad.clone())?;
        if unused != 0 {
            return Err(bad);
        }
        let oid = alg.read(tag::OID).ok_or(bad.clone())?;
        let kind = if oid == OID_RSA_ENCRYPTION {
            // Parameters: NULL (absent is tolerated).
            if !alg.is_empty() {
                alg.read(tag::NULL).ok_or(bad.clone())?;
            }
            PublicKeyKind::Rsa
        } else if oid == OID_EC_PUBLIC_KEY {
            match alg.read(tag::OID).ok_or(bad.clone())? {
                c if c == OID_P256 => PublicKeyKind::EcdsaP256,
                c if c == OID_P384 => PublicKeyKind::EcdsaP384,
                _ => return Err(Error::BadPublicKey { why: "unsupported curve" }),
            }
        } else {
            return Err(Error::BadPublicKey { why: "unsupported algorithm" });
        };
        if !alg.is_empty() {
            return Err(bad);
        }
        Ok(Self { kind, bytes: key.to_vec() })
    }
}

/// The DER AlgorithmIdentifier that RFC 7427 puts in front of a signature of `scheme`.
#[doc(hidden)]
pub fn algorithm_identifier(scheme: SignatureScheme) -> &'static [u8] {
    use SignatureScheme as S;
    match scheme {
        // RFC 7427 Appendix A.
        S::RsaPkcs1Sha256 => &ALG_RSA_PKCS1_SHA256,
        S::RsaPkcs1Sha384 => &ALG_RSA_PKCS1_SHA384,
        S::RsaPkcs1Sha512 => &ALG_RSA_PKCS1_SHA512,
        S::RsaPssSha256 => &ALG_RSA_PSS_SHA256,
        S::RsaPssSha384 => &ALG_RSA_PSS_SHA384,
        S::RsaPssSha512 => &ALG_RSA_PSS_SHA512,
        S::EcdsaP256Sha256 | S::EcdsaP384Sha256 => &ALG_ECDSA_SHA256,
        S::EcdsaP256Sha384 | S::EcdsaP384Sha384 => &ALG_ECDSA_SHA384,
        S::EcdsaP256Sha512 | S::EcdsaP384Sha512 => &ALG_ECDSA_SHA512,
    }
}

const ALG_RSA_PKCS1_SHA256: [u8; 15] = hex15(0x0b);
const ALG_RSA_PKCS1_SHA384: [u8; 15] = hex15(0x0c);
const ALG_RSA_PKCS1_SHA512: [u8; 15] = hex15(0x0d);
const fn hex15(last: u8) -> [u8; 15] {
    [0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, last, 0x05, 0x00]
}
const ALG_ECDSA_SHA256: [u8; 12] = [0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ALG_ECDSA_SHA384: [u8; 12] = [0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const ALG_ECDSA_SHA512: [u8; 12] = [0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
const ALG_RSA_PSS_SHA256: [u8; 67] = pss(0x01, 0x20);
const ALG_RSA_PSS_SHA384: [u8; 67] = pss(0x02, 0x30);
const ALG_RSA_PSS_SHA512: [u8; 67] = pss(0x03, 0x40);

/// RSASSA-PSS AlgorithmIdentifier with explicit parameters (RFC 7427 A.4.3 for SHA-256):
/// hash, MGF1 with the same hash, salt length = hash length, trailer field default.
const fn pss(hash: u8, salt: u8) -> [u8; 67] {
    [
        0x30, 0x41, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a, 0x30, 0x34, 0xa0, 0x0f,
        0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, hash, 0x05, 0x00, 0xa1, 0x1c,
        0x30, 0x1a, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x08, 0x30, 0x0d, 0x06, 0x09,
        0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, hash, 0x05, 0x00, 0xa2, 0x03, 0x02, 0x01, salt,
    ]
}

const OID_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
const OID_SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
const OID_SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
const OID_MGF1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x08];
const OID_RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];

/// Maps an RFC 7427 AlgorithmIdentifier to a scheme this enclave verifies. ECDSA ones
/// come out on P-256: the identifier names no curve (see [`SignatureScheme::on_curve_of`]).
///
/// The fixed encodings are compared byte for byte; RSASSA-PSS is parsed because peers
/// differ in whether the hash AlgorithmIdentifiers carry a NULL parameter. Only PSS with
/// MGF1 over the same hash and salt length = hash length is accepted (what ring verifies).
#[doc(hidden)]
pub fn scheme_from_algorithm_identifier(alg: &[u8]) -> Option<SignatureScheme> {
    use SignatureScheme as S;
    for s in [
        S::RsaPkcs1Sha256,
        S::RsaPkcs1Sha384,
        S::RsaPkcs1Sha512,
        S::EcdsaP256Sha256,
        S::EcdsaP256Sha384,
        S::EcdsaP256Sha512,
        S::RsaPssSha256,
        S::RsaPssSha384,
        S::RsaPssSha512,
    ] {
        if algorithm_identifier(s) == alg {
            return Some(s);
        }
    }
    // Absent NULL parameters for the PKCS#1 ones (RFC 4055 says NULL; be tolerant).
    let mut outer = Reader::new(alg);
    let mut seq = outer.nested(tag::SEQUENCE)?;
    if !outer.is_empty() {
        return None;
    }
    let oid = seq.read(tag::OID)?;
    if oid != OID_RSA_PSS {
        return None;
    }
    let mut params = seq.nested(tag::SEQUENCE)?;
    if !seq.is_empty() {
        return None;
    }
    let mut hash_ctx = params.nested(tag::CTX0)?;
    let hash = read_hash_alg(&mut hash_ctx.nested(tag::SEQUENCE)?)?;
    let mut mgf_ctx = params.nested(tag::CTX1)?;
    let mut mgf = mgf_ctx.nested(tag::SEQUENCE)?;
    if mgf.read(tag::OID)? != OID_MGF1 {
        return None;
    }
    let mgf_hash = read_hash_alg(&mut mgf.nested(tag::SEQUENCE)?)?;
    let mut salt_ctx = params.nested(tag::CTX2)?;
    let mut salt = [0u8; 1];
    der::read_uint_fixed(&mut salt_ctx, &mut salt)?;
    if !params.is_empty() || !hash_ctx.is_empty() || !mgf_ctx.is_empty() || !salt_ctx.is_empty() {
        return None; // a trailerField or anything else: not what we verify
    }
    let (scheme, len) = match hash {
        32 => (S::RsaPssSha256, 32),
        48 => (S::RsaPssSha384, 48),
        64 => (S::RsaPssSha512, 64),
        _ => return None,
    };
    (mgf_hash == hash && usize::from(salt[0]) == len).then_some(scheme)
}

/// Reads a SHA-2 AlgorithmIdentifier body (OID, optional NULL); returns the digest length.
fn read_hash_alg(r: &mut Reader<'_>) -> Option<usize> {
    let oid = r.read(tag::OID)?;
    if r.peek_tag() == Some(tag::NULL) {
        r.read(tag::NULL)?;
    }
    if !r.is_empty() {
        return None;
    }
    match oid {
        o if o == OID_SHA256 => Some(32),
        o if o == OID_SHA384 => Some(48),
        o if o == OID_SHA512 => Some(64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn pss_sha256_identifier_matches_rfc7427_appendix_a() {
        // RFC 7427 A.4.3, RSASSA-PSS with SHA-256.
        let a = hex!(
            "3041 0609 2a86 4886 f70d 0101 0a30 34a0 0f30 0d06 0960 8648 0165 0304 0201 0500"
            "a11c 301a 0609 2a86 4886 f70d 0101 0830 0d06 0960 8648 0165 0304 0201 0500 a203"
            "0201 20"
        );
        assert_eq!(algorithm_identifier(SignatureScheme::RsaPssSha256), &a[..]);
    }

    #[test]
    fn pss_identifier_without_null_params_is_understood() {
        let a = hex!(
            "303d 0609 2a86 4886 f70d 0101 0a30 30a0 0d30 0b06 0960 8648 0165 0304 0202"
            "a11a 3018 0609 2a86 4886 f70d 0101 0830 0b06 0960 8648 0165 0304 0202 a203 0201 30"
        );
        assert_eq!(scheme_from_algorithm_identifier(&a), Some(SignatureScheme::RsaPssSha384));
        assert_eq!(scheme_from_algorithm_identifier(&a[..a.len() - 1]), None);
    }

    #[test]
    fn every_scheme_identifier_round_trips() {
        use SignatureScheme as S;
        for s in [
            S::RsaPkcs1Sha256,
            S::RsaPkcs1Sha384,
            S::RsaPkcs1Sha512,
            S::RsaPssSha256,
            S::RsaPssSha384,
            S::RsaPssSha512,
            S::EcdsaP256Sha256,
            S::EcdsaP384Sha384,
            S::EcdsaP256Sha384,
            S::EcdsaP256Sha512,
            S::EcdsaP384Sha256,
            S::EcdsaP384Sha512,
        ] {
            // ECDSA identifiers name the hash only; the key's curve completes the scheme.
            let curve = match s {
                S::EcdsaP384Sha256 | S::EcdsaP384Sha384 | S::EcdsaP384Sha512 => PublicKeyKind::EcdsaP384,
                _ => PublicKeyKind::EcdsaP256,
            };
            let back =
                scheme_from_algorithm_identifier(algorithm_identifier(s)).map(|b| b.on_curve_of(curve));
            assert_eq!(back, Some(s));
        }
    }

    #[test]
    fn spki_garbage_is_refused_not_panicked_on() {
        for n in 0..40u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            assert!(PublicKey::from_spki_der(&junk).is_err());
        }
    }
}
