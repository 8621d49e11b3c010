//! The platform as the service sees it: the key that verifies its evidence, the platforms
//! and backup roots this host's enclaves trust (measured into their configuration), and how
//! an enclave gets the secrets it starts with. With the process backend those stay in the
//! platform process (`cloister-platform`), which starts every enclave process; the service
//! only names the public configuration. With the inline backend the enclave runs in the
//! service, so the service holds them too (a reference configuration for a service that
//! itself runs in a TEE, docs/threat-model.md).

use std::path::Path;

use enclave::{EnclaveConfig, Limits, PublicConfig, TenantId};
use enclave_host::SharedLedger;
use platform::{PlatformClient, Secrets};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

pub use platform::files::hex;

/// The platform of this host, as the service uses it.
pub struct Platform {
    public_key: Vec<u8>,
    /// The platforms whose enclaves this host's enclaves move state to and from.
    trusted: Vec<Vec<u8>>,
    /// The HSM backup roots whose certified keys this host's enclaves back up to.
    backup_roots: Vec<Vec<u8>>,
    source: Source,
}

/// Who holds the platform's secrets.
pub enum Source {
    /// The platform process: enclave processes start there.
    Process(PlatformClient),
    /// This process (the inline backend, and the command-line tools).
    Local(Secrets),
}

impl core::fmt::Debug for Platform {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Platform").field("public_key", &hex(&self.public_key)).finish_non_exhaustive()
    }
}

fn file(e: platform::FileError) -> Error {
    Error::Io { what: e.what, why: e.why }
}

/// Reads a private file, refusing one that others can read.
pub(crate) fn read_private(path: &Path) -> Result<Option<Zeroizing<Vec<u8>>>> {
    platform::files::read_private(path).map_err(file)
}

/// Writes a new private file (never over an existing one).
pub(crate) fn create_private(path: &Path, bytes: &[u8]) -> Result<()> {
    platform::files::create_private(path, bytes).map_err(file)
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
    /// Loads the attestation key and the sealing root into this process, making each on
    /// first use.
    pub fn load_or_create(attestation_key: &Path, sealing_root: &Path) -> Result<Self> {
        let secrets = Secrets::load_or_create(attestation_key, sealing_root).map_err(file)?;
        Ok(Self::new(secrets.public_key().to_vec(), Source::Local(secrets)))
    }

    /// The platform behind `client`, whose process holds the secrets.
    pub fn process(client: PlatformClient) -> Self {
        Self::new(client.public_key().to_vec(), Source::Process(client))
    }

    fn new(public_key: Vec<u8>, source: Source) -> Self {
        Self { public_key, trusted: Vec::new(), backup_roots: Vec::new(), source }
    }

    /// Who holds the secrets.
    pub fn source(&self) -> &Source {
        &self.source
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

    /// The public key that verifies this platform's evidence (uncompressed SEC1).
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// The public configuration of `tenant`'s enclave, taking only secrets `signers`
    /// signed where there are any.
    pub fn public_config(&self, tenant: u32, signers: &[Vec<u8>]) -> PublicConfig {
        PublicConfig {
            tenant: TenantId(tenant),
            trusted_platforms: self.trusted.clone(),
            backup_roots: self.backup_roots.clone(),
            tenant_signers: signers.to_vec(),
            limits: Limits::default(),
        }
    }

    /// What an enclave of `tenant` started in this process needs: its configuration with
    /// its own root, the attestation key (PKCS#8) and the tenant's ledger. `None` when the
    /// platform process holds them.
    pub fn local_start(
        &self,
        tenant: u32,
        signers: &[Vec<u8>],
    ) -> Result<Option<(EnclaveConfig, &[u8], SharedLedger)>> {
        let Source::Local(secrets) = &self.source else {
            return Ok(None);
        };
        let key = secrets
            .tenant_key(tenant)
            .ok_or_else(|| Error::Internal { what: format!("the platform serves no tenant {tenant}") })?;
        let cfg = EnclaveConfig::from_public(self.public_config(tenant, signers), key);
        Ok(Some((cfg, secrets.attestation_key(), secrets.ledger(tenant).map_err(file)?)))
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
    let cfg = PublicConfig {
        tenant: TenantId(tenant),
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
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_local_platform_gives_each_tenant_its_own_configuration() {
        let dir = std::env::temp_dir().join(format!("cl-platform-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (k, r) = (dir.join("platform.key"), dir.join("sealing.key"));
        let a = Platform::load_or_create(&k, &r).unwrap();
        let (ca, _, _) = a.local_start(1, &[]).unwrap().unwrap();
        assert_eq!(ca.public(), a.public_config(1, &[]));
        let public_key = a.public_key().to_vec();
        // One platform holds a tenant's ledger at a time.
        drop(a);
        let b = Platform::load_or_create(&k, &r).unwrap();
        assert_eq!(b.public_key(), public_key);
        let (cb, _, _) = b.local_start(1, &[]).unwrap().unwrap();
        assert_eq!(
            ca.measured_bytes(enclave::Backend::Process),
            cb.measured_bytes(enclave::Backend::Process)
        );
        std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            matches!(Platform::load_or_create(&k, &r), Err(Error::Io { why, .. }) if why.contains("chmod"))
        );
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
}
