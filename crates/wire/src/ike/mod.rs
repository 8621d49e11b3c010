//! IKEv2 message codec (RFC 7296), filled in by the IKE codec work.
