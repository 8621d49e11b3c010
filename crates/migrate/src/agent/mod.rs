//! The HSM agent: a separate, hardened process that alone reads the HSM user PIN and holds
//! the PKCS#11 session (TEEnder §3.4.1 runs it from inside an enclave). The gateway asks it
//! for keys and rewraps over a pipe; the agent verifies each destination's evidence itself
//! before it releases a data key to it, so the measurement check lives with the PIN.
//!
//! - [`wire`]: the pipe's frames (sans-IO).
//! - [`serve`]: the agent process.
//! - [`client`]: the gateway's handle on it.

pub mod client;
pub mod serve;
pub mod wire;

pub use client::{AgentProcess, HsmAgent};
pub use serve::AgentSettings;
