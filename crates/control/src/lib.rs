//! Cloister's multi-tenant service (`cloister serve`): many tenants, each served by its own
//! gateway thread over its **own enclave process** (no tenant's keys in another's enclave),
//! with secrets provisioned by attestation, state that survives restarts, and an operator
//! API.
//!
//! - [`config`]: the one file, `[service]` and `[tenants.NAME]` in the gateway's vocabulary.
//! - [`platform`]: the software platform's attestation key and sealing root.
//! - [`tenant`]: a tenant's thread: gateway rounds, API commands, enclave health, recovery.
//! - [`service`]: every tenant, the store, runtime add/remove/reload.
//! - `api`, `metrics`: the HTTP API (bearer token) and the Prometheus endpoint.
//! - [`client`]: the CLI's side of the API.
//! - [`moving`]: the migration agent: live moves of tenants between hosts (issue 8).
//!
//! Nothing in this crate holds a tenant key: secrets arrive in envelopes that only the
//! tenant's enclave opens, and leave it only sealed.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod api;
pub mod cas;
pub mod client;
pub mod config;
mod error;
mod http;
pub mod log;
mod metrics;
pub mod moving;
pub mod platform;
mod released;
pub mod service;
pub mod tenant;

pub use config::{ServiceConfig, TenantConfig};
pub use error::{Error, Result};
pub use service::Service;
