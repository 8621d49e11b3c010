//! Whole migrations between real enclaves (inline and process backends) through a real
//! SoftHSM2 token: export, rewrap, import, confirmation, and the ways each can fail.
//!
//! Like tests/hsm.rs, each HSM test runs in a child process of this test binary with its own
//! token made by `scripts/softhsm-init.sh` in a temporary directory (a PKCS#11 module is one
//! instance per process). Without the module the HSM tests print SKIP and pass; the
//! enclave-only baseline needs no HSM and always runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod common;

use cloister_migrate::flow::label_measurement;
use cloister_migrate::{verify, AuditLog, Flow, Hsm, HsmConfig, Measurement, MigrateError, Mode, Pin};
use common::{cluster_key, config, with_setup, Env, Setup, PROV_KEY, TENANT, USER_PIN};
use enclave_core::attest::{
    identity_report_data, verify_software_evidence, CodeIdentity, EvidencePurpose, SoftwareAttestation,
};
use enclave_core::migration::{why, MigrationRestore};
use enclave_core::provision::wrap_secret;
use enclave_core::{Enclave, Error as EnclaveError, InlineEnclave, ProvisioningKey, SecretKind};
use enclave_host::{ProcessEnclave, ProcessSpec};

const CODE: &[u8] = b"cloister migrate flow test enclave";
const PSK: &[u8] = b"flow test PSK, 32 bytes or so...";

fn with_token(name: &str, body: impl FnOnce(&Env)) {
    with_setup(name, Setup::Token, body);
}

/// An enclave under test, its platform's public key and its measurement.
struct Node {
    enclave: Box<dyn Enclave>,
    platform: Vec<u8>,
    measurement: Measurement,
}

fn node(enclave: Box<dyn Enclave>, platform: Vec<u8>) -> Node {
    let mut enclave = enclave;
    let ev = enclave.identity_evidence(&[3; 32]).unwrap();
    let rd = identity_report_data(enclave.tenant(), &[3; 32]);
    let m =
        verify_software_evidence(&ev.bytes, &platform, EvidencePurpose::Identity, &rd).unwrap().measurement;
    Node { enclave, platform, measurement: label_measurement(&m).unwrap() }
}

fn inline(code: &[u8]) -> Node {
    let pk = cluster_key(0);
    let att = SoftwareAttestation::new(
        &pk,
        CodeIdentity::Bytes(code.to_vec()),
        &config().measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    let public = att.platform_public_key().to_vec();
    node(Box::new(InlineEnclave::start(config(), Box::new(att)).unwrap()), public)
}

fn process() -> Node {
    let pk = cluster_key(1);
    let spec = ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-migrate-enclave"), Vec::<String>::new());
    let e = ProcessEnclave::start(spec, config(), &pk).unwrap();
    let public = SoftwareAttestation::new(&pk, CodeIdentity::Bytes(vec![]), b"")
        .unwrap()
        .platform_public_key()
        .to_vec();
    node(Box::new(e), public)
}

/// Gives the source a PSK to migrate.
fn provision(src: &mut Node) {
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TENANT, SecretKind::PreSharedKey, PSK).unwrap();
    src.enclave.provision_secret(&blob).unwrap();
}

/// One whole migration from `src` to `dst` in `mode`; returns what the destination restored.
fn migrate(
    hsm: Option<&Hsm>,
    mode: Mode,
    src: &mut Node,
    dst: &mut Node,
    untrusted: &[u8],
) -> MigrationRestore {
    let flow = Flow::new(mode, hsm).unwrap();
    let keys = flow.prepare_hsm(&src.measurement).unwrap();
    let dkey = flow
        .prepare_destination(dst.enclave.as_mut(), &dst.platform, &src.measurement, TENANT, 2048)
        .unwrap();
    let transfer = flow.export(keys.as_ref(), &dkey, src.enclave.as_mut(), untrusted).unwrap();
    let restored = flow.import(transfer, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap();
    flow.confirm(keys.as_ref()).unwrap();
    restored
}

fn check_restored(restored: &MigrationRestore, dst: &mut Node, untrusted: &[u8]) {
    assert_eq!(restored.untrusted_state, untrusted);
    assert_eq!(restored.secrets.len(), 1);
    assert_eq!(dst.enclave.secret_kind(restored.secrets[0].1), Ok(SecretKind::PreSharedKey));
}

#[test]
fn baseline_moves_state_without_an_hsm() {
    let (mut src, mut dst) = (inline(CODE), inline(CODE));
    provision(&mut src);
    let restored = migrate(None, Mode::EnclaveOnly, &mut src, &mut dst, b"windows");
    check_restored(&restored, &mut dst, b"windows");
    assert!(matches!(Flow::new(Mode::HsmEnvelope, None), Err(MigrateError::NoHsm { .. })));
}

#[test]
fn hsm_envelope_moves_inline_state_and_refuses_a_replay() {
    with_token("hsm_envelope_moves_inline_state_and_refuses_a_replay", |env| {
        let hsm = env.open();
        let (mut src, mut dst) = (inline(CODE), inline(CODE));
        provision(&mut src);
        let flow = Flow::new(Mode::HsmEnvelope, Some(&hsm)).unwrap();
        let keys = flow.prepare_hsm(&src.measurement).unwrap();
        let dkey = flow
            .prepare_destination(dst.enclave.as_mut(), &dst.platform, &src.measurement, TENANT, 2048)
            .unwrap();
        let transfer = flow.export(keys.as_ref(), &dkey, src.enclave.as_mut(), b"replay windows").unwrap();
        let copy = transfer.clone();
        let restored = flow.import(transfer, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap();
        check_restored(&restored, &mut dst, b"replay windows");
        flow.confirm(keys.as_ref()).unwrap();

        // The gateway kept a copy and replays it into a fresh enclave: the key is gone.
        let mut again = inline(CODE);
        let k2 = flow
            .prepare_destination(again.enclave.as_mut(), &again.platform, &src.measurement, TENANT, 2048)
            .unwrap();
        let err = flow.import(copy, &k2, again.enclave.as_mut(), &again.measurement).unwrap_err();
        assert!(matches!(err, MigrateError::KeyNotFound { .. }), "{err}");

        // Every step is in the log, the refused replay too, and the chain verifies.
        let log = std::fs::read_to_string(env.audit_path()).unwrap();
        let ops: Vec<(String, String)> = log
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|e| (e["op"].as_str().unwrap().to_owned(), e["outcome"].as_str().unwrap().to_owned()))
            .collect();
        let want = ["open", "create-migration-key", "export-public-key", "rewrap", "delete-key", "rewrap"];
        assert_eq!(ops.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(), want);
        assert_eq!(ops.last().map(|(_, r)| r.as_str()), Some("failed"));
        assert_eq!(verify(env.audit_path()).unwrap().entries, 6);
    });
}

#[test]
fn hsm_bulk_moves_state_and_deletes_both_keys() {
    with_token("hsm_bulk_moves_state_and_deletes_both_keys", |env| {
        let hsm = env.open();
        let (mut src, mut dst) = (inline(CODE), inline(CODE));
        provision(&mut src);
        let untrusted = vec![0x5a; 3 << 20];
        let restored = migrate(Some(&hsm), Mode::HsmBulk, &mut src, &mut dst, &untrusted);
        check_restored(&restored, &mut dst, &untrusted);
        assert!(hsm.list_keys().unwrap().is_empty());
        let log = std::fs::read_to_string(env.audit_path()).unwrap();
        assert!(log.contains("\"op\":\"bulk-encrypt\"") && log.contains("\"op\":\"bulk-decrypt\""));
        assert_eq!(log.matches("\"op\":\"delete-key\",\"label\":\"cloister-blk/").count(), 1);
    });
}

#[test]
fn hsm_envelope_moves_process_backend_state() {
    with_token("hsm_envelope_moves_process_backend_state", |env| {
        let hsm = env.open();
        let (mut src, mut dst) = (process(), process());
        provision(&mut src);
        let restored = migrate(Some(&hsm), Mode::HsmEnvelope, &mut src, &mut dst, b"process state");
        check_restored(&restored, &mut dst, b"process state");
    });
}

#[test]
fn a_destination_of_another_measurement_gets_nothing() {
    with_token("a_destination_of_another_measurement_gets_nothing", |env| {
        let hsm = env.open();
        let (mut src, mut other) = (inline(CODE), inline(b"other code"));
        provision(&mut src);
        let flow = Flow::new(Mode::HsmEnvelope, Some(&hsm)).unwrap();
        let keys = flow.prepare_hsm(&src.measurement).unwrap();
        // The agent's check of the destination's evidence refuses it...
        let err = flow
            .prepare_destination(other.enclave.as_mut(), &other.platform, &src.measurement, TENANT, 2048)
            .unwrap_err();
        assert!(
            matches!(err, MigrateError::Enclave { source: EnclaveError::MeasurementMismatch { .. } }),
            "{err}"
        );
        // ...an agent that skips it meets the source enclave's own check...
        let dkey = other.enclave.migration_destination_key(2048).unwrap();
        let err = flow.export(keys.as_ref(), &dkey, src.enclave.as_mut(), b"").unwrap_err();
        let mismatch = EnclaveError::ProtocolRefused { why: enclave_core::refusal::PEER_MISMATCH };
        assert!(matches!(err, MigrateError::Enclave { ref source } if *source == mismatch), "{err}");
        // ...and one that hands a package made for a genuine destination to the other
        // enclave meets the HSM's check of the label.
        let mut genuine = inline(CODE);
        let good = genuine.enclave.migration_destination_key(2048).unwrap();
        let transfer = flow.export(keys.as_ref(), &good, src.enclave.as_mut(), b"").unwrap();
        let err = flow.import(transfer, &dkey, other.enclave.as_mut(), &other.measurement).unwrap_err();
        assert!(matches!(err, MigrateError::MeasurementMismatch { .. }), "{err}");
        let text = std::fs::read_to_string(env.audit_path()).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!((last["op"].as_str(), last["outcome"].as_str()), (Some("rewrap"), Some("failed")));
    });
}

#[test]
fn tampered_and_truncated_transfers_are_refused() {
    with_token("tampered_and_truncated_transfers_are_refused", |env| {
        let hsm = env.open();
        let flow = Flow::new(Mode::HsmEnvelope, Some(&hsm)).unwrap();
        let mut src = inline(CODE);
        provision(&mut src);
        let keys = flow.prepare_hsm(&src.measurement).unwrap();
        let mut dst = inline(CODE);
        let dkey = flow
            .prepare_destination(dst.enclave.as_mut(), &dst.platform, &src.measurement, TENANT, 2048)
            .unwrap();
        let transfer = flow.export(keys.as_ref(), &dkey, src.enclave.as_mut(), b"state").unwrap();

        // Cut in transit: refused before the HSM is asked anything.
        let mut cut = transfer.clone();
        cut.bytes.truncate(cut.bytes.len() - 7);
        let err = flow.import(cut, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap_err();
        assert!(
            matches!(err, MigrateError::Enclave { source: EnclaveError::Migration { why: why::TRUNCATED } }),
            "{err}"
        );
        // The wrapped key flipped: the HSM refuses it, and the one-time key stays unspent.
        let mut bad_key = transfer.clone();
        bad_key.bytes[enclave_core::migration::PACKAGE_HEADER_LEN + 9] ^= 1;
        let err = flow.import(bad_key, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap_err();
        assert!(matches!(err, MigrateError::WrappedKeyInvalid { .. }), "{err}");
        // One bit of the body's tag flipped: the HSM rewraps (its share is intact), which
        // spends the one-time key, and the destination enclave refuses the package: the
        // source's evidence covers the tag.
        let mut flipped = transfer.clone();
        let package = enclave_core::migration::MigrationPackage::from_bytes(transfer.bytes.clone()).unwrap();
        let tag_end = flipped.bytes.len() - package.source_evidence().len() - 2;
        flipped.bytes[tag_end - 1] ^= 1;
        let err = flow.import(flipped, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap_err();
        assert!(
            matches!(
                err,
                MigrateError::Enclave {
                    source: EnclaveError::ProtocolRefused { why: enclave_core::refusal::PEER_NOT_ATTESTED }
                }
            ),
            "{err}"
        );
        // The genuine transfer no longer opens: its key rewrapped once already.
        let dkey = flow
            .prepare_destination(dst.enclave.as_mut(), &dst.platform, &src.measurement, TENANT, 2048)
            .unwrap();
        let err = flow.import(transfer, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap_err();
        assert!(matches!(err, MigrateError::OneTimeKeyUsed { .. }), "{err}");
        // The source exports again under a fresh one-time key; that one arrives.
        flow.confirm(keys.as_ref()).unwrap();
        let keys = flow.prepare_hsm(&src.measurement).unwrap();
        let dkey = flow
            .prepare_destination(dst.enclave.as_mut(), &dst.platform, &src.measurement, TENANT, 2048)
            .unwrap();
        let again = flow.export(keys.as_ref(), &dkey, src.enclave.as_mut(), b"state");
        // An export caps the outbound SAs it carries; this state has none, so it may go again.
        let transfer = again.unwrap();
        flow.import(transfer, &dkey, dst.enclave.as_mut(), &dst.measurement).unwrap();
    });
}

#[test]
fn wrong_pin_is_refused_and_audited() {
    with_token("wrong_pin_is_refused_and_audited", |env| {
        let err = Hsm::open(env.config(), Pin::new("wrong"), AuditLog::open(env.audit_path()).unwrap())
            .unwrap_err();
        assert!(matches!(err, MigrateError::WrongPin { role: "user" }), "{err}");
        let text = std::fs::read_to_string(env.audit_path()).unwrap();
        assert!(text.contains("\"op\":\"open\"") && text.contains("\"outcome\":\"failed\""));
        assert!(!text.contains("wrong\""), "the PIN is not logged");
    });
}

#[test]
fn an_unreachable_hsm_is_a_typed_error_and_audited() {
    with_setup("an_unreachable_hsm_is_a_typed_error_and_audited", Setup::StoreMissing, |env| {
        let err = Hsm::open(env.config(), Pin::new(USER_PIN), AuditLog::open(env.audit_path()).unwrap())
            .unwrap_err();
        assert!(matches!(err, MigrateError::HsmUnavailable { .. }), "{err}");
        let bad_module = HsmConfig { module: env.dir.join("no-such-module.so"), ..env.config() };
        let err =
            Hsm::open(bad_module, Pin::new(USER_PIN), AuditLog::open(env.audit_path()).unwrap()).unwrap_err();
        assert!(matches!(err, MigrateError::ModuleMissing { .. }), "{err}");
        let head = verify(env.audit_path()).unwrap();
        assert_eq!(head.entries, 2, "both failures are in the log");
    });
}
