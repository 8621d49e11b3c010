//! Cloister's ESP data plane runtime: worker threads that join packet I/O ([`cio`]), the
//! sans-IO ESP core ([`esp`]) and the tenant's enclave.
//!
//! ```text
//!            TUN queue i ──read/GSO cut──▶ batch ──encapsulate (1 crossing)──▶ sendmmsg ──▶ peer
//! worker i:
//!   peer ──▶ recvmmsg (GRO cut) ──▶ batch ──decapsulate (1 crossing)──▶ write ──▶ TUN queue i
//! ```
//!
//! What it does: creates the TUN device (one queue per worker, offloads as the kernel
//! accepts), its MTU, addresses and routes; binds one UDP socket per worker for each
//! ESP-in-UDP endpoint (`SO_REUSEPORT`) and one raw ESP socket per family (every worker
//! sends with it, one reads it); installs
//! the static SAs and policies ([`config::Config`]) with their keys going straight into the
//! enclave; runs `N` workers (default: the available cores) until [`Dataplane::stop`];
//! counts every packet and every drop per worker ([`stats`]); evaluates SA lifetimes when
//! the caller ticks it ([`Dataplane::handle_timeout`]).
//!
//! What it does not do: IKE (messages on the NAT-T port are counted and dropped), clear-text
//! forwarding of BYPASS traffic (counted and dropped), signal handling or printing (the
//! binary does), rekeying.
//!
//! Known limit: the tenant has one enclave instance behind a mutex (see [`worker`]); so one
//! tenant's cryptography is one enclave call at a time and the workers parallelise I/O.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
mod error;
pub mod ike;
pub mod keys;
pub mod stats;
pub mod worker;

use core::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use cio::raw_esp::RawEspSocket;
use cio::tun::{Tun, TunOffloads};
use cio::udp::{UdpOffloads, UdpSocket};
use cio::{netdev, poll::EventFd};
use enclave::{Enclave, EspSaHandle};
use esp::config::{Installed, KeyRequest};
use esp::{DropReason, LifetimeEvent, Sad, Spd, HEADROOM, TAILROOM};

pub use config::{Config, Settings};
pub use error::Error;
pub use ike::{IkeDatagram, IkeInbox};
pub use stats::{Counter, IoDrop, WorkerSnapshot, WorkerStats};

use worker::{Shared, Tables, Worker, WorkerIo};

/// The offloads the kernel accepted, for the start-up line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// The TUN device's.
    pub tun: TunOffloads,
    /// The UDP sockets' (`None` without ESP-in-UDP SAs).
    pub udp: Option<UdpOffloads>,
}

impl fmt::Display for Offloads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tun {}", self.tun)?;
        match self.udp {
            Some(u) => write!(f, ", udp {u}"),
            None => f.write_str(", udp unused"),
        }
    }
}

/// One SA's usage and drops, for the exit report (no key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaReport {
    /// `in` or `out` and the SA's name or SPI.
    pub sa: String,
    /// Inner packets it carried.
    pub packets: u64,
    /// Inner bytes it carried.
    pub bytes: u64,
    /// Its drops by reason.
    pub drops: Vec<(DropReason, u64)>,
}

impl fmt::Display for SaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sa {}: packets={} bytes={}", self.sa, self.packets, self.bytes)?;
        for (r, n) in &self.drops {
            write!(f, " drop.{r}={n}")?;
        }
        Ok(())
    }
}

/// What [`Dataplane::stop`] leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// Each worker's final counts.
    pub workers: Vec<WorkerSnapshot>,
    /// Workers whose thread panicked (a bug: every packet path counts instead).
    pub panicked: Vec<usize>,
}

/// A running data plane.
pub struct Dataplane<E: Enclave + 'static> {
    shared: Arc<Shared<E>>,
    threads: Vec<Option<JoinHandle<()>>>,
    stats: Vec<Arc<WorkerStats>>,
    offloads: Offloads,
    tun: String,
    /// The namespace the TUN device lives in, when not the one the data plane started in.
    tun_netns: Option<String>,
    /// Sockets in the TUN device's namespace, for its routes.
    tun_control: netdev::Control,
    installed: Installed,
    udp: Vec<SocketAddr>,
    /// Whether arriving ESP-in-UDP is steered to workers by sequence number.
    spread_inbound: bool,
    /// The anti-replay window of inbound SAs that set none (see [`Self::replay_window`]).
    replay_window: u32,
    raw: Vec<bool>,
    /// One socket per UDP address (worker 0's), for the control thread's IKE sends.
    control_udp: Vec<Arc<UdpSocket>>,
}

impl<E: Enclave + 'static> fmt::Debug for Dataplane<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dataplane")
            .field("tun", &self.tun)
            .field("workers", &self.threads.len())
            .field("offloads", &self.offloads)
            .finish_non_exhaustive()
    }
}

/// The slot length for a TUN MTU: the largest inner packet plus the ESP core's head- and
/// tailroom, and at least a 1500-byte outer datagram behind an outer IPv6 header.
fn slot_len(tun_mtu: u16) -> usize {
    let inner = usize::from(tun_mtu) + HEADROOM + TAILROOM;
    let outer = 1500 + HEADROOM + 40;
    inner.max(outer).max(2048).next_multiple_of(64)
}

/// Packets a worker's batch area holds for batches of `batch`: twice the batch, since IPv4
/// fragments made on encapsulation go to the free slots.
fn area_packets(batch: usize) -> usize {
    batch * 2
}

/// The bytes of one worker's batch area, which every crossing passes to the enclave whole:
/// the process enclave's shared packet area must be at least this large
/// (`enclave_host::ProcessSpec::with_packet_area`), else it refuses every batch.
pub fn packet_area(settings: &Settings) -> usize {
    area_packets(settings.batch) * slot_len(settings.tun_mtu)
}

impl<E: Enclave + 'static> Dataplane<E> {
    /// Installs `config`'s SAs (each SA's keys go to `enclave` through `install_keys`, and
    /// nowhere else), sets up the TUN device and sockets, and starts the workers.
    ///
    /// Call it from the thread (and so the network namespace) the data plane is to live in.
    pub fn start<F>(config: &Config, enclave: E, install_keys: F) -> Result<Self, Error>
    where
        F: FnMut(&mut E, &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error>,
    {
        Self::start_with(config, enclave, install_keys, None)
    }

    /// [`Self::start`] for a gateway with an IKE engine: IKE messages that arrive on the
    /// ESP-in-UDP sockets go to `ike` instead of being dropped, and SAs come and go at run
    /// time through [`Self::update`].
    pub fn start_with<F>(
        config: &Config,
        mut enclave: E,
        mut install_keys: F,
        ike: Option<Arc<IkeInbox>>,
    ) -> Result<Self, Error>
    where
        F: FnMut(&mut E, &KeyRequest<'_>) -> Result<EspSaHandle, enclave::Error>,
    {
        let settings = &config.settings;
        let n = settings
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 64);
        // One worker has nothing to steer to.
        let spread_inbound = settings.spread_inbound && n > 1;
        let replay_window = settings.replay_window.unwrap_or(if spread_inbound {
            config::SPREAD_WINDOW
        } else {
            esp::DEFAULT_WINDOW
        });
        let (mut sad, mut spd) = (Sad::new(), Spd::new());
        let installed = config
            .esp
            .install(&mut sad, &mut spd, Instant::now(), replay_window, |r| install_keys(&mut enclave, r))?;

        // The device is made in its namespace, from descriptors opened there; the sockets
        // below stay in this thread's.
        let (tun, tun_netns, control) = match settings.tun_netns.as_deref() {
            Some(ns) => {
                let lent = cio::netns::lend(ns, n)?;
                (Tun::open_on(lent.tun, &settings.tun, settings.offload)?, Some(lent.name), lent.control)
            }
            None => (Tun::open(&settings.tun, n, settings.offload)?, None, netdev::Control::here()?),
        };
        control.set_mtu(tun.name(), u32::from(settings.tun_mtu))?;
        control.set_up(tun.name())?;
        for a in &settings.tun_addresses {
            control.add_address(tun.name(), *a)?;
        }
        for r in &settings.routes {
            control.add_route(tun.name(), *r)?;
        }
        let name = tun.name().to_owned();
        let tun_offloads = tun.offloads();

        let udp_addrs = config.udp_listeners();
        let mut udp: Vec<Vec<Arc<UdpSocket>>> = (0..n).map(|_| Vec::new()).collect();
        for addr in &udp_addrs {
            for sockets in &mut udp {
                sockets.push(Arc::new(UdpSocket::bind(*addr, true, settings.offload)?));
            }
            // Worker i's socket is the i-th of the address's group: bound in that order.
            if spread_inbound {
                if let Some(first) = udp.first().and_then(|s| s.last()) {
                    first.steer_by_esp_sequence(u32::try_from(n).unwrap_or(u32::MAX))?;
                }
            }
        }
        let control_udp = udp.first().cloned().unwrap_or_default();
        let udp_offloads = udp.first().and_then(|s| s.first()).map(|s| s.offloads());
        let raw_families = config.raw_families();
        let raw: Vec<Arc<RawEspSocket>> =
            raw_families.iter().map(|&v6| RawEspSocket::open(v6).map(Arc::new)).collect::<Result<_, _>>()?;

        let shared = Arc::new(Shared {
            tables: RwLock::new(Tables { sad, spd }),
            enclave: Mutex::new(enclave),
            stop: AtomicBool::new(false),
            wake: EventFd::new()?,
            ike,
        });
        let slot = slot_len(settings.tun_mtu);
        let mut dp = Self {
            shared: Arc::clone(&shared),
            threads: Vec::with_capacity(n),
            stats: Vec::with_capacity(n),
            offloads: Offloads { tun: tun_offloads, udp: udp_offloads },
            tun: name,
            tun_netns,
            tun_control: control,
            installed,
            udp: udp_addrs,
            spread_inbound,
            replay_window,
            raw: raw_families,
            control_udp,
        };
        for (i, (queue, udp)) in tun.into_queues().into_iter().zip(udp).enumerate() {
            let stats = Arc::new(WorkerStats::default());
            // Raw ESP socket j is read by worker j mod n only (see `WorkerIo::raw_rx`).
            let raw_rx = raw.iter().skip(i).step_by(n.max(1)).cloned().collect();
            let io = WorkerIo { tun: queue, udp, raw: raw.clone(), raw_rx };
            let coalesce = std::time::Duration::from_micros(u64::from(settings.coalesce_us));
            let w = Worker::new(
                Arc::clone(&shared),
                Arc::clone(&stats),
                io,
                settings.batch,
                slot,
                tun_offloads,
                coalesce,
            );
            let spawned = std::thread::Builder::new().name(format!("cloister-dp{i}")).spawn(move || w.run());
            match spawned {
                Ok(h) => {
                    dp.threads.push(Some(h));
                    dp.stats.push(stats);
                }
                // Dropping `dp` stops and joins the workers started so far.
                Err(source) => return Err(Error::Spawn { index: i, source }),
            }
        }
        Ok(dp)
    }

    /// The offloads the kernel accepted.
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Routes `prefix` into the TUN device, in the namespace the device lives in.
    pub fn add_tun_route(&self, prefix: netdev::Prefix) -> Result<(), Error> {
        Ok(self.tun_control.add_route(&self.tun, prefix)?)
    }

    /// The namespace the TUN device lives in, when it is not the data plane's.
    pub fn tun_netns(&self) -> Option<&str> {
        self.tun_netns.as_deref()
    }

    /// The TUN device's name.
    pub fn tun_name(&self) -> &str {
        &self.tun
    }

    /// How many workers run.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// How arriving ESP-in-UDP reaches the workers: `"sequence"` (steered by ESP sequence
    /// number, `spread_inbound`) or `"peer"` (the kernel's hash of addresses and ports).
    pub fn inbound_steering(&self) -> &'static str {
        if self.spread_inbound {
            "sequence"
        } else {
            "peer"
        }
    }

    /// The anti-replay window, in packets, of inbound SAs that set none themselves: the
    /// configured `replay_window`, else 4096, or [`config::SPREAD_WINDOW`] when inbound
    /// traffic is spread over the workers. The IKE engine's child SAs get this.
    pub fn replay_window(&self) -> u32 {
        self.replay_window
    }

    /// The UDP addresses listened on, and the raw ESP families (`true`: IPv6).
    pub fn listeners(&self) -> (&[SocketAddr], &[bool]) {
        (&self.udp, &self.raw)
    }

    /// Every worker's counts now.
    pub fn snapshot(&self) -> Vec<WorkerSnapshot> {
        self.stats.iter().enumerate().map(|(i, s)| s.snapshot(i)).collect()
    }

    /// Evaluates SA lifetimes at `now` (call it every second or so) and returns the events:
    /// with no IKE engine attached, a hard expiry only stops the SA's traffic.
    pub fn handle_timeout(&self, now: Instant) -> Vec<LifetimeEvent> {
        let Ok(mut t) = self.shared.tables.write() else { return Vec::new() };
        t.sad.handle_timeout(now);
        core::iter::from_fn(|| t.sad.poll_event()).take(1024).collect()
    }

    /// Changes the SA and policy tables at run time, atomically for the workers: they wait
    /// for `f` and never see half of a change (install the inbound SA, the outbound SA and
    /// its policies in one call). `None` if a worker panicked while holding the tables.
    pub fn update<R>(&self, f: impl FnOnce(&mut Sad, &mut Spd) -> R) -> Option<R> {
        let mut t = self.shared.tables.write().ok()?;
        let Tables { sad, spd } = &mut *t;
        Some(f(sad, spd))
    }

    /// Reads the SA and policy tables (e.g. an SA's usage for `sa list`).
    pub fn read<R>(&self, f: impl FnOnce(&Sad, &Spd) -> R) -> Option<R> {
        let t = self.shared.tables.read().ok()?;
        Some(f(&t.sad, &t.spd))
    }

    /// Sends one UDP datagram (an IKE message on the NAT-T port, marker included) from the
    /// ESP-in-UDP socket bound to `local`.
    pub fn send_udp(&self, local: SocketAddr, remote: SocketAddr, bytes: &[u8]) -> Result<(), Error> {
        let sock =
            self.control_udp.iter().find(|s| s.local_addr() == local).ok_or(Error::NoSocket { local })?;
        let r = sock.send(core::iter::once(cio::Outgoing { dst: remote, tos: 0, bytes }));
        if r.sent == 1 {
            Ok(())
        } else {
            Err(Error::Send { local, remote })
        }
    }

    /// Each installed SA's usage and drops.
    pub fn sa_reports(&self) -> Vec<SaReport> {
        let Ok(t) = self.shared.tables.read() else { return Vec::new() };
        let mut out = Vec::new();
        for (name, id, _) in &self.installed.outbound {
            if let Some(sa) = t.sad.outbound(*id) {
                let (packets, bytes) = sa.runtime().usage();
                let drops = sa.runtime().drops().snapshot().nonzero().collect();
                out.push(SaReport {
                    sa: format!("out {name} spi {:#010x}", sa.config().spi),
                    packets,
                    bytes,
                    drops,
                });
            }
        }
        for (spi, _) in &self.installed.inbound {
            if let Some(sa) = t.sad.inbound(*spi) {
                let (packets, bytes) = sa.runtime().usage();
                let drops = sa.runtime().drops().snapshot().nonzero().collect();
                out.push(SaReport { sa: format!("in spi {spi:#010x}"), packets, bytes, drops });
            }
        }
        out
    }

    /// Stops the workers, waits for them, and returns their final counts.
    pub fn stop(mut self) -> StopReport {
        self.shutdown()
    }

    fn shutdown(&mut self) -> StopReport {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.wake.notify();
        let mut panicked = Vec::new();
        for (i, t) in self.threads.iter_mut().enumerate() {
            // Each worker checks the flag at least every POLL_TIMEOUT and after each batch.
            if let Some(h) = t.take() {
                if h.join().is_err() {
                    panicked.push(i);
                }
            }
        }
        StopReport { workers: self.snapshot(), panicked }
    }
}

impl<E: Enclave + 'static> Drop for Dataplane<E> {
    fn drop(&mut self) {
        if self.threads.iter().any(Option::is_some) {
            self.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_an_mtu_sized_packet_with_room() {
        assert_eq!(slot_len(1376), 2048);
        assert!(slot_len(9000) >= 9000 + HEADROOM + TAILROOM);
        // The largest accepted configuration fits the enclave's largest packet area
        // (enclave_api::process::layout::MAX_PACKET_AREA, 1 GiB).
        let edge = Settings { batch: config::MAX_BATCH, tun_mtu: config::MAX_TUN_MTU, ..Settings::default() };
        assert!(packet_area(&edge) <= 1 << 30);
        let o = Offloads {
            tun: TunOffloads { csum: true, tso4: true, ..TunOffloads::default() },
            udp: Some(UdpOffloads { gso: true, gro: false }),
        };
        assert_eq!(o.to_string(), "tun csum+tso4, udp gso");
    }
}
