//! One tenant at run time: a thread that owns the tenant's gateway (IKE engine and data
//! plane) over the tenant's own enclave, answers the API's commands, watches the enclave,
//! and brings the tenant back when the enclave dies.
//!
//! ```text
//!  API thread ──Command──▶ tenant thread: Gateway::round ◀─▶ sockets, TUN (tenant's netns)
//!                             │  gateway::supervise, as `cloister gateway` does: every round
//!                             │  is the enclave alive? every 500 ms: connections to keep?
//!                             └─ dead: stop the gateway, start a new enclave, unseal the
//!                                tenant's secrets from the store, start, re-initiate
//! ```
//!
//! Nothing here holds a key: secrets reach the enclave sealed (from the store) or in an
//! envelope only the enclave opens; what goes back to the store is sealed by the enclave.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use attest::migration::{DestinationKey, MigrationPackage};
use enclave::ledger::Ledger;
use enclave::{Enclave, EnclaveConfig, SealedBlob};
use enclave_host::{ProcessEnclave, ProcessSpec};
use gateway::control::Request;
use gateway::snapshot::Snapshot;
use gateway::supervise::{Revival, Revive, Supervisor, Turn};
use gateway::Gateway;
use serde::Serialize;
use store::{Key, Kind, Store, Value, Write};

use crate::config::TenantConfig;
use crate::error::{Error, Result};
use crate::platform::{Platform, Source};

/// How long one gateway round may wait for input (also the API's worst added latency).
const ROUND: Duration = Duration::from_millis(50);
/// How long the API waits for the tenant thread.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an arriving tenant waits for its package.
const ARRIVAL_WAIT: Duration = Duration::from_secs(60);
/// How long a move waits for IKE exchanges under way to end before it gives up.
const QUIET_WAIT: Duration = Duration::from_secs(5);
/// The destination enclave's RSA key for the moved data key (docs/migration.md).
const DESTINATION_KEY_BITS: usize = 3072;
/// Store record names.
const SECRET_PREFIX: &str = "secret/";
const UP_PREFIX: &str = "up/";

/// The service's log: one line per event, never a key.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// What the API asks a tenant's thread.
pub(crate) enum Command {
    /// The tunnel table and counters.
    Snapshot(Sender<Snapshot>),
    /// A control request (`list`, `initiate`, `rekey-child`, ...), answered in text.
    Text(Request, Sender<String>),
    /// A provisioning offer from the enclave (its encoding).
    Offer(Sender<Result<Vec<u8>>>),
    /// An envelope for the secret `name`.
    Provision { name: String, envelope: Vec<u8>, reply: Sender<Result<()>> },
    /// Identity evidence from the tenant's enclave for a fresh `challenge` (its measurement).
    Identity { challenge: [u8; 32], reply: Sender<Result<Vec<u8>>> },
    /// Freeze IKE and export the enclave's state for a move to `destination` (which the
    /// enclave verifies), with a second share to the HSM key `hsm_spki` in envelope mode;
    /// the reply is the package, the source's evidence inside.
    MoveOut {
        destination: DestinationKey,
        hsm_spki: Option<Vec<u8>>,
        oaep: attest::migration::OaepHash,
        reply: Sender<Result<Vec<u8>>>,
    },
    /// The move did not happen: take up IKE again.
    MoveAbort,
    /// Export the tenant's secrets (no SA) as a backup package, its share wrapped to
    /// `wrap_spki` (the backup key `label`'s); the reply is the package, the enclave's
    /// evidence inside.
    Backup {
        wrap_spki: Vec<u8>,
        /// The HSM backup root's certificate of `wrap_spki` (the enclave checks it).
        certificate: Vec<u8>,
        oaep: attest::migration::OaepHash,
        label: String,
        reply: Sender<Result<Vec<u8>>>,
    },
    /// The destination took over: stop, answering with the inbound windows' tops.
    MoveStop(Sender<Vec<(u32, u64)>>),
    /// A moved tenant's package for this (arriving) tenant's enclave.
    /// `hsm_share` is the package's HSM share rewrapped to the arriving enclave's key.
    Arrive { package: Vec<u8>, hsm_share: Option<Vec<u8>>, reply: Sender<Result<String>> },
    /// The source stopped: treat its last sequence numbers as seen.
    RaiseWindows(Vec<(u32, u64)>, Sender<usize>),
    /// Stop the tenant.
    Stop,
}

/// A tenant's state, readable without asking its thread.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// `starting`, `running`, `recovering` or `failed`.
    pub state: &'static str,
    /// The enclave process, when there is one.
    pub enclave_pid: Option<u32>,
    /// Enclave deaths the tenant recovered from.
    pub recoveries: u64,
    /// How long the last recovery took until the gateway ran again, milliseconds.
    pub last_recovery_ms: Option<u64>,
    /// The last failure, if any (no secrets: enclave and gateway errors carry none).
    pub last_error: Option<String>,
    /// Configured secrets and whether the enclave holds each.
    pub secrets: Vec<(String, bool)>,
}

/// A tenant's thread, seen from the service.
pub struct TenantHandle {
    /// The tenant's configuration.
    pub config: TenantConfig,
    tx: Sender<Command>,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for TenantHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TenantHandle").field("name", &self.config.name).finish_non_exhaustive()
    }
}

/// Starts enclaves for tenants and checks on them.
pub trait Launcher: Send + Sync + 'static {
    /// The enclave type.
    type E: Enclave + 'static;
    /// Starts `tenant`'s enclave on the tenant's ledger of this platform, taking only
    /// secrets `signers` signed where there are any, with room for ESP batches of
    /// `packet_area` bytes (`dataplane::packet_area` of the tenant's data plane; 0 for an
    /// enclave that carries no ESP).
    fn start(&self, tenant: u32, signers: &[Vec<u8>], packet_area: usize) -> Result<Self::E>;
    /// `Ok` while the enclave can serve; why not otherwise.
    fn health(enclave: &mut Self::E) -> core::result::Result<(), String>;
    /// The enclave's process, if it has one.
    fn pid(enclave: &Self::E) -> Option<u32>;
}

/// Enclaves as hardened child processes (`cloister enclave-process`).
#[derive(Debug)]
pub struct ProcessLauncher {
    platform: Arc<Platform>,
    program: std::path::PathBuf,
}

impl ProcessLauncher {
    /// Enclaves run `program enclave-process` (the `cloister` binary).
    pub fn new(platform: Arc<Platform>, program: std::path::PathBuf) -> Self {
        Self { platform, program }
    }
}

impl Launcher for ProcessLauncher {
    type E = ProcessEnclave;
    fn start(&self, tenant: u32, signers: &[Vec<u8>], packet_area: usize) -> Result<ProcessEnclave> {
        let spec = ProcessSpec::new(&self.program, ["enclave-process"]).with_packet_area(packet_area);
        let started = match self.platform.source() {
            Source::Process(client) => ProcessEnclave::launch(
                spec,
                std::sync::Arc::new(client.clone()),
                self.platform.public_config(tenant, signers),
            ),
            Source::Local(_) => match self.platform.local_start(tenant, signers)? {
                Some((cfg, key, ledger)) => ProcessEnclave::start_with_ledger(spec, cfg, key, ledger),
                None => return Err(Error::Internal { what: "a local platform without its secrets".into() }),
            },
        };
        started.map_err(|e| Error::Tenant {
            tenant: tenant.to_string(),
            why: format!("starting the enclave process: {e}"),
        })
    }
    fn health(enclave: &mut ProcessEnclave) -> core::result::Result<(), String> {
        enclave.check().map_err(|e| e.to_string())
    }
    fn pid(enclave: &ProcessEnclave) -> Option<u32> {
        enclave.pid()
    }
}

/// Starts an enclave in the service's own process from its configuration and the platform's
/// attestation key (PKCS#8): the binary supplies it, since only the binary links the
/// trusted core.
pub type InlineStart<E> = fn(EnclaveConfig, &[u8], Box<dyn Ledger>) -> enclave::Result<E>;

/// Enclaves in this process (tests; a service that itself runs in a confidential VM).
#[derive(Debug)]
pub struct InlineLauncher<E> {
    platform: Arc<Platform>,
    start: InlineStart<E>,
}

impl<E> InlineLauncher<E> {
    /// Inline enclaves, started by `start`, attested by `platform`'s key.
    pub fn new(platform: Arc<Platform>, start: InlineStart<E>) -> Self {
        Self { platform, start }
    }
}

impl<E: Enclave + 'static> Launcher for InlineLauncher<E> {
    type E = E;
    /// Inline enclaves work on the data plane's own buffers: `packet_area` needs no room.
    fn start(&self, tenant: u32, signers: &[Vec<u8>], _packet_area: usize) -> Result<E> {
        let Some((cfg, key, ledger)) = self.platform.local_start(tenant, signers)? else {
            return Err(Error::Tenant {
                tenant: tenant.to_string(),
                why: "inline enclaves need the platform's secrets in this process".into(),
            });
        };
        (self.start)(cfg, key, Box::new(ledger))
            .map_err(|e| Error::Tenant { tenant: tenant.to_string(), why: e.to_string() })
    }
    fn health(_: &mut E) -> core::result::Result<(), String> {
        Ok(())
    }
    fn pid(_: &E) -> Option<u32> {
        None
    }
}

impl TenantHandle {
    /// Starts the tenant's thread; it starts the enclave and gateway itself and reports
    /// through [`Self::status`]. `netns`: the namespace the service runs in (the thread's
    /// sockets go there), when it is not the process's.
    pub fn spawn<L: Launcher>(
        config: TenantConfig,
        launcher: Arc<L>,
        store: Arc<dyn Store>,
        log: Log,
    ) -> Result<Self> {
        Self::start_thread(config, launcher, store, log, "starting", |runner, rx| runner.run(rx))
    }

    /// Starts the thread of a tenant arriving by a live move: its enclave starts and makes
    /// the destination key returned here; the `Arrive` command brings the package.
    pub fn spawn_arrival<L: Launcher>(
        config: TenantConfig,
        launcher: Arc<L>,
        store: Arc<dyn Store>,
        log: Log,
    ) -> Result<(Self, DestinationKey)> {
        let (key_tx, key_rx) = mpsc::channel();
        let handle = Self::start_thread(config, launcher, store, log, "arriving", move |runner, rx| {
            runner.arrive(rx, &key_tx);
        })?;
        let key = key_rx.recv_timeout(CALL_TIMEOUT * 3).map_err(|_| Error::NotRunning {
            tenant: handle.config.name.clone(),
            why: "its enclave made no destination key in time".into(),
        })??;
        Ok((handle, key))
    }

    /// The thread of a tenant in `state`, running `body` with its runner and commands.
    fn start_thread<L: Launcher>(
        config: TenantConfig,
        launcher: Arc<L>,
        store: Arc<dyn Store>,
        log: Log,
        state: &'static str,
        body: impl FnOnce(Runner<L>, &Receiver<Command>) + Send + 'static,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(Status { state, ..Status::default() }));
        let runner = Runner {
            config: config.clone(),
            launcher,
            store,
            log,
            status: Arc::clone(&status),
            supervisor: Supervisor::new(config.initiate.iter().cloned()),
        };
        let thread = std::thread::Builder::new()
            .name(format!("tenant-{}", config.name))
            .spawn(move || body(runner, &rx))
            .map_err(|e| Error::Io {
                what: format!("starting tenant {}'s thread", config.name),
                why: e.to_string(),
            })?;
        Ok(Self { config, tx, status, thread: Some(thread) })
    }

    /// The tenant's state.
    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Queues a command for the tenant's thread.
    pub(crate) fn send(&self, cmd: Command) -> Result<()> {
        self.tx.send(cmd).map_err(|_| Error::NotRunning {
            tenant: self.config.name.clone(),
            why: self.status().state.to_owned(),
        })
    }

    /// Stops the thread (the gateway and the enclave process with it) and waits for it.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for TenantHandle {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The store record of a tenant's secret `name`.
pub(crate) fn secret_record(name: &str) -> String {
    format!("{SECRET_PREFIX}{name}")
}

/// A tenant's sealed secrets in the store (which of them still open is the enclave's and
/// its platform ledger's to say).
pub(crate) fn sealed_secrets(store: &dyn Store, tenant: u32) -> Result<Vec<(String, SealedBlob)>> {
    let secrets: Vec<(String, SealedBlob)> = store
        .list(Some(tenant), Kind::Sealed)?
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::Sealed(b) => k.name.strip_prefix(SECRET_PREFIX).map(|n| (n.to_owned(), b)),
            _ => None,
        })
        .collect();
    Ok(secrets)
}

struct Runner<L: Launcher> {
    config: TenantConfig,
    launcher: Arc<L>,
    store: Arc<dyn Store>,
    log: Log,
    status: Arc<Mutex<Status>>,
    /// Which connections to keep up, and the enclave's revivals.
    supervisor: Supervisor,
}

/// The service's side of the supervision: a new enclave from the launcher, the tenant's
/// secrets unsealed from the store.
struct Restart<'a, L: Launcher>(&'a Runner<L>);

impl<L: Launcher> Revive<L::E> for Restart<'_, L> {
    fn health(&mut self, enclave: &mut L::E) -> core::result::Result<(), String> {
        L::health(enclave)
    }

    fn revive(&mut self, dead: Option<Gateway<L::E>>) -> core::result::Result<Gateway<L::E>, Revival> {
        if let Some(old) = dead {
            drop(old.stop());
            self.0.set(|s| s.enclave_pid = None);
        }
        self.0.start().map_err(|e| Revival { why: e.to_string(), retry: true })
    }
}

impl<L: Launcher> Runner<L> {
    fn log(&self, line: &str) {
        (self.log)(&format!("tenant {}: {line}", self.config.name));
    }

    fn set(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    fn packet_area(&self) -> usize {
        dataplane::packet_area(&self.config.gateway.dataplane.settings)
    }

    fn key(&self, kind: Kind, name: String) -> Result<Key> {
        Ok(Key::new(self.config.id, kind, name)?)
    }

    /// Starts the enclave and the gateway; secrets come back from their sealed blobs.
    fn start(&self) -> Result<Gateway<L::E>> {
        let secrets = sealed_secrets(self.store.as_ref(), self.config.id)?;
        let mut enclave = self.launcher.start(self.config.id, &self.config.signers, self.packet_area())?;
        let mut given = BTreeMap::new();
        for (name, blob) in &secrets {
            match enclave.unseal_secret(blob) {
                Ok(h) => {
                    given.insert(name.clone(), h);
                }
                Err(e) => self.log(&format!("secret {name}: sealed blob refused ({e}); provision it again")),
            }
        }
        let pid = L::pid(&enclave);
        let log = Arc::clone(&self.log);
        let prefix = format!("tenant {}: ", self.config.name);
        let gw = Gateway::start_with(
            &self.config.gateway,
            enclave,
            given,
            Box::new(move |l| log(&format!("{prefix}{l}"))),
        )
        .map_err(|e| Error::Tenant { tenant: self.config.name.clone(), why: e.to_string() })?;
        self.set(|s| {
            s.enclave_pid = pid;
            s.secrets = gw.secrets();
        });
        Ok(gw)
    }

    /// Brings back the connections the store remembers as up before a restart (the
    /// configured ones are always kept).
    fn remembered(&mut self) -> Result<()> {
        let now = Instant::now();
        for (k, _) in self.store.list(Some(self.config.id), Kind::Metadata)? {
            if let Some(c) = k.name.strip_prefix(UP_PREFIX) {
                if self.config.gateway.ike.connections.iter().any(|x| x.name == c) {
                    self.supervisor.restore(c, now);
                }
            }
        }
        Ok(())
    }

    fn run(mut self, rx: &Receiver<Command>) {
        if let Err(e) = self.remembered() {
            self.log(&format!("reading the store: {e}"));
        }
        let gw = match self.start() {
            Ok(gw) => Some(gw),
            Err(e) => {
                let why = e.to_string();
                self.set(|s| {
                    s.state = "failed";
                    s.last_error = Some(why.clone());
                });
                self.log(&format!("start failed: {why}"));
                self.supervisor.start_failed(why, Instant::now());
                None
            }
        };
        self.serve(gw, rx);
    }

    /// An arriving tenant (a live move): a fresh enclave makes the destination key (sent on
    /// `key_tx`), then the thread waits [`ARRIVAL_WAIT`] for the package and serves the
    /// tenant with what it brings.
    fn arrive(mut self, rx: &Receiver<Command>, key_tx: &Sender<Result<DestinationKey>>) {
        self.set(|s| s.state = "arriving");
        let made = self.launcher.start(self.config.id, &self.config.signers, self.packet_area()).and_then(
            |mut e| {
                let key = e
                    .migration_destination_key(DESTINATION_KEY_BITS)
                    .map_err(|e| Error::Tenant { tenant: self.config.name.clone(), why: e.to_string() })?;
                Ok((e, key))
            },
        );
        let mut enclave = match made {
            Ok((e, key)) => {
                let _ = key_tx.send(Ok(key));
                e
            }
            Err(e) => {
                self.set(|s| {
                    s.state = "failed";
                    s.last_error = Some(e.to_string());
                });
                let _ = key_tx.send(Err(e));
                return;
            }
        };
        let deadline = Instant::now() + ARRIVAL_WAIT;
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Command::Arrive { package, hsm_share, reply }) => {
                    match self.land(enclave, package, hsm_share.as_deref()) {
                        Ok(gw) => {
                            let _ = reply.send(Ok(gw.dataplane().tun_name().to_owned()));
                            if let Err(e) = self.remembered() {
                                self.log(&format!("reading the store: {e}"));
                            }
                            self.serve(Some(gw), rx);
                            return;
                        }
                        Err(e) => {
                            self.log(&format!("arrival refused: {e}"));
                            self.set(|s| {
                                s.state = "failed";
                                s.last_error = Some(e.to_string());
                            });
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
                Ok(Command::Stop) | Err(_) => {
                    self.set(|s| s.state = "stopped");
                    self.log("arrival given up: no package came");
                    return;
                }
                // Anything else waits for a running gateway; its sender times out.
                Ok(_) => {}
            }
            enclave = match L::health(&mut enclave) {
                Ok(()) => enclave,
                Err(why) => {
                    self.set(|s| {
                        s.state = "failed";
                        s.last_error = Some(why);
                    });
                    return;
                }
            };
        }
    }

    /// Imports a moved tenant's package and starts its gateway on the SAs it carries.
    fn land(&self, mut enclave: L::E, package: Vec<u8>, hsm_share: Option<&[u8]>) -> Result<Gateway<L::E>> {
        let failed = |why: String| Error::Tenant { tenant: self.config.name.clone(), why };
        let package = MigrationPackage::from_bytes(package).map_err(|e| failed(e.to_string()))?;
        let restore = enclave.import_state(&package, hsm_share).map_err(|e| failed(e.to_string()))?;
        let pid = L::pid(&enclave);
        let log = Arc::clone(&self.log);
        let prefix = format!("tenant {}: ", self.config.name);
        let gw = Gateway::start_moved(
            &self.config.gateway,
            enclave,
            &restore,
            Box::new(move |l| log(&format!("{prefix}{l}"))),
        )
        .map_err(|e| failed(e.to_string()))?;
        self.keep_secrets(&gw)?;
        self.set(|s| {
            s.enclave_pid = pid;
            s.secrets = gw.secrets();
        });
        Ok(gw)
    }

    /// Freezes IKE (waiting up to [`QUIET_WAIT`] for exchanges under way to end) and
    /// exports the enclave's state with the gateway's; on a failed export IKE goes on.
    fn move_out(
        &self,
        gw: &mut Gateway<L::E>,
        destination: &DestinationKey,
        hsm_spki: Option<&[u8]>,
        oaep: attest::migration::OaepHash,
    ) -> Result<Vec<u8>> {
        let failed = |why: String| Error::Tenant { tenant: self.config.name.clone(), why };
        let deadline = Instant::now() + QUIET_WAIT;
        let state = loop {
            match gw.freeze(Instant::now()) {
                Ok(s) => break s,
                Err(gateway::Error::Ike(ike::Error::MoveBusy { .. })) if Instant::now() < deadline => {
                    gw.round(Duration::from_millis(20));
                }
                Err(e) => return Err(failed(format!("cannot freeze for the move: {e}"))),
            }
        };
        let enc = gw.enclave();
        let exported = enc.lock().export_state(destination, hsm_spki, oaep, &state);
        match exported {
            Ok(p) => Ok(p.into_bytes()),
            Err(e) => {
                gw.thaw(Instant::now(), false);
                Err(failed(format!("export: {e}")))
            }
        }
    }

    /// A backup package of the tenant's secrets, the enclave's evidence inside; the tenant
    /// serves on untouched (no freeze, no counter capped).
    fn backup(
        &self,
        gw: &Gateway<L::E>,
        wrap_spki: &[u8],
        certificate: &[u8],
        oaep: attest::migration::OaepHash,
        label: &str,
    ) -> Result<Vec<u8>> {
        let failed = |why: String| Error::Tenant { tenant: self.config.name.clone(), why };
        let state = gw.backup_state().map_err(|e| failed(e.to_string()))?;
        let enc = gw.enclave();
        let package = enc
            .lock()
            .export_secrets(wrap_spki, certificate, oaep, &state)
            .map_err(|e| failed(format!("backup: {e}")))?;
        self.log(&format!("backup package made ({} bytes, key {label})", package.as_bytes().len()));
        Ok(package.into_bytes())
    }

    /// Seals every secret an import brought under this host's platform root and stores it,
    /// so that the tenant survives an enclave restart or a service restart here. Refused as
    /// a whole if one cannot be kept: an arrival is not confirmed while a key would be lost.
    fn keep_secrets(&self, gw: &Gateway<L::E>) -> Result<()> {
        let enc = gw.enclave();
        let mut writes = Vec::new();
        for (name, handle) in gw.secret_handles() {
            let sealed = enc.lock().seal_secret(handle).map_err(|e| Error::Tenant {
                tenant: self.config.name.clone(),
                why: format!("sealing secret {name}: {e}"),
            })?;
            writes.push(Write::Put(self.key(Kind::Sealed, secret_record(&name))?, Value::Sealed(sealed)));
        }
        let n = writes.len();
        self.store.apply(&writes)?;
        self.log(&format!("{n} secret(s) sealed for this host's store"));
        Ok(())
    }

    /// The running tenant's loop, until it is stopped or moves away; `None`: its enclave
    /// is to be started (on the supervision's schedule).
    fn serve(mut self, mut gw: Option<Gateway<L::E>>, rx: &Receiver<Command>) {
        if let Some(g) = &gw {
            self.set(|s| s.state = "running");
            self.log(&format!("running, tun {}", g.dataplane().tun_name()));
        }
        loop {
            if let Some(g) = gw.as_mut() {
                g.round(ROUND);
                loop {
                    match rx.try_recv() {
                        Ok(Command::Stop) | Err(mpsc::TryRecvError::Disconnected) => {
                            self.stop(gw);
                            return;
                        }
                        Ok(Command::MoveStop(reply)) => {
                            let tops = g.inbound_tops();
                            if let Some(g) = gw.take() {
                                drop(g.stop());
                            }
                            self.set(|s| {
                                s.state = "moved";
                                s.enclave_pid = None;
                            });
                            self.log("moved away: stopped, the destination serves it");
                            let _ = reply.send(tops);
                            return;
                        }
                        Ok(cmd) => self.command(g, cmd),
                        Err(mpsc::TryRecvError::Empty) => break,
                    }
                }
            }
            // Every round: for a process enclave a zero-timeout poll of its pidfd (well under
            // a microsecond), so a death is seen within one round.
            let mut supervisor = core::mem::take(&mut self.supervisor);
            let turn = supervisor.tend(&mut gw, &mut Restart(&self), Instant::now());
            let changes = supervisor.take_changes();
            self.supervisor = supervisor;
            self.record(&changes);
            match turn {
                Turn::Serving => {}
                Turn::Recovered { why, after } => {
                    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                    self.set(|s| {
                        s.state = "running";
                        s.recoveries += 1;
                        s.last_recovery_ms = Some(ms);
                        s.last_error = Some(why);
                    });
                    self.log(&format!("recovered in {ms} ms: new enclave, secrets unsealed"));
                }
                Turn::Down { why, retry_in } => {
                    self.set(|s| {
                        s.state = "recovering";
                        s.enclave_pid = None;
                        s.last_error = Some(why.clone());
                    });
                    self.log(&format!("no enclave ({why}); trying again in {} ms", retry_in.as_millis()));
                    // Commands meanwhile are answered "not running" (their senders time
                    // out); a stop ends the tenant.
                    match rx.recv_timeout(retry_in) {
                        Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => {
                            self.stop(gw);
                            return;
                        }
                        Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                    }
                }
                Turn::Failed(why) => {
                    self.set(|s| {
                        s.state = "failed";
                        s.last_error = Some(why.clone());
                    });
                    self.log(&format!("given up: {why}"));
                    return;
                }
            }
        }
    }

    /// Keeps the store's record of the connections to bring back after a restart current.
    fn record(&self, changes: &[(String, bool)]) {
        let mut writes = Vec::new();
        for (c, up) in changes {
            let Ok(k) = self.key(Kind::Metadata, format!("{UP_PREFIX}{c}")) else { continue };
            if *up {
                let since =
                    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                writes.push(Write::Put(k, Value::Metadata(format!("established {since}"))));
            } else {
                writes.push(Write::Remove(k));
            }
        }
        if !writes.is_empty() {
            if let Err(e) = self.store.apply(&writes) {
                self.log(&format!("recording connections: {e}"));
            }
        }
    }

    fn command(&mut self, gw: &mut Gateway<L::E>, cmd: Command) {
        match cmd {
            Command::Snapshot(reply) => {
                let _ = reply.send(gw.snapshot(Instant::now()));
            }
            Command::Text(r, reply) => {
                let _ = reply.send(gw.request(Instant::now(), &r));
            }
            Command::Offer(reply) => {
                let offer = gw.enclave().provisioning_offer().map(|o| o.to_bytes());
                let _ = reply.send(offer.map_err(|e| Error::Provisioning(e.to_string())));
            }
            Command::Provision { name, envelope, reply } => {
                let r = self.provision(gw, &name, &envelope);
                if r.is_ok() {
                    // Connections that failed for want of this secret go again at once.
                    self.supervisor.initiate_soon();
                }
                let _ = reply.send(r);
            }
            Command::Identity { challenge, reply } => {
                let e = gw.enclave().lock().identity_evidence(&challenge).map(|e| e.bytes);
                let _ = reply.send(
                    e.map_err(|e| Error::Tenant { tenant: self.config.name.clone(), why: e.to_string() }),
                );
            }
            Command::MoveOut { destination, hsm_spki, oaep, reply } => {
                let _ = reply.send(self.move_out(gw, &destination, hsm_spki.as_deref(), oaep));
            }
            Command::Backup { wrap_spki, certificate, oaep, label, reply } => {
                let _ = reply.send(self.backup(gw, &wrap_spki, &certificate, oaep, &label));
            }
            Command::MoveAbort => {
                if gw.is_frozen() {
                    gw.thaw(Instant::now(), true);
                }
            }
            Command::RaiseWindows(tops, reply) => {
                let _ = reply.send(gw.raise_windows(&tops));
            }
            Command::Arrive { reply, .. } => {
                let _ = reply.send(Err(Error::Duplicate {
                    what: format!("tenant {} (running here)", self.config.name),
                }));
            }
            Command::Stop | Command::MoveStop(_) => {}
        }
    }

    /// Opens an envelope in the enclave, stores the sealed secret, then hands the secret
    /// to the engine; a secret the store could not keep is not used (it would be lost at
    /// the next restart without anyone knowing).
    fn provision(&self, gw: &mut Gateway<L::E>, name: &str, envelope: &[u8]) -> Result<()> {
        if !gw.secrets().iter().any(|(n, _)| n == name) {
            return Err(Error::Unknown { what: format!("secret {name} of tenant {}", self.config.name) });
        }
        let mut enc = gw.enclave();
        let (handle, sealed) =
            enc.provision_attested(envelope).map_err(|e| Error::Provisioning(e.to_string()))?;
        let key = self.key(Kind::Sealed, secret_record(name))?;
        let previous = self.store.get(&key);
        if let Err(e) = self.store.put(key.clone(), Value::Sealed(sealed)) {
            let _ = enc.delete_secret(handle);
            return Err(e.into());
        }
        if let Err(e) = gw.add_secret(name, handle) {
            // Refused (a key of the wrong kind for its connections): the store goes back
            // to what it held, so a restart does not bring the refused secret in.
            let _ = enc.delete_secret(handle);
            let _ = match previous {
                Ok(Some(v)) => self.store.put(key, v),
                _ => self.store.remove(&key).map(drop),
            };
            return Err(Error::Provisioning(e.to_string()));
        }
        self.set(|s| s.secrets = gw.secrets());
        self.log(&format!("secret {name} provisioned by attestation and sealed"));
        Ok(())
    }

    fn stop(&self, gw: Option<Gateway<L::E>>) {
        // The enclave process goes with the last handle to it, inside the gateway.
        if let Some(gw) = gw {
            drop(gw.stop());
        }
        self.set(|s| {
            s.state = "stopped";
            s.enclave_pid = None;
        });
        self.log("stopped");
    }
}
