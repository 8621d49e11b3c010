//! A live move of established IKE SAs (issue 8): one side's enclave state and IKE SAs go
//! to a fresh endpoint with a fresh enclave (the package wrapped straight to the
//! destination's key, as crates/enclave/tests/migration.rs does), the records cross as
//! JSON inside the package, and the peer talks on with the destination as if nothing
//! happened: same SPIs, message IDs, cached response, children, rekeys from the sealed SK_d.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::time::{Duration, Instant};

use cloister_ike::{CarriedIkeSa, ChildSa, Config, Endpoint, EndpointConfig, Error, Event, IkeSaState, SaId};
use enclave_core::migration::{MigrationPackage, MigrationRestore, OaepHash};
use enclave_core::{Enclave, HandleKind, InlineEnclave};
use serde_json::Value;
use util::{esp_round_trip, initiator_config, responder_config, start_enclave, Dir, Pair};
use wire::ike::ExchangeType as X;

const IKE: &str = "aes256gcm16-prfsha256-ecp256";
const ESP: &str = "aes256gcm16";

/// Another host's endpoint whose enclave imported `from`'s state, with the records `from`
/// exported (they travel in the package's untrusted state, as JSON), and the restore map.
fn move_state(
    now: Instant,
    from: &mut Endpoint<InlineEnclave>,
) -> (InlineEnclave, Vec<Value>, MigrationRestore) {
    let carried = from.export_sas(now).unwrap();
    assert_eq!(carried.left_out, 0);
    let json = serde_json::to_vec(&carried.sas).unwrap();
    let mut dst = start_enclave(1);
    let key = dst.migration_destination_key(2048).unwrap();
    let package = from.enclave_mut().export_state(&key, None, OaepHash::Sha256, &json).unwrap();
    let package = MigrationPackage::from_bytes(package.into_bytes()).unwrap();
    let restore = dst.import_state(&package, None).unwrap();
    let records: Vec<Value> = serde_json::from_slice(&restore.untrusted_state).unwrap();
    (dst, records, restore)
}

/// An endpoint over `enclave` with the connections of `toml`, its PSK the restored one.
fn destination(enclave: InlineEnclave, restore: &MigrationRestore, toml: &str) -> Endpoint<InlineEnclave> {
    let mut ep = Endpoint::new(enclave, EndpointConfig::default());
    assert_eq!(restore.secrets.len(), 1);
    ep.add_secret("psk", restore.secrets[0].1);
    for conn in Config::from_toml(toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep
}

fn records(values: &[Value]) -> Vec<CarriedIkeSa> {
    values.iter().map(|v| serde_json::from_value(v.clone()).unwrap()).collect()
}

/// Moves one side of `p` (the responder with `responder`) to a new host a few seconds
/// later; returns the imported SA and its children.
fn move_side(p: &mut Pair, responder: bool) -> (SaId, Vec<ChildSa>) {
    let toml = if responder { responder_config(IKE, ESP) } else { initiator_config(IKE, ESP) };
    let side = if responder { &mut p.r } else { &mut p.i };
    let (enclave, values, restore) = move_state(p.now, side);
    p.now += Duration::from_secs(3);
    let mut dst = destination(enclave, &restore, &toml);
    let mut imported = dst.import_sas(p.now, records(&values), &restore).unwrap();
    let old = std::mem::replace(side, dst);
    // The rekey schedule carries over, shifted by the time the move took.
    let due = old.poll_timeout().unwrap();
    assert_eq!(side.poll_timeout(), Some(due + Duration::from_secs(3)));
    assert_eq!(imported.len(), 1);
    let (id, children) = imported.pop().unwrap();
    // Same SA and children, with the destination enclave's handles.
    let before = old.ike_sa(id).unwrap();
    let after = side.ike_sa(id).unwrap();
    assert_eq!(after.state(), IkeSaState::Established);
    assert_eq!(
        (after.spis(), after.role(), after.remote(), after.nat()),
        (before.spis(), before.role(), before.remote(), before.nat())
    );
    assert_eq!(after.peer_auth(), before.peer_auth());
    assert_eq!(after.choice(), before.choice());
    assert_eq!(after.children(), &children[..]);
    assert_eq!(children.len(), before.children().len());
    for (new, old) in children.iter().zip(before.children()) {
        assert_ne!(new.handles, old.handles);
        assert_eq!(ChildSa { handles: old.handles, ..new.clone() }, *old);
    }
    p.i_events.clear();
    p.r_events.clear();
    (id, children)
}

fn no_drops(p: &Pair) {
    assert_eq!(
        (p.i.counters().dropped_total(), p.r.counters().dropped_total()),
        (0, 0),
        "{:?}\n{:?}",
        p.i.counters(),
        p.r.counters()
    );
}

/// The last datagram on the wire: (direction, exchange, response, message ID).
fn last(p: &Pair) -> (Dir, X, bool, u32) {
    let m = p.log.last().unwrap().message();
    (p.log.last().unwrap().dir, m.header.exchange_type, m.header.flags.response(), m.header.message_id)
}

fn rekeyed(events: &[Event], sa: SaId) -> ChildSa {
    events
        .iter()
        .find_map(|e| match e {
            Event::ChildSaRekeyed { sa: s, child, .. } if *s == sa => Some(child.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no rekey in {events:?}"))
}

#[test]
fn a_moved_responder_answers_initiates_and_rekeys_as_before() {
    let mut p = Pair::with_proposals(IKE, ESP);
    let i_sa = p.connect();
    let r_sa = Pair::established(&p.r_events)[0];
    // Both sides have sent a request of their own before the move.
    p.i.check_liveness(p.now, i_sa).unwrap();
    p.drive();
    let (request, answer) = (p.log[p.log.len() - 2].clone(), p.log[p.log.len() - 1].clone());
    assert_eq!((request.dir, answer.dir), (Dir::ToResponder, Dir::ToInitiator));
    p.r.check_liveness(p.now, r_sa).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToResponder, X::INFORMATIONAL, true, 0));
    p.run_for(Duration::from_secs(600));

    let (id, children) = move_side(&mut p, true);
    assert_eq!(id, r_sa);

    // A's last request again (its answer lost in the move): the very bytes B sent.
    p.r.handle_datagram(p.now, request.from, request.to, &request.contents);
    let again = p.r.poll_transmit().unwrap();
    assert_eq!((again.local, again.remote, again.contents), (answer.from, answer.to, answer.contents));
    assert_eq!(p.r.counters().responses_resent, 1);

    // A's next request is answered by B2, and B2's requests carry on with ID 1.
    p.i.check_liveness(p.now, i_sa).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToInitiator, X::INFORMATIONAL, true, 3));
    p.r.check_liveness(p.now, r_sa).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToResponder, X::INFORMATIONAL, true, 1));

    // The migrated child's keys: A's packets open at B2.
    let ci = p.i.ike_sa(i_sa).unwrap().children()[0].clone();
    esp_round_trip(p.i.enclave_mut(), &ci, p.r.enclave_mut(), &children[0]);

    // B2 rekeys the child from the sealed SK_d, now opened by its own enclave.
    p.r.rekey_child(p.now, r_sa, children[0].spi_inbound).unwrap();
    p.drive();
    let (new_r, new_i) = (rekeyed(&p.r_events, r_sa), rekeyed(&p.i_events, i_sa));
    esp_round_trip(p.r.enclave_mut(), &new_r, p.i.enclave_mut(), &new_i);
    esp_round_trip(p.i.enclave_mut(), &new_i, p.r.enclave_mut(), &new_r);
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.r.ike_sa(r_sa).unwrap().children(), [new_r]);
    assert_eq!(p.i.ike_sa(i_sa).unwrap().children(), [new_i]);
    assert_eq!(p.i.counters().retransmits + p.r.counters().retransmits, 0);
    assert!(!p.i_events.iter().any(|e| matches!(e, Event::IkeSaDeleted { .. })), "{:?}", p.i_events);
    no_drops(&p);
}

#[test]
fn a_moved_initiator_talks_on_and_rekeys_its_ike_sa() {
    let mut p = Pair::with_proposals(IKE, ESP);
    let i_sa = p.connect();
    let r_sa = Pair::established(&p.r_events)[0];
    let (id, children) = move_side(&mut p, false);
    assert_eq!(id, i_sa);

    p.i.check_liveness(p.now, i_sa).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToInitiator, X::INFORMATIONAL, true, 2));
    p.r.check_liveness(p.now, r_sa).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToResponder, X::INFORMATIONAL, true, 0));
    let cr = p.r.ike_sa(r_sa).unwrap().children()[0].clone();
    esp_round_trip(p.r.enclave_mut(), &cr, p.i.enclave_mut(), &children[0]);

    // An IKE rekey keys the successor from the migrated SA's sealed SK_d.
    p.i.rekey_ike(p.now, i_sa).unwrap();
    p.run_for(Duration::from_secs(5));
    let new = p
        .i_events
        .iter()
        .find_map(|e| match e {
            Event::IkeSaRekeyed { old, new, .. } if *old == i_sa => Some(*new),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{:?}", p.i_events));
    assert!(p.i.ike_sa(i_sa).is_none(), "the old SA is deleted");
    assert_eq!(p.i.ike_sa(new).unwrap().children().len(), 1);
    p.i.check_liveness(p.now, new).unwrap();
    p.drive();
    assert_eq!(last(&p), (Dir::ToInitiator, X::INFORMATIONAL, true, 0));
    no_drops(&p);
}

#[test]
fn exports_wait_for_quiet_sas_and_leave_unfinished_ones_out() {
    let mut p = Pair::with_proposals(IKE, ESP);
    let i_sa = p.connect();
    p.i.check_liveness(p.now, i_sa).unwrap();
    assert!(matches!(p.i.export_sas(p.now), Err(Error::MoveBusy { sa, .. }) if sa == i_sa));
    p.drive();
    let r_sa = Pair::established(&p.r_events)[0];
    p.r.rekey_child(p.now, r_sa, p.r.ike_sa(r_sa).unwrap().children()[0].spi_inbound).unwrap();
    assert!(matches!(p.r.export_sas(p.now), Err(Error::MoveBusy { sa, .. }) if sa == r_sa));
    p.drive();
    // The old child retires for a moment after the rekey.
    assert!(matches!(p.r.export_sas(p.now), Err(Error::MoveBusy { .. })));
    p.run_for(Duration::from_secs(10));
    assert_eq!(p.r.export_sas(p.now).unwrap().sas.len(), 1);

    // A second SA that has only begun stays behind.
    p.i.initiate(p.now, "to-b").unwrap();
    let carried = p.i.export_sas(p.now).unwrap();
    assert_eq!((carried.sas.len(), carried.left_out), (1, 1));
    assert_eq!(carried.sas[0].id(), i_sa);
}

#[test]
fn imports_refuse_unknown_connections_missing_handles_and_duplicates() {
    let mut p = Pair::with_proposals(IKE, ESP);
    p.connect();
    let now = p.now;
    let (enclave, values, restore) = move_state(now, &mut p.r);
    let mut dst = destination(enclave, &restore, &responder_config(IKE, ESP));

    let renamed = responder_config(IKE, ESP).replace("from-a", "elsewhere");
    let mut other = util::endpoint(&renamed, b"another secret", EndpointConfig::default());
    assert_eq!(
        other.import_sas(now, records(&values), &restore).map(|_| ()),
        Err(Error::UnknownConnection { name: "from-a".into() })
    );

    let (sa, spi_i) = (records(&values)[0].id().0, records(&values)[0].spis().0);
    let no_ike = MigrationRestore { ike_sas: Vec::new(), ..restore.clone() };
    assert!(matches!(
        dst.import_sas(now, records(&values), &no_ike),
        Err(Error::MissingHandle { sa: s, kind: HandleKind::IkeSa, .. }) if s == sa
    ));
    let no_esp = MigrationRestore { esp_sas: restore.esp_sas[..1].to_vec(), ..restore.clone() };
    assert!(matches!(
        dst.import_sas(now, records(&values), &no_esp),
        Err(Error::MissingHandle { kind: HandleKind::EspSa, .. })
    ));
    assert_eq!(dst.ike_sas().count(), 0);

    // All or nothing: a good record beside a clashing one leaves nothing behind.
    let mut twin = values[0].clone();
    twin["id"] = Value::from(sa ^ 1);
    twin["spi_r"] = Value::from(sa ^ 1);
    twin["spi_i"] = Value::from(spi_i ^ 1);
    twin["last_response"] = Value::Null;
    let twice = records(&[values[0].clone(), twin.clone()]);
    assert!(
        matches!(dst.import_sas(now, twice, &restore), Err(Error::CarriedSa { sa: s, .. }) if s == sa ^ 1)
    );
    assert_eq!(dst.ike_sas().count(), 0);

    assert_eq!(dst.import_sas(now, records(&values), &restore).unwrap().len(), 1);
    assert!(matches!(dst.import_sas(now, records(&values), &restore), Err(Error::CarriedSa { .. })));
    // Another SA with this SA's child SPIs.
    let error = dst.import_sas(now, records(&[twin.clone()]), &restore).map(|_| ());
    let why = "a child SA's inbound SPI is in use here";
    assert_eq!(error, Err(Error::CarriedSa { sa: sa ^ 1, why }));
    // Or just its enclave handles.
    twin["children"][0]["spi_inbound"] = Value::from(0x1234_5678);
    let error = dst.import_sas(now, records(&[twin]), &restore).map(|_| ());
    assert_eq!(
        error,
        Err(Error::CarriedSa { sa: sa ^ 1, why: "an enclave handle of it is another SA's too" })
    );
    assert_eq!(dst.ike_sas().count(), 1);
}

#[test]
fn tampered_records_are_refused_without_panicking() {
    let mut p = Pair::with_proposals(IKE, ESP);
    p.connect();
    let now = p.now;
    let (enclave, values, restore) = move_state(now, &mut p.r);
    let mut dst = destination(enclave, &restore, &responder_config(IKE, ESP));
    let record = &values[0];
    type Edit = (&'static str, fn(&mut Value));
    let edits: [Edit; 12] = [
        ("format", |v| v["format"] = 2.into()),
        ("transform id", |v| v["choice"]["encr"] = 99.into()),
        ("AEAD with integrity", |v| v["choice"]["integ"] = 12.into()),
        ("PRF", |v| v["prf"] = 1.into()),
        ("group", |v| v["group"] = 2.into()),
        ("role", |v| v["role"] = "initiator".into()),
        ("response", |v| v["last_response"]["id"] = 7.into()),
        ("hash", |v| v["peer_hashes"] = Value::from(vec![99])),
        ("auth method", |v| v["peer_auth"]["method"] = 200.into()),
        ("child config", |v| v["children"][0]["name"] = "nope".into()),
        ("child SPI", |v| v["children"][0]["spi_inbound"] = 1.into()),
        ("selector", |v| v["children"][0]["local_ts"][0]["end"] = "2001:db8::1".into()),
    ];
    for (what, edit) in edits {
        let mut v = record.clone();
        edit(&mut v);
        let carried: CarriedIkeSa = serde_json::from_value(v).unwrap();
        assert!(
            matches!(dst.import_sas(now, vec![carried], &restore), Err(Error::CarriedSa { .. })),
            "{what}"
        );
    }
    let mut v = record.clone();
    v["age"]["secs"] = u64::MAX.into();
    v["silent_for"]["secs"] = 0.into();
    let carried: CarriedIkeSa = serde_json::from_value(v).unwrap();
    assert!(dst.import_sas(now, vec![carried], &restore).is_err(), "an age before the clock's start");
    let mut v = record.clone();
    v["sealed_sk_d"] = "abc".into();
    assert!(serde_json::from_value::<CarriedIkeSa>(v).is_err(), "odd hex");
    assert_eq!(dst.ike_sas().count(), 0);
    // The untouched record still goes in.
    assert_eq!(dst.import_sas(now, records(&values), &restore).unwrap().len(), 1);
}
