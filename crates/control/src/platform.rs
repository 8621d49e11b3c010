//! The software platform: what a TEE's hardware would provide to each tenant's enclave —
//! an attestation key that signs evidence, and a root from which each tenant's enclave
//! derives its sealing key. Both live in files on this host (mode 0600, made on first
//! start). Honest limits (docs/threat-model.md): whoever can read these files (root) can
//! forge evidence and unseal blobs; the process backend keeps keys from a compromised
//! *gateway process* that runs without them, and hardware backends replace this module.
//!
//! Each tenant's enclave gets its own root, HMAC-SHA-256(platform root, label || tenant),
//! so one tenant's enclave, compromised, learns nothing that opens another's sealed blobs.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use attest::evidence::{CodeIdentity, SoftwareAttestation};
use enclave::ledger::FileLedger;
use enclave::{EnclaveConfig, Limits, ProvisioningKey, TenantId};
use enclave_host::SharedLedger;
use zeroize::Zeroizing;

use crate::error::{Error, Result};

const ROOT_LABEL: &[u8] = b"cloister-tenant-root-v1";

/// The platform's secrets, loaded once.
pub struct Platform {
    attestation_key: Zeroizing<Vec<u8>>,
    root: Zeroizing<[u8; 32]>,
    public_key: Vec<u8>,
    /// The platforms whose enclaves this host's enclaves move state to and from.
    trusted: Vec<Vec<u8>>,
    /// The HSM backup roots whose certified keys this host's enclaves back up to.
    backup_roots: Vec<Vec<u8>>,
    /// Where each tenant's ledger file lies, and the ledgers opened so far (one per
    /// tenant, shared by its enclaves one after another).
    ledger_dir: std::path::PathBuf,
    ledgers: std::sync::Mutex<std::collections::HashMap<u32, SharedLedger>>,
}

impl core::fmt::Debug for Platform {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Platform").field("public_key", &hex(&self.public_key)).finish_non_exhaustive()
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::Io { what, why: e.to_string() }
}

/// Reads a private file, refusing one that others can read.
pub(crate) fn read_private(path: &Path) -> Result<Option<Zeroizing<Vec<u8>>>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("reading {}", path.display()))(e)),
        Ok(m) if m.permissions().mode() & 0o077 != 0 => Err(Error::Io {
            what: format!("{}", path.display()),
            why: "readable by others: chmod 600 it".into(),
        }),
        Ok(_) => {
            Ok(Some(Zeroizing::new(std::fs::read(path).map_err(io(format!("reading {}", path.display())))?)))
        }
    }
}

/// Writes a new private file (never over an existing one).
pub(crate) fn create_private(path: &Path, bytes: &[u8]) -> Result<()> {
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

/// Bytes from hex (surrounding whitespace ignored); `None` if it is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect()
}

/// Reads a bearer token's file, making a random token (0600) on first use.
pub fn load_or_create_token(path: &Path) -> Result<Zeroizing<String>> {
    if let Some(bytes) = read_private(path)? {
        let t = Zeroizing::new(String::from_utf8_lossy(&bytes).trim().to_owned());
        if t.len() < 16 {
            return Err(Error::Io {
                what: format!("{}", path.display()),
                why: "a token of at least 16 characters".into(),
            });
        }
        return Ok(t);
    }
    let mut r = Zeroizing::new([0u8; 24]);
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), r.as_mut())
        .map_err(|_| Error::Internal { what: "no randomness".into() })?;
    let t = Zeroizing::new(hex(r.as_ref()));
    create_private(path, format!("{}\n", t.as_str()).as_bytes())?;
    Ok(t)
}

impl Platform {
    /// Loads the attestation key and the sealing root, making each on first use.
    pub fn load_or_create(attestation_key: &Path, sealing_root: &Path) -> Result<Self> {
        let key = match read_private(attestation_key)? {
            Some(k) => k,
            None => {
                let k = SoftwareAttestation::generate_platform_key()
                    .map_err(|e| Error::Internal { what: e.to_string() })?;
                create_private(attestation_key, &k)?;
                k
            }
        };
        let root = match read_private(sealing_root)? {
            Some(text) => parse_root(&text).ok_or_else(|| Error::Io {
                what: format!("{}", sealing_root.display()),
                why: "not 64 hex digits".into(),
            })?,
            None => {
                let mut r = Zeroizing::new([0u8; 32]);
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), r.as_mut())
                    .map_err(|_| Error::Internal { what: "no randomness".into() })?;
                let text = Zeroizing::new(format!("{}\n", hex(r.as_ref())));
                create_private(sealing_root, text.as_bytes())?;
                r
            }
        };
        let probe = SoftwareAttestation::new(&key, CodeIdentity::Bytes(Vec::new()), &[])
            .map_err(|e| Error::Io { what: format!("{}", attestation_key.display()), why: e.to_string() })?;
        let public_key = probe.platform_public_key().to_vec();
        let ledger_dir = sealing_root.parent().unwrap_or(Path::new(".")).join("ledger");
        Ok(Self {
            attestation_key: key,
            root,
            public_key,
            trusted: Vec::new(),
            backup_roots: Vec::new(),
            ledger_dir,
            ledgers: Default::default(),
        })
    }

    /// Makes this host's enclaves trust `peers` (platform public keys) and this platform
    /// itself for moves and backups ([`EnclaveConfig::trusted_platforms`], measured): the
    /// service calls it for a `[migrate]` section, so a host of its own restores its own
    /// backups. A service without `[migrate]` never calls it: its enclaves trust none.
    pub fn trust(&mut self, peers: impl IntoIterator<Item = Vec<u8>>) {
        self.trusted = trusted_set(peers, &self.public_key);
    }

    /// The platforms this host's enclaves trust for moves.
    pub fn trusted(&self) -> &[Vec<u8>] {
        &self.trusted
    }

    /// Makes this host's enclaves back up to keys `root` certified (`[migrate.hsm]
    /// backup_root`; [`EnclaveConfig::backup_roots`], measured).
    pub fn trust_backup_root(&mut self, root: Vec<u8>) {
        self.backup_roots = vec![root];
    }

    /// The backup roots this host's enclaves trust.
    pub fn backup_roots(&self) -> &[Vec<u8>] {
        &self.backup_roots
    }

    /// The attestation key (PKCS#8), for starting enclaves.
    pub fn attestation_key(&self) -> &[u8] {
        &self.attestation_key
    }

    /// The public key that verifies this platform's evidence (uncompressed SEC1).
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// `tenant`'s ledger on this platform (`ledger/<tenant>` beside the sealing root): its
    /// seal counters, live sealed secrets and static keys installed, across enclave and
    /// service restarts.
    pub fn ledger(&self, tenant: u32) -> Result<SharedLedger> {
        let mut all = self.ledgers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = all.get(&tenant) {
            return Ok(l.clone());
        }
        let path = self.ledger_dir.join(tenant.to_string());
        let l = FileLedger::open(&path).map_err(io(format!("opening the ledger {}", path.display())))?;
        let l: SharedLedger = std::sync::Arc::new(std::sync::Mutex::new(l));
        all.insert(tenant, l.clone());
        Ok(l)
    }

    /// The enclave configuration of `tenant`, with its own root, taking only secrets
    /// `signers` signed where there are any.
    pub fn enclave_config(&self, tenant: u32, signers: &[Vec<u8>]) -> EnclaveConfig {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, self.root.as_ref());
        let mut ctx = ring::hmac::Context::with_key(&key);
        ctx.update(ROOT_LABEL);
        ctx.update(&tenant.to_be_bytes());
        let tag = ctx.sign();
        let mut bytes = Zeroizing::new([0u8; 32]);
        bytes.copy_from_slice(tag.as_ref());
        EnclaveConfig {
            tenant: TenantId(tenant),
            provisioning_key: ProvisioningKey::from_bytes(*bytes),
            trusted_platforms: self.trusted.clone(),
            backup_roots: self.backup_roots.clone(),
            tenant_signers: signers.to_vec(),
            limits: Limits::default(),
        }
    }
}

/// `peers` and `own`, sorted, without repeats.
pub fn trusted_set(peers: impl IntoIterator<Item = Vec<u8>>, own: &[u8]) -> Vec<Vec<u8>> {
    let mut set: Vec<Vec<u8>> = peers.into_iter().collect();
    set.push(own.to_vec());
    set.sort_unstable();
    set.dedup();
    set
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

/// The measurement a tenant should expect of its enclave: this binary's code and the
/// public enclave configuration of `tenant` run by `backend` on a host that trusts
/// `trusted` for moves and `backup_roots` for backups, taking only secrets `signers`
/// signed where there are any (what `cloister measure` prints).
pub fn expected_measurement(
    tenant: u32,
    code: &[u8],
    backend: enclave::Backend,
    trusted: &[Vec<u8>],
    backup_roots: &[Vec<u8>],
    signers: &[Vec<u8>],
) -> attest::evidence::Measurement {
    let cfg = EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes([0; 32]),
        trusted_platforms: trusted.to_vec(),
        tenant_signers: signers.to_vec(),
        backup_roots: backup_roots.to_vec(),
        limits: Limits::default(),
    };
    attest::evidence::software_measurement(code, &cfg.measured_bytes(backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_made_once_private_and_tenant_roots_differ() {
        let dir = std::env::temp_dir().join(format!("cl-platform-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (k, r) = (dir.join("platform.key"), dir.join("sealing.key"));
        let a = Platform::load_or_create(&k, &r).unwrap();
        let b = Platform::load_or_create(&k, &r).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        for f in [&k, &r] {
            assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(
            a.enclave_config(1, &[]).measured_bytes(enclave::Backend::Process),
            b.enclave_config(1, &[]).measured_bytes(enclave::Backend::Process)
        );
        // Roots are not observable (ProvisioningKey has no accessor); sealing across
        // tenants is refused in the enclave's own tests. Here: a loose file is refused.
        std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            matches!(Platform::load_or_create(&k, &r), Err(Error::Io { why, .. }) if why.contains("chmod"))
        );
        assert!(!format!("{a:?}").contains(&hex(a.attestation_key())));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_trusted_set_is_the_peers_and_this_host_in_one_order() {
        let (a, b, own) = (vec![4u8; 65], vec![5u8; 65], vec![6u8; 65]);
        assert_eq!(trusted_set([], &own), vec![own.clone()], "a host of its own restores its backups");
        let set = trusted_set([b.clone(), a.clone(), own.clone()], &own);
        assert_eq!(set, [a.clone(), b.clone(), own.clone()]);
        // Every host of a cluster lists the others: each gets the same set, so one measurement.
        assert_eq!(trusted_set([own.clone(), a.clone()], &b), set);
    }

    #[test]
    fn roots_parse_only_as_64_hex_digits() {
        assert!(parse_root(b"ab").is_none());
        assert!(parse_root("zz".repeat(32).as_bytes()).is_none());
        assert_eq!(*parse_root(format!("{}\n", "01".repeat(32)).as_bytes()).unwrap(), [1u8; 32]);
    }
}
