//! `cloister secret wrap`: wraps a tenant secret (PSK or private key) for the tenant's
//! enclave, so the gateway's configuration holds only the wrapped blob.
//!
//! Until attested provisioning, the wrapping key is the provisioning key the gateway hands
//! its enclave (docs/threat-model.md): run this where that key lives, not on the gateway.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use enclave::{ProvisioningKey, SecretKind, TenantId};
use zeroize::Zeroizing;

/// Arguments of `cloister secret`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Wrap a secret read from stdin (a PSK as its bytes; a private key as PKCS#8 DER).
    Wrap {
        /// The provisioning key file (64 hex digits, mode 0600).
        #[arg(long)]
        provisioning_key: PathBuf,
        /// The tenant whose enclave may unwrap it.
        #[arg(long)]
        tenant: u32,
        /// psk, rsa, ecdsa-p256 or ecdsa-p384.
        #[arg(long)]
        kind: String,
        /// Where to write the blob (mode 0600).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs `cloister secret`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let What::Wrap { provisioning_key, tenant, kind, out } = args.what;
    let kind = match kind.as_str() {
        "psk" => SecretKind::PreSharedKey,
        "rsa" => SecretKind::RsaPrivateKey,
        "ecdsa-p256" => SecretKind::EcdsaP256PrivateKey,
        "ecdsa-p384" => SecretKind::EcdsaP384PrivateKey,
        _ => anyhow::bail!("--kind must be psk, rsa, ecdsa-p256 or ecdsa-p384"),
    };
    let key = gateway::config::read_provisioning_key(&provisioning_key)?;
    let mut secret = Zeroizing::new(Vec::new());
    std::io::stdin().take(1 << 16).read_to_end(&mut secret).context("reading the secret from stdin")?;
    if kind == SecretKind::PreSharedKey {
        // A PSK typed or echoed into a pipe ends with a newline that is not part of it.
        while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            secret.pop();
        }
    }
    anyhow::ensure!(!secret.is_empty(), "the secret on stdin is empty");
    let blob =
        enclave::provision::wrap_secret(&ProvisioningKey::from_bytes(*key), TenantId(tenant), kind, &secret)?;
    write_private(&out, &blob).with_context(|| format!("writing {}", out.display()))?;
    println!("wrapped the secret for tenant {tenant} into {}", out.display());
    Ok(())
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}
