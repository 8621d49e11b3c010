//! The endpoint: routes datagrams to IKE SAs by SPI, answers new IKE_SA_INIT requests
//! (statelessly when it refuses them), runs commands and timers, and queues outputs.

use core::net::SocketAddr;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use enclave::{Enclave, SecretHandle, SecretKind};
use wire::ike::{
    ExchangeType, HeaderFlags, IkeHeader, KeyExchange, Message, Nonce, Notify, NotifyType, Payload, Sa,
};

use crate::auth::AuthPolicy;
use crate::config::Connection;
use crate::cookie::CookieJar;
use crate::error::{Error, Result};
use crate::event::{Counters, DropReason, Event, Refusal, SaId, Transmit};
use crate::peers::Peers;
use crate::proposal;
use crate::random::RandomPool;
use crate::sa::{
    self, AcceptedInit, Carried, CarriedIkeSa, Ctx, IkeSa, NewSa, Output, IKE_PORT, NATT_PORT, NON_ESP_MARKER,
};
use crate::timers::Timers;

/// Endpoint-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Half-open SAs (responder, before IKE_AUTH) from which on IKE_SA_INIT requests must
    /// return a cookie (RFC 7296 §2.6); 0 always asks for one.
    pub cookie_threshold: usize,
    /// How long a half-open SA waits for IKE_AUTH.
    pub half_open_timeout: Duration,
    /// The first retransmission interval; each next one doubles (§2.4).
    pub retransmit_timeout: Duration,
    /// Transmissions of a request (the first included) before the peer counts as gone.
    pub retransmit_tries: u32,
    /// Announce RFC 7427 signatures (N(SIGNATURE_HASH_ALGORITHMS)) when a connection uses
    /// certificates, as strongswan.conf's `charon.signature_authentication` does; without
    /// it, ECDSA peers use RFC 4754's methods 9 and 10.
    pub signature_authentication: bool,
    /// The largest IP datagram of an IKE fragment we send (RFC 7383, strongswan.conf's
    /// `charon.fragment_size`), where a connection fragments.
    pub fragment_size: usize,
}

impl Default for EndpointConfig {
    /// strongSwan-like: cookies from 10 half-open SAs, 30 s half-open, 2 s doubling, 5 tries,
    /// RFC 7427 signatures announced, fragments of 1280 bytes.
    fn default() -> Self {
        Self {
            cookie_threshold: 10,
            half_open_timeout: Duration::from_secs(30),
            retransmit_timeout: Duration::from_secs(2),
            retransmit_tries: 5,
            signature_authentication: true,
            fragment_size: crate::fragment::DEFAULT_FRAGMENT_SIZE,
        }
    }
}

/// What a connection needs its secret to be, if `kind` is not that.
fn unfit_secret(connection: &Connection, kind: SecretKind) -> Option<&'static str> {
    use enclave::PublicKeyKind as K;
    use SecretKind as S;
    match (&connection.local_auth, connection.local_certs.first().map(|c| c.public_key().kind)) {
        (AuthPolicy::Psk, _) => (kind != S::PreSharedKey).then_some("a pre-shared key"),
        (AuthPolicy::Signature(_), Some(key)) => {
            let fits = matches!(
                (kind, key),
                (S::RsaPrivateKey, K::Rsa)
                    | (S::EcdsaP256PrivateKey, K::EcdsaP256)
                    | (S::EcdsaP384PrivateKey, K::EcdsaP384)
            );
            (!fits).then_some("a private key of the type of local.certs' first certificate")
        }
        (AuthPolicy::Signature(_), None) => Some("usable without local.certs"),
    }
}

/// A sans-IO IKEv2 endpoint for one enclave (one tenant): many connections, many IKE SAs.
///
/// Feed it datagrams ([`Self::handle_datagram`]) and time ([`Self::handle_timeout`]),
/// give it commands ([`Self::initiate`], [`Self::delete_child`], [`Self::delete_ike`]),
/// then drain [`Self::poll_transmit`] and [`Self::poll_event`] and wake it at
/// [`Self::poll_timeout`]. It never reads a clock, opens a socket or holds a key byte.
#[derive(Debug)]
pub struct Endpoint<E> {
    enclave: E,
    random: RandomPool,
    config: EndpointConfig,
    connections: Vec<Arc<Connection>>,
    secrets: HashMap<String, SecretHandle>,
    sas: HashMap<u64, IkeSa>,
    /// Each SA's next deadline and the peer it authenticated, kept up to date whenever an
    /// SA is added, handled or removed ([`Self::refile`]).
    timers: Timers,
    peers: Peers,
    /// Responder SAs by (initiator's address, SPIi), to spot IKE_SA_INIT retransmissions.
    init_index: HashMap<(SocketAddr, u64), u64>,
    half_open: usize,
    child_spis: HashSet<u32>,
    cookies: CookieJar,
    /// An instant and the wall-clock time then: certificate validity is checked against it.
    wall_clock: Option<(Instant, SystemTime)>,
    out: Output,
}

impl<E: Enclave> Endpoint<E> {
    /// An endpoint without connections.
    pub fn new(enclave: E, config: EndpointConfig) -> Self {
        Self {
            enclave,
            random: RandomPool::default(),
            config,
            connections: Vec::new(),
            secrets: HashMap::new(),
            sas: HashMap::new(),
            timers: Timers::default(),
            peers: Peers::default(),
            init_index: HashMap::new(),
            half_open: 0,
            child_spis: HashSet::new(),
            cookies: CookieJar::new(),
            wall_clock: None,
            out: Output::default(),
        }
    }

    /// The enclave.
    pub fn enclave(&self) -> &E {
        &self.enclave
    }

    /// The enclave, e.g. to provision secrets.
    pub fn enclave_mut(&mut self) -> &mut E {
        &mut self.enclave
    }

    /// Names a provisioned secret (its handle, never its value) for connections to use.
    pub fn add_secret(&mut self, name: &str, secret: SecretHandle) {
        self.secrets.insert(name.to_owned(), secret);
    }

    /// Tells the endpoint the wall-clock time at `now`; later times are derived from the
    /// `Instant`s it is given. Certificates are checked against it, and refused while it is
    /// unknown. Set it again to follow wall-clock adjustments.
    pub fn set_wall_clock(&mut self, now: Instant, wall: SystemTime) {
        self.wall_clock = Some((now, wall));
    }

    /// Adds a connection; its secret must have been added, and be a pre-shared key for
    /// `auth = "psk"` or the private key of the certificate's type for `auth = "pubkey"`.
    pub fn add_connection(&mut self, connection: Connection) -> Result<()> {
        if self.connections.iter().any(|c| c.name == connection.name) {
            return Err(Error::DuplicateConnection { connection: connection.name });
        }
        let Some(&handle) = self.secrets.get(&connection.secret) else {
            return Err(Error::UnknownSecret { connection: connection.name, secret: connection.secret });
        };
        let kind = self.enclave.secret_kind(handle)?;
        if let Some(expected) = unfit_secret(&connection, kind) {
            return Err(Error::WrongSecretKind {
                connection: connection.name,
                secret: connection.secret,
                expected,
            });
        }
        self.connections.push(Arc::new(connection));
        Ok(())
    }

    /// Adds a connection whose secret is provisioned later ([`Self::provide_secret`]): until
    /// then it neither initiates (an error) nor answers (NO_PROPOSAL_CHOSEN). With its secret
    /// already added this is [`Self::add_connection`].
    pub fn add_connection_awaiting_secret(&mut self, connection: Connection) -> Result<()> {
        if self.secrets.contains_key(&connection.secret) {
            return self.add_connection(connection);
        }
        if self.connections.iter().any(|c| c.name == connection.name) {
            return Err(Error::DuplicateConnection { connection: connection.name });
        }
        self.connections.push(Arc::new(connection));
        Ok(())
    }

    /// Adds (or replaces) a secret after the connections that use it, refusing one that
    /// does not fit any of them (a PSK for a `pubkey` connection, say).
    pub fn provide_secret(&mut self, name: &str, secret: SecretHandle) -> Result<()> {
        let kind = self.enclave.secret_kind(secret)?;
        for c in self.connections.iter().filter(|c| c.secret == name) {
            if let Some(expected) = unfit_secret(c, kind) {
                return Err(Error::WrongSecretKind {
                    connection: c.name.clone(),
                    secret: name.to_owned(),
                    expected,
                });
            }
        }
        self.secrets.insert(name.to_owned(), secret);
        Ok(())
    }

    /// Starts an IKE SA for a connection (IKE_SA_INIT from port 500 of its first local
    /// address to port 500 of its first remote address).
    pub fn initiate(&mut self, now: Instant, connection: &str) -> Result<SaId> {
        let conn = self
            .connections
            .iter()
            .find(|c| c.name == connection)
            .cloned()
            .ok_or(Error::UnknownConnection { name: connection.to_owned() })?;
        let secret = *self
            .secrets
            .get(&conn.secret)
            .ok_or(Error::UnknownSecret { connection: conn.name.clone(), secret: conn.secret.clone() })?;
        let remote =
            *conn.remote_addrs.first().ok_or(Error::NoRemoteAddress { connection: conn.name.clone() })?;
        let local = *conn.local_addrs.first().ok_or(Error::MissingField {
            connection: conn.name.clone(),
            field: "local_addrs",
            why: "initiating needs our own address",
        })?;
        let id = self.new_spi()?;
        // §2.4: only an IKE SA begun while the connection has no other says it is the only
        // one; a second one would make the peer drop the first.
        let initial_contact = !self.sas.values().any(|s| s.connection() == conn.name);
        let new = NewSa {
            id,
            conn,
            secret,
            local: SocketAddr::new(local, IKE_PORT),
            remote: SocketAddr::new(remote, IKE_PORT),
            initial_contact,
        };
        let sa = IkeSa::initiate(&mut self.ctx(now), new)?;
        self.sas.insert(id.0, sa);
        self.refile(id.0);
        Ok(id)
    }

    /// Deletes a child SA (by our inbound SPI) with an INFORMATIONAL exchange.
    pub fn delete_child(&mut self, now: Instant, sa: SaId, spi_inbound: u32) -> Result<()> {
        self.with_sa(now, sa.0, |sa, ctx| sa.delete_child(ctx, spi_inbound))
            .ok_or(Error::UnknownIkeSa { sa: sa.0 })?
    }

    /// Rekeys a child SA (by our inbound SPI) with CREATE_CHILD_SA (RFC 7296 §1.3.3), with
    /// PFS when the child's first ESP proposal names a group. The new SA is reported by
    /// [`Event::ChildSaRekeyed`], then the old one is deleted.
    pub fn rekey_child(&mut self, now: Instant, sa: SaId, spi_inbound: u32) -> Result<()> {
        self.with_sa(now, sa.0, |sa, ctx| sa.rekey_child(ctx, spi_inbound))
            .ok_or(Error::UnknownIkeSa { sa: sa.0 })?
    }

    /// Rekeys an IKE SA with CREATE_CHILD_SA (RFC 7296 §1.3.2): [`Event::IkeSaRekeyed`]
    /// names its successor, which holds the child SAs from then on; the old SA is deleted.
    /// IKE SAs also rekey themselves at their connection's `rekey_time`.
    pub fn rekey_ike(&mut self, now: Instant, sa: SaId) -> Result<()> {
        self.with_sa(now, sa.0, |sa, ctx| sa.rekey_ike(ctx)).ok_or(Error::UnknownIkeSa { sa: sa.0 })?
    }

    /// Deletes an IKE SA and its child SAs with an INFORMATIONAL exchange.
    pub fn delete_ike(&mut self, now: Instant, sa: SaId) -> Result<()> {
        self.with_sa(now, sa.0, |sa, ctx| sa.delete(ctx)).ok_or(Error::UnknownIkeSa { sa: sa.0 })?
    }

    /// Sends a liveness check (an empty INFORMATIONAL) now.
    pub fn check_liveness(&mut self, now: Instant, sa: SaId) -> Result<()> {
        self.with_sa(now, sa.0, |sa, ctx| sa.check_liveness(ctx)).ok_or(Error::UnknownIkeSa { sa: sa.0 })?
    }

    /// A UDP datagram received from `from` at our address `to`. On port 4500 it must start
    /// with the non-ESP marker (RFC 3948 §2.2). Bad input is dropped and counted, or
    /// answered as RFC 7296 says; it never panics.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, datagram: &[u8]) {
        let data = if to.port() == NATT_PORT {
            match datagram.strip_prefix(&NON_ESP_MARKER) {
                Some(d) => d,
                None => return self.out.counters.drop(DropReason::NotIke),
            }
        } else {
            datagram
        };
        let message = match Message::decode(data) {
            Ok(m) => m,
            Err(e) => return self.decode_failed(from, to, data, &e),
        };
        let h = message.header;
        if h.exchange_type == ExchangeType::IKE_SA_INIT && h.flags.initiator() && !h.flags.response() {
            if h.responder_spi != 0 || h.message_id != 0 {
                return self.out.counters.drop(DropReason::SpiMismatch);
            }
            return self.handle_sa_init_request(now, from, to, data, &message);
        }
        // Our SPI is the responder's when the sender is the original initiator.
        let ours = if h.flags.initiator() { h.responder_spi } else { h.initiator_spi };
        match self.sas.get(&ours) {
            None => return self.out.counters.drop(DropReason::UnknownSpi),
            Some(sa) if (sa.role() == enclave::Role::Initiator) == h.flags.initiator() => {
                return self.out.counters.drop(DropReason::SpiMismatch);
            }
            Some(_) => {}
        }
        self.with_sa(now, ours, |sa, ctx| sa.handle(ctx, to, from, data, &message));
    }

    /// Retransmissions, expiries and liveness checks due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for id in self.timers.due(now) {
            self.with_sa(now, id, |sa, ctx| sa.handle_timeout(ctx));
        }
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.transmits.pop_front()
    }

    /// When to call [`Self::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = self.timers.next();
        // Every test runs with this: an SA changed without `refile` shows up here.
        debug_assert_eq!(next, self.sas.values().filter_map(|sa| sa.next_timeout(&self.config)).min());
        next
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    /// Drops, refusals and retransmissions so far.
    pub fn counters(&self) -> Counters {
        self.out.counters
    }

    /// An IKE SA.
    pub fn ike_sa(&self, sa: SaId) -> Option<&IkeSa> {
        self.sas.get(&sa.0)
    }

    /// All IKE SAs, in no particular order.
    pub fn ike_sas(&self) -> impl Iterator<Item = &IkeSa> {
        self.sas.values()
    }

    /// Responder SAs waiting for IKE_AUTH.
    pub fn half_open(&self) -> usize {
        self.half_open
    }

    /// Before a move to another host: every established SA's SK_d resident in the enclave
    /// again, so that the enclave's export carries it (its blob opens only here). Returns
    /// how many. [`Self::reseal`] undoes it if the move does not happen.
    pub fn unseal_for_move(&mut self) -> Result<usize> {
        let mut n = 0;
        for sa in self.sas.values() {
            n += usize::from(sa.unseal_sk_d(&mut self.enclave)?);
        }
        Ok(n)
    }

    /// Seals every resident SK_d again (after [`Self::unseal_for_move`] when the move did
    /// not happen); returns how many.
    pub fn reseal(&mut self) -> Result<usize> {
        let mut n = 0;
        for sa in self.sas.values_mut() {
            n += usize::from(sa.reseal(&mut self.enclave)?);
        }
        Ok(n)
    }

    /// Every established IKE SA as data, for a live move to another endpoint
    /// ([`Self::import_sas`]). Refused with [`Error::MoveBusy`] while any of them has a
    /// request outstanding, queued or deferred, a rekey or rekey collision in progress, or
    /// rekeyed children not yet deleted: try again a moment later. SAs still connecting or
    /// half-open are not carried ([`Carried::left_out`]).
    ///
    /// From this call on, the caller must stop feeding this endpoint: whatever it answered
    /// or sent later would be missing from the records, and the peer would see message IDs
    /// go backwards at the destination.
    pub fn export_sas(&self, now: Instant) -> Result<Carried> {
        let mut carried = Carried { sas: Vec::new(), left_out: 0 };
        for sa in self.sas.values() {
            match sa.carry(now)? {
                Some(c) => carried.sas.push(c),
                None => carried.left_out += 1,
            }
        }
        carried.sas.sort_by_key(|c| c.id());
        Ok(carried)
    }

    /// Rebuilds carried IKE SAs ([`Self::export_sas`]) on this endpoint, whose enclave has
    /// imported the source enclave's state: `restore` maps the source's handles to this
    /// enclave's. Each SA's connection must exist here by name, with its secret added
    /// ([`Self::add_secret`], the restored handle under the same name). All or nothing: a
    /// malformed record, a handle `restore` lacks, or an IKE SPI or inbound child SPI
    /// already in use here refuses the whole batch. Returns each SA's id and its child SAs
    /// with their new handles, for the data plane; no events are queued for them.
    pub fn import_sas(
        &mut self,
        now: Instant,
        carried: Vec<CarriedIkeSa>,
        restore: &enclave::migration::MigrationRestore,
    ) -> Result<Vec<(SaId, Vec<crate::event::ChildSa>)>> {
        let mut new: Vec<IkeSa> = Vec::with_capacity(carried.len());
        let mut inits = HashSet::new();
        let mut spis = HashSet::new();
        // Two SAs sharing a key handle would delete each other's keys.
        let mut ike_handles: HashSet<_> = self.sas.values().filter_map(IkeSa::ike_handle).collect();
        let mut esp_handles: HashSet<_> = self
            .sas
            .values()
            .flat_map(IkeSa::children)
            .flat_map(|c| [c.handles.inbound, c.handles.outbound])
            .collect();
        for record in carried {
            let name = record.connection();
            let conn = self
                .connections
                .iter()
                .find(|c| c.name == name)
                .cloned()
                .ok_or(Error::UnknownConnection { name: name.to_owned() })?;
            let secret = *self
                .secrets
                .get(&conn.secret)
                .ok_or(Error::UnknownSecret { connection: conn.name.clone(), secret: conn.secret.clone() })?;
            let sa = record.rebuild(conn, secret, restore, now)?;
            let id = sa.id();
            let clash = |why| Err(Error::CarriedSa { sa: id.0, why });
            if self.sas.contains_key(&id.0) || new.iter().any(|s| s.id() == id) {
                return clash("an IKE SA with its SPI exists here");
            }
            if sa.init_key().is_some_and(|k| self.init_index.contains_key(&k) || !inits.insert(k)) {
                return clash("an IKE SA with its initiator and SPIi exists here");
            }
            for child in sa.children() {
                if self.child_spis.contains(&child.spi_inbound) || !spis.insert(child.spi_inbound) {
                    return clash("a child SA's inbound SPI is in use here");
                }
            }
            let ike_free = sa.ike_handle().is_some_and(|h| ike_handles.insert(h));
            let esp_free = sa
                .children()
                .iter()
                .all(|c| esp_handles.insert(c.handles.inbound) && esp_handles.insert(c.handles.outbound));
            if !ike_free || !esp_free {
                return clash("an enclave handle of it is another SA's too");
            }
            new.push(sa);
        }
        // SK_d came in the package (the source unsealed it, [`Self::unseal_for_move`]):
        // sealed here under this enclave's key, or no child could be made on these SAs.
        for sa in &mut new {
            sa.reseal(&mut self.enclave)?;
        }
        let mut out = Vec::with_capacity(new.len());
        for sa in new {
            let id = sa.id();
            self.child_spis.extend(sa.children().iter().map(|c| c.spi_inbound));
            if let Some(key) = sa.init_key() {
                // Keeps a late IKE_SA_INIT retransmission from opening a second SA.
                self.init_index.insert(key, id.0);
            }
            out.push((id, sa.children().to_vec()));
            self.sas.insert(id.0, sa);
            self.refile(id.0);
        }
        Ok(out)
    }

    /// The processing context.
    fn ctx(&mut self, now: Instant) -> Ctx<'_, E> {
        let wall = self.wall_clock.and_then(|(then, wall)| match now.checked_duration_since(then) {
            Some(later) => wall.checked_add(later),
            None => wall.checked_sub(then.saturating_duration_since(now)),
        });
        Ctx {
            enclave: &mut self.enclave,
            random: &mut self.random,
            config: &self.config,
            out: &mut self.out,
            child_spis: &mut self.child_spis,
            ike_sas: &self.sas,
            connections: &self.connections,
            secrets: &self.secrets,
            now,
            wall,
        }
    }

    /// Runs `f` on one SA, then forgets the SA if it is gone.
    /// For each IKE SA just established with INITIAL_CONTACT, drops the other established
    /// IKE SAs of its connection with the same authenticated peer identity (§2.4).
    fn initial_contacts(&mut self, now: Instant) {
        for new in std::mem::take(&mut self.out.initial_contacts) {
            let Some(sa) = self.sas.get(&new.0) else { continue };
            if sa.unique() == crate::config::Unique::Never {
                continue;
            }
            let Some(who) = sa.peer_auth().map(|p| p.identity.clone()) else { continue };
            let peer = (sa.connection().to_owned(), who);
            let mut old = self.peers.of_peer(&peer);
            old.retain(|id| *id != new.0);
            #[cfg(debug_assertions)]
            {
                // Every test runs with this: the index against the walk it replaced.
                let mut walked: Vec<u64> = self
                    .sas
                    .iter()
                    .filter(|(id, s)| {
                        **id != new.0
                            && s.connection() == peer.0
                            && s.peer_auth().is_some_and(|p| p.identity == peer.1)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                let mut indexed = old.clone();
                walked.sort_unstable();
                indexed.sort_unstable();
                debug_assert_eq!(indexed, walked);
            }
            for id in old {
                self.with_sa(now, id, |sa, ctx| sa.supersede(ctx));
            }
        }
    }

    fn with_sa<R>(
        &mut self,
        now: Instant,
        id: u64,
        f: impl FnOnce(&mut IkeSa, &mut Ctx<'_, E>) -> R,
    ) -> Option<R> {
        let mut sa = self.sas.remove(&id)?;
        let was_half_open = sa.is_half_open();
        let result = f(&mut sa, &mut self.ctx(now));
        if was_half_open && !sa.is_half_open() {
            self.half_open = self.half_open.saturating_sub(1);
        }
        if sa.is_deleted() {
            if let Some(key) = sa.init_key() {
                self.init_index.remove(&key);
            }
        } else {
            self.sas.insert(id, sa);
        }
        self.refile(id);
        // A rekey made successors; then the children move to them (one level: adopting
        // makes neither new SAs nor handoffs).
        for mut new in std::mem::take(&mut self.out.new_sas) {
            new.start(&mut self.ctx(now));
            let new_id = new.id().0;
            self.sas.insert(new_id, new);
            self.refile(new_id);
        }
        self.initial_contacts(now);
        for handoff in std::mem::take(&mut self.out.handoffs) {
            let to = handoff.to;
            match self.sas.remove(&to.0) {
                Some(mut successor) => {
                    successor.adopt(&mut self.ctx(now), handoff);
                    self.sas.insert(to.0, successor);
                    self.refile(to.0);
                }
                None => {
                    // The successor is gone already: its children go with it.
                    let retired = handoff.retiring.into_iter().map(|(_, c)| c);
                    for child in handoff.children.into_iter().chain(retired) {
                        let _ = self.enclave.esp_sa_delete(child.handles.inbound);
                        let _ = self.enclave.esp_sa_delete(child.handles.outbound);
                        self.child_spis.remove(&child.spi_inbound);
                        self.out.events.push_back(Event::ChildSaDeleted { sa: to, child });
                    }
                }
            }
        }
        Some(result)
    }

    /// Files SA `id`'s next deadline and authenticated peer after it was added or changed,
    /// or forgets them once it is gone.
    fn refile(&mut self, id: u64) {
        let sa = self.sas.get(&id);
        self.timers.set(id, sa.and_then(|sa| sa.next_timeout(&self.config)));
        self.peers.set(id, sa.and_then(|sa| Some((sa.connection(), &sa.peer_auth()?.identity))));
    }

    /// A fresh SPI of ours, unique on this endpoint.
    fn new_spi(&mut self) -> Result<SaId> {
        loop {
            let spi = sa::random_ike_spi(&mut self.enclave, &mut self.random)?;
            if !self.sas.contains_key(&spi) {
                return Ok(SaId(spi));
            }
        }
    }

    /// Answers an IKE_SA_INIT request without creating state.
    fn refuse(&mut self, from: SocketAddr, to: SocketAddr, spi_i: u64, notify: Notify, refusal: Refusal) {
        self.out.counters.refuse(refusal);
        let header = IkeHeader::new(spi_i, 0, ExchangeType::IKE_SA_INIT, HeaderFlags::RESPONSE, 0);
        if let Ok(bytes) = Message::new(header, [Payload::Notify(notify)]).to_vec() {
            /* <-- IKE_SA_INIT { N(error or COOKIE) } */
            self.out.send(to, from, &bytes);
        }
    }

    /// A datagram that did not decode: answer an IKE_SA_INIT request whose version or
    /// critical payload we do not support (§2.5), drop everything else.
    fn decode_failed(&mut self, from: SocketAddr, to: SocketAddr, data: &[u8], error: &wire::Error) {
        let answerable = matches!(
            error,
            wire::Error::InvalidMajorVersion { .. } | wire::Error::UnsupportedCriticalPayload { .. }
        );
        match IkeHeader::peek(data) {
            Ok(p)
                if answerable
                    && p.header.exchange_type == ExchangeType::IKE_SA_INIT
                    && p.header.flags.initiator()
                    && !p.header.flags.response() =>
            {
                let refusal = match error {
                    wire::Error::InvalidMajorVersion { .. } => Refusal::InvalidMajorVersion,
                    _ => Refusal::InvalidSyntax,
                };
                self.refuse(from, to, p.header.initiator_spi, Notify::for_decode_error(error), refusal);
            }
            _ => self.out.counters.drop(DropReason::Malformed),
        }
    }

    /// A new IKE_SA_INIT request (or its retransmission).
    fn handle_sa_init_request(
        &mut self,
        now: Instant,
        from: SocketAddr,
        to: SocketAddr,
        data: &[u8],
        message: &Message,
    ) {
        let spi_i = message.header.initiator_spi;
        if let Some(&ours) = self.init_index.get(&(from, spi_i)) {
            self.with_sa(now, ours, |sa, ctx| sa.resend_sa_init_response(ctx, to, from));
            return;
        }
        let (Some(sa), Some(ke), Some(nonce)) = crate::sa::sa_ke_nonce(message) else {
            let notify = Notify::new(NotifyType::INVALID_SYNTAX, Vec::new());
            return self.refuse(from, to, spi_i, notify, Refusal::InvalidSyntax);
        };
        if self.half_open >= self.config.cookie_threshold && !self.cookie_returned(now, from, message, nonce)
        {
            match self.cookies.make(&nonce.data, from.ip(), spi_i) {
                Some(cookie) => {
                    let notify = Notify::new(NotifyType::COOKIE, cookie);
                    self.refuse(from, to, spi_i, notify, Refusal::CookieRequired);
                }
                None => self.out.counters.refuse(Refusal::CookieRequired),
            }
            return;
        }
        // RFC 9370 §2.2.1: additional key exchanges only with an initiator that can do
        // IKE_INTERMEDIATE.
        let intermediate = message.notify(NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED).is_some();
        let Some((conn, number, choice)) = self.select(from, to, sa, ke, intermediate) else {
            let notify = Notify::new(NotifyType::NO_PROPOSAL_CHOSEN, Vec::new());
            return self.refuse(from, to, spi_i, notify, Refusal::NoProposalChosen);
        };
        if ke.group.0 != choice.group.id() {
            // §1.2: tell the initiator which group to use.
            let notify =
                Notify::new(NotifyType::INVALID_KE_PAYLOAD, choice.group.id().to_be_bytes().to_vec());
            return self.refuse(from, to, spi_i, notify, Refusal::InvalidKePayload);
        }
        if ke.data.len() != choice.group.public_len() || nonce.data.len() < choice.prf.output_len() / 2 {
            let notify = Notify::new(NotifyType::INVALID_SYNTAX, Vec::new());
            return self.refuse(from, to, spi_i, notify, Refusal::InvalidSyntax);
        }
        let Some(secret) = self.secrets.get(&conn.secret).copied() else {
            let notify = Notify::new(NotifyType::NO_PROPOSAL_CHOSEN, Vec::new());
            return self.refuse(from, to, spi_i, notify, Refusal::NoProposalChosen);
        };
        let Ok(id) = self.new_spi() else {
            return self.out.counters.drop(DropReason::Malformed);
        };
        let init =
            AcceptedInit { datagram: data, message, choice, number, ke: &ke.data, nonce_i: &nonce.data };
        let new = NewSa { id, conn, secret, local: to, remote: from, initial_contact: false };
        match IkeSa::respond(&mut self.ctx(now), new, &init) {
            Ok(ike_sa) => {
                self.sas.insert(id.0, ike_sa);
                self.refile(id.0);
                self.init_index.insert((from, spi_i), id.0);
                self.half_open += 1;
            }
            Err(Error::Enclave(e)) if e.kind() == enclave::ErrorKind::BadInput => {
                // The enclave refused the peer's public value.
                let notify = Notify::new(NotifyType::INVALID_SYNTAX, Vec::new());
                self.refuse(from, to, spi_i, notify, Refusal::InvalidSyntax);
            }
            Err(_) => {
                // Our own failure (the enclave gone, full or refusing): no answer, which the
                // peer retries, rather than a notify that tells it to give up (§2.21.1).
                self.out.counters.drop(DropReason::Unavailable);
            }
        }
    }

    /// Whether the request starts with a valid cookie of ours (§2.6).
    fn cookie_returned(&mut self, now: Instant, from: SocketAddr, message: &Message, nonce: &Nonce) -> bool {
        let enclave = &mut self.enclave;
        self.cookies.refresh(now, |b| enclave.random_nonce(b).is_ok());
        match message.payloads().next() {
            Some(Payload::Notify(n)) if n.ty == NotifyType::COOKIE => {
                self.cookies.check(&n.data, &nonce.data, from.ip(), message.header.initiator_spi)
            }
            _ => false,
        }
    }

    /// The first connection for these addresses that accepts one of the peer's proposals,
    /// preferring, within the chosen proposal, the group the initiator's KE already uses.
    fn select(
        &self,
        from: SocketAddr,
        to: SocketAddr,
        sa: &Sa,
        ke: &KeyExchange,
        intermediate: bool,
    ) -> Option<(Arc<Connection>, u8, proposal::IkeChoice)> {
        for conn in self.connections.iter().filter(|c| c.matches_addresses(to.ip(), from.ip())) {
            let Some((number, choice)) = proposal::select_ike(sa, &conn.proposals, 0, intermediate) else {
                continue;
            };
            if ke.group.0 != choice.group.id() {
                // Narrow the chosen proposal's groups to the KE's and try again.
                let mut only =
                    sa.proposals.iter().filter(|p| p.number == number).cloned().collect::<Vec<_>>();
                for p in &mut only {
                    p.transforms.retain(|t| match t.id {
                        wire::ike::TransformId::Ke(g) => g == ke.group,
                        _ => true,
                    });
                }
                if let Some((_, better)) =
                    proposal::select_ike(&Sa { proposals: only }, &conn.proposals, 0, intermediate)
                {
                    return Some((conn.clone(), number, better));
                }
            }
            return Some((conn.clone(), number, choice));
        }
        None
    }
}
