//! Property tests over generated messages and arbitrary bytes.
//!
//! Generated messages cover every payload type, with random reserved bits and critical bits
//! on known payloads; they must encode, decode to themselves and re-encode identically.
//! Arbitrary and mutated bytes must never panic, and whatever decodes must re-encode to
//! exactly the input.

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// Arbitrary bytes, up to `max` of them.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

fn attribute() -> impl Strategy<Value = TransformAttribute> {
    let value =
        prop_oneof![any::<u16>().prop_map(AttributeValue::Short), bytes(8).prop_map(AttributeValue::Long),];
    (0..0x8000u16, value).prop_map(|(ty, value)| TransformAttribute { ty: AttributeType(ty), value })
}

fn transform() -> impl Strategy<Value = Transform> {
    (any::<u8>(), any::<u16>(), any::<[u8; 2]>(), vec(attribute(), 0..3)).prop_map(
        |(ty, id, reserved, attributes)| Transform {
            id: TransformId::from_wire(TransformType(ty), id),
            reserved,
            attributes,
        },
    )
}

/// A protocol with an SPI of a size it allows.
fn protocol_and_spi() -> impl Strategy<Value = (ProtocolId, Vec<u8>)> {
    prop_oneof![
        Just((ProtocolId::IKE, Vec::new())),
        vec(any::<u8>(), 8).prop_map(|spi| (ProtocolId::IKE, spi)),
        vec(any::<u8>(), 4).prop_map(|spi| (ProtocolId::ESP, spi)),
        vec(any::<u8>(), 4).prop_map(|spi| (ProtocolId::AH, spi)),
        (4..=u8::MAX, bytes(8)).prop_map(|(p, spi)| (ProtocolId(p), spi)),
    ]
}

/// A proposal numbered later by [`sa`].
fn proposal() -> impl Strategy<Value = Proposal> {
    (protocol_and_spi(), any::<u8>(), vec(transform(), 0..5)).prop_map(
        |((protocol, spi), reserved, transforms)| Proposal { number: 1, protocol, reserved, spi, transforms },
    )
}

fn sa() -> impl Strategy<Value = Sa> {
    prop_oneof![
        // A response: one proposal echoing any number.
        (proposal(), 1..=u8::MAX).prop_map(|(mut p, number)| {
            p.number = number;
            Sa { proposals: vec![p] }
        }),
        // A request: proposals numbered 1, 2, 3...
        vec(proposal(), 1..4).prop_map(|mut proposals| {
            for (number, p) in (1..).zip(proposals.iter_mut()) {
                p.number = number;
            }
            Sa { proposals }
        }),
    ]
}

fn identification() -> impl Strategy<Value = Identification> {
    let data = prop_oneof![
        vec(any::<u8>(), 4).prop_map(|d| (IdType::IPV4_ADDR, d)),
        vec(any::<u8>(), 16).prop_map(|d| (IdType::IPV6_ADDR, d)),
        (any::<u8>().prop_filter("address types", |t| *t != 1 && *t != 5), bytes(32))
            .prop_map(|(t, d)| (IdType(t), d)),
    ];
    (data, any::<[u8; 3]>()).prop_map(|((ty, data), reserved)| Identification { ty, reserved, data })
}

fn notify() -> impl Strategy<Value = Notify> {
    (any::<u8>(), bytes(8), any::<u16>(), bytes(32)).prop_map(|(protocol, spi, ty, data)| Notify {
        protocol: ProtocolId(protocol),
        spi,
        ty: NotifyType(ty),
        data,
    })
}

fn delete() -> impl Strategy<Value = Delete> {
    prop_oneof![
        Just(Delete::ike()),
        (prop_oneof![Just(ProtocolId::ESP), Just(ProtocolId::AH)], vec(any::<u32>(), 0..4))
            .prop_map(|(p, spis)| Delete::child(p, &spis)),
        (4..=u8::MAX, 1..=8u8, 0..4usize).prop_flat_map(|(protocol, size, count)| {
            vec(vec(any::<u8>(), usize::from(size)), count).prop_map(move |spis| Delete {
                protocol: ProtocolId(protocol),
                spi_size: size,
                spis,
            })
        }),
        (4..=u8::MAX).prop_map(|protocol| Delete {
            protocol: ProtocolId(protocol),
            spi_size: 0,
            spis: Vec::new(),
        }),
    ]
}

fn traffic_selector() -> impl Strategy<Value = TrafficSelector> {
    let ports = (any::<u8>(), any::<u16>(), any::<u16>());
    prop_oneof![
        (ports, any::<u32>(), any::<u32>()).prop_map(|((ip_protocol, sp, ep), s, e)| {
            TrafficSelector::Ipv4(AddressRange {
                ip_protocol,
                start_port: sp,
                end_port: ep,
                start: Ipv4Addr::from_bits(s),
                end: Ipv4Addr::from_bits(e),
            })
        }),
        (ports, any::<u128>(), any::<u128>()).prop_map(|((ip_protocol, sp, ep), s, e)| {
            TrafficSelector::Ipv6(AddressRange {
                ip_protocol,
                start_port: sp,
                end_port: ep,
                start: Ipv6Addr::from_bits(s),
                end: Ipv6Addr::from_bits(e),
            })
        }),
        (any::<u8>().prop_filter("range types", |t| *t != 7 && *t != 8), any::<u8>(), bytes(16)).prop_map(
            |(ty, second_octet, data)| TrafficSelector::Unknown { ty: TsType(ty), second_octet, data }
        ),
    ]
}

fn traffic_selectors() -> impl Strategy<Value = TrafficSelectors> {
    (any::<[u8; 3]>(), vec(traffic_selector(), 0..4))
        .prop_map(|(reserved, selectors)| TrafficSelectors { reserved, selectors })
}

fn configuration() -> impl Strategy<Value = Configuration> {
    let attribute = (any::<bool>(), 0..0x8000u16, bytes(16)).prop_map(|(r, ty, value)| ConfigAttribute {
        reserved_bit: r,
        ty: ConfigAttributeType(ty),
        value,
    });
    (any::<u8>(), any::<[u8; 3]>(), vec(attribute, 0..4)).prop_map(|(cfg_type, reserved, attributes)| {
        Configuration { cfg_type: CfgType(cfg_type), reserved, attributes }
    })
}

fn eap() -> impl Strategy<Value = Eap> {
    let shape = prop_oneof![
        (1..=2u8, any::<u8>(), bytes(16)).prop_map(|(c, t, d)| (c, Some(EapType(t)), d)),
        (3..=4u8).prop_map(|c| (c, None, Vec::new())),
        (5..=u8::MAX, any::<u8>(), bytes(16)).prop_map(|(c, t, d)| (c, Some(EapType(t)), d)),
        (5..=u8::MAX).prop_map(|c| (c, None, Vec::new())),
    ];
    (shape, any::<u8>()).prop_map(|((code, ty, data), identifier)| Eap {
        code: EapCode(code),
        identifier,
        ty,
        data,
    })
}

/// A payload type this codec does not decode.
fn unknown_type() -> impl Strategy<Value = PayloadType> {
    (1..=u8::MAX).prop_map(PayloadType).prop_filter("decoded types", |t| !t.is_decoded())
}

/// Any payload that may appear anywhere in a chain (everything but SK and SKF), with flags:
/// any flags on known payloads, the critical bit clear on unknown ones.
fn inner_entry() -> impl Strategy<Value = PayloadEntry> {
    let known = prop_oneof![
        sa().prop_map(Payload::Sa),
        (any::<u16>(), any::<u16>(), bytes(64)).prop_map(|(g, reserved, data)| {
            Payload::KeyExchange(KeyExchange { group: DhGroup(g), reserved, data })
        }),
        identification().prop_map(Payload::IdInitiator),
        identification().prop_map(Payload::IdResponder),
        (any::<u8>(), bytes(32))
            .prop_map(|(e, data)| Payload::Certificate(Certificate { encoding: CertEncoding(e), data })),
        (any::<u8>(), bytes(40)).prop_map(|(e, authorities)| {
            Payload::CertificateRequest(CertificateRequest { encoding: CertEncoding(e), authorities })
        }),
        (any::<u8>(), any::<[u8; 3]>(), bytes(32)).prop_map(|(m, reserved, data)| {
            Payload::Auth(Authentication { method: AuthMethod(m), reserved, data })
        }),
        vec(any::<u8>(), Nonce::MIN_LEN..=Nonce::MAX_LEN).prop_map(|data| Payload::Nonce(Nonce { data })),
        notify().prop_map(Payload::Notify),
        delete().prop_map(Payload::Delete),
        bytes(32).prop_map(|data| Payload::VendorId(VendorId { data })),
        traffic_selectors().prop_map(Payload::TsInitiator),
        traffic_selectors().prop_map(Payload::TsResponder),
        configuration().prop_map(Payload::Configuration),
        eap().prop_map(Payload::Eap),
    ];
    let unknown = (unknown_type(), bytes(32), 0..0x80u8).prop_map(|(ty, data, flags)| PayloadEntry {
        flags: PayloadFlags(flags),
        payload: Payload::Unknown { ty, data },
    });
    prop_oneof![
        6 => (known, any::<u8>()).prop_map(|(payload, flags)| PayloadEntry {
            flags: PayloadFlags(flags),
            payload,
        }),
        1 => unknown,
    ]
}

/// An SK or SKF payload to end an outer chain.
fn encrypted_entry() -> impl Strategy<Value = PayloadEntry> {
    let sk = (any::<u8>(), bytes(64))
        .prop_map(|(first, data)| Payload::Encrypted(Encrypted { first_inner: PayloadType(first), data }));
    let skf = (any::<u8>(), 1..=u16::MAX, bytes(64)).prop_flat_map(|(first, total, data)| {
        (1..=total).prop_map(move |number| {
            Payload::EncryptedFragment(EncryptedFragment {
                first_inner: PayloadType(first),
                number,
                total,
                data: data.clone(),
            })
        })
    });
    (prop_oneof![sk, skf], any::<u8>())
        .prop_map(|(payload, flags)| PayloadEntry { flags: PayloadFlags(flags), payload })
}

fn header() -> impl Strategy<Value = IkeHeader> {
    (any::<u64>(), any::<u64>(), 0x20..=0x2fu8, any::<u8>(), any::<u8>(), any::<u32>()).prop_map(
        |(initiator_spi, responder_spi, version, exchange, flags, message_id)| IkeHeader {
            initiator_spi,
            responder_spi,
            version,
            exchange_type: ExchangeType(exchange),
            flags: HeaderFlags(flags),
            message_id,
        },
    )
}

fn message() -> impl Strategy<Value = Message> {
    (header(), vec(inner_entry(), 0..6), proptest::option::of(encrypted_entry())).prop_map(
        |(header, mut chain, encrypted)| {
            chain.extend(encrypted);
            Message { header, chain }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_messages_encode_then_decode_to_themselves(message in message()) {
        let bytes = message.to_vec();
        prop_assert!(bytes.is_ok(), "{:?}", bytes);
        let bytes = bytes.unwrap_or_default();
        prop_assert_eq!(Message::decode(&bytes), Ok(message));
    }

    #[test]
    fn generated_inner_chains_encode_then_decode_to_themselves(
        chain in vec(inner_entry(), 0..6)
    ) {
        let mut bytes = Vec::new();
        let first = encode_chain(&chain, &mut bytes);
        prop_assert!(first.is_ok(), "{:?}", first);
        let first = first.unwrap_or(PayloadType::NONE);
        prop_assert_eq!(decode_chain(first, &bytes), Ok(chain));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_decode_byte_exact(data in bytes(512)) {
        if let Ok(message) = Message::decode(&data) {
            prop_assert_eq!(message.to_vec(), Ok(data.clone()));
        }
        if let Some((first, rest)) = data.split_first() {
            if let Ok(chain) = decode_chain(PayloadType(*first), rest) {
                let mut out = Vec::new();
                prop_assert!(encode_chain(&chain, &mut out).is_ok());
                prop_assert_eq!(out, rest);
            }
        }
    }

    #[test]
    fn mutated_messages_never_panic_and_decode_byte_exact(
        message in message(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = message.to_vec().unwrap_or_default();
        if !bytes.is_empty() {
            for (index, value) in flips {
                let at = index.index(bytes.len());
                bytes[at] = value;
            }
        }
        if let Ok(decoded) = Message::decode(&bytes) {
            prop_assert_eq!(decoded.to_vec(), Ok(bytes));
        }
    }

    #[test]
    fn truncated_messages_are_errors(message in message(), cut in any::<prop::sample::Index>()) {
        let bytes = message.to_vec().unwrap_or_default();
        // Every encoded message has at least its 28-octet header, so the index is in range.
        prop_assert!(bytes.len() >= IkeHeader::LEN);
        let len = cut.index(bytes.len());
        prop_assert!(Message::decode(&bytes[..len]).is_err());
    }
}
