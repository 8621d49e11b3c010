//! Extensible Authentication payload (RFC 7296 §3.16) carrying one EAP message (RFC 3748).

use super::macros::registry;
use super::payload::Body;
use super::reader::Reader;
use super::writer::{fit, Writer};
use crate::{Error, Result};

registry! {
    /// EAP codes (RFC 3748 §4, RFC 6696), the first octet of an EAP message.
    pub struct EapCode(u8) {
        /// REQUEST (1): Request, sent by the authenticator.
        REQUEST = 0x01,
        /// RESPONSE (2): Response, sent by the peer.
        RESPONSE = 0x02,
        /// SUCCESS (3): Success: no Type field.
        SUCCESS = 0x03,
        /// FAILURE (4): Failure: no Type field.
        FAILURE = 0x04,
        /// INITIATE (5): Initiate (RFC 6696).
        INITIATE = 0x05,
        /// FINISH (6): Finish (RFC 6696).
        FINISH = 0x06,
    }
}

registry! {
    /// EAP method types (RFC 3748 §5, IANA "Method Types").
    pub struct EapType(u8) {
        /// IDENTITY (1): Identity.
        IDENTITY = 0x01,
        /// NOTIFICATION (2): Notification.
        NOTIFICATION = 0x02,
        /// NAK (3): Legacy Nak.
        NAK = 0x03,
        /// MD5_CHALLENGE (4): MD5-Challenge.
        MD5_CHALLENGE = 0x04,
        /// OTP (5): One-Time Password.
        OTP = 0x05,
        /// GTC (6): Generic Token Card.
        GTC = 0x06,
        /// TLS (13): EAP-TLS (RFC 5216).
        TLS = 0x0d,
        /// SIM (18): EAP-SIM (RFC 4186).
        SIM = 0x12,
        /// TTLS (21): EAP-TTLS (RFC 5281).
        TTLS = 0x15,
        /// AKA (23): EAP-AKA (RFC 4187).
        AKA = 0x17,
        /// PEAP (25): PEAP.
        PEAP = 0x19,
        /// MSCHAPV2 (26): EAP-MSCHAPv2.
        MSCHAPV2 = 0x1a,
        /// AKA_PRIME (50): EAP-AKA' (RFC 5448).
        AKA_PRIME = 0x32,
        /// EXPANDED (254): Expanded type with vendor ID (RFC 3748 §5.7).
        EXPANDED = 0xfe,
        /// EXPERIMENTAL (255): Experimental.
        EXPERIMENTAL = 0xff,
    }
}

/// EAP payload (RFC 7296 §3.16): one EAP message.
///
/// ```text
///                      1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Next Payload  |C|  RESERVED   |         Payload Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Code      | Identifier    |           Length              |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type      | Type_Data...
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// The EAP Length must equal the payload's body length. Requests and responses carry a
/// Type; Success and Failure are exactly four octets without one (RFC 3748 §4.2); other
/// codes have a Type exactly when they are longer than four octets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Eap {
    /// The EAP code.
    pub code: EapCode,
    /// Matches responses to requests.
    pub identifier: u8,
    /// The method type, absent for Success and Failure.
    pub ty: Option<EapType>,
    /// The Type-Data; empty when `ty` is `None`.
    pub data: Vec<u8>,
}

/// Code, Identifier and Length.
const EAP_HEADER_LEN: usize = 4;

impl Eap {
    /// Fails with `BadLength` if the code and the presence of a Type disagree.
    fn check(&self) -> Result<()> {
        let typed = self.ty.is_some();
        let fits = match self.code {
            EapCode::REQUEST | EapCode::RESPONSE => typed,
            EapCode::SUCCESS | EapCode::FAILURE => !typed,
            _ => true,
        } && (typed || self.data.is_empty());
        if fits {
            Ok(())
        } else {
            Err(Error::BadLength {
                what: Self::WHAT,
                len: EAP_HEADER_LEN + usize::from(typed) + self.data.len(),
                why: "requests and responses need a Type, Success and Failure have none",
            })
        }
    }
}

impl Body for Eap {
    const WHAT: &'static str = "EAP payload";

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let code = EapCode(r.u8(Self::WHAT)?);
        let identifier = r.u8(Self::WHAT)?;
        let len = usize::from(r.u16(Self::WHAT)?);
        let have = EAP_HEADER_LEN + r.left();
        if len != have {
            return Err(Error::BadLength {
                what: "EAP message",
                len,
                why: "differs from the EAP payload length",
            });
        }
        let ty = if r.is_empty() { None } else { Some(EapType(r.u8(Self::WHAT)?)) };
        let eap = Self { code, identifier, ty, data: r.rest().to_vec() };
        eap.check()?;
        Ok(eap)
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<()> {
        self.check()?;
        let len = EAP_HEADER_LEN + usize::from(self.ty.is_some()) + self.data.len();
        w.u8(self.code.0);
        w.u8(self.identifier);
        w.u16(fit(len, "EAP message")?);
        if let Some(ty) = self.ty {
            w.u8(ty.0);
        }
        w.bytes(&self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::payload::{Payload, PayloadType};
    use super::super::test_util::{assert_round_trip, decode_one, encode_one};
    use super::*;
    use hex_literal::hex;

    #[test]
    fn identity_request_round_trips() {
        let bytes = hex!("00 00 0009 01 07 0005 01");
        let expected = Payload::Eap(Eap {
            code: EapCode::REQUEST,
            identifier: 7,
            ty: Some(EapType::IDENTITY),
            data: vec![],
        });
        assert_round_trip(PayloadType::EAP, &bytes, &expected);
    }

    #[test]
    fn identity_response_round_trips() {
        let bytes = hex!("00 00 000d 02 07 0009 01 63617270"); // "carp"
        let expected = Payload::Eap(Eap {
            code: EapCode::RESPONSE,
            identifier: 7,
            ty: Some(EapType::IDENTITY),
            data: b"carp".to_vec(),
        });
        assert_round_trip(PayloadType::EAP, &bytes, &expected);
    }

    #[test]
    fn success_round_trips_without_type() {
        let bytes = hex!("00 00 0008 03 08 0004");
        let expected = Payload::Eap(Eap { code: EapCode::SUCCESS, identifier: 8, ty: None, data: vec![] });
        assert_round_trip(PayloadType::EAP, &bytes, &expected);
    }

    #[test]
    fn eap_length_must_match_the_payload() {
        assert_eq!(
            decode_one(PayloadType::EAP, &hex!("00 00 0009 01 07 0006 01")),
            Err(Error::BadLength { what: "EAP message", len: 6, why: "differs from the EAP payload length" })
        );
    }

    #[test]
    fn code_and_type_must_agree() {
        // A request without a type, a success with one.
        assert!(matches!(
            decode_one(PayloadType::EAP, &hex!("00 00 0008 01 07 0004")),
            Err(Error::BadLength { .. })
        ));
        assert!(matches!(
            decode_one(PayloadType::EAP, &hex!("00 00 0009 03 07 0005 01")),
            Err(Error::BadLength { .. })
        ));
        let no_type_with_data = Eap { code: EapCode(9), identifier: 0, ty: None, data: vec![1] };
        assert!(encode_one(Payload::Eap(no_type_with_data)).is_err());
    }
}
