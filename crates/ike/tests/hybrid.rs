//! Post-quantum hybrid IKE SAs (RFC 9370 additional key exchanges in RFC 9242
//! IKE_INTERMEDIATE, ML-KEM-768/1024 inside the enclave) between two engines: negotiated
//! only when both sides offer them, in strongSwan 6's proposal syntax; each additional key
//! exchange is one IKE_INTERMEDIATE before IKE_AUTH, whose AUTH covers it; the child SA
//! works; children and the IKE SA rekey afterwards; a responder that offers no hybrid
//! gets the classical exchange, and an initiator that insists on one gets none.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::time::Duration;

use cloister_ike::{Error, Event, IkeSaState};
use enclave_core::{DhGroup, Enclave};
use util::{esp_round_trip, Dir, Pair};
use wire::ike::{ExchangeType as X, NotifyType};

const ESP: &str = "aes256gcm16";

fn pair(ike_i: &str, ike_r: &str) -> Pair {
    let psk = b"a shared secret of the tenant";
    let config = cloister_ike::EndpointConfig::default;
    Pair::new(
        util::endpoint(&util::initiator_config(ike_i, ESP), psk, config()),
        util::endpoint(&util::responder_config(ike_r, ESP), psk, config()),
    )
}

/// Both sides established, the child carrying traffic both ways, no value left over.
fn established_with_traffic(p: &mut Pair) {
    assert_eq!(Pair::established(&p.i_events).len(), 1, "initiator: {:#?}", p.i_events);
    assert_eq!(Pair::established(&p.r_events).len(), 1, "responder: {:#?}", p.r_events);
    let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
    esp_round_trip(p.i.enclave_mut(), &ci, p.r.enclave_mut(), &cr);
    esp_round_trip(p.r.enclave_mut(), &cr, p.i.enclave_mut(), &ci);
    for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
        assert_eq!(ep.dh_values, 0, "no private value left: {ep:?}");
    }
    assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
}

#[test]
fn a_hybrid_ike_sa_does_one_intermediate_exchange_per_additional_key_exchange() {
    for (proposal, kes) in [
        ("aes256gcm16-prfsha384-x25519-ke1_mlkem768", vec![DhGroup::MlKem768]),
        ("aes256gcm16-prfsha256-ecp384-ke1_mlkem1024", vec![DhGroup::MlKem1024]),
        ("aes256-sha256-x25519-ke1_mlkem768-ke2_ecp256", vec![DhGroup::MlKem768, DhGroup::EcpP256]),
    ] {
        let mut p = pair(proposal, proposal);
        p.connect();
        established_with_traffic(&mut p);
        let mut expected =
            vec![(Dir::ToResponder, X::IKE_SA_INIT, false), (Dir::ToInitiator, X::IKE_SA_INIT, true)];
        for _ in &kes {
            expected.push((Dir::ToResponder, X::IKE_INTERMEDIATE, false));
            expected.push((Dir::ToInitiator, X::IKE_INTERMEDIATE, true));
        }
        // Messages, not datagrams: ML-KEM-1024's go as two IKE fragments each.
        let mut exchanges: Vec<_> = p.exchanges().into_iter().filter(|(_, x, _)| *x != X::IKE_AUTH).collect();
        exchanges.dedup();
        assert_eq!(exchanges, expected, "{proposal}");
        for w in &p.log[..2] {
            let m = w.message();
            assert!(m.notify(NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED).is_some(), "announced both ways");
        }
        // IKE_AUTH takes the message ID after the last IKE_INTERMEDIATE.
        let auth = p.log.iter().find(|w| w.message().header.exchange_type == X::IKE_AUTH).unwrap();
        assert_eq!(auth.message().header.message_id, u32::try_from(kes.len()).unwrap() + 1);
        let sa = p.i.ike_sas().next().unwrap();
        let got: Vec<DhGroup> = sa.choice().unwrap().additional_kes().collect();
        assert_eq!(got, kes, "{proposal}");
        assert_eq!(p.i.counters().additional_key_exchanges, kes.len() as u64);
        assert_eq!(p.r.counters().additional_key_exchanges, kes.len() as u64);
    }
}

#[test]
fn the_hybrid_is_negotiated_only_when_both_sides_offer_it() {
    let hybrid = "aes256gcm16-prfsha256-x25519-ke1_mlkem768";
    let classical = "aes256gcm16-prfsha256-x25519";
    let either = format!("{hybrid},{classical}");
    // An optional additional exchange (`ke1_none`): taken when the peer offers it.
    let optional = "aes256gcm16-prfsha256-x25519-ke1_mlkem768-ke1_none";
    for (i, r, kes) in [
        (either.as_str(), classical, 0),
        (classical, either.as_str(), 0),
        (either.as_str(), either.as_str(), 1),
        (optional, classical, 0),
        (classical, optional, 0),
        (optional, hybrid, 1),
        (hybrid, optional, 1),
    ] {
        let mut p = pair(i, r);
        p.connect();
        established_with_traffic(&mut p);
        let intermediate = p.exchanges().iter().filter(|(_, x, _)| *x == X::IKE_INTERMEDIATE).count();
        assert_eq!(intermediate, 2 * kes, "{i} / {r}");
    }
    // Neither side gives up its policy: a hybrid-only side and a classical-only side agree
    // on nothing.
    for (i, r) in [(hybrid, classical), (classical, hybrid)] {
        let mut p = pair(i, r);
        p.connect();
        assert!(Pair::established(&p.i_events).is_empty() && Pair::established(&p.r_events).is_empty());
        let failed = p.i_events.iter().find_map(|e| match e {
            Event::IkeSaFailed { error, .. } => Some(error.clone()),
            _ => None,
        });
        assert!(matches!(failed, Some(Error::NoProposalChosen { .. })), "{i} / {r}: {failed:?}");
    }
}

#[test]
fn children_and_the_ike_sa_rekey_after_a_hybrid_ike_sa_init() {
    let proposal = "aes256gcm16-prfsha384-x25519-ke1_mlkem768,aes256gcm16-prfsha384-x25519";
    let mut p = pair(proposal, proposal);
    p.connect();
    established_with_traffic(&mut p);
    let i_sa = Pair::established(&p.i_events)[0];
    let ci = Pair::ready(&p.i_events)[0].clone();
    p.i.rekey_child(p.now, i_sa, ci.spi_inbound).unwrap();
    p.drive();
    p.i.rekey_ike(p.now, i_sa).unwrap();
    p.drive();
    let (a, b) = (p.i.ike_sas().next().unwrap(), p.r.ike_sas().next().unwrap());
    assert_eq!((a.state(), b.state()), (IkeSaState::Established, IkeSaState::Established));
    assert_ne!(a.id(), i_sa, "rekeyed");
    let (ci, cr) = (a.children()[0].clone(), b.children()[0].clone());
    assert_ne!(ci.spi_inbound, Pair::ready(&p.i_events)[0].spi_inbound);
    esp_round_trip(p.i.enclave_mut(), &ci, p.r.enclave_mut(), &cr);
    esp_round_trip(p.r.enclave_mut(), &cr, p.i.enclave_mut(), &ci);
    assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
}

#[test]
fn a_lost_intermediate_message_costs_one_retransmission_either_way() {
    let proposal = "aes256gcm16-prfsha256-x25519-ke1_mlkem1024";
    for lose in [Dir::ToResponder, Dir::ToInitiator] {
        let mut p = pair(proposal, proposal);
        let mut lost = false;
        p.filter = Box::new(move |w: &util::Wire| {
            let drop = !lost && w.dir == lose && w.message().header.exchange_type == X::IKE_INTERMEDIATE;
            lost |= drop;
            !drop
        });
        p.connect();
        assert!(Pair::established(&p.i_events).is_empty(), "not before the retransmission");
        p.run_for(Duration::from_secs(5));
        assert_eq!(Pair::established(&p.i_events).len(), 1, "{lose:?}: {:#?}", p.i_events);
        assert_eq!(Pair::established(&p.r_events).len(), 1);
        assert_eq!(p.i.counters().retransmits, 1);
        if lose == Dir::ToInitiator {
            // The responder's keys had moved on: it knew the retransmission (both its
            // fragments) by its bytes, answered it once and dropped nothing.
            assert_eq!(p.r.counters().responses_resent, 1);
            assert_eq!(p.r.counters().dropped_total(), 0, "{:?}", p.r.counters());
        }
    }
}

#[test]
fn an_unanswered_intermediate_exchange_times_out_without_keys_left() {
    let proposal = "aes256gcm16-prfsha256-x25519-ke1_mlkem768";
    let mut p = pair(proposal, proposal);
    p.filter = Box::new(|w: &util::Wire| {
        !(w.dir == Dir::ToInitiator && w.message().header.exchange_type == X::IKE_INTERMEDIATE)
    });
    p.connect();
    p.run_for(Duration::from_secs(120));
    assert!(Pair::established(&p.i_events).is_empty());
    let failed =
        p.i_events.iter().any(|e| matches!(e, Event::IkeSaFailed { error: Error::Timeout { .. }, .. }));
    assert!(failed, "{:#?}", p.i_events);
    for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
        assert_eq!((ep.ike_sas, ep.dh_values), (0, 0), "nothing left behind: {ep:?}");
    }
}

/// Every IKE SA rekey this endpoint reported, with the new SA's choice.
fn ike_rekeys(events: &[Event]) -> Vec<(cloister_ike::SaId, cloister_ike::SaId)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaRekeyed { old, new, .. } => Some((*old, *new)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_ike_sa_rekeys_with_the_hybrid_from_either_side_via_ike_followup_ke() {
    let proposal = "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024";
    for from_initiator in [true, false] {
        let mut p = pair(proposal, proposal);
        p.connect();
        established_with_traffic(&mut p);
        let (i_sa, r_sa) = (Pair::established(&p.i_events)[0], Pair::established(&p.r_events)[0]);
        let sent = p.log.len();
        if from_initiator {
            p.i.rekey_ike(p.now, i_sa).unwrap();
        } else {
            p.r.rekey_ike(p.now, r_sa).unwrap();
        }
        p.drive();
        let (req, resp) = if from_initiator {
            (Dir::ToResponder, Dir::ToInitiator)
        } else {
            (Dir::ToInitiator, Dir::ToResponder)
        };
        let mut exchanges = p.exchanges()[sent..].to_vec();
        exchanges.dedup();
        assert_eq!(
            exchanges,
            [
                (req, X::CREATE_CHILD_SA, false),
                (resp, X::CREATE_CHILD_SA, true),
                (req, X::IKE_FOLLOWUP_KE, false),
                (resp, X::IKE_FOLLOWUP_KE, true),
                (req, X::IKE_FOLLOWUP_KE, false),
                (resp, X::IKE_FOLLOWUP_KE, true),
                (req, X::INFORMATIONAL, false),
                (resp, X::INFORMATIONAL, true),
            ],
            "from_initiator {from_initiator}"
        );
        assert_eq!((ike_rekeys(&p.i_events).len(), ike_rekeys(&p.r_events).len()), (1, 1));
        let (a, b) = (p.i.ike_sas().next().unwrap(), p.r.ike_sas().next().unwrap());
        assert_eq!(a.spis(), b.spis());
        assert_ne!(a.id(), i_sa);
        let kes: Vec<DhGroup> = a.choice().unwrap().additional_kes().collect();
        assert_eq!(kes, [DhGroup::MlKem768, DhGroup::MlKem1024], "the new SA is a hybrid one too");
        // The children moved over (the same ESP SAs); the new SA works and rekeys again.
        assert_eq!(a.children(), Pair::ready(&p.i_events).as_slice());
        assert_eq!(b.children(), Pair::ready(&p.r_events).as_slice());
        let new_i = a.id();
        p.i.rekey_ike(p.now, new_i).unwrap();
        p.drive();
        assert_eq!(ike_rekeys(&p.i_events).len(), 2);
        for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
            assert_eq!((ep.ike_sas, ep.esp_sas, ep.dh_values), (1, 2, 0), "nothing left behind: {ep:?}");
        }
        assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
    }
}

#[test]
fn a_lost_followup_costs_a_retransmission_and_simultaneous_hybrid_rekeys_end_with_one_sa() {
    let proposal = "aes256gcm16-prfsha256-x25519-ke1_mlkem768";
    // A lost IKE_FOLLOWUP_KE response: the request is sent again and answered from the cache.
    let mut p = pair(proposal, proposal);
    p.connect();
    let i_sa = Pair::established(&p.i_events)[0];
    let mut lost = false;
    p.filter = Box::new(move |w: &util::Wire| {
        let drop =
            !lost && w.dir == Dir::ToInitiator && w.message().header.exchange_type == X::IKE_FOLLOWUP_KE;
        lost |= drop;
        !drop
    });
    p.i.rekey_ike(p.now, i_sa).unwrap();
    p.run_for(Duration::from_secs(10));
    assert_eq!(ike_rekeys(&p.i_events).len(), 1, "{:#?}", p.i_events);
    assert!(p.r.counters().responses_resent >= 1);
    // Both sides at once: each answers the other TEMPORARY_FAILURE, retries, one wins.
    let mut p = pair(proposal, proposal);
    p.connect();
    let (i_sa, r_sa) = (Pair::established(&p.i_events)[0], Pair::established(&p.r_events)[0]);
    p.i.rekey_ike(p.now, i_sa).unwrap();
    p.r.rekey_ike(p.now, r_sa).unwrap();
    p.run_for(Duration::from_secs(30));
    let (is, rs): (Vec<_>, Vec<_>) = (p.i.ike_sas().collect(), p.r.ike_sas().collect());
    assert_eq!((is.len(), rs.len()), (1, 1), "{:#?}\n{:#?}", p.i_events, p.r_events);
    assert_eq!(is[0].spis(), rs[0].spis());
    assert_eq!((is[0].state(), rs[0].state()), (IkeSaState::Established, IkeSaState::Established));
    let (ci, cr) = (is[0].children()[0].clone(), rs[0].children()[0].clone());
    drop((is, rs));
    esp_round_trip(p.i.enclave_mut(), &ci, p.r.enclave_mut(), &cr);
    for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
        assert_eq!((ep.ike_sas, ep.dh_values), (1, 0), "{ep:?}");
    }
}
