//! One migration, end to end, as the migration agents will run it: source export, HSM
//! rewrap (or not), destination import, deletion of the one-time keys on confirmation.
//!
//! Three modes ([`Mode`]), compared by `bench/migrate.sh`:
//!
//! - [`Mode::HsmEnvelope`] (Cloister): the source enclave splits its data key in two shares,
//!   one wrapped to the destination enclave's key (which it verified itself), one to a
//!   one-time HSM key pair; the HSM rewraps its share to the destination's key. Deleting the
//!   one-time key makes every copy of the package unopenable; the HSM sees 32 bytes per
//!   migration, whatever the state's size.
//! - [`Mode::EnclaveOnly`] (the baseline of Alder et al.): the destination share alone. No
//!   HSM: nothing outlives the destination key, so nothing stops a source that exports twice
//!   except the enclave's own sequence-number rule, and there is no backup.
//! - [`Mode::HsmBulk`] (TEEnder's original scheme, as a cost model): as the envelope, and the
//!   HSM also encrypts the whole package under an HSM-resident AES key at the source and
//!   decrypts it at the destination. In TEEnder the HSM receives the clear state; here it
//!   receives the enclave's already-encrypted package, so the comparison measures the cost
//!   of pushing every byte through the HSM without giving up the no-clear-key constraint.
//!
//! The steps are separate so that what can happen ahead of time is off the critical path:
//! [`Flow::prepare_hsm`] (one-time keys are bound to a measurement only, so a pool can be
//! made in advance) and [`Flow::prepare_destination`] (the destination's key generation,
//! while the source still serves). The move itself is [`Flow::export`], [`Flow::import`],
//! [`Flow::confirm`].
//!
//! The caller here plays both agents in one process; the attested channel between them,
//! which carries only what [`Transfer`] holds, is still to come (docs/migration.md).

use attest::migration::verify_destination;
use enclave::migration::{DestinationKey, MigrationPackage, MigrationRestore, OaepHash};
use enclave::{Enclave, TenantId};

use crate::error::{MigrateError, Result};
use crate::hsm::{self, Hsm};
use crate::label::{KeyLabel, Measurement};

/// How the data key (and the package) reach the destination.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Data key wrapped to a one-time HSM key pair, rewrapped by the HSM to the destination.
    HsmEnvelope,
    /// Data key wrapped straight to the destination enclave (no HSM).
    EnclaveOnly,
    /// As [`Mode::HsmEnvelope`], and the HSM encrypts and decrypts the whole package.
    HsmBulk,
}

impl Mode {
    /// Its name in benchmark output and errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::HsmEnvelope => "hsm",
            Self::EnclaveOnly => "baseline",
            Self::HsmBulk => "hsm-bulk",
        }
    }
}

/// The HSM keys of one migration: the one-time key pair and, in bulk mode, the AES key.
#[derive(Clone, Debug)]
pub struct HsmKeys {
    /// The one-time key pair's label.
    pub label: KeyLabel,
    /// Its public key (DER SPKI), what the source enclave wraps the data key with.
    pub spki: Vec<u8>,
    /// The bulk AES key's label ([`Mode::HsmBulk`] only).
    pub bulk: Option<KeyLabel>,
}

/// What crosses from the source host to the destination host: ciphertext, a wrapped key
/// and labels, nothing that opens without the HSM or the destination enclave.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// The mode it was made for.
    pub mode: Mode,
    /// The package, or in bulk mode the HSM's encryption of it.
    pub bytes: Vec<u8>,
    /// The HSM keys it needs, none in [`Mode::EnclaveOnly`].
    pub keys: Option<HsmKeys>,
}

/// One migration's driver: the mode and the HSM it uses.
#[derive(Debug)]
pub struct Flow<'h> {
    mode: Mode,
    hsm: Option<&'h Hsm>,
    oaep: OaepHash,
}

fn enclave_oaep(hash: hsm::OaepHash) -> OaepHash {
    match hash {
        hsm::OaepHash::Sha1 => OaepHash::Sha1,
        hsm::OaepHash::Sha256 => OaepHash::Sha256,
    }
}

/// The label-side form of an enclave measurement.
pub fn label_measurement(m: &enclave::attest::Measurement) -> Result<Measurement> {
    Measurement::from_bytes(&m.0)
}

pub(crate) fn enclave_measurement(m: &Measurement) -> Result<enclave::attest::Measurement> {
    let bytes: [u8; 48] = m.as_bytes().try_into().map_err(|_| MigrateError::BadMeasurement)?;
    Ok(enclave::attest::Measurement(bytes))
}

impl<'h> Flow<'h> {
    /// A driver for `mode`; the HSM modes need `hsm`, whose OAEP hash the enclaves then use
    /// (SHA-256 without one).
    pub fn new(mode: Mode, hsm: Option<&'h Hsm>) -> Result<Self> {
        let oaep = match (mode, hsm) {
            (Mode::EnclaveOnly, None) => OaepHash::Sha256,
            (_, Some(h)) => enclave_oaep(h.oaep_hash()),
            (_, None) => return Err(MigrateError::NoHsm { mode: mode.name() }),
        };
        Ok(Self { mode, hsm, oaep })
    }

    fn hsm(&self) -> Result<&'h Hsm> {
        self.hsm.ok_or(MigrateError::NoHsm { mode: self.mode.name() })
    }

    /// Creates the HSM keys for one migration into an enclave of `measurement` (none in
    /// [`Mode::EnclaveOnly`]).
    pub fn prepare_hsm(&self, measurement: &Measurement) -> Result<Option<HsmKeys>> {
        if self.mode == Mode::EnclaveOnly {
            return Ok(None);
        }
        let hsm = self.hsm()?;
        let label = hsm.create_migration_key(measurement)?;
        let spki = hsm.public_key(&label)?;
        let bulk = match self.mode {
            Mode::HsmBulk => Some(hsm.create_bulk_key(measurement)?),
            _ => None,
        };
        Ok(Some(HsmKeys { label, spki, bulk }))
    }

    /// Has the destination enclave make its key pair (`bits`) and verifies its evidence: the
    /// platform key, the `expected` measurement (the source's) and `tenant`. Nothing is
    /// wrapped to a key that fails this.
    pub fn prepare_destination(
        &self,
        destination: &mut dyn Enclave,
        platform_public_key: &[u8],
        expected: &Measurement,
        tenant: TenantId,
        bits: usize,
    ) -> Result<DestinationKey> {
        let key = destination.migration_destination_key(bits)?;
        verify_destination(&key, platform_public_key, &enclave_measurement(expected)?, tenant)?;
        Ok(key)
    }

    /// The source enclave exports its state with `untrusted_state` to the destination key,
    /// which it verifies itself, with a second share to the HSM key (HSM modes).
    pub fn export(
        &self,
        keys: Option<&HsmKeys>,
        destination: &DestinationKey,
        source: &mut dyn Enclave,
        untrusted_state: &[u8],
    ) -> Result<Transfer> {
        let hsm_spki = match (self.mode, keys) {
            (Mode::EnclaveOnly, _) => None,
            (_, Some(k)) => Some(k.spki.as_slice()),
            (_, None) => return Err(MigrateError::NoHsm { mode: self.mode.name() }),
        };
        let package = source.export_state(destination, hsm_spki, self.oaep, untrusted_state)?;
        let bytes = match keys.and_then(|k| k.bulk.as_ref()) {
            Some(bulk) if self.mode == Mode::HsmBulk => self.hsm()?.bulk_encrypt(bulk, package.as_bytes())?,
            _ => package.into_bytes(),
        };
        Ok(Transfer { mode: self.mode, bytes, keys: keys.cloned() })
    }

    /// The destination side: (bulk mode: the HSM decrypts the package;) the HSM rewraps its
    /// share to `destination_key` after checking `expected` (the measurement the destination
    /// attested) against the key's label; the destination enclave checks the source's
    /// evidence in the package and imports.
    pub fn import(
        &self,
        transfer: Transfer,
        destination_key: &DestinationKey,
        destination: &mut dyn Enclave,
        expected: &Measurement,
    ) -> Result<MigrationRestore> {
        if transfer.mode != self.mode {
            return Err(MigrateError::ModeMismatch {
                transfer: transfer.mode.name(),
                flow: self.mode.name(),
            });
        }
        let bytes = match (&transfer.keys, self.mode) {
            (Some(HsmKeys { bulk: Some(bulk), .. }), Mode::HsmBulk) => {
                self.hsm()?.bulk_decrypt(bulk, &transfer.bytes, expected)?
            }
            _ => transfer.bytes,
        };
        let package = MigrationPackage::from_bytes(bytes)?;
        let rewrapped = match (&transfer.keys, package.hsm_share()) {
            (Some(k), Some(share)) => {
                Some(self.hsm()?.rewrap(&k.label, share, &destination_key.spki_der, expected)?)
            }
            (None, None) => None,
            _ => return Err(enclave::Error::Migration { why: enclave::migration::why::SHARES }.into()),
        };
        Ok(destination.import_state(&package, rewrapped.as_deref())?)
    }

    /// On the destination's confirmation: deletes the one-time keys (`transfer.keys`), so
    /// the transfer, and any copy of it, can never be opened again.
    pub fn confirm(&self, keys: Option<&HsmKeys>) -> Result<()> {
        if let Some(k) = keys {
            let hsm = self.hsm()?;
            hsm.delete_key(&k.label)?;
            if let Some(bulk) = &k.bulk {
                hsm.delete_key(bulk)?;
            }
        }
        Ok(())
    }
}
