//! The gateway's control thread: drives the sans-IO IKE engine with sockets and a clock,
//! installs the child SAs it negotiates into the ESP data plane, acts on SA lifetimes, and
//! answers the control socket.
//!
//! ```text
//!  UDP 500 ──────────────┐                          ┌─▶ UDP 500 / data plane's 4500 socket
//!  4500 (IKE, via the ───┼─▶ ike::Endpoint ─events─▶│   install / rekey / remove child SAs
//!  data plane's inbox)   │      ▲     (enclave)     └─▶ Dataplane::update (ESP tables)
//!  lifetime ticks ───────┘      └── soft expiry: rekey_child, hard expiry: delete_child
//! ```
//!
//! Every wait is bounded ([`MAX_WAIT`]), every read loop is bounded per round, and nothing
//! here sees a key: the engine and the data plane hold enclave handles only.

use core::net::{IpAddr, SocketAddr};
use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::{Dataplane, IkeInbox};
use enclave::Enclave;
use esp::{LifetimeKind, SaRef};
use ike::{Endpoint, Event, SaId};

use crate::children::{range_prefixes, Children};
use crate::config::{GatewayConfig, IKE_PORT};
use crate::control::{self, ControlServer, Request};
use crate::error::{Error, Result};
use crate::shared::SharedEnclave;

/// Receive buffer of the IKE sockets (bytes).
const IKE_RECEIVE_BUFFER: i32 = 4 << 20;

/// The longest the loop sleeps without looking at signals, timers and the stop flag.
pub const MAX_WAIT: Duration = Duration::from_millis(200);
/// How often SA lifetimes are evaluated.
const LIFETIME_TICK: Duration = Duration::from_secs(1);
/// Datagrams read per socket per round (the rest wait for the next round).
const READS_PER_ROUND: usize = 256;
/// IKE messages the data plane may queue for this thread.
const INBOX_LIMIT: usize = 1024;
/// Routes added for one child's remote selectors at most.
const ROUTES_PER_SELECTOR: usize = 16;

/// A running gateway for one tenant.
pub struct Gateway<E: Enclave + 'static> {
    pub(crate) engine: Endpoint<SharedEnclave<E>>,
    pub(crate) dp: Dataplane<SharedEnclave<E>>,
    inbox: Arc<IkeInbox>,
    /// Port-500 sockets with the address each is bound to (looked up per datagram).
    ike_sockets: Vec<(UdpSocket, SocketAddr)>,
    /// One receive buffer, reused every round.
    rx: Vec<u8>,
    pub(crate) children: Children,
    pub(crate) identities: BTreeMap<SaId, (String, String)>,
    routes: BTreeSet<(IpAddr, u8)>,
    control: Option<ControlServer>,
    next_tick: Instant,
    pub(crate) log: Box<dyn FnMut(&str) + Send>,
    /// The secrets in the enclave, by configured name.
    pub(crate) secrets: BTreeMap<String, enclave::SecretHandle>,
    /// Every secret name the configuration mentions.
    configured_secrets: Vec<String>,
    stats: EventCounts,
    /// IKE stopped for a move (`crate::carry`): datagrams dropped, no timers, no rekeys.
    pub(crate) frozen: bool,
}

/// How many times each kind of SA event happened since start (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EventCounts {
    /// IKE SAs established (either role).
    pub ike_established: u64,
    /// IKE SA set-ups that failed.
    pub ike_failed: u64,
    /// IKE SAs rekeyed.
    pub ike_rekeys: u64,
    /// IKE SA rekeys that failed.
    pub ike_rekey_failures: u64,
    /// IKE SAs deleted.
    pub ike_deleted: u64,
    /// Child SAs installed.
    pub child_installed: u64,
    /// Child SAs rekeyed.
    pub child_rekeys: u64,
    /// Child SA negotiations that failed.
    pub child_failed: u64,
    /// Child SAs deleted.
    pub child_deleted: u64,
}

impl<E: Enclave + 'static> core::fmt::Debug for Gateway<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gateway")
            .field("tun", &self.dp.tun_name())
            .field("ike_sockets", &self.ike_sockets.len())
            .finish_non_exhaustive()
    }
}

/// Text of an identity for logs and `sa list`, as strongSwan prints it (a DN as
/// `C=CH, O=Test, CN=gw`, a key ID as `@#` and hex), so that it can be pasted into either
/// configuration.
pub fn identity(id: &wire::ike::Identification) -> String {
    use wire::ike::IdType;
    let text = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
    let opaque = || format!("{:?} ({} bytes)", id.ty, id.data.len());
    match id.ty {
        IdType::FQDN | IdType::RFC822_ADDR => text(&id.data),
        IdType::IPV4_ADDR => <[u8; 4]>::try_from(id.data.as_slice())
            .map_or_else(|_| "?".into(), |a| core::net::Ipv4Addr::from(a).to_string()),
        IdType::IPV6_ADDR => <[u8; 16]>::try_from(id.data.as_slice())
            .map_or_else(|_| "?".into(), |a| core::net::Ipv6Addr::from(a).to_string()),
        IdType::DER_ASN1_DN => ike::cert::dn_to_string(&id.data).unwrap_or_else(opaque),
        IdType::KEY_ID => id.data.iter().fold(String::from("@#"), |mut s, b| {
            use core::fmt::Write as _;
            let _ = write!(s, "{b:02x}");
            s
        }),
        _ => opaque(),
    }
}

impl<E: Enclave + 'static> Gateway<E> {
    /// Provisions the configuration's secrets into `enclave`, starts the data plane and
    /// binds the IKE sockets. Call it in the network namespace the gateway serves. Every
    /// secret must have a wrapped file.
    pub fn start(config: &GatewayConfig, enclave: E, log: Box<dyn FnMut(&str) + Send>) -> Result<Self> {
        if let Some(s) = config.ike.secrets.iter().find(|s| s.file.is_none()) {
            return Err(Error::Config { field: "secrets", why: format!("secret {} has no file", s.name) });
        }
        Self::start_with(config, enclave, BTreeMap::new(), log)
    }

    /// [`Self::start`] with secrets already in `enclave` (`given`, by name: unsealed after a
    /// restart, say). A configured secret neither given nor in a file awaits provisioning
    /// ([`Self::add_secret`]); until then its connections fail authentication.
    pub fn start_with(
        config: &GatewayConfig,
        enclave: E,
        given: BTreeMap<String, enclave::SecretHandle>,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> Result<Self> {
        let mut shared = SharedEnclave::new(enclave);
        let mut engine = Endpoint::new(shared.clone(), config.settings.engine);
        // Certificate validity needs the wall clock; the engine itself reads no clock.
        engine.set_wall_clock(Instant::now(), std::time::SystemTime::now());
        let mut secrets = BTreeMap::new();
        for s in &config.ike.secrets {
            let handle = if let Some(h) = given.get(&s.name) {
                *h
            } else if let Some(file) = &s.file {
                let path = config.secret_path(file);
                let blob = zeroize::Zeroizing::new(
                    std::fs::read(&path).map_err(|source| Error::Read { path, source })?,
                );
                shared.provision_secret(&blob)?
            } else {
                continue;
            };
            engine.add_secret(&s.name, handle);
            secrets.insert(s.name.clone(), handle);
        }
        for c in &config.ike.connections {
            engine.add_connection_awaiting_secret(c.clone()).map_err(Error::Ike)?;
        }
        let inbox = Arc::new(IkeInbox::new(INBOX_LIMIT).map_err(Error::Dataplane)?);
        let dp = Dataplane::start_with(
            &config.dataplane,
            shared.clone(),
            dataplane::keys::refuse,
            Some(Arc::clone(&inbox)),
        )
        .map_err(Error::Dataplane)?;
        let mut ike_sockets = Vec::new();
        for addr in config.ike_listeners() {
            let s = UdpSocket::bind(addr)
                .map_err(|source| Error::Io { what: format!("binding {addr}"), source })?;
            s.set_nonblocking(true).map_err(|source| Error::Io { what: format!("{addr}"), source })?;
            // A burst of IKE_SA_INIT requests (hundreds of peers at once) overflows the
            // default receive buffer, and each lost datagram costs the peer a retransmission
            // timeout (seen in bench/ike-setup.sh): take what the data plane's sockets take.
            cio::udp::grow_receive_buffer(&s, IKE_RECEIVE_BUFFER);
            let local = s.local_addr().map_err(|source| Error::Io { what: format!("{addr}"), source })?;
            ike_sockets.push((s, local));
        }
        let control = config.settings.control_socket.as_deref().map(ControlServer::bind).transpose()?;
        Ok(Self {
            engine,
            dp,
            inbox,
            ike_sockets,
            rx: vec![0; 65_536],
            children: Children::default(),
            identities: BTreeMap::new(),
            routes: BTreeSet::new(),
            control,
            next_tick: Instant::now() + LIFETIME_TICK,
            log,
            secrets,
            configured_secrets: config.ike.secrets.iter().map(|s| s.name.clone()).collect(),
            stats: EventCounts::default(),
            frozen: false,
        })
    }

    /// The data plane (for its start-up line and counters).
    pub fn dataplane(&self) -> &Dataplane<SharedEnclave<E>> {
        &self.dp
    }

    /// The IKE listening addresses.
    pub fn ike_addresses(&self) -> Vec<SocketAddr> {
        self.ike_sockets.iter().map(|(_, a)| *a).collect()
    }

    /// Runs one round: reads what arrived, runs timers, sends, handles events and control
    /// requests, then waits at most `wait` for more input.
    pub fn round(&mut self, wait: Duration) {
        let now = Instant::now();
        if self.frozen {
            self.frozen_round(wait);
            return;
        }
        self.read_sockets(now);
        for d in self.inbox.drain() {
            self.engine.handle_datagram(now, d.remote, d.local, &d.bytes);
            // Each answer leaves before the next request is worked on (see `read_sockets`).
            self.flush(now);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        if now >= self.next_tick {
            self.next_tick = now + LIFETIME_TICK;
            // Follows steps of the system clock (certificate validity).
            self.engine.set_wall_clock(now, std::time::SystemTime::now());
            self.lifetimes(now);
        }
        self.flush(now);
        self.serve_control(now);
        self.flush(now);
        let until_engine =
            self.engine.poll_timeout().map_or(wait, |t| t.saturating_duration_since(Instant::now()));
        let until_tick = self.next_tick.saturating_duration_since(Instant::now());
        let timeout = wait.min(until_engine).min(until_tick).min(MAX_WAIT);
        let mut fds: Vec<_> = self.ike_sockets.iter().map(|(s, _)| s.as_fd()).collect();
        fds.push(self.inbox.as_fd());
        if let Some(c) = &self.control {
            fds.push(c.as_fd());
        }
        let _ = cio::poll::wait_readable(&fds, timeout);
    }

    /// A round while frozen for a move: IKE datagrams are read and dropped (the peer
    /// retransmits them to the destination), the engine's timers wait, control requests
    /// are answered; ESP is the data plane's and goes on.
    fn frozen_round(&mut self, wait: Duration) {
        let mut dropped = 0usize;
        for (sock, _) in &self.ike_sockets {
            for _ in 0..READS_PER_ROUND {
                if sock.recv_from(&mut self.rx).is_err() {
                    break;
                }
                dropped += 1;
            }
        }
        dropped += self.inbox.drain().len();
        if dropped > 0 {
            (self.log)(&format!("move: frozen, {dropped} IKE datagram(s) left to the destination"));
        }
        self.serve_control(Instant::now());
        let mut fds: Vec<_> = self.ike_sockets.iter().map(|(s, _)| s.as_fd()).collect();
        fds.push(self.inbox.as_fd());
        if let Some(c) = &self.control {
            fds.push(c.as_fd());
        }
        let _ = cio::poll::wait_readable(&fds, wait.min(MAX_WAIT));
    }

    /// Reads up to [`READS_PER_ROUND`] datagrams per socket, sending the engine's answer to
    /// each before reading the next.
    ///
    /// Answering a whole batch at the end would send it back to back: with the process
    /// enclave a request takes long enough that a burst queues hundreds of them, and their
    /// answers then left in one go (up to 256 IKE_SA_INIT responses, ~100 IKE_AUTH
    /// responses in bench/ike-setup.sh) and overflowed the initiator's receive buffer
    /// (strongSwan's charon, default 208 KiB): ~90 of 400 answers lost in the initiator's
    /// `RcvbufErrors`, each costing it a 4 s retransmission. Sent as each is made, the
    /// answers are spread over the time the batch takes, as strongSwan's are.
    fn read_sockets(&mut self, now: Instant) {
        for i in 0..self.ike_sockets.len() {
            for _ in 0..READS_PER_ROUND {
                let Some((sock, local)) = self.ike_sockets.get(i) else { break };
                // WouldBlock ends the socket's turn; other errors (ICMP-reported) too.
                let Ok((n, from)) = sock.recv_from(&mut self.rx) else { break };
                let local = *local;
                self.engine.handle_datagram(now, from, local, self.rx.get(..n).unwrap_or(&[]));
                self.flush(now);
            }
        }
    }

    /// Sends the engine's datagrams and acts on its events, until both are empty.
    pub(crate) fn flush(&mut self, now: Instant) {
        // Bounded: events can cause transmits and the other way round only a few times.
        for _ in 0..64 {
            let mut worked = false;
            // Events first: an answer that creates a child SA must not leave before the SA
            // is in the data plane, or the peer's first packets on it meet an unknown SPI
            // (seen against strongSwan under load: one ping in 400 lost per child rekey).
            while let Some(e) = self.engine.poll_event() {
                worked = true;
                self.on_event(now, e);
            }
            while let Some(t) = self.engine.poll_transmit() {
                worked = true;
                self.send(&t);
            }
            if !worked {
                break;
            }
        }
    }

    fn send(&mut self, t: &ike::Transmit) {
        let sent = if t.local.port() == IKE_PORT {
            self.ike_sockets
                .iter()
                .find(|(_, a)| *a == t.local)
                .is_some_and(|(s, _)| s.send_to(&t.contents, t.remote).is_ok())
        } else {
            self.dp.send_udp(t.local, t.remote, &t.contents).is_ok()
        };
        if !sent {
            (self.log)(&format!(
                "ike: could not send {} bytes {} -> {}",
                t.contents.len(),
                t.local,
                t.remote
            ));
        }
    }

    fn on_event(&mut self, now: Instant, e: Event) {
        match e {
            Event::IkeSaEstablished {
                sa,
                connection,
                role,
                choice,
                local_id,
                remote_id,
                local,
                remote,
                nat,
                seal,
            } => {
                let ids = (identity(&local_id), identity(&remote_id));
                (self.log)(&format!(
                    "ike: {connection} #{} established as {role:?}: {} @ {local} <-> {} @ {remote}, {}/{:?}/{:?}, nat {nat:?}, \
                     trusted bytes of this IKE SA {} -> {} after clear-and-seal",
                    sa.0, ids.0, ids.1, crate::control::suite_name(choice.suite), choice.prf, choice.group, seal.ike_sa_bytes_before, seal.ike_sa_bytes_after
                ));
                self.identities.insert(sa, ids);
                self.stats.ike_established += 1;
            }
            Event::ChildSaReady { sa, child } => {
                let (name, spi_in, spi_out) = (child.name.clone(), child.spi_inbound, child.spi_outbound);
                self.add_routes(&child);
                self.stats.child_installed += 1;
                match self.children.install(&self.dp, sa, child, now) {
                    Ok(()) => (self.log)(&format!(
                        "child: {name} installed, in {spi_in:08x} out {spi_out:08x} (IKE SA #{})",
                        sa.0
                    )),
                    Err(err) => {
                        (self.log)(&format!("child: {name} {spi_in:08x} not installed: {err}; deleting it"));
                        let _ = self.engine.delete_child(now, sa, spi_in);
                    }
                }
            }
            Event::ChildSaRekeyed { sa, old_spi_inbound, child, outbound } => {
                let (name, spi_in, spi_out) = (child.name.clone(), child.spi_inbound, child.spi_outbound);
                self.stats.child_rekeys += 1;
                match self.children.rekeyed(&self.dp, sa, old_spi_inbound, child, outbound, now) {
                    Ok(()) => (self.log)(&format!(
                        "child: {name} rekeyed {old_spi_inbound:08x} -> in {spi_in:08x} out {spi_out:08x} \
                         (outbound moves {})",
                        match outbound {
                            ike::OutboundSwitch::Now => "now",
                            ike::OutboundSwitch::OnPeerDelete => "on the peer's Delete",
                            _ => "never: redundant after a rekey collision",
                        }
                    )),
                    Err(err) => {
                        (self.log)(&format!("child: {name} rekey to {spi_in:08x} not installed: {err}"));
                        let _ = self.engine.delete_child(now, sa, spi_in);
                    }
                }
            }
            Event::ChildSaRetired { sa, child, until } => {
                match self.children.retire(&self.dp, child.spi_inbound) {
                    Ok(()) => (self.log)(&format!(
                        "child: {} {:08x} retired (IKE SA #{}): inbound only, for {} ms",
                        child.name,
                        child.spi_inbound,
                        sa.0,
                        until.saturating_duration_since(now).as_millis()
                    )),
                    Err(err) => (self.log)(&format!("child: {} retire: {err}", child.name)),
                }
            }
            Event::ChildSaDeleted { sa, child } => match self
                .children
                .remove(&self.dp, child.spi_inbound)
                .inspect(|_| self.stats.child_deleted += 1)
            {
                Ok(_) => (self.log)(&format!(
                    "child: {} {:08x} deleted (IKE SA #{})",
                    child.name, child.spi_inbound, sa.0
                )),
                Err(err) => (self.log)(&format!("child: {} delete: {err}", child.name)),
            },
            Event::ChildSaFailed { sa, child, error } => {
                self.stats.child_failed += 1;
                (self.log)(&format!("child: {child} failed on IKE SA #{}: {error}", sa.0));
            }
            Event::IkeSaRekeyed { old, new, role, choice, seal } => {
                self.stats.ike_rekeys += 1;
                let moved = self.children.reassign(old, new);
                if let Some(ids) = self.identities.remove(&old) {
                    self.identities.insert(new, ids);
                }
                (self.log)(&format!(
                    "ike: #{} rekeyed -> #{} as {role:?}, {}/{:?}/{:?}, {moved} child SA(s) moved, \
                     trusted bytes of this IKE SA {} -> {} after clear-and-seal",
                    old.0,
                    new.0,
                    crate::control::suite_name(choice.suite),
                    choice.prf,
                    choice.group,
                    seal.ike_sa_bytes_before,
                    seal.ike_sa_bytes_after
                ));
            }
            Event::IkeSaRekeyFailed { sa, error } => {
                self.stats.ike_rekey_failures += 1;
                (self.log)(&format!("ike: #{} rekey failed: {error}", sa.0));
            }
            Event::IkeSaDeleted { sa, reason } => {
                self.stats.ike_deleted += 1;
                self.identities.remove(&sa);
                (self.log)(&format!("ike: #{} deleted: {reason:?}", sa.0));
            }
            Event::IkeSaFailed { sa, connection, error } => {
                self.stats.ike_failed += 1;
                (self.log)(&format!("ike: {connection} #{} failed: {error}", sa.0));
            }
            other => (self.log)(&format!("ike: event {other:?}")),
        }
    }

    /// Routes the child's remote selectors into the TUN device (once per prefix). They
    /// stay after the child goes: with no SA, the data plane drops that traffic (counted),
    /// which is what a VPN must do, rather than let it take the default route in clear.
    pub(crate) fn add_routes(&mut self, child: &ike::ChildSa) {
        for (start, end) in Children::remote_ranges(child) {
            let Some(prefixes) = range_prefixes(start, end, ROUTES_PER_SELECTOR) else {
                (self.log)(&format!("route: {start}-{end} needs too many prefixes; add routes by hand"));
                continue;
            };
            for (addr, len) in prefixes {
                if self.routes.insert((addr, len)) {
                    if let Err(e) = self.dp.add_tun_route(cio::netdev::Prefix { addr, len }) {
                        (self.log)(&format!("route: {addr}/{len} via {}: {e}", self.dp.tun_name()));
                    }
                }
            }
        }
    }

    /// Soft expiry: the child is rekeyed (once); hard expiry: it is deleted.
    fn lifetimes(&mut self, now: Instant) {
        if let Err(e) = self.children.switch_overdue(&self.dp, now) {
            (self.log)(&format!("child: switching to a rekeyed SA: {e}"));
        }
        for ev in self.dp.handle_timeout(now) {
            let Some(c) = self.children.find(ev.sa) else { continue };
            let (ike, spi) = (c.ike, c.child.spi_inbound);
            // A child already replaced by a rekey only waits for its Delete. Either
            // direction's soft limit rekeys it (volume limits count each direction).
            let current = c.outbound.is_some();
            match ev.kind {
                LifetimeKind::Soft if current => {
                    if let Err(e) = self.engine.rekey_child(now, ike, spi) {
                        (self.log)(&format!("child: rekey of {spi:08x}: {e}"));
                    } else {
                        (self.log)(&format!("child: {spi:08x} soft lifetime ({:?}): rekeying", ev.trigger));
                    }
                }
                LifetimeKind::Hard if matches!(ev.sa, SaRef::Inbound { .. }) => {
                    (self.log)(&format!("child: {spi:08x} hard lifetime ({:?}): deleting", ev.trigger));
                    if self.engine.delete_child(now, ike, spi).is_err() {
                        let _ = self.children.remove(&self.dp, spi);
                    }
                }
                _ => {}
            }
        }
    }

    fn serve_control(&mut self, now: Instant) {
        let Some(server) = self.control.take() else { return };
        for _ in 0..16 {
            let Some(mut conn) = server.accept() else { break };
            let Some(request) = conn.request() else { continue };
            let reply = match request {
                Ok(r) => self.request(now, &r),
                Err(e) => format!("error: {e}\n"),
            };
            conn.reply(&reply);
        }
        self.control = Some(server);
    }

    /// Answers one control request (the control socket's, or the service API's) in text.
    pub fn request(&mut self, now: Instant, request: &Request) -> String {
        match request {
            Request::List => control::list(&self.engine, &self.children, &self.identities, &self.dp, now),
            Request::Initiate(name) => match self.engine.initiate(now, name) {
                Ok(sa) => format!("initiating {name} as IKE SA #{}\n", sa.0),
                Err(e) => format!("error: {e}\n"),
            },
            Request::RekeyChild(spi) => match self.children.iter().find(|c| c.child.spi_inbound == *spi) {
                Some(c) => match self.engine.rekey_child(now, c.ike, *spi) {
                    Ok(()) => format!("rekeying child {spi:08x}\n"),
                    Err(e) => format!("error: {e}\n"),
                },
                None => format!("error: no child SA with inbound SPI {spi:08x}\n"),
            },
            Request::RekeyIke(id) => match self.engine.rekey_ike(now, SaId(*id)) {
                Ok(()) => format!("rekeying IKE SA #{id}\n"),
                Err(e) => format!("error: {e}\n"),
            },
            Request::TerminateIke(id) => match self.engine.delete_ike(now, SaId(*id)) {
                Ok(()) => format!("deleting IKE SA #{id}\n"),
                Err(e) => format!("error: {e}\n"),
            },
            Request::Counters => control::counters(&self.engine, &self.dp, &self.inbox),
        }
    }

    /// Writes a line to the gateway's log.
    pub fn log_line(&mut self, line: &str) {
        (self.log)(line);
    }

    /// Starts `connection` as initiator (its IKE SA number), sending at the next round.
    pub fn initiate(&mut self, now: Instant, connection: &str) -> Result<SaId> {
        let sa = self.engine.initiate(now, connection).map_err(Error::Ike)?;
        self.flush(now);
        Ok(sa)
    }

    /// The tenant's enclave, shared with the engine and the data plane (for provisioning
    /// calls and health checks).
    pub fn enclave(&self) -> SharedEnclave<E> {
        self.engine.enclave().clone()
    }

    /// Gives the engine the secret `name` (provisioned into this gateway's enclave by the
    /// caller). A secret the configuration does not name is refused; one that replaces an
    /// older secret of the same name deletes the older one from the enclave.
    pub fn add_secret(&mut self, name: &str, handle: enclave::SecretHandle) -> Result<()> {
        if !self.configured_secrets.iter().any(|s| s == name) {
            return Err(Error::Config { field: "secrets", why: format!("no secret {name} is configured") });
        }
        self.engine.provide_secret(name, handle).map_err(Error::Ike)?;
        if let Some(old) = self.secrets.insert(name.to_owned(), handle) {
            if old != handle {
                let _ = self.engine.enclave_mut().delete_secret(old);
            }
        }
        (self.log)(&format!("secret: {name} provisioned"));
        Ok(())
    }

    /// Configured secret names, each with whether the enclave holds it.
    pub fn secrets(&self) -> Vec<(String, bool)> {
        self.configured_secrets.iter().map(|n| (n.clone(), self.secrets.contains_key(n))).collect()
    }

    /// Names of the connections with an IKE SA past IKE_AUTH (to bring back after a
    /// restart).
    pub fn established_connections(&self) -> BTreeSet<String> {
        self.engine
            .ike_sas()
            .filter(|sa| sa.state() == ike::IkeSaState::Established)
            .map(|sa| sa.connection().to_owned())
            .collect()
    }

    /// Names of the connections with an IKE SA in any state (set up, up, or rekeyed).
    pub fn connections_with_sa(&self) -> BTreeSet<String> {
        self.engine
            .ike_sas()
            .filter(|sa| sa.state() != ike::IkeSaState::Deleted)
            .map(|sa| sa.connection().to_owned())
            .collect()
    }

    /// Counts of SA events since start.
    pub fn event_counts(&self) -> EventCounts {
        self.stats
    }

    /// The tunnel table and counters, as data (the service's API and metrics).
    pub fn snapshot(&self, now: Instant) -> crate::snapshot::Snapshot {
        crate::snapshot::take(
            &self.engine,
            &self.children,
            &self.identities,
            &self.dp,
            &self.inbox,
            self.stats,
            now,
        )
    }

    /// Takes the control socket out of this gateway (for its successor: [`Self::set_control`]),
    /// so that stopping this one leaves it in place.
    pub fn take_control(&mut self) -> Option<ControlServer> {
        self.control.take()
    }

    /// Serves `control` from now on (a predecessor's control socket, which a gateway that
    /// dropped root could not bind again; start this one with no `control_socket`).
    pub fn set_control(&mut self, control: Option<ControlServer>) {
        self.control = control;
    }

    /// Stops the data plane and removes the control socket; returns the data plane's report.
    pub fn stop(mut self) -> dataplane::StopReport {
        if let Some(c) = self.control.take() {
            c.remove();
        }
        self.dp.stop()
    }
}

#[cfg(test)]
mod tests {
    use super::identity;
    use wire::ike::{IdType, Identification};

    #[test]
    fn identities_print_as_strongswan_writes_them() {
        let dn =
            ike::config::parse_identity("C=CH, O=Cloister Test, CN=site-b.cloister.test").unwrap().unwrap();
        assert_eq!(dn.ty, IdType::DER_ASN1_DN);
        assert_eq!(identity(&dn), "C=CH, O=Cloister Test, CN=site-b.cloister.test");
        let key_id = ike::config::parse_identity("@#0a1bff").unwrap().unwrap();
        assert_eq!(identity(&key_id), "@#0a1bff");
        for text in ["gw.cloister.test", "admin@cloister.test", "198.18.0.2", "2001:db8::2"] {
            assert_eq!(identity(&ike::config::parse_identity(text).unwrap().unwrap()), text);
        }
        let broken = Identification::new(IdType::DER_ASN1_DN, vec![0x30, 0x05]);
        assert_eq!(identity(&broken), "DER_ASN1_DN (2 bytes)");
    }
}
