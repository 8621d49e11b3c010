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
/// IKE nonces drawn per enclave call.
const NONCES: usize = 4;

/// Random bytes and IKE nonces not yet handed out.
pub(crate) struct RandomPool {
    buf: [u8; BLOCK],
    /// `buf[..left]` is unused.
    left: usize,
    /// Nonces the enclave issued ([`enclave::Enclave::ike_nonces`]): it accepts only its own
    /// as our side's nonce in a derivation, each once, so they are drawn apart from `buf`.
    nonces: [u8; NONCES * enclave::IKE_NONCE_LEN],
    /// `nonces[..nonces_left * IKE_NONCE_LEN]` are unused.
    nonces_left: usize,
}

impl core::fmt::Debug for RandomPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RandomPool")
            .field("left", &self.left)
            .field("nonces_left", &self.nonces_left)
            .finish_non_exhaustive()
    }
}

impl Default for RandomPool {
    fn default() -> Self {
        Self { buf: [0; BLOCK], left: 0, nonces: [0; NONCES * enclave::IKE_NONCE_LEN], nonces_left: 0 }
    }
}

impl RandomPool {
    /// One IKE nonce of the enclave's, drawing [`NONCES`] at a time with `draw` (the
    /// enclave's `ike_nonces`).
    pub(crate) fn nonce(
        &mut self,
        draw: impl FnOnce(&mut [u8]) -> enclave::Result<()>,
    ) -> Result<Vec<u8>, Error> {
        if self.nonces_left == 0 {
            draw(&mut self.nonces)?;
            self.nonces_left = NONCES;
        }
        self.nonces_left -= 1;
        let at = self.nonces_left * enclave::IKE_NONCE_LEN;
        let n = self.nonces.get(at..at + enclave::IKE_NONCE_LEN).map(<[u8]>::to_vec).unwrap_or_default();
        Ok(n)
    }

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
        let r = pool.fill(|_| Err(enclave_core::Error::NotSealed), &mut out);
        assert!(r.is_err());
        assert_eq!(out, [7u8; 8]);
    }
}
