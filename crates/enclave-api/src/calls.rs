//! The call table: every call into the enclave, once.
//!
//! [`enclave_calls!`](crate::enclave_calls) holds one entry per call: its kind, its opcode,
//! its documentation and its Rust signature. Everything else that names the calls is made
//! from it: the [`crate::Enclave`] trait (below), the opcodes
//! ([`crate::process::codec::op`]), the process backend's host stubs
//! (`cloister-enclave-host`) and guest dispatch (`cloister-enclave`), and the wrappers
//! that forward every call ([`forward_enclave!`](crate::forward_enclave)). A new call is
//! one entry here plus its trusted implementation; its arguments and result cross the
//! process boundary as their [`crate::process::wire`] encodings say (a new parameter or
//! return type needs one there). Test doubles that implement the trait by hand (the
//! guest's mock core, a tampering enclave in the IKE tests) name the calls they use.
//!
//! Kinds:
//! - `query`: `&self`, answers a plain value (a failed crossing answers the default);
//! - `call`: `&mut self`, answers `Result`; one crossing;
//! - `composite`: a call whose default body makes it of other calls, which a backend that
//!   crosses a boundary makes one crossing (a backend without one keeps the default);
//! - `staged`: a call whose arguments or result may exceed the call area; the process
//!   backend streams them (its host and guest sides are hand-written for that).
//!
//! A parameter marked `#[out]` is a buffer the enclave fills (its length crosses, then its
//! bytes come back); `#[inout]` one it changes in place (its bytes cross both ways). The
//! methods that are not calls (`tenant`, `esp_batch`, `esp_lane`) are written beside the
//! table by each implementation.

/// The call table (see [`crate::calls`]). `enclave_calls!({ path::to::consumer } [extra])`
/// expands to `path::to::consumer! { [extra] entries... }`.
#[macro_export]
#[doc(hidden)]
macro_rules! enclave_calls {
    ({ $($cb:tt)+ } [$($extra:tt)*]) => {
        $($cb)+ ! { [$($extra)*]

/// Evidence that this enclave runs its measurement for its tenant, fresh for a
/// verifier's `challenge`: purpose [`crate::attest::EvidencePurpose::Identity`], over
/// `cloister_attest::evidence::identity_report_data`. There is no call for evidence over report
/// data the caller chooses: every other piece of evidence comes with the value it
/// vouches for (an offer, a destination key, inside an exported package).
call IDENTITY_EVIDENCE = 1
fn identity_evidence(challenge: &[u8; 32]) -> $crate::attest::Evidence;

/// Bytes of trusted memory held, per kind.
query MEMORY_REPORT = 2
fn memory_report() -> $crate::MemoryReport;

/// Refusals and packet outcomes since start.
query COUNTERS = 3
fn counters() -> $crate::Counters;

/// Unwraps a provisioning blob ([`crate::provision`]) and keeps the secret inside.
call PROVISION_SECRET = 4
fn provision_secret(wrapped: &[u8]) -> $crate::SecretHandle;

/// Attested provisioning, step 1 ([`crate::provision`]): a fresh X25519 key pair and
/// challenge, the private key kept inside (at most 16 outstanding, the oldest evicted;
/// each expires after [`crate::provision::OFFER_LIFETIME_SECS`]), the public part
/// returned with evidence that binds it to this enclave.
///
/// The default refuses: every backend implements it.
call PROVISIONING_OFFER = 23
fn provisioning_offer() -> $crate::ProvisioningOffer = |_this| {
    Err($crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
};

/// Attested provisioning, step 3: opens a tenant's envelope
/// (`cloister_attest::provision::seal_to_offer`) with the offer it names, which it consumes
/// (single use), checks the secret as [`Self::provision_secret`] does for its kind, and
/// keeps it. Also returns the secret sealed for restarts (kind 3,
/// [`crate::seal_format`]): store it; [`Self::unseal_secret`] brings the secret back.
///
/// The default refuses: every backend implements it.
call PROVISION_ATTESTED = 24
fn provision_attested(envelope: &[u8]) -> ($crate::SecretHandle, $crate::SealedBlob) = |_this| {
    let _ = envelope;
    Err($crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
};

/// Keeps the secret of a sealed tenant secret (kind 3) that an instance of this tenant's
/// enclave with the same root sealed in [`Self::provision_attested`]; refuses other
/// kinds, other tenants' blobs, forged ones and ones a newer seal of the secret superseded.
///
/// The default refuses: every backend implements it.
call UNSEAL_SECRET = 25
fn unseal_secret(sealed: &$crate::SealedBlob) -> $crate::SecretHandle = |_this| {
    let _ = sealed;
    Err($crate::Error::Unsupported { what: "attested provisioning on this backend", value: 0 })
};

/// Seals a secret this instance holds (e.g. one [`Self::import_state`] restored from a
/// backup package) under this instance's root, as [`Self::provision_attested`] seals a
/// new one (kind 3, [`crate::seal_format`]): store it; [`Self::unseal_secret`] on a later
/// instance of this tenant and root brings the secret back. The secret stays here.
///
/// The default refuses: every backend implements it.
call SEAL_SECRET = 36
fn seal_secret(secret: $crate::SecretHandle) -> $crate::SealedBlob = |_this| {
    let _ = secret;
    Err($crate::Error::Unsupported { what: "secret sealing on this backend", value: 0 })
};

/// Backup, source side ([`crate::migration`], "Backup packages"): checks that
/// `certificate` is a backup root's certificate of `wrap_spki` for this enclave's
/// measurement (`cloister_attest::migration::backup_key_message`, roots from the measured
/// configuration; otherwise [`crate::Error::ProtocolRefused`]), then makes a package of
/// kind `Backup`, importable by [`Self::import_state`] with the HSM's rewrap of its one
/// share (wrapped with RSA-OAEP `oaep` to `wrap_spki`), that carries the seal counter,
/// every secret and `untrusted_state` but no IKE or ESP SA, signed with this enclave's
/// evidence (purpose `Backup`). Leaves every SA as it is (no sequence number cap) and
/// works whether or not this instance exported its state before: the tenant keeps
/// serving, and restoring stale SAs would repeat AEAD IVs.
///
/// The default refuses: every backend implements it.
staged EXPORT_SECRETS = 37
fn export_secrets(
    wrap_spki: &[u8],
    certificate: &[u8],
    oaep: $crate::migration::OaepHash,
    untrusted_state: &[u8]
) -> $crate::migration::MigrationPackage = |_this| {
    let _ = (wrap_spki, certificate, oaep, untrusted_state);
    Err($crate::Error::Unsupported { what: "secret backup on this backend", value: 0 })
};

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
/// The default refuses: every backend implements it.
staged EXPORT_STATE = 26
fn export_state(
    destination: &$crate::migration::DestinationKey,
    hsm_spki: Option<&[u8]>,
    oaep: $crate::migration::OaepHash,
    untrusted_state: &[u8]
) -> $crate::migration::MigrationPackage = |_this| {
    let _ = (destination, hsm_spki, oaep, untrusted_state);
    Err($crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
};

/// Migration, destination side: a fresh RSA key pair of `bits` (2048..=4096; see
/// [`crate::migration::DEFAULT_DESTINATION_BITS`]), the private key kept inside for one
/// import (a new call destroys the previous one), the public key returned with evidence
/// whose report data is `cloister_attest::migration::destination_report_data` of it.
///
/// The default refuses: every backend implements it.
call MIGRATION_DESTINATION_KEY = 27
fn migration_destination_key(bits: usize) -> $crate::migration::DestinationKey = |_this| {
    let _ = bits;
    Err($crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
};

/// Migration, destination side, into an instance that holds no secret and no SA yet
/// (otherwise [`crate::Error::ProtocolRefused`]): checks the package's evidence (a
/// trusted platform's enclave of this tenant and measurement made this very package, for
/// this instance's destination key if it is a move), opens its shares with the
/// destination key, which this consumes whatever happens next, `hsm_share` being the
/// package's HSM share as the HSM rewrapped it to that key; decrypts the package and
/// installs its state, all or nothing. Returns the new handles and the untrusted state.
///
/// The default refuses: every backend implements it.
staged IMPORT_STATE = 28
fn import_state(
    package: &$crate::migration::MigrationPackage,
    hsm_share: Option<&[u8]>
) -> $crate::migration::MigrationRestore = |_this| {
    let _ = (package, hsm_share);
    Err($crate::Error::Unsupported { what: "state migration on this backend", value: 0 })
};

/// What kind of secret a handle names.
call SECRET_KIND = 5
fn secret_kind(secret: $crate::SecretHandle) -> $crate::SecretKind;

/// Forgets a secret (zeroized where the key type allows, see docs/threat-model.md).
call DELETE_SECRET = 6
fn delete_secret(secret: $crate::SecretHandle) -> ();

/// Fills `out` (16..=256 bytes) from the enclave's CSPRNG: public random values (SPIs,
/// cookie secrets, timer jitter). Never an IKE nonce: those come from [`Self::ike_nonces`].
call RANDOM_NONCE = 7
fn random_nonce(#[out] out: &mut [u8]) -> ();

/// Fills `out` with fresh IKE Nonce Data of this enclave, [`crate::IKE_NONCE_LEN`] bytes
/// each (`out.len()` a whole number of them). Every IKE SA and child SA derivation must
/// name one of these as our side's nonce, which it spends (one derivation per nonce), and
/// our role in that exchange is the position the nonce holds (Ni: initiator); only
/// IKE_AUTH's first child reuses IKE_SA_INIT's pair, once. The enclave recognises its
/// nonces by a MAC; it tracks the use of the last 65536 issued and refuses older ones.
call IKE_NONCES = 42
fn ike_nonces(#[out] out: &mut [u8]) -> ();

/// Generates an ephemeral DH private value and writes its public value (Key Exchange
/// Data, exactly [`crate::DhGroup::public_len`] bytes) to `public_out`.
call DH_GENERATE = 8
fn dh_generate(group: $crate::DhGroup, #[out] public_out: &mut [u8]) -> $crate::DhHandle;

/// Forgets an unused DH private value.
call DH_DELETE = 9
fn dh_delete(dh: $crate::DhHandle) -> ();

/// The responder's value of a key exchange whose initiator sent `peer_public`: for a DH
/// group a fresh private value (as [`Self::dh_generate`]; `peer_public` is checked in the
/// agreement); for a KEM the encapsulation to `peer_public` (its ciphertext into
/// `public_out`, exactly [`crate::DhGroup::response_len`] bytes), whose shared secret only an
/// agreement with that same `peer_public` yields.
call KE_RESPOND = 43
fn ke_respond(group: $crate::DhGroup, peer_public: &[u8], #[out] public_out: &mut [u8]) -> $crate::DhHandle;

/// An additional key exchange of IKE_SA_INIT, done in IKE_INTERMEDIATE (RFC 9370 §2.2.2),
/// before any AUTH of this IKE SA was computed or verified: checks that `exchange` is this
/// SA's next IKE_INTERMEDIATE (its SPIs, a message ID above the last one's, its
/// IKE_SA_INIT's nonces) and that its request and response each carry exactly one KE
/// payload, with the two values the agreement `ke` uses; computes the RFC 9242 IntAuth
/// chains over both messages with the current SK_pi/SK_pr; agrees (consuming `ke.dh`)
/// and derives all keys anew: SKEYSEED = prf(SK_d, SK(n) | Ni | Nr), SK_* = prf+(SKEYSEED,
/// Ni | Nr | SPIi | SPIr). Protect the exchange's messages before this call (with the
/// keys they were sent under). Every AUTH of the SA then also covers
/// `IntAuth_i | IntAuth_r | IKE_AUTH_MID` (the IKE_AUTH request's message ID is the last
/// IKE_INTERMEDIATE's plus one).
call IKE_SA_INTERMEDIATE = 44
fn ike_sa_intermediate(
    ike: $crate::IkeSaHandle,
    ke: $crate::DhExchange<'_>,
    exchange: &$crate::IntermediateExchange<'_>
) -> ();

/// IKE_SA_INIT done: agrees on g^ir (consuming `dh`), derives SKEYSEED and
/// SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr (RFC 7296 §2.14). SKEYSEED and g^ir
/// are never stored.
call IKE_SA_CREATE = 10
fn ike_sa_create(dh: $crate::DhExchange<'_>, params: &$crate::IkeSaParams<'_>) -> $crate::IkeSaHandle;

/// The responder's key work for IKE_SA_INIT in one call: its value of `group` (into
/// `public_out`, as [`Self::ke_respond`]), agreed with
/// `peer_public` into a new IKE SA (as [`Self::ike_sa_create`]).
composite IKE_SA_RESPOND = 39
fn ike_sa_respond(
    group: $crate::DhGroup,
    peer_public: &[u8],
    #[out] public_out: &mut [u8],
    params: &$crate::IkeSaParams<'_>
) -> $crate::IkeSaHandle = |this| {
    let dh = this.ke_respond(group, peer_public, public_out)?;
    this.ike_sa_create($crate::DhExchange { dh, peer_public }, params)
};

/// CREATE_CHILD_SA rekeying `old` (RFC 7296 §2.18): SKEYSEED = prf_old(SK_d_old,
/// g^ir_new | Ni | Nr). Pass the sealed SK_d blob once `old` has been cleared and sealed.
/// The new SA holds no SK_pi/SK_pr: a rekeyed IKE SA never authenticates again.
call IKE_SA_REKEY = 11
fn ike_sa_rekey(
    old: $crate::IkeSaHandle,
    sealed_sk_d: Option<&$crate::SealedBlob>,
    dh: $crate::DhExchange<'_>,
    params: &$crate::IkeSaParams<'_>
) -> $crate::IkeSaHandle;

/// CREATE_CHILD_SA rekeying `old` with RFC 9370 additional key exchanges, once the last
/// IKE_FOLLOWUP_KE is done (§2.2.4): as [`Self::ike_sa_rekey`] with SKEYSEED =
/// prf_old(SK_d_old, SK(0) | Ni | Nr | SK(1) | ... | SK(n)); `kes` are the exchanges in
/// order, the KE transform's first (1..=8), each consumed whether or not this succeeds.
call IKE_SA_REKEY_ADDITIONAL = 45
fn ike_sa_rekey_additional(
    old: $crate::IkeSaHandle,
    sealed_sk_d: Option<&$crate::SealedBlob>,
    kes: &[$crate::DhExchange<'_>],
    params: &$crate::IkeSaParams<'_>
) -> $crate::IkeSaHandle;

/// Computes our AUTH payload's Authentication Data into the start of `out`; returns the
/// Auth Method and the number of bytes written.
call AUTH_COMPUTE = 12
fn auth_compute(
    ike: $crate::IkeSaHandle,
    credential: $crate::SecretHandle,
    spec: $crate::AuthSpec,
    input: &$crate::AuthInput<'_>,
    #[out] out: &mut [u8]
) -> ($crate::AuthMethod, usize);

/// Verifies the peer's AUTH payload (`method` and `auth_data` as received).
call AUTH_VERIFY = 13
fn auth_verify(
    ike: $crate::IkeSaHandle,
    peer: $crate::PeerCredential<'_>,
    method: u8,
    auth_data: &[u8],
    input: &$crate::AuthInput<'_>
) -> $crate::AuthVerified;

/// Verifies the peer's AUTH and, only once it has verified, computes ours into `out`:
/// the responder's half of IKE_AUTH in one call. `Err` means the peer's AUTH was
/// refused, as from [`Self::auth_verify`]; an error computing ours is in
/// [`crate::AuthAnswered::ours`].
composite AUTH_VERIFY_COMPUTE = 40
fn auth_verify_compute(
    ike: $crate::IkeSaHandle,
    peer: $crate::PeerAuthCheck<'_>,
    ours: &$crate::OurAuth<'_>,
    #[out] out: &mut [u8]
) -> $crate::AuthAnswered = |this| {
    let verified = this.auth_verify(ike, peer.credential, peer.method, peer.auth_data, &peer.input)?;
    let ours = this.auth_compute(ike, ours.credential, ours.spec, &ours.input, out);
    Ok($crate::AuthAnswered { verified, ours })
};

/// Protects an outgoing message in place. `message` starts at the IKE header and ends at
/// the ICV; `message[..aad_len]` is the IKE header through the SK (or SKF) payload header,
/// already final; the inner payloads are the next `plaintext_len` bytes after the IV.
/// Its length must be `aad_len + suite.sk_layout(plaintext_len).body_len(plaintext_len)`.
/// The enclave writes IV, padding, Pad Length and ICV and encrypts.
call SK_ENCRYPT = 14
fn sk_encrypt(
    ike: $crate::IkeSaHandle,
    #[inout] message: &mut [u8],
    aad_len: usize,
    plaintext_len: usize
) -> ();

/// Checks and decrypts an incoming message in place (same layout as [`Self::sk_encrypt`]);
/// returns where the inner payloads now are. The ICV is verified before any plaintext
/// is released.
call SK_DECRYPT = 15
fn sk_decrypt(
    ike: $crate::IkeSaHandle,
    #[inout] message: &mut [u8],
    aad_len: usize
) -> core::ops::Range<usize>;

/// Derives a child SA's KEYMAT (RFC 7296 §2.17), with a PFS DH agreement when `pfs` is
/// given, and installs both directions.
call CHILD_SA_CREATE = 16
fn child_sa_create(
    ike: $crate::IkeSaHandle,
    sealed_sk_d: Option<&$crate::SealedBlob>,
    pfs: Option<$crate::DhExchange<'_>>,
    params: &$crate::ChildSaParams<'_>
) -> $crate::ChildSaPair;

/// EnclaveVPN clear-and-seal (§4.5.2), once IKE_AUTH is done: zeroizes SK_pi/SK_pr and
/// moves SK_d out of trusted memory into a sealed blob for later rekeys.
call CLEAR_AND_SEAL = 17
fn clear_and_seal(ike: $crate::IkeSaHandle) -> $crate::SealedBlob;

/// Seals what a restarted enclave needs to bring back a cleared-and-sealed IKE SA
/// (SK_ai/SK_ar/SK_ei/SK_er and the counter of its SK_d blob; never SK_p*): store it
/// beside the SK_d blob. Refused with [`crate::Error::NotSealed`] before clear-and-seal.
call IKE_SA_SEAL_STATE = 20
fn ike_sa_seal_state(ike: $crate::IkeSaHandle) -> $crate::SealedBlob;

/// What the IKE engine does once IKE_AUTH is done, in one call: clear-and-seal, the
/// sealing of the restart state, and the trusted bytes of this IKE SA before and after
/// (the engine reports them). The cost must not grow with the number of SAs held: it runs
/// once per tunnel set up.
call ESTABLISH_SEAL = 38
fn establish_seal(ike: $crate::IkeSaHandle) -> $crate::EstablishSeal;

/// [`Self::sk_encrypt`] of the last message of IKE_AUTH, then [`Self::establish_seal`].
/// Nothing is sealed when the encryption fails.
composite SK_ENCRYPT_ESTABLISH = 41
fn sk_encrypt_establish(
    ike: $crate::IkeSaHandle,
    #[inout] message: &mut [u8],
    aad_len: usize,
    plaintext_len: usize
) -> $crate::EstablishSeal = |this| {
    this.sk_encrypt(ike, message, aad_len, plaintext_len)?;
    this.establish_seal(ike)
};

/// Brings back an IKE SA from a state blob sealed by an earlier instance of this
/// tenant's enclave (same provisioning key). Its SK_d comes from the SK_d blob as before;
/// child SAs are not restored — rekey them through the restored IKE SA, since an
/// outbound ESP SA restored from a snapshot could reuse sequence numbers (AEAD IVs).
/// Refused while an IKE SA with the blob's SPIs is live in this instance: two copies of
/// one SA would send under one SK_e and derive children from one SK_d. Refused too
/// ([`crate::BlobRejection::Rollback`]) unless the blob is the SA's latest state and the
/// SA was not deleted: the platform's ledger says so, not the caller.
call IKE_SA_RESTORE = 21
fn ike_sa_restore(state: &$crate::SealedBlob) -> $crate::IkeSaHandle;

/// Makes a cleared-and-sealed IKE SA's SK_d resident again from `sealed_sk_d`, so that
/// [`Self::export_state`] carries it (another host's enclave cannot open this one's
/// blobs); the destination seals it anew with [`Self::clear_and_seal`].
///
/// The default refuses: every backend implements it.
call IKE_SA_UNSEAL_SK_D = 35
fn ike_sa_unseal_sk_d(ike: $crate::IkeSaHandle, sealed_sk_d: &$crate::SealedBlob) -> () = |_this| {
    let _ = (ike, sealed_sk_d);
    Err($crate::Error::Unsupported { what: "SK_d unsealing on this backend", value: 0 })
};

/// Forgets an IKE SA: its keys are zeroized, its SK_d blob no longer opens here (no SA
/// holds its counter), and its state blob restores it nowhere (the platform's ledger
/// retires the blob's counter).
call IKE_SA_DELETE = 18
fn ike_sa_delete(ike: $crate::IkeSaHandle) -> ();

/// Forgets one direction of an ESP SA.
call ESP_SA_DELETE = 19
fn esp_sa_delete(sa: $crate::EspSaHandle) -> ();

/// Installs one direction of a static ESP SA (no IKE) from keys the tenant wrapped for
/// this enclave (`cloister_attest::provision::wrap_esp_sa_keys`): the blob is opened, its
/// direction, SPI and transform must be `params`', its key lengths the transform's, and
/// the keys go straight into the SA; they are not kept as a secret. Refused when the
/// encryption key is already an outbound SA's of this instance, or used in the other
/// direction ([`crate::Error::KeyReuse`]: a static outbound SA starts at sequence number
/// 1, so installing its keys twice would repeat IVs).
///
/// The default refuses: every backend implements it.
call ESP_SA_INSTALL_WRAPPED = 22
fn esp_sa_install_wrapped(wrapped: &[u8], params: &$crate::EspSaParams) -> $crate::EspSaHandle = |_this| {
    let _ = (wrapped, params);
    Err($crate::Error::Unsupported { what: "static ESP SAs from wrapped keys on this backend", value: 0 })
};

        }
    };
}

/// Makes the [`crate::Enclave`] trait of the table, with `extra` (the methods that are not
/// calls) first.
#[macro_export]
#[doc(hidden)]
macro_rules! __enclave_trait {
    ([$($extra:tt)*] $(
        $(#[$attr:meta])*
        $kind:ident $opname:ident = $opnum:literal
        fn $name:ident ( $( $(#[$pm:ident])? $p:ident : $t:ty ),* ) -> $ret:ty $( = |$dthis:ident| $default:block )? ;
    )*) => {
        /// The enclave's calls ("ECalls"): one per IKE step, one per ESP batch.
        ///
        /// Implemented by the trusted core in-process (`cloister_enclave::InlineEnclave`)
        /// and by the isolated-process backend (`cloister_enclave_host::ProcessEnclave`).
        /// Every argument is untrusted: handles, lengths and offsets are checked, and a
        /// refusal is a typed [`crate::Error`] (or a per-packet [`crate::EspStatus`]) that
        /// is counted and never carries key bytes. The calls are the table's,
        /// [`crate::calls`].
        pub trait Enclave: Send {
            $($extra)*
            $( $crate::__enclave_trait_fn! { $kind [$(#[$attr])*] $name ($($p : $t),*) -> $ret [$($dthis $default)?] } )*
        }
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! __enclave_trait_fn {
    (query [$(#[$attr:meta])*] $name:ident () -> $ret:ty []) => {
        $(#[$attr])*
        fn $name(&self) -> $ret;
    };
    ($kind:ident [$(#[$attr:meta])*] $name:ident ($($p:ident : $t:ty),*) -> $ret:ty []) => {
        $(#[$attr])*
        fn $name(&mut self $(, $p: $t)*) -> $crate::Result<$ret>;
    };
    ($kind:ident [$(#[$attr:meta])*] $name:ident ($($p:ident : $t:ty),*) -> $ret:ty [$dthis:ident $default:block]) => {
        $(#[$attr])*
        fn $name(&mut self $(, $p: $t)*) -> $crate::Result<$ret> {
            let $dthis = self;
            $default
        }
    };
}

/// The opcode constants of the table, each checked distinct at compile time.
#[macro_export]
#[doc(hidden)]
macro_rules! __enclave_opcodes {
    ([] $(
        $(#[$attr:meta])*
        $kind:ident $opname:ident = $opnum:literal
        fn $name:ident ( $( $(#[$pm:ident])? $p:ident : $t:ty ),* ) -> $ret:ty $( = |$dthis:ident| $default:block )? ;
    )*) => {
        $(
            #[doc = concat!("[`crate::Enclave::", stringify!($name), "`] (", stringify!($kind), ").")]
            pub const $opname: u16 = $opnum;
        )*
        /// Every opcode of the table.
        pub const CALLS: &[u16] = &[$($opnum),*];
        const _: () = {
            let mut i = 0;
            while i < CALLS.len() {
                let mut j = i + 1;
                while j < CALLS.len() {
                    assert!(CALLS[i] != CALLS[j], "two calls share an opcode");
                    j += 1;
                }
                i += 1;
            }
        };
    };
}

/// Implements [`crate::Enclave`] for a wrapper by forwarding every call of the table.
///
/// ```ignore
/// enclave_api::forward_enclave! {
///     impl[E: Enclave] for Shared<E>, via |this| this.lock(), result |r| r;
///     fn tenant(&self) -> TenantId { self.tenant }
///     fn esp_batch(/* ... */) -> Result<BatchSummary> { /* ... */ }
/// }
/// ```
///
/// `via` names the inner enclave (`this` is the wrapper); `result` maps each call's result
/// (`|r| r` keeps it). The methods that are not calls follow, written out. `primitives`
/// before `impl` leaves the `composite` calls to the trait's defaults, for an inner value
/// that offers only the primitive calls.
#[macro_export]
macro_rules! forward_enclave {
    (impl [$($gen:tt)*] for $ty:ty, via |$this:ident| $via:expr, result |$r:ident| $then:expr; $($local:tt)*) => {
        $crate::enclave_calls!({ $crate::__forward } [all [$($gen)*] [$ty] $this [$via] $r [$then] [$($local)*]]);
    };
    (primitives impl [$($gen:tt)*] for $ty:ty, via |$this:ident| $via:expr, result |$r:ident| $then:expr; $($local:tt)*) => {
        $crate::enclave_calls!({ $crate::__forward } [primitives [$($gen)*] [$ty] $this [$via] $r [$then] [$($local)*]]);
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! __forward {
    ([$mode:ident [$($gen:tt)*] [$ty:ty] $this:ident [$via:expr] $r:ident [$then:expr] [$($local:tt)*]] $(
        $(#[$attr:meta])*
        $kind:ident $opname:ident = $opnum:literal
        fn $name:ident ( $( $(#[$pm:ident])? $p:ident : $t:ty ),* ) -> $ret:ty $( = |$dthis:ident| $default:block )? ;
    )*) => {
        impl<$($gen)*> $crate::Enclave for $ty {
            $($local)*
            $( $crate::__forward_fn! { $mode $kind $this [$via] $r [$then] $name ($($p : $t),*) -> $ret } )*
        }
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! __forward_fn {
    (primitives composite $($rest:tt)*) => {};
    ($mode:ident query $this:ident [$via:expr] $r:ident [$then:expr] $name:ident () -> $ret:ty) => {
        fn $name(&self) -> $ret {
            let $this = self;
            $via.$name()
        }
    };
    ($mode:ident $kind:ident $this:ident [$via:expr] $r:ident [$then:expr] $name:ident ($($p:ident : $t:ty),*) -> $ret:ty) => {
        fn $name(&mut self $(, $p: $t)*) -> $crate::Result<$ret> {
            let $this = self;
            let $r = $via.$name($($p),*);
            $then
        }
    };
}

crate::enclave_calls!({ crate::__enclave_trait } [
    /// The tenant this instance serves.
    fn tenant(&self) -> crate::TenantId;

    /// Processes a batch of ESP packets in one crossing; one status per descriptor.
    /// The whole call is refused only when the batch itself is malformed (too many
    /// descriptors, `status.len() != descriptors.len()`).
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[crate::EspDescriptor],
        status: &mut [crate::EspStatus],
    ) -> crate::Result<crate::BatchSummary>;

    /// A lane of this instance for one worker: batches on it run at the same time as other
    /// lanes' and this instance's own `esp_batch`, on the same SAs. `None` where the backend
    /// runs one batch at a time (then workers share the instance behind a lock).
    fn esp_lane(&mut self) -> Option<Box<dyn crate::EspCrossing>> {
        None
    }
]);
