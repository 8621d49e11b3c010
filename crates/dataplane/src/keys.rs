//! Getting static SAs' keys into the enclave, and starting the in-process enclave.
//!
//! Keys travel from the validated configuration straight into the enclave call; nothing
//! here prints, stores or returns them. Production static SAs carry blobs the tenant wrapped
//! for its enclave (`cloister secret wrap --kind esp`), which [`install_wrapped`] hands to
//! the enclave unopened, whatever the backend; raw keys in a file are a test and debugging
//! aid (`install_raw`, `static-keys` feature only).

use enclave::attest::{CodeIdentity, SoftwareAttestation};
use enclave::{
    Enclave, EnclaveConfig, EspSaHandle, EspSaParams, InlineEnclave, Limits, ProvisioningKey, TenantId,
};
use esp::config::{Direction, KeyMaterial, KeyRequest};

use crate::Error;

/// Starts an in-process enclave for `tenant` with a fresh provisioning key and software
/// attestation (see `enclave::attest` for what that does and does not prove). It can open
/// no tenant blob: use [`inline_enclave_with_key`] for wrapped keys.
pub fn inline_enclave(tenant: u32) -> Result<InlineEnclave, Error> {
    inline_enclave_with_key(tenant, ProvisioningKey::generate()?)
}

/// Starts an in-process enclave for `tenant` holding `provisioning_key` (which opens the
/// blobs the tenant wrapped under it), with software attestation.
pub fn inline_enclave_with_key(
    tenant: u32,
    provisioning_key: ProvisioningKey,
) -> Result<InlineEnclave, Error> {
    let config = EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key,
        trusted_min_seal_counter: 0,
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key()?;
    let attestation = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"cloister-dataplane".to_vec()),
        &config.measured_bytes(enclave::Backend::Inline),
    )?;
    Ok(InlineEnclave::start(config, Box::new(attestation))?)
}

/// The enclave's parameters for one static SA.
fn params(r: &KeyRequest<'_>) -> EspSaParams {
    EspSaParams { spi: r.spi, inbound: r.direction == Direction::In, esn: r.esn, suite: r.suite }
}

/// Installs one SA from its wrapped keys (every build, every backend): the blob goes to the
/// enclave unopened. Raw keys are refused here (see `install_raw`).
pub fn install_wrapped<E: Enclave + ?Sized>(
    e: &mut E,
    r: &KeyRequest<'_>,
) -> Result<EspSaHandle, enclave::Error> {
    match r.keys {
        KeyMaterial::Wrapped(blob) => e.esp_sa_install_wrapped(blob, &params(r)),
        KeyMaterial::Raw { .. } => Err(enclave::Error::Unsupported {
            what: "raw ESP keys (this build lacks the static-keys feature)",
            value: 0,
        }),
    }
}

/// Installs one SA's raw keys into the in-process enclave (`static-keys` builds), or its
/// wrapped keys as [`install_wrapped`] does.
#[cfg(feature = "static-keys")]
pub fn install_raw(e: &mut InlineEnclave, r: &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error> {
    match r.keys {
        KeyMaterial::Raw { encryption, integrity } => {
            e.esp_sa_install_raw(r.spi, r.direction == Direction::In, r.esn, r.suite, encryption, integrity)
        }
        KeyMaterial::Wrapped(_) => install_wrapped(e, r),
    }
}

/// Refuses every key: for callers that take no static SAs (their SAs come from IKE).
pub fn refuse<E>(_: &mut E, _: &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error> {
    Err(enclave::Error::Unsupported { what: "static ESP SAs here (SAs come from IKE)", value: 0 })
}
