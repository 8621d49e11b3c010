//! IKE_AUTH with X.509 certificates between two engines (tests/certs, see its README): RSA
//! PKCS#1 v1.5 and PSS, ECDSA P-256 and P-384, RFC 7427 and RFC 4754 methods, intermediates,
//! every ID type, and the refusals (another CA, expired, wrong identity, wrong key, tampered
//! AUTH or IKE_SA_INIT, no CERT, no wall clock), each in the role that detects it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use core::ops::Range;
use std::time::{Duration, Instant};

use cloister_ike::{
    CertError, Certificate, Config, DeleteReason, Endpoint, EndpointConfig, Error, Event, IkeSaState, Side,
};
use enclave_core::{
    attest::Evidence, AuthInput, AuthMethod, AuthSpec, AuthVerified, BatchSummary, ChildSaPair,
    ChildSaParams, Counters, DhExchange, DhGroup, DhHandle, Enclave, EspDescriptor, EspSaHandle, EspStatus,
    IkeSaHandle, IkeSaParams, InlineEnclave, MemoryReport, PeerCredential, SealedBlob, SecretHandle,
    SecretKind, SignatureScheme, TenantId,
};
use util::{cert_file, esp_round_trip, pubkey_endpoint, pubkey_initiator, pubkey_responder, Dir, Pair};
use wire::ike::{CertEncoding, ExchangeType as X, IdType, Identification, NotifyType, Payload};

const A_DN: &str = "C=CH, O=Cloister Test, CN=site-a.cloister.test";
const B_DN: &str = "C=CH, O=Cloister Test, CN=site-b.cloister.test";

/// Endpoints that never fragment (RFC 7383; `fragmentation.rs` tests that): these tests
/// look at whole IKE_AUTH messages.
fn whole_messages() -> EndpointConfig {
    EndpointConfig { fragment_size: 65_535, ..EndpointConfig::default() }
}

/// `local` of a side signing with tests/certs/NAME.pem, its `auth` and optional extra keys.
fn local(cert: &str, auth: &str, extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { ", " };
    format!(r#"auth = "{auth}", certs = ["{}"], secret = "key"{sep}{extra}"#, cert_file(cert))
}

/// `remote` of a side trusting tests/certs/CA.pem.
fn remote(ca: &str, auth: &str, id: &str) -> String {
    format!(r#"auth = "{auth}", cacerts = ["{}"], id = "{id}""#, cert_file(ca))
}

/// A pair: site A initiates with (cert, key) and trusts `a_trusts`; site B answers likewise.
fn pair(a: (&str, &str), a_trusts: &str, b: (&str, &str), b_trusts: &str) -> Pair {
    let i = pubkey_endpoint(
        &pubkey_initiator(&local(a.0, "pubkey", ""), &remote(a_trusts, "pubkey", "%any")),
        a.1,
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(&local(b.0, "pubkey", ""), &remote(b_trusts, "pubkey", "%any")),
        b.1,
        whole_messages(),
    );
    Pair::new(i, r).with_wall_clock()
}

/// Both sides established, with one child each whose keys agree; returns how each side saw
/// the other authenticate (initiator's view first).
fn established(p: &mut Pair) -> (cloister_ike::PeerAuth, cloister_ike::PeerAuth) {
    let (i, r) = (Pair::established(&p.i_events), Pair::established(&p.r_events));
    assert_eq!((i.len(), r.len()), (1, 1), "initiator {:#?}\nresponder {:#?}", p.i_events, p.r_events);
    let (ci, cr) = (Pair::ready(&p.i_events), Pair::ready(&p.r_events));
    assert_eq!((ci.len(), cr.len()), (1, 1));
    esp_round_trip(p.i.enclave_mut(), &ci[0], p.r.enclave_mut(), &cr[0]);
    let (i_sa, r_sa) = (p.i.ike_sa(i[0]).unwrap(), p.r.ike_sa(r[0]).unwrap());
    assert_eq!((i_sa.state(), r_sa.state()), (IkeSaState::Established, IkeSaState::Established));
    (i_sa.peer_auth().unwrap().clone(), r_sa.peer_auth().unwrap().clone())
}

/// The error of the one IkeSaFailed event among `events`.
fn failed(events: &[Event]) -> Error {
    match events {
        [Event::IkeSaFailed { error, .. }] => error.clone(),
        other => panic!("expected one IkeSaFailed: {other:#?}"),
    }
}

/// The responder refused the initiator: it answered IKE_AUTH with AUTHENTICATION_FAILED.
fn responder_refused(p: &Pair) -> Error {
    assert_eq!(p.log.len(), 4, "IKE_SA_INIT and IKE_AUTH, nothing else");
    assert_eq!(failed(&p.i_events), Error::AuthenticationFailed { side: Side::Remote });
    assert_eq!(p.r.ike_sas().count() + p.i.ike_sas().count(), 0);
    failed(&p.r_events)
}

/// The initiator refused the responder: it told it in an INFORMATIONAL (§2.21.2).
fn initiator_refused(p: &Pair) -> Error {
    let exchanges = p.exchanges();
    assert_eq!(
        exchanges[4..],
        [(Dir::ToResponder, X::INFORMATIONAL, false), (Dir::ToInitiator, X::INFORMATIONAL, true)]
    );
    let deleted = p.r_events.iter().find_map(|e| match e {
        Event::IkeSaDeleted { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(deleted, Some(DeleteReason::PeerAuthenticationFailed));
    assert_eq!(p.r.ike_sas().count() + p.i.ike_sas().count(), 0);
    failed(&p.i_events)
}

fn ds(scheme: SignatureScheme) -> (AuthMethod, Option<SignatureScheme>) {
    (AuthMethod::DigitalSignature, Some(scheme))
}

fn how(a: &cloister_ike::PeerAuth) -> (AuthMethod, Option<SignatureScheme>) {
    (a.method, a.scheme)
}

#[test]
fn rsa_certificates_authenticate_both_roles_with_rfc7427_pkcs1() {
    let i = pubkey_endpoint(
        &pubkey_initiator(
            &local("a-rsa.der", "pubkey", ""),
            &remote("ca-rsa.pem", "pubkey", "site-b.cloister.test"),
        ),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(
            &local("b-rsa.pem", "pubkey", r#"id = "site-b.cloister.test""#),
            &remote("ca-rsa.pem", "pubkey", A_DN),
        ),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    /* IKE_SA_INIT { SA, KE, Ni, N(NATD_S), N(NATD_D), N(SIGNATURE_HASH_ALGORITHMS) } -->
     *   <-- { SA, KE, Nr, N(NATD_S), N(NATD_D), N(SIGNATURE_HASH_ALGORITHMS), CERTREQ }
     * IKE_AUTH { SK { IDi, CERT, N(INITIAL_CONTACT), CERTREQ, IDr, AUTH, SAi2, TSi, TSr } } -->
     *   <-- { SK { IDr, CERT, AUTH, SAr2, TSi, TSr } } */
    p.connect();
    let (i_saw, r_saw) = established(&mut p);
    assert_eq!(how(&i_saw), ds(SignatureScheme::RsaPkcs1Sha256));
    assert_eq!(how(&r_saw), ds(SignatureScheme::RsaPkcs1Sha256));
    assert_eq!(i_saw.certificate.unwrap().subject(), B_DN);
    assert_eq!(r_saw.certificate.unwrap().subject(), A_DN);

    // What strongSwan looks for in IKE_SA_INIT: the hashes we verify, and a CERTREQ naming
    // our CA by the SHA-1 of its public key.
    let ca = Certificate::load(&std::fs::read(cert_file("ca-rsa.pem")).unwrap()).unwrap().remove(0);
    for w in &p.log[..2] {
        let hashes = w.message().notify(NotifyType::SIGNATURE_HASH_ALGORITHMS).map(|n| n.data.clone());
        assert_eq!(hashes, Some(vec![0, 2, 0, 3, 0, 4]), "SHA2-256, SHA2-384, SHA2-512");
    }
    let certreq = p.log[1].message().payloads().find_map(|p| match p {
        Payload::CertificateRequest(c) => Some(c.clone()),
        _ => None,
    });
    let certreq = certreq.expect("CERTREQ in the IKE_SA_INIT response");
    assert_eq!(certreq.encoding, CertEncoding::X509_SIGNATURE);
    assert_eq!(certreq.sha1_key_hashes().unwrap().collect::<Vec<_>>(), [&ca.spki_sha1()[..]]);
    // Both IKE_AUTH messages carry a certificate, so they are much larger than with a PSK.
    assert!(p.log[2].ike().len() > 1000 && p.log[3].ike().len() > 1000);
    // The identities reported are the ones proven: A's subject DN, B's FQDN.
    let Some(Event::IkeSaEstablished { remote_id, local_id, .. }) = p.r_events.first() else { panic!() };
    assert_eq!(remote_id.ty, IdType::DER_ASN1_DN);
    assert_eq!(*local_id, Identification::new(IdType::FQDN, b"site-b.cloister.test".to_vec()));
}

#[test]
fn rsa_pss_is_used_when_configured_and_enforced_when_required() {
    let i = pubkey_endpoint(
        &pubkey_initiator(
            &local("a-rsa.pem", "rsa/pss", ""),
            &remote("ca-rsa.pem", "rsa/pss-sha384", "%any"),
        ),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(
            &local("b-rsa.pem", "rsa/pss-sha384", ""),
            &remote("ca-rsa.pem", "rsa/pss", "%any"),
        ),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    let (i_saw, r_saw) = established(&mut p);
    assert_eq!(how(&r_saw), ds(SignatureScheme::RsaPssSha256));
    assert_eq!(how(&i_saw), ds(SignatureScheme::RsaPssSha384));

    // A responder that demands PSS refuses PKCS#1 v1.5 from the initiator...
    let i = pubkey_endpoint(
        &pubkey_initiator(&local("a-rsa.pem", "rsa", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "rsa/pss", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(responder_refused(&p), Error::AuthMethodRefused { method: 14 });

    // ...and an initiator that demands SHA-512 refuses the responder's SHA-256.
    let i = pubkey_endpoint(
        &pubkey_initiator(&local("a-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey-sha512", "%any")),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey-sha256", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(initiator_refused(&p), Error::AuthMethodRefused { method: 14 });
}

#[test]
fn ecdsa_p256_and_p384_certificates_authenticate_both_roles() {
    for (a, b, a_scheme, b_scheme) in [
        ("a-p256", "b-p256", SignatureScheme::EcdsaP256Sha256, SignatureScheme::EcdsaP256Sha256),
        ("a-p384", "b-p384", SignatureScheme::EcdsaP384Sha384, SignatureScheme::EcdsaP384Sha384),
        ("a-p256", "b-p384", SignatureScheme::EcdsaP256Sha256, SignatureScheme::EcdsaP384Sha384),
    ] {
        let mut p = pair((&format!("{a}.pem"), a), "ca-ec.pem", (&format!("{b}.pem"), b), "ca-ec.pem");
        p.connect();
        let (i_saw, r_saw) = established(&mut p);
        assert_eq!(how(&r_saw), ds(a_scheme), "{a}");
        assert_eq!(how(&i_saw), ds(b_scheme), "{b}");
    }
    // An RSA peer and an ECDSA peer, each trusting the other's CA.
    let mut p = pair(("a-rsa.pem", "a-rsa"), "ca-ec.pem", ("b-p384.pem", "b-p384"), "ca-rsa.pem");
    p.connect();
    let (i_saw, r_saw) = established(&mut p);
    assert_eq!(how(&r_saw), ds(SignatureScheme::RsaPkcs1Sha256));
    assert_eq!(how(&i_saw), ds(SignatureScheme::EcdsaP384Sha384));
}

#[test]
fn without_rfc7427_announced_ecdsa_uses_the_rfc4754_methods() {
    for (a, b, a_method, b_method) in [
        ("a-p256", "b-p384", AuthMethod::EcdsaSha256P256, AuthMethod::EcdsaSha384P384),
        ("a-p384", "b-p256", AuthMethod::EcdsaSha384P384, AuthMethod::EcdsaSha256P256),
    ] {
        let old = EndpointConfig { signature_authentication: false, ..whole_messages() };
        let i = pubkey_endpoint(
            &pubkey_initiator(
                &local(&format!("{a}.pem"), "ecdsa", ""),
                &remote("ca-ec.pem", "ecdsa", "%any"),
            ),
            a,
            old,
        );
        let r = pubkey_endpoint(
            &pubkey_responder(
                &local(&format!("{b}.pem"), "pubkey", ""),
                &remote("ca-ec.pem", "pubkey", "%any"),
            ),
            b,
            whole_messages(),
        );
        let mut p = Pair::new(i, r).with_wall_clock();
        p.connect();
        // The responder announces RFC 7427 only to an initiator that did.
        for w in &p.log[..2] {
            assert!(w.message().notify(NotifyType::SIGNATURE_HASH_ALGORITHMS).is_none());
        }
        let (i_saw, r_saw) = established(&mut p);
        assert_eq!(how(&r_saw), (a_method, None), "{a}");
        assert_eq!(how(&i_saw), (b_method, None), "{b}");
    }
}

#[test]
fn an_intermediate_sent_after_the_certificate_completes_the_path() {
    // B's certificate is issued by an intermediate (signing with RSASSA-PSS) under the RSA CA;
    // A knows only the CA.
    let mut p = pair(("a-p256.pem", "a-p256"), "ca-rsa.pem", ("b-int-chain.pem", "b-int"), "ca-ec.pem");
    p.connect();
    let inner_certs = 2;
    let (i_saw, _) = established(&mut p);
    assert_eq!(i_saw.certificate.unwrap().subject(), B_DN);
    assert!(p.log[3].ike().len() > inner_certs * 1000, "CERT, CERT");
    // Without the intermediate, there is no path.
    let mut p = pair(("a-p256.pem", "a-p256"), "ca-rsa.pem", ("b-int.pem", "b-int"), "ca-ec.pem");
    p.connect();
    assert_eq!(initiator_refused(&p), Error::PeerCertificate(CertError::UntrustedIssuer { depth: 0 }));
}

#[test]
fn every_id_type_is_matched_against_the_certificate() {
    for (id, ty) in [
        ("198.18.0.1", IdType::IPV4_ADDR),
        ("2001:db8::1", IdType::IPV6_ADDR),
        ("site-a.cloister.test", IdType::FQDN),
        ("admin@site-a.cloister.test", IdType::RFC822_ADDR),
        ("C=CH, O=Cloister Test, CN=site-a.cloister.test", IdType::DER_ASN1_DN),
    ] {
        let i = pubkey_endpoint(
            &pubkey_initiator(
                &local("a-rsa.pem", "pubkey", &format!(r#"id = "{id}""#)),
                &remote("ca-rsa.pem", "pubkey", "%any"),
            ),
            "a-rsa",
            whole_messages(),
        );
        // The responder expects it written differently where that is allowed.
        let expect =
            if ty == IdType::DER_ASN1_DN { "/c=ch/o=cloister test/cn=SITE-A.cloister.test" } else { id };
        let r = pubkey_endpoint(
            &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", expect)),
            "b-rsa",
            whole_messages(),
        );
        let mut p = Pair::new(i, r).with_wall_clock();
        p.connect();
        established(&mut p);
        let Some(Event::IkeSaEstablished { remote_id, .. }) = p.r_events.first() else { panic!("{id}") };
        assert_eq!(remote_id.ty, ty, "{id}");
    }
}

#[test]
fn a_side_that_signs_cannot_also_check_a_psk() {
    // `local.secret` names one secret: for a side that signs, its private key. It has no
    // PSK left to check the peer with, so that configuration is refused up front rather
    // than failing every IKE_AUTH.
    let b = pubkey_responder(&local("b-p256.pem", "pubkey", ""), r#"auth = "psk""#);
    let e = Config::from_toml(&b).unwrap_err();
    assert!(e.to_string().contains("remote.auth"), "{e}");
    // The other way round is fine: a PSK to prove ourselves, a CA to check the peer (a
    // strongSwan peer can be configured so).
    let a = pubkey_initiator(
        r#"auth = "psk", secret = "psk", id = "site-a.cloister.test""#,
        &remote("ca-ec.pem", "pubkey", "site-b.cloister.test"),
    );
    let c = Config::from_toml(&a).unwrap();
    assert!(c.connections[0].uses_signatures());
}

#[test]
fn a_certificate_from_another_ca_is_refused_in_either_role() {
    // The initiator's certificate: the responder refuses it.
    let mut p = pair(("a-other.pem", "a-rsa"), "ca-rsa.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::UntrustedIssuer { depth: 0 }));
    // The responder's: the initiator refuses it.
    let mut p = pair(("a-rsa.pem", "a-rsa"), "ca-ec.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    p.connect();
    assert_eq!(initiator_refused(&p), Error::PeerCertificate(CertError::UntrustedIssuer { depth: 0 }));
}

#[test]
fn expired_certificates_are_refused_by_the_engines_wall_clock() {
    let mut p = pair(("a-expired.pem", "a-rsa"), "ca-rsa.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::Expired { depth: 0 }));

    // The wall clock follows the virtual clock: a day before the certificates expire (at
    // 2035-01-01), then two days later.
    let mut p = pair(("a-rsa.pem", "a-rsa"), "ca-rsa.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    let eve = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(2_051_222_400 - 86_400);
    p.i.set_wall_clock(p.now, eve);
    p.r.set_wall_clock(p.now, eve);
    p.now += Duration::from_secs(2 * 86_400);
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::Expired { depth: 0 }));
}

#[test]
fn an_endpoint_without_a_wall_clock_refuses_certificates() {
    let i = pubkey_endpoint(
        &pubkey_initiator(&local("a-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r);
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::NoWallClock));
}

#[test]
fn an_identity_not_in_the_certificate_or_not_the_expected_one_is_refused() {
    // A claims an identity its certificate does not hold (the configuration would refuse it,
    // so the connection is edited after loading, as a misbehaving peer would).
    let text = pubkey_initiator(&local("a-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any"));
    let mut conn = Config::from_toml(&text).unwrap().connections.remove(0);
    conn.local_id = Identification::new(IdType::FQDN, b"site-b.cloister.test".to_vec());
    let mut i = pubkey_endpoint("", "a-rsa", whole_messages());
    i.add_connection(conn).unwrap();
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::IdentityNotCertified));

    // B proves its subject DN, which its certificate holds, but A expects its address.
    let text =
        pubkey_initiator(&local("a-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "198.18.0.2"));
    let i = pubkey_endpoint(&text, "a-rsa", whole_messages());
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(initiator_refused(&p), Error::IdentityMismatch);
}

#[test]
fn a_private_key_that_is_not_the_certificates_is_refused() {
    // A signs with B's key under A's certificate.
    let mut p = pair(("a-rsa.pem", "b-rsa"), "ca-rsa.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    p.connect();
    assert_eq!(responder_refused(&p), Error::AuthenticationFailed { side: Side::Local });
    // B signs with A's key under B's certificate.
    let mut p = pair(("a-p256.pem", "a-p256"), "ca-ec.pem", ("b-p256.pem", "a-p256"), "ca-ec.pem");
    p.connect();
    assert_eq!(initiator_refused(&p), Error::AuthenticationFailed { side: Side::Local });
}

#[test]
fn a_peer_without_a_certificate_is_refused() {
    // A authenticates with a PSK where B wants a certificate: no CERT payload.
    let i = pubkey_endpoint(
        &pubkey_initiator(r#"auth = "psk", secret = "psk", id = "site-a.cloister.test""#, r#"auth = "psk""#),
        "a-rsa",
        whole_messages(),
    );
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::Missing));
}

#[test]
fn an_issuer_that_is_not_a_ca_or_a_certificate_without_digital_signature_is_refused() {
    // a-by-ee is issued by B's end-entity certificate, which A sends along.
    let text = pubkey_initiator(&local("a-by-ee.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any"));
    let mut conn = Config::from_toml(&text).unwrap().connections.remove(0);
    conn.local_certs.extend(Certificate::load(&std::fs::read(cert_file("b-rsa.pem")).unwrap()).unwrap());
    let mut i = pubkey_endpoint("", "a-rsa", whole_messages());
    i.add_connection(conn).unwrap();
    let r = pubkey_endpoint(
        &pubkey_responder(&local("b-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any")),
        "b-rsa",
        whole_messages(),
    );
    let mut p = Pair::new(i, r).with_wall_clock();
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::NotCa { depth: 1 }));

    let mut p = pair(("a-keyenc.pem", "a-rsa"), "ca-rsa.pem", ("b-rsa.pem", "b-rsa"), "ca-rsa.pem");
    p.connect();
    assert_eq!(responder_refused(&p), Error::PeerCertificate(CertError::KeyUsage { depth: 0 }));
}

#[test]
fn a_modified_ike_sa_init_breaks_the_signature_that_covers_it() {
    // Someone on the path strips SHA-512 from the initiator's announced hashes: the responder
    // verifies A's AUTH over the message it received, which A did not sign.
    let mut p = pair(("a-p256.pem", "a-p256"), "ca-ec.pem", ("b-p256.pem", "b-p256"), "ca-ec.pem");
    p.i.initiate(p.now, "to-b").unwrap();
    let t = p.i.poll_transmit().unwrap();
    let mut m = wire::ike::Message::decode(&t.contents).unwrap();
    for link in &mut m.chain {
        if let Payload::Notify(n) = &mut link.payload {
            if n.ty == NotifyType::SIGNATURE_HASH_ALGORITHMS {
                n.data.truncate(4);
            }
        }
    }
    p.r.handle_datagram(p.now, t.local, t.remote, &m.to_vec().unwrap());
    p.drive();
    assert_eq!(failed(&p.r_events), Error::AuthenticationFailed { side: Side::Local });
    assert_eq!(failed(&p.i_events), Error::AuthenticationFailed { side: Side::Remote });
}

/// An enclave that flips one bit of every AUTH payload it computes: a peer whose signature
/// is wrong although the SK payload around it is intact.
struct TamperingEnclave(InlineEnclave);

impl Enclave for TamperingEnclave {
    fn tenant(&self) -> TenantId {
        self.0.tenant()
    }
    fn identity_evidence(&mut self, challenge: &[u8; 32]) -> enclave_core::Result<Evidence> {
        self.0.identity_evidence(challenge)
    }
    fn memory_report(&self) -> MemoryReport {
        self.0.memory_report()
    }
    fn counters(&self) -> Counters {
        self.0.counters()
    }
    fn provision_secret(&mut self, wrapped: &[u8]) -> enclave_core::Result<SecretHandle> {
        self.0.provision_secret(wrapped)
    }
    fn secret_kind(&mut self, secret: SecretHandle) -> enclave_core::Result<SecretKind> {
        self.0.secret_kind(secret)
    }
    fn delete_secret(&mut self, secret: SecretHandle) -> enclave_core::Result<()> {
        self.0.delete_secret(secret)
    }
    fn random_nonce(&mut self, out: &mut [u8]) -> enclave_core::Result<()> {
        self.0.random_nonce(out)
    }
    fn ike_nonces(&mut self, out: &mut [u8]) -> enclave_core::Result<()> {
        self.0.ike_nonces(out)
    }
    fn dh_generate(&mut self, group: DhGroup, public_out: &mut [u8]) -> enclave_core::Result<DhHandle> {
        self.0.dh_generate(group, public_out)
    }
    fn dh_delete(&mut self, dh: DhHandle) -> enclave_core::Result<()> {
        self.0.dh_delete(dh)
    }
    fn ike_sa_rekey_additional(
        &mut self,
        old: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        kes: &[DhExchange<'_>],
        params: &IkeSaParams<'_>,
    ) -> enclave_core::Result<IkeSaHandle> {
        self.0.ike_sa_rekey_additional(old, sealed_sk_d, kes, params)
    }
    fn ke_respond(
        &mut self,
        group: DhGroup,
        peer_public: &[u8],
        public_out: &mut [u8],
    ) -> enclave_core::Result<DhHandle> {
        self.0.ke_respond(group, peer_public, public_out)
    }
    fn ike_sa_intermediate(
        &mut self,
        ike: IkeSaHandle,
        ke: DhExchange<'_>,
        exchange: &enclave_core::IntermediateExchange<'_>,
    ) -> enclave_core::Result<()> {
        self.0.ike_sa_intermediate(ike, ke, exchange)
    }
    fn ike_sa_create(
        &mut self,
        dh: DhExchange<'_>,
        params: &IkeSaParams<'_>,
    ) -> enclave_core::Result<IkeSaHandle> {
        self.0.ike_sa_create(dh, params)
    }
    fn ike_sa_rekey(
        &mut self,
        old: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        dh: DhExchange<'_>,
        params: &IkeSaParams<'_>,
    ) -> enclave_core::Result<IkeSaHandle> {
        self.0.ike_sa_rekey(old, sealed_sk_d, dh, params)
    }
    fn auth_compute(
        &mut self,
        ike: IkeSaHandle,
        credential: SecretHandle,
        spec: AuthSpec,
        input: &AuthInput<'_>,
        out: &mut [u8],
    ) -> enclave_core::Result<(AuthMethod, usize)> {
        let (method, len) = self.0.auth_compute(ike, credential, spec, input, out)?;
        if let Some(last) = len.checked_sub(1).and_then(|i| out.get_mut(i)) {
            *last ^= 0x01;
        }
        Ok((method, len))
    }
    fn auth_verify(
        &mut self,
        ike: IkeSaHandle,
        peer: PeerCredential<'_>,
        method: u8,
        auth_data: &[u8],
        input: &AuthInput<'_>,
    ) -> enclave_core::Result<AuthVerified> {
        self.0.auth_verify(ike, peer, method, auth_data, input)
    }
    fn sk_encrypt(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> enclave_core::Result<()> {
        self.0.sk_encrypt(ike, message, aad_len, plaintext_len)
    }
    fn sk_decrypt(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
    ) -> enclave_core::Result<Range<usize>> {
        self.0.sk_decrypt(ike, message, aad_len)
    }
    fn child_sa_create(
        &mut self,
        ike: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        pfs: Option<DhExchange<'_>>,
        params: &ChildSaParams<'_>,
    ) -> enclave_core::Result<ChildSaPair> {
        self.0.child_sa_create(ike, sealed_sk_d, pfs, params)
    }
    fn clear_and_seal(&mut self, ike: IkeSaHandle) -> enclave_core::Result<SealedBlob> {
        self.0.clear_and_seal(ike)
    }
    fn ike_sa_seal_state(&mut self, ike: IkeSaHandle) -> enclave_core::Result<SealedBlob> {
        self.0.ike_sa_seal_state(ike)
    }
    fn establish_seal(&mut self, ike: IkeSaHandle) -> enclave_core::Result<enclave_core::EstablishSeal> {
        self.0.establish_seal(ike)
    }
    fn ike_sa_restore(&mut self, state: &SealedBlob) -> enclave_core::Result<IkeSaHandle> {
        self.0.ike_sa_restore(state)
    }
    fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> enclave_core::Result<()> {
        self.0.ike_sa_delete(ike)
    }
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> enclave_core::Result<BatchSummary> {
        self.0.esp_batch(packets, descriptors, status)
    }
    fn esp_sa_delete(&mut self, sa: EspSaHandle) -> enclave_core::Result<()> {
        self.0.esp_sa_delete(sa)
    }
}

/// Moves datagrams between two endpoints of any enclave until none is left.
fn drive<A: Enclave, B: Enclave>(i: &mut Endpoint<A>, r: &mut Endpoint<B>, now: Instant) {
    for _ in 0..100 {
        let (to_r, to_i): (Vec<_>, Vec<_>) = (
            core::iter::from_fn(|| i.poll_transmit()).collect(),
            core::iter::from_fn(|| r.poll_transmit()).collect(),
        );
        if to_r.is_empty() && to_i.is_empty() {
            return;
        }
        for t in to_r {
            r.handle_datagram(now, t.local, t.remote, &t.contents);
        }
        for t in to_i {
            i.handle_datagram(now, t.local, t.remote, &t.contents);
        }
    }
}

/// [`pubkey_endpoint`] over a [`TamperingEnclave`], with the wall clock set at `now`.
fn tampering_endpoint(toml: &str, key: &str, now: Instant) -> Endpoint<TamperingEnclave> {
    let mut enclave = util::start_enclave(1);
    let pkcs8 = std::fs::read(cert_file(&format!("{key}.key.der"))).unwrap();
    let handle = util::provision(&mut enclave, util::key_kind(key), &pkcs8);
    let mut ep = Endpoint::new(TamperingEnclave(enclave), whole_messages());
    ep.add_secret("key", handle);
    for conn in Config::from_toml(toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep.set_wall_clock(now, util::wall());
    ep
}

#[test]
fn a_tampered_auth_payload_is_refused_in_either_role() {
    let now = Instant::now();
    let a_toml = pubkey_initiator(&local("a-rsa.pem", "rsa/pss", ""), &remote("ca-ec.pem", "pubkey", "%any"));
    let b_toml =
        pubkey_responder(&local("b-p384.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any"));
    let honest = |toml: &str, key| {
        let mut ep = pubkey_endpoint(toml, key, whole_messages());
        ep.set_wall_clock(now, util::wall());
        ep
    };

    // The initiator's RSA-PSS signature is off by one bit: the responder refuses it.
    let mut i = tampering_endpoint(&a_toml, "a-rsa", now);
    let mut r = honest(&b_toml, "b-p384");
    i.initiate(now, "to-b").unwrap();
    drive(&mut i, &mut r, now);
    let i_events: Vec<Event> = core::iter::from_fn(|| i.poll_event()).collect();
    let r_events: Vec<Event> = core::iter::from_fn(|| r.poll_event()).collect();
    assert_eq!(failed(&r_events), Error::AuthenticationFailed { side: Side::Local });
    assert_eq!(failed(&i_events), Error::AuthenticationFailed { side: Side::Remote });

    // The responder's ECDSA signature is: the initiator refuses it and says so.
    let mut i = honest(&a_toml, "a-rsa");
    let mut r = tampering_endpoint(&b_toml, "b-p384", now);
    i.initiate(now, "to-b").unwrap();
    drive(&mut i, &mut r, now);
    let i_events: Vec<Event> = core::iter::from_fn(|| i.poll_event()).collect();
    let r_events: Vec<Event> = core::iter::from_fn(|| r.poll_event()).collect();
    assert_eq!(failed(&i_events), Error::AuthenticationFailed { side: Side::Local });
    assert!(
        r_events
            .iter()
            .any(|e| matches!(e, Event::IkeSaDeleted { reason: DeleteReason::PeerAuthenticationFailed, .. })),
        "{r_events:#?}"
    );
}

#[test]
fn add_connection_checks_the_secret_against_the_certificate() {
    let text = pubkey_initiator(&local("a-rsa.pem", "pubkey", ""), &remote("ca-rsa.pem", "pubkey", "%any"));
    let conn = Config::from_toml(&text).unwrap().connections.remove(0);
    // `key` is a P-256 key here, `psk` a pre-shared key: neither signs for an RSA certificate.
    let mut ep = pubkey_endpoint("", "a-p256", whole_messages());
    let e = ep.add_connection(conn.clone()).unwrap_err();
    assert!(matches!(e, Error::WrongSecretKind { .. }), "{e}");
    assert!(e.to_string().contains("to-b") && e.to_string().contains("\"key\""), "{e}");
    let mut psk_conn = conn.clone();
    psk_conn.secret = "psk".into();
    assert!(matches!(ep.add_connection(psk_conn), Err(Error::WrongSecretKind { .. })));
    let mut ep = pubkey_endpoint("", "a-rsa", whole_messages());
    ep.add_connection(conn).unwrap();
}
