//! Child SAs from the IKE engine, installed into the ESP data plane's tables.
//!
//! One negotiated child SA becomes an inbound SA (by our SPI), an outbound SA and one
//! PROTECT policy per pair of narrowed selectors. A rekey is make-before-break (RFC 7296
//! §2.8): the new pair is installed, the policies move to the new outbound SA, the old
//! outbound SA goes when the old child retires, and the old inbound SA stays until the
//! engine deletes it after a grace period, so packets the peer sent with the old SA still
//! arrive.

use core::net::IpAddr;
use std::collections::BTreeMap;
use std::time::Instant;

use esp::{Lifetime, LifetimeLimits, OutboundSaId, Policy, PolicyAction, PolicyId, PolicySelector, SaConfig};
use ike::{ChildSa, OutboundSwitch, SaId};

/// Policies of gateway child SAs sit after any operator-installed ones.
const CHILD_POLICY_PRIORITY: u32 = 1000;

/// How long a successor we answered waits for the peer's Delete of its predecessor before
/// it carries outbound traffic anyway.
pub(crate) const SWITCH_WAIT: core::time::Duration = core::time::Duration::from_secs(10);

/// What was installed for one child SA (keyed by its inbound SPI).
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    /// The IKE SA it belongs to.
    pub(crate) ike: SaId,
    /// The child as negotiated (no key bytes: enclave handles only).
    pub(crate) child: ChildSa,
    /// Its outbound SA while it carries outbound traffic; `None` once a rekey replaced it.
    pub(crate) outbound: Option<OutboundSaId>,
    /// Its PROTECT policies (moved to the successor on rekey).
    pub(crate) policies: Vec<PolicyId>,
    /// When it was installed.
    pub(crate) since: Instant,
    /// The predecessor (inbound SPI) whose outbound traffic this child takes over when the
    /// peer deletes it: set when we answered the rekey (see `ike::Event::ChildSaRekeyed`).
    pub(crate) waiting_for: Option<u32>,
}

/// The child SAs installed in the data plane.
#[derive(Debug, Default)]
pub(crate) struct Children {
    by_spi: BTreeMap<u32, Installed>,
}

/// The data plane's view of one direction; an inbound SA gets the data plane's replay
/// `window`.
fn sa_config(child: &ChildSa, inbound: bool, window: u32) -> Option<SaConfig> {
    let (spi, handle) = if inbound {
        (child.spi_inbound, child.handles.inbound)
    } else {
        (child.spi_outbound, child.handles.outbound)
    };
    let mut c = SaConfig::new(spi, handle, child.suite, child.local.ip(), child.remote.ip());
    c.esn = child.esn;
    if inbound {
        c.replay_window = window;
    }
    c.encapsulation = child.encapsulation;
    c.local_selectors = child.local_ts.clone();
    c.remote_selectors = child.remote_ts.clone();
    // Soft expiry asks the engine to rekey; hard expiry stops traffic and deletes it.
    let v = child.volume;
    c.lifetime = Lifetime {
        soft: LifetimeLimits { time: Some(child.rekey_time), bytes: v.rekey_bytes, packets: v.rekey_packets },
        hard: LifetimeLimits { time: Some(child.life_time), bytes: v.life_bytes, packets: v.life_packets },
    };
    Some(c)
}

/// One PROTECT selector per (local, remote) pair that some packet can match.
fn selectors(child: &ChildSa) -> Vec<PolicySelector> {
    let mut out = Vec::new();
    for &l in &child.local_ts {
        for &r in &child.remote_ts {
            if l.addresses.is_ipv6() != r.addresses.is_ipv6() {
                continue;
            }
            let protocol = match (l.protocol, r.protocol) {
                (a, b) if a == b || b == 0 => a,
                (0, b) => b,
                _ => continue,
            };
            out.push(PolicySelector {
                local: l.addresses,
                remote: r.addresses,
                protocol,
                local_ports: l.ports,
                remote_ports: r.ports,
            });
        }
    }
    out
}

/// Why a child could not be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InstallError {
    /// A selector has mixed families or an inverted range.
    #[error("unusable traffic selectors")]
    Selectors,
    /// The data plane refused the SA (e.g. an SPI already installed).
    #[error("data plane: {0}")]
    Esp(String),
    /// The tables are unusable.
    #[error("the data plane's tables are poisoned")]
    Poisoned,
    /// No installed child has that SPI.
    #[error("no child SA with inbound SPI {0:#010x}")]
    Unknown(u32),
}

impl Children {
    /// Records that the children of IKE SA `old` belong to `new` now (an IKE rekey);
    /// returns how many moved. The data plane is untouched: ESP does not change.
    pub(crate) fn reassign(&mut self, old: SaId, new: SaId) -> usize {
        let mut moved = 0;
        for c in self.by_spi.values_mut().filter(|c| c.ike == old) {
            c.ike = new;
            moved += 1;
        }
        moved
    }

    /// Installs a new child SA: inbound, outbound and its policies, in one table update.
    pub(crate) fn install<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        ike: SaId,
        child: ChildSa,
        now: Instant,
    ) -> Result<(), InstallError> {
        let window = dp.replay_window();
        let (inb, out) = sa_config(&child, true, window)
            .zip(sa_config(&child, false, window))
            .ok_or(InstallError::Selectors)?;
        let sels = selectors(&child);
        let spi = child.spi_inbound;
        let (outbound, policies) = dp
            .update(|sad, spd| -> Result<_, InstallError> {
                sad.add_inbound(inb, now).map_err(|e| InstallError::Esp(e.to_string()))?;
                let id = match sad.add_outbound(out, now) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = sad.remove_inbound(spi);
                        return Err(InstallError::Esp(e.to_string()));
                    }
                };
                let policies = sels
                    .iter()
                    .map(|&selector| {
                        spd.insert(Policy {
                            priority: CHILD_POLICY_PRIORITY,
                            selector,
                            action: PolicyAction::Protect(id),
                        })
                    })
                    .collect();
                Ok((id, policies))
            })
            .ok_or(InstallError::Poisoned)??;
        self.by_spi.insert(
            spi,
            Installed { ike, child, outbound: Some(outbound), policies, since: now, waiting_for: None },
        );
        Ok(())
    }

    /// Installs `new` as the successor of the child with inbound SPI `old`. With
    /// [`OutboundSwitch::Now`] the policies move to the new outbound SA and the old outbound
    /// SA is removed; with `OnPeerDelete` that happens when the old child retires (the
    /// peer's Delete) or after [`SWITCH_WAIT`]; with `Never` (a collision's redundant SA)
    /// only the inbound SA is installed. The old inbound SA stays until [`Self::remove`].
    pub(crate) fn rekeyed<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        ike: SaId,
        old: u32,
        new: ChildSa,
        switch: OutboundSwitch,
        now: Instant,
    ) -> Result<(), InstallError> {
        let spi = new.spi_inbound;
        let window = dp.replay_window();
        if switch == OutboundSwitch::Never {
            let inb = sa_config(&new, true, window).ok_or(InstallError::Selectors)?;
            dp.update(|sad, _| sad.add_inbound(inb, now).map_err(|e| InstallError::Esp(e.to_string())))
                .ok_or(InstallError::Poisoned)??;
            let installed = Installed {
                ike,
                child: new,
                outbound: None,
                policies: Vec::new(),
                since: now,
                waiting_for: None,
            };
            self.by_spi.insert(spi, installed);
            return Ok(());
        }
        let switch_now = switch == OutboundSwitch::Now;
        let (inb, out) = sa_config(&new, true, window)
            .zip(sa_config(&new, false, window))
            .ok_or(InstallError::Selectors)?;
        let wait = !switch_now && self.by_spi.get(&old).is_some_and(|o| o.outbound.is_some());
        let (old_out, policies) = match self.by_spi.get_mut(&old) {
            Some(o) if !wait => (o.outbound.take(), core::mem::take(&mut o.policies)),
            _ => (None, Vec::new()),
        };
        let sels = if policies.is_empty() && !wait { selectors(&new) } else { Vec::new() };
        let result = dp
            .update(|sad, spd| -> Result<_, InstallError> {
                sad.add_inbound(inb, now).map_err(|e| InstallError::Esp(e.to_string()))?;
                let id = match sad.add_outbound(out, now) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = sad.remove_inbound(spi);
                        return Err(InstallError::Esp(e.to_string()));
                    }
                };
                let mut policies = policies.clone();
                if let Some(o) = old_out {
                    spd.retarget(o, id);
                    let _ = sad.remove_outbound(o);
                }
                // The old child was unknown (or had no policies): give the new one its own.
                for &selector in &sels {
                    policies.push(spd.insert(Policy {
                        priority: CHILD_POLICY_PRIORITY,
                        selector,
                        action: PolicyAction::Protect(id),
                    }));
                }
                Ok((id, policies))
            })
            .ok_or(InstallError::Poisoned)?;
        match result {
            Ok((id, policies)) => {
                let waiting_for = wait.then_some(old);
                self.by_spi.insert(
                    spi,
                    Installed { ike, child: new, outbound: Some(id), policies, since: now, waiting_for },
                );
                Ok(())
            }
            Err(e) => {
                // Keep the old child carrying traffic.
                if let Some(o) = self.by_spi.get_mut(&old) {
                    o.outbound = old_out;
                    o.policies = policies;
                }
                Err(e)
            }
        }
    }

    /// Removes a child SA: its policies, its outbound SA (if still current) and its
    /// inbound SA. Traffic its policies covered is then dropped, never sent in the clear.
    /// A successor waiting for it takes its policies instead (see [`Self::rekeyed`]).
    pub(crate) fn remove<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        spi: u32,
    ) -> Result<Installed, InstallError> {
        self.switch_to_successor(dp, spi)?;
        let c = self.by_spi.remove(&spi).ok_or(InstallError::Unknown(spi))?;
        dp.update(|sad, spd| {
            for p in &c.policies {
                spd.remove(*p);
            }
            if let Some(o) = c.outbound {
                let _ = sad.remove_outbound(o);
            }
            let _ = sad.remove_inbound(spi);
        })
        .ok_or(InstallError::Poisoned)?;
        Ok(c)
    }

    /// Takes a retired child (see `ike::Event::ChildSaRetired`) out of outbound service: a
    /// successor waiting for it takes its policies, and its outbound SA goes (with any
    /// policies still its own: that traffic is dropped, never sent in clear). Its inbound
    /// SA stays until [`Self::remove`].
    pub(crate) fn retire<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        spi: u32,
    ) -> Result<(), InstallError> {
        self.switch_to_successor(dp, spi)?;
        let c = self.by_spi.get_mut(&spi).ok_or(InstallError::Unknown(spi))?;
        // A retired child never carries outbound traffic again, nor waits to.
        c.waiting_for = None;
        let (outbound, policies) = (c.outbound.take(), core::mem::take(&mut c.policies));
        if outbound.is_none() && policies.is_empty() {
            return Ok(());
        }
        dp.update(|sad, spd| {
            for p in &policies {
                spd.remove(*p);
            }
            if let Some(o) = outbound {
                let _ = sad.remove_outbound(o);
            }
        })
        .ok_or(InstallError::Poisoned)
    }

    /// Moves outbound traffic from the child `old` to a successor waiting for it, if any:
    /// its policies point at the successor's outbound SA, and its own outbound SA goes.
    fn switch_to_successor<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        old: u32,
    ) -> Result<(), InstallError> {
        let Some(new) = self.by_spi.iter().find(|(_, c)| c.waiting_for == Some(old)).map(|(s, _)| *s) else {
            return Ok(());
        };
        let (old_out, policies) = match self.by_spi.get_mut(&old) {
            Some(o) => (o.outbound.take(), core::mem::take(&mut o.policies)),
            None => (None, Vec::new()),
        };
        let Some(succ) = self.by_spi.get_mut(&new) else { return Ok(()) };
        succ.waiting_for = None;
        let (Some(from), Some(to)) = (old_out, succ.outbound) else { return Ok(()) };
        succ.policies.extend(policies);
        dp.update(|sad, spd| {
            spd.retarget(from, to);
            let _ = sad.remove_outbound(from);
        })
        .ok_or(InstallError::Poisoned)
    }

    /// Successors that waited [`SWITCH_WAIT`] for the peer's Delete of their predecessor
    /// take outbound traffic anyway (the peer has had ample time to install them).
    pub(crate) fn switch_overdue<E: enclave::Enclave + 'static>(
        &mut self,
        dp: &dataplane::Dataplane<E>,
        now: Instant,
    ) -> Result<usize, InstallError> {
        let due: Vec<u32> = self
            .by_spi
            .values()
            .filter(|c| now.saturating_duration_since(c.since) >= SWITCH_WAIT)
            .filter_map(|c| c.waiting_for)
            .collect();
        for old in &due {
            self.switch_to_successor(dp, *old)?;
        }
        Ok(due.len())
    }

    /// The child whose inbound SA or outbound SA this is.
    pub(crate) fn find(&self, sa: esp::SaRef) -> Option<&Installed> {
        match sa {
            esp::SaRef::Inbound { spi } => self.by_spi.get(&spi),
            esp::SaRef::Outbound { id, .. } => self.by_spi.values().find(|c| c.outbound == Some(id)),
        }
    }

    /// Every installed child, by inbound SPI.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Installed> {
        self.by_spi.values()
    }

    /// The remote selectors' address ranges of every installed child (for routes).
    pub(crate) fn remote_ranges(child: &ChildSa) -> Vec<(IpAddr, IpAddr)> {
        child.remote_ts.iter().map(|t| (t.addresses.start(), t.addresses.end())).collect()
    }
}

/// The CIDR prefixes that exactly cover `start..=end` (at most `limit`; `None` if more).
pub(crate) fn range_prefixes(start: IpAddr, end: IpAddr, limit: usize) -> Option<Vec<(IpAddr, u8)>> {
    let (lo, hi, bits, v6) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32u32, false),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128u32, true),
        _ => return None,
    };
    if lo > hi {
        return None;
    }
    // `cur` is aligned to 2^k, so its block's last address is `cur | (2^k - 1)`.
    let block_end = |cur: u128, k: u32| if k >= 128 { u128::MAX } else { cur | ((1u128 << k) - 1) };
    let mut out = Vec::new();
    let mut cur = lo;
    loop {
        let mut k = if cur == 0 { bits } else { cur.trailing_zeros().min(bits) };
        while k > 0 && block_end(cur, k) > hi {
            k -= 1;
        }
        let addr = if v6 { IpAddr::V6(cur.into()) } else { IpAddr::V4(u32::try_from(cur).ok()?.into()) };
        out.push((addr, u8::try_from(bits - k).ok()?));
        if out.len() > limit {
            return None;
        }
        let end = block_end(cur, k);
        if end >= hi {
            return Some(out);
        }
        cur = end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esp::{AddressRange, TrafficSelector};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_inbound_child_sa_gets_the_data_planes_replay_window() {
        let any =
            TrafficSelector::addresses(AddressRange::range(ip("198.18.10.0"), ip("198.18.10.255")).unwrap());
        let child = ChildSa {
            name: "c".into(),
            spi_inbound: 0x100,
            spi_outbound: 0x200,
            handles: enclave_core::ChildSaPair {
                inbound: enclave_core::EspSaHandle(1),
                outbound: enclave_core::EspSaHandle(2),
            },
            suite: enclave_core::Suite::aead(enclave_core::Cipher::AesGcm16_256),
            esn: false,
            local_ts: vec![any],
            remote_ts: vec![any],
            encapsulation: ike::Encapsulation::Esp,
            local: "198.18.0.1:500".parse().unwrap(),
            remote: "198.18.0.2:500".parse().unwrap(),
            rekey_time: std::time::Duration::from_secs(3000),
            life_time: std::time::Duration::from_secs(3600),
            volume: ike::VolumeLimits::default(),
        };
        let inbound = sa_config(&child, true, 16_384).unwrap();
        assert_eq!((inbound.spi, inbound.replay_window), (0x100, 16_384));
        let outbound = sa_config(&child, false, 16_384).unwrap();
        assert_eq!((outbound.spi, outbound.replay_window), (0x200, esp::DEFAULT_WINDOW), "unused outbound");
    }

    #[test]
    fn ranges_become_the_fewest_exact_prefixes() {
        assert_eq!(
            range_prefixes(ip("198.19.1.0"), ip("198.19.1.255"), 8),
            Some(vec![(ip("198.19.1.0"), 24)])
        );
        assert_eq!(range_prefixes(ip("198.19.1.1"), ip("198.19.1.1"), 8), Some(vec![(ip("198.19.1.1"), 32)]));
        assert_eq!(
            range_prefixes(ip("198.19.1.1"), ip("198.19.1.4"), 8),
            Some(vec![(ip("198.19.1.1"), 32), (ip("198.19.1.2"), 31), (ip("198.19.1.4"), 32)])
        );
        assert_eq!(range_prefixes(ip("0.0.0.0"), ip("255.255.255.255"), 8), Some(vec![(ip("0.0.0.0"), 0)]));
        assert_eq!(
            range_prefixes(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 8),
            Some(vec![(ip("::"), 0)])
        );
        assert_eq!(
            range_prefixes(ip("2001:db8:1::"), ip("2001:db8:1:ffff:ffff:ffff:ffff:ffff"), 8),
            Some(vec![(ip("2001:db8:1::"), 48)])
        );
        assert_eq!(range_prefixes(ip("198.19.1.1"), ip("198.19.1.254"), 4), None, "too many");
        assert_eq!(range_prefixes(ip("198.19.1.2"), ip("198.19.1.1"), 4), None, "inverted");
        assert_eq!(range_prefixes(ip("198.19.1.1"), ip("::1"), 4), None, "mixed");
        assert_eq!(
            range_prefixes(ip("255.255.255.255"), ip("255.255.255.255"), 4),
            Some(vec![(ip("255.255.255.255"), 32)])
        );
    }
}
