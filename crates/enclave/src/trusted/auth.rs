//! Provisioned secrets and the AUTH payload (RFC 7296 §2.15, RFC 4754, RFC 7427).

use super::ike_keys::IkeSa;
use super::prf::{self, ct_eq, MAX_PRF_LEN};
use enclave_api::alg::{AuthMethod, Role, SecretKind, SignatureScheme};
use enclave_api::der::{self, tag, Reader};
use enclave_api::error::{Error, Result};
use enclave_api::ike::{algorithm_identifier, scheme_from_algorithm_identifier};
use enclave_api::ike::{AuthInput, AuthSpec, AuthVerified, PublicKey, PublicKeyKind};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair, UnparsedPublicKey};
use zeroize::Zeroizing;

/// Longest PSK accepted.
const MAX_PSK: usize = 1024;

/// A provisioned secret. No `Clone`/`Debug`. The PSK zeroizes on drop; ring's key pairs
/// do not (see docs/threat-model.md, "Zeroization"). Private keys keep their PKCS#8
/// encoding beside ring's parsed form (zeroized on drop), because ring cannot encode a key
/// again and a migration package (`trusted::migration`) must carry it.
pub(crate) enum Secret {
    Psk(Zeroizing<Vec<u8>>),
    Rsa(RsaKeyPair, Zeroizing<Vec<u8>>),
    EcdsaP256(EcdsaKeyPair, Zeroizing<Vec<u8>>),
    EcdsaP384(EcdsaKeyPair, Zeroizing<Vec<u8>>),
}

impl Secret {
    /// Loads a secret from its provisioned encoding (raw PSK bytes, or PKCS#8) and, for
    /// private keys, runs a pairwise-consistency check (sign, then verify).
    pub(crate) fn load(kind: SecretKind, bytes: &[u8], rng: &SystemRandom) -> Result<Self> {
        let bad = |why| Error::BadPrivateKey { why };
        let s = match kind {
            SecretKind::PreSharedKey => {
                if bytes.is_empty() || bytes.len() > MAX_PSK {
                    return Err(Error::BadLength {
                        what: "PSK",
                        len: bytes.len(),
                        why: "must be 1..=1024 bytes",
                    });
                }
                return Ok(Self::Psk(Zeroizing::new(bytes.to_vec())));
            }
            SecretKind::RsaPrivateKey => Self::Rsa(
                RsaKeyPair::from_pkcs8(bytes).map_err(|_| bad("not an RSA PKCS#8 key ring accepts"))?,
                Zeroizing::new(bytes.to_vec()),
            ),
            SecretKind::EcdsaP256PrivateKey => Self::EcdsaP256(
                EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, bytes, rng)
                    .map_err(|_| bad("not a P-256 PKCS#8 key"))?,
                Zeroizing::new(bytes.to_vec()),
            ),
            SecretKind::EcdsaP384PrivateKey => Self::EcdsaP384(
                EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P384_SHA384_ASN1_SIGNING, bytes, rng)
                    .map_err(|_| bad("not a P-384 PKCS#8 key"))?,
                Zeroizing::new(bytes.to_vec()),
            ),
            // Never a stored secret: they go straight into an SA (`esp_sa_install_wrapped`).
            SecretKind::EspSaKeys => {
                return Err(Error::WrongBlobKind { got: kind, want: "a PSK or private key" });
            }
        };
        s.pairwise_check(rng)?;
        Ok(s)
    }

    fn pairwise_check(&self, rng: &SystemRandom) -> Result<()> {
        let msg = b"cloister pairwise consistency check";
        let scheme = match self {
            Self::Psk(_) => return Ok(()),
            Self::Rsa(..) => SignatureScheme::RsaPssSha256,
            Self::EcdsaP256(..) => SignatureScheme::EcdsaP256Sha256,
            Self::EcdsaP384(..) => SignatureScheme::EcdsaP384Sha384,
        };
        let sig = self.sign(scheme, rng, msg)?;
        let public = self.public_key().ok_or(Error::Internal { what: "pairwise" })?;
        verify_signature(scheme, &public, msg, &sig)
            .map_err(|_| Error::BadPrivateKey { why: "pairwise consistency check failed" })
    }

    pub(crate) fn kind(&self) -> SecretKind {
        match self {
            Self::Psk(_) => SecretKind::PreSharedKey,
            Self::Rsa(..) => SecretKind::RsaPrivateKey,
            Self::EcdsaP256(..) => SecretKind::EcdsaP256PrivateKey,
            Self::EcdsaP384(..) => SecretKind::EcdsaP384PrivateKey,
        }
    }

    /// The encoding [`Self::load`] takes (raw PSK, PKCS#8), for a migration package.
    pub(crate) fn encoding(&self) -> &[u8] {
        match self {
            Self::Psk(b) | Self::Rsa(_, b) | Self::EcdsaP256(_, b) | Self::EcdsaP384(_, b) => b,
        }
    }

    /// The matching public key (not secret).
    pub(crate) fn public_key(&self) -> Option<PublicKey> {
        match self {
            Self::Psk(_) => None,
            Self::Rsa(k, _) => {
                Some(PublicKey { kind: PublicKeyKind::Rsa, bytes: k.public_key().as_ref().to_vec() })
            }
            Self::EcdsaP256(k, _) => {
                Some(PublicKey { kind: PublicKeyKind::EcdsaP256, bytes: k.public_key().as_ref().to_vec() })
            }
            Self::EcdsaP384(k, _) => {
                Some(PublicKey { kind: PublicKeyKind::EcdsaP384, bytes: k.public_key().as_ref().to_vec() })
            }
        }
    }

    /// Bytes held. RSA keys keep their big numbers on the heap inside ring; estimated as
    /// eight modulus-sized values (n, p, q, dP, dQ, qInv and Montgomery constants).
    pub(crate) fn footprint(&self) -> usize {
        core::mem::size_of::<Self>()
            + match self {
                Self::Psk(p) => p.capacity(),
                Self::Rsa(k, pkcs8) => 8 * k.public().modulus_len() + pkcs8.capacity(),
                Self::EcdsaP256(_, pkcs8) | Self::EcdsaP384(_, pkcs8) => pkcs8.capacity(),
            }
    }

    /// Signs `msg` with `scheme`; the signature encoding is the scheme's (ECDSA: DER).
    fn sign(&self, scheme: SignatureScheme, rng: &SystemRandom, msg: &[u8]) -> Result<Vec<u8>> {
        use SignatureScheme as S;
        let wrong = Error::Unsupported { what: "signature scheme for this key", value: 0 };
        match (self, scheme) {
            (Self::Rsa(k, _), s) => {
                let padding: &'static dyn signature::RsaEncoding = match s {
                    S::RsaPkcs1Sha256 => &signature::RSA_PKCS1_SHA256,
                    S::RsaPkcs1Sha384 => &signature::RSA_PKCS1_SHA384,
                    S::RsaPkcs1Sha512 => &signature::RSA_PKCS1_SHA512,
                    S::RsaPssSha256 => &signature::RSA_PSS_SHA256,
                    S::RsaPssSha384 => &signature::RSA_PSS_SHA384,
                    S::RsaPssSha512 => &signature::RSA_PSS_SHA512,
                    _ => return Err(wrong),
                };
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(padding, rng, msg, &mut sig).map_err(|_| Error::Internal { what: "RSA sign" })?;
                Ok(sig)
            }
            (Self::EcdsaP256(k, _), S::EcdsaP256Sha256) | (Self::EcdsaP384(k, _), S::EcdsaP384Sha384) => {
                Ok(k.sign(rng, msg).map_err(|_| Error::Internal { what: "ECDSA sign" })?.as_ref().to_vec())
            }
            _ => Err(wrong),
        }
    }
}

/// Verifies a signature of `scheme` (ECDSA: DER) by `public` over `msg`.
pub(crate) fn verify_signature(
    scheme: SignatureScheme,
    public: &PublicKey,
    msg: &[u8],
    sig: &[u8],
) -> Result<()> {
    use SignatureScheme as S;
    let alg: &dyn signature::VerificationAlgorithm = match (public.kind, scheme) {
        (PublicKeyKind::Rsa, S::RsaPkcs1Sha256) => &signature::RSA_PKCS1_2048_8192_SHA256,
        (PublicKeyKind::Rsa, S::RsaPkcs1Sha384) => &signature::RSA_PKCS1_2048_8192_SHA384,
        (PublicKeyKind::Rsa, S::RsaPkcs1Sha512) => &signature::RSA_PKCS1_2048_8192_SHA512,
        (PublicKeyKind::Rsa, S::RsaPssSha256) => &signature::RSA_PSS_2048_8192_SHA256,
        (PublicKeyKind::Rsa, S::RsaPssSha384) => &signature::RSA_PSS_2048_8192_SHA384,
        (PublicKeyKind::Rsa, S::RsaPssSha512) => &signature::RSA_PSS_2048_8192_SHA512,
        (PublicKeyKind::EcdsaP256, S::EcdsaP256Sha256) => &signature::ECDSA_P256_SHA256_ASN1,
        (PublicKeyKind::EcdsaP384, S::EcdsaP384Sha384) => &signature::ECDSA_P384_SHA384_ASN1,
        (PublicKeyKind::EcdsaP256, S::EcdsaP256Sha384) => &signature::ECDSA_P256_SHA384_ASN1,
        (PublicKeyKind::EcdsaP384, S::EcdsaP384Sha256) => &signature::ECDSA_P384_SHA256_ASN1,
        (PublicKeyKind::EcdsaP256, S::EcdsaP256Sha512) | (PublicKeyKind::EcdsaP384, S::EcdsaP384Sha512) => {
            return verify_ecdsa_sha512(public, msg, sig)
        }
        _ => return Err(Error::Unsupported { what: "signature scheme for this public key", value: 0 }),
    };
    UnparsedPublicKey::new(alg, &public.bytes)
        .verify(msg, sig)
        .map_err(|_| Error::AuthenticationFailed { method: AuthMethod::DigitalSignature.id() })
}

/// Verifies a DER ECDSA signature over SHA-512 of `msg` (ring has no SHA-512 ECDSA); the
/// digest is truncated to the curve's order length as FIPS 186-4 §6.4 says.
fn verify_ecdsa_sha512(public: &PublicKey, msg: &[u8], sig: &[u8]) -> Result<()> {
    use ecdsa::signature::hazmat::PrehashVerifier;
    let failed = Error::AuthenticationFailed { method: AuthMethod::DigitalSignature.id() };
    let digest = ring::digest::digest(&ring::digest::SHA512, msg);
    let ok = match public.kind {
        PublicKeyKind::EcdsaP256 => {
            let key = ecdsa::VerifyingKey::<p256::NistP256>::from_sec1_bytes(&public.bytes);
            let sig = ecdsa::Signature::<p256::NistP256>::from_der(sig);
            key.ok().zip(sig.ok()).is_some_and(|(k, s)| k.verify_prehash(digest.as_ref(), &s).is_ok())
        }
        PublicKeyKind::EcdsaP384 => {
            let key = ecdsa::VerifyingKey::<p384::NistP384>::from_sec1_bytes(&public.bytes);
            let sig = ecdsa::Signature::<p384::NistP384>::from_der(sig);
            key.ok().zip(sig.ok()).is_some_and(|(k, s)| k.verify_prehash(digest.as_ref(), &s).is_ok())
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(failed)
    }
}

/// Verifies a fixed-length (r || s, RFC 4754 / P1363) ECDSA signature.
pub(crate) fn verify_ecdsa_fixed(public: &PublicKey, msg: &[u8], sig: &[u8]) -> Result<AuthMethod> {
    let (alg, method): (&dyn signature::VerificationAlgorithm, _) = match public.kind {
        PublicKeyKind::EcdsaP256 => (&signature::ECDSA_P256_SHA256_FIXED, AuthMethod::EcdsaSha256P256),
        PublicKeyKind::EcdsaP384 => (&signature::ECDSA_P384_SHA384_FIXED, AuthMethod::EcdsaSha384P384),
        _ => return Err(Error::Unsupported { what: "public key for RFC 4754 ECDSA", value: 0 }),
    };
    UnparsedPublicKey::new(alg, &public.bytes)
        .verify(msg, sig)
        .map_err(|_| Error::AuthenticationFailed { method: method.id() })?;
    Ok(method)
}

/// DER Ecdsa-Sig-Value to fixed r || s of `n` bytes each.
fn ecdsa_der_to_fixed(der_sig: &[u8], n: usize) -> Result<Vec<u8>> {
    let bad = Error::Internal { what: "ECDSA signature encoding" };
    let mut outer = Reader::new(der_sig);
    let mut seq = outer.nested(tag::SEQUENCE).ok_or(bad.clone())?;
    let mut out = vec![0u8; 2 * n];
    let (r, s) = out.split_at_mut(n);
    der::read_uint_fixed(&mut seq, r).ok_or(bad.clone())?;
    der::read_uint_fixed(&mut seq, s).ok_or(bad.clone())?;
    if !seq.is_empty() || !outer.is_empty() {
        return Err(bad);
    }
    Ok(out)
}

/// `real_message | peer_nonce | prf(SK_px, IDx') [| IntAuth]` where x is the signer.
fn signed_octets(sa: &IkeSa, signer: Role, input: &AuthInput<'_>) -> Result<Zeroizing<Vec<u8>>> {
    let keys = sa.sk_p.as_ref().ok_or(Error::KeyCleared { what: "SK_pi/SK_pr" })?;
    let sk_p = match signer {
        Role::Initiator => keys.i.as_slice(),
        Role::Responder => keys.r.as_slice(),
    };
    let mut maced = [0u8; MAX_PRF_LEN];
    let n = prf::prf(sa.prf, sk_p, &[input.id_body], &mut maced)?;
    let mut v = Vec::with_capacity(input.real_message.len() + input.peer_nonce.len() + n);
    v.extend_from_slice(input.real_message);
    v.extend_from_slice(input.peer_nonce);
    v.extend_from_slice(maced.get(..n).unwrap_or(&[]));
    // RFC 9242 §3.3.2: after IKE_INTERMEDIATE exchanges, `| IntAuth`.
    if let Some(int) = sa.transcript.as_ref().and_then(|t| t.intermediate.as_ref()) {
        v.extend_from_slice(&int.octets());
    }
    Ok(Zeroizing::new(v))
}

/// prf(prf(PSK, "Key Pad for IKEv2"), signed octets).
fn psk_auth(sa: &IkeSa, psk: &[u8], octets: &[u8], out: &mut [u8; MAX_PRF_LEN]) -> Result<usize> {
    let mut padded = Zeroizing::new([0u8; MAX_PRF_LEN]);
    let n = prf::prf(sa.prf, psk, &[b"Key Pad for IKEv2"], &mut padded[..])?;
    prf::prf(sa.prf, padded.get(..n).unwrap_or(&[]), &[octets], out)
}

fn other(role: Role) -> Role {
    match role {
        Role::Initiator => Role::Responder,
        Role::Responder => Role::Initiator,
    }
}

/// Computes our Authentication Data into `out`.
pub(crate) fn compute(
    sa: &IkeSa,
    secret: &Secret,
    handle: u32,
    spec: AuthSpec,
    input: &AuthInput<'_>,
    rng: &SystemRandom,
    out: &mut [u8],
) -> Result<(AuthMethod, usize)> {
    let octets = signed_octets(sa, sa.role, input)?;
    let wrong = |what| Error::WrongSecretKind { handle, what };
    let (method, data): (AuthMethod, Zeroizing<Vec<u8>>) = match (spec, secret) {
        (AuthSpec::SharedKey, Secret::Psk(psk)) => {
            let mut a = [0u8; MAX_PRF_LEN];
            let n = psk_auth(sa, psk, &octets, &mut a)?;
            (AuthMethod::SharedKey, Zeroizing::new(a.get(..n).unwrap_or(&[]).to_vec()))
        }
        (AuthSpec::SharedKey, _) => return Err(wrong("Shared Key MIC")),
        (AuthSpec::Ecdsa, Secret::EcdsaP256(..)) => {
            let der_sig = secret.sign(SignatureScheme::EcdsaP256Sha256, rng, &octets)?;
            (AuthMethod::EcdsaSha256P256, Zeroizing::new(ecdsa_der_to_fixed(&der_sig, 32)?))
        }
        (AuthSpec::Ecdsa, Secret::EcdsaP384(..)) => {
            let der_sig = secret.sign(SignatureScheme::EcdsaP384Sha384, rng, &octets)?;
            (AuthMethod::EcdsaSha384P384, Zeroizing::new(ecdsa_der_to_fixed(&der_sig, 48)?))
        }
        (AuthSpec::Ecdsa, _) => return Err(wrong("RFC 4754 ECDSA")),
        (AuthSpec::DigitalSignature(_), Secret::Psk(_)) => return Err(wrong("a digital signature")),
        (AuthSpec::DigitalSignature(scheme), _) => {
            let sig = secret.sign(scheme, rng, &octets).map_err(|e| match e {
                Error::Unsupported { .. } => wrong("this signature scheme"),
                e => e,
            })?;
            let alg = algorithm_identifier(scheme);
            let mut v = Vec::with_capacity(1 + alg.len() + sig.len());
            // Every identifier in the table is under 256 bytes.
            v.push(u8::try_from(alg.len()).map_err(|_| Error::Internal { what: "AlgorithmIdentifier" })?);
            v.extend_from_slice(alg);
            v.extend_from_slice(&sig);
            (AuthMethod::DigitalSignature, Zeroizing::new(v))
        }
    };
    let out_len = out.len();
    let dst = out.get_mut(..data.len()).ok_or(Error::BadLength {
        what: "AUTH output buffer",
        len: out_len,
        why: "too small for the Authentication Data",
    })?;
    dst.copy_from_slice(&data);
    Ok((method, data.len()))
}

/// What the peer's AUTH is checked against, resolved to a secret or a public key.
pub(crate) enum PeerKey<'a> {
    Psk(&'a [u8]),
    Public(&'a PublicKey),
}

/// Verifies the peer's Authentication Data.
pub(crate) fn verify(
    sa: &IkeSa,
    peer: PeerKey<'_>,
    method: u8,
    data: &[u8],
    input: &AuthInput<'_>,
) -> Result<AuthVerified> {
    let octets = signed_octets(sa, other(sa.role), input)?;
    let m = AuthMethod::from_id(method)
        .ok_or(Error::Unsupported { what: "Auth Method", value: u16::from(method) })?;
    let failed = Error::AuthenticationFailed { method };
    match (m, peer) {
        (AuthMethod::SharedKey, PeerKey::Psk(psk)) => {
            let mut expect = [0u8; MAX_PRF_LEN];
            let n = psk_auth(sa, psk, &octets, &mut expect)?;
            if ct_eq(expect.get(..n).unwrap_or(&[]), data) {
                Ok(AuthVerified { method: m, scheme: None })
            } else {
                Err(failed)
            }
        }
        (AuthMethod::EcdsaSha256P256 | AuthMethod::EcdsaSha384P384, PeerKey::Public(pk)) => {
            let got = verify_ecdsa_fixed(pk, &octets, data)?;
            if got != m {
                return Err(Error::Unsupported {
                    what: "Auth Method for this public key",
                    value: u16::from(method),
                });
            }
            Ok(AuthVerified { method: m, scheme: None })
        }
        (AuthMethod::DigitalSignature, PeerKey::Public(pk)) => {
            let (&alg_len, rest) = data.split_first().ok_or(failed.clone())?;
            let (alg, sig) = rest.split_at_checked(usize::from(alg_len)).ok_or(failed.clone())?;
            let scheme = scheme_from_algorithm_identifier(alg)
                .ok_or(Error::Unsupported { what: "RFC 7427 signature algorithm", value: 0 })?
                .on_curve_of(pk.kind);
            verify_signature(scheme, pk, &octets, sig).map_err(|e| match e {
                Error::AuthenticationFailed { .. } => failed.clone(),
                e => e,
            })?;
            Ok(AuthVerified { method: m, scheme: Some(scheme) })
        }
        _ => Err(Error::Unsupported { what: "Auth Method for this credential", value: u16::from(method) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_to_fixed_pads_short_integers() {
        let der_sig = [0x30, 0x08, 0x02, 0x02, 0x00, 0x80, 0x02, 0x02, 0x01, 0x02];
        let f = ecdsa_der_to_fixed(&der_sig, 4).unwrap();
        assert_eq!(f, [0, 0, 0, 0x80, 0, 0, 1, 2]);
        assert!(ecdsa_der_to_fixed(&der_sig[..9], 4).is_err());
    }

    #[test]
    fn ecdsa_keys_pass_their_pairwise_check_and_sign_both_encodings() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P384_SHA384_ASN1_SIGNING, &rng).unwrap();
        let s = Secret::load(SecretKind::EcdsaP384PrivateKey, pkcs8.as_ref(), &rng).unwrap();
        let pk = s.public_key().unwrap();
        let sig = s.sign(SignatureScheme::EcdsaP384Sha384, &rng, b"m").unwrap();
        verify_signature(SignatureScheme::EcdsaP384Sha384, &pk, b"m", &sig).unwrap();
        let fixed = ecdsa_der_to_fixed(&sig, 48).unwrap();
        assert_eq!(verify_ecdsa_fixed(&pk, b"m", &fixed), Ok(AuthMethod::EcdsaSha384P384));
        assert!(Secret::load(SecretKind::EcdsaP256PrivateKey, pkcs8.as_ref(), &rng).is_err());
    }
}
