//! The configuration and attestation service, `cloister cas` (Slick §4.1's CAS, EnclaveVPN
//! §4.2's attested bootstrapping): it holds each tenant's configuration, the measurement its
//! enclave must have, and its secrets, and releases them to a gateway only for a tenant
//! enclave whose evidence verifies.
//!
//! ```text
//!  gateway (untrusted)                          CAS (trusted by the tenants)
//!  GET  /v1/cas/tenants         ─ token ─▶      the tenants this gateway serves
//!  start the tenant's enclave; offers (evidence + one-use X25519 key each)
//!  POST /v1/cas/tenants/T/release { evidence, offers } ─▶ verify evidence: platform key
//!                                                of this gateway, tenant id, measurement
//!       ◀─ { config, envelopes }  (each secret sealed to its offer: only the enclave opens it)
//!  enclave opens the envelopes, seals them for restarts; the gateway starts the tenant
//! ```
//!
//! The file:
//!
//! ```toml
//! [cas]
//! listen = "127.0.0.1:9450"
//!
//! [gateways.gw1]                  # one gateway host
//! token = "gw1.token"             # its bearer token's file, 0600 (made if missing)
//! platform_key = "04ab…"          # its platform evidence key (`cloister platform-key`)
//! tenants = ["acme"]              # what it may serve
//!
//! [tenants.acme]
//! measurement = "…"               # `cloister measure --tenant-id 1` on a binary you trust
//! id = 1                          # … and the rest of a service tenant table
//! secrets.psk = { psk_file = "acme.psk" }   # or private_key_file + key_kind
//! signer_key = "acme.signer"      # optional: signs the envelopes (`cloister tenant signer-key`);
//! provisioning_signers = ["04…"]  # … its public key, so the enclave takes only those
//! ```
//!
//! The configuration it releases is not secret (the gateway runs it in the clear), but it
//! goes only to a gateway whose enclave for that tenant verified. Secrets are read from
//! their files at each release and never leave this process except sealed to an offer.

use core::net::SocketAddr;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use attest::evidence::{parse_measurement_hex, Measurement};
use attest::provision::{seal_to_offer, verify_offer, ProvisioningOffer, TenantSigner};
use enclave::{SecretKind, TenantId};
use gateway::config::{redacted, resolve};
use gateway::Backend;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};
use tiny_http::{Method, Request};
use zeroize::Zeroizing;

use crate::config::{line_of, read_file, syntax, TenantConfig};
use crate::error::{Error, Result};
use crate::http::{bearer, read_body, respond, respond_error, same, HttpServer};
use crate::platform::{hex, load_or_create_token, unhex};
use crate::tenant::Log;

/// The default listening address (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9450";
/// The largest request (offers for a tenant's secrets).
const MAX_BODY: u64 = 64 * 1024;
/// The most secrets one tenant may have (an enclave keeps at most 16 offers outstanding,
/// one of which attests the configuration).
pub const MAX_SECRETS: usize = 15;

/// Where a secret comes from, and what it is.
#[derive(Debug, Clone)]
struct SecretSource {
    kind: SecretKind,
    file: PathBuf,
}

/// One tenant as the CAS holds it.
#[derive(Debug, Clone)]
pub struct CasTenant {
    /// Its name.
    pub name: String,
    /// Its number (its enclave's evidence must name it).
    pub id: u32,
    /// The measurement its enclave must have.
    pub measurement: Measurement,
    /// The tenant table released to gateways (secrets reduced to their names).
    pub config: String,
    /// The tenant's provisioning signers (its table's `provisioning_signers`): the gateway
    /// starts the enclave with them, before the release, so they are listed.
    pub signers: Vec<Vec<u8>>,
    secrets: BTreeMap<String, SecretSource>,
    /// The PKCS#8 file of the key that signs this tenant's envelopes (read at each release).
    signer_key: Option<PathBuf>,
}

impl CasTenant {
    /// Changes when what a gateway would receive changes (configuration, measurement, the
    /// secrets' names), so a gateway knows to fetch it again. Secret values are not in it:
    /// a hash of a weak PSK would let anyone with a gateway token guess it offline.
    pub fn digest(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"cloister-cas-tenant-v1");
        ctx.update(&self.id.to_be_bytes());
        ctx.update(&self.measurement.0);
        for s in self.secrets.keys() {
            ctx.update(&(s.len() as u64).to_be_bytes());
            ctx.update(s.as_bytes());
        }
        ctx.update(self.config.as_bytes());
        hex(ctx.finish().as_ref())
    }
}

/// A gateway host the CAS serves.
struct CasGateway {
    token: Zeroizing<String>,
    platform_key: Vec<u8>,
    tenants: BTreeSet<String>,
}

/// The CAS's file, checked.
pub struct CasConfig {
    /// Where it listens.
    pub listen: SocketAddr,
    gateways: BTreeMap<String, CasGateway>,
    /// The tenants, by name.
    pub tenants: BTreeMap<String, CasTenant>,
}

impl core::fmt::Debug for CasConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CasConfig")
            .field("listen", &self.listen)
            .field("gateways", &self.gateways.keys().collect::<Vec<_>>())
            .field("tenants", &self.tenants.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCas {
    listen: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    token: String,
    platform_key: String,
    tenants: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    psk_file: Option<String>,
    private_key_file: Option<String>,
    key_kind: Option<String>,
}

fn config_error(text: &str, path: &[&str], why: impl Into<String>) -> Error {
    Error::Config { line: line_of(text, path), field: path.join("."), why: why.into() }
}

impl CasConfig {
    /// Reads and checks the file; token files are made on first use.
    pub fn load(path: &Path) -> Result<Self> {
        let (text, dir) = read_file(path)?;
        Self::parse(&text, &dir)
    }

    /// Checks a file's text; relative paths are taken from `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Self> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| syntax(text, &e))?;
        let raw: RawCas = match table.remove("cas") {
            Some(v) => v
                .try_into()
                .map_err(|e: toml::de::Error| config_error(text, &["cas"], redacted(e.message())))?,
            None => RawCas { listen: None },
        };
        let listen = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN).parse::<SocketAddr>().map_err(|_| {
            config_error(text, &["cas", "listen"], "an address and port, e.g. \"127.0.0.1:9450\"")
        })?;
        let mut tenants = BTreeMap::new();
        if let Some(v) = table.remove("tenants") {
            let toml::Value::Table(all) = v else {
                return Err(config_error(text, &["tenants"], "a table of tenants, [tenants.NAME]"));
            };
            for (name, v) in all {
                let toml::Value::Table(t) = v else {
                    return Err(config_error(text, &["tenants", &name], "a table"));
                };
                let tenant = parse_tenant(text, &name, t, dir)?;
                tenants.insert(name, tenant);
            }
        }
        let mut gateways = BTreeMap::new();
        if let Some(v) = table.remove("gateways") {
            let toml::Value::Table(all) = v else {
                return Err(config_error(text, &["gateways"], "a table of gateways, [gateways.NAME]"));
            };
            for (name, v) in all {
                let raw: RawGateway = v.try_into().map_err(|e: toml::de::Error| {
                    config_error(text, &["gateways", &name], redacted(e.message()))
                })?;
                let platform_key = unhex(&raw.platform_key).filter(|k| k.len() == 65 && k[0] == 4).ok_or_else(|| {
                    config_error(text, &["gateways", &name, "platform_key"], "130 hex digits (an uncompressed P-256 key, as `cloister platform-key` prints it)")
                })?;
                for t in &raw.tenants {
                    if !tenants.contains_key(t) {
                        return Err(config_error(
                            text,
                            &["gateways", &name, "tenants"],
                            format!("no tenant {} is defined", t.chars().take(64).collect::<String>()),
                        ));
                    }
                }
                let token = load_or_create_token(&resolve(dir, &raw.token))?;
                gateways.insert(
                    name,
                    CasGateway { token, platform_key, tenants: raw.tenants.into_iter().collect() },
                );
            }
        }
        if let Some(other) = table.keys().next() {
            return Err(config_error(
                text,
                &[other],
                "unknown table: expected [cas], [gateways.NAME] and [tenants.NAME]",
            ));
        }
        let names: Vec<&String> = gateways.keys().collect();
        for (i, a) in names.iter().enumerate() {
            for b in names.iter().skip(i + 1) {
                if same(gateways[*a].token.as_bytes(), gateways[*b].token.as_bytes()) {
                    return Err(Error::Duplicate { what: format!("token (gateways {a} and {b})") });
                }
            }
        }
        let mut ids = BTreeMap::new();
        for t in tenants.values() {
            if let Some(other) = ids.insert(t.id, &t.name) {
                return Err(Error::Duplicate {
                    what: format!("tenant id {} (tenants {other} and {})", t.id, t.name),
                });
            }
        }
        Ok(Self { listen, gateways, tenants })
    }
}

/// One `[tenants.NAME]`: the measurement and secret sources come out; what is left must be
/// a valid service tenant table (checked here, so a gateway never receives a broken one).
fn parse_tenant(text: &str, name: &str, mut t: toml::Table, dir: &Path) -> Result<CasTenant> {
    let measurement = match t.remove("measurement") {
        Some(toml::Value::String(m)) => parse_measurement_hex(&m).map_err(|_| {
            config_error(text, &["tenants", name, "measurement"], "96 hex digits, from `cloister measure`")
        })?,
        _ => return Err(config_error(text, &["tenants", name, "measurement"], "required: 96 hex digits")),
    };
    let mut secrets = BTreeMap::new();
    if let Some(toml::Value::Table(table)) = t.get_mut("secrets") {
        for (s, v) in table.iter_mut() {
            let path = ["tenants", name, "secrets", s.as_str()];
            let raw = RawSecret::deserialize(v.clone())
                .map_err(|e| config_error(text, &path, redacted(e.message())))?;
            let (kind, file) = match (raw.psk_file, raw.private_key_file, raw.key_kind.as_deref()) {
                (Some(f), None, None) => (SecretKind::PreSharedKey, f),
                (None, Some(f), kind) => (
                    match kind.unwrap_or("ecdsa-p256") {
                        "rsa" => SecretKind::RsaPrivateKey,
                        "ecdsa-p256" => SecretKind::EcdsaP256PrivateKey,
                        "ecdsa-p384" => SecretKind::EcdsaP384PrivateKey,
                        _ => {
                            let p = ["tenants", name, "secrets", s.as_str(), "key_kind"];
                            return Err(config_error(text, &p, "rsa, ecdsa-p256 or ecdsa-p384"));
                        }
                    },
                    f,
                ),
                _ => {
                    return Err(config_error(
                        text,
                        &path,
                        "psk_file, or private_key_file with an optional key_kind",
                    ))
                }
            };
            let file = resolve(dir, &file);
            if !file.is_file() {
                return Err(config_error(text, &path, format!("{} is not a readable file", file.display())));
            }
            secrets.insert(s.clone(), SecretSource { kind, file });
            // What the gateway sees: the secret's name only.
            *v = toml::Value::Table(toml::Table::new());
        }
    }
    if secrets.len() > MAX_SECRETS {
        return Err(config_error(
            text,
            &["tenants", name, "secrets"],
            format!("at most {MAX_SECRETS} secrets"),
        ));
    }
    let signer_key = match t.remove("signer_key") {
        None => None,
        Some(toml::Value::String(f)) => Some(resolve(dir, &f)),
        Some(_) => return Err(config_error(text, &["tenants", name, "signer_key"], "a file name")),
    };
    let checked = TenantConfig::from_table(name, t, dir, Backend::Process)
        .map_err(|e| e.located(text, &["tenants", name]))?;
    // The enclave takes only envelopes its measured signers signed: a key that is not one of
    // them, or signers with no key to sign, would release nothing it could open.
    let field = ["tenants", name, "signer_key"];
    match &signer_key {
        Some(f) => {
            let signer = load_signer(f).map_err(|why| config_error(text, &field, why))?;
            if !checked.signers.iter().any(|k| k.as_slice() == signer.public_key()) {
                let why =
                    "its public key is not in provisioning_signers: the enclave would refuse what it signs";
                return Err(config_error(text, &field, why));
            }
        }
        None if !checked.signers.is_empty() => {
            let why = "required with provisioning_signers: the enclave takes only signed secrets";
            return Err(config_error(text, &field, why));
        }
        None => {}
    }
    Ok(CasTenant {
        name: name.to_owned(),
        id: checked.id,
        measurement,
        config: checked.text,
        signers: checked.signers,
        secrets,
        signer_key,
    })
}

/// The tenant signer in a PKCS#8 file.
fn load_signer(file: &Path) -> core::result::Result<TenantSigner, String> {
    let pkcs8 = Zeroizing::new(std::fs::read(file).map_err(|e| format!("{}: {}", file.display(), e.kind()))?);
    TenantSigner::from_pkcs8(&pkcs8).map_err(|e| format!("{}: {e}", file.display()))
}

/// What a gateway asks for a tenant's release: one offer to attest the enclave, and one
/// per secret to seal it to.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReleaseRequest {
    /// An offer whose evidence attests the tenant's enclave (hex).
    pub evidence: String,
    /// One offer per secret (hex), by secret name.
    pub offers: BTreeMap<String, String>,
}

struct CasState {
    config: RwLock<CasConfig>,
    log: Log,
    released: AtomicU64,
    refused: AtomicU64,
}

/// A running CAS.
pub struct Cas {
    state: Arc<CasState>,
    server: Option<HttpServer>,
}

impl core::fmt::Debug for Cas {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cas").field("addr", &self.addr()).finish_non_exhaustive()
    }
}

impl Cas {
    /// Starts serving `config`.
    pub fn start(config: CasConfig, log: Log) -> Result<Self> {
        let listen = config.listen;
        let state = Arc::new(CasState {
            config: RwLock::new(config),
            log,
            released: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let s = Arc::clone(&state);
        let server = HttpServer::start(listen, "cloister-cas", move |req| handle(&s, req))?;
        (state.log)(&format!("cas: listening on http://{}", server.addr()));
        Ok(Self { state, server: Some(server) })
    }

    /// Where it listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(HttpServer::addr)
    }

    /// Serves a re-read file from now on (the address stays).
    pub fn reload(&self, config: CasConfig) {
        let n = (config.gateways.len(), config.tenants.len());
        *self.state.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        (self.state.log)(&format!("cas: reloaded, {} gateways, {} tenants", n.0, n.1));
    }

    /// Releases and refusals so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.state.released.load(Ordering::Relaxed), self.state.refused.load(Ordering::Relaxed))
    }

    /// Stops serving.
    pub fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

fn handle(state: &CasState, mut req: Request) {
    let config = state.config.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    let gateway = bearer(&req).and_then(|t| {
        config
            .gateways
            .iter()
            .find(|(_, g)| same(t.as_bytes(), g.token.as_bytes()))
            .map(|(n, g)| (n.clone(), g))
    });
    let Some((gw_name, gw)) = gateway else {
        state.refused.fetch_add(1, Ordering::Relaxed);
        return respond_error(req, 401, "a gateway's bearer token is required");
    };
    let Some(body) = read_body(&mut req, MAX_BODY) else {
        return respond_error(req, 413, "request body too large or unreadable");
    };
    let url = req.url().to_owned();
    let parts: Vec<&str> = url.split('?').next().unwrap_or("").split('/').filter(|p| !p.is_empty()).collect();
    let out = match (req.method(), parts.as_slice()) {
        (Method::Get, ["v1", "cas", "tenants"]) => Ok(Json::Array(
            gw.tenants
                .iter()
                .filter_map(|n| config.tenants.get(n))
                .map(|t| json!({"name": t.name, "id": t.id, "secrets": t.secrets.keys().collect::<Vec<_>>(), "signers": t.signers.iter().map(|k| hex(k)).collect::<Vec<_>>(), "digest": t.digest()}))
                .collect(),
        )),
        (Method::Post, ["v1", "cas", "tenants", name, "release"]) => {
            // Unknown and not-yours look the same: a gateway learns no other tenant's name.
            match config.tenants.get(*name).filter(|_| gw.tenants.contains(*name)) {
                None => Err(Error::Unknown { what: format!("tenant {}", name.chars().take(64).collect::<String>()) }),
                Some(t) => {
                    let r = release(t, gw, &body);
                    match &r {
                        Ok(_) => {
                            state.released.fetch_add(1, Ordering::Relaxed);
                            (state.log)(&format!(
                                "cas: released tenant {} (configuration, {} secrets sealed to its enclave) to gateway {gw_name}: evidence verified, measurement {}…",
                                t.name,
                                t.secrets.len(),
                                t.measurement.to_hex().get(..16).unwrap_or("")
                            ));
                        }
                        Err(e) => {
                            state.refused.fetch_add(1, Ordering::Relaxed);
                            (state.log)(&format!("cas: refused tenant {} to gateway {gw_name}: {e}", t.name));
                        }
                    }
                    r
                }
            }
        }
        _ => Err(Error::Api { status: 404, why: "no such route".into() }),
    };
    drop(config);
    match out {
        Ok(v) => respond(req, 200, v.to_string(), "application/json"),
        Err(e) => respond_error(req, e.status(), &e.to_string()),
    }
}

fn offer(hex_text: &str, what: &str) -> Result<ProvisioningOffer> {
    let bytes =
        unhex(hex_text).ok_or_else(|| Error::Config { line: None, field: what.into(), why: "hex".into() })?;
    ProvisioningOffer::from_bytes(&bytes).map_err(|e| Error::Provisioning(format!("{what}: {e}")))
}

/// Verifies the enclave, then seals each secret to its offer.
fn release(t: &CasTenant, gw: &CasGateway, body: &[u8]) -> Result<Json> {
    let req: ReleaseRequest = serde_json::from_slice(body).map_err(|_| Error::Config {
        line: None,
        field: "body".into(),
        why: "JSON {\"evidence\": HEX, \"offers\": {SECRET: HEX}}".into(),
    })?;
    let tenant = TenantId(t.id);
    let evidence = offer(&req.evidence, "evidence")?;
    verify_offer(&evidence, &gw.platform_key, &t.measurement, tenant)
        .map_err(|e| Error::Provisioning(format!("evidence: {e}")))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let signer = t.signer_key.as_deref().map(load_signer).transpose().map_err(Error::Provisioning)?;
    let mut envelopes = serde_json::Map::new();
    for (name, src) in &t.secrets {
        let o =
            req.offers.get(name).ok_or_else(|| Error::Provisioning(format!("no offer for secret {name}")))?;
        let o = offer(o, &format!("offers.{name}"))?;
        let mut secret = Zeroizing::new(std::fs::read(&src.file).map_err(|e| Error::Io {
            what: format!("secret {name} of tenant {}", t.name),
            why: e.kind().to_string(),
        })?);
        if src.kind == SecretKind::PreSharedKey {
            while secret.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                secret.pop();
            }
        }
        let envelope = seal_to_offer(
            &o,
            &gw.platform_key,
            &t.measurement,
            tenant,
            src.kind,
            &secret,
            now,
            signer.as_ref(),
        )
        .map_err(|e| Error::Provisioning(format!("secret {name}: {e}")))?;
        envelopes.insert(name.clone(), Json::String(hex(&envelope)));
    }
    Ok(json!({"name": t.name, "id": t.id, "config": t.config, "digest": t.digest(), "envelopes": envelopes}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cl-cas-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn file(measurement: &str, platform: &str) -> String {
        let tenant =
            crate::config::tests::TENANT.replace("[secrets.psk]", "[secrets.psk]\npsk_file = \"a.psk\"");
        let mut s = format!(
            "[cas]\nlisten = \"127.0.0.1:0\"\n[gateways.gw1]\ntoken = \"gw1.token\"\nplatform_key = \"{platform}\"\ntenants = [\"acme\"]\n[tenants.acme]\nmeasurement = \"{measurement}\"\n"
        );
        for line in tenant.lines() {
            match line.strip_prefix('[') {
                Some(rest) => s.push_str(&format!("[tenants.acme.{rest}\n")),
                None => {
                    s.push_str(line);
                    s.push('\n');
                }
            }
        }
        s
    }

    #[test]
    fn the_file_parses_and_released_configurations_hold_no_secret_source() {
        let d = dir();
        std::fs::write(d.join("a.psk"), "hunter2-but-longer\n").unwrap();
        let platform = format!("04{}", "11".repeat(64));
        let c = CasConfig::parse(&file(&"ab".repeat(48), &platform), &d).unwrap();
        let t = &c.tenants["acme"];
        assert_eq!(t.id, 1);
        assert!(!t.config.contains("a.psk") && !t.config.contains("measurement"), "{}", t.config);
        // The released text is a valid service tenant.
        TenantConfig::from_table("acme", t.config.parse().unwrap(), &d, Backend::Process).unwrap();
        assert!(d.join("gw1.token").exists());
        assert!(!format!("{c:?}").contains(std::fs::read_to_string(d.join("gw1.token")).unwrap().trim()));
        let again = CasConfig::parse(&file(&"ab".repeat(48), &platform), &d).unwrap();
        assert_eq!(again.tenants["acme"].digest(), t.digest());
        let other = CasConfig::parse(&file(&"cd".repeat(48), &platform), &d).unwrap();
        assert_ne!(other.tenants["acme"].digest(), t.digest());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_files_name_the_field_and_line() {
        let d = dir();
        std::fs::write(d.join("a.psk"), "x\n").unwrap();
        let platform = format!("04{}", "11".repeat(64));
        let m = "ab".repeat(48);
        let cases = [
            (file("nothex", &platform), "tenants.acme.measurement", "measurement ="),
            (file(&m, "04ab"), "gateways.gw1.platform_key", "platform_key ="),
            (
                file(&m, &platform).replace("tenants = [\"acme\"]", "tenants = [\"nope\"]"),
                "gateways.gw1.tenants",
                "tenants = [\"nope\"]",
            ),
            (
                file(&m, &platform).replace("a.psk", "missing.psk"),
                "tenants.acme.secrets.psk",
                "[tenants.acme.secrets.psk]",
            ),
            (
                file(&m, &platform).replace("psk_file", "pks_file"),
                "tenants.acme.secrets.psk",
                "[tenants.acme.secrets.psk]",
            ),
            (
                file(&m, &platform).replace("198.18.1.2:4500", "198.18.1.2:4501"),
                "tenants.acme.dataplane.listen",
                "4501",
            ),
        ];
        for (text, field, on_line) in cases {
            match CasConfig::parse(&text, &d) {
                Err(Error::Config { line: Some(l), field: f, .. }) => {
                    assert_eq!(f, field);
                    assert!(text.lines().nth(l - 1).unwrap().contains(on_line), "{field}: line {l}");
                }
                other => panic!("{field}: {other:?}"),
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_signing_tenant_needs_its_signer_key_among_its_signers() {
        let d = dir();
        std::fs::write(d.join("a.psk"), "x\n").unwrap();
        let platform = format!("04{}", "11".repeat(64));
        let m = "ab".repeat(48);
        let pkcs8 = TenantSigner::generate().unwrap();
        std::fs::write(d.join("acme.signer"), &pkcs8).unwrap();
        let public = hex(TenantSigner::from_pkcs8(&pkcs8).unwrap().public_key());
        let other = format!("04{}", "22".repeat(64));
        let with = |signers: &str, key: bool| {
            let mut head = format!("measurement = \"{m}\"\nprovisioning_signers = [{signers}]\n");
            if key {
                head.push_str("signer_key = \"acme.signer\"\n");
            }
            file(&m, &platform).replace(&format!("measurement = \"{m}\"\n"), &head)
        };
        let c = CasConfig::parse(&with(&format!("\"{public}\""), true), &d).unwrap();
        let t = &c.tenants["acme"];
        assert_eq!(t.signers.iter().map(|k| hex(k)).collect::<Vec<_>>(), [public.as_str()]);
        assert!(t.config.contains(&public) && !t.config.contains("acme.signer"), "{}", t.config);
        for (text, why) in [
            (with(&format!("\"{other}\""), true), "not in provisioning_signers"),
            (with(&format!("\"{public}\""), false), "required with provisioning_signers"),
            (with("\"04ab\"", true), "130 hex digits"),
        ] {
            match CasConfig::parse(&text, &d) {
                Err(Error::Config { why: w, .. }) => assert!(w.contains(why), "{w}"),
                other => panic!("{why}: {other:?}"),
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
