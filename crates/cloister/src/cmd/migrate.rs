//! `cloister migrate`: live moves of tenants between hosts, backups and disaster recovery,
//! and the HSM audit log's check.

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
    /// Back up a running tenant's secrets and configuration to FILE (a new file, mode 0600),
    /// wrapped to the HSM's backup key: only a restore with the security officer opens it.
    Backup {
        /// The tenant.
        tenant: String,
        /// Where the backup document goes (must not exist).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Restore a tenant from a backup document on this host (disaster recovery).
    Restore {
        /// The backup document (`cloister migrate backup`).
        file: PathBuf,
        /// File holding the HSM security officer's PIN (else it is read from standard input).
        #[arg(long)]
        officer_pin_file: Option<PathBuf>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Print the HSM's backup root (made on first use), through this host's HSM agent: set it
    /// as `[migrate.hsm] backup_root` on every host. Tenants' enclaves back up only to keys
    /// it certified, and their measurements include it.
    BackupRoot {
        /// The service's configuration (`[migrate.hsm]`).
        #[arg(long)]
        config: PathBuf,
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
        What::Backup { tenant, out, api } => {
            let v = api
                .client()?
                .request("POST", &format!("/v1/tenants/{tenant}/backup"), b"", "application/json")?
                .json()?;
            let text = serde_json::to_string_pretty(&v)?;
            write_new(&out, text.as_bytes())?;
            println!(
                "backup of {tenant} written to {} (key {}, package {} bytes)",
                out.display(),
                v["backup_key"].as_str().unwrap_or("?"),
                v["package"].as_str().map_or(0, |p| p.len() / 2)
            );
            Ok(())
        }
        What::Restore { file, officer_pin_file, api } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
            let backup: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{} is not a backup document: {e}", file.display()))?;
            let pin = officer_pin(officer_pin_file.as_deref())?;
            let body = zeroize::Zeroizing::new(
                serde_json::json!({ "backup": backup, "officer_pin": pin.as_str() }).to_string(),
            );
            let v =
                api.client()?.request("POST", "/v1/restore", body.as_bytes(), "application/json")?.json()?;
            println!(
                "restored {} from {} (key {}) in {} ms, serving on {}",
                v["tenant"].as_str().unwrap_or("?"),
                file.display(),
                v["backup_key"].as_str().unwrap_or("?"),
                v["restore_ms"],
                v["tun"].as_str().unwrap_or("?")
            );
            Ok(())
        }
        What::BackupRoot { config } => {
            let c = control::ServiceConfig::load(&config)
                .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
            let root = control::moving::backup_root(&c, std::env::current_exe()?)?;
            println!("{}", control::platform::hex(&root));
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

/// Writes a new file readable by its owner only; an existing file is never overwritten.
pub(crate) fn write_new(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| {
            anyhow::anyhow!("{}: {e} (cloister never overwrites a key or backup file)", path.display())
        })?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

/// The security officer's PIN, from its file or one line of standard input.
fn officer_pin(file: Option<&std::path::Path>) -> anyhow::Result<zeroize::Zeroizing<String>> {
    let raw = zeroize::Zeroizing::new(match file {
        Some(f) => std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("reading {}: {e}", f.display()))?,
        None => {
            eprint!("security officer PIN: ");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line
        }
    });
    let pin = zeroize::Zeroizing::new(raw.trim().to_owned());
    anyhow::ensure!(!pin.is_empty(), "no security officer PIN given");
    Ok(pin)
}
