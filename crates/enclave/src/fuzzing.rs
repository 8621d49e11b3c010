//! Fuzz entry: arbitrary bytes as what the enclave parses from its caller, through a real
//! trusted core (`fuzz/fuzz_targets/enclave_caller_input.rs`).
//!
//! The first byte picks the input: 0 an AUTH input's IKE_SA_INIT message (the transcript
//! check), 1 a sealed tenant secret, 2 a sealed IKE SA state, 3 a provisioning blob and an
//! attested-provisioning envelope (also to an instance whose tenant signs), 4 wrapped
//! static ESP SA keys, 5 a migration package's
//! header and a decrypted package state (the restore parser, which otherwise runs only on
//! authenticated bytes), 6 an IKE_INTERMEDIATE exchange (RFC 9370: its two messages in
//! RFC 9242's form, with an ML-KEM key the fuzzer never sees). The rest is the input. Nothing may panic; nothing forged may be
//! accepted (the transcript passes only the exchange's own message; blobs under the
//! enclave's keys cannot be forged by a fuzzer), and whatever a call does accept is deleted
//! again, so the tables do not fill across runs.

use crate::attest::{CodeIdentity, SoftwareAttestation};
use crate::inline::InlineEnclave;
use crate::migration::MigrationPackage;
use crate::trusted::TrustedCore;
use enclave_api::alg::{Cipher, DhGroup, Prf, Role, SecretKind, Suite};
use enclave_api::esp::EspSaParams;
use enclave_api::handle::{IkeSaHandle, SecretHandle, TenantId};
use enclave_api::ike::{
    AuthInput, AuthSpec, DhExchange, IkeSaParams, IntermediateExchange, PeerCredential, SealedBlob,
};
use enclave_api::report::{EnclaveConfig, Limits, ProvisioningKey};
use enclave_api::Enclave;
use std::sync::{Mutex, OnceLock};
use zeroize::Zeroizing;

const PROV_KEY: [u8; 32] = [0x77; 32];

struct Harness {
    e: InlineEnclave,
    /// An instance whose measured configuration names a tenant signer.
    signing: InlineEnclave,
    core: TrustedCore,
    ike: IkeSaHandle,
    psk: SecretHandle,
    /// The exchange's IKE_SA_INIT request and the two nonces.
    msg1: Vec<u8>,
    ni: Vec<u8>,
    nr: Vec<u8>,
}

fn config() -> EnclaveConfig {
    EnclaveConfig {
        tenant: TenantId(1),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

fn attestation() -> Option<Box<SoftwareAttestation>> {
    let key = SoftwareAttestation::generate_platform_key().ok()?;
    let c = config();
    SoftwareAttestation::new(
        &key,
        CodeIdentity::Bytes(b"fuzz".to_vec()),
        &c.measured_bytes(crate::Backend::Inline),
    )
    .ok()
    .map(Box::new)
}

/// An IKE SA between two instances, made from a real IKE_SA_INIT, its SK_p still resident.
fn harness() -> Option<Harness> {
    let mut e = InlineEnclave::start(config(), attestation()?).ok()?;
    let mut peer = InlineEnclave::start(config(), attestation()?).ok()?;
    let core =
        TrustedCore::start(config(), attestation()?, Box::new(enclave_api::ledger::MemoryLedger::new()))
            .ok()?;
    let signer =
        crate::provision::TenantSigner::from_pkcs8(&crate::provision::TenantSigner::generate().ok()?).ok()?;
    let signing_config = EnclaveConfig { tenant_signers: vec![signer.public_key().to_vec()], ..config() };
    let signing = InlineEnclave::start(signing_config, attestation()?).ok()?;
    let (mut ni, mut nr) = ([0u8; crate::IKE_NONCE_LEN], [0u8; crate::IKE_NONCE_LEN]);
    e.ike_nonces(&mut ni).ok()?;
    peer.ike_nonces(&mut nr).ok()?;
    let (mut ke, mut peer_ke) = ([0u8; 32], [0u8; 32]);
    let dh = e.dh_generate(DhGroup::Curve25519, &mut ke).ok()?;
    peer.dh_generate(DhGroup::Curve25519, &mut peer_ke).ok()?;
    let params = IkeSaParams {
        role: Role::Initiator,
        prf: Prf::HmacSha256,
        suite: Suite::aead(Cipher::AesGcm16_256),
        nonce_i: &ni,
        nonce_r: &nr,
        spi_i: 0x1111,
        spi_r: 0x2222,
    };
    let ike = e.ike_sa_create(DhExchange { dh, peer_public: &peer_ke }, &params).ok()?;
    let blob = crate::provision::wrap_secret(
        &ProvisioningKey::from_bytes(PROV_KEY),
        TenantId(1),
        SecretKind::PreSharedKey,
        b"fuzz psk",
    )
    .ok()?;
    let psk = e.provision_secret(&blob).ok()?;
    let msg1 = enclave_api::testing::sa_init_message(0x1111, 0, true, DhGroup::Curve25519, &ke, &ni);
    Some(Harness { e, signing, core, ike, psk, msg1, ni: ni.to_vec(), nr: nr.to_vec() })
}

/// Runs one input (module docs).
pub fn caller_input(data: &[u8]) {
    static H: OnceLock<Option<Mutex<Harness>>> = OnceLock::new();
    let Some(h) = H.get_or_init(|| harness().map(Mutex::new)).as_ref() else { return };
    let Ok(mut h) = h.lock() else { return };
    let Some((&pick, input)) = data.split_first() else { return };
    let h = &mut *h;
    match pick % 7 {
        0 => {
            let auth = AuthInput { real_message: input, peer_nonce: &h.nr, id_body: b"id" };
            let mut out = [0u8; 64];
            let ours = h.e.auth_compute(h.ike, h.psk, AuthSpec::SharedKey, &auth, &mut out);
            assert!(ours.is_err() || input == h.msg1.as_slice(), "AUTH over another message");
            let _ = h.e.auth_verify(h.ike, PeerCredential::SharedKey(h.psk), 2, &[0; 32], &auth);
        }
        1 => {
            if let Ok(s) = h.e.unseal_secret(&SealedBlob(input.to_vec())) {
                let _ = h.e.delete_secret(s);
            }
        }
        2 => {
            if let Ok(s) = h.e.ike_sa_restore(&SealedBlob(input.to_vec())) {
                let _ = h.e.ike_sa_delete(s);
            }
        }
        3 => {
            if let Ok(s) = h.e.provision_secret(input) {
                let _ = h.e.delete_secret(s);
            }
            if let Ok((s, _)) = h.e.provision_attested(input) {
                let _ = h.e.delete_secret(s);
            }
            assert!(h.signing.provision_secret(input).is_err(), "a wrapped blob where the tenant signs");
            if let Ok((s, _)) = h.signing.provision_attested(input) {
                let _ = h.signing.delete_secret(s);
            }
        }
        4 => {
            let params = EspSaParams {
                spi: 0x1234,
                inbound: input.first().is_some_and(|b| b & 1 == 1),
                esn: false,
                suite: Suite::aead(Cipher::AesGcm16_128),
            };
            if let Ok(s) = h.e.esp_sa_install_wrapped(input, &params) {
                let _ = h.e.esp_sa_delete(s);
            }
        }
        6 => {
            // The first byte splits the rest into request and response (in 8-byte steps).
            let Some((&at, rest)) = input.split_first() else { return };
            let (request, response) = rest.split_at((usize::from(at) * 8).min(rest.len()));
            let mut ek = vec![0u8; DhGroup::MlKem768.public_len()];
            let Ok(dh) = h.e.dh_generate(DhGroup::MlKem768, &mut ek) else { return };
            let x = IntermediateExchange { nonce_i: &h.ni, nonce_r: &h.nr, request, response };
            let done = h.e.ike_sa_intermediate(h.ike, DhExchange { dh, peer_public: response }, &x);
            assert!(done.is_err(), "an IKE_INTERMEDIATE with a key the caller never saw");
            let _ = h.e.dh_delete(dh);
        }
        _ => {
            // The package's header and the source's evidence as an import reads them (the
            // key is no platform's, so verification ends at the signature).
            if let Ok(p) = MigrationPackage::from_bytes(input.to_vec()) {
                let _ = crate::migration::verify_source(&p, &[4; 65], b"");
            }
            if let Ok(r) = h.core.restore(Zeroizing::new(input.to_vec())) {
                for (_, s) in r.secrets {
                    let _ = h.core.delete_secret(s);
                }
                for (_, s) in r.ike_sas {
                    let _ = h.core.ike_sa_delete(s);
                }
                for (_, s) in r.esp_sas {
                    let _ = h.core.esp_sa_delete(s);
                }
            }
        }
    }
}
