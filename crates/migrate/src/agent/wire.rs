//! The HSM agent's pipe protocol: length-prefixed frames, each a version byte, an opcode or
//! status byte, and fields of `u16` length. Sans-IO: [`read_frame`] and [`write_frame`] take
//! any byte stream, everything else works on byte slices.
//!
//! Frame buffers may hold the officer's PIN, so they are [`Zeroizing`] on both sides.

use std::io::{Read, Write};

use enclave::attest::{Evidence, EvidenceKind};
use enclave::migration::DestinationKey;
use enclave::TenantId;
use zeroize::Zeroizing;

use crate::error::{MigrateError, Result};
use crate::label::{KeyLabel, Measurement};

/// Protocol version; both ends are the same binary, so a mismatch is a bug or an attack.
const VERSION: u8 = 1;
/// The largest frame body (an RSA-8192 SPKI, its wrapped key and evidence fit many times).
pub const MAX_FRAME: usize = 16 * 1024;

const OP_MIGRATION_KEY: u8 = 1;
const OP_BACKUP_KEY: u8 = 2;
const OP_REWRAP: u8 = 3;
const OP_RESTORE_BACKUP: u8 = 4;
const OP_DELETE_KEY: u8 = 5;
const OP_BACKUP_ROOT: u8 = 6;

const STATUS_OK: u8 = 0;
const STATUS_ERROR: u8 = 1;

/// What the gateway may ask of the agent. Every request that releases a data key names the
/// destination by its attested key; the agent checks the evidence itself.
#[derive(Debug)]
pub enum Request {
    /// A one-time migration key for enclaves of `measurement`: its label and public key.
    MigrationKey {
        /// The enclave measurement the key is bound to.
        measurement: Measurement,
    },
    /// Today's backup key for `measurement` (made on first use): its label, public key and
    /// the backup root's certificate of it for that measurement.
    BackupKey {
        /// The enclave measurement the key is bound to.
        measurement: Measurement,
    },
    /// Rewraps a data key from the one-time key `label` to `destination`.
    Rewrap {
        /// The HSM key the data key is wrapped to.
        label: KeyLabel,
        /// The data key, RSA-OAEP-wrapped to `label`'s public key.
        wrapped: Vec<u8>,
        /// The destination enclave's key and its evidence.
        destination: DestinationKey,
        /// The tenant the destination enclave serves.
        tenant: TenantId,
    },
    /// The officer step, the rewrap and the revocation of a backup restore, in one request.
    RestoreBackup {
        /// The backup key.
        label: KeyLabel,
        /// The security officer's PIN, typed for this restore.
        officer_pin: OfficerPin,
        /// The data key, wrapped to the backup key.
        wrapped: Vec<u8>,
        /// The destination enclave's key and its evidence.
        destination: DestinationKey,
        /// The tenant the destination enclave serves.
        tenant: TenantId,
    },
    /// Deletes a key after a confirmed restore.
    DeleteKey {
        /// The key to delete.
        label: KeyLabel,
    },
    /// The backup root's public key (made on first use).
    BackupRoot,
}

/// The security officer's PIN on its way to the agent: zeroized on drop, not in `Debug`.
pub struct OfficerPin(pub Zeroizing<String>);

impl core::fmt::Debug for OfficerPin {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("OfficerPin(<redacted>)")
    }
}

/// The agent's answer: fields on success, a message (never a secret) on refusal.
pub type Response = core::result::Result<Vec<Vec<u8>>, String>;

fn bad(why: &'static str) -> MigrateError {
    MigrateError::AgentProtocol { why }
}

/// Appends one field.
fn put(out: &mut Vec<u8>, field: &[u8]) -> Result<()> {
    let len = u16::try_from(field.len()).map_err(|_| bad("field longer than 65535 bytes"))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(field);
    Ok(())
}

/// Reads fields off a body.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn next(&mut self) -> Result<&'a [u8]> {
        let (len, rest) = self.0.split_first_chunk::<2>().ok_or(bad("truncated field length"))?;
        let len = usize::from(u16::from_be_bytes(*len));
        let (field, rest) = rest.split_at_checked(len).ok_or(bad("truncated field"))?;
        self.0 = rest;
        Ok(field)
    }

    fn text(&mut self) -> Result<&'a str> {
        core::str::from_utf8(self.next()?).map_err(|_| bad("field is not UTF-8"))
    }

    fn label(&mut self) -> Result<KeyLabel> {
        self.text()?.parse()
    }

    fn measurement(&mut self) -> Result<Measurement> {
        Measurement::from_bytes(self.next()?)
    }

    fn destination(&mut self) -> Result<(DestinationKey, TenantId)> {
        let spki_der = self.next()?.to_vec();
        let evidence = self.next()?.to_vec();
        let tenant = <[u8; 4]>::try_from(self.next()?).map_err(|_| bad("tenant is not 4 bytes"))?;
        let key = DestinationKey {
            spki_der,
            evidence: Evidence { kind: EvidenceKind::SoftwareRooted, bytes: evidence },
        };
        Ok((key, TenantId(u32::from_be_bytes(tenant))))
    }

    fn end(&self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(bad("bytes after the last field"))
        }
    }
}

fn put_destination(out: &mut Vec<u8>, d: &DestinationKey, tenant: TenantId) -> Result<()> {
    put(out, &d.spki_der)?;
    put(out, &d.evidence.bytes)?;
    put(out, &tenant.0.to_be_bytes())
}

impl Request {
    /// The request's frame body.
    pub fn encode(&self) -> Result<Zeroizing<Vec<u8>>> {
        let mut out = Zeroizing::new(vec![VERSION]);
        match self {
            Self::MigrationKey { measurement } => {
                out.push(OP_MIGRATION_KEY);
                put(&mut out, measurement.as_bytes())?;
            }
            Self::BackupKey { measurement } => {
                out.push(OP_BACKUP_KEY);
                put(&mut out, measurement.as_bytes())?;
            }
            Self::Rewrap { label, wrapped, destination, tenant } => {
                out.push(OP_REWRAP);
                put(&mut out, label.to_string().as_bytes())?;
                put(&mut out, wrapped)?;
                put_destination(&mut out, destination, *tenant)?;
            }
            Self::RestoreBackup { label, officer_pin, wrapped, destination, tenant } => {
                out.push(OP_RESTORE_BACKUP);
                put(&mut out, label.to_string().as_bytes())?;
                put(&mut out, officer_pin.0.as_bytes())?;
                put(&mut out, wrapped)?;
                put_destination(&mut out, destination, *tenant)?;
            }
            Self::DeleteKey { label } => {
                out.push(OP_DELETE_KEY);
                put(&mut out, label.to_string().as_bytes())?;
            }
            Self::BackupRoot => out.push(OP_BACKUP_ROOT),
        }
        if out.len() > MAX_FRAME {
            return Err(bad("request larger than a frame"));
        }
        Ok(out)
    }

    /// Parses a frame body; every field is checked, trailing bytes are refused.
    pub fn decode(body: &[u8]) -> Result<Self> {
        let [version, op, rest @ ..] = body else { return Err(bad("frame shorter than its header")) };
        if *version != VERSION {
            return Err(bad("unknown protocol version"));
        }
        let mut f = Fields(rest);
        let request = match *op {
            OP_MIGRATION_KEY => Self::MigrationKey { measurement: f.measurement()? },
            OP_BACKUP_KEY => Self::BackupKey { measurement: f.measurement()? },
            OP_REWRAP => {
                let label = f.label()?;
                let wrapped = f.next()?.to_vec();
                let (destination, tenant) = f.destination()?;
                Self::Rewrap { label, wrapped, destination, tenant }
            }
            OP_RESTORE_BACKUP => {
                let label = f.label()?;
                let officer_pin = OfficerPin(Zeroizing::new(f.text()?.to_owned()));
                let wrapped = f.next()?.to_vec();
                let (destination, tenant) = f.destination()?;
                Self::RestoreBackup { label, officer_pin, wrapped, destination, tenant }
            }
            OP_DELETE_KEY => Self::DeleteKey { label: f.label()? },
            OP_BACKUP_ROOT => Self::BackupRoot,
            _ => return Err(bad("unknown request")),
        };
        f.end()?;
        Ok(request)
    }
}

/// A response's frame body.
pub fn encode_response(response: &Response) -> Result<Zeroizing<Vec<u8>>> {
    let mut out = Zeroizing::new(vec![VERSION]);
    match response {
        Ok(fields) => {
            out.push(STATUS_OK);
            for field in fields {
                put(&mut out, field)?;
            }
        }
        Err(message) => {
            out.push(STATUS_ERROR);
            // A message that does not fit is cut at a character boundary, not refused.
            let mut end = message.len().min(1024);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            put(&mut out, message.get(..end).unwrap_or_default().as_bytes())?;
        }
    }
    if out.len() > MAX_FRAME {
        return Err(bad("response larger than a frame"));
    }
    Ok(out)
}

/// Parses a response body into exactly `fields` fields (or the agent's refusal).
pub fn decode_response(body: &[u8], fields: usize) -> Result<Vec<Vec<u8>>> {
    let [version, status, rest @ ..] = body else { return Err(bad("frame shorter than its header")) };
    if *version != VERSION {
        return Err(bad("unknown protocol version"));
    }
    let mut f = Fields(rest);
    match *status {
        STATUS_OK => {
            let out = (0..fields).map(|_| f.next().map(<[u8]>::to_vec)).collect::<Result<Vec<_>>>()?;
            f.end()?;
            Ok(out)
        }
        STATUS_ERROR => {
            let message = f.text()?.to_owned();
            f.end()?;
            Err(MigrateError::AgentRefused { message })
        }
        _ => Err(bad("unknown response status")),
    }
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut frame = Zeroizing::new(Vec::with_capacity(4 + body.len()));
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame: `Ok(None)` at a clean end of stream, an error for a frame longer than
/// [`MAX_FRAME`] or cut short.
pub fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Zeroizing<Vec<u8>>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(len.get_mut(got..).unwrap_or_default())? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let len = usize::try_from(u32::from_be_bytes(len)).map_err(|_| std::io::ErrorKind::InvalidData)?;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "HSM agent frame too long"));
    }
    let mut body = Zeroizing::new(vec![0u8; len]);
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement() -> Measurement {
        Measurement::from_bytes(&[0x5a; 48]).unwrap()
    }

    fn destination() -> DestinationKey {
        DestinationKey {
            spki_der: vec![0x30, 1, 2, 3],
            evidence: Evidence { kind: EvidenceKind::SoftwareRooted, bytes: vec![9; 300] },
        }
    }

    fn label() -> KeyLabel {
        format!("cloister-mig/{}/{}", "5a".repeat(48), "ab".repeat(16)).parse().unwrap()
    }

    fn requests() -> Vec<Request> {
        vec![
            Request::MigrationKey { measurement: measurement() },
            Request::BackupKey { measurement: measurement() },
            Request::Rewrap {
                label: label(),
                wrapped: vec![7; 384],
                destination: destination(),
                tenant: TenantId(7),
            },
            Request::RestoreBackup {
                label: label(),
                officer_pin: OfficerPin(Zeroizing::new("officer".into())),
                wrapped: vec![7; 256],
                destination: destination(),
                tenant: TenantId(9),
            },
            Request::DeleteKey { label: label() },
            Request::BackupRoot,
        ]
    }

    #[test]
    fn every_request_round_trips() {
        for r in requests() {
            let body = r.encode().unwrap();
            let back = Request::decode(&body).unwrap();
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
            assert_eq!(*back.encode().unwrap(), *body);
        }
    }

    #[test]
    fn the_officer_pin_is_not_in_debug_output() {
        let r = &requests()[3];
        assert!(!format!("{r:?}").contains("\"officer\""), "{r:?}");
        assert!(format!("{r:?}").contains("<redacted>"), "{r:?}");
    }

    #[test]
    fn every_cut_and_every_extra_byte_is_refused() {
        for r in requests() {
            let body = r.encode().unwrap();
            for cut in 0..body.len() {
                assert!(Request::decode(&body[..cut]).is_err(), "cut at {cut} of {r:?}");
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert!(Request::decode(&longer).is_err());
        }
    }

    #[test]
    fn unknown_versions_opcodes_and_bad_fields_are_refused() {
        let body = requests()[0].encode().unwrap();
        let mut v = body.to_vec();
        v[0] = 2;
        assert!(matches!(Request::decode(&v), Err(MigrateError::AgentProtocol { .. })));
        let mut v = body.to_vec();
        v[1] = 99;
        assert!(matches!(Request::decode(&v), Err(MigrateError::AgentProtocol { .. })));
        // A label that is not one.
        let mut v = vec![VERSION, OP_DELETE_KEY];
        put(&mut v, b"not a label").unwrap();
        assert!(Request::decode(&v).is_err());
        // A measurement of the wrong length.
        let mut v = vec![VERSION, OP_MIGRATION_KEY];
        put(&mut v, &[1; 5]).unwrap();
        assert!(Request::decode(&v).is_err());
    }

    #[test]
    fn responses_round_trip_and_carry_refusals() {
        let fields = vec![b"a".to_vec(), vec![1, 2, 3]];
        let body = encode_response(&Ok(fields.clone())).unwrap();
        assert_eq!(decode_response(&body, 2).unwrap(), fields);
        assert!(decode_response(&body, 1).is_err(), "a field too many");
        assert!(decode_response(&body, 3).is_err(), "a field too few");
        let body = encode_response(&Err("no such key".into())).unwrap();
        match decode_response(&body, 2) {
            Err(MigrateError::AgentRefused { message }) => assert_eq!(message, "no such key"),
            other => panic!("{other:?}"),
        }
        let long = "é".repeat(2000);
        let body = encode_response(&Err(long)).unwrap();
        assert!(matches!(decode_response(&body, 0), Err(MigrateError::AgentRefused { .. })));
    }

    #[test]
    fn frames_are_bounded_and_end_cleanly() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        let mut r = buf.as_slice();
        assert_eq!(read_frame(&mut r).unwrap().unwrap().as_slice(), b"hello");
        assert!(read_frame(&mut r).unwrap().is_none(), "clean end");
        let mut r: &[u8] = &buf[..6];
        assert!(read_frame(&mut r).is_err(), "cut in the body");
        let mut r: &[u8] = &buf[..2];
        assert!(read_frame(&mut r).is_err(), "cut in the length");
        let huge = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes();
        let mut r: &[u8] = &huge;
        assert!(read_frame(&mut r).is_err(), "too long");
    }
}
