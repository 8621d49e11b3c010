//! Live moves of a tenant between gateway hosts (issue 8): the migration agents.
//!
//! Each service is an agent. The source drives; the destination answers on
//! `/v1/migrate/...`, authorized by its migration token (not the operator token):
//!
//! ```text
//!  source service                                   destination service
//!  POST /v1/tenants/T/move {to}  (operator)
//!   ├─ POST /v1/migrate/incoming {name, text} ───▶  fresh enclave for T, RSA key, evidence
//!   │  ◀── {spki, evidence} ───────────────────────
//!   ├─ verify: destination platform key, our measurement, tenant, key binding
//!   ├─ HSM mode: one-time key pair for the measurement
//!   ├─ tenant thread: freeze IKE, export (the enclave verifies the destination key
//!   │  itself and signs the package, bound to that key)
//!   ├─ POST /v1/migrate/incoming/T/package ─────▶  verify the source's evidence, HSM rewrap
//!   │                                               of its share, import (the enclave checks
//!   │                                               the evidence again), gateway on the SAs
//!   │  ◀── ok ─────────────────────────────────── (failure: source thaws, nothing lost)
//!   ├─ tenant thread: stop, inbound windows' tops
//!   ├─ POST /v1/migrate/incoming/T/commit {tops} ▶  windows raised past the source's
//!   └─ HSM mode: one-time keys deleted (the package can never open again)
//! ```
//!
//! What crosses between the agents: the tenant's configuration (no secret in it), public
//! keys, evidence, the package (ciphertext, wrapped shares, the source's evidence), labels
//! and counters. Both sides prove their enclave: the destination's evidence binds its key,
//! the source's binds the package to that key. The agents check each against the other
//! platform's key from `[migrate.peers]`, and the enclaves check the same themselves against
//! the platforms measured into them (`[migrate.peers]` and this host's own). Nothing on the
//! channel opens without the destination enclave, so plain HTTP carries it; the token only
//! keeps strangers from starting moves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use attest::evidence::{
    identity_report_data, verify_software_evidence, Evidence, EvidenceKind, EvidencePurpose, Measurement,
};
use attest::migration::{verify_destination, verify_source, DestinationKey, MigrationPackage, OaepHash};
use enclave::TenantId;
use migrate::{AgentSettings, HsmAgent, HsmKeys, KeyLabel};
use serde::Deserialize;
use serde_json::{json, Value as Json};
use zeroize::Zeroizing;

use crate::api::call;
use crate::client::Client;
use crate::config::TenantConfig;
use crate::error::{Error, Result};
use crate::platform::{hex, load_or_create_token, unhex};
use crate::service::Inner;
use crate::tenant::Command;

/// The backup file's format name.
pub(crate) const BACKUP_FORMAT: &str = "cloister-backup-v2";
/// The largest package the destination takes in one request.
pub(crate) const MAX_PACKAGE_BODY: u64 = 256 << 20;

/// `[migrate]`: this host's agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateSettings {
    /// File of the token peers present to this host's `/v1/migrate` routes (made if missing).
    pub token: PathBuf,
    /// The HSM that holds the one-time keys; without one, moves wrap the data key straight
    /// to the destination enclave (the enclave-only baseline).
    pub hsm: Option<HsmSettings>,
    /// Other hosts, by name.
    pub peers: BTreeMap<String, Peer>,
}

/// `[migrate.hsm]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsmSettings {
    /// The vendor's PKCS#11 module.
    pub module: PathBuf,
    /// The token's label.
    pub token_label: String,
    /// File holding the user PIN (mode 0600).
    pub pin: PathBuf,
    /// OAEP hash the HSM supports (`sha1` for SoftHSM2).
    pub oaep: migrate::OaepHash,
    /// The audit log (hash-chained, append-only).
    pub audit: PathBuf,
    /// The HSM's backup root (`cloister migrate backup-root`): measured into every tenant's
    /// enclave, which backs up only to keys it certified. None: backups are refused.
    pub backup_root: Option<Vec<u8>>,
    /// `agent_uid` as written: the user and group the HSM agent runs as when the service
    /// starts as root with enclave users; unset, the enclave user base minus two.
    pub agent_uid: Option<u32>,
}

/// `[migrate.peers.NAME]`: another gateway host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its API, `http://ADDRESS:PORT`.
    pub url: String,
    /// File of the migration token it expects.
    pub token: PathBuf,
    /// Its platform's attestation public key (what `cloister platform-key` prints there).
    pub platform_key: Vec<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMigrate {
    token: Option<String>,
    hsm: Option<RawHsm>,
    #[serde(default)]
    peers: BTreeMap<String, RawPeer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHsm {
    module: Option<String>,
    token_label: String,
    pin_file: String,
    oaep: Option<String>,
    audit: Option<String>,
    backup_root: Option<String>,
    agent_uid: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    url: String,
    token_file: String,
    platform_key: String,
}

fn bad(field: &str, why: &str) -> Error {
    let field = if field.is_empty() { "migrate".to_owned() } else { format!("migrate.{field}") };
    Error::Config { line: None, field, why: why.into() }
}

impl MigrateSettings {
    /// Checks `[migrate]`; relative paths are taken from `dir`.
    pub fn from_toml(value: toml::Value, dir: &Path) -> Result<Self> {
        let raw: RawMigrate = value
            .try_into()
            .map_err(|e: toml::de::Error| bad("", &gateway::config::redacted(e.message())))?;
        let hsm = match raw.hsm {
            None => None,
            Some(h) => Some(HsmSettings {
                module: h.module.map_or_else(|| PathBuf::from(migrate::DEFAULT_MODULE_PATH), PathBuf::from),
                token_label: h.token_label,
                pin: gateway::config::resolve(dir, &h.pin_file),
                oaep: match h.oaep.as_deref() {
                    None | Some("sha256") => migrate::OaepHash::Sha256,
                    Some("sha1") => migrate::OaepHash::Sha1,
                    Some(_) => return Err(bad("hsm.oaep", "\"sha256\" or \"sha1\"")),
                },
                audit: gateway::config::resolve(dir, h.audit.as_deref().unwrap_or("migrate-audit.jsonl")),
                backup_root: match h.backup_root {
                    None => None,
                    Some(hex) => Some(unhex(&hex).filter(|k| k.len() == 65 && k[0] == 4).ok_or_else(|| {
                        bad(
                            "hsm.backup_root",
                            "130 hex digits (an uncompressed P-256 key, as `cloister migrate backup-root` prints it)",
                        )
                    })?),
                },
                agent_uid: match h.agent_uid {
                    Some(u) if u < 1000 => return Err(bad("hsm.agent_uid", "a user ID of at least 1000")),
                    u => u,
                },
            }),
        };
        let mut peers = BTreeMap::new();
        for (name, p) in raw.peers {
            Client::new(&p.url, Zeroizing::new(String::new()))
                .map_err(|_| bad(&format!("peers.{name}.url"), "http://ADDRESS:PORT of its API"))?;
            // Measured into every tenant's enclave: a key no evidence could verify under
            // would start enclaves that can never move.
            let platform_key =
                unhex(&p.platform_key).filter(|k| k.len() == 65 && k[0] == 4).ok_or_else(|| {
                    bad(
                        &format!("peers.{name}.platform_key"),
                        "130 hex digits (an uncompressed P-256 key, as `cloister platform-key` prints it)",
                    )
                })?;
            peers.insert(
                name,
                Peer { url: p.url, token: gateway::config::resolve(dir, &p.token_file), platform_key },
            );
        }
        Ok(Self {
            token: gateway::config::resolve(dir, raw.token.as_deref().unwrap_or("migrate.token")),
            hsm,
            peers,
        })
    }
}

/// The agent's run-time state: its token, and the HSM agent process once started.
pub(crate) struct Agent {
    pub(crate) settings: MigrateSettings,
    pub(crate) token: Zeroizing<String>,
    starter: AgentStarter,
    hsm: Mutex<Option<HsmAgent>>,
}

/// Who starts the HSM agent.
pub(crate) enum AgentStarter {
    /// This process, as its own user (inline enclaves: the service holds the platform).
    Here {
        /// The binary whose `hsm-agent` subcommand runs the HSM agent.
        program: PathBuf,
        /// This host's platform key: the agent rewraps only to enclaves it signed evidence for.
        platform_key: Vec<u8>,
        /// The agent's own user, where this process is root and may start it so.
        user: Option<u32>,
    },
    /// The platform process, under the agent's own user and with the platform's own key,
    /// both fixed when the platform started.
    Platform(platform::PlatformClient),
}

/// The agent's process as the platform holds it.
struct ViaPlatform(platform::RemoteProcess);

impl migrate::AgentProcess for ViaPlatform {
    fn pid(&self) -> u32 {
        self.0.pid()
    }

    fn exited(&mut self) -> bool {
        self.0.exited()
    }

    fn end(&mut self) {
        self.0.end();
    }
}

impl HsmSettings {
    /// What the agent is started with, trusting evidence under `platform_key`.
    pub(crate) fn agent_settings(&self, platform_key: Vec<u8>) -> AgentSettings {
        AgentSettings {
            module: self.module.clone(),
            token_label: self.token_label.clone(),
            pin_file: self.pin.clone(),
            oaep: self.oaep,
            rsa_bits: migrate::DEFAULT_RSA_BITS,
            audit: self.audit.clone(),
            platform_key,
        }
    }
}

impl core::fmt::Debug for Agent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Agent").field("peers", &self.settings.peers.keys()).finish_non_exhaustive()
    }
}

impl Agent {
    /// Loads (or makes) the migration token.
    pub(crate) fn new(settings: MigrateSettings, starter: AgentStarter) -> Result<Self> {
        let token = load_or_create_token(&settings.token)?;
        Ok(Self { settings, token, starter, hsm: Mutex::new(None) })
    }

    /// Runs `f` with the HSM agent, starting it on first use (so a service starts while its
    /// HSM is away; a move then fails with the reason) and again after it died. This
    /// process never reads the PIN file: the agent does.
    fn with_hsm<T>(&self, f: impl FnOnce(&mut HsmAgent) -> migrate::Result<T>) -> Result<Option<T>> {
        let Some(h) = &self.settings.hsm else { return Ok(None) };
        let mut g = self.hsm.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.is_none() {
            let agent = match &self.starter {
                AgentStarter::Here { program, platform_key, user } => {
                    let cmd = match user {
                        Some(uid) => enclave_host::launch::command_as(
                            program,
                            enclave_host::Credentials { uid: *uid, gid: *uid },
                        ),
                        None => std::process::Command::new(program),
                    };
                    HsmAgent::start_command(cmd, &["hsm-agent"], &h.agent_settings(platform_key.clone()))
                }
                AgentStarter::Platform(client) => {
                    let (input, output, process) = client
                        .start_agent()
                        .map_err(|e| Error::Migration(format!("HSM: starting the agent: {e}")))?;
                    HsmAgent::over(input, output, Box::new(ViaPlatform(process)), h.oaep)
                }
            };
            *g = Some(agent.map_err(hsm_error)?);
        }
        let Some(agent) = g.as_mut() else {
            return Err(Error::Internal { what: "HSM agent not started".into() });
        };
        let result = f(agent);
        if matches!(
            result,
            Err(migrate::MigrateError::AgentIo { .. } | migrate::MigrateError::AgentProtocol { .. })
        ) {
            // The pipe is broken or out of step: the next call starts a fresh agent.
            *g = None;
        }
        result.map(Some).map_err(hsm_error)
    }

    fn oaep(&self) -> OaepHash {
        match self.settings.hsm.as_ref().map(|h| h.oaep) {
            Some(migrate::OaepHash::Sha1) => OaepHash::Sha1,
            _ => OaepHash::Sha256,
        }
    }
}

fn hsm_error(e: migrate::MigrateError) -> Error {
    Error::Migration(format!("HSM: {e}"))
}

fn field(v: &Json, name: &str) -> Result<Vec<u8>> {
    v.get(name)
        .and_then(Json::as_str)
        .and_then(unhex)
        .ok_or_else(|| Error::Migration(format!("the peer's reply has no hex {name}")))
}

fn ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The source side: moves running tenant `name` to peer `to`. Until the destination has
/// taken the package, any failure leaves the tenant serving here.
pub(crate) fn move_out(inner: &Inner, name: &str, to: &str) -> Result<Json> {
    let agent =
        inner.agent.as_ref().ok_or_else(|| bad("", "no [migrate] section: this host moves no tenant"))?;
    let peer = agent
        .settings
        .peers
        .get(to)
        .ok_or_else(|| Error::Unknown { what: format!("migration peer {to}") })?;
    let config = inner
        .lock()
        .get(name)
        .map(|h| h.config.clone())
        .ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
    let started = Instant::now();
    let client = Client::with_token_file(&peer.url, &peer.token)?;
    // Our enclave's measurement: the destination must run the same.
    let measurement = own_measurement(inner, name)?;
    let body = json!({"name": config.name, "text": config.text}).to_string();
    let reply =
        client.request("POST", "/v1/migrate/incoming", body.as_bytes(), "application/json")?.json()?;
    let destination = DestinationKey {
        spki_der: field(&reply, "spki")?,
        evidence: Evidence { kind: EvidenceKind::SoftwareRooted, bytes: field(&reply, "evidence")? },
    };
    let abort = |why: String| {
        let _ =
            client.request("POST", &format!("/v1/migrate/incoming/{name}/abort"), b"", "application/json");
        Error::Migration(why)
    };
    if let Err(e) = verify_destination(&destination, &peer.platform_key, &measurement, TenantId(config.id)) {
        return Err(abort(format!("the destination's enclave is refused: {e}")));
    }
    let label_measurement =
        migrate::Measurement::from_bytes(&measurement.0).map_err(|e| abort(e.to_string()))?;
    let keys: Option<HsmKeys> = match agent.with_hsm(|hsm| {
        let (label, spki) = hsm.migration_key(&label_measurement)?;
        Ok(HsmKeys { label, spki, bulk: None })
    }) {
        Ok(k) => k,
        Err(e) => return Err(abort(e.to_string())),
    };
    let mode = if keys.is_some() { "hsm" } else { "baseline" };
    let prepared_ms = ms(started);
    let frozen = Instant::now();
    let out = call(inner, name, |reply| Command::MoveOut {
        destination: destination.clone(),
        hsm_spki: keys.as_ref().map(|k| k.spki.clone()),
        oaep: agent.oaep(),
        reply,
    });
    let package = match out {
        Ok(Ok(p)) => p,
        Ok(Err(e)) | Err(e) => {
            delete_keys(agent, keys.as_ref());
            return Err(abort(format!("export: {e}")));
        }
    };
    let package_len = package.len();
    let body = json!({
        "mode": mode,
        "package": hex(&package),
        "hsm_key": keys.as_ref().map(|k| k.label.to_string()),
    })
    .to_string();
    let arrived = client
        .request("POST", &format!("/v1/migrate/incoming/{name}/package"), body.as_bytes(), "application/json")
        .and_then(crate::client::Reply::json);
    if let Err(e) = arrived {
        // The destination did not take it: we serve on (rekeying: the export capped the
        // outbound counters), and the one-time key goes, so the package never opens.
        let _ = inner.lock().get(name).map(|h| h.send(Command::MoveAbort));
        delete_keys(agent, keys.as_ref());
        return Err(abort(format!("the destination refused the package: {e}")));
    }
    let tops = call(inner, name, Command::MoveStop).unwrap_or_default();
    let handover_ms = ms(frozen);
    let body = json!({ "tops": tops }).to_string();
    let committed = client.request(
        "POST",
        &format!("/v1/migrate/incoming/{name}/commit"),
        body.as_bytes(),
        "application/json",
    );
    if let Some(h) = inner.remove_moved(name, to) {
        h.stop();
    }
    delete_keys(agent, keys.as_ref());
    (inner.log)(&format!(
        "tenant {name}: moved to {to} ({mode}): package {package_len} bytes, frozen {handover_ms} ms, total {} ms",
        ms(started)
    ));
    Ok(json!({
        "tenant": name,
        "to": to,
        "mode": mode,
        "package_bytes": package_len,
        "prepare_ms": prepared_ms,
        "frozen_ms": handover_ms,
        "total_ms": ms(started),
        "windows_raised": committed.is_ok(),
    }))
}

/// Our enclave's measurement for tenant `name`, from its own identity evidence.
fn own_measurement(inner: &Inner, name: &str) -> Result<Measurement> {
    let tenant = inner
        .lock()
        .get(name)
        .map(|h| h.config.id)
        .ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
    let mut challenge = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut challenge)
        .map_err(|_| Error::Internal { what: "random challenge".into() })?;
    let own = call(inner, name, |reply| Command::Identity { challenge, reply })??;
    let rd = identity_report_data(TenantId(tenant), &challenge);
    Ok(verify_software_evidence(&own, inner.platform.public_key(), EvidencePurpose::Identity, &rd)
        .map_err(|e| Error::Migration(format!("our own evidence: {e}")))?
        .measurement)
}

/// A backup of running tenant `name` (TEEnder §3.5.2): its secrets in a package whose data
/// key is wrapped to today's backup key for its measurement (made in the HSM, encrypt-only,
/// on first use), with its configuration and the enclave's evidence. Nothing in it opens
/// without the HSM and a security officer's step; the tenant serves on.
pub(crate) fn backup(inner: &Inner, name: &str) -> Result<Json> {
    let agent =
        inner.agent.as_ref().ok_or_else(|| bad("", "no [migrate] section: backups need [migrate.hsm]"))?;
    if agent.settings.hsm.is_none() {
        return Err(bad("hsm", "backups need an HSM ([migrate.hsm]): its backup key is what opens them"));
    }
    let config = inner
        .lock()
        .get(name)
        .map(|h| h.config.clone())
        .ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
    if agent.settings.hsm.as_ref().is_some_and(|h| h.backup_root.is_none()) {
        return Err(bad(
            "hsm.backup_root",
            "backups need the HSM's backup root: run `cloister migrate backup-root --config FILE` and \
             set it on every host (tenants' measurements then include it)",
        ));
    }
    let measurement = own_measurement(inner, name)?;
    let m = measurement_label(&measurement).map_err(hsm_error)?;
    let (label, spki, certificate) = agent
        .with_hsm(|hsm| hsm.backup_key(&m))?
        .ok_or_else(|| Error::Internal { what: "HSM not configured".into() })?;
    let label = label.to_string();
    let package = call(inner, name, |reply| Command::Backup {
        wrap_spki: spki,
        certificate,
        oaep: agent.oaep(),
        label: label.clone(),
        reply,
    })??;
    let created =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    (inner.log)(&format!("tenant {name}: backup made ({} bytes) for key {label}", package.len()));
    Ok(json!({
        "format": BACKUP_FORMAT,
        "tenant": name,
        "tenant_id": config.id,
        "config": config.text,
        "created_unix": created,
        "backup_key": label,
        "platform_key": hex(inner.platform.public_key()),
        "package": hex(&package),
    }))
}

#[derive(Deserialize)]
struct Backup {
    format: String,
    tenant: String,
    tenant_id: u32,
    config: String,
    backup_key: String,
    package: String,
}

#[derive(Deserialize)]
struct Restore {
    backup: Backup,
    officer_pin: String,
}

/// Disaster recovery onto this host: checks a backup's evidence (made by an enclave of a
/// configured peer's platform or this one's, for this package and key), starts the tenant's
/// enclave with a fresh destination key, and has the security officer let the backup key
/// rewrap the data key to that key alone, withdrawn again whatever the outcome. The tenant
/// then runs on its restored secrets, sealed anew into this host's store; its peers set up
/// new SAs (a backup carries none).
pub(crate) fn restore(inner: &Inner, body: &[u8]) -> Result<Json> {
    let started = Instant::now();
    let agent =
        inner.agent.as_ref().ok_or_else(|| bad("", "no [migrate] section: restores need [migrate.hsm]"))?;
    if agent.settings.hsm.is_none() {
        return Err(bad("hsm", "restores need the HSM that holds the backup key ([migrate.hsm])"));
    }
    let req: Restore = body_json(body, "restore")?;
    let officer_pin = Zeroizing::new(req.officer_pin);
    let b = req.backup;
    if b.format != BACKUP_FORMAT {
        return Err(Error::Migration(format!(
            "backup format {:?} (this build reads {BACKUP_FORMAT})",
            b.format
        )));
    }
    if officer_pin.is_empty() {
        return Err(Error::Migration("a restore needs the security officer's PIN".into()));
    }
    let bytes = unhex(&b.package).ok_or_else(|| bad("package", "hex"))?;
    let label: KeyLabel = b.backup_key.parse().map_err(hsm_error)?;
    if !label.is_backup() {
        return Err(Error::Migration(format!("{label} is not a backup key")));
    }
    let package =
        MigrationPackage::from_bytes(bytes).map_err(|e| Error::Migration(format!("package: {e}")))?;
    if package.kind() != attest::migration::PackageKind::Backup {
        return Err(Error::Migration("the package is a move's, not a backup".into()));
    }
    let verified =
        inner.platform.trusted().iter().find_map(|key| verify_source(&package, key, b"").ok()).ok_or_else(
            || {
                Error::Migration(
                    "the backup's evidence verifies under no configured peer's platform key nor ours: \
                 tampered, or made by an unknown host"
                        .into(),
                )
            },
        )?;
    if verified.tenant != TenantId(b.tenant_id) {
        return Err(Error::Migration("the backup's evidence is for another tenant".into()));
    }
    let m = measurement_label(&verified.measurement).map_err(hsm_error)?;
    if label.measurement() != &m {
        return Err(Error::Migration(format!("backup key {label} is for another measurement")));
    }
    let text = format!("name = {}\n{}", toml::Value::String(b.tenant.clone()), b.config);
    let t = TenantConfig::parse_one(&text, &inner.dir, inner.settings.enclave)?;
    if t.id != b.tenant_id {
        return Err(Error::Migration("the backup's configuration names another tenant id".into()));
    }
    let name = t.name.clone();
    inner.add_arrival(t)?;
    let refuse = |why: String| {
        inner.drop_arrival(&name);
        Error::Migration(why)
    };
    let (_, destination) = inner.arrival(&name).map_err(|e| refuse(e.to_string()))?;
    // Our own fresh enclave, checked as a source checks a destination: the officer's
    // trust goes to this key only if it is that enclave's.
    verify_destination(
        &destination,
        inner.platform.public_key(),
        &verified.measurement,
        TenantId(b.tenant_id),
    )
    .map_err(|e| refuse(format!("this host's enclave: {e}")))?;
    // The agent checks the destination's evidence again, runs the officer's step, the
    // rewrap, and withdraws the step whatever happened.
    let share = package.hsm_share().ok_or_else(|| refuse("a backup without its HSM share".into()))?;
    let rewrapped = agent
        .with_hsm(|hsm| hsm.restore_backup(&label, &officer_pin, share, &destination, TenantId(b.tenant_id)))
        .map_err(|e| refuse(e.to_string()))?
        .ok_or_else(|| refuse("HSM not configured".into()))?;
    drop(officer_pin);
    let tun = call(inner, &name, |reply| Command::Arrive {
        package: package.into_bytes(),
        hsm_share: Some(rewrapped),
        reply,
    })
    .and_then(|r| r)
    .map_err(|e| refuse(format!("import: {e}")))?;
    inner.keep_arrival(&name).map_err(|e| refuse(format!("keeping the tenant's configuration: {e}")))?;
    (inner.log)(&format!(
        "tenant {name}: restored from backup {label} in {} ms, serving on {tun}",
        ms(started)
    ));
    Ok(json!({"tenant": name, "tun": tun, "backup_key": label.to_string(), "restore_ms": ms(started)}))
}

/// The backup root of the HSM that `config`'s `[migrate.hsm]` names, made on first use, through
/// a short-lived HSM agent (`program hsm-agent`): what `[migrate.hsm] backup_root` must be.
pub fn backup_root(config: &crate::ServiceConfig, program: PathBuf) -> Result<Vec<u8>> {
    let s = &config.settings;
    let m = s.migrate.clone().ok_or_else(|| bad("", "no [migrate] section"))?;
    if m.hsm.is_none() {
        return Err(bad("hsm", "no [migrate.hsm]: the backup root lives in the HSM"));
    }
    let platform = crate::platform::Platform::load_or_create(&s.platform_key, &s.sealing_root)?;
    // As the service's agent will run: what it makes in the HSM's store stays readable to it.
    let user = s.agent_uid(platform::started_as_root());
    let agent =
        Agent::new(m, AgentStarter::Here { program, platform_key: platform.public_key().to_vec(), user })?;
    agent
        .with_hsm(HsmAgent::backup_root)?
        .ok_or_else(|| Error::Internal { what: "HSM not configured".into() })
}

fn delete_keys(agent: &Agent, keys: Option<&HsmKeys>) {
    if let Some(k) = keys {
        let _ = agent.with_hsm(|hsm| hsm.delete_key(&k.label));
    }
}

#[derive(Deserialize)]
struct Incoming {
    name: String,
    text: String,
}

#[derive(Deserialize)]
struct Package {
    mode: String,
    package: String,
    hsm_key: Option<String>,
}

#[derive(Deserialize)]
struct Commit {
    tops: Vec<(u32, u64)>,
}

fn body_json<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| bad(what, &format!("JSON body: {e}")))
}

/// The destination side: an arriving tenant's enclave and key.
pub(crate) fn incoming(inner: &Inner, body: &[u8]) -> Result<Json> {
    let req: Incoming = body_json(body, "incoming")?;
    let text = format!("name = {}\n{}", toml::Value::String(req.name.clone()), req.text);
    let t = TenantConfig::parse_one(&text, &inner.dir, inner.settings.enclave)?;
    let (spki, evidence) = inner.add_arrival(t)?;
    Ok(json!({"spki": hex(&spki), "evidence": hex(&evidence)}))
}

/// The destination side: checks the source's evidence, has the HSM rewrap the data key to
/// our enclave's key, and lands the tenant.
pub(crate) fn package(inner: &Inner, name: &str, body: &[u8]) -> Result<Json> {
    let agent = inner.agent.as_ref().ok_or_else(|| bad("", "no [migrate] section"))?;
    let req: Package = body_json(body, "package")?;
    let bytes = unhex(&req.package).ok_or_else(|| bad("package", "hex"))?;
    let (tenant, destination) = inner.arrival(name)?;
    let refuse = |why: String| {
        inner.drop_arrival(name);
        Error::Migration(why)
    };
    let package = MigrationPackage::from_bytes(bytes).map_err(|e| refuse(format!("package: {e}")))?;
    // The source: some peer's platform signed it, for this tenant, its measurement, and
    // this very package to this very key (the enclave checks the same again).
    let verified = agent
        .settings
        .peers
        .values()
        .find_map(|p| verify_source(&package, &p.platform_key, &destination.spki_der).ok())
        .ok_or_else(|| {
            refuse("the source's evidence verifies under no configured peer's platform key".into())
        })?;
    if verified.tenant != TenantId(tenant) {
        return Err(refuse("the source's evidence is for another tenant".into()));
    }
    let hsm_share = match (req.mode.as_str(), req.hsm_key) {
        ("baseline", None) => None,
        ("hsm", Some(label)) => {
            let label: KeyLabel = label.parse().map_err(|e: migrate::MigrateError| refuse(e.to_string()))?;
            let m = measurement_label(&verified.measurement).map_err(|e| refuse(e.to_string()))?;
            if label.measurement() != &m {
                return Err(refuse(format!("key {label} is for another measurement than the source's")));
            }
            let share = package.hsm_share().ok_or_else(|| refuse("mode hsm without an HSM share".into()))?;
            // The agent verifies our enclave's evidence against the label itself.
            let rewrapped = agent
                .with_hsm(|hsm| hsm.rewrap(&label, share, &destination, TenantId(tenant)))
                .map_err(|e| refuse(e.to_string()))?
                .ok_or_else(|| {
                    refuse("the package needs an HSM and this host has none ([migrate.hsm])".into())
                })?;
            Some(rewrapped)
        }
        (m, _) => return Err(refuse(format!("mode {m} with the wrong keys"))),
    };
    let tun = call(inner, name, |reply| Command::Arrive { package: package.into_bytes(), hsm_share, reply })
        .and_then(|r| r)
        .map_err(|e| refuse(format!("import: {e}")))?;
    (inner.log)(&format!("tenant {name}: arrived by a live move, serving on {tun}"));
    Ok(json!({"tenant": name, "tun": tun}))
}

fn measurement_label(m: &Measurement) -> migrate::Result<migrate::Measurement> {
    migrate::Measurement::from_bytes(&m.0)
}

/// The destination side: the source stopped; its last numbers count as seen here.
pub(crate) fn commit(inner: &Inner, name: &str, body: &[u8]) -> Result<Json> {
    let req: Commit = body_json(body, "commit")?;
    let raised = call(inner, name, |r| Command::RaiseWindows(req.tops, r))?;
    inner.keep_arrival(name)?;
    Ok(json!({"tenant": name, "windows_raised": raised}))
}

/// The destination side: the source gave up; the arriving tenant goes.
pub(crate) fn abort(inner: &Inner, name: &str) -> Json {
    inner.drop_arrival(name);
    json!({"tenant": name, "aborted": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MigrateSettings> {
        let v: toml::Value = toml::from_str(text).unwrap();
        MigrateSettings::from_toml(v, Path::new("/srv"))
    }

    #[test]
    fn the_migrate_table_is_checked_and_names_the_field() {
        let s = parse(
            &"hsm = { token_label = \"t\", pin_file = \"pin\", oaep = \"sha1\" }\n\
             [peers.b]\nurl = \"http://198.18.13.2:9440\"\ntoken_file = \"b.token\"\nplatform_key = \"04{}\"\n"
                .replace("{}", &"ab".repeat(64)),
        )
        .unwrap();
        assert_eq!(s.token, PathBuf::from("/srv/migrate.token"));
        let h = s.hsm.unwrap();
        assert_eq!(
            (h.oaep, h.pin, h.audit),
            (migrate::OaepHash::Sha1, PathBuf::from("/srv/pin"), PathBuf::from("/srv/migrate-audit.jsonl"))
        );
        assert_eq!(s.peers["b"].platform_key[..2], [0x04, 0xab]);
        for (text, field) in [
            ("hsm = { token_label = \"t\", pin_file = \"p\", oaep = \"md5\" }", "migrate.hsm.oaep"),
            ("[peers.b]\nurl = \"x\"\ntoken_file = \"t\"\nplatform_key = \"04\"", "migrate.peers.b.url"),
            (
                "[peers.b]\nurl = \"http://198.18.0.1:1\"\ntoken_file = \"t\"\nplatform_key = \"zz\"",
                "migrate.peers.b.platform_key",
            ),
            // Hex, but no P-256 point: it would be measured into enclaves that never move.
            (
                "[peers.b]\nurl = \"http://198.18.0.1:1\"\ntoken_file = \"t\"\nplatform_key = \"04ab\"",
                "migrate.peers.b.platform_key",
            ),
            ("tokn = \"x\"", "migrate"),
            // Measured into every tenant's enclave: it must be a key a certificate verifies under.
            (
                "hsm = { token_label = \"t\", pin_file = \"p\", backup_root = \"04ab\" }",
                "migrate.hsm.backup_root",
            ),
        ] {
            match parse(text) {
                Err(Error::Config { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
