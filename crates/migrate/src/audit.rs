//! Hash-chained, append-only audit log of every HSM operation (TEEnder R_S5).
//!
//! One JSON object per line, so operators can read it with `jq`:
//!
//! ```text
//! {"seq":0,"time":1732240000,"op":"create-migration-key","label":"cloister-mig/…","outcome":"ok","detail":"",
//!  "prev_hash":"000…0","hash":"3f…"}
//! ```
//!
//! `hash` = SHA-256 over a fixed binary encoding of the other fields (not over the JSON text,
//! so that re-serialising a line cannot change its hash):
//! `"cloister-audit-v1" ‖ seq (u64 BE) ‖ time (u64 BE) ‖ op ‖ label ‖ outcome ‖ detail ‖ prev_hash`,
//! each string prefixed by its length (u32 BE). The first entry's `prev_hash` is 32 zero bytes.
//!
//! [`verify`] walks the chain and names the first line that was edited, removed, inserted,
//! reordered or cut. What a chain alone cannot show is the *tail* cut off cleanly (the last
//! entries deleted): for that, keep the head that [`verify`] and [`AuditLog::head`] return
//! somewhere the gateway host cannot write (the HSM's own audit, the state store, an operator's
//! ticket) and compare it.
//!
//! Entries hold labels, outcomes and error texts, never PINs or key bytes: errors of this
//! crate carry none (see `error.rs`).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ChainFault, MigrateError, Result};
use crate::label::{decode_hex, encode_hex};

const DOMAIN: &[u8] = b"cloister-audit-v1";

/// What an audited operation did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Operation {
    /// Opening the module, finding the token, logging in.
    Open,
    /// Creating a one-time migration key pair.
    CreateMigrationKey,
    /// Creating a backup key pair.
    CreateBackupKey,
    /// Exporting a public key (SPKI) for the source enclave to wrap its data key with.
    ExportPublicKey,
    /// Listing the managed keys.
    ListKeys,
    /// Unwrapping a data key inside the HSM and wrapping it again for a destination enclave.
    Rewrap,
    /// The security officer's step that lets a backup key be used for one restore.
    AuthorizeBackupRestore,
    /// Withdrawing that authorization after the restore.
    RevokeBackupRestore,
    /// Deleting a key pair (a one-time key after a confirmed restore).
    DeleteKey,
    /// Creating an HSM-resident AES key for bulk encryption.
    CreateBulkKey,
    /// Encrypting a whole package in the HSM.
    BulkEncrypt,
    /// Decrypting a whole package in the HSM.
    BulkDecrypt,
    /// Creating the backup root, or exporting its public key.
    BackupRoot,
    /// The backup root's signature that makes a backup key one for a measurement.
    CertifyBackupKey,
}

impl Operation {
    /// The name written in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::CreateMigrationKey => "create-migration-key",
            Self::CreateBackupKey => "create-backup-key",
            Self::ExportPublicKey => "export-public-key",
            Self::ListKeys => "list-keys",
            Self::Rewrap => "rewrap",
            Self::AuthorizeBackupRestore => "authorize-backup-restore",
            Self::RevokeBackupRestore => "revoke-backup-restore",
            Self::DeleteKey => "delete-key",
            Self::CreateBulkKey => "create-bulk-key",
            Self::BulkEncrypt => "bulk-encrypt",
            Self::BulkDecrypt => "bulk-decrypt",
            Self::BackupRoot => "backup-root",
            Self::CertifyBackupKey => "certify-backup-key",
        }
    }
}

/// One entry as stored (one JSON line).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Position in the chain, from 0.
    pub seq: u64,
    /// Seconds since the Unix epoch (informational: the chain, not the clock, orders entries).
    pub time: u64,
    /// [`Operation::as_str`].
    pub op: String,
    /// The HSM key label concerned (empty when none, e.g. a failed login).
    pub label: String,
    /// `"ok"` or `"failed"`.
    pub outcome: String,
    /// The error on failure; on success a non-secret detail (destination key fingerprint).
    pub detail: String,
    /// The previous entry's `hash`, hex.
    pub prev_hash: String,
    /// This entry's hash, hex.
    pub hash: String,
}

impl Entry {
    fn compute_hash(&self, prev: &[u8; 32]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update(self.seq.to_be_bytes());
        h.update(self.time.to_be_bytes());
        for field in [&self.op, &self.label, &self.outcome, &self.detail] {
            // Lengths make the encoding unambiguous ("ab"+"c" ≠ "a"+"bc"); a field over 4 GiB
            // cannot come from this crate, and saturating keeps the function total.
            h.update(u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
            h.update(field.as_bytes());
        }
        h.update(prev);
        h.finalize().into()
    }
}

/// The chain's head after the last entry: compare it with a copy kept off the host to detect a
/// cut-off tail.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AuditHead {
    /// Number of entries.
    pub entries: u64,
    /// Hash of the last entry (zeros for an empty log).
    pub hash: [u8; 32],
}

/// An open audit log, appending to the end of a verified chain.
///
/// One writer per file: two processes appending to the same file would fork the chain (which
/// [`verify`] then reports). Each entry is written with one `write` on an `O_APPEND` file and
/// synced before the operation's result is returned.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
    head: AuditHead,
}

impl AuditLog {
    /// Opens (or creates) the log, verifying the existing chain first: appending to a broken
    /// chain would make the break look like later history.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let io = |source| MigrateError::AuditIo { path: path.clone(), source };
        let file = OpenOptions::new().create(true).append(true).read(true).open(&path).map_err(io)?;
        let head = verify(&path)?;
        Ok(Self { path, file, head })
    }

    /// The file this log writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current head of the chain.
    pub fn head(&self) -> AuditHead {
        self.head
    }

    /// Appends one entry and syncs it to disk.
    pub fn append(
        &mut self,
        op: Operation,
        label: &str,
        outcome: std::result::Result<&str, &MigrateError>,
    ) -> Result<()> {
        let time = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (outcome, detail) = match outcome {
            Ok(detail) => ("ok", detail.to_owned()),
            Err(err) => ("failed", err.to_string()),
        };
        let mut entry = Entry {
            seq: self.head.entries,
            time,
            op: op.as_str().to_owned(),
            label: label.to_owned(),
            outcome: outcome.to_owned(),
            detail,
            prev_hash: encode_hex(&self.head.hash),
            hash: String::new(),
        };
        let hash = entry.compute_hash(&self.head.hash);
        entry.hash = encode_hex(&hash);
        let io = |source| MigrateError::AuditIo { path: self.path.clone(), source };
        let mut line = serde_json::to_vec(&entry).map_err(|e| io(e.into()))?;
        line.push(b'\n');
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.head = AuditHead { entries: self.head.entries + 1, hash };
        Ok(())
    }
}

/// Verifies the whole chain of the log at `path` and returns its head.
///
/// Detects an edited entry (hash mismatch), a removed, inserted or reordered entry (sequence
/// gap or `prev_hash` mismatch) and a line cut in the middle (unparsable). A missing file is an
/// error; an empty file is an empty chain.
pub fn verify(path: impl AsRef<Path>) -> Result<AuditHead> {
    let path = path.as_ref();
    let io = |source| MigrateError::AuditIo { path: path.to_owned(), source };
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut head = AuditHead { entries: 0, hash: [0; 32] };
    for (index, line) in reader.split(b'\n').enumerate() {
        let line = line.map_err(io)?;
        let line_no = u64::try_from(index).unwrap_or(u64::MAX).saturating_add(1);
        let fault = |fault| MigrateError::AuditChain { path: path.to_owned(), line: line_no, fault };
        let entry: Entry = serde_json::from_slice(&line).map_err(|_| fault(ChainFault::Unparsable))?;
        if entry.seq != head.entries {
            return Err(fault(ChainFault::SequenceGap { expected: head.entries, found: entry.seq }));
        }
        if decode_hex(&entry.prev_hash).as_deref() != Some(&head.hash[..]) {
            return Err(fault(ChainFault::PrevHashMismatch));
        }
        let hash = entry.compute_hash(&head.hash);
        if decode_hex(&entry.hash).as_deref() != Some(&hash[..]) {
            return Err(fault(ChainFault::HashMismatch));
        }
        head = AuditHead { entries: head.entries + 1, hash };
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(n: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut log = AuditLog::open(&path).unwrap();
        for i in 0..n {
            let label = format!("cloister-mig/{i}");
            if i % 3 == 2 {
                let err = MigrateError::WrongPin { role: "user" };
                log.append(Operation::Open, "", Err(&err)).unwrap();
            } else {
                log.append(Operation::Rewrap, &label, Ok("destination ab12")).unwrap();
            }
        }
        (dir, path)
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
    }

    fn write_lines(path: &Path, lines: &[String]) {
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).unwrap();
    }

    fn fault_at(path: &Path) -> (u64, ChainFault) {
        match verify(path) {
            Err(MigrateError::AuditChain { line, fault, .. }) => (line, fault),
            other => panic!("expected a chain fault, got {other:?}"),
        }
    }

    #[test]
    fn intact_chain_verifies_and_reopens_at_its_head() {
        let (_dir, path) = log_with(5);
        let head = verify(&path).unwrap();
        assert_eq!(head.entries, 5);
        let mut log = AuditLog::open(&path).unwrap();
        assert_eq!(log.head(), head);
        log.append(Operation::DeleteKey, "x", Ok("")).unwrap();
        assert_eq!(verify(&path).unwrap().entries, 6);
    }

    #[test]
    fn empty_log_is_an_empty_chain() {
        let (_dir, path) = log_with(0);
        assert_eq!(verify(&path).unwrap(), AuditHead { entries: 0, hash: [0; 32] });
    }

    #[test]
    fn failures_are_recorded_with_their_error() {
        let (_dir, path) = log_with(3);
        let entry: Entry = serde_json::from_str(&lines(&path)[2]).unwrap();
        assert_eq!(entry.outcome, "failed");
        assert_eq!(entry.op, "open");
        assert!(entry.detail.contains("PIN"), "{}", entry.detail);
    }

    #[test]
    fn edited_entry_is_detected() {
        let (_dir, path) = log_with(4);
        let mut l = lines(&path);
        l[1] = l[1].replace("\"outcome\":\"ok\"", "\"outcome\":\"OK\"");
        write_lines(&path, &l);
        assert_eq!(fault_at(&path), (2, ChainFault::HashMismatch));
    }

    #[test]
    fn edited_entry_with_recomputed_hash_breaks_the_next_link() {
        let (_dir, path) = log_with(4);
        let mut l = lines(&path);
        let mut entry: Entry = serde_json::from_str(&l[1]).unwrap();
        entry.label = "cloister-mig/forged".into();
        let prev: [u8; 32] = decode_hex(&entry.prev_hash).unwrap().try_into().unwrap();
        entry.hash = encode_hex(&entry.compute_hash(&prev));
        l[1] = serde_json::to_string(&entry).unwrap();
        write_lines(&path, &l);
        assert_eq!(fault_at(&path), (3, ChainFault::PrevHashMismatch));
    }

    #[test]
    fn removed_entry_is_detected() {
        let (_dir, path) = log_with(4);
        let mut l = lines(&path);
        l.remove(1);
        write_lines(&path, &l);
        assert_eq!(fault_at(&path), (2, ChainFault::SequenceGap { expected: 1, found: 2 }));
    }

    #[test]
    fn reordered_entries_are_detected() {
        let (_dir, path) = log_with(4);
        let mut l = lines(&path);
        l.swap(1, 2);
        write_lines(&path, &l);
        assert_eq!(fault_at(&path), (2, ChainFault::SequenceGap { expected: 1, found: 2 }));
    }

    #[test]
    fn entry_cut_in_the_middle_is_detected() {
        let (_dir, path) = log_with(4);
        let mut l = lines(&path);
        let half = l[2].len() / 2;
        l[2].truncate(half);
        write_lines(&path, &l);
        assert_eq!(fault_at(&path), (3, ChainFault::Unparsable));
    }

    #[test]
    fn appending_to_a_broken_chain_is_refused() {
        let (_dir, path) = log_with(3);
        let mut l = lines(&path);
        l.remove(0);
        write_lines(&path, &l);
        assert!(matches!(AuditLog::open(&path), Err(MigrateError::AuditChain { line: 1, .. })));
    }

    #[test]
    fn hash_covers_every_field() {
        let base = Entry {
            seq: 1,
            time: 2,
            op: "rewrap".into(),
            label: "l".into(),
            outcome: "ok".into(),
            detail: "d".into(),
            prev_hash: String::new(),
            hash: String::new(),
        };
        let h = base.compute_hash(&[0; 32]);
        let variants = [
            Entry { seq: 9, ..base.clone() },
            Entry { time: 9, ..base.clone() },
            Entry { op: "open".into(), ..base.clone() },
            Entry { label: "m".into(), ..base.clone() },
            Entry { outcome: "failed".into(), ..base.clone() },
            Entry { detail: "e".into(), ..base.clone() },
            // Moving a byte between fields must change the hash too.
            Entry { label: "ld".into(), detail: String::new(), ..base.clone() },
        ];
        for v in variants {
            assert_ne!(v.compute_hash(&[0; 32]), h, "{v:?}");
        }
        assert_ne!(base.compute_hash(&[1; 32]), h);
    }
}
