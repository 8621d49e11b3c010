//! `cloister ike-load`: an IKEv2 load generator. It drives the sans-IO engine
//! (`ike::Endpoint`) as initiator over UDP for N tunnels, at most W under way at once,
//! counts completed IKE_AUTH exchanges (IKE SA and its first child SA established) per
//! second, and prints the rate and setup-time percentiles. `bench/ike-setup.sh` runs it
//! against Cloister's gateway and against strongSwan (docs/bench-ike.md).
//!
//! The initiator's enclave is the **inline** backend: the load generator's own PSK, DH
//! secrets and SK_* live in this process. That is fine for a load generator (it is the
//! "tenant site", not the gateway under test) and keeps enclave crossings off the
//! initiator's side of the measurement.
//!
//! Every tunnel uses one connection: PSK authentication with one identity (`--local-id`),
//! IKE from port 500 of `--local` to port 500 of `--remote` (port 4500 is bound too, for
//! NAT-T), the first child SA with `--local-ts`/`--remote-ts`. The responder must accept
//! many IKE SAs from one address and identity (and must not act on INITIAL_CONTACT,
//! which the engine sends). Every wait is bounded by `--timeout`.

use core::net::{IpAddr, SocketAddr};
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use enclave::attest::{CodeIdentity, SoftwareAttestation};
use enclave::{Enclave, EnclaveConfig, InlineEnclave, Limits, ProvisioningKey, SecretKind, TenantId};
use ike::{Endpoint, EndpointConfig, Event, SaId};
use zeroize::Zeroizing;

/// The enclave's DH limit (`Limits::max_dh`) bounds the half-open SAs of one endpoint.
const MAX_WINDOW: usize = 1000;
/// Tunnels per run at most (enclave IKE SA limit 65,535; two ESP SAs per tunnel).
const MAX_TUNNELS: usize = 30_000;
/// The longest the loop sleeps without looking at the clock.
const MAX_WAIT: Duration = Duration::from_millis(50);
/// Batched receives (of up to 64 datagrams) per socket per round.
const READS_PER_ROUND: usize = 16;
/// How long `--delete` waits for the responder's answers.
const DELETE_WAIT: Duration = Duration::from_secs(5);
/// The connection's name.
const CONN: &str = "load";
/// Characters not allowed in values pasted into the generated TOML.
const TOML_UNSAFE: [char; 4] = ['"', '\\', '\n', '\r'];

/// Arguments of `cloister ike-load`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Args {
    /// Our address: IKE leaves from port 500 of it (4500 is bound too, for NAT-T).
    #[arg(long)]
    local: IpAddr,
    /// The responder's address (port 500).
    #[arg(long)]
    remote: IpAddr,
    /// IKE proposal, strongSwan syntax.
    #[arg(long, default_value = "aes256gcm16-prfsha256-x25519")]
    proposal: String,
    /// ESP proposal of the first child SA, strongSwan syntax.
    #[arg(long, default_value = "aes256gcm16")]
    esp: String,
    /// Our identity (IDi), the same for every tunnel.
    #[arg(long, default_value = "load.cloister.test")]
    local_id: String,
    /// The identity the responder must show ("%any": any).
    #[arg(long, default_value = "%any")]
    remote_id: String,
    /// A file holding the pre-shared key (a trailing newline is not part of it).
    #[arg(long)]
    psk_file: PathBuf,
    /// The child SA's local traffic selector (inner addresses, not the outer ones).
    #[arg(long, default_value = "198.19.1.0/24")]
    local_ts: String,
    /// The child SA's remote traffic selector.
    #[arg(long, default_value = "198.19.2.0/24")]
    remote_ts: String,
    /// Tunnels to set up in all.
    #[arg(long, default_value_t = 100)]
    tunnels: usize,
    /// Tunnels under way (initiated, not yet established or failed) at most.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Give up on tunnels still under way after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// First retransmission interval in milliseconds (each next one doubles).
    #[arg(long, default_value_t = 2000)]
    retransmit_ms: u64,
    /// Delete the established IKE SAs at the end (waits at most 5 s for the answers).
    #[arg(long)]
    delete: bool,
}

/// The checks clap cannot make: sizes, timers, and values that go into the generated TOML.
fn validate(a: &Args) -> anyhow::Result<()> {
    anyhow::ensure!((1..=MAX_TUNNELS).contains(&a.tunnels), "--tunnels must be 1 to {MAX_TUNNELS}");
    anyhow::ensure!((1..=MAX_WINDOW).contains(&a.window), "--window must be 1 to {MAX_WINDOW}");
    anyhow::ensure!((1..=3600).contains(&a.timeout), "--timeout must be 1 to 3600 seconds");
    anyhow::ensure!((100..=60_000).contains(&a.retransmit_ms), "--retransmit-ms must be 100 to 60000");
    anyhow::ensure!(a.local.is_ipv4() == a.remote.is_ipv4(), "--local and --remote must be one family");
    anyhow::ensure!(!a.local.is_unspecified(), "--local must be a concrete address");
    for (name, v) in [
        ("--proposal", &a.proposal),
        ("--esp", &a.esp),
        ("--local-id", &a.local_id),
        ("--remote-id", &a.remote_id),
        ("--local-ts", &a.local_ts),
        ("--remote-ts", &a.remote_ts),
    ] {
        anyhow::ensure!(!v.is_empty() && !v.contains(TOML_UNSAFE), "{name} is empty or holds a quote");
    }
    Ok(())
}

/// The initiator's connection, in the gateway's (swanctl.conf's) vocabulary.
fn connection_toml(a: &Args) -> String {
    format!(
        r#"[connections.{CONN}]
local_addrs = ["{local}"]
remote_addrs = ["{remote}"]
proposals = ["{proposal}"]
[connections.{CONN}.local]
auth = "psk"
id = "{local_id}"
secret = "psk"
[connections.{CONN}.remote]
auth = "psk"
id = "{remote_id}"
[connections.{CONN}.children.net]
local_ts = ["{local_ts}"]
remote_ts = ["{remote_ts}"]
esp_proposals = ["{esp}"]
"#,
        local = a.local,
        remote = a.remote,
        proposal = a.proposal,
        local_id = a.local_id,
        remote_id = a.remote_id,
        local_ts = a.local_ts,
        remote_ts = a.remote_ts,
        esp = a.esp,
    )
}

/// The nearest-rank percentile (`permille` of 1000) of sorted samples; `None` when empty.
fn percentile(sorted: &[Duration], permille: usize) -> Option<Duration> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = (permille.min(1000) * n).div_ceil(1000).clamp(1, n);
    sorted.get(rank - 1).copied()
}

/// Milliseconds with a fraction, for printing.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What is known about one tunnel under way.
#[derive(Debug, Clone, Copy)]
struct Pending {
    started: Instant,
    ike_up: bool,
}

/// The outcome of a run.
#[derive(Debug, Default)]
struct Outcome {
    /// Setup times of the established tunnels (initiate to first child SA ready).
    setups: Vec<Duration>,
    failed: usize,
    /// Established IKE SAs (for `--delete`).
    established: Vec<SaId>,
    /// Why tunnels failed, first few (error texts).
    reasons: HashMap<String, usize>,
}

impl Outcome {
    fn fail(&mut self, why: String) {
        self.failed += 1;
        *self.reasons.entry(why).or_default() += 1;
    }
}

/// The initiator's two sockets (port 500 and 4500 of `--local`), with the I/O crate's
/// 4 MiB socket buffers (a burst of answers must not overflow them) and batched receives.
struct Sockets {
    ike: cio::udp::UdpSocket,
    natt: cio::udp::UdpSocket,
    rx: cio::RecvBuffers,
}

impl Sockets {
    fn bind(local: IpAddr) -> anyhow::Result<Self> {
        let bind = |port| -> anyhow::Result<cio::udp::UdpSocket> {
            let addr = SocketAddr::new(local, port);
            cio::udp::UdpSocket::bind(addr, false, false).with_context(|| format!("binding {addr}"))
        };
        let ike = bind(ike::IKE_PORT)?;
        let rx = ike.recv_buffers(64, 65_535);
        Ok(Self { ike, natt: bind(ike::NATT_PORT)?, rx })
    }

    fn send<E: Enclave>(&self, ep: &mut Endpoint<E>) {
        while let Some(t) = ep.poll_transmit() {
            let s = if t.local.port() == ike::NATT_PORT { &self.natt } else { &self.ike };
            // A datagram the kernel refuses is lost like one on the wire: retransmission.
            let _ = s.send(core::iter::once(cio::Outgoing { dst: t.remote, tos: 0, bytes: &t.contents }));
        }
    }

    fn receive<E: Enclave>(&mut self, ep: &mut Endpoint<E>) {
        for s in [&self.ike, &self.natt] {
            let local = s.local_addr();
            for _ in 0..READS_PER_ROUND {
                // WouldBlock ends this socket's turn; ICMP-reported errors too.
                if !matches!(s.recv(&mut self.rx), Ok(n) if n > 0) {
                    break;
                }
                let now = Instant::now();
                for d in self.rx.datagrams() {
                    ep.handle_datagram(now, d.remote, local, d.bytes);
                }
            }
        }
    }

    fn wait(&self, timeout: Duration) {
        let _ = cio::poll::wait_readable(&[self.ike.as_fd(), self.natt.as_fd()], timeout);
    }
}

/// Runs the engine's timers if due and waits for input until its next timer (at most
/// `MAX_WAIT`, and not past `deadline`).
fn tick<E: Enclave>(ep: &mut Endpoint<E>, socks: &mut Sockets, deadline: Instant) {
    let now = Instant::now();
    if ep.poll_timeout().is_some_and(|t| t <= now) {
        ep.handle_timeout(now);
    }
    socks.send(ep);
    let until = ep.poll_timeout().map_or(MAX_WAIT, |t| t.saturating_duration_since(now));
    socks.wait(until.min(MAX_WAIT).min(deadline.saturating_duration_since(now)));
    socks.receive(ep);
}

/// A fresh inline enclave for tenant 1 with the PSK provisioned, and its handle.
fn enclave_with_psk(psk: &[u8], tunnels: usize) -> anyhow::Result<(InlineEnclave, enclave::SecretHandle)> {
    // A random provisioning key: it only carries our own PSK into our own enclave.
    let mut key = Zeroizing::new([0u8; 32]);
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(key.as_mut()))
        .context("reading /dev/urandom")?;
    let sas = (tunnels + 64).min(65_535);
    let config = EnclaveConfig {
        tenant: TenantId(1),
        provisioning_key: ProvisioningKey::from_bytes(*key),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits { max_ike_sas: sas, max_esp_sas: (2 * sas).min(65_535), ..Limits::default() },
    };
    let platform_key = SoftwareAttestation::generate_platform_key()?;
    let attestation = SoftwareAttestation::new(
        &platform_key,
        CodeIdentity::CurrentExecutable,
        &config.measured_bytes(enclave::Backend::Inline),
    )?;
    let mut e = InlineEnclave::start(config, Box::new(attestation))?;
    let blob = enclave::provision::wrap_secret(
        &ProvisioningKey::from_bytes(*key),
        TenantId(1),
        SecretKind::PreSharedKey,
        psk,
    )?;
    let handle = e.provision_secret(&blob)?;
    Ok((e, handle))
}

fn read_psk(path: &std::path::Path) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    let mut psk = Zeroizing::new(Vec::new());
    std::fs::File::open(path)
        .and_then(|f| f.take(1 << 16).read_to_end(&mut psk))
        .with_context(|| format!("reading {}", path.display()))?;
    while psk.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        psk.pop();
    }
    anyhow::ensure!(!psk.is_empty(), "{} holds no PSK", path.display());
    Ok(psk)
}

/// Handles the engine's events: setups complete, fail, or SAs go away.
fn on_events<E: Enclave>(ep: &mut Endpoint<E>, pending: &mut HashMap<SaId, Pending>, out: &mut Outcome) {
    while let Some(e) = ep.poll_event() {
        // A tunnel under way that failed, and why.
        let failed = match e {
            Event::IkeSaEstablished { sa, .. } => {
                if let Some(p) = pending.get_mut(&sa) {
                    p.ike_up = true;
                }
                None
            }
            Event::ChildSaReady { sa, .. } => match pending.remove(&sa) {
                Some(p) if p.ike_up => {
                    out.setups.push(p.started.elapsed());
                    out.established.push(sa);
                    None
                }
                Some(_) => Some((sa, "child SA before IKE SA".to_owned())),
                None => None,
            },
            Event::ChildSaFailed { sa, error, .. } => Some((sa, format!("child SA: {error}"))),
            Event::IkeSaFailed { sa, error, .. } => Some((sa, format!("IKE SA: {error}"))),
            Event::IkeSaDeleted { sa, reason } => {
                out.established.retain(|s| *s != sa);
                Some((sa, format!("IKE SA deleted: {reason:?}")))
            }
            _ => None,
        };
        if let Some((sa, why)) = failed {
            // Only tunnels still under way count (the child-before-IKE case is removed already).
            if pending.remove(&sa).is_some() || why.starts_with("child SA before") {
                out.fail(why);
            }
        }
    }
}

/// Runs `cloister ike-load`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    validate(&args)?;
    let psk = read_psk(&args.psk_file)?;
    let (enclave, psk_handle) = enclave_with_psk(&psk, args.tunnels)?;
    drop(psk);
    let config = EndpointConfig {
        retransmit_timeout: Duration::from_millis(args.retransmit_ms),
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(enclave, config);
    ep.add_secret("psk", psk_handle);
    let conns = ike::Config::from_toml(&connection_toml(&args)).context("the initiator's connection")?;
    for c in conns.connections {
        ep.add_connection(c).context("the initiator's connection")?;
    }
    let mut socks = Sockets::bind(args.local)?;
    println!(
        "ike-load: {} -> {} {} (esp {}), {} tunnels, window {}, PSK as {}, inline enclave (initiator keys in this process)",
        args.local, args.remote, args.proposal, args.esp, args.tunnels, args.window, args.local_id
    );

    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.timeout);
    let mut pending: HashMap<SaId, Pending> = HashMap::new();
    let mut out = Outcome::default();
    let mut started = 0;
    let mut last_done = start;
    while out.setups.len() + out.failed < args.tunnels && Instant::now() < deadline {
        while started < args.tunnels && pending.len() < args.window {
            let now = Instant::now();
            match ep.initiate(now, CONN) {
                Ok(sa) => {
                    pending.insert(sa, Pending { started: now, ike_up: false });
                }
                Err(e) => out.fail(format!("initiate: {e}")),
            }
            started += 1;
            // Send each IKE_SA_INIT at once: the next initiation's DH takes a while.
            socks.send(&mut ep);
        }
        let before = out.setups.len();
        tick(&mut ep, &mut socks, deadline);
        on_events(&mut ep, &mut pending, &mut out);
        if out.setups.len() > before {
            last_done = Instant::now();
        }
    }
    let timed_out = pending.len();
    for _ in 0..timed_out {
        out.fail("no answer within --timeout".into());
    }

    let done = out.setups.len();
    let span = last_done.saturating_duration_since(start);
    let rate = if done > 0 && !span.is_zero() { done as f64 / span.as_secs_f64() } else { 0.0 };
    out.setups.sort_unstable();
    let p = |permille| percentile(&out.setups, permille).map_or(0.0, ms);
    let (p50, p90, p99, max) = (p(500), p(900), p(990), p(1000));
    let min = out.setups.first().copied().map_or(0.0, ms);
    let retransmits = ep.counters().retransmits;
    println!(
        "ike-load: established {done}/{} failed {} in {:.3} s: {rate:.1} tunnels/s; setup ms min {min:.2} p50 {p50:.2} \
         p90 {p90:.2} p99 {p99:.2} max {max:.2}; retransmits {retransmits}",
        args.tunnels,
        out.failed,
        span.as_secs_f64()
    );
    let mut reasons: Vec<_> = out.reasons.iter().collect();
    reasons.sort();
    for (why, n) in reasons {
        println!("ike-load: {n} failed: {why}");
    }
    println!(
        "ike-load result established={done} failed={} seconds={:.3} rate={rate:.1} min_ms={min:.2} p50_ms={p50:.2} \
         p90_ms={p90:.2} p99_ms={p99:.2} max_ms={max:.2} retransmits={retransmits}",
        out.failed,
        span.as_secs_f64()
    );

    if args.delete {
        let now = Instant::now();
        for sa in out.established.clone() {
            let _ = ep.delete_ike(now, sa);
        }
        let until = Instant::now() + DELETE_WAIT;
        while !out.established.is_empty() && Instant::now() < until {
            tick(&mut ep, &mut socks, until);
            on_events(&mut ep, &mut pending, &mut out);
        }
        println!("ike-load: deleted, {} IKE SA(s) left unanswered", out.established.len());
    }
    anyhow::ensure!(done > 0, "no tunnel was established");
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args() -> Args {
        Args {
            local: "198.18.0.1".parse().unwrap(),
            remote: "198.18.0.2".parse().unwrap(),
            proposal: "aes256-sha256-modp3072".into(),
            esp: "aes256-sha256".into(),
            local_id: "load.cloister.test".into(),
            remote_id: "%any".into(),
            psk_file: "psk".into(),
            local_ts: "198.19.1.0/24".into(),
            remote_ts: "198.19.2.0/24".into(),
            tunnels: 100,
            window: 16,
            timeout: 60,
            retransmit_ms: 2000,
            delete: false,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let d = |m| Duration::from_millis(m);
        assert_eq!(percentile(&[], 500), None);
        assert_eq!(percentile(&[d(7)], 0), Some(d(7)));
        assert_eq!(percentile(&[d(7)], 990), Some(d(7)));
        let v: Vec<_> = (1..=100).map(d).collect();
        assert_eq!(percentile(&v, 500), Some(d(50)));
        assert_eq!(percentile(&v, 900), Some(d(90)));
        assert_eq!(percentile(&v, 990), Some(d(99)));
        assert_eq!(percentile(&v, 1000), Some(d(100)));
        assert_eq!(percentile(&v, 5000), Some(d(100)));
        assert_eq!(percentile(&v, 0), Some(d(1)));
        let odd: Vec<_> = (1..=5).map(d).collect();
        assert_eq!(percentile(&odd, 500), Some(d(3)));
        assert_eq!(percentile(&odd, 990), Some(d(5)));
    }

    #[test]
    fn arguments_are_checked() {
        assert!(validate(&args()).is_ok());
        let bad: [fn(&mut Args); 9] = [
            |a| a.tunnels = 0,
            |a| a.tunnels = MAX_TUNNELS + 1,
            |a| a.window = 0,
            |a| a.window = MAX_WINDOW + 1,
            |a| a.timeout = 0,
            |a| a.retransmit_ms = 10,
            |a| a.remote = "2001:db8::2".parse().unwrap(),
            |a| a.local_id = "x\" = 1".into(),
            |a| a.proposal = String::new(),
        ];
        for f in bad {
            let mut a = args();
            f(&mut a);
            assert!(validate(&a).is_err(), "{a:?}");
        }
    }

    #[test]
    fn connection_parses() {
        let c = ike::Config::from_toml(&connection_toml(&args())).unwrap();
        assert_eq!(c.connections.len(), 1);
        assert_eq!(c.connections[0].name, CONN);
    }
}
