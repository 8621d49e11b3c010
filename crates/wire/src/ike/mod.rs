//! IKEv2 message codec (RFC 7296, with RFC 7383 fragments): bytes to typed messages and
//! back, and nothing else.
//!
//! - [`Message::decode`] parses one datagram (UDP payload, without the port-4500 non-ESP
//!   marker) into an [`IkeHeader`] and a chain of [`PayloadEntry`]s, each a typed
//!   [`Payload`] with its generic-header [`PayloadFlags`]. [`Message::encode`] is its exact
//!   inverse: whatever `decode` accepts re-encodes byte for byte, because lengths and Next
//!   Payload fields are derived and every field the RFC says to ignore on receipt is kept.
//! - The Encrypted (SK) and Encrypted Fragment (SKF) payloads stay opaque: the enclave
//!   verifies and decrypts them. The engine then calls [`decode_chain`] on the plaintext,
//!   with [`Encrypted::first_inner`] as the first payload type; [`encode_chain`] makes the
//!   plaintext to encrypt.
//! - Errors name the culprit. Two carry what the peer must be told (§2.5):
//!   [`Error::InvalidMajorVersion`](crate::Error::InvalidMajorVersion) and
//!   [`Error::UnsupportedCriticalPayload`](crate::Error::UnsupportedCriticalPayload); the
//!   rest mean INVALID_SYNTAX. [`Notify::for_decode_error`] maps them, and
//!   [`IkeHeader::peek`] reads the header needed to answer.
//! - IANA registries are newtypes with associated consts (`NotifyType::COOKIE`), so values
//!   this build does not know round-trip and print as `Unknown(0x..)`.
//!
//! Decoding never panics and never allocates more than the input's size warrants: every
//! structure is read through a length-limited reader, chains are walked iteratively, and
//! counts are checked against the bytes actually present. What needs keys or negotiated
//! state (AUTH octets, KE length per group, SK decryption, fragment reassembly) is the
//! engine's or the enclave's.
//!
//! [`Message::decode`]: crate::ike::Message::decode
//! [`Message::encode`]: crate::ike::Message::encode
//! [`IkeHeader`]: crate::ike::IkeHeader
//! [`IkeHeader::peek`]: crate::ike::IkeHeader::peek
//! [`PayloadEntry`]: crate::ike::PayloadEntry
//! [`Payload`]: crate::ike::Payload
//! [`PayloadFlags`]: crate::ike::PayloadFlags
//! [`decode_chain`]: crate::ike::decode_chain
//! [`encode_chain`]: crate::ike::encode_chain
//! [`Encrypted::first_inner`]: crate::ike::Encrypted::first_inner
//! [`Notify::for_decode_error`]: crate::ike::Notify::for_decode_error

mod auth;
mod cert;
mod cp;
mod delete;
mod eap;
mod encrypted;
mod header;
mod id;
mod ke;
mod macros;
mod message;
mod nonce;
mod notify;
mod payload;
mod reader;
mod sa;
mod transform;
mod ts;
mod vendor;
mod writer;

#[cfg(fuzzing)]
pub mod fuzzing;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_util;

pub use auth::{AuthMethod, Authentication, HashAlgorithm};
pub use cert::{CertEncoding, Certificate, CertificateRequest};
pub use cp::{CfgType, ConfigAttribute, ConfigAttributeType, Configuration};
pub use delete::Delete;
pub use eap::{Eap, EapCode, EapType};
pub use encrypted::{Encrypted, EncryptedFragment};
pub use header::{ExchangeType, HeaderFlags, IkeHeader, PeekedHeader};
pub use id::{IdType, Identification};
pub use ke::KeyExchange;
pub use message::Message;
pub use nonce::Nonce;
pub use notify::{Notify, NotifyType};
pub use payload::{decode_chain, encode_chain, Payload, PayloadEntry, PayloadFlags, PayloadType};
pub use sa::{Proposal, ProtocolId, Sa, Transform};
pub use transform::{AttributeType, AttributeValue, DhGroup, EncrId, EsnId, IntegId, PrfId};
pub use transform::{TransformAttribute, TransformId, TransformType};
pub use ts::{AddressRange, TrafficSelector, TrafficSelectors, TsType};
pub use vendor::VendorId;
