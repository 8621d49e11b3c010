//! MODP Diffie-Hellman (RFC 3526 groups 14 and 15): g^x on `crypto-bigint`'s constant-time
//! Montgomery arithmetic with a fixed-base table, y^x (the agreement) on AWS-LC's
//! constant-time exponentiation (`awslc.rs`).
//!
//! Two costs dominated a MODP-3072 exchange before this module cached them: the Montgomery
//! parameters (R² mod p needs a 3072-bit division, about a quarter of one exponentiation)
//! were rebuilt on every call, and g^x ran a generic square-and-multiply although g = 2 is
//! fixed. Each group's parameters and a fixed-base table are now built once per process, on
//! first use: g^x then takes one multiplication per 4-bit window of x and no squaring. The
//! variable-base y^x still needs a squaring per exponent bit, which AWS-LC's assembly does
//! about 2.5 times faster than `crypto-bigint`.

use super::awslc::Modulus;
use crypto_bigint::modular::runtime_mod::{DynResidue, DynResidueParams};
use crypto_bigint::subtle::{ConditionallySelectable, ConstantTimeEq};
use crypto_bigint::{Uint, Word, U2048, U3072, U512};
use enclave_api::alg::DhGroup;
use enclave_api::error::{Error, Result};
use std::sync::OnceLock;
use zeroize::Zeroizing;

/// RFC 3526 §3, the 2048-bit MODP group's prime; generator 2.
const P2048: U2048 = U2048::from_be_hex(concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
));

/// RFC 3526 §4, the 3072-bit MODP group's prime; generator 2.
const P3072: U3072 = U3072::from_be_hex(concat!(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74",
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437",
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED",
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05",
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB",
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B",
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718",
    "3995497CEA956AE515D2261898FA051015728E5A8AAAC42DAD33170D04507A33",
    "A85521ABDF1CBA64ECFB850458DBEF0A8AEA71575D060C7DB3970F85A6E1E4C7",
    "ABF5AE8CDB0933D71E8C94E04A25619DCEE3D2261AD2EE6BF12FFA06D98A0864",
    "D87602733EC86A64521F2B18177B200CBBE117577A615D6C770988C0BAD946E2",
    "08E24FA074E5AB3143DB5BFCE0FD108E4B82D120A93AD2CAFFFFFFFFFFFFFFFF",
));

/// Private exponent size for the MODP groups: 512 bits, twice the 256-bit strength the
/// largest group here could offer and well over 2x its real strength (RFC 3526 §8,
/// SP 800-56A 5.6.1.1.1). The exponentiation's time depends only on this bound.
const EXPONENT_BITS: usize = 512;

/// Bits of the exponent one fixed-base table row covers.
const WINDOW: usize = 4;
/// Rows of the fixed-base table: one per window of a private exponent.
const ROWS: usize = EXPONENT_BITS / WINDOW;

/// One group's precomputation: public values only (p, R, R², and powers of g).
struct Group<const L: usize> {
    params: DynResidueParams<L>,
    /// `rows[i][j]` = g^(j·16^i) in Montgomery form.
    rows: Vec<[Uint<L>; 1 << WINDOW]>,
    /// p for AWS-LC; `None` only if building it failed (allocation), refused at use.
    modulus: Option<Modulus>,
}

impl<const L: usize> Group<L> {
    /// Builds the table: 128 × 16 multiplications, a few milliseconds, once per process.
    fn build(p: &Uint<L>) -> Self {
        let params = DynResidueParams::new(p);
        let one = DynResidue::one(params);
        let mut base = DynResidue::new(&Uint::<L>::from_u8(2), params);
        let mut rows = Vec::with_capacity(ROWS);
        for _ in 0..ROWS {
            let mut row = [Uint::<L>::ZERO; 1 << WINDOW];
            let mut power = one;
            for slot in row.iter_mut() {
                *slot = *power.as_montgomery();
                power *= base;
            }
            // After the loop `power` is base^16, the next row's base.
            rows.push(row);
            base = power;
        }
        let mut p_be = vec![0u8; L * 8];
        let modulus = write_be(p, &mut p_be).and_then(|()| Modulus::new(&p_be).ok());
        Self { params, rows, modulus }
    }

    /// g^x for a private `x`. Every row is read whole and multiplied in, whatever the window
    /// holds (a zero window multiplies by one), so neither time nor memory access depends on x.
    fn pow_g(&self, x: &U512) -> Zeroizing<Uint<L>> {
        let words = x.as_words();
        let word_bits = Word::BITS as usize;
        let mut acc = DynResidue::one(self.params);
        for (i, row) in self.rows.iter().enumerate() {
            let bit = i * WINDOW;
            // WINDOW divides the word size, so a window never straddles two words.
            let window: Word = words.get(bit / word_bits).map_or(0, |w| (w >> (bit % word_bits)) & 0xf);
            let mut chosen = Uint::<L>::ZERO;
            for (entry, j) in row.iter().zip(0 as Word..) {
                chosen.conditional_assign(entry, window.ct_eq(&j));
            }
            acc *= DynResidue::from_montgomery(chosen, self.params);
        }
        Zeroizing::new(acc.retrieve())
    }

    /// y^x into `out` (big-endian, the group's length) for a public `y` below p and a
    /// private `x`.
    fn pow(&self, y_be: &[u8], x: &U512, out: &mut [u8]) -> Result<()> {
        let modulus = self.modulus.as_ref().ok_or(Error::Internal { what: "MODP modulus" })?;
        let mut x_be = Zeroizing::new([0u8; EXPONENT_BITS / 8]);
        write_be(x, &mut x_be[..]).ok_or(Error::Internal { what: "MODP exponent encoding" })?;
        modulus.pow(y_be, &x_be, out)
    }

    /// Agrees with the peer's public value after the range check.
    fn agree(&self, x: &U512, peer: &[u8], out: &mut [u8], group: DhGroup) -> Result<()> {
        let bad = Error::BadPeerPublicValue { group };
        if peer.len() != L * 8 {
            return Err(bad);
        }
        // Length checked above, so `from_be_slice` cannot panic.
        let y = Uint::<L>::from_be_slice(peer);
        let p_minus_1 = self.params.modulus().wrapping_sub(&Uint::<L>::ONE);
        if y <= Uint::<L>::ONE || y >= p_minus_1 {
            return Err(bad);
        }
        self.pow(peer, x, out)
    }
}

fn group14() -> &'static Group<{ U2048::LIMBS }> {
    static G: OnceLock<Group<{ U2048::LIMBS }>> = OnceLock::new();
    G.get_or_init(|| Group::build(&P2048))
}

fn group15() -> &'static Group<{ U3072::LIMBS }> {
    static G: OnceLock<Group<{ U3072::LIMBS }>> = OnceLock::new();
    G.get_or_init(|| Group::build(&P3072))
}

/// Writes g^x, big-endian and zero-padded to the group's length, to `out`.
pub(crate) fn public_value(group: DhGroup, x: &U512, out: &mut [u8]) -> Option<()> {
    match group {
        DhGroup::Modp2048 => write_be(&group14().pow_g(x), out),
        DhGroup::Modp3072 => write_be(&group15().pow_g(x), out),
        _ => None,
    }
}

/// Writes g^xy for the peer's public value g^y to `out` (the group's length), after checking
/// 1 < g^y < p-1: enough for these safe primes, whose only small subgroup is {1, p-1}
/// (RFC 7296 §3.4, SP 800-56A 5.6.2.3.1).
pub(crate) fn agree(group: DhGroup, x: &U512, peer: &[u8], out: &mut [u8]) -> Result<()> {
    match group {
        DhGroup::Modp2048 => group14().agree(x, peer, out, group),
        DhGroup::Modp3072 => group15().agree(x, peer, out, group),
        _ => Err(Error::Internal { what: "MODP agreement on a non-MODP group" }),
    }
}

/// Big-endian bytes of `v`, exactly `L * 8` of them (zero-padded: RFC 7296 §2.14).
fn write_be<const L: usize>(v: &Uint<L>, out: &mut [u8]) -> Option<()> {
    if out.len() != L * 8 {
        return None;
    }
    // Words are least significant first.
    for (chunk, word) in out.chunks_exact_mut(8).rev().zip(v.as_words().iter()) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::digest::{digest, SHA256};

    fn exponents() -> Vec<U512> {
        let mut xs = vec![U512::ZERO, U512::ONE, U512::from_u8(15), U512::from_u8(16), U512::MAX];
        // A fixed pseudo-random walk: every window value appears in every row position.
        let mut x = U512::from_be_hex(concat!(
            "0123456789abcdeffedcba98765432100f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "55aa55aa00ff00ff3c3c3c3cc3c3c3c3deadbeefcafef00d0badf00d8badf00d",
        ));
        for _ in 0..12 {
            xs.push(x);
            x = x
                .wrapping_mul(&U512::from_u64(0x9e37_79b9_7f4a_7c15))
                .wrapping_add(&U512::from_u64(0x2545_f491));
        }
        xs
    }

    /// The table gives what AWS-LC's exponentiation gives for base 2, and AWS-LC gives what
    /// `crypto-bigint`'s generic square-and-multiply gives for another base: two independent
    /// implementations checked against each other.
    fn table_matches_generic<const L: usize>(g: &Group<L>) -> Result<()> {
        let length = || Error::Internal { what: "length" };
        let mut two = vec![0u8; L * 8];
        two[L * 8 - 1] = 2;
        let y = g.params.modulus().wrapping_sub(&Uint::<L>::from_u64(0x1234_5678_9abc_def1));
        let mut y_be = vec![0u8; L * 8];
        write_be(&y, &mut y_be).ok_or_else(length)?;
        let (mut a, mut b) = (vec![0u8; L * 8], vec![0u8; L * 8]);
        for x in exponents() {
            write_be(&g.pow_g(&x), &mut a).ok_or_else(length)?;
            g.pow(&two, &x, &mut b)?;
            assert_eq!(a, b, "2^{x}");
            let want = DynResidue::new(&y, g.params).pow_bounded_exp(&x, EXPONENT_BITS).retrieve();
            write_be(&want, &mut a).ok_or_else(length)?;
            g.pow(&y_be, &x, &mut b)?;
            assert_eq!(a, b, "y^{x}");
        }
        Ok(())
    }

    #[test]
    fn fixed_base_table_matches_generic_exponentiation() -> Result<()> {
        table_matches_generic(group14())?;
        table_matches_generic(group15())
    }

    /// Expected digests from an independent computation: Python's `pow(2, x, p)` on the
    /// RFC 3526 primes, big-endian, padded to the group length.
    #[test]
    fn public_values_match_an_independent_computation() -> Result<()> {
        let x = U512::from_be_hex(concat!(
            "0123456789abcdeffedcba98765432100f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "55aa55aa00ff00ff3c3c3c3cc3c3c3c3deadbeefcafef00d0badf00d8badf00d",
        ));
        for (group, want) in [(DhGroup::Modp2048, DIGEST_2048), (DhGroup::Modp3072, DIGEST_3072)] {
            let mut out = vec![0u8; group.public_len()];
            public_value(group, &x, &mut out).ok_or(Error::Internal { what: "length" })?;
            assert_eq!(hex(digest(&SHA256, &out).as_ref()), want, "{group:?}");
        }
        Ok(())
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|v| format!("{v:02x}")).collect()
    }

    const DIGEST_2048: &str = "db7bea50b2458086aced76e8e8e2c81e0925743ecae40a599fa9d7e21e4b0285";
    const DIGEST_3072: &str = "ab36645a006315e7b9e75a053f54217566bf239253d768cc27cf369e7e26e89a";
}
