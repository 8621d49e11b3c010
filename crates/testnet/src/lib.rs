//! Test-network harness: network namespaces, veth links and supervised processes.
//!
//! Every integration test that needs a network builds its own hosts with this crate and
//! gets them torn down on drop, also when the test panics: processes first (only the PIDs
//! this harness started, by PID), then the namespaces, whose deletion removes their veth
//! ends. Names carry the test process's PID and a counter, so tests run in parallel and a
//! later run can sweep what a killed run (`SIGKILL`, no unwinding) left behind.
//!
//! Addresses must come from 198.18.0.0/15 or 2001:db8::/32 (RFC 2544 benchmarking and RFC
//! 3849 documentation ranges); [`Netns::add_addr`] refuses anything else, so a test cannot
//! send traffic anywhere but between namespaces it made. Every wait is bounded.
#![deny(unsafe_code)]

mod addr;
mod cmd;
mod error;
pub mod memscan;
mod netns;
mod process;

pub use addr::{check_test_addr, TestAddr};
pub use cmd::{run, run_ok, Output};
pub use error::Error;
pub use netns::{excerpt, sweep_stale, wait_until, Netns, Veth};
pub use process::Process;

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Marks the running test as skipped, for `why` (what it needs and how to get it): prints
/// `SKIP <test>: <why>` and appends that line to the file `CLOISTER_SKIP_LOG` names, which
/// `scripts/test.sh` counts in its last line. The caller returns right after.
///
/// # Panics
///
/// Under `CI=true`: `scripts/setup.sh` installs everything every test needs, so a test that
/// cannot run there is a broken set-up, not a pass.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("SKIP {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("CLOISTER_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(!ci, "{line} (CI=true: scripts/setup.sh installs what every test needs)");
}

/// Whether this process can create network namespaces (it must be root).
///
/// Tests call this first and [`skip`] where it is false, so a developer's unprivileged
/// `cargo test` still runs everything else.
pub fn can_create_namespaces() -> bool {
    process::is_root()
        && cmd::run(&["ip", "netns", "list"], std::time::Duration::from_secs(5)).is_ok_and(|o| o.success)
}

#[cfg(test)]
mod tests {
    use super::skip;

    /// The only test of this crate that touches `CI` and `CLOISTER_SKIP_LOG` (each test
    /// binary is its own process; the integration tests never run in this one).
    #[test]
    fn a_skip_is_logged_and_under_ci_fails() {
        let path = std::env::temp_dir().join(format!("cloister-skips-{}", std::process::id()));
        let (ci, log) = (std::env::var_os("CI"), std::env::var_os("CLOISTER_SKIP_LOG"));
        std::env::set_var("CLOISTER_SKIP_LOG", &path);
        std::env::remove_var("CI");
        skip("needs nothing in particular");
        std::env::set_var("CI", "true");
        let under_ci = std::panic::catch_unwind(|| skip("needs it again"));
        for (name, old) in [("CI", ci), ("CLOISTER_SKIP_LOG", log)] {
            match old {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
        let lines = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        assert!(under_ci.is_err(), "a skip under CI=true fails the test");
        let test = "tests::a_skip_is_logged_and_under_ci_fails";
        assert_eq!(lines, format!("SKIP {test}: needs nothing in particular\nSKIP {test}: needs it again\n"));
    }
}
