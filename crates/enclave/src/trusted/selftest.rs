//! Known-answer self-tests run when an enclave instance starts (the idea of strongSwan's
//! crypto_tester): a fast subset, one vector per primitive family, through the same code
//! paths the calls use. A failure makes start fail: the enclave never runs broken crypto.
//! The full published sets run as tests (tests/vectors/).

use super::cbc_mode::{CbcDecryptor, CbcEncryptor};
use super::dh::DhSecret;
use super::esp::{self, Direction, EspSa};
use super::esp_keys::{KeyCache, NO_SLOT};
use super::ike_keys::{EspKeys, MAX_ENC_KEY, MAX_INTEG_KEY};
use super::keybuf::KeyBuf;
use super::prf::{self, MAX_PRF_LEN};
use super::sk::{aead_key, nonce};
use enclave_api::alg::{Cipher, DhGroup, Prf, Suite};
use enclave_api::report::InboundMode;
use hex_literal::hex;
use ring::aead::Aad;

type Outcome = core::result::Result<(), &'static str>;

fn check(ok: bool, name: &'static str) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(name)
    }
}

/// Runs every self-test; the error names the first that failed.
pub(crate) fn run() -> Outcome {
    aes_gcm()?;
    chacha20_poly1305_esp()?;
    aes_cbc()?;
    hmac_prf()?;
    x25519()?;
    ecp256()?;
    Ok(())
}

/// McGrew–Viega GCM test case 4 (AES-128, 20 bytes AAD), split as RFC 4106 key || salt.
fn aes_gcm() -> Outcome {
    const NAME: &str = "AES-GCM-16 (McGrew-Viega test case 4)";
    let keymat = hex!("feffe9928665731c6d6a8f9467308308 cafebabe");
    let iv = hex!("facedbaddecaf888");
    let aad = hex!("feedfacedeadbeeffeedfacedeadbeefabaddad2");
    let mut buf = hex!(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
        "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39"
    );
    let expect = hex!(
        "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
        "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
        "5bc94fbc3221a5db94fae95ae7121a47"
    );
    let (key, salt) = aead_key(Cipher::AesGcm16_128, &keymat).map_err(|_| NAME)?;
    let tag =
        key.seal_in_place_separate_tag(nonce(&salt, &iv), Aad::from(&aad), &mut buf).map_err(|_| NAME)?;
    check(buf[..] == expect[..60] && tag.as_ref() == &expect[60..], NAME)
}

/// RFC 7634 Appendix A ESP example, through the ESP decrypt path (AAD, salt, IV handling).
fn chacha20_poly1305_esp() -> Outcome {
    const NAME: &str = "ChaCha20-Poly1305 ESP (RFC 7634 Appendix A)";
    let keys = EspKeys {
        enc: KeyBuf::<MAX_ENC_KEY>::from_slice(&hex!(
            "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f a0a1a2a3"
        ))
        .map_err(|_| NAME)?,
        integ: KeyBuf::<MAX_INTEG_KEY>::empty(),
    };
    let sa = EspSa::new(
        0x0102_0304,
        Direction::Inbound(InboundMode::Decrypt),
        false,
        Suite::aead(Cipher::ChaCha20Poly1305),
        keys,
    )
    .map_err(|_| NAME)?;
    let mut pkt = RFC7634_ESP_PACKET;
    let mut scratch = [0u8; RFC7634_ESP_PACKET.len()];
    let mut cache = KeyCache::new(1);
    let mut slot = NO_SLOT;
    let status = esp::decrypt_one(&sa, (&mut cache, &mut slot), &mut pkt, 5, &mut scratch);
    cache.forget(slot, sa.owner());
    check(status == crate::EspStatus::Ok && pkt[16..16 + 88] == RFC7634_ESP_PLAINTEXT, NAME)
}

/// RFC 7634 Appendix A: SPI 0x01020304, seq 5, IV, ciphertext, ICV.
pub(crate) const RFC7634_ESP_PACKET: [u8; 8 + 8 + 88 + 16] = hex!(
    "01020304 00000005 1011121314151617"
    "24039428b97f417e3c13753a4f05087b67c352e6a7fab1b982d466ef407ae5c6"
    "14ee8099d52844eb61aa95dfab4c02f72aa71e7c4c4f64c9befe2facc638e8f3"
    "cbec163fac469b502773f6fb94e664da9165b82829f641e076aaa8266b7fb0f7"
    "b11b369907e1ad43"
);

/// The plaintext of [`RFC7634_ESP_PACKET`]: an IPv4 ICMP echo and the ESP trailer.
pub(crate) const RFC7634_ESP_PLAINTEXT: [u8; 88] = hex!(
    "45000054a6f200004001e778c6336405c000020508005b7a3a080000553bec10"
    "0007362708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223"
    "2425262728292a2b2c2d2e2f303132333435363701020204"
);

/// RFC 3602 §4 case 2 (AES-128-CBC, two blocks).
fn aes_cbc() -> Outcome {
    const NAME: &str = "AES-CBC (RFC 3602 case 2)";
    let key = hex!("c286696d887c9aa0611bbb3e2025a45a");
    let iv = hex!("562e17996d093d28ddb3ba695a2e6f58");
    let pt = hex!("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
    let ct = hex!("d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1");
    let mut buf = pt;
    CbcEncryptor::new(&key).and_then(|e| e.encrypt(&iv, &mut buf)).map_err(|_| NAME)?;
    check(buf == ct, NAME)?;
    CbcDecryptor::new(&key).and_then(|d| d.decrypt(&iv, &mut buf)).map_err(|_| NAME)?;
    check(buf == pt, NAME)
}

/// RFC 4868 §2.7.1 PRF-HMAC-SHA-256 test case 1.
fn hmac_prf() -> Outcome {
    const NAME: &str = "PRF-HMAC-SHA-256 (RFC 4868 2.7.1 case 1)";
    let mut out = [0u8; MAX_PRF_LEN];
    prf::prf(Prf::HmacSha256, &[0x0b; 32], &[b"Hi There"], &mut out).map_err(|_| NAME)?;
    check(out[..32] == hex!("198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"), NAME)
}

/// RFC 7748 §6.1 (Alice's private key, Bob's public key).
fn x25519() -> Outcome {
    const NAME: &str = "X25519 (RFC 7748 6.1)";
    let a = hex!("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    let bob = hex!("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
    let z = DhSecret::from_known_private(DhGroup::Curve25519, &a)
        .and_then(|s| s.agree(&bob))
        .map_err(|_| NAME)?;
    check(z.as_slice() == hex!("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"), NAME)
}

/// RFC 5903 §8.1 (256-bit random ECP group).
fn ecp256() -> Outcome {
    const NAME: &str = "ECP-256 (RFC 5903 8.1)";
    let i = hex!("C88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433");
    let gr = hex!(
        "D12DFB5289C8D4F81208B70270398C342296970A0BCCB74C736FC7554494BF63"
        "56FBF3CA366CC23E8157854C13C58D6AAC23F046ADA30F8353E74F33039872AB"
    );
    let z =
        DhSecret::from_known_private(DhGroup::EcpP256, &i).and_then(|s| s.agree(&gr)).map_err(|_| NAME)?;
    check(z.as_slice() == hex!("D6840F6B42F6EDAFD13116E0E12565202FEF8E9ECE7DCE03812464D04B9442DE"), NAME)
}

#[cfg(test)]
mod tests {
    #[test]
    fn self_tests_pass() {
        assert_eq!(super::run(), Ok(()));
    }
}
