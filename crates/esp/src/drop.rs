//! Why a packet was dropped: a `Copy` reason, counted per SA and per worker, never logged
//! per packet (STYLE §4; the model is vpp's `foreach_ipsec_sa_err`).

use core::sync::atomic::{AtomicU64, Ordering};
use enclave::EspStatus;

/// The reason a packet left the data plane without being sent or delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum DropReason {
    /// No SA: unknown inbound SPI, or a policy names an outbound SA that is gone.
    NoSa = 0,
    /// Anti-replay: a sequence number seen before, or older than the window (RFC 4303 §3.4.3).
    Replay = 1,
    /// The enclave found the ICV wrong (RFC 4303 §3.4.4): forged, corrupted, or wrong ESN guess.
    IcvMismatch = 2,
    /// The decrypted padding is not 1, 2, 3, … or the pad length exceeds the payload (§2.4).
    BadPadding = 3,
    /// The decrypted Next Header is not IPv4 (4) or IPv6 (41), or disagrees with the inner version.
    BadNextHeader = 4,
    /// A header is truncated, inconsistent or has a bad checksum.
    Malformed = 5,
    /// The inner addresses, protocol or ports are not within the SA's traffic selectors
    /// (RFC 4301 §5.2 step 4).
    SelectorMismatch = 6,
    /// The inner TTL / hop limit would reach zero on forwarding (RFC 4301 §5.1.2.1, note 2).
    TtlExceeded = 7,
    /// The encapsulated packet would exceed the path MTU and may not be fragmented (an ICMP
    /// error was generated where allowed, RFC 4301 §8.2).
    MtuExceeded = 8,
    /// The SA passed its hard lifetime (bytes, packets or time; RFC 4301 §4.4.2.1).
    HardLifetime = 9,
    /// The outbound sequence number space is used up: the SA must be rekeyed (RFC 4303 §3.3.3).
    SeqExhausted = 10,
    /// A policy says discard (RFC 4301 §4.4.1, DISCARD).
    PolicyDiscard = 11,
    /// No policy matches: the default is to discard (RFC 4301 §4.4.1).
    NoPolicy = 12,
    /// Inner Not-ECT with outer CE: RFC 6040 §4.2 says drop.
    EcnCeOnNotEct = 13,
    /// ESP arrived raw for a UDP-encapsulated SA, or in UDP for a raw one (RFC 3948).
    EncapsulationMismatch = 14,
    /// The outer packet is a fragment; reassembly is the I/O layer's job.
    OuterFragment = 15,
    /// A dummy packet (Next Header 59): discarded by design (RFC 4303 §2.6).
    Dummy = 16,
    /// The slot has too little head- or tailroom, or no free slot was left for a fragment.
    NoRoom = 17,
    /// The enclave refused the packet for another reason (a bug or a deleted key; see the
    /// enclave's own per-status counters).
    EnclaveRefused = 18,
}

impl DropReason {
    /// Number of reasons, for counter arrays.
    pub const COUNT: usize = 19;

    /// All reasons, in code order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::NoSa,
        Self::Replay,
        Self::IcvMismatch,
        Self::BadPadding,
        Self::BadNextHeader,
        Self::Malformed,
        Self::SelectorMismatch,
        Self::TtlExceeded,
        Self::MtuExceeded,
        Self::HardLifetime,
        Self::SeqExhausted,
        Self::PolicyDiscard,
        Self::NoPolicy,
        Self::EcnCeOnNotEct,
        Self::EncapsulationMismatch,
        Self::OuterFragment,
        Self::Dummy,
        Self::NoRoom,
        Self::EnclaveRefused,
    ];

    /// Index into a counter array.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A short stable name for metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NoSa => "no_sa",
            Self::Replay => "replay",
            Self::IcvMismatch => "icv_mismatch",
            Self::BadPadding => "bad_padding",
            Self::BadNextHeader => "bad_next_header",
            Self::Malformed => "malformed",
            Self::SelectorMismatch => "selector_mismatch",
            Self::TtlExceeded => "ttl_exceeded",
            Self::MtuExceeded => "mtu_exceeded",
            Self::HardLifetime => "hard_lifetime",
            Self::SeqExhausted => "seq_exhausted",
            Self::PolicyDiscard => "policy_discard",
            Self::NoPolicy => "no_policy",
            Self::EcnCeOnNotEct => "ecn_ce_on_not_ect",
            Self::EncapsulationMismatch => "encapsulation_mismatch",
            Self::OuterFragment => "outer_fragment",
            Self::Dummy => "dummy",
            Self::NoRoom => "no_room",
            Self::EnclaveRefused => "enclave_refused",
        }
    }

    /// The drop for an enclave status other than [`EspStatus::Ok`].
    pub fn from_status(status: EspStatus) -> Self {
        match status {
            EspStatus::IcvMismatch => Self::IcvMismatch,
            EspStatus::SeqExhausted => Self::SeqExhausted,
            EspStatus::BadLength => Self::Malformed,
            EspStatus::UnknownSa | EspStatus::ForeignSa => Self::NoSa,
            _ => Self::EnclaveRefused,
        }
    }
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Drop counts by reason, as plain numbers (a snapshot, or one worker's own counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropCounts([u64; DropReason::COUNT]);

impl DropCounts {
    /// Adds one drop.
    pub fn record(&mut self, reason: DropReason) {
        if let Some(c) = self.0.get_mut(reason.index()) {
            *c = c.saturating_add(1);
        }
    }

    /// Drops counted under `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0.get(reason.index()).copied().unwrap_or(0)
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Non-zero counts, for reports.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.get(r))).filter(|&(_, n)| n != 0)
    }
}

/// Drop counts by reason shared by every worker that touches one SA (relaxed atomics: they
/// are statistics, ordered with nothing).
#[derive(Debug, Default)]
pub struct SharedDropCounts([AtomicU64; DropReason::COUNT]);

impl SharedDropCounts {
    /// Adds one drop.
    pub fn record(&self, reason: DropReason) {
        if let Some(c) = self.0.get(reason.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops counted under `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0.get(reason.index()).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// A copy of every count.
    pub fn snapshot(&self) -> DropCounts {
        let mut out = DropCounts::default();
        for (dst, src) in out.0.iter_mut().zip(self.0.iter()) {
            *dst = src.load(Ordering::Relaxed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_index_their_table() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn enclave_statuses_map_to_reasons() {
        assert_eq!(DropReason::from_status(EspStatus::IcvMismatch), DropReason::IcvMismatch);
        assert_eq!(DropReason::from_status(EspStatus::SeqExhausted), DropReason::SeqExhausted);
        assert_eq!(DropReason::from_status(EspStatus::UnknownSa), DropReason::NoSa);
        assert_eq!(DropReason::from_status(EspStatus::SeqReused), DropReason::EnclaveRefused);
    }

    #[test]
    fn shared_counts_snapshot() {
        let c = SharedDropCounts::default();
        c.record(DropReason::Replay);
        c.record(DropReason::Replay);
        c.record(DropReason::NoSa);
        let s = c.snapshot();
        assert_eq!((s.get(DropReason::Replay), s.get(DropReason::NoSa), s.total()), (2, 1, 3));
        assert_eq!(s.nonzero().count(), 2);
    }
}
