//! `bench/esp-inmem.sh`: packets/s on one core through the whole `esp` path (policy and SA
//! lookup, sequence numbers, anti-replay, one inline-enclave crossing per batch of 32,
//! tunnel-mode encapsulation / decapsulation) against a raw AES-256-GCM seal loop of the
//! same crypto library (ring) over the same payload sizes, in the same run, interleaved
//! round by round so machine noise hits both sides. Not a test: run it through the script.
//!
//! Usage: `inmem [ROUNDS]` (default 7). Prints a table of medians and min–max, then
//! `esp inmem ratio 64B=<r> 1420B=<r>` (the lower of the encapsulation and decapsulation
//! median ratios over raw seal). Rates count the time inside the `esp` calls; a second table
//! also counts the copy of each packet into its batch slot; a third splits the time per
//! packet into the `esp` path's own work (the same calls through [`NullCrossing`], which
//! does no cryptography) and the rest (enclave and AEAD). A fourth: one SA carried by one
//! and by two workers sharing one inline enclave, with the mutex held for every whole call
//! and as `SharedEnclave` holds it (packets/s over wall time).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]
#![allow(missing_docs, unreachable_pub)]

#[path = "../tests/common/mod.rs"]
mod common;

use cloister_esp::{Action, Frame, DEFAULT_WINDOW, MAX_WINDOW};
use common::*;
use enclave_core::{Cipher, Enclave, Suite};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wire::Ecn;

const SIZES: [usize; 5] = [64, 256, 512, 1024, 1420];
const BATCH: usize = 32;

fn packets_per_round(size: usize) -> usize {
    if size <= 512 {
        BATCH * 4096
    } else {
        BATCH * 1024
    }
}

struct Sample {
    /// Packets/s counting only the time inside `encapsulate` / `decapsulate`.
    encap: f64,
    decap: f64,
    /// Packets/s over the whole loop, the copy of each packet into its batch slot included
    /// (in the gateway the I/O layer's read or receive puts it there).
    encap_fill: f64,
    decap_fill: f64,
    raw: f64,
    /// Packets/s inside the calls with a crossing that seals and opens nothing
    /// ([`NullCrossing`]): the `esp` path's own work.
    encap_alone: f64,
    decap_alone: f64,
}

/// A crossing that marks every descriptor done and does no cryptography: with it the `esp`
/// calls do all their own work (lookups, numbering, replay check and commit, headers,
/// trailers), which measures that work alone. Like the enclave it writes the ESP header
/// and IV of an ENCRYPT (SPI `spi`, the sequence number); its "ciphertext" is plaintext,
/// so only its own output can be decapsulated through it.
struct NullCrossing {
    spi: u32,
}

impl enclave_core::EspCrossing for NullCrossing {
    fn esp_crossing(
        &mut self,
        packets: &mut [u8],
        descriptors: &[enclave_core::EspDescriptor],
        status: &mut [enclave_core::EspStatus],
    ) -> enclave_core::Result<enclave_core::BatchSummary> {
        for d in descriptors.iter().filter(|d| d.opcode == enclave_core::EspOpcode::ENCRYPT) {
            let at = d.offset as usize;
            packets[at..at + 4].copy_from_slice(&self.spi.to_be_bytes());
            packets[at + 4..at + 8].copy_from_slice(&(d.seq as u32).to_be_bytes());
            packets[at + 8..at + 16].copy_from_slice(&d.seq.to_be_bytes());
        }
        status.fill(enclave_core::EspStatus::Ok);
        Ok(enclave_core::BatchSummary { ok: descriptors.len() as u32, failed: 0 })
    }
}

/// The SPI of the measured tunnel (A to B).
const SPI: u32 = 0x1000;

/// Encapsulates `n` packets of `inner` on `w` through `crossing`, a batch at a time:
/// packets/s over the time inside `encapsulate`, and over the whole loop (the copy into
/// the batch slots included).
fn timed_encap<E: enclave_core::EspCrossing>(
    w: &mut cloister_esp::Worker,
    crossing: &mut E,
    sad: &cloister_esp::Sad,
    spd: &cloister_esp::Spd,
    area: &mut Area,
    inner: &[u8],
    n: usize,
) -> (f64, f64) {
    let mut inside = Duration::ZERO;
    let start = Instant::now();
    for _ in 0..n / BATCH {
        let mut batch = batch_of(area, std::iter::repeat_n(inner, BATCH));
        let t = Instant::now();
        let r = w.encapsulate(crossing, sad, spd, &mut batch);
        inside += t.elapsed();
        assert_eq!(r.transmit as usize, BATCH);
        std::hint::black_box(&batch);
    }
    (n as f64 / inside.as_secs_f64(), n as f64 / start.elapsed().as_secs_f64())
}

/// Decapsulates `outers` on `w` through `crossing`, as [`timed_encap`].
fn timed_decap<E: enclave_core::EspCrossing>(
    w: &mut cloister_esp::Worker,
    crossing: &mut E,
    sad: &cloister_esp::Sad,
    area: &mut Area,
    outers: &[Vec<u8>],
) -> (f64, f64) {
    let mut inside = Duration::ZERO;
    let start = Instant::now();
    for chunk in outers.chunks(BATCH) {
        let mut batch = batch_of(area, chunk);
        let t = Instant::now();
        let r = w.decapsulate(crossing, sad, &mut batch);
        inside += t.elapsed();
        assert_eq!(r.deliver as usize, chunk.len());
    }
    let n = outers.len() as f64;
    (n / inside.as_secs_f64(), n / start.elapsed().as_secs_f64())
}

/// One round at one size: encapsulate `n` packets on A, decapsulate them on B, and seal
/// as many payloads of the same length with ring directly; then the same calls again
/// through [`NullCrossing`].
fn round(a: &mut Gateway, b: &mut Gateway, size: usize) -> Sample {
    let n = packets_per_round(size);
    let (src, dst) = inner_hosts(false);
    let inner = udp_packet(src, dst, size - 28, 64, Ecn::NotEct, true);
    assert_eq!(inner.len(), size);
    let mut area = Area::new(BATCH);

    let (encap, encap_fill) =
        timed_encap(&mut a.worker, &mut a.enclave, &a.sad, &a.spd, &mut area, &inner, n);
    let outers = fresh_outers(&mut a.worker, &mut a.enclave, &a.sad, &a.spd, &inner, n);
    let (decap, decap_fill) = timed_decap(&mut b.worker, &mut b.enclave, &b.sad, &mut area, &outers);

    let raw = timed_raw(&inner, n);

    let mut null = NullCrossing { spi: SPI };
    let (encap_alone, _) = timed_encap(&mut a.worker, &mut null, &a.sad, &a.spd, &mut area, &inner, n);
    let outers = fresh_outers(&mut a.worker, &mut null, &a.sad, &a.spd, &inner, n);
    let (decap_alone, _) = timed_decap(&mut b.worker, &mut null, &b.sad, &mut area, &outers);
    Sample { encap, decap, encap_fill, decap_fill, raw, encap_alone, decap_alone }
}

/// The raw loop: the ESP payload of `inner` (padding to 4, Pad Length, Next Header) sealed
/// `n` times in place with an 8-byte AAD, the same work the enclave does per packet.
fn raw_seal(inner: &[u8], n: usize) {
    let size = inner.len();
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7u8; 32]).unwrap());
    let payload_len = (size + 2).div_ceil(4) * 4;
    let mut buf = vec![0u8; payload_len];
    buf[..size].copy_from_slice(inner);
    let aad = [0u8; 8];
    for i in 0..n as u64 {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&i.to_be_bytes());
        let tag = key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), &mut buf)
            .unwrap();
        std::hint::black_box(&tag);
    }
}

/// [`raw_seal`] of `n` payloads: seals per second.
fn timed_raw(inner: &[u8], n: usize) -> f64 {
    let start = Instant::now();
    raw_seal(inner, n);
    n as f64 / start.elapsed().as_secs_f64()
}

/// `n` fresh ESP packets of `inner` for the peer (its replay window refuses repeats), made
/// by one worker in order, outside any timing.
fn fresh_outers(
    w: &mut cloister_esp::Worker,
    enclave: &mut dyn enclave_core::EspCrossing,
    sad: &cloister_esp::Sad,
    spd: &cloister_esp::Spd,
    inner: &[u8],
    n: usize,
) -> Vec<Vec<u8>> {
    let mut area = Area::new(BATCH);
    let mut outers = Vec::with_capacity(n);
    for _ in 0..n / BATCH {
        let mut batch = batch_of(&mut area, std::iter::repeat_n(inner, BATCH));
        w.encapsulate(enclave, sad, spd, &mut batch);
        for (p, bytes) in batch.iter() {
            assert!(matches!(p.action, Action::Transmit(_)));
            outers.push(bytes.to_vec());
        }
    }
    outers
}

/// A batch of `packets` (each at `OFFSET` of its slot), as the I/O layer would fill it.
fn batch_of<'a, P: AsRef<[u8]>>(
    area: &'a mut Area,
    packets: impl IntoIterator<Item = P>,
) -> cloister_esp::Batch<'a> {
    let mut batch = area.batch();
    for p in packets {
        batch.push(Frame::Ip, OFFSET, p.as_ref()).unwrap();
    }
    batch
}

fn median_min_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// `INMEM_PROFILE=encap:64` (or `decap:1420`, `raw:1420`, `alone:1420`, `decalone:1420`):
/// loops one direction (or the raw seal, or encapsulation / decapsulation through
/// [`NullCrossing`]: the path's own work) at one size for about five seconds, for `perf record`; prints the packets done and
/// the mean time per packet inside the `esp` calls (or the seal loop).
fn profile(spec: &str, a: &mut Gateway, b: &mut Gateway) {
    let usage = "INMEM_PROFILE=DIRECTION:SIZE, DIRECTION one of encap, decap, raw, alone, decalone";
    let (dir, size) = spec.split_once(':').expect(usage);
    assert!(["encap", "decap", "raw", "alone", "decalone"].contains(&dir), "{usage}");
    let size: usize = size.parse().expect("size in bytes");
    let (src, dst) = inner_hosts(false);
    let inner = udp_packet(src, dst, size - 28, 64, Ecn::NotEct, true);
    let mut area = Area::new(BATCH);
    let n = packets_per_round(size);
    let start = Instant::now();
    let (mut done, mut inside) = (0usize, 0.0f64);
    let mut null = NullCrossing { spi: SPI };
    while start.elapsed() < Duration::from_secs(5) {
        // The same timed loops as the tables' rounds, `n` packets a turn.
        let rate = match dir {
            "raw" => timed_raw(&inner, n),
            "encap" => timed_encap(&mut a.worker, &mut a.enclave, &a.sad, &a.spd, &mut area, &inner, n).0,
            "alone" => timed_encap(&mut a.worker, &mut null, &a.sad, &a.spd, &mut area, &inner, n).0,
            "decalone" => {
                let outers = fresh_outers(&mut a.worker, &mut null, &a.sad, &a.spd, &inner, n);
                timed_decap(&mut b.worker, &mut null, &b.sad, &mut area, &outers).0
            }
            _ => {
                let outers = fresh_outers(&mut a.worker, &mut a.enclave, &a.sad, &a.spd, &inner, n);
                timed_decap(&mut b.worker, &mut b.enclave, &b.sad, &mut area, &outers).0
            }
        };
        done += n;
        inside += n as f64 / rate;
    }
    let ns = inside * 1e9 / done.max(1) as f64;
    println!("{dir} {size}B: {done} packets, {ns:.1} ns each inside the calls");
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let shape = Shape { suite, esn: false, inner_v6: false, outer_v6: false, udp: true };
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, shape, SPI, Instant::now());
    if let Ok(spec) = std::env::var("INMEM_PROFILE") {
        return profile(&spec, &mut a, &mut b);
    }
    if let Ok(spec) = std::env::var("INMEM_SCALE") {
        let counts: Vec<usize> =
            spec.split(',').map(|k| k.trim().parse().expect("INMEM_SCALE=1,2,4,...")).collect();
        assert!(counts.iter().all(|&k| (1..=64).contains(&k)), "INMEM_SCALE: worker counts 1..=64");
        // A fresh pair whose receiver keeps the widest window, so that many decapsulating
        // workers need to meet seldom.
        let (mut a, mut b) = (Gateway::new(), Gateway::new());
        tunnel_with_window(&mut a, &mut b, shape, 0x2000, Instant::now(), MAX_WINDOW);
        return scale(a, b, &counts, rounds);
    }

    let mut samples: Vec<Vec<Sample>> = SIZES.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, &size) in SIZES.iter().enumerate() {
            samples[i].push(round(&mut a, &mut b, size));
        }
    }

    println!(
        "ESP in memory, one core, AES-GCM-16-256, ESP-in-UDP over IPv4, batches of {BATCH}, {rounds} rounds"
    );
    println!(
        "packets/s: median (min-max) over the time inside encapsulate/decapsulate (a clock read per batch of {BATCH}); \
         ratio = esp path / raw ring AES-256-GCM seal of the same payload"
    );
    println!(
        "{:>6} | {:>26} | {:>26} | {:>26} | {:>20} | {:>20}",
        "size", "encapsulate", "decapsulate", "raw seal", "encap/raw", "decap/raw"
    );
    let fmt = |(m, lo, hi): (f64, f64, f64)| format!("{:.0} ({:.0}-{:.0})", m, lo, hi);
    let fmt_r = |(m, lo, hi): (f64, f64, f64)| format!("{m:.2} ({lo:.2}-{hi:.2})");
    let mut last = Vec::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let s = &samples[i];
        let encap = median_min_max(s.iter().map(|x| x.encap).collect());
        let decap = median_min_max(s.iter().map(|x| x.decap).collect());
        let raw = median_min_max(s.iter().map(|x| x.raw).collect());
        // Ratios per round (each round's two sides ran back to back), then their median.
        let re = median_min_max(s.iter().map(|x| x.encap / x.raw).collect());
        let rd = median_min_max(s.iter().map(|x| x.decap / x.raw).collect());
        println!(
            "{:>5}B | {:>26} | {:>26} | {:>26} | {:>20} | {:>20}",
            size,
            fmt(encap),
            fmt(decap),
            fmt(raw),
            fmt_r(re),
            fmt_r(rd)
        );
        if size == 64 || size == 1420 {
            // The direction that does worse: a gateway does both.
            last.push(format!("{size}B={:.2}", re.0.min(rd.0)));
        }
    }
    println!(
        "with the copy of every packet into its batch slot counted too (the I/O layer's job in the gateway):"
    );
    println!(
        "{:>6} | {:>26} | {:>26} | {:>20} | {:>20}",
        "size", "encapsulate", "decapsulate", "encap/raw", "decap/raw"
    );
    for (i, &size) in SIZES.iter().enumerate() {
        let s = &samples[i];
        println!(
            "{:>5}B | {:>26} | {:>26} | {:>20} | {:>20}",
            size,
            fmt(median_min_max(s.iter().map(|x| x.encap_fill).collect())),
            fmt(median_min_max(s.iter().map(|x| x.decap_fill).collect())),
            fmt_r(median_min_max(s.iter().map(|x| x.encap_fill / x.raw).collect())),
            fmt_r(median_min_max(s.iter().map(|x| x.decap_fill / x.raw).collect()))
        );
    }
    println!(
        "where the time goes, ns per packet (medians): the esp path alone (a crossing that seals nothing), \
         the rest of the path (enclave and cryptography), and the raw seal"
    );
    println!(
        "{:>6} | {:>12} | {:>12} | {:>17} | {:>17} | {:>9}",
        "size", "encap alone", "decap alone", "encap enclave+AE", "decap enclave+AE", "raw seal"
    );
    for (i, &size) in SIZES.iter().enumerate() {
        // The median of one rate over the rounds, as ns per packet.
        let ns = |rate: fn(&Sample) -> f64| 1e9 / median_min_max(samples[i].iter().map(rate).collect()).0;
        let (ea, da) = (ns(|x| x.encap_alone), ns(|x| x.decap_alone));
        let (e, d, raw) = (ns(|x| x.encap), ns(|x| x.decap), ns(|x| x.raw));
        println!("{size:>5}B | {ea:>12.1} | {da:>12.1} | {:>17.1} | {:>17.1} | {raw:>9.1}", e - ea, d - da);
    }
    let drops = a.worker.drops().total() + b.worker.drops().total();
    workers(a, b, rounds);
    println!("drops: {drops}");
    println!("esp inmem ratio {}", last.join(" "));
}

/// How the workers of one tenant take turns at its one enclave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    /// The mutex held for each whole `encapsulate`/`decapsulate` call (the workers' former way, kept as a reference).
    Call,
    /// [`cloister_esp::SharedEnclave`]: the whole call for encapsulation (the same as
    /// `Call`, a check on the noise), each crossing for decapsulation.
    Shared,
    /// No lock: each worker crosses through its own lane (`Enclave::esp_lane`).
    Lanes,
}

/// Packets/s over wall time of `threads` workers encapsulating (or decapsulating) their
/// share of `n` packets of one SA, every step counted (the copy into the batch slots too),
/// and how many packets the workers dropped.
#[allow(clippy::too_many_arguments)]
fn spread(
    enclave: &Mutex<enclave_core::InlineEnclave>,
    sad: &cloister_esp::Sad,
    spd: &cloister_esp::Spd,
    inner: &[u8],
    outers: &[Vec<u8>],
    threads: usize,
    lock: Lock,
    n: usize,
    window: u32,
) -> (f64, u64) {
    // Decapsulating workers meet every few batches, as packets that arrive in order would
    // keep them: free-running, one could get further ahead of the others than the SA's
    // replay window (4096) reaches.
    let meet = std::sync::Barrier::new(threads);
    // At most a quarter of the receiver's window between the first and the last worker at
    // each meeting.
    let every = (window as usize / 4 / (threads * BATCH)).max(1);
    let common = outers.len() / BATCH / threads;
    let work = |t: usize| {
        let mut w = cloister_esp::Worker::new(cloister_esp::WorkerConfig::default(), 64);
        let mut lane = (lock == Lock::Lanes).then(|| enclave.lock().unwrap().esp_lane().unwrap());
        let mut area = Area::new(BATCH);
        let mut done = 0usize;
        // Decapsulation: worker t takes every threads-th chunk, so the SA's window sees
        // little reordering; encapsulation: its share of batches.
        let chunks: Vec<&[Vec<u8>]> = outers.chunks(BATCH).skip(t).step_by(threads).collect();
        let batches = if outers.is_empty() { n / BATCH / threads } else { chunks.len() };
        for k in 0..batches {
            let mut batch = if outers.is_empty() {
                batch_of(&mut area, std::iter::repeat_n(inner, BATCH))
            } else {
                batch_of(&mut area, chunks.get(k).copied().unwrap_or_default())
            };
            let r = match (lock, outers.is_empty()) {
                (Lock::Lanes, true) => w.encapsulate(&mut **lane.as_mut().unwrap(), sad, spd, &mut batch),
                (Lock::Lanes, false) => w.decapsulate(&mut **lane.as_mut().unwrap(), sad, &mut batch),
                (Lock::Call, true) => w.encapsulate(&mut *enclave.lock().unwrap(), sad, spd, &mut batch),
                (Lock::Shared, true) => {
                    w.encapsulate(&mut cloister_esp::SharedEnclave::new(enclave), sad, spd, &mut batch)
                }
                (Lock::Call, false) => w.decapsulate(&mut *enclave.lock().unwrap(), sad, &mut batch),
                (Lock::Shared, false) => {
                    w.decapsulate(&mut cloister_esp::SharedEnclave::new(enclave), sad, &mut batch)
                }
            };
            done += (r.transmit + r.deliver) as usize;
            if !outers.is_empty() && k % every == every - 1 && k < common {
                meet.wait();
            }
        }
        (done, w.drops().total())
    };
    let start = Instant::now();
    let (done, dropped) = std::thread::scope(|s| {
        let work = &work;
        let hs: Vec<_> = (1..threads).map(|t| s.spawn(move || work(t))).collect();
        let mut sum = work(0);
        for h in hs {
            let (d, x) = h.join().unwrap();
            sum = (sum.0 + d, sum.1 + x);
        }
        sum
    });
    let per_s = done as f64 / start.elapsed().as_secs_f64();
    let all = if outers.is_empty() { n / BATCH / threads * BATCH * threads } else { outers.len() };
    assert_eq!(
        done as u64 + dropped,
        all as u64,
        "{threads} workers, {lock:?}: every packet sent or dropped"
    );
    (per_s, dropped)
}

/// Two gateways' tables and enclaves, shared by the threads of a multi-worker round.
struct Shared {
    ea: Mutex<enclave_core::InlineEnclave>,
    eb: Mutex<enclave_core::InlineEnclave>,
    a: (cloister_esp::Sad, cloister_esp::Spd),
    b: (cloister_esp::Sad, cloister_esp::Spd),
}

impl Shared {
    fn new(a: Gateway, b: Gateway) -> Self {
        Self { ea: Mutex::new(a.enclave), eb: Mutex::new(b.enclave), a: (a.sad, a.spd), b: (b.sad, b.spd) }
    }

    /// `n` packets of `inner` encapsulated on A by `threads` workers, then `n` fresh ESP
    /// packets made from it (untimed) decapsulated on B by as many: (packets/s, dropped)
    /// for each direction.
    fn both_ways(&self, inner: &[u8], threads: usize, lock: Lock, n: usize, window: u32) -> [(f64, u64); 2] {
        let (sad_a, spd_a) = &self.a;
        let (sad_b, spd_b) = &self.b;
        let encap = spread(&self.ea, sad_a, spd_a, inner, &[], threads, lock, n, window);
        let mut w = cloister_esp::Worker::new(cloister_esp::WorkerConfig::default(), 64);
        let outers = fresh_outers(&mut w, &mut *self.ea.lock().unwrap(), sad_a, spd_a, inner, n);
        let decap = spread(&self.eb, sad_b, spd_b, inner, &outers, threads, lock, n, window);
        [encap, decap]
    }
}

/// One SA carried by 1 and 2 workers sharing one inline enclave: with the old lock (whole
/// call), the shared lock (per crossing) and a lane each (no lock), interleaved round by
/// round.
fn workers(a: Gateway, b: Gateway, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pair = Shared::new(a, b);
    let (src, dst) = inner_hosts(false);
    let cases = [(1, Lock::Shared), (2, Lock::Call), (2, Lock::Shared), (2, Lock::Lanes)];
    println!(
        "one SA on several workers ({cores} cores), one inline enclave shared: packets/s over wall time, copy into the batch included; median (min-max) over {rounds} rounds"
    );
    println!(
        "{:>6} | {:>9} | {:>26} | {:>26} | {:>26} | {:>26} | {:>14} | {:>14} | {:>14}",
        "size",
        "direction",
        "1 worker",
        "2 workers, call lock",
        "2 workers, shared lock",
        "2 workers, own lanes",
        "call lock/1",
        "shared/1",
        "lanes/1"
    );
    for size in [64usize, 1420] {
        let inner = udp_packet(src, dst, size - 28, 64, Ecn::NotEct, true);
        let n = packets_per_round(size);
        let mut enc: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        let mut dec: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        for _ in 0..rounds {
            for (i, &(threads, lock)) in cases.iter().enumerate() {
                let [(e, de), (d, dd)] = pair.both_ways(&inner, threads, lock, n, DEFAULT_WINDOW);
                assert_eq!(de, 0, "encapsulation, {threads} workers, {lock:?}");
                assert_eq!(dd, 0, "decapsulation, {threads} workers, {lock:?}");
                enc[i].push(e);
                dec[i].push(d);
            }
        }
        for (name, v) in [("encap", &enc), ("decap", &dec)] {
            let m: Vec<(f64, f64, f64)> = v.iter().map(|x| median_min_max(x.clone())).collect();
            let ratio = |i: usize| median_min_max(v[i].iter().zip(&v[0]).map(|(x, one)| x / one).collect());
            let (rc, rx, rl) = (ratio(1), ratio(2), ratio(3));
            let pps = |i: usize| format!("{:.0} ({:.0}-{:.0})", m[i].0, m[i].1, m[i].2);
            let r = |r: (f64, f64, f64)| format!("{:.2} ({:.2}-{:.2})", r.0, r.1, r.2);
            println!(
                "{:>5}B | {:>9} | {:>26} | {:>26} | {:>26} | {:>26} | {:>14} | {:>14} | {:>14}",
                size,
                name,
                pps(0),
                pps(1),
                pps(2),
                pps(3),
                r(rc),
                r(rx),
                r(rl),
            );
        }
    }
}

/// `INMEM_SCALE=1,2,4,8`: one SA (its receiver's window the widest, 65504) carried by k
/// workers, each crossing through its own lane,
/// beside k threads each running the raw seal loop (the crypto's own scaling on this
/// machine), interleaved round by round. Every worker gets the same work whatever k, so a
/// round of k workers moves k times the packets.
fn scale(a: Gateway, b: Gateway, counts: &[usize], rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pair = Shared::new(a, b);
    let (src, dst) = inner_hosts(false);
    println!(
        "one SA on k workers with a lane each ({cores} cores), AES-GCM-16-256, ESP-in-UDP over IPv4: \
         packets/s over wall time, copy into the batch included; raw = k threads of the raw ring seal loop; \
         median (min-max) over {rounds} rounds; xN = k workers / the first k of the same round"
    );
    println!(
        "{:>6} | {:>3} | {:>26} | {:>26} | {:>26} | {:>18} | {:>18} | {:>18} | {:>16}",
        "size",
        "k",
        "encapsulate",
        "decapsulate",
        "raw seal",
        "encap xN",
        "decap xN",
        "raw xN",
        "dropped/packets"
    );
    for size in [64usize, 1420] {
        let inner = udp_packet(src, dst, size - 28, 64, Ecn::NotEct, true);
        let per_worker = packets_per_round(size) * 2;
        let mut enc: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
        let mut dec: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
        let mut raw: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
        let (mut drops, mut sent) = (vec![0u64; counts.len()], vec![0u64; counts.len()]);
        for _ in 0..rounds {
            for (i, &k) in counts.iter().enumerate() {
                let n = per_worker * k;
                let [(e, de), (d, dd)] = pair.both_ways(&inner, k, Lock::Lanes, n, MAX_WINDOW);
                enc[i].push(e);
                dec[i].push(d);
                drops[i] += de + dd;
                sent[i] += 2 * n as u64;
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..k {
                        s.spawn(|| raw_seal(&inner, per_worker));
                    }
                });
                raw[i].push(n as f64 / start.elapsed().as_secs_f64());
            }
        }
        for (i, &k) in counts.iter().enumerate() {
            let pps = |v: &Vec<f64>| {
                let (m, lo, hi) = median_min_max(v.clone());
                format!("{m:.0} ({lo:.0}-{hi:.0})")
            };
            let times = |v: &Vec<Vec<f64>>| {
                let (m, lo, hi) = median_min_max(v[i].iter().zip(&v[0]).map(|(x, one)| x / one).collect());
                format!("{m:.2} ({lo:.2}-{hi:.2})")
            };
            println!(
                "{:>5}B | {:>3} | {:>26} | {:>26} | {:>26} | {:>18} | {:>18} | {:>18} | {:>16}",
                size,
                k,
                pps(&enc[i]),
                pps(&dec[i]),
                pps(&raw[i]),
                times(&enc),
                times(&dec),
                times(&raw),
                format!("{}/{}", drops[i], sent[i])
            );
        }
    }
    let (ca, cb) = (pair.ea.lock().unwrap().counters(), pair.eb.lock().unwrap().counters());
    for s in enclave_core::EspStatus::ALL {
        let (x, y) = (ca.esp_status(s), cb.esp_status(s));
        if s != enclave_core::EspStatus::Ok && x + y > 0 {
            println!("enclave status {s:?}: sender {x}, receiver {y}");
        }
    }
}
