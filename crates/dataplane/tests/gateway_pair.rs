//! Two Cloister data planes carry real traffic between two sites, in four namespaces:
//!
//! ```text
//! site-host ──lan── site-gw ══ESP══ cloud-gw ──lan── cloud-host
//! 198.18.10.10      .10.1 | 198.18.0.1  .0.2 | .20.1    198.18.20.20
//! 2001:db8:a::10    a::1  | 2001:db8::1  ::2 | b::1     2001:db8:b::20
//! ```
//!
//! Each gateway runs a data plane with two workers over a multi-queue TUN device, static
//! SAs for inner IPv4 and IPv6, raw ESP or ESP-in-UDP over outer IPv4 or IPv6. `ping`
//! crosses both ways for every suite × encapsulation × outer family (inner IPv4 and IPv6
//! each time); `iperf3` TCP crosses both ways for one case per suite.
//!
//! Why in-process: each data plane runs in this test process, started from a thread that
//! first moved itself into the gateway's namespace (`cio::netns::enter_named`); its TUN
//! device, sockets and worker threads then live there. The `cloister` binary belongs to
//! another package, so Cargo does not build it for this test (`CARGO_BIN_EXE_*` covers only
//! the package's own binaries); in-process, the test also reads the workers' counters
//! directly, and a panic unwinds into `Drop`s that stop the workers before the namespaces
//! are deleted. The binary's `dataplane` command is the same `Dataplane::start` behind a
//! config file and a signal wait.
//!
//! Skipped, with a notice, where namespaces cannot be made (not root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cloister_dataplane::{self as dataplane, Config, Counter, Dataplane, IoDrop, WorkerSnapshot};
use enclave_core::{EspSaHandle, InlineEnclave};
use esp::config::{Direction, KeyMaterial, KeyRequest};
use esp::DropReason;
use testnet::{Netns, Veth};

/// The namespace tests share two cores: run them one at a time so iperf3 figures and
/// timeouts do not depend on what else runs.
static SERIAL: Mutex<()> = Mutex::new(());

fn skip() -> bool {
    if testnet::can_create_namespaces() {
        false
    } else {
        testnet::skip("needs root to create network namespaces");
        true
    }
}

/// The four hosts.
struct Sites {
    site_host: Netns,
    site_gw: Netns,
    cloud_gw: Netns,
    cloud_host: Netns,
}

impl Sites {
    fn build() -> Self {
        let s = Self {
            site_host: Netns::new("sh").unwrap(),
            site_gw: Netns::new("sg").unwrap(),
            cloud_gw: Netns::new("cg").unwrap(),
            cloud_host: Netns::new("ch").unwrap(),
        };
        Veth::connect(&s.site_host, "eth0", &s.site_gw, "lan0").unwrap();
        Veth::connect(&s.site_gw, "wan0", &s.cloud_gw, "wan0").unwrap();
        Veth::connect(&s.cloud_gw, "lan0", &s.cloud_host, "eth0").unwrap();
        for (ns, dev, addrs) in [
            (&s.site_host, "eth0", ["198.18.10.10/24", "2001:db8:a::10/64"]),
            (&s.site_gw, "lan0", ["198.18.10.1/24", "2001:db8:a::1/64"]),
            (&s.site_gw, "wan0", ["198.18.0.1/24", "2001:db8::1/64"]),
            (&s.cloud_gw, "wan0", ["198.18.0.2/24", "2001:db8::2/64"]),
            (&s.cloud_gw, "lan0", ["198.18.20.1/24", "2001:db8:b::1/64"]),
            (&s.cloud_host, "eth0", ["198.18.20.20/24", "2001:db8:b::20/64"]),
        ] {
            for a in addrs {
                ns.add_addr(dev, a).unwrap();
            }
        }
        s.site_host.add_route("default", "198.18.10.1").unwrap();
        s.site_host.add_route("default", "2001:db8:a::1").unwrap();
        s.cloud_host.add_route("default", "198.18.20.1").unwrap();
        s.cloud_host.add_route("default", "2001:db8:b::1").unwrap();
        s.site_gw.enable_forwarding().unwrap();
        s.cloud_gw.enable_forwarding().unwrap();
        // IPv6 resolves neighbours only from a link-local address that passed duplicate
        // address detection (the global ones are added `nodad`): until then, forwarded
        // IPv6 packets wait for a Neighbor Solicitation that is never sent.
        for ns in [&s.site_host, &s.site_gw, &s.cloud_gw, &s.cloud_host] {
            testnet::wait_until("IPv6 link-local addresses past DAD", Duration::from_secs(10), || {
                ns.ip(&["-6", "addr", "show", "tentative"]).is_ok_and(|o| o.stdout.trim().is_empty())
            })
            .unwrap();
        }
        s
    }
}

/// An ESP transform as the config file names it, with its key lengths.
#[derive(Debug, Clone, Copy)]
struct Suite {
    encryption: &'static str,
    integrity: Option<&'static str>,
    enc_len: usize,
    integ_len: usize,
    esn: bool,
}

const SUITES: [Suite; 5] = [
    Suite { encryption: "aes-gcm-16-128", integrity: None, enc_len: 20, integ_len: 0, esn: false },
    Suite { encryption: "aes-gcm-16-256", integrity: None, enc_len: 36, integ_len: 0, esn: true },
    Suite { encryption: "chacha20-poly1305", integrity: None, enc_len: 36, integ_len: 0, esn: false },
    Suite {
        encryption: "aes-cbc-256",
        integrity: Some("hmac-sha2-256-128"),
        enc_len: 32,
        integ_len: 32,
        esn: true,
    },
    Suite {
        encryption: "aes-cbc-128",
        integrity: Some("hmac-sha2-512-256"),
        enc_len: 16,
        integ_len: 64,
        esn: false,
    },
];

#[derive(Debug, Clone, Copy)]
struct Case {
    suite: Suite,
    udp: bool,
    outer_v6: bool,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let integ = self.suite.integrity.map(|i| format!("+{i}")).unwrap_or_default();
        let encap = if self.udp { "esp-in-udp" } else { "raw esp" };
        let outer = if self.outer_v6 { "ipv6" } else { "ipv4" };
        write!(f, "{}{integ}, {encap}, outer {outer}", self.suite.encryption)
    }
}

/// Deterministic key bytes, different per SPI.
fn key_hex(len: usize, spi: u32) -> String {
    let seed = spi.to_be_bytes()[3].wrapping_mul(37);
    (0..len)
        .map(|i| format!("{:02x}", seed.wrapping_add(u8::try_from(i).unwrap().wrapping_mul(11))))
        .collect()
}

/// One gateway's config file: SA pairs for inner IPv4 and IPv6, and their policies.
fn gateway_config(case: Case, site: bool) -> String {
    let (me, peer) = match (case.outer_v6, site) {
        (false, true) => ("198.18.0.1", "198.18.0.2"),
        (false, false) => ("198.18.0.2", "198.18.0.1"),
        (true, true) => ("2001:db8::1", "2001:db8::2"),
        (true, false) => ("2001:db8::2", "2001:db8::1"),
    };
    let nets = [("198.18.10.0/24", "198.18.20.0/24", 0x10u32), ("2001:db8:a::/48", "2001:db8:b::/48", 0x20)];
    let mut text = format!(
        "[dataplane]\ntun = \"cltun0\"\nroutes = [\"{}\", \"{}\"]\nworkers = 2\nbatch = 64\n\n",
        if site { "198.18.20.0/24" } else { "198.18.10.0/24" },
        if site { "2001:db8:b::/48" } else { "2001:db8:a::/48" },
    );
    for (site_net, cloud_net, base) in nets {
        let (my_net, peer_net) = if site { (site_net, cloud_net) } else { (cloud_net, site_net) };
        // SPI site->cloud: base+1, cloud->site: base+2.
        let (out_spi, in_spi) = if site { (base + 1, base + 2) } else { (base + 2, base + 1) };
        for (name, dir, spi) in [("out", "out", out_spi), ("in", "in", in_spi)] {
            let s = case.suite;
            let integrity = s.integrity.map(|i| format!("integrity = \"{i}\"\n")).unwrap_or_default();
            let integ_key = if s.integ_len > 0 {
                format!(", raw_integrity = \"{}\"", key_hex(s.integ_len, spi + 0x80))
            } else {
                String::new()
            };
            let udp = if case.udp { "udp_encap = {}\n" } else { "" };
            text += &format!(
                "[[sa]]\nname = \"{name}{base}\"\ndirection = \"{dir}\"\nspi = {spi}\nlocal = \"{me}\"\n\
                 remote = \"{peer}\"\nencryption = \"{}\"\n{integrity}esn = {}\n{udp}\
                 local_ts = [\"{my_net}\"]\nremote_ts = [\"{peer_net}\"]\n\
                 key = {{ raw_encryption = \"{}\"{integ_key} }}\n\n",
                s.encryption,
                s.esn,
                key_hex(s.enc_len, spi),
            );
        }
        text += &format!(
            "[[policy]]\nlocal = \"{my_net}\"\nremote = \"{peer_net}\"\naction = \"protect\"\nsa = \"out{base}\"\n\n"
        );
    }
    text
}

fn install_raw(e: &mut InlineEnclave, r: &KeyRequest<'_>) -> Result<EspSaHandle, enclave_core::Error> {
    match r.keys {
        KeyMaterial::Raw { encryption, integrity } => {
            e.esp_sa_install_raw(r.spi, r.direction == Direction::In, r.esn, r.suite, encryption, integrity)
        }
        KeyMaterial::Wrapped(_) => Err(enclave_core::Error::Unsupported { what: "wrapped keys", value: 0 }),
    }
}

/// An in-process enclave for `tenant` with a fresh provisioning key, software-attested.
fn inline_enclave(tenant: u32) -> InlineEnclave {
    use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
    let config = enclave_core::EnclaveConfig {
        tenant: enclave_core::TenantId(tenant),
        provisioning_key: enclave_core::ProvisioningKey::generate().unwrap(),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: enclave_core::Limits::default(),
    };
    let key = SoftwareAttestation::generate_platform_key().unwrap();
    let measured = config.measured_bytes(enclave_core::Backend::Inline);
    let att =
        SoftwareAttestation::new(&key, CodeIdentity::Bytes(b"gateway-pair".to_vec()), &measured).unwrap();
    InlineEnclave::start(config, Box::new(att)).unwrap()
}

/// Starts a data plane inside `ns`, from a thread that entered it.
fn start_in(ns: &Netns, text: String) -> Dataplane<InlineEnclave> {
    let name = ns.name().to_owned();
    std::thread::spawn(move || {
        cio::netns::enter_named(&name).unwrap();
        let config = Config::parse(&text).unwrap();
        let enclave = inline_enclave(7);
        Dataplane::start(&config, enclave, install_raw).unwrap()
    })
    .join()
    .unwrap()
}

/// Drops no correct tunnel should have: anything but packets with no policy (the kernel
/// sends IPv6 router solicitations and MLD reports into a fresh TUN device).
fn bad_drops(s: &WorkerSnapshot) -> Vec<String> {
    let mut bad: Vec<String> = s
        .esp_drops()
        .filter(|(r, _)| *r != DropReason::NoPolicy)
        .map(|(r, n)| format!("esp.{r}={n}"))
        .collect();
    bad.extend(
        IoDrop::ALL.iter().filter(|&&d| s.io_drop(d) > 0).map(|&d| format!("io.{d}={}", s.io_drop(d))),
    );
    bad
}

/// A pair of running gateways.
struct Pair {
    site: Dataplane<InlineEnclave>,
    cloud: Dataplane<InlineEnclave>,
}

impl Pair {
    fn start(net: &Sites, case: Case) -> Self {
        Self {
            site: start_in(&net.site_gw, gateway_config(case, true)),
            cloud: start_in(&net.cloud_gw, gateway_config(case, false)),
        }
    }

    /// Stops both and checks that nothing was dropped for a bad reason; returns the totals.
    fn stop(self, case: Case) -> (WorkerSnapshot, WorkerSnapshot) {
        let mut totals = Vec::new();
        for (side, dp) in [("site", self.site), ("cloud", self.cloud)] {
            let r = dp.stop();
            assert!(r.panicked.is_empty(), "{case}: {side} workers panicked: {:?}", r.panicked);
            let total = WorkerSnapshot::sum(&r.workers);
            assert!(bad_drops(&total).is_empty(), "{case}: {side} dropped: {}", total);
            totals.push(total);
        }
        let cloud = totals.pop().unwrap();
        let site = totals.pop().unwrap();
        (site, cloud)
    }
}

fn ping_both_ways(net: &Sites, pair: &Pair, case: Case) {
    for (from, to, dst) in [
        (&net.site_host, "cloud", "198.18.20.20"),
        (&net.site_host, "cloud", "2001:db8:b::20"),
        (&net.cloud_host, "site", "198.18.10.10"),
        (&net.cloud_host, "site", "2001:db8:a::10"),
    ] {
        if !from.ping(dst, 2).unwrap() {
            let site = WorkerSnapshot::sum(&pair.site.snapshot());
            let cloud = WorkerSnapshot::sum(&pair.cloud.snapshot());
            panic!("{case}: ping to the {to} host {dst} failed\n  site  {site}\n  cloud {cloud}");
        }
    }
}

#[test]
fn ping_crosses_for_every_suite_encapsulation_and_family() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let net = Sites::build();
    let started = Instant::now();
    for suite in SUITES {
        for udp in [false, true] {
            for outer_v6 in [false, true] {
                let case = Case { suite, udp, outer_v6 };
                let pair = Pair::start(&net, case);
                ping_both_ways(&net, &pair, case);
                let (site, cloud) = pair.stop(case);
                // 2 pings x 2 families each way: requests and replies went through ESP.
                for (side, t) in [("site", &site), ("cloud", &cloud)] {
                    assert!(t.get(Counter::Encapsulated) >= 8, "{case}: {side} {t}");
                    assert!(t.get(Counter::Decapsulated) >= 8, "{case}: {side} {t}");
                }
            }
        }
    }
    eprintln!("ping matrix: 20 cases, inner IPv4 and IPv6 both ways, in {:?}", started.elapsed());
}

/// Runs an iperf3 TCP test from `client` to `server_addr` for `seconds`; `reverse` makes
/// the server send. Returns the receiver's Mbit/s.
fn iperf3(client: &Netns, server: &Netns, server_addr: &str, seconds: u32, reverse: bool) -> f64 {
    let extra: &[&str] = if reverse { &["-R"] } else { &[] };
    let (line, stdout) = iperf3_receiver(client, server, server_addr, seconds, extra);
    let words: Vec<&str> = line.split_whitespace().collect();
    let rate = words
        .windows(2)
        .find_map(|w| {
            let scale = match w[1] {
                "Gbits/sec" => 1000.0,
                "Mbits/sec" => 1.0,
                "Kbits/sec" => 0.001,
                _ => return None,
            };
            w[0].parse::<f64>().ok().map(|v| v * scale)
        })
        .unwrap_or(0.0);
    assert!(rate > 0.0, "no receiver rate in iperf3 output:\n{stdout}");
    rate
}

/// Runs an iperf3 client from `client` against a server started in `server` for `seconds`,
/// with `extra` client arguments; returns the summary's "receiver" line and the whole output.
fn iperf3_receiver(
    client: &Netns,
    server: &Netns,
    server_addr: &str,
    seconds: u32,
    extra: &[&str],
) -> (String, String) {
    let mut srv = server.spawn("iperf3-server", &["iperf3", "-s", "-p", "5201", "--forceflush"]).unwrap();
    srv.wait_for_log("Server listening", Duration::from_secs(10)).unwrap();
    let t = seconds.to_string();
    let mut argv = vec!["iperf3", "-c", server_addr, "-p", "5201", "-t", &t, "--connect-timeout", "3000"];
    argv.extend_from_slice(extra);
    let out = client.exec(&argv, Duration::from_secs(u64::from(seconds) + 20)).unwrap();
    drop(srv);
    assert!(out.success, "iperf3 {argv:?} failed: {}\n{}", out.stdout, out.stderr);
    let line = out.stdout.lines().rfind(|l| l.contains("receiver")).unwrap_or_default().to_string();
    (line, out.stdout)
}

/// One case per suite, covering both encapsulations, both outer and both inner families.
fn iperf_cases() -> [(Case, bool); 5] {
    let [gcm128, gcm256, chacha, cbc256, cbc128] = SUITES;
    [
        (Case { suite: gcm128, udp: true, outer_v6: false }, false),
        (Case { suite: gcm256, udp: false, outer_v6: true }, true),
        (Case { suite: chacha, udp: true, outer_v6: true }, false),
        (Case { suite: cbc256, udp: false, outer_v6: false }, true),
        (Case { suite: cbc128, udp: true, outer_v6: false }, true),
    ]
}

fn iperf_run(cases: &[(Case, bool)], seconds: u32) {
    let net = Sites::build();
    let started = Instant::now();
    for &(case, inner_v6) in cases {
        let pair = Pair::start(&net, case);
        if started.elapsed() < Duration::from_secs(1) {
            // What the kernel of this machine accepted, for the record.
            eprintln!("offloads: site {}, cloud {}", pair.site.offloads(), pair.cloud.offloads());
        }
        let tso = pair.site.offloads().tun.any_gso();
        let pair_tun_offloads = pair.site.offloads().tun;
        let (to_cloud, to_site) = if inner_v6 { ("2001:db8:b::20", "ip6") } else { ("198.18.20.20", "ip4") };
        let up = iperf3(&net.site_host, &net.cloud_host, to_cloud, seconds, false);
        let down = iperf3(&net.site_host, &net.cloud_host, to_cloud, seconds, true);
        let (site, cloud) = pair.stop(case);
        eprintln!("iperf3 {case}, inner {to_site}: site->cloud {up:.0} Mbit/s, cloud->site {down:.0} Mbit/s");
        eprintln!("  site  {site}");
        eprintln!("  cloud {cloud}");
        if tso {
            assert!(
                site.get(Counter::TunRxSuper) > 0,
                "{case}: TSO accepted but no super-packet read: {site}"
            );
        }
        // Both gateways received a bulk TCP flow (one each way): its segments go into their
        // TUN queues merged, where the queue takes TSO for the inner family.
        let offloads = pair_tun_offloads;
        if if inner_v6 { offloads.tso6 } else { offloads.tso4 } {
            for (who, s) in [("site", &site), ("cloud", &cloud)] {
                assert!(s.get(Counter::TunTxSuper) > 0, "{case}: {who} merged no TCP segments: {s}");
                assert!(
                    s.get(Counter::TunTxWrites) < s.get(Counter::TunTx),
                    "{case}: {who} wrote every packet alone: {s}"
                );
            }
        }
    }
}

/// A UDP counter of `ns`: `field` of the `Udp:` lines of `/proc/net/snmp`, or for IPv6
/// `Udp6<field>` of `/proc/net/snmp6`.
fn udp_counter(ns: &Netns, v6: bool, field: &str) -> u64 {
    let file = if v6 { "/proc/net/snmp6" } else { "/proc/net/snmp" };
    let out = ns.exec_ok(&["cat", file], Duration::from_secs(5)).unwrap();
    let value = if v6 {
        let name = format!("Udp6{field}");
        out.stdout.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name.as_str())).then(|| w.next()).flatten()
        })
    } else {
        let mut udp = out.stdout.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next().unwrap_or_default(), udp.next().unwrap_or_default());
        names.split_whitespace().position(|n| n == field).and_then(|at| values.split_whitespace().nth(at))
    };
    value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no UDP counter {field} in {file}"))
}

/// The datagrams lost and sent of an iperf3 UDP summary line ("... 12/78125 (0.015%)
/// receiver").
fn lost_and_sent(line: &str, stdout: &str) -> (u64, u64) {
    line.split_whitespace()
        .find_map(|w| {
            let (a, b) = w.split_once('/')?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no lost/sent in iperf3 output:\n{stdout}"))
}

/// The packets raw sockets of `ns` dropped (the last column of `/proc/net/raw` or `raw6`):
/// a full receive queue.
fn raw_socket_drops(ns: &Netns, v6: bool) -> u64 {
    let file = if v6 { "/proc/net/raw6" } else { "/proc/net/raw" };
    let out = ns.exec_ok(&["cat", file], Duration::from_secs(5)).unwrap();
    out.stdout.lines().skip(1).filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok()).sum()
}

/// Raw ESP at a rate the receiver keeps up with (iperf3 UDP, 1000-byte datagrams at
/// 40 Mbit/s, about 5,000 a second in millisecond bursts), over each outer family: the
/// receiving gateway's raw socket drops nothing, its workers see no packet twice or out of
/// their window (no replay drops: one reader per raw socket), and at most 0.1 % of the
/// datagrams are lost end to end.
#[test]
fn raw_esp_at_a_rate_the_receiver_keeps_up_with_loses_nothing_at_the_socket() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let net = Sites::build();
    for outer_v6 in [false, true] {
        let case = Case { suite: SUITES[1], udp: false, outer_v6 };
        let pair = Pair::start(&net, case);
        let drops0 = raw_socket_drops(&net.cloud_gw, outer_v6);
        let udp = ["-u", "-l", "1000", "-b", "40M"];
        let (line, stdout) = iperf3_receiver(&net.site_host, &net.cloud_host, "198.18.20.20", 2, &udp);
        let (lost, sent) = lost_and_sent(&line, &stdout);
        let socket_drops = raw_socket_drops(&net.cloud_gw, outer_v6) - drops0;
        // Stopping checks that neither gateway dropped a packet for a bad reason (replay
        // included).
        let (_, cloud) = pair.stop(case);
        eprintln!("{case}: {sent} sent, {lost} lost, cloud raw socket drops {socket_drops}");
        eprintln!("  cloud {cloud}");
        assert_eq!(socket_drops, 0, "{case}: the cloud gateway's raw socket overflowed: {cloud}");
        assert!(sent > 5_000, "{case}: only {sent} datagrams sent");
        assert!(lost * 1000 <= sent, "{case}: {lost} of {sent} lost: {cloud}");
        assert!(cloud.get(Counter::Decapsulated) >= sent - lost, "{case}: {cloud}");
    }
}

/// A paced stream of 64-byte UDP datagrams from the site host to the cloud host, for each
/// inner family: the receiving gateway writes runs of them into its TUN queue as USO
/// super-packets (where the queue takes them), and the kernel cuts them back into
/// datagrams that reach iperf3 with good checksums.
#[test]
fn iperf3_udp_datagrams_arrive_intact_through_merged_tun_writes() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let net = Sites::build();
    // Checksums finished in software on the way out of the cloud gateway and checked in
    // software on the way in to the host: a veth otherwise hands the host a datagram whose
    // checksum is still "to be computed", which the host trusts, so a wrong partial sum in a
    // super-packet would go unseen.
    net.cloud_gw.exec_ok(&["ethtool", "-K", "lan0", "tx", "off"], Duration::from_secs(5)).unwrap();
    net.cloud_host.exec_ok(&["ethtool", "-K", "eth0", "rx", "off"], Duration::from_secs(5)).unwrap();
    let case = Case { suite: SUITES[1], udp: true, outer_v6: false };
    for (to_cloud, v6) in [("198.18.20.20", false), ("2001:db8:b::20", true)] {
        let pair = Pair::start(&net, case);
        let uso = if v6 { pair.cloud.offloads().tun.uso6 } else { pair.cloud.offloads().tun.uso4 };
        let counters = || {
            (
                udp_counter(&net.cloud_host, v6, "InCsumErrors"),
                udp_counter(&net.cloud_host, v6, "InDatagrams"),
            )
        };
        let (errors0, in0) = counters();
        // 10 Mbit/s of 64-byte payloads: about 19,500 datagrams a second, sent in bursts
        // (iperf3 paces per millisecond), so batches carry runs of them.
        let udp = ["-u", "-l", "64", "-b", "10M"];
        let (line, stdout) = iperf3_receiver(&net.site_host, &net.cloud_host, to_cloud, 2, &udp);
        let (lost, sent) = lost_and_sent(&line, &stdout);
        let (errors, received) = counters();
        let (errors, received) = (errors - errors0, received - in0);
        let (site, cloud) = pair.stop(case);
        eprintln!("iperf3 udp 64 B to {to_cloud}: {sent} sent, {lost} lost; cloud host: {received} datagrams in, {errors} checksum errors");
        eprintln!("  cloud {cloud}");
        // Loss is not what this test measures (the iperf3 processes themselves drop some on two
        // shared vCPUs, before the site's TUN and after the cloud's): most datagrams must
        // arrive, and every one that arrives must be intact.
        assert!(sent > 10_000 && lost * 4 < sent, "{to_cloud}: {lost} of {sent} lost: {site}\n{cloud}");
        assert_eq!(errors, 0, "{to_cloud}: datagrams with bad checksums reached the host");
        assert!(received >= sent - lost, "{to_cloud}: the host counted {received} datagrams");
        if uso {
            assert!(
                cloud.get(Counter::TunTxSuper) > 0,
                "{to_cloud}: USO accepted but nothing merged: {cloud}"
            );
            assert!(
                cloud.get(Counter::TunTxWrites) * 2 < cloud.get(Counter::TunTx),
                "{to_cloud}: few merges: {cloud}"
            );
        }
    }
}

#[test]
fn iperf3_tcp_crosses_both_ways_for_each_suite() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    iperf_run(&iperf_cases(), 2);
}

/// The long variant: every suite, both encapsulations and outer families, 5 s each way.
#[test]
#[ignore = "long: about 5 minutes"]
fn iperf3_tcp_long_runs_for_every_case() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cases = Vec::new();
    for suite in SUITES {
        for (udp, outer_v6, inner_v6) in
            [(false, false, false), (true, true, true), (true, false, true), (false, true, false)]
        {
            cases.push((Case { suite, udp, outer_v6 }, inner_v6));
        }
    }
    iperf_run(&cases, 5);
}

/// One peer's ESP-in-UDP SA: with the kernel's hash (the default) its packets reach one of
/// the cloud gateway's two workers; with `spread_inbound` both workers decapsulate it, in
/// runs of 32 sequence numbers, and a TCP flow still crosses with no drop for a bad reason
/// (the reordering between runs stays inside the replay window), and the inbound SAs, which
/// set no window, get the data plane's (deeper when spread).
#[test]
fn spread_inbound_puts_one_peers_sa_on_every_worker() {
    if skip() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let net = Sites::build();
    let case = Case { suite: SUITES[1], udp: true, outer_v6: false };
    for spread in [false, true] {
        let knob = format!("batch = 64\nspread_inbound = {spread}\n");
        let site = start_in(&net.site_gw, gateway_config(case, true).replacen("batch = 64\n", &knob, 1));
        let cloud = start_in(&net.cloud_gw, gateway_config(case, false).replacen("batch = 64\n", &knob, 1));
        assert_eq!(cloud.inbound_steering(), if spread { "sequence" } else { "peer" });
        // Spread, the workers reorder one SA more: its window is deeper unless configured.
        let window = if spread { dataplane::config::SPREAD_WINDOW } else { esp::DEFAULT_WINDOW };
        assert_eq!(cloud.replay_window(), window);
        let sizes = cloud
            .read(|sad, _| [0x11, 0x21].map(|spi| sad.inbound(spi).map(|s| s.runtime().window().size())));
        assert_eq!(
            sizes,
            Some([Some(u64::from(window)); 2]),
            "spread {spread}: the static inbound SAs' windows"
        );
        let rate = iperf3(&net.site_host, &net.cloud_host, "198.18.20.20", 2, false);
        let _ = site.stop();
        let r = cloud.stop();
        assert!(r.panicked.is_empty(), "spread {spread}: cloud workers panicked");
        let total = WorkerSnapshot::sum(&r.workers);
        assert!(bad_drops(&total).is_empty(), "spread {spread}: cloud dropped: {total}");
        let per: Vec<u64> = r.workers.iter().map(|w| w.get(Counter::Decapsulated)).collect();
        let all: u64 = per.iter().sum();
        eprintln!("spread_inbound = {spread}: {rate:.0} Mbit/s, decapsulated per cloud worker {per:?}");
        assert!(all > 10_000, "spread {spread}: {all} packets decapsulated");
        let busy = per.iter().filter(|&&p| p * 10 > all).count();
        if spread {
            assert_eq!(busy, per.len(), "every worker takes a share: {per:?}");
        } else {
            assert_eq!(busy, 1, "the kernel's hash keeps one peer on one worker: {per:?}");
        }
    }
}
