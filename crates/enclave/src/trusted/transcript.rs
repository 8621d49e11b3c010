//! What the enclave keeps of IKE_SA_INIT, so that AUTH covers only the exchange whose keys
//! it holds.
//!
//! AUTH signs or MACs `RealMessage | peer's Nonce | prf(SK_p, ID')` (RFC 7296 §2.15). If
//! the caller could hand in any message and nonce, the enclave would sign the octets of an
//! exchange it never took part in. So the IKE SA records, when it is made, a digest of each
//! side's Key Exchange Data and Nonce Data (the values its keys were derived from), and an
//! AUTH input must be an IKE_SA_INIT message of that side carrying exactly those payloads,
//! under this SA's SPIs, with the other side's recorded nonce. The record goes at
//! clear-and-seal, when AUTH is over.
//!
//! With additional key exchanges (RFC 9370) AUTH also covers the IKE_INTERMEDIATE
//! exchanges (RFC 9242 §3.3.2): `IntAuth_i | IntAuth_r | IKE_AUTH_MID`, chains of PRFs
//! under SK_pi/SK_pr over each message. The enclave computes them itself from the messages
//! whose KE payloads carry the values it agreed with, and appends them to the octets.

use super::keybuf::KeyBuf;
use super::prf::{self, MAX_PRF_LEN};
use enclave_api::alg::{Prf, Role};
use enclave_api::error::{refusal, Error, Result};
use enclave_api::ike::AuthInput;

/// IKE_SA_INIT's exchange type (RFC 7296 §3.1).
const IKE_SA_INIT: u8 = 34;
/// IKE_INTERMEDIATE's (RFC 9242 §3).
const IKE_INTERMEDIATE: u8 = 43;
/// The Encrypted payload's type (RFC 7296 §3.14).
const ENCRYPTED: u8 = 46;
/// Payload types (RFC 7296 §3.2).
const KEY_EXCHANGE: u8 = 34;
const NONCE: u8 = 40;
/// The IKE header's length; a payload header's.
const HEADER: usize = 28;
const PAYLOAD_HEADER: usize = 4;
/// Flags: Initiator and Response (RFC 7296 §3.1).
const FLAG_INITIATOR: u8 = 0x08;
const FLAG_RESPONSE: u8 = 0x20;

/// SHA-256 of a value.
pub(crate) fn digest(v: &[u8]) -> [u8; 32] {
    let mut d = [0u8; 32];
    d.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, v).as_ref());
    d
}

/// Digests of IKE_SA_INIT's values, indexed by side (0: initiator, 1: responder), and the
/// IKE_INTERMEDIATE exchanges so far.
pub(crate) struct Transcript {
    pub(crate) ke: [[u8; 32]; 2],
    pub(crate) nonce: [[u8; 32]; 2],
    /// `None` before the first IKE_INTERMEDIATE.
    pub(crate) intermediate: Option<IntAuth>,
}

/// RFC 9242's IntAuth_iN and IntAuth_rN, and the last IKE_INTERMEDIATE's message ID.
pub(crate) struct IntAuth {
    pub(crate) i: KeyBuf<MAX_PRF_LEN>,
    pub(crate) r: KeyBuf<MAX_PRF_LEN>,
    pub(crate) mid: u32,
}

impl IntAuth {
    /// `IntAuth_i | IntAuth_r | IKE_AUTH_MID`: what AUTH's octets end with.
    pub(crate) fn octets(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.i.as_slice().len() + self.r.as_slice().len() + 4);
        v.extend_from_slice(self.i.as_slice());
        v.extend_from_slice(self.r.as_slice());
        v.extend_from_slice(&self.mid.wrapping_add(1).to_be_bytes());
        v
    }

    /// The chains extended over one exchange: IntAuth_xN = prf(SK_px, IntAuth_x(N-1) |
    /// IntAuth_xNA | IntAuth_xNP), where the first has no predecessor.
    pub(crate) fn next(
        prev: Option<&Self>,
        prf_alg: Prf,
        sk_pi: &[u8],
        sk_pr: &[u8],
        x: &Intermediate<'_>,
    ) -> enclave_api::error::Result<Self> {
        let (pi, pr) = prev.map_or((&[][..], &[][..]), |p| (p.i.as_slice(), p.r.as_slice()));
        let mut out = [0u8; MAX_PRF_LEN];
        let n = prf::prf(prf_alg, sk_pi, &[pi, x.request], &mut out)?;
        let i = KeyBuf::from_slice(out.get(..n).unwrap_or(&[]))?;
        let n = prf::prf(prf_alg, sk_pr, &[pr, x.response], &mut out)?;
        let r = KeyBuf::from_slice(out.get(..n).unwrap_or(&[]))?;
        Ok(Self { i, r, mid: x.mid })
    }
}

/// An IKE_INTERMEDIATE exchange checked against its SA: its message ID, the KE payloads'
/// group and data (request: the initiator's, response: the responder's), both messages.
pub(crate) struct Intermediate<'a> {
    pub(crate) mid: u32,
    pub(crate) group: u16,
    pub(crate) ke: [&'a [u8]; 2],
    pub(crate) request: &'a [u8],
    pub(crate) response: &'a [u8],
}

impl<'a> Intermediate<'a> {
    /// The exchange if `request` and `response` are the IKE_INTERMEDIATE messages (RFC 9242
    /// §3.3.2 form) of the SA with these SPIs, one message ID above `after`, each with
    /// exactly one KE payload of one group.
    pub(crate) fn check(
        request: &'a [u8],
        response: &'a [u8],
        spi_i: u64,
        spi_r: u64,
        after: u32,
    ) -> enclave_api::error::Result<Self> {
        let refuse = Error::ProtocolRefused { why: refusal::NOT_THE_INTERMEDIATE };
        let (mid, gq, keq) =
            intermediate_values(request, FLAG_INITIATOR, spi_i, spi_r).ok_or(refuse.clone())?;
        let (mid_r, gr, ker) =
            intermediate_values(response, FLAG_RESPONSE, spi_i, spi_r).ok_or(refuse.clone())?;
        if mid != mid_r || mid <= after || gq != gr {
            return Err(refuse);
        }
        Ok(Self { mid, group: gq, ke: [keq, ker], request, response })
    }
}

/// Message ID, KE group and Key Exchange Data of an IKE_INTERMEDIATE message in the form
/// IntAuth covers (the IKE header and Encrypted payload header with lengths of the
/// plaintext form, then the inner payloads), with exactly these flags among I and R.
fn intermediate_values(msg: &[u8], flags: u8, spi_i: u64, spi_r: u64) -> Option<(u32, u16, &[u8])> {
    let h = msg.get(..HEADER + PAYLOAD_HEADER)?;
    let u64_at = |i: usize| h.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
    let mid = h.get(20..24).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes)?;
    let len = h.get(24..28).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes)?;
    let sk_len = usize::from(u16::from_be_bytes([h[30], h[31]]));
    if u64_at(0)? != spi_i
        || u64_at(8)? != spi_r
        || h[16] != ENCRYPTED
        || h[18] != IKE_INTERMEDIATE
        || h[19] & (FLAG_INITIATOR | FLAG_RESPONSE) != flags
        || usize::try_from(len).ok()? != msg.len()
        || sk_len != msg.len() - HEADER
    {
        return None;
    }
    let (mut next, mut at) = (h[HEADER], HEADER + PAYLOAD_HEADER);
    let mut ke = None;
    while next != 0 {
        let p = msg.get(at..at + PAYLOAD_HEADER)?;
        let plen = usize::from(u16::from_be_bytes([p[2], p[3]]));
        let body = msg.get(at + PAYLOAD_HEADER..at.checked_add(plen)?).filter(|_| plen >= PAYLOAD_HEADER)?;
        match next {
            KEY_EXCHANGE if ke.is_none() => {
                let group = u16::from_be_bytes([*body.first()?, *body.get(1)?]);
                ke = Some((group, body.get(4..)?));
            }
            KEY_EXCHANGE => return None,
            _ => {}
        }
        next = p[0];
        at += plen;
    }
    (at == msg.len()).then_some(())?;
    let (group, data) = ke?;
    Some((mid, group, data))
}

fn side(role: Role) -> usize {
    match role {
        Role::Initiator => 0,
        Role::Responder => 1,
    }
}

fn other(role: Role) -> Role {
    match role {
        Role::Initiator => Role::Responder,
        Role::Responder => Role::Initiator,
    }
}

impl Transcript {
    /// Checks that `input` is the AUTH input of `signer` in this exchange (IKE SA SPIs
    /// `spi_i`, `spi_r`): its IKE_SA_INIT message, the other side's nonce.
    pub(crate) fn check(&self, signer: Role, spi_i: u64, spi_r: u64, input: &AuthInput<'_>) -> Result<()> {
        let refuse = Error::ProtocolRefused { why: refusal::NOT_THE_TRANSCRIPT };
        let s = side(signer);
        if digest(input.peer_nonce) != self.nonce[side(other(signer))] {
            return Err(refuse);
        }
        let (ke, nonce) = sa_init_values(input.real_message, signer, spi_i, spi_r).ok_or(refuse.clone())?;
        if digest(ke) != self.ke[s] || digest(nonce) != self.nonce[s] {
            return Err(refuse);
        }
        Ok(())
    }
}

/// The Key Exchange Data and Nonce Data of `msg` if it is `signer`'s IKE_SA_INIT message
/// of the SA with these SPIs (a request has SPIr 0): a whole message whose payload chain
/// holds exactly one KE and one Nonce payload.
fn sa_init_values(msg: &[u8], signer: Role, spi_i: u64, spi_r: u64) -> Option<(&[u8], &[u8])> {
    let h = msg.get(..HEADER)?;
    let u64_at = |i: usize| h.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
    let len = h.get(24..28).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes)?;
    let want_r = if signer == Role::Initiator { 0 } else { spi_r };
    let want_flags = if signer == Role::Initiator { FLAG_INITIATOR } else { FLAG_RESPONSE };
    if u64_at(0)? != spi_i
        || u64_at(8)? != want_r
        || h[18] != IKE_SA_INIT
        || h[19] & (FLAG_INITIATOR | FLAG_RESPONSE) != want_flags
        || usize::try_from(len).ok()? != msg.len()
    {
        return None;
    }
    let (mut next, mut at) = (h[16], HEADER);
    let (mut ke, mut nonce) = (None, None);
    // Each payload is at least its header long, so the walk ends within the message.
    while next != 0 {
        let p = msg.get(at..at + PAYLOAD_HEADER)?;
        let plen = usize::from(u16::from_be_bytes([p[2], p[3]]));
        let body = msg.get(at + PAYLOAD_HEADER..at.checked_add(plen)?).filter(|_| plen >= PAYLOAD_HEADER)?;
        match next {
            KEY_EXCHANGE if ke.is_none() => ke = Some(body.get(4..)?),
            NONCE if nonce.is_none() => nonce = Some(body),
            KEY_EXCHANGE | NONCE => return None,
            _ => {}
        }
        next = p[0];
        at += plen;
    }
    (at == msg.len()).then_some(())?;
    Some((ke?, nonce?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(spi_i: u64, spi_r: u64, flags: u8, ke: &[u8], nonce: &[u8]) -> Vec<u8> {
        let group = enclave_api::alg::DhGroup::Curve25519;
        enclave_api::testing::sa_init_message(spi_i, spi_r, flags == FLAG_INITIATOR, group, ke, nonce)
    }

    fn transcript() -> Transcript {
        Transcript {
            ke: [digest(b"ke i"), digest(b"ke r")],
            nonce: [digest(b"nonce i"), digest(b"nonce r")],
            intermediate: None,
        }
    }

    #[test]
    fn only_the_exchanges_own_messages_and_nonces_pass() {
        let t = transcript();
        let m1 = msg(7, 0, FLAG_INITIATOR, b"ke i", b"nonce i");
        let m2 = msg(7, 9, FLAG_RESPONSE, b"ke r", b"nonce r");
        let input = |m, n| AuthInput { real_message: m, peer_nonce: n, id_body: b"id" };
        t.check(Role::Initiator, 7, 9, &input(&m1, b"nonce r")).unwrap();
        t.check(Role::Responder, 7, 9, &input(&m2, b"nonce i")).unwrap();
        let refused = Err(Error::ProtocolRefused { why: refusal::NOT_THE_TRANSCRIPT });
        // The other side's message, the wrong nonce, other SPIs, other values.
        assert_eq!(t.check(Role::Initiator, 7, 9, &input(&m2, b"nonce r")), refused);
        assert_eq!(t.check(Role::Initiator, 7, 9, &input(&m1, b"nonce i")), refused);
        assert_eq!(t.check(Role::Initiator, 8, 9, &input(&m1, b"nonce r")), refused);
        assert_eq!(t.check(Role::Responder, 7, 10, &input(&m2, b"nonce i")), refused);
        let forged = msg(7, 0, FLAG_INITIATOR, b"ke x", b"nonce i");
        assert_eq!(t.check(Role::Initiator, 7, 9, &input(&forged, b"nonce r")), refused);
        // Cut short, padded, or a second Nonce payload appended.
        assert_eq!(t.check(Role::Initiator, 7, 9, &input(&m1[..m1.len() - 1], b"nonce r")), refused);
        let mut longer = m1.clone();
        longer.push(0);
        assert_eq!(t.check(Role::Initiator, 7, 9, &input(&longer, b"nonce r")), refused);
        for cut in 0..m1.len() {
            assert!(sa_init_values(&m1[..cut], Role::Initiator, 7, 9).is_none());
        }
    }
}
