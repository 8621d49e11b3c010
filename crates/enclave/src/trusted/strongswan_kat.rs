//! Cross-check of IKEv2 key derivation against strongSwan on the same inputs.
//!
//! `scripts/capture-wire-vectors.sh` recorded a real exchange between two charon 5.9.8
//! instances together with their level-4 logs, which dump g^ir, SKEYSEED, every SK_* and
//! the first child SA's ESP keys. Nonces and SPIs come from the captured IKE_SA_INIT pair.
//! Our derivation (RFC 7296 §2.14, §2.17) must reproduce strongSwan's bytes exactly, for
//! both roles and both captures (IPv4 and IPv6 runs, so two independent key sets).

use std::collections::HashMap;
use std::path::PathBuf;

use wire::ike::{Message, Payload};

use super::dh::SharedSecret;
use super::ike_keys::{derive_child_keys, derive_ike_sa, SkeyseedSource};
use enclave_api::alg::{Cipher, Prf, Role, Suite};
use enclave_api::ike::{ChildSaParams, IkeSaParams};

fn vectors() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../wire/tests/vectors"))
}

/// The first hex dump under each label of a charon log (`label => N bytes @ addr`, then
/// lines `   0: 01 02 ...  ascii`).
fn dumps(log: &str) -> HashMap<String, Vec<u8>> {
    let mut out: HashMap<String, Vec<u8>> = HashMap::new();
    let mut current: Option<(String, usize)> = None;
    for line in log.lines() {
        let body = line.split_once("] ").map_or(line, |(_, b)| b);
        if let Some((label, rest)) = body.split_once(" => ") {
            let len = rest.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
            current = (!out.contains_key(label)).then(|| (label.to_owned(), len));
            if let Some((l, _)) = &current {
                out.insert(l.clone(), Vec::new());
            }
            continue;
        }
        let Some((label, len)) = &current else { continue };
        let Some((_, hex)) = body.trim_start().split_once(": ") else { continue };
        let bytes = out.entry(label.clone()).or_default();
        for tok in hex.split_whitespace().take_while(|t| t.len() == 2) {
            if bytes.len() < *len {
                bytes.push(u8::from_str_radix(tok, 16).expect("hex dump byte"));
            }
        }
    }
    out
}

fn sa_init(fam: &str, which: &str) -> Message {
    let name = format!("ike-{fam}-{which}.bin");
    let bytes = std::fs::read(vectors().join(&name)).expect("captured IKE_SA_INIT");
    Message::decode(&bytes).expect("captured message decodes")
}

fn nonce(m: &Message) -> Vec<u8> {
    m.payloads()
        .find_map(|p| if let Payload::Nonce(n) = p { Some(n.data.clone()) } else { None })
        .expect("IKE_SA_INIT carries a nonce")
}

fn check(fam: &str, role: Role) {
    let side = if role == Role::Initiator { "initiator" } else { "responder" };
    let log = std::fs::read_to_string(vectors().join(format!("strongswan-{fam}-{side}.log"))).expect("log");
    let d = dumps(&log);
    let get = |l: &str| d.get(l).cloned().unwrap_or_else(|| panic!("{fam} {side}: no {l:?} in log"));
    let (req, resp) = (sa_init(fam, "00-sa_init-req"), sa_init(fam, "01-sa_init-resp"));
    let (ni, nr) = (nonce(&req), nonce(&resp));
    // The capture negotiated aes256gcm16-prfsha256-ecp256 for IKE and aes256gcm16 for ESP.
    let suite = Suite { cipher: Cipher::AesGcm16_256, integ: None };
    let params = IkeSaParams {
        role,
        prf: Prf::HmacSha256,
        suite,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_i: resp.header.initiator_spi,
        spi_r: resp.header.responder_spi,
    };
    let g_ir = SharedSecret::from_slice(&get("shared Diffie Hellman secret")).unwrap();
    let sa = derive_ike_sa(SkeyseedSource::Initial, &g_ir, &params).unwrap();
    let sk_d = sa.sk_d.as_ref().unwrap();
    assert_eq!(sk_d.as_slice(), get("Sk_d secret"), "{fam} {side}: SK_d");
    assert_eq!(sa.sk_ei.as_slice(), get("Sk_ei secret"), "{fam} {side}: SK_ei");
    assert_eq!(sa.sk_er.as_slice(), get("Sk_er secret"), "{fam} {side}: SK_er");
    let p = sa.sk_p.as_ref().unwrap();
    assert_eq!(p.i.as_slice(), get("Sk_pi secret"), "{fam} {side}: SK_pi");
    assert_eq!(p.r.as_slice(), get("Sk_pr secret"), "{fam} {side}: SK_pr");
    // AEAD: no integrity keys, and charon logs none.
    assert!(sa.sk_ai.as_slice().is_empty() && sa.sk_ar.as_slice().is_empty(), "{fam} {side}: SK_a*");

    // The first child SA is keyed from the IKE_SA_INIT nonces (§2.17).
    let child = ChildSaParams {
        role,
        suite,
        esn: false,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_inbound: 1,
        spi_outbound: 2,
    };
    let (inbound, outbound) = derive_child_keys(Prf::HmacSha256, sk_d.as_slice(), None, &child).unwrap();
    let (i_to_r, r_to_i) = if role == Role::Initiator { (outbound, inbound) } else { (inbound, outbound) };
    assert_eq!(i_to_r.enc.as_slice(), get("encryption initiator key"), "{fam} {side}: ESP i->r key");
    assert_eq!(r_to_i.enc.as_slice(), get("encryption responder key"), "{fam} {side}: ESP r->i key");
}

#[test]
fn ike_and_child_keys_match_strongswan_as_initiator() {
    check("v4", Role::Initiator);
    check("v6", Role::Initiator);
}

#[test]
fn ike_and_child_keys_match_strongswan_as_responder() {
    check("v4", Role::Responder);
    check("v6", Role::Responder);
}

#[test]
fn log_parser_reads_labelled_dumps() {
    let log = "1 12[IKE] SKEYSEED => 4 bytes @ 0x1\n1 12[IKE]    0: DE AD BE EF  ....\n1 12[ENC] other\n";
    assert_eq!(dumps(log).get("SKEYSEED"), Some(&vec![0xde, 0xad, 0xbe, 0xef]));
}
