//! The enclave benchmark, run by `bench/enclave.sh` (method and latest table:
//! `docs/bench-enclave.md`): ESP encrypt and decrypt throughput of the inline and the process
//! backend side by side, in batches of 32 over 64, 512 and 1420 byte packets; the cost of one
//! crossing of the process rings; trusted memory for 1000 ESP SAs and 1000 IKE SAs.
//!
//! Every SA is set up through the real call surface (Curve25519, `ike_sa_create`,
//! `child_sa_create` with AES-GCM-16-256); an inline peer enclave produces the ciphertext the
//! measured enclaves decrypt. Rounds interleave the backends so drift hits all of them; the
//! figures are medians with min–max over rounds. The last line is
//! `enclave process/inline 64B=<r> 1420B=<r>`, each `<r>` the lower of the encrypt and the
//! decrypt median ratio, pipelined process over inline.
//!
//! Knobs (environment): `ROUNDS` (7), `RUN_MS` (target milliseconds per measurement, 120),
//! `DEPTH` (pipelined batches, i.e. packet regions, 3), `PIN` (1: the gateway thread on CPU 0,
//! the enclave process and the inline runs on CPU 1; 0: the scheduler places them),
//! `CLOISTER_ENCLAVE_BIN` (the enclave program; default: this package's
//! `cloister-enclave-process`), and for profiling
//! `FOCUS=<size>:<encrypt|decrypt>:<inline|piped|sync>[:alt]` (only that measurement, `ROUNDS`
//! times; with `:alt`, each run a quarter as long and preceded by an inline run of the same
//! length, as in the rounds, and both printed).
// A benchmark: a failed set-up step is a bug in the benchmark, and it should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Offsets and lengths lie inside a 512 KiB area; counts are far below u32::MAX.
#![allow(clippy::cast_possible_truncation)]

use cloister_enclave::attest::{CodeIdentity, SoftwareAttestation};
use cloister_enclave::provision::wrap_secret;
use cloister_enclave::{
    Backend, ChildSaPair, ChildSaParams, Cipher, DhGroup, Enclave, EnclaveConfig, EspDescriptor, EspSaHandle,
    EspStatus, IkeSaHandle, Limits, MemoryReport, Prf, ProvisioningKey, Role, SecretHandle, SecretKind,
    Suite, TenantId, IKE_NONCE_LEN,
};
use enclave_api::testing;
use enclave_host::{InFlight, PacketArea, ProcessEnclave, ProcessSpec};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Inner packet sizes (the IP packet ESP carries, before the ESP trailer).
const SIZES: [usize; 3] = [64, 512, 1420];
/// Descriptors per batch.
const BATCH: usize = 32;
/// Bytes between packets in the packet area (as the process backend's 2 KiB buffers).
const STRIDE: usize = 2048;
/// Bytes of one region: one batch's packets.
const REGION: usize = BATCH * STRIDE;
const SUITE: Suite = Suite::aead(Cipher::AesGcm16_256);
const PROV_KEY: [u8; 32] = [0x42; 32];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|&v| v > 0).unwrap_or(default)
}

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

fn start_inline(tenant: u32) -> cloister_enclave::InlineEnclave {
    let c = config(tenant);
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let att = SoftwareAttestation::new(
        &pk,
        CodeIdentity::Bytes(b"bench".to_vec()),
        &c.measured_bytes(Backend::Inline),
    )
    .unwrap();
    cloister_enclave::InlineEnclave::start(c, Box::new(att)).unwrap()
}

/// The core of the gateway thread, and the core of the measured enclave process (on which
/// the inline backend is measured too) when pinned.
const GATEWAY_CPU: usize = 0;
const ENCLAVE_CPU: usize = 1;

/// Whether to pin (`PIN`, default 1, and at least two CPUs): the gateway thread on
/// [`GATEWAY_CPU`], the measured enclave process and the inline runs on [`ENCLAVE_CPU`].
/// Decided once, before the pinning narrows what `available_parallelism` sees.
fn pinned() -> bool {
    static PINNED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PINNED.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::var("PIN").map_or(true, |v| v != "0") && cpus >= 2
    })
}

/// Pins the calling thread to `cpu`.
fn pin_this_thread(cpu: usize) {
    // SAFETY: cpu_set_t is a plain bit array (all zeros: empty); `cpu` is below CPU_SETSIZE
    // on any machine this runs on; sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

/// The enclave program, as `tests/process_backend.rs` finds it.
fn spec() -> ProcessSpec {
    let s = match std::env::var_os("CLOISTER_ENCLAVE_BIN") {
        Some(bin) => ProcessSpec::new(bin, Vec::<String>::new()),
        None => ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new()),
    };
    if pinned() {
        s.pinned(vec![ENCLAVE_CPU])
    } else {
        s
    }
}

fn start_process(tenant: u32) -> ProcessEnclave {
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    ProcessEnclave::start(spec(), config(tenant), &pk).unwrap()
}

/// IKE_SA_INIT and IKE_AUTH (PSK) and its child SA between `a` (initiator) and `peer`
/// (responder).
fn tunnel(a: &mut dyn Enclave, peer: &mut dyn Enclave, spi: u32) -> (ChildSaPair, ChildSaPair) {
    let spis = (u64::from(spi), u64::from(spi) + 1);
    let h = testing::ike_sa_init(a, peer, DhGroup::Curve25519, Prf::HmacSha256, SUITE, spis).unwrap();
    let (psk_a, psk_p) = (psk(a), psk(peer));
    h.authenticate_psk(a, peer, psk_a, psk_p).unwrap();
    h.first_child(a, peer, SUITE, (spi, spi + 1)).unwrap()
}

/// The bench tenant's PSK, provisioned into `e`.
fn psk(e: &mut dyn Enclave) -> SecretHandle {
    let blob = wrap_secret(
        &ProvisioningKey::from_bytes(PROV_KEY),
        e.tenant(),
        SecretKind::PreSharedKey,
        b"bench psk",
    )
    .unwrap();
    e.provision_secret(&blob).unwrap()
}

/// Lays out one ESP packet carrying `inner` bytes at `off` (per `EspDescriptor`'s docs:
/// header, IV, payload with padding, Pad Length and Next Header, ICV); returns its length.
fn lay_out(buf: &mut [u8], off: usize, inner: usize, fill: u8) -> u32 {
    let (front, icv) = SUITE.esp_overhead();
    let align = SUITE.esp_payload_align();
    let payload = (inner + 2).div_ceil(align) * align;
    let len = front + payload + icv;
    let p = &mut buf[off..off + len];
    p.fill(0);
    for (j, b) in p[front..front + inner].iter_mut().enumerate() {
        *b = fill.wrapping_add(j as u8);
    }
    let pad = payload - inner - 2;
    for (k, b) in p[front + inner..front + inner + pad].iter_mut().enumerate() {
        *b = k as u8 + 1;
    }
    p[front + payload - 2] = pad as u8;
    p[front + payload - 1] = 4; // IPv4
    len as u32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Encrypt,
    Decrypt,
}

/// What the measured enclave holds, and what its inline peer prepared for it.
struct Subject {
    sa: ChildSaPair,
    /// Next sequence number for the outbound SA (strictly increasing, never reused).
    next_seq: u64,
    /// Per size: one region of ciphertext from the peer, and the first sequence number.
    images: Vec<(Vec<u8>, u64)>,
}

impl Subject {
    fn new(sa: ChildSaPair, peer: &mut dyn Enclave, peer_out: EspSaHandle, peer_seq: &mut u64) -> Self {
        let mut images = Vec::new();
        for &size in &SIZES {
            let mut image = vec![0u8; REGION];
            let seq0 = *peer_seq + 1;
            let descs: Vec<_> = (0..BATCH)
                .map(|k| {
                    let len = lay_out(&mut image, k * STRIDE, size, k as u8);
                    *peer_seq += 1;
                    EspDescriptor::encrypt(peer_out, (k * STRIDE) as u32, len, *peer_seq)
                })
                .collect();
            let mut st = [EspStatus::NotProcessed; BATCH];
            assert_eq!(peer.esp_batch(&mut image, &descs, &mut st).unwrap().ok, BATCH as u32, "{st:?}");
            images.push((image, seq0));
        }
        Self { sa, next_seq: 1, images }
    }

    /// Writes plaintext packets of `size` into the first `regions` regions (untimed set-up
    /// before an encrypt run; encrypting ciphertext again is as good as plaintext after).
    fn lay_out_plain(buf: &mut [u8], size: usize, regions: usize) {
        for r in 0..regions {
            for k in 0..BATCH {
                lay_out(buf, r * REGION + k * STRIDE, size, k as u8);
            }
        }
    }

    /// Makes batch `descs` for `region`: new sequence numbers (encrypt), or the peer's
    /// ciphertext copied back over the previous run's plaintext (decrypt: in-place
    /// decryption consumes it; the enclave keeps no replay state, crates/esp does).
    fn prepare(
        &mut self,
        buf: &mut [u8],
        region: usize,
        size_idx: usize,
        op: Op,
        descs: &mut [EspDescriptor],
    ) {
        let base = region * REGION;
        let (front, icv) = SUITE.esp_overhead();
        let size = SIZES[size_idx];
        let len = front + (size + 2).div_ceil(SUITE.esp_payload_align()) * SUITE.esp_payload_align() + icv;
        match op {
            Op::Encrypt => {
                for (k, d) in descs.iter_mut().enumerate() {
                    *d = EspDescriptor::encrypt(
                        self.sa.outbound,
                        (base + k * STRIDE) as u32,
                        len as u32,
                        self.next_seq,
                    );
                    self.next_seq += 1;
                }
            }
            Op::Decrypt => {
                let (image, seq0) = &self.images[size_idx];
                for (k, d) in descs.iter_mut().enumerate() {
                    let off = k * STRIDE;
                    buf[base + off..base + off + len].copy_from_slice(&image[off..off + len]);
                    *d = EspDescriptor::decrypt(
                        self.sa.inbound,
                        (base + off) as u32,
                        len as u32,
                        seq0 + k as u64,
                    );
                }
            }
        }
    }
}

/// What reading the clock costs: the median of `Instant::now()` to `elapsed()` back to back.
/// Every per-call interval contains one such cost, and it is taken off.
fn timer_overhead() -> Duration {
    let mut v: Vec<Duration> = (0..20_001)
        .map(|_| {
            let t = Instant::now();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

/// Synchronous batches (inline, or the process backend's `esp_batch`): the time spent inside
/// `esp_batch` only, so the preparation between calls (descriptor writing, restoring
/// ciphertext) counts for neither backend; less `timer` per call.
#[allow(clippy::too_many_arguments)]
fn run_sync(
    e: &mut dyn Enclave,
    buf: &mut [u8],
    s: &mut Subject,
    size_idx: usize,
    op: Op,
    batches: usize,
    regions: usize,
    timer: Duration,
) -> Duration {
    if op == Op::Encrypt {
        Subject::lay_out_plain(buf, SIZES[size_idx], regions);
    }
    let mut descs = [EspDescriptor::encrypt(s.sa.outbound, 0, 0, 0); BATCH];
    let mut st = [EspStatus::NotProcessed; BATCH];
    let mut busy = Duration::ZERO;
    let mut ok = 0usize;
    for b in 0..batches {
        s.prepare(buf, b % regions, size_idx, op, &mut descs);
        let t = Instant::now();
        let sum = e.esp_batch(buf, &descs, &mut st).unwrap();
        busy += t.elapsed();
        ok += sum.ok as usize;
    }
    assert_eq!(ok, batches * BATCH, "every packet must succeed ({op:?}): {st:?}");
    busy.saturating_sub(timer * batches as u32)
}

/// What one pipelined run saw besides its wall time.
#[derive(Debug, Clone, Copy, Default)]
struct PipeStats {
    /// Enclave process CPU time over wall time.
    enclave_cpu: f64,
    /// This (gateway) thread's CPU time over wall time.
    host_cpu: f64,
    /// Times the enclave went to sleep on its doorbell.
    sleeps: u64,
}

/// Pipelined batches on the process backend: `regions` batches in flight at most; batch
/// k + regions - 1 is prepared while the enclave works on the ones before it. Wall time of
/// the whole stream: the crypto happens on the enclave's core, one core.
fn run_piped(
    p: &mut ProcessEnclave,
    area: &mut PacketArea,
    s: &mut Subject,
    size_idx: usize,
    op: Op,
    batches: usize,
    regions: usize,
) -> (Duration, PipeStats) {
    if op == Op::Encrypt {
        Subject::lay_out_plain(area.as_mut_slice(), SIZES[size_idx], regions);
    }
    let pid = p.pid().unwrap();
    let mut descs = [EspDescriptor::encrypt(s.sa.outbound, 0, 0, 0); BATCH];
    let mut st = [EspStatus::NotProcessed; BATCH];
    let mut queue: VecDeque<InFlight> = VecDeque::with_capacity(regions);
    let mut ok = 0usize;
    let sleeps0 = p.guest_sleeps();
    let (cpu_e0, cpu_h0) = (process_cpu(pid), thread_cpu());
    let start = Instant::now();
    for b in 0..batches {
        if queue.len() == regions {
            let f = queue.pop_front().unwrap();
            ok += p.complete_esp(f, &mut st).unwrap().ok as usize;
        }
        s.prepare(area.as_mut_slice(), b % regions, size_idx, op, &mut descs);
        queue.push_back(p.submit_esp(&descs).unwrap());
    }
    while let Some(f) = queue.pop_front() {
        ok += p.complete_esp(f, &mut st).unwrap().ok as usize;
    }
    let wall = start.elapsed();
    let (cpu_e1, cpu_h1) = (process_cpu(pid), thread_cpu());
    assert_eq!(ok, batches * BATCH, "every packet must succeed ({op:?}): {st:?}");
    let share = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() / wall.as_secs_f64(),
        _ => f64::NAN,
    };
    let stats = PipeStats {
        enclave_cpu: share(cpu_e0, cpu_e1),
        host_cpu: share(cpu_h0, cpu_h1),
        sleeps: p.guest_sleeps() - sleeps0,
    };
    (wall, stats)
}

fn timespec_duration(ts: &libc::timespec) -> Option<Duration> {
    Some(Duration::new(u64::try_from(ts.tv_sec).ok()?, u32::try_from(ts.tv_nsec).ok()?))
}

/// CPU time of process `pid` (all its threads), from the kernel's per-process CPU clock.
fn process_cpu(pid: u32) -> Option<Duration> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid place for the clock id; the call only reads `pid`.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    timespec_duration(&ts)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    timespec_duration(&ts)
}

/// Median, minimum and maximum.
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
    (med, s[0], s[n - 1])
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The backends as measured, in the order of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Inline,
    Piped,
    Sync,
}

const VARIANTS: [Variant; 3] = [Variant::Inline, Variant::Piped, Variant::Sync];
const OPS: [Op; 2] = [Op::Encrypt, Op::Decrypt];

struct Bench {
    inline: cloister_enclave::InlineEnclave,
    inline_buf: Vec<u8>,
    inline_s: Subject,
    process: ProcessEnclave,
    area: PacketArea,
    process_s: Subject,
    regions: usize,
    timer: Duration,
}

impl Bench {
    /// One measurement: packets per second (per core, see the module docs).
    fn run(&mut self, v: Variant, size_idx: usize, op: Op, batches: usize) -> (f64, Option<PipeStats>) {
        let packets = (batches * BATCH) as f64;
        match v {
            Variant::Inline => {
                // On the enclave process's core: both backends' crypto on the same core.
                if pinned() {
                    pin_this_thread(ENCLAVE_CPU);
                }
                let t = run_sync(
                    &mut self.inline,
                    &mut self.inline_buf,
                    &mut self.inline_s,
                    size_idx,
                    op,
                    batches,
                    self.regions,
                    self.timer,
                );
                if pinned() {
                    pin_this_thread(GATEWAY_CPU);
                }
                (packets / t.as_secs_f64(), None)
            }
            Variant::Sync => {
                let t = run_sync(
                    &mut self.process,
                    self.area.as_mut_slice(),
                    &mut self.process_s,
                    size_idx,
                    op,
                    batches,
                    self.regions,
                    self.timer,
                );
                (packets / t.as_secs_f64(), None)
            }
            Variant::Piped => {
                let (t, st) = run_piped(
                    &mut self.process,
                    &mut self.area,
                    &mut self.process_s,
                    size_idx,
                    op,
                    batches,
                    self.regions,
                );
                (packets / t.as_secs_f64(), Some(st))
            }
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.to_owned()))
        .and_then(|l| l.split(':').nth(1).map(|m| m.trim().to_owned()))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let rounds = env_usize("ROUNDS", 7);
    let run_ms = env_usize("RUN_MS", 120);
    let regions = env_usize("DEPTH", 3).clamp(2, 8);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "enclave bench: AES-GCM-16-256, batches of {BATCH}, {rounds} rounds interleaved, ~{run_ms} ms per run, \
         pipeline depth {regions}"
    );
    println!("machine: {cpus} CPUs, {}; load average at start {}", cpu_model(), loadavg());
    if pinned() {
        pin_this_thread(GATEWAY_CPU);
        println!(
            "pinned: gateway thread on CPU {GATEWAY_CPU}; enclave process, and the inline runs, on CPU {ENCLAVE_CPU} (PIN=0: not \
             pinned)"
        );
    } else {
        println!("not pinned: the scheduler places the gateway thread and the enclave process");
    }

    // ---- set-up through the real call surface -------------------------------------------
    let mut peer = start_inline(1);
    let mut peer_seq = 0u64;
    let mut inline = start_inline(1);
    let mut process = start_process(1);
    let (sa_i, peer_i) = tunnel(&mut inline, &mut peer, 0xc100);
    let (sa_p, peer_p) = tunnel(&mut process, &mut peer, 0xc200);
    let inline_s = Subject::new(sa_i, &mut peer, peer_i.outbound, &mut peer_seq);
    let process_s = Subject::new(sa_p, &mut peer, peer_p.outbound, &mut peer_seq);
    let mut area = process.take_packet_area().unwrap();
    let area_len = area.as_mut_slice().len();
    assert!(regions * REGION <= area_len, "DEPTH {regions} needs {} bytes of packet area", regions * REGION);
    let mut b = Bench {
        inline,
        inline_buf: vec![0u8; area_len],
        inline_s,
        process,
        area,
        process_s,
        regions,
        timer: timer_overhead(),
    };
    // The peer's ciphertext decrypts on both backends (a wrong set-up fails here).
    for op in OPS {
        for v in VARIANTS {
            for si in 0..SIZES.len() {
                b.run(v, si, op, 4);
            }
        }
    }

    // ---- calibrate: the same packet count for every backend and both directions ------------
    let mut batches = Vec::new();
    for si in 0..SIZES.len() {
        let (pps, _) = b.run(Variant::Inline, si, Op::Encrypt, 2000);
        let n = (pps * run_ms as f64 / 1000.0 / BATCH as f64).max(50.0) as usize;
        batches.push(n);
    }

    if let Ok(focus) = std::env::var("FOCUS") {
        focus_run(&mut b, &focus, &batches, rounds);
        return;
    }

    // ---- throughput rounds -----------------------------------------------------------------
    // pps[size][op][variant] = one value per round. A round's measurement of one
    // (size, op) is CHUNKS slices per backend, the backends taking turns slice by slice (in
    // an order that rotates), so that drift on the machine hits all of them alike.
    const CHUNKS: usize = 4;
    let mut pps = vec![vec![vec![Vec::new(); VARIANTS.len()]; OPS.len()]; SIZES.len()];
    let mut pipe: Vec<PipeStats> = Vec::new();
    let mut cross = Crossing::default();
    for round in 0..rounds {
        crossing_round(&mut b, &mut cross);
        for si in 0..SIZES.len() {
            for (oi, &op) in OPS.iter().enumerate() {
                let mut secs = [0f64; VARIANTS.len()];
                let n = batches[si].div_ceil(CHUNKS);
                for c in 0..CHUNKS {
                    for k in 0..VARIANTS.len() {
                        let vi = (k + round + oi + c) % VARIANTS.len();
                        let (x, st) = b.run(VARIANTS[vi], si, op, n);
                        secs[vi] += (n * BATCH) as f64 / x;
                        pipe.extend(st);
                    }
                }
                for (vi, t) in secs.iter().enumerate() {
                    pps[si][oi][vi].push((n * CHUNKS * BATCH) as f64 / t);
                }
            }
        }
    }

    println!();
    println!("ESP packets/s per core, Mpps: median [min-max] over {rounds} rounds; ratio = per-round process/inline");
    println!(
        "{:>5} {:<7} | {:^21} | {:^21} | {:^21} | {:^19} | {:^19}",
        "size",
        "op",
        "inline",
        "process pipelined",
        "process esp_batch",
        "pipelined/inline",
        "esp_batch/inline"
    );
    let mut last: Vec<(usize, f64)> = Vec::new();
    for (si, &size) in SIZES.iter().enumerate() {
        let mut worst = f64::INFINITY;
        for (oi, op) in OPS.iter().enumerate() {
            let cell = |v: &[f64]| {
                let (m, lo, hi) = stats(v);
                format!("{:.3} [{:.3}-{:.3}]", m / 1e6, lo / 1e6, hi / 1e6)
            };
            let ratio = |vi: usize| -> (f64, f64, f64) {
                let r: Vec<f64> = pps[si][oi][vi].iter().zip(&pps[si][oi][0]).map(|(p, i)| p / i).collect();
                stats(&r)
            };
            let (rp, rp_lo, rp_hi) = ratio(1);
            let (rs, rs_lo, rs_hi) = ratio(2);
            worst = worst.min(rp);
            println!(
                "{size:>4}B {:<7} | {:>21} | {:>21} | {:>21} | {:.3} [{:.3}-{:.3}] | {:.3} [{:.3}-{:.3}]",
                format!("{op:?}").to_lowercase(),
                cell(&pps[si][oi][0]),
                cell(&pps[si][oi][1]),
                cell(&pps[si][oi][2]),
                rp,
                rp_lo,
                rp_hi,
                rs,
                rs_lo,
                rs_hi,
            );
        }
        last.push((size, worst));
    }
    let (ecpu, _, _) = stats(&pipe.iter().map(|s| s.enclave_cpu).collect::<Vec<_>>());
    let (hcpu, _, _) = stats(&pipe.iter().map(|s| s.host_cpu).collect::<Vec<_>>());
    let sleeps: u64 = pipe.iter().map(|s| s.sleeps).sum();
    println!(
        "per core: inline = packets / time inside esp_batch on the calling core; process pipelined = packets / \
         wall time of the stream, divided by 1 core (the enclave's, where the crypto runs; the gateway \
         thread prepares the next batches on the other core); process esp_batch = packets / time inside the \
         synchronous call."
    );
    println!(
        "pipelined runs: enclave process on CPU {:.0}% of wall time (median), gateway thread {:.0}%, enclave \
         slept {sleeps} times in all",
        ecpu * 100.0,
        hcpu * 100.0
    );

    // ---- crossing -------------------------------------------------------------------------
    println!();
    print_crossing(&mut cross, b.timer);

    // ---- trusted memory ---------------------------------------------------------------------
    println!();
    drop(b);
    memory();

    println!();
    println!("load average at end {}", loadavg());
    let r = |size: usize| last.iter().find(|(s, _)| *s == size).map_or(f64::NAN, |(_, r)| *r);
    println!("enclave process/inline 64B={:.3} 1420B={:.3}", r(64), r(1420));
}

/// `FOCUS=<size>:<encrypt|decrypt>:<inline|piped|sync>[:alt]` runs only that measurement,
/// `ROUNDS` times, for a profiler (`perf record -p <enclave pid>`) to look at one
/// configuration; `:alt` alternates it with inline runs in slices as long as the rounds' (a
/// quick A/B of two enclave programs through `CLOISTER_ENCLAVE_BIN`).
fn focus_run(b: &mut Bench, focus: &str, batches: &[usize], rounds: usize) {
    let parts: Vec<&str> = focus.split(':').collect();
    let si = SIZES.iter().position(|s| Some(s.to_string().as_str()) == parts.first().copied());
    let op = OPS.iter().find(|o| Some(format!("{o:?}").to_lowercase().as_str()) == parts.get(1).copied());
    let v = VARIANTS.iter().find(|v| Some(format!("{v:?}").to_lowercase().as_str()) == parts.get(2).copied());
    let (Some(si), Some(&op), Some(&v)) = (si, op, v) else {
        eprintln!("FOCUS=<64|512|1420>:<encrypt|decrypt>:<inline|piped|sync>[:alt]");
        std::process::exit(2);
    };
    let alt = parts.get(3) == Some(&"alt");
    for _ in 0..rounds {
        if alt {
            let (ipps, _) = b.run(Variant::Inline, si, op, batches[si] / 4);
            let (pps, st) = b.run(v, si, op, batches[si] / 4);
            println!("{focus}: {:.3} Mpps (inline {:.3}) {st:?}", pps / 1e6, ipps / 1e6);
            continue;
        }
        let (pps, st) = b.run(v, si, op, batches[si]);
        println!("{focus}: {:.3} Mpps {st:?}", pps / 1e6);
    }
}

/// Round trips of single calls, in nanoseconds, collected a round at a time.
#[derive(Default)]
struct Crossing {
    /// One descriptor refused by the transport, the enclave busy-polling.
    ring: Vec<f64>,
    /// One 64 B encrypt per call, inline.
    one_inline: Vec<f64>,
    /// One 64 B encrypt per call, process.
    one_process: Vec<f64>,
    /// One refused descriptor after 1 ms idle (the enclave asleep on its doorbell).
    cold: Vec<f64>,
}

/// Calls per round for each warm figure, and cold calls per round.
const CROSSINGS: usize = 4000;
const COLD: usize = 30;

/// One round of crossing measurements (spread over the rounds, so a busy spell on the
/// machine spoils few of them).
fn crossing_round(b: &mut Bench, c: &mut Crossing) {
    let area_len = b.inline_buf.len();
    // A descriptor the transport refuses (its region leaves the packet area): the ring round
    // trip with validation, no trusted code.
    let refused = [EspDescriptor::encrypt(b.process_s.sa.outbound, area_len as u32, 64, u64::MAX)];
    let mut st = [EspStatus::NotProcessed];
    // Nanoseconds since `t`, less the clock's own cost.
    let timer = b.timer;
    let lap = move |t: Instant| t.elapsed().saturating_sub(timer).as_nanos() as f64;
    for _ in 0..CROSSINGS {
        let t = Instant::now();
        b.process.esp_batch(b.area.as_mut_slice(), &refused, &mut st).unwrap();
        c.ring.push(lap(t));
    }
    assert_eq!(st[0], EspStatus::OutOfBounds);
    // One real 64 B encrypt per call on each backend.
    let mut descs = [EspDescriptor::encrypt(b.process_s.sa.outbound, 0, 0, 0)];
    for inline in [true, false] {
        let (e, buf, s, samples): (&mut dyn Enclave, &mut [u8], &mut Subject, &mut Vec<f64>) = if inline {
            (&mut b.inline, &mut b.inline_buf, &mut b.inline_s, &mut c.one_inline)
        } else {
            (&mut b.process, b.area.as_mut_slice(), &mut b.process_s, &mut c.one_process)
        };
        for _ in 0..CROSSINGS {
            let len = lay_out(buf, 0, 64, 0);
            descs[0] = EspDescriptor::encrypt(s.sa.outbound, 0, len, s.next_seq);
            s.next_seq += 1;
            let t = Instant::now();
            e.esp_batch(buf, &descs, &mut st).unwrap();
            samples.push(lap(t));
            assert_eq!(st[0], EspStatus::Ok);
        }
    }
    // Crossings that find the enclave asleep on its doorbell (idle longer than its spin).
    for _ in 0..COLD {
        std::thread::sleep(Duration::from_millis(1));
        let t = Instant::now();
        b.process.esp_batch(b.area.as_mut_slice(), &refused, &mut st).unwrap();
        c.cold.push(lap(t));
    }
}

fn print_crossing(c: &mut Crossing, timer: Duration) {
    let show = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!(
            "median {:.0} ns (p10 {:.0}, p90 {:.0})",
            percentile(v, 0.5),
            percentile(v, 0.1),
            percentile(v, 0.9)
        )
    };
    println!(
        "crossing round trip (process rings, synchronous esp_batch, {} calls each; clock cost {} ns taken off):",
        c.ring.len(),
        timer.as_nanos()
    );
    println!("  1 descriptor refused by the transport, enclave polling:  {}", show(&mut c.ring));
    println!("  1 x 64 B encrypt, inline call:                           {}", show(&mut c.one_inline));
    println!("  1 x 64 B encrypt, process call:                          {}", show(&mut c.one_process));
    println!(
        "  crossing cost of one call (process - inline, medians):   {:.0} ns",
        percentile(&c.one_process, 0.5) - percentile(&c.one_inline, 0.5)
    );
    println!(
        "  1 descriptor refused, enclave asleep ({} calls after 1 ms idle): {}",
        c.cold.len(),
        show(&mut c.cold)
    );
}

/// Resident set of a process, from /proc (bytes), if readable.
fn rss(pid: u32) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: usize = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Trusted memory for 1000 IKE SAs (before and after clear-and-seal) and 1000 ESP SAs
/// (directional: 500 child SA pairs), on both backends, from `memory_report()`.
fn memory() {
    const IKE: usize = 1000;
    const ESP_PAIRS: usize = 500;
    let mut peer = start_inline(7);
    let mut inline = start_inline(7);
    let mut process = start_process(7);
    let pid = process.pid().unwrap();
    let rss0 = rss(pid);
    let mut reports: Vec<[MemoryReport; 5]> = Vec::new();
    for e in [&mut inline as &mut dyn Enclave, &mut process as &mut dyn Enclave] {
        let empty = e.memory_report();
        let (psk_e, psk_p) = (psk(e), psk(&mut peer));
        let mut ikes: Vec<IkeSaHandle> = Vec::with_capacity(IKE);
        for i in 0..IKE {
            // Each SA as IKE_AUTH leaves it before clear-and-seal: the peer authenticated.
            // The peer's half is deleted at once: only `e`'s memory is measured.
            let spis = (0x1000 + i as u64, 0x9000 + i as u64);
            let h =
                testing::ike_sa_init(&mut *e, &mut peer, DhGroup::Curve25519, Prf::HmacSha256, SUITE, spis)
                    .unwrap();
            h.authenticate_psk(&mut *e, &mut peer, psk_e, psk_p).unwrap();
            peer.ike_sa_delete(h.ike_b).unwrap();
            ikes.push(h.ike_a);
        }
        let with_ike = e.memory_report();
        let mut blobs = Vec::with_capacity(IKE);
        for &h in &ikes {
            blobs.push(e.clear_and_seal(h).unwrap());
        }
        let sealed = e.memory_report();
        // The peer's Nonce Data of each CREATE_CHILD_SA.
        let nr = [2u8; 32];
        let mut outbound = Vec::with_capacity(ESP_PAIRS);
        for i in 0..ESP_PAIRS {
            let mut ni = [0u8; IKE_NONCE_LEN];
            e.ike_nonces(&mut ni).unwrap();
            let params = ChildSaParams {
                role: Role::Initiator,
                suite: SUITE,
                esn: false,
                nonce_i: &ni,
                nonce_r: &nr,
                spi_inbound: 0x10_0000 + 2 * i as u32,
                spi_outbound: 0x10_0001 + 2 * i as u32,
            };
            outbound.push(
                e.child_sa_create(ikes[i % IKE], Some(&blobs[i % IKE]), None, &params).unwrap().outbound,
            );
        }
        let with_esp = e.memory_report();
        // One 64 B packet on every outbound SA: each expands its key into the key cache,
        // which then holds as many as it ever will.
        let mut buf = vec![0u8; BATCH * STRIDE];
        let mut st = [EspStatus::NotProcessed; BATCH];
        for chunk in outbound.chunks(BATCH) {
            let descs: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(k, &sa)| {
                    let len = lay_out(&mut buf, k * STRIDE, 64, 0);
                    EspDescriptor::encrypt(sa, (k * STRIDE) as u32, len, 1)
                })
                .collect();
            let n = descs.len();
            assert_eq!(e.esp_batch(&mut buf, &descs, &mut st[..n]).unwrap().ok, n as u32);
        }
        let with_traffic = e.memory_report();
        reports.push([empty, with_ike, sealed, with_esp, with_traffic]);
    }
    let rss1 = rss(pid);
    let mb = |b: usize| b as f64 / 1e6;
    println!("trusted memory (memory_report; MB = 10^6 bytes):");
    for (name, r) in ["inline", "process"].iter().zip(&reports) {
        let [empty, ike, sealed, esp, busy] = r;
        println!(
            "  {name:<7} {} IKE SAs before clear_and_seal: {} bytes = {:.3} MB ({} per SA; all trusted memory +{:.3} MB)",
            ike.ike_sas,
            ike.ike_sa_bytes,
            mb(ike.ike_sa_bytes),
            ike.per_ike_sa(),
            mb(ike.total() - empty.total()),
        );
        println!(
            "  {name:<7} {} IKE SAs after clear_and_seal:  {} bytes = {:.3} MB ({} per SA; all trusted memory +{:.3} MB)",
            sealed.ike_sas,
            sealed.ike_sa_bytes,
            mb(sealed.ike_sa_bytes),
            sealed.per_ike_sa(),
            mb(sealed.total() - empty.total()),
        );
        // All trusted memory the ESP SAs added: their state, the key cache and the growth
        // of the ESP table's slot array (nothing else changes between the two reports).
        let esp_all = |r: &MemoryReport| r.total() - sealed.total();
        println!(
            "  {name:<7} {} ESP SAs (directional, {} child SA pairs), no traffic yet: {} bytes = {:.3} MB \
             ({} per SA; with the table's slots: +{:.3} MB, {} per SA)",
            esp.esp_sas,
            esp.esp_sas / 2,
            esp.esp_sa_bytes,
            mb(esp.esp_sa_bytes),
            esp.per_esp_sa(),
            mb(esp_all(esp)),
            esp_all(esp) / esp.esp_sas,
        );
        println!(
            "  {name:<7} {} ESP SAs after one packet on each outbound SA (key cache full): {} bytes = {:.3} MB \
             ({} per SA; with the table's slots: +{:.3} MB, {} per SA)",
            busy.esp_sas,
            busy.esp_sa_bytes,
            mb(busy.esp_sa_bytes),
            busy.per_esp_sa(),
            mb(esp_all(busy)),
            esp_all(busy) / busy.esp_sas,
        );
    }
    if let (Some(a), Some(b)) = (rss0, rss1) {
        println!(
            "  enclave process resident set: {:.1} MB at start, {:.1} MB with all of the above (allocator included)",
            mb(a),
            mb(b)
        );
    }
    let p = &reports[1];
    println!(
        "  goal: <= 0.5 MB per 1000 ESP SAs -> {:.3} MB (key cache full, table slots included); <= 1 MB per 1000 \
         IKE SAs -> {:.3} MB ({:.3} MB before clear_and_seal)",
        mb((p[4].total() - p[2].total()) * 1000 / p[4].esp_sas),
        mb(p[2].per_ike_sa() * 1000),
        mb(p[1].per_ike_sa() * 1000),
    );
}
