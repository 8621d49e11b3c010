//! The software platform: the process that plays the part a TEE's hardware and hypervisor
//! play for each tenant's enclave. It alone holds the attestation key that signs evidence,
//! the sealing root from which each tenant's enclave derives its sealing key, and the
//! tenants' ledgers (seal counters, live sealed secrets, static keys installed), and it
//! starts every enclave process itself, handing those secrets straight to the child. The
//! service asks for enclaves over a narrow channel ([`wire`]) and gets back a process to
//! watch, so a compromised service holds no root, forges no evidence and cannot answer
//! "live" for a rolled-back blob.
//!
//! `cloister serve` starts one platform process ([`client::PlatformClient::start`]) that
//! runs [`run`]; when the service goes, the platform ends the enclaves and exits.
#![allow(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod channel;
pub mod client;
pub mod files;
pub mod server;
pub mod wire;

pub use client::{PlatformClient, RemoteProcess, NETWORK_CAPABILITIES, NETWORK_CAPABILITY_NAMES};
pub use files::{FileError, Roots, Secrets};
pub use server::{AgentProgram, EnclaveProgram};

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Whether this process runs as root (and so may start enclave processes as users of
/// their own).
pub fn started_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The platform process: takes the inherited descriptor `channel_fd` (the caller's
/// `--channel-fd`), loads (or makes) its files, hardens itself, says hello and serves
/// until the caller closes the channel. Returns the process's exit status.
pub fn run(
    channel_fd: RawFd,
    attestation_key: Option<&Path>,
    roots: &Roots,
    enclave: &EnclaveProgram,
    enclave_uid_base: Option<u32>,
    agent: Option<&server::AgentProgram>,
) -> i32 {
    // Only a connected SOCK_SEQPACKET socket is taken: the descriptor number comes from the
    // command line, and anything else is refused before it is owned.
    let is_seqpacket = rustix::io::fcntl_getfd(
        // SAFETY: borrowed only for this probe, which fails cleanly on a closed number.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(channel_fd) },
    )
    .is_ok()
        && rustix::net::sockopt::socket_type(
            // SAFETY: the descriptor is open (probed above); borrowed for this call only.
            unsafe { std::os::fd::BorrowedFd::borrow_raw(channel_fd) },
        )
        .is_ok_and(|t| t == rustix::net::SocketType::SEQPACKET);
    if channel_fd < 3 || !is_seqpacket {
        eprintln!("platform: --channel-fd {channel_fd} is not the service's channel");
        return 2;
    }
    // SAFETY: an open socket descriptor this process inherited for this purpose and that
    // nothing else in it owns.
    let channel = unsafe { OwnedFd::from_raw_fd(channel_fd) };
    let refuse = |why: String| {
        eprintln!("platform: {why}");
        let _ = channel::send(&channel, &wire::encode_reply(0, &wire::Reply::Refused(why)), &[]);
        1
    };
    // Not dumpable: a process of the same user (the service, unless it dropped to a user
    // of its own) may then neither ptrace it nor read its memory.
    if let Err(e) = enclave_api::process::non_dumpable() {
        return refuse(e.to_string());
    }
    if enclave_uid_base.is_some() && !started_as_root() {
        return refuse("enclave users need the platform to start as root".into());
    }
    if agent.is_some_and(|a| a.user.is_some()) && !started_as_root() {
        return refuse("an HSM agent user needs the platform to start as root".into());
    }
    let secrets = match Secrets::load(attestation_key, roots) {
        Ok(s) => s,
        Err(e) => return refuse(e.to_string()),
    };
    match enclave_uid_base {
        Some(base) => server::serve(&secrets, &channel, enclave, &server::users_from(base), agent),
        None => server::serve(&secrets, &channel, enclave, &|_| Ok(None), agent),
    }
    0
}
