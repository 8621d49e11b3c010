//! Two enclaves through IKE_SA_INIT and IKE_AUTH as the IKE engine drives them, for tests,
//! benches and fuzz harnesses that need an authenticated IKE SA, or child SAs, without the
//! engine (feature `testing`; nothing here is secret or trusted: it only calls the trait).
//!
//! The enclave derives keys only from an exchange it took part in: our nonce from
//! [`crate::Enclave::ike_nonces`], AUTH over the IKE_SA_INIT message that carried the values
//! its keys came from, and a child SA only once the peer's AUTH verified. [`Handshake`] does
//! exactly that, so what a test builds on is what the product builds on.

use crate::alg::{AuthMethod, DhGroup, Prf, Role, Suite};
use crate::handle::{IkeSaHandle, SecretHandle};
use crate::ike::{
    AuthInput, AuthSpec, ChildSaPair, ChildSaParams, DhExchange, IkeSaParams, IntermediateExchange,
    PeerCredential,
};
use crate::{Enclave, Result, IKE_NONCE_LEN};

/// An IKE SA between `a` (the initiator) and `b`, and the IKE_SA_INIT it came from.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// `a`'s IKE SA.
    pub ike_a: IkeSaHandle,
    /// `b`'s IKE SA.
    pub ike_b: IkeSaHandle,
    /// IKE_SA_INIT request (`a`'s) and response (`b`'s), as AUTH covers them.
    pub msg1: Vec<u8>,
    /// See [`Self::msg1`].
    pub msg2: Vec<u8>,
    /// Ni (`a`'s enclave's nonce) and Nr (`b`'s).
    pub ni: Vec<u8>,
    /// See [`Self::ni`].
    pub nr: Vec<u8>,
    /// The SAs' SPIs.
    pub spi_i: u64,
    /// See [`Self::spi_i`].
    pub spi_r: u64,
}

/// The Authentication Data [`Handshake::authenticate_psk`] exchanged: each side computes
/// its AUTH once per IKE SA, so these are what a test checks a moved or restored SA against
/// (with `auth_verify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PskAuths {
    /// `a`'s AUTH, over [`Handshake::auth_a`] with [`ID_A`].
    pub a: Vec<u8>,
    /// `b`'s AUTH, over [`Handshake::auth_b`] with [`ID_B`].
    pub b: Vec<u8>,
}

/// ID payload body (ID_FQDN) of `a` in [`Handshake::authenticate_psk`].
pub const ID_A: &[u8] = b"\x02\0\0\0a.example";
/// ID payload body of `b`.
pub const ID_B: &[u8] = b"\x02\0\0\0b.example";

/// IKE_SA_INIT between `a` (initiator) and `b` (responder) with SPIs `spi_i`/`spi_r`: each
/// side's nonce its enclave's own, a fresh DH value each.
pub fn ike_sa_init(
    a: &mut (impl Enclave + ?Sized),
    b: &mut (impl Enclave + ?Sized),
    group: DhGroup,
    prf: Prf,
    suite: Suite,
    (spi_i, spi_r): (u64, u64),
) -> Result<Handshake> {
    let (mut ni, mut nr) = (vec![0u8; IKE_NONCE_LEN], vec![0u8; IKE_NONCE_LEN]);
    a.ike_nonces(&mut ni)?;
    b.ike_nonces(&mut nr)?;
    let (mut ke_a, mut ke_b) = (vec![0u8; group.public_len()], vec![0u8; group.public_len()]);
    let dh_a = a.dh_generate(group, &mut ke_a)?;
    let dh_b = b.dh_generate(group, &mut ke_b)?;
    let params = |role| IkeSaParams { role, prf, suite, nonce_i: &ni, nonce_r: &nr, spi_i, spi_r };
    let ike_a = a.ike_sa_create(DhExchange { dh: dh_a, peer_public: &ke_b }, &params(Role::Initiator))?;
    let ike_b = b.ike_sa_create(DhExchange { dh: dh_b, peer_public: &ke_a }, &params(Role::Responder))?;
    let msg1 = sa_init_message(spi_i, 0, true, group, &ke_a, &ni);
    let msg2 = sa_init_message(spi_i, spi_r, false, group, &ke_b, &nr);
    Ok(Handshake { ike_a, ike_b, msg1, msg2, ni, nr, spi_i, spi_r })
}

impl Handshake {
    /// The AUTH input of the initiator `a` (RealMessage1, Nr), with identity `id`.
    pub fn auth_a<'a>(&'a self, id: &'a [u8]) -> AuthInput<'a> {
        AuthInput { real_message: &self.msg1, peer_nonce: &self.nr, id_body: id }
    }

    /// The AUTH input of the responder `b` (RealMessage2, Ni).
    pub fn auth_b<'a>(&'a self, id: &'a [u8]) -> AuthInput<'a> {
        AuthInput { real_message: &self.msg2, peer_nonce: &self.ni, id_body: id }
    }

    /// One additional key exchange of `group` (RFC 9370) in IKE_INTERMEDIATE message `mid`,
    /// `a` initiating: both enclaves' keys change, and their AUTHs cover the exchange.
    pub fn additional_ke(
        &self,
        a: &mut (impl Enclave + ?Sized),
        b: &mut (impl Enclave + ?Sized),
        group: DhGroup,
        mid: u32,
    ) -> Result<()> {
        let mut ke_a = vec![0u8; group.public_len()];
        let dh_a = a.dh_generate(group, &mut ke_a)?;
        let mut ke_b = vec![0u8; group.response_len()];
        let dh_b = b.ke_respond(group, &ke_a, &mut ke_b)?;
        let request = intermediate_message(self.spi_i, self.spi_r, false, mid, group, &ke_a);
        let response = intermediate_message(self.spi_i, self.spi_r, true, mid, group, &ke_b);
        let exchange = |_| IntermediateExchange {
            nonce_i: &self.ni,
            nonce_r: &self.nr,
            request: &request,
            response: &response,
        };
        b.ike_sa_intermediate(self.ike_b, DhExchange { dh: dh_b, peer_public: &ke_a }, &exchange(()))?;
        a.ike_sa_intermediate(self.ike_a, DhExchange { dh: dh_a, peer_public: &ke_b }, &exchange(()))
    }

    /// IKE_AUTH's AUTH payloads over a pre-shared key both enclaves hold (`psk_a` in `a`,
    /// `psk_b` in `b`): `a`'s verified at `b`, then `b`'s at `a`, as the engine does.
    pub fn authenticate_psk(
        &self,
        a: &mut (impl Enclave + ?Sized),
        b: &mut (impl Enclave + ?Sized),
        psk_a: SecretHandle,
        psk_b: SecretHandle,
    ) -> Result<PskAuths> {
        let mut auth = [0u8; 64];
        let (m, n) = a.auth_compute(self.ike_a, psk_a, AuthSpec::SharedKey, &self.auth_a(ID_A), &mut auth)?;
        b.auth_verify(self.ike_b, PeerCredential::SharedKey(psk_b), m.id(), &auth[..n], &self.auth_a(ID_A))?;
        let a_auth = auth[..n].to_vec();
        let (m, n) = b.auth_compute(self.ike_b, psk_b, AuthSpec::SharedKey, &self.auth_b(ID_B), &mut auth)?;
        debug_assert_eq!(m, AuthMethod::SharedKey);
        a.auth_verify(self.ike_a, PeerCredential::SharedKey(psk_a), m.id(), &auth[..n], &self.auth_b(ID_B))?;
        Ok(PskAuths { a: a_auth, b: auth[..n].to_vec() })
    }

    /// IKE_AUTH's child SA from IKE_SA_INIT's nonces (once the peers authenticated):
    /// `a`'s inbound SPI `spi_a`, `b`'s `spi_b`. Returns (`a`'s pair, `b`'s pair).
    pub fn first_child(
        &self,
        a: &mut (impl Enclave + ?Sized),
        b: &mut (impl Enclave + ?Sized),
        suite: Suite,
        (spi_a, spi_b): (u32, u32),
    ) -> Result<(ChildSaPair, ChildSaPair)> {
        let child = |role, spi_inbound, spi_outbound| ChildSaParams {
            role,
            suite,
            esn: false,
            nonce_i: &self.ni,
            nonce_r: &self.nr,
            spi_inbound,
            spi_outbound,
        };
        let sa_a = a.child_sa_create(self.ike_a, None, None, &child(Role::Initiator, spi_a, spi_b))?;
        let sa_b = b.child_sa_create(self.ike_b, None, None, &child(Role::Responder, spi_b, spi_a))?;
        Ok((sa_a, sa_b))
    }
}

/// An IKE_SA_INIT message as its sender puts it on the wire (RFC 7296 §1.2): header, an SA
/// payload (empty here), KE and Nonce. The enclave takes AUTH input only from the exchange
/// it derived the IKE SA from: these SPIs, this KE and nonce.
pub fn sa_init_message(
    spi_i: u64,
    spi_r: u64,
    initiator: bool,
    group: DhGroup,
    ke: &[u8],
    nonce: &[u8],
) -> Vec<u8> {
    let flags = if initiator { 0x08 } else { 0x20 };
    let len16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
    let mut m = Vec::new();
    m.extend_from_slice(&spi_i.to_be_bytes());
    m.extend_from_slice(&spi_r.to_be_bytes());
    m.extend_from_slice(&[33, 0x20, 34, flags, 0, 0, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&[34, 0, 0, 4]);
    m.extend_from_slice(&[40, 0]);
    m.extend_from_slice(&len16(8 + ke.len()));
    m.extend_from_slice(&group.id().to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(ke);
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&len16(4 + nonce.len()));
    m.extend_from_slice(nonce);
    let len = u32::try_from(m.len()).unwrap_or(u32::MAX);
    m[24..28].copy_from_slice(&len.to_be_bytes());
    m
}

/// An IKE_INTERMEDIATE message in the form RFC 9242 §3.3.2 authenticates (IKE header and
/// Encrypted payload header, their lengths those of this form, then the inner payloads in
/// plaintext): one KE payload of `group` with `ke`.
pub fn intermediate_message(
    spi_i: u64,
    spi_r: u64,
    response: bool,
    mid: u32,
    group: DhGroup,
    ke: &[u8],
) -> Vec<u8> {
    let flags = if response { 0x20 } else { 0x08 };
    let len16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
    let mut m = Vec::new();
    m.extend_from_slice(&spi_i.to_be_bytes());
    m.extend_from_slice(&spi_r.to_be_bytes());
    m.extend_from_slice(&[46, 0x20, 43, flags]);
    m.extend_from_slice(&mid.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&[34, 0]);
    m.extend_from_slice(&len16(4 + 8 + ke.len()));
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&len16(8 + ke.len()));
    m.extend_from_slice(&group.id().to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(ke);
    let len = u32::try_from(m.len()).unwrap_or(u32::MAX);
    m[24..28].copy_from_slice(&len.to_be_bytes());
    m
}
