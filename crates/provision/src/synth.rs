//! A documented, seeded generator of synthetic tunnel traces.
//!
//! Protego's production trace (170 tunnels, 24 h, 1-minute averages) is not public, so the
//! simulator ships this stand-in. Every tunnel's throughput, as a fraction `u ∈ [0, 1]` of
//! its rate limit, is
//!
//! ```text
//! u(t) = clamp( p · (b + (1 − b) · d(t)) · exp(η(t) − s²/2) + burst(t), 0, 1 )
//! d(t) = ((1 + cos(2π (t − φ) / 1440)) / 2)^k        diurnal shape, peak at minute φ
//! η(t) = ρ η(t−1) + √(1 − ρ²) · s · N(0,1)           minute-scale AR(1) noise, log scale
//! ```
//!
//! with per-tunnel parameters drawn once:
//!
//! | symbol | meaning | distribution |
//! |---|---|---|
//! | `p` | daily peak, fraction of the rate limit | Pareto(x_m = [`PEAK_MIN`], α = [`PEAK_SHAPE`]) capped at 1 (heavy tail: ~12 % of tunnels peak at their limit) |
//! | `b` | night floor, fraction of the peak | U(0.05, 0.40) |
//! | `φ` | minute of the daily peak | 75 %: 14:00 + N(0, 150 min) (business hours, a few time zones); 25 %: U(0, 1440) (global or batch tenants) |
//! | `k` | peak sharpness | U(1, 4) |
//! | `s`, `ρ` | noise level and minute correlation | s ~ U(0.05, 0.20), ρ = 0.9 |
//! | bursts | Poisson arrivals | rate log-uniform in [0.05, 1] per hour; duration exponential, mean 4 min (≥ 1); height U(0.2, 1) of the headroom `1 − u` |
//!
//! The value in Mbit/s is `u` times the rate limit (1.5 Gbit/s by default, the paper's
//! per-tunnel maximum), rounded to 1 kbit/s. [`PEAK_MIN`] was calibrated once so that 170
//! tunnels average about 57.5 Gbit/s in aggregate, the mean Protego reports for its trace
//! (§7.4); nothing else was fitted. Tunnel `i` draws from its own random stream
//! `(seed, i)`, so the first 170 tunnels of a 10,000-tunnel trace are the 170-tunnel trace.

use core::f64::consts::TAU;

use crate::error::{Parameter, ProvisionError};
use crate::rng::Rng;
use crate::trace::Trace;

/// Scale `x_m` of the Pareto law of daily peaks (fraction of the rate limit).
pub const PEAK_MIN: f64 = 0.165;
/// Shape `α` of the Pareto law of daily peaks (smaller is heavier-tailed).
pub const PEAK_SHAPE: f64 = 1.2;
/// Minutes in a day.
pub const DAY_MINUTES: usize = 1440;

/// Parameters of a synthetic trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticTrace {
    /// Number of tunnels (Protego: 170).
    pub tunnels: usize,
    /// Number of 1-minute samples per tunnel (a day: 1440).
    pub minutes: usize,
    /// Seed: the same seed gives the same trace.
    pub seed: u64,
    /// Per-tunnel rate limit in Mbit/s (Protego: 1500).
    pub limit_mbps: f64,
}

impl Default for SyntheticTrace {
    fn default() -> Self {
        Self { tunnels: 170, minutes: DAY_MINUTES, seed: 1, limit_mbps: 1500.0 }
    }
}

/// Per-tunnel parameters, drawn once.
struct Profile {
    peak: f64,
    floor: f64,
    phase: f64,
    sharpness: f64,
    noise: f64,
    burst_rate_per_minute: f64,
}

const NOISE_RHO: f64 = 0.9;
const BURST_MEAN_MINUTES: f64 = 4.0;
const BUSINESS_PEAK_MINUTE: f64 = 14.0 * 60.0;
const BUSINESS_SPREAD_MINUTES: f64 = 150.0;
const BUSINESS_SHARE: f64 = 0.75;

impl Profile {
    fn draw(rng: &mut Rng) -> Self {
        let peak = (PEAK_MIN * rng.open01().powf(-1.0 / PEAK_SHAPE)).min(1.0);
        let floor = rng.uniform(0.05, 0.40);
        let phase = if rng.open01() < BUSINESS_SHARE {
            BUSINESS_PEAK_MINUTE + BUSINESS_SPREAD_MINUTES * rng.normal()
        } else {
            rng.uniform(0.0, DAY_MINUTES as f64)
        };
        let sharpness = rng.uniform(1.0, 4.0);
        let noise = rng.uniform(0.05, 0.20);
        let per_hour = (rng.uniform(0.05f64.ln(), 1.0f64.ln())).exp();
        Self { peak, floor, phase, sharpness, noise, burst_rate_per_minute: per_hour / 60.0 }
    }
}

impl SyntheticTrace {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ProvisionError> {
        if self.tunnels == 0 || self.tunnels > 1_000_000 {
            return Err(ProvisionError::param(Parameter::Tunnels, self.tunnels as f64, "in 1..=1000000"));
        }
        if self.minutes == 0 || self.minutes > 31 * DAY_MINUTES {
            return Err(ProvisionError::param(
                Parameter::Minutes,
                self.minutes as f64,
                "in 1..=44640 (31 days)",
            ));
        }
        if !(self.limit_mbps.is_finite() && self.limit_mbps > 0.0) {
            return Err(ProvisionError::param(Parameter::TunnelLimit, self.limit_mbps, "a positive number"));
        }
        Ok(())
    }

    /// Generates the trace.
    pub fn generate(&self) -> Result<Trace, ProvisionError> {
        self.validate()?;
        let width = self.tunnels.saturating_sub(1).to_string().len().max(3);
        let names = (0..self.tunnels).map(|i| format!("t{i:0width$}")).collect::<Vec<_>>();
        let series = (0..self.tunnels).map(|i| self.series(i as u64)).collect::<Vec<_>>();
        Trace::from_series(names, &series, self.limit_mbps)
    }

    /// One tunnel's series in Mbit/s.
    fn series(&self, tunnel: u64) -> Vec<f64> {
        let mut rng = Rng::new(self.seed, tunnel);
        let p = Profile::draw(&mut rng);
        let mut eta = p.noise * rng.normal();
        let innovation = (1.0 - NOISE_RHO * NOISE_RHO).sqrt() * p.noise;
        let bias = p.noise * p.noise / 2.0;
        let mut burst_left = 0u32;
        let mut burst_height = 0.0;
        let mut out = Vec::with_capacity(self.minutes);
        for t in 0..self.minutes {
            let angle = TAU * (t as f64 - p.phase) / DAY_MINUTES as f64;
            let diurnal = ((1.0 + angle.cos()) / 2.0).powf(p.sharpness);
            eta = NOISE_RHO * eta + innovation * rng.normal();
            let mut u = p.peak * (p.floor + (1.0 - p.floor) * diurnal) * (eta - bias).exp();
            if burst_left == 0 && rng.open01() < p.burst_rate_per_minute {
                // Whole minutes, at least one, at most ten hours.
                let minutes = crate::num::ceil_count(rng.exponential(BURST_MEAN_MINUTES)).clamp(1, 600);
                burst_left = u32::try_from(minutes).unwrap_or(600);
                burst_height = rng.uniform(0.2, 1.0);
            }
            if burst_left > 0 {
                burst_left -= 1;
                u += burst_height * (1.0 - u).max(0.0);
            }
            let u = u.clamp(0.0, 1.0);
            out.push(((u * self.limit_mbps * 1000.0).round() / 1000.0).min(self.limit_mbps));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace_and_prefix_stability() {
        let a = SyntheticTrace { tunnels: 20, minutes: 300, ..Default::default() };
        assert_eq!(a.generate().unwrap(), a.generate().unwrap());
        let b = SyntheticTrace { tunnels: 30, ..a };
        let (ta, tb) = (a.generate().unwrap(), b.generate().unwrap());
        for m in 0..300 {
            assert_eq!(ta.minute(m), &tb.minute(m)[..20]);
        }
        let c = SyntheticTrace { seed: 2, ..a };
        assert_ne!(ta, c.generate().unwrap());
    }

    #[test]
    fn default_trace_matches_the_papers_scale() {
        let t = SyntheticTrace::default().generate().unwrap();
        assert_eq!((t.tunnels(), t.minutes()), (170, 1440));
        let mean_gbps = t.mean_aggregate_mbps() / 1000.0;
        // Protego §7.4: 57.49 Gbit/s average aggregate over 170 tunnels.
        assert!((50.0..65.0).contains(&mean_gbps), "{mean_gbps}");
        assert!(t.max_mbps() <= 1500.0 && t.max_mbps() > 1400.0);
    }

    #[test]
    fn invalid_parameters_are_errors() {
        let bad = SyntheticTrace { tunnels: 0, ..Default::default() };
        assert!(matches!(
            bad.generate(),
            Err(ProvisionError::InvalidParameter { parameter: Parameter::Tunnels, .. })
        ));
        let bad = SyntheticTrace { limit_mbps: -1.0, ..Default::default() };
        assert!(bad.generate().is_err());
    }
}
