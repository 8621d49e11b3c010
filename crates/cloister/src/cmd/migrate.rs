//! `cloister migrate`: live moves of tenants between hosts, and the HSM audit log's check.

use std::path::PathBuf;

use crate::cmd::service::ApiArgs;

/// `cloister migrate ...`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Move a running tenant, tunnels up, to another host's service (`[migrate.peers]`).
    Tenant {
        /// The tenant.
        tenant: String,
        /// The destination, as named in this host's `[migrate.peers]`.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Check the HSM audit log's hash chain; prints its head (entries, last hash).
    Audit {
        /// `verify`.
        #[arg(value_parser = ["verify"])]
        action: String,
        /// The log (`[migrate.hsm] audit`).
        file: PathBuf,
    },
}

/// Runs `cloister migrate`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Tenant { tenant, to, api } => {
            let body = serde_json::json!({ "to": to }).to_string();
            let v = api
                .client()?
                .request("POST", &format!("/v1/tenants/{tenant}/move"), body.as_bytes(), "application/json")?
                .json()?;
            println!(
                "moved {tenant} to {to} ({}): package {} bytes, prepare {} ms, IKE frozen {} ms, total {} ms",
                v["mode"].as_str().unwrap_or("?"),
                v["package_bytes"],
                v["prepare_ms"],
                v["frozen_ms"],
                v["total_ms"]
            );
            Ok(())
        }
        What::Audit { file, .. } => {
            let head = migrate::verify(&file)?;
            let hash: String = head.hash.iter().map(|b| format!("{b:02x}")).collect();
            println!("audit log {}: chain intact, {} entries, head {hash}", file.display(), head.entries);
            Ok(())
        }
    }
}
