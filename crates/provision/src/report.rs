//! Text tables of simulation results, laid out like Protego's Table 2.

use core::fmt::Write;

use crate::sim::RunReport;

/// Protego's Table 2 (§7.4, production trace): `(interval min, active Gbit/s, 99th-percentile
/// guarantee %, saving %)`, for reference next to our numbers.
pub const PAPER_TABLE_2: [(u32, f64, f64, f64); 5] = [
    (3, 61.23, 90.21, 88.00),
    (5, 66.17, 93.07, 87.03),
    (10, 73.97, 96.84, 85.50),
    (30, 88.34, 98.24, 82.68),
    (60, 93.22, 98.63, 81.72),
];

/// One policy's runs, one row per consolidation interval.
pub fn policy_table(reports: &[&RunReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8}  {:>13}  {:>15}  {:>15}  {:>16}  {:>8}  {:>12}",
        "interval",
        "active Gbit/s",
        "reserved Gbit/s",
        "guarantee p99 %",
        "guarantee mean %",
        "saving %",
        "migrations/h"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:>4} min  {:>13.2}  {:>15.2}  {:>15.2}  {:>16.3}  {:>8.2}  {:>12.1}",
            r.interval,
            r.active_gbps,
            r.reserved_gbps,
            100.0 * r.guarantee_p99,
            100.0 * r.guarantee_mean,
            100.0 * r.saving,
            r.migrations_per_hour
        );
    }
    out
}

/// Several policies side by side: one row per interval, `saving % / p99 % / migrations/h`
/// per policy (policies in the order they first appear).
pub fn side_by_side(reports: &[RunReport]) -> String {
    let mut policies: Vec<&'static str> = Vec::new();
    let mut intervals: Vec<u32> = Vec::new();
    for r in reports {
        if !policies.contains(&r.policy) {
            policies.push(r.policy);
        }
        if !intervals.contains(&r.interval) {
            intervals.push(r.interval);
        }
    }
    let mut out = String::new();
    let _ = write!(out, "{:>8}", "interval");
    for p in &policies {
        let _ = write!(out, "  {:>30}", format!("{p}: saving/p99/mig-h"));
    }
    out.push('\n');
    for iv in intervals {
        let _ = write!(out, "{iv:>4} min");
        for p in &policies {
            match reports.iter().find(|r| r.policy == *p && r.interval == iv) {
                Some(r) => {
                    let cell = format!(
                        "{:.2}% / {:.2}% / {:.0}",
                        100.0 * r.saving,
                        100.0 * r.guarantee_p99,
                        r.migrations_per_hour
                    );
                    let _ = write!(out, "  {cell:>30}");
                }
                None => {
                    let _ = write!(out, "  {:>30}", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// One `key=value` line per run, stable for scripts.
pub fn summary_line(r: &RunReport) -> String {
    format!(
        "result policy={} interval_min={} tunnels={} minutes={} demand_gbps={:.3} active_gbps={:.3} \
         reserved_gbps={:.3} saving={:.4} guarantee_p99={:.4} guarantee_mean={:.5} \
         migrations_per_hour={:.1} overloaded_node_minutes={} stuck_tunnel_minutes={} boots={}",
        r.policy,
        r.interval,
        r.tunnels,
        r.minutes,
        r.demand_gbps,
        r.active_gbps,
        r.reserved_gbps,
        r.saving,
        r.guarantee_p99,
        r.guarantee_mean,
        r.migrations_per_hour,
        r.overloaded_node_minutes,
        r.stuck_tunnel_minutes,
        r.boots
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Series;

    fn report(policy: &'static str, interval: u32, saving: f64) -> RunReport {
        RunReport {
            policy,
            interval,
            tunnels: 2,
            minutes: 3,
            demand_gbps: 1.0,
            active_gbps: 5.0,
            reserved_gbps: 10.0,
            peak_active_gbps: 5.0,
            saving,
            guarantee_p99: 0.99,
            guarantee_mean: 0.995,
            guarantee_min: 0.98,
            migrations_per_hour: 12.0,
            hotspot_migrations_per_hour: 1.0,
            overloaded_node_minutes: 0,
            stuck_tunnel_minutes: 0,
            boots: 0,
            skipped_consolidations: 0,
            series: Series::default(),
            violation_minutes: vec![0, 0],
        }
    }

    #[test]
    fn tables_have_a_row_per_interval() {
        let rs = vec![report("a", 3, 0.5), report("a", 10, 0.6), report("b", 10, 0.7)];
        let t = policy_table(&rs.iter().filter(|r| r.policy == "a").collect::<Vec<_>>());
        assert_eq!(t.lines().count(), 3);
        assert!(t.contains("   3 min"));
        let s = side_by_side(&rs);
        assert_eq!(s.lines().count(), 3);
        assert!(s.contains("70.00% / 99.00% / 12"));
        assert!(s.lines().nth(1).unwrap().trim_end().ends_with('-'));
        assert!(summary_line(&rs[0]).starts_with("result policy=a interval_min=3 "));
    }
}
