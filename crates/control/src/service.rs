//! The service: every tenant's thread, the store, the platform, and the operator API.
//!
//! Tenants come from the configuration file and from the store (those added through the
//! API). Adding, changing or removing one touches only that tenant's thread: the others'
//! gateways, enclaves and tunnels go on undisturbed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use gateway::Backend;
use store::{EmbeddedStore, Key, Kind, Store, Value, Write};
use zeroize::Zeroizing;

use crate::api::ApiServer;
use crate::config::{ServiceConfig, ServiceSettings, TenantConfig};
use crate::error::{Error, Result};
use crate::platform::{create_private, hex, read_private, Platform};
use crate::tenant::{InlineLauncher, Log, ProcessLauncher, TenantHandle};

/// The store record of a tenant added through the API.
const TENANT_RECORD: &str = "tenant";

/// What the service shares between its API thread and its owner.
pub(crate) struct Inner {
    pub(crate) settings: ServiceSettings,
    pub(crate) dir: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) platform: Arc<Platform>,
    tenants: Mutex<BTreeMap<String, TenantHandle>>,
    /// Names of the tenants the configuration file defines (the file is their source).
    file_tenants: Mutex<BTreeSet<String>>,
    spawn: Box<dyn Fn(TenantConfig) -> Result<TenantHandle> + Send + Sync>,
    pub(crate) started: Instant,
    pub(crate) log: Log,
    pub(crate) token: Zeroizing<String>,
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

/// Reads the API token, making a random one on first start.
fn load_or_create_token(path: &Path) -> Result<Zeroizing<String>> {
    if let Some(bytes) = read_private(path)? {
        let t = Zeroizing::new(String::from_utf8_lossy(&bytes).trim().to_owned());
        if t.len() < 16 {
            return Err(Error::Io {
                what: format!("{}", path.display()),
                why: "a token of at least 16 characters".into(),
            });
        }
        return Ok(t);
    }
    let mut r = Zeroizing::new([0u8; 24]);
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), r.as_mut())
        .map_err(|_| Error::Internal { what: "no randomness".into() })?;
    let t = Zeroizing::new(hex(r.as_ref()));
    create_private(path, format!("{}\n", t.as_str()).as_bytes())?;
    Ok(t)
}

impl Service {
    /// Opens the store and the platform, starts every tenant (each in its own thread with
    /// its own enclave) and the API. `program` is the binary whose `enclave-process`
    /// subcommand runs a tenant's enclave. Call it in the namespace the service serves.
    pub fn start(config: ServiceConfig, dir: &Path, program: PathBuf, log: Log) -> Result<Self> {
        let settings = config.settings.clone();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&settings.state)?);
        let platform = Arc::new(Platform::load_or_create(&settings.platform_key, &settings.sealing_root)?);
        let token = load_or_create_token(&settings.api_token)?;
        let spawn: Box<dyn Fn(TenantConfig) -> Result<TenantHandle> + Send + Sync> = {
            let (store, log) = (Arc::clone(&store), Arc::clone(&log));
            match settings.enclave {
                Backend::Process => {
                    let l = Arc::new(ProcessLauncher::new(Arc::clone(&platform), program));
                    Box::new(move |t| {
                        TenantHandle::spawn(t, Arc::clone(&l), Arc::clone(&store), Arc::clone(&log))
                    })
                }
                Backend::Inline => {
                    let l = Arc::new(InlineLauncher::new(Arc::clone(&platform)));
                    Box::new(move |t| {
                        TenantHandle::spawn(t, Arc::clone(&l), Arc::clone(&store), Arc::clone(&log))
                    })
                }
            }
        };
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
        for (name, t) in all {
            let h = (inner.spawn)(t)?;
            inner.lock().insert(name, h);
        }
        let api = ApiServer::start(Arc::clone(&inner))?;
        (inner.log)(&format!(
            "service: api http://{} enclave {} platform key {} tenants {}",
            api.addr(),
            crate::tenant::backend_name(inner.settings.enclave),
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
        let h = self.lock().remove(name).ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
        let id = h.config.id;
        h.stop();
        self.store.apply(&[Write::RemoveTenant(id)])?;
        (self.log)(&format!("tenant {name}: removed"));
        Ok(())
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
                removed.push(name.clone());
            }
        }
        for (name, t) in &config.tenants {
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
        (self.log)(&format!("reload: added {added:?} changed {changed:?} removed {removed:?}"));
        Ok((added, changed, removed))
    }
}
