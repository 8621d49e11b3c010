//! NAT detection (RFC 7296 §2.23): NAT_DETECTION_SOURCE_IP and _DESTINATION_IP.
//!
//! Each notification carries SHA-1(SPIi | SPIr | IP address | port) of the sender's source
//! or intended destination, with the SPIs of the message's header. A receiver that gets a
//! different hash for the address it sees learns that a NAT sits on that path. SHA-1 is
//! what the RFC fixes; nothing secret is hashed.

use core::net::{IpAddr, SocketAddr};

use sha1::{Digest, Sha1};
use wire::ike::{Message, Notify, NotifyType, Payload};

/// The NAT_DETECTION hash of one address.
pub fn hash(spi_i: u64, spi_r: u64, addr: SocketAddr) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(spi_i.to_be_bytes());
    h.update(spi_r.to_be_bytes());
    match addr.ip() {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    h.update(addr.port().to_be_bytes());
    h.finalize().into()
}

/// The two notifications for a message from `local` to `remote`. With `fake_source`
/// (strongSwan's `encap = yes`) the source hash is made not to match, so that the peer
/// sees a NAT and both sides use UDP encapsulation.
pub fn notifies(
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
    fake_source: bool,
) -> [Payload; 2] {
    let mut source = hash(spi_i, spi_r, local);
    if fake_source {
        // Any value other than the real hash will do; flipping bits keeps it deterministic.
        for b in &mut source {
            *b ^= 0xff;
        }
    }
    [
        Payload::Notify(Notify::new(NotifyType::NAT_DETECTION_SOURCE_IP, source.to_vec())),
        Payload::Notify(Notify::new(
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            hash(spi_i, spi_r, remote).to_vec(),
        )),
    ]
}

/// What NAT detection found, from this side's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NatState {
    /// We are behind a NAT: the peer saw another address than ours.
    pub local_behind_nat: bool,
    /// The peer is behind a NAT (or fakes one): its source hash does not match.
    pub remote_behind_nat: bool,
    /// Both sides sent the notifications, so the peer supports NAT traversal.
    pub supported: bool,
}

impl NatState {
    /// Whether a NAT is anywhere on the path: ESP then goes in UDP (RFC 3948) and IKE on
    /// port 4500.
    pub fn any(&self) -> bool {
        self.local_behind_nat || self.remote_behind_nat
    }
}

/// Evaluates a received message's notifications; `local` is where it arrived, `remote`
/// where it came from. Without the notifications no NAT is assumed (the peer does not do
/// NAT traversal).
pub fn detect(message: &Message, local: SocketAddr, remote: SocketAddr) -> NatState {
    let (spi_i, spi_r) = (message.header.initiator_spi, message.header.responder_spi);
    let sources: Vec<&[u8]> = message
        .notifies()
        .filter(|n| n.ty == NotifyType::NAT_DETECTION_SOURCE_IP)
        .map(|n| n.data.as_slice())
        .collect();
    let destination = message.notify(NotifyType::NAT_DETECTION_DESTINATION_IP).map(|n| n.data.as_slice());
    let (false, Some(destination)) = (sources.is_empty(), destination) else {
        return NatState::default();
    };
    // A multi-homed peer may send several source hashes; any match means no NAT.
    let remote_hash = hash(spi_i, spi_r, remote);
    NatState {
        local_behind_nat: destination != hash(spi_i, spi_r, local).as_slice(),
        remote_behind_nat: !sources.contains(&remote_hash.as_slice()),
        supported: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ike::{ExchangeType, HeaderFlags, IkeHeader};

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hash_covers_spis_address_and_port() {
        let a = hash(1, 2, addr("198.18.0.1:500"));
        assert_ne!(a, hash(1, 3, addr("198.18.0.1:500")));
        assert_ne!(a, hash(1, 2, addr("198.18.0.1:4500")));
        assert_ne!(a, hash(1, 2, addr("198.18.0.2:500")));
        assert_eq!(hash(1, 2, addr("[2001:db8::1]:500")).len(), 20);
    }

    #[test]
    fn detection_sees_a_rewritten_source_and_a_fake() {
        let (i, r, nat) = (addr("198.18.0.1:500"), addr("198.18.0.2:500"), addr("198.18.9.9:1024"));
        let header = IkeHeader::new(7, 0, ExchangeType::IKE_SA_INIT, HeaderFlags::INITIATOR, 0);
        let message = Message::new(header, notifies(7, 0, i, r, false));
        assert_eq!(
            detect(&message, r, i),
            NatState { local_behind_nat: false, remote_behind_nat: false, supported: true }
        );
        let through_nat = detect(&message, r, nat);
        assert!(through_nat.remote_behind_nat && !through_nat.local_behind_nat && through_nat.any());
        let faked = Message::new(header, notifies(7, 0, i, r, true));
        assert!(detect(&faked, r, i).remote_behind_nat);
        assert_eq!(detect(&Message::new(header, []), r, i), NatState::default());
    }
}
