//! The gateway's tunnel table and counters as data: what the service's HTTP API returns as
//! JSON and its metrics endpoint renders for Prometheus. Public values only (SPIs,
//! identities, addresses, algorithm names, counts): the gateway holds no key to show.

use std::collections::BTreeMap;
use std::time::Instant;

use dataplane::{Counter, Dataplane, IkeInbox, IoDrop, WorkerSnapshot};
use enclave::Enclave;
use ike::{Endpoint, SaId};
use serde::Serialize;

use crate::children::Children;
use crate::control::suite_name;
use crate::daemon::EventCounts;

/// One IKE SA and its child SAs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IkeSaView {
    /// The gateway's number for it (`#N` in logs).
    pub id: u64,
    /// The connection it belongs to.
    pub connection: String,
    /// `Established`, `ExpectAuthRequest`, ... or `Rekeyed`.
    pub state: String,
    /// `initiator` or `responder` (our role).
    pub role: &'static str,
    /// The initiator's SPI, hex.
    pub spi_i: String,
    /// The responder's SPI, hex.
    pub spi_r: String,
    /// Our address and port.
    pub local: String,
    /// The peer's address and port.
    pub remote: String,
    /// Our identity.
    pub local_id: String,
    /// The peer's identity.
    pub remote_id: String,
    /// The negotiated IKE suite, PRF and group (strongSwan's names), once chosen.
    pub proposal: Option<String>,
    /// Its child SAs.
    pub children: Vec<ChildView>,
}

/// One child SA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildView {
    /// The child configuration's name.
    pub name: String,
    /// `installed` (carrying traffic) or `rekeyed` (inbound only, until deleted).
    pub state: &'static str,
    /// `tunnel` or `tunnel-in-udp`.
    pub mode: &'static str,
    /// The ESP transform (strongSwan's names).
    pub esp: String,
    /// The inbound SPI, hex.
    pub spi_in: String,
    /// The outbound SPI, hex.
    pub spi_out: String,
    /// Seconds since it was installed.
    pub age_s: u64,
    /// Bytes received and decrypted.
    pub bytes_in: u64,
    /// Packets received and decrypted.
    pub packets_in: u64,
    /// Bytes encrypted and sent.
    pub bytes_out: u64,
    /// Packets encrypted and sent.
    pub packets_out: u64,
    /// Our traffic selectors.
    pub local_ts: Vec<String>,
    /// The peer's traffic selectors.
    pub remote_ts: Vec<String>,
}

/// The enclave's view: crossings and trusted memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EnclaveView {
    /// ESP batches the enclave processed (one crossing each).
    pub batches: u64,
    /// Boundary crossings counted by the data plane's workers.
    pub crossings: u64,
    /// Bytes of trusted memory holding SAs, DH values and secrets.
    pub trusted_bytes: u64,
    /// IKE SAs in the enclave.
    pub ike_sas: u64,
    /// ESP SAs in the enclave.
    pub esp_sas: u64,
    /// Tenant secrets in the enclave.
    pub secrets: u64,
}

/// Everything the API and metrics show about one gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// The TUN device.
    pub tun: String,
    /// The namespace of the TUN device, if not the gateway's.
    pub tun_netns: Option<String>,
    /// IKE SAs with their children.
    pub ike_sas: Vec<IkeSaView>,
    /// SA events since start.
    pub events: EventCounts,
    /// IKE datagrams dropped, by reason (non-zero only).
    pub ike_drops: BTreeMap<&'static str, u64>,
    /// IKE_SA_INIT requests refused, by reason (non-zero only).
    pub ike_refusals: BTreeMap<&'static str, u64>,
    /// IKE requests retransmitted.
    pub ike_retransmits: u64,
    /// IKE messages the data plane could not queue for the engine.
    pub ike_inbox_dropped: u64,
    /// Data-plane packet counts by stage.
    pub dataplane: BTreeMap<&'static str, u64>,
    /// Data-plane drops by reason, I/O and ESP (non-zero only).
    pub drops: BTreeMap<&'static str, u64>,
    /// The enclave.
    pub enclave: EnclaveView,
}

/// Takes a snapshot (called by [`crate::Gateway::snapshot`]).
pub(crate) fn take<E: Enclave + 'static>(
    engine: &Endpoint<E>,
    children: &Children,
    identities: &BTreeMap<SaId, (String, String)>,
    dp: &Dataplane<E>,
    inbox: &IkeInbox,
    events: EventCounts,
    now: Instant,
) -> Snapshot {
    let ike_sas = engine
        .ike_sas()
        .map(|sa| {
            let (spi_i, spi_r) = sa.spis();
            let (local_id, remote_id) = identities.get(&sa.id()).cloned().unwrap_or_default();
            IkeSaView {
                id: sa.id().0,
                connection: sa.connection().to_owned(),
                state: match sa.successor() {
                    Some(_) => "Rekeyed".to_owned(),
                    None => format!("{:?}", sa.state()),
                },
                role: if sa.role() == enclave::Role::Initiator { "initiator" } else { "responder" },
                spi_i: format!("{spi_i:016x}"),
                spi_r: format!("{spi_r:016x}"),
                local: sa.local().to_string(),
                remote: sa.remote().to_string(),
                local_id,
                remote_id,
                proposal: sa.choice().map(|c| format!("{}/{:?}/{:?}", suite_name(c.suite), c.prf, c.group)),
                children: children
                    .iter()
                    .filter(|c| c.ike == sa.id())
                    .map(|c| {
                        let ch = &c.child;
                        let usage = dp
                            .read(|sad, _| {
                                let i = sad.inbound(ch.spi_inbound).map(|s| s.runtime().usage());
                                let o =
                                    c.outbound.and_then(|id| sad.outbound(id)).map(|s| s.runtime().usage());
                                (i, o)
                            })
                            .unwrap_or_default();
                        let (packets_in, bytes_in) = usage.0.unwrap_or_default();
                        let (packets_out, bytes_out) = usage.1.unwrap_or_default();
                        let ts = |v: &[ike::ts::TrafficSelector]| v.iter().map(ToString::to_string).collect();
                        ChildView {
                            name: ch.name.clone(),
                            state: if c.outbound.is_some() { "installed" } else { "rekeyed" },
                            mode: match ch.encapsulation {
                                ike::Encapsulation::Esp => "tunnel",
                                ike::Encapsulation::Udp { .. } => "tunnel-in-udp",
                            },
                            esp: format!("{:?}{}", ch.suite, if ch.esn { "/ESN" } else { "" }),
                            spi_in: format!("{:08x}", ch.spi_inbound),
                            spi_out: format!("{:08x}", ch.spi_outbound),
                            age_s: now.saturating_duration_since(c.since).as_secs(),
                            bytes_in,
                            packets_in,
                            bytes_out,
                            packets_out,
                            local_ts: ts(&ch.local_ts),
                            remote_ts: ts(&ch.remote_ts),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let counters = engine.counters();
    let nonzero = |pairs: &mut dyn Iterator<Item = (&'static str, u64)>| {
        pairs.filter(|&(_, n)| n > 0).collect::<BTreeMap<_, _>>()
    };
    let ike_drops = nonzero(&mut ike::DropReason::ALL.iter().map(|&r| (r.name(), counters.dropped(r))));
    let ike_refusals = nonzero(&mut ike::Refusal::ALL.iter().map(|&r| (r.name(), counters.refused(r))));
    let sum = WorkerSnapshot::sum(&dp.snapshot());
    let dataplane = Counter::ALL.iter().map(|&c| (c.name(), sum.get(c))).collect();
    let mut drops = nonzero(&mut IoDrop::ALL.iter().map(|&d| (d.name(), sum.io_drop(d))));
    drops.extend(sum.esp_drops().map(|(r, n)| (r.name(), n)));
    let enclave = engine.enclave();
    let (mem, ec) = (enclave.memory_report(), enclave.counters());
    let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    Snapshot {
        tun: dp.tun_name().to_owned(),
        tun_netns: dp.tun_netns().map(str::to_owned),
        ike_sas,
        events,
        ike_drops,
        ike_refusals,
        ike_retransmits: counters.retransmits,
        ike_inbox_dropped: inbox.dropped(),
        dataplane,
        drops,
        enclave: EnclaveView {
            batches: ec.batches,
            crossings: sum.get(Counter::Crossings),
            trusted_bytes: n(mem.ike_sa_bytes
                + mem.esp_sa_bytes
                + mem.dh_bytes
                + mem.secret_bytes
                + mem.fixed_bytes),
            ike_sas: n(mem.ike_sas),
            esp_sas: n(mem.esp_sas),
            secrets: n(mem.secrets),
        },
    }
}
