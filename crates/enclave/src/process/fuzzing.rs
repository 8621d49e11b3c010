//! Fuzz entry: arbitrary bytes as the gateway's side of the shared memory, served by the
//! guest's ring loop over the mock enclave's in-memory SA table.
//!
//! Input layout: `u32 head | u32 completion tail | request slots (16 x 64 B) | packet
//! area bytes ... | call area bytes ...`, each part cut short where the input ends. Nothing
//! may panic; every slot consumed must get a completion; a refused slot must leave the
//! packet area untouched.

use super::guest::Server;
use super::layout::{Geometry, Layout, REQUEST_SLOT};
use super::mock::MockEnclave;
use super::ring;
use super::shm::SharedMem;
use crate::api::alg::{Cipher, Role, Suite};
use crate::api::handle::IkeSaHandle;
use crate::api::ike::ChildSaParams;
use crate::api::Enclave;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

const GEOMETRY: Geometry = Geometry { slots: 16, packet_len: 4096, call_len: 64 << 10 };

struct Fixture {
    shm: Arc<SharedMem>,
    layout: Layout,
}

fn fixture() -> Option<&'static Mutex<Fixture>> {
    static F: OnceLock<Option<Mutex<Fixture>>> = OnceLock::new();
    F.get_or_init(|| {
        let layout = Layout::new(GEOMETRY).ok()?;
        let shm = Arc::new(SharedMem::create(layout.total).ok()?);
        Some(Mutex::new(Fixture { shm, layout }))
    })
    .as_ref()
}

/// Runs one input through the guest's validation and dispatch.
pub fn ring_input(data: &[u8]) {
    let Some(f) = fixture() else { return };
    let Ok(f) = f.lock() else { return };
    let (shm, layout) = (&f.shm, f.layout);
    shm.zero(0, layout.total);
    let word = |i: usize| data.get(i..i + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let head = word(0);
    let comp_tail = word(4);
    ring::reset(shm, &layout.requests, 0);
    ring::reset(shm, &layout.completions, 0);
    let slots_len = GEOMETRY.slots as usize * REQUEST_SLOT;
    let rest = data.get(8..).unwrap_or(&[]);
    let (slots, rest) = rest.split_at(rest.len().min(slots_len));
    shm.write_from(layout.requests.slots, slots);
    let (pkts, call) = rest.split_at(rest.len().min(GEOMETRY.packet_len as usize));
    shm.write_from(layout.packets, pkts);
    shm.write_from(layout.call, call);
    if let Some(a) = shm.atomic_u32(layout.requests.head) {
        a.store(head, Ordering::Release);
    }
    if let Some(a) = shm.atomic_u32(layout.completions.tail) {
        a.store(comp_tail, Ordering::Release);
    }

    let mut enclave = MockEnclave::new(8);
    let params = ChildSaParams {
        role: Role::Initiator,
        suite: Suite::aead(Cipher::AesGcm16_128),
        esn: false,
        nonce_i: &[0; 16],
        nonce_r: &[0; 16],
        spi_inbound: 1,
        spi_outbound: 2,
    };
    // Two live pairs and one deleted SA, so forged, stale and valid handles all occur.
    for _ in 0..2 {
        let _ = enclave.child_sa_create(IkeSaHandle(0), None, None, &params);
    }
    let _ = enclave.esp_sa_delete(crate::api::handle::EspSaHandle(0x4200_0000));

    let Ok(mut server) = Server::new(shm.clone(), layout, 8) else { return };
    let before = snapshot(shm, &layout);
    let n = server.poll(&mut enclave);
    let batches = enclave.counters().batches;
    // Slots were consumed only if the head was honest and completions had room.
    assert!(n <= GEOMETRY.slots);
    if batches == 0 {
        // No trusted batch ran: the packet area must be exactly as the gateway left it.
        assert!(before == snapshot(shm, &layout), "packet area changed without a batch");
    }
    let _ = server.poll(&mut enclave);
}

fn snapshot(shm: &SharedMem, layout: &Layout) -> Vec<u8> {
    let mut v = vec![0u8; layout.packet_range().len()];
    shm.read_into(layout.packets, &mut v);
    v
}
