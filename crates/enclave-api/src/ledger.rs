//! The platform's ledger: what must outlive one enclave instance so that nonces stay unique
//! and sealed state cannot be rolled back — the seal counter, the counters of the sealed
//! tenant secrets still live, and the static ESP keys already installed.
//!
//! An enclave instance holds no memory across a restart, and the store is the caller's, so
//! none of this can live in either: the enclave asks its platform (the process that launched
//! it: the software analogue of a TEE's monotonic counters) over a channel the launcher
//! made before the enclave started. Every operation is safe for a hostile holder of that
//! channel to call: it can issue counters (they only go up), retire live ones or claim
//! static keys (both deny service, which a hostile gateway can do anyway), but never make a
//! retired counter live again or forget a static key.
//!
//! ```text
//! request (24 bytes):  op u8 | flag u8 | 0 u16 | id u32 | argument (counter u64, or digest 16 B)
//! reply   (16 bytes):  id u32 | status u8 | 0 0 0 | value u64
//! ```

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Live sealed secrets one tenant may hold: more than [`crate::Limits`]' secrets (the
/// default allows 64) times the reseals a restart makes, far below what memory allows.
pub const MAX_LIVE: usize = 65_536;
/// Static ESP keys one tenant may install over the ledger's life.
pub const MAX_STATIC: usize = 65_536;
/// How long [`FileLedger::open`] waits for another holder of the ledger to let go.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Why a ledger operation did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The live set or the static record is full, or the counter ran out.
    #[error("the platform ledger is full")]
    Full,
    /// The platform did not answer, or could not keep the change.
    #[error("the platform ledger is unavailable")]
    Unavailable,
}

/// What the record of static ESP keys says of one more install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticUse {
    /// Never installed in the other direction, and not outbound before: recorded.
    Admitted,
    /// Installed for an outbound SA before: its sequence numbers (AEAD nonces) would repeat.
    OutboundAgain,
    /// Installed for the other direction before: the enclave would encrypt under a key it
    /// also decrypts with.
    OtherDirection,
}

/// The operations an enclave asks of its platform.
pub trait Ledger: Send + core::fmt::Debug {
    /// A counter above every counter issued before (the first is 1); `live`: also recorded
    /// as the counter of a live sealed secret.
    fn issue(&mut self, live: bool) -> Result<u64, LedgerError>;
    /// A live counter is live no more: its blob is superseded. Unknown counters are ignored.
    fn retire(&mut self, counter: u64) -> Result<(), LedgerError>;
    /// Whether `counter` was issued live and not retired.
    fn is_live(&mut self, counter: u64) -> Result<bool, LedgerError>;
    /// Records a static ESP key (a digest of it) installed in one direction.
    fn admit_static(&mut self, digest: [u8; 16], outbound: bool) -> Result<StaticUse, LedgerError>;
}

/// One ledger behind a lock: what a launcher shares between the instances it starts one
/// after another, and with the thread that answers an enclave process.
impl<L: Ledger + ?Sized> Ledger for std::sync::Arc<std::sync::Mutex<L>> {
    fn issue(&mut self, live: bool) -> Result<u64, LedgerError> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).issue(live)
    }
    fn retire(&mut self, counter: u64) -> Result<(), LedgerError> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retire(counter)
    }
    fn is_live(&mut self, counter: u64) -> Result<bool, LedgerError> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_live(counter)
    }
    fn admit_static(&mut self, digest: [u8; 16], outbound: bool) -> Result<StaticUse, LedgerError> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).admit_static(digest, outbound)
    }
}

/// A ledger in memory: it lasts as long as its owner (a launcher that restarts its enclave
/// in place, a test, the inline backend of a process that keeps no state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryLedger {
    /// The last counter issued (0: none yet).
    last: u64,
    live: BTreeSet<u64>,
    statics: Vec<([u8; 16], bool)>,
}

const FILE_MAGIC: &[u8; 8] = b"CLLEDGR1";

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last counter issued.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Live counters held.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// The persistent form: magic, last counter, live counters, static records.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24 + 8 * self.live.len() + 17 * self.statics.len());
        v.extend_from_slice(FILE_MAGIC);
        v.extend_from_slice(&self.last.to_be_bytes());
        v.extend_from_slice(&(self.live.len() as u64).to_be_bytes());
        for c in &self.live {
            v.extend_from_slice(&c.to_be_bytes());
        }
        v.extend_from_slice(&(self.statics.len() as u64).to_be_bytes());
        for (d, out) in &self.statics {
            v.extend_from_slice(d);
            v.push(u8::from(*out));
        }
        v
    }

    /// Parses [`Self::to_bytes`]; `None` for anything else (a truncated or foreign file).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let mut r = b.strip_prefix(FILE_MAGIC.as_slice())?;
        let u64_at = |r: &mut &[u8]| -> Option<u64> {
            let (head, rest) = r.split_first_chunk::<8>()?;
            *r = rest;
            Some(u64::from_be_bytes(*head))
        };
        let last = u64_at(&mut r)?;
        let n = usize::try_from(u64_at(&mut r)?).ok().filter(|n| *n <= MAX_LIVE)?;
        let mut live = BTreeSet::new();
        for _ in 0..n {
            let c = u64_at(&mut r)?;
            if c == 0 || c > last || !live.insert(c) {
                return None;
            }
        }
        let n = usize::try_from(u64_at(&mut r)?).ok().filter(|n| *n <= MAX_STATIC)?;
        let mut statics = Vec::with_capacity(n);
        for _ in 0..n {
            let (d, rest) = r.split_first_chunk::<16>()?;
            let (&out, rest) = rest.split_first()?;
            if out > 1 {
                return None;
            }
            statics.push((*d, out == 1));
            r = rest;
        }
        r.is_empty().then_some(Self { last, live, statics })
    }
}

impl Ledger for MemoryLedger {
    fn issue(&mut self, live: bool) -> Result<u64, LedgerError> {
        if live && self.live.len() >= MAX_LIVE {
            return Err(LedgerError::Full);
        }
        let c = self.last.checked_add(1).ok_or(LedgerError::Full)?;
        self.last = c;
        if live {
            self.live.insert(c);
        }
        Ok(c)
    }

    fn retire(&mut self, counter: u64) -> Result<(), LedgerError> {
        self.live.remove(&counter);
        Ok(())
    }

    fn is_live(&mut self, counter: u64) -> Result<bool, LedgerError> {
        Ok(self.live.contains(&counter))
    }

    fn admit_static(&mut self, digest: [u8; 16], outbound: bool) -> Result<StaticUse, LedgerError> {
        match self.statics.iter().find(|(d, _)| *d == digest) {
            Some((_, true)) if outbound => Ok(StaticUse::OutboundAgain),
            Some((_, first_out)) if *first_out != outbound => Ok(StaticUse::OtherDirection),
            Some(_) => Ok(StaticUse::Admitted),
            None if self.statics.len() >= MAX_STATIC => Err(LedgerError::Full),
            None => {
                self.statics.push((digest, outbound));
                Ok(StaticUse::Admitted)
            }
        }
    }
}

/// Counters a [`FileLedger`] reserves per write for seals that are not live (SK_d, IKE
/// state): one file write per this many, not one per IKE SA.
const RESERVE: u64 = 1024;

/// A ledger kept in a file (the platform's, mode 0600): every change that matters is on
/// disk (written to a new file, synced, renamed over the old) before the enclave hears of it.
#[derive(Debug)]
pub struct FileLedger {
    path: PathBuf,
    mem: MemoryLedger,
    /// The last counter issued; `mem.last` is what the file holds (issued or reserved).
    issued: u64,
    /// `<path>.lock`, locked for this ledger's life: two writers of one file would each
    /// overwrite what the other recorded.
    _lock: std::fs::File,
}

impl FileLedger {
    /// Opens `path`, or starts an empty ledger there if there is no file yet. A file that
    /// does not parse is an error: starting afresh would make old blobs open again. So is
    /// a ledger another `FileLedger` holds open, in this process or another.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path.with_extension("lock"))?;
        // A platform that is ending (its service was killed) lets go within moments.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ResourceBusy,
                        "the ledger is in use by another platform (one ledger per host and tenant)",
                    ))
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let mem = match std::fs::File::open(path) {
            Ok(mut f) => {
                let mut b = Vec::new();
                f.read_to_end(&mut b)?;
                MemoryLedger::from_bytes(&b).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "not a ledger file (or truncated)")
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => MemoryLedger::new(),
            Err(e) => return Err(e),
        };
        let issued = mem.last;
        let ledger = Self { path: path.to_owned(), mem, issued, _lock: lock };
        ledger.persist()?;
        Ok(ledger)
    }

    fn persist(&self) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = self.path.with_extension("new");
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&self.mem.to_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()
    }

    fn keep(&self) -> Result<(), LedgerError> {
        self.persist().map_err(|_| LedgerError::Unavailable)
    }
}

impl Ledger for FileLedger {
    fn issue(&mut self, live: bool) -> Result<u64, LedgerError> {
        let c = self.issued.checked_add(1).ok_or(LedgerError::Full)?;
        if live {
            if self.mem.live.len() >= MAX_LIVE {
                return Err(LedgerError::Full);
            }
            let before = self.mem.last;
            self.mem.last = self.mem.last.max(c);
            self.mem.live.insert(c);
            if let Err(e) = self.keep() {
                self.mem.live.remove(&c);
                self.mem.last = before;
                return Err(e);
            }
        } else if c > self.mem.last {
            let before = self.mem.last;
            self.mem.last = c.saturating_add(RESERVE - 1);
            if let Err(e) = self.keep() {
                self.mem.last = before;
                return Err(e);
            }
        }
        self.issued = c;
        Ok(c)
    }

    fn retire(&mut self, counter: u64) -> Result<(), LedgerError> {
        if self.mem.is_live(counter)? {
            self.mem.retire(counter)?;
            self.keep()?;
        }
        Ok(())
    }

    fn is_live(&mut self, counter: u64) -> Result<bool, LedgerError> {
        self.mem.is_live(counter)
    }

    fn admit_static(&mut self, digest: [u8; 16], outbound: bool) -> Result<StaticUse, LedgerError> {
        let before = self.mem.statics.len();
        let r = self.mem.admit_static(digest, outbound)?;
        if self.mem.statics.len() != before {
            if let Err(e) = self.keep() {
                self.mem.statics.truncate(before);
                return Err(e);
            }
        }
        Ok(r)
    }
}

const REQUEST_LEN: usize = 24;
const REPLY_LEN: usize = 16;
const OP_ISSUE: u8 = 1;
const OP_RETIRE: u8 = 2;
const OP_IS_LIVE: u8 = 3;
const OP_ADMIT_STATIC: u8 = 4;
const ST_OK: u8 = 0;
const ST_FULL: u8 = 1;
const ST_UNAVAILABLE: u8 = 2;

/// The enclave's end of the channel to its platform's ledger.
#[derive(Debug)]
pub struct LedgerClient {
    socket: UnixDatagram,
    next_id: u32,
}

/// How long the enclave waits for its platform before the operation fails.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

impl LedgerClient {
    /// The enclave's end (a `SOCK_SEQPACKET` socket the launcher made), with
    /// [`CLIENT_TIMEOUT`] on every answer.
    pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
        let socket = UnixDatagram::from(fd);
        socket.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        Ok(Self { socket, next_id: 1 })
    }

    fn ask(&mut self, op: u8, flag: u8, arg: &[u8]) -> Result<u64, LedgerError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut req = [0u8; REQUEST_LEN];
        req[0] = op;
        req[1] = flag;
        req[4..8].copy_from_slice(&id.to_be_bytes());
        let arg_at = req.get_mut(8..8 + arg.len()).ok_or(LedgerError::Unavailable)?;
        arg_at.copy_from_slice(arg);
        self.socket.send(&req).map_err(|_| LedgerError::Unavailable)?;
        // Answers to requests someone else sent on a copy of this channel are skipped; a
        // bounded number, so a flood cannot keep the enclave here.
        for _ in 0..16 {
            let mut reply = [0u8; REPLY_LEN + 1];
            let n = self.socket.recv(&mut reply).map_err(|_| LedgerError::Unavailable)?;
            if n != REPLY_LEN || reply[0..4] != id.to_be_bytes() {
                continue;
            }
            let mut v = [0u8; 8];
            v.copy_from_slice(&reply[8..16]);
            return match reply[4] {
                ST_OK => Ok(u64::from_be_bytes(v)),
                ST_FULL => Err(LedgerError::Full),
                _ => Err(LedgerError::Unavailable),
            };
        }
        Err(LedgerError::Unavailable)
    }
}

impl Ledger for LedgerClient {
    fn issue(&mut self, live: bool) -> Result<u64, LedgerError> {
        self.ask(OP_ISSUE, u8::from(live), &[])
    }
    fn retire(&mut self, counter: u64) -> Result<(), LedgerError> {
        self.ask(OP_RETIRE, 0, &counter.to_be_bytes()).map(drop)
    }
    fn is_live(&mut self, counter: u64) -> Result<bool, LedgerError> {
        self.ask(OP_IS_LIVE, 0, &counter.to_be_bytes()).map(|v| v == 1)
    }
    fn admit_static(&mut self, digest: [u8; 16], outbound: bool) -> Result<StaticUse, LedgerError> {
        match self.ask(OP_ADMIT_STATIC, u8::from(outbound), &digest)? {
            0 => Ok(StaticUse::Admitted),
            1 => Ok(StaticUse::OutboundAgain),
            2 => Ok(StaticUse::OtherDirection),
            _ => Err(LedgerError::Unavailable),
        }
    }
}

/// Answers one request for `ledger`: the reply, or `None` for a request that is not one
/// (ignored: the enclave times out).
pub fn answer(ledger: &mut dyn Ledger, req: &[u8]) -> Option<[u8; REPLY_LEN]> {
    if req.len() != REQUEST_LEN {
        return None;
    }
    let mut arg = [0u8; 8];
    arg.copy_from_slice(&req[8..16]);
    let counter = u64::from_be_bytes(arg);
    let flag = req[1];
    let r: Result<u64, LedgerError> = match req[0] {
        OP_ISSUE if flag <= 1 => ledger.issue(flag == 1),
        OP_RETIRE => ledger.retire(counter).map(|()| 0),
        OP_IS_LIVE => ledger.is_live(counter).map(u64::from),
        OP_ADMIT_STATIC if flag <= 1 => {
            let mut d = [0u8; 16];
            d.copy_from_slice(&req[8..24]);
            ledger.admit_static(d, flag == 1).map(|u| match u {
                StaticUse::Admitted => 0,
                StaticUse::OutboundAgain => 1,
                StaticUse::OtherDirection => 2,
            })
        }
        _ => return None,
    };
    let mut reply = [0u8; REPLY_LEN];
    reply[0..4].copy_from_slice(&req[4..8]);
    match r {
        Ok(v) => reply[8..16].copy_from_slice(&v.to_be_bytes()),
        Err(LedgerError::Full) => reply[4] = ST_FULL,
        Err(LedgerError::Unavailable) => reply[4] = ST_UNAVAILABLE,
    }
    Some(reply)
}

/// Serves the platform's end of one enclave's channel until the enclave's end closes.
pub fn serve(socket: &UnixDatagram, ledger: &std::sync::Mutex<dyn Ledger>) {
    let mut buf = [0u8; REQUEST_LEN + 1];
    // Bounded by the enclave's life: its end closes when it exits, and recv returns 0.
    while let Ok(n) = socket.recv(&mut buf) {
        if n == 0 {
            return;
        }
        let reply = {
            let mut l = ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            buf.get(..n).and_then(|req| answer(&mut *l, req))
        };
        if let Some(r) = reply {
            if socket.send(&r).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_only_go_up_and_retired_ones_stay_retired() {
        let mut l = MemoryLedger::new();
        let a = l.issue(true).unwrap();
        let b = l.issue(false).unwrap();
        let c = l.issue(true).unwrap();
        assert!(a < b && b < c && a == 1);
        assert!(l.is_live(a).unwrap() && !l.is_live(b).unwrap() && l.is_live(c).unwrap());
        l.retire(a).unwrap();
        l.retire(99).unwrap();
        assert!(!l.is_live(a).unwrap());
        assert_eq!(MemoryLedger::from_bytes(&l.to_bytes()), Some(l.clone()));
        let mut t = l.to_bytes();
        t.pop();
        assert_eq!(MemoryLedger::from_bytes(&t), None, "truncated");
    }

    #[test]
    fn a_static_key_goes_out_once_and_one_way() {
        let mut l = MemoryLedger::new();
        assert_eq!(l.admit_static([1; 16], false), Ok(StaticUse::Admitted));
        assert_eq!(l.admit_static([1; 16], false), Ok(StaticUse::Admitted), "inbound again");
        assert_eq!(l.admit_static([1; 16], true), Ok(StaticUse::OtherDirection));
        assert_eq!(l.admit_static([2; 16], true), Ok(StaticUse::Admitted));
        assert_eq!(l.admit_static([2; 16], true), Ok(StaticUse::OutboundAgain));
        assert_eq!(l.admit_static([2; 16], false), Ok(StaticUse::OtherDirection));
    }

    #[test]
    fn a_file_ledger_survives_reopening_and_reserves_plain_counters() {
        let dir = std::env::temp_dir().join(format!("cl-ledger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("ledger");
        let mut l = FileLedger::open(&path).unwrap();
        let live = l.issue(true).unwrap();
        let plain: Vec<u64> = (0..5).map(|_| l.issue(false).unwrap()).collect();
        let dead = l.issue(true).unwrap();
        l.retire(dead).unwrap();
        assert_eq!(l.admit_static([7; 16], true), Ok(StaticUse::Admitted));
        let top = *plain.last().unwrap();
        assert!(live < plain[0] && top < dead);
        let busy = FileLedger::open(&path).unwrap_err();
        assert_eq!(busy.kind(), std::io::ErrorKind::ResourceBusy, "one writer at a time: {busy}");
        drop(l);
        let mut again = FileLedger::open(&path).unwrap();
        assert!(again.is_live(live).unwrap() && !again.is_live(dead).unwrap());
        assert!(again.issue(false).unwrap() > dead, "never below what was issued");
        assert_eq!(again.admit_static([7; 16], true), Ok(StaticUse::OutboundAgain));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::write(&path, b"junk").unwrap();
        assert!(FileLedger::open(&path).is_err(), "a broken ledger is not started afresh");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn requests_cross_a_socket_and_junk_is_ignored() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let ledger: std::sync::Arc<std::sync::Mutex<dyn Ledger>> =
            std::sync::Arc::new(std::sync::Mutex::new(MemoryLedger::new()));
        let l2 = ledger.clone();
        let t = std::thread::spawn(move || serve(&b, &l2));
        let mut c = LedgerClient::new(OwnedFd::from(a)).unwrap();
        let x = c.issue(true).unwrap();
        assert!(c.is_live(x).unwrap());
        c.retire(x).unwrap();
        assert!(!c.is_live(x).unwrap());
        assert_eq!(c.admit_static([3; 16], true), Ok(StaticUse::Admitted));
        assert_eq!(c.admit_static([3; 16], true), Ok(StaticUse::OutboundAgain));
        assert_eq!(answer(&mut MemoryLedger::new(), &[9; REQUEST_LEN]), None);
        assert_eq!(answer(&mut MemoryLedger::new(), &[1; 3]), None);
        drop(c);
        // A datagram pair gives no end-of-file; the test's thread is left to the process.
        drop(t);
    }
}
