//! The minimum reserve: the smallest capacity `C` with `Pr(Y > C) ≤ ε`, padded to `C / TH`
//! (Protego §5.3).

use crate::dist::{Aggregate, Grid, Pmf};
use crate::error::{Parameter, ProvisionError};

/// Violation tolerance and hotspot threshold, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityModel {
    epsilon: f64,
    threshold: f64,
}

/// What the model says to reserve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserve {
    /// `C`: smallest capacity (node units) with `Pr(Y > C) ≤ ε`.
    pub capacity: f64,
    /// Nodes to keep active or inactive: `⌈C / TH⌉`.
    pub nodes: usize,
    /// Upper bound on `Pr(Y > C)` (at most ε).
    pub tail: f64,
    /// Mean of `Y` (node units).
    pub mean: f64,
}

impl CapacityModel {
    /// Validates `ε ∈ (0, 1)` and `TH ∈ (max σ_i, 1]`.
    pub fn new(epsilon: f64, threshold: f64, sigma_max: f64) -> Result<Self, ProvisionError> {
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(ProvisionError::param(Parameter::Epsilon, epsilon, "in the open interval (0, 1)"));
        }
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Err(ProvisionError::param(
                Parameter::Threshold,
                threshold,
                "in (0, 1] (a fraction of a node's capacity)",
            ));
        }
        if !(sigma_max > 0.0 && sigma_max < 1.0) {
            return Err(ProvisionError::param(
                Parameter::Sigma,
                sigma_max,
                "in (0, 1): a tunnel's rate limit must be below the node capacity",
            ));
        }
        if threshold <= sigma_max {
            return Err(ProvisionError::ThresholdNotAboveSigma { threshold, sigma: sigma_max });
        }
        Ok(Self { epsilon, threshold })
    }

    /// ε.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// TH.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The reserve for tunnels with the given usage distributions (independent tunnels).
    pub fn reserve(&self, grid: Grid, pmfs: Vec<Pmf>) -> Reserve {
        let agg = Aggregate::of(pmfs);
        self.reserve_of(grid, &agg)
    }

    /// The reserve for an already computed aggregate.
    pub fn reserve_of(&self, grid: Grid, agg: &Aggregate) -> Reserve {
        let k = agg.min_capacity_index(self.epsilon);
        let capacity = grid.value(k);
        Reserve {
            capacity,
            nodes: crate::num::ceil_count(capacity / self.threshold - 1e-9),
            tail: agg.tail_bound(k),
            mean: agg.pmf.mean_index() * grid.step(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::UsageWindow;
    use crate::rng::Rng;

    #[test]
    fn impossible_parameters_are_errors() {
        for eps in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                CapacityModel::new(eps, 0.9, 0.3),
                Err(ProvisionError::InvalidParameter { parameter: Parameter::Epsilon, .. })
            ));
        }
        assert!(matches!(
            CapacityModel::new(0.05, 0.3, 0.3),
            Err(ProvisionError::ThresholdNotAboveSigma { .. })
        ));
        assert!(matches!(
            CapacityModel::new(0.05, 0.2, 0.3),
            Err(ProvisionError::ThresholdNotAboveSigma { .. })
        ));
        assert!(CapacityModel::new(0.05, 1.2, 0.3).is_err());
        assert!(CapacityModel::new(0.05, 0.9, 1.0).is_err());
        assert!(CapacityModel::new(0.05, 0.9, 0.3).is_ok());
    }

    /// Draws tunnels with varied, skewed usage; checks `Pr(Y > C) ≤ ε` by Monte Carlo on the
    /// raw samples (not on the binned histograms the model used).
    #[test]
    fn reserve_meets_epsilon_on_monte_carlo_samples() {
        let sigma = 0.3;
        let grid = Grid::new(sigma, 64).unwrap();
        let mut rng = Rng::new(99, 0);
        let tunnels = 200;
        let window = 120;
        let mut windows = Vec::new();
        for _ in 0..tunnels {
            let mut w = UsageWindow::new(grid, sigma, window);
            let base = rng.uniform(0.0, 0.2);
            let burst = rng.uniform(0.0, 0.2);
            for _ in 0..window {
                let x = if rng.open01() < burst { sigma } else { base * rng.uniform(0.5, 1.5) };
                w.push(x);
            }
            windows.push(w);
        }
        for eps in [0.2, 0.05, 0.01] {
            let model = CapacityModel::new(eps, 0.9, sigma).unwrap();
            let r = model.reserve(grid, windows.iter().map(UsageWindow::pmf).collect());
            assert!(r.tail <= eps);
            let samples: Vec<Vec<f64>> = windows.iter().map(|w| w.samples().collect()).collect();
            let trials = 40_000;
            let mut over = 0u32;
            for _ in 0..trials {
                let y: f64 = samples.iter().map(|s| s[rng.below(s.len())]).sum();
                if y > r.capacity {
                    over += 1;
                }
            }
            let p = f64::from(over) / f64::from(trials);
            let sd = (eps * (1.0 - eps) / f64::from(trials)).sqrt();
            assert!(p <= eps + 4.0 * sd, "eps {eps}: Pr(Y > {}) = {p}", r.capacity);
            // And C is not wastefully large: a little below C is violated more often than ε.
            let lower = r.capacity - 4.0 * grid.step();
            let mut over = 0u32;
            for _ in 0..trials {
                let y: f64 = samples.iter().map(|s| s[rng.below(s.len())]).sum();
                if y > lower {
                    over += 1;
                }
            }
            let p = f64::from(over) / f64::from(trials);
            assert!(p > eps - 4.0 * sd, "eps {eps}: C is loose ({p} at C - 4h)");
            assert_eq!(r.nodes, crate::num::ceil_count(r.capacity / 0.9 - 1e-9));
        }
    }
}
