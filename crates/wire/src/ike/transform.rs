//! Transform registries and the transform substructure's typed parts (RFC 7296 §3.3.2,
//! §3.3.5): which algorithm a transform names, and its attributes.

use super::macros::registry;
use super::reader::Reader;
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// Transform types of a proposal (RFC 7296 §3.3.2, RFC 9370 for the additional key
    /// exchanges).
    pub struct TransformType(u8) {
        /// ENCR (1): Encryption algorithm (IKE, ESP).
        ENCR = 0x01,
        /// PRF (2): Pseudorandom function (IKE).
        PRF = 0x02,
        /// INTEG (3): Integrity algorithm (IKE, AH, optional in ESP).
        INTEG = 0x03,
        /// KE (4): Key exchange method, formerly Diffie-Hellman group (IKE, optional in AH/ESP).
        KE = 0x04,
        /// ESN (5): Extended sequence numbers (AH, ESP).
        ESN = 0x05,
        /// ADDKE1 (6): Additional key exchange 1 (RFC 9370).
        ADDKE1 = 0x06,
        /// ADDKE2 (7): Additional key exchange 2 (RFC 9370).
        ADDKE2 = 0x07,
        /// ADDKE3 (8): Additional key exchange 3 (RFC 9370).
        ADDKE3 = 0x08,
        /// ADDKE4 (9): Additional key exchange 4 (RFC 9370).
        ADDKE4 = 0x09,
        /// ADDKE5 (10): Additional key exchange 5 (RFC 9370).
        ADDKE5 = 0x0a,
        /// ADDKE6 (11): Additional key exchange 6 (RFC 9370).
        ADDKE6 = 0x0b,
        /// ADDKE7 (12): Additional key exchange 7 (RFC 9370).
        ADDKE7 = 0x0c,
    }
}

registry! {
    /// Transform IDs of type ENCR (RFC 7296 §3.3.2, IANA "Transform Type 1").
    pub struct EncrId(u16) {
        /// DES_IV64 (1): DES with a 64-bit IV (RFC 1827); obsolete.
        DES_IV64 = 0x0001,
        /// DES (2): DES-CBC (RFC 2405); obsolete.
        DES = 0x0002,
        /// TRIPLE_DES (3): 3DES-CBC (RFC 2451).
        TRIPLE_DES = 0x0003,
        /// RC5 (4): RC5 (RFC 2451).
        RC5 = 0x0004,
        /// IDEA (5): IDEA (RFC 2451).
        IDEA = 0x0005,
        /// CAST (6): CAST (RFC 2451).
        CAST = 0x0006,
        /// BLOWFISH (7): Blowfish (RFC 2451).
        BLOWFISH = 0x0007,
        /// TRIPLE_IDEA (8): 3IDEA (RFC 2451).
        TRIPLE_IDEA = 0x0008,
        /// DES_IV32 (9): DES with a 32-bit IV; obsolete.
        DES_IV32 = 0x0009,
        /// NULL (11): No encryption (RFC 2410), ESP only.
        NULL = 0x000b,
        /// AES_CBC (12): AES-CBC (RFC 3602), with a Key Length attribute.
        AES_CBC = 0x000c,
        /// AES_CTR (13): AES-CTR (RFC 3686).
        AES_CTR = 0x000d,
        /// AES_CCM_8 (14): AES-CCM with an 8-octet ICV (RFC 4309).
        AES_CCM_8 = 0x000e,
        /// AES_CCM_12 (15): AES-CCM with a 12-octet ICV (RFC 4309).
        AES_CCM_12 = 0x000f,
        /// AES_CCM_16 (16): AES-CCM with a 16-octet ICV (RFC 4309).
        AES_CCM_16 = 0x0010,
        /// AES_GCM_8 (18): AES-GCM with an 8-octet ICV (RFC 4106).
        AES_GCM_8 = 0x0012,
        /// AES_GCM_12 (19): AES-GCM with a 12-octet ICV (RFC 4106).
        AES_GCM_12 = 0x0013,
        /// AES_GCM_16 (20): AES-GCM with a 16-octet ICV (RFC 4106, RFC 5282 for IKE).
        AES_GCM_16 = 0x0014,
        /// NULL_AUTH_AES_GMAC (21): AES-GMAC, authentication only (RFC 4543).
        NULL_AUTH_AES_GMAC = 0x0015,
        /// CAMELLIA_CBC (23): Camellia-CBC (RFC 5529).
        CAMELLIA_CBC = 0x0017,
        /// CAMELLIA_CTR (24): Camellia-CTR (RFC 5529).
        CAMELLIA_CTR = 0x0018,
        /// CAMELLIA_CCM_8 (25): Camellia-CCM with an 8-octet ICV (RFC 5529).
        CAMELLIA_CCM_8 = 0x0019,
        /// CAMELLIA_CCM_12 (26): Camellia-CCM with a 12-octet ICV (RFC 5529).
        CAMELLIA_CCM_12 = 0x001a,
        /// CAMELLIA_CCM_16 (27): Camellia-CCM with a 16-octet ICV (RFC 5529).
        CAMELLIA_CCM_16 = 0x001b,
        /// CHACHA20_POLY1305 (28): ChaCha20-Poly1305 (RFC 7634).
        CHACHA20_POLY1305 = 0x001c,
        /// AES_CCM_8_IIV (29): AES-CCM-8 with implicit IV (RFC 8750), ESP only.
        AES_CCM_8_IIV = 0x001d,
        /// AES_GCM_16_IIV (30): AES-GCM-16 with implicit IV (RFC 8750), ESP only.
        AES_GCM_16_IIV = 0x001e,
        /// CHACHA20_POLY1305_IIV (31): ChaCha20-Poly1305 with implicit IV (RFC 8750), ESP only.
        CHACHA20_POLY1305_IIV = 0x001f,
    }
}

registry! {
    /// Transform IDs of type PRF (RFC 7296 §3.3.2, IANA "Transform Type 2").
    pub struct PrfId(u16) {
        /// HMAC_MD5 (1): HMAC-MD5 (RFC 2104).
        HMAC_MD5 = 0x0001,
        /// HMAC_SHA1 (2): HMAC-SHA1 (RFC 2104).
        HMAC_SHA1 = 0x0002,
        /// HMAC_TIGER (3): HMAC-Tiger.
        HMAC_TIGER = 0x0003,
        /// AES128_XCBC (4): AES-XCBC-PRF-128 (RFC 4434).
        AES128_XCBC = 0x0004,
        /// HMAC_SHA2_256 (5): HMAC-SHA-256 (RFC 4868).
        HMAC_SHA2_256 = 0x0005,
        /// HMAC_SHA2_384 (6): HMAC-SHA-384 (RFC 4868).
        HMAC_SHA2_384 = 0x0006,
        /// HMAC_SHA2_512 (7): HMAC-SHA-512 (RFC 4868).
        HMAC_SHA2_512 = 0x0007,
        /// AES128_CMAC (8): AES-CMAC-PRF-128 (RFC 4615).
        AES128_CMAC = 0x0008,
        /// HMAC_STREEBOG_512 (9): HMAC-Streebog-512 (RFC 9385).
        HMAC_STREEBOG_512 = 0x0009,
    }
}

registry! {
    /// Transform IDs of type INTEG (RFC 7296 §3.3.2, IANA "Transform Type 3").
    pub struct IntegId(u16) {
        /// NONE (0): No integrity algorithm: with AEAD ciphers, or absent.
        NONE = 0x0000,
        /// HMAC_MD5_96 (1): HMAC-MD5-96 (RFC 2403).
        HMAC_MD5_96 = 0x0001,
        /// HMAC_SHA1_96 (2): HMAC-SHA1-96 (RFC 2404).
        HMAC_SHA1_96 = 0x0002,
        /// DES_MAC (3): DES-MAC.
        DES_MAC = 0x0003,
        /// KPDK_MD5 (4): KPDK-MD5 (RFC 1826).
        KPDK_MD5 = 0x0004,
        /// AES_XCBC_96 (5): AES-XCBC-MAC-96 (RFC 3566).
        AES_XCBC_96 = 0x0005,
        /// HMAC_MD5_128 (6): HMAC-MD5-128 (RFC 4595).
        HMAC_MD5_128 = 0x0006,
        /// HMAC_SHA1_160 (7): HMAC-SHA1-160 (RFC 4595).
        HMAC_SHA1_160 = 0x0007,
        /// AES_CMAC_96 (8): AES-CMAC-96 (RFC 4494).
        AES_CMAC_96 = 0x0008,
        /// AES_128_GMAC (9): AES-128-GMAC (RFC 4543).
        AES_128_GMAC = 0x0009,
        /// AES_192_GMAC (10): AES-192-GMAC (RFC 4543).
        AES_192_GMAC = 0x000a,
        /// AES_256_GMAC (11): AES-256-GMAC (RFC 4543).
        AES_256_GMAC = 0x000b,
        /// HMAC_SHA2_256_128 (12): HMAC-SHA-256-128 (RFC 4868).
        HMAC_SHA2_256_128 = 0x000c,
        /// HMAC_SHA2_384_192 (13): HMAC-SHA-384-192 (RFC 4868).
        HMAC_SHA2_384_192 = 0x000d,
        /// HMAC_SHA2_512_256 (14): HMAC-SHA-512-256 (RFC 4868).
        HMAC_SHA2_512_256 = 0x000e,
    }
}

registry! {
    /// Key exchange methods, transform IDs of types KE and ADDKE1..7 (RFC 7296 §3.3.2,
    /// IANA "Transform Type 4"), also the group number of a KE payload (§3.4).
    pub struct DhGroup(u16) {
        /// NONE (0): No key exchange (ESP/AH proposals without PFS).
        NONE = 0x0000,
        /// MODP_768 (1): 768-bit MODP group (RFC 2409).
        MODP_768 = 0x0001,
        /// MODP_1024 (2): 1024-bit MODP group (RFC 2409).
        MODP_1024 = 0x0002,
        /// MODP_1536 (5): 1536-bit MODP group (RFC 3526).
        MODP_1536 = 0x0005,
        /// MODP_2048 (14): 2048-bit MODP group (RFC 3526).
        MODP_2048 = 0x000e,
        /// MODP_3072 (15): 3072-bit MODP group (RFC 3526).
        MODP_3072 = 0x000f,
        /// MODP_4096 (16): 4096-bit MODP group (RFC 3526).
        MODP_4096 = 0x0010,
        /// MODP_6144 (17): 6144-bit MODP group (RFC 3526).
        MODP_6144 = 0x0011,
        /// MODP_8192 (18): 8192-bit MODP group (RFC 3526).
        MODP_8192 = 0x0012,
        /// ECP_256 (19): 256-bit random ECP group, NIST P-256 (RFC 5903).
        ECP_256 = 0x0013,
        /// ECP_384 (20): 384-bit random ECP group, NIST P-384 (RFC 5903).
        ECP_384 = 0x0014,
        /// ECP_521 (21): 521-bit random ECP group, NIST P-521 (RFC 5903).
        ECP_521 = 0x0015,
        /// MODP_1024_160 (22): 1024-bit MODP group with 160-bit prime order subgroup (RFC 5114).
        MODP_1024_160 = 0x0016,
        /// MODP_2048_224 (23): 2048-bit MODP group with 224-bit prime order subgroup (RFC 5114).
        MODP_2048_224 = 0x0017,
        /// MODP_2048_256 (24): 2048-bit MODP group with 256-bit prime order subgroup (RFC 5114).
        MODP_2048_256 = 0x0018,
        /// ECP_192 (25): 192-bit random ECP group (RFC 5114).
        ECP_192 = 0x0019,
        /// ECP_224 (26): 224-bit random ECP group (RFC 5114).
        ECP_224 = 0x001a,
        /// BRAINPOOL_P224R1 (27): brainpoolP224r1 (RFC 6954).
        BRAINPOOL_P224R1 = 0x001b,
        /// BRAINPOOL_P256R1 (28): brainpoolP256r1 (RFC 6954).
        BRAINPOOL_P256R1 = 0x001c,
        /// BRAINPOOL_P384R1 (29): brainpoolP384r1 (RFC 6954).
        BRAINPOOL_P384R1 = 0x001d,
        /// BRAINPOOL_P512R1 (30): brainpoolP512r1 (RFC 6954).
        BRAINPOOL_P512R1 = 0x001e,
        /// CURVE25519 (31): Curve25519 (RFC 8031).
        CURVE25519 = 0x001f,
        /// CURVE448 (32): Curve448 (RFC 8031).
        CURVE448 = 0x0020,
        /// GOST3410_2012_256 (33): GOST3410-2012-256 (RFC 9385).
        GOST3410_2012_256 = 0x0021,
        /// GOST3410_2012_512 (34): GOST3410-2012-512 (RFC 9385).
        GOST3410_2012_512 = 0x0022,
        /// ML_KEM_512 (35): ML-KEM-512 (draft-ietf-ipsecme-ikev2-mlkem).
        ML_KEM_512 = 0x0023,
        /// ML_KEM_768 (36): ML-KEM-768 (draft-ietf-ipsecme-ikev2-mlkem).
        ML_KEM_768 = 0x0024,
        /// ML_KEM_1024 (37): ML-KEM-1024 (draft-ietf-ipsecme-ikev2-mlkem).
        ML_KEM_1024 = 0x0025,
    }
}

registry! {
    /// Transform IDs of type ESN (RFC 7296 §3.3.2, IANA "Transform Type 5").
    pub struct EsnId(u16) {
        /// NO_ESN (0): 32-bit sequence numbers.
        NO_ESN = 0x0000,
        /// ESN (1): 64-bit extended sequence numbers (RFC 4303 §2.2.1).
        ESN = 0x0001,
    }
}

registry! {
    /// Transform attribute types (RFC 7296 §3.3.5, IANA "IKEv2 Transform Attribute Types");
    /// the 15 bits after the AF bit.
    pub struct AttributeType(u16) {
        /// KEY_LENGTH (14): Key Length in bits, always in TV format (§3.3.5).
        KEY_LENGTH = 0x000e,
    }
}

/// What a transform negotiates: its type and the ID within that type's registry.
///
/// Decoding always yields the typed arm for the five RFC 7296 types; `Other` carries every
/// other type (the RFC 9370 ADDKE types among them) with its raw ID, so it round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransformId {
    /// Encryption algorithm (type 1).
    Encr(EncrId),
    /// Pseudorandom function (type 2).
    Prf(PrfId),
    /// Integrity algorithm (type 3).
    Integ(IntegId),
    /// Key exchange method (type 4).
    Ke(DhGroup),
    /// Extended sequence numbers (type 5).
    Esn(EsnId),
    /// Any other transform type, kept as found.
    Other {
        /// The transform type.
        ty: TransformType,
        /// The transform ID.
        id: u16,
    },
}

impl TransformId {
    /// The typed ID for the wire pair (Transform Type, Transform ID).
    pub fn from_wire(ty: TransformType, id: u16) -> Self {
        match ty {
            TransformType::ENCR => Self::Encr(EncrId(id)),
            TransformType::PRF => Self::Prf(PrfId(id)),
            TransformType::INTEG => Self::Integ(IntegId(id)),
            TransformType::KE => Self::Ke(DhGroup(id)),
            TransformType::ESN => Self::Esn(EsnId(id)),
            ty => Self::Other { ty, id },
        }
    }

    /// The Transform Type field.
    pub fn ty(self) -> TransformType {
        match self {
            Self::Encr(_) => TransformType::ENCR,
            Self::Prf(_) => TransformType::PRF,
            Self::Integ(_) => TransformType::INTEG,
            Self::Ke(_) => TransformType::KE,
            Self::Esn(_) => TransformType::ESN,
            Self::Other { ty, .. } => ty,
        }
    }

    /// The Transform ID field.
    pub fn id(self) -> u16 {
        match self {
            Self::Encr(EncrId(id))
            | Self::Prf(PrfId(id))
            | Self::Integ(IntegId(id))
            | Self::Ke(DhGroup(id))
            | Self::Esn(EsnId(id))
            | Self::Other { id, .. } => id,
        }
    }
}

/// A transform attribute (RFC 7296 §3.3.5).
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |A|       Attribute Type        |    AF=0  Attribute Length     |
/// |F|                             |    AF=1  Attribute Value      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                   AF=0  Attribute Value                       |
/// |                   AF=1  Not Transmitted                       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransformAttribute {
    /// The attribute type, without the AF bit (at most 0x7fff).
    pub ty: AttributeType,
    /// The value; its arm is the AF bit.
    pub value: AttributeValue,
}

/// The value of a transform attribute, in one of the two formats of §3.3.5.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttributeValue {
    /// Type/Value format (AF = 1): a two-octet value in place of the length.
    Short(u16),
    /// Type/Length/Value format (AF = 0): a variable-length value.
    Long(Vec<u8>),
}

impl TransformAttribute {
    /// The Key Length attribute (§3.3.5), in bits, in the TV format the RFC requires.
    pub fn key_length(bits: u16) -> Self {
        Self { ty: AttributeType::KEY_LENGTH, value: AttributeValue::Short(bits) }
    }
}

/// The AF bit of the attribute type field.
const AF_TV: u16 = 0x8000;
/// The error context of a transform attribute.
const WHAT: &str = "transform attribute";

/// Reads one attribute from the transform's remaining bytes.
pub(crate) fn read_attribute(r: &mut Reader<'_>) -> Result<TransformAttribute> {
    let raw = r.u16(WHAT)?;
    let ty = AttributeType(raw & !AF_TV);
    let value = if raw & AF_TV != 0 {
        AttributeValue::Short(r.u16(WHAT)?)
    } else {
        let len = usize::from(r.u16(WHAT)?);
        AttributeValue::Long(r.take(len, WHAT)?.to_vec())
    };
    Ok(TransformAttribute { ty, value })
}

/// Writes one attribute.
pub(crate) fn write_attribute(attribute: &TransformAttribute, w: &mut Writer<'_>) -> Result<()> {
    let ty = attribute.ty.0;
    if ty & AF_TV != 0 {
        // The top bit is the format flag: a type above 0x7fff cannot be encoded.
        return Err(Error::BadValue { what: "transform attribute type", value: ty.into() });
    }
    match &attribute.value {
        AttributeValue::Short(value) => {
            w.u16(ty | AF_TV);
            w.u16(*value);
        }
        AttributeValue::Long(value) => {
            w.u16(ty);
            w.u16(fit(value.len(), WHAT)?);
            w.bytes(value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn registries_carry_the_rfc_values() {
        assert_eq!(EncrId::AES_CBC.0, 12);
        assert_eq!(EncrId::AES_GCM_16.0, 20);
        assert_eq!(EncrId::CHACHA20_POLY1305.0, 28);
        assert_eq!(PrfId::HMAC_SHA2_256.0, 5);
        assert_eq!(PrfId::HMAC_SHA2_384.0, 6);
        assert_eq!(PrfId::HMAC_SHA2_512.0, 7);
        assert_eq!(IntegId::HMAC_SHA2_256_128.0, 12);
        assert_eq!(IntegId::HMAC_SHA2_384_192.0, 13);
        assert_eq!(IntegId::HMAC_SHA2_512_256.0, 14);
        assert_eq!(DhGroup::MODP_2048.0, 14);
        assert_eq!(DhGroup::MODP_3072.0, 15);
        assert_eq!(DhGroup::ECP_256.0, 19);
        assert_eq!(DhGroup::ECP_384.0, 20);
        assert_eq!(DhGroup::CURVE25519.0, 31);
        assert_eq!((EsnId::NO_ESN.0, EsnId::ESN.0), (0, 1));
        assert_eq!(AttributeType::KEY_LENGTH.0, 14);
    }

    #[test]
    fn debug_prints_the_name_or_unknown_hex() {
        assert_eq!(format!("{:?}", EncrId::AES_GCM_16), "AES_GCM_16");
        assert_eq!(format!("{:?}", EncrId(0x1234)), "Unknown(0x1234)");
        assert_eq!(format!("{:?}", TransformType(0x63)), "Unknown(0x63)");
        assert_eq!(TransformType::ESN.name(), Some("ESN"));
        assert_eq!(DhGroup(999).name(), None);
    }

    #[test]
    fn transform_id_round_trips_every_type() {
        for ty in 0..=u8::MAX {
            let id = TransformId::from_wire(TransformType(ty), 0xabcd);
            assert_eq!((id.ty(), id.id()), (TransformType(ty), 0xabcd));
        }
        assert_eq!(TransformId::from_wire(TransformType::ENCR, 20), TransformId::Encr(EncrId::AES_GCM_16));
    }

    #[test]
    fn attributes_decode_in_both_formats_and_encode_back() -> Result<()> {
        let bytes = hex!("800e 0100  0007 0003 aabbcc");
        let mut r = Reader::new(&bytes);
        let key_length = read_attribute(&mut r)?;
        assert_eq!(key_length, TransformAttribute::key_length(256));
        let tlv = read_attribute(&mut r)?;
        assert_eq!(
            tlv,
            TransformAttribute { ty: AttributeType(7), value: AttributeValue::Long(hex!("aabbcc").to_vec()) }
        );
        r.finish("test")?;
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        write_attribute(&key_length, &mut w)?;
        write_attribute(&tlv, &mut w)?;
        assert_eq!(out, bytes);
        Ok(())
    }

    #[test]
    fn truncated_attributes_are_errors() {
        let bytes = hex!("0007 0003 aabbcc");
        for len in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..len]);
            assert!(matches!(read_attribute(&mut r), Err(Error::Truncated { .. })), "{len}");
        }
    }

    #[test]
    fn attribute_type_with_the_format_bit_cannot_be_encoded() {
        let attribute = TransformAttribute { ty: AttributeType(0x8001), value: AttributeValue::Short(1) };
        let mut out = Vec::new();
        assert!(matches!(
            write_attribute(&attribute, &mut Writer::new(&mut out)),
            Err(Error::BadValue { .. })
        ));
    }
}
