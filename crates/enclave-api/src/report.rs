//! Configuration, accounting and counters: what the untrusted side may know about the
//! enclave's state (sizes and counts, never contents).

use crate::error::ErrorKind;
use crate::esp::EspStatus;
use crate::handle::TenantId;
use zeroize::Zeroizing;

/// The root secret an enclave instance starts with. It unwraps provisioning blobs
/// ([`crate::provision`]) and derives the sealing key. Today whoever starts the enclave
/// passes it in; attested provisioning will deliver it over an attested channel instead.
pub struct ProvisioningKey(Zeroizing<[u8; 32]>);

impl ProvisioningKey {
    /// Wraps 32 key bytes (AES-256-GCM).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// Draws a fresh key from the kernel's CSPRNG (`/dev/urandom`, which never blocks once
    /// the pool is initialised).
    pub fn generate() -> crate::Result<Self> {
        use std::io::Read as _;
        let mut k = Zeroizing::new([0u8; 32]);
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut k[..]))
            .map_err(|_| crate::Error::Random)?;
        Ok(Self(k))
    }

    /// The key bytes, for the trusted core that derives its roots from them (and for the
    /// tenant's wrapping tool, which holds the same key).
    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }
}

impl core::fmt::Debug for ProvisioningKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ProvisioningKey(..)")
    }
}

/// What the inbound ESP SAs of an instance may be used for. Every inbound SA is bound to
/// the mode when it is created, and a batch may use it for that operation only, so a gateway
/// cannot ask for the plaintext of traffic the measured configuration says is forwarded
/// inside the enclave (where DECRYPT, which hands plaintext out, would defeat In-Enclave
/// Forwarding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InboundMode {
    /// [`crate::EspOpcode::DECRYPT`] only: the gateway gets the inner packets.
    #[default]
    Decrypt,
    /// [`crate::EspOpcode::DECRYPT_FORWARD`] only: plaintext never leaves the enclave.
    Forward,
}

impl InboundMode {
    /// The byte that stands for it in measured and marshalled configurations.
    pub const fn code(self) -> u8 {
        match self {
            Self::Decrypt => 1,
            Self::Forward => 2,
        }
    }

    /// The mode for a code.
    pub const fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Self::Decrypt),
            2 => Some(Self::Forward),
            _ => None,
        }
    }
}

/// Upper bounds on what one enclave instance holds (all checked, none allocated up front),
/// and what its inbound SAs may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Live IKE SAs (at most 65,535).
    pub max_ike_sas: usize,
    /// Live ESP SAs, counting each direction (at most 65,535).
    pub max_esp_sas: usize,
    /// Pending DH private values (at most 65,535).
    pub max_dh: usize,
    /// Provisioned secrets (at most 65,535).
    pub max_secrets: usize,
    /// Descriptors per ESP batch call.
    pub max_batch: usize,
    /// The one operation inbound ESP SAs may be used for.
    pub inbound: InboundMode,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_ike_sas: 4096,
            max_esp_sas: 16384,
            max_dh: 1024,
            max_secrets: 64,
            max_batch: 256,
            inbound: InboundMode::Decrypt,
        }
    }
}

/// Which backend runs an enclave's trusted code. It is measured with the configuration, so
/// evidence says whether the keys sit in a hardened process of their own or in the memory
/// of the process that calls them (a verifier that accepts only `Process` refuses inline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// One hardened process per tenant ([`crate::process`]): keys never in the caller.
    #[default]
    Process,
    /// The trusted code in the caller's process (`cloister_enclave::InlineEnclave`): for a gateway
    /// that itself runs in a TEE, and for tests.
    Inline,
}

impl Backend {
    /// Its name in configuration files and command lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Inline => "inline",
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Process => 1,
            Self::Inline => 2,
        }
    }
}

impl core::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> core::result::Result<Self, String> {
        match s {
            "process" => Ok(Self::Process),
            "inline" => Ok(Self::Inline),
            other => Err(format!("unknown enclave backend {other:?} (process or inline)")),
        }
    }
}

impl core::fmt::Display for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an enclave instance is started.
#[derive(Debug)]
pub struct EnclaveConfig {
    /// The tenant it serves.
    pub tenant: TenantId,
    /// Its root secret.
    pub provisioning_key: ProvisioningKey,
    /// Table and batch bounds.
    pub limits: Limits,
    /// The platforms whose enclaves this one moves state to and from: their evidence
    /// public keys (uncompressed P-256 SEC1, as `cloister platform-key` prints them), this
    /// host's own included where backups come back here. Measured, so a tenant that checks
    /// the measurement has approved the set; empty refuses every move and import.
    pub trusted_platforms: Vec<Vec<u8>>,
    /// The HSM backup roots (uncompressed P-256 public keys, as `cloister migrate
    /// backup-root` prints them) whose certificate makes an RSA key a backup key
    /// (`cloister_attest::migration::backup_key_message`). Measured, so a tenant that checks the
    /// measurement has approved where its backups go; empty refuses every backup.
    pub backup_roots: Vec<Vec<u8>>,
    /// The tenant's provisioning signers (uncompressed P-256 public keys, as `cloister
    /// tenant signer-key` prints them). Measured. When one is set, a secret enters only in
    /// an envelope one of them signed ([`crate::Enclave::provision_attested`]), and blobs
    /// wrapped under the provisioning key, which the host holds too, are refused
    /// ([`crate::Enclave::provision_secret`], [`crate::Enclave::esp_sa_install_wrapped`]).
    /// Empty: envelopes are unsigned (whoever sees an offer can encrypt to it) and wrapped
    /// blobs are taken.
    pub tenant_signers: Vec<Vec<u8>>,
}

/// An enclave's configuration without its root secret: what a launcher that does not hold
/// the platform's secrets (the service, asking the platform process) says of the enclave
/// it wants. The platform adds the tenant's root ([`EnclaveConfig::from_public`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicConfig {
    /// The tenant it serves.
    pub tenant: TenantId,
    /// Table and batch bounds.
    pub limits: Limits,
    /// [`EnclaveConfig::trusted_platforms`].
    pub trusted_platforms: Vec<Vec<u8>>,
    /// [`EnclaveConfig::backup_roots`].
    pub backup_roots: Vec<Vec<u8>>,
    /// [`EnclaveConfig::tenant_signers`].
    pub tenant_signers: Vec<Vec<u8>>,
}

impl PublicConfig {
    /// The configuration's public part, as measured into attestation evidence when run by
    /// `backend`: the backend, tenant, limits, inbound mode, trusted platforms, backup roots
    /// and tenant signers, never the key.
    pub fn measured_bytes(&self, backend: Backend) -> Vec<u8> {
        let mut v = Vec::with_capacity(80 + 66 * self.trusted_platforms.len());
        v.extend_from_slice(b"cloister-enclave-config-v5");
        v.push(backend.code());
        v.extend_from_slice(&self.tenant.0.to_be_bytes());
        for n in [
            self.limits.max_ike_sas,
            self.limits.max_esp_sas,
            self.limits.max_dh,
            self.limits.max_secrets,
            self.limits.max_batch,
        ] {
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
        v.push(self.limits.inbound.code());
        // The enclave refuses more than MAX_TRUSTED_PLATFORMS keys of 65 bytes at start.
        for set in
            [key_set(&self.trusted_platforms), key_set(&self.backup_roots), key_set(&self.tenant_signers)]
        {
            v.extend_from_slice(&u32::try_from(set.len()).unwrap_or(u32::MAX).to_be_bytes());
            for key in set {
                v.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
                v.extend_from_slice(key);
            }
        }
        v
    }
}

/// Longest platform public key the measured set takes (a P-256 SEC1 key is 65 bytes).
pub const MAX_PLATFORM_PUBLIC_KEY: usize = 133;
/// Most platforms in the measured set.
pub const MAX_TRUSTED_PLATFORMS: usize = 64;

impl EnclaveConfig {
    /// `public` with its root secret `key`.
    pub fn from_public(public: PublicConfig, key: ProvisioningKey) -> Self {
        Self {
            tenant: public.tenant,
            provisioning_key: key,
            limits: public.limits,
            trusted_platforms: public.trusted_platforms,
            backup_roots: public.backup_roots,
            tenant_signers: public.tenant_signers,
        }
    }

    /// Everything but the root secret.
    pub fn public(&self) -> PublicConfig {
        PublicConfig {
            tenant: self.tenant,
            limits: self.limits,
            trusted_platforms: self.trusted_platforms.clone(),
            backup_roots: self.backup_roots.clone(),
            tenant_signers: self.tenant_signers.clone(),
        }
    }

    /// The trusted platforms as measured: sorted and without repeats, so that every host of
    /// a cluster, listing the same keys in any order, measures the same.
    pub fn platform_set(&self) -> Vec<&[u8]> {
        key_set(&self.trusted_platforms)
    }

    /// The backup roots as measured, sorted and without repeats.
    pub fn backup_root_set(&self) -> Vec<&[u8]> {
        key_set(&self.backup_roots)
    }

    /// The tenant signers as measured, sorted and without repeats.
    pub fn tenant_signer_set(&self) -> Vec<&[u8]> {
        key_set(&self.tenant_signers)
    }

    /// The configuration's public part, as measured into attestation evidence when run by
    /// `backend` ([`PublicConfig::measured_bytes`]); never the key.
    pub fn measured_bytes(&self, backend: Backend) -> Vec<u8> {
        self.public().measured_bytes(backend)
    }
}

pub(crate) fn key_set(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    let mut set: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    set.sort_unstable();
    set.dedup();
    set
}

/// Bytes of trusted memory held, by kind. Per-entry sizes are the sizes of the state
/// actually allocated for it (the entry itself plus any heap parts it owns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryReport {
    /// Live IKE SAs.
    pub ike_sas: usize,
    /// Bytes held for them.
    pub ike_sa_bytes: usize,
    /// Live ESP SAs (each direction counts).
    pub esp_sas: usize,
    /// Bytes held for them.
    pub esp_sa_bytes: usize,
    /// Pending DH private values.
    pub dh_values: usize,
    /// Bytes held for them.
    pub dh_bytes: usize,
    /// Provisioned secrets.
    pub secrets: usize,
    /// Bytes held for them (RSA keys include their heap limbs, estimated).
    pub secret_bytes: usize,
    /// Everything not per entry: slot arrays, decrypt scratch, root keys, counters.
    pub fixed_bytes: usize,
}

impl MemoryReport {
    /// Average bytes per live IKE SA (0 when there are none).
    pub fn per_ike_sa(&self) -> usize {
        self.ike_sa_bytes.checked_div(self.ike_sas).unwrap_or(0)
    }

    /// Average bytes per live ESP SA (0 when there are none).
    pub fn per_esp_sa(&self) -> usize {
        self.esp_sa_bytes.checked_div(self.esp_sas).unwrap_or(0)
    }

    /// All bytes.
    pub fn total(&self) -> usize {
        self.ike_sa_bytes + self.esp_sa_bytes + self.dh_bytes + self.secret_bytes + self.fixed_bytes
    }
}

/// Refusals and packet outcomes, counted since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Batch calls served.
    pub batches: u64,
    /// Packets per [`EspStatus`], indexed by [`EspStatus::index`].
    pub esp: [u64; EspStatus::COUNT],
    /// Refused calls per [`ErrorKind`].
    pub errors: [u64; ErrorKind::COUNT],
}

impl Counters {
    /// Packets that ended with `status`.
    pub fn esp_status(&self, status: EspStatus) -> u64 {
        self.esp.get(status.index()).copied().unwrap_or(0)
    }

    /// Calls refused with an error of `kind`.
    pub fn error(&self, kind: ErrorKind) -> u64 {
        self.errors.get(kind as usize).copied().unwrap_or(0)
    }

    #[doc(hidden)]
    pub fn record_error(&mut self, kind: ErrorKind) {
        if let Some(c) = self.errors.get_mut(kind as usize) {
            *c = c.saturating_add(1);
        }
    }

    /// Adds `other`'s counts to these (a lane's into its instance's).
    #[doc(hidden)]
    pub fn add(&mut self, other: &Counters) {
        self.batches = self.batches.saturating_add(other.batches);
        for (a, b) in self.esp.iter_mut().zip(other.esp.iter()) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in self.errors.iter_mut().zip(other.errors.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    #[doc(hidden)]
    pub fn record_status(&mut self, status: EspStatus) {
        if let Some(c) = self.esp.get_mut(status.index()) {
            *c = c.saturating_add(1);
        }
    }
}
