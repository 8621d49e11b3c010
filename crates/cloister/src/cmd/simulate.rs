//! `cloister simulate`: trace-driven simulation of elastic provisioning (Protego §5, §7.4),
//! and `cloister simulate gen-trace`: the documented synthetic trace. The logic is in the
//! provision crate; this file parses arguments, prints and draws.

use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use provision::placement::SpinUp;
use provision::policy::PolicyKind;
use provision::sim::{Config, RunReport, Simulator};
use provision::synth::SyntheticTrace;
use provision::trace::Trace;
use provision::{plot, report};

/// Arguments of `cloister simulate`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// Boxed: the run options are large and the other subcommands small.
    #[command(flatten)]
    run: Box<RunArgs>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Write a synthetic trace (documented in docs/provisioning.md) as `tunnel,minute,mbps` CSV.
    GenTrace(GenArgs),
}

#[derive(Debug, clap::Args)]
struct GenArgs {
    /// Output CSV file.
    #[arg(long)]
    out: PathBuf,
    /// Number of tunnels (Protego: 170).
    #[arg(long, default_value_t = 170)]
    tunnels: usize,
    /// Length, e.g. 1440, 1440m or 24h (1-minute samples).
    #[arg(long, default_value = "24h", value_parser = parse_minutes)]
    minutes: u32,
    /// Seed: the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Per-tunnel rate limit in Mbit/s.
    #[arg(long, default_value_t = 1500.0)]
    tunnel_limit_mbps: f64,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Trace CSV (`tunnel,minute,mbps`); without it, a synthetic trace is generated in memory.
    #[arg(long, conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Tunnels of the in-memory synthetic trace (when no --trace is given).
    #[arg(long, default_value_t = 170)]
    synthetic: usize,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Length of the synthetic trace (e.g. 24h).
    #[arg(long, default_value = "24h", value_parser = parse_minutes)]
    minutes: u32,
    /// Consolidation intervals, comma-separated (e.g. 10m or 3m,5m,10m,30m,60m).
    #[arg(long, value_delimiter = ',', value_parser = parse_minutes,
          default_value = "3m,5m,10m,30m,60m")]
    interval: Vec<u32>,
    /// Policies, comma-separated: protego (the paper's), protego-th, cloister.
    #[arg(long, value_delimiter = ',', default_value = "protego,protego-th,cloister")]
    policy: Vec<PolicyKind>,
    /// Bound δ of the cloister policy on each tunnel's per-minute throttling probability.
    #[arg(long)]
    delta: Option<f64>,
    /// Data node capacity in Mbit/s.
    #[arg(long, default_value_t = 5000.0)]
    node_capacity_mbps: f64,
    /// Per-tunnel rate limit in Mbit/s (σ = limit / node capacity).
    #[arg(long, default_value_t = 1500.0)]
    tunnel_limit_mbps: f64,
    /// Hotspot threshold TH, a fraction of node capacity.
    #[arg(long, default_value_t = 0.9)]
    threshold: f64,
    /// Violation tolerance ε of the reserve, Pr(Y > C) ≤ ε.
    #[arg(long, default_value_t = 0.05)]
    epsilon: f64,
    /// Sliding window of the usage histograms.
    #[arg(long, default_value = "60m", value_parser = parse_minutes)]
    window: u32,
    /// How often the reserve is recomputed.
    #[arg(long, default_value = "60m", value_parser = parse_minutes)]
    reserve_every: u32,
    /// Spin-up latency of a shut-down node (to inactive).
    #[arg(long, default_value = "5m", value_parser = parse_minutes_or_zero)]
    boot_latency: u32,
    /// Spin-up latency of an inactive node (to active).
    #[arg(long, default_value = "0m", value_parser = parse_minutes_or_zero)]
    inactive_latency: u32,
    /// Directory for the PNG plots.
    #[arg(long, default_value = "target/simulate")]
    out: PathBuf,
    /// Skip the plots.
    #[arg(long)]
    no_plots: bool,
    /// TrueType font for the plots.
    #[arg(long, default_value = plot::DEFAULT_FONT)]
    font: PathBuf,
    /// Also print one `result key=value ...` line per run (for scripts).
    #[arg(long)]
    summary: bool,
}

/// Parses `N`, `Nm` or `Nh` into a positive number of minutes.
fn parse_minutes(s: &str) -> Result<u32, String> {
    parse_minutes_or_zero(s)?
        .checked_add(0)
        .filter(|&m| m > 0)
        .ok_or_else(|| format!("{s:?} must be a positive number of minutes"))
}

/// Parses `N`, `Nm` or `Nh` into minutes, zero allowed (latencies).
fn parse_minutes_or_zero(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix('h') {
        (n, 60)
    } else if let Some(n) = s.strip_suffix("min") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 1)
    } else {
        (s, 1)
    };
    let n: u32 =
        num.trim().parse().map_err(|_| format!("{s:?} is not a duration in minutes (e.g. 10, 10m, 1h)"))?;
    n.checked_mul(scale).ok_or_else(|| format!("{s:?} is too many minutes"))
}

/// Runs `cloister simulate`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Some(Action::GenTrace(g)) => gen_trace(g),
        None => simulate(*args.run),
    }
}

fn gen_trace(g: GenArgs) -> anyhow::Result<()> {
    let spec = SyntheticTrace {
        tunnels: g.tunnels,
        minutes: g.minutes as usize,
        seed: g.seed,
        limit_mbps: g.tunnel_limit_mbps,
    };
    let trace = spec.generate()?;
    if let Some(dir) = g.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(&g.out).with_context(|| format!("creating {}", g.out.display()))?;
    trace.write_csv(BufWriter::new(file)).with_context(|| format!("writing {}", g.out.display()))?;
    println!(
        "wrote {}: {} tunnels x {} minutes, mean aggregate {:.2} Gbit/s, seed {}",
        g.out.display(),
        trace.tunnels(),
        trace.minutes(),
        trace.mean_aggregate_mbps() / 1000.0,
        g.seed
    );
    Ok(())
}

fn simulate(a: RunArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let (trace, name) = match &a.trace {
        Some(path) => {
            let file =
                std::fs::File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
            let trace = Trace::read_csv(BufReader::new(file), a.tunnel_limit_mbps)
                .with_context(|| format!("reading trace {}", path.display()))?;
            let name = path
                .file_name()
                .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            (trace, name)
        }
        None => {
            let spec = SyntheticTrace {
                tunnels: a.synthetic,
                minutes: a.minutes as usize,
                seed: a.seed,
                limit_mbps: a.tunnel_limit_mbps,
            };
            (spec.generate()?, format!("synthetic trace, seed {}", a.seed))
        }
    };
    let config = Config {
        node_capacity_mbps: a.node_capacity_mbps,
        tunnel_limit_mbps: a.tunnel_limit_mbps,
        threshold: a.threshold,
        epsilon: a.epsilon,
        window: a.window as usize,
        reserve_every: a.reserve_every as usize,
        spin: SpinUp { inactive_minutes: a.inactive_latency, shut_down_minutes: a.boot_latency },
        ..Config::default()
    };
    let policies: Vec<PolicyKind> = a
        .policy
        .iter()
        .map(|&p| match (p, a.delta) {
            (PolicyKind::Cloister { .. }, Some(delta)) => PolicyKind::Cloister { delta },
            (p, _) => p,
        })
        .collect();
    if let Some(delta) = a.delta {
        anyhow::ensure!(
            delta > 0.0 && delta < 1.0,
            "--delta {delta} is out of range: must be in the open interval (0, 1)"
        );
    }
    if !a.no_plots {
        // Fail before the runs, not after them.
        plot::load_font(&a.font)?;
    }
    let sim = Simulator::new(&trace, config)?;
    println!(
        "trace: {name}: {} tunnels x {} minutes, mean aggregate demand {:.2} Gbit/s",
        trace.tunnels(),
        trace.minutes(),
        trace.mean_aggregate_mbps() / 1000.0
    );
    println!(
        "model: node {:.1} Gbit/s, tunnel limit {:.1} Gbit/s (sigma {:.2}), TH {}, epsilon {}, \
         {}-minute usage windows, reserve every {} min",
        a.node_capacity_mbps / 1000.0,
        a.tunnel_limit_mbps / 1000.0,
        config.sigma(),
        a.threshold,
        a.epsilon,
        a.window,
        a.reserve_every
    );

    let show_progress = std::io::stderr().is_terminal() && trace.tunnels() * trace.minutes() >= 1_000_000;
    let mut bar = |label: &str, done: usize, total: usize| {
        if show_progress {
            let width = 40;
            let filled = done * width / total.max(1);
            eprint!(
                "\r{label:<22} [{}{}] {:>3}%",
                "#".repeat(filled),
                "-".repeat(width - filled),
                done * 100 / total.max(1)
            );
            if done == total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        }
    };
    let reports = sim.run_all(&policies, &a.interval, &mut bar)?;

    for kind in &policies {
        let name = kind.to_string();
        let rows: Vec<&RunReport> = reports.iter().filter(|r| r.policy == name).collect();
        println!("\npolicy {name}:");
        print!("{}", report::policy_table(&rows));
    }
    if policies.len() > 1 {
        println!(
            "\nside by side (same trace; saving % / 99th-percentile guarantee % / migrations per hour):"
        );
        print!("{}", report::side_by_side(&reports));
    }
    if a.summary {
        println!();
        for r in &reports {
            println!("{}", report::summary_line(r));
        }
    }

    if !a.no_plots {
        std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
        let reserve = sim.model_reserve_gbps();
        let mut written = Vec::new();
        for &iv in &a.interval {
            let runs: Vec<&RunReport> = reports.iter().filter(|r| r.interval == iv).collect();
            let path = a.out.join(format!("capacity-{iv}min.png"));
            plot::capacity_plot(&path, &runs, &reserve, &name)?;
            written.push(path);
        }
        let path = a.out.join("tradeoff.png");
        plot::tradeoff_plot(&path, &reports, &name)?;
        written.push(path);
        println!("\nplots:");
        for p in written {
            println!("  {}", p.display());
        }
    }
    println!("\nelapsed {:.2} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_parse() {
        assert_eq!(parse_minutes("10"), Ok(10));
        assert_eq!(parse_minutes("10m"), Ok(10));
        assert_eq!(parse_minutes("10min"), Ok(10));
        assert_eq!(parse_minutes("24h"), Ok(1440));
        assert!(parse_minutes("0m").is_err());
        assert_eq!(parse_minutes_or_zero("0m"), Ok(0));
        assert!(parse_minutes("ten").is_err());
        assert!(parse_minutes("-5").is_err());
    }
}
