//! The enclave's call surface: the one [`Enclave`] trait and the plain types that cross the
//! boundary (handles, algorithm names, lengths, descriptors, statuses, sizes, refusals, and
//! the public formats of evidence, offers and migration packages).
//!
//! Nothing here holds or computes on a key: this crate has no cryptography. The untrusted
//! crates (`ike`, `esp`, `store`, `migrate`, `dataplane`, `gateway`) depend on it alone;
//! the trusted core that implements it is `cloister-enclave`, and the evidence and
//! verification cryptography every verifier needs is `cloister-attest`.
#![deny(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod alg;
pub mod attest;
pub mod calls;
#[doc(hidden)]
pub mod der;
pub mod error;
pub mod esp;
pub mod handle;
pub mod ike;
pub mod ledger;
pub mod migration;
pub mod process;
pub mod provision;
pub mod report;
#[cfg(feature = "testing")]
pub mod testing;

pub use alg::{AuthMethod, Cipher, DhGroup, Integ, Prf, Role, SecretKind, SignatureScheme, SkLayout, Suite};
pub use calls::Enclave;
pub use error::{refusal, BlobRejection, Error, ErrorKind, Result};
pub use esp::{BatchSummary, EspDescriptor, EspOpcode, EspSaParams, EspStatus, ESP_DESCRIPTOR_LEN};
pub use handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle, TenantId};
pub use ike::{
    AuthAnswered, AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal,
    IkeSaParams, IntermediateExchange, OurAuth, PeerAuthCheck, PeerCredential, PublicKey, PublicKeyKind,
    SealedBlob,
};
pub use provision::{seal_format, ProvisioningOffer};
pub use report::{
    Backend, Counters, EnclaveConfig, InboundMode, Limits, MemoryReport, ProvisioningKey, PublicConfig,
    MAX_PLATFORM_PUBLIC_KEY, MAX_TRUSTED_PLATFORMS,
};

/// Bytes of one IKE nonce from [`Enclave::ike_nonces`].
pub const IKE_NONCE_LEN: usize = 48;

/// What the ESP data path needs of an enclave: one crossing per batch. Every [`Enclave`] is
/// one; so is a lane ([`Enclave::esp_lane`]).
pub trait EspCrossing: Send {
    /// Processes a batch of ESP packets, as [`Enclave::esp_batch`].
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary>;
}

impl<E: Enclave + ?Sized> EspCrossing for E {
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        self.esp_batch(packets, descriptors, status)
    }
}
