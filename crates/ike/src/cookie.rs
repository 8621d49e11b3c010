//! Stateless cookies (RFC 7296 §2.6) against floods of half-open IKE SAs.
//!
//! `Cookie = <VersionIDofSecret> | SHA-256(secret | Ni | IPi | SPIi)`: one version octet and
//! 32 octets of hash. The secret is responder-local DoS protection, not a tenant key; it is
//! drawn from the enclave's random generator and replaced every [`SECRET_LIFETIME`]; a
//! cookie made with the previous secret is still accepted.

use core::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long one secret makes cookies.
pub(crate) const SECRET_LIFETIME: Duration = Duration::from_secs(120);

/// The responder's cookie secrets.
pub(crate) struct CookieJar {
    /// The current secret, its version and when it was made.
    current: Option<([u8; 32], u8, Instant)>,
    /// The previous secret and its version.
    previous: Option<([u8; 32], u8)>,
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CookieJar(..)")
    }
}

impl CookieJar {
    /// No secret yet.
    pub(crate) fn new() -> Self {
        Self { current: None, previous: None }
    }

    /// Rotates the secret when due, with fresh random bytes from `random`.
    pub(crate) fn refresh(&mut self, now: Instant, random: impl FnOnce(&mut [u8]) -> bool) {
        let due = match self.current {
            None => true,
            Some((_, _, made)) => now.saturating_duration_since(made) >= SECRET_LIFETIME,
        };
        if !due {
            return;
        }
        let mut secret = [0u8; 32];
        if !random(&mut secret) {
            return;
        }
        let version = self.current.map_or(0, |(_, v, _)| v.wrapping_add(1));
        self.previous = self.current.map(|(s, v, _)| (s, v));
        self.current = Some((secret, version, now));
    }

    /// The cookie for an initiator, or `None` before the first secret.
    pub(crate) fn make(&self, nonce_i: &[u8], ip_i: IpAddr, spi_i: u64) -> Option<Vec<u8>> {
        let (secret, version, _) = self.current?;
        Some(cookie(&secret, version, nonce_i, ip_i, spi_i))
    }

    /// Whether a returned cookie is one of ours for this initiator.
    pub(crate) fn check(&self, cookie_data: &[u8], nonce_i: &[u8], ip_i: IpAddr, spi_i: u64) -> bool {
        let Some(&version) = cookie_data.first() else { return false };
        let candidates = self.current.map(|(s, v, _)| (s, v)).into_iter().chain(self.previous);
        candidates
            .filter(|(_, v)| *v == version)
            .any(|(s, v)| constant_time_eq(&cookie(&s, v, nonce_i, ip_i, spi_i), cookie_data))
    }
}

/// One cookie.
fn cookie(secret: &[u8; 32], version: u8, nonce_i: &[u8], ip_i: IpAddr, spi_i: u64) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(secret);
    h.update(nonce_i);
    match ip_i {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    h.update(spi_i.to_be_bytes());
    let mut out = Vec::with_capacity(33);
    out.push(version);
    out.extend_from_slice(&h.finalize());
    out
}

/// Compares without an early exit.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_verify_for_the_same_initiator_only_and_survive_one_rotation() {
        let t0 = Instant::now();
        let mut jar = CookieJar::new();
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        assert_eq!(jar.make(b"nonce", ip, 1), None);
        jar.refresh(t0, |b| {
            b.fill(7);
            true
        });
        let c = jar.make(b"nonce", ip, 1).unwrap();
        assert_eq!(c.len(), 33);
        assert!(jar.check(&c, b"nonce", ip, 1));
        assert!(!jar.check(&c, b"other", ip, 1));
        assert!(!jar.check(&c, b"nonce", "198.18.0.2".parse().unwrap(), 1));
        assert!(!jar.check(&c, b"nonce", ip, 2));
        assert!(!jar.check(&[], b"nonce", ip, 1));
        jar.refresh(t0 + SECRET_LIFETIME, |b| {
            b.fill(9);
            true
        });
        assert!(jar.check(&c, b"nonce", ip, 1), "previous secret still accepted");
        jar.refresh(t0 + 2 * SECRET_LIFETIME, |b| {
            b.fill(11);
            true
        });
        assert!(!jar.check(&c, b"nonce", ip, 1), "two rotations later it is stale");
        assert_eq!(format!("{jar:?}"), "CookieJar(..)");
    }
}
