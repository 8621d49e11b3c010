//! The untrusted side of the process backend (`cloister_enclave::process` is the enclave
//! side, `cloister_enclave_api::process` the boundary both share): has a [`Launch`] start
//! the enclave process, implements [`Enclave`] over the rings, notices the child's death
//! and restarts it. It links no trusted code: what it knows of the enclave is the call surface.
//!
//! Each [`ProcessEnclave`] owns one child and one shared memory. Nothing is global: no
//! signal handler, no `waitpid(-1)`, so one tenant's enclave dying touches no other tenant.
//! Death is noticed through a pidfd of the child (readable once it exits) that every wait
//! polls next to the completion doorbell; from then on every call fails with
//! [`ProcessError::Died`] until [`ProcessEnclave::restart`].
#![allow(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub use enclave_api::process::layout::Geometry;
pub use enclave_api::process::validate::{RejectCounters, RejectReason};
pub use enclave_api::process::{ExitReport, ProcessError};
pub use launch::{ChildEnd, ChildFds, Credentials, Direct, Launch, Launched};

pub mod launch;
mod stubs;

use core::ops::Range;
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspOpcode, EspStatus};
use enclave_api::handle::TenantId;
use enclave_api::ledger::{Ledger, MemoryLedger};
use enclave_api::migration::{why, MAX_PACKAGE_LEN};
use enclave_api::process::bits;
use enclave_api::process::codec::{self, op, Malformed, Reader, Writer, STAGED_HELD, STAGED_INLINE};
use enclave_api::process::desc::{
    self, BatchDescriptor, CallDescriptor, CallStatus, Completion, KIND_BATCH, KIND_CALL,
};
use enclave_api::process::doorbell::{self, Doorbell};
use enclave_api::process::layout::{
    ctl, Layout, COMPLETION_SLOT, DESCRIPTOR_BYTES, DESCRIPTOR_GRANULE, MAGIC, REQUEST_SLOT, STATE_READY,
    STATUS_BYTES, VERSION,
};
use enclave_api::process::ring::{self, Consumer, Producer};
use enclave_api::process::shm::SharedMem;
use enclave_api::report::{EnclaveConfig, Limits, PublicConfig};
#[cfg(doc)]
use enclave_api::Enclave;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to start an enclave process, and its timing.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The executable: `/proc/self/exe` for the gateway, a test binary in tests.
    pub program: PathBuf,
    /// Arguments before the guest's own (e.g. the hidden subcommand `enclave-process`).
    pub args: Vec<OsString>,
    /// Ring and area sizes.
    pub geometry: Geometry,
    /// How long the child may take to harden itself and pass its self-tests.
    pub start_timeout: Duration,
    /// How long one call may take before the child is declared hung and killed.
    pub call_timeout: Duration,
    /// How long the enclave busy-polls (yielding its core every few µs) after a request
    /// before sleeping on its doorbell. None by default, for the reason `host_spin` gives
    /// (the same bench: UDP 64 B 79k packets/s without, 36k with 50 µs); [`PINNED_SPIN`]
    /// with [`Self::pinned`].
    pub guest_spin: Duration,
    /// How long the gateway busy-polls for an ESP batch's completion before sleeping on its
    /// doorbell (a batch's crypto takes a few microseconds). None by default: where the
    /// enclave process shares its cores with the gateway and the traffic's own threads,
    /// either side's spinning takes the core the other needs (on two cores, two
    /// `cloister gateway`s over raw ESP and iperf3: TCP 1.5 Gbit/s with neither side
    /// spinning, 1.1 with both at 50 µs).
    pub host_spin: Duration,
    /// The same for a control call (IKE key operations, sealing, accounting). None by
    /// default: such a call may compute for a millisecond (MODP), and a caller spinning
    /// meanwhile takes a core from the enclave process or from other work (on two cores
    /// under an IKE setup load, 0 gave the best rates of 0, 5, 20 and 50 µs; docs/bench-ike.md).
    pub call_spin: Duration,
    /// CPUs the enclave process may run on (`None`: any). Both sides busy-poll under load,
    /// so a deployment gives each enclave process a core of its own; left to itself, the
    /// scheduler can wake a sleeping enclave process onto the core of the gateway thread
    /// that rang its doorbell, and the two then share one core until it rebalances them.
    pub cpus: Option<Vec<usize>>,
}

/// How long both sides busy-poll when the enclave process has cores of its own: a batch's
/// crypto takes a few microseconds, a doorbell's wake-up about as long again.
pub const PINNED_SPIN: Duration = Duration::from_micros(50);

impl ProcessSpec {
    /// The same, the enclave process held to `cpus` (cores the deployment keeps for it), both
    /// sides busy-polling [`PINNED_SPIN`] before they sleep on a doorbell.
    #[must_use]
    pub fn pinned(mut self, cpus: Vec<usize>) -> Self {
        self.cpus = Some(cpus);
        self.guest_spin = PINNED_SPIN;
        self.host_spin = PINNED_SPIN;
        self
    }

    /// `program args...` with default geometry and timing.
    pub fn new(program: impl Into<PathBuf>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            geometry: Geometry::default(),
            start_timeout: Duration::from_secs(20),
            call_timeout: Duration::from_secs(20),
            guest_spin: Duration::ZERO,
            host_spin: Duration::ZERO,
            call_spin: Duration::ZERO,
            cpus: None,
        }
    }

    /// A packet area of at least `bytes` (rounded up to 64; never below the default): the
    /// data plane passes its whole batch area on every crossing
    /// (`dataplane::packet_area`), and a larger one is refused.
    #[must_use]
    pub fn with_packet_area(mut self, bytes: usize) -> Self {
        let want = u32::try_from(bytes.next_multiple_of(64)).unwrap_or(u32::MAX);
        self.geometry.packet_len = self.geometry.packet_len.max(want);
        self
    }

    /// The gateway's own binary with the hidden `enclave-process` subcommand.
    pub fn current_exe() -> Self {
        Self::new("/proc/self/exe", ["enclave-process"])
    }
}

/// What the enclave process reported about its own hardening, once ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HardeningReport(pub u32);

impl HardeningReport {
    /// `PR_SET_DUMPABLE` 0.
    pub fn non_dumpable(self) -> bool {
        self.0 & bits::NON_DUMPABLE != 0
    }
    /// Its own empty network namespace.
    pub fn empty_netns(self) -> bool {
        self.0 & bits::EMPTY_NETNS != 0
    }
    /// All memory locked (`mlockall`).
    pub fn memory_locked(self) -> bool {
        self.0 & bits::MEMORY_LOCKED != 0
    }
    /// The root secret arrived in `memfd_secret` memory (else in an `mlock`ed arena).
    pub fn memfd_secret(self) -> bool {
        self.0 & bits::MEMFD_SECRET != 0
    }
    /// The seccomp allow-list is installed.
    pub fn seccomp(self) -> bool {
        self.0 & bits::SECCOMP != 0
    }
    /// Every step the guest takes is in force (the arena in either kind of memory).
    pub fn complete(self) -> bool {
        self.non_dumpable()
            && self.empty_netns()
            && self.memory_locked()
            && self.seccomp()
            && self.0 & (bits::MEMFD_SECRET | bits::MLOCK_ARENA) != 0
            && self.0 & bits::FDS_CLOSED != 0
    }
}

/// The shared packet area, lent to the data plane: packets built here are transformed in
/// place by [`Enclave::esp_batch`] with no copy (pass [`Self::as_mut_slice`] as `packets`).
#[derive(Debug)]
pub struct PacketArea {
    shm: Arc<SharedMem>,
    range: Range<usize>,
}

impl PacketArea {
    /// The area's bytes. Descriptor offsets are relative to its start.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: one `PacketArea` exists per enclave (handed out once) and this borrow is
        // unique through `&mut self`; the enclave process writes these bytes only while a
        // batch call is running, and that call needs this very slice as its argument.
        unsafe { self.shm.slice_mut(self.range.clone()) }.unwrap_or(&mut [])
    }
}

/// A tenant's ledger, shared by the enclaves started for it one after another.
pub type SharedLedger = Arc<Mutex<dyn Ledger>>;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One started child.
#[derive(Debug)]
struct Running {
    end: Box<dyn ChildEnd>,
    pidfd: OwnedFd,
    pid: u32,
}

#[derive(Debug)]
struct Host {
    spec: ProcessSpec,
    layout: Layout,
    shm: Arc<SharedMem>,
    request_bell: Doorbell,
    completion_bell: Doorbell,
    requests: Producer<REQUEST_SLOT>,
    completions: Consumer<COMPLETION_SLOT>,
    running: Option<Running>,
    /// Who starts each child, and for what configuration.
    launcher: Arc<dyn Launch>,
    config: PublicConfig,
    /// Set once the child is found dead; repeated to every call until a restart.
    dead: Option<ProcessError>,
    limits: Limits,
    next_cookie: u64,
    area_lent: bool,
    hardening: HardeningReport,
    result: Vec<u8>,
    /// A batch's status entries as read back; reused, so the hot path does not allocate.
    status_buf: Vec<u8>,
    /// ESP descriptors submitted and not yet completed.
    in_flight: u32,
    /// ESP batches submitted and not yet completed.
    batches_in_flight: u32,
    /// Descriptor table positions handed out and given back, counted from 0 forever
    /// (position mod table size is the index): batches take runs in order and complete in
    /// order, so the table is a ring.
    alloc_head: u64,
    alloc_tail: u64,
}

impl Host {
    fn new(
        spec: ProcessSpec,
        launcher: Arc<dyn Launch>,
        config: PublicConfig,
    ) -> std::result::Result<Self, ProcessError> {
        let layout = Layout::new(spec.geometry)?;
        let shm = Arc::new(SharedMem::create(layout.total)?);
        Ok(Self {
            requests: Producer::new(shm.clone(), layout.requests)?,
            completions: Consumer::new(shm.clone(), layout.completions)?,
            shm,
            layout,
            spec,
            request_bell: Doorbell::new()?,
            completion_bell: Doorbell::new()?,
            running: None,
            launcher,
            config,
            dead: Some(ProcessError::Protocol { why: "not started" }),
            limits: Limits::default(),
            next_cookie: 1,
            area_lent: false,
            hardening: HardeningReport(0),
            result: Vec::new(),
            status_buf: Vec::new(),
            in_flight: 0,
            batches_in_flight: 0,
            alloc_head: 0,
            alloc_tail: 0,
        })
    }

    fn u32_at(&self, off: usize) -> u32 {
        self.shm.atomic_u32(off).map_or(0, |a| a.load(Ordering::Acquire))
    }

    fn set_u32(&self, off: usize, v: u32) {
        if let Some(a) = self.shm.atomic_u32(off) {
            a.store(v, Ordering::SeqCst);
        }
    }

    /// Resets the control block and the rings for a new child (none is running).
    fn reset_shared(&mut self) -> std::result::Result<(), ProcessError> {
        self.shm.zero(0, self.layout.packets);
        let g = self.layout.geometry;
        let mut head = [0u8; 24];
        head[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        head[12..16].copy_from_slice(&g.slots.to_le_bytes());
        head[16..20].copy_from_slice(&g.packet_len.to_le_bytes());
        head[20..24].copy_from_slice(&g.call_len.to_le_bytes());
        self.shm.write_from(ctl::MAGIC, &head);
        self.shm.write_from(ctl::DESCRIPTORS, &g.descriptors.to_le_bytes());
        ring::reset(&self.shm, &self.layout.requests, 0);
        ring::reset(&self.shm, &self.layout.completions, 0);
        self.requests = Producer::new(self.shm.clone(), self.layout.requests)?;
        self.completions = Consumer::new(self.shm.clone(), self.layout.completions)?;
        self.request_bell.drain();
        self.completion_bell.drain();
        self.in_flight = 0;
        self.batches_in_flight = 0;
        self.alloc_head = 0;
        self.alloc_tail = 0;
        Ok(())
    }

    fn launch(&mut self) -> std::result::Result<(), ProcessError> {
        let _ = self.stop();
        self.reset_shared()?;
        self.limits = self.config.limits;
        let child = ChildFds {
            shm: self.shm.fd(),
            request: self.request_bell.fd(),
            completion: self.completion_bell.fd(),
            geometry: self.layout.geometry,
            spin: self.spec.guest_spin,
            cpus: self.spec.cpus.as_deref(),
        };
        let started = self.launcher.launch(&child, &self.config);
        let Launched { pid, pidfd, end } = match started {
            Ok(l) => l,
            Err(e) => {
                self.dead = Some(e.clone());
                return Err(e);
            }
        };
        self.running = Some(Running { end, pidfd, pid });
        self.dead = None;
        self.wait_ready(self.spec.start_timeout)?;
        self.hardening = HardeningReport(self.u32_at(ctl::HARDENING));
        Ok(())
    }

    fn wait_ready(&mut self, limit: Duration) -> std::result::Result<(), ProcessError> {
        let start = Instant::now();
        loop {
            if self.u32_at(ctl::STATE) == STATE_READY {
                return Ok(());
            }
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                let pid = self.running.as_ref().map_or(0, |r| r.pid);
                self.kill_and_reap();
                let e = ProcessError::StartTimeout { pid, millis: millis(limit) };
                self.dead = Some(e.clone());
                return Err(e);
            }
            self.sleep_on_completions(left.min(Duration::from_millis(100)))?;
        }
    }

    /// Sleeps on the completion doorbell and the child's pidfd; reports death.
    fn sleep_on_completions(&mut self, timeout: Duration) -> std::result::Result<(), ProcessError> {
        let Some(run) = &self.running else {
            return Err(self.dead.clone().unwrap_or(ProcessError::Protocol { why: "not running" }));
        };
        let ready = doorbell::wait(&[self.completion_bell.fd(), run.pidfd.as_fd()], Some(timeout))?;
        self.completion_bell.drain();
        if ready & 0b10 != 0 {
            return Err(self.reap());
        }
        Ok(())
    }

    /// Ends the child (killing it if it still runs), collects its status and records its
    /// death.
    fn reap(&mut self) -> ProcessError {
        let Some(mut run) = self.running.take() else {
            return self.dead.clone().unwrap_or(ProcessError::Protocol { why: "not running" });
        };
        let e = ProcessError::Died { pid: run.pid, exit: run.end.end() };
        self.dead = Some(e.clone());
        e
    }

    fn kill_and_reap(&mut self) {
        let _ = self.reap();
    }

    /// Asks a running child to leave (it zeroizes its keys), waits a second for it, then
    /// makes sure it is gone; returns how it ended.
    fn stop(&mut self) -> Option<ExitReport> {
        let run = self.running.as_ref()?;
        self.set_u32(ctl::SHUTDOWN, 1);
        fence(Ordering::SeqCst);
        self.request_bell.ring();
        // Whether or not it left within the second, reaping ends it.
        let _ = doorbell::wait(&[run.pidfd.as_fd()], Some(Duration::from_secs(1)));
        match self.reap() {
            ProcessError::Died { exit, .. } => Some(exit),
            _ => None,
        }
    }

    /// The child is alive (as far as a non-blocking look can tell) or the recorded death.
    fn alive(&mut self) -> std::result::Result<(), ProcessError> {
        if let Some(e) = &self.dead {
            return Err(e.clone());
        }
        let gone = match &self.running {
            Some(run) => doorbell::wait(&[run.pidfd.as_fd()], Some(Duration::ZERO))? != 0,
            None => true,
        };
        if gone {
            return Err(self.reap());
        }
        Ok(())
    }

    /// The recorded death only, without a system call: for the per-batch ESP path, where a
    /// `poll` of the pidfd (about 0.2 µs) per batch was a tenth of a crossing. A death is
    /// still noticed within one spin period, when [`Self::collect`] falls asleep on the
    /// completion doorbell and looks at the pidfd.
    fn known_dead(&self) -> std::result::Result<(), ProcessError> {
        match &self.dead {
            Some(e) => Err(e.clone()),
            None if self.running.is_none() => Err(ProcessError::Protocol { why: "not running" }),
            None => Ok(()),
        }
    }

    /// Synchronous calls need the rings to themselves.
    fn idle(&self) -> std::result::Result<(), ProcessError> {
        if self.batches_in_flight == 0 {
            return Ok(());
        }
        Err(ProcessError::RingBusy {
            in_flight: self.in_flight,
            wanted: 0,
            capacity: self.layout.geometry.descriptors,
        })
    }

    /// Publishes `slots` as one batch and rings the doorbell if the enclave sleeps.
    fn submit(&mut self, slots: &[[u8; REQUEST_SLOT]]) -> std::result::Result<(), ProcessError> {
        let n = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        let free = self
            .requests
            .free_at_least(n)
            .map_err(|_| ProcessError::Protocol { why: "request ring index corrupt" })?;
        if n > free {
            return Err(ProcessError::Protocol { why: "request ring full" });
        }
        for (i, s) in (0u32..).zip(slots) {
            self.requests.write(i, s);
        }
        self.requests.publish(n);
        fence(Ordering::SeqCst);
        if self.u32_at(ctl::GUEST_SLEEPING) != 0 {
            self.request_bell.ring();
        }
        Ok(())
    }

    /// Waits for `n` completions (in order), busy-polling for `spin` first; calls `each(i, c)`.
    fn collect(
        &mut self,
        n: u32,
        spin: Duration,
        mut each: impl FnMut(u32, &Completion) -> std::result::Result<(), ProcessError>,
    ) -> std::result::Result<(), ProcessError> {
        let start = Instant::now();
        let mut got = 0u32;
        let mut spins = 0u32;
        while got < n {
            // At most the ones we wait for: a later entry belongs to the next caller.
            let take = self.completions.available(n - got);
            if take > 0 {
                for i in 0..take {
                    let mut s = [0u8; COMPLETION_SLOT];
                    self.completions.read(i, &mut s);
                    each(got + i, &Completion::decode(&s))?;
                }
                self.completions.release(take);
                got += take;
                continue;
            }
            if start.elapsed() < spin {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(2048) {
                    // Shared cores: let the enclave process run if it is waiting for ours.
                    std::thread::yield_now();
                } else {
                    core::hint::spin_loop();
                }
                continue;
            }
            if start.elapsed() > self.spec.call_timeout {
                let pid = self.running.as_ref().map_or(0, |r| r.pid);
                self.kill_and_reap();
                let e = ProcessError::CallTimeout { pid, millis: millis(self.spec.call_timeout) };
                self.dead = Some(e.clone());
                return Err(e);
            }
            self.set_u32(ctl::HOST_WAITING, 1);
            fence(Ordering::SeqCst);
            let still_empty = !self.completions.ready(0);
            let r = if still_empty { self.sleep_on_completions(Duration::from_millis(100)) } else { Ok(()) };
            self.set_u32(ctl::HOST_WAITING, 0);
            r?;
            if still_empty {
                self.alive()?;
            }
        }
        Ok(())
    }

    /// One call: arguments into the call area, one slot, one completion, result out.
    fn call(&mut self, opcode: u16, args: &[u8]) -> Result<&[u8]> {
        self.call_parts(opcode, &[args])
    }

    /// [`Self::call`] with arguments in parts, written one after the other: a chunk goes
    /// straight from the caller's buffer into the call area.
    fn call_parts(&mut self, opcode: u16, parts: &[&[u8]]) -> Result<&[u8]> {
        self.alive()?;
        self.idle()?;
        let call_len = self.layout.geometry.call_len;
        let total = parts.iter().try_fold(0usize, |n, p| n.checked_add(p.len()));
        let arg_len = total
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&l| l <= call_len)
            .ok_or(ProcessError::Codec { why: "arguments larger than the call area" })?;
        let mut at = self.layout.call;
        for p in parts {
            self.shm.write_from(at, p);
            at += p.len();
        }
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        let d = CallDescriptor { opcode, arg_off: 0, arg_len, res_off: 0, res_cap: call_len };
        self.submit(&[desc::encode_call(cookie, &d)])?;
        let mut done = Completion::default();
        self.collect(1, self.spec.call_spin, |_, c| {
            done = *c;
            Ok(())
        })?;
        if done.cookie != cookie || done.kind != KIND_CALL || done.result_len > call_len {
            return Err(ProcessError::Protocol { why: "completion does not match the call" }.into());
        }
        self.result.clear();
        self.result.resize(done.result_len as usize, 0);
        self.shm.read_into(self.layout.call, &mut self.result);
        match CallStatus::from_code(done.status) {
            Some(CallStatus::Ok) => Ok(&self.result),
            Some(CallStatus::Refused) => {
                let mut r = Reader::new(&self.result);
                let e = codec::get_error(&mut r).map_err(bad_result)?;
                r.finish().map_err(bad_result)?;
                Err(e)
            }
            Some(CallStatus::Rejected) => Err(match RejectReason::from_code(done.reject) {
                Some(RejectReason::ResultTooLarge) => {
                    ProcessError::Codec { why: "result larger than the call area" }
                }
                _ => ProcessError::Protocol { why: "the enclave refused the call descriptor" },
            }
            .into()),
            None => Err(ProcessError::Protocol { why: "unknown call status" }.into()),
        }
    }

    /// Streams `data` into the enclave process's staging ([`super::staging`]): `begin` with
    /// its length, then pieces as large as the call area takes.
    fn stage_in(&mut self, begin: u16, data: &[u8]) -> Result<()> {
        let mut w = Writer::new();
        w.usize(data.len());
        decode(self.call(begin, &w.buf)?, |_| Ok(()))?;
        // A piece follows its offset (8 bytes) and length (4 bytes).
        let piece = (self.layout.geometry.call_len as usize).saturating_sub(12).max(1);
        let mut offset = 0usize;
        for p in data.chunks(piece) {
            let mut head = Writer::new();
            head.usize(offset).u32(len_u32(p.len()));
            decode(self.call_parts(op::STAGE_CHUNK, &[&head.buf, p])?, |_| Ok(()))?;
            offset += p.len();
        }
        Ok(())
    }

    /// Makes a call whose answer may be staged: the bytes inline, or their length and then
    /// [`op::RESULT_CHUNK`] calls until all of them are read.
    fn staged_result(&mut self, opcode: u16, args: &[u8]) -> Result<Vec<u8>> {
        let (inline, total) = decode(self.call(opcode, args)?, |r| match r.u8()? {
            STAGED_INLINE => Ok((Some(r.bytes()?.to_vec()), 0)),
            STAGED_HELD => Ok((None, r.usize()?)),
            _ => Err(Malformed),
        })?;
        if let Some(bytes) = inline {
            return Ok(bytes);
        }
        // No answer is longer than a package, whatever the enclave process says.
        if total > MAX_PACKAGE_LEN {
            return Err(bad_result(Malformed));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(total).map_err(|_| Error::Migration { why: why::TOO_LARGE })?;
        let max = len_u32((self.layout.geometry.call_len as usize).saturating_sub(4));
        while out.len() < total {
            let mut w = Writer::new();
            w.usize(out.len()).u32(max);
            let mut r = Reader::new(self.call(op::RESULT_CHUNK, &w.buf)?);
            let piece = r.bytes().map_err(bad_result)?;
            r.finish().map_err(bad_result)?;
            // An empty piece would never end; a long one would not be this answer.
            if piece.is_empty() || piece.len() > total - out.len() {
                return Err(ProcessError::Protocol { why: "staged result piece out of sequence" }.into());
            }
            out.extend_from_slice(piece);
        }
        Ok(out)
    }

    /// Whether arguments of `len` bytes fit one call.
    fn fits(&self, len: usize) -> bool {
        len <= self.layout.geometry.call_len as usize
    }

    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        if status.len() != descriptors.len() {
            return Err(Error::StatusLengthMismatch { descriptors: descriptors.len(), status: status.len() });
        }
        if descriptors.len() > self.limits.max_batch {
            return Err(Error::BatchTooLarge { descriptors: descriptors.len(), max: self.limits.max_batch });
        }
        status.fill(EspStatus::NotProcessed);
        self.known_dead()?;
        self.idle()?;
        let area = self.layout.packet_range();
        let zero_copy = self.shm.contains_slice(packets) == Some(area.start) && packets.len() == area.len();
        let mut sent: Vec<EspDescriptor>;
        let descs = if zero_copy {
            descriptors
        } else {
            if self.area_lent {
                return Err(
                    ProcessError::Protocol { why: "packet area is lent out: pass it as `packets`" }.into()
                );
            }
            if packets.len() > area.len() {
                return Err(ProcessError::PacketsTooLarge { len: packets.len(), area: area.len() }.into());
            }
            // Copy each packet's region in; regions that leave the caller's buffer are
            // made to leave the shared area too, so both backends answer OutOfBounds.
            sent = descriptors.to_vec();
            for d in &mut sent {
                match copy_range(d, packets.len()) {
                    Some(r) => {
                        self.shm.write_from(area.start + r.start, packets.get(r).unwrap_or(&[]));
                    }
                    None => d.offset = u32::MAX,
                }
            }
            &sent
        };
        let mut summary = BatchSummary::default();
        for (chunk, st) in descs.chunks(self.per_batch()).zip(status.chunks_mut(self.per_batch())) {
            let f = self.submit_batch(chunk)?;
            let s = self.finish_batch(&f, st)?;
            summary.ok += s.ok;
            summary.failed += s.failed;
        }
        if !zero_copy {
            for d in descriptors {
                if let Some(r) = copy_range(d, packets.len()) {
                    if let Some(dst) = packets.get_mut(r.clone()) {
                        self.shm.read_into(area.start + r.start, dst);
                    }
                }
            }
        }
        Ok(summary)
    }

    /// Most descriptors in one batch: what the trusted core takes per call, and what the
    /// descriptor table holds (the guest refuses anything larger).
    fn per_batch(&self) -> usize {
        self.limits.max_batch.clamp(1, self.layout.geometry.descriptors as usize)
    }

    /// Takes a run of `count` descriptor table entries, starting on a granule so that no
    /// status line is shared by two batches in flight; a run never wraps around the end.
    fn alloc(&mut self, count: u32) -> std::result::Result<(u32, u64), ProcessError> {
        let cap = u64::from(self.layout.geometry.descriptors);
        let need = u64::from(count).div_ceil(u64::from(DESCRIPTOR_GRANULE)) * u64::from(DESCRIPTOR_GRANULE);
        let pos = self.alloc_head % cap;
        let skip = if pos + need > cap { cap - pos } else { 0 };
        let used = self.alloc_head - self.alloc_tail;
        if used + skip + need > cap {
            return Err(ProcessError::RingBusy {
                in_flight: self.in_flight,
                wanted: count,
                capacity: self.layout.geometry.descriptors,
            });
        }
        let first = u32::try_from((self.alloc_head + skip) % cap).unwrap_or(0);
        self.alloc_head += skip + need;
        Ok((first, self.alloc_head))
    }

    /// Writes `descriptors` into a run of the descriptor table and queues one batch slot
    /// naming it.
    fn submit_batch(&mut self, descriptors: &[EspDescriptor]) -> std::result::Result<InFlight, ProcessError> {
        let count = len_u32(descriptors.len());
        let free = self.requests.free_at_least(1);
        if free.map_err(|_| ProcessError::Protocol { why: "request ring index corrupt" })? == 0 {
            let capacity = self.layout.geometry.descriptors;
            return Err(ProcessError::RingBusy { in_flight: self.in_flight, wanted: count, capacity });
        }
        let before = self.alloc_head;
        let (first, end) = self.alloc(count)?;
        for (i, d) in (first..).zip(descriptors) {
            self.shm.write_from(self.layout.descriptor_offset(i), &d.encode());
        }
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        if let Err(e) = self.submit(&[desc::encode_batch(cookie, &BatchDescriptor { first, count })]) {
            self.alloc_head = before;
            return Err(e);
        }
        self.in_flight += count;
        self.batches_in_flight += 1;
        Ok(InFlight { cookie, first, count, end })
    }

    /// Waits for the oldest batch's completion and reads its statuses.
    fn finish_batch(
        &mut self,
        f: &InFlight,
        status: &mut [EspStatus],
    ) -> std::result::Result<BatchSummary, ProcessError> {
        let mut done = Completion::default();
        self.collect(1, self.spec.host_spin, |_, c| {
            done = *c;
            Ok(())
        })?;
        if done.cookie != f.cookie || done.kind != KIND_BATCH {
            return Err(ProcessError::Protocol { why: "batches must be completed in submission order" });
        }
        if CallStatus::from_code(done.status) != Some(CallStatus::Ok) || done.result_len != f.count {
            return Err(ProcessError::Protocol { why: "the enclave refused the batch" });
        }
        let n = f.count as usize;
        self.status_buf.clear();
        self.status_buf.resize(n * STATUS_BYTES, 0);
        self.shm.read_into(self.layout.status_offset(f.first), &mut self.status_buf);
        let mut summary = BatchSummary::default();
        for (e, s) in self.status_buf.chunks_exact(STATUS_BYTES).zip(status.iter_mut()) {
            *s = desc::decode_status([e[0], e[1]]).0;
            if *s == EspStatus::Ok {
                summary.ok += 1;
            } else {
                summary.failed += 1;
            }
        }
        self.in_flight = self.in_flight.saturating_sub(f.count);
        self.batches_in_flight = self.batches_in_flight.saturating_sub(1);
        self.alloc_tail = f.end;
        if self.batches_in_flight == 0 {
            // Start again at the table's beginning: the lines stay warm in both caches.
            self.alloc_head = 0;
            self.alloc_tail = 0;
        }
        Ok(summary)
    }
}

impl Host {
    fn submit_esp(&mut self, descriptors: &[EspDescriptor]) -> Result<InFlight> {
        if descriptors.len() > self.per_batch() {
            return Err(Error::BatchTooLarge { descriptors: descriptors.len(), max: self.per_batch() });
        }
        self.known_dead()?;
        Ok(self.submit_batch(descriptors)?)
    }

    fn complete_esp(&mut self, batch: InFlight, status: &mut [EspStatus]) -> Result<BatchSummary> {
        if status.len() != batch.count as usize {
            return Err(Error::StatusLengthMismatch {
                descriptors: batch.count as usize,
                status: status.len(),
            });
        }
        Ok(self.finish_batch(&batch, status)?)
    }
}

/// A pipelined ESP batch in flight ([`ProcessEnclave::submit_esp`]); complete batches in
/// the order they were submitted.
#[derive(Debug)]
#[must_use = "a submitted batch must be completed before the rings can be used otherwise"]
pub struct InFlight {
    cookie: u64,
    first: u32,
    count: u32,
    /// The allocator's position after this batch: where the free run starts once it is done.
    end: u64,
}

impl InFlight {
    /// Descriptors in this batch.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The bytes a descriptor may read or write, if they lie inside a buffer of `len` bytes.
fn copy_range(d: &EspDescriptor, len: usize) -> Option<Range<usize>> {
    let end = (d.offset as usize).checked_add(d.len as usize)?;
    let start = if d.opcode == EspOpcode::DECRYPT_FORWARD { d.outer_offset.min(d.offset) } else { d.offset };
    (end <= len).then_some(start as usize..end)
}

fn bad_result(_: Malformed) -> Error {
    ProcessError::Codec { why: "the enclave's result does not decode" }.into()
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// An enclave in its own hardened process, reached through shared-memory rings. Callers
/// use it exactly like [`crate::InlineEnclave`]; for zero-copy ESP batches they build
/// packets in [`ProcessEnclave::take_packet_area`] and pass that area as `packets`.
#[derive(Debug)]
pub struct ProcessEnclave {
    tenant: TenantId,
    host: Mutex<Host>,
}

impl ProcessEnclave {
    /// Starts the enclave process for `config.tenant` and waits until it is hardened and
    /// ready. `platform_key` is the software attestation key (PKCS#8 P-256,
    /// [`crate::attest::SoftwareAttestation::generate_platform_key`]). The root secret in
    /// `config` goes to the child through a pipe; this process keeps no copy.
    ///
    /// Its seal counters and static-key record last as long as this value (across
    /// [`Self::restart`]), not longer: a host that outlives it gives the tenant's lasting
    /// ledger to [`Self::start_with_ledger`].
    pub fn start(spec: ProcessSpec, config: EnclaveConfig, platform_key: &[u8]) -> Result<Self> {
        Self::start_with_ledger(spec, config, platform_key, Arc::new(Mutex::new(MemoryLedger::new())))
    }

    /// [`Self::start`] on the tenant's `ledger` on this platform: a thread of this process
    /// answers the enclave's requests to it (seal counters, live sealed secrets, static
    /// keys installed).
    pub fn start_with_ledger(
        spec: ProcessSpec,
        config: EnclaveConfig,
        platform_key: &[u8],
        ledger: SharedLedger,
    ) -> Result<Self> {
        let public = config.public();
        let direct = Direct::new(
            spec.program.clone(),
            spec.args.clone(),
            config.tenant,
            config.provisioning_key,
            platform_key,
            ledger,
        );
        Self::launch(spec, Arc::new(direct), public)
    }

    /// Has `launcher` start the enclave process for `config` and waits until it is
    /// hardened and ready; [`Self::restart`] asks the same launcher again. `spec.program`
    /// and `spec.args` are the launcher's business (the platform process runs its own).
    pub fn launch(spec: ProcessSpec, launcher: Arc<dyn Launch>, config: PublicConfig) -> Result<Self> {
        let tenant = config.tenant;
        let mut host = Host::new(spec, launcher, config)?;
        host.launch()?;
        Ok(Self { tenant, host: Mutex::new(host) })
    }

    fn host(&mut self) -> &mut Host {
        // A poisoned lock only means a panic elsewhere; the state is still consistent
        // enough to report death or keep serving.
        self.host.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Host> {
        self.host.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The child's process ID, while one is running.
    pub fn pid(&self) -> Option<u32> {
        self.locked().running.as_ref().map(|r| r.pid)
    }

    /// `Ok` while the enclave process is alive, else why it is not.
    pub fn check(&mut self) -> std::result::Result<(), ProcessError> {
        self.host().alive()
    }

    /// Starts a fresh enclave process (killing the old one if it still runs) on the same
    /// shared memory, so a lent [`PacketArea`] stays valid. The new process starts empty:
    /// handles of the old one are refused, state comes back through sealed blobs.
    pub fn restart(&mut self) -> Result<()> {
        self.host().launch().map_err(Error::from)
    }

    /// Stops the enclave process (it zeroizes its keys on the way out) and reports how it
    /// ended: `Exited(0)` for a clean stop. Calls fail with [`ProcessError::Died`] after.
    pub fn shutdown(&mut self) -> Option<ExitReport> {
        self.host().stop()
    }

    /// Lends the shared packet area (once): build packets there and pass it to
    /// [`Enclave::esp_batch`] for zero-copy batches.
    pub fn take_packet_area(&mut self) -> Option<PacketArea> {
        let h = self.host();
        if h.area_lent {
            return None;
        }
        h.area_lent = true;
        Some(PacketArea { shm: h.shm.clone(), range: h.layout.packet_range() })
    }

    /// Pipelined ESP: queues a batch over the lent [`PacketArea`] (descriptor offsets are
    /// relative to it) and returns at once, so the gateway can prepare the next batch while
    /// the enclave process transforms this one on its own core. At most
    /// [`Geometry::slots`] descriptors may be in flight; [`Enclave`] calls wait until none
    /// is. Packet bytes of a batch in flight belong to the enclave until it completes.
    pub fn submit_esp(&mut self, descriptors: &[EspDescriptor]) -> Result<InFlight> {
        self.host().submit_esp(descriptors)
    }

    /// Waits for the oldest batch in flight and writes its statuses (one per descriptor).
    pub fn complete_esp(&mut self, batch: InFlight, status: &mut [EspStatus]) -> Result<BatchSummary> {
        self.host().complete_esp(batch, status)
    }

    /// What the enclave process reported about its hardening when it became ready.
    pub fn hardening(&self) -> HardeningReport {
        self.locked().hardening
    }

    /// Descriptors the enclave process refused before any trusted code saw them, by reason.
    pub fn rejects(&self) -> RejectCounters {
        let h = self.locked();
        let mut c = RejectCounters::default();
        for (i, v) in c.0.iter_mut().enumerate() {
            *v = h.shm.atomic_u64(ctl::REJECTS + 8 * i).map_or(0, |a| a.load(Ordering::Relaxed));
        }
        c
    }

    /// How often the enclave process went to sleep on its doorbell (a measure of how much
    /// busy-polling saved).
    pub fn guest_sleeps(&self) -> u64 {
        self.locked().shm.atomic_u64(ctl::SLEEPS).map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// The geometry in use.
    pub fn geometry(&self) -> Geometry {
        self.locked().layout.geometry
    }

    /// Writes raw request slots and waits for their completions: for tests that play a
    /// hostile gateway. Returns the completions in order.
    #[doc(hidden)]
    pub fn raw_submit(&mut self, slots: &[[u8; REQUEST_SLOT]]) -> Result<Vec<Completion>> {
        let h = self.host();
        h.alive()?;
        h.idle()?;
        h.submit(slots)?;
        let mut out = Vec::with_capacity(slots.len());
        h.collect(len_u32(slots.len()), h.spec.host_spin, |_, c| {
            out.push(*c);
            Ok(())
        })?;
        Ok(out)
    }

    /// Writes raw entries into the descriptor table from index `first`: for tests that play
    /// a hostile gateway (with [`Self::raw_submit`] of a batch slot naming them).
    #[doc(hidden)]
    pub fn raw_write_descriptors(&mut self, first: u32, entries: &[[u8; DESCRIPTOR_BYTES]]) -> bool {
        let h = self.host();
        let fits = u64::from(first) + entries.len() as u64 <= u64::from(h.layout.geometry.descriptors);
        fits && (first..).zip(entries).all(|(i, e)| h.shm.write_from(h.layout.descriptor_offset(i), e))
    }

    /// Reads status table entries `first .. first + count`: for tests that play a hostile
    /// gateway. `None` if the run leaves the table.
    #[doc(hidden)]
    pub fn raw_read_statuses(&mut self, first: u32, count: u32) -> Option<Vec<[u8; STATUS_BYTES]>> {
        let h = self.host();
        if u64::from(first) + u64::from(count) > u64::from(h.layout.geometry.descriptors) {
            return None;
        }
        let mut out = vec![[0u8; STATUS_BYTES]; count as usize];
        for (i, e) in (first..).zip(out.iter_mut()) {
            h.shm.read_into(h.layout.status_offset(i), e);
        }
        Some(out)
    }

    /// Writes `bytes` into the call area at `offset`: for tests that play a hostile gateway.
    #[doc(hidden)]
    pub fn raw_write_call_area(&mut self, offset: usize, bytes: &[u8]) -> bool {
        let h = self.host();
        let r = h.layout.call_range();
        offset.checked_add(bytes.len()).is_some_and(|e| e <= r.len())
            && h.shm.write_from(r.start + offset, bytes)
    }

    /// Makes one call with raw arguments and returns its raw result: for tests that play a
    /// hostile gateway (chunked migration calls out of sequence, say).
    #[doc(hidden)]
    pub fn raw_call(&mut self, opcode: u16, args: &[u8]) -> Result<Vec<u8>> {
        self.host().call(opcode, args).map(<[u8]>::to_vec)
    }

    fn call(&mut self, opcode: u16, w: &Writer) -> Result<Vec<u8>> {
        self.host().call(opcode, &w.buf).map(<[u8]>::to_vec)
    }
}

/// Runs `f` on a reader over `bytes` and insists that everything was read.
fn decode<T>(
    bytes: &[u8],
    f: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, Malformed>,
) -> Result<T> {
    let mut r = Reader::new(bytes);
    let v = f(&mut r).map_err(bad_result)?;
    r.finish().map_err(bad_result)?;
    Ok(v)
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
