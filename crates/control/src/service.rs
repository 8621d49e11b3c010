//! The service: every tenant's thread, the store, the platform, and the operator API.
//!
//! Tenants come from the configuration file and from the store (those added through the
//! API). Adding, changing or removing one touches only that tenant's thread: the others'
//! gateways, enclaves and tunnels go on undisturbed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gateway::Backend;
use store::{EmbeddedStore, Key, Kind, Store, Value, Write};
use zeroize::Zeroizing;

use crate::api::ApiServer;
use crate::config::{ServiceConfig, ServiceSettings, TenantConfig};
use crate::error::{Error, Result};
use crate::moving::{Agent, AgentStarter};
use crate::platform::{hex, load_or_create_token, Platform, Source};
use crate::released::{self, CasSource, Listed, NotReleased};
use crate::tenant::{InlineLauncher, InlineStart, Launcher, Log, ProcessLauncher, TenantHandle};
use attest::migration::DestinationKey;

/// The store record of a tenant added through the API.
const TENANT_RECORD: &str = "tenant";
/// The store record that says a tenant moved away from this host (where to, when). It
/// outlives a restart, so a tenant that the file (or the CAS) still defines here is not
/// started a second time beside the host that now serves it.
const MOVED_RECORD: &str = "moved";

/// What the service shares between its API thread and its owner.
pub(crate) struct Inner {
    pub(crate) settings: ServiceSettings,
    pub(crate) dir: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) platform: Arc<Platform>,
    tenants: Mutex<BTreeMap<String, TenantHandle>>,
    /// Names of the tenants the configuration file defines (the file is their source).
    file_tenants: Mutex<BTreeSet<String>>,
    spawn: Box<SpawnFn>,
    pub(crate) started: Instant,
    pub(crate) log: Log,
    pub(crate) token: Zeroizing<String>,
    /// The configuration and attestation service, when tenants come from one too.
    pub(crate) cas: Option<CasLink>,
    /// The migration agent, with `[migrate]`.
    pub(crate) agent: Option<Agent>,
    spawn_arrival: Box<ArrivalFn>,
    /// Tenants arriving by a live move: id and the destination key their package needs.
    arrivals: Mutex<BTreeMap<String, (u32, DestinationKey)>>,
    /// Tenants moved away: a reload does not start them here again.
    moved: Mutex<BTreeSet<String>>,
}

/// Spawns a tenant's thread.
type SpawnFn = dyn Fn(TenantConfig) -> Result<TenantHandle> + Send + Sync;
/// Spawns an arriving tenant's thread (a live move), returning its destination key.
type ArrivalFn = dyn Fn(TenantConfig) -> Result<(TenantHandle, DestinationKey)> + Send + Sync;
/// Has the CAS release a tenant to a fresh enclave of its own.
type ReleaseFn = dyn Fn(&CasSource, &Listed) -> core::result::Result<TenantConfig, NotReleased> + Send + Sync;

/// The service's tie to a CAS: how to have a tenant released, and what came of it.
pub(crate) struct CasLink {
    pub(crate) source: CasSource,
    release: Box<ReleaseFn>,
    /// Running tenants the CAS released, with the digest of their release.
    known: Mutex<BTreeMap<String, String>>,
    /// Tenants the CAS refused, and why (shown by the API).
    pub(crate) refused: Mutex<BTreeMap<String, String>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running service.
pub struct Service {
    inner: Arc<Inner>,
    api: Option<ApiServer>,
}

impl core::fmt::Debug for Service {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Service").field("api", &self.inner.settings.api).finish_non_exhaustive()
    }
}

/// How tenants of one enclave backend start: their thread, and their release by a CAS.
fn tenant_starters<L: Launcher>(
    launcher: Arc<L>,
    store: &Arc<dyn Store>,
    log: &Log,
    dir: &Path,
    backend: Backend,
) -> (Box<SpawnFn>, Box<ArrivalFn>, Box<ReleaseFn>) {
    let (l, store2, log, dir) =
        (Arc::clone(&launcher), Arc::clone(store), Arc::clone(log), dir.to_path_buf());
    let (l3, store3, log3) = (Arc::clone(&launcher), Arc::clone(store), Arc::clone(&log));
    let store = Arc::clone(store);
    (
        Box::new(move |t| TenantHandle::spawn(t, Arc::clone(&l), Arc::clone(&store), Arc::clone(&log))),
        Box::new(move |t| {
            TenantHandle::spawn_arrival(t, Arc::clone(&l3), Arc::clone(&store3), Arc::clone(&log3))
        }),
        Box::new(move |c: &CasSource, t: &Listed| {
            c.release(launcher.as_ref(), store2.as_ref(), t, &dir, backend)
        }),
    )
}

/// Starts the platform process (`program platform-process`), which holds the attestation
/// key, the sealing root and the ledgers named in `settings`, and starts every enclave
/// process of this service.
/// Returns the client and the enclave user base it was given (`None`: enclaves run as the
/// platform's own user).
fn start_platform(
    program: &Path,
    settings: &ServiceSettings,
    log: &Log,
) -> Result<(platform::PlatformClient, Option<u32>)> {
    let mut args: Vec<std::ffi::OsString> = vec![
        "platform-process".into(),
        "--attestation-key".into(),
        settings.platform_key.clone().into_os_string(),
    ];
    args.extend(platform::Roots::Sealing { sealing_root: settings.sealing_root.clone() }.args());
    let base = settings.enclave_users(platform::started_as_root())?;
    match base {
        Some(b) => {
            args.extend(["--enclave-uid-base".into(), b.to_string().into()]);
            log(&format!("enclave processes run as user {b} + tenant id"));
        }
        None => log("enclave processes run as the service's own user"),
    }
    if let Some(h) = settings.migrate.as_ref().and_then(|m| m.hsm.as_ref()) {
        // The platform adds its own key; the service's say has no part in whom the agent trusts.
        for a in h.agent_settings(Vec::new()).args_for_platform() {
            args.extend(["--hsm-agent-arg".into(), a]);
        }
        if let Some(uid) = settings.agent_uid(base.is_some()) {
            args.extend(["--hsm-agent-uid".into(), uid.to_string().into()]);
            log(&format!("the HSM agent runs as user {uid}"));
        }
    }
    let client = platform::PlatformClient::start(program, &args, Duration::from_secs(20))
        .map_err(|e| Error::Internal { what: format!("starting the platform process: {e}") })?;
    Ok((client, base))
}

/// Makes the service `uid` (and group `uid`) with the network capabilities only, once the
/// platform runs and the service's private files are read.
fn become_service_user(client: &platform::PlatformClient, uid: u32, log: &Log) -> Result<()> {
    client
        .become_network_user(uid)
        .map_err(|e| Error::Internal { what: format!("becoming user {uid}: {e}") })?;
    log(&format!("service: runs as user {uid} with {} only", platform::NETWORK_CAPABILITY_NAMES));
    Ok(())
}

impl Service {
    /// Opens the store and the platform, starts every tenant (each in its own thread with
    /// its own enclave) and the API. `program` is the binary whose `enclave-process`
    /// subcommand runs a tenant's enclave; `inline` starts one in this process where the
    /// configuration says `enclave = "inline"`. Call it in the namespace the service serves.
    pub fn start<E: enclave::Enclave + 'static>(
        config: ServiceConfig,
        dir: &Path,
        program: PathBuf,
        log: Log,
        inline: InlineStart<E>,
    ) -> Result<Self> {
        let settings = config.settings.clone();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&settings.state)?);
        let (mut platform, enclave_users) = match settings.enclave {
            Backend::Process => {
                let (client, base) = start_platform(&program, &settings, &log)?;
                (Platform::process(client), base)
            }
            Backend::Inline => {
                (Platform::load_or_create(&settings.platform_key, &settings.sealing_root)?, None)
            }
        };
        if let Some(m) = &settings.migrate {
            platform.trust(m.peers.values().map(|p| p.platform_key.clone()));
            if let Some(root) = m.hsm.as_ref().and_then(|h| h.backup_root.clone()) {
                platform.trust_backup_root(root);
            }
        }
        let platform = Arc::new(platform);
        let token = load_or_create_token(&settings.api_token)?;
        let cas_source = match &settings.cas {
            Some((url, token)) => Some(CasSource::new(url, token)?),
            None => None,
        };
        let (spawn, spawn_arrival, release) = match settings.enclave {
            Backend::Process => {
                let l = Arc::new(ProcessLauncher::new(Arc::clone(&platform), program.clone()));
                tenant_starters(l, &store, &log, dir, settings.enclave)
            }
            Backend::Inline => {
                let l = Arc::new(InlineLauncher::new(Arc::clone(&platform), inline));
                tenant_starters(l, &store, &log, dir, settings.enclave)
            }
        };
        let cas = cas_source.map(|source| CasLink {
            source,
            release,
            known: Mutex::new(BTreeMap::new()),
            refused: Mutex::new(BTreeMap::new()),
        });
        let starter = match platform.source() {
            Source::Process(client) => AgentStarter::Platform(client.clone()),
            // Inline enclaves: the service keeps root and starts the agent as its own user.
            Source::Local(_) => AgentStarter::Here {
                program,
                platform_key: platform.public_key().to_vec(),
                user: settings.agent_uid(platform::started_as_root()),
            },
        };
        let agent = settings.migrate.clone().map(|m| Agent::new(m, starter)).transpose()?;
        // Every private file the service reads is read; the threads that serve start below.
        if let (Source::Process(client), Some(base)) = (platform.source(), enclave_users) {
            match settings.service_uid {
                Some(0) => log("service: keeps root (service_uid = 0)"),
                uid => become_service_user(client, uid.unwrap_or(base - 1), &log)?,
            }
        }
        let inner = Arc::new(Inner {
            settings,
            dir: dir.to_path_buf(),
            store,
            platform,
            tenants: Mutex::new(BTreeMap::new()),
            file_tenants: Mutex::new(config.tenants.keys().cloned().collect()),
            spawn,
            started: Instant::now(),
            log,
            token,
            cas,
            agent,
            spawn_arrival,
            arrivals: Mutex::new(BTreeMap::new()),
            moved: Mutex::new(BTreeSet::new()),
        });
        let mut all = config.tenants.clone();
        for t in inner.stored_tenants()? {
            if all.contains_key(&t.name) {
                (inner.log)(&format!("tenant {}: defined in the file and the store; the file wins", t.name));
                continue;
            }
            let probe = ServiceConfig { settings: inner.settings.clone(), tenants: all.clone() };
            match probe.check_distinct(Some(&t)) {
                Ok(()) => {
                    all.insert(t.name.clone(), t);
                }
                Err(e) => (inner.log)(&format!("tenant {} from the store not started: {e}", t.name)),
            }
        }
        for t in inner.cas_tenants() {
            if all.contains_key(&t.name) {
                (inner.log)(&format!(
                    "tenant {}: defined locally and at the CAS; the local one wins",
                    t.name
                ));
                continue;
            }
            let probe = ServiceConfig { settings: inner.settings.clone(), tenants: all.clone() };
            match probe.check_distinct(Some(&t)) {
                Ok(()) => {
                    all.insert(t.name.clone(), t);
                }
                Err(e) => {
                    (inner.log)(&format!("tenant {} from the CAS not started: {e}", t.name));
                    if let Some(c) = &inner.cas {
                        locked(&c.known).remove(&t.name);
                    }
                }
            }
        }
        for (name, t) in all {
            if let Some(mark) = inner.moved_mark(&t) {
                (inner.log)(&format!(
                    "tenant {name}: moved away ({mark}); not started here (move it back, or take it out of the \
                     configuration and reload to forget the move)"
                ));
                locked(&inner.moved).insert(name);
                continue;
            }
            let h = (inner.spawn)(t)?;
            inner.lock().insert(name, h);
        }
        let api = ApiServer::start(Arc::clone(&inner))?;
        (inner.log)(&format!(
            "service: api http://{} enclave {} platform key {} tenants {}",
            api.addr(),
            inner.settings.enclave.name(),
            hex(inner.platform.public_key()),
            inner.lock().len()
        ));
        Ok(Self { inner, api: Some(api) })
    }

    /// The API's address.
    pub fn api_addr(&self) -> Option<core::net::SocketAddr> {
        self.api.as_ref().map(ApiServer::addr)
    }

    /// Applies a re-read configuration file: tenants it no longer has stop, new ones
    /// start, changed ones restart; the others are not touched. Returns (added, changed,
    /// removed) names.
    pub fn reload(&self, config: ServiceConfig) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
        self.inner.reload(config)
    }

    /// How the platform process ended, once it has: every enclave process ends with it and
    /// none can start, so the service must stop (and be started again). `None` while it
    /// runs, and for inline enclaves, which have no platform process.
    pub fn platform_ended(&self) -> Option<String> {
        match self.inner.platform.source() {
            Source::Process(client) => {
                client.check().err().map(|exit| format!("the platform process (pid {}) {exit}", client.pid()))
            }
            Source::Local(_) => None,
        }
    }

    /// Stops the API and every tenant.
    pub fn stop(mut self) {
        if let Some(api) = self.api.take() {
            api.stop();
        }
        let tenants = std::mem::take(&mut *self.inner.lock());
        for (_, t) in tenants {
            t.stop();
        }
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, TenantHandle>> {
        self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn file_tenants(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.file_tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tenants to start from the CAS: each released to a fresh enclave of its own, or, when
    /// the CAS cannot be reached, as it last released them (from the store). Tenants the CAS
    /// no longer lists leave the store.
    fn cas_tenants(&self) -> Vec<TenantConfig> {
        let Some(cas) = &self.cas else { return Vec::new() };
        let stored = match released::stored(self.store.as_ref(), &self.dir, self.settings.enclave) {
            Ok(s) => s,
            Err(e) => {
                (self.log)(&format!("cas: the stored releases do not parse: {e}"));
                Vec::new()
            }
        };
        let mut out = Vec::new();
        let list = match cas.source.list() {
            Ok(l) => l,
            Err(e) => {
                (self.log)(&format!(
                    "cas: {} unreachable ({e}); starting the {} tenants it released before, from the store",
                    cas.source.endpoint(),
                    stored.len()
                ));
                for (t, digest) in stored {
                    locked(&cas.known).insert(t.name.clone(), digest);
                    out.push(t);
                }
                return out;
            }
        };
        for (t, _) in &stored {
            if !list.iter().any(|l| l.name == t.name) {
                (self.log)(&format!("tenant {}: no longer at the CAS; its stored state is removed", t.name));
                if let Err(e) = self.store.apply(&[Write::RemoveTenant(t.id)]) {
                    (self.log)(&format!("tenant {}: removing its state: {e}", t.name));
                }
            }
        }
        for l in &list {
            if let Some(t) = self.release_one(cas, l, &stored) {
                out.push(t);
            }
        }
        out
    }

    /// One tenant's release (see [`Self::cas_tenants`]); `None` when it must not start.
    fn release_one(
        &self,
        cas: &CasLink,
        l: &Listed,
        stored: &[(TenantConfig, String)],
    ) -> Option<TenantConfig> {
        let t0 = Instant::now();
        match (cas.release)(&cas.source, l) {
            Ok(t) => {
                (self.log)(&format!(
                    "tenant {}: released by the CAS in {} ms: configuration and {} secrets, sealed",
                    l.name,
                    t0.elapsed().as_millis(),
                    l.secrets.len()
                ));
                locked(&cas.refused).remove(&l.name);
                locked(&cas.known).insert(l.name.clone(), l.digest.clone());
                Some(t)
            }
            Err(NotReleased::Refused(e)) => {
                (self.log)(&format!("tenant {}: the CAS refused it ({e}); not started", l.name));
                locked(&cas.refused).insert(l.name.clone(), e.to_string());
                None
            }
            Err(NotReleased::Unavailable(e)) => match stored.iter().find(|(t, _)| t.name == l.name) {
                Some((t, digest)) => {
                    (self.log)(&format!(
                        "tenant {}: no release ({e}); starting from its last release",
                        l.name
                    ));
                    locked(&cas.known).insert(l.name.clone(), digest.clone());
                    Some(t.clone())
                }
                None => {
                    (self.log)(&format!("tenant {}: no release ({e}) and none stored; not started", l.name));
                    locked(&cas.refused).insert(l.name.clone(), e.to_string());
                    None
                }
            },
        }
    }

    /// Follows the CAS after a reload: tenants it dropped stop and leave the store, new ones
    /// and changed ones (another digest) are released and (re)started; the rest untouched.
    fn cas_sync(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (mut added, mut changed, mut removed) = (Vec::new(), Vec::new(), Vec::new());
        let Some(cas) = &self.cas else { return (added, changed, removed) };
        let list = match cas.source.list() {
            Ok(l) => l,
            Err(e) => {
                (self.log)(&format!(
                    "cas: {} unreachable ({e}); its tenants stay as they are",
                    cas.source.endpoint()
                ));
                return (added, changed, removed);
            }
        };
        let known: BTreeMap<String, String> = locked(&cas.known).clone();
        for name in known.keys() {
            if list.iter().any(|l| &l.name == name) {
                continue;
            }
            if let Some(h) = self.lock().remove(name) {
                let id = h.config.id;
                h.stop();
                if let Err(e) = self.store.apply(&[Write::RemoveTenant(id)]) {
                    (self.log)(&format!("tenant {name}: removing its state: {e}"));
                }
            }
            locked(&cas.known).remove(name);
            removed.push(name.clone());
        }
        let stored =
            released::stored(self.store.as_ref(), &self.dir, self.settings.enclave).unwrap_or_default();
        for l in &list {
            if known.get(&l.name) == Some(&l.digest) || locked(&self.moved).contains(&l.name) {
                continue;
            }
            if !known.contains_key(&l.name) && self.lock().contains_key(&l.name) {
                (self.log)(&format!("tenant {}: defined locally and at the CAS; the local one wins", l.name));
                continue;
            }
            let Some(t) = self.release_one(cas, l, &stored) else { continue };
            let old = self.lock().remove(&l.name);
            if let Err(e) = self.check(&t) {
                (self.log)(&format!("tenant {} from the CAS not started: {e}", l.name));
                locked(&cas.known).remove(&l.name);
                if let Some(h) = old {
                    h.stop();
                }
                continue;
            }
            if let Some(h) = old {
                h.stop();
                changed.push(l.name.clone());
            } else {
                added.push(l.name.clone());
            }
            match (self.spawn)(t) {
                Ok(h) => {
                    self.lock().insert(l.name.clone(), h);
                }
                Err(e) => (self.log)(&format!("tenant {}: {e}", l.name)),
            }
        }
        (added, changed, removed)
    }

    /// Tenants added through the API, from the store.
    fn stored_tenants(&self) -> Result<Vec<TenantConfig>> {
        let mut out = Vec::new();
        for (k, v) in self.store.list(None, Kind::Config)? {
            if k.name != TENANT_RECORD {
                continue;
            }
            let Value::Config(text) = v else { continue };
            match TenantConfig::parse_one(&text, &self.dir, self.settings.enclave) {
                Ok(t) if t.id == k.tenant => out.push(t),
                Ok(t) => {
                    (self.log)(&format!("tenant {} in the store under id {}: skipped", t.name, k.tenant))
                }
                Err(e) => (self.log)(&format!("a stored tenant (id {}) is refused: {e}", k.tenant)),
            }
        }
        Ok(out)
    }

    /// The running configuration plus `extra`, checked for collisions.
    fn check(&self, extra: &TenantConfig) -> Result<()> {
        let tenants = self.lock().iter().map(|(n, h)| (n.clone(), h.config.clone())).collect();
        ServiceConfig { settings: self.settings.clone(), tenants }.check_distinct(Some(extra))
    }

    /// Adds a tenant at run time and keeps it in the store.
    pub(crate) fn add_tenant(&self, t: TenantConfig) -> Result<()> {
        if self.lock().contains_key(&t.name) {
            return Err(Error::Duplicate { what: format!("tenant {}", t.name) });
        }
        self.check(&t)?;
        let text = format!("name = {}\n{}", toml::Value::String(t.name.clone()), t.text);
        self.store.put(Key::new(t.id, Kind::Config, TENANT_RECORD)?, Value::Config(text))?;
        let name = t.name.clone();
        let h = (self.spawn)(t)?;
        self.lock().insert(name.clone(), h);
        (self.log)(&format!("tenant {name}: added"));
        Ok(())
    }

    /// Removes a tenant added through the API: its thread, gateway and enclave stop, and
    /// its records (configuration, sealed secrets, metadata) leave the store.
    pub(crate) fn remove_tenant(&self, name: &str) -> Result<()> {
        if self.file_tenants().contains(name) {
            return Err(Error::Config {
                line: None,
                field: format!("tenants.{name}"),
                why: "defined in the configuration file: remove it there and reload (SIGHUP)".into(),
            });
        }
        if self.cas.as_ref().is_some_and(|c| locked(&c.known).contains_key(name)) {
            return Err(Error::Config {
                line: None,
                field: format!("tenants.{name}"),
                why: "released by the configuration and attestation service: remove it there and reload (SIGHUP)".into(),
            });
        }
        let h = self.lock().remove(name).ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
        let id = h.config.id;
        h.stop();
        self.store.apply(&[Write::RemoveTenant(id)])?;
        (self.log)(&format!("tenant {name}: removed"));
        Ok(())
    }

    /// A tenant arriving by a live move: its thread and enclave start, and the enclave's
    /// destination key (SPKI, evidence) is returned for the source.
    pub(crate) fn add_arrival(&self, t: TenantConfig) -> Result<(Vec<u8>, Vec<u8>)> {
        if self.lock().contains_key(&t.name) {
            return Err(Error::Duplicate { what: format!("tenant {} (already here)", t.name) });
        }
        self.check(&t)?;
        let (name, id) = (t.name.clone(), t.id);
        let (h, key) = (self.spawn_arrival)(t)?;
        let out = (key.spki_der.clone(), key.evidence.bytes.clone());
        self.lock().insert(name.clone(), h);
        locked(&self.arrivals).insert(name.clone(), (id, key));
        locked(&self.moved).remove(&name);
        (self.log)(&format!("tenant {name}: arriving by a live move"));
        Ok(out)
    }

    /// Takes an arriving tenant's destination key: one package per arrival.
    pub(crate) fn arrival(&self, name: &str) -> Result<(u32, DestinationKey)> {
        locked(&self.arrivals)
            .remove(name)
            .ok_or_else(|| Error::Unknown { what: format!("arrival of tenant {name} (none pending)") })
    }

    /// Gives up an arrival: the arriving thread and its enclave stop; a tenant that already
    /// runs here is not touched.
    pub(crate) fn drop_arrival(&self, name: &str) {
        locked(&self.arrivals).remove(name);
        let arriving =
            self.lock().get(name).is_some_and(|h| matches!(h.status().state, "arriving" | "failed"));
        if arriving {
            if let Some(h) = self.lock().remove(name) {
                h.stop();
                (self.log)(&format!("tenant {name}: arrival given up"));
            }
        }
    }

    /// Keeps an arrived tenant: its configuration goes into the store, so this host starts
    /// it again after a restart (its connections then set up anew), and a mark of an earlier
    /// move away from here is removed.
    pub(crate) fn keep_arrival(&self, name: &str) -> Result<()> {
        let t = self
            .lock()
            .get(name)
            .map(|h| h.config.clone())
            .ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
        let mut batch = vec![Write::Remove(Key::new(t.id, Kind::Metadata, MOVED_RECORD)?)];
        if !self.file_tenants().contains(name) {
            let text = format!("name = {}\n{}", toml::Value::String(t.name.clone()), t.text);
            batch.push(Write::Put(Key::new(t.id, Kind::Config, TENANT_RECORD)?, Value::Config(text)));
        }
        self.store.apply(&batch)?;
        Ok(())
    }

    /// Removes the stored marks of `name` having moved away (its definition left the file:
    /// should it come back, it starts here again).
    fn forget_move(&self, name: &str) {
        let marks = match self.store.list(None, Kind::Metadata) {
            Ok(all) => all,
            Err(e) => {
                (self.log)(&format!("tenant {name}: its move away stays marked: {e}"));
                return;
            }
        };
        let batch: Vec<Write> = marks
            .into_iter()
            .filter(|(k, v)| {
                k.name == MOVED_RECORD
                    && matches!(v, Value::Metadata(text) if serde_json::from_str::<serde_json::Value>(text)
                        .is_ok_and(|m| m["tenant"].as_str() == Some(name)))
            })
            .map(|(k, _)| Write::Remove(k))
            .collect();
        match self.store.apply(&batch) {
            Ok(()) => {
                (self.log)(&format!("tenant {name}: out of the configuration; its move away is forgotten"))
            }
            Err(e) => (self.log)(&format!("tenant {name}: its move away stays marked: {e}")),
        }
    }

    /// The stored mark of `t` having moved away from here, if it has (and the mark names it).
    fn moved_mark(&self, t: &TenantConfig) -> Option<String> {
        let key = Key::new(t.id, Kind::Metadata, MOVED_RECORD).ok()?;
        let Ok(Some(Value::Metadata(text))) = self.store.get(&key) else { return None };
        let mark: serde_json::Value = serde_json::from_str(&text).ok()?;
        (mark["tenant"].as_str() == Some(t.name.as_str())).then(|| {
            format!(
                "to {} at unix time {}",
                mark["to"].as_str().unwrap_or("?"),
                mark["at_unix"].as_u64().unwrap_or(0)
            )
        })
    }

    /// A tenant moved away to `to`: out of the running set, every record of it removed from
    /// the store (configuration, and the secrets sealed here: the destination sealed its own
    /// copies, and no key is left behind on a host that no longer serves the tenant), and
    /// not started here again, by a reload or after a restart (the store keeps a mark).
    pub(crate) fn remove_moved(&self, name: &str, to: &str) -> Option<TenantHandle> {
        locked(&self.moved).insert(name.to_owned());
        let h = self.lock().remove(name)?;
        let id = h.config.id;
        let at_unix =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mark = serde_json::json!({ "tenant": name, "to": to, "at_unix": at_unix }).to_string();
        let written = Key::new(id, Kind::Metadata, MOVED_RECORD).map_err(Error::from).and_then(|k| {
            Ok(self.store.apply(&[Write::RemoveTenant(id), Write::Put(k, Value::Metadata(mark))])?)
        });
        if let Err(e) = written {
            (self.log)(&format!("tenant {name}: moved, but the store still holds it as it was: {e}"));
        }
        Some(h)
    }

    fn reload(&self, config: ServiceConfig) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
        let old_file: BTreeSet<String> = self.file_tenants().clone();
        let (mut added, mut changed, mut removed) = (Vec::new(), Vec::new(), Vec::new());
        // Tenants added through the API stay; the new file must not collide with them.
        let api_tenants: BTreeMap<String, TenantConfig> = self
            .lock()
            .iter()
            .filter(|(n, _)| !old_file.contains(*n))
            .map(|(n, h)| (n.clone(), h.config.clone()))
            .collect();
        for t in api_tenants.values() {
            if config.tenants.contains_key(&t.name) {
                return Err(Error::Duplicate { what: format!("tenant {} (added through the API)", t.name) });
            }
            config.check_distinct(Some(t))?;
        }
        for name in &old_file {
            if !config.tenants.contains_key(name) {
                if let Some(h) = self.lock().remove(name) {
                    h.stop();
                }
                if locked(&self.moved).remove(name) {
                    self.forget_move(name);
                }
                removed.push(name.clone());
            }
        }
        for (name, t) in &config.tenants {
            if locked(&self.moved).contains(name) {
                (self.log)(&format!("tenant {name}: moved to another host; not started here"));
                continue;
            }
            let same = self.lock().get(name).is_some_and(|h| h.config.text == t.text && h.config.id == t.id);
            if same {
                continue;
            }
            let old = self.lock().remove(name);
            if let Some(h) = old {
                h.stop();
                changed.push(name.clone());
            } else {
                added.push(name.clone());
            }
            let h = (self.spawn)(t.clone())?;
            self.lock().insert(name.clone(), h);
        }
        *self.file_tenants() = config.tenants.keys().cloned().collect();
        let (a, c, r) = self.cas_sync();
        added.extend(a);
        changed.extend(c);
        removed.extend(r);
        (self.log)(&format!("reload: added {added:?} changed {changed:?} removed {removed:?}"));
        Ok((added, changed, removed))
    }
}
