//! Ephemeral key exchanges for IKEv2: MODP 14/15 (RFC 3526), ECP 19/20 (RFC 5903),
//! Curve25519 (RFC 8031), and the ML-KEM-768/1024 KEMs (FIPS 203, RFC 9370's additional
//! key exchanges), whose initiator holds a decapsulation key and whose responder holds the
//! secret it encapsulated to the initiator's key.
//!
//! The ECP groups use RustCrypto's `p256`/`p384`, whose secret types zeroize on drop and,
//! unlike ring's one-shot agreement API, can be built from a known private value so the
//! published vectors (RFC 5903, RFC 7748, Wycheproof) drive the very code IKE uses. X25519
//! and the MODP agreement call AWS-LC's raw functions (`awslc.rs`) on private values kept in
//! this crate's zeroizing buffers, for the same reason and for speed; MODP's g^x uses a
//! fixed-base table on `crypto-bigint` (`modp.rs`).

use super::awslc::{self, MlKem};
use super::keybuf::KeyBuf;
use super::modp;
use crypto_bigint::U512;
use enclave_api::alg::DhGroup;
use enclave_api::error::{Error, Result};
use ring::rand::{SecureRandom, SystemRandom};
use zeroize::Zeroizing;

/// Largest shared secret (MODP-3072).
pub(crate) const MAX_SHARED_LEN: usize = 384;

/// g^ir, big-endian, zeroized on drop.
pub(crate) type SharedSecret = KeyBuf<MAX_SHARED_LEN>;

/// An ephemeral private value. No `Clone`, no `Debug`; every variant zeroizes on drop.
pub(crate) enum DhSecret {
    Modp2048(Zeroizing<U512>),
    Modp3072(Zeroizing<U512>),
    P256(p256::SecretKey),
    P384(p384::SecretKey),
    /// The raw scalar; AWS-LC clamps it at each use (RFC 7748 §5).
    X25519(Zeroizing<[u8; 32]>),
    /// ML-KEM, initiator: the decapsulation key (which holds the encapsulation key).
    MlKemDecaps(MlKem, Zeroizing<Vec<u8>>),
    /// ML-KEM, responder: the secret encapsulated to the initiator's key, whose digest the
    /// agreement must be given again.
    MlKemEncapsulated {
        kem: MlKem,
        peer: [u8; 32],
        shared: Zeroizing<[u8; 32]>,
    },
}

fn kem_of(group: DhGroup) -> Option<MlKem> {
    match group {
        DhGroup::MlKem768 => Some(MlKem::MlKem768),
        DhGroup::MlKem1024 => Some(MlKem::MlKem1024),
        _ => None,
    }
}

fn kem_group(kem: MlKem) -> DhGroup {
    match kem {
        MlKem::MlKem768 => DhGroup::MlKem768,
        MlKem::MlKem1024 => DhGroup::MlKem1024,
    }
}

impl DhSecret {
    pub(crate) fn group(&self) -> DhGroup {
        match self {
            Self::Modp2048(_) => DhGroup::Modp2048,
            Self::Modp3072(_) => DhGroup::Modp3072,
            Self::P256(_) => DhGroup::EcpP256,
            Self::P384(_) => DhGroup::EcpP384,
            Self::X25519(_) => DhGroup::Curve25519,
            Self::MlKemDecaps(kem, _) | Self::MlKemEncapsulated { kem, .. } => kem_group(*kem),
        }
    }

    /// Generates a private value from the CSPRNG and writes the public value to `public_out`
    /// (exactly `group.public_len()` bytes); for a KEM, a key pair and its encapsulation key.
    pub(crate) fn generate(group: DhGroup, rng: &SystemRandom, public_out: &mut [u8]) -> Result<Self> {
        if public_out.len() != group.public_len() {
            return Err(Error::BadLength {
                what: "DH public value output",
                len: public_out.len(),
                why: "must be the group's public value length",
            });
        }
        if let Some(kem) = kem_of(group) {
            let mut seed = Zeroizing::new([0u8; 64]);
            rng.fill(&mut seed[..]).map_err(|_| Error::Random)?;
            let (ek, dk) = awslc::mlkem_keygen(kem, &seed)?;
            public_out.copy_from_slice(&ek);
            return Ok(Self::MlKemDecaps(kem, dk));
        }
        let secret = Self::random(group, rng)?;
        secret.public_value(public_out)?;
        Ok(secret)
    }

    /// The responder's value for the initiator's `peer` (see `Enclave::ke_respond`): a fresh
    /// DH private value, or the encapsulation to the initiator's key; writes what the
    /// responder sends to `public_out` (exactly `group.response_len()` bytes).
    pub(crate) fn respond(
        group: DhGroup,
        peer: &[u8],
        rng: &SystemRandom,
        public_out: &mut [u8],
    ) -> Result<Self> {
        let Some(kem) = kem_of(group) else {
            return Self::generate(group, rng, public_out);
        };
        if public_out.len() != group.response_len() {
            return Err(Error::BadLength {
                what: "KEM ciphertext output",
                len: public_out.len(),
                why: "must be the KEM's ciphertext length",
            });
        }
        let mut m = Zeroizing::new([0u8; 32]);
        rng.fill(&mut m[..]).map_err(|_| Error::Random)?;
        let (ct, shared) =
            awslc::mlkem_encapsulate(kem, peer, &m).ok_or(Error::BadPeerPublicValue { group })?;
        public_out.copy_from_slice(&ct);
        Ok(Self::MlKemEncapsulated { kem, peer: super::transcript::digest(peer), shared })
    }

    fn random(group: DhGroup, rng: &SystemRandom) -> Result<Self> {
        let mut seed = Zeroizing::new([0u8; 64]);
        // Retry loops: each attempt fails with probability < 2^-32, so they end at once.
        for _ in 0..16 {
            rng.fill(&mut seed[..]).map_err(|_| Error::Random)?;
            let candidate = match group {
                DhGroup::Modp2048 | DhGroup::Modp3072 => {
                    let x = Zeroizing::new(U512::from_be_slice(&seed[..]));
                    if bool::from(crypto_bigint::Zero::is_zero(&*x)) {
                        continue;
                    }
                    if group == DhGroup::Modp2048 {
                        Self::Modp2048(x)
                    } else {
                        Self::Modp3072(x)
                    }
                }
                DhGroup::EcpP256 => match p256::SecretKey::from_slice(&seed[..32]) {
                    Ok(k) => Self::P256(k),
                    Err(_) => continue,
                },
                DhGroup::EcpP384 => match p384::SecretKey::from_slice(&seed[..48]) {
                    Ok(k) => Self::P384(k),
                    Err(_) => continue,
                },
                DhGroup::Curve25519 => {
                    let mut b = Zeroizing::new([0u8; 32]);
                    b.copy_from_slice(&seed[..32]);
                    Self::X25519(b)
                }
                DhGroup::MlKem768 | DhGroup::MlKem1024 => return Err(Error::Internal { what: "KEM as DH" }),
            };
            return Ok(candidate);
        }
        Err(Error::Random)
    }

    /// Builds a private value from known bytes: for the known-answer self-tests and
    /// vector tests only, never reachable from the call surface.
    pub(crate) fn from_known_private(group: DhGroup, bytes: &[u8]) -> Result<Self> {
        let bad = Error::Internal { what: "known private value" };
        Ok(match group {
            DhGroup::Modp2048 | DhGroup::Modp3072 => {
                let mut b = [0u8; 64];
                let pad = 64usize.checked_sub(bytes.len()).ok_or(bad.clone())?;
                b[pad..].copy_from_slice(bytes);
                let x = Zeroizing::new(U512::from_be_slice(&b));
                if group == DhGroup::Modp2048 {
                    Self::Modp2048(x)
                } else {
                    Self::Modp3072(x)
                }
            }
            DhGroup::EcpP256 => Self::P256(p256::SecretKey::from_slice(bytes).map_err(|_| bad)?),
            DhGroup::EcpP384 => Self::P384(p384::SecretKey::from_slice(bytes).map_err(|_| bad)?),
            DhGroup::Curve25519 => {
                let b: [u8; 32] = bytes.try_into().map_err(|_| bad)?;
                Self::X25519(Zeroizing::new(b))
            }
            DhGroup::MlKem768 | DhGroup::MlKem1024 => return Err(bad),
        })
    }

    /// Writes the public value (IKE Key Exchange Data encoding).
    pub(crate) fn public_value(&self, out: &mut [u8]) -> Result<()> {
        let len = out.len();
        let bad_len = move || Error::BadLength {
            what: "DH public value output",
            len,
            why: "must be the group's public value length",
        };
        match self {
            Self::Modp2048(x) | Self::Modp3072(x) => {
                modp::public_value(self.group(), x, out).ok_or_else(bad_len)
            }
            Self::P256(k) => {
                let p = p256::elliptic_curve::sec1::ToEncodedPoint::to_encoded_point(&k.public_key(), false);
                // SEC1 uncompressed: 0x04 || x || y; IKE (RFC 5903 §7) drops the 0x04.
                copy_exact(p.as_bytes().get(1..).unwrap_or(&[]), out).ok_or_else(bad_len)
            }
            Self::P384(k) => {
                let p = p384::elliptic_curve::sec1::ToEncodedPoint::to_encoded_point(&k.public_key(), false);
                copy_exact(p.as_bytes().get(1..).unwrap_or(&[]), out).ok_or_else(bad_len)
            }
            Self::X25519(s) => copy_exact(&awslc::x25519_public(s), out).ok_or_else(bad_len),
            Self::MlKemDecaps(kem, dk) => {
                // FIPS 203 Algorithm 16: dk = dk_PKE || ek || H(ek) || z, dk_PKE 32 bytes
                // shorter than ek.
                let ek_len = kem.lengths().0;
                let ek = dk.get(ek_len - 32..2 * ek_len - 32).unwrap_or(&[]);
                copy_exact(ek, out).ok_or_else(bad_len)
            }
            // Its ciphertext went out once, when it was made (`respond`).
            Self::MlKemEncapsulated { .. } => Err(Error::Internal { what: "a KEM ciphertext is not kept" }),
        }
    }

    /// Agrees on g^ir with the peer's public value, consuming the private value.
    ///
    /// Peer checks: exact length; MODP 1 < y < p-1 (RFC 7296 §3.4 / SP 800-56A 5.6.2.3.1,
    /// enough for these safe primes: the only small subgroup is {1, p-1}); ECP a valid
    /// point on the curve, not the identity (RFC 5903 §7 / SP 800-56A 5.6.2.3.3); X25519
    /// a non-zero result (RFC 8031 §2, RFC 7748 §6.1).
    /// KEMs: the initiator decapsulates the responder's ciphertext (a wrong one of the
    /// right length yields FIPS 203's implicit-rejection secret, so the peer's AUTH fails);
    /// the responder's secret comes back only for the very key it was encapsulated to.
    pub(crate) fn agree(self, peer: &[u8]) -> Result<SharedSecret> {
        let group = self.group();
        let bad = Error::BadPeerPublicValue { group };
        let expect = match &self {
            Self::MlKemDecaps(..) => group.response_len(),
            _ => group.public_len(),
        };
        if peer.len() != expect {
            return Err(bad);
        }
        match self {
            Self::MlKemDecaps(kem, dk) => {
                let z = awslc::mlkem_decapsulate(kem, &dk, peer).ok_or(bad)?;
                SharedSecret::from_slice(&z[..])
            }
            Self::MlKemEncapsulated { peer: digest, shared, .. } => {
                if super::transcript::digest(peer) != digest {
                    return Err(bad);
                }
                SharedSecret::from_slice(&shared[..])
            }
            Self::Modp2048(x) | Self::Modp3072(x) => {
                let mut out = SharedSecret::zeroed(group.shared_len())?;
                modp::agree(group, &x, peer, out.as_mut())?;
                Ok(out)
            }
            Self::P256(k) => {
                let mut sec1 = [0u8; 65];
                sec1[0] = 0x04;
                sec1[1..].copy_from_slice(peer);
                let pk = p256::PublicKey::from_sec1_bytes(&sec1).map_err(|_| bad)?;
                let z = p256::ecdh::diffie_hellman(k.to_nonzero_scalar(), pk.as_affine());
                SharedSecret::from_slice(z.raw_secret_bytes())
            }
            Self::P384(k) => {
                let mut sec1 = [0u8; 97];
                sec1[0] = 0x04;
                sec1[1..].copy_from_slice(peer);
                let pk = p384::PublicKey::from_sec1_bytes(&sec1).map_err(|_| bad)?;
                let z = p384::ecdh::diffie_hellman(k.to_nonzero_scalar(), pk.as_affine());
                SharedSecret::from_slice(z.raw_secret_bytes())
            }
            Self::X25519(s) => {
                let peer: &[u8; 32] = peer.try_into().map_err(|_| bad.clone())?;
                let z = awslc::x25519(&s, peer).ok_or(bad)?;
                SharedSecret::from_slice(&z[..])
            }
        }
    }

    /// Bytes this value occupies (for accounting).
    pub(crate) fn footprint(&self) -> usize {
        core::mem::size_of::<Self>()
            + match self {
                Self::MlKemDecaps(_, dk) => dk.len(),
                _ => 0,
            }
    }
}

fn copy_exact(src: &[u8], out: &mut [u8]) -> Option<()> {
    (src.len() == out.len()).then(|| out.copy_from_slice(src))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(group: DhGroup) {
        let rng = SystemRandom::new();
        let mut pa = vec![0u8; group.public_len()];
        let mut pb = vec![0u8; group.public_len()];
        let a = DhSecret::generate(group, &rng, &mut pa).unwrap();
        let b = DhSecret::generate(group, &rng, &mut pb).unwrap();
        let za = a.agree(&pb).unwrap();
        let zb = b.agree(&pa).unwrap();
        assert_eq!(za.as_slice(), zb.as_slice());
        assert_eq!(za.len(), group.shared_len());
    }

    #[test]
    fn every_group_agrees_with_itself() {
        for g in
            [DhGroup::EcpP256, DhGroup::EcpP384, DhGroup::Curve25519, DhGroup::Modp2048, DhGroup::Modp3072]
        {
            pair(g);
        }
    }

    #[test]
    fn modp_refuses_degenerate_peer_values() {
        let rng = SystemRandom::new();
        for g in [DhGroup::Modp2048, DhGroup::Modp3072] {
            let n = g.public_len();
            let mut one = vec![0u8; n];
            one[n - 1] = 1;
            let mut p_minus_1 = vec![0xffu8; n];
            p_minus_1[n - 1] = 0xfe;
            for bad in [vec![0u8; n], one, p_minus_1, vec![0xff; n], vec![0u8; n - 1]] {
                let mut pubv = vec![0u8; n];
                let s = DhSecret::generate(g, &rng, &mut pubv).unwrap();
                assert_eq!(s.agree(&bad).err(), Some(Error::BadPeerPublicValue { group: g }));
            }
        }
    }

    #[test]
    fn ecp_refuses_points_off_the_curve_and_wrong_lengths() {
        let rng = SystemRandom::new();
        for g in [DhGroup::EcpP256, DhGroup::EcpP384, DhGroup::Curve25519] {
            let mut pubv = vec![0u8; g.public_len()];
            let s = DhSecret::generate(g, &rng, &mut pubv).unwrap();
            assert!(s.agree(&pubv[1..]).is_err());
        }
        let mut pubv = vec![0u8; 64];
        let s = DhSecret::generate(DhGroup::EcpP256, &rng, &mut pubv).unwrap();
        pubv[63] ^= 1;
        assert_eq!(s.agree(&pubv).err(), Some(Error::BadPeerPublicValue { group: DhGroup::EcpP256 }));
    }
}
