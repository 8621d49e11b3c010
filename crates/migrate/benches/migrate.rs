//! Migration benchmark driver for `bench/migrate.sh` (which makes the SoftHSM2 token and
//! sets `SOFTHSM2_CONF`): the time of one migration (export, HSM steps, import, deletion of
//! the one-time keys) by state size and by number of concurrent migrations, in the three
//! modes of `cloister_migrate::flow`. Inline enclaves (the performance reference); key
//! generation (HSM key pair, destination key pair) is prepared before the clock starts and
//! reported separately.
//!
//! Environment: `MIGRATE_SIZES` (bytes, comma-separated), `MIGRATE_CONCURRENCY`,
//! `MIGRATE_CONCURRENT_SIZE` (bytes per migration in the concurrency runs), `MIGRATE_RUNS`,
//! `MIGRATE_BITS` (RSA bits of both key pairs), `MIGRATE_OUT` (directory for the PNG and
//! the audit log), `MIGRATE_TOKEN`, `MIGRATE_PIN`. Output: one `result …` line per
//! measurement, a table, the plot.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
#![allow(clippy::cast_possible_truncation)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use cloister_migrate::flow::label_measurement;
use cloister_migrate::{AuditLog, Flow, Hsm, HsmConfig, Measurement, Mode, OaepHash, Pin};
use enclave_core::attest::{CodeIdentity, SoftwareAttestation};
use enclave_core::migration::DestinationKey;
use enclave_core::provision::wrap_secret;
use enclave_core::{Enclave, EnclaveConfig, InlineEnclave, Limits, ProvisioningKey, SecretKind, TenantId};
use plotters::prelude::*;

const TENANT: TenantId = TenantId(1);
const PROV_KEY: [u8; 32] = [0x42; 32];
const MODES: [Mode; 3] = [Mode::HsmEnvelope, Mode::EnclaveOnly, Mode::HsmBulk];

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().expect("a number"))
        .collect()
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().map_or(default, |s| s.parse().expect("a number"))
}

fn inline(pk: &[u8]) -> (InlineEnclave, Vec<u8>, Measurement) {
    // Source and destination run on one platform, which their configuration trusts.
    let own = SoftwareAttestation::new(pk, CodeIdentity::Bytes(vec![]), b"").unwrap();
    let c = EnclaveConfig {
        tenant: TENANT,
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: vec![own.platform_public_key().to_vec()],
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    };
    let att = SoftwareAttestation::new(
        pk,
        CodeIdentity::Bytes(b"bench".to_vec()),
        &c.measured_bytes(enclave_core::Backend::Inline),
    )
    .unwrap();
    let public = att.platform_public_key().to_vec();
    let m = label_measurement(&att_measurement(&att)).unwrap();
    (InlineEnclave::start(c, Box::new(att)).unwrap(), public, m)
}

fn att_measurement(att: &SoftwareAttestation) -> enclave_core::attest::Measurement {
    enclave_core::attest::AttestationProvider::measurement(att)
}

/// A source with one PSK and `size` bytes of untrusted state, a destination, and the keys
/// of one migration, made before the clock starts.
struct Prepared {
    src: InlineEnclave,
    dst: InlineEnclave,
    measurement: Measurement,
    keys: Option<cloister_migrate::HsmKeys>,
    dkey: DestinationKey,
    untrusted: Vec<u8>,
}

fn prepare(flow: &Flow<'_>, pk: &[u8], size: usize, bits: usize, keygen: &mut Vec<f64>) -> Prepared {
    let (mut src, _, measurement) = inline(pk);
    let (mut dst, dst_pk, _) = inline(pk);
    let blob =
        wrap_secret(&ProvisioningKey::from_bytes(PROV_KEY), TENANT, SecretKind::PreSharedKey, &[7; 32])
            .unwrap();
    src.provision_secret(&blob).unwrap();
    let keys = flow.prepare_hsm(&measurement).unwrap();
    let t = Instant::now();
    let dkey = flow.prepare_destination(&mut dst, &dst_pk, &measurement, TENANT, bits).unwrap();
    keygen.push(t.elapsed().as_secs_f64());
    let untrusted = (0..size).map(|i| (i as u8).wrapping_mul(31)).collect();
    Prepared { src, dst, measurement, keys, dkey, untrusted }
}

/// The timed part: export, HSM steps, import, confirmation.
fn run(flow: &Flow<'_>, p: &mut Prepared) {
    let transfer = flow.export(p.keys.as_ref(), &p.dkey, &mut p.src, &p.untrusted).unwrap();
    let restored = flow.import(transfer, &p.dkey, &mut p.dst, &p.measurement).unwrap();
    assert_eq!(restored.untrusted_state.len(), p.untrusted.len());
    flow.confirm(p.keys.as_ref()).unwrap();
}

/// Runs the prepared migrations at once, one worker thread each, and returns the wall time
/// from the first one's start to the last one's end (each worker reads the clock itself, so
/// the figure does not wait for this thread to be scheduled). The workers exist (and, with
/// `pin`, sit on CPU `i % cores`) before they are released together, so the figure is the
/// migrations' own and not how long the scheduler took to spread newly made threads:
/// unpinned and spawned on the clock, one of two threads now and then waited a scheduler
/// tick (about 4 ms) on its sibling's core.
fn concurrently(flow: &Flow<'_>, ps: &mut [Prepared], cores: usize, pin: bool) -> f64 {
    let start = std::sync::Barrier::new(ps.len());
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let start = &start;
        let workers: Vec<_> = ps
            .iter_mut()
            .enumerate()
            .map(|(i, p)| {
                s.spawn(move || {
                    if pin {
                        pin_this_thread(i % cores);
                    }
                    start.wait();
                    let t = Instant::now();
                    run(flow, p);
                    (t, Instant::now())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    (last - first).as_secs_f64()
}

/// Pins the calling thread to `cpu`.
fn pin_this_thread(cpu: usize) {
    // SAFETY: cpu_set_t is a plain bit array (all zeros: empty); `cpu` is below the machine's
    // CPU count, far below CPU_SETSIZE; sched_setaffinity only reads the set.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Stat { median, min: v[0], max: v[n - 1] }
}

/// Times `one(flow, x)` `runs` times for every `x` in every mode, printing one result line
/// per point (named by `label(mode, x)`), and returns each mode's points.
fn sweep(
    hsm: &Hsm,
    xs: &[usize],
    runs: usize,
    label: impl Fn(Mode, usize) -> String,
    mut one: impl FnMut(&Flow<'_>, usize) -> f64,
) -> Vec<(Mode, Vec<(usize, Stat)>)> {
    let mut out = Vec::new();
    for mode in MODES {
        let flow = Flow::new(mode, (mode != Mode::EnclaveOnly).then_some(hsm)).unwrap();
        let mut points = Vec::new();
        for &x in xs {
            let s = stat((0..runs).map(|_| one(&flow, x)).collect());
            println!(
                "result {} median_s={:.4} min_s={:.4} max_s={:.4}",
                label(mode, x),
                s.median,
                s.min,
                s.max
            );
            points.push((x, s));
        }
        out.push((mode, points));
    }
    out
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}MB", b >> 20),
        b if b >= 1 << 10 => format!("{}KB", b >> 10),
        b => format!("{b}B"),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let sizes = env_list("MIGRATE_SIZES", "1024,1048576,10485760,104857600,209715200");
    let conc = env_list("MIGRATE_CONCURRENCY", "1,2,4,10");
    let conc_size = env_num("MIGRATE_CONCURRENT_SIZE", 10 << 20);
    let runs = env_num("MIGRATE_RUNS", 5);
    let bits = env_num("MIGRATE_BITS", 3072);
    let out = PathBuf::from(std::env::var("MIGRATE_OUT").unwrap_or_else(|_| "target/bench-migrate".into()));
    std::fs::create_dir_all(&out).unwrap();
    let token = std::env::var("MIGRATE_TOKEN").unwrap_or_else(|_| "cloister-test".into());
    let pin = std::env::var("MIGRATE_PIN").unwrap_or_else(|_| "cloister-user-test".into());
    let config = HsmConfig { oaep_hash: OaepHash::Sha1, rsa_bits: bits as u32, ..HsmConfig::new(token) };
    let hsm = Hsm::open(config, Pin::new(pin), AuditLog::open(out.join("audit.jsonl")).unwrap()).unwrap();
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = std::env::var("PIN").map_or(true, |v| v != "0") && cores >= 2;
    println!(
        "# migrate bench: {runs} runs, RSA-{bits} (OAEP-SHA-1, SoftHSM2), {cores} cores, inline enclaves, \
         concurrent workers {}",
        if pin { "pinned round-robin to the cores (PIN=0: not pinned)" } else { "not pinned" }
    );

    let mut keygen = Vec::new();
    let by_size = sweep(
        &hsm,
        &sizes,
        runs,
        |mode, size| format!("size mode={} bytes={size}", mode.name()),
        |flow, size| {
            let mut p = prepare(flow, &pk, size, bits, &mut keygen);
            let t = Instant::now();
            run(flow, &mut p);
            t.elapsed().as_secs_f64()
        },
    );
    let by_conc = sweep(
        &hsm,
        &conc,
        runs,
        |mode, n| format!("concurrency mode={} n={n} bytes_each={conc_size}", mode.name()),
        |flow, n| {
            let mut ps: Vec<Prepared> =
                (0..n).map(|_| prepare(flow, &pk, conc_size, bits, &mut keygen)).collect();
            concurrently(flow, &mut ps, cores, pin)
        },
    );

    let kg = stat(keygen);
    println!(
        "result keygen destination_rsa{bits}_s median={:.3} min={:.3} max={:.3} (prepared off the timed path)",
        kg.median, kg.min, kg.max
    );
    println!();
    println!("## Migration time by state size (s, median [min–max] of {runs})");
    print!("| size |");
    for m in MODES {
        print!(" {} |", m.name());
    }
    println!("\n|---|---|---|---|");
    for (i, &size) in sizes.iter().enumerate() {
        print!("| {} |", human(size));
        for (_, pts) in &by_size {
            let s = &pts[i].1;
            print!(" {:.4} [{:.4}–{:.4}] |", s.median, s.min, s.max);
        }
        println!();
    }
    println!();
    println!("## Concurrent migrations of {} each: wall time (s) and scaling", human(conc_size));
    println!("scaling = (n / t_n) / (1 / t_1) / min(n, {cores} cores): 1.0 is linear up to the core count");
    print!("| n |");
    for m in MODES {
        print!(" {} | scaling |", m.name());
    }
    println!("\n|---|---|---|---|---|---|---|");
    for (i, &n) in conc.iter().enumerate() {
        print!("| {n} |");
        for (_, pts) in &by_conc {
            let t1 = pts[0].1.median;
            let s = &pts[i].1;
            let scaling = (n as f64 / s.median) * t1 / n.min(cores) as f64;
            print!(" {:.4} [{:.4}–{:.4}] | {scaling:.2} |", s.median, s.min, s.max);
        }
        println!();
    }

    let png = out.join("migrate.png");
    match plot(&png, &by_size, &by_conc, conc_size) {
        Ok(()) => println!("plot {}", png.display()),
        Err(e) => println!("plot failed: {e}"),
    }
    // bench/migrate.sh's last line comes from this one.
    let at = |mode: Mode| {
        by_size
            .iter()
            .find(|(m, _)| *m == mode)
            .and_then(|(_, pts)| pts.iter().find(|(s, _)| *s == 100 << 20))
            .map_or(f64::NAN, |(_, s)| s.median)
    };
    println!("migrate 100MB seconds hsm={:.3} baseline={:.3}", at(Mode::HsmEnvelope), at(Mode::EnclaveOnly));
}

fn colour(mode: Mode) -> RGBColor {
    match mode {
        Mode::HsmEnvelope => RGBColor(31, 119, 180),
        Mode::EnclaveOnly => RGBColor(44, 160, 44),
        Mode::HsmBulk => RGBColor(214, 39, 40),
    }
}

type Series = [(Mode, Vec<(usize, Stat)>)];

fn plot(path: &Path, by_size: &Series, by_conc: &Series, conc_size: usize) -> Result<(), String> {
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").map_err(|e| e.to_string())?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, font)
        .map_err(|_| "font".to_owned())?;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root
        .titled("Cloister enclave state migration (SoftHSM2, inline enclaves)", ("sans-serif", 24))
        .map_err(|x| e(&x))?;
    let panels = root.split_evenly((1, 2));

    let t_max = by_size.iter().flat_map(|(_, p)| p.iter().map(|(_, s)| s.max)).fold(0.01, f64::max) * 1.5;
    let t_min = by_size.iter().flat_map(|(_, p)| p.iter().map(|(_, s)| s.min)).fold(t_max, f64::min) / 1.5;
    let mb = |b: usize| b as f64 / f64::from(1 << 20);
    let x_min = by_size.iter().flat_map(|(_, p)| p.iter().map(|(b, _)| mb(*b))).fold(1e9, f64::min) / 1.5;
    let x_max = by_size.iter().flat_map(|(_, p)| p.iter().map(|(b, _)| mb(*b))).fold(0.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&panels[0])
        .caption("one migration: time by state size (median, min–max)", ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((x_min..x_max).log_scale(), (t_min..t_max).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("state size (MB)")
        .y_desc("seconds")
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (mode, pts) in by_size {
        let c = colour(*mode);
        chart
            .draw_series(LineSeries::new(pts.iter().map(|(b, s)| (mb(*b), s.median)), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(mode.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(
                pts.iter()
                    .map(|(b, s)| PathElement::new([(mb(*b), s.min), (mb(*b), s.max)], c.stroke_width(1))),
            )
            .map_err(|x| e(&x))?;
        chart
            .draw_series(pts.iter().map(|(b, s)| Circle::new((mb(*b), s.median), 3, c.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|x| e(&x))?;

    let n_max = by_conc.iter().flat_map(|(_, p)| p.iter().map(|(n, _)| *n)).max().unwrap_or(1) as f64;
    let rate = |n: usize, t: f64| n as f64 * mb(conc_size) / t;
    let r_max =
        by_conc.iter().flat_map(|(_, p)| p.iter().map(|(n, s)| rate(*n, s.min))).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&panels[1])
        .caption(
            format!("concurrent migrations of {} MB each: aggregate MB/s", mb(conc_size)),
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n_max + 1.0, 0.0..r_max)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("concurrent migrations")
        .y_desc("MB/s (all migrations)")
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (mode, pts) in by_conc {
        let c = colour(*mode);
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|(n, s)| (*n as f64, rate(*n, s.median))),
                c.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label(mode.name())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|(n, s)| Circle::new((*n as f64, rate(*n, s.median)), 3, c.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
