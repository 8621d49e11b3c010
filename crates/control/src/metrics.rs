//! The Prometheus endpoint (`GET /metrics`, text format 0.0.4): per tunnel bytes and
//! packets each way, drops by reason, rekeys, IKE exchanges and failures, per enclave
//! crossings and trusted memory, per tenant state and recoveries.
//!
//! Tunnel counters sum a child configuration's current SAs: a rekey starts new SAs at zero,
//! which Prometheus' `rate()` reads as a counter reset. Labels are names and numbers from
//! the configuration, never anything secret.

use core::fmt::Write as _;

use crate::service::Inner;
use crate::tenant::Command;

/// Escapes a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Renders every metric.
pub(crate) fn render(inner: &Inner, unauthorized: u64) -> String {
    let tenants: Vec<(String, crate::tenant::Status)> =
        inner.lock().iter().map(|(n, h)| (n.clone(), h.status())).collect();
    let mut snaps = Vec::new();
    for (name, _) in &tenants {
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = inner.lock().get(name).is_some_and(|h| h.send(Command::Snapshot(tx)).is_ok());
        if sent {
            if let Ok(s) = rx.recv_timeout(crate::tenant::CALL_TIMEOUT) {
                snaps.push((name.clone(), s));
            }
        }
    }
    let mut o = String::new();
    family(&mut o, "cloister_up", "gauge", "1 while the service answers");
    let _ = writeln!(o, "cloister_up 1");
    family(
        &mut o,
        "cloister_api_unauthorized_total",
        "counter",
        "API requests refused for want of a valid token",
    );
    let _ = writeln!(o, "cloister_api_unauthorized_total {unauthorized}");
    family(&mut o, "cloister_tenant_running", "gauge", "1 while the tenant's gateway and enclave run");
    for (n, s) in &tenants {
        let _ = writeln!(
            o,
            "cloister_tenant_running{{tenant=\"{}\"}} {}",
            label(n),
            u8::from(s.state == "running")
        );
    }
    family(&mut o, "cloister_tenant_recoveries_total", "counter", "enclave deaths the tenant recovered from");
    for (n, s) in &tenants {
        let _ = writeln!(o, "cloister_tenant_recoveries_total{{tenant=\"{}\"}} {}", label(n), s.recoveries);
    }
    for (unit, what) in [("bytes", "ESP payload bytes"), ("packets", "ESP packets")] {
        let name = format!("cloister_tunnel_{unit}_total");
        family(&mut o, &name, "counter", &format!("{what} per child SA configuration and direction"));
        for (n, s) in &snaps {
            for sa in &s.ike_sas {
                for c in &sa.children {
                    let (i, out) = if unit == "bytes" {
                        (c.bytes_in, c.bytes_out)
                    } else {
                        (c.packets_in, c.packets_out)
                    };
                    for (dir, v) in [("in", i), ("out", out)] {
                        let _ = writeln!(
                            o,
                            "{name}{{tenant=\"{}\",connection=\"{}\",child=\"{}\",spi_in=\"{}\",direction=\"{dir}\"}} {v}",
                            label(n),
                            label(&sa.connection),
                            label(&c.name),
                            c.spi_in
                        );
                    }
                }
            }
        }
    }
    family(&mut o, "cloister_ike_sas", "gauge", "IKE SAs by state");
    for (n, s) in &snaps {
        let mut by: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for sa in &s.ike_sas {
            *by.entry(sa.state.as_str()).or_default() += 1;
        }
        for (state, v) in by {
            let _ = writeln!(o, "cloister_ike_sas{{tenant=\"{}\",state=\"{}\"}} {v}", label(n), label(state));
        }
    }
    family(&mut o, "cloister_drops_total", "counter", "data-plane drops by reason (I/O and ESP)");
    for (n, s) in &snaps {
        for (r, v) in &s.drops {
            let _ = writeln!(o, "cloister_drops_total{{tenant=\"{}\",reason=\"{r}\"}} {v}", label(n));
        }
    }
    family(&mut o, "cloister_ike_drops_total", "counter", "IKE datagrams dropped by reason");
    for (n, s) in &snaps {
        for (r, v) in &s.ike_drops {
            let _ = writeln!(o, "cloister_ike_drops_total{{tenant=\"{}\",reason=\"{r}\"}} {v}", label(n));
        }
    }
    family(
        &mut o,
        "cloister_ike_events_total",
        "counter",
        "IKE and child SA events: established, failed, rekeyed, deleted",
    );
    for (n, s) in &snaps {
        let e = &s.events;
        for (k, v) in [
            ("ike_established", e.ike_established),
            ("ike_failed", e.ike_failed),
            ("ike_rekeyed", e.ike_rekeys),
            ("ike_rekey_failed", e.ike_rekey_failures),
            ("ike_deleted", e.ike_deleted),
            ("child_installed", e.child_installed),
            ("child_rekeyed", e.child_rekeys),
            ("child_failed", e.child_failed),
            ("child_deleted", e.child_deleted),
        ] {
            let _ = writeln!(o, "cloister_ike_events_total{{tenant=\"{}\",event=\"{k}\"}} {v}", label(n));
        }
    }
    family(&mut o, "cloister_ike_refusals_total", "counter", "IKE_SA_INIT requests refused by reason");
    for (n, s) in &snaps {
        for (r, v) in &s.ike_refusals {
            let _ = writeln!(o, "cloister_ike_refusals_total{{tenant=\"{}\",reason=\"{r}\"}} {v}", label(n));
        }
    }
    family(&mut o, "cloister_ike_retransmits_total", "counter", "IKE requests retransmitted");
    for (n, s) in &snaps {
        let _ =
            writeln!(o, "cloister_ike_retransmits_total{{tenant=\"{}\"}} {}", label(n), s.ike_retransmits);
    }
    family(&mut o, "cloister_dataplane_packets_total", "counter", "data-plane packets by stage");
    for (n, s) in &snaps {
        for (k, v) in &s.dataplane {
            let _ =
                writeln!(o, "cloister_dataplane_packets_total{{tenant=\"{}\",stage=\"{k}\"}} {v}", label(n));
        }
    }
    family(
        &mut o,
        "cloister_enclave_crossings_total",
        "counter",
        "enclave boundary crossings (rate() gives crossings/s)",
    );
    for (n, s) in &snaps {
        let _ = writeln!(
            o,
            "cloister_enclave_crossings_total{{tenant=\"{}\"}} {}",
            label(n),
            s.enclave.crossings
        );
    }
    family(&mut o, "cloister_enclave_batches_total", "counter", "ESP batches the enclave processed");
    for (n, s) in &snaps {
        let _ =
            writeln!(o, "cloister_enclave_batches_total{{tenant=\"{}\"}} {}", label(n), s.enclave.batches);
    }
    family(
        &mut o,
        "cloister_enclave_trusted_bytes",
        "gauge",
        "trusted memory holding SAs, DH values and secrets",
    );
    for (n, s) in &snaps {
        let _ = writeln!(
            o,
            "cloister_enclave_trusted_bytes{{tenant=\"{}\"}} {}",
            label(n),
            s.enclave.trusted_bytes
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
