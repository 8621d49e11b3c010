//! Getting static SAs' keys into the enclave, and starting the in-process enclave.
//!
//! Keys travel from the validated configuration straight into the enclave call; nothing
//! here prints, stores or returns them. Raw keys in a file are a test and debugging aid
//! (`static-keys` feature); production keys come from IKE (KEYMAT) or wrapped blobs, for
//! which the enclave has no ESP install call yet.

use enclave::attest::{CodeIdentity, SoftwareAttestation};
use enclave::{EnclaveConfig, EspSaHandle, InlineEnclave, Limits, ProvisioningKey, TenantId};
use esp::config::KeyRequest;

use crate::Error;

/// Starts an in-process enclave for `tenant` with a fresh provisioning key and software
/// attestation (see `enclave::attest` for what that does and does not prove).
pub fn inline_enclave(tenant: u32) -> Result<InlineEnclave, Error> {
    let config = EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::generate()?,
        trusted_min_seal_counter: 0,
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key()?;
    let attestation = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"cloister-dataplane".to_vec()),
        &config.measured_bytes(),
    )?;
    Ok(InlineEnclave::start(config, Box::new(attestation))?)
}

/// Installs one SA's raw keys (`static-keys` builds); wrapped keys are refused.
#[cfg(feature = "static-keys")]
pub fn install_raw(e: &mut InlineEnclave, r: &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error> {
    use esp::config::{Direction, KeyMaterial};
    match r.keys {
        KeyMaterial::Raw { encryption, integrity } => {
            e.esp_sa_install_raw(r.spi, r.direction == Direction::In, r.esn, r.suite, encryption, integrity)
        }
        KeyMaterial::Wrapped(_) => Err(enclave::Error::Unsupported { what: "wrapped ESP SA keys", value: 0 }),
    }
}

/// Refuses every key: for builds without `static-keys`, where no install path exists.
pub fn refuse<E>(_: &mut E, _: &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error> {
    Err(enclave::Error::Unsupported {
        what: "static ESP keys (this build lacks the static-keys feature)",
        value: 0,
    })
}
