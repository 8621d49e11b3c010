//! The multi-tenant service and its operator CLI:
//!
//! - `cloister serve --config FILE`: every tenant's gateway over its own enclave process,
//!   the store, the API; SIGHUP re-reads the file, SIGINT/SIGTERM stop.
//! - `cloister status | tenants | tunnels | tenant add|remove|show`: API clients.
//! - `cloister tenant provision`: the **tenant's** side of attested provisioning: fetch an
//!   offer, verify its evidence against the expected measurement and platform key, seal the
//!   secret to the enclave's key, send the envelope.
//! - `cloister measure`: the measurement a tenant should expect of its enclave.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use control::client::Client;
use control::{Service, ServiceConfig};

/// Arguments of `cloister serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The service's configuration (TOML): `[service]` and `[tenants.NAME]`.
    #[arg(long)]
    config: PathBuf,
    #[command(flatten)]
    log: LogArgs,
}

/// How `serve` and `cas` log.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LogArgs {
    /// `text` (one line per event) or `json` (one object per line, tenant as a field).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl LogArgs {
    /// Installs the tracing subscriber (stdout, INFO and up) and returns the service's log.
    fn install(&self) -> control::tenant::Log {
        let b = tracing_subscriber::fmt().with_ansi(false).with_writer(std::io::stdout);
        // A second install (never in the CLI) keeps the first; the log still works.
        let _ = if self.log_format == "json" { b.json().try_init() } else { b.try_init() };
        control::log::to_tracing()
    }
}

/// Where the API is and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ApiArgs {
    /// The API endpoint.
    #[arg(long, default_value = "http://127.0.0.1:9440")]
    endpoint: String,
    /// The bearer token's file.
    #[arg(long, default_value = "/var/lib/cloister/api.token")]
    token_file: PathBuf,
}

impl ApiArgs {
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::with_token_file(&self.endpoint, &self.token_file)?)
    }
}

/// The service's `enclave = "inline"`: the trusted core in this process, attested by the
/// platform's key over this executable and the tenant's configuration.
fn start_inline(
    config: enclave::EnclaveConfig,
    platform_key: &[u8],
    ledger: Box<dyn enclave::ledger::Ledger>,
) -> enclave::Result<enclave::InlineEnclave> {
    let attestation = enclave::attest::SoftwareAttestation::new(
        platform_key,
        enclave::attest::CodeIdentity::CurrentExecutable,
        &config.measured_bytes(enclave::Backend::Inline),
    )?;
    enclave::InlineEnclave::start_with_ledger(config, Box::new(attestation), ledger)
}

/// Runs `cloister serve`.
pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = ServiceConfig::load(&args.config).with_context(|| format!("{}", args.config.display()))?;
    let dir = args.config.parent().map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf);
    // Blocked before any thread starts, so every thread inherits the mask.
    let signals = cio::signal::Signals::block(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let program = std::env::current_exe().context("finding this binary for the enclave processes")?;
    let log = args.log.install();
    let service = Service::start(config, &dir, program, Arc::clone(&log), start_inline)?;
    let signal = loop {
        match signals.wait(Duration::from_millis(500))? {
            Some(libc::SIGHUP) => match ServiceConfig::load(&args.config) {
                Ok(c) => {
                    if let Err(e) = service.reload(c) {
                        log(&format!("reload refused: {e}"));
                    }
                }
                Err(e) => log(&format!("reload refused: {e}")),
            },
            Some(s) => break s,
            None => {
                if let Some(why) = service.platform_ended() {
                    log(&format!("service: {why}; its enclaves ended with it, stopping"));
                    service.stop();
                    anyhow::bail!("{why}: start the service again");
                }
            }
        }
    };
    log(&format!("service: {}, stopping", cio::signal::Signals::name(signal)));
    service.stop();
    Ok(())
}

fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Runs `cloister status`.
pub(crate) fn status(api: ApiArgs) -> anyhow::Result<()> {
    let v = api.client()?.get("/v1/status")?.json()?;
    println!(
        "cloister {} up {} s, enclave backend {}, state {}",
        v["version"].as_str().unwrap_or("?"),
        v["uptime_s"],
        v["enclave"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?")
    );
    println!("platform evidence key (software-rooted): {}", v["platform_public_key"].as_str().unwrap_or("?"));
    if let Some(pid) = v["platform_pid"].as_u64() {
        println!("platform process pid {pid}");
    }
    for t in v["tenants"].as_array().into_iter().flatten() {
        println!("  tenant {:<16} {}", t["name"].as_str().unwrap_or("?"), t["state"].as_str().unwrap_or("?"));
    }
    if let Some(cas) = v["cas"].as_object() {
        println!("tenants also from the CAS at {}", cas["endpoint"].as_str().unwrap_or("?"));
        for (name, why) in cas["refused"].as_object().into_iter().flatten() {
            println!("  tenant {name:<16} not started: {}", why.as_str().unwrap_or("?"));
        }
    }
    Ok(())
}

/// Runs `cloister tenants`.
pub(crate) fn tenants(api: ApiArgs) -> anyhow::Result<()> {
    let v = api.client()?.get("/v1/tenants")?.json()?;
    println!(
        "{:<12} {:>4}  {:<10} {:>8} {:>10}  {:<14} {:<20} secrets",
        "tenant", "id", "state", "pid", "recoveries", "tun", "listen"
    );
    for t in v.as_array().into_iter().flatten() {
        let s = &t["status"];
        let secrets: Vec<String> = s["secrets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                format!(
                    "{}:{}",
                    p[0].as_str().unwrap_or("?"),
                    if p[1].as_bool() == Some(true) { "sealed" } else { "missing" }
                )
            })
            .collect();
        println!(
            "{:<12} {:>4}  {:<10} {:>8} {:>10}  {:<14} {:<20} {}",
            t["name"].as_str().unwrap_or("?"),
            t["id"].as_u64().unwrap_or(0),
            s["state"].as_str().unwrap_or("?"),
            s["enclave_pid"].as_u64().map_or_else(|| "-".into(), |p| p.to_string()),
            s["recoveries"].as_u64().unwrap_or(0),
            format!(
                "{}{}",
                t["tun"].as_str().unwrap_or("?"),
                t["tun_netns"].as_str().map(|n| format!("@{n}")).unwrap_or_default()
            ),
            t["listen"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str())
                .collect::<Vec<_>>()
                .join(","),
            secrets.join(" ")
        );
    }
    Ok(())
}

/// Runs `cloister tunnels`.
pub(crate) fn tunnels(api: ApiArgs) -> anyhow::Result<()> {
    let v = api.client()?.get("/v1/tunnels")?.json()?;
    println!(
        "{:<8} {:<10} {:<21} {:<11} {:<22} {:<9} {:<9} {:>12} {:>12}  selectors",
        "tenant", "connection", "ike", "state", "peer", "spi in", "spi out", "bytes in", "bytes out"
    );
    for t in v.as_array().into_iter().flatten() {
        let tenant = t["tenant"].as_str().unwrap_or("?");
        if let Some(e) = t["error"].as_str() {
            println!("{tenant:<8} error: {e}");
            continue;
        }
        let sas = t["ike_sas"].as_array().cloned().unwrap_or_default();
        if sas.is_empty() {
            println!("{tenant:<8} (no IKE SA)");
        }
        for sa in sas {
            let children = sa["children"].as_array().cloned().unwrap_or_default();
            let head = format!(
                "{tenant:<8} {:<10} #{:<20} {:<11} {:<22}",
                sa["connection"].as_str().unwrap_or("?"),
                sa["id"].as_u64().unwrap_or(0),
                sa["state"].as_str().unwrap_or("?"),
                sa["remote"].as_str().unwrap_or("?")
            );
            if children.is_empty() {
                println!("{head} (no child SA)");
            }
            for c in children {
                let ts = |k: &str| {
                    c[k].as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                println!(
                    "{head} {:<9} {:<9} {:>12} {:>12}  {} === {}",
                    c["spi_in"].as_str().unwrap_or("?"),
                    c["spi_out"].as_str().unwrap_or("?"),
                    c["bytes_in"].as_u64().unwrap_or(0),
                    c["bytes_out"].as_u64().unwrap_or(0),
                    ts("local_ts"),
                    ts("remote_ts")
                );
            }
        }
    }
    Ok(())
}

/// Runs `cloister metrics`: the Prometheus text, as a scraper gets it.
pub(crate) fn metrics(api: ApiArgs) -> anyhow::Result<()> {
    let r = api.client()?.get("/metrics")?;
    anyhow::ensure!(r.status == 200, "API: {} {}", r.status, r.body.trim());
    print!("{}", r.body);
    Ok(())
}

/// Arguments of `cloister tenant`.
#[derive(Debug, clap::Args)]
pub(crate) struct TenantArgs {
    #[command(subcommand)]
    what: TenantWhat,
}

#[derive(Debug, clap::Subcommand)]
enum TenantWhat {
    /// Add a tenant at run time (a TOML file: `name = "..."` and a tenant table's fields).
    Add {
        #[command(flatten)]
        api: ApiArgs,
        /// The tenant's file.
        #[arg(long)]
        file: PathBuf,
    },
    /// Remove a tenant added at run time (its enclave, tunnels and stored state go).
    Remove {
        #[command(flatten)]
        api: ApiArgs,
        /// The tenant's name.
        name: String,
    },
    /// One tenant's state and tunnels, as JSON.
    Show {
        #[command(flatten)]
        api: ApiArgs,
        /// The tenant's name.
        name: String,
    },
    /// The tenant's side of attested provisioning: verify the enclave, then send it a secret
    /// only it can open.
    Provision(ProvisionArgs),
    /// The tenant's side: make a provisioning signer (ECDSA P-256, PKCS#8, 0600) and print
    /// its public key, for the tenant's `provisioning_signers` and `cloister measure
    /// --tenant-signer`. Its enclave then takes only secrets `tenant provision
    /// --signer-key` signed.
    SignerKey {
        /// Where the private key goes (never overwritten).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Arguments of `cloister tenant provision`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProvisionArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The tenant's name at the service.
    #[arg(long)]
    tenant: String,
    /// The tenant's number (its enclave's evidence must name it).
    #[arg(long)]
    tenant_id: u32,
    /// The secret's name in the tenant's configuration (`secrets.NAME`).
    #[arg(long)]
    secret: String,
    /// The measurement to expect (96 hex digits, from `cloister measure` on a binary you trust).
    #[arg(long)]
    measurement: String,
    /// The platform's evidence key (hex, uncompressed SEC1), obtained out of band.
    #[arg(long)]
    platform_key: String,
    /// A file with the pre-shared key (a trailing newline is not part of it).
    #[arg(long, conflicts_with = "private_key_file")]
    psk_file: Option<PathBuf>,
    /// A file with a private key (PKCS#8 DER): rsa, ecdsa-p256 or ecdsa-p384 (`--key-kind`).
    #[arg(long)]
    private_key_file: Option<PathBuf>,
    /// The private key's kind.
    #[arg(long, default_value = "ecdsa-p256")]
    key_kind: String,
    /// The tenant's provisioning signer (`cloister tenant signer-key`): signs the envelope,
    /// as an enclave whose configuration names `provisioning_signers` requires.
    #[arg(long)]
    signer_key: Option<PathBuf>,
}

fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    control::platform::unhex(s).ok_or_else(|| anyhow::anyhow!("not hex"))
}

/// Runs `cloister tenant`.
pub(crate) fn tenant(args: TenantArgs) -> anyhow::Result<()> {
    match args.what {
        TenantWhat::Add { api, file } => {
            let text = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let v = api.client()?.request("POST", "/v1/tenants", &text, "application/toml")?.json()?;
            println!("tenant {} added", v["added"].as_str().unwrap_or("?"));
        }
        TenantWhat::Remove { api, name } => {
            api.client()?.request("DELETE", &format!("/v1/tenants/{name}"), b"", "")?.json()?;
            println!("tenant {name} removed");
        }
        TenantWhat::Show { api, name } => {
            print_json(&api.client()?.get(&format!("/v1/tenants/{name}"))?.json()?)
        }
        TenantWhat::Provision(p) => provision(&p)?,
        TenantWhat::SignerKey { out } => {
            let pkcs8 = enclave::provision::TenantSigner::generate()?;
            let signer = enclave::provision::TenantSigner::from_pkcs8(&pkcs8)?;
            super::migrate::write_new(&out, &pkcs8)?;
            println!("{}", control::platform::hex(signer.public_key()));
        }
    }
    Ok(())
}

fn provision(p: &ProvisionArgs) -> anyhow::Result<()> {
    use enclave::provision::{seal_to_offer, ProvisioningOffer};
    use enclave::{SecretKind, TenantId};
    let (kind, secret) = match (&p.psk_file, &p.private_key_file) {
        (Some(f), None) => {
            let mut b = zeroize::Zeroizing::new(
                std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
            );
            while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                b.pop();
            }
            (SecretKind::PreSharedKey, b)
        }
        (None, Some(f)) => {
            let kind = match p.key_kind.as_str() {
                "rsa" => SecretKind::RsaPrivateKey,
                "ecdsa-p256" => SecretKind::EcdsaP256PrivateKey,
                "ecdsa-p384" => SecretKind::EcdsaP384PrivateKey,
                other => anyhow::bail!("--key-kind {other}: rsa, ecdsa-p256 or ecdsa-p384"),
            };
            (
                kind,
                zeroize::Zeroizing::new(
                    std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
                ),
            )
        }
        _ => anyhow::bail!("give --psk-file or --private-key-file"),
    };
    let expected = enclave::attest::parse_measurement_hex(&p.measurement)?;
    let platform = unhex(&p.platform_key).context("--platform-key")?;
    let signer = match &p.signer_key {
        Some(f) => {
            let pkcs8 = zeroize::Zeroizing::new(
                std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
            );
            Some(
                enclave::provision::TenantSigner::from_pkcs8(&pkcs8)
                    .with_context(|| format!("{}", f.display()))?,
            )
        }
        None => None,
    };
    let client = p.api.client()?;
    let v = client
        .request("POST", &format!("/v1/tenants/{}/secrets/{}/offer", p.tenant, p.secret), b"", "")?
        .json()?;
    let offer = ProvisioningOffer::from_bytes(&unhex(v["offer"].as_str().unwrap_or(""))?)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Refuses unless the evidence verifies under the platform key, names this tenant, and
    // carries the expected measurement; only then is the secret encrypted to the offer.
    let envelope = seal_to_offer(
        &offer,
        &platform,
        &expected,
        TenantId(p.tenant_id),
        kind,
        &secret,
        now,
        signer.as_ref(),
    )
    .context("the enclave's evidence is not what this tenant expects; nothing was sent")?;
    let body = serde_json::json!({ "envelope": control::platform::hex(&envelope) }).to_string();
    client
        .request(
            "PUT",
            &format!("/v1/tenants/{}/secrets/{}", p.tenant, p.secret),
            body.as_bytes(),
            "application/json",
        )?
        .json()?;
    println!(
        "provisioned {} for tenant {}: evidence verified (measurement {}…), sealed in the enclave",
        p.secret,
        p.tenant,
        p.measurement.get(..16).unwrap_or("")
    );
    Ok(())
}

/// Arguments of `cloister cas`.
#[derive(Debug, clap::Args)]
pub(crate) struct CasArgs {
    /// The CAS's configuration (TOML): `[cas]`, `[gateways.NAME]`, `[tenants.NAME]`.
    #[arg(long)]
    config: PathBuf,
    #[command(flatten)]
    log: LogArgs,
}

/// Runs `cloister cas`: the configuration and attestation service, until SIGINT/SIGTERM;
/// SIGHUP re-reads the file.
pub(crate) fn cas(args: CasArgs) -> anyhow::Result<()> {
    use control::cas::{Cas, CasConfig};
    let config = CasConfig::load(&args.config).with_context(|| format!("{}", args.config.display()))?;
    let signals = cio::signal::Signals::block(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let log = args.log.install();
    let cas = Cas::start(config, Arc::clone(&log))?;
    let signal = loop {
        match signals.wait(Duration::from_millis(500))? {
            Some(libc::SIGHUP) => match CasConfig::load(&args.config) {
                Ok(c) => cas.reload(c),
                Err(e) => log(&format!("cas: reload refused: {e}")),
            },
            Some(s) => break s,
            None => {}
        }
    };
    let (released, refused) = cas.counts();
    println!(
        "cas: {}, stopping ({released} releases, {refused} refusals)",
        cio::signal::Signals::name(signal)
    );
    cas.stop();
    Ok(())
}

/// Arguments of `cloister platform-key`.
#[derive(Debug, clap::Args)]
pub(crate) struct PlatformKeyArgs {
    /// The service's configuration: its `platform_key` and `sealing_root` files are read,
    /// or made as `cloister serve` would make them.
    #[arg(long)]
    config: PathBuf,
}

/// Runs `cloister platform-key`: the key that verifies this host's evidence, for a CAS's
/// `platform_key` or a tenant's `--platform-key`.
pub(crate) fn platform_key(args: PlatformKeyArgs) -> anyhow::Result<()> {
    let config = ServiceConfig::load(&args.config).with_context(|| format!("{}", args.config.display()))?;
    let s = &config.settings;
    let p = control::platform::Platform::load_or_create(&s.platform_key, &s.sealing_root)?;
    println!("{}", control::platform::hex(p.public_key()));
    Ok(())
}

/// Arguments of `cloister measure`.
#[derive(Debug, clap::Args)]
pub(crate) struct MeasureArgs {
    /// The tenant's number.
    #[arg(long)]
    tenant_id: u32,
    /// The binary to measure (default: this one).
    #[arg(long)]
    binary: Option<PathBuf>,
    /// The enclave backend the service runs (`[service] enclave`): it is measured too.
    #[arg(long, default_value = "process")]
    backend: enclave::Backend,
    /// The service's configuration: its `[migrate.peers]` platform keys and its own are the
    /// platforms its enclaves trust for moves, and `[migrate.hsm] backup_root` the root they
    /// back up to; both are measured too.
    #[arg(long, conflicts_with = "trusted_platform")]
    config: Option<PathBuf>,
    /// A platform the service's enclaves trust for moves (130 hex digits, as `cloister
    /// platform-key` prints it), repeated for each: every host of the cluster, itself
    /// included (a host with `[migrate]` and no peers: itself). None for a service without
    /// `[migrate]`.
    #[arg(long)]
    trusted_platform: Vec<String>,
    /// The HSM backup root the service's enclaves back up to (`[migrate.hsm] backup_root`, as
    /// `cloister migrate backup-root` prints it).
    #[arg(long, conflicts_with = "config")]
    backup_root: Option<String>,
    /// A provisioning signer of the tenant (its `provisioning_signers`, as `cloister tenant
    /// signer-key` prints them), repeated for each: measured too.
    #[arg(long)]
    tenant_signer: Vec<String>,
}

/// Runs `cloister measure`.
pub(crate) fn measure(args: MeasureArgs) -> anyhow::Result<()> {
    let path = match args.binary {
        Some(p) => p,
        None => std::env::current_exe()?,
    };
    let code = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let point = |what: &str, k: &str| {
        control::platform::unhex(k)
            .filter(|k| k.len() == 65 && k[0] == 4)
            .with_context(|| format!("{what} {k}: 130 hex digits (an uncompressed P-256 key)"))
    };
    let (trusted, roots) = match &args.config {
        Some(c) => {
            let config = ServiceConfig::load(c).with_context(|| format!("{}", c.display()))?;
            let s = &config.settings;
            let mut p = control::platform::Platform::load_or_create(&s.platform_key, &s.sealing_root)?;
            if let Some(m) = &s.migrate {
                p.trust(m.peers.values().map(|peer| peer.platform_key.clone()));
                if let Some(root) = m.hsm.as_ref().and_then(|h| h.backup_root.clone()) {
                    p.trust_backup_root(root);
                }
            }
            (p.trusted().to_vec(), p.backup_roots().to_vec())
        }
        None => {
            let mut keys = Vec::new();
            for k in &args.trusted_platform {
                keys.push(point("--trusted-platform", k)?);
            }
            keys.sort_unstable();
            keys.dedup();
            let roots = args.backup_root.as_deref().map(|k| point("--backup-root", k)).transpose()?;
            (keys, roots.into_iter().collect())
        }
    };
    let mut signers = Vec::new();
    for k in &args.tenant_signer {
        signers.push(point("--tenant-signer", k)?);
    }
    signers.sort_unstable();
    signers.dedup();
    let m = control::platform::expected_measurement(
        args.tenant_id,
        &code,
        args.backend,
        &trusted,
        &roots,
        &signers,
    );
    println!("{}", m.to_hex());
    Ok(())
}
