//! Migration calls whose argument or result is larger than the call area, the enclave
//! process's side (docs/migration.md, "Process backend limit").
//!
//! A call carries its arguments and result through the call area, so a package larger than
//! it crosses in pieces: the gateway streams the large argument into a staging buffer here,
//! one piece per call, then a finish call runs the export or import on it; a result that
//! does not fit the call area stays here and the gateway reads it back piece by piece.
//!
//! ```text
//! export: EXPORT_BEGIN(total) STAGE_CHUNK(offset, piece)... EXPORT_FINISH(destination, hsm, oaep)
//! import: IMPORT_BEGIN(total) STAGE_CHUNK(offset, piece)... IMPORT_FINISH(hsm share)
//! then, if the answer is held: RESULT_CHUNK(offset, max)... until all of it is read
//! ```
//!
//! The single calls [`op::EXPORT_STATE`] and [`op::IMPORT_STATE`] stay for what fits, and
//! answer like the finish calls, so that an export whose package outgrows the call area (the
//! trusted state alone can) is never lost after it has capped the source's sequence numbers.
//! A backup ([`op::EXPORT_SECRETS`]) is a single call only, answered the same way: its
//! untrusted state must fit the call area.
//!
//! Staging is bounded ([`MAX_UNTRUSTED_STATE`] for an export, [`MAX_PACKAGE_LEN`] for an
//! import), reserved once at the start so it never reallocates (no stray copies), and holds
//! one transfer: any start, single call or broken sequence discards what was staged. Buffers
//! that hold the untrusted state in the clear are zeroized when dropped; the package is
//! ciphertext.

use super::codec::{self, op, Reader, Writer, STAGED_HELD, STAGED_INLINE};
use super::validate::RejectReason;
use crate::migration::{why, MigrationPackage, OaepHash, MAX_PACKAGE_LEN, MAX_UNTRUSTED_STATE};
use enclave_api::error::Error;
use enclave_api::Enclave;
use zeroize::Zeroize;

/// Bytes held between calls; zeroized (capacity included) on drop when `scrub`.
struct StageBuf {
    bytes: Vec<u8>,
    scrub: bool,
}

impl Drop for StageBuf {
    fn drop(&mut self) {
        if self.scrub {
            self.bytes.zeroize();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Export,
    Import,
}

/// The argument being streamed in.
struct Inbound {
    purpose: Purpose,
    total: usize,
    buf: StageBuf,
}

/// A result held for [`op::RESULT_CHUNK`].
struct Outbound {
    buf: StageBuf,
    read: usize,
}

/// The staging of one chunked migration call (see the module documentation).
#[derive(Default)]
pub struct Staging {
    inbound: Option<Inbound>,
    outbound: Option<Outbound>,
}

impl core::fmt::Debug for Staging {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Staging")
            .field("inbound", &self.inbound.as_ref().map(|i| (i.purpose, i.buf.bytes.len(), i.total)))
            .field("outbound", &self.outbound.as_ref().map(|o| (o.read, o.buf.bytes.len())))
            .finish()
    }
}

fn refused(why: &'static str) -> crate::Result<()> {
    Err(Error::Migration { why })
}

/// Room for exactly `total` bytes, or the clear refusal an oversized transfer gets: a
/// failed allocation must not abort the enclave process.
fn reserve(total: usize, scrub: bool) -> crate::Result<StageBuf> {
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(total).map_err(|_| Error::Migration { why: why::TOO_LARGE })?;
    Ok(StageBuf { bytes, scrub })
}

impl Staging {
    /// Bytes held (staged in and out): what a gateway can make this process keep.
    pub fn held(&self) -> usize {
        self.inbound.as_ref().map_or(0, |i| i.buf.bytes.capacity())
            + self.outbound.as_ref().map_or(0, |o| o.buf.bytes.capacity())
    }

    fn discard(&mut self) {
        self.inbound = None;
        self.outbound = None;
    }

    fn begin(&mut self, purpose: Purpose, total: usize) -> crate::Result<()> {
        self.discard();
        let limit = match purpose {
            Purpose::Export => MAX_UNTRUSTED_STATE,
            Purpose::Import => MAX_PACKAGE_LEN,
        };
        if total > limit {
            return refused(why::TOO_LARGE);
        }
        let buf = reserve(total, purpose == Purpose::Export)?;
        self.inbound = Some(Inbound { purpose, total, buf });
        Ok(())
    }

    fn chunk(&mut self, offset: u64, piece: &[u8]) -> crate::Result<()> {
        let Some(inb) = self.inbound.as_mut() else { return refused(why::CHUNK_SEQUENCE) };
        let have = inb.buf.bytes.len();
        let in_sequence = usize::try_from(offset).is_ok_and(|o| o == have);
        if !in_sequence || piece.len() > inb.total - have {
            self.inbound = None;
            return refused(why::CHUNK_SEQUENCE);
        }
        inb.buf.bytes.extend_from_slice(piece);
        Ok(())
    }

    /// The staged argument of a finish call of `purpose`, complete; `short` is the refusal
    /// for one whose pieces stopped before the announced total.
    fn take(&mut self, purpose: Purpose, short: &'static str) -> crate::Result<Inbound> {
        self.outbound = None;
        let inb = self.inbound.take().ok_or(Error::Migration { why: why::CHUNK_SEQUENCE })?;
        if inb.purpose != purpose {
            return Err(Error::Migration { why: why::CHUNK_SEQUENCE });
        }
        if inb.buf.bytes.len() != inb.total {
            return Err(Error::Migration { why: short });
        }
        Ok(inb)
    }

    /// Answers `bytes` inline if that fits `res_cap`, else holds them for
    /// [`op::RESULT_CHUNK`] and answers their length.
    fn answer(&mut self, w: &mut Writer, buf: StageBuf, res_cap: usize) {
        let len = buf.bytes.len();
        if len.checked_add(1 + 4).is_some_and(|n| n <= res_cap) {
            w.u8(STAGED_INLINE).bytes(&buf.bytes);
        } else {
            w.u8(STAGED_HELD).usize(len);
            self.outbound = Some(Outbound { buf, read: 0 });
        }
    }

    fn result_chunk(&mut self, w: &mut Writer, offset: u64, max: usize, res_cap: usize) -> crate::Result<()> {
        let Some(out) = self.outbound.as_mut() else { return refused(why::CHUNK_SEQUENCE) };
        if usize::try_from(offset).ok() != Some(out.read) {
            self.outbound = None;
            return refused(why::CHUNK_SEQUENCE);
        }
        let n = max.min(res_cap.saturating_sub(4)).min(out.buf.bytes.len() - out.read);
        w.bytes(out.buf.bytes.get(out.read..out.read + n).unwrap_or(&[]));
        out.read += n;
        if out.read == out.buf.bytes.len() {
            // Read to the end: nothing is kept longer than the gateway needs it.
            self.outbound = None;
        }
        Ok(())
    }

    /// Answers an export's package (ciphertext: nothing to scrub).
    fn export(
        &mut self,
        package: crate::Result<MigrationPackage>,
        w: &mut Writer,
        res_cap: usize,
    ) -> crate::Result<()> {
        self.answer(w, StageBuf { bytes: package?.into_bytes(), scrub: false }, res_cap);
        Ok(())
    }

    fn import<E: Enclave + ?Sized>(
        &mut self,
        e: &mut E,
        package: crate::Result<MigrationPackage>,
        hsm_share: Option<&[u8]>,
        w: &mut Writer,
        res_cap: usize,
    ) -> crate::Result<()> {
        let package = package?;
        // Room for the answer before anything is installed, so that an import is all or
        // nothing here too. The package bounds it: it holds the same untrusted state, and
        // more than the 8 bytes a handle pair takes for each entry.
        let mut enc = Writer { buf: reserve(package.as_bytes().len(), true)?.take_bytes() };
        let mut restored = e.import_state(&package, hsm_share)?;
        drop(package);
        codec::put_restore(&mut enc, &restored);
        restored.untrusted_state.zeroize();
        self.answer(w, StageBuf { bytes: core::mem::take(&mut enc.buf), scrub: true }, res_cap);
        Ok(())
    }
}

impl StageBuf {
    /// The bytes, leaving nothing behind to scrub (the caller takes over that duty).
    fn take_bytes(mut self) -> Vec<u8> {
        core::mem::take(&mut self.bytes)
    }
}

/// The opcodes [`dispatch`] runs.
const STAGED_OPS: [u16; 9] = [
    op::EXPORT_STATE,
    op::EXPORT_SECRETS,
    op::IMPORT_STATE,
    op::EXPORT_BEGIN,
    op::STAGE_CHUNK,
    op::EXPORT_FINISH,
    op::IMPORT_BEGIN,
    op::IMPORT_FINISH,
    op::RESULT_CHUNK,
];

/// Runs the migration calls that may be staged: [`op::EXPORT_STATE`],
/// [`op::EXPORT_SECRETS`], [`op::IMPORT_STATE`] and the chunked ones. `None` for any other opcode; otherwise as
/// [`super::guest::dispatch`]: `Err` is a transport refusal (arguments that do not decode),
/// `Ok(Err(_))` a refusal of the call, typed.
pub fn dispatch<E: Enclave + ?Sized>(
    s: &mut Staging,
    e: &mut E,
    opcode: u16,
    args: &[u8],
    w: &mut Writer,
    res_cap: usize,
) -> Option<Result<crate::Result<()>, RejectReason>> {
    STAGED_OPS.contains(&opcode).then(|| run(s, e, opcode, args, w, res_cap))
}

fn run<E: Enclave + ?Sized>(
    s: &mut Staging,
    e: &mut E,
    opcode: u16,
    args: &[u8],
    w: &mut Writer,
    res_cap: usize,
) -> Result<crate::Result<()>, RejectReason> {
    let mut r = Reader::new(args);
    let oaep = |r: &mut Reader<'_>| OaepHash::from_code(r.u8()?).ok_or(RejectReason::BadArguments);
    Ok(match opcode {
        op::EXPORT_STATE => {
            let destination = codec::get_destination_key(&mut r)?;
            let hsm = codec::get_opt_bytes(&mut r)?;
            let oaep = oaep(&mut r)?;
            let untrusted = r.bytes()?;
            r.finish()?;
            s.discard();
            s.export(e.export_state(&destination, hsm, oaep, untrusted), w, res_cap)
        }
        op::EXPORT_SECRETS => {
            let spki = r.bytes()?;
            let certificate = r.bytes()?;
            let oaep = oaep(&mut r)?;
            let untrusted = r.bytes()?;
            r.finish()?;
            s.discard();
            s.export(e.export_secrets(spki, certificate, oaep, untrusted), w, res_cap)
        }
        op::IMPORT_STATE => {
            // A package that does not parse is the trusted core's refusal, not the
            // transport's: it is typed like one.
            let package = MigrationPackage::from_bytes(r.bytes()?.to_vec());
            let hsm_share = codec::get_opt_bytes(&mut r)?;
            r.finish()?;
            s.discard();
            s.import(e, package, hsm_share, w, res_cap)
        }
        op::EXPORT_BEGIN | op::IMPORT_BEGIN => {
            let total = r.u64()?;
            r.finish()?;
            let purpose = if opcode == op::EXPORT_BEGIN { Purpose::Export } else { Purpose::Import };
            // A total beyond usize is beyond every limit.
            s.begin(purpose, usize::try_from(total).unwrap_or(usize::MAX))
        }
        op::STAGE_CHUNK => {
            let offset = r.u64()?;
            let piece = r.bytes()?;
            r.finish()?;
            s.chunk(offset, piece)
        }
        op::EXPORT_FINISH => {
            let destination = codec::get_destination_key(&mut r)?;
            let hsm = codec::get_opt_bytes(&mut r)?;
            let oaep = oaep(&mut r)?;
            r.finish()?;
            match s.take(Purpose::Export, why::CHUNK_SEQUENCE) {
                Ok(inb) => s.export(e.export_state(&destination, hsm, oaep, &inb.buf.bytes), w, res_cap),
                Err(err) => Err(err),
            }
        }
        op::IMPORT_FINISH => {
            let hsm_share = codec::get_opt_bytes(&mut r)?;
            r.finish()?;
            // Stopped short of its total: cut in transit, as a short package is.
            match s.take(Purpose::Import, why::TRUNCATED) {
                Ok(mut inb) => {
                    let package = MigrationPackage::from_bytes(core::mem::take(&mut inb.buf.bytes));
                    s.import(e, package, hsm_share, w, res_cap)
                }
                Err(err) => Err(err),
            }
        }
        op::RESULT_CHUNK => {
            let offset = r.u64()?;
            let max = r.u32()? as usize;
            r.finish()?;
            s.result_chunk(w, offset, max, res_cap)
        }
        _ => return Err(RejectReason::UnknownOpcode),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::process::mock::MockEnclave;

    const CAP: usize = 100;

    fn call(s: &mut Staging, opcode: u16, f: impl FnOnce(&mut Writer)) -> crate::Result<Vec<u8>> {
        let mut args = Writer::new();
        f(&mut args);
        let mut out = Writer::new();
        let mut e = MockEnclave::new(4);
        match dispatch(s, &mut e, opcode, &args.buf, &mut out, CAP) {
            Some(Ok(r)) => r.map(|()| out.buf),
            other => panic!("transport refusal or not staged: {other:?}"),
        }
    }

    fn begin(s: &mut Staging, opcode: u16, n: usize) -> crate::Result<Vec<u8>> {
        call(s, opcode, |w| {
            w.usize(n);
        })
    }

    fn chunk(s: &mut Staging, off: u64, n: usize) -> crate::Result<Vec<u8>> {
        call(s, op::STAGE_CHUNK, |w| {
            w.u64(off).bytes(&vec![1; n]);
        })
    }

    fn refusal(why: &'static str) -> crate::Result<Vec<u8>> {
        Err(Error::Migration { why })
    }

    #[test]
    fn pieces_must_follow_each_other_up_to_the_total() {
        let mut s = Staging::default();
        assert_eq!(chunk(&mut s, 0, 1), refusal(why::CHUNK_SEQUENCE));
        begin(&mut s, op::IMPORT_BEGIN, 30).unwrap();
        assert_eq!(s.held(), 30, "reserved once, at the start");
        chunk(&mut s, 0, 10).unwrap();
        assert_eq!(chunk(&mut s, 5, 10), refusal(why::CHUNK_SEQUENCE));
        assert_eq!(s.held(), 0, "a broken sequence is discarded");
        assert_eq!(chunk(&mut s, 10, 10), refusal(why::CHUNK_SEQUENCE));
        begin(&mut s, op::IMPORT_BEGIN, 30).unwrap();
        chunk(&mut s, 0, 20).unwrap();
        assert_eq!(chunk(&mut s, 20, 11), refusal(why::CHUNK_SEQUENCE));
        assert_eq!(chunk(&mut s, u64::MAX, 0), refusal(why::CHUNK_SEQUENCE));
    }

    #[test]
    fn finishes_need_a_complete_transfer_of_their_own_kind() {
        let mut s = Staging::default();
        let export_finish = |s: &mut Staging| {
            call(s, op::EXPORT_FINISH, |w| {
                let evidence = crate::attest::Evidence {
                    kind: crate::attest::EvidenceKind::SoftwareRooted,
                    bytes: b"evidence".to_vec(),
                };
                codec::put_destination_key(
                    w,
                    &crate::migration::DestinationKey { spki_der: b"spki".to_vec(), evidence },
                );
                codec::put_opt_bytes(w, None);
                w.u8(OaepHash::Sha1.code());
            })
        };
        let import_finish = |s: &mut Staging| {
            call(s, op::IMPORT_FINISH, |w| {
                codec::put_opt_bytes(w, Some(&[0; 256]));
            })
        };
        assert_eq!(export_finish(&mut s), refusal(why::CHUNK_SEQUENCE));
        assert_eq!(import_finish(&mut s), refusal(why::CHUNK_SEQUENCE));
        begin(&mut s, op::EXPORT_BEGIN, 20).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        assert_eq!(export_finish(&mut s), refusal(why::CHUNK_SEQUENCE));
        begin(&mut s, op::IMPORT_BEGIN, 20).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        assert_eq!(import_finish(&mut s), refusal(why::TRUNCATED), "cut in transit");
        begin(&mut s, op::EXPORT_BEGIN, 10).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        assert_eq!(import_finish(&mut s), refusal(why::CHUNK_SEQUENCE));
        // A complete one reaches the trusted core (the mock cannot migrate) and is gone.
        begin(&mut s, op::EXPORT_BEGIN, 10).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        assert!(matches!(export_finish(&mut s), Err(Error::Unsupported { .. })));
        assert_eq!(s.held(), 0);
        // Ten bytes of junk are no package: the same refusal as a single call's.
        begin(&mut s, op::IMPORT_BEGIN, 10).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        assert_eq!(import_finish(&mut s), refusal(why::TRUNCATED));
    }

    #[test]
    fn limits_are_checked_before_anything_is_reserved() {
        let mut s = Staging::default();
        assert_eq!(begin(&mut s, op::EXPORT_BEGIN, MAX_UNTRUSTED_STATE + 1), refusal(why::TOO_LARGE));
        assert_eq!(begin(&mut s, op::IMPORT_BEGIN, MAX_PACKAGE_LEN + 1), refusal(why::TOO_LARGE));
        assert_eq!(begin(&mut s, op::IMPORT_BEGIN, usize::MAX), refusal(why::TOO_LARGE));
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn a_held_answer_is_read_in_order_and_then_freed() {
        let mut s = Staging::default();
        let mut w = Writer::new();
        let bytes: Vec<u8> = (0..=255).collect();
        s.answer(&mut w, StageBuf { bytes: bytes.clone(), scrub: true }, CAP);
        assert_eq!(w.buf[0], STAGED_HELD);
        let mut got = Vec::new();
        while got.len() < bytes.len() {
            let res = call(&mut s, op::RESULT_CHUNK, |w| {
                w.usize(got.len()).u32(1000);
            })
            .unwrap();
            let mut r = Reader::new(&res);
            let piece = r.bytes().unwrap();
            assert!(!piece.is_empty() && res.len() <= CAP, "capped by the result area");
            got.extend_from_slice(piece);
        }
        assert_eq!(got, bytes);
        assert_eq!(s.held(), 0, "read to the end, freed");
        let again = call(&mut s, op::RESULT_CHUNK, |w| {
            w.usize(0).u32(1000);
        });
        assert_eq!(again, refusal(why::CHUNK_SEQUENCE));

        s.answer(&mut w, StageBuf { bytes: bytes.clone(), scrub: false }, CAP);
        let skip = call(&mut s, op::RESULT_CHUNK, |w| {
            w.usize(10).u32(1000);
        });
        assert_eq!(skip, refusal(why::CHUNK_SEQUENCE));
        assert_eq!(s.held(), 0, "out of order, discarded");

        let mut w = Writer::new();
        s.answer(&mut w, StageBuf { bytes: vec![9; 10], scrub: false }, CAP);
        assert_eq!((w.buf[0], s.held()), (STAGED_INLINE, 0), "small answers go inline");
    }

    #[test]
    fn a_backup_is_one_staged_call_that_discards_a_transfer_in_progress() {
        let mut s = Staging::default();
        begin(&mut s, op::EXPORT_BEGIN, 20).unwrap();
        chunk(&mut s, 0, 10).unwrap();
        let backup = call(&mut s, op::EXPORT_SECRETS, |w| {
            w.bytes(b"spki").bytes(b"certificate").u8(OaepHash::Sha256.code()).bytes(b"config");
        });
        // It reached the trusted core (the mock cannot back up), and nothing is kept.
        assert!(matches!(backup, Err(Error::Unsupported { .. })), "{backup:?}");
        assert_eq!(s.held(), 0);
        assert_eq!(chunk(&mut s, 10, 10), refusal(why::CHUNK_SEQUENCE));
    }

    #[test]
    fn other_opcodes_are_not_staged_and_junk_is_the_transports() {
        let mut s = Staging::default();
        let mut e = MockEnclave::new(4);
        let mut w = Writer::new();
        assert!(dispatch(&mut s, &mut e, op::COUNTERS, &[], &mut w, CAP).is_none());
        let junk = dispatch(&mut s, &mut e, op::STAGE_CHUNK, &[1, 2, 3], &mut w, CAP);
        assert_eq!(junk, Some(Err(RejectReason::BadArguments)));
    }
}
