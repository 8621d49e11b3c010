//! `cloister dataplane --config FILE`: runs the ESP data plane from a static configuration
//! (a `[dataplane]` table and `[[sa]]`/`[[policy]]` tables, see `cloister_dataplane::config`)
//! until SIGINT or SIGTERM, then prints each worker's counters and each SA's usage.
//!
//! Static keys are for tests, benchmarks and debugging: they are read from the file, go
//! into the in-process enclave, are wiped from memory, and are never printed. Only builds
//! with `--features static-keys` accept them (the enclave's raw-key install exists only
//! there); other builds refuse every static SA, since wrapped ESP keys have no enclave call
//! yet.
//!
//! Output for scripts: one `dataplane: ...` line once running (offloads included), an
//! `event ...` line per SA lifetime event, and at exit `worker N: key=value ...`,
//! `total: ...` and `sa ...` lines.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use dataplane::{Config, Dataplane, WorkerSnapshot};

/// Arguments of `cloister dataplane`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Configuration file (TOML): `[dataplane]`, `[[sa]]`, `[[policy]]`.
    #[arg(long)]
    config: PathBuf,
    /// Worker threads (overrides the file; default: the available cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Also print the counters every this many seconds (0: only at exit).
    #[arg(long, default_value_t = 0)]
    stats_every: u64,
    /// Tenant number of the in-process enclave.
    #[arg(long, default_value_t = 1)]
    tenant: u32,
}

#[cfg(feature = "static-keys")]
use dataplane::keys::install_raw as install_keys;
#[cfg(not(feature = "static-keys"))]
use dataplane::keys::refuse as install_keys;

/// Runs `cloister dataplane`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let parsed = Config::parse(&text);
    // The text holds the keys in hex: wipe it before anything else happens.
    let mut bytes = text.into_bytes();
    bytes.fill(0);
    std::hint::black_box(&bytes);
    drop(bytes);
    let mut config = parsed.with_context(|| format!("{}", args.config.display()))?;
    if cfg!(not(feature = "static-keys")) && config.has_raw_keys() {
        anyhow::bail!(
            "{}: raw keys need a build with `--features static-keys` (tests and debugging only)",
            args.config.display()
        );
    }
    if let Some(w) = args.workers {
        anyhow::ensure!((1..=64).contains(&w), "--workers must be 1 to 64");
        config.settings.workers = Some(w);
    }
    // Blocked before any thread starts, so every worker inherits the mask and the signals
    // wait for the loop below.
    let signals = cio::signal::Signals::block_termination()?;
    let enclave = dataplane::keys::inline_enclave(args.tenant)?;
    let dp = Dataplane::start(&config, enclave, install_keys)?;
    config.wipe_keys();
    let (udp, raw) = dp.listeners();
    let udp: Vec<String> = udp.iter().map(ToString::to_string).collect();
    let raw: Vec<&str> = raw.iter().map(|&v6| if v6 { "ipv6" } else { "ipv4" }).collect();
    println!(
        "dataplane: tun {} workers={} udp=[{}] raw_esp=[{}] offloads: {}",
        dp.tun_name(),
        dp.workers(),
        udp.join(","),
        raw.join(","),
        dp.offloads()
    );
    let started = Instant::now();
    let mut last_stats = started;
    let signal = loop {
        if let Some(s) = signals.wait(Duration::from_secs(1))? {
            break s;
        }
        for e in dp.handle_timeout(Instant::now()) {
            println!("event {:?} {:?} {:?}", e.sa, e.kind, e.trigger);
        }
        if args.stats_every > 0 && last_stats.elapsed() >= Duration::from_secs(args.stats_every) {
            last_stats = Instant::now();
            println!("{}", WorkerSnapshot::sum(&dp.snapshot()));
        }
    };
    println!(
        "dataplane: {} after {:.1}s, stopping",
        cio::signal::Signals::name(signal),
        started.elapsed().as_secs_f64()
    );
    let sas = dp.sa_reports();
    let report = dp.stop();
    for w in &report.workers {
        println!("{w}");
    }
    println!("{}", WorkerSnapshot::sum(&report.workers));
    for sa in sas {
        println!("{sa}");
    }
    anyhow::ensure!(report.panicked.is_empty(), "workers {:?} panicked", report.panicked);
    Ok(())
}
