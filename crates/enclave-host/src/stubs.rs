//! [`Enclave`] for [`ProcessEnclave`]: one stub per call of the table
//! ([`enclave_api::calls`]), each writing its arguments and reading its result as
//! [`enclave_api::process::wire`] says. The staged calls (export and import, whose data
//! may exceed the call area) and the methods that are not calls are written here by hand.

use super::{decode, len_u32, ProcessEnclave};
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspStatus};
use enclave_api::handle::TenantId;
use enclave_api::migration::{why, DestinationKey, MigrationPackage, MigrationRestore, OaepHash};
use enclave_api::process::codec::{self, op, Malformed, Writer};
use enclave_api::process::wire::{Arg, Ret};
use enclave_api::Enclave;

/// The whole impl: the hand-written methods, then a stub per table entry.
macro_rules! host_stubs {
    ([$($local:tt)*] $(
        $(#[$attr:meta])*
        $kind:ident $opname:ident = $opnum:literal
        fn $name:ident ( $( $(#[$pm:ident])? $p:ident : $t:ty ),* ) -> $ret:ty $( = |$dthis:ident| $default:block )? ;
    )*) => {
        impl Enclave for ProcessEnclave {
            $($local)*
            $( host_stub! { $kind $opname fn $name ( $( [$($pm)?] $p : $t ),* ) -> $ret } )*
        }
    };
}

/// One stub. A query answers its default when the crossing fails (the trait's contract);
/// a call or composite is one crossing; a staged call is hand-written.
macro_rules! host_stub {
    (staged $($rest:tt)*) => {};
    (query $opname:ident fn $name:ident () -> $ret:ty) => {
        fn $name(&self) -> $ret {
            let res = self.locked().call(op::$opname, &[]).map(<[u8]>::to_vec);
            res.ok().and_then(|b| decode(&b, <$ret as Ret>::get).ok()).unwrap_or_default()
        }
    };
    ($kind:ident $opname:ident fn $name:ident ( $( [$($pm:ident)?] $p:ident : $t:ty ),* ) -> $ret:ty) => {
        fn $name(&mut self $(, $p: $t)*) -> Result<$ret> {
            #[allow(unused_mut)] // a call without arguments writes none
            let mut w = Writer::new();
            $( host_put!([$($pm)?] w, $p); )*
            let res = self.call(op::$opname, &w)?;
            decode(&res, |r| {
                let ret = <$ret as Ret>::get(r)?;
                $( host_take!([$($pm)?] r, $p); )*
                Ok(ret)
            })
        }
    };
}

/// An argument: an `#[out]` buffer crosses as its length, an `#[inout]` one as its bytes.
macro_rules! host_put {
    ([out] $w:ident, $p:ident) => {
        $w.u32(len_u32($p.len()));
    };
    ([inout] $w:ident, $p:ident) => {
        $w.bytes($p);
    };
    ([] $w:ident, $p:ident) => {
        Arg::put(&$p, &mut $w);
    };
}

/// After the return value: an `#[out]` or `#[inout]` buffer's new bytes, exactly its length.
macro_rules! host_take {
    ([] $r:ident, $p:ident) => {};
    ([$m:ident] $r:ident, $p:ident) => {{
        let got = $r.bytes()?;
        if got.len() != $p.len() {
            return Err(Malformed);
        }
        $p.copy_from_slice(got);
    }};
}

enclave_api::enclave_calls!({ host_stubs } [
    fn tenant(&self) -> TenantId {
        self.tenant
    }

    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        self.host().esp_batch(packets, descriptors, status)
    }

    fn export_state(
        &mut self,
        destination: &DestinationKey,
        hsm_spki: Option<&[u8]>,
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let h = self.host();
        let mut w = Writer::new();
        codec::put_destination_key(&mut w, destination);
        codec::put_opt_bytes(&mut w, hsm_spki);
        w.u8(oaep.code());
        let bytes = if h.fits(w.buf.len().saturating_add(4).saturating_add(untrusted_state.len())) {
            w.bytes(untrusted_state);
            h.staged_result(op::EXPORT_STATE, &w.buf)?
        } else {
            // Streamed into the enclave process, then the same export runs on it there.
            h.stage_in(op::EXPORT_BEGIN, untrusted_state)?;
            h.staged_result(op::EXPORT_FINISH, &w.buf)?
        };
        // The guest's answer is parsed like any package from elsewhere.
        MigrationPackage::from_bytes(bytes)
    }

    fn export_secrets(
        &mut self,
        wrap_spki: &[u8],
        certificate: &[u8],
        oaep: OaepHash,
        untrusted_state: &[u8],
    ) -> Result<MigrationPackage> {
        let h = self.host();
        let mut w = Writer::new();
        w.bytes(wrap_spki).bytes(certificate).u8(oaep.code());
        // No chunked form: a backup's untrusted state (configuration text) is small, and
        // one call keeps the staging protocol to the move it was made for.
        if !h.fits(w.buf.len().saturating_add(4).saturating_add(untrusted_state.len())) {
            return Err(Error::Migration { why: why::TOO_LARGE });
        }
        w.bytes(untrusted_state);
        let bytes = h.staged_result(op::EXPORT_SECRETS, &w.buf)?;
        MigrationPackage::from_bytes(bytes)
    }

    fn import_state(
        &mut self,
        package: &MigrationPackage,
        hsm_share: Option<&[u8]>,
    ) -> Result<MigrationRestore> {
        let h = self.host();
        let mut w = Writer::new();
        codec::put_opt_bytes(&mut w, hsm_share);
        let single = package.as_bytes().len().saturating_add(4).saturating_add(w.buf.len());
        let res = if h.fits(single) {
            let mut w = Writer::new();
            w.bytes(package.as_bytes());
            codec::put_opt_bytes(&mut w, hsm_share);
            h.staged_result(op::IMPORT_STATE, &w.buf)?
        } else {
            h.stage_in(op::IMPORT_BEGIN, package.as_bytes())?;
            h.staged_result(op::IMPORT_FINISH, &w.buf)?
        };
        decode(&res, codec::get_restore)
    }
]);
