//! A live move (issue 8): a tenant with its tunnel up moves from one `cloister serve` host to
//! another while a real strongSwan peer pings through it at 100 packets per second. The peer
//! keeps its IKE and child SAs (same SPIs, no rekey); the network follows the tenant as a
//! cloud's floating address would (the site's route to the gateway address is switched).
//!
//! ```text
//!            ┌── 198.18.11.0/24 ── host-a: serve (tenant acme), VIP 198.18.20.2 on lo
//!  site ─────┤                          │ 198.18.13.0/24 (agents: /v1/migrate)
//!  (charon,  └── 198.18.12.0/24 ── host-b: serve (no tenant yet), VIP 198.18.20.2 on lo
//!   198.18.10.1, inner 198.19.1.1)      each host: TUN clt-acme with 198.19.2.1 when serving
//! ```
//!
//! With SoftHSM2 installed the move runs in HSM envelope mode (one token both hosts reach,
//! as a network HSM would be); without it, enclave-only. Needs root and strongSwan;
//! elsewhere it prints a notice and passes without running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod common;

use common::{longest_gap, ping_replies, start_charon, CHARON, CLOISTER, GW_ID, PSK, SITE_ID};
use testnet::{Netns, Process, Veth};

const SITE_OUTER: &str = "198.18.10.1";
const VIP: &str = "198.18.20.2";
const SITE_INNER: &str = "198.19.1.1";
const CLOUD_INNER: &str = "198.19.2.1";
const HSM_USER_PIN: &str = "cloister-user-test";
/// The user the platform starts the HSM agent as (the enclave user base minus two): the
/// agent's files are its, as an operator would set them up.
const AGENT_UID: u32 = 1_999_999_998;
/// The user the service becomes (the enclave user base minus one).
const SERVICE_UID: u32 = 1_999_999_999;

/// Gives `path` (and everything below it) to the agent's user.
fn give_to_agent(path: &Path) {
    std::os::unix::fs::chown(path, Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            give_to_agent(&e.unwrap().path());
        }
    }
}

/// One gateway host: its namespace, its service directory, its API.
struct Host {
    ns: Netns,
    name: &'static str,
    /// Its address on the agents' link (the API listens there).
    api_addr: &'static str,
    /// Its address towards the site.
    wan: &'static str,
    serve: Option<Process>,
}

impl Host {
    fn api(&self) -> String {
        format!("http://{}:9440", self.api_addr)
    }

    fn conf(&self) -> PathBuf {
        self.ns.dir().join("service.toml")
    }

    fn cli(&self, args: &[&str]) -> testnet::Output {
        let token = self.ns.dir().join("api.token");
        let api = self.api();
        let mut argv = vec![CLOISTER];
        argv.extend_from_slice(args);
        if !matches!(args.first(), Some(&("platform-key" | "measure"))) && args.get(1) != Some(&"audit") {
            argv.extend_from_slice(&["--endpoint", &api, "--token-file", token.to_str().unwrap()]);
        }
        self.ns.exec(&argv, Duration::from_secs(60)).unwrap()
    }

    fn log(&self) -> String {
        self.serve.as_ref().map(Process::log).unwrap_or_default()
    }
}

fn tenant_conf() -> String {
    format!(
        r#"
[tenants.acme]
id = 1
engine = {{ retransmit_timeout = "500ms", retransmit_tries = 6 }}
[tenants.acme.dataplane]
tun = "clt-acme"
tun_addresses = ["{CLOUD_INNER}/32"]
listen = ["{VIP}:4500"]
workers = 1
[tenants.acme.connections.site]
local_addrs = ["{VIP}"]
remote_addrs = ["{SITE_OUTER}"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
dpd_delay = "30s"
local = {{ auth = "psk", id = "{GW_ID}", secret = "psk" }}
remote = {{ auth = "psk", id = "{SITE_ID}" }}
children.net = {{ local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["aes256gcm16"] }}
[tenants.acme.secrets.psk]
"#
    )
}

struct Bed {
    site: Netns,
    _charon: Process,
    a: Host,
    b: Host,
    /// SOFTHSM2_CONF of the shared test token, when SoftHSM2 is installed.
    hsm: Option<PathBuf>,
    /// The HSM's backup root (`cloister migrate backup-root`), once made.
    backup_root: Option<String>,
}

impl Bed {
    fn start() -> Option<Self> {
        if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
            testnet::skip("needs root and strongSwan; run scripts/setup.sh");
            return None;
        }
        let site = Netns::new("mvsite").unwrap();
        let host = |tag, name, api_addr, wan| Host {
            ns: Netns::new(tag).unwrap(),
            name,
            api_addr,
            wan,
            serve: None,
        };
        let a = host("mvhosta", "a", "198.18.13.1", "198.18.11.2");
        let b = host("mvhostb", "b", "198.18.13.2", "198.18.12.2");
        site.add_addr("lo", &format!("{SITE_OUTER}/32")).unwrap();
        site.add_addr("lo", &format!("{SITE_INNER}/32")).unwrap();
        for (h, net) in [(&a, "198.18.11"), (&b, "198.18.12")] {
            Veth::connect(&site, &format!("to{}", h.name), &h.ns, "wan0").unwrap();
            site.add_addr(&format!("to{}", h.name), &format!("{net}.1/24")).unwrap();
            h.ns.add_addr("wan0", &format!("{}/24", h.wan)).unwrap();
            h.ns.add_addr("lo", &format!("{VIP}/32")).unwrap();
            h.ns.add_route(&format!("{SITE_OUTER}/32"), &format!("{net}.1")).unwrap();
            h.ns.add_route(&format!("{SITE_INNER}/32"), &format!("{net}.1")).unwrap();
        }
        Veth::connect(&a.ns, "agents", &b.ns, "agents").unwrap();
        a.ns.add_addr("agents", "198.18.13.1/24").unwrap();
        b.ns.add_addr("agents", "198.18.13.2/24").unwrap();
        // The floating address starts at host a.
        site.add_route(&format!("{VIP}/32"), a.wan).unwrap();
        let swanctl = site
            .write_file(
                "swanctl/swanctl.conf",
                &common::site_swanctl_conf(SITE_OUTER, VIP, SITE_ID, SITE_INNER, PSK),
            )
            .unwrap();
        let charon = start_charon(&site, false);
        let uri = format!("unix://{}", site.dir().join("charon.vici").display());
        let out = site
            .exec(
                &["swanctl", "--load-all", "--file", swanctl.to_str().unwrap(), "--uri", &uri],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(out.success, "swanctl --load-all: {}{}", out.stdout, out.stderr);
        let hsm = Self::hsm_token(&site);
        let mut bed = Self { site, _charon: charon, a, b, hsm, backup_root: None };
        bed.configure();
        Some(bed)
    }

    /// A SoftHSM2 token for both hosts, made by the project's script; `None` without SoftHSM2.
    fn hsm_token(site: &Netns) -> Option<PathBuf> {
        if !Path::new("/usr/lib/softhsm/libsofthsm2.so").exists() {
            testnet::skip("its HSM part needs SoftHSM2 (the move runs enclave-only); run scripts/setup.sh");
            return None;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/softhsm-init.sh");
        let dir = site.dir().join("hsm");
        let out = std::process::Command::new("bash").arg(&script).arg(&dir).output().unwrap();
        assert!(out.status.success(), "softhsm-init: {}", String::from_utf8_lossy(&out.stderr));
        give_to_agent(&dir);
        Some(dir.join("softhsm2.conf"))
    }

    /// Both services' files: platform keys first (each host's own), then `[migrate]` naming
    /// the other host with its key.
    fn configure(&mut self) {
        for h in [&self.a, &self.b] {
            let base = format!(
                "[service]\nstate = \"state.redb\"\napi = \"{}:9440\"\napi_token = \"api.token\"\n",
                h.api_addr
            );
            h.ns.write_file("service.toml", &base).unwrap();
            let out = h.cli(&["platform-key", "--config", h.conf().to_str().unwrap()]);
            assert!(out.success, "{}", out.stderr);
            h.ns.write_file("platform.pub", out.stdout.trim()).unwrap();
        }
        for (h, other) in [(&self.a, &self.b), (&self.b, &self.a)] {
            let text = self.service_text(h, other, h.name == "a");
            h.ns.write_file("service.toml", &text).unwrap();
        }
        // The HSM's backup root goes into every host's file (and so into the tenant's
        // measurement): the operator's step, through host a's HSM agent.
        if let Some(conf) = &self.hsm {
            let out = std::process::Command::new(CLOISTER)
                .args(["migrate", "backup-root", "--config", self.a.conf().to_str().unwrap()])
                .env("SOFTHSM2_CONF", conf)
                .output()
                .unwrap();
            assert!(out.status.success(), "backup-root: {}", String::from_utf8_lossy(&out.stderr));
            self.backup_root = Some(String::from_utf8_lossy(&out.stdout).trim().to_owned());
            for (h, other) in [(&self.a, &self.b), (&self.b, &self.a)] {
                let text = self.service_text(h, other, h.name == "a");
                h.ns.write_file("service.toml", &text).unwrap();
            }
        }
        let hsm = self.hsm.clone();
        for h in [&mut self.a, &mut self.b] {
            Self::serve(h, hsm.as_deref());
        }
        // Each host reads the other's token when it moves a tenant there, long after it
        // became the service's user: the operator gives that copy to the service's user.
        for h in [&self.a, &self.b] {
            std::os::unix::fs::chown(h.ns.dir().join("migrate.token"), Some(SERVICE_UID), Some(SERVICE_UID))
                .unwrap();
        }
        // The privilege test's HSM half: the agent runs as a user of its own, started by
        // the platform; the service's user may not read the PIN it opens the HSM with.
        if self.hsm.is_some() {
            for h in [&self.a, &self.b] {
                assert!(h.log().contains(&format!("the HSM agent runs as user {AGENT_UID}")), "{}", h.log());
                common::assert_denied_as(SERVICE_UID, &h.ns.dir().join("hsm.pin").display().to_string());
            }
        }
    }

    /// Host `h`'s service file: `[migrate]` naming `other` with its key, and the tenant when
    /// `with_tenant`.
    fn service_text(&self, h: &Host, other: &Host, with_tenant: bool) -> String {
        let key = |h: &Host| std::fs::read_to_string(h.ns.dir().join("platform.pub")).unwrap();
        let mut text = format!(
            "[service]\nstate = \"state.redb\"\napi = \"{}:9440\"\napi_token = \"api.token\"\n\n[migrate]\ntoken = \"migrate.token\"\n",
            h.api_addr
        );
        if self.hsm.is_some() {
            let pin = h.ns.write_file("hsm.pin", &format!("{HSM_USER_PIN}\n")).unwrap();
            common::set_mode(&pin, 0o600);
            give_to_agent(&pin);
            let audit = h.ns.dir().join("hsm-audit");
            std::fs::create_dir_all(&audit).unwrap();
            give_to_agent(&audit);
            let root =
                self.backup_root.as_ref().map(|r| format!(", backup_root = \"{r}\"")).unwrap_or_default();
            text.push_str(&format!(
                "hsm = {{ token_label = \"cloister-test\", pin_file = \"hsm.pin\", oaep = \"sha1\", audit = \"hsm-audit/migrate-audit.jsonl\"{root} }}\n",
            ));
        }
        text.push_str(&format!(
            "[migrate.peers.{}]\nurl = \"{}\"\ntoken_file = \"{}\"\nplatform_key = \"{}\"\n",
            other.name,
            other.api(),
            other.ns.dir().join("migrate.token").display(),
            key(other)
        ));
        // A peer whose platform key is not its own: a move there must be refused.
        text.push_str(&format!(
            "[migrate.peers.liar]\nurl = \"{}\"\ntoken_file = \"{}\"\nplatform_key = \"{}\"\n",
            other.api(),
            other.ns.dir().join("migrate.token").display(),
            key(h)
        ));
        if with_tenant {
            text.push_str(&tenant_conf());
        }
        text
    }

    /// Starts `cloister serve` on host `h` and waits for its API.
    fn serve(h: &mut Host, hsm: Option<&Path>) {
        let conf_env = hsm.map(|c| c.display().to_string());
        let env: Vec<(&str, &str)> = conf_env.iter().map(|c| ("SOFTHSM2_CONF", c.as_str())).collect();
        let conf = h.conf();
        let mut p =
            h.ns.spawn_env("serve", &[CLOISTER, "serve", "--config", conf.to_str().unwrap()], &env).unwrap();
        p.wait_for_log("service: api", Duration::from_secs(30)).unwrap();
        h.serve = Some(p);
    }

    /// Brings the site's tunnel up (again): charon forgets SAs of a gateway that is gone (as
    /// its dead peer detection would, later) and initiates until a ping answers.
    fn tunnel_up(&self, what: &str) -> Result<Duration, String> {
        let uri = format!("unix://{}", self.site.dir().join("charon.vici").display());
        let _ = self.site.exec(
            &["swanctl", "--terminate", "--ike", "gw", "--force", "--uri", &uri],
            Duration::from_secs(10),
        );
        let t0 = Instant::now();
        testnet::wait_until(what, Duration::from_secs(40), || {
            let _ = self.site.exec(
                &["swanctl", "--initiate", "--child", "net", "--uri", &uri, "--timeout", "5"],
                Duration::from_secs(10),
            );
            self.probe()
        })
        .map(|()| t0.elapsed())
        .map_err(|e| format!("{e}\n{}", self.logs()))
    }

    fn logs(&self) -> String {
        format!(
            "--- host a\n{}\n--- host b\n{}\n--- charon\n{}",
            testnet::excerpt(&self.a.log()),
            testnet::excerpt(&self.b.log()),
            testnet::excerpt(
                &std::fs::read_to_string(self.site.dir().join("charon.log")).unwrap_or_default()
            )
        )
    }

    /// Pings the cloud side through the tunnel, waiting for every reply; (replies, output).
    fn ping(&self, count: u32, interval: &str) -> (u32, String) {
        common::ping_every_reply(&self.site, count, interval, SITE_INNER, CLOUD_INNER)
    }

    /// One ping through the tunnel, 1 s to answer: whether it came back.
    fn probe(&self) -> bool {
        common::probe(&self.site, SITE_INNER, CLOUD_INNER)
    }

    /// charon's SAs as (IKE SPIs, child SPIs), from `swanctl --list-sas`.
    fn peer_sas(&self) -> (Vec<String>, Vec<String>) {
        let uri = format!("unix://{}", self.site.dir().join("charon.vici").display());
        let out = self.site.exec(&["swanctl", "--list-sas", "--uri", &uri], Duration::from_secs(20)).unwrap();
        let (mut ike, mut child) = (Vec::new(), Vec::new());
        for l in out.stdout.lines() {
            if l.contains("ESTABLISHED") {
                ike.extend(
                    l.split_whitespace().filter(|w| w.contains("_i") || w.contains("_r")).map(str::to_owned),
                );
            }
            let words: Vec<&str> = l.split_whitespace().collect();
            for w in words.windows(2) {
                if (w[0] == "in" || w[0] == "out") && w[1].len() >= 8 {
                    child.push(w[1].trim_end_matches(',').to_owned());
                }
            }
        }
        (ike, child)
    }
}

#[test]
fn a_tenant_moves_to_another_host_with_its_tunnel_up_and_the_peer_keeps_its_sas() {
    let Some(mut bed) = Bed::start() else { return };
    // The tenant's PSK reaches host a's enclave by attestation only.
    let platform = std::fs::read_to_string(bed.a.ns.dir().join("platform.pub")).unwrap();
    // The measurement covers the platforms the enclave trusts for moves (both hosts) and the
    // HSM's backup root. The tenant names them; the operator's view from the service file is
    // the same.
    let other = std::fs::read_to_string(bed.b.ns.dir().join("platform.pub")).unwrap();
    let mut args = vec![
        "measure",
        "--tenant-id",
        "1",
        "--trusted-platform",
        other.trim(),
        "--trusted-platform",
        platform.trim(),
    ];
    if let Some(root) = &bed.backup_root {
        args.extend(["--backup-root", root.as_str()]);
    }
    let m = bed.a.cli(&args);
    assert!(m.success, "measure: {}", m.stderr);
    let conf = bed.a.conf();
    let from_config = bed.a.cli(&["measure", "--tenant-id", "1", "--config", conf.to_str().unwrap()]);
    assert_eq!(from_config.stdout, m.stdout, "{}", from_config.stderr);
    let psk_file = bed.site.write_file("gw.psk", &format!("{PSK}\n")).unwrap();
    let out = bed.a.cli(&[
        "tenant",
        "provision",
        "--tenant",
        "acme",
        "--tenant-id",
        "1",
        "--secret",
        "psk",
        "--measurement",
        m.stdout.trim(),
        "--platform-key",
        platform.trim(),
        "--psk-file",
        psk_file.to_str().unwrap(),
    ]);
    assert!(out.success, "provision: {}{}\n{}", out.stdout, out.stderr, bed.logs());
    let uri = format!("unix://{}", bed.site.dir().join("charon.vici").display());
    if let Err(e) = bed.tunnel_up("the tunnel via host a") {
        panic!("no tunnel: {e}");
    }
    let before = bed.peer_sas();
    assert!(!before.0.is_empty() && before.1.len() >= 2, "charon's SAs: {before:?}");

    // A destination whose enclave does not attest under the key we hold for it is refused
    // before anything leaves; the tenant serves on.
    let refused = bed.a.cli(&["migrate", "tenant", "acme", "--to", "liar"]);
    assert!(!refused.success, "a move to an unverified destination went through\n{}", bed.logs());
    assert!(refused.stderr.contains("refused"), "{}", refused.stderr);
    let (n, _) = bed.ping(5, "0.1");
    assert_eq!(n, 5, "the tenant stopped serving after a refused move\n{}", bed.logs());
    assert_eq!(bed.peer_sas(), before, "the refused move changed the peer's SAs");

    // A destination that fails after the export: its HSM refuses it (a wrong user PIN
    // there), so it cannot take the package. The source serves on and rekeys its children
    // at once (the export capped their outbound counters); the one-time key is deleted.
    let before = if bed.hsm.is_some() {
        let pin = bed.b.ns.dir().join("hsm.pin");
        std::fs::write(&pin, "not-the-user-pin\n").unwrap();
        let failed = bed.a.cli(&["migrate", "tenant", "acme", "--to", "b"]);
        std::fs::write(&pin, format!("{HSM_USER_PIN}\n")).unwrap();
        assert!(!failed.success, "a move to a destination whose HSM refused went through\n{}", bed.logs());
        assert!(
            failed.stderr.contains("refused the package") && failed.stderr.contains("PIN"),
            "{}",
            failed.stderr
        );
        let rekeyed = testnet::wait_until("the source's child rekey", Duration::from_secs(15), || {
            let now = bed.peer_sas();
            now.0 == before.0 && now.1.len() >= 2 && now.1.iter().all(|spi| !before.1.contains(spi))
        });
        assert!(rekeyed.is_ok(), "children after the failed move: {:?}\n{}", bed.peer_sas(), bed.logs());
        let (n, out) = bed.ping(10, "0.05");
        assert_eq!(n, 10, "the tenant stopped serving after a failed move: {out}\n{}", bed.logs());
        let on_b = bed.b.cli(&["tenants"]);
        assert!(!on_b.stdout.contains("acme"), "host b kept the failed arrival: {}", on_b.stdout);
        let audit = std::fs::read_to_string(bed.b.ns.dir().join("hsm-audit/migrate-audit.jsonl")).unwrap();
        assert!(
            audit.lines().any(|l| l.contains("\"op\":\"open\"") && l.contains("\"outcome\":\"failed\"")),
            "host b's audit log lacks the refused login"
        );
        // The rekeyed children's predecessors go (their capped counters with them) before
        // the real move: the enclave exports an outbound SA once only.
        std::thread::sleep(Duration::from_secs(3));
        bed.peer_sas()
    } else {
        before
    };

    // The move, under 100 pings a second.
    let pinger = common::background_ping(&bed.site, 800, "0.01", false, SITE_INNER, CLOUD_INNER);
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    let moved = bed.a.cli(&["migrate", "tenant", "acme", "--to", "b"]);
    let cli_time = t0.elapsed();
    // The floating address follows the tenant.
    bed.site.ip(&["route", "replace", &format!("{VIP}/32"), "via", bed.b.wan]).unwrap();
    let switched = t0.elapsed();
    let pings = pinger.join().unwrap();
    assert!(moved.success, "move: {}{}\n{}", moved.stdout, moved.stderr, bed.logs());
    let received = ping_replies(&pings);
    let (gap, _) = longest_gap(&pings);
    eprintln!(
        "live move: {} | CLI {cli_time:?}, route switched at {switched:?} | 800 pings at 100/s: {received} answered, {} lost, longest gap {gap:?}",
        moved.stdout.trim(),
        800 - received
    );

    // The peer kept its SAs: same SPIs, no rekey, no new IKE SA.
    assert_eq!(bed.peer_sas(), before, "the peer's SAs changed\n{}", bed.logs());
    let (n, out) = bed.ping(20, "0.05");
    assert_eq!(n, 20, "pings after the move: {out}\n{}", bed.logs());
    assert!(received >= 700, "too many pings lost in the move ({received} of 800)\n{}", bed.logs());
    let on_b = bed.b.cli(&["tunnels"]);
    assert!(on_b.success && on_b.stdout.contains("acme"), "host b: {}{}", on_b.stdout, on_b.stderr);
    let on_a = bed.a.cli(&["tenants"]);
    assert!(!on_a.stdout.contains("acme"), "host a still lists acme: {}", on_a.stdout);
    assert!(bed.b.log().contains("arrived by a live move"), "{}", bed.logs());
    if bed.hsm.is_some() {
        assert!(moved.stdout.contains("(hsm)"), "{}", moved.stdout);
        for h in [&bed.a, &bed.b] {
            let audit = h.ns.dir().join("hsm-audit/migrate-audit.jsonl");
            let v = h.cli(&["migrate", "audit", "verify", audit.to_str().unwrap()]);
            assert!(v.success && v.stdout.contains("chain intact"), "{}{}", v.stdout, v.stderr);
        }
        // Both services used the HSM (a for the key, b for the rewrap) and neither read the
        // PIN: their HSM agents did. The migration token they do hold shows the scan works.
        for h in [&bed.a, &bed.b] {
            let mut needles = testnet::memscan::Needles::new();
            needles.add("HSM PIN", HSM_USER_PIN.as_bytes()).unwrap();
            let token = std::fs::read(h.ns.dir().join("migrate.token")).unwrap();
            needles.add("migrate token", token.trim_ascii()).unwrap();
            let pid = h.serve.as_ref().unwrap().pid();
            let scan = testnet::memscan::scan(pid, &needles).unwrap();
            assert!(
                scan.found.contains_key("migrate token"),
                "host {}: the scan missed the token: {scan:?}",
                h.name
            );
            assert!(
                !scan.found.contains_key("HSM PIN"),
                "host {}'s service holds the HSM PIN: {scan:?}",
                h.name
            );
        }
    }
    // Host a's file still defines the tenant; a restart there must not start it beside b.
    drop(bed.a.serve.take());
    let hsm = bed.hsm.clone();
    Bed::serve(&mut bed.a, hsm.as_deref());
    assert!(bed.a.log().contains("tenant acme: moved away (to b"), "{}", bed.logs());
    let on_a = bed.a.cli(&["tenants"]);
    assert!(!on_a.stdout.contains("acme"), "host a started acme again after a restart: {}", on_a.stdout);

    // Back to a and on to b again, with no rekey in between: each destination's SAs are its
    // own (imported above the source's range), so each exports them like any other.
    for (from, to) in [("b", "a"), ("a", "b")] {
        let (src, dst) = if from == "a" { (&bed.a, &bed.b) } else { (&bed.b, &bed.a) };
        let moved = src.cli(&["migrate", "tenant", "acme", "--to", to]);
        assert!(moved.success, "move {from} -> {to}: {}{}\n{}", moved.stdout, moved.stderr, bed.logs());
        bed.site.ip(&["route", "replace", &format!("{VIP}/32"), "via", dst.wan]).unwrap();
        assert_eq!(
            bed.peer_sas(),
            before,
            "the peer's SAs changed in the move {from} -> {to}\n{}",
            bed.logs()
        );
        let (n, out) = bed.ping(10, "0.05");
        assert_eq!(n, 10, "pings after the move {from} -> {to}: {out}\n{}", bed.logs());
        eprintln!("live move {from} -> {to} again: {}", moved.stdout.trim());
    }

    // The moved IKE SA keeps working for what needs SK_d at the destination: a child rekey
    // and an IKE rekey, both asked by the peer.
    for what in ["--child", "--ike"] {
        let name = if what == "--child" { "net" } else { "gw" };
        let before = bed.peer_sas();
        let out = bed
            .site
            .exec(&["swanctl", "--rekey", what, name, "--uri", &uri], Duration::from_secs(20))
            .unwrap();
        assert!(out.success, "swanctl --rekey {what}: {}{}", out.stdout, out.stderr);
        let rekeyed = testnet::wait_until("the rekey at the destination", Duration::from_secs(15), || {
            let now = bed.peer_sas();
            (if what == "--child" { now.1 != before.1 } else { now.0 != before.0 }) && !now.0.is_empty()
        });
        assert!(rekeyed.is_ok(), "rekey {what} after the move: {:?}\n{}", bed.peer_sas(), bed.logs());
        let (n, out) = bed.ping(10, "0.05");
        assert_eq!(n, 10, "pings after the {what} rekey: {out}\n{}", bed.logs());
    }
    if bed.hsm.is_some() {
        disaster_recovery(&mut bed);
    }
}

/// Disaster recovery: host b backs the tenant up, then dies; host a, started afresh with an
/// empty store and no tenant configured, restores the tenant from the backup with the
/// security officer's PIN, serves the site again (new SAs: a backup carries none), and
/// keeps the restored secret across its own restart.
fn disaster_recovery(bed: &mut Bed) {
    let backup = bed.site.dir().join("acme.backup.json");
    let out = bed.b.cli(&["migrate", "backup", "acme", "--out", backup.to_str().unwrap()]);
    assert!(out.success, "backup: {}{}\n{}", out.stdout, out.stderr, bed.logs());
    let doc = std::fs::read_to_string(&backup).unwrap();
    let psk_hex: String = PSK.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!doc.contains(PSK) && !doc.contains(&psk_hex), "the backup shows the PSK");
    let again = bed.b.cli(&["migrate", "backup", "acme", "--out", backup.to_str().unwrap()]);
    assert!(!again.success && again.stderr.contains("never overwrites"), "{}", again.stderr);
    let (n, _) = bed.ping(5, "0.1");
    assert_eq!(n, 5, "the tenant stopped serving after its backup\n{}", bed.logs());

    // The disaster: host b's service and enclaves are killed, its store is lost with it.
    let b = bed.b.serve.take().unwrap();
    b.signal(9).unwrap();
    drop(b);
    // Host a, rebuilt: an empty store and no tenant in its file.
    drop(bed.a.serve.take());
    std::fs::remove_file(bed.a.ns.dir().join("state.redb")).unwrap();
    let text = bed.service_text(&bed.a, &bed.b, false);
    bed.a.ns.write_file("service.toml", &text).unwrap();
    let hsm = bed.hsm.clone();
    Bed::serve(&mut bed.a, hsm.as_deref());
    bed.site.ip(&["route", "replace", &format!("{VIP}/32"), "via", bed.a.wan]).unwrap();

    // Refusals first: each leaves nothing running.
    let wrong_pin = bed.site.write_file("so.wrong", "not-the-officer\n").unwrap();
    let so_pin = bed.site.write_file("so.pin", "cloister-so-test\n").unwrap();
    let refused = bed.a.cli(&[
        "migrate",
        "restore",
        backup.to_str().unwrap(),
        "--officer-pin-file",
        wrong_pin.to_str().unwrap(),
    ]);
    assert!(!refused.success && refused.stderr.contains("PIN"), "wrong officer PIN: {}", refused.stderr);
    let tampered = bed.site.dir().join("acme.tampered.json");
    let mut v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let mut package = v["package"].as_str().unwrap().to_owned();
    let last = if package.ends_with('0') { "1" } else { "0" };
    package.replace_range(package.len() - 1.., last);
    v["package"] = serde_json::Value::String(package);
    std::fs::write(&tampered, v.to_string()).unwrap();
    let refused2 = bed.a.cli(&[
        "migrate",
        "restore",
        tampered.to_str().unwrap(),
        "--officer-pin-file",
        so_pin.to_str().unwrap(),
    ]);
    assert!(!refused2.success && refused2.stderr.contains("evidence"), "tampered: {}", refused2.stderr);
    let listed = bed.a.cli(&["tenants"]);
    assert!(!listed.stdout.contains("acme"), "a refused restore left acme: {}", listed.stdout);

    let t0 = Instant::now();
    let restored = bed.a.cli(&[
        "migrate",
        "restore",
        backup.to_str().unwrap(),
        "--officer-pin-file",
        so_pin.to_str().unwrap(),
    ]);
    let restore_time = t0.elapsed();
    assert!(restored.success, "restore: {}{}\n{}", restored.stdout, restored.stderr, bed.logs());
    let up = bed.tunnel_up("the tunnel via the restored tenant").unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "disaster recovery: {} | CLI {restore_time:?}, tunnel up again {up:?} after the restore",
        restored.stdout.trim()
    );
    let (n, out) = bed.ping(10, "0.05");
    assert_eq!(n, 10, "pings through the restored tenant: {out}\n{}", bed.logs());

    // The restored secret was sealed into host a's store: a restart brings it back.
    drop(bed.a.serve.take());
    Bed::serve(&mut bed.a, hsm.as_deref());
    let listed = testnet::wait_until("acme running again", Duration::from_secs(20), || {
        let l = bed.a.cli(&["tenants"]);
        l.stdout.contains("acme") && l.stdout.contains("running") && l.stdout.contains("psk:sealed")
    });
    assert!(listed.is_ok(), "after a restart: {}\n{}", bed.a.cli(&["tenants"]).stdout, bed.logs());
    bed.tunnel_up("the tunnel after host a's restart").unwrap_or_else(|e| panic!("{e}"));

    // The officer's steps, the failure and the rewrap are in the audit log, chain intact.
    let audit = bed.a.ns.dir().join("hsm-audit/migrate-audit.jsonl");
    let v = bed.a.cli(&["migrate", "audit", "verify", audit.to_str().unwrap()]);
    assert!(v.success && v.stdout.contains("chain intact"), "{}{}", v.stdout, v.stderr);
    let log = std::fs::read_to_string(&audit).unwrap();
    for op in ["authorize-backup-restore", "revoke-backup-restore", "rewrap"] {
        assert!(log.contains(&format!("\"op\":\"{op}\"")), "audit log lacks {op}");
    }
    // The wrong officer PIN is there as a failed authorization.
    assert!(
        log.lines().any(
            |l| l.contains("\"op\":\"authorize-backup-restore\"") && l.contains("\"outcome\":\"failed\"")
        ),
        "no failed authorization in the audit log"
    );
}
