//! The enclave side: start-up hardening, then the ring loop.
//!
//! [`main`] is the whole life of an enclave process: parse the descriptors the gateway
//! passed, harden ([`super::harden`]), read the root secret from the config pipe into secret
//! memory, start the trusted core, install seccomp, report ready, then serve the rings until
//! asked to stop or until the gateway dies. [`Server`] is the loop's body without any of
//! the process set-up, so tests and the fuzz target drive it over an in-process mapping.
#![allow(unsafe_code)]

use super::codec::{self, op, Reader, Writer};
use super::desc::{self, BatchDescriptor, CallStatus, Completion, Request, KIND_BATCH, KIND_CALL};
use super::doorbell::{self, Doorbell};
use super::harden::{self, LoopFds, SecretArena, SecretMemory};
use super::layout::{
    ctl, Layout, COMPLETION_SLOT, DESCRIPTOR_BYTES, DESCRIPTOR_GRANULE, REQUEST_SLOT, STATE_READY,
    STATE_STOPPED, STATUS_BYTES,
};
use super::ring::{Consumer, Producer};
use super::shm::SharedMem;
use super::staging::{self, Staging};
use super::validate::{self, RejectCounters, RejectReason};
use super::wire::{Arg, Ret};
use super::ProcessError;
use super::{bits, config, GuestArgs};
use enclave_api::esp::{EspDescriptor, EspStatus};
use enclave_api::Enclave;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ring loop's body: validates and dispatches whatever the gateway queued.
#[derive(Debug)]
pub struct Server {
    shm: Arc<SharedMem>,
    layout: Layout,
    requests: Consumer<REQUEST_SLOT>,
    completions: Producer<COMPLETION_SLOT>,
    rejects: RejectCounters,
    /// Rejects changed since they were last mirrored into the control block.
    rejects_dirty: bool,
    handled: u64,
    completion_ring_corrupt: bool,
    max_batch: u32,
    /// Descriptors that passed validation.
    descs: Vec<EspDescriptor>,
    status: Vec<EspStatus>,
    /// The batch's status entries, written to the status table in one go.
    out: Vec<u8>,
    args: Vec<u8>,
    /// Migration arguments and results larger than the call area, between calls.
    staging: Staging,
}

impl Server {
    /// A server over `shm` laid out as `layout`, handing the trusted core at most
    /// `max_batch` descriptors per call (batches above that, or above the descriptor table,
    /// are refused).
    pub fn new(shm: Arc<SharedMem>, layout: Layout, max_batch: usize) -> Result<Self, ProcessError> {
        if shm.len() < layout.total {
            return Err(ProcessError::SharedMemory { why: "mapping smaller than the layout" });
        }
        let table = layout.geometry.descriptors;
        let max_batch = u32::try_from(max_batch).unwrap_or(u32::MAX).clamp(1, table);
        let n = max_batch as usize;
        Ok(Self {
            requests: Consumer::new(shm.clone(), layout.requests)?,
            completions: Producer::new(shm.clone(), layout.completions)?,
            shm,
            layout,
            rejects: RejectCounters::default(),
            rejects_dirty: false,
            handled: 0,
            completion_ring_corrupt: false,
            max_batch,
            descs: Vec::with_capacity(n),
            status: Vec::with_capacity(n),
            out: vec![0; n * STATUS_BYTES],
            args: Vec::new(),
            staging: Staging::default(),
        })
    }

    /// Refusals so far.
    pub fn rejects(&self) -> &RejectCounters {
        &self.rejects
    }

    /// Whether the gateway has queued anything.
    pub fn has_work(&self) -> bool {
        self.requests.ready(0)
    }

    fn reject(&mut self, r: RejectReason) {
        self.rejects.record(r);
        self.rejects_dirty = true;
    }

    /// Handles what is queued, in order, up to [`POLL_LIMIT`] slots and while the completion
    /// ring has room; returns the
    /// number of request slots consumed. Each slot's completion is published as soon as it
    /// is done, so the gateway can reuse a finished batch's packets while later batches run.
    /// The next entry is known from its slot's stamp, a line this loop prefetched while the
    /// previous batch's crypto ran.
    pub fn poll<E: Enclave + ?Sized>(&mut self, enclave: &mut E) -> u32 {
        let mut n = 0u32;
        while n < POLL_LIMIT && self.requests.ready(n) {
            match self.completions.free_at_least(1) {
                Ok(0) => break,
                Ok(_) => self.completion_ring_corrupt = false,
                Err(_) => {
                    // Count once per episode, not once per spin.
                    if !self.completion_ring_corrupt {
                        self.completion_ring_corrupt = true;
                        self.reject(RejectReason::CorruptIndex);
                        self.publish_counters();
                    }
                    break;
                }
            }
            let mut slot = [0u8; REQUEST_SLOT];
            self.requests.read(n, &mut slot);
            let (kind, cookie) = desc::request_header(&slot);
            let done = match desc::decode_request(&slot) {
                Err(r) => {
                    self.reject(r);
                    let kind = if kind == KIND_BATCH || kind == KIND_CALL { kind } else { 0 };
                    Completion {
                        cookie,
                        kind,
                        status: CallStatus::Rejected as u8,
                        reject: r.code(),
                        result_len: 0,
                    }
                }
                Ok(Request::Batch(b)) => self.serve_batch(enclave, &b, cookie, n),
                Ok(Request::Call(c)) => self.serve_call(enclave, &c, cookie),
            };
            self.completions.write(0, &done.encode());
            self.completions.publish(1);
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        // One store for all the slots taken: the host reads this index rarely (see
        // `Producer::free_at_least`), so it need not move per slot.
        self.requests.release(n);
        self.handled = self.handled.wrapping_add(u64::from(n));
        self.publish_counters();
        n
    }

    /// One batch: one copy of its descriptors out of the table, every descriptor validated
    /// on that copy, the valid ones run as one trusted batch in place in the packet area,
    /// and every status written back in one go.
    fn serve_batch<E: Enclave + ?Sized>(
        &mut self,
        enclave: &mut E,
        b: &BatchDescriptor,
        cookie: u64,
        pos: u32,
    ) -> Completion {
        let g = self.layout.geometry;
        if let Err(r) = validate::validate_batch(b, g.descriptors, self.max_batch) {
            self.reject(r);
            return Completion {
                cookie,
                kind: KIND_BATCH,
                status: CallStatus::Rejected as u8,
                reject: r.code(),
                result_len: 0,
            };
        }
        let n = b.count as usize;
        let prefetch = self.prefetch_plan(b, pos);
        // Sized for the largest batch at start, and validate_batch checked count <= that:
        // nothing to allocate or clear per batch.
        let Some(out) = self.out.get_mut(..n * STATUS_BYTES) else {
            let r = RejectReason::BatchTooLarge;
            return Completion {
                cookie,
                kind: KIND_BATCH,
                status: CallStatus::Rejected as u8,
                reject: r.code(),
                result_len: 0,
            };
        };
        // In bounds: validate_batch checked first + count <= the table's entries.
        let off = self.layout.descriptor_offset(b.first);
        let refused =
            check_descriptors(&self.shm, off, out, g.packet_len, &mut self.descs, &mut self.rejects);
        self.rejects_dirty |= refused;
        if !self.descs.is_empty() {
            self.status.clear();
            self.status.resize(self.descs.len(), EspStatus::NotProcessed);
            for (off, len, write) in prefetch {
                self.shm.prefetch(off, len, write);
            }
            // SAFETY: this server is the only holder of a slice over the packet area in this
            // process, and the slice dies at the end of this block. The gateway may write the
            // bytes concurrently; the trusted ESP code treats packet bytes as hostile input
            // and every region it touches was bounds-checked above against this slice's
            // length.
            let area = unsafe { self.shm.slice_mut(self.layout.packet_range()) };
            if let Some(area) = area {
                // A refused batch (it cannot be: its size was checked) leaves NotProcessed.
                let _ = enclave.esp_batch(area, &self.descs, &mut self.status);
            }
            // Accepted entries are the ones without a reject code, in order.
            let accepted = out.chunks_exact_mut(STATUS_BYTES).filter(|e| !refused || e[1] == 0);
            for (e, s) in accepted.zip(&self.status) {
                e[0] = s.code();
            }
        }
        let _ = self.shm.write_from(self.layout.status_offset(b.first), out);
        Completion { cookie, kind: KIND_BATCH, status: CallStatus::Ok as u8, reject: 0, result_len: b.count }
    }

    /// Starts fetching, while this batch's crypto runs, the lines the rest of this batch and
    /// the next one will touch: the next request slot, the run of the descriptor table a
    /// gateway that allocates runs in order would use next (a guess: it only saves time when
    /// right, and the copy that counts is still made and checked later), this batch's status
    /// entries and the next completion slot (for writing).
    fn prefetch_plan(&self, b: &BatchDescriptor, pos: u32) -> [(usize, usize, bool); 4] {
        let table = self.layout.geometry.descriptors;
        let n = b.count as usize;
        let end = b.first.saturating_add(b.count);
        let mut next = end.checked_next_multiple_of(DESCRIPTOR_GRANULE).unwrap_or(0);
        if u64::from(next) + u64::from(b.count) > u64::from(table) {
            next = 0;
        }
        [
            (self.requests.slot_offset(pos + 1), REQUEST_SLOT, false),
            (self.layout.descriptor_offset(next), n * DESCRIPTOR_BYTES, false),
            (self.layout.status_offset(b.first), n * STATUS_BYTES, true),
            (self.completions.slot_offset(0), COMPLETION_SLOT, true),
        ]
    }

    fn serve_call<E: Enclave + ?Sized>(
        &mut self,
        enclave: &mut E,
        c: &desc::CallDescriptor,
        cookie: u64,
    ) -> Completion {
        let refuse = |r: RejectReason| Completion {
            cookie,
            kind: KIND_CALL,
            status: CallStatus::Rejected as u8,
            reject: r.code(),
            result_len: 0,
        };
        let call_len = self.layout.geometry.call_len;
        if let Err(r) = validate::validate_call(c, call_len) {
            self.reject(r);
            return refuse(r);
        }
        // One fetch of the arguments into private memory; everything decodes from that.
        self.args.clear();
        self.args.resize(c.arg_len as usize, 0);
        let base = self.layout.call;
        if !self.shm.read_into(base + c.arg_off as usize, &mut self.args) {
            self.reject(RejectReason::OutOfBounds);
            return refuse(RejectReason::OutOfBounds);
        }
        let mut out = Writer::new();
        let args = core::mem::take(&mut self.args);
        let staged =
            staging::dispatch(&mut self.staging, enclave, c.opcode, &args, &mut out, c.res_cap as usize);
        let r = staged.unwrap_or_else(|| dispatch(enclave, c.opcode, &args, &mut out, call_len as usize));
        self.args = args;
        let status = match r {
            Err(reason) => {
                self.reject(reason);
                return refuse(reason);
            }
            Ok(Ok(())) => CallStatus::Ok,
            Ok(Err(e)) => {
                out.buf.clear();
                codec::put_error(&mut out, &e);
                CallStatus::Refused
            }
        };
        let len = out.buf.len();
        let fits = u32::try_from(len).ok().filter(|&l| l <= c.res_cap);
        let Some(result_len) = fits else {
            self.reject(RejectReason::ResultTooLarge);
            return refuse(RejectReason::ResultTooLarge);
        };
        // In bounds: validate_call checked res_off + res_cap <= call_len.
        let _ = self.shm.write_from(base + c.res_off as usize, &out.buf);
        Completion { cookie, kind: KIND_CALL, status: status as u8, reject: 0, result_len }
    }

    /// Mirrors the counters into the control block for the gateway to read (the reject
    /// counters only when they changed: these lines are the guest's alone, but a store to
    /// each per batch is work for nothing).
    fn publish_counters(&mut self) {
        if self.rejects_dirty {
            for (i, v) in self.rejects.0.iter().enumerate() {
                if let Some(a) = self.shm.atomic_u64(ctl::REJECTS + 8 * i) {
                    a.store(*v, Ordering::Relaxed);
                }
            }
            self.rejects_dirty = false;
        }
        if let Some(a) = self.shm.atomic_u64(ctl::REQUESTS) {
            a.store(self.handled, Ordering::Relaxed);
        }
    }
}

/// Reads a batch's descriptors (one per status entry of `out`) out of the table at `off`,
/// each once, as four words, and checks that private copy: pushes the accepted ones to
/// `descs` and gives their status entries reject code 0 (the status follows after the
/// trusted batch); writes a refused one's status entry and counts it. Returns whether any
/// was refused. This runs once per packet on the enclave's core, so it allocates nothing
/// and keeps no second list; a function of its own, so that the compiler sees that its
/// arguments do not alias and keeps the loop in registers.
fn check_descriptors(
    shm: &SharedMem,
    off: usize,
    out: &mut [u8],
    packet_len: u32,
    descs: &mut Vec<EspDescriptor>,
    rejects: &mut RejectCounters,
) -> bool {
    const WORDS: usize = DESCRIPTOR_BYTES / 8;
    descs.clear();
    let mut max_end = 0u64;
    let mut refused = false;
    let n = out.len() / STATUS_BYTES;
    let read = shm.read_records::<WORDS>(off, n, |i, w| {
        let checked = validate::check_words(&w, packet_len).and_then(|d| {
            let (start, end) = validate::region(&d);
            // In ascending order (a gateway's usual layout) one comparison decides.
            if u64::from(start) < max_end && validate::overlaps_any(descs, start, end) {
                return Err(RejectReason::Overlap);
            }
            max_end = max_end.max(end);
            Ok(d)
        });
        let entry = match checked {
            Ok(d) => {
                descs.push(d);
                desc::encode_status(EspStatus::NotProcessed, None)
            }
            Err(r) => {
                rejects.record(r);
                refused = true;
                desc::encode_status(r.esp_status(), Some(r))
            }
        };
        if let Some(e) = out.get_mut(i * STATUS_BYTES..(i + 1) * STATUS_BYTES) {
            e.copy_from_slice(&entry);
        }
    });
    if !read {
        // Unreachable after validate_batch; refuse every descriptor rather than run none.
        for e in out.chunks_exact_mut(STATUS_BYTES) {
            let r = RejectReason::BatchOutOfBounds;
            e.copy_from_slice(&desc::encode_status(r.esp_status(), Some(r)));
        }
        descs.clear();
        refused = true;
    }
    refused
}

/// The guest's dispatch, made from the call table: `dispatch` decodes a call's arguments
/// (as [`enclave_api::process::wire`] says), runs it, encodes its result.
macro_rules! guest_dispatch {
    ([] $(
        $(#[$attr:meta])*
        $kind:ident $opname:ident = $opnum:literal
        fn $name:ident ( $( $(#[$pm:ident])? $p:ident : $t:ty ),* ) -> $ret:ty $( = |$dthis:ident| $default:block )? ;
    )*) => {
        /// Decodes a call's arguments, runs it, encodes its result. `Err` is a transport
        /// refusal (unknown opcode, undecodable arguments); `Ok(Err(_))` the trusted core's
        /// refusal. Export and import are [`staging::dispatch`]'s: they keep state between
        /// calls. An output buffer may be at most `max_out` bytes (what could ever return).
        pub fn dispatch<E: Enclave + ?Sized>(
            e: &mut E,
            opcode: u16,
            args: &[u8],
            w: &mut Writer,
            max_out: usize,
        ) -> Result<crate::Result<()>, RejectReason> {
            let mut r = Reader::new(args);
            match opcode {
                $( op::$opname => guest_arm!($kind e, r, w, max_out; $name ( $( [$($pm)?] $p : $t ),* ) -> $ret), )*
                _ => Err(RejectReason::UnknownOpcode),
            }
        }
    };
}

/// One call. A query's value is the whole result; a staged call never reaches here.
macro_rules! guest_arm {
    (staged $($rest:tt)*) => {
        Err(RejectReason::UnknownOpcode)
    };
    (query $e:ident, $r:ident, $w:ident, $max:ident; $name:ident () -> $ret:ty) => {{
        $r.finish()?;
        Ret::put(&$e.$name(), $w);
        Ok(Ok(()))
    }};
    ($kind:ident $e:ident, $r:ident, $w:ident, $max:ident;
        $name:ident ( $( [$($pm:ident)?] $p:ident : $t:ty ),* ) -> $ret:ty) => {{
        $(
            #[allow(unused_mut)] // only the buffers the call writes change
            let mut $p = guest_get!([$($pm)?] $r, $max, $t);
        )*
        $r.finish()?;
        Ok($e.$name($( guest_pass!([$($pm)?] $p, $t) ),*).map(|ret| {
            Ret::put(&ret, $w);
            $( guest_give!([$($pm)?] $w, $p); )*
        }))
    }};
}

/// Reads an argument into private memory: an `#[out]` buffer is made zeroed, of the length
/// asked (bounded), an `#[inout]` one copied.
macro_rules! guest_get {
    ([out] $r:ident, $max:ident, $t:ty) => {{
        let n = $r.u32()? as usize;
        if n > $max {
            return Err(RejectReason::BadArguments);
        }
        vec![0u8; n]
    }};
    ([inout] $r:ident, $max:ident, $t:ty) => {
        $r.bytes()?.to_vec()
    };
    ([] $r:ident, $max:ident, $t:ty) => {
        <$t as Arg>::get(&mut $r)?
    };
}

macro_rules! guest_pass {
    ([] $p:ident, $t:ty) => {
        <$t as Arg>::pass(&$p)
    };
    ([$m:ident] $p:ident, $t:ty) => {
        &mut $p[..]
    };
}

/// After the return value: each buffer the call wrote.
macro_rules! guest_give {
    ([] $w:ident, $p:ident) => {};
    ([$m:ident] $w:ident, $p:ident) => {
        $w.bytes(&$p);
    };
}

enclave_api::enclave_calls!({ guest_dispatch } []);

// ---- the enclave process -----------------------------------------------------------------

fn take_fd(fd: RawFd) -> Result<OwnedFd, ProcessError> {
    // SAFETY: F_GETFD only inspects the descriptor number.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(ProcessError::Args { why: "descriptor is not open" });
    }
    // SAFETY: the host passed this open descriptor for us alone; we take sole ownership
    // (each number is taken once: `main` checks they are distinct).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads the config pipe to its end into `buf`; returns the bytes read.
fn read_config(fd: &OwnedFd, buf: &mut [u8]) -> Result<usize, ProcessError> {
    let mut n = 0usize;
    while let Some(rest) = buf.get_mut(n..) {
        if rest.is_empty() {
            return Err(ProcessError::Args { why: "config too long" });
        }
        // SAFETY: reads at most `rest.len()` bytes into the live buffer `rest`.
        let r = unsafe { libc::read(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len()) };
        match r {
            0 => break,
            r if r > 0 => n += r as usize,
            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return Err(ProcessError::last_os("read(config)")),
        }
    }
    Ok(n)
}

/// The enclave process's life. Returns only on a start-up failure (the caller prints it
/// and exits non-zero) or at the end of service.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> Result<(), ProcessError> {
    // Before anything else, and before any key byte exists in this process.
    harden::non_dumpable()?;
    let mut hardening = bits::NON_DUMPABLE;
    let a = GuestArgs::parse(args)?;
    let fds = [a.shm_fd, a.request_fd, a.completion_fd, a.config_fd, a.ledger_fd];
    if (1..fds.len()).any(|i| fds[..i].contains(&fds[i])) {
        return Err(ProcessError::Args { why: "descriptors must be distinct" });
    }
    harden::close_fds_except(&fds)?;
    hardening |= bits::FDS_CLOSED;
    if harden::empty_network_namespace()? {
        hardening |= bits::NETNS_VIA_USERNS;
    }
    hardening |= bits::EMPTY_NETNS;
    harden::lock_memory()?;
    hardening |= bits::MEMORY_LOCKED;
    let parent = harden::parent_pidfd(a.parent_pid)?;

    let layout = Layout::new(a.geometry)?;
    let shm = Arc::new(SharedMem::from_fd(take_fd(a.shm_fd)?, layout.total)?);
    let requests = Doorbell::from_fd(take_fd(a.request_fd)?)?;
    let completions = Doorbell::from_fd(take_fd(a.completion_fd)?)?;

    // The root secret goes straight into secret memory, and is zeroized there on drop.
    let mut arena = SecretArena::new(config::MAX_LEN + 1)?;
    hardening |= match arena.kind() {
        SecretMemory::MemfdSecret => bits::MEMFD_SECRET,
        SecretMemory::Mlocked => bits::MLOCK_ARENA,
    };
    let config_fd = take_fd(a.config_fd)?;
    let n = read_config(&config_fd, arena.bytes_mut())?;
    drop(config_fd);
    let raw = arena.bytes_mut().get(..n).ok_or(ProcessError::Args { why: "config" })?;
    let (cfg, pk) = config::decode(raw).ok_or(ProcessError::Args { why: "config does not decode" })?;
    let max_batch = cfg.limits.max_batch;
    let measured = cfg.measured_bytes(crate::Backend::Process);
    let platform_key = raw.get(pk).unwrap_or(&[]);
    let attestation = crate::attest::SoftwareAttestation::new(
        platform_key,
        crate::attest::CodeIdentity::CurrentExecutable,
        &measured,
    )
    .map_err(|_| ProcessError::Args { why: "attestation platform key refused" })?;
    let ledger_fd = take_fd(a.ledger_fd)?;
    let ledger_raw = ledger_fd.as_raw_fd();
    let ledger = enclave_api::ledger::LedgerClient::new(ledger_fd)
        .map_err(|_| ProcessError::Args { why: "ledger descriptor is not a socket" })?;
    let mut enclave = crate::InlineEnclave::start_with_ledger(cfg, Box::new(attestation), Box::new(ledger))
        .map_err(|_| ProcessError::Args { why: "trusted core failed to start (self-test)" })?;
    drop(arena);

    let mut server = Server::new(shm.clone(), layout, max_batch)?;
    // Read before seccomp: getpid is not on the loop's allow-list.
    let pid = std::process::id();
    harden::install_seccomp(LoopFds {
        requests: requests.fd().as_raw_fd(),
        completions: completions.fd().as_raw_fd(),
        ledger: ledger_raw,
    })?;
    hardening |= bits::SECCOMP;

    let store = |off: usize, v: u32| {
        if let Some(x) = shm.atomic_u32(off) {
            x.store(v, Ordering::Release);
        }
    };
    store(ctl::HARDENING, hardening);
    store(ctl::GUEST_PID, pid);
    store(ctl::STATE, STATE_READY);
    fence(Ordering::SeqCst);
    completions.ring();

    serve(&shm, &mut server, &mut enclave, &requests, &completions, &parent, a.spin);
    store(ctl::STATE, STATE_STOPPED);
    completions.ring();
    // `enclave` drops here: every key table zeroizes its entries.
    Ok(())
}

/// How many looks for work the busy-poll makes between yields of its core (about 8 µs); a
/// multiple of 64, the looks between clock reads.
const YIELD_EVERY: u32 = 256;

/// Most request slots one [`Server::poll`] takes before it releases them: a gateway that
/// keeps the ring busy must see slots come free long before it has written a ring's worth.
pub const POLL_LIMIT: u32 = 16;

/// Serves until asked to stop or until the gateway is gone.
fn serve<E: Enclave + ?Sized>(
    shm: &SharedMem,
    server: &mut Server,
    enclave: &mut E,
    requests: &Doorbell,
    completions: &Doorbell,
    parent: &OwnedFd,
    spin: Duration,
) {
    let flag = |off: usize| shm.atomic_u32(off).map_or(0, |a| a.load(Ordering::SeqCst));
    let set = |off: usize, v: u32| {
        if let Some(a) = shm.atomic_u32(off) {
            a.store(v, Ordering::SeqCst);
        }
    };
    let mut sleeps = 0u64;
    // Completions published since the last fenced look at the host's waiting flag.
    let mut unfenced = false;
    loop {
        if server.poll(enclave) > 0 {
            // A plain look: catches a host that went to sleep a while ago. No fence per
            // batch: it would stall this core until the other core has taken every line this
            // batch wrote. A host that starts waiting just now is caught by the fenced look
            // below, once the work queued ahead of it is done (it cannot queue more while it
            // sleeps).
            if shm.atomic_u32(ctl::HOST_WAITING).is_some_and(|a| a.load(Ordering::Relaxed) != 0) {
                completions.ring();
            }
            unfenced = true;
            continue;
        }
        if unfenced {
            wake_host(shm, completions);
            unfenced = false;
        }
        if flag(ctl::SHUTDOWN) != 0 {
            return;
        }
        // Busy-poll a while: under load the next batch arrives before we would have slept.
        let deadline = Instant::now() + spin;
        let mut found = false;
        // Look for work after every PAUSE (about 30 ns here): 64 PAUSEs between looks made a
        // request wait up to 2 µs. The clock is read only every 64 looks.
        let mut spins = 0u32;
        loop {
            core::hint::spin_loop();
            if server.has_work() || flag(ctl::SHUTDOWN) != 0 {
                found = true;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if Instant::now() >= deadline {
                    break;
                }
                // Give the core away every few microseconds: where cores are shared (two
                // vCPUs carrying the gateway, this process and the peers' load), a plain
                // spin holds a whole core for the spin's length and starves the gateway
                // thread whose next request we wait for. A yield with nothing else runnable
                // returns at once, so the core never idles and the next request needs no
                // wake-up (about 35 µs on a VM). Yielding every 2048 looks (never, within
                // the spin) held IKE setups under load to about strongSwan's rate; every 256
                // lifted them by a half (`bench/ike-setup.sh`).
                if spins.is_multiple_of(YIELD_EVERY) {
                    std::thread::yield_now();
                }
            }
        }
        if found {
            continue;
        }
        set(ctl::GUEST_SLEEPING, 1);
        fence(Ordering::SeqCst);
        if server.has_work() || flag(ctl::SHUTDOWN) != 0 {
            set(ctl::GUEST_SLEEPING, 0);
            continue;
        }
        sleeps += 1;
        if let Some(a) = shm.atomic_u64(ctl::SLEEPS) {
            a.store(sleeps, Ordering::Relaxed);
        }
        let ready = doorbell::wait(&[requests.fd(), std::os::fd::AsFd::as_fd(parent)], None).unwrap_or(0);
        set(ctl::GUEST_SLEEPING, 0);
        requests.drain();
        if ready & 0b10 != 0 {
            // The gateway exited: nobody can reach us any more; leave, zeroizing keys.
            return;
        }
    }
}

/// Rings the completion doorbell if the host is asleep on it.
fn wake_host(shm: &SharedMem, completions: &Doorbell) {
    fence(Ordering::SeqCst);
    if shm.atomic_u32(ctl::HOST_WAITING).is_some_and(|a| a.load(Ordering::SeqCst) != 0) {
        completions.ring();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::desc::{encode_batch, encode_call, CallDescriptor};
    use crate::process::layout::Geometry;
    use crate::process::mock::MockEnclave;
    use crate::process::ring;
    use enclave_api::alg::{Cipher, Role, Suite};
    use enclave_api::esp::EspOpcode;
    use enclave_api::handle::{EspSaHandle, IkeSaHandle};
    use enclave_api::ike::{ChildSaPair, ChildSaParams};

    const G: Geometry = Geometry { slots: 8, descriptors: 64, packet_len: 4096, call_len: 64 << 10 };
    const UNWRITTEN: [u8; STATUS_BYTES] = [0xee, 0xee];

    /// Plays the gateway over an in-process mapping.
    struct Rig {
        shm: Arc<SharedMem>,
        layout: Layout,
        req: Producer<REQUEST_SLOT>,
        comp: Consumer<COMPLETION_SLOT>,
        server: Server,
        enclave: MockEnclave,
        pair: ChildSaPair,
    }

    fn rig(max_batch: usize) -> Rig {
        let layout = Layout::new(G).unwrap();
        let shm = Arc::new(SharedMem::create(layout.total).unwrap());
        ring::reset(&shm, &layout.requests, 0);
        ring::reset(&shm, &layout.completions, 0);
        let mut enclave = MockEnclave::new(max_batch);
        let params = ChildSaParams {
            role: Role::Initiator,
            suite: Suite::aead(Cipher::AesGcm16_128),
            esn: false,
            nonce_i: &[0; 16],
            nonce_r: &[0; 16],
            spi_inbound: 1,
            spi_outbound: 2,
        };
        let pair = enclave.child_sa_create(IkeSaHandle(0), None, None, &params).unwrap();
        // A marker in every status entry, so that a test sees which ones were written.
        for i in 0..G.descriptors {
            shm.write_from(layout.status_offset(i), &UNWRITTEN);
        }
        Rig {
            req: Producer::new(shm.clone(), layout.requests).unwrap(),
            comp: Consumer::new(shm.clone(), layout.completions).unwrap(),
            server: Server::new(shm.clone(), layout, max_batch).unwrap(),
            shm,
            layout,
            enclave,
            pair,
        }
    }

    impl Rig {
        fn run(&mut self, slots: &[[u8; REQUEST_SLOT]]) -> Vec<Completion> {
            for (i, s) in (0u32..).zip(slots) {
                self.req.write(i, s);
            }
            self.req.publish(u32::try_from(slots.len()).unwrap());
            let n = self.server.poll(&mut self.enclave);
            assert_eq!(n as usize, slots.len());
            let avail = self.comp.available(u32::MAX);
            let mut out = Vec::new();
            for i in 0..avail {
                let mut s = [0u8; COMPLETION_SLOT];
                self.comp.read(i, &mut s);
                out.push(Completion::decode(&s));
            }
            self.comp.release(avail);
            out
        }

        /// Writes raw descriptor table entries from `first`.
        fn put(&self, first: u32, entries: &[[u8; DESCRIPTOR_BYTES]]) {
            for (i, e) in (first..).zip(entries) {
                assert!(self.shm.write_from(self.layout.descriptor_offset(i), e));
            }
        }

        /// One batch of `descs` at `first`, run; its completion and its statuses.
        fn batch(
            &mut self,
            cookie: u64,
            first: u32,
            descs: &[EspDescriptor],
        ) -> (Completion, Vec<(EspStatus, Option<RejectReason>)>) {
            let raw: Vec<_> = descs.iter().map(EspDescriptor::encode).collect();
            self.put(first, &raw);
            let count = u32::try_from(descs.len()).unwrap();
            let done = self.run(&[encode_batch(cookie, &BatchDescriptor { first, count })]);
            (done[0], self.statuses(first, count))
        }

        fn statuses(&self, first: u32, count: u32) -> Vec<(EspStatus, Option<RejectReason>)> {
            (first..first + count)
                .map(|i| {
                    let mut e = [0u8; STATUS_BYTES];
                    assert!(self.shm.read_into(self.layout.status_offset(i), &mut e));
                    desc::decode_status(e)
                })
                .collect()
        }

        fn raw_status(&self, i: u32) -> [u8; STATUS_BYTES] {
            let mut e = [0u8; STATUS_BYTES];
            assert!(self.shm.read_into(self.layout.status_offset(i), &mut e));
            e
        }

        fn packets(&self) -> Vec<u8> {
            let mut v = vec![0u8; G.packet_len as usize];
            self.shm.read_into(self.layout.packets, &mut v);
            v
        }
    }

    #[test]
    fn a_valid_batch_is_one_slot_one_trusted_call_and_one_completion() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let descs: Vec<_> = (0..4u32).map(|i| EspDescriptor::encrypt(out, i * 100, 64, 1)).collect();
        let (done, st) = r.batch(77, 32, &descs);
        assert_eq!(
            (done.cookie, done.kind, done.status, done.reject, done.result_len),
            (77, KIND_BATCH, CallStatus::Ok as u8, 0, 4)
        );
        assert_eq!(st, vec![(EspStatus::Ok, None); 4]);
        let p = r.packets();
        assert!(p[..64].iter().all(|&b| b == 0xff) && p[64..100].iter().all(|&b| b == 0));
        assert_eq!(r.enclave.counters().batches, 1, "one crossing, one trusted batch");
        assert_eq!(r.server.rejects().total(), 0);
        // The statuses went exactly to the batch's entries.
        assert_eq!((r.raw_status(31), r.raw_status(36)), (UNWRITTEN, UNWRITTEN));
    }

    #[test]
    fn every_forged_field_is_refused_counted_and_leaves_memory_alone() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let mut bad_op = EspDescriptor::encrypt(out, 0, 64, 1);
        bad_op.opcode = EspOpcode(9);
        let mut reserved = EspDescriptor::encrypt(out, 0, 64, 1).encode();
        reserved[30] = 1;
        let entries = [
            EspDescriptor::encrypt(out, G.packet_len - 10, 64, 1).encode(),
            EspDescriptor::encrypt(out, u32::MAX - 10, 64, 1).encode(),
            EspDescriptor::encrypt(out, 0, 10, 1).encode(),
            bad_op.encode(),
            EspDescriptor::decrypt_forward(r.pair.inbound, 100, 100, 64, 1).encode(),
            reserved,
        ];
        r.put(0, &entries);
        let done = r.run(&[encode_batch(1, &BatchDescriptor { first: 0, count: 6 })]);
        assert_eq!((done[0].status, done[0].result_len), (CallStatus::Ok as u8, 6));
        let want = [
            (EspStatus::OutOfBounds, Some(RejectReason::OutOfBounds)),
            (EspStatus::OutOfBounds, Some(RejectReason::OutOfBounds)),
            (EspStatus::BadLength, Some(RejectReason::BadLength)),
            (EspStatus::UnknownOpcode, Some(RejectReason::UnknownOpcode)),
            (EspStatus::BadOuterHeader, Some(RejectReason::BadOuterHeader)),
            (EspStatus::Malformed, Some(RejectReason::ReservedBytes)),
        ];
        assert_eq!(r.statuses(0, 6), want);
        assert_eq!(r.server.rejects().total(), 6);
        assert!(r.packets().iter().all(|&b| b == 0), "no byte of the area was touched");
        assert_eq!(r.enclave.counters().batches, 0, "nothing reached the trusted code");
        // The counters are mirrored for the gateway.
        let oob = r.shm.atomic_u64(ctl::REJECTS + 8 * RejectReason::OutOfBounds.index()).unwrap();
        assert_eq!(oob.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn bad_batch_runs_and_sizes_are_refused_whole_and_unread() {
        let mut r = rig(8);
        let out = r.pair.outbound;
        // Valid descriptors everywhere, so only the batch itself can be at fault.
        let good: Vec<_> = (0..64u32).map(|i| EspDescriptor::encrypt(out, i * 64, 64, 1).encode()).collect();
        r.put(0, &good);
        let mut reserved = encode_batch(5, &BatchDescriptor { first: 0, count: 1 });
        reserved[30] = 1;
        let slots = [
            encode_batch(1, &BatchDescriptor { first: 60, count: 5 }),
            encode_batch(2, &BatchDescriptor { first: u32::MAX, count: 2 }),
            encode_batch(3, &BatchDescriptor { first: 0, count: 9 }),
            encode_batch(4, &BatchDescriptor { first: 0, count: u32::MAX }),
            reserved,
        ];
        let done = r.run(&slots);
        let got: Vec<_> =
            done.iter().map(|c| (c.cookie, c.kind, c.status, RejectReason::from_code(c.reject))).collect();
        let rej = CallStatus::Rejected as u8;
        assert_eq!(
            got,
            [
                (1, KIND_BATCH, rej, Some(RejectReason::BatchOutOfBounds)),
                (2, KIND_BATCH, rej, Some(RejectReason::BatchOutOfBounds)),
                (3, KIND_BATCH, rej, Some(RejectReason::BatchTooLarge)),
                (4, KIND_BATCH, rej, Some(RejectReason::BatchTooLarge)),
                (5, KIND_BATCH, rej, Some(RejectReason::ReservedBytes)),
            ]
        );
        assert!(r.packets().iter().all(|&b| b == 0));
        assert_eq!(r.enclave.counters().batches, 0);
        assert!((0..64).all(|i| r.raw_status(i) == UNWRITTEN), "no status written");
        assert_eq!(r.server.rejects().total(), 5);
        // An empty batch is answered, with nothing to do.
        let (c, st) = r.batch(6, 64, &[]);
        assert_eq!((c.status, c.result_len, st.len()), (CallStatus::Ok as u8, 0, 0));
        // The largest batch allowed runs.
        let (c, st) = r.batch(
            7,
            56,
            &(0..8u32).map(|i| EspDescriptor::encrypt(out, i * 64, 64, 1)).collect::<Vec<_>>(),
        );
        assert_eq!((c.status, c.result_len), (CallStatus::Ok as u8, 8));
        assert!(st.iter().all(|s| s.0 == EspStatus::Ok));
    }

    #[test]
    fn overlapping_descriptors_are_refused_and_the_rest_run() {
        let mut r = rig(32);
        let (out, inb) = (r.pair.outbound, r.pair.inbound);
        let descs = [
            EspDescriptor::encrypt(out, 0, 64, 1),
            EspDescriptor::encrypt(out, 63, 64, 2), // shares byte 63
            EspDescriptor::encrypt(out, 64, 64, 3), // touches, does not share
            EspDescriptor::encrypt(out, 0, 200, 4), // covers the first two
            EspDescriptor::decrypt_forward(inb, 100, 130, 64, 5), // its outer header overlaps 64..128
            EspDescriptor::encrypt(out, 1000, 64, 6),
            EspDescriptor::encrypt(out, 500, 64, 7), // out of order, into a gap
            EspDescriptor::decrypt(inb, 520, 64, 8), // out of order, overlaps the one before
        ];
        let (_, st) = r.batch(1, 0, &descs);
        let o = (EspStatus::Ok, None);
        let x = (EspStatus::Overlap, Some(RejectReason::Overlap));
        assert_eq!(st, [o, x, o, x, x, o, o, x]);
        assert_eq!(r.server.rejects().get(RejectReason::Overlap), 4);
        assert_eq!(r.enclave.counters().batches, 1);
        let p = r.packets();
        assert!(p[..128].iter().all(|&b| b == 0xff), "the two accepted regions, once each");
        assert!(p[128..500].iter().all(|&b| b == 0));
    }

    #[test]
    fn descriptors_are_copied_once_then_validated() {
        // The copy is what counts: rewriting the table after the guest read it changes
        // nothing (a TOCTOU race has no second read to win).
        let mut r = rig(32);
        let out = r.pair.outbound;
        let d = EspDescriptor::encrypt(out, 0, 64, 1);
        r.put(0, &[d.encode()]);
        r.req.write(0, &encode_batch(1, &BatchDescriptor { first: 0, count: 1 }));
        r.req.publish(1);
        assert_eq!(r.server.poll(&mut r.enclave), 1);
        r.put(0, &[EspDescriptor::encrypt(out, u32::MAX, 64, 1).encode()]);
        assert_eq!(r.statuses(0, 1), [(EspStatus::Ok, None)]);
    }

    #[test]
    fn foreign_stale_and_wrong_direction_handles_are_refused_by_the_table() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        r.enclave.esp_sa_delete(r.pair.inbound).unwrap();
        let foreign = EspSaHandle((out.0 & 0x00ff_ffff) | 0x7700_0000);
        let descs = [
            EspDescriptor::encrypt(foreign, 0, 64, 1),
            EspDescriptor::decrypt(r.pair.inbound, 64, 64, 1),
            EspDescriptor::decrypt(out, 128, 64, 1),
            EspDescriptor::encrypt(EspSaHandle(0x4200_0fff), 192, 64, 1),
        ];
        let (_, st) = r.batch(1, 0, &descs);
        let got: Vec<_> = st.iter().map(|s| s.0).collect();
        assert_eq!(
            got,
            [EspStatus::ForeignSa, EspStatus::UnknownSa, EspStatus::WrongDirection, EspStatus::UnknownSa]
        );
        assert!(st.iter().all(|s| s.1.is_none()), "refused by the trusted table, not the transport");
        assert!(r.packets().iter().all(|&b| b == 0));
    }

    #[test]
    fn a_slot_without_its_stamp_is_not_read() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        r.put(0, &[EspDescriptor::encrypt(out, 0, 64, 1).encode()]);
        r.req.write(0, &encode_batch(1, &BatchDescriptor { first: 0, count: 1 }));
        let stamp = r.shm.atomic_u32(r.layout.requests.stamp_offset(0)).unwrap();
        // Written but not stamped, or stamped for another lap (8 slots) or another entry: the
        // guest waits, reads nothing and answers nothing.
        for forged in [None, Some(8u32), Some(u32::MAX - 7), Some(1)] {
            if let Some(v) = forged {
                stamp.store(v, Ordering::Release);
            }
            assert!(!r.server.has_work(), "{forged:?}");
            assert_eq!(r.server.poll(&mut r.enclave), 0, "{forged:?}");
        }
        assert_eq!(r.comp.available(u32::MAX), 0, "no completion for a slot never read");
        assert_eq!(r.enclave.counters().batches, 0);
        assert!(r.packets().iter().all(|&b| b == 0));
        assert_eq!(r.server.rejects(), &RejectCounters::default(), "waiting is not a refusal");
        // Stamped as entry 0, it runs.
        stamp.store(0, Ordering::Release);
        assert_eq!(r.server.poll(&mut r.enclave), 1);
        assert_eq!(r.statuses(0, 1), [(EspStatus::Ok, None)]);
    }

    #[test]
    fn a_busy_gateway_sees_slots_released_every_poll_limit() {
        // A ring of 64 slots filled at once: one poll takes POLL_LIMIT of them and frees them
        // before the next poll, so a gateway writing ahead never waits for a whole ring.
        let layout = Layout::new(Geometry { slots: 64, ..G }).unwrap();
        let shm = Arc::new(SharedMem::create(layout.total).unwrap());
        ring::reset(&shm, &layout.requests, 0);
        ring::reset(&shm, &layout.completions, 0);
        let mut req = Producer::<REQUEST_SLOT>::new(shm.clone(), layout.requests).unwrap();
        let mut comp = Consumer::<COMPLETION_SLOT>::new(shm.clone(), layout.completions).unwrap();
        let mut server = Server::new(shm.clone(), layout, 32).unwrap();
        let mut enclave = MockEnclave::new(32);
        for i in 0..64u32 {
            // An empty batch: a slot the guest answers without the trusted core.
            req.write(i, &encode_batch(u64::from(i), &BatchDescriptor { first: 0, count: 0 }));
        }
        req.publish(64);
        assert_eq!(req.free(), Ok(0));
        let mut seen = 0u32;
        while seen < 64 {
            assert_eq!(server.poll(&mut enclave), POLL_LIMIT);
            seen += POLL_LIMIT;
            assert_eq!(req.free(), Ok(seen), "released as soon as the poll ends");
            let got = comp.available(u32::MAX);
            assert_eq!(got, POLL_LIMIT);
            let mut c = [0u8; COMPLETION_SLOT];
            comp.read(0, &mut c);
            assert_eq!(Completion::decode(&c).cookie, u64::from(seen - POLL_LIMIT), "in order");
            comp.release(got);
        }
        assert_eq!(server.poll(&mut enclave), 0);
    }

    #[test]
    fn a_corrupt_completion_index_stalls_and_is_counted_once() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        r.put(0, &[EspDescriptor::encrypt(out, 0, 64, 1).encode()]);
        r.req.write(0, &encode_batch(1, &BatchDescriptor { first: 0, count: 1 }));
        r.req.publish(1);
        r.shm.atomic_u32(r.layout.completions.tail).unwrap().store(1000, Ordering::Release);
        for _ in 0..3 {
            assert_eq!(r.server.poll(&mut r.enclave), 0);
        }
        assert_eq!(r.server.rejects().get(RejectReason::CorruptIndex), 1);
        assert!(r.packets().iter().all(|&b| b == 0));
    }

    #[test]
    fn several_batches_in_one_poll_complete_in_order() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let a: Vec<_> = (0..3u32).map(|i| EspDescriptor::encrypt(out, i * 64, 64, 1).encode()).collect();
        let b: Vec<_> = (3..5u32).map(|i| EspDescriptor::encrypt(out, i * 64, 64, 1).encode()).collect();
        r.put(0, &a);
        r.put(32, &b);
        let done = r.run(&[
            encode_batch(10, &BatchDescriptor { first: 0, count: 3 }),
            encode_batch(11, &BatchDescriptor { first: 32, count: 2 }),
        ]);
        let got: Vec<_> = done.iter().map(|c| (c.cookie, c.result_len)).collect();
        assert_eq!(got, [(10, 3), (11, 2)]);
        assert_eq!(r.enclave.counters().batches, 2);
        assert!(r.statuses(0, 3).iter().chain(&r.statuses(32, 2)).all(|s| s.0 == EspStatus::Ok));
    }

    /// Runs `calls` one at a time (every call's arguments sit at the start of the call area):
    /// the first `well_formed` reach the (mock) enclave, whose refusal crosses encoded; the
    /// transport refuses every other one as `BadArguments`.
    fn calls_decode_strictly(r: &mut Rig, calls: &[(u64, u16, &[u8])], well_formed: usize) {
        for (i, &(cookie, opcode, args)) in calls.iter().enumerate() {
            let done = r.run(&[call_slot(cookie, opcode, args, r, 4096)]);
            let c = done.last().unwrap();
            if i < well_formed {
                assert_eq!(c.status, CallStatus::Refused as u8, "call {cookie}");
                let mut res = vec![0u8; c.result_len as usize];
                r.shm.read_into(r.layout.call, &mut res);
                let e = codec::get_error(&mut Reader::new(&res));
                assert!(matches!(e, Ok(crate::Error::Unsupported { .. })), "call {cookie}: {e:?}");
            } else {
                assert_eq!(
                    RejectReason::from_code(c.reject),
                    Some(RejectReason::BadArguments),
                    "call {cookie}"
                );
            }
        }
    }

    fn call_slot(cookie: u64, opcode: u16, args: &[u8], r: &Rig, res_cap: u32) -> [u8; REQUEST_SLOT] {
        r.shm.write_from(r.layout.call, args);
        encode_call(
            cookie,
            &CallDescriptor {
                opcode,
                arg_off: 0,
                arg_len: u32::try_from(args.len()).unwrap(),
                res_off: 0,
                res_cap,
            },
        )
    }

    #[test]
    fn calls_are_validated_decoded_and_answered() {
        let mut r = rig(32);
        let mut w = Writer::new();
        w.u32(32);
        let ok = call_slot(1, op::RANDOM_NONCE, &w.buf, &r, 4096);
        let done = r.run(&[ok]);
        assert_eq!((done[0].status, done[0].reject, done[0].result_len), (CallStatus::Ok as u8, 0, 36));
        let mut res = vec![0u8; 36];
        r.shm.read_into(r.layout.call, &mut res);
        assert_eq!(Reader::new(&res).bytes().unwrap(), &[0x4e; 32][..]);

        // The trusted core refuses: the error crosses encoded.
        let mut w = Writer::new();
        w.u32(3);
        let done = r.run(&[call_slot(2, op::RANDOM_NONCE, &w.buf, &r, 4096)]);
        assert_eq!(done[0].status, CallStatus::Refused as u8);
        let mut res = vec![0u8; done[0].result_len as usize];
        r.shm.read_into(r.layout.call, &mut res);
        assert!(matches!(
            codec::get_error(&mut Reader::new(&res)),
            Ok(crate::Error::BadLength { len: 3, .. })
        ));

        // Transport refusals.
        let unknown = call_slot(3, 0x7777, &[], &r, 4096);
        let trailing = call_slot(4, op::COUNTERS, &[1], &r, 4096);
        let short = call_slot(5, op::DELETE_SECRET, &[1, 2], &r, 4096);
        let too_small = call_slot(6, op::COUNTERS, &[], &r, 8);
        let oob = encode_call(
            7,
            &CallDescriptor { opcode: 3, arg_off: G.call_len, arg_len: 1, res_off: 0, res_cap: 0 },
        );
        let huge = call_slot(8, op::RANDOM_NONCE, &u32::MAX.to_le_bytes(), &r, 4096);
        let done = r.run(&[unknown, trailing, short, too_small, oob, huge]);
        let reasons: Vec<_> = done.iter().map(|c| RejectReason::from_code(c.reject)).collect();
        assert_eq!(
            reasons,
            [
                Some(RejectReason::UnknownOpcode),
                Some(RejectReason::BadArguments),
                Some(RejectReason::BadArguments),
                Some(RejectReason::ResultTooLarge),
                Some(RejectReason::OutOfBounds),
                Some(RejectReason::BadArguments),
            ]
        );
        assert!(done.iter().all(|c| c.status == CallStatus::Rejected as u8 && c.kind == KIND_CALL));
    }

    #[test]
    fn a_wrapped_esp_install_is_decoded_strictly_before_the_trusted_core_sees_it() {
        let mut r = rig(32);
        let params = crate::EspSaParams {
            spi: 9,
            inbound: true,
            esn: false,
            suite: Suite::aead(Cipher::AesGcm16_128),
        };
        let mut w = Writer::new();
        w.bytes(b"CLPV opaque blob");
        codec::put_esp_sa_params(&mut w, &params);
        let good = w.buf.clone();
        let mut trailing = good.clone();
        trailing.push(0);
        let mut bad_flag = good.clone();
        let flag_at = 4 + 16 + 4;
        bad_flag[flag_at] = 2;
        let mut long_blob = good.clone();
        long_blob[..4].copy_from_slice(&1000u32.to_le_bytes());
        let op = op::ESP_SA_INSTALL_WRAPPED;
        let calls =
            [(1, op, &good[..]), (2, op, &trailing[..]), (3, op, &bad_flag[..]), (4, op, &long_blob[..])];
        calls_decode_strictly(&mut r, &calls, 1);
    }

    #[test]
    fn attested_provisioning_calls_are_decoded_strictly() {
        let mut r = rig(32);
        let mut env = Writer::new();
        env.bytes(b"CLPE opaque envelope");
        let mut trailing = env.buf.clone();
        trailing.push(0);
        let mut long = env.buf.clone();
        long[..4].copy_from_slice(&1000u32.to_le_bytes());
        let calls = [
            (1, op::PROVISIONING_OFFER, &[][..]),
            (2, op::PROVISION_ATTESTED, &env.buf[..]),
            (3, op::UNSEAL_SECRET, &env.buf[..]),
            (4, op::PROVISIONING_OFFER, &[0][..]),
            (5, op::PROVISION_ATTESTED, &trailing[..]),
            (6, op::UNSEAL_SECRET, &long[..]),
            (7, op::PROVISION_ATTESTED, &[1, 0][..]),
        ];
        calls_decode_strictly(&mut r, &calls, 3);
    }

    #[test]
    fn backup_calls_are_decoded_strictly() {
        let mut r = rig(32);
        let mut export = Writer::new();
        export.bytes(b"spki").bytes(b"cert").u8(crate::migration::OaepHash::Sha256.code()).bytes(b"config");
        let mut bad_oaep = export.buf.clone();
        bad_oaep[2 * (4 + 4)] = 9;
        let mut trailing = export.buf.clone();
        trailing.push(0);
        let calls = [
            (1, op::SEAL_SECRET, &[1, 0, 0, 0x42][..]),
            (2, op::EXPORT_SECRETS, &export.buf[..]),
            (3, op::SEAL_SECRET, &[1, 0, 0, 0x42, 0][..]),
            (4, op::SEAL_SECRET, &[1, 0][..]),
            (5, op::EXPORT_SECRETS, &bad_oaep[..]),
            (6, op::EXPORT_SECRETS, &trailing[..]),
        ];
        calls_decode_strictly(&mut r, &calls, 2);
    }

    #[test]
    fn a_call_sees_the_packets_queued_before_it() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let mut w = Writer::new();
        w.u32(out.0);
        let del = call_slot(2, op::ESP_SA_DELETE, &w.buf, &r, 4096);
        r.put(0, &[EspDescriptor::encrypt(out, 0, 64, 1).encode()]);
        r.put(32, &[EspDescriptor::encrypt(out, 64, 64, 2).encode()]);
        let slots = [
            encode_batch(1, &BatchDescriptor { first: 0, count: 1 }),
            del,
            encode_batch(3, &BatchDescriptor { first: 32, count: 1 }),
        ];
        let done = r.run(&slots);
        assert_eq!(done[1].status, CallStatus::Ok as u8);
        assert_eq!(r.statuses(0, 1)[0].0, EspStatus::Ok);
        assert_eq!(r.statuses(32, 1)[0].0, EspStatus::UnknownSa, "handle used after deletion");
    }

    #[test]
    fn guest_arguments_round_trip_and_junk_is_refused() {
        let a = GuestArgs {
            shm_fd: 3,
            request_fd: 4,
            completion_fd: 5,
            config_fd: 6,
            ledger_fd: 7,
            geometry: G,
            spin: Duration::from_micros(20),
            parent_pid: 77,
        };
        let parsed = GuestArgs::parse(a.to_args().into_iter().map(OsString::from)).unwrap();
        assert_eq!(parsed, a);
        let mut twice = a.to_args();
        twice.extend(["--slots".into(), "8".into()]);
        for bad in [vec![], vec!["--what".to_owned(), "1".into()], twice, vec!["--slots".into()]] {
            assert!(GuestArgs::parse(bad.into_iter().map(OsString::from)).is_err());
        }
    }

    #[test]
    fn config_encoding_round_trips_and_refuses_junk() {
        use enclave_api::handle::TenantId;
        use enclave_api::report::{EnclaveConfig, InboundMode, Limits, ProvisioningKey};
        let cfg = EnclaveConfig {
            tenant: TenantId(7),
            provisioning_key: ProvisioningKey::from_bytes([9; 32]),
            trusted_platforms: vec![vec![4; 65], vec![3; 65], vec![4; 65]],
            backup_roots: vec![vec![4; 65]],
            tenant_signers: vec![vec![4; 65], vec![5; 65]],
            limits: Limits { inbound: InboundMode::Forward, ..Limits::default() },
        };
        let b = config::encode(&cfg.provisioning_key, b"pk", &cfg.public());
        let (back, pk) = config::decode(&b).unwrap();
        assert_eq!((back.tenant, back.limits), (cfg.tenant, cfg.limits));
        assert_eq!(back.trusted_platforms, [vec![3; 65], vec![4; 65]], "the measured set, sorted once");
        assert_eq!(back.backup_roots, [vec![4; 65]]);
        assert_eq!(back.tenant_signers, [vec![4; 65], vec![5; 65]]);
        assert_eq!(&b[pk], b"pk");
        assert!(config::decode(&b[..b.len() - 1]).is_none());
        assert!(config::decode(&[]).is_none());
        // The inbound mode: after the pipe's head, the platform key, tenant and limits.
        let inbound = config::FIXED_LEN + 2 + 4 + 5 * 8;
        assert_eq!(b[inbound], InboundMode::Forward.code());
        for mode in [0u8, 3, 0xff] {
            let mut bad = b.to_vec();
            bad[inbound] = mode;
            assert!(config::decode(&bad).is_none(), "inbound mode {mode}");
        }
    }
}
