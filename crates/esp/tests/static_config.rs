//! Two gateways configured from static TOML (like `ip xfrm state/policy`), their keys
//! provisioned into their inline enclaves, exchange traffic both ways.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use cloister_esp::config::{Direction, KeyMaterial, KeyRequest, StaticConfig};
use cloister_esp::*;
use common::*;
use wire::Ecn;

const KEY_AB: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223";
const KEY_BA: &str = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
const INTEG_BA: &str = "e0e1e2e3e4e5e6e7e8e9eaebecedeeefd0d1d2d3d4d5d6d7d8d9dadbdcdddedfc0c1c2c3c4c5c6c7c8c9cacbcccdcecfb0b1b2b3b4b5b6b7b8b9babbbcbdbebf";

fn gateway_config(me: &str, peer: &str, my_net: &str, peer_net: &str, a_side: bool) -> String {
    let (out_spi, in_spi) = if a_side { (0xab01, 0xba01) } else { (0xba01, 0xab01) };
    let ab = format!("encryption = \"aes-gcm-16-256\"\nkey = {{ raw_encryption = \"{KEY_AB}\" }}");
    let ba = format!(
        "encryption = \"aes-cbc-128\"\nintegrity = \"hmac-sha2-512-256\"\nkey = {{ raw_encryption = \"{KEY_BA}\", raw_integrity = \"{INTEG_BA}\" }}"
    );
    let (out_keys, in_keys) = if a_side { (&ab, &ba) } else { (&ba, &ab) };
    format!(
        r#"
        [[sa]]
        name = "out"
        direction = "out"
        spi = {out_spi}
        local = "{me}"
        remote = "{peer}"
        esn = true
        udp_encap = {{}}
        local_ts = ["{my_net}"]
        remote_ts = ["{peer_net}"]
        {out_keys}

        [[sa]]
        name = "in"
        direction = "in"
        spi = {in_spi}
        local = "{me}"
        remote = "{peer}"
        esn = true
        udp_encap = {{}}
        local_ts = ["{my_net}"]
        remote_ts = ["{peer_net}"]
        replay_window = 4096
        {in_keys}

        [[policy]]
        priority = 10
        local = "{my_net}"
        remote = "{peer_net}"
        action = "protect"
        sa = "out"
        "#
    )
}

fn configure(g: &mut Gateway, toml_text: &str) {
    let c: StaticConfig = toml::from_str(toml_text).unwrap();
    let c = c.validate().unwrap();
    let enclave = &mut g.enclave;
    c.install(&mut g.sad, &mut g.spd, Instant::now(), cloister_esp::DEFAULT_WINDOW, |r: &KeyRequest<'_>| {
        match r.keys {
            KeyMaterial::Raw { encryption, integrity } => enclave.esp_sa_install_raw(
                r.spi,
                r.direction == Direction::In,
                r.esn,
                r.suite,
                encryption,
                integrity,
            ),
            KeyMaterial::Wrapped(_) => {
                Err(enclave_core::Error::Unsupported { what: "wrapped ESP SA keys", value: 0 })
            }
        }
    })
    .unwrap();
}

#[test]
fn statically_configured_gateways_talk_both_ways() {
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    configure(&mut a, &gateway_config("198.18.0.1", "198.18.0.2", "198.18.10.0/24", "198.18.20.0/24", true));
    configure(&mut b, &gateway_config("198.18.0.2", "198.18.0.1", "198.18.20.0/24", "198.18.10.0/24", false));
    let (h_a, h_b) = inner_hosts(false);
    let ab = udp_packet(h_a, h_b, 300, 64, Ecn::Ect0, true);
    let ba = udp_packet(h_b, h_a, 301, 64, Ecn::Ect0, true);
    let (o, _, _) = encapsulate(&mut a, std::slice::from_ref(&ab));
    let (r, _) = decapsulate(&mut b, &[o[0].1.clone()]);
    assert_eq!(r[0], (Action::Deliver { spi: 0xab01 }, after_hops(&ab, 2)));
    let (o, _, _) = encapsulate(&mut b, std::slice::from_ref(&ba));
    assert!(matches!(o[0].0.encapsulation, Encapsulation::Udp { local_port: 4500, remote_port: 4500 }));
    let (r, _) = decapsulate(&mut a, &[o[0].1.clone()]);
    assert_eq!(r[0], (Action::Deliver { spi: 0xba01 }, after_hops(&ba, 2)));
}
