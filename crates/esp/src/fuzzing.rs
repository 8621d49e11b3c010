//! Fuzzing entry points (built by cargo-fuzz with `--cfg fuzzing`): arbitrary outer packets
//! through [`Worker::decapsulate`] with the inline enclave and a few SAs.
//!
//! The keys come from a real IKE derivation between two inline enclaves (a "peer" that
//! encrypts and the "local" gateway that decrypts), done once per process. Each input gets a
//! fresh SAD, so replay windows do not carry over between inputs. The first byte picks a
//! mode:
//!
//! * 0: the rest is a whole outer IP packet;
//! * 1: the rest is a UDP payload from a socket (keepalive / IKE / ESP classification);
//! * 2: byte 1 picks an SA and the rest is an ESP *plaintext* (inner packet, padding, pad
//!   length, next header, all arbitrary), which the peer encrypts and wraps in a valid outer
//!   header, so the fuzzer reaches everything after authentication; the packet is offered
//!   twice in one batch, and the second copy must never be delivered.
//!
//! With bit 7 of that byte set, every SA starts in a spell of ICV failures, so that its
//! ESN SAs keep a packet and retry it with higher halves (RFC 4303 A3): no packet may be
//! left undecided, and a replay still never gets through.
#![allow(clippy::expect_used, clippy::unwrap_used)] // Harness setup, not a packet path.

use core::cell::RefCell;
use core::net::{IpAddr, SocketAddr};
use std::time::Instant;

use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
use enclave_core::provision::wrap_secret;
use enclave_core::{
    ChildSaParams, Cipher, DhGroup, Enclave, EnclaveConfig, EspDescriptor, EspSaHandle, EspStatus,
    InlineEnclave, Integ, Limits, Prf, ProvisioningKey, Role, SecretKind, Suite, TenantId,
};
use wire::{Ecn, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket, UdpRepr};

use crate::{Action, Batch, Encapsulation, Frame, Packet, SaConfig, Sad, Worker, WorkerConfig};

const SLOT: usize = 4096;
const PROV_KEY: [u8; 32] = [7; 32];
const OFFSET: usize = 128;

struct Sa {
    spi: u32,
    suite: Suite,
    esn: bool,
    v6: bool,
    udp: bool,
    /// The peer's outbound handle (encrypts) and ours (decrypts).
    peer_out: EspSaHandle,
    local_in: EspSaHandle,
}

struct State {
    peer: InlineEnclave,
    local: InlineEnclave,
    sas: Vec<Sa>,
    worker: Worker,
    /// Sequence numbers the peer has used (they must rise, and stay below 2^32 so that a
    /// fresh window infers them, with or without ESN).
    seq: u64,
    area: Vec<u8>,
    packets: Vec<Packet>,
}

fn start() -> InlineEnclave {
    let config = EnclaveConfig {
        tenant: TenantId(1),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let platform = SoftwareAttestation::generate_platform_key().expect("platform key");
    let att = SoftwareAttestation::new(
        &platform,
        CodeIdentity::Bytes(b"fuzz".to_vec()),
        &config.measured_bytes(enclave_core::Backend::Inline),
    )
    .expect("attestation");
    InlineEnclave::start(config, Box::new(att)).expect("enclave")
}

fn setup() -> State {
    let (mut peer, mut local) = (start(), start());
    // Each side names a nonce its own enclave issued, and each child SA fresh ones.
    let nonce = |e: &mut InlineEnclave| {
        let mut n = [0u8; enclave_core::IKE_NONCE_LEN];
        e.ike_nonces(&mut n).map(|()| n)
    };
    // IKE_SA_INIT and IKE_AUTH (PSK) as the engine drives them: child SAs need both.
    let ike_suite = Suite::aead(Cipher::AesGcm16_256);
    let h = enclave::testing::ike_sa_init(
        &mut peer,
        &mut local,
        DhGroup::Curve25519,
        Prf::HmacSha256,
        ike_suite,
        (1, 2),
    )
    .expect("ike");
    let psk = |e: &mut InlineEnclave| {
        let blob = wrap_secret(
            &ProvisioningKey::from_bytes(PROV_KEY),
            e.tenant(),
            SecretKind::PreSharedKey,
            b"fuzz",
        )
        .expect("wrap");
        e.provision_secret(&blob).expect("psk")
    };
    let (psk_p, psk_l) = (psk(&mut peer), psk(&mut local));
    h.authenticate_psk(&mut peer, &mut local, psk_p, psk_l).expect("auth");
    let (ike_p, ike_l) = (h.ike_a, h.ike_b);
    let shapes = [
        (0x1001, Suite::aead(Cipher::AesGcm16_128), false, false, false),
        (0x1002, Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128), true, false, true),
        (0x1003, Suite::aead(Cipher::ChaCha20Poly1305), true, true, false),
        (0x1004, Suite::cbc(Cipher::AesCbc128, Integ::HmacSha512_256), false, true, true),
    ];
    let mut sas = Vec::new();
    for (spi, suite, esn, v6, udp) in shapes {
        let (ni, nr) = (nonce(&mut peer).expect("nonce"), nonce(&mut local).expect("nonce"));
        let child = |role, spi_inbound, spi_outbound| ChildSaParams {
            role,
            suite,
            esn,
            nonce_i: &ni,
            nonce_r: &nr,
            spi_inbound,
            spi_outbound,
        };
        // Peer (initiator) sends with `spi`, which the local gateway chose.
        let p = peer
            .child_sa_create(ike_p, None, None, &child(Role::Initiator, spi + 0x100, spi))
            .expect("child");
        let l = local
            .child_sa_create(ike_l, None, None, &child(Role::Responder, spi, spi + 0x100))
            .expect("child");
        sas.push(Sa { spi, suite, esn, v6, udp, peer_out: p.outbound, local_in: l.inbound });
    }
    State {
        peer,
        local,
        sas,
        worker: Worker::new(WorkerConfig::default(), 4),
        seq: 0,
        area: vec![0u8; 2 * SLOT],
        packets: vec![Packet::EMPTY; 2],
    }
}

fn addrs(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xa]), IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xb]))
    } else {
        (IpAddr::from([198, 18, 0, 1]), IpAddr::from([198, 18, 0, 2]))
    }
}

fn sad(sas: &[Sa]) -> Sad {
    let mut sad = Sad::new();
    for sa in sas {
        let (peer, me) = addrs(sa.v6);
        let mut c = SaConfig::new(sa.spi, sa.local_in, sa.suite, me, peer);
        c.esn = sa.esn;
        if sa.udp {
            c.encapsulation = Encapsulation::Udp { local_port: 4500, remote_port: 4500 };
        }
        // Inner traffic of either family is admitted by the SA's selectors.
        c.local_selectors.push(crate::TrafficSelector::addresses(crate::AddressRange::ANY_V4));
        c.local_selectors.push(crate::TrafficSelector::addresses(crate::AddressRange::ANY_V6));
        c.remote_selectors = c.local_selectors.clone();
        sad.add_inbound(c, Instant::now()).expect("sa");
    }
    sad
}

/// Builds an authentic outer packet around `plaintext` on `sa`; `None` if it cannot.
fn seal(state: &mut State, which: usize, plaintext: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let sa = state.sas.get(which)?;
    let (head, icv) = sa.suite.esp_overhead();
    let align = sa.suite.esp_payload_align();
    let len = (plaintext.len() / align * align).max(align);
    let esp_len = head + len + icv;
    let (src, dst) = addrs(sa.v6);
    let ip = if sa.v6 { 40 } else { 20 };
    let udp = if sa.udp { 8 } else { 0 };
    out.clear();
    out.resize(ip + udp + esp_len, 0);
    let proto = if sa.udp { IpProtocol::UDP } else { IpProtocol::ESP };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            protocol: proto,
            payload_len: udp + esp_len,
            ttl: 64,
            dscp: 0,
            ecn: Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut out[..]))
        .ok()?,
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            next_header: proto,
            payload_len: udp + esp_len,
            hop_limit: 64,
            dscp: 0,
            ecn: Ecn::Ce,
            flow_label: 0,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut out[..]))
        .ok()?,
        _ => return None,
    }
    if sa.udp {
        UdpRepr { src_port: 4500, dst_port: 4500 }
            .emit_header(&mut UdpPacket::new_unchecked(&mut out[ip..]), esp_len)
            .ok()?;
    }
    let body = ip + udp + head;
    let n = plaintext.len().min(len);
    out.get_mut(body..body + n)?.copy_from_slice(plaintext.get(..n)?);
    state.seq += 1;
    let d = EspDescriptor::encrypt(
        sa.peer_out,
        u32::try_from(ip + udp).ok()?,
        u32::try_from(esp_len).ok()?,
        state.seq,
    );
    let mut st = [EspStatus::NotProcessed];
    state.peer.esp_batch(out, &[d], &mut st).ok()?;
    (st[0] == EspStatus::Ok).then_some(())
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// One fuzz input: see the module documentation.
pub fn decap_input(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    STATE.with(|cell| {
        let mut guard = cell.borrow_mut();
        let state = guard.get_or_insert_with(setup);
        let sad = sad(&state.sas);
        if mode & 0x80 != 0 {
            for sa in &state.sas {
                if let Some(inbound) = sad.inbound(sa.spi) {
                    inbound.runtime().record_auth(false, u32::MAX);
                }
            }
        }
        let mut sealed = Vec::new();
        let frames: [(Frame, &[u8]); 2] = match mode % 4 {
            0 => [(Frame::Ip, rest), (Frame::Ip, &[])],
            3 => {
                let (remote, local) = addrs(false);
                [(Frame::Esp { remote, local, ecn: Ecn::from_bits(mode >> 2) }, rest), (Frame::Ip, &[])]
            }
            1 => {
                let remote = SocketAddr::new(addrs(false).0, 4500);
                let local = SocketAddr::new(addrs(false).1, 4500);
                let ecn = Ecn::from_bits(mode >> 2);
                [(Frame::Udp { remote, local, ecn }, rest), (Frame::Ip, &[])]
            }
            _ => {
                let Some((&which, plaintext)) = rest.split_first() else { return };
                let which = usize::from(which) % state.sas.len();
                if seal(state, which, plaintext, &mut sealed).is_none() {
                    return;
                }
                [(Frame::Ip, &sealed), (Frame::Ip, &sealed)]
            }
        };
        let State { local, worker, area, packets, .. } = state;
        // Cannot fail: `setup` sized `area` as `packets.len()` slots of SLOT bytes.
        let mut batch = Batch::new(area, SLOT, packets).expect("batch");
        for (frame, bytes) in frames {
            if bytes.is_empty() || bytes.len() > SLOT - OFFSET {
                continue;
            }
            // Cannot fail: the length was checked just above and the batch has two slots
            // for at most two frames.
            batch.push(frame, OFFSET, bytes).expect("fits");
        }
        worker.decapsulate(local, &sad, &mut batch);
        let mut delivered = 0;
        for (p, bytes) in batch.iter() {
            match p.action {
                Action::Deliver { .. } => {
                    delivered += 1;
                    // Whatever is delivered is one whole, well-formed IP packet.
                    let ok = match bytes.first().map(|b| b >> 4) {
                        Some(4) => Ipv4Packet::new_checked(bytes)
                            .is_ok_and(|v| v.verify_checksum() && usize::from(v.total_len()) == bytes.len()),
                        Some(6) => Ipv6Packet::new_checked(bytes)
                            .is_ok_and(|v| usize::from(v.payload_len()) + 40 == bytes.len()),
                        _ => false,
                    };
                    assert!(ok, "delivered a malformed packet");
                }
                Action::Drop(_) | Action::Ike { .. } | Action::Keepalive { .. } => {}
                other => panic!("unexpected action {other:?} on decapsulation"),
            }
        }
        assert!(delivered <= 1, "a replayed packet was delivered");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness reaches past authentication: a well-formed sealed plaintext is delivered
    /// once and its copy is a replay. (Runs only under `--cfg fuzzing`.)
    #[test]
    fn sealed_inputs_are_delivered_once() {
        let inner = include_bytes!("../tests/vectors/gcm128-v4.inner.bin");
        let pad = (16 - (inner.len() + 2) % 16) % 16;
        let mut plaintext = inner.to_vec();
        // ECT(0), so that the CE the IPv6 SAs' outer headers carry is not a drop (RFC 6040).
        let mut v = Ipv4Packet::new_unchecked(&mut plaintext[..]);
        v.set_ecn(Ecn::Ect0);
        v.fill_checksum();
        plaintext.extend((1..=u8::try_from(pad).unwrap()).collect::<Vec<_>>());
        plaintext.extend([u8::try_from(pad).unwrap(), 4]);
        for which in 0..4u8 {
            let input = [&[2, which][..], &plaintext].concat();
            decap_input(&input);
            STATE.with(|cell| {
                let guard = cell.borrow();
                let state = guard.as_ref().unwrap();
                let actions: Vec<_> = state.packets.iter().map(|p| p.action).collect();
                assert!(matches!(actions[0], Action::Deliver { .. }), "SA {which}: {actions:?}");
                assert_eq!(actions[1], Action::Drop(crate::DropReason::Replay));
            });
        }
    }
}
