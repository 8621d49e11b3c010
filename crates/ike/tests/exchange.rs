//! Two engines, each with its own enclave, exchange datagrams in memory under a virtual
//! clock: establishment for the interop suites, INVALID_KE_PAYLOAD, cookies, loss and
//! retransmission, authentication and proposal failures, malformed input, NAT, deletes
//! and liveness.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::time::Duration;

use cloister_ike::{
    DeleteReason, DropReason, Encapsulation, EndpointConfig, Error, Event, IkeSaState, OutboundSwitch,
    Refusal, SaId, Side, RETIRE_GRACE,
};
use enclave_core::{Cipher, DhGroup, Enclave, Integ, Prf, Role, Suite};
use util::{
    endpoint, endpoint_on, esp_round_trip, initiator_config, responder_config, start_enclave_limited, Dir,
    Pair,
};
use wire::ike::{ExchangeType as X, NotifyType};

const PSK: &[u8] = b"a shared secret of the tenant";

/// The IKE SA ids of both sides after a successful exchange.
fn both_established(p: &Pair) -> (SaId, SaId) {
    let (i, r) = (Pair::established(&p.i_events), Pair::established(&p.r_events));
    assert_eq!((i.len(), r.len()), (1, 1), "initiator {:?}\nresponder {:?}", p.i_events, p.r_events);
    assert_eq!(p.i.ike_sa(i[0]).unwrap().state(), IkeSaState::Established);
    assert_eq!(p.r.ike_sa(r[0]).unwrap().state(), IkeSaState::Established);
    (i[0], r[0])
}

#[test]
fn the_four_interop_suites_establish_and_their_child_keys_agree() {
    for (ike, esp, suite, prf, group, esp_suite) in [
        (
            "aes256gcm16-prfsha256-ecp256",
            "aes256gcm16",
            Suite::aead(Cipher::AesGcm16_256),
            Prf::HmacSha256,
            DhGroup::EcpP256,
            Suite::aead(Cipher::AesGcm16_256),
        ),
        (
            "aes256-sha256-modp3072",
            "aes256-sha256",
            Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
            Prf::HmacSha256,
            DhGroup::Modp3072,
            Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
        ),
        (
            "chacha20poly1305-prfsha256-x25519",
            "chacha20poly1305-esn",
            Suite::aead(Cipher::ChaCha20Poly1305),
            Prf::HmacSha256,
            DhGroup::Curve25519,
            Suite::aead(Cipher::ChaCha20Poly1305),
        ),
        (
            "aes128gcm16-prfsha384-ecp384",
            "aes128gcm16",
            Suite::aead(Cipher::AesGcm16_128),
            Prf::HmacSha384,
            DhGroup::EcpP384,
            Suite::aead(Cipher::AesGcm16_128),
        ),
    ] {
        let mut p = Pair::with_proposals(ike, esp);
        /* IKE_SA_INIT { SA, KE, Ni, N(NATD_S), N(NATD_D) } <--> { SA, KE, Nr, N(NATD_S), N(NATD_D) }
         * IKE_AUTH { SK { IDi, N(INITIAL_CONTACT), IDr, AUTH, SAi2, TSi, TSr } } <--> { SK { IDr, AUTH, SAr2, TSi, TSr } } */
        p.connect();
        assert_eq!(
            p.exchanges(),
            [
                (Dir::ToResponder, X::IKE_SA_INIT, false),
                (Dir::ToInitiator, X::IKE_SA_INIT, true),
                (Dir::ToResponder, X::IKE_AUTH, false),
                (Dir::ToInitiator, X::IKE_AUTH, true),
            ],
            "{ike}"
        );
        let (i_sa, r_sa) = both_established(&p);
        assert_eq!(i_sa.0, p.i.ike_sa(i_sa).unwrap().spis().0, "the initiator names its SA by SPIi");
        assert_eq!(p.i.ike_sa(i_sa).unwrap().spis(), p.r.ike_sa(r_sa).unwrap().spis());
        for events in [&p.i_events, &p.r_events] {
            let Some(Event::IkeSaEstablished { choice, seal, nat, .. }) =
                events.iter().find(|e| matches!(e, Event::IkeSaEstablished { .. }))
            else {
                unreachable!()
            };
            assert_eq!((choice.suite, choice.prf, choice.group), (suite, prf, group), "{ike}");
            assert!(
                seal.ike_sa_bytes_after < seal.ike_sa_bytes_before,
                "clear-and-seal frees trusted memory: {seal:?}"
            );
            assert!(seal.sealed_sk_d_len > 0 && seal.sealed_state_len > 0);
            assert!(!nat.any());
        }
        let (ci, cr) = (Pair::ready(&p.i_events), Pair::ready(&p.r_events));
        assert_eq!((ci.len(), cr.len()), (1, 1), "{ike}");
        let (ci, cr) = (&ci[0], &cr[0]);
        assert_eq!((ci.spi_inbound, ci.spi_outbound), (cr.spi_outbound, cr.spi_inbound));
        assert_eq!((ci.suite, cr.suite), (esp_suite, esp_suite));
        assert_eq!(ci.esn, esp.ends_with("-esn"));
        assert_eq!(ci.encapsulation, Encapsulation::Esp);
        // Narrowing: the responder allowed 198.18.0.0/16 for the initiator's side.
        assert_eq!(ci.local_ts, cr.remote_ts);
        assert_eq!(ci.remote_ts, cr.local_ts);
        assert_eq!(ci.local_ts[0].to_string(), "198.18.1.0-198.18.1.255");
        assert_eq!(cr.local_ts[0].to_string(), "198.18.2.0-198.18.2.255");
        assert_eq!(p.i.ike_sa(i_sa).unwrap().children(), std::slice::from_ref(ci));
        esp_round_trip(p.i.enclave_mut(), ci, p.r.enclave_mut(), cr);
        let (ci, cr) = (ci.clone(), cr.clone());
        esp_round_trip(p.r.enclave_mut(), &cr, p.i.enclave_mut(), &ci);
        assert!(p.i.ike_sa(i_sa).unwrap().sealed_sk_d().is_some());
        assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
    }
}

#[test]
fn invalid_ke_payload_makes_the_initiator_retry_with_the_responders_group() {
    let i = endpoint(
        &initiator_config("aes256gcm16-prfsha256-ecp256-x25519", "aes256gcm16"),
        PSK,
        Default::default(),
    );
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-x25519", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    /* IKE_SA_INIT { SA, KE(ecp256), Ni } --> <-- { N(INVALID_KE_PAYLOAD(x25519)) }
     * IKE_SA_INIT { SA, KE(x25519), Ni } --> <-- { SA, KE, Nr } ... */
    p.connect();
    let invalid_ke = p.log[1].message();
    let notify = invalid_ke.notify(NotifyType::INVALID_KE_PAYLOAD).unwrap();
    assert_eq!(notify.data, 31u16.to_be_bytes());
    assert_eq!(invalid_ke.header.responder_spi, 0, "stateless answer");
    assert_eq!(p.log.len(), 6);
    both_established(&p);
    assert_eq!(p.r.counters().refused(Refusal::InvalidKePayload), 1);
    let Some(Event::IkeSaEstablished { choice, .. }) = p.i_events.first() else { panic!("{:?}", p.i_events) };
    assert_eq!(choice.group, DhGroup::Curve25519);
}

#[test]
fn a_responder_prefers_the_group_the_initiators_ke_already_uses() {
    // Both groups are acceptable: no INVALID_KE round trip although ecp256 comes first for us.
    let i = endpoint(
        &initiator_config("aes256gcm16-prfsha256-x25519-ecp256", "aes256gcm16"),
        PSK,
        Default::default(),
    );
    let r = endpoint(
        &responder_config("aes256gcm16-prfsha256-ecp256-x25519", "aes256gcm16"),
        PSK,
        Default::default(),
    );
    let mut p = Pair::new(i, r);
    p.connect();
    assert_eq!(p.log.len(), 4);
    both_established(&p);
}

#[test]
fn cookies_are_required_above_the_half_open_threshold() {
    let config = EndpointConfig { cookie_threshold: 0, ..Default::default() };
    let i =
        endpoint(&initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let r = endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, config);
    let mut p = Pair::new(i, r);
    /* IKE_SA_INIT { SA, KE, Ni } --> <-- { N(COOKIE) }
     * IKE_SA_INIT { N(COOKIE), SA, KE, Ni } --> ... */
    p.connect();
    assert_eq!(p.log[1].message().notify(NotifyType::COOKIE).map(|n| n.data.len()), Some(33));
    let retry = p.log[2].message();
    assert!(
        matches!(retry.payloads().next(), Some(wire::ike::Payload::Notify(n)) if n.ty == NotifyType::COOKIE)
    );
    assert_eq!(retry.header.initiator_spi, p.log[0].message().header.initiator_spi, "same SPIi");
    both_established(&p);
    assert_eq!(p.r.counters().refused(Refusal::CookieRequired), 1);
    assert_eq!(p.r.half_open(), 0);

    // A forged or foreign cookie gets a fresh one, no state.
    let mut forged = p.log[2].message();
    if let wire::ike::Payload::Notify(n) = &mut forged.chain[0].payload {
        n.data[5] ^= 1;
    }
    forged.header.initiator_spi ^= 1;
    let w = &p.log[2];
    p.r.handle_datagram(p.now, w.from, w.to, &forged.to_vec().unwrap());
    assert_eq!(p.r.counters().refused(Refusal::CookieRequired), 2);
    assert_eq!(p.r.ike_sas().count(), 1);
}

#[test]
fn half_open_sas_are_counted_and_expire() {
    let config = EndpointConfig { cookie_threshold: 2, ..Default::default() };
    let r = endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, config);
    let i =
        endpoint(&initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    // The initiator's IKE_AUTH never arrives: three initiations leave three half-open SAs;
    // the third had to return a cookie first, since two were half-open already.
    p.filter = Box::new(|w| !(w.dir == Dir::ToResponder && w.message().header.exchange_type == X::IKE_AUTH));
    for _ in 0..3 {
        p.i.initiate(p.now, "to-b").unwrap();
        p.drive();
    }
    assert_eq!(p.r.half_open(), 3);
    assert_eq!(p.r.counters().refused(Refusal::CookieRequired), 1);
    p.filter = Box::new(|_| false);
    p.run_for(Duration::from_secs(31));
    assert_eq!(p.r.half_open(), 0);
    assert_eq!(p.r.ike_sas().count(), 0);
    assert_eq!(p.r.counters().dropped(DropReason::HalfOpenExpired), 3);
    assert_eq!(p.r.enclave().memory_report().ike_sas, 0, "the enclave forgot them too");
}

#[test]
fn a_lost_auth_request_is_retransmitted_with_backoff() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let mut lost = 0;
    p.filter = Box::new(move |w| {
        let auth_request = w.dir == Dir::ToResponder && w.message().header.exchange_type == X::IKE_AUTH;
        if auth_request && lost < 2 {
            lost += 1;
            return false;
        }
        true
    });
    p.connect();
    assert!(Pair::established(&p.i_events).is_empty());
    assert_eq!(p.advance(Duration::from_millis(1999)), 0, "not before the first timeout");
    assert_eq!(p.advance(Duration::from_millis(1)), 0, "first retransmission at 2 s is lost");
    assert_eq!(p.advance(Duration::from_millis(3999)), 0, "the interval doubles");
    assert_eq!(p.advance(Duration::from_millis(1)), 2, "second retransmission at 6 s gets through");
    both_established(&p);
    assert_eq!(p.i.counters().retransmits, 2);
}

#[test]
fn a_lost_response_is_answered_again_from_the_cache() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let mut lost = [false; 2];
    p.filter = Box::new(move |w| {
        let h = w.message().header;
        let slot = match h.exchange_type {
            X::IKE_SA_INIT => 0,
            X::IKE_AUTH => 1,
            _ => return true,
        };
        if w.dir == Dir::ToInitiator && !lost[slot] {
            lost[slot] = true;
            return false;
        }
        true
    });
    p.connect();
    p.run_for(Duration::from_secs(10));
    both_established(&p);
    assert_eq!(p.r.counters().responses_resent, 2, "IKE_SA_INIT and IKE_AUTH responses each resent once");
    assert_eq!(p.r.ike_sas().count(), 1, "a retransmitted IKE_SA_INIT creates no second SA");
    assert_eq!(Pair::ready(&p.r_events).len(), 1, "nor a second child SA");
    assert_eq!(p.r.enclave().memory_report().esp_sas, 2);
}

#[test]
fn an_unanswered_initiator_gives_up_after_its_schedule() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.filter = Box::new(|_| false);
    let sa = p.connect();
    p.run_for(Duration::from_secs(61));
    assert!(p.i_events.is_empty());
    p.run_for(Duration::from_secs(2));
    assert_eq!(
        p.i_events,
        [Event::IkeSaFailed { sa, connection: "to-b".into(), error: Error::Timeout { tries: 5 } }]
    );
    assert_eq!(p.log.len(), 5, "sent at 0, 2, 6, 14 and 30 s");
    assert_eq!(p.i.ike_sas().count(), 0);
    assert_eq!(p.i.enclave().memory_report().dh_values, 0, "the DH private value is gone");
}

#[test]
fn a_wrong_psk_fails_with_authentication_failed_on_both_sides() {
    let i = endpoint(
        &initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"),
        b"wrong secret",
        Default::default(),
    );
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    let sa = p.connect();
    /* IKE_AUTH { SK { IDi, AUTH(wrong) ... } } --> <-- { SK { N(AUTHENTICATION_FAILED) } } */
    assert_eq!(p.log.len(), 4);
    assert_eq!(
        p.i_events,
        [Event::IkeSaFailed {
            sa,
            connection: "to-b".into(),
            error: Error::AuthenticationFailed { side: Side::Remote }
        }]
    );
    assert!(matches!(
        p.r_events.as_slice(),
        [Event::IkeSaFailed { error: Error::AuthenticationFailed { side: Side::Local }, .. }]
    ));
    for ep in [&p.i, &p.r] {
        assert_eq!(ep.ike_sas().count(), 0);
        let memory = ep.enclave().memory_report();
        assert_eq!((memory.ike_sas, memory.esp_sas, memory.dh_values), (0, 0, 0));
    }
}

#[test]
fn an_initiator_refusing_the_responders_identity_tells_it() {
    let i_config = initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16")
        .replace("id = \"site-b.cloister.test\"", "id = \"someone-else.test\"");
    let i = endpoint(&i_config, PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    /* ... <-- IKE_AUTH { SK { IDr, AUTH, ... } }; INFORMATIONAL { SK { N(AUTHENTICATION_FAILED) } } --> */
    let exchanges = p.exchanges();
    assert_eq!(
        exchanges[4..],
        [(Dir::ToResponder, X::INFORMATIONAL, false), (Dir::ToInitiator, X::INFORMATIONAL, true)]
    );
    assert_eq!(p.i.counters().dropped(DropReason::UnknownSpi), 1, "the answer finds the SA gone");
    assert!(matches!(p.i_events.as_slice(), [Event::IkeSaFailed { error: Error::IdentityMismatch, .. }]));
    let deleted = p.r_events.iter().find_map(|e| match e {
        Event::IkeSaDeleted { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(deleted, Some(DeleteReason::PeerAuthenticationFailed));
    assert_eq!(p.r.ike_sas().count(), 0);
    assert_eq!(p.r.enclave().memory_report().esp_sas, 0);
}

#[test]
fn no_common_ike_proposal_gets_no_proposal_chosen() {
    let i = endpoint(&initiator_config("aes256-sha256-modp3072", "aes256gcm16"), PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    let sa = p.connect();
    assert!(p.log[1].message().notify(NotifyType::NO_PROPOSAL_CHOSEN).is_some());
    assert_eq!(
        p.i_events,
        [Event::IkeSaFailed {
            sa,
            connection: "to-b".into(),
            error: Error::NoProposalChosen { side: Side::Remote }
        }]
    );
    assert_eq!(p.r.counters().refused(Refusal::NoProposalChosen), 1);
    assert_eq!(p.r.ike_sas().count(), 0);
    assert_eq!(p.i.enclave().memory_report().dh_values, 0);
}

#[test]
fn no_common_esp_proposal_keeps_the_ike_sa_without_a_child() {
    let i =
        endpoint(&initiator_config("aes256gcm16-prfsha256-ecp256", "aes128-sha256"), PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    let (i_sa, r_sa) = both_established(&p);
    let failed = |events: &[Event]| {
        events.iter().find_map(|e| match e {
            Event::ChildSaFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
    };
    assert_eq!(failed(&p.i_events), Some(Error::NoProposalChosen { side: Side::Remote }));
    assert_eq!(failed(&p.r_events), Some(Error::NoProposalChosen { side: Side::Local }));
    assert!(p.i.ike_sa(i_sa).unwrap().children().is_empty());
    assert!(p.r.ike_sa(r_sa).unwrap().children().is_empty());
    assert_eq!(p.r.enclave().memory_report().esp_sas, 0);
}

#[test]
fn disjoint_traffic_selectors_get_ts_unacceptable() {
    let i_config = initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16")
        .replace("198.18.2.0/24", "198.19.0.0/16");
    let i = endpoint(&i_config, PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    both_established(&p);
    assert!(p.i_events.iter().any(|e| matches!(
        e,
        Event::ChildSaFailed { error: Error::TsUnacceptable { side: Side::Remote }, .. }
    )));
}

#[test]
fn malformed_datagrams_are_counted_drops_and_never_panic() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let (i_sa, _) = {
        p.connect();
        both_established(&p)
    };
    let valid: Vec<_> = p.log.clone();
    let before = (p.i.counters().dropped_total(), p.r.counters().dropped_total());
    let mut fed = 0u64;
    let mut feed = |p: &mut Pair, w: &util::Wire, bytes: &[u8]| {
        fed += 1;
        match w.dir {
            Dir::ToResponder => p.r.handle_datagram(p.now, w.from, w.to, bytes),
            Dir::ToInitiator => p.i.handle_datagram(p.now, w.from, w.to, bytes),
        }
    };
    for w in &valid {
        // Every truncation, every single-bit flip of the header and SK tail, random junk.
        for len in 0..w.contents.len() {
            feed(&mut p, w, &w.contents[..len]);
        }
        let n = w.contents.len();
        for at in (0..28).chain(n.saturating_sub(40)..n) {
            let mut flipped = w.contents.clone();
            flipped[at] ^= 0x10;
            feed(&mut p, w, &flipped);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..50 {
            let junk: Vec<u8> = (0..(seed % 300))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed.to_be_bytes()[0]
                })
                .collect();
            feed(&mut p, w, &junk);
        }
    }
    // Answers to garbage may go out (e.g. INVALID_SYNTAX to a broken IKE_SA_INIT request);
    // deliver them and make sure nothing changed for the established SA.
    p.drive();
    let after = (p.i.counters().dropped_total(), p.r.counters().dropped_total());
    assert!(after.0 > before.0 && after.1 > before.1, "{before:?} {after:?}");
    assert!(p.r.counters().dropped(DropReason::IntegrityCheckFailed) > 0);
    assert!(p.r.counters().dropped(DropReason::Malformed) > 0);
    assert_eq!(p.i.ike_sa(i_sa).unwrap().state(), IkeSaState::Established);
    assert!(fed > 1000);
    // The SA still works: a liveness check goes through.
    p.i.check_liveness(p.now, i_sa).unwrap();
    assert_eq!(p.drive(), 2);
    assert_eq!(p.i.ike_sa(i_sa).unwrap().state(), IkeSaState::Established);
}

#[test]
fn a_nat_moves_ike_to_port_4500_and_esp_into_udp() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.nat = true;
    p.connect();
    let (i_sa, r_sa) = both_established(&p);
    let (i_nat, r_nat) = (p.i.ike_sa(i_sa).unwrap().nat(), p.r.ike_sa(r_sa).unwrap().nat());
    assert!(i_nat.local_behind_nat && !i_nat.remote_behind_nat, "{i_nat:?}");
    assert!(r_nat.remote_behind_nat && !r_nat.local_behind_nat, "{r_nat:?}");
    // IKE_AUTH and on: port 4500 with the non-ESP marker.
    for w in &p.log[2..] {
        assert_eq!((w.from.port() % 10_000, w.to.port() % 10_000), (4500, 4500), "{w:?}");
        assert_eq!(&w.contents[..4], &[0; 4]);
    }
    let (ci, cr) = (&Pair::ready(&p.i_events)[0], &Pair::ready(&p.r_events)[0]);
    assert_eq!(ci.encapsulation, Encapsulation::Udp { local_port: 4500, remote_port: 4500 });
    assert_eq!(cr.encapsulation, Encapsulation::Udp { local_port: 4500, remote_port: 14500 });
    assert_eq!(cr.remote.to_string(), "198.18.100.1:14500", "the responder talks to the NAT's mapping");
    // Later exchanges use the NAT mapping too.
    p.r.check_liveness(p.now, r_sa).unwrap();
    assert_eq!(p.drive(), 2);
}

#[test]
fn encap_forces_udp_encapsulation_without_a_nat() {
    let i_config = initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16").replacen(
        "proposals =",
        "encap = true\nproposals =",
        1,
    );
    let i = endpoint(&i_config, PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    both_established(&p);
    for events in [&p.i_events, &p.r_events] {
        assert!(matches!(Pair::ready(events)[0].encapsulation, Encapsulation::Udp { .. }));
    }
}

#[test]
fn a_child_sa_is_deleted_from_either_side() {
    for from_initiator in [true, false] {
        let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
        p.connect();
        let (i_sa, r_sa) = both_established(&p);
        let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
        /* INFORMATIONAL { SK { D(ESP, spi) } } --> <-- { SK { D(ESP, spi') } } */
        if from_initiator {
            p.i.delete_child(p.now, i_sa, ci.spi_inbound).unwrap();
        } else {
            p.r.delete_child(p.now, r_sa, cr.spi_inbound).unwrap();
        }
        assert_eq!(p.drive(), 2);
        for (events, child) in [(&p.i_events, &ci), (&p.r_events, &cr)] {
            assert!(events.contains(&Event::ChildSaDeleted {
                sa: if child == &ci { i_sa } else { r_sa },
                child: child.clone()
            }));
        }
        assert!(p.i.ike_sa(i_sa).unwrap().children().is_empty());
        assert!(p.r.ike_sa(r_sa).unwrap().children().is_empty());
        assert_eq!(p.i.enclave().memory_report().esp_sas + p.r.enclave().memory_report().esp_sas, 0);
        assert_eq!(p.r.ike_sa(r_sa).unwrap().state(), IkeSaState::Established, "the IKE SA stays");
        assert!(matches!(p.i.delete_child(p.now, i_sa, ci.spi_inbound), Err(Error::UnknownChildSa { .. })));
    }
}

#[test]
fn an_ike_sa_is_deleted_from_either_side_with_its_children() {
    for from_initiator in [true, false] {
        let mut p = Pair::with_proposals("aes256-sha256-modp3072", "aes256-sha256");
        p.connect();
        let (i_sa, r_sa) = both_established(&p);
        /* INFORMATIONAL { SK { D(IKE) } } --> <-- { SK { } } */
        if from_initiator {
            p.i.delete_ike(p.now, i_sa).unwrap();
        } else {
            p.r.delete_ike(p.now, r_sa).unwrap();
        }
        assert_eq!(p.drive(), 2);
        let (requester, peer) =
            if from_initiator { (&p.i_events, &p.r_events) } else { (&p.r_events, &p.i_events) };
        for (events, reason) in [(requester, DeleteReason::Requested), (peer, DeleteReason::PeerDeleted)] {
            let tail: Vec<_> = events.iter().rev().take(2).collect();
            assert!(matches!(tail[0], Event::IkeSaDeleted { reason: r, .. } if *r == reason), "{events:?}");
            assert!(matches!(tail[1], Event::ChildSaDeleted { .. }), "children first: {events:?}");
        }
        for ep in [&p.i, &p.r] {
            assert_eq!(ep.ike_sas().count(), 0);
            let m = ep.enclave().memory_report();
            assert_eq!((m.ike_sas, m.esp_sas), (0, 0));
        }
        assert!(matches!(p.i.delete_ike(p.now, i_sa), Err(Error::UnknownIkeSa { .. })));
    }
}

#[test]
fn liveness_checks_run_after_silence_and_a_dead_peer_is_removed() {
    let i_config = initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16").replacen(
        "proposals =",
        "dpd_delay = \"30s\"\nproposals =",
        1,
    );
    let i = endpoint(&i_config, PSK, Default::default());
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    let (i_sa, _) = both_established(&p);
    let sent = p.log.len();
    p.run_for(Duration::from_secs(29));
    assert_eq!(p.log.len(), sent, "no check before dpd_delay");
    p.run_for(Duration::from_secs(2));
    /* INFORMATIONAL { SK { } } --> <-- { SK { } } */
    assert_eq!(
        p.exchanges()[sent..],
        [(Dir::ToResponder, X::INFORMATIONAL, false), (Dir::ToInitiator, X::INFORMATIONAL, true)]
    );
    // Cut the link: the next check goes unanswered and the peer is declared dead.
    p.filter = Box::new(|_| false);
    p.run_for(Duration::from_secs(30 + 62 + 1));
    let tail: Vec<_> = p.i_events.iter().rev().take(2).collect();
    assert!(
        matches!(tail[0], Event::IkeSaDeleted { sa, reason: DeleteReason::PeerUnreachable } if *sa == i_sa)
    );
    assert!(matches!(tail[1], Event::ChildSaDeleted { .. }));
    assert_eq!(p.i.ike_sas().count(), 0);
    assert_eq!(p.i.enclave().memory_report().esp_sas, 0);
}

#[test]
fn requests_outside_the_window_are_dropped_and_retransmissions_answered() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.connect();
    let (i_sa, _) = both_established(&p);
    p.i.check_liveness(p.now, i_sa).unwrap();
    p.drive();
    let request = p.log[p.log.len() - 2].clone();
    assert_eq!(request.message().header.message_id, 2);
    // The same request again: the cached answer, not a second processing.
    p.r.handle_datagram(p.now, request.from, request.to, &request.contents);
    assert_eq!(p.r.counters().responses_resent, 1);
    assert!(p.r.poll_transmit().is_some());
    // The IKE_AUTH request (ID 1) is now outside the window of one: dropped.
    let auth = p.log[2].clone();
    p.r.handle_datagram(p.now, auth.from, auth.to, &auth.contents);
    assert_eq!(p.r.counters().dropped(DropReason::OutOfWindow), 1);
    // A response nobody asked for is dropped.
    let response = p.log[p.log.len() - 1].clone();
    p.i.handle_datagram(p.now, response.from, response.to, &response.contents);
    assert_eq!(p.i.counters().dropped(DropReason::UnexpectedResponse), 1);
}

#[test]
fn commands_check_their_arguments() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    assert!(matches!(p.i.initiate(p.now, "nope"), Err(Error::UnknownConnection { .. })));
    assert!(matches!(p.r.initiate(p.now, "from-a"), Err(Error::NoRemoteAddress { .. })));
    let sa = p.i.initiate(p.now, "to-b").unwrap();
    assert!(matches!(p.i.delete_ike(p.now, sa), Err(Error::WrongState { .. })));
    assert!(matches!(p.i.delete_ike(p.now, SaId(7)), Err(Error::UnknownIkeSa { .. })));
    let conn =
        cloister_ike::Config::from_toml(&initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"))
            .unwrap()
            .connections
            .remove(0);
    assert!(matches!(p.i.add_connection(conn.clone()), Err(Error::DuplicateConnection { .. })));
    let mut lonely = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16").i;
    let mut other = conn;
    other.name = "other".into();
    other.secret = "missing".into();
    assert!(matches!(lonely.add_connection(other), Err(Error::UnknownSecret { .. })));
    assert_eq!(p.i.ike_sa(sa).unwrap().role(), Role::Initiator);
}

#[test]
fn debug_output_never_shows_the_psk() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.connect();
    both_established(&p);
    let text = format!("{:?} {:?} {:?} {:?}", p.i, p.r, p.i_events, p.r_events);
    let psk = String::from_utf8_lossy(PSK);
    assert!(!text.contains(psk.as_ref()));
    let hex: String = PSK.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!text.contains(&hex));
    let bytes = format!("{:?}", PSK.to_vec());
    assert!(!text.contains(&bytes[1..bytes.len() - 1]));
}

/// The rekeyed pairs of (old inbound SPI, new child) of an endpoint's events.
fn rekeyed(events: &[Event]) -> Vec<(u32, cloister_ike::ChildSa)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ChildSaRekeyed { old_spi_inbound, child, .. } => Some((*old_spi_inbound, child.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_child_sa_is_rekeyed_from_either_side_with_and_without_pfs() {
    for (esp, pfs_group, from_initiator) in [
        ("aes256gcm16", None, true),
        ("aes256gcm16-ecp256", Some(19u16), false),
        ("aes128-sha256-x25519-esn", Some(31), true),
    ] {
        let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", esp);
        p.connect();
        let (i_sa, r_sa) = both_established(&p);
        let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
        let sent = p.log.len();
        /* CREATE_CHILD_SA { SK { N(REKEY_SA), SA, Ni, [KEi], TSi, TSr } } --> <-- { SK { SA, Nr, [KEr], TSi, TSr } }
         * INFORMATIONAL { SK { D(ESP, old) } } --> <-- { SK { D(ESP, old') } } */
        if from_initiator {
            p.i.rekey_child(p.now, i_sa, ci.spi_inbound).unwrap();
        } else {
            p.r.rekey_child(p.now, r_sa, cr.spi_inbound).unwrap();
        }
        p.drive();
        let requester = if from_initiator { Dir::ToResponder } else { Dir::ToInitiator };
        let responder = if from_initiator { Dir::ToInitiator } else { Dir::ToResponder };
        assert_eq!(
            p.exchanges()[sent..],
            [
                (requester, X::CREATE_CHILD_SA, false),
                (responder, X::CREATE_CHILD_SA, true),
                (requester, X::INFORMATIONAL, false),
                (responder, X::INFORMATIONAL, true),
            ],
            "{esp}"
        );
        let request = p.log[sent].message();
        assert_eq!(
            request.header.message_id,
            if from_initiator { 2 } else { 0 },
            "each side counts its own requests"
        );
        let (ni, nr) = (rekeyed(&p.i_events), rekeyed(&p.r_events));
        assert_eq!((ni.len(), nr.len()), (1, 1), "{esp}: {:?} {:?}", p.i_events, p.r_events);
        let ((old_i, new_i), (old_r, new_r)) = (&ni[0], &nr[0]);
        assert_eq!((*old_i, *old_r), (ci.spi_inbound, cr.spi_inbound));
        assert_eq!((new_i.spi_inbound, new_i.spi_outbound), (new_r.spi_outbound, new_r.spi_inbound));
        assert_ne!(new_i.spi_inbound, ci.spi_inbound);
        assert_eq!((new_i.suite, new_i.esn), (ci.suite, ci.esn));
        assert_eq!((&new_i.local_ts, &new_i.remote_ts), (&ci.local_ts, &ci.remote_ts), "same selectors");
        // The rekey's initiator moves outbound traffic at once, the responder on the Delete.
        let switches = |events: &[Event]| {
            events
                .iter()
                .filter_map(|e| match e {
                    Event::ChildSaRekeyed { outbound, .. } => Some(*outbound),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let (now_side, later_side) =
            if from_initiator { (&p.i_events, &p.r_events) } else { (&p.r_events, &p.i_events) };
        assert_eq!(switches(now_side), [OutboundSwitch::Now]);
        assert_eq!(switches(later_side), [OutboundSwitch::OnPeerDelete]);
        // The old SAs retire: their inbound sides keep working for the grace period...
        let until = p.now + RETIRE_GRACE;
        assert!(p.i_events.contains(&Event::ChildSaRetired { sa: i_sa, child: ci.clone(), until }));
        assert!(p.r_events.contains(&Event::ChildSaRetired { sa: r_sa, child: cr.clone(), until }));
        assert!(!p.i_events.iter().chain(&p.r_events).any(|e| matches!(e, Event::ChildSaDeleted { .. })));
        esp_round_trip(p.r.enclave_mut(), &cr, p.i.enclave_mut(), &ci);
        assert_eq!(p.i.enclave().memory_report().esp_sas, 4, "{esp}");
        assert_eq!(p.i.poll_timeout(), Some(until), "{esp}");
        // ... and are deleted after it.
        p.advance(RETIRE_GRACE);
        assert!(p.i_events.contains(&Event::ChildSaDeleted { sa: i_sa, child: ci.clone() }));
        assert!(p.r_events.contains(&Event::ChildSaDeleted { sa: r_sa, child: cr.clone() }));
        assert_eq!(p.i.ike_sa(i_sa).unwrap().children(), std::slice::from_ref(new_i));
        assert_eq!(p.r.ike_sa(r_sa).unwrap().children(), std::slice::from_ref(new_r));
        esp_round_trip(p.i.enclave_mut(), new_i, p.r.enclave_mut(), new_r);
        esp_round_trip(p.r.enclave_mut(), new_r, p.i.enclave_mut(), new_i);
        for ep in [&p.i, &p.r] {
            let m = ep.enclave().memory_report();
            assert_eq!((m.esp_sas, m.dh_values), (2, 0), "{esp}");
        }
        // With PFS the request carries KEi and the answer KEr (the initiator refuses an
        // answer without it), so the larger request shows the extra public value.
        let (request_len, delete_len) = (p.log[sent].contents.len(), p.log[sent + 2].contents.len());
        if let Some(g) = pfs_group {
            let public = DhGroup::from_id(g).unwrap().public_len();
            assert!(request_len > delete_len + public, "{esp}: {request_len} vs {delete_len}");
        }
        assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
    }
}

#[test]
fn rekeying_needs_a_known_child_and_an_established_sa() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let sa = p.i.initiate(p.now, "to-b").unwrap();
    assert!(matches!(p.i.rekey_child(p.now, sa, 1234), Err(Error::WrongState { .. })));
    p.drive();
    let (i_sa, _) = both_established(&p);
    assert!(matches!(p.i.rekey_child(p.now, i_sa, 1234), Err(Error::UnknownChildSa { spi: 1234 })));
}

#[test]
fn a_pfs_mismatch_fails_the_rekey_but_keeps_the_old_child() {
    let i = endpoint(
        &initiator_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16-ecp256"),
        PSK,
        Default::default(),
    );
    let r =
        endpoint(&responder_config("aes256gcm16-prfsha256-ecp256", "aes256gcm16"), PSK, Default::default());
    let mut p = Pair::new(i, r);
    p.connect();
    let (i_sa, r_sa) = both_established(&p);
    let ci = Pair::ready(&p.i_events)[0].clone();
    p.i.rekey_child(p.now, i_sa, ci.spi_inbound).unwrap();
    p.drive();
    assert!(p.i_events.iter().any(|e| matches!(
        e,
        Event::ChildSaFailed { error: Error::NoProposalChosen { side: Side::Remote }, .. }
    )));
    assert_eq!(p.i.ike_sa(i_sa).unwrap().children(), std::slice::from_ref(&ci));
    assert_eq!(p.r.ike_sa(r_sa).unwrap().children().len(), 1);
    for ep in [&p.i, &p.r] {
        let m = ep.enclave().memory_report();
        assert_eq!((m.esp_sas, m.dh_values), (2, 0));
    }
}

/// The `outbound` switches of an endpoint's rekey events, by new inbound SPI.
fn switches(events: &[Event]) -> Vec<(u32, OutboundSwitch)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ChildSaRekeyed { child, outbound, .. } => Some((child.spi_inbound, *outbound)),
            _ => None,
        })
        .collect()
}

#[test]
fn simultaneous_child_rekeys_keep_one_new_sa_and_lose_nothing() {
    for esp in ["aes256gcm16", "aes256gcm16-ecp256"] {
        let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", esp);
        p.connect();
        let (i_sa, r_sa) = both_established(&p);
        let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
        let sent = p.log.len();
        /* CREATE_CHILD_SA requests cross on the wire (§2.8.1); both are answered. */
        p.i.rekey_child(p.now, i_sa, ci.spi_inbound).unwrap();
        p.r.rekey_child(p.now, r_sa, cr.spi_inbound).unwrap();
        p.drive();
        let (si, sr) = (switches(&p.i_events), switches(&p.r_events));
        assert_eq!((si.len(), sr.len()), (2, 2), "{esp}: {:?} {:?}", p.i_events, p.r_events);
        // Exactly one side made the redundant SA (it never carries outbound traffic); the
        // other moved its traffic to its own new SA at once.
        let never: Vec<_> = si.iter().chain(&sr).filter(|(_, s)| *s == OutboundSwitch::Never).collect();
        let now: Vec<_> = si.iter().chain(&sr).filter(|(_, s)| *s == OutboundSwitch::Now).collect();
        assert_eq!((never.len(), now.len()), (1, 1), "{esp}: {si:?} {sr:?}");
        // Each side deleted one SA: the winner the old one, the loser its redundant one.
        let informational = p.exchanges()[sent..].iter().filter(|e| e.1 == X::INFORMATIONAL && !e.2).count();
        assert_eq!(informational, 2, "{esp}: {:?}", &p.exchanges()[sent..]);
        // Both the old SA and the redundant one retire on both sides, then go.
        let retired =
            |events: &[Event]| events.iter().filter(|e| matches!(e, Event::ChildSaRetired { .. })).count();
        assert_eq!((retired(&p.i_events), retired(&p.r_events)), (2, 2), "{esp}");
        p.advance(RETIRE_GRACE);
        let (ki, kr) =
            (p.i.ike_sa(i_sa).unwrap().children().to_vec(), p.r.ike_sa(r_sa).unwrap().children().to_vec());
        assert_eq!((ki.len(), kr.len()), (1, 1), "{esp}: one child survives: {ki:?} {kr:?}");
        let (survivor_i, survivor_r) = (&ki[0], &kr[0]);
        assert_eq!(
            (survivor_i.spi_inbound, survivor_i.spi_outbound),
            (survivor_r.spi_outbound, survivor_r.spi_inbound)
        );
        assert_ne!(survivor_i.spi_inbound, ci.spi_inbound);
        assert!(never
            .iter()
            .all(|(spi, _)| *spi != survivor_i.spi_inbound && *spi != survivor_r.spi_inbound));
        esp_round_trip(p.i.enclave_mut(), survivor_i, p.r.enclave_mut(), survivor_r);
        esp_round_trip(p.r.enclave_mut(), survivor_r, p.i.enclave_mut(), survivor_i);
        for ep in [&p.i, &p.r] {
            let m = ep.enclave().memory_report();
            assert_eq!((m.esp_sas, m.dh_values), (2, 0), "{esp}: every other SA's keys are gone");
        }
        assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
    }
}

#[test]
fn a_rekey_of_a_child_being_deleted_is_told_to_wait() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.connect();
    let (i_sa, r_sa) = both_established(&p);
    let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
    let deliver = |to: &mut cloister_ike::Endpoint<_>, t: &cloister_ike::Transmit, now| {
        to.handle_datagram(now, t.local, t.remote, &t.contents);
    };
    /* Both rekey the child; the responder's request is slow on the wire. */
    p.i.rekey_child(p.now, i_sa, ci.spi_inbound).unwrap();
    p.r.rekey_child(p.now, r_sa, cr.spi_inbound).unwrap();
    let (req_i, req_r) = (p.i.poll_transmit().unwrap(), p.r.poll_transmit().unwrap());
    /* CREATE_CHILD_SA --> (a collision for the responder) <-- CREATE_CHILD_SA answer */
    deliver(&mut p.r, &req_i, p.now);
    let resp_i = p.r.poll_transmit().unwrap();
    deliver(&mut p.i, &resp_i, p.now);
    /* The initiator's rekey is complete: it deletes the old child, INFORMATIONAL { D } --> */
    let delete = p.i.poll_transmit().expect("the Delete of the old child");
    /* <-- the slow CREATE_CHILD_SA for the child being deleted: N(TEMPORARY_FAILURE) --> */
    deliver(&mut p.i, &req_r, p.now);
    let refusal = p.i.poll_transmit().expect("an answer");
    deliver(&mut p.r, &refusal, p.now);
    deliver(&mut p.r, &delete, p.now);
    p.run_for(Duration::from_secs(10));
    // Had the initiator answered with a new SA, the responder would report a second rekey;
    // it was told TEMPORARY_FAILURE instead, retried later, found its child gone and gave up.
    assert!(!p.r_events.iter().any(|e| matches!(e, Event::ChildSaFailed { .. })), "{:?}", p.r_events);
    assert_eq!(switches(&p.r_events).len(), 1, "only the initiator's rekey made an SA");
    let (ki, kr) = (p.i.ike_sa(i_sa).unwrap().children(), p.r.ike_sa(r_sa).unwrap().children());
    assert_eq!((ki.len(), kr.len()), (1, 1));
    assert_eq!(ki[0].spi_inbound, kr[0].spi_outbound);
    for ep in [&p.i, &p.r] {
        assert_eq!(ep.enclave().memory_report().esp_sas, 2);
    }
    assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
}

#[test]
fn initial_contact_from_a_restarted_peer_drops_its_old_ike_sas_without_a_delete() {
    let (ike, esp) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let mut p = Pair::with_proposals(ike, esp);
    p.connect();
    // A second IKE SA of the same connection while the first is up: it must not claim to be
    // the only one (no INITIAL_CONTACT), so the responder keeps both.
    p.connect();
    let old = Pair::established(&p.r_events);
    assert_eq!(old.len(), 2, "{:?}", p.r_events);
    for sa in &old {
        assert_eq!(p.r.ike_sa(*sa).unwrap().state(), IkeSaState::Established);
    }
    assert!(!p.r_events.iter().any(|e| matches!(e, Event::IkeSaDeleted { .. })));

    // The initiator restarts (a fresh engine and enclave, same identity) and connects again:
    // its IKE_AUTH says INITIAL_CONTACT, and the responder drops both old IKE SAs and their
    // child SAs at once, without an exchange the lost peer could not answer.
    p.i = endpoint(&initiator_config(ike, esp), PSK, EndpointConfig::default());
    p.i_events.clear();
    let before = p.log.len();
    p.connect();
    let exchanges: Vec<X> = p.log[before..].iter().map(|w| w.message().header.exchange_type).collect();
    assert_eq!(exchanges, [X::IKE_SA_INIT, X::IKE_SA_INIT, X::IKE_AUTH, X::IKE_AUTH]);
    let new = Pair::established(&p.r_events);
    assert_eq!(new.len(), 3);
    assert_eq!(p.r.ike_sa(new[2]).unwrap().state(), IkeSaState::Established);
    for sa in &old {
        assert!(p.r.ike_sa(*sa).is_none(), "old IKE SA {sa:?} kept");
        assert!(
            p.r_events.iter().any(
                |e| matches!(e, Event::IkeSaDeleted { sa: s, reason: DeleteReason::Superseded } if s == sa)
            ),
            "{:?}",
            p.r_events
        );
    }
    let deleted_children = p.r_events.iter().filter(|e| matches!(e, Event::ChildSaDeleted { .. })).count();
    assert_eq!(deleted_children, 2, "{:?}", p.r_events);
    // The new tunnel works.
    let (ci, cr) = (Pair::ready(&p.i_events), Pair::ready(&p.r_events));
    let cr = cr.last().unwrap().clone();
    esp_round_trip(p.i.enclave_mut(), &ci[0], p.r.enclave_mut(), &cr);
}

#[test]
fn with_unique_never_initial_contact_replaces_nothing() {
    let (ike, esp) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let responder = responder_config(ike, esp)
        .replace("remote_addrs = [\"%any\"]\n", "remote_addrs = [\"%any\"]\nunique = \"never\"\n");
    let mut p = Pair::new(
        endpoint(&initiator_config(ike, esp), PSK, EndpointConfig::default()),
        endpoint(&responder, PSK, EndpointConfig::default()),
    );
    p.connect();
    // A restarted initiator with the same identity: both IKE SAs stay at the responder.
    p.i = endpoint(&initiator_config(ike, esp), PSK, EndpointConfig::default());
    p.connect();
    let all = Pair::established(&p.r_events);
    assert_eq!(all.len(), 2);
    for sa in all {
        assert_eq!(p.r.ike_sa(sa).unwrap().state(), IkeSaState::Established);
    }
    assert!(!p.r_events.iter().any(|e| matches!(e, Event::IkeSaDeleted { .. })), "{:?}", p.r_events);
    let bad = responder_config(ike, esp)
        .replace("remote_addrs = [\"%any\"]\n", "remote_addrs = [\"%any\"]\nunique = \"replace\"\n");
    let err = cloister_ike::Config::from_toml(&bad).unwrap_err().to_string();
    assert!(err.contains("unique") && err.contains("never"), "{err}");
}

/// §2.21.1 leaves a responder that cannot serve free to stay silent; a notify such as
/// INVALID_SYNTAX would tell the initiator to give up (strongSwan does) for a failure that
/// is ours (here a full IKE SA table, as with an enclave that died).
#[test]
fn a_responder_that_cannot_serve_stays_silent_rather_than_refuse() {
    let (ike, esp) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let psk = b"a shared secret of the tenant";
    let full =
        start_enclave_limited(1, enclave_core::Limits { max_ike_sas: 1, ..enclave_core::Limits::default() });
    let mut p = Pair::new(
        endpoint(&initiator_config(ike, esp), psk, EndpointConfig::default()),
        endpoint_on(full, &responder_config(ike, esp), psk, EndpointConfig::default()),
    );
    p.connect();
    both_established(&p);
    let before = p.log.len();
    p.i.initiate(p.now, "to-b").unwrap();
    p.drive();
    assert_eq!(p.log.len(), before + 1, "the second IKE_SA_INIT gets no answer");
    let r = p.r.counters();
    assert_eq!(r.dropped(DropReason::Unavailable), 1);
    assert_eq!(r.refused(Refusal::InvalidSyntax), 0);
    // The initiator keeps trying on its schedule.
    p.advance(Duration::from_secs(2));
    assert_eq!(p.i.counters().retransmits, 1);
    assert_eq!(p.r.counters().dropped(DropReason::Unavailable), 2);
}

/// A connection with several children brings every one up as initiator: the first in
/// IKE_AUTH, each other in a CREATE_CHILD_SA of its own, with its own selectors and keys.
#[test]
fn an_initiator_brings_up_every_child_of_its_connection() {
    let (ike, esp) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let extra = |conn: &str, name: &str, local: &str, remote: &str| {
        format!(
            "[connections.{conn}.children.{name}]\nlocal_ts = [\"{local}\"]\nremote_ts = [\"{remote}\"]\nesp_proposals = [\"{esp}\"]\n"
        )
    };
    let mut i_conf = initiator_config(ike, esp);
    i_conf.push_str(&extra("to-b", "red", "198.18.3.0/24", "198.18.4.0/24"));
    i_conf.push_str(&extra("to-b", "blue", "198.18.5.0/24", "198.18.6.0/24"));
    let mut r_conf = responder_config(ike, esp);
    r_conf.push_str(&extra("from-a", "red", "198.18.4.0/24", "198.18.3.0/24"));
    r_conf.push_str(&extra("from-a", "blue", "198.18.6.0/24", "198.18.5.0/24"));
    let psk = b"a shared secret of the tenant";
    let mut p = Pair::new(
        endpoint(&i_conf, psk, EndpointConfig::default()),
        endpoint(&r_conf, psk, EndpointConfig::default()),
    );
    p.connect();
    both_established(&p);
    let (ci, cr) = (Pair::ready(&p.i_events), Pair::ready(&p.r_events));
    assert_eq!(ci.len(), 3, "{:#?}", p.i_events);
    assert_eq!(cr.len(), 3, "{:#?}", p.r_events);
    let created = p.exchanges().iter().filter(|(_, x, _)| *x == X::CREATE_CHILD_SA).count();
    assert_eq!(created, 4, "two CREATE_CHILD_SA exchanges after IKE_AUTH");
    let mut selectors: Vec<String> = ci.iter().map(|c| format!("{:?}", c.local_ts)).collect();
    selectors.sort();
    selectors.dedup();
    assert_eq!(selectors.len(), 3, "each child its own selectors: {selectors:?}");
    for c in &ci {
        let peer = cr.iter().find(|r| r.spi_outbound == c.spi_inbound).expect("the responder's half");
        esp_round_trip(p.i.enclave_mut(), c, p.r.enclave_mut(), peer);
    }
}

/// The responder's connections for three sites that share its address: each site has its
/// own identity, PSK and selectors; which one a request is for shows only in IKE_AUTH.
fn three_site_responder(ike: &str, esp: &str) -> cloister_ike::Endpoint<enclave_core::InlineEnclave> {
    let mut toml = String::new();
    for (n, site) in [(11, "a"), (12, "c"), (13, "d")] {
        toml.push_str(&format!(
            r#"
[connections.site-{site}]
local_addrs = ["{r}"]
remote_addrs = ["%any"]
proposals = ["{ike}"]
local = {{ auth = "psk", id = "site-b.cloister.test", secret = "psk-{site}" }}
remote = {{ auth = "psk", id = "site-{site}.cloister.test" }}
children.net = {{ local_ts = ["198.18.2.0/24"], remote_ts = ["198.18.{n}.0/24"], esp_proposals = ["{esp}"] }}
"#,
            r = util::R_ADDR
        ));
    }
    let mut enclave = util::start_enclave(1);
    let mut ep_secrets = Vec::new();
    for site in ["a", "c", "d"] {
        let psk = format!("the PSK of site {site}");
        ep_secrets.push((
            site,
            util::provision(&mut enclave, enclave_core::SecretKind::PreSharedKey, psk.as_bytes()),
        ));
    }
    let mut ep = cloister_ike::Endpoint::new(enclave, EndpointConfig::default());
    for (site, handle) in ep_secrets {
        ep.add_secret(&format!("psk-{site}"), handle);
    }
    for conn in cloister_ike::Config::from_toml(&toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep
}

/// Site `site` (on the initiator's address, as all of them) with its PSK, naming the
/// responder's identity (IDr).
fn site_initiator(
    site: &str,
    n: u8,
    psk: &str,
    ike: &str,
    esp: &str,
) -> cloister_ike::Endpoint<enclave_core::InlineEnclave> {
    let toml = format!(
        r#"
[connections.to-b]
local_addrs = ["{i}"]
remote_addrs = ["{r}"]
proposals = ["{ike}"]
local = {{ auth = "psk", id = "site-{site}.cloister.test", secret = "psk" }}
remote = {{ auth = "psk", id = "site-b.cloister.test" }}
children.net = {{ local_ts = ["198.18.{n}.0/24"], remote_ts = ["198.18.2.0/24"], esp_proposals = ["{esp}"] }}
"#,
        i = util::I_ADDR,
        r = util::R_ADDR
    );
    endpoint(&toml, psk.as_bytes(), EndpointConfig::default())
}

/// Several connections on one responder address: IKE_SA_INIT picks the first by address
/// and proposal, and IKE_AUTH switches to the one whose remote identity is the initiator's
/// (with that connection's PSK and selectors), as strongSwan does; an identity none of them
/// accepts is refused.
#[test]
fn a_responder_chooses_among_connections_on_one_address_by_identity() {
    let (ike, esp) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    for (site, n) in [("a", 11), ("c", 12), ("d", 13)] {
        let psk = format!("the PSK of site {site}");
        let mut p = Pair::new(site_initiator(site, n, &psk, ike, esp), three_site_responder(ike, esp));
        p.connect();
        both_established(&p);
        let chosen = p.r_events.iter().find_map(|e| match e {
            Event::IkeSaEstablished { connection, .. } => Some(connection.clone()),
            _ => None,
        });
        assert_eq!(chosen.as_deref(), Some(format!("site-{site}").as_str()));
        let (ci, cr) = (Pair::ready(&p.i_events), Pair::ready(&p.r_events));
        assert_eq!((ci.len(), cr.len()), (1, 1));
        assert_eq!(
            format!("{:?}", cr[0].remote_ts),
            format!("{:?}", ci[0].local_ts),
            "site {site}'s selectors"
        );
        esp_round_trip(p.i.enclave_mut(), &ci[0], p.r.enclave_mut(), &cr[0]);
    }
    // Another site's PSK under site c's name: the switch goes to site c, whose PSK refuses it.
    let mut p =
        Pair::new(site_initiator("c", 12, "the PSK of site d", ike, esp), three_site_responder(ike, esp));
    p.connect();
    assert!(Pair::established(&p.r_events).is_empty());
    // An identity no connection takes.
    let mut p =
        Pair::new(site_initiator("x", 14, "the PSK of site a", ike, esp), three_site_responder(ike, esp));
    p.connect();
    assert!(Pair::established(&p.r_events).is_empty());
    assert!(
        p.r_events.iter().any(|e| matches!(e, Event::IkeSaFailed { error: Error::IdentityMismatch, .. })),
        "{:#?}",
        p.r_events
    );
}
