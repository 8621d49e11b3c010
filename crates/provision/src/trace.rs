//! Per-tunnel throughput traces: `tunnel,minute,mbps` CSV in and out.
//!
//! A trace holds, for every tunnel and every minute `0..minutes`, the tunnel's offered
//! throughput in Mbit/s (what the steering node measures before the data node, so demand, not
//! what an overloaded node managed to serve). Rows may come in any order; every tunnel must
//! have exactly one sample for every minute. A header line `tunnel,minute,mbps`, blank lines
//! and lines starting with `#` are skipped.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use crate::error::{ProvisionError, TraceField};

/// Largest minute index accepted (one year of minutes).
pub const MAX_MINUTE: u64 = 366 * 24 * 60;

/// A throughput trace: `tunnels × minutes` samples in Mbit/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    names: Vec<String>,
    minutes: usize,
    /// Minute-major: `mbps[minute * tunnels + tunnel]`.
    mbps: Vec<f64>,
}

impl Trace {
    /// Builds a trace from per-tunnel series (`series[tunnel][minute]`, all the same length).
    pub fn from_series(
        names: Vec<String>,
        series: &[Vec<f64>],
        limit_mbps: f64,
    ) -> Result<Self, ProvisionError> {
        let n = names.len();
        let minutes = series.first().map_or(0, Vec::len);
        if n == 0 || minutes == 0 {
            return Err(ProvisionError::EmptyTrace);
        }
        let mut mbps = vec![0.0; n * minutes];
        for (t, (name, s)) in names.iter().zip(series).enumerate() {
            for m in 0..minutes {
                let Some(&v) = s.get(m) else {
                    return Err(ProvisionError::MissingSample {
                        tunnel: name.clone(),
                        minute: u32::try_from(m).unwrap_or(u32::MAX),
                    });
                };
                check_value(v, limit_mbps, 0)?;
                mbps[m * n + t] = v;
            }
        }
        Ok(Self { names, minutes, mbps })
    }

    /// Parses CSV text. `limit_mbps` is the per-tunnel rate limit: larger samples are errors.
    pub fn parse_csv(text: &str, limit_mbps: f64) -> Result<Self, ProvisionError> {
        let mut parser = Parser::new(limit_mbps);
        for (i, line) in text.lines().enumerate() {
            parser.line(i + 1, line)?;
        }
        parser.finish()
    }

    /// Reads CSV from a buffered reader (see [`Trace::parse_csv`]).
    pub fn read_csv<R: BufRead>(mut reader: R, limit_mbps: f64) -> Result<Self, ProvisionError> {
        let mut parser = Parser::new(limit_mbps);
        let mut line = String::new();
        let mut number = 0;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            number += 1;
            parser.line(number, &line)?;
        }
        parser.finish()
    }

    /// Writes the trace as CSV with a header, tunnel by tunnel, 3 decimals.
    pub fn write_csv<W: Write>(&self, mut out: W) -> Result<(), ProvisionError> {
        writeln!(out, "tunnel,minute,mbps")?;
        for (t, name) in self.names.iter().enumerate() {
            for m in 0..self.minutes {
                writeln!(out, "{name},{m},{:.3}", self.mbps[m * self.names.len() + t])?;
            }
        }
        out.flush()?;
        Ok(())
    }

    /// Number of tunnels.
    pub fn tunnels(&self) -> usize {
        self.names.len()
    }

    /// Number of minutes.
    pub fn minutes(&self) -> usize {
        self.minutes
    }

    /// Tunnel names, in order of first appearance.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// All tunnels' samples of one minute (Mbit/s), indexed by tunnel.
    pub fn minute(&self, minute: usize) -> &[f64] {
        let n = self.names.len();
        &self.mbps[minute * n..(minute + 1) * n]
    }

    /// Mean over minutes of the sum over tunnels, in Mbit/s.
    pub fn mean_aggregate_mbps(&self) -> f64 {
        self.mbps.iter().sum::<f64>() / self.minutes as f64
    }

    /// Largest sample, in Mbit/s.
    pub fn max_mbps(&self) -> f64 {
        self.mbps.iter().copied().fold(0.0, f64::max)
    }
}

fn check_value(v: f64, limit: f64, line: usize) -> Result<(), ProvisionError> {
    if !v.is_finite() {
        return Err(ProvisionError::NonFiniteRate { line });
    }
    if v < 0.0 {
        return Err(ProvisionError::NegativeRate { line, mbps: v });
    }
    if v > limit {
        return Err(ProvisionError::AboveRateLimit { line, mbps: v, limit });
    }
    Ok(())
}

fn cut(text: &str) -> String {
    text.chars().take(32).collect()
}

/// Streaming CSV parser state.
struct Parser {
    limit: f64,
    index: HashMap<String, usize>,
    names: Vec<String>,
    /// `series[tunnel][minute]`, NaN where no sample was seen yet.
    series: Vec<Vec<f64>>,
    /// Cache of the last tunnel seen (rows usually come grouped by tunnel).
    last: Option<usize>,
    rows: usize,
}

impl Parser {
    fn new(limit: f64) -> Self {
        Self { limit, index: HashMap::new(), names: Vec::new(), series: Vec::new(), last: None, rows: 0 }
    }

    fn line(&mut self, line: usize, raw: &str) -> Result<(), ProvisionError> {
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            return Ok(());
        }
        if self.rows == 0 && text.eq_ignore_ascii_case("tunnel,minute,mbps") {
            return Ok(());
        }
        let mut fields = text.split(',');
        let (Some(tunnel), Some(minute), Some(mbps), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(ProvisionError::FieldCount { line, found: text.split(',').count() });
        };
        let (tunnel, minute, mbps) = (tunnel.trim(), minute.trim(), mbps.trim());
        for (field, value) in
            [(TraceField::Tunnel, tunnel), (TraceField::Minute, minute), (TraceField::Mbps, mbps)]
        {
            if value.is_empty() {
                return Err(ProvisionError::MissingField { line, field });
            }
        }
        let minute: u64 = minute.parse().map_err(|_| ProvisionError::BadNumber {
            line,
            field: TraceField::Minute,
            expected: "non-negative integer",
            text: cut(minute),
        })?;
        if minute >= MAX_MINUTE {
            return Err(ProvisionError::MinuteTooLarge { line, minute, max: MAX_MINUTE - 1 });
        }
        let mbps: f64 = mbps.parse().map_err(|_| ProvisionError::BadNumber {
            line,
            field: TraceField::Mbps,
            expected: "number",
            text: cut(mbps),
        })?;
        check_value(mbps, self.limit, line)?;

        let t = match self.last {
            Some(t) if self.names[t] == tunnel => t,
            _ => match self.index.get(tunnel) {
                Some(&t) => t,
                None => {
                    let t = self.names.len();
                    self.index.insert(tunnel.to_owned(), t);
                    self.names.push(tunnel.to_owned());
                    self.series.push(Vec::new());
                    t
                }
            },
        };
        self.last = Some(t);
        // `minute < MAX_MINUTE` fits in usize and u32.
        let m = usize::try_from(minute).unwrap_or(usize::MAX);
        let s = &mut self.series[t];
        if s.len() <= m {
            s.resize(m + 1, f64::NAN);
        }
        if !s[m].is_nan() {
            return Err(ProvisionError::DuplicateSample {
                line,
                tunnel: tunnel.to_owned(),
                minute: u32::try_from(minute).unwrap_or(u32::MAX),
            });
        }
        s[m] = mbps;
        self.rows += 1;
        Ok(())
    }

    fn finish(self) -> Result<Trace, ProvisionError> {
        let minutes = self.series.iter().map(Vec::len).max().unwrap_or(0);
        if self.rows == 0 || minutes == 0 {
            return Err(ProvisionError::EmptyTrace);
        }
        let n = self.names.len();
        let mut mbps = vec![0.0; n * minutes];
        for (t, s) in self.series.iter().enumerate() {
            for m in 0..minutes {
                match s.get(m) {
                    Some(v) if !v.is_nan() => mbps[m * n + t] = *v,
                    _ => {
                        return Err(ProvisionError::MissingSample {
                            tunnel: self.names[t].clone(),
                            minute: u32::try_from(m).unwrap_or(u32::MAX),
                        })
                    }
                }
            }
        }
        Ok(Trace { names: self.names, minutes, mbps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: f64 = 1500.0;

    #[test]
    fn parses_rows_in_any_order_with_header_and_comments() {
        let text = "tunnel,minute,mbps\n# comment\nb,1,4\na,0,1\n\na,1,2\nb,0,3.5\n";
        let t = Trace::parse_csv(text, LIMIT).unwrap();
        assert_eq!(t.tunnels(), 2);
        assert_eq!(t.minutes(), 2);
        assert_eq!(t.names(), ["b", "a"]);
        assert_eq!(t.minute(0), [3.5, 1.0]);
        assert_eq!(t.minute(1), [4.0, 2.0]);
        assert!((t.mean_aggregate_mbps() - 5.25).abs() < 1e-12);
    }

    #[test]
    fn csv_round_trips() {
        let t = Trace::parse_csv("x,0,1.25\nx,1,0\ny,0,1500\ny,1,7.5\n", LIMIT).unwrap();
        let mut out = Vec::new();
        t.write_csv(&mut out).unwrap();
        let back = Trace::read_csv(out.as_slice(), LIMIT).unwrap();
        assert_eq!(t, back);
    }

    #[test]
    fn field_count_error_names_the_line() {
        let e = Trace::parse_csv("a,0,1\na,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::FieldCount { line: 2, found: 2 }), "{e:?}");
        assert!(e.to_string().contains("line 2"));
        let e = Trace::parse_csv("a,0,1,9\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::FieldCount { line: 1, found: 4 }), "{e:?}");
    }

    #[test]
    fn empty_fields_are_missing_values() {
        let e = Trace::parse_csv("a,0,\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::MissingField { line: 1, field: TraceField::Mbps }));
        let e = Trace::parse_csv("a,0,1\n,1,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::MissingField { line: 2, field: TraceField::Tunnel }));
    }

    #[test]
    fn bad_numbers_are_named() {
        let e = Trace::parse_csv("a,x,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::BadNumber { line: 1, field: TraceField::Minute, .. }));
        let e = Trace::parse_csv("a,-1,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::BadNumber { line: 1, field: TraceField::Minute, .. }));
        let e = Trace::parse_csv("a,0,1e\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::BadNumber { line: 1, field: TraceField::Mbps, .. }));
    }

    #[test]
    fn negative_nan_and_too_large_rates_are_rejected() {
        let e = Trace::parse_csv("a,0,1\na,1,-0.5\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::NegativeRate { line: 2, .. }), "{e:?}");
        let e = Trace::parse_csv("a,0,NaN\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::NonFiniteRate { line: 1 }), "{e:?}");
        let e = Trace::parse_csv("a,0,inf\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::NonFiniteRate { line: 1 }), "{e:?}");
        let e = Trace::parse_csv("a,0,1500.5\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::AboveRateLimit { line: 1, .. }), "{e:?}");
        let e = Trace::parse_csv("a,99999999999,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::MinuteTooLarge { line: 1, .. }), "{e:?}");
    }

    #[test]
    fn duplicates_and_gaps_are_rejected() {
        let e = Trace::parse_csv("a,0,1\na,0,2\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::DuplicateSample { line: 2, minute: 0, .. }), "{e:?}");
        let e = Trace::parse_csv("a,0,1\na,2,2\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::MissingSample { minute: 1, .. }), "{e:?}");
        let e = Trace::parse_csv("a,0,1\na,1,2\nb,0,1\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::MissingSample { minute: 1, .. }), "{e:?}");
        let e = Trace::parse_csv("tunnel,minute,mbps\n\n", LIMIT).unwrap_err();
        assert!(matches!(e, ProvisionError::EmptyTrace), "{e:?}");
    }
}
