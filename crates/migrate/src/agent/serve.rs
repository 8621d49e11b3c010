//! The agent's side: the only process that reads the HSM user PIN and holds the PKCS#11
//! session. It answers the gateway over its standard input and output, one request at a
//! time, and releases a data key only to a destination whose evidence it has verified
//! itself against the measurement in the key's label.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use attest::migration::verify_destination;
use enclave::migration::DestinationKey;
use enclave::process as harden;
use enclave::TenantId;
use zeroize::Zeroizing;

use super::wire::{self, Request, Response};
use crate::audit::AuditLog;
use crate::error::{MigrateError, Result};
use crate::flow::enclave_measurement;
use crate::hsm::{Hsm, HsmConfig, OaepHash, Pin};
use crate::label::{decode_hex, encode_hex, BackupDate, KeyLabel};

/// What the agent is started with (`--flag value` pairs on its command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// The PKCS#11 module.
    pub module: PathBuf,
    /// The token's label.
    pub token_label: String,
    /// The file with the user PIN (mode 0600 or stricter).
    pub pin_file: PathBuf,
    /// RSA-OAEP hash the HSM uses for wrapping.
    pub oaep: OaepHash,
    /// RSA modulus bits of new HSM keys.
    pub rsa_bits: u32,
    /// The audit log.
    pub audit: PathBuf,
    /// The platform public key destination evidence must verify under (this host's: the
    /// agent rewraps only to enclaves on the host it serves).
    pub platform_key: Vec<u8>,
}

impl AgentSettings {
    /// The command line that [`AgentSettings::parse`] reads back.
    pub fn to_args(&self) -> Vec<OsString> {
        self.flags().into_iter().flat_map(|(k, v)| [OsString::from(k), v]).collect()
    }

    fn flags(&self) -> [(&'static str, OsString); 7] {
        let oaep = match self.oaep {
            OaepHash::Sha1 => "sha1",
            OaepHash::Sha256 => "sha256",
        };
        [
            ("--module", self.module.clone().into_os_string()),
            ("--token-label", self.token_label.clone().into()),
            ("--pin-file", self.pin_file.clone().into_os_string()),
            ("--oaep", oaep.into()),
            ("--rsa-bits", self.rsa_bits.to_string().into()),
            ("--audit", self.audit.clone().into_os_string()),
            ("--platform-key", encode_hex(&self.platform_key).into()),
        ]
    }

    /// [`Self::to_args`] without `--platform-key`, for the platform process, which adds its
    /// own key: an agent it starts trusts the evidence of that platform only, whatever the
    /// service says.
    pub fn args_for_platform(&self) -> Vec<OsString> {
        self.flags()
            .into_iter()
            .filter(|(k, _)| *k != "--platform-key")
            .flat_map(|(k, v)| [OsString::from(k), v])
            .collect()
    }

    /// Parses the agent's command line; every flag is required once.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> core::result::Result<Self, String> {
        let mut args = args.into_iter();
        let (mut module, mut token, mut pin, mut oaep, mut bits, mut audit, mut platform) =
            (None, None, None, None, None, None, None);
        while let Some(flag) = args.next() {
            let flag = flag.to_string_lossy().into_owned();
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let text = || value.to_str().map(str::to_owned).ok_or_else(|| format!("{flag}: not UTF-8"));
            let slot = match flag.as_str() {
                "--module" => &mut module,
                "--token-label" => &mut token,
                "--pin-file" => &mut pin,
                "--oaep" => &mut oaep,
                "--rsa-bits" => &mut bits,
                "--audit" => &mut audit,
                "--platform-key" => &mut platform,
                other => return Err(format!("unknown flag {other}")),
            };
            if slot.replace(text()?).is_some() {
                return Err(format!("{flag} given twice"));
            }
        }
        let need = |v: Option<String>, flag: &str| v.ok_or_else(|| format!("{flag} is required"));
        let oaep = match need(oaep, "--oaep")?.as_str() {
            "sha1" => OaepHash::Sha1,
            "sha256" => OaepHash::Sha256,
            other => return Err(format!("--oaep {other}: sha1 or sha256")),
        };
        let rsa_bits = need(bits, "--rsa-bits")?.parse().map_err(|_| "--rsa-bits: a number".to_owned())?;
        let platform = need(platform, "--platform-key")?;
        let platform_key =
            decode_hex(&platform).filter(|k| !k.is_empty()).ok_or("--platform-key: lowercase hex")?;
        Ok(Self {
            module: need(module, "--module")?.into(),
            token_label: need(token, "--token-label")?,
            pin_file: need(pin, "--pin-file")?.into(),
            oaep,
            rsa_bits,
            audit: need(audit, "--audit")?.into(),
            platform_key,
        })
    }
}

/// Reads the PIN file, refusing one that group or others may read.
fn read_pin(path: &Path) -> core::result::Result<Pin, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("PIN file {}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("PIN file {} is readable by others: chmod 600 it", path.display()));
    }
    let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| format!("PIN file {}: {e}", path.display()))?);
    let text = core::str::from_utf8(&bytes).map_err(|_| format!("PIN file {}: not UTF-8", path.display()))?;
    Ok(Pin::new(text.trim()))
}

/// The one check that guards every release: `destination`'s evidence verifies under the
/// platform key, is for `tenant`, and names the measurement the key `label` is bound to.
fn check_destination(
    label: &KeyLabel,
    destination: &DestinationKey,
    platform_key: &[u8],
    tenant: TenantId,
) -> Result<()> {
    verify_destination(destination, platform_key, &enclave_measurement(label.measurement())?, tenant)?;
    Ok(())
}

/// Answers one request with the HSM.
pub fn handle(hsm: &Hsm, platform_key: &[u8], request: Request) -> Result<Vec<Vec<u8>>> {
    match request {
        Request::MigrationKey { measurement } => {
            let label = hsm.create_migration_key(&measurement)?;
            let spki = hsm.public_key(&label)?;
            Ok(vec![label.to_string().into_bytes(), spki])
        }
        Request::BackupKey { measurement } => {
            let label = match hsm.create_backup_key(&measurement, BackupDate::today()) {
                Ok(l) => l,
                // Today's key for this measurement exists: backups of the day share it.
                Err(MigrateError::KeyExists { label }) => label,
                Err(e) => return Err(e),
            };
            let spki = hsm.public_key(&label)?;
            let certificate = hsm.certify_backup_key(&label)?;
            Ok(vec![label.to_string().into_bytes(), spki, certificate])
        }
        Request::BackupRoot => Ok(vec![hsm.backup_root()?]),
        Request::Rewrap { label, wrapped, destination, tenant } => {
            check_destination(&label, &destination, platform_key, tenant)?;
            Ok(vec![hsm.rewrap(&label, &wrapped, &destination.spki_der, label.measurement())?])
        }
        Request::RestoreBackup { label, officer_pin, wrapped, destination, tenant } => {
            check_destination(&label, &destination, platform_key, tenant)?;
            let officer = Pin::new(officer_pin.0.as_str());
            let spki = &destination.spki_der;
            hsm.authorize_backup_restore(&label, &officer, spki, label.measurement())?;
            let rewrapped = hsm.rewrap(&label, &wrapped, spki, label.measurement());
            // Encrypt-only again, and the destination key untrusted, whatever happened.
            let revoked = hsm.revoke_backup_restore(&label, &officer, spki);
            let rewrapped = rewrapped?;
            revoked?;
            Ok(vec![rewrapped])
        }
        Request::DeleteKey { label } => {
            hsm.delete_key(&label)?;
            Ok(Vec::new())
        }
    }
}

/// Answers requests from `input` on `output` until `input` ends. A frame that cannot be
/// read (cut short, too long) ends the loop with an error: the pipe is out of step.
pub fn serve(hsm: &Hsm, platform_key: &[u8], input: &mut impl Read, output: &mut impl Write) -> Result<()> {
    let io = |what| move |source| MigrateError::AgentIo { what, source };
    while let Some(body) = wire::read_frame(input).map_err(io("reading a request"))? {
        let response: Response = Request::decode(&body)
            .and_then(|request| handle(hsm, platform_key, request))
            .map_err(|e| e.to_string());
        let frame = wire::encode_response(&response)?;
        wire::write_frame(output, &frame).map_err(io("writing a response"))?;
    }
    Ok(())
}

/// The agent process: hardens itself, reads the PIN, opens the HSM, says it is ready (or
/// why not) on standard output, then serves until the gateway closes its standard input.
pub fn main(args: impl IntoIterator<Item = OsString>) -> core::result::Result<(), String> {
    let settings = AgentSettings::parse(args)?;
    let mut stdout = std::io::stdout().lock();
    let ready = start(&settings);
    let status: Response = ready.as_ref().map(|_| Vec::new()).map_err(Clone::clone);
    let frame = wire::encode_response(&status).map_err(|e| e.to_string())?;
    wire::write_frame(&mut stdout, &frame).map_err(|e| format!("writing to the gateway: {e}"))?;
    let hsm = ready?;
    serve(&hsm, &settings.platform_key, &mut std::io::stdin().lock(), &mut stdout).map_err(|e| e.to_string())
}

fn start(settings: &AgentSettings) -> core::result::Result<Hsm, String> {
    // No core dumps, no ptrace by the gateway's user, no PIN or key page in swap.
    harden::non_dumpable().map_err(|e| e.to_string())?;
    harden::lock_memory().map_err(|e| e.to_string())?;
    let pin = read_pin(&settings.pin_file)?;
    let mut config = HsmConfig::new(settings.token_label.clone());
    config.module.clone_from(&settings.module);
    config.oaep_hash = settings.oaep;
    config.rsa_bits = settings.rsa_bits;
    let audit = AuditLog::open(&settings.audit).map_err(|e| e.to_string())?;
    Hsm::open(config, pin, audit).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AgentSettings {
        AgentSettings {
            module: "/usr/lib/m.so".into(),
            token_label: "t".into(),
            pin_file: "/etc/cloister/pin".into(),
            oaep: OaepHash::Sha1,
            rsa_bits: 3072,
            audit: "/var/lib/cloister/audit.jsonl".into(),
            platform_key: vec![1, 2, 0xab],
        }
    }

    #[test]
    fn settings_round_trip_through_the_command_line() {
        let s = settings();
        assert_eq!(AgentSettings::parse(s.to_args()).unwrap(), s);
    }

    #[test]
    fn bad_command_lines_are_refused_with_the_flag() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let mut full = settings().to_args();
        assert!(AgentSettings::parse(full.iter().take(4).cloned()).unwrap_err().contains("required"));
        full.extend(args(&["--oaep", "sha1"]));
        assert!(AgentSettings::parse(full).unwrap_err().contains("twice"));
        assert!(AgentSettings::parse(args(&["--pin", "x"])).unwrap_err().contains("unknown flag"));
        assert!(AgentSettings::parse(args(&["--module"])).unwrap_err().contains("needs a value"));
        let mut s = settings().to_args();
        let at = s.iter().position(|a| a == "--platform-key").unwrap() + 1;
        s[at] = "xyz".into();
        assert!(AgentSettings::parse(s).unwrap_err().contains("hex"));
    }

    #[test]
    fn a_pin_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pin");
        std::fs::write(&path, "1234\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_pin(&path).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_pin(&path).is_ok());
        assert!(read_pin(&dir.path().join("none")).is_err());
    }
}
