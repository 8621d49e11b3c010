//! ECN across the tunnel, RFC 6040 normal mode; DSCP is copied out and left alone in
//! (RFC 4301 §5.1.2.1, notes 5 and 6).

use wire::Ecn;

/// The outer ECN field for an inner one on encapsulation: normal mode copies it, CE included
/// (RFC 6040 §4.1).
pub fn encapsulated(inner: Ecn) -> Ecn {
    inner
}

/// The inner ECN field to forward after decapsulation, or `None` to drop (RFC 6040 §4.2,
/// Figure 4):
///
/// ```text
///            +---------+------------------------------------------------+
///            |Arriving |            Arriving Outer Header               |
///            |   Inner +---------+------------+------------+------------+
///            |  Header | Not-ECT | ECT(0)     | ECT(1)     |     CE     |
///            +---------+---------+------------+------------+------------+
///            | Not-ECT | Not-ECT |Not-ECT(!!!)|Not-ECT(!!!)| <drop>(!!!)|
///            |  ECT(0) |  ECT(0) | ECT(0)     | ECT(1)     |     CE     |
///            |  ECT(1) |  ECT(1) | ECT(1) (!) | ECT(1)     |     CE     |
///            |    CE   |      CE |     CE     |     CE(!!!)|     CE     |
///            +---------+---------+------------+------------+------------+
/// ```
pub fn decapsulated(inner: Ecn, outer: Ecn) -> Option<Ecn> {
    match (inner, outer) {
        (Ecn::NotEct, Ecn::Ce) => None,
        (Ecn::NotEct, _) => Some(Ecn::NotEct),
        (Ecn::Ce, _) | (_, Ecn::Ce) => Some(Ecn::Ce),
        (Ecn::Ect0, Ecn::Ect1) | (Ecn::Ect1, _) => Some(Ecn::Ect1),
        (Ecn::Ect0, _) => Some(Ecn::Ect0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decapsulation_follows_rfc6040_figure_4() {
        use Ecn::*;
        let outer = [NotEct, Ect0, Ect1, Ce];
        let table = [
            (NotEct, [Some(NotEct), Some(NotEct), Some(NotEct), None]),
            (Ect0, [Some(Ect0), Some(Ect0), Some(Ect1), Some(Ce)]),
            (Ect1, [Some(Ect1), Some(Ect1), Some(Ect1), Some(Ce)]),
            (Ce, [Some(Ce), Some(Ce), Some(Ce), Some(Ce)]),
        ];
        for (inner, row) in table {
            for (o, want) in outer.iter().zip(row) {
                assert_eq!(decapsulated(inner, *o), want, "inner {inner:?} outer {o:?}");
            }
        }
    }

    #[test]
    fn encapsulation_copies_every_codepoint() {
        for e in [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce] {
            assert_eq!(encapsulated(e), e);
        }
    }
}
