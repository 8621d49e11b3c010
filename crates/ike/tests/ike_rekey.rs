//! Rekeying the IKE SA (RFC 7296 §1.3.2) between two engines under a virtual clock: from
//! either side, on command and at `rekey_time`, simultaneously from both sides (§2.8.2),
//! and colliding with a child rekey (§2.25.2). In every case exactly one new IKE SA is left
//! on both sides, it holds the child SAs, and the child SAs keep carrying traffic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::time::Duration;

use cloister_ike::{ChildSa, DeleteReason, Event, IkeSaState, SaId};
use enclave_core::{Enclave, Role};
use util::{esp_round_trip, Dir, Pair};
use wire::ike::ExchangeType as X;

/// Every (old, new) IKE SA rekey an endpoint reported.
fn rekeys(events: &[Event]) -> Vec<(SaId, SaId, Role)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaRekeyed { old, new, role, .. } => Some((*old, *new, *role)),
            _ => None,
        })
        .collect()
}

/// The IKE SAs an endpoint reported deleted, with why.
fn deleted(events: &[Event]) -> Vec<(SaId, DeleteReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaDeleted { sa, reason } => Some((*sa, reason.clone())),
            _ => None,
        })
        .collect()
}

/// A pair with one established IKE SA and its child on each side.
fn connected() -> (Pair, SaId, SaId, ChildSa, ChildSa) {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    p.connect();
    let (i, r) = (Pair::established(&p.i_events), Pair::established(&p.r_events));
    assert_eq!((i.len(), r.len()), (1, 1));
    let (ci, cr) = (Pair::ready(&p.i_events)[0].clone(), Pair::ready(&p.r_events)[0].clone());
    (p, i[0], r[0], ci, cr)
}

/// Checks that each side is left with exactly one IKE SA, the two agree, it holds the
/// child, and the child still carries traffic both ways; returns the two SA ids.
fn one_sa_holding(p: &mut Pair, ci: &ChildSa, cr: &ChildSa) -> (SaId, SaId) {
    let (is, rs): (Vec<_>, Vec<_>) = (p.i.ike_sas().collect(), p.r.ike_sas().collect());
    assert_eq!((is.len(), rs.len()), (1, 1), "initiator {:?}\nresponder {:?}", p.i_events, p.r_events);
    let (a, b) = (is[0], rs[0]);
    assert_eq!((a.state(), b.state()), (IkeSaState::Established, IkeSaState::Established));
    assert_eq!(a.spis(), b.spis(), "both sides hold the same IKE SA");
    assert_ne!(a.role(), b.role());
    assert_eq!(a.children(), std::slice::from_ref(ci));
    assert_eq!(b.children(), std::slice::from_ref(cr));
    let ids = (a.id(), b.id());
    esp_round_trip(p.i.enclave_mut(), ci, p.r.enclave_mut(), cr);
    esp_round_trip(p.r.enclave_mut(), cr, p.i.enclave_mut(), ci);
    for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
        assert_eq!((ep.ike_sas, ep.esp_sas, ep.dh_values), (1, 2, 0), "nothing left behind: {ep:?}");
    }
    ids
}

#[test]
fn the_ike_sa_is_rekeyed_from_either_side_and_keeps_its_children() {
    for from_initiator in [true, false] {
        let (mut p, i_sa, r_sa, ci, cr) = connected();
        let sent = p.log.len();
        /* CREATE_CHILD_SA { SK { SA(SPIi'), Ni, KEi } } --> <-- { SK { SA(SPIr'), Nr, KEr } }
         * INFORMATIONAL { SK { D(IKE) } } --> <-- { SK { } }       (both on the old SA) */
        if from_initiator {
            p.i.rekey_ike(p.now, i_sa).unwrap();
        } else {
            p.r.rekey_ike(p.now, r_sa).unwrap();
        }
        p.drive();
        let (requester, responder) = if from_initiator {
            (Dir::ToResponder, Dir::ToInitiator)
        } else {
            (Dir::ToInitiator, Dir::ToResponder)
        };
        assert_eq!(
            p.exchanges()[sent..],
            [
                (requester, X::CREATE_CHILD_SA, false),
                (responder, X::CREATE_CHILD_SA, true),
                (requester, X::INFORMATIONAL, false),
                (responder, X::INFORMATIONAL, true),
            ]
        );
        let old_spis = (i_sa.0, r_sa.0);
        let request = p.log[sent].message();
        assert_eq!((request.header.initiator_spi, request.header.responder_spi), old_spis, "on the old SA");
        let (ni, nr) = (rekeys(&p.i_events), rekeys(&p.r_events));
        assert_eq!((ni.len(), nr.len()), (1, 1), "{:?}\n{:?}", p.i_events, p.r_events);
        assert_eq!((ni[0].0, nr[0].0), (i_sa, r_sa));
        // The exchange's initiator is the new SA's original initiator (§2.18).
        let expected = if from_initiator {
            (Role::Initiator, Role::Responder)
        } else {
            (Role::Responder, Role::Initiator)
        };
        assert_eq!((ni[0].2, nr[0].2), expected);
        assert_eq!(deleted(&p.i_events), [(i_sa, DeleteReason::Rekeyed)]);
        assert_eq!(deleted(&p.r_events), [(r_sa, DeleteReason::Rekeyed)]);
        assert!(
            !p.i_events.iter().chain(&p.r_events).any(|e| matches!(e, Event::ChildSaDeleted { .. })),
            "the children moved, none was deleted"
        );
        let (new_i, new_r) = one_sa_holding(&mut p, &ci, &cr);
        assert_eq!((new_i, new_r), (ni[0].1, nr[0].1));
        assert!(p.i.ike_sa(i_sa).is_none() && p.r.ike_sa(r_sa).is_none());
        let new_spis = p.i.ike_sa(new_i).unwrap().spis();
        assert!(new_spis.0 != old_spis.0 && new_spis.1 != old_spis.1);

        // The new SA works: message IDs start again at 0, a child rekey and a delete run
        // on it, and a second IKE rekey chains.
        let sent = p.log.len();
        p.i.rekey_child(p.now, new_i, ci.spi_inbound).unwrap();
        p.drive();
        let first = p.log[sent].message();
        assert_eq!(first.header.message_id, 0, "a fresh message-ID window");
        assert_eq!((first.header.initiator_spi, first.header.responder_spi), new_spis);
        let child = p.i.ike_sa(new_i).unwrap().children()[0].clone();
        assert_ne!(child.spi_inbound, ci.spi_inbound, "rekeyed on the new IKE SA");
        p.r.rekey_ike(p.now, new_r).unwrap();
        p.drive();
        assert_eq!(rekeys(&p.i_events).len(), 2);
        let last = p.i.ike_sas().next().unwrap().id();
        p.i.delete_ike(p.now, last).unwrap();
        p.drive();
        assert_eq!((p.i.ike_sas().count(), p.r.ike_sas().count()), (0, 0));
        for ep in [p.i.enclave().memory_report(), p.r.enclave().memory_report()] {
            assert_eq!((ep.ike_sas, ep.esp_sas, ep.dh_values), (0, 0, 0), "{ep:?}");
        }
        assert_eq!(p.i.counters().dropped_total() + p.r.counters().dropped_total(), 0);
    }
}

#[test]
fn an_ike_sa_rekeys_itself_at_its_rekey_time() {
    let (mut p, i_sa, r_sa, ci, cr) = connected();
    // Defaults: rekey_time 4 h, over_time 24 min; no DPD configured.
    p.run_for(Duration::from_secs(4 * 3600 - 60));
    assert!(rekeys(&p.i_events).is_empty() && rekeys(&p.r_events).is_empty());
    p.run_for(Duration::from_secs(120));
    let (ni, nr) = (rekeys(&p.i_events), rekeys(&p.r_events));
    // Both sides have the same rekey_time here, so both may start: one rekey survives.
    assert_eq!((ni.len(), nr.len()), (1, 1), "{:?}\n{:?}", p.i_events, p.r_events);
    assert_eq!((ni[0].0, nr[0].0), (i_sa, r_sa));
    one_sa_holding(&mut p, &ci, &cr);
}

#[test]
fn simultaneous_ike_rekeys_leave_one_new_sa_on_both_sides() {
    for _ in 0..8 {
        let (mut p, i_sa, r_sa, ci, cr) = connected();
        p.i.rekey_ike(p.now, i_sa).unwrap();
        p.r.rekey_ike(p.now, r_sa).unwrap();
        p.drive();
        // A redundant SA's Delete and the old SA's Delete may need their CLOSE_WAIT.
        p.run_for(Duration::from_secs(40));
        let (ni, nr) = (rekeys(&p.i_events), rekeys(&p.r_events));
        assert_eq!((ni.len(), nr.len()), (1, 1), "{:?}\n{:?}", p.i_events, p.r_events);
        assert_eq!(ni[0].1, p.i.ike_sas().next().unwrap().id());
        let (new_i, new_r) = one_sa_holding(&mut p, &ci, &cr);
        assert_eq!((ni[0].1, nr[0].1), (new_i, new_r));
        assert!(deleted(&p.i_events)
            .iter()
            .all(|(_, r)| *r == DeleteReason::Rekeyed || *r == DeleteReason::PeerDeleted));
    }
}

#[test]
fn a_child_rekey_during_an_ike_rekey_is_retried_after_temporary_failure() {
    let (mut p, i_sa, r_sa, ci, cr) = connected();
    p.i.rekey_ike(p.now, i_sa).unwrap();
    p.r.rekey_child(p.now, r_sa, cr.spi_inbound).unwrap();
    p.drive();
    p.run_for(Duration::from_secs(10));
    assert_eq!(rekeys(&p.i_events).len(), 1);
    let child_rekeys =
        |events: &[Event]| events.iter().filter(|e| matches!(e, Event::ChildSaRekeyed { .. })).count();
    assert_eq!((child_rekeys(&p.i_events), child_rekeys(&p.r_events)), (1, 1), "{:?}", p.r_events);
    let (a, b) = (p.i.ike_sas().next().unwrap(), p.r.ike_sas().next().unwrap());
    let (new_ci, new_cr) = (a.children()[0].clone(), b.children()[0].clone());
    assert_ne!(new_ci.spi_inbound, ci.spi_inbound);
    assert!(!p.i_events.iter().any(|e| matches!(e, Event::ChildSaFailed { .. })));
    one_sa_holding(&mut p, &new_ci, &new_cr);
}

#[test]
fn rekeying_a_rekeyed_or_unestablished_sa_is_refused() {
    let mut p = Pair::with_proposals("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
    let sa = p.i.initiate(p.now, "to-b").unwrap();
    assert!(p.i.rekey_ike(p.now, sa).is_err(), "not established yet");
    p.drive();
    assert!(p.i.rekey_ike(p.now, SaId(12345)).is_err(), "unknown SA");
}
