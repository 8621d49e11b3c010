//! What the engine reports: datagrams to send, events, and drop and refusal counters.

use core::net::SocketAddr;
use std::time::{Duration, Instant};

use enclave::{ChildSaPair, Role, Suite};
use wire::ike::Identification;

use crate::error::Error;
use crate::nat::NatState;
use crate::proposal::IkeChoice;
use crate::ts::TrafficSelector;

/// Names an IKE SA: our own SPI of it (the initiator's SPI if we initiated, the responder's
/// otherwise), unique within an [`crate::Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SaId(pub u64);

/// A datagram to send: the UDP payload (with the non-ESP marker when `local` is port
/// 4500, RFC 3948 §2.2) and the addresses to send it between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Our address and port to send from.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
    /// The UDP payload.
    pub contents: Vec<u8>,
}

/// How a child SA's ESP packets travel: in UDP when NAT detection found a NAT or `encap`
/// forced it.
pub use wire::udp_encap::Encapsulation;

/// A negotiated child SA: everything the ESP data plane needs, with enclave handles for
/// the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSa {
    /// The child configuration's name.
    pub name: String,
    /// The SPI packets to us carry.
    pub spi_inbound: u32,
    /// The SPI packets we send carry.
    pub spi_outbound: u32,
    /// The enclave's two directions.
    pub handles: ChildSaPair,
    /// The ESP transform.
    pub suite: Suite,
    /// Whether 64-bit extended sequence numbers are used.
    pub esn: bool,
    /// Our side's traffic selectors (after narrowing).
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's traffic selectors (after narrowing).
    pub remote_ts: Vec<TrafficSelector>,
    /// Raw ESP or ESP in UDP.
    pub encapsulation: Encapsulation,
    /// Our tunnel endpoint.
    pub local: SocketAddr,
    /// The peer's tunnel endpoint.
    pub remote: SocketAddr,
    /// When the data plane should ask for a rekey (soft lifetime).
    pub rekey_time: Duration,
    /// When the SA must be gone (hard lifetime).
    pub life_time: Duration,
    /// Byte and packet limits for rekey and deletion.
    pub volume: crate::config::VolumeLimits,
}

/// How much trusted memory the enclave held for this IKE SA around its clear-and-seal
/// (EnclaveVPN §4.5.2): the drop is what the seal freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SealReport {
    /// Trusted bytes held for this IKE SA just before clear-and-seal.
    pub ike_sa_bytes_before: usize,
    /// And just after.
    pub ike_sa_bytes_after: usize,
    /// Size of the sealed SK_d blob now held on the untrusted side.
    pub sealed_sk_d_len: usize,
    /// Size of the sealed state blob (for a restart) held on the untrusted side.
    pub sealed_state_len: usize,
}

/// Why an established IKE SA went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteReason {
    /// We deleted it ([`crate::Endpoint::delete_ike`]) and the peer confirmed (or did not
    /// answer in time).
    Requested,
    /// The peer sent a Delete for it.
    PeerDeleted,
    /// The peer stopped answering (a request, such as a liveness check, timed out).
    PeerUnreachable,
    /// The peer told us it could not authenticate us (AUTHENTICATION_FAILED in an
    /// INFORMATIONAL request, RFC 7296 §2.21.2).
    PeerAuthenticationFailed,
    /// It was rekeyed (RFC 7296 §1.3.2): its successor holds its child SAs now; or it was
    /// the redundant SA of a simultaneous rekey (§2.8.2).
    Rekeyed,
    /// Its hard lifetime (`rekey_time + over_time`) ran out before a rekey succeeded.
    Expired,
    /// The peer established a new IKE SA between the same identities with INITIAL_CONTACT
    /// (RFC 7296 §2.4): it has lost this one, which was dropped without a Delete.
    Superseded,
}

/// When the data plane moves a rekeyed child's outbound traffic to the new SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundSwitch {
    /// At once: we started the rekey, so the peer installed the new SA before answering.
    Now,
    /// When the peer deletes the old SA (or after a while): we answered the rekey, and
    /// the peer may not have installed its inbound side yet when our first packets arrive
    /// (strongSwan switches the same way).
    OnPeerDelete,
    /// Never: the new SA is the redundant one of a simultaneous rekey (RFC 7296 §2.8.1)
    /// and is deleted shortly; its inbound side takes what the peer sent with it meanwhile.
    Never,
}

/// Something the application should know about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// IKE_AUTH completed: the IKE SA is authenticated and its SK_d is sealed.
    IkeSaEstablished {
        /// The SA.
        sa: SaId,
        /// Its connection's name.
        connection: String,
        /// Whether we initiated it.
        role: Role,
        /// The negotiated algorithms.
        choice: IkeChoice,
        /// Our identity.
        local_id: Identification,
        /// The peer's proven identity.
        remote_id: Identification,
        /// Our address and port now in use.
        local: SocketAddr,
        /// The peer's address and port now in use.
        remote: SocketAddr,
        /// What NAT detection found.
        nat: NatState,
        /// Trusted memory around clear-and-seal.
        seal: SealReport,
    },
    /// A child SA is installed in the enclave: the data plane may use it.
    ChildSaReady {
        /// The IKE SA it belongs to.
        sa: SaId,
        /// The child SA.
        child: ChildSa,
    },
    /// A child SA was rekeyed (CREATE_CHILD_SA): the new one is installed; the old one
    /// stays until it is retired ([`Event::ChildSaRetired`]) and then deleted.
    ChildSaRekeyed {
        /// The IKE SA.
        sa: SaId,
        /// The old child SA's inbound SPI.
        old_spi_inbound: u32,
        /// The new child SA.
        child: ChildSa,
        /// When outbound traffic should move to the new SA.
        outbound: OutboundSwitch,
    },
    /// A child SA could not be negotiated; the IKE SA lives on.
    ChildSaFailed {
        /// The IKE SA.
        sa: SaId,
        /// The child configuration's name.
        child: String,
        /// Why (NO_PROPOSAL_CHOSEN, TS_UNACCEPTABLE, ...).
        error: Error,
    },
    /// A child SA was deleted by IKE while another child of the same configuration lives
    /// on (its rekey's successor, or the survivor of a rekey collision): the data plane must
    /// stop sending with it now, but its inbound side keeps its enclave handles until
    /// [`Event::ChildSaDeleted`] follows at `until`, so packets the peer sent before the
    /// Delete still arrive (a rekey loses no traffic).
    ChildSaRetired {
        /// The IKE SA.
        sa: SaId,
        /// The retired child SA.
        child: ChildSa,
        /// When its handles are deleted.
        until: Instant,
    },
    /// A child SA is gone and its enclave handles are deleted: the data plane must stop
    /// using them.
    ChildSaDeleted {
        /// The IKE SA.
        sa: SaId,
        /// The child SA that was removed.
        child: ChildSa,
    },
    /// An IKE SA was rekeyed (RFC 7296 §1.3.2): `new` holds the child SAs of `old` now and
    /// takes every later command; `old` is deleted soon ([`Event::IkeSaDeleted`] with
    /// [`DeleteReason::Rekeyed`]).
    IkeSaRekeyed {
        /// The SA that was rekeyed.
        old: SaId,
        /// Its successor.
        new: SaId,
        /// Whether we initiated the exchange that created `new` (its original initiator).
        role: Role,
        /// The successor's algorithms.
        choice: IkeChoice,
        /// Trusted memory around the successor's clear-and-seal.
        seal: SealReport,
    },
    /// Rekeying an IKE SA failed (the peer refused, or its answer was unusable); the SA
    /// lives on and the rekey is tried again a minute later, until the hard lifetime.
    IkeSaRekeyFailed {
        /// The SA.
        sa: SaId,
        /// Why.
        error: Error,
    },
    /// An established IKE SA is gone, with all its child SAs (reported before it).
    IkeSaDeleted {
        /// The SA.
        sa: SaId,
        /// Why.
        reason: DeleteReason,
    },
    /// An IKE SA failed before it was established.
    IkeSaFailed {
        /// The SA.
        sa: SaId,
        /// Its connection's name.
        connection: String,
        /// Why.
        error: Error,
    },
}

/// Why a received datagram was dropped without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// On port 4500 without the non-ESP marker (ESP, or a keepalive).
    NotIke,
    /// Not a valid IKE message.
    Malformed,
    /// No IKE SA has the SPI (RFC 7296 §2.21.4: no answer).
    UnknownSpi,
    /// The SPIs or flags do not fit the IKE SA.
    SpiMismatch,
    /// The exchange type does not fit the IKE SA's state.
    UnexpectedExchange,
    /// A request outside the message ID window (§2.3).
    OutOfWindow,
    /// A response to no outstanding request.
    UnexpectedResponse,
    /// The SK payload is missing or does not verify (§2.21.2: silent).
    IntegrityCheckFailed,
    /// A retransmitted IKE_SA_INIT request for an SA past IKE_SA_INIT.
    LateRetransmit,
    /// A responder's half-open SA was never authenticated in time.
    HalfOpenExpired,
    /// An authentic IKE fragment (RFC 7383) that reassembly does not take: more fragments
    /// or bytes than one message may have, or of an earlier try of the message.
    FragmentRefused,
    /// An authentic IKE fragment already held (a retransmission's copy).
    FragmentDuplicate,
    /// An IKE_SA_INIT request we could not serve for a failure of our own (the enclave gone,
    /// full or refusing): not answered, so the peer retries instead of giving up.
    Unavailable,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 13;

    /// Every reason, in counter order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::NotIke,
        Self::Malformed,
        Self::UnknownSpi,
        Self::SpiMismatch,
        Self::UnexpectedExchange,
        Self::OutOfWindow,
        Self::UnexpectedResponse,
        Self::IntegrityCheckFailed,
        Self::LateRetransmit,
        Self::HalfOpenExpired,
        Self::FragmentRefused,
        Self::FragmentDuplicate,
        Self::Unavailable,
    ];

    /// The reason as a metric label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotIke => "not_ike",
            Self::Malformed => "malformed",
            Self::UnknownSpi => "unknown_spi",
            Self::SpiMismatch => "spi_mismatch",
            Self::UnexpectedExchange => "unexpected_exchange",
            Self::OutOfWindow => "out_of_window",
            Self::UnexpectedResponse => "unexpected_response",
            Self::IntegrityCheckFailed => "integrity_check_failed",
            Self::LateRetransmit => "late_retransmit",
            Self::HalfOpenExpired => "half_open_expired",
            Self::FragmentRefused => "fragment_refused",
            Self::FragmentDuplicate => "fragment_duplicate",
            Self::Unavailable => "unavailable",
        }
    }

    /// The counter index.
    pub const fn index(self) -> usize {
        match self {
            Self::NotIke => 0,
            Self::Malformed => 1,
            Self::UnknownSpi => 2,
            Self::SpiMismatch => 3,
            Self::UnexpectedExchange => 4,
            Self::OutOfWindow => 5,
            Self::UnexpectedResponse => 6,
            Self::IntegrityCheckFailed => 7,
            Self::LateRetransmit => 8,
            Self::HalfOpenExpired => 9,
            Self::FragmentRefused => 10,
            Self::FragmentDuplicate => 11,
            Self::Unavailable => 12,
        }
    }
}

/// An IKE_SA_INIT request answered statelessly with an error or cookie, without an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// NO_PROPOSAL_CHOSEN: no connection for the addresses, or no acceptable proposal.
    NoProposalChosen,
    /// INVALID_KE_PAYLOAD: the KE group was not the selected one (§1.2).
    InvalidKePayload,
    /// COOKIE: too many half-open SAs (§2.6).
    CookieRequired,
    /// INVALID_SYNTAX (a payload missing or malformed, a bad public value) or
    /// UNSUPPORTED_CRITICAL_PAYLOAD (§2.5).
    InvalidSyntax,
    /// INVALID_MAJOR_VERSION (§2.5).
    InvalidMajorVersion,
}

impl Refusal {
    /// Number of refusals.
    pub const COUNT: usize = 5;

    /// Every refusal, in counter order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::NoProposalChosen,
        Self::InvalidKePayload,
        Self::CookieRequired,
        Self::InvalidSyntax,
        Self::InvalidMajorVersion,
    ];

    /// The refusal as a metric label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NoProposalChosen => "no_proposal_chosen",
            Self::InvalidKePayload => "invalid_ke_payload",
            Self::CookieRequired => "cookie_required",
            Self::InvalidSyntax => "invalid_syntax",
            Self::InvalidMajorVersion => "invalid_major_version",
        }
    }

    /// The counter index.
    pub const fn index(self) -> usize {
        match self {
            Self::NoProposalChosen => 0,
            Self::InvalidKePayload => 1,
            Self::CookieRequired => 2,
            Self::InvalidSyntax => 3,
            Self::InvalidMajorVersion => 4,
        }
    }
}

/// Drops, refusals and retransmissions since the endpoint started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Datagrams dropped, by [`DropReason::index`].
    pub drops: [u64; DropReason::COUNT],
    /// IKE_SA_INIT requests refused statelessly, by [`Refusal::index`].
    pub refusals: [u64; Refusal::COUNT],
    /// Requests we retransmitted.
    pub retransmits: u64,
    /// Retransmitted requests answered again from the response cache.
    pub responses_resent: u64,
    /// Messages we sent as IKE fragments (RFC 7383).
    pub fragmented_sent: u64,
    /// Messages of the peer's put together from fragments.
    pub reassembled: u64,
    /// RFC 9370 additional key exchanges done in IKE_INTERMEDIATE (either role).
    pub additional_key_exchanges: u64,
}

impl Counters {
    /// Datagrams dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.index()).copied().unwrap_or(0)
    }

    /// All dropped datagrams.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Requests refused with `refusal`.
    pub fn refused(&self, refusal: Refusal) -> u64 {
        self.refusals.get(refusal.index()).copied().unwrap_or(0)
    }

    pub(crate) fn drop(&mut self, reason: DropReason) {
        if let Some(c) = self.drops.get_mut(reason.index()) {
            *c = c.saturating_add(1);
        }
    }

    pub(crate) fn refuse(&mut self, refusal: Refusal) {
        if let Some(c) = self.refusals.get_mut(refusal.index()) {
            *c = c.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_order_matches_the_lists() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{}", r.name());
        }
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{}", r.name());
        }
    }
}
