//! `cloister gateway --config FILE`: one tenant's gateway (IKE engine, ESP data plane, and
//! the tenant's enclave) until SIGINT or SIGTERM.
//!
//! The enclave is a hardened child process by default (`enclave = "process"`): this
//! process then never holds a PSK, SK_* or ESP key, nor the provisioning key, which the
//! platform process (`cloister platform-process`) reads and hands straight to the enclave
//! process it starts. The tenant's ledger (seal counters, live sealed secrets, static keys
//! installed) lies in `ledger/` beside the provisioning key, so it outlasts restarts.
//! Started as root, the gateway runs the enclave process as a user of its own
//! (`enclave_uid_base` + tenant) and, once it has read its files and opened its TUN device
//! and sockets, becomes `gateway_uid` with the network capabilities only; the platform
//! process alone stays root.
//!
//! Output for scripts: one `gateway: ...` line once running, then one line per IKE or child
//! SA event (`ike: ...`, `child: ...`), and the data plane's counters at exit.
//!
//! The enclave process is watched every round (a zero-timeout poll of its pidfd): when it
//! dies, the gateway says so, stops its data plane and IKE engine (their SAs are gone with
//! the enclave's keys), starts a fresh enclave process, provisions the secrets again from
//! the wrapped blobs it read at start, and initiates every connection that had been up, so
//! that a peer gets a new tunnel (with INITIAL_CONTACT, replacing its stale one) without
//! anyone typing a command.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use dataplane::WorkerSnapshot;
use enclave::attest::{CodeIdentity, SoftwareAttestation};
use enclave::{Enclave, EnclaveConfig, InlineEnclave, Limits, PublicConfig, TenantId};
use enclave_host::{ProcessEnclave, ProcessSpec};
use gateway::supervise::{Revival, Revive, Supervisor, Turn};
use gateway::{Backend, Gateway, GatewayConfig};
use platform::PlatformClient;

/// Arguments of `cloister gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Configuration file (TOML): `[gateway]`, `[dataplane]`, `connections`, `secrets`.
    #[arg(long)]
    config: PathBuf,
}

/// Runs `cloister gateway`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let config = GatewayConfig::load(&args.config).with_context(|| format!("{}", args.config.display()))?;
    // Blocked before any thread starts, so workers inherit the mask and signals wait here.
    let signals = cio::signal::Signals::block_termination()?;
    let key_file =
        config.settings.provisioning_key.as_deref().context("gateway.provisioning_key is required")?;
    let tenant = config.settings.tenant;
    let ledger_dir = key_file.parent().unwrap_or(Path::new(".")).join("ledger");
    let public = PublicConfig {
        tenant: TenantId(tenant),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let roots = platform::Roots::Tenant { tenant, key: key_file.to_path_buf(), ledger_dir };
    match config.settings.enclave {
        Backend::Process => {
            let root = platform::started_as_root();
            let users = config.settings.users;
            let base = users.enclave_base(root)?;
            let mut args: Vec<OsString> = vec!["platform-process".into()];
            args.extend(roots.args());
            if let Some(b) = base {
                args.extend(["--enclave-uid-base".into(), b.to_string().into()]);
            }
            let platform = PlatformClient::start(Path::new("/proc/self/exe"), &args, Duration::from_secs(20))
                .context("starting the platform process")?;
            let drop_to = users.gateway_user(root, base)?.map(|uid| (platform.clone(), uid));
            let spec = ProcessSpec::new("/proc/self/exe", ["enclave-process"])
                .with_packet_area(dataplane::packet_area(&config.dataplane.settings));
            let e = ProcessEnclave::launch(spec, Arc::new(platform), public)
                .context("starting the enclave process")?;
            let pid = e.pid().map_or_else(|| "?".into(), |p| p.to_string());
            serve(&config, e, &signals, &format!("process pid {pid}"), drop_to)
        }
        Backend::Inline => {
            // The enclave runs in this process, so this process holds its root and ledger.
            let secrets = platform::Secrets::load(None, &roots)?;
            let key = secrets.tenant_key(tenant).context("the provisioning key")?;
            let enclave_config = EnclaveConfig::from_public(public, key);
            let attestation = SoftwareAttestation::new(
                secrets.attestation_key(),
                CodeIdentity::CurrentExecutable,
                &enclave_config.measured_bytes(enclave::Backend::Inline),
            )?;
            let ledger = secrets.ledger(tenant)?;
            let e =
                InlineEnclave::start_with_ledger(enclave_config, Box::new(attestation), Box::new(ledger))?;
            serve(&config, e, &signals, "inline", None)
        }
    }
}

/// What watching the enclave needs of its backend.
trait Supervised: Enclave + Sized + 'static {
    /// Why the enclave can no longer serve, if it cannot.
    fn dead(&mut self) -> Option<String>;
    /// A fresh, empty enclave in place of this dead one.
    fn restart(&mut self) -> anyhow::Result<()>;
    /// Its process, if it has one.
    fn process_id(&self) -> Option<u32>;
}

impl Supervised for ProcessEnclave {
    fn dead(&mut self) -> Option<String> {
        self.check().err().map(|e| e.to_string())
    }
    fn restart(&mut self) -> anyhow::Result<()> {
        ProcessEnclave::restart(self).context("starting a new enclave process")
    }
    fn process_id(&self) -> Option<u32> {
        self.pid()
    }
}

impl Supervised for InlineEnclave {
    /// It lives and dies with this process.
    fn dead(&mut self) -> Option<String> {
        None
    }
    fn restart(&mut self) -> anyhow::Result<()> {
        anyhow::bail!("an inline enclave is not restarted")
    }
    fn process_id(&self) -> Option<u32> {
        None
    }
}

fn log_line() -> Box<dyn FnMut(&str) + Send> {
    Box::new(|line| println!("{line}"))
}

/// The configuration's wrapped secrets, read now (as root) for restarts after the drop.
fn wrapped_secrets(config: &GatewayConfig) -> anyhow::Result<Vec<(String, zeroize::Zeroizing<Vec<u8>>)>> {
    let mut out = Vec::new();
    for s in &config.ike.secrets {
        if let Some(file) = &s.file {
            let path = config.secret_path(file);
            let blob = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            out.push((s.name.clone(), zeroize::Zeroizing::new(blob)));
        }
    }
    Ok(out)
}

/// `cloister gateway`'s side of the supervision (`gateway::supervise`): the enclave is
/// restarted in place (a new process under the old handle), the configuration's wrapped
/// secrets go in again, and the control socket carries over.
struct Restart<'a, E> {
    config: &'a GatewayConfig,
    secrets: &'a [(String, zeroize::Zeroizing<Vec<u8>>)],
    /// The dead gateway's enclave and control socket until a restart takes them.
    enclave: Option<E>,
    control: Option<gateway::control::ControlServer>,
}

impl<E: Supervised> Revive<E> for Restart<'_, E> {
    fn health(&mut self, enclave: &mut E) -> Result<(), String> {
        enclave.dead().map_or(Ok(()), Err)
    }

    fn revive(&mut self, dead: Option<Gateway<E>>) -> Result<Gateway<E>, Revival> {
        let fatal = |why: String| Revival { why, retry: false };
        let again = |why: String| Revival { why, retry: true };
        if let Some(mut old) = dead {
            let shared = old.enclave();
            self.control = old.take_control().or(self.control.take());
            drop(old.stop());
            self.enclave =
                Some(shared.into_inner().ok_or_else(|| fatal("the enclave is still in use".into()))?);
        }
        let mut enclave = self.enclave.take().ok_or_else(|| fatal("no enclave left to restart".into()))?;
        if let Err(e) = enclave.restart() {
            self.enclave = Some(enclave);
            return Err(again(format!("{e:#}")));
        }
        let mut given = BTreeMap::new();
        for (name, blob) in self.secrets {
            match enclave.provision_secret(blob) {
                Ok(h) => {
                    given.insert(name.clone(), h);
                }
                Err(e) => {
                    self.enclave = Some(enclave);
                    return Err(again(format!("provisioning secret {name}: {e}")));
                }
            }
        }
        // The control socket carries over: after the drop it could not be bound again.
        let mut config = self.config.clone();
        config.settings.control_socket = None;
        // A gateway that cannot start from a configuration that started before will not.
        let mut new =
            Gateway::start_with(&config, enclave, given, log_line()).map_err(|e| fatal(e.to_string()))?;
        new.set_control(self.control.take());
        Ok(new)
    }
}

fn serve<E: Supervised>(
    config: &GatewayConfig,
    enclave: E,
    signals: &cio::signal::Signals,
    backend: &str,
    drop_to: Option<(PlatformClient, u32)>,
) -> anyhow::Result<()> {
    let secrets = wrapped_secrets(config)?;
    let gw = Gateway::start(config, enclave, log_line())?;
    // Its files are read, its TUN device and sockets open: root's other powers go now.
    if let Some((platform, uid)) = drop_to {
        platform.become_network_user(uid).with_context(|| format!("becoming user {uid}"))?;
        println!("gateway: runs as user {uid} with {} only", platform::NETWORK_CAPABILITY_NAMES);
    }
    let dp = gw.dataplane();
    let ike: Vec<String> = gw.ike_addresses().iter().map(ToString::to_string).collect();
    let (udp, _) = dp.listeners();
    let udp: Vec<String> = udp.iter().map(ToString::to_string).collect();
    println!(
        "gateway: tenant {} enclave {backend} ike=[{}] esp_udp=[{}] tun {} workers={} control {} offloads: {}",
        config.settings.tenant,
        ike.join(","),
        udp.join(","),
        dp.tun_name(),
        dp.workers(),
        config.settings.control_socket.as_deref().map_or_else(|| "none".into(), |p| p.display().to_string()),
        dp.offloads()
    );
    let mut restart = Restart { config, secrets: &secrets, enclave: None, control: None };
    let mut supervisor = Supervisor::new([]);
    let mut gw = Some(gw);
    let signal = loop {
        let wait = match gw.as_mut() {
            Some(g) => {
                g.round(gateway::daemon::MAX_WAIT);
                Duration::ZERO
            }
            None => gateway::daemon::MAX_WAIT,
        };
        if let Some(s) = signals.wait(wait)? {
            break s;
        }
        match supervisor.tend(&mut gw, &mut restart, Instant::now()) {
            Turn::Serving => {}
            Turn::Recovered { after, .. } => {
                let pid = gw.as_ref().and_then(|g| g.enclave().lock().process_id());
                println!(
                    "gateway: enclave restarted in {} ms (enclave process pid {}), secrets provisioned again",
                    after.as_millis(),
                    pid.map_or_else(|| "?".into(), |p| p.to_string())
                );
            }
            Turn::Down { why, retry_in } => {
                println!("gateway: enclave restart failed ({why}); again in {} ms", retry_in.as_millis());
            }
            Turn::Failed(why) => anyhow::bail!("the enclave cannot be restarted: {why}"),
        }
    };
    println!("gateway: {}, stopping", cio::signal::Signals::name(signal));
    let Some(gw) = gw else { return Ok(()) };
    let report = gw.stop();
    println!("{}", WorkerSnapshot::sum(&report.workers));
    anyhow::ensure!(report.panicked.is_empty(), "workers {:?} panicked", report.panicked);
    Ok(())
}
