//! The shared memory: one sealed memfd, mapped `MAP_SHARED` by the gateway and the enclave.
//!
//! The other side may write any byte at any time. So this module never hands out a Rust
//! reference into the mapping except (a) atomics, which are made for concurrent mutation,
//! and (b) the packet area, through [`SharedMem::slice_mut`], whose callers accept that its
//! bytes may change under them (they are packet bytes, parsed as hostile input; see that
//! function). Everything else is copied out or in with volatile accesses and bounds checks.
#![allow(unsafe_code)]

use super::ProcessError;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Seals that make the memfd's size permanent: without `F_SEAL_SHRINK` the gateway could
/// truncate the file and every later access by the enclave would fault with `SIGBUS`.
const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A mapping of the whole shared memfd.
pub struct SharedMem {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory owned by this value until drop; all access goes
// through atomics, volatile copies or `slice_mut`, whose callers guarantee exclusivity, so
// sharing the handle between threads adds no data race that one thread would not have.
unsafe impl Send for SharedMem {}
// SAFETY: as for `Send`: `&SharedMem` only offers atomic and volatile accesses.
unsafe impl Sync for SharedMem {}

impl core::fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SharedMem({} bytes, fd {})", self.len, self.fd.as_raw_fd())
    }
}

impl SharedMem {
    /// Creates a sealed memfd of `len` bytes (zero-filled by the kernel) and maps it.
    pub fn create(len: usize) -> Result<Self, ProcessError> {
        let name = c"cloister-enclave-shm";
        // SAFETY: `name` is a valid NUL-terminated string; the flags are plain constants.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(ProcessError::last_os("memfd_create"));
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len).map_err(|_| ProcessError::Geometry { why: "too large" })?;
        // SAFETY: plain syscall on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(ProcessError::last_os("ftruncate(shared memory)"));
        }
        // SAFETY: plain syscall on a descriptor we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) } != 0 {
            return Err(ProcessError::last_os("fcntl(F_ADD_SEALS)"));
        }
        Self::map(fd, len)
    }

    /// Maps a memfd received from the other side after checking that it is a sealed
    /// regular file of exactly `len` bytes.
    pub fn from_fd(fd: OwnedFd, len: usize) -> Result<Self, ProcessError> {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: `st` is a valid, writable `stat`; `fd` is an open descriptor we own.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(ProcessError::last_os("fstat(shared memory)"));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(ProcessError::SharedMemory { why: "not a memfd" });
        }
        if usize::try_from(st.st_size).ok() != Some(len) {
            return Err(ProcessError::SharedMemory { why: "size does not match the geometry" });
        }
        // SAFETY: plain syscall on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(ProcessError::SharedMemory { why: "memfd is not sealed against resizing" });
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Self, ProcessError> {
        if len == 0 {
            return Err(ProcessError::Geometry { why: "empty mapping" });
        }
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address, so nothing
        // existing is replaced) of a file that is exactly `len` bytes and sealed against
        // shrinking, so every page of it stays backed.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ProcessError::last_os("mmap(shared memory)"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(ProcessError::SharedMemory { why: "null mapping" })?;
        Ok(Self { ptr, len, fd })
    }

    /// The memfd, to hand to the child.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty mapping is refused at creation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to byte `off` if `off..off + n` lies inside the mapping and `off` is a
    /// multiple of `align`.
    fn at(&self, off: usize, n: usize, align: usize) -> Option<*mut u8> {
        let end = off.checked_add(n)?;
        if end > self.len || !off.is_multiple_of(align) {
            return None;
        }
        // SAFETY: `off < end <= len`, so the result stays inside the mapping (an allocation
        // of `len` bytes).
        Some(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// The `u32` at `off` as an atomic (`None` if out of range or misaligned).
    pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        let p = self.at(off, 4, 4)?;
        // SAFETY: `p` is in bounds and 4-aligned; the mapping outlives `&self`; `AtomicU32`
        // has the layout of `u32` and permits concurrent mutation (by the other process too).
        Some(unsafe { &*p.cast::<AtomicU32>() })
    }

    /// The `u64` at `off` as an atomic (`None` if out of range or misaligned).
    pub fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        let p = self.at(off, 8, 8)?;
        // SAFETY: as in `atomic_u32`, with 8-byte alignment checked.
        Some(unsafe { &*p.cast::<AtomicU64>() })
    }

    /// Copies `dst.len()` bytes at `off` out of the shared memory. The other side may be
    /// writing them: the copy may be torn, but it is private once made, so checks done on
    /// it hold (the single-fetch rule against TOCTOU). Returns false if out of range.
    ///
    /// Volatile reads of whole aligned `u64`s: a volatile read of a byte array compiles to
    /// one load per byte, which made copying a batch's descriptors cost more than checking
    /// them.
    pub fn read_into(&self, off: usize, dst: &mut [u8]) -> bool {
        let Some(src) = self.at(off, dst.len(), 1) else { return false };
        // Bytes up to the first 8-aligned address, then words, then the rest.
        let head = src.align_offset(8).min(dst.len());
        let (first, rest) = dst.split_at_mut(head);
        let mut chunks = rest.chunks_exact_mut(8);
        let mut i = 0usize;
        for b in first {
            // SAFETY: `src + i` lies inside the checked range.
            *b = unsafe { core::ptr::read_volatile(src.add(i)) };
            i += 1;
        }
        for c in &mut chunks {
            // SAFETY: `src + i .. src + i + 8` lies inside the checked range and is 8-aligned
            // (`i` starts at the alignment offset and grows by 8); volatile because the
            // bytes may change concurrently and the compiler must not assume otherwise (e.g.
            // by reading them twice).
            let w = unsafe { core::ptr::read_volatile(src.add(i).cast::<u64>()) };
            c.copy_from_slice(&w.to_ne_bytes());
            i += 8;
        }
        for b in chunks.into_remainder() {
            // SAFETY: `src + i` lies inside the checked range.
            *b = unsafe { core::ptr::read_volatile(src.add(i)) };
            i += 1;
        }
        true
    }

    /// Calls `f(i, record)` for each of `count` records of `N` little-endian `u64`s at `off`
    /// (8-aligned), each word read once with a volatile load: a single fetch, checked once
    /// for the whole run, for records that are checked word by word as they are read.
    /// Returns false (calling `f` for none) if the run is out of range or misaligned.
    pub fn read_records<const N: usize>(
        &self,
        off: usize,
        count: usize,
        mut f: impl FnMut(usize, [u64; N]),
    ) -> bool {
        let Some(src) = count.checked_mul(8 * N).and_then(|n| self.at(off, n, 8)) else { return false };
        let src = src.cast::<u64>();
        for i in 0..count {
            let mut r = [0u64; N];
            for (j, w) in r.iter_mut().enumerate() {
                // SAFETY: word `i * N + j` lies inside the checked, 8-aligned range.
                *w = u64::from_le(unsafe { core::ptr::read_volatile(src.add(i * N + j)) });
            }
            f(i, r);
        }
        true
    }

    /// Copies `src` into the shared memory at `off`. Returns false if out of range.
    pub fn write_from(&self, off: usize, src: &[u8]) -> bool {
        let Some(dst) = self.at(off, src.len(), 1) else { return false };
        let head = dst.align_offset(8).min(src.len());
        let (first, rest) = src.split_at(head);
        let mut chunks = rest.chunks_exact(8);
        let mut i = 0usize;
        for b in first {
            // SAFETY: `dst + i` lies inside the checked range.
            unsafe { core::ptr::write_volatile(dst.add(i), *b) };
            i += 1;
        }
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            // SAFETY: `dst + i .. dst + i + 8` lies inside the checked range and is 8-aligned.
            unsafe { core::ptr::write_volatile(dst.add(i).cast::<u64>(), u64::from_ne_bytes(w)) };
            i += 8;
        }
        for b in chunks.remainder() {
            // SAFETY: `dst + i` lies inside the checked range.
            unsafe { core::ptr::write_volatile(dst.add(i), *b) };
            i += 1;
        }
        true
    }

    /// Asks the CPU to start bringing the cache lines of `off..off + n` (if inside the
    /// mapping) towards this core, for reading or, with `write`, for writing: a hint that
    /// reads and writes nothing, so the other side can change nothing through it. The
    /// enclave issues it for the next batch's lines before a batch's crypto, so that their
    /// trip from the gateway's core overlaps work instead of stalling it.
    pub fn prefetch(&self, off: usize, n: usize, write: bool) {
        let Some(p) = self.at(off, n, 1) else { return };
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
            let first = (p as usize) & !63;
            let end = p as usize + n;
            let mut line = first;
            while line < end {
                let at = line.max(p as usize) as *const i8;
                // SAFETY: a prefetch never faults and accesses no memory architecturally;
                // `at` lies inside the checked range anyway.
                unsafe {
                    if write {
                        _mm_prefetch::<_MM_HINT_ET0>(at);
                    } else {
                        _mm_prefetch::<_MM_HINT_T0>(at);
                    }
                }
                line += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, write);
    }

    /// Zero-fills `off..off + n`. Returns false if out of range.
    pub fn zero(&self, off: usize, n: usize) -> bool {
        let Some(dst) = self.at(off, n, 1) else { return false };
        // SAFETY: `dst .. dst + n` lies inside the mapping; racing writers only see zeros or
        // their own bytes, never memory outside the mapping.
        unsafe { core::ptr::write_bytes(dst, 0, n) };
        true
    }

    /// The bytes `range` of the mapping as a mutable slice, for transforming packets in place.
    ///
    /// # Safety
    ///
    /// The caller must hold no other slice over an overlapping range while this one lives
    /// (in this process). The *other* process may still write these bytes concurrently; the
    /// caller must treat them as hostile input that can change between two reads (parse
    /// once into locals, never derive an index from a re-read byte). Keys are never written
    /// here, only each packet's own output.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, range: core::ops::Range<usize>) -> Option<&mut [u8]> {
        let n = range.end.checked_sub(range.start)?;
        let p = self.at(range.start, n, 1)?;
        // SAFETY: `p .. p + n` lies inside the mapping, which outlives `&self`; exclusivity
        // within this process is the caller's obligation (see above).
        Some(unsafe { core::slice::from_raw_parts_mut(p, n) })
    }

    /// Where `s` starts in this mapping, if it lies wholly inside it: how the host tells
    /// that a caller's packet buffer *is* the shared packet area (the zero-copy path).
    pub fn contains_slice(&self, s: &[u8]) -> Option<usize> {
        let base = self.ptr.as_ptr() as usize;
        let start = (s.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(s.len())?;
        (end <= self.len).then_some(start)
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`, unmapped only here; no
        // reference into it outlives `self` (every accessor borrows `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn create_seals_and_reopen_checks_size_and_seals() {
        let m = SharedMem::create(8192).unwrap();
        // SAFETY: duplicating a valid descriptor.
        let dup = unsafe { libc::fcntl(m.fd().as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        assert!(dup >= 0);
        // SAFETY: `dup` is a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        // SAFETY: plain syscall; the seal must refuse shrinking.
        assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
        assert!(matches!(SharedMem::from_fd(fd, 4096), Err(ProcessError::SharedMemory { .. })));
    }

    #[test]
    fn unsealed_memfd_is_refused() {
        // SAFETY: valid C string, plain flags.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
        assert!(matches!(SharedMem::from_fd(fd, 4096), Err(ProcessError::SharedMemory { .. })));
    }

    #[test]
    fn accessors_refuse_out_of_range_and_misaligned() {
        let m = SharedMem::create(4096).unwrap();
        assert!(m.atomic_u32(4092).is_some());
        assert!(m.atomic_u32(4093).is_none());
        assert!(m.atomic_u32(4096).is_none());
        assert!(m.atomic_u64(4).is_none());
        assert!(m.atomic_u32(usize::MAX - 1).is_none());
        let mut b = [0u8; 16];
        assert!(!m.read_into(4090, &mut b));
        assert!(!m.read_into(usize::MAX, &mut b));
        assert!(!m.write_from(4090, &b));
        assert!(m.write_from(4080, &[7u8; 16]));
        assert!(m.read_into(4080, &mut b));
        assert_eq!(b, [7u8; 16]);
        m.atomic_u32(0).unwrap().store(5, Ordering::Relaxed);
        let mut w = [0u8; 4];
        assert!(m.read_into(0, &mut w));
        assert_eq!(u32::from_le_bytes(w), 5);
    }

    #[test]
    fn copies_round_trip_at_any_alignment_and_length() {
        let m = SharedMem::create(4096).unwrap();
        for off in 0..17usize {
            for len in 0..41usize {
                let src: Vec<u8> = (0..len).map(|k| u8::try_from((k * 7 + off) % 256).unwrap() | 1).collect();
                m.zero(0, 128);
                assert!(m.write_from(off, &src));
                let mut back = vec![0u8; len + 2];
                assert!(m.read_into(off.saturating_sub(1), &mut back[..len + usize::from(off > 0)]));
                let got = if off > 0 { &back[1..=len] } else { &back[..len] };
                assert_eq!(got, &src[..], "off {off} len {len}");
                if off > 0 {
                    assert_eq!(back[0], 0, "the byte before was not written");
                }
                let mut after = [0xffu8];
                assert!(m.read_into(off + len, &mut after));
                assert_eq!(after[0], 0, "the byte after was not written");
            }
        }
    }
}
