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
    /// Runs for every datagram an SA handles: copies the key only when it changed.
    pub(crate) fn set(&mut self, id: u64, peer: Option<(&str, &Identification)>) {
        let same = match (self.of.get(&id), peer) {
            (Some((conn, who)), Some((c, w))) => conn == c && who == w,
            (None, None) => true,
            _ => false,
        };
        if same {
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
        if let Some((conn, who)) = peer {
            let key: PeerKey = (conn.to_owned(), who.clone());
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

    fn set(peers: &mut Peers, id: u64, peer: Option<PeerKey>) {
        peers.set(id, peer.as_ref().map(|(c, w)| (c.as_str(), w)));
    }

    #[test]
    fn finds_the_sas_of_one_peer_and_forgets_them() {
        let mut peers = Peers::default();
        set(&mut peers, 1, Some(key("a", "site1")));
        set(&mut peers, 2, Some(key("a", "site1")));
        set(&mut peers, 3, Some(key("a", "site2")));
        set(&mut peers, 4, Some(key("b", "site1")));
        set(&mut peers, 5, None);
        let mut site1 = peers.of_peer(&key("a", "site1"));
        site1.sort_unstable();
        assert_eq!(site1, vec![1, 2]);
        assert_eq!(peers.of_peer(&key("b", "site1")), vec![4]);
        // A new peer for an SA moves it; None forgets it.
        set(&mut peers, 2, Some(key("a", "site2")));
        set(&mut peers, 1, None);
        assert_eq!(peers.of_peer(&key("a", "site1")), Vec::<u64>::new());
        let mut site2 = peers.of_peer(&key("a", "site2"));
        site2.sort_unstable();
        assert_eq!(site2, vec![2, 3]);
        set(&mut peers, 2, None);
        set(&mut peers, 3, None);
        set(&mut peers, 4, None);
        assert!(peers.by_peer.is_empty() && peers.of.is_empty());
    }
}
