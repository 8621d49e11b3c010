//! How each argument and result type of the call table ([`crate::calls`]) crosses the
//! process boundary, so that the host stubs (`cloister-enclave-host`) and the guest's
//! dispatch (`cloister-enclave`) are made from the table instead of written per call.
//!
//! A call's arguments are its parameters in order, each as its [`Arg`] encoding; an
//! `#[out]` buffer as its length (`u32`), an `#[inout]` one as its bytes. Its result is
//! the return value as its [`Ret`] encoding, then every `#[out]` and `#[inout]` buffer's
//! bytes in parameter order. The guest reads everything it is given into private memory
//! before it calls the trusted core, and refuses trailing bytes.

use super::codec::{self, Malformed, PeerOwned, Reader, Writer};
use crate::alg::{AuthMethod, DhGroup, SecretKind};
use crate::attest::Evidence;
use crate::error::Error;
use crate::esp::EspSaParams;
use crate::handle::{DhHandle, EspSaHandle, IkeSaHandle, SecretHandle};
use crate::ike::{
    AuthAnswered, AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal,
    IkeSaParams, IntermediateExchange, OurAuth, PeerAuthCheck, PeerCredential, SealedBlob,
};
use crate::migration::DestinationKey;
use crate::provision::ProvisioningOffer;
use crate::report::{Counters, MemoryReport};
use core::ops::Range;

/// A parameter type: the host writes it; the guest reads it back as `Held` (which may
/// borrow the guest's private copy of the arguments) and lends it to the call as `Param`,
/// the parameter type itself with the guest's lifetimes.
pub trait Arg {
    /// What the guest decodes.
    type Held<'a>;
    /// What the call takes, borrowed from `Held`.
    type Param<'h>;
    /// Host side: appends the encoding.
    fn put(&self, w: &mut Writer);
    /// Guest side: reads the encoding.
    fn get<'a>(r: &mut Reader<'a>) -> Result<Self::Held<'a>, Malformed>;
    /// Guest side: the value the call takes.
    fn pass<'h, 'a: 'h>(held: &'h Self::Held<'a>) -> Self::Param<'h>;
}

/// A return type: the guest writes it, the host reads it back.
pub trait Ret: Sized {
    /// Guest side: appends the encoding.
    fn put(&self, w: &mut Writer);
    /// Host side: reads the encoding.
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed>;
}

/// Handles cross as their `u32`, both ways.
macro_rules! handle_wire {
    ($($h:ident),*) => {$(
        impl Arg for $h {
            type Held<'a> = $h;
            type Param<'h> = $h;
            fn put(&self, w: &mut Writer) {
                w.u32(self.0);
            }
            fn get<'a>(r: &mut Reader<'a>) -> Result<$h, Malformed> {
                r.u32().map($h)
            }
            fn pass<'h, 'a: 'h>(held: &'h $h) -> $h {
                *held
            }
        }
        impl Ret for $h {
            fn put(&self, w: &mut Writer) {
                w.u32(self.0);
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
                r.u32().map($h)
            }
        }
    )*};
}
handle_wire!(SecretHandle, DhHandle, IkeSaHandle, EspSaHandle);

/// A parameter that is plain data, read whole by the guest: `Held` is the value itself
/// and the call borrows it (`by_ref`) or takes a copy (`by_value`).
macro_rules! owned_arg {
    (by_value $t:ty, |$s:ident, $w:ident| $put:expr, |$r:ident| $get:expr) => {
        impl Arg for $t {
            type Held<'a> = $t;
            type Param<'h> = $t;
            fn put(&self, $w: &mut Writer) {
                let $s = self;
                $put;
            }
            fn get<'a>($r: &mut Reader<'a>) -> Result<$t, Malformed> {
                $get
            }
            fn pass<'h, 'a: 'h>(held: &'h $t) -> $t {
                *held
            }
        }
    };
    (by_ref $t:ty, |$s:ident, $w:ident| $put:expr, |$r:ident| $get:expr) => {
        impl Arg for &$t {
            type Held<'a> = $t;
            type Param<'h> = &'h $t;
            fn put(&self, $w: &mut Writer) {
                let $s: &$t = self;
                $put;
            }
            fn get<'a>($r: &mut Reader<'a>) -> Result<$t, Malformed> {
                $get
            }
            fn pass<'h, 'a: 'h>(held: &'h $t) -> &'h $t {
                held
            }
        }
    };
}
owned_arg!(by_value usize, |s, w| w.usize(*s), |r| r.usize());
owned_arg!(by_value u8, |s, w| w.u8(*s), |r| r.u8());
owned_arg!(by_value DhGroup, |s, w| w.u16(s.id()), |r| codec::get_dh_group(r));
owned_arg!(by_value AuthSpec, |s, w| codec::put_auth_spec(w, *s), |r| codec::get_auth_spec(r));
owned_arg!(by_ref [u8; 32], |s, w| w.bytes(s), |r| r.bytes()?.try_into().map_err(|_| Malformed));
owned_arg!(by_ref SealedBlob, |s, w| w.bytes(&s.0), |r| Ok(SealedBlob(r.bytes()?.to_vec())));
owned_arg!(by_ref EspSaParams, |s, w| codec::put_esp_sa_params(w, s), |r| codec::get_esp_sa_params(r));

/// Parameters that borrow the arguments: `Held` borrows the guest's copy.
macro_rules! borrowed_arg {
    (by_value $t:ident, |$s:ident, $w:ident| $put:expr, |$r:ident| $get:expr) => {
        impl Arg for $t<'_> {
            type Held<'a> = $t<'a>;
            type Param<'h> = $t<'h>;
            fn put(&self, $w: &mut Writer) {
                let $s = self;
                $put;
            }
            fn get<'a>($r: &mut Reader<'a>) -> Result<$t<'a>, Malformed> {
                $get
            }
            fn pass<'h, 'a: 'h>(held: &'h $t<'a>) -> $t<'h> {
                *held
            }
        }
    };
    (by_ref $t:ident, |$s:ident, $w:ident| $put:expr, |$r:ident| $get:expr) => {
        impl Arg for &$t<'_> {
            type Held<'a> = $t<'a>;
            type Param<'h> = &'h $t<'h>;
            fn put(&self, $w: &mut Writer) {
                let $s: &$t<'_> = self;
                $put;
            }
            fn get<'a>($r: &mut Reader<'a>) -> Result<$t<'a>, Malformed> {
                $get
            }
            fn pass<'h, 'a: 'h>(held: &'h $t<'a>) -> &'h $t<'h> {
                held
            }
        }
    };
}
borrowed_arg!(by_value DhExchange, |s, w| codec::put_dh_exchange(w, s), |r| codec::get_dh_exchange(r));
borrowed_arg!(by_ref IkeSaParams, |s, w| codec::put_ike_params(w, s), |r| codec::get_ike_params(r));
borrowed_arg!(by_ref ChildSaParams, |s, w| codec::put_child_params(w, s), |r| codec::get_child_params(r));
borrowed_arg!(by_ref AuthInput, |s, w| codec::put_auth_input(w, s), |r| codec::get_auth_input(r));
borrowed_arg!(by_ref OurAuth, |s, w| put_our_auth(w, s), |r| get_our_auth(r));
borrowed_arg!(by_ref IntermediateExchange, |s, w| put_intermediate(w, s), |r| get_intermediate(r));

fn put_intermediate(w: &mut Writer, x: &IntermediateExchange<'_>) {
    w.bytes(x.nonce_i).bytes(x.nonce_r).bytes(x.request).bytes(x.response);
}

fn get_intermediate<'a>(r: &mut Reader<'a>) -> Result<IntermediateExchange<'a>, Malformed> {
    Ok(IntermediateExchange {
        nonce_i: r.bytes()?,
        nonce_r: r.bytes()?,
        request: r.bytes()?,
        response: r.bytes()?,
    })
}

fn put_our_auth(w: &mut Writer, o: &OurAuth<'_>) {
    w.u32(o.credential.0);
    codec::put_auth_spec(w, o.spec);
    codec::put_auth_input(w, &o.input);
}

fn get_our_auth<'a>(r: &mut Reader<'a>) -> Result<OurAuth<'a>, Malformed> {
    Ok(OurAuth {
        credential: SecretHandle(r.u32()?),
        spec: codec::get_auth_spec(r)?,
        input: codec::get_auth_input(r)?,
    })
}

impl Arg for &[u8] {
    type Held<'a> = &'a [u8];
    type Param<'h> = &'h [u8];
    fn put(&self, w: &mut Writer) {
        w.bytes(self);
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], Malformed> {
        r.bytes()
    }
    fn pass<'h, 'a: 'h>(held: &'h &'a [u8]) -> &'h [u8] {
        held
    }
}

impl Arg for Option<&SealedBlob> {
    type Held<'a> = Option<SealedBlob>;
    type Param<'h> = Option<&'h SealedBlob>;
    fn put(&self, w: &mut Writer) {
        codec::put_opt_bytes(w, self.map(|b| &b.0[..]));
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<Option<SealedBlob>, Malformed> {
        Ok(codec::get_opt_bytes(r)?.map(|b| SealedBlob(b.to_vec())))
    }
    fn pass<'h, 'a: 'h>(held: &'h Option<SealedBlob>) -> Option<&'h SealedBlob> {
        held.as_ref()
    }
}

impl Arg for Option<DhExchange<'_>> {
    type Held<'a> = Option<DhExchange<'a>>;
    type Param<'h> = Option<DhExchange<'h>>;
    fn put(&self, w: &mut Writer) {
        match self {
            Some(x) => codec::put_dh_exchange(w.u8(1), x),
            None => {
                w.u8(0);
            }
        }
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<Option<DhExchange<'a>>, Malformed> {
        Ok(if r.bool()? { Some(codec::get_dh_exchange(r)?) } else { None })
    }
    fn pass<'h, 'a: 'h>(held: &'h Option<DhExchange<'a>>) -> Option<DhExchange<'h>> {
        *held
    }
}

impl Arg for &[DhExchange<'_>] {
    type Held<'a> = Vec<DhExchange<'a>>;
    type Param<'h> = &'h [DhExchange<'h>];
    fn put(&self, w: &mut Writer) {
        w.u32(u32::try_from(self.len()).unwrap_or(u32::MAX));
        for x in self.iter() {
            codec::put_dh_exchange(w, x);
        }
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<Vec<DhExchange<'a>>, Malformed> {
        let n = r.u32()?;
        // More than RFC 9370's eight is refused by the call; no more are read.
        if n > 8 {
            return Err(Malformed);
        }
        (0..n).map(|_| codec::get_dh_exchange(r)).collect()
    }
    fn pass<'h, 'a: 'h>(held: &'h Vec<DhExchange<'a>>) -> &'h [DhExchange<'h>] {
        held
    }
}

impl Arg for PeerCredential<'_> {
    type Held<'a> = PeerOwned;
    type Param<'h> = PeerCredential<'h>;
    fn put(&self, w: &mut Writer) {
        codec::put_peer(w, self);
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<PeerOwned, Malformed> {
        codec::get_peer(r)
    }
    fn pass<'h, 'a: 'h>(held: &'h PeerOwned) -> PeerCredential<'h> {
        held.as_credential()
    }
}

/// The peer's half of `auth_verify_compute`, held by the guest.
#[derive(Debug)]
pub struct PeerAuthHeld<'a> {
    credential: PeerOwned,
    method: u8,
    auth_data: &'a [u8],
    input: AuthInput<'a>,
}

impl Arg for PeerAuthCheck<'_> {
    type Held<'a> = PeerAuthHeld<'a>;
    type Param<'h> = PeerAuthCheck<'h>;
    fn put(&self, w: &mut Writer) {
        codec::put_peer(w, &self.credential);
        w.u8(self.method).bytes(self.auth_data);
        codec::put_auth_input(w, &self.input);
    }
    fn get<'a>(r: &mut Reader<'a>) -> Result<PeerAuthHeld<'a>, Malformed> {
        Ok(PeerAuthHeld {
            credential: codec::get_peer(r)?,
            method: r.u8()?,
            auth_data: r.bytes()?,
            input: codec::get_auth_input(r)?,
        })
    }
    fn pass<'h, 'a: 'h>(held: &'h PeerAuthHeld<'a>) -> PeerAuthCheck<'h> {
        PeerAuthCheck {
            credential: held.credential.as_credential(),
            method: held.method,
            auth_data: held.auth_data,
            input: held.input,
        }
    }
}

/// A result that is written and read by two codec functions.
macro_rules! codec_ret {
    ($($t:ty => $put:path, $get:path;)*) => {$(
        impl Ret for $t {
            fn put(&self, w: &mut Writer) {
                $put(w, self);
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
                $get(r)
            }
        }
    )*};
}
codec_ret! {
    Evidence => codec::put_evidence, codec::get_evidence;
    MemoryReport => codec::put_memory_report, codec::get_memory_report;
    Counters => codec::put_counters, codec::get_counters;
    ProvisioningOffer => codec::put_offer, codec::get_offer;
    DestinationKey => codec::put_destination_key, codec::get_destination_key;
    AuthVerified => codec::put_auth_verified, codec::get_auth_verified;
    Error => codec::put_error, codec::get_error;
}

impl Ret for () {
    fn put(&self, _: &mut Writer) {}
    fn get(_: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(())
    }
}

impl Ret for usize {
    fn put(&self, w: &mut Writer) {
        w.usize(*self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.usize()
    }
}

impl Ret for SealedBlob {
    fn put(&self, w: &mut Writer) {
        w.bytes(&self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(SealedBlob(r.bytes()?.to_vec()))
    }
}

impl Ret for SecretKind {
    fn put(&self, w: &mut Writer) {
        codec::put_secret_kind(w, *self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        codec::get_secret_kind(r)
    }
}

impl Ret for AuthMethod {
    fn put(&self, w: &mut Writer) {
        w.u8(self.id());
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        codec::get_auth_method(r)
    }
}

impl<A: Ret, B: Ret> Ret for (A, B) {
    fn put(&self, w: &mut Writer) {
        self.0.put(w);
        self.1.put(w);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok((A::get(r)?, B::get(r)?))
    }
}

/// A result inside a result (the second half of `auth_verify_compute`).
impl<T: Ret> Ret for Result<T, Error> {
    fn put(&self, w: &mut Writer) {
        match self {
            Ok(v) => v.put(w.u8(0)),
            Err(e) => codec::put_error(w.u8(1), e),
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        match r.u8()? {
            0 => Ok(Ok(T::get(r)?)),
            1 => Ok(Err(codec::get_error(r)?)),
            _ => Err(Malformed),
        }
    }
}

impl Ret for Range<usize> {
    fn put(&self, w: &mut Writer) {
        w.usize(self.start).usize(self.end);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let (start, end) = (r.usize()?, r.usize()?);
        (start <= end).then_some(start..end).ok_or(Malformed)
    }
}

impl Ret for ChildSaPair {
    fn put(&self, w: &mut Writer) {
        w.u32(self.inbound.0).u32(self.outbound.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(ChildSaPair { inbound: EspSaHandle(r.u32()?), outbound: EspSaHandle(r.u32()?) })
    }
}

impl Ret for EstablishSeal {
    fn put(&self, w: &mut Writer) {
        w.bytes(&self.sk_d.0)
            .bytes(&self.state.0)
            .usize(self.ike_sa_bytes_before)
            .usize(self.ike_sa_bytes_after);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(EstablishSeal {
            sk_d: SealedBlob(r.bytes()?.to_vec()),
            state: SealedBlob(r.bytes()?.to_vec()),
            ike_sa_bytes_before: r.usize()?,
            ike_sa_bytes_after: r.usize()?,
        })
    }
}

impl Ret for AuthAnswered {
    fn put(&self, w: &mut Writer) {
        self.verified.put(w);
        self.ours.put(w);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(AuthAnswered { verified: AuthVerified::get(r)?, ours: Ret::get(r)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ike::{PublicKey, PublicKeyKind};

    fn round_trip<T: Arg>(v: T) -> Vec<u8> {
        let mut w = Writer::new();
        v.put(&mut w);
        {
            let mut r = Reader::new(&w.buf);
            let held = T::get(&mut r).expect("decodes");
            r.finish().expect("read whole");
            let _ = T::pass(&held);
        }
        w.buf
    }

    #[test]
    fn every_argument_reads_back_what_was_written() {
        let blob = SealedBlob(vec![7; 40]);
        let key = PublicKey { kind: PublicKeyKind::EcdsaP256, bytes: vec![4; 65] };
        let input = AuthInput { real_message: b"msg", peer_nonce: b"nonce", id_body: b"id" };
        round_trip(&[9u8; 32]);
        round_trip(&b"bytes"[..]);
        round_trip(&blob);
        round_trip(Some(&blob));
        round_trip(None::<&SealedBlob>);
        round_trip(Some(DhExchange { dh: DhHandle(3), peer_public: b"pub" }));
        round_trip(PeerCredential::PublicKey(&key));
        round_trip(&input);
        let check = PeerAuthCheck {
            credential: PeerCredential::SharedKey(SecretHandle(5)),
            method: 2,
            auth_data: b"auth",
            input,
        };
        let bytes = round_trip(check);
        let mut r = Reader::new(&bytes);
        let held = PeerAuthCheck::get(&mut r).expect("decodes");
        let back = PeerAuthCheck::pass(&held);
        assert!(matches!(back.credential, PeerCredential::SharedKey(SecretHandle(5))));
        assert_eq!((back.method, back.auth_data, back.input.id_body), (2, &b"auth"[..], &b"id"[..]));
    }

    #[test]
    fn a_truncated_argument_is_malformed() {
        let mut w = Writer::new();
        Some(&SealedBlob(vec![1; 8])).put(&mut w);
        for n in 0..w.buf.len() {
            assert!(<Option<&SealedBlob>>::get(&mut Reader::new(&w.buf[..n])).is_err(), "cut at {n}");
        }
    }

    #[test]
    fn results_read_back_and_bad_ones_are_malformed() {
        let mut w = Writer::new();
        let answered = AuthAnswered {
            verified: AuthVerified { method: AuthMethod::SharedKey, scheme: None },
            ours: Err(Error::UnknownHandle { kind: crate::handle::HandleKind::IkeSa, handle: 4 }),
        };
        answered.put(&mut w);
        (3usize..9).put(&mut w);
        let mut r = Reader::new(&w.buf);
        assert_eq!(AuthAnswered::get(&mut r).expect("answered"), answered);
        assert_eq!(Range::<usize>::get(&mut r).expect("range"), 3..9);
        r.finish().expect("read whole");

        let mut w = Writer::new();
        w.usize(9).usize(3);
        assert!(Range::<usize>::get(&mut Reader::new(&w.buf)).is_err(), "start after end");
        assert!(<Result<(), Error>>::get(&mut Reader::new(&[2])).is_err(), "unknown tag");
    }
}
