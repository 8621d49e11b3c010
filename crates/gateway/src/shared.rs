//! One tenant enclave used by two threads: the IKE engine (control thread) creates SAs,
//! the data plane's workers use them. Both hold a [`SharedEnclave`], which forwards every
//! call under one mutex, so handles created by one are valid for the other.
//!
//! The price: an IKE step (a MODP-3072 DH takes milliseconds) holds the enclave while ESP
//! batches wait. A per-role lane in the enclave would lift that; until then IKE steps are
//! short next to a tunnel's life, and the data plane's batches keep the lock briefly.

use std::sync::{Arc, Mutex, MutexGuard};

use enclave::{BatchSummary, Enclave, EspDescriptor, EspStatus, Result, TenantId};

/// An enclave behind a mutex, cloneable; every clone is the same enclave.
#[derive(Debug)]
pub struct SharedEnclave<E> {
    inner: Arc<Mutex<E>>,
    tenant: TenantId,
}

impl<E> Clone for SharedEnclave<E> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner), tenant: self.tenant }
    }
}

impl<E: Enclave> SharedEnclave<E> {
    /// Shares `enclave`.
    pub fn new(enclave: E) -> Self {
        let tenant = enclave.tenant();
        Self { inner: Arc::new(Mutex::new(enclave)), tenant }
    }

    /// The enclave back, once no other clone is left (the engine and the data plane that
    /// shared it are gone); `None` while one is.
    pub fn into_inner(self) -> Option<E> {
        Arc::try_unwrap(self.inner)
            .ok()
            .map(|m| m.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The enclave, locked (a poisoned lock is taken over: the enclave's own state is
    /// consistent after any call, since calls are all-or-nothing on its side).
    pub fn lock(&self) -> MutexGuard<'_, E> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

// Every call of the table goes to the locked enclave as it is, composites included (one
// crossing where the inner backend makes them one).
enclave::forward_enclave! {
    impl[E: Enclave] for SharedEnclave<E>, via |this| this.lock(), result |r| r;

    fn tenant(&self) -> TenantId {
        self.tenant
    }
    fn esp_lane(&mut self) -> Option<Box<dyn enclave::EspCrossing>> {
        self.lock().esp_lane()
    }
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        self.lock().esp_batch(packets, descriptors, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
    use enclave_core::migration::OaepHash;
    use enclave_core::{EnclaveConfig, InlineEnclave, Limits, ProvisioningKey};

    /// Two inline enclaves of one measurement on one platform that trusts itself for moves.
    fn pair() -> (InlineEnclave, InlineEnclave) {
        let key = SoftwareAttestation::generate_platform_key().unwrap();
        let public = SoftwareAttestation::new(&key, CodeIdentity::Bytes(vec![]), b"")
            .unwrap()
            .platform_public_key()
            .to_vec();
        let start = || {
            let config = EnclaveConfig {
                tenant: TenantId(4),
                provisioning_key: ProvisioningKey::from_bytes([3; 32]),
                trusted_platforms: vec![public.clone()],
                backup_roots: Vec::new(),
                tenant_signers: Vec::new(),
                limits: Limits::default(),
            };
            let measured = config.measured_bytes(enclave_core::Backend::Inline);
            let att =
                SoftwareAttestation::new(&key, CodeIdentity::Bytes(b"shared".to_vec()), &measured).unwrap();
            InlineEnclave::start(config, Box::new(att)).unwrap()
        };
        (start(), start())
    }

    /// The migration calls reach the enclave (a wrapper that did not forward them would
    /// answer `Unsupported` through the trait's defaults).
    #[test]
    fn moves_go_through_a_shared_enclave() {
        let (src, dst) = pair();
        let (mut src, mut dst): (Box<dyn Enclave>, Box<dyn Enclave>) =
            (Box::new(SharedEnclave::new(src)), Box::new(SharedEnclave::new(dst)));
        let key = dst.migration_destination_key(2048).unwrap();
        let package = src.export_state(&key, None, OaepHash::Sha256, b"carried").unwrap();
        let restored = dst.import_state(&package, None).unwrap();
        assert_eq!(restored.untrusted_state, b"carried");
    }
}
