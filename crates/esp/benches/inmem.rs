//! `bench/esp-inmem.sh`: packets/s on one core through the whole `esp` path (policy and SA
//! lookup, sequence numbers, anti-replay, one inline-enclave crossing per batch of 32,
//! tunnel-mode encapsulation / decapsulation) against a raw AES-256-GCM seal loop of the
//! same crypto library (ring) over the same payload sizes, in the same run, interleaved
//! round by round so machine noise hits both sides. Not a test: run it through the script.
//!
//! Usage: `inmem [ROUNDS]` (default 7). Prints a table of medians and min–max, then
//! `esp inmem ratio 64B=<r> 1420B=<r>` (the lower of the encapsulation and decapsulation
//! median ratios over raw seal). Rates count the time inside the `esp` calls; a second table
//! also counts the copy of each packet into its batch slot.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]
#![allow(missing_docs, unreachable_pub)]

#[path = "../tests/common/mod.rs"]
mod common;

use cloister_esp::{Action, Frame};
use common::*;
use enclave::{Cipher, Suite};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
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
}

/// One round at one size: encapsulate `n` packets on A, decapsulate them on B, and seal
/// as many payloads of the same length with ring directly.
fn round(a: &mut Gateway, b: &mut Gateway, size: usize) -> Sample {
    let n = packets_per_round(size);
    let (src, dst) = inner_hosts(false);
    let inner = udp_packet(src, dst, size - 28, 64, Ecn::NotEct, true);
    assert_eq!(inner.len(), size);
    let mut area = Area::new(BATCH);
    let mut outers: Vec<Vec<u8>> = Vec::with_capacity(n);

    let mut inside = Duration::ZERO;
    let start = Instant::now();
    for _ in 0..n / BATCH {
        let mut batch = area.batch();
        for _ in 0..BATCH {
            batch.push(Frame::Ip, OFFSET, &inner).unwrap();
        }
        let t = Instant::now();
        let r = a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
        inside += t.elapsed();
        assert_eq!(r.transmit as usize, BATCH);
        std::hint::black_box(&batch);
    }
    let encap_fill = n as f64 / start.elapsed().as_secs_f64();
    let encap = n as f64 / inside.as_secs_f64();

    // Fresh packets for B (its replay window refuses repeats), made outside the timing.
    for _ in 0..n / BATCH {
        let mut batch = area.batch();
        for _ in 0..BATCH {
            batch.push(Frame::Ip, OFFSET, &inner).unwrap();
        }
        a.worker.encapsulate(&mut a.enclave, &a.sad, &a.spd, &mut batch);
        for (p, bytes) in batch.iter() {
            assert!(matches!(p.action, Action::Transmit(_)));
            outers.push(bytes.to_vec());
        }
    }

    let mut inside = Duration::ZERO;
    let start = Instant::now();
    for chunk in outers.chunks(BATCH) {
        let mut batch = area.batch();
        for o in chunk {
            batch.push(Frame::Ip, OFFSET, o).unwrap();
        }
        let t = Instant::now();
        let r = b.worker.decapsulate(&mut b.enclave, &b.sad, &mut batch);
        inside += t.elapsed();
        assert_eq!(r.deliver as usize, chunk.len());
    }
    let decap_fill = n as f64 / start.elapsed().as_secs_f64();
    let decap = n as f64 / inside.as_secs_f64();

    // The raw loop: the ESP payload (inner packet, padding to 4, Pad Length, Next Header)
    // sealed in place with an 8-byte AAD, the same work the enclave does per packet.
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7u8; 32]).unwrap());
    let payload_len = (size + 2).div_ceil(4) * 4;
    let mut buf = vec![0u8; payload_len];
    buf[..size].copy_from_slice(&inner);
    let aad = [0u8; 8];
    let start = Instant::now();
    for i in 0..n as u64 {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&i.to_be_bytes());
        let tag = key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), &mut buf)
            .unwrap();
        std::hint::black_box(&tag);
    }
    let raw = n as f64 / start.elapsed().as_secs_f64();
    Sample { encap, decap, encap_fill, decap_fill, raw }
}

fn median_min_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let suite = Suite::aead(Cipher::AesGcm16_256);
    let shape = Shape { suite, esn: false, inner_v6: false, outer_v6: false, udp: true };
    let (mut a, mut b) = (Gateway::new(), Gateway::new());
    tunnel(&mut a, &mut b, shape, 0x1000, Instant::now());

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
    let drops = a.worker.drops().total() + b.worker.drops().total();
    println!("drops: {drops}");
    println!("esp inmem ratio {}", last.join(" "));
}
