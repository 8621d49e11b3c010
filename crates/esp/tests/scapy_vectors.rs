//! Known-answer checks against scapy's ESP (an independent implementation): the stored
//! packets in tests/vectors/ (made by tests/vectors/gen_scapy.py) decapsulate to scapy's
//! inner packets, and Cloister's encapsulation with the same keys, SPI, sequence number and
//! IV is byte-for-byte scapy's ESP. Where the project's venv exists, scapy also decrypts
//! what Cloister encapsulated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave_core::{Cipher, Integ, Suite};
use wire::Ipv4Packet;

/// The parameters of gen_scapy.py's VECTORS.
struct Vector {
    name: &'static str,
    spi: u32,
    seq: u64,
    esn: bool,
    suite: Suite,
    encryption: Vec<u8>,
    integrity: Vec<u8>,
    v6: bool,
    udp: bool,
}

fn range(a: u8, b: u8) -> Vec<u8> {
    (a..b).collect()
}

fn vectors() -> Vec<Vector> {
    vec![
        Vector {
            name: "gcm128-v4",
            spi: 0xa001,
            seq: 7,
            esn: false,
            suite: Suite::aead(Cipher::AesGcm16_128),
            encryption: [range(0x10, 0x20), vec![0xa0, 0xa1, 0xa2, 0xa3]].concat(),
            integrity: vec![],
            v6: false,
            udp: false,
        },
        Vector {
            name: "cbc128-sha256-v4",
            spi: 0xa002,
            seq: 9,
            esn: false,
            suite: Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128),
            encryption: range(0x30, 0x40),
            integrity: range(0x40, 0x60),
            v6: false,
            udp: false,
        },
        Vector {
            name: "chacha-esn-udp-v6",
            spi: 0xa003,
            seq: (1 << 32) | 5,
            esn: true,
            suite: Suite::aead(Cipher::ChaCha20Poly1305),
            encryption: [range(0x60, 0x80), vec![0xb0, 0xb1, 0xb2, 0xb3]].concat(),
            integrity: vec![],
            v6: true,
            udp: true,
        },
    ]
}

fn read(name: &str, part: &str) -> Vec<u8> {
    let path = format!("{}/tests/vectors/{name}.{part}.bin", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The packet one hop earlier: TTL / hop limit one higher.
fn before_hop(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    if p[0] >> 4 == 4 {
        let mut v = Ipv4Packet::new_unchecked(&mut p[..]);
        v.set_ttl(v.ttl() + 1);
        v.fill_checksum();
    } else {
        p[7] += 1;
    }
    p
}

fn config(v: &Vector, handle: enclave_core::EspSaHandle, inbound: bool) -> SaConfig {
    let (a, b) = outer_addrs(v.v6);
    let (local, remote): (IpAddr, IpAddr) = if inbound { (b, a) } else { (a, b) };
    let mut c = SaConfig::new(v.spi, handle, v.suite, local, remote);
    c.esn = v.esn;
    if v.udp {
        c.encapsulation = if inbound {
            Encapsulation::Udp { local_port: 4501, remote_port: 4500 }
        } else {
            Encapsulation::Udp { local_port: 4500, remote_port: 4501 }
        };
    }
    c
}

#[test]
fn stored_scapy_packets_decapsulate_to_their_inner_packets() {
    for v in vectors() {
        let mut b = Gateway::new();
        let h =
            b.enclave.esp_sa_install_raw(v.spi, true, v.esn, v.suite, &v.encryption, &v.integrity).unwrap();
        b.sad.add_inbound(config(&v, h, true), Instant::now()).unwrap();
        if v.seq >> 32 != 0 {
            // ESN: the window must already be in the right 2^32 subspace (RFC 4303 A2.2).
            b.sad.inbound(v.spi).unwrap().runtime().window().commit(v.seq & !0xffff_ffff | 1).unwrap();
        }
        let (r, _) = decapsulate(&mut b, &[read(v.name, "outer")]);
        assert_eq!(r[0].0, Action::Deliver { spi: v.spi }, "{}", v.name);
        assert_eq!(r[0].1, after_hops(&read(v.name, "inner"), 1), "{}: the inner packet, one hop on", v.name);
        // The same packet again is a replay.
        let (r, _) = decapsulate(&mut b, &[read(v.name, "outer")]);
        assert_eq!(r[0].0, Action::Drop(DropReason::Replay));
    }
}

#[test]
fn cloister_encapsulation_is_scapys_esp_byte_for_byte() {
    let python = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/venv/bin/python"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/gen_scapy.py");
    for v in vectors() {
        let mut a = Gateway::new();
        let h =
            a.enclave.esp_sa_install_raw(v.spi, false, v.esn, v.suite, &v.encryption, &v.integrity).unwrap();
        let id = a.sad.add_outbound(config(&v, h, false), Instant::now()).unwrap();
        a.sad.outbound(id).unwrap().runtime().set_next_seq(v.seq);
        let any = if v.v6 { AddressRange::ANY_V6 } else { AddressRange::ANY_V4 };
        a.spd.insert(Policy {
            priority: 0,
            selector: PolicySelector::between(any, any),
            action: PolicyAction::Protect(id),
        });
        let inner = read(v.name, "inner");
        let (out, actions, _) = encapsulate(&mut a, &[before_hop(&inner)]);
        assert_eq!(out.len(), 1, "{}: {actions:?}", v.name);
        let (t, ours) = &out[0];
        let theirs = read(v.name, "outer");
        let header = if v.v6 { 40 } else { 20 } + if v.udp { 8 } else { 0 };
        let our_esp = &ours[header..];
        assert_eq!(our_esp[..4], v.spi.to_be_bytes(), "{}: ESP at {}", v.name, t.esp_offset);
        assert_eq!(hex(our_esp), hex(&theirs[header..]), "{}: ESP bytes differ from scapy's", v.name);
        if python.exists() {
            let out = Command::new(python).args([script, "decrypt", v.name, &hex(ours)]).output().unwrap();
            assert!(out.status.success(), "scapy: {}", String::from_utf8_lossy(&out.stderr));
            let decrypted = String::from_utf8(out.stdout).unwrap();
            assert_eq!(decrypted.trim(), hex(&inner), "{}: scapy decrypts Cloister's packet", v.name);
        } else {
            testnet::skip(&format!(
                "scapy's decryption of Cloister's output needs the venv at {}; run scripts/setup.sh",
                python.display()
            ));
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
