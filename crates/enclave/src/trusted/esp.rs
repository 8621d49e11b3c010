//! ESP transforms over batches (RFC 4303): AES-GCM-16 (RFC 4106), ChaCha20-Poly1305
//! (RFC 7634), AES-CBC with HMAC-SHA2 (RFC 3602, RFC 4868); ESN (RFC 4303 §2.2.1); and
//! AD-merging with In-Enclave Forwarding (EnclaveVPN §4.4). Layout: [`crate::EspDescriptor`].
//!
//! The per-packet path allocates nothing: descriptors are read, the region is checked, the
//! packet is transformed in place (or, for forwarding, in the preallocated scratch buffer).

use super::cbc_mode::{CbcDecryptor, CbcEncryptor, BLOCK};
use super::esp_keys::{next_owner_id, KeyCache};
use super::ike_keys::{EspKeys, MAX_ENC_KEY, MAX_INTEG_KEY};
use super::keybuf::KeyBuf;
use super::lane::Lane;
use super::prf::{ct_eq, integ_alg, scrub_hmac_key};
use super::sent::SentWindow;
use super::sk::{aead_alg, nonce};
use super::table::Table;
use enclave_api::alg::Suite;
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspOpcode, EspStatus};
use enclave_api::report::InboundMode;
use ring::aead::{Aad, LessSafeKey};
use ring::hmac;
use std::sync::{Mutex, PoisonError};

/// ESP header: SPI and sequence number.
const HDR: usize = 8;
/// Block encrypted to make a CBC IV: this constant, then the 64-bit sequence number.
const CBC_IV_DOMAIN: [u8; 8] = *b"ESPCBCIV";
/// Bytes of scratch for DECRYPT_FORWARD: the largest IP packet plus slack.
pub(crate) const SCRATCH_LEN: usize = 65536 + 64;

/// Which way an SA carries packets, and for inbound SAs the one operation allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Inbound(InboundMode),
    Outbound,
}

/// Keys as an SA holds them: raw, so that an SA stays far below its 500-byte budget.
/// CBC expands its AES key per packet (RustCrypto's schedule with its software fallback is
/// 960 bytes for AES-256, while expanding with AES-NI costs tens of nanoseconds next to
/// microseconds of CBC+HMAC); the AEADs' expanded keys (544 bytes in ring) live in the
/// instance's [`KeyCache`] while the SA carries traffic. The HMAC key (two hash states) is
/// boxed so that the common AEAD SA does not pay for its size.
enum EspCipher {
    Aead { key: KeyBuf<32>, salt: [u8; 4] },
    CbcOut { key: KeyBuf<32>, mac: Box<CbcMac> },
    CbcIn { key: KeyBuf<32>, mac: Box<CbcMac>, icv_len: u8 },
}

/// The HMAC key of a CBC SA: ring's expanded key for the packets, and the raw bytes, which
/// ring cannot give back, for a migration package (`trusted::migration`). Boxed with the
/// expansion, so the AEAD SAs (the common case) do not grow.
struct CbcMac {
    key: hmac::Key,
    raw: KeyBuf<MAX_INTEG_KEY>,
}

/// One direction of an ESP SA: raw keys and the few fields the transform needs.
pub(crate) struct EspSa {
    spi: u32,
    dir: Direction,
    esn: bool,
    suite: Suite,
    /// Outbound: the sequence numbers used (boxed: inbound SAs do not pay for it). Lanes
    /// share it: each locks it once per run of this SA's descriptors in a batch.
    sent: Option<Box<Mutex<SentWindow>>>,
    /// Outbound: the highest sequence number this instance may still use. `u64::MAX` until
    /// the SA is exported for migration; then the destination starts above it, so the two
    /// instances never send one (key, IV) pair twice.
    seq_ceiling: u64,
    /// Unique for the process's life: what the key cache matches, never a reusable handle.
    owner: u64,
    cipher: EspCipher,
    #[cfg(feature = "test-export")]
    pub(crate) exported: EspKeys,
}

impl Drop for EspSa {
    fn drop(&mut self) {
        match &mut self.cipher {
            // The raw key is a zeroizing KeyBuf; the cached expansion is the core's to clear.
            EspCipher::Aead { salt, .. } => zeroize::Zeroize::zeroize(salt),
            EspCipher::CbcOut { mac, .. } | EspCipher::CbcIn { mac, .. } => scrub_hmac_key(&mut mac.key),
        }
    }
}

impl EspSa {
    pub(crate) fn new(spi: u32, dir: Direction, esn: bool, suite: Suite, keys: EspKeys) -> Result<Self> {
        let cipher = match suite.integ {
            None => {
                let alg = aead_alg(suite.cipher).ok_or(Error::Internal { what: "AEAD algorithm" })?;
                // Checked once here, so that expanding it later (in a batch) cannot fail.
                let (k, s) = keys
                    .enc
                    .as_slice()
                    .split_at_checked(alg.key_len())
                    .ok_or(Error::Internal { what: "AEAD key" })?;
                let salt: [u8; 4] = s.try_into().map_err(|_| Error::Internal { what: "AEAD salt" })?;
                EspCipher::Aead { key: KeyBuf::from_slice(k)?, salt }
            }
            Some(integ) => {
                let mac = Box::new(CbcMac {
                    key: hmac::Key::new(integ_alg(integ), keys.integ.as_slice()),
                    raw: KeyBuf::from_slice(keys.integ.as_slice())?,
                });
                let icv_len = u8::try_from(integ.icv_len()).map_err(|_| Error::Internal { what: "ICV" })?;
                // Checks the key length once, at install.
                CbcEncryptor::new(keys.enc.as_slice())?;
                let key = KeyBuf::from_slice(keys.enc.as_slice())?;
                match dir {
                    Direction::Outbound => EspCipher::CbcOut { key, mac },
                    Direction::Inbound(_) => EspCipher::CbcIn { key, mac, icv_len },
                }
            }
        };
        #[cfg(not(feature = "test-export"))]
        drop(keys);
        Ok(Self {
            spi,
            dir,
            esn,
            suite,
            sent: (dir == Direction::Outbound).then(|| Box::new(Mutex::new(SentWindow::new()))),
            seq_ceiling: u64::MAX,
            owner: next_owner_id(),
            cipher,
            #[cfg(feature = "test-export")]
            exported: keys,
        })
    }

    /// Bytes held for this SA: itself, its boxed HMAC key and, outbound, its window of used
    /// sequence numbers (its share of the key cache is counted with the cache,
    /// [`KeyCache::bytes`]).
    pub(crate) fn footprint(&self) -> usize {
        let mac = match self.cipher {
            EspCipher::Aead { .. } => 0,
            EspCipher::CbcOut { .. } | EspCipher::CbcIn { .. } => core::mem::size_of::<CbcMac>(),
        };
        let sent = if self.sent.is_some() { core::mem::size_of::<Mutex<SentWindow>>() } else { 0 };
        core::mem::size_of::<Self>() + mac + sent
    }

    /// The SPI.
    pub(crate) fn spi(&self) -> u32 {
        self.spi
    }

    /// Which way the SA carries traffic (and, inbound, the one operation it allows).
    pub(crate) fn direction(&self) -> Direction {
        self.dir
    }

    /// Whether the SA uses extended sequence numbers.
    pub(crate) fn esn(&self) -> bool {
        self.esn
    }

    /// The transform.
    pub(crate) fn suite(&self) -> Suite {
        self.suite
    }

    /// Outbound: the highest sequence number used so far (0: none, or inbound).
    pub(crate) fn last_seq(&self) -> u64 {
        self.sent.as_ref().map_or(0, |w| w.lock().unwrap_or_else(PoisonError::into_inner).top())
    }

    /// Whether this SA's sending range was already handed to a migration destination.
    pub(crate) fn seq_limited(&self) -> bool {
        self.seq_ceiling != u64::MAX
    }

    /// Stops this instance from sending above `ceiling` (export for migration).
    pub(crate) fn limit_seq(&mut self, ceiling: u64) {
        self.seq_ceiling = self.seq_ceiling.min(ceiling);
    }

    /// Refuses every outbound sequence number up to `last` (import for migration).
    pub(crate) fn raise_seq_floor(&mut self, last: u64) {
        if let Some(w) = self.sent.as_mut() {
            w.get_mut().unwrap_or_else(PoisonError::into_inner).raise_floor(last);
        }
    }

    /// The raw keys as [`EspSa::new`] takes them (encryption key with the AEAD salt after
    /// it; HMAC key for CBC, empty for AEADs), for a migration package.
    pub(crate) fn raw_keys(&self) -> Result<EspKeys> {
        match &self.cipher {
            EspCipher::Aead { key, salt } => {
                let mut enc = KeyBuf::<MAX_ENC_KEY>::zeroed(key.as_slice().len() + salt.len())?;
                let (k, s) = enc.as_mut().split_at_mut(key.as_slice().len());
                k.copy_from_slice(key.as_slice());
                s.copy_from_slice(salt);
                Ok(EspKeys { enc, integ: KeyBuf::empty() })
            }
            EspCipher::CbcOut { key, mac } | EspCipher::CbcIn { key, mac, .. } => Ok(EspKeys {
                enc: KeyBuf::from_slice(key.as_slice())?,
                integ: KeyBuf::from_slice(mac.raw.as_slice())?,
            }),
        }
    }

    /// What the lanes' key caches know this SA by.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// The expanded AEAD key and the salt, from `keys` (where `slot` says) or expanded now.
    fn aead<'k>(&self, keys: &'k mut KeyCache, slot: &mut u32) -> Option<(&'k LessSafeKey, [u8; 4])> {
        let EspCipher::Aead { key, salt } = &self.cipher else { return None };
        let alg = aead_alg(self.suite.cipher)?;
        let k = keys.get(slot, self.owner, alg, key.as_slice())?;
        Some((k, *salt))
    }
}

/// Builds one direction's keys from raw material, for tests.
#[cfg(test)]
pub(crate) fn keys(enc: &[u8], integ: &[u8]) -> EspKeys {
    use super::keybuf::KeyBuf;
    EspKeys { enc: KeyBuf::from_slice(enc).unwrap(), integ: KeyBuf::from_slice(integ).unwrap() }
}

/// The low 32 bits of the sequence number, big-endian (what goes on the wire).
fn seq_lo(seq: u64) -> [u8; 4] {
    let b = seq.to_be_bytes();
    [b[4], b[5], b[6], b[7]]
}

/// The high 32 bits (authenticated with ESN, never sent).
fn seq_hi(seq: u64) -> [u8; 4] {
    let b = seq.to_be_bytes();
    [b[0], b[1], b[2], b[3]]
}

/// AAD for the AEADs (RFC 4106 §5, RFC 7634 §3): SPI || [seq_hi ||] seq_lo.
fn aead_aad(spi_and_seq_lo: &[u8], seq: u64, esn: bool) -> ([u8; 12], usize) {
    let mut a = [0u8; 12];
    let spi = spi_and_seq_lo.get(..4).unwrap_or(&[0; 4]);
    let lo = spi_and_seq_lo.get(4..8).unwrap_or(&[0; 4]);
    a[..4].copy_from_slice(spi);
    if esn {
        a[4..8].copy_from_slice(&seq_hi(seq));
        a[8..12].copy_from_slice(lo);
        (a, 12)
    } else {
        a[4..8].copy_from_slice(lo);
        (a, 8)
    }
}

/// The ICV of CBC+HMAC: HMAC(ESP header .. payload end [|| seq_hi]) truncated.
fn cbc_icv(mac: &hmac::Key, authenticated: &[u8], seq: u64, esn: bool) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(mac);
    ctx.update(authenticated);
    if esn {
        ctx.update(&seq_hi(seq));
    }
    ctx.sign()
}

/// Lengths of one packet's parts: (IV, payload, ICV), or `BadLength`.
fn split_lengths(
    suite: &Suite,
    len: usize,
    encrypt: bool,
) -> core::result::Result<(usize, usize, usize), EspStatus> {
    let iv = suite.cipher.iv_len();
    let icv = suite.icv_len();
    let payload = len.checked_sub(HDR + iv + icv).ok_or(EspStatus::BadLength)?;
    let align = suite.esp_payload_align();
    // The trailer alone is 2 bytes; CBC needs whole blocks; we send 4-byte aligned (RFC 4303
    // §2.4) and accept any length that holds a trailer for the AEADs.
    let ok = if suite.cipher.is_aead() {
        payload >= 2 && (!encrypt || payload % align == 0)
    } else {
        payload >= BLOCK && payload % BLOCK == 0
    };
    ok.then_some((iv, payload, icv)).ok_or(EspStatus::BadLength)
}

/// Takes number `seq` of `sa` out of its window `sent`: `Ok` once per number; from then on
/// it counts as used whatever becomes of the packet.
fn claim(sa: &EspSa, sent: &mut SentWindow, seq: u64) -> EspStatus {
    if (!sa.esn && seq > u64::from(u32::MAX)) || sent.top() == u64::MAX {
        return EspStatus::SeqExhausted;
    }
    if sent.is_stale(seq) {
        return EspStatus::SeqStale;
    }
    if !sent.may_use(seq) {
        return EspStatus::SeqReused;
    }
    // Past the range this instance kept when its state was exported: the migration
    // destination sends from here on.
    if seq > sa.seq_ceiling {
        return EspStatus::SeqExhausted;
    }
    sent.mark(seq);
    EspStatus::Ok
}

/// Takes the numbers of a run of one outbound SA's ENCRYPT descriptors from its window
/// before any packet is sealed, under one lock, so that the window is held for a few
/// comparisons, never across the cryptography, and lanes on one SA seal at once. Only
/// descriptors whose `status` is `Ok` (region and lengths checked: a number is used up only
/// by a packet that will be sealed) claim one; their status becomes the claim's outcome.
fn claim_run(sa: &EspSa, run: &[EspDescriptor], status: &mut [EspStatus]) {
    let refuse = |status: &mut [EspStatus]| {
        status.iter_mut().filter(|s| **s == EspStatus::Ok).for_each(|s| *s = EspStatus::NotProcessed);
    };
    let Some(window) = sa.sent.as_deref() else { return refuse(status) };
    // A lane that panicked holding the window may have left it half-updated: refuse rather
    // than risk a number twice.
    let Ok(mut sent) = window.lock() else { return refuse(status) };
    for (d, s) in run.iter().zip(status.iter_mut()) {
        if *s == EspStatus::Ok {
            *s = claim(sa, &mut sent, d.seq);
        }
    }
}

/// Encrypts `pkt` in place as number `seq`, already claimed; `aead` is the SA's expanded
/// key and salt for the AEAD suites, and `iv_len`/`icv_len` the suite's, all looked up once
/// per run.
fn encrypt_one(
    sa: &EspSa,
    aead: Option<(&LessSafeKey, [u8; 4])>,
    (iv_len, icv_len): (usize, usize),
    pkt: &mut [u8],
    seq: u64,
) -> EspStatus {
    let Some(payload) = pkt.len().checked_sub(HDR + iv_len + icv_len) else {
        return EspStatus::BadLength;
    };
    let Some((hdr, rest)) = pkt.split_first_chunk_mut::<HDR>() else {
        return EspStatus::BadLength;
    };
    hdr[..4].copy_from_slice(&sa.spi.to_be_bytes());
    hdr[4..].copy_from_slice(&seq_lo(seq));
    let (ivb, rest) = rest.split_at_mut(iv_len);
    let (body, icv) = rest.split_at_mut(payload);
    let esn = sa.esn;
    let ok = match &sa.cipher {
        EspCipher::Aead { .. } => {
            let Some((key, salt)) = aead else {
                return EspStatus::NotProcessed;
            };
            let iv = seq.to_be_bytes();
            ivb.copy_from_slice(&iv);
            let (aad, n) = aead_aad(hdr, seq, esn);
            match key.seal_in_place_separate_tag(
                nonce(&salt, &iv),
                Aad::from(aad.get(..n).unwrap_or(&[])),
                body,
            ) {
                Ok(tag) => {
                    icv.copy_from_slice(tag.as_ref());
                    true
                }
                Err(_) => false,
            }
        }
        EspCipher::CbcOut { key, mac } => {
            let Ok(enc) = CbcEncryptor::new(key.as_slice()) else {
                return EspStatus::WrongDirection;
            };
            let mut iv = [0u8; BLOCK];
            iv[..8].copy_from_slice(&CBC_IV_DOMAIN);
            iv[8..].copy_from_slice(&seq.to_be_bytes());
            enc.encrypt_block(&mut iv);
            ivb.copy_from_slice(&iv);
            if enc.encrypt(&iv, body).is_err() {
                false
            } else {
                let covered = HDR + iv_len + payload;
                let tag = cbc_icv(&mac.key, pkt.get(..covered).unwrap_or(&[]), seq, sa.esn);
                let (_, icv) = pkt.split_at_mut(covered);
                icv.copy_from_slice(tag.as_ref().get(..icv_len).unwrap_or(&[]));
                true
            }
        }
        // Direction was checked for the run.
        EspCipher::CbcIn { .. } => false,
    };
    if ok {
        EspStatus::Ok
    } else {
        EspStatus::WrongDirection
    }
}

/// A run of ENCRYPT descriptors of the outbound SA `sa`: each packet's region and lengths
/// checked, then the numbers of those that pass claimed (`claim_run`), then those sealed.
fn encrypt_run(
    sa: &EspSa,
    (keys, slot): (&mut KeyCache, &mut u32),
    packets: &mut [u8],
    run: &[EspDescriptor],
    status: &mut [EspStatus],
) {
    for (d, s) in run.iter().zip(status.iter_mut()) {
        *s = match region(packets.len(), d) {
            Some(r) => split_lengths(&sa.suite, r.len(), true).map_or_else(|e| e, |_| EspStatus::Ok),
            None => EspStatus::OutOfBounds,
        };
    }
    claim_run(sa, run, status);
    if !status.contains(&EspStatus::Ok) {
        // Nothing to seal: no key to expand.
        return;
    }
    let aead = sa.aead(keys, slot);
    let lens = (sa.suite.cipher.iv_len(), sa.suite.icv_len());
    for (d, s) in run.iter().zip(status.iter_mut()) {
        if *s != EspStatus::Ok {
            continue;
        }
        *s = match region(packets.len(), d).and_then(|r| packets.get_mut(r)) {
            Some(pkt) => encrypt_one(sa, aead, lens, pkt, d.seq),
            None => EspStatus::OutOfBounds,
        };
    }
}

/// Header checks common to both decrypt modes.
fn check_inbound_header(
    sa: &EspSa,
    pkt: &[u8],
    seq: u64,
) -> core::result::Result<(usize, usize, usize), EspStatus> {
    let lens = split_lengths(&sa.suite, pkt.len(), false)?;
    if pkt.get(..4) != Some(&sa.spi.to_be_bytes()[..]) {
        return Err(EspStatus::SpiMismatch);
    }
    if (!sa.esn && seq > u64::from(u32::MAX)) || pkt.get(4..8) != Some(&seq_lo(seq)[..]) {
        return Err(EspStatus::SeqMismatch);
    }
    Ok(lens)
}

/// Verifies and decrypts `pkt` in place.
///
/// `pkt` may lie in memory the gateway shares and can rewrite at any moment, so every
/// transform reads each byte once: the AEAD opens in one pass, and CBC+HMAC verifies and
/// decrypts a private copy in `scratch` and only then writes the plaintext back. Checking
/// the ICV over `pkt` and decrypting `pkt` again would let a racing gateway swap in
/// unauthenticated ciphertext between the two reads (a double fetch).
pub(crate) fn decrypt_one(
    sa: &EspSa,
    keys: (&mut KeyCache, &mut u32),
    pkt: &mut [u8],
    seq: u64,
    scratch: &mut [u8],
) -> EspStatus {
    let (iv_len, payload, _) = match check_inbound_header(sa, pkt, seq) {
        Ok(l) => l,
        Err(s) => return s,
    };
    let esn = sa.esn;
    match &sa.cipher {
        EspCipher::Aead { .. } => {
            let Some((key, salt)) = sa.aead(keys.0, keys.1) else {
                return EspStatus::NotProcessed;
            };
            let (hdr, rest) = pkt.split_at_mut(HDR);
            let (ivb, body) = rest.split_at_mut(iv_len);
            let mut iv = [0u8; 8];
            iv.copy_from_slice(ivb);
            let (aad, n) = aead_aad(hdr, seq, esn);
            // ring authenticates and decrypts in one pass and zeroes the output on failure.
            match key.open_in_place(nonce(&salt, &iv), Aad::from(aad.get(..n).unwrap_or(&[])), body) {
                Ok(_) => EspStatus::Ok,
                Err(_) => EspStatus::IcvMismatch,
            }
        }
        EspCipher::CbcIn { key, mac, icv_len } => {
            let Some(copy) = scratch.get_mut(..pkt.len()) else {
                return EspStatus::BadLength;
            };
            copy.copy_from_slice(pkt);
            let status = cbc_open_private(
                key.as_slice(),
                &mac.key,
                usize::from(*icv_len),
                copy,
                iv_len,
                payload,
                seq,
                esn,
            );
            let body = HDR + iv_len..HDR + iv_len + payload;
            if status == EspStatus::Ok {
                if let (Some(dst), Some(src)) = (pkt.get_mut(body.clone()), copy.get(body)) {
                    dst.copy_from_slice(src);
                }
            }
            zeroize::Zeroize::zeroize(copy);
            status
        }
        EspCipher::CbcOut { .. } => EspStatus::WrongDirection,
    }
}

/// Verifies the ICV of a private packet copy and decrypts its payload in place.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
fn cbc_open_private(
    key: &[u8],
    mac: &hmac::Key,
    icv_len: usize,
    copy: &mut [u8],
    iv_len: usize,
    payload: usize,
    seq: u64,
    esn: bool,
) -> EspStatus {
    let covered = HDR + iv_len + payload;
    let tag = cbc_icv(mac, copy.get(..covered).unwrap_or(&[]), seq, esn);
    if !ct_eq(tag.as_ref().get(..icv_len).unwrap_or(&[]), copy.get(covered..).unwrap_or(&[])) {
        return EspStatus::IcvMismatch;
    }
    let Ok(dec) = CbcDecryptor::new(key) else {
        return EspStatus::BadLength;
    };
    let mut iv = [0u8; BLOCK];
    iv.copy_from_slice(copy.get(HDR..HDR + BLOCK).unwrap_or(&[0; BLOCK]));
    match copy.get_mut(HDR + iv_len..covered).map(|body| dec.decrypt(&iv, body)) {
        Some(Ok(())) => EspStatus::Ok,
        _ => EspStatus::BadLength,
    }
}

/// Verifies `pkt`, decrypts what forwarding needs into `scratch` (never into `pkt`), and
/// returns the inner packet's destination address (4 or 16 bytes) in `dst`.
fn decrypt_private(
    sa: &EspSa,
    keys: (&mut KeyCache, &mut u32),
    pkt: &[u8],
    seq: u64,
    scratch: &mut [u8],
    dst: &mut [u8; 16],
) -> core::result::Result<usize, EspStatus> {
    let (iv_len, payload, _) = check_inbound_header(sa, pkt, seq)?;
    let ct_start = HDR + iv_len;
    // (first bytes of the inner packet, last byte of the payload = Next Header)
    let esn = sa.esn;
    let (first, next_header) = match &sa.cipher {
        EspCipher::Aead { .. } => {
            let (key, salt) = sa.aead(keys.0, keys.1).ok_or(EspStatus::NotProcessed)?;
            let body = pkt.get(ct_start..).ok_or(EspStatus::BadLength)?;
            let work = scratch.get_mut(..body.len()).ok_or(EspStatus::BadLength)?;
            work.copy_from_slice(body);
            let mut iv = [0u8; 8];
            iv.copy_from_slice(pkt.get(HDR..ct_start).ok_or(EspStatus::BadLength)?);
            let (aad, n) = aead_aad(pkt, seq, esn);
            let plain = key
                .open_in_place(nonce(&salt, &iv), Aad::from(aad.get(..n).unwrap_or(&[])), work)
                .map_err(|_| EspStatus::IcvMismatch)?;
            let nh = *plain.last().ok_or(EspStatus::BadLength)?;
            (scratch.get(..payload).ok_or(EspStatus::BadLength)?, nh)
        }
        EspCipher::CbcIn { key, mac, icv_len } => {
            // Single fetch (see `decrypt_one`): copy, then verify and decrypt only the copy.
            let copy = scratch.get_mut(..pkt.len()).ok_or(EspStatus::BadLength)?;
            copy.copy_from_slice(pkt);
            let covered = ct_start + payload;
            let tag = cbc_icv(&mac.key, copy.get(..covered).ok_or(EspStatus::BadLength)?, seq, esn);
            let icv_len = usize::from(*icv_len);
            if !ct_eq(tag.as_ref().get(..icv_len).unwrap_or(&[]), copy.get(covered..).unwrap_or(&[])) {
                return Err(EspStatus::IcvMismatch);
            }
            let dec = CbcDecryptor::new(key.as_slice()).map_err(|_| EspStatus::BadLength)?;
            // CBC decrypts block-wise: the last block (for Next Header) with the block before
            // it as IV, then the first three blocks (enough for an IPv6 destination) in place.
            let last_start = covered.checked_sub(BLOCK).ok_or(EspStatus::BadLength)?;
            let mut prev = [0u8; BLOCK];
            let prev_start = last_start.checked_sub(BLOCK).ok_or(EspStatus::BadLength)?;
            prev.copy_from_slice(copy.get(prev_start..last_start).ok_or(EspStatus::BadLength)?);
            let mut last = [0u8; BLOCK];
            last.copy_from_slice(copy.get(last_start..covered).ok_or(EspStatus::BadLength)?);
            dec.decrypt(&prev, &mut last).map_err(|_| EspStatus::BadLength)?;
            let nh = last[BLOCK - 1];
            zeroize::Zeroize::zeroize(&mut last);
            let mut iv = [0u8; BLOCK];
            iv.copy_from_slice(copy.get(HDR..ct_start).ok_or(EspStatus::BadLength)?);
            let head = payload.min(3 * BLOCK);
            let head_buf = copy.get_mut(ct_start..ct_start + head).ok_or(EspStatus::BadLength)?;
            dec.decrypt(&iv, head_buf).map_err(|_| EspStatus::BadLength)?;
            (copy.get(ct_start..ct_start + head).ok_or(EspStatus::BadLength)?, nh)
        }
        EspCipher::CbcOut { .. } => return Err(EspStatus::WrongDirection),
    };
    let version = first.first().map(|b| b >> 4);
    let (range, want_nh) = match version {
        Some(4) => (16..20, 4),
        Some(6) => (24..40, 41),
        _ => return Err(EspStatus::BadInnerHeader),
    };
    if next_header != want_nh {
        return Err(EspStatus::BadInnerHeader);
    }
    let addr = first.get(range).ok_or(EspStatus::BadInnerHeader)?;
    dst.get_mut(..addr.len()).ok_or(EspStatus::BadInnerHeader)?.copy_from_slice(addr);
    Ok(addr.len())
}

/// RFC 1624 eqn. 3: the checksum after 16-bit-aligned `old` bytes became `new`.
fn checksum_replace(sum: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut acc = u32::from(!sum);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += u32::from(!u16::from_be_bytes([o[0], o[1]]));
        acc += u32::from(u16::from_be_bytes([n[0], n[1]]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    // The loop leaves acc <= 0xffff.
    !u16::try_from(acc).unwrap_or(0xffff)
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn write_u16(b: &mut [u8], at: usize, v: u16) -> Option<()> {
    b.get_mut(at..at + 2)?.copy_from_slice(&v.to_be_bytes());
    Some(())
}

/// Rewrites the outer header at `outer` (which must end exactly where ESP, or UDP then
/// ESP, begins) with destination `dst`, fixing checksums incrementally.
fn rewrite_outer(outer: &mut [u8], dst: &[u8]) -> core::result::Result<(), EspStatus> {
    let bad = EspStatus::BadOuterHeader;
    let version = outer.first().map(|b| b >> 4).ok_or(bad)?;
    let (dst_at, proto, hdr_len) = match version {
        4 => {
            let ihl = usize::from(outer.first().ok_or(bad)? & 0x0f) * 4;
            (16, *outer.get(9).ok_or(bad)?, ihl)
        }
        6 => (24, *outer.get(6).ok_or(bad)?, 40),
        _ => return Err(bad),
    };
    if (version == 4) != (dst.len() == 4) {
        return Err(EspStatus::AddressFamilyMismatch);
    }
    let udp = match (proto, outer.len().checked_sub(hdr_len)) {
        (50, Some(0)) => None,
        (17, Some(8)) => Some(hdr_len),
        _ => return Err(bad),
    };
    if hdr_len < 20 {
        return Err(bad);
    }
    let mut old = [0u8; 16];
    let old = old.get_mut(..dst.len()).ok_or(bad)?;
    old.copy_from_slice(outer.get(dst_at..dst_at + dst.len()).ok_or(bad)?);
    if version == 4 {
        let sum = read_u16(outer, 10).ok_or(bad)?;
        write_u16(outer, 10, checksum_replace(sum, old, dst)).ok_or(bad)?;
    }
    if let Some(u) = udp {
        let sum = read_u16(outer, u + 6).ok_or(bad)?;
        if sum != 0 {
            // The pseudo-header includes the destination (RFC 768, RFC 8200 §8.1).
            let new = checksum_replace(sum, old, dst);
            write_u16(outer, u + 6, if new == 0 { 0xffff } else { new }).ok_or(bad)?;
        }
    }
    outer.get_mut(dst_at..dst_at + dst.len()).ok_or(bad)?.copy_from_slice(dst);
    Ok(())
}

fn forward_one(
    sa: &EspSa,
    keys: (&mut KeyCache, &mut u32),
    packets: &mut [u8],
    desc: &EspDescriptor,
    region: core::ops::Range<usize>,
    scratch: &mut [u8],
) -> EspStatus {
    let outer_start = desc.outer_offset as usize;
    if outer_start >= region.start {
        return EspStatus::BadOuterHeader;
    }
    let mut dst = [0u8; 16];
    let r = packets
        .get(region.clone())
        .ok_or(EspStatus::OutOfBounds)
        .and_then(|pkt| decrypt_private(sa, keys, pkt, desc.seq, scratch, &mut dst));
    // Whatever happened, no plaintext stays behind in scratch.
    let used = (region.len() + BLOCK).min(scratch.len());
    zeroize::Zeroize::zeroize(scratch.get_mut(..used).unwrap_or(&mut []));
    let n = match r {
        Ok(n) => n,
        Err(s) => return s,
    };
    let Some(outer) = packets.get_mut(outer_start..region.start) else {
        return EspStatus::OutOfBounds;
    };
    match rewrite_outer(outer, dst.get(..n).unwrap_or(&[])) {
        Ok(()) => EspStatus::Ok,
        Err(s) => s,
    }
}

fn status_of(e: &Error) -> EspStatus {
    match e {
        Error::ForeignHandle { .. } => EspStatus::ForeignSa,
        _ => EspStatus::UnknownSa,
    }
}

/// Where descriptor `d`'s packet lies in an area of `area` bytes, if it lies inside.
fn region(area: usize, d: &EspDescriptor) -> Option<core::ops::Range<usize>> {
    let start = d.offset as usize;
    start.checked_add(d.len as usize).filter(|&e| e <= area).map(|end| start..end)
}

/// The SA of a run of `d`'s SA and opcode, if it exists and allows that opcode; else the
/// status of every descriptor of the run.
fn resolve<'t>(table: &'t Table<EspSa>, d: &EspDescriptor) -> core::result::Result<&'t EspSa, EspStatus> {
    if ![EspOpcode::ENCRYPT, EspOpcode::DECRYPT, EspOpcode::DECRYPT_FORWARD].contains(&d.opcode) {
        return Err(EspStatus::UnknownOpcode);
    }
    let sa = table.get(d.sa.0).map_err(|e| status_of(&e))?;
    let allowed = match sa.dir {
        Direction::Outbound => EspOpcode::ENCRYPT,
        Direction::Inbound(InboundMode::Decrypt) => EspOpcode::DECRYPT,
        Direction::Inbound(InboundMode::Forward) => EspOpcode::DECRYPT_FORWARD,
    };
    if d.opcode != allowed {
        let inbound_op = d.opcode != EspOpcode::ENCRYPT;
        return Err(if inbound_op && matches!(sa.dir, Direction::Inbound(_)) {
            EspStatus::ModeNotAllowed
        } else {
            EspStatus::WrongDirection
        });
    }
    Ok(sa)
}

/// One run: consecutive descriptors with one SA handle and one opcode.
fn run_of(
    table: &Table<EspSa>,
    lane: &mut Lane,
    packets: &mut [u8],
    run: &[EspDescriptor],
    status: &mut [EspStatus],
) {
    let Some(first) = run.first() else { return };
    let sa = match resolve(table, first) {
        Ok(sa) => sa,
        Err(s) => return status.fill(s),
    };
    let (keys, slot, scratch) = lane.parts(first.sa.0);
    if first.opcode == EspOpcode::ENCRYPT {
        return encrypt_run(sa, (keys, slot), packets, run, status);
    }
    for (d, s) in run.iter().zip(status.iter_mut()) {
        let Some(r) = region(packets.len(), d) else {
            *s = EspStatus::OutOfBounds;
            continue;
        };
        *s = if first.opcode == EspOpcode::DECRYPT {
            match packets.get_mut(r) {
                Some(pkt) => decrypt_one(sa, (&mut *keys, &mut *slot), pkt, d.seq, scratch),
                None => EspStatus::OutOfBounds,
            }
        } else {
            forward_one(sa, (&mut *keys, &mut *slot), packets, d, r, scratch)
        };
    }
}

/// Runs one batch on `lane`; the caller has checked the batch's shape.
///
/// A gateway worker hands an SA's packets over together, so the batch goes in runs of
/// consecutive descriptors with one SA handle and one opcode: a run looks its SA up, checks
/// the direction and fetches the expanded key once, and per packet only its region,
/// lengths, number and transform are left.
pub(crate) fn batch(
    table: &Table<EspSa>,
    lane: &mut Lane,
    packets: &mut [u8],
    descriptors: &[EspDescriptor],
    status: &mut [EspStatus],
) -> BatchSummary {
    let mut summary = BatchSummary::default();
    let (mut ds, mut ss) = (descriptors, status);
    while let Some(first) = ds.first() {
        let n = ds.iter().take_while(|d| d.sa == first.sa && d.opcode == first.opcode).count();
        let (Some((run, ds_rest)), Some((st, ss_rest))) =
            (ds.split_at_checked(n), core::mem::take(&mut ss).split_at_mut_checked(n))
        else {
            break;
        };
        run_of(table, lane, packets, run, st);
        for s in st.iter() {
            lane.counters.record_status(*s);
            if *s == EspStatus::Ok {
                summary.ok += 1;
            } else {
                summary.failed += 1;
            }
        }
        (ds, ss) = (ds_rest, ss_rest);
    }
    summary
}

/// Shape checks of a batch call.
pub(crate) fn check_batch(descriptors: usize, status: usize, max: usize) -> Result<()> {
    if descriptors > max {
        return Err(Error::BatchTooLarge { descriptors, max });
    }
    if status != descriptors {
        return Err(Error::StatusLengthMismatch { descriptors, status });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use enclave_api::alg::{Cipher, Integ};

    #[test]
    fn incremental_checksum_matches_full_recompute() {
        fn full(h: &[u8]) -> u16 {
            let mut s: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            !u16::try_from(s).unwrap()
        }
        let mut h = [0x45, 0, 0, 0x54, 0, 0, 0x40, 0, 0x40, 0x32, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2];
        let c = full(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let new = [198, 19, 7, 9];
        let updated = checksum_replace(c, &h[16..20], &new);
        h[16..20].copy_from_slice(&new);
        h[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(updated, full(&h));
    }

    #[test]
    fn payload_lengths_follow_the_transform() {
        let gcm = Suite::aead(Cipher::AesGcm16_128);
        assert_eq!(split_lengths(&gcm, 8 + 8 + 4 + 16, true), Ok((8, 4, 16)));
        assert_eq!(split_lengths(&gcm, 8 + 8 + 3 + 16, true), Err(EspStatus::BadLength));
        assert_eq!(split_lengths(&gcm, 8 + 8 + 3 + 16, false), Ok((8, 3, 16)));
        assert_eq!(split_lengths(&gcm, 10, false), Err(EspStatus::BadLength));
        let cbc = Suite::cbc(Cipher::AesCbc256, Integ::HmacSha384_192);
        assert_eq!(split_lengths(&cbc, 8 + 16 + 32 + 24, false), Ok((16, 32, 24)));
        assert_eq!(split_lengths(&cbc, 8 + 16 + 31 + 24, false), Err(EspStatus::BadLength));
    }

    #[test]
    fn esp_sa_state_is_compact() {
        // Goal: <= 500 bytes per directional ESP SA (0.5 MB for 1000) with the table's slot
        // and the SA's share of a full key cache. Pinned so growth is noticed.
        let size = core::mem::size_of::<EspSa>();
        eprintln!(
            "EspSa {size} bytes (ring AEAD key {} when cached, HMAC key {} boxed for CBC)",
            core::mem::size_of::<LessSafeKey>(),
            core::mem::size_of::<hmac::Key>()
        );
        // `test-export` keeps a copy of the raw keys in the SA for cross-checks.
        #[cfg(feature = "test-export")]
        let size = size - core::mem::size_of::<EspKeys>();
        assert!(size <= 96, "EspSa is {size} bytes");
        // An outbound SA also holds its window of used sequence numbers.
        let out = size + core::mem::size_of::<super::super::sent::SentWindow>();
        assert!(out <= 360, "an outbound EspSa with its window is {out} bytes");
        let cbc = size + core::mem::size_of::<CbcMac>();
        assert!(cbc <= 400, "a CBC EspSa with its HMAC key is {cbc} bytes");
    }
}
