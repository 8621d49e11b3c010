//! State migration between enclaves (crates/enclave-api/src/migration.rs), both backends: a
//! source with a live tunnel to an inline peer exports, a destination of the same
//! measurement imports, and the peer keeps talking to the destination with the same keys.
//! These tests wrap the data key straight to the destination (the enclave-only baseline);
//! crates/migrate's tests put the HSM in between. Every enclave here runs on one test
//! platform whose key its measured configuration trusts; crates/enclave/tests/redteam.rs
//! tries the others.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::cast_possible_truncation)]

use cloister_enclave::attest::{verify_software_evidence, CodeIdentity, Measurement, SoftwareAttestation};
use cloister_enclave::ledger::MemoryLedger;
use cloister_enclave::migration::{
    verify_destination, verify_source, why, MigrationPackage, OaepHash, PackageKind, MAX_PACKAGE_LEN,
    MAX_UNTRUSTED_STATE, PACKAGE_HEADER_LEN, SEQ_MARGIN,
};
use cloister_enclave::process::codec::{self, op, Writer, STAGED_HELD, STAGED_INLINE};
use cloister_enclave::process::layout::MAX_CALL_AREA;
use cloister_enclave::provision::wrap_secret;
use cloister_enclave::*;
use enclave_host::SharedLedger;
use enclave_host::{ProcessEnclave, ProcessSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod support;

use support::{backup_root, backup_root_public, inner, lay_out, platform};

const PROV_KEY: [u8; 32] = [0x42; 32];
const SUITE: Suite = Suite::aead(Cipher::AesGcm16_256);
const CODE: &[u8] = b"cloister migration test enclave";
const PSK: &[u8] = b"TOPSECRET migrating tenant PSK 0123456789";

/// The backup root's certificate of `spki` as a backup key for enclaves of `m`.
fn certify(m: &Measurement, spki: &[u8]) -> Vec<u8> {
    support::certify(backup_root(), m, spki)
}

fn config(tenant: u32) -> EnclaveConfig {
    EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: vec![platform().1.clone()],
        backup_roots: vec![backup_root_public()],
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

fn platform_key() -> Vec<u8> {
    platform().0.clone()
}

/// The ledger of `tenant` on the one platform every enclave here runs on: each instance
/// is a later one of the same host's, whose seals the next opens.
fn ledger(tenant: u32) -> SharedLedger {
    static LEDGERS: std::sync::OnceLock<Mutex<HashMap<u32, SharedLedger>>> = std::sync::OnceLock::new();
    let mut all = LEDGERS.get_or_init(Default::default).lock().unwrap();
    all.entry(tenant).or_insert_with(|| Arc::new(Mutex::new(MemoryLedger::new()))).clone()
}

/// An inline enclave running "code" `code`, and its platform's public key.
fn inline(tenant: u32, code: &[u8]) -> (InlineEnclave, Vec<u8>) {
    let c = config(tenant);
    let pk = platform_key();
    let att =
        SoftwareAttestation::new(&pk, CodeIdentity::Bytes(code.to_vec()), &c.measured_bytes(Backend::Inline))
            .unwrap();
    let public = att.platform_public_key().to_vec();
    (InlineEnclave::start_with_ledger(c, Box::new(att), Box::new(ledger(tenant))).unwrap(), public)
}

/// A process enclave (this crate's child binary) and its platform's public key.
fn process(tenant: u32) -> (ProcessEnclave, Vec<u8>) {
    let pk = platform_key();
    let spec = ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new());
    let e = ProcessEnclave::start_with_ledger(spec, config(tenant), &pk, ledger(tenant)).unwrap();
    let public = SoftwareAttestation::new(&pk, CodeIdentity::Bytes(vec![]), b"")
        .unwrap()
        .platform_public_key()
        .to_vec();
    (e, public)
}

/// The measurement an enclave attests to.
fn measurement_of(e: &mut dyn Enclave, platform_public: &[u8]) -> Measurement {
    let ev = e.identity_evidence(&[5; 32]).unwrap();
    let rd = cloister_enclave::attest::identity_report_data(e.tenant(), &[5; 32]);
    let identity = cloister_enclave::attest::EvidencePurpose::Identity;
    verify_software_evidence(&ev.bytes, platform_public, identity, &rd).unwrap().measurement
}

struct Tunnel {
    /// The migrating enclave's IKE SA and child SA (it is the initiator).
    ike: IkeSaHandle,
    sa: ChildSaPair,
    psk: SecretHandle,
    /// The peer's.
    peer_ike: IkeSaHandle,
    peer_sa: ChildSaPair,
    /// Our IKE_SA_INIT request and the peer's nonce: our AUTH's input.
    msg1: Vec<u8>,
    nr: Vec<u8>,
    /// The peer's IKE_SA_INIT response, our nonce and the peer's AUTH data: its AUTH.
    msg2: Vec<u8>,
    ni: Vec<u8>,
    peer_auth: Vec<u8>,
}

fn tunnel(e: &mut dyn Enclave, peer: &mut InlineEnclave, tenant: u32) -> Tunnel {
    let x = support::exchange_with_psk(e, peer, PROV_KEY, PSK);
    assert_eq!(e.tenant(), TenantId(tenant));
    let (ike, peer_ike, sa, peer_sa, psk) = (x.ike_a, x.ike_b, x.sa_a, x.sa_b, x.psk_a);
    Tunnel {
        ike,
        sa,
        psk,
        peer_ike,
        peer_sa,
        msg1: x.msg1,
        nr: x.nr,
        msg2: x.msg2,
        ni: x.ni,
        peer_auth: x.auths.b,
    }
}

/// Encrypts one packet with `sa` at `seq`; on success the peer's `inbound` decrypts it.
fn send(
    e: &mut dyn Enclave,
    sa: EspSaHandle,
    seq: u64,
    peer: &mut dyn Enclave,
    inbound: EspSaHandle,
) -> EspStatus {
    let mut buf = vec![0u8; 2048];
    let inn = inner(seq as usize, 100);
    let len = lay_out(&mut buf, 0, &inn);
    let mut st = [EspStatus::NotProcessed];
    e.esp_batch(&mut buf, &[EspDescriptor::encrypt(sa, 0, len, seq)], &mut st).unwrap();
    if st[0] != EspStatus::Ok {
        return st[0];
    }
    peer.esp_batch(&mut buf, &[EspDescriptor::decrypt(inbound, 0, len, seq)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok, "the peer decrypts what was sent");
    assert_eq!(&buf[16..116], &inn[..]);
    EspStatus::Ok
}

/// Whether `e`'s IKE SA `ike` with `psk` accepts the peer's AUTH of the tunnel's IKE_AUTH:
/// exactly when its SK_p and PSK are the tunnel's. (Our own AUTH is computed once per IKE
/// SA, so a moved SA is checked through the peer's.)
fn accepts_peer_auth(e: &mut dyn Enclave, ike: IkeSaHandle, psk: SecretHandle, t: &Tunnel) -> bool {
    let input = AuthInput { real_message: &t.msg2, peer_nonce: &t.ni, id_body: enclave_api::testing::ID_B };
    e.auth_verify(ike, PeerCredential::SharedKey(psk), 2, &t.peer_auth, &input).is_ok()
}

/// Our AUTH again, which the SA refuses: it was computed in IKE_AUTH, and that holds
/// wherever the SA moves.
fn signs_again(e: &mut dyn Enclave, ike: IkeSaHandle, psk: SecretHandle, t: &Tunnel) -> Result<()> {
    let input = AuthInput { real_message: &t.msg1, peer_nonce: &t.nr, id_body: enclave_api::testing::ID_A };
    let mut out = [0u8; 64];
    e.auth_compute(ike, psk, AuthSpec::SharedKey, &input, &mut out).map(|_| ())
}

/// Whether any 16 bytes of `secret` appear in `hay`. Two bytes are looked up first: the
/// chunked tests scan packages of tens of MiB in a debug build.
fn leaks(hay: &[u8], secret: &[u8]) -> bool {
    let mut first = vec![false; 1 << 16];
    let two = |w: &[u8]| usize::from(u16::from_le_bytes([w[0], w[1]]));
    for p in secret.windows(16) {
        first[two(p)] = true;
    }
    hay.windows(16).any(|w| first[two(w)] && secret.windows(16).any(|p| p == w))
}

fn new_handle<T: Copy + PartialEq>(pairs: &[(T, T)], old: T) -> T {
    pairs.iter().find(|(o, _)| *o == old).map(|(_, n)| *n).expect("handle restored")
}

/// The whole move: tunnel, traffic, export to a verified destination key, import, and the
/// peer talking to the destination with the migrated keys.
fn migrate(
    src: &mut dyn Enclave,
    src_pk: &[u8],
    dst: &mut dyn Enclave,
    dst_pk: &[u8],
    tenant: u32,
    untrusted: &[u8],
) {
    let (mut peer, _) = inline(tenant, b"peer");
    let t = tunnel(src, &mut peer, tenant);
    for seq in 1..=3 {
        assert_eq!(send(src, t.sa.outbound, seq, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    }
    assert!(accepts_peer_auth(src, t.ike, t.psk, &t));

    let key = dst.migration_destination_key(2048).unwrap();
    let expected = measurement_of(src, src_pk);
    verify_destination(&key, dst_pk, &expected, TenantId(tenant)).unwrap();
    let package = src.export_state(&key, None, OaepHash::Sha256, untrusted).unwrap();
    assert!(!leaks(package.as_bytes(), PSK), "PSK in the clear");
    // It crosses the untrusted side as bytes.
    let package = MigrationPackage::from_bytes(package.into_bytes()).unwrap();
    assert_eq!((package.tenant(), package.measurement()), (TenantId(tenant), expected));
    // Its evidence, as the destination's agent checks it before anything else.
    verify_source(&package, src_pk, &key.spki_der).unwrap();
    let restored = dst.import_state(&package, None).unwrap();
    assert_eq!(restored.untrusted_state, untrusted);
    assert_eq!((restored.secrets.len(), restored.ike_sas.len(), restored.esp_sas.len()), (1, 1, 2));

    // The destination sends above the source's range only; the peer decrypts it.
    let out = new_handle(&restored.esp_sas, t.sa.outbound);
    // Below its range: refused, far below as stale (the gateway would draw a fresh number
    // from its counter, which starts above the range), just below as used.
    let first = 3 + SEQ_MARGIN + 1;
    assert_eq!(send(dst, out, 4, &mut peer, t.peer_sa.inbound), EspStatus::SeqStale);
    assert_eq!(send(dst, out, first - 1, &mut peer, t.peer_sa.inbound), EspStatus::SeqReused);
    assert_eq!(send(dst, out, first, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    // The source keeps serving within its range, never into the destination's.
    assert_eq!(send(src, t.sa.outbound, 4, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    assert_eq!(send(src, t.sa.outbound, first, &mut peer, t.peer_sa.inbound), EspStatus::SeqExhausted);
    // The peer's traffic decrypts at the destination.
    let inb = new_handle(&restored.esp_sas, t.sa.inbound);
    assert_eq!(send(&mut peer, t.peer_sa.outbound, 1, dst, inb), EspStatus::Ok);

    // IKE: the destination's SK payloads open at the peer, and the PSK computes the same AUTH.
    let ike = new_handle(&restored.ike_sas, t.ike);
    let payloads = b"INFORMATIONAL after the move";
    let layout = SUITE.sk_layout(payloads.len());
    let mut msg = vec![0xAB; 32 + layout.body_len(payloads.len())];
    msg[32 + layout.iv_len..][..payloads.len()].copy_from_slice(payloads);
    dst.sk_encrypt(ike, &mut msg, 32, payloads.len()).unwrap();
    let r = peer.sk_decrypt(t.peer_ike, &mut msg, 32).unwrap();
    assert_eq!(&msg[r], payloads);
    let psk = new_handle(&restored.secrets, t.psk);
    assert_eq!(dst.secret_kind(psk), Ok(SecretKind::PreSharedKey));
    assert!(accepts_peer_auth(dst, ike, psk, &t), "SK_p and the PSK moved");
    assert_eq!(signs_again(dst, ike, psk, &t), Err(Error::ProtocolRefused { why: refusal::ALREADY_SIGNED }));

    // State goes into a fresh instance only, never merged into live tables.
    assert_eq!(
        dst.import_state(&package, None).map(|_| ()),
        Err(Error::ProtocolRefused { why: refusal::NOT_FRESH })
    );
    // A second export would hand the same sending range to another destination.
    let again = dst.migration_destination_key(2048).unwrap();
    assert_eq!(
        src.export_state(&again, None, OaepHash::Sha256, b"").map(|_| ()),
        Err(Error::Migration { why: why::ALREADY_EXPORTED })
    );
}

#[test]
fn inline_state_moves_with_its_keys_and_sequence_numbers() {
    let (mut src, src_pk) = inline(7, CODE);
    let (mut dst, dst_pk) = inline(7, CODE);
    let untrusted: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    migrate(&mut src, &src_pk, &mut dst, &dst_pk, 7, &untrusted);
}

#[test]
fn process_state_moves_with_its_keys_and_sequence_numbers() {
    let (mut src, src_pk) = process(9);
    let (mut dst, dst_pk) = process(9);
    migrate(&mut src, &src_pk, &mut dst, &dst_pk, 9, b"replay windows and IKE SA metadata");
}

/// A source holding one PSK, a destination of the same measurement with a fresh key, and
/// a package for it.
fn psk_package(tenant: u32) -> (InlineEnclave, MigrationPackage) {
    let (mut src, _) = inline(tenant, CODE);
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(tenant), SecretKind::PreSharedKey, PSK)
            .unwrap();
    src.provision_secret(&blob).unwrap();
    let (mut dst, _) = inline(tenant, CODE);
    let key = dst.migration_destination_key(2048).unwrap();
    let package = src.export_state(&key, None, OaepHash::Sha1, b"OPAQUE-GATEWAY-STATE").unwrap();
    (dst, package)
}

fn refusal(why: &'static str) -> Result<()> {
    Err(Error::Migration { why })
}

#[test]
fn truncated_and_malformed_packages_are_refused_by_their_header() {
    let (_, package) = psk_package(3);
    let bytes = package.as_bytes().to_vec();
    let parse = |b: &[u8]| MigrationPackage::from_bytes(b.to_vec()).map(|_| ());
    for n in [0, 4, PACKAGE_HEADER_LEN - 1, PACKAGE_HEADER_LEN + 10, bytes.len() - 1] {
        assert_eq!(parse(&bytes[..n]), refusal(why::TRUNCATED), "cut at {n}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(parse(&longer), refusal(why::MALFORMED));
    let mut b = bytes.clone();
    b[0] ^= 1;
    assert_eq!(parse(&b), refusal(why::MALFORMED));
    let mut b = bytes.clone();
    b[4] = 1;
    assert_eq!(parse(&b), refusal(why::VERSION));
    // A move without its destination share, or kinds that do not exist.
    let mut b = bytes.clone();
    b[74..76].copy_from_slice(&[0, 0]);
    assert_eq!(parse(&b), refusal(why::SHARES));
    for kind in [0u8, 3] {
        let mut b = bytes.clone();
        b[6] = kind;
        assert_eq!(parse(&b), refusal(why::MALFORMED));
    }
    let mut b = bytes.clone();
    b[5] = 9;
    assert_eq!(parse(&b), refusal(why::MALFORMED));
    // A body length that overflows is malformed, not a panic.
    let mut b = bytes;
    b[76..84].copy_from_slice(&u64::MAX.to_be_bytes());
    assert!(parse(&b).is_err());
}

#[test]
fn tampered_packages_and_wrong_shares_are_refused_and_spend_the_destination_key() {
    // A flipped bit anywhere after the header's checks: the share, the tag and the evidence
    // are what the source's evidence covers; the body, which its tag covers, does not open.
    let not_attested = Err(Error::ProtocolRefused { why: refusal::PEER_NOT_ATTESTED });
    for (at, want) in [
        (PACKAGE_HEADER_LEN + 3, not_attested.clone()),
        (PACKAGE_HEADER_LEN + 256 + 2, refusal(why::NO_DECRYPT)),
        (usize::MAX - 1, not_attested.clone()),
        (usize::MAX, not_attested.clone()),
    ] {
        let (mut dst, package) = psk_package(3);
        let mut b = package.as_bytes().to_vec();
        let ev = b.len() - package.source_evidence().len() - 2;
        // MAX - 1: the tag's last byte; MAX: the evidence's.
        let i = match at {
            usize::MAX => b.len() - 1,
            n if n == usize::MAX - 1 => ev - 1,
            n => n,
        };
        b[i] ^= 0x40;
        let tampered = MigrationPackage::from_bytes(b).unwrap();
        let r = dst.import_state(&tampered, None).map(|_| ());
        assert_eq!(r, want, "flipped byte {i}");
        // The attempt consumed the key: the genuine package no longer opens here.
        assert_eq!(dst.import_state(&package, None).map(|_| ()), refusal(why::NO_DESTINATION_KEY));
        assert_eq!(dst.memory_report().secrets, 0, "nothing installed");
    }
    // An HSM share offered for a package that has none.
    let (mut dst, package) = psk_package(3);
    assert_eq!(dst.import_state(&package, Some(&[7u8; 256])).map(|_| ()), refusal(why::SHARES));
    assert!(dst.counters().error(ErrorKind::BlobRejected) >= 1);
}

#[test]
fn another_measurement_or_tenant_cannot_import() {
    let (_, package) = psk_package(3);
    let (mut other_code, _) = inline(3, b"other enclave code");
    other_code.migration_destination_key(2048).unwrap();
    assert!(matches!(other_code.import_state(&package, None), Err(Error::MeasurementMismatch { .. })));
    let (mut other_tenant, _) = inline(4, CODE);
    other_tenant.migration_destination_key(2048).unwrap();
    assert_eq!(other_tenant.import_state(&package, None).map(|_| ()), refusal(why::WRONG_TENANT));
    // Evidence of the wrong measurement is caught before anything is wrapped: by the
    // source's agent, and by the source enclave itself.
    let (mut src, src_pk) = inline(3, CODE);
    let (mut dst, dst_pk) = inline(3, b"other enclave code");
    let key = dst.migration_destination_key(2048).unwrap();
    let expected = measurement_of(&mut src, &src_pk);
    assert!(matches!(
        verify_destination(&key, &dst_pk, &expected, TenantId(3)),
        Err(Error::MeasurementMismatch { .. })
    ));
    assert_eq!(
        src.export_state(&key, None, OaepHash::Sha1, b"").map(|_| ()),
        Err(Error::ProtocolRefused { why: refusal::PEER_MISMATCH })
    );
}

#[test]
fn nothing_secret_in_debug_output() {
    let (mut dst, package) = psk_package(3);
    let restored = dst.import_state(&package, None).unwrap();
    let text = format!("{package:?} {restored:?} {dst:?}");
    assert!(!text.contains("TOPSECRET") && !text.contains("OPAQUE-GATEWAY-STATE"), "{text}");
}

// ---- backups: secrets only, for recovery on a fresh host ---------------------------------

/// A backup of a serving source, before and after a move: `dsts` (two fresh instances of
/// the tenant) get the secrets and no SA, and the source's SAs are as if no backup was made.
fn backup(src: &mut dyn Enclave, dsts: [&mut dyn Enclave; 2], tenant: u32, untrusted: &[u8]) {
    let src_m = &measurement_of(src, &platform().1);
    let [first, second] = dsts;
    let (mut peer, _) = inline(tenant, b"peer");
    let t = tunnel(src, &mut peer, tenant);
    for seq in 1..=3 {
        assert_eq!(send(src, t.sa.outbound, seq, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    }
    assert!(accepts_peer_auth(src, t.ike, t.psk, &t));

    // The destination's key stands in for the HSM backup key (the HSM's rewrap of the share
    // to the destination key is crates/migrate's).
    let key = first.migration_destination_key(2048).unwrap();
    let package = src
        .export_secrets(&key.spki_der, &certify(src_m, &key.spki_der), OaepHash::Sha256, untrusted)
        .unwrap();
    assert!(!leaks(package.as_bytes(), PSK), "PSK in the clear");
    let package = MigrationPackage::from_bytes(package.into_bytes()).unwrap();
    assert_eq!((package.tenant(), package.kind()), (TenantId(tenant), PackageKind::Backup));
    verify_source(&package, &platform().1, b"").unwrap();
    let restored = first.import_state(&package, package.hsm_share()).unwrap();
    assert_eq!(restored.untrusted_state, untrusted);
    assert_eq!((restored.secrets.len(), restored.ike_sas.len(), restored.esp_sas.len()), (1, 0, 0));
    assert_eq!(first.memory_report().esp_sas + first.memory_report().ike_sas, 0);
    let psk = new_handle(&restored.secrets, t.psk);
    assert_eq!(first.secret_kind(psk), Ok(SecretKind::PreSharedKey));

    // The restored PSK is the tenant's: IKE_AUTH over it passes with a peer that holds the
    // tenant's PSK, both ways.
    let (mut peer2, _) = inline(tenant, b"peer");
    let h = enclave_api::testing::ike_sa_init(
        &mut *first,
        &mut peer2,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        SUITE,
        (0x3111, 0x3222),
    );
    let peer_psk = support::provision_psk(&mut peer2, PROV_KEY, PSK);
    h.unwrap()
        .authenticate_psk(&mut *first, &mut peer2, psk, peer_psk)
        .expect("the same PSK as the tenant's");
    // Sealed on the new host, it comes back on that host's next instance.
    let sealed = first.seal_secret(psk).unwrap();
    let back = second.unseal_secret(&sealed).unwrap();
    assert_eq!(second.secret_kind(back), Ok(SecretKind::PreSharedKey));
    second.delete_secret(back).unwrap();

    // The source was not capped: it sends far past where a move's cap would have stopped it.
    let past_cap = 3 + SEQ_MARGIN + 10;
    assert_eq!(send(src, t.sa.outbound, past_cap, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    assert!(accepts_peer_auth(src, t.ike, t.psk, &t));

    // A move still works after a backup, and a backup after a move: neither changes the cap.
    let key = second.migration_destination_key(2048).unwrap();
    let moved = src.export_state(&key, None, OaepHash::Sha256, b"").unwrap();
    let key = second.migration_destination_key(2048).unwrap();
    let again =
        src.export_secrets(&key.spki_der, &certify(src_m, &key.spki_der), OaepHash::Sha1, untrusted).unwrap();
    let cap = past_cap + SEQ_MARGIN;
    assert_eq!(send(src, t.sa.outbound, cap, &mut peer, t.peer_sa.inbound), EspStatus::Ok);
    assert_eq!(send(src, t.sa.outbound, cap + 1, &mut peer, t.peer_sa.inbound), EspStatus::SeqExhausted);
    let restored = second.import_state(&again, again.hsm_share()).unwrap();
    assert_eq!((restored.secrets.len(), restored.ike_sas.len(), restored.esp_sas.len()), (1, 0, 0));
    // The move's package went to a key the backup's replaced, and the instance is no
    // longer fresh: it does not go in.
    assert_eq!(
        second.import_state(&moved, None).map(|_| ()),
        Err(Error::ProtocolRefused { why: refusal::NOT_FRESH })
    );
}

#[test]
fn inline_backup_carries_secrets_only_and_leaves_the_source_serving() {
    let (mut src, _) = inline(21, CODE);
    let src_m = &measurement_of(&mut src, &platform().1);
    let (mut first, _) = inline(21, CODE);
    let (mut second, _) = inline(21, CODE);
    backup(&mut src, [&mut first, &mut second], 21, b"OPAQUE tenant configuration");
    // Another tenant cannot import it.
    let (mut other, _) = inline(22, CODE);
    let key = other.migration_destination_key(2048).unwrap();
    let package =
        src.export_secrets(&key.spki_der, &certify(src_m, &key.spki_der), OaepHash::Sha256, b"").unwrap();
    assert_eq!(other.import_state(&package, package.hsm_share()).map(|_| ()), refusal(why::WRONG_TENANT));
    // A key the root did not certify, or a certificate for another measurement.
    let cert = certify(&measurement_of(&mut other, &platform().1), &key.spki_der);
    assert_eq!(
        src.export_secrets(&key.spki_der, &cert, OaepHash::Sha1, b"").map(|_| ()),
        Err(Error::ProtocolRefused { why: refusal::BACKUP_KEY_NOT_CERTIFIED })
    );
    let cert = certify(src_m, b"not a key");
    assert_eq!(
        src.export_secrets(b"not a key", &cert, OaepHash::Sha1, b"").map(|_| ()),
        refusal(why::WRAP_KEY)
    );
    let text = format!("{package:?} {src:?}");
    assert!(!text.contains("TOPSECRET"), "{text}");
}

#[test]
fn process_backup_carries_secrets_only_and_leaves_the_source_serving() {
    let (mut src, _) = process(23);
    let (mut first, _) = process(23);
    let (mut second, _) = process(23);
    backup(&mut src, [&mut first, &mut second], 23, b"tenant configuration text");
}

#[test]
fn process_backup_is_one_call_whose_answer_may_be_held() {
    let (mut src, mut dst) = process_psk_pair(24);
    let src_m = &measurement_of(&mut src, &platform().1);
    let call_len = src.geometry().call_len as usize;
    let key = dst.migration_destination_key(2048).unwrap();
    // The largest untrusted state one call takes: its package outgrows the call area and
    // is read back in pieces.
    let most = call_len - (4 + key.spki_der.len() + 4 + 64 + 1 + 4);
    let untrusted = big_state(most);
    let package = src
        .export_secrets(&key.spki_der, &certify(src_m, &key.spki_der), OaepHash::Sha256, &untrusted)
        .unwrap();
    assert!(package.as_bytes().len() > call_len, "a held answer");
    let restored = dst.import_state(&package, package.hsm_share()).unwrap();
    assert_eq!(restored.untrusted_state, untrusted);
    assert_eq!(dst.secret_kind(restored.secrets[0].1), Ok(SecretKind::PreSharedKey));
    // One byte more has no chunked form: refused before anything crosses.
    let over = big_state(most + 1);
    assert_eq!(
        src.export_secrets(&key.spki_der, &certify(src_m, &key.spki_der), OaepHash::Sha256, &over)
            .map(|_| ()),
        refusal(why::TOO_LARGE)
    );
    assert!(src.check().is_ok() && dst.check().is_ok());
}

// ---- process backend: packages larger than the call area, in chunks ----------------------

/// `n` bytes of untrusted state that no two offsets of a chunk share by accident.
fn big_state(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i ^ (i >> 8) ^ (i >> 16)) as u8).collect()
}

#[test]
fn process_state_many_call_areas_long_moves_in_chunks() {
    let (mut src, src_pk) = process(11);
    let (mut dst, dst_pk) = process(11);
    let call_len = src.geometry().call_len as usize;
    assert_eq!(call_len, 128 << 10, "the default call area");
    let untrusted = big_state(1 << 20);
    migrate(&mut src, &src_pk, &mut dst, &dst_pk, 11, &untrusted);
}

#[test]
fn process_package_above_the_largest_call_area_moves_in_chunks() {
    let (mut src, src_pk) = process(12);
    let (mut dst, dst_pk) = process(12);
    let untrusted = big_state(MAX_CALL_AREA as usize + (4 << 20));
    let t = std::time::Instant::now();
    migrate(&mut src, &src_pk, &mut dst, &dst_pk, 12, &untrusted);
    eprintln!("{} MiB of untrusted state moved in {:?}", untrusted.len() >> 20, t.elapsed());
}

/// The migration at the inline backend's own limit (1 GiB of untrusted state): minutes and
/// several GiB of memory in a debug build, so run by hand
/// (`cargo test --release -p cloister-enclave --test migration -- --ignored`).
#[test]
#[ignore = "a GiB of state: run by hand, in release"]
fn process_state_at_the_untrusted_state_limit_moves_in_chunks() {
    let (mut src, src_pk) = process(13);
    let (mut dst, dst_pk) = process(13);
    let untrusted = big_state(MAX_UNTRUSTED_STATE);
    let t = std::time::Instant::now();
    migrate(&mut src, &src_pk, &mut dst, &dst_pk, 13, &untrusted);
    eprintln!("{} MiB of untrusted state moved in {:?}", untrusted.len() >> 20, t.elapsed());
}

/// A process source holding one PSK (so it may export again and again) and a process
/// destination of the same measurement.
fn process_psk_pair(tenant: u32) -> (ProcessEnclave, ProcessEnclave) {
    let (mut src, _) = process(tenant);
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(tenant), SecretKind::PreSharedKey, PSK)
            .unwrap();
    src.provision_secret(&blob).unwrap();
    let (dst, _) = process(tenant);
    (src, dst)
}

/// A fresh destination key at `dst` and a package of `untrusted` for it from `src`.
fn package_for(src: &mut ProcessEnclave, dst: &mut ProcessEnclave, untrusted: &[u8]) -> MigrationPackage {
    let key = dst.migration_destination_key(2048).unwrap();
    src.export_state(&key, None, OaepHash::Sha1, untrusted).unwrap()
}

fn raw(e: &mut ProcessEnclave, opcode: u16, f: impl FnOnce(&mut Writer)) -> Result<Vec<u8>> {
    let mut w = Writer::new();
    f(&mut w);
    e.raw_call(opcode, &w.buf)
}

/// Streams `bytes` in as a chunked import announced as `total` bytes long, then finishes it.
fn raw_import(e: &mut ProcessEnclave, total: usize, bytes: &[u8]) -> Result<()> {
    raw(e, op::IMPORT_BEGIN, |w| {
        w.usize(total);
    })?;
    for (i, piece) in bytes.chunks(100_000).enumerate() {
        raw(e, op::STAGE_CHUNK, |w| {
            w.usize(i * 100_000).bytes(piece);
        })?;
    }
    raw(e, op::IMPORT_FINISH, |w| {
        codec::put_opt_bytes(w, None);
    })
    .map(|_| ())
}

#[test]
fn chunked_imports_refuse_cut_and_tampered_packages_as_inline_does() {
    let (mut src, mut dst) = process_psk_pair(14);
    let untrusted = big_state(300 << 10);
    let package = package_for(&mut src, &mut dst, &untrusted);
    let bytes = package.as_bytes().to_vec();
    assert!(bytes.len() > dst.geometry().call_len as usize, "a chunked import");

    // Cut: announced as cut (the header then says more is to come), or stopped before the
    // announced end. Both before the destination key is spent, as inline.
    let cut = &bytes[..bytes.len() - 1000];
    assert_eq!(MigrationPackage::from_bytes(cut.to_vec()).map(|_| ()), refusal(why::TRUNCATED));
    assert_eq!(raw_import(&mut dst, cut.len(), cut), refusal(why::TRUNCATED));
    assert_eq!(raw_import(&mut dst, bytes.len(), cut), refusal(why::TRUNCATED));
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(raw_import(&mut dst, longer.len(), &longer), refusal(why::MALFORMED));
    // The key is still there: the genuine package imports, all of it.
    let restored = dst.import_state(&package, None).unwrap();
    assert_eq!(restored.untrusted_state, untrusted);
    assert_eq!(restored.secrets.len(), 1);

    // Tampered: a share byte and the evidence (refused by the source's evidence), a body
    // byte in a later chunk (refused by its tag); each spends the key and installs nothing.
    for at in [PACKAGE_HEADER_LEN + 3, 200 << 10, usize::MAX] {
        let (mut fresh, _) = process(14);
        let package = package_for(&mut src, &mut fresh, &untrusted);
        let mut b = package.as_bytes().to_vec();
        let at = at.min(b.len() - 1);
        b[at] ^= 0x40;
        let tampered = MigrationPackage::from_bytes(b).unwrap();
        let r = fresh.import_state(&tampered, None).map(|_| ());
        let want = if at == 200 << 10 {
            refusal(why::NO_DECRYPT)
        } else {
            Err(Error::ProtocolRefused { why: refusal::PEER_NOT_ATTESTED })
        };
        assert_eq!(r, want, "flipped byte {at}");
        assert_eq!(fresh.import_state(&package, None).map(|_| ()), refusal(why::NO_DESTINATION_KEY));
        assert_eq!(fresh.memory_report().secrets, 0, "nothing installed");
        let kind = if at == 200 << 10 { ErrorKind::BlobRejected } else { ErrorKind::ProtocolRefused };
        assert!(fresh.counters().error(kind) >= 1, "refusal counted");
    }
    assert_eq!(dst.secret_kind(restored.secrets[0].1), Ok(SecretKind::PreSharedKey));
}

#[test]
fn chunked_calls_out_of_sequence_are_refused_and_leave_the_source_as_it_was() {
    let tenant = 15;
    let (mut src, _) = process(tenant);
    let (mut peer, _) = inline(tenant, b"peer");
    let t = tunnel(&mut src, &mut peer, tenant);
    let (mut dst, _) = process(tenant);
    let seq = |r: Result<Vec<u8>>| assert_eq!(r.map(|_| ()), refusal(why::CHUNK_SEQUENCE));
    let begin = |e: &mut ProcessEnclave, opcode, n: usize| {
        raw(e, opcode, |w| {
            w.usize(n);
        })
    };
    let chunk = |e: &mut ProcessEnclave, off: usize, n: usize| {
        raw(e, op::STAGE_CHUNK, |w| {
            w.usize(off).bytes(&vec![7; n]);
        })
    };

    // A piece with nothing started; a piece at the wrong offset (which also ends the
    // transfer: the next piece, even at 0, has nothing to join); one past the total.
    seq(chunk(&mut src, 0, 10));
    begin(&mut src, op::EXPORT_BEGIN, 1000).unwrap();
    seq(chunk(&mut src, 10, 10));
    seq(chunk(&mut src, 0, 10));
    begin(&mut src, op::EXPORT_BEGIN, 100).unwrap();
    chunk(&mut src, 0, 60).unwrap();
    seq(chunk(&mut src, 60, 60));
    // A finish before the total, or of the other kind.
    begin(&mut src, op::EXPORT_BEGIN, 100).unwrap();
    chunk(&mut src, 0, 50).unwrap();
    let (mut other, _) = process(tenant);
    let key = other.migration_destination_key(2048).unwrap();
    seq(raw(&mut src, op::EXPORT_FINISH, |w| {
        codec::put_destination_key(w, &key);
        codec::put_opt_bytes(w, None);
        w.u8(OaepHash::Sha1.code());
    }));
    begin(&mut src, op::EXPORT_BEGIN, 100).unwrap();
    chunk(&mut src, 0, 100).unwrap();
    seq(raw(&mut src, op::IMPORT_FINISH, |w| {
        codec::put_opt_bytes(w, None);
    }));
    // Nothing staged to read back; limits announced up front.
    seq(raw(&mut src, op::RESULT_CHUNK, |w| {
        w.usize(0).u32(1000);
    }));
    assert_eq!(
        begin(&mut src, op::EXPORT_BEGIN, MAX_UNTRUSTED_STATE + 1).map(|_| ()),
        refusal(why::TOO_LARGE)
    );
    assert_eq!(begin(&mut dst, op::IMPORT_BEGIN, MAX_PACKAGE_LEN + 1).map(|_| ()), refusal(why::TOO_LARGE));
    // Arguments that do not decode are the transport's refusal, as for every call.
    assert!(matches!(src.raw_call(op::STAGE_CHUNK, &[1, 2, 3]), Err(Error::Process(_))));

    // A failed chunked export (an HSM key that is not RSA) leaves the source as it was.
    let untrusted = big_state(1 << 20);
    assert_eq!(
        src.export_state(&key, Some(b"not a key"), OaepHash::Sha1, &untrusted).map(|_| ()),
        refusal(why::WRAP_KEY)
    );
    // A start discards a stale transfer: this one is never finished, the next one works.
    begin(&mut src, op::EXPORT_BEGIN, 1 << 20).unwrap();
    chunk(&mut src, 0, 1000).unwrap();
    let key = dst.migration_destination_key(2048).unwrap();
    let package = src.export_state(&key, None, OaepHash::Sha256, &untrusted).unwrap();
    let restored = dst.import_state(&package, None).unwrap();
    assert_eq!(restored.untrusted_state, untrusted);
    let out = new_handle(&restored.esp_sas, t.sa.outbound);
    assert_eq!(send(&mut dst, out, 3 + SEQ_MARGIN + 1, &mut peer, t.peer_sa.inbound), EspStatus::Ok);

    // A held answer is read in order only; out of order, it is gone.
    let (mut src, mut dst) = process_psk_pair(tenant);
    let key = dst.migration_destination_key(2048).unwrap();
    begin(&mut src, op::EXPORT_BEGIN, untrusted.len()).unwrap();
    for (i, piece) in untrusted.chunks(100_000).enumerate() {
        raw(&mut src, op::STAGE_CHUNK, |w| {
            w.usize(i * 100_000).bytes(piece);
        })
        .unwrap();
    }
    let held = raw(&mut src, op::EXPORT_FINISH, |w| {
        codec::put_destination_key(w, &key);
        codec::put_opt_bytes(w, None);
        w.u8(OaepHash::Sha1.code());
    })
    .unwrap();
    assert_eq!(held[0], STAGED_HELD);
    let len = u64::from_le_bytes(held[1..9].try_into().unwrap()) as usize;
    assert!(len > untrusted.len());
    seq(raw(&mut src, op::RESULT_CHUNK, |w| {
        w.usize(1000).u32(1000);
    }));
    seq(raw(&mut src, op::RESULT_CHUNK, |w| {
        w.usize(0).u32(1000);
    }));
    // Small enough for the call area: answered inline by the same finish.
    begin(&mut src, op::EXPORT_BEGIN, 10).unwrap();
    chunk(&mut src, 0, 10).unwrap();
    let inline_answer = raw(&mut src, op::EXPORT_FINISH, |w| {
        codec::put_destination_key(w, &key);
        codec::put_opt_bytes(w, None);
        w.u8(OaepHash::Sha1.code());
    })
    .unwrap();
    assert_eq!(inline_answer[0], STAGED_INLINE);
    assert!(src.check().is_ok() && dst.check().is_ok(), "no refusal hurt either enclave process");
}
