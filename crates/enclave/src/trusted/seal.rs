//! Provisioning blobs (tenant secrets in) and sealed blobs (SK_d, IKE SA state and
//! attested tenant secrets out and back).
//! Formats: [`crate::provision`] and [`crate::seal_format`].

use super::keybuf::KeyBuf;
use super::prf::{self, MAX_PRF_LEN};
pub(crate) use attest::provision::scrub_aead_key;
use enclave_api::alg::{Prf, SecretKind};
use enclave_api::error::{BlobRejection, Error, Result};
use enclave_api::handle::TenantId;
use enclave_api::provision::{WRAPPED_HEADER_LEN, WRAPPED_MAGIC, WRAPPED_VERSION};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use zeroize::Zeroizing;

pub(crate) const SEAL_MAGIC: &[u8; 4] = b"CLSB";
pub(crate) const FORMAT_VERSION: u8 = 1;
/// Sealed header: magic, version, kind, prf id(2), counter(8), tenant(4), SPIi(8), SPIr(8).
pub(crate) const SEAL_HEADER_LEN: usize = 36;
const TAG_LEN: usize = 16;
/// The kind octet of a sealed SK_d.
pub(crate) const SEAL_KIND_SK_D: u8 = 1;
/// The kind octet of a sealed IKE SA state (keys for restore after a restart).
pub(crate) const SEAL_KIND_IKE_STATE: u8 = 2;
/// The kind octet of a sealed tenant secret (attested provisioning, for restarts).
pub(crate) const SEAL_KIND_TENANT_SECRET: u8 = 3;

/// The AEAD keys derived from the provisioning key.
pub(crate) struct RootKeys {
    provisioning: LessSafeKey,
    sealing: LessSafeKey,
}

impl Drop for RootKeys {
    fn drop(&mut self) {
        scrub_aead_key(&mut self.provisioning);
        scrub_aead_key(&mut self.sealing);
    }
}

impl RootKeys {
    /// Provisioning key as is; sealing key = HMAC-SHA-256(provisioning key,
    /// "cloister-seal-key-v1" || tenant), so blobs of one tenant never open for another.
    pub(crate) fn new(provisioning_key: &[u8; 32], tenant: TenantId) -> Result<Self> {
        let internal = Error::Internal { what: "root keys" };
        let provisioning =
            LessSafeKey::new(UnboundKey::new(&AES_256_GCM, provisioning_key).map_err(|_| internal.clone())?);
        let mut sk = Zeroizing::new([0u8; MAX_PRF_LEN]);
        prf::prf(
            Prf::HmacSha256,
            provisioning_key,
            &[b"cloister-seal-key-v1", &tenant.0.to_be_bytes()],
            &mut sk[..],
        )?;
        let sealing = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &sk[..32]).map_err(|_| internal)?);
        Ok(Self { provisioning, sealing })
    }
}

/// Opens a provisioning blob; returns the secret's kind and plaintext bytes.
pub(crate) fn open_provisioning(
    keys: &RootKeys,
    tenant: TenantId,
    blob: &[u8],
) -> Result<(SecretKind, Zeroizing<Vec<u8>>)> {
    let reject = |reason| Error::ProvisioningBlob { reason };
    if blob.len() < WRAPPED_HEADER_LEN + NONCE_LEN + TAG_LEN {
        return Err(reject(BlobRejection::Malformed));
    }
    let (header, rest) = blob.split_at(WRAPPED_HEADER_LEN);
    if &header[0..4] != WRAPPED_MAGIC || header[4] != WRAPPED_VERSION || header[6..8] != [0, 0] {
        return Err(reject(BlobRejection::Malformed));
    }
    let kind = SecretKind::from_code(header[5]).ok_or(reject(BlobRejection::Malformed))?;
    if header[8..12] != tenant.0.to_be_bytes() {
        return Err(reject(BlobRejection::WrongTenant));
    }
    let (nonce, ct) = rest.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| reject(BlobRejection::Malformed))?;
    let mut buf = Zeroizing::new(ct.to_vec());
    let len = keys
        .provisioning
        .open_in_place(nonce, Aad::from(header), &mut buf[..])
        .map_err(|_| reject(BlobRejection::Forged))?
        .len();
    buf.truncate(len);
    Ok((kind, buf))
}

/// The fields a sealed SK_d is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SealBinding {
    pub(crate) tenant: TenantId,
    pub(crate) prf: Prf,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
}

/// The header of a sealed blob; `prf` is 0 and the SPIs are 0 for blobs that belong to no
/// IKE SA (tenant secrets).
fn seal_header(
    kind: u8,
    prf: u16,
    tenant: TenantId,
    spis: (u64, u64),
    counter: u64,
) -> [u8; SEAL_HEADER_LEN] {
    let mut h = [0u8; SEAL_HEADER_LEN];
    h[0..4].copy_from_slice(SEAL_MAGIC);
    h[4] = FORMAT_VERSION;
    h[5] = kind;
    h[6..8].copy_from_slice(&prf.to_be_bytes());
    h[8..16].copy_from_slice(&counter.to_be_bytes());
    h[16..20].copy_from_slice(&tenant.0.to_be_bytes());
    h[20..28].copy_from_slice(&spis.0.to_be_bytes());
    h[28..36].copy_from_slice(&spis.1.to_be_bytes());
    h
}

fn be_u64(b: &[u8]) -> u64 {
    let mut c = [0u8; 8];
    if let Some(src) = b.get(..8) {
        c.copy_from_slice(src);
    }
    u64::from_be_bytes(c)
}

/// Seals `body` under the sealing key with a fresh random nonce; the header (kind, binding,
/// counter) is the AAD.
pub(crate) fn seal_blob(
    keys: &RootKeys,
    rng: &SystemRandom,
    kind: u8,
    binding: &SealBinding,
    counter: u64,
    body: &[u8],
) -> Result<Vec<u8>> {
    let header = seal_header(kind, binding.prf.id(), binding.tenant, (binding.spi_i, binding.spi_r), counter);
    seal_with_header(keys, rng, &header, body)
}

/// Seals a tenant secret (kind 3): `body` is the secret's kind code, then its bytes. It
/// belongs to no IKE SA: PRF and SPIs are 0.
pub(crate) fn seal_tenant_secret(
    keys: &RootKeys,
    rng: &SystemRandom,
    tenant: TenantId,
    counter: u64,
    body: &[u8],
) -> Result<Vec<u8>> {
    let header = seal_header(SEAL_KIND_TENANT_SECRET, 0, tenant, (0, 0), counter);
    seal_with_header(keys, rng, &header, body)
}

fn seal_with_header(
    keys: &RootKeys,
    rng: &SystemRandom,
    header: &[u8; SEAL_HEADER_LEN],
    body: &[u8],
) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut nonce).map_err(|_| Error::Random)?;
    let mut out = Vec::with_capacity(SEAL_HEADER_LEN + NONCE_LEN + body.len() + TAG_LEN);
    out.extend_from_slice(header);
    out.extend_from_slice(&nonce);
    let start = out.len();
    out.extend_from_slice(body);
    let ct = out.get_mut(start..).ok_or(Error::Internal { what: "seal" })?;
    let tag = keys
        .sealing
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(header), ct)
        .map_err(|_| Error::Internal { what: "seal" })?;
    out.extend_from_slice(tag.as_ref());
    Ok(out)
}

/// Seals SK_d (kind SK_d).
pub(crate) fn seal_sk_d(
    keys: &RootKeys,
    rng: &SystemRandom,
    binding: &SealBinding,
    counter: u64,
    sk_d: &[u8],
) -> Result<Vec<u8>> {
    seal_blob(keys, rng, SEAL_KIND_SK_D, binding, counter, sk_d)
}

/// What an authenticated sealed header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenedHeader {
    pub(crate) binding: SealBinding,
    pub(crate) counter: u64,
}

/// The fields of an authenticated sealed header, PRF still raw.
struct RawHeader {
    prf: u16,
    counter: u64,
    spi_i: u64,
    spi_r: u64,
}

/// Authenticates and opens a blob of `kind` into `out` (which must be exactly as long as the
/// plaintext); returns the header's fields. Refuses another tenant's blobs and forged ones;
/// the caller checks the rest of the binding and whether the counter is still good.
fn open_raw(keys: &RootKeys, tenant: TenantId, kind: u8, blob: &[u8], out: &mut [u8]) -> Result<RawHeader> {
    let reject = |reason| Error::SealedBlob { reason };
    if blob.len() != SEAL_HEADER_LEN + NONCE_LEN + out.len() + TAG_LEN {
        return Err(reject(BlobRejection::Malformed));
    }
    let (header, rest) = blob.split_at(SEAL_HEADER_LEN);
    if &header[0..4] != SEAL_MAGIC || header[4] != FORMAT_VERSION || header[5] != kind {
        return Err(reject(BlobRejection::Malformed));
    }
    let (nonce, ct) = rest.split_at(NONCE_LEN);
    let (ct, tag) = ct.split_at(out.len());
    out.copy_from_slice(ct);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| reject(BlobRejection::Malformed))?;
    let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| reject(BlobRejection::Malformed))?;
    // Authenticate first: only then do the header's fields mean anything.
    keys.sealing
        .open_in_place_separate_tag(nonce, Aad::from(header), ring::aead::Tag::from(tag), out, 0..)
        .map_err(|_| reject(BlobRejection::Forged))?;
    let mut t = [0u8; 4];
    t.copy_from_slice(&header[16..20]);
    if u32::from_be_bytes(t) != tenant.0 {
        return Err(reject(BlobRejection::WrongTenant));
    }
    let counter = be_u64(&header[8..16]);
    Ok(RawHeader {
        prf: u16::from_be_bytes([header[6], header[7]]),
        counter,
        spi_i: be_u64(&header[20..28]),
        spi_r: be_u64(&header[28..36]),
    })
}

/// [`open_raw`] for the blobs of an IKE SA (kinds 1 and 2): the PRF must be one we know.
fn open_blob(
    keys: &RootKeys,
    tenant: TenantId,
    kind: u8,
    blob: &[u8],
    out: &mut [u8],
) -> Result<OpenedHeader> {
    let h = open_raw(keys, tenant, kind, blob, out)?;
    let prf = Prf::from_id(h.prf).ok_or(Error::SealedBlob { reason: BlobRejection::Malformed })?;
    let binding = SealBinding { tenant, prf, spi_i: h.spi_i, spi_r: h.spi_r };
    Ok(OpenedHeader { binding, counter: h.counter })
}

/// Unseals SK_d, refusing blobs for another tenant or SA, forged ones, and ones whose
/// counter is not `expected_counter` (the latest seal of this SA).
pub(crate) fn unseal_sk_d(
    keys: &RootKeys,
    binding: &SealBinding,
    expected_counter: u64,
    blob: &[u8],
) -> Result<KeyBuf<MAX_PRF_LEN>> {
    let reject = |reason| Error::SealedBlob { reason };
    let mut buf = Zeroizing::new([0u8; MAX_PRF_LEN]);
    let len = blob.len().saturating_sub(SEAL_HEADER_LEN + NONCE_LEN + TAG_LEN);
    let out = buf.get_mut(..len).ok_or(reject(BlobRejection::Malformed))?;
    let opened = open_blob(keys, binding.tenant, SEAL_KIND_SK_D, blob, out)?;
    if opened.binding != *binding {
        return Err(reject(BlobRejection::WrongSa));
    }
    if opened.counter != expected_counter {
        return Err(reject(BlobRejection::Rollback));
    }
    if out.len() != binding.prf.output_len() {
        return Err(reject(BlobRejection::Malformed));
    }
    KeyBuf::from_slice(out)
}

/// Opens a sealed IKE SA state of exactly `body_len` bytes.
pub(crate) fn open_ike_state(
    keys: &RootKeys,
    tenant: TenantId,
    blob: &[u8],
) -> Result<(OpenedHeader, Zeroizing<Vec<u8>>)> {
    let len = blob
        .len()
        .checked_sub(SEAL_HEADER_LEN + NONCE_LEN + TAG_LEN)
        .ok_or(Error::SealedBlob { reason: BlobRejection::Malformed })?;
    let mut body = Zeroizing::new(vec![0u8; len]);
    let opened = open_blob(keys, tenant, SEAL_KIND_IKE_STATE, blob, &mut body)?;
    Ok((opened, body))
}

/// Longest tenant secret body (kind code and secret) a kind-3 blob may hold.
pub(crate) const MAX_TENANT_SECRET_BODY: usize = 1 + crate::provision::MAX_PROVISIONED_SECRET;

/// Opens a sealed tenant secret (kind 3) of this tenant; returns its counter (whose
/// liveness the caller asks the ledger) and body (kind code, then the secret). Not bound to
/// any IKE SA: any instance of the tenant with the same root may open it.
pub(crate) fn open_tenant_secret(
    keys: &RootKeys,
    tenant: TenantId,
    blob: &[u8],
) -> Result<(u64, Zeroizing<Vec<u8>>)> {
    let malformed = Error::SealedBlob { reason: BlobRejection::Malformed };
    let len = blob.len().checked_sub(SEAL_HEADER_LEN + NONCE_LEN + TAG_LEN).ok_or(malformed.clone())?;
    if len == 0 || len > MAX_TENANT_SECRET_BODY {
        return Err(malformed);
    }
    let mut body = Zeroizing::new(vec![0u8; len]);
    let h = open_raw(keys, tenant, SEAL_KIND_TENANT_SECRET, blob, &mut body)?;
    // Authenticated, so only this code could have written other values; refuse them anyway.
    if h.prf != 0 || h.spi_i != 0 || h.spi_r != 0 {
        return Err(malformed);
    }
    Ok((h.counter, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> SealBinding {
        SealBinding { tenant: TenantId(7), prf: Prf::HmacSha256, spi_i: 1, spi_r: 2 }
    }

    #[test]
    fn seal_unseal_round_trip() {
        let keys = RootKeys::new(&[9; 32], TenantId(7)).unwrap();
        let blob = seal_sk_d(&keys, &SystemRandom::new(), &binding(), 5, &[0xAA; 32]).unwrap();
        let k = unseal_sk_d(&keys, &binding(), 5, &blob).unwrap();
        assert_eq!(k.as_slice(), &[0xAA; 32]);
    }

    #[test]
    fn tampered_rolled_back_and_misbound_blobs_are_refused() {
        let keys = RootKeys::new(&[9; 32], TenantId(7)).unwrap();
        let rng = SystemRandom::new();
        let blob = seal_sk_d(&keys, &rng, &binding(), 5, &[0xAA; 32]).unwrap();
        let err = |reason| Err(Error::SealedBlob { reason });
        for i in [0, 9, 40, blob.len() - 1] {
            let mut t = blob.clone();
            t[i] ^= 0x01;
            let r = unseal_sk_d(&keys, &binding(), 5, &t).map(|_| ());
            assert!(r.is_err(), "flipping byte {i} must be refused");
        }
        assert_eq!(unseal_sk_d(&keys, &binding(), 6, &blob).map(|_| ()), err(BlobRejection::Rollback));
        let other_sa = SealBinding { spi_r: 3, ..binding() };
        assert_eq!(unseal_sk_d(&keys, &other_sa, 5, &blob).map(|_| ()), err(BlobRejection::WrongSa));
        let other_tenant = RootKeys::new(&[9; 32], TenantId(8)).unwrap();
        assert_eq!(unseal_sk_d(&other_tenant, &binding(), 5, &blob).map(|_| ()), err(BlobRejection::Forged));
        assert_eq!(unseal_sk_d(&keys, &binding(), 5, &blob[..20]).map(|_| ()), err(BlobRejection::Malformed));
    }

    #[test]
    fn provisioning_round_trip_and_refusals() {
        let key = [3u8; 32];
        let keys = RootKeys::new(&key, TenantId(1)).unwrap();
        let pk = enclave_api::ProvisioningKey::from_bytes(key);
        let blob =
            attest::provision::wrap_secret(&pk, TenantId(1), SecretKind::PreSharedKey, b"secret").unwrap();
        let (kind, s) = open_provisioning(&keys, TenantId(1), &blob).unwrap();
        assert_eq!((kind, &s[..]), (SecretKind::PreSharedKey, &b"secret"[..]));
        let reject = |reason| Err(Error::ProvisioningBlob { reason });
        assert_eq!(
            open_provisioning(&keys, TenantId(2), &blob).map(|_| ()),
            reject(BlobRejection::WrongTenant)
        );
        let mut t = blob.clone();
        t[5] = SecretKind::RsaPrivateKey.code();
        assert_eq!(open_provisioning(&keys, TenantId(1), &t).map(|_| ()), reject(BlobRejection::Forged));
        let mut t = blob.clone();
        t[5] = 99;
        assert_eq!(open_provisioning(&keys, TenantId(1), &t).map(|_| ()), reject(BlobRejection::Malformed));
        assert_eq!(
            open_provisioning(&keys, TenantId(1), &blob[..30]).map(|_| ()),
            reject(BlobRejection::Malformed)
        );
    }
}
