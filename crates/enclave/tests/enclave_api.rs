//! The call surface end to end: two enclaves (initiator and responder) run the IKE key
//! steps against each other, then exchange ESP batches; bad input is refused and counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cloister_enclave::attest::{verify_software_evidence, CodeIdentity, SoftwareAttestation};
use cloister_enclave::ledger::{Ledger as _, MemoryLedger};
use cloister_enclave::provision::wrap_secret;
use cloister_enclave::*;

mod support;

const PROV_KEY: [u8; 32] = [0x42; 32];

fn start(tenant: u32) -> InlineEnclave {
    start_with(tenant, PROV_KEY, MemoryLedger::new())
}

fn start_with(tenant: u32, key: [u8; 32], ledger: MemoryLedger) -> InlineEnclave {
    start_limits(tenant, key, ledger, Limits::default())
}

fn start_limits(tenant: u32, key: [u8; 32], ledger: MemoryLedger, limits: Limits) -> InlineEnclave {
    let config = EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(key),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits,
    };
    let platform = SoftwareAttestation::generate_platform_key().unwrap();
    let att = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"enclave".to_vec()),
        &config.measured_bytes(Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start_with_ledger(config, Box::new(att), Box::new(ledger)).unwrap()
}

fn provision(e: &mut InlineEnclave, kind: SecretKind, secret: &[u8]) -> SecretHandle {
    let blob = wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), e.tenant(), kind, secret).unwrap();
    e.provision_secret(&blob).unwrap()
}

struct Pair {
    i: InlineEnclave,
    r: InlineEnclave,
    ike_i: IkeSaHandle,
    ike_r: IkeSaHandle,
    ni: Vec<u8>,
    nr: Vec<u8>,
    /// IKE_SA_INIT request and response, as AUTH covers them.
    msg1: Vec<u8>,
    msg2: Vec<u8>,
}

/* IKE_SA_INIT { SA, KE, Ni } <--> { SA, KE, Nr } */
fn ike_sa_init(group: DhGroup, prf: Prf, suite: Suite) -> Pair {
    ike_sa_init_with(group, prf, suite, InboundMode::Decrypt)
}

/// As [`ike_sa_init`], the responder's inbound SAs bound to `r_inbound`. Both then
/// authenticate with a PSK, as IKE_AUTH does before any child SA.
fn ike_sa_init_with(group: DhGroup, prf: Prf, suite: Suite, r_inbound: InboundMode) -> Pair {
    let r_limits = Limits { inbound: r_inbound, ..Limits::default() };
    let (mut i, mut r) = (start(1), start_limits(1, PROV_KEY, MemoryLedger::new(), r_limits));
    let h = enclave_api::testing::ike_sa_init(&mut i, &mut r, group, prf, suite, (0x1111, 0x2222)).unwrap();
    let (psk_i, psk_r) = (support::psk(&mut i, PROV_KEY), support::psk(&mut r, PROV_KEY));
    h.authenticate_psk(&mut i, &mut r, psk_i, psk_r).unwrap();
    pair(i, r, h)
}

/// IKE_SA_INIT only: neither side has computed or verified an AUTH (each computes its own
/// once per IKE SA).
fn before_auth(group: DhGroup, prf: Prf, suite: Suite) -> Pair {
    let (mut i, mut r) = (start(1), start(1));
    let h = enclave_api::testing::ike_sa_init(&mut i, &mut r, group, prf, suite, (0x1111, 0x2222)).unwrap();
    pair(i, r, h)
}

fn pair(i: InlineEnclave, r: InlineEnclave, h: enclave_api::testing::Handshake) -> Pair {
    let enclave_api::testing::Handshake { ike_a: ike_i, ike_b: ike_r, msg1, msg2, ni, nr, .. } = h;
    Pair { i, r, ike_i, ike_r, ni, nr, msg1, msg2 }
}

fn sk_round_trip(
    from: &mut InlineEnclave,
    fh: IkeSaHandle,
    to: &mut InlineEnclave,
    th: IkeSaHandle,
    suite: Suite,
) {
    let inner = b"inner payloads of an IKE_AUTH request";
    let aad_len = 28 + 4;
    let layout = suite.sk_layout(inner.len());
    let mut msg = vec![0xAB; aad_len + layout.body_len(inner.len())];
    msg[aad_len + layout.iv_len..][..inner.len()].copy_from_slice(inner);
    from.sk_encrypt(fh, &mut msg, aad_len, inner.len()).unwrap();
    let mut tampered = msg.clone();
    tampered[3] ^= 1;
    assert_eq!(to.sk_decrypt(th, &mut tampered, aad_len), Err(Error::IntegrityCheckFailed));
    let range = to.sk_decrypt(th, &mut msg, aad_len).unwrap();
    assert_eq!(&msg[range], inner);
}

fn auth_input<'a>(msg: &'a [u8], nonce: &'a [u8], id: &'a [u8]) -> AuthInput<'a> {
    AuthInput { real_message: msg, peer_nonce: nonce, id_body: id }
}

#[test]
fn ike_steps_agree_for_every_group_and_suite() {
    for (group, prf, suite) in [
        (DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_256)),
        (DhGroup::EcpP256, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_128)),
        (DhGroup::EcpP384, Prf::HmacSha384, Suite::cbc(Cipher::AesCbc256, Integ::HmacSha384_192)),
        (DhGroup::Modp2048, Prf::HmacSha512, Suite::cbc(Cipher::AesCbc128, Integ::HmacSha512_256)),
        (DhGroup::Modp3072, Prf::HmacSha256, Suite::aead(Cipher::ChaCha20Poly1305)),
    ] {
        let mut p = ike_sa_init(group, prf, suite);
        sk_round_trip(&mut p.i, p.ike_i, &mut p.r, p.ike_r, suite);
        sk_round_trip(&mut p.r, p.ike_r, &mut p.i, p.ike_i, suite);
    }
}

#[test]
fn psk_auth_verifies_both_ways_and_rejects_a_wrong_key() {
    let mut p = before_auth(DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_256));
    let psk_i = provision(&mut p.i, SecretKind::PreSharedKey, b"tenant shared secret");
    let psk_r = provision(&mut p.r, SecretKind::PreSharedKey, b"tenant shared secret");
    let wrong = provision(&mut p.r, SecretKind::PreSharedKey, b"another secret");
    let (msg1, idi) = (p.msg1.clone(), b"\x02\0\0\0site-a".to_vec());
    /* IKE_AUTH { SK { IDi, AUTH, SAi2, TSi, TSr } } --> */
    let mut auth = [0u8; 64];
    let (method, n) =
        p.i.auth_compute(p.ike_i, psk_i, AuthSpec::SharedKey, &auth_input(&msg1, &p.nr, &idi), &mut auth)
            .unwrap();
    assert_eq!((method, n), (AuthMethod::SharedKey, 32));
    let v =
        p.r.auth_verify(
            p.ike_r,
            PeerCredential::SharedKey(psk_r),
            2,
            &auth[..n],
            &auth_input(&msg1, &p.nr, &idi),
        )
        .unwrap();
    assert_eq!(v.method, AuthMethod::SharedKey);
    assert_eq!(
        p.r.auth_verify(
            p.ike_r,
            PeerCredential::SharedKey(wrong),
            2,
            &auth[..n],
            &auth_input(&msg1, &p.nr, &idi)
        ),
        Err(Error::AuthenticationFailed { method: 2 })
    );
    // The responder's AUTH is over message 2 and Ni, with SK_pr.
    let (msg2, idr) = (p.msg2.clone(), b"\x02\0\0\0cloister".to_vec());
    let (_, n) =
        p.r.auth_compute(p.ike_r, psk_r, AuthSpec::SharedKey, &auth_input(&msg2, &p.ni, &idr), &mut auth)
            .unwrap();
    p.i.auth_verify(
        p.ike_i,
        PeerCredential::SharedKey(psk_i),
        2,
        &auth[..n],
        &auth_input(&msg2, &p.ni, &idr),
    )
    .unwrap();
    // A tampered message does not verify.
    assert!(p
        .i
        .auth_verify(
            p.ike_i,
            PeerCredential::SharedKey(psk_i),
            2,
            &auth[..n],
            &auth_input(&msg1, &p.ni, &idr)
        )
        .is_err());
}

#[test]
fn signature_auth_with_rsa_and_ecdsa() {
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let rsa_pk8 = include_bytes!("data/rsa2048_test_key.pk8");
    let rsa_pub = PublicKey::from_spki_der(include_bytes!("data/rsa2048_test_key.spki")).unwrap();
    let rng = ring::rand::SystemRandom::new();
    let p384 =
        ring::signature::EcdsaKeyPair::generate_pkcs8(&ring::signature::ECDSA_P384_SHA384_ASN1_SIGNING, &rng)
            .unwrap();
    let ec_pair = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        p384.as_ref(),
        &rng,
    )
    .unwrap();
    let ec_pub = PublicKey {
        kind: PublicKeyKind::EcdsaP384,
        bytes: ring::signature::KeyPair::public_key(&ec_pair).as_ref().to_vec(),
    };
    let (rsa, ec) = (SecretKind::RsaPrivateKey, SecretKind::EcdsaP384PrivateKey);
    let idi = b"\x09\0\0\0CN=site-a".to_vec();
    let mut out = [0u8; 600];
    for (kind, pk8, spec, pk) in [
        (rsa, &rsa_pk8[..], AuthSpec::DigitalSignature(SignatureScheme::RsaPkcs1Sha256), &rsa_pub),
        (rsa, &rsa_pk8[..], AuthSpec::DigitalSignature(SignatureScheme::RsaPssSha384), &rsa_pub),
        (rsa, &rsa_pk8[..], AuthSpec::DigitalSignature(SignatureScheme::RsaPssSha512), &rsa_pub),
        (ec, p384.as_ref(), AuthSpec::DigitalSignature(SignatureScheme::EcdsaP384Sha384), &ec_pub),
        (ec, p384.as_ref(), AuthSpec::Ecdsa, &ec_pub),
    ] {
        // Our AUTH is computed once per IKE SA: an exchange for each key and scheme.
        let mut p = before_auth(DhGroup::EcpP256, Prf::HmacSha256, suite);
        let key = provision(&mut p.i, kind, pk8);
        let msg1 = p.msg1.clone();
        let input = auth_input(&msg1, &p.nr, &idi);
        let (method, n) = p.i.auth_compute(p.ike_i, key, spec, &input, &mut out).unwrap();
        let v =
            p.r.auth_verify(p.ike_r, PeerCredential::PublicKey(pk), method.id(), &out[..n], &input).unwrap();
        if let AuthSpec::DigitalSignature(s) = spec {
            assert_eq!(v.scheme, Some(s));
        }
        let mut bad = out[..n].to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert!(p.r.auth_verify(p.ike_r, PeerCredential::PublicKey(pk), method.id(), &bad, &input).is_err());
    }
    // A key cannot sign with a scheme of another family; a PSK handle is no signing key; too
    // small an output buffer is refused, not truncated. None of these signs, so the
    // exchange's one AUTH is still to come.
    let mut p = before_auth(DhGroup::EcpP256, Prf::HmacSha256, suite);
    let rsa = provision(&mut p.i, rsa, rsa_pk8);
    let psk = provision(&mut p.i, SecretKind::PreSharedKey, b"x");
    let msg1 = p.msg1.clone();
    let input = auth_input(&msg1, &p.nr, &idi);
    let spec = AuthSpec::DigitalSignature(SignatureScheme::EcdsaP256Sha256);
    assert!(matches!(
        p.i.auth_compute(p.ike_i, rsa, spec, &input, &mut out),
        Err(Error::WrongSecretKind { .. })
    ));
    assert!(matches!(
        p.i.auth_compute(p.ike_i, psk, spec, &input, &mut out),
        Err(Error::WrongSecretKind { .. })
    ));
    let spec = AuthSpec::DigitalSignature(SignatureScheme::RsaPkcs1Sha256);
    assert!(matches!(
        p.i.auth_compute(p.ike_i, rsa, spec, &input, &mut out[..100]),
        Err(Error::BadLength { .. })
    ));
    p.i.auth_compute(p.ike_i, rsa, spec, &input, &mut out).unwrap();
    assert_eq!(
        p.i.auth_compute(p.ike_i, rsa, spec, &input, &mut out).map(|_| ()),
        Err(Error::ProtocolRefused { why: enclave_api::error::refusal::ALREADY_SIGNED })
    );
}

/// A child SA as CREATE_CHILD_SA makes one: each side names a fresh nonce of its own.
fn child(p: &mut Pair, suite: Suite, esn: bool, pfs: Option<DhGroup>) -> (ChildSaPair, ChildSaPair) {
    let (ni, nr) = (support::nonce(&mut p.i), support::nonce(&mut p.r));
    let params = |role| ChildSaParams {
        role,
        suite,
        esn,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_inbound: if role == Role::Initiator { 0xc1c1_0001 } else { 0xc2c2_0002 },
        spi_outbound: if role == Role::Initiator { 0xc2c2_0002 } else { 0xc1c1_0001 },
    };
    match pfs {
        None => (
            p.i.child_sa_create(p.ike_i, None, None, &params(Role::Initiator)).unwrap(),
            p.r.child_sa_create(p.ike_r, None, None, &params(Role::Responder)).unwrap(),
        ),
        Some(g) => {
            let (mut ke_i, mut ke_r) = (vec![0u8; g.public_len()], vec![0u8; g.public_len()]);
            let dh_i = p.i.dh_generate(g, &mut ke_i).unwrap();
            let dh_r = p.r.dh_generate(g, &mut ke_r).unwrap();
            (
                p.i.child_sa_create(
                    p.ike_i,
                    None,
                    Some(DhExchange { dh: dh_i, peer_public: &ke_r }),
                    &params(Role::Initiator),
                )
                .unwrap(),
                p.r.child_sa_create(
                    p.ike_r,
                    None,
                    Some(DhExchange { dh: dh_r, peer_public: &ke_i }),
                    &params(Role::Responder),
                )
                .unwrap(),
            )
        }
    }
}

/// Lays out `n` ESP packets of `payload` bytes (trailer included) in one area.
fn layout(suite: Suite, n: usize, payload: usize) -> (Vec<u8>, Vec<(u32, u32)>) {
    let (head, icv) = suite.esp_overhead();
    let len = head + payload + icv;
    let mut area = vec![0u8; n * len];
    let mut regions = Vec::new();
    for k in 0..n {
        let off = k * len;
        for (j, b) in area[off + head..off + head + payload].iter_mut().enumerate() {
            *b = u8::try_from((j + k) % 256).unwrap();
        }
        regions.push((u32::try_from(off).unwrap(), u32::try_from(len).unwrap()));
    }
    (area, regions)
}

#[test]
fn esp_batches_round_trip_for_every_transform_with_and_without_esn() {
    for suite in [
        Suite::aead(Cipher::AesGcm16_128),
        Suite::aead(Cipher::AesGcm16_256),
        Suite::aead(Cipher::ChaCha20Poly1305),
        Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128),
        Suite::cbc(Cipher::AesCbc256, Integ::HmacSha384_192),
        Suite::cbc(Cipher::AesCbc256, Integ::HmacSha512_256),
    ] {
        for esn in [false, true] {
            let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_256));
            let (ci, cr) = child(&mut p, suite, esn, if esn { Some(DhGroup::EcpP256) } else { None });
            let (mut area, regions) = layout(suite, 8, 64);
            let original = area.clone();
            let base: u64 = if esn { 0x7_FFFF_FFFE } else { 1 };
            let enc: Vec<_> = regions
                .iter()
                .enumerate()
                .map(|(k, &(o, l))| EspDescriptor::encrypt(ci.outbound, o, l, base + k as u64))
                .collect();
            let mut status = vec![EspStatus::NotProcessed; enc.len()];
            let s = p.i.esp_batch(&mut area, &enc, &mut status).unwrap();
            assert_eq!((s.ok, s.failed), (8, 0), "{suite:?} esn={esn} {status:?}");
            assert_ne!(area, original);
            // The low 32 bits of the sequence number are on the wire, the SPI is the peer's.
            assert_eq!(&area[..4], &0xc2c2_0002u32.to_be_bytes());
            assert_eq!(&area[4..8], &base.to_be_bytes()[4..]);
            let dec: Vec<_> = regions
                .iter()
                .enumerate()
                .map(|(k, &(o, l))| EspDescriptor::decrypt(cr.inbound, o, l, base + k as u64))
                .collect();
            let s = p.r.esp_batch(&mut area, &dec, &mut status).unwrap();
            assert_eq!((s.ok, s.failed), (8, 0), "{suite:?} esn={esn} {status:?}");
            let (head, _) = suite.esp_overhead();
            for &(o, _) in &regions {
                let o = o as usize;
                assert_eq!(area[o + head..o + head + 64], original[o + head..o + head + 64]);
            }
            assert_eq!(p.r.counters().esp_status(EspStatus::Ok), 8);
        }
    }
}

#[test]
fn outbound_numbers_may_cross_out_of_order_but_never_twice() {
    // Two gateway workers draw 1..=4 and 5..=8 from one SA's counter; the second crosses
    // first. Both batches are sealed, the peer opens all eight, and no number goes twice.
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (ci, cr) = child(&mut p, suite, false, None);
    let (mut area, regions) = layout(suite, 8, 64);
    let enc = |seqs: core::ops::RangeInclusive<u64>| -> Vec<EspDescriptor> {
        seqs.map(|s| {
            let (o, l) = regions[usize::try_from(s - 1).unwrap()];
            EspDescriptor::encrypt(ci.outbound, o, l, s)
        })
        .collect()
    };
    let mut st = vec![EspStatus::NotProcessed; 4];
    for run in [5..=8, 1..=4] {
        let s = p.i.esp_batch(&mut area, &enc(run), &mut st).unwrap();
        assert_eq!((s.ok, s.failed), (4, 0), "{st:?}");
    }
    let dec: Vec<_> = (1..=8u64)
        .map(|s| {
            let (o, l) = regions[usize::try_from(s - 1).unwrap()];
            EspDescriptor::decrypt(cr.inbound, o, l, s)
        })
        .collect();
    let mut st8 = vec![EspStatus::NotProcessed; 8];
    assert_eq!(p.r.esp_batch(&mut area, &dec, &mut st8).unwrap().ok, 8, "{st8:?}");
    // Every number again, in either order: refused, and nothing in the area changes.
    let before = area.clone();
    for run in [1..=4, 5..=8] {
        let s = p.i.esp_batch(&mut area, &enc(run), &mut st).unwrap();
        assert_eq!((s.ok, s.failed), (0, 4));
        assert!(st.iter().all(|&x| x == EspStatus::SeqReused), "{st:?}");
    }
    assert_eq!(area, before);
    // A number far above, then one more than the window below it: refused as stale (the
    // enclave no longer knows it), the area untouched.
    let (o, l) = regions[0];
    let far = [EspDescriptor::encrypt(ci.outbound, o, l, 10_000)];
    let old = [EspDescriptor::encrypt(ci.outbound, o, l, 9)];
    let mut one = [EspStatus::NotProcessed];
    assert_eq!(p.i.esp_batch(&mut area, &far, &mut one).unwrap().ok, 1);
    let before = area.clone();
    assert_eq!(p.i.esp_batch(&mut area, &old, &mut one).unwrap().failed, 1);
    assert_eq!((one[0], &area), (EspStatus::SeqStale, &before));
    assert_eq!(p.i.counters().esp_status(EspStatus::SeqReused), 8);
    assert_eq!(p.i.counters().esp_status(EspStatus::SeqStale), 1);
}

/// Seals `seqs` of `sa` through `e`, one batch of up to 16 per call, in an area of its own;
/// returns each number with its ESP packet. Every packet must be sealed.
fn seal_numbers(e: &mut dyn EspCrossing, sa: EspSaHandle, suite: Suite, seqs: &[u64]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    for chunk in seqs.chunks(16) {
        let (mut area, regions) = layout(suite, chunk.len(), 64);
        let d: Vec<_> =
            chunk.iter().zip(&regions).map(|(&s, &(o, l))| EspDescriptor::encrypt(sa, o, l, s)).collect();
        let mut st = vec![EspStatus::NotProcessed; d.len()];
        let sum = e.esp_crossing(&mut area, &d, &mut st).unwrap();
        assert_eq!(sum.ok as usize, d.len(), "{st:?}");
        for (&s, &(o, l)) in chunk.iter().zip(&regions) {
            out.push((s, area[o as usize..(o + l) as usize].to_vec()));
        }
    }
    out
}

#[test]
fn lanes_seal_one_sa_at_once_and_never_use_a_number_twice() {
    // Two workers' lanes seal one SA's odd and even numbers on two threads at the same
    // time; the peer opens all of them; no number is taken twice by any lane or the
    // instance itself; the instance's counters include its lanes'.
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (ci, cr) = child(&mut p, suite, false, None);
    let no_lane = p.i.memory_report().fixed_bytes;
    let mut lanes = [p.i.esp_lane().unwrap(), p.i.esp_lane().unwrap()];
    let sealed: Vec<(u64, Vec<u8>)> = std::thread::scope(|s| {
        let hs: Vec<_> = lanes
            .iter_mut()
            .enumerate()
            .map(|(k, lane)| {
                let seqs: Vec<u64> = (1..=2048u64).filter(|n| n % 2 == k as u64).collect();
                s.spawn(move || seal_numbers(&mut **lane, ci.outbound, suite, &seqs))
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sealed.len(), 2048);
    for chunk in sealed.chunks(32) {
        let mut area: Vec<u8> = chunk.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        let len = u32::try_from(chunk[0].1.len()).unwrap();
        let d: Vec<_> = (0u32..)
            .zip(chunk)
            .map(|(k, (seq, _))| EspDescriptor::decrypt(cr.inbound, k * len, len, *seq))
            .collect();
        let mut st = vec![EspStatus::NotProcessed; d.len()];
        assert_eq!(p.r.esp_batch(&mut area, &d, &mut st).unwrap().ok as usize, d.len(), "{st:?}");
    }
    // Any number again, through either lane or the instance: refused, area untouched.
    let (mut area, regions) = layout(suite, 2, 64);
    let again = [
        EspDescriptor::encrypt(ci.outbound, regions[0].0, regions[0].1, 7),
        EspDescriptor::encrypt(ci.outbound, regions[1].0, regions[1].1, 2048),
    ];
    let untouched = area.clone();
    let mut st = [EspStatus::NotProcessed; 2];
    let [la, lb] = &mut lanes;
    for e in [&mut **la, &mut **lb, &mut p.i as &mut dyn EspCrossing] {
        assert_eq!(e.esp_crossing(&mut area, &again, &mut st).unwrap().failed, 2);
        assert_eq!(st, [EspStatus::SeqReused; 2]);
    }
    assert_eq!(area, untouched);
    let c = p.i.counters();
    assert_eq!(c.esp_status(EspStatus::Ok), 2048);
    assert_eq!(c.esp_status(EspStatus::SeqReused), 6);
    assert!(c.batches >= 2048 / 16 + 3, "{}", c.batches);
    // Each lane's scratch and state are trusted memory of the instance until it is dropped
    // (and pruned at the next SA deletion or new lane).
    let two = p.i.memory_report().fixed_bytes;
    let [a, _b] = lanes;
    drop(a);
    p.i.esp_sa_delete(ci.inbound).unwrap();
    let one = p.i.memory_report().fixed_bytes;
    assert!(no_lane < one && one < two, "{no_lane} < {one} < {two}");
}

#[test]
fn a_lane_outlives_neither_its_sa_nor_its_instance() {
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (ci, _cr) = child(&mut p, suite, false, None);
    let mut lane = p.i.esp_lane().unwrap();
    assert_eq!(seal_numbers(&mut *lane, ci.outbound, suite, &[1, 2]).len(), 2);
    // A batch larger than the limit is refused whole, and counted by the instance.
    let max = Limits::default().max_batch;
    let (mut area, regions) = layout(suite, max + 1, 64);
    let d: Vec<_> = regions.iter().map(|&(o, l)| EspDescriptor::encrypt(ci.outbound, o, l, 99)).collect();
    let mut st = vec![EspStatus::NotProcessed; d.len()];
    assert!(matches!(lane.esp_crossing(&mut area, &d, &mut st), Err(Error::BatchTooLarge { .. })));
    assert_eq!(p.i.counters().error(ErrorKind::BadBatch), 1);
    // The SA deleted: the lane no longer finds it.
    p.i.esp_sa_delete(ci.outbound).unwrap();
    let (mut area, regions) = layout(suite, 1, 64);
    let one = [EspDescriptor::encrypt(ci.outbound, regions[0].0, regions[0].1, 3)];
    let mut st = [EspStatus::NotProcessed];
    assert_eq!(lane.esp_crossing(&mut area, &one, &mut st).unwrap().failed, 1);
    assert_eq!(st[0], EspStatus::UnknownSa);
    // The instance dropped: its SAs are gone for the lane too.
    let inbound = ci.inbound;
    drop(p);
    let dec = [EspDescriptor::decrypt(inbound, regions[0].0, regions[0].1, 1)];
    assert_eq!(lane.esp_crossing(&mut area, &dec, &mut st).unwrap().failed, 1);
    assert_eq!(st[0], EspStatus::UnknownSa);
}

#[test]
fn inbound_sas_do_only_the_operation_the_measured_config_allows() {
    let cfg = |inbound| EnclaveConfig {
        tenant: TenantId(1),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: Vec::new(),
        tenant_signers: Vec::new(),
        backup_roots: Vec::new(),
        limits: Limits { inbound, ..Limits::default() },
    };
    assert_ne!(
        cfg(InboundMode::Decrypt).measured_bytes(Backend::Inline),
        cfg(InboundMode::Forward).measured_bytes(Backend::Inline)
    );
    // The responder forwards inside the enclave; the initiator hands plaintext out.
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let mut p = ike_sa_init_with(DhGroup::Curve25519, Prf::HmacSha256, suite, InboundMode::Forward);
    let (ci, cr) = child(&mut p, suite, false, None);
    // [outer IPv4 to 198.18.0.2, ESP] carrying an inner IPv4 packet to 198.18.7.9.
    let mut area = vec![0u8; 512];
    let mut inner = vec![0u8; 40];
    inner[0] = 0x45;
    inner[16..20].copy_from_slice(&[198, 18, 7, 9]);
    let len = support::lay_out(&mut area, 20, &inner);
    area[..20].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
    let mut st = [EspStatus::NotProcessed];
    p.i.esp_batch(&mut area, &[EspDescriptor::encrypt(ci.outbound, 20, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    let sent = area.clone();
    // DECRYPT would put the plaintext in the gateway's hands: refused, nothing touched.
    p.r.esp_batch(&mut area, &[EspDescriptor::decrypt(cr.inbound, 20, len, 1)], &mut st).unwrap();
    assert_eq!((st[0], &area), (EspStatus::ModeNotAllowed, &sent));
    p.r.esp_batch(&mut area, &[EspDescriptor::decrypt_forward(cr.inbound, 0, 20, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    assert_eq!(&area[16..20], &[198, 18, 7, 9], "outer destination replaced");
    assert_eq!(&area[20..], &sent[20..], "ciphertext untouched");
    // And the other way round: a DECRYPT-bound SA does not forward.
    let mut back = vec![0u8; 512];
    let len = support::lay_out(&mut back, 20, &inner);
    back[..20].copy_from_slice(&sent[..20]);
    p.r.esp_batch(&mut back, &[EspDescriptor::encrypt(cr.outbound, 20, len, 1)], &mut st).unwrap();
    p.i.esp_batch(&mut back, &[EspDescriptor::decrypt_forward(ci.inbound, 0, 20, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::ModeNotAllowed);
    p.i.esp_batch(&mut back, &[EspDescriptor::decrypt(ci.inbound, 20, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    assert_eq!(p.r.counters().esp_status(EspStatus::ModeNotAllowed), 1);
}

#[test]
fn esn_high_bits_are_authenticated() {
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (ci, cr) = child(&mut p, suite, true, None);
    let (mut area, regions) = layout(suite, 1, 32);
    let (o, l) = regions[0];
    let seq = 0x5_0000_0001;
    let mut st = [EspStatus::NotProcessed];
    p.i.esp_batch(&mut area, &[EspDescriptor::encrypt(ci.outbound, o, l, seq)], &mut st).unwrap();
    // Same low half, wrong high half: the ICV fails and nothing is decrypted for the caller.
    let mut wrong = area.clone();
    p.r.esp_batch(&mut wrong, &[EspDescriptor::decrypt(cr.inbound, o, l, 0x4_0000_0001)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::IcvMismatch);
    p.r.esp_batch(&mut area, &[EspDescriptor::decrypt(cr.inbound, o, l, seq)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
}

#[test]
fn bad_descriptors_get_a_status_each_and_are_counted() {
    let suite = Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (ci, cr) = child(&mut p, suite, false, None);
    let (mut area, regions) = layout(suite, 2, 32);
    let (o, l) = regions[0];
    let mut other = start(2);
    let mut ke = [0u8; 32];
    let _ = other.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
    let fresh = support::nonce(&mut p.i);
    let dead =
        p.i.child_sa_create(
            p.ike_i,
            None,
            None,
            &ChildSaParams {
                role: Role::Initiator,
                suite,
                esn: false,
                nonce_i: &fresh,
                nonce_r: &p.nr,
                spi_inbound: 7,
                spi_outbound: 8,
            },
        )
        .unwrap();
    p.i.esp_sa_delete(dead.outbound).unwrap();
    let foreign = EspSaHandle(ci.outbound.raw() ^ 0x8000_0000);
    let descs = [
        EspDescriptor { opcode: EspOpcode(9), ..EspDescriptor::encrypt(ci.outbound, o, l, 1) },
        EspDescriptor::encrypt(dead.outbound, o, l, 1),
        EspDescriptor::encrypt(foreign, o, l, 1),
        EspDescriptor::decrypt(ci.outbound, o, l, 1),
        EspDescriptor::encrypt(ci.outbound, regions[1].0, l + 1, 1),
        EspDescriptor::encrypt(ci.outbound, u32::MAX, l, 1),
        EspDescriptor::encrypt(ci.outbound, o, l - 1, 1),
        EspDescriptor::encrypt(ci.outbound, o, l, 1),
        EspDescriptor::encrypt(ci.outbound, regions[1].0, l, 1),
        EspDescriptor::encrypt(ci.outbound, regions[1].0, l, 1 << 32),
        EspDescriptor::decrypt(cr.inbound, o, l, 1),
    ];
    let mut st = vec![EspStatus::NotProcessed; descs.len()];
    let s = p.i.esp_batch(&mut area, &descs, &mut st).unwrap();
    use EspStatus::*;
    assert_eq!(
        st,
        [
            UnknownOpcode,
            UnknownSa,
            ForeignSa,
            WrongDirection,
            OutOfBounds,
            OutOfBounds,
            BadLength,
            Ok,
            SeqReused,
            SeqExhausted,
            ForeignSa,
        ]
    );
    assert_eq!((s.ok, s.failed), (1, 10));
    let c = p.i.counters();
    assert_eq!(c.esp_status(UnknownSa), 1);
    assert_eq!(c.esp_status(ForeignSa), 2, "the peer enclave's handle is foreign here");
    assert_eq!(c.esp_status(OutOfBounds), 2);
    // Whole-batch refusals.
    let many = vec![EspDescriptor::encrypt(ci.outbound, o, l, 2); Limits::default().max_batch + 1];
    let mut st2 = vec![NotProcessed; many.len()];
    assert!(matches!(p.i.esp_batch(&mut area, &many, &mut st2), Err(Error::BatchTooLarge { .. })));
    assert!(matches!(
        p.i.esp_batch(&mut area, &descs, &mut st[..3]),
        Err(Error::StatusLengthMismatch { .. })
    ));
    assert_eq!(p.i.counters().error(ErrorKind::BadBatch), 2);
}

#[test]
fn handles_are_checked_for_every_call() {
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_256));
    let mut other = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_256));
    let mut msg = vec![0u8; 100];
    // Another instance's handle (a different random tag) is refused.
    let r = p.i.sk_decrypt(other.ike_i, &mut msg, 32);
    assert!(matches!(r, Err(Error::ForeignHandle { .. }) | Err(Error::UnknownHandle { .. })));
    p.i.ike_sa_delete(p.ike_i).unwrap();
    assert!(matches!(p.i.sk_decrypt(p.ike_i, &mut msg, 32), Err(Error::UnknownHandle { .. })));
    assert!(matches!(p.i.ike_sa_delete(p.ike_i), Err(Error::UnknownHandle { .. })));
    // A DH value is consumed by its agreement, even a failed one.
    let mut ke = [0u8; 32];
    let dh = other.i.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
    let ours = support::nonce(&mut other.i);
    let params = IkeSaParams {
        role: Role::Initiator,
        prf: Prf::HmacSha256,
        suite: Suite::aead(Cipher::AesGcm16_128),
        nonce_i: &ours,
        nonce_r: &[2; 16],
        spi_i: 1,
        spi_r: 2,
    };
    assert!(matches!(
        other.i.ike_sa_create(DhExchange { dh, peer_public: &[0u8; 32] }, &params),
        Err(Error::BadPeerPublicValue { .. })
    ));
    assert!(matches!(
        other.i.ike_sa_create(DhExchange { dh, peer_public: &ke }, &params),
        Err(Error::UnknownHandle { .. })
    ));
    assert!(p.i.counters().error(ErrorKind::UnknownHandle) >= 2);
}

#[test]
fn clear_and_seal_then_rekey_with_the_blob() {
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let mut p = ike_sa_init(DhGroup::EcpP256, Prf::HmacSha384, suite);
    let psk = provision(&mut p.i, SecretKind::PreSharedKey, b"k");
    let before = p.i.memory_report().ike_sa_bytes;
    let blob = p.i.clear_and_seal(p.ike_i).unwrap();
    let blob_r = p.r.clear_and_seal(p.ike_r).unwrap();
    assert!(p.i.memory_report().ike_sa_bytes < before, "clearing gives memory back");
    assert_eq!(p.i.clear_and_seal(p.ike_i), Err(Error::AlreadySealed));
    // SK_p is gone: no more AUTH.
    let mut out = [0u8; 64];
    assert!(matches!(
        p.i.auth_compute(p.ike_i, psk, AuthSpec::SharedKey, &auth_input(b"m", &p.nr, b"id"), &mut out),
        Err(Error::KeyCleared { .. })
    ));
    // SK_e/SK_a stay: the SA still protects messages.
    sk_round_trip(&mut p.i, p.ike_i, &mut p.r, p.ike_r, suite);
    // Child SA from the sealed SK_d: needs the blob, refuses a tampered one. IKE_SA_INIT's
    // nonces served IKE_AUTH's child: a later one names a fresh nonce of ours.
    let fresh = support::nonce(&mut p.i);
    let params = |role| ChildSaParams {
        role,
        suite: Suite::aead(Cipher::ChaCha20Poly1305),
        esn: false,
        nonce_i: &fresh,
        nonce_r: &p.nr,
        spi_inbound: 11,
        spi_outbound: 12,
    };
    assert!(matches!(
        p.i.child_sa_create(p.ike_i, None, None, &params(Role::Initiator)),
        Err(Error::KeyCleared { .. })
    ));
    let mut tampered = blob.clone();
    let last = tampered.0.len() - 1;
    tampered.0[last] ^= 1;
    assert_eq!(
        p.i.child_sa_create(p.ike_i, Some(&tampered), None, &params(Role::Initiator)),
        Err(Error::SealedBlob { reason: BlobRejection::Forged })
    );
    p.i.child_sa_create(p.ike_i, Some(&blob), None, &params(Role::Initiator)).unwrap();
    // IKE SA rekey (RFC 7296 §2.18) from the sealed SK_d on both sides: the new SAs agree.
    let (mut ke_i, mut ke_r) = ([0u8; 32], [0u8; 32]);
    let dh_i = p.i.dh_generate(DhGroup::Curve25519, &mut ke_i).unwrap();
    let dh_r = p.r.dh_generate(DhGroup::Curve25519, &mut ke_r).unwrap();
    let (rekey_i, rekey_r) = (support::nonce(&mut p.i), support::nonce(&mut p.r));
    let new = |role| IkeSaParams {
        role,
        prf: Prf::HmacSha256,
        suite: Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
        nonce_i: &rekey_i,
        nonce_r: &rekey_r,
        spi_i: 0x3333,
        spi_r: 0x4444,
    };
    let ni = p.i.ike_sa_rekey(
        p.ike_i,
        Some(&blob),
        DhExchange { dh: dh_i, peer_public: &ke_r },
        &new(Role::Initiator),
    );
    let nr = p.r.ike_sa_rekey(
        p.ike_r,
        Some(&blob_r),
        DhExchange { dh: dh_r, peer_public: &ke_i },
        &new(Role::Responder),
    );
    let (ni, nr) = (ni.unwrap(), nr.unwrap());
    sk_round_trip(&mut p.i, ni, &mut p.r, nr, Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128));
    // A rekeyed SA never authenticates: it holds no SK_p.
    assert!(matches!(
        p.i.auth_compute(ni, psk, AuthSpec::SharedKey, &auth_input(b"m", &p.nr, b"id"), &mut out),
        Err(Error::KeyCleared { .. })
    ));
    // Deleting the old SA makes its blob useless.
    p.i.ike_sa_delete(p.ike_i).unwrap();
    assert!(p.i.child_sa_create(p.ike_i, Some(&blob), None, &params(Role::Initiator)).is_err());
}

#[test]
fn a_later_instance_seals_above_its_platforms_counter_and_refuses_older_blobs() {
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let blob = p.i.clear_and_seal(p.ike_i).unwrap();
    assert_eq!(blob.counter(), Some(1));
    // A later instance on a platform whose ledger issued counters up to 100 seals from 101.
    let mut ledger = MemoryLedger::new();
    for _ in 0..100 {
        ledger.issue(false).unwrap();
    }
    let mut later = start_with(1, PROV_KEY, ledger);
    // The same SPIs as the old SA's, with a peer of its own.
    let mut peer = start(1);
    let x = enclave_api::testing::ike_sa_init(
        &mut later,
        &mut peer,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        suite,
        (0x1111, 0x2222),
    )
    .unwrap();
    let (psk, peer_psk) = (support::psk(&mut later, PROV_KEY), support::psk(&mut peer, PROV_KEY));
    x.authenticate_psk(&mut later, &mut peer, psk, peer_psk).unwrap();
    let (h, child_nonce) = (x.ike_a, support::nonce(&mut later));
    let fresh = later.clear_and_seal(h).unwrap();
    assert_eq!(fresh.counter(), Some(101));
    // The old instance's blob (same tenant, same SPIs, counter 1) is a rollback here.
    let child = ChildSaParams {
        role: Role::Initiator,
        suite,
        esn: false,
        nonce_i: &child_nonce,
        nonce_r: &[2; 16],
        spi_inbound: 1,
        spi_outbound: 2,
    };
    assert_eq!(
        later.child_sa_create(h, Some(&blob), None, &child),
        Err(Error::SealedBlob { reason: BlobRejection::Rollback })
    );
    later.child_sa_create(h, Some(&fresh), None, &child).unwrap();
    assert_eq!(later.counters().error(ErrorKind::BlobRejected), 1);
}

#[test]
fn provisioning_blobs_for_another_tenant_or_key_are_refused() {
    let mut e = start(5);
    let other_tenant =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(6), SecretKind::PreSharedKey, b"x")
            .unwrap();
    assert_eq!(
        e.provision_secret(&other_tenant),
        Err(Error::ProvisioningBlob { reason: BlobRejection::WrongTenant })
    );
    let other_key =
        wrap_secret(&ProvisioningKey::from_bytes([1; 32]), TenantId(5), SecretKind::PreSharedKey, b"x")
            .unwrap();
    assert_eq!(
        e.provision_secret(&other_key),
        Err(Error::ProvisioningBlob { reason: BlobRejection::Forged })
    );
    let garbage_key = wrap_secret(
        &ProvisioningKey::from_bytes(PROV_KEY),
        TenantId(5),
        SecretKind::RsaPrivateKey,
        b"not a key",
    )
    .unwrap();
    assert!(matches!(e.provision_secret(&garbage_key), Err(Error::BadPrivateKey { .. })));
    let h = provision(&mut e, SecretKind::PreSharedKey, b"psk");
    assert_eq!(e.secret_kind(h), Ok(SecretKind::PreSharedKey));
    e.delete_secret(h).unwrap();
    assert!(e.secret_kind(h).is_err());
    assert_eq!(e.counters().error(ErrorKind::BlobRejected), 2);
}

#[test]
fn errors_and_debug_output_carry_no_key_bytes() {
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, Suite::aead(Cipher::AesGcm16_128));
    let secret = b"TOPSECRETPSK-1234567890";
    let h = provision(&mut p.i, SecretKind::PreSharedKey, secret);
    let dbg = format!("{:?} {:?}", p.i, h);
    assert!(!dbg.contains("TOPSECRET"));
    let err = p.i.auth_verify(
        p.ike_i,
        PeerCredential::SharedKey(h),
        2,
        &[0; 32],
        &auth_input(&p.msg2, &p.ni, b"i"),
    );
    let text = format!("{:?} {}", err, err.as_ref().unwrap_err());
    assert!(!text.contains("TOPSECRET"));
}

#[test]
fn memory_report_counts_per_sa_state() {
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let _ = child(&mut p, suite, true, None);
    let _ = child(&mut p, Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128), false, None);
    let m = p.i.memory_report();
    assert_eq!((m.ike_sas, m.esp_sas), (1, 4));
    eprintln!(
        "per IKE SA {} bytes, per ESP SA {} bytes, fixed {} bytes",
        m.per_ike_sa(),
        m.per_esp_sa(),
        m.fixed_bytes
    );
    p.i.clear_and_seal(p.ike_i).unwrap();
    eprintln!("per IKE SA after clear-and-seal {} bytes", p.i.memory_report().per_ike_sa());
    assert!(m.per_ike_sa() <= 1024, "goal: 1 MB per 1000 IKE SAs");
}

#[test]
fn attestation_evidence_verifies_with_the_platform_key() {
    let config = EnclaveConfig {
        tenant: TenantId(9),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        tenant_signers: Vec::new(),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key().unwrap();
    let att = SoftwareAttestation::new(
        &platform,
        CodeIdentity::CurrentExecutable,
        &config.measured_bytes(Backend::Inline),
    )
    .unwrap();
    let anchor = att.platform_public_key().to_vec();
    let expected = cloister_enclave::attest::AttestationProvider::measurement(&att);
    let mut e = InlineEnclave::start(config, Box::new(att)).unwrap();
    let ev = e.identity_evidence(&[3; 32]).unwrap();
    let rd = cloister_enclave::attest::identity_report_data(TenantId(9), &[3; 32]);
    let identity = cloister_enclave::attest::EvidencePurpose::Identity;
    let v = verify_software_evidence(&ev.bytes, &anchor, identity, &rd).unwrap();
    assert_eq!((v.measurement, v.tenant), (expected, TenantId(9)));
}

/// RFC 9370 hybrid: X25519 in IKE_SA_INIT, ML-KEM in IKE_INTERMEDIATE. Both sides' keys
/// change alike (SK payloads still open), and AUTH covers the exchange: an initiator that
/// skipped it, or saw another, no longer authenticates to the responder.
#[test]
fn additional_key_exchanges_change_the_keys_and_bind_auth() {
    let suite = Suite::aead(Cipher::AesGcm16_256);
    for groups in [&[DhGroup::MlKem768][..], &[DhGroup::MlKem1024], &[DhGroup::MlKem768, DhGroup::EcpP384]] {
        let (mut i, mut r) = (start(1), start(1));
        let h = enclave_api::testing::ike_sa_init(
            &mut i,
            &mut r,
            DhGroup::Curve25519,
            Prf::HmacSha256,
            suite,
            (7, 9),
        )
        .unwrap();
        for (mid, g) in (1..).zip(groups) {
            h.additional_ke(&mut i, &mut r, *g, mid).unwrap();
        }
        sk_round_trip(&mut i, h.ike_a, &mut r, h.ike_b, suite);
        sk_round_trip(&mut r, h.ike_b, &mut i, h.ike_a, suite);
        let (psk_i, psk_r) = (support::psk(&mut i, PROV_KEY), support::psk(&mut r, PROV_KEY));
        h.authenticate_psk(&mut i, &mut r, psk_i, psk_r).unwrap();
        // Keys change only before AUTH.
        let again = h.additional_ke(&mut i, &mut r, DhGroup::MlKem768, 9);
        assert_eq!(again, Err(Error::ProtocolRefused { why: refusal::AUTH_STARTED }));
    }
    // The responder did an intermediate exchange the initiator's enclave never saw.
    let (mut i, mut r) = (start(1), start(1));
    let h = enclave_api::testing::ike_sa_init(
        &mut i,
        &mut r,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        suite,
        (7, 9),
    )
    .unwrap();
    let mut i2 = start(1);
    let mut ek = vec![0u8; DhGroup::MlKem768.public_len()];
    let dh = i2.dh_generate(DhGroup::MlKem768, &mut ek).unwrap();
    let mut ct = vec![0u8; DhGroup::MlKem768.response_len()];
    let dh_r = r.ke_respond(DhGroup::MlKem768, &ek, &mut ct).unwrap();
    let msg =
        |resp, ke: &[u8]| enclave_api::testing::intermediate_message(7, 9, resp, 1, DhGroup::MlKem768, ke);
    let (req, resp) = (msg(false, &ek), msg(true, &ct));
    let x = IntermediateExchange { nonce_i: &h.ni, nonce_r: &h.nr, request: &req, response: &resp };
    r.ike_sa_intermediate(h.ike_b, DhExchange { dh: dh_r, peer_public: &ek }, &x).unwrap();
    let _ = dh;
    let (psk_i, psk_r) = (support::psk(&mut i, PROV_KEY), support::psk(&mut r, PROV_KEY));
    assert!(h.authenticate_psk(&mut i, &mut r, psk_i, psk_r).is_err());
}

/// What a hostile caller cannot make `ike_sa_intermediate` do: take KE payloads other than
/// the agreement's values, go back to an earlier message ID, use another SA's nonces or
/// SPIs, or run on an SA that never authenticates (a rekeyed one).
#[test]
fn intermediate_exchanges_are_checked_against_the_sa_and_the_agreement() {
    let suite = Suite::aead(Cipher::AesGcm16_128);
    let g = DhGroup::MlKem768;
    let (mut i, mut r) = (start(1), start(1));
    let h = enclave_api::testing::ike_sa_init(
        &mut i,
        &mut r,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        suite,
        (7, 9),
    )
    .unwrap();
    let refused = Err(Error::ProtocolRefused { why: refusal::NOT_THE_INTERMEDIATE });
    let mut ek = vec![0u8; g.public_len()];
    let mut ct = vec![0u8; g.response_len()];
    let dh = i.dh_generate(g, &mut ek).unwrap();
    let dh_r = r.ke_respond(g, &ek, &mut ct).unwrap();
    let msg = |spis: (u64, u64), resp, mid, ke: &[u8]| {
        enclave_api::testing::intermediate_message(spis.0, spis.1, resp, mid, g, ke)
    };
    let good = (msg((7, 9), false, 1, &ek), msg((7, 9), true, 1, &ct));
    let mut other_ct = ct.clone();
    other_ct[5] ^= 1;
    type Case<'a> = ((Vec<u8>, Vec<u8>), &'a [u8], &'a [u8]);
    let cases: Vec<Case<'_>> = vec![
        // KE data other than what was agreed, in the response or the request.
        ((good.0.clone(), msg((7, 9), true, 1, &other_ct)), &h.ni, &h.nr),
        ((msg((7, 9), false, 1, &other_ct[..]), good.1.clone()), &h.ni, &h.nr),
        // Message ID 0 (IKE_SA_INIT's), IDs that differ, other SPIs, another SA's nonce.
        ((msg((7, 9), false, 0, &ek), msg((7, 9), true, 0, &ct)), &h.ni, &h.nr),
        ((msg((7, 9), false, 1, &ek), msg((7, 9), true, 2, &ct)), &h.ni, &h.nr),
        ((msg((7, 8), false, 1, &ek), msg((7, 8), true, 1, &ct)), &h.ni, &h.nr),
        (good.clone(), &h.nr, &h.ni),
        // Request and response swapped; cut short.
        ((good.1.clone(), good.0.clone()), &h.ni, &h.nr),
        ((good.0[..good.0.len() - 1].to_vec(), good.1.clone()), &h.ni, &h.nr),
    ];
    for ((req, resp), ni, nr) in &cases {
        let x = IntermediateExchange { nonce_i: ni, nonce_r: nr, request: req, response: resp };
        assert_eq!(i.ike_sa_intermediate(h.ike_a, DhExchange { dh, peer_public: &ct }, &x), refused);
    }
    // The good exchange goes through on both sides, once; the same message ID again does not.
    let x = IntermediateExchange { nonce_i: &h.ni, nonce_r: &h.nr, request: &good.0, response: &good.1 };
    i.ike_sa_intermediate(h.ike_a, DhExchange { dh, peer_public: &ct }, &x).unwrap();
    r.ike_sa_intermediate(h.ike_b, DhExchange { dh: dh_r, peer_public: &ek }, &x).unwrap();
    let dh2 = i.dh_generate(g, &mut ek).unwrap();
    let replay = IntermediateExchange { nonce_i: &h.ni, nonce_r: &h.nr, request: &good.0, response: &good.1 };
    assert_eq!(i.ike_sa_intermediate(h.ike_a, DhExchange { dh: dh2, peer_public: &ct }, &replay), refused);
    sk_round_trip(&mut i, h.ike_a, &mut r, h.ike_b, suite);
}

/// RFC 9370 §2.2.4: an IKE SA rekeyed with x25519 and ML-KEM-768 (CREATE_CHILD_SA, then
/// IKE_FOLLOWUP_KE): both new SAs agree; each side's values are consumed, and a responder
/// secret given another initiator key refuses the whole rekey.
#[test]
fn an_ike_sa_rekey_with_additional_key_exchanges_agrees_both_sides() {
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let mut p = ike_sa_init(DhGroup::Curve25519, Prf::HmacSha256, suite);
    let (blob_i, blob_r) = (p.i.clear_and_seal(p.ike_i).unwrap(), p.r.clear_and_seal(p.ike_r).unwrap());
    let (rekey_i, rekey_r) = (support::nonce(&mut p.i), support::nonce(&mut p.r));
    let new = |role| IkeSaParams {
        role,
        prf: Prf::HmacSha256,
        suite,
        nonce_i: &rekey_i,
        nonce_r: &rekey_r,
        spi_i: 0x5555,
        spi_r: 0x6666,
    };
    let (mut x_i, mut x_r) = ([0u8; 32], [0u8; 32]);
    let dh_i = p.i.dh_generate(DhGroup::Curve25519, &mut x_i).unwrap();
    let dh_r = p.r.ke_respond(DhGroup::Curve25519, &x_i, &mut x_r).unwrap();
    let g = DhGroup::MlKem768;
    let (mut ek, mut ct) = (vec![0u8; g.public_len()], vec![0u8; g.response_len()]);
    let kem_i = p.i.dh_generate(g, &mut ek).unwrap();
    let kem_r = p.r.ke_respond(g, &ek, &mut ct).unwrap();
    // The responder agrees first (its last IKE_FOLLOWUP_KE answer), then the initiator.
    let kes_r = [DhExchange { dh: dh_r, peer_public: &x_i }, DhExchange { dh: kem_r, peer_public: &ek }];
    let new_r = p.r.ike_sa_rekey_additional(p.ike_r, Some(&blob_r), &kes_r, &new(Role::Responder)).unwrap();
    let kes_i = [DhExchange { dh: dh_i, peer_public: &x_r }, DhExchange { dh: kem_i, peer_public: &ct }];
    let new_i = p.i.ike_sa_rekey_additional(p.ike_i, Some(&blob_i), &kes_i, &new(Role::Initiator)).unwrap();
    sk_round_trip(&mut p.i, new_i, &mut p.r, new_r, suite);
    sk_round_trip(&mut p.r, new_r, &mut p.i, new_i, suite);
    assert_eq!(p.i.memory_report().dh_values + p.r.memory_report().dh_values, 0, "all consumed");
    // A responder secret comes back only for the key it was made for.
    let (mut x2, mut y2) = ([0u8; 32], [0u8; 32]);
    let d0 = p.r.dh_generate(DhGroup::Curve25519, &mut x2).unwrap();
    p.i.dh_generate(DhGroup::Curve25519, &mut y2).unwrap();
    let other = p.r.ke_respond(g, &ek, &mut ct).unwrap();
    let mut wrong = ek.clone();
    wrong[3] ^= 1;
    let (n_i, n_r) = (support::nonce(&mut p.i), support::nonce(&mut p.r));
    let params =
        IkeSaParams { nonce_i: &n_i, nonce_r: &n_r, spi_i: 0x7777, spi_r: 0x8888, ..new(Role::Responder) };
    let bad = [DhExchange { dh: d0, peer_public: &y2 }, DhExchange { dh: other, peer_public: &wrong }];
    assert!(p.r.ike_sa_rekey_additional(p.ike_r, Some(&blob_r), &bad, &params).is_err());
    assert_eq!(p.r.memory_report().dh_values, 0, "consumed on failure too");
}
