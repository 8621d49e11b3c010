//! One IKE SA: its exchanges as initiator and responder, one state type per phase.
//!
//! ```text
//! initiator                                   responder
//! ExpectSaInitResponse --IKE_SA_INIT-->        (stateless: cookie, INVALID_KE, NO_PROPOSAL)
//!                      <--                     ExpectAuthRequest   (half-open)
//! [ExpectIntermediateResponse --IKE_INTERMEDIATE--> <--]  (RFC 9370: once per
//!                                                          additional key exchange)
//! ExpectAuthResponse   --IKE_AUTH-->
//!                      <--                     Established
//! Established                                  Established
//!            <--INFORMATIONAL (delete, liveness)-->
//! ```
//!
//! Each phase's `process` consumes the phase and returns the next [`State`]; what every
//! phase shares (SPIs, addresses, message IDs, the outstanding request and its
//! retransmission, child SAs) lives in [`Core`].

use core::mem;
use core::net::SocketAddr;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use enclave::{
    AuthInput, ChildSaParams, DhExchange, DhGroup, DhHandle, Enclave, EstablishSeal, IkeSaHandle,
    IkeSaParams, Role, SealedBlob, SecretHandle,
};
use wire::ike::{
    Authentication, Delete, ExchangeType, HeaderFlags, Identification, IkeHeader, KeyExchange, Message,
    Nonce, Notify, NotifyType, Payload, ProtocolId, TrafficSelectors,
};

use crate::auth::PeerHashes;
use crate::config::{ChildConfig, Connection};
use crate::endpoint::EndpointConfig;
use crate::error::{Error, Side};
use crate::event::{
    ChildSa, Counters, DeleteReason, DropReason, Encapsulation, Event, SaId, SealReport, Transmit,
};
use crate::fragment::{self, Fragmentation, FragmentationPolicy};
use crate::nat::{self, NatState};
use crate::proposal::{self, EspProposal, IkeChoice};
use crate::random::RandomPool;
use crate::sk::{self, Datagrams, OpenError, Opened};
use crate::ts::{self, TrafficSelector};

mod authenticate;
mod carry;
mod child;
mod ike_rekey;
mod intermediate;

pub(crate) use ike_rekey::Handoff;

pub use authenticate::PeerAuth;
pub use carry::{Carried, CarriedIkeSa};

/// IKE's port (RFC 7296 §2).
pub const IKE_PORT: u16 = 500;
/// The NAT traversal port (RFC 7296 §2.23, RFC 3948): its datagrams carry a non-ESP marker.
pub const NATT_PORT: u16 = 4500;
pub(crate) use wire::udp_encap::NON_ESP_MARKER;
/// How many COOKIE or INVALID_KE_PAYLOAD answers an initiator follows before giving up.
const MAX_INIT_RETRIES: u8 = 3;
/// The longest retransmission interval.
const MAX_RETRANSMIT_INTERVAL: Duration = Duration::from_secs(300);
/// How long a child SA deleted after its rekey keeps its inbound side: packets the peer
/// sent with it just before the Delete may still be queued in the data plane.
pub const RETIRE_GRACE: Duration = Duration::from_secs(2);

/// Where outputs go while an SA is processed.
#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Datagrams to send.
    pub(crate) transmits: VecDeque<Transmit>,
    /// Events for the application.
    pub(crate) events: VecDeque<Event>,
    /// Drops and refusals.
    pub(crate) counters: Counters,
    /// IKE SAs made by rekeys, for the endpoint to add.
    pub(crate) new_sas: Vec<IkeSa>,
    /// Child SAs moving to a rekeyed IKE SA's successor, for the endpoint to deliver.
    pub(crate) handoffs: Vec<Handoff>,
    /// IKE SAs just established as responder whose IKE_AUTH carried INITIAL_CONTACT
    /// (RFC 7296 §2.4): the endpoint drops the other IKE SAs between the same identities.
    pub(crate) initial_contacts: Vec<SaId>,
}

impl Output {
    /// Queues an IKE message's datagrams (one, or its fragments).
    pub(crate) fn send_all(&mut self, local: SocketAddr, remote: SocketAddr, message: &[Vec<u8>]) {
        for datagram in message {
            self.send(local, remote, datagram);
        }
        if message.len() > 1 {
            self.counters.fragmented_sent += 1;
        }
    }

    /// Queues an IKE message, with the non-ESP marker on port 4500.
    pub(crate) fn send(&mut self, local: SocketAddr, remote: SocketAddr, message: &[u8]) {
        let mut contents = Vec::with_capacity(message.len() + 4);
        if local.port() == NATT_PORT || remote.port() == NATT_PORT {
            contents.extend_from_slice(&NON_ESP_MARKER);
        }
        contents.extend_from_slice(message);
        self.transmits.push_back(Transmit { local, remote, contents });
    }
}

/// What processing needs from the endpoint.
pub(crate) struct Ctx<'a, E> {
    /// The enclave.
    pub(crate) enclave: &'a mut E,
    /// Public random values, drawn from the enclave a block at a time.
    pub(crate) random: &'a mut RandomPool,
    /// Endpoint settings.
    pub(crate) config: &'a EndpointConfig,
    /// Outputs.
    pub(crate) out: &'a mut Output,
    /// Inbound child SPIs in use on this endpoint.
    pub(crate) child_spis: &'a mut HashSet<u32>,
    /// The endpoint's other IKE SAs, by our SPI.
    pub(crate) ike_sas: &'a HashMap<u64, IkeSa>,
    /// The endpoint's connections, for a responder that switches to the one whose
    /// identities the initiator's IKE_AUTH names.
    pub(crate) connections: &'a [Arc<Connection>],
    /// The endpoint's secrets, by name.
    pub(crate) secrets: &'a HashMap<String, SecretHandle>,
    /// The current time.
    pub(crate) now: Instant,
    /// The wall-clock time at `now`, if the endpoint knows it (certificate validity).
    pub(crate) wall: Option<SystemTime>,
}

impl<E: Enclave> Ctx<'_, E> {
    /// Random bytes from the enclave's generator, for values that go out in the clear.
    fn random(&mut self, out: &mut [u8]) -> Result<(), Error> {
        let enclave = &mut *self.enclave;
        self.random.fill(|b| enclave.random_nonce(b), out)
    }

    /// A fresh nonce, issued by the enclave (which accepts only its own in derivations).
    fn nonce(&mut self) -> Result<Vec<u8>, Error> {
        let enclave = &mut *self.enclave;
        self.random.nonce(|b| enclave.ike_nonces(b))
    }

    /// When to try a refused request again (TEMPORARY_FAILURE, §2.25): one to four seconds
    /// from now, at random, so that two peers refusing each other do not retry in step.
    fn retry_at(&mut self) -> Instant {
        let mut b = [0u8; 2];
        let jitter = match self.random(&mut b) {
            Ok(()) => u64::from(u16::from_be_bytes([b[0], b[1]])) % 3000,
            Err(_) => 1500,
        };
        later(self.now, Duration::from_millis(1000 + jitter))
    }

    /// A fresh inbound child SPI, unique on this endpoint and above the reserved range.
    fn child_spi(&mut self) -> Result<u32, Error> {
        loop {
            let mut b = [0u8; 4];
            self.random(&mut b)?;
            let spi = u32::from_be_bytes(b);
            if spi >= 0x100 && self.child_spis.insert(spi) {
                return Ok(spi);
            }
        }
    }
}

/// `t + d`, or as late as an `Instant` can be when that overflows (an absurd configured
/// duration must not panic).
fn later(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    t.checked_add(d).or_else(|| t.checked_add(CENTURY)).unwrap_or(t)
}

/// A random 64-bit IKE SPI from the enclave's generator, never zero.
pub(crate) fn random_ike_spi<E: Enclave>(enclave: &mut E, pool: &mut RandomPool) -> Result<u64, Error> {
    loop {
        let mut b = [0u8; 8];
        pool.fill(|x| enclave.random_nonce(x), &mut b)?;
        let spi = u64::from_be_bytes(b);
        if spi != 0 {
            return Ok(spi);
        }
    }
}

/// The phase of an IKE SA, for callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IkeSaState {
    /// Initiator: IKE_SA_INIT sent.
    ExpectSaInitResponse,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH (half-open).
    ExpectAuthRequest,
    /// Initiator: IKE_AUTH sent, or an IKE_INTERMEDIATE before it (RFC 9370).
    ExpectAuthResponse,
    /// Authenticated; child SAs may exist.
    Established,
    /// Gone (only seen while the endpoint removes it).
    Deleted,
}

/// What an outstanding request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RequestKind {
    /// IKE_SA_INIT.
    SaInit,
    /// IKE_INTERMEDIATE with an additional key exchange (RFC 9370).
    Intermediate,
    /// IKE_AUTH.
    Auth,
    /// INFORMATIONAL deleting these child SAs (our inbound SPIs).
    DeleteChild(Vec<u32>),
    /// INFORMATIONAL deleting the IKE SA.
    DeleteIke,
    /// An empty INFORMATIONAL (liveness check, §1.4).
    Liveness,
    /// INFORMATIONAL deleting a child SA the responder installed but we refused (our
    /// inbound SPI; no enclave state of ours).
    DeleteRefused(u32),
    /// CREATE_CHILD_SA rekeying the child with this inbound SPI (queued).
    RekeyChild(u32),
    /// CREATE_CHILD_SA creating the connection's child of this name (queued).
    NewChild(String),
    /// CREATE_CHILD_SA rekeying a child or creating one (sent).
    RekeyChildSent(child::ChildRekey),
    /// CREATE_CHILD_SA rekeying the IKE SA (queued): the group the peer asked for, if it
    /// did, and how often it has.
    RekeyIke(Option<DhGroup>, u8),
    /// CREATE_CHILD_SA rekeying the IKE SA (sent).
    RekeyIkeSent(ike_rekey::IkeRekey),
    /// IKE_FOLLOWUP_KE of our IKE rekey's additional key exchanges (RFC 9370, sent).
    RekeyIkeFollowUp(Box<ike_rekey::FollowUp>),
}

/// Our outstanding request and its retransmission schedule (§2.1, §2.4).
#[derive(Debug, Clone)]
struct Pending {
    id: u32,
    exchange: ExchangeType,
    bytes: Datagrams,
    kind: RequestKind,
    tries: u32,
    interval: Duration,
    deadline: Instant,
}

/// What every phase shares.
#[derive(Debug)]
pub(crate) struct Core {
    id: SaId,
    conn: Arc<Connection>,
    /// The pre-shared key or our private key.
    secret: SecretHandle,
    /// The hashes the peer announced for RFC 7427 signatures, if it did (in IKE_SA_INIT).
    peer_hashes: Option<PeerHashes>,
    /// How the peer proved its identity, once it has.
    peer_auth: Option<PeerAuth>,
    role: Role,
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
    /// Where the first message came from (the responder's IKE_SA_INIT index key).
    init_remote: SocketAddr,
    nat: NatState,
    /// The ID of our next request (§2.2).
    next_request: u32,
    /// The ID of the peer's next request.
    expected_request: u32,
    /// Our answer to the peer's last request, for its retransmissions.
    last_response: Option<(u32, Datagrams)>,
    /// The peer's last request as received (its datagrams), where the keys changed after
    /// it (an IKE_INTERMEDIATE): its retransmission no longer opens, so it is known by its
    /// bytes. Also the datagrams of an IKE_INTERMEDIATE request still coming in.
    last_request: Option<(u32, Vec<Vec<u8>>)>,
    incoming_intermediate: Option<(u32, Vec<Vec<u8>>)>,
    /// IKE fragmentation (RFC 7383): whether we send fragments, the peer's being put
    /// together.
    fragments: Fragmentation,
    pending: Option<Pending>,
    queue: VecDeque<RequestKind>,
    /// Requests to queue at a later time (retries after TEMPORARY_FAILURE).
    deferred: Vec<(Instant, RequestKind)>,
    /// Rekeying of this IKE SA.
    rekey: ike_rekey::RekeyState,
    children: Vec<ChildSa>,
    /// Children deleted by IKE whose inbound side lives until the instant (see
    /// [`RETIRE_GRACE`]).
    retiring: Vec<(Instant, ChildSa)>,
    /// Our inbound SPIs of children that have a successor and wait for their Delete.
    replaced: Vec<u32>,
    /// The peer's rekey of a child we are rekeying too (§2.8.1), until ours completes.
    collision: Option<child::Collision>,
    created: Instant,
    last_heard: Instant,
    /// Our IKE_AUTH request says INITIAL_CONTACT (§2.4): we initiate it while holding no
    /// other established IKE SA of its connection.
    initial_contact: bool,
}

/// One IKE SA.
#[derive(Debug)]
pub struct IkeSa {
    core: Core,
    state: State,
}

/// The phases.
#[derive(Debug)]
enum State {
    ExpectSaInitResponse(ExpectSaInitResponse),
    ExpectAuthRequest(ExpectAuthRequest),
    ExpectIntermediateResponse(Box<intermediate::ExpectIntermediateResponse>),
    ExpectAuthResponse(Box<ExpectAuthResponse>),
    Established(Established),
    Deleted,
}

/// Initiator, IKE_SA_INIT sent.
#[derive(Debug)]
struct ExpectSaInitResponse {
    dh: DhHandle,
    group: DhGroup,
    ke: Vec<u8>,
    nonce_i: Vec<u8>,
    cookie: Option<Vec<u8>>,
    retries: u8,
}

/// Responder, IKE_SA_INIT answered.
#[derive(Debug)]
struct ExpectAuthRequest {
    ike: IkeSaHandle,
    choice: IkeChoice,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    /// The IKE_SA_INIT request as received (the initiator's signed octets).
    request: Vec<u8>,
    /// Our IKE_SA_INIT response as sent (our signed octets).
    response: Vec<u8>,
    /// The additional key exchanges (RFC 9370) still due before IKE_AUTH, in order.
    intermediate: VecDeque<DhGroup>,
}

/// Initiator, IKE_AUTH sent.
#[derive(Debug)]
struct ExpectAuthResponse {
    ike: IkeSaHandle,
    choice: IkeChoice,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    /// The IKE_SA_INIT response as received (the responder's signed octets).
    response: Vec<u8>,
    child: OfferedChild,
}

/// The child SA offered in IKE_AUTH.
#[derive(Debug)]
struct OfferedChild {
    config: ChildConfig,
    spi: u32,
    proposals: Vec<EspProposal>,
    ts_i: Vec<TrafficSelector>,
    ts_r: Vec<TrafficSelector>,
}

/// Authenticated, SK_d sealed.
#[derive(Debug)]
struct Established {
    ike: IkeSaHandle,
    choice: IkeChoice,
    /// SK_d, sealed by the enclave; needed for child SAs and rekeys.
    sealed_sk_d: SealedBlob,
    /// The state a restarted enclave needs.
    sealed_state: SealedBlob,
}

impl State {
    fn ike(&self) -> Option<IkeSaHandle> {
        match self {
            Self::ExpectAuthRequest(s) => Some(s.ike),
            Self::ExpectIntermediateResponse(s) => Some(s.ike()),
            Self::ExpectAuthResponse(s) => Some(s.ike),
            Self::Established(s) => Some(s.ike),
            Self::ExpectSaInitResponse(_) | Self::Deleted => None,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::ExpectSaInitResponse(_) => "connecting",
            Self::ExpectAuthRequest(_) => "half-open",
            Self::ExpectIntermediateResponse(_) => "intermediate",
            Self::ExpectAuthResponse(_) => "authenticating",
            Self::Established(_) => "established",
            Self::Deleted => "deleted",
        }
    }
}

impl Core {
    /// The header of our message in this SA.
    fn header(&self, exchange: ExchangeType, response: bool, id: u32) -> IkeHeader {
        let mut flags = HeaderFlags::default();
        if self.role == Role::Initiator {
            flags = flags.with(HeaderFlags::INITIATOR);
        }
        if response {
            flags = flags.with(HeaderFlags::RESPONSE);
        }
        IkeHeader::new(self.spi_i, self.spi_r, exchange, flags, id)
    }

    /// Sends a new request and starts its retransmission schedule.
    fn send_request<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        exchange: ExchangeType,
        id: u32,
        bytes: Datagrams,
        kind: RequestKind,
    ) {
        ctx.out.send_all(self.local, self.remote, &bytes);
        let interval = ctx.config.retransmit_timeout;
        self.pending = Some(Pending {
            id,
            exchange,
            bytes,
            kind,
            tries: 1,
            interval,
            deadline: later(ctx.now, interval),
        });
    }

    /// Answers the peer's current request with an encrypted message and caches the answer.
    #[allow(clippy::too_many_arguments)]
    fn respond<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        choice: &IkeChoice,
        exchange: ExchangeType,
        id: u32,
        inner: Vec<Payload>,
        to: (SocketAddr, SocketAddr),
    ) -> Result<(), Error> {
        let fragment_at = self.fragment_at(ctx, to);
        let bytes =
            sk::seal(ctx.enclave, ike, choice.suite, self.header(exchange, true, id), inner, fragment_at)?;
        ctx.out.send_all(to.0, to.1, &bytes);
        self.last_response = Some((id, bytes));
        self.expected_request = id.saturating_add(1);
        Ok(())
    }

    /// The IKE_AUTH response that establishes the SA, then clear-and-seal: one enclave call
    /// for both ([`Enclave::sk_encrypt_establish`]). Nothing is sent when either fails.
    fn respond_established<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        choice: &IkeChoice,
        inner: Vec<Payload>,
        to: (SocketAddr, SocketAddr),
    ) -> Result<(SealedBlob, SealedBlob, SealReport), Error> {
        let id = self.expected_request;
        let header = self.header(ExchangeType::IKE_AUTH, true, id);
        let fragment_at = self.fragment_at(ctx, to);
        let (bytes, s) =
            sk::seal_with(ctx.enclave, ike, choice.suite, header, inner, fragment_at, |e, m, aad, pt| {
                e.sk_encrypt_establish(ike, m, aad, pt)
            })?;
        ctx.out.send_all(to.0, to.1, &bytes);
        self.last_response = Some((id, bytes));
        self.expected_request = id.saturating_add(1);
        self.last_request = None;
        self.incoming_intermediate = None;
        Ok(Self::seal_report(s))
    }

    /// Responder at IKE_AUTH: makes sure the connection is one whose identities the
    /// initiator names, as strongSwan does. The one chosen at IKE_SA_INIT (by addresses and
    /// proposals) is kept when it accepts IDi and IDr (if sent) is our ID; else the first
    /// connection of these addresses that would have taken the negotiated proposal, has its
    /// secret and fits both takes over, with its secret; else the first one is kept if it
    /// accepts IDi. `false`: no connection accepts the initiator.
    fn switch_to_identities<E: Enclave>(
        &mut self,
        ctx: &Ctx<'_, E>,
        choice: IkeChoice,
        id_i: &Identification,
        id_r: Option<&Identification>,
    ) -> bool {
        let fits = |c: &Connection| c.accepts_identity(id_i) && id_r.is_none_or(|r| *r == c.local_id);
        if fits(&self.conn) {
            return true;
        }
        let (local, remote) = (self.local.ip(), self.remote.ip());
        let other = ctx.connections.iter().find(|c| {
            fits(c)
                && c.matches_addresses(local, remote)
                && proposal::allows(&c.proposals, &choice)
                && ctx.secrets.contains_key(&c.secret)
        });
        match other.and_then(|c| ctx.secrets.get(&c.secret).map(|s| (c, *s))) {
            Some((c, secret)) => {
                self.conn = Arc::clone(c);
                self.secret = secret;
                true
            }
            None => self.conn.accepts_identity(id_i),
        }
    }

    /// Opens a received encrypted message or fragment ([`sk::open`]), counting the messages
    /// put together from fragments.
    fn open<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        datagram: &[u8],
        message: &Message,
    ) -> Result<Opened, OpenError> {
        let opened = sk::open(ctx.enclave, ike, datagram, message, &mut self.fragments, ctx.now);
        if matches!(opened, Ok(Opened::Whole(..))) && message.encrypted_fragment().is_some() {
            ctx.out.counters.reassembled += 1;
        }
        opened
    }

    /// The largest message one datagram between `to` carries, where we send fragments.
    fn fragment_at<E: Enclave>(&self, ctx: &Ctx<'_, E>, to: (SocketAddr, SocketAddr)) -> Option<usize> {
        self.fragments.send.then(|| fragment::max_message(ctx.config.fragment_size, to.0, to.1))
    }

    /// [`Self::fragment_at`] on the SA's own path.
    fn fragment_at_peer<E: Enclave>(&self, ctx: &Ctx<'_, E>) -> Option<usize> {
        self.fragment_at(ctx, (self.local, self.remote))
    }

    /// The group an INVALID_KE_PAYLOAD notify asks for (§1.2), if it is one of ours and not
    /// the one we just used.
    fn group_asked_for(&self, invalid: &Notify, used: DhGroup) -> Option<DhGroup> {
        let wanted = <[u8; 2]>::try_from(invalid.data.as_slice()).ok().map(u16::from_be_bytes)?;
        DhGroup::from_id(wanted)
            .filter(|g| *g != used && self.conn.proposals.iter().any(|p| p.groups.contains(g)))
    }

    /// Deletes one child's enclave state and SPI and reports it.
    fn release_child<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, child: ChildSa) {
        self.replaced.retain(|s| *s != child.spi_inbound);
        // The handles may already be gone if the enclave restarted; nothing else to do then.
        let _ = ctx.enclave.esp_sa_delete(child.handles.inbound);
        let _ = ctx.enclave.esp_sa_delete(child.handles.outbound);
        ctx.child_spis.remove(&child.spi_inbound);
        ctx.out.events.push_back(Event::ChildSaDeleted { sa: self.id, child });
    }

    /// Takes a child that a Delete exchange removed out of service. If another child of
    /// its configuration lives on (a rekey's successor, a collision's survivor), it retires
    /// for [`RETIRE_GRACE`] so its inbound side still takes packets in flight; otherwise
    /// it is released at once.
    fn close_child<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, child: ChildSa) {
        self.replaced.retain(|s| *s != child.spi_inbound);
        if self.children.iter().any(|c| c.name == child.name) {
            let until = later(ctx.now, RETIRE_GRACE);
            ctx.out.events.push_back(Event::ChildSaRetired { sa: self.id, child: child.clone(), until });
            self.retiring.push((until, child));
        } else {
            self.release_child(ctx, child);
        }
    }

    /// Releases retired children whose grace is over (all of them with `all`).
    fn release_retired<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, all: bool) {
        let now = ctx.now;
        let (due, keep): (Vec<_>, Vec<_>) =
            mem::take(&mut self.retiring).into_iter().partition(|(t, _)| all || *t <= now);
        self.retiring = keep;
        for (_, child) in due {
            self.release_child(ctx, child);
        }
    }

    /// Whether a Delete of our child with this inbound SPI is queued or outstanding.
    fn closing(&self, spi: u32) -> bool {
        let deletes = |k: &RequestKind| matches!(k, RequestKind::DeleteChild(spis) if spis.contains(&spi));
        self.pending.as_ref().is_some_and(|p| deletes(&p.kind)) || self.queue.iter().any(deletes)
    }

    /// Deletes children whose readiness was never reported (establishment failed late).
    fn release_unreported<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) {
        for child in mem::take(&mut self.children) {
            let _ = ctx.enclave.esp_sa_delete(child.handles.inbound);
            let _ = ctx.enclave.esp_sa_delete(child.handles.outbound);
            ctx.child_spis.remove(&child.spi_inbound);
        }
    }

    /// Tears down an SA that never got established and reports why.
    fn fail<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: Option<IkeSaHandle>,
        dh: Option<DhHandle>,
        error: Error,
    ) -> State {
        if let Some(ike) = ike {
            let _ = ctx.enclave.ike_sa_delete(ike);
        }
        if let Some(dh) = dh {
            let _ = ctx.enclave.dh_delete(dh);
        }
        self.pending = None;
        ctx.out.events.push_back(Event::IkeSaFailed {
            sa: self.id,
            connection: self.conn.name.clone(),
            error,
        });
        State::Deleted
    }

    /// Tears down an established SA with its children and reports it.
    fn delete_established<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        reason: DeleteReason,
    ) -> State {
        for child in mem::take(&mut self.children) {
            self.release_child(ctx, child);
        }
        self.release_retired(ctx, true);
        self.collision = None;
        let requests: Vec<RequestKind> =
            self.pending.take().map(|p| p.kind).into_iter().chain(self.queue.drain(..)).collect();
        for kind in requests {
            match kind {
                RequestKind::DeleteRefused(spi) => {
                    ctx.child_spis.remove(&spi);
                }
                RequestKind::RekeyChildSent(rekey) => rekey.release(ctx),
                RequestKind::RekeyIkeSent(rekey) => rekey.release(ctx),
                RequestKind::RekeyIkeFollowUp(fu) => fu.release(ctx),
                _ => {}
            }
        }
        if let Some(r) = self.rekey.responding.take() {
            r.release(ctx);
        }
        let _ = ctx.enclave.ike_sa_delete(ike);
        self.pending = None;
        self.queue.clear();
        self.deferred.clear();
        let reason = match reason {
            DeleteReason::Requested | DeleteReason::PeerDeleted if self.rekey.successor.is_some() => {
                DeleteReason::Rekeyed
            }
            other => other,
        };
        ctx.out.events.push_back(Event::IkeSaDeleted { sa: self.id, reason });
        State::Deleted
    }

    /// A child SA of this IKE SA as installed: endpoints and encapsulation come from the
    /// IKE SA, the rest from the negotiation.
    #[allow(clippy::too_many_arguments)]
    fn child_sa(
        &self,
        config: &ChildConfig,
        spi_inbound: u32,
        spi_outbound: u32,
        handles: enclave::ChildSaPair,
        esp: &proposal::EspChoice,
        local_ts: Vec<TrafficSelector>,
        remote_ts: Vec<TrafficSelector>,
    ) -> ChildSa {
        ChildSa {
            name: config.name.clone(),
            spi_inbound,
            spi_outbound,
            handles,
            suite: esp.suite,
            esn: esp.esn,
            local_ts,
            remote_ts,
            encapsulation: self.encapsulation(),
            local: self.local,
            remote: self.remote,
            rekey_time: config.rekey_time,
            life_time: config.life_time,
            volume: config.volume,
        }
    }

    /// The encapsulation child SAs of this IKE SA use.
    fn encapsulation(&self) -> Encapsulation {
        if self.nat.any() {
            Encapsulation::Udp { local_port: self.local.port(), remote_port: self.remote.port() }
        } else {
            Encapsulation::Esp
        }
    }

    /// Clear-and-seal after IKE_AUTH (EnclaveVPN §4.5.2), measuring trusted memory.
    fn seal<E: Enclave>(
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
    ) -> Result<(SealedBlob, SealedBlob, SealReport), Error> {
        Ok(Self::seal_report(ctx.enclave.establish_seal(ike)?))
    }

    /// The sealed blobs and what the engine reports about them.
    fn seal_report(s: EstablishSeal) -> (SealedBlob, SealedBlob, SealReport) {
        let report = SealReport {
            ike_sa_bytes_before: s.ike_sa_bytes_before,
            ike_sa_bytes_after: s.ike_sa_bytes_after,
            sealed_sk_d_len: s.sk_d.0.len(),
            sealed_state_len: s.state.0.len(),
        };
        (s.sk_d, s.state, report)
    }

    /// Reports establishment.
    fn established_event(&self, choice: IkeChoice, remote_id: Identification, seal: SealReport) -> Event {
        Event::IkeSaEstablished {
            sa: self.id,
            connection: self.conn.name.clone(),
            role: self.role,
            choice,
            local_id: self.conn.local_id.clone(),
            remote_id,
            local: self.local,
            remote: self.remote,
            nat: self.nat,
            seal,
        }
    }
}

/// The first payload of each kind in an inner chain.
#[derive(Default)]
struct Inner<'a> {
    id_i: Option<&'a Identification>,
    id_r: Option<&'a Identification>,
    auth: Option<&'a Authentication>,
    sa: Option<&'a wire::ike::Sa>,
    ts_i: Option<&'a TrafficSelectors>,
    ts_r: Option<&'a TrafficSelectors>,
    error: Option<NotifyType>,
    /// The initiator says this is its only IKE SA with us (§2.4).
    initial_contact: bool,
    /// Every CERT payload, in order.
    certs: Vec<&'a wire::ike::Certificate>,
}

impl<'a> Inner<'a> {
    fn of(payloads: &'a [Payload]) -> Self {
        let mut s = Self::default();
        for p in payloads {
            match p {
                Payload::IdInitiator(id) => s.id_i = s.id_i.or(Some(id)),
                Payload::IdResponder(id) => s.id_r = s.id_r.or(Some(id)),
                Payload::Auth(a) => s.auth = s.auth.or(Some(a)),
                Payload::Sa(sa) => s.sa = s.sa.or(Some(sa)),
                Payload::TsInitiator(t) => s.ts_i = s.ts_i.or(Some(t)),
                Payload::TsResponder(t) => s.ts_r = s.ts_r.or(Some(t)),
                Payload::Certificate(c) => s.certs.push(c),
                Payload::Notify(n) if n.ty.is_error() => s.error = s.error.or(Some(n.ty)),
                Payload::Notify(n) if n.ty == NotifyType::INITIAL_CONTACT => s.initial_contact = true,
                _ => {}
            }
        }
        s
    }
}

/// The error an error notify in an answer stands for.
fn peer_error(notify: NotifyType) -> Error {
    match notify {
        NotifyType::NO_PROPOSAL_CHOSEN => Error::NoProposalChosen { side: Side::Remote },
        NotifyType::AUTHENTICATION_FAILED => Error::AuthenticationFailed { side: Side::Remote },
        NotifyType::TS_UNACCEPTABLE => Error::TsUnacceptable { side: Side::Remote },
        other => Error::PeerError { notify: other },
    }
}

/// The IKE_SA_INIT request payloads.
fn sa_init_request(
    core: &Core,
    st: &ExpectSaInitResponse,
    config: &EndpointConfig,
) -> Result<Vec<u8>, Error> {
    let mut payloads = Vec::new();
    if let Some(cookie) = &st.cookie {
        // The cookie goes first (§2.6).
        payloads.push(Payload::Notify(Notify::new(NotifyType::COOKIE, cookie.clone())));
    }
    payloads.push(Payload::Sa(proposal::ike_sa_payload(&core.conn.proposals)));
    payloads.push(Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(st.group.id()), st.ke.clone())));
    payloads.push(Payload::Nonce(Nonce { data: st.nonce_i.clone() }));
    payloads.extend(nat::notifies(core.spi_i, 0, core.local, core.remote, core.conn.encap));
    if core.conn.uses_signatures() && config.signature_authentication {
        payloads.push(authenticate::hashes_notify());
    }
    if core.conn.fragmentation.announces() {
        payloads.push(fragment::supported_notify());
    }
    if core.conn.proposals.iter().any(proposal::IkeProposal::has_additional) {
        // RFC 9370 §2.2.1: additional key exchanges need IKE_INTERMEDIATE.
        payloads.push(Payload::Notify(Notify::new(NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED, Vec::new())));
    }
    let header = core.header(ExchangeType::IKE_SA_INIT, false, 0);
    Ok(Message::new(header, payloads).to_vec()?)
}

/// Settings of a new SA on either side.
pub(crate) struct NewSa {
    pub(crate) id: SaId,
    pub(crate) conn: Arc<Connection>,
    pub(crate) secret: SecretHandle,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    /// Whether to send INITIAL_CONTACT (initiator only).
    pub(crate) initial_contact: bool,
}

/// A validated IKE_SA_INIT request the responder accepts.
pub(crate) struct AcceptedInit<'a> {
    pub(crate) datagram: &'a [u8],
    pub(crate) message: &'a Message,
    pub(crate) choice: IkeChoice,
    pub(crate) number: u8,
    pub(crate) ke: &'a [u8],
    pub(crate) nonce_i: &'a [u8],
}

impl IkeSa {
    /// Starts an SA as initiator: sends IKE_SA_INIT.
    pub(crate) fn initiate<E: Enclave>(ctx: &mut Ctx<'_, E>, new: NewSa) -> Result<Self, Error> {
        let group = new
            .conn
            .proposals
            .first()
            .and_then(|p| p.groups.first().copied())
            .ok_or(Error::IncompleteProposal { proposal: String::new(), missing: "no DH group" })?;
        let nonce_i = ctx.nonce()?;
        let mut ke = vec![0u8; group.public_len()];
        let dh = ctx.enclave.dh_generate(group, &mut ke)?;
        let mut sa = Self {
            core: Core {
                id: new.id,
                conn: new.conn,
                secret: new.secret,
                peer_hashes: None,
                peer_auth: None,
                role: Role::Initiator,
                spi_i: new.id.0,
                spi_r: 0,
                local: new.local,
                remote: new.remote,
                init_remote: new.remote,
                nat: NatState::default(),
                next_request: 1,
                expected_request: 0,
                last_response: None,
                last_request: None,
                incoming_intermediate: None,
                fragments: Fragmentation::default(),
                pending: None,
                queue: VecDeque::new(),
                deferred: Vec::new(),
                rekey: ike_rekey::RekeyState::default(),
                children: Vec::new(),
                retiring: Vec::new(),
                replaced: Vec::new(),
                collision: None,
                created: ctx.now,
                last_heard: ctx.now,
                initial_contact: new.initial_contact,
            },
            state: State::Deleted,
        };
        let st = ExpectSaInitResponse { dh, group, ke, nonce_i, cookie: None, retries: 0 };
        let bytes = match sa_init_request(&sa.core, &st, ctx.config) {
            Ok(b) => b,
            Err(e) => {
                let _ = ctx.enclave.dh_delete(dh);
                return Err(e);
            }
        };
        /* IKE_SA_INIT { SA, KE, Ni, N(NATD_S), N(NATD_D), [N(FRAG_SUP)] } --> */
        sa.core.send_request(ctx, ExchangeType::IKE_SA_INIT, 0, vec![bytes], RequestKind::SaInit);
        sa.state = State::ExpectSaInitResponse(st);
        Ok(sa)
    }

    /// Answers an acceptable IKE_SA_INIT request (responder): derives the keys and sends
    /// the response; the SA is half-open until IKE_AUTH.
    pub(crate) fn respond<E: Enclave>(
        ctx: &mut Ctx<'_, E>,
        new: NewSa,
        init: &AcceptedInit<'_>,
    ) -> Result<Self, Error> {
        let spi_i = init.message.header.initiator_spi;
        let spi_r = new.id.0;
        let nonce_r = ctx.nonce()?;
        let group = init.choice.group;
        let mut ke = vec![0u8; group.public_len()];
        let params = IkeSaParams {
            role: Role::Responder,
            prf: init.choice.prf,
            suite: init.choice.suite,
            nonce_i: init.nonce_i,
            nonce_r: &nonce_r,
            spi_i,
            spi_r,
        };
        let ike = ctx.enclave.ike_sa_respond(group, init.ke, &mut ke, &params)?;
        let nat = nat::detect(init.message, new.local, new.remote);
        let mut payloads = vec![
            Payload::Sa(proposal::ike_answer(init.number, &init.choice)),
            Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), ke)),
            Payload::Nonce(Nonce { data: nonce_r.clone() }),
        ];
        if nat.supported {
            payloads.extend(nat::notifies(spi_i, spi_r, new.local, new.remote, new.conn.encap));
        }
        let peer_hashes = authenticate::peer_hashes(init.message);
        if peer_hashes.is_some() && new.conn.uses_signatures() && ctx.config.signature_authentication {
            payloads.push(authenticate::hashes_notify());
        }
        // RFC 7383 §2.3: announced back only to an initiator that announced it.
        let peer_fragments = init.message.notify(NotifyType::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
        let fragmentation = new.conn.fragmentation;
        if peer_fragments && fragmentation.announces() {
            payloads.push(fragment::supported_notify());
        }
        if init.choice.additional_kes().next().is_some() {
            // The initiator announced it (`proposal::select_ike` chose none otherwise).
            payloads
                .push(Payload::Notify(Notify::new(NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED, Vec::new())));
        }
        payloads.extend(authenticate::certreq(&new.conn));
        let header = IkeHeader::new(spi_i, spi_r, ExchangeType::IKE_SA_INIT, HeaderFlags::RESPONSE, 0);
        let response = match Message::new(header, payloads).to_vec() {
            Ok(r) => r,
            Err(e) => {
                let _ = ctx.enclave.ike_sa_delete(ike);
                return Err(e.into());
            }
        };
        /* <-- IKE_SA_INIT { SA, KE, Nr, N(NATD_S), N(NATD_D) } */
        ctx.out.send(new.local, new.remote, &response);
        let mut nat = nat;
        if new.conn.encap && nat.supported {
            // We sent a fake source hash: the initiator will see us behind a NAT.
            nat.local_behind_nat = true;
        }
        Ok(Self {
            core: Core {
                id: new.id,
                conn: new.conn,
                secret: new.secret,
                peer_hashes,
                peer_auth: None,
                role: Role::Responder,
                spi_i,
                spi_r,
                local: new.local,
                remote: new.remote,
                init_remote: new.remote,
                nat,
                next_request: 0,
                expected_request: 1,
                last_response: Some((0, vec![response.clone()])),
                last_request: None,
                incoming_intermediate: None,
                fragments: Fragmentation::new(peer_fragments && fragmentation == FragmentationPolicy::Yes),
                pending: None,
                queue: VecDeque::new(),
                deferred: Vec::new(),
                rekey: ike_rekey::RekeyState::default(),
                children: Vec::new(),
                retiring: Vec::new(),
                replaced: Vec::new(),
                collision: None,
                created: ctx.now,
                last_heard: ctx.now,
                initial_contact: false,
            },
            state: State::ExpectAuthRequest(ExpectAuthRequest {
                ike,
                choice: init.choice,
                nonce_i: init.nonce_i.to_vec(),
                nonce_r,
                request: init.datagram.to_vec(),
                response,
                intermediate: init.choice.additional_kes().collect(),
            }),
        })
    }

    /// The phase.
    pub fn state(&self) -> IkeSaState {
        match self.state {
            State::ExpectSaInitResponse(_) => IkeSaState::ExpectSaInitResponse,
            State::ExpectAuthRequest(_) => IkeSaState::ExpectAuthRequest,
            State::ExpectIntermediateResponse(_) | State::ExpectAuthResponse(_) => {
                IkeSaState::ExpectAuthResponse
            }
            State::Established(_) => IkeSaState::Established,
            State::Deleted => IkeSaState::Deleted,
        }
    }

    /// Our identifier of this SA.
    pub fn id(&self) -> SaId {
        self.core.id
    }

    /// The connection's name.
    pub fn connection(&self) -> &str {
        &self.core.conn.name
    }

    /// What the peer's INITIAL_CONTACT does to its other IKE SAs (the connection's setting).
    pub fn unique(&self) -> crate::config::Unique {
        self.core.conn.unique
    }

    /// Whether we initiated it.
    pub fn role(&self) -> Role {
        self.core.role
    }

    /// The initiator's and responder's SPIs.
    pub fn spis(&self) -> (u64, u64) {
        (self.core.spi_i, self.core.spi_r)
    }

    /// Our address and port now in use.
    pub fn local(&self) -> SocketAddr {
        self.core.local
    }

    /// The peer's address and port now in use.
    pub fn remote(&self) -> SocketAddr {
        self.core.remote
    }

    /// How the peer authenticated (method, signature scheme, certificate), once it has.
    pub fn peer_auth(&self) -> Option<&PeerAuth> {
        self.core.peer_auth.as_ref()
    }

    /// What NAT detection found.
    pub fn nat(&self) -> NatState {
        self.core.nat
    }

    /// The child SAs.
    pub fn children(&self) -> &[ChildSa] {
        &self.core.children
    }

    /// The negotiated IKE algorithms, once known.
    pub fn choice(&self) -> Option<IkeChoice> {
        match &self.state {
            State::ExpectAuthRequest(s) => Some(s.choice),
            State::ExpectIntermediateResponse(s) => Some(s.choice()),
            State::ExpectAuthResponse(s) => Some(s.choice),
            State::Established(s) => Some(s.choice),
            _ => None,
        }
    }

    /// The IKE SA's enclave handle and algorithms, for the fuzzing harness to forge
    /// authentic messages.
    #[cfg(fuzzing)]
    pub(crate) fn keys(&self) -> Option<(IkeSaHandle, IkeChoice)> {
        match &self.state {
            State::Established(s) => Some((s.ike, s.choice)),
            _ => None,
        }
    }

    /// The sealed SK_d blob, once established (safe to store untrusted).
    pub fn sealed_sk_d(&self) -> Option<&SealedBlob> {
        match &self.state {
            State::Established(s) => Some(&s.sealed_sk_d),
            _ => None,
        }
    }

    /// The sealed IKE SA state for a restarted enclave, once established.
    pub fn sealed_state(&self) -> Option<&SealedBlob> {
        match &self.state {
            State::Established(s) => Some(&s.sealed_state),
            _ => None,
        }
    }

    /// The responder's IKE_SA_INIT index key: where the request came from, and SPIi.
    pub(crate) fn init_key(&self) -> Option<(SocketAddr, u64)> {
        (self.core.role == Role::Responder).then_some((self.core.init_remote, self.core.spi_i))
    }

    /// Whether the SA is half-open (responder, before IKE_AUTH).
    pub(crate) fn is_half_open(&self) -> bool {
        matches!(self.state, State::ExpectAuthRequest(_))
    }

    /// Drops an established SA without an exchange: the peer's INITIAL_CONTACT on a newer
    /// IKE SA between the same identities says it has lost this one (RFC 7296 §2.4), so a
    /// Delete would go unanswered. Other states are left alone.
    pub(crate) fn supersede<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) {
        if let State::Established(st) = &self.state {
            let ike = st.ike;
            self.state = self.core.delete_established(ctx, ike, DeleteReason::Superseded);
        }
    }

    /// Whether the endpoint should forget the SA.
    pub(crate) fn is_deleted(&self) -> bool {
        matches!(self.state, State::Deleted)
    }

    /// The IKE_SA_INIT response again, for a retransmitted request (§2.1).
    pub(crate) fn resend_sa_init_response<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        local: SocketAddr,
        remote: SocketAddr,
    ) {
        match (&self.state, &self.core.last_response) {
            (State::ExpectAuthRequest(_), Some((0, bytes))) => {
                ctx.out.send_all(local, remote, bytes);
                ctx.out.counters.responses_resent += 1;
            }
            _ => ctx.out.counters.drop(DropReason::LateRetransmit),
        }
    }

    /// A datagram for this SA (already routed by SPI and decoded).
    pub(crate) fn handle<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        local: SocketAddr,
        remote: SocketAddr,
        datagram: &[u8],
        message: &Message,
    ) {
        let h = message.header;
        let response = h.flags.response();
        let init_response = response && h.exchange_type == ExchangeType::IKE_SA_INIT;
        if h.initiator_spi != self.core.spi_i || (!init_response && h.responder_spi != self.core.spi_r) {
            ctx.out.counters.drop(DropReason::SpiMismatch);
            return;
        }
        if response {
            self.handle_response(ctx, datagram, message);
        } else {
            self.handle_request(ctx, (local, remote), datagram, message);
        }
        self.pump(ctx);
    }

    /// A response: must answer our outstanding request.
    fn handle_response<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, datagram: &[u8], message: &Message) {
        let h = message.header;
        let Some(pending) = &self.core.pending else {
            ctx.out.counters.drop(DropReason::UnexpectedResponse);
            return;
        };
        if pending.id != h.message_id || pending.exchange != h.exchange_type {
            ctx.out.counters.drop(DropReason::UnexpectedResponse);
            return;
        }
        let kind = pending.kind.clone();
        let state = mem::replace(&mut self.state, State::Deleted);
        if let State::ExpectSaInitResponse(st) = state {
            self.core.last_heard = ctx.now;
            self.state = st.process(&mut self.core, ctx, datagram, message);
            return;
        }
        let Some(ike) = state.ike() else {
            self.state = state;
            ctx.out.counters.drop(DropReason::UnexpectedResponse);
            return;
        };
        let (inner, plain) = match self.core.open(ctx, ike, datagram, message) {
            Ok(Opened::Whole(inner, plain)) => (inner, plain),
            Ok(Opened::Waiting) => {
                self.state = state;
                return;
            }
            Err(OpenError::Fragment(reason)) => {
                self.state = state;
                ctx.out.counters.drop(reason);
                return;
            }
            Err(OpenError::Inner(_)) => {
                // Authentic but unparseable: the exchange has failed (§2.21.4); wait for
                // the retransmission schedule to end it rather than trusting nothing.
                self.state = state;
                ctx.out.counters.drop(DropReason::Malformed);
                return;
            }
            Err(OpenError::NoSk | OpenError::Integrity) => {
                self.state = state;
                ctx.out.counters.drop(DropReason::IntegrityCheckFailed);
                return;
            }
        };
        self.core.last_heard = ctx.now;
        self.core.pending = None;
        self.core.next_request = self.core.next_request.saturating_add(1);
        self.state = match state {
            State::ExpectIntermediateResponse(st) => st.process(&mut self.core, ctx, &h, &inner, &plain),
            State::ExpectAuthResponse(st) => st.process(&mut self.core, ctx, &inner),
            State::Established(st) => st.process_response(&mut self.core, ctx, kind, &inner),
            other => other,
        };
    }

    /// A request from the peer: in-window, a retransmission, or dropped (§2.3).
    fn handle_request<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        to: (SocketAddr, SocketAddr),
        datagram: &[u8],
        message: &Message,
    ) {
        let h = message.header;
        let Some(ike) = self.state.ike() else {
            ctx.out.counters.drop(DropReason::UnexpectedExchange);
            return;
        };
        // Fragments are kept only of the request we expect and of the last one (whose
        // retransmission earns our cached answer again, once it is whole).
        let current = h.message_id == self.core.expected_request;
        let previous = h.message_id.checked_add(1) == Some(self.core.expected_request);
        if message.encrypted_fragment().is_some() && !current && !previous {
            ctx.out.counters.drop(DropReason::OutOfWindow);
            return;
        }
        if let Some((id, seen)) = &self.core.last_request {
            if previous && *id == h.message_id && seen.iter().any(|d| d == datagram) {
                // Answered once per retransmission: on its last datagram.
                if let (Some(last), Some((_, bytes))) = (seen.last(), &self.core.last_response) {
                    if last == datagram {
                        ctx.out.send_all(to.0, to.1, bytes);
                        ctx.out.counters.responses_resent += 1;
                    }
                }
                return;
            }
        }
        if current && h.exchange_type == ExchangeType::IKE_INTERMEDIATE {
            let held = self.core.incoming_intermediate.get_or_insert_with(|| (h.message_id, Vec::new()));
            if held.0 != h.message_id {
                *held = (h.message_id, Vec::new());
            }
            if held.1.len() < usize::from(fragment::MAX_FRAGMENTS) {
                held.1.push(datagram.to_vec());
            }
        }
        let (inner, plain) = match self.core.open(ctx, ike, datagram, message) {
            Ok(Opened::Whole(inner, plain)) => (inner, plain),
            Ok(Opened::Waiting) => return,
            Err(OpenError::Fragment(reason)) => {
                ctx.out.counters.drop(reason);
                return;
            }
            Err(OpenError::NoSk | OpenError::Integrity) => {
                ctx.out.counters.drop(DropReason::IntegrityCheckFailed);
                return;
            }
            Err(OpenError::Inner(e)) => {
                // Authentic but malformed inside: answer with the matching notify if it is
                // the request we expect (§2.21.4).
                if h.message_id != self.core.expected_request {
                    ctx.out.counters.drop(DropReason::Malformed);
                    return;
                }
                ctx.out.counters.drop(DropReason::Malformed);
                let notify = Notify::for_decode_error(&e);
                self.answer_notify(ctx, ike, h.exchange_type, h.message_id, notify, to);
                if let State::ExpectAuthRequest(_) = self.state {
                    let state = mem::replace(&mut self.state, State::Deleted);
                    let error =
                        Error::InvalidMessage { exchange: "IKE_AUTH", why: "inner payloads do not decode" };
                    self.state = self.core.fail(ctx, state.ike(), None, error);
                }
                return;
            }
        };
        if h.message_id != self.core.expected_request {
            match &self.core.last_response {
                Some((id, bytes)) if *id == h.message_id => {
                    ctx.out.send_all(to.0, to.1, bytes);
                    ctx.out.counters.responses_resent += 1;
                }
                _ => ctx.out.counters.drop(DropReason::OutOfWindow),
            }
            return;
        }
        self.core.last_heard = ctx.now;
        let state = mem::replace(&mut self.state, State::Deleted);
        self.state = match (state, h.exchange_type) {
            (State::ExpectAuthRequest(st), ExchangeType::IKE_INTERMEDIATE) => {
                st.process_intermediate(&mut self.core, ctx, to, &h, &inner, &plain)
            }
            (State::ExpectAuthRequest(st), ExchangeType::IKE_AUTH) if !st.intermediate.is_empty() => {
                let error = Error::InvalidMessage {
                    exchange: "IKE_AUTH",
                    why: "IKE_AUTH before the additional key exchanges chosen",
                };
                self.core.fail(ctx, Some(st.ike), None, error)
            }
            (State::ExpectAuthRequest(st), ExchangeType::IKE_AUTH) => {
                st.process(&mut self.core, ctx, to, &inner)
            }
            (State::Established(st), ExchangeType::INFORMATIONAL) => {
                st.process_informational(&mut self.core, ctx, h.message_id, to, &inner)
            }
            (State::Established(st), ExchangeType::IKE_FOLLOWUP_KE) => {
                ike_rekey::respond_follow_up(&st, &mut self.core, ctx, h.message_id, to, &inner);
                State::Established(st)
            }
            (State::Established(st), ExchangeType::CREATE_CHILD_SA) if ike_rekey::is_ike_rekey(&inner) => {
                ike_rekey::respond(&st, &mut self.core, ctx, h.message_id, to, &inner);
                State::Established(st)
            }
            (State::Established(st), ExchangeType::CREATE_CHILD_SA) => {
                child::respond(&st, &mut self.core, ctx, h.message_id, to, &inner);
                State::Established(st)
            }
            (state, _) => {
                ctx.out.counters.drop(DropReason::UnexpectedExchange);
                state
            }
        };
    }

    /// Answers the current request with a single notify.
    fn answer_notify<E: Enclave>(
        &mut self,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        exchange: ExchangeType,
        id: u32,
        notify: Notify,
        to: (SocketAddr, SocketAddr),
    ) {
        let Some(choice) = self.choice() else { return };
        let _ = self.core.respond(ctx, ike, &choice, exchange, id, vec![Payload::Notify(notify)], to);
    }

    /// Sends the next queued request when none is outstanding.
    fn pump<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) {
        if self.core.pending.is_some() {
            return;
        }
        let State::Established(st) = &self.state else { return };
        let (ike, choice) = (st.ike, st.choice);
        while let Some(kind) = self.core.queue.pop_front() {
            let (exchange, inner, kind) = match kind {
                RequestKind::DeleteChild(spis) => {
                    let live: Vec<u32> = spis
                        .iter()
                        .copied()
                        .filter(|s| self.core.children.iter().any(|c| c.spi_inbound == *s))
                        .collect();
                    if live.is_empty() {
                        continue;
                    }
                    let inner = vec![Payload::Delete(Delete::child(ProtocolId::ESP, &live))];
                    (ExchangeType::INFORMATIONAL, inner, RequestKind::DeleteChild(live))
                }
                RequestKind::DeleteRefused(spi) => {
                    let inner = vec![Payload::Delete(Delete::child(ProtocolId::ESP, &[spi]))];
                    (ExchangeType::INFORMATIONAL, inner, RequestKind::DeleteRefused(spi))
                }
                RequestKind::DeleteIke => (
                    ExchangeType::INFORMATIONAL,
                    vec![Payload::Delete(Delete::ike())],
                    RequestKind::DeleteIke,
                ),
                RequestKind::Liveness => (ExchangeType::INFORMATIONAL, Vec::new(), RequestKind::Liveness),
                RequestKind::RekeyChild(old) => match child::rekey_request(&self.core, ctx, old) {
                    Ok((rekey, inner)) => {
                        (ExchangeType::CREATE_CHILD_SA, inner, RequestKind::RekeyChildSent(rekey))
                    }
                    // The child went away meanwhile.
                    Err(_) => continue,
                },
                RequestKind::NewChild(name) => match child::new_child_request(&self.core, ctx, &name) {
                    Ok((new, inner)) => {
                        (ExchangeType::CREATE_CHILD_SA, inner, RequestKind::RekeyChildSent(new))
                    }
                    Err(error) => {
                        ctx.out.events.push_back(Event::ChildSaFailed {
                            sa: self.core.id,
                            child: name,
                            error,
                        });
                        continue;
                    }
                },
                RequestKind::RekeyIke(group, retries) => {
                    // A rekeyed SA is not rekeyed again: its successor is.
                    if self.core.rekey.successor.is_some() {
                        continue;
                    }
                    match ike_rekey::request(&self.core, st, ctx, group, retries) {
                        Ok((rekey, inner)) => {
                            (ExchangeType::CREATE_CHILD_SA, inner, RequestKind::RekeyIkeSent(rekey))
                        }
                        Err(error) => {
                            ctx.out.events.push_back(Event::IkeSaRekeyFailed { sa: self.core.id, error });
                            continue;
                        }
                    }
                }
                RequestKind::SaInit
                | RequestKind::Intermediate
                | RequestKind::Auth
                | RequestKind::RekeyChildSent(_)
                | RequestKind::RekeyIkeSent(_)
                | RequestKind::RekeyIkeFollowUp(_) => continue,
            };
            let id = self.core.next_request;
            let header = self.core.header(exchange, false, id);
            let fragment_at = self.core.fragment_at_peer(ctx);
            match sk::seal(ctx.enclave, ike, choice.suite, header, inner, fragment_at) {
                Ok(bytes) => {
                    /* INFORMATIONAL { SK { [D] } } or CREATE_CHILD_SA { SK { N(REKEY_SA), SA, Ni, [KEi], TSi, TSr } } --> */
                    self.core.send_request(ctx, exchange, id, bytes, kind);
                    return;
                }
                Err(_) => match &kind {
                    RequestKind::RekeyChildSent(rekey) => rekey.release(ctx),
                    RequestKind::RekeyIkeSent(rekey) => rekey.release(ctx),
                    _ => {}
                },
            }
        }
    }

    /// Retransmissions, half-open expiry, liveness checks, stale fragments.
    pub(crate) fn handle_timeout<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) {
        let now = ctx.now;
        self.core.fragments.expire(now);
        if let Some(p) = &mut self.core.pending {
            if now >= p.deadline {
                if p.tries >= ctx.config.retransmit_tries {
                    let (tries, kind) = (p.tries, p.kind.clone());
                    self.core.pending = None;
                    let state = mem::replace(&mut self.state, State::Deleted);
                    self.state = match state {
                        State::Established(st) => {
                            let reason = if kind == RequestKind::DeleteIke {
                                DeleteReason::Requested
                            } else {
                                DeleteReason::PeerUnreachable
                            };
                            match &kind {
                                RequestKind::RekeyChildSent(rekey) => rekey.release(ctx),
                                RequestKind::RekeyIkeSent(rekey) => rekey.release(ctx),
                                RequestKind::RekeyIkeFollowUp(fu) => fu.release(ctx),
                                _ => {}
                            }
                            self.core.delete_established(ctx, st.ike, reason)
                        }
                        State::ExpectSaInitResponse(st) => {
                            self.core.fail(ctx, None, Some(st.dh), Error::Timeout { tries })
                        }
                        State::ExpectAuthResponse(st) => {
                            ctx.child_spis.remove(&st.child.spi);
                            self.core.fail(ctx, Some(st.ike), None, Error::Timeout { tries })
                        }
                        State::ExpectIntermediateResponse(st) => {
                            st.fail(&mut self.core, ctx, Error::Timeout { tries })
                        }
                        other => {
                            let ike = other.ike();
                            self.core.fail(ctx, ike, None, Error::Timeout { tries })
                        }
                    };
                    return;
                }
                /* (retransmission) --> */
                p.tries += 1;
                p.interval = p.interval.saturating_mul(2).min(MAX_RETRANSMIT_INTERVAL);
                p.deadline = later(now, p.interval);
                ctx.out.counters.retransmits += 1;
                let bytes = p.bytes.clone();
                ctx.out.send_all(self.core.local, self.core.remote, &bytes);
            }
        }
        if let State::ExpectAuthRequest(st) = &self.state {
            if now >= later(self.core.created, ctx.config.half_open_timeout) {
                let _ = ctx.enclave.ike_sa_delete(st.ike);
                ctx.out.counters.drop(DropReason::HalfOpenExpired);
                self.state = State::Deleted;
                return;
            }
        }
        if let State::Established(st) = &self.state {
            let ike = st.ike;
            let (due, later_ones): (Vec<_>, Vec<_>) =
                mem::take(&mut self.core.deferred).into_iter().partition(|(t, _)| *t <= now);
            self.core.deferred = later_ones;
            self.core.queue.extend(due.into_iter().map(|(_, k)| k));
            self.core.release_retired(ctx, false);
            if self.core.rekey.successor.is_some() {
                // A rekeyed SA only waits for its Delete; past CLOSE_WAIT it sends its own.
                if self.core.rekey.close_at.is_some_and(|t| now >= t) {
                    self.core.rekey.close_at = None;
                    self.core.queue.push_back(RequestKind::DeleteIke);
                }
            } else if now >= self.hard_expiry() {
                /* INFORMATIONAL { SK { D(IKE) } } --> (not awaited: the SA is gone either way) */
                let header = self.core.header(ExchangeType::INFORMATIONAL, false, self.core.next_request);
                let delete = vec![Payload::Delete(Delete::ike())];
                let fragment_at = self.core.fragment_at_peer(ctx);
                if let Ok(bytes) = sk::seal(ctx.enclave, ike, st.choice.suite, header, delete, fragment_at) {
                    ctx.out.send_all(self.core.local, self.core.remote, &bytes);
                }
                self.state = self.core.delete_established(ctx, ike, DeleteReason::Expired);
                return;
            } else if !self.core.rekey.soft_expired && now >= self.soft_expiry() {
                self.core.rekey.soft_expired = true;
                self.core.queue.push_back(RequestKind::RekeyIke(None, 0));
            }
        }
        if let (State::Established(_), Some(delay)) = (&self.state, self.core.conn.dpd_delay) {
            if self.core.pending.is_none()
                && self.core.queue.is_empty()
                && self.core.rekey.successor.is_none()
                && now >= later(self.core.last_heard, delay)
            {
                self.core.queue.push_back(RequestKind::Liveness);
            }
        }
        self.pump(ctx);
    }

    /// When [`Self::handle_timeout`] has something to do.
    pub(crate) fn next_timeout(&self, config: &EndpointConfig) -> Option<Instant> {
        let mut next = self.core.pending.as_ref().map(|p| p.deadline);
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        match &self.state {
            State::ExpectAuthRequest(_) => consider(later(self.core.created, config.half_open_timeout)),
            State::Established(_) => {
                if let Some(delay) = self.core.conn.dpd_delay {
                    if self.core.pending.is_none() && self.core.rekey.successor.is_none() {
                        consider(later(self.core.last_heard, delay));
                    }
                }
                for (t, _) in &self.core.deferred {
                    consider(*t);
                }
                for (t, _) in &self.core.retiring {
                    consider(*t);
                }
                if self.core.rekey.successor.is_some() {
                    if let Some(t) = self.core.rekey.close_at {
                        consider(t);
                    }
                } else {
                    consider(self.hard_expiry());
                    if !self.core.rekey.soft_expired {
                        consider(self.soft_expiry());
                    }
                }
            }
            _ => {}
        }
        next
    }

    /// Queues a Delete of one child SA (by our inbound SPI).
    pub(crate) fn delete_child<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, spi: u32) -> Result<(), Error> {
        if !matches!(self.state, State::Established(_)) {
            return Err(Error::WrongState { state: self.state.name(), what: "delete a child SA" });
        }
        if !self.core.children.iter().any(|c| c.spi_inbound == spi) {
            return Err(Error::UnknownChildSa { spi });
        }
        self.core.queue.push_back(RequestKind::DeleteChild(vec![spi]));
        self.pump(ctx);
        Ok(())
    }

    /// Queues a Delete of the IKE SA.
    pub(crate) fn delete<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) -> Result<(), Error> {
        if !matches!(self.state, State::Established(_)) {
            return Err(Error::WrongState { state: self.state.name(), what: "delete the IKE SA" });
        }
        self.core.queue.push_back(RequestKind::DeleteIke);
        self.pump(ctx);
        Ok(())
    }

    /// Queues a CREATE_CHILD_SA rekeying one child SA (by our inbound SPI).
    pub(crate) fn rekey_child<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, spi: u32) -> Result<(), Error> {
        if !matches!(self.state, State::Established(_)) {
            return Err(Error::WrongState { state: self.state.name(), what: "rekey a child SA" });
        }
        if !self.core.children.iter().any(|c| c.spi_inbound == spi) {
            return Err(Error::UnknownChildSa { spi });
        }
        let queued = self.core.replaced.contains(&spi)
            || self.core.closing(spi)
            || self.core.queue.contains(&RequestKind::RekeyChild(spi))
            || self.core.deferred.iter().any(|(_, k)| *k == RequestKind::RekeyChild(spi))
            || matches!(self.core.pending.as_ref().map(|p| &p.kind), Some(RequestKind::RekeyChildSent(r)) if r.old == Some(spi));
        if queued {
            // Rekeyed already (its fresh successor only waits for the old one's Delete), or
            // asked twice (both directions' soft limits, an operator racing the peer): one
            // rekey will do.
            return Ok(());
        }
        self.core.queue.push_back(RequestKind::RekeyChild(spi));
        self.pump(ctx);
        Ok(())
    }

    /// Queues a CREATE_CHILD_SA rekeying this IKE SA (RFC 7296 §1.3.2).
    pub(crate) fn rekey_ike<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) -> Result<(), Error> {
        if !matches!(self.state, State::Established(_)) || self.core.rekey.successor.is_some() {
            let state = if self.core.rekey.successor.is_some() { "rekeyed" } else { self.state.name() };
            return Err(Error::WrongState { state, what: "rekey the IKE SA" });
        }
        self.core.queue.push_back(RequestKind::RekeyIke(None, 0));
        self.pump(ctx);
        Ok(())
    }

    /// Sends what a new SA has queued (a redundant rekey's Delete).
    pub(crate) fn start<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) {
        self.pump(ctx);
    }

    /// Takes over child SAs and queued work from the IKE SA this one succeeds.
    pub(crate) fn adopt<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>, handoff: Handoff) {
        self.core.children.extend(handoff.children);
        self.core.retiring.extend(handoff.retiring);
        self.core.replaced.extend(handoff.replaced);
        self.core.queue.extend(handoff.queue);
        self.pump(ctx);
    }

    /// The SA this one was rekeyed into, if it was.
    pub fn successor(&self) -> Option<SaId> {
        self.core.rekey.successor
    }

    /// When the IKE SA starts its rekey (`rekey_time` after it was made).
    fn soft_expiry(&self) -> Instant {
        later(self.core.created, self.core.conn.rekey_time)
    }

    /// When the IKE SA is deleted without a successful rekey.
    fn hard_expiry(&self) -> Instant {
        later(self.core.created, self.core.conn.rekey_time.saturating_add(self.core.conn.over_time))
    }

    /// Queues a liveness check.
    pub(crate) fn check_liveness<E: Enclave>(&mut self, ctx: &mut Ctx<'_, E>) -> Result<(), Error> {
        if !matches!(self.state, State::Established(_)) {
            return Err(Error::WrongState { state: self.state.name(), what: "check liveness" });
        }
        self.core.queue.push_back(RequestKind::Liveness);
        self.pump(ctx);
        Ok(())
    }
}

impl ExpectSaInitResponse {
    /// The IKE_SA_INIT response: a cookie or group to retry with, an error, or the
    /// responder's SA, KE and nonce, after which IKE_AUTH goes out.
    fn process<E: Enclave>(
        mut self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        datagram: &[u8],
        message: &Message,
    ) -> State {
        /* <-- IKE_SA_INIT { N(COOKIE) } */
        if let Some(cookie) = message.notify(NotifyType::COOKIE) {
            if self.retries >= MAX_INIT_RETRIES || cookie.data.is_empty() || cookie.data.len() > 64 {
                let error =
                    Error::InvalidMessage { exchange: "IKE_SA_INIT", why: "unusable or repeated COOKIE" };
                return core.fail(ctx, None, Some(self.dh), error);
            }
            self.retries += 1;
            self.cookie = Some(cookie.data.clone());
            return self.resend(core, ctx);
        }
        /* <-- IKE_SA_INIT { N(INVALID_KE_PAYLOAD) } */
        if let Some(invalid) = message.notify(NotifyType::INVALID_KE_PAYLOAD) {
            let wanted = core.group_asked_for(invalid, self.group);
            let Some(group) = wanted.filter(|_| self.retries < MAX_INIT_RETRIES) else {
                return core.fail(
                    ctx,
                    None,
                    Some(self.dh),
                    Error::PeerError { notify: NotifyType::INVALID_KE_PAYLOAD },
                );
            };
            let _ = ctx.enclave.dh_delete(self.dh);
            let mut ke = vec![0u8; group.public_len()];
            match ctx.enclave.dh_generate(group, &mut ke) {
                Ok(dh) => {
                    self.dh = dh;
                    self.group = group;
                    self.ke = ke;
                    self.retries += 1;
                    return self.resend(core, ctx);
                }
                Err(e) => {
                    ctx.out.events.push_back(Event::IkeSaFailed {
                        sa: core.id,
                        connection: core.conn.name.clone(),
                        error: e.into(),
                    });
                    core.pending = None;
                    return State::Deleted;
                }
            }
        }
        if let Some(error) = message.notifies().find(|n| n.ty.is_error()) {
            return core.fail(ctx, None, Some(self.dh), peer_error(error.ty));
        }
        /* <-- IKE_SA_INIT { SA, KE, Nr, N(NATD_S), N(NATD_D) } */
        let invalid = |why| Error::InvalidMessage { exchange: "IKE_SA_INIT", why };
        let (Some(sa), Some(ke), Some(nonce)) = sa_ke_nonce(message) else {
            return core.fail(ctx, None, Some(self.dh), invalid("SA, KE or Nr missing"));
        };
        let spi_r = message.header.responder_spi;
        if spi_r == 0 {
            return core.fail(ctx, None, Some(self.dh), invalid("responder SPI is zero"));
        }
        let Some(choice) = proposal::accept_ike_answer(sa, &core.conn.proposals) else {
            return core.fail(ctx, None, Some(self.dh), invalid("the SA chose something we did not offer"));
        };
        if choice.group != self.group
            || ke.group.0 != self.group.id()
            || ke.data.len() != self.group.public_len()
        {
            return core.fail(ctx, None, Some(self.dh), invalid("KE does not match the group we sent"));
        }
        if nonce.data.len() < choice.prf.output_len() / 2 {
            return core.fail(ctx, None, Some(self.dh), invalid("Nr shorter than half the PRF key"));
        }
        let nonce_r = nonce.data.clone();
        let params = IkeSaParams {
            role: Role::Initiator,
            prf: choice.prf,
            suite: choice.suite,
            nonce_i: &self.nonce_i,
            nonce_r: &nonce_r,
            spi_i: core.spi_i,
            spi_r,
        };
        // The DH private value is consumed whether or not this succeeds.
        let ike = match ctx.enclave.ike_sa_create(DhExchange { dh: self.dh, peer_public: &ke.data }, &params)
        {
            Ok(ike) => ike,
            Err(e) => return core.fail(ctx, None, None, e.into()),
        };
        core.spi_r = spi_r;
        core.peer_hashes = authenticate::peer_hashes(message);
        let peer_fragments = message.notify(NotifyType::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
        core.fragments.send = peer_fragments && core.conn.fragmentation == FragmentationPolicy::Yes;
        core.nat = nat::detect(message, core.local, core.remote);
        if core.conn.encap && core.nat.supported {
            core.nat.local_behind_nat = true;
        }
        if core.nat.any() {
            // §2.23: with a NAT on the path, IKE moves to port 4500 from IKE_AUTH on.
            core.local.set_port(NATT_PORT);
            core.remote.set_port(NATT_PORT);
        }
        if choice.additional_kes().next().is_some()
            && message.notify(NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED).is_none()
        {
            let why = "additional key exchanges chosen without IKE_INTERMEDIATE";
            return core.fail(ctx, Some(ike), None, invalid(why));
        }
        let request = core.pending.take().and_then(|p| p.bytes.into_iter().next()).unwrap_or_default();
        intermediate::after_sa_init(core, ctx, ike, choice, self.nonce_i, nonce_r, request, datagram.to_vec())
    }

    /// Sends IKE_SA_INIT again after a cookie or group change (a new request, same ID 0).
    fn resend<E: Enclave>(self, core: &mut Core, ctx: &mut Ctx<'_, E>) -> State {
        match sa_init_request(core, &self, ctx.config) {
            Ok(bytes) => {
                /* IKE_SA_INIT { [N(COOKIE)], SA, KE, Ni, N(NATD_S), N(NATD_D), [N(FRAG_SUP)] } --> */
                core.send_request(ctx, ExchangeType::IKE_SA_INIT, 0, vec![bytes], RequestKind::SaInit);
                State::ExpectSaInitResponse(self)
            }
            Err(e) => core.fail(ctx, None, Some(self.dh), e),
        }
    }
}

impl ExpectAuthResponse {
    /// Builds and sends IKE_AUTH with the first child SA.
    #[allow(clippy::too_many_arguments)]
    fn start<E: Enclave>(
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        ike: IkeSaHandle,
        choice: IkeChoice,
        nonce_i: Vec<u8>,
        nonce_r: Vec<u8>,
        sa_init_request: &[u8],
        sa_init_response: Vec<u8>,
    ) -> Result<Self, Error> {
        let config = core.conn.children.first().cloned().ok_or(Error::MissingField {
            connection: core.conn.name.clone(),
            field: "children",
            why: "a child SA",
        })?;
        let spi = ctx.child_spi()?;
        let ts_i: Vec<TrafficSelector> = config.local_ts.iter().map(|t| t.resolve(core.local.ip())).collect();
        let ts_r: Vec<TrafficSelector> =
            config.remote_ts.iter().map(|t| t.resolve(core.remote.ip())).collect();
        let id_i = core.conn.local_id.clone();
        let input =
            AuthInput { real_message: sa_init_request, peer_nonce: &nonce_r, id_body: &id_i.body_bytes() };
        let auth = match authenticate::our_auth(core, ctx, ike, &input) {
            Ok(a) => a,
            Err(e) => {
                ctx.child_spis.remove(&spi);
                return Err(e);
            }
        };
        let mut inner = vec![Payload::IdInitiator(id_i)];
        inner.extend(authenticate::certs(&core.conn));
        if core.initial_contact {
            inner.push(Payload::Notify(Notify::new(NotifyType::INITIAL_CONTACT, vec![])));
        }
        inner.extend(authenticate::certreq(&core.conn));
        if let Some(id_r) = &core.conn.remote_id {
            inner.push(Payload::IdResponder(id_r.clone()));
        }
        inner.push(Payload::Auth(auth));
        inner.push(Payload::Sa(proposal::esp_sa_payload(&config.esp_proposals, spi, false)));
        inner.push(Payload::TsInitiator(ts::to_payload(&ts_i)));
        inner.push(Payload::TsResponder(ts::to_payload(&ts_r)));
        let id = core.next_request;
        let header = core.header(ExchangeType::IKE_AUTH, false, id);
        let fragment_at = core.fragment_at_peer(ctx);
        let bytes = match sk::seal(ctx.enclave, ike, choice.suite, header, inner, fragment_at) {
            Ok(b) => b,
            Err(e) => {
                ctx.child_spis.remove(&spi);
                return Err(e);
            }
        };
        /* IKE_AUTH { SK { IDi, [CERT+], N(INITIAL_CONTACT), [CERTREQ], [IDr], AUTH, SAi2, TSi, TSr } } --> */
        core.send_request(ctx, ExchangeType::IKE_AUTH, id, bytes, RequestKind::Auth);
        let proposals = config.esp_proposals.clone();
        Ok(Self {
            ike,
            choice,
            nonce_i,
            nonce_r,
            response: sa_init_response,
            child: OfferedChild { config, spi, proposals, ts_i, ts_r },
        })
    }

    /// The IKE_AUTH response: verify the responder, then install the child SA.
    fn process<E: Enclave>(self, core: &mut Core, ctx: &mut Ctx<'_, E>, inner: &[Payload]) -> State {
        let found = Inner::of(inner);
        let spi = self.child.spi;
        let fail = |core: &mut Core, ctx: &mut Ctx<'_, E>, error| {
            ctx.child_spis.remove(&spi);
            core.fail(ctx, Some(self.ike), None, error)
        };
        /* <-- IKE_AUTH { SK { N(AUTHENTICATION_FAILED) } } */
        let (Some(id_r), Some(auth)) = (found.id_r, found.auth) else {
            let error = match found.error {
                Some(n) => peer_error(n),
                None => Error::InvalidMessage { exchange: "IKE_AUTH", why: "IDr or AUTH missing" },
            };
            return fail(core, ctx, error);
        };
        /* <-- IKE_AUTH { SK { IDr, [CERT+], AUTH, SAr2, TSi, TSr } } */
        let input = AuthInput {
            real_message: &self.response,
            peer_nonce: &self.nonce_i,
            id_body: &id_r.body_bytes(),
        };
        let verified = if core.conn.accepts_identity(id_r) {
            authenticate::verify_peer(core, ctx, self.ike, &found, id_r, auth, &input)
        } else {
            Err(Error::IdentityMismatch)
        };
        if let Err(error) = verified {
            // §2.21.2: tell the responder in a separate INFORMATIONAL, then forget the SA.
            let header = core.header(ExchangeType::INFORMATIONAL, false, core.next_request);
            let notify = Payload::Notify(Notify::new(NotifyType::AUTHENTICATION_FAILED, Vec::new()));
            let fragment_at = core.fragment_at_peer(ctx);
            if let Ok(bytes) =
                sk::seal(ctx.enclave, self.ike, self.choice.suite, header, vec![notify], fragment_at)
            {
                /* INFORMATIONAL { SK { N(AUTHENTICATION_FAILED) } } --> */
                ctx.out.send_all(core.local, core.remote, &bytes);
            }
            return fail(core, ctx, error);
        }
        core.peer_auth = verified.ok();
        // The child SA, if the responder accepted it.
        let child = match (found.sa, found.ts_i, found.ts_r, found.error) {
            (Some(sa), Some(ts_i), Some(ts_r), _) => {
                let answer_i = ts::from_payload(ts_i);
                let answer_r = ts::from_payload(ts_r);
                match proposal::accept_esp_answer(sa, &self.child.proposals, false) {
                    Some(_)
                        if !ts::within(&answer_i, &self.child.ts_i)
                            || !ts::within(&answer_r, &self.child.ts_r) =>
                    {
                        Err(Error::TsUnacceptable { side: Side::Local })
                    }
                    Some((spi_out, esp)) => Ok((spi_out, esp, answer_i, answer_r)),
                    None => Err(Error::NoProposalChosen { side: Side::Local }),
                }
            }
            (_, _, _, Some(n)) => Err(peer_error(n)),
            _ => Err(Error::InvalidMessage { exchange: "IKE_AUTH", why: "child SA payloads missing" }),
        };
        let mut events = Vec::new();
        match child {
            Ok((spi_out, esp, local_ts, remote_ts)) => {
                let params = ChildSaParams {
                    role: Role::Initiator,
                    suite: esp.suite,
                    esn: esp.esn,
                    nonce_i: &self.nonce_i,
                    nonce_r: &self.nonce_r,
                    spi_inbound: spi,
                    spi_outbound: spi_out,
                };
                match ctx.enclave.child_sa_create(self.ike, None, None, &params) {
                    Ok(handles) => {
                        let child = core.child_sa(
                            &self.child.config,
                            spi,
                            spi_out,
                            handles,
                            &esp,
                            local_ts,
                            remote_ts,
                        );
                        core.children.push(child.clone());
                        events.push(Event::ChildSaReady { sa: core.id, child });
                    }
                    Err(e) => {
                        ctx.child_spis.remove(&spi);
                        events.push(Event::ChildSaFailed {
                            sa: core.id,
                            child: self.child.config.name.clone(),
                            error: e.into(),
                        });
                    }
                }
            }
            Err(error) => {
                // If the responder installed a child we refuse, ask it to delete it.
                if found.sa.is_some() {
                    core.queue.push_back(RequestKind::DeleteRefused(spi));
                } else {
                    ctx.child_spis.remove(&spi);
                }
                events.push(Event::ChildSaFailed {
                    sa: core.id,
                    child: self.child.config.name.clone(),
                    error,
                });
            }
        }
        let (sealed_sk_d, sealed_state, report) = match Core::seal(ctx, self.ike) {
            Ok(s) => s,
            Err(e) => {
                core.release_unreported(ctx);
                return core.fail(ctx, Some(self.ike), None, e);
            }
        };
        ctx.out.events.push_back(core.established_event(self.choice, id_r.clone(), report));
        ctx.out.events.extend(events);
        // IKE_AUTH carried the first child; every other one is a CREATE_CHILD_SA of its own.
        let more = core.conn.children.iter().skip(1).map(|c| RequestKind::NewChild(c.name.clone()));
        core.queue.extend(more);
        State::Established(Established { ike: self.ike, choice: self.choice, sealed_sk_d, sealed_state })
    }
}

impl ExpectAuthRequest {
    /// The IKE_AUTH request: authenticate the initiator, answer with our AUTH and the
    /// first child SA, then clear-and-seal.
    fn process<E: Enclave>(
        self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        to: (SocketAddr, SocketAddr),
        inner: &[Payload],
    ) -> State {
        let found = Inner::of(inner);
        let (ike, choice) = (self.ike, self.choice);
        let notify_and_fail = |core: &mut Core, ctx: &mut Ctx<'_, E>, notify: NotifyType, error: Error| {
            let payload = vec![Payload::Notify(Notify::new(notify, Vec::new()))];
            /* <-- IKE_AUTH { SK { N(error) } } */
            let id = core.expected_request;
            let _ = core.respond(ctx, ike, &choice, ExchangeType::IKE_AUTH, id, payload, to);
            core.fail(ctx, Some(ike), None, error)
        };
        /* IKE_AUTH { SK { IDi, [CERT+], [CERTREQ], [IDr], AUTH, SAi2, TSi, TSr } } --> */
        let (Some(id_i), Some(auth)) = (found.id_i, found.auth) else {
            let error = Error::InvalidMessage { exchange: "IKE_AUTH", why: "IDi or AUTH missing" };
            return notify_and_fail(core, ctx, NotifyType::INVALID_SYNTAX, error);
        };
        if !core.switch_to_identities(ctx, choice, id_i, found.id_r) {
            return notify_and_fail(core, ctx, NotifyType::AUTHENTICATION_FAILED, Error::IdentityMismatch);
        }
        let (id_i_body, id_r) = (id_i.body_bytes(), core.conn.local_id.clone());
        let id_r_body = id_r.body_bytes();
        let peer_input =
            AuthInput { real_message: &self.request, peer_nonce: &self.nonce_r, id_body: &id_i_body };
        // Our AUTH over our IKE_SA_INIT response and Ni.
        let our_input =
            AuthInput { real_message: &self.response, peer_nonce: &self.nonce_i, id_body: &id_r_body };
        let auth = match authenticate::verify_and_answer(
            core,
            ctx,
            ike,
            &found,
            id_i,
            auth,
            &peer_input,
            &our_input,
        ) {
            Ok((peer, ours)) => {
                core.peer_auth = Some(peer);
                match ours {
                    Ok(a) => a,
                    Err(e) => return core.fail(ctx, Some(ike), None, e),
                }
            }
            Err(error) => return notify_and_fail(core, ctx, NotifyType::AUTHENTICATION_FAILED, error),
        };
        // §2.23: with a NAT on the path, keep talking to where the authenticated request came from.
        (core.local, core.remote) = to;
        let mut reply = vec![Payload::IdResponder(id_r)];
        reply.extend(authenticate::certs(&core.conn));
        reply.push(Payload::Auth(auth));
        let mut events = Vec::new();
        match self.child(core, ctx, &found) {
            Ok((child, answer)) => {
                reply.extend(answer);
                core.children.push(child.clone());
                events.push(Event::ChildSaReady { sa: core.id, child });
            }
            Err((name, notify, error)) => {
                reply.push(Payload::Notify(Notify::new(notify, Vec::new())));
                events.push(Event::ChildSaFailed { sa: core.id, child: name, error });
            }
        }
        /* <-- IKE_AUTH { SK { IDr, [CERT+], AUTH, SAr2, TSi, TSr } } */
        let (sealed_sk_d, sealed_state, report) = match core.respond_established(ctx, ike, &choice, reply, to)
        {
            Ok(s) => s,
            Err(e) => {
                core.release_unreported(ctx);
                return core.fail(ctx, Some(ike), None, e);
            }
        };
        ctx.out.events.push_back(core.established_event(choice, id_i.clone(), report));
        ctx.out.events.extend(events);
        if found.initial_contact {
            ctx.out.initial_contacts.push(core.id);
        }
        State::Established(Established { ike, choice, sealed_sk_d, sealed_state })
    }

    /// Chooses and installs the first child SA: a child configuration whose selectors
    /// narrow to something (§2.9) and whose proposals accept one of the peer's.
    #[allow(clippy::type_complexity)]
    fn child<E: Enclave>(
        &self,
        core: &Core,
        ctx: &mut Ctx<'_, E>,
        found: &Inner<'_>,
    ) -> Result<(ChildSa, Vec<Payload>), (String, NotifyType, Error)> {
        let first_name = core.conn.children.first().map(|c| c.name.clone()).unwrap_or_default();
        let (Some(sa), Some(ts_i), Some(ts_r)) = (found.sa, found.ts_i, found.ts_r) else {
            let error = Error::InvalidMessage { exchange: "IKE_AUTH", why: "SAi2, TSi or TSr missing" };
            return Err((first_name, NotifyType::INVALID_SYNTAX, error));
        };
        let (proposed_i, proposed_r) = (ts::from_payload(ts_i), ts::from_payload(ts_r));
        let mut failure =
            (first_name, NotifyType::TS_UNACCEPTABLE, Error::TsUnacceptable { side: Side::Local });
        for config in &core.conn.children {
            let remote: Vec<TrafficSelector> =
                config.remote_ts.iter().map(|t| t.resolve(core.remote.ip())).collect();
            let local: Vec<TrafficSelector> =
                config.local_ts.iter().map(|t| t.resolve(core.local.ip())).collect();
            let (narrow_i, narrow_r) = (ts::narrow(&proposed_i, &remote), ts::narrow(&proposed_r, &local));
            if narrow_i.is_empty() || narrow_r.is_empty() {
                continue;
            }
            let Some((number, spi_out, esp)) = proposal::select_esp(sa, &config.esp_proposals, false) else {
                failure = (
                    config.name.clone(),
                    NotifyType::NO_PROPOSAL_CHOSEN,
                    Error::NoProposalChosen { side: Side::Local },
                );
                continue;
            };
            let fail = |e: Error| (config.name.clone(), NotifyType::NO_PROPOSAL_CHOSEN, e);
            let spi = ctx.child_spi().map_err(fail)?;
            let params = ChildSaParams {
                role: Role::Responder,
                suite: esp.suite,
                esn: esp.esn,
                nonce_i: &self.nonce_i,
                nonce_r: &self.nonce_r,
                spi_inbound: spi,
                spi_outbound: spi_out,
            };
            let handles = match ctx.enclave.child_sa_create(self.ike, None, None, &params) {
                Ok(h) => h,
                Err(e) => {
                    ctx.child_spis.remove(&spi);
                    return Err(fail(e.into()));
                }
            };
            let answer = vec![
                Payload::Sa(proposal::esp_answer(number, spi, &esp)),
                Payload::TsInitiator(ts::to_payload(&narrow_i)),
                Payload::TsResponder(ts::to_payload(&narrow_r)),
            ];
            let child = core.child_sa(config, spi, spi_out, handles, &esp, narrow_r, narrow_i);
            return Ok((child, answer));
        }
        Err(failure)
    }
}

impl Established {
    /// An INFORMATIONAL request: Deletes, error notifies, or a liveness check.
    fn process_informational<E: Enclave>(
        self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        id: u32,
        to: (SocketAddr, SocketAddr),
        inner: &[Payload],
    ) -> State {
        let mut ours = Vec::new();
        let mut delete_ike = None;
        for p in inner {
            match p {
                Payload::Delete(d) if d.protocol == ProtocolId::IKE => {
                    delete_ike = Some(DeleteReason::PeerDeleted)
                }
                Payload::Delete(d) if d.protocol == ProtocolId::ESP => {
                    for spi in d.child_spis() {
                        if let Some(at) = core.children.iter().position(|c| c.spi_outbound == spi) {
                            let child = core.children.remove(at);
                            ours.push(child.spi_inbound);
                            core.close_child(ctx, child);
                        }
                    }
                }
                Payload::Notify(n) if n.ty == NotifyType::AUTHENTICATION_FAILED => {
                    delete_ike = Some(DeleteReason::PeerAuthenticationFailed);
                }
                _ => {}
            }
        }
        let reply = if ours.is_empty() {
            Vec::new()
        } else {
            vec![Payload::Delete(Delete::child(ProtocolId::ESP, &ours))]
        };
        /* <-- INFORMATIONAL { SK { [D] } } */
        if core.respond(ctx, self.ike, &self.choice, ExchangeType::INFORMATIONAL, id, reply, to).is_err() {
            ctx.out.counters.drop(DropReason::Malformed);
        }
        match delete_ike {
            Some(reason) => core.delete_established(ctx, self.ike, reason),
            None => State::Established(self),
        }
    }

    /// The answer to our INFORMATIONAL request.
    fn process_response<E: Enclave>(
        self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        kind: RequestKind,
        inner: &[Payload],
    ) -> State {
        match kind {
            RequestKind::DeleteIke => core.delete_established(ctx, self.ike, DeleteReason::Requested),
            RequestKind::DeleteChild(spis) => {
                for spi in spis {
                    if let Some(at) = core.children.iter().position(|c| c.spi_inbound == spi) {
                        let child = core.children.remove(at);
                        core.close_child(ctx, child);
                    }
                }
                State::Established(self)
            }
            RequestKind::DeleteRefused(spi) => {
                ctx.child_spis.remove(&spi);
                State::Established(self)
            }
            RequestKind::RekeyChildSent(rekey) => {
                child::rekey_response(&self, core, ctx, rekey, inner);
                State::Established(self)
            }
            RequestKind::RekeyIkeSent(rekey) => {
                ike_rekey::response(&self, core, ctx, rekey, inner);
                State::Established(self)
            }
            RequestKind::RekeyIkeFollowUp(fu) => {
                ike_rekey::follow_up_response(&self, core, ctx, *fu, inner);
                State::Established(self)
            }
            RequestKind::Liveness
            | RequestKind::SaInit
            | RequestKind::Intermediate
            | RequestKind::Auth
            | RequestKind::RekeyChild(_)
            | RequestKind::NewChild(_)
            | RequestKind::RekeyIke(..) => State::Established(self),
        }
    }
}

/// The first SA, KE and Nonce payloads of an IKE_SA_INIT message (RFC 7296 §1.2), in
/// either direction; later duplicates are ignored.
pub(crate) fn sa_ke_nonce(
    message: &Message,
) -> (Option<&wire::ike::Sa>, Option<&KeyExchange>, Option<&Nonce>) {
    let (mut sa, mut ke, mut nonce) = (None, None, None);
    for p in message.payloads() {
        match p {
            Payload::Sa(s) => sa = sa.or(Some(s)),
            Payload::KeyExchange(k) => ke = ke.or(Some(k)),
            Payload::Nonce(n) => nonce = nonce.or(Some(n)),
            _ => {}
        }
    }
    (sa, ke, nonce)
}
