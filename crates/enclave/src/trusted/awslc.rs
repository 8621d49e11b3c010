//! The primitives the enclave takes from AWS-LC (through `aws-lc-sys`): X25519,
//! constant-time modular exponentiation, and ML-KEM (FIPS 203).
//!
//! Why a second crypto library: an IKE SA costs each side one key generation and one
//! agreement, and on this project's machines AWS-LC's assembly (s2n-bignum's X25519, the
//! mulx/adx Montgomery multiplication of its BIGNUMs) does them 2.5-3 times faster than the
//! pure-Rust `x25519-dalek` and `crypto-bigint` did (X25519 agreement about 18 µs against
//! 41-60 µs; a 3072-bit exponentiation with a 512-bit exponent about 0.94 ms against 2.3 ms),
//! which set the IKE setup rate (docs/bench-ike.md). Only raw functions are used: private
//! values stay in this crate's own zeroizing buffers, and every BIGNUM that held a secret is
//! cleared when freed.
//!
//! This is the only module of the trusted core with `unsafe` code: FFI calls, each with
//! its contract next to it.
#![allow(unsafe_code)]

use aws_lc_sys as sys;
use enclave_api::error::{Error, Result};
use zeroize::Zeroizing;

/// X25519 public value for a private scalar (clamped by AWS-LC as RFC 7748 §5 says).
pub(crate) fn x25519_public(private: &[u8; 32]) -> [u8; 32] {
    let mut public = [0u8; 32];
    // SAFETY: both pointers name 32-byte arrays that live across the call, as the function
    // requires; it reads `private` and writes only `public`.
    unsafe { sys::X25519_public_from_private(public.as_mut_ptr(), private.as_ptr()) };
    public
}

/// X25519 shared secret, or `None` when it is all zeros (a low-order peer value: RFC 7748
/// §6.1, RFC 8031 §2 say to refuse it).
pub(crate) fn x25519(private: &[u8; 32], peer: &[u8; 32]) -> Option<Zeroizing<[u8; 32]>> {
    let mut shared = Zeroizing::new([0u8; 32]);
    // SAFETY: three 32-byte arrays, live across the call; AWS-LC writes only `shared` and
    // returns 0 exactly when the result is all zeros.
    let ok = unsafe { sys::X25519(shared.as_mut_ptr(), private.as_ptr(), peer.as_ptr()) };
    (ok == 1).then_some(shared)
}

/// An ML-KEM parameter set of AWS-LC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MlKem {
    MlKem768,
    MlKem1024,
}

impl MlKem {
    fn nid(self) -> core::ffi::c_int {
        match self {
            Self::MlKem768 => sys::NID_MLKEM768,
            Self::MlKem1024 => sys::NID_MLKEM1024,
        }
    }

    /// Encapsulation key, decapsulation key and ciphertext lengths (FIPS 203 Table 3).
    pub(crate) fn lengths(self) -> (usize, usize, usize) {
        match self {
            Self::MlKem768 => (1184, 2400, 1088),
            Self::MlKem1024 => (1568, 3168, 1568),
        }
    }
}

/// ML-KEM's shared secret length.
pub(crate) const MLKEM_SHARED: usize = 32;

/// An owned EVP_PKEY, freed on drop (AWS-LC clears a KEM key's memory when it frees it).
struct Pkey(*mut sys::EVP_PKEY);

impl Drop for Pkey {
    fn drop(&mut self) {
        // SAFETY: the pointer came from an AWS-LC constructor, is owned by this value alone
        // and is freed exactly once, here.
        unsafe { sys::EVP_PKEY_free(self.0) }
    }
}

/// An owned EVP_PKEY_CTX, freed on drop.
struct PkeyCtx(*mut sys::EVP_PKEY_CTX);

impl Drop for PkeyCtx {
    fn drop(&mut self) {
        // SAFETY: as for `Pkey`: owned here alone, freed once.
        unsafe { sys::EVP_PKEY_CTX_free(self.0) }
    }
}

impl PkeyCtx {
    fn of(key: &Pkey) -> Result<Self> {
        // SAFETY: `key` is a live EVP_PKEY; the new context takes its own reference to it
        // and the caller (this wrapper) owns the context. Null means allocation failed.
        let p = unsafe { sys::EVP_PKEY_CTX_new(key.0, core::ptr::null_mut()) };
        non_null(p, "AWS-LC EVP_PKEY_CTX").map(Self)
    }
}

/// Clears AWS-LC's thread error queue after a refusal (it would otherwise grow).
fn refused<T>(e: Error) -> Result<T> {
    // SAFETY: no arguments; touches only this thread's error queue.
    unsafe { sys::ERR_clear_error() };
    Err(e)
}

/// ML-KEM.KeyGen_internal(d, z) (FIPS 203 Algorithm 16) from `seed` = d || z: the
/// encapsulation key, and the decapsulation key in its zeroizing buffer.
pub(crate) fn mlkem_keygen(kem: MlKem, seed: &[u8; 64]) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>)> {
    let (ek_len, dk_len, _) = kem.lengths();
    let internal = Error::Internal { what: "ML-KEM key generation" };
    // SAFETY: a new context for the KEM type, owned by the wrapper; null on failure.
    let ctx = PkeyCtx(non_null(
        unsafe { sys::EVP_PKEY_CTX_new_id(sys::EVP_PKEY_KEM, core::ptr::null_mut()) },
        "AWS-LC EVP_PKEY_CTX",
    )?);
    // SAFETY: `ctx` is live; the call sets its parameter set.
    let set = unsafe { sys::EVP_PKEY_CTX_kem_set_params(ctx.0, kem.nid()) };
    // SAFETY: `ctx` is live; the call starts key generation on it.
    if set != 1 || unsafe { sys::EVP_PKEY_keygen_init(ctx.0) } != 1 {
        return refused(internal);
    }
    let mut key: *mut sys::EVP_PKEY = core::ptr::null_mut();
    let mut seed_len = seed.len();
    // SAFETY: `seed` is 64 live bytes (`seed_len` says so); on success AWS-LC stores a new
    // EVP_PKEY in `key`, which the wrapper below then owns.
    let ok = unsafe { sys::EVP_PKEY_keygen_deterministic(ctx.0, &mut key, seed.as_ptr(), &mut seed_len) };
    if ok != 1 || key.is_null() {
        return refused(internal);
    }
    let key = Pkey(key);
    let mut ek = vec![0u8; ek_len];
    let mut dk = Zeroizing::new(vec![0u8; dk_len]);
    let (mut ek_out, mut dk_out) = (ek_len, dk_len);
    // SAFETY: `key` is live; each output buffer is as long as its length variable says,
    // and AWS-LC writes at most that many bytes and stores the count written.
    let ok_pub = unsafe { sys::EVP_PKEY_get_raw_public_key(key.0, ek.as_mut_ptr(), &mut ek_out) };
    // SAFETY: as above, for the decapsulation key's buffer.
    let ok_priv = unsafe { sys::EVP_PKEY_get_raw_private_key(key.0, dk.as_mut_ptr(), &mut dk_out) };
    if ok_pub != 1 || ok_priv != 1 || ek_out != ek_len || dk_out != dk_len {
        return refused(internal);
    }
    Ok((ek, dk))
}

/// ML-KEM.Encaps_internal(ek, m) (FIPS 203 Algorithm 17): the ciphertext and the shared
/// secret; `None` for an encapsulation key that fails the input checks of FIPS 203 §7.2
/// (length, coefficients below q).
pub(crate) fn mlkem_encapsulate(
    kem: MlKem,
    ek: &[u8],
    m: &[u8; 32],
) -> Option<(Vec<u8>, Zeroizing<[u8; 32]>)> {
    let (ek_len, _, ct_len) = kem.lengths();
    if ek.len() != ek_len {
        return None;
    }
    // SAFETY: `ek` is a live slice of `ek.len()` bytes; the result is a new EVP_PKEY the
    // wrapper owns, or null when AWS-LC refuses the key.
    let key = unsafe { sys::EVP_PKEY_kem_new_raw_public_key(kem.nid(), ek.as_ptr(), ek.len()) };
    if key.is_null() {
        return refused(Error::Internal { what: "" }).ok();
    }
    let key = Pkey(key);
    let ctx = PkeyCtx::of(&key).ok()?;
    let mut ct = vec![0u8; ct_len];
    let mut ss = Zeroizing::new([0u8; 32]);
    let (mut ct_out, mut ss_out, mut m_len) = (ct_len, MLKEM_SHARED, m.len());
    // SAFETY: every buffer is as long as its length variable says; AWS-LC reads `m` and
    // writes at most those lengths into `ct` and `ss`, storing the counts written.
    let ok = unsafe {
        sys::EVP_PKEY_encapsulate_deterministic(
            ctx.0,
            ct.as_mut_ptr(),
            &mut ct_out,
            ss.as_mut_ptr(),
            &mut ss_out,
            m.as_ptr(),
            &mut m_len,
        )
    };
    if ok != 1 || ct_out != ct_len || ss_out != MLKEM_SHARED {
        return refused(Error::Internal { what: "" }).ok();
    }
    Some((ct, ss))
}

/// ML-KEM.Decaps(dk, c) (FIPS 203 Algorithm 18); `None` for a ciphertext of the wrong
/// length (a wrong ciphertext of the right length yields the implicit-rejection secret).
pub(crate) fn mlkem_decapsulate(kem: MlKem, dk: &[u8], ct: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
    let (_, dk_len, ct_len) = kem.lengths();
    if dk.len() != dk_len || ct.len() != ct_len {
        return None;
    }
    // SAFETY: `dk` is a live slice of `dk.len()` bytes; the result is a new EVP_PKEY the
    // wrapper owns (AWS-LC copies the key and clears its copy when freed), or null.
    let key = unsafe { sys::EVP_PKEY_kem_new_raw_secret_key(kem.nid(), dk.as_ptr(), dk.len()) };
    if key.is_null() {
        return refused(Error::Internal { what: "" }).ok();
    }
    let key = Pkey(key);
    let ctx = PkeyCtx::of(&key).ok()?;
    let mut ss = Zeroizing::new([0u8; 32]);
    let mut ss_out = MLKEM_SHARED;
    // SAFETY: `ss` holds `ss_out` bytes and `ct` is a live slice of `ct.len()` bytes;
    // AWS-LC writes at most `ss_out` bytes and stores the count.
    let ok = unsafe { sys::EVP_PKEY_decapsulate(ctx.0, ss.as_mut_ptr(), &mut ss_out, ct.as_ptr(), ct.len()) };
    if ok != 1 || ss_out != MLKEM_SHARED {
        return refused(Error::Internal { what: "" }).ok();
    }
    Some(ss)
}

/// An owned BIGNUM, cleared and freed on drop (it may hold a secret).
struct Bn(*mut sys::BIGNUM);

impl Bn {
    /// Reads an unsigned big-endian integer.
    fn from_be(bytes: &[u8]) -> Result<Self> {
        // SAFETY: `bytes` is a live slice of `bytes.len()` bytes; a null `ret` asks for a new
        // BIGNUM, which the caller (this wrapper) then owns. Null means allocation failed.
        let p = unsafe { sys::BN_bin2bn(bytes.as_ptr(), bytes.len(), core::ptr::null_mut()) };
        non_null(p, "AWS-LC BIGNUM allocation").map(Self)
    }

    fn new() -> Result<Self> {
        // SAFETY: no arguments; returns a new BIGNUM the caller owns, or null.
        non_null(unsafe { sys::BN_new() }, "AWS-LC BIGNUM allocation").map(Self)
    }
}

/// A pointer AWS-LC returned, or the allocation failure its null means.
fn non_null<T>(p: *mut T, what: &'static str) -> Result<*mut T> {
    if p.is_null() {
        Err(Error::Internal { what })
    } else {
        Ok(p)
    }
}

impl Drop for Bn {
    fn drop(&mut self) {
        // SAFETY: the pointer came from BN_new/BN_bin2bn, is owned by this value alone and
        // is freed exactly once, here. BN_clear_free zeroes its words before freeing them.
        unsafe { sys::BN_clear_free(self.0) }
    }
}

/// A scratch BN_CTX, freed on drop.
struct Ctx(*mut sys::BN_CTX);

impl Ctx {
    fn new() -> Result<Self> {
        // SAFETY: no arguments; returns a new BN_CTX the caller owns, or null.
        non_null(unsafe { sys::BN_CTX_new() }, "AWS-LC BN_CTX allocation").map(Self)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: owned, freed once. Its temporaries were BIGNUMs of the exponentiation;
        // AWS-LC frees their words through OPENSSL_free, which cleanses them.
        unsafe { sys::BN_CTX_free(self.0) }
    }
}

/// An odd public modulus with its Montgomery context, built once and then only read.
pub(crate) struct Modulus {
    p: Bn,
    mont: *mut sys::BN_MONT_CTX,
    len: usize,
}

// SAFETY: after `new` nothing writes to `p` or `mont`: BN_mod_exp_mont_consttime takes both
// as `const` and keeps its scratch in the per-call BN_CTX, so concurrent readers are fine,
// and the owned pointers may move between threads.
unsafe impl Send for Modulus {}
// SAFETY: as above, shared use is read-only.
unsafe impl Sync for Modulus {}

impl Modulus {
    /// Takes the big-endian modulus (odd, as every MODP prime is).
    pub(crate) fn new(p_be: &[u8]) -> Result<Self> {
        let p = Bn::from_be(p_be)?;
        let ctx = Ctx::new()?;
        // SAFETY: `p` and `ctx` are valid for the call; the result is a new context the
        // caller owns, or null (also for an even modulus).
        let mont = unsafe { sys::BN_MONT_CTX_new_for_modulus(p.0, ctx.0) };
        let mont = non_null(mont, "AWS-LC Montgomery context")?;
        Ok(Self { p, mont, len: p_be.len() })
    }

    /// `base^exp mod p` in constant time (AWS-LC's `BN_mod_exp_mont_consttime`: the
    /// sequence of operations and memory accesses depends only on the exponent's length in
    /// words), written big-endian and zero-padded to the modulus length into `out`.
    /// `base` must be below p (the caller range-checks peer values first).
    pub(crate) fn pow(&self, base_be: &[u8], exp_be: &Zeroizing<[u8; 64]>, out: &mut [u8]) -> Result<()> {
        if out.len() != self.len {
            return Err(Error::Internal { what: "MODP output length" });
        }
        let base = Bn::from_be(base_be)?;
        let exp = Bn::from_be(&exp_be[..])?;
        let r = Bn::new()?;
        let ctx = Ctx::new()?;
        // SAFETY: every pointer is valid and owned for the call; `r` is the only one written.
        // `base < p` is the function's precondition (else it fails, returning 0).
        let ok = unsafe { sys::BN_mod_exp_mont_consttime(r.0, base.0, exp.0, self.p.0, ctx.0, self.mont) };
        if ok != 1 {
            return Err(Error::Internal { what: "MODP exponentiation" });
        }
        // SAFETY: `out` has `out.len()` writable bytes; 0 means r does not fit (it cannot,
        // being below p, whose length `out` has).
        let ok = unsafe { sys::BN_bn2bin_padded(out.as_mut_ptr(), out.len(), r.0) };
        if ok != 1 {
            return Err(Error::Internal { what: "MODP encoding" });
        }
        Ok(())
    }
}

impl Drop for Modulus {
    fn drop(&mut self) {
        // SAFETY: `mont` came from BN_MONT_CTX_new_for_modulus, is owned here and freed once.
        unsafe { sys::BN_MONT_CTX_free(self.mont) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7748 §5.2, the second X25519 test vector (§6.1 and RFC 8031 are in `vectors.rs`).
    #[test]
    fn x25519_rfc7748_vector() {
        let k = hex_literal::hex!("4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d");
        let u = hex_literal::hex!("e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493");
        let want = hex_literal::hex!("95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957");
        assert_eq!(*x25519(&k, &u).unwrap_or_default(), want);
    }

    /// A low-order point (u = 0) gives an all-zero secret, which is refused.
    #[test]
    fn x25519_refuses_all_zero_results() {
        assert!(x25519(&[9u8; 32], &[0u8; 32]).is_none());
    }

    /// Small exponentiations against plain arithmetic, with a modulus needing padding.
    #[test]
    fn pow_matches_small_arithmetic() -> Result<()> {
        let m = Modulus::new(&[0x00, 0x00, 0xf1])?; // 241, prime, written in 3 bytes
        for (b, e) in [(2u8, 5u8), (3, 0), (240, 7), (17, 200)] {
            let mut exp = Zeroizing::new([0u8; 64]);
            exp[63] = e;
            let mut out = [0u8; 3];
            m.pow(&[b], &exp, &mut out)?;
            let want = (0..e).fold(1u32, |acc, _| acc * u32::from(b) % 241);
            assert_eq!(u32::from(out[2]), want, "{b}^{e}");
            assert_eq!(out[..2], [0, 0]);
        }
        let mut short = [0u8; 2];
        assert!(m.pow(&[2], &Zeroizing::new([0u8; 64]), &mut short).is_err());
        Ok(())
    }
}
