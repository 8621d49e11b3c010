//! AES-CBC (RFC 3602) over RustCrypto `aes` + `cbc`, in place, no padding (ESP and IKE add
//! their own). The `aes` key schedules zeroize on drop (its `zeroize` feature).

use aes::cipher::block_padding::NoPadding;
use aes::cipher::{BlockDecryptMut, BlockEncrypt, BlockEncryptMut, InnerIvInit, KeyInit};
use enclave_api::error::{Error, Result};

pub(crate) const BLOCK: usize = 16;

/// An encryption key schedule; short-lived (built per packet or message), so the
/// variants' size difference does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum CbcEncryptor {
    Aes128(aes::Aes128Enc),
    Aes256(aes::Aes256Enc),
}

/// A decryption key schedule; short-lived like [`CbcEncryptor`].
#[allow(clippy::large_enum_variant)]
pub(crate) enum CbcDecryptor {
    Aes128(aes::Aes128Dec),
    Aes256(aes::Aes256Dec),
}

fn key_err(_: aes::cipher::InvalidLength) -> Error {
    Error::Internal { what: "AES key length" }
}

impl CbcEncryptor {
    pub(crate) fn new(key: &[u8]) -> Result<Self> {
        Ok(match key.len() {
            16 => Self::Aes128(aes::Aes128Enc::new_from_slice(key).map_err(key_err)?),
            32 => Self::Aes256(aes::Aes256Enc::new_from_slice(key).map_err(key_err)?),
            _ => return Err(Error::Internal { what: "AES key length" }),
        })
    }

    /// Encrypts one block in place (raw AES, for IV generation).
    pub(crate) fn encrypt_block(&self, block: &mut [u8; BLOCK]) {
        let b = aes::Block::from_mut_slice(block);
        match self {
            Self::Aes128(c) => c.encrypt_block(b),
            Self::Aes256(c) => c.encrypt_block(b),
        }
    }

    /// CBC-encrypts `buf` (a whole number of blocks) in place.
    pub(crate) fn encrypt(&self, iv: &[u8; BLOCK], buf: &mut [u8]) -> Result<()> {
        if !buf.len().is_multiple_of(BLOCK) {
            return Err(Error::Internal { what: "CBC length" });
        }
        let len = buf.len();
        let ok = match self {
            Self::Aes128(c) => cbc::Encryptor::<aes::Aes128Enc>::inner_iv_init(c.clone(), iv.into())
                .encrypt_padded_mut::<NoPadding>(buf, len)
                .is_ok(),
            Self::Aes256(c) => cbc::Encryptor::<aes::Aes256Enc>::inner_iv_init(c.clone(), iv.into())
                .encrypt_padded_mut::<NoPadding>(buf, len)
                .is_ok(),
        };
        ok.then_some(()).ok_or(Error::Internal { what: "CBC encrypt" })
    }
}

impl CbcDecryptor {
    pub(crate) fn new(key: &[u8]) -> Result<Self> {
        Ok(match key.len() {
            16 => Self::Aes128(aes::Aes128Dec::new_from_slice(key).map_err(key_err)?),
            32 => Self::Aes256(aes::Aes256Dec::new_from_slice(key).map_err(key_err)?),
            _ => return Err(Error::Internal { what: "AES key length" }),
        })
    }

    /// CBC-decrypts `buf` (a whole number of blocks) in place.
    pub(crate) fn decrypt(&self, iv: &[u8; BLOCK], buf: &mut [u8]) -> Result<()> {
        if !buf.len().is_multiple_of(BLOCK) {
            return Err(Error::Internal { what: "CBC length" });
        }
        let ok = match self {
            Self::Aes128(c) => cbc::Decryptor::<aes::Aes128Dec>::inner_iv_init(c.clone(), iv.into())
                .decrypt_padded_mut::<NoPadding>(buf)
                .is_ok(),
            Self::Aes256(c) => cbc::Decryptor::<aes::Aes256Dec>::inner_iv_init(c.clone(), iv.into())
                .decrypt_padded_mut::<NoPadding>(buf)
                .is_ok(),
        };
        ok.then_some(()).ok_or(Error::Internal { what: "CBC decrypt" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hex_literal::hex;

    #[test]
    fn rfc3602_case_2() {
        // RFC 3602 §4, Case #2: 32 bytes with a 128-bit key.
        let key = hex!("c286696d887c9aa0611bbb3e2025a45a");
        let iv = hex!("562e17996d093d28ddb3ba695a2e6f58");
        let pt = hex!("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        let ct = hex!("d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1");
        let mut buf = pt;
        CbcEncryptor::new(&key).unwrap().encrypt(&iv, &mut buf).unwrap();
        assert_eq!(buf, ct);
        CbcDecryptor::new(&key).unwrap().decrypt(&iv, &mut buf).unwrap();
        assert_eq!(buf, pt);
    }
}
