//! Real strongSwan 5.9.8 messages (crates/wire/tests/vectors/, see its README): the
//! responder engine answers charon's IKE_SA_INIT request with a well-formed response that
//! selects charon's proposal. IKE_AUTH cannot complete without charon's keys; the rest of
//! the capture, which belongs to an SA this engine does not have, must be dropped cleanly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::net::SocketAddr;
use std::path::PathBuf;

use cloister_ike::{nat, DropReason, EndpointConfig, IkeSaState};
use enclave_core::Enclave;
use util::{endpoint, Pair};
use wire::ike::{
    DhGroup, EncrId, ExchangeType, Message, NotifyType, Payload, PrfId, ProtocolId, Transform, TransformId,
};

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/vectors")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(vectors().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Our responder: prefers a MODP proposal charon does not offer, then charon's.
fn responder_toml(local: &str) -> String {
    format!(
        r#"
[connections.charon]
local_addrs = ["{local}"]
remote_addrs = ["%any"]
proposals = ["aes256-sha256-modp3072", "aes128gcm16-prfsha384-ecp384", "aes256gcm16-prfsha256-ecp256"]
local = {{ auth = "psk", id = "site-b.cloister.test", secret = "psk" }}
remote = {{ auth = "psk", id = "site-a.cloister.test" }}
children.net = {{ local_ts = ["198.18.2.0/24"], remote_ts = ["198.18.1.0/24"], esp_proposals = ["aes256gcm16"] }}
"#
    )
}

fn answers_charons_sa_init_request(file: &str, from: &str, to: &str) {
    let request_bytes = read(file);
    let request = Message::decode(&request_bytes).unwrap();
    let (from, to): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
    // NAT detection known answer: charon's destination hash is SHA-1(SPIi | 0 | our address | 500).
    let natd_d = request.notify(NotifyType::NAT_DETECTION_DESTINATION_IP).unwrap();
    assert_eq!(natd_d.data, nat::hash(request.header.initiator_spi, 0, to), "{file}");

    let mut r =
        endpoint(&responder_toml(&to.ip().to_string()), b"not charon's psk", EndpointConfig::default());
    let now = std::time::Instant::now();
    /* charon: IKE_SA_INIT { SA, KE, Ni, N(NATD_S), N(NATD_D), N(FRAG_SUP), N(HASH_ALG), N(REDIR_SUP) } --> */
    r.handle_datagram(now, from, to, &request_bytes);
    let t = r.poll_transmit().expect("an IKE_SA_INIT response");
    assert!(r.poll_transmit().is_none());
    assert_eq!((t.local, t.remote), (to, from));
    /* <-- IKE_SA_INIT { SA, KE, Nr, N(NATD_S), N(NATD_D) } */
    let response = Message::decode(&t.contents).unwrap();
    let h = response.header;
    assert_eq!(h.exchange_type, ExchangeType::IKE_SA_INIT);
    assert_eq!(h.initiator_spi, request.header.initiator_spi);
    assert_ne!(h.responder_spi, 0);
    assert!(h.flags.response() && !h.flags.initiator());
    assert_eq!(h.message_id, 0);
    assert_eq!(response.to_vec().unwrap(), t.contents, "re-encodes byte for byte");

    let Some(Payload::Sa(sa)) = response.payloads().next() else { panic!("SA first: {response:?}") };
    let [proposal] = sa.proposals.as_slice() else { panic!("one proposal: {sa:?}") };
    assert_eq!((proposal.number, proposal.protocol), (1, ProtocolId::IKE), "charon's proposal number");
    assert!(proposal.spi.is_empty());
    assert_eq!(
        proposal.transforms,
        [
            Transform::with_key_length(TransformId::Encr(EncrId::AES_GCM_16), 256),
            Transform::new(TransformId::Prf(PrfId::HMAC_SHA2_256)),
            Transform::new(TransformId::Ke(DhGroup::ECP_256)),
        ]
    );
    let ke = response
        .payloads()
        .find_map(|p| match p {
            Payload::KeyExchange(k) => Some(k),
            _ => None,
        })
        .unwrap();
    assert_eq!((ke.group, ke.data.len()), (DhGroup::ECP_256, 64));
    let nonce = response
        .payloads()
        .find_map(|p| match p {
            Payload::Nonce(n) => Some(n),
            _ => None,
        })
        .unwrap();
    assert_eq!(nonce.data.len(), enclave_core::IKE_NONCE_LEN, "a nonce the enclave issued");
    let natd_s = response.notify(NotifyType::NAT_DETECTION_SOURCE_IP).unwrap();
    assert_eq!(natd_s.data, nat::hash(h.initiator_spi, h.responder_spi, to));
    let natd_d = response.notify(NotifyType::NAT_DETECTION_DESTINATION_IP).unwrap();
    assert_eq!(natd_d.data, nat::hash(h.initiator_spi, h.responder_spi, from));

    // A half-open SA, keyed by our SPI, holds the derived keys (in the enclave) for IKE_AUTH.
    assert_eq!(r.half_open(), 1);
    let sa = r.ike_sas().next().unwrap();
    assert_eq!(sa.state(), IkeSaState::ExpectAuthRequest);
    assert_eq!(sa.spis(), (h.initiator_spi, h.responder_spi));
    // The capture's charon ran with `encap = yes` (kernel-libipsec always wants ESP in UDP):
    // its source hash is deliberately wrong, so the peer looks NATed and both sides will
    // move to port 4500 and UDP encapsulation.
    let natd_s = request.notify(NotifyType::NAT_DETECTION_SOURCE_IP).unwrap();
    assert_ne!(natd_s.data, nat::hash(request.header.initiator_spi, 0, from), "charon fakes NATD_S");
    assert!(sa.nat().remote_behind_nat && !sa.nat().local_behind_nat, "{:?}", sa.nat());
    assert_eq!(r.enclave().memory_report().ike_sas, 1);

    // charon's retransmission gets the same bytes back, not a second SA.
    r.handle_datagram(now, from, to, &request_bytes);
    assert_eq!(r.poll_transmit().map(|t| t.contents), Some(t.contents.clone()));
    assert_eq!(r.ike_sas().count(), 1);

    // charon's IKE_AUTH request was made for *its* responder's SPI and keys: it finds no SA
    // here (or no valid ICV), and is dropped without an answer.
    let auth = read(&file.replace("00-sa_init-req", "02-auth-req"));
    r.handle_datagram(now, from, SocketAddr::new(to.ip(), 4500), &[&[0u8; 4][..], &auth].concat());
    r.handle_datagram(now, from, to, &auth);
    assert!(r.poll_transmit().is_none());
    assert_eq!(r.counters().dropped(DropReason::UnknownSpi), 2);
}

#[test]
fn the_responder_answers_charons_ipv4_sa_init_request() {
    answers_charons_sa_init_request("ike-v4-00-sa_init-req.bin", "198.18.0.1:500", "198.18.0.2:500");
}

#[test]
fn the_responder_answers_charons_ipv6_sa_init_request() {
    answers_charons_sa_init_request("ike-v6-00-sa_init-req.bin", "[2001:db8::1]:500", "[2001:db8::2]:500");
}

#[test]
fn the_whole_capture_fed_to_both_roles_is_dropped_or_answered_without_panic() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("ike-")))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "{}", files.len());
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let (a, b): (SocketAddr, SocketAddr) =
        ("198.18.0.1:4500".parse().unwrap(), "198.18.0.2:4500".parse().unwrap());
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let marked = [&[0u8; 4][..], &bytes].concat();
        for ep in [&mut p.i, &mut p.r] {
            ep.handle_datagram(p.now, a, b, &marked);
            ep.handle_datagram(p.now, b, a, &bytes);
        }
    }
    // Only the two IKE_SA_INIT requests can start anything (each at the responder side of
    // each engine); everything else is for SAs these engines do not have.
    let total = p.i.counters().dropped_total() + p.r.counters().dropped_total();
    assert!(total >= u64::try_from(4 * files.len() - 8).unwrap(), "{total}");
}
