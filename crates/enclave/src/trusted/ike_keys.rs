//! IKE SA key derivation (RFC 7296 §2.14, §2.18), child SA KEYMAT (§2.17), and the IKE SA
//! state kept in trusted memory.

use super::dh::SharedSecret;
use super::keybuf::KeyBuf;
use super::prf::{self, MAX_PRF_LEN};
use enclave_api::alg::{Cipher, Integ, Prf, Role, Suite};
use enclave_api::error::{Error, Result};
use enclave_api::ike::{ChildSaParams, IkeSaParams};
use zeroize::Zeroizing;

/// Largest SK_e (AES-256 / ChaCha20 key + 4-byte salt).
pub(crate) const MAX_ENC_KEY: usize = 36;
/// Largest SK_a (HMAC-SHA-512 key).
pub(crate) const MAX_INTEG_KEY: usize = 64;
/// Longest Nonce Data (RFC 7296 §3.9).
pub(crate) const MAX_NONCE: usize = 256;
/// Shortest Nonce Data.
pub(crate) const MIN_NONCE: usize = 16;

/// SK_pi and SK_pr: needed for AUTH only, cleared by clear-and-seal.
pub(crate) struct AuthKeys {
    pub(crate) i: KeyBuf<MAX_PRF_LEN>,
    pub(crate) r: KeyBuf<MAX_PRF_LEN>,
}

/// An IKE SA's keys. The always-resident part is inline; SK_d and SK_p* are boxed so that
/// clear-and-seal gives their memory back, as EnclaveVPN's EPC saving intends.
pub(crate) struct IkeSa {
    pub(crate) role: Role,
    pub(crate) prf: Prf,
    pub(crate) suite: Suite,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    pub(crate) sk_ai: KeyBuf<MAX_INTEG_KEY>,
    pub(crate) sk_ar: KeyBuf<MAX_INTEG_KEY>,
    pub(crate) sk_ei: KeyBuf<MAX_ENC_KEY>,
    pub(crate) sk_er: KeyBuf<MAX_ENC_KEY>,
    /// `None` once sealed (see `sealed_counter`).
    pub(crate) sk_d: Option<Box<KeyBuf<MAX_PRF_LEN>>>,
    /// `None` once cleared, and from the start for rekeyed SAs.
    pub(crate) sk_p: Option<Box<AuthKeys>>,
    /// The counter of the latest sealed blob of SK_d, if sealed.
    pub(crate) sealed_counter: Option<u64>,
    /// Next explicit IV for AEAD SK payloads we send; never repeats under SK_e.
    pub(crate) next_iv: u64,
    /// The digest ([`nonce_pair`]) of IKE_SA_INIT's Ni and Nr while the child SA that
    /// IKE_AUTH creates from them (RFC 7296 §2.17) is still to come: that one derivation
    /// may use nonces already spent on this SA's own; taken by it, and gone at
    /// clear-and-seal.
    pub(crate) first_child: Option<Box<[u8; 32]>>,
    /// What AUTH may cover (see `transcript`): set when the SA is made by IKE_SA_INIT,
    /// gone at clear-and-seal.
    pub(crate) transcript: Option<Box<super::transcript::Transcript>>,
    /// The peer's AUTH verified here, or the SA descends from one whose did (a rekey, a
    /// sealed state, an import of one): what child SAs, rekeys and clear-and-seal require,
    /// so no key derives from an exchange with a peer that never proved who it is.
    pub(crate) authenticated: bool,
    /// Our AUTH was computed: SK_p signs once per IKE SA, so a caller gets no second
    /// signature (with another ID, say) for one exchange.
    pub(crate) signed: bool,
}

/// SHA-256 of `len(Ni) || Ni || Nr`: which nonce pair a derivation names.
pub(crate) fn nonce_pair(nonce_i: &[u8], nonce_r: &[u8]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&u16::try_from(nonce_i.len()).unwrap_or(u16::MAX).to_be_bytes());
    ctx.update(nonce_i);
    ctx.update(nonce_r);
    let mut d = [0u8; 32];
    d.copy_from_slice(ctx.finish().as_ref());
    d
}

impl IkeSa {
    /// Bytes held for this SA: the entry plus its boxed parts.
    pub(crate) fn footprint(&self) -> usize {
        core::mem::size_of::<Self>()
            + self.sk_d.as_ref().map_or(0, |_| core::mem::size_of::<KeyBuf<MAX_PRF_LEN>>())
            + self.sk_p.as_ref().map_or(0, |_| core::mem::size_of::<AuthKeys>())
            + self.first_child.as_ref().map_or(0, |_| 32)
            + self.transcript.as_ref().map_or(0, |_| core::mem::size_of::<super::transcript::Transcript>())
    }

    /// The keys protecting what we send (outbound) or receive.
    pub(crate) fn sk_keys(&self, outbound: bool) -> (&[u8], &[u8]) {
        let we_are_i = self.role == Role::Initiator;
        if we_are_i == outbound {
            (self.sk_ei.as_slice(), self.sk_ai.as_slice())
        } else {
            (self.sk_er.as_slice(), self.sk_ar.as_slice())
        }
    }
}

/// Layout of a sealed IKE SA state body (inside the AEAD; the SPIs and PRF are in the
/// authenticated header): role, cipher ID, key bits, integ ID, SK_d's seal counter, then
/// SK_ai, SK_ar, SK_ei, SK_er, each with a one-byte length.
const STATE_FIXED: usize = 1 + 2 + 2 + 2 + 8;

impl IkeSa {
    /// The body of a state blob: only for a cleared-and-sealed SA (SK_p* gone, SK_d sealed),
    /// so a restored SA can never authenticate again and SK_d stays under its own counter.
    pub(crate) fn state_body(&self) -> Result<Zeroizing<Vec<u8>>> {
        let counter = match (&self.sk_p, &self.sk_d, self.sealed_counter) {
            (None, None, Some(c)) => c,
            _ => return Err(Error::NotSealed),
        };
        let keys =
            [&self.sk_ai.as_slice(), &self.sk_ar.as_slice(), &self.sk_ei.as_slice(), &self.sk_er.as_slice()];
        let mut b = Zeroizing::new(Vec::with_capacity(STATE_FIXED + 4 + 2 * MAX_INTEG_KEY + 2 * MAX_ENC_KEY));
        b.push(u8::from(self.role == Role::Responder));
        b.extend_from_slice(&self.suite.cipher.id().to_be_bytes());
        b.extend_from_slice(&cipher_key_bits(self.suite.cipher).to_be_bytes());
        b.extend_from_slice(&self.suite.integ.map_or(0, |i| i.id()).to_be_bytes());
        b.extend_from_slice(&counter.to_be_bytes());
        for k in keys {
            b.push(u8::try_from(k.len()).map_err(|_| Error::Internal { what: "state key length" })?);
            b.extend_from_slice(k);
        }
        Ok(b)
    }

    /// Rebuilds an SA from an authenticated state body. `next_iv` starts at a random point
    /// (top bit clear): the blob may be restored more than once and the SA may have sent
    /// messages after sealing, so a counter from the blob could repeat an AEAD IV.
    pub(crate) fn from_state(prf: Prf, spi_i: u64, spi_r: u64, body: &[u8], next_iv: u64) -> Result<Self> {
        let bad = Error::SealedBlob { reason: enclave_api::error::BlobRejection::Malformed };
        let (fixed, mut rest) = body.split_at_checked(STATE_FIXED).ok_or(bad.clone())?;
        let role = match fixed[0] {
            0 => Role::Initiator,
            1 => Role::Responder,
            _ => return Err(bad),
        };
        let cipher = Cipher::from_id(
            u16::from_be_bytes([fixed[1], fixed[2]]),
            u16::from_be_bytes([fixed[3], fixed[4]]),
        )
        .ok_or(bad.clone())?;
        let integ = match u16::from_be_bytes([fixed[5], fixed[6]]) {
            0 => None,
            id => Some(Integ::from_id(id).ok_or(bad.clone())?),
        };
        let suite = Suite { cipher, integ };
        check_suite(&suite)?;
        let mut c = [0u8; 8];
        c.copy_from_slice(&fixed[7..15]);
        let counter = u64::from_be_bytes(c);
        let mut take = |expect: usize| -> Result<&[u8]> {
            let (len, tail) = rest.split_first().ok_or(bad.clone())?;
            let (k, tail) = tail.split_at_checked(usize::from(*len)).ok_or(bad.clone())?;
            rest = tail;
            if k.len() == expect {
                Ok(k)
            } else {
                Err(bad.clone())
            }
        };
        let (alen, elen) = (suite.integ_key_len(), cipher.keymat_len());
        let sk_ai = KeyBuf::from_slice(take(alen)?)?;
        let sk_ar = KeyBuf::from_slice(take(alen)?)?;
        let sk_ei = KeyBuf::from_slice(take(elen)?)?;
        let sk_er = KeyBuf::from_slice(take(elen)?)?;
        if !rest.is_empty() {
            return Err(bad);
        }
        Ok(Self {
            role,
            prf,
            suite,
            spi_i,
            spi_r,
            sk_ai,
            sk_ar,
            sk_ei,
            sk_er,
            sk_d: None,
            sk_p: None,
            sealed_counter: Some(counter),
            next_iv: next_iv & (u64::MAX >> 1),
            first_child: None,
            transcript: None,
            // Only clear-and-seal makes a state worth sealing, and it needs an
            // authenticated peer.
            authenticated: true,
            signed: false,
        })
    }
}

/// The Key Length attribute value (bits) of a cipher, 0 where there is none.
pub(crate) fn cipher_key_bits(c: Cipher) -> u16 {
    match c {
        Cipher::AesCbc128 | Cipher::AesGcm16_128 => 128,
        Cipher::AesCbc256 | Cipher::AesGcm16_256 => 256,
        Cipher::ChaCha20Poly1305 => 0,
    }
}

pub(crate) fn check_nonce(what: &'static str, n: &[u8]) -> Result<()> {
    if (MIN_NONCE..=MAX_NONCE).contains(&n.len()) {
        Ok(())
    } else {
        Err(Error::BadLength { what, len: n.len(), why: "Nonce Data must be 16..=256 bytes" })
    }
}

pub(crate) fn check_suite(suite: &Suite) -> Result<()> {
    if suite.is_consistent() {
        Ok(())
    } else {
        Err(Error::InconsistentSuite { cipher: suite.cipher.id(), integ: suite.integ.map_or(0, |i| i.id()) })
    }
}

/// Where SKEYSEED comes from.
pub(crate) enum SkeyseedSource<'a> {
    /// IKE_SA_INIT: SKEYSEED = prf(Ni | Nr, g^ir).
    Initial,
    /// Rekey: SKEYSEED = prf_old(SK_d_old, g^ir | Ni | Nr [| SK(1) | ... | SK(n)]), the
    /// tail RFC 9370's additional key exchanges (§2.2.4), in order.
    Rekey { old_prf: Prf, old_sk_d: &'a [u8], more: &'a [SharedSecret] },
    /// An additional key exchange of IKE_SA_INIT (RFC 9370 §2.2.2): SKEYSEED(n) =
    /// prf(SK_d(n-1), SK(n) | Ni | Nr); the SA still authenticates, so SK_p* stay.
    Intermediate { sk_d: &'a [u8] },
}

/// Derives a new IKE SA from g^ir. `keep_auth_keys` is false for rekeyed SAs.
pub(crate) fn derive_ike_sa(
    source: SkeyseedSource<'_>,
    g_ir: &SharedSecret,
    p: &IkeSaParams<'_>,
) -> Result<IkeSa> {
    check_nonce("Ni", p.nonce_i)?;
    check_nonce("Nr", p.nonce_r)?;
    check_suite(&p.suite)?;
    let mut skeyseed = Zeroizing::new([0u8; MAX_PRF_LEN]);
    let keep_auth_keys = !matches!(source, SkeyseedSource::Rekey { .. });
    let seed_len = match source {
        SkeyseedSource::Initial => {
            let mut key = Zeroizing::new([0u8; 2 * MAX_NONCE]);
            let klen = p.nonce_i.len() + p.nonce_r.len();
            key[..p.nonce_i.len()].copy_from_slice(p.nonce_i);
            key[p.nonce_i.len()..klen].copy_from_slice(p.nonce_r);
            prf::prf(p.prf, &key[..klen], &[g_ir.as_slice()], &mut skeyseed[..])?
        }
        SkeyseedSource::Rekey { old_prf, old_sk_d, more } => {
            let mut parts: Vec<&[u8]> = vec![g_ir.as_slice(), p.nonce_i, p.nonce_r];
            parts.extend(more.iter().map(SharedSecret::as_slice));
            prf::prf(old_prf, old_sk_d, &parts, &mut skeyseed[..])?
        }
        SkeyseedSource::Intermediate { sk_d } => {
            prf::prf(p.prf, sk_d, &[g_ir.as_slice(), p.nonce_i, p.nonce_r], &mut skeyseed[..])?
        }
    };
    // {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)
    let plen = p.prf.output_len();
    let alen = p.suite.integ_key_len();
    let elen = p.suite.cipher.keymat_len();
    let total = 3 * plen + 2 * alen + 2 * elen;
    let mut ks = Zeroizing::new([0u8; 3 * MAX_PRF_LEN + 2 * MAX_INTEG_KEY + 2 * MAX_ENC_KEY]);
    let stream = ks.get_mut(..total).ok_or(Error::Internal { what: "IKE key stream" })?;
    prf::prf_plus(
        p.prf,
        skeyseed.get(..seed_len).unwrap_or(&[]),
        &[p.nonce_i, p.nonce_r, &p.spi_i.to_be_bytes(), &p.spi_r.to_be_bytes()],
        stream,
    )?;
    let mut at = 0;
    let mut take = |n: usize| {
        let s = stream.get(at..at + n).unwrap_or(&[]);
        at += n;
        s
    };
    let sk_d = KeyBuf::from_slice(take(plen))?;
    let sk_ai = KeyBuf::from_slice(take(alen))?;
    let sk_ar = KeyBuf::from_slice(take(alen))?;
    let sk_ei = KeyBuf::from_slice(take(elen))?;
    let sk_er = KeyBuf::from_slice(take(elen))?;
    let pi = KeyBuf::from_slice(take(plen))?;
    let pr = KeyBuf::from_slice(take(plen))?;
    Ok(IkeSa {
        role: p.role,
        prf: p.prf,
        suite: p.suite,
        spi_i: p.spi_i,
        spi_r: p.spi_r,
        sk_ai,
        sk_ar,
        sk_ei,
        sk_er,
        sk_d: Some(Box::new(sk_d)),
        sk_p: keep_auth_keys.then(|| Box::new(AuthKeys { i: pi, r: pr })),
        sealed_counter: None,
        next_iv: 1,
        first_child: None,
        transcript: None,
        authenticated: false,
        signed: false,
    })
}

/// One direction's ESP keys out of KEYMAT.
pub(crate) struct EspKeys {
    pub(crate) enc: KeyBuf<MAX_ENC_KEY>,
    pub(crate) integ: KeyBuf<MAX_INTEG_KEY>,
}

/// KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr); initiator-to-responder keys first,
/// encryption before integrity. Returns (inbound, outbound) for our role.
pub(crate) fn derive_child_keys(
    prf_alg: Prf,
    sk_d: &[u8],
    g_ir: Option<&SharedSecret>,
    p: &ChildSaParams<'_>,
) -> Result<(EspKeys, EspKeys)> {
    check_nonce("Ni", p.nonce_i)?;
    check_nonce("Nr", p.nonce_r)?;
    check_suite(&p.suite)?;
    let elen = p.suite.cipher.keymat_len();
    let alen = p.suite.integ_key_len();
    let total = 2 * (elen + alen);
    let mut ks = Zeroizing::new([0u8; 2 * (MAX_ENC_KEY + MAX_INTEG_KEY)]);
    let stream = ks.get_mut(..total).ok_or(Error::Internal { what: "KEYMAT" })?;
    let gir: &[u8] = g_ir.map_or(&[], |g| g.as_slice());
    prf::prf_plus(prf_alg, sk_d, &[gir, p.nonce_i, p.nonce_r], stream)?;
    let mut at = 0;
    let mut take = |n: usize| {
        let s = stream.get(at..at + n).unwrap_or(&[]);
        at += n;
        s
    };
    let i_to_r = EspKeys { enc: KeyBuf::from_slice(take(elen))?, integ: KeyBuf::from_slice(take(alen))? };
    let r_to_i = EspKeys { enc: KeyBuf::from_slice(take(elen))?, integ: KeyBuf::from_slice(take(alen))? };
    Ok(match p.role {
        Role::Initiator => (r_to_i, i_to_r),
        Role::Responder => (i_to_r, r_to_i),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use enclave_api::alg::{Cipher, Integ};

    fn params<'a>(role: Role, ni: &'a [u8], nr: &'a [u8]) -> IkeSaParams<'a> {
        IkeSaParams {
            role,
            prf: Prf::HmacSha256,
            suite: Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
            nonce_i: ni,
            nonce_r: nr,
            spi_i: 0x1122334455667788,
            spi_r: 0x99aabbccddeeff00,
        }
    }

    #[test]
    fn initiator_and_responder_derive_mirrored_keys() {
        let g = SharedSecret::from_slice(&[7; 32]).unwrap();
        let (ni, nr) = ([1u8; 32], [2u8; 32]);
        let a = derive_ike_sa(SkeyseedSource::Initial, &g, &params(Role::Initiator, &ni, &nr)).unwrap();
        let b = derive_ike_sa(SkeyseedSource::Initial, &g, &params(Role::Responder, &ni, &nr)).unwrap();
        assert_eq!(a.sk_keys(true).0, b.sk_keys(false).0);
        assert_eq!(a.sk_keys(true).1, b.sk_keys(false).1);
        assert_ne!(a.sk_keys(true).0, a.sk_keys(false).0);
        assert_eq!(a.sk_ei.len(), 32);
        assert_eq!(a.sk_ai.len(), 32);
    }

    #[test]
    fn short_nonces_and_inconsistent_suites_are_refused() {
        let g = SharedSecret::from_slice(&[7; 32]).unwrap();
        let short = [1u8; 15];
        assert!(
            derive_ike_sa(SkeyseedSource::Initial, &g, &params(Role::Initiator, &short, &[2; 16])).is_err()
        );
        let mut p = params(Role::Initiator, &[1; 16], &[2; 16]);
        p.suite = Suite { cipher: Cipher::AesGcm16_128, integ: Some(Integ::HmacSha256_128) };
        assert!(matches!(
            derive_ike_sa(SkeyseedSource::Initial, &g, &p),
            Err(Error::InconsistentSuite { .. })
        ));
    }
}
