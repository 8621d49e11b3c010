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

/// Whether this process can create network namespaces (it must be root).
///
/// Tests call this first and print a notice instead of failing where it is false, so a
/// developer's unprivileged `cargo test` still runs everything else.
pub fn can_create_namespaces() -> bool {
    process::is_root()
        && cmd::run(&["ip", "netns", "list"], std::time::Duration::from_secs(5)).is_ok_and(|o| o.success)
}
