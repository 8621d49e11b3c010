//! Several workers on one outbound SA with one shared enclave, locked per crossing
//! ([`SharedEnclave`]): their batches draw sequence numbers from the SA's counter and may
//! reach the enclave out of order. Every packet must still be sealed once, with its own
//! number, and open at the peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave::{BatchSummary, Cipher, EspDescriptor, EspStatus, InlineEnclave, Suite};
use wire::Ecn;

const SHAPE: Shape = Shape {
    suite: Suite::aead(Cipher::AesGcm16_256),
    esn: false,
    inner_v6: false,
    outer_v6: false,
    udp: true,
};

/// A crossing that waits for a signal before it takes the enclave: the test decides which
/// worker's batch reaches the enclave first.
struct Held<'e> {
    inner: SharedEnclave<'e, InlineEnclave>,
    go: mpsc::Receiver<()>,
}

impl Crossing for Held<'_> {
    fn run_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Option<BatchSummary> {
        self.go.recv().ok()?;
        self.inner.run_batch(packets, descriptors, status)
    }
}

/// 32 inner packets whose payload starts with their index `first + k`.
fn fill(batch: &mut Batch<'_>, first: u32) {
    let (src, dst) = inner_hosts(false);
    for k in 0..32 {
        let mut p = udp_packet(src, dst, 100, 64, Ecn::NotEct, true);
        p[28..32].copy_from_slice(&(first + k).to_be_bytes());
        batch.push(Frame::Ip, OFFSET, &p).unwrap();
    }
}

/// The ESP sequence number of each transmitted packet, and the packets.
fn sent(batch: &Batch<'_>) -> Vec<(u32, Vec<u8>)> {
    batch
        .iter()
        .map(|(p, bytes)| {
            let Action::Transmit(t) = p.action else { panic!("{:?}", p.action) };
            let esp = t.esp_offset - p.offset;
            (u32::from_be_bytes(bytes[esp + 4..esp + 8].try_into().unwrap()), bytes.to_vec())
        })
        .collect()
}

#[test]
fn a_batch_that_crosses_late_is_still_sealed_with_its_own_numbers() {
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    let id = tunnel(&mut a, &mut b, SHAPE, 0x2000, Instant::now());
    let Gateway { enclave, sad, spd, .. } = a;
    let enclave = &Mutex::new(enclave);
    let (sad, spd) = (&sad, &spd);
    let (tx, rx) = mpsc::channel();
    let (first, second) = std::thread::scope(|s| {
        // Worker 1 numbers its batch (1..=32) and then waits at the enclave's door.
        let late = s.spawn(move || {
            let mut w = Worker::new(WorkerConfig::default(), 64);
            let mut area = Area::new(32);
            let mut batch = area.batch();
            fill(&mut batch, 0);
            let mut crossing = Held { inner: SharedEnclave::new(enclave), go: rx };
            let r = w.encapsulate(&mut crossing, sad, spd, &mut batch);
            (r.transmit, w.drops().total(), sent(&batch))
        });
        // Worker 2 numbers 33..=64 once worker 1 has drawn its numbers, and crosses first.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let out = sad.outbound(id).unwrap();
        while out.runtime().peek_seq() < 33 {
            assert!(Instant::now() < deadline, "worker 1 never numbered its batch");
            std::thread::yield_now();
        }
        let mut w = Worker::new(WorkerConfig::default(), 64);
        let mut area = Area::new(32);
        let mut batch = area.batch();
        fill(&mut batch, 32);
        let r = w.encapsulate(&mut SharedEnclave::new(enclave), sad, spd, &mut batch);
        let early = (r.transmit, w.drops().total(), sent(&batch));
        tx.send(()).unwrap();
        (late.join().unwrap(), early)
    });
    assert_eq!((first.0, first.1), (32, 0), "the late batch is sealed, nothing dropped");
    assert_eq!((second.0, second.1), (32, 0));
    let seqs: BTreeSet<u32> = first.2.iter().chain(&second.2).map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=64).collect(), "each number once");
    assert!(first.2.iter().all(|(s, _)| *s <= 32), "the late batch kept the numbers it drew");

    // The peer opens all 64, in the order they arrived (late batch last).
    let outers: Vec<Vec<u8>> = second.2.into_iter().chain(first.2).map(|(_, p)| p).collect();
    let (got, report) = decapsulate(&mut b, &outers);
    assert_eq!(report.deliver, 64, "{got:?}");
    let ids: BTreeSet<u32> =
        got.iter().map(|(_, inner)| u32::from_be_bytes(inner[28..32].try_into().unwrap())).collect();
    assert_eq!(ids, (0..64).collect());
}

#[test]
fn two_workers_share_one_sa_and_lose_nothing() {
    // Free-running: two threads, 40 batches each, one SA, one enclave locked per crossing.
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2001, Instant::now());
    let Gateway { enclave, sad, spd, .. } = a;
    let enclave = Mutex::new(enclave);
    let run = |base: u32| {
        let mut w = Worker::new(WorkerConfig::default(), 64);
        let mut area = Area::new(32);
        let mut out = Vec::new();
        for k in 0..40 {
            let mut batch = area.batch();
            fill(&mut batch, base + k * 32);
            let r = w.encapsulate(&mut SharedEnclave::new(&enclave), &sad, &spd, &mut batch);
            assert_eq!(r.transmit, 32, "drops {:?}", w.drops());
            out.extend(sent(&batch));
        }
        out
    };
    let (x, y) = std::thread::scope(|s| {
        let t = s.spawn(|| run(0));
        let y = run(40 * 32);
        (t.join().unwrap(), y)
    });
    let seqs: BTreeSet<u32> = x.iter().chain(&y).map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 2560);
    assert_eq!(seqs, (1..=2560).collect());
    // In sequence order, as a network that does not reorder would deliver them.
    let mut all: Vec<(u32, Vec<u8>)> = x.into_iter().chain(y).collect();
    all.sort_by_key(|(s, _)| *s);
    let outers: Vec<Vec<u8>> = all.into_iter().map(|(_, p)| p).collect();
    let mut delivered = 0;
    for chunk in outers.chunks(64) {
        delivered += decapsulate(&mut b, chunk).1.deliver;
    }
    assert_eq!(delivered, 2560);
    assert_eq!(b.worker.drops().total(), 0);
}
