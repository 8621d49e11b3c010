//! Algorithm identifiers, with their IANA IKEv2 numbers and the sizes they imply.
//!
//! Everything here is public knowledge (it is negotiated in the clear), so the untrusted side
//! uses these types freely, e.g. to lay out an SK payload or an ESP packet before the enclave
//! fills it ([`Suite::sk_layout`], [`Suite::esp_overhead`]).

/// Key exchange methods (IKEv2 Transform Types 4 and, RFC 9370, 6..=12): Diffie-Hellman
/// groups and the ML-KEM key encapsulation mechanisms (FIPS 203).
///
/// A DH group's two public values have one length. A KEM's do not: the initiator sends an
/// encapsulation key ([`Self::public_len`]), the responder a ciphertext made to it
/// ([`Self::response_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DhGroup {
    /// 2048-bit MODP group (RFC 3526 §3), ID 14.
    Modp2048,
    /// 3072-bit MODP group (RFC 3526 §4), ID 15.
    Modp3072,
    /// NIST P-256 (RFC 5903), ID 19; public value x || y.
    EcpP256,
    /// NIST P-384 (RFC 5903), ID 20; public value x || y.
    EcpP384,
    /// Curve25519 (RFC 8031), ID 31.
    Curve25519,
    /// ML-KEM-768 (FIPS 203; draft-ietf-ipsecme-ikev2-mlkem), ID 36.
    MlKem768,
    /// ML-KEM-1024 (FIPS 203; draft-ietf-ipsecme-ikev2-mlkem), ID 37.
    MlKem1024,
}

impl DhGroup {
    /// The IANA transform ID.
    pub const fn id(self) -> u16 {
        match self {
            Self::Modp2048 => 14,
            Self::Modp3072 => 15,
            Self::EcpP256 => 19,
            Self::EcpP384 => 20,
            Self::Curve25519 => 31,
            Self::MlKem768 => 36,
            Self::MlKem1024 => 37,
        }
    }

    /// The group for an IANA transform ID, if this enclave implements it.
    pub const fn from_id(id: u16) -> Option<Self> {
        match id {
            14 => Some(Self::Modp2048),
            15 => Some(Self::Modp3072),
            19 => Some(Self::EcpP256),
            20 => Some(Self::EcpP384),
            31 => Some(Self::Curve25519),
            36 => Some(Self::MlKem768),
            37 => Some(Self::MlKem1024),
            _ => None,
        }
    }

    /// Length of the initiator's Key Exchange Data in bytes: the public value, or a KEM's
    /// encapsulation key.
    pub const fn public_len(self) -> usize {
        match self {
            Self::Modp2048 => 256,
            Self::Modp3072 => 384,
            Self::EcpP256 => 64,
            Self::EcpP384 => 96,
            Self::Curve25519 => 32,
            Self::MlKem768 => 1184,
            Self::MlKem1024 => 1568,
        }
    }

    /// Length of the responder's Key Exchange Data in bytes: the public value, or a KEM's
    /// ciphertext.
    pub const fn response_len(self) -> usize {
        match self {
            Self::MlKem768 => 1088,
            Self::MlKem1024 => 1568,
            g => g.public_len(),
        }
    }

    /// Whether this is a KEM (the responder's value depends on the initiator's).
    pub const fn is_kem(self) -> bool {
        matches!(self, Self::MlKem768 | Self::MlKem1024)
    }

    /// Length of the shared secret g^ir in bytes.
    pub const fn shared_len(self) -> usize {
        match self {
            Self::Modp2048 => 256,
            Self::Modp3072 => 384,
            Self::EcpP256 => 32,
            Self::EcpP384 => 48,
            Self::Curve25519 => 32,
            Self::MlKem768 | Self::MlKem1024 => 32,
        }
    }
}

/// Pseudorandom functions (IKEv2 Transform Type 2, RFC 4868).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prf {
    /// PRF_HMAC_SHA2_256, ID 5.
    HmacSha256,
    /// PRF_HMAC_SHA2_384, ID 6.
    HmacSha384,
    /// PRF_HMAC_SHA2_512, ID 7.
    HmacSha512,
}

impl Prf {
    /// The IANA transform ID.
    pub const fn id(self) -> u16 {
        match self {
            Self::HmacSha256 => 5,
            Self::HmacSha384 => 6,
            Self::HmacSha512 => 7,
        }
    }

    /// The PRF for an IANA transform ID, if implemented.
    pub const fn from_id(id: u16) -> Option<Self> {
        match id {
            5 => Some(Self::HmacSha256),
            6 => Some(Self::HmacSha384),
            7 => Some(Self::HmacSha512),
            _ => None,
        }
    }

    /// Output length, which is also the preferred key length (SK_d, SK_pi, SK_pr).
    pub const fn output_len(self) -> usize {
        match self {
            Self::HmacSha256 => 32,
            Self::HmacSha384 => 48,
            Self::HmacSha512 => 64,
        }
    }
}

/// Integrity algorithms (IKEv2 Transform Type 3, RFC 4868), used with AES-CBC only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integ {
    /// AUTH_HMAC_SHA2_256_128, ID 12.
    HmacSha256_128,
    /// AUTH_HMAC_SHA2_384_192, ID 13.
    HmacSha384_192,
    /// AUTH_HMAC_SHA2_512_256, ID 14.
    HmacSha512_256,
}

impl Integ {
    /// The IANA transform ID.
    pub const fn id(self) -> u16 {
        match self {
            Self::HmacSha256_128 => 12,
            Self::HmacSha384_192 => 13,
            Self::HmacSha512_256 => 14,
        }
    }

    /// The algorithm for an IANA transform ID, if implemented.
    pub const fn from_id(id: u16) -> Option<Self> {
        match id {
            12 => Some(Self::HmacSha256_128),
            13 => Some(Self::HmacSha384_192),
            14 => Some(Self::HmacSha512_256),
            _ => None,
        }
    }

    /// Key length (SK_a, or the ESP integrity key) in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            Self::HmacSha256_128 => 32,
            Self::HmacSha384_192 => 48,
            Self::HmacSha512_256 => 64,
        }
    }

    /// Length of the truncated ICV in bytes.
    pub const fn icv_len(self) -> usize {
        match self {
            Self::HmacSha256_128 => 16,
            Self::HmacSha384_192 => 24,
            Self::HmacSha512_256 => 32,
        }
    }
}

/// Encryption algorithms (IKEv2 Transform Type 1) for both IKE SK payloads and ESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// ENCR_AES_CBC (ID 12), 128-bit key (RFC 3602); needs an [`Integ`].
    AesCbc128,
    /// ENCR_AES_CBC (ID 12), 256-bit key; needs an [`Integ`].
    AesCbc256,
    /// ENCR_AES_GCM_16 (ID 20), 128-bit key + 4-byte salt (RFC 4106, RFC 5282).
    AesGcm16_128,
    /// ENCR_AES_GCM_16 (ID 20), 256-bit key + 4-byte salt.
    AesGcm16_256,
    /// ENCR_CHACHA20_POLY1305 (ID 28), 256-bit key + 4-byte salt (RFC 7634).
    ChaCha20Poly1305,
}

impl Cipher {
    /// The IANA transform ID (the key length travels in a Key Length attribute).
    pub const fn id(self) -> u16 {
        match self {
            Self::AesCbc128 | Self::AesCbc256 => 12,
            Self::AesGcm16_128 | Self::AesGcm16_256 => 20,
            Self::ChaCha20Poly1305 => 28,
        }
    }

    /// The cipher for an IANA transform ID and Key Length attribute (in bits; 0 if absent).
    pub const fn from_id(id: u16, key_bits: u16) -> Option<Self> {
        match (id, key_bits) {
            (12, 128) => Some(Self::AesCbc128),
            (12, 256) => Some(Self::AesCbc256),
            (20, 128) => Some(Self::AesGcm16_128),
            (20, 256) => Some(Self::AesGcm16_256),
            (28, 0) => Some(Self::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// Whether this is an AEAD (no separate integrity algorithm).
    pub const fn is_aead(self) -> bool {
        !matches!(self, Self::AesCbc128 | Self::AesCbc256)
    }

    /// Key bytes taken from the key stream, salt included for the AEADs (RFC 4106 §8.1).
    pub const fn keymat_len(self) -> usize {
        match self {
            Self::AesCbc128 => 16,
            Self::AesCbc256 => 32,
            Self::AesGcm16_128 => 16 + 4,
            Self::AesGcm16_256 | Self::ChaCha20Poly1305 => 32 + 4,
        }
    }

    /// Length of the explicit IV carried in each message or packet.
    pub const fn iv_len(self) -> usize {
        if self.is_aead() {
            8
        } else {
            16
        }
    }

    /// The ciphertext must be a multiple of this (CBC block; the AEADs are stream-like).
    pub const fn block_len(self) -> usize {
        if self.is_aead() {
            1
        } else {
            16
        }
    }
}

/// A cipher with its integrity algorithm: AEADs take none, AES-CBC needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Suite {
    /// The encryption algorithm.
    pub cipher: Cipher,
    /// The integrity algorithm; `None` exactly when `cipher` is an AEAD.
    pub integ: Option<Integ>,
}

/// Where the parts of an SK payload's body go (RFC 7296 §3.14), for a given inner length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkLayout {
    /// Bytes of IV right after the SK payload header.
    pub iv_len: usize,
    /// Bytes after the inner payloads: padding plus the Pad Length octet.
    pub pad_len: usize,
    /// Bytes of Integrity Checksum Data at the end.
    pub icv_len: usize,
}

impl SkLayout {
    /// The SK payload body length (IV .. ICV) for `plaintext_len` bytes of inner payloads.
    pub const fn body_len(&self, plaintext_len: usize) -> usize {
        self.iv_len + plaintext_len + self.pad_len + self.icv_len
    }
}

impl Suite {
    /// An AEAD suite.
    pub const fn aead(cipher: Cipher) -> Self {
        Self { cipher, integ: None }
    }

    /// AES-CBC with an HMAC.
    pub const fn cbc(cipher: Cipher, integ: Integ) -> Self {
        Self { cipher, integ: Some(integ) }
    }

    /// Whether the combination is valid (an AEAD without integrity, CBC with one).
    pub const fn is_consistent(&self) -> bool {
        self.cipher.is_aead() == self.integ.is_none()
    }

    /// Length of the ICV: the AEAD tag (16) or the truncated HMAC.
    pub const fn icv_len(&self) -> usize {
        match self.integ {
            Some(i) => i.icv_len(),
            None => 16,
        }
    }

    /// Integrity key bytes taken from the key stream (0 for AEADs).
    pub const fn integ_key_len(&self) -> usize {
        match self.integ {
            Some(i) => i.key_len(),
            None => 0,
        }
    }

    /// The SK payload layout for `plaintext_len` bytes of inner payloads, with the least
    /// padding allowed (none for AEADs; up to the next 16-byte boundary for CBC).
    pub const fn sk_layout(&self, plaintext_len: usize) -> SkLayout {
        let block = self.cipher.block_len();
        // Pad Length octet plus padding up to the block size.
        let rem = (plaintext_len + 1) % block;
        let pad_len = if rem == 0 { 1 } else { 1 + block - rem };
        SkLayout { iv_len: self.cipher.iv_len(), pad_len, icv_len: self.icv_len() }
    }

    /// ESP bytes around the payload: (header + IV before it, ICV after it).
    pub const fn esp_overhead(&self) -> (usize, usize) {
        (8 + self.cipher.iv_len(), self.icv_len())
    }

    /// The alignment the ESP payload (inner packet + padding + pad length + next header)
    /// must have: the CBC block or 4 bytes (RFC 4303 §2.4). Always a power of two, which the
    /// data path relies on to round with a mask.
    pub const fn esp_payload_align(&self) -> usize {
        if self.cipher.is_aead() {
            4
        } else {
            16
        }
    }
}

/// Who sent the first message of an exchange: decides key order (RFC 7296 §2.14, §2.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// This side sent the request (IKE_SA_INIT or CREATE_CHILD_SA).
    Initiator,
    /// This side answered it.
    Responder,
}

/// The Auth Method field of an AUTH payload (RFC 7296 §3.8, RFC 4754, RFC 7427).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthMethod {
    /// Shared Key Message Integrity Code, 2.
    SharedKey,
    /// ECDSA with SHA-256 on P-256, 9 (RFC 4754: r || s, fixed length).
    EcdsaSha256P256,
    /// ECDSA with SHA-384 on P-384, 10 (RFC 4754).
    EcdsaSha384P384,
    /// Digital Signature, 14 (RFC 7427: AlgorithmIdentifier inside the AUTH data).
    DigitalSignature,
}

impl AuthMethod {
    /// The IANA value.
    pub const fn id(self) -> u8 {
        match self {
            Self::SharedKey => 2,
            Self::EcdsaSha256P256 => 9,
            Self::EcdsaSha384P384 => 10,
            Self::DigitalSignature => 14,
        }
    }

    /// The method for an IANA value, if implemented.
    pub const fn from_id(id: u8) -> Option<Self> {
        match id {
            2 => Some(Self::SharedKey),
            9 => Some(Self::EcdsaSha256P256),
            10 => Some(Self::EcdsaSha384P384),
            14 => Some(Self::DigitalSignature),
            _ => None,
        }
    }
}

/// Signature algorithms for RFC 7427 Digital Signature authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignatureScheme {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RsaPkcs1Sha256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RsaPkcs1Sha384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RsaPkcs1Sha512,
    /// RSASSA-PSS with SHA-256, MGF1-SHA-256, 32-byte salt.
    RsaPssSha256,
    /// RSASSA-PSS with SHA-384, MGF1-SHA-384, 48-byte salt.
    RsaPssSha384,
    /// RSASSA-PSS with SHA-512, MGF1-SHA-512, 64-byte salt.
    RsaPssSha512,
    /// ECDSA on P-256 with SHA-256 (DER signature).
    EcdsaP256Sha256,
    /// ECDSA on P-384 with SHA-384 (DER signature).
    EcdsaP384Sha384,
    /// ECDSA on P-256 with SHA-384 (DER signature; verified, never made).
    EcdsaP256Sha384,
    /// ECDSA on P-256 with SHA-512 (DER signature; verified, never made).
    EcdsaP256Sha512,
    /// ECDSA on P-384 with SHA-256 (DER signature; verified, never made).
    EcdsaP384Sha256,
    /// ECDSA on P-384 with SHA-512 (DER signature; verified, never made).
    EcdsaP384Sha512,
}

impl SignatureScheme {
    /// For an ECDSA scheme, the scheme with the same hash on the curve of `key`; any other
    /// scheme unchanged. RFC 7427's AlgorithmIdentifier names the hash, the key the curve.
    pub fn on_curve_of(self, key: super::ike::PublicKeyKind) -> Self {
        use SignatureScheme as S;
        let hash = match self {
            S::EcdsaP256Sha256 | S::EcdsaP384Sha256 => 256,
            S::EcdsaP256Sha384 | S::EcdsaP384Sha384 => 384,
            S::EcdsaP256Sha512 | S::EcdsaP384Sha512 => 512,
            other => return other,
        };
        match (key, hash) {
            (super::ike::PublicKeyKind::EcdsaP384, 256) => S::EcdsaP384Sha256,
            (super::ike::PublicKeyKind::EcdsaP384, 384) => S::EcdsaP384Sha384,
            (super::ike::PublicKeyKind::EcdsaP384, _) => S::EcdsaP384Sha512,
            (_, 256) => S::EcdsaP256Sha256,
            (_, 384) => S::EcdsaP256Sha384,
            _ => S::EcdsaP256Sha512,
        }
    }
}

/// What a provisioned secret is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// A pre-shared key for Shared Key MIC authentication.
    PreSharedKey,
    /// An RSA private key (2048..8192 bits).
    RsaPrivateKey,
    /// An ECDSA P-256 private key.
    EcdsaP256PrivateKey,
    /// An ECDSA P-384 private key.
    EcdsaP384PrivateKey,
    /// One direction of a static ESP SA's keys, bound to its SPI and transform
    /// (`cloister_attest::provision::esp_sa_keys`); installed by [`crate::Enclave::esp_sa_install_wrapped`],
    /// never kept as a secret.
    EspSaKeys,
}

impl SecretKind {
    /// The kind octet of the provisioning blob format (see [`crate::provision`]).
    pub const fn code(self) -> u8 {
        match self {
            Self::PreSharedKey => 1,
            Self::RsaPrivateKey => 2,
            Self::EcdsaP256PrivateKey => 3,
            Self::EcdsaP384PrivateKey => 4,
            Self::EspSaKeys => 5,
        }
    }

    /// The kind for a blob's kind octet.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::PreSharedKey),
            2 => Some(Self::RsaPrivateKey),
            3 => Some(Self::EcdsaP256PrivateKey),
            4 => Some(Self::EcdsaP384PrivateKey),
            5 => Some(Self::EspSaKeys),
            _ => None,
        }
    }
}

impl core::fmt::Display for SecretKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::PreSharedKey => "pre-shared key",
            Self::RsaPrivateKey => "RSA private key",
            Self::EcdsaP256PrivateKey => "ECDSA P-256 private key",
            Self::EcdsaP384PrivateKey => "ECDSA P-384 private key",
            Self::EspSaKeys => "set of ESP SA keys",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sk_layout_pads_cbc_to_the_block_and_aead_not_at_all() {
        let cbc = Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128);
        assert_eq!(cbc.sk_layout(15).pad_len, 1);
        assert_eq!(cbc.sk_layout(16).pad_len, 16);
        assert_eq!(cbc.sk_layout(0).pad_len, 16);
        assert_eq!(cbc.sk_layout(16).body_len(16), 16 + 16 + 16 + 16);
        let gcm = Suite::aead(Cipher::AesGcm16_256);
        assert_eq!(gcm.sk_layout(13).pad_len, 1);
        assert_eq!(gcm.sk_layout(13).body_len(13), 8 + 13 + 1 + 16);
    }

    #[test]
    fn ids_round_trip() {
        for g in [
            DhGroup::Modp2048,
            DhGroup::Modp3072,
            DhGroup::EcpP256,
            DhGroup::EcpP384,
            DhGroup::Curve25519,
            DhGroup::MlKem768,
            DhGroup::MlKem1024,
        ] {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
        }
        assert_eq!(Cipher::from_id(20, 256), Some(Cipher::AesGcm16_256));
        assert_eq!(Integ::from_id(13), Some(Integ::HmacSha384_192));
        assert!(!Suite::aead(Cipher::AesCbc128).is_consistent());
        assert!(!Suite::cbc(Cipher::AesGcm16_128, Integ::HmacSha256_128).is_consistent());
    }
}
