//! IKE fragmentation (RFC 7383): our large encrypted messages leave as SKF fragments that
//! fit the path, and the peer's fragments are put back together.
//!
//! Both ends announce IKEV2_FRAGMENTATION_SUPPORTED in IKE_SA_INIT (§2.3); from then on a
//! message whose SK form would exceed the fragment size goes as fragments, each encrypted
//! and authenticated on its own (`sk.rs` splits and seals). Fragments are taken whether or
//! not we announced support (a peer with strongSwan's `fragmentation = force` sends them
//! anyway), but only as the enclave verified and decrypted them (§2.6.1: an unauthenticated
//! fragment never takes room). Reassembly keeps one message per direction (the peer's
//! request, the response to ours), bounded in fragments ([`MAX_FRAGMENTS`]), bytes
//! ([`MAX_MESSAGE`]) and time ([`REASSEMBLY_TIMEOUT`]).

use std::time::{Duration, Instant};

use wire::ike::PayloadType;

use crate::event::DropReason;

/// The most fragments one message may have: a whole 64 KiB message in fragments of about
/// a kilobyte.
pub(crate) const MAX_FRAGMENTS: u16 = 128;
/// The most plaintext bytes one reassembled message may have.
pub(crate) const MAX_MESSAGE: usize = 65_535;
/// How long the fragments of an incomplete message are kept after its first arrived.
pub(crate) const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest IP datagram a fragment makes (strongSwan's `fragment_size` default; at or
/// under IPv6's minimum link MTU, RFC 7383 §2.5.1).
pub const DEFAULT_FRAGMENT_SIZE: usize = 1280;

/// Whether a connection announces and sends fragments (swanctl's `fragmentation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FragmentationPolicy {
    /// Announce support and fragment large messages when the peer announced it too.
    #[default]
    Yes,
    /// Announce support (and reassemble), but never send fragments.
    Accept,
    /// Do not announce support, never send fragments (fragments the peer sends anyway are
    /// still reassembled).
    No,
}

impl FragmentationPolicy {
    /// Whether our IKE_SA_INIT carries IKEV2_FRAGMENTATION_SUPPORTED.
    pub(crate) fn announces(self) -> bool {
        self != Self::No
    }
}

/// IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383 §2.3), for IKE_SA_INIT.
pub(crate) fn supported_notify() -> wire::ike::Payload {
    wire::ike::Payload::Notify(wire::ike::Notify::new(
        wire::ike::NotifyType::IKEV2_FRAGMENTATION_SUPPORTED,
        vec![],
    ))
}

/// A connection's fragmentation state: whether we send fragments, and what the peer's are
/// building up to.
#[derive(Debug, Default)]
pub(crate) struct Fragmentation {
    /// Both ends announced support and our policy is [`FragmentationPolicy::Yes`].
    pub(crate) send: bool,
    requests: Option<Reassembly>,
    responses: Option<Reassembly>,
}

/// The fragments of one message received so far.
#[derive(Debug)]
struct Reassembly {
    id: u32,
    total: u16,
    /// The first inner payload's type, from fragment 1.
    first_inner: Option<PayloadType>,
    parts: Vec<Option<Vec<u8>>>,
    bytes: usize,
    started: Instant,
}

impl Reassembly {
    fn new(id: u32, total: u16, now: Instant) -> Self {
        Self { id, total, first_inner: None, parts: vec![None; usize::from(total)], bytes: 0, started: now }
    }
}

/// One authenticated fragment's decrypted contents and place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece<'a> {
    /// The message it belongs to.
    pub(crate) id: u32,
    /// Whether that message is a response.
    pub(crate) response: bool,
    /// Its Fragment Number (1..=total; the decoder checked).
    pub(crate) number: u16,
    /// Total Fragments.
    pub(crate) total: u16,
    /// The Next Payload of the SKF payload: the first inner payload in fragment 1.
    pub(crate) first_inner: PayloadType,
    /// The decrypted contents.
    pub(crate) plaintext: &'a [u8],
}

/// What became of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Kept; more are missing.
    Kept,
    /// The last missing one: the whole message's inner payload chain.
    Complete {
        /// The type of its first payload.
        first_inner: PayloadType,
        /// The chain.
        plaintext: Vec<u8>,
    },
    /// Not kept (the reason is counted).
    Dropped(DropReason),
}

impl Fragmentation {
    /// Whether we send fragments.
    pub(crate) fn new(send: bool) -> Self {
        Self { send, ..Self::default() }
    }

    /// Takes an authenticated fragment (§2.6.1).
    pub(crate) fn take(&mut self, now: Instant, piece: Piece<'_>) -> Taken {
        if piece.total > MAX_FRAGMENTS {
            return Taken::Dropped(DropReason::FragmentRefused);
        }
        let slot = if piece.response { &mut self.responses } else { &mut self.requests };
        let stale = |r: &Reassembly| now.saturating_duration_since(r.started) > REASSEMBLY_TIMEOUT;
        match slot {
            // Another message (a newer request, or the response to a newer one) supersedes
            // an incomplete one, and an old one is given up.
            Some(r) if r.id != piece.id || stale(r) => *slot = None,
            // A later try with smaller fragments (the sender lowered its fragment size):
            // start over with it. A smaller total belongs to an earlier try: ignored.
            Some(r) if piece.total > r.total => *slot = None,
            Some(r) if piece.total < r.total => return Taken::Dropped(DropReason::FragmentRefused),
            _ => {}
        }
        let r = slot.get_or_insert_with(|| Reassembly::new(piece.id, piece.total, now));
        let index = usize::from(piece.number).saturating_sub(1);
        let Some(part) = r.parts.get_mut(index) else {
            return Taken::Dropped(DropReason::FragmentRefused);
        };
        if part.is_some() {
            // A retransmission's copy: the first one stays.
            return Taken::Dropped(DropReason::FragmentDuplicate);
        }
        if r.bytes + piece.plaintext.len() > MAX_MESSAGE {
            *slot = None;
            return Taken::Dropped(DropReason::FragmentRefused);
        }
        *part = Some(piece.plaintext.to_vec());
        r.bytes += piece.plaintext.len();
        if piece.number == 1 {
            r.first_inner = Some(piece.first_inner);
        }
        if r.parts.iter().any(Option::is_none) {
            return Taken::Kept;
        }
        let Some(done) = slot.take() else { return Taken::Kept };
        let mut plaintext = Vec::with_capacity(done.bytes);
        for p in done.parts.into_iter().flatten() {
            plaintext.extend_from_slice(&p);
        }
        Taken::Complete { first_inner: done.first_inner.unwrap_or(PayloadType::NONE), plaintext }
    }

    /// Gives up incomplete messages older than [`REASSEMBLY_TIMEOUT`].
    pub(crate) fn expire(&mut self, now: Instant) {
        for slot in [&mut self.requests, &mut self.responses] {
            if slot.as_ref().is_some_and(|r| now.saturating_duration_since(r.started) > REASSEMBLY_TIMEOUT) {
                *slot = None;
            }
        }
    }

    /// Bytes held for incomplete messages.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.requests.iter().chain(&self.responses).map(|r| r.bytes).sum()
    }
}

/// The largest IKE message (header to ICV) a datagram of `fragment_size` bytes carries
/// between these addresses: less the IP and UDP headers and, on port 4500, the non-ESP
/// marker.
pub(crate) fn max_message(
    fragment_size: usize,
    local: core::net::SocketAddr,
    remote: core::net::SocketAddr,
) -> usize {
    let ip = if local.is_ipv6() { 40 } else { 20 };
    let marker =
        if local.port() == crate::sa::NATT_PORT || remote.port() == crate::sa::NATT_PORT { 4 } else { 0 };
    fragment_size.saturating_sub(ip + 8 + marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(id: u32, number: u16, total: u16, bytes: &[u8]) -> Piece<'_> {
        let first_inner = if number == 1 { PayloadType::IDI } else { PayloadType::NONE };
        Piece { id, response: false, number, total, first_inner, plaintext: bytes }
    }

    #[test]
    fn fragments_in_any_order_make_the_message_once() {
        let now = Instant::now();
        let mut f = Fragmentation::default();
        assert_eq!(f.take(now, piece(1, 3, 3, b"ccc")), Taken::Kept);
        assert_eq!(f.take(now, piece(1, 1, 3, b"a")), Taken::Kept);
        assert_eq!(f.take(now, piece(1, 1, 3, b"x")), Taken::Dropped(DropReason::FragmentDuplicate));
        assert_eq!(
            f.take(now, piece(1, 2, 3, b"bb")),
            Taken::Complete { first_inner: PayloadType::IDI, plaintext: b"abbccc".to_vec() }
        );
        assert_eq!(f.held(), 0);
        // A late copy of one of them starts a new message that never completes alone.
        assert_eq!(f.take(now, piece(1, 2, 3, b"bb")), Taken::Kept);
    }

    #[test]
    fn requests_and_responses_build_up_side_by_side() {
        let now = Instant::now();
        let mut f = Fragmentation::default();
        assert_eq!(f.take(now, piece(4, 1, 2, b"q")), Taken::Kept);
        let answer = Piece { response: true, ..piece(7, 1, 1, b"r") };
        assert_eq!(
            f.take(now, answer),
            Taken::Complete { first_inner: PayloadType::IDI, plaintext: b"r".to_vec() }
        );
        assert!(matches!(f.take(now, piece(4, 2, 2, b"q")), Taken::Complete { .. }));
    }

    #[test]
    fn a_new_message_or_a_finer_split_starts_over_and_a_coarser_one_is_ignored() {
        let now = Instant::now();
        let mut f = Fragmentation::default();
        assert_eq!(f.take(now, piece(1, 1, 2, b"old")), Taken::Kept);
        assert_eq!(f.take(now, piece(2, 1, 2, b"new")), Taken::Kept);
        assert_eq!(f.held(), 3);
        assert_eq!(f.take(now, piece(2, 1, 3, b"n")), Taken::Kept, "more, smaller fragments");
        assert_eq!(f.take(now, piece(2, 2, 2, b"ew")), Taken::Dropped(DropReason::FragmentRefused));
        assert_eq!(f.take(now, piece(2, 2, 3, b"e")), Taken::Kept);
        assert!(
            matches!(f.take(now, piece(2, 3, 3, b"w")), Taken::Complete { plaintext, .. } if plaintext == b"new")
        );
    }

    #[test]
    fn reassembly_is_bounded_in_count_bytes_and_time() {
        let now = Instant::now();
        let mut f = Fragmentation::default();
        assert_eq!(
            f.take(now, piece(1, 1, MAX_FRAGMENTS + 1, b"a")),
            Taken::Dropped(DropReason::FragmentRefused)
        );
        let big = vec![0u8; MAX_MESSAGE / 2 + 1];
        assert_eq!(f.take(now, piece(1, 1, 3, &big)), Taken::Kept);
        assert_eq!(f.take(now, piece(1, 2, 3, &big)), Taken::Dropped(DropReason::FragmentRefused));
        assert_eq!(f.held(), 0, "an oversized message is given up whole");
        assert_eq!(f.take(now, piece(1, 1, 2, b"a")), Taken::Kept);
        f.expire(now + REASSEMBLY_TIMEOUT);
        assert_eq!(f.held(), 1);
        f.expire(now + REASSEMBLY_TIMEOUT + Duration::from_secs(1));
        assert_eq!(f.held(), 0);
        assert_eq!(f.take(now, piece(1, 1, 2, b"a")), Taken::Kept);
        let later = now + REASSEMBLY_TIMEOUT + Duration::from_secs(1);
        assert_eq!(f.take(later, piece(1, 2, 2, b"b")), Taken::Kept, "the stale first half is gone");
    }

    #[test]
    fn the_fragment_size_leaves_room_for_the_headers() {
        let v4: core::net::SocketAddr = "198.18.0.1:4500".parse().unwrap();
        let v6: core::net::SocketAddr = "[2001:db8::1]:500".parse().unwrap();
        assert_eq!(max_message(1280, v4, v4), 1280 - 20 - 8 - 4);
        assert_eq!(max_message(1280, v6, v6), 1280 - 40 - 8);
    }
}
