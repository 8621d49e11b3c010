//! A hostile peer against `cloister dataplane`: replayed, truncated, bit-flipped, wrong-SPI,
//! wrongly encapsulated and too-old ESP packets are every one dropped and counted under its
//! reason, and valid traffic mixed in with them is unaffected (issue 4).
//!
//! Three namespaces, as in `esp_scapy_live.rs`: `site` runs the injector
//! (`scripts/peers/esp_injector.py`, scapy's IPsec module: an independent ESP
//! implementation), `gw` runs `cloister dataplane` (two workers, the enclave process, static
//! SAs from wrapped keys) and `cloud` answers pings. Two SA pairs, so that both
//! encapsulations, both transform shapes and both sequence number sizes are attacked:
//!
//! - `udp`: AES-GCM-16-256, ESP-in-UDP, 32-bit sequence numbers, inner IPv4;
//! - `raw`: AES-CBC-256 + HMAC-SHA2-256-128, raw ESP, ESN, inner IPv6.
//!
//! The injector's valid packets are ICMP echo requests: every one must be answered (scapy
//! decrypts Cloister's ESP to the exact reply) and no answer may come twice. It reports how
//! many hostile packets of each kind it sent; this test knows which drop reason each kind
//! must get, and checks the counters `cloister dataplane` prints on SIGTERM against them
//! exactly: per SA (`sa in spi ..: packets=.. drop.<reason>=..`, every reason) and in total
//! (`total: .. drops: esp.<reason>=..`, including the drops that have no SA), with no I/O
//! drop, every received datagram either delivered or dropped, and nothing logged per packet.
//!
//! | kind | reason |
//! | --- | --- |
//! | exact replay of an accepted packet | `replay` (SA) |
//! | authentic, never-sent sequence number left of the window | `replay` (SA), with ESN too: a number less than 2^31 behind is taken as late, not as the next 2^32 cycle (`ReplayWindow::infer`) |
//! | empty (no ESP bytes at all), or truncated below the 8-byte ESP header | `malformed` (no SA) |
//! | truncated below header + IV + trailer + ICV, or CBC not whole blocks | `malformed` (SA) |
//! | a bit flipped in IV, ciphertext or ICV, or cut short but well shaped | `icv_mismatch` (SA) |
//! | unknown SPI, or the gateway's own outbound SPI | `no_sa` (no SA) |
//! | raw ESP for an ESP-in-UDP SA, or the reverse | `encapsulation_mismatch` (SA) |
//!
//! Needs root (namespaces) and the project's venv (scapy; `scripts/setup.sh`); elsewhere it
//! prints a notice and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // the privilege helpers only
mod common;
mod test_keys;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use test_keys::Keys;

use testnet::{Netns, Process, Veth};

const CLOISTER: &str = env!("CARGO_BIN_EXE_cloister");
const TENANT: &str = "9";
const SITE: &str = "198.18.0.1";
const GW: &str = "198.18.0.2";
/// The injector's ESP-in-UDP port.
const SITE_PORT: u16 = 40001;

fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/venv/bin/python")
}

fn injector_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers/esp_injector.py")
}

/// One SA pair under attack.
struct Pair {
    name: &'static str,
    /// `[[sa]]` encryption and integrity, the injector's suite name.
    encryption: &'static str,
    integrity: Option<&'static str>,
    scapy_suite: &'static str,
    udp: bool,
    esn: bool,
    site_net: &'static str,
    site_host: &'static str,
    cloud_net: &'static str,
    cloud_host: &'static str,
    /// Cloister's inbound SA (the injector encrypts with it) and outbound SA: SPI, encryption
    /// key (with the AEAD salt), integrity key, in hex.
    inbound: (u32, String, String),
    outbound: (u32, String, String),
}

fn pairs() -> Vec<Pair> {
    let mut k = Keys::seeded();
    vec![
        Pair {
            name: "udp",
            encryption: "aes-gcm-16-256",
            integrity: None,
            scapy_suite: "aes256gcm16",
            udp: true,
            esn: false,
            site_net: "198.18.128.0/24",
            site_host: "198.18.128.1",
            cloud_net: "198.19.0.0/24",
            cloud_host: "198.19.0.2",
            inbound: (0x0100_0011, k.hex(36), String::new()),
            outbound: (0x0100_0012, k.hex(36), String::new()),
        },
        Pair {
            name: "raw",
            encryption: "aes-cbc-256",
            integrity: Some("hmac-sha2-256-128"),
            scapy_suite: "aes256-sha256",
            udp: false,
            esn: true,
            site_net: "2001:db8:5::/64",
            site_host: "2001:db8:5::1",
            cloud_net: "2001:db8:c::/64",
            cloud_host: "2001:db8:c::2",
            inbound: (0x0100_0021, k.hex(32), k.hex(32)),
            outbound: (0x0100_0022, k.hex(32), k.hex(32)),
        },
    ]
}

/// Runs `cloister secret wrap --kind esp` with the keys on stdin (never in argv).
fn wrap(pk: &Path, direction: &str, p: &Pair, sa: &(u32, String, String), out: &Path) {
    let spi = format!("{:#x}", sa.0);
    let mut args = vec![
        "secret",
        "wrap",
        "--provisioning-key",
        pk.to_str().unwrap(),
        "--tenant",
        TENANT,
        "--kind",
        "esp",
        "--direction",
        direction,
        "--spi",
        &spi,
        "--encryption",
        p.encryption,
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(i) = p.integrity {
        args.extend(["--integrity", i]);
    }
    let mut child = Command::new(CLOISTER)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}\n{}", sa.1, sa.2).unwrap();
    drop(stdin);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            // Our own child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
            panic!("cloister secret wrap did not finish");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "cloister secret wrap failed: {err}");
}

/// The gateway's configuration: both SA pairs and their policies, keys by blob file.
fn gateway_config(pairs: &[Pair]) -> String {
    let mut text = format!(
        "[dataplane]\ntun = \"cltunJ\"\nroutes = [{}]\nworkers = 2\n\n",
        pairs.iter().map(|p| format!("\"{}\"", p.site_net)).collect::<Vec<_>>().join(", ")
    );
    for p in pairs {
        for (dir, sa) in [("in", &p.inbound), ("out", &p.outbound)] {
            let integ = p.integrity.map(|i| format!("integrity = \"{i}\"\n")).unwrap_or_default();
            let udp = if p.udp {
                format!("udp_encap = {{ local_port = 4500, remote_port = {SITE_PORT} }}\n")
            } else {
                String::new()
            };
            write!(
                text,
                "[[sa]]\nname = \"{dir}-{name}\"\ndirection = \"{dir}\"\nspi = {spi}\nlocal = \"{GW}\"\n\
                 remote = \"{SITE}\"\nencryption = \"{enc}\"\n{integ}esn = {esn}\n{udp}\
                 local_ts = [\"{cloud}\"]\nremote_ts = [\"{site}\"]\nkey = {{ wrapped = \"keys/{dir}-{name}.blob\" }}\n\n",
                name = p.name,
                spi = sa.0,
                enc = p.encryption,
                esn = p.esn,
                cloud = p.cloud_net,
                site = p.site_net,
            )
            .unwrap();
        }
        write!(
            text,
            "[[policy]]\nlocal = \"{}\"\nremote = \"{}\"\naction = \"protect\"\nsa = \"out-{}\"\n\n",
            p.cloud_net, p.site_net, p.name
        )
        .unwrap();
    }
    text
}

/// The injector's description of one SA pair.
fn injector_sa(p: &Pair) -> String {
    let udp = if p.udp { format!("[{SITE_PORT}, 4500]") } else { "null".to_owned() };
    format!(
        r#"{{"name": "{name}", "suite": "{suite}", "esn": {esn}, "out_spi": {ospi}, "out_enc": "{oenc}",
 "out_integ": "{ointeg}", "in_spi": {ispi}, "in_enc": "{ienc}", "in_integ": "{iinteg}", "local": "{SITE}",
 "remote": "{GW}", "udp": {udp}, "udp_port_for_raw": 4500, "site_host": "{sh}", "cloud_host": "{ch}"}}"#,
        name = p.name,
        suite = p.scapy_suite,
        esn = p.esn,
        ospi = p.inbound.0,
        oenc = p.inbound.1,
        ointeg = p.inbound.2,
        ispi = p.outbound.0,
        ienc = p.outbound.1,
        iinteg = p.outbound.2,
        sh = p.site_host,
        ch = p.cloud_host,
    )
}

/// The drop reason `cloister dataplane` must give each kind of hostile packet, and whether
/// it is counted on the SA (`false`: the packet names no SA of the gateway's).
fn reason(kind: &str) -> (&'static str, bool) {
    match kind {
        "replay" => ("replay", true),
        "old" => ("replay", true),
        "empty" | "short_header" => ("malformed", false),
        "short_body" | "misaligned" => ("malformed", true),
        "cut_tail" | "flip_iv" | "flip_ct" | "flip_icv" => ("icv_mismatch", true),
        "wrong_spi" => ("no_sa", false),
        "wrong_encap" => ("encapsulation_mismatch", true),
        other => panic!("the injector reported an unknown kind {other:?}"),
    }
}

/// `key=value` pairs of a counter line, with the given prefix on the key (`esp.`, `io.`,
/// `drop.`, or none).
fn counts(line: &str, prefix: &str) -> BTreeMap<String, u64> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_owned(), v.parse().ok()?)))
        .filter(|(k, _)| !prefix.is_empty() || !k.contains('.'))
        .collect()
}

/// One injector report line.
#[derive(Debug)]
struct Report {
    name: String,
    valid: u64,
    answered: u64,
    extra: u64,
    datagrams: u64,
    sent: BTreeMap<String, u64>,
}

/// Reads the injector's JSON line without a JSON crate: its shape is fixed and flat but for
/// `sent` (an object of counts) and `errors` (checked through the exit status).
fn parse_report(line: &str) -> Report {
    let field = |name: &str| -> u64 {
        let at = line.find(&format!("\"{name}\": ")).unwrap_or_else(|| panic!("no {name} in {line}"));
        let rest = &line[at + name.len() + 4..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()].parse().unwrap()
    };
    let name_at = line.find("\"name\": \"").unwrap() + 9;
    let name = line[name_at..name_at + line[name_at..].find('"').unwrap()].to_owned();
    let sent_at = line.find("\"sent\": {").unwrap() + 9;
    let sent_text = &line[sent_at..sent_at + line[sent_at..].find('}').unwrap()];
    let sent = sent_text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.trim().trim_matches('"').to_owned(), v.trim().parse().unwrap())
        })
        .collect();
    Report {
        name,
        valid: field("valid"),
        answered: field("answered"),
        extra: field("extra"),
        datagrams: field("datagrams"),
        sent,
    }
}

#[test]
fn hostile_esp_is_dropped_and_counted_by_reason_and_valid_traffic_flows() {
    if !testnet::can_create_namespaces() {
        testnet::skip("needs root to create network namespaces");
        return;
    }
    if !venv_python().exists() {
        testnet::skip("no venv with scapy; run scripts/setup.sh");
        return;
    }
    let started = Instant::now();
    // Processes are declared after the namespaces, so they are dropped (stopped) first.
    let site = Netns::new("injsite").unwrap();
    let gw = Netns::new("injgw").unwrap();
    let cloud = Netns::new("injcloud").unwrap();
    Veth::connect(&site, "wan0", &gw, "wan0").unwrap();
    Veth::connect(&gw, "lan0", &cloud, "lan0").unwrap();
    site.add_addr("wan0", &format!("{SITE}/24")).unwrap();
    gw.add_addr("wan0", &format!("{GW}/24")).unwrap();
    gw.add_addr("lan0", "198.19.0.1/24").unwrap();
    gw.add_addr("lan0", "2001:db8:c::1/64").unwrap();
    gw.enable_forwarding().unwrap();
    cloud.add_addr("lan0", "198.19.0.2/24").unwrap();
    cloud.add_addr("lan0", "2001:db8:c::2/64").unwrap();
    cloud.add_route("default", "198.19.0.1").unwrap();
    cloud.add_route("default", "2001:db8:c::1").unwrap();
    // Forwarded IPv6 waits for neighbour discovery, which needs link-local addresses past DAD.
    for ns in [&gw, &cloud] {
        testnet::wait_until("IPv6 link-local addresses past DAD", Duration::from_secs(10), || {
            ns.ip(&["-6", "addr", "show", "tentative"]).is_ok_and(|o| o.stdout.trim().is_empty())
        })
        .unwrap();
    }

    // The tenant's side: a provisioning key and every SA direction's keys wrapped with it.
    let pairs = pairs();
    let pk = gw.write_file("provisioning.key", &Keys(u64::from(std::process::id()) << 7).hex(32)).unwrap();
    std::fs::set_permissions(&pk, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(gw.dir().join("keys")).unwrap();
    for p in &pairs {
        wrap(&pk, "in", p, &p.inbound, &gw.dir().join(format!("keys/in-{}.blob", p.name)));
        wrap(&pk, "out", p, &p.outbound, &gw.dir().join(format!("keys/out-{}.blob", p.name)));
    }
    let config = gw.write_file("gw.toml", &gateway_config(&pairs)).unwrap();
    let argv = [
        CLOISTER,
        "dataplane",
        "--config",
        config.to_str().unwrap(),
        "--provisioning-key",
        pk.to_str().unwrap(),
        "--tenant",
        TENANT,
        "--enclave",
        "process",
    ];
    let mut dataplane: Process = gw.spawn("dataplane", &argv).unwrap();
    dataplane.wait_for_log("offloads:", Duration::from_secs(20)).unwrap();
    users_of_their_own(&dataplane, gw.dir());

    // The injector, bounded: a few seconds of work, every wait in it capped.
    let spec = format!(
        "{{\"timeout\": 3, \"sas\": [{}]}}",
        pairs.iter().map(injector_sa).collect::<Vec<_>>().join(",\n")
    );
    let spec_file = site.write_file("injector.json", &spec).unwrap();
    let arg = format!("@{}", spec_file.display());
    let out = site.exec(
        &[venv_python().to_str().unwrap(), injector_script().to_str().unwrap(), &arg],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_file(&spec_file);
    let out = out.unwrap();
    // The last answers are in; let the workers finish what is still queued (nothing should be).
    std::thread::sleep(Duration::from_millis(300));
    let log = dataplane.stop();
    assert!(
        out.success && out.stdout.lines().count() == pairs.len(),
        "injector failed:\n{}\nstderr: {}\ndataplane:\n{}",
        out.stdout,
        testnet::excerpt(&out.stderr),
        testnet::excerpt(&log)
    );
    let reports: Vec<Report> = out.stdout.lines().map(parse_report).collect();

    // What each SA, and the data plane as a whole, must have counted.
    let mut total_expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut valid = 0;
    let mut datagrams = 0;
    let mut summary = Vec::new();
    for (p, r) in pairs.iter().zip(&reports) {
        assert_eq!(r.name, p.name);
        assert_eq!((r.answered, r.extra), (r.valid, 0), "{}: answered / extra answers", p.name);
        valid += r.valid;
        datagrams += r.datagrams;
        let mut on_sa: BTreeMap<String, u64> = BTreeMap::new();
        for (kind, &n) in &r.sent {
            let (why, counted_on_sa) = reason(kind);
            if counted_on_sa {
                *on_sa.entry(why.to_owned()).or_default() += n;
            }
            *total_expected.entry(why.to_owned()).or_default() += n;
        }
        let in_line = format!("sa in spi {:#010x}: ", p.inbound.0);
        let line =
            log.lines().find(|l| l.starts_with(&in_line)).unwrap_or_else(|| panic!("no {in_line}\n{log}"));
        assert_eq!(counts(line, "").get("packets"), Some(&r.valid), "{}: inbound packets: {line}", p.name);
        assert_eq!(counts(line, "drop."), on_sa, "{}: drops counted on the inbound SA: {line}", p.name);
        let out_line = format!("sa out out-{} spi {:#010x}: packets={} ", p.name, p.outbound.0, r.valid);
        assert!(
            log.lines().any(|l| l.starts_with(&out_line) && !l.contains("drop.")),
            "{}: {out_line}\n{log}",
            p.name
        );
        summary.push(format!("{}: {} valid answered, hostile {:?}", p.name, r.valid, r.sent));
    }
    let total =
        log.lines().find(|l| l.starts_with("total:")).unwrap_or_else(|| panic!("no total line\n{log}"));
    let c = counts(total, "");
    let mut esp_drops = counts(total, "esp.");
    // The outbound side: what the kernel sends into the TUN device by itself (IPv6 router
    // solicitations and MLD reports from its link-local address) matches no policy.
    let no_policy = esp_drops.remove("no_policy").unwrap_or(0);
    assert_eq!(c.get("tun_rx").copied(), c.get("encapsulated").map(|e| e + no_policy), "outbound: {total}");
    let injected = || format!("injector:\n{}\n{total}", out.stdout);
    let empty: u64 = reports.iter().map(|r| r.sent.get("empty").copied().unwrap_or(0)).sum();
    assert!(
        empty == 0 || c.get("net_rx") != Some(&(datagrams - empty)),
        "the {empty} empty ESP datagrams (a UDP datagram with no payload, an IPv4 packet of protocol 50 \
         with none) were neither received nor dropped: cio's RecvBuffers::datagrams yields no datagram \
         for an empty message (`bytes.chunks(1)` of an empty slice); {}",
        injected()
    );
    assert_eq!(esp_drops, total_expected, "drops by reason, all workers; {}", injected());
    assert!(counts(total, "io.").is_empty(), "no I/O drops: {total}");
    let dropped: u64 = total_expected.values().sum();
    assert_eq!(c.get("decapsulated"), Some(&valid), "{total}");
    assert_eq!(
        c.get("net_rx"),
        Some(&datagrams),
        "every datagram the injector sent was received; {}",
        injected()
    );
    assert_eq!(valid + dropped, datagrams, "every datagram delivered or dropped: {total}");
    // Counted, never logged: the start line, the stop line, two workers, the total, four SAs.
    assert!(log.lines().count() <= 12, "per-packet logging?\n{log}");
    eprintln!(
        "esp_injector: {datagrams} datagrams, {valid} valid ones answered, {dropped} dropped as expected {:?} in {:.1}s\n  {}\n  {total}",
        total_expected,
        started.elapsed().as_secs_f64(),
        summary.join("\n  ")
    );
}

/// The privilege test's data plane half: started as root with the enclave process,
/// `cloister dataplane` runs the enclave as a user of its own and, once its TUN device and
/// sockets are open, becomes another with the three network capabilities (the rest of the
/// test shows traffic flowing all the same). As that user, neither the enclave's nor the
/// platform's memory opens, nor the provisioning key or the ledger.
fn users_of_their_own(dataplane: &Process, dir: &Path) {
    let tenant: u32 = TENANT.parse().unwrap();
    let ledger = format!("ledger/{tenant}");
    common::assert_dropped_to_its_own_user(
        "dataplane",
        dataplane.pid(),
        &dataplane.log(),
        (1_899_999_999, 1_900_000_000 + tenant),
        dir,
        &["provisioning.key", &ledger],
    );
}
