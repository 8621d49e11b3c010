//! The HSM agent process (`cloister-migrate-hsm-agent`, the same code as `cloister
//! hsm-agent`) against a real SoftHSM2 token: a whole migration through it, and the checks
//! it makes itself before it releases a data key, whatever the gateway asks.
//!
//! Each test runs in a child process of this binary with its own token (tests/common); the
//! agent inherits the child's `SOFTHSM2_CONF`. Without the module the tests print SKIP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cloister_migrate::flow::label_measurement;
use cloister_migrate::{verify, AgentSettings, HsmAgent, Measurement, MigrateError, OaepHash};
use common::{
    cluster_key, config, platform_public, with_setup, Env, Setup, PROV_KEY, TENANT, TOKEN, USER_PIN,
};
use enclave_core::attest::{
    identity_report_data, verify_software_evidence, CodeIdentity, EvidencePurpose, SoftwareAttestation,
};
use enclave_core::migration::OaepHash as EnclaveOaep;
use enclave_core::provision::wrap_secret;
use enclave_core::{Enclave, InlineEnclave, ProvisioningKey, SecretKind, TenantId};

const CODE: &[u8] = b"cloister migrate agent test enclave";
const PSK: &[u8] = b"agent test PSK, 32 bytes or so..";

/// An inline enclave running `code` on the platform of `platform_key`; its measurement.
fn inline_on(platform_key: &[u8], code: &[u8]) -> (Box<dyn Enclave>, Measurement) {
    let att = SoftwareAttestation::new(
        platform_key,
        CodeIdentity::Bytes(code.to_vec()),
        &config().measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    let public = att.platform_public_key().to_vec();
    let mut e: Box<dyn Enclave> = Box::new(InlineEnclave::start(config(), Box::new(att)).unwrap());
    let ev = e.identity_evidence(&[3; 32]).unwrap();
    let rd = identity_report_data(config().tenant, &[3; 32]);
    let m = verify_software_evidence(&ev.bytes, &public, EvidencePurpose::Identity, &rd).unwrap().measurement;
    (e, label_measurement(&m).unwrap())
}

fn pin_file(env: &Env, pin: &str, mode: u32) -> PathBuf {
    let path = env.dir.join("agent.pin");
    std::fs::write(&path, format!("{pin}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn settings(env: &Env, pin: &Path, platform_public_key: Vec<u8>) -> AgentSettings {
    AgentSettings {
        module: env.config().module,
        token_label: TOKEN.into(),
        pin_file: pin.to_path_buf(),
        oaep: OaepHash::Sha1,
        rsa_bits: 2048,
        audit: env.audit_path(),
        platform_key: platform_public_key,
    }
}

fn start(settings: &AgentSettings) -> cloister_migrate::Result<HsmAgent> {
    HsmAgent::start(Path::new(env!("CARGO_BIN_EXE_cloister-migrate-hsm-agent")), &[], settings)
}

fn refused(r: cloister_migrate::Result<impl core::fmt::Debug>, words: &str) {
    match r {
        Err(MigrateError::AgentRefused { message }) => assert!(message.contains(words), "{message}"),
        other => panic!("expected a refusal mentioning {words:?}, got {other:?}"),
    }
}

#[test]
fn a_migration_goes_through_the_agent_and_only_to_the_attested_destination() {
    with_setup(
        "a_migration_goes_through_the_agent_and_only_to_the_attested_destination",
        Setup::Token,
        |env| {
            let (src_platform, dst_platform) = (cluster_key(0), cluster_key(1));
            let (mut src, measurement) = inline_on(&src_platform, CODE);
            let (mut dst, dst_measurement) = inline_on(&dst_platform, CODE);
            assert_eq!(measurement, dst_measurement);
            let blob =
                wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TENANT, SecretKind::PreSharedKey, PSK)
                    .unwrap();
            src.provision_secret(&blob).unwrap();

            let pin = pin_file(env, USER_PIN, 0o600);
            let mut agent = start(&settings(env, &pin, platform_public(&dst_platform))).unwrap();
            let (label, spki) = agent.migration_key(&measurement).unwrap();
            let dkey = dst.migration_destination_key(2048).unwrap();
            let package =
                src.export_state(&dkey, Some(&spki), EnclaveOaep::Sha1, b"untrusted state").unwrap();
            let wrapped = package.hsm_share().unwrap().to_vec();

            // What a compromised gateway might ask for, each refused by the agent itself:
            // an enclave of other code on this platform...
            let (mut other, _) = inline_on(&dst_platform, b"other code");
            let other_key = other.migration_destination_key(2048).unwrap();
            refused(agent.rewrap(&label, &wrapped, &other_key, TENANT), "measurement");
            // ...the right code on a platform the agent does not serve...
            let (mut elsewhere, _) = inline_on(&src_platform, CODE);
            let elsewhere_key = elsewhere.migration_destination_key(2048).unwrap();
            refused(agent.rewrap(&label, &wrapped, &elsewhere_key, TENANT), "signature does not verify");
            // ...the right enclave's evidence for another tenant, or bound to another key.
            refused(agent.rewrap(&label, &wrapped, &dkey, TenantId(12)), "report data does not match");
            let mut swapped = dkey.clone();
            swapped.spki_der = other_key.spki_der.clone();
            refused(agent.rewrap(&label, &wrapped, &swapped, TENANT), "report data does not match");

            // The attested destination gets the data key, and the state.
            let rewrapped = agent.rewrap(&label, &wrapped, &dkey, TENANT).unwrap();
            let restored = dst.import_state(&package, Some(&rewrapped)).unwrap();
            assert_eq!(restored.untrusted_state, b"untrusted state");
            assert_eq!(dst.secret_kind(restored.secrets[0].1), Ok(SecretKind::PreSharedKey));

            // Confirmed: the one-time key goes, and with it every copy of the package.
            agent.delete_key(&label).unwrap();
            refused(agent.rewrap(&label, &wrapped, &dkey, TENANT), "no HSM key");
            let pid = agent.pid();
            drop(agent);
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the agent ends with its input");
            let head = verify(env.audit_path()).unwrap();
            assert!(head.entries >= 4, "open, create, rewraps, delete are audited: {head:?}");
        },
    );
}

#[test]
fn the_agent_refuses_to_start_without_a_good_pin_file() {
    with_setup("the_agent_refuses_to_start_without_a_good_pin_file", Setup::Token, |env| {
        let platform = platform_public(&SoftwareAttestation::generate_platform_key().unwrap());
        let loose = pin_file(env, USER_PIN, 0o644);
        refused(start(&settings(env, &loose, platform.clone())), "chmod 600");
        let wrong = pin_file(env, "not-the-pin", 0o600);
        refused(start(&settings(env, &wrong, platform.clone())), "PIN");
        refused(start(&settings(env, &env.dir.join("none"), platform)), "PIN file");
        let text = std::fs::read_to_string(env.audit_path()).unwrap();
        assert!(!text.contains("not-the-pin"), "no PIN in the audit log");
    });
}
