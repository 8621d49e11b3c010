//! Getting static SAs' keys into the enclave.
//!
//! Keys travel from the validated configuration straight into the enclave call; nothing
//! here prints, stores or returns them. Production static SAs carry blobs the tenant wrapped
//! for its enclave (`cloister secret wrap --kind esp`), which [`install_wrapped`] hands to
//! the enclave unopened, whatever the backend; raw keys in a file are a test and debugging
//! aid of the binary's in-process enclave (`cloister dataplane`, `static-keys` feature only).

use enclave::{Enclave, EspSaHandle, EspSaParams};
use esp::config::{Direction, KeyMaterial, KeyRequest};

/// The enclave's parameters for one static SA.
pub fn params(r: &KeyRequest<'_>) -> EspSaParams {
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

/// Refuses every key: for callers that take no static SAs (their SAs come from IKE).
pub fn refuse<E>(_: &mut E, _: &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error> {
    Err(enclave::Error::Unsupported { what: "static ESP SAs here (SAs come from IKE)", value: 0 })
}
