//! The authentication half of IKE_AUTH (RFC 7296 §2.15, §3.6–3.8), for both roles: our
//! AUTH (and CERT, CERTREQ) payloads, and the checks on the peer's.
//!
//! With `auth = "pubkey"` the peer's first X.509 CERT payload must hold the key that verifies
//! its AUTH (§3.6); its path to a configured CA is validated ([`crate::cert::chain`]) and its
//! ID payload must be certified by it before the enclave is asked to verify the signature.
//! The IKE_SA_INIT half is N(SIGNATURE_HASH_ALGORITHMS) (RFC 7427 §4) and the responder's
//! CERTREQ.

use wire::ike::{
    Authentication, CertEncoding, CertificateRequest, Identification, Message, Notify, NotifyType, Payload,
};

use enclave::{
    AuthInput, AuthMethod, AuthSpec, AuthVerified, Enclave, IkeSaHandle, OurAuth, PeerAuthCheck,
    PeerCredential, SignatureScheme,
};

use super::{Core, Ctx, Inner};
use crate::auth::{self, AuthPolicy, PeerHashes};
use crate::cert::{chain, CertError, Certificate};
use crate::config::Connection;
use crate::error::{Error, Side};

/// Room for any Authentication Data: an RFC 7427 AlgorithmIdentifier and an RSA-8192
/// signature.
const MAX_AUTH_LEN: usize = 1 + 255 + 1024;

/// How many intermediate certificates of the peer's are looked at.
const MAX_PEER_CERTS: usize = 2 * chain::MAX_PATH;

/// How the peer proved its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAuth {
    /// The Auth Method of its AUTH payload.
    pub method: AuthMethod,
    /// The RFC 7427 signature scheme, for method 14.
    pub scheme: Option<SignatureScheme>,
    /// Its validated certificate, for public-key authentication.
    pub certificate: Option<Certificate>,
    /// The identity it authenticated as (its IDi or IDr).
    pub identity: Identification,
}

impl PeerAuth {
    /// A peer whose AUTH the pre-shared key verified.
    fn by_shared_key(verified: AuthVerified, id: &Identification) -> Self {
        Self { method: verified.method, scheme: verified.scheme, certificate: None, identity: id.clone() }
    }
}

/// The hashes the peer announced in its IKE_SA_INIT message, if it did.
pub(super) fn peer_hashes(message: &Message) -> Option<PeerHashes> {
    message.notify(NotifyType::SIGNATURE_HASH_ALGORITHMS).map(|n| PeerHashes::from_notify(&n.data))
}

/// N(SIGNATURE_HASH_ALGORITHMS) with every hash we verify with.
pub(super) fn hashes_notify() -> Payload {
    Payload::Notify(Notify::new(NotifyType::SIGNATURE_HASH_ALGORITHMS, auth::our_hashes_notify()))
}

/// CERTREQ naming our CAs by the SHA-1 of their public keys (§3.7), when the peer must
/// present a certificate. strongSwan sends its certificate only when asked (`send_cert =
/// ifasked`, its default).
pub(super) fn certreq(conn: &Connection) -> Option<Payload> {
    if !conn.remote_auth.is_signature() {
        return None;
    }
    let authorities = conn.remote_cacerts.iter().flat_map(|c| c.spki_sha1()).collect();
    Some(Payload::CertificateRequest(CertificateRequest {
        encoding: CertEncoding::X509_SIGNATURE,
        authorities,
    }))
}

/// Our CERT payloads: our certificate first (it verifies our AUTH, §3.6), then intermediates.
/// Sent whether or not the peer asked, so a peer without our certificate can still check.
pub(super) fn certs(conn: &Connection) -> Vec<Payload> {
    if !conn.local_auth.is_signature() {
        return Vec::new();
    }
    conn.local_certs
        .iter()
        .map(|c| {
            Payload::Certificate(wire::ike::Certificate {
                encoding: CertEncoding::X509_SIGNATURE,
                data: c.der().to_vec(),
            })
        })
        .collect()
}

/// Our AUTH payload over `input` (our IKE_SA_INIT message, the peer's nonce, our ID),
/// computed by the enclave with the connection's secret.
pub(super) fn our_auth<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    input: &AuthInput<'_>,
) -> Result<Authentication, Error> {
    let mut data = vec![0u8; MAX_AUTH_LEN];
    let (method, len) = ctx.enclave.auth_compute(ike, core.secret, our_spec(core), input, &mut data)?;
    data.truncate(len);
    Ok(Authentication::new(wire::ike::AuthMethod(method.id()), data))
}

/// How our AUTH is computed.
fn our_spec(core: &Core) -> AuthSpec {
    match (&core.conn.local_auth, core.conn.local_certs.first()) {
        (AuthPolicy::Signature(policy), Some(ours)) => {
            policy.local_spec(ours.public_key().kind, core.peer_hashes)
        }
        // Configuration validation makes certificates and signatures go together.
        (AuthPolicy::Signature(_), None) | (AuthPolicy::Psk, _) => AuthSpec::SharedKey,
    }
}

/// The responder's AUTH step: checks the peer's AUTH over `peer_input` as [`verify_peer`]
/// does and, once it is accepted, computes ours over `our_input` as [`our_auth`] does. With
/// a pre-shared key for the peer both happen in one enclave call; with certificates, the
/// chain and the signature policy are checked between the two calls. `Err` is the peer
/// refused (it is told AUTHENTICATION_FAILED); the inner `Err`, ours not computed.
#[allow(clippy::too_many_arguments)]
pub(super) fn verify_and_answer<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    found: &Inner<'_>,
    id: &Identification,
    auth: &Authentication,
    peer_input: &AuthInput<'_>,
    our_input: &AuthInput<'_>,
) -> Result<(PeerAuth, Result<Authentication, Error>), Error> {
    if !matches!(core.conn.remote_auth, AuthPolicy::Psk) {
        let peer = verify_peer(core, ctx, ike, found, id, auth, peer_input)?;
        return Ok((peer, our_auth(core, ctx, ike, our_input)));
    }
    let check = PeerAuthCheck {
        credential: PeerCredential::SharedKey(core.secret),
        method: auth.method.0,
        auth_data: &auth.data,
        input: *peer_input,
    };
    let ours = OurAuth { credential: core.secret, spec: our_spec(core), input: *our_input };
    let mut data = vec![0u8; MAX_AUTH_LEN];
    let answered = ctx
        .enclave
        .auth_verify_compute(ike, check, &ours, &mut data)
        .map_err(|_| Error::AuthenticationFailed { side: Side::Local })?;
    let peer = PeerAuth::by_shared_key(answered.verified, id);
    let ours = answered.ours.map_err(Error::from).map(|(method, len)| {
        data.truncate(len);
        Authentication::new(wire::ike::AuthMethod(method.id()), data)
    });
    Ok((peer, ours))
}

/// Checks the peer's AUTH (`auth`, over `input`) for the identity `id` it sent, with the
/// pre-shared key or with the key of its certificate once that is validated. Every failure
/// is one the peer is told AUTHENTICATION_FAILED about.
pub(super) fn verify_peer<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    found: &Inner<'_>,
    id: &Identification,
    auth: &Authentication,
    input: &AuthInput<'_>,
) -> Result<PeerAuth, Error> {
    let bad_auth = Error::AuthenticationFailed { side: Side::Local };
    let policy = match &core.conn.remote_auth {
        AuthPolicy::Psk => {
            let credential = PeerCredential::SharedKey(core.secret);
            return match ctx.enclave.auth_verify(ike, credential, auth.method.0, &auth.data, input) {
                Ok(v) => Ok(PeerAuth::by_shared_key(v, id)),
                Err(_) => Err(bad_auth),
            };
        }
        AuthPolicy::Signature(policy) => policy,
    };
    let refused = Error::PeerCertificate;
    let mut x509 = found.certs.iter().filter(|c| c.encoding == CertEncoding::X509_SIGNATURE);
    let theirs = x509.next().ok_or(refused(CertError::Missing))?;
    let theirs = Certificate::from_der(&theirs.data).map_err(refused)?;
    // Intermediates are hints for path building: one that does not decode is not used.
    let intermediates: Vec<Certificate> =
        x509.take(MAX_PEER_CERTS).filter_map(|c| Certificate::from_der(&c.data).ok()).collect();
    let now = ctx.wall.ok_or(refused(CertError::NoWallClock))?;
    chain::validate(&theirs, &intermediates, &core.conn.remote_cacerts, now).map_err(refused)?;
    if !theirs.certifies(id) {
        return Err(refused(CertError::IdentityNotCertified));
    }
    let key = theirs.public_key();
    let verified = ctx
        .enclave
        .auth_verify(ike, PeerCredential::PublicKey(key), auth.method.0, &auth.data, input)
        .map_err(|_| bad_auth)?;
    if !policy.accepts(key.kind, &verified) {
        return Err(Error::AuthMethodRefused { method: auth.method.0 });
    }
    Ok(PeerAuth {
        method: verified.method,
        scheme: verified.scheme,
        certificate: Some(theirs),
        identity: id.clone(),
    })
}
