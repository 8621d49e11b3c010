//! The security policy database (RFC 4301 §4.4.1): which outbound traffic is protected by
//! which SA, sent in the clear, or discarded.
//!
//! Policies are ordered by `priority`, lowest value first, and among equal priorities by
//! insertion order; the first policy that matches wins (RFC 4301 §4.4.1: "the SPD is an
//! ordered database"). A packet that no policy matches is discarded. Lookup is a linear
//! scan, allocation-free; a tenant has tens of policies, not thousands.

use crate::sad::OutboundSaId;
use crate::selector::{AddressRange, FiveTuple, PortRange};

/// What a matching policy does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyAction {
    /// PROTECT: encapsulate with this outbound SA.
    Protect(OutboundSaId),
    /// BYPASS: forward in the clear.
    Bypass,
    /// DISCARD: drop.
    Discard,
}

/// The packet fields a policy selects on, oriented outbound (local = inner source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicySelector {
    /// Addresses on the protected (local) side.
    pub local: AddressRange,
    /// Addresses on the remote side.
    pub remote: AddressRange,
    /// IP protocol; 0 matches any.
    pub protocol: u8,
    /// Local ports (or ICMP type/code).
    pub local_ports: PortRange,
    /// Remote ports (or ICMP type/code).
    pub remote_ports: PortRange,
}

impl PolicySelector {
    /// All traffic between two address ranges.
    pub const fn between(local: AddressRange, remote: AddressRange) -> Self {
        Self { local, remote, protocol: 0, local_ports: PortRange::ANY, remote_ports: PortRange::ANY }
    }

    /// Whether a packet from `local` to `remote` matches.
    pub fn matches(&self, t: &FiveTuple) -> bool {
        self.local.contains(t.src)
            && self.remote.contains(t.dst)
            && (self.protocol == 0 || self.protocol == t.protocol.0)
            && self.local_ports.matches(t.src_port)
            && self.remote_ports.matches(t.dst_port)
    }
}

/// One SPD entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Lower values are consulted first.
    pub priority: u32,
    /// What traffic it covers.
    pub selector: PolicySelector,
    /// What to do with it.
    pub action: PolicyAction,
}

/// An identifier of an installed policy, for removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyId(pub u64);

/// The ordered policy list.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    /// Sorted by (priority, id): the id is the insertion order.
    policies: Vec<(PolicyId, Policy)>,
    next_id: u64,
}

impl Spd {
    /// An empty SPD: everything is discarded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a policy after every policy of lower or equal priority value.
    pub fn insert(&mut self, policy: Policy) -> PolicyId {
        let id = PolicyId(self.next_id);
        self.next_id += 1;
        let at = self.policies.partition_point(|(_, p)| p.priority <= policy.priority);
        self.policies.insert(at, (id, policy));
        id
    }

    /// Removes a policy.
    pub fn remove(&mut self, id: PolicyId) -> Option<Policy> {
        let at = self.policies.iter().position(|(i, _)| *i == id)?;
        Some(self.policies.remove(at).1)
    }

    /// Points every policy that protects with `from` at `to` (make-before-break rekeying:
    /// install the new SA, retarget, then remove the old one). Returns how many changed.
    pub fn retarget(&mut self, from: OutboundSaId, to: OutboundSaId) -> usize {
        let mut n = 0;
        for (_, p) in &mut self.policies {
            if p.action == PolicyAction::Protect(from) {
                p.action = PolicyAction::Protect(to);
                n += 1;
            }
        }
        n
    }

    /// The first policy (by priority) that matches an outbound packet.
    pub fn lookup(&self, t: &FiveTuple) -> Option<&Policy> {
        self.policies.iter().map(|(_, p)| p).find(|p| p.selector.matches(t))
    }

    /// The first policy that matches an inbound packet *not* carried by ESP, for the
    /// RFC 4301 §5.2 check that protected traffic does not arrive in the clear: the tuple
    /// is turned around (its destination is local).
    pub fn lookup_inbound(&self, t: &FiveTuple) -> Option<&Policy> {
        let flipped = FiveTuple {
            src: t.dst,
            dst: t.src,
            protocol: t.protocol,
            src_port: t.dst_port,
            dst_port: t.src_port,
        };
        self.lookup(&flipped)
    }

    /// The policies in lookup order.
    pub fn iter(&self) -> impl Iterator<Item = (PolicyId, &Policy)> {
        self.policies.iter().map(|(i, p)| (*i, p))
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::IpProtocol;

    fn tuple(src: &str, dst: &str, protocol: u8, sport: u16, dport: u16) -> FiveTuple {
        FiveTuple {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            protocol: IpProtocol(protocol),
            src_port: Some(sport),
            dst_port: Some(dport),
        }
    }

    fn policy(priority: u32, local: &str, remote: &str, action: PolicyAction) -> Policy {
        Policy {
            priority,
            selector: PolicySelector::between(local.parse().unwrap(), remote.parse().unwrap()),
            action,
        }
    }

    #[test]
    fn first_match_by_priority_then_insertion_order() {
        let mut spd = Spd::new();
        spd.insert(policy(100, "198.18.0.0/16", "198.19.0.0/16", PolicyAction::Protect(OutboundSaId(1))));
        let bypass = spd.insert(policy(10, "198.18.0.0/24", "198.19.0.0/24", PolicyAction::Bypass));
        spd.insert(policy(10, "198.18.0.0/24", "198.19.0.0/24", PolicyAction::Discard));
        let t = tuple("198.18.0.5", "198.19.0.9", 6, 1234, 80);
        assert_eq!(spd.lookup(&t).unwrap().action, PolicyAction::Bypass);
        spd.remove(bypass).unwrap();
        assert_eq!(spd.lookup(&t).unwrap().action, PolicyAction::Discard);
        let t2 = tuple("198.18.7.5", "198.19.0.9", 6, 1234, 80);
        assert_eq!(spd.lookup(&t2).unwrap().action, PolicyAction::Protect(OutboundSaId(1)));
        assert!(spd.lookup(&tuple("198.20.0.1", "198.19.0.9", 6, 1, 1)).is_none());
        assert!(spd.lookup(&tuple("2001:db8::1", "2001:db8::2", 6, 1, 1)).is_none());
    }

    #[test]
    fn protocol_and_ports_narrow_a_policy() {
        let mut spd = Spd::new();
        let mut p = policy(1, "2001:db8:1::/48", "2001:db8:2::/48", PolicyAction::Bypass);
        p.selector.protocol = 17;
        p.selector.remote_ports = PortRange { start: 53, end: 53 };
        spd.insert(p);
        spd.insert(policy(2, "2001:db8:1::/48", "2001:db8:2::/48", PolicyAction::Discard));
        assert_eq!(
            spd.lookup(&tuple("2001:db8:1::1", "2001:db8:2::1", 17, 999, 53)).unwrap().action,
            PolicyAction::Bypass
        );
        assert_eq!(
            spd.lookup(&tuple("2001:db8:1::1", "2001:db8:2::1", 6, 999, 53)).unwrap().action,
            PolicyAction::Discard
        );
        assert_eq!(
            spd.lookup(&tuple("2001:db8:1::1", "2001:db8:2::1", 17, 53, 999)).unwrap().action,
            PolicyAction::Discard
        );
        // Turned around for packets arriving in the clear.
        assert_eq!(
            spd.lookup_inbound(&tuple("2001:db8:2::1", "2001:db8:1::1", 17, 53, 999)).unwrap().action,
            PolicyAction::Bypass
        );
    }

    #[test]
    fn retarget_moves_protection_to_the_new_sa() {
        let mut spd = Spd::new();
        spd.insert(policy(1, "198.18.0.0/24", "198.19.0.0/24", PolicyAction::Protect(OutboundSaId(3))));
        spd.insert(policy(2, "198.18.1.0/24", "198.19.0.0/24", PolicyAction::Protect(OutboundSaId(4))));
        assert_eq!(spd.retarget(OutboundSaId(3), OutboundSaId(7)), 1);
        let actions: Vec<_> = spd.iter().map(|(_, p)| p.action).collect();
        assert_eq!(actions, [PolicyAction::Protect(OutboundSaId(7)), PolicyAction::Protect(OutboundSaId(4))]);
        assert_eq!(spd.len(), 2);
    }
}
