//! The inline backend: the trusted code runs in the caller's process.
//!
//! This is the backend for the "whole pipeline inside the TEE" deployment (a confidential VM
//! whose entire memory is protected) and the performance reference for the others. In a
//! plain process it separates keys from the rest of Cloister by API only: code in the same
//! address space can read them. Use the process backend where the gateway process
//! itself is not trusted.

use crate::attest::{AttestationProvider, Evidence};
use crate::migration::{DestinationKey, MigrationPackage, MigrationRestore, OaepHash};
use crate::provision::ProvisioningOffer;
use crate::trusted::lane::EspLaneParts;
use crate::trusted::TrustedCore;
use core::ops::Range;
use enclave_api::alg::{AuthMethod, DhGroup, SecretKind};
use enclave_api::error::Result;
use enclave_api::esp::{BatchSummary, EspDescriptor, EspSaParams, EspStatus};
use enclave_api::handle::{DhHandle, EspSaHandle, IkeSaHandle, SecretHandle, TenantId};
use enclave_api::ike::{
    AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal, IkeSaParams,
    PeerCredential, SealedBlob,
};
use enclave_api::ledger::{Ledger, MemoryLedger};
use enclave_api::report::{Counters, EnclaveConfig, MemoryReport};
use enclave_api::{Enclave, EspCrossing};

/// The trusted component, in process. Every call is counted when refused.
#[derive(Debug)]
pub struct InlineEnclave {
    core: TrustedCore,
}

impl InlineEnclave {
    /// Runs the start-up self-tests and starts an instance for `config.tenant` whose seal
    /// counters and static-key record last as long as the instance (a [`MemoryLedger`]):
    /// nothing it sealed opens in a later instance, and static keys it installed go in
    /// again there. A host that restarts enclaves gives each one the tenant's lasting ledger
    /// with [`Self::start_with_ledger`].
    pub fn start(config: EnclaveConfig, attestation: Box<dyn AttestationProvider>) -> Result<Self> {
        Self::start_with_ledger(config, attestation, Box::new(MemoryLedger::new()))
    }

    /// Starts an instance on its platform's `ledger` (seal counters, live sealed secrets,
    /// static keys installed), which outlives it.
    pub fn start_with_ledger(
        config: EnclaveConfig,
        attestation: Box<dyn AttestationProvider>,
        ledger: Box<dyn Ledger>,
    ) -> Result<Self> {
        Ok(Self { core: TrustedCore::start(config, attestation, ledger)? })
    }
}

/// One worker's lane into an [`InlineEnclave`] ([`Enclave::esp_lane`]): its batches run
/// alongside other lanes' on the same SAs. Each lane has its own cache of expanded keys,
/// counters and scratch; the SA table is shared, read-locked per batch, and an outbound
/// SA's window of used sequence numbers is locked once per run of its descriptors, so no
/// number is used twice whichever lanes the numbers go to. The lane holds no key of an SA
/// deleted, or of an instance dropped, after its next batch at the latest.
pub struct InlineEspLane {
    parts: EspLaneParts,
}

impl core::fmt::Debug for InlineEspLane {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InlineEspLane").finish_non_exhaustive()
    }
}

impl EspCrossing for InlineEspLane {
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        self.parts.batch(packets, descriptors, status)
    }
}

#[cfg(feature = "test-export")]
/// Derived IKE SA keys, exported for cross-checks. `test-export` builds only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeKeysExport {
    /// SK_d, if still resident.
    pub sk_d: Option<Vec<u8>>,
    /// SK_ai.
    pub sk_ai: Vec<u8>,
    /// SK_ar.
    pub sk_ar: Vec<u8>,
    /// SK_ei (with salt for AEADs).
    pub sk_ei: Vec<u8>,
    /// SK_er (with salt for AEADs).
    pub sk_er: Vec<u8>,
    /// SK_pi, if not cleared.
    pub sk_pi: Option<Vec<u8>>,
    /// SK_pr, if not cleared.
    pub sk_pr: Option<Vec<u8>>,
}

#[cfg(feature = "test-export")]
/// One ESP SA direction's keys, exported for cross-checks. `test-export` builds only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspKeysExport {
    /// Encryption key (with salt for AEADs).
    pub encryption: Vec<u8>,
    /// Integrity key (empty for AEADs).
    pub integrity: Vec<u8>,
}

#[cfg(feature = "test-export")]
impl InlineEnclave {
    /// TEST ONLY (`test-export`): the IKE SA's resident keys, to compare with a peer's log.
    pub fn export_ike_keys(&self, ike: IkeSaHandle) -> Result<IkeKeysExport> {
        self.core.export_ike_keys(ike)
    }

    /// TEST ONLY (`test-export`): one ESP SA direction's keys.
    pub fn export_esp_keys(&self, sa: EspSaHandle) -> Result<EspKeysExport> {
        self.core.export_esp_keys(sa)
    }
}

// ---- static ESP SAs from raw keys (`test-keys`; added for the ESP data plane, crates/esp) ----
#[cfg(feature = "test-keys")]
impl InlineEnclave {
    /// TEST ONLY (`test-keys`): installs one direction of an ESP SA from raw key bytes:
    /// `encryption` is the cipher's key (with the 4-byte salt for the AEADs, RFC 4106 §8.1),
    /// `integrity` the HMAC key (empty for the AEADs). Keys move in, never out.
    pub fn esp_sa_install_raw(
        &mut self,
        spi: u32,
        inbound: bool,
        esn: bool,
        suite: crate::Suite,
        encryption: &[u8],
        integrity: &[u8],
    ) -> Result<EspSaHandle> {
        let r = self.core.esp_sa_install_raw(spi, inbound, esn, suite, encryption, integrity);
        self.core.counted(r)
    }
}
// ---- end static ESP SAs ----------------------------------------------------------------------

impl Enclave for InlineEnclave {
    fn tenant(&self) -> TenantId {
        self.core.tenant()
    }

    fn identity_evidence(&mut self, challenge: &[u8; 32]) -> Result<Evidence> {
        let r = self.core.identity_evidence(challenge);
        self.core.counted(r)
    }

    fn memory_report(&self) -> MemoryReport {
        self.core.memory_report()
    }

    fn counters(&self) -> Counters {
        self.core.counters()
    }

    fn provision_secret(&mut self, wrapped: &[u8]) -> Result<SecretHandle> {
        let r = self.core.provision_secret(wrapped);
        self.core.counted(r)
    }

    fn provisioning_offer(&mut self) -> Result<ProvisioningOffer> {
        let r = self.core.provisioning_offer();
        self.core.counted(r)
    }

    fn provision_attested(&mut self, envelope: &[u8]) -> Result<(SecretHandle, SealedBlob)> {
        let r = self.core.provision_attested(envelope);
        self.core.counted(r)
    }

    fn unseal_secret(&mut self, sealed: &SealedBlob) -> Result<SecretHandle> {
        let r = self.core.unseal_secret(sealed);
        self.core.counted(r)
    }

    fn seal_secret(&mut self, secret: SecretHandle) -> Result<SealedBlob> {
        let r = self.core.seal_secret(secret);
        self.core.counted(r)
    }

    fn export_secrets(
        &mut self,
        wrap_spki: &[u8],
        certificate: &[u8],
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let r = self.core.export_secrets(wrap_spki, certificate, oaep, untrusted_state);
        self.core.counted(r)
    }

    fn export_state(
        &mut self,
        destination: &DestinationKey,
        hsm_spki: Option<&[u8]>,
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let r = self.core.export_state(destination, hsm_spki, oaep, untrusted_state);
        self.core.counted(r)
    }

    fn migration_destination_key(&mut self, bits: usize) -> Result<DestinationKey> {
        let r = self.core.migration_destination_key(bits);
        self.core.counted(r)
    }

    fn import_state(
        &mut self,
        package: &MigrationPackage,
        hsm_share: Option<&[u8]>,
    ) -> Result<MigrationRestore> {
        let r = self.core.import_state(package, hsm_share);
        self.core.counted(r)
    }

    fn secret_kind(&mut self, secret: SecretHandle) -> Result<SecretKind> {
        let r = self.core.secret_kind(secret);
        self.core.counted(r)
    }

    fn delete_secret(&mut self, secret: SecretHandle) -> Result<()> {
        let r = self.core.delete_secret(secret);
        self.core.counted(r)
    }

    fn random_nonce(&mut self, out: &mut [u8]) -> Result<()> {
        let r = self.core.random_nonce(out);
        self.core.counted(r)
    }

    fn ike_nonces(&mut self, out: &mut [u8]) -> Result<()> {
        let r = self.core.ike_nonces(out);
        self.core.counted(r)
    }

    fn dh_generate(&mut self, group: DhGroup, public_out: &mut [u8]) -> Result<DhHandle> {
        let r = self.core.dh_generate(group, public_out);
        self.core.counted(r)
    }

    fn dh_delete(&mut self, dh: DhHandle) -> Result<()> {
        let r = self.core.dh_delete(dh);
        self.core.counted(r)
    }

    fn ike_sa_create(&mut self, dh: DhExchange<'_>, params: &IkeSaParams<'_>) -> Result<IkeSaHandle> {
        let r = self.core.ike_sa_create(dh, params);
        self.core.counted(r)
    }

    fn ike_sa_rekey(
        &mut self,
        old: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        dh: DhExchange<'_>,
        params: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        let r = self.core.ike_sa_rekey(old, sealed_sk_d, dh, params);
        self.core.counted(r)
    }

    fn auth_compute(
        &mut self,
        ike: IkeSaHandle,
        credential: SecretHandle,
        spec: AuthSpec,
        input: &AuthInput<'_>,
        out: &mut [u8],
    ) -> Result<(AuthMethod, usize)> {
        let r = self.core.auth_compute(ike, credential, spec, input, out);
        self.core.counted(r)
    }

    fn auth_verify(
        &mut self,
        ike: IkeSaHandle,
        peer: PeerCredential<'_>,
        method: u8,
        auth_data: &[u8],
        input: &AuthInput<'_>,
    ) -> Result<AuthVerified> {
        let r = self.core.auth_verify(ike, peer, method, auth_data, input);
        self.core.counted(r)
    }

    fn sk_encrypt(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> Result<()> {
        let r = self.core.sk_encrypt(ike, message, aad_len, plaintext_len);
        self.core.counted(r)
    }

    fn sk_decrypt(&mut self, ike: IkeSaHandle, message: &mut [u8], aad_len: usize) -> Result<Range<usize>> {
        let r = self.core.sk_decrypt(ike, message, aad_len);
        self.core.counted(r)
    }

    fn child_sa_create(
        &mut self,
        ike: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        pfs: Option<DhExchange<'_>>,
        params: &ChildSaParams<'_>,
    ) -> Result<ChildSaPair> {
        let r = self.core.child_sa_create(ike, sealed_sk_d, pfs, params);
        self.core.counted(r)
    }

    fn clear_and_seal(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        let r = self.core.clear_and_seal(ike);
        self.core.counted(r)
    }

    fn ike_sa_seal_state(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        let r = self.core.ike_sa_seal_state(ike);
        self.core.counted(r)
    }

    fn establish_seal(&mut self, ike: IkeSaHandle) -> Result<EstablishSeal> {
        let r = self.core.establish_seal(ike);
        self.core.counted(r)
    }

    fn ike_sa_restore(&mut self, state: &SealedBlob) -> Result<IkeSaHandle> {
        let r = self.core.ike_sa_restore(state);
        self.core.counted(r)
    }

    fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> Result<()> {
        let r = self.core.ike_sa_delete(ike);
        self.core.counted(r)
    }

    fn ike_sa_unseal_sk_d(&mut self, ike: IkeSaHandle, sealed_sk_d: &SealedBlob) -> Result<()> {
        let r = self.core.ike_sa_unseal_sk_d(ike, sealed_sk_d);
        self.core.counted(r)
    }

    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        let r = self.core.esp_batch(packets, descriptors, status);
        self.core.counted(r)
    }

    fn esp_lane(&mut self) -> Option<Box<dyn EspCrossing>> {
        Some(Box::new(InlineEspLane { parts: self.core.esp_lane() }))
    }

    fn esp_sa_delete(&mut self, sa: EspSaHandle) -> Result<()> {
        let r = self.core.esp_sa_delete(sa);
        self.core.counted(r)
    }

    fn esp_sa_install_wrapped(&mut self, wrapped: &[u8], params: &EspSaParams) -> Result<EspSaHandle> {
        let r = self.core.esp_sa_install_wrapped(wrapped, params);
        self.core.counted(r)
    }
}
