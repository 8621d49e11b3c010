//! CREATE_CHILD_SA for child SAs (RFC 7296 §1.3.1, §1.3.3): rekeying a child SA, or a new
//! one, as initiator and responder, with or without PFS. Keys come from the sealed SK_d
//! (the IKE SA is cleared and sealed by now). IKE SA rekeys are in [`super::ike_rekey`].
//! As initiator, a connection's children after the first (which IKE_AUTH carries) are
//! created so, one exchange each, once the IKE SA is established.
//!
//! ```text
//! CREATE_CHILD_SA { SK { N(REKEY_SA), SA, Ni, [KEi], TSi, TSr } } -->
//!                 <-- { SK { SA, Nr, [KEr], TSi, TSr } }
//! INFORMATIONAL { SK { D(ESP, old) } } -->      (the rekey's initiator deletes the old SA)
//! ```
//!
//! A peer's child rekey while the IKE SA is being rekeyed is answered with
//! TEMPORARY_FAILURE (§2.25.2); told TEMPORARY_FAILURE ourselves, we try again shortly.
//!
//! TSi and TSr name the sides of the *exchange's* initiator, which may be the original
//! responder (§2.9).
//!
//! Simultaneous rekeys of one child (§2.8.1): the peer's request arrives while ours is out.
//! We answer it and note its lowest nonce; when our answer arrives, the SA made with the
//! lowest of the four nonces is redundant and its creator deletes it, while the creator of
//! the survivor deletes the old SA. A peer's rekey of a child we are already deleting
//! (our rekey of it completed first) gets TEMPORARY_FAILURE (§2.25.1).

use super::{Core, Ctx, Established, RequestKind};

use crate::error::{Error, Side};
use crate::event::{Event, OutboundSwitch};
use crate::proposal;
use crate::ts::{self, TrafficSelector};
use core::net::SocketAddr;
use enclave::{ChildSaParams, DhExchange, DhGroup, DhHandle, Enclave, Role};
use wire::ike::{KeyExchange, Nonce, Notify, NotifyType, Payload, ProtocolId};

/// A rekey or a new child we requested, held while its CREATE_CHILD_SA is outstanding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChildRekey {
    /// The old child's inbound SPI; `None` for a new child.
    pub(super) old: Option<u32>,
    /// The new child's inbound SPI.
    spi: u32,
    nonce_i: Vec<u8>,
    /// Our PFS value and group, when the child's first proposal asks for PFS.
    dh: Option<(DhHandle, DhGroup)>,
    /// The child configuration's name.
    config: String,
    ts_i: Vec<TrafficSelector>,
    ts_r: Vec<TrafficSelector>,
}

impl ChildRekey {
    /// Frees what the request holds: its SPI and its unused DH value.
    pub(super) fn release<E: Enclave>(&self, ctx: &mut Ctx<'_, E>) {
        ctx.child_spis.remove(&self.spi);
        if let Some((dh, _)) = self.dh {
            let _ = ctx.enclave.dh_delete(dh);
        }
    }
}

/// The peer's rekey of a child while our rekey of it is out (§2.8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Collision {
    /// The child both sides rekey (our inbound SPI).
    old: u32,
    /// The lower of the two nonces of the peer's exchange.
    lowest: Vec<u8>,
}

/// The request rekeying our child with inbound SPI `old`.
pub(super) fn rekey_request<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    old: u32,
) -> Result<(ChildRekey, Vec<Payload>), Error> {
    let child = core
        .children
        .iter()
        .find(|c| c.spi_inbound == old && !core.closing(old) && !core.replaced.contains(&old))
        .ok_or(Error::UnknownChildSa { spi: old })?;
    let config =
        core.conn.children.iter().find(|c| c.name == child.name).ok_or(Error::UnknownChildSa { spi: old })?;
    let (ts_i, ts_r) = (child.local_ts.clone(), child.remote_ts.clone());
    let notify = Notify::for_child(ProtocolId::ESP, old, NotifyType::REKEY_SA, Vec::new());
    request(ctx, Some(old), config, ts_i, ts_r, Some(notify))
}

/// The request creating the connection's child `name` (not one IKE_AUTH made).
pub(super) fn new_child_request<E: Enclave>(
    core: &Core,
    ctx: &mut Ctx<'_, E>,
    name: &str,
) -> Result<(ChildRekey, Vec<Payload>), Error> {
    // The name comes from the connection itself: only a changed configuration misses it.
    let config = core
        .conn
        .children
        .iter()
        .find(|c| c.name == name)
        .ok_or(Error::UnknownConnection { name: format!("{}/{name}", core.conn.name) })?;
    let ts_i = config.local_ts.iter().map(|t| t.resolve(core.local.ip())).collect();
    let ts_r = config.remote_ts.iter().map(|t| t.resolve(core.remote.ip())).collect();
    request(ctx, None, config, ts_i, ts_r, None)
}

/// CREATE_CHILD_SA { SK { [N(REKEY_SA)], SA, Ni, [KEi], TSi, TSr } } for `config`.
fn request<E: Enclave>(
    ctx: &mut Ctx<'_, E>,
    old: Option<u32>,
    config: &crate::config::ChildConfig,
    ts_i: Vec<TrafficSelector>,
    ts_r: Vec<TrafficSelector>,
    rekey_notify: Option<Notify>,
) -> Result<(ChildRekey, Vec<Payload>), Error> {
    let spi = ctx.child_spi()?;
    let mut rekey =
        ChildRekey { old, spi, nonce_i: Vec::new(), dh: None, config: config.name.clone(), ts_i, ts_r };
    let prepared = (|| {
        rekey.nonce_i = ctx.nonce()?;
        if let Some(group) = config.esp_proposals.first().and_then(|p| p.groups.first().copied()) {
            let mut public = vec![0u8; group.public_len()];
            rekey.dh = Some((ctx.enclave.dh_generate(group, &mut public)?, group));
            Ok::<_, Error>(Some(KeyExchange::new(wire::ike::DhGroup(group.id()), public)))
        } else {
            Ok(None)
        }
    })();
    let ke = match prepared {
        Ok(ke) => ke,
        Err(e) => {
            rekey.release(ctx);
            return Err(e);
        }
    };
    let mut payloads: Vec<Payload> = rekey_notify.map(Payload::Notify).into_iter().collect();
    payloads.push(Payload::Sa(proposal::esp_sa_payload(&config.esp_proposals, spi, true)));
    payloads.push(Payload::Nonce(Nonce { data: rekey.nonce_i.clone() }));
    payloads.extend(ke.map(Payload::KeyExchange));
    payloads.push(Payload::TsInitiator(ts::to_payload(&rekey.ts_i)));
    payloads.push(Payload::TsResponder(ts::to_payload(&rekey.ts_r)));
    Ok((rekey, payloads))
}

/// The parts of a CREATE_CHILD_SA message.
#[derive(Default)]
struct Parts<'a> {
    rekey: Option<&'a Notify>,
    sa: Option<&'a wire::ike::Sa>,
    nonce: Option<&'a Nonce>,
    ke: Option<&'a KeyExchange>,
    ts_i: Option<&'a wire::ike::TrafficSelectors>,
    ts_r: Option<&'a wire::ike::TrafficSelectors>,
    error: Option<NotifyType>,
}

impl<'a> Parts<'a> {
    fn of(payloads: &'a [Payload]) -> Self {
        let mut s = Self::default();
        for p in payloads {
            match p {
                Payload::Notify(n) if n.ty == NotifyType::REKEY_SA => s.rekey = s.rekey.or(Some(n)),
                Payload::Notify(n) if n.ty.is_error() => s.error = s.error.or(Some(n.ty)),
                Payload::Sa(x) => s.sa = s.sa.or(Some(x)),
                Payload::Nonce(x) => s.nonce = s.nonce.or(Some(x)),
                Payload::KeyExchange(x) => s.ke = s.ke.or(Some(x)),
                Payload::TsInitiator(x) => s.ts_i = s.ts_i.or(Some(x)),
                Payload::TsResponder(x) => s.ts_r = s.ts_r.or(Some(x)),
                _ => {}
            }
        }
        s
    }
}

/// The peer's public value for our PFS group, checked.
fn pfs_value(ke: Option<&KeyExchange>, group: DhGroup) -> Option<&[u8]> {
    ke.filter(|k| k.group.0 == group.id() && k.data.len() == group.public_len()).map(|k| k.data.as_slice())
}

/// The answer to our rekey: install the new child, report it, delete the old one.
pub(super) fn rekey_response<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    rekey: ChildRekey,
    inner: &[Payload],
) {
    let parts = Parts::of(inner);
    // Whatever this answer says, the peer's colliding rekey (if any) is settled now.
    let collision = core.collision.take().filter(|c| Some(c.old) == rekey.old);
    let failed = |core: &Core, ctx: &mut Ctx<'_, E>, rekey: &ChildRekey, error: Error| {
        rekey.release(ctx);
        ctx.out.events.push_back(Event::ChildSaFailed { sa: core.id, child: rekey.config.clone(), error });
    };
    /* <-- CREATE_CHILD_SA { SK { SA, Nr, [KEr], TSi, TSr } } */
    let (Some(sa), Some(nonce), Some(ts_i), Some(ts_r)) = (parts.sa, parts.nonce, parts.ts_i, parts.ts_r)
    else {
        let error = match parts.error {
            Some(NotifyType::TEMPORARY_FAILURE) => {
                // §2.25: the peer is busy (rekeying the IKE SA, or this child); again later.
                rekey.release(ctx);
                let at = ctx.retry_at();
                let again = match rekey.old {
                    Some(old) => RequestKind::RekeyChild(old),
                    None => RequestKind::NewChild(rekey.config.clone()),
                };
                core.deferred.push((at, again));
                return;
            }
            Some(n) => super::peer_error(n),
            None => Error::InvalidMessage { exchange: "CREATE_CHILD_SA", why: "SA, Nr, TSi or TSr missing" },
        };
        return failed(core, ctx, &rekey, error);
    };
    let Some(config) = core.conn.children.iter().find(|c| c.name == rekey.config).cloned() else {
        return failed(core, ctx, &rekey, Error::UnknownChildSa { spi: rekey.old.unwrap_or(0) });
    };
    let Some((spi_out, esp)) = proposal::accept_esp_answer(sa, &config.esp_proposals, true) else {
        return failed(core, ctx, &rekey, Error::NoProposalChosen { side: Side::Local });
    };
    let (answer_i, answer_r) = (ts::from_payload(ts_i), ts::from_payload(ts_r));
    if !ts::within(&answer_i, &rekey.ts_i) || !ts::within(&answer_r, &rekey.ts_r) {
        return failed(core, ctx, &rekey, Error::TsUnacceptable { side: Side::Local });
    }
    let pfs = match (esp.group, rekey.dh) {
        (None, None) => None,
        (Some(g), Some((dh, ours))) if g == ours => match pfs_value(parts.ke, g) {
            Some(peer_public) => Some(DhExchange { dh, peer_public }),
            None => {
                let why = "KEr missing or not of the chosen group";
                return failed(core, ctx, &rekey, Error::InvalidMessage { exchange: "CREATE_CHILD_SA", why });
            }
        },
        _ => return failed(core, ctx, &rekey, Error::NoProposalChosen { side: Side::Local }),
    };
    let params = ChildSaParams {
        role: Role::Initiator,
        suite: esp.suite,
        esn: esp.esn,
        nonce_i: &rekey.nonce_i,
        nonce_r: &nonce.data,
        spi_inbound: rekey.spi,
        spi_outbound: spi_out,
    };
    // The DH value is consumed by this call whether it succeeds or not.
    let handles = match ctx.enclave.child_sa_create(st.ike, Some(&st.sealed_sk_d), pfs, &params) {
        Ok(h) => h,
        Err(e) => {
            ctx.child_spis.remove(&rekey.spi);
            ctx.out.events.push_back(Event::ChildSaFailed {
                sa: core.id,
                child: rekey.config,
                error: e.into(),
            });
            return;
        }
    };
    let child = core.child_sa(&config, rekey.spi, spi_out, handles, &esp, answer_i, answer_r);
    core.children.push(child.clone());
    let Some(old) = rekey.old else {
        ctx.out.events.push_back(Event::ChildSaReady { sa: core.id, child });
        return;
    };
    // §2.8.1: ours is redundant when its exchange holds the lowest of the four nonces.
    let ours_lowest = rekey.nonce_i.as_slice().min(nonce.data.as_slice());
    let redundant = collision.is_some_and(|c| ours_lowest < c.lowest.as_slice());
    ctx.out.events.push_back(Event::ChildSaRekeyed {
        sa: core.id,
        old_spi_inbound: old,
        child,
        outbound: if redundant { OutboundSwitch::Never } else { OutboundSwitch::Now },
    });
    /* INFORMATIONAL { SK { D(ESP, old) } } -->  (or D(ESP, ours) when ours is redundant) */
    let doomed = if redundant { rekey.spi } else { old };
    core.replaced.push(old);
    core.queue.push_front(RequestKind::DeleteChild(vec![doomed]));
}

/// Answers a CREATE_CHILD_SA request from the peer (a child rekey or a new child).
pub(super) fn respond<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    id: u32,
    to: (SocketAddr, SocketAddr),
    inner: &[Payload],
) {
    let reply = match answer(st, core, ctx, inner) {
        Ok(payloads) => payloads,
        Err((notify, data, error)) => {
            if let Some(error) = error {
                let child = core.conn.children.first().map(|c| c.name.clone()).unwrap_or_default();
                ctx.out.events.push_back(Event::ChildSaFailed { sa: core.id, child, error });
            }
            vec![Payload::Notify(Notify::new(notify, data))]
        }
    };
    /* <-- CREATE_CHILD_SA { SK { SA, Nr, [KEr], TSi, TSr } } or { SK { N(error) } } */
    if core.respond(ctx, st.ike, &st.choice, wire::ike::ExchangeType::CREATE_CHILD_SA, id, reply, to).is_err()
    {
        ctx.out.counters.drop(crate::event::DropReason::Malformed);
    }
}

/// A refusal: the notify to send, its data, and the error to report (if any).
type Refusal = (NotifyType, Vec<u8>, Option<Error>);

/// Chooses, installs and describes the new child SA.
fn answer<E: Enclave>(
    st: &Established,
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    inner: &[Payload],
) -> Result<Vec<Payload>, Refusal> {
    let parts = Parts::of(inner);
    /* CREATE_CHILD_SA { SK { [N(REKEY_SA)], SA, Ni, [KEi], TSi, TSr } } --> */
    let (Some(sa), Some(nonce), Some(ts_i), Some(ts_r)) = (parts.sa, parts.nonce, parts.ts_i, parts.ts_r)
    else {
        return Err((NotifyType::INVALID_SYNTAX, Vec::new(), None));
    };
    let ike_rekey_in_flight = matches!(
        core.pending.as_ref().map(|p| &p.kind),
        Some(RequestKind::RekeyIkeSent(_) | RequestKind::RekeyIkeFollowUp(_))
    ) || core.rekey.responding.is_some();
    if ike_rekey_in_flight || core.rekey.successor.is_some() {
        // §2.25.2: not while the IKE SA is being rekeyed; the peer tries again later.
        return Err((NotifyType::TEMPORARY_FAILURE, Vec::new(), None));
    }
    let old = match parts.rekey {
        None => None,
        Some(n) => match n.child_spi().and_then(|spi| core.children.iter().find(|c| c.spi_outbound == spi)) {
            // §2.25.1: we are deleting it already (our own rekey of it completed first).
            Some(c) if core.closing(c.spi_inbound) => {
                return Err((NotifyType::TEMPORARY_FAILURE, Vec::new(), None))
            }
            Some(c) => Some(c.clone()),
            None => return Err((NotifyType::CHILD_SA_NOT_FOUND, Vec::new(), None)),
        },
    };
    let (proposed_i, proposed_r) = (ts::from_payload(ts_i), ts::from_payload(ts_r));
    let mut refusal: Refusal =
        (NotifyType::TS_UNACCEPTABLE, Vec::new(), Some(Error::TsUnacceptable { side: Side::Local }));
    let conn = core.conn.clone();
    let configs = conn.children.iter().filter(|c| old.as_ref().is_none_or(|o| o.name == c.name));
    for config in configs {
        let remote: Vec<_> = config.remote_ts.iter().map(|t| t.resolve(core.remote.ip())).collect();
        let local: Vec<_> = config.local_ts.iter().map(|t| t.resolve(core.local.ip())).collect();
        let (narrow_i, narrow_r) = (ts::narrow(&proposed_i, &remote), ts::narrow(&proposed_r, &local));
        if narrow_i.is_empty() || narrow_r.is_empty() {
            continue;
        }
        let Some((number, spi_out, esp)) = proposal::select_esp(sa, &config.esp_proposals, true) else {
            refusal = (
                NotifyType::NO_PROPOSAL_CHOSEN,
                Vec::new(),
                Some(Error::NoProposalChosen { side: Side::Local }),
            );
            continue;
        };
        let peer_public = match esp.group {
            None => None,
            Some(g) => match pfs_value(parts.ke, g) {
                Some(p) => Some((g, p)),
                // §1.3: the initiator guessed another group; tell it ours.
                None => return Err((NotifyType::INVALID_KE_PAYLOAD, g.id().to_be_bytes().to_vec(), None)),
            },
        };
        let internal = |e: Error| (NotifyType::NO_PROPOSAL_CHOSEN, Vec::new(), Some(e));
        let nonce_r = ctx.nonce().map_err(internal)?;
        let spi = ctx.child_spi().map_err(internal)?;
        let mut ke_r = None;
        let pfs = match peer_public {
            None => None,
            Some((g, peer)) => {
                let mut public = vec![0u8; g.public_len()];
                match ctx.enclave.dh_generate(g, &mut public) {
                    Ok(dh) => {
                        ke_r = Some(KeyExchange::new(wire::ike::DhGroup(g.id()), public));
                        Some(DhExchange { dh, peer_public: peer })
                    }
                    Err(e) => {
                        ctx.child_spis.remove(&spi);
                        return Err(internal(e.into()));
                    }
                }
            }
        };
        let params = ChildSaParams {
            role: Role::Responder,
            suite: esp.suite,
            esn: esp.esn,
            nonce_i: &nonce.data,
            nonce_r: &nonce_r,
            spi_inbound: spi,
            spi_outbound: spi_out,
        };
        let handles = match ctx.enclave.child_sa_create(st.ike, Some(&st.sealed_sk_d), pfs, &params) {
            Ok(h) => h,
            Err(e) => {
                ctx.child_spis.remove(&spi);
                return Err(internal(e.into()));
            }
        };
        if let Some(o) = &old {
            note_peer_rekey(core, o.spi_inbound, &nonce.data, &nonce_r);
            core.replaced.push(o.spi_inbound);
        }
        let mut reply = vec![
            Payload::Sa(proposal::esp_answer(number, spi, &esp)),
            Payload::Nonce(Nonce { data: nonce_r }),
        ];
        reply.extend(ke_r.map(Payload::KeyExchange));
        reply.push(Payload::TsInitiator(ts::to_payload(&narrow_i)));
        reply.push(Payload::TsResponder(ts::to_payload(&narrow_r)));
        let child = core.child_sa(config, spi, spi_out, handles, &esp, narrow_r, narrow_i);
        core.children.push(child.clone());
        ctx.out.events.push_back(match old {
            Some(o) => Event::ChildSaRekeyed {
                sa: core.id,
                old_spi_inbound: o.spi_inbound,
                child,
                outbound: OutboundSwitch::OnPeerDelete,
            },
            None => Event::ChildSaReady { sa: core.id, child },
        });
        return Ok(reply);
    }
    Err(refusal)
}

/// Records the peer's rekey of our child `old` (nonces `ni`, `nr`): our own rekey of it
/// waiting in the queue is moot now, and one already sent collides with it (§2.8.1).
fn note_peer_rekey(core: &mut Core, old: u32, ni: &[u8], nr: &[u8]) {
    core.queue.retain(|k| *k != RequestKind::RekeyChild(old));
    core.deferred.retain(|(_, k)| *k != RequestKind::RekeyChild(old));
    if matches!(core.pending.as_ref().map(|p| &p.kind), Some(RequestKind::RekeyChildSent(r)) if r.old == Some(old))
    {
        core.collision = Some(Collision { old, lowest: ni.min(nr).to_vec() });
    }
}
