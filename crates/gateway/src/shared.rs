//! One tenant enclave used by two threads: the IKE engine (control thread) creates SAs,
//! the data plane's workers use them. Both hold a [`SharedEnclave`], which forwards every
//! call under one mutex, so handles created by one are valid for the other.
//!
//! The price: an IKE step (a MODP-3072 DH takes milliseconds) holds the enclave while ESP
//! batches wait. A per-role lane in the enclave would lift that; until then IKE steps are
//! short next to a tunnel's life, and the data plane's batches keep the lock briefly.

use core::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use enclave::attest::Evidence;
use enclave::{
    AuthInput, AuthMethod, AuthSpec, AuthVerified, BatchSummary, ChildSaPair, ChildSaParams, Counters,
    DhExchange, DhGroup, DhHandle, Enclave, EspDescriptor, EspSaHandle, EspStatus, IkeSaHandle, IkeSaParams,
    MemoryReport, PeerCredential, Result, SealedBlob, SecretHandle, SecretKind, TenantId,
};

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

    /// The enclave, locked (a poisoned lock is taken over: the enclave's own state is
    /// consistent after any call, since calls are all-or-nothing on its side).
    pub fn lock(&self) -> MutexGuard<'_, E> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<E: Enclave> Enclave for SharedEnclave<E> {
    fn tenant(&self) -> TenantId {
        self.tenant
    }
    fn identity_evidence(&mut self, challenge: &[u8; 32]) -> Result<Evidence> {
        self.lock().identity_evidence(challenge)
    }

    fn memory_report(&self) -> MemoryReport {
        self.lock().memory_report()
    }
    fn counters(&self) -> Counters {
        self.lock().counters()
    }
    fn esp_lane(&mut self) -> Option<Box<dyn enclave::EspCrossing>> {
        self.lock().esp_lane()
    }
    fn provision_secret(&mut self, wrapped: &[u8]) -> Result<SecretHandle> {
        self.lock().provision_secret(wrapped)
    }
    fn provisioning_offer(&mut self) -> Result<enclave::ProvisioningOffer> {
        self.lock().provisioning_offer()
    }
    fn provision_attested(&mut self, envelope: &[u8]) -> Result<(SecretHandle, SealedBlob)> {
        self.lock().provision_attested(envelope)
    }
    fn unseal_secret(&mut self, sealed: &SealedBlob) -> Result<SecretHandle> {
        self.lock().unseal_secret(sealed)
    }
    fn seal_secret(&mut self, secret: SecretHandle) -> Result<SealedBlob> {
        self.lock().seal_secret(secret)
    }
    fn export_secrets(
        &mut self,
        wrap_spki: &[u8],
        certificate: &[u8],
        oaep: enclave::migration::OaepHash,
        untrusted_state: &[u8],
    ) -> Result<enclave::migration::MigrationPackage> {
        self.lock().export_secrets(wrap_spki, certificate, oaep, untrusted_state)
    }
    fn export_state(
        &mut self,
        destination: &enclave::migration::DestinationKey,
        hsm_spki: Option<&[u8]>,
        oaep: enclave::migration::OaepHash,
        untrusted_state: &[u8],
    ) -> Result<enclave::migration::MigrationPackage> {
        self.lock().export_state(destination, hsm_spki, oaep, untrusted_state)
    }
    fn migration_destination_key(&mut self, bits: usize) -> Result<enclave::migration::DestinationKey> {
        self.lock().migration_destination_key(bits)
    }
    fn import_state(
        &mut self,
        package: &enclave::migration::MigrationPackage,
        hsm_share: Option<&[u8]>,
    ) -> Result<enclave::migration::MigrationRestore> {
        self.lock().import_state(package, hsm_share)
    }
    fn secret_kind(&mut self, secret: SecretHandle) -> Result<SecretKind> {
        self.lock().secret_kind(secret)
    }
    fn delete_secret(&mut self, secret: SecretHandle) -> Result<()> {
        self.lock().delete_secret(secret)
    }
    fn random_nonce(&mut self, out: &mut [u8]) -> Result<()> {
        self.lock().random_nonce(out)
    }

    fn ike_nonces(&mut self, out: &mut [u8]) -> Result<()> {
        self.lock().ike_nonces(out)
    }
    fn dh_generate(&mut self, group: DhGroup, public_out: &mut [u8]) -> Result<DhHandle> {
        self.lock().dh_generate(group, public_out)
    }
    fn dh_delete(&mut self, dh: DhHandle) -> Result<()> {
        self.lock().dh_delete(dh)
    }
    fn ike_sa_create(&mut self, dh: DhExchange<'_>, params: &IkeSaParams<'_>) -> Result<IkeSaHandle> {
        self.lock().ike_sa_create(dh, params)
    }
    fn ike_sa_rekey(
        &mut self,
        old: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        dh: DhExchange<'_>,
        params: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        self.lock().ike_sa_rekey(old, sealed_sk_d, dh, params)
    }
    fn auth_compute(
        &mut self,
        ike: IkeSaHandle,
        credential: SecretHandle,
        spec: AuthSpec,
        input: &AuthInput<'_>,
        out: &mut [u8],
    ) -> Result<(AuthMethod, usize)> {
        self.lock().auth_compute(ike, credential, spec, input, out)
    }
    fn auth_verify(
        &mut self,
        ike: IkeSaHandle,
        peer: PeerCredential<'_>,
        method: u8,
        auth_data: &[u8],
        input: &AuthInput<'_>,
    ) -> Result<AuthVerified> {
        self.lock().auth_verify(ike, peer, method, auth_data, input)
    }
    fn auth_verify_compute(
        &mut self,
        ike: IkeSaHandle,
        peer: &enclave::PeerAuthCheck<'_>,
        ours: &enclave::OurAuth<'_>,
        out: &mut [u8],
    ) -> Result<enclave::AuthAnswered> {
        self.lock().auth_verify_compute(ike, peer, ours, out)
    }
    fn sk_encrypt(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> Result<()> {
        self.lock().sk_encrypt(ike, message, aad_len, plaintext_len)
    }
    fn sk_decrypt(&mut self, ike: IkeSaHandle, message: &mut [u8], aad_len: usize) -> Result<Range<usize>> {
        self.lock().sk_decrypt(ike, message, aad_len)
    }
    fn child_sa_create(
        &mut self,
        ike: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        pfs: Option<DhExchange<'_>>,
        params: &ChildSaParams<'_>,
    ) -> Result<ChildSaPair> {
        self.lock().child_sa_create(ike, sealed_sk_d, pfs, params)
    }
    fn clear_and_seal(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        self.lock().clear_and_seal(ike)
    }
    fn ike_sa_seal_state(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        self.lock().ike_sa_seal_state(ike)
    }
    fn establish_seal(&mut self, ike: IkeSaHandle) -> Result<enclave::EstablishSeal> {
        self.lock().establish_seal(ike)
    }
    fn sk_encrypt_establish(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> Result<enclave::EstablishSeal> {
        self.lock().sk_encrypt_establish(ike, message, aad_len, plaintext_len)
    }
    fn ike_sa_respond(
        &mut self,
        group: DhGroup,
        peer_public: &[u8],
        public_out: &mut [u8],
        params: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        self.lock().ike_sa_respond(group, peer_public, public_out, params)
    }
    fn ike_sa_restore(&mut self, state: &SealedBlob) -> Result<IkeSaHandle> {
        self.lock().ike_sa_restore(state)
    }
    fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> Result<()> {
        self.lock().ike_sa_delete(ike)
    }
    fn ike_sa_unseal_sk_d(&mut self, ike: IkeSaHandle, sealed_sk_d: &SealedBlob) -> Result<()> {
        self.lock().ike_sa_unseal_sk_d(ike, sealed_sk_d)
    }
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        self.lock().esp_batch(packets, descriptors, status)
    }
    fn esp_sa_delete(&mut self, sa: EspSaHandle) -> Result<()> {
        self.lock().esp_sa_delete(sa)
    }
    fn esp_sa_install_wrapped(
        &mut self,
        wrapped: &[u8],
        params: &enclave::EspSaParams,
    ) -> Result<EspSaHandle> {
        self.lock().esp_sa_install_wrapped(wrapped, params)
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
