//! Where tunnels live: data nodes with their states, and the moves a plan makes
//! (Protego §5.2 node hierarchy, §5.4 hotspot migration and consolidation).
//!
//! The control node owns a [`Placement`]. Planning functions change it the way the control
//! node would once it has executed the result, and record every change in a [`Plan`]: the
//! list of migrations to carry out by rekeying (tunnel moves by CREATE_CHILD_SA, §4.5), plus
//! the node state changes.

use crate::binpack::{best_fit_decreasing, decreasing, BestFit};

/// A tunnel, by index into the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TunnelId(pub u32);

/// A data node, by index into the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl TunnelId {
    /// As an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    /// As an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

fn id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// A data node's state (§5.2: active, inactive, shut down; plus the two transitions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Booted and carrying (or ready to carry) tunnels; counts as provisioned capacity.
    Active,
    /// Booted, reserved for scale-out; joins the active pool after the inactive latency.
    Inactive,
    /// Becoming active; carries tunnels from minute `ready_at` on.
    Starting {
        /// First minute it is active.
        ready_at: u32,
    },
    /// Booting from shut down; becomes inactive at minute `ready_at`.
    Booting {
        /// First minute it is inactive.
        ready_at: u32,
    },
    /// Not booted, not ours to use until booted.
    ShutDown,
}

/// How long node transitions take, in minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinUp {
    /// Inactive → active (Protego: "almost instantly"; default 0).
    pub inactive_minutes: u32,
    /// Shut down → inactive (Protego: "at least several minutes"; default 5).
    pub shut_down_minutes: u32,
}

impl Default for SpinUp {
    fn default() -> Self {
        Self { inactive_minutes: 0, shut_down_minutes: 5 }
    }
}

/// Why a tunnel moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationReason {
    /// Off a hotspot node (§5.4).
    Hotspot,
    /// Periodic consolidation (§5.4, Best Fit Decreasing).
    Consolidation,
    /// Incremental drain of a lightly loaded node (risk-aware policy).
    Drain,
}

/// One tunnel move, executed later by rekeying onto the target node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The tunnel.
    pub tunnel: TunnelId,
    /// Its node before.
    pub from: NodeId,
    /// Its node after.
    pub to: NodeId,
    /// Why.
    pub reason: MigrationReason,
}

/// The outcome of one planning step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Tunnel moves, in order.
    pub migrations: Vec<Migration>,
    /// Nodes made active (or starting).
    pub activated: Vec<NodeId>,
    /// Active nodes made inactive.
    pub deactivated: Vec<NodeId>,
    /// Nodes booted from shut down.
    pub booted: Vec<NodeId>,
    /// Inactive nodes shut down.
    pub shut_down: Vec<NodeId>,
    /// Tunnels that should have moved but found no node (they stay put).
    pub stuck: Vec<TunnelId>,
    /// Whether a consolidation was skipped because the pool was too small for it.
    pub consolidation_skipped: bool,
}

/// The control node's view: which tunnel is on which node, and node states.
#[derive(Debug, Clone)]
pub struct Placement {
    node_of: Vec<NodeId>,
    members: Vec<Vec<TunnelId>>,
    slot: Vec<u32>,
    states: Vec<NodeState>,
}

impl Placement {
    /// Places `sizes.len()` tunnels by Best Fit Decreasing into fresh active nodes of capacity
    /// `threshold` (the warm start a control node has after its first consolidation).
    pub fn packed(sizes: &[f64], threshold: f64) -> Self {
        let bins = best_fit_decreasing(sizes, threshold);
        let mut p = Self {
            node_of: vec![NodeId(0); sizes.len()],
            members: Vec::with_capacity(bins.len()),
            slot: vec![0; sizes.len()],
            states: Vec::with_capacity(bins.len()),
        };
        for (n, bin) in bins.into_iter().enumerate() {
            p.states.push(NodeState::Active);
            let mut list = Vec::with_capacity(bin.len());
            for (s, t) in bin.into_iter().enumerate() {
                p.node_of[t] = NodeId(id(n));
                p.slot[t] = id(s);
                list.push(TunnelId(id(t)));
            }
            p.members.push(list);
        }
        p
    }

    /// Number of tunnels.
    pub fn tunnels(&self) -> usize {
        self.node_of.len()
    }

    /// Number of nodes in the pool (any state).
    pub fn nodes(&self) -> usize {
        self.states.len()
    }

    /// The node carrying tunnel `t`.
    pub fn node_of(&self, t: TunnelId) -> NodeId {
        self.node_of[t.index()]
    }

    /// Tunnels on node `n`.
    pub fn members(&self, n: NodeId) -> &[TunnelId] {
        &self.members[n.index()]
    }

    /// Node `n`'s state.
    pub fn state(&self, n: NodeId) -> NodeState {
        self.states[n.index()]
    }

    /// Number of nodes in `state`.
    pub fn count(&self, state: NodeState) -> usize {
        self.states.iter().filter(|&&s| s == state).count()
    }

    /// Number of nodes booting or starting (capacity on its way).
    pub fn pending(&self) -> usize {
        self.states
            .iter()
            .filter(|s| matches!(s, NodeState::Booting { .. } | NodeState::Starting { .. }))
            .count()
    }

    /// Active plus inactive plus pending: what the reserve counts.
    pub fn reserved(&self) -> usize {
        self.states.iter().filter(|s| !matches!(s, NodeState::ShutDown)).count()
    }

    /// Node loads `β_j = Σ α_i` for the given per-tunnel usage.
    pub fn loads(&self, alpha: &[f64]) -> Vec<f64> {
        let mut loads = vec![0.0; self.states.len()];
        for (t, n) in self.node_of.iter().enumerate() {
            loads[n.index()] += alpha[t];
        }
        loads
    }

    /// Moves due transitions forward to minute `now`.
    pub fn tick(&mut self, now: u32) {
        for s in &mut self.states {
            *s = match *s {
                NodeState::Starting { ready_at } if ready_at <= now => NodeState::Active,
                NodeState::Booting { ready_at } if ready_at <= now => NodeState::Inactive,
                other => other,
            };
        }
    }

    /// Moves tunnel `t` to node `to`, recording it.
    pub fn migrate(&mut self, t: TunnelId, to: NodeId, reason: MigrationReason, plan: &mut Plan) {
        let from = self.node_of[t.index()];
        if from == to {
            return;
        }
        // Swap-remove from the old node's list, fixing the slot of the tunnel moved into place.
        let slot = self.slot[t.index()] as usize;
        let list = &mut self.members[from.index()];
        list.swap_remove(slot);
        if let Some(&moved) = list.get(slot) {
            self.slot[moved.index()] = id(slot);
        }
        let dest = &mut self.members[to.index()];
        self.slot[t.index()] = id(dest.len());
        dest.push(t);
        self.node_of[t.index()] = to;
        plan.migrations.push(Migration { tunnel: t, from, to, reason });
    }

    /// Activates an inactive node (instantly, or starting if the latency is non-zero).
    /// Returns the node if it is active now.
    pub fn activate_inactive(&mut self, now: u32, spin: SpinUp, plan: &mut Plan) -> Option<NodeId> {
        let n = self.states.iter().position(|&s| s == NodeState::Inactive)?;
        plan.activated.push(NodeId(id(n)));
        if spin.inactive_minutes == 0 {
            self.states[n] = NodeState::Active;
            Some(NodeId(id(n)))
        } else {
            self.states[n] = NodeState::Starting { ready_at: now + spin.inactive_minutes };
            None
        }
    }

    /// Boots a shut-down node (or adds one to the pool); it becomes inactive after the latency.
    pub fn boot(&mut self, now: u32, spin: SpinUp, plan: &mut Plan) -> NodeId {
        let state = NodeState::Booting { ready_at: now + spin.shut_down_minutes };
        let n = match self.states.iter().position(|&s| s == NodeState::ShutDown) {
            Some(n) => {
                self.states[n] = state;
                n
            }
            None => {
                self.states.push(state);
                self.members.push(Vec::new());
                self.states.len() - 1
            }
        };
        plan.booted.push(NodeId(id(n)));
        NodeId(id(n))
    }

    /// Makes empty active nodes inactive (after a consolidation, §5.4).
    pub fn deactivate_empty(&mut self, plan: &mut Plan) {
        for n in 0..self.states.len() {
            if self.states[n] == NodeState::Active && self.members[n].is_empty() {
                self.states[n] = NodeState::Inactive;
                plan.deactivated.push(NodeId(id(n)));
            }
        }
    }

    /// Makes one empty active node inactive.
    pub fn deactivate(&mut self, n: NodeId, plan: &mut Plan) {
        if self.states[n.index()] == NodeState::Active && self.members[n.index()].is_empty() {
            self.states[n.index()] = NodeState::Inactive;
            plan.deactivated.push(n);
        }
    }

    /// Brings the pool to `target` reserved nodes (active + inactive + pending): boots
    /// shut-down nodes when short, shuts inactive ones down when over. Never touches active
    /// nodes.
    pub fn set_reserve(&mut self, target: usize, now: u32, spin: SpinUp, plan: &mut Plan) {
        let mut have = self.reserved();
        while have < target {
            self.boot(now, spin, plan);
            have += 1;
        }
        for n in (0..self.states.len()).rev() {
            if have <= target {
                break;
            }
            if self.states[n] == NodeState::Inactive {
                self.states[n] = NodeState::ShutDown;
                plan.shut_down.push(NodeId(id(n)));
                have -= 1;
            }
        }
    }

    /// Protego's hotspot pass (§5.4): every active node with `β_j > TH` sheds its largest
    /// tunnels, the fewest whose usage exceeds `β_j − TH`, each placed by Best Fit on an
    /// active node that stays at or below TH; if none takes it, an inactive node is activated.
    /// A tunnel no node takes is skipped (smaller ones are tried instead) and retried once the
    /// other hotspots have shed; if it is still needed and homeless, shut-down nodes are
    /// booted and it stays put for now ([`Plan::stuck`]).
    pub fn hotspot_pass(&mut self, alpha: &[f64], threshold: f64, now: u32, spin: SpinUp, plan: &mut Plan) {
        let mut fit = FitIndex::new(self, alpha, threshold);
        let mut hot: Vec<usize> = (0..self.states.len())
            .filter(|&n| self.states[n] == NodeState::Active && fit.loads[n] > threshold)
            .collect();
        hot.sort_by(|&a, &b| fit.loads[b].total_cmp(&fit.loads[a]).then(a.cmp(&b)));
        let mut waiting: Vec<TunnelId> = Vec::new();
        for n in hot {
            let excess = fit.loads[n] - threshold;
            let mut moved = 0.0;
            for t in self.members_by_usage(NodeId(id(n)), alpha) {
                if moved > excess {
                    break;
                }
                if self.place_by_best_fit(t, alpha, &mut fit, now, spin, plan) {
                    moved += alpha[t.index()];
                } else {
                    waiting.push(t);
                }
            }
        }
        // Retry the homeless until nothing changes; drop those whose node has cooled down.
        loop {
            let mut progress = false;
            let mut still = Vec::new();
            for t in waiting {
                let n = self.node_of[t.index()].index();
                if fit.loads[n] <= threshold {
                    continue;
                }
                if self.place_by_best_fit(t, alpha, &mut fit, now, spin, plan) {
                    progress = true;
                } else {
                    still.push(t);
                }
            }
            waiting = still;
            if !progress {
                break;
            }
        }
        let stuck_load: f64 = waiting.iter().map(|t| alpha[t.index()]).sum();
        plan.stuck.extend(waiting);
        // Capacity on its way must cover what could not move.
        let pending = self.pending() as f64 * threshold;
        if stuck_load > pending {
            let need = crate::num::ceil_count((stuck_load - pending) / threshold);
            for _ in 0..need {
                self.boot(now, spin, plan);
            }
        }
    }

    /// Moves `t` to the fullest active node that stays at or below TH with it, activating an
    /// inactive node if none does. Returns whether it moved.
    fn place_by_best_fit(
        &mut self,
        t: TunnelId,
        alpha: &[f64],
        fit: &mut FitIndex,
        now: u32,
        spin: SpinUp,
        plan: &mut Plan,
    ) -> bool {
        let a = alpha[t.index()];
        let from = self.node_of[t.index()].index();
        let found = fit.index.candidates(a).find(|&(m, _)| m as usize != from);
        let target = match found {
            Some((m, _)) => Some(m as usize),
            None => self.activate_inactive(now, spin, plan).map(|m| {
                fit.add_node(m.index());
                m.index()
            }),
        };
        let Some(m) = target else { return false };
        self.migrate(t, NodeId(id(m)), MigrationReason::Hotspot, plan);
        fit.shift(m, a);
        fit.shift(from, -a);
        true
    }

    /// Protego's consolidation (§5.4): Best Fit Decreasing of all tunnels into bins of TH,
    /// bins mapped onto active and inactive nodes so that as many tunnels as possible stay
    /// where they are, then empty active nodes become inactive. Skipped (and flagged) if
    /// BFD needs more nodes than are active or inactive.
    pub fn consolidate(&mut self, alpha: &[f64], threshold: f64, plan: &mut Plan) {
        let bins = best_fit_decreasing(alpha, threshold);
        self.apply_bins(bins, MigrationReason::Consolidation, plan);
    }

    /// Maps bins onto usable nodes with the most overlap and applies the moves.
    pub(crate) fn apply_bins(&mut self, bins: Vec<Vec<usize>>, reason: MigrationReason, plan: &mut Plan) {
        let usable: Vec<usize> = (0..self.states.len())
            .filter(|&n| matches!(self.states[n], NodeState::Active | NodeState::Inactive))
            .collect();
        let mut is_usable = vec![false; self.states.len()];
        for &n in &usable {
            is_usable[n] = true;
        }
        if bins.len() > usable.len() {
            plan.consolidation_skipped = true;
            return;
        }
        // Overlap counts (bin, node) -> tunnels already there.
        let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(self.node_of.len());
        for (b, bin) in bins.iter().enumerate() {
            for &t in bin {
                pairs.push((id(b), self.node_of[t].0));
            }
        }
        pairs.sort_unstable();
        let mut overlaps: Vec<(u32, u32, u32)> = Vec::new();
        for (i, &(b, n)) in pairs.iter().enumerate() {
            if i > 0 && pairs[i - 1] == (b, n) {
                if let Some(last) = overlaps.last_mut() {
                    last.0 += 1;
                }
            } else {
                overlaps.push((1, b, n));
            }
        }
        overlaps.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        let mut node_of_bin = vec![None; bins.len()];
        let mut taken = vec![false; self.states.len()];
        for (_, b, n) in overlaps {
            let (b, n) = (b as usize, n as usize);
            if node_of_bin[b].is_none() && !taken[n] && is_usable[n] {
                node_of_bin[b] = Some(n);
                taken[n] = true;
            }
        }
        // Remaining bins: active nodes first, then inactive ones.
        let mut free = usable.iter().copied().filter(|&n| !taken[n]).collect::<Vec<_>>();
        free.sort_by_key(|&n| (self.states[n] != NodeState::Active, n));
        let mut free = free.into_iter();
        for slot in node_of_bin.iter_mut().filter(|s| s.is_none()) {
            *slot = free.next();
        }
        for (b, bin) in bins.iter().enumerate() {
            let Some(n) = node_of_bin[b] else { continue };
            if self.states[n] == NodeState::Inactive && !bin.is_empty() {
                self.states[n] = NodeState::Active;
                plan.activated.push(NodeId(id(n)));
            }
            for &t in bin {
                self.migrate(TunnelId(id(t)), NodeId(id(n)), reason, plan);
            }
        }
        self.deactivate_empty(plan);
    }

    /// Checks the internal indices agree (tests and debug builds).
    pub fn check(&self) -> bool {
        let mut seen = vec![0u32; self.node_of.len()];
        for (n, list) in self.members.iter().enumerate() {
            for (s, t) in list.iter().enumerate() {
                if self.node_of[t.index()].index() != n || self.slot[t.index()] as usize != s {
                    return false;
                }
                seen[t.index()] += 1;
            }
            if !list.is_empty() && self.states[n] != NodeState::Active {
                return false;
            }
        }
        seen.iter().all(|&c| c == 1)
    }

    /// Tunnels of node `n` in decreasing usage.
    pub fn members_by_usage(&self, n: NodeId, alpha: &[f64]) -> Vec<TunnelId> {
        let list = &self.members[n.index()];
        let sizes: Vec<f64> = list.iter().map(|t| alpha[t.index()]).collect();
        decreasing(&sizes).into_iter().map(|i| list[i]).collect()
    }
}

/// Node loads plus a Best Fit index over active nodes at or below TH, kept in step.
pub(crate) struct FitIndex {
    pub(crate) loads: Vec<f64>,
    pub(crate) index: BestFit,
    threshold: f64,
    indexed: Vec<Option<f64>>,
}

impl FitIndex {
    pub(crate) fn new(p: &Placement, alpha: &[f64], threshold: f64) -> Self {
        let loads = p.loads(alpha);
        let mut fit = Self { indexed: vec![None; loads.len()], loads, index: BestFit::new(), threshold };
        for n in 0..p.states.len() {
            if p.states[n] == NodeState::Active {
                fit.add_node(n);
            }
        }
        fit
    }

    /// Starts tracking node `n` (newly active).
    pub(crate) fn add_node(&mut self, n: usize) {
        if n >= self.loads.len() {
            self.loads.resize(n + 1, 0.0);
            self.indexed.resize(n + 1, None);
        }
        self.reindex(n);
    }

    /// Changes node `n`'s load by `delta` and re-indexes it.
    pub(crate) fn shift(&mut self, n: usize, delta: f64) {
        self.loads[n] += delta;
        self.reindex(n);
    }

    fn reindex(&mut self, n: usize) {
        if let Some(r) = self.indexed[n].take() {
            self.index.remove(id(n), r);
        }
        let r = self.threshold - self.loads[n];
        if r >= 0.0 {
            self.index.insert(id(n), r);
            self.indexed[n] = Some(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn active(p: &Placement) -> usize {
        p.count(NodeState::Active)
    }

    #[test]
    fn packed_start_and_migrate_keep_indices() {
        let alpha = [0.3, 0.3, 0.3, 0.2, 0.1];
        let mut p = Placement::packed(&alpha, 0.9);
        assert!(p.check());
        assert_eq!(active(&p), 2);
        let mut plan = Plan::default();
        let t = TunnelId(0);
        let to = NodeId(1 - p.node_of(t).0);
        p.migrate(t, to, MigrationReason::Hotspot, &mut plan);
        assert!(p.check());
        assert_eq!(plan.migrations.len(), 1);
        assert_eq!(p.node_of(t), to);
    }

    #[test]
    fn hotspot_moves_the_largest_tunnels_first_by_best_fit() {
        // Two nodes: n0 with 0.3+0.3+0.3, n1 with 0.2+0.1; then usage on n0 grows.
        let mut p = Placement::packed(&[0.3, 0.3, 0.3, 0.2, 0.1], 0.9);
        let n0 = p.node_of(TunnelId(0));
        let alpha = [0.3, 0.29, 0.35, 0.2, 0.1]; // β(n0) = 0.94 > 0.9
        let mut plan = Plan::default();
        p.hotspot_pass(&alpha, 0.9, 1, SpinUp::default(), &mut plan);
        assert!(p.check());
        // The largest (tunnel 2, 0.35) alone exceeds the excess 0.04 and fits n1 (0.3 + 0.35).
        assert_eq!(plan.migrations.len(), 1);
        assert_eq!(plan.migrations[0].tunnel, TunnelId(2));
        assert_eq!(plan.migrations[0].from, n0);
        let loads = p.loads(&alpha);
        assert!(loads.iter().all(|&l| l <= 0.9));
    }

    #[test]
    fn hotspot_activates_inactive_then_boots() {
        let mut p = Placement::packed(&[0.3, 0.3, 0.3], 0.9);
        let mut plan = Plan::default();
        p.set_reserve(2, 0, SpinUp::default(), &mut plan);
        assert_eq!(plan.booted.len(), 1);
        p.tick(4);
        assert_eq!(p.count(NodeState::Inactive), 0);
        p.tick(5);
        assert_eq!(p.count(NodeState::Inactive), 1);
        // All three grow to σ=0.3 + a bit: β = 0.95 > TH, the inactive node takes one.
        let alpha = [0.32, 0.31, 0.32];
        let mut plan = Plan::default();
        p.hotspot_pass(&alpha, 0.9, 6, SpinUp::default(), &mut plan);
        assert_eq!(plan.activated.len(), 1);
        assert_eq!(plan.migrations.len(), 1);
        assert!(plan.stuck.is_empty());
        // Now both nodes hot again with no inactive left: stuck and a boot.
        let alpha = [0.46, 0.46, 0.46];
        let mut plan = Plan::default();
        p.hotspot_pass(&alpha, 0.9, 7, SpinUp::default(), &mut plan);
        assert!(!plan.stuck.is_empty());
        assert!(!plan.booted.is_empty());
        assert!(p.check());
    }

    #[test]
    fn consolidation_keeps_tunnels_in_place_when_it_can() {
        let alpha = [0.5, 0.4, 0.3, 0.3, 0.2];
        let mut p = Placement::packed(&alpha, 0.9);
        let mut plan = Plan::default();
        p.consolidate(&alpha, 0.9, &mut plan);
        assert!(plan.migrations.is_empty(), "{plan:?}");
        // Usage falls: everything fits into one node.
        let alpha = [0.3, 0.2, 0.1, 0.1, 0.1];
        let mut plan = Plan::default();
        p.consolidate(&alpha, 0.9, &mut plan);
        assert!(p.check());
        assert_eq!(active(&p), 1);
        assert_eq!(plan.deactivated.len(), p.nodes() - 1);
        assert!(plan.migrations.iter().all(|m| m.reason == MigrationReason::Consolidation));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// After a hotspot pass no active node is above TH unless some tunnel could not be
        /// placed anywhere, and every tunnel is on exactly one active node.
        #[test]
        fn hotspot_pass_invariants(
            start in proptest::collection::vec(0.0f64..=0.3, 1..60),
            later in proptest::collection::vec(0.0f64..=0.3, 60),
            inactive in 0usize..4,
        ) {
            let th = 0.9;
            let mut p = Placement::packed(&start, th);
            let mut plan = Plan::default();
            let target = p.reserved() + inactive;
            p.set_reserve(target, 0, SpinUp { inactive_minutes: 0, shut_down_minutes: 0 }, &mut plan);
            p.tick(0);
            let alpha: Vec<f64> = later[..start.len()].to_vec();
            let mut plan = Plan::default();
            p.hotspot_pass(&alpha, th, 1, SpinUp::default(), &mut plan);
            prop_assert!(p.check());
            let loads = p.loads(&alpha);
            if plan.stuck.is_empty() {
                for (n, l) in loads.iter().enumerate() {
                    prop_assert!(*l <= th + 1e-9, "node {} at {}", n, l);
                }
            } else {
                // Stuck only when no active node had room and no inactive node was left.
                prop_assert_eq!(p.count(NodeState::Inactive), 0);
                for t in &plan.stuck {
                    let a = alpha[t.index()];
                    prop_assert!(loads[p.node_of(*t).index()] > th);
                    for (n, l) in loads.iter().enumerate() {
                        if p.state(NodeId(id(n))) == NodeState::Active && n != p.node_of(*t).index() {
                            prop_assert!(l + a > th - 1e-9 || a == 0.0,
                                "tunnel {:?} ({}) fits node {} ({})", t, a, n, l);
                        }
                    }
                }
            }
        }

        /// Consolidation places every tunnel exactly once, on active nodes at or below TH.
        #[test]
        fn consolidation_invariants(
            start in proptest::collection::vec(0.0f64..=0.3, 1..60),
            later in proptest::collection::vec(0.0f64..=0.3, 60),
        ) {
            let th = 0.9;
            let mut p = Placement::packed(&start, th);
            let alpha: Vec<f64> = later[..start.len()].to_vec();
            let mut plan = Plan::default();
            p.set_reserve(p.reserved() + 3, 0, SpinUp { inactive_minutes: 0, shut_down_minutes: 0 }, &mut plan);
            p.tick(0);
            p.consolidate(&alpha, th, &mut plan);
            prop_assert!(p.check());
            if !plan.consolidation_skipped {
                for l in p.loads(&alpha) {
                    prop_assert!(l <= th + 1e-9);
                }
                for n in 0..p.nodes() {
                    let n = NodeId(id(n));
                    if p.state(n) == NodeState::Active {
                        prop_assert!(!p.members(n).is_empty());
                    }
                }
            }
        }
    }
}
