//! The inline backend: the trusted code runs in the caller's process.
//!
//! This is the backend for the "whole pipeline inside the TEE" deployment (a confidential VM
//! whose entire memory is protected) and the performance reference for the others. In a
//! plain process it separates keys from the rest of Cloister by API only: code in the same
//! address space can read them. Use the process backend where the gateway process
//! itself is not trusted.

use crate::attest::AttestationProvider;
use crate::trusted::lane::EspLaneParts;
use crate::trusted::TrustedCore;
use enclave_api::error::Result;
use enclave_api::esp::{BatchSummary, EspDescriptor, EspStatus};
#[cfg(any(feature = "test-export", feature = "test-keys"))]
use enclave_api::handle::EspSaHandle;
use enclave_api::handle::TenantId;
use enclave_api::ledger::{Ledger, MemoryLedger};
use enclave_api::report::EnclaveConfig;
use enclave_api::EspCrossing;

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

// Every primitive call goes to the trusted core, its refusal counted; the composite calls
// keep the trait's defaults (in process they cost no crossing).
enclave_api::forward_enclave! {
    primitives impl[] for InlineEnclave, via |this| this.core, result |r| this.core.counted(r);

    fn tenant(&self) -> TenantId {
        self.core.tenant()
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
}
