//! Live ESP interop of `cloister dataplane` with two independent implementations, over
//! static SAs whose keys were wrapped for the tenant's enclave (`cloister secret wrap --kind
//! esp`, the production path: default features, no raw keys anywhere).
//!
//! Three namespaces: `site` (scapy's IPsec module as the tenant's gateway), `gw` (two
//! `cloister dataplane` processes, one with the inline enclave and one with the enclave
//! process, on their own outer addresses and TUN devices) and `cloud` (the host that answers
//! pings). For each case scapy encrypts ICMP echo requests that Cloister must decrypt and
//! forward (the cloud host answers the exact request), and decrypts Cloister's ESP answers to
//! the exact reply (`scripts/peers/scapy_esp_peer.py`).
//!
//! The matrix runs whole: every suite (AES-GCM-16-128, AES-GCM-16-256, ChaCha20-Poly1305,
//! AES-CBC-256 + HMAC-SHA2-256-128, AES-CBC-128 + HMAC-SHA2-512-256) x raw ESP and
//! ESP-in-UDP x IPv4 and IPv6 outer x IPv4 and IPv6 inner x ESN off and on: 80 cases, each
//! its own SA pair and policy, half of them on each gateway (the enclave process serves the
//! cases where ESN differs from ESP-in-UDP: 40 cases, every suite and both values of every
//! other dimension; the inline enclave the other 40).
//!
//! Meanwhile dumpcap records the ESP on the site's veth, and tshark (an implementation of
//! its own) decrypts it with the keys the test wrapped: every case it can decrypt (Wireshark
//! 4.0 has no ChaCha20-Poly1305 for ESP and no ESN in its SA table, so the 32 cases of the
//! four other suites without ESN: AEAD and CBC + HMAC, both outer and inner families, both
//! encapsulations) must show the exact inner echo requests and replies, every ICV checked,
//! and no packet is malformed or carries an expert warning or error.
//!
//! A second test (no root needed) checks what an operator sees when wrapped keys do not fit.
//!
//! Needs root (namespaces), the project's venv (scapy; `scripts/setup.sh`), and for the
//! tshark part tshark and dumpcap; elsewhere it prints a notice and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_keys;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use test_keys::Keys;

use testnet::{Netns, Process, Veth};

const CLOISTER: &str = env!("CARGO_BIN_EXE_cloister");
const TENANT: &str = "7";
/// Pings per case, and seconds to wait for each answer.
const PINGS: u32 = 2;
const ANSWER_WAIT: u32 = 3;
/// The site's outer addresses and the cloud host.
const SITE_V4: &str = "198.18.0.1";
const SITE_V6: &str = "2001:db8::1";
const CLOUD_V4: &str = "198.19.0.2";
const CLOUD_V6: &str = "2001:db8:c::2";
const CLOUD_NET_V4: &str = "198.19.0.0/24";
const CLOUD_NET_V6: &str = "2001:db8:c::/64";

fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/venv/bin/python")
}

fn peer_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers/scapy_esp_peer.py")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    Gcm128,
    Gcm256,
    ChaCha,
    Cbc256Sha256,
    Cbc128Sha512,
}

impl Suite {
    const ALL: [Self; 5] = [Self::Gcm128, Self::Gcm256, Self::ChaCha, Self::Cbc256Sha256, Self::Cbc128Sha512];

    /// (`[[sa]]` encryption, integrity, scapy peer's suite name).
    fn names(self) -> (&'static str, Option<&'static str>, &'static str) {
        match self {
            Self::Gcm128 => ("aes-gcm-16-128", None, "aes128gcm16"),
            Self::Gcm256 => ("aes-gcm-16-256", None, "aes256gcm16"),
            Self::ChaCha => ("chacha20-poly1305", None, "chacha20poly1305"),
            Self::Cbc256Sha256 => ("aes-cbc-256", Some("hmac-sha2-256-128"), "aes256-sha256"),
            Self::Cbc128Sha512 => ("aes-cbc-128", Some("hmac-sha2-512-256"), "aes128-sha512"),
        }
    }

    /// Key bytes: encryption (with the AEAD salt), integrity.
    fn key_lens(self) -> (usize, usize) {
        match self {
            Self::Gcm128 => (20, 0),
            Self::Gcm256 | Self::ChaCha => (36, 0),
            Self::Cbc256Sha256 => (32, 32),
            Self::Cbc128Sha512 => (16, 64),
        }
    }

    /// tshark 4.0's names for the ESP SA table (encryption, authentication), if it can decrypt it.
    fn tshark(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Gcm128 | Self::Gcm256 => Some(("AES-GCM with 16 octet ICV [RFC4106]", "NULL")),
            Self::ChaCha => None,
            Self::Cbc256Sha256 => Some(("AES-CBC [RFC3602]", "HMAC-SHA-256-128 [RFC4868]")),
            Self::Cbc128Sha512 => Some(("AES-CBC [RFC3602]", "HMAC-SHA-512-256 [RFC4868]")),
        }
    }
}

/// One direction's SA: SPI and keys (hex).
#[derive(Debug, Clone)]
struct SaKeys {
    spi: u32,
    enc: String,
    integ: String,
}

/// One case of the matrix: an SA pair and a policy on one of the two gateways.
#[derive(Debug, Clone)]
struct Case {
    n: usize,
    suite: Suite,
    udp: bool,
    outer_v6: bool,
    inner_v6: bool,
    esn: bool,
    /// Served by the gateway with the enclave process (else the inline one).
    process: bool,
    /// Cloister's inbound SA (scapy sends with it) and outbound SA (scapy receives).
    inbound: SaKeys,
    outbound: SaKeys,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "#{} {:?} {} outer-{} inner-{} esn={} {}",
            self.n,
            self.suite,
            if self.udp { "udp" } else { "esp" },
            if self.outer_v6 { "v6" } else { "v4" },
            if self.inner_v6 { "v6" } else { "v4" },
            self.esn,
            if self.process { "process" } else { "inline" }
        )
    }

    fn site_outer(&self) -> &'static str {
        if self.outer_v6 {
            SITE_V6
        } else {
            SITE_V4
        }
    }

    fn gw_outer(&self) -> &'static str {
        match (self.outer_v6, self.process) {
            (false, false) => "198.18.0.2",
            (false, true) => "198.18.0.3",
            (true, false) => "2001:db8::2",
            (true, true) => "2001:db8::3",
        }
    }

    /// The site's inner network and its host (distinct per case).
    fn site_net(&self) -> (String, String) {
        if self.inner_v6 {
            (format!("2001:db8:5:{:x}::/64", self.n), format!("2001:db8:5:{:x}::1", self.n))
        } else {
            (format!("198.18.{}.0/24", 128 + self.n), format!("198.18.{}.1", 128 + self.n))
        }
    }

    fn cloud(&self) -> (&'static str, &'static str) {
        if self.inner_v6 {
            (CLOUD_NET_V6, CLOUD_V6)
        } else {
            (CLOUD_NET_V4, CLOUD_V4)
        }
    }

    fn scapy_port(&self) -> u16 {
        40000 + u16::try_from(self.n).unwrap()
    }
}

fn matrix() -> Vec<Case> {
    let mut keys = Keys::seeded();
    let mut cases = Vec::new();
    for suite in Suite::ALL {
        for udp in [false, true] {
            for outer_v6 in [false, true] {
                for inner_v6 in [false, true] {
                    for esn in [false, true] {
                        let n = cases.len();
                        let (el, il) = suite.key_lens();
                        let base = 0x0100_0000 + u32::try_from(n).unwrap() * 0x100;
                        let mut sa = |spi| SaKeys { spi, enc: keys.hex(el), integ: keys.hex(il) };
                        let inbound = sa(base + 1);
                        let outbound = sa(base + 2);
                        // Half of the cases to each backend, each half with every suite
                        // and both values of every other dimension.
                        let process = esn != udp;
                        cases.push(Case {
                            n,
                            suite,
                            udp,
                            outer_v6,
                            inner_v6,
                            esn,
                            process,
                            inbound,
                            outbound,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// Runs `cloister secret wrap --kind esp` with the keys on stdin (never in argv).
fn wrap(pk: &Path, direction: &str, suite: Suite, sa: &SaKeys, out: &Path) {
    let (enc_name, integ_name, _) = suite.names();
    let spi = format!("{:#x}", sa.spi);
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
        enc_name,
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(i) = integ_name {
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
    writeln!(stdin, "{}\n{}", sa.enc, sa.integ).unwrap();
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

/// One gateway's configuration: its cases' SA pairs and policies, keys by blob file (even
/// cases) or inline hex (odd cases).
fn gateway_config(dir: &Path, tun: &str, cases: &[&Case]) -> String {
    let mut routes = Vec::new();
    let mut sas = String::new();
    let mut policies = String::new();
    for c in cases {
        let (site_net, _) = c.site_net();
        let (cloud_net, _) = c.cloud();
        let (enc, integ, _) = c.suite.names();
        routes.push(format!("\"{site_net}\""));
        for (dir_name, sa) in [("in", &c.inbound), ("out", &c.outbound)] {
            let file = format!("keys/{dir_name}-{}.blob", c.n);
            let key = if c.n % 2 == 0 {
                file
            } else {
                let blob = std::fs::read(dir.join(&file)).unwrap();
                blob.iter().map(|b| format!("{b:02x}")).collect()
            };
            let udp = if c.udp {
                format!("udp_encap = {{ local_port = 4500, remote_port = {} }}\n", c.scapy_port())
            } else {
                String::new()
            };
            let integ = integ.map(|i| format!("integrity = \"{i}\"\n")).unwrap_or_default();
            write!(
                sas,
                "[[sa]]\nname = \"{dir_name}-{n}\"\ndirection = \"{dir_name}\"\nspi = {spi}\nlocal = \"{local}\"\n\
                 remote = \"{remote}\"\nencryption = \"{enc}\"\n{integ}esn = {esn}\n{udp}local_ts = [\"{cloud_net}\"]\n\
                 remote_ts = [\"{site_net}\"]\nkey = {{ wrapped = \"{key}\" }}\n\n",
                n = c.n,
                spi = sa.spi,
                local = c.gw_outer(),
                remote = c.site_outer(),
                esn = c.esn,
            )
            .unwrap();
        }
        write!(
            policies,
            "[[policy]]\nlocal = \"{cloud_net}\"\nremote = \"{site_net}\"\naction = \"protect\"\nsa = \"out-{}\"\n\n",
            c.n
        )
        .unwrap();
    }
    format!("[dataplane]\ntun = \"{tun}\"\nroutes = [{}]\nworkers = 1\n\n{sas}{policies}", routes.join(", "))
}

/// The scapy peer's description of a case.
fn scapy_case(c: &Case) -> String {
    let (_, site_host) = c.site_net();
    let (_, cloud_host) = c.cloud();
    let udp = if c.udp { format!("[{}, 4500]", c.scapy_port()) } else { "null".to_owned() };
    format!(
        r#"{{"name": "{name}", "suite": "{suite}", "out_spi": {ospi}, "out_enc": "{oenc}", "out_integ": "{ointeg}",
 "in_spi": {ispi}, "in_enc": "{ienc}", "in_integ": "{iinteg}", "local": "{local}", "remote": "{remote}",
 "udp": {udp}, "esn": {esn}, "site_host": "{site_host}", "cloud_host": "{cloud_host}",
 "count": {PINGS}, "timeout": {ANSWER_WAIT}}}"#,
        name = c.name(),
        suite = c.suite.names().2,
        ospi = c.inbound.spi,
        oenc = c.inbound.enc,
        ointeg = c.inbound.integ,
        ispi = c.outbound.spi,
        ienc = c.outbound.enc,
        iinteg = c.outbound.integ,
        local = c.site_outer(),
        remote = c.gw_outer(),
        esn = c.esn,
    )
}

/// Site, gateway and cloud namespaces, linked and addressed.
struct Net {
    site: Netns,
    gw: Netns,
    /// Kept for its lifetime: the host that answers.
    _cloud: Netns,
}

fn network() -> Net {
    let site = Netns::new("espsite").unwrap();
    let gw = Netns::new("espgw").unwrap();
    let cloud = Netns::new("espcloud").unwrap();
    Veth::connect(&site, "wan0", &gw, "wan0").unwrap();
    Veth::connect(&gw, "lan0", &cloud, "lan0").unwrap();
    site.add_addr("wan0", "198.18.0.1/24").unwrap();
    site.add_addr("wan0", "2001:db8::1/64").unwrap();
    for a in ["198.18.0.2/24", "198.18.0.3/24", "2001:db8::2/64", "2001:db8::3/64"] {
        gw.add_addr("wan0", a).unwrap();
    }
    gw.add_addr("lan0", "198.19.0.1/24").unwrap();
    gw.add_addr("lan0", "2001:db8:c::1/64").unwrap();
    gw.enable_forwarding().unwrap();
    cloud.add_addr("lan0", "198.19.0.2/24").unwrap();
    cloud.add_addr("lan0", "2001:db8:c::2/64").unwrap();
    cloud.add_route("default", "198.19.0.1").unwrap();
    cloud.add_route("default", "2001:db8:c::1").unwrap();
    Net { site, gw, _cloud: cloud }
}

/// Starts one gateway and waits for its start-up line.
fn start_gateway(gw: &Netns, label: &str, config: &Path, pk: &Path, process: bool) -> Process {
    let mut argv = vec![
        CLOISTER,
        "dataplane",
        "--config",
        config.to_str().unwrap(),
        "--provisioning-key",
        pk.to_str().unwrap(),
        "--tenant",
        TENANT,
    ];
    if process {
        argv.extend(["--enclave", "process"]);
    }
    let mut p = gw.spawn(label, &argv).unwrap();
    p.wait_for_log("offloads:", Duration::from_secs(20)).unwrap();
    p
}

/// dumpcap on the site's veth, bounded in time and size; stopped with SIGINT.
fn start_capture(site: &Netns) -> Option<(Process, PathBuf)> {
    if !Path::new("/usr/bin/dumpcap").exists() || !Path::new("/usr/bin/tshark").exists() {
        testnet::skip("its tshark part needs tshark and dumpcap; run scripts/setup.sh");
        return None;
    }
    let cap = site.dir().join("esp.pcapng");
    let argv = [
        "dumpcap",
        "-i",
        "wan0",
        "-f",
        "esp or udp port 4500",
        "-a",
        "duration:120",
        "-a",
        "filesize:20000",
        "-w",
        cap.to_str().unwrap(),
    ];
    let mut p = site.spawn("dumpcap", &argv).unwrap();
    p.wait_for_log("Capturing on", Duration::from_secs(20)).unwrap();
    Some((p, cap))
}

/// Ends dumpcap so that it closes the file (SIGINT), waiting a bounded time. First waits
/// until the file has stopped growing for 300 ms (at most 5 s): on SIGINT dumpcap writes
/// what it has read, but not packets still queued in the kernel for it, and a loaded CI
/// machine once lost the last cases' replies to a fixed 200 ms wait.
fn stop_capture(mut p: Process, cap: &Path) {
    const SIGINT: i32 = 2;
    let size = || std::fs::metadata(cap).map_or(0, |m| m.len());
    let start = Instant::now();
    let (mut last, mut since) = (size(), Instant::now());
    while since.elapsed() < Duration::from_millis(300) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        let now = size();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    p.signal(SIGINT).unwrap();
    let start = Instant::now();
    while p.is_running() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(p);
}

/// Reads the capture with tshark and the keys of every case it can decrypt: each such
/// case's ESP from Cloister decrypts to exactly its echo replies (and scapy's to its echo
/// requests), every ICV checks, and no packet is malformed or carries an expert error.
fn check_with_tshark(cap: &Path, cases: &[Case]) {
    let decryptable: Vec<&Case> = cases.iter().filter(|c| !c.esn && c.suite.tshark().is_some()).collect();
    let mut argv: Vec<String> = ["tshark", "-n", "-r", cap.to_str().unwrap()].map(str::to_owned).to_vec();
    for o in ["esp.enable_encryption_decode:TRUE", "esp.enable_authentication_check:TRUE"] {
        argv.extend(["-o".to_owned(), o.to_owned()]);
    }
    for c in &decryptable {
        let (enc_name, auth_name) = c.suite.tshark().unwrap();
        let family = if c.outer_v6 { "IPv6" } else { "IPv4" };
        for (src, dst, sa) in
            [(c.gw_outer(), c.site_outer(), &c.outbound), (c.site_outer(), c.gw_outer(), &c.inbound)]
        {
            let auth_key = if sa.integ.is_empty() { String::new() } else { format!("0x{}", sa.integ) };
            argv.push("-o".to_owned());
            argv.push(format!(
                "uat:esp_sa:\"{family}\",\"{src}\",\"{dst}\",\"{:#010x}\",\"{enc_name}\",\"0x{}\",\"{auth_name}\",\"{auth_key}\"",
                sa.spi, sa.enc
            ));
        }
    }
    let fields = [
        "esp.spi",
        "esp.sequence",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "icmp.type",
        "icmpv6.type",
        "esp.icv_good",
        "esp.icv_bad",
        "_ws.malformed",
        "_ws.expert.severity",
        "icmp.ident",
        "icmp.seq",
        "icmpv6.echo.identifier",
        "icmpv6.echo.sequence_number",
        "data.data",
    ];
    argv.extend(
        ["-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"].map(str::to_owned),
    );
    for f in fields {
        argv.extend(["-e".to_owned(), f.to_owned()]);
    }
    let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = testnet::run(&argv_ref, Duration::from_secs(60)).unwrap();
    assert!(out.success, "tshark failed: {}", out.stderr);
    let rows: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split('|').collect()).collect();
    assert!(!rows.is_empty(), "tshark read no packets: {}", out.stderr);
    let mut bad = Vec::new();
    for r in &rows {
        // Expert severities (decimal): 0x00600000 warning, 0x00800000 error. Malformed
        // packets carry an error too, and fill `_ws.malformed`.
        let severe = r[11]
            .split(',')
            .filter(|s| !s.is_empty())
            .any(|s| s.parse::<u32>().map_or(true, |v| v >= 0x0060_0000));
        if !r[10].is_empty() || severe || r[9].contains('1') {
            bad.push(r.join("|"));
        }
    }
    assert!(bad.is_empty(), "malformed packets, expert warnings or errors, or bad ICVs:\n{}", bad.join("\n"));
    let mut checked = 0;
    for c in &decryptable {
        let (_, site_host) = c.site_net();
        let (_, cloud_host) = c.cloud();
        for (sa, from, to, icmp) in [
            (&c.outbound, cloud_host.to_owned(), site_host.clone(), if c.inner_v6 { "129" } else { "0" }),
            (&c.inbound, site_host.clone(), cloud_host.to_owned(), if c.inner_v6 { "128" } else { "8" }),
        ] {
            let spi = format!("{:#010x}", sa.spi);
            let mine: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == spi).collect();
            assert_eq!(mine.len(), PINGS as usize, "{}: ESP packets of SPI {spi} in the capture", c.name());
            for r in mine {
                // Outer then inner addresses: the inner ones are the last of their family.
                let (src_col, dst_col, icmp_col) =
                    if c.inner_v6 { (r[4], r[5], r[7]) } else { (r[2], r[3], r[6]) };
                let inner_src = src_col.rsplit(',').next().unwrap_or_default();
                let inner_dst = dst_col.rsplit(',').next().unwrap_or_default();
                assert_eq!(
                    (inner_src, inner_dst),
                    (from.as_str(), to.as_str()),
                    "{}: inner of {r:?}",
                    c.name()
                );
                assert_eq!(icmp_col, icmp, "{}: ICMP type of {r:?}", c.name());
                // The peer's k-th ping (ESP sequence number k + 1): its identifier, sequence
                // number and payload, unchanged by the round trip.
                let (ident, seq) = if c.inner_v6 { (r[14], r[15]) } else { (r[12], r[13]) };
                let k: u32 = r[1].parse::<u32>().unwrap() - 1;
                assert!(ident == "119" || ident == "0x0077", "{}: echo identifier of {r:?}", c.name());
                assert_eq!(seq, k.to_string(), "{}: echo sequence number of {r:?}", c.name());
                let payload: String = (0..56u32).map(|j| format!("{:02x}", (k * 7 + j) & 0xff)).collect();
                assert_eq!(r[16], payload, "{}: echo payload of {r:?}", c.name());
                assert_eq!(r[8], "1", "{}: ICV not checked good in {r:?}", c.name());
                checked += 1;
            }
        }
    }
    eprintln!(
        "esp_scapy_live: tshark decrypted {checked} ESP packets of {} cases, {} packets read, none malformed",
        decryptable.len(),
        rows.len()
    );
}

#[test]
fn scapy_and_tshark_interoperate_with_wrapped_static_sas_on_both_backends() {
    if !testnet::can_create_namespaces() {
        testnet::skip("needs root to create network namespaces");
        return;
    }
    if !venv_python().exists() {
        testnet::skip("no venv with scapy; run scripts/setup.sh");
        return;
    }
    let started = Instant::now();
    let net = network();
    let cases = matrix();

    // The tenant's side: a provisioning key and each SA direction's keys wrapped with it.
    let dir = net.gw.dir().to_owned();
    let pk = net.gw.write_file("provisioning.key", &Keys(u64::from(std::process::id())).hex(32)).unwrap();
    std::fs::set_permissions(&pk, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    for c in &cases {
        wrap(&pk, "in", c.suite, &c.inbound, &dir.join(format!("keys/in-{}.blob", c.n)));
        wrap(&pk, "out", c.suite, &c.outbound, &dir.join(format!("keys/out-{}.blob", c.n)));
    }
    let wrapped_at = started.elapsed();

    let mut gateways = Vec::new();
    for (process, tun) in [(false, "cltunI"), (true, "cltunP")] {
        let mine: Vec<&Case> = cases.iter().filter(|c| c.process == process).collect();
        let text = gateway_config(&dir, tun, &mine);
        let all_keys = cases.iter().flat_map(|c| [&c.inbound, &c.outbound]);
        for k in all_keys {
            assert!(!text.contains(&k.enc), "no raw key in the gateway's configuration");
        }
        let config = net.gw.write_file(&format!("{tun}.toml"), &text).unwrap();
        let label = if process { "gw-process" } else { "gw-inline" };
        // Each gateway is a platform of its own: its own copy of the tenant's key, and
        // beside it its own ledger (one holder at a time).
        let own = dir.join(label).join("provisioning.key");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        std::fs::copy(&pk, &own).unwrap();
        gateways.push(start_gateway(&net.gw, label, &config, &own, process));
    }
    assert!(gateways[1].log().contains("enclave process pid"), "{}", gateways[1].log());
    let capture = start_capture(&net.site);

    // The peer: every case, one after the other, in one scapy process.
    let list = format!("[{}]", cases.iter().map(scapy_case).collect::<Vec<_>>().join(",\n"));
    let peer_cases = net.site.write_file("cases.json", &list).unwrap();
    let arg = format!("@{}", peer_cases.display());
    let limit = Duration::from_secs(20 + u64::from(PINGS * ANSWER_WAIT) * cases.len() as u64 / 4);
    let peer =
        net.site.exec(&[venv_python().to_str().unwrap(), peer_script().to_str().unwrap(), &arg], limit);
    let _ = std::fs::remove_file(&peer_cases);
    let peer = peer.unwrap();
    let peer_at = started.elapsed();
    let capture = capture.map(|(p, cap)| {
        stop_capture(p, &cap);
        cap
    });
    let logs: Vec<String> = gateways.into_iter().map(Process::stop).collect();
    let failed: Vec<&str> =
        peer.stdout.lines().filter(|l| !l.contains(&format!("\"ok\": {PINGS}"))).collect();
    assert!(
        peer.success && failed.is_empty() && peer.stdout.lines().count() == cases.len(),
        "scapy peer: {} of {} cases failed:\n{}\nstderr: {}\ninline gateway:\n{}\nprocess gateway:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n"),
        testnet::excerpt(&peer.stderr),
        testnet::excerpt(&logs[0]),
        testnet::excerpt(&logs[1])
    );
    // Each gateway carried exactly its cases' pings, both ways, with nothing dropped on them.
    for (process, log) in [(false, &logs[0]), (true, &logs[1])] {
        for c in cases.iter().filter(|c| c.process == process) {
            let out = format!("sa out out-{} spi {:#010x}: packets={PINGS} ", c.n, c.outbound.spi);
            let inb = format!("sa in spi {:#010x}: packets={PINGS} ", c.inbound.spi);
            for line in [out, inb] {
                assert!(log.lines().any(|l| l.starts_with(&line) && !l.contains("drop.")), "{line}\n{log}");
            }
        }
        for c in &cases {
            for k in [&c.inbound, &c.outbound] {
                assert!(!log.contains(&k.enc[..16]), "no key bytes in the gateway's output");
            }
        }
    }
    if let Some(cap) = capture {
        check_with_tshark(&cap, &cases);
    }
    eprintln!(
        "esp_scapy_live: {} cases ({} pings each way) passed: wrapped in {:.1}s, peer done at {:.1}s, all done in {:.1}s",
        cases.len(),
        PINGS,
        wrapped_at.as_secs_f64(),
        peer_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// What an operator sees when wrapped keys do not fit (no root needed: the enclave refuses
/// before any device is made). Messages name the SA and the reason, never a key or a path.
#[test]
fn wrapped_keys_that_do_not_fit_are_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("cloister-esp-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pk = dir.join("pk");
    let mut keys = Keys(0x5eed);
    std::fs::write(&pk, keys.hex(32)).unwrap();
    std::fs::set_permissions(&pk, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let sa = SaKeys { spi: 0x2001, enc: keys.hex(36), integ: String::new() };
    wrap(&pk, "in", Suite::Gcm256, &sa, &dir.join("in.blob"));
    let config = |encryption: &str, spi: u32, key: &str| {
        format!(
            "[dataplane]\ntun = \"cltunR\"\n\n[[sa]]\nname = \"in\"\ndirection = \"in\"\nspi = {spi}\n\
             local = \"198.18.0.2\"\nremote = \"198.18.0.1\"\nencryption = \"{encryption}\"\n\
             local_ts = [\"198.19.0.0/24\"]\nremote_ts = [\"198.18.128.0/24\"]\nkey = {{ wrapped = \"{key}\" }}\n"
        )
    };
    let run = |name: &str, text: &str, extra: &[&str]| -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let mut argv = vec![CLOISTER, "dataplane", "--config", path.to_str().unwrap()];
        argv.extend_from_slice(extra);
        let out = testnet::run(&argv, Duration::from_secs(20)).unwrap();
        assert!(!out.success, "{name} was accepted");
        for secret in [&sa.enc[..16], "in.blob", "missing.blob"] {
            assert!(!out.stderr.contains(secret), "{name}: the message quotes a value: {}", out.stderr);
        }
        out.stderr
    };
    let pk_arg = ["--provisioning-key", pk.to_str().unwrap(), "--tenant", TENANT];
    let e = run("no-key.toml", &config("aes-gcm-16-256", 0x2001, "in.blob"), &["--tenant", TENANT]);
    assert!(e.contains("wrapped keys need --provisioning-key"), "{e}");
    let e = run("other-spi.toml", &config("aes-gcm-16-256", 0x2002, "in.blob"), &pk_arg);
    assert!(
        e.contains("sa[0]: enclave refused the keys: wrapped ESP SA keys are bound to another SPI"),
        "{e}"
    );
    let e = run("other-suite.toml", &config("aes-gcm-16-128", 0x2001, "in.blob"), &pk_arg);
    assert!(e.contains("bound to another transform"), "{e}");
    let e = run("missing.toml", &config("aes-gcm-16-256", 0x2001, "missing.blob"), &pk_arg);
    assert!(e.contains("sa[0].key.wrapped: neither hex nor the path of a file"), "{e}");
    // Another tenant's enclave cannot open it.
    let e = run(
        "tenant.toml",
        &config("aes-gcm-16-256", 0x2001, "in.blob"),
        &["--provisioning-key", pk.to_str().unwrap(), "--tenant", "8"],
    );
    assert!(e.contains("provisioning blob refused: bound to another tenant"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
