//! `cloister`: the one binary. It parses arguments and hands each subcommand to its crate.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

mod cmd;

/// Cloister: a confidential, multi-tenant, elastic IPsec VPN gateway.
#[derive(Debug, Parser)]
#[command(name = "cloister", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode an IKEv2 message or ESP/IP packet given as hex or a file, and print its structure.
    Decode(cmd::decode::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => cmd::decode::run(args),
    }
}
