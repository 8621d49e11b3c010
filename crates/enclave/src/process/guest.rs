//! The enclave side: start-up hardening, then the ring loop.
//!
//! [`main`] is the whole life of an enclave process: parse the descriptors the gateway
//! passed, harden ([`super::harden`]), read the root secret from the config pipe into secret
//! memory, start the trusted core, install seccomp, report ready, then serve the rings until
//! asked to stop or until the gateway dies. [`Server`] is the loop's body without any of
//! the process set-up, so tests and the fuzz target drive it over an in-process mapping.
#![allow(unsafe_code)]

use super::codec::{self, op, Reader, Writer};
use super::desc::{self, CallStatus, Completion, Request, KIND_CALL, KIND_ESP};
use super::doorbell::{self, Doorbell};
use super::harden::{self, bits, LoopFds, SecretArena, SecretMemory};
use super::layout::{ctl, Geometry, Layout, COMPLETION_SLOT, REQUEST_SLOT, STATE_READY, STATE_STOPPED};
use super::ring::{Consumer, Producer};
use super::shm::SharedMem;
use super::validate::{self, RejectCounters, RejectReason};
use super::ProcessError;
use crate::api::esp::{EspDescriptor, EspStatus};
use crate::api::handle::{DhHandle, EspSaHandle, SecretHandle};
use crate::api::ike::SealedBlob;
use crate::api::Enclave;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the host passes on the child's command line (after the program's own arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestArgs {
    /// The shared memfd.
    pub shm_fd: RawFd,
    /// The request doorbell (host rings, guest waits).
    pub request_fd: RawFd,
    /// The completion doorbell (guest rings, host waits).
    pub completion_fd: RawFd,
    /// The read end of the config pipe (root secret and limits; read once, then closed).
    pub config_fd: RawFd,
    /// The ring geometry; the guest derives the layout from it, never from shared memory.
    pub geometry: Geometry,
    /// How long the guest busy-polls after its last request before sleeping.
    pub spin: Duration,
    /// The gateway's process ID: the guest checks that this is its parent before it
    /// trusts the parent's pidfd to tell it when the gateway is gone.
    pub parent_pid: u32,
}

impl GuestArgs {
    /// The arguments, as the host passes them.
    pub fn to_args(&self) -> Vec<String> {
        let g = self.geometry;
        [
            ("--shm-fd", self.shm_fd.to_string()),
            ("--request-fd", self.request_fd.to_string()),
            ("--completion-fd", self.completion_fd.to_string()),
            ("--config-fd", self.config_fd.to_string()),
            ("--slots", g.slots.to_string()),
            ("--packet-len", g.packet_len.to_string()),
            ("--call-len", g.call_len.to_string()),
            ("--spin-us", self.spin.as_micros().to_string()),
            ("--parent-pid", self.parent_pid.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect()
    }

    /// Parses [`Self::to_args`]'s output; every flag is required exactly once.
    pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Self, ProcessError> {
        let bad = |why| ProcessError::Args { why };
        let mut v: [Option<u64>; 9] = [None; 9];
        let names = [
            "--shm-fd",
            "--request-fd",
            "--completion-fd",
            "--config-fd",
            "--slots",
            "--packet-len",
            "--call-len",
            "--spin-us",
            "--parent-pid",
        ];
        let mut it = args.into_iter();
        while let Some(k) = it.next() {
            let k = k.into_string().map_err(|_| bad("non-UTF-8 argument"))?;
            let i = names.iter().position(|n| *n == k).ok_or(bad("unknown flag"))?;
            let val = it.next().ok_or(bad("flag without a value"))?;
            let val = val.to_str().and_then(|s| s.parse::<u64>().ok()).ok_or(bad("not a number"))?;
            let slot = v.get_mut(i).ok_or(bad("unknown flag"))?;
            if slot.replace(val).is_some() {
                return Err(bad("flag given twice"));
            }
        }
        let get = |i: usize| v.get(i).copied().flatten().ok_or(bad("missing flag"));
        let fd = |i: usize| get(i).and_then(|x| RawFd::try_from(x).map_err(|_| bad("bad descriptor")));
        let u32_of = |i: usize| get(i).and_then(|x| u32::try_from(x).map_err(|_| bad("value too large")));
        Ok(Self {
            shm_fd: fd(0)?,
            request_fd: fd(1)?,
            completion_fd: fd(2)?,
            config_fd: fd(3)?,
            geometry: Geometry { slots: u32_of(4)?, packet_len: u32_of(5)?, call_len: u32_of(6)? },
            spin: Duration::from_micros(get(7)?.min(1_000_000)),
            parent_pid: u32_of(8)?,
        })
    }
}

/// One pending ESP slot of the batch being gathered: where its completion goes.
#[derive(Debug, Clone, Copy)]
struct Pending {
    pos: u32,
    cookie: u64,
}

/// The ring loop's body: validates and dispatches whatever the gateway queued.
#[derive(Debug)]
pub struct Server {
    shm: Arc<SharedMem>,
    layout: Layout,
    requests: Consumer<REQUEST_SLOT>,
    completions: Producer<COMPLETION_SLOT>,
    rejects: RejectCounters,
    handled: u64,
    completion_ring_corrupt: bool,
    max_batch: usize,
    descs: Vec<EspDescriptor>,
    status: Vec<EspStatus>,
    pending: Vec<Pending>,
    args: Vec<u8>,
}

impl Server {
    /// A server over `shm` laid out as `layout`, handing the trusted core at most
    /// `max_batch` descriptors per call.
    pub fn new(shm: Arc<SharedMem>, layout: Layout, max_batch: usize) -> Result<Self, ProcessError> {
        if shm.len() < layout.total {
            return Err(ProcessError::SharedMemory { why: "mapping smaller than the layout" });
        }
        let cap = layout.geometry.slots as usize;
        let max_batch = max_batch.clamp(1, cap);
        Ok(Self {
            requests: Consumer::new(shm.clone(), layout.requests)?,
            completions: Producer::new(shm.clone(), layout.completions)?,
            shm,
            layout,
            rejects: RejectCounters::default(),
            handled: 0,
            completion_ring_corrupt: false,
            max_batch,
            descs: Vec::with_capacity(max_batch),
            status: Vec::with_capacity(max_batch),
            pending: Vec::with_capacity(max_batch),
            args: Vec::new(),
        })
    }

    /// Refusals so far.
    pub fn rejects(&self) -> &RejectCounters {
        &self.rejects
    }

    /// Whether the gateway has queued anything (a lying head counts as something: the next
    /// [`Self::poll`] counts and skips it).
    pub fn has_work(&self) -> bool {
        !matches!(self.requests.available(), Ok(0))
    }

    fn reject(&mut self, r: RejectReason) {
        self.rejects.record(r);
    }

    fn complete(&self, pos: u32, c: &Completion) {
        self.completions.write(pos, &c.encode());
    }

    /// Handles everything queued (bounded by the free completion slots); returns the
    /// number of request slots consumed.
    pub fn poll<E: Enclave + ?Sized>(&mut self, enclave: &mut E) -> u32 {
        let avail = match self.requests.available() {
            Ok(n) => n,
            Err(c) => {
                // More entries claimed than the ring holds: skip them unread.
                self.reject(RejectReason::OversizedBatch);
                self.requests.skip_to(c.observed);
                self.publish_counters();
                return 0;
            }
        };
        if avail == 0 {
            return 0;
        }
        let free = match self.completions.free() {
            Ok(n) => {
                self.completion_ring_corrupt = false;
                n
            }
            Err(_) => {
                // Count once per episode, not once per spin.
                if !self.completion_ring_corrupt {
                    self.completion_ring_corrupt = true;
                    self.reject(RejectReason::CorruptIndex);
                    self.publish_counters();
                }
                return 0;
            }
        };
        let n = avail.min(free);
        for pos in 0..n {
            let mut slot = [0u8; REQUEST_SLOT];
            self.requests.read(pos, &mut slot);
            let (kind, cookie) = desc::request_header(&slot);
            match desc::decode_request(&slot) {
                Err(r) => {
                    self.reject(r);
                    let kind = if kind == KIND_ESP || kind == KIND_CALL { kind } else { 0 };
                    let status =
                        if kind == KIND_CALL { CallStatus::Rejected as u8 } else { r.esp_status().code() };
                    self.complete(pos, &Completion { cookie, kind, status, reject: r.code(), result_len: 0 });
                }
                Ok(Request::Esp(d)) => match validate::validate_esp(&d, self.layout.geometry.packet_len) {
                    Err(r) => {
                        self.reject(r);
                        let c = Completion {
                            cookie,
                            kind: KIND_ESP,
                            status: r.esp_status().code(),
                            reject: r.code(),
                            result_len: 0,
                        };
                        self.complete(pos, &c);
                    }
                    Ok(()) => {
                        self.descs.push(d);
                        self.pending.push(Pending { pos, cookie });
                        if self.descs.len() >= self.max_batch {
                            self.flush_esp(enclave);
                        }
                    }
                },
                Ok(Request::Call(c)) => {
                    // Calls see the effects of every packet queued before them.
                    self.flush_esp(enclave);
                    let done = self.serve_call(enclave, &c, cookie);
                    self.complete(pos, &done);
                }
            }
        }
        self.flush_esp(enclave);
        self.requests.release(n);
        self.completions.publish(n);
        self.handled = self.handled.wrapping_add(u64::from(n));
        self.publish_counters();
        n
    }

    /// Runs the gathered ESP descriptors as one trusted batch, in place in the packet area.
    fn flush_esp<E: Enclave + ?Sized>(&mut self, enclave: &mut E) {
        if self.descs.is_empty() {
            return;
        }
        self.status.clear();
        self.status.resize(self.descs.len(), EspStatus::NotProcessed);
        // SAFETY: this server is the only holder of a slice over the packet area in this
        // process, and the slice dies at the end of this block. The gateway may write the
        // bytes concurrently; the trusted ESP code treats packet bytes as hostile input and
        // every region it touches was bounds-checked above against this slice's length.
        let area = unsafe { self.shm.slice_mut(self.layout.packet_range()) };
        if let Some(area) = area {
            // A refused batch (it cannot be: shape checked here) leaves NotProcessed.
            let _ = enclave.esp_batch(area, &self.descs, &mut self.status);
        }
        for (p, s) in self.pending.iter().zip(&self.status) {
            let c =
                Completion { cookie: p.cookie, kind: KIND_ESP, status: s.code(), reject: 0, result_len: 0 };
            self.completions.write(p.pos, &c.encode());
        }
        self.descs.clear();
        self.pending.clear();
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
        let r = dispatch(enclave, c.opcode, &args, &mut out, call_len as usize);
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

    /// Mirrors the counters into the control block for the gateway to read.
    fn publish_counters(&self) {
        for (i, v) in self.rejects.0.iter().enumerate() {
            if let Some(a) = self.shm.atomic_u64(ctl::REJECTS + 8 * i) {
                a.store(*v, Ordering::Relaxed);
            }
        }
        if let Some(a) = self.shm.atomic_u64(ctl::REQUESTS) {
            a.store(self.handled, Ordering::Relaxed);
        }
    }
}

/// Decodes a call's arguments, runs it, encodes its result. `Err` is a transport refusal
/// (unknown opcode, undecodable arguments); `Ok(Err(_))` the trusted core's refusal.
pub fn dispatch<E: Enclave + ?Sized>(
    e: &mut E,
    opcode: u16,
    args: &[u8],
    w: &mut Writer,
    max_out: usize,
) -> Result<crate::Result<()>, RejectReason> {
    let mut r = Reader::new(args);
    // Output buffers the caller sizes are bounded by what could ever be returned.
    let out_len = |r: &mut Reader<'_>| -> Result<usize, RejectReason> {
        let n = r.u32()? as usize;
        (n <= max_out).then_some(n).ok_or(RejectReason::BadArguments)
    };
    let sealed = |r: &mut Reader<'_>| -> Result<Option<SealedBlob>, RejectReason> {
        Ok(if r.bool()? { Some(SealedBlob(r.bytes()?.to_vec())) } else { None })
    };
    let res = match opcode {
        op::EVIDENCE => {
            let rd: [u8; 64] = r.bytes()?.try_into().map_err(|_| RejectReason::BadArguments)?;
            r.finish()?;
            e.evidence(&rd).map(|ev| codec::put_evidence(w, &ev))
        }
        op::MEMORY_REPORT => {
            r.finish()?;
            codec::put_memory_report(w, &e.memory_report());
            Ok(())
        }
        op::COUNTERS => {
            r.finish()?;
            codec::put_counters(w, &e.counters());
            Ok(())
        }
        op::PROVISION_SECRET => {
            let b = r.bytes()?;
            r.finish()?;
            e.provision_secret(b).map(|h| {
                w.u32(h.0);
            })
        }
        op::SECRET_KIND => {
            let h = SecretHandle(r.u32()?);
            r.finish()?;
            e.secret_kind(h).map(|k| codec::put_secret_kind(w, k))
        }
        op::DELETE_SECRET => {
            let h = SecretHandle(r.u32()?);
            r.finish()?;
            e.delete_secret(h)
        }
        op::RANDOM_NONCE => {
            let n = out_len(&mut r)?;
            r.finish()?;
            let mut out = vec![0u8; n];
            e.random_nonce(&mut out).map(|()| {
                w.bytes(&out);
            })
        }
        op::DH_GENERATE => {
            let group = codec::get_dh_group(&mut r)?;
            let n = out_len(&mut r)?;
            r.finish()?;
            let mut out = vec![0u8; n];
            e.dh_generate(group, &mut out).map(|h| {
                w.u32(h.0).bytes(&out);
            })
        }
        op::DH_DELETE => {
            let h = DhHandle(r.u32()?);
            r.finish()?;
            e.dh_delete(h)
        }
        op::IKE_SA_CREATE => {
            let x = codec::get_dh_exchange(&mut r)?;
            let p = codec::get_ike_params(&mut r)?;
            r.finish()?;
            e.ike_sa_create(x, &p).map(|h| {
                w.u32(h.0);
            })
        }
        op::IKE_SA_REKEY => {
            let old = codec::get_ike(&mut r)?;
            let blob = sealed(&mut r)?;
            let x = codec::get_dh_exchange(&mut r)?;
            let p = codec::get_ike_params(&mut r)?;
            r.finish()?;
            e.ike_sa_rekey(old, blob.as_ref(), x, &p).map(|h| {
                w.u32(h.0);
            })
        }
        op::AUTH_COMPUTE => {
            let ike = codec::get_ike(&mut r)?;
            let cred = SecretHandle(r.u32()?);
            let spec = codec::get_auth_spec(&mut r)?;
            let input = codec::get_auth_input(&mut r)?;
            let n = out_len(&mut r)?;
            r.finish()?;
            let mut out = vec![0u8; n];
            e.auth_compute(ike, cred, spec, &input, &mut out).map(|(m, len)| {
                w.u8(m.id()).bytes(out.get(..len).unwrap_or(&[]));
            })
        }
        op::AUTH_VERIFY => {
            let ike = codec::get_ike(&mut r)?;
            let peer = codec::get_peer(&mut r)?;
            let method = r.u8()?;
            let data = r.bytes()?;
            let input = codec::get_auth_input(&mut r)?;
            r.finish()?;
            e.auth_verify(ike, peer.as_credential(), method, data, &input)
                .map(|v| codec::put_auth_verified(w, &v))
        }
        op::SK_ENCRYPT => {
            let ike = codec::get_ike(&mut r)?;
            let mut msg = r.bytes()?.to_vec();
            let aad = r.usize()?;
            let pt = r.usize()?;
            r.finish()?;
            e.sk_encrypt(ike, &mut msg, aad, pt).map(|()| {
                w.bytes(&msg);
            })
        }
        op::SK_DECRYPT => {
            let ike = codec::get_ike(&mut r)?;
            let mut msg = r.bytes()?.to_vec();
            let aad = r.usize()?;
            r.finish()?;
            e.sk_decrypt(ike, &mut msg, aad).map(|range| {
                w.bytes(&msg).usize(range.start).usize(range.end);
            })
        }
        op::CHILD_SA_CREATE => {
            let ike = codec::get_ike(&mut r)?;
            let blob = sealed(&mut r)?;
            let pfs = if r.bool()? { Some(codec::get_dh_exchange(&mut r)?) } else { None };
            let p = codec::get_child_params(&mut r)?;
            r.finish()?;
            e.child_sa_create(ike, blob.as_ref(), pfs, &p).map(|pair| {
                w.u32(pair.inbound.0).u32(pair.outbound.0);
            })
        }
        op::CLEAR_AND_SEAL => {
            let ike = codec::get_ike(&mut r)?;
            r.finish()?;
            e.clear_and_seal(ike).map(|b| {
                w.bytes(&b.0);
            })
        }
        op::IKE_SA_SEAL_STATE => {
            let ike = codec::get_ike(&mut r)?;
            r.finish()?;
            e.ike_sa_seal_state(ike).map(|b| {
                w.bytes(&b.0);
            })
        }
        op::IKE_SA_RESTORE => {
            let blob = SealedBlob(r.bytes()?.to_vec());
            r.finish()?;
            e.ike_sa_restore(&blob).map(|h| {
                w.u32(h.0);
            })
        }
        op::IKE_SA_DELETE => {
            let ike = codec::get_ike(&mut r)?;
            r.finish()?;
            e.ike_sa_delete(ike)
        }
        op::ESP_SA_DELETE => {
            let sa = EspSaHandle(r.u32()?);
            r.finish()?;
            e.esp_sa_delete(sa)
        }
        _ => return Err(RejectReason::UnknownOpcode),
    };
    Ok(res)
}

// ---- the enclave process -----------------------------------------------------------------

/// The root secret and limits, as they cross the config pipe (never argv or the
/// environment, which other processes of the same user can read).
pub mod config {
    use crate::api::handle::TenantId;
    use crate::api::report::{EnclaveConfig, Limits, ProvisioningKey};

    /// Bytes of the encoding: tenant, key, counter, five limits, platform key length.
    pub const FIXED_LEN: usize = 4 + 32 + 8 + 5 * 8 + 4;
    /// Longest platform key (PKCS#8) accepted.
    pub const MAX_PLATFORM_KEY: usize = 1024;

    /// Encodes `config` and the attestation platform key (PKCS#8 P-256).
    pub fn encode(config: &EnclaveConfig, platform_key: &[u8]) -> zeroize::Zeroizing<Vec<u8>> {
        let mut v = zeroize::Zeroizing::new(Vec::with_capacity(FIXED_LEN + platform_key.len()));
        v.extend_from_slice(&config.tenant.0.to_le_bytes());
        v.extend_from_slice(&config.provisioning_key.0[..]);
        v.extend_from_slice(&config.trusted_min_seal_counter.to_le_bytes());
        let l = config.limits;
        for n in [l.max_ike_sas, l.max_esp_sas, l.max_dh, l.max_secrets, l.max_batch] {
            v.extend_from_slice(&(n as u64).to_le_bytes());
        }
        v.extend_from_slice(&u32::try_from(platform_key.len()).unwrap_or(u32::MAX).to_le_bytes());
        v.extend_from_slice(platform_key);
        v
    }

    /// Decodes [`encode`]'s output: the config and where the platform key lies in `b`.
    pub fn decode(b: &[u8]) -> Option<(EnclaveConfig, core::ops::Range<usize>)> {
        let u64_at =
            |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?)) };
        let u32_at =
            |i: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?)) };
        let tenant = TenantId(u32_at(0)?);
        let key: [u8; 32] = b.get(4..36)?.try_into().ok()?;
        let min = u64_at(36)?;
        let lim = |k: usize| u64_at(44 + 8 * k).and_then(|x| usize::try_from(x).ok());
        let limits = Limits {
            max_ike_sas: lim(0)?,
            max_esp_sas: lim(1)?,
            max_dh: lim(2)?,
            max_secrets: lim(3)?,
            max_batch: lim(4)?,
        };
        let pk_len = u32_at(84)? as usize;
        if pk_len > MAX_PLATFORM_KEY || b.len() != FIXED_LEN + pk_len {
            return None;
        }
        let cfg = EnclaveConfig {
            tenant,
            provisioning_key: ProvisioningKey::from_bytes(key),
            trusted_min_seal_counter: min,
            limits,
        };
        Some((cfg, FIXED_LEN..FIXED_LEN + pk_len))
    }
}

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
    let fds = [a.shm_fd, a.request_fd, a.completion_fd, a.config_fd];
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
    let mut arena = SecretArena::new(config::FIXED_LEN + config::MAX_PLATFORM_KEY + 1)?;
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
    let measured = cfg.measured_bytes();
    let platform_key = raw.get(pk).unwrap_or(&[]);
    let attestation = crate::attest::SoftwareAttestation::new(
        platform_key,
        crate::attest::CodeIdentity::CurrentExecutable,
        &measured,
    )
    .map_err(|_| ProcessError::Args { why: "attestation platform key refused" })?;
    let mut enclave = crate::InlineEnclave::start(cfg, Box::new(attestation))
        .map_err(|_| ProcessError::Args { why: "trusted core failed to start (self-test)" })?;
    drop(arena);

    let mut server = Server::new(shm.clone(), layout, max_batch)?;
    // Read before seccomp: getpid is not on the loop's allow-list.
    let pid = std::process::id();
    harden::install_seccomp(LoopFds {
        requests: requests.fd().as_raw_fd(),
        completions: completions.fd().as_raw_fd(),
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
    loop {
        if server.poll(enclave) > 0 {
            wake_host(shm, completions);
            continue;
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
                // Now and then give the core away: on a host whose cores are shared, the
                // gateway thread we wait for may need this one.
                if spins.is_multiple_of(2048) {
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

impl From<codec::Malformed> for RejectReason {
    fn from(_: codec::Malformed) -> Self {
        RejectReason::BadArguments
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::alg::{Cipher, Role, Suite};
    use crate::api::esp::EspOpcode;
    use crate::api::handle::IkeSaHandle;
    use crate::api::ike::{ChildSaPair, ChildSaParams};
    use crate::process::desc::{encode_call, encode_esp, CallDescriptor};
    use crate::process::mock::MockEnclave;
    use crate::process::ring;

    const G: Geometry = Geometry { slots: 8, packet_len: 4096, call_len: 64 << 10 };

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
            let avail = self.comp.available().unwrap();
            let mut out = Vec::new();
            for i in 0..avail {
                let mut s = [0u8; COMPLETION_SLOT];
                self.comp.read(i, &mut s);
                out.push(Completion::decode(&s));
            }
            self.comp.release(avail);
            out
        }

        fn packets(&self) -> Vec<u8> {
            let mut v = vec![0u8; G.packet_len as usize];
            self.shm.read_into(self.layout.packets, &mut v);
            v
        }

        fn status(c: &Completion) -> EspStatus {
            EspStatus::ALL[usize::from(c.status)]
        }
    }

    #[test]
    fn a_valid_batch_is_transformed_in_place_with_one_completion_each() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let slots: Vec<_> = (0..4u32)
            .map(|i| encode_esp(100 + u64::from(i), &EspDescriptor::encrypt(out, i * 100, 64, 1)))
            .collect();
        let done = r.run(&slots);
        assert_eq!(done.len(), 4);
        for (i, c) in done.iter().enumerate() {
            assert_eq!(
                (c.cookie, c.kind, Rig::status(c), c.reject),
                (100 + i as u64, KIND_ESP, EspStatus::Ok, 0)
            );
        }
        let p = r.packets();
        assert!(p[..64].iter().all(|&b| b == 0xff) && p[64..100].iter().all(|&b| b == 0));
        assert_eq!(r.enclave.counters().batches, 1, "one crossing, one trusted batch");
        assert_eq!(r.server.rejects().total(), 0);
    }

    #[test]
    fn every_forged_field_is_refused_counted_and_leaves_memory_alone() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let mut bad_op = EspDescriptor::encrypt(out, 0, 64, 1);
        bad_op.opcode = EspOpcode(9);
        let mut reserved = encode_esp(6, &EspDescriptor::encrypt(out, 0, 64, 1));
        reserved[50] = 1;
        let mut kind = encode_esp(7, &EspDescriptor::encrypt(out, 0, 64, 1));
        kind[0] = 0xee;
        let slots = [
            encode_esp(1, &EspDescriptor::encrypt(out, G.packet_len - 10, 64, 1)),
            encode_esp(2, &EspDescriptor::encrypt(out, u32::MAX - 10, 64, 1)),
            encode_esp(3, &EspDescriptor::encrypt(out, 0, 10, 1)),
            encode_esp(4, &bad_op),
            encode_esp(5, &EspDescriptor::decrypt_forward(r.pair.inbound, 100, 100, 64, 1)),
            reserved,
            kind,
        ];
        let done = r.run(&slots);
        let want = [
            (EspStatus::OutOfBounds, RejectReason::OutOfBounds),
            (EspStatus::OutOfBounds, RejectReason::OutOfBounds),
            (EspStatus::BadLength, RejectReason::BadLength),
            (EspStatus::UnknownOpcode, RejectReason::UnknownOpcode),
            (EspStatus::BadOuterHeader, RejectReason::BadOuterHeader),
            (EspStatus::Malformed, RejectReason::ReservedBytes),
            (EspStatus::Malformed, RejectReason::UnknownSlotKind),
        ];
        for ((c, (s, reason)), cookie) in done.iter().zip(want).zip(1u64..) {
            assert_eq!(c.cookie, cookie);
            assert_eq!(Rig::status(c), s, "cookie {cookie}");
            assert_eq!(RejectReason::from_code(c.reject), Some(reason), "cookie {cookie}");
            assert!(r.server.rejects().get(reason) > 0);
        }
        assert_eq!(r.server.rejects().total(), 7);
        assert!(r.packets().iter().all(|&b| b == 0), "no byte of the area was touched");
        assert_eq!(r.enclave.counters().batches, 0, "nothing reached the trusted code");
        // The counters are mirrored for the gateway.
        let oob = r.shm.atomic_u64(ctl::REJECTS + 8 * RejectReason::OutOfBounds.index()).unwrap();
        assert_eq!(oob.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn foreign_stale_and_wrong_direction_handles_are_refused_by_the_table() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        r.enclave.esp_sa_delete(r.pair.inbound).unwrap();
        let foreign = EspSaHandle((out.0 & 0x00ff_ffff) | 0x7700_0000);
        let slots = [
            encode_esp(1, &EspDescriptor::encrypt(foreign, 0, 64, 1)),
            encode_esp(2, &EspDescriptor::decrypt(r.pair.inbound, 0, 64, 1)),
            encode_esp(3, &EspDescriptor::decrypt(out, 0, 64, 1)),
            encode_esp(4, &EspDescriptor::encrypt(EspSaHandle(0x4200_0fff), 0, 64, 1)),
        ];
        let got: Vec<_> = r.run(&slots).iter().map(Rig::status).collect();
        assert_eq!(
            got,
            [EspStatus::ForeignSa, EspStatus::UnknownSa, EspStatus::WrongDirection, EspStatus::UnknownSa]
        );
        assert!(r.packets().iter().all(|&b| b == 0));
    }

    #[test]
    fn an_oversized_batch_is_skipped_unread_and_counted() {
        let mut r = rig(32);
        // The gateway claims 9 entries in an 8-slot ring.
        r.shm.atomic_u32(r.layout.requests.head).unwrap().store(9, Ordering::Release);
        assert_eq!(r.server.poll(&mut r.enclave), 0);
        assert_eq!(r.server.rejects().get(RejectReason::OversizedBatch), 1);
        assert_eq!(r.comp.available(), Ok(0), "no completion for a batch that was never read");
        assert!(!r.server.has_work(), "resynchronized at the claimed head");
        // The ring works again afterwards.
        r.req = Producer::new(r.shm.clone(), r.layout.requests).unwrap();
        let out = r.pair.outbound;
        let done = r.run(&[encode_esp(1, &EspDescriptor::encrypt(out, 0, 64, 1))]);
        assert_eq!(Rig::status(&done[0]), EspStatus::Ok);
    }

    #[test]
    fn a_corrupt_completion_index_stalls_and_is_counted_once() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        r.req.write(0, &encode_esp(1, &EspDescriptor::encrypt(out, 0, 64, 1)));
        r.req.publish(1);
        r.shm.atomic_u32(r.layout.completions.tail).unwrap().store(1000, Ordering::Release);
        for _ in 0..3 {
            assert_eq!(r.server.poll(&mut r.enclave), 0);
        }
        assert_eq!(r.server.rejects().get(RejectReason::CorruptIndex), 1);
        assert!(r.packets().iter().all(|&b| b == 0));
    }

    #[test]
    fn batches_larger_than_the_trusted_limit_are_split() {
        let mut r = rig(3);
        let out = r.pair.outbound;
        let slots: Vec<_> = (0..8u32)
            .map(|i| encode_esp(u64::from(i), &EspDescriptor::encrypt(out, i * 64, 64, 1)))
            .collect();
        let done = r.run(&slots);
        assert!(done.iter().all(|c| Rig::status(c) == EspStatus::Ok));
        assert_eq!(r.enclave.counters().batches, 3);
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
    fn a_call_sees_the_packets_queued_before_it() {
        let mut r = rig(32);
        let out = r.pair.outbound;
        let mut w = Writer::new();
        w.u32(out.0);
        let del = call_slot(2, op::ESP_SA_DELETE, &w.buf, &r, 4096);
        let slots = [
            encode_esp(1, &EspDescriptor::encrypt(out, 0, 64, 1)),
            del,
            encode_esp(3, &EspDescriptor::encrypt(out, 64, 64, 2)),
        ];
        let done = r.run(&slots);
        assert_eq!(Rig::status(&done[0]), EspStatus::Ok);
        assert_eq!(done[1].status, CallStatus::Ok as u8);
        assert_eq!(Rig::status(&done[2]), EspStatus::UnknownSa, "handle used after deletion");
    }

    #[test]
    fn guest_arguments_round_trip_and_junk_is_refused() {
        let a = GuestArgs {
            shm_fd: 3,
            request_fd: 4,
            completion_fd: 5,
            config_fd: 6,
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
        use crate::api::handle::TenantId;
        use crate::api::report::{EnclaveConfig, Limits, ProvisioningKey};
        let cfg = EnclaveConfig {
            tenant: TenantId(7),
            provisioning_key: ProvisioningKey::from_bytes([9; 32]),
            trusted_min_seal_counter: 11,
            limits: Limits::default(),
        };
        let b = config::encode(&cfg, b"pk");
        let (back, pk) = config::decode(&b).unwrap();
        assert_eq!((back.tenant, back.trusted_min_seal_counter, back.limits), (cfg.tenant, 11, cfg.limits));
        assert_eq!(&b[pk], b"pk");
        assert!(config::decode(&b[..b.len() - 1]).is_none());
        assert!(config::decode(&[]).is_none());
    }
}
