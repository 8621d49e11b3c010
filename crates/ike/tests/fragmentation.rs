//! IKE fragmentation (RFC 7383) between two engines: RSA-4096 certificate chains make each
//! IKE_AUTH over 3 kB, which goes as SKF fragments of at most 1280-byte datagrams when both
//! ends announced support, and whole otherwise; a lost or forged fragment costs a
//! retransmission, never the exchange.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::time::Duration;

use cloister_ike::{DropReason, EndpointConfig};
use util::{cert_file, pubkey_endpoint, pubkey_initiator, pubkey_responder, Dir, Pair, Wire};
use wire::ike::{ExchangeType, NotifyType};

/// A side signing with tests/certs/NAME.pem (a chain: its certificate, then the
/// intermediate) and trusting the RSA-4096 root.
fn side(certs: &str, id: &str) -> (String, String) {
    let local = format!(r#"auth = "pubkey", certs = ["{}"], secret = "key""#, cert_file(certs));
    let remote = format!(r#"auth = "pubkey", cacerts = ["{}"], id = "{id}""#, cert_file("ca-rsa4096.pem"));
    (local, remote)
}

/// Site A (initiator) and B with RSA-4096 chains, each connection's `fragmentation` as
/// given (`None`: the default).
fn pair(a: Option<&str>, b: Option<&str>) -> Pair {
    let with = |toml: String, policy: Option<&str>| match policy {
        // The connection table's first line; the key goes right below it.
        Some(p) => toml.replacen("]\n", &format!("]\nfragmentation = \"{p}\"\n"), 1),
        None => toml,
    };
    let (al, ar) = side("a-int4096-chain.pem", "%any");
    let (bl, br) = side("b-int4096-chain.pem", "%any");
    let i = pubkey_endpoint(&with(pubkey_initiator(&al, &ar), a), "a-int4096", EndpointConfig::default());
    let r = pubkey_endpoint(&with(pubkey_responder(&bl, &br), b), "b-int4096", EndpointConfig::default());
    Pair::new(i, r).with_wall_clock()
}

fn is_fragment(w: &Wire) -> bool {
    w.message().encrypted_fragment().is_some()
}

fn auth_datagrams(p: &Pair, dir: Dir) -> Vec<&Wire> {
    p.log
        .iter()
        .filter(|w| w.dir == dir && w.message().header.exchange_type == ExchangeType::IKE_AUTH)
        .collect()
}

fn established(p: &Pair) {
    assert_eq!(Pair::established(&p.i_events).len(), 1, "initiator: {:#?}", p.i_events);
    assert_eq!(Pair::established(&p.r_events).len(), 1, "responder: {:#?}", p.r_events);
    assert_eq!(Pair::ready(&p.i_events).len(), 1);
}

#[test]
fn large_ike_auth_messages_go_as_fragments_of_the_path_size_both_ways() {
    let mut p = pair(None, None);
    p.connect();
    established(&p);
    for w in &p.log[..2] {
        let announced = w.message().notify(NotifyType::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
        assert!(announced, "IKE_SA_INIT announces support both ways (§2.3)");
    }
    for dir in [Dir::ToResponder, Dir::ToInitiator] {
        let auth = auth_datagrams(&p, dir);
        assert!(auth.len() >= 3, "a 3 kB IKE_AUTH in fragments: {}", auth.len());
        let total = u16::try_from(auth.len()).unwrap();
        for (n, w) in (1..).zip(&auth) {
            assert!(w.ike().len() + 28 <= 1280, "{} bytes: within a 1280-byte datagram", w.ike().len());
            let m = w.message();
            let skf = m.encrypted_fragment().expect("SKF");
            assert_eq!((skf.number, skf.total), (n, total));
            assert_eq!(w.ike()[16], wire::ike::PayloadType::SKF.0, "the header's Next Payload: SKF");
            if n > 1 {
                assert_eq!(
                    skf.first_inner,
                    wire::ike::PayloadType::NONE,
                    "only fragment 1 names the first payload"
                );
            }
        }
    }
    let (ci, cr) = (p.i.counters(), p.r.counters());
    assert_eq!((ci.fragmented_sent, ci.reassembled), (1, 1));
    assert_eq!((cr.fragmented_sent, cr.reassembled), (1, 1));
    assert_eq!(ci.dropped_total() + cr.dropped_total(), 0);
}

#[test]
fn a_side_without_fragmentation_gets_and_sends_whole_messages() {
    for (a, b) in [(Some("no"), None), (None, Some("no")), (Some("accept"), Some("accept"))] {
        let mut p = pair(a, b);
        p.connect();
        established(&p);
        assert!(!p.log.iter().any(is_fragment), "{a:?} {b:?}: no fragments");
        assert!(auth_datagrams(&p, Dir::ToResponder)[0].ike().len() > 3000);
    }
    // "accept" takes fragments and never sends any.
    let mut p = pair(Some("accept"), None);
    p.connect();
    established(&p);
    assert!(!auth_datagrams(&p, Dir::ToResponder).iter().any(|w| is_fragment(w)));
    assert!(auth_datagrams(&p, Dir::ToInitiator).iter().all(|w| is_fragment(w)));
}

#[test]
fn a_lost_fragment_costs_one_retransmission_either_way() {
    for lose in [Dir::ToResponder, Dir::ToInitiator] {
        let mut p = pair(None, None);
        let mut lost = false;
        p.filter = Box::new(move |w: &Wire| {
            let second = w.message().encrypted_fragment().is_some_and(|f| f.number == 2);
            let drop = w.dir == lose && second && !lost;
            lost |= drop;
            !drop
        });
        p.connect();
        assert!(Pair::established(&p.i_events).is_empty(), "not before the retransmission");
        p.run_for(Duration::from_secs(5));
        established(&p);
        let i = p.i.counters();
        assert_eq!(i.retransmits, 1, "{lose:?}");
        if lose == Dir::ToInitiator {
            // The whole request again earns the cached response again (§2.6.1), whose
            // first copy left fragment 1 and 3 held; fragment 1 again is a duplicate.
            assert_eq!(p.r.counters().responses_resent, 1);
            assert!(i.dropped(DropReason::FragmentDuplicate) >= 1);
        } else {
            assert!(p.r.counters().dropped(DropReason::FragmentDuplicate) >= 1);
        }
    }
}

#[test]
fn a_forged_fragment_is_dropped_before_it_takes_room() {
    let mut p = pair(None, None);
    // The responder's IKE_AUTH fragments are held back, to be handed in by hand.
    p.filter = Box::new(|w: &Wire| !(w.dir == Dir::ToInitiator && is_fragment(w)));
    p.connect();
    let held: Vec<Wire> =
        p.log.iter().filter(|w| w.dir == Dir::ToInitiator && is_fragment(w)).cloned().collect();
    assert!(held.len() >= 3);
    // Each with a bit of its ICV flipped: the enclave refuses it and nothing is kept.
    for w in &held {
        let mut forged = w.contents.clone();
        *forged.last_mut().unwrap() ^= 1;
        p.i.handle_datagram(p.now, w.from, w.to, &forged);
    }
    let refused = p.i.counters().dropped(DropReason::IntegrityCheckFailed);
    assert_eq!(refused, u64::try_from(held.len()).unwrap());
    // Had a forged one taken its number's place, the genuine one would be a duplicate now.
    for w in &held {
        p.i.handle_datagram(p.now, w.from, w.to, &w.contents);
    }
    p.collect_events();
    assert_eq!(Pair::established(&p.i_events).len(), 1, "{:#?}", p.i_events);
    assert_eq!(p.i.counters().dropped(DropReason::FragmentDuplicate), 0);
}
