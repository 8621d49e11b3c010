//! Fuzz entry: arbitrary bytes as the gateway's side of the shared memory, served by the
//! guest's ring loop over the mock enclave's in-memory SA table.
//!
//! Input layout: `u32 stamped | u32 completion tail | request slots (16 x 64 B) | descriptor
//! table (64 x 32 B) | packet area bytes (4 KiB) | call area bytes ...`, each part cut short
//! where the input ends. The first `stamped` slots get the stamps an honest gateway writes
//! when it publishes them; the others keep whatever stamp bytes the input gave them. The
//! completion tail is stored after the guest started, as a gateway that lies about it would.
//! Nothing may panic; every slot consumed gets a completion; the guest
//! never writes the descriptor table, writes status entries only inside the runs of batches
//! it accepted, and leaves the packet area untouched unless a trusted batch ran.

use super::desc::{self, Request};
use super::guest::Server;
use super::layout::{Geometry, Layout, COMPLETION_SLOT, DESCRIPTOR_BYTES, REQUEST_SLOT, STATUS_BYTES};
use super::mock::MockEnclave;
use super::ring;
use super::shm::SharedMem;
use super::validate;
use enclave_api::alg::{Cipher, Role, Suite};
use enclave_api::handle::IkeSaHandle;
use enclave_api::ike::ChildSaParams;
use enclave_api::Enclave;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

const GEOMETRY: Geometry = Geometry { slots: 16, descriptors: 64, packet_len: 4096, call_len: 64 << 10 };
/// Descriptors per trusted call (batches above it are refused whole).
const MAX_BATCH: usize = 16;
/// What every status entry holds before the guest runs.
const UNWRITTEN: u8 = 0xee;

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
    let stamped = word(0);
    let comp_tail = word(4);
    ring::reset(shm, &layout.requests, 0);
    ring::reset(shm, &layout.completions, 0);
    let slots_len = GEOMETRY.slots as usize * REQUEST_SLOT;
    let table_len = GEOMETRY.descriptors as usize * DESCRIPTOR_BYTES;
    let rest = data.get(8..).unwrap_or(&[]);
    let (slots, rest) = rest.split_at(rest.len().min(slots_len));
    shm.write_from(layout.requests.slots, slots);
    let (table, rest) = rest.split_at(rest.len().min(table_len));
    shm.write_from(layout.descriptors, table);
    let (pkts, call) = rest.split_at(rest.len().min(GEOMETRY.packet_len as usize));
    shm.write_from(layout.packets, pkts);
    shm.write_from(layout.call, call);
    let statuses = GEOMETRY.descriptors as usize * STATUS_BYTES;
    shm.write_from(layout.statuses, &vec![UNWRITTEN; statuses]);
    // Publishing stores only the stamps: the slots keep the input's bytes.
    if let Ok(mut p) = ring::Producer::<REQUEST_SLOT>::new(shm.clone(), layout.requests) {
        p.publish(stamped.min(GEOMETRY.slots));
    }

    let mut enclave = MockEnclave::new(MAX_BATCH);
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
    let _ = enclave.esp_sa_delete(enclave_api::handle::EspSaHandle(0x4200_0000));

    let Ok(mut server) = Server::new(shm.clone(), layout, MAX_BATCH) else { return };
    let Ok(completions) = ring::Consumer::<COMPLETION_SLOT>::new(shm.clone(), layout.completions) else {
        return;
    };
    if let Some(a) = shm.atomic_u32(layout.completions.tail) {
        a.store(comp_tail, Ordering::Release);
    }
    let before = read(shm, layout.packet_range().start, layout.packet_range().len());
    let n = server.poll(&mut enclave);
    let batches = enclave.counters().batches;
    // Slots were consumed only in stamp order and while completions had room, and each
    // consumed slot got its completion.
    assert!(n <= GEOMETRY.slots);
    let published = completions.available(u32::MAX);
    assert_eq!(published, n, "one completion per consumed slot");
    if batches == 0 {
        // No trusted batch ran: the packet area must be exactly as the gateway left it.
        assert!(before == read(shm, layout.packets, before.len()), "packet area changed without a batch");
    }
    assert!(
        read(shm, layout.descriptors, table_len).get(..table.len()) == Some(table),
        "the guest wrote the descriptor table"
    );
    // Status entries outside the runs of accepted batches are untouched.
    let mut may_write = vec![false; GEOMETRY.descriptors as usize];
    for i in 0..n as usize {
        // From the mapping, not the input: a slot the input cuts short is zero-padded there.
        let mut slot = [0u8; REQUEST_SLOT];
        shm.read_into(layout.requests.slots + i * REQUEST_SLOT, &mut slot);
        if let Ok(Request::Batch(b)) = desc::decode_request(&slot) {
            if validate::validate_batch(&b, GEOMETRY.descriptors, MAX_BATCH as u32).is_ok() {
                let run = b.first as usize..b.first as usize + b.count as usize;
                may_write.get_mut(run).into_iter().flatten().for_each(|w| *w = true);
            }
        }
    }
    let st = read(shm, layout.statuses, statuses);
    for (i, e) in st.chunks_exact(STATUS_BYTES).enumerate() {
        assert!(
            may_write.get(i) == Some(&true) || e == [UNWRITTEN; STATUS_BYTES],
            "status entry {i} written"
        );
    }
    let _ = server.poll(&mut enclave);
}

fn read(shm: &SharedMem, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    shm.read_into(off, &mut v);
    v
}
