//! Established IKE SAs as data, for a live move of a tenant to another host (issue 8).
//!
//! The source endpoint writes each established, quiet IKE SA as a [`CarriedIkeSa`]: public
//! values, the enclave's handles of its keys and the sealed blobs, never a key byte. The
//! enclave's own export carries the keys; the destination's import maps each old handle to
//! a new one ([`MigrationRestore`]), and the destination endpoint rebuilds the SAs with
//! those. The peer notices nothing: SPIs, message IDs, the cached last response, NAT state,
//! child SAs and the lifetime schedule all continue.
//!
//! Only quiet SAs are carried: an exchange in flight holds DH values, nonces and
//! retransmission state whose move would buy little, since the peer retransmits or the
//! caller retries the export a moment later ([`Error::MoveBusy`]).
//!
//! Every record is checked on import: a malformed or inconsistent one is refused with
//! [`Error::CarriedSa`], never trusted blindly, since it crossed the untrusted side (unless
//! the caller carried it inside the enclave's authenticated package).

use core::fmt;
use core::net::{IpAddr, SocketAddr};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use enclave::migration::MigrationRestore;
use enclave::{
    AuthMethod, ChildSaPair, Cipher, DhGroup, EspSaHandle, HandleKind, IkeSaHandle, Integ, Prf, Role,
    SealedBlob, SecretHandle, SignatureScheme, Suite,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use wire::ike::{IdType, Identification, IkeHeader};

use super::{ike_rekey, Core, Established, IkeSa, State};
use crate::auth::{HashAlgorithm, PeerHashes};
use crate::cert::Certificate;
use crate::config::{Connection, VolumeLimits};
use crate::error::Error;
use crate::event::{ChildSa, Encapsulation, SaId};
use crate::nat::NatState;
use crate::proposal::IkeChoice;
use crate::ts::{AddressRange, PortRange, TrafficSelector};

use super::authenticate::PeerAuth;

/// The record format this code writes and reads.
const FORMAT: u8 = 1;

/// An established IKE SA as data, for a live move: public values, enclave handles and
/// sealed blobs only, never a key byte.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CarriedIkeSa {
    format: u8,
    id: u64,
    connection: String,
    role: CarriedRole,
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
    init_remote: SocketAddr,
    nat: CarriedNat,
    next_request: u32,
    expected_request: u32,
    last_response: Option<CarriedResponse>,
    /// We send IKE fragments (RFC 7383: both ends announced support).
    #[serde(default)]
    fragments: bool,
    peer_auth: Option<CarriedPeerAuth>,
    /// IANA hash IDs from the peer's SIGNATURE_HASH_ALGORITHMS, if it sent one.
    peer_hashes: Option<Vec<u16>>,
    choice: CarriedSuite,
    prf: u16,
    group: u16,
    /// The RFC 9370 additional key exchanges IKE_SA_INIT did, by slot (0: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    additional: Vec<u16>,
    /// The source enclave's handle of the SA's keys.
    ike: u32,
    sealed_sk_d: Hex,
    sealed_state: Hex,
    children: Vec<CarriedChild>,
    initial_contact: bool,
    /// The soft lifetime has queued its rekey already (it failed for good).
    soft_rekey_done: bool,
    /// Time since the SA was made, at export: its rekey and expiry follow from it.
    age: Duration,
    /// Time since the peer was last heard, at export: liveness checks follow from it.
    silent_for: Duration,
}

/// What [`crate::Endpoint::export_sas`] carries: the established SAs, and how many others
/// (still connecting or half-open) were left behind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Carried {
    /// The established IKE SAs.
    pub sas: Vec<CarriedIkeSa>,
    /// IKE SAs not yet established, not carried: their peers start over.
    pub left_out: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CarriedRole {
    Initiator,
    Responder,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct CarriedNat {
    local_behind_nat: bool,
    remote_behind_nat: bool,
    supported: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CarriedResponse {
    id: u32,
    /// The IKE message as sent (without a non-ESP marker): the one datagram, or the first
    /// fragment.
    message: Hex,
    /// The other fragments, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    more: Vec<Hex>,
}

impl CarriedResponse {
    fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        core::iter::once(&self.message).chain(&self.more).map(|h| h.0.as_slice())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CarriedPeerAuth {
    method: u8,
    scheme: Option<String>,
    certificate: Option<Hex>,
    id_type: u8,
    id_reserved: [u8; 3],
    id_data: Hex,
}

/// A transform pair by IANA numbers: encryption ID, its key length in bits (0 when the
/// cipher has none), integrity ID for non-AEAD ciphers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct CarriedSuite {
    encr: u16,
    key_bits: u16,
    integ: Option<u16>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CarriedChild {
    name: String,
    spi_inbound: u32,
    spi_outbound: u32,
    /// The source enclave's handles.
    inbound: u32,
    outbound: u32,
    suite: CarriedSuite,
    esn: bool,
    local_ts: Vec<CarriedTs>,
    remote_ts: Vec<CarriedTs>,
    /// UDP ports (ours, the peer's) for ESP in UDP; none for raw ESP.
    udp: Option<(u16, u16)>,
    local: SocketAddr,
    remote: SocketAddr,
    rekey_time: Duration,
    life_time: Duration,
    rekey_bytes: Option<u64>,
    life_bytes: Option<u64>,
    rekey_packets: Option<u64>,
    life_packets: Option<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct CarriedTs {
    protocol: u8,
    start_port: u16,
    end_port: u16,
    start: IpAddr,
    end: IpAddr,
}

/// Bytes, as hex in human-readable formats (JSON arrays of numbers would triple them).
#[derive(Clone, PartialEq, Eq)]
struct Hex(Vec<u8>);

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let text: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
            s.serialize_str(&text)
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return Vec::<u8>::deserialize(d).map(Self);
        }
        let text = String::deserialize(d)?;
        let digit = |c: u8| char::from(c).to_digit(16).and_then(|v| u8::try_from(v).ok());
        text.as_bytes()
            .chunks(2)
            .map(|pair| match pair {
                [hi, lo] => Some(digit(*hi)? << 4 | digit(*lo)?),
                _ => None,
            })
            .collect::<Option<Vec<u8>>>()
            .map(Self)
            .ok_or_else(|| serde::de::Error::custom("not an even number of hex digits"))
    }
}

/// RFC 7427 signature schemes by name: the enclave's type has no number of its own.
const SCHEMES: [(SignatureScheme, &str); 12] = [
    (SignatureScheme::RsaPkcs1Sha256, "rsa-pkcs1-sha256"),
    (SignatureScheme::RsaPkcs1Sha384, "rsa-pkcs1-sha384"),
    (SignatureScheme::RsaPkcs1Sha512, "rsa-pkcs1-sha512"),
    (SignatureScheme::RsaPssSha256, "rsa-pss-sha256"),
    (SignatureScheme::RsaPssSha384, "rsa-pss-sha384"),
    (SignatureScheme::RsaPssSha512, "rsa-pss-sha512"),
    (SignatureScheme::EcdsaP256Sha256, "ecdsa-p256-sha256"),
    (SignatureScheme::EcdsaP384Sha384, "ecdsa-p384-sha384"),
    (SignatureScheme::EcdsaP256Sha384, "ecdsa-p256-sha384"),
    (SignatureScheme::EcdsaP256Sha512, "ecdsa-p256-sha512"),
    (SignatureScheme::EcdsaP384Sha256, "ecdsa-p384-sha256"),
    (SignatureScheme::EcdsaP384Sha512, "ecdsa-p384-sha512"),
];

impl CarriedSuite {
    fn of(suite: Suite) -> Option<Self> {
        let encr = suite.cipher.id();
        let key_bits =
            [0, 128, 192, 256].into_iter().find(|b| Cipher::from_id(encr, *b) == Some(suite.cipher))?;
        Some(Self { encr, key_bits, integ: suite.integ.map(Integ::id) })
    }

    fn suite(self) -> Option<Suite> {
        let cipher = Cipher::from_id(self.encr, self.key_bits)?;
        let integ = match self.integ {
            Some(id) => Some(Integ::from_id(id)?),
            None => None,
        };
        let suite = Suite { cipher, integ };
        suite.is_consistent().then_some(suite)
    }
}

impl CarriedTs {
    fn of(ts: &TrafficSelector) -> Self {
        Self {
            protocol: ts.protocol,
            start_port: ts.ports.start,
            end_port: ts.ports.end,
            start: ts.addresses.start(),
            end: ts.addresses.end(),
        }
    }

    fn selector(self) -> Option<TrafficSelector> {
        let addresses = AddressRange::range(self.start, self.end).ok()?;
        let ports = PortRange { start: self.start_port, end: self.end_port };
        (ports.start <= ports.end).then_some(TrafficSelector { addresses, protocol: self.protocol, ports })
    }
}

impl CarriedIkeSa {
    /// Our identifier of the SA (our SPI); it stays the same after the move.
    pub fn id(&self) -> SaId {
        SaId(self.id)
    }

    /// The connection's name; the destination must have a connection of that name.
    pub fn connection(&self) -> &str {
        &self.connection
    }

    /// Whether we initiated the SA.
    pub fn role(&self) -> Role {
        match self.role {
            CarriedRole::Initiator => Role::Initiator,
            CarriedRole::Responder => Role::Responder,
        }
    }

    /// The initiator's and responder's SPIs.
    pub fn spis(&self) -> (u64, u64) {
        (self.spi_i, self.spi_r)
    }

    /// Rebuilds the SA for `conn` (its secret is `secret` here), with the handles
    /// `restore` gives for the old ones, its clocks restarted relative to `now`.
    pub(crate) fn rebuild(
        self,
        conn: Arc<Connection>,
        secret: SecretHandle,
        restore: &MigrationRestore,
        now: Instant,
    ) -> Result<IkeSa, Error> {
        let sa = self.id;
        let bad = |why| Error::CarriedSa { sa, why };
        if self.format != FORMAT {
            return Err(bad("unknown record format"));
        }
        let role = self.role();
        let ours = if role == Role::Initiator { self.spi_i } else { self.spi_r };
        if self.spi_i == 0 || self.spi_r == 0 || ours != self.id {
            return Err(bad("its SPIs do not fit its id and role"));
        }
        if self.local.is_ipv4() != self.remote.is_ipv4() {
            return Err(bad("its addresses are of two families"));
        }
        if let Some(r) = &self.last_response {
            // Replayed to the peer verbatim, so it must be this SA's response with that ID.
            let fits = r.datagrams().all(|d| {
                IkeHeader::peek(d).is_ok_and(|p| {
                    let h = p.header;
                    (h.initiator_spi, h.responder_spi, h.message_id) == (self.spi_i, self.spi_r, r.id)
                        && h.flags.response()
                        && h.flags.initiator() == (role == Role::Initiator)
                })
            });
            if !fits || self.expected_request != r.id.saturating_add(1) {
                return Err(bad("its last response is not this SA's answer to the last request"));
            }
        }
        let mut choice = IkeChoice::new(
            self.choice.suite().ok_or(bad("unknown or inconsistent IKE transforms"))?,
            Prf::from_id(self.prf).ok_or(bad("unknown PRF"))?,
            DhGroup::from_id(self.group).ok_or(bad("unknown DH group"))?,
        );
        if self.additional.len() > choice.additional.len() {
            return Err(bad("more than seven additional key exchanges"));
        }
        for (slot, id) in choice.additional.iter_mut().zip(&self.additional) {
            *slot = match id {
                0 => None,
                id => Some(DhGroup::from_id(*id).ok_or(bad("unknown additional key exchange"))?),
            };
        }
        let peer_hashes = match &self.peer_hashes {
            Some(ids) => {
                if !ids.iter().all(|id| HashAlgorithm::from_id(*id).is_some()) {
                    return Err(bad("unknown signature hash"));
                }
                let data: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
                Some(PeerHashes::from_notify(&data))
            }
            None => None,
        };
        let peer_auth = self.peer_auth.map(|p| p.rebuild()).transpose().map_err(bad)?;
        if self.sealed_sk_d.0.is_empty() || self.sealed_state.0.is_empty() {
            return Err(bad("a sealed blob is empty"));
        }
        if self.silent_for > self.age {
            return Err(bad("the peer was heard before the SA existed"));
        }
        let before = |d| now.checked_sub(d).ok_or(bad("its age reaches back past this host's clock"));
        let (created, last_heard) = (before(self.age)?, before(self.silent_for)?);
        let ike = lookup(&restore.ike_sas, IkeSaHandle(self.ike)).ok_or(Error::MissingHandle {
            sa,
            kind: HandleKind::IkeSa,
            handle: self.ike,
        })?;
        let mut children: Vec<ChildSa> = Vec::with_capacity(self.children.len());
        for c in self.children {
            if !conn.children.iter().any(|k| k.name == c.name) {
                return Err(bad("a child SA's configuration is not in the connection here"));
            }
            if c.spi_inbound < 0x100 || c.spi_outbound == 0 {
                return Err(bad("a child SA's SPI is reserved"));
            }
            if children.iter().any(|k| k.spi_inbound == c.spi_inbound) {
                return Err(bad("two child SAs share an inbound SPI"));
            }
            let esp = |old: u32| {
                lookup(&restore.esp_sas, EspSaHandle(old)).ok_or(Error::MissingHandle {
                    sa,
                    kind: HandleKind::EspSa,
                    handle: old,
                })
            };
            let handles = ChildSaPair { inbound: esp(c.inbound)?, outbound: esp(c.outbound)? };
            let selectors = |list: &[CarriedTs]| {
                list.iter()
                    .map(|t| t.selector())
                    .collect::<Option<Vec<_>>>()
                    .ok_or(bad("a traffic selector is malformed"))
            };
            children.push(ChildSa {
                name: c.name,
                spi_inbound: c.spi_inbound,
                spi_outbound: c.spi_outbound,
                handles,
                suite: c.suite.suite().ok_or(bad("unknown or inconsistent ESP transforms"))?,
                esn: c.esn,
                local_ts: selectors(&c.local_ts)?,
                remote_ts: selectors(&c.remote_ts)?,
                encapsulation: match c.udp {
                    Some((local_port, remote_port)) => Encapsulation::Udp { local_port, remote_port },
                    None => Encapsulation::Esp,
                },
                local: c.local,
                remote: c.remote,
                rekey_time: c.rekey_time,
                life_time: c.life_time,
                volume: VolumeLimits {
                    rekey_bytes: c.rekey_bytes,
                    life_bytes: c.life_bytes,
                    rekey_packets: c.rekey_packets,
                    life_packets: c.life_packets,
                },
            });
        }
        let mut rekey = ike_rekey::RekeyState::default();
        rekey.soft_expired = self.soft_rekey_done;
        let core = Core {
            id: SaId(self.id),
            conn,
            secret,
            peer_hashes,
            peer_auth,
            role,
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            local: self.local,
            remote: self.remote,
            init_remote: self.init_remote,
            nat: NatState {
                local_behind_nat: self.nat.local_behind_nat,
                remote_behind_nat: self.nat.remote_behind_nat,
                supported: self.nat.supported,
            },
            next_request: self.next_request,
            expected_request: self.expected_request,
            last_response: self
                .last_response
                .as_ref()
                .map(|r| (r.id, r.datagrams().map(<[u8]>::to_vec).collect())),
            last_request: None,
            incoming_intermediate: None,
            fragments: crate::fragment::Fragmentation::new(self.fragments),
            pending: None,
            queue: VecDeque::new(),
            deferred: Vec::new(),
            rekey,
            children,
            retiring: Vec::new(),
            replaced: Vec::new(),
            collision: None,
            created,
            last_heard,
            initial_contact: self.initial_contact,
        };
        let state = State::Established(Established {
            ike,
            choice,
            sealed_sk_d: SealedBlob(self.sealed_sk_d.0),
            sealed_state: SealedBlob(self.sealed_state.0),
        });
        Ok(IkeSa { core, state })
    }
}

impl CarriedPeerAuth {
    fn of(p: &PeerAuth) -> Option<Self> {
        let scheme = match p.scheme {
            Some(s) => Some(SCHEMES.iter().find(|(k, _)| *k == s)?.1.to_owned()),
            None => None,
        };
        Some(Self {
            method: p.method.id(),
            scheme,
            certificate: p.certificate.as_ref().map(|c| Hex(c.der().to_vec())),
            id_type: p.identity.ty.0,
            id_reserved: p.identity.reserved,
            id_data: Hex(p.identity.data.clone()),
        })
    }

    fn rebuild(self) -> Result<PeerAuth, &'static str> {
        let method = AuthMethod::from_id(self.method).ok_or("unknown peer auth method")?;
        let scheme = match self.scheme {
            Some(name) => Some(SCHEMES.iter().find(|(_, n)| *n == name).ok_or("unknown signature scheme")?.0),
            None => None,
        };
        let certificate = match self.certificate {
            Some(der) => {
                Some(Certificate::from_der(&der.0).map_err(|_| "the peer's certificate does not decode")?)
            }
            None => None,
        };
        let ty = IdType(self.id_type);
        let address_len = match ty {
            IdType::IPV4_ADDR => Some(4),
            IdType::IPV6_ADDR => Some(16),
            _ => None,
        };
        if address_len.is_some_and(|n| n != self.id_data.0.len()) {
            return Err("the peer's address identity has the wrong length");
        }
        let identity = Identification { ty, reserved: self.id_reserved, data: self.id_data.0 };
        Ok(PeerAuth { method, scheme, certificate, identity })
    }
}

/// The new handle for `old`, if the enclave restored it.
fn lookup<T: Copy + PartialEq>(pairs: &[(T, T)], old: T) -> Option<T> {
    pairs.iter().find(|(o, _)| *o == old).map(|(_, n)| *n)
}

impl IkeSa {
    /// The enclave's handle of its keys, once it has one.
    pub(crate) fn ike_handle(&self) -> Option<IkeSaHandle> {
        self.state.ike()
    }

    /// This SA as data if it is established (`None` otherwise); refused while it is in
    /// the middle of something a move would cut.
    pub(crate) fn carry(&self, now: Instant) -> Result<Option<CarriedIkeSa>, Error> {
        let State::Established(st) = &self.state else { return Ok(None) };
        let c = &self.core;
        let busy = |why| Err(Error::MoveBusy { sa: c.id, why });
        if c.pending.is_some() {
            return busy("a request of ours is outstanding");
        }
        if !c.queue.is_empty() || !c.deferred.is_empty() {
            return busy("requests of ours are queued");
        }
        if c.rekey.successor.is_some() || c.rekey.colliding() {
            return busy("it is being rekeyed");
        }
        if c.collision.is_some() || !c.replaced.is_empty() {
            return busy("a child SA is being rekeyed");
        }
        if !c.retiring.is_empty() {
            return busy("rekeyed child SAs are retiring");
        }
        let bad = |why| Error::CarriedSa { sa: c.id.0, why };
        let children = c
            .children
            .iter()
            .map(|k| {
                Some(CarriedChild {
                    name: k.name.clone(),
                    spi_inbound: k.spi_inbound,
                    spi_outbound: k.spi_outbound,
                    inbound: k.handles.inbound.raw(),
                    outbound: k.handles.outbound.raw(),
                    suite: CarriedSuite::of(k.suite)?,
                    esn: k.esn,
                    local_ts: k.local_ts.iter().map(CarriedTs::of).collect(),
                    remote_ts: k.remote_ts.iter().map(CarriedTs::of).collect(),
                    udp: match k.encapsulation {
                        Encapsulation::Udp { local_port, remote_port } => Some((local_port, remote_port)),
                        Encapsulation::Esp => None,
                    },
                    local: k.local,
                    remote: k.remote,
                    rekey_time: k.rekey_time,
                    life_time: k.life_time,
                    rekey_bytes: k.volume.rekey_bytes,
                    life_bytes: k.volume.life_bytes,
                    rekey_packets: k.volume.rekey_packets,
                    life_packets: k.volume.life_packets,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or(bad("a child SA's transforms have no carried form"))?;
        let peer_auth = match &c.peer_auth {
            Some(p) => {
                Some(CarriedPeerAuth::of(p).ok_or(bad("the peer's signature scheme has no carried form"))?)
            }
            None => None,
        };
        let peer_hashes = c
            .peer_hashes
            .map(|h| HashAlgorithm::ALL.iter().filter(|a| h.contains(**a)).map(|a| a.id()).collect());
        Ok(Some(CarriedIkeSa {
            format: FORMAT,
            id: c.id.0,
            connection: c.conn.name.clone(),
            role: match c.role {
                Role::Initiator => CarriedRole::Initiator,
                Role::Responder => CarriedRole::Responder,
            },
            spi_i: c.spi_i,
            spi_r: c.spi_r,
            local: c.local,
            remote: c.remote,
            init_remote: c.init_remote,
            nat: CarriedNat {
                local_behind_nat: c.nat.local_behind_nat,
                remote_behind_nat: c.nat.remote_behind_nat,
                supported: c.nat.supported,
            },
            next_request: c.next_request,
            expected_request: c.expected_request,
            last_response: c.last_response.as_ref().and_then(|(id, m)| {
                let (first, more) = m.split_first()?;
                Some(CarriedResponse {
                    id: *id,
                    message: Hex(first.clone()),
                    more: more.iter().cloned().map(Hex).collect(),
                })
            }),
            fragments: c.fragments.send,
            peer_auth,
            peer_hashes,
            choice: CarriedSuite::of(st.choice.suite)
                .ok_or(bad("the IKE transforms have no carried form"))?,
            prf: st.choice.prf.id(),
            group: st.choice.group.id(),
            additional: if st.choice.additional.iter().any(Option::is_some) {
                st.choice.additional.iter().map(|g| g.map_or(0, DhGroup::id)).collect()
            } else {
                Vec::new()
            },
            ike: st.ike.raw(),
            sealed_sk_d: Hex(st.sealed_sk_d.0.clone()),
            sealed_state: Hex(st.sealed_state.0.clone()),
            children,
            initial_contact: c.initial_contact,
            soft_rekey_done: c.rekey.soft_expired,
            age: now.saturating_duration_since(c.created),
            silent_for: now.saturating_duration_since(c.last_heard),
        }))
    }
}

impl IkeSa {
    /// Before a move: an established SA's SK_d resident in the enclave again, from its
    /// blob, so that the export carries it. Whether the SA is established.
    pub(crate) fn unseal_sk_d<E: enclave::Enclave>(&self, enclave: &mut E) -> Result<bool, Error> {
        let State::Established(s) = &self.state else { return Ok(false) };
        enclave.ike_sa_unseal_sk_d(s.ike, &s.sealed_sk_d)?;
        Ok(true)
    }

    /// Seals a resident SK_d anew, with a fresh state blob: after a move, under this
    /// enclave's key (the carried blobs open only on the source's host); after a move that
    /// did not happen, to clear SK_d out of trusted memory again. Whether it did: an SA
    /// whose SK_d is already sealed (moved between enclaves sharing a sealing key) keeps
    /// its blobs.
    pub(crate) fn reseal<E: enclave::Enclave>(&mut self, enclave: &mut E) -> Result<bool, Error> {
        let State::Established(s) = &mut self.state else { return Ok(false) };
        match enclave.clear_and_seal(s.ike) {
            Ok(blob) => {
                s.sealed_sk_d = blob;
                s.sealed_state = enclave.ike_sa_seal_state(s.ike)?;
                Ok(true)
            }
            Err(enclave::Error::AlreadySealed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
