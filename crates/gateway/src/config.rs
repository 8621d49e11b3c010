//! The gateway's one configuration file: `[gateway]` (this crate), `[dataplane]` (the ESP
//! data plane's settings, as for `cloister dataplane`) and `connections`/`secrets` in
//! swanctl.conf's vocabulary (the IKE engine's, `ike::Config`).
//!
//! ```toml
//! [gateway]
//! tenant = 1
//! enclave = "process"                      # or "inline" (keys in the gateway process)
//! provisioning_key = "provisioning.key"    # 64 hex digits, mode 0600
//! control_socket = "/run/cloister/gateway.sock"
//! retransmit_timeout = "2s"                # first IKE retransmission; each next one doubles
//! retransmit_tries = 5                     # sends of a request before the peer counts as gone
//! half_open_timeout = "30s"                # responder SAs waiting for IKE_AUTH
//! cookie_threshold = 10                    # half-open SAs from which cookies are required
//! enclave_uid_base = 1900000000            # the enclave process runs as user base + tenant (0: ours)
//! gateway_uid = 1899999999                 # the user the gateway becomes after set-up (0: stays root)
//!
//! [dataplane]
//! tun = "clgw0"
//! tun_addresses = ["198.19.2.1/32"]
//! listen = ["198.18.0.2:4500"]             # IKE also listens on port 500 of these addresses
//!
//! [connections.site-a] ...                 # as in swanctl.conf
//! [secrets.site-a-psk]
//! file = "site-a.psk.blob"                 # made by `cloister secret wrap`
//! ```
//!
//! Relative paths are relative to the configuration file. Errors name the field and never
//! quote a value (a secret pasted into the wrong field must not reach a log).

use core::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The port IKE starts on (RFC 7296 §2); NAT traversal moves it to the ESP-in-UDP port.
pub const IKE_PORT: u16 = 500;
/// The ESP-in-UDP and NAT-T IKE port (RFC 3948).
pub const NATT_PORT: u16 = 4500;

/// Which enclave backend holds the tenant's keys: `process` (the default) or `inline`.
pub use enclave::Backend;

/// Reads an optional [`Backend`] by its name (`enclave = "process"`), for serde.
pub fn deserialize_backend<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> core::result::Result<Option<Backend>, D::Error> {
    let name: Option<String> = Deserialize::deserialize(d)?;
    name.map(|n| n.parse().map_err(serde::de::Error::custom)).transpose()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    tenant: Option<u32>,
    #[serde(default, deserialize_with = "deserialize_backend")]
    enclave: Option<Backend>,
    provisioning_key: Option<String>,
    control_socket: Option<String>,
    retransmit_timeout: Option<String>,
    retransmit_tries: Option<u32>,
    half_open_timeout: Option<String>,
    cookie_threshold: Option<usize>,
    enclave_uid_base: Option<u32>,
    gateway_uid: Option<u32>,
}

/// The `[gateway]` table, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The tenant this gateway serves.
    pub tenant: u32,
    /// The enclave backend.
    pub enclave: Backend,
    /// The provisioning key's file (`cloister gateway`); `None` for a tenant of the
    /// multi-tenant service, whose secrets come by attestation.
    pub provisioning_key: Option<PathBuf>,
    /// Where `cloister sa list` connects; `None`: no control socket (the service's tenants
    /// answer through its API).
    pub control_socket: Option<PathBuf>,
    /// The IKE engine's timers and thresholds (retransmission, half-open SAs, cookies).
    pub engine: ike::EndpointConfig,
    /// Who `cloister gateway` runs as, started as root with the process enclave; the
    /// service's tenants take the service's users instead ([`Users::default`]).
    pub users: Users,
}

/// Where a gateway started as root with the process enclave puts its processes, when the
/// file says nothing: the enclave process as user and group 1,900,000,000 + tenant (a
/// range no distribution hands out, below the service's), the gateway as that minus one.
pub const DEFAULT_ENCLAVE_UID_BASE: u32 = 1_900_000_000;

/// `enclave_uid_base` and `gateway_uid` as written (`None`: unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Users {
    /// The enclave process runs as user and group base + tenant; 0 runs it as the
    /// gateway's (root's) own user; unset, [`DEFAULT_ENCLAVE_UID_BASE`].
    pub enclave_uid_base: Option<u32>,
    /// The user and group the gateway becomes once it has read its files and opened its
    /// TUN device and sockets; unset, the enclave user base minus one; 0 keeps root.
    pub gateway_uid: Option<u32>,
    /// What refusals call the two: the file's keys or a command's flags.
    names: [&'static str; 2],
}

const FILE_NAMES: [&str; 2] = ["gateway.enclave_uid_base", "gateway.gateway_uid"];

impl Default for Users {
    fn default() -> Self {
        Self { enclave_uid_base: None, gateway_uid: None, names: FILE_NAMES }
    }
}

impl Users {
    /// The two as a command's flags give them (`cloister dataplane`), checked as a file's
    /// are; refusals name `--enclave-uid-base` and `--user`.
    pub fn from_flags(enclave_uid_base: Option<u32>, user: Option<u32>) -> Result<Self> {
        Self::check_named(enclave_uid_base, user, ["--enclave-uid-base", "--user"])
    }

    /// Checks the two as a file gives them: each 0 or at least 1000, and the gateway's
    /// below the enclaves'.
    fn check(enclave_uid_base: Option<u32>, gateway_uid: Option<u32>) -> Result<Self> {
        Self::check_named(enclave_uid_base, gateway_uid, FILE_NAMES)
    }

    fn check_named(
        enclave_uid_base: Option<u32>,
        gateway_uid: Option<u32>,
        names: [&'static str; 2],
    ) -> Result<Self> {
        let user = |field, v: Option<u32>| match v {
            Some(u) if u != 0 && u < 1000 => {
                Err(Error::Config { field, why: "0 (root) or a user ID of at least 1000".into() })
            }
            _ => Ok(v),
        };
        let enclave_uid_base = user(names[0], enclave_uid_base)?;
        let gateway_uid = user(names[1], gateway_uid)?;
        let base = enclave_uid_base.filter(|&b| b != 0).unwrap_or(DEFAULT_ENCLAVE_UID_BASE);
        if gateway_uid.is_some_and(|u| u != 0 && u >= base) {
            return Err(Error::Config {
                field: names[1],
                why: "below the enclave user base: the users from it on are the enclaves'".into(),
            });
        }
        Ok(Self { enclave_uid_base, gateway_uid, names })
    }

    /// The enclave user base where the gateway starts as root (`root`): `None` runs the
    /// enclave as the gateway's own user. Refused when the file asks for enclave users
    /// but the gateway did not start as root.
    pub fn enclave_base(&self, root: bool) -> Result<Option<u32>> {
        match self.enclave_uid_base {
            Some(0) => Ok(None),
            Some(b) if root => Ok(Some(b)),
            Some(_) => Err(Error::Config {
                field: self.names[0],
                why: "enclave users need the gateway to start as root".into(),
            }),
            None => Ok(root.then_some(DEFAULT_ENCLAVE_UID_BASE)),
        }
    }

    /// The user the gateway becomes after set-up where it started as root (`root`), given
    /// the enclave user base it uses: `gateway_uid`, or unset the base minus one; `None`
    /// stays as it started (no enclave users and no user named, or 0). Refused when the
    /// file names a user but the gateway did not start as root.
    pub fn gateway_user(&self, root: bool, base: Option<u32>) -> Result<Option<u32>> {
        match self.gateway_uid {
            Some(0) => Ok(None),
            Some(u) if root => Ok(Some(u)),
            Some(_) => Err(Error::Config {
                field: self.names[1],
                why: "becoming a user of its own needs the gateway to start as root".into(),
            }),
            None => Ok(base.filter(|_| root).map(|b| b - 1)),
        }
    }
}

/// The whole checked configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `[gateway]`.
    pub settings: Settings,
    /// `[dataplane]`, with no static SAs.
    pub dataplane: dataplane::Config,
    /// `connections` and `secrets`.
    pub ike: ike::Config,
    /// The configuration file's directory, for its secrets' relative paths.
    pub dir: PathBuf,
}

/// The default control socket.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/cloister/gateway.sock";

/// `p`, or `p` under `dir` when relative (a configuration file's paths are relative to it).
pub fn resolve(dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

impl GatewayConfig {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.into(), source })?;
        let dir = path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Self::parse(&text, &dir)
    }

    /// Checks a configuration's text; relative paths are taken from `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Self> {
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| Error::Config { field: "file", why: position(text, &e) })?;
        let raw: RawGateway = match table.remove("gateway") {
            Some(v) => v.try_into().map_err(|e: toml::de::Error| Error::Config {
                field: "gateway",
                why: redacted(e.message()),
            })?,
            None => RawGateway {
                tenant: None,
                enclave: None,
                provisioning_key: None,
                control_socket: None,
                retransmit_timeout: None,
                retransmit_tries: None,
                half_open_timeout: None,
                cookie_threshold: None,
                enclave_uid_base: None,
                gateway_uid: None,
            },
        };
        let engine = engine_settings(&raw)?;
        let tenant = raw.tenant.unwrap_or(1);
        if tenant == 0 {
            return Err(Error::Config { field: "gateway.tenant", why: "tenant 0 is reserved".into() });
        }
        let provisioning_key = raw
            .provisioning_key
            .ok_or(Error::Config { field: "gateway.provisioning_key", why: "required".into() })?;
        let settings = Settings {
            tenant,
            enclave: raw.enclave.unwrap_or_default(),
            provisioning_key: Some(resolve(dir, &provisioning_key)),
            control_socket: Some(resolve(
                dir,
                raw.control_socket.as_deref().unwrap_or(DEFAULT_CONTROL_SOCKET),
            )),
            engine,
            users: Users::check(raw.enclave_uid_base, raw.gateway_uid)?,
        };
        if settings.enclave == Backend::Inline {
            // The inline enclave's root and ledger are this process's: it stays as it started.
            for (field, v) in [
                ("gateway.enclave_uid_base", settings.users.enclave_uid_base),
                ("gateway.gateway_uid", settings.users.gateway_uid),
            ] {
                if v.is_some_and(|u| u != 0) {
                    return Err(Error::Config {
                        field,
                        why: "users of their own need enclave = \"process\" (the inline enclave is this process)"
                            .into(),
                    });
                }
            }
        }
        Self::from_table(settings, table, dir)
    }

    /// Checks `[dataplane]`, `connections` and `secrets` from `table` (which holds no
    /// `[gateway]`) under `settings` chosen by the caller: the multi-tenant service builds
    /// each tenant's gateway this way.
    pub fn from_table(settings: Settings, mut table: toml::Table, dir: &Path) -> Result<Self> {
        if table.contains_key("gateway") {
            return Err(Error::Config { field: "gateway", why: "not allowed here".into() });
        }
        if settings.tenant == 0 {
            return Err(Error::Config { field: "gateway.tenant", why: "tenant 0 is reserved".into() });
        }
        for statics in ["sa", "policy"] {
            if table.contains_key(statics) {
                return Err(Error::Config {
                    field: if statics == "sa" { "sa" } else { "policy" },
                    why:
                        "static SAs and policies belong to `cloister dataplane`; the gateway's come from IKE"
                            .into(),
                });
            }
        }
        let mut dp = toml::Table::new();
        if let Some(d) = table.remove("dataplane") {
            dp.insert("dataplane".into(), d);
        }
        let dataplane = dataplane::Config::parse(&dp.to_string()).map_err(Error::Dataplane)?;
        if dataplane.settings.listen.is_empty() {
            return Err(Error::Config {
                field: "dataplane.listen",
                why: "at least one address and port, e.g. \"198.18.0.2:4500\"".into(),
            });
        }
        if let Some(bad) =
            dataplane.settings.listen.iter().find(|a| a.port() != NATT_PORT || a.ip().is_unspecified())
        {
            return Err(Error::Config {
                field: "dataplane.listen",
                why: format!("{bad}: a concrete address on port {NATT_PORT} (IKE replies leave from it)"),
            });
        }
        // Certificate paths, like secrets', are relative to the configuration file.
        let mut read = |p: &str| std::fs::read(resolve(dir, p));
        let ike = ike::Config::from_toml_with(&table.to_string(), &mut read).map_err(Error::Ike)?;
        if ike.connections.is_empty() {
            return Err(Error::Config { field: "connections", why: "no connection is configured".into() });
        }
        Ok(Self { settings, dataplane, ike, dir: dir.to_path_buf() })
    }

    /// The addresses IKE listens on, port 500 (NAT-T IKE shares the data plane's 4500).
    pub fn ike_listeners(&self) -> Vec<SocketAddr> {
        let mut v: Vec<IpAddr> = self.dataplane.settings.listen.iter().map(SocketAddr::ip).collect();
        v.sort();
        v.dedup();
        v.into_iter().map(|ip| SocketAddr::new(ip, IKE_PORT)).collect()
    }

    /// A secret's wrapped blob file.
    pub fn secret_path(&self, file: &str) -> PathBuf {
        resolve(&self.dir, file)
    }
}

/// The IKE engine's timers and thresholds alone, as a service's tenant table gives them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    retransmit_timeout: Option<String>,
    retransmit_tries: Option<u32>,
    half_open_timeout: Option<String>,
    cookie_threshold: Option<usize>,
}

/// Checks a table of engine settings (`retransmit_timeout`, `retransmit_tries`,
/// `half_open_timeout`, `cookie_threshold`) over the defaults.
pub fn engine_from_toml(value: toml::Value, field: &'static str) -> Result<ike::EndpointConfig> {
    let e: RawEngine =
        value.try_into().map_err(|e: toml::de::Error| Error::Config { field, why: redacted(e.message()) })?;
    engine_settings(&RawGateway {
        tenant: None,
        enclave: None,
        provisioning_key: None,
        control_socket: None,
        enclave_uid_base: None,
        gateway_uid: None,
        retransmit_timeout: e.retransmit_timeout,
        retransmit_tries: e.retransmit_tries,
        half_open_timeout: e.half_open_timeout,
        cookie_threshold: e.cookie_threshold,
    })
}

/// The engine settings of `[gateway]`, over the defaults; timers from 100 ms to an hour.
fn engine_settings(raw: &RawGateway) -> Result<ike::EndpointConfig> {
    let mut e = ike::EndpointConfig::default();
    let timer = |field: &'static str, text: &Option<String>, into: &mut core::time::Duration| {
        let Some(text) = text else { return Ok(()) };
        let d = ike::config::parse_duration_text(text)
            .map_err(|why| Error::Config { field, why: why.to_owned() })?;
        if d < core::time::Duration::from_millis(100) || d > core::time::Duration::from_secs(3600) {
            return Err(Error::Config { field, why: "between 100ms and 1h".into() });
        }
        *into = d;
        Ok(())
    };
    timer("gateway.retransmit_timeout", &raw.retransmit_timeout, &mut e.retransmit_timeout)?;
    timer("gateway.half_open_timeout", &raw.half_open_timeout, &mut e.half_open_timeout)?;
    if let Some(t) = raw.retransmit_tries {
        if !(1..=20).contains(&t) {
            return Err(Error::Config { field: "gateway.retransmit_tries", why: "from 1 to 20".into() });
        }
        e.retransmit_tries = t;
    }
    if let Some(c) = raw.cookie_threshold {
        e.cookie_threshold = c;
    }
    Ok(e)
}

/// A serde message up to its first quoted value (a value could be a secret).
pub fn redacted(message: &str) -> String {
    let cut = message.split(['"', '\'']).next().unwrap_or("").trim_end();
    cut.trim_end_matches(':').to_owned()
}

/// A toml error's position, without the parser's excerpt of the file.
fn position(text: &str, e: &toml::de::Error) -> String {
    e.span().map_or_else(
        || "not valid TOML".to_owned(),
        |s| {
            let before = text.get(..s.start).unwrap_or("");
            format!("not valid TOML at line {}", before.matches('\n').count() + 1)
        },
    )
}

/// Reads a provisioning key file: 64 hex digits, readable by its owner only.
pub fn read_provisioning_key(path: &Path) -> Result<zeroize::Zeroizing<[u8; 32]>> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| Error::Read { path: path.into(), source })?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Error::KeyFile { path: path.into(), why: "readable by others: chmod 600 it" });
    }
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.into(), source })?,
    );
    let hex = text.trim();
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::KeyFile { path: path.into(), why: "not 64 hex digits" });
    }
    for (i, k) in key.iter_mut().enumerate() {
        let pair = hex.get(2 * i..2 * i + 2).unwrap_or("00");
        *k =
            u8::from_str_radix(pair, 16).map_err(|_| Error::KeyFile { path: path.into(), why: "not hex" })?;
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONNECTION: &str = r#"
[connections.site-a]
local_addrs = ["198.18.0.2"]
remote_addrs = ["198.18.0.1"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = { auth = "psk", id = "gw.cloister.test", secret = "psk" }
remote = { auth = "psk", id = "site-a.cloister.test" }
children.net = { local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["aes256gcm16"] }
[secrets.psk]
file = "psk.blob"
"#;

    fn gateway(extra: &str) -> String {
        format!(
            "[gateway]\nprovisioning_key = \"pk\"\n{extra}\n[dataplane]\ntun = \"clgw0\"\nlisten = [\"198.18.0.2:4500\"]\n{CONNECTION}"
        )
    }

    #[test]
    fn one_file_feeds_gateway_dataplane_and_ike() {
        let c = GatewayConfig::parse(&gateway("tenant = 7"), Path::new("/etc/cl")).unwrap();
        assert_eq!(c.settings.tenant, 7);
        assert_eq!(c.settings.enclave, Backend::Process);
        assert_eq!(c.settings.provisioning_key, Some(PathBuf::from("/etc/cl/pk")));
        assert_eq!(c.dataplane.settings.tun, "clgw0");
        assert_eq!(c.ike_listeners(), vec!["198.18.0.2:500".parse().unwrap()]);
        assert_eq!(c.ike.connections.len(), 1);
        assert_eq!(c.secret_path("psk.blob"), PathBuf::from("/etc/cl/psk.blob"));
    }

    #[test]
    fn users_default_below_the_service_and_refuse_what_cannot_work() {
        let users =
            |extra: &str| GatewayConfig::parse(&gateway(extra), Path::new(".")).map(|c| c.settings.users);
        let field = |extra: &str| match users(extra) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{extra}: {other:?}"),
        };
        // Unset: enclave users from 1,900,000,000 and the gateway just below, as root only.
        let u = users("").unwrap();
        assert_eq!(u.enclave_base(true).unwrap(), Some(DEFAULT_ENCLAVE_UID_BASE));
        assert_eq!(u.gateway_user(true, Some(DEFAULT_ENCLAVE_UID_BASE)).unwrap(), Some(1_899_999_999));
        assert_eq!(u.enclave_base(false).unwrap(), None);
        assert_eq!(u.gateway_user(false, None).unwrap(), None);
        // Named users, and 0 for root.
        let u = users("enclave_uid_base = 5000\ngateway_uid = 4000").unwrap();
        assert_eq!(
            (u.enclave_base(true).unwrap(), u.gateway_user(true, Some(5000)).unwrap()),
            (Some(5000), Some(4000))
        );
        let u = users("enclave_uid_base = 0\ngateway_uid = 0").unwrap();
        assert_eq!((u.enclave_base(true).unwrap(), u.gateway_user(true, None).unwrap()), (None, None));
        assert_eq!(
            users("enclave_uid_base = 0\ngateway_uid = 4000").unwrap().gateway_user(true, None).unwrap(),
            Some(4000)
        );
        // Refused: system users, the gateway among the enclaves, users without root, inline.
        assert_eq!(field("enclave_uid_base = 999"), "gateway.enclave_uid_base");
        assert_eq!(field("gateway_uid = 1"), "gateway.gateway_uid");
        assert_eq!(field("gateway_uid = 1900000000"), "gateway.gateway_uid");
        assert_eq!(field("enclave_uid_base = 5000\ngateway_uid = 6000"), "gateway.gateway_uid");
        assert_eq!(field("enclave = \"inline\"\ngateway_uid = 4000"), "gateway.gateway_uid");
        assert_eq!(field("enclave = \"inline\"\nenclave_uid_base = 5000"), "gateway.enclave_uid_base");
        assert!(users("enclave = \"inline\"\ngateway_uid = 0").is_ok());
        let u = users("enclave_uid_base = 5000\ngateway_uid = 4000").unwrap();
        assert!(matches!(
            u.enclave_base(false),
            Err(Error::Config { field: "gateway.enclave_uid_base", .. })
        ));
        assert!(matches!(
            u.gateway_user(false, None),
            Err(Error::Config { field: "gateway.gateway_uid", .. })
        ));
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |text: &str| match GatewayConfig::parse(text, Path::new(".")) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(&gateway("tenant = 0")), "gateway.tenant");
        assert_eq!(
            field(&CONNECTION.replace("[connections", "[gateway]\nprovisioning_key = \"k\"\n[connections")),
            "dataplane.listen"
        );
        assert_eq!(field(&gateway("").replace("198.18.0.2:4500", "198.18.0.2:4501")), "dataplane.listen");
        assert_eq!(field(&format!("{}\n[[sa]]\nname = \"x\"", gateway(""))), "sa");
        assert_eq!(field(&gateway("").replace("provisioning_key = \"pk\"", "")), "gateway.provisioning_key");
        assert!(matches!(
            GatewayConfig::parse(&gateway("secret = \"hunter2\""), Path::new(".")),
            Err(Error::Config { field: "gateway", why }) if why.contains("unknown field `secret`") && !why.contains("hunter2")
        ));
        assert!(matches!(
            GatewayConfig::parse(&gateway("control_socket = 4\ntenant = \"hunter2\""), Path::new(".")),
            Err(Error::Config { field: "gateway", why }) if !why.contains("hunter2")
        ));
        assert!(matches!(
            GatewayConfig::parse(&gateway("").replace("tun = ", "tun_mtu = 99\ntun = "), Path::new(".")),
            Err(Error::Dataplane(_))
        ));
    }

    #[test]
    fn engine_timers_are_set_and_bounded() {
        let c = GatewayConfig::parse(
            &gateway("retransmit_timeout = \"500ms\"\nretransmit_tries = 3\nhalf_open_timeout = \"1m\""),
            Path::new("."),
        )
        .unwrap();
        let e = c.settings.engine;
        assert_eq!(e.retransmit_timeout, core::time::Duration::from_millis(500));
        assert_eq!((e.retransmit_tries, e.half_open_timeout.as_secs()), (3, 60));
        assert_eq!(e.cookie_threshold, ike::EndpointConfig::default().cookie_threshold);
        let d = GatewayConfig::parse(&gateway(""), Path::new(".")).unwrap();
        assert_eq!(d.settings.engine, ike::EndpointConfig::default());
        let field = |extra: &str| match GatewayConfig::parse(&gateway(extra), Path::new(".")) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field("retransmit_timeout = \"10ms\""), "gateway.retransmit_timeout");
        assert_eq!(field("retransmit_timeout = \"2 fortnights\""), "gateway.retransmit_timeout");
        assert_eq!(field("half_open_timeout = \"2h\""), "gateway.half_open_timeout");
        assert_eq!(field("retransmit_tries = 0"), "gateway.retransmit_tries");
    }

    #[test]
    fn provisioning_key_files_must_be_private_hex() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cl-gw-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k");
        std::fs::write(&p, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(read_provisioning_key(&p), Err(Error::KeyFile { .. })));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(*read_provisioning_key(&p).unwrap(), [0xab; 32]);
        std::fs::write(&p, "abc").unwrap();
        assert!(matches!(read_provisioning_key(&p), Err(Error::KeyFile { why: "not 64 hex digits", .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
