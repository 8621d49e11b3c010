//! Key exposure: with the process backend, no key byte may be anywhere in the untrusted
//! gateway's memory — and the same search over the enclave process must find them, so the
//! test can fail.
//!
//! This test process plays the gateway. The tenant's side runs in a separate Python process
//! (`key_exposure_peer.py`): it wraps the PSK, answers IKE_SA_INIT, derives every key with
//! an independent RFC 7296 implementation, sends ESP packets for the gateway's inbound SA
//! and checks the gateway's outbound ones. It hands the keys back masked (XOR [`MASK`]), so
//! plain key bytes never exist here; the scan unmasks on the fly. The provisioning root key
//! is excluded from the search: until attested provisioning lands, the gateway is the one
//! that hands it to the enclave (docs/threat-model.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]

use cloister_enclave::attest::SoftwareAttestation;
use cloister_enclave::*;
use enclave_host::{ProcessEnclave, ProcessSpec};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

mod support;

use support::{inner, lay_out};

const MASK: u8 = 0x5A;
/// Shortest run of key bytes counted as an exposure (a partial copy counts too).
const WINDOW: usize = 16;
const PACKETS: usize = 256;
const INNER_LEN: usize = 200;
const SUITE: Suite = Suite::aead(Cipher::AesGcm16_256);
const TENANT: u32 = 77;

fn python() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.deps/venv/bin/python3");
    let candidates = [venv, PathBuf::from("python3")];
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import cryptography.hazmat.primitives.ciphers.aead"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn send(&mut self, pairs: &[(String, String)]) {
        let mut text = String::new();
        for (k, v) in pairs {
            text.push_str(&format!("{k} {v}\n"));
        }
        text.push('\n');
        self.stdin.write_all(text.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn receive(&mut self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for _ in 0..10_000 {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 || line.trim().is_empty() {
                return m;
            }
            let (k, v) = line.trim().split_once(' ').unwrap();
            m.insert(k.to_string(), v.to_string());
        }
        panic!("peer message too long");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every `WINDOW`-byte run of every key, masked, with the key's name.
struct Needles {
    /// (masked window, key name)
    windows: Vec<([u8; WINDOW], String)>,
    /// Whether any window starts with this (masked) byte pair: a cheap first filter.
    first: Vec<bool>,
}

impl Needles {
    fn new(masked: &BTreeMap<String, Vec<u8>>) -> Self {
        let mut windows = Vec::new();
        let mut first = vec![false; 65536];
        for (name, key) in masked {
            assert!(key.len() >= WINDOW, "{name} is shorter than a window");
            for w in key.windows(WINDOW) {
                let w: [u8; WINDOW] = w.try_into().unwrap();
                first[usize::from(w[0]) << 8 | usize::from(w[1])] = true;
                windows.push((w, name.clone()));
            }
        }
        Self { windows, first }
    }

    /// Names of the keys of which some window occurs in `mem` (compared unmasked).
    fn search(&self, mem: &[u8], found: &mut BTreeMap<String, usize>) {
        if mem.len() < WINDOW {
            return;
        }
        for i in 0..=mem.len() - WINDOW {
            let pair = usize::from(mem[i] ^ MASK) << 8 | usize::from(mem[i + 1] ^ MASK);
            if !self.first[pair] {
                continue;
            }
            for (w, name) in &self.windows {
                if mem[i..i + WINDOW].iter().zip(w).all(|(m, n)| m ^ MASK == *n) {
                    *found.entry(name.clone()).or_default() += 1;
                }
            }
        }
    }
}

/// Reads every readable mapping of `pid` through /proc/PID/mem and searches it.
/// Returns the hits by key name and the bytes scanned.
fn scan(pid: &str, needles: &Needles) -> (BTreeMap<String, usize>, usize) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut found = BTreeMap::new();
    let mut scanned = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        let path = f.nth(3).unwrap_or("");
        if !perms.starts_with('r') || path == "[vvar]" || path == "[vsyscall]" {
            continue;
        }
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
        // Chunks overlap by a window so that no run is cut in two.
        let mut at = lo;
        while at < hi {
            let len = usize::try_from((hi - at).min(buf.len() as u64)).unwrap();
            if mem.seek(SeekFrom::Start(at)).is_err() {
                break;
            }
            let Ok(n) = mem.read(&mut buf[..len]) else { break };
            if n == 0 {
                break;
            }
            needles.search(&buf[..n], &mut found);
            scanned += n;
            if at + n as u64 >= hi {
                break;
            }
            at += (n - WINDOW.min(n - 1)) as u64;
        }
    }
    // The scan buffer itself must not keep plain copies around for the next scan.
    buf.fill(0);
    (found, scanned)
}

#[test]
fn no_key_byte_is_in_the_gateway_and_the_enclave_holds_them() {
    let Some(py) = python() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have Python with `cryptography` (scripts/setup.sh)"
        );
        testnet::skip("needs a Python with `cryptography`; run scripts/setup.sh");
        return;
    };
    let peer_script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/key_exposure_peer.py");
    let mut child =
        Command::new(&py).arg(&peer_script).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut peer = Peer { child, stdin, stdout };

    // The gateway starts the tenant's enclave process.
    let prov = [0x42u8; 32];
    let config = EnclaveConfig {
        tenant: TenantId(TENANT),
        provisioning_key: ProvisioningKey::from_bytes(prov),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let spec = ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new());
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let mut e = ProcessEnclave::start(spec, config, &pk).unwrap();
    let enclave_pid = e.pid().unwrap().to_string();

    // IKE_SA_INIT request, then the tenant's answer with its wrapped PSK.
    let ni = support::nonce(&mut e);
    let mut ke_i = [0u8; 32];
    let dh = e.dh_generate(DhGroup::Curve25519, &mut ke_i).unwrap();
    let (spi_i, spi_r, gw_in, gw_out) =
        (0x0102_0304_0506_0708u64, 0x1112_1314_1516_1718u64, 0xc0de_0001u32, 0xc0de_0002u32);
    let s = |v: &dyn ToString| v.to_string();
    peer.send(&[
        ("prov_key".into(), hex(&prov)),
        ("tenant".into(), s(&TENANT)),
        ("ni".into(), hex(&ni)),
        ("ke_i".into(), hex(&ke_i)),
        ("spi_i".into(), s(&spi_i)),
        ("spi_r".into(), s(&spi_r)),
        ("child_gw_in".into(), s(&gw_in)),
        ("child_gw_out".into(), s(&gw_out)),
        ("packets".into(), s(&PACKETS)),
        ("inner_len".into(), s(&INNER_LEN)),
    ]);
    let answer = peer.receive();
    let masked: BTreeMap<String, Vec<u8>> = answer
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("masked_").map(|name| (name.to_string(), unhex(v))))
        .collect();
    assert_eq!(
        masked.len(),
        8,
        "PSK, SK_d, SK_ei, SK_er, SK_pi, SK_pr and both ESP keys: {:?}",
        masked.keys()
    );
    let needles = Needles::new(&masked);

    let psk = e.provision_secret(&unhex(&answer["wrapped_psk"])).unwrap();
    let nr = unhex(&answer["nr"]);
    let params = IkeSaParams {
        role: Role::Initiator,
        prf: Prf::HmacSha256,
        suite: SUITE,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_i,
        spi_r,
    };
    let ike = e.ike_sa_create(DhExchange { dh, peer_public: &unhex(&answer["ke_r"]) }, &params).unwrap();
    // IKE_AUTH: our AUTH with the PSK, and an SK payload.
    let mut auth = [0u8; 64];
    let id = [1u8, 0, 0, 0, 198, 18, 0, 1];
    let msg1 = support::sa_init_message(spi_i, 0, true, &ke_i, &ni);
    let input = AuthInput { real_message: &msg1, peer_nonce: &nr, id_body: &id };
    e.auth_compute(ike, psk, AuthSpec::SharedKey, &input, &mut auth).unwrap();
    // The tenant's AUTH over its IKE_SA_INIT response: verified before any child SA.
    let ke_r = unhex(&answer["ke_r"]);
    let msg2 = support::sa_init_message(spi_i, spi_r, false, &ke_r, &nr);
    let id_r = unhex(&answer["id_r"]);
    let theirs = AuthInput { real_message: &msg2, peer_nonce: &ni, id_body: &id_r };
    e.auth_verify(ike, PeerCredential::SharedKey(psk), 2, &unhex(&answer["auth_r"]), &theirs).unwrap();
    let layout = SUITE.sk_layout(40);
    let mut msg = vec![0u8; 32 + layout.body_len(40)];
    e.sk_encrypt(ike, &mut msg, 32, 40).unwrap();
    let child = ChildSaParams {
        role: Role::Initiator,
        suite: SUITE,
        esn: false,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_inbound: gw_in,
        spi_outbound: gw_out,
    };
    let sas = e.child_sa_create(ike, None, None, &child).unwrap();

    // Traffic: the tenant's packets decrypt in batches to the agreed inner packets...
    let mut area = e.take_packet_area().unwrap();
    let slot = 512;
    let mut st = vec![EspStatus::NotProcessed; 32];
    for chunk in 0..PACKETS / 32 {
        let buf = area.as_mut_slice();
        let descs: Vec<_> = (0..32)
            .map(|j| {
                let k = chunk * 32 + j;
                let pkt = unhex(&answer[&format!("packet_{k}")]);
                buf[j * slot..j * slot + pkt.len()].copy_from_slice(&pkt);
                EspDescriptor::decrypt(sas.inbound, (j * slot) as u32, pkt.len() as u32, k as u64 + 1)
            })
            .collect();
        let sum = e.esp_batch(area.as_mut_slice(), &descs, &mut st).unwrap();
        assert_eq!((sum.ok, sum.failed), (32, 0), "{st:?}");
        for j in 0..32 {
            assert_eq!(
                &area.as_mut_slice()[j * slot + 16..][..INNER_LEN],
                &inner(chunk * 32 + j, INNER_LEN)[..]
            );
        }
    }
    // ...and ours decrypt at the tenant's side.
    let mut outs = Vec::new();
    for chunk in 0..PACKETS / 32 {
        let buf = area.as_mut_slice();
        let descs: Vec<_> = (0..32)
            .map(|j| {
                let k = chunk * 32 + j;
                let len = lay_out(buf, j * slot, &inner(k, INNER_LEN));
                EspDescriptor::encrypt(sas.outbound, (j * slot) as u32, len, k as u64 + 1)
            })
            .collect();
        let sum = e.esp_batch(area.as_mut_slice(), &descs, &mut st).unwrap();
        assert_eq!((sum.ok, sum.failed), (32, 0), "{st:?}");
        for (j, d) in descs.iter().enumerate() {
            let k = chunk * 32 + j;
            outs.push((format!("out_{k}"), hex(&area.as_mut_slice()[j * slot..][..d.len as usize])));
        }
    }
    peer.send(&outs);
    let verdict = peer.receive();
    assert_eq!(verdict["verified"], PACKETS.to_string(), "the tenant decrypts every packet we sent");

    // The search. The gateway (this process) must hold none of the keys...
    let (in_gateway, gw_bytes) = scan("self", &needles);
    // ...and the enclave process holds them (positive control: the search works).
    let (in_enclave, enclave_bytes) = scan(&enclave_pid, &needles);
    println!("gateway: scanned {gw_bytes} bytes, key windows found: {in_gateway:?}");
    println!(
        "enclave (pid {enclave_pid}, hardening {:?}): scanned {enclave_bytes} bytes, key windows found: {in_enclave:?}",
        e.hardening()
    );
    assert!(gw_bytes > 1 << 20 && enclave_bytes > 1 << 20, "both scans read real memory");
    assert!(in_gateway.is_empty(), "key bytes in the untrusted gateway: {in_gateway:?}");
    for key in ["psk", "sk_d", "sk_ei", "sk_er", "sk_pi", "sk_pr", "esp_gw_in", "esp_gw_out"] {
        assert!(
            in_enclave.contains_key(key),
            "positive control: {key} not found in the enclave ({in_enclave:?})"
        );
    }

    // Zeroized on delete: once the SAs and the secret are gone, so are their bytes, from
    // the tables, the heap and the enclave's stack.
    e.esp_sa_delete(sas.inbound).unwrap();
    e.esp_sa_delete(sas.outbound).unwrap();
    e.ike_sa_delete(ike).unwrap();
    e.delete_secret(psk).unwrap();
    let (after_delete, _) = scan(&enclave_pid, &needles);
    println!("enclave after deleting every SA and the PSK: key windows found: {after_delete:?}");
    assert!(after_delete.is_empty(), "key bytes left in the enclave after delete: {after_delete:?}");
}
