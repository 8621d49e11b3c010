//! The platform's secrets on disk: the attestation key that signs evidence, the root from
//! which each tenant's enclave derives its sealing key, and each tenant's ledger. All are
//! files of this host (mode 0600, made on first start). Whoever can read them (root, or the
//! platform's own user) can forge evidence and unseal blobs: hardware backends replace this
//! module, and only the platform process opens these files.
//!
//! Each tenant's enclave gets its own root, HMAC-SHA-256(platform root, label || tenant),
//! so one tenant's enclave, compromised, learns nothing that opens another's sealed blobs.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use attest::evidence::{CodeIdentity, SoftwareAttestation};
use enclave_api::ledger::FileLedger;
use enclave_api::report::ProvisioningKey;
use enclave_host::SharedLedger;
use zeroize::Zeroizing;

const ROOT_LABEL: &[u8] = b"cloister-tenant-root-v1";

/// Why a platform file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {why}")]
pub struct FileError {
    /// The file or step.
    pub what: String,
    /// What went wrong.
    pub why: String,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> FileError {
    move |e| FileError { what, why: e.to_string() }
}

/// Reads a private file, refusing one that others can read.
pub fn read_private(path: &Path) -> Result<Option<Zeroizing<Vec<u8>>>, FileError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("reading {}", path.display()))(e)),
        Ok(m) if m.permissions().mode() & 0o077 != 0 => Err(FileError {
            what: format!("{}", path.display()),
            why: "readable by others: chmod 600 it".into(),
        }),
        Ok(_) => {
            Ok(Some(Zeroizing::new(std::fs::read(path).map_err(io(format!("reading {}", path.display())))?)))
        }
    }
}

/// Writes a new private file (never over an existing one).
pub fn create_private(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("creating {}", path.display())))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io(format!("writing {}", path.display())))
}

/// Lower-case hex of public bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the tenants' roots come from.
#[derive(Debug, Clone)]
pub enum Roots {
    /// Each tenant's root is derived from one sealing root (made on first use); the
    /// ledgers lie in `ledger/` beside it. `cloister serve`.
    Sealing {
        /// The sealing root's file.
        sealing_root: PathBuf,
    },
    /// One tenant's own root, read from its file (`cloister gateway`'s
    /// `provisioning_key`); no other tenant's enclave starts.
    Tenant {
        /// The tenant.
        tenant: u32,
        /// Its root's file (64 hex digits, mode 0600).
        key: PathBuf,
        /// Where its ledger lies.
        ledger_dir: PathBuf,
    },
}

impl Roots {
    /// The platform process's arguments that name these roots (`cloister platform-process`).
    pub fn args(&self) -> Vec<std::ffi::OsString> {
        match self {
            Self::Sealing { sealing_root } => vec!["--sealing-root".into(), sealing_root.into()],
            Self::Tenant { tenant, key, ledger_dir } => vec![
                "--tenant".into(),
                tenant.to_string().into(),
                "--provisioning-key".into(),
                key.into(),
                "--ledger-dir".into(),
                ledger_dir.into(),
            ],
        }
    }
}

enum Root {
    Sealing(Zeroizing<[u8; 32]>),
    Tenant(u32, Zeroizing<[u8; 32]>),
}

/// The platform's secrets, loaded once.
pub struct Secrets {
    attestation_key: Zeroizing<Vec<u8>>,
    root: Root,
    public_key: Vec<u8>,
    /// Where each tenant's ledger file lies, and the ledgers opened so far (one per
    /// tenant, shared by its enclaves one after another).
    ledger_dir: PathBuf,
    ledgers: Mutex<HashMap<u32, SharedLedger>>,
}

impl core::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Secrets").field("public_key", &hex(&self.public_key)).finish_non_exhaustive()
    }
}

impl Secrets {
    /// Loads the attestation key and the sealing root, making each on first use; the
    /// ledgers lie in `ledger/` beside the sealing root.
    pub fn load_or_create(attestation_key: &Path, sealing_root: &Path) -> Result<Self, FileError> {
        Self::load(Some(attestation_key), &Roots::Sealing { sealing_root: sealing_root.to_path_buf() })
    }

    /// Loads `roots` and the attestation key at `attestation_key`, making each file on
    /// first use; without a file, a fresh attestation key for this process's life.
    pub fn load(attestation_key: Option<&Path>, roots: &Roots) -> Result<Self, FileError> {
        let key = match attestation_key.map(read_private).transpose()?.flatten() {
            Some(k) => k,
            None => {
                let k = SoftwareAttestation::generate_platform_key()
                    .map_err(|e| FileError { what: "the attestation key".into(), why: e.to_string() })?;
                if let Some(path) = attestation_key {
                    create_private(path, &k)?;
                }
                k
            }
        };
        let (root, ledger_dir) = match roots {
            Roots::Sealing { sealing_root } => {
                let root = match read_private(sealing_root)? {
                    Some(text) => parse_root(&text).ok_or_else(|| FileError {
                        what: format!("{}", sealing_root.display()),
                        why: "not 64 hex digits".into(),
                    })?,
                    None => {
                        let mut r = Zeroizing::new([0u8; 32]);
                        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), r.as_mut())
                            .map_err(|_| FileError {
                                what: "the sealing root".into(),
                                why: "no randomness".into(),
                            })?;
                        let text = Zeroizing::new(format!("{}\n", hex(r.as_ref())));
                        create_private(sealing_root, text.as_bytes())?;
                        r
                    }
                };
                (Root::Sealing(root), sealing_root.parent().unwrap_or(Path::new(".")).join("ledger"))
            }
            Roots::Tenant { tenant, key, ledger_dir } => {
                let text = read_private(key)?.ok_or_else(|| FileError {
                    what: format!("{}", key.display()),
                    why: "no such file".into(),
                })?;
                let root = parse_root(&text).ok_or_else(|| FileError {
                    what: format!("{}", key.display()),
                    why: "not 64 hex digits".into(),
                })?;
                (Root::Tenant(*tenant, root), ledger_dir.clone())
            }
        };
        let probe =
            SoftwareAttestation::new(&key, CodeIdentity::Bytes(Vec::new()), &[]).map_err(|e| FileError {
                what: attestation_key
                    .map_or_else(|| "the attestation key".into(), |p| p.display().to_string()),
                why: e.to_string(),
            })?;
        let public_key = probe.platform_public_key().to_vec();
        Ok(Self { attestation_key: key, root, public_key, ledger_dir, ledgers: Mutex::default() })
    }

    /// The attestation key (PKCS#8), for starting enclaves.
    pub fn attestation_key(&self) -> &[u8] {
        &self.attestation_key
    }

    /// The public key that verifies this platform's evidence (uncompressed SEC1).
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// `tenant`'s own root; `None` where this platform serves another tenant only.
    pub fn tenant_key(&self, tenant: u32) -> Option<ProvisioningKey> {
        match &self.root {
            Root::Tenant(only, key) => (*only == tenant).then(|| ProvisioningKey::from_bytes(**key)),
            Root::Sealing(root) => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, root.as_ref());
                let mut ctx = ring::hmac::Context::with_key(&key);
                ctx.update(ROOT_LABEL);
                ctx.update(&tenant.to_be_bytes());
                let tag = ctx.sign();
                let mut bytes = Zeroizing::new([0u8; 32]);
                bytes.copy_from_slice(tag.as_ref());
                Some(ProvisioningKey::from_bytes(*bytes))
            }
        }
    }

    /// `tenant`'s ledger on this platform (`<tenant>` in the ledger directory): its
    /// seal counters, live sealed secrets and static keys installed, across enclave and
    /// service restarts.
    pub fn ledger(&self, tenant: u32) -> Result<SharedLedger, FileError> {
        let mut all = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = all.get(&tenant) {
            return Ok(l.clone());
        }
        let path = self.ledger_dir.join(tenant.to_string());
        let l = FileLedger::open(&path).map_err(io(format!("opening the ledger {}", path.display())))?;
        let l: SharedLedger = Arc::new(Mutex::new(l));
        all.insert(tenant, l.clone());
        Ok(l)
    }
}

fn parse_root(text: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
    let s = core::str::from_utf8(text).ok()?.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = Zeroizing::new([0u8; 32]);
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_made_once_private_and_tenant_roots_differ() {
        let dir = std::env::temp_dir().join(format!("cl-platform-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (k, r) = (dir.join("platform.key"), dir.join("sealing.key"));
        let a = Secrets::load_or_create(&k, &r).unwrap();
        let b = Secrets::load_or_create(&k, &r).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        for f in [&k, &r] {
            assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let key = |s: &Secrets, t| *s.tenant_key(t).unwrap().expose();
        assert_eq!(key(&a, 1), key(&b, 1), "one root per tenant, every start");
        assert_ne!(key(&a, 1), key(&a, 2), "tenants' roots differ");
        std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Secrets::load_or_create(&k, &r).unwrap_err().why.contains("chmod"));
        assert!(!format!("{a:?}").contains(&hex(a.attestation_key())));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tenant_root_serves_its_tenant_only_with_a_fresh_attestation_key_each_start() {
        let dir = std::env::temp_dir().join(format!("cl-platform-tenant-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = dir.join("provisioning.key");
        let roots = Roots::Tenant { tenant: 3, key: key.clone(), ledger_dir: dir.join("ledger") };
        assert!(Secrets::load(None, &roots).unwrap_err().why.contains("no such file"), "never made");
        create_private(&key, format!("{}\n", "07".repeat(32)).as_bytes()).unwrap();
        let a = Secrets::load(None, &roots).unwrap();
        let b = Secrets::load(None, &roots).unwrap();
        assert_eq!(*a.tenant_key(3).unwrap().expose(), [7u8; 32], "the tenant's own root, not derived");
        assert!(a.tenant_key(4).is_none(), "no other tenant's");
        assert_ne!(a.public_key(), b.public_key(), "no attestation key file: a fresh key each start");
        assert!(!dir.join("platform.key").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn roots_parse_only_as_64_hex_digits() {
        assert!(parse_root(b"ab").is_none());
        assert!(parse_root("zz".repeat(32).as_bytes()).is_none());
        assert_eq!(*parse_root(format!("{}\n", "01".repeat(32)).as_bytes()).unwrap(), [1u8; 32]);
    }
}
