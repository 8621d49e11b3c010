//! The service's one file: `[service]` and one `[tenants.NAME]` table per tenant, each in
//! the gateway's vocabulary (`dataplane`, swanctl-style `connections`, and `secrets` that
//! only name what the tenant provisions by attestation).
//!
//! ```toml
//! [service]
//! state = "state.redb"            # the embedded store (one file)
//! platform_key = "platform.key"   # software attestation key of this host (made if missing)
//! sealing_root = "sealing.key"    # root of the tenants' sealing keys (made if missing)
//! api = "127.0.0.1:9440"          # the operator API (HTTP, bearer token)
//! api_token = "api.token"         # the token's file, mode 0600 (made if missing)
//! enclave = "process"             # or "inline" (tests)
//! enclave_uid_base = 2000000000   # tenant T's enclave runs as user base + T (0: the service's)
//! service_uid = 1999999999        # the user the service becomes after set-up (0: stays root)
//! cas = "http://198.18.0.9:9450"   # optional: tenants from a `cloister cas` as well
//! cas_token = "cas.token"         # this gateway's token there
//!
//! [migrate]                       # optional: live moves (docs/migration.md)
//! peers.b = { url = "http://198.18.13.2:9440", token_file = "b.token", platform_key = "04..." }
//!
//! [tenants.acme]
//! id = 1
//! initiate = ["site"]             # connections this side starts (and restarts)
//! provisioning_signers = ["04…"]  # optional: the tenant signs its secrets (measured)
//! engine = { retransmit_timeout = "1s" }
//! dataplane = { tun = "clt-acme", tun_netns = "acme-cloud", listen = ["198.18.1.2:4500"] }
//! connections.site = { ... }      # as in swanctl.conf
//! secrets.site-psk = {}           # provisioned by `cloister tenant provision`
//! ```
//!
//! Errors name the field (`tenants.acme.dataplane.listen`) and, where it can be found, the
//! line; they never quote a value.

use core::net::SocketAddr;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gateway::config::{redacted, resolve, Settings};
use gateway::{Backend, GatewayConfig};
use serde::Deserialize;

use crate::error::{Error, Result};

/// Where tenants' enclave users start when the service starts as root and the file says
/// nothing: tenant T's enclave process runs as user and group 2,000,000,000 + T, a range
/// no distribution hands out.
pub const DEFAULT_ENCLAVE_UID_BASE: u32 = 2_000_000_000;

/// The default API address (loopback only).
pub const DEFAULT_API: &str = "127.0.0.1:9440";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    state: Option<String>,
    platform_key: Option<String>,
    sealing_root: Option<String>,
    api: Option<String>,
    api_token: Option<String>,
    #[serde(default, deserialize_with = "gateway::config::deserialize_backend")]
    enclave: Option<Backend>,
    cas: Option<String>,
    cas_token: Option<String>,
    enclave_uid_base: Option<u32>,
    service_uid: Option<u32>,
}

/// `[service]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSettings {
    /// The embedded store's file.
    pub state: PathBuf,
    /// The platform attestation key's file (PKCS#8 P-256).
    pub platform_key: PathBuf,
    /// The sealing root's file (64 hex digits).
    pub sealing_root: PathBuf,
    /// Where the API listens.
    pub api: SocketAddr,
    /// The API bearer token's file.
    pub api_token: PathBuf,
    /// The enclave backend of every tenant.
    pub enclave: Backend,
    /// A configuration and attestation service to take tenants from, and the file of this
    /// gateway's token there.
    pub cas: Option<(String, PathBuf)>,
    /// `[migrate]`: live moves of tenants to and from other hosts.
    pub migrate: Option<crate::moving::MigrateSettings>,
    /// `enclave_uid_base` as written: tenant T's enclave process runs as user and group
    /// base + T; 0 runs them as the service's own user; unset, [`DEFAULT_ENCLAVE_UID_BASE`]
    /// where the service starts as root.
    pub enclave_uid_base: Option<u32>,
    /// `service_uid` as written: the user and group the service becomes once its platform
    /// runs and its private files are read, when it started as root with enclave users;
    /// unset, the enclave user base minus one; 0 keeps root.
    pub service_uid: Option<u32>,
}

impl ServiceSettings {
    /// The enclave user base for a service that started as root (`root`) or not: `None`
    /// runs enclaves as the platform's own user.
    pub fn enclave_users(&self, root: bool) -> Result<Option<u32>> {
        match self.enclave_uid_base {
            Some(0) => Ok(None),
            Some(b) if root => Ok(Some(b)),
            Some(_) => Err(Error::Internal {
                what: "service.enclave_uid_base: enclave users need the service to start as root".into(),
            }),
            None => Ok(root.then_some(DEFAULT_ENCLAVE_UID_BASE)),
        }
    }

    /// The HSM agent's user, where the service starts as root (`root`) with enclave users
    /// and has `[migrate.hsm]`: `agent_uid`, or the enclave user base minus two.
    pub fn agent_uid(&self, root: bool) -> Option<u32> {
        let hsm = self.migrate.as_ref()?.hsm.as_ref()?;
        let base = self.enclave_users(root).ok()??;
        Some(hsm.agent_uid.unwrap_or(base - 2))
    }
}

/// One tenant, checked.
#[derive(Debug, Clone)]
pub struct TenantConfig {
    /// Its name (the key under `tenants`).
    pub name: String,
    /// Its number (1..): its enclave is bound to it.
    pub id: u32,
    /// Connections this side initiates at start and after a recovery.
    pub initiate: Vec<String>,
    /// The tenant's provisioning signers (uncompressed P-256 keys,
    /// `enclave::EnclaveConfig::tenant_signers`): its enclave takes only secrets they signed.
    pub signers: Vec<Vec<u8>>,
    /// Its gateway: data plane, connections, secret names.
    pub gateway: GatewayConfig,
    /// The tenant's table as TOML text (what the store keeps).
    pub text: String,
}

/// The whole file, checked.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// `[service]`.
    pub settings: ServiceSettings,
    /// The tenants, by name.
    pub tenants: BTreeMap<String, TenantConfig>,
}

impl ServiceConfig {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<Self> {
        let (text, dir) = read_file(path)?;
        Self::parse(&text, &dir)
    }

    /// Checks a file's text; relative paths are taken from `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Self> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| syntax(text, &e))?;
        let raw: RawService = match table.remove("service") {
            Some(v) => v.try_into().map_err(|e: toml::de::Error| Error::Config {
                line: line_of(text, &["service"]),
                field: "service".into(),
                why: redacted(e.message()),
            })?,
            None => RawService {
                state: None,
                platform_key: None,
                sealing_root: None,
                api: None,
                api_token: None,
                enclave: None,
                cas: None,
                cas_token: None,
                enclave_uid_base: None,
                service_uid: None,
            },
        };
        let api = raw.api.as_deref().unwrap_or(DEFAULT_API);
        let api = api.parse::<SocketAddr>().map_err(|_| Error::Config {
            line: line_of(text, &["service", "api"]),
            field: "service.api".into(),
            why: "an address and port, e.g. \"127.0.0.1:9440\"".into(),
        })?;
        let migrate = table
            .remove("migrate")
            .map(|v| crate::moving::MigrateSettings::from_toml(v, dir))
            .transpose()
            .map_err(|e| e.located(text, &[]))?;
        let settings = ServiceSettings {
            state: resolve(dir, raw.state.as_deref().unwrap_or("state.redb")),
            platform_key: resolve(dir, raw.platform_key.as_deref().unwrap_or("platform.key")),
            sealing_root: resolve(dir, raw.sealing_root.as_deref().unwrap_or("sealing.key")),
            api,
            api_token: resolve(dir, raw.api_token.as_deref().unwrap_or("api.token")),
            enclave: raw.enclave.unwrap_or_default(),
            enclave_uid_base: match raw.enclave_uid_base {
                Some(b) if b != 0 && b < 1000 => {
                    return Err(Error::Config {
                        line: line_of(text, &["service", "enclave_uid_base"]),
                        field: "service.enclave_uid_base".into(),
                        why: "0 (the service's own user) or a user ID of at least 1000".into(),
                    })
                }
                b => b,
            },
            service_uid: match (raw.service_uid, raw.enclave_uid_base) {
                (Some(u), _) if u != 0 && u < 1000 => {
                    return Err(Error::Config {
                        line: line_of(text, &["service", "service_uid"]),
                        field: "service.service_uid".into(),
                        why: "0 (stay root) or a user ID of at least 1000".into(),
                    })
                }
                (Some(u), base)
                    if u != 0 && u >= base.filter(|&b| b != 0).unwrap_or(DEFAULT_ENCLAVE_UID_BASE) =>
                {
                    return Err(Error::Config {
                        line: line_of(text, &["service", "service_uid"]),
                        field: "service.service_uid".into(),
                        why: "below enclave_uid_base: the users above it are the tenants' enclaves'".into(),
                    })
                }
                (u, _) => u,
            },
            cas: match (raw.cas, raw.cas_token) {
                (None, None) => None,
                (Some(url), Some(token)) => {
                    crate::client::Client::new(&url, zeroize::Zeroizing::new(String::new())).map_err(
                        |_| Error::Config {
                            line: line_of(text, &["service", "cas"]),
                            field: "service.cas".into(),
                            why: "http://ADDRESS:PORT of the configuration and attestation service".into(),
                        },
                    )?;
                    Some((url, resolve(dir, &token)))
                }
                (url, _) => {
                    let f = if url.is_some() { "cas_token" } else { "cas" };
                    return Err(Error::Config {
                        line: line_of(text, &["service"]),
                        field: format!("service.{f}"),
                        why: "cas and cas_token go together".into(),
                    });
                }
            },
            migrate,
        };
        let tenants = match table.remove("tenants") {
            None => toml::Table::new(),
            Some(toml::Value::Table(t)) => t,
            Some(_) => {
                return Err(Error::Config {
                    line: line_of(text, &["tenants"]),
                    field: "tenants".into(),
                    why: "a table of tenants, [tenants.NAME]".into(),
                })
            }
        };
        if let Some(other) = table.keys().next() {
            return Err(Error::Config {
                line: line_of(text, &[other]),
                field: other.chars().take(64).collect(),
                why: "unknown table: expected [service], [migrate] and [tenants.NAME]".into(),
            });
        }
        let mut out = BTreeMap::new();
        for (name, value) in tenants {
            let toml::Value::Table(t) = value else {
                return Err(Error::Config {
                    line: line_of(text, &["tenants", &name]),
                    field: format!("tenants.{}", shown_name(&name)),
                    why: "a table".into(),
                });
            };
            let tenant = TenantConfig::from_table(&name, t, dir, settings.enclave)
                .map_err(|e| e.located(text, &["tenants", &name]))?;
            out.insert(name, tenant);
        }
        let config = Self { settings, tenants: out };
        config.check_distinct(None)?;
        Ok(config)
    }

    /// Refuses tenants that would collide: the same id, TUN device (in the same namespace)
    /// or listening address. `extra` is a tenant about to be added.
    pub fn check_distinct(&self, extra: Option<&TenantConfig>) -> Result<()> {
        let mut ids = BTreeMap::new();
        let mut tuns = BTreeSet::new();
        let mut listens = BTreeMap::new();
        for t in self.tenants.values().chain(extra) {
            if let Some(other) = ids.insert(t.id, &t.name) {
                return Err(Error::Duplicate {
                    what: format!("tenant id {} (tenants {other} and {})", t.id, t.name),
                });
            }
            let d = &t.gateway.dataplane.settings;
            if !tuns.insert((d.tun_netns.clone(), d.tun.clone())) {
                return Err(Error::Duplicate { what: format!("TUN device {} (tenant {})", d.tun, t.name) });
            }
            for a in &d.listen {
                if let Some(other) = listens.insert(a.ip(), &t.name) {
                    return Err(Error::Duplicate {
                        what: format!("listening address {} (tenants {other} and {})", a.ip(), t.name),
                    });
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    file: Option<String>,
}

impl TenantConfig {
    /// Checks one tenant's table (as under `[tenants.NAME]`).
    pub fn from_table(name: &str, mut t: toml::Table, dir: &Path, enclave: Backend) -> Result<Self> {
        let text = toml::to_string(&t)
            .map_err(|e| Error::Internal { what: format!("re-encoding a tenant: {e}") })?;
        let field = |f: &str| format!("tenants.{}.{f}", shown_name(name));
        let bad = |f: &str, why: &str| Error::Config { line: None, field: field(f), why: why.into() };
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("", "a tenant name is 1 to 64 letters, digits, '-' or '_'"));
        }
        let id = match t.remove("id") {
            Some(toml::Value::Integer(i)) => {
                u32::try_from(i).ok().filter(|&i| i > 0).ok_or_else(|| bad("id", "1 to 4294967295"))?
            }
            Some(_) => return Err(bad("id", "an integer")),
            None => return Err(bad("id", "required")),
        };
        let initiate = match t.remove("initiate") {
            None => Vec::new(),
            Some(v) => {
                Vec::<String>::deserialize(v).map_err(|_| bad("initiate", "a list of connection names"))?
            }
        };
        let signers = match t.remove("provisioning_signers") {
            None => Vec::new(),
            Some(v) => {
                let why = "a list of uncompressed P-256 public keys, 130 hex digits each (`cloister tenant signer-key`)";
                let keys = Vec::<String>::deserialize(v).map_err(|_| bad("provisioning_signers", why))?;
                let mut set = Vec::with_capacity(keys.len());
                for k in &keys {
                    set.push(
                        crate::platform::unhex(k)
                            .filter(|k| k.len() == 65 && k[0] == 4)
                            .ok_or_else(|| bad("provisioning_signers", why))?,
                    );
                }
                if set.len() > enclave::MAX_TRUSTED_PLATFORMS {
                    return Err(bad("provisioning_signers", "at most 64 keys"));
                }
                set.sort_unstable();
                set.dedup();
                set
            }
        };
        let engine = match t.remove("engine") {
            None => ike::EndpointConfig::default(),
            Some(v) => gateway::config::engine_from_toml(v, "engine").map_err(|e| gateway_error(name, e))?,
        };
        if let Some(toml::Value::Table(secrets)) = t.get("secrets") {
            for (s, v) in secrets {
                let raw = RawSecret::deserialize(v.clone()).map_err(|_| {
                    bad(&format!("secrets.{}", shown_name(s)), "an empty table: secrets come by attestation")
                })?;
                if raw.file.is_some() {
                    return Err(bad(
                        &format!("secrets.{}.file", shown_name(s)),
                        "a service tenant's secrets are provisioned by attestation (cloister tenant provision), never from files",
                    ));
                }
            }
        }
        let settings = Settings {
            tenant: id,
            enclave,
            provisioning_key: None,
            control_socket: None,
            engine,
            users: gateway::config::Users::default(),
        };
        let gateway = GatewayConfig::from_table(settings, t, dir).map_err(|e| gateway_error(name, e))?;
        for c in &initiate {
            if !gateway.ike.connections.iter().any(|k| &k.name == c) {
                return Err(bad("initiate", &format!("no connection {} is configured", shown_name(c))));
            }
        }
        Ok(Self { name: name.to_owned(), id, initiate, signers, gateway, text })
    }

    /// Parses a tenant given on its own (the API's `POST /v1/tenants`): `name = "..."` and
    /// the fields of a `[tenants.NAME]` table.
    pub fn parse_one(text: &str, dir: &Path, enclave: Backend) -> Result<Self> {
        let mut t: toml::Table = text.parse().map_err(|e: toml::de::Error| syntax(text, &e))?;
        let name = match t.remove("name") {
            Some(toml::Value::String(s)) => s,
            _ => {
                return Err(Error::Config {
                    line: None,
                    field: "name".into(),
                    why: "required: the tenant's name".into(),
                })
            }
        };
        Self::from_table(&name, t, dir, enclave).map_err(|e| e.located(text, &[]))
    }
}

/// A gateway configuration error as the service reports it: under the tenant's field.
fn gateway_error(tenant: &str, e: gateway::Error) -> Error {
    let tenant = shown_name(tenant);
    match e {
        gateway::Error::Config { field, why } => {
            Error::Config { line: None, field: format!("tenants.{tenant}.{field}"), why }
        }
        other => Error::Config { line: None, field: format!("tenants.{tenant}"), why: other.to_string() },
    }
}

/// A name safe to show (it came from the file; names are short and plain).
fn shown_name(s: &str) -> String {
    s.chars().take(64).filter(|c| !c.is_control()).collect()
}

/// A syntax error's position, without the parser's excerpt of the file (a value could be
/// a secret pasted in the wrong place).
/// A configuration file's text, and the directory its relative paths are taken from.
pub(crate) fn read_file(path: &Path) -> Result<(String, PathBuf)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Io { what: format!("reading {}", path.display()), why: e.to_string() })?;
    Ok((text, path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)))
}

pub(crate) fn syntax(text: &str, e: &toml::de::Error) -> Error {
    let line = e.span().map(|s| text.get(..s.start).unwrap_or("").matches('\n').count() + 1);
    Error::Config { line, field: "file".into(), why: format!("not valid TOML: {}", redacted(e.message())) }
}

/// The line (1-based) where the dotted `path` is defined in `text`: a table header
/// `[a.b]`, or a key `c = ...` under the header `[a.b]` (or `b.c = ...` under `[a]`, or
/// `c = ...` inside an inline table on a line under them). Best effort: `None` if not found.
pub fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let mut header: Vec<String> = Vec::new();
    let mut best = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let inner = line.trim_start_matches('[').split(']').next().unwrap_or("");
            header = inner.split('.').map(|p| p.trim().trim_matches('"').to_owned()).collect();
            if header.iter().map(String::as_str).eq(path.iter().copied()) {
                return Some(i + 1);
            }
            continue;
        }
        let Some((key, _)) = line.split_once('=') else { continue };
        let key: Vec<String> = key.split('.').map(|p| p.trim().trim_matches('"').to_owned()).collect();
        let full: Vec<&str> = header.iter().chain(key.iter()).map(String::as_str).collect();
        // The longest prefix of `path` this line defines wins; a deeper one is exact.
        let common = full.iter().zip(path).take_while(|(a, b)| a == b).count();
        if common == full.len() && common == path.len() {
            return Some(i + 1);
        }
        if common == full.len() && common > header.len() && best.is_none_or(|(c, _)| common > c) {
            // `path` lies inside this key's value (an inline table).
            best = Some((common, i + 1));
        }
    }
    best.map(|(_, l)| l)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TENANT: &str = r#"
id = 1
initiate = ["site"]
[dataplane]
tun = "clt-a"
listen = ["198.18.1.2:4500"]
[connections.site]
local_addrs = ["198.18.1.2"]
remote_addrs = ["198.18.1.1"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = { auth = "psk", id = "gw.cloister.test", secret = "psk" }
remote = { auth = "psk", id = "site-a.cloister.test" }
children.net = { local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["aes256gcm16"] }
[secrets.psk]
"#;

    fn file(tenants: &[(&str, &str)]) -> String {
        let mut s = String::from("[service]\napi = \"127.0.0.1:9440\"\n");
        for (name, body) in tenants {
            s.push_str(&format!("[tenants.{name}]\n"));
            for line in body.lines() {
                match line.strip_prefix('[') {
                    Some(rest) => s.push_str(&format!("[tenants.{name}.{rest}\n")),
                    None => {
                        s.push_str(line);
                        s.push('\n');
                    }
                }
            }
        }
        s
    }

    fn two() -> String {
        let b =
            TENANT.replace("id = 1", "id = 2").replace("clt-a", "clt-b").replace("198.18.1.2", "198.18.2.2");
        file(&[("acme", TENANT), ("blue", &b)])
    }

    #[test]
    fn tenants_parse_into_gateway_configs() {
        let c = ServiceConfig::parse(&two(), Path::new("/etc/cl")).unwrap();
        assert_eq!(c.settings.api, "127.0.0.1:9440".parse().unwrap());
        assert_eq!(c.settings.state, PathBuf::from("/etc/cl/state.redb"));
        assert_eq!(c.tenants.len(), 2);
        let a = &c.tenants["acme"];
        assert_eq!((a.id, a.initiate.as_slice()), (1, &["site".to_owned()][..]));
        assert_eq!(a.gateway.settings.tenant, 1);
        assert_eq!(a.gateway.settings.control_socket, None);
        assert_eq!(a.gateway.ike.secrets.len(), 1);
        // Overlapping inner subnets are allowed: each tenant has its own TUN device.
        assert_eq!(
            c.tenants["blue"].gateway.ike.connections[0].children[0].local_ts,
            a.gateway.ike.connections[0].children[0].local_ts
        );
        // The stored text parses back to the same tenant.
        let again =
            TenantConfig::from_table("acme", a.text.parse().unwrap(), Path::new("/etc/cl"), Backend::Process)
                .unwrap();
        assert_eq!(again.id, 1);
    }

    #[test]
    fn collisions_and_bad_fields_are_named_with_their_line() {
        let dup = file(&[
            ("acme", TENANT),
            ("blue", &TENANT.replace("clt-a", "clt-b").replace("198.18.1.2", "198.18.2.2")),
        ]);
        assert!(
            matches!(ServiceConfig::parse(&dup, Path::new(".")), Err(Error::Duplicate { what }) if what.contains("tenant id 1"))
        );
        let same_listen = file(&[
            ("acme", TENANT),
            ("blue", &TENANT.replace("id = 1", "id = 2").replace("clt-a", "clt-b")),
        ]);
        assert!(
            matches!(ServiceConfig::parse(&same_listen, Path::new(".")), Err(Error::Duplicate { what }) if what.contains("listening address"))
        );
        let text = two().replace("listen = [\"198.18.2.2:4500\"]", "listen = [\"198.18.2.2:4501\"]");
        match ServiceConfig::parse(&text, Path::new(".")) {
            Err(Error::Config { line: Some(l), field, .. }) => {
                assert_eq!(field, "tenants.blue.dataplane.listen");
                assert!(text.lines().nth(l - 1).unwrap().contains("4501"), "line {l}");
            }
            other => panic!("{other:?}"),
        }
        let text = two()
            .replace("[tenants.blue.secrets.psk]", "[tenants.blue.secrets.psk]\nfile = \"hunter2.blob\"");
        match ServiceConfig::parse(&text, Path::new(".")) {
            Err(Error::Config { line: Some(l), field, why }) => {
                assert_eq!(field, "tenants.blue.secrets.psk.file");
                assert!(text.lines().nth(l - 1).unwrap().contains("file ="));
                assert!(!why.contains("hunter2"));
            }
            other => panic!("{other:?}"),
        }
        let text = two().replace("initiate = [\"site\"]", "initiate = [\"nope\"]");
        assert!(
            matches!(ServiceConfig::parse(&text, Path::new(".")), Err(Error::Config { field, .. }) if field == "tenants.acme.initiate")
        );
        let text = two().replace("id = 2", "id = 0");
        assert!(
            matches!(ServiceConfig::parse(&text, Path::new(".")), Err(Error::Config { field, line: Some(_), .. }) if field == "tenants.blue.id")
        );
        assert!(
            matches!(ServiceConfig::parse("[service]\nnope = \"hunter2\"", Path::new(".")), Err(Error::Config { field, why, .. }) if field == "service" && !why.contains("hunter2"))
        );
        assert!(matches!(
            ServiceConfig::parse("[service\n", Path::new(".")),
            Err(Error::Config { line: Some(1), .. })
        ));
        assert!(
            matches!(ServiceConfig::parse("[other]\n", Path::new(".")), Err(Error::Config { field, .. }) if field == "other")
        );
    }

    #[test]
    fn one_tenant_parses_alone() {
        let t =
            TenantConfig::parse_one(&format!("name = \"acme\"\n{TENANT}"), Path::new("."), Backend::Inline)
                .unwrap();
        assert_eq!((t.name.as_str(), t.id), ("acme", 1));
        assert!(
            matches!(TenantConfig::parse_one(TENANT, Path::new("."), Backend::Inline), Err(Error::Config { field, .. }) if field == "name")
        );
        assert!(matches!(
            TenantConfig::parse_one(&format!("name = \"a b\"\n{TENANT}"), Path::new("."), Backend::Inline),
            Err(Error::Config { .. })
        ));
    }

    #[test]
    fn lines_are_found_for_headers_keys_and_inline_tables() {
        let text = "[service]\napi = 1\n[tenants.a]\nid = 2\ndataplane = { tun = \"x\" }\n[tenants.a.connections.c]\nlocal = 3\n";
        assert_eq!(line_of(text, &["service", "api"]), Some(2));
        assert_eq!(line_of(text, &["tenants", "a"]), Some(3));
        assert_eq!(line_of(text, &["tenants", "a", "id"]), Some(4));
        assert_eq!(line_of(text, &["tenants", "a", "dataplane", "tun"]), Some(5));
        assert_eq!(line_of(text, &["tenants", "a", "connections", "c", "local"]), Some(7));
        assert_eq!(line_of(text, &["tenants", "b"]), None);
    }
}
