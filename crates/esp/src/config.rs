//! Static SAs and policies, like `ip xfrm state` / `ip xfrm policy`: a serde-deserializable
//! description (the binary reads it from TOML), validated into [`SaConfig`]s and
//! [`Policy`]s with errors that name the entry and field.
//!
//! ```toml
//! [[sa]]
//! name = "to-site-b"
//! direction = "out"                   # "in": we receive with it, "out": we send
//! spi = 0x00c0ffee
//! local = "198.18.0.1"                # our tunnel endpoint
//! remote = "198.18.0.2"
//! encryption = "aes-cbc-256"          # aes-gcm-16-128/256, chacha20-poly1305, aes-cbc-128/256
//! integrity = "hmac-sha2-256-128"     # CBC only: hmac-sha2-256-128/384-192/512-256
//! esn = true
//! udp_encap = { local_port = 4500, remote_port = 4500 }   # omit for raw ESP
//! local_ts = ["198.18.10.0/24"]
//! remote_ts = ["198.18.20.0/24[udp/53]"]
//! path_mtu = 1500                     # "out" only
//! replay_window = 4096                # "in" only; default: the data plane's (4096)
//! lifetime = { soft_seconds = 3000, hard_seconds = 3600, hard_bytes = 1_000_000_000 }
//! key = { wrapped = "434c5056..." }   # `cloister secret wrap --kind esp` output, hex (the data
//!                                     # plane also takes its path); in test builds also
//!                                     # { raw_encryption = "..", raw_integrity = ".." }
//!
//! [[policy]]
//! priority = 100                      # lower first; ties in file order
//! local = "198.18.10.0/24"
//! remote = "198.18.20.0/24"
//! protocol = "udp"                    # optional, default any
//! remote_ports = "53"                 # optional: "any", "53", "1024-65535"
//! action = "protect"                  # or "bypass", "discard"
//! sa = "to-site-b"                    # the outbound SA, for "protect"
//! ```
//!
//! Keys go to the enclave and nowhere else: [`ValidatedConfig::install`] hands each SA's key
//! material to a caller-supplied function that calls the enclave. [`KeyMaterial::Wrapped`]
//! is the production form: a blob the tenant wrapped for its enclave (`cloister secret wrap
//! --kind esp`), which `Enclave::esp_sa_install_wrapped` opens inside the enclave, bound to
//! the SA's direction, SPI and transform. Here it is hex; the data plane's file loader also
//! accepts the path of a blob file. Raw keys are accepted only by
//! `InlineEnclave::esp_sa_install_raw`, which exists in builds with the enclave's
//! `test-keys` feature (never in production).

use core::fmt;
use core::net::IpAddr;
use std::time::{Duration, Instant};

use enclave::{Cipher, EspSaHandle, Integ, Suite};
use serde::Deserialize;

use crate::error::{ConfigItem, Error, Result};
use crate::replay::DEFAULT_WINDOW;
use crate::sad::{Encapsulation, Lifetime, LifetimeLimits, OutboundSaId, SaConfig, Sad, DEFAULT_PATH_MTU};
use crate::selector::{parse_protocol, AddressRange, PortRange, TrafficSelector};
use crate::spd::{Policy, PolicyAction, PolicyId, PolicySelector, Spd};

/// A whole static configuration: `[[sa]]` and `[[policy]]` tables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticConfig {
    /// The SAs.
    #[serde(default, rename = "sa")]
    pub sas: Vec<StaticSa>,
    /// The policies.
    #[serde(default, rename = "policy")]
    pub policies: Vec<StaticPolicy>,
}

/// Which way an SA carries traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// We receive with it (our SPI).
    In,
    /// We send with it (the peer's SPI).
    Out,
}

/// UDP encapsulation ports (RFC 3948).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticUdp {
    /// Our port.
    #[serde(default = "nat_t_port")]
    pub local_port: u16,
    /// The peer's port.
    #[serde(default = "nat_t_port")]
    pub remote_port: u16,
}

fn nat_t_port() -> u16 {
    wire::udp_encap::PORT
}

/// Lifetime limits; absent fields are unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticLifetime {
    /// Soft byte limit.
    pub soft_bytes: Option<u64>,
    /// Hard byte limit.
    pub hard_bytes: Option<u64>,
    /// Soft packet limit.
    pub soft_packets: Option<u64>,
    /// Hard packet limit.
    pub hard_packets: Option<u64>,
    /// Soft time limit in seconds.
    pub soft_seconds: Option<u64>,
    /// Hard time limit in seconds.
    pub hard_seconds: Option<u64>,
}

/// Where an SA's keys come from: exactly one of the two forms.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticKey {
    /// A provisioning blob for the tenant's enclave, hex.
    pub wrapped: Option<String>,
    /// Test builds only: the encryption key (with the AEAD salt), hex.
    pub raw_encryption: Option<String>,
    /// Test builds only: the integrity key (CBC suites), hex.
    pub raw_integrity: Option<String>,
}

impl fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material, not even in a test build's logs.
        f.debug_struct("StaticKey")
            .field("wrapped", &self.wrapped.as_ref().map(|w| w.len() / 2))
            .field("raw", &self.raw_encryption.is_some())
            .finish()
    }
}

/// One `[[sa]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticSa {
    /// A unique name, which policies refer to.
    pub name: String,
    /// In or out.
    pub direction: Direction,
    /// The SPI.
    pub spi: u32,
    /// Our tunnel endpoint address.
    pub local: String,
    /// The peer's tunnel endpoint address.
    pub remote: String,
    /// The encryption transform.
    pub encryption: String,
    /// The integrity transform (AES-CBC only).
    #[serde(default)]
    pub integrity: Option<String>,
    /// Extended Sequence Numbers.
    #[serde(default)]
    pub esn: bool,
    /// ESP-in-UDP ports; raw ESP when absent.
    #[serde(default)]
    pub udp_encap: Option<StaticUdp>,
    /// Traffic selectors on our side.
    pub local_ts: Vec<String>,
    /// Traffic selectors on the peer's side.
    pub remote_ts: Vec<String>,
    /// Path MTU ("out").
    #[serde(default)]
    pub path_mtu: Option<u16>,
    /// Anti-replay window ("in").
    #[serde(default)]
    pub replay_window: Option<u32>,
    /// Lifetime limits.
    #[serde(default)]
    pub lifetime: StaticLifetime,
    /// The keys.
    pub key: StaticKey,
}

/// One `[[policy]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticPolicy {
    /// Lower values are consulted first.
    #[serde(default)]
    pub priority: u32,
    /// Addresses on our side.
    pub local: String,
    /// Addresses on the peer's side.
    pub remote: String,
    /// IP protocol, by name or number.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Local ports.
    #[serde(default)]
    pub local_ports: Option<String>,
    /// Remote ports.
    #[serde(default)]
    pub remote_ports: Option<String>,
    /// `protect`, `bypass` or `discard`.
    pub action: String,
    /// The outbound SA's name, for `protect`.
    #[serde(default)]
    pub sa: Option<String>,
}

/// Key material on its way into the enclave. Its `Debug` shows lengths only.
#[derive(Clone, PartialEq, Eq)]
pub enum KeyMaterial {
    /// A provisioning blob (opaque to the untrusted side).
    Wrapped(Vec<u8>),
    /// Raw keys: test builds only.
    Raw {
        /// Encryption key, with the salt for AEADs.
        encryption: Vec<u8>,
        /// Integrity key (empty for AEADs).
        integrity: Vec<u8>,
    },
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Wrapped(b) => write!(f, "Wrapped({} bytes)", b.len()),
            Self::Raw { encryption, integrity } => {
                write!(f, "Raw({} + {} bytes)", encryption.len(), integrity.len())
            }
        }
    }
}

/// What the key-installing function gets for one SA.
#[derive(Debug, Clone, Copy)]
pub struct KeyRequest<'a> {
    /// The SA's name.
    pub name: &'a str,
    /// The SPI.
    pub spi: u32,
    /// Inbound or outbound.
    pub direction: Direction,
    /// ESN.
    pub esn: bool,
    /// The transform.
    pub suite: Suite,
    /// The keys.
    pub keys: &'a KeyMaterial,
}

/// One SA ready to install: its configuration (handle still unset) and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedSa {
    /// The name.
    pub name: String,
    /// In or out.
    pub direction: Direction,
    /// Everything but the enclave handle.
    pub config: SaConfig,
    /// The keys.
    pub keys: KeyMaterial,
    /// Whether the entry set its own `replay_window`; if not, [`ValidatedConfig::install`]
    /// gives an inbound SA the window it is handed (the data plane's default).
    pub own_window: bool,
}

/// One policy ready to install; `sa` is the index of its outbound SA in `sas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedPolicy {
    /// Priority.
    pub priority: u32,
    /// Selector.
    pub selector: PolicySelector,
    /// Protect (with the SA at this index of [`ValidatedConfig::sas`]), bypass or discard.
    pub action: ValidatedAction,
}

/// A policy action whose SA is named by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidatedAction {
    /// Protect with `sas[i]`.
    Protect(usize),
    /// Bypass.
    Bypass,
    /// Discard.
    Discard,
}

/// A configuration that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedConfig {
    /// The SAs, in file order.
    pub sas: Vec<ValidatedSa>,
    /// The policies, in file order.
    pub policies: Vec<ValidatedPolicy>,
}

/// What [`ValidatedConfig::install`] put where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// Inbound SAs by SPI, with their enclave handles.
    pub inbound: Vec<(u32, EspSaHandle)>,
    /// Outbound SAs, by name, with their enclave handles.
    pub outbound: Vec<(String, OutboundSaId, EspSaHandle)>,
    /// The policies.
    pub policies: Vec<PolicyId>,
}

fn cipher(name: &str) -> Option<Cipher> {
    Some(match name {
        "aes-gcm-16-128" | "aes128gcm16" => Cipher::AesGcm16_128,
        "aes-gcm-16-256" | "aes256gcm16" => Cipher::AesGcm16_256,
        "chacha20-poly1305" | "chacha20poly1305" => Cipher::ChaCha20Poly1305,
        "aes-cbc-128" | "aes128" => Cipher::AesCbc128,
        "aes-cbc-256" | "aes256" => Cipher::AesCbc256,
        _ => return None,
    })
}

fn integ(name: &str) -> Option<Integ> {
    Some(match name {
        "hmac-sha2-256-128" | "sha256" => Integ::HmacSha256_128,
        "hmac-sha2-384-192" | "sha384" => Integ::HmacSha384_192,
        "hmac-sha2-512-256" | "sha512" => Integ::HmacSha512_256,
        _ => return None,
    })
}

/// The transform an SA's `encryption` and `integrity` names (as in `[[sa]]`) stand for, or
/// which of the two fields is wrong and why.
pub fn suite_by_name(
    encryption: &str,
    integrity: Option<&str>,
) -> core::result::Result<Suite, (&'static str, &'static str)> {
    let c = cipher(encryption).ok_or(("encryption", "unknown transform"))?;
    match (c.is_aead(), integrity) {
        (true, None) => Ok(Suite::aead(c)),
        (true, Some(_)) => Err(("integrity", "an AEAD takes no integrity transform")),
        (false, Some(i)) => Ok(Suite::cbc(c, integ(i).ok_or(("integrity", "unknown transform"))?)),
        (false, None) => Err(("integrity", "AES-CBC needs an integrity transform")),
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.as_bytes().chunks(2).map(|p| Some(digit(*p.first()?)? << 4 | digit(*p.get(1)?)?)).collect()
}

impl StaticSa {
    fn validate(&self, item: ConfigItem) -> Result<ValidatedSa> {
        let bad = |field, why| Error::Config { item, field, why };
        if self.name.is_empty() {
            return Err(bad("name", "must not be empty"));
        }
        if self.spi == 0 {
            return Err(bad("spi", "SPI 0 is reserved (RFC 4303 §2.1)"));
        }
        let local: IpAddr = self.local.trim().parse().map_err(|_| bad("local", "not an IP address"))?;
        let remote: IpAddr = self.remote.trim().parse().map_err(|_| bad("remote", "not an IP address"))?;
        if local.is_ipv6() != remote.is_ipv6() {
            return Err(bad("remote", "not of the same address family as local"));
        }
        let suite = suite_by_name(&self.encryption, self.integrity.as_deref())
            .map_err(|(field, why)| bad(field, why))?;
        let selectors = |list: &[String], field| -> Result<Vec<TrafficSelector>> {
            if list.is_empty() {
                return Err(bad(field, "at least one selector"));
            }
            list.iter()
                .map(|s| {
                    s.parse::<TrafficSelector>()
                        .map_err(|_| bad(field, "not a selector like 198.18.0.0/24[udp/53]"))
                })
                .collect()
        };
        let local_selectors = selectors(&self.local_ts, "local_ts")?;
        let remote_selectors = selectors(&self.remote_ts, "remote_ts")?;
        let keys = match (&self.key.wrapped, &self.key.raw_encryption, &self.key.raw_integrity) {
            (Some(w), None, None) => KeyMaterial::Wrapped(hex(w).ok_or(bad("key.wrapped", "not hex"))?),
            (None, Some(e), i) => {
                let encryption = hex(e).ok_or(bad("key.raw_encryption", "not hex"))?;
                let integrity = match i {
                    Some(i) => hex(i).ok_or(bad("key.raw_integrity", "not hex"))?,
                    None => Vec::new(),
                };
                if encryption.len() != suite.cipher.keymat_len() {
                    return Err(bad(
                        "key.raw_encryption",
                        "wrong length for the transform (AEADs add a 4-byte salt)",
                    ));
                }
                if integrity.len() != suite.integ_key_len() {
                    return Err(bad("key.raw_integrity", "wrong length for the integrity transform"));
                }
                KeyMaterial::Raw { encryption, integrity }
            }
            _ => return Err(bad("key", "give either wrapped or raw_encryption (+ raw_integrity)")),
        };
        let l = &self.lifetime;
        let secs = |s: Option<u64>| s.map(Duration::from_secs);
        let lifetime = Lifetime {
            soft: LifetimeLimits { bytes: l.soft_bytes, packets: l.soft_packets, time: secs(l.soft_seconds) },
            hard: LifetimeLimits { bytes: l.hard_bytes, packets: l.hard_packets, time: secs(l.hard_seconds) },
        };
        let encapsulation = match self.udp_encap {
            Some(u) => Encapsulation::Udp { local_port: u.local_port, remote_port: u.remote_port },
            None => Encapsulation::Esp,
        };
        match self.direction {
            Direction::In if self.path_mtu.is_some() => return Err(bad("path_mtu", "only for \"out\" SAs")),
            Direction::Out if self.replay_window.is_some() => {
                return Err(bad("replay_window", "only for \"in\" SAs"))
            }
            _ => {}
        }
        let config = SaConfig {
            spi: self.spi,
            handle: EspSaHandle(0),
            suite,
            esn: self.esn,
            local,
            remote,
            encapsulation,
            local_selectors,
            remote_selectors,
            lifetime,
            path_mtu: self.path_mtu.unwrap_or(DEFAULT_PATH_MTU),
            replay_window: self.replay_window.unwrap_or(DEFAULT_WINDOW),
        };
        // The SAD's own checks (window range, MTU floor, soft <= hard), named for this entry.
        let checked = match self.direction {
            Direction::In => config.check_inbound(),
            Direction::Out => config.check_outbound(),
        };
        checked.map_err(|e| match e {
            Error::InvalidSa { field, why } => bad(field, why),
            other => other,
        })?;
        let own_window = self.replay_window.is_some();
        Ok(ValidatedSa { name: self.name.clone(), direction: self.direction, config, keys, own_window })
    }
}

impl StaticPolicy {
    fn validate(&self, item: ConfigItem, sas: &[ValidatedSa]) -> Result<ValidatedPolicy> {
        let bad = |field, why| Error::Config { item, field, why };
        let local: AddressRange =
            self.local.parse().map_err(|_| bad("local", "not an address, range or prefix"))?;
        let remote: AddressRange =
            self.remote.parse().map_err(|_| bad("remote", "not an address, range or prefix"))?;
        if local.is_ipv6() != remote.is_ipv6() {
            return Err(bad("remote", "not of the same address family as local"));
        }
        let protocol = match &self.protocol {
            Some(p) => parse_protocol(p).map_err(|_| bad("protocol", "not a protocol name or number"))?,
            None => 0,
        };
        let ports = |p: &Option<String>, field| match p {
            Some(p) => p.parse::<PortRange>().map_err(|_| bad(field, "not \"any\", a port or a range")),
            None => Ok(PortRange::ANY),
        };
        let selector = PolicySelector {
            local,
            remote,
            protocol,
            local_ports: ports(&self.local_ports, "local_ports")?,
            remote_ports: ports(&self.remote_ports, "remote_ports")?,
        };
        let action = match (self.action.as_str(), &self.sa) {
            ("protect", Some(name)) => {
                let i = sas
                    .iter()
                    .position(|s| s.name == *name && s.direction == Direction::Out)
                    .ok_or(bad("sa", "names no \"out\" SA of this file"))?;
                let sa = sas.get(i).ok_or(bad("sa", "names no \"out\" SA of this file"))?;
                if sa.config.local_selectors.first().map(|t| t.addresses.is_ipv6()) != Some(local.is_ipv6()) {
                    return Err(bad("sa", "the SA's selectors are of another address family"));
                }
                ValidatedAction::Protect(i)
            }
            ("protect", None) => return Err(bad("sa", "\"protect\" needs an SA")),
            ("bypass" | "discard", Some(_)) => return Err(bad("sa", "only \"protect\" takes an SA")),
            ("bypass", None) => ValidatedAction::Bypass,
            ("discard", None) => ValidatedAction::Discard,
            _ => return Err(bad("action", "not protect, bypass or discard")),
        };
        Ok(ValidatedPolicy { priority: self.priority, selector, action })
    }
}

impl StaticConfig {
    /// Checks every entry; the first error names its entry and field.
    pub fn validate(&self) -> Result<ValidatedConfig> {
        let mut sas: Vec<ValidatedSa> = Vec::with_capacity(self.sas.len());
        for (i, sa) in self.sas.iter().enumerate() {
            let item = ConfigItem::Sa(i);
            let v = sa.validate(item)?;
            if sas.iter().any(|s| s.name == v.name) {
                return Err(Error::Config { item, field: "name", why: "another SA has this name" });
            }
            if v.direction == Direction::In
                && sas.iter().any(|s| s.direction == Direction::In && s.config.spi == v.config.spi)
            {
                return Err(Error::Config { item, field: "spi", why: "another \"in\" SA has this SPI" });
            }
            sas.push(v);
        }
        let policies = self
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| p.validate(ConfigItem::Policy(i), &sas))
            .collect::<Result<Vec<_>>>()?;
        Ok(ValidatedConfig { sas, policies })
    }
}

impl ValidatedConfig {
    /// Installs the keys (through `install_keys`, which calls the enclave and returns the
    /// handle), then the SAs and the policies. On an error, what was installed before stays
    /// and is reported by nothing: start from empty tables, or tear them down. Inbound SAs
    /// whose entry set no `replay_window` get `default_window`.
    pub fn install<F>(
        &self,
        sad: &mut Sad,
        spd: &mut Spd,
        now: Instant,
        default_window: u32,
        mut install_keys: F,
    ) -> Result<Installed>
    where
        F: FnMut(&KeyRequest<'_>) -> core::result::Result<EspSaHandle, enclave::Error>,
    {
        let mut done = Installed::default();
        let mut ids: Vec<Option<OutboundSaId>> = Vec::with_capacity(self.sas.len());
        for (i, sa) in self.sas.iter().enumerate() {
            let item = ConfigItem::Sa(i);
            let request = KeyRequest {
                name: &sa.name,
                spi: sa.config.spi,
                direction: sa.direction,
                esn: sa.config.esn,
                suite: sa.config.suite,
                keys: &sa.keys,
            };
            let handle = install_keys(&request).map_err(|source| Error::KeyInstall { item, source })?;
            let mut config = SaConfig { handle, ..sa.config.clone() };
            if sa.direction == Direction::In && !sa.own_window {
                config.replay_window = default_window;
            }
            let named = |e| match e {
                Error::InvalidSa { field, why } => Error::Config { item, field, why },
                other => other,
            };
            match sa.direction {
                Direction::In => {
                    sad.add_inbound(config, now).map_err(named)?;
                    done.inbound.push((sa.config.spi, handle));
                    ids.push(None);
                }
                Direction::Out => {
                    let id = sad.add_outbound(config, now).map_err(named)?;
                    done.outbound.push((sa.name.clone(), id, handle));
                    ids.push(Some(id));
                }
            }
        }
        for (i, p) in self.policies.iter().enumerate() {
            let action = match p.action {
                ValidatedAction::Protect(sa) => {
                    PolicyAction::Protect(ids.get(sa).copied().flatten().ok_or(Error::Config {
                        item: ConfigItem::Policy(i),
                        field: "sa",
                        why: "names no \"out\" SA of this file",
                    })?)
                }
                ValidatedAction::Bypass => PolicyAction::Bypass,
                ValidatedAction::Discard => PolicyAction::Discard,
            };
            done.policies.push(spd.insert(Policy { priority: p.priority, selector: p.selector, action }));
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [[sa]]
        name = "to-b"
        direction = "out"
        spi = 0x00c0ffee
        local = "198.18.0.1"
        remote = "198.18.0.2"
        encryption = "aes-cbc-256"
        integrity = "hmac-sha2-256-128"
        esn = true
        udp_encap = { local_port = 4500, remote_port = 4501 }
        local_ts = ["198.18.10.0/24"]
        remote_ts = ["198.18.20.0/24", "198.18.21.0/24[udp/53]"]
        path_mtu = 1400
        lifetime = { soft_seconds = 3000, hard_seconds = 3600, hard_bytes = 1_000_000 }
        key = { raw_encryption = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", raw_integrity = "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" }

        [[sa]]
        name = "from-b"
        direction = "in"
        spi = 0x00beef01
        local = "2001:db8::1"
        remote = "2001:db8::2"
        encryption = "aes-gcm-16-128"
        local_ts = ["2001:db8:a::/48"]
        remote_ts = ["2001:db8:b::/48"]
        replay_window = 2048
        key = { wrapped = "434c5056" }

        [[policy]]
        priority = 10
        local = "198.18.10.0/24"
        remote = "198.18.20.0/23"
        action = "protect"
        sa = "to-b"

        [[policy]]
        local = "198.18.10.0/24"
        remote = "198.18.0.0/15"
        protocol = "tcp"
        remote_ports = "22"
        action = "bypass"
    "#;

    fn parse(s: &str) -> StaticConfig {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn example_parses_and_validates() {
        let c = parse(EXAMPLE).validate().unwrap();
        assert_eq!(c.sas.len(), 2);
        let out = &c.sas[0].config;
        assert_eq!(out.spi, 0xc0ffee);
        assert!(out.esn);
        assert_eq!(out.encapsulation, Encapsulation::Udp { local_port: 4500, remote_port: 4501 });
        assert_eq!(out.path_mtu, 1400);
        assert_eq!(out.remote_selectors[1].protocol, 17);
        assert_eq!(out.lifetime.hard.time, Some(Duration::from_secs(3600)));
        assert_eq!(c.sas[1].config.replay_window, 2048);
        assert_eq!(c.sas[1].keys, KeyMaterial::Wrapped(vec![0x43, 0x4c, 0x50, 0x56]));
        assert_eq!(format!("{:?}", c.sas[0].keys), "Raw(32 + 32 bytes)");
        assert_eq!(c.policies[0].action, ValidatedAction::Protect(0));
        assert_eq!(c.policies[1].selector.protocol, 6);
        assert_eq!(c.policies[1].priority, 0);
    }

    fn error_of(edit: &dyn Fn(&mut StaticConfig)) -> Error {
        let mut c = parse(EXAMPLE);
        edit(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn errors_name_the_entry_and_field() {
        let field = |e: Error| match e {
            Error::Config { item, field, .. } => format!("{item}.{field}"),
            other => panic!("{other:?}"),
        };
        assert_eq!(field(error_of(&|c| c.sas[0].spi = 0)), "sa[0].spi");
        assert_eq!(field(error_of(&|c| c.sas[1].local = "nope".into())), "sa[1].local");
        assert_eq!(field(error_of(&|c| c.sas[0].remote = "2001:db8::2".into())), "sa[0].remote");
        assert_eq!(field(error_of(&|c| c.sas[0].encryption = "des".into())), "sa[0].encryption");
        assert_eq!(field(error_of(&|c| c.sas[0].integrity = None)), "sa[0].integrity");
        assert_eq!(field(error_of(&|c| c.sas[1].integrity = Some("sha256".into()))), "sa[1].integrity");
        assert_eq!(
            field(error_of(&|c| c.sas[0].remote_ts = vec!["198.18.0.0/99".into()])),
            "sa[0].remote_ts"
        );
        assert_eq!(field(error_of(&|c| c.sas[0].local_ts.clear())), "sa[0].local_ts");
        assert_eq!(
            field(error_of(&|c| c.sas[0].key.raw_encryption = Some("0011".into()))),
            "sa[0].key.raw_encryption"
        );
        assert_eq!(field(error_of(&|c| c.sas[1].key.raw_encryption = Some("00".into()))), "sa[1].key");
        assert_eq!(field(error_of(&|c| c.sas[1].key.wrapped = Some("zz".into()))), "sa[1].key.wrapped");
        assert_eq!(field(error_of(&|c| c.sas[1].replay_window = Some(5))), "sa[1].replay_window");
        assert_eq!(field(error_of(&|c| c.sas[0].replay_window = Some(64))), "sa[0].replay_window");
        assert_eq!(field(error_of(&|c| c.sas[0].path_mtu = Some(100))), "sa[0].path_mtu");
        assert_eq!(field(error_of(&|c| c.sas[0].lifetime.soft_seconds = Some(9999))), "sa[0].lifetime");
        assert_eq!(field(error_of(&|c| c.sas[1].name = "to-b".into())), "sa[1].name");
        assert_eq!(field(error_of(&|c| c.policies[0].sa = Some("from-b".into()))), "policy[0].sa");
        assert_eq!(field(error_of(&|c| c.policies[0].sa = None)), "policy[0].sa");
        assert_eq!(field(error_of(&|c| c.policies[1].sa = Some("to-b".into()))), "policy[1].sa");
        assert_eq!(field(error_of(&|c| c.policies[1].action = "allow".into())), "policy[1].action");
        assert_eq!(
            field(error_of(&|c| c.policies[1].remote_ports = Some("9-1".into()))),
            "policy[1].remote_ports"
        );
        assert_eq!(field(error_of(&|c| c.policies[1].protocol = Some("quic".into()))), "policy[1].protocol");
        assert_eq!(field(error_of(&|c| c.policies[0].remote = "2001:db8::/32".into())), "policy[0].remote");
        let e = error_of(&|c| c.sas[0].spi = 0);
        assert_eq!(e.to_string(), "sa[0].spi: SPI 0 is reserved (RFC 4303 §2.1)");
    }

    #[test]
    fn unknown_keys_are_refused_by_the_parser() {
        let e = toml::from_str::<StaticConfig>("[[sa]]\nname = \"x\"\nspii = 1\n").unwrap_err();
        assert!(e.to_string().contains("spii"), "{e}");
    }

    #[test]
    fn inbound_sas_without_their_own_window_take_the_one_install_is_handed() -> Result<()> {
        let mut c = parse(EXAMPLE);
        c.sas[1].replay_window = None;
        let c = c.validate()?;
        assert!(!c.sas[1].own_window);
        let mut sad = Sad::new();
        c.install(&mut sad, &mut Spd::new(), Instant::now(), 16384, |r| Ok(EspSaHandle(r.spi)))?;
        assert_eq!(sad.inbound(0xbeef01).map(|s| s.runtime().window().size()), Some(16384));
        Ok(())
    }

    #[test]
    fn install_provisions_keys_and_links_policies() {
        let c = parse(EXAMPLE).validate().unwrap();
        let (mut sad, mut spd) = (Sad::new(), Spd::new());
        let mut seen = Vec::new();
        let done = c
            .install(&mut sad, &mut spd, Instant::now(), 16384, |r| {
                seen.push((r.name.to_owned(), r.spi, r.direction, matches!(r.keys, KeyMaterial::Raw { .. })));
                Ok(EspSaHandle(0x100 + r.spi))
            })
            .unwrap();
        assert_eq!(
            seen,
            [
                ("to-b".to_owned(), 0xc0ffee, Direction::Out, true),
                ("from-b".to_owned(), 0xbeef01, Direction::In, false)
            ]
        );
        assert_eq!(done.inbound, [(0xbeef01, EspSaHandle(0x100 + 0xbeef01))]);
        let id = done.outbound[0].1;
        assert_eq!(sad.outbound(id).unwrap().config().handle, EspSaHandle(0x100 + 0xc0ffee));
        assert_eq!(spd.len(), 2);
        assert!(spd.iter().any(|(_, p)| p.action == PolicyAction::Protect(id)));
        // The entry's own window wins over the one install is handed.
        assert_eq!(sad.inbound(0xbeef01).map(|s| s.runtime().window().size()), Some(2048));
        // An enclave refusal is reported for the SA that caused it.
        let e = c
            .install(&mut Sad::new(), &mut Spd::new(), Instant::now(), DEFAULT_WINDOW, |_| {
                Err(enclave_core::Error::Unsupported { what: "wrapped ESP keys", value: 0 })
            })
            .unwrap_err();
        assert!(matches!(e, Error::KeyInstall { item: ConfigItem::Sa(0), .. }));
    }
}
