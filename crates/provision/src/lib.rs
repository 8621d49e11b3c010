//! Elastic provisioning for Cloister's data plane (Protego §5, evaluated as in §7.4).
//!
//! The control node decides how many data nodes to keep and which tunnel runs where:
//!
//! - [`dist`] and [`capacity`]: per-tunnel CPU-usage histograms over a sliding window,
//!   bounded by the tunnel's rate limit σ_i, their convolution into the aggregate `Y`
//!   (independent tunnels), and the reserve: the smallest `C` with `Pr(Y > C) ≤ ε`,
//!   padded to `⌈C/TH⌉` nodes.
//! - [`placement`] and [`binpack`]: node states (active, inactive, shut down, with spin-up
//!   latencies), hotspot detection (`β_j > TH`) with migration of the largest tunnels first
//!   by Best Fit, periodic Best Fit Decreasing consolidation. Decisions come out as a
//!   [`placement::Plan`]: migrations the control node executes later by rekeying.
//! - [`policy`]: Protego's policy and [`risk::RiskAware`], Cloister's own.
//! - [`sim`]: a trace-driven simulator with Protego's metrics (active capacity, resource
//!   saving against dedicated 1+1 nodes, daily bandwidth guarantee and its 99th percentile
//!   over tunnels, migrations per hour); [`trace`] reads and writes `tunnel,minute,mbps`
//!   CSV and [`synth`] generates a documented synthetic trace.
//! - `plot` (feature `plot`): PNG plots of runs.
//!
//! This crate does no I/O beyond reading and writing trace files and plots, talks to no data
//! node, and depends on nothing else in Cloister. Usage is in node-capacity units
//! throughout: a node has capacity 1, a tunnel limited to 1.5 Gbit/s on 5 Gbit/s nodes has
//! σ = 0.3. See docs/provisioning.md for the model, the policies and measured results.
#![forbid(unsafe_code)]

pub mod binpack;
pub mod capacity;
pub mod dist;
mod error;
mod num;
pub mod placement;
#[cfg(feature = "plot")]
pub mod plot;
pub mod policy;
pub mod report;
pub mod risk;
mod rng;
pub mod sim;
pub mod synth;
pub mod trace;

pub use error::{Parameter, ProvisionError, TraceField};
