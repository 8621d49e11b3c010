//! Security Association payload (RFC 7296 §3.3): proposals of transforms with attributes.

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::transform::{read_attribute, write_attribute, AttributeType, AttributeValue};
use super::transform::{TransformAttribute, TransformId, TransformType};
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// Security protocol identifiers of proposals, notifies and deletes (RFC 7296 §3.3.1,
    /// IANA "IKEv2 Security Protocol Identifiers").
    pub struct ProtocolId(u8) {
        /// NONE (0): No SA: the value a Notify without SPI carries (§3.10).
        NONE = 0x00,
        /// IKE (1): The IKE SA itself.
        IKE = 0x01,
        /// AH (2): Authentication Header (RFC 4302).
        AH = 0x02,
        /// ESP (3): Encapsulating Security Payload (RFC 4303).
        ESP = 0x03,
        /// FC_ESP_HEADER (4): Fibre Channel ESP header (RFC 4595).
        FC_ESP_HEADER = 0x04,
        /// FC_CT_AUTHENTICATION (5): Fibre Channel CT authentication (RFC 4595).
        FC_CT_AUTHENTICATION = 0x05,
    }
}

/// Security Association payload (RFC 7296 §3.3): one or more proposals, most preferred first.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                          <Proposals>                          ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// Decoding checks what §3.3 asks a parser to check: every length and count agrees with the
/// bytes, the last-substructure flags mark exactly the last proposal and transform, several
/// proposals are numbered 1, 2, 3... (§3.3.1), and each SPI has the size of its protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sa {
    /// The proposals, at least one.
    pub proposals: Vec<Proposal>,
}

/// A proposal substructure (RFC 7296 §3.3.1): one protocol and the transforms offered for it.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Last Substruc |   RESERVED    |         Proposal Length       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Proposal Num  |  Protocol ID  |    SPI Size   |Num  Transforms|
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ~                        SPI (variable)                         ~
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                        <Transforms>                           ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Proposal {
    /// Proposal Num: 1, 2, 3... in a request; in a response, the number of the accepted one.
    pub number: u8,
    /// The protocol negotiated: IKE, ESP or AH.
    pub protocol: ProtocolId,
    /// The RESERVED octet, kept as received so encoding is byte-exact; send zero (§3.3.1).
    pub reserved: u8,
    /// The sender's inbound SPI: empty (initial IKE), 8 octets (IKE rekey) or 4 (ESP, AH).
    pub spi: Vec<u8>,
    /// The transforms, any order.
    pub transforms: Vec<Transform>,
}

/// A transform substructure (RFC 7296 §3.3.2): one algorithm with its attributes.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Last Substruc |   RESERVED    |        Transform Length       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |Transform Type |   RESERVED    |          Transform ID         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                      Transform Attributes                     ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transform {
    /// The transform type and ID.
    pub id: TransformId,
    /// The two RESERVED octets (after Last Substruc, after Transform Type), kept as received.
    pub reserved: [u8; 2],
    /// The attributes, e.g. the key length.
    pub attributes: Vec<TransformAttribute>,
}

impl Transform {
    /// A transform without attributes.
    pub fn new(id: TransformId) -> Self {
        Self { id, reserved: [0; 2], attributes: Vec::new() }
    }

    /// A transform with a Key Length attribute, in bits (§3.3.5).
    pub fn with_key_length(id: TransformId, bits: u16) -> Self {
        Self { attributes: vec![TransformAttribute::key_length(bits)], ..Self::new(id) }
    }

    /// The Key Length attribute's value in bits, if the transform has one in TV format.
    pub fn key_length(&self) -> Option<u16> {
        self.attributes.iter().find_map(|a| match (a.ty, &a.value) {
            (AttributeType::KEY_LENGTH, AttributeValue::Short(bits)) => Some(*bits),
            _ => None,
        })
    }
}

impl Proposal {
    /// The SPI of an ESP or AH proposal as a number (four octets, §3.3.1).
    pub fn child_spi(&self) -> Option<u32> {
        <[u8; 4]>::try_from(self.spi.as_slice()).ok().map(u32::from_be_bytes)
    }

    /// The SPI of an IKE rekey proposal as a number (eight octets, §3.3.1).
    pub fn ike_spi(&self) -> Option<u64> {
        <[u8; 8]>::try_from(self.spi.as_slice()).ok().map(u64::from_be_bytes)
    }

    /// The transforms of one type, in order.
    pub fn transforms_of(&self, ty: TransformType) -> impl Iterator<Item = &Transform> {
        self.transforms.iter().filter(move |t| t.id.ty() == ty)
    }
}

/// Last Substruc of a proposal that is followed by another (§3.3.1).
const MORE_PROPOSALS: u8 = 2;
/// Last Substruc of a transform that is followed by another (§3.3.2).
const MORE_TRANSFORMS: u8 = 3;
/// Last Substruc of the last proposal or transform.
const LAST: u8 = 0;
/// Fixed part of a proposal, before the SPI.
const PROPOSAL_HEADER_LEN: usize = 8;
/// Fixed part of a transform, before the attributes.
const TRANSFORM_HEADER_LEN: usize = 8;

/// Checks that an SPI has the size its protocol needs (§3.3.1): IKE has none in IKE_SA_INIT
/// and eight octets when rekeyed, ESP and AH four. Other protocols are not judged here.
pub(crate) fn check_spi_size(protocol: ProtocolId, size: usize, what: &'static str) -> Result<()> {
    let fits = match protocol {
        ProtocolId::IKE => size == 0 || size == 8,
        ProtocolId::AH | ProtocolId::ESP => size == 4,
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        Err(Error::BadLength { what, len: size, why: "SPI size does not match the protocol" })
    }
}

/// Checks the Last Substruc octet: `more` if another substructure follows, zero otherwise.
fn check_last(found: u8, more_follow: bool, more: u8, what: &'static str) -> Result<()> {
    let expected = if more_follow { more } else { LAST };
    if found == expected {
        Ok(())
    } else {
        Err(Error::BadValue { what, value: found.into() })
    }
}

/// Checks proposal numbering (§3.3.1): a lone proposal may carry any number from 1 (a
/// response echoes the accepted one), several must count 1, 2, 3...
fn check_numbering(proposals: &[Proposal]) -> Result<()> {
    if proposals.is_empty() {
        return Err(Error::BadLength {
            what: Sa::WHAT,
            len: 0,
            why: "an SA payload needs at least one proposal",
        });
    }
    let single = proposals.len() == 1;
    for (index, proposal) in proposals.iter().enumerate() {
        let number = usize::from(proposal.number);
        let fits = if single { number >= 1 } else { number == index + 1 };
        if !fits {
            return Err(Error::BadValue { what: "proposal number", value: proposal.number.into() });
        }
    }
    Ok(())
}

impl Body for Sa {
    const WHAT: &'static str = "SA payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let mut proposals = Vec::new();
        while !r.is_empty() {
            let last = r.u8("proposal")?;
            let reserved = r.u8("proposal")?;
            let len = usize::from(r.u16("proposal")?);
            let body_len = len
                .checked_sub(4)
                .filter(|_| len >= PROPOSAL_HEADER_LEN)
                .ok_or(Error::BadLength { what: "proposal", len, why: "shorter than the proposal header" })?;
            let mut p = r.sub(body_len, "proposal")?;
            check_last(last, !r.is_empty(), MORE_PROPOSALS, "proposal last substructure")?;
            proposals.push(read_proposal(&mut p, reserved)?);
            p.finish("proposal")?;
        }
        check_numbering(&proposals)?;
        Ok(Self { proposals })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        check_numbering(&self.proposals)?;
        let count = self.proposals.len();
        for (index, proposal) in self.proposals.iter().enumerate() {
            write_proposal(proposal, index + 1 < count, w)?;
        }
        Ok(())
    }
}

/// Reads a proposal after its first four octets.
fn read_proposal(p: &mut Reader<'_>, reserved: u8) -> Result<Proposal> {
    let number = p.u8("proposal")?;
    let protocol = ProtocolId(p.u8("proposal")?);
    let spi_size = usize::from(p.u8("proposal")?);
    let transform_count = p.u8("proposal")?;
    check_spi_size(protocol, spi_size, "proposal SPI")?;
    let spi = p.take(spi_size, "proposal SPI")?.to_vec();
    let mut transforms = Vec::new();
    while !p.is_empty() {
        let last = p.u8("transform")?;
        let reserved_1 = p.u8("transform")?;
        let len = usize::from(p.u16("transform")?);
        let body_len = len
            .checked_sub(4)
            .filter(|_| len >= TRANSFORM_HEADER_LEN)
            .ok_or(Error::BadLength { what: "transform", len, why: "shorter than the transform header" })?;
        let mut t = p.sub(body_len, "transform")?;
        check_last(last, !p.is_empty(), MORE_TRANSFORMS, "transform last substructure")?;
        let ty = TransformType(t.u8("transform")?);
        let reserved_5 = t.u8("transform")?;
        let id = TransformId::from_wire(ty, t.u16("transform")?);
        let mut attributes = Vec::new();
        while !t.is_empty() {
            attributes.push(read_attribute(&mut t)?);
        }
        transforms.push(Transform { id, reserved: [reserved_1, reserved_5], attributes });
    }
    if transforms.len() != usize::from(transform_count) {
        return Err(Error::BadValue { what: "proposal transform count", value: transform_count.into() });
    }
    Ok(Proposal { number, protocol, reserved, spi, transforms })
}

/// Writes one proposal; `more` says whether another follows.
fn write_proposal(proposal: &Proposal, more: bool, w: &mut Writer<'_>) -> Result<()> {
    check_spi_size(proposal.protocol, proposal.spi.len(), "proposal SPI")?;
    let start = w.position();
    w.u8(if more { MORE_PROPOSALS } else { LAST });
    w.u8(proposal.reserved);
    let at = w.len16();
    w.u8(proposal.number);
    w.u8(proposal.protocol.0);
    w.u8(fit(proposal.spi.len(), "proposal SPI")?);
    w.u8(fit(proposal.transforms.len(), "proposal transform count")?);
    w.bytes(&proposal.spi);
    let count = proposal.transforms.len();
    for (index, transform) in proposal.transforms.iter().enumerate() {
        let start = w.position();
        w.u8(if index + 1 < count { MORE_TRANSFORMS } else { LAST });
        w.u8(transform.reserved[0]);
        let at = w.len16();
        w.u8(transform.id.ty().0);
        w.u8(transform.reserved[1]);
        w.u16(transform.id.id());
        for attribute in &transform.attributes {
            write_attribute(attribute, w)?;
        }
        w.patch_len16(start, at, "transform")?;
    }
    w.patch_len16(start, at, "proposal")
}

#[cfg(test)]
mod tests {
    use super::super::payload::{decode_chain, encode_chain, Payload, PayloadEntry, PayloadType};
    use super::super::transform::{DhGroup, EncrId, EsnId, IntegId, PrfId};
    use super::*;
    use hex_literal::hex;

    /// SA payload with two proposals: IKE aes256gcm16/prfsha256/ecp256, then
    /// IKE aes128-sha256-modp2048.
    const TWO_PROPOSALS: [u8; 84] = hex!(
        "00 00 0054"
        "02 00 0024 01 01 00 03"
        "  03 00 000c 01 00 0014 800e 0100"
        "  03 00 0008 02 00 0005"
        "  00 00 0008 04 00 0013"
        "00 00 002c 02 01 00 04"
        "  03 00 000c 01 00 000c 800e 0080"
        "  03 00 0008 02 00 0005"
        "  03 00 0008 03 00 000c"
        "  00 00 0008 04 00 000e"
    );

    fn decode_sa(bytes: &[u8]) -> Result<Sa> {
        match decode_chain(PayloadType::SA, bytes)?.as_slice() {
            [PayloadEntry { payload: Payload::Sa(sa), .. }] => Ok(sa.clone()),
            other => panic!("not one SA payload: {other:?}"),
        }
    }

    #[test]
    fn two_proposals_deconstruct() -> Result<()> {
        let sa = decode_sa(&TWO_PROPOSALS)?;
        assert_eq!(sa.proposals.len(), 2);
        let first = &sa.proposals[0];
        assert_eq!((first.number, first.protocol), (1, ProtocolId::IKE));
        assert!(first.spi.is_empty());
        assert_eq!(
            first.transforms,
            vec![
                Transform::with_key_length(TransformId::Encr(EncrId::AES_GCM_16), 256),
                Transform::new(TransformId::Prf(PrfId::HMAC_SHA2_256)),
                Transform::new(TransformId::Ke(DhGroup::ECP_256)),
            ]
        );
        assert_eq!(first.transforms[0].key_length(), Some(256));
        let second = &sa.proposals[1];
        assert_eq!(second.number, 2);
        assert_eq!(
            second.transforms_of(TransformType::INTEG).map(|t| t.id).collect::<Vec<_>>(),
            vec![TransformId::Integ(IntegId::HMAC_SHA2_256_128)]
        );
        Ok(())
    }

    #[test]
    fn two_proposals_encode_byte_exact() -> Result<()> {
        let chain = decode_chain(PayloadType::SA, &TWO_PROPOSALS)?;
        let mut out = Vec::new();
        assert_eq!(encode_chain(&chain, &mut out)?, PayloadType::SA);
        assert_eq!(out, TWO_PROPOSALS);
        Ok(())
    }

    #[test]
    fn esp_proposal_with_spi_deconstructs_and_constructs() -> Result<()> {
        let bytes = hex!(
            "00 00 0024"
            "00 00 0020 01 03 04 02 c0ffee01"
            "  03 00 000c 01 00 0014 800e 0100"
            "  00 00 0008 05 00 0000"
        );
        let sa = decode_sa(&bytes)?;
        let proposal = &sa.proposals[0];
        assert_eq!(proposal.protocol, ProtocolId::ESP);
        assert_eq!(proposal.child_spi(), Some(0xc0ff_ee01));
        assert_eq!(proposal.ike_spi(), None);
        let built = Sa {
            proposals: vec![Proposal {
                number: 1,
                protocol: ProtocolId::ESP,
                spi: hex!("c0ffee01").to_vec(),
                transforms: vec![
                    Transform::with_key_length(TransformId::Encr(EncrId::AES_GCM_16), 256),
                    Transform::new(TransformId::Esn(EsnId::NO_ESN)),
                ],
                ..Proposal::default()
            }],
        };
        assert_eq!(sa, built);
        let mut out = Vec::new();
        encode_chain(&[PayloadEntry::from(Payload::Sa(built))], &mut out)?;
        assert_eq!(out, bytes);
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..TWO_PROPOSALS.len() {
            assert!(decode_chain(PayloadType::SA, &TWO_PROPOSALS[..len]).is_err(), "{len}");
        }
    }

    #[test]
    fn wrong_last_substructure_flags_are_rejected() {
        // First proposal marked last although a second follows.
        let mut bytes = TWO_PROPOSALS;
        bytes[4] = 0;
        assert_eq!(decode_sa(&bytes), Err(Error::BadValue { what: "proposal last substructure", value: 0 }));
        // Last transform of the first proposal marked "more".
        let mut bytes = TWO_PROPOSALS;
        bytes[32] = 3;
        assert_eq!(decode_sa(&bytes), Err(Error::BadValue { what: "transform last substructure", value: 3 }));
    }

    #[test]
    fn proposal_numbers_must_count_from_one() {
        let mut bytes = TWO_PROPOSALS;
        bytes[44] = 3;
        assert_eq!(decode_sa(&bytes), Err(Error::BadValue { what: "proposal number", value: 3 }));
        let mut bytes = TWO_PROPOSALS;
        bytes[8] = 0;
        assert!(decode_sa(&bytes).is_err());
    }

    #[test]
    fn transform_count_must_match() {
        let mut bytes = TWO_PROPOSALS;
        bytes[11] = 4;
        assert_eq!(decode_sa(&bytes), Err(Error::BadValue { what: "proposal transform count", value: 4 }));
    }

    #[test]
    fn spi_size_must_fit_the_protocol() {
        // ESP proposal without an SPI.
        let bytes = hex!("00 00 0014 00 00 0010 01 03 00 01 00 00 0008 05 00 0000");
        assert_eq!(
            decode_sa(&bytes),
            Err(Error::BadLength {
                what: "proposal SPI",
                len: 0,
                why: "SPI size does not match the protocol"
            })
        );
    }

    #[test]
    fn bad_inner_lengths_are_rejected() {
        // Transform length 7 (below its header).
        let bytes = hex!("00 00 0014 00 00 0010 01 01 00 01 00 00 0007 02 00 0005");
        assert!(matches!(decode_sa(&bytes), Err(Error::BadLength { what: "transform", .. })));
        // Proposal length running past the SA payload.
        let bytes = hex!("00 00 0014 00 00 0011 01 01 00 01 00 00 0008 02 00 0005");
        assert!(matches!(decode_sa(&bytes), Err(Error::Truncated { what: "proposal", .. })));
        // Empty SA payload.
        assert!(matches!(decode_sa(&hex!("00 00 0004")), Err(Error::BadLength { .. })));
    }

    #[test]
    fn reserved_octets_survive_a_round_trip() -> Result<()> {
        let bytes = hex!("00 00 0014 00 7f 0010 01 01 00 01 00 55 0008 02 66 0005");
        let sa = decode_sa(&bytes)?;
        assert_eq!(sa.proposals[0].reserved, 0x7f);
        assert_eq!(sa.proposals[0].transforms[0].reserved, [0x55, 0x66]);
        let mut out = Vec::new();
        encode_chain(&decode_chain(PayloadType::SA, &bytes)?, &mut out)?;
        assert_eq!(out, bytes);
        Ok(())
    }
}
