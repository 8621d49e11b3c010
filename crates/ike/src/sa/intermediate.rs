//! RFC 9370 additional key exchanges in IKE_INTERMEDIATE (RFC 9242), between IKE_SA_INIT
//! and IKE_AUTH: one exchange per negotiated additional method, in slot order, each
//! protected with the keys of the one before; the enclave checks each exchange, derives
//! the keys anew and makes AUTH cover the exchanges.
//!
//! ```text
//! initiator                                          responder
//! IKE_INTERMEDIATE { SK { KEi(n) } }          -->    (ExpectAuthRequest, n pending)
//!                                             <--    IKE_INTERMEDIATE { SK { KEr(n) } }
//! ... once per additional key exchange, then IKE_AUTH with the next message ID
//! ```

use std::collections::VecDeque;

use enclave::{DhExchange, DhGroup, DhHandle, Enclave, IkeSaHandle, IntermediateExchange};
use wire::ike::{ExchangeType, IkeHeader, KeyExchange, Payload};

use super::{Core, Ctx, ExpectAuthRequest, ExpectAuthResponse, RequestKind, State};
use crate::error::Error;
use crate::proposal::IkeChoice;
use crate::sk::{self, Plain};

/// What the initiator carries from IKE_SA_INIT to IKE_AUTH.
#[derive(Debug)]
struct SaInit {
    ike: IkeSaHandle,
    choice: IkeChoice,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    /// IKE_SA_INIT's request as sent and response as received (AUTH covers them).
    request: Vec<u8>,
    response: Vec<u8>,
}

/// Initiator: an IKE_INTERMEDIATE request out, its response awaited.
#[derive(Debug)]
pub(super) struct ExpectIntermediateResponse {
    init: SaInit,
    /// The additional key exchanges still to do after this one.
    remaining: VecDeque<DhGroup>,
    /// This exchange: our private value, its method, and our request as IntAuth covers it.
    dh: DhHandle,
    group: DhGroup,
    request: Vec<u8>,
}

/// What follows IKE_SA_INIT on the initiator's side, once the keys exist: the additional
/// key exchanges if the responder chose some, else IKE_AUTH.
#[allow(clippy::too_many_arguments)]
pub(super) fn after_sa_init<E: Enclave>(
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    choice: IkeChoice,
    nonce_i: Vec<u8>,
    nonce_r: Vec<u8>,
    sa_init_request: Vec<u8>,
    sa_init_response: Vec<u8>,
) -> State {
    let remaining = choice.additional_kes().collect();
    let init = SaInit { ike, choice, nonce_i, nonce_r, request: sa_init_request, response: sa_init_response };
    next(core, ctx, init, remaining)
}

/// The next additional key exchange's IKE_INTERMEDIATE, or IKE_AUTH once none is left.
fn next<E: Enclave>(
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    init: SaInit,
    mut remaining: VecDeque<DhGroup>,
) -> State {
    let Some(group) = remaining.pop_front() else {
        let SaInit { ike, choice, nonce_i, nonce_r, request, response } = init;
        return match ExpectAuthResponse::start(core, ctx, ike, choice, nonce_i, nonce_r, &request, response) {
            Ok(next) => State::ExpectAuthResponse(Box::new(next)),
            Err(e) => core.fail(ctx, Some(ike), None, e),
        };
    };
    match send(core, ctx, init.ike, &init.choice, group) {
        Ok((dh, request)) => State::ExpectIntermediateResponse(Box::new(ExpectIntermediateResponse {
            init,
            remaining,
            dh,
            group,
            request,
        })),
        Err(e) => core.fail(ctx, Some(init.ike), None, e),
    }
}

/// Sends the IKE_INTERMEDIATE request of one additional key exchange; returns our private
/// value and the request's authenticated form.
fn send<E: Enclave>(
    core: &mut Core,
    ctx: &mut Ctx<'_, E>,
    ike: IkeSaHandle,
    choice: &IkeChoice,
    group: DhGroup,
) -> Result<(DhHandle, Vec<u8>), Error> {
    let mut public = vec![0u8; group.public_len()];
    let dh = ctx.enclave.dh_generate(group, &mut public)?;
    let inner = vec![Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), public))];
    let id = core.next_request;
    let header = core.header(ExchangeType::IKE_INTERMEDIATE, false, id);
    let sealed = Plain::of(&inner).and_then(|plain| {
        let bytes = sk::seal(ctx.enclave, ike, choice.suite, header, inner, core.fragment_at_peer(ctx))?;
        Ok((plain.authenticated_form(&header), bytes))
    });
    let (request, bytes) = match sealed {
        Ok(s) => s,
        Err(e) => {
            let _ = ctx.enclave.dh_delete(dh);
            return Err(e);
        }
    };
    /* IKE_INTERMEDIATE { SK { KEi(n) } } --> */
    core.send_request(ctx, ExchangeType::IKE_INTERMEDIATE, id, bytes, RequestKind::Intermediate);
    Ok((dh, request))
}

/// The one KE payload of an IKE_INTERMEDIATE message, if it is of `group` and `len` long.
fn key_exchange(inner: &[Payload], group: DhGroup, len: usize) -> Option<&[u8]> {
    let mut kes = inner.iter().filter_map(|p| match p {
        Payload::KeyExchange(ke) => Some(ke),
        _ => None,
    });
    let ke = kes.next()?;
    (kes.next().is_none() && ke.group.0 == group.id() && ke.data.len() == len).then_some(&ke.data[..])
}

impl ExpectIntermediateResponse {
    /// The response: the responder's value, the keys anew, then the next exchange or
    /// IKE_AUTH.
    pub(super) fn process<E: Enclave>(
        self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        header: &IkeHeader,
        inner: &[Payload],
        plain: &Plain,
    ) -> State {
        /* <-- IKE_INTERMEDIATE { SK { KEr(n) } } */
        let Some(peer) = key_exchange(inner, self.group, self.group.response_len()) else {
            let error = match super::Inner::of(inner).error {
                Some(n) => super::peer_error(n),
                None => {
                    Error::InvalidMessage { exchange: "IKE_INTERMEDIATE", why: "no KE of the method chosen" }
                }
            };
            return self.fail(core, ctx, error);
        };
        let response = plain.authenticated_form(header);
        let init = &self.init;
        let exchange = IntermediateExchange {
            nonce_i: &init.nonce_i,
            nonce_r: &init.nonce_r,
            request: &self.request,
            response: &response,
        };
        // The private value is consumed whether or not this succeeds.
        let x = DhExchange { dh: self.dh, peer_public: peer };
        if let Err(e) = ctx.enclave.ike_sa_intermediate(init.ike, x, &exchange) {
            return core.fail(ctx, Some(init.ike), None, e.into());
        }
        ctx.out.counters.additional_key_exchanges += 1;
        next(core, ctx, self.init, self.remaining)
    }

    pub(super) fn ike(&self) -> IkeSaHandle {
        self.init.ike
    }

    pub(super) fn choice(&self) -> IkeChoice {
        self.init.choice
    }

    /// Gives up: the SA and our private value go.
    pub(super) fn fail<E: Enclave>(self, core: &mut Core, ctx: &mut Ctx<'_, E>, error: Error) -> State {
        core.fail(ctx, Some(self.init.ike), Some(self.dh), error)
    }
}

impl ExpectAuthRequest {
    /// Responder: an IKE_INTERMEDIATE request carrying the next additional key exchange.
    /// The response goes out under the keys the request came under; then the keys change.
    pub(super) fn process_intermediate<E: Enclave>(
        mut self,
        core: &mut Core,
        ctx: &mut Ctx<'_, E>,
        to: (core::net::SocketAddr, core::net::SocketAddr),
        header: &IkeHeader,
        inner: &[Payload],
        plain: &Plain,
    ) -> State {
        let (ike, choice) = (self.ike, self.choice);
        let invalid = |why| Error::InvalidMessage { exchange: "IKE_INTERMEDIATE", why };
        /* IKE_INTERMEDIATE { SK { KEi(n) } } --> */
        let Some(group) = self.intermediate.pop_front() else {
            return core.fail(ctx, Some(ike), None, invalid("no additional key exchange is due"));
        };
        let Some(peer) = key_exchange(inner, group, group.public_len()) else {
            return core.fail(ctx, Some(ike), None, invalid("no KE of the method chosen"));
        };
        let mut public = vec![0u8; group.response_len()];
        let dh = match ctx.enclave.ke_respond(group, peer, &mut public) {
            Ok(dh) => dh,
            Err(e) => return core.fail(ctx, Some(ike), None, e.into()),
        };
        let reply = vec![Payload::KeyExchange(KeyExchange::new(wire::ike::DhGroup(group.id()), public))];
        let id = header.message_id;
        let our_header = core.header(ExchangeType::IKE_INTERMEDIATE, true, id);
        let sealed = Plain::of(&reply).and_then(|p| {
            let bytes =
                sk::seal(ctx.enclave, ike, choice.suite, our_header, reply, core.fragment_at(ctx, to))?;
            Ok((p.authenticated_form(&our_header), bytes))
        });
        let (response, bytes) = match sealed {
            Ok(s) => s,
            Err(e) => return core.fail(ctx, Some(ike), Some(dh), e),
        };
        let request = plain.authenticated_form(header);
        let exchange = IntermediateExchange {
            nonce_i: &self.nonce_i,
            nonce_r: &self.nonce_r,
            request: &request,
            response: &response,
        };
        if let Err(e) = ctx.enclave.ike_sa_intermediate(ike, DhExchange { dh, peer_public: peer }, &exchange)
        {
            return core.fail(ctx, Some(ike), None, e.into());
        }
        ctx.out.counters.additional_key_exchanges += 1;
        /* <-- IKE_INTERMEDIATE { SK { KEr(n) } } */
        ctx.out.send_all(to.0, to.1, &bytes);
        core.last_response = Some((id, bytes));
        core.expected_request = id.saturating_add(1);
        // A retransmission of this request comes under the keys just replaced: it is
        // recognised by its bytes (§2.1) and earns the cached response again.
        let datagrams = core.incoming_intermediate.take().map(|(_, d)| d).unwrap_or_default();
        core.last_request = Some((id, datagrams));
        State::ExpectAuthRequest(self)
    }
}
