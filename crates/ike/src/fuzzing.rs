//! Fuzzing entry point for the engine (built by cargo-fuzz with `--cfg fuzzing`): arbitrary
//! datagrams into two endpoints that share an established IKE SA, so the fuzzer reaches
//! the state machines and not only the wire codec (the `ike_message` target covers that).
//!
//! The pair (two inline enclaves, PSK, one child SA) is set up once per process and again
//! whenever a fuzzed message has deleted its IKE SA. The first byte picks a mode:
//!
//! * 0: the rest is a datagram to the responder's port 500;
//! * 1: the rest is a datagram to the responder's port 4500 (after the non-ESP marker);
//! * 2: a request *forged with the IKE SA's real keys* from the initiator: byte 1 picks the
//!   exchange, byte 2 the message ID, byte 3 the first inner payload type, and the rest is
//!   the inner payload chain, so everything after the integrity check is reached;
//! * 3: the initiator first starts an exchange (byte 1: liveness, child rekey, IKE rekey,
//!   child delete), then receives a forged *response* with the rest as its inner chain;
//! * 4: an authentic IKE fragment (RFC 7383) of a request from the initiator: byte 1 the
//!   message ID, bytes 2 and 3 Fragment Number and Total Fragments, byte 4 the first inner
//!   payload type, the rest its piece of the chain, so successive inputs build up, restart
//!   and complete reassemblies.
//!
//! Every path must end in an answer, a counted drop or an event, never a panic.
#![allow(clippy::expect_used, clippy::unwrap_used)] // Harness setup, not a packet path.

use core::cell::RefCell;
use core::net::SocketAddr;
use std::time::{Duration, Instant};

use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
use enclave_core::provision::wrap_secret;
use enclave_core::{Enclave, EnclaveConfig, InlineEnclave, Limits, ProvisioningKey, SecretKind, TenantId};
use wire::ike::{ExchangeType, HeaderFlags, IkeHeader, PayloadType};

use crate::{Config, Endpoint, EndpointConfig, SaId};

const KEY: [u8; 32] = [0x42; 32];
const I_ADDR: &str = "198.18.0.1";
const R_ADDR: &str = "198.18.0.2";

fn enclave() -> InlineEnclave {
    let config = EnclaveConfig {
        tenant: TenantId(1),
        provisioning_key: ProvisioningKey::from_bytes(KEY),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key().unwrap();
    let attestation = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"ike-fuzz".to_vec()),
        &config.measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start(config, Box::new(attestation)).unwrap()
}

fn endpoint(toml: &str) -> Endpoint<InlineEnclave> {
    let mut enclave = enclave();
    let key = ProvisioningKey::from_bytes(KEY);
    let blob = wrap_secret(&key, TenantId(1), SecretKind::PreSharedKey, b"fuzz psk of the tenant").unwrap();
    let handle = enclave.provision_secret(&blob).unwrap();
    let mut ep = Endpoint::new(enclave, EndpointConfig::default());
    ep.add_secret("psk", handle);
    for conn in Config::from_toml(toml).unwrap().connections {
        ep.add_connection(conn).unwrap();
    }
    ep
}

fn conf(
    name: &str,
    (local, remote): (&str, &str),
    (lid, rid): (&str, &str),
    (lts, rts): (&str, &str),
) -> String {
    format!(
        r#"
[connections.{name}]
local_addrs = ["{local}"]
remote_addrs = ["{remote}"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = {{ auth = "psk", id = "{lid}", secret = "psk" }}
remote = {{ auth = "psk", id = "{rid}" }}
children.net = {{ local_ts = ["{lts}"], remote_ts = ["{rts}"], esp_proposals = ["aes256gcm16-ecp256"] }}
"#
    )
}

struct Pair {
    i: Endpoint<InlineEnclave>,
    r: Endpoint<InlineEnclave>,
    now: Instant,
}

impl Pair {
    fn new() -> Self {
        let (site, cloud) = ("198.19.1.0/24", "198.19.2.0/24");
        let i = endpoint(&conf("a", (I_ADDR, R_ADDR), ("a.test", "b.test"), (site, cloud)));
        let r = endpoint(&conf("b", (R_ADDR, I_ADDR), ("b.test", "a.test"), (cloud, site)));
        let mut p = Self { i, r, now: Instant::now() };
        p.i.initiate(p.now, "a").unwrap();
        p.drive();
        p
    }

    /// Moves datagrams both ways until none is left (bounded).
    fn drive(&mut self) {
        for _ in 0..64 {
            let mut moved = false;
            while let Some(t) = self.i.poll_transmit() {
                moved = true;
                self.r.handle_datagram(self.now, t.local, t.remote, &t.contents);
            }
            while let Some(t) = self.r.poll_transmit() {
                moved = true;
                self.i.handle_datagram(self.now, t.local, t.remote, &t.contents);
            }
            while self.i.poll_event().is_some() || self.r.poll_event().is_some() {}
            if !moved {
                break;
            }
        }
    }

    /// The initiator's established SA and its peer on the responder, if both exist.
    fn established(&self) -> Option<(SaId, SaId)> {
        let a = self.i.ike_sas().find(|s| s.keys().is_some() && s.successor().is_none())?;
        let b = self.r.ike_sas().find(|s| s.spis() == a.spis())?;
        Some((a.id(), b.id()))
    }
}

/// `inner` (an encoded payload chain starting with type `first`) as an authentic SK
/// message under `header`, sealed with the keys `ep` holds for the IKE SA it names.
fn forge(ep: &mut Endpoint<InlineEnclave>, header: IkeHeader, first: u8, inner: &[u8]) -> Option<Vec<u8>> {
    let spis = (header.initiator_spi, header.responder_spi);
    let (ike, choice) = ep.ike_sas().find(|s| s.spis() == spis)?.keys()?;
    crate::sk::seal_raw(ep.enclave_mut(), ike, choice.suite, header, PayloadType(first), inner).ok()
}

thread_local! {
    static PAIR: RefCell<Option<Pair>> = const { RefCell::new(None) };
}

/// One fuzz input (see the module documentation).
pub fn engine_input(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    PAIR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|p| p.established().is_none()) {
            *slot = Some(Pair::new());
        }
        let Some(p) = slot.as_mut() else { return };
        let Some((i_sa, _)) = p.established() else { return };
        // The address constants parse (the pair was built from them): unwrap cannot fire.
        let from: SocketAddr = SocketAddr::new(I_ADDR.parse().unwrap(), 500);
        match mode % 5 {
            0 => p.r.handle_datagram(p.now, from, SocketAddr::new(R_ADDR.parse().unwrap(), 500), rest),
            1 => {
                let mut d = vec![0u8; 4];
                d.extend_from_slice(rest);
                let from = SocketAddr::new(from.ip(), 4500);
                p.r.handle_datagram(p.now, from, SocketAddr::new(R_ADDR.parse().unwrap(), 4500), &d);
            }
            2 => {
                let [ex, id, first, inner @ ..] = rest else { return };
                let exchange =
                    [ExchangeType::INFORMATIONAL, ExchangeType::CREATE_CHILD_SA, ExchangeType::IKE_AUTH]
                        [usize::from(*ex % 3)];
                let Some(sa) = p.i.ike_sa(i_sa) else { return };
                let (spi_i, spi_r) = sa.spis();
                let header = IkeHeader::new(
                    spi_i,
                    spi_r,
                    exchange,
                    HeaderFlags::default().with(HeaderFlags::INITIATOR),
                    u32::from(*id % 8),
                );
                let (local, remote) = (sa.local(), sa.remote());
                let Some(bytes) = forge(&mut p.i, header, *first, inner) else { return };
                p.r.handle_datagram(p.now, local, remote, &bytes);
            }
            4 => {
                let [id, number, total, first, piece @ ..] = rest else { return };
                let Some(sa) = p.i.ike_sa(i_sa) else { return };
                let (spi_i, spi_r) = sa.spis();
                let flags = HeaderFlags::default().with(HeaderFlags::INITIATOR);
                let header =
                    IkeHeader::new(spi_i, spi_r, ExchangeType::INFORMATIONAL, flags, u32::from(*id % 8));
                let (local, remote) = (sa.local(), sa.remote());
                let spis = (header.initiator_spi, header.responder_spi);
                let Some((ike, choice)) = p.i.ike_sas().find(|s| s.spis() == spis).and_then(|s| s.keys())
                else {
                    return;
                };
                let (number, total) = (u16::from(*number % 8), u16::from(*total % 8));
                let Ok(bytes) = crate::sk::seal_raw_fragment(
                    p.i.enclave_mut(),
                    ike,
                    choice.suite,
                    header,
                    PayloadType(*first),
                    number,
                    total,
                    piece,
                ) else {
                    return;
                };
                p.r.handle_datagram(p.now, local, remote, &bytes);
            }
            _ => {
                let [cmd, first, inner @ ..] = rest else { return };
                let Some(sa) = p.i.ike_sa(i_sa) else { return };
                let child = sa.children().first().map(|c| c.spi_inbound);
                let _ = match (cmd % 4, child) {
                    (1, Some(spi)) => p.i.rekey_child(p.now, i_sa, spi),
                    (2, _) => p.i.rekey_ike(p.now, i_sa),
                    (3, Some(spi)) => p.i.delete_child(p.now, i_sa, spi),
                    _ => p.i.check_liveness(p.now, i_sa),
                };
                // The request goes nowhere; a forged answer comes back instead.
                let Some(request) = p.i.poll_transmit() else { return };
                let Ok(m) = wire::ike::Message::decode(&request.contents) else { return };
                let header = IkeHeader::new(
                    m.header.initiator_spi,
                    m.header.responder_spi,
                    m.header.exchange_type,
                    HeaderFlags::default().with(HeaderFlags::RESPONSE),
                    m.header.message_id,
                );
                let Some(bytes) = forge(&mut p.r, header, *first, inner) else { return };
                p.i.handle_datagram(p.now, request.remote, request.local, &bytes);
            }
        }
        // Timers and whatever the input set off run too, then outputs are drained.
        p.now += Duration::from_secs(3);
        p.i.handle_timeout(p.now);
        p.r.handle_timeout(p.now);
        while p.i.poll_transmit().is_some() || p.r.poll_transmit().is_some() {}
        // Events are dropped; a deleted IKE SA makes the next input set the pair up again.
        while p.i.poll_event().is_some() || p.r.poll_event().is_some() {}
    });
}
