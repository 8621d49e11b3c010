//! The data plane's configuration file: a `[dataplane]` table (TUN device, routes, workers)
//! next to the ESP core's static `[[sa]]` and `[[policy]]` tables
//! ([`esp::config::StaticConfig`], documented there).
//!
//! ```toml
//! [dataplane]
//! tun = "cloister0"                   # the TUN device to create
//! tun_mtu = 1376                      # 1280 to 9000; default: 1500 less the largest ESP
//!                                     # overhead (121)
//! tun_addresses = ["198.18.10.1/32"]  # optional
//! routes = ["198.18.20.0/24", "2001:db8:b::/48"]   # sent into the TUN device
//! workers = 2                         # default: the available cores
//! batch = 64                          # packets per enclave crossing, at most 256
//! coalesce_us = 20                    # nap under sustained traffic (0: never), at most 1000
//! offload = true                      # TUN TSO/USO/checksum and UDP GSO/GRO, where accepted
//! spread_inbound = false              # ESP-in-UDP to workers by sequence number, not by peer
//! replay_window = 4096                # inbound SAs' anti-replay window in packets, 32 to
//!                                     # 65504; default 4096, 16384 with spread_inbound
//!
//! [[sa]]
//! # ... see esp::config
//! ```
//!
//! The sockets follow from the SAs: one UDP socket per worker for each distinct local
//! address and port of the ESP-in-UDP SAs (they are the listen addresses), and one raw ESP
//! socket per address family that raw-ESP SAs use. Raw keys (`key = { raw_encryption = .. }`)
//! are for tests and debugging only; error messages never quote values from the file.
//!
//! `key = { wrapped = "..." }` is the production form: the blob `cloister secret wrap --kind
//! esp` made, either inline as hex or as the path of the file holding it (relative to the
//! configuration file's directory; binary as written by `cloister secret wrap`, or hex). A
//! value made only of hex digits is the blob itself; write `./name` for a file whose name is
//! all hex digits.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use cio::netdev::Prefix;
use esp::config::{KeyMaterial, StaticConfig, StaticPolicy, StaticSa, ValidatedConfig};
use esp::Encapsulation;
use serde::Deserialize;

use crate::Error;

/// Transform names as `[[sa]]` writes them, for tools that name an SA's transform too.
pub use esp::config::suite_by_name;

/// The ESP overhead the default TUN MTU leaves room for: outer IPv6 (40), UDP (8), ESP
/// header (8), a CBC IV (16), up to 15 bytes of padding, the trailer (2) and a 32-byte ICV.
pub const MAX_OVERHEAD: u16 = 40 + 8 + 8 + 16 + 15 + 2 + 32;
/// The default TUN MTU: a 1500-byte path less [`MAX_OVERHEAD`], rounded down to 8.
pub const DEFAULT_TUN_MTU: u16 = (1500 - MAX_OVERHEAD) / 8 * 8;
/// The smallest TUN MTU: IPv6 needs 1280 on every link (RFC 8200 §5).
pub const MIN_TUN_MTU: u16 = 1280;
/// The largest TUN MTU: a jumbo frame (9000, the largest MTU cloud networks offer). Where the
/// SA's path MTU is smaller, the ESP core fragments an IPv4 packet without DF before
/// protecting it and answers others with an ICMP "too big" (RFC 4301 §8).
pub const MAX_TUN_MTU: u16 = 9000;
/// The default coalescing nap: a stream of 64-byte packets went from batches of 3.6 (220k
/// packets/s) to 35 (261k) with it (docs/bench-esp-e2e.md); well below a WAN round trip.
pub const DEFAULT_COALESCE_US: u32 = 20;
/// The longest coalescing nap allowed.
pub const MAX_COALESCE_US: u32 = 1000;
/// The largest batch (the enclave's default descriptor limit).
pub const MAX_BATCH: usize = 256;
/// The default anti-replay window with `spread_inbound`: every worker decapsulates one
/// SA, so a worker that loses its core with a batch in hand falls behind by what all the
/// others did meanwhile. At 16 workers, 4096 dropped 0.04% of the packets as replays
/// (docs/dataplane.md); four times as deep, for 8 KiB per inbound SA instead of 2.
pub const SPREAD_WINDOW: u32 = 16_384;

/// The whole file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    dataplane: Option<RawSettings>,
    #[serde(default)]
    sa: Vec<StaticSa>,
    #[serde(default)]
    policy: Vec<StaticPolicy>,
}

/// The `[dataplane]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    tun: Option<String>,
    #[serde(default)]
    tun_netns: Option<String>,
    #[serde(default)]
    tun_mtu: Option<u16>,
    #[serde(default)]
    tun_addresses: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    workers: Option<usize>,
    #[serde(default)]
    batch: Option<usize>,
    #[serde(default)]
    coalesce_us: Option<u32>,
    #[serde(default)]
    offload: Option<bool>,
    #[serde(default)]
    spread_inbound: Option<bool>,
    #[serde(default)]
    replay_window: Option<u32>,
    #[serde(default)]
    listen: Vec<String>,
}

/// The `[dataplane]` settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The TUN device's name.
    pub tun: String,
    /// The network namespace (an `ip netns` name) the TUN device, its addresses and routes
    /// live in; `None`: the data plane's own. A tenant's cloud side in its own namespace
    /// lets tenants use the same private addresses.
    pub tun_netns: Option<String>,
    /// Its MTU.
    pub tun_mtu: u16,
    /// Addresses to give it.
    pub tun_addresses: Vec<Prefix>,
    /// Prefixes routed into it.
    pub routes: Vec<Prefix>,
    /// Worker threads; `None`: the available cores.
    pub workers: Option<usize>,
    /// Packets read per batch.
    pub batch: usize,
    /// Microseconds a worker waits before its next round when its last two rounds found
    /// traffic but no full batch, so that batches fill up under load; 0: never waits.
    /// Only packets arriving during such a wait are delayed, by at most this long.
    pub coalesce_us: u32,
    /// Ask the kernel for offloads.
    pub offload: bool,
    /// Steer arriving ESP-in-UDP packets to the workers by their ESP sequence number, in
    /// runs of 32 (`cio::udp::UdpSocket::steer_by_esp_sequence`), so that one peer's SA is
    /// decapsulated by every worker. Off: the kernel hashes addresses and ports, and one
    /// peer stays on one worker (its packets never reorder, but one core decapsulates all
    /// of a single tunnel's traffic).
    pub spread_inbound: bool,
    /// The anti-replay window of inbound SAs that set none themselves (those from IKE, and
    /// static ones without `replay_window`); `None`: [`esp::DEFAULT_WINDOW`], or
    /// [`SPREAD_WINDOW`] where inbound traffic is spread over several workers.
    pub replay_window: Option<u32>,
    /// ESP-in-UDP endpoints to listen on even before any SA uses them (a gateway whose SAs
    /// come from IKE); raw ESP is also received for their address families.
    pub listen: Vec<SocketAddr>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            tun: "cloister0".to_owned(),
            tun_netns: None,
            tun_mtu: DEFAULT_TUN_MTU,
            tun_addresses: Vec::new(),
            routes: Vec::new(),
            workers: None,
            batch: 64,
            coalesce_us: DEFAULT_COALESCE_US,
            offload: true,
            spread_inbound: false,
            replay_window: None,
            listen: Vec::new(),
        }
    }
}

/// A checked configuration: settings and the validated SAs and policies (with their keys,
/// which go to the enclave at start and nowhere else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The `[dataplane]` table.
    pub settings: Settings,
    /// The SAs and policies.
    pub esp: ValidatedConfig,
}

/// A toml error as a message that quotes nothing from the file (values could be keys):
/// the position, and the parser's message with quoted values and numbers elided.
fn redacted(text: &str, e: &toml::de::Error) -> String {
    let at = e
        .span()
        .map(|s| {
            let before = text.get(..s.start).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: ")
        })
        .unwrap_or_default();
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut held = String::new();
    for c in e.message().chars() {
        match quote {
            None if c == '"' || c == '`' || c == '\'' => {
                quote = Some(c);
                held.clear();
            }
            None => out.push(c),
            Some(q) if c == q => {
                // Names of fields are useful and harmless; anything with digits, or any
                // string value, is elided.
                let is_name = q == '`' && held.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_');
                if is_name {
                    out.push('`');
                    out.push_str(&held);
                    out.push('`');
                } else {
                    out.push_str("<elided>");
                }
                quote = None;
            }
            Some(_) => held.push(c),
        }
    }
    if quote.is_some() {
        out.push_str("<elided>");
    }
    format!("{at}{}", out.trim_end())
}

fn prefixes(list: &[String], field: &'static str) -> Result<Vec<Prefix>, Error> {
    list.iter()
        .map(|s| {
            s.parse::<Prefix>().map_err(|_| Error::Config {
                field,
                why: "not an address or prefix like 198.18.0.0/24".into(),
            })
        })
        .collect()
}

/// Whether a `key.wrapped` value is the blob in hex (else it names a file).
fn is_hex(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Longest blob file read: a provisioning blob of ESP keys is under 200 bytes.
const MAX_BLOB_FILE: u64 = 64 << 10;

/// Reads the blob file a `key.wrapped` value names (relative to `dir`) and puts the blob
/// there in hex. Errors name the SA and field, never the path or the contents.
fn read_wrapped_files(sas: &mut [StaticSa], dir: &Path) -> Result<(), Error> {
    use std::io::Read;
    for (i, sa) in sas.iter_mut().enumerate() {
        let Some(value) = sa.key.wrapped.as_mut() else { continue };
        if is_hex(value) {
            continue;
        }
        let bad =
            |why| Error::Esp(esp::Error::Config { item: esp::ConfigItem::Sa(i), field: "key.wrapped", why });
        let mut bytes = Vec::new();
        std::fs::File::open(dir.join(value.trim()))
            .and_then(|f| f.take(MAX_BLOB_FILE + 1).read_to_end(&mut bytes))
            .map_err(|e| {
                bad(match e.kind() {
                    std::io::ErrorKind::NotFound => "neither hex nor the path of a file",
                    std::io::ErrorKind::PermissionDenied => "the blob file it names is not readable",
                    _ => "the blob file it names cannot be read",
                })
            })?;
        if bytes.len() as u64 > MAX_BLOB_FILE {
            return Err(bad("the blob file it names is too large for a blob"));
        }
        // A file of hex text (with a final newline, say) is read as the blob in hex.
        let text = core::str::from_utf8(&bytes).ok().filter(|t| is_hex(t));
        *value = match text {
            Some(t) => t.trim().to_owned(),
            None => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        };
    }
    Ok(())
}

impl Config {
    /// Parses and checks a configuration file's text; `key.wrapped` paths are relative to
    /// the working directory (see [`Self::parse_in`]).
    pub fn parse(text: &str) -> Result<Self, Error> {
        Self::parse_in(text, Path::new("."))
    }

    /// Parses and checks a configuration file's text; `key.wrapped` values that are not hex
    /// name blob files relative to `dir` (the configuration file's directory), read here.
    pub fn parse_in(text: &str, dir: &Path) -> Result<Self, Error> {
        let file: File =
            toml::from_str(text).map_err(|e| Error::Config { field: "file", why: redacted(text, &e) })?;
        let mut statics = StaticConfig { sas: file.sa, policies: file.policy };
        let esp = read_wrapped_files(&mut statics.sas, dir).and_then(|()| Ok(statics.validate()?));
        // The hex strings held the keys too: overwrite them whatever the outcome.
        for sa in &mut statics.sas {
            for hex in [&mut sa.key.raw_encryption, &mut sa.key.raw_integrity, &mut sa.key.wrapped] {
                if let Some(h) = hex.take() {
                    let mut bytes = h.into_bytes();
                    bytes.fill(0);
                    std::hint::black_box(&bytes);
                }
            }
        }
        let esp = esp?;
        let defaults = Settings::default();
        let settings = match file.dataplane {
            None => defaults,
            Some(r) => {
                let tun = r.tun.unwrap_or(defaults.tun);
                if tun.is_empty()
                    || tun.len() > 15
                    || tun.contains(['/', '\0'])
                    || tun.contains(char::is_whitespace)
                {
                    return Err(Error::Config {
                        field: "dataplane.tun",
                        why: "1 to 15 characters, no '/'".into(),
                    });
                }
                let tun_mtu = r.tun_mtu.unwrap_or(defaults.tun_mtu);
                if !(MIN_TUN_MTU..=MAX_TUN_MTU).contains(&tun_mtu) {
                    return Err(Error::Config {
                        field: "dataplane.tun_mtu",
                        why: format!("{MIN_TUN_MTU} to {MAX_TUN_MTU}"),
                    });
                }
                let batch = r.batch.unwrap_or(defaults.batch);
                if batch == 0 || batch > MAX_BATCH {
                    return Err(Error::Config { field: "dataplane.batch", why: format!("1 to {MAX_BATCH}") });
                }
                let coalesce_us = r.coalesce_us.unwrap_or(defaults.coalesce_us);
                if coalesce_us > MAX_COALESCE_US {
                    return Err(Error::Config {
                        field: "dataplane.coalesce_us",
                        why: format!("0 to {MAX_COALESCE_US}"),
                    });
                }
                if r.replay_window.is_some_and(|w| !(esp::MIN_WINDOW..=esp::MAX_WINDOW).contains(&w)) {
                    return Err(Error::Config {
                        field: "dataplane.replay_window",
                        why: format!("{} to {} packets", esp::MIN_WINDOW, esp::MAX_WINDOW),
                    });
                }
                if r.workers == Some(0) || r.workers.is_some_and(|w| w > 64) {
                    return Err(Error::Config { field: "dataplane.workers", why: "1 to 64".into() });
                }
                if r.tun_netns.as_deref().is_some_and(|n| {
                    n.is_empty()
                        || n.len() > 64
                        || n.contains(['/', '\0'])
                        || n.contains(char::is_whitespace)
                        || n.starts_with('.')
                }) {
                    return Err(Error::Config {
                        field: "dataplane.tun_netns",
                        why: "a namespace name as `ip netns` shows it".into(),
                    });
                }
                Settings {
                    tun,
                    tun_netns: r.tun_netns,
                    tun_mtu,
                    tun_addresses: prefixes(&r.tun_addresses, "dataplane.tun_addresses")?,
                    routes: prefixes(&r.routes, "dataplane.routes")?,
                    workers: r.workers,
                    batch,
                    coalesce_us,
                    offload: r.offload.unwrap_or(true),
                    spread_inbound: r.spread_inbound.unwrap_or(false),
                    replay_window: r.replay_window,
                    listen: r
                        .listen
                        .iter()
                        .map(|a| {
                            a.parse::<SocketAddr>().map_err(|_| Error::Config {
                                field: "dataplane.listen",
                                why: "an address and port like 198.18.0.1:4500 or [2001:db8::1]:4500".into(),
                            })
                        })
                        .collect::<Result<_, _>>()?,
                }
            }
        };
        Ok(Self { settings, esp })
    }

    /// Whether any SA carries raw keys (which only `static-keys` builds can install).
    pub fn has_raw_keys(&self) -> bool {
        self.esp.sas.iter().any(|sa| matches!(sa.keys, KeyMaterial::Raw { .. }))
    }

    /// Whether any SA carries wrapped keys (which need the tenant's provisioning key).
    pub fn has_wrapped_keys(&self) -> bool {
        self.esp.sas.iter().any(|sa| matches!(sa.keys, KeyMaterial::Wrapped(_)))
    }

    /// Overwrites the raw key bytes held in this configuration with zeros; call it once
    /// the data plane has started and the keys are in the enclave.
    pub fn wipe_keys(&mut self) {
        for sa in &mut self.esp.sas {
            match &mut sa.keys {
                KeyMaterial::Raw { encryption, integrity } => {
                    encryption.fill(0);
                    integrity.fill(0);
                    // Keep the stores: the vectors are dropped later, unread.
                    std::hint::black_box((&encryption, &integrity));
                }
                KeyMaterial::Wrapped(blob) => {
                    blob.fill(0);
                    std::hint::black_box(&blob);
                }
            }
        }
    }

    /// The UDP addresses to listen on: `listen`, and every local endpoint of an ESP-in-UDP SA.
    pub fn udp_listeners(&self) -> Vec<SocketAddr> {
        let set: BTreeSet<SocketAddr> = self
            .esp
            .sas
            .iter()
            .filter_map(|sa| match sa.config.encapsulation {
                Encapsulation::Udp { local_port, .. } => Some(SocketAddr::new(sa.config.local, local_port)),
                Encapsulation::Esp => None,
            })
            .chain(self.settings.listen.iter().copied())
            .collect();
        set.into_iter().collect()
    }

    /// The families (`false`: IPv4, `true`: IPv6) that raw-ESP SAs or `listen` use.
    pub fn raw_families(&self) -> Vec<bool> {
        let set: BTreeSet<bool> = self
            .esp
            .sas
            .iter()
            .filter(|sa| sa.config.encapsulation == Encapsulation::Esp)
            .map(|sa| sa.config.local.is_ipv6())
            .chain(self.settings.listen.iter().map(SocketAddr::is_ipv6))
            .collect();
        set.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f10111213";

    fn sample(extra: &str) -> String {
        format!(
            r#"
            [dataplane]
            tun = "clt0"
            routes = ["198.18.20.0/24", "2001:db8:b::/48"]
            workers = 2
            {extra}

            [[sa]]
            name = "out"
            direction = "out"
            spi = 0x1001
            local = "198.18.0.1"
            remote = "198.18.0.2"
            encryption = "aes-gcm-16-128"
            udp_encap = {{}}
            local_ts = ["198.18.10.0/24"]
            remote_ts = ["198.18.20.0/24"]
            key = {{ raw_encryption = "{KEY}" }}

            [[sa]]
            name = "in"
            direction = "in"
            spi = 0x2001
            local = "2001:db8::1"
            remote = "2001:db8::2"
            encryption = "aes-gcm-16-128"
            local_ts = ["2001:db8:a::/48"]
            remote_ts = ["2001:db8:b::/48"]
            key = {{ raw_encryption = "{KEY}" }}

            [[policy]]
            local = "198.18.10.0/24"
            remote = "198.18.20.0/24"
            action = "protect"
            sa = "out"
            "#
        )
    }

    #[test]
    fn a_file_parses_into_settings_and_sas() {
        let c = Config::parse(&sample("")).unwrap();
        assert_eq!(c.settings.tun, "clt0");
        assert_eq!(c.settings.tun_mtu, DEFAULT_TUN_MTU);
        assert_eq!(c.settings.routes.len(), 2);
        assert_eq!(c.settings.workers, Some(2));
        assert_eq!(c.settings.coalesce_us, DEFAULT_COALESCE_US);
        assert_eq!(c.esp.sas.len(), 2);
        assert_eq!(c.udp_listeners(), vec!["198.18.0.1:4500".parse::<SocketAddr>().unwrap()]);
        assert_eq!(c.raw_families(), vec![true]);
        assert_eq!(DEFAULT_TUN_MTU, 1376);
        assert!(c.has_raw_keys());
        let mut c = c;
        c.wipe_keys();
        assert!(c.esp.sas.iter().all(|s| match &s.keys {
            KeyMaterial::Raw { encryption, .. } => encryption.iter().all(|&b| b == 0),
            KeyMaterial::Wrapped(_) => false,
        }));
    }

    #[test]
    fn coalescing_can_be_set_or_turned_off() {
        assert_eq!(Config::parse(&sample("coalesce_us = 0")).unwrap().settings.coalesce_us, 0);
        let most = format!("coalesce_us = {MAX_COALESCE_US}");
        assert_eq!(Config::parse(&sample(&most)).unwrap().settings.coalesce_us, MAX_COALESCE_US);
    }

    #[test]
    fn inbound_spreading_is_off_unless_asked_for() {
        assert!(!Config::parse(&sample("")).unwrap().settings.spread_inbound);
        assert!(Config::parse(&sample("spread_inbound = true")).unwrap().settings.spread_inbound);
        assert!(Config::parse(&sample("spread_inbound = \"yes\"")).is_err());
    }

    #[test]
    fn the_replay_window_is_checked_and_left_unset_by_default() {
        assert_eq!(Config::parse(&sample("")).unwrap().settings.replay_window, None);
        assert_eq!(
            Config::parse(&sample("replay_window = 8192")).unwrap().settings.replay_window,
            Some(8192)
        );
        for bad in ["replay_window = 16", "replay_window = 65505", "replay_window = -1"] {
            assert!(Config::parse(&sample(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_tun_mtu_edges_are_accepted() {
        for (text, mtu) in [("tun_mtu = 1280", MIN_TUN_MTU), ("tun_mtu = 9000", MAX_TUN_MTU)] {
            assert_eq!(Config::parse(&sample(text)).unwrap().settings.tun_mtu, mtu);
        }
    }

    #[test]
    fn bad_settings_name_their_field() {
        let field = |extra: &str| match Config::parse(&sample(extra)) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field("tun_mtu = 1000"), "dataplane.tun_mtu");
        assert_eq!(field("tun_mtu = 1279"), "dataplane.tun_mtu");
        assert_eq!(field("tun_mtu = 9001"), "dataplane.tun_mtu");
        assert_eq!(field("batch = 0"), "dataplane.batch");
        assert_eq!(field("coalesce_us = 1001"), "dataplane.coalesce_us");
        assert_eq!(field("coalesce_us = -1"), "file");
        assert_eq!(field("tun_addresses = [\"nope\"]"), "dataplane.tun_addresses");
        assert_eq!(field("wrokers = 3"), "file");
    }

    #[test]
    fn wrapped_keys_come_inline_or_from_a_file_beside_the_config() {
        let dir = std::env::temp_dir().join(format!("cl-dp-cfg-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let blob = b"CLPV\x01\x05\0\0\0\0\0\x01 opaque to this crate";
        std::fs::write(dir.join("keys/out.blob"), blob).unwrap();
        std::fs::write(dir.join("keys/in.hex"), "434c5056ab\n").unwrap();
        let text = sample("")
            .replacen(&format!("raw_encryption = \"{KEY}\""), "wrapped = \"keys/out.blob\"", 1)
            .replacen(&format!("raw_encryption = \"{KEY}\""), "wrapped = \"keys/in.hex\"", 1);
        let c = Config::parse_in(&text, &dir).unwrap();
        assert_eq!(c.esp.sas[0].keys, KeyMaterial::Wrapped(blob.to_vec()));
        assert_eq!(c.esp.sas[1].keys, KeyMaterial::Wrapped(vec![0x43, 0x4c, 0x50, 0x56, 0xab]));
        assert!(c.has_wrapped_keys() && !c.has_raw_keys());
        // Inline hex needs no file.
        let inline = text.replacen("keys/out.blob", "434c505601", 1);
        let c = Config::parse_in(&inline, &dir).unwrap();
        assert_eq!(c.esp.sas[0].keys, KeyMaterial::Wrapped(vec![0x43, 0x4c, 0x50, 0x56, 1]));
        // A missing file is named by its SA and field only.
        let e = Config::parse_in(&text.replacen("keys/in.hex", "keys/secret-name", 1), &dir).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("sa[1].key.wrapped: ") && !e.contains("secret-name"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn parse_errors_quote_no_values_from_the_file() {
        // A key in the wrong type, and a syntax error on a key's line.
        let text = sample("").replace(&format!("raw_encryption = \"{KEY}\""), "raw_encryption = 0x1234567");
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(!e.contains("1234567") && !e.contains("19088743"), "{e}");
        assert!(e.contains("line"), "{e}");
        let text = sample("").replacen(&format!("\"{KEY}\""), &format!("\"{KEY}"), 1);
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(!e.contains(KEY) && !e.contains("0001020304"), "{e}");
        // Validation errors of the ESP tables name the entry and field only.
        let text = sample("").replacen(KEY, "0011", 1);
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(e.contains("sa[0].key.raw_encryption") && !e.contains("0011"), "{e}");
    }
}
