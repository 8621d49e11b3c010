//! The trusted component: every key lives here and every operation on keys runs here.
//!
//! Crate-private. Backends ([`crate::InlineEnclave`] today, the isolated process later) own a
//! [`TrustedCore`] and forward calls to it; nothing outside this module sees a key byte.

pub(crate) mod auth;
pub(crate) mod awslc;
pub(crate) mod cbc_mode;
pub(crate) mod dh;
pub(crate) mod esp;
pub(crate) mod esp_keys;
pub(crate) mod esp_wrapped;
pub(crate) mod ike_keys;
pub(crate) mod keybuf;
pub(crate) mod lane;
pub(crate) mod migration;
pub(crate) mod modp;
pub(crate) mod nonce;
pub(crate) mod peers;
pub(crate) mod prf;
pub(crate) mod provisioning;
pub(crate) mod seal;
pub(crate) mod selftest;
pub(crate) mod sent;
pub(crate) mod sk;
#[cfg(test)]
mod strongswan_kat;
pub(crate) mod table;
pub(crate) mod transcript;
#[cfg(test)]
mod vectors;

use crate::attest::{AttestationProvider, Evidence, EvidencePurpose};
use crate::migration::{
    destination_report_data, why as mwhy, DestinationKey, MigrationPackage, MigrationRestore, OaepHash,
    PackageKind, MAX_UNTRUSTED_STATE, SEQ_MARGIN,
};
use crate::provision::{offer_report_data, ProvisioningOffer, OFFER_LIFETIME_SECS};
use auth::{PeerKey, Secret};
use core::ops::Range;
use dh::{DhSecret, SharedSecret};
use enclave_api::alg::{AuthMethod, Cipher, DhGroup, Integ, Prf, Role, SecretKind, Suite};
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspSaParams, EspStatus};
use enclave_api::handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle, TenantId};
use enclave_api::ike::{
    AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal, IkeSaParams,
    IntermediateExchange, PeerCredential, SealedBlob,
};
use enclave_api::ledger::{Ledger, LedgerError};
use enclave_api::report::{Counters, EnclaveConfig, Limits, MemoryReport};
use esp::{Direction, EspSa};
use ike_keys::{IkeSa, SkeyseedSource};
use lane::{EspLaneParts, Lane};
use migration::{PackageWriter, ShareKeys, StateReader, StateWriter};
use ring::rand::{SecureRandom, SystemRandom};
use seal::{RootKeys, SealBinding};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;
use table::Table;
use zeroize::Zeroizing;

/// Bytes of stack [`scrub_stack`] overwrites.
const STACK_SCRUB: usize = 64 * 1024;

/// A ledger that failed: the seal or install it was for does not happen.
fn ledger_error(e: LedgerError) -> Error {
    match e {
        LedgerError::Full => Error::Exhausted { what: "platform ledger (seal counters or static keys)" },
        LedgerError::Unavailable => Error::Internal { what: "platform ledger unavailable" },
    }
}

/// Overwrites the stack below the caller with zeros. Crypto libraries (ring's AES-GCM among
/// them) leave copies of key schedules in the stack frames of their per-packet calls, which
/// nothing zeroizes; deleting a key runs this from the same call depth as the ESP and IKE
/// calls, so the frames those calls used are overwritten and no copy of a deleted key
/// outlives it. Needs a thread stack larger than [`STACK_SCRUB`] (the default 8 MiB main
/// stack and 2 MiB thread stacks are).
pub(crate) fn scrub_stack() {
    scrub_stack_by::<STACK_SCRUB>();
}

/// Overwrites `N` bytes of stack below the caller with zeros (see [`scrub_stack`]).
#[inline(never)]
pub(crate) fn scrub_stack_by<const N: usize>() {
    let mut area = [0u8; N];
    zeroize::Zeroize::zeroize(&mut area[..]);
    core::hint::black_box(&area);
}

/// The state of one enclave instance (one tenant).
pub(crate) struct TrustedCore {
    tenant: TenantId,
    rng: SystemRandom,
    root: RootKeys,
    /// The platform's record of seal counters and static keys, which outlives this
    /// instance (see `enclave_api::ledger`).
    ledger: Box<dyn Ledger>,
    /// The live seal counter of each secret sealed or unsealed here: sealing it again
    /// retires the older blob.
    sealed_as: std::collections::HashMap<u32, u64>,
    /// The live counter of each IKE SA's latest state blob: sealing the state again, or
    /// deleting the SA, retires it, so no later instance restores an older state.
    ike_state_as: std::collections::HashMap<u32, u64>,
    limits: Limits,
    secrets: Table<Secret>,
    /// DH private values, each with the digest of its public value (for the transcript).
    dh: Table<(DhSecret, [u8; 32])>,
    ike: Table<IkeSa>,
    /// The ESP SAs, shared with the lanes workers hold (see `lane`): they read-lock it per
    /// batch; every change here write-locks it.
    esp: Arc<RwLock<Table<EspSa>>>,
    /// The lane of this instance's own `esp_batch` calls.
    lane: Lane,
    /// The lanes handed out ([`Self::esp_lane`]); dropped ones are pruned on the next change.
    lanes: Vec<Arc<Mutex<Lane>>>,
    /// ESP SA deletions so far: a lane that sees it move scrubs its thread's stack.
    esp_deletes: Arc<AtomicU64>,
    /// Outstanding attested-provisioning offers (their X25519 private keys).
    offers: provisioning::Offers,
    /// The migration destination key pair, until an import consumes it.
    destination: Option<Box<migration::DestinationKeyPair>>,
    /// Our IKE nonces: issued, recognised and spent here (see `nonce`).
    nonces: nonce::Nonces,
    /// The platforms whose enclaves state moves to and from (measured).
    platforms: peers::TrustedPlatforms,
    /// The roots whose certificate makes an HSM key a backup key (measured).
    backup_roots: peers::BackupRoots,
    /// The keys the tenant signs its secrets with (measured); none: unsigned secrets go in.
    signers: peers::TenantSigners,
    counters: Counters,
    attestation: Box<dyn AttestationProvider>,
}

impl core::fmt::Debug for TrustedCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TrustedCore")
            .field("tenant", &self.tenant)
            .field("ike_sas", &self.ike.live())
            .field("esp_sas", &self.esp_read().live())
            .field("esp_lanes", &self.lanes.len())
            .field("secrets", &self.secrets.live())
            .field("offers", &self.offers.len())
            .field("destination_key", &self.destination.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for TrustedCore {
    fn drop(&mut self) {
        // Lanes a worker still holds share the table: empty it, and their key caches, so no
        // key outlives the instance (a lane's next batch finds no SA).
        self.esp_write().clear();
        for l in &self.lanes {
            l.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
        self.esp_deletes.fetch_add(1, Ordering::Release);
    }
}

impl TrustedCore {
    /// Runs the known-answer self-tests, then builds the instance.
    pub(crate) fn start(
        config: EnclaveConfig,
        attestation: Box<dyn AttestationProvider>,
        ledger: Box<dyn Ledger>,
    ) -> Result<Self> {
        selftest::run().map_err(|test| Error::SelfTestFailed { test })?;
        let rng = SystemRandom::new();
        let mut tag = [0u8; 1];
        while tag[0] == 0 {
            rng.fill(&mut tag).map_err(|_| Error::Random)?;
        }
        let tag = tag[0];
        let nonces = nonce::Nonces::new(&rng)?;
        let l = config.limits;
        Ok(Self {
            tenant: config.tenant,
            root: RootKeys::new(config.provisioning_key.expose(), config.tenant)?,
            rng,
            ledger,
            sealed_as: std::collections::HashMap::new(),
            ike_state_as: std::collections::HashMap::new(),
            limits: l,
            secrets: Table::new(HandleKind::Secret, tag, l.max_secrets),
            dh: Table::new(HandleKind::Dh, tag, l.max_dh),
            ike: Table::new(HandleKind::IkeSa, tag, l.max_ike_sas),
            esp: Arc::new(RwLock::new(Table::new(HandleKind::EspSa, tag, l.max_esp_sas))),
            lane: Lane::new(esp_keys::MAX_CACHED),
            lanes: Vec::new(),
            esp_deletes: Arc::new(AtomicU64::new(0)),
            offers: provisioning::Offers::default(),
            destination: None,
            nonces,
            platforms: peers::TrustedPlatforms::new(&config.trusted_platforms)?,
            backup_roots: peers::BackupRoots::new(&config.backup_roots)?,
            signers: peers::TenantSigners::new(&config.tenant_signers)?,
            counters: Counters::default(),
            attestation,
        })
    }

    pub(crate) fn tenant(&self) -> TenantId {
        self.tenant
    }

    /// This instance's counters with every lane's added in.
    pub(crate) fn counters(&self) -> Counters {
        let mut c = self.counters;
        c.add(&self.lane.counters);
        for l in &self.lanes {
            c.add(&l.lock().unwrap_or_else(PoisonError::into_inner).counters);
        }
        c
    }

    /// The ESP SA table, read. A poisoned lock is taken anyway: only this core writes the
    /// table, through calls that do not panic, and refusing would strand the keys.
    fn esp_read(&self) -> RwLockReadGuard<'_, Table<EspSa>> {
        self.esp.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ESP SA table, to change (waits for the lanes' batches in flight).
    fn esp_write(&self) -> RwLockWriteGuard<'_, Table<EspSa>> {
        self.esp.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new lane for one worker: ESP batches on it run alongside other lanes' and this
    /// instance's own.
    pub(crate) fn esp_lane(&mut self) -> EspLaneParts {
        self.lanes.retain(|l| Arc::strong_count(l) > 1);
        let lane = Arc::new(Mutex::new(Lane::new(esp_keys::MAX_CACHED)));
        self.lanes.push(Arc::clone(&lane));
        EspLaneParts {
            table: Arc::clone(&self.esp),
            lane,
            deletes: Arc::clone(&self.esp_deletes),
            seen_deletes: self.esp_deletes.load(Ordering::Acquire),
            max_batch: self.limits.max_batch,
        }
    }

    /// Clears the deleted SA `handle` (owner `owner`) from every lane's key cache, and
    /// makes the lanes scrub their stacks on their next batch.
    fn forget_esp_key(&mut self, handle: u32, owner: u64) {
        self.lane.forget(handle, owner);
        self.lanes.retain(|l| Arc::strong_count(l) > 1);
        for l in &self.lanes {
            l.lock().unwrap_or_else(PoisonError::into_inner).forget(handle, owner);
        }
        self.esp_deletes.fetch_add(1, Ordering::Release);
    }

    /// Counts a refusal and passes the result on.
    pub(crate) fn counted<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.counters.record_error(e.kind());
        }
        r
    }

    pub(crate) fn identity_evidence(&mut self, challenge: &[u8; 32]) -> Result<Evidence> {
        let rd = crate::attest::identity_report_data(self.tenant, challenge);
        self.attestation.evidence(self.tenant, EvidencePurpose::Identity, &rd)
    }

    pub(crate) fn memory_report(&self) -> MemoryReport {
        let esp = self.esp_read();
        let (mut lane_keys, mut lane_fixed) = (self.lane.key_bytes(), self.lane.fixed_bytes());
        for l in &self.lanes {
            let l = l.lock().unwrap_or_else(PoisonError::into_inner);
            lane_keys += l.key_bytes();
            lane_fixed += l.fixed_bytes() + core::mem::size_of::<Arc<Mutex<Lane>>>();
        }
        MemoryReport {
            ike_sas: self.ike.live(),
            ike_sa_bytes: self.ike.entries().map(IkeSa::footprint).sum(),
            esp_sas: esp.live(),
            esp_sa_bytes: esp.entries().map(EspSa::footprint).sum::<usize>() + lane_keys,
            dh_values: self.dh.live(),
            dh_bytes: self.dh.entries().map(|(d, _)| d.footprint() + 32).sum(),
            secrets: self.secrets.live(),
            secret_bytes: self.secrets.entries().map(Secret::footprint).sum(),
            fixed_bytes: core::mem::size_of::<Self>()
                + lane_fixed
                + (self.sealed_as.capacity() + self.ike_state_as.capacity()) * 16
                + self.offers.bytes()
                + self.nonces.bytes()
                + self.platforms.bytes()
                + self.backup_roots.bytes()
                + self.signers.bytes()
                + self.ike.overhead_bytes()
                + esp.overhead_bytes()
                + self.dh.overhead_bytes()
                + self.secrets.overhead_bytes(),
        }
    }

    pub(crate) fn provision_secret(&mut self, wrapped: &[u8]) -> Result<SecretHandle> {
        self.signers.allow_unsigned()?;
        let (kind, bytes) = seal::open_provisioning(&self.root, self.tenant, wrapped)?;
        let secret = Secret::load(kind, &bytes, &self.rng)?;
        self.secrets.insert(secret).map(SecretHandle)
    }

    pub(crate) fn provisioning_offer(&mut self) -> Result<ProvisioningOffer> {
        self.provisioning_offer_at(Instant::now())
    }

    /// [`Self::provisioning_offer`] at a given time (tests move the clock).
    pub(crate) fn provisioning_offer_at(&mut self, now: Instant) -> Result<ProvisioningOffer> {
        let offer = self.offers.issue(&self.rng, now)?;
        let report_data = offer_report_data(self.tenant, &offer.public, &offer.challenge);
        let evidence =
            self.attestation.evidence(self.tenant, EvidencePurpose::ProvisioningOffer, &report_data)?;
        Ok(ProvisioningOffer {
            challenge: offer.challenge,
            public_key: offer.public,
            evidence,
            lifetime_secs: OFFER_LIFETIME_SECS,
        })
    }

    pub(crate) fn provision_attested(&mut self, envelope: &[u8]) -> Result<(SecretHandle, SealedBlob)> {
        self.provision_attested_at(envelope, Instant::now())
    }

    /// [`Self::provision_attested`] at a given time (tests move the clock past the lifetime).
    pub(crate) fn provision_attested_at(
        &mut self,
        envelope: &[u8],
        now: Instant,
    ) -> Result<(SecretHandle, SealedBlob)> {
        // Refuse before the offer is spent if the secret could not be kept anyway.
        if self.secrets.live() >= self.limits.max_secrets.min(table::MAX_ENTRIES) {
            return Err(Error::TableFull { kind: HandleKind::Secret, max: self.limits.max_secrets });
        }
        let counter = self.next_seal_counter(true)?;
        let kept = self.keep_provisioned(envelope, now, counter);
        self.retired_unless_sealed(counter, kept)
    }

    /// Opens `envelope`, keeps its secret and seals it under `counter`.
    fn keep_provisioned(
        &mut self,
        envelope: &[u8],
        now: Instant,
        counter: u64,
    ) -> Result<(SecretHandle, SealedBlob)> {
        let (kind, bytes) =
            provisioning::open_envelope(&mut self.offers, &self.signers, self.tenant, envelope, now)?;
        let secret = Secret::load(kind, &bytes, &self.rng)?;
        let mut body = Zeroizing::new(Vec::with_capacity(1 + bytes.len()));
        body.push(kind.code());
        body.extend_from_slice(&bytes);
        drop(bytes);
        let blob = seal::seal_tenant_secret(&self.root, &self.rng, self.tenant, counter, &body)?;
        drop(body);
        let handle = self.secrets.insert(secret)?;
        self.sealed_as.insert(handle, counter);
        Ok((SecretHandle(handle), SealedBlob(blob)))
    }

    pub(crate) fn unseal_secret(&mut self, sealed: &SealedBlob) -> Result<SecretHandle> {
        let (counter, body) = seal::open_tenant_secret(&self.root, self.tenant, &sealed.0)?;
        // Superseded by a later seal of the same secret (or never issued live here).
        if !self.ledger.is_live(counter).map_err(ledger_error)? {
            return Err(Error::SealedBlob { reason: enclave_api::error::BlobRejection::Rollback });
        }
        let malformed = Error::SealedBlob { reason: enclave_api::error::BlobRejection::Malformed };
        let (&code, bytes) = body.split_first().ok_or(malformed.clone())?;
        let kind = SecretKind::from_code(code).filter(|k| *k != SecretKind::EspSaKeys).ok_or(malformed)?;
        let secret = Secret::load(kind, bytes, &self.rng)?;
        drop(body);
        let handle = self.secrets.insert(secret)?;
        self.sealed_as.insert(handle, counter);
        Ok(SecretHandle(handle))
    }

    /// Seals a secret held here as a tenant secret, as [`Self::provision_attested_at`] seals
    /// a new one, so that [`Self::unseal_secret`] of a later instance brings it back.
    pub(crate) fn seal_secret(&mut self, h: SecretHandle) -> Result<SealedBlob> {
        let kind = self.secrets.get(h.0)?.kind();
        // `unseal_secret` refuses this kind: a blob of it would never open again.
        if kind == SecretKind::EspSaKeys {
            return Err(Error::WrongSecretKind { handle: h.0, what: "sealing as a tenant secret" });
        }
        let counter = self.next_seal_counter(true)?;
        let encoding = self.secrets.get(h.0)?.encoding();
        let mut body = Zeroizing::new(Vec::with_capacity(1 + encoding.len()));
        body.push(kind.code());
        body.extend_from_slice(encoding);
        let blob = seal::seal_tenant_secret(&self.root, &self.rng, self.tenant, counter, &body);
        drop(body);
        let blob = self.retired_unless_sealed(counter, blob)?;
        // The newer blob supersedes the older: only one opens after a restart.
        if let Some(old) = self.sealed_as.insert(h.0, counter) {
            self.ledger.retire(old).map_err(ledger_error)?;
        }
        Ok(SealedBlob(blob))
    }

    /// Offers outstanding (tests).
    #[cfg(test)]
    pub(crate) fn outstanding_offers(&self) -> usize {
        self.offers.len()
    }

    pub(crate) fn secret_kind(&self, h: SecretHandle) -> Result<SecretKind> {
        self.secrets.get(h.0).map(Secret::kind)
    }

    pub(crate) fn delete_secret(&mut self, h: SecretHandle) -> Result<()> {
        self.secrets.remove(h.0).map(drop)?;
        // Its blob stays live: a handle is this instance's, the blob the store's.
        self.sealed_as.remove(&h.0);
        scrub_stack();
        Ok(())
    }

    pub(crate) fn random_nonce(&mut self, out: &mut [u8]) -> Result<()> {
        ike_keys::check_nonce("nonce output", out)?;
        self.rng.fill(out).map_err(|_| Error::Random)
    }

    pub(crate) fn ike_nonces(&mut self, out: &mut [u8]) -> Result<()> {
        self.nonces.issue(&self.rng, out)
    }

    pub(crate) fn dh_generate(&mut self, group: DhGroup, public_out: &mut [u8]) -> Result<DhHandle> {
        let secret = DhSecret::generate(group, &self.rng, public_out)?;
        self.dh.insert((secret, transcript::digest(public_out))).map(DhHandle)
    }

    pub(crate) fn ke_respond(
        &mut self,
        group: DhGroup,
        peer: &[u8],
        public_out: &mut [u8],
    ) -> Result<DhHandle> {
        let secret = DhSecret::respond(group, peer, &self.rng, public_out)?;
        self.dh.insert((secret, transcript::digest(public_out))).map(DhHandle)
    }

    pub(crate) fn ike_sa_intermediate(
        &mut self,
        ike: IkeSaHandle,
        x: DhExchange<'_>,
        e: &IntermediateExchange<'_>,
    ) -> Result<()> {
        let refuse = Error::ProtocolRefused { why: enclave_api::error::refusal::NOT_THE_INTERMEDIATE };
        let sa = self.ike.get(ike.0)?;
        if sa.signed || sa.authenticated {
            return Err(Error::ProtocolRefused { why: enclave_api::error::refusal::AUTH_STARTED });
        }
        let (Some(sk_p), Some(sk_d)) = (sa.sk_p.as_ref(), sa.sk_d.as_ref()) else {
            return Err(Error::KeyCleared {
                what: "SK_d and SK_p (only IKE_SA_INIT's SA takes more key exchanges)",
            });
        };
        let t = sa.transcript.as_ref().ok_or(refuse.clone())?;
        if transcript::digest(e.nonce_i) != t.nonce[0] || transcript::digest(e.nonce_r) != t.nonce[1] {
            return Err(refuse);
        }
        let after = t.intermediate.as_ref().map_or(0, |a| a.mid);
        let exchange = transcript::Intermediate::check(e.request, e.response, sa.spi_i, sa.spi_r, after)?;
        let (secret, our_public) = self.dh.get(x.dh.0)?;
        let ours = if sa.role == Role::Initiator { 0 } else { 1 };
        if exchange.group != secret.group().id()
            || transcript::digest(exchange.ke[ours]) != *our_public
            || exchange.ke[1 - ours] != x.peer_public
        {
            return Err(refuse);
        }
        let int_auth = transcript::IntAuth::next(
            t.intermediate.as_ref(),
            sa.prf,
            sk_p.i.as_slice(),
            sk_p.r.as_slice(),
            &exchange,
        )?;
        let params = IkeSaParams {
            role: sa.role,
            prf: sa.prf,
            suite: sa.suite,
            nonce_i: e.nonce_i,
            nonce_r: e.nonce_r,
            spi_i: sa.spi_i,
            spi_r: sa.spi_r,
        };
        let sk_d = Zeroizing::new(sk_d.as_slice().to_vec());
        let (shared, _) = self.agree(x)?;
        let fresh = ike_keys::derive_ike_sa(SkeyseedSource::Intermediate { sk_d: &sk_d }, &shared, &params)?;
        let sa = self.ike.get_mut(ike.0)?;
        sa.sk_ai = fresh.sk_ai;
        sa.sk_ar = fresh.sk_ar;
        sa.sk_ei = fresh.sk_ei;
        sa.sk_er = fresh.sk_er;
        sa.sk_d = fresh.sk_d;
        sa.sk_p = fresh.sk_p;
        if let Some(t) = sa.transcript.as_mut() {
            t.intermediate = Some(int_auth);
        }
        Ok(())
    }

    pub(crate) fn dh_delete(&mut self, h: DhHandle) -> Result<()> {
        self.dh.remove(h.0).map(drop)
    }

    /// Consumes the DH value and agrees with the peer; also returns the digest of our
    /// public value.
    fn agree(&mut self, x: DhExchange<'_>) -> Result<(SharedSecret, [u8; 32])> {
        let entry = self.dh.remove(x.dh.0)?;
        let (secret, public) = *entry;
        Ok((secret.agree(x.peer_public)?, public))
    }

    pub(crate) fn ike_sa_create(&mut self, x: DhExchange<'_>, p: &IkeSaParams<'_>) -> Result<IkeSaHandle> {
        let (g_ir, our_public) = self.agree(x)?;
        // Our nonce is spent only once keys exist: a refused call derived nothing.
        let claim = self.nonces.claim(p.nonce_i, p.nonce_r, p.role)?;
        let mut sa = ike_keys::derive_ike_sa(SkeyseedSource::Initial, &g_ir, p)?;
        sa.first_child = Some(Box::new(ike_keys::nonce_pair(p.nonce_i, p.nonce_r)));
        let peer_public = transcript::digest(x.peer_public);
        let ke =
            if claim.role == Role::Initiator { [our_public, peer_public] } else { [peer_public, our_public] };
        let nonce = [transcript::digest(p.nonce_i), transcript::digest(p.nonce_r)];
        sa.transcript = Some(Box::new(transcript::Transcript { ke, nonce, intermediate: None }));
        let h = self.ike.insert(sa)?;
        self.nonces.spend(claim);
        Ok(IkeSaHandle(h))
    }

    /// Runs `f` with the IKE SA's SK_d: resident, or unsealed from `sealed` for the call only.
    fn with_sk_d<R>(
        &self,
        ike: IkeSaHandle,
        sealed: Option<&SealedBlob>,
        f: impl FnOnce(&IkeSa, &[u8]) -> Result<R>,
    ) -> Result<R> {
        let sa = self.ike.get(ike.0)?;
        if let Some(sk_d) = &sa.sk_d {
            return f(sa, sk_d.as_slice());
        }
        let blob = sealed.ok_or(Error::KeyCleared { what: "SK_d (sealed: pass the blob)" })?;
        let expected = sa.sealed_counter.ok_or(Error::KeyCleared { what: "SK_d" })?;
        let binding = SealBinding { tenant: self.tenant, prf: sa.prf, spi_i: sa.spi_i, spi_r: sa.spi_r };
        let sk_d = seal::unseal_sk_d(&self.root, &binding, expected, &blob.0)?;
        f(sa, sk_d.as_slice())
    }

    /// Makes a cleared-and-sealed IKE SA's SK_d resident again from its blob (before a
    /// move: the destination's sealing key differs, so the blob would not open there; the
    /// export then carries SK_d and the destination seals it anew).
    pub(crate) fn ike_sa_unseal_sk_d(&mut self, ike: IkeSaHandle, sealed: &SealedBlob) -> Result<()> {
        let sa = self.ike.get(ike.0)?;
        if sa.sk_d.is_some() {
            return Ok(());
        }
        let expected = sa.sealed_counter.ok_or(Error::KeyCleared { what: "SK_d" })?;
        let binding = SealBinding { tenant: self.tenant, prf: sa.prf, spi_i: sa.spi_i, spi_r: sa.spi_r };
        let sk_d = seal::unseal_sk_d(&self.root, &binding, expected, &sealed.0)?;
        let sa = self.ike.get_mut(ike.0)?;
        sa.sk_d = Some(Box::new(sk_d));
        // Resident now: the blob is no longer what this SA's SK_d is, and a package
        // carrying both would be refused as inconsistent.
        sa.sealed_counter = None;
        Ok(())
    }

    pub(crate) fn ike_sa_rekey(
        &mut self,
        old: IkeSaHandle,
        sealed: Option<&SealedBlob>,
        x: DhExchange<'_>,
        p: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        // A rekey with the KE transform's exchange only.
        self.ike_sa_rekey_additional(old, sealed, &[x], p)
    }

    pub(crate) fn ike_sa_rekey_additional(
        &mut self,
        old: IkeSaHandle,
        sealed: Option<&SealedBlob>,
        kes: &[DhExchange<'_>],
        p: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        if kes.is_empty() || kes.len() > 8 {
            return Err(Error::BadLength {
                what: "key exchanges",
                len: kes.len(),
                why: "one, and up to seven additional ones (RFC 9370)",
            });
        }
        // Every private value is consumed, whatever fails.
        let mut agreed = Vec::with_capacity(kes.len());
        let mut failed = None;
        for x in kes {
            match self.agree(*x) {
                Ok((z, _)) => agreed.push(z),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let (g_ir, more) = agreed.split_first().ok_or(Error::Internal { what: "key exchanges" })?;
        require_authenticated(self.ike.get(old.0)?)?;
        let claim = self.nonces.claim(p.nonce_i, p.nonce_r, p.role)?;
        let mut sa = self.with_sk_d(old, sealed, |old_sa, sk_d| {
            let source = SkeyseedSource::Rekey { old_prf: old_sa.prf, old_sk_d: sk_d, more };
            ike_keys::derive_ike_sa(source, g_ir, p)
        })?;
        sa.authenticated = true;
        let h = self.ike.insert(sa)?;
        self.nonces.spend(claim);
        Ok(IkeSaHandle(h))
    }

    pub(crate) fn auth_compute(
        &mut self,
        ike: IkeSaHandle,
        credential: SecretHandle,
        spec: AuthSpec,
        input: &AuthInput<'_>,
        out: &mut [u8],
    ) -> Result<(AuthMethod, usize)> {
        let sa = self.ike.get(ike.0)?;
        // After clear-and-seal the answer is that SK_p is gone (`auth::compute`).
        if sa.signed && sa.sk_p.is_some() {
            return Err(Error::ProtocolRefused { why: enclave_api::error::refusal::ALREADY_SIGNED });
        }
        check_transcript(sa, sa.role, input)?;
        let secret = self.secrets.get(credential.0)?;
        let computed = auth::compute(sa, secret, credential.0, spec, input, &self.rng, out)?;
        self.ike.get_mut(ike.0)?.signed = true;
        Ok(computed)
    }

    pub(crate) fn auth_verify(
        &mut self,
        ike: IkeSaHandle,
        peer: PeerCredential<'_>,
        method: u8,
        auth_data: &[u8],
        input: &AuthInput<'_>,
    ) -> Result<AuthVerified> {
        let sa = self.ike.get(ike.0)?;
        let peer_role = if sa.role == Role::Initiator { Role::Responder } else { Role::Initiator };
        check_transcript(sa, peer_role, input)?;
        let key = match peer {
            PeerCredential::SharedKey(h) => match self.secrets.get(h.0)? {
                Secret::Psk(psk) => PeerKey::Psk(psk),
                _ => return Err(Error::WrongSecretKind { handle: h.0, what: "Shared Key MIC" }),
            },
            PeerCredential::PublicKey(pk) => PeerKey::Public(pk),
        };
        let verified = auth::verify(sa, key, method, auth_data, input)?;
        self.ike.get_mut(ike.0)?.authenticated = true;
        Ok(verified)
    }

    pub(crate) fn sk_encrypt(
        &mut self,
        ike: IkeSaHandle,
        msg: &mut [u8],
        aad_len: usize,
        pt_len: usize,
    ) -> Result<()> {
        let sa = self.ike.get_mut(ike.0)?;
        sk::encrypt(sa, &self.rng, msg, aad_len, pt_len)
    }

    pub(crate) fn sk_decrypt(
        &mut self,
        ike: IkeSaHandle,
        msg: &mut [u8],
        aad_len: usize,
    ) -> Result<Range<usize>> {
        let sa = self.ike.get(ike.0)?;
        sk::decrypt(sa, msg, aad_len)
    }

    pub(crate) fn child_sa_create(
        &mut self,
        ike: IkeSaHandle,
        sealed: Option<&SealedBlob>,
        pfs: Option<DhExchange<'_>>,
        p: &ChildSaParams<'_>,
    ) -> Result<ChildSaPair> {
        if p.spi_inbound == 0 || p.spi_outbound == 0 {
            return Err(Error::BadLength { what: "SPI", len: 0, why: "SPI 0 is reserved (RFC 4303 §2.1)" });
        }
        // Refuse before consuming anything if there is no room for both directions.
        if self.esp_read().live() + 2 > self.limits.max_esp_sas.min(table::MAX_ENTRIES) {
            return Err(Error::TableFull { kind: HandleKind::EspSa, max: self.limits.max_esp_sas });
        }
        self.ike.get(ike.0)?;
        let g_ir = match pfs {
            Some(x) => Some(self.agree(x)?.0),
            None => None,
        };
        let sa = self.ike.get(ike.0)?;
        require_authenticated(sa)?;
        // IKE_AUTH's child derives from IKE_SA_INIT's nonces, spent on the IKE SA: allowed
        // once, in the SA's own role. Every other child needs a fresh nonce of ours. Either
        // is spent only once the keys are installed: a refused call derived nothing.
        let first = sa.first_child.as_deref() == Some(&ike_keys::nonce_pair(p.nonce_i, p.nonce_r));
        let claim = if first {
            if p.role != sa.role {
                return Err(Error::ProtocolRefused { why: enclave_api::error::refusal::ROLE_MISMATCH });
            }
            None
        } else {
            Some(self.nonces.claim(p.nonce_i, p.nonce_r, p.role)?)
        };
        let (inbound, outbound) = self
            .with_sk_d(ike, sealed, |sa, sk_d| ike_keys::derive_child_keys(sa.prf, sk_d, g_ir.as_ref(), p))?;
        // The inbound SA is bound to the one operation the measured config allows.
        let dir_in = Direction::Inbound(self.limits.inbound);
        let sa_in = EspSa::new(p.spi_inbound, dir_in, p.esn, p.suite, inbound)?;
        let sa_out = EspSa::new(p.spi_outbound, Direction::Outbound, p.esn, p.suite, outbound)?;
        let mut esp = self.esp_write();
        let h_in = esp.insert(sa_in)?;
        match esp.insert(sa_out) {
            Ok(h_out) => {
                drop(esp);
                match claim {
                    Some(c) => self.nonces.spend(c),
                    None => {
                        if let Ok(sa) = self.ike.get_mut(ike.0) {
                            sa.first_child = None;
                        }
                    }
                }
                Ok(ChildSaPair { inbound: EspSaHandle(h_in), outbound: EspSaHandle(h_out) })
            }
            Err(e) => {
                // Never used: no lane has its key.
                drop(esp.remove(h_in));
                Err(e)
            }
        }
    }

    pub(crate) fn clear_and_seal(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        // Checked before a counter is spent on a seal that will not happen.
        let sa = self.ike.get(ike.0)?;
        sa.sk_d.as_ref().ok_or(Error::AlreadySealed)?;
        require_authenticated(sa)?;
        let counter = self.next_seal_counter(false)?;
        let tenant = self.tenant;
        let sa = self.ike.get_mut(ike.0)?;
        let sk_d = sa.sk_d.as_ref().ok_or(Error::AlreadySealed)?;
        let binding = SealBinding { tenant, prf: sa.prf, spi_i: sa.spi_i, spi_r: sa.spi_r };
        let blob = seal::seal_sk_d(&self.root, &self.rng, &binding, counter, sk_d.as_slice())?;
        // Dropping the boxes zeroizes SK_d, SK_pi and SK_pr and frees their memory.
        sa.sk_d = None;
        sa.sk_p = None;
        // IKE_AUTH is over: its child SA exists or never will, and no AUTH is computed.
        sa.first_child = None;
        sa.transcript = None;
        sa.sealed_counter = Some(counter);
        Ok(SealedBlob(blob))
    }

    /// Clear-and-seal and the restart state of one IKE SA, with its trusted bytes before
    /// and after (only this SA's: a sum over all of them would cost more per tunnel the
    /// more tunnels are held).
    pub(crate) fn establish_seal(&mut self, ike: IkeSaHandle) -> Result<EstablishSeal> {
        let ike_sa_bytes_before = self.ike.get(ike.0)?.footprint();
        let sk_d = self.clear_and_seal(ike)?;
        let state = self.ike_sa_seal_state(ike)?;
        let ike_sa_bytes_after = self.ike.get(ike.0)?.footprint();
        Ok(EstablishSeal { sk_d, state, ike_sa_bytes_before, ike_sa_bytes_after })
    }

    /// `sealed`, after retiring the live `counter` if it failed: no blob under it exists,
    /// so it must not stay live in the ledger.
    fn retired_unless_sealed<T>(&mut self, counter: u64, sealed: Result<T>) -> Result<T> {
        if sealed.is_err() {
            let _ = self.ledger.retire(counter);
        }
        sealed
    }

    /// A counter no blob of this tenant on this platform has had; `live`: a tenant secret's,
    /// which opens until it is superseded.
    fn next_seal_counter(&mut self, live: bool) -> Result<u64> {
        self.ledger.issue(live).map_err(ledger_error)
    }

    pub(crate) fn ike_sa_seal_state(&mut self, ike: IkeSaHandle) -> Result<SealedBlob> {
        let sa = self.ike.get(ike.0)?;
        let body = sa.state_body()?;
        let binding = SealBinding { tenant: self.tenant, prf: sa.prf, spi_i: sa.spi_i, spi_r: sa.spi_r };
        let counter = self.next_seal_counter(true)?;
        let blob =
            seal::seal_blob(&self.root, &self.rng, seal::SEAL_KIND_IKE_STATE, &binding, counter, &body);
        let blob = self.retired_unless_sealed(counter, blob)?;
        if let Some(old) = self.ike_state_as.insert(ike.0, counter) {
            self.ledger.retire(old).map_err(ledger_error)?;
        }
        Ok(SealedBlob(blob))
    }

    pub(crate) fn ike_sa_restore(&mut self, state: &SealedBlob) -> Result<IkeSaHandle> {
        let (h, body) = seal::open_ike_state(&self.root, self.tenant, &state.0)?;
        if !self.ledger.is_live(h.counter).map_err(ledger_error)? {
            return Err(Error::SealedBlob { reason: enclave_api::error::BlobRejection::Rollback });
        }
        let mut iv = [0u8; 8];
        self.rng.fill(&mut iv).map_err(|_| Error::Random)?;
        let b = h.binding;
        if self.ike.entries().any(|live| live.spi_i == b.spi_i && live.spi_r == b.spi_r) {
            return Err(Error::ProtocolRefused { why: enclave_api::error::refusal::IKE_SA_LIVE });
        }
        let sa = IkeSa::from_state(b.prf, b.spi_i, b.spi_r, &body, u64::from_be_bytes(iv))?;
        let handle = self.ike.insert(sa)?;
        self.ike_state_as.insert(handle, h.counter);
        Ok(IkeSaHandle(handle))
    }

    pub(crate) fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> Result<()> {
        self.ike.remove(ike.0).map(drop)?;
        // The SA has ended: its state must not come back in a later instance.
        if let Some(counter) = self.ike_state_as.remove(&ike.0) {
            self.ledger.retire(counter).map_err(ledger_error)?;
        }
        scrub_stack();
        Ok(())
    }

    pub(crate) fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        esp::check_batch(descriptors.len(), status.len(), self.limits.max_batch)?;
        self.counters.batches = self.counters.batches.saturating_add(1);
        // `esp_read` would borrow all of `self`, and the lane is borrowed mutably beside it.
        let esp = self.esp.read().unwrap_or_else(PoisonError::into_inner);
        Ok(esp::batch(&esp, &mut self.lane, packets, descriptors, status))
    }

    pub(crate) fn esp_sa_delete(&mut self, sa: EspSaHandle) -> Result<()> {
        let removed = self.esp_write().remove(sa.0)?;
        self.forget_esp_key(sa.0, removed.owner());
        drop(removed);
        scrub_stack();
        Ok(())
    }

    pub(crate) fn esp_sa_install_wrapped(&mut self, wrapped: &[u8], p: &EspSaParams) -> Result<EspSaHandle> {
        if p.spi == 0 {
            return Err(Error::BadLength { what: "SPI", len: 0, why: "SPI 0 is reserved (RFC 4303 §2.1)" });
        }
        if !p.suite.is_consistent() {
            let integ = p.suite.integ.map_or(0, |i| i.id());
            return Err(Error::InconsistentSuite { cipher: p.suite.cipher.id(), integ });
        }
        // Refuse before a key is remembered if the SA could not be stored anyway.
        if self.esp_read().live() + 1 > self.limits.max_esp_sas.min(table::MAX_ENTRIES) {
            return Err(Error::TableFull { kind: HandleKind::EspSa, max: self.limits.max_esp_sas });
        }
        self.signers.allow_unsigned()?;
        let (kind, secret) = seal::open_provisioning(&self.root, self.tenant, wrapped)?;
        if kind != SecretKind::EspSaKeys {
            return Err(Error::WrongBlobKind { got: kind, want: "ESP SA keys" });
        }
        let keys = esp_wrapped::open(&secret, p)?;
        drop(secret);
        esp_wrapped::admit(self.ledger.as_mut(), keys.enc.as_slice(), !p.inbound)?;
        let dir = if p.inbound { Direction::Inbound(self.limits.inbound) } else { Direction::Outbound };
        let sa = EspSa::new(p.spi, dir, p.esn, p.suite, keys)?;
        self.esp_write().insert(sa).map(EspSaHandle)
    }

    /// Exports everything this instance holds to the destination enclave whose key and
    /// evidence are `destination` (checked here against the trusted platforms, this tenant
    /// and this measurement), with a second share to `hsm_spki` in envelope mode
    /// ([`crate::migration`]), then caps each outbound ESP SA at the sequence number the
    /// destination will start above.
    pub(crate) fn export_state(
        &mut self,
        destination: &DestinationKey,
        hsm_spki: Option<&[u8]>,
        hash: OaepHash,
        untrusted: &[u8],
    ) -> Result<MigrationPackage> {
        let rd = destination_report_data(self.tenant, &destination.spki_der);
        let purpose = EvidencePurpose::MigrationDestination;
        let own = self.attestation.measurement();
        self.platforms.verify(&destination.evidence.bytes, purpose, &rd, self.tenant, &own)?;
        let to = ShareKeys { hsm: hsm_spki, destination: Some(&destination.spki_der) };
        self.export(PackageKind::Move, &to, hash, untrusted, &destination.spki_der)
    }

    /// Exports the seal counter and the secrets only (a backup package) to an HSM key a
    /// backup root certified for this measurement, leaving every SA as it is.
    pub(crate) fn export_secrets(
        &mut self,
        wrap_spki: &[u8],
        certificate: &[u8],
        hash: OaepHash,
        untrusted: &[u8],
    ) -> Result<MigrationPackage> {
        self.backup_roots.verify(certificate, &self.attestation.measurement(), wrap_spki)?;
        let to = ShareKeys { hsm: Some(wrap_spki), destination: None };
        self.export(PackageKind::Backup, &to, hash, untrusted, &[])
    }

    /// The package of [`Self::export_state`] or [`Self::export_secrets`], per `kind`, signed
    /// with this enclave's evidence bound to `bound_to`.
    fn export(
        &mut self,
        kind: PackageKind,
        to: &ShareKeys<'_>,
        hash: OaepHash,
        untrusted: &[u8],
        bound_to: &[u8],
    ) -> Result<MigrationPackage> {
        if untrusted.len() > MAX_UNTRUSTED_STATE {
            return Err(Error::Migration { why: mwhy::TOO_LARGE });
        }
        let with_sas = kind == PackageKind::Move;
        // Refused before anything is made: a second destination would share the range. A
        // backup carries no outbound SA, so it shares nothing and is never refused for this.
        // Held to the end: no lane sends while the package records where each SA stands.
        let mut esp = self.esp_write();
        if with_sas && esp.entries().any(|sa| sa.direction() == Direction::Outbound && sa.seq_limited()) {
            return Err(Error::Migration { why: mwhy::ALREADY_EXPORTED });
        }
        let measurement = self.attestation.measurement();
        let hint = 64 * 1024 + untrusted.len();
        let (mut package, data_key) =
            PackageWriter::new(&self.rng, self.tenant, &measurement, kind, hash, to, hint)?;
        let mut w = StateWriter(package.state());
        // Once the source's seal counter; each platform's ledger issues its own now.
        w.u64(0);
        w.count(self.secrets.live())?;
        for (h, secret) in self.secrets.iter() {
            w.u32(h).u8(secret.kind().code()).blob16(secret.encoding())?;
        }
        if with_sas {
            w.count(self.ike.live())?;
            for (h, sa) in self.ike.iter() {
                encode_ike_sa(&mut w, h, sa)?;
            }
            w.count(esp.live())?;
            for (h, sa) in esp.iter() {
                let keys = sa.raw_keys()?;
                let suite = sa.suite();
                let outbound = sa.direction() == Direction::Outbound;
                let floor = if outbound { sa.last_seq().saturating_add(SEQ_MARGIN) } else { 0 };
                w.u32(h).u32(sa.spi()).u8(u8::from(!outbound)).u8(u8::from(sa.esn()));
                w.u16(suite.cipher.id()).u16(ike_keys::cipher_key_bits(suite.cipher));
                w.u16(suite.integ.map_or(0, |i| i.id())).u64(floor);
                w.key(keys.enc.as_slice())?.key(keys.integ.as_slice())?;
            }
        } else {
            // A backup is restored while this instance may still be sending: an SA in it
            // would come back with sequence numbers (AEAD IVs) already used.
            w.count(0)?.count(0)?;
        }
        w.u64(untrusted.len() as u64);
        w.0.extend_from_slice(untrusted);
        let (tenant, attestation) = (self.tenant, &self.attestation);
        let package = package.seal(&data_key, |head, tag| {
            let rd = crate::migration::export_report_data(tenant, head, tag, bound_to);
            Ok(attestation.evidence(tenant, kind.purpose(), &rd)?.bytes)
        })?;
        drop(data_key);
        // Only once the package exists: a failed export leaves the source as it was.
        if with_sas {
            for sa in esp.entries_mut() {
                if sa.direction() == Direction::Outbound {
                    sa.limit_seq(sa.last_seq().saturating_add(SEQ_MARGIN));
                }
            }
        }
        drop(esp);
        Ok(package)
    }

    /// Makes the ephemeral key pair an import opens its data key with (replacing, and so
    /// destroying, an earlier one) and evidence binding its public key.
    pub(crate) fn migration_destination_key(&mut self, bits: usize) -> Result<DestinationKey> {
        let (pair, spki_der) = migration::DestinationKeyPair::generate(bits)?;
        let report_data = destination_report_data(self.tenant, &spki_der);
        let evidence =
            self.attestation.evidence(self.tenant, EvidencePurpose::MigrationDestination, &report_data)?;
        self.destination = Some(Box::new(pair));
        Ok(DestinationKey { spki_der, evidence })
    }

    /// Opens a package with the destination key and restores its state, into this
    /// instance only while it holds nothing. The package must carry evidence of an enclave
    /// of a trusted platform, this tenant and this measurement, over this very package and
    /// (a move) this instance's destination key. `hsm_share` is the package's HSM share as
    /// the HSM rewrapped it to the destination key (a backup, or a move in envelope mode).
    /// The destination key is consumed by the attempt once the header names this tenant
    /// and measurement.
    pub(crate) fn import_state(
        &mut self,
        package: &MigrationPackage,
        hsm_share: Option<&[u8]>,
    ) -> Result<MigrationRestore> {
        if package.tenant() != self.tenant {
            return Err(Error::Migration { why: mwhy::WRONG_TENANT });
        }
        let own = self.attestation.measurement();
        if package.measurement() != own {
            return Err(Error::MeasurementMismatch {
                expected: Box::new(own),
                got: Box::new(package.measurement()),
            });
        }
        if self.secrets.live() > 0 || self.ike.live() > 0 || self.esp_read().live() > 0 {
            return Err(Error::ProtocolRefused { why: enclave_api::error::refusal::NOT_FRESH });
        }
        let pair = self.destination.take().ok_or(Error::Migration { why: mwhy::NO_DESTINATION_KEY })?;
        let kind = package.kind();
        let bound_to: &[u8] = match kind {
            PackageKind::Move => pair.spki(),
            PackageKind::Backup => &[],
        };
        let rd = crate::migration::package_report_data(package, bound_to);
        self.platforms.verify(package.source_evidence(), kind.purpose(), &rd, self.tenant, &own)?;
        let oaep = package.oaep_hash();
        let hsm = match (package.hsm_share(), hsm_share) {
            (Some(_), Some(rewrapped)) => Some(pair.unwrap(oaep, rewrapped)?),
            (None, None) => None,
            _ => return Err(Error::Migration { why: mwhy::SHARES }),
        };
        let dst = package.destination_share().map(|w| pair.unwrap(oaep, w)).transpose()?;
        drop(pair);
        let data_key = migration::data_key(hsm.as_deref(), dst.as_deref());
        drop((hsm, dst));
        let state = migration::open_package(package, &data_key)?;
        drop(data_key);
        self.restore(state)
    }

    /// Decodes a whole state first (every key checked as on its first install), then, if
    /// the tables have room for all of it, installs it: an import is all or nothing.
    pub(crate) fn restore(&mut self, state: Zeroizing<Vec<u8>>) -> Result<MigrationRestore> {
        let mut r = StateReader(&state);
        let _unused_seal_counter = r.u64()?;
        let malformed = || Error::Migration { why: mwhy::STATE_MALFORMED };
        let mut secrets = Vec::new();
        for _ in 0..r.u32()? {
            let old = r.u32()?;
            let kind = SecretKind::from_code(r.u8()?).ok_or_else(malformed)?;
            secrets.push((old, Secret::load(kind, r.blob16()?, &self.rng)?));
        }
        let mut ikes = Vec::new();
        for _ in 0..r.u32()? {
            let old = r.u32()?;
            let mut iv = [0u8; 8];
            self.rng.fill(&mut iv).map_err(|_| Error::Random)?;
            ikes.push((old, decode_ike_sa(&mut r, u64::from_be_bytes(iv))?));
        }
        let mut esps = Vec::new();
        for _ in 0..r.u32()? {
            let old = r.u32()?;
            let spi = r.u32()?;
            let dir = match r.u8()? {
                0 => Direction::Outbound,
                1 => Direction::Inbound(self.limits.inbound),
                _ => return Err(malformed()),
            };
            let esn = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(malformed()),
            };
            let suite = decode_suite(&mut r)?;
            let floor = r.u64()?;
            let (enc, integ) = (r.key()?, r.key()?);
            if spi == 0 || enc.len() != suite.cipher.keymat_len() || integ.len() != suite.integ_key_len() {
                return Err(malformed());
            }
            let keys = ike_keys::EspKeys {
                enc: keybuf::KeyBuf::from_slice(enc)?,
                integ: keybuf::KeyBuf::from_slice(integ)?,
            };
            let mut sa = EspSa::new(spi, dir, esn, suite, keys)?;
            sa.raise_seq_floor(floor);
            esps.push((old, sa));
        }
        let n = usize::try_from(r.u64()?).map_err(|_| malformed())?;
        let untrusted_start = state.len() - r.0.len();
        r.rest(n)?;
        r.finish()?;
        if secrets.len() > self.secrets.room()
            || ikes.len() > self.ike.room()
            || esps.len() > self.esp_read().room()
        {
            return Err(Error::Migration { why: mwhy::NO_ROOM });
        }
        let untrusted_state = migration::untrusted_tail(state, untrusted_start)?;
        let mut out = MigrationRestore { untrusted_state, ..MigrationRestore::default() };
        for (old, s) in secrets {
            out.secrets.push((SecretHandle(old), SecretHandle(self.secrets.insert(s)?)));
        }
        for (old, sa) in ikes {
            out.ike_sas.push((IkeSaHandle(old), IkeSaHandle(self.ike.insert(sa)?)));
        }
        for (old, sa) in esps {
            out.esp_sas.push((EspSaHandle(old), EspSaHandle(self.esp_write().insert(sa)?)));
        }
        Ok(out)
    }

    // ---- static ESP SAs from raw keys (`test-keys`; added for crates/esp) -------------------
    #[cfg(feature = "test-keys")]
    pub(crate) fn esp_sa_install_raw(
        &mut self,
        spi: u32,
        inbound: bool,
        esn: bool,
        suite: enclave_api::alg::Suite,
        enc: &[u8],
        integ: &[u8],
    ) -> Result<EspSaHandle> {
        if spi == 0 {
            return Err(Error::BadLength { what: "SPI", len: 0, why: "SPI 0 is reserved (RFC 4303 §2.1)" });
        }
        if !suite.is_consistent() {
            let integ_id = suite.integ.map_or(0, |i| i.id());
            return Err(Error::InconsistentSuite { cipher: suite.cipher.id(), integ: integ_id });
        }
        if enc.len() != suite.cipher.keymat_len() {
            let why = "not the cipher's keymat length";
            return Err(Error::BadLength { what: "ESP encryption key", len: enc.len(), why });
        }
        if integ.len() != suite.integ_key_len() {
            let why = "not the HMAC's key length";
            return Err(Error::BadLength { what: "ESP integrity key", len: integ.len(), why });
        }
        let keys = ike_keys::EspKeys {
            enc: keybuf::KeyBuf::from_slice(enc)?,
            integ: keybuf::KeyBuf::from_slice(integ)?,
        };
        let dir = if inbound { Direction::Inbound(self.limits.inbound) } else { Direction::Outbound };
        let sa = EspSa::new(spi, dir, esn, suite, keys)?;
        self.esp_write().insert(sa).map(EspSaHandle)
    }
    // ---- end static ESP SAs -------------------------------------------------------------------

    #[cfg(feature = "test-export")]
    pub(crate) fn export_ike_keys(&self, ike: IkeSaHandle) -> Result<crate::inline::IkeKeysExport> {
        let sa = self.ike.get(ike.0)?;
        Ok(crate::inline::IkeKeysExport {
            sk_d: sa.sk_d.as_ref().map(|k| k.as_slice().to_vec()),
            sk_ai: sa.sk_ai.as_slice().to_vec(),
            sk_ar: sa.sk_ar.as_slice().to_vec(),
            sk_ei: sa.sk_ei.as_slice().to_vec(),
            sk_er: sa.sk_er.as_slice().to_vec(),
            sk_pi: sa.sk_p.as_ref().map(|k| k.i.as_slice().to_vec()),
            sk_pr: sa.sk_p.as_ref().map(|k| k.r.as_slice().to_vec()),
        })
    }

    #[cfg(feature = "test-export")]
    pub(crate) fn export_esp_keys(&self, sa: EspSaHandle) -> Result<crate::inline::EspKeysExport> {
        let esp = self.esp_read();
        let sa = esp.get(sa.0)?;
        Ok(crate::inline::EspKeysExport {
            encryption: sa.exported.enc.as_slice().to_vec(),
            integrity: sa.exported.integ.as_slice().to_vec(),
        })
    }
}

/// Keys derive only from an IKE SA whose peer proved who it is (see `IkeSa::authenticated`).
fn require_authenticated(sa: &IkeSa) -> Result<()> {
    if sa.authenticated {
        Ok(())
    } else {
        Err(Error::ProtocolRefused { why: enclave_api::error::refusal::PEER_NOT_AUTHENTICATED })
    }
}

/// AUTH input of `signer` must be the SA's own IKE_SA_INIT (see `transcript`). An SA
/// without SK_p passes here: AUTH refuses it for the missing key, as before clear-and-seal
/// was checked; one with SK_p but no record (never made by IKE_SA_INIT here) is refused.
fn check_transcript(sa: &IkeSa, signer: Role, input: &AuthInput<'_>) -> Result<()> {
    if sa.sk_p.is_none() {
        return Ok(());
    }
    let refuse = Error::ProtocolRefused { why: enclave_api::error::refusal::NOT_THE_TRANSCRIPT };
    sa.transcript.as_ref().ok_or(refuse)?.check(signer, sa.spi_i, sa.spi_r, input)
}

/// Role, PRF, suite, SPIs, seal state and keys of one IKE SA (format: [`crate::migration`]).
fn encode_ike_sa(w: &mut StateWriter<'_>, handle: u32, sa: &IkeSa) -> Result<()> {
    let flags = u8::from(sa.sk_d.is_some())
        | u8::from(sa.sk_p.is_some()) << 1
        | u8::from(sa.sealed_counter.is_some()) << 2
        | u8::from(sa.transcript.is_some()) << 3
        | u8::from(sa.authenticated) << 4
        // Whether our AUTH was computed matters while SK_p can compute one.
        | u8::from(sa.signed && sa.sk_p.is_some()) << 5;
    w.u32(handle).u8(u8::from(sa.role == Role::Responder)).u16(sa.prf.id());
    w.u16(sa.suite.cipher.id()).u16(ike_keys::cipher_key_bits(sa.suite.cipher));
    w.u16(sa.suite.integ.map_or(0, |i| i.id())).u64(sa.spi_i).u64(sa.spi_r);
    w.u8(flags).u64(sa.sealed_counter.unwrap_or(0));
    w.key(sa.sk_ai.as_slice())?.key(sa.sk_ar.as_slice())?;
    w.key(sa.sk_ei.as_slice())?.key(sa.sk_er.as_slice())?;
    if let Some(d) = &sa.sk_d {
        w.key(d.as_slice())?;
    }
    if let Some(p) = &sa.sk_p {
        w.key(p.i.as_slice())?.key(p.r.as_slice())?;
    }
    if let Some(t) = &sa.transcript {
        w.key(&t.ke[0])?.key(&t.ke[1])?.key(&t.nonce[0])?.key(&t.nonce[1])?;
        match &t.intermediate {
            Some(int) => {
                w.u8(1).key(int.i.as_slice())?.key(int.r.as_slice())?.u32(int.mid);
            }
            None => {
                w.u8(0);
            }
        }
    }
    Ok(())
}

/// Cipher ID, key bits and integrity ID, checked for consistency.
fn decode_suite(r: &mut StateReader<'_>) -> Result<Suite> {
    let malformed = Error::Migration { why: mwhy::STATE_MALFORMED };
    let (id, bits) = (r.u16()?, r.u16()?);
    let cipher = Cipher::from_id(id, bits).ok_or(malformed.clone())?;
    let integ = match r.u16()? {
        0 => None,
        id => Some(Integ::from_id(id).ok_or(malformed.clone())?),
    };
    let suite = Suite { cipher, integ };
    if suite.is_consistent() {
        Ok(suite)
    } else {
        Err(malformed)
    }
}

/// [`encode_ike_sa`]'s inverse; every key must have its algorithm's length. `next_iv`
/// starts at a random point (top bit clear), as on a restore from a sealed blob: the
/// source may still send under SK_e after the export.
fn decode_ike_sa(r: &mut StateReader<'_>, next_iv: u64) -> Result<IkeSa> {
    let malformed = || Error::Migration { why: mwhy::STATE_MALFORMED };
    let role = match r.u8()? {
        0 => Role::Initiator,
        1 => Role::Responder,
        _ => return Err(malformed()),
    };
    let prf = Prf::from_id(r.u16()?).ok_or_else(malformed)?;
    let suite = decode_suite(r)?;
    let (spi_i, spi_r) = (r.u64()?, r.u64()?);
    let flags = r.u8()?;
    let counter = r.u64()?;
    // The transcript (8) and "signed" (32) go with SK_p (2) only: they are what AUTH may
    // cover and whether it did. A sealed SA (4) was authenticated (16) before clear-and-seal.
    if flags & !63 != 0
        || (flags & 1 != 0 && flags & 4 != 0)
        || (flags & 8 != 0 && flags & 2 == 0)
        || (flags & 32 != 0 && flags & 2 == 0)
        || (flags & 4 != 0 && flags & 16 == 0)
    {
        return Err(malformed());
    }
    let mut take = |len: usize| -> Result<&[u8]> {
        let k = r.key()?;
        if k.len() == len {
            Ok(k)
        } else {
            Err(malformed())
        }
    };
    let (alen, elen, plen) = (suite.integ_key_len(), suite.cipher.keymat_len(), prf.output_len());
    let sk_ai = keybuf::KeyBuf::from_slice(take(alen)?)?;
    let sk_ar = keybuf::KeyBuf::from_slice(take(alen)?)?;
    let sk_ei = keybuf::KeyBuf::from_slice(take(elen)?)?;
    let sk_er = keybuf::KeyBuf::from_slice(take(elen)?)?;
    let sk_d = if flags & 1 != 0 { Some(Box::new(keybuf::KeyBuf::from_slice(take(plen)?)?)) } else { None };
    let sk_p = if flags & 2 != 0 {
        let sk_pi = keybuf::KeyBuf::from_slice(take(plen)?)?;
        let sk_pr = keybuf::KeyBuf::from_slice(take(plen)?)?;
        Some(Box::new(ike_keys::AuthKeys { i: sk_pi, r: sk_pr }))
    } else {
        None
    };
    let transcript = if flags & 8 != 0 {
        let mut d = [[0u8; 32]; 4];
        for v in &mut d {
            v.copy_from_slice(take(32)?);
        }
        Some(Box::new(transcript::Transcript { ke: [d[0], d[1]], nonce: [d[2], d[3]], intermediate: None }))
    } else {
        None
    };
    let mut transcript = transcript;
    if let Some(t) = transcript.as_mut() {
        t.intermediate = match r.u8()? {
            0 => None,
            1 => {
                let (i, r2) = (r.key()?, r.key()?);
                if i.len() != plen || r2.len() != plen {
                    return Err(malformed());
                }
                let (i, r2) = (keybuf::KeyBuf::from_slice(i)?, keybuf::KeyBuf::from_slice(r2)?);
                Some(transcript::IntAuth { i, r: r2, mid: r.u32()? })
            }
            _ => return Err(malformed()),
        };
    }
    if sk_d.is_none() && flags & 4 == 0 {
        return Err(malformed());
    }
    Ok(IkeSa {
        role,
        prf,
        suite,
        spi_i,
        spi_r,
        sk_ai,
        sk_ar,
        sk_ei,
        sk_er,
        sk_d,
        sk_p,
        sealed_counter: (flags & 4 != 0).then_some(counter),
        next_iv: next_iv & (u64::MAX >> 1),
        first_child: None,
        transcript,
        authenticated: flags & 16 != 0,
        signed: flags & 32 != 0,
    })
}
