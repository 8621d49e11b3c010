//! Per-worker counters: packets by stage, I/O drops by reason, and the ESP core's drops by
//! reason. Relaxed atomics, written by one worker and read by anyone: they are statistics,
//! ordered with nothing. Nothing is logged per packet (STYLE §4).

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use esp::{DropCounts, DropReason};

macro_rules! counted_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// Every value, in index order.
            pub const ALL: &'static [Self] = &[$(Self::$v,)*];
            /// How many there are.
            pub const COUNT: usize = Self::ALL.len();

            /// A short stable name for reports.
            pub const fn name(self) -> &'static str {
                match self { $(Self::$v => $s,)* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

counted_enum! {
    /// What a worker counts.
    Counter {
        /// IP packets read from the TUN queue (after cutting super-packets).
        TunRx => "tun_rx",
        /// TSO/USO super-packets among the TUN reads.
        TunRxSuper => "tun_rx_super",
        /// Packets written to the TUN queue (decapsulated, ICMP errors), counted before
        /// merging.
        TunTx => "tun_tx",
        /// Super-packets among the TUN writes: runs of TCP segments merged into one (GRO).
        TunTxSuper => "tun_tx_super",
        /// TUN write syscalls (`TunTx` less what merging saved).
        TunTxWrites => "tun_tx_writes",
        /// Datagrams received from the network (GRO bursts cut).
        NetRx => "net_rx",
        /// Datagrams or raw packets sent to the network.
        NetTx => "net_tx",
        /// Syscall messages for `NetTx` (fewer with UDP GSO).
        NetTxMessages => "net_tx_msgs",
        /// Packets encapsulated.
        Encapsulated => "encapsulated",
        /// Packets decapsulated.
        Decapsulated => "decapsulated",
        /// ICMP errors sent inward (packet too big).
        IcmpErrors => "icmp_errors",
        /// NAT-keepalives consumed.
        Keepalives => "keepalives",
        /// IKE messages on the NAT-T port handed to the IKE engine.
        IkeForwarded => "ike_forwarded",
        /// Batches handed to the ESP core.
        Batches => "batches",
        /// Enclave crossings.
        Crossings => "crossings",
        /// Packets that re-synchronised an inbound ESN SA after 2^32 or more lost packets
        /// (RFC 4303 Appendix A3).
        EsnResyncs => "esn_resyncs",
    }
}

counted_enum! {
    /// Why the I/O side of a worker dropped a packet (the ESP core counts its own).
    IoDrop {
        /// A TUN read failed.
        TunRead => "tun_read",
        /// A TUN packet's virtio-net header or GSO layout did not add up.
        BadOffload => "bad_offload",
        /// A TUN write failed.
        TunWrite => "tun_write",
        /// A received message was truncated or had no usable addresses.
        BadDatagram => "bad_datagram",
        /// A received datagram is larger than a batch slot.
        Oversize => "oversize",
        /// A receive call failed.
        RecvError => "recv_error",
        /// The kernel refused a send.
        SendFailed => "send_failed",
        /// No socket of this worker serves the SA's local endpoint.
        NoSocket => "no_socket",
        /// A BYPASS packet: this data plane has no clear-text path.
        Bypass => "bypass",
        /// An IKE message on the NAT-T port that no IKE engine took (none attached, or its
        /// queue was full).
        Ike => "ike",
    }
}

/// One worker's live counters.
#[derive(Debug)]
pub struct WorkerStats {
    counters: [AtomicU64; Counter::COUNT],
    io_drops: [AtomicU64; IoDrop::COUNT],
    esp_drops: [AtomicU64; DropReason::COUNT],
}

impl Default for WorkerStats {
    fn default() -> Self {
        Self {
            counters: core::array::from_fn(|_| AtomicU64::new(0)),
            io_drops: core::array::from_fn(|_| AtomicU64::new(0)),
            esp_drops: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl WorkerStats {
    /// Adds `n` to a counter.
    pub fn add(&self, c: Counter, n: u64) {
        if let Some(a) = self.counters.get(c as usize) {
            a.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts `n` I/O drops.
    pub fn drop_io(&self, d: IoDrop, n: u64) {
        if let Some(a) = self.io_drops.get(d as usize) {
            a.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Publishes the ESP core's drop counts (the worker's own running totals).
    pub fn publish_esp_drops(&self, drops: &DropCounts) {
        for (a, &r) in self.esp_drops.iter().zip(DropReason::ALL.iter()) {
            a.store(drops.get(r), Ordering::Relaxed);
        }
    }

    /// A copy of every count.
    pub fn snapshot(&self, worker: usize) -> WorkerSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerSnapshot {
            worker,
            counters: core::array::from_fn(|i| self.counters.get(i).map_or(0, load)),
            io_drops: core::array::from_fn(|i| self.io_drops.get(i).map_or(0, load)),
            esp_drops: core::array::from_fn(|i| self.esp_drops.get(i).map_or(0, load)),
        }
    }
}

/// One worker's counts at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// The worker's index.
    pub worker: usize,
    counters: [u64; Counter::COUNT],
    io_drops: [u64; IoDrop::COUNT],
    esp_drops: [u64; DropReason::COUNT],
}

impl WorkerSnapshot {
    /// A counter's value.
    pub fn get(&self, c: Counter) -> u64 {
        self.counters.get(c as usize).copied().unwrap_or(0)
    }

    /// I/O drops for one reason.
    pub fn io_drop(&self, d: IoDrop) -> u64 {
        self.io_drops.get(d as usize).copied().unwrap_or(0)
    }

    /// ESP core drops for one reason.
    pub fn esp_drop(&self, r: DropReason) -> u64 {
        self.esp_drops.get(r.index()).copied().unwrap_or(0)
    }

    /// The ESP core's non-zero drop counts.
    pub fn esp_drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.esp_drop(r))).filter(|&(_, n)| n > 0)
    }

    /// Every drop, I/O and ESP.
    pub fn total_drops(&self) -> u64 {
        self.io_drops.iter().chain(self.esp_drops.iter()).sum()
    }

    /// The sum of several workers' counts (worker index `usize::MAX`).
    pub fn sum(all: &[Self]) -> Self {
        let mut out = Self {
            worker: usize::MAX,
            counters: [0; Counter::COUNT],
            io_drops: [0; IoDrop::COUNT],
            esp_drops: [0; DropReason::COUNT],
        };
        for s in all {
            for (a, b) in out.counters.iter_mut().zip(s.counters) {
                *a += b;
            }
            for (a, b) in out.io_drops.iter_mut().zip(s.io_drops) {
                *a += b;
            }
            for (a, b) in out.esp_drops.iter_mut().zip(s.esp_drops) {
                *a += b;
            }
        }
        out
    }
}

impl fmt::Display for WorkerSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.worker == usize::MAX {
            f.write_str("total:")?;
        } else {
            write!(f, "worker {}:", self.worker)?;
        }
        for &c in Counter::ALL {
            write!(f, " {c}={}", self.get(c))?;
        }
        let mut drops: Vec<String> = IoDrop::ALL
            .iter()
            .filter(|&&d| self.io_drop(d) > 0)
            .map(|&d| format!("io.{d}={}", self.io_drop(d)))
            .collect();
        drops.extend(self.esp_drops().map(|(r, n)| format!("esp.{r}={n}")));
        if drops.is_empty() {
            f.write_str(" drops=0")
        } else {
            write!(f, " drops: {}", drops.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_sum_and_print() {
        let s = WorkerStats::default();
        s.add(Counter::TunRx, 5);
        s.drop_io(IoDrop::Bypass, 2);
        let mut d = DropCounts::default();
        d.record(DropReason::Replay);
        s.publish_esp_drops(&d);
        let a = s.snapshot(0);
        assert_eq!(a.get(Counter::TunRx), 5);
        assert_eq!(a.total_drops(), 3);
        let total = WorkerSnapshot::sum(&[a.clone(), a.clone()]);
        assert_eq!(total.get(Counter::TunRx), 10);
        assert_eq!(total.esp_drop(DropReason::Replay), 2);
        let line = a.to_string();
        assert!(line.starts_with("worker 0: tun_rx=5"), "{line}");
        assert!(line.ends_with("drops: io.bypass=2 esp.replay=1"), "{line}");
        assert!(total.to_string().starts_with("total:"));
        assert_eq!(IoDrop::COUNT, IoDrop::ALL.len());
    }
}
