//! Interop with a real, independent IKEv2 and ESP implementation: strongSwan 5.9 (charon
//! with `kernel-libipsec`, its userspace ESP, since this kernel has none) in one network
//! namespace, `cloister gateway` with its enclave process in another.
//!
//! Each case brings a tunnel up (strongSwan or Cloister initiating), pings through it and
//! runs iperf3 for 5 s through it, so IKE (PSK) and ESP-in-UDP interoperate at run time, for
//! each IKE suite of the issue and both outer address families. Needs root (namespaces);
//! elsewhere each case prints a notice and passes without running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use common::{
    every_reply_deadline, fixture, set_mode, start_charon, wrap_secret, Family, CLOISTER, GW_ID, PSK, SITE_ID,
};
use testnet::{Netns, Process, Veth};

use common::CHARON;
/// The gateway's address on the far side of the NAT testbed's NAT.
const NAT_GW: &str = "198.18.1.2";
/// The site's inner address (strongSwan side) and the gateway's (on Cloister's TUN).
const SITE_INNER: &str = "198.19.1.1";
const GW_INNER: &str = "198.19.2.1";

/// How the two ends authenticate. Certificates are crates/ike/tests/certs' fixtures
/// (strongSwan is site-a, Cloister site-b, one CA per key type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Psk,
    Ecdsa,
    Rsa,
    /// RSA-4096 certificates under an intermediate CA, which each side sends: an IKE_AUTH
    /// of more than 3 kB each way on port 4500, whole (IP-fragmented: Cloister announces no
    /// IKE fragmentation).
    Rsa4096Chain,
    /// The same in RFC 7383 fragments: both announce support (strongSwan's `fragmentation`
    /// as given), so each IKE_AUTH leaves as SKF fragments of at most 1280 bytes.
    Rsa4096Fragments(&'static str),
}

/// A certificate case's fixtures.
struct CertFiles {
    /// Key type in the fixture names (`a-<kind>.pem`, `b-<kind>.key.der`...).
    kind: &'static str,
    /// The root CA.
    ca: &'static str,
    /// Intermediate CAs strongSwan holds (and sends with its certificate).
    intermediates: &'static [&'static str],
    /// What Cloister sends: its certificate, then any intermediates.
    gw_certs: &'static str,
    /// The enclave's secret kind for the private key.
    secret_kind: &'static str,
}

impl Auth {
    fn cert(self) -> Option<CertFiles> {
        let (kind, ca, intermediates, gw_certs, secret_kind) = match self {
            Self::Psk => return None,
            Self::Ecdsa => ("p256", "ca-ec.pem", &[][..], "b-p256.pem", "ecdsa-p256"),
            Self::Rsa => ("rsa", "ca-rsa.pem", &[][..], "b-rsa.pem", "rsa"),
            Self::Rsa4096Chain | Self::Rsa4096Fragments(_) => {
                ("int4096", "ca-rsa4096.pem", &["int-rsa4096.pem"][..], "b-int4096-chain.pem", "rsa")
            }
        };
        Some(CertFiles { kind, ca, intermediates, gw_certs, secret_kind })
    }

    /// Cloister's identity: the certificates are site-b's.
    fn gw_id(self) -> &'static str {
        if self == Self::Psk {
            GW_ID
        } else {
            "site-b.cloister.test"
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Initiator {
    StrongSwan,
    Cloister,
}

/// The IKE suite and the ESP suite that goes with it.
fn esp_for(ike: &str) -> &'static str {
    match ike {
        "aes256-sha256-modp3072" => "aes256-sha256",
        "chacha20poly1305-prfsha256-x25519" => "chacha20poly1305",
        "aes128gcm16-prfsha384-ecp384" => "aes128gcm16",
        _ => "aes256gcm16",
    }
}

fn swanctl_conf(site: &str, gw: &str, ike: &str, auth: Auth, tuning: &Tuning) -> String {
    let (more_children, more_connections, more_secrets) =
        (tuning.charon_children, tuning.charon_connections, tuning.charon_secrets);
    let gw_id = auth.gw_id();
    let fragmentation = match auth {
        Auth::Rsa4096Fragments(how) => how,
        _ => "yes",
    };
    let (local_auth, remote_auth) = match auth {
        Auth::Psk => ("auth = psk".to_owned(), "auth = psk".to_owned()),
        _ => ("auth = pubkey\n            certs = site.pem".to_owned(), "auth = pubkey".to_owned()),
    };
    format!(
        r#"connections {{
  gw {{
    version = 2
    fragmentation = {fragmentation}
    local_addrs = {site}
    remote_addrs = {gw}
    proposals = {ike}
    local {{ {local_auth}
            id = {SITE_ID} }}
    remote {{ {remote_auth}
             id = {gw_id} }}
    children {{
      net {{
        local_ts = {SITE_INNER}/32
        remote_ts = 198.19.2.0/24
        esp_proposals = {esp}
        start_action = none
      }}
      {more_children}
    }}
  }}
  {more_connections}
}}
secrets {{
  ike-gw {{ id-a = {SITE_ID}
           id-b = {gw_id}
           secret = "{PSK}" }}
  {more_secrets}
}}
"#,
        esp = esp_for(ike)
    )
}

/// Extra lines for the gateway's `[gateway]` table and its connection.
#[derive(Debug, Clone, Copy, Default)]
struct Tuning {
    gateway: &'static str,
    /// Extra lines of the `[dataplane]` table.
    dataplane: &'static str,
    connection: &'static str,
    /// Extra keys of the child's inline table, each starting with ", ".
    child: &'static str,
    /// More children of Cloister's connection (TOML lines).
    children: &'static str,
    /// More children of charon's connection (swanctl.conf blocks).
    charon_children: &'static str,
    /// More TUN addresses of Cloister's, each starting with ", ".
    tun_addresses: &'static str,
    /// More connections of charon's (swanctl.conf blocks), and their secrets.
    charon_connections: &'static str,
    charon_secrets: &'static str,
    /// A NAT between the two (IPv4; the site initiates).
    nat: bool,
    /// Cloister's IKE proposals instead of the case's (a TOML array's contents).
    proposals: &'static str,
    /// More PSKs for Cloister, wrapped into these files (`[secrets.NAME] file = ...` in
    /// `children`'s extra tables): (file, PSK).
    psk_files: &'static [(&'static str, &'static str)],
}

fn gateway_conf(site: &str, gw: &str, ike: &str, auth: Auth, tuning: Tuning) -> String {
    let gw_id = auth.gw_id();
    let fragmentation = if auth == Auth::Rsa4096Chain { r#"fragmentation = "no""# } else { "" };
    let (local, remote) = match auth {
        Auth::Psk => (
            format!(r#"{{ auth = "psk", id = "{gw_id}", secret = "psk" }}"#),
            format!(r#"{{ auth = "psk", id = "{SITE_ID}" }}"#),
        ),
        _ => (
            format!(r#"{{ auth = "pubkey", certs = ["gw.pem"], id = "{gw_id}", secret = "psk" }}"#),
            format!(r#"{{ auth = "pubkey", cacerts = ["ca.pem"], id = "{SITE_ID}" }}"#),
        ),
    };
    format!(
        r#"[gateway]
tenant = 1
enclave = "process"
provisioning_key = "provisioning.key"
control_socket = "gw.sock"
{tuning_gateway}

[dataplane]
tun = "clgw0"
tun_addresses = ["{GW_INNER}/32"{tuning_tun_addresses}]
listen = ["{listen}"]
workers = 2
{tuning_dataplane}

[connections.site-a]
local_addrs = ["{gw}"]
remote_addrs = ["{site}"]
proposals = [{proposals}]
{fragmentation}
{tuning_connection}
local = {local}
remote = {remote}
children.net = {{ local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["{esp}"]{tuning_child} }}
{tuning_children}

[secrets.psk]
file = "psk.blob"
"#,
        listen = if gw.contains(':') { format!("[{gw}]:4500") } else { format!("{gw}:4500") },
        esp = esp_for(ike),
        proposals =
            if tuning.proposals.is_empty() { format!("\"{ike}\"") } else { tuning.proposals.to_owned() },
        tuning_gateway = tuning.gateway,
        tuning_dataplane = tuning.dataplane,
        tuning_connection = tuning.connection,
        tuning_child = tuning.child,
        tuning_children = tuning.children,
        tuning_tun_addresses = tuning.tun_addresses,
    )
}

/// A strongSwan site and a Cloister gateway, joined by a veth pair.
struct Testbed {
    // Processes first: they are stopped (on drop) before their namespaces go.
    _charon: Process,
    cloister: Process,
    site: Netns,
    gw: Netns,
    /// The NAT between the two, if there is one.
    _nat: Option<Netns>,
}

impl Testbed {
    fn start(family: Family, ike: &str, auth: Auth) -> Self {
        Self::start_with(family, ike, auth, false, Tuning::default())
    }

    fn start_with(family: Family, ike: &str, auth: Auth, log_keys: bool, tuning: Tuning) -> Self {
        let (site_addr, mut gw_addr, plen) = family.outer();
        let site = Netns::new("site").unwrap();
        let gw = Netns::new("gw").unwrap();
        let nat = if tuning.nat {
            // site (198.18.0.1) -- NAT (masquerade, random source ports) -- gw (198.18.1.2):
            // the gateway sees the site as the NAT's outer address and a port of its choice.
            assert_eq!(family, Family::V4, "the NAT testbed is IPv4");
            gw_addr = NAT_GW;
            let nat = Netns::new("nat").unwrap();
            Veth::connect(&site, "wan0", &nat, "in0").unwrap();
            Veth::connect(&nat, "out0", &gw, "wan0").unwrap();
            site.add_addr("wan0", &format!("{site_addr}/24")).unwrap();
            nat.add_addr("in0", "198.18.0.254/24").unwrap();
            nat.add_addr("out0", "198.18.1.254/24").unwrap();
            gw.add_addr("wan0", &format!("{gw_addr}/24")).unwrap();
            site.add_route("198.18.1.0/24", "198.18.0.254").unwrap();
            let limit = Duration::from_secs(10);
            nat.exec_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], limit).unwrap();
            for rule in [
                "add table ip nat",
                "add chain ip nat post { type nat hook postrouting priority 100 ; }",
                "add rule ip nat post oifname out0 masquerade random",
            ] {
                let mut argv = vec!["nft"];
                argv.extend(rule.split(' '));
                nat.exec_ok(&argv, limit).unwrap();
            }
            Some(nat)
        } else {
            Veth::connect(&site, "wan0", &gw, "wan0").unwrap();
            site.add_addr("wan0", &format!("{site_addr}/{plen}")).unwrap();
            gw.add_addr("wan0", &format!("{gw_addr}/{plen}")).unwrap();
            None
        };
        site.add_addr("lo", &format!("{SITE_INNER}/32")).unwrap();

        // Cloister: provisioning key, the PSK wrapped for tenant 1, the gateway.
        let key = gw.write_file("provisioning.key", &format!("{}\n", "5a".repeat(32))).unwrap();
        set_mode(&key, 0o600);
        let blob = gw.dir().join("psk.blob");
        match auth.cert() {
            None => wrap_secret(&key, &blob, "psk", format!("{PSK}\n").as_bytes()),
            Some(CertFiles { kind, ca, intermediates, gw_certs, secret_kind }) => {
                let pkcs8 = std::fs::read(fixture(&format!("b-{kind}.key.der"))).unwrap();
                wrap_secret(&key, &blob, secret_kind, &pkcs8);
                std::fs::copy(fixture(gw_certs), gw.dir().join("gw.pem")).unwrap();
                std::fs::copy(fixture(ca), gw.dir().join("ca.pem")).unwrap();
                let sw = site.dir().join("swanctl");
                for sub in ["x509", "x509ca", "private"] {
                    std::fs::create_dir_all(sw.join(sub)).unwrap();
                }
                std::fs::copy(fixture(&format!("a-{kind}.pem")), sw.join("x509/site.pem")).unwrap();
                std::fs::copy(fixture(ca), sw.join("x509ca/ca.pem")).unwrap();
                for i in intermediates {
                    std::fs::copy(fixture(i), sw.join("x509ca").join(i)).unwrap();
                }
                std::fs::copy(fixture(&format!("a-{kind}.key.der")), sw.join("private/site.der")).unwrap();
            }
        }
        for (file, psk) in tuning.psk_files {
            wrap_secret(&key, &gw.dir().join(file), "psk", format!("{psk}\n").as_bytes());
        }
        // Behind the NAT the site has no address of its own that the gateway could name.
        let peer = if tuning.nat { "%any" } else { site_addr };
        let conf = gw.write_file("gateway.toml", &gateway_conf(peer, gw_addr, ike, auth, tuning)).unwrap();
        let mut cloister =
            gw.spawn("cloister", &[CLOISTER, "gateway", "--config", conf.to_str().unwrap()]).unwrap();
        cloister.wait_for_log("gateway: tenant 1", Duration::from_secs(30)).unwrap();

        let swanctl = site
            .write_file("swanctl/swanctl.conf", &swanctl_conf(site_addr, gw_addr, ike, auth, &tuning))
            .unwrap();
        let charon = start_charon(&site, log_keys);
        let tb = Self { _charon: charon, cloister, site, gw, _nat: nat };
        tb.swanctl(&["--load-all", "--file", swanctl.to_str().unwrap()]);
        tb
    }

    fn swanctl(&self, args: &[&str]) -> String {
        let uri = format!("unix://{}", self.site.dir().join("charon.vici").display());
        let mut argv = vec!["swanctl"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--uri", &uri]);
        let out = self.site.exec(&argv, Duration::from_secs(40)).unwrap();
        assert!(
            out.success,
            "swanctl {args:?} failed:\n{}\n{}\ncharon:\n{}",
            out.stdout,
            out.stderr,
            self.logs()
        );
        out.stdout
    }

    fn sa(&self, args: &[&str]) -> String {
        let sock = self.gw.dir().join("gw.sock");
        let mut argv = vec![CLOISTER, "sa", "--socket", sock.to_str().unwrap()];
        argv.extend_from_slice(args);
        let out = self.gw.exec(&argv, Duration::from_secs(15)).unwrap();
        assert!(out.success, "cloister sa {args:?}:\n{}\n{}", out.stdout, out.stderr);
        out.stdout
    }

    /// `cloister sa` output and error text, whether or not the gateway refused.
    fn sa_reply(&self, args: &[&str]) -> String {
        let sock = self.gw.dir().join("gw.sock");
        let mut argv = vec![CLOISTER, "sa", "--socket", sock.to_str().unwrap()];
        argv.extend_from_slice(args);
        let out = self.gw.exec(&argv, Duration::from_secs(15)).unwrap();
        format!("{}{}", out.stdout, out.stderr)
    }

    fn logs(&self) -> String {
        let charon = std::fs::read_to_string(self.site.dir().join("charon.log")).unwrap_or_default();
        format!("--- cloister\n{}\n--- charon\n{}", self.cloister.log(), testnet::excerpt(&charon))
    }

    fn up(&mut self, initiator: Initiator) {
        match initiator {
            Initiator::StrongSwan => {
                self.swanctl(&["--initiate", "--child", "net", "--timeout", "30"]);
            }
            Initiator::Cloister => {
                let reply = self.sa(&["initiate", "site-a"]);
                assert!(reply.contains("initiating site-a"), "{reply}");
            }
        }
        let deadline = Duration::from_secs(30);
        if let Err(e) = self.cloister.wait_for_log("child: net installed", deadline) {
            panic!("no child SA: {e}\n{}", self.logs());
        }
        if initiator == Initiator::Cloister {
            // The responder installs its SAs when it answers; wait until charon lists it.
            let uri = format!("unix://{}", self.site.dir().join("charon.vici").display());
            let ok = testnet::wait_until("charon's child SA", Duration::from_secs(20), || {
                self.site
                    .exec(&["swanctl", "--list-sas", "--uri", &uri], Duration::from_secs(10))
                    .is_ok_and(|o| o.stdout.contains("INSTALLED"))
            });
            assert!(ok.is_ok(), "charon has no child SA\n{}", self.logs());
        }
    }

    fn ping(&self, count: u32) -> String {
        let (c, w) = (count.to_string(), every_reply_deadline(count, "0.2"));
        let out = self
            .site
            .exec(
                &["ping", "-n", "-q", "-c", &c, "-i", "0.2", "-w", &w, "-I", SITE_INNER, GW_INNER],
                Duration::from_secs(30),
            )
            .unwrap();
        assert!(
            out.success && out.stdout.contains(&format!(" {count} received")),
            "ping through the tunnel failed:\n{}\n{}",
            out.stdout,
            self.logs()
        );
        out.stdout.lines().find(|l| l.contains("received")).unwrap_or_default().to_owned()
    }

    /// iperf3 TCP for 5 s from the site to the gateway's inner address; returns Mbit/s.
    fn iperf(&self) -> f64 {
        let mut server =
            self.gw.spawn("iperf3", &["iperf3", "-s", "-1", "--forceflush", "-B", GW_INNER]).unwrap();
        server.wait_for_log("Server listening", Duration::from_secs(20)).unwrap();
        let out = self
            .site
            .exec(&["iperf3", "-c", GW_INNER, "-B", SITE_INNER, "-t", "5", "-J"], Duration::from_secs(30))
            .unwrap();
        drop(server);
        // iperf3 -J can exit 0 with an "error" member.
        assert!(
            out.success && !out.stdout.contains("\"error\""),
            "iperf3 failed:\n{}\n{}\n{}",
            out.stdout,
            out.stderr,
            self.logs()
        );
        let v: f64 = out
            .stdout
            .split("\"sum_received\"")
            .nth(1)
            .and_then(|s| s.split("\"bits_per_second\":").nth(1))
            .and_then(|s| s.split([',', '\n', '}']).next())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0.0);
        assert!(v > 0.0, "iperf3 moved nothing:\n{}", out.stdout);
        v / 1e6
    }
}

fn case(initiator: Initiator, family: Family, ike: &str, auth: Auth) {
    case_with(initiator, family, ike, auth, Tuning::default());
}

fn case_with(initiator: Initiator, family: Family, ike: &str, auth: Auth, tuning: Tuning) {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let mut tb = Testbed::start_with(family, ike, auth, false, tuning);
    tb.up(initiator);
    let ping = tb.ping(5);
    let mbits = tb.iperf();
    let list = tb.sa(&["list"]);
    assert!(list.contains("Established") && list.contains("net: INSTALLED, TUNNEL-in-UDP"), "{list}");
    assert!(!list.contains(PSK));
    // strongSwan 5.9 does no additional key exchange (RFC 9370), whatever Cloister offered.
    assert!(!list.contains("/KE1_"), "{list}");
    let charon = tb.swanctl(&["--list-sas"]);
    let log = std::fs::read_to_string(tb.site.dir().join("charon.log")).unwrap_or_default();
    match auth {
        Auth::Rsa4096Chain => {
            // The point of the case: IKE_AUTH messages over 3 kB on port 4500, both ways.
            for dir in ["sending packet", "received packet"] {
                let largest = largest_natt_packet(&log, dir);
                assert!(
                    largest > 3000,
                    "charon's largest {dir} on port 4500: {largest} bytes\n{}",
                    tb.logs()
                );
            }
        }
        Auth::Rsa4096Fragments(_) => {
            // Both ways in fragments: charon split its IKE_AUTH and put Cloister's together.
            assert!(log.contains("splitting IKE message"), "{}", tb.logs());
            assert!(log.contains("reassembled fragmented IKE message"), "{}", tb.logs());
            for dir in ["sending packet", "received packet"] {
                let largest = largest_natt_packet(&log, dir);
                assert!(largest <= 1280 - 28, "charon's largest {dir}: {largest} bytes\n{}", tb.logs());
            }
        }
        _ => {}
    }
    eprintln!(
        "interop strongswan {initiator:?}-initiates {family:?} {ike} {auth:?}: ping {ping}; iperf3 {mbits:.0} Mbit/s\n{list}{charon}"
    );
    // Delete from strongSwan's side: both ends clean up.
    tb.swanctl(&["--terminate", "--ike", "gw", "--timeout", "20"]);
    let gone = testnet::wait_until("Cloister's SAs gone", Duration::from_secs(10), || {
        tb.sa(&["list"]).contains("no IKE SAs")
    });
    assert!(gone.is_ok(), "{}\n{}", tb.sa(&["list"]), tb.logs());
    assert!(tb.cloister.log().contains("deleted: PeerDeleted"), "{}", tb.logs());
}

/// The size of the largest IKE datagram charon logged as `what` ("sending packet: from
/// 198.18.0.1[4500] to 198.18.0.2[4500] (3676 bytes)") with port 4500 on both ends.
fn largest_natt_packet(log: &str, what: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(what) && l.matches("[4500]").count() == 2)
        .filter_map(|l| l.rsplit_once('(')?.1.strip_suffix(" bytes)")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// One test per initiator × outer family × IKE suite with PSK, and certificate cases.
macro_rules! matrix {
    ($($name:ident: $init:ident $fam:ident $suite:literal $auth:ident;)*) => {
        $(
            #[test]
            fn $name() {
                case(Initiator::$init, Family::$fam, $suite, Auth::$auth);
            }
        )*
    };
    ($($name:ident: $init:ident $fam:ident $suite:literal ($auth:ident($how:literal));)*) => {
        $(
            #[test]
            fn $name() {
                case(Initiator::$init, Family::$fam, $suite, Auth::$auth($how));
            }
        )*
    };
}

matrix! {
    strongswan_initiates_v4_aes256gcm16_prfsha256_ecp256: StrongSwan V4 "aes256gcm16-prfsha256-ecp256" Psk;
    strongswan_initiates_v4_aes256_sha256_modp3072: StrongSwan V4 "aes256-sha256-modp3072" Psk;
    strongswan_initiates_v4_chacha20poly1305_prfsha256_x25519: StrongSwan V4 "chacha20poly1305-prfsha256-x25519" Psk;
    strongswan_initiates_v4_aes128gcm16_prfsha384_ecp384: StrongSwan V4 "aes128gcm16-prfsha384-ecp384" Psk;
    strongswan_initiates_v6_aes256gcm16_prfsha256_ecp256: StrongSwan V6 "aes256gcm16-prfsha256-ecp256" Psk;
    strongswan_initiates_v6_aes256_sha256_modp3072: StrongSwan V6 "aes256-sha256-modp3072" Psk;
    strongswan_initiates_v6_chacha20poly1305_prfsha256_x25519: StrongSwan V6 "chacha20poly1305-prfsha256-x25519" Psk;
    strongswan_initiates_v6_aes128gcm16_prfsha384_ecp384: StrongSwan V6 "aes128gcm16-prfsha384-ecp384" Psk;
    cloister_initiates_v4_aes256gcm16_prfsha256_ecp256: Cloister V4 "aes256gcm16-prfsha256-ecp256" Psk;
    cloister_initiates_v4_aes256_sha256_modp3072: Cloister V4 "aes256-sha256-modp3072" Psk;
    cloister_initiates_v4_chacha20poly1305_prfsha256_x25519: Cloister V4 "chacha20poly1305-prfsha256-x25519" Psk;
    cloister_initiates_v4_aes128gcm16_prfsha384_ecp384: Cloister V4 "aes128gcm16-prfsha384-ecp384" Psk;
    cloister_initiates_v6_aes256gcm16_prfsha256_ecp256: Cloister V6 "aes256gcm16-prfsha256-ecp256" Psk;
    cloister_initiates_v6_aes256_sha256_modp3072: Cloister V6 "aes256-sha256-modp3072" Psk;
    cloister_initiates_v6_chacha20poly1305_prfsha256_x25519: Cloister V6 "chacha20poly1305-prfsha256-x25519" Psk;
    cloister_initiates_v6_aes128gcm16_prfsha384_ecp384: Cloister V6 "aes128gcm16-prfsha384-ecp384" Psk;
    strongswan_initiates_v4_ecdsa_certificates: StrongSwan V4 "aes256gcm16-prfsha256-ecp256" Ecdsa;
    strongswan_initiates_v6_rsa_certificates: StrongSwan V6 "aes256-sha256-modp3072" Rsa;
    cloister_initiates_v4_rsa_certificates: Cloister V4 "aes256gcm16-prfsha256-ecp256" Rsa;
    cloister_initiates_v6_ecdsa_certificates: Cloister V6 "chacha20poly1305-prfsha256-x25519" Ecdsa;
    strongswan_initiates_v4_rsa4096_chains_of_ike_auths_over_3_kb: StrongSwan V4 "aes256gcm16-prfsha256-x25519" Rsa4096Chain;
    cloister_initiates_v6_rsa4096_chains_of_ike_auths_over_3_kb: Cloister V6 "aes256gcm16-prfsha256-x25519" Rsa4096Chain;
}

matrix! {
    strongswan_initiates_v6_rsa4096_chains_in_ike_fragments: StrongSwan V6 "aes256gcm16-prfsha256-x25519" (Rsa4096Fragments("yes"));
    cloister_initiates_v4_rsa4096_chains_in_ike_fragments: Cloister V4 "aes256-sha256-modp3072" (Rsa4096Fragments("yes"));
    strongswan_forces_fragments_v4_rsa4096_chains: StrongSwan V4 "aes256gcm16-prfsha256-x25519" (Rsa4096Fragments("force"));
}

/// Through a real NAT (nftables masquerade with random ports): certificate chains whose
/// IKE_AUTH is over 3 kB, whole (IP-fragmented, reassembled by the NAT's connection
/// tracking) and in RFC 7383 fragments, and a PSK tunnel; strongSwan initiates.
#[test]
fn rsa4096_chains_whole_across_a_real_nat() {
    case_with(Initiator::StrongSwan, Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Rsa4096Chain, NAT);
}

#[test]
fn rsa4096_chains_in_ike_fragments_across_a_real_nat() {
    let auth = Auth::Rsa4096Fragments("yes");
    case_with(Initiator::StrongSwan, Family::V4, "aes256gcm16-prfsha256-x25519", auth, NAT);
}

#[test]
fn strongswan_forcing_fragments_across_a_real_nat() {
    let auth = Auth::Rsa4096Fragments("force");
    case_with(Initiator::StrongSwan, Family::V4, "aes256-sha256-modp3072", auth, NAT);
}

/// Cloister offers the post-quantum hybrid (RFC 9370) first and the classical exchange
/// second; strongSwan 5.9 knows no additional key exchanges.
const HYBRID_FIRST: Tuning = Tuning {
    proposals: r#""aes256gcm16-prfsha384-x25519-ke1_mlkem768", "aes256gcm16-prfsha256-x25519""#,
    ..NO_TUNING
};

const NO_TUNING: Tuning = Tuning {
    gateway: "",
    dataplane: "",
    connection: "",
    child: "",
    children: "",
    charon_children: "",
    tun_addresses: "",
    charon_connections: "",
    charon_secrets: "",
    nat: false,
    psk_files: &[],
    proposals: "",
};

#[test]
fn strongswan_5_9_gets_the_classical_exchange_from_a_hybrid_first_gateway_whoever_initiates() {
    for initiator in [Initiator::StrongSwan, Initiator::Cloister] {
        case_with(initiator, Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Psk, HYBRID_FIRST);
    }
}

/// A gateway that allows only the hybrid and a peer that cannot do it agree on nothing,
/// and say so: the gateway refuses strongSwan's proposals, and takes no answer of
/// strongSwan's that leaves the additional key exchange out (no silent downgrade); it
/// keeps serving.
#[test]
fn a_hybrid_only_gateway_and_strongswan_5_9_agree_on_nothing_and_say_so() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let only = Tuning { proposals: r#""aes256gcm16-prfsha256-x25519-ke1_mlkem768""#, ..NO_TUNING };
    let tb = Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Psk, false, only);
    let uri = format!("unix://{}", tb.site.dir().join("charon.vici").display());
    let out = tb
        .site
        .exec(
            &["swanctl", "--initiate", "--child", "net", "--timeout", "15", "--uri", &uri],
            Duration::from_secs(30),
        )
        .unwrap();
    assert!(!out.success, "no tunnel without the hybrid:\n{}", out.stdout);
    let charon = std::fs::read_to_string(tb.site.dir().join("charon.log")).unwrap_or_default();
    assert!(charon.contains("NO_PROPOSAL_CHOSEN"), "{}", tb.logs());
    let reply = tb.sa(&["initiate", "site-a"]);
    assert!(reply.contains("initiating site-a"), "{reply}");
    let refused =
        testnet::wait_until("the gateway gives up on strongSwan's answer", Duration::from_secs(20), || {
            let log = tb.cloister.log();
            // 5.9 refuses the one proposal (it knows no Transform Type 6); were it to answer
            // without the additional exchange, the gateway would refuse that answer itself.
            log.contains("no proposal chosen") || log.contains("did not offer")
        });
    assert!(refused.is_ok(), "{}", tb.logs());
    let list = tb.sa(&["list"]);
    assert!(!list.contains("Established"), "{list}");
    eprintln!("interop strongswan 5.9 vs hybrid-only gateway: refused both ways\n{}", tb.cloister.log());
}

#[test]
fn psk_across_a_real_nat() {
    case_with(Initiator::StrongSwan, Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk, NAT);
}

const NAT: Tuning = Tuning { nat: true, ..NO_TUNING };

/// Who starts a rekey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rekeyer {
    StrongSwan,
    Cloister,
    /// Both at once (RFC 7296 §2.8: a collision if the requests cross).
    Both,
}

/// What is rekeyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rekeyed {
    Child,
    Ike,
}

/// The first value after `prefix` on a line of `text` (up to a comma or space).
fn field_after(text: &str, prefix: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(prefix)?;
        Some(rest.split([',', ' ']).next().unwrap_or("").to_owned())
    })
}

/// The IKE SA number `sa list` shows (`site-a: #N, ...`).
fn ike_number(list: &str) -> String {
    list.lines()
        .find_map(|l| l.split_once(": #").map(|(_, r)| r.split(',').next().unwrap_or("").to_owned()))
        .expect("an IKE SA")
}

/// The icmp_seq numbers missing from `ping -D` output (1..=count), each with the
/// timestamp of the last reply before it, to line up with the gateway's and charon's logs.
fn missing_pings(output: &str, count: u32) -> String {
    let mut seen = std::collections::BTreeMap::new();
    for l in output.lines() {
        let stamp = l.split(']').next().unwrap_or("").trim_start_matches('[').to_owned();
        let seq =
            l.split("icmp_seq=").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<u32>().ok());
        if let Some(seq) = seq {
            seen.insert(seq, stamp);
        }
    }
    let missing: Vec<String> = (1..=count)
        .filter(|n| !seen.contains_key(n))
        .map(|n| format!("{n} ({})", seen.range(..n).next_back().map_or("-", |(_, t)| t.as_str())))
        .collect();
    missing.join(", ")
}

/// Pings every 10 ms through the tunnel while one side (or both) rekeys the child SA or the
/// IKE SA: no ping may be lost, and afterwards each side holds exactly one IKE SA and one
/// child SA, which still work (an IKE rekey is followed by a child rekey on the new SA).
fn rekey_under_traffic(rekeyer: Rekeyer, what: Rekeyed) {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let mut tb = Testbed::start(Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk);
    tb.up(Initiator::StrongSwan);
    let list = tb.sa(&["list"]);
    let old_spi = field_after(&list, "in  ").expect("an inbound SPI");
    let old_ike = ike_number(&list);
    const PINGS: u32 = 400;
    let mut ping = tb
        .site
        .spawn(
            "ping",
            &[
                "ping",
                "-n",
                "-D",
                "-c",
                &PINGS.to_string(),
                "-i",
                "0.01",
                "-w",
                &every_reply_deadline(PINGS, "0.01"),
                "-I",
                SITE_INNER,
                GW_INNER,
            ],
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let ours = match what {
        Rekeyed::Child => vec!["rekey-child", old_spi.as_str()],
        Rekeyed::Ike => vec!["rekey-ike", old_ike.as_str()],
    };
    let theirs = match what {
        Rekeyed::Child => ["--rekey", "--child", "net"],
        Rekeyed::Ike => ["--rekey", "--ike", "gw"],
    };
    std::thread::scope(|s| {
        if rekeyer != Rekeyer::Cloister {
            s.spawn(|| tb.swanctl(&theirs));
        }
        if rekeyer != Rekeyer::StrongSwan {
            let reply = tb.sa_reply(&ours);
            // Started together, strongSwan's rekey may still finish first and delete the
            // old SA before our request is read; then there is nothing left to rekey.
            let beaten = rekeyer == Rekeyer::Both && reply.contains("no child SA with inbound SPI");
            assert!(reply.contains("rekeying") || beaten, "{reply}");
        }
    });
    let (rekeyed, deleted) = match what {
        Rekeyed::Child => (format!("rekeyed {old_spi} ->"), format!("{old_spi} deleted")),
        Rekeyed::Ike => {
            (format!("ike: #{old_ike} rekeyed -> #"), format!("ike: #{old_ike} deleted: Rekeyed"))
        }
    };
    if let Err(e) = tb.cloister.wait_for_log(&rekeyed, Duration::from_secs(20)) {
        panic!("no rekey: {e}\n{}", tb.logs());
    }
    if let Err(e) = tb.cloister.wait_for_log(&deleted, Duration::from_secs(40)) {
        panic!("old SA not deleted: {e}\n{}", tb.logs());
    }
    if what == Rekeyed::Ike {
        // Redundant SAs of a collision go too; then the new IKE SA rekeys the child.
        let one = testnet::wait_until("one IKE SA on each side", Duration::from_secs(40), || {
            tb.sa(&["list"]).matches(": #").count() == 1
                && tb.swanctl(&["--list-sas"]).matches("ESTABLISHED").count() == 1
        });
        assert!(one.is_ok(), "{}\n{}\n{}", tb.sa(&["list"]), tb.swanctl(&["--list-sas"]), tb.logs());
        let list = tb.sa(&["list"]);
        assert_ne!(ike_number(&list), old_ike);
        assert!(list.contains("net: INSTALLED"), "the child moved to the new IKE SA:\n{list}");
        let spi = field_after(&list, "in  ").expect("an inbound SPI");
        let reply = tb.sa(&["rekey-child", &spi]);
        assert!(reply.contains("rekeying child"), "{reply}");
        if let Err(e) = tb.cloister.wait_for_log(&format!("{spi} deleted"), Duration::from_secs(20)) {
            panic!("no child rekey on the new IKE SA: {e}\n{}", tb.logs());
        }
    }
    let done = testnet::wait_until("ping to finish", Duration::from_secs(30), || !ping.is_running());
    assert!(done.is_ok(), "ping did not finish");
    let summary = ping.log();
    let line = summary.lines().find(|l| l.contains("received")).unwrap_or_default().to_owned();
    let list = tb.sa(&["list"]);
    let charon = tb.swanctl(&["--list-sas"]);
    // A collision leaves traces: a redundant IKE SA deleted besides the old one, or two
    // successors of the old child.
    let log = tb.cloister.log();
    let ike_deletes = log.lines().filter(|l| l.starts_with("ike: #") && l.contains(" deleted: ")).count();
    let collided = ike_deletes > 1 || log.matches(&format!("rekeyed {old_spi} ->")).count() > 1;
    eprintln!("rekey under traffic, {rekeyer:?} rekeys the {what:?} SA: {line} (collision seen: {collided})\n{list}{charon}");
    // Zero loss either way: a rekeyed child's old inbound SA retires for a grace period
    // (ike::RETIRE_GRACE) rather than going with the Delete, so packets the peer sent
    // with it just before still decrypt; IKE SA rekeys do not touch ESP at all.
    assert!(
        line.contains(&format!("{PINGS} packets transmitted, {PINGS} received")),
        "lost pings: {line} (missing icmp_seq, after the reply at that time: {})\n{}",
        missing_pings(&summary, PINGS),
        tb.logs()
    );
    assert!(!list.contains(&old_spi), "old SA still listed:\n{list}");
    assert_eq!(charon.matches("INSTALLED").count(), 1, "charon keeps exactly the new child:\n{charon}");
    assert_eq!(list.matches(": #").count(), 1, "one IKE SA left:\n{list}");
}

#[test]
fn strongswan_rekeys_the_child_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::StrongSwan, Rekeyed::Child);
}

#[test]
fn cloister_rekeys_the_child_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::Cloister, Rekeyed::Child);
}

#[test]
fn strongswan_rekeys_the_ike_sa_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::StrongSwan, Rekeyed::Ike);
}

#[test]
fn cloister_rekeys_the_ike_sa_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::Cloister, Rekeyed::Ike);
}

#[test]
fn both_rekey_the_ike_sa_at_once_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::Both, Rekeyed::Ike);
}

#[test]
fn both_rekey_the_child_at_once_under_traffic_without_loss() {
    rekey_under_traffic(Rekeyer::Both, Rekeyed::Child);
}

/// The largest configuration the data plane accepts works with the process enclave: a TUN
/// MTU of 9000 and batches of 256 (a batch area of 4.6 MiB that the enclave's shared packet
/// area must hold, else it refuses every batch). The SA's path MTU is 1500 bytes, so
/// Cloister fragments a 9000-byte ping without DF before protecting it (RFC 4301 §8.1) and
/// answers one with DF by "fragmentation needed" with the tunnel's MTU (§8.2.1), which the
/// kernel takes (it drops one from its own address); strongSwan's pings arrive as fragments
/// of its 1400-byte TUN, each its own ESP packet.
#[test]
fn the_largest_tun_mtu_and_batch_carry_whole_mtu_packets() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let tuning = Tuning { dataplane: "tun_mtu = 9000\nbatch = 256", ..Tuning::default() };
    let mut tb = Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Psk, false, tuning);
    tb.up(Initiator::StrongSwan);
    let payload = (9000 - 28).to_string();
    for (ns, from, to) in [(&tb.gw, GW_INNER, SITE_INNER), (&tb.site, SITE_INNER, GW_INNER)] {
        let argv = [
            "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-s", &payload, "-M", "dont", "-w", "8", "-I", from,
            to,
        ];
        let out = ns.exec(&argv, Duration::from_secs(15)).unwrap();
        assert!(
            out.success && out.stdout.contains(" 3 received"),
            "{payload}-byte pings from {from} failed:\n{}\n{}",
            out.stdout,
            tb.logs()
        );
    }
    // 1500 - 20 (IP) - 8 (UDP) - 8 (ESP) - 8 (IV) - 16 (ICV), aligned: 1438.
    let argv = ["ping", "-n", "-c", "1", "-s", &payload, "-M", "do", "-w", "3", "-I", GW_INNER, SITE_INNER];
    let out = tb.gw.exec(&argv, Duration::from_secs(10)).unwrap();
    assert!(
        out.stdout.contains(&format!("From {SITE_INNER} icmp_seq=1 Frag needed and DF set (mtu = 1438)")),
        "{}\n{}",
        out.stdout,
        tb.logs()
    );
    let list = tb.sa(&["list"]);
    assert!(list.contains("net: INSTALLED"), "{list}");
}

/// A connection with two children, and Cloister's TUN device with two IPv4 addresses: every
/// child comes up whoever initiates (Cloister: the first in IKE_AUTH, the other in a
/// CREATE_CHILD_SA; strongSwan: one `--initiate` per child, which Cloister answers by the
/// selectors), and each carries its own traffic to its own address.
#[test]
fn two_children_and_two_tun_addresses_carry_traffic_whoever_initiates() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    for initiator in [Initiator::Cloister, Initiator::StrongSwan] {
        let tuning = Tuning {
            children: r#"children.lab = { local_ts = ["198.19.4.0/24"], remote_ts = ["198.19.3.0/24"], esp_proposals = ["aes256gcm16"] }"#,
            charon_children: "lab {\n        local_ts = 198.19.3.1/32\n        remote_ts = 198.19.4.0/24\n        esp_proposals = aes256gcm16\n        start_action = none\n      }",
            tun_addresses: r#", "198.19.4.1/32""#,
            ..Tuning::default()
        };
        let mut tb =
            Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Psk, false, tuning);
        tb.site.add_addr("lo", "198.19.3.1/32").unwrap();
        match initiator {
            Initiator::Cloister => {
                let reply = tb.sa(&["initiate", "site-a"]);
                assert!(reply.contains("initiating site-a"), "{reply}");
            }
            Initiator::StrongSwan => {
                for child in ["net", "lab"] {
                    tb.swanctl(&["--initiate", "--child", child, "--timeout", "30"]);
                }
            }
        }
        for child in ["net", "lab"] {
            let line = format!("child: {child} installed");
            if let Err(e) = tb.cloister.wait_for_log(&line, Duration::from_secs(30)) {
                panic!("{initiator:?}: no child SA {child}: {e}\n{}", tb.logs());
            }
        }
        for (from, to) in [(SITE_INNER, GW_INNER), ("198.19.3.1", "198.19.4.1")] {
            let argv = ["ping", "-n", "-q", "-c", "3", "-i", "0.2", "-w", "8", "-I", from, to];
            let out = tb.site.exec(&argv, Duration::from_secs(15)).unwrap();
            assert!(
                out.success && out.stdout.contains(" 3 received"),
                "{initiator:?}: {from} -> {to}:\n{}\n{}",
                out.stdout,
                tb.logs()
            );
        }
        let list = tb.sa(&["list"]);
        assert!(list.contains("net: INSTALLED") && list.contains("lab: INSTALLED"), "{list}");
    }
}

/// Three sites behind one strongSwan (one address, identities site-a, site-c and site-d,
/// each with its own PSK and inner address) and three connections on one Cloister address:
/// Cloister, the responder, can tell them apart only by the identities in IKE_AUTH, and
/// switches to each one's connection (its PSK, its selectors); each site's traffic flows.
#[test]
fn three_sites_on_one_gateway_address_are_told_apart_by_identity() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let (site_addr, gw_addr, _) = Family::V4.outer();
    let ike = "aes256gcm16-prfsha256-x25519";
    let (mut gw_extra, mut charon_conns, mut charon_secrets) = (String::new(), String::new(), String::new());
    for (site, n) in [("c", 3), ("d", 5)] {
        gw_extra.push_str(&format!(
            r#"
[connections.site-{site}]
local_addrs = ["{gw_addr}"]
remote_addrs = ["{site_addr}"]
proposals = ["{ike}"]
local = {{ auth = "psk", id = "{GW_ID}", secret = "psk-{site}" }}
remote = {{ auth = "psk", id = "site-{site}.cloister.test" }}
children.net-{site} = {{ local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.{n}.0/24"], esp_proposals = ["aes256gcm16"] }}

[secrets.psk-{site}]
file = "psk-{site}.blob"
"#
        ));
        charon_conns.push_str(&format!(
            "gw-{site} {{\n    version = 2\n    local_addrs = {site_addr}\n    remote_addrs = {gw_addr}\n    proposals = {ike}\n    local {{ auth = psk\n            id = site-{site}.cloister.test }}\n    remote {{ auth = psk\n             id = {GW_ID} }}\n    children {{\n      net-{site} {{\n        local_ts = 198.19.{n}.1/32\n        remote_ts = 198.19.2.0/24\n        esp_proposals = aes256gcm16\n        start_action = none\n      }}\n    }}\n  }}\n  "
        ));
        charon_secrets.push_str(&format!(
            "ike-{site} {{ id-a = site-{site}.cloister.test\n           id-b = {GW_ID}\n           secret = \"the PSK of site {site}\" }}\n  "
        ));
    }
    let tuning = Tuning {
        children: Box::leak(gw_extra.into_boxed_str()),
        charon_connections: Box::leak(charon_conns.into_boxed_str()),
        charon_secrets: Box::leak(charon_secrets.into_boxed_str()),
        psk_files: &[("psk-c.blob", "the PSK of site c"), ("psk-d.blob", "the PSK of site d")],
        ..Tuning::default()
    };
    let mut tb = Testbed::start_with(Family::V4, ike, Auth::Psk, false, tuning);
    for a in ["198.19.3.1/32", "198.19.5.1/32"] {
        tb.site.add_addr("lo", a).unwrap();
    }
    for child in ["net", "net-c", "net-d"] {
        tb.swanctl(&["--initiate", "--child", child, "--timeout", "30"]);
    }
    for child in ["net", "net-c", "net-d"] {
        let line = format!("child: {child} installed");
        if let Err(e) = tb.cloister.wait_for_log(&line, Duration::from_secs(30)) {
            panic!("no child SA {child}: {e}\n{}", tb.logs());
        }
    }
    for from in [SITE_INNER, "198.19.3.1", "198.19.5.1"] {
        let argv = ["ping", "-n", "-q", "-c", "3", "-i", "0.2", "-w", "8", "-I", from, GW_INNER];
        let out = tb.site.exec(&argv, Duration::from_secs(15)).unwrap();
        assert!(out.success && out.stdout.contains(" 3 received"), "{from}:\n{}\n{}", out.stdout, tb.logs());
    }
    let list = tb.sa(&["list"]);
    for conn in ["site-a:", "site-c:", "site-d:"] {
        assert!(list.contains(conn), "{conn} in\n{list}");
    }
    assert_eq!(list.matches("Established").count(), 3, "{list}");
}

/// `kill -9` of the enclave process under traffic: the gateway says so, starts a fresh
/// enclave, provisions its secret again and initiates the connection, whoever initiated it
/// first; strongSwan takes the new IKE SA (INITIAL_CONTACT) and pings get through again
/// with no command typed. Five kills each way; the time from the kill to the first ping
/// answered is printed.
#[test]
fn a_killed_enclave_is_replaced_and_traffic_returns_whoever_initiated() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let mut times = Vec::new();
    for initiator in [Initiator::StrongSwan, Initiator::Cloister] {
        let mut tb = Testbed::start(Family::V4, "aes256gcm16-prfsha256-x25519", Auth::Psk);
        tb.up(initiator);
        tb.ping(2);
        for kill in 1..=5 {
            let pid = latest_enclave_pid(&tb.cloister.log());
            let killed = Instant::now();
            let out = tb.gw.exec(&["kill", "-9", &pid.to_string()], Duration::from_secs(5)).unwrap();
            assert!(out.success, "kill {pid}: {}", out.stderr);
            let back = testnet::wait_until("a ping through the new tunnel", Duration::from_secs(30), || {
                // A 100 ms answer deadline: the probe's own resolution.
                let argv = ["ping", "-n", "-q", "-c", "1", "-W", "0.1", "-I", SITE_INNER, GW_INNER];
                tb.site.exec(&argv, Duration::from_secs(5)).is_ok_and(|o| o.success)
            });
            assert!(back.is_ok(), "{initiator:?}, kill {kill}: no traffic after the restart\n{}", tb.logs());
            times.push(killed.elapsed().as_millis());
            let log = tb.cloister.log();
            assert_eq!(log.matches("enclave died").count(), kill, "{log}");
            assert_eq!(log.matches("enclave restarted in").count(), kill, "{log}");
        }
        let log = tb.cloister.log();
        let restarts: Vec<&str> = log.lines().filter(|l| l.contains("enclave restarted in")).collect();
        eprintln!("{initiator:?} initiated first: {restarts:#?}");
        let list = tb.sa(&["list"]);
        assert!(list.contains("Established") && list.contains("net: INSTALLED"), "{list}");
        let charon = tb.swanctl(&["--list-sas"]);
        assert_eq!(charon.matches("ESTABLISHED").count(), 1, "strongSwan keeps one IKE SA:\n{charon}");
    }
    times.sort_unstable();
    eprintln!(
        "enclave kill to traffic back, ms (10 kills): median {} min {} max {}: {times:?}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}

/// The newest enclave process's pid: the start line's, or the last restart line's.
fn latest_enclave_pid(log: &str) -> u32 {
    let last = log.rsplit("enclave process pid ").next().unwrap_or_default();
    last.split(|c: char| !c.is_ascii_digit()).next().and_then(|p| p.parse().ok()).expect("an enclave pid")
}

/// Volume lifetimes: with `rekey_bytes = "64k"` on Cloister's side, 1000-byte pings every
/// 10 ms (about 100 kB/s each way) make the data plane's byte counters cross the soft limit
/// again and again; each crossing rekeys the child, and no ping may be lost meanwhile.
#[test]
fn the_byte_limit_rekeys_the_child_under_traffic_without_loss() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let tuning = Tuning { child: r#", rekey_bytes = "64k", life_bytes = "4m""#, ..Tuning::default() };
    let mut tb = Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk, false, tuning);
    tb.up(Initiator::StrongSwan);
    let out = tb
        .site
        .exec(
            &[
                "ping",
                "-n",
                "-q",
                "-c",
                "300",
                "-i",
                "0.01",
                "-s",
                "1000",
                "-w",
                &every_reply_deadline(300, "0.01"),
                "-I",
                SITE_INNER,
                GW_INNER,
            ],
            Duration::from_secs(30),
        )
        .unwrap();
    let line = out.stdout.lines().find(|l| l.contains("received")).unwrap_or_default().to_owned();
    let log = tb.cloister.log();
    let rekeys = log.matches("soft lifetime (Bytes): rekeying").count();
    eprintln!("byte-limit rekeys: {rekeys} during 300 pings of 1000 bytes: {line}");
    assert!(rekeys >= 2, "expected several byte-limit rekeys:\n{}", tb.logs());
    assert!(!log.contains("hard lifetime"), "no SA may reach its hard limit:\n{}", tb.logs());
    assert!(line.contains("300 packets transmitted, 300 received"), "lost pings: {line}\n{}", tb.logs());
    let list = tb.sa(&["list"]);
    assert!(list.contains("net: INSTALLED"), "{list}");
}

/// Dead peer detection: with the link to the site cut, the gateway's liveness checks go
/// unanswered and it removes the IKE SA and its child SA (traffic for the site is then
/// dropped, never sent in clear). Timers: 2 s DPD delay, 3 sends 0.5 s apart, doubling.
#[test]
fn dead_peer_detection_removes_the_sas_of_a_cut_off_peer() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let tuning = Tuning {
        gateway: "retransmit_timeout = \"500ms\"\nretransmit_tries = 3",
        connection: "dpd_delay = \"2s\"",
        ..Tuning::default()
    };
    let mut tb = Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk, false, tuning);
    tb.up(Initiator::StrongSwan);
    tb.ping(2);
    let ike = ike_number(&tb.sa(&["list"]));
    // A live peer answers the liveness checks: the SA survives several DPD rounds.
    std::thread::sleep(Duration::from_secs(5));
    assert!(tb.sa(&["list"]).contains("net: INSTALLED"), "{}", tb.logs());
    let cut = std::time::Instant::now();
    let out = tb.site.exec(&["ip", "link", "set", "wan0", "down"], Duration::from_secs(10)).unwrap();
    assert!(out.success, "{}", out.stderr);
    if let Err(e) =
        tb.cloister.wait_for_log(&format!("ike: #{ike} deleted: PeerUnreachable"), Duration::from_secs(30))
    {
        panic!("no dead peer detection: {e}\n{}", tb.logs());
    }
    let took = cut.elapsed();
    let list = tb.sa(&["list"]);
    assert!(list.contains("no IKE SAs"), "{list}");
    assert!(tb.cloister.log().contains(" deleted (IKE SA #"), "the child went with it:\n{}", tb.logs());
    eprintln!("dead peer detection: SAs removed {:.1} s after the link was cut", took.as_secs_f64());
    // Silence (at most 2 s) + 0.5 + 1 + 2 s of retransmissions: well under 10 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// The secrets charon logged at level 4 (`NAME => N bytes @ ADDR` and hex-dump lines), by
/// name, each occurrence numbered.
fn charon_keys(log: &str) -> Vec<(String, Vec<u8>)> {
    const NAMES: [&str; 11] = [
        "Sk_d secret",
        "Sk_ai secret",
        "Sk_ar secret",
        "Sk_ei secret",
        "Sk_er secret",
        "Sk_pi secret",
        "Sk_pr secret",
        "encryption initiator key",
        "encryption responder key",
        "integrity initiator key",
        "integrity responder key",
    ];
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    // charon's threads log concurrently: each thread's dump continues its own last header.
    let mut current: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for line in log.lines() {
        let Some((prefix, rest)) = line.split_once("] ") else { continue };
        let thread =
            prefix.split('[').next().unwrap_or("").split_whitespace().last().unwrap_or("").to_owned();
        if let Some((name, _)) = rest.split_once(" => ") {
            match NAMES.iter().find(|n| **n == name) {
                Some(n) => {
                    let k = out.iter().filter(|(o, _)| o.starts_with(n)).count();
                    out.push((format!("{n} #{k}"), Vec::new()));
                    current.insert(thread, out.len() - 1);
                }
                None => {
                    current.remove(&thread);
                }
            }
            continue;
        }
        let Some(&i) = current.get(&thread) else { continue };
        // "   16: 05 2E BC ...  ascii": hex pairs after the offset, up to the ASCII column.
        let dump = rest.split_once(": ").filter(|(offset, _)| offset.trim().parse::<usize>().is_ok());
        let Some((_, dump)) = dump else {
            current.remove(&thread);
            continue;
        };
        let bytes = dump.get(..48.min(dump.len())).unwrap_or("");
        for tok in bytes.split_whitespace() {
            match u8::from_str_radix(tok, 16) {
                Ok(b) if tok.len() == 2 => out[i].1.push(b),
                _ => break,
            }
        }
    }
    out.retain(|(_, k)| !k.is_empty());
    out
}

/// Issue 5's end-to-end key exposure check: strongSwan logs every key it shares with us;
/// none may be in the memory of the `cloister gateway` process, while the enclave process
/// must hold the ones it keeps after clear-and-seal (positive control, so the scan can fail).
#[test]
fn no_key_that_strongswan_logged_is_in_the_gateway_process() {
    use testnet::memscan::{scan, Needles};
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let mut tb =
        Testbed::start_with(Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk, true, Tuning::default());
    tb.up(Initiator::StrongSwan);
    tb.ping(20);
    let log = std::fs::read_to_string(tb.site.dir().join("charon.log")).unwrap();
    let keys = charon_keys(&log);
    let mut needles = Needles::new();
    needles.add("PSK", PSK.as_bytes()).unwrap();
    for (name, key) in &keys {
        needles.add(name, key).unwrap();
    }
    let names = needles.names();
    for expected in ["Sk_d secret #0", "Sk_ei secret #0", "Sk_pi secret #0", "encryption initiator key #0"] {
        assert!(names.iter().any(|n| n == expected), "charon logged no {expected}: {names:?}");
    }
    let gateway_pid = tb.cloister.pid();
    let start = tb.cloister.log();
    let enclave_pid = common::enclave_pid(&start);
    let gw = scan(gateway_pid, &needles).unwrap();
    let enc = scan(enclave_pid, &needles).unwrap();
    eprintln!(
        "key exposure end to end: {} keys from charon's log + PSK: {names:?}\n  gateway pid {gateway_pid}: {} bytes scanned, found {:?}\n  enclave pid {enclave_pid}: {} bytes scanned, found {:?}",
        keys.len(),
        gw.scanned,
        gw.found,
        enc.scanned,
        enc.found
    );
    assert!(gw.scanned > 1 << 20 && enc.scanned > 1 << 20, "scans read too little");
    assert!(gw.found.is_empty(), "keys in the gateway process: {:?}", gw.found);
    // What the enclave keeps after clear-and-seal: the PSK, SK_e*, both ESP keys.
    for held in [
        "PSK",
        "Sk_ei secret #0",
        "Sk_er secret #0",
        "encryption initiator key #0",
        "encryption responder key #0",
    ] {
        assert!(
            enc.found.contains_key(held),
            "positive control: {held} not found in the enclave: {:?}",
            enc.found
        );
    }
    // Clear-and-seal (EnclaveVPN §4.5.2), end to end: SK_d lives only sealed, SK_p* are gone.
    for cleared in ["Sk_d secret #0", "Sk_pi secret #0", "Sk_pr secret #0"] {
        assert!(
            !enc.found.contains_key(cleared),
            "{cleared} still in the enclave after clear-and-seal: {:?}",
            enc.found
        );
    }
}

/// The privilege test's gateway half: started as root, `cloister gateway` runs its enclave
/// process as a user of its own and, once set up, becomes another with the three network
/// capabilities; the tunnel then comes up and carries traffic (routes, sockets, the
/// enclave) all the same. As the gateway's user, neither the enclave's nor the platform's
/// memory opens, nor the provisioning key, the wrapped PSK or the ledger.
#[test]
fn the_gateway_and_its_enclave_run_as_users_of_their_own() {
    if !testnet::can_create_namespaces() || !Path::new(CHARON).exists() {
        testnet::skip("needs root and strongSwan; run scripts/setup.sh");
        return;
    }
    let mut tb = Testbed::start(Family::V4, "aes256gcm16-prfsha256-ecp256", Auth::Psk);
    tb.up(Initiator::StrongSwan);
    tb.ping(5);
    let log = tb.cloister.log();
    common::assert_dropped_to_its_own_user(
        "gateway",
        tb.cloister.pid(),
        &log,
        (1_899_999_999, 1_900_000_001),
        tb.gw.dir(),
        &["provisioning.key", "psk.blob", "ledger/1"],
    );
}
