//! Float-to-integer conversions with their ranges made explicit.

/// Largest value the conversions return: far above any node, tunnel or minute count.
const LIMIT: f64 = 4.0e9;

/// `⌈x⌉` as a count, clamped to `[0, 4e9]` (NaN gives 0).
#[allow(clippy::cast_possible_truncation)] // Clamped first: the cast is exact.
pub(crate) fn ceil_count(x: f64) -> usize {
    let c = x.ceil();
    if c.is_nan() || c <= 0.0 {
        0
    } else {
        c.min(LIMIT) as usize
    }
}

/// `⌊x⌋` as an index, clamped to `[0, 4e9]` (NaN gives 0).
#[allow(clippy::cast_possible_truncation)] // Clamped first: the cast is exact.
pub(crate) fn floor_index(x: f64) -> usize {
    let f = x.floor();
    if f.is_nan() || f <= 0.0 {
        0
    } else {
        f.min(LIMIT) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_clamp() {
        assert_eq!(ceil_count(2.1), 3);
        assert_eq!(ceil_count(2.0), 2);
        assert_eq!(ceil_count(-1.0), 0);
        assert_eq!(ceil_count(f64::NAN), 0);
        assert_eq!(ceil_count(1e300), 4_000_000_000);
        assert_eq!(floor_index(2.9), 2);
        assert_eq!(floor_index(-0.5), 0);
    }
}
