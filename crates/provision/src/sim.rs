//! The trace-driven simulator and Protego's metrics (§7.4).
//!
//! Minute `t` of the trace is served by the placement decided at the end of minute `t − 1`
//! (from usage measured up to `t − 1`); the first minute is served by a Best Fit Decreasing
//! packing of its own usage (a warm start). At the end of each minute the control node sees
//! that minute's per-tunnel usage (offered load, as the steering node measures it), updates
//! the usage windows, recomputes the reserve every `reserve_every` minutes, and lets the
//! policy plan the next minute.
//!
//! The reserve (active + inactive + booting nodes) is `⌈C/TH⌉` from the capacity model plus
//! the largest fragmentation overhead (active nodes beyond `⌈Σα/TH⌉`) observed since the
//! last recomputation: §5.3 assumes fragmentation away, but a real placement has some.
//!
//! A tunnel's bandwidth guarantee is violated in a minute when its node's demand exceeds the
//! node's capacity and the tunnel's demand exceeds its max-min fair share there (§7.4
//! assumes a completely fair scheduler).

use crate::capacity::CapacityModel;
use crate::dist::{Aggregate, Grid, UsageWindow};
use crate::error::{Parameter, ProvisionError};
use crate::placement::{MigrationReason, NodeState, Placement, Plan, SpinUp};
use crate::policy::{Policy, PolicyKind, StepContext};
use crate::trace::Trace;

/// Model and simulation parameters (defaults: the paper's §7.4 setting).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// Data node capacity in Mbit/s (5000).
    pub node_capacity_mbps: f64,
    /// Per-tunnel rate limit in Mbit/s (1500, so σ_i = 0.3).
    pub tunnel_limit_mbps: f64,
    /// Hotspot threshold TH (0.9).
    pub threshold: f64,
    /// Violation tolerance ε of the reserve (0.05; the paper's "0.95" read as 1 − ε).
    pub epsilon: f64,
    /// Sliding usage window, minutes (60).
    pub window: usize,
    /// Histogram bins per rate limit (64).
    pub bins: usize,
    /// Minutes between reserve recomputations (60).
    pub reserve_every: usize,
    /// Node spin-up latencies.
    pub spin: SpinUp,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_capacity_mbps: 5000.0,
            tunnel_limit_mbps: 1500.0,
            threshold: 0.9,
            epsilon: 0.05,
            window: 60,
            bins: 64,
            reserve_every: 60,
            spin: SpinUp::default(),
        }
    }
}

impl Config {
    /// σ = tunnel limit / node capacity.
    pub fn sigma(&self) -> f64 {
        self.tunnel_limit_mbps / self.node_capacity_mbps
    }

    /// Checks every parameter (ε ∈ (0,1), TH ∈ (σ, 1], positive sizes).
    pub fn validate(&self) -> Result<CapacityModel, ProvisionError> {
        if !(self.node_capacity_mbps.is_finite() && self.node_capacity_mbps > 0.0) {
            return Err(ProvisionError::param(
                Parameter::NodeCapacity,
                self.node_capacity_mbps,
                "a positive number",
            ));
        }
        if !(self.tunnel_limit_mbps.is_finite() && self.tunnel_limit_mbps > 0.0) {
            return Err(ProvisionError::param(
                Parameter::TunnelLimit,
                self.tunnel_limit_mbps,
                "a positive number",
            ));
        }
        if self.window == 0 || self.window > 100_000 {
            return Err(ProvisionError::param(
                Parameter::Window,
                self.window as f64,
                "in 1..=100000 minutes",
            ));
        }
        if self.reserve_every == 0 {
            return Err(ProvisionError::param(Parameter::ReserveEvery, 0.0, "at least 1 minute"));
        }
        Grid::new(self.sigma(), self.bins)?;
        CapacityModel::new(self.epsilon, self.threshold, self.sigma())
    }
}

/// Per-minute series of one run, in Gbit/s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Aggregate demand of all tunnels.
    pub demand: Vec<f64>,
    /// Capacity of active nodes.
    pub active: Vec<f64>,
    /// Capacity of reserved nodes (active + inactive + booting).
    pub reserved: Vec<f64>,
}

/// The outcome of one simulated day (or trace).
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Policy name.
    pub policy: &'static str,
    /// Consolidation interval, minutes.
    pub interval: u32,
    /// Number of tunnels.
    pub tunnels: usize,
    /// Number of minutes simulated.
    pub minutes: usize,
    /// Mean aggregate demand, Gbit/s.
    pub demand_gbps: f64,
    /// Mean active capacity, Gbit/s (the paper's "Active VM capacity").
    pub active_gbps: f64,
    /// Mean reserved capacity (active + inactive + booting), Gbit/s.
    pub reserved_gbps: f64,
    /// Peak active capacity, Gbit/s.
    pub peak_active_gbps: f64,
    /// Resource saving against one dedicated node per tunnel with 1+1 HA:
    /// `1 − active / (2 · tunnels · tunnel limit)`.
    pub saving: f64,
    /// Daily bandwidth guarantee met by 99 % of the tunnels (the paper's "99th-percentile").
    pub guarantee_p99: f64,
    /// Mean daily bandwidth guarantee over tunnels.
    pub guarantee_mean: f64,
    /// Worst tunnel's daily bandwidth guarantee.
    pub guarantee_min: f64,
    /// Migrations per hour (all reasons).
    pub migrations_per_hour: f64,
    /// Migrations per hour caused by hotspots.
    pub hotspot_migrations_per_hour: f64,
    /// Node-minutes with demand above capacity.
    pub overloaded_node_minutes: u64,
    /// Tunnel-minutes that found no node in a hotspot pass.
    pub stuck_tunnel_minutes: u64,
    /// Nodes booted from shut down.
    pub boots: u64,
    /// Consolidations skipped for lack of nodes.
    pub skipped_consolidations: u64,
    /// Per-minute series.
    pub series: Series,
    /// Per-tunnel violation minutes, indexed like the trace's tunnels.
    pub violation_minutes: Vec<u32>,
}

/// The reserve over time: computed once per trace, shared by every policy and interval.
#[derive(Debug, Clone, PartialEq)]
pub struct ReserveSchedule {
    /// Reserve in nodes, from each recomputation minute until the next.
    pub nodes: Vec<usize>,
    /// `C` in node units at each minute.
    pub capacity: Vec<f64>,
}

/// A trace prepared for simulation.
#[derive(Debug)]
pub struct Simulator<'a> {
    trace: &'a Trace,
    config: Config,
    model: CapacityModel,
    sigma: Vec<f64>,
    reserve: ReserveSchedule,
}

impl<'a> Simulator<'a> {
    /// Validates the configuration and computes the reserve schedule from the trace's
    /// sliding-window usage distributions.
    pub fn new(trace: &'a Trace, config: Config) -> Result<Self, ProvisionError> {
        let model = config.validate()?;
        let sigma = vec![config.sigma(); trace.tunnels()];
        let reserve = reserve_schedule(trace, &config, &model, &sigma)?;
        Ok(Self { trace, config, model, sigma, reserve })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The capacity model.
    pub fn model(&self) -> &CapacityModel {
        &self.model
    }

    /// The reserve schedule.
    pub fn reserve(&self) -> &ReserveSchedule {
        &self.reserve
    }

    /// Per-tunnel usage of a minute in node-capacity units.
    fn alpha(&self, minute: usize, out: &mut Vec<f64>) {
        out.clear();
        let scale = 1.0 / self.config.node_capacity_mbps;
        out.extend(self.trace.minute(minute).iter().map(|m| m * scale));
    }

    /// Runs every policy with every interval (policy-major order). `progress(label, done,
    /// total)` reports each run's progress.
    pub fn run_all(
        &self,
        policies: &[PolicyKind],
        intervals: &[u32],
        progress: &mut dyn FnMut(&str, usize, usize),
    ) -> Result<Vec<RunReport>, ProvisionError> {
        let mut out = Vec::with_capacity(policies.len() * intervals.len());
        for kind in policies {
            for &interval in intervals {
                let label = format!("{kind} {interval} min");
                let mut policy = kind.build();
                let report = self.run(policy.as_mut(), interval, &mut |done, total| {
                    progress(&label, done, total);
                })?;
                out.push(report);
            }
        }
        Ok(out)
    }

    /// The model's reserve `⌈C/TH⌉` per minute, in Gbit/s.
    pub fn model_reserve_gbps(&self) -> Vec<f64> {
        let node_gbps = self.config.node_capacity_mbps / 1000.0;
        self.reserve.nodes.iter().map(|&n| n as f64 * node_gbps).collect()
    }

    /// Runs one policy with one consolidation interval. `progress(done, total)` is called
    /// every few minutes of simulated time.
    pub fn run(
        &self,
        policy: &mut dyn Policy,
        interval: u32,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<RunReport, ProvisionError> {
        if interval == 0 {
            return Err(ProvisionError::param(Parameter::Interval, 0.0, "at least 1 minute"));
        }
        let cfg = &self.config;
        let n = self.trace.tunnels();
        let minutes = self.trace.minutes();
        let node_gbps = cfg.node_capacity_mbps / 1000.0;
        let mut alpha = Vec::with_capacity(n);
        self.alpha(0, &mut alpha);
        let mut placement = Placement::packed(&alpha, cfg.threshold);
        let mut violated = vec![0u32; n];
        let mut series = Series::default();
        let mut totals = Totals::default();
        let mut scratch = Vec::new();
        let mut fragmentation = 0usize;
        for t in 0..minutes {
            let now = to_u32(t);
            placement.tick(now);
            if t > 0 {
                self.alpha(t, &mut alpha);
            }
            // Serve minute t with the current placement.
            let loads = placement.loads(&alpha);
            let demand: f64 = alpha.iter().sum();
            let mut active = 0usize;
            for (node, &load) in loads.iter().enumerate() {
                let id = crate::placement::NodeId(to_u32(node));
                if placement.state(id) != NodeState::Active {
                    continue;
                }
                active += 1;
                if load > 1.0 + 1e-12 {
                    totals.overloaded += 1;
                    scratch.clear();
                    scratch.extend(placement.members(id).iter().map(|&m| (alpha[m.index()], m)));
                    for m in over_fair_share(&mut scratch, 1.0) {
                        violated[m.index()] += 1;
                    }
                }
            }
            series.demand.push(demand * node_gbps);
            series.active.push(active as f64 * node_gbps);
            series.reserved.push(placement.reserved() as f64 * node_gbps);

            // End of minute t: reserve and plan for t + 1.
            let mut plan = Plan::default();
            // §5.3 assumes no external fragmentation; the reserve adds the largest packing
            // overhead (active nodes beyond ⌈Σα/TH⌉) seen since it was last set.
            let packed = crate::num::ceil_count(demand / cfg.threshold - 1e-9);
            fragmentation = fragmentation.max(active.saturating_sub(packed));
            if t % cfg.reserve_every == 0 {
                let target = self.reserve.nodes[t] + fragmentation;
                placement.set_reserve(target, now, cfg.spin, &mut plan);
                fragmentation = 0;
            }
            let ctx = StepContext {
                minute: now,
                alpha: &alpha,
                sigma: &self.sigma,
                consolidate: (t + 1) % interval as usize == 0,
                threshold: cfg.threshold,
                spin: cfg.spin,
            };
            policy.step(&ctx, &mut placement, &mut plan);
            totals.add(&plan);
            if t % 16 == 15 || t + 1 == minutes {
                progress(t + 1, minutes);
            }
        }
        debug_assert!(placement.check());
        Ok(self.report(policy.name(), interval, &violated, series, &totals))
    }

    fn report(
        &self,
        policy: &'static str,
        interval: u32,
        violated: &[u32],
        series: Series,
        totals: &Totals,
    ) -> RunReport {
        let n = self.trace.tunnels();
        let minutes = self.trace.minutes();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let mut guarantee: Vec<f64> = violated.iter().map(|&v| 1.0 - f64::from(v) / minutes as f64).collect();
        guarantee.sort_by(f64::total_cmp);
        let active_gbps = mean(&series.active);
        let dedicated_gbps = 2.0 * n as f64 * self.config.tunnel_limit_mbps / 1000.0;
        let hours = minutes as f64 / 60.0;
        RunReport {
            policy,
            interval,
            tunnels: n,
            minutes,
            demand_gbps: mean(&series.demand),
            active_gbps,
            reserved_gbps: mean(&series.reserved),
            peak_active_gbps: series.active.iter().copied().fold(0.0, f64::max),
            saving: 1.0 - active_gbps / dedicated_gbps,
            guarantee_p99: percentile_met_by(&guarantee, 0.99),
            guarantee_mean: mean(&guarantee),
            guarantee_min: guarantee.first().copied().unwrap_or(1.0),
            migrations_per_hour: totals.migrations as f64 / hours,
            hotspot_migrations_per_hour: totals.hotspot_migrations as f64 / hours,
            overloaded_node_minutes: totals.overloaded,
            stuck_tunnel_minutes: totals.stuck,
            boots: totals.boots,
            skipped_consolidations: totals.skipped,
            series,
            violation_minutes: violated.to_vec(),
        }
    }
}

#[derive(Debug, Default)]
struct Totals {
    migrations: u64,
    hotspot_migrations: u64,
    overloaded: u64,
    stuck: u64,
    boots: u64,
    skipped: u64,
}

impl Totals {
    fn add(&mut self, plan: &Plan) {
        self.migrations += plan.migrations.len() as u64;
        self.hotspot_migrations +=
            plan.migrations.iter().filter(|m| m.reason == MigrationReason::Hotspot).count() as u64;
        self.stuck += plan.stuck.len() as u64;
        self.boots += plan.booted.len() as u64;
        self.skipped += u64::from(plan.consolidation_skipped);
    }
}

fn to_u32(t: usize) -> u32 {
    u32::try_from(t).unwrap_or(u32::MAX)
}

/// The value met or exceeded by a `share` of the sorted (ascending) values: at most
/// `1 − share` of them fall below it.
pub fn percentile_met_by(sorted: &[f64], share: f64) -> f64 {
    if sorted.is_empty() {
        return 1.0;
    }
    let need = crate::num::ceil_count(share * sorted.len() as f64 - 1e-9);
    let idx = sorted.len() - need.clamp(1, sorted.len());
    sorted[idx]
}

/// Max-min fair sharing of `capacity` among `(demand, who)`: returns those whose demand
/// exceeds their fair share (the water level). Sorts `demands` in place.
pub fn over_fair_share<T: Copy>(demands: &mut [(f64, T)], capacity: f64) -> Vec<T> {
    demands.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut left = capacity;
    for (i, &(d, _)) in demands.iter().enumerate() {
        let share = left / (demands.len() - i) as f64;
        if d > share + 1e-12 {
            return demands[i..].iter().map(|&(_, w)| w).collect();
        }
        left -= d;
    }
    Vec::new()
}

/// Computes the reserve schedule: every `reserve_every` minutes, `⌈C/TH⌉` from the
/// convolution of every tunnel's usage histogram over the last `window` minutes.
fn reserve_schedule(
    trace: &Trace,
    cfg: &Config,
    model: &CapacityModel,
    sigma: &[f64],
) -> Result<ReserveSchedule, ProvisionError> {
    let grid = Grid::new(cfg.sigma(), cfg.bins)?;
    let mut windows: Vec<UsageWindow> =
        sigma.iter().map(|&s| UsageWindow::new(grid, s, cfg.window)).collect();
    let scale = 1.0 / cfg.node_capacity_mbps;
    let minutes = trace.minutes();
    let mut nodes = Vec::with_capacity(minutes);
    let mut capacity = Vec::with_capacity(minutes);
    let (mut cur_nodes, mut cur_c) = (0, 0.0);
    for t in 0..minutes {
        for (w, &mbps) in windows.iter_mut().zip(trace.minute(t)) {
            w.push(mbps * scale);
        }
        if t % cfg.reserve_every == 0 {
            let agg = Aggregate::of(windows.iter().map(UsageWindow::pmf).collect());
            let r = model.reserve_of(grid, &agg);
            cur_nodes = r.nodes;
            cur_c = r.capacity;
        }
        nodes.push(cur_nodes);
        capacity.push(cur_c);
    }
    Ok(ReserveSchedule { nodes, capacity })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Protego;
    use crate::synth::SyntheticTrace;

    #[test]
    fn fair_share_water_filling() {
        let mut d = [(0.1, 'a'), (0.5, 'b'), (0.6, 'c')];
        // Level: 0.1 served, then 0.9 / 2 = 0.45 each: b and c are over.
        let mut over = over_fair_share(&mut d, 1.0);
        over.sort_unstable();
        assert_eq!(over, ['b', 'c']);
        let mut d = [(0.5, 'a'), (0.3, 'b'), (0.3, 'c')];
        // 0.3, 0.3 served; 0.4 left for a (0.5): only a is over.
        assert_eq!(over_fair_share(&mut d, 1.0), ['a']);
        let mut d = [(0.5, 'a'), (0.5, 'b')];
        assert!(over_fair_share(&mut d, 1.0).is_empty());
    }

    #[test]
    fn percentile_met_by_99_percent() {
        let v: Vec<f64> = (0..170).map(f64::from).collect();
        // 99 % of 170 is 168.3: 169 tunnels must meet it, one may fall below.
        assert_eq!(percentile_met_by(&v, 0.99), 1.0);
        let v: Vec<f64> = (0..100).map(f64::from).collect();
        assert_eq!(percentile_met_by(&v, 0.99), 1.0);
        assert_eq!(percentile_met_by(&[0.5], 0.99), 0.5);
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let trace = SyntheticTrace { tunnels: 3, minutes: 5, ..Default::default() }.generate().unwrap();
        for cfg in [
            Config { epsilon: 0.0, ..Config::default() },
            Config { epsilon: 1.0, ..Config::default() },
            Config { threshold: 0.3, ..Config::default() },
            Config { threshold: 0.25, ..Config::default() },
            Config { node_capacity_mbps: 1000.0, ..Config::default() },
            Config { window: 0, ..Config::default() },
            Config { bins: 0, ..Config::default() },
            Config { reserve_every: 0, ..Config::default() },
        ] {
            assert!(Simulator::new(&trace, cfg).is_err(), "{cfg:?}");
        }
        let sim = Simulator::new(&trace, Config::default()).unwrap();
        assert!(sim.run(&mut Protego::default(), 0, &mut |_, _| {}).is_err());
    }

    #[test]
    fn small_run_is_consistent() {
        let trace = SyntheticTrace { tunnels: 40, minutes: 240, ..Default::default() }.generate().unwrap();
        let sim = Simulator::new(&trace, Config::default()).unwrap();
        let mut calls = 0;
        let r = sim.run(&mut Protego::default(), 10, &mut |_, _| calls += 1).unwrap();
        assert!(calls > 0);
        assert_eq!(r.series.active.len(), 240);
        assert!(r.active_gbps >= r.demand_gbps * 0.9);
        assert!(r.reserved_gbps >= r.active_gbps);
        assert!((0.0..=1.0).contains(&r.guarantee_p99));
        assert!(r.guarantee_min <= r.guarantee_p99 && r.guarantee_p99 <= 1.0);
        assert!(r.saving > 0.0 && r.saving < 1.0);
    }
}
