//! The platform process as `cloister serve` uses it: started from this binary, it holds
//! the attestation key, the sealing root and the ledger, and starts enclave processes for
//! a caller (this test, in the service's place) that holds none of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use enclave::provision::seal_to_offer;
use enclave::provision::why;
use enclave::{Backend, BlobRejection, Enclave, Error, Limits, PublicConfig, SecretKind, TenantId};
use enclave_host::{ExitReport, ProcessEnclave, ProcessError, ProcessSpec};
use platform::PlatformClient;

#[allow(dead_code)] // the privilege helpers only
mod common;

use common::{assert_denied_as, uid_of};

const BIN: &str = env!("CARGO_BIN_EXE_cloister");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `cloister platform-process` on the files in `dir`, with `extra` arguments.
fn platform_args(dir: &Path, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> =
        vec!["platform-process".into(), "--attestation-key".into(), dir.join("platform.key").into()];
    args.extend(platform::Roots::Sealing { sealing_root: dir.join("sealing.key") }.args());
    args.extend(extra.iter().map(OsString::from));
    args
}

fn start_platform(dir: &Path) -> PlatformClient {
    PlatformClient::start(Path::new(BIN), &platform_args(dir, &[]), Duration::from_secs(20)).unwrap()
}

fn public(tenant: u32) -> PublicConfig {
    PublicConfig {
        tenant: TenantId(tenant),
        limits: Limits::default(),
        trusted_platforms: vec![],
        backup_roots: vec![],
        tenant_signers: vec![],
    }
}

fn launch(client: &PlatformClient, tenant: u32) -> ProcessEnclave {
    // The program in the spec is not used: the platform runs its own binary.
    let spec = ProcessSpec::new("/nonexistent", Vec::<OsString>::new());
    ProcessEnclave::launch(spec, Arc::new(client.clone()), public(tenant)).unwrap()
}

fn parent_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("PPid:")).unwrap();
    line[5..].trim().parse().unwrap()
}

/// What a tenant sends its enclave: a PSK sealed to the enclave's offer, checked against
/// the platform key the platform process announced and the measurement `cloister measure`
/// prints for this binary.
fn provision(e: &mut ProcessEnclave, client: &PlatformClient, secret: &[u8]) -> Vec<u8> {
    let code = std::fs::read(BIN).unwrap();
    let expected = control::platform::expected_measurement(1, &code, Backend::Process, &[], &[], &[]);
    let offer = e.provisioning_offer().unwrap();
    seal_to_offer(
        &offer,
        client.public_key(),
        &expected,
        TenantId(1),
        SecretKind::PreSharedKey,
        secret,
        1_700_000_000,
        None,
    )
    .unwrap()
}

#[test]
fn the_platform_process_starts_enclaves_whose_sealed_state_outlives_it() {
    let d = dir("platform-process");
    let client = start_platform(&d);
    let mut e = launch(&client, 1);
    let pid = e.pid().unwrap();
    assert_eq!(parent_of(pid), client.pid(), "the platform, not the caller, is the enclave's parent");
    assert!(e.hardening().complete(), "{:?}", e.hardening());

    // The enclave's evidence verifies under the key the platform announced: the caller
    // learns it from the platform without ever reading the key file.
    let envelope = provision(&mut e, &client, b"a PSK for the platform test: 5a1f");
    let (_, sealed) = e.provision_attested(&envelope).unwrap();
    assert_eq!(e.provision_attested(&envelope), Err(Error::Provisioning { why: why::USED }));

    // A restart goes through the platform again; the new instance opens the blob.
    e.restart().unwrap();
    assert_ne!(e.pid(), Some(pid));
    e.unseal_secret(&sealed).unwrap();

    // A death is seen through the pidfd the platform lent, and the platform says how.
    let pid = e.pid().unwrap();
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let mut seen = None;
    for _ in 0..200 {
        if let Err(err) = e.check() {
            seen = Some(err);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(seen, Some(ProcessError::Died { pid, exit: ExitReport::Signaled(9) }));
    e.restart().unwrap();

    // Sealing the secret again retires the older blob in the platform's ledger.
    let h = e.unseal_secret(&sealed).unwrap();
    let newer = e.seal_secret(h).unwrap();
    drop(e);
    drop(client);

    // A new platform process on the same files: same key, same roots, same ledger.
    let client = start_platform(&d);
    let mut e = launch(&client, 1);
    assert!(e.unseal_secret(&newer).is_ok(), "the live blob opens after the platform restarts");
    assert_eq!(e.unseal_secret(&sealed), Err(Error::SealedBlob { reason: BlobRejection::Rollback }));
    // Another tenant's enclave, from the same platform, cannot open the tenant's blob.
    let mut other = launch(&client, 2);
    assert_eq!(other.unseal_secret(&newer), Err(Error::SealedBlob { reason: BlobRejection::Forged }));
    drop((e, other, client));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_platform_that_cannot_load_its_files_says_why() {
    let d = dir("platform-refuses");
    std::fs::write(d.join("sealing.key"), "not a root\n").unwrap();
    std::fs::set_permissions(d.join("sealing.key"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let err =
        PlatformClient::start(Path::new(BIN), &platform_args(&d, &[]), Duration::from_secs(20)).unwrap_err();
    assert!(err.to_string().contains("not 64 hex digits"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The privilege test: as root, the platform starts each tenant's enclave process as a user
/// of its own. Another tenant's enclave user may then neither read that process's memory
/// nor the platform's, nor its key files, nor its ledger; the enclaves work as before.
#[test]
fn each_tenants_enclave_runs_as_its_own_user_and_no_other_may_read_it() {
    if !platform::started_as_root() {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "the privilege test needs root in CI");
        testnet::skip("its privilege test needs root");
        return;
    }
    const BASE: u32 = 2_000_100_000;
    let d = dir("platform-users");
    let args = platform_args(&d, &["--enclave-uid-base", &BASE.to_string()]);
    let client = PlatformClient::start(Path::new(BIN), &args, Duration::from_secs(20)).unwrap();
    let mut a = launch(&client, 1);
    let mut b = launch(&client, 2);
    let (pa, pb) = (a.pid().unwrap(), b.pid().unwrap());
    assert_eq!((uid_of(pa), uid_of(pb)), (BASE + 1, BASE + 2), "one user per tenant");
    assert_eq!(uid_of(client.pid()), 0, "the platform keeps root to start them");
    assert!(a.hardening().complete() && b.hardening().complete(), "{:?} {:?}", a.hardening(), b.hardening());
    a.provisioning_offer().unwrap();
    b.provisioning_offer().unwrap();

    // As tenant 2's enclave user (what a compromised enclave of tenant 2 would be).
    let other = BASE + 2;
    let mem = format!("/proc/{pa}/mem");
    let platform_mem = format!("/proc/{}/mem", client.pid());
    let ledger = d.join("ledger").join("1");
    let files = [d.join("sealing.key"), d.join("platform.key"), ledger.clone()];
    let mut targets = vec![mem, platform_mem];
    targets.extend(files.iter().map(|f| f.display().to_string()));
    for target in &targets {
        assert_denied_as(other, target);
    }
    // Positive control: the same probe as root reads the ledger (the file exists and opens).
    assert!(std::fs::read(&ledger).is_ok());
    drop((a, b, client));
    std::fs::remove_dir_all(&d).unwrap();
}
