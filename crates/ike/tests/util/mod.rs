//! Two engines, each with its own enclave, joined by an in-memory network with a virtual
//! clock (STYLE.md §7; quinn-proto's tests/util.rs `Pair`). The network can lose chosen
//! datagrams and put a NAT in front of the initiator.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use cloister_ike::{ChildSa, Config, Endpoint, EndpointConfig, Event, SaId, Transmit};
use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
use enclave_core::provision::wrap_secret;
use enclave_core::{
    Enclave, EnclaveConfig, EspDescriptor, EspStatus, InlineEnclave, Limits, ProvisioningKey, SecretHandle,
    SecretKind, TenantId,
};

pub const PROVISIONING_KEY: [u8; 32] = [0x42; 32];
pub const I_ADDR: &str = "198.18.0.1";
pub const R_ADDR: &str = "198.18.0.2";
/// Where the initiator appears when behind the test NAT.
pub const NAT_ADDR: &str = "198.18.100.1";
/// The NAT maps the initiator's port p to p + NAT_PORT_OFFSET.
pub const NAT_PORT_OFFSET: u16 = 10_000;

/// The test host's platform key (PKCS#8) and public key: every test enclave runs on it and
/// trusts it for moves (tests/live_move.rs).
fn platform() -> &'static (Vec<u8>, Vec<u8>) {
    static PLATFORM: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    PLATFORM.get_or_init(|| {
        let key = SoftwareAttestation::generate_platform_key().unwrap().to_vec();
        let public = SoftwareAttestation::new(&key, CodeIdentity::Bytes(vec![]), b"")
            .unwrap()
            .platform_public_key()
            .to_vec();
        (key, public)
    })
}

/// A fresh enclave for `tenant`.
pub fn start_enclave(tenant: u32) -> InlineEnclave {
    start_enclave_limited(tenant, Limits::default())
}

/// A fresh enclave for `tenant` with these table sizes.
pub fn start_enclave_limited(tenant: u32, limits: Limits) -> InlineEnclave {
    let config = EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(PROVISIONING_KEY),
        trusted_platforms: vec![platform().1.clone()],
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits,
    };
    let attestation = SoftwareAttestation::new(
        &platform().0,
        CodeIdentity::Bytes(b"ike-tests".to_vec()),
        &config.measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start(config, Box::new(attestation)).unwrap()
}

/// Wraps `secret` for `enclave` (as the tenant's provisioning tool would) and provisions it.
pub fn provision(enclave: &mut InlineEnclave, kind: SecretKind, secret: &[u8]) -> SecretHandle {
    let key = ProvisioningKey::from_bytes(PROVISIONING_KEY);
    let blob = wrap_secret(&key, enclave.tenant(), kind, secret).unwrap();
    enclave.provision_secret(&blob).unwrap()
}

/// An endpoint with the connections of `toml`, whose secret `psk` holds `psk`.
pub fn endpoint(toml: &str, psk: &[u8], config: EndpointConfig) -> Endpoint<InlineEnclave> {
    endpoint_on(start_enclave(1), toml, psk, config)
}

/// [`endpoint`] over this enclave.
pub fn endpoint_on(
    mut enclave: InlineEnclave,
    toml: &str,
    psk: &[u8],
    config: EndpointConfig,
) -> Endpoint<InlineEnclave> {
    let handle = provision(&mut enclave, SecretKind::PreSharedKey, psk);
    let mut ep = Endpoint::new(enclave, config);
    ep.add_secret("psk", handle);
    for conn in Config::from_toml(toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep
}

/// 2026-01-01T00:00:00Z: inside the test certificates' validity (2025 to 2035).
pub fn wall() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// The absolute path of a file of tests/certs (see its README).
pub fn cert_file(name: &str) -> String {
    format!("{}/tests/certs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The enclave's kind for a tests/certs private key, by its name (`a-rsa`, `b-p384`, ...).
pub fn key_kind(name: &str) -> SecretKind {
    if name.ends_with("p256") {
        SecretKind::EcdsaP256PrivateKey
    } else if name.ends_with("p384") {
        SecretKind::EcdsaP384PrivateKey
    } else {
        SecretKind::RsaPrivateKey
    }
}

/// An endpoint with the connections of `toml`: secret `key` is the private key
/// tests/certs/KEY.key.der (PKCS#8), secret `psk` the pre-shared key of [`Pair`].
pub fn pubkey_endpoint(toml: &str, key: &str, config: EndpointConfig) -> Endpoint<InlineEnclave> {
    let mut enclave = start_enclave(1);
    let pkcs8 = std::fs::read(cert_file(&format!("{key}.key.der"))).unwrap();
    let key_handle = provision(&mut enclave, key_kind(key), &pkcs8);
    let psk = provision(&mut enclave, SecretKind::PreSharedKey, b"a shared secret of the tenant");
    let mut ep = Endpoint::new(enclave, config);
    ep.add_secret("key", key_handle);
    ep.add_secret("psk", psk);
    for conn in Config::from_toml(toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep
}

/// Site A's (initiator's) configuration with these `local` and `remote` tables' contents.
pub fn pubkey_initiator(local: &str, remote: &str) -> String {
    format!(
        r#"
[connections.to-b]
local_addrs = ["{I_ADDR}"]
remote_addrs = ["{R_ADDR}"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = {{ {local} }}
remote = {{ {remote} }}
children.net = {{ local_ts = ["198.18.1.0/24"], remote_ts = ["198.18.2.0/24"], esp_proposals = ["aes256gcm16"] }}
"#
    )
}

/// Site B's (responder's) configuration with these `local` and `remote` tables' contents.
pub fn pubkey_responder(local: &str, remote: &str) -> String {
    format!(
        r#"
[connections.from-a]
local_addrs = ["{R_ADDR}"]
remote_addrs = ["%any"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = {{ {local} }}
remote = {{ {remote} }}
children.net = {{ local_ts = ["198.18.2.0/24"], remote_ts = ["198.18.0.0/16"], esp_proposals = ["aes256gcm16"] }}
"#
    )
}

/// The initiator's configuration (site A) with these proposals.
pub fn initiator_config(ike: &str, esp: &str) -> String {
    format!(
        r#"
[connections.to-b]
local_addrs = ["{I_ADDR}"]
remote_addrs = ["{R_ADDR}"]
proposals = ["{ike}"]
[connections.to-b.local]
auth = "psk"
id = "site-a.cloister.test"
secret = "psk"
[connections.to-b.remote]
auth = "psk"
id = "site-b.cloister.test"
[connections.to-b.children.net]
local_ts = ["198.18.1.0/24"]
remote_ts = ["198.18.2.0/24"]
esp_proposals = ["{esp}"]
"#
    )
}

/// The responder's configuration (site B) with these proposals.
pub fn responder_config(ike: &str, esp: &str) -> String {
    format!(
        r#"
[connections.from-a]
local_addrs = ["{R_ADDR}"]
remote_addrs = ["%any"]
proposals = ["{ike}"]
[connections.from-a.local]
auth = "psk"
id = "site-b.cloister.test"
secret = "psk"
[connections.from-a.remote]
auth = "psk"
id = "site-a.cloister.test"
[connections.from-a.children.net]
local_ts = ["198.18.2.0/24"]
remote_ts = ["198.18.0.0/16"]
esp_proposals = ["{esp}"]
"#
    )
}

/// Which way a datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Initiator to responder.
    ToResponder,
    /// Responder to initiator.
    ToInitiator,
}

/// A datagram on the wire, as the receiver will see it.
#[derive(Debug, Clone)]
pub struct Wire {
    pub dir: Dir,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub contents: Vec<u8>,
}

/// The IKE message inside (without the non-ESP marker).
impl Wire {
    pub fn ike(&self) -> &[u8] {
        if self.to.port() == 4500 {
            &self.contents[4..]
        } else {
            &self.contents
        }
    }

    pub fn message(&self) -> wire::ike::Message {
        wire::ike::Message::decode(self.ike()).unwrap()
    }
}

pub struct Pair {
    pub i: Endpoint<InlineEnclave>,
    pub r: Endpoint<InlineEnclave>,
    pub now: Instant,
    pub start: Instant,
    pub nat: bool,
    pub i_events: Vec<Event>,
    pub r_events: Vec<Event>,
    /// Every datagram delivered or lost, in order.
    pub log: Vec<Wire>,
    /// Decides whether a datagram is delivered (true) or lost.
    pub filter: Box<dyn FnMut(&Wire) -> bool>,
}

impl Pair {
    pub fn new(i: Endpoint<InlineEnclave>, r: Endpoint<InlineEnclave>) -> Self {
        let now = Instant::now();
        Self {
            i,
            r,
            now,
            start: now,
            nat: false,
            i_events: Vec::new(),
            r_events: Vec::new(),
            log: Vec::new(),
            filter: Box::new(|_| true),
        }
    }

    /// Gives both endpoints the wall-clock time [`wall`] at the current virtual time.
    pub fn with_wall_clock(mut self) -> Self {
        self.i.set_wall_clock(self.now, wall());
        self.r.set_wall_clock(self.now, wall());
        self
    }

    /// A pair with default endpoint settings and these proposals on both sides.
    pub fn with_proposals(ike: &str, esp: &str) -> Self {
        Self::new(
            endpoint(
                &initiator_config(ike, esp),
                b"a shared secret of the tenant",
                EndpointConfig::default(),
            ),
            endpoint(
                &responder_config(ike, esp),
                b"a shared secret of the tenant",
                EndpointConfig::default(),
            ),
        )
    }

    /// Where a transmit lands, through the NAT if there is one.
    fn route(&self, dir: Dir, t: Transmit) -> Wire {
        let (mut from, mut to) = (t.local, t.remote);
        if self.nat {
            match dir {
                Dir::ToResponder => {
                    from = SocketAddr::new(NAT_ADDR.parse().unwrap(), from.port() + NAT_PORT_OFFSET)
                }
                Dir::ToInitiator => {
                    assert_eq!(to.ip(), NAT_ADDR.parse::<IpAddr>().unwrap(), "responder must answer the NAT");
                    to = SocketAddr::new(I_ADDR.parse().unwrap(), to.port() - NAT_PORT_OFFSET);
                }
            }
        }
        Wire { dir, from, to, contents: t.contents }
    }

    /// Moves datagrams both ways until none is left; returns how many were delivered.
    pub fn drive(&mut self) -> usize {
        let mut delivered = 0;
        for _ in 0..1000 {
            let mut batch = VecDeque::new();
            while let Some(t) = self.i.poll_transmit() {
                batch.push_back(self.route(Dir::ToResponder, t));
            }
            while let Some(t) = self.r.poll_transmit() {
                batch.push_back(self.route(Dir::ToInitiator, t));
            }
            if batch.is_empty() {
                break;
            }
            for w in batch {
                self.log.push(w.clone());
                if !(self.filter)(&w) {
                    continue;
                }
                delivered += 1;
                match w.dir {
                    Dir::ToResponder => self.r.handle_datagram(self.now, w.from, w.to, &w.contents),
                    Dir::ToInitiator => self.i.handle_datagram(self.now, w.from, w.to, &w.contents),
                }
            }
        }
        self.collect_events();
        delivered
    }

    /// Advances the clock by `d` and runs both timers, then drives.
    pub fn advance(&mut self, d: Duration) -> usize {
        self.now += d;
        self.i.handle_timeout(self.now);
        self.r.handle_timeout(self.now);
        self.drive()
    }

    /// Jumps from timeout to timeout (driving in between) until `limit` has passed.
    pub fn run_for(&mut self, limit: Duration) {
        let end = self.now + limit;
        self.drive();
        loop {
            let next = [self.i.poll_timeout(), self.r.poll_timeout()].into_iter().flatten().min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.i.handle_timeout(self.now);
                    self.r.handle_timeout(self.now);
                    self.drive();
                }
                _ => break,
            }
        }
        self.now = end;
        self.collect_events();
    }

    pub fn collect_events(&mut self) {
        while let Some(e) = self.i.poll_event() {
            self.i_events.push(e);
        }
        while let Some(e) = self.r.poll_event() {
            self.r_events.push(e);
        }
    }

    /// Initiates the initiator's connection and drives the exchange.
    pub fn connect(&mut self) -> SaId {
        let id = self.i.initiate(self.now, "to-b").unwrap();
        self.drive();
        id
    }

    /// The only established IKE SA of an endpoint's events.
    pub fn established(events: &[Event]) -> Vec<SaId> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::IkeSaEstablished { sa, .. } => Some(*sa),
                _ => None,
            })
            .collect()
    }

    /// The child SAs reported ready.
    pub fn ready(events: &[Event]) -> Vec<ChildSa> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::ChildSaReady { child, .. } => Some(child.clone()),
                _ => None,
            })
            .collect()
    }

    /// The messages on the wire so far, as (direction, exchange, response?).
    pub fn exchanges(&self) -> Vec<(Dir, wire::ike::ExchangeType, bool)> {
        self.log
            .iter()
            .map(|w| {
                let h = wire::ike::IkeHeader::peek(w.ike()).unwrap().header;
                (w.dir, h.exchange_type, h.flags.response())
            })
            .collect()
    }
}

/// Encrypts one ESP packet with `from`'s outbound SA and decrypts it with `to`'s inbound
/// SA: the two enclaves agree on the child SA's keys (KEYMAT) and SPIs.
pub fn esp_round_trip(from: &mut InlineEnclave, out: &ChildSa, to: &mut InlineEnclave, inb: &ChildSa) {
    assert_eq!(out.spi_outbound, inb.spi_inbound);
    assert_eq!(out.suite, inb.suite);
    let (head, icv) = out.suite.esp_overhead();
    let payload = 64;
    let len = head + payload + icv;
    let mut area = vec![0u8; len];
    for (k, b) in area[head..head + payload].iter_mut().enumerate() {
        *b = u8::try_from(k).unwrap();
    }
    let original = area.clone();
    let mut status = [EspStatus::NotProcessed];
    let l = u32::try_from(len).unwrap();
    from.esp_batch(&mut area, &[EspDescriptor::encrypt(out.handles.outbound, 0, l, 1)], &mut status).unwrap();
    assert_eq!(status[0], EspStatus::Ok);
    assert_eq!(&area[..4], &out.spi_outbound.to_be_bytes());
    to.esp_batch(&mut area, &[EspDescriptor::decrypt(inb.handles.inbound, 0, l, 1)], &mut status).unwrap();
    assert_eq!(status[0], EspStatus::Ok, "{:?}", out.suite);
    assert_eq!(area[head..head + payload], original[head..head + payload]);
}
