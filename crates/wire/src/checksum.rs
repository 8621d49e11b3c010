//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums here are folded one's-complement sums, not yet complemented: a header's checksum
//! field holds `!combine(...)`, and a received header is intact when the sum over it,
//! checksum field included, is `0xffff`.

/// Folds a wide accumulator of 16-bit one's-complement sums into 16 bits (RFC 1071 §2(C)).
#[inline]
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let [.., hi, lo] = sum.to_be_bytes();
    u16::from_be_bytes([hi, lo])
}

/// The folded one's-complement sum of `data` as big-endian 16-bit words, an odd last byte
/// padded with a zero byte (RFC 1071 §4.1).
#[inline]
pub fn data(data: &[u8]) -> u16 {
    // Summing wider words and folding later gives the same result as 16-bit words (RFC 1071
    // §2(C), "parallel summation"). Eight bytes per step: the two 32-bit halves of each word
    // are added to a u64, which cannot overflow below 16 GiB of input; an IPv4 header is
    // two steps and a tail word, with no loop left after inlining.
    let mut sum = 0u64;
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        if let Ok(w) = <[u8; 8]>::try_from(word) {
            let w = u64::from_be_bytes(w);
            sum += (w >> 32) + (w & 0xffff_ffff);
        }
    }
    let mut tail = words.remainder();
    if let [a, b, c, d, rest @ ..] = tail {
        sum += u64::from(u32::from_be_bytes([*a, *b, *c, *d]));
        tail = rest;
    }
    sum += match *tail {
        [a, b, c] => u64::from(u32::from_be_bytes([a, b, c, 0])),
        [a, b] => u64::from(u16::from_be_bytes([a, b])),
        [a] => u64::from(u16::from_be_bytes([a, 0])),
        _ => 0,
    };
    fold(sum)
}

/// [`data`] of an IPv4 header without options, as five 32-bit words: what the per-packet
/// paths check, where the general [`data`] was not inlined and cost twice as much.
#[inline(always)]
pub fn ipv4_header(h: &[u8; 20]) -> u16 {
    let w = |i: usize| u64::from(u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    fold(w(0) + w(4) + w(8) + w(12) + w(16))
}

/// [`update`] for changed 16-bit words given as numbers: `old` words replaced by `new`
/// ones (as many), RFC 1624 eqn. 3.
#[inline(always)]
pub fn update_words<const N: usize>(checksum: u16, old: [u16; N], new: [u16; N]) -> u16 {
    let sum = |ws: [u16; N]| fold(ws.iter().map(|&w| u64::from(w)).sum());
    update_sums(checksum, sum(old), sum(new))
}

/// Adds folded sums, e.g. a pseudo-header sum and a message sum (RFC 1071 §2(A)).
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&sum| u64::from(sum)).sum())
}

/// The checksum field value for a message whose folded sum (with the field zeroed) is `sum`.
pub fn finish(sum: u16) -> u16 {
    !sum
}

/// Updates `checksum` after a field changed from `old` to `new` without re-reading the
/// message, by RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`.
///
/// `old` and `new` must be the same length and start at an even offset of the covered data
/// (an address, a TTL/protocol word); eqn. 3 avoids the `-0` result of RFC 1141's eqn. 2.
#[inline]
pub fn update(checksum: u16, old: &[u8], new: &[u8]) -> u16 {
    update_sums(checksum, data(old), data(new))
}

/// RFC 1624 eqn. 3 on the folded sums of the old and the new fields.
#[inline(always)]
fn update_sums(checksum: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!checksum) + u64::from(!old) + u64::from(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn sum_matches_rfc1071_example() {
        // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(data(&hex!("0001 f203 f4f5 f6f7")), 0xddf2);
    }

    #[test]
    fn odd_length_pads_last_byte_with_zero() {
        assert_eq!(data(&hex!("0001 f203 f4f5 f6")), data(&hex!("0001 f203 f4f5 f600")));
        assert_eq!(data(&hex!("ab")), 0xab00);
        assert_eq!(data(&[]), 0);
    }

    #[test]
    fn every_length_matches_a_plain_16_bit_sum() {
        // The word-wise sum against the RFC 1071 definition, for every length and offset of
        // a tail an 8-byte step can leave.
        let bytes: Vec<u8> = (0u8..77).map(|i| i.wrapping_mul(151) ^ (i >> 2)).collect();
        for len in 0..=bytes.len() {
            let slice = &bytes[..len];
            let mut sum = 0u64;
            for pair in slice.chunks(2) {
                sum += u64::from(u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(u64::from(data(slice)), sum, "length {len}");
        }
    }

    #[test]
    fn the_ipv4_header_sum_is_the_general_one() {
        let mut h = hex!("4500 0054 1c46 4000 4001 b1e6 c612 0001 c613 0001");
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            // xorshift32; every eighth byte written is all ones, so the folds carry.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let [k, v, ..] = x.to_le_bytes();
            h[usize::from(k) % 20] = if v & 7 == 0 { 0xff } else { v };
            assert_eq!(ipv4_header(&h), data(&h), "{h:02x?}");
        }
        assert_eq!(ipv4_header(&[0xff; 20]), 0xffff);
    }

    #[test]
    fn word_update_is_the_byte_update() {
        let (hc, old, new) = (0xdd2f, [0x5555u16, 0x1234], [0x3285u16, 0xfffe]);
        let bytes = |w: [u16; 2]| [w[0].to_be_bytes(), w[1].to_be_bytes()].concat();
        assert_eq!(update_words(hc, old, new), update(hc, &bytes(old), &bytes(new)));
        assert_eq!(update_words(0xdd2f, [0x5555], [0x3285]), 0x0000);
    }

    #[test]
    fn sum_of_all_ones_stays_all_ones() {
        assert_eq!(data(&[0xff; 64]), 0xffff);
        assert_eq!(combine(&[0xffff, 0xffff, 0x0001]), 0x0001);
    }

    #[test]
    fn incremental_update_matches_rfc1624_example() {
        // RFC 1624 §4: m = 0x5555 changes to m' = 0x3285 under HC = 0xdd2f; eqn. 3 gives 0.
        assert_eq!(update(0xdd2f, &hex!("5555"), &hex!("3285")), 0x0000);
    }

    #[test]
    fn incremental_update_matches_recomputation() {
        // An IPv4 header (RFC 791) whose source address is rewritten.
        let mut header = hex!("4500 0054 1c46 4000 4001 0000 c612 0001 c613 0001");
        let old = finish(data(&header));
        header[10..12].copy_from_slice(&old.to_be_bytes());
        header[12..16].copy_from_slice(&hex!("c612 00fe"));
        let updated = update(old, &hex!("c612 0001"), &hex!("c612 00fe"));
        header[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(updated, finish(data(&header)));
    }
}
