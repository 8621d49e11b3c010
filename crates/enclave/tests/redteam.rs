//! The hostile gateway: a caller that holds the whole call surface of a real enclave — the
//! process backend (a hardened child process over the rings) and the inline one — and tries
//! to make it hand out a key, plaintext or a signature it could misuse (docs/threat-model.md,
//! "Call contracts").
//!
//! Every `attack_*` test tries one attack on both backends and must see a typed refusal, the
//! refusal counted, and the enclave still serving. An attack the enclave does not yet refuse
//! is an `#[ignore = "open: ..."]` test that asserts the refusal it must come to: it says
//! what is missing and runs once it is built. `legit_*` tests are the positive controls: the
//! flows the protocol needs still work under the same rules. `scripts/redteam.sh` runs this
//! file and prints `redteam attacks refused=<n>/<total> legitimate=<ok>/<total>`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::cast_possible_truncation)]

use cloister_enclave::attest::{
    identity_report_data, verify_software_evidence, CodeIdentity, EvidencePurpose, SoftwareAttestation,
};
use cloister_enclave::ledger::MemoryLedger;
use cloister_enclave::migration::{self, verify_destination, DestinationKey, OaepHash};
use cloister_enclave::provision::{offer_report_data, seal_to_offer, wrap_secret, TenantSigner};
use cloister_enclave::*;
use enclave_host::{ProcessEnclave, ProcessSpec, SharedLedger};
use std::sync::{Arc, Mutex};

mod support;

use support::{
    backup_root, backup_root_public, certify, ike_and_child, inner, lay_out, nonce, platform_public, root_key,
};
// The cluster's platform: every target runs on it, and every target's measured
// configuration trusts it (and nothing else) for moves.
use support::platform as cluster;

const PROV_KEY: [u8; 32] = [0x5a; 32];
const SUITE: Suite = Suite { cipher: Cipher::AesGcm16_256, integ: None };

fn config(tenant: u32, inbound: InboundMode) -> EnclaveConfig {
    EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: vec![cluster().1.clone()],
        backup_roots: vec![backup_root_public()],
        tenant_signers: Vec::new(),
        limits: Limits { inbound, ..Limits::default() },
    }
}

/// An enclave under attack and what its verifier knows of it.
struct Target {
    e: Box<dyn Enclave>,
    platform_public: Vec<u8>,
    name: &'static str,
    /// The tenant's ledger on the platform, which outlives the instance (a restart).
    ledger: SharedLedger,
    /// Its configuration, made again for a restart (a configuration holds a root key and
    /// is not copied).
    config: Remake,
}

type Remake = Arc<dyn Fn() -> EnclaveConfig + Send + Sync>;

fn process(tenant: u32, inbound: InboundMode) -> Target {
    process_with(Arc::new(move || config(tenant, inbound)))
}

fn process_with(config: Remake) -> Target {
    process_on(config, Arc::new(Mutex::new(MemoryLedger::new())))
}

fn process_on(config: Remake, ledger: SharedLedger) -> Target {
    let pk = &cluster().0;
    let spec = ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new());
    let e = ProcessEnclave::start_with_ledger(spec, config(), pk, ledger.clone()).unwrap();
    Target { e: Box::new(e), platform_public: cluster().1.clone(), name: "process", ledger, config }
}

fn inline(tenant: u32, inbound: InboundMode) -> Target {
    inline_with(Arc::new(move || config(tenant, inbound)))
}

fn inline_with(config: Remake) -> Target {
    inline_on(config, Arc::new(Mutex::new(MemoryLedger::new())))
}

fn inline_on(config: Remake, ledger: SharedLedger) -> Target {
    let c = config();
    let att = SoftwareAttestation::new(
        &cluster().0,
        CodeIdentity::Bytes(b"redteam".to_vec()),
        &c.measured_bytes(Backend::Inline),
    )
    .unwrap();
    let e = InlineEnclave::start_with_ledger(c, Box::new(att), Box::new(ledger.clone())).unwrap();
    Target { e: Box::new(e), platform_public: cluster().1.clone(), name: "inline", ledger, config }
}

/// The tenant's provisioning signer (its private key stays with the tenant).
fn tenant_signer() -> &'static TenantSigner {
    static SIGNER: std::sync::OnceLock<TenantSigner> = std::sync::OnceLock::new();
    SIGNER.get_or_init(|| TenantSigner::from_pkcs8(&TenantSigner::generate().unwrap()).unwrap())
}

/// Tenant 1's configuration where the tenant signs what it provisions.
fn signing_config() -> EnclaveConfig {
    EnclaveConfig {
        tenant_signers: vec![tenant_signer().public_key().to_vec()],
        ..config(1, InboundMode::Decrypt)
    }
}

/// Runs `attack` against a process and an inline enclave of tenant 1 whose measured
/// configuration names the tenant's signer.
fn on_both_signing(attack: impl Fn(&mut Target)) {
    for mut t in [process_with(Arc::new(signing_config)), inline_with(Arc::new(signing_config))] {
        attack(&mut t);
        let mut n = [0u8; IKE_NONCE_LEN];
        t.e.ike_nonces(&mut n).unwrap_or_else(|e| panic!("{}: unusable after the attack: {e}", t.name));
    }
}

/// Another enclave of `t`'s backend (and so measurement) for `tenant`, on the cluster.
fn twin(t: &Target, tenant: u32) -> Target {
    match t.name {
        "process" => process(tenant, InboundMode::Decrypt),
        _ => inline(tenant, InboundMode::Decrypt),
    }
}

/// `t`'s tenant on the same platform after a restart: a new instance of the same
/// backend and configuration on the tenant's ledger.
fn restarted(t: &Target) -> Target {
    match t.name {
        "process" => process_on(t.config.clone(), t.ledger.clone()),
        _ => inline_on(t.config.clone(), t.ledger.clone()),
    }
}

/// What the gateway can run for itself: an inline enclave measuring exactly what `t`
/// measures (same code bytes, configuration and backend), attested by a platform key the
/// gateway made, which no target's configuration trusts.
fn impostor(t: &Target, tenant: u32) -> InlineEnclave {
    let c = config(tenant, InboundMode::Decrypt);
    let (code, backend) = match t.name {
        "process" => {
            (std::fs::read(env!("CARGO_BIN_EXE_cloister-enclave-process")).unwrap(), Backend::Process)
        }
        _ => (b"redteam".to_vec(), Backend::Inline),
    };
    let key = SoftwareAttestation::generate_platform_key().unwrap();
    let att = SoftwareAttestation::new(&key, CodeIdentity::Bytes(code), &c.measured_bytes(backend)).unwrap();
    InlineEnclave::start(c, Box::new(att)).unwrap()
}

/// Runs `attack` against a process and an inline enclave of tenant 1 (inbound SAs decrypt).
fn on_both(attack: impl Fn(&mut Target)) {
    on_both_with(InboundMode::Decrypt, attack);
}

fn on_both_with(inbound: InboundMode, attack: impl Fn(&mut Target)) {
    for mut t in [process(1, inbound), inline(1, inbound)] {
        attack(&mut t);
        // Whatever was tried, the enclave still serves: a fresh nonce and a DH value.
        let mut n = [0u8; IKE_NONCE_LEN];
        t.e.ike_nonces(&mut n).unwrap_or_else(|e| panic!("{}: unusable after the attack: {e}", t.name));
        let mut ke = [0u8; 32];
        t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
    }
}

/// Asserts `r` is the protocol refusal `why`, and that the enclave counted it.
fn refused<T: core::fmt::Debug>(t: &mut Target, r: Result<T>, why: &'static str) {
    let before = t.e.counters().error(ErrorKind::ProtocolRefused);
    assert_eq!(r.map(|_| ()), Err(Error::ProtocolRefused { why }), "{}", t.name);
    // The process backend counts inside the child; the call above already crossed.
    assert!(t.e.counters().error(ErrorKind::ProtocolRefused) >= before.max(1), "{}: refusal counted", t.name);
}

fn ike_params<'a>(role: Role, ni: &'a [u8], nr: &'a [u8]) -> IkeSaParams<'a> {
    IkeSaParams {
        role,
        prf: Prf::HmacSha256,
        suite: SUITE,
        nonce_i: ni,
        nonce_r: nr,
        spi_i: 0x51,
        spi_r: 0x52,
    }
}

fn child_params<'a>(role: Role, ni: &'a [u8], nr: &'a [u8], spi_in: u32, spi_out: u32) -> ChildSaParams<'a> {
    ChildSaParams {
        role,
        suite: SUITE,
        esn: false,
        nonce_i: ni,
        nonce_r: nr,
        spi_inbound: spi_in,
        spi_outbound: spi_out,
    }
}

/// A child SA of `ike` with these nonces and the stated role (SPIs of no importance here).
fn derive(t: &mut Target, ike: IkeSaHandle, role: Role, ni: &[u8], nr: &[u8]) -> Result<ChildSaPair> {
    t.e.child_sa_create(ike, None, None, &child_params(role, ni, nr, 0x100, 0x200))
}

/// The enclave's IKE SA with an honest peer (inline, tenant 1), and both first children.
struct Tunnel {
    peer: InlineEnclave,
    ike: IkeSaHandle,
    peer_ike: IkeSaHandle,
    sa: ChildSaPair,
    peer_sa: ChildSaPair,
}

fn tunnel(t: &mut Target) -> Tunnel {
    let Target { e, .. } = t;
    let mut peer = inline_peer();
    let (ike, peer_ike, sa, peer_sa) = ike_and_child(e.as_mut(), &mut peer, PROV_KEY);
    Tunnel { peer, ike, peer_ike, sa, peer_sa }
}

fn inline_peer() -> InlineEnclave {
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let c = config(1, InboundMode::Decrypt);
    let att = SoftwareAttestation::new(
        &pk,
        CodeIdentity::Bytes(b"peer".to_vec()),
        &c.measured_bytes(Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start(c, Box::new(att)).unwrap()
}

/// The nonces `ike_and_child` used are gone from the caller; an attacker replays what it
/// saw on the wire. Here: a fresh exchange whose nonces the test keeps.
struct Exchange {
    ni: Vec<u8>,
    nr: Vec<u8>,
    ike: IkeSaHandle,
}

/// IKE_SA_INIT only, the target initiating: neither side has computed its AUTH yet.
fn sa_init(t: &mut Target, peer: &mut InlineEnclave) -> enclave_api::testing::Handshake {
    enclave_api::testing::ike_sa_init(
        t.e.as_mut(),
        peer,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        SUITE,
        (0x61, 0x62),
    )
    .unwrap()
}

/* IKE_SA_INIT { SA, KE, Ni } <--> { SA, KE, Nr }, the target initiating, then both AUTHs */
fn exchange(t: &mut Target, peer: &mut InlineEnclave) -> Exchange {
    let h = enclave_api::testing::ike_sa_init(
        t.e.as_mut(),
        peer,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        SUITE,
        (0x51, 0x52),
    )
    .unwrap();
    let (psk, peer_psk) = (support::psk(t.e.as_mut(), PROV_KEY), support::psk(peer, PROV_KEY));
    h.authenticate_psk(t.e.as_mut(), peer, psk, peer_psk).unwrap();
    Exchange { ni: h.ni, nr: h.nr, ike: h.ike_a }
}

// ---- attack 4: child SA derivation ---------------------------------------------------------

/// Deriving a live child's KEYMAT again would give a second outbound instance of the same
/// AEAD key with its own sequence space (nonce reuse).
#[test]
fn attack_child_sa_derived_twice_from_one_exchange() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = exchange(t, &mut peer);
        derive(t, x.ike, Role::Initiator, &x.ni, &x.nr).unwrap();
        let r = derive(t, x.ike, Role::Initiator, &x.ni, &x.nr);
        // Ni is ours, spent on the IKE SA; its one extra use, IKE_AUTH's child, is taken.
        refused(t, r, refusal::NONCE_USED);
        // Nor with a CREATE_CHILD_SA's nonces once that child exists.
        let ours = nonce(t.e.as_mut());
        derive(t, x.ike, Role::Initiator, &ours, &[7; 32]).unwrap();
        let r = derive(t, x.ike, Role::Initiator, &ours, &[7; 32]);
        refused(t, r, refusal::NONCE_USED);
    });
}

/// Flipping the role makes the enclave encrypt under the key the peer encrypts with
/// (keystream for inbound traffic).
#[test]
fn attack_child_sa_with_the_roles_swapped() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = exchange(t, &mut peer);
        // IKE_AUTH's child in the other role than the IKE SA's.
        let r = derive(t, x.ike, Role::Responder, &x.ni, &x.nr);
        refused(t, r, refusal::ROLE_MISMATCH);
        // A CREATE_CHILD_SA nonce of ours given as Nr while we claim to be the initiator...
        let ours = nonce(t.e.as_mut());
        let r = derive(t, x.ike, Role::Initiator, &[9; 32], &ours);
        refused(t, r, refusal::ROLE_MISMATCH);
        // ...or as Ni while we claim to be the responder.
        let r = derive(t, x.ike, Role::Responder, &ours, &[9; 32]);
        refused(t, r, refusal::ROLE_MISMATCH);
    });
}

/// Nonces the caller made up: no derivation names a nonce of ours, so nothing is derived.
#[test]
fn attack_derivations_from_caller_chosen_nonces() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = exchange(t, &mut peer);
        let r = derive(t, x.ike, Role::Initiator, &[1; 32], &[2; 32]);
        refused(t, r, refusal::NONCE_NOT_ISSUED);
        let mut ke = [0u8; 32];
        let dh = t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
        let r = t.e.ike_sa_create(
            DhExchange { dh, peer_public: &ke },
            &ike_params(Role::Initiator, &[1; 32], &[2; 32]),
        );
        refused(t, r, refusal::NONCE_NOT_ISSUED);
        // Another instance's nonce is not ours either.
        let theirs = nonce(&mut peer);
        let r = derive(t, x.ike, Role::Initiator, &theirs, &[2; 32]);
        refused(t, r, refusal::NONCE_NOT_ISSUED);
    });
}

/// IKE_SA_INIT with whoever answers, then keys without IKE_AUTH: an attacker posing as the
/// tenant's peer (or a gateway that skips the check) would get child SAs, a rekeyed IKE SA
/// or a sealed state of an exchange with a peer that never proved who it is. Where the
/// inbound SA forwards to a tenant endpoint, that is traffic injected into the tenant.
#[test]
fn attack_keys_from_an_ike_sa_whose_peer_never_authenticated() {
    on_both(|t| {
        let mut peer = inline_peer();
        let h = enclave_api::testing::ike_sa_init(
            t.e.as_mut(),
            &mut peer,
            DhGroup::Curve25519,
            Prf::HmacSha256,
            SUITE,
            (0x61, 0x62),
        )
        .unwrap();
        let (psk, peer_psk) = (support::psk(t.e.as_mut(), PROV_KEY), support::psk(&mut peer, PROV_KEY));
        // The peer's AUTH, wrong: verification fails and proves nothing.
        let r = t.e.auth_verify(h.ike_a, PeerCredential::SharedKey(psk), 2, &[0; 32], &h.auth_b(b"id"));
        assert_eq!(r.map(|_| ()), Err(Error::AuthenticationFailed { method: 2 }), "{}", t.name);
        let r = derive(t, h.ike_a, Role::Initiator, &h.ni, &h.nr);
        refused(t, r, refusal::PEER_NOT_AUTHENTICATED);
        let ours = nonce(t.e.as_mut());
        let r = derive(t, h.ike_a, Role::Initiator, &ours, &[7; 32]);
        refused(t, r, refusal::PEER_NOT_AUTHENTICATED);
        let mut ke = [0u8; 32];
        let dh = t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
        let (ours, peer_ke) = (nonce(t.e.as_mut()), [9u8; 32]);
        let rekey = IkeSaParams { spi_i: 0x63, spi_r: 0x64, ..ike_params(Role::Initiator, &ours, &[8; 32]) };
        let r = t.e.ike_sa_rekey(h.ike_a, None, DhExchange { dh, peer_public: &peer_ke }, &rekey);
        refused(t, r, refusal::PEER_NOT_AUTHENTICATED);
        let r = t.e.clear_and_seal(h.ike_a);
        refused(t, r, refusal::PEER_NOT_AUTHENTICATED);
        // Positive control: once the peer's AUTH verifies, IKE_AUTH's child comes.
        h.authenticate_psk(t.e.as_mut(), &mut peer, psk, peer_psk).unwrap();
        h.first_child(t.e.as_mut(), &mut peer, SUITE, (0x100, 0x200))
            .unwrap_or_else(|e| panic!("{}: the child once authenticated: {e}", t.name));
    });
}

/// An IKE SA made in the other role uses SK_er for what it sends as initiator: the peer's
/// own key and IV space.
#[test]
fn attack_ike_sa_with_the_role_swapped_or_its_nonce_reused() {
    on_both(|t| {
        let ours = nonce(t.e.as_mut());
        let mut ke = [0u8; 32];
        let mut peer_ke = [0u8; 32];
        let dh = t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
        let peer_dh = t.e.dh_generate(DhGroup::Curve25519, &mut peer_ke).unwrap();
        let r = t.e.ike_sa_create(
            DhExchange { dh, peer_public: &peer_ke },
            &ike_params(Role::Responder, &ours, &[3; 32]),
        );
        refused(t, r, refusal::ROLE_MISMATCH);
        // Used once, in the right role...
        let ok = ike_params(Role::Initiator, &ours, &[3; 32]);
        t.e.ike_sa_create(DhExchange { dh: peer_dh, peer_public: &ke }, &ok).unwrap();
        // ...and never again, whatever the DH value.
        let dh = t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
        let r = t.e.ike_sa_create(DhExchange { dh, peer_public: &peer_ke }, &ok);
        refused(t, r, refusal::NONCE_USED);
    });
}

/// A DH private value agreed twice would give one shared secret to two SAs.
#[test]
fn attack_dh_agreement_twice_with_one_private_value() {
    on_both(|t| {
        let ours = nonce(t.e.as_mut());
        let (mut ke, mut peer_ke) = ([0u8; 32], [0u8; 32]);
        let dh = t.e.dh_generate(DhGroup::Curve25519, &mut ke).unwrap();
        let mut peer = inline_peer();
        peer.dh_generate(DhGroup::Curve25519, &mut peer_ke).unwrap();
        t.e.ike_sa_create(
            DhExchange { dh, peer_public: &peer_ke },
            &ike_params(Role::Initiator, &ours, &[3; 32]),
        )
        .unwrap();
        let fresh = nonce(t.e.as_mut());
        let before = t.e.counters().error(ErrorKind::UnknownHandle);
        let r = t.e.ike_sa_create(
            DhExchange { dh, peer_public: &peer_ke },
            &ike_params(Role::Initiator, &fresh, &[3; 32]),
        );
        assert!(matches!(r, Err(Error::UnknownHandle { kind: HandleKind::Dh, .. })), "{}: {r:?}", t.name);
        assert!(t.e.counters().error(ErrorKind::UnknownHandle) > before, "{}", t.name);
    });
}

// ---- attack 2: evidence --------------------------------------------------------------------

/// There is no call for evidence over report data the caller picks. Identity evidence over
/// a challenge the attacker computed as an offer's or a destination's report data for its own
/// key does not verify as either.
#[test]
fn attack_evidence_for_the_gateways_own_key() {
    on_both(|t| {
        let attacker_key = [0x66u8; 32];
        let rd = offer_report_data(TenantId(1), &attacker_key, &[0; 16]);
        let mut challenge = [0u8; 32];
        challenge.copy_from_slice(&rd[..32]);
        let ev = t.e.identity_evidence(&challenge).unwrap();
        for purpose in [EvidencePurpose::ProvisioningOffer, EvidencePurpose::MigrationDestination] {
            let r = verify_software_evidence(&ev.bytes, &t.platform_public, purpose, &rd);
            assert_eq!(r, Err(Error::Attestation { why: "evidence is for another purpose" }), "{}", t.name);
        }
        // Identity evidence verifies only for what it is: this tenant, this challenge.
        let own = identity_report_data(TenantId(1), &challenge);
        verify_software_evidence(&ev.bytes, &t.platform_public, EvidencePurpose::Identity, &own).unwrap();
    });
}

/// Evidence of one purpose offered for another: a provisioning offer's evidence (which binds
/// an X25519 key) presented as a migration destination's.
#[test]
fn attack_evidence_of_one_purpose_offered_for_another() {
    on_both(|t| {
        let offer = t.e.provisioning_offer().unwrap();
        let expected = measurement(t);
        let forged = DestinationKey { spki_der: offer.public_key.to_vec(), evidence: offer.evidence.clone() };
        let r = verify_destination(&forged, &t.platform_public, &expected, TenantId(1));
        assert!(matches!(r, Err(Error::Attestation { .. })), "{}: {r:?}", t.name);
    });
}

/// The target's measurement, from its identity evidence.
fn measurement(t: &mut Target) -> attest::Measurement {
    let ev = t.e.identity_evidence(&[1; 32]).unwrap();
    let rd = identity_report_data(TenantId(1), &[1; 32]);
    verify_software_evidence(&ev.bytes, &t.platform_public, EvidencePurpose::Identity, &rd)
        .unwrap()
        .measurement
}

/// An inline enclave (keys in the caller's memory) passing for a process one: the same code
/// bytes and configuration, but the backend is measured, so the measurements differ.
#[test]
fn attack_inline_enclave_passes_as_a_process_enclave() {
    let mut p = process(1, InboundMode::Decrypt);
    let process_measurement = measurement(&mut p);
    let code = std::fs::read(env!("CARGO_BIN_EXE_cloister-enclave-process")).unwrap();
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let c = config(1, InboundMode::Decrypt);
    let att =
        SoftwareAttestation::new(&pk, CodeIdentity::Bytes(code.clone()), &c.measured_bytes(Backend::Inline))
            .unwrap();
    let mut i = Target {
        e: Box::new(InlineEnclave::start(c, Box::new(att)).unwrap()),
        platform_public: platform_public(&pk),
        name: "inline",
        ledger: Arc::new(Mutex::new(MemoryLedger::new())),
        config: Arc::new(|| config(1, InboundMode::Decrypt)),
    };
    assert_ne!(measurement(&mut i), process_measurement);
    // The process child's is exactly the process backend's measurement of that code.
    let expected = attest::software_measurement(
        &code,
        &config(1, InboundMode::Decrypt).measured_bytes(Backend::Process),
    );
    assert_eq!(process_measurement, expected);
}

// ---- isolation ------------------------------------------------------------------------------

/// Handles of another tenant's enclave name nothing here.
#[test]
fn attack_another_tenants_handles() {
    on_both(|t| {
        let mut other = inline(2, InboundMode::Decrypt);
        let tun = tunnel(&mut other);
        let mut msg = vec![0u8; 128];
        let r = t.e.sk_decrypt(tun.ike, &mut msg, 32);
        assert!(
            matches!(r, Err(Error::ForeignHandle { .. } | Error::UnknownHandle { .. })),
            "{}: {r:?}",
            t.name
        );
        let r = t.e.esp_sa_delete(tun.sa.outbound);
        assert!(
            matches!(r, Err(Error::ForeignHandle { .. } | Error::UnknownHandle { .. })),
            "{}: {r:?}",
            t.name
        );
        drop(tun);
    });
}

/// An inbound SA bound to In-Enclave Forwarding never decrypts for the gateway.
#[test]
fn attack_plaintext_out_of_a_forwarding_sa() {
    on_both_with(InboundMode::Forward, |t| {
        let mut tun = tunnel(t);
        let mut area = vec![0u8; 4096];
        let inn = inner(1, 100);
        let len = lay_out(&mut area, 0, &inn);
        let mut st = [EspStatus::NotProcessed];
        tun.peer
            .esp_batch(&mut area, &[EspDescriptor::encrypt(tun.peer_sa.outbound, 0, len, 1)], &mut st)
            .unwrap();
        assert_eq!(st, [EspStatus::Ok]);
        let sealed = area.clone();
        t.e.esp_batch(&mut area, &[EspDescriptor::decrypt(tun.sa.inbound, 0, len, 1)], &mut st).unwrap();
        assert_eq!(st, [EspStatus::ModeNotAllowed], "{}", t.name);
        assert_eq!(area, sealed, "{}: nothing decrypted in place", t.name);
    });
}

// ---- secrets the gateway provisions ---------------------------------------------------------

/// The gateway seals a secret of its own choosing to a genuine offer (an offer is public:
/// anyone who sees it can encrypt to it), unsigned or signed by a key of its own, to have
/// the enclave authenticate its own peer as the tenant's. Where the tenant signs, neither
/// goes in, and neither spends the offer, which the tenant's envelope still opens.
#[test]
fn attack_secret_the_gateway_sealed_to_a_genuine_offer() {
    on_both_signing(|t| {
        let offer = t.e.provisioning_offer().unwrap();
        let expected = measurement(t);
        let platform = t.platform_public.clone();
        let own = TenantSigner::from_pkcs8(&TenantSigner::generate().unwrap()).unwrap();
        let seal = |by| {
            let psk = SecretKind::PreSharedKey;
            seal_to_offer(&offer, &platform, &expected, TenantId(1), psk, b"gateway psk", 1, by).unwrap()
        };
        let r = t.e.provision_attested(&seal(None));
        refused(t, r, refusal::TENANT_SIGNATURE_REQUIRED);
        let r = t.e.provision_attested(&seal(Some(&own)));
        refused(t, r, refusal::NOT_THE_TENANTS_SIGNATURE);
        let (h, _) = t.e.provision_attested(&seal(Some(tenant_signer()))).unwrap();
        assert_eq!(t.e.secret_kind(h), Ok(SecretKind::PreSharedKey), "{}", t.name);
    });
}

/// The gateway wraps a secret, or static ESP keys, of its own under the provisioning key,
/// which it holds: where the tenant signs, nothing that key alone authenticates goes in.
#[test]
fn attack_wrapped_secret_where_the_tenant_signs() {
    on_both_signing(|t| {
        let key = ProvisioningKey::from_bytes(PROV_KEY);
        let blob = wrap_secret(&key, TenantId(1), SecretKind::PreSharedKey, b"gateway psk").unwrap();
        let r = t.e.provision_secret(&blob);
        refused(t, r, refusal::TENANT_SIGNATURE_REQUIRED);
        let params = EspSaParams { spi: 0x5252, inbound: false, esn: false, suite: SUITE };
        let keys =
            cloister_enclave::provision::wrap_esp_sa_keys(&key, TenantId(1), &params, &[0x42; 36], &[])
                .unwrap();
        let r = t.e.esp_sa_install_wrapped(&keys, &params);
        refused(t, r, refusal::TENANT_SIGNATURE_REQUIRED);
    });
}

// ---- attacks 1 and 3: moves and imports ----------------------------------------------------

/// Attack 1: `export_state` to a key the gateway holds: its own RSA key with evidence from
/// an enclave on a platform it controls (measuring exactly what the target measures), or
/// the target's genuine destination evidence with the gateway's key swapped in.
#[test]
fn attack_export_state_to_the_callers_own_key() {
    on_both(|t| {
        let _tun = tunnel(t);
        let mut own = impostor(t, 1);
        let key = own.migration_destination_key(2048).unwrap();
        let r = t.e.export_state(&key, None, OaepHash::Sha256, b"");
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        let mut genuine = twin(t, 1);
        let real = genuine.e.migration_destination_key(2048).unwrap();
        let swapped = DestinationKey { spki_der: key.spki_der.clone(), evidence: real.evidence.clone() };
        let r = t.e.export_state(&swapped, Some(&key.spki_der), OaepHash::Sha256, b"");
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        // Nothing was capped by the refusals: the genuine destination gets the state.
        let package = t.e.export_state(&real, None, OaepHash::Sha256, b"").unwrap();
        genuine.e.import_state(&package, None).unwrap();
    });
}

/// Attack 1: `export_secrets` (a backup) to a key the caller names: with no certificate, with
/// the genuine root's certificate of another key (a real backup key's, replayed), of this key
/// for another measurement, or by a root the gateway made itself.
#[test]
fn attack_export_secrets_to_the_callers_own_key() {
    on_both(|t| {
        let mut thief = impostor(t, 1);
        let key = thief.migration_destination_key(2048).unwrap();
        let m = measurement(t);
        let mut genuine = twin(t, 1);
        let real = genuine.e.migration_destination_key(2048).unwrap();
        let other_m = attest::Measurement([9; 48]);
        for cert in [
            Vec::new(),
            certify(backup_root(), &m, &real.spki_der),
            certify(backup_root(), &other_m, &key.spki_der),
            certify(&root_key(), &m, &key.spki_der),
        ] {
            let r = t.e.export_secrets(&key.spki_der, &cert, OaepHash::Sha256, b"");
            refused(t, r, refusal::BACKUP_KEY_NOT_CERTIFIED);
        }
        // The certified key gets the backup.
        let cert = certify(backup_root(), &m, &real.spki_der);
        let backup = t.e.export_secrets(&real.spki_der, &cert, OaepHash::Sha256, b"").unwrap();
        genuine.e.import_state(&backup, backup.hsm_share()).unwrap();
    });
}

/// Attack 3: a package nobody the target trusts made: the gateway runs an enclave of the
/// tenant's measurement on a platform of its own, exports from it to the target's genuine
/// destination key (SK_p of its choosing would follow), and imports.
#[test]
fn attack_import_of_a_package_the_gateway_made() {
    on_both(|t| {
        let mut forger = impostor(t, 1);
        let psk =
            wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(1), SecretKind::PreSharedKey, b"x");
        forger.provision_secret(&psk.unwrap()).unwrap();
        let key = t.e.migration_destination_key(2048).unwrap();
        // The target's key verifies at the forger (same measurement, genuine evidence).
        let package = forger.export_state(&key, None, OaepHash::Sha256, b"").unwrap();
        assert_eq!((package.tenant(), package.measurement()), (TenantId(1), measurement(t)));
        let r = t.e.import_state(&package, None);
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        assert_eq!(t.e.memory_report().secrets, 0, "{}: nothing installed", t.name);
    });
}

/// Attack 1 with a genuine enclave on the other end: one of another tenant, or of another
/// measurement (here: the other backend), both on the cluster's own platform.
#[test]
fn attack_export_to_an_enclave_of_another_tenant_or_measurement() {
    on_both(|t| {
        // Another tenant's evidence binds its key for that tenant: not for ours.
        let mut other_tenant = twin(t, 2);
        let key = other_tenant.e.migration_destination_key(2048).unwrap();
        let r = t.e.export_state(&key, None, OaepHash::Sha256, b"");
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        let mut other_backend = if t.name == "process" {
            inline(1, InboundMode::Decrypt)
        } else {
            process(1, InboundMode::Decrypt)
        };
        let key = other_backend.e.migration_destination_key(2048).unwrap();
        let r = t.e.export_state(&key, None, OaepHash::Sha256, b"");
        refused(t, r, refusal::PEER_MISMATCH);
    });
}

/// Attack 2 at the source: a destination's evidence of another purpose (a provisioning
/// offer's, binding an X25519 key) presented to `export_state` as a destination key's.
#[test]
fn attack_export_to_evidence_of_another_purpose() {
    on_both(|t| {
        let mut genuine = twin(t, 1);
        let offer = genuine.e.provisioning_offer().unwrap();
        let forged = DestinationKey { spki_der: offer.public_key.to_vec(), evidence: offer.evidence };
        let r = t.e.export_state(&forged, None, OaepHash::Sha256, b"");
        refused(t, r, refusal::PEER_NOT_ATTESTED);
    });
}

/// AUTH over a transcript the enclave never saw: the gateway's own IKE_SA_INIT, another
/// SA's, the right message with the wrong nonce, or the peer's message for our AUTH.
#[test]
fn attack_auth_over_a_transcript_the_enclave_did_not_see() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = sa_init(t, &mut peer);
        let wrapped = wrap_secret(
            &ProvisioningKey::from_bytes(PROV_KEY),
            TenantId(1),
            SecretKind::PreSharedKey,
            b"psk",
        );
        let psk = t.e.provision_secret(&wrapped.unwrap()).unwrap();
        let mut out = [0u8; 64];
        let (ke, n) = ([0x33u8; 32], nonce(t.e.as_mut()));
        let own = support::sa_init_message(0x1111, 0, true, &ke, &n);
        let wrong_nonce = AuthInput { peer_nonce: &x.ni, ..x.auth_a(b"id") };
        let theirs = AuthInput { real_message: &x.msg2, ..x.auth_a(b"id") };
        let gateways = AuthInput { real_message: &own, ..x.auth_a(b"id") };
        for input in [gateways, wrong_nonce, theirs] {
            let r = t.e.auth_compute(x.ike_a, psk, AuthSpec::SharedKey, &input, &mut out);
            refused(t, r, refusal::NOT_THE_TRANSCRIPT);
            let r = t.e.auth_verify(
                x.ike_a,
                PeerCredential::SharedKey(psk),
                2,
                &[0; 32],
                &AuthInput { real_message: input.real_message, ..x.auth_b(b"id") },
            );
            if input.real_message != x.msg2.as_slice() {
                refused(t, r, refusal::NOT_THE_TRANSCRIPT);
            }
        }
        // The exchange's own input is signed, and verifies at the peer.
        let (_, len) =
            t.e.auth_compute(x.ike_a, psk, AuthSpec::SharedKey, &x.auth_a(b"id"), &mut out).unwrap();
        let peer_psk = peer
            .provision_secret(
                &wrap_secret(
                    &ProvisioningKey::from_bytes(PROV_KEY),
                    TenantId(1),
                    SecretKind::PreSharedKey,
                    b"psk",
                )
                .unwrap(),
            )
            .unwrap();
        peer.auth_verify(x.ike_b, PeerCredential::SharedKey(peer_psk), 2, &out[..len], &x.auth_a(b"id"))
            .unwrap();
    });
}

/// A second AUTH for one exchange: with another ID payload, or the same one again. Our AUTH
/// is computed once per IKE SA, so the gateway cannot collect signatures over identities of
/// its choosing for an exchange it runs.
#[test]
fn attack_a_second_auth_signature_for_one_exchange() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = sa_init(t, &mut peer);
        let key = ProvisioningKey::from_bytes(PROV_KEY);
        let psk =
            t.e.provision_secret(&wrap_secret(&key, TenantId(1), SecretKind::PreSharedKey, b"psk").unwrap());
        let psk = psk.unwrap();
        let mut out = [0u8; 64];
        let (_, len) =
            t.e.auth_compute(x.ike_a, psk, AuthSpec::SharedKey, &x.auth_a(b"site"), &mut out).unwrap();
        let first = out;
        for id in [&b"another identity"[..], b"site"] {
            let r = t.e.auth_compute(x.ike_a, psk, AuthSpec::SharedKey, &x.auth_a(id), &mut out);
            refused(t, r, refusal::ALREADY_SIGNED);
        }
        assert_eq!(out, first, "{}: a refused AUTH writes nothing", t.name);
        // The one AUTH verifies at the peer, and the exchange goes on: the peer's AUTH is
        // checked here and IKE_AUTH's child derives.
        let peer_psk =
            peer.provision_secret(&wrap_secret(&key, TenantId(1), SecretKind::PreSharedKey, b"psk").unwrap());
        let peer_psk = peer_psk.unwrap();
        peer.auth_verify(x.ike_b, PeerCredential::SharedKey(peer_psk), 2, &out[..len], &x.auth_a(b"site"))
            .unwrap();
        let mut theirs = [0u8; 64];
        let (_, n) =
            peer.auth_compute(x.ike_b, peer_psk, AuthSpec::SharedKey, &x.auth_b(b"gw"), &mut theirs).unwrap();
        t.e.auth_verify(x.ike_a, PeerCredential::SharedKey(psk), 2, &theirs[..n], &x.auth_b(b"gw")).unwrap();
        derive(t, x.ike_a, Role::Initiator, &x.ni, &x.nr).unwrap();
    });
}

/// A sealed IKE SA state restored beside the live SA it was sealed from (or twice): two
/// holders of one SK_e and one SK_d.
#[test]
fn attack_ike_sa_state_restored_beside_the_live_sa() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = support::exchange(t.e.as_mut(), &mut peer, PROV_KEY);
        t.e.clear_and_seal(x.ike_a).unwrap();
        let state = t.e.ike_sa_seal_state(x.ike_a).unwrap();
        let r = t.e.ike_sa_restore(&state);
        refused(t, r, refusal::IKE_SA_LIVE);
        // In a restarted instance (the SA went with the old one) it comes back once, and
        // only once.
        let mut later = restarted(t);
        let back = later.e.ike_sa_restore(&state).unwrap();
        let r = later.e.ike_sa_restore(&state);
        refused(&mut later, r, refusal::IKE_SA_LIVE);
        // Deleted, the SA has ended: its state never comes back.
        later.e.ike_sa_delete(back).unwrap();
        let r = later.e.ike_sa_restore(&state).map(|_| ());
        assert_eq!(r, Err(Error::SealedBlob { reason: BlobRejection::Rollback }), "{}: after delete", t.name);
        let mut third = restarted(t);
        let r = third.e.ike_sa_restore(&state).map(|_| ());
        assert_eq!(r, Err(Error::SealedBlob { reason: BlobRejection::Rollback }), "{}: nor later", t.name);
    });
}

/// An IKE SA's state sealed again supersedes the state before it: a later instance
/// restores only the latest, whatever older blob the store offers (the older one would
/// bring back the SA as it was, its message IDs and keys behind the live SA's).
#[test]
fn attack_ike_sa_state_rolled_back_after_a_later_seal() {
    on_both(|t| {
        let mut peer = inline_peer();
        let x = support::exchange(t.e.as_mut(), &mut peer, PROV_KEY);
        t.e.clear_and_seal(x.ike_a).unwrap();
        let old = t.e.ike_sa_seal_state(x.ike_a).unwrap();
        let newer = t.e.ike_sa_seal_state(x.ike_a).unwrap();
        assert!(newer.counter() > old.counter(), "{}", t.name);
        let mut later = restarted(t);
        let r = later.e.ike_sa_restore(&old).map(|_| ());
        assert_eq!(r, Err(Error::SealedBlob { reason: BlobRejection::Rollback }), "{}: rolled back", t.name);
        assert_eq!(later.e.counters().error(ErrorKind::BlobRejected), 1, "{}", t.name);
        later.e.ike_sa_restore(&newer).unwrap();
    });
}

/// A move package replayed (to the instance that imported it, or to a fresh one), cut,
/// re-ordered, or offered to another tenant's enclave: each refused, typed and counted.
#[test]
fn attack_replayed_reordered_or_cross_tenant_migration_package() {
    on_both(|t| {
        let mut src = twin(t, 1);
        src.e
            .provision_secret(
                &wrap_secret(
                    &ProvisioningKey::from_bytes(PROV_KEY),
                    TenantId(1),
                    SecretKind::PreSharedKey,
                    b"x",
                )
                .unwrap(),
            )
            .unwrap();
        let key = t.e.migration_destination_key(2048).unwrap();
        let package = src.e.export_state(&key, None, OaepHash::Sha256, b"").unwrap();
        // Cut, or with its share and body swapped about: refused before the key is spent.
        let bytes = package.as_bytes();
        let cut = migration::MigrationPackage::from_bytes(bytes[..bytes.len() - 1].to_vec());
        assert_eq!(cut.map(|_| ()), Err(Error::Migration { why: migration::why::TRUNCATED }));
        let mut reordered = bytes.to_vec();
        let at = migration::PACKAGE_HEADER_LEN;
        reordered[at..at + 256 + 32].rotate_left(32);
        let reordered = migration::MigrationPackage::from_bytes(reordered).unwrap();
        let r = t.e.import_state(&reordered, None);
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        // The attempt spent the key. Replayed to the same instance's next key, the genuine
        // package is bound to the key it was made for.
        let key = t.e.migration_destination_key(2048).unwrap();
        let r = t.e.import_state(&package, None);
        refused(t, r, refusal::PEER_NOT_ATTESTED);
        let mut dst = twin(t, 1);
        dst.e.migration_destination_key(2048).unwrap();
        // Bound to the target's key, not to this fresh instance's.
        let r = dst.e.import_state(&package, None);
        refused(&mut dst, r, refusal::PEER_NOT_ATTESTED);
        // A backup of the source's secrets goes into the target once (its key stands in for
        // the HSM's here).
        drop(key);
        let key = t.e.migration_destination_key(2048).unwrap();
        let cert = certify(backup_root(), &measurement(&mut src), &key.spki_der);
        let backup = src.e.export_secrets(&key.spki_der, &cert, OaepHash::Sha256, b"").unwrap();
        t.e.import_state(&backup, backup.hsm_share()).unwrap();
        // Replayed to the instance that imported it: state is never merged.
        t.e.migration_destination_key(2048).unwrap();
        let r = t.e.import_state(&backup, backup.hsm_share());
        refused(t, r, refusal::NOT_FRESH);
        // Another tenant's enclave.
        let mut other = twin(t, 2);
        other.e.migration_destination_key(2048).unwrap();
        let r = other.e.import_state(&backup, backup.hsm_share());
        assert_eq!(r.map(|_| ()), Err(Error::Migration { why: migration::why::WRONG_TENANT }), "{}", t.name);
        assert!(other.e.counters().error(ErrorKind::BlobRejected) >= 1, "{}", t.name);
    });
}

/// Attack 5: a sealed secret rolled back after a later seal: the older blob must not open
/// in a later instance, whatever the store keeps. The platform's ledger (not the caller)
/// says which of a secret's blobs is live.
#[test]
fn attack_sealed_secret_rolled_back_after_a_later_seal() {
    on_both(|t| {
        let wrapped = wrap_secret(
            &ProvisioningKey::from_bytes(PROV_KEY),
            TenantId(1),
            SecretKind::PreSharedKey,
            b"old psk",
        )
        .unwrap();
        let old = t.e.provision_secret(&wrapped).unwrap();
        let old_blob = t.e.seal_secret(old).unwrap();
        let newer = t.e.seal_secret(old).unwrap();
        assert!(newer.counter() > old_blob.counter(), "{}", t.name);
        let mut later = restarted(t);
        let r = later.e.unseal_secret(&old_blob);
        assert_eq!(
            r.map(|_| ()),
            Err(Error::SealedBlob { reason: BlobRejection::Rollback }),
            "{}: rolled back",
            t.name
        );
        assert_eq!(later.e.counters().error(ErrorKind::BlobRejected), 1, "{}", t.name);
        // The newer blob opens, once sealed again there the one before it stops opening.
        let back = later.e.unseal_secret(&newer).unwrap();
        let newest = later.e.seal_secret(back).unwrap();
        let mut third = restarted(t);
        assert!(third.e.unseal_secret(&newer).is_err(), "{}", t.name);
        third.e.unseal_secret(&newest).unwrap();
    });
}

/// Attack 5: static outbound ESP keys installed again in a restarted instance would start
/// their sequence numbers (AEAD IVs) at 1 again: the platform's ledger remembers them.
#[test]
fn attack_static_esp_keys_installed_again_after_a_restart() {
    on_both(|t| {
        let params = EspSaParams { spi: 0x5151, inbound: false, esn: false, suite: SUITE };
        let blob = cloister_enclave::provision::wrap_esp_sa_keys(
            &ProvisioningKey::from_bytes(PROV_KEY),
            TenantId(1),
            &params,
            &[0x42; 36],
            &[],
        )
        .unwrap();
        t.e.esp_sa_install_wrapped(&blob, &params).unwrap();
        let mut later = restarted(t);
        let r = later.e.esp_sa_install_wrapped(&blob, &params);
        assert!(matches!(r, Err(Error::KeyReuse { .. })), "{}: a fresh sequence space: {r:?}", t.name);
        assert_eq!(later.e.counters().error(ErrorKind::KeyState), 1, "{}", t.name);
        // The same keys as the inbound SA of the peer's direction are refused too.
        let inbound = EspSaParams { inbound: true, ..params };
        assert!(later.e.esp_sa_install_wrapped(&blob, &inbound).is_err(), "{}", t.name);
    });
}

// ---- positive controls ----------------------------------------------------------------------

/// IKE_SA_INIT, IKE_AUTH's child, then a CREATE_CHILD_SA rekey with PFS; ESP passes both ways.
#[test]
fn legit_ike_child_and_rekey_with_pfs() {
    on_both(|t| {
        let mut tun = tunnel(t);
        esp_across(t.e.as_mut(), tun.sa.outbound, &mut tun.peer, tun.peer_sa.inbound);
        esp_across(&mut tun.peer, tun.peer_sa.outbound, t.e.as_mut(), tun.sa.inbound);
        /* CREATE_CHILD_SA { SA, Ni, KEi, TSi, TSr } <--> { SA, Nr, KEr, TSi, TSr }, the peer initiating */
        let (ni, nr) = (nonce(&mut tun.peer), nonce(t.e.as_mut()));
        let (mut ke_p, mut ke_t) = ([0u8; 32], [0u8; 32]);
        let dh_p = tun.peer.dh_generate(DhGroup::Curve25519, &mut ke_p).unwrap();
        let dh_t = t.e.dh_generate(DhGroup::Curve25519, &mut ke_t).unwrap();
        let p = tun
            .peer
            .child_sa_create(
                tun.peer_ike,
                None,
                Some(DhExchange { dh: dh_p, peer_public: &ke_t }),
                &child_params(Role::Initiator, &ni, &nr, 0x900, 0x901),
            )
            .unwrap();
        let c =
            t.e.child_sa_create(
                tun.ike,
                None,
                Some(DhExchange { dh: dh_t, peer_public: &ke_p }),
                &child_params(Role::Responder, &ni, &nr, 0x901, 0x900),
            )
            .unwrap();
        esp_across(t.e.as_mut(), c.outbound, &mut tun.peer, p.inbound);
        esp_across(&mut tun.peer, p.outbound, t.e.as_mut(), c.inbound);
    });
}

/// Attested provisioning: the tenant verifies the offer and seals a PSK to it, unsigned
/// to an enclave that names no tenant signer, signed to one that names its signer.
#[test]
fn legit_attested_provisioning() {
    let provision = |t: &mut Target, signer: Option<&TenantSigner>| {
        let offer = t.e.provisioning_offer().unwrap();
        let expected = measurement(t);
        let kind = SecretKind::PreSharedKey;
        let envelope =
            seal_to_offer(&offer, &t.platform_public, &expected, TenantId(1), kind, b"tenant psk", 1, signer)
                .unwrap();
        let (h, sealed) = t.e.provision_attested(&envelope).unwrap();
        assert_eq!(t.e.secret_kind(h), Ok(SecretKind::PreSharedKey));
        assert!(sealed.counter().is_some());
    };
    on_both(|t| provision(t, None));
    on_both_signing(|t| provision(t, Some(tenant_signer())));
}

/// A live move between two enclaves of one measurement on the cluster: the destination's
/// key, the export (checked inside the source), the package's evidence (checked by the
/// destination's agent and inside the destination), the import; ESP goes on from there.
#[test]
fn legit_move_to_a_verified_destination() {
    on_both(|t| {
        let mut tun = tunnel(t);
        let mut dst = twin(t, 1);
        let key = dst.e.migration_destination_key(2048).unwrap();
        let package = t.e.export_state(&key, None, OaepHash::Sha256, b"state").unwrap();
        let v = migration::verify_source(&package, &t.platform_public, &key.spki_der).unwrap();
        assert_eq!((v.tenant, v.measurement), (TenantId(1), measurement(t)));
        let restored = dst.e.import_state(&package, None).unwrap();
        assert_eq!(restored.untrusted_state, b"state");
        let find = |old| restored.esp_sas.iter().find(|(o, _)| *o == old).unwrap().1;
        esp_across(&mut tun.peer, tun.peer_sa.outbound, dst.e.as_mut(), find(tun.sa.inbound));
    });
}

/// One packet sealed by `from` on `out` opens on `to` with `inb`.
fn esp_across(from: &mut dyn Enclave, out: EspSaHandle, to: &mut dyn Enclave, inb: EspSaHandle) {
    let mut area = vec![0u8; 4096];
    let inn = inner(3, 200);
    let len = lay_out(&mut area, 0, &inn);
    let mut st = [EspStatus::NotProcessed];
    from.esp_batch(&mut area, &[EspDescriptor::encrypt(out, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st, [EspStatus::Ok]);
    to.esp_batch(&mut area, &[EspDescriptor::decrypt(inb, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st, [EspStatus::Ok]);
}

// ---- attack: keys and AUTH from IKE_INTERMEDIATE exchanges --------------------------------

/// RFC 9370: the gateway asks the enclave to change an IKE SA's keys with an additional key
/// exchange that is not the one on the wire (KE values other than the agreement's, an old
/// message ID, another SA's nonces), or after AUTH, so as to sign for an exchange the
/// enclave never saw or move an authenticated SA onto keys of its choosing. Each is refused
/// and counted; the genuine exchange goes through, and its AUTH verifies at the peer.
#[test]
fn attack_keys_from_an_intermediate_exchange_the_enclave_did_not_see() {
    use enclave_api::testing::intermediate_message;
    on_both(|t| {
        let mut peer = inline_peer();
        let x = sa_init(t, &mut peer);
        let g = DhGroup::MlKem768;
        let mut ek = vec![0u8; g.public_len()];
        let dh = t.e.dh_generate(g, &mut ek).unwrap();
        let mut ct = vec![0u8; g.response_len()];
        let peer_dh = peer.ke_respond(g, &ek, &mut ct).unwrap();
        let msg = |resp, mid, ke: &[u8]| intermediate_message(x.spi_i, x.spi_r, resp, mid, g, ke);
        let (req, resp) = (msg(false, 1, &ek), msg(true, 1, &ct));
        let mut forged_ct = ct.clone();
        forged_ct[0] ^= 0x80;
        let forged = msg(true, 1, &forged_ct);
        let (old_req, old_resp) = (msg(false, 0, &ek), msg(true, 0, &ct));
        for (request, response, ni, nr, peer_public) in [
            (&req, &forged, &x.ni, &x.nr, &ct),
            (&req, &resp, &x.ni, &x.nr, &forged_ct),
            (&old_req, &old_resp, &x.ni, &x.nr, &ct),
            (&req, &resp, &x.nr, &x.ni, &ct),
        ] {
            let e = IntermediateExchange { nonce_i: ni, nonce_r: nr, request, response };
            let r = t.e.ike_sa_intermediate(x.ike_a, DhExchange { dh, peer_public }, &e);
            refused(t, r, refusal::NOT_THE_INTERMEDIATE);
        }
        let e = IntermediateExchange { nonce_i: &x.ni, nonce_r: &x.nr, request: &req, response: &resp };
        t.e.ike_sa_intermediate(x.ike_a, DhExchange { dh, peer_public: &ct }, &e).unwrap();
        peer.ike_sa_intermediate(x.ike_b, DhExchange { dh: peer_dh, peer_public: &ek }, &e).unwrap();
        let (psk, peer_psk) = (support::psk(t.e.as_mut(), PROV_KEY), support::psk(&mut peer, PROV_KEY));
        x.authenticate_psk(t.e.as_mut(), &mut peer, psk, peer_psk).unwrap();
        // Once AUTH is done, no exchange changes the keys.
        let dh2 = t.e.dh_generate(g, &mut ek).unwrap();
        let later = (msg(false, 2, &ek), msg(true, 2, &ct));
        let e =
            IntermediateExchange { nonce_i: &x.ni, nonce_r: &x.nr, request: &later.0, response: &later.1 };
        let r = t.e.ike_sa_intermediate(x.ike_a, DhExchange { dh: dh2, peer_public: &ct }, &e);
        refused(t, r, refusal::AUTH_STARTED);
    });
}
