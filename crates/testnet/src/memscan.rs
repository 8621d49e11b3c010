//! Searching another process's memory for key bytes (key-exposure tests): every readable
//! mapping through `/proc/PID/mem`, for every 16-byte run of each key.
//!
//! The keys are held XOR-masked here, so the scanning process never holds a plain copy
//! that a scan of itself (or a core dump) could mistake for a leak.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

use crate::{Error, Result};

/// The run length searched: long enough that a random hit is impossible, short enough to
/// find a key stored in pieces (an AES key apart from its GCM salt).
pub const WINDOW: usize = 16;
const MASK: u8 = 0xa5;

/// The keys to look for, by name.
#[derive(Debug, Default)]
pub struct Needles {
    windows: Vec<([u8; WINDOW], String)>,
    first: Vec<bool>,
}

impl Needles {
    /// No keys yet.
    pub fn new() -> Self {
        Self { windows: Vec::new(), first: vec![false; 65536] }
    }

    /// Adds a key (at least [`WINDOW`] bytes; shorter ones are refused).
    pub fn add(&mut self, name: &str, key: &[u8]) -> Result<()> {
        if key.len() < WINDOW {
            return Err(Error::Invalid {
                what: "key to search",
                value: format!("{name}: {} bytes", key.len()),
            });
        }
        for w in key.windows(WINDOW) {
            let mut masked = [0u8; WINDOW];
            for (m, b) in masked.iter_mut().zip(w) {
                *m = b ^ MASK;
            }
            self.first[usize::from(masked[0]) << 8 | usize::from(masked[1])] = true;
            self.windows.push((masked, name.to_owned()));
        }
        Ok(())
    }

    /// The names added.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.windows.iter().map(|(_, n)| n.clone()).collect();
        v.dedup();
        v
    }

    fn search(&self, mem: &[u8], found: &mut BTreeMap<String, usize>) {
        let Some(last) = mem.len().checked_sub(WINDOW) else { return };
        for i in 0..=last {
            let (a, b) = (mem[i] ^ MASK, mem[i + 1] ^ MASK);
            if !self.first[usize::from(a) << 8 | usize::from(b)] {
                continue;
            }
            for (w, name) in &self.windows {
                if mem[i..i + WINDOW].iter().zip(w).all(|(m, n)| m ^ MASK == *n) {
                    *found.entry(name.clone()).or_default() += 1;
                }
            }
        }
    }
}

/// What a scan found: hits per key name, and how many bytes were read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Windows found, by key name (keys not found are absent).
    pub found: BTreeMap<String, usize>,
    /// Bytes of memory read.
    pub scanned: usize,
}

/// Reads every readable mapping of process `pid` and searches it for `needles`.
pub fn scan(pid: u32, needles: &Needles) -> Result<Scan> {
    let io = |what: String| move |source| Error::Io { what, source };
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(io(format!("maps of {pid}")))?;
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(io(format!("mem of {pid}")))?;
    let mut out = Scan::default();
    let mut buf = vec![0u8; 1 << 20];
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let path = f.nth(3).unwrap_or("");
        if !perms.starts_with('r') || path == "[vvar]" || path == "[vsyscall]" {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else { continue };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
        // Chunks overlap by a window so that no run is cut in two.
        let mut at = lo;
        while at < hi {
            let len = usize::try_from((hi - at).min(buf.len() as u64)).unwrap_or(buf.len());
            if mem.seek(SeekFrom::Start(at)).is_err() {
                break;
            }
            let Ok(n) = mem.read(&mut buf[..len]) else { break };
            if n == 0 {
                break;
            }
            needles.search(&buf[..n], &mut out.found);
            out.scanned += n;
            if at + n as u64 >= hi || n <= WINDOW {
                break;
            }
            at += (n - WINDOW) as u64;
        }
    }
    buf.fill(0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_in_its_own_heap_and_refuses_short_ones() {
        let key: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) ^ 0x5c).collect();
        let mut needles = Needles::new();
        needles.add("k", &key).unwrap();
        assert!(needles.add("short", &key[..8]).is_err());
        // A plain copy placed on purpose: the scan of this very process must find it.
        let planted = std::hint::black_box(key.clone());
        let s = scan(std::process::id(), &needles).unwrap();
        assert!(s.found.get("k").copied().unwrap_or(0) >= 1, "{s:?}");
        assert!(s.scanned > 0);
        drop(planted);
    }
}
