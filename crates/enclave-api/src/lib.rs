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
pub use error::{refusal, BlobRejection, Error, ErrorKind, Result};
pub use esp::{BatchSummary, EspDescriptor, EspOpcode, EspSaParams, EspStatus, ESP_DESCRIPTOR_LEN};
pub use handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle, TenantId};
pub use ike::{
    AuthAnswered, AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal,
    IkeSaParams, OurAuth, PeerAuthCheck, PeerCredential, PublicKey, PublicKeyKind, SealedBlob,
};
pub use provision::{seal_format, ProvisioningOffer};
pub use report::{
    Backend, Counters, EnclaveConfig, InboundMode, Limits, MemoryReport, ProvisioningKey, PublicConfig,
    MAX_PLATFORM_PUBLIC_KEY, MAX_TRUSTED_PLATFORMS,
};

/// Bytes of one IKE nonce from [`Enclave::ike_nonces`].
pub const IKE_NONCE_LEN: usize = 48;

use attest::Evidence;
use core::ops::Range;
use migration::{DestinationKey, MigrationPackage, MigrationRestore, OaepHash};

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

/// The enclave's calls ("ECalls"): one per IKE step, one per ESP batch.
///
/// Implemented by [`crate::InlineEnclave`] (trusted code in-process) and, later, by the
/// isolated-process backend. Every argument is untrusted: handles, lengths and offsets are
/// checked, and a refusal is a typed [`crate::Error`] (or a per-packet [`EspStatus`]) that
/// is counted and never carries key bytes.
pub trait Enclave: Send {
    /// The tenant this instance serves.
    fn tenant(&self) -> TenantId;

    /// Evidence that this enclave runs its measurement for its tenant, fresh for a
    /// verifier's `challenge`: purpose [`crate::attest::EvidencePurpose::Identity`], over
    /// [`crate::attest::identity_report_data`]. There is no call for evidence over report
    /// data the caller chooses: every other piece of evidence comes with the value it
    /// vouches for (an offer, a destination key, inside an exported package).
    fn identity_evidence(&mut self, challenge: &[u8; 32]) -> Result<Evidence>;

    /// Bytes of trusted memory held, per kind.
    fn memory_report(&self) -> MemoryReport;

    /// Refusals and packet outcomes since start.
    fn counters(&self) -> Counters;

    /// Unwraps a provisioning blob ([`crate::provision`]) and keeps the secret inside.
    fn provision_secret(&mut self, wrapped: &[u8]) -> Result<SecretHandle>;

    /// Attested provisioning, step 1 ([`crate::provision`]): a fresh X25519 key pair and
    /// challenge, the private key kept inside (at most 16 outstanding, the oldest evicted;
    /// each expires after [`crate::provision::OFFER_LIFETIME_SECS`]), the public part
    /// returned with evidence that binds it to this enclave.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn provisioning_offer(&mut self) -> Result<ProvisioningOffer> {
        Err(crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
    }

    /// Attested provisioning, step 3: opens a tenant's envelope
    /// ([`crate::provision::seal_to_offer`]) with the offer it names, which it consumes
    /// (single use), checks the secret as [`Self::provision_secret`] does for its kind, and
    /// keeps it. Also returns the secret sealed for restarts (kind 3,
    /// [`crate::seal_format`]): store it; [`Self::unseal_secret`] brings the secret back.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn provision_attested(&mut self, envelope: &[u8]) -> Result<(SecretHandle, SealedBlob)> {
        let _ = envelope;
        Err(crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
    }

    /// Keeps the secret of a sealed tenant secret (kind 3) that an instance of this tenant's
    /// enclave with the same root sealed in [`Self::provision_attested`]; refuses other
    /// kinds, other tenants' blobs, forged ones and ones a newer seal of the secret superseded.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn unseal_secret(&mut self, sealed: &SealedBlob) -> Result<SecretHandle> {
        let _ = sealed;
        Err(crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
    }

    /// Seals a secret this instance holds (e.g. one [`Self::import_state`] restored from a
    /// backup package) under this instance's root, as [`Self::provision_attested`] seals a
    /// new one (kind 3, [`crate::seal_format`]): store it; [`Self::unseal_secret`] on a later
    /// instance of this tenant and root brings the secret back. The secret stays here.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn seal_secret(&mut self, secret: SecretHandle) -> Result<SealedBlob> {
        let _ = secret;
        Err(crate::Error::Unsupported { what: "secret sealing on this backend", value: 0 })
    }

    /// Backup, source side ([`crate::migration`], "Backup packages"): checks that
    /// `certificate` is a backup root's certificate of `wrap_spki` for this enclave's
    /// measurement ([`crate::migration::backup_key_message`], roots from the measured
    /// configuration; otherwise [`crate::Error::ProtocolRefused`]), then makes a package of
    /// kind `Backup`, importable by [`Self::import_state`] with the HSM's rewrap of its one
    /// share (wrapped with RSA-OAEP `oaep` to `wrap_spki`), that carries the seal counter,
    /// every secret and `untrusted_state` but no IKE or ESP SA, signed with this enclave's
    /// evidence (purpose `Backup`). Leaves every SA as it is (no sequence number cap) and
    /// works whether or not this instance exported its state before: the tenant keeps
    /// serving, and restoring stale SAs would repeat AEAD IVs.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn export_secrets(
        &mut self,
        wrap_spki: &[u8],
        certificate: &[u8],
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let _ = (wrap_spki, certificate, oaep, untrusted_state);
        Err(crate::Error::Unsupported { what: "secret backup on this backend", value: 0 })
    }

    /// Migration, source side ([`crate::migration`]): checks `destination` (its evidence
    /// verifies under a platform key of this enclave's measured configuration, for this
    /// tenant and this measurement; otherwise [`crate::Error::ProtocolRefused`]), then
    /// serialises every secret and SA this instance holds, with `untrusted_state` (opaque
    /// here, but encrypted and authenticated with the rest), into a package under a data key
    /// made of a share wrapped to the destination's key and, in envelope mode, one wrapped
    /// to `hsm_spki` (an HSM one-time key pair's public key), RSA-OAEP `oaep`; signs it with
    /// this enclave's evidence bound to the destination key. Caps every outbound ESP SA of
    /// this instance at its last sequence number plus [`crate::migration::SEQ_MARGIN`];
    /// refuses an outbound SA exported before.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn export_state(
        &mut self,
        destination: &DestinationKey,
        hsm_spki: Option<&[u8]>,
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let _ = (destination, hsm_spki, oaep, untrusted_state);
        Err(crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
    }

    /// Migration, destination side: a fresh RSA key pair of `bits` (2048..=4096; see
    /// [`crate::migration::DEFAULT_DESTINATION_BITS`]), the private key kept inside for one
    /// import (a new call destroys the previous one), the public key returned with evidence
    /// whose report data is [`crate::migration::destination_report_data`] of it.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn migration_destination_key(&mut self, bits: usize) -> Result<DestinationKey> {
        let _ = bits;
        Err(crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
    }

    /// Migration, destination side, into an instance that holds no secret and no SA yet
    /// (otherwise [`crate::Error::ProtocolRefused`]): checks the package's evidence (a
    /// trusted platform's enclave of this tenant and measurement made this very package, for
    /// this instance's destination key if it is a move), opens its shares with the
    /// destination key, which this consumes whatever happens next, `hsm_share` being the
    /// package's HSM share as the HSM rewrapped it to that key; decrypts the package and
    /// installs its state, all or nothing. Returns the new handles and the untrusted state.
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn import_state(
        &mut self,
        package: &MigrationPackage,
        hsm_share: Option<&[u8]>,
    ) -> Result<MigrationRestore> {
        let _ = (package, hsm_share);
        Err(crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
    }

    /// What kind of secret a handle names.
    fn secret_kind(&mut self, secret: SecretHandle) -> Result<SecretKind>;

    /// Forgets a secret (zeroized where the key type allows, see docs/threat-model.md).
    fn delete_secret(&mut self, secret: SecretHandle) -> Result<()>;

    /// Fills `out` (16..=256 bytes) from the enclave's CSPRNG: public random values (SPIs,
    /// cookie secrets, timer jitter). Never an IKE nonce: those come from [`Self::ike_nonces`].
    fn random_nonce(&mut self, out: &mut [u8]) -> Result<()>;

    /// Fills `out` with fresh IKE Nonce Data of this enclave, [`crate::IKE_NONCE_LEN`] bytes
    /// each (`out.len()` a whole number of them). Every IKE SA and child SA derivation must
    /// name one of these as our side's nonce, which it spends (one derivation per nonce), and
    /// our role in that exchange is the position the nonce holds (Ni: initiator); only
    /// IKE_AUTH's first child reuses IKE_SA_INIT's pair, once. The enclave recognises its
    /// nonces by a MAC; it tracks the use of the last 65536 issued and refuses older ones.
    fn ike_nonces(&mut self, out: &mut [u8]) -> Result<()>;

    /// Generates an ephemeral DH private value and writes its public value (Key Exchange
    /// Data, exactly [`DhGroup::public_len`] bytes) to `public_out`.
    fn dh_generate(&mut self, group: DhGroup, public_out: &mut [u8]) -> Result<DhHandle>;

    /// Forgets an unused DH private value.
    fn dh_delete(&mut self, dh: DhHandle) -> Result<()>;

    /// IKE_SA_INIT done: agrees on g^ir (consuming `dh`), derives SKEYSEED and
    /// SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr (RFC 7296 §2.14). SKEYSEED and g^ir
    /// are never stored.
    fn ike_sa_create(&mut self, dh: DhExchange<'_>, params: &IkeSaParams<'_>) -> Result<IkeSaHandle>;

    /// The responder's key work for IKE_SA_INIT in one call: a fresh DH value of `group`
    /// (its public value into `public_out`, as [`Self::dh_generate`]), agreed with
    /// `peer_public` into a new IKE SA (as [`Self::ike_sa_create`]). The default makes those
    /// two calls; a backend whose calls cross a boundary makes it one crossing.
    fn ike_sa_respond(
        &mut self,
        group: DhGroup,
        peer_public: &[u8],
        public_out: &mut [u8],
        params: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        let dh = self.dh_generate(group, public_out)?;
        self.ike_sa_create(DhExchange { dh, peer_public }, params)
    }

    /// CREATE_CHILD_SA rekeying `old` (RFC 7296 §2.18): SKEYSEED = prf_old(SK_d_old,
    /// g^ir_new | Ni | Nr). Pass the sealed SK_d blob once `old` has been cleared and sealed.
    /// The new SA holds no SK_pi/SK_pr: a rekeyed IKE SA never authenticates again.
    fn ike_sa_rekey(
        &mut self,
        old: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        dh: DhExchange<'_>,
        params: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle>;

    /// Computes our AUTH payload's Authentication Data into `out`; returns the Auth Method
    /// and the number of bytes written.
    fn auth_compute(
        &mut self,
        ike: IkeSaHandle,
        credential: SecretHandle,
        spec: AuthSpec,
        input: &AuthInput<'_>,
        out: &mut [u8],
    ) -> Result<(AuthMethod, usize)>;

    /// Verifies the peer's AUTH payload (`method` and `auth_data` as received).
    fn auth_verify(
        &mut self,
        ike: IkeSaHandle,
        peer: PeerCredential<'_>,
        method: u8,
        auth_data: &[u8],
        input: &AuthInput<'_>,
    ) -> Result<AuthVerified>;

    /// Verifies the peer's AUTH and, only once it has verified, computes ours into `out`:
    /// the responder's half of IKE_AUTH in one call, which a backend whose calls cross a
    /// boundary makes one crossing. `Err` means the peer's AUTH was refused, as from
    /// [`Self::auth_verify`]; an error computing ours is in [`AuthAnswered::ours`].
    fn auth_verify_compute(
        &mut self,
        ike: IkeSaHandle,
        peer: &PeerAuthCheck<'_>,
        ours: &OurAuth<'_>,
        out: &mut [u8],
    ) -> Result<AuthAnswered> {
        let verified = self.auth_verify(ike, peer.credential, peer.method, peer.auth_data, &peer.input)?;
        let ours = self.auth_compute(ike, ours.credential, ours.spec, &ours.input, out);
        Ok(AuthAnswered { verified, ours })
    }

    /// Protects an outgoing message in place. `message` starts at the IKE header and ends at
    /// the ICV; `message[..aad_len]` is the IKE header through the SK (or SKF) payload header,
    /// already final; the inner payloads are the next `plaintext_len` bytes after the IV.
    /// Its length must be `aad_len + suite.sk_layout(plaintext_len).body_len(plaintext_len)`.
    /// The enclave writes IV, padding, Pad Length and ICV and encrypts.
    fn sk_encrypt(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> Result<()>;

    /// Checks and decrypts an incoming message in place (same layout as [`Self::sk_encrypt`]);
    /// returns where the inner payloads now are. The ICV is verified before any plaintext
    /// is released.
    fn sk_decrypt(&mut self, ike: IkeSaHandle, message: &mut [u8], aad_len: usize) -> Result<Range<usize>>;

    /// Derives a child SA's KEYMAT (RFC 7296 §2.17), with a PFS DH agreement when `pfs` is
    /// given, and installs both directions.
    fn child_sa_create(
        &mut self,
        ike: IkeSaHandle,
        sealed_sk_d: Option<&SealedBlob>,
        pfs: Option<DhExchange<'_>>,
        params: &ChildSaParams<'_>,
    ) -> Result<ChildSaPair>;

    /// EnclaveVPN clear-and-seal (§4.5.2), once IKE_AUTH is done: zeroizes SK_pi/SK_pr and
    /// moves SK_d out of trusted memory into a sealed blob for later rekeys.
    fn clear_and_seal(&mut self, ike: IkeSaHandle) -> Result<SealedBlob>;

    /// Seals what a restarted enclave needs to bring back a cleared-and-sealed IKE SA
    /// (SK_ai/SK_ar/SK_ei/SK_er and the counter of its SK_d blob; never SK_p*): store it
    /// beside the SK_d blob. Refused with [`crate::Error::NotSealed`] before clear-and-seal.
    fn ike_sa_seal_state(&mut self, ike: IkeSaHandle) -> Result<SealedBlob>;

    /// What the IKE engine does once IKE_AUTH is done, in one call: clear-and-seal, the
    /// sealing of the restart state, and the trusted bytes of this IKE SA before and after
    /// (the engine reports them). One crossing in a backend whose calls cross a boundary.
    /// The cost must not grow with the number of SAs held: it runs once per tunnel set up.
    fn establish_seal(&mut self, ike: IkeSaHandle) -> Result<EstablishSeal>;

    /// [`Self::sk_encrypt`] of the last message of IKE_AUTH, then [`Self::establish_seal`]:
    /// one crossing where the two would be two. Nothing is sealed when the encryption fails.
    fn sk_encrypt_establish(
        &mut self,
        ike: IkeSaHandle,
        message: &mut [u8],
        aad_len: usize,
        plaintext_len: usize,
    ) -> Result<EstablishSeal> {
        self.sk_encrypt(ike, message, aad_len, plaintext_len)?;
        self.establish_seal(ike)
    }

    /// Brings back an IKE SA from a state blob sealed by an earlier instance of this
    /// tenant's enclave (same provisioning key). Its SK_d comes from the SK_d blob as before;
    /// child SAs are not restored — rekey them through the restored IKE SA, since an
    /// outbound ESP SA restored from a snapshot could reuse sequence numbers (AEAD IVs).
    /// Refused while an IKE SA with the blob's SPIs is live in this instance: two copies of
    /// one SA would send under one SK_e and derive children from one SK_d. Refused too
    /// ([`crate::BlobRejection::Rollback`]) unless the blob is the SA's latest state and the
    /// SA was not deleted: the platform's ledger says so, not the caller.
    fn ike_sa_restore(&mut self, state: &SealedBlob) -> Result<IkeSaHandle>;

    /// Makes a cleared-and-sealed IKE SA's SK_d resident again from `sealed_sk_d`, so that
    /// [`Self::export_state`] carries it (another host's enclave cannot open this one's
    /// blobs); the destination seals it anew with [`Self::clear_and_seal`].
    fn ike_sa_unseal_sk_d(&mut self, ike: IkeSaHandle, sealed_sk_d: &SealedBlob) -> Result<()> {
        let _ = (ike, sealed_sk_d);
        Err(crate::Error::Unsupported { what: "SK_d unsealing on this backend", value: 0 })
    }

    /// Forgets an IKE SA: its keys are zeroized, its SK_d blob no longer opens here (no SA
    /// holds its counter), and its state blob restores it nowhere (the platform's ledger
    /// retires the blob's counter).
    fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> Result<()>;

    /// Processes a batch of ESP packets in one crossing; one status per descriptor.
    /// The whole call is refused only when the batch itself is malformed (too many
    /// descriptors, `status.len() != descriptors.len()`).
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary>;

    /// A lane of this instance for one worker: batches on it run at the same time as other
    /// lanes' and this instance's own `esp_batch`, on the same SAs. `None` where the backend
    /// runs one batch at a time (then workers share the instance behind a lock).
    fn esp_lane(&mut self) -> Option<Box<dyn EspCrossing>> {
        None
    }

    /// Forgets one direction of an ESP SA.
    fn esp_sa_delete(&mut self, sa: EspSaHandle) -> Result<()>;

    /// Installs one direction of a static ESP SA (no IKE) from keys the tenant wrapped for
    /// this enclave ([`crate::provision::wrap_esp_sa_keys`]): the blob is opened, its
    /// direction, SPI and transform must be `params`', its key lengths the transform's, and
    /// the keys go straight into the SA; they are not kept as a secret. Refused when the
    /// encryption key is already an outbound SA's of this instance, or used in the other
    /// direction ([`crate::Error::KeyReuse`]: a static outbound SA starts at sequence number
    /// 1, so installing its keys twice would repeat IVs).
    ///
    /// The default refuses: backends implement it, and wrappers must forward it.
    fn esp_sa_install_wrapped(&mut self, wrapped: &[u8], params: &EspSaParams) -> Result<EspSaHandle> {
        let _ = (wrapped, params);
        Err(crate::Error::Unsupported { what: "static ESP SAs from wrapped keys on this backend", value: 0 })
    }
}
