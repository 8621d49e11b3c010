//! `cloister dataplane --config FILE`: runs the ESP data plane from a static configuration
//! (a `[dataplane]` table and `[[sa]]`/`[[policy]]` tables, see `cloister_dataplane::config`)
//! until SIGINT or SIGTERM, then prints each worker's counters and each SA's usage.
//!
//! Static SAs carry keys the tenant wrapped for its enclave (`key = { wrapped = .. }`, made
//! by `cloister secret wrap --kind esp`): the blobs go to the enclave unopened, which needs
//! the tenant's provisioning key (`--provisioning-key`); the tenant's ledger lies in
//! `ledger/` beside that key, so an outbound static key installs once across runs. The
//! enclave runs in this process (`--enclave inline`, the default) or in a hardened child
//! process (`--enclave process`: the platform process then reads the provisioning key and
//! keeps the ledger, and this process never holds an ESP key or the provisioning key;
//! started as root, the enclave runs as a user of its own and this process, once set up,
//! becomes another with the network capabilities only). Raw keys in the file are a test and debugging
//! aid: only builds with `--features static-keys` accept them (the enclave's raw-key install
//! exists only there), with the inline enclave; they are wiped once installed and never
//! printed.
//!
//! Output for scripts: one `dataplane: ...` line once running (offloads included), an
//! `event ...` line per SA lifetime event, and at exit `worker N: key=value ...`,
//! `total: ...` and `sa ...` lines.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use dataplane::{Config, Dataplane, WorkerSnapshot};
use enclave::attest::SoftwareAttestation;
use enclave::{Backend, Enclave, EnclaveConfig, Limits, ProvisioningKey, PublicConfig, TenantId};
use enclave_host::{ProcessEnclave, ProcessSpec};

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
    /// Tenant number of the enclave (wrapped keys open only in their tenant's enclave).
    #[arg(long, default_value_t = 1)]
    tenant: u32,
    /// The tenant's provisioning key file (64 hex digits, mode 0600) under which the SAs'
    /// `wrapped` keys were wrapped; without it the enclave can open no blob.
    #[arg(long)]
    provisioning_key: Option<PathBuf>,
    /// Where the enclave runs: `inline` (in this process) or `process` (a hardened child
    /// process, `cloister enclave-process`, reached through shared memory).
    #[arg(long, default_value = "inline")]
    enclave: Backend,
    /// With `--enclave process` started as root: the enclave process runs as user and group
    /// this + tenant (0: as root; default 1,900,000,000, as `cloister gateway`'s
    /// `enclave_uid_base`).
    #[arg(long)]
    enclave_uid_base: Option<u32>,
    /// With `--enclave process` started as root: the user and group this process becomes
    /// once its TUN device and sockets are open, with the network capabilities only (0:
    /// stays root; default the enclave user base minus one).
    #[arg(long)]
    user: Option<u32>,
}

#[cfg(not(feature = "static-keys"))]
use dataplane::keys::install_wrapped as install_inline;

/// Installs one SA's raw keys into the in-process enclave (`static-keys` builds), or its
/// wrapped keys as `dataplane::keys::install_wrapped` does.
#[cfg(feature = "static-keys")]
fn install_inline(
    e: &mut enclave::InlineEnclave,
    r: &esp::config::KeyRequest<'_>,
) -> Result<enclave::EspSaHandle, enclave::Error> {
    use esp::config::{Direction, KeyMaterial};
    match r.keys {
        KeyMaterial::Raw { encryption, integrity } => {
            e.esp_sa_install_raw(r.spi, r.direction == Direction::In, r.esn, r.suite, encryption, integrity)
        }
        KeyMaterial::Wrapped(_) => dataplane::keys::install_wrapped(e, r),
    }
}

/// A static data plane's enclave configuration: `tenant`, holding `provisioning_key` (which
/// opens the blobs the tenant wrapped under it); it moves no state and takes wrapped blobs.
fn public_config(tenant: u32) -> PublicConfig {
    PublicConfig {
        tenant: TenantId(tenant),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

fn enclave_config(tenant: u32, provisioning_key: ProvisioningKey) -> EnclaveConfig {
    EnclaveConfig::from_public(public_config(tenant), provisioning_key)
}

/// Starts an in-process enclave for `tenant` with software attestation (see
/// `enclave::attest` for what that does and does not prove): on `roots`' key and ledger,
/// or on a fresh key and a ledger for this run only.
fn inline_enclave(tenant: u32, roots: Option<&platform::Roots>) -> anyhow::Result<enclave::InlineEnclave> {
    let (key, ledger, platform_key): (_, Box<dyn enclave::ledger::Ledger>, _) = match roots {
        Some(roots) => {
            let secrets = platform::Secrets::load(None, roots)?;
            let key = secrets.tenant_key(tenant).context("the provisioning key")?;
            (key, Box::new(secrets.ledger(tenant)?), secrets.attestation_key().to_vec())
        }
        None => (
            ProvisioningKey::generate()?,
            Box::new(enclave::ledger::MemoryLedger::new()),
            SoftwareAttestation::generate_platform_key()?.to_vec(),
        ),
    };
    let config = enclave_config(tenant, key);
    let attestation = SoftwareAttestation::new(
        &platform_key,
        enclave::attest::CodeIdentity::Bytes(b"cloister-dataplane".to_vec()),
        &config.measured_bytes(Backend::Inline),
    )?;
    Ok(enclave::InlineEnclave::start_with_ledger(config, Box::new(attestation), ledger)?)
}

/// Runs `cloister dataplane`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let path = args.config.display();
    let text = std::fs::read_to_string(&args.config).with_context(|| format!("reading {path}"))?;
    // Blob files named in `key.wrapped` are relative to the configuration's directory.
    let dir = args.config.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let parsed = Config::parse_in(&text, dir);
    // The text may hold raw keys in hex: wipe it before anything else happens.
    let mut bytes = text.into_bytes();
    bytes.fill(0);
    std::hint::black_box(&bytes);
    drop(bytes);
    let mut config = parsed.with_context(|| format!("{path}"))?;
    if config.has_raw_keys() {
        anyhow::ensure!(
            cfg!(feature = "static-keys"),
            "{path}: raw keys need a build with `--features static-keys` (tests and debugging only)"
        );
        anyhow::ensure!(args.enclave == Backend::Inline, "{path}: raw keys need `--enclave inline`");
    }
    anyhow::ensure!(
        !config.has_wrapped_keys() || args.provisioning_key.is_some(),
        "{path}: wrapped keys need --provisioning-key (the tenant's key they were wrapped under)"
    );
    // The process enclave's keys come only from wrapped blobs; its platform process reads
    // the key they were wrapped under.
    anyhow::ensure!(
        args.enclave == Backend::Inline || args.provisioning_key.is_some(),
        "--enclave process needs --provisioning-key (its SAs' keys are wrapped under it)"
    );
    let users = gateway::config::Users::from_flags(args.enclave_uid_base, args.user)?;
    anyhow::ensure!(
        args.enclave == Backend::Process
            || [args.enclave_uid_base, args.user].iter().all(|u| u.is_none_or(|u| u == 0)),
        "--enclave-uid-base and --user need --enclave process (the inline enclave is this process)"
    );
    if let Some(w) = args.workers {
        anyhow::ensure!((1..=64).contains(&w), "--workers must be 1 to 64");
        config.settings.workers = Some(w);
    }
    // Wrapped keys are under the tenant's provisioning key; its ledger lies in `ledger/`
    // beside it, so an outbound static key installs once, across runs and restarts.
    let roots = args.provisioning_key.as_ref().map(|key| platform::Roots::Tenant {
        tenant: args.tenant,
        key: key.clone(),
        ledger_dir: key.parent().unwrap_or(Path::new(".")).join("ledger"),
    });
    // Blocked before any thread starts, so every worker inherits the mask and the signals
    // wait for the loop below.
    let signals = cio::signal::Signals::block_termination()?;
    match args.enclave {
        Backend::Inline => {
            let enclave = inline_enclave(args.tenant, roots.as_ref())?;
            let dp = Dataplane::start(&config, enclave, install_inline)?;
            config.wipe_keys();
            serve(dp, &signals, "inline", args.stats_every)
        }
        Backend::Process => {
            let roots = roots.context("--enclave process needs --provisioning-key")?;
            // The platform process reads the key, keeps the ledger and starts the enclave
            // process; this process holds neither and, started as root, drops it below.
            let root = platform::started_as_root();
            let base = users.enclave_base(root)?;
            let mut platform_args: Vec<std::ffi::OsString> = vec!["platform-process".into()];
            platform_args.extend(roots.args());
            if let Some(b) = base {
                platform_args.extend(["--enclave-uid-base".into(), b.to_string().into()]);
            }
            let platform = platform::PlatformClient::start(
                Path::new("/proc/self/exe"),
                &platform_args,
                Duration::from_secs(20),
            )
            .context("starting the platform process")?;
            let drop_to = users.gateway_user(root, base)?.map(|uid| (platform.clone(), uid));
            let spec = ProcessSpec::new("/proc/self/exe", ["enclave-process"])
                .with_packet_area(dataplane::packet_area(&config.settings));
            let enclave =
                ProcessEnclave::launch(spec, std::sync::Arc::new(platform), public_config(args.tenant))
                    .context("starting the enclave process")?;
            let pid = enclave.pid().map_or_else(|| "?".into(), |p| p.to_string());
            let dp = Dataplane::start(&config, enclave, dataplane::keys::install_wrapped::<ProcessEnclave>)?;
            config.wipe_keys();
            // The TUN device and the sockets are open: root's other powers go now.
            if let Some((platform, uid)) = drop_to {
                platform.become_network_user(uid).with_context(|| format!("becoming user {uid}"))?;
                println!("dataplane: runs as user {uid} with {} only", platform::NETWORK_CAPABILITY_NAMES);
            }
            serve(dp, &signals, &format!("process pid {pid}"), args.stats_every)
        }
    }
}

/// Prints the start-up line, runs until a termination signal, and prints the counters.
fn serve<E: Enclave + 'static>(
    dp: Dataplane<E>,
    signals: &cio::signal::Signals,
    backend: &str,
    stats_every: u64,
) -> anyhow::Result<()> {
    let (udp, raw) = dp.listeners();
    let udp: Vec<String> = udp.iter().map(ToString::to_string).collect();
    let raw: Vec<&str> = raw.iter().map(|&v6| if v6 { "ipv6" } else { "ipv4" }).collect();
    println!(
        "dataplane: tun {} workers={} udp=[{}] steering={} replay_window={} raw_esp=[{}] enclave {backend} offloads: {}",
        dp.tun_name(),
        dp.workers(),
        udp.join(","),
        dp.inbound_steering(),
        dp.replay_window(),
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
        if stats_every > 0 && last_stats.elapsed() >= Duration::from_secs(stats_every) {
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
