//! IKEv2 interop with a second independent implementation: libreswan 4.10's pluto in one
//! network namespace, `cloister gateway` with its enclave process in another, joined by a veth.
//!
//! # What pluto can and cannot do on these machines
//!
//! The kernel has no XFRM state types at all (no ESP, AH or IPcomp: `ip xfrm state add`
//! answers "Requested type not found"), and pluto 4.10's only kernel backend on Linux is
//! XFRM, with no option or impair that skips installing a child SA. So pluto negotiates IKE
//! and child SAs with Cloister byte for byte, then fails to install every child it agreed:
//! `ERROR: "gw" #2: netlink response for Add SA esp.SPI@ADDR: Function not implemented
//! (errno 38)`. What follows depends on pluto's role (v4.10, programs/pluto/ikev2_child.c):
//!
//! - as the child's **initiator** (IKE_AUTH or CREATE_CHILD_SA) the failed install is fatal to
//!   the whole IKE SA: `CHILD SA encountered fatal error: INVALID_SYNTAX`, then `deleting
//!   state (STATE_V2_ESTABLISHED_IKE_SA) ... and NOT sending notification`. Cloister has by
//!   then installed the child, and keeps it (nothing told it otherwise);
//! - as the child's **responder** it answers `TS_UNACCEPTABLE` and keeps the IKE SA, so both
//!   ends hold an established IKE SA without a child.
//!
//! Pluto therefore never holds a child SA here, which rules out a complete child rekey in
//! either direction: `whack --rekey-ipsec` says "connection does not have Child SA", and
//! Cloister's CREATE_CHILD_SA(REKEY_SA) reaches a pluto that has already dropped the IKE SA.
//! The tests assert what is observable instead (and say so where they do): both IKE SAs
//! established and authenticated, the child agreed and installed on Cloister's side with the
//! SPI pluto tried to give the kernel, pluto's kernel error, the TS_UNACCEPTABLE that
//! follows, IKE SA deletion by Cloister, a libreswan-initiated CREATE_CHILD_SA with PFS, and
//! Cloister's rekey request reaching pluto. Nothing here fakes a kernel.
//!
//! Pluto runs from the private unpack that scripts/setup.sh makes under `.deps/libreswan`
//! with every file (config, secrets, NSS database, control socket, PID file) in the test's
//! scratch directory. It hard-codes `/usr/libexec/ipsec/addconn`, which it runs at start, so
//! inside the namespace's private mount namespace (`ip netns exec` makes one) the private
//! `usr/libexec` is bind-mounted over `/usr/libexec`, and a tmpfs covers `/run`; the host's
//! `/usr/libexec`, `/etc/ipsec*` and `/run/pluto` are never touched. `--impair revival`
//! keeps pluto from re-initiating in a loop after the kernel refused its child.
//!
//! Needs root (namespaces) and the unpacked libreswan; elsewhere each case prints a notice
//! and passes without running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;

use common::{fixture, set_mode, wrap_secret, Family, CLOISTER, GW_ID, PSK, SITE_ID};
use testnet::{Netns, Process, Veth};

/// scripts/setup.sh unpacks libreswan's .deb here (`dpkg -x`).
const LIBRESWAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/libreswan");
/// The suites of the issue in both syntaxes. The child's PFS group matters only for
/// CREATE_CHILD_SA (pluto offers its IKE group there, `pfs=yes` by default).
const CLOISTER_IKE: &str = "aes256gcm16-prfsha256-ecp256";
const CLOISTER_ESP: &str = "aes256gcm16-ecp256";
const PLUTO_IKE: &str = "aes_gcm256-sha2_256;dh19";
const PLUTO_ESP: &str = "aes_gcm256;dh19";
/// Traffic selectors, identical on both sides: pluto as responder does not narrow.
const SITE_NET: &str = "198.19.1.0/24";
const GW_NET: &str = "198.19.2.0/24";
/// The line pluto logs when the kernel refuses a child SA.
const KERNEL_REFUSAL: &str = "Function not implemented (errno 38)";
/// Bounds of the waits.
const STEP: Duration = Duration::from_secs(20);
const CMD: Duration = Duration::from_secs(30);

fn libreswan(rel: &str) -> PathBuf {
    Path::new(LIBRESWAN).join(rel)
}

fn whack_bin() -> PathBuf {
    libreswan("usr/libexec/ipsec/whack")
}

/// How the two ends authenticate. Certificates are crates/ike/tests/certs' fixtures:
/// pluto is site-a, Cloister site-b, one CA per key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Psk,
    /// ECDSA P-256 with pluto told to sign with SHA2-256 (`authby=ecdsa-sha2_256`).
    Ecdsa,
    /// ECDSA P-256 with pluto's default `authby=ecdsa`: as initiator it signs with the
    /// strongest hash Cloister announced (SHA2-512).
    EcdsaPlutoDefault,
    /// RSA-2048 (`authby=rsasig`).
    Rsa,
}

impl Auth {
    /// (fixture key type, CA file, enclave secret kind).
    fn cert(self) -> Option<(&'static str, &'static str, &'static str)> {
        match self {
            Self::Psk => None,
            Self::Ecdsa | Self::EcdsaPlutoDefault => Some(("p256", "ca-ec.pem", "ecdsa-p256")),
            Self::Rsa => Some(("rsa", "ca-rsa.pem", "rsa")),
        }
    }

    fn authby(self) -> &'static str {
        match self {
            Self::Psk => "secret",
            Self::Ecdsa => "ecdsa-sha2_256",
            Self::EcdsaPlutoDefault => "ecdsa",
            Self::Rsa => "rsasig",
        }
    }

    /// Cloister's identity: the certificates are site-b's.
    fn gw_id(self) -> &'static str {
        if self == Self::Psk {
            GW_ID
        } else {
            "site-b.cloister.test"
        }
    }

    /// How pluto reports that it authenticated Cloister.
    fn pluto_verified(self) -> String {
        match self {
            Self::Psk => format!("authenticated peer using authby=secret and ID_FQDN '@{GW_ID}'"),
            _ => format!("digital signature using peer certificate '@{}'", self.gw_id()),
        }
    }
}

/// Whether this machine can run the cases; prints the notice if not.
fn runnable(auth: Auth) -> bool {
    let mut missing = Vec::new();
    if !testnet::can_create_namespaces() {
        missing.push("root");
    }
    if !libreswan("usr/libexec/ipsec/pluto").exists() {
        missing.push("libreswan in .deps (scripts/setup.sh)");
    }
    if !Path::new("/usr/bin/certutil").exists() {
        missing.push("certutil (libnss3-tools)");
    }
    if auth.cert().is_some() {
        for tool in ["/usr/bin/pk12util", "/usr/bin/openssl"] {
            if !Path::new(tool).exists() {
                missing.push(tool);
            }
        }
    }
    if missing.is_empty() {
        true
    } else {
        testnet::skip(&format!("needs {}", missing.join(", ")));
        false
    }
}

fn ipsec_conf(site: &str, gw: &str, auth: Auth) -> String {
    let cert = if auth.cert().is_some() { "\n    leftcert=site" } else { "" };
    format!(
        r#"config setup
    plutodebug=none

conn gw
    ikev2=insist
    left={site}
    leftid=@{SITE_ID}{cert}
    leftsubnet={SITE_NET}
    right={gw}
    rightid=@{gw_id}
    rightsubnet={GW_NET}
    authby={authby}
    ike={PLUTO_IKE}
    esp={PLUTO_ESP}
    auto=add
"#,
        gw_id = auth.gw_id(),
        authby = auth.authby(),
    )
}

fn gateway_conf(site: &str, gw: &str, auth: Auth) -> String {
    let gw_id = auth.gw_id();
    let (local, remote) = match auth {
        Auth::Psk => (
            format!(r#"{{ auth = "psk", id = "{gw_id}", secret = "key" }}"#),
            format!(r#"{{ auth = "psk", id = "{SITE_ID}" }}"#),
        ),
        _ => (
            format!(r#"{{ auth = "pubkey", certs = ["gw.pem"], id = "{gw_id}", secret = "key" }}"#),
            format!(r#"{{ auth = "pubkey", cacerts = ["ca.pem"], id = "{SITE_ID}" }}"#),
        ),
    };
    format!(
        r#"[gateway]
tenant = 1
enclave = "process"
provisioning_key = "provisioning.key"
control_socket = "gw.sock"

[dataplane]
tun = "clgw0"
tun_addresses = ["198.19.2.1/32"]
listen = ["{listen}"]
workers = 2

[connections.site-a]
local_addrs = ["{gw}"]
remote_addrs = ["{site}"]
proposals = ["{CLOISTER_IKE}"]
local = {local}
remote = {remote}
children.net = {{ local_ts = ["{GW_NET}"], remote_ts = ["{SITE_NET}"], esp_proposals = ["{CLOISTER_ESP}"] }}

[secrets.key]
file = "key.blob"
"#,
        listen = if gw.contains(':') { format!("[{gw}]:4500") } else { format!("{gw}:4500") },
    )
}

/// A libreswan site and a Cloister gateway, joined by a veth pair.
struct Testbed {
    // Processes first: they are stopped (on drop) before their namespaces go.
    pluto: Process,
    cloister: Process,
    site: Netns,
    gw: Netns,
    family: Family,
    auth: Auth,
}

impl Testbed {
    fn start(family: Family, auth: Auth) -> Self {
        let (site_addr, gw_addr, plen) = family.outer();
        let site = Netns::new("lsite").unwrap();
        let gw = Netns::new("lgw").unwrap();
        Veth::connect(&site, "wan0", &gw, "wan0").unwrap();
        site.add_addr("wan0", &format!("{site_addr}/{plen}")).unwrap();
        gw.add_addr("wan0", &format!("{gw_addr}/{plen}")).unwrap();
        site.add_addr("lo", "198.19.1.1/32").unwrap();

        // Cloister: provisioning key, the PSK or private key wrapped for tenant 1, the gateway.
        let key = gw.write_file("provisioning.key", &format!("{}\n", "5a".repeat(32))).unwrap();
        set_mode(&key, 0o600);
        let blob = gw.dir().join("key.blob");
        match auth.cert() {
            None => wrap_secret(&key, &blob, "psk", format!("{PSK}\n").as_bytes()),
            Some((kind, ca, secret_kind)) => {
                let pkcs8 = std::fs::read(fixture(&format!("b-{kind}.key.der"))).unwrap();
                wrap_secret(&key, &blob, secret_kind, &pkcs8);
                std::fs::copy(fixture(&format!("b-{kind}.pem")), gw.dir().join("gw.pem")).unwrap();
                std::fs::copy(fixture(ca), gw.dir().join("ca.pem")).unwrap();
            }
        }
        let conf = gw.write_file("gateway.toml", &gateway_conf(site_addr, gw_addr, auth)).unwrap();
        let mut cloister =
            gw.spawn("cloister", &[CLOISTER, "gateway", "--config", conf.to_str().unwrap()]).unwrap();
        cloister.wait_for_log("gateway: tenant 1", STEP).unwrap();

        let pluto = start_pluto(&site, site_addr, gw_addr, auth);
        Self { pluto, cloister, site, gw, family, auth }
    }

    fn ctl(&self) -> PathBuf {
        self.site.dir().join("run/pluto.ctl")
    }

    /// `whack --ctlsocket ... ARGS`; its output (pluto's numbered progress lines).
    fn whack(&self, args: &[&str]) -> String {
        let bin = whack_bin();
        let ctl = self.ctl();
        let mut argv = vec![bin.to_str().unwrap(), "--ctlsocket", ctl.to_str().unwrap()];
        argv.extend_from_slice(args);
        let out = self.site.exec(&argv, CMD).unwrap();
        format!("{}{}", out.stdout, out.stderr)
    }

    /// How many IKE SAs pluto holds (`IKE SAs: total(N)` of `whack --status`).
    fn pluto_ike_sas(&self) -> Option<u32> {
        let status = self.whack(&["--status"]);
        status.split("IKE SAs: total(").nth(1)?.split(')').next()?.parse().ok()
    }

    fn sa(&self, args: &[&str]) -> String {
        let sock = self.gw.dir().join("gw.sock");
        let mut argv = vec![CLOISTER, "sa", "--socket", sock.to_str().unwrap()];
        argv.extend_from_slice(args);
        let out = self.gw.exec(&argv, Duration::from_secs(15)).unwrap();
        assert!(out.success, "cloister sa {args:?}:\n{}\n{}", out.stdout, out.stderr);
        out.stdout
    }

    fn logs(&self) -> String {
        format!("--- cloister\n{}\n--- pluto\n{}", self.cloister.log(), testnet::excerpt(&self.pluto.log()))
    }

    fn gw_addr(&self) -> &'static str {
        self.family.outer().1
    }

    /// Waits for pluto's kernel refusal of a child SA; returns the SPI of the SA it tried to
    /// add (the outbound one, so Cloister's inbound SPI) and the line.
    fn wait_kernel_refusal(&mut self) -> (u32, String) {
        if let Err(e) = self.pluto.wait_for_log(KERNEL_REFUSAL, STEP) {
            panic!("pluto logged no kernel refusal: {e}\n{}", self.logs());
        }
        let log = self.pluto.log();
        let line = log.lines().find(|l| l.contains("netlink response for Add SA")).unwrap_or("").to_owned();
        assert!(line.contains(KERNEL_REFUSAL), "unexpected kernel error: {line}\n{}", self.logs());
        assert!(line.contains(&format!("@{}: ", self.gw_addr())), "SA not towards Cloister: {line}");
        let spi = pluto_spi(&line).unwrap_or_else(|| panic!("no SPI in {line:?}"));
        (spi, line)
    }

    /// libreswan brings the tunnel up. Returns Cloister's inbound SPI of the child.
    fn up_by_libreswan(&mut self) -> u32 {
        let out = self.whack(&["--initiate", "--name", "gw"]);
        assert!(
            out.contains("initiator established IKE SA") && out.contains(&self.auth.pluto_verified()),
            "pluto did not establish the IKE SA:\n{out}\n{}",
            self.logs()
        );
        if let Err(e) = self.cloister.wait_for_log("child: net installed", STEP) {
            panic!("no child SA on Cloister: {e}\n{out}\n{}", self.logs());
        }
        let log = self.cloister.log();
        assert!(log.contains("established as Responder"), "{log}");
        let in_spi = cloister_in_spi(&log).expect("Cloister's inbound SPI");
        let list = self.sa(&["list"]);
        assert!(list.contains("Established") && list.contains("net: INSTALLED, TUNNEL"), "{list}");
        assert!(list.contains(&format!("in  {in_spi:08x}")), "{list}");
        assert!(list.contains("remote 198.19.1.0-198.19.1.255"), "selectors:\n{list}");

        // Pluto agreed on the same child: the SA it asked the kernel for is Cloister's inbound
        // one. The kernel refuses it and pluto drops the IKE SA without telling Cloister.
        let (spi, line) = self.wait_kernel_refusal();
        assert_eq!(spi, in_spi, "pluto's outbound SA is not Cloister's inbound one: {line}");
        assert!(out.contains("CHILD SA encountered fatal error"), "{out}");
        let gone = testnet::wait_until("pluto dropping its IKE SA", STEP, || self.pluto_ike_sas() == Some(0));
        assert!(gone.is_ok(), "pluto kept its IKE SA:\n{}", self.whack(&["--status"]));
        eprintln!("libreswan initiated: pluto says\n{out}Cloister:\n{list}");
        in_spi
    }

    /// Cloister brings the IKE SA up; pluto refuses the child (kernel). Returns Cloister's
    /// IKE SA number.
    fn up_by_cloister(&mut self) -> String {
        let reply = self.sa(&["initiate", "site-a"]);
        let ike = reply
            .trim()
            .strip_prefix("initiating site-a as IKE SA #")
            .unwrap_or_else(|| panic!("{reply}"))
            .to_owned();
        if let Err(e) = self.cloister.wait_for_log("child: net failed", STEP) {
            panic!("no child outcome on Cloister: {e}\n{}", self.logs());
        }
        let log = self.cloister.log();
        assert!(log.contains(&format!("ike: site-a #{ike} established as Initiator")), "{log}");
        assert!(
            log.contains(&format!(
                "child: net failed on IKE SA #{ike}: traffic selectors unacceptable (refused by the peer)"
            )),
            "{log}"
        );
        let pluto = self.pluto.log();
        let established = pluto.lines().find(|l| l.contains("responder established IKE SA")).unwrap_or("");
        assert!(established.contains(&self.auth.pluto_verified()), "{}", self.logs());
        // Pluto chose Cloister's ESP proposal, SPI and all, then the kernel refused it.
        let chosen = pluto
            .lines()
            .find(|l| l.contains("proposal 1:ESP=AES_GCM_C_256-DISABLED SPI="))
            .unwrap_or_else(|| panic!("pluto chose no ESP proposal\n{}", self.logs()))
            .to_owned();
        let (spi, refusal) = self.wait_kernel_refusal();
        assert!(chosen.contains(&format!("SPI={spi:08x} chosen")), "{chosen}\n{refusal}");
        let status = self.whack(&["--status"]);
        assert!(
            status.contains("STATE_V2_ESTABLISHED_IKE_SA") && status.contains("IPsec SAs: total(0)"),
            "pluto:\n{status}"
        );
        let list = self.sa(&["list"]);
        assert!(list.contains(&format!("site-a: #{ike}, Established")) && !list.contains("net:"), "{list}");
        eprintln!("Cloister initiated: pluto says\n  {chosen}\n  {refusal}\nCloister:\n{list}");
        ike
    }
}

/// Starts pluto in `site` with every file in its scratch directory; waits until it loaded
/// the connection and its secrets.
fn start_pluto(site: &Netns, site_addr: &str, gw_addr: &str, auth: Auth) -> Process {
    let d = site.dir().to_path_buf();
    for sub in ["nss", "ipsec.d", "run"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let nss = format!("sql:{}", d.join("nss").display());
    testnet::run_ok(&["certutil", "-N", "-d", &nss, "--empty-password"], CMD).unwrap();
    if let Some((kind, ca, _)) = auth.cert() {
        // NSS takes keys only in PKCS#12: PKCS#8 DER -> PEM -> .p12 with the certificate.
        let key = d.join("site.key");
        let p12 = d.join("site.p12");
        let der = fixture(&format!("a-{kind}.key.der"));
        let pem = fixture(&format!("a-{kind}.pem"));
        let run = |argv: &[&str]| {
            testnet::run_ok(argv, CMD).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        };
        run(&[
            "openssl",
            "pkey",
            "-inform",
            "DER",
            "-in",
            der.to_str().unwrap(),
            "-out",
            key.to_str().unwrap(),
        ]);
        run(&[
            "openssl",
            "pkcs12",
            "-export",
            "-in",
            pem.to_str().unwrap(),
            "-inkey",
            key.to_str().unwrap(),
            "-name",
            "site",
            "-passout",
            "pass:cloister",
            "-out",
            p12.to_str().unwrap(),
        ]);
        run(&["pk12util", "-i", p12.to_str().unwrap(), "-d", &nss, "-W", "cloister"]);
        let ca = fixture(ca);
        run(&["certutil", "-A", "-d", &nss, "-n", "ca", "-t", "CT,,", "-a", "-i", ca.to_str().unwrap()]);
    }
    site.write_file("ipsec.conf", &ipsec_conf(site_addr, gw_addr, auth)).unwrap();
    let secrets =
        site.write_file("ipsec.secrets", &format!("@{SITE_ID} @{GW_ID} : PSK \"{PSK}\"\n")).unwrap();
    set_mode(&secrets, 0o600);

    // Pluto execs /usr/libexec/ipsec/addconn (compiled in): mount the private unpack there,
    // in this namespace's own mount namespace only, and a tmpfs over /run.
    let libexec = std::fs::canonicalize(libreswan("usr/libexec")).unwrap();
    let dd = d.display();
    let script = format!(
        "mount --bind {libexec} /usr/libexec && mount -t tmpfs cloister-run /run && \
         exec /usr/libexec/ipsec/pluto --nofork --stderrlog --log-no-audit --impair revival \
         --config {dd}/ipsec.conf --secretsfile {dd}/ipsec.secrets --rundir {dd}/run \
         --nssdir {dd}/nss --ipsecdir {dd}/ipsec.d --dumpdir {dd}/run",
        libexec = libexec.display()
    );
    let mut pluto = site.spawn("pluto", &["sh", "-c", &script]).unwrap();
    // addconn loads the connection, then makes pluto listen and load the secrets.
    if let Err(e) = pluto.wait_for_log("loading secrets from", STEP) {
        panic!("pluto did not start: {e}\n{}", testnet::excerpt(&pluto.log()));
    }
    let log = pluto.log();
    assert!(log.contains("\"gw\": added IKEv2 connection"), "pluto refused the connection:\n{log}");
    let ctl = d.join("run/pluto.ctl");
    testnet::wait_until("pluto's control socket", STEP, || ctl.exists()).unwrap();
    pluto
}

/// The SPI in pluto's `... Add SA esp.af1e4204@198.18.0.2: ...` (IPv6: `esp:c64aa0e@...`,
/// leading zeros dropped).
fn pluto_spi(line: &str) -> Option<u32> {
    let rest = line.split("Add SA esp").nth(1)?;
    let hex = rest.get(1..)?.split('@').next()?;
    u32::from_str_radix(hex, 16).ok()
}

/// The inbound SPI of Cloister's last `child: net installed, in SPI out SPI` line.
fn cloister_in_spi(log: &str) -> Option<u32> {
    let line = log.lines().rev().find(|l| l.starts_with("child: net installed, in "))?;
    let hex = line.strip_prefix("child: net installed, in ")?.split_whitespace().next()?;
    u32::from_str_radix(hex, 16).ok()
}

/// libreswan initiates: IKE SA established and authenticated on both sides, the child agreed
/// and installed by Cloister; pluto's kernel refuses the child and pluto drops its IKE SA.
fn libreswan_initiates(family: Family, auth: Auth) {
    if !runnable(auth) {
        return;
    }
    let mut tb = Testbed::start(family, auth);
    tb.up_by_libreswan();
}

/// Cloister initiates: IKE SA established on both sides, pluto refuses the child with
/// TS_UNACCEPTABLE once its kernel refused it; then Cloister deletes the IKE SA and both
/// sides are clean.
fn cloister_initiates(family: Family, auth: Auth) {
    if !runnable(auth) {
        return;
    }
    let mut tb = Testbed::start(family, auth);
    let ike = tb.up_by_cloister();
    let reply = tb.sa(&["terminate-ike", &ike]);
    assert!(reply.contains(&format!("deleting IKE SA #{ike}")), "{reply}");
    if let Err(e) = tb.cloister.wait_for_log(&format!("ike: #{ike} deleted: Requested"), STEP) {
        panic!("Cloister did not delete: {e}\n{}", tb.logs());
    }
    let gone = testnet::wait_until("pluto's IKE SA gone", STEP, || tb.pluto_ike_sas() == Some(0));
    assert!(gone.is_ok(), "pluto kept the IKE SA:\n{}\n{}", tb.whack(&["--status"]), tb.logs());
    assert!(tb.sa(&["list"]).contains("no IKE SAs"), "{}", tb.logs());
}

#[test]
fn libreswan_initiates_v4_psk() {
    libreswan_initiates(Family::V4, Auth::Psk);
}

#[test]
fn libreswan_initiates_v6_psk() {
    libreswan_initiates(Family::V6, Auth::Psk);
}

#[test]
fn cloister_initiates_v4_psk() {
    cloister_initiates(Family::V4, Auth::Psk);
}

#[test]
fn cloister_initiates_v6_psk() {
    cloister_initiates(Family::V6, Auth::Psk);
}

#[test]
fn libreswan_initiates_v4_ecdsa_certificates() {
    libreswan_initiates(Family::V4, Auth::Ecdsa);
}

#[test]
fn cloister_initiates_v4_ecdsa_certificates() {
    cloister_initiates(Family::V4, Auth::Ecdsa);
}

#[test]
fn libreswan_initiates_v4_rsa_certificates() {
    libreswan_initiates(Family::V4, Auth::Rsa);
}

#[test]
fn cloister_initiates_v4_rsa_certificates() {
    cloister_initiates(Family::V4, Auth::Rsa);
}

/// Pluto's default `authby=ecdsa`, as initiator: it signs with the strongest hash of
/// Cloister's N(SIGNATURE_HASH_ALGORITHMS) (SHA2-256, -384, -512), so ecdsa-with-SHA512 with
/// a P-256 key (RFC 7427); Cloister verifies every hash it announces with every key type.
#[test]
fn libreswan_initiates_v4_ecdsa_with_plutos_default_hash() {
    libreswan_initiates(Family::V4, Auth::EcdsaPlutoDefault);
}

/// A child rekey started by Cloister. Pluto never holds a child here (its kernel refuses
/// them, see the module comment), and once libreswan has initiated, pluto has already dropped
/// the IKE SA; so the rekey cannot complete. What is observable: Cloister sends
/// CREATE_CHILD_SA on that IKE SA, pluto receives and parses its header (it logs the exchange
/// type and drops it for the unknown SPIs), Cloister retransmits, keeps the old child and
/// claims no rekey.
#[test]
fn cloister_starts_a_child_rekey() {
    if !runnable(Auth::Psk) {
        return;
    }
    let mut tb = Testbed::start(Family::V4, Auth::Psk);
    let spi = format!("{:08x}", tb.up_by_libreswan());
    let reply = tb.sa(&["rekey-child", &spi]);
    assert!(reply.contains(&format!("rekeying child {spi}")), "{reply}");
    let dropped =
        format!("packet from {}:500: CREATE_CHILD_SA request has no corresponding IKE SA", tb.gw_addr());
    if let Err(e) = tb.pluto.wait_for_log(&dropped, STEP) {
        panic!("the rekey request did not reach pluto: {e}\n{}", tb.logs());
    }
    // Cloister retransmits 2 s later (docs/ike.md): pluto sees the request a second time.
    let again = testnet::wait_until("a retransmission", Duration::from_secs(10), || {
        tb.pluto.log().matches(&dropped).count() >= 2
    });
    assert!(again.is_ok(), "no retransmission reached pluto\n{}", tb.logs());
    let counters = tb.sa(&["counters"]);
    assert!(!counters.contains("retransmits: 0,"), "{counters}");
    let log = tb.cloister.log();
    assert!(!log.contains("rekeyed"), "Cloister claims a rekey nobody answered:\n{log}");
    let list = tb.sa(&["list"]);
    assert!(list.contains(&format!("in  {spi}")) && list.contains("net: INSTALLED"), "{list}");
    eprintln!(
        "Cloister's rekey of {spi}: pluto (IKE SA already dropped after its kernel refused the child):\n{}",
        tb.pluto.log().lines().filter(|l| l.contains(&dropped)).collect::<Vec<_>>().join("\n")
    );
}

/// A CREATE_CHILD_SA started by libreswan. `whack --rekey-ipsec` has nothing to rekey (pluto
/// never keeps a child here, see the module comment); what pluto can start is a new child on
/// the IKE SA Cloister initiated: the same exchange as a rekey without N(REKEY_SA), with PFS
/// (KEi of ECP-256). Cloister answers and installs the child; pluto's kernel refuses it and
/// pluto drops the IKE SA (fatal as the child's initiator).
#[test]
fn libreswan_starts_a_create_child_sa_with_pfs() {
    if !runnable(Auth::Psk) {
        return;
    }
    let mut tb = Testbed::start(Family::V4, Auth::Psk);
    let ike = tb.up_by_cloister();
    let rekey = tb.whack(&["--rekey-ipsec", "--name", "gw"]);
    assert!(rekey.contains("connection does not have Child SA"), "{rekey}");

    // A second kernel refusal will follow; count them.
    let refusals = |tb: &Testbed| tb.pluto.log().matches(KERNEL_REFUSAL).count();
    assert_eq!(refusals(&tb), 1);
    let out = tb.whack(&["--initiate", "--name", "gw"]);
    assert!(out.contains("sent CREATE_CHILD_SA request for new IPsec SA"), "{out}\n{}", tb.logs());
    let pluto = tb.pluto.log();
    assert!(pluto.contains("1:ESP=AES_GCM_C_256-NONE-ECP_256"), "pluto offered no PFS:\n{pluto}");
    if let Err(e) = tb.cloister.wait_for_log("child: net installed", STEP) {
        panic!("Cloister installed no child: {e}\n{out}\n{}", tb.logs());
    }
    let log = tb.cloister.log();
    assert!(log.contains(&format!("(IKE SA #{ike})")), "child on another IKE SA:\n{log}");
    let in_spi = cloister_in_spi(&log).unwrap();
    let list = tb.sa(&["list"]);
    assert!(list.contains(&format!("in  {in_spi:08x}")) && list.contains("net: INSTALLED"), "{list}");
    let counted = testnet::wait_until("pluto's second kernel refusal", STEP, || refusals(&tb) >= 2);
    assert!(counted.is_ok(), "{}", tb.logs());
    let line = tb
        .pluto
        .log()
        .lines()
        .filter(|l| l.contains("netlink response for Add SA"))
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(pluto_spi(&line), Some(in_spi), "pluto's SA is not Cloister's: {line}");
    eprintln!("libreswan's CREATE_CHILD_SA on Cloister's IKE SA #{ike}: pluto says\n{out}Cloister:\n{list}");
}

#[test]
fn spi_parsers_read_both_logs() {
    assert_eq!(
        pluto_spi(r#"ERROR: "gw" #2: netlink response for Add SA esp.af1e4204@198.18.0.2: Function"#),
        Some(0xaf1e_4204)
    );
    assert_eq!(
        pluto_spi(r#"netlink response for Add SA esp:c64aa0e@2001:db8::2: Function"#),
        Some(0x0c64_aa0e)
    );
    assert_eq!(pluto_spi("nothing"), None);
    let log = "child: net installed, in 0a5f50b2 out 090b84ef (IKE SA #1)\n";
    assert_eq!(cloister_in_spi(log), Some(0x0a5f_50b2));
}
