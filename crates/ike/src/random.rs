//! Public random values (SPIs, nonces, retry jitter) drawn from the enclave's generator a
//! block at a time.
//!
//! Every one of these values goes out in the clear (or is a timer), so holding a block of
//! them in the engine's memory before use reveals nothing the wire would not: what the
//! enclave must keep secret (DH private values, keys) never comes from here. A block serves
//! several tunnel setups, where each value used to be an enclave call of its own; with the
//! isolated-process enclave that was three crossings per setup.

use crate::error::Error;

/// Bytes drawn per enclave call (the call's maximum).
const BLOCK: usize = 256;

/// Random bytes not yet handed out.
pub(crate) struct RandomPool {
    buf: [u8; BLOCK],
    /// `buf[..left]` is unused.
    left: usize,
}

impl core::fmt::Debug for RandomPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RandomPool").field("left", &self.left).finish_non_exhaustive()
    }
}

impl Default for RandomPool {
    fn default() -> Self {
        Self { buf: [0; BLOCK], left: 0 }
    }
}

impl RandomPool {
    /// Fills `out` with bytes no other caller got, drawing a new block with `draw` (the
    /// enclave's `random_nonce`) when this one runs out.
    pub(crate) fn fill(
        &mut self,
        mut draw: impl FnMut(&mut [u8]) -> enclave::Result<()>,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let mut done = 0;
        while done < out.len() {
            if self.left == 0 {
                draw(&mut self.buf)?;
                self.left = BLOCK;
            }
            let n = (out.len() - done).min(self.left);
            let from = self.left - n;
            if let (Some(dst), Some(src)) = (out.get_mut(done..done + n), self.buf.get_mut(from..self.left)) {
                dst.copy_from_slice(src);
                // A byte is handed out once.
                src.fill(0);
            }
            self.left = from;
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_draw_serves_many_values_and_no_byte_goes_out_twice() -> Result<(), Error> {
        let mut pool = RandomPool::default();
        let mut draws = 0u8;
        // Each block: pairs of (draw number, pair index), so that every pair differs.
        let mut draw = |b: &mut [u8]| {
            draws += 1;
            for (pair, n) in b.chunks_mut(2).zip(0u8..) {
                pair.copy_from_slice(&[draws, n]);
            }
            Ok(())
        };
        let mut seen = Vec::new();
        // 8 + 32 + 4 bytes per setup: an IKE SPI, a nonce and a child SPI.
        for _ in 0..20 {
            for len in [8usize, 32, 4] {
                let mut v = vec![0u8; len];
                pool.fill(&mut draw, &mut v)?;
                seen.extend_from_slice(&v);
            }
        }
        // 880 bytes from four blocks of 256 (a value may straddle two).
        assert_eq!(draws, 4);
        let mut pairs: Vec<&[u8]> = seen.chunks(2).collect();
        pairs.sort_unstable();
        pairs.dedup();
        assert_eq!(pairs.len(), seen.len() / 2, "no (block, position) pair twice");
        Ok(())
    }

    #[test]
    fn a_failed_draw_is_an_error_and_hands_out_nothing() {
        let mut pool = RandomPool::default();
        let mut out = [7u8; 8];
        let r = pool.fill(|_| Err(enclave::Error::NotSealed), &mut out);
        assert!(r.is_err());
        assert_eq!(out, [7u8; 8]);
    }
}
