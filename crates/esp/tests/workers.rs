//! Several workers on one outbound SA with one shared enclave ([`SharedEnclave`]): each
//! draws its batch's sequence numbers while it holds the enclave, so the numbers reach the
//! enclave in order whichever worker gets there first, and every packet is sealed once,
//! with its own number, and opens at the peer. And with a lane of the enclave each
//! (`Enclave::esp_lane`): no lock, the numbers reach the enclave in any order, and still
//! every packet is sealed once and opens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

use cloister_esp::*;
use common::*;
use enclave_core::{Cipher, Enclave, InlineEnclave, Suite};
use wire::Ecn;

const SHAPE: Shape = Shape {
    suite: Suite::aead(Cipher::AesGcm16_256),
    esn: false,
    inner_v6: false,
    outer_v6: false,
    udp: true,
};

/// A crossing that says when it reached the enclave's door and waits for a signal before
/// it takes the enclave: the test decides which worker gets in first.
struct Held<'e> {
    inner: SharedEnclave<'e, InlineEnclave>,
    arrived: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
}

impl Crossing for Held<'_> {
    type Target = InlineEnclave;

    fn with<R>(&mut self, f: impl FnOnce(&mut InlineEnclave) -> R) -> Option<R> {
        self.arrived.send(()).ok()?;
        self.go.recv().ok()?;
        self.inner.with(f)
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

/// Each packet of `batch`: its action, where its bytes start in its slot, and the bytes.
fn packets(batch: &Batch<'_>) -> Vec<(Action, usize, Vec<u8>)> {
    batch.iter().map(|(p, bytes)| (p.action, p.offset, bytes.to_vec())).collect()
}

/// The ESP sequence number of each transmitted packet, and the packets.
fn sent(packets: &[(Action, usize, Vec<u8>)]) -> Vec<(u32, Vec<u8>)> {
    packets
        .iter()
        .map(|(action, offset, bytes)| {
            let Action::Transmit(t) = action else { panic!("{action:?}") };
            let esp = t.esp_offset - offset;
            (u32::from_be_bytes(bytes[esp + 4..esp + 8].try_into().unwrap()), bytes.clone())
        })
        .collect()
}

/// What one fresh worker made of one batch of 32 (`fill` from `first`) through `crossing`.
struct Outcome {
    transmit: u32,
    dropped: u64,
    packets: Vec<(Action, usize, Vec<u8>)>,
}

fn one_batch<C: Crossing>(crossing: &mut C, sad: &Sad, spd: &Spd, first: u32) -> Outcome {
    let mut w = Worker::new(WorkerConfig::default(), 64);
    let mut area = Area::new(32);
    let mut batch = area.batch();
    fill(&mut batch, first);
    let r = w.encapsulate(crossing, sad, spd, &mut batch);
    Outcome { transmit: r.transmit, dropped: w.drops().total(), packets: packets(&batch) }
}

#[test]
fn a_worker_waiting_at_the_enclave_draws_its_numbers_when_it_gets_in() {
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2000, Instant::now());
    let Gateway { enclave, sad, spd, .. } = a;
    let enclave = &Mutex::new(enclave);
    let (sad, spd) = (&sad, &spd);
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let (late, early) = std::thread::scope(|s| {
        // Worker 1 prepares its batch first and waits at the enclave's door.
        let late = s.spawn(move || {
            let mut crossing = Held { inner: SharedEnclave::new(enclave), arrived: arrived_tx, go: go_rx };
            let o = one_batch(&mut crossing, sad, spd, 0);
            (o.transmit, o.dropped, sent(&o.packets))
        });
        // Worker 2 gets in while worker 1 waits, then lets it in.
        arrived.recv_timeout(std::time::Duration::from_secs(10)).expect("worker 1 reached the door");
        let o = one_batch(&mut SharedEnclave::new(enclave), sad, spd, 32);
        let early = (o.transmit, o.dropped, sent(&o.packets));
        go.send(()).unwrap();
        (late.join().unwrap(), early)
    });
    assert_eq!((early.0, early.1), (32, 0));
    assert_eq!((late.0, late.1), (32, 0), "the worker that waited is sealed too, nothing dropped");
    let nums = |v: &[(u32, Vec<u8>)]| v.iter().map(|(s, _)| *s).collect::<Vec<_>>();
    assert_eq!(nums(&early.2), (1..=32).collect::<Vec<_>>(), "the first in draws the first numbers");
    assert_eq!(nums(&late.2), (33..=64).collect::<Vec<_>>(), "the one that waited draws the next");

    // The peer opens all 64.
    let outers: Vec<Vec<u8>> = early.2.into_iter().chain(late.2).map(|(_, p)| p).collect();
    let (got, report) = decapsulate(&mut b, &outers);
    assert_eq!(report.deliver, 64, "{got:?}");
    let ids: BTreeSet<u32> =
        got.iter().map(|(_, inner)| u32::from_be_bytes(inner[28..32].try_into().unwrap())).collect();
    assert_eq!(ids, (0..64).collect());
}

/// One free-running worker: 40 batches of 32 packets (ids from `base`) on one SA, through
/// `crossing`; every packet must go out. Returns each packet's number and bytes.
fn seal_40<C: Crossing + ?Sized>(crossing: &mut C, sad: &Sad, spd: &Spd, base: u32) -> Vec<(u32, Vec<u8>)> {
    let mut w = Worker::new(WorkerConfig::default(), 64);
    let mut area = Area::new(32);
    let mut out = Vec::new();
    for k in 0..40 {
        let mut batch = area.batch();
        fill(&mut batch, base + k * 32);
        let r = w.encapsulate(crossing, sad, spd, &mut batch);
        assert_eq!(r.transmit, 32, "drops {:?}", w.drops());
        out.extend(sent(&packets(&batch)));
    }
    out
}

#[test]
fn two_workers_share_one_sa_and_lose_nothing() {
    // Free-running: two threads, 40 batches each, one SA, one enclave locked per crossing.
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2001, Instant::now());
    let Gateway { enclave, sad, spd, .. } = a;
    let enclave = Mutex::new(enclave);
    let run = |base: u32| seal_40(&mut SharedEnclave::new(&enclave), &sad, &spd, base);
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

#[test]
fn two_workers_with_lanes_of_their_own_seal_and_open_one_sa_at_once() {
    // As above, but each worker crosses through its own lane (no lock): the two seal at the
    // same time and their numbers reach the enclave in any order. Then two workers open
    // the packets through two lanes of the peer's enclave, every other chunk each.
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2002, Instant::now());
    let lanes = [a.enclave.esp_lane().unwrap(), a.enclave.esp_lane().unwrap()];
    let (sad, spd) = (&a.sad, &a.spd);
    let sealed: Vec<Vec<(u32, Vec<u8>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = lanes
            .into_iter()
            .zip([0u32, 40 * 32])
            .map(|(mut lane, base)| s.spawn(move || seal_40(&mut *lane, sad, spd, base)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<(u32, Vec<u8>)> = sealed.into_iter().flatten().collect();
    all.sort_by_key(|(s, _)| *s);
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (1..=2560).collect::<Vec<_>>());
    let chunks: Vec<&[(u32, Vec<u8>)]> = all.chunks(64).collect();
    let peer_lanes = [b.enclave.esp_lane().unwrap(), b.enclave.esp_lane().unwrap()];
    let sad_b = &b.sad;
    let ids: Vec<BTreeSet<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = peer_lanes
            .into_iter()
            .enumerate()
            .map(|(t, mut lane)| {
                let mine: Vec<_> = chunks.iter().skip(t).step_by(2).copied().collect();
                s.spawn(move || {
                    let mut w = Worker::new(WorkerConfig::default(), 64);
                    let mut area = Area::new(64);
                    let mut ids = BTreeSet::new();
                    for chunk in mine {
                        let mut batch = area.batch();
                        for (_, p) in chunk {
                            batch.push(Frame::Ip, OFFSET, p).unwrap();
                        }
                        let r = w.decapsulate(&mut *lane, sad_b, &mut batch);
                        assert_eq!(r.deliver as usize, chunk.len(), "drops {:?}", w.drops());
                        for (_, inner) in batch.iter() {
                            ids.insert(u32::from_be_bytes(inner[28..32].try_into().unwrap()));
                        }
                    }
                    ids
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let opened: BTreeSet<u32> = ids.into_iter().flatten().collect();
    assert_eq!(opened, (0..2560).collect(), "every packet opened once, by one lane or the other");
}

#[test]
fn a_poisoned_enclave_lock_sends_nothing() {
    // A worker that panicked holding the enclave leaves its mutex poisoned: the next batch
    // must not go out, numbered or not, and the caller learns why.
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2002, Instant::now());
    let Gateway { enclave, sad, spd, .. } = a;
    let enclave = Mutex::new(enclave);
    let _ = std::thread::scope(|s| {
        s.spawn(|| {
            let _held = enclave.lock().unwrap();
            panic!("a worker dies inside an enclave call");
        })
        .join()
    });
    assert!(enclave.is_poisoned());
    let mut crossing = SharedEnclave::new(&enclave);
    let o = one_batch(&mut crossing, &sad, &spd, 0);
    assert!(crossing.poisoned());
    assert_eq!(o.transmit, 0);
    assert_eq!(o.dropped, 32);
    assert!(o.packets.iter().all(|(a, ..)| *a == Action::Drop(DropReason::EnclaveRefused)));
}

/// A lane whose first crossing is held up while `others` runs: the stand-in for a worker
/// that lost its core between drawing its numbers and crossing.
struct Preempted<'a, F: FnOnce()> {
    lane: &'a mut dyn enclave_core::EspCrossing,
    others: Option<F>,
    crossings: usize,
}

impl<F: FnOnce() + Send> enclave_core::EspCrossing for Preempted<'_, F> {
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[enclave_core::EspDescriptor],
        status: &mut [enclave_core::EspStatus],
    ) -> enclave_core::Result<enclave_core::BatchSummary> {
        if let Some(others) = self.others.take() {
            others();
        }
        self.crossings += 1;
        self.lane.esp_crossing(packets, descriptors, status)
    }
}

#[test]
fn a_worker_preempted_past_the_enclave_window_sends_under_fresh_numbers() {
    // Worker 1 draws 1..=32, then, before it crosses, worker 2 seals 70 batches (33..=2272)
    // through its own lane: 1..=32 now lie further below the enclave's highest number than
    // its window (2048) reaches, so it refuses them as stale, sealing nothing. Worker 1
    // draws fresh numbers and crosses once more; every packet of both workers opens at the
    // peer, and 1..=32 never go out.
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, SHAPE, 0x2003, Instant::now());
    let (mut l1, mut l2) = (a.enclave.esp_lane().unwrap(), a.enclave.esp_lane().unwrap());
    let (sad, spd) = (&a.sad, &a.spd);
    let mut others_sent = Vec::new();
    let mut w1 = Worker::new(WorkerConfig::default(), 64);
    let mut area = Area::new(32);
    let mut batch = area.batch();
    fill(&mut batch, 1_000_000);
    let mut held = Preempted {
        lane: &mut *l1,
        others: Some(|| {
            let mut w2 = Worker::new(WorkerConfig::default(), 64);
            let mut area = Area::new(32);
            for k in 0..70 {
                let mut batch = area.batch();
                fill(&mut batch, k * 32);
                assert_eq!(w2.encapsulate(&mut *l2, sad, spd, &mut batch).transmit, 32);
                others_sent.extend(sent(&packets(&batch)));
            }
        }),
        crossings: 0,
    };
    let r = w1.encapsulate(&mut held, sad, spd, &mut batch);
    assert_eq!((r.transmit, r.crossings, held.crossings), (32, 2, 2), "drops {:?}", w1.drops());
    assert_eq!(w1.drops().total(), 0);
    let late = sent(&packets(&batch));
    assert_eq!(late.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (2273..=2304).collect::<Vec<_>>());
    let c = a.enclave.counters();
    assert_eq!(c.esp_status(enclave_core::EspStatus::SeqStale), 32);
    assert_eq!(c.esp_status(enclave_core::EspStatus::Ok), 2272);

    // The peer opens all 2272 in the order they went out; 1..=32 are a gap it never sees.
    let all: Vec<Vec<u8>> = others_sent.into_iter().chain(late).map(|(_, p)| p).collect();
    for chunk in all.chunks(64) {
        let (out, report) = decapsulate(&mut b, chunk);
        assert_eq!(
            report.deliver as usize,
            chunk.len(),
            "{:?}",
            out.iter().map(|(a, _)| a).collect::<Vec<_>>()
        );
    }
    assert_eq!(b.worker.drops().total(), 0);
}
