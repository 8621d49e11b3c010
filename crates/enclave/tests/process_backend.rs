//! The process backend for real: a hardened child process per enclave, reached through the
//! shared-memory rings. One side of each exchange is a `ProcessEnclave`, the other an
//! `InlineEnclave`, so every call is checked against the reference implementation.
//! The child is this crate's `cloister-enclave-process` binary (the same entry point as
//! `cloister enclave-process`).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Test packets are patterns of bytes built from small indices: truncation is intended.
#![allow(clippy::cast_possible_truncation)]

use cloister_enclave::attest::{verify_software_evidence, CodeIdentity, SoftwareAttestation};
use cloister_enclave::process::desc::{
    decode_status, encode_batch, encode_call, BatchDescriptor, CallDescriptor,
};
use cloister_enclave::provision::wrap_secret;
use cloister_enclave::*;
use enclave_host::{ExitReport, ProcessEnclave, ProcessError, ProcessSpec, RejectReason};

mod support;

use support::{inner, lay_out};

const PROV_KEY: [u8; 32] = [0x42; 32];

fn config(tenant: u32) -> EnclaveConfig {
    EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

/// The child program: this crate's test binary, or, with `CLOISTER_BIN` set to a built
/// `cloister`, the gateway's own hidden `enclave-process` subcommand.
fn spec() -> ProcessSpec {
    match std::env::var_os("CLOISTER_BIN") {
        Some(bin) => ProcessSpec::new(bin, ["enclave-process"]),
        None => ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new()),
    }
}

fn platform_key() -> Vec<u8> {
    SoftwareAttestation::generate_platform_key().unwrap().to_vec()
}

fn start_process(tenant: u32) -> (ProcessEnclave, Vec<u8>) {
    let pk = platform_key();
    (ProcessEnclave::start(spec(), config(tenant), &pk).unwrap(), pk)
}

fn start_inline(tenant: u32) -> InlineEnclave {
    let c = config(tenant);
    let pk = platform_key();
    let att = SoftwareAttestation::new(
        &pk,
        CodeIdentity::Bytes(b"peer".to_vec()),
        &c.measured_bytes(Backend::Inline),
    )
    .unwrap();
    InlineEnclave::start(c, Box::new(att)).unwrap()
}

const SUITE: Suite = Suite::aead(Cipher::AesGcm16_256);

struct Tunnel {
    ike_p: IkeSaHandle,
    ike_i: IkeSaHandle,
    /// The process enclave's SAs (it is the IKE initiator).
    p: ChildSaPair,
    /// The inline enclave's SAs.
    i: ChildSaPair,
}

/* IKE_SA_INIT { SA, KE, Ni } <--> { SA, KE, Nr }, then IKE_AUTH's child SA */
fn tunnel(p: &mut ProcessEnclave, i: &mut InlineEnclave) -> Tunnel {
    let x = support::exchange(p, i, PROV_KEY);
    Tunnel { ike_p: x.ike_a, ike_i: x.ike_b, p: x.sa_a, i: x.sa_b }
}

/// IKE_SA_INIT only, the process enclave initiating: neither side has computed its AUTH
/// yet (each does once per IKE SA).
fn sa_init(p: &mut ProcessEnclave, i: &mut InlineEnclave) -> enclave_api::testing::Handshake {
    enclave_api::testing::ike_sa_init(p, i, DhGroup::Curve25519, Prf::HmacSha256, SUITE, (0x7111, 0x7222))
        .unwrap()
}

#[test]
fn the_child_is_hardened() {
    let (e, _) = start_process(1);
    let h = e.hardening();
    assert!(h.complete(), "{h:?}");
    let pid = e.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.lines().any(|l| l.split_whitespace().eq(["Seccomp:", "2"])), "{status}");
    assert!(status.lines().any(|l| l.split_whitespace().eq(["NoNewPrivs:", "1"])), "{status}");
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(ours, theirs, "the enclave has its own network namespace");
    // Only the memfd, two eventfds, the parent's pidfd and stdio remain open.
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    assert!(fds <= 8, "{fds} descriptors open in the enclave");
}

#[test]
fn a_zero_copy_batch_crosses_and_the_inline_peer_decrypts_it() {
    let (mut p, _) = start_process(1);
    let mut i = start_inline(1);
    let t = tunnel(&mut p, &mut i);
    let mut area = p.take_packet_area().unwrap();
    assert!(p.take_packet_area().is_none(), "lent once");
    let buf = area.as_mut_slice();
    let mut descs = Vec::new();
    let mut inners = Vec::new();
    for k in 0..32usize {
        let off = k * 2048;
        let inn = inner(k, 40 + k * 40);
        let len = lay_out(buf, off, &inn);
        descs.push(EspDescriptor::encrypt(t.p.outbound, off as u32, len, k as u64 + 1));
        inners.push(inn);
    }
    let mut st = vec![EspStatus::NotProcessed; 32];
    let sum = p.esp_batch(area.as_mut_slice(), &descs, &mut st).unwrap();
    assert_eq!((sum.ok, sum.failed), (32, 0), "{st:?}");

    // The inline peer verifies and decrypts a copy.
    let mut copy = area.as_mut_slice().to_vec();
    let dec: Vec<_> =
        descs.iter().map(|d| EspDescriptor::decrypt(t.i.inbound, d.offset, d.len, d.seq)).collect();
    let sum = i.esp_batch(&mut copy, &dec, &mut st).unwrap();
    assert_eq!((sum.ok, sum.failed), (32, 0), "{st:?}");
    for (d, inn) in dec.iter().zip(&inners) {
        assert_eq!(&copy[d.offset as usize + 16..][..inn.len()], &inn[..]);
        assert_eq!(&copy[d.offset as usize..][..4], &0xc200u32.to_be_bytes());
    }
    // Replaying a sequence number is refused by the enclave process, per packet.
    let again = [descs[0]];
    let mut one = [EspStatus::NotProcessed];
    p.esp_batch(area.as_mut_slice(), &again, &mut one).unwrap();
    assert_eq!(one[0], EspStatus::SeqReused);
    assert_eq!(p.counters().esp_status(EspStatus::Ok), 32);
}

#[test]
fn the_copy_path_serves_callers_with_their_own_buffer() {
    let (mut p, _) = start_process(1);
    let mut i = start_inline(1);
    let t = tunnel(&mut p, &mut i);
    // The inline side encrypts; the process side decrypts a caller-owned buffer.
    let mut buf = vec![0u8; 8192];
    let inn = inner(7, 100);
    let len = lay_out(&mut buf, 1000, &inn);
    let mut st = [EspStatus::NotProcessed; 2];
    i.esp_batch(&mut buf, &[EspDescriptor::encrypt(t.i.outbound, 1000, len, 1)], &mut st[..1]).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    let descs = [
        EspDescriptor::decrypt(t.p.inbound, 1000, len, 1),
        // Inside the shared area but outside the caller's buffer: refused like inline.
        EspDescriptor::decrypt(t.p.inbound, 8192, 64, 2),
    ];
    p.esp_batch(&mut buf, &descs, &mut st).unwrap();
    assert_eq!(st, [EspStatus::Ok, EspStatus::OutOfBounds]);
    assert_eq!(&buf[1016..1116], &inn[..]);
}

#[test]
fn ike_calls_cross_and_refusals_keep_their_type() {
    let (mut p, pk) = start_process(5);
    let mut i = start_inline(5);
    let t = tunnel(&mut p, &mut i);
    // SK payloads both ways.
    let inner_payloads = b"inner payloads of an IKE_AUTH request";
    let aad_len = 32;
    let layout = SUITE.sk_layout(inner_payloads.len());
    let fresh = || {
        let mut m = vec![0xAB; aad_len + layout.body_len(inner_payloads.len())];
        m[aad_len + layout.iv_len..][..inner_payloads.len()].copy_from_slice(inner_payloads);
        m
    };
    let mut msg = fresh();
    p.sk_encrypt(t.ike_p, &mut msg, aad_len, inner_payloads.len()).unwrap();
    let r = i.sk_decrypt(t.ike_i, &mut msg, aad_len).unwrap();
    assert_eq!(&msg[r], inner_payloads);
    let mut msg = fresh();
    i.sk_encrypt(t.ike_i, &mut msg, aad_len, inner_payloads.len()).unwrap();
    let mut tampered = msg.clone();
    tampered[3] ^= 1;
    assert_eq!(p.sk_decrypt(t.ike_p, &mut tampered, aad_len), Err(Error::IntegrityCheckFailed));
    let r = p.sk_decrypt(t.ike_p, &mut msg, aad_len).unwrap();
    assert_eq!(&msg[r], inner_payloads);

    // PSK AUTH computed in the process, verified inline, over an exchange that has not
    // authenticated yet (each side computes its AUTH once per IKE SA).
    let h = sa_init(&mut p, &mut i);
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(5), SecretKind::PreSharedKey, b"psk!")
            .unwrap();
    let psk_p = p.provision_secret(&blob).unwrap();
    let psk_i = i.provision_secret(&blob).unwrap();
    assert_eq!(p.secret_kind(psk_p).unwrap(), SecretKind::PreSharedKey);
    let input = h.auth_a(b"\x02\0\0\0a");
    let mut auth = [0u8; 64];
    let (m, n) = p.auth_compute(h.ike_a, psk_p, AuthSpec::SharedKey, &input, &mut auth).unwrap();
    assert_eq!(m, AuthMethod::SharedKey);
    // The initiator's AUTH verifies at the responder.
    i.auth_verify(h.ike_b, PeerCredential::SharedKey(psk_i), 2, &auth[..n], &input).unwrap();
    // A wrong peer AUTH over the peer's own input fails verification; our own input offered
    // as the peer's is no input of the peer's at all.
    let theirs = h.auth_b(b"\x02\0\0\0b");
    assert_eq!(
        p.auth_verify(h.ike_a, PeerCredential::SharedKey(psk_p), 2, &[0; 32], &theirs),
        Err(Error::AuthenticationFailed { method: 2 })
    );
    assert_eq!(
        p.auth_verify(h.ike_a, PeerCredential::SharedKey(psk_p), 2, &auth[..n], &input),
        Err(Error::ProtocolRefused { why: refusal::NOT_THE_TRANSCRIPT })
    );

    // Identity evidence from the child, bound to our challenge and to the child's own code.
    let ev = p.identity_evidence(&[9; 32]).unwrap();
    let platform = SoftwareAttestation::new(&pk, CodeIdentity::Bytes(vec![]), b"").unwrap();
    let rd = cloister_enclave::attest::identity_report_data(TenantId(5), &[9; 32]);
    let identity = cloister_enclave::attest::EvidencePurpose::Identity;
    let v = verify_software_evidence(&ev.bytes, platform.platform_public_key(), identity, &rd).unwrap();
    assert_eq!(v.tenant, TenantId(5));

    // Typed refusals cross unchanged: a handle of another instance, a deleted one.
    // Another instance's handle: ours with another instance tag (two instances' random tags
    // coincide once in 256, so a real one from `i` would make this test flaky).
    let foreign = IkeSaHandle(t.ike_p.0 ^ 0x0100_0000);
    let e = p.ike_sa_delete(foreign).unwrap_err();
    assert!(matches!(e, Error::ForeignHandle { .. } | Error::UnknownHandle { .. }), "{e:?}");
    p.esp_sa_delete(t.p.outbound).unwrap();
    assert!(matches!(
        p.esp_sa_delete(t.p.outbound),
        Err(Error::UnknownHandle { kind: HandleKind::EspSa, .. })
    ));
    let mut b = vec![0u8; 4096];
    let mut st = [EspStatus::NotProcessed];
    p.esp_batch(&mut b, &[EspDescriptor::encrypt(t.p.outbound, 0, 64, 9)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::UnknownSa, "handle after deletion");
    assert!(p.memory_report().esp_sas >= 1);
    assert!(p.counters().error(ErrorKind::UnknownHandle) >= 1);
    assert_eq!(p.tenant(), TenantId(5));
}

#[test]
fn forged_ring_contents_are_refused_counted_and_never_crash_the_child() {
    let (mut p, _) = start_process(1);
    let mut i = start_inline(1);
    let t = tunnel(&mut p, &mut i);
    let area = p.geometry().packet_len;
    let table = p.geometry().descriptors;
    let mut bad_op = EspDescriptor::encrypt(t.p.outbound, 0, 64, 1);
    bad_op.opcode = EspOpcode(0x99);
    let mut reserved = EspDescriptor::encrypt(t.p.outbound, 4096, 64, 1).encode();
    reserved[31] = 0xff;
    let entries = [
        EspDescriptor::encrypt(t.p.outbound, area - 8, 64, 1).encode(),
        EspDescriptor::encrypt(t.p.outbound, u32::MAX, u32::MAX, 1).encode(),
        EspDescriptor::encrypt(t.p.outbound, 0, 8, 1).encode(),
        bad_op.encode(),
        // Another instance's handle (ours with another instance tag; see above).
        EspDescriptor::encrypt(EspSaHandle(t.p.outbound.0 ^ 0x0100_0000), 2048, 64, 1).encode(),
        reserved,
        EspDescriptor::encrypt(t.p.outbound, 2048 + 32, 64, 1).encode(),
    ];
    assert!(p.raw_write_descriptors(0, &entries));
    assert!(!p.raw_write_descriptors(table, &entries[..1]), "outside the table");
    let mut batch_reserved = encode_batch(13, &BatchDescriptor { first: 0, count: 1 });
    batch_reserved[40] = 1;
    let slots = [
        encode_batch(1, &BatchDescriptor { first: 0, count: 7 }),
        encode_batch(2, &BatchDescriptor { first: table - 1, count: 2 }),
        encode_batch(3, &BatchDescriptor { first: u32::MAX, count: 1 }),
        encode_batch(4, &BatchDescriptor { first: 0, count: Limits::default().max_batch as u32 + 1 }),
        batch_reserved,
        encode_call(7, &CallDescriptor { opcode: 0x4444, arg_off: 0, arg_len: 0, res_off: 0, res_cap: 0 }),
        encode_call(8, &CallDescriptor { opcode: 3, arg_off: u32::MAX, arg_len: 2, res_off: 0, res_cap: 16 }),
    ];
    let done = p.raw_submit(&slots).unwrap();
    let reasons: Vec<_> = done.iter().map(|c| RejectReason::from_code(c.reject)).collect();
    assert_eq!(
        reasons,
        [
            None, // the batch itself is sound; its descriptors are answered one by one
            Some(RejectReason::BatchOutOfBounds),
            Some(RejectReason::BatchOutOfBounds),
            Some(RejectReason::BatchTooLarge),
            Some(RejectReason::ReservedBytes),
            Some(RejectReason::UnknownOpcode),
            Some(RejectReason::OutOfBounds),
        ]
    );
    assert_eq!(done[0].result_len, 7);
    let st: Vec<_> = p.raw_read_statuses(0, 7).unwrap().into_iter().map(decode_status).collect();
    let reasons: Vec<_> = st.iter().map(|s| s.1).collect();
    assert_eq!(
        reasons,
        [
            Some(RejectReason::OutOfBounds),
            Some(RejectReason::OutOfBounds),
            Some(RejectReason::BadLength),
            Some(RejectReason::UnknownOpcode),
            None, // passed the transport; the trusted table refuses the other tenant's handle
            Some(RejectReason::ReservedBytes),
            Some(RejectReason::Overlap),
        ]
    );
    assert!(matches!(st[4].0, EspStatus::ForeignSa | EspStatus::UnknownSa), "{:?}", st[4]);
    assert_eq!(st[6].0, EspStatus::Overlap);
    let rejects = p.rejects();
    assert_eq!(rejects.get(RejectReason::OutOfBounds), 3);
    assert_eq!(rejects.get(RejectReason::BatchOutOfBounds), 2);
    assert_eq!(rejects.total(), 12);
    // Still alive and serving.
    p.check().unwrap();
    let mut n = [0u8; 16];
    p.random_nonce(&mut n).unwrap();
}

#[test]
fn pipelined_batches_overlap_and_complete_in_order() {
    let (mut p, _) = start_process(1);
    let mut i = start_inline(1);
    let t = tunnel(&mut p, &mut i);
    let mut area = p.take_packet_area().unwrap();
    let batch = |first: usize, seq0: u64, area: &mut [u8]| -> Vec<EspDescriptor> {
        (0..32)
            .map(|k| {
                let off = (first + k) * 2048;
                let len = lay_out(area, off, &inner(k, 200));
                EspDescriptor::encrypt(t.p.outbound, off as u32, len, seq0 + k as u64)
            })
            .collect()
    };
    let a = batch(0, 1, area.as_mut_slice());
    let b = batch(32, 33, area.as_mut_slice());
    let fa = p.submit_esp(&a).unwrap();
    let fb = p.submit_esp(&b).unwrap();
    assert_eq!(fa.len() + fb.len(), 64);
    // Synchronous calls wait for the pipeline to drain.
    let mut n = [0u8; 16];
    assert!(matches!(
        p.random_nonce(&mut n),
        Err(Error::Process(ProcessError::RingBusy { in_flight: 64, .. }))
    ));
    // The descriptor table bounds what is in flight: after the 64, (1024 - 64) / 256 more
    // batches of 256 fit, the next does not. (They repeat one descriptor: the enclave
    // answers all but the first of each with Overlap.)
    let table = p.geometry().descriptors as usize;
    let big = vec![a[0]; 256];
    let mut more = Vec::new();
    loop {
        match p.submit_esp(&big) {
            Ok(f) => more.push(f),
            Err(Error::Process(ProcessError::RingBusy { .. })) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(more.len(), (table - 64) / 256);
    let mut st = vec![EspStatus::NotProcessed; 32];
    assert_eq!(p.complete_esp(fa, &mut st).unwrap().ok, 32);
    assert_eq!(p.complete_esp(fb, &mut st).unwrap().ok, 32);
    let mut st = vec![EspStatus::NotProcessed; 256];
    for f in more {
        p.complete_esp(f, &mut st).unwrap();
        assert_eq!(st[0], EspStatus::SeqReused);
        assert!(st[1..].iter().all(|&s| s == EspStatus::Overlap));
    }
    p.random_nonce(&mut n).unwrap();
    // The inline peer decrypts all 64.
    let mut copy = area.as_mut_slice().to_vec();
    let dec: Vec<_> =
        a.iter().chain(&b).map(|d| EspDescriptor::decrypt(t.i.inbound, d.offset, d.len, d.seq)).collect();
    let mut st = vec![EspStatus::NotProcessed; 64];
    assert_eq!(i.esp_batch(&mut copy, &dec, &mut st).unwrap().ok, 64);
}

#[test]
fn the_inbound_mode_reaches_the_enclave_process() {
    let pk = platform_key();
    let cfg =
        EnclaveConfig { limits: Limits { inbound: InboundMode::Forward, ..Limits::default() }, ..config(1) };
    let mut p = ProcessEnclave::start(spec(), cfg, &pk).unwrap();
    let mut i = start_inline(1);
    let t = tunnel(&mut p, &mut i);
    let mut b = vec![0u8; 2048];
    let len = lay_out(&mut b, 0, &inner(0, 64));
    let mut st = [EspStatus::NotProcessed];
    i.esp_batch(&mut b, &[EspDescriptor::encrypt(t.i.outbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    p.esp_batch(&mut b, &[EspDescriptor::decrypt(t.p.inbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::ModeNotAllowed);
}

#[test]
fn oversized_batches_are_refused_before_crossing() {
    let (mut p, _) = start_process(1);
    let max = Limits::default().max_batch;
    let descs = vec![EspDescriptor::encrypt(EspSaHandle(1), 0, 64, 1); max + 1];
    let mut st = vec![EspStatus::NotProcessed; max + 1];
    let mut b = vec![0u8; 64];
    assert_eq!(p.esp_batch(&mut b, &descs, &mut st), Err(Error::BatchTooLarge { descriptors: max + 1, max }));
    assert!(matches!(
        p.esp_batch(&mut b, &descs[..2], &mut st[..1]),
        Err(Error::StatusLengthMismatch { .. })
    ));
}

#[test]
fn a_killed_enclave_is_reported_other_tenants_run_on_and_a_restart_serves_again() {
    let (mut a, _) = start_process(1);
    let (mut b, _) = start_process(2);
    let mut peer = start_inline(1);
    let t = tunnel(&mut a, &mut peer);
    let pid = a.pid().unwrap();
    assert_eq!(unsafe_kill(pid), 0);
    let mut n = [0u8; 16];
    let err = a.random_nonce(&mut n).unwrap_err();
    assert_eq!(err, Error::Process(ProcessError::Died { pid, exit: ExitReport::Signaled(libc::SIGKILL) }));
    assert!(err.to_string().contains("killed by signal 9"), "{err}");
    // Every later call says the same, clearly; the ESP path too.
    assert_eq!(a.check(), Err(ProcessError::Died { pid, exit: ExitReport::Signaled(9) }));
    let mut st = [EspStatus::NotProcessed];
    assert!(matches!(
        a.esp_batch(&mut [0u8; 128], &[EspDescriptor::encrypt(t.p.outbound, 0, 64, 5)], &mut st),
        Err(Error::Process(ProcessError::Died { .. }))
    ));
    // The other tenant's enclave is untouched.
    b.random_nonce(&mut n).unwrap();
    b.check().unwrap();

    // Restart: a fresh process on the same shared memory; old handles are gone.
    a.restart().unwrap();
    let new_pid = a.pid().unwrap();
    assert_ne!(new_pid, pid);
    assert!(a.hardening().complete());
    let mut b2 = [0u8; 4096];
    a.esp_batch(&mut b2, &[EspDescriptor::encrypt(t.p.outbound, 0, 64, 6)], &mut st).unwrap();
    assert!(matches!(st[0], EspStatus::UnknownSa | EspStatus::ForeignSa), "{:?}", st[0]);
    let mut peer2 = start_inline(1);
    let t2 = tunnel(&mut a, &mut peer2);
    let inn = inner(1, 64);
    let len = lay_out(&mut b2, 0, &inn);
    a.esp_batch(&mut b2, &[EspDescriptor::encrypt(t2.p.outbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    peer2.esp_batch(&mut b2, &[EspDescriptor::decrypt(t2.i.inbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    assert_eq!(&b2[16..80], &inn[..]);
}

/// Protects `inner` with `from`'s IKE SA and returns what `to` decrypts from it.
fn sk_across(
    from: &mut dyn Enclave,
    fh: IkeSaHandle,
    to: &mut dyn Enclave,
    th: IkeSaHandle,
) -> Result<Vec<u8>> {
    let inner = b"INFORMATIONAL request after the restart";
    let aad_len = 28 + 4;
    let layout = SUITE.sk_layout(inner.len());
    let mut msg = vec![0xAB; aad_len + layout.body_len(inner.len())];
    msg[aad_len + layout.iv_len..][..inner.len()].copy_from_slice(inner);
    from.sk_encrypt(fh, &mut msg, aad_len, inner.len())?;
    let range = to.sk_decrypt(th, &mut msg, aad_len)?;
    Ok(msg[range].to_vec())
}

#[test]
fn a_restarted_enclave_restores_its_ike_sa_from_sealed_state_and_rekeys_children() {
    let (mut a, _) = start_process(1);
    let mut peer = start_inline(1);
    let t = tunnel(&mut a, &mut peer);
    // Sealing the state needs clear-and-seal first: SK_p* must never be in a state blob.
    assert_eq!(a.ike_sa_seal_state(t.ike_p), Err(Error::NotSealed));
    let sk_d = a.clear_and_seal(t.ike_p).unwrap();
    let peer_sk_d = peer.clear_and_seal(t.ike_i).unwrap();
    let state = a.ike_sa_seal_state(t.ike_p).unwrap();
    assert!(state.counter().unwrap() > sk_d.counter().unwrap());
    assert!(!format!("{state:?}").is_empty());

    let pid = a.pid().unwrap();
    assert_eq!(unsafe_kill(pid), 0);
    // SIGKILL is delivered asynchronously: wait (bounded) until the death is visible.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while a.check().is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(matches!(a.check(), Err(ProcessError::Died { .. })));
    a.restart().unwrap();

    // Forged, truncated and foreign blobs are refused; so is an SK_d blob offered as state.
    let mut forged = state.clone();
    let last = forged.0.len() - 1;
    forged.0[last] ^= 1;
    assert_eq!(a.ike_sa_restore(&forged), Err(Error::SealedBlob { reason: BlobRejection::Forged }));
    let cut = SealedBlob(state.0[..30].to_vec());
    assert_eq!(a.ike_sa_restore(&cut), Err(Error::SealedBlob { reason: BlobRejection::Malformed }));
    assert_eq!(a.ike_sa_restore(&sk_d), Err(Error::SealedBlob { reason: BlobRejection::Malformed }));
    let mut other = start_inline(2);
    assert_eq!(other.ike_sa_restore(&state), Err(Error::SealedBlob { reason: BlobRejection::Forged }));

    let ike = a.ike_sa_restore(&state).unwrap();
    // SK payloads flow both ways again with the restored keys.
    assert_eq!(
        sk_across(&mut a, ike, &mut peer, t.ike_i).unwrap(),
        b"INFORMATIONAL request after the restart"
    );
    assert_eq!(
        sk_across(&mut peer, t.ike_i, &mut a, ike).unwrap(),
        b"INFORMATIONAL request after the restart"
    );
    // The restored SA never authenticates again (SK_p* were cleared before sealing).
    assert_eq!(a.ike_sa_seal_state(ike).map(|b| b.0.len()), Ok(state.0.len()));

    // Child SAs are rekeyed through the restored SA, with SK_d from its sealed blob.
    let (ni, nr) = (support::nonce(&mut a), support::nonce(&mut peer));
    let child = |role, spi_inbound, spi_outbound| ChildSaParams {
        role,
        suite: SUITE,
        esn: false,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_inbound,
        spi_outbound,
    };
    let ca = a.child_sa_create(ike, Some(&sk_d), None, &child(Role::Initiator, 0xd100, 0xd200)).unwrap();
    let cp = peer
        .child_sa_create(t.ike_i, Some(&peer_sk_d), None, &child(Role::Responder, 0xd200, 0xd100))
        .unwrap();
    let mut buf = [0u8; 4096];
    let inn = inner(3, 200);
    let len = lay_out(&mut buf, 0, &inn);
    let mut st = [EspStatus::NotProcessed];
    a.esp_batch(&mut buf, &[EspDescriptor::encrypt(ca.outbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    peer.esp_batch(&mut buf, &[EspDescriptor::decrypt(cp.inbound, 0, len, 1)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok);
    assert_eq!(&buf[16..216], &inn[..]);

    // A second restart: the ledger the host keeps for the tenant issues counters above
    // every blob of the earlier children, whatever the store says, and only the SA's
    // latest state comes back.
    let latest = a.ike_sa_seal_state(ike).unwrap();
    let before = latest.counter().unwrap();
    a.restart().unwrap();
    assert_eq!(
        a.ike_sa_restore(&state).map(|_| ()),
        Err(Error::SealedBlob { reason: BlobRejection::Rollback })
    );
    let again = a.ike_sa_restore(&latest).unwrap();
    assert!(a.ike_sa_seal_state(again).unwrap().counter().unwrap() > before);
}

#[test]
fn attested_provisioning_crosses_the_boundary_and_survives_a_restart() {
    use cloister_enclave::attest::software_measurement;
    use cloister_enclave::provision::{seal_to_offer, why};
    let (mut a, pk) = start_process(1);
    // The tenant's trust anchors: the platform key, and the measurement of the child program
    // with this configuration (computed from the binary, as a reference value would be).
    let anchor = SoftwareAttestation::new(&pk, CodeIdentity::Bytes(vec![]), b"").unwrap();
    let anchor = anchor.platform_public_key().to_vec();
    let code = std::fs::read(&spec().program).unwrap();
    let expected = software_measurement(&code, &config(1).measured_bytes(Backend::Process));

    let offer = a.provisioning_offer().unwrap();
    let offer = ProvisioningOffer::from_bytes(&offer.to_bytes()).unwrap();
    let psk = b"attested PSK over the rings: 5be1d09a";
    let kind = SecretKind::PreSharedKey;
    let envelope =
        seal_to_offer(&offer, &anchor, &expected, TenantId(1), kind, psk, 1_700_000_000, None).unwrap();
    let (h, sealed) = a.provision_attested(&envelope).unwrap();
    assert_eq!(a.secret_kind(h), Ok(SecretKind::PreSharedKey));
    // Refusals cross typed.
    assert_eq!(a.provision_attested(&envelope), Err(Error::Provisioning { why: why::USED }));
    assert_eq!(a.provision_attested(&envelope[..50]), Err(Error::Provisioning { why: why::MALFORMED }));

    // A restarted process gets the PSK back from the sealed blob alone, and it is the
    // tenant's PSK: an inline peer holding the same PSK verifies the AUTH computed with it.
    a.restart().unwrap();
    let back = a.unseal_secret(&sealed).unwrap();
    assert_eq!(a.secret_kind(back), Ok(SecretKind::PreSharedKey));
    let wrapped = wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(1), kind, psk).unwrap();
    assert_psk_auth_verifies(&mut a, back, &wrapped);
    // Another tenant's process cannot open the blob; a forged blob is refused.
    let (mut b, _) = start_process(2);
    assert_eq!(b.unseal_secret(&sealed), Err(Error::SealedBlob { reason: BlobRejection::Forged }));
    let mut forged = sealed.clone();
    forged.0[60] ^= 1;
    assert_eq!(a.unseal_secret(&forged), Err(Error::SealedBlob { reason: BlobRejection::Forged }));
}

/// That `psk` (a handle in `a`) is the tenant's PSK given in `wrapped`: an inline peer
/// holding `wrapped` verifies the AUTH that `a` computes with `psk`.
fn assert_psk_auth_verifies(a: &mut ProcessEnclave, psk: SecretHandle, wrapped: &[u8]) {
    let mut peer = start_inline(1);
    let h = sa_init(a, &mut peer);
    let peer_psk = peer.provision_secret(wrapped).unwrap();
    let input = h.auth_a(b"id");
    let mut auth = [0u8; 64];
    let (method, n) = a.auth_compute(h.ike_a, psk, AuthSpec::SharedKey, &input, &mut auth).unwrap();
    let v = peer.auth_verify(h.ike_b, PeerCredential::SharedKey(peer_psk), method.id(), &auth[..n], &input);
    assert_eq!(v.map(|v| v.method), Ok(AuthMethod::SharedKey));
}

#[test]
fn a_held_secret_sealed_over_the_rings_survives_a_restart() {
    let (mut a, _) = start_process(1);
    let psk = b"restored PSK over the rings: 77d0e3b5";
    let kind = SecretKind::PreSharedKey;
    let wrapped = wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(1), kind, psk).unwrap();
    let h = a.provision_secret(&wrapped).unwrap();
    let sealed = a.seal_secret(h).unwrap();
    let later = a.seal_secret(h).unwrap();
    assert!(later.counter() > sealed.counter());
    // Refusals cross typed: a deleted handle.
    a.delete_secret(h).unwrap();
    assert!(matches!(a.seal_secret(h), Err(Error::UnknownHandle { .. })));

    // The restarted child answers to the same ledger: the later blob opens, the one it
    // superseded does not.
    a.restart().unwrap();
    assert_eq!(a.unseal_secret(&sealed), Err(Error::SealedBlob { reason: BlobRejection::Rollback }));
    let back = a.unseal_secret(&later).unwrap();
    assert_eq!(a.secret_kind(back), Ok(kind));
    assert_psk_auth_verifies(&mut a, back, &wrapped);
    let (mut b, _) = start_process(2);
    assert_eq!(b.unseal_secret(&later), Err(Error::SealedBlob { reason: BlobRejection::Forged }));
}

#[test]
fn a_shutdown_is_clean_and_reported() {
    let (mut e, _) = start_process(3);
    let pid = e.pid().unwrap();
    // Exit status 0: the guest's way out (dropping keys, closing descriptors) stays
    // within its seccomp filter.
    assert_eq!(e.shutdown(), Some(ExitReport::Exited(0)));
    assert!(matches!(e.check(), Err(ProcessError::Died { pid: p, exit: ExitReport::Exited(0) }) if p == pid));
}

#[test]
fn dropping_the_enclave_stops_its_process() {
    let (e, _) = start_process(3);
    let pid = e.pid().unwrap();
    drop(e);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "child {pid} still exists");
}

#[test]
fn a_child_that_cannot_start_is_reported() {
    let mut s = spec();
    s.program = "/bin/false".into();
    let err = ProcessEnclave::start(s, config(1), &platform_key()).unwrap_err();
    assert!(matches!(err, Error::Process(ProcessError::Died { exit: ExitReport::Exited(1), .. })), "{err:?}");
}

/// kill(2) with SIGKILL on a child this test's `ProcessEnclave` started.
fn unsafe_kill(pid: u32) -> i32 {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: sends SIGKILL to our own child, whose pid cannot be reused before we reap it.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGKILL)
    }
}

/// Throughput of ESP encryption in batches of 32, process backend over inline, at 64 and
/// 1420 byte payloads. A measurement, not a check (the build machines share their cores):
/// `cargo test --release -p cloister-enclave --test process_backend -- --ignored --nocapture`.
#[test]
#[ignore = "measurement; run in release on an otherwise idle machine"]
fn throughput_process_over_inline() {
    use std::time::Instant;
    for size in [64usize, 1420] {
        let (mut p, _) = start_process(1);
        let mut i = start_inline(1);
        let t = tunnel(&mut p, &mut i);
        let mut area = p.take_packet_area().unwrap();
        let mut own = vec![0u8; area.as_mut_slice().len()];
        let mut lens = Vec::new();
        for k in 0..32 {
            lens.push(lay_out(area.as_mut_slice(), k * 2048, &inner(k, size)));
            lay_out(&mut own, k * 2048, &inner(k, size));
        }
        let batches = if size == 64 { 40_000 } else { 10_000 };
        let mut st = [EspStatus::NotProcessed; 32];
        let run = |e: &mut dyn Enclave, buf: &mut [u8], sa: EspSaHandle, seq0: u64, st: &mut [EspStatus]| {
            let start = Instant::now();
            let mut seq = seq0;
            let mut descs = [EspDescriptor::encrypt(sa, 0, 0, 0); 32];
            for _ in 0..batches {
                for (k, d) in descs.iter_mut().enumerate() {
                    seq += 1;
                    *d = EspDescriptor::encrypt(sa, (k * 2048) as u32, lens[k], seq);
                }
                let s = e.esp_batch(buf, &descs, st).unwrap();
                assert_eq!(s.ok, 32);
            }
            (batches * 32) as f64 / start.elapsed().as_secs_f64()
        };
        let inline_pps = run(&mut i, &mut own, t.i.outbound, 0, &mut st);
        let process_pps = run(&mut p, area.as_mut_slice(), t.p.outbound, 0, &mut st);
        let sleeps = p.guest_sleeps();
        // Pipelined: two batches in flight, on two halves of the area.
        for k in 0..32 {
            lay_out(area.as_mut_slice(), (32 + k) * 2048, &inner(k, size));
        }
        let start = Instant::now();
        let mut seq = (batches * 32) as u64; // above every number the synchronous run used
        let mut next = |half: usize| {
            let d: Vec<_> = (0..32)
                .map(|k| {
                    seq += 1;
                    EspDescriptor::encrypt(t.p.outbound, ((half * 32 + k) * 2048) as u32, lens[k], seq)
                })
                .collect();
            d
        };
        let mut queue = std::collections::VecDeque::new();
        queue.push_back(p.submit_esp(&next(0)).unwrap());
        for b in 1..batches {
            queue.push_back(p.submit_esp(&next(b % 2)).unwrap());
            let f = queue.pop_front().unwrap();
            assert_eq!(p.complete_esp(f, &mut st).unwrap().ok, 32);
        }
        let f = queue.pop_front().unwrap();
        assert_eq!(p.complete_esp(f, &mut st).unwrap().ok, 32);
        let piped_pps = (batches * 32) as f64 / start.elapsed().as_secs_f64();
        println!(
            "{size:>5} B x32: inline {inline_pps:.0} pkt/s; process {process_pps:.0} pkt/s (ratio {:.3}, \
             enclave slept {sleeps} times); pipelined {piped_pps:.0} pkt/s (ratio {:.3})",
            process_pps / inline_pps,
            piped_pps / inline_pps,
        );
    }
}

/// `establish_seal` over the rings (one crossing) does what the four calls it replaces do:
/// both blobs, in the same order of counters, the trusted bytes of this IKE SA before and
/// after (not of the others), and the SA is then cleared (a second clear-and-seal is
/// refused).
#[test]
fn establish_seal_in_one_crossing_matches_the_four_calls() {
    let (mut a, _pk) = start_process(1);
    let mut peer = start_inline(1);
    let t = tunnel(&mut a, &mut peer);
    // A second IKE SA of the same suite: the report must not count it.
    let _other = tunnel(&mut a, &mut peer);
    let before = a.memory_report().ike_sa_bytes;
    let s = a.establish_seal(t.ike_p).unwrap();
    let after = a.memory_report().ike_sa_bytes;
    assert_eq!(2 * s.ike_sa_bytes_before, before, "both SAs held the same before");
    assert_eq!(after, s.ike_sa_bytes_before + s.ike_sa_bytes_after, "only this SA shrank");
    assert!(s.ike_sa_bytes_after < s.ike_sa_bytes_before, "clear-and-seal frees SK_p* and SK_d");
    assert!(s.state.counter().unwrap() > s.sk_d.counter().unwrap());
    assert_eq!(a.clear_and_seal(t.ike_p), Err(Error::AlreadySealed));
    assert_eq!(a.ike_sa_seal_state(t.ike_p).map(|b| b.0.len()), Ok(s.state.0.len()));
    // The inline backend gives the same shape.
    let p = peer.establish_seal(t.ike_i).unwrap();
    assert_eq!((p.sk_d.0.len(), p.state.0.len()), (s.sk_d.0.len(), s.state.0.len()));
    assert_eq!(p.ike_sa_bytes_before - p.ike_sa_bytes_after, s.ike_sa_bytes_before - s.ike_sa_bytes_after);
    // An unknown handle is refused, as by clear_and_seal on the same instance (another
    // instance may answer ForeignHandle or UnknownHandle: its handle tag is random).
    let e = a.establish_seal(IkeSaHandle(0xdead_beef)).unwrap_err();
    assert_eq!(Some(e), a.clear_and_seal(IkeSaHandle(0xdead_beef)).err());
}

/// `ike_sa_respond` over the rings (one crossing: DH value, agreement, keys) gives the
/// responder the keys the initiator derives: SK payloads pass both ways. A bad peer value
/// or a wrong output length is refused as by the two calls it replaces.
#[test]
fn ike_sa_respond_in_one_crossing_agrees_with_the_initiator() {
    let (mut r, _pk) = start_process(1);
    let mut i = start_inline(1);
    let (ni, nr) = (support::nonce(&mut i), support::nonce(&mut r));
    let group = DhGroup::Curve25519;
    let params = |role| IkeSaParams {
        role,
        prf: Prf::HmacSha256,
        suite: SUITE,
        nonce_i: &ni,
        nonce_r: &nr,
        spi_i: 0x1111,
        spi_r: 0x2222,
    };
    let mut ke_i = vec![0u8; group.public_len()];
    let dh_i = i.dh_generate(group, &mut ke_i).unwrap();
    let mut ke_r = vec![0u8; group.public_len()];
    let ike_r = r.ike_sa_respond(group, &ke_i, &mut ke_r, &params(Role::Responder)).unwrap();
    assert_ne!(ke_r, vec![0u8; group.public_len()]);
    let ike_i =
        i.ike_sa_create(DhExchange { dh: dh_i, peer_public: &ke_r }, &params(Role::Initiator)).unwrap();
    assert_eq!(sk_across(&mut i, ike_i, &mut r, ike_r).unwrap(), b"INFORMATIONAL request after the restart");
    assert_eq!(sk_across(&mut r, ike_r, &mut i, ike_i).unwrap(), b"INFORMATIONAL request after the restart");
    // An all-zero X25519 value has no agreement; a short output buffer is refused.
    let mut out = vec![0u8; group.public_len()];
    let zero = vec![0u8; group.public_len()];
    let e = r.ike_sa_respond(group, &zero, &mut out, &params(Role::Responder)).unwrap_err();
    let mut i2 = start_inline(1);
    let mut o2 = vec![0u8; group.public_len()];
    assert_eq!(Some(e), i2.ike_sa_respond(group, &zero, &mut o2, &params(Role::Responder)).err());
    let mut short = vec![0u8; group.public_len() - 1];
    assert!(r.ike_sa_respond(group, &ke_i, &mut short, &params(Role::Responder)).is_err());
    assert_eq!(r.memory_report().dh_values, 0, "no DH value is left behind");
}

/// The responder's IKE_AUTH calls merged for one crossing each (`auth_verify_compute`,
/// `sk_encrypt_establish`) give what the separate calls give, on both backends, and keep
/// their order: nothing of ours is computed for a refused peer, nothing is sealed when the
/// encryption fails.
#[test]
fn merged_ike_auth_calls_match_the_separate_ones() {
    let (mut p, _pk) = start_process(5);
    let mut i = start_inline(5);
    let t = tunnel(&mut p, &mut i);
    // The AUTHs go over an exchange that has not authenticated yet.
    let h = sa_init(&mut p, &mut i);
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(5), SecretKind::PreSharedKey, b"psk!")
            .unwrap();
    let (psk_p, psk_i) = (p.provision_secret(&blob).unwrap(), i.provision_secret(&blob).unwrap());
    let theirs = h.auth_b(b"\x02\0\0\0b");
    let mine = h.auth_a(b"\x02\0\0\0a");
    // The inline side's AUTH, which the process side checks.
    let mut peer_auth = [0u8; 64];
    let (_, n) = i.auth_compute(h.ike_b, psk_i, AuthSpec::SharedKey, &theirs, &mut peer_auth).unwrap();
    let check = |data| PeerAuthCheck {
        credential: PeerCredential::SharedKey(psk_p),
        method: 2,
        auth_data: data,
        input: theirs,
    };
    let ours = OurAuth { credential: psk_p, spec: AuthSpec::SharedKey, input: mine };
    let mut out = [0u8; 64];
    let a = p.auth_verify_compute(h.ike_a, check(&peer_auth[..n]), &ours, &mut out).unwrap();
    assert_eq!(a.verified.method, AuthMethod::SharedKey);
    let (m, len) = a.ours.unwrap();
    assert_eq!((m, len), (AuthMethod::SharedKey, 32));
    i.auth_verify(h.ike_b, PeerCredential::SharedKey(psk_i), 2, &out[..len], &mine).unwrap();
    // That was our one AUTH of this exchange: the separate call now refuses, as the merged one.
    let mut separate = [0u8; 64];
    let again = p.auth_compute(h.ike_a, psk_p, AuthSpec::SharedKey, &mine, &mut separate);
    assert_eq!(again, Err(Error::ProtocolRefused { why: refusal::ALREADY_SIGNED }));
    let a = p.auth_verify_compute(h.ike_a, check(&peer_auth[..n]), &ours, &mut separate).unwrap();
    assert_eq!(a.ours, Err(Error::ProtocolRefused { why: refusal::ALREADY_SIGNED }));
    assert_eq!(separate, [0u8; 64]);

    // A refused peer: the verification's error, and our output untouched.
    let mut untouched = [0u8; 64];
    let refused = p.auth_verify_compute(h.ike_a, check(&[0; 32]), &ours, &mut untouched);
    assert_eq!(refused, Err(Error::AuthenticationFailed { method: 2 }));
    assert_eq!(untouched, [0u8; 64]);
    // Ours failing after the peer verified: its own error, beside the verification.
    let unknown = OurAuth { credential: SecretHandle(0xdead_beef), ..ours };
    let a = p.auth_verify_compute(h.ike_a, check(&peer_auth[..n]), &unknown, &mut out).unwrap();
    let separate = p.auth_compute(h.ike_a, SecretHandle(0xdead_beef), AuthSpec::SharedKey, &mine, &mut out);
    assert!(a.ours.is_err());
    assert_eq!(a.ours.err(), separate.err());

    // sk_encrypt_establish: a failed encryption seals nothing. (The tunnel's IKE SA alone
    // from here: the bytes before are its own.)
    p.ike_sa_delete(h.ike_a).unwrap();
    let payloads = b"IDr AUTH SAr2 TSi TSr";
    // IKE header and SK payload header.
    let aad_len = 32;
    let layout = SUITE.sk_layout(payloads.len());
    let mut msg = vec![0x5A; aad_len + layout.body_len(payloads.len())];
    msg[aad_len + layout.iv_len..][..payloads.len()].copy_from_slice(payloads);
    let mut short = msg[..msg.len() - 1].to_vec();
    assert!(p.sk_encrypt_establish(t.ike_p, &mut short, aad_len, payloads.len()).is_err());
    let before = p.memory_report().ike_sa_bytes;
    let s = p.sk_encrypt_establish(t.ike_p, &mut msg, aad_len, payloads.len()).unwrap();
    let r = i.sk_decrypt(t.ike_i, &mut msg, aad_len).unwrap();
    assert_eq!(&msg[r], payloads);
    assert_eq!(s.ike_sa_bytes_before, before);
    assert!(s.ike_sa_bytes_after < s.ike_sa_bytes_before);
    assert_eq!(p.clear_and_seal(t.ike_p), Err(Error::AlreadySealed));
    // The inline default gives blobs of the same shape.
    let mut msg_i = vec![0x5A; aad_len + layout.body_len(payloads.len())];
    msg_i[aad_len + layout.iv_len..][..payloads.len()].copy_from_slice(payloads);
    let si = i.sk_encrypt_establish(t.ike_i, &mut msg_i, aad_len, payloads.len()).unwrap();
    assert_eq!((si.sk_d.0.len(), si.state.0.len()), (s.sk_d.0.len(), s.state.0.len()));
}

/// ML-KEM runs inside the hardened enclave process (its seccomp filter allows what AWS-LC
/// needs): a hybrid exchange with an inline peer, each side once the initiator, then AUTH.
#[test]
fn a_hybrid_key_exchange_crosses_both_ways() {
    for (group, process_initiates) in [(DhGroup::MlKem768, true), (DhGroup::MlKem1024, false)] {
        let (mut p, _) = start_process(1);
        let mut i = start_inline(1);
        let (a, b): (&mut dyn Enclave, &mut dyn Enclave) =
            if process_initiates { (&mut p, &mut i) } else { (&mut i, &mut p) };
        let h = enclave_api::testing::ike_sa_init(
            a,
            b,
            DhGroup::Curve25519,
            Prf::HmacSha256,
            SUITE,
            (0x7111, 0x7222),
        )
        .unwrap();
        h.additional_ke(a, b, group, 1).unwrap();
        assert_eq!(sk_across(a, h.ike_a, b, h.ike_b).unwrap(), b"INFORMATIONAL request after the restart");
        let (psk_a, psk_b) = (support::psk(a, PROV_KEY), support::psk(b, PROV_KEY));
        h.authenticate_psk(a, b, psk_a, psk_b).unwrap();
    }
}
