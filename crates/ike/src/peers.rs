//! The authenticated IKE SAs of each (connection, peer identity): what a peer's
//! INITIAL_CONTACT replaces (RFC 7296 §2.4) is found without visiting every SA. Most peers
//! send INITIAL_CONTACT on their first IKE SA, so a walk there made each new tunnel cost
//! more the more tunnels were held.

use std::collections::{HashMap, HashSet};

use wire::ike::Identification;

/// Which peer an SA authenticated: its connection's name and the peer's identity.
pub(crate) type PeerKey = (String, Identification);

/// SAs (the endpoint's `u64` keys) by the peer they authenticated.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    by_peer: HashMap<PeerKey, HashSet<u64>>,
    of: HashMap<u64, PeerKey>,
}

impl Peers {
    /// Records which peer `id` authenticated, or that it has none (also when it is gone).
    pub(crate) fn set(&mut self, id: u64, peer: Option<PeerKey>) {
        if self.of.get(&id) == peer.as_ref() {
            return;
        }
        if let Some(old) = self.of.remove(&id) {
            if let Some(ids) = self.by_peer.get_mut(&old) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_peer.remove(&old);
                }
            }
        }
        if let Some(key) = peer {
            self.by_peer.entry(key.clone()).or_default().insert(id);
            self.of.insert(id, key);
        }
    }

    /// The SAs that authenticated `peer`, in no particular order.
    pub(crate) fn of_peer(&self, peer: &PeerKey) -> Vec<u64> {
        self.by_peer.get(peer).map(|ids| ids.iter().copied().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ike::IdType;

    fn key(conn: &str, id: &str) -> PeerKey {
        (conn.to_owned(), Identification::new(IdType::FQDN, id.as_bytes().to_vec()))
    }

    #[test]
    fn finds_the_sas_of_one_peer_and_forgets_them() {
        let mut peers = Peers::default();
        peers.set(1, Some(key("a", "site1")));
        peers.set(2, Some(key("a", "site1")));
        peers.set(3, Some(key("a", "site2")));
        peers.set(4, Some(key("b", "site1")));
        peers.set(5, None);
        let mut site1 = peers.of_peer(&key("a", "site1"));
        site1.sort_unstable();
        assert_eq!(site1, vec![1, 2]);
        assert_eq!(peers.of_peer(&key("b", "site1")), vec![4]);
        // A new peer for an SA moves it; None forgets it.
        peers.set(2, Some(key("a", "site2")));
        peers.set(1, None);
        assert_eq!(peers.of_peer(&key("a", "site1")), Vec::<u64>::new());
        let mut site2 = peers.of_peer(&key("a", "site2"));
        site2.sort_unstable();
        assert_eq!(site2, vec![2, 3]);
        peers.set(2, None);
        peers.set(3, None);
        peers.set(4, None);
        assert!(peers.by_peer.is_empty() && peers.of.is_empty());
    }
}
