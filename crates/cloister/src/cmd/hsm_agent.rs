//! `cloister hsm-agent` (hidden): the HSM agent process, the only one that reads the HSM
//! user PIN. Started by `cloister serve` when `[migrate.hsm]` is configured, which talks to
//! it over its standard input and output (`cloister_migrate::agent`).

use std::ffi::OsString;

/// Arguments of `cloister hsm-agent`: passed through to the agent, which checks them.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `--module P --token-label L --pin-file F --oaep H --rsa-bits N --audit A --platform-key HEX`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Runs the agent until the service closes its input.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    migrate::agent::serve::main(args.args).map_err(|e| anyhow::anyhow!("hsm agent: {e}"))
}
