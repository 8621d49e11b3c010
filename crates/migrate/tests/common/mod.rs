//! What the SoftHSM2 tests share: each test runs in a child process of its test binary with
//! its own token, initialised by `scripts/softhsm-init.sh` in a temporary directory and
//! selected with `SOFTHSM2_CONF`. A PKCS#11 module is one instance per process, configured
//! once at `C_Initialize`, so tests sharing a process would share one token and one login
//! state. Without the module every test prints SKIP and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use cloister_migrate::{AuditLog, Hsm, HsmConfig, OaepHash, Pin, DEFAULT_MODULE_PATH};
use enclave_core::{EnclaveConfig, Limits, ProvisioningKey, TenantId};

/// Set in a child: the test it is to run.
const CHILD: &str = "CLOISTER_MIGRATE_TEST_CHILD";
/// Set in a child: its token directory.
const CHILD_DIR: &str = "CLOISTER_MIGRATE_TEST_DIR";
// Test PINs of scripts/softhsm-init.sh: documented there, protecting nothing.
pub(crate) const TOKEN: &str = "cloister-test";
pub(crate) const USER_PIN: &str = "cloister-user-test";
pub(crate) const SO_PIN: &str = "cloister-so-test";

/// The provisioning key and tenant of the test enclaves.
pub(crate) const PROV_KEY: [u8; 32] = [0x42; 32];
pub(crate) const TENANT: TenantId = TenantId(11);

/// The test cluster's two platforms: their keys (PKCS#8), one per host.
pub(crate) fn cluster_key(host: usize) -> Vec<u8> {
    static KEYS: std::sync::OnceLock<[Vec<u8>; 2]> = std::sync::OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let key = || enclave_core::attest::SoftwareAttestation::generate_platform_key().unwrap().to_vec();
        [key(), key()]
    });
    keys[host % 2].clone()
}

/// The public key of a platform key.
pub(crate) fn platform_public(platform_key: &[u8]) -> Vec<u8> {
    use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
    SoftwareAttestation::new(platform_key, CodeIdentity::Bytes(vec![]), b"")
        .unwrap()
        .platform_public_key()
        .to_vec()
}

/// The configuration of every test enclave: tenant [`TENANT`], default limits, moves
/// between the two platforms of the test cluster.
pub(crate) fn config() -> EnclaveConfig {
    EnclaveConfig {
        tenant: TENANT,
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: vec![platform_public(&cluster_key(0)), platform_public(&cluster_key(1))],
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

/// How the parent prepares the child's token directory.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Setup {
    Token,
    /// The configuration points at a token store that does not exist: the "HSM" is gone.
    StoreMissing,
}

/// A child's token directory.
pub(crate) struct Env {
    pub(crate) dir: PathBuf,
}

impl Env {
    pub(crate) fn config(&self) -> HsmConfig {
        HsmConfig {
            // SoftHSM2 2.6 implements RSA-OAEP with SHA-1 only (see sha256_oaep_works_or_fails_clearly).
            oaep_hash: OaepHash::Sha1,
            // 2048 keeps key generation quick on the 2-core test machines.
            rsa_bits: 2048,
            ..HsmConfig::new(TOKEN)
        }
    }

    pub(crate) fn audit_path(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }

    pub(crate) fn open(&self) -> Hsm {
        Hsm::open(self.config(), Pin::new(USER_PIN), AuditLog::open(self.audit_path()).unwrap()).unwrap()
    }
}

/// Runs `body` for the test `name` in a child process with a fresh token (or, in the child,
/// runs it).
pub(crate) fn with_setup(name: &str, setup: Setup, body: impl FnOnce(&Env)) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        body(&Env { dir: PathBuf::from(std::env::var(CHILD_DIR).unwrap()) });
        return;
    }
    if !Path::new(DEFAULT_MODULE_PATH).exists() {
        testnet::skip(&format!(
            "needs the PKCS#11 module {DEFAULT_MODULE_PATH} (Debian softhsm2; scripts/setup.sh)"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/softhsm-init.sh");
    let init = Command::new("bash").arg(&script).arg(dir.path()).output().unwrap();
    assert!(init.status.success(), "softhsm-init.sh failed: {}", String::from_utf8_lossy(&init.stderr));
    if setup == Setup::StoreMissing {
        std::fs::remove_dir_all(dir.path().join("tokens")).unwrap();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .env(CHILD_DIR, dir.path())
        .env("SOFTHSM2_CONF", dir.path().join("softhsm2.conf"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child for {name} failed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
}
