//! What the interop tests against real IKE peers (strongSwan, libreswan) share: the
//! identities and PSK, the outer address plan, the certificate fixtures, and wrapping a
//! secret for the gateway's enclave with `cloister secret wrap`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

pub(crate) const CLOISTER: &str = env!("CARGO_BIN_EXE_cloister");
/// strongSwan's IKE daemon (Debian's path).
#[allow(dead_code)] // not every test binary starts charon
pub(crate) const CHARON: &str = "/usr/lib/ipsec/charon";
/// Random-looking on purpose: a PSK with a common run in it (say the hex digits
/// `0123456789abcdef`) would be "found" in any binary's formatting tables.
pub(crate) const PSK: &str = "Kq7v-Tz3W-pL9x-Rm2c-Yh5n-Bd8f-Gs4j-Nw6e";
pub(crate) const SITE_ID: &str = "site-a.cloister.test";
pub(crate) const GW_ID: &str = "gw.cloister.test";

/// The outer address family of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    /// (site outer, gateway outer, prefix length).
    pub(crate) fn outer(self) -> (&'static str, &'static str, u8) {
        match self {
            Self::V4 => ("198.18.0.1", "198.18.0.2", 24),
            Self::V6 => ("2001:db8::1", "2001:db8::2", 64),
        }
    }
}

/// A certificate fixture of crates/ike/tests/certs (site-a is the peer, site-b Cloister).
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ike/tests/certs").join(name)
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Wraps `secret` for tenant 1 under the provisioning key `key` into `out`; the command's
/// output must not show the PSK.
pub(crate) fn wrap_secret(key: &Path, out: &Path, kind: &str, secret: &[u8]) {
    use std::io::Write;
    let mut child = std::process::Command::new(CLOISTER)
        .args(["secret", "wrap", "--tenant", "1", "--kind", kind, "--provisioning-key"])
        .arg(key)
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(secret).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "secret wrap: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stdout).contains(PSK));
}

/// charon's configuration; with `log_keys`, level 4 for `ike` and `chd`, at which charon
/// logs SK_* and the child SAs' keys.
#[allow(dead_code)] // not every test binary starts charon
pub(crate) fn charon_conf(dir: &Path, log_keys: bool) -> String {
    let level = if log_keys { 4 } else { 2 };
    format!(
        r#"charon {{
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm chapoly kernel-libipsec kernel-netlink socket-default vici updown
  install_virtual_ip = no
  retransmit_tries = 3
  plugins {{
    vici {{ socket = unix://{d}/charon.vici }}
  }}
  filelog {{
    main {{ path = {d}/charon.log
      time_format = %s
      flush_line = yes
      default = 1
      ike = {level}
      chd = {level}
      cfg = 2
    }}
  }}
}}
"#,
        d = dir.display()
    )
}

/// Starts charon in `ns` with its configuration in the namespace's directory and its own
/// `/run` (its PID file path is fixed), and waits for its vici socket
/// (`unix://DIR/charon.vici`).
#[allow(dead_code)] // not every test binary starts charon
pub(crate) fn start_charon(ns: &testnet::Netns, log_keys: bool) -> testnet::Process {
    let dir = ns.dir().to_path_buf();
    ns.write_file("strongswan.conf", &charon_conf(&dir, log_keys)).unwrap();
    let conf = dir.join("strongswan.conf");
    let charon = ns
        .spawn_env(
            "charon",
            &["sh", "-c", &format!("mount -t tmpfs cloister-run /run && exec {CHARON}")],
            &[("STRONGSWAN_CONF", conf.to_str().unwrap())],
        )
        .unwrap();
    let vici = dir.join("charon.vici");
    testnet::wait_until("charon's vici socket", std::time::Duration::from_secs(20), || vici.exists())
        .unwrap();
    charon
}

/// How many replies `ping`'s summary line counts.
#[allow(dead_code)] // not every test binary pings
pub(crate) fn ping_replies(output: &str) -> u32 {
    output
        .lines()
        .find(|l| l.contains("received"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `ping -w`'s deadline in seconds for `count` pings `interval` seconds apart that should
/// all be answered: twice their nominal time plus 5 s.
///
/// Without a deadline, ping stops listening `max(2 x the slowest round trip, interval)`
/// after its last request, so on a loaded machine a last reply that is a few milliseconds
/// late counts as lost (seen in CI with `-i 0.01`: the peer had decrypted the reply). With
/// one, it waits for every reply until the deadline. Only for pings that expect no loss:
/// a lost one keeps ping running to the deadline, and an ICMP error ends it at once.
#[allow(dead_code)] // not every test binary pings
pub(crate) fn every_reply_deadline(count: u32, interval: &str) -> String {
    let interval: f64 = interval.parse().unwrap_or(1.0);
    (f64::from(count) * interval * 2.0 + 5.0).ceil().to_string()
}

/// Pings `to` from `from` inside `site`, `count` times `interval` seconds apart (`ping -D`),
/// waiting for every reply until [`every_reply_deadline`]; (replies, ping's output).
#[allow(dead_code)] // not every test binary pings
pub(crate) fn ping_every_reply(
    site: &testnet::Netns,
    count: u32,
    interval: &str,
    from: &str,
    to: &str,
) -> (u32, String) {
    let (c, w) = (count.to_string(), every_reply_deadline(count, interval));
    let argv = ["ping", "-n", "-D", "-c", &c, "-i", interval, "-w", &w, "-I", from, to];
    let out = site.exec(&argv, std::time::Duration::from_secs(120)).unwrap();
    (ping_replies(&out.stdout), out.stdout)
}

/// One ping from `from` to `to` inside `site`, 1 s to answer: whether it came back.
#[allow(dead_code)] // not every test binary pings
pub(crate) fn probe(site: &testnet::Netns, from: &str, to: &str) -> bool {
    let argv = ["ping", "-n", "-c", "1", "-W", "1", "-I", from, to];
    site.exec(&argv, std::time::Duration::from_secs(10)).is_ok_and(|o| ping_replies(&o.stdout) == 1)
}

/// Pings `to` from `from` inside `site`, `count` times `interval` seconds apart (`ping -D`,
/// 1 s to wait for each reply; with `every_reply`, until [`every_reply_deadline`] for all of
/// them), on a thread of its own; its output when it ends.
#[allow(dead_code)] // not every test binary pings
pub(crate) fn background_ping(
    site: &testnet::Netns,
    count: u32,
    interval: &str,
    every_reply: bool,
    from: &str,
    to: &str,
) -> std::thread::JoinHandle<String> {
    let deadline = every_reply_deadline(count, interval);
    let wait: &[&str] = if every_reply { &["-w", &deadline] } else { &["-W", "1"] };
    let args: Vec<String> = [site.name(), "ping", "-n", "-D", "-c", &count.to_string(), "-i", interval]
        .iter()
        .chain(wait)
        .chain(&["-I", from, to])
        .map(|a| (*a).to_owned())
        .collect();
    std::thread::spawn(move || {
        let out = std::process::Command::new("ip").args(["netns", "exec"]).args(&args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// The longest time between two consecutive replies of `ping -D` output (the outage), and
/// the number of replies.
#[allow(dead_code)] // not every test binary pings
pub(crate) fn longest_gap(output: &str) -> (std::time::Duration, usize) {
    let times: Vec<f64> = output
        .lines()
        .filter(|l| l.contains("bytes from"))
        .filter_map(|l| l.strip_prefix('[')?.split(']').next()?.parse().ok())
        .collect();
    let gap = times.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    (std::time::Duration::from_secs_f64(gap.max(0.0)), times.len())
}

/// swanctl.conf of a site's charon: one PSK connection `gw` from `local` to the gateway at
/// `remote`, identity `site_id`, child `net` from `site_inner`/32 to the cloud's
/// 198.19.2.0/24, started by the test (`swanctl --initiate`), DPD every 2 s.
#[allow(dead_code)] // the service tests' sites only
pub(crate) fn site_swanctl_conf(
    local: &str,
    remote: &str,
    site_id: &str,
    site_inner: &str,
    psk: &str,
) -> String {
    format!(
        r#"connections {{
  gw {{
    version = 2
    local_addrs = {local}
    remote_addrs = {remote}
    proposals = aes256gcm16-prfsha256-ecp256
    dpd_delay = 2s
    local {{ auth = psk
            id = {site_id} }}
    remote {{ auth = psk
             id = {GW_ID} }}
    children {{
      net {{
        local_ts = {site_inner}/32
        remote_ts = 198.19.2.0/24
        esp_proposals = aes256gcm16
        start_action = none
        dpd_action = clear
      }}
    }}
  }}
}}
secrets {{
  ike-gw {{ id-a = {site_id}
           id-b = {GW_ID}
           secret = "{psk}" }}
}}
"#
    )
}

/// The enclave process's pid, from a gateway's or data plane's start line
/// (`... enclave process pid N ...`).
#[allow(dead_code)] // the privilege and key-exposure tests' only
pub(crate) fn enclave_pid(log: &str) -> u32 {
    log.split("enclave process pid ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("the enclave's pid in the start line")
}

/// The real user ID of process `pid`.
#[allow(dead_code)] // the privilege tests' only
pub(crate) fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The effective capabilities of process `pid` (the `CapEff` mask).
#[allow(dead_code)] // the privilege tests' only
pub(crate) fn capabilities_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap();
    u64::from_str_radix(line.trim(), 16).unwrap()
}

/// Asserts that user `uid` (group `uid`; std drops root's other groups) may not read one byte of `target` (a
/// file, or a process's `/proc/PID/mem`): EACCES or EPERM.
#[allow(dead_code)] // the privilege tests' only
pub(crate) fn assert_denied_as(uid: u32, target: &str) {
    use std::os::unix::process::CommandExt as _;
    let out =
        std::process::Command::new("head").args(["-c", "1", target]).uid(uid).gid(uid).output().unwrap();
    assert!(!out.status.success(), "user {uid} read {target}");
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("Permission denied") || why.contains("Operation not permitted"), "{target}: {why}");
}

/// The privilege test of a process that started as root with the enclave process (`who`:
/// `gateway`, `dataplane`) and then dropped it: its log says it runs as `uid`, it does,
/// with the three network capabilities only; its enclave (the pid in its start line) runs
/// as `enclave_uid`; its platform (its first child) keeps root. As `uid`, neither process's
/// memory opens, nor any of `files` under `dir` (each there: a positive control).
#[allow(dead_code)] // the privilege tests' only
pub(crate) fn assert_dropped_to_its_own_user(
    who: &str,
    pid: u32,
    log: &str,
    (uid, enclave_uid): (u32, u32),
    dir: &Path,
    files: &[&str],
) {
    assert!(log.contains(&format!("{who}: runs as user {uid} with ")), "{log}");
    assert_eq!(uid_of(pid), uid, "{log}");
    assert_eq!(capabilities_of(pid), 1 << 10 | 1 << 12 | 1 << 13, "NET_BIND_SERVICE, NET_ADMIN, NET_RAW");
    let enclave_pid = enclave_pid(log);
    assert_eq!(uid_of(enclave_pid), enclave_uid, "the tenant's enclave user");
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let platform_pid: u32 =
        children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("the platform");
    assert_eq!(uid_of(platform_pid), 0, "the platform keeps root to start enclaves");
    let mut targets = vec![format!("/proc/{enclave_pid}/mem"), format!("/proc/{platform_pid}/mem")];
    for f in files {
        assert!(dir.join(f).exists(), "positive control: {f} is there");
        targets.push(dir.join(f).display().to_string());
    }
    for target in &targets {
        assert_denied_as(uid, target);
    }
}
