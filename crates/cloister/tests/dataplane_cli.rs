//! `cloister dataplane` as a script uses it: a config file, a start-up line with the
//! offloads, traffic, SIGTERM, counters on exit.
//!
//! Default builds refuse raw keys with a clear message (checked without root). Builds with
//! `--features static-keys` also run two gateways in two network namespaces, each with an
//! address on its TUN device, and ping between them through ESP-in-UDP (needs root).
#![allow(clippy::unwrap_used, clippy::expect_used)]

const CLOISTER: &str = env!("CARGO_BIN_EXE_cloister");

/// A gateway's config: its TUN address and a route to the peer's, one SA pair, one policy.
fn config(me: &str, peer: &str, my_net: &str, peer_net: &str, tun_addr: &str, a_side: bool) -> String {
    let (out_spi, in_spi) = if a_side { (0x1001, 0x2001) } else { (0x2001, 0x1001) };
    let key = |spi: u32| format!("{:08x}00112233445566778899aabbccddeeff", spi);
    format!(
        r#"
[dataplane]
tun = "cltun1"
tun_addresses = ["{tun_addr}/32"]
routes = ["{peer_net}"]
workers = 2

[[sa]]
name = "out"
direction = "out"
spi = {out_spi}
local = "{me}"
remote = "{peer}"
encryption = "aes-gcm-16-128"
udp_encap = {{}}
local_ts = ["{my_net}"]
remote_ts = ["{peer_net}"]
key = {{ raw_encryption = "{}" }}

[[sa]]
name = "in"
direction = "in"
spi = {in_spi}
local = "{me}"
remote = "{peer}"
encryption = "aes-gcm-16-128"
udp_encap = {{}}
local_ts = ["{my_net}"]
remote_ts = ["{peer_net}"]
key = {{ raw_encryption = "{}" }}

[[policy]]
local = "{my_net}"
remote = "{peer_net}"
action = "protect"
sa = "out"
"#,
        key(out_spi),
        key(in_spi),
    )
}

#[cfg(not(feature = "static-keys"))]
#[test]
fn raw_keys_are_refused_without_the_static_keys_feature() {
    let dir = std::env::temp_dir().join(format!("cloister-dp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gw.toml");
    let text = config("198.18.0.1", "198.18.0.2", "198.18.10.0/24", "198.18.20.0/24", "198.18.10.1", true);
    std::fs::write(&path, &text).unwrap();
    let out =
        std::process::Command::new(CLOISTER).args(["dataplane", "--config"]).arg(&path).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--features static-keys"), "{stderr}");
    assert!(!stderr.contains("00112233"), "no key bytes in messages: {stderr}");
}

#[cfg(feature = "static-keys")]
#[test]
fn two_gateways_ping_through_esp_and_print_counters_on_sigterm() {
    use std::time::Duration;
    use testnet::{Netns, Veth};

    if !testnet::can_create_namespaces() {
        testnet::skip("needs root to create network namespaces");
        return;
    }
    let a = Netns::new("dpa").unwrap();
    let b = Netns::new("dpb").unwrap();
    Veth::connect(&a, "wan0", &b, "wan0").unwrap();
    a.add_addr("wan0", "198.18.0.1/24").unwrap();
    b.add_addr("wan0", "198.18.0.2/24").unwrap();
    let ca = a
        .write_file(
            "gw.toml",
            &config("198.18.0.1", "198.18.0.2", "198.18.10.0/24", "198.18.20.0/24", "198.18.10.1", true),
        )
        .unwrap();
    let cb = b
        .write_file(
            "gw.toml",
            &config("198.18.0.2", "198.18.0.1", "198.18.20.0/24", "198.18.10.0/24", "198.18.20.1", false),
        )
        .unwrap();
    let mut pa = a.spawn("dataplane", &[CLOISTER, "dataplane", "--config", ca.to_str().unwrap()]).unwrap();
    let mut pb = b.spawn("dataplane", &[CLOISTER, "dataplane", "--config", cb.to_str().unwrap()]).unwrap();
    pa.wait_for_log("offloads:", Duration::from_secs(20)).unwrap();
    pb.wait_for_log("offloads:", Duration::from_secs(20)).unwrap();
    let start_line = pa.log().lines().find(|l| l.contains("offloads:")).unwrap_or_default().to_owned();
    eprintln!("{start_line}");
    assert!(start_line.contains("tun cltun1 workers=2 udp=[198.18.0.1:4500]"), "{start_line}");
    // From A's TUN address to B's: out through ESP-in-UDP, delivered to B's own address.
    let out = a
        .exec(
            // A deadline (-w): wait for every reply, not just ping's short linger after the last.
            &["ping", "-n", "-q", "-c", "3", "-i", "0.2", "-w", "8", "-I", "198.18.10.1", "198.18.20.1"],
            Duration::from_secs(15),
        )
        .unwrap();
    assert!(out.success && out.stdout.contains(" 3 received"), "ping failed:\n{}\n{}", out.stdout, pa.log());
    let log_a = pa.stop();
    let log_b = pb.stop();
    eprintln!("{log_a}");
    for log in [&log_a, &log_b] {
        assert!(log.contains("SIGTERM after"), "{log}");
        assert!(log.lines().any(|l| l.starts_with("total:") && l.contains("encapsulated=3")), "{log}");
        assert!(log.contains("sa out out spi 0x0000"), "{log}");
        assert!(!log.contains("00112233"), "no key bytes in the output: {log}");
    }
}
