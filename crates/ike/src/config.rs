//! Connection configuration in TOML, with strongSwan's (swanctl.conf) vocabulary.
//!
//! ```toml
//! [connections.site-b]
//! local_addrs = ["198.18.0.1"]
//! remote_addrs = ["198.18.0.2"]            # "%any": accept from anywhere (responder only)
//! proposals = ["aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp3072"]
//! rekey_time = "4h"                        # IKE SA; strongSwan durations: 90, "90s", "30m", "4h", "1d"
//! over_time = "24m"                        # hard IKE lifetime = rekey_time + over_time
//! dpd_delay = "30s"                        # liveness check after this much silence; 0 = off
//! encap = false                            # force UDP encapsulation (fake NAT detection)
//! fragmentation = "yes"                    # RFC 7383: "yes" (announce, fragment large
//!                                          # messages if the peer announced it too),
//!                                          # "accept" (announce, never fragment), "no";
//!                                          # "force" is "yes" (strongSwan: IKEv1 only)
//! unique = "no"                            # "no": a peer's INITIAL_CONTACT replaces its other
//!                                          # IKE SAs (RFC 7296 §2.4); "never": it does not
//!
//! [connections.site-b.local]
//! auth = "psk"
//! id = "site-a.cloister.test"              # default: the first local address
//! secret = "site-b-psk"                    # a secret's *name*; its value is never in this file
//!
//! [connections.site-b.remote]
//! auth = "psk"
//! id = "site-b.cloister.test"              # "%any" (the default) accepts any identity
//!
//! [connections.site-b.children.net]
//! local_ts = ["198.18.1.0/24"]             # default "dynamic": our outer address
//! remote_ts = ["198.18.2.0/24[tcp/443]"]
//! esp_proposals = ["aes256gcm16-esn"]
//! rekey_time = "1h"
//! life_time = "66m"                        # default: rekey_time + 10 %
//! rekey_bytes = "512m"                     # volume limits (default: none); k, m, g = 1024^n
//! life_bytes = "600m"                      # default: rekey_bytes + 10 %
//! rekey_packets = 1000000                  # life_packets likewise
//!
//! [secrets.site-b-psk]
//! file = "/etc/cloister/site-b.psk.wrapped"   # a provisioning blob, opened by the enclave only
//! ```
//!
//! Certificates (`auth = "pubkey"`, swanctl's words again):
//!
//! ```toml
//! [connections.site-c.local]
//! auth = "pubkey"                          # or rsa, rsa/pss, ecdsa; -sha256/-sha384/-sha512 to pin hashes
//! certs = ["site-a.pem"]                   # ours first; more certificates = intermediates sent with it
//! id = "site-a.cloister.test"              # default: the certificate's subject DN; must be in the certificate
//! secret = "site-a-key"                    # the private key's *name*: a [secrets.NAME] blob for the enclave
//!
//! [connections.site-c.remote]
//! auth = "pubkey"                          # "rsa/pss" etc. restrict what the peer may use
//! cacerts = ["ca.pem"]                     # the CAs its certificate must chain to (PEM or DER)
//! id = "C=CH, O=Example, CN=site-c"        # a DN (strongSwan order) or any identity above; %any
//! ```
//!
//! [`Config::from_toml`] checks everything a file can get wrong and names the connection,
//! field and value in its error. Pre-shared keys and private keys never appear here: a
//! connection names a secret, the secret is provisioned into the enclave as a wrapped blob,
//! and the engine receives only its handle ([`crate::Endpoint::add_secret`]). Certificate
//! files are read when the configuration is loaded ([`Config::from_toml_with`] lets the
//! caller say how), never during an exchange.

use core::net::IpAddr;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use wire::ike::{IdType, Identification};

use crate::auth::AuthPolicy;
use crate::cert::{self, Certificate};
use crate::error::{Error, Result};
use crate::fragment::FragmentationPolicy;
use crate::proposal::{EspProposal, IkeProposal};
use crate::ts::TsSpec;

mod sides;

/// A validated configuration: connections and the secrets they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The connections, by name order.
    pub connections: Vec<Connection>,
    /// Declared secrets: name and where its wrapped blob lives.
    pub secrets: Vec<SecretRef>,
}

/// A declared secret (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The name connections use.
    pub name: String,
    /// The wrapped provisioning blob's path, if given.
    pub file: Option<String>,
}

/// Uniqueness of a peer's IKE SAs, in strongSwan's words (`unique`); its `keep` and
/// `replace`, which act without INITIAL_CONTACT, are not offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unique {
    /// A peer's IKE_AUTH with INITIAL_CONTACT replaces its other IKE SAs of the connection
    /// with the same identity (RFC 7296 §2.4; strongSwan's default).
    #[default]
    No,
    /// INITIAL_CONTACT is ignored: one identity may hold many IKE SAs (load generators,
    /// a shared identity on many appliances).
    Never,
}

/// One IKE connection to a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The connection's name.
    pub name: String,
    /// Our addresses; empty means any (responder only).
    pub local_addrs: Vec<IpAddr>,
    /// The peer's addresses; empty means `%any` (responder only).
    pub remote_addrs: Vec<IpAddr>,
    /// IKE proposals, most preferred first.
    pub proposals: Vec<IkeProposal>,
    /// When to rekey the IKE SA.
    pub rekey_time: Duration,
    /// How long past `rekey_time` the IKE SA may live (hard lifetime).
    pub over_time: Duration,
    /// Send a liveness check after this much silence from the peer; `None` disables it.
    pub dpd_delay: Option<Duration>,
    /// Force UDP encapsulation by faking NAT detection (strongSwan's `encap`).
    pub encap: bool,
    /// IKE fragmentation (RFC 7383; strongSwan's `fragmentation`).
    pub fragmentation: FragmentationPolicy,
    /// What a peer's INITIAL_CONTACT does to its other IKE SAs (strongSwan's `unique`).
    pub unique: Unique,
    /// Our identity.
    pub local_id: Identification,
    /// The identity the peer must prove; `None` accepts any.
    pub remote_id: Option<Identification>,
    /// How we authenticate (`local.auth`).
    pub local_auth: AuthPolicy,
    /// How the peer must authenticate (`remote.auth`).
    pub remote_auth: AuthPolicy,
    /// Our certificate, then the intermediate CA certificates sent with it (`local.certs`).
    pub local_certs: Vec<Certificate>,
    /// The CAs the peer's certificate must chain to (`remote.cacerts`).
    pub remote_cacerts: Vec<Certificate>,
    /// The name of the pre-shared key or private key (a [`SecretRef`]).
    pub secret: String,
    /// Child SA configurations, by name order; the first is negotiated in IKE_AUTH.
    pub children: Vec<ChildConfig>,
}

/// One child SA configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildConfig {
    /// The child's name.
    pub name: String,
    /// Our side's selectors.
    pub local_ts: Vec<TsSpec>,
    /// The peer's side's selectors.
    pub remote_ts: Vec<TsSpec>,
    /// ESP proposals, most preferred first.
    pub esp_proposals: Vec<EspProposal>,
    /// When to rekey.
    pub rekey_time: Duration,
    /// Hard lifetime.
    pub life_time: Duration,
    /// Volume limits: rekey and hard limits in bytes and packets (per direction).
    pub volume: VolumeLimits,
}

/// A child's volume lifetimes, counted per SA direction by the data plane (strongSwan's
/// `rekey_bytes`, `life_bytes`, `rekey_packets`, `life_packets`); `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VolumeLimits {
    /// Bytes after which the child is rekeyed.
    pub rekey_bytes: Option<u64>,
    /// Bytes after which the child is deleted.
    pub life_bytes: Option<u64>,
    /// Packets after which the child is rekeyed.
    pub rekey_packets: Option<u64>,
    /// Packets after which the child is deleted.
    pub life_packets: Option<u64>,
}

/// A duration as strongSwan writes it: seconds, or a number with s/m/h/d.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(u64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    connections: BTreeMap<String, RawConnection>,
    #[serde(default)]
    secrets: BTreeMap<String, RawSecret>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnection {
    #[serde(default)]
    local_addrs: Vec<String>,
    #[serde(default)]
    remote_addrs: Vec<String>,
    #[serde(default)]
    proposals: Vec<String>,
    rekey_time: Option<RawDuration>,
    over_time: Option<RawDuration>,
    dpd_delay: Option<RawDuration>,
    #[serde(default)]
    encap: bool,
    fragmentation: Option<String>,
    unique: Option<String>,
    local: Option<RawLocal>,
    remote: Option<RawRemote>,
    #[serde(default)]
    children: BTreeMap<String, RawChild>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocal {
    auth: Option<String>,
    id: Option<String>,
    secret: Option<String>,
    #[serde(default)]
    certs: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    auth: Option<String>,
    id: Option<String>,
    #[serde(default)]
    cacerts: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChild {
    #[serde(default)]
    local_ts: Vec<String>,
    #[serde(default)]
    remote_ts: Vec<String>,
    #[serde(default)]
    esp_proposals: Vec<String>,
    rekey_time: Option<RawDuration>,
    life_time: Option<RawDuration>,
    rekey_bytes: Option<RawDuration>,
    life_bytes: Option<RawDuration>,
    rekey_packets: Option<RawDuration>,
    life_packets: Option<RawDuration>,
}

/// strongSwan's defaults (swanctl.conf).
const DEFAULT_IKE_REKEY: Duration = Duration::from_secs(4 * 3600);
const DEFAULT_CHILD_REKEY: Duration = Duration::from_secs(3600);

impl Config {
    /// Parses and validates a TOML configuration; certificate files are read from the file
    /// system as named (relative to the current directory).
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::from_toml_with(text, &mut |path| std::fs::read(path))
    }

    /// Parses and validates a TOML configuration, reading each certificate file named in it
    /// with `read` (e.g. relative to the configuration's directory, or from memory).
    pub fn from_toml_with(
        text: &str,
        read: &mut dyn FnMut(&str) -> std::io::Result<Vec<u8>>,
    ) -> Result<Self> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        let secrets: Vec<SecretRef> =
            raw.secrets.into_iter().map(|(name, s)| SecretRef { name, file: s.file }).collect();
        let mut connections = Vec::new();
        for (name, c) in raw.connections {
            let conn = Connection::validate(name, c, read)?;
            if !secrets.is_empty() && !secrets.iter().any(|s| s.name == conn.secret) {
                return Err(Error::UnknownSecret { connection: conn.name, secret: conn.secret });
            }
            connections.push(conn);
        }
        Ok(Self { connections, secrets })
    }

    /// The connection of this name.
    pub fn connection(&self, name: &str) -> Option<&Connection> {
        self.connections.iter().find(|c| c.name == name)
    }
}

/// The parser's message with its line, without the source excerpt `toml` would print: the
/// offending line could be an inline secret someone wrote where a name belongs.
fn toml_error(text: &str, e: &toml::de::Error) -> Error {
    let line = e.span().map(|s| text.get(..s.start).map_or(0, |t| t.matches('\n').count()) + 1);
    let message = e.message().trim().to_owned();
    Error::Toml {
        message: match line {
            Some(l) => format!("line {l}: {message}"),
            None => message,
        },
    }
}

/// Parses a strongSwan duration: `90`, `"90"`, `"90s"`, `"30m"`, `"4h"`, `"1d"`.
fn parse_duration(raw: &RawDuration) -> core::result::Result<Duration, (&'static str, String)> {
    let text = match raw {
        RawDuration::Seconds(s) => return parse_duration(&RawDuration::Text(s.to_string())),
        RawDuration::Text(t) => t.trim(),
    };
    parse_duration_text(text).map_err(|why| (why, text.to_owned()))
}

/// Parses a duration in strongSwan's syntax (`90`, `"90s"`, `"30m"`, `"4h"`, `"1d"`), and
/// milliseconds (`"500ms"`) for timers shorter than a second; at most ten years.
pub fn parse_duration_text(text: &str) -> core::result::Result<Duration, &'static str> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let value: u64 = digits.parse().map_err(|_| "not a duration (e.g. 90, 90s, 30m, 4h, 1d)")?;
    let millis = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("unknown unit (use ms, s, m, h or d)"),
    };
    // Ten years is far beyond any IKE lifetime; anything longer is a typo.
    const MAX_MILLIS: u64 = 10 * 365 * 86_400 * 1000;
    value
        .checked_mul(millis)
        .filter(|m| *m <= MAX_MILLIS)
        .map(Duration::from_millis)
        .ok_or("duration too large (at most ten years)")
}

/// A duration field with a default.
fn duration(
    connection: &str,
    field: &'static str,
    raw: Option<&RawDuration>,
    default: Duration,
) -> Result<Duration> {
    match raw {
        None => Ok(default),
        Some(r) => parse_duration(r).map_err(|(why, value)| Error::InvalidValue {
            connection: connection.to_owned(),
            field,
            value,
            why,
        }),
    }
}

/// A count as strongSwan writes volumes: a number, optionally with k, m or g (powers of
/// 1024, either case); 0 means no limit.
fn parse_count(raw: &RawDuration) -> core::result::Result<Option<u64>, (&'static str, String)> {
    let text = match raw {
        RawDuration::Seconds(n) => return Ok(Some(*n).filter(|n| *n > 0)),
        RawDuration::Text(t) => t.trim(),
    };
    let bad = "a count: a number, optionally followed by k, m or g";
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 10),
        Some((i, 'm' | 'M')) => (&text[..i], 20),
        Some((i, 'g' | 'G')) => (&text[..i], 30),
        _ => (text, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| (bad, text.to_owned()))?;
    let n = n.checked_mul(1u64 << shift).ok_or(("too large", text.to_owned()))?;
    Ok(Some(n).filter(|n| *n > 0))
}

/// A pair of volume limits: the hard one defaults to the soft one + 10 %, and must exceed it.
fn volume(
    connection: &str,
    fields: (&'static str, &'static str),
    soft: &Option<RawDuration>,
    hard: &Option<RawDuration>,
) -> Result<(Option<u64>, Option<u64>)> {
    let invalid =
        |field, (why, value)| Error::InvalidValue { connection: connection.to_owned(), field, value, why };
    let soft = soft.as_ref().map(parse_count).transpose().map_err(|e| invalid(fields.0, e))?.flatten();
    let hard = match hard {
        Some(h) => parse_count(h).map_err(|e| invalid(fields.1, e))?,
        None => soft.map(|s| s.saturating_add(s / 10).max(s.saturating_add(1))),
    };
    if let (Some(s), Some(h)) = (soft, hard) {
        if h <= s {
            let why = "must be larger than its rekey limit, or the SA expires before it is rekeyed";
            return Err(invalid(fields.1, (why, h.to_string())));
        }
    }
    Ok((soft, hard))
}

/// Parses an identity in strongSwan's syntax: an IP address, `@fqdn`, `user@domain`,
/// `fqdn:`/`email:`/`keyid:` prefixes, or a bare name (FQDN). `%any` is `None`.
pub fn parse_identity(text: &str) -> core::result::Result<Option<Identification>, &'static str> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty identity");
    }
    if text == "%any" {
        return Ok(None);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(Some(Identification::from_ip(ip)));
    }
    let id = |ty, s: &str| Some(Identification::new(ty, s.as_bytes().to_vec()));
    if let Some(rest) = text.strip_prefix("fqdn:") {
        return Ok(id(IdType::FQDN, rest));
    }
    if let Some(rest) = text.strip_prefix("email:").or_else(|| text.strip_prefix("rfc822:")) {
        return Ok(id(IdType::RFC822_ADDR, rest));
    }
    if let Some(rest) = text.strip_prefix("keyid:") {
        return Ok(id(IdType::KEY_ID, rest));
    }
    if let Some(rest) = text.strip_prefix("@#") {
        let bytes = decode_hex(rest).ok_or("@# needs hexadecimal key ID bytes")?;
        return Ok(Some(Identification::new(IdType::KEY_ID, bytes)));
    }
    if let Some(rest) = text.strip_prefix("@@") {
        return Ok(id(IdType::RFC822_ADDR, rest));
    }
    if let Some(rest) = text.strip_prefix('@') {
        return Ok(id(IdType::FQDN, rest));
    }
    if let Some(rest) = text.strip_prefix("asn1dn:") {
        let dn = rest.strip_prefix('#').and_then(decode_hex).ok_or("asn1dn: needs #hexadecimal DER")?;
        return Ok(Some(Identification::new(IdType::DER_ASN1_DN, dn)));
    }
    if text.contains('=') {
        return Ok(Some(Identification::new(IdType::DER_ASN1_DN, cert::name::parse(text)?)));
    }
    if text.contains('@') {
        return Ok(id(IdType::RFC822_ADDR, text));
    }
    Ok(id(IdType::FQDN, text))
}

/// Decodes hexadecimal text.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.strip_prefix("0x").unwrap_or(text);
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len() / 2).map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()).collect()
}

impl Connection {
    /// Validates one raw connection table.
    fn validate(
        name: String,
        c: RawConnection,
        read: &mut dyn FnMut(&str) -> std::io::Result<Vec<u8>>,
    ) -> Result<Self> {
        let invalid = |field, value: &str, why| Error::InvalidValue {
            connection: name.clone(),
            field,
            value: value.to_owned(),
            why,
        };
        let addrs = |field, list: &[String], any_ok: bool| -> Result<Vec<IpAddr>> {
            let mut out = Vec::new();
            for a in list {
                if a.trim() == "%any" {
                    if !any_ok {
                        return Err(invalid(field, a, "%any is not a local address"));
                    }
                    continue;
                }
                out.push(a.trim().parse().map_err(|_| invalid(field, a, "not an IP address"))?);
            }
            Ok(out)
        };
        let local_addrs = addrs("local_addrs", &c.local_addrs, true)?;
        let remote_addrs = addrs("remote_addrs", &c.remote_addrs, true)?;
        let proposal_texts: Vec<&str> = if c.proposals.is_empty() {
            vec!["default"]
        } else {
            c.proposals.iter().map(String::as_str).collect()
        };
        let proposals = IkeProposal::parse_list(&proposal_texts)?;
        let rekey_time = duration(&name, "rekey_time", c.rekey_time.as_ref(), DEFAULT_IKE_REKEY)?;
        let over_time = duration(&name, "over_time", c.over_time.as_ref(), rekey_time / 10)?;
        let dpd = duration(&name, "dpd_delay", c.dpd_delay.as_ref(), Duration::ZERO)?;
        let dpd_delay = (!dpd.is_zero()).then_some(dpd);
        if rekey_time.is_zero() {
            return Err(invalid("rekey_time", "0", "an IKE SA needs a positive rekey time"));
        }
        let unique = match c.unique.as_deref() {
            None | Some("no") => Unique::No,
            Some("never") => Unique::Never,
            Some(other) => {
                return Err(invalid(
                    "unique",
                    other,
                    "\"no\" or \"never\" (keep and replace are not supported)",
                ))
            }
        };

        let fragmentation = match c.fragmentation.as_deref() {
            None | Some("yes" | "force") => FragmentationPolicy::Yes,
            Some("accept") => FragmentationPolicy::Accept,
            Some("no") => FragmentationPolicy::No,
            Some(other) => {
                return Err(invalid("fragmentation", other, "\"yes\", \"accept\", \"force\" or \"no\""))
            }
        };

        let local = c.local.ok_or(Error::MissingField {
            connection: name.clone(),
            field: "local",
            why: "our authentication (auth = \"psk\", secret = \"name\")",
        })?;
        let remote = c.remote.unwrap_or(RawRemote { auth: None, id: None, cacerts: Vec::new() });
        let sides = sides::validate(&name, local, remote, &local_addrs, read)?;

        let mut children = Vec::new();
        for (child_name, ch) in c.children {
            children.push(ChildConfig::validate(&name, child_name, ch)?);
        }
        if children.is_empty() {
            return Err(Error::MissingField {
                connection: name,
                field: "children",
                why: "at least one child SA ([connections.NAME.children.CHILD])",
            });
        }
        Ok(Self {
            name,
            local_addrs,
            remote_addrs,
            proposals,
            rekey_time,
            over_time,
            dpd_delay,
            encap: c.encap,
            fragmentation,
            unique,
            local_id: sides.local_id,
            remote_id: sides.remote_id,
            local_auth: sides.local_auth,
            remote_auth: sides.remote_auth,
            local_certs: sides.local_certs,
            remote_cacerts: sides.remote_cacerts,
            secret: sides.secret,
            children,
        })
    }

    /// Whether a datagram between these addresses may belong to this connection.
    pub fn matches_addresses(&self, local: IpAddr, remote: IpAddr) -> bool {
        (self.local_addrs.is_empty() || self.local_addrs.contains(&local))
            && (self.remote_addrs.is_empty() || self.remote_addrs.contains(&remote))
    }

    /// Whether the peer's identity is acceptable for this connection (DNs compared as
    /// strongSwan does, see [`crate::cert`]).
    pub fn accepts_identity(&self, id: &Identification) -> bool {
        match &self.remote_id {
            None => true,
            Some(want) if want.ty == IdType::DER_ASN1_DN && id.ty == IdType::DER_ASN1_DN => {
                cert::name::equal_der(&want.data, &id.data)
            }
            Some(want) => want.ty == id.ty && want.data.eq_ignore_ascii_case(&id.data),
        }
    }

    /// Whether either side authenticates with signatures, so IKE_SA_INIT announces the
    /// hashes we verify (RFC 7427 §4).
    pub fn uses_signatures(&self) -> bool {
        self.local_auth.is_signature() || self.remote_auth.is_signature()
    }
}

impl ChildConfig {
    /// Validates one raw child table.
    fn validate(connection: &str, name: String, c: RawChild) -> Result<Self> {
        let label = format!("{connection}.{name}");
        let selectors = |field, list: &[String]| -> Result<Vec<TsSpec>> {
            if list.is_empty() {
                return Ok(vec![TsSpec::Dynamic { ip_protocol: 0, start_port: 0, end_port: u16::MAX }]);
            }
            list.iter()
                .map(|s| {
                    TsSpec::parse(s).map_err(|why| Error::InvalidValue {
                        connection: label.clone(),
                        field,
                        value: s.clone(),
                        why,
                    })
                })
                .collect()
        };
        let local_ts = selectors("local_ts", &c.local_ts)?;
        let remote_ts = selectors("remote_ts", &c.remote_ts)?;
        let texts: Vec<&str> = if c.esp_proposals.is_empty() {
            vec!["default"]
        } else {
            c.esp_proposals.iter().map(String::as_str).collect()
        };
        let esp_proposals = EspProposal::parse_list(&texts)?;
        let rekey_time = duration(&label, "rekey_time", c.rekey_time.as_ref(), DEFAULT_CHILD_REKEY)?;
        let life_time = duration(&label, "life_time", c.life_time.as_ref(), rekey_time + rekey_time / 10)?;
        if life_time <= rekey_time {
            return Err(Error::InvalidValue {
                connection: label,
                field: "life_time",
                value: format!("{}s", life_time.as_secs()),
                why: "must be longer than rekey_time, or the SA expires before it is rekeyed",
            });
        }
        let (rekey_bytes, life_bytes) =
            volume(&label, ("rekey_bytes", "life_bytes"), &c.rekey_bytes, &c.life_bytes)?;
        let (rekey_packets, life_packets) =
            volume(&label, ("rekey_packets", "life_packets"), &c.rekey_packets, &c.life_packets)?;
        let volume = VolumeLimits { rekey_bytes, life_bytes, rekey_packets, life_packets };
        Ok(Self { name, local_ts, remote_ts, esp_proposals, rekey_time, life_time, volume })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[connections.site-b]
local_addrs = ["198.18.0.1"]
remote_addrs = ["198.18.0.2"]
proposals = ["aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp3072"]
rekey_time = "4h"
dpd_delay = 30

[connections.site-b.local]
auth = "psk"
id = "site-a.cloister.test"
secret = "site-b-psk"

[connections.site-b.remote]
auth = "psk"
id = "@site-b.cloister.test"

[connections.site-b.children.net]
local_ts = ["198.18.1.0/24"]
remote_ts = ["198.18.2.0/24[tcp/443]", "2001:db8:2::/48"]
esp_proposals = ["aes256gcm16-esn", "aes128-sha256"]
rekey_time = "1h"
life_time = "66m"

[secrets.site-b-psk]
file = "/etc/cloister/site-b.psk.wrapped"
"#;

    #[test]
    fn the_example_parses_with_strongswan_meanings() {
        let config = Config::from_toml(EXAMPLE).unwrap();
        let c = config.connection("site-b").unwrap();
        assert_eq!(c.local_addrs, vec!["198.18.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(c.proposals.len(), 2);
        assert_eq!(c.rekey_time, Duration::from_secs(4 * 3600));
        assert_eq!(c.over_time, Duration::from_secs(1440));
        assert_eq!(c.dpd_delay, Some(Duration::from_secs(30)));
        assert_eq!(c.local_id, Identification::new(IdType::FQDN, b"site-a.cloister.test".to_vec()));
        assert_eq!(c.remote_id, Some(Identification::new(IdType::FQDN, b"site-b.cloister.test".to_vec())));
        assert_eq!(c.secret, "site-b-psk");
        let child = &c.children[0];
        assert_eq!(child.name, "net");
        assert_eq!(child.remote_ts.len(), 2);
        assert_eq!(child.esp_proposals[0].esn, vec![true]);
        assert_eq!(child.life_time, Duration::from_secs(66 * 60));
        assert_eq!(config.secrets[0].file.as_deref(), Some("/etc/cloister/site-b.psk.wrapped"));
    }

    #[test]
    fn defaults_follow_swanctl() {
        let config = Config::from_toml(
            r#"
[connections.c]
local_addrs = ["2001:db8::1"]
remote_addrs = ["%any"]
local = { auth = "psk", secret = "k" }
children.all = {}
"#,
        )
        .unwrap();
        let c = &config.connections[0];
        assert!(c.remote_addrs.is_empty());
        assert_eq!(c.local_id, Identification::from_ip("2001:db8::1".parse().unwrap()));
        assert_eq!(c.remote_id, None);
        assert_eq!(c.dpd_delay, None);
        assert!(c.proposals.len() >= 2, "default proposals");
        let child = &c.children[0];
        assert_eq!(child.rekey_time, Duration::from_secs(3600));
        assert_eq!(child.life_time, Duration::from_secs(3960));
        assert!(matches!(child.local_ts[0], TsSpec::Dynamic { .. }));
        assert!(c.matches_addresses("2001:db8::1".parse().unwrap(), "198.18.9.9".parse().unwrap()));
        assert!(!c.matches_addresses("2001:db8::2".parse().unwrap(), "198.18.9.9".parse().unwrap()));
    }

    #[test]
    fn identities_parse_like_strongswan() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let parse = |s: &str| parse_identity(s).unwrap().unwrap();
        assert_eq!(parse("198.18.0.1").ty, IdType::IPV4_ADDR);
        assert_eq!(parse("2001:db8::1").ty, IdType::IPV6_ADDR);
        assert_eq!(parse("moon.example").ty, IdType::FQDN);
        assert_eq!(parse("@moon.example").data, b"moon.example");
        assert_eq!(parse("fqdn:x").ty, IdType::FQDN);
        assert_eq!(parse("carol@example.org").ty, IdType::RFC822_ADDR);
        assert_eq!(parse("@@carol@example.org").data, b"carol@example.org");
        assert_eq!(parse("@#0a0b").data, vec![0x0a, 0x0b]);
        assert_eq!(parse("keyid:tenant-7").ty, IdType::KEY_ID);
        assert_eq!(parse_identity("%any"), Ok(None));
        let dn = parse("C=CH, O=example, CN=moon");
        assert_eq!(dn.ty, IdType::DER_ASN1_DN);
        assert_eq!(dn.data, parse(&("asn1dn:#".to_owned() + &hex(&dn.data))).data);
        assert!(parse_identity("CN=moon, XX=example").is_err());
        assert!(parse_identity("@#xyz").is_err());
        assert!(parse_identity(" ").is_err());
    }

    #[test]
    fn volume_limits_take_strongswan_units_and_default_the_hard_one() {
        let child = |extra: &str| {
            let text = EXAMPLE.replace("life_time = \"66m\"", &format!("life_time = \"66m\"\n{extra}"));
            Config::from_toml(&text).map(|c| c.connections[0].children[0].volume)
        };
        assert_eq!(child("").unwrap(), VolumeLimits::default());
        let v = child("rekey_bytes = \"512k\"\nrekey_packets = 1000").unwrap();
        assert_eq!((v.rekey_bytes, v.life_bytes), (Some(512 * 1024), Some(512 * 1024 + 512 * 1024 / 10)));
        assert_eq!((v.rekey_packets, v.life_packets), (Some(1000), Some(1100)));
        let v = child("rekey_bytes = \"1G\"\nlife_bytes = \"2g\"\nlife_packets = \"3M\"").unwrap();
        assert_eq!((v.rekey_bytes, v.life_bytes), (Some(1 << 30), Some(2 << 30)));
        assert_eq!((v.rekey_packets, v.life_packets), (None, Some(3 << 20)));
        assert_eq!(child("rekey_bytes = 0").unwrap().life_bytes, None, "0 is no limit");
        for bad in [
            r#"rekey_bytes = "12x""#,
            "rekey_bytes = \"100\"\nlife_bytes = \"100\"",
            r#"life_packets = "-1""#,
        ] {
            let e = child(bad).unwrap_err().to_string();
            assert!(e.contains("bytes") || e.contains("packets"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_take_strongswan_units() {
        let d = |s: &str| parse_duration(&RawDuration::Text(s.into())).map_err(|e| e.0);
        assert_eq!(d("90"), Ok(Duration::from_secs(90)));
        assert_eq!(d("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(d("4h"), Ok(Duration::from_secs(14400)));
        assert_eq!(d("1d"), Ok(Duration::from_secs(86400)));
        assert!(d("4w").is_err());
        assert!(d("h").is_err());
        assert!(d("-5").is_err());
        assert!(d("99999999999999999999d").is_err());
        assert!(d("3651d").is_err());
        assert!(parse_duration(&RawDuration::Seconds(u64::MAX)).is_err());
    }

    /// Replaces `from` with `to` in the example, asserting it was there.
    fn edit(from: &str, to: &str) -> String {
        assert!(EXAMPLE.contains(from), "{from}");
        EXAMPLE.replacen(from, to, 1)
    }

    #[test]
    fn bad_configurations_get_errors_naming_what_is_wrong() {
        let cases: Vec<(String, &str)> = vec![
            (edit("ecp256\"", "ecp999\""), "ecp999"),
            (edit("aes128-sha256", "aes128-md5"), "md5"),
            (edit("\"198.18.0.2\"", "\"198.18.0.x\""), "remote_addrs"),
            (edit("local_addrs = [\"198.18.0.1\"]", "local_addrs = [\"%any\", \"x\"]"), "local_addrs"),
            (edit("rekey_time = \"4h\"", "rekey_time = \"4 weeks\""), "rekey_time"),
            (edit("life_time = \"66m\"", "life_time = \"30m\""), "life_time"),
            (edit("198.18.1.0/24", "198.18.1.0/40"), "local_ts"),
            (edit("id = \"@site-b", "id = \"CN=x, Q=@site-b"), "remote.id"),
            (edit("auth = \"psk\"\nid = \"site-a", "auth = \"pubkey\"\nid = \"site-a"), "local.certs"),
            (edit("auth = \"psk\"\nid = \"site-a", "auth = \"eap\"\nid = \"site-a"), "local.auth"),
            (edit("auth = \"psk\"\nid = \"@site-b", "auth = \"pubkey\"\nid = \"@site-b"), "remote.cacerts"),
            (edit("secret = \"site-b-psk\"", "secret = \"other\""), "other"),
            (edit("secret = \"site-b-psk\"", "psk = \"hunter2\""), "unknown field"),
            (edit("dpd_delay = 30", "dpd_delay = true"), "configuration"),
            (edit("[connections.site-b.children.net]", "[connections.site-b.kids.net]"), "unknown field"),
        ];
        for (text, needle) in cases {
            let error = Config::from_toml(&text).unwrap_err().to_string();
            assert!(error.contains(needle), "expected {needle:?} in: {error}");
            assert!(!error.contains("hunter2"), "an inline secret must not be echoed: {error}");
        }
        let no_local = Config::from_toml("[connections.x]\nchildren.c = {}\n").unwrap_err();
        assert!(matches!(no_local, Error::MissingField { field: "local", .. }), "{no_local}");
        let no_children = Config::from_toml(
            "[connections.x]\nlocal_addrs=[\"198.18.0.1\"]\nlocal={auth=\"psk\",secret=\"k\"}\n",
        )
        .unwrap_err();
        assert!(matches!(no_children, Error::MissingField { field: "children", .. }), "{no_children}");
        let no_id = Config::from_toml("[connections.x]\nlocal={auth=\"psk\",secret=\"k\"}\nchildren.c={}\n")
            .unwrap_err();
        assert!(matches!(no_id, Error::MissingField { field: "local.id", .. }), "{no_id}");
        assert!(matches!(Config::from_toml("not = [toml"), Err(Error::Toml { .. })));
    }
}
