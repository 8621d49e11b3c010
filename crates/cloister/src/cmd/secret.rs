//! `cloister secret wrap`: wraps a tenant secret (PSK, private key, or one direction of a
//! static ESP SA's keys) for the tenant's enclave, so the gateway's configuration holds only
//! the wrapped blob.
//!
//! Until attested provisioning, the wrapping key is the provisioning key the gateway hands
//! its enclave (docs/threat-model.md): run this where that key lives, not on the gateway.
//! Secrets come on stdin, never in arguments (which other users can read in `/proc`).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use enclave::{EspSaParams, ProvisioningKey, SecretKind, TenantId};
use zeroize::Zeroizing;

/// Arguments of `cloister secret`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Wrap a secret read from stdin: a PSK as its bytes; a private key as PKCS#8 DER; ESP
    /// SA keys (--kind esp) as hex: the encryption key (AEADs: key then 4-byte salt), then,
    /// for AES-CBC, the integrity key, separated by whitespace.
    #[command(after_help = ESP_HELP)]
    Wrap {
        /// The provisioning key file (64 hex digits, mode 0600).
        #[arg(long)]
        provisioning_key: PathBuf,
        /// The tenant whose enclave may unwrap it.
        #[arg(long)]
        tenant: u32,
        /// psk, rsa, ecdsa-p256, ecdsa-p384, or esp (one direction of a static ESP SA).
        #[arg(long)]
        kind: String,
        /// Where to write the blob (mode 0600).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        esp: EspArgs,
    },
}

const ESP_HELP: &str = "\
ESP SA keys (--kind esp) are bound to one SA of the gateway: --direction (in: the gateway
receives with it, out: it sends), --spi, --encryption and --integrity as in the [[sa]] table.
Stdin holds the keys in hex: the encryption key (AES-GCM and ChaCha20-Poly1305: the key
followed by the 4-byte salt, RFC 4106 section 8.1), then for AES-CBC the integrity key, e.g.

  printf '%s\\n' \"$ENC_HEX\" \"$INTEG_HEX\" | cloister secret wrap --kind esp \\
      --provisioning-key pk --tenant 1 --direction out --spi 0x1001 \\
      --encryption aes-cbc-256 --integrity hmac-sha2-256-128 --out to-site.blob

The [[sa]] table then says key = { wrapped = \"to-site.blob\" }. Wrap fresh outbound keys for
every start of a static SA: it starts at sequence number 1 again.";

/// What binds ESP SA keys to their SA (`--kind esp` only).
#[derive(Debug, clap::Args)]
struct EspArgs {
    /// ESP: `in` (the gateway receives with the SA) or `out` (it sends with it).
    #[arg(long)]
    direction: Option<String>,
    /// ESP: the SA's SPI (decimal or 0x hex).
    #[arg(long, value_parser = parse_spi)]
    spi: Option<u32>,
    /// ESP: aes-gcm-16-128, aes-gcm-16-256, chacha20-poly1305, aes-cbc-128 or aes-cbc-256.
    #[arg(long)]
    encryption: Option<String>,
    /// ESP with AES-CBC: hmac-sha2-256-128, hmac-sha2-384-192 or hmac-sha2-512-256.
    #[arg(long)]
    integrity: Option<String>,
}

fn parse_spi(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| "not a 32-bit number".to_owned())
}

/// Runs `cloister secret`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let What::Wrap { provisioning_key, tenant, kind, out, esp } = args.what;
    let kind = match kind.as_str() {
        "psk" => SecretKind::PreSharedKey,
        "rsa" => SecretKind::RsaPrivateKey,
        "ecdsa-p256" => SecretKind::EcdsaP256PrivateKey,
        "ecdsa-p384" => SecretKind::EcdsaP384PrivateKey,
        "esp" => SecretKind::EspSaKeys,
        _ => anyhow::bail!("--kind must be psk, rsa, ecdsa-p256, ecdsa-p384 or esp"),
    };
    let esp_params = if kind == SecretKind::EspSaKeys {
        Some(esp_params(&esp)?)
    } else {
        let given =
            [esp.direction.is_some(), esp.spi.is_some(), esp.encryption.is_some(), esp.integrity.is_some()];
        anyhow::ensure!(
            !given.contains(&true),
            "--direction, --spi, --encryption and --integrity are for --kind esp"
        );
        None
    };
    let key = gateway::config::read_provisioning_key(&provisioning_key)?;
    let key = ProvisioningKey::from_bytes(*key);
    let mut secret = Zeroizing::new(Vec::new());
    std::io::stdin().take(1 << 16).read_to_end(&mut secret).context("reading the secret from stdin")?;
    if kind == SecretKind::PreSharedKey {
        // A PSK typed or echoed into a pipe ends with a newline that is not part of it.
        while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            secret.pop();
        }
    }
    anyhow::ensure!(!secret.is_empty(), "the secret on stdin is empty");
    let blob = match esp_params {
        Some(p) => {
            let (enc, integ) = esp_keys(&secret, p.suite.cipher.is_aead())?;
            enclave::provision::wrap_esp_sa_keys(&key, TenantId(tenant), &p, &enc, &integ)
                .context("the ESP keys do not fit the transform")?
        }
        None => enclave::provision::wrap_secret(&key, TenantId(tenant), kind, &secret)?,
    };
    write_private(&out, &blob).with_context(|| format!("writing {}", out.display()))?;
    println!("wrapped the secret for tenant {tenant} into {}", out.display());
    Ok(())
}

/// The SA that `--kind esp` keys are bound to.
fn esp_params(a: &EspArgs) -> anyhow::Result<EspSaParams> {
    let inbound = match a.direction.as_deref() {
        Some("in") => true,
        Some("out") => false,
        Some(_) => anyhow::bail!("--direction must be in or out"),
        None => anyhow::bail!("--kind esp needs --direction in|out"),
    };
    let spi = a.spi.context("--kind esp needs --spi")?;
    anyhow::ensure!(spi != 0, "--spi 0 is reserved (RFC 4303 section 2.1)");
    let encryption = a.encryption.as_deref().context("--kind esp needs --encryption")?;
    let suite = dataplane::config::suite_by_name(encryption, a.integrity.as_deref())
        .map_err(|(field, why)| anyhow::anyhow!("--{field}: {why}"))?;
    // ESN is not bound: the same keys serve either way.
    Ok(EspSaParams { spi, inbound, esn: false, suite })
}

/// Key bytes, wiped when dropped.
type KeyBytes = Zeroizing<Vec<u8>>;

/// The hex keys on stdin: the encryption key, then (CBC) the integrity key. Messages name
/// the part, never a value.
fn esp_keys(text: &[u8], aead: bool) -> anyhow::Result<(KeyBytes, KeyBytes)> {
    let words: Vec<&[u8]> = text.split(u8::is_ascii_whitespace).filter(|w| !w.is_empty()).collect();
    let want = if aead { 1 } else { 2 };
    anyhow::ensure!(
        words.len() == want,
        "stdin must hold {want} hex key(s) for this transform (encryption{}), found {}",
        if aead { " key with its salt" } else { ", then integrity" },
        words.len()
    );
    let enc = unhex(words.first().copied().unwrap_or_default()).context("the encryption key is not hex")?;
    let integ = match words.get(1) {
        Some(w) => unhex(w).context("the integrity key is not hex")?,
        None => Zeroizing::new(Vec::new()),
    };
    Ok((enc, integ))
}

fn unhex(s: &[u8]) -> Option<KeyBytes> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = Zeroizing::new(Vec::with_capacity(s.len() / 2));
    for pair in s.chunks(2) {
        out.push(digit(*pair.first()?)? << 4 | digit(*pair.get(1)?)?);
    }
    Some(out)
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esp_keys_are_hex_words_one_or_two() {
        let (e, i) = esp_keys(b"0011\n", true).unwrap();
        assert_eq!((&e[..], &i[..]), (&[0u8, 0x11][..], &[][..]));
        let (e, i) = esp_keys(b"  aa \n BBcc\n", false).unwrap();
        assert_eq!((&e[..], &i[..]), (&[0xaa_u8][..], &[0xbb_u8, 0xcc][..]));
        assert!(esp_keys(b"aa bb", true).is_err());
        assert!(esp_keys(b"aa", false).is_err());
        let e = esp_keys(b"zz1234", true).unwrap_err().to_string();
        assert!(!e.contains("zz1234"), "{e}");
        assert_eq!(parse_spi("0x1001"), Ok(0x1001));
        assert_eq!(parse_spi("4097"), Ok(4097));
        assert!(parse_spi("0x1_0000_0000").is_err());
    }
}
