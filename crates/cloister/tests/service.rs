//! The multi-tenant service end to end: `cloister serve` with two tenants whose on-premise
//! sites are real strongSwan instances, each tenant on its own enclave process and with its
//! cloud side in its own namespace, both using the same inner addresses.
//!
//! ```text
//!  site-a (charon) ── 198.18.1.0/24 ──┐                 ┌── TUN clt-a ── cloud-a (198.19.2.1)
//!                                     ├─ svc: serve ────┤
//!  site-b (charon) ── 198.18.2.0/24 ──┘  (API, store)   └── TUN clt-b ── cloud-b (198.19.2.1)
//!  both sites: 198.19.1.1 inside
//! ```
//!
//! Secrets are provisioned only by attestation (`cloister tenant provision`); the service's
//! files never hold them. Needs root and strongSwan; elsewhere each test prints a notice and
//! passes without running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod common;

use common::{
    assert_denied_as, capabilities_of, longest_gap, start_charon, uid_of, CHARON, CLOISTER, GW_ID, PSK,
};
use testnet::{Netns, Process, Veth};

const SITE_INNER: &str = "198.19.1.1";
const CLOUD_INNER: &str = "198.19.2.1";
const API: &str = "http://127.0.0.1:9440";
/// Tenant B's PSK: a different secret, as random-looking as the shared one.
const PSK_B: &str = "Xv3q-Lp8t-Wn2m-Hc7r-Jd4k-Fz9s-Qb6y-Tg5e";

struct Tenant {
    name: &'static str,
    id: u32,
    site_id: &'static str,
    psk: &'static str,
    /// Outer /24: site .1, gateway .2.
    net: &'static str,
}

const A: Tenant = Tenant { name: "acme", id: 1, site_id: "site-a.cloister.test", psk: PSK, net: "198.18.1" };
const B: Tenant =
    Tenant { name: "blue", id: 2, site_id: "site-b.cloister.test", psk: PSK_B, net: "198.18.2" };

fn tenant_conf(t: &Tenant, cloud: &Netns) -> String {
    format!(
        r#"
[tenants.{name}]
id = {id}
initiate = ["site"]
engine = {{ retransmit_timeout = "500ms", retransmit_tries = 4 }}
[tenants.{name}.dataplane]
tun = "clt-{name}"
tun_netns = "{cloud}"
tun_addresses = ["{CLOUD_INNER}/32"]
listen = ["{net}.2:4500"]
workers = 1
[tenants.{name}.connections.site]
local_addrs = ["{net}.2"]
remote_addrs = ["{net}.1"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
dpd_delay = "2s"
local = {{ auth = "psk", id = "{GW_ID}", secret = "psk" }}
remote = {{ auth = "psk", id = "{site_id}" }}
children.net = {{ local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["aes256gcm16"] }}
[tenants.{name}.secrets.psk]
"#,
        name = t.name,
        id = t.id,
        cloud = cloud.name(),
        net = t.net,
        site_id = t.site_id,
    )
}

fn swanctl_conf(t: &Tenant) -> String {
    let (local, remote) = (format!("{}.1", t.net), format!("{}.2", t.net));
    common::site_swanctl_conf(&local, &remote, t.site_id, SITE_INNER, t.psk)
}

/// One tenant's on-premise site: a namespace with charon, and its cloud side.
struct Site {
    _charon: Process,
    _echo: Process,
    ns: Netns,
    cloud: Netns,
}

impl Site {
    fn start(t: &Tenant, svc: &Netns) -> Self {
        let ns = Netns::new(&format!("site{}", t.id)).unwrap();
        let cloud = Netns::new(&format!("cloud{}", t.id)).unwrap();
        Veth::connect(&ns, "wan0", svc, &format!("wan{}", t.id)).unwrap();
        ns.add_addr("wan0", &format!("{}.1/24", t.net)).unwrap();
        svc.add_addr(&format!("wan{}", t.id), &format!("{}.2/24", t.net)).unwrap();
        ns.add_addr("lo", &format!("{SITE_INNER}/32")).unwrap();
        let swanctl = ns.write_file("swanctl/swanctl.conf", &swanctl_conf(t)).unwrap();
        let charon = start_charon(&ns, false);
        let vici = ns.dir().join("charon.vici");
        let uri = format!("unix://{}", vici.display());
        let out = ns
            .exec(
                &["swanctl", "--load-all", "--file", swanctl.to_str().unwrap(), "--uri", &uri],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(out.success, "swanctl --load-all: {}{}", out.stdout, out.stderr);
        // Answers UDP on the inner address with the site's name: who receives a cloud
        // side's datagram shows which tunnel carried it.
        let echo = ns
            .spawn(
                "echo",
                &[
                    "python3",
                    "-c",
                    &format!(
                        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{SITE_INNER}',7777))\nprint('echo ready',flush=True)\nfor _ in range(10000):\n d,a=s.recvfrom(2048)\n s.sendto(b'{}:'+d,a)\n",
                        t.name
                    ),
                ],
            )
            .unwrap();
        Self { _charon: charon, _echo: echo, ns, cloud }
    }

    fn charon_log(&self) -> String {
        testnet::excerpt(&std::fs::read_to_string(self.ns.dir().join("charon.log")).unwrap_or_default())
    }

    /// Pings the cloud side through the tunnel, waiting for every reply; (sent, received).
    fn ping(&self, count: u32, interval: &str) -> (u32, u32, String) {
        let (got, out) = common::ping_every_reply(&self.ns, count, interval, SITE_INNER, CLOUD_INNER);
        (count, got, out)
    }

    /// One ping through the tunnel, 1 s to answer: whether it came back.
    fn probe(&self) -> bool {
        common::probe(&self.ns, SITE_INNER, CLOUD_INNER)
    }
}

/// Pings the cloud side from `site` in the background every 20 ms, `count` times (with
/// `every_reply`, waiting for all replies: for a tunnel that must lose none).
fn background_ping(site: &Netns, count: u32, every_reply: bool) -> std::thread::JoinHandle<String> {
    common::background_ping(site, count, "0.02", every_reply, SITE_INNER, CLOUD_INNER)
}

/// A UDP datagram from a cloud side to 198.19.1.1:7777; the answering site's name.
fn who_answers(cloud: &Netns) -> String {
    let script = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{CLOUD_INNER}',0))\ns.settimeout(1)\nfor _ in range(5):\n s.sendto(b'hello',('{SITE_INNER}',7777))\n try:\n  print(s.recv(100).decode()); break\n except OSError: pass\n"
    );
    let out = cloud.exec(&["python3", "-c", &script], Duration::from_secs(20)).unwrap();
    out.stdout.trim().to_owned()
}

/// The tenant's side: makes a provisioning signer at `key` (`cloister tenant signer-key`)
/// and returns its public key.
fn signer_key(ns: &Netns, key: &Path) -> String {
    let out = ns
        .exec(&[CLOISTER, "tenant", "signer-key", "--out", key.to_str().unwrap()], Duration::from_secs(30))
        .unwrap();
    assert!(out.success, "tenant signer-key: {}", out.stderr);
    out.stdout.trim().to_owned()
}

/// The service namespace, the service process and both sites.
struct Bed {
    svc_process: Option<Process>,
    cas_process: Option<Process>,
    sites: Vec<Site>,
    svc: Netns,
    conf: std::path::PathBuf,
    /// Tenant B's provisioning signer (its key file on the site, its public key), where the
    /// service's file names it (`provisioning_signers`): B's enclave takes only what it signed.
    b_signer: Option<(std::path::PathBuf, String)>,
    /// Tenant A's provisioning signer's public key where A comes from the CAS, which holds
    /// the key (`signer_key`) and lists the signer, so A's enclave takes only what it signed.
    a_signer: Option<String>,
}

/// Where the service's tenants come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The service's own file.
    File,
    /// A `cloister cas` (run in the service's namespace on loopback, its files in the
    /// tenant's own directory): tenant A with the right measurement, B with a wrong one.
    Cas,
}

const CAS: &str = "http://127.0.0.1:9450";

impl Bed {
    fn start() -> Option<Self> {
        Self::start_from(Source::File)
    }

    fn start_from(source: Source) -> Option<Self> {
        if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
            testnet::skip("needs root and strongSwan; run scripts/setup.sh");
            return None;
        }
        let svc = Netns::new("svc").unwrap();
        let sites: Vec<Site> = [&A, &B].iter().map(|t| Site::start(t, &svc)).collect();
        let mut b_signer = None;
        let mut a_signer = None;
        let mut text =
            "[service]\nstate = \"state.redb\"\napi = \"127.0.0.1:9440\"\napi_token = \"api.token\"\n"
                .to_owned();
        if source == Source::Cas {
            let key = sites[0].ns.dir().join("cas/acme.signer");
            std::fs::create_dir_all(key.parent().unwrap()).unwrap();
            a_signer = Some(signer_key(&sites[0].ns, &key));
            let token = sites[0].ns.dir().join("cas/gw1.token");
            text.push_str(&format!("cas = \"{CAS}\"\ncas_token = \"{}\"\n", token.display()));
        } else {
            let key = sites[1].ns.dir().join("signer.key");
            let public = signer_key(&sites[1].ns, &key);
            text.push_str(&tenant_conf(&A, &sites[0].cloud));
            text.push_str(&tenant_conf(&B, &sites[1].cloud).replace(
                "initiate = [\"site\"]\n",
                &format!("initiate = [\"site\"]\nprovisioning_signers = [\"{public}\"]\n"),
            ));
            b_signer = Some((key, public));
        }
        let conf = svc.write_file("service.toml", &text).unwrap();
        let mut bed = Self { svc_process: None, cas_process: None, sites, svc, conf, b_signer, a_signer };
        if source == Source::Cas {
            let platform =
                bed.cli_ok(&["platform-key", "--config", bed.conf.to_str().unwrap()]).trim().to_owned();
            let wrong_b = "00".repeat(48);
            bed.write_cas(&platform, &[(&A, &bed.measurement(A.id)), (&B, &wrong_b)]);
            let cas_conf = bed.sites[0].ns.dir().join("cas/cas.toml");
            let mut p =
                bed.svc.spawn("cas", &[CLOISTER, "cas", "--config", cas_conf.to_str().unwrap()]).unwrap();
            p.wait_for_log("cas: listening", Duration::from_secs(30)).unwrap();
            bed.cas_process = Some(p);
        }
        bed.serve();
        Some(bed)
    }

    /// The CAS's file (the tenants' side): both tenants for gateway gw1, each PSK in a
    /// file next to it, each tenant with the measurement given.
    fn write_cas(&self, platform: &str, tenants: &[(&Tenant, &str)]) {
        let ns = &self.sites[0].ns;
        let mut text = format!(
            "[cas]\nlisten = \"127.0.0.1:9450\"\n[gateways.gw1]\ntoken = \"gw1.token\"\nplatform_key = \"{platform}\"\ntenants = [\"acme\", \"blue\"]\n"
        );
        for (t, m) in tenants {
            ns.write_file(&format!("cas/{}.psk", t.name), &format!("{}\n", t.psk)).unwrap();
            let site = &self.sites[usize::try_from(t.id - 1).unwrap()];
            // A signs its secrets: the CAS holds its signer and lists the public key.
            let signing = match (&self.a_signer, t.id == A.id) {
                (Some(public), true) => {
                    format!("signer_key = \"{}.signer\"\nprovisioning_signers = [\"{public}\"]\n", t.name)
                }
                _ => String::new(),
            };
            let table = tenant_conf(t, &site.cloud)
                .replace(
                    &format!("[tenants.{}]\n", t.name),
                    &format!("[tenants.{}]\nmeasurement = \"{m}\"\n{signing}", t.name),
                )
                .replace(
                    &format!("[tenants.{}.secrets.psk]\n", t.name),
                    &format!("[tenants.{}.secrets.psk]\npsk_file = \"{}.psk\"\n", t.name, t.name),
                );
            text.push_str(&table);
        }
        ns.write_file("cas/cas.toml", &text).unwrap();
    }

    fn cas_log(&self) -> String {
        self.cas_process.as_ref().map(Process::log).unwrap_or_default()
    }

    fn serve(&mut self) {
        let mut p =
            self.svc.spawn("serve", &[CLOISTER, "serve", "--config", self.conf.to_str().unwrap()]).unwrap();
        p.wait_for_log("service: api", Duration::from_secs(30)).unwrap();
        self.svc_process = Some(p);
    }

    fn log(&self) -> String {
        self.svc_process.as_ref().map(Process::log).unwrap_or_default()
    }

    fn logs(&self) -> String {
        let mut s = format!("--- service\n{}", testnet::excerpt(&self.log()));
        if self.cas_process.is_some() {
            s.push_str(&format!("\n--- cas\n{}", testnet::excerpt(&self.cas_log())));
        }
        for site in &self.sites {
            s.push_str(&format!("\n--- charon {}\n{}", site.ns.name(), site.charon_log()));
        }
        s
    }

    fn token(&self) -> std::path::PathBuf {
        self.svc.dir().join("api.token")
    }

    /// Runs the CLI in the service's namespace (where the API listens).
    fn cli(&self, args: &[&str]) -> testnet::Output {
        let token = self.token();
        let mut argv = vec![CLOISTER];
        argv.extend_from_slice(args);
        let needs_api = matches!(args.first(), Some(&("status" | "tenants" | "tunnels" | "metrics")))
            || (args.first() == Some(&"tenant") && args.get(1) != Some(&"measure"));
        if needs_api {
            argv.extend_from_slice(&["--endpoint", API, "--token-file", token.to_str().unwrap()]);
        }
        self.svc.exec(&argv, Duration::from_secs(30)).unwrap()
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.success, "cloister {args:?}:\n{}\n{}\n{}", out.stdout, out.stderr, self.logs());
        out.stdout
    }

    fn platform_key(&self) -> String {
        let status = self.cli_ok(&["status"]);
        status
            .lines()
            .find_map(|l| l.strip_prefix("platform evidence key (software-rooted): "))
            .expect("status shows the platform key")
            .trim()
            .to_owned()
    }

    fn measurement(&self, id: u32) -> String {
        let id = id.to_string();
        let mut argv = vec![CLOISTER, "measure", "--tenant-id", &id];
        if let (Some((_, public)), true) = (&self.b_signer, id == B.id.to_string()) {
            argv.extend_from_slice(&["--tenant-signer", public]);
        }
        if let (Some(public), true) = (&self.a_signer, id == A.id.to_string()) {
            argv.extend_from_slice(&["--tenant-signer", public]);
        }
        let out = self.svc.exec(&argv, Duration::from_secs(30)).unwrap();
        assert!(out.success, "{}", out.stderr);
        out.stdout.trim().to_owned()
    }

    /// The tenant's side: its PSK file (on the tenant's machine: the site's directory),
    /// then `cloister tenant provision`, signed where the tenant has a signer.
    fn provision(&self, t: &Tenant, site: &Site, measurement: &str, platform: &str) -> testnet::Output {
        let signer = self.b_signer.as_ref().filter(|_| t.id == B.id).map(|(key, _)| key.as_path());
        self.provision_with(t, site, measurement, platform, signer)
    }

    fn provision_with(
        &self,
        t: &Tenant,
        site: &Site,
        measurement: &str,
        platform: &str,
        signer: Option<&Path>,
    ) -> testnet::Output {
        let psk_file = site.ns.write_file("gw.psk", &format!("{}\n", t.psk)).unwrap();
        let id = t.id.to_string();
        let mut argv = vec![
            "tenant",
            "provision",
            "--tenant",
            t.name,
            "--tenant-id",
            &id,
            "--secret",
            "psk",
            "--measurement",
            measurement,
            "--platform-key",
            platform,
            "--psk-file",
            psk_file.to_str().unwrap(),
        ];
        if let Some(key) = signer {
            argv.extend_from_slice(&["--signer-key", key.to_str().unwrap()]);
        }
        self.cli(&argv)
    }

    /// Every file of the service's directory (store, keys, token, config, log) is free of
    /// both tenants' PSKs; returns how many files were read.
    fn assert_no_psk_in_files(&self) -> usize {
        let mut scanned = 0;
        for entry in std::fs::read_dir(self.svc.dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                for psk in [PSK, PSK_B] {
                    assert!(
                        !bytes.windows(psk.len()).any(|w| w == psk.as_bytes()),
                        "a PSK in {}",
                        path.display()
                    );
                }
                scanned += 1;
            }
        }
        scanned
    }

    fn wait_tunnel(&self, site: &Site, limit: Duration) -> Duration {
        let t0 = Instant::now();
        let ok = testnet::wait_until("a ping through the tunnel", limit, || site.probe());
        assert!(
            ok.is_ok(),
            "no tunnel for {}\n{}\n{}",
            site.ns.name(),
            self.cli(&["tunnels"]).stdout,
            self.logs()
        );
        t0.elapsed()
    }
}

#[test]
fn two_tenants_with_overlapping_addresses_are_isolated_and_provisioned_by_attestation() {
    let Some(bed) = Bed::start() else { return };
    let platform = bed.platform_key();
    let (ma, mb) = (bed.measurement(A.id), bed.measurement(B.id));
    assert_ne!(ma, mb, "a tenant's measurement covers its enclave configuration");

    // Refusals first: a wrong measurement, another tenant's measurement, a wrong platform
    // key. Nothing is sent then, and the tenant stays without its secret.
    let wrong = bed.provision(&A, &bed.sites[0], &"00".repeat(48), &platform);
    assert!(!wrong.success && wrong.stderr.contains("measurement"), "{}{}", wrong.stdout, wrong.stderr);
    let swapped = bed.provision(&A, &bed.sites[0], &mb, &platform);
    assert!(!swapped.success, "B's measurement accepted for A: {}", swapped.stdout);
    let other_platform = format!("04{}", "11".repeat(64));
    let forged = bed.provision(&A, &bed.sites[0], &ma, &other_platform);
    assert!(!forged.success, "{}", forged.stdout);
    // B signs its secrets (`provisioning_signers`): an envelope without its signature, as
    // anyone who sees the offer could make, is refused by B's enclave.
    let unsigned = bed.provision_with(&B, &bed.sites[1], &mb, &platform, None);
    assert!(
        !unsigned.success && unsigned.stderr.contains("the tenant signs its secrets"),
        "{}{}",
        unsigned.stdout,
        unsigned.stderr
    );
    assert!(bed.cli_ok(&["tenants"]).contains("psk:missing"));

    // The API refuses a request without the token, or with a wrong one.
    let no_token = bed
        .svc
        .exec(&[CLOISTER, "status", "--endpoint", API, "--token-file", "/dev/null"], Duration::from_secs(10))
        .unwrap();
    assert!(!no_token.success && no_token.stderr.contains("401"), "{}{}", no_token.stdout, no_token.stderr);
    let wrong_token = bed.svc.write_file("wrong.token", "not-the-token-0123456789").unwrap();
    let out = bed
        .svc
        .exec(
            &[CLOISTER, "tenants", "--endpoint", API, "--token-file", wrong_token.to_str().unwrap()],
            Duration::from_secs(10),
        )
        .unwrap();
    assert!(!out.success && out.stderr.contains("401"), "{}{}", out.stdout, out.stderr);

    // Attested provisioning of both tenants; then the service brings both tunnels up.
    let t0 = Instant::now();
    for (t, (site, m)) in [&A, &B].iter().zip(bed.sites.iter().zip([&ma, &mb])) {
        let out = bed.provision(t, site, m, &platform);
        assert!(out.success, "provision {}: {}{}\n{}", t.name, out.stdout, out.stderr, bed.logs());
        assert!(!out.stdout.contains(t.psk));
    }
    let up_a = bed.wait_tunnel(&bed.sites[0], Duration::from_secs(40));
    let up_b = bed.wait_tunnel(&bed.sites[1], Duration::from_secs(40));
    eprintln!("service: both tunnels up {:?} after provisioning ({up_a:?}, {up_b:?})", t0.elapsed());

    // Overlapping addresses, isolated: each cloud side reaches its own site only.
    assert_eq!(who_answers(&bed.sites[0].cloud), "acme:hello", "{}", bed.logs());
    assert_eq!(who_answers(&bed.sites[1].cloud), "blue:hello", "{}", bed.logs());
    for site in &bed.sites {
        let (sent, got, out) = site.ping(20, "0.05");
        assert_eq!(got, sent, "{out}");
    }

    // Each tenant has its own enclave process.
    let tenants = bed.cli_ok(&["tenants"]);
    let pids: Vec<&str> = tenants.lines().skip(1).filter_map(|l| l.split_whitespace().nth(3)).collect();
    assert_eq!(pids.len(), 2, "{tenants}");
    assert_ne!(pids[0], pids[1], "{tenants}");
    assert!(pids.iter().all(|p| p.parse::<u32>().is_ok()), "{tenants}");
    assert_eq!(tenants.matches("psk:sealed").count(), 2, "{tenants}");
    let tunnels = bed.cli_ok(&["tunnels"]);
    assert!(
        tunnels.contains("acme") && tunnels.contains("blue") && tunnels.matches("Established").count() >= 2,
        "{tunnels}"
    );
    eprintln!("{tenants}{tunnels}");

    // Metrics: per-tunnel traffic, per-enclave crossings, IKE events.
    let metrics = bed.cli_ok(&["metrics"]);
    for needle in [
        "cloister_tunnel_bytes_total{tenant=\"acme\"",
        "cloister_tunnel_packets_total{tenant=\"blue\"",
        "cloister_enclave_crossings_total{tenant=\"acme\"}",
        "cloister_enclave_trusted_bytes{tenant=\"blue\"}",
        "cloister_ike_events_total{tenant=\"blue\",event=\"ike_established\"} 1",
        "cloister_tenant_running{tenant=\"acme\"} 1",
    ] {
        assert!(metrics.contains(needle), "{needle} missing:\n{metrics}");
    }

    // No PSK in the store file, the service's files or its log; the tenant's own file
    // (positive control) does hold it.
    let control = std::fs::read(bed.sites[0].ns.dir().join("gw.psk")).unwrap();
    assert!(control.windows(PSK.len()).any(|w| w == PSK.as_bytes()));
    let scanned = bed.assert_no_psk_in_files();
    assert!(scanned >= 4, "state, keys, token, config and log expected, scanned {scanned}");
    let log = bed.log();
    assert!(!log.contains(PSK) && !log.contains(PSK_B));
    assert!(log.contains("secret psk provisioned by attestation and sealed"), "{log}");

    // The privilege test's service half: started as root, the service became a user of its
    // own with three network capabilities, and all of the above ran so. As that user,
    // neither an enclave's memory nor the platform's, nor the platform's files, open.
    let service_pid = bed.svc_process.as_ref().unwrap().pid();
    let service_uid = 1_999_999_999;
    assert_eq!(uid_of(service_pid), service_uid, "{}", bed.logs());
    assert_eq!(
        capabilities_of(service_pid),
        1 << 10 | 1 << 12 | 1 << 13,
        "NET_BIND_SERVICE, NET_ADMIN, NET_RAW"
    );
    assert!(log.contains("service: runs as user 1999999999"), "{log}");
    let status = bed.cli_ok(&["status"]);
    let platform_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("platform process pid "))
        .unwrap_or_else(|| panic!("{status}"))
        .trim()
        .to_owned();
    assert_eq!(uid_of(platform_pid.parse().unwrap()), 0, "the platform keeps root to start enclaves");
    let dir = bed.svc.dir();
    let mut targets: Vec<String> = pids.iter().map(|p| format!("/proc/{p}/mem")).collect();
    targets.push(format!("/proc/{platform_pid}/mem"));
    for f in ["sealing.key", "platform.key", "api.token", "ledger/1"] {
        targets.push(dir.join(f).display().to_string());
    }
    for target in &targets {
        assert_denied_as(service_uid, target);
    }
    assert!(std::fs::read(dir.join("ledger/1")).is_ok(), "positive control: the ledger is there");
}

#[test]
fn a_killed_enclave_recovers_the_other_tenant_loses_nothing_and_a_restart_restores_all() {
    let Some(mut bed) = Bed::start() else { return };
    let platform = bed.platform_key();
    for (t, site) in [&A, &B].iter().zip(&bed.sites) {
        let out = bed.provision(t, site, &bed.measurement(t.id), &platform);
        assert!(out.success, "{}{}\n{}", out.stdout, out.stderr, bed.logs());
    }
    bed.wait_tunnel(&bed.sites[0], Duration::from_secs(40));
    bed.wait_tunnel(&bed.sites[1], Duration::from_secs(40));

    // Tenant A's enclave dies (kill -9) while B is pinged every 10 ms.
    let tenants = bed.cli_ok(&["tenants"]);
    let pid_a: i32 = tenants
        .lines()
        .find(|l| l.starts_with("acme"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{tenants}"));
    let pinger_b = background_ping(&bed.sites[1].ns, 800, true);
    let pinger_a = background_ping(&bed.sites[0].ns, 800, false);
    std::thread::sleep(Duration::from_millis(1500));
    // kill(1) by PID: the enclave process of this test's own service.
    let k = std::process::Command::new("kill").args(["-9", &pid_a.to_string()]).status().unwrap();
    assert!(k.success());
    bed.wait_tunnel(&bed.sites[0], Duration::from_secs(60));
    let (outage_a, replies_a) = longest_gap(&pinger_a.join().unwrap());
    let b_out = pinger_b.join().unwrap();
    let b_summary = b_out.lines().find(|l| l.contains("received")).unwrap_or_default().to_owned();
    assert!(
        b_summary.contains(" 800 received"),
        "tenant B lost pings while A's enclave died:\n{b_summary}\n{}",
        bed.logs()
    );
    assert!(outage_a > Duration::from_millis(100), "A's tunnel did not go down: {outage_a:?}");
    let status = bed.cli_ok(&["tenants"]);
    assert!(status.lines().any(|l| l.starts_with("acme") && l.contains("running")), "{status}");
    assert!(bed.log().contains("tenant acme: enclave died"), "{}", bed.logs());
    assert!(bed.log().contains("tenant acme: recovered in"), "{}", bed.logs());
    eprintln!(
        "service: tenant A's enclave killed: A's pings stopped for {outage_a:?} ({replies_a} of 800 answered, 20 ms apart); tenant B: {b_summary}"
    );

    // kill -9 of the whole service, then a restart: tenants come back from the file and
    // the store, their secrets unsealed by new enclaves (no provisioning), tunnels re-made.
    let pinger = background_ping(&bed.sites[0].ns, 1000, false);
    std::thread::sleep(Duration::from_millis(1000));
    let p = bed.svc_process.take().unwrap();
    p.signal(9).unwrap();
    drop(p);
    bed.serve();
    bed.wait_tunnel(&bed.sites[0], Duration::from_secs(60));
    bed.wait_tunnel(&bed.sites[1], Duration::from_secs(60));
    let (outage, replies) = longest_gap(&pinger.join().unwrap());
    assert!(outage > Duration::from_millis(100), "the tunnel did not go down: {outage:?}");
    let tenants = bed.cli_ok(&["tenants"]);
    assert_eq!(tenants.matches("psk:sealed").count(), 2, "{tenants}\n{}", bed.logs());
    assert!(!bed.log().contains("provisioned by attestation"), "a restart needs no provisioning");
    assert!(bed.log().contains("tenant acme: running"), "{}", bed.logs());
    eprintln!(
        "service: kill -9 of the service and a restart: A's pings stopped for {outage:?} ({replies} of 1000 answered, 20 ms apart); tunnels re-established, secrets unsealed, no provisioning"
    );

    // kill -9 of the platform process: the enclaves end with it and none can start, so the
    // service says why and stops (non-zero) for its supervisor to start it again.
    let status = bed.cli_ok(&["status"]);
    let platform_pid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("platform process pid "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{status}"));
    let k = std::process::Command::new("kill").args(["-9", &platform_pid.to_string()]).status().unwrap();
    assert!(k.success());
    let mut p = bed.svc_process.take().unwrap();
    let ended = testnet::wait_until("the service to stop", Duration::from_secs(15), || !p.is_running());
    let log = p.log();
    assert!(ended.is_ok(), "the service ran on without its platform:\n{}", testnet::excerpt(&log));
    let line =
        format!("the platform process (pid {platform_pid}) killed by signal 9; its enclaves ended with it");
    assert!(log.contains(&line), "{}", testnet::excerpt(&log));
    drop(p);
}

#[test]
fn a_gateway_starts_its_tenants_from_the_cas_only_for_verified_enclaves() {
    let Some(mut bed) = Bed::start_from(Source::Cas) else { return };
    // A: released to its verified enclave (configuration and PSK), no `tenant provision`. A
    // signs its secrets: the gateway started A's enclave with the signer the CAS listed (or
    // the measurement would not match) and the CAS signed the envelope (or the enclave would
    // have refused it).
    let up_a = bed.wait_tunnel(&bed.sites[0], Duration::from_secs(40));
    assert!(bed.log().contains("tenant acme: released by the CAS"), "{}", bed.logs());
    // B: the CAS expects another measurement, so it releases nothing and B does not start.
    assert!(bed.cas_log().contains("refused tenant blue to gateway gw1"), "{}", bed.logs());
    let status = bed.cli_ok(&["status"]);
    assert!(
        status.contains("blue") && status.contains("not started") && status.contains("measurement"),
        "{status}"
    );
    assert!(!bed.cli_ok(&["tenants"]).contains("blue"));
    assert!(!bed.sites[1].probe(), "B must not have a tunnel");
    // The operator CLI over the API: one tenant's SAs.
    let token = bed.token();
    let sas = bed.cli_ok(&[
        "sa",
        "--tenant",
        "acme",
        "--endpoint",
        API,
        "--token-file",
        token.to_str().unwrap(),
        "list",
    ]);
    assert!(sas.contains("ESTABLISHED") || sas.contains("Established"), "{sas}");

    // The tenant side corrects B's measurement; the CAS and the service re-read (SIGHUP).
    let platform = bed.cli_ok(&["platform-key", "--config", bed.conf.to_str().unwrap()]).trim().to_owned();
    bed.write_cas(&platform, &[(&A, &bed.measurement(A.id)), (&B, &bed.measurement(B.id))]);
    bed.cas_process.as_ref().unwrap().signal(1).unwrap();
    bed.cas_process.as_mut().unwrap().wait_for_log("cas: reloaded", Duration::from_secs(10)).unwrap();
    let pinger_a = background_ping(&bed.sites[0].ns, 300, true);
    bed.svc_process.as_ref().unwrap().signal(1).unwrap();
    let up_b = bed.wait_tunnel(&bed.sites[1], Duration::from_secs(40));
    let a_out = pinger_a.join().unwrap();
    assert!(a_out.contains(" 300 received"), "A was disturbed by B's arrival:\n{a_out}\n{}", bed.logs());
    assert!(bed.log().contains("reload: added [\"blue\"]"), "{}", bed.logs());

    // The CAS goes away, then the service is killed (-9) and restarted: both tenants come
    // back from their last release in the store.
    let cas = bed.cas_process.take().unwrap();
    let cas_out = cas.stop();
    assert!(cas_out.contains("releases"), "{cas_out}");
    let p = bed.svc_process.take().unwrap();
    p.signal(9).unwrap();
    drop(p);
    bed.serve();
    bed.wait_tunnel(&bed.sites[0], Duration::from_secs(60));
    bed.wait_tunnel(&bed.sites[1], Duration::from_secs(60));
    assert!(bed.log().contains("unreachable"), "{}", bed.logs());
    assert!(bed.log().contains("starting the 2 tenants it released before"), "{}", bed.logs());

    // Nothing secret on the gateway: the store, keys, token, config and log hold no PSK;
    // the CAS's own files (the tenants' side) do, as a positive control.
    let control = std::fs::read(bed.sites[0].ns.dir().join("cas/blue.psk")).unwrap();
    assert!(control.windows(PSK_B.len()).any(|w| w == PSK_B.as_bytes()));
    bed.assert_no_psk_in_files();
    assert!(!bed.log().contains(PSK) && !bed.log().contains(PSK_B));
    eprintln!("service: from the CAS: A's tunnel up {up_a:?} after start; B up {up_b:?} after the corrected measurement and SIGHUP; restart without the CAS restored both");
}
