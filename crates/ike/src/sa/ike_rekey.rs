//! CREATE_CHILD_SA that rekeys the IKE SA (RFC 7296 §1.3.2), as initiator and responder,
//! with simultaneous rekeys resolved as §2.8.2 says.
//!
//! ```text
//! CREATE_CHILD_SA { SK { SA(SPIi'), Ni, KEi } } -->        (on the old IKE SA)
//!                 <-- { SK { SA(SPIr'), Nr, KEr } }
//! INFORMATIONAL { SK { D(IKE) } } -->                      (on the old IKE SA)
//! ```
//!
//! The new IKE SA's keys come from the old SA's sealed SK_d and a fresh Diffie-Hellman
//! value inside the enclave (SKEYSEED = prf(SK_d_old, g^ir_new | Ni | Nr)); it is cleared
//! and sealed at once. The exchange's initiator becomes the new SA's original initiator
//! (§2.18), both message-ID counters restart at zero, and the child SAs move over. The
//! exchange's initiator deletes the old SA.
//!
//! Collisions: while our own IKE rekey is outstanding, a peer's IKE rekey is answered and
//! its new SA ("theirs") is kept without children. When our answer arrives, the new SA
//! made by the exchange holding the lowest of the four nonces is redundant and is deleted
//! by the side that initiated that exchange; the other one receives the children, and its
//! initiator deletes the old SA (§2.8.2). A rekey request that arrives while the old SA is
//! already closing, or while another of our requests is outstanding, is answered with
//! TEMPORARY_FAILURE (§2.25.2); an initiator told TEMPORARY_FAILURE tries again later.
//!
//! With RFC 9370 additional key exchanges in the proposal, the CREATE_CHILD_SA carries the
//! KE transform's exchange and names a link (`N(ADDITIONAL_KEY_EXCHANGE)`); each additional
//! one follows as an IKE_FOLLOWUP_KE exchange on the old SA, and the new SA is made after
//! the last (SKEYSEED = prf(SK_d_old, SK(0) | Ni | Nr | SK(1) | ... | SK(n)), §2.2.4):
//!
//! ```text
//! CREATE_CHILD_SA { SK { SA(SPIi'), Ni, KEi } } -->
//!                 <-- { SK { SA(SPIr'), Nr, KEr, N(ADDITIONAL_KEY_EXCHANGE)(link) } }
//! IKE_FOLLOWUP_KE { SK { N(ADDITIONAL_KEY_EXCHANGE)(link), KEi(1) } } -->
//!                 <-- { SK { KEr(1), [N(ADDITIONAL_KEY_EXCHANGE)(link)] } }  ... per exchange
//! ```
//!
//! A peer's rekey that collides with ours while either has additional exchanges gets
//! TEMPORARY_FAILURE (one of them goes through when retried).

use core::mem;
use core::net::SocketAddr;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use enclave::{DhExchange, DhGroup, DhHandle, Enclave, IkeSaHandle, IkeSaParams, Role};
use wire::ike::{ExchangeType, KeyExchange, Nonce, Notify, NotifyType, Payload, ProtocolId};

use super::{Core, Ctx, Established, IkeSa, Output, RequestKind, State};
use crate::error::{Error, Side};
use crate::event::{ChildSa, DropReason, Event, SaId};
use crate::proposal::{self, IkeChoice};

/// How long a rekeyed IKE SA waits for the peer's Delete before sending its own.
const CLOSE_WAIT: Duration = Duration::from_secs(30);
/// How long before trying an IKE rekey again after the peer refused it or answered
/// something unusable (TEMPORARY_FAILURE retries sooner, see `Ctx::retry_at`).
const RETRY_FAILED: Duration = Duration::from_secs(60);
/// INVALID_KE_PAYLOAD answers an initiator follows before giving up.
const MAX_GROUP_RETRIES: u8 = 2;

/// The link our responder side names in `N(ADDITIONAL_KEY_EXCHANGE)`: with a window of one
/// request, its value only has to be echoed (strongSwan uses one byte too).
const LINK: &[u8] = &[0x43];

/// Our IKE rekey with additional key exchanges, while its IKE_FOLLOWUP_KE exchanges run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FollowUp {
    rekey: IkeRekey,
    spi_r: u64,
    choice: IkeChoice,
    nonce_r: Vec<u8>,
    /// The exchanges done (our value, the peer's), the KE transform's first.
    done: Vec<(DhHandle, Vec<u8>)>,
    /// The one under way and those still to come.
    current: (DhHandle, DhGroup),
    remaining: VecDeque<DhGroup>,
    link: Vec<u8>,
}

impl FollowUp {
    /// Frees every value not yet agreed.
    pub(super) fn release<E: Enclave>(&self, ctx: &mut Ctx<'_, E>) {
        for dh in self.done.iter().map(|(d, _)| *d).chain([self.current.0]) {
            let _ = ctx.enclave.dh_delete(dh);
        }
    }
}

/// The peer's IKE rekey with additional key exchanges, answered so far, on this side.
#[derive(Debug)]
pub(super) struct Responding {
    choice: IkeChoice,
    spi_i: u64,
    spi_r: u64,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    /// Our values with the peer's, the KE transform's first.
    done: Vec<(DhHandle, Vec<u8>)>,
    remaining: VecDeque<DhGroup>,
}

impl Responding {
    pub(super) fn release<E: Enclave>(&self, ctx: &mut Ctx<'_, E>) {
        for (dh, _) in &self.done {
            let _ = ctx.enclave.dh_delete(*dh);
        }
    }
}

/// Our IKE rekey request, held while it is outstanding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IkeRekey {
    /// Our SPI of the new IKE SA (its initiator SPI).
    spi: u64,
    nonce_i: Vec<u8>,
    dh: DhHandle,
    group: DhGroup,
    group_retries: u8,
}

impl IkeRekey {
    /// Frees the unused DH value.
    pub(super) fn release<E: Enclave>(&self, ctx: &mut Ctx<'_, E>) {
        let _ = ctx.enclave.dh_delete(self.dh);
    }
}

/// A new IKE SA made by the peer's rekey request while ours was outstanding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Theirs {
    id: SaId,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    seal: crate::event::SealReport,
}

/// Where an IKE SA stands with rekeying.
#[derive(Debug, Default)]
pub(super) struct RekeyState {
    /// The SA that holds our children now; set once they moved.
    pub(super) successor: Option<SaId>,
    /// The peer's new SA during a collision.
    theirs: Option<Theirs>,
    /// When a rekeyed SA sends its own Delete if the peer has not deleted it.
    pub(super) close_at: Option<Instant>,
    /// Whether the soft lifetime has queued a rekey already.
    pub(super) soft_expired: bool,
    /// The peer's rekey whose IKE_FOLLOWUP_KE exchanges are under way.
    pub(super) responding: Option<Responding>,
}

impl RekeyState {
    /// Whether the peer's rekey collided with ours and awaits its resolution (§2.8.2).
    pub(super) fn colliding(&self) -> bool {
        self.theirs.is_some()
    }
}

/// Children and queued requests that move to another IKE SA of the endpoint.
#[derive(Debug)]
pub(crate) struct Handoff {
    pub(crate) to: SaId,
    pub(crate) children: Vec<ChildSa>,
    /// Retired children with the end of their grace.
    pub(crate) retiring: Vec<(std::time::Instant, ChildSa)>,
    /// Children that have a successor already (inbound SPIs).
    pub(super) replaced: Vec<u32>,
    pub(super) queue: Vec<RequestKind>,
}

/// Whether a CREATE_CHILD_SA request rekeys the IKE SA (its SA payload proposes IKE).
pub(super) fn is_ike_rekey(inner: &[Payload]) -> bool {
    inner
        .iter()
        .any(|p| matches!(p, Payload::Sa(sa) if sa.proposals.iter().any(|p| p.protocol == ProtocolId::IKE)))
}

/// A fresh SPI of ours, unique on the endpoint (including SAs made in this round).
fn fresh_spi<E: Enclave>(ctx: &mut Ctx<'_, E>, own: SaId) -> Result<u64, Error> {
    for _ in 0..16 {
        let spi = super::random_ike_spi(ctx.enclave, ctx.random)?;
        if spi != own.0
            && !ctx.ike_sas.contains_key(&spi)
            && !ctx.out.new_sas.iter().any(|s| s.core.id.0 == spi)
        {
            return Ok(spi);
        }
    }
    Err(Error::InvalidMessage { exchange: "CREATE_CHILD_SA", why: "no free IKE SPI" })
}

/// The request rekeying this IKE SA, with the old SA's group unless the peer asked for
/// another.
pub(super) fn request<E: Enclave>(
    core: &Core,
    st: &Established,
    ctx: &mut Ctx<'_, E>,
    group: Option<DhGroup>,
    group_retries: u8,
) -> Result<(IkeRekey, Vec<Payload>), Error> {
    let group = group.unwrap_or(st.choice.group);
    let spi = fresh_spi(ctx, core.id)?;
    let nonce_i = ctx.nonce()?;
    let mut public = vec![0u8; group.public_len()];
    let dh = ctx.enclave.dh_generate(group, &mut public)?;
    let payloads = vec![
        Payload::Sa(proposal::ike_rekey_sa_payload(&core.conn.proposals, spi)),
        Payload::Nonce(Nonce { data: nonce_i.clone() }),
        Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), public)),
    ];
    Ok((IkeRekey { spi, nonce_i, dh, group, group_retries }, payloads))
}

/// The parts of an IKE rekey message.
#[derive(Default)]
struct Parts<'a> {
    sa: Option<&'a wire::ike::Sa>,
    nonce: Option<&'a Nonce>,
    ke: Option<&'a KeyExchange>,
    error: Option<&'a Notify>,
}

impl<'a> Parts<'a> {
    /// The data of the message's ADDITIONAL_KEY_EXCHANGE notify (RFC 9370 §2.2.4).
    fn link(payloads: &'a [Payload]) -> Option<&'a [u8]> {
        payloads.iter().find_map(|p| match p {
            Payload::Notify(n) if n.ty == NotifyType::ADDITIONAL_KEY_EXCHANGE => Some(&n.data[..]),
            _ => None,
        })
    }

    fn of(payloads: &'a [Payload]) -> Self {
        let mut s = Self::default();
        for p in payloads {
            match p {
                Payload::Sa(x) => s.sa = s.sa.or(Some(x)),
                Payload::Nonce(x) => s.nonce = s.nonce.or(Some(x)),
                Payload::KeyExchange(x) => s.ke = s.ke.or(Some(x)),
                Payload::Notify(n) if n.ty.is_error() => s.error = s.error.or(Some(n)),
                _ => {}
            }
        }
        s
    }
}

/// A new, established IKE SA succeeding `core`'s, with no children yet.
#[allow(clippy::too_many_arguments)]
fn successor<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    choice: IkeChoice,
    role: Role,
    spi_i: u64,
    spi_r: u64,
) -> Result<(IkeSa, crate::event::SealReport), Error> {
    let (sealed_sk_d, sealed_state, seal) = Core::seal(ctx, ike)?;
    let id = SaId(if role == Role::Initiator { spi_i } else { spi_r });
    let new = Core {
        id,
        conn: core.conn.clone(),
        secret: core.secret,
        peer_hashes: core.peer_hashes,
        peer_auth: core.peer_auth.clone(),
        role,
        spi_i,
        spi_r,
        local: core.local,
        remote: core.remote,
        init_remote: core.init_remote,
        nat: core.nat,
        next_request: 0,
        expected_request: 0,
        last_response: None,
        last_request: None,
        incoming_intermediate: None,
        // Negotiated in IKE_SA_INIT, and a rekey has none: the new SA keeps it (RFC 7383 §2.3).
        fragments: crate::fragment::Fragmentation::new(core.fragments.send),
        pending: None,
        queue: VecDeque::new(),
        deferred: Vec::new(),
        rekey: RekeyState::default(),
        children: Vec::new(),
        retiring: Vec::new(),
        replaced: Vec::new(),
        collision: None,
        created: ctx.now,
        last_heard: ctx.now,
        initial_contact: false,
    };
    let state = State::Established(Established { ike, choice, sealed_sk_d, sealed_state });
    Ok((IkeSa { core: new, state }, seal))
}

/// Moves `core`'s children and queued child work to the IKE SA `to`, and reports the rekey.
fn hand_over(core: &mut Core, out: &mut Output, to: (SaId, Role, IkeChoice), seal: crate::event::SealReport) {
    let mut queue = Vec::new();
    for kind in mem::take(&mut core.queue).into_iter().chain(core.deferred.drain(..).map(|(_, k)| k)) {
        match kind {
            RequestKind::RekeyChild(_) | RequestKind::DeleteChild(_) | RequestKind::DeleteIke => {
                queue.push(kind)
            }
            // Ours to finish on this SA (a refused child), or moot now.
            RequestKind::DeleteRefused(_) => core.queue.push_back(kind),
            _ => {}
        }
    }
    let (id, role, choice) = to;
    core.rekey.successor = Some(id);
    out.events.push_back(Event::IkeSaRekeyed { old: core.id, new: id, role, choice, seal });
    let (children, retiring) = (mem::take(&mut core.children), mem::take(&mut core.retiring));
    let replaced = mem::take(&mut core.replaced);
    out.handoffs.push(Handoff { to: id, children, retiring, replaced, queue });
}

/// What [`hand_over`] needs of a new SA.
fn summary(sa: &IkeSa) -> Option<(SaId, Role, IkeChoice)> {
    Some((sa.core.id, sa.core.role, sa.choice()?))
}

/// Whether `a`'s exchange holds the lowest of the four nonces (§2.8.2, compared as
/// unsigned byte strings).
fn holds_lowest(a: (&[u8], &[u8]), b: (&[u8], &[u8])) -> bool {
    a.0.min(a.1) < b.0.min(b.1)
}

/// The answer to our IKE rekey request.
pub(super) fn response<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    rekey: IkeRekey,
    inner: &[Payload],
) {
    let parts = Parts::of(inner);
    let failed = |core: &mut Core, ctx: &mut Ctx<'_, E>, error: Error| {
        ctx.out.events.push_back(Event::IkeSaRekeyFailed { sa: core.id, error });
        core.deferred.push((super::later(ctx.now, RETRY_FAILED), RequestKind::RekeyIke(None, 0)));
    };
    /* <-- CREATE_CHILD_SA { SK { N(error) } } */
    if let Some(n) = parts.error {
        rekey.release(ctx);
        if n.ty == NotifyType::TEMPORARY_FAILURE {
            if let Some(theirs) = core.rekey.theirs.take() {
                // The peer refused ours but we answered its own: its new SA takes the
                // children, and its initiator deletes this one.
                adopt_theirs(core, ctx, &theirs);
                return;
            }
            core.deferred.push((ctx.retry_at(), RequestKind::RekeyIke(None, 0)));
            return;
        }
        if n.ty == NotifyType::INVALID_KE_PAYLOAD && rekey.group_retries < MAX_GROUP_RETRIES {
            if let Some(g) = core.group_asked_for(n, rekey.group) {
                core.queue.push_front(RequestKind::RekeyIke(Some(g), rekey.group_retries + 1));
                return;
            }
        }
        return failed(core, ctx, super::peer_error(n.ty));
    }
    /* <-- CREATE_CHILD_SA { SK { SA, Nr, KEr } } */
    let invalid = |why| Error::InvalidMessage { exchange: "CREATE_CHILD_SA", why };
    let (Some(sa), Some(nonce), Some(ke)) = (parts.sa, parts.nonce, parts.ke) else {
        rekey.release(ctx);
        return failed(core, ctx, invalid("SA, Nr or KEr missing"));
    };
    let Some((spi_r, choice)) = proposal::accept_ike_rekey_answer(sa, &core.conn.proposals) else {
        rekey.release(ctx);
        return failed(core, ctx, Error::NoProposalChosen { side: Side::Local });
    };
    if choice.group != rekey.group
        || ke.group.0 != rekey.group.id()
        || ke.data.len() != rekey.group.public_len()
    {
        rekey.release(ctx);
        return failed(core, ctx, invalid("KEr does not match the group we sent"));
    }
    if nonce.data.len() < choice.prf.output_len() / 2 {
        rekey.release(ctx);
        return failed(core, ctx, invalid("Nr shorter than half the PRF key"));
    }
    let mut remaining: VecDeque<DhGroup> = choice.additional_kes().collect();
    if let Some(group) = remaining.pop_front() {
        let Some(link) = Parts::link(inner) else {
            rekey.release(ctx);
            return failed(core, ctx, invalid("additional key exchanges without ADDITIONAL_KEY_EXCHANGE"));
        };
        let done = vec![(rekey.dh, ke.data.clone())];
        let fu = |current| FollowUp {
            rekey: rekey.clone(),
            spi_r,
            choice,
            nonce_r: nonce.data.clone(),
            done,
            current,
            remaining,
            link: link.to_vec(),
        };
        match follow_up(ctx, group) {
            Ok((dh, request)) => {
                let fu = fu((dh, group));
                send_follow_up(st, core, ctx, fu, request);
            }
            Err(e) => {
                rekey.release(ctx);
                failed(core, ctx, e);
            }
        }
        return;
    }
    let kes = [DhExchange { dh: rekey.dh, peer_public: &ke.data }];
    finish(st, core, ctx, &rekey, spi_r, choice, &nonce.data, &kes);
}

/// Our next IKE_FOLLOWUP_KE request's private value and KE payload.
fn follow_up<E: Enclave>(ctx: &mut Ctx<'_, E>, group: DhGroup) -> Result<(DhHandle, Payload), Error> {
    let mut public = vec![0u8; group.public_len()];
    let dh = ctx.enclave.dh_generate(group, &mut public)?;
    Ok((dh, Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), public))))
}

/// Sends IKE_FOLLOWUP_KE { SK { N(ADDITIONAL_KEY_EXCHANGE)(link), KEi(n) } } on the old SA.
fn send_follow_up<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    fu: FollowUp,
    ke: Payload,
) {
    let inner = vec![Payload::Notify(Notify::new(NotifyType::ADDITIONAL_KEY_EXCHANGE, fu.link.clone())), ke];
    let id = core.next_request;
    let header = core.header(ExchangeType::IKE_FOLLOWUP_KE, false, id);
    let fragment_at = core.fragment_at_peer(ctx);
    match super::sk::seal(ctx.enclave, st.ike, st.choice.suite, header, inner, fragment_at) {
        Ok(bytes) => {
            /* IKE_FOLLOWUP_KE { SK { N(ADDITIONAL_KEY_EXCHANGE), KEi(n) } } --> */
            core.send_request(
                ctx,
                ExchangeType::IKE_FOLLOWUP_KE,
                id,
                bytes,
                RequestKind::RekeyIkeFollowUp(Box::new(fu)),
            );
        }
        Err(e) => {
            fu.release(ctx);
            ctx.out.events.push_back(Event::IkeSaRekeyFailed { sa: core.id, error: e });
            core.deferred.push((super::later(ctx.now, RETRY_FAILED), RequestKind::RekeyIke(None, 0)));
        }
    }
}

/// The answer to one of our IKE_FOLLOWUP_KE requests: the next one, or the new SA.
pub(super) fn follow_up_response<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    mut fu: FollowUp,
    inner: &[Payload],
) {
    let parts = Parts::of(inner);
    let failed = |core: &mut Core, ctx: &mut Ctx<'_, E>, fu: &FollowUp, error: Error, retry: Duration| {
        fu.release(ctx);
        ctx.out.events.push_back(Event::IkeSaRekeyFailed { sa: core.id, error });
        core.deferred.push((super::later(ctx.now, retry), RequestKind::RekeyIke(None, 0)));
    };
    /* <-- IKE_FOLLOWUP_KE { SK { N(error) } } */
    if let Some(n) = parts.error {
        let retry = if n.ty == NotifyType::TEMPORARY_FAILURE { Duration::from_secs(2) } else { RETRY_FAILED };
        return failed(core, ctx, &fu, super::peer_error(n.ty), retry);
    }
    /* <-- IKE_FOLLOWUP_KE { SK { KEr(n), [N(ADDITIONAL_KEY_EXCHANGE)] } } */
    let (dh, group) = fu.current;
    let Some(ke) = parts.ke.filter(|k| k.group.0 == group.id() && k.data.len() == group.response_len())
    else {
        let error = Error::InvalidMessage { exchange: "IKE_FOLLOWUP_KE", why: "no KEr of the method chosen" };
        return failed(core, ctx, &fu, error, RETRY_FAILED);
    };
    fu.done.push((dh, ke.data.clone()));
    if let Some(next) = fu.remaining.pop_front() {
        let Some(link) = Parts::link(inner) else {
            let error = Error::InvalidMessage {
                exchange: "IKE_FOLLOWUP_KE",
                why: "more to come without ADDITIONAL_KEY_EXCHANGE",
            };
            return failed(core, ctx, &fu, error, RETRY_FAILED);
        };
        fu.link = link.to_vec();
        match follow_up(ctx, next) {
            Ok((dh, request)) => {
                fu.current = (dh, next);
                send_follow_up(st, core, ctx, fu, request);
            }
            Err(e) => failed(core, ctx, &fu, e, RETRY_FAILED),
        }
        return;
    }
    let kes: Vec<DhExchange<'_>> =
        fu.done.iter().map(|(dh, p)| DhExchange { dh: *dh, peer_public: p }).collect();
    finish(st, core, ctx, &fu.rekey, fu.spi_r, fu.choice, &fu.nonce_r, &kes);
}

/// Our rekey's new SA from its exchanges (each consumed), then the collision check and the
/// hand-over.
#[allow(clippy::too_many_arguments)]
fn finish<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    rekey: &IkeRekey,
    spi_r: u64,
    choice: IkeChoice,
    nonce_r: &[u8],
    kes: &[DhExchange<'_>],
) {
    let failed = |core: &mut Core, ctx: &mut Ctx<'_, E>, error: Error| {
        ctx.out.events.push_back(Event::IkeSaRekeyFailed { sa: core.id, error });
        core.deferred.push((super::later(ctx.now, RETRY_FAILED), RequestKind::RekeyIke(None, 0)));
    };
    let params = IkeSaParams {
        role: Role::Initiator,
        prf: choice.prf,
        suite: choice.suite,
        nonce_i: &rekey.nonce_i,
        nonce_r,
        spi_i: rekey.spi,
        spi_r,
    };
    // The DH values are consumed whether or not this succeeds.
    let made = match kes {
        [one] => ctx.enclave.ike_sa_rekey(st.ike, Some(&st.sealed_sk_d), *one, &params),
        all => ctx.enclave.ike_sa_rekey_additional(st.ike, Some(&st.sealed_sk_d), all, &params),
    };
    let ike = match made {
        Ok(ike) => ike,
        Err(e) => return failed(core, ctx, e.into()),
    };
    let nonce = Nonce { data: nonce_r.to_vec() };
    let rekey = rekey.clone();
    let (mut ours, seal) = match successor(core, ctx, ike, choice, Role::Initiator, rekey.spi, spi_r) {
        Ok(s) => s,
        Err(e) => {
            let _ = ctx.enclave.ike_sa_delete(ike);
            return failed(core, ctx, e);
        }
    };
    match core.rekey.theirs.take() {
        Some(theirs) if holds_lowest((&rekey.nonce_i, &nonce.data), (&theirs.nonce_i, &theirs.nonce_r)) => {
            // Ours is redundant: we delete it; the peer deletes the old SA.
            ours.core.queue.push_back(RequestKind::DeleteIke);
            ours.core.rekey.successor = Some(theirs.id);
            ctx.out.new_sas.push(ours);
            adopt_theirs(core, ctx, &theirs);
        }
        _ => {
            // Ours survives (the peer deletes its redundant one, if any); we delete the old.
            if let Some(to) = summary(&ours) {
                hand_over(core, ctx.out, to, seal);
            }
            ctx.out.new_sas.push(ours);
            core.queue.push_front(RequestKind::DeleteIke);
        }
    }
}

/// Hands the children to the peer's new SA (made earlier in this round or before) and
/// waits for the peer to delete the old one.
fn adopt_theirs<E: Enclave>(core: &mut Core, ctx: &mut Ctx<'_, E>, theirs: &Theirs) {
    let found =
        ctx.out.new_sas.iter().find(|s| s.core.id == theirs.id).or_else(|| ctx.ike_sas.get(&theirs.id.0));
    let Some(to) = found.and_then(summary) else { return };
    hand_over(core, ctx.out, to, theirs.seal);
    core.rekey.close_at = Some(super::later(ctx.now, CLOSE_WAIT));
}

/// Answers the peer's IKE rekey request on this (old) SA.
pub(super) fn respond<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    id: u32,
    to: (SocketAddr, SocketAddr),
    inner: &[Payload],
) {
    let reply = match answer(st, core, ctx, inner) {
        Ok(reply) => reply,
        Err((notify, data)) => vec![Payload::Notify(Notify::new(notify, data))],
    };
    /* <-- CREATE_CHILD_SA { SK { SA, Nr, KEr } } or { SK { N(error) } } */
    if core.respond(ctx, st.ike, &st.choice, ExchangeType::CREATE_CHILD_SA, id, reply, to).is_err() {
        ctx.out.counters.drop(DropReason::Malformed);
    }
}

/// Makes the peer's new IKE SA and the reply, or the notify that refuses it.
fn answer<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    inner: &[Payload],
) -> Result<Vec<Payload>, (NotifyType, Vec<u8>)> {
    let colliding = matches!(core.pending.as_ref().map(|p| &p.kind), Some(RequestKind::RekeyIkeSent(_)));
    let busy = match core.pending.as_ref().map(|p| &p.kind) {
        None | Some(RequestKind::Liveness) | Some(RequestKind::RekeyIkeSent(_)) => false,
        Some(_) => true,
    };
    // §2.25.2: a rekey of an SA that is closing, or that has work in flight, waits.
    if busy || core.rekey.successor.is_some() || core.rekey.theirs.is_some() {
        return Err((NotifyType::TEMPORARY_FAILURE, Vec::new()));
    }
    // A new rekey from the peer ends one of its whose IKE_FOLLOWUP_KE exchanges stopped.
    if let Some(old) = core.rekey.responding.take() {
        old.release(ctx);
    }
    let parts = Parts::of(inner);
    let (Some(sa), Some(nonce), Some(ke)) = (parts.sa, parts.nonce, parts.ke) else {
        return Err((NotifyType::INVALID_SYNTAX, Vec::new()));
    };
    let Some((number, choice)) = proposal::select_ike(sa, &core.conn.proposals, 8, true) else {
        return Err((NotifyType::NO_PROPOSAL_CHOSEN, Vec::new()));
    };
    if colliding && choice.additional_kes().next().is_some() {
        // A collision resolved over several exchanges each: one of the two goes through
        // when retried.
        return Err((NotifyType::TEMPORARY_FAILURE, Vec::new()));
    }
    let Some(spi_i) =
        sa.proposals.iter().find(|p| p.number == number).and_then(|p| p.ike_spi()).filter(|s| *s != 0)
    else {
        return Err((NotifyType::INVALID_SYNTAX, Vec::new()));
    };
    if ke.group.0 != choice.group.id() {
        // §1.3: the initiator guessed another group; tell it ours.
        return Err((NotifyType::INVALID_KE_PAYLOAD, choice.group.id().to_be_bytes().to_vec()));
    }
    if ke.data.len() != choice.group.public_len() || nonce.data.len() < choice.prf.output_len() / 2 {
        return Err((NotifyType::INVALID_SYNTAX, Vec::new()));
    }
    let internal = (NotifyType::NO_PROPOSAL_CHOSEN, Vec::new());
    let spi_r = fresh_spi(ctx, core.id).map_err(|_| internal.clone())?;
    let nonce_r = ctx.nonce().map_err(|_| internal.clone())?;
    let mut public = vec![0u8; choice.group.response_len()];
    let dh = ctx.enclave.ke_respond(choice.group, &ke.data, &mut public).map_err(|_| internal.clone())?;
    let mut reply = vec![
        Payload::Sa(proposal::ike_rekey_answer(number, &choice, spi_r)),
        Payload::Nonce(Nonce { data: nonce_r.clone() }),
        Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(choice.group.id()), public)),
    ];
    let remaining: VecDeque<DhGroup> = choice.additional_kes().collect();
    let r = Responding {
        choice,
        spi_i,
        spi_r,
        nonce_i: nonce.data.clone(),
        nonce_r,
        done: vec![(dh, ke.data.clone())],
        remaining,
    };
    if !r.remaining.is_empty() {
        /* <-- CREATE_CHILD_SA { SK { SA, Nr, KEr, N(ADDITIONAL_KEY_EXCHANGE) } } */
        reply.push(Payload::Notify(Notify::new(NotifyType::ADDITIONAL_KEY_EXCHANGE, LINK.to_vec())));
        core.rekey.responding = Some(r);
        return Ok(reply);
    }
    make_theirs(st, core, ctx, &r, colliding).map_err(|_| internal)?;
    Ok(reply)
}

/// The peer's new IKE SA from all its exchanges (each consumed), handed the children unless
/// our own rekey collides.
fn make_theirs<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    r: &Responding,
    colliding: bool,
) -> Result<(), Error> {
    let params = IkeSaParams {
        role: Role::Responder,
        prf: r.choice.prf,
        suite: r.choice.suite,
        nonce_i: &r.nonce_i,
        nonce_r: &r.nonce_r,
        spi_i: r.spi_i,
        spi_r: r.spi_r,
    };
    let kes: Vec<DhExchange<'_>> =
        r.done.iter().map(|(dh, p)| DhExchange { dh: *dh, peer_public: p }).collect();
    let ike = match kes.as_slice() {
        [one] => ctx.enclave.ike_sa_rekey(st.ike, Some(&st.sealed_sk_d), *one, &params)?,
        all => ctx.enclave.ike_sa_rekey_additional(st.ike, Some(&st.sealed_sk_d), all, &params)?,
    };
    let (theirs, seal) = match successor(core, ctx, ike, r.choice, Role::Responder, r.spi_i, r.spi_r) {
        Ok(s) => s,
        Err(e) => {
            let _ = ctx.enclave.ike_sa_delete(ike);
            return Err(e);
        }
    };
    if colliding {
        // Which SA survives is known once our own answer arrives.
        core.rekey.theirs =
            Some(Theirs { id: theirs.core.id, nonce_i: r.nonce_i.clone(), nonce_r: r.nonce_r.clone(), seal });
    } else {
        if let Some(to) = summary(&theirs) {
            hand_over(core, ctx.out, to, seal);
        }
        core.rekey.close_at = Some(super::later(ctx.now, CLOSE_WAIT));
    }
    ctx.out.new_sas.push(theirs);
    Ok(())
}

/// Answers the peer's IKE_FOLLOWUP_KE on this (old) SA: the next of its additional key
/// exchanges; after the last, its new IKE SA.
pub(super) fn respond_follow_up<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    id: u32,
    to: (SocketAddr, SocketAddr),
    inner: &[Payload],
) {
    let reply = match follow_up_answer(st, core, ctx, inner) {
        Ok(reply) => reply,
        Err(notify) => vec![Payload::Notify(Notify::new(notify, Vec::new()))],
    };
    /* <-- IKE_FOLLOWUP_KE { SK { KEr(n), [N(ADDITIONAL_KEY_EXCHANGE)] } } or { SK { N(error) } } */
    if core.respond(ctx, st.ike, &st.choice, ExchangeType::IKE_FOLLOWUP_KE, id, reply, to).is_err() {
        ctx.out.counters.drop(DropReason::Malformed);
    }
}

fn follow_up_answer<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    inner: &[Payload],
) -> Result<Vec<Payload>, NotifyType> {
    // §2.2.4: a link that is not ours (or no rekey of the peer's under way): the state is
    // gone, the peer starts over.
    let Some(mut r) = core.rekey.responding.take() else { return Err(NotifyType::STATE_NOT_FOUND) };
    if Parts::link(inner) != Some(LINK) {
        core.rekey.responding = Some(r);
        return Err(NotifyType::STATE_NOT_FOUND);
    }
    let Some(group) = r.remaining.pop_front() else {
        r.release(ctx);
        return Err(NotifyType::INVALID_SYNTAX);
    };
    let parts = Parts::of(inner);
    let Some(ke) = parts.ke.filter(|k| k.group.0 == group.id() && k.data.len() == group.public_len()) else {
        r.release(ctx);
        return Err(NotifyType::INVALID_SYNTAX);
    };
    let mut public = vec![0u8; group.response_len()];
    let dh = match ctx.enclave.ke_respond(group, &ke.data, &mut public) {
        Ok(dh) => dh,
        Err(_) => {
            r.release(ctx);
            return Err(NotifyType::INVALID_SYNTAX);
        }
    };
    r.done.push((dh, ke.data.clone()));
    let mut reply = vec![Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), public))];
    if !r.remaining.is_empty() {
        reply.push(Payload::Notify(Notify::new(NotifyType::ADDITIONAL_KEY_EXCHANGE, LINK.to_vec())));
        core.rekey.responding = Some(r);
        return Ok(reply);
    }
    let colliding = matches!(core.pending.as_ref().map(|p| &p.kind), Some(RequestKind::RekeyIkeSent(_)));
    match make_theirs(st, core, ctx, &r, colliding) {
        Ok(()) => Ok(reply),
        Err(_) => Err(NotifyType::NO_PROPOSAL_CHOSEN),
    }
}
