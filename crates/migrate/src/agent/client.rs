//! The gateway's side: starts the agent process and asks it for keys and rewraps. Nothing
//! here sees the user PIN; what comes back is public (labels, public keys) or wrapped.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use enclave::migration::DestinationKey;
use enclave::TenantId;
use zeroize::Zeroizing;

use super::serve::AgentSettings;
use super::wire::{self, OfficerPin, Request};
use crate::error::{MigrateError, Result};
use crate::hsm::OaepHash;
use crate::label::{KeyLabel, Measurement};

/// How long the agent may take to exit once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// The agent's process, as whoever started it holds it: this process (its child), or the
/// platform process, which starts it under a user of its own for a service that dropped
/// root.
pub trait AgentProcess: Send {
    /// Its process ID, for logs.
    fn pid(&self) -> u32;
    /// Whether it has exited (without waiting).
    fn exited(&mut self) -> bool;
    /// Ends it if it still runs, and reaps it.
    fn end(&mut self);
}

impl AgentProcess for Child {
    fn pid(&self) -> u32 {
        self.id()
    }

    fn exited(&mut self) -> bool {
        !matches!(self.try_wait(), Ok(None))
    }

    fn end(&mut self) {
        let _ = self.kill();
        let _ = self.wait();
    }
}

/// A running HSM agent process.
pub struct HsmAgent {
    process: Box<dyn AgentProcess>,
    input: Option<BufWriter<File>>,
    output: BufReader<File>,
    oaep: OaepHash,
}

impl core::fmt::Debug for HsmAgent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HsmAgent").field("pid", &self.process.pid()).finish_non_exhaustive()
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> MigrateError {
    move |source| MigrateError::AgentIo { what, source }
}

fn label_of(bytes: &[u8]) -> Result<KeyLabel> {
    core::str::from_utf8(bytes)
        .map_err(|_| MigrateError::AgentProtocol { why: "label is not UTF-8" })?
        .parse()
}

impl HsmAgent {
    /// Starts `program` with `subcommand` (e.g. `["hsm-agent"]`) and the settings' flags,
    /// and waits for it to open the HSM; its refusal (wrong PIN, HSM away) comes back as
    /// [`MigrateError::AgentRefused`]. Its standard error goes to ours.
    pub fn start(program: &Path, subcommand: &[&str], settings: &AgentSettings) -> Result<Self> {
        Self::start_command(Command::new(program), subcommand, settings)
    }

    /// [`Self::start`] with `cmd` (the program, and how it is to run: e.g. as a user of its
    /// own, so that the files the agent makes in the HSM's store and its audit log are
    /// that user's).
    pub fn start_command(mut cmd: Command, subcommand: &[&str], settings: &AgentSettings) -> Result<Self> {
        cmd.args(subcommand)
            .args(settings.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(io("start"))?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(MigrateError::AgentProtocol { why: "no pipes to the agent" });
        };
        Self::over(OwnedFd::from(input), OwnedFd::from(output), Box::new(child), settings.oaep)
    }

    /// The agent at the other end of `input` (its standard input) and `output` (its
    /// standard output), started by someone else as `process`; waits for it to open the
    /// HSM, as [`Self::start`] does.
    pub fn over(
        input: OwnedFd,
        output: OwnedFd,
        process: Box<dyn AgentProcess>,
        oaep: OaepHash,
    ) -> Result<Self> {
        let mut agent = Self {
            process,
            input: Some(BufWriter::new(File::from(input))),
            output: BufReader::new(File::from(output)),
            oaep,
        };
        agent.response(0)?;
        Ok(agent)
    }

    /// The RSA-OAEP hash the HSM wraps with (the enclaves must use the same).
    pub fn oaep_hash(&self) -> OaepHash {
        self.oaep
    }

    /// The process id, for logs.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    fn response(&mut self, fields: usize) -> Result<Vec<Vec<u8>>> {
        let body = wire::read_frame(&mut self.output)
            .map_err(io("reading a response"))?
            .ok_or(MigrateError::AgentProtocol { why: "the agent exited" })?;
        wire::decode_response(&body, fields)
    }

    fn call(&mut self, request: &Request, fields: usize) -> Result<Vec<Vec<u8>>> {
        let body = request.encode()?;
        let input =
            self.input.as_mut().ok_or(MigrateError::AgentProtocol { why: "the agent is stopping" })?;
        wire::write_frame(input, &body).map_err(io("writing a request"))?;
        self.response(fields)
    }

    fn key_and_spki(&mut self, request: &Request) -> Result<(KeyLabel, Vec<u8>)> {
        let mut f = self.call(request, 2)?.into_iter();
        let (Some(label), Some(spki)) = (f.next(), f.next()) else {
            return Err(MigrateError::AgentProtocol { why: "missing fields" });
        };
        Ok((label_of(&label)?, spki))
    }

    fn one(&mut self, request: &Request) -> Result<Vec<u8>> {
        self.call(request, 1)?.pop().ok_or(MigrateError::AgentProtocol { why: "missing field" })
    }

    /// A one-time migration key for enclaves of `measurement`: its label and public key.
    pub fn migration_key(&mut self, measurement: &Measurement) -> Result<(KeyLabel, Vec<u8>)> {
        self.key_and_spki(&Request::MigrationKey { measurement: measurement.clone() })
    }

    /// Today's backup key for `measurement`: its label, its public key, and the backup
    /// root's certificate of it for that measurement (what the enclave checks).
    pub fn backup_key(&mut self, measurement: &Measurement) -> Result<(KeyLabel, Vec<u8>, Vec<u8>)> {
        let mut f = self.call(&Request::BackupKey { measurement: measurement.clone() }, 3)?.into_iter();
        let (Some(label), Some(spki), Some(certificate)) = (f.next(), f.next(), f.next()) else {
            return Err(MigrateError::AgentProtocol { why: "missing fields" });
        };
        Ok((label_of(&label)?, spki, certificate))
    }

    /// The backup root's public key (an uncompressed P-256 point), made on first use: what
    /// `[migrate.hsm] backup_root` names on every host of the cluster.
    pub fn backup_root(&mut self) -> Result<Vec<u8>> {
        self.one(&Request::BackupRoot)
    }

    /// The data key `wrapped` to `label`, rewrapped to `destination` once the agent has
    /// verified its evidence against `label`'s measurement and `tenant`.
    pub fn rewrap(
        &mut self,
        label: &KeyLabel,
        wrapped: &[u8],
        destination: &DestinationKey,
        tenant: TenantId,
    ) -> Result<Vec<u8>> {
        self.one(&Request::Rewrap {
            label: label.clone(),
            wrapped: wrapped.to_vec(),
            destination: destination.clone(),
            tenant,
        })
    }

    /// A backup restore: the officer's step for `destination`, the rewrap, and the step
    /// withdrawn again whatever the outcome.
    pub fn restore_backup(
        &mut self,
        label: &KeyLabel,
        officer_pin: &str,
        wrapped: &[u8],
        destination: &DestinationKey,
        tenant: TenantId,
    ) -> Result<Vec<u8>> {
        self.one(&Request::RestoreBackup {
            label: label.clone(),
            officer_pin: OfficerPin(Zeroizing::new(officer_pin.to_owned())),
            wrapped: wrapped.to_vec(),
            destination: destination.clone(),
            tenant,
        })
    }

    /// Deletes a key (after a confirmed restore).
    pub fn delete_key(&mut self, label: &KeyLabel) -> Result<()> {
        self.call(&Request::DeleteKey { label: label.clone() }, 0).map(drop)
    }
}

impl Drop for HsmAgent {
    /// Closes the agent's input, which ends it; one that does not go within
    /// three seconds is killed; either way it is reaped.
    fn drop(&mut self) {
        drop(self.input.take());
        let deadline = Instant::now() + EXIT_GRACE;
        while Instant::now() < deadline && !self.process.exited() {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.process.end();
    }
}
