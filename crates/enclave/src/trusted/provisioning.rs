//! Attested provisioning, the enclave's side: outstanding offers (X25519 keys bound into
//! evidence) and the envelopes tenants encrypt to them. Formats: [`crate::provision`].
//!
//! The envelope is opened with the offer's private key, which ring's
//! `agreement::EphemeralPrivateKey` lets us use for exactly one agreement: an offer is
//! consumed by the first envelope that names its challenge and gets past the header checks,
//! whether it then decrypts or not. So each offer key answers at most one decryption
//! attempt (no oracle), and an envelope can never be provisioned twice.

use super::peers::TenantSigners;
use super::seal::scrub_aead_key;
use crate::provision::{
    why, ENVELOPE_HEADER_LEN, ENVELOPE_MAGIC, ENVELOPE_SIGNATURE_LABEL, ENVELOPE_SIGNATURE_LEN,
    ENVELOPE_VERSION, MAX_PROVISIONED_SECRET, OFFER_LIFETIME_SECS, SIGNED_ENVELOPE_VERSION,
};
use attest::provision::envelope_key;
use enclave_api::alg::SecretKind;
use enclave_api::error::{Error, Result};
use enclave_api::handle::TenantId;
use ring::aead::{Aad, Nonce, NONCE_LEN};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Most offers outstanding at once; issuing one more evicts the oldest.
pub(crate) const MAX_OFFERS: usize = 16;
/// How many consumed challenges are remembered, to tell "already used" from "unknown".
const REMEMBERED_USED: usize = 64;
const TAG_LEN: usize = 16;
/// Bytes of an X25519 public key.
pub(crate) const PUBLIC_LEN: usize = 32;
/// Bytes of an offer's challenge.
pub(crate) const CHALLENGE_LEN: usize = 16;

fn refused(why: &'static str) -> Error {
    Error::Provisioning { why }
}

/// One outstanding offer. The private key never leaves this struct except into the one
/// agreement that consumes it.
struct Offer {
    challenge: [u8; CHALLENGE_LEN],
    public: [u8; PUBLIC_LEN],
    key: EphemeralPrivateKey,
    issued: Instant,
}

/// The outstanding offers of one instance and the challenges recently consumed.
pub(crate) struct Offers {
    /// Boxed, so that removing one from the middle moves pointers, never key bytes.
    pending: VecDeque<Box<Offer>>,
    used: VecDeque<[u8; CHALLENGE_LEN]>,
    lifetime: Duration,
}

impl Default for Offers {
    fn default() -> Self {
        Self {
            pending: VecDeque::with_capacity(MAX_OFFERS),
            used: VecDeque::with_capacity(REMEMBERED_USED),
            lifetime: Duration::from_secs(u64::from(OFFER_LIFETIME_SECS)),
        }
    }
}

/// A fresh offer's public part.
pub(crate) struct NewOffer {
    pub(crate) challenge: [u8; CHALLENGE_LEN],
    pub(crate) public: [u8; PUBLIC_LEN],
}

impl Offers {
    /// Outstanding offers.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes held (for the memory report).
    pub(crate) fn bytes(&self) -> usize {
        self.pending.len() * core::mem::size_of::<Offer>()
            + self.pending.capacity() * core::mem::size_of::<Box<Offer>>()
            + self.used.capacity() * CHALLENGE_LEN
    }

    /// Generates a key pair and a challenge and keeps the private key as an offer issued at
    /// `now`. Expired offers are dropped first; if the table is still full the oldest goes.
    pub(crate) fn issue(&mut self, rng: &SystemRandom, now: Instant) -> Result<NewOffer> {
        let mut challenge = [0u8; CHALLENGE_LEN];
        ring::rand::SecureRandom::fill(rng, &mut challenge).map_err(|_| Error::Random)?;
        let key = EphemeralPrivateKey::generate(&X25519, rng).map_err(|_| Error::Random)?;
        let public: [u8; PUBLIC_LEN] = key
            .compute_public_key()
            .ok()
            .and_then(|p| p.as_ref().try_into().ok())
            .ok_or(Error::Internal { what: "offer public key" })?;
        let lifetime = self.lifetime;
        self.pending.retain(|o| now.saturating_duration_since(o.issued) <= lifetime);
        while self.pending.len() >= MAX_OFFERS {
            self.pending.pop_front();
        }
        self.pending.push_back(Box::new(Offer { challenge, public, key, issued: now }));
        Ok(NewOffer { challenge, public })
    }

    /// Takes the offer with `challenge` out of the table (it is consumed whatever happens
    /// next); refuses an unknown, used or expired one. An expired offer stays until the
    /// next [`Self::issue`] prunes it, so it keeps being reported as expired.
    fn take(&mut self, challenge: &[u8], now: Instant) -> Result<Box<Offer>> {
        let Some(i) = self.pending.iter().position(|o| o.challenge[..] == *challenge) else {
            let used = self.used.iter().any(|c| c[..] == *challenge);
            return Err(refused(if used { why::USED } else { why::UNKNOWN_CHALLENGE }));
        };
        let lifetime = self.lifetime;
        if self.pending.get(i).is_some_and(|o| now.saturating_duration_since(o.issued) > lifetime) {
            return Err(refused(why::EXPIRED));
        }
        let offer = self.pending.remove(i).ok_or(Error::Internal { what: "offer table" })?;
        if self.used.len() >= REMEMBERED_USED {
            self.used.pop_front();
        }
        self.used.push_back(offer.challenge);
        Ok(offer)
    }
}

/// What an envelope's authenticated header says.
struct Header<'a> {
    kind: SecretKind,
    challenge: &'a [u8],
    sender_public: &'a [u8],
}

/// Splits an envelope into what its AEAD and the tenant's signature cover, and the
/// signature (v2 only); refuses another version.
fn split_signature(envelope: &[u8]) -> Result<(&[u8], Option<&[u8]>)> {
    match envelope.get(4) {
        Some(&ENVELOPE_VERSION) => Ok((envelope, None)),
        Some(&SIGNED_ENVELOPE_VERSION) if envelope.len() >= ENVELOPE_HEADER_LEN + ENVELOPE_SIGNATURE_LEN => {
            let (signed, signature) = envelope.split_at(envelope.len() - ENVELOPE_SIGNATURE_LEN);
            Ok((signed, Some(signature)))
        }
        _ => Err(refused(why::MALFORMED)),
    }
}

/// Checks the envelope's header (everything before the ciphertext) against the format and
/// this tenant; consumes nothing. `envelope` ends at the AEAD tag.
fn parse_header(tenant: TenantId, envelope: &[u8]) -> Result<Header<'_>> {
    let malformed = refused(why::MALFORMED);
    let h = envelope.get(..ENVELOPE_HEADER_LEN).ok_or(malformed.clone())?;
    let body = envelope.len() - ENVELOPE_HEADER_LEN;
    if !(TAG_LEN..=MAX_PROVISIONED_SECRET + TAG_LEN).contains(&body) {
        return Err(malformed);
    }
    let version_known = h[4] == ENVELOPE_VERSION || h[4] == SIGNED_ENVELOPE_VERSION;
    if &h[0..4] != ENVELOPE_MAGIC || !version_known || h[6..8] != [0, 0] {
        return Err(malformed);
    }
    let kind = SecretKind::from_code(h[5]).ok_or(malformed)?;
    if kind == SecretKind::EspSaKeys {
        // Never a stored secret (they go straight into an SA): refused before the offer is spent.
        return Err(Error::WrongBlobKind { got: kind, want: "a PSK or private key" });
    }
    if h[8..12] != tenant.0.to_be_bytes() {
        return Err(refused(why::WRONG_TENANT));
    }
    Ok(Header { kind, challenge: &h[12..28], sender_public: &h[36..68] })
}

/// Opens an envelope for `tenant` with the offer it names, consuming the offer; returns the
/// secret's kind and bytes (not yet checked for the kind: [`super::auth::Secret::load`]).
/// Where the tenant signs its secrets, only an envelope a signer signed gets as far as the
/// offer: a forged one spends nothing.
pub(crate) fn open_envelope(
    offers: &mut Offers,
    signers: &TenantSigners,
    tenant: TenantId,
    envelope: &[u8],
    now: Instant,
) -> Result<(SecretKind, Zeroizing<Vec<u8>>)> {
    let (envelope, signature) = split_signature(envelope)?;
    let h = parse_header(tenant, envelope)?;
    match signature {
        Some(signature) => signers.verify(&[ENVELOPE_SIGNATURE_LABEL, envelope], signature)?,
        None => signers.allow_unsigned()?,
    }
    let offer = offers.take(h.challenge, now)?;
    let (aad, sealed) = envelope.split_at(ENVELOPE_HEADER_LEN);
    let peer = UnparsedPublicKey::new(&X25519, h.sender_public);
    let public = offer.public;
    // The agreement consumes the offer's private key; ring refuses an all-zero shared
    // secret (a low-order sender key), which is reported like any other failure to open.
    let mut key = agreement::agree_ephemeral(offer.key, &peer, |shared| {
        envelope_key(shared, h.challenge, &public, h.sender_public, tenant)
    })
    .map_err(|_| refused(why::NO_DECRYPT))??;
    let mut buf = Zeroizing::new(sealed.to_vec());
    // A zero nonce is safe: the key is derived from a fresh sender key and a single-use
    // offer key, so it encrypts exactly one message.
    let opened = key
        .open_in_place(Nonce::assume_unique_for_key([0u8; NONCE_LEN]), Aad::from(aad), &mut buf[..])
        .map(|plain| plain.len());
    scrub_aead_key(&mut key);
    let len = opened.map_err(|_| refused(why::NO_DECRYPT))?;
    buf.truncate(len);
    Ok((h.kind, buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::{software_measurement, CodeIdentity, SoftwareAttestation};
    use crate::provision::{seal_to_offer, ProvisioningOffer, TenantSigner};
    use crate::trusted::TrustedCore;
    use crate::SecretHandle;
    use enclave_api::alg::{AuthMethod, DhGroup, Prf, Role, Suite};
    use enclave_api::error::BlobRejection;
    use enclave_api::ike::{AuthInput, AuthSpec, DhExchange, IkeSaParams, SealedBlob};
    use enclave_api::report::{EnclaveConfig, Limits, ProvisioningKey};

    const ROOT: [u8; 32] = [0x42; 32];
    const CODE: &[u8] = b"enclave code";

    struct Platform {
        key: Zeroizing<Vec<u8>>,
        public: Vec<u8>,
        /// The tenant's ledger, which outlives each instance.
        ledger: std::sync::Arc<std::sync::Mutex<enclave_api::ledger::MemoryLedger>>,
    }

    fn platform() -> Platform {
        let key = SoftwareAttestation::generate_platform_key().unwrap();
        let public = SoftwareAttestation::new(&key, CodeIdentity::Bytes(vec![]), b"")
            .unwrap()
            .platform_public_key()
            .to_vec();
        Platform { key, public, ledger: Default::default() }
    }

    fn config(tenant: u32) -> EnclaveConfig {
        EnclaveConfig {
            tenant: TenantId(tenant),
            provisioning_key: ProvisioningKey::from_bytes(ROOT),
            trusted_platforms: Vec::new(),
            backup_roots: Vec::new(),
            tenant_signers: Vec::new(),
            limits: Limits::default(),
        }
    }

    fn core(p: &Platform, tenant: u32) -> TrustedCore {
        let c = config(tenant);
        let att = SoftwareAttestation::new(
            &p.key,
            CodeIdentity::Bytes(CODE.to_vec()),
            &c.measured_bytes(crate::Backend::Inline),
        )
        .unwrap();
        TrustedCore::start(c, Box::new(att), Box::new(p.ledger.clone())).unwrap()
    }

    /// `secret` wrapped the old way (under the provisioning root) for tenant 7.
    fn wrapped_for_7(kind: SecretKind, secret: &[u8]) -> Result<Vec<u8>> {
        crate::provision::wrap_secret(&ProvisioningKey::from_bytes(ROOT), TenantId(7), kind, secret)
    }

    fn expected(tenant: u32) -> crate::attest::Measurement {
        software_measurement(CODE, &config(tenant).measured_bytes(crate::Backend::Inline))
    }

    fn seal(p: &Platform, offer: &ProvisioningOffer, tenant: u32, secret: &[u8]) -> Vec<u8> {
        let t = TenantId(tenant);
        seal_to_offer(
            offer,
            &p.public,
            &expected(tenant),
            t,
            SecretKind::PreSharedKey,
            secret,
            1_700_000_000,
            None,
        )
        .unwrap()
    }

    fn refusal<T>(r: Result<T>) -> Error {
        r.map(|_| ()).unwrap_err()
    }

    /// AUTH (Shared Key MIC) of `psk` over one IKE SA the core makes with itself: two
    /// handles give the same AUTH exactly when they hold the same PSK.
    fn psk_auths(c: &mut TrustedCore, psks: &[SecretHandle]) -> Vec<Vec<u8>> {
        let group = DhGroup::Curve25519;
        let (mut a, mut b) = (vec![0u8; 32], vec![0u8; 32]);
        let dh_a = c.dh_generate(group, &mut a).unwrap();
        let _dh_b = c.dh_generate(group, &mut b).unwrap();
        let mut ni = [0u8; crate::IKE_NONCE_LEN];
        c.ike_nonces(&mut ni).unwrap();
        let params = IkeSaParams {
            role: Role::Initiator,
            prf: Prf::HmacSha256,
            suite: Suite::aead(crate::Cipher::AesGcm16_128),
            nonce_i: &ni,
            nonce_r: &[2; 32],
            spi_i: 1,
            spi_r: 2,
        };
        let ike = c.ike_sa_create(DhExchange { dh: dh_a, peer_public: &b }, &params).unwrap();
        let msg1 = enclave_api::testing::sa_init_message(1, 0, true, crate::DhGroup::Curve25519, &a, &ni);
        let input = AuthInput { real_message: &msg1, peer_nonce: &[2; 32], id_body: b"id" };
        psks.iter()
            .map(|&h| {
                let mut out = [0u8; 64];
                // The core signs once per IKE SA; this comparison needs the one SA's AUTH
                // under each handle.
                c.ike.get_mut(ike.0).unwrap().signed = false;
                let (m, n) = c.auth_compute(ike, h, AuthSpec::SharedKey, &input, &mut out).unwrap();
                assert_eq!(m, AuthMethod::SharedKey);
                out[..n].to_vec()
            })
            .collect()
    }

    #[test]
    fn a_psk_provisioned_by_attestation_works_and_survives_a_restart_of_its_tenant_only() -> Result<()> {
        let p = platform();
        let psk = b"attested tenant PSK, random-looking: 9f2c71e0";
        let mut c = core(&p, 7);
        let offer = c.provisioning_offer().unwrap();
        assert_eq!(offer.lifetime_secs, OFFER_LIFETIME_SECS);
        // The offer crosses the untrusted side as bytes.
        let offer = ProvisioningOffer::from_bytes(&offer.to_bytes()).unwrap();
        let envelope = seal(&p, &offer, 7, psk);
        assert!(!envelope.windows(16).any(|w| psk.windows(16).any(|s| s == w)), "PSK in the clear");
        let (h, blob) = c.provision_attested(&envelope).unwrap();
        assert_eq!(c.secret_kind(h), Ok(SecretKind::PreSharedKey));
        assert_eq!(blob.0[5], crate::trusted::seal::SEAL_KIND_TENANT_SECRET);
        // The same bytes as the PSK given the old way.
        let wrapped = wrapped_for_7(SecretKind::PreSharedKey, psk)?;
        let legacy = c.provision_secret(&wrapped).unwrap();
        let auths = psk_auths(&mut c, &[h, legacy]);
        assert_eq!(auths[0], auths[1]);

        // A new instance of the same tenant and root recovers it from the sealed blob alone.
        let mut later = core(&p, 7);
        let back = later.unseal_secret(&blob).unwrap();
        let legacy = later.provision_secret(&wrapped).unwrap();
        let auths = psk_auths(&mut later, &[back, legacy]);
        assert_eq!(auths[0], auths[1]);
        // Any number of times (restarts), with no per-SA latest counter.
        later.unseal_secret(&blob).unwrap();
        // Another tenant's instance cannot open it; nor can one once it is sealed anew.
        assert_eq!(
            refusal(core(&p, 8).unseal_secret(&blob)),
            Error::SealedBlob { reason: BlobRejection::Forged }
        );
        let newer = later.seal_secret(back).unwrap();
        assert!(newer.counter() > blob.counter());
        assert_eq!(
            refusal(core(&p, 7).unseal_secret(&blob)),
            Error::SealedBlob { reason: BlobRejection::Rollback }
        );
        core(&p, 7).unseal_secret(&newer).unwrap();
        Ok(())
    }

    #[test]
    fn a_held_secret_sealed_here_comes_back_on_a_later_instance_of_its_tenant_only() -> Result<()> {
        let p = platform();
        let psk = b"TOPSECRET restored tenant PSK: 31c4aa07";
        let wrapped = wrapped_for_7(SecretKind::PreSharedKey, psk)?;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &rng,
        )
        .unwrap();
        let ecdsa = wrapped_for_7(SecretKind::EcdsaP256PrivateKey, pkcs8.as_ref())?;
        let mut c = core(&p, 7);
        let h = c.provision_secret(&wrapped).unwrap();
        let k = c.provision_secret(&ecdsa).unwrap();
        let blob = c.seal_secret(h).unwrap();
        let key_blob = c.seal_secret(k).unwrap();
        // The blob of `provision_attested`, from the same instance-wide counter.
        assert_eq!(blob.0[5], crate::trusted::seal::SEAL_KIND_TENANT_SECRET);
        assert!(key_blob.counter() > blob.counter(), "a fresh counter per blob");
        assert!(!blob.0.windows(16).any(|w| psk.windows(16).any(|s| s == w)), "PSK in the clear");
        // The secret stays usable here.
        assert_eq!(c.secret_kind(h), Ok(SecretKind::PreSharedKey));

        let mut later = core(&p, 7);
        let back = later.unseal_secret(&blob).unwrap();
        let key_back = later.unseal_secret(&key_blob).unwrap();
        assert_eq!(later.secret_kind(key_back), Ok(SecretKind::EcdsaP256PrivateKey));
        let legacy = later.provision_secret(&wrapped).unwrap();
        let auths = psk_auths(&mut later, &[back, legacy]);
        assert_eq!(auths[0], auths[1], "the same PSK");
        // The later instance's own blobs never reuse a counter of the earlier one.
        let again = later.seal_secret(back).unwrap();
        assert!(again.counter() > key_blob.counter());

        assert_eq!(
            refusal(core(&p, 8).unseal_secret(&blob)),
            Error::SealedBlob { reason: BlobRejection::Forged }
        );
        // Deleted or never issued handles: the table's refusals, and no counter spent.
        c.delete_secret(h).unwrap();
        let e = refusal(c.seal_secret(h));
        assert!(matches!(e, Error::UnknownHandle { .. }), "{e:?}");
        let never = SecretHandle(k.0 ^ 0x0100);
        assert!(matches!(refusal(c.seal_secret(never)), Error::UnknownHandle { .. }));
        let next = c.seal_secret(k).unwrap();
        assert_eq!(
            next.counter(),
            again.counter().map(|n| n + 1),
            "one ledger: no counter spent by the refusals"
        );
        let text = format!("{e:?} {e} {c:?} {later:?} {blob:?}");
        assert!(!text.contains("TOPSECRET"), "{text}");
        Ok(())
    }

    #[test]
    fn sealed_blobs_of_other_kinds_or_forged_ones_are_refused_by_unseal_secret() {
        let p = platform();
        let mut c = core(&p, 7);
        let offer = c.provisioning_offer().unwrap();
        let (_, blob) = c.provision_attested(&seal(&p, &offer, 7, b"psk")).unwrap();
        let malformed = Error::SealedBlob { reason: BlobRejection::Malformed };
        // An IKE SA's SK_d blob is not a tenant secret, and a tenant secret is no IKE state.
        let mut pubs = [vec![0u8; 32], vec![0u8; 32]];
        let dh = c.dh_generate(DhGroup::Curve25519, &mut pubs[0]).unwrap();
        c.dh_generate(DhGroup::Curve25519, &mut pubs[1]).unwrap();
        let mut nr = [0u8; crate::IKE_NONCE_LEN];
        c.ike_nonces(&mut nr).unwrap();
        let params = IkeSaParams {
            role: Role::Responder,
            prf: Prf::HmacSha256,
            suite: Suite::aead(crate::Cipher::AesGcm16_256),
            nonce_i: &[1; 32],
            nonce_r: &nr,
            spi_i: 5,
            spi_r: 6,
        };
        let ike = c.ike_sa_create(DhExchange { dh, peer_public: &pubs[1] }, &params).unwrap();
        // As IKE_AUTH leaves it (the AUTH exchange itself is tests/enclave_api.rs's).
        c.ike.get_mut(ike.0).unwrap().authenticated = true;
        let sk_d = c.clear_and_seal(ike).unwrap();
        let state = c.ike_sa_seal_state(ike).unwrap();
        assert!(state.counter() > blob.counter(), "one instance-wide counter");
        assert_eq!(refusal(c.unseal_secret(&sk_d)), malformed);
        assert_eq!(refusal(c.unseal_secret(&state)), malformed);
        assert_eq!(refusal(c.ike_sa_restore(&blob)), malformed);
        for i in [5, 9, 20, 40, blob.0.len() - 1] {
            let mut t = blob.clone();
            t.0[i] ^= 1;
            assert!(c.unseal_secret(&t).is_err(), "byte {i}");
        }
        assert_eq!(refusal(c.unseal_secret(&SealedBlob(blob.0[..40].to_vec()))), malformed);
    }

    #[test]
    fn the_tenant_side_refuses_offers_it_cannot_trust() {
        let p = platform();
        let mut c = core(&p, 7);
        let offer = c.provisioning_offer().unwrap();
        let t = TenantId(7);
        let kind = SecretKind::PreSharedKey;
        // Another measurement than the one the tenant expects: both are named.
        let other = software_measurement(b"other code", &config(7).measured_bytes(crate::Backend::Inline));
        let e = refusal(seal_to_offer(&offer, &p.public, &other, t, kind, b"k", 0, None));
        let want = Error::MeasurementMismatch { expected: Box::new(other), got: Box::new(expected(7)) };
        assert_eq!(e, want);
        assert!(e.to_string().contains(&expected(7).to_hex()) && e.to_string().contains(&other.to_hex()));
        // Evidence signed by another platform key.
        let q = platform();
        let e = refusal(seal_to_offer(&offer, &q.public, &expected(7), t, kind, b"k", 0, None));
        assert_eq!(e, Error::Attestation { why: "signature does not verify" });
        // An offer whose public key (or challenge) the gateway swapped: the evidence no
        // longer binds it.
        let mut swapped = offer.clone();
        swapped.public_key[0] ^= 1;
        let e = refusal(seal_to_offer(&swapped, &p.public, &expected(7), t, kind, b"k", 0, None));
        assert_eq!(e, Error::Attestation { why: "report data does not match" });
        let mut swapped = offer.clone();
        swapped.challenge[15] ^= 1;
        assert!(seal_to_offer(&swapped, &p.public, &expected(7), t, kind, b"k", 0, None).is_err());
        // Another tenant's enclave.
        let e = refusal(seal_to_offer(&offer, &p.public, &expected(7), TenantId(8), kind, b"k", 0, None));
        assert_eq!(e, Error::Provisioning { why: why::WRONG_TENANT });
        // ESP SA keys are never provisioned this way.
        let e = seal_to_offer(&offer, &p.public, &expected(7), t, SecretKind::EspSaKeys, b"k", 0, None);
        assert!(matches!(e, Err(Error::WrongBlobKind { .. })));
    }

    #[test]
    fn the_enclave_refuses_reused_expired_unknown_tampered_and_misdirected_envelopes() {
        let p = platform();
        let mut c = core(&p, 7);
        let t0 = Instant::now();
        let offer = c.provisioning_offer_at(t0).unwrap();
        let env = seal(&p, &offer, 7, b"psk one");
        let bad = |why| Error::Provisioning { why };

        // Header checks spend nothing: the offer is still there afterwards.
        assert_eq!(refusal(c.provision_attested_at(&env[..60], t0)), bad(why::MALFORMED));
        assert_eq!(
            refusal(c.provision_attested_at(&env[..ENVELOPE_HEADER_LEN + 15], t0)),
            bad(why::MALFORMED)
        );
        for i in [0, 4, 6] {
            let mut m = env.clone();
            m[i] ^= 0x40;
            assert_eq!(refusal(c.provision_attested_at(&m, t0)), bad(why::MALFORMED), "byte {i}");
        }
        let mut other = env.clone();
        other[8..12].copy_from_slice(&8u32.to_be_bytes());
        assert_eq!(refusal(c.provision_attested_at(&other, t0)), bad(why::WRONG_TENANT));
        let mut unknown = env.clone();
        unknown[12] ^= 1;
        assert_eq!(refusal(c.provision_attested_at(&unknown, t0)), bad(why::UNKNOWN_CHALLENGE));
        // ... an envelope made for another tenant's enclave with its own offer, too.
        let mut c8 = core(&p, 8);
        let offer8 = c8.provisioning_offer().unwrap();
        assert_eq!(refusal(c.provision_attested(&seal(&p, &offer8, 8, b"x"))), bad(why::WRONG_TENANT));

        let (h, _) = c.provision_attested_at(&env, t0).unwrap();
        assert_eq!(c.secret_kind(h), Ok(SecretKind::PreSharedKey));
        // Single use.
        assert_eq!(refusal(c.provision_attested_at(&env, t0)), bad(why::USED));

        // A tampered ciphertext (or tag, or authenticated header byte) does not decrypt,
        // and spends the offer: no second try against the same key.
        // (issued_at, the sender key, the first ciphertext byte, the last tag byte).
        let n = env.len();
        for i in [30, 40, ENVELOPE_HEADER_LEN, n - 1] {
            let offer = c.provisioning_offer_at(t0).unwrap();
            let mut env = seal(&p, &offer, 7, b"psk one");
            env[i] ^= 1;
            assert_eq!(refusal(c.provision_attested_at(&env, t0)), bad(why::NO_DECRYPT), "byte {i}");
            env[i] ^= 1;
            assert_eq!(refusal(c.provision_attested_at(&env, t0)), bad(why::USED));
        }

        // Expiry: the lifetime is measured inside the enclave.
        let offer = c.provisioning_offer_at(t0).unwrap();
        let env = seal(&p, &offer, 7, b"psk three");
        let late = t0 + Duration::from_secs(u64::from(OFFER_LIFETIME_SECS) + 1);
        assert_eq!(refusal(c.provision_attested_at(&env, late)), bad(why::EXPIRED));
        assert_eq!(refusal(c.provision_attested_at(&env, late)), bad(why::EXPIRED), "still expired");
        let offer = c.provisioning_offer_at(t0).unwrap();
        let env = seal(&p, &offer, 7, b"psk four");
        let in_time = t0 + Duration::from_secs(u64::from(OFFER_LIFETIME_SECS));
        c.provision_attested_at(&env, in_time).unwrap();

        // The kind's own checks still apply: an empty PSK, a private key that is not one.
        let offer = c.provisioning_offer_at(t0).unwrap();
        let env = seal(&p, &offer, 7, b"");
        assert!(matches!(c.provision_attested_at(&env, t0), Err(Error::BadLength { .. })));
        let offer = c.provisioning_offer_at(t0).unwrap();
        let env = seal_to_offer(
            &offer,
            &p.public,
            &expected(7),
            TenantId(7),
            SecretKind::EcdsaP256PrivateKey,
            b"not a key",
            0,
            None,
        )
        .unwrap();
        assert!(matches!(c.provision_attested_at(&env, t0), Err(Error::BadPrivateKey { .. })));
        // ESP SA keys are refused by the enclave too, before the offer is spent.
        let offer = c.provisioning_offer_at(t0).unwrap();
        let mut env = seal(&p, &offer, 7, b"keys");
        env[5] = SecretKind::EspSaKeys.code();
        assert!(matches!(c.provision_attested_at(&env, t0), Err(Error::WrongBlobKind { .. })));
        env[5] = SecretKind::PreSharedKey.code();
        c.provision_attested_at(&env, t0).unwrap();
    }

    /// A core of tenant 7 whose measured configuration names `signers`, and what the
    /// tenant expects of it.
    fn signing_core(p: &Platform, signers: &[&TenantSigner]) -> (TrustedCore, crate::attest::Measurement) {
        let mut c = config(7);
        c.tenant_signers = signers.iter().map(|s| s.public_key().to_vec()).collect();
        let measured = c.measured_bytes(crate::Backend::Inline);
        let att = SoftwareAttestation::new(&p.key, CodeIdentity::Bytes(CODE.to_vec()), &measured).unwrap();
        (
            TrustedCore::start(c, Box::new(att), Box::new(p.ledger.clone())).unwrap(),
            software_measurement(CODE, &measured),
        )
    }

    fn signer() -> TenantSigner {
        TenantSigner::from_pkcs8(&TenantSigner::generate().unwrap()).unwrap()
    }

    #[test]
    fn a_tenant_that_signs_takes_only_envelopes_it_signed_and_no_wrapped_blob() {
        let p = platform();
        let (tenant, stranger) = (signer(), signer());
        let (mut c, m) = signing_core(&p, &[&tenant]);
        let t0 = Instant::now();
        let offer = c.provisioning_offer_at(t0).unwrap();
        let kind = SecretKind::PreSharedKey;
        let envelope = |by: Option<&TenantSigner>| {
            seal_to_offer(&offer, &p.public, &m, TenantId(7), kind, b"signed psk", 1, by).unwrap()
        };
        let refused = |why| Error::ProtocolRefused { why };
        use enclave_api::error::refusal;
        // Neither an unsigned envelope nor one another key signed spends the offer.
        let unsigned = envelope(None);
        assert_eq!(
            refusal(c.provision_attested_at(&unsigned, t0)),
            refused(refusal::TENANT_SIGNATURE_REQUIRED)
        );
        let forged = envelope(Some(&stranger));
        assert_eq!(
            refusal(c.provision_attested_at(&forged, t0)),
            refused(refusal::NOT_THE_TENANTS_SIGNATURE)
        );
        let mut bent = envelope(Some(&tenant));
        let n = bent.len();
        bent[n - 1] ^= 1;
        assert_eq!(refusal(c.provision_attested_at(&bent, t0)), refused(refusal::NOT_THE_TENANTS_SIGNATURE));
        // The signature covers the header and the ciphertext: a byte changed under it fails
        // the signature before the offer is touched.
        let mut bent = envelope(Some(&tenant));
        bent[ENVELOPE_HEADER_LEN] ^= 1;
        assert_eq!(refusal(c.provision_attested_at(&bent, t0)), refused(refusal::NOT_THE_TENANTS_SIGNATURE));
        // The signature stripped and the version set back to 1: still unsigned.
        let mut stripped = envelope(Some(&tenant));
        stripped.truncate(stripped.len() - ENVELOPE_SIGNATURE_LEN);
        stripped[4] = ENVELOPE_VERSION;
        assert_eq!(
            refusal(c.provision_attested_at(&stripped, t0)),
            refused(refusal::TENANT_SIGNATURE_REQUIRED)
        );
        // The tenant's own envelope opens with the same offer.
        let (h, _) = c.provision_attested_at(&envelope(Some(&tenant)), t0).unwrap();
        assert_eq!(c.secret_kind(h), Ok(kind));
        // Wrapped blobs: the provisioning key is the host's too, so they are refused.
        let blob = wrapped_for_7(kind, b"host's psk").unwrap();
        assert_eq!(refusal(c.provision_secret(&blob)), refused(refusal::TENANT_SIGNATURE_REQUIRED));

        // Two signers (a rotation): either one's envelope opens.
        let (mut both, m2) = signing_core(&p, &[&tenant, &stranger]);
        let offer = both.provisioning_offer_at(t0).unwrap();
        let env = seal_to_offer(&offer, &p.public, &m2, TenantId(7), kind, b"k", 1, Some(&stranger)).unwrap();
        assert!(both.provision_attested_at(&env, t0).is_ok());

        // An enclave that names no signer refuses a signed envelope, which its tenant
        // meant to be checked, and still takes an unsigned one.
        let (mut open, m0) = signing_core(&p, &[]);
        let offer = open.provisioning_offer_at(t0).unwrap();
        let env = seal_to_offer(&offer, &p.public, &m0, TenantId(7), kind, b"k", 1, Some(&tenant)).unwrap();
        assert_eq!(refusal(open.provision_attested_at(&env, t0)), refused(refusal::NO_TENANT_SIGNER));
        let env = seal_to_offer(&offer, &p.public, &m0, TenantId(7), kind, b"k", 1, None).unwrap();
        assert!(open.provision_attested_at(&env, t0).is_ok());
        // The signer set is measured: a tenant expecting its signer refuses the open enclave.
        assert_ne!(m0, m);
    }

    #[test]
    fn outstanding_offers_are_bounded_and_the_oldest_is_evicted() {
        let p = platform();
        let mut c = core(&p, 7);
        let t0 = Instant::now();
        let first = c.provisioning_offer_at(t0).unwrap();
        let second = c.provisioning_offer_at(t0).unwrap();
        for _ in 0..MAX_OFFERS - 1 {
            c.provisioning_offer_at(t0).unwrap();
        }
        assert_eq!(c.outstanding_offers(), MAX_OFFERS);
        let bad = |why| Error::Provisioning { why };
        assert_eq!(
            refusal(c.provision_attested_at(&seal(&p, &first, 7, b"a"), t0)),
            bad(why::UNKNOWN_CHALLENGE)
        );
        c.provision_attested_at(&seal(&p, &second, 7, b"b"), t0).unwrap();
        // Expired offers make room before any live one is evicted.
        let late = t0 + Duration::from_secs(u64::from(OFFER_LIFETIME_SECS) + 1);
        c.provisioning_offer_at(late).unwrap();
        assert_eq!(c.outstanding_offers(), 1);
    }

    #[test]
    fn errors_and_debug_output_carry_no_secret_bytes() {
        let p = platform();
        let mut c = core(&p, 7);
        let offer = c.provisioning_offer().unwrap();
        let secret = b"TOPSECRET-attested-psk";
        let mut env = seal(&p, &offer, 7, secret);
        env[70] ^= 1;
        let e = refusal(c.provision_attested(&env));
        let text = format!("{e:?} {e} {c:?} {offer:?}");
        assert!(!text.contains("TOPSECRET"), "{text}");
    }
}
