//! Cloister's gateway for one tenant: the IKEv2 engine ([`ike`]) and the ESP data plane
//! ([`dataplane`]) joined over one enclave, run by `cloister gateway --config FILE`.
//!
//! - [`config`]: the one file (`[gateway]`, `[dataplane]`, swanctl-style `connections` and
//!   `secrets`).
//! - [`shared`]: the tenant's enclave shared by the control thread and the data plane.
//! - [`daemon`]: the control thread's loop: sockets, timers, engine events, SA install.
//! - [`control`]: the control socket behind `cloister sa list`.
//! - `carry`: a tenant's gateway moving to another host with its tunnels up.
//! - [`snapshot`]: the tunnel table and counters as data (the service's API and metrics).
//! - [`supervise`]: what every daemon does when the tenant's enclave dies.
//!
//! Keys never pass through this crate: secrets arrive wrapped and go straight into the
//! enclave; the engine and the data plane hold handles.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod carry;
mod children;
pub mod config;
pub mod control;
pub mod daemon;
mod error;
pub mod shared;
pub mod snapshot;
pub mod supervise;

pub use config::{Backend, GatewayConfig};
pub use daemon::{EventCounts, Gateway};
pub use error::{Error, Result};
pub use shared::SharedEnclave;
