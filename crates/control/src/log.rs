//! The service's log lines as `tracing` events, so an operator's collector gets fields
//! (`tenant`, level) rather than text to parse. Lines never carry key material: every
//! message is built from names, states and error texts, and enclave and gateway errors hold
//! no secrets (crates/enclave, crates/gateway).

use std::sync::Arc;

use crate::tenant::Log;

/// Words that make a line a warning: something an operator should look at.
const WARN_WORDS: [&str; 6] = ["refused", "failed", "died", "unreachable", "not started", "does not parse"];

/// The tenant a line is about (`tenant NAME: ...`), if any.
fn tenant_of(line: &str) -> Option<&str> {
    line.strip_prefix("tenant ")?.split_once(": ").map(|(t, _)| t).filter(|t| !t.contains(' '))
}

/// A [`Log`] that emits each line as a `tracing` event (target `cloister`), with the
/// tenant as a field and warnings at WARN.
pub fn to_tracing() -> Log {
    Arc::new(|line: &str| {
        let warn = WARN_WORDS.iter().any(|w| line.contains(w));
        match (tenant_of(line), warn) {
            (Some(t), true) => tracing::warn!(target: "cloister", tenant = t, "{line}"),
            (Some(t), false) => tracing::info!(target: "cloister", tenant = t, "{line}"),
            (None, true) => tracing::warn!(target: "cloister", "{line}"),
            (None, false) => tracing::info!(target: "cloister", "{line}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_become_json_events_with_tenant_and_level() {
        let buf = Buffer::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt().json().with_writer(move || w.clone()).finish();
        tracing::subscriber::with_default(sub, || {
            let log = to_tracing();
            log("tenant acme: running, tun clt-acme");
            log("tenant blue: the CAS refused it (measurement mismatch); not started");
            log("service: api http://127.0.0.1:9440");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let events: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.len(), 3, "{text}");
        assert_eq!(events[0]["level"], "INFO");
        assert_eq!(events[0]["fields"]["tenant"], "acme");
        assert_eq!(events[1]["level"], "WARN");
        assert_eq!(events[1]["fields"]["tenant"], "blue");
        assert!(events[2]["fields"].get("tenant").is_none());
        assert_eq!(events[2]["fields"]["message"], "service: api http://127.0.0.1:9440");
    }

    #[test]
    fn only_a_leading_tenant_name_is_taken() {
        assert_eq!(tenant_of("tenant acme: x"), Some("acme"));
        assert_eq!(tenant_of("tenant acme from the store not started: x"), None);
        assert_eq!(tenant_of("service: x"), None);
    }
}
