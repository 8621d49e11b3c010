//! HSM key labels: what a key is for and which enclave it serves, readable in the HSM itself.
//!
//! The label is how an HSM key is found (TEEnder §3.5: "the key is selected by label so it is
//! never moved to the application") and what binds it to an enclave measurement:
//!
//! - one-time migration key: `cloister-mig/<measurement-hex>/<migration-id>` (§3.5.1), where
//!   the migration id comes from HSM randomness, so every migration has its own key and a
//!   package made for one migration fits no other;
//! - backup key: `cloister-bak/<measurement-hex>/<YYYY-MM-DD>` (§3.5.2);
//! - a destination public key the security officer trusted for a backup restore:
//!   `cloister-trust/<measurement-hex>/<spki-fingerprint-hex>`.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{MigrateError, Result};

const MIGRATION_PREFIX: &str = "cloister-mig";
const BACKUP_PREFIX: &str = "cloister-bak";
const BULK_PREFIX: &str = "cloister-blk";
pub(crate) const TRUST_PREFIX: &str = "cloister-trust";

/// An enclave measurement (SGX MRENCLAVE: 32 bytes; TDX MRTD, SEV-SNP, Cloister's software
/// measurement: 48 bytes). Public, so `Debug` shows it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Measurement(Vec<u8>);

impl Measurement {
    /// Accepts 16 to 64 bytes: every measurement format in use, and nothing that could make a
    /// label absurdly long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if (16..=64).contains(&bytes.len()) {
            Ok(Self(bytes.to_vec()))
        } else {
            Err(MigrateError::BadMeasurement)
        }
    }

    /// Parses lowercase hex as written in labels (uppercase is refused, so that one
    /// measurement has exactly one label).
    pub fn from_hex(hex: &str) -> Result<Self> {
        Self::from_bytes(&decode_hex(hex).ok_or(MigrateError::BadMeasurement)?)
    }

    /// The measurement bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&encode_hex(&self.0))
    }
}

impl fmt::Debug for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Measurement({self})")
    }
}

/// The per-migration part of a one-time key's label: 16 bytes of HSM randomness, in hex.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MigrationId(String);

impl MigrationId {
    /// Derives the id from HSM randomness. SHA-256 with a domain tag keeps the raw RNG output
    /// out of labels that every HSM user can list.
    pub(crate) fn from_random(random: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new().chain_update(b"cloister-migration-id-v1").chain_update(random).finalize();
        Self(encode_hex(digest.get(..16).unwrap_or(&digest)))
    }

    fn parse(s: &str) -> Option<Self> {
        (s.len() == 32 && decode_hex(s).is_some()).then(|| Self(s.to_owned()))
    }

    /// The id as written in the label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A calendar date (UTC) for backup key labels.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct BackupDate {
    year: u16,
    month: u8,
    day: u8,
}

impl BackupDate {
    /// A validated date.
    pub fn from_ymd(year: u16, month: u8, day: u8) -> Result<Self> {
        let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return Err(MigrateError::BadDate),
        };
        if (1..=9999).contains(&year) && (1..=days).contains(&day) {
            Ok(Self { year, month, day })
        } else {
            Err(MigrateError::BadDate)
        }
    }

    /// Today in UTC, from the system clock.
    pub fn today() -> Self {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Self::from_unix_days(secs / 86_400)
    }

    /// Civil date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`), so that
    /// the crate needs no calendar dependency.
    fn from_unix_days(days: u64) -> Self {
        let z = days.min(2_900_000) + 719_468; // cap keeps the year within u16
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        Self {
            year: u16::try_from(year).unwrap_or(u16::MAX),
            month: u8::try_from(month).unwrap_or(1),
            day: u8::try_from(day).unwrap_or(1),
        }
    }
}

impl fmt::Display for BackupDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

impl FromStr for BackupDate {
    type Err = MigrateError;

    fn from_str(s: &str) -> Result<Self> {
        let b = s.as_bytes();
        if b.len() != 10 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
            return Err(MigrateError::BadDate);
        }
        let num = |r: std::ops::Range<usize>| -> Result<u16> {
            let part = s.get(r).ok_or(MigrateError::BadDate)?;
            if !part.bytes().all(|c| c.is_ascii_digit()) {
                return Err(MigrateError::BadDate);
            }
            part.parse().map_err(|_| MigrateError::BadDate)
        };
        let month = u8::try_from(num(5..7)?).map_err(|_| MigrateError::BadDate)?;
        let day = u8::try_from(num(8..10)?).map_err(|_| MigrateError::BadDate)?;
        Self::from_ymd(num(0..4)?, month, day)
    }
}

/// The label of an HSM key pair this crate manages.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum KeyLabel {
    /// One-time migration key (TEEnder §3.5.1): deleted after a confirmed restore.
    Migration {
        /// The enclave it may be restored into.
        measurement: Measurement,
        /// Derived from HSM randomness, one per migration.
        id: MigrationId,
    },
    /// Backup key (TEEnder §3.5.2): encrypt-only until the security officer authorizes a
    /// restore.
    Backup {
        /// The enclave it may be restored into.
        measurement: Measurement,
        /// The backup's date.
        date: BackupDate,
    },
    /// AES key with which the HSM encrypts a whole package (TEEnder's original scheme, kept
    /// as the "HSM encrypts the bulk" comparison, `crate::flow`): deleted like a one-time key.
    Bulk {
        /// The enclave it may be restored into.
        measurement: Measurement,
        /// Derived from HSM randomness, one per migration.
        id: MigrationId,
    },
}

impl KeyLabel {
    /// The enclave measurement the key is bound to.
    pub fn measurement(&self) -> &Measurement {
        match self {
            Self::Migration { measurement, .. }
            | Self::Backup { measurement, .. }
            | Self::Bulk { measurement, .. } => measurement,
        }
    }

    /// Whether this is a backup key.
    pub fn is_backup(&self) -> bool {
        matches!(self, Self::Backup { .. })
    }

    /// Whether this is an HSM-resident AES key for bulk encryption (not an RSA pair).
    pub fn is_bulk(&self) -> bool {
        matches!(self, Self::Bulk { .. })
    }
}

impl fmt::Display for KeyLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Migration { measurement, id } => write!(f, "{MIGRATION_PREFIX}/{measurement}/{}", id.0),
            Self::Backup { measurement, date } => write!(f, "{BACKUP_PREFIX}/{measurement}/{date}"),
            Self::Bulk { measurement, id } => write!(f, "{BULK_PREFIX}/{measurement}/{}", id.0),
        }
    }
}

impl FromStr for KeyLabel {
    type Err = MigrateError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || MigrateError::BadLabel { label: s.chars().take(200).collect() };
        let mut parts = s.split('/');
        let (Some(kind), Some(measurement), Some(last), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let measurement = Measurement::from_hex(measurement).map_err(|_| bad())?;
        match kind {
            MIGRATION_PREFIX => {
                Ok(Self::Migration { measurement, id: MigrationId::parse(last).ok_or_else(bad)? })
            }
            BACKUP_PREFIX => Ok(Self::Backup { measurement, date: last.parse().map_err(|_| bad())? }),
            BULK_PREFIX => Ok(Self::Bulk { measurement, id: MigrationId::parse(last).ok_or_else(bad)? }),
            _ => Err(bad()),
        }
    }
}

pub(crate) fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Lowercase hex only; `None` on odd length or any other character.
pub(crate) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    // chunks_exact(2) yields exactly two bytes per chunk, so the pattern always matches.
    b.chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some(nibble(*hi)? << 4 | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Measurement {
        Measurement::from_bytes(&[0xab; 48]).unwrap()
    }

    #[test]
    fn migration_label_round_trips() {
        let label = KeyLabel::Migration { measurement: m(), id: MigrationId::from_random(&[7; 32]) };
        let text = label.to_string();
        assert!(text.starts_with(&format!("cloister-mig/{}/", "ab".repeat(48))));
        assert_eq!(text.parse::<KeyLabel>().unwrap(), label);
    }

    #[test]
    fn bulk_label_round_trips() {
        let label = KeyLabel::Bulk { measurement: m(), id: MigrationId::from_random(&[9; 32]) };
        assert!(label.to_string().starts_with("cloister-blk/"));
        assert_eq!(label.to_string().parse::<KeyLabel>().unwrap(), label);
        assert!(label.is_bulk() && !label.is_backup());
    }

    #[test]
    fn backup_label_round_trips() {
        let date = BackupDate::from_ymd(2024, 2, 29).unwrap();
        let label = KeyLabel::Backup { measurement: m(), date };
        assert_eq!(label.to_string(), format!("cloister-bak/{}/2024-02-29", "ab".repeat(48)));
        assert_eq!(label.to_string().parse::<KeyLabel>().unwrap(), label);
    }

    #[test]
    fn malformed_labels_are_refused() {
        let hex = "ab".repeat(48);
        for bad in [
            String::new(),
            "cloister-mig".into(),
            format!("cloister-mig/{hex}"),
            format!("cloister-mig/{hex}/short"),
            format!("cloister-mig/{}/{}", "AB".repeat(48), "0".repeat(32)),
            format!("cloister-bak/{hex}/2023-02-29"),
            format!("cloister-bak/{hex}/2024-1-01"),
            format!("cloister-bak/{hex}/2024-01-01/x"),
            format!("other/{hex}/2024-01-01"),
            format!("cloister-bak/{}/2024-01-01", "ab".repeat(8)),
        ] {
            assert!(bad.parse::<KeyLabel>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn civil_date_from_days_matches_known_dates() {
        assert_eq!(BackupDate::from_unix_days(0).to_string(), "1970-01-01");
        assert_eq!(BackupDate::from_unix_days(11_016).to_string(), "2000-02-29");
        assert_eq!(BackupDate::from_unix_days(19_782).to_string(), "2024-02-29");
        assert_eq!(BackupDate::from_unix_days(20_454).to_string(), "2026-01-01");
    }

    #[test]
    fn hex_is_lowercase_only() {
        assert_eq!(decode_hex("00ff10"), Some(vec![0, 0xff, 0x10]));
        assert_eq!(decode_hex("0F"), None);
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(encode_hex(&[0xde, 0xad]), "dead");
    }
}
