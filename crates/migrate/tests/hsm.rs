//! The HSM side of migration against a real SoftHSM2 token.
//!
//! Each test runs in a child process of this test binary with its own token, initialised by
//! `scripts/softhsm-init.sh` in a temporary directory and selected with `SOFTHSM2_CONF`: a
//! PKCS#11 module is one instance per process, configured once at `C_Initialize`, so tests
//! sharing a process would share one token and one login state. Processes keep the tests
//! parallel and independent.
//!
//! The tests play the enclaves with the `rsa` crate: the source wraps a 32-byte data key with
//! the HSM key's public key (RSA-OAEP), the destination decrypts what the HSM rewrapped for it.
//! Without the module installed every test prints SKIP and passes.
// Test helpers outside #[test] functions: a panic there is a failed test too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[allow(dead_code)]
mod common;

use cloister_migrate::{
    verify, AuditLog, BackupDate, ChainFault, Hsm, HsmConfig, KeyLabel, Measurement, MigrateError, OaepHash,
    Operation, Pin, RvError,
};
use common::{with_setup, Env, Setup, SO_PIN, TOKEN, USER_PIN};
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use rsa::rand_core::{OsRng, RngCore};
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};

fn with_token(name: &str, body: impl FnOnce(&Env)) {
    with_setup(name, Setup::Token, body);
}

fn measurement(byte: u8) -> Measurement {
    Measurement::from_bytes(&[byte; 48]).unwrap()
}

fn data_key() -> [u8; 32] {
    let mut key = [0; 32];
    OsRng.fill_bytes(&mut key);
    key
}

/// The source enclave: wraps the data key with the HSM key's exported public key.
fn source_wrap(spki: &[u8], key: &[u8]) -> Vec<u8> {
    let public = RsaPublicKey::from_public_key_der(spki).unwrap();
    public.encrypt(&mut OsRng, Oaep::new::<sha1::Sha1>(), key).unwrap()
}

/// A destination enclave's ephemeral key pair (fixture: see tests/fixtures/README.md).
struct Destination(RsaPrivateKey);

impl Destination {
    fn a() -> Self {
        Self(RsaPrivateKey::from_pkcs8_pem(include_str!("fixtures/destination-a.pem")).unwrap())
    }
    fn b() -> Self {
        Self(RsaPrivateKey::from_pkcs8_pem(include_str!("fixtures/destination-b.pem")).unwrap())
    }
    fn spki(&self) -> Vec<u8> {
        self.0.to_public_key().to_public_key_der().unwrap().as_bytes().to_vec()
    }
    fn open(&self, rewrapped: &[u8]) -> Vec<u8> {
        self.0.decrypt(Oaep::new::<sha1::Sha1>(), rewrapped).unwrap()
    }
}

fn last_entry(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[test]
fn keys_are_created_labelled_and_listed() {
    with_token("keys_are_created_labelled_and_listed", |env| {
        let hsm = env.open();
        let m = measurement(0xa1);
        let first = hsm.create_migration_key(&m).unwrap();
        let second = hsm.create_migration_key(&m).unwrap();
        // HSM randomness makes every migration's key its own.
        assert_ne!(first, second);
        let text = first.to_string();
        assert!(text.starts_with(&format!("cloister-mig/{m}/")), "{text}");
        assert_eq!(text.parse::<KeyLabel>().unwrap(), first);

        let date = BackupDate::from_ymd(2026, 11, 22).unwrap();
        let backup = hsm.create_backup_key(&m, date).unwrap();
        assert_eq!(backup.to_string(), format!("cloister-bak/{m}/2026-11-22"));
        assert!(matches!(hsm.create_backup_key(&m, date), Err(MigrateError::KeyExists { .. })));

        let keys = hsm.list_keys().unwrap();
        assert_eq!(keys.len(), 3, "{keys:?}");
        for key in &keys {
            // One-time keys unwrap; a backup key is encrypt-only until the officer's step.
            assert_eq!(key.unwrap_allowed, !key.label.is_backup(), "{key:?}");
        }
        let spki = hsm.public_key(&first).unwrap();
        assert_eq!(
            RsaPublicKey::from_public_key_der(&spki).unwrap().to_public_key_der().unwrap().as_bytes(),
            spki
        );
    });
}

#[test]
fn rewrap_delivers_the_same_data_key_to_the_destination() {
    with_token("rewrap_delivers_the_same_data_key_to_the_destination", |env| {
        let hsm = env.open();
        let m = measurement(0xb2);
        let label = hsm.create_migration_key(&m).unwrap();
        let key = data_key();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &key);
        let destination = Destination::a();
        let rewrapped = hsm.rewrap(&label, &wrapped, &destination.spki(), &m).unwrap();
        assert_eq!(destination.open(&rewrapped), key);
        // Neither package carries the key in clear.
        for bytes in [&wrapped, &rewrapped] {
            assert!(!bytes.windows(key.len()).any(|w| w == key));
        }
        // The transient data key and destination key are gone, and so is the one-time key's
        // private half: nothing is left that unwraps.
        assert!(hsm.list_keys().unwrap().is_empty());
    });
}

#[test]
fn rewrap_for_another_measurement_is_refused() {
    with_token("rewrap_for_another_measurement_is_refused", |env| {
        let hsm = env.open();
        let label = hsm.create_migration_key(&measurement(0xc3)).unwrap();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &data_key());
        let err = hsm.rewrap(&label, &wrapped, &Destination::a().spki(), &measurement(0xc4)).unwrap_err();
        assert!(matches!(err, MigrateError::MeasurementMismatch { .. }), "{err}");
        let entry = last_entry(&env.audit_path());
        assert_eq!((entry["op"].as_str(), entry["outcome"].as_str()), (Some("rewrap"), Some("failed")));
    });
}

#[test]
fn wrong_pin_is_refused_and_audited() {
    with_token("wrong_pin_is_refused_and_audited", |env| {
        let err = Hsm::open(env.config(), Pin::new("not-the-pin"), AuditLog::open(env.audit_path()).unwrap())
            .unwrap_err();
        assert!(matches!(err, MigrateError::WrongPin { role: "user" }), "{err}");
        let entry = last_entry(&env.audit_path());
        assert_eq!((entry["op"].as_str(), entry["outcome"].as_str()), (Some("open"), Some("failed")));
        assert!(!std::fs::read_to_string(env.audit_path()).unwrap().contains("not-the-pin"));
        // The right PIN still works (one failure does not lock SoftHSM's PIN).
        env.open();
    });
}

#[test]
fn a_one_time_key_rewraps_once() {
    with_token("a_one_time_key_rewraps_once", |env| {
        let hsm = env.open();
        let m = measurement(0xd5);
        let label = hsm.create_migration_key(&m).unwrap();
        let key = data_key();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &key);
        let first = Destination::a();
        assert_eq!(first.open(&hsm.rewrap(&label, &wrapped, &first.spki(), &m).unwrap()), key);
        // A second destination, or the same one again, gets nothing: the key is spent.
        for spki in [Destination::b().spki(), first.spki()] {
            let err = hsm.rewrap(&label, &wrapped, &spki, &m).unwrap_err();
            assert!(matches!(err, MigrateError::OneTimeKeyUsed { .. }), "{err}");
        }
        let entry = last_entry(&env.audit_path());
        assert_eq!((entry["op"].as_str(), entry["outcome"].as_str()), (Some("rewrap"), Some("failed")));
        // The confirmation still removes what is left.
        hsm.delete_key(&label).unwrap();
        assert!(matches!(hsm.delete_key(&label), Err(MigrateError::KeyNotFound { .. })));
    });
}

#[test]
fn replayed_package_is_refused_after_the_key_is_deleted() {
    with_token("replayed_package_is_refused_after_the_key_is_deleted", |env| {
        let hsm = env.open();
        let m = measurement(0xd4);
        let label = hsm.create_migration_key(&m).unwrap();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &data_key());
        let destination = Destination::a();
        hsm.rewrap(&label, &wrapped, &destination.spki(), &m).unwrap();
        // The destination confirmed the restore: the one-time key goes.
        hsm.delete_key(&label).unwrap();
        let err = hsm.rewrap(&label, &wrapped, &destination.spki(), &m).unwrap_err();
        assert!(matches!(err, MigrateError::KeyNotFound { .. }), "{err}");
        assert!(hsm.list_keys().unwrap().is_empty());
    });
}

#[test]
fn tampered_or_truncated_wrapped_key_is_refused() {
    with_token("tampered_or_truncated_wrapped_key_is_refused", |env| {
        let hsm = env.open();
        let m = measurement(0xe5);
        let label = hsm.create_migration_key(&m).unwrap();
        let spki = hsm.public_key(&label).unwrap();
        let mut wrapped = source_wrap(&spki, &data_key());
        let destination = Destination::a().spki();
        let truncated = &wrapped[..wrapped.len() - 1];
        assert!(matches!(
            hsm.rewrap(&label, truncated, &destination, &m),
            Err(MigrateError::WrappedKeyInvalid { .. })
        ));
        wrapped[17] ^= 0x40;
        let err = hsm.rewrap(&label, &wrapped, &destination, &m).unwrap_err();
        assert!(matches!(err, MigrateError::WrappedKeyInvalid { .. }), "{err:?}");
        // A weak destination key is refused before the HSM is asked anything.
        assert!(matches!(
            hsm.rewrap(&label, &wrapped, b"\x30\x00", &m),
            Err(MigrateError::BadPublicKey { .. })
        ));
    });
}

#[test]
fn backup_key_restores_only_after_the_officer_step() {
    with_token("backup_key_restores_only_after_the_officer_step", |env| {
        let hsm = env.open();
        let m = measurement(0xf6);
        let label = hsm.create_backup_key(&m, BackupDate::from_ymd(2026, 1, 31).unwrap()).unwrap();
        let key = data_key();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &key);
        let (a, b) = (Destination::a(), Destination::b());

        let err = hsm.rewrap(&label, &wrapped, &a.spki(), &m).unwrap_err();
        assert!(matches!(err, MigrateError::RestoreNotAuthorized { .. }), "{err}");
        assert!(matches!(
            hsm.authorize_backup_restore(&label, &Pin::new("wrong"), &a.spki(), &m),
            Err(MigrateError::WrongPin { role: "security officer" })
        ));
        assert!(matches!(
            hsm.authorize_backup_restore(&label, &Pin::new(SO_PIN), &a.spki(), &measurement(0x01)),
            Err(MigrateError::MeasurementMismatch { .. })
        ));
        // A user operation after the failed officer login still logs in.
        assert!(hsm.rewrap(&label, &wrapped, &a.spki(), &m).is_err());

        hsm.authorize_backup_restore(&label, &Pin::new(SO_PIN), &a.spki(), &m).unwrap();
        assert!(hsm.list_keys().unwrap()[0].unwrap_allowed);
        let rewrapped = hsm.rewrap(&label, &wrapped, &a.spki(), &m).unwrap();
        assert_eq!(a.open(&rewrapped), key);
        // The officer trusted A, not B: no trusted key for B exists (and were B's key imported
        // by a user, the HSM would refuse to wrap a wrap-with-trusted data key under it:
        // token_policy_facts, point 5).
        let err = hsm.rewrap(&label, &wrapped, &b.spki(), &m).unwrap_err();
        assert!(matches!(err, MigrateError::RestoreNotAuthorized { .. }), "{err}");

        hsm.revoke_backup_restore(&label, &Pin::new(SO_PIN), &a.spki()).unwrap();
        assert!(!hsm.list_keys().unwrap()[0].unwrap_allowed);
        assert!(matches!(
            hsm.rewrap(&label, &wrapped, &a.spki(), &m),
            Err(MigrateError::RestoreNotAuthorized { .. })
        ));
        // One-time keys have no officer step.
        let mig = hsm.create_migration_key(&m).unwrap();
        assert!(matches!(
            hsm.authorize_backup_restore(&mig, &Pin::new(SO_PIN), &a.spki(), &m),
            Err(MigrateError::WrongKeyKind { .. })
        ));
    });
}

#[test]
fn the_backup_root_certifies_backup_keys_for_their_measurement_only() {
    with_token("the_backup_root_certifies_backup_keys_for_their_measurement_only", |env| {
        let hsm = env.open();
        let m = measurement(0x31);
        let label = hsm.create_backup_key(&m, BackupDate::from_ymd(2026, 2, 1).unwrap()).unwrap();
        // No root yet: a certificate is refused, with what to do.
        assert!(matches!(hsm.certify_backup_key(&label), Err(MigrateError::NoBackupRoot)));
        let root = hsm.backup_root().unwrap();
        assert_eq!((root.len(), root[0]), (65, 4), "an uncompressed P-256 point");
        assert_eq!(hsm.backup_root().unwrap(), root, "made once, then found");
        let cert = hsm.certify_backup_key(&label).unwrap();
        // What the enclave checks: the root's signature over this measurement and key.
        let spki = hsm.public_key(&label).unwrap();
        let em = enclave_core::attest::Measurement(m.as_bytes().try_into().unwrap());
        let verify = |msg: &[u8]| {
            ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &root)
                .verify(msg, &cert)
        };
        verify(&enclave_core::migration::backup_key_message(&em, &spki)).unwrap();
        let other = enclave_core::attest::Measurement([0x32; 48]);
        assert!(verify(&enclave_core::migration::backup_key_message(&other, &spki)).is_err());
        // One-time migration keys get no certificate.
        let one_time = hsm.create_migration_key(&m).unwrap();
        assert!(matches!(hsm.certify_backup_key(&one_time), Err(MigrateError::WrongKeyKind { .. })));
        assert_eq!(last_entry(&env.audit_path())["op"], "certify-backup-key");
    });
}

#[test]
fn missing_module_is_a_clear_error() {
    // Needs no token: the module path is checked first.
    let dir = tempfile::tempdir().unwrap();
    let config = HsmConfig { module: dir.path().join("no-such-pkcs11.so"), ..HsmConfig::new(TOKEN) };
    let err = Hsm::open(config, Pin::new(USER_PIN), AuditLog::open(dir.path().join("audit.jsonl")).unwrap())
        .unwrap_err();
    assert!(matches!(err, MigrateError::ModuleMissing { .. }), "{err}");
    assert!(err.to_string().contains("no-such-pkcs11.so"), "{err}");
    let entry = last_entry(&dir.path().join("audit.jsonl"));
    assert_eq!((entry["op"].as_str(), entry["outcome"].as_str()), (Some("open"), Some("failed")));

    // A file that is not a PKCS#11 module.
    let bogus = dir.path().join("bogus.so");
    std::fs::write(&bogus, b"not an ELF").unwrap();
    let config = HsmConfig { module: bogus, ..HsmConfig::new(TOKEN) };
    let err = Hsm::open(config, Pin::new(USER_PIN), AuditLog::open(dir.path().join("audit.jsonl")).unwrap())
        .unwrap_err();
    assert!(matches!(err, MigrateError::ModuleLoad { .. }), "{err}");
}

#[test]
fn unreachable_hsm_is_a_clear_error() {
    with_setup("unreachable_hsm_is_a_clear_error", Setup::StoreMissing, |env| {
        let err = Hsm::open(env.config(), Pin::new(USER_PIN), AuditLog::open(env.audit_path()).unwrap())
            .unwrap_err();
        assert!(matches!(err, MigrateError::HsmUnavailable { .. }), "{err}");
        println!("store missing: {err}");
    });
}

#[test]
fn unknown_token_label_is_a_clear_error() {
    with_token("unknown_token_label_is_a_clear_error", |env| {
        let config = HsmConfig { token_label: "no-such-token".into(), ..env.config() };
        let err =
            Hsm::open(config, Pin::new(USER_PIN), AuditLog::open(env.audit_path()).unwrap()).unwrap_err();
        assert!(matches!(err, MigrateError::TokenNotFound { .. }), "{err}");
    });
}

#[test]
fn audit_log_verifies_and_an_edited_entry_is_detected() {
    with_token("audit_log_verifies_and_an_edited_entry_is_detected", |env| {
        let hsm = env.open();
        let m = measurement(0x17);
        let label = hsm.create_migration_key(&m).unwrap();
        let wrapped = source_wrap(&hsm.public_key(&label).unwrap(), &data_key());
        let spki = Destination::a().spki();
        hsm.rewrap(&label, &wrapped, &spki, &m).unwrap();
        let _ = hsm.rewrap(&label, &wrapped, &spki, &measurement(0x18));
        hsm.delete_key(&label).unwrap();
        let _ = hsm.rewrap(&label, &wrapped, &spki, &m);
        drop(hsm);

        let head = verify(env.audit_path()).unwrap();
        let text = std::fs::read_to_string(env.audit_path()).unwrap();
        let ops: Vec<(String, String)> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["op"].as_str().unwrap().to_owned(), v["outcome"].as_str().unwrap().to_owned())
            })
            .collect();
        let expected = [
            (Operation::Open, "ok"),
            (Operation::CreateMigrationKey, "ok"),
            (Operation::ExportPublicKey, "ok"),
            (Operation::Rewrap, "ok"),
            (Operation::Rewrap, "failed"),
            (Operation::DeleteKey, "ok"),
            (Operation::Rewrap, "failed"),
        ];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(op, outcome)| (op.as_str().to_owned(), (*outcome).to_owned())).collect();
        assert_eq!(ops, expected);
        assert_eq!(head.entries, 7);
        // No key material or PIN in the log: wrapped keys are not logged either.
        assert!(!text.contains(USER_PIN));

        // Someone turns the failed replay into a success.
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[6] = lines[6].replacen("\"outcome\":\"failed\"", "\"outcome\":\"ok\"", 1);
        std::fs::write(env.audit_path(), lines.join("\n") + "\n").unwrap();
        match verify(env.audit_path()) {
            Err(MigrateError::AuditChain { line: 7, fault: ChainFault::HashMismatch, .. }) => {}
            other => panic!("edit not detected: {other:?}"),
        }
        // And the log refuses to grow on a broken chain.
        assert!(AuditLog::open(env.audit_path()).is_err());
    });
}

#[test]
fn sha256_oaep_works_or_fails_clearly() {
    with_token("sha256_oaep_works_or_fails_clearly", |env| {
        let config = HsmConfig { oaep_hash: OaepHash::Sha256, ..env.config() };
        let hsm = Hsm::open(config, Pin::new(USER_PIN), AuditLog::open(env.audit_path()).unwrap()).unwrap();
        let m = measurement(0x28);
        let label = hsm.create_migration_key(&m).unwrap();
        let spki = hsm.public_key(&label).unwrap();
        let key = data_key();
        let public = RsaPublicKey::from_public_key_der(&spki).unwrap();
        let wrapped = public.encrypt(&mut OsRng, Oaep::new::<sha2::Sha256>(), &key).unwrap();
        let destination = Destination::a();
        match hsm.rewrap(&label, &wrapped, &destination.spki(), &m) {
            Ok(rewrapped) => {
                println!("this HSM supports RSA-OAEP-SHA-256");
                assert_eq!(destination.0.decrypt(Oaep::new::<sha2::Sha256>(), &rewrapped).unwrap(), key);
            }
            Err(MigrateError::OaepHashUnsupported { hash: "SHA-256" }) => {
                println!("this HSM refuses RSA-OAEP-SHA-256 (SoftHSM2 2.6: SHA-1 only)");
            }
            Err(other) => panic!("unexpected: {other}"),
        }
    });
}

/// What the design relies on from the token, checked on SoftHSM2 directly with PKCS#11
/// (docs/migration.md, "What SoftHSM2 allows").
#[test]
fn token_policy_facts() {
    with_token("token_policy_facts", |env| {
        let hsm = env.open();
        let m = measurement(0x39);
        let backup = hsm.create_backup_key(&m, BackupDate::from_ymd(2026, 3, 1).unwrap()).unwrap();
        let one_time = hsm.create_migration_key(&m).unwrap();
        drop(hsm);

        let ctx = Pkcs11::new(env.config().module).unwrap();
        match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
            Ok(()) | Err(cryptoki::error::Error::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
            Err(e) => panic!("{e}"),
        }
        let slot = ctx.get_slots_with_token().unwrap()[0];
        let label = Attribute::Label(backup.to_string().into_bytes());

        // 1. The SO cannot see private objects, so an SO-only CKA_UNWRAP flip is impossible.
        let session = ctx.open_rw_session(slot).unwrap();
        session.login(UserType::So, Some(&AuthPin::new(SO_PIN.into()))).unwrap();
        let seen =
            session.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY), label.clone()]).unwrap();
        assert!(seen.is_empty(), "SO sees private keys");
        session.logout().unwrap();
        drop(session);

        // 2. A user may flip CKA_UNWRAP on a modifiable private key, and CKA_DECRYPT as well:
        //    the officer step is not a barrier against a holder of the user PIN.
        let session = ctx.open_rw_session(slot).unwrap();
        session.login(UserType::User, Some(&AuthPin::new(USER_PIN.into()))).unwrap();
        let private = session.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY), label]).unwrap()[0];
        session.update_attributes(private, &[Attribute::Decrypt(true)]).unwrap();
        session.update_attributes(private, &[Attribute::Decrypt(false)]).unwrap();

        // 2b. ...but a key created not copyable cannot be copied (a copy would survive
        //     delete_key and make a replay possible).
        let mig = session
            .find_objects(&[
                Attribute::Class(ObjectClass::PRIVATE_KEY),
                Attribute::Label(one_time.to_string().into_bytes()),
            ])
            .unwrap()[0];
        let copy = session.copy_object(mig, &[Attribute::Modifiable(true)]);
        assert!(
            matches!(copy, Err(cryptoki::error::Error::Pkcs11(RvError::ActionProhibited, _))),
            "{copy:?}"
        );

        // 3. A user cannot mark a key CKA_TRUSTED: only the SO can.
        let spki = Destination::a().0.to_public_key();
        let trusted = session.create_object(&[
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(KeyType::RSA),
            Attribute::Token(false),
            Attribute::Trusted(true),
            Attribute::Wrap(true),
            Attribute::Modulus(rsa::traits::PublicKeyParts::n(&spki).to_bytes_be()),
            Attribute::PublicExponent(rsa::traits::PublicKeyParts::e(&spki).to_bytes_be()),
        ]);
        assert!(
            matches!(trusted, Err(cryptoki::error::Error::Pkcs11(RvError::AttributeReadOnly, _))),
            "{trusted:?}"
        );

        // 4. A sensitive, non-modifiable unwrapped key stays sensitive.
        let secret = session
            .generate_key(
                &cryptoki::mechanism::Mechanism::AesKeyGen,
                &[
                    Attribute::Token(false),
                    Attribute::ValueLen(32u64.into()),
                    Attribute::Sensitive(true),
                    Attribute::Modifiable(false),
                ],
            )
            .unwrap();
        assert!(session.update_attributes(secret, &[Attribute::Decrypt(true)]).is_err());
        assert!(session
            .get_attributes(secret, &[cryptoki::object::AttributeType::Value])
            .map_or(true, |v| v.is_empty()));

        // 5. A wrap-with-trusted key cannot be wrapped under a key the user imported.
        let guarded = session
            .generate_key(
                &cryptoki::mechanism::Mechanism::AesKeyGen,
                &[
                    Attribute::Token(false),
                    Attribute::ValueLen(32u64.into()),
                    Attribute::Sensitive(true),
                    Attribute::Extractable(true),
                    Attribute::WrapWithTrusted(true),
                ],
            )
            .unwrap();
        let untrusted = session
            .create_object(&[
                Attribute::Class(ObjectClass::PUBLIC_KEY),
                Attribute::KeyType(KeyType::RSA),
                Attribute::Token(false),
                Attribute::Wrap(true),
                Attribute::Modulus(rsa::traits::PublicKeyParts::n(&spki).to_bytes_be()),
                Attribute::PublicExponent(rsa::traits::PublicKeyParts::e(&spki).to_bytes_be()),
            ])
            .unwrap();
        let oaep =
            cryptoki::mechanism::Mechanism::RsaPkcsOaep(cryptoki::mechanism::rsa::PkcsOaepParams::new(
                cryptoki::mechanism::MechanismType::SHA1,
                cryptoki::mechanism::rsa::PkcsMgfType::MGF1_SHA1,
                cryptoki::mechanism::rsa::PkcsOaepSource::empty(),
            ));
        let wrapped = session.wrap_key(&oaep, untrusted, guarded);
        assert!(
            matches!(wrapped, Err(cryptoki::error::Error::Pkcs11(RvError::KeyNotWrappable, _))),
            "{wrapped:?}"
        );
        // ...while the same key without the flag wraps fine: the flag, chosen at unwrap time
        // by the caller, is what refuses.
        let open = session
            .generate_key(
                &cryptoki::mechanism::Mechanism::AesKeyGen,
                &[Attribute::Token(false), Attribute::ValueLen(32u64.into()), Attribute::Extractable(true)],
            )
            .unwrap();
        assert!(session.wrap_key(&oaep, untrusted, open).is_ok());
    });
}
