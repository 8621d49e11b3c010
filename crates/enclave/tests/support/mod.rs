//! Helpers shared by the enclave's integration tests: ESP layouts to hand the enclave.
#![allow(dead_code, clippy::cast_possible_truncation, unreachable_pub)]

/// ESP packet of `inner` at `off`: header, IV, payload with trailer (4-aligned), ICV.
pub fn lay_out(area: &mut [u8], off: usize, inner: &[u8]) -> u32 {
    let (hdr, iv, icv) = (8, 8, 16);
    let payload = (inner.len() + 2).div_ceil(4) * 4;
    let len = hdr + iv + payload + icv;
    let p = &mut area[off..off + len];
    p.fill(0);
    p[hdr + iv..][..inner.len()].copy_from_slice(inner);
    let pad = payload - inner.len() - 2;
    for (k, b) in p[hdr + iv + inner.len()..][..pad].iter_mut().enumerate() {
        *b = k as u8 + 1;
    }
    p[hdr + iv + payload - 2] = pad as u8;
    p[hdr + iv + payload - 1] = 4; // IPv4
    len as u32
}

/// An inner packet of `len` bytes whose pattern depends on `k`.
pub fn inner(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (k * 31 + j) as u8).collect()
}
