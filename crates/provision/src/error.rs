//! The one error type of this crate.

use core::fmt;

/// A field of a trace row (`tunnel,minute,mbps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceField {
    /// The tunnel name (first column).
    Tunnel,
    /// The minute index (second column).
    Minute,
    /// The throughput in Mbit/s (third column).
    Mbps,
}

impl fmt::Display for TraceField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tunnel => "tunnel",
            Self::Minute => "minute",
            Self::Mbps => "mbps",
        })
    }
}

/// A tunable of the model, the placement or the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parameter {
    /// Violation tolerance ε of the capacity model (§5.3).
    Epsilon,
    /// Hotspot threshold TH (§5.4).
    Threshold,
    /// Data node capacity in Mbit/s.
    NodeCapacity,
    /// Per-tunnel rate limit in Mbit/s.
    TunnelLimit,
    /// Per-tunnel rate limit as a fraction of node capacity (σ).
    Sigma,
    /// Length of the sliding usage window in minutes.
    Window,
    /// Histogram bins per tunnel rate limit.
    Bins,
    /// Minutes between two recomputations of the reserve.
    ReserveEvery,
    /// Consolidation interval in minutes.
    Interval,
    /// Number of tunnels of a synthetic trace.
    Tunnels,
    /// Number of minutes of a synthetic trace.
    Minutes,
    /// Risk target of the risk-aware policy.
    Risk,
    /// Migration budget of the risk-aware policy.
    MigrationBudget,
}

impl fmt::Display for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Epsilon => "epsilon",
            Self::Threshold => "hotspot threshold TH",
            Self::NodeCapacity => "node capacity (Mbit/s)",
            Self::TunnelLimit => "tunnel rate limit (Mbit/s)",
            Self::Sigma => "sigma (tunnel rate limit / node capacity)",
            Self::Window => "usage window (minutes)",
            Self::Bins => "histogram bins",
            Self::ReserveEvery => "reserve recomputation period (minutes)",
            Self::Interval => "consolidation interval (minutes)",
            Self::Tunnels => "tunnel count",
            Self::Minutes => "minute count",
            Self::Risk => "risk target",
            Self::MigrationBudget => "migration budget",
        })
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvisionError {
    /// A trace row does not have exactly three comma-separated fields.
    #[error("trace line {line}: expected 3 fields `tunnel,minute,mbps`, found {found}")]
    FieldCount {
        /// 1-based line number.
        line: usize,
        /// Number of fields found.
        found: usize,
    },
    /// A trace field is empty.
    #[error("trace line {line}: field `{field}` is missing (empty)")]
    MissingField {
        /// 1-based line number.
        line: usize,
        /// The empty field.
        field: TraceField,
    },
    /// A numeric trace field does not parse.
    #[error("trace line {line}: field `{field}` is not a valid {expected}: {text:?}")]
    BadNumber {
        /// 1-based line number.
        line: usize,
        /// The offending field.
        field: TraceField,
        /// What the field should hold.
        expected: &'static str,
        /// The field text (cut to 32 characters).
        text: String,
    },
    /// A throughput is negative.
    #[error("trace line {line}: throughput {mbps} Mbit/s is negative")]
    NegativeRate {
        /// 1-based line number.
        line: usize,
        /// The value read.
        mbps: f64,
    },
    /// A throughput is NaN or infinite.
    #[error("trace line {line}: throughput is not a finite number")]
    NonFiniteRate {
        /// 1-based line number.
        line: usize,
    },
    /// A throughput exceeds the per-tunnel rate limit σ.
    #[error(
        "trace line {line}: throughput {mbps} Mbit/s exceeds the tunnel rate limit of {limit} Mbit/s \
         (tunnels are rate limited; raise the limit if the trace is right)"
    )]
    AboveRateLimit {
        /// 1-based line number.
        line: usize,
        /// The value read.
        mbps: f64,
        /// The configured limit.
        limit: f64,
    },
    /// A minute index is implausibly large.
    #[error("trace line {line}: minute {minute} is beyond the supported maximum {max}")]
    MinuteTooLarge {
        /// 1-based line number.
        line: usize,
        /// The value read.
        minute: u64,
        /// The largest minute accepted.
        max: u64,
    },
    /// The same (tunnel, minute) appears twice.
    #[error("trace line {line}: tunnel {tunnel:?} has a second sample for minute {minute}")]
    DuplicateSample {
        /// 1-based line number of the second occurrence.
        line: usize,
        /// Tunnel name.
        tunnel: String,
        /// Minute index.
        minute: u32,
    },
    /// A tunnel lacks a sample for some minute of the trace.
    #[error("trace: tunnel {tunnel:?} has no sample for minute {minute} (every tunnel needs every minute)")]
    MissingSample {
        /// Tunnel name.
        tunnel: String,
        /// The first minute missing.
        minute: u32,
    },
    /// The trace has no data rows.
    #[error("trace has no samples")]
    EmptyTrace,
    /// A parameter is out of its valid range.
    #[error("{parameter} = {value} is out of range: must be {expected}")]
    InvalidParameter {
        /// Which parameter.
        parameter: Parameter,
        /// The value given.
        value: f64,
        /// The valid range, in words.
        expected: &'static str,
    },
    /// The hotspot threshold does not exceed the largest tunnel rate limit (§5.4 needs TH > max α).
    #[error(
        "hotspot threshold TH = {threshold} must exceed the largest tunnel rate limit \
         σ = {sigma} (tunnel limit / node capacity)"
    )]
    ThresholdNotAboveSigma {
        /// TH.
        threshold: f64,
        /// The largest σ_i.
        sigma: f64,
    },
    /// Reading or writing a trace failed.
    #[error("trace I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Drawing a plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The PNG being written.
        path: std::path::PathBuf,
        /// What the plotting backend reported.
        reason: String,
    },
}

impl ProvisionError {
    /// Shorthand for [`ProvisionError::InvalidParameter`].
    pub(crate) fn param(parameter: Parameter, value: f64, expected: &'static str) -> Self {
        Self::InvalidParameter { parameter, value, expected }
    }
}
