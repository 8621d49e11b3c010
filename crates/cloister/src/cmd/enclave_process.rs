//! `cloister enclave-process` (hidden): the life of one tenant's enclave process.
//!
//! Only the gateway starts it, as `/proc/self/exe enclave-process --shm-fd N ...`, through
//! `cloister_enclave_host::ProcessEnclave`, which passes the shared memory, the two
//! doorbells and the config pipe as inherited descriptors. Everything after argument
//! parsing (hardening, seccomp, the ring loop) is `cloister_enclave::process::guest::main`.

use std::ffi::OsString;

/// Arguments of `cloister enclave-process`: passed through unparsed to the guest, which
/// checks every flag itself (it trusts nothing its parent hands it).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `--shm-fd N --request-fd N --completion-fd N --config-fd N --slots N ...`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Runs the enclave process until the gateway stops it or exits.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    enclave::process::guest::main(args.args).map_err(|e| anyhow::anyhow!("enclave process: {e}"))
}
