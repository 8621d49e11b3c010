//! `cloister decode`: print what the wire crate makes of some bytes.

/// Arguments of `cloister decode`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Hex bytes to decode.
    hex: String,
}

/// Runs `cloister decode`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    anyhow::bail!("decode not yet wired: {} hex chars given", args.hex.len())
}
