//! How a side authenticates, in swanctl's words (`auth = "psk"`, `"pubkey"`, `"rsa/pss-sha384"`,
//! ...), and which signature that means: the one we make (RFC 7427 when the peer announced
//! SIGNATURE_HASH_ALGORITHMS, RFC 4754 ECDSA otherwise) and the ones we accept.

use enclave::{AuthMethod, AuthSpec, AuthVerified, PublicKeyKind, SignatureScheme};

/// A hash function of RFC 7427 signatures (IANA "IKEv2 Hash Algorithms").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashAlgorithm {
    /// SHA2-256, 2.
    Sha256,
    /// SHA2-384, 3.
    Sha384,
    /// SHA2-512, 4.
    Sha512,
}

impl HashAlgorithm {
    /// All of them, in our order of preference.
    pub const ALL: [Self; 3] = [Self::Sha256, Self::Sha384, Self::Sha512];

    /// The IANA value in SIGNATURE_HASH_ALGORITHMS.
    pub const fn id(self) -> u16 {
        match self {
            Self::Sha256 => 2,
            Self::Sha384 => 3,
            Self::Sha512 => 4,
        }
    }

    /// The hash for an IANA value, if we sign or verify with it.
    pub const fn from_id(id: u16) -> Option<Self> {
        match id {
            2 => Some(Self::Sha256),
            3 => Some(Self::Sha384),
            4 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The hash a signature scheme uses.
    pub fn of(scheme: SignatureScheme) -> Option<Self> {
        use SignatureScheme as S;
        match scheme {
            S::RsaPkcs1Sha256 | S::RsaPssSha256 | S::EcdsaP256Sha256 | S::EcdsaP384Sha256 => {
                Some(Self::Sha256)
            }
            S::RsaPkcs1Sha384 | S::RsaPssSha384 | S::EcdsaP384Sha384 | S::EcdsaP256Sha384 => {
                Some(Self::Sha384)
            }
            S::RsaPkcs1Sha512 | S::RsaPssSha512 | S::EcdsaP256Sha512 | S::EcdsaP384Sha512 => {
                Some(Self::Sha512)
            }
        }
    }

    fn rsa(self, pss: bool) -> SignatureScheme {
        use SignatureScheme as S;
        match (self, pss) {
            (Self::Sha256, false) => S::RsaPkcs1Sha256,
            (Self::Sha384, false) => S::RsaPkcs1Sha384,
            (Self::Sha512, false) => S::RsaPkcs1Sha512,
            (Self::Sha256, true) => S::RsaPssSha256,
            (Self::Sha384, true) => S::RsaPssSha384,
            (Self::Sha512, true) => S::RsaPssSha512,
        }
    }
}

/// The hash algorithms a peer announced in N(SIGNATURE_HASH_ALGORITHMS) (RFC 7427 §4), of
/// those we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerHashes(u8);

impl PeerHashes {
    /// Reads the notify's data: two octets per hash; unknown values are skipped.
    pub fn from_notify(data: &[u8]) -> Self {
        let mut set = 0u8;
        for pair in data.chunks_exact(2) {
            let id = <[u8; 2]>::try_from(pair).map_or(0, u16::from_be_bytes);
            if let Some(h) = HashAlgorithm::from_id(id) {
                set |= Self::bit(h);
            }
        }
        Self(set)
    }

    /// Whether the peer announced `hash`.
    pub fn contains(self, hash: HashAlgorithm) -> bool {
        self.0 & Self::bit(hash) != 0
    }

    const fn bit(hash: HashAlgorithm) -> u8 {
        match hash {
            HashAlgorithm::Sha256 => 1,
            HashAlgorithm::Sha384 => 2,
            HashAlgorithm::Sha512 => 4,
        }
    }
}

/// Our N(SIGNATURE_HASH_ALGORITHMS) data: every hash we verify with.
pub(crate) fn our_hashes_notify() -> Vec<u8> {
    HashAlgorithm::ALL.iter().flat_map(|h| h.id().to_be_bytes()).collect()
}

/// Which keys and paddings a signature policy means (swanctl's keyword before the hashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignatureFamily {
    /// `pubkey`: any key; we sign RSA with PKCS#1 v1.5, as strongSwan does by default.
    Pubkey,
    /// `rsa`: RSA keys, RSASSA-PKCS1-v1_5.
    Rsa,
    /// `rsa/pss`: RSA keys, RSASSA-PSS.
    RsaPss,
    /// `ecdsa`: ECDSA keys.
    Ecdsa,
}

/// A public-key authentication policy: key family and, optionally, the hashes allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SignaturePolicy {
    /// Which keys and paddings.
    pub family: SignatureFamily,
    /// The hashes allowed, in order of preference; empty allows all three.
    pub hashes: Vec<HashAlgorithm>,
}

/// How one side authenticates (swanctl's `local.auth` / `remote.auth`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AuthPolicy {
    /// `psk`: Shared Key MIC with a pre-shared key.
    Psk,
    /// `pubkey`, `rsa`, `rsa/pss`, `ecdsa`, each optionally followed by `-sha256`, `-sha384`,
    /// `-sha512` (one or more): signatures with a certified key.
    Signature(SignaturePolicy),
}

impl AuthPolicy {
    /// Parses swanctl's `auth` value.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let text = text.trim();
        if text == "psk" {
            return Ok(Self::Psk);
        }
        let mut parts = text.split('-');
        let family =
            match parts.next().unwrap_or_default() {
                "pubkey" => SignatureFamily::Pubkey,
                "rsa" => SignatureFamily::Rsa,
                "rsa/pss" => SignatureFamily::RsaPss,
                "ecdsa" => SignatureFamily::Ecdsa,
                "eap" | "xauth" | "ed25519" | "ed448" | "bliss" => {
                    return Err("this authentication method is not supported (use psk or pubkey)")
                }
                _ => return Err(
                    "unknown auth (psk, pubkey, rsa, rsa/pss or ecdsa, optionally -sha256/-sha384/-sha512)",
                ),
            };
        let mut hashes = Vec::new();
        for h in parts {
            let hash = match h {
                "sha256" | "sha2_256" => HashAlgorithm::Sha256,
                "sha384" | "sha2_384" => HashAlgorithm::Sha384,
                "sha512" | "sha2_512" => HashAlgorithm::Sha512,
                "sha1" | "md5" | "identity" => {
                    return Err("only sha256, sha384 and sha512 signatures are supported")
                }
                _ => return Err("unknown hash (sha256, sha384 or sha512)"),
            };
            if !hashes.contains(&hash) {
                hashes.push(hash);
            }
        }
        Ok(Self::Signature(SignaturePolicy { family, hashes }))
    }

    /// Whether this is public-key authentication.
    pub fn is_signature(&self) -> bool {
        matches!(self, Self::Signature(_))
    }
}

impl SignaturePolicy {
    /// Why a key of `kind` cannot sign under this policy, if it cannot.
    pub(crate) fn check_key(&self, kind: PublicKeyKind) -> Result<(), &'static str> {
        let rsa = kind == PublicKeyKind::Rsa;
        match self.family {
            SignatureFamily::Rsa | SignatureFamily::RsaPss if !rsa => {
                return Err("rsa and rsa/pss need an RSA certificate and key")
            }
            SignatureFamily::Ecdsa if rsa => return Err("ecdsa needs an ECDSA certificate and key"),
            _ => {}
        }
        if let Some(curve) = curve_hash(kind) {
            if !self.hashes.is_empty() && !self.hashes.contains(&curve) {
                return Err("an ECDSA key signs with its curve's hash (P-256: sha256, P-384: sha384)");
            }
        }
        Ok(())
    }

    /// The AUTH we make with a key of `kind`: RFC 7427 with the first of our hashes the peer
    /// announced (RFC 7427 §4); for ECDSA, RFC 4754's method 9 or 10 when the peer announced
    /// no SIGNATURE_HASH_ALGORITHMS or not the curve's hash. RSA always uses RFC 7427: the
    /// enclave has no SHA-1 signatures for method 1.
    pub(crate) fn local_spec(&self, kind: PublicKeyKind, peer: Option<PeerHashes>) -> AuthSpec {
        if let Some(curve) = curve_hash(kind) {
            return match (peer, curve) {
                (Some(p), HashAlgorithm::Sha256) if p.contains(curve) => {
                    AuthSpec::DigitalSignature(SignatureScheme::EcdsaP256Sha256)
                }
                (Some(p), _) if p.contains(curve) => {
                    AuthSpec::DigitalSignature(SignatureScheme::EcdsaP384Sha384)
                }
                _ => AuthSpec::Ecdsa,
            };
        }
        let ours: &[HashAlgorithm] = if self.hashes.is_empty() { &HashAlgorithm::ALL } else { &self.hashes };
        let first = ours.first().copied().unwrap_or(HashAlgorithm::Sha256);
        let hash = match peer {
            Some(p) => ours.iter().copied().find(|h| p.contains(*h)).unwrap_or(first),
            None => first,
        };
        AuthSpec::DigitalSignature(hash.rsa(self.family == SignatureFamily::RsaPss))
    }

    /// Whether the peer's AUTH, verified with its certificate's key of `kind`, is one this
    /// policy accepts.
    pub(crate) fn accepts(&self, kind: PublicKeyKind, verified: &AuthVerified) -> bool {
        let rsa = kind == PublicKeyKind::Rsa;
        let family_ok = match self.family {
            SignatureFamily::Pubkey => true,
            SignatureFamily::Rsa | SignatureFamily::RsaPss => rsa,
            SignatureFamily::Ecdsa => !rsa,
        };
        let hash = match (verified.method, verified.scheme) {
            (AuthMethod::DigitalSignature, Some(scheme)) => {
                use SignatureScheme as S;
                let pss = matches!(scheme, S::RsaPssSha256 | S::RsaPssSha384 | S::RsaPssSha512);
                let pkcs1 = matches!(scheme, S::RsaPkcs1Sha256 | S::RsaPkcs1Sha384 | S::RsaPkcs1Sha512);
                let padding_ok = match self.family {
                    SignatureFamily::Rsa => pkcs1,
                    SignatureFamily::RsaPss => pss,
                    SignatureFamily::Pubkey | SignatureFamily::Ecdsa => true,
                };
                if !padding_ok {
                    return false;
                }
                HashAlgorithm::of(scheme)
            }
            (AuthMethod::EcdsaSha256P256, _) => Some(HashAlgorithm::Sha256),
            (AuthMethod::EcdsaSha384P384, _) => Some(HashAlgorithm::Sha384),
            _ => None,
        };
        family_ok && hash.is_some_and(|h| self.hashes.is_empty() || self.hashes.contains(&h))
    }
}

/// The hash an ECDSA key's curve goes with; `None` for RSA.
fn curve_hash(kind: PublicKeyKind) -> Option<HashAlgorithm> {
    match kind {
        PublicKeyKind::EcdsaP256 => Some(HashAlgorithm::Sha256),
        PublicKeyKind::EcdsaP384 => Some(HashAlgorithm::Sha384),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SignatureScheme as S;

    fn policy(text: &str) -> SignaturePolicy {
        match AuthPolicy::parse(text).unwrap() {
            AuthPolicy::Signature(p) => p,
            AuthPolicy::Psk => panic!("{text}"),
        }
    }

    #[test]
    fn auth_values_parse_like_swanctl() {
        assert_eq!(AuthPolicy::parse("psk"), Ok(AuthPolicy::Psk));
        assert_eq!(policy("pubkey"), SignaturePolicy { family: SignatureFamily::Pubkey, hashes: vec![] });
        assert_eq!(
            policy("rsa/pss-sha384-sha256"),
            SignaturePolicy {
                family: SignatureFamily::RsaPss,
                hashes: vec![HashAlgorithm::Sha384, HashAlgorithm::Sha256]
            }
        );
        assert_eq!(policy("ecdsa-sha2_384").hashes, vec![HashAlgorithm::Sha384]);
        for bad in ["pubkey-sha1", "eap-mschapv2", "rsa/pss-", "cert", "pubkey-sha999", ""] {
            assert!(AuthPolicy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn we_sign_with_the_first_hash_the_peer_announced() {
        let all = PeerHashes::from_notify(&our_hashes_notify());
        let only_512 = PeerHashes::from_notify(&[0, 1, 0, 4, 0x99, 0x99]);
        let rsa = PublicKeyKind::Rsa;
        assert_eq!(
            policy("pubkey").local_spec(rsa, Some(all)),
            AuthSpec::DigitalSignature(S::RsaPkcs1Sha256)
        );
        assert_eq!(
            policy("pubkey").local_spec(rsa, Some(only_512)),
            AuthSpec::DigitalSignature(S::RsaPkcs1Sha512)
        );
        assert_eq!(policy("pubkey").local_spec(rsa, None), AuthSpec::DigitalSignature(S::RsaPkcs1Sha256));
        assert_eq!(
            policy("rsa/pss-sha384").local_spec(rsa, Some(all)),
            AuthSpec::DigitalSignature(S::RsaPssSha384)
        );
        let p256 = PublicKeyKind::EcdsaP256;
        assert_eq!(
            policy("pubkey").local_spec(p256, Some(all)),
            AuthSpec::DigitalSignature(S::EcdsaP256Sha256)
        );
        assert_eq!(policy("pubkey").local_spec(p256, None), AuthSpec::Ecdsa, "RFC 4754 without the notify");
        assert_eq!(policy("ecdsa").local_spec(PublicKeyKind::EcdsaP384, Some(only_512)), AuthSpec::Ecdsa);
    }

    #[test]
    fn policies_check_keys_and_accept_only_their_schemes() {
        assert!(policy("rsa").check_key(PublicKeyKind::EcdsaP256).is_err());
        assert!(policy("ecdsa").check_key(PublicKeyKind::Rsa).is_err());
        assert!(policy("pubkey-sha384").check_key(PublicKeyKind::EcdsaP256).is_err());
        assert!(policy("pubkey-sha256").check_key(PublicKeyKind::EcdsaP256).is_ok());
        let ds = |s| AuthVerified { method: AuthMethod::DigitalSignature, scheme: Some(s) };
        let rsa = PublicKeyKind::Rsa;
        assert!(policy("pubkey").accepts(rsa, &ds(S::RsaPssSha512)));
        assert!(policy("rsa").accepts(rsa, &ds(S::RsaPkcs1Sha256)));
        assert!(!policy("rsa").accepts(rsa, &ds(S::RsaPssSha256)));
        assert!(!policy("rsa/pss").accepts(rsa, &ds(S::RsaPkcs1Sha256)));
        assert!(!policy("pubkey-sha384").accepts(rsa, &ds(S::RsaPkcs1Sha256)));
        // An ECDSA key may sign with any announced hash (libreswan signs P-256 with SHA-512).
        let p256 = PublicKeyKind::EcdsaP256;
        assert!(policy("ecdsa").accepts(p256, &ds(S::EcdsaP256Sha512)));
        assert!(policy("ecdsa-sha512").accepts(p256, &ds(S::EcdsaP256Sha512)));
        assert!(!policy("ecdsa-sha256").accepts(p256, &ds(S::EcdsaP256Sha512)));
        assert!(policy("pubkey-sha256").accepts(PublicKeyKind::EcdsaP384, &ds(S::EcdsaP384Sha256)));
        let classic = AuthVerified { method: AuthMethod::EcdsaSha256P256, scheme: None };
        assert!(policy("ecdsa").accepts(PublicKeyKind::EcdsaP256, &classic));
        assert!(!policy("rsa").accepts(PublicKeyKind::EcdsaP256, &classic));
        let psk = AuthVerified { method: AuthMethod::SharedKey, scheme: None };
        assert!(!policy("pubkey").accepts(rsa, &psk));
    }
}
