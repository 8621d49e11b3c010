//! The HSM side of migration, over PKCS#11 (any vendor's module; SoftHSM2 in tests).
//!
//! The HSM holds one RSA key pair per migration (one-time, TEEnder §3.5.1) or per backup
//! (§3.5.2). The source enclave wraps a fresh AES-256 data key with the pair's *public* key
//! (RSA-OAEP), so the untrusted gateway only ever carries the wrapped key. To restore,
//! [`Hsm::rewrap`] unwraps the data key *inside* the HSM (a sensitive session object) and wraps
//! it again under the destination enclave's public key, imported only after the caller has
//! checked the destination's attested measurement against the key's label. The data key is in
//! clear only in the HSM and in the enclaves.
//!
//! Every operation, including each failure, appends one entry to the [`AuditLog`].
//!
//! What the HSM enforces and what it does not is written out in `docs/migration.md`
//! ("Who is trusted with the PIN"); in short, the templates below are what this code asks for,
//! and a process holding the user PIN could ask for others.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, RwLock};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsOaepParams, PkcsOaepSource};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use sha2::{Digest, Sha256};

use crate::audit::{AuditLog, Operation};
use crate::error::{MigrateError, Result};
use crate::label::{encode_hex, BackupDate, KeyLabel, Measurement, MigrationId, TRUST_PREFIX};
use crate::spki::{bit_len, encode_rsa_spki, parse_rsa_spki, RsaPublicKey};

/// The backup root's label: one per token (a cluster's HSM).
pub const BACKUP_ROOT_LABEL: &str = "cloister-bak-root";
/// DER of the prime256v1 (P-256) curve's OID, for `CKA_EC_PARAMS`.
const P256_OID: [u8; 10] = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// The 65-byte point inside `CKA_EC_POINT` (DER OCTET STRING; some modules give it raw).
fn uncompressed_point(der: &[u8]) -> Option<Vec<u8>> {
    let point = match der {
        [0x04, 0x41, rest @ ..] if rest.len() == 65 => rest,
        raw if raw.len() == 65 => raw,
        _ => return None,
    };
    (point.first() == Some(&0x04)).then(|| point.to_vec())
}

/// Where Debian's `libsofthsm2` package installs its PKCS#11 module: the default only because
/// the tests and the demo use it. Production configures its HSM vendor's module.
pub const DEFAULT_MODULE_PATH: &str = "/usr/lib/softhsm/libsofthsm2.so";
/// RSA modulus bits of new HSM key pairs unless configured otherwise.
pub const DEFAULT_RSA_BITS: u32 = 3072;

/// Length of the data key the enclave wraps: AES-256.
pub const DATA_KEY_LEN: u64 = 32;

/// Bytes fed to the HSM per `C_EncryptUpdate`/`C_DecryptUpdate` in bulk mode: bounds the
/// HSM's buffers (a network HSM's message size) without a call per few bytes.
pub const BULK_CHUNK: usize = 1 << 20;

/// The hash of RSA-OAEP (and of its MGF1) for wrapping data keys.
///
/// SHA-256 is the default. SHA-1 exists because some HSMs support nothing else for OAEP
/// (SoftHSM2 2.6, checked: `CKR_ARGUMENTS_BAD` for any other hash); OAEP's security does not
/// rest on collision resistance, so SHA-1 OAEP is still sound, but choose it only for such an
/// HSM. Both enclaves must use the same hash as the HSM configuration.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum OaepHash {
    /// SHA-1 with MGF1-SHA-1.
    Sha1,
    /// SHA-256 with MGF1-SHA-256.
    #[default]
    Sha256,
}

impl OaepHash {
    fn name(self) -> &'static str {
        match self {
            Self::Sha1 => "SHA-1",
            Self::Sha256 => "SHA-256",
        }
    }

    fn mechanism(self) -> Mechanism<'static> {
        let (hash, mgf) = match self {
            Self::Sha1 => (MechanismType::SHA1, PkcsMgfType::MGF1_SHA1),
            Self::Sha256 => (MechanismType::SHA256, PkcsMgfType::MGF1_SHA256),
        };
        Mechanism::RsaPkcsOaep(PkcsOaepParams::new(hash, mgf, PkcsOaepSource::empty()))
    }
}

/// How to reach the HSM.
#[derive(Clone, Debug)]
pub struct HsmConfig {
    /// Path of the vendor's PKCS#11 module.
    pub module: PathBuf,
    /// Label of the token (partition) holding Cloister's keys.
    pub token_label: String,
    /// RSA-OAEP hash the HSM supports.
    pub oaep_hash: OaepHash,
    /// Modulus size of generated key pairs.
    pub rsa_bits: u32,
}

impl HsmConfig {
    /// Defaults: [`DEFAULT_MODULE_PATH`], OAEP-SHA-256, RSA-3072 (128-bit security, matching
    /// the AES-256 data key better than 2048 while keeping generation fast).
    pub fn new(token_label: impl Into<String>) -> Self {
        Self {
            module: PathBuf::from(DEFAULT_MODULE_PATH),
            token_label: token_label.into(),
            oaep_hash: OaepHash::default(),
            rsa_bits: DEFAULT_RSA_BITS,
        }
    }
}

/// A PIN. Zeroized on drop; `Debug` does not show it.
pub struct Pin(AuthPin);

impl Pin {
    /// Takes ownership of the PIN text.
    pub fn new(pin: impl Into<String>) -> Self {
        Self(AuthPin::new(pin.into().into_boxed_str()))
    }
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pin(<redacted>)")
    }
}

/// A managed key pair as listed by [`Hsm::list_keys`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyInfo {
    /// Its label.
    pub label: KeyLabel,
    /// Whether the private key may unwrap now (always for one-time keys; for backup keys only
    /// after the officer's step).
    pub unwrap_allowed: bool,
}

/// An open connection to one HSM token, logged in as user.
pub struct Hsm {
    ctx: Pkcs11,
    slot: Slot,
    user_pin: Pin,
    oaep: OaepHash,
    rsa_bits: u32,
    audit: Mutex<AuditLog>,
    /// PKCS#11 login state is per token and process, not per session: the officer's step logs
    /// the user out and the SO in, so it takes this exclusively while operations share it.
    login: RwLock<()>,
    /// A session held open between operations. A token logs the process out when its last
    /// session closes, and each operation opens and closes its own, so without this one
    /// every operation logged in again and paid the token's PIN check (SoftHSM2 derives a
    /// key from the PIN each time): one migration alone took longer than two at once.
    anchor: Mutex<Session>,
}

impl std::fmt::Debug for Hsm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hsm").field("slot", &self.slot).field("oaep", &self.oaep).finish_non_exhaustive()
    }
}

fn role(user: UserType) -> &'static str {
    match user {
        UserType::So => "security officer",
        _ => "user",
    }
}

/// Maps a login failure: a wrong or locked PIN gets its own variant.
fn login_error(err: CkError, user: UserType) -> MigrateError {
    match err {
        CkError::Pkcs11(RvError::PinIncorrect | RvError::PinInvalid | RvError::PinLenRange, _) => {
            MigrateError::WrongPin { role: role(user) }
        }
        CkError::Pkcs11(RvError::PinLocked, _) => MigrateError::PinLocked { role: role(user) },
        other => MigrateError::from_pkcs11(other),
    }
}

fn ck(err: CkError) -> MigrateError {
    MigrateError::from_pkcs11(err)
}

/// Logs `session` in as `user`; `Ok(true)` when this call logged in, `Ok(false)` when the
/// process was logged in already.
fn login(session: &Session, user: UserType, pin: &Pin) -> Result<bool> {
    match session.login(user, Some(&pin.0)) {
        Ok(()) => Ok(true),
        // Login state is shared by all sessions of the process: another session may already
        // have logged in as the same user.
        Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => Ok(false),
        Err(err) => Err(login_error(err, user)),
    }
}

/// A session object destroyed when the guard goes out of scope, whatever the path: the
/// unwrapped data key must not outlive the rewrap that needed it.
struct Transient<'s> {
    session: &'s Session,
    handle: Option<ObjectHandle>,
}

impl Transient<'_> {
    /// Destroys the object now and reports the result (the success path must know).
    fn destroy(mut self) -> Result<()> {
        match self.handle.take() {
            Some(h) => self.session.destroy_object(h).map_err(ck),
            None => Ok(()),
        }
    }
}

impl Drop for Transient<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            // Nothing to report to on this path (an earlier error is already on its way);
            // a session object also dies with its session, which closes right after.
            let _ = self.session.destroy_object(h);
        }
    }
}

impl Hsm {
    /// Loads the module, finds the token by label and logs in as user. The attempt is audited,
    /// failures included (a wrong PIN shows up in the log).
    pub fn open(config: HsmConfig, user_pin: Pin, audit: AuditLog) -> Result<Self> {
        let audit = Mutex::new(audit);
        let result = Self::connect(&config, user_pin);
        let mut log = audit.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok((ctx, slot, user_pin, anchor)) => {
                log.append(Operation::Open, "", Ok(&format!("token {}", config.token_label)))?;
                drop(log);
                Ok(Self {
                    ctx,
                    slot,
                    user_pin,
                    oaep: config.oaep_hash,
                    rsa_bits: config.rsa_bits,
                    audit,
                    login: RwLock::new(()),
                    anchor: Mutex::new(anchor),
                })
            }
            Err(err) => {
                // The original error matters more to the caller than a failed audit write.
                let _ = log.append(Operation::Open, "", Err(&err));
                Err(err)
            }
        }
    }

    fn connect(config: &HsmConfig, user_pin: Pin) -> Result<(Pkcs11, Slot, Pin, Session)> {
        if !config.module.exists() {
            return Err(MigrateError::ModuleMissing { path: config.module.clone() });
        }
        let ctx = Pkcs11::new(&config.module)
            .map_err(|source| MigrateError::ModuleLoad { path: config.module.clone(), source })?;
        match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
            // Another `Hsm` in this process initialised the module already.
            Ok(()) | Err(CkError::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
            // A module that cannot initialise has no device behind it (token store unreadable,
            // network HSM unreachable), whatever code it reports.
            Err(CkError::Pkcs11(rv, function)) => return Err(MigrateError::HsmUnavailable { function, rv }),
            Err(other) => return Err(ck(other)),
        }
        let mut found = None;
        for slot in ctx.get_slots_with_token().map_err(ck)? {
            let info = ctx.get_token_info(slot).map_err(ck)?;
            if info.label().trim_end() == config.token_label {
                found = Some(slot);
                break;
            }
        }
        let slot = found.ok_or_else(|| MigrateError::TokenNotFound { label: config.token_label.clone() })?;
        // Read-write: an officer's step may log in beside it (no read-only session allowed).
        let session = ctx.open_rw_session(slot).map_err(ck)?;
        login(&session, UserType::User, &user_pin)?;
        Ok((ctx, slot, user_pin, session))
    }

    /// A read-write session logged in as user. Sessions are opened per operation: `Session`
    /// is neither `Send` nor `Sync`, and a fresh session survives an HSM restart in between.
    fn user_session(&self) -> Result<Session> {
        let session = self.ctx.open_rw_session(self.slot).map_err(ck)?;
        if login(&session, UserType::User, &self.user_pin)? {
            // Logged out in between (an officer's step, or the HSM lost the anchor's session
            // in a restart): a fresh anchor keeps this login for the next operations.
            if let Ok(anchor) = self.ctx.open_rw_session(self.slot) {
                *self.anchor.lock().unwrap_or_else(PoisonError::into_inner) = anchor;
            }
        }
        Ok(session)
    }

    /// Runs `op`, appends its outcome to the audit log and returns it. A success whose entry
    /// cannot be written is returned as the audit error: nothing unaudited leaves this type.
    fn audited<T>(
        &self,
        op: Operation,
        label: &str,
        detail: impl FnOnce(&T) -> String,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.record(op, label, f(), detail)
    }

    /// Appends the outcome of an operation that has run; see [`Hsm::audited`].
    fn record<T>(
        &self,
        op: Operation,
        label: &str,
        result: Result<T>,
        detail: impl FnOnce(&T) -> String,
    ) -> Result<T> {
        let mut log = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(value) => {
                log.append(op, label, Ok(&detail(&value)))?;
                Ok(value)
            }
            Err(err) => {
                let _ = log.append(op, label, Err(&err));
                Err(err)
            }
        }
    }

    /// The backup root's public key (an uncompressed P-256 point), the key pair made on first
    /// use: ECDSA, sensitive, not extractable, not modifiable, sign-only. Enclaves whose
    /// measured configuration names this point take as backup keys only what it certified
    /// ([`Hsm::certify_backup_key`]); the signature needs the user PIN, so only this code,
    /// in the HSM agent, gives one, and only for backup keys the HSM made.
    pub fn backup_root(&self) -> Result<Vec<u8>> {
        self.audited(
            Operation::BackupRoot,
            BACKUP_ROOT_LABEL,
            |point: &Vec<u8>| format!("point-sha256 {}", encode_hex(&Sha256::digest(point))),
            || {
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let found = self.find(&session, ObjectClass::PUBLIC_KEY, BACKUP_ROOT_LABEL)?;
                let public = match found.as_slice() {
                    [one] => *one,
                    [] => {
                        let text = BACKUP_ROOT_LABEL.as_bytes().to_vec();
                        let public = [
                            Attribute::Token(true),
                            Attribute::Private(false),
                            Attribute::Label(text.clone()),
                            Attribute::EcParams(P256_OID.to_vec()),
                            Attribute::Verify(false),
                            Attribute::Modifiable(false),
                        ];
                        let private = [
                            Attribute::Token(true),
                            Attribute::Private(true),
                            Attribute::Label(text),
                            Attribute::Sensitive(true),
                            Attribute::Extractable(false),
                            Attribute::Sign(true),
                            Attribute::Decrypt(false),
                            Attribute::Unwrap(false),
                            Attribute::Derive(false),
                            Attribute::Copyable(false),
                            Attribute::Modifiable(false),
                        ];
                        session.generate_key_pair(&Mechanism::EccKeyPairGen, &public, &private).map_err(ck)?.0
                    }
                    _ => return Err(MigrateError::RootClash),
                };
                let attrs = session.get_attributes(public, &[AttributeType::EcPoint]).map_err(ck)?;
                let der = attrs
                    .into_iter()
                    .find_map(|a| if let Attribute::EcPoint(p) = a { Some(p) } else { None })
                    .unwrap_or_default();
                uncompressed_point(&der).ok_or(MigrateError::BadBackupRoot)
            },
        )
    }

    /// The backup root's certificate of the backup key `label` (which the HSM made) for
    /// enclaves of its measurement: ECDSA P-256 (r ‖ s) over
    /// [`attest::migration::backup_key_message`] of that measurement and the key's SPKI.
    pub fn certify_backup_key(&self, label: &KeyLabel) -> Result<Vec<u8>> {
        self.audited(
            Operation::CertifyBackupKey,
            &label.to_string(),
            |_| "for the label's measurement (key: the export-public-key entry before)".to_owned(),
            || {
                if !label.is_backup() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                let spki = self.public_key(label)?;
                let measurement = crate::flow::enclave_measurement(label.measurement())?;
                let message = attest::migration::backup_key_message(&measurement, &spki);
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let found = self.find(&session, ObjectClass::PRIVATE_KEY, BACKUP_ROOT_LABEL)?;
                let [root] = found.as_slice() else {
                    return Err(if found.is_empty() {
                        MigrateError::NoBackupRoot
                    } else {
                        MigrateError::RootClash
                    });
                };
                // CKM_ECDSA signs a digest: the one ECDSA-with-SHA-256 verifiers compute.
                session.sign(&Mechanism::Ecdsa, *root, &Sha256::digest(&message)).map_err(ck)
            },
        )
    }

    /// Creates a one-time migration key pair bound to `measurement`, labelled with a migration
    /// id derived from HSM randomness (`C_GenerateRandom`).
    pub fn create_migration_key(&self, measurement: &Measurement) -> Result<KeyLabel> {
        let result = (|| {
            let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
            let session = self.user_session()?;
            let random = session.generate_random_vec(32).map_err(ck)?;
            let label = KeyLabel::Migration {
                measurement: measurement.clone(),
                id: MigrationId::from_random(&random),
            };
            self.generate_pair(&session, &label)?;
            Ok(label)
        })();
        // The label exists only once the HSM has produced the id; a failure is logged under
        // the measurement alone.
        let label = match &result {
            Ok(label) => label.to_string(),
            Err(_) => format!("cloister-mig/{measurement}/"),
        };
        self.record(Operation::CreateMigrationKey, &label, result, |_| String::new())
    }

    /// Creates a backup key pair bound to `measurement` and `date`, encrypt-only: its private
    /// key may neither unwrap nor decrypt until [`Hsm::authorize_backup_restore`].
    pub fn create_backup_key(&self, measurement: &Measurement, date: BackupDate) -> Result<KeyLabel> {
        let label = KeyLabel::Backup { measurement: measurement.clone(), date };
        self.audited(
            Operation::CreateBackupKey,
            &label.to_string(),
            |_| String::new(),
            || {
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                if !self.find(&session, ObjectClass::PRIVATE_KEY, &label.to_string())?.is_empty() {
                    return Err(MigrateError::KeyExists { label: label.clone() });
                }
                self.generate_pair(&session, &label)?;
                Ok(label.clone())
            },
        )
    }

    fn generate_pair(&self, session: &Session, label: &KeyLabel) -> Result<()> {
        let text = label.to_string().into_bytes();
        let id = Sha256::digest(&text).get(..16).map(<[u8]>::to_vec).unwrap_or_default();
        let backup = label.is_backup();
        let public = [
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Label(text.clone()),
            Attribute::Id(id.clone()),
            Attribute::ModulusBits(u64::from(self.rsa_bits).into()),
            Attribute::PublicExponent(vec![0x01, 0x00, 0x01]),
            // The HSM never uses the public key: the enclave wraps with the exported copy.
            Attribute::Encrypt(false),
            Attribute::Wrap(false),
            Attribute::Verify(false),
            Attribute::Modifiable(false),
        ];
        let private = [
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Label(text),
            Attribute::Id(id),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            // Decrypt would hand the data key out in clear; only unwrap (into the HSM) is used.
            Attribute::Decrypt(false),
            Attribute::Sign(false),
            Attribute::Derive(false),
            // A backup key is created encrypt-only (TEEnder §3.5.2) and stays modifiable so
            // the officer's step can allow unwrapping; a one-time key never changes.
            Attribute::Unwrap(!backup),
            // A copy would survive `delete_key` (and so a replay) and could be made modifiable.
            Attribute::Copyable(false),
            Attribute::Modifiable(backup),
        ];
        session.generate_key_pair(&Mechanism::RsaPkcsKeyPairGen, &public, &private).map_err(ck)?;
        Ok(())
    }

    fn find(&self, session: &Session, class: ObjectClass, label: &str) -> Result<Vec<ObjectHandle>> {
        session
            .find_objects(&[Attribute::Class(class), Attribute::Label(label.as_bytes().to_vec())])
            .map_err(ck)
    }

    /// The one object of `class` labelled `label`: none is [`MigrateError::KeyNotFound`], two
    /// (someone else created a clash) is refused rather than guessed.
    fn find_one(&self, session: &Session, class: ObjectClass, label: &KeyLabel) -> Result<ObjectHandle> {
        match self.find(session, class, &label.to_string())?.as_slice() {
            [one] => Ok(*one),
            [] => Err(MigrateError::KeyNotFound { label: label.clone() }),
            _ => Err(MigrateError::KeyExists { label: label.clone() }),
        }
    }

    /// The key pair's public key as DER SubjectPublicKeyInfo, for the source enclave.
    pub fn public_key(&self, label: &KeyLabel) -> Result<Vec<u8>> {
        self.audited(
            Operation::ExportPublicKey,
            &label.to_string(),
            |spki: &Vec<u8>| format!("spki-sha256 {}", encode_hex(&Sha256::digest(spki))),
            || {
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let handle = self.find_one(&session, ObjectClass::PUBLIC_KEY, label)?;
                let attrs = session
                    .get_attributes(handle, &[AttributeType::Modulus, AttributeType::PublicExponent])
                    .map_err(ck)?;
                let (mut modulus, mut exponent) = (Vec::new(), Vec::new());
                for attr in attrs {
                    match attr {
                        Attribute::Modulus(m) => modulus = m,
                        Attribute::PublicExponent(e) => exponent = e,
                        _ => {}
                    }
                }
                encode_rsa_spki(&modulus, &exponent)
            },
        )
    }

    /// Lists the migration and backup keys on the token.
    pub fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        self.audited(
            Operation::ListKeys,
            "",
            |keys: &Vec<KeyInfo>| format!("{} keys", keys.len()),
            || {
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let mut keys = Vec::new();
                for handle in
                    session.find_objects(&[Attribute::Class(ObjectClass::PRIVATE_KEY)]).map_err(ck)?
                {
                    let attrs = session
                        .get_attributes(handle, &[AttributeType::Label, AttributeType::Unwrap])
                        .map_err(ck)?;
                    let (mut label, mut unwrap_allowed) = (None, false);
                    for attr in attrs {
                        match attr {
                            Attribute::Label(l) => {
                                label = String::from_utf8(l).ok().and_then(|l| l.parse().ok())
                            }
                            Attribute::Unwrap(u) => unwrap_allowed = u,
                            _ => {}
                        }
                    }
                    // Other applications' keys on a shared token are not ours to list.
                    if let Some(label) = label {
                        keys.push(KeyInfo { label, unwrap_allowed });
                    }
                }
                keys.sort_by_key(|k| k.label.to_string());
                Ok(keys)
            },
        )
    }

    /// Unwraps `wrapped_data_key` (RSA-OAEP under the public key of `label`) inside the HSM and
    /// wraps it again under `destination_spki`, the destination enclave's ephemeral public key.
    ///
    /// The caller has verified the destination's attestation; `expected_measurement` is what
    /// it attested, and the rewrap is refused unless the key's label names the same
    /// measurement. For a backup key the destination must also have been trusted by the
    /// security officer ([`Hsm::authorize_backup_restore`]).
    ///
    /// The unwrapped data key is a sensitive session object that may only be wrapped, never
    /// read, used or changed, and is destroyed before this returns.
    pub fn rewrap(
        &self,
        label: &KeyLabel,
        wrapped_data_key: &[u8],
        destination_spki: &[u8],
        expected_measurement: &Measurement,
    ) -> Result<Vec<u8>> {
        let fingerprint = Sha256::digest(destination_spki);
        self.audited(
            Operation::Rewrap,
            &label.to_string(),
            |_| format!("destination spki-sha256 {}", encode_hex(&fingerprint)),
            || {
                if label.is_bulk() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                check_measurement(label, expected_measurement)?;
                let destination = parse_rsa_spki(destination_spki)?;
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                self.rewrap_in(&session, label, wrapped_data_key, &destination)
            },
        )
    }

    fn rewrap_in(
        &self,
        session: &Session,
        label: &KeyLabel,
        wrapped: &[u8],
        destination: &RsaPublicKey,
    ) -> Result<Vec<u8>> {
        let private = match self.find_one(session, ObjectClass::PRIVATE_KEY, label) {
            // A one-time key whose public half remains was spent by an earlier rewrap.
            Err(MigrateError::KeyNotFound { .. })
                if !label.is_backup()
                    && !self.find(session, ObjectClass::PUBLIC_KEY, &label.to_string())?.is_empty() =>
            {
                return Err(MigrateError::OneTimeKeyUsed { label: label.clone() });
            }
            other => other?,
        };
        // An RSA-OAEP ciphertext is exactly as long as the modulus; anything else was cut or
        // padded on the way.
        let public = self.find_one(session, ObjectClass::PUBLIC_KEY, label)?;
        let modulus_len = match session.get_attributes(public, &[AttributeType::Modulus]).map_err(ck)?.first()
        {
            Some(Attribute::Modulus(m)) => bit_len(m).div_ceil(8),
            _ => 0,
        };
        if wrapped.len() != modulus_len {
            return Err(MigrateError::WrappedKeyInvalid { label: label.clone() });
        }

        // One-time keys: the destination key is imported now, as a session object that dies
        // with this call. Backup keys: it must be the one the officer marked CKA_TRUSTED, and
        // the data key is created wrap-with-trusted, so the HSM itself refuses any other.
        let backup = label.is_backup();
        let (wrapping_key, destination_guard) = if backup {
            let trusted = self.find_trusted(session, label, &destination.fingerprint)?;
            (trusted, Transient { session, handle: None })
        } else {
            let handle = session
                .create_object(&[
                    Attribute::Class(ObjectClass::PUBLIC_KEY),
                    Attribute::KeyType(KeyType::RSA),
                    Attribute::Token(false),
                    Attribute::Private(true),
                    Attribute::Modulus(destination.modulus.clone()),
                    Attribute::PublicExponent(destination.exponent.clone()),
                    Attribute::Wrap(true),
                    Attribute::Encrypt(false),
                    Attribute::Verify(false),
                    Attribute::Label(format!("cloister-dst/{}", label.measurement()).into_bytes()),
                ])
                .map_err(ck)?;
            (handle, Transient { session, handle: Some(handle) })
        };

        let data_key_template = [
            Attribute::Class(ObjectClass::SECRET_KEY),
            Attribute::KeyType(KeyType::AES),
            Attribute::Token(false),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            // Extractable only so that C_WrapKey can take it out under the destination key;
            // sensitive means C_GetAttributeValue never reveals CKA_VALUE.
            Attribute::Extractable(true),
            Attribute::WrapWithTrusted(backup),
            Attribute::Encrypt(false),
            Attribute::Decrypt(false),
            Attribute::Sign(false),
            Attribute::Verify(false),
            Attribute::Wrap(false),
            Attribute::Unwrap(false),
            Attribute::Derive(false),
            Attribute::Copyable(false),
            // Last: SoftHSM2 applies the template in order and refuses every attribute after
            // CKA_MODIFIABLE = false (CKR_ATTRIBUTE_READ_ONLY), even while creating the object.
            Attribute::Modifiable(false),
        ];
        let mechanism = self.oaep.mechanism();
        let data_key_handle = session
            .unwrap_key(&mechanism, private, wrapped, &data_key_template)
            .map_err(|err| self.unwrap_error(err, label))?;
        let data_key = Transient { session, handle: Some(data_key_handle) };
        // A key of another length is not the AES-256 data key the package format requires.
        // Tokens that do not record CKA_VALUE_LEN for unwrapped keys report 0 (SoftHSM2 2.6);
        // then the destination enclave's length check is the one that counts.
        match session.get_attributes(data_key_handle, &[AttributeType::ValueLen]).map_err(ck)?.first() {
            Some(Attribute::ValueLen(len)) if **len == DATA_KEY_LEN || **len == 0 => {}
            _ => return Err(MigrateError::WrappedKeyInvalid { label: label.clone() }),
        }
        let rewrapped =
            session.wrap_key(&mechanism, wrapping_key, data_key_handle).map_err(|err| match err {
                CkError::Pkcs11(RvError::KeyNotWrappable, _) if backup => {
                    MigrateError::RestoreNotAuthorized { label: label.clone() }
                }
                CkError::Pkcs11(RvError::ArgumentsBad | RvError::MechanismParamInvalid, _) => {
                    MigrateError::OaepHashUnsupported { hash: self.oaep.name() }
                }
                other => ck(other),
            })?;
        data_key.destroy()?;
        destination_guard.destroy()?;
        if !backup {
            // One-time means one rewrap: the private half goes now, so neither a second
            // destination nor a replayed package gets this data key, whether or not the
            // destination ever confirms. The public half stays until `delete_key`.
            session.destroy_object(private).map_err(ck)?;
        }
        Ok(rewrapped)
    }

    fn unwrap_error(&self, err: CkError, label: &KeyLabel) -> MigrateError {
        match err {
            CkError::Pkcs11(
                RvError::EncryptedDataInvalid
                | RvError::EncryptedDataLenRange
                | RvError::WrappedKeyInvalid
                | RvError::WrappedKeyLenRange
                | RvError::KeySizeRange
                // SoftHSM2 2.6 reports a failed OAEP decoding as a general error.
                | RvError::GeneralError,
                _,
            ) => MigrateError::WrappedKeyInvalid { label: label.clone() },
            CkError::Pkcs11(RvError::KeyFunctionNotPermitted, _) if label.is_backup() => {
                MigrateError::RestoreNotAuthorized { label: label.clone() }
            }
            CkError::Pkcs11(RvError::ArgumentsBad | RvError::MechanismParamInvalid, _) => {
                MigrateError::OaepHashUnsupported { hash: self.oaep.name() }
            }
            other => ck(other),
        }
    }

    fn trust_label(measurement: &Measurement, fingerprint: &[u8; 32]) -> String {
        format!("{TRUST_PREFIX}/{measurement}/{}", encode_hex(fingerprint))
    }

    /// The destination key the officer trusted for this measurement, or
    /// [`MigrateError::RestoreNotAuthorized`].
    fn find_trusted(
        &self,
        session: &Session,
        label: &KeyLabel,
        fingerprint: &[u8; 32],
    ) -> Result<ObjectHandle> {
        let found = session
            .find_objects(&[
                Attribute::Class(ObjectClass::PUBLIC_KEY),
                Attribute::Trusted(true),
                Attribute::Label(Self::trust_label(label.measurement(), fingerprint).into_bytes()),
            ])
            .map_err(ck)?;
        found.first().copied().ok_or_else(|| MigrateError::RestoreNotAuthorized { label: label.clone() })
    }

    /// The security officer's step before a restore from a backup key: logs in as SO (the
    /// user is logged out meanwhile), imports the destination enclave's public key as a
    /// `CKA_TRUSTED` wrapping key — an attribute only the SO can set — and lets the backup's
    /// private key unwrap (`CKA_UNWRAP` true, which the user session sets: PKCS#11 gives the SO
    /// no access to private objects).
    ///
    /// The caller (an operator tool) shows the officer the backup label and the destination's
    /// verified attestation before asking for the SO PIN.
    pub fn authorize_backup_restore(
        &self,
        label: &KeyLabel,
        officer_pin: &Pin,
        destination_spki: &[u8],
        expected_measurement: &Measurement,
    ) -> Result<()> {
        let fingerprint = Sha256::digest(destination_spki);
        self.audited(
            Operation::AuthorizeBackupRestore,
            &label.to_string(),
            |_| format!("destination spki-sha256 {}", encode_hex(&fingerprint)),
            || {
                if !label.is_backup() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                check_measurement(label, expected_measurement)?;
                let destination = parse_rsa_spki(destination_spki)?;
                let _exclusive = self.login.write().unwrap_or_else(PoisonError::into_inner);
                {
                    // The key must exist before the officer is asked to trust anything for it.
                    let session = self.user_session()?;
                    self.find_one(&session, ObjectClass::PRIVATE_KEY, label)?;
                    session.logout().map_err(ck)?;
                }
                self.as_officer(officer_pin, |session| {
                    let trust = Self::trust_label(label.measurement(), &destination.fingerprint);
                    if session
                        .find_objects(&[
                            Attribute::Class(ObjectClass::PUBLIC_KEY),
                            Attribute::Label(trust.clone().into_bytes()),
                        ])
                        .map_err(ck)?
                        .is_empty()
                    {
                        session
                            .create_object(&[
                                Attribute::Class(ObjectClass::PUBLIC_KEY),
                                Attribute::KeyType(KeyType::RSA),
                                Attribute::Token(true),
                                // The SO may only create public objects.
                                Attribute::Private(false),
                                Attribute::Modifiable(false),
                                Attribute::Trusted(true),
                                Attribute::Wrap(true),
                                Attribute::Encrypt(false),
                                Attribute::Verify(false),
                                Attribute::Label(trust.into_bytes()),
                                Attribute::Id(destination.fingerprint.to_vec()),
                                Attribute::Modulus(destination.modulus.clone()),
                                Attribute::PublicExponent(destination.exponent.clone()),
                            ])
                            .map_err(ck)?;
                    }
                    Ok(())
                })?;
                let session = self.user_session()?;
                let private = self.find_one(&session, ObjectClass::PRIVATE_KEY, label)?;
                session.update_attributes(private, &[Attribute::Unwrap(true)]).map_err(ck)
            },
        )
    }

    /// Withdraws the officer's authorization after the restore: the backup key is
    /// encrypt-only again and the trusted destination key is deleted (it was one enclave's
    /// ephemeral key). The backup key itself stays, valid for the next disaster.
    pub fn revoke_backup_restore(
        &self,
        label: &KeyLabel,
        officer_pin: &Pin,
        destination_spki: &[u8],
    ) -> Result<()> {
        let fingerprint = Sha256::digest(destination_spki);
        self.audited(
            Operation::RevokeBackupRestore,
            &label.to_string(),
            |_| format!("destination spki-sha256 {}", encode_hex(&fingerprint)),
            || {
                if !label.is_backup() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                let destination = parse_rsa_spki(destination_spki)?;
                let _exclusive = self.login.write().unwrap_or_else(PoisonError::into_inner);
                {
                    let session = self.user_session()?;
                    let private = self.find_one(&session, ObjectClass::PRIVATE_KEY, label)?;
                    session.update_attributes(private, &[Attribute::Unwrap(false)]).map_err(ck)?;
                    session.logout().map_err(ck)?;
                }
                self.as_officer(officer_pin, |session| {
                    let trust = Self::trust_label(label.measurement(), &destination.fingerprint);
                    for handle in session
                        .find_objects(&[
                            Attribute::Class(ObjectClass::PUBLIC_KEY),
                            Attribute::Label(trust.into_bytes()),
                        ])
                        .map_err(ck)?
                    {
                        session.destroy_object(handle).map_err(ck)?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// Runs `f` in a session logged in as security officer, logging out afterwards whatever
    /// happens, so that the next user operation can log in again.
    fn as_officer(&self, pin: &Pin, f: impl FnOnce(&Session) -> Result<()>) -> Result<()> {
        let session = self.ctx.open_rw_session(self.slot).map_err(ck)?;
        match session.login(UserType::So, Some(&pin.0)) {
            Ok(()) => {}
            Err(err) => return Err(login_error(err, UserType::So)),
        }
        let result = f(&session);
        let logout = session.logout().map_err(ck);
        result.and(logout)
    }

    /// Deletes a key pair: a one-time key after the destination confirmed the restore (a
    /// replayed package then finds no key), or a retired backup key.
    pub fn delete_key(&self, label: &KeyLabel) -> Result<()> {
        self.audited(
            Operation::DeleteKey,
            &label.to_string(),
            |_| String::new(),
            || {
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                if label.is_bulk() {
                    let key = self.find_one(&session, ObjectClass::SECRET_KEY, label)?;
                    return session.destroy_object(key).map_err(ck);
                }
                // Private key first: once it is gone no package can be unwrapped, whatever
                // happens to the public half. A one-time key's went at its rewrap.
                let privates = self.find(&session, ObjectClass::PRIVATE_KEY, &label.to_string())?;
                let publics = self.find(&session, ObjectClass::PUBLIC_KEY, &label.to_string())?;
                if privates.is_empty() && publics.is_empty() {
                    return Err(MigrateError::KeyNotFound { label: label.clone() });
                }
                for key in privates.into_iter().chain(publics) {
                    session.destroy_object(key).map_err(ck)?;
                }
                Ok(())
            },
        )
    }

    /// Creates an AES-256 key in the HSM for encrypting one whole package, bound to
    /// `measurement` like a one-time key: TEEnder's original scheme, kept for comparison
    /// (`crate::flow::Mode::HsmBulk`). Sensitive, not extractable, encrypt and decrypt only.
    pub fn create_bulk_key(&self, measurement: &Measurement) -> Result<KeyLabel> {
        let result = (|| {
            let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
            let session = self.user_session()?;
            let random = session.generate_random_vec(32).map_err(ck)?;
            let label =
                KeyLabel::Bulk { measurement: measurement.clone(), id: MigrationId::from_random(&random) };
            let text = label.to_string().into_bytes();
            let id = Sha256::digest(&text).get(..16).map(<[u8]>::to_vec).unwrap_or_default();
            session
                .generate_key(
                    &Mechanism::AesKeyGen,
                    &[
                        Attribute::Class(ObjectClass::SECRET_KEY),
                        Attribute::KeyType(KeyType::AES),
                        Attribute::ValueLen(DATA_KEY_LEN.into()),
                        Attribute::Token(true),
                        Attribute::Private(true),
                        Attribute::Label(text),
                        Attribute::Id(id),
                        Attribute::Sensitive(true),
                        Attribute::Extractable(false),
                        Attribute::Encrypt(true),
                        Attribute::Decrypt(true),
                        Attribute::Wrap(false),
                        Attribute::Unwrap(false),
                        Attribute::Sign(false),
                        Attribute::Verify(false),
                        Attribute::Derive(false),
                        Attribute::Copyable(false),
                        // Last (see the data key template in `rewrap_in`).
                        Attribute::Modifiable(false),
                    ],
                )
                .map_err(ck)?;
            Ok(label)
        })();
        let label = match &result {
            Ok(label) => label.to_string(),
            Err(_) => format!("cloister-blk/{measurement}/"),
        };
        self.record(Operation::CreateBulkKey, &label, result, |_| String::new())
    }

    /// Encrypts `data` with the bulk key `label` inside the HSM (AES-256-CBC-PAD, fresh IV
    /// from the HSM, fed in [`BULK_CHUNK`] pieces); returns IV and ciphertext. Confidentiality
    /// only: the package inside carries its own authentication.
    pub fn bulk_encrypt(&self, label: &KeyLabel, data: &[u8]) -> Result<Vec<u8>> {
        self.audited(
            Operation::BulkEncrypt,
            &label.to_string(),
            |_| format!("{} bytes", data.len()),
            || {
                if !label.is_bulk() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let key = self.find_one(&session, ObjectClass::SECRET_KEY, label)?;
                let iv: [u8; 16] = session
                    .generate_random_vec(16)
                    .map_err(ck)?
                    .try_into()
                    .map_err(|_| MigrateError::BulkData { label: label.clone() })?;
                session.encrypt_init(&Mechanism::AesCbcPad(iv), key).map_err(ck)?;
                let mut out = Vec::with_capacity(16 + data.len() + 16);
                out.extend_from_slice(&iv);
                for chunk in data.chunks(BULK_CHUNK) {
                    out.extend_from_slice(&session.encrypt_update(chunk).map_err(ck)?);
                }
                out.extend_from_slice(&session.encrypt_final().map_err(ck)?);
                Ok(out)
            },
        )
    }

    /// Decrypts [`Hsm::bulk_encrypt`]'s output inside the HSM, for a destination whose
    /// attested measurement is `expected_measurement` (refused unless the label names it).
    pub fn bulk_decrypt(
        &self,
        label: &KeyLabel,
        data: &[u8],
        expected_measurement: &Measurement,
    ) -> Result<Vec<u8>> {
        self.audited(
            Operation::BulkDecrypt,
            &label.to_string(),
            |_| format!("{} bytes", data.len()),
            || {
                if !label.is_bulk() {
                    return Err(MigrateError::WrongKeyKind { label: label.clone() });
                }
                check_measurement(label, expected_measurement)?;
                let bad = || MigrateError::BulkData { label: label.clone() };
                let (iv, body) = data.split_first_chunk::<16>().ok_or_else(bad)?;
                if body.is_empty() || !body.len().is_multiple_of(16) {
                    return Err(bad());
                }
                let _shared = self.login.read().unwrap_or_else(PoisonError::into_inner);
                let session = self.user_session()?;
                let key = self.find_one(&session, ObjectClass::SECRET_KEY, label)?;
                session.decrypt_init(&Mechanism::AesCbcPad(*iv), key).map_err(ck)?;
                let bad_data = |err: CkError| match err {
                    CkError::Pkcs11(RvError::EncryptedDataInvalid | RvError::EncryptedDataLenRange, _) => {
                        bad()
                    }
                    other => ck(other),
                };
                let mut out = Vec::with_capacity(body.len());
                for chunk in body.chunks(BULK_CHUNK) {
                    out.extend_from_slice(&session.decrypt_update(chunk).map_err(bad_data)?);
                }
                out.extend_from_slice(&session.decrypt_final().map_err(bad_data)?);
                Ok(out)
            },
        )
    }

    /// The RSA-OAEP hash this HSM is configured for (the enclaves must wrap with it).
    pub fn oaep_hash(&self) -> OaepHash {
        self.oaep
    }

    /// The audit log's head after the last operation.
    pub fn audit_head(&self) -> crate::audit::AuditHead {
        self.audit.lock().unwrap_or_else(PoisonError::into_inner).head()
    }
}

fn check_measurement(label: &KeyLabel, expected: &Measurement) -> Result<()> {
    if label.measurement() == expected {
        Ok(())
    } else {
        Err(MigrateError::MeasurementMismatch { label: label.clone(), expected: expected.clone() })
    }
}
