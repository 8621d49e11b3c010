//! Cloister's policy: guarantee-targeted placement with incremental consolidation.
//!
//! Protego keeps the same headroom (`1 − TH`) on every node and repacks every tunnel by Best
//! Fit Decreasing each interval. A fixed headroom is too small next to tunnels that jump and
//! wasted on steady ones, and the repack moves most tunnels every time. This policy instead
//! bounds, on every node, each tunnel's probability of losing throughput in the next minute,
//! which is what the daily bandwidth guarantee counts, and consolidates by emptying the
//! lightest nodes into the others when every bound still holds.
//!
//! **Model of the next minute.** Each tunnel's one-minute change is learnt from its own
//! recent changes, weighted exponentially (half-life [`RiskAware::half_life`]), as a mixture
//! of small changes (`≤ J₀`, [`JUMP`]) with mean `μ_i` and variance `v_i`, and upward jumps
//! (`> J₀`) with rate `q_i`, mean size `s_i` and size variance `w_i`; tunnels are
//! independent. On node `j` with load `β_j`, headroom `x = 1 − β_j`, `m = Σμ_i`, `V = Σv_i`:
//!
//! - no jump: the node overloads with probability `Φ̄((x − m)/√V)`; the overload is slight,
//!   so the fair scheduler throttles only the largest tunnel;
//! - tunnel `k` jumps: probability `q_k·Φ̄((x − m − s_k)/√(V + w_k))`; who is throttled is
//!   decided by water-filling the demands after a jump of `s_k` (max-min fair sharing,
//!   §7.4's scheduler): every tunnel above the water level.
//!
//! Summing these gives each tunnel's probability `p_i` of being throttled next minute (two
//! jumps on one node in one minute are second order). A node is *safe* if every `p_i ≤ δ`.
//! A rare jumper may overload its node, since the overload then costs only itself a minute
//! within its budget; a frequent jumper keeps room for its jump, and a large steady tunnel is
//! kept away from neighbours whose jumps would push the water level under it.
//!
//! **Every minute:** a node with some `p_i > δ_hot` (or load above 1) sheds tunnels, the
//! largest first, until it is safe; each goes to the fullest active node that stays safe
//! with it (Best Fit under the risk constraint), else to an activated inactive node.
//!
//! **Every interval:** incremental consolidation: active nodes, lightest first, are emptied
//! into the others when all their tunnels fit safely; emptied nodes become inactive.
//! Nothing else moves, so migrations follow the change in demand, not the tunnel count.

use crate::binpack::BestFit;
use crate::placement::{MigrationReason, NodeId, NodeState, Placement, Plan, TunnelId};
use crate::policy::{Policy, StepContext};

/// One-minute increase (node-capacity units) above which a change counts as a jump:
/// 0.02 of a node, 100 Mbit/s on 5 Gbit/s nodes.
pub const JUMP: f64 = 0.02;

/// Variance floor per tunnel (node units²): nothing is perfectly steady.
const VARIANCE_FLOOR: f64 = 1e-7;

/// Jump scenarios less likely than this are ignored.
const NEGLIGIBLE: f64 = 1e-6;

/// Candidate nodes tried per placement before activating a new one.
const MAX_SCAN: usize = 32;

/// Consecutive failed drains after which a consolidation stops trying.
const MAX_FAILED_DRAINS: usize = 8;

/// Cloister's guarantee-targeted policy (see the module documentation).
#[derive(Debug, Clone)]
pub struct RiskAware {
    /// Bound on each tunnel's probability of being throttled in the next minute (δ).
    pub delta: f64,
    /// Bound above which a node is a hotspot (δ_hot ≥ δ; the gap is hysteresis).
    pub delta_hot: f64,
    /// Half-life of the change statistics, minutes.
    pub half_life: f64,
    /// Most migrations one consolidation may make, as a share of the tunnels.
    pub migration_budget: f64,
    state: Option<State>,
}

impl Default for RiskAware {
    fn default() -> Self {
        Self::new(0.015)
    }
}

impl RiskAware {
    /// The policy with bound `delta` and the other parameters at their defaults
    /// (`δ_hot = 4δ`, half-life 180 minutes, budget 40 % of the tunnels).
    pub fn new(delta: f64) -> Self {
        Self { delta, delta_hot: 4.0 * delta, half_life: 180.0, migration_budget: 0.4, state: None }
    }
}

/// Exponentially weighted change statistics of every tunnel.
#[derive(Debug, Clone)]
struct State {
    prev: Vec<f64>,
    stats: Vec<ChangeStats>,
}

/// Weighted sums over one tunnel's past one-minute changes.
#[derive(Debug, Clone, Copy, Default)]
struct ChangeStats {
    weight: f64,
    small: f64,
    small_sum: f64,
    small_sq: f64,
    jumps: f64,
    jump_sum: f64,
    jump_sq: f64,
}

/// The model of one tunnel's next change.
#[derive(Debug, Clone, Copy, Default)]
struct Change {
    mean: f64,
    var: f64,
    jump_rate: f64,
    jump_mean: f64,
    jump_var: f64,
}

impl ChangeStats {
    fn push(&mut self, d: f64, decay: f64) {
        self.weight = decay * self.weight + 1.0;
        for v in [
            &mut self.small,
            &mut self.small_sum,
            &mut self.small_sq,
            &mut self.jumps,
            &mut self.jump_sum,
            &mut self.jump_sq,
        ] {
            *v *= decay;
        }
        if d > JUMP {
            self.jumps += 1.0;
            self.jump_sum += d;
            self.jump_sq += d * d;
        } else {
            // Large drops are bursts ending: they only make room, so they count as -J₀.
            let d = d.max(-JUMP);
            self.small += 1.0;
            self.small_sum += d;
            self.small_sq += d * d;
        }
    }

    fn model(&self) -> Change {
        let mut c = Change { var: VARIANCE_FLOOR, ..Change::default() };
        if self.weight <= 0.0 {
            return c;
        }
        if self.small > 0.0 {
            let m = self.small_sum / self.small;
            // The drift applies in the share of minutes without a jump.
            c.mean = m * self.small / self.weight;
            c.var += (self.small_sq / self.small - m * m).max(0.0);
        }
        if self.jumps > 0.0 {
            let m = self.jump_sum / self.jumps;
            c.jump_rate = self.jumps / self.weight;
            c.jump_mean = m;
            c.jump_var = (self.jump_sq / self.jumps - m * m).max(0.0);
        }
        c
    }
}

/// A node's sums, updated in `O(1)` per tunnel moved.
#[derive(Debug, Clone, Copy, Default)]
struct NodeAgg {
    load: f64,
    mean: f64,
    var: f64,
}

/// Per-step working data: the models, node sums, members and a Best Fit index by load.
struct Work<'a> {
    alpha: &'a [f64],
    change: Vec<Change>,
    nodes: Vec<NodeAgg>,
    members: Vec<Vec<usize>>,
    active: Vec<bool>,
    index: BestFit,
    indexed: Vec<Option<f64>>,
    /// Reusable buffers for the risk computation.
    scratch: Vec<(f64, usize)>,
    jumps: Vec<(usize, f64, f64)>,
    risk: Vec<f64>,
    prefix: Vec<f64>,
    position: Vec<usize>,
}

/// Upper tail of the standard normal, `Pr(Z > z)`.
pub fn normal_tail(z: f64) -> f64 {
    0.5 * erfc(z / core::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

impl Work<'_> {
    /// The largest per-tunnel probability of being throttled next minute on a node with sums
    /// `agg` and tunnels `members` (plus `extra`). When a cheap upper bound (the node's
    /// overload probability) is at most `limit`, that bound is returned instead.
    fn risk(&mut self, agg: NodeAgg, members: &[usize], extra: Option<usize>, limit: f64) -> f64 {
        let x = 1.0 - agg.load;
        if x < 0.0 {
            return 1.0;
        }
        let m = members.len() + usize::from(extra.is_some());
        if m == 0 {
            return 0.0;
        }
        let id_at = |i: usize| if i < members.len() { members[i] } else { extra.unwrap_or(0) };
        // Overload probability without a jump, and with each tunnel's jump.
        let p0 = normal_tail((x - agg.mean) / agg.var.sqrt());
        let mut total = p0;
        self.jumps.clear();
        for k in 0..m {
            let c = self.change[id_at(k)];
            if c.jump_rate <= 0.0 {
                continue;
            }
            let p = c.jump_rate * normal_tail((x - agg.mean - c.jump_mean) / (agg.var + c.jump_var).sqrt());
            if p >= NEGLIGIBLE {
                self.jumps.push((k, p, c.jump_mean));
                total += p;
            }
        }
        if total <= limit {
            return total;
        }
        // Demands sorted ascending, once; each jump scenario re-inserts one bumped demand.
        self.scratch.clear();
        self.scratch.extend((0..m).map(|i| (self.alpha[id_at(i)], i)));
        self.scratch.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.risk.clear();
        self.risk.resize(m, 0.0);
        // Small changes only: a slight overload throttles the largest tunnel.
        if let Some(&(_, top)) = self.scratch.last() {
            self.risk[top] += p0;
        }
        self.prefix.clear();
        self.prefix.push(0.0);
        self.position.clear();
        self.position.resize(m, 0);
        let mut sum = 0.0;
        for (pos, &(d, i)) in self.scratch.iter().enumerate() {
            sum += d;
            self.prefix.push(sum);
            self.position[i] = pos;
        }
        for j in 0..self.jumps.len() {
            let (k, p, bump) = self.jumps[j];
            let bumped = self.alpha[id_at(k)] + bump;
            let r = self.position[k];
            throttled(&self.scratch, &self.prefix, r, bumped, &mut self.risk, p);
        }
        self.risk.iter().copied().fold(0.0, f64::max).min(1.0)
    }

    fn with(&self, n: usize, t: usize) -> NodeAgg {
        let a = self.nodes.get(n).copied().unwrap_or_default();
        let c = &self.change[t];
        NodeAgg { load: a.load + self.alpha[t], mean: a.mean + c.mean, var: a.var + c.var }
    }

    /// Node `n`'s largest per-tunnel risk, or a bound on it when the bound is at most `limit`.
    fn node_risk(&mut self, n: usize, limit: f64) -> f64 {
        let members = core::mem::take(&mut self.members[n]);
        let r = self.risk(self.nodes[n], &members, None, limit);
        self.members[n] = members;
        r
    }

    /// Whether node `n` stays safe (and at most full) with tunnel `t` added.
    fn fits(&mut self, n: usize, t: usize, delta: f64) -> bool {
        let agg = self.with(n, t);
        if agg.load > 1.0 {
            return false;
        }
        let members = core::mem::take(&mut self.members[n]);
        let r = self.risk(agg, &members, Some(t), delta);
        self.members[n] = members;
        r <= delta
    }

    fn grow(&mut self, n: usize) {
        if n >= self.nodes.len() {
            self.nodes.resize(n + 1, NodeAgg::default());
            self.members.resize(n + 1, Vec::new());
            self.active.resize(n + 1, false);
            self.indexed.resize(n + 1, None);
        }
    }

    fn reindex(&mut self, n: usize) {
        if let Some(r) = self.indexed[n].take() {
            self.index.remove(id(n), r);
        }
        if self.active[n] {
            let r = (1.0 - self.nodes[n].load).max(0.0);
            self.index.insert(id(n), r);
            self.indexed[n] = Some(r);
        }
    }

    fn set_active(&mut self, n: usize, active: bool) {
        self.grow(n);
        self.active[n] = active;
        self.reindex(n);
    }

    fn add(&mut self, n: usize, t: usize) {
        self.grow(n);
        self.nodes[n] = self.with(n, t);
        self.members[n].push(t);
        self.reindex(n);
    }

    fn remove(&mut self, n: usize, t: usize) {
        let c = &self.change[t];
        let a = &mut self.nodes[n];
        a.load -= self.alpha[t];
        a.mean -= c.mean;
        a.var -= c.var;
        if let Some(p) = self.members[n].iter().position(|&x| x == t) {
            self.members[n].swap_remove(p);
        }
        self.reindex(n);
    }

    fn load(&self, n: usize) -> f64 {
        self.nodes.get(n).map_or(0.0, |a| a.load)
    }

    /// The fullest active node other than `from` (and not excluded) that stays safe with
    /// `t`, among the [`MAX_SCAN`] fullest that have room for it; failing those, the
    /// [`MAX_SCAN`]/4 emptiest (so a large pool is never scanned end to end).
    fn best_fit(&mut self, t: usize, from: usize, exclude: &[bool], delta: f64) -> Option<usize> {
        let usable = |n: &usize| *n != from && !exclude.get(*n).copied().unwrap_or(false);
        let fullest: Vec<usize> = self
            .index
            .candidates(self.alpha[t])
            .map(|(n, _)| n as usize)
            .filter(usable)
            .take(MAX_SCAN)
            .collect();
        if let Some(n) = fullest.iter().copied().find(|&n| self.fits(n, t, delta)) {
            return Some(n);
        }
        let emptiest: Vec<usize> = self
            .index
            .candidates(self.alpha[t])
            .rev()
            .map(|(n, _)| n as usize)
            .filter(usable)
            .filter(|n| !fullest.contains(n))
            .take(MAX_SCAN / 4)
            .collect();
        let mut found = emptiest.into_iter().filter(|&n| self.fits(n, t, delta));
        // Of the emptiest that fit, the fullest one (they come emptiest first).
        found.next_back()
    }
}

/// Water-fills capacity 1 over `sorted` (ascending demands, with prefix sums `prefix`,
/// `prefix[i]` the sum of the first `i`) with entry `k` (at sorted position `r`) raised to
/// `bumped`, and adds `p` to the risk of every tunnel above the water level; if the demands
/// fit, the largest one gets it (the overload then comes from the spread around the mean
/// jump, which throttles the top demand first).
///
/// With `e` the merged ascending demands, `g(i) = Σ_{l<i} e_l + (m − i)·e_i` is
/// non-decreasing, and the first `i` with `g(i) > 1` starts the throttled tunnels, so a
/// binary search finds it in `O(log m)`.
fn throttled(sorted: &[(f64, usize)], prefix: &[f64], r: usize, bumped: f64, risk: &mut [f64], p: f64) {
    let m = sorted.len();
    // The others (without r) in order, as c[j]; bumped goes in at merged position q.
    let c = |j: usize| if j < r { sorted[j] } else { sorted[j + 1] };
    let pc = |j: usize| if j <= r { prefix[j] } else { prefix[j + 1] - sorted[r].0 };
    let q = {
        // Others with demand <= bumped come first.
        let (mut lo, mut hi) = (0, m - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if c(mid).0 <= bumped {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let k = sorted[r].1;
    let at = |i: usize| -> (f64, usize) {
        match i.cmp(&q) {
            core::cmp::Ordering::Less => c(i),
            core::cmp::Ordering::Equal => (bumped, k),
            core::cmp::Ordering::Greater => c(i - 1),
        }
    };
    let below = |i: usize| if i <= q { pc(i) } else { pc(i - 1) + bumped };
    let over = |i: usize| at(i).0 > (1.0 - below(i)) / (m - i) as f64 + 1e-12;
    let (mut lo, mut hi) = (0, m);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if over(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if lo == m {
        risk[at(m - 1).1] += p;
    } else {
        for i in lo..m {
            risk[at(i).1] += p;
        }
    }
}

fn id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl RiskAware {
    fn update(&mut self, alpha: &[f64]) {
        let decay = 0.5f64.powf(1.0 / self.half_life.max(1.0));
        let state = self.state.get_or_insert_with(|| State {
            prev: alpha.to_vec(),
            stats: vec![ChangeStats::default(); alpha.len()],
        });
        for (t, &a) in alpha.iter().enumerate() {
            state.stats[t].push(a - state.prev[t], decay);
            state.prev[t] = a;
        }
    }

    fn work<'a>(&self, alpha: &'a [f64], placement: &Placement) -> Work<'a> {
        let change = match &self.state {
            Some(s) => s.stats.iter().map(ChangeStats::model).collect(),
            None => vec![ChangeStats::default().model(); alpha.len()],
        };
        let nodes = placement.nodes();
        let mut w = Work {
            alpha,
            change,
            nodes: vec![NodeAgg::default(); nodes],
            members: vec![Vec::new(); nodes],
            active: vec![false; nodes],
            index: BestFit::new(),
            indexed: vec![None; nodes],
            scratch: Vec::new(),
            jumps: Vec::new(),
            risk: Vec::new(),
            prefix: Vec::new(),
            position: Vec::new(),
        };
        for t in 0..alpha.len() {
            let n = placement.node_of(TunnelId(id(t))).index();
            w.nodes[n] = w.with(n, t);
            w.members[n].push(t);
        }
        for n in 0..nodes {
            if placement.state(NodeId(id(n))) == NodeState::Active {
                w.set_active(n, true);
            }
        }
        w
    }

    fn relieve_hotspots(
        &self,
        ctx: &StepContext<'_>,
        w: &mut Work<'_>,
        placement: &mut Placement,
        plan: &mut Plan,
    ) {
        let mut hot = Vec::new();
        for n in 0..placement.nodes() {
            if placement.state(NodeId(id(n))) != NodeState::Active {
                continue;
            }
            let r = w.node_risk(n, self.delta_hot);
            if r > self.delta_hot || w.load(n) > 1.0 {
                hot.push((r, n));
            }
        }
        hot.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut stuck_load = 0.0;
        for (_, n) in hot {
            let mut members = w.members[n].clone();
            members.sort_by(|&a, &b| w.alpha[b].total_cmp(&w.alpha[a]).then(a.cmp(&b)));
            for t in members {
                if w.load(n) <= 1.0 && w.node_risk(n, self.delta) <= self.delta {
                    break;
                }
                let target = match w.best_fit(t, n, &[], self.delta) {
                    Some(m) => Some(m),
                    None => placement.activate_inactive(ctx.minute, ctx.spin, plan).map(|m| {
                        w.set_active(m.index(), true);
                        m.index()
                    }),
                };
                match target {
                    Some(m) => {
                        w.remove(n, t);
                        w.add(m, t);
                        placement.migrate(TunnelId(id(t)), NodeId(id(m)), MigrationReason::Hotspot, plan);
                    }
                    None => {
                        plan.stuck.push(TunnelId(id(t)));
                        stuck_load += w.alpha[t];
                    }
                }
            }
        }
        let pending = placement.pending() as f64 * ctx.threshold;
        if stuck_load > pending {
            let need = crate::num::ceil_count((stuck_load - pending) / ctx.threshold);
            for _ in 0..need {
                placement.boot(ctx.minute, ctx.spin, plan);
            }
        }
    }

    fn drain(&self, w: &mut Work<'_>, placement: &mut Placement, plan: &mut Plan) {
        let mut budget = crate::num::ceil_count(self.migration_budget * w.alpha.len() as f64);
        let mut emptied = vec![false; placement.nodes()];
        let mut order: Vec<usize> =
            (0..placement.nodes()).filter(|&n| placement.state(NodeId(id(n))) == NodeState::Active).collect();
        order.sort_by(|&a, &b| w.load(a).total_cmp(&w.load(b)).then(a.cmp(&b)));
        let mut failures = 0;
        for n in order {
            if failures >= MAX_FAILED_DRAINS {
                break;
            }
            let mut members = w.members[n].clone();
            if members.len() > budget {
                continue;
            }
            members.sort_by(|&a, &b| w.alpha[b].total_cmp(&w.alpha[a]).then(a.cmp(&b)));
            // Tentative: place every member; undo all if one does not fit. The node itself
            // and nodes emptied in this round take nothing.
            emptied[n] = true;
            let mut moves = Vec::with_capacity(members.len());
            for &t in &members {
                match w.best_fit(t, n, &emptied, self.delta) {
                    Some(m) => {
                        w.remove(n, t);
                        w.add(m, t);
                        moves.push((t, m));
                    }
                    None => break,
                }
            }
            if moves.len() < members.len() {
                for &(t, m) in moves.iter().rev() {
                    w.remove(m, t);
                    w.add(n, t);
                }
                emptied[n] = false;
                failures += 1;
                continue;
            }
            failures = 0;
            for (t, m) in moves {
                placement.migrate(TunnelId(id(t)), NodeId(id(m)), MigrationReason::Drain, plan);
            }
            budget -= members.len();
            w.set_active(n, false);
            placement.deactivate(NodeId(id(n)), plan);
        }
    }
}

impl Policy for RiskAware {
    fn name(&self) -> &'static str {
        "cloister"
    }

    fn step(&mut self, ctx: &StepContext<'_>, placement: &mut Placement, plan: &mut Plan) {
        self.update(ctx.alpha);
        let mut w = self.work(ctx.alpha, placement);
        self.relieve_hotspots(ctx, &mut w, placement, plan);
        if ctx.consolidate {
            self.drain(&mut w, placement, plan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::SpinUp;
    use crate::sim::over_fair_share;
    use crate::synth::SyntheticTrace;
    use proptest::prelude::*;

    #[test]
    fn normal_tail_values() {
        assert!((normal_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_tail(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_tail(-1.959_964) - 0.975).abs() < 1e-6);
        assert!((normal_tail(3.090_232) - 0.001).abs() < 1e-7);
    }

    #[test]
    fn change_model_separates_jumps_from_small_changes() {
        let mut s = ChangeStats::default();
        for i in 0..1000 {
            let d = if i % 100 == 0 {
                0.2
            } else if i % 2 == 0 {
                0.001
            } else {
                -0.001
            };
            s.push(d, 1.0);
        }
        let c = s.model();
        assert!((c.jump_rate - 0.01).abs() < 1e-9, "{c:?}");
        assert!((c.jump_mean - 0.2).abs() < 1e-9);
        assert!(c.var < 2e-6 && c.var > 9e-7, "{c:?}");
        assert!(c.mean.abs() < 1e-4);
    }

    fn work_for<'a>(alpha: &'a [f64], change: Vec<Change>) -> Work<'a> {
        let mut w = Work {
            alpha,
            change,
            nodes: Vec::new(),
            members: Vec::new(),
            active: Vec::new(),
            index: BestFit::new(),
            indexed: Vec::new(),
            scratch: Vec::new(),
            jumps: Vec::new(),
            risk: Vec::new(),
            prefix: Vec::new(),
            position: Vec::new(),
        };
        w.set_active(0, true);
        w
    }

    #[test]
    fn a_frequent_jumper_needs_room_a_steady_node_fills_up() {
        let steady = Change { var: 1e-6, ..Change::default() };
        let jumper =
            Change { var: 1e-6, jump_rate: 0.05, jump_mean: 0.2, jump_var: 1e-4, ..Change::default() };
        // Steady tunnels: a node at 0.97 is safe.
        let alpha = [0.3, 0.3, 0.3, 0.07];
        let mut w = work_for(&alpha, vec![steady; 4]);
        for t in 0..4 {
            w.add(0, t);
        }
        assert!(w.node_risk(0, 0.0) < 0.001, "{}", w.node_risk(0, 0.0));
        // Same loads with one frequent jumper: every jump overloads, and it is throttled.
        let mut w = work_for(&alpha, vec![steady, steady, steady, jumper]);
        for t in 0..4 {
            w.add(0, t);
        }
        assert!(w.node_risk(0, 0.0) > 0.04);
        // With room for the jump (0.75 load), the risk falls below δ = 1.5 %.
        let alpha = [0.3, 0.3, 0.1, 0.05];
        let mut w = work_for(&alpha, vec![steady, steady, steady, jumper]);
        for t in 0..4 {
            w.add(0, t);
        }
        assert!(w.node_risk(0, 0.0) < 0.015, "{}", w.node_risk(0, 0.0));
    }

    proptest! {
        /// The O(log m) water-fill agrees with a full max-min fair share computation.
        #[test]
        fn fast_water_fill_matches_fair_share(
            demands in proptest::collection::vec(0.0f64..0.3, 1..20),
            pick in 0usize..20,
            bump in 0.0f64..0.3,
        ) {
            let m = demands.len();
            let k = pick % m;
            let mut sorted: Vec<(f64, usize)> = demands.iter().copied().zip(0..m).collect();
            sorted.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut prefix = vec![0.0];
            for &(d, _) in &sorted {
                prefix.push(prefix.last().copied().unwrap_or(0.0) + d);
            }
            let r = sorted.iter().position(|&(_, i)| i == k).unwrap();
            let mut fast = vec![0.0; m];
            throttled(&sorted, &prefix, r, demands[k] + bump, &mut fast, 1.0);

            let mut after: Vec<(f64, usize)> = demands.iter().copied().zip(0..m).collect();
            after[k].0 += bump;
            let mut slow = vec![0.0; m];
            let over = over_fair_share(&mut after, 1.0);
            if over.is_empty() {
                let top = after.iter().copied().fold((f64::MIN, 0), |a, b| if b.0 >= a.0 { b } else { a });
                slow[top.1] = 1.0;
                // Ties for the largest may pick either.
                let tied: Vec<usize> = after.iter().filter(|d| d.0 == top.0).map(|d| d.1).collect();
                prop_assert!(tied.iter().any(|&i| fast[i] == 1.0));
                prop_assert_eq!(fast.iter().sum::<f64>(), 1.0);
            } else {
                for i in over { slow[i] = 1.0; }
                prop_assert_eq!(fast, slow);
            }
        }
    }

    /// Steps the policy by hand over a short trace: after every minute each tunnel is on
    /// exactly one active node, and no active node is above capacity unless a tunnel was
    /// left stuck for want of nodes.
    #[test]
    fn policy_keeps_placement_invariants() {
        let trace =
            SyntheticTrace { tunnels: 60, minutes: 180, seed: 4, ..Default::default() }.generate().unwrap();
        let scale = 1.0 / 5000.0;
        let alpha0: Vec<f64> = trace.minute(0).iter().map(|m| m * scale).collect();
        let mut placement = Placement::packed(&alpha0, 0.9);
        let spin = SpinUp { inactive_minutes: 0, shut_down_minutes: 0 };
        let mut plan = Plan::default();
        placement.set_reserve(placement.reserved() + 4, 0, spin, &mut plan);
        let mut policy = RiskAware::default();
        let sigma = vec![0.3; 60];
        for t in 0..180 {
            placement.tick(u32::try_from(t).unwrap());
            let alpha: Vec<f64> = trace.minute(t).iter().map(|m| m * scale).collect();
            let mut plan = Plan::default();
            let ctx = StepContext {
                minute: u32::try_from(t).unwrap(),
                alpha: &alpha,
                sigma: &sigma,
                consolidate: t % 10 == 9,
                threshold: 0.9,
                spin,
            };
            policy.step(&ctx, &mut placement, &mut plan);
            assert!(placement.check(), "minute {t}");
            if plan.stuck.is_empty() {
                for (n, l) in placement.loads(&alpha).iter().enumerate() {
                    assert!(*l <= 1.0 + 1e-9, "minute {t}: node {n} at {l}");
                }
            }
            for m in &plan.migrations {
                assert_ne!(m.from, m.to);
            }
        }
    }
}
