//! Serialized arguments and results of the call path (one call per IKE step).
//!
//! Little-endian integers, byte strings as `u32 length || bytes`, options as a `0`/`1`
//! byte. The decoder reads from a *private* copy of the call area's bytes, checks every
//! length against what is left and refuses trailing bytes, so nothing in an argument
//! buffer can make the enclave read past it. Results and errors travel the other way in
//! the same format; errors carry handles, lengths and reasons only, never key bytes.

use crate::alg::{AuthMethod, Cipher, DhGroup, Integ, Prf, Role, SecretKind, SignatureScheme, Suite};
use crate::attest::{Evidence, EvidenceKind, Measurement};
use crate::error::{BlobRejection, Error, ErrorKind};
use crate::esp::{EspSaParams, EspStatus};
use crate::handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle};
use crate::ike::{
    AuthInput, AuthSpec, AuthVerified, ChildSaParams, DhExchange, IkeSaParams, PeerCredential, PublicKey,
    PublicKeyKind,
};
use crate::migration::{DestinationKey, MigrationRestore};
use crate::provision::ProvisioningOffer;
use crate::report::{Counters, MemoryReport};

/// Call opcodes: one per call of the table ([`crate::calls`]), and the staging steps of the
/// calls whose arguments or results may exceed the call area.
pub mod op {
    crate::enclave_calls!({ crate::__enclave_opcodes } []);

    /// Chunked export, first call: `u64` length of the untrusted state to come.
    pub const EXPORT_BEGIN: u16 = 29;
    /// Chunked export or import: `u64` offset, then the next piece of the staged argument.
    pub const STAGE_CHUNK: u16 = 30;
    /// Chunked export, last call: wrapping key and OAEP code; exports the staged state.
    pub const EXPORT_FINISH: u16 = 31;
    /// Chunked import, first call: `u64` length of the package to come.
    pub const IMPORT_BEGIN: u16 = 32;
    /// Chunked import, last call: the wrapped data key; imports the staged package.
    pub const IMPORT_FINISH: u16 = 33;
    /// A staged result: `u64` offset and `u32` most bytes wanted; answers the next piece.
    pub const RESULT_CHUNK: u16 = 34;
    // 43 was `export_evidence`: the source's evidence is inside the package now.

    /// The staging opcodes, none of them a call's.
    pub const STAGING: &[u16] =
        &[EXPORT_BEGIN, STAGE_CHUNK, EXPORT_FINISH, IMPORT_BEGIN, IMPORT_FINISH, RESULT_CHUNK];
    const _: () = {
        let mut i = 0;
        while i < STAGING.len() {
            let mut j = 0;
            while j < CALLS.len() {
                assert!(STAGING[i] != CALLS[j], "a staging step shares a call's opcode");
                j += 1;
            }
            i += 1;
        }
    };
}

/// How [`op::EXPORT_STATE`], [`op::EXPORT_SECRETS`], [`op::IMPORT_STATE`],
/// [`op::EXPORT_FINISH`] and [`op::IMPORT_FINISH`] answer: `u8` [`STAGED_INLINE`] and the
/// bytes, or `u8` [`STAGED_HELD`] and a `u64` length to read back with [`op::RESULT_CHUNK`].
pub const STAGED_INLINE: u8 = 0;
/// See [`STAGED_INLINE`].
pub const STAGED_HELD: u8 = 1;

impl From<Malformed> for super::validate::RejectReason {
    fn from(_: Malformed) -> Self {
        Self::BadArguments
    }
}

/// A buffer does not decode: too short, a bad tag, or bytes left over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Appends encoded values.
#[derive(Debug, Default)]
pub struct Writer {
    /// The bytes so far.
    pub buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A `usize` as `u64`.
    pub fn usize(&mut self, v: usize) -> &mut Self {
        self.u64(v as u64)
    }
    /// A length-prefixed byte string (lengths above `u32::MAX` are cut to it; the reader
    /// then finds the buffer short and refuses it).
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(b);
        self
    }
    /// A string (error messages).
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
}

/// Reads encoded values from a private buffer.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.buf.len() {
            return Err(Malformed);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.array::<1>()?[0])
    }
    /// A `u16`.
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        self.array().map(u16::from_le_bytes)
    }
    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        self.array().map(u32::from_le_bytes)
    }
    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        self.array().map(u64::from_le_bytes)
    }
    /// A `u64` that must fit a `usize`.
    pub fn usize(&mut self) -> Result<usize, Malformed> {
        usize::try_from(self.u64()?).map_err(|_| Malformed)
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A `0`/`1` flag.
    pub fn bool(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Succeeds only if everything was read.
    pub fn finish(&self) -> Result<(), Malformed> {
        self.buf.is_empty().then_some(()).ok_or(Malformed)
    }
}

// ---- algorithm and parameter types ----------------------------------------------------

fn cipher_code(c: Cipher) -> u8 {
    match c {
        Cipher::AesCbc128 => 1,
        Cipher::AesCbc256 => 2,
        Cipher::AesGcm16_128 => 3,
        Cipher::AesGcm16_256 => 4,
        Cipher::ChaCha20Poly1305 => 5,
    }
}

fn cipher_from(c: u8) -> Result<Cipher, Malformed> {
    Ok(match c {
        1 => Cipher::AesCbc128,
        2 => Cipher::AesCbc256,
        3 => Cipher::AesGcm16_128,
        4 => Cipher::AesGcm16_256,
        5 => Cipher::ChaCha20Poly1305,
        _ => return Err(Malformed),
    })
}

/// Writes a suite exactly as given (an inconsistent one is the enclave's to refuse).
pub fn put_suite(w: &mut Writer, s: &Suite) {
    w.u8(cipher_code(s.cipher)).u16(s.integ.map_or(0, Integ::id));
}

/// Reads a suite.
pub fn get_suite(r: &mut Reader<'_>) -> Result<Suite, Malformed> {
    let cipher = cipher_from(r.u8()?)?;
    let integ = match r.u16()? {
        0 => None,
        id => Some(Integ::from_id(id).ok_or(Malformed)?),
    };
    Ok(Suite { cipher, integ })
}

fn put_role(w: &mut Writer, r: Role) {
    w.u8(match r {
        Role::Initiator => 0,
        Role::Responder => 1,
    });
}

fn get_role(r: &mut Reader<'_>) -> Result<Role, Malformed> {
    match r.u8()? {
        0 => Ok(Role::Initiator),
        1 => Ok(Role::Responder),
        _ => Err(Malformed),
    }
}

const SCHEMES: [SignatureScheme; 12] = [
    SignatureScheme::RsaPkcs1Sha256,
    SignatureScheme::RsaPkcs1Sha384,
    SignatureScheme::RsaPkcs1Sha512,
    SignatureScheme::RsaPssSha256,
    SignatureScheme::RsaPssSha384,
    SignatureScheme::RsaPssSha512,
    SignatureScheme::EcdsaP256Sha256,
    SignatureScheme::EcdsaP384Sha384,
    SignatureScheme::EcdsaP256Sha384,
    SignatureScheme::EcdsaP256Sha512,
    SignatureScheme::EcdsaP384Sha256,
    SignatureScheme::EcdsaP384Sha512,
];

fn scheme_code(s: SignatureScheme) -> u8 {
    SCHEMES.iter().position(|&x| x == s).and_then(|i| u8::try_from(i).ok()).unwrap_or(0xff)
}

fn scheme_from(c: u8) -> Result<SignatureScheme, Malformed> {
    SCHEMES.get(usize::from(c)).copied().ok_or(Malformed)
}

fn dh_group(r: &mut Reader<'_>) -> Result<DhGroup, Malformed> {
    DhGroup::from_id(r.u16()?).ok_or(Malformed)
}

/// Writes a DH exchange.
pub fn put_dh_exchange(w: &mut Writer, x: &DhExchange<'_>) {
    w.u32(x.dh.0).bytes(x.peer_public);
}

/// Reads a DH exchange borrowing from the buffer.
pub fn get_dh_exchange<'a>(r: &mut Reader<'a>) -> Result<DhExchange<'a>, Malformed> {
    Ok(DhExchange { dh: DhHandle(r.u32()?), peer_public: r.bytes()? })
}

/// Writes IKE SA parameters.
pub fn put_ike_params(w: &mut Writer, p: &IkeSaParams<'_>) {
    put_role(w, p.role);
    w.u16(p.prf.id());
    put_suite(w, &p.suite);
    w.bytes(p.nonce_i).bytes(p.nonce_r).u64(p.spi_i).u64(p.spi_r);
}

/// Reads IKE SA parameters.
pub fn get_ike_params<'a>(r: &mut Reader<'a>) -> Result<IkeSaParams<'a>, Malformed> {
    Ok(IkeSaParams {
        role: get_role(r)?,
        prf: Prf::from_id(r.u16()?).ok_or(Malformed)?,
        suite: get_suite(r)?,
        nonce_i: r.bytes()?,
        nonce_r: r.bytes()?,
        spi_i: r.u64()?,
        spi_r: r.u64()?,
    })
}

/// Writes child SA parameters.
pub fn put_child_params(w: &mut Writer, p: &ChildSaParams<'_>) {
    put_role(w, p.role);
    put_suite(w, &p.suite);
    w.u8(u8::from(p.esn)).bytes(p.nonce_i).bytes(p.nonce_r).u32(p.spi_inbound).u32(p.spi_outbound);
}

/// Reads child SA parameters.
pub fn get_child_params<'a>(r: &mut Reader<'a>) -> Result<ChildSaParams<'a>, Malformed> {
    Ok(ChildSaParams {
        role: get_role(r)?,
        suite: get_suite(r)?,
        esn: r.bool()?,
        nonce_i: r.bytes()?,
        nonce_r: r.bytes()?,
        spi_inbound: r.u32()?,
        spi_outbound: r.u32()?,
    })
}

/// Writes static ESP SA parameters.
pub fn put_esp_sa_params(w: &mut Writer, p: &EspSaParams) {
    w.u32(p.spi).u8(u8::from(p.inbound)).u8(u8::from(p.esn));
    put_suite(w, &p.suite);
}

/// Reads static ESP SA parameters.
pub fn get_esp_sa_params(r: &mut Reader<'_>) -> Result<EspSaParams, Malformed> {
    Ok(EspSaParams { spi: r.u32()?, inbound: r.bool()?, esn: r.bool()?, suite: get_suite(r)? })
}

/// Writes the public inputs of an AUTH payload.
pub fn put_auth_input(w: &mut Writer, a: &AuthInput<'_>) {
    w.bytes(a.real_message).bytes(a.peer_nonce).bytes(a.id_body);
}

/// Reads the public inputs of an AUTH payload.
pub fn get_auth_input<'a>(r: &mut Reader<'a>) -> Result<AuthInput<'a>, Malformed> {
    Ok(AuthInput { real_message: r.bytes()?, peer_nonce: r.bytes()?, id_body: r.bytes()? })
}

/// Writes an AUTH spec.
pub fn put_auth_spec(w: &mut Writer, s: AuthSpec) {
    match s {
        AuthSpec::SharedKey => w.u8(0),
        AuthSpec::Ecdsa => w.u8(1),
        AuthSpec::DigitalSignature(x) => w.u8(2).u8(scheme_code(x)),
    };
}

/// Reads an AUTH spec.
pub fn get_auth_spec(r: &mut Reader<'_>) -> Result<AuthSpec, Malformed> {
    match r.u8()? {
        0 => Ok(AuthSpec::SharedKey),
        1 => Ok(AuthSpec::Ecdsa),
        2 => Ok(AuthSpec::DigitalSignature(scheme_from(r.u8()?)?)),
        _ => Err(Malformed),
    }
}

fn key_kind_code(k: PublicKeyKind) -> u8 {
    match k {
        PublicKeyKind::Rsa => 1,
        PublicKeyKind::EcdsaP256 => 2,
        PublicKeyKind::EcdsaP384 => 3,
    }
}

/// Writes a peer credential.
pub fn put_peer(w: &mut Writer, p: &PeerCredential<'_>) {
    match p {
        PeerCredential::SharedKey(h) => w.u8(0).u32(h.0),
        PeerCredential::PublicKey(k) => w.u8(1).u8(key_kind_code(k.kind)).bytes(&k.bytes),
    };
}

/// A decoded peer credential (owning the public key, which `PeerCredential` borrows).
#[derive(Debug)]
pub enum PeerOwned {
    /// A provisioned PSK.
    SharedKey(SecretHandle),
    /// A public key.
    PublicKey(PublicKey),
}

impl PeerOwned {
    /// The borrowed form the trait takes.
    pub fn as_credential(&self) -> PeerCredential<'_> {
        match self {
            Self::SharedKey(h) => PeerCredential::SharedKey(*h),
            Self::PublicKey(k) => PeerCredential::PublicKey(k),
        }
    }
}

/// Reads a peer credential.
pub fn get_peer(r: &mut Reader<'_>) -> Result<PeerOwned, Malformed> {
    match r.u8()? {
        0 => Ok(PeerOwned::SharedKey(SecretHandle(r.u32()?))),
        1 => {
            let kind = match r.u8()? {
                1 => PublicKeyKind::Rsa,
                2 => PublicKeyKind::EcdsaP256,
                3 => PublicKeyKind::EcdsaP384,
                _ => return Err(Malformed),
            };
            Ok(PeerOwned::PublicKey(PublicKey { kind, bytes: r.bytes()?.to_vec() }))
        }
        _ => Err(Malformed),
    }
}

/// Writes what `auth_verify` accepted.
pub fn put_auth_verified(w: &mut Writer, v: &AuthVerified) {
    w.u8(v.method.id());
    match v.scheme {
        None => w.u8(0),
        Some(s) => w.u8(1).u8(scheme_code(s)),
    };
}

/// Reads what `auth_verify` accepted.
pub fn get_auth_verified(r: &mut Reader<'_>) -> Result<AuthVerified, Malformed> {
    let method = AuthMethod::from_id(r.u8()?).ok_or(Malformed)?;
    let scheme = if r.bool()? { Some(scheme_from(r.u8()?)?) } else { None };
    Ok(AuthVerified { method, scheme })
}

/// Writes a secret kind.
pub fn put_secret_kind(w: &mut Writer, k: SecretKind) {
    w.u8(k.code());
}

/// Reads a secret kind.
pub fn get_secret_kind(r: &mut Reader<'_>) -> Result<SecretKind, Malformed> {
    SecretKind::from_code(r.u8()?).ok_or(Malformed)
}

/// Reads an auth method.
pub fn get_auth_method(r: &mut Reader<'_>) -> Result<AuthMethod, Malformed> {
    AuthMethod::from_id(r.u8()?).ok_or(Malformed)
}

/// Writes a memory report.
pub fn put_memory_report(w: &mut Writer, m: &MemoryReport) {
    for v in [
        m.ike_sas,
        m.ike_sa_bytes,
        m.esp_sas,
        m.esp_sa_bytes,
        m.dh_values,
        m.dh_bytes,
        m.secrets,
        m.secret_bytes,
        m.fixed_bytes,
    ] {
        w.usize(v);
    }
}

/// Reads a memory report.
pub fn get_memory_report(r: &mut Reader<'_>) -> Result<MemoryReport, Malformed> {
    Ok(MemoryReport {
        ike_sas: r.usize()?,
        ike_sa_bytes: r.usize()?,
        esp_sas: r.usize()?,
        esp_sa_bytes: r.usize()?,
        dh_values: r.usize()?,
        dh_bytes: r.usize()?,
        secrets: r.usize()?,
        secret_bytes: r.usize()?,
        fixed_bytes: r.usize()?,
    })
}

/// Writes counters (array lengths first, so both sides must agree on them).
pub fn put_counters(w: &mut Writer, c: &Counters) {
    w.u64(c.batches).usize(EspStatus::COUNT).usize(ErrorKind::COUNT);
    for v in c.esp.iter().chain(c.errors.iter()) {
        w.u64(*v);
    }
}

/// Reads counters.
pub fn get_counters(r: &mut Reader<'_>) -> Result<Counters, Malformed> {
    let mut c = Counters { batches: r.u64()?, ..Counters::default() };
    if r.usize()? != EspStatus::COUNT || r.usize()? != ErrorKind::COUNT {
        return Err(Malformed);
    }
    for v in c.esp.iter_mut().chain(c.errors.iter_mut()) {
        *v = r.u64()?;
    }
    Ok(c)
}

/// Writes attestation evidence.
pub fn put_evidence(w: &mut Writer, e: &Evidence) {
    let kind = match e.kind {
        EvidenceKind::SoftwareRooted => 1,
    };
    w.u8(kind).bytes(&e.bytes);
}

/// Reads attestation evidence.
pub fn get_evidence(r: &mut Reader<'_>) -> Result<Evidence, Malformed> {
    let kind = match r.u8()? {
        1 => EvidenceKind::SoftwareRooted,
        _ => return Err(Malformed),
    };
    Ok(Evidence { kind, bytes: r.bytes()?.to_vec() })
}

/// Writes a provisioning offer (public data).
pub fn put_offer(w: &mut Writer, o: &ProvisioningOffer) {
    w.bytes(&o.challenge).bytes(&o.public_key).u32(o.lifetime_secs);
    put_evidence(w, &o.evidence);
}

/// Reads a provisioning offer; the challenge and key must have their exact lengths.
pub fn get_offer(r: &mut Reader<'_>) -> Result<ProvisioningOffer, Malformed> {
    let challenge = r.bytes()?.try_into().map_err(|_| Malformed)?;
    let public_key = r.bytes()?.try_into().map_err(|_| Malformed)?;
    let lifetime_secs = r.u32()?;
    Ok(ProvisioningOffer { challenge, public_key, evidence: get_evidence(r)?, lifetime_secs })
}

/// Writes bytes that may be absent.
pub fn put_opt_bytes(w: &mut Writer, b: Option<&[u8]>) {
    match b {
        Some(b) => w.u8(1).bytes(b),
        None => w.u8(0),
    };
}

/// Reads [`put_opt_bytes`]' output.
pub fn get_opt_bytes<'a>(r: &mut Reader<'a>) -> Result<Option<&'a [u8]>, Malformed> {
    Ok(if r.bool()? { Some(r.bytes()?) } else { None })
}

/// Writes a destination key (public data).
pub fn put_destination_key(w: &mut Writer, k: &DestinationKey) {
    w.bytes(&k.spki_der);
    put_evidence(w, &k.evidence);
}

/// Reads a destination key.
pub fn get_destination_key(r: &mut Reader<'_>) -> Result<DestinationKey, Malformed> {
    let spki_der = r.bytes()?.to_vec();
    Ok(DestinationKey { spki_der, evidence: get_evidence(r)? })
}

/// Writes what an import restored: three lists of (old, new) handle pairs, then the
/// untrusted state.
pub fn put_restore(w: &mut Writer, m: &MigrationRestore) {
    w.usize(m.secrets.len());
    for (a, b) in &m.secrets {
        w.u32(a.0).u32(b.0);
    }
    w.usize(m.ike_sas.len());
    for (a, b) in &m.ike_sas {
        w.u32(a.0).u32(b.0);
    }
    w.usize(m.esp_sas.len());
    for (a, b) in &m.esp_sas {
        w.u32(a.0).u32(b.0);
    }
    w.bytes(&m.untrusted_state);
}

/// Reads [`put_restore`]'s output; a count larger than the bytes left is refused before
/// anything is allocated for it.
pub fn get_restore(r: &mut Reader<'_>) -> Result<MigrationRestore, Malformed> {
    fn pairs<T>(r: &mut Reader<'_>, f: fn(u32) -> T) -> Result<Vec<(T, T)>, Malformed> {
        let n = r.usize()?;
        if n > r.remaining() / 8 {
            return Err(Malformed);
        }
        (0..n).map(|_| Ok((f(r.u32()?), f(r.u32()?)))).collect()
    }
    Ok(MigrationRestore {
        secrets: pairs(r, SecretHandle)?,
        ike_sas: pairs(r, IkeSaHandle)?,
        esp_sas: pairs(r, EspSaHandle)?,
        untrusted_state: r.bytes()?.to_vec(),
    })
}

fn get_measurement(r: &mut Reader<'_>) -> Result<Measurement, Malformed> {
    r.bytes()?.try_into().map(Measurement).map_err(|_| Malformed)
}

// ---- errors ----------------------------------------------------------------------------

fn handle_kind_code(k: HandleKind) -> u8 {
    match k {
        HandleKind::IkeSa => 0,
        HandleKind::EspSa => 1,
        HandleKind::Dh => 2,
        HandleKind::Secret => 3,
    }
}

fn handle_kind(r: &mut Reader<'_>) -> Result<HandleKind, Malformed> {
    Ok(match r.u8()? {
        0 => HandleKind::IkeSa,
        1 => HandleKind::EspSa,
        2 => HandleKind::Dh,
        3 => HandleKind::Secret,
        _ => return Err(Malformed),
    })
}

fn blob_code(b: BlobRejection) -> u8 {
    match b {
        BlobRejection::Malformed => 0,
        BlobRejection::WrongTenant => 1,
        BlobRejection::WrongSa => 2,
        BlobRejection::Rollback => 3,
        BlobRejection::Forged => 4,
    }
}

fn blob(r: &mut Reader<'_>) -> Result<BlobRejection, Malformed> {
    Ok(match r.u8()? {
        0 => BlobRejection::Malformed,
        1 => BlobRejection::WrongTenant,
        2 => BlobRejection::WrongSa,
        3 => BlobRejection::Rollback,
        4 => BlobRejection::Forged,
        _ => return Err(Malformed),
    })
}

/// The enclave's error messages are `&'static str`s from a finite set in its code; the
/// host turns the transmitted text back into one, leaking each distinct text once (at most
/// [`MAX_INTERNED`] of them, each at most 200 bytes; beyond that a fixed text is used).
fn intern(s: &[u8]) -> &'static str {
    use std::sync::Mutex;
    static TABLE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    const FALLBACK: &str = "(enclave message not shown)";
    let Ok(s) = core::str::from_utf8(s) else { return FALLBACK };
    if s.len() > 200 {
        return FALLBACK;
    }
    let Ok(mut t) = TABLE.lock() else { return FALLBACK };
    if let Some(found) = t.iter().find(|x| **x == s) {
        return found;
    }
    if t.len() >= MAX_INTERNED {
        return FALLBACK;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    t.push(leaked);
    leaked
}

/// Most distinct error texts the host keeps.
pub const MAX_INTERNED: usize = 512;

/// Writes an error of the trusted core.
pub fn put_error(w: &mut Writer, e: &Error) {
    match e {
        Error::UnknownHandle { kind, handle } => w.u8(1).u8(handle_kind_code(*kind)).u32(*handle),
        Error::ForeignHandle { kind, handle } => w.u8(2).u8(handle_kind_code(*kind)).u32(*handle),
        Error::TableFull { kind, max } => w.u8(3).u8(handle_kind_code(*kind)).usize(*max),
        Error::BadLength { what, len, why } => w.u8(4).str(what).usize(*len).str(why),
        Error::BadPeerPublicValue { group } => w.u8(5).u16(group.id()),
        Error::DhGroupMismatch { have, need } => w.u8(6).u16(have.id()).u16(need.id()),
        Error::InconsistentSuite { cipher, integ } => w.u8(7).u16(*cipher).u16(*integ),
        Error::WrongSecretKind { handle, what } => w.u8(8).u32(*handle).str(what),
        Error::KeyCleared { what } => w.u8(9).str(what),
        Error::AlreadySealed => w.u8(10),
        Error::SealedBlob { reason } => w.u8(11).u8(blob_code(*reason)),
        Error::ProvisioningBlob { reason } => w.u8(12).u8(blob_code(*reason)),
        Error::BadPrivateKey { why } => w.u8(13).str(why),
        Error::BadPublicKey { why } => w.u8(14).str(why),
        Error::IntegrityCheckFailed => w.u8(15),
        Error::BadPadding => w.u8(16),
        Error::AuthenticationFailed { method } => w.u8(17).u8(*method),
        Error::Unsupported { what, value } => w.u8(18).str(what).u16(*value),
        Error::BatchTooLarge { descriptors, max } => w.u8(19).usize(*descriptors).usize(*max),
        Error::StatusLengthMismatch { descriptors, status } => w.u8(20).usize(*descriptors).usize(*status),
        Error::Exhausted { what } => w.u8(21).str(what),
        Error::Random => w.u8(22),
        Error::SelfTestFailed { test } => w.u8(23).str(test),
        Error::Attestation { why } => w.u8(24).str(why),
        Error::Internal { what } => w.u8(25).str(what),
        Error::NotSealed => w.u8(26),
        Error::WrongBlobKind { got, want } => w.u8(27).u8(got.code()).str(want),
        Error::EspSaBinding { field } => w.u8(28).str(field),
        Error::KeyReuse { why } => w.u8(29).str(why),
        Error::Provisioning { why } => w.u8(30).str(why),
        Error::MeasurementMismatch { expected, got } => w.u8(31).bytes(&expected.0).bytes(&got.0),
        Error::Migration { why } => w.u8(32).str(why),
        Error::ProtocolRefused { why } => w.u8(33).str(why),
        // Variants added later, and transport errors (which the trusted core never
        // returns), cross as an internal failure rather than breaking the build.
        #[allow(unreachable_patterns)]
        _ => w.u8(25).str("unencodable enclave error"),
    };
}

/// Reads an error of the trusted core.
pub fn get_error(r: &mut Reader<'_>) -> Result<Error, Malformed> {
    let s = |r: &mut Reader<'_>| r.bytes().map(intern);
    Ok(match r.u8()? {
        1 => Error::UnknownHandle { kind: handle_kind(r)?, handle: r.u32()? },
        2 => Error::ForeignHandle { kind: handle_kind(r)?, handle: r.u32()? },
        3 => Error::TableFull { kind: handle_kind(r)?, max: r.usize()? },
        4 => Error::BadLength { what: s(r)?, len: r.usize()?, why: s(r)? },
        5 => Error::BadPeerPublicValue { group: dh_group(r)? },
        6 => Error::DhGroupMismatch { have: dh_group(r)?, need: dh_group(r)? },
        7 => Error::InconsistentSuite { cipher: r.u16()?, integ: r.u16()? },
        8 => Error::WrongSecretKind { handle: r.u32()?, what: s(r)? },
        9 => Error::KeyCleared { what: s(r)? },
        10 => Error::AlreadySealed,
        11 => Error::SealedBlob { reason: blob(r)? },
        12 => Error::ProvisioningBlob { reason: blob(r)? },
        13 => Error::BadPrivateKey { why: s(r)? },
        14 => Error::BadPublicKey { why: s(r)? },
        15 => Error::IntegrityCheckFailed,
        16 => Error::BadPadding,
        17 => Error::AuthenticationFailed { method: r.u8()? },
        18 => Error::Unsupported { what: s(r)?, value: r.u16()? },
        19 => Error::BatchTooLarge { descriptors: r.usize()?, max: r.usize()? },
        20 => Error::StatusLengthMismatch { descriptors: r.usize()?, status: r.usize()? },
        21 => Error::Exhausted { what: s(r)? },
        22 => Error::Random,
        23 => Error::SelfTestFailed { test: s(r)? },
        24 => Error::Attestation { why: s(r)? },
        25 => Error::Internal { what: s(r)? },
        26 => Error::NotSealed,
        27 => Error::WrongBlobKind { got: get_secret_kind(r)?, want: s(r)? },
        28 => Error::EspSaBinding { field: s(r)? },
        29 => Error::KeyReuse { why: s(r)? },
        30 => Error::Provisioning { why: s(r)? },
        31 => Error::MeasurementMismatch {
            expected: Box::new(get_measurement(r)?),
            got: Box::new(get_measurement(r)?),
        },
        32 => Error::Migration { why: s(r)? },
        33 => Error::ProtocolRefused { why: s(r)? },
        _ => return Err(Malformed),
    })
}

/// Reads a DH group (for `dh_generate`).
pub fn get_dh_group(r: &mut Reader<'_>) -> Result<DhGroup, Malformed> {
    dh_group(r)
}

/// Reads an IKE SA handle.
pub fn get_ike(r: &mut Reader<'_>) -> Result<IkeSaHandle, Malformed> {
    r.u32().map(IkeSaHandle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: Error) {
        let mut w = Writer::new();
        put_error(&mut w, &e);
        let mut r = Reader::new(&w.buf);
        assert_eq!(get_error(&mut r), Ok(e.clone()), "{e:?}");
        assert_eq!(r.finish(), Ok(()));
        // Every strict prefix is refused, never misread.
        for n in 0..w.buf.len() {
            let mut r = Reader::new(&w.buf[..n]);
            assert!(get_error(&mut r).is_err() || r.finish().is_err() || n == w.buf.len());
        }
    }

    #[test]
    fn every_error_variant_round_trips() {
        let k = HandleKind::EspSa;
        for e in [
            Error::UnknownHandle { kind: k, handle: 7 },
            Error::ForeignHandle { kind: HandleKind::Dh, handle: 0xff00_0001 },
            Error::TableFull { kind: HandleKind::Secret, max: 64 },
            Error::BadLength { what: "nonce", len: 3, why: "16..=256" },
            Error::BadPeerPublicValue { group: DhGroup::Curve25519 },
            Error::DhGroupMismatch { have: DhGroup::EcpP256, need: DhGroup::Modp2048 },
            Error::InconsistentSuite { cipher: 20, integ: 12 },
            Error::WrongSecretKind { handle: 9, what: "AUTH" },
            Error::KeyCleared { what: "SK_pi" },
            Error::AlreadySealed,
            Error::SealedBlob { reason: BlobRejection::Rollback },
            Error::ProvisioningBlob { reason: BlobRejection::Forged },
            Error::BadPrivateKey { why: "x" },
            Error::BadPublicKey { why: "y" },
            Error::IntegrityCheckFailed,
            Error::BadPadding,
            Error::AuthenticationFailed { method: 14 },
            Error::Unsupported { what: "group", value: 99 },
            Error::BatchTooLarge { descriptors: 300, max: 256 },
            Error::StatusLengthMismatch { descriptors: 3, status: 2 },
            Error::Exhausted { what: "IV" },
            Error::Random,
            Error::SelfTestFailed { test: "aes-gcm" },
            Error::Attestation { why: "z" },
            Error::Internal { what: "w" },
            Error::NotSealed,
            Error::WrongBlobKind { got: SecretKind::PreSharedKey, want: "ESP SA keys" },
            Error::EspSaBinding { field: "SPI" },
            Error::KeyReuse { why: "twice" },
            Error::Provisioning { why: "offer already used" },
            Error::MeasurementMismatch {
                expected: Box::new(Measurement([1; 48])),
                got: Box::new(Measurement([2; 48])),
            },
        ] {
            round_trip(e);
        }
    }

    #[test]
    fn parameters_round_trip() {
        let suite = Suite::cbc(Cipher::AesCbc256, Integ::HmacSha384_192);
        let p = ChildSaParams {
            role: Role::Responder,
            suite,
            esn: true,
            nonce_i: &[1; 32],
            nonce_r: &[2; 16],
            spi_inbound: 0x1234,
            spi_outbound: 0x5678,
        };
        let mut w = Writer::new();
        put_child_params(&mut w, &p);
        let mut r = Reader::new(&w.buf);
        let q = get_child_params(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(
            (q.role, q.suite, q.esn, q.nonce_i, q.nonce_r),
            (p.role, p.suite, p.esn, p.nonce_i, p.nonce_r)
        );
        assert_eq!((q.spi_inbound, q.spi_outbound), (0x1234, 0x5678));

        for s in SCHEMES {
            let mut w = Writer::new();
            put_auth_spec(&mut w, AuthSpec::DigitalSignature(s));
            assert_eq!(get_auth_spec(&mut Reader::new(&w.buf)), Ok(AuthSpec::DigitalSignature(s)));
        }
        let _ = EspSaHandle(0);

        let e = EspSaParams { spi: 0x0102_0304, inbound: true, esn: true, suite };
        let mut w = Writer::new();
        put_esp_sa_params(&mut w, &e);
        let mut r = Reader::new(&w.buf);
        assert_eq!(get_esp_sa_params(&mut r), Ok(e));
        r.finish().unwrap();
        w.buf[4] = 2;
        assert_eq!(get_esp_sa_params(&mut Reader::new(&w.buf)), Err(Malformed));
    }

    #[test]
    fn offers_round_trip_and_wrong_lengths_are_refused() {
        let o = ProvisioningOffer {
            challenge: [7; 16],
            public_key: [9; 32],
            evidence: Evidence { kind: EvidenceKind::SoftwareRooted, bytes: vec![1, 2, 3] },
            lifetime_secs: 120,
        };
        let mut w = Writer::new();
        put_offer(&mut w, &o);
        let mut r = Reader::new(&w.buf);
        assert_eq!(get_offer(&mut r), Ok(o.clone()));
        r.finish().unwrap();
        for n in 0..w.buf.len() {
            assert!(get_offer(&mut Reader::new(&w.buf[..n])).is_err(), "prefix of {n} bytes");
        }
        // A challenge one byte short.
        let mut w = Writer::new();
        w.bytes(&[7; 15]).bytes(&[9; 32]).u32(120);
        put_evidence(&mut w, &o.evidence);
        assert_eq!(get_offer(&mut Reader::new(&w.buf)), Err(Malformed));
    }

    #[test]
    fn lengths_beyond_the_buffer_are_refused() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1, 2]);
        assert_eq!(r.bytes(), Err(Malformed));
        assert_eq!(Reader::new(&[2]).bool(), Err(Malformed));
        assert_eq!(Reader::new(&[1, 2]).finish(), Err(Malformed));
    }

    #[test]
    fn interned_texts_are_shared_and_bounded() {
        let a = intern(b"same text");
        let b = intern(b"same text");
        assert!(core::ptr::eq(a, b));
        assert_eq!(intern(&[0xff, 0xfe]), "(enclave message not shown)");
        assert_eq!(intern(&[b'a'; 300]), "(enclave message not shown)");
    }
}
