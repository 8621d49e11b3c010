//! A whole IKE message: header and payload chain (RFC 7296 §3).

use super::encrypted::{Encrypted, EncryptedFragment};
use super::header::{IkeHeader, PeekedHeader};
use super::notify::{Notify, NotifyType};
use super::payload::{first_type, read_chain, write_chain, Chain, Payload, PayloadEntry};
use super::reader::Reader;
use super::writer::Writer;
use crate::{Error, Result};

/// An IKE message as carried in one UDP datagram (without the non-ESP marker of port 4500).
///
/// [`Message::decode`] accepts exactly what [`Message::encode`] reproduces byte for byte:
/// lengths, counts and the Next Payload fields are derived, everything else the RFC says to
/// ignore on receipt (reserved bits, the minor version, the critical bit of a known
/// payload) is kept as received.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// The IKE header.
    pub header: IkeHeader,
    /// The payloads in wire order; an SK or SKF payload can only be last.
    pub chain: Vec<PayloadEntry>,
}

/// The message's name in errors.
const WHAT: &str = "IKE message";

impl Message {
    /// A message of these payloads, with zero generic-header flags.
    pub fn new(header: IkeHeader, payloads: impl IntoIterator<Item = Payload>) -> Self {
        Self { header, chain: payloads.into_iter().map(PayloadEntry::from).collect() }
    }

    /// Decodes a datagram.
    ///
    /// Fails with `InvalidMajorVersion` for a major version other than 2 and with
    /// `UnsupportedCriticalPayload` for a critical payload this codec does not decode: for
    /// those the engine answers with the matching notification (see
    /// [`Notify::for_decode_error`] and [`IkeHeader::peek`]). The Length field must equal
    /// the datagram's length. An SK or SKF payload ends the chain (its Next Payload field
    /// names its first inner payload); nothing may follow it.
    pub fn decode(datagram: &[u8]) -> Result<Self> {
        let mut r = Reader::new(datagram);
        let PeekedHeader { header, next_payload, length } = IkeHeader::read(&mut r)?;
        header.check_version()?;
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        if length < IkeHeader::LEN {
            return Err(Error::BadLength { what: WHAT, len: length, why: "shorter than the IKE header" });
        }
        if length > datagram.len() {
            return Err(Error::Truncated { what: WHAT, need: length, have: datagram.len() });
        }
        if length < datagram.len() {
            return Err(Error::TrailingBytes { what: WHAT, count: datagram.len() - length });
        }
        let chain = read_chain(next_payload, &mut r, Chain::Outer)?;
        r.finish(WHAT)?;
        Ok(Self { header, chain })
    }

    /// Appends the encoded message to `out`. On error `out` is left as it was.
    ///
    /// Fails where decoding would: a major version other than 2, a payload breaking its
    /// RFC constraints (e.g. a nonce shorter than 16 octets), a length that does not fit its
    /// field, or an SK/SKF payload that is not last.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        let result = self.write(&mut Writer::new(out), start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// The encoded message in a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode(&mut out)?;
        Ok(out)
    }

    /// Writes header and chain, then the Length field.
    fn write(&self, w: &mut Writer<'_>, start: usize) -> Result<()> {
        let at = self.header.write(first_type(&self.chain), w)?;
        write_chain(&self.chain, w, Chain::Outer)?;
        w.patch_len32(start, at, WHAT)
    }

    /// The payloads in order, without their generic-header flags.
    pub fn payloads(&self) -> impl Iterator<Item = &Payload> {
        self.chain.iter().map(|entry| &entry.payload)
    }

    /// The Notify payloads in order.
    pub fn notifies(&self) -> impl Iterator<Item = &Notify> {
        self.payloads().filter_map(|p| match p {
            Payload::Notify(n) => Some(n),
            _ => None,
        })
    }

    /// The first Notify payload of a type.
    pub fn notify(&self, ty: NotifyType) -> Option<&Notify> {
        self.notifies().find(|n| n.ty == ty)
    }

    /// The SK payload, which is always last (§3.14).
    pub fn encrypted(&self) -> Option<&Encrypted> {
        match self.payloads().last() {
            Some(Payload::Encrypted(sk)) => Some(sk),
            _ => None,
        }
    }

    /// The SKF payload, which is always last (RFC 7383 §2.5).
    pub fn encrypted_fragment(&self) -> Option<&EncryptedFragment> {
        match self.payloads().last() {
            Some(Payload::EncryptedFragment(skf)) => Some(skf),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::auth::HashAlgorithm;
    use super::super::header::{ExchangeType, HeaderFlags};
    use super::super::ke::KeyExchange;
    use super::super::nonce::Nonce;
    use super::super::payload::{PayloadFlags, PayloadType};
    use super::super::sa::{Proposal, ProtocolId, Sa, Transform};
    use super::super::transform::{DhGroup, EncrId, PrfId, TransformId};
    use super::*;
    use hex_literal::hex;

    /// A hand-assembled IKE_SA_INIT request as strongSwan sends it for
    /// `aes256gcm16-prfsha256-ecp256`: SA, KE (group 19, 64 octets), Nonce (32 octets),
    /// NAT_DETECTION_SOURCE_IP, NAT_DETECTION_DESTINATION_IP, IKEV2_FRAGMENTATION_SUPPORTED,
    /// SIGNATURE_HASH_ALGORITHMS.
    pub(crate) const SA_INIT_REQUEST: [u8; 256] = hex!(
        // IKE header: SPIi, SPIr = 0, next SA, 2.0, IKE_SA_INIT, Initiator, ID 0, length 256
        "a1b2c3d4e5f60718 0000000000000000 21 20 22 08 00000000 00000100"
        // SA: one IKE proposal, 3 transforms
        "22 00 0028"
        "  00 00 0024 01 01 00 03"
        "    03 00 000c 01 00 0014 800e 0100" // ENCR AES_GCM_16, key length 256
        "    03 00 0008 02 00 0005" //           PRF HMAC_SHA2_256
        "    00 00 0008 04 00 0013" //           KE ECP_256
        // KE: group 19, 64 octets (x || y)
        "28 00 0048 0013 0000"
        "  6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296"
        "  4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5"
        // Nonce: 32 octets
        "29 00 0024"
        "  000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        // NAT_DETECTION_SOURCE_IP: SHA-1 of SPIs, address, port
        "29 00 001c 00 00 4004 3bd5f0d3a1b2c3d4e5f60718293a4b5c6d7e8f90"
        // NAT_DETECTION_DESTINATION_IP
        "29 00 001c 00 00 4005 0f1e2d3c4b5a69788796a5b4c3d2e1f000112233"
        // IKEV2_FRAGMENTATION_SUPPORTED
        "29 00 0008 00 00 402e"
        // SIGNATURE_HASH_ALGORITHMS: SHA2_256, SHA2_384, SHA2_512, IDENTITY
        "00 00 0010 00 00 402f 0002 0003 0004 0005"
    );

    fn expected_sa_init() -> Message {
        let sa = Sa {
            proposals: vec![Proposal {
                number: 1,
                protocol: ProtocolId::IKE,
                transforms: vec![
                    Transform::with_key_length(TransformId::Encr(EncrId::AES_GCM_16), 256),
                    Transform::new(TransformId::Prf(PrfId::HMAC_SHA2_256)),
                    Transform::new(TransformId::Ke(DhGroup::ECP_256)),
                ],
                ..Proposal::default()
            }],
        };
        Message::new(
            IkeHeader::new(0xa1b2_c3d4_e5f6_0718, 0, ExchangeType::IKE_SA_INIT, HeaderFlags::INITIATOR, 0),
            [
                Payload::Sa(sa),
                Payload::KeyExchange(KeyExchange::new(
                    DhGroup::ECP_256,
                    SA_INIT_REQUEST[0x4c..0x8c].to_vec(),
                )),
                Payload::Nonce(Nonce { data: (0..32).collect() }),
                Payload::Notify(Notify::new(
                    NotifyType::NAT_DETECTION_SOURCE_IP,
                    hex!("3bd5f0d3a1b2c3d4e5f60718293a4b5c6d7e8f90").to_vec(),
                )),
                Payload::Notify(Notify::new(
                    NotifyType::NAT_DETECTION_DESTINATION_IP,
                    hex!("0f1e2d3c4b5a69788796a5b4c3d2e1f000112233").to_vec(),
                )),
                Payload::Notify(Notify::new(NotifyType::IKEV2_FRAGMENTATION_SUPPORTED, vec![])),
                Payload::Notify(Notify::signature_hash_algorithms(&[
                    HashAlgorithm::SHA2_256,
                    HashAlgorithm::SHA2_384,
                    HashAlgorithm::SHA2_512,
                    HashAlgorithm::IDENTITY,
                ])),
            ],
        )
    }

    #[test]
    fn sa_init_request_deconstructs() -> Result<()> {
        let message = Message::decode(&SA_INIT_REQUEST)?;
        assert_eq!(message, expected_sa_init());
        assert!(message.notify(NotifyType::IKEV2_FRAGMENTATION_SUPPORTED).is_some());
        assert_eq!(message.notifies().count(), 4);
        assert_eq!(message.encrypted(), None);
        Ok(())
    }

    #[test]
    fn sa_init_request_constructs_byte_exact() -> Result<()> {
        assert_eq!(expected_sa_init().to_vec()?, SA_INIT_REQUEST);
        let mut out = vec![0xff];
        Message::decode(&SA_INIT_REQUEST)?.encode(&mut out)?;
        assert_eq!(out[1..], SA_INIT_REQUEST);
        Ok(())
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..SA_INIT_REQUEST.len() {
            assert!(Message::decode(&SA_INIT_REQUEST[..len]).is_err(), "{len}");
        }
    }

    #[test]
    fn length_must_equal_the_datagram() {
        let mut longer = SA_INIT_REQUEST.to_vec();
        longer.push(0);
        assert_eq!(Message::decode(&longer), Err(Error::TrailingBytes { what: WHAT, count: 1 }));
        let mut short_field = SA_INIT_REQUEST;
        short_field[24..28].copy_from_slice(&hex!("000000ff"));
        assert_eq!(Message::decode(&short_field), Err(Error::TrailingBytes { what: WHAT, count: 1 }));
        let mut tiny = SA_INIT_REQUEST;
        tiny[24..28].copy_from_slice(&hex!("0000001b"));
        assert!(matches!(Message::decode(&tiny), Err(Error::BadLength { len: 27, .. })));
        let mut long_field = SA_INIT_REQUEST;
        long_field[24..28].copy_from_slice(&hex!("00000101"));
        assert!(matches!(Message::decode(&long_field), Err(Error::Truncated { need: 257, .. })));
    }

    #[test]
    fn chain_ending_early_leaves_trailing_bytes() {
        // The fragmentation notify claims to end the chain, but another payload follows.
        let mut bytes = SA_INIT_REQUEST;
        bytes[0xe8] = 0;
        assert_eq!(Message::decode(&bytes), Err(Error::TrailingBytes { what: WHAT, count: 16 }));
    }

    #[test]
    fn other_major_versions_are_rejected_for_invalid_major_version() -> Result<()> {
        let mut bytes = SA_INIT_REQUEST;
        bytes[17] = 0x30;
        let error = Message::decode(&bytes);
        assert_eq!(error, Err(Error::InvalidMajorVersion { version: 3 }));
        // The engine can still read what it needs to answer.
        let peeked = IkeHeader::peek(&bytes)?;
        assert_eq!(peeked.header.initiator_spi, 0xa1b2_c3d4_e5f6_0718);
        // A different minor version is ignored (§2.5) and kept.
        bytes[17] = 0x21;
        let message = Message::decode(&bytes)?;
        assert_eq!(message.header.minor_version(), 1);
        assert_eq!(message.to_vec()?, bytes);
        Ok(())
    }

    #[test]
    fn unknown_critical_payload_rejects_the_message() {
        // Retype the last notify (at 0xf0) as unknown type 0xfe with the critical bit.
        let mut bytes = SA_INIT_REQUEST;
        bytes[0xe8] = 0xfe;
        bytes[0xf1] = 0x80;
        let error = Message::decode(&bytes);
        assert_eq!(error, Err(Error::UnsupportedCriticalPayload { payload_type: 0xfe }));
        // Without the critical bit it is kept and re-encoded unchanged.
        bytes[0xf1] = 0x00;
        let Ok(message) = Message::decode(&bytes) else {
            panic!("non-critical unknown payload was rejected");
        };
        assert_eq!(
            message.chain.last().map(|e| &e.payload),
            Some(&Payload::Unknown {
                ty: PayloadType(0xfe),
                data: hex!("0000402f 0002 0003 0004 0005").to_vec()
            })
        );
        assert_eq!(message.to_vec(), Ok(bytes.to_vec()));
    }

    #[test]
    fn sk_ends_the_chain_and_names_its_first_inner_payload() -> Result<()> {
        // INFORMATIONAL request: header, then SK whose first inner payload would be Delete.
        let bytes = hex!(
            "a1b2c3d4e5f60718 1122334455667788 2e 20 25 08 00000002 00000028"
            "2a 00 000c 0102030405060708"
        );
        let message = Message::decode(&bytes)?;
        let sk = message.encrypted().cloned().unwrap_or_default();
        assert_eq!(sk.first_inner, PayloadType::DELETE);
        assert_eq!(sk.data, hex!("0102030405060708"));
        // The associated data is everything before the SK body.
        assert_eq!(bytes.len() - sk.data.len(), 0x20);
        assert_eq!(message.to_vec()?, bytes);
        // Bytes after the SK payload are trailing, even with a consistent Length field.
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&hex!("00 00 0004"));
        longer[27] = 0x2c;
        assert_eq!(Message::decode(&longer), Err(Error::TrailingBytes { what: WHAT, count: 4 }));
        Ok(())
    }

    #[test]
    fn sk_must_be_last_when_encoding() {
        let mut message = expected_sa_init();
        message.chain.insert(0, PayloadEntry::from(Payload::Encrypted(Encrypted::default())));
        let mut out = vec![1, 2];
        assert_eq!(message.encode(&mut out), Err(Error::MisplacedEncrypted { payload_type: 46 }));
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn payload_flags_of_known_payloads_round_trip() -> Result<()> {
        let mut bytes = SA_INIT_REQUEST;
        bytes[0x1d] = 0x81; // SA: critical, one reserved bit
        let message = Message::decode(&bytes)?;
        assert_eq!(message.chain[0].flags, PayloadFlags(0x81));
        assert_eq!(message.to_vec()?, bytes);
        Ok(())
    }
}
