//! Notify payload (RFC 7296 §3.10) and its message types (§3.10.1).

use super::auth::HashAlgorithm;
use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::sa::ProtocolId;
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// Notify message types (RFC 7296 §3.10.1, IANA "IKEv2 Notify Message Error/Status Types").
    ///
    /// Values below 16384 are errors, the rest status (§3.10.1).
    pub struct NotifyType(u16) {
        /// UNSUPPORTED_CRITICAL_PAYLOAD (1): Error: a critical payload type was not understood;
        /// data is its type (§2.5).
        UNSUPPORTED_CRITICAL_PAYLOAD = 0x0001,
        /// INVALID_IKE_SPI (4): Error: no IKE SA for the SPIs in the header (§2.21.4).
        INVALID_IKE_SPI = 0x0004,
        /// INVALID_MAJOR_VERSION (5): Error: the major version is not supported (§2.5).
        INVALID_MAJOR_VERSION = 0x0005,
        /// INVALID_SYNTAX (7): Error: the message was malformed (§2.21.4).
        INVALID_SYNTAX = 0x0007,
        /// INVALID_MESSAGE_ID (9): Error: the message ID was out of window (§2.3).
        INVALID_MESSAGE_ID = 0x0009,
        /// INVALID_SPI (11): Error: an ESP/AH packet named an unknown SPI (§1.5).
        INVALID_SPI = 0x000b,
        /// NO_PROPOSAL_CHOSEN (14): Error: none of the proposals was acceptable (§2.7).
        NO_PROPOSAL_CHOSEN = 0x000e,
        /// INVALID_KE_PAYLOAD (17): Error: the KE group was not the one selected; data is the group
        /// (§1.2).
        INVALID_KE_PAYLOAD = 0x0011,
        /// AUTHENTICATION_FAILED (24): Error: AUTH verification failed (§2.21.2).
        AUTHENTICATION_FAILED = 0x0018,
        /// SINGLE_PAIR_REQUIRED (34): Error: only a single pair of addresses is acceptable (§2.9).
        SINGLE_PAIR_REQUIRED = 0x0022,
        /// NO_ADDITIONAL_SAS (35): Error: no more Child SAs are accepted on this IKE SA (§1.3).
        NO_ADDITIONAL_SAS = 0x0023,
        /// INTERNAL_ADDRESS_FAILURE (36): Error: no address could be assigned (§3.15.4).
        INTERNAL_ADDRESS_FAILURE = 0x0024,
        /// FAILED_CP_REQUIRED (37): Error: a CP payload was required but not sent (§2.19).
        FAILED_CP_REQUIRED = 0x0025,
        /// TS_UNACCEPTABLE (38): Error: no acceptable traffic selectors (§2.9).
        TS_UNACCEPTABLE = 0x0026,
        /// INVALID_SELECTORS (39): Error: an ESP packet did not match the SA's selectors (§3.10.1).
        INVALID_SELECTORS = 0x0027,
        /// UNACCEPTABLE_ADDRESSES (40): Error: the new addresses are not acceptable (RFC 4555).
        UNACCEPTABLE_ADDRESSES = 0x0028,
        /// UNEXPECTED_NAT_DETECTED (41): Error: a NAT was detected where none is allowed (RFC
        /// 4555).
        UNEXPECTED_NAT_DETECTED = 0x0029,
        /// USE_ASSIGNED_HOA (42): Error: use the assigned home address (RFC 5026).
        USE_ASSIGNED_HOA = 0x002a,
        /// TEMPORARY_FAILURE (43): Error: try again later, e.g. during a rekey collision (§2.25).
        TEMPORARY_FAILURE = 0x002b,
        /// CHILD_SA_NOT_FOUND (44): Error: the Child SA to rekey does not exist (§2.25).
        CHILD_SA_NOT_FOUND = 0x002c,
        /// INVALID_GROUP_ID (45): Error: unknown group (RFC 9838).
        INVALID_GROUP_ID = 0x002d,
        /// AUTHORIZATION_FAILED (46): Error: not authorized for the group (RFC 9838).
        AUTHORIZATION_FAILED = 0x002e,
        /// STATE_NOT_FOUND (47): Error: the state of a multiple key exchange was lost (RFC 9370).
        STATE_NOT_FOUND = 0x002f,
        /// TS_MAX_QUEUE (48): Error: no more per-resource Child SAs (RFC 9611).
        TS_MAX_QUEUE = 0x0030,
        /// INITIAL_CONTACT (16384): Status: this is the only IKE SA with the peer (§2.4).
        INITIAL_CONTACT = 0x4000,
        /// SET_WINDOW_SIZE (16385): Status: the sender's request window size (§2.3).
        SET_WINDOW_SIZE = 0x4001,
        /// ADDITIONAL_TS_POSSIBLE (16386): Status: the selectors were narrowed by policy (§2.9).
        ADDITIONAL_TS_POSSIBLE = 0x4002,
        /// IPCOMP_SUPPORTED (16387): Status: IPComp is supported, with CPI and transform (§2.22).
        IPCOMP_SUPPORTED = 0x4003,
        /// NAT_DETECTION_SOURCE_IP (16388): Status: hash of SPIs, source address and port (§2.23).
        NAT_DETECTION_SOURCE_IP = 0x4004,
        /// NAT_DETECTION_DESTINATION_IP (16389): Status: hash of SPIs, destination address and port
        /// (§2.23).
        NAT_DETECTION_DESTINATION_IP = 0x4005,
        /// COOKIE (16390): Status: the responder's stateless cookie (§2.6).
        COOKIE = 0x4006,
        /// USE_TRANSPORT_MODE (16391): Status: transport mode requested or accepted (§1.3.1).
        USE_TRANSPORT_MODE = 0x4007,
        /// HTTP_CERT_LOOKUP_SUPPORTED (16392): Status: hash-and-URL certificates can be fetched
        /// (§3.6).
        HTTP_CERT_LOOKUP_SUPPORTED = 0x4008,
        /// REKEY_SA (16393): Status: this CREATE_CHILD_SA rekeys the SA named by the SPI (§1.3.3).
        REKEY_SA = 0x4009,
        /// ESP_TFC_PADDING_NOT_SUPPORTED (16394): Status: TFC padding is not accepted (§1.3.1).
        ESP_TFC_PADDING_NOT_SUPPORTED = 0x400a,
        /// NON_FIRST_FRAGMENTS_ALSO (16395): Status: non-first fragments are sent on this SA
        /// (§1.3.1).
        NON_FIRST_FRAGMENTS_ALSO = 0x400b,
        /// MOBIKE_SUPPORTED (16396): Status: MOBIKE is supported (RFC 4555).
        MOBIKE_SUPPORTED = 0x400c,
        /// ADDITIONAL_IP4_ADDRESS (16397): Status: an additional IPv4 address (RFC 4555).
        ADDITIONAL_IP4_ADDRESS = 0x400d,
        /// ADDITIONAL_IP6_ADDRESS (16398): Status: an additional IPv6 address (RFC 4555).
        ADDITIONAL_IP6_ADDRESS = 0x400e,
        /// NO_ADDITIONAL_ADDRESSES (16399): Status: no additional addresses (RFC 4555).
        NO_ADDITIONAL_ADDRESSES = 0x400f,
        /// UPDATE_SA_ADDRESSES (16400): Status: move the SAs to this message's addresses (RFC
        /// 4555).
        UPDATE_SA_ADDRESSES = 0x4010,
        /// COOKIE2 (16401): Status: return routability check cookie (RFC 4555).
        COOKIE2 = 0x4011,
        /// NO_NATS_ALLOWED (16402): Status: NAT traversal is not allowed (RFC 4555).
        NO_NATS_ALLOWED = 0x4012,
        /// AUTH_LIFETIME (16403): Status: reauthenticate within this many seconds (RFC 4478).
        AUTH_LIFETIME = 0x4013,
        /// MULTIPLE_AUTH_SUPPORTED (16404): Status: multiple authentication exchanges are supported
        /// (RFC 4739).
        MULTIPLE_AUTH_SUPPORTED = 0x4014,
        /// ANOTHER_AUTH_FOLLOWS (16405): Status: another authentication round follows (RFC 4739).
        ANOTHER_AUTH_FOLLOWS = 0x4015,
        /// REDIRECT_SUPPORTED (16406): Status: redirects are supported (RFC 5685).
        REDIRECT_SUPPORTED = 0x4016,
        /// REDIRECT (16407): Status: connect to another gateway (RFC 5685).
        REDIRECT = 0x4017,
        /// REDIRECTED_FROM (16408): Status: this connection was redirected (RFC 5685).
        REDIRECTED_FROM = 0x4018,
        /// TICKET_LT_OPAQUE (16409): Status: a session resumption ticket with lifetime (RFC 5723).
        TICKET_LT_OPAQUE = 0x4019,
        /// TICKET_REQUEST (16410): Status: a session resumption ticket is requested (RFC 5723).
        TICKET_REQUEST = 0x401a,
        /// TICKET_ACK (16411): Status: the ticket request is accepted (RFC 5723).
        TICKET_ACK = 0x401b,
        /// TICKET_NACK (16412): Status: the ticket request is refused (RFC 5723).
        TICKET_NACK = 0x401c,
        /// TICKET_OPAQUE (16413): Status: a session resumption ticket (RFC 5723).
        TICKET_OPAQUE = 0x401d,
        /// LINK_ID (16414): Status: IPv6 link identifier (RFC 5739).
        LINK_ID = 0x401e,
        /// USE_WESP_MODE (16415): Status: use wrapped ESP (RFC 5840).
        USE_WESP_MODE = 0x401f,
        /// ROHC_SUPPORTED (16416): Status: robust header compression is supported (RFC 5857).
        ROHC_SUPPORTED = 0x4020,
        /// EAP_ONLY_AUTHENTICATION (16417): Status: EAP-only authentication is acceptable (RFC
        /// 5998).
        EAP_ONLY_AUTHENTICATION = 0x4021,
        /// CHILDLESS_IKEV2_SUPPORTED (16418): Status: IKE_AUTH without a Child SA is supported (RFC
        /// 6023).
        CHILDLESS_IKEV2_SUPPORTED = 0x4022,
        /// QUICK_CRASH_DETECTION (16419): Status: a quick crash detection token (RFC 6290).
        QUICK_CRASH_DETECTION = 0x4023,
        /// IKEV2_MESSAGE_ID_SYNC_SUPPORTED (16420): Status: message ID synchronization is supported
        /// (RFC 6311).
        IKEV2_MESSAGE_ID_SYNC_SUPPORTED = 0x4024,
        /// IPSEC_REPLAY_COUNTER_SYNC_SUPPORTED (16421): Status: replay counter synchronization is
        /// supported (RFC 6311).
        IPSEC_REPLAY_COUNTER_SYNC_SUPPORTED = 0x4025,
        /// IKEV2_MESSAGE_ID_SYNC (16422): Status: synchronize message IDs (RFC 6311).
        IKEV2_MESSAGE_ID_SYNC = 0x4026,
        /// IPSEC_REPLAY_COUNTER_SYNC (16423): Status: synchronize replay counters (RFC 6311).
        IPSEC_REPLAY_COUNTER_SYNC = 0x4027,
        /// SECURE_PASSWORD_METHODS (16424): Status: supported secure password methods (RFC 6467).
        SECURE_PASSWORD_METHODS = 0x4028,
        /// PSK_PERSIST (16425): Status: keep a persistent PSK (RFC 6631).
        PSK_PERSIST = 0x4029,
        /// PSK_CONFIRM (16426): Status: confirm the persistent PSK (RFC 6631).
        PSK_CONFIRM = 0x402a,
        /// ERX_SUPPORTED (16427): Status: EAP re-authentication is supported (RFC 6867).
        ERX_SUPPORTED = 0x402b,
        /// IFOM_CAPABILITY (16428): Status: IP flow mobility capability (3GPP TS 24.303).
        IFOM_CAPABILITY = 0x402c,
        /// SENDER_REQUEST_ID (16429): Status: sender request ID (G-IKEv2 drafts).
        SENDER_REQUEST_ID = 0x402d,
        /// IKEV2_FRAGMENTATION_SUPPORTED (16430): Status: IKE fragmentation is supported (RFC 7383
        /// §2.3).
        IKEV2_FRAGMENTATION_SUPPORTED = 0x402e,
        /// SIGNATURE_HASH_ALGORITHMS (16431): Status: supported hash algorithms, two octets each
        /// (RFC 7427 §4).
        SIGNATURE_HASH_ALGORITHMS = 0x402f,
        /// CLONE_IKE_SA_SUPPORTED (16432): Status: IKE SA cloning is supported (RFC 7791).
        CLONE_IKE_SA_SUPPORTED = 0x4030,
        /// CLONE_IKE_SA (16433): Status: clone the IKE SA (RFC 7791).
        CLONE_IKE_SA = 0x4031,
        /// PUZZLE (16434): Status: a client puzzle to solve (RFC 8019).
        PUZZLE = 0x4032,
        /// USE_PPK (16435): Status: a postquantum preshared key is to be used (RFC 8784).
        USE_PPK = 0x4033,
        /// PPK_IDENTITY (16436): Status: the postquantum preshared key's identity (RFC 8784).
        PPK_IDENTITY = 0x4034,
        /// NO_PPK_AUTH (16437): Status: AUTH computed without the PPK (RFC 8784).
        NO_PPK_AUTH = 0x4035,
        /// INTERMEDIATE_EXCHANGE_SUPPORTED (16438): Status: IKE_INTERMEDIATE is supported (RFC
        /// 9242).
        INTERMEDIATE_EXCHANGE_SUPPORTED = 0x4036,
        /// IP4_ALLOWED (16439): Status: IPv4 is allowed in the tunnel (RFC 8983).
        IP4_ALLOWED = 0x4037,
        /// IP6_ALLOWED (16440): Status: IPv6 is allowed in the tunnel (RFC 8983).
        IP6_ALLOWED = 0x4038,
        /// ADDITIONAL_KEY_EXCHANGE (16441): Status: links the follow-up key exchanges (RFC 9370).
        ADDITIONAL_KEY_EXCHANGE = 0x4039,
        /// USE_AGGFRAG (16442): Status: IP-TFS aggregation and fragmentation mode (RFC 9347).
        USE_AGGFRAG = 0x403a,
        /// SA_RESOURCE_INFO (16444): Status: per-resource Child SA information (RFC 9611).
        SA_RESOURCE_INFO = 0x403c,
    }
}

impl NotifyType {
    /// Whether this is an error type (below 16384, §3.10.1), as opposed to a status type.
    pub fn is_error(self) -> bool {
        self.0 < 0x4000
    }
}

/// Notify payload, N (RFC 7296 §3.10): an error or status report, optionally about one SA.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  Protocol ID  |   SPI Size    |      Notify Message Type      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                Security Parameter Index (SPI)                 ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |
/// ~                       Notification Data                       ~
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The protocol is "sent as zero and ignored on receipt" when there is no SPI (§3.10), so
/// it is kept as received rather than checked against the SPI size.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notify {
    /// The kind of SA the SPI names (ESP or AH), or NONE without an SPI.
    pub protocol: ProtocolId,
    /// The SPI the notification is about; empty for most types (§3.10).
    pub spi: Vec<u8>,
    /// The notify message type.
    pub ty: NotifyType,
    /// The type-specific data.
    pub data: Vec<u8>,
}

impl Notify {
    /// A notification about no particular SA.
    pub fn new(ty: NotifyType, data: Vec<u8>) -> Self {
        Self { protocol: ProtocolId::NONE, spi: Vec::new(), ty, data }
    }

    /// A notification about a Child SA, e.g. REKEY_SA or INVALID_SELECTORS (§3.10.1).
    pub fn for_child(protocol: ProtocolId, spi: u32, ty: NotifyType, data: Vec<u8>) -> Self {
        Self { protocol, spi: spi.to_be_bytes().to_vec(), ty, data }
    }

    /// The four-octet SPI of a Child SA notification as a number.
    pub fn child_spi(&self) -> Option<u32> {
        <[u8; 4]>::try_from(self.spi.as_slice()).ok().map(u32::from_be_bytes)
    }

    /// The notification the peer gets for a message this codec rejected (§2.5, §2.21):
    /// UNSUPPORTED_CRITICAL_PAYLOAD with the payload type as data, INVALID_MAJOR_VERSION,
    /// or INVALID_SYNTAX for everything else. Whether it is sent or the message silently
    /// dropped (e.g. before the IKE SA is authenticated, §2.21) is the engine's decision.
    pub fn for_decode_error(error: &Error) -> Self {
        match error {
            Error::UnsupportedCriticalPayload { payload_type } => {
                Self::new(NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, vec![*payload_type])
            }
            Error::InvalidMajorVersion { .. } => Self::new(NotifyType::INVALID_MAJOR_VERSION, Vec::new()),
            _ => Self::new(NotifyType::INVALID_SYNTAX, Vec::new()),
        }
    }

    /// The hash algorithms of a SIGNATURE_HASH_ALGORITHMS notification (RFC 7427 §4), or
    /// `None` for another type or data of odd length.
    pub fn hash_algorithms(&self) -> Option<Vec<HashAlgorithm>> {
        if self.ty != NotifyType::SIGNATURE_HASH_ALGORITHMS || !self.data.len().is_multiple_of(2) {
            return None;
        }
        let pairs = self.data.chunks_exact(2).filter_map(|p| <[u8; 2]>::try_from(p).ok());
        Some(pairs.map(|p| HashAlgorithm(u16::from_be_bytes(p))).collect())
    }

    /// A SIGNATURE_HASH_ALGORITHMS notification listing `algorithms` (RFC 7427 §4).
    pub fn signature_hash_algorithms(algorithms: &[HashAlgorithm]) -> Self {
        let data = algorithms.iter().flat_map(|a| a.0.to_be_bytes()).collect();
        Self::new(NotifyType::SIGNATURE_HASH_ALGORITHMS, data)
    }
}

impl Body for Notify {
    const WHAT: &'static str = "Notify payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let protocol = ProtocolId(r.u8(Self::WHAT)?);
        let spi_size = usize::from(r.u8(Self::WHAT)?);
        let ty = NotifyType(r.u16(Self::WHAT)?);
        let spi = r.take(spi_size, "Notify SPI")?.to_vec();
        Ok(Self { protocol, spi, ty, data: r.rest().to_vec() })
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        w.u8(self.protocol.0);
        w.u8(fit(self.spi.len(), "Notify SPI")?);
        w.u16(self.ty.0);
        w.bytes(&self.spi);
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_round_trip, decode_one, encode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn notify_types_carry_the_rfc_values() {
        let errors = [
            (NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, 1),
            (NotifyType::INVALID_IKE_SPI, 4),
            (NotifyType::INVALID_MAJOR_VERSION, 5),
            (NotifyType::INVALID_SYNTAX, 7),
            (NotifyType::INVALID_MESSAGE_ID, 9),
            (NotifyType::INVALID_SPI, 11),
            (NotifyType::NO_PROPOSAL_CHOSEN, 14),
            (NotifyType::INVALID_KE_PAYLOAD, 17),
            (NotifyType::AUTHENTICATION_FAILED, 24),
            (NotifyType::SINGLE_PAIR_REQUIRED, 34),
            (NotifyType::NO_ADDITIONAL_SAS, 35),
            (NotifyType::INTERNAL_ADDRESS_FAILURE, 36),
            (NotifyType::FAILED_CP_REQUIRED, 37),
            (NotifyType::TS_UNACCEPTABLE, 38),
            (NotifyType::INVALID_SELECTORS, 39),
            (NotifyType::TEMPORARY_FAILURE, 43),
            (NotifyType::CHILD_SA_NOT_FOUND, 44),
        ];
        let status = [
            (NotifyType::INITIAL_CONTACT, 16384),
            (NotifyType::SET_WINDOW_SIZE, 16385),
            (NotifyType::ADDITIONAL_TS_POSSIBLE, 16386),
            (NotifyType::IPCOMP_SUPPORTED, 16387),
            (NotifyType::NAT_DETECTION_SOURCE_IP, 16388),
            (NotifyType::NAT_DETECTION_DESTINATION_IP, 16389),
            (NotifyType::COOKIE, 16390),
            (NotifyType::USE_TRANSPORT_MODE, 16391),
            (NotifyType::HTTP_CERT_LOOKUP_SUPPORTED, 16392),
            (NotifyType::REKEY_SA, 16393),
            (NotifyType::ESP_TFC_PADDING_NOT_SUPPORTED, 16394),
            (NotifyType::NON_FIRST_FRAGMENTS_ALSO, 16395),
            (NotifyType::MOBIKE_SUPPORTED, 16396),
            (NotifyType::EAP_ONLY_AUTHENTICATION, 16417),
            (NotifyType::IKEV2_FRAGMENTATION_SUPPORTED, 16430),
            (NotifyType::SIGNATURE_HASH_ALGORITHMS, 16431),
        ];
        for (ty, value) in errors {
            assert_eq!(ty.0, value, "{ty:?}");
            assert!(ty.is_error());
        }
        for (ty, value) in status {
            assert_eq!(ty.0, value, "{ty:?}");
            assert!(!ty.is_error());
        }
        assert_eq!(format!("{:?}", NotifyType(16388)), "NAT_DETECTION_SOURCE_IP");
        assert_eq!(format!("{:?}", NotifyType(0x7fff)), "Unknown(0x7fff)");
    }

    #[test]
    fn status_notify_without_spi_round_trips() {
        let bytes = hex!("00 00 000c 00 00 4006 01020304");
        let expected = Payload::Notify(Notify::new(NotifyType::COOKIE, hex!("01020304").to_vec()));
        assert_round_trip(PayloadType::NOTIFY, &bytes, &expected);
    }

    #[test]
    fn rekey_sa_notify_with_spi_round_trips() {
        let bytes = hex!("00 00 000c 03 04 4009 c0ffee01");
        let notify = Notify::for_child(ProtocolId::ESP, 0xc0ff_ee01, NotifyType::REKEY_SA, vec![]);
        assert_eq!(notify.child_spi(), Some(0xc0ff_ee01));
        assert_round_trip(PayloadType::NOTIFY, &bytes, &Payload::Notify(notify));
    }

    #[test]
    fn spi_running_past_the_payload_is_truncated() {
        assert!(matches!(
            decode_one(PayloadType::NOTIFY, &hex!("00 00 000a 03 04 4009 c0ff")),
            Err(Error::Truncated { what: "Notify SPI", .. })
        ));
    }

    #[test]
    fn oversized_spi_cannot_be_encoded() {
        let notify = Notify { spi: vec![0; 256], ..Notify::new(NotifyType::INVALID_SELECTORS, vec![]) };
        assert!(matches!(
            encode_one(Payload::Notify(notify)),
            Err(Error::TooLong { what: "Notify SPI", len: 256 })
        ));
    }

    #[test]
    fn signature_hash_algorithms_decode_and_build() {
        let algorithms = [HashAlgorithm::SHA2_256, HashAlgorithm::SHA2_384, HashAlgorithm(0x99)];
        let notify = Notify::signature_hash_algorithms(&algorithms);
        assert_eq!(notify.data, hex!("0002 0003 0099"));
        assert_eq!(notify.hash_algorithms(), Some(algorithms.to_vec()));
        let odd = Notify::new(NotifyType::SIGNATURE_HASH_ALGORITHMS, vec![0, 2, 0]);
        assert_eq!(odd.hash_algorithms(), None);
    }

    #[test]
    fn decode_errors_map_to_the_notification_the_peer_gets() {
        let critical = Error::UnsupportedCriticalPayload { payload_type: 0x99 };
        assert_eq!(
            Notify::for_decode_error(&critical),
            Notify::new(NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, vec![0x99])
        );
        let version = Error::InvalidMajorVersion { version: 3 };
        assert_eq!(Notify::for_decode_error(&version).ty, NotifyType::INVALID_MAJOR_VERSION);
        let syntax = Error::TrailingBytes { what: "x", count: 1 };
        assert_eq!(Notify::for_decode_error(&syntax).ty, NotifyType::INVALID_SYNTAX);
    }
}
