//! Static ESP SAs from wrapped keys: opening an ESP SA keys secret (provisioning kind 5,
//! format in [`crate::provision`]) into an SA's keys, and the record that keeps static keys
//! from repeating IVs.
//!
//! Why the record: a static outbound SA has no IKE behind it to make fresh keys, and it
//! starts at sequence number 1, which is the AEAD nonce (and the CBC IV's input). If the
//! untrusted side could install the same outbound keys twice (delete, install again), or an
//! inbound SA's keys as an outbound SA (the peer already sent with them from 1 up), a
//! (key, IV) pair would repeat; the per-SA rule that sequence numbers only increase cannot
//! see across SAs, nor across restarts of the enclave. So the platform's ledger (which
//! outlives the instance) keeps a digest of every wrapped key installed, and the enclave
//! refuses an outbound key seen before and a key in the direction it was not first seen in:
//! static outbound keys are good for one install per platform; wrap fresh ones to start
//! again.

use super::ike_keys::EspKeys;
use super::keybuf::KeyBuf;
use crate::provision::{ESP_KEYS_HEADER_LEN, ESP_KEYS_INBOUND, ESP_KEYS_OUTBOUND};
use enclave_api::alg::{Cipher, Integ, Suite};
use enclave_api::error::{Error, Result};
use enclave_api::esp::EspSaParams;
use enclave_api::ledger::{Ledger, LedgerError, StaticUse};

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b.get(at).copied().unwrap_or(0), b.get(at + 1).copied().unwrap_or(0)])
}

/// Checks an ESP SA keys secret against `params` and returns the keys. Nothing in an error
/// comes from the key bytes: only lengths and the name of the field that differs.
pub(crate) fn open(secret: &[u8], params: &EspSaParams) -> Result<EspKeys> {
    let bad = |what, why| Error::BadLength { what, len: secret.len(), why };
    let header =
        secret.get(..ESP_KEYS_HEADER_LEN).ok_or(bad("wrapped ESP SA keys", "shorter than the header"))?;
    let inbound = match (header[0], header[1]) {
        (ESP_KEYS_INBOUND, 0) => true,
        (ESP_KEYS_OUTBOUND, 0) => false,
        _ => return Err(bad("wrapped ESP SA keys", "unknown direction or reserved byte set")),
    };
    let spi = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    let (cipher_id, bits, integ_id) = (be16(header, 6), be16(header, 8), be16(header, 10));
    let cipher = Cipher::from_id(cipher_id, bits)
        .ok_or(Error::Unsupported { what: "wrapped ESP cipher", value: cipher_id })?;
    let integ = match integ_id {
        0 => None,
        id => {
            Some(Integ::from_id(id).ok_or(Error::Unsupported { what: "wrapped ESP integrity", value: id })?)
        }
    };
    let suite = Suite { cipher, integ };
    if !suite.is_consistent() {
        return Err(Error::InconsistentSuite { cipher: cipher_id, integ: integ_id });
    }
    let (enc_len, int_len) = (usize::from(header[12]), usize::from(header[13]));
    if secret.len() != ESP_KEYS_HEADER_LEN + enc_len + int_len {
        return Err(bad("wrapped ESP SA keys", "not the header's key lengths"));
    }
    if enc_len != suite.cipher.keymat_len() {
        let why = "not the transform's key length (AEADs add a 4-byte salt)";
        return Err(Error::BadLength { what: "wrapped ESP encryption key", len: enc_len, why });
    }
    if int_len != suite.integ_key_len() {
        let why = "not the integrity transform's key length";
        return Err(Error::BadLength { what: "wrapped ESP integrity key", len: int_len, why });
    }
    if inbound != params.inbound {
        return Err(Error::EspSaBinding { field: "direction" });
    }
    if spi != params.spi {
        return Err(Error::EspSaBinding { field: "SPI" });
    }
    // Same cipher and key length (the bits chose the `Cipher`), same integrity.
    if suite != params.suite {
        return Err(Error::EspSaBinding { field: "transform" });
    }
    let keys = secret.get(ESP_KEYS_HEADER_LEN..).unwrap_or(&[]);
    let (enc, integ) = keys.split_at_checked(enc_len).ok_or(Error::Internal { what: "ESP keys split" })?;
    Ok(EspKeys { enc: KeyBuf::from_slice(enc)?, integ: KeyBuf::from_slice(integ)? })
}

/// Admits `enc` for an SA of this direction, or refuses it (see the module docs): the
/// platform's ledger records a digest of each key installed (nothing there turns back into
/// a key) with the direction it was first installed in, across restarts of the enclave.
pub(crate) fn admit(ledger: &mut dyn Ledger, enc: &[u8], outbound: bool) -> Result<()> {
    match ledger.admit_static(digest(enc), outbound) {
        Ok(StaticUse::Admitted) => Ok(()),
        Ok(StaticUse::OutboundAgain) => {
            Err(Error::KeyReuse { why: "already installed for an outbound SA on this platform" })
        }
        Ok(StaticUse::OtherDirection) => {
            Err(Error::KeyReuse { why: "already used on this platform in the other direction" })
        }
        Err(LedgerError::Full) => Err(Error::Exhausted { what: "record of wrapped ESP keys" }),
        Err(LedgerError::Unavailable) => Err(Error::Internal { what: "platform ledger unavailable" }),
    }
}

/// SHA-256("cloister-esp-key-use-v1" || key), first 16 bytes: collisions between distinct
/// keys are out of reach, so only a real repeat is refused.
fn digest(key: &[u8]) -> [u8; 16] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"cloister-esp-key-use-v1");
    ctx.update(key);
    let full = ctx.finish();
    let mut d = [0u8; 16];
    d.copy_from_slice(full.as_ref().get(..16).unwrap_or(&[0; 16]));
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::esp_sa_keys;

    fn params(inbound: bool, suite: Suite) -> EspSaParams {
        EspSaParams { spi: 0x1234, inbound, esn: false, suite }
    }

    #[test]
    fn a_secret_opens_only_as_the_sa_it_names() {
        let cbc = Suite::cbc(Cipher::AesCbc128, Integ::HmacSha512_256);
        let p = params(true, cbc);
        let s = esp_sa_keys(&p, &[1; 16], &[2; 64]).unwrap();
        let k = open(&s, &p).unwrap();
        assert_eq!((k.enc.as_slice(), k.integ.as_slice()), (&[1u8; 16][..], &[2u8; 64][..]));
        // ESN is not bound.
        assert!(open(&s, &EspSaParams { esn: true, ..p }).is_ok());
        let binding = |field| Err(Error::EspSaBinding { field });
        assert_eq!(open(&s, &params(false, cbc)).map(drop), binding("direction"));
        assert_eq!(open(&s, &EspSaParams { spi: 9, ..p }).map(drop), binding("SPI"));
        let other = Suite::cbc(Cipher::AesCbc128, Integ::HmacSha256_128);
        assert_eq!(open(&s, &params(true, other)).map(drop), binding("transform"));
    }

    #[test]
    fn lengths_and_fields_are_checked_against_the_transform() {
        let gcm = Suite::aead(Cipher::AesGcm16_128);
        let p = params(false, gcm);
        let s = esp_sa_keys(&p, &[7; 20], &[]).unwrap();
        let what = |r: Result<EspKeys>| match r {
            Err(Error::BadLength { what, .. }) => what,
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("accepted"),
        };
        // A 16-byte key without its salt, claimed consistently in the header.
        let mut short = s[..ESP_KEYS_HEADER_LEN + 16].to_vec();
        short[12] = 16;
        assert_eq!(what(open(&short, &p)), "wrapped ESP encryption key");
        // An integrity key given to an AEAD.
        let mut extra = [&s[..], &[0u8; 32]].concat();
        extra[13] = 32;
        assert_eq!(what(open(&extra, &p)), "wrapped ESP integrity key");
        assert_eq!(what(open(&s[..s.len() - 1], &p)), "wrapped ESP SA keys");
        assert_eq!(what(open(&s[..5], &p)), "wrapped ESP SA keys");
        let mut reserved = s.to_vec();
        reserved[1] = 1;
        assert_eq!(what(open(&reserved, &p)), "wrapped ESP SA keys");
        let mut cipher = s.to_vec();
        cipher[7] = 3; // 3DES
        assert!(matches!(open(&cipher, &p), Err(Error::Unsupported { value: 3, .. })));
        let mut mixed = s.to_vec();
        mixed[11] = 12; // AES-GCM with an HMAC
        assert!(matches!(open(&mixed, &p), Err(Error::InconsistentSuite { cipher: 20, integ: 12 })));
        // The encoder refuses the same mistakes before anything is wrapped.
        assert!(esp_sa_keys(&p, &[7; 16], &[]).is_err());
        assert!(esp_sa_keys(&p, &[7; 20], &[1; 32]).is_err());
        assert!(esp_sa_keys(&EspSaParams { spi: 0, ..p }, &[7; 20], &[]).is_err());
    }

    #[test]
    fn the_record_refuses_repeated_outbound_keys_and_crossed_directions() {
        let mut r = enclave_api::ledger::MemoryLedger::new();
        admit(&mut r, b"inbound key", false).unwrap();
        admit(&mut r, &[1; 20], true).unwrap();
        assert!(matches!(admit(&mut r, &[1; 20], true), Err(Error::KeyReuse { .. })));
        assert!(matches!(admit(&mut r, &[1; 20], false), Err(Error::KeyReuse { .. })));
        admit(&mut r, &[2; 20], false).unwrap();
        admit(&mut r, &[2; 20], false).unwrap();
        assert!(matches!(admit(&mut r, &[2; 20], true), Err(Error::KeyReuse { .. })));
    }

    // ---- through the trusted core: install, encrypt, decrypt with an SA made another way ----

    use super::super::esp::{self, Direction, EspSa};
    use super::super::lane::Lane;
    use super::super::table::Table;
    use super::super::TrustedCore;
    use crate::attest::{CodeIdentity, SoftwareAttestation};
    use crate::provision::{wrap_esp_sa_keys, wrap_secret};
    use crate::SecretKind;
    use enclave_api::error::BlobRejection;
    use enclave_api::esp::{EspDescriptor, EspStatus};
    use enclave_api::handle::{EspSaHandle, HandleKind, TenantId};
    use enclave_api::report::{EnclaveConfig, InboundMode, Limits, ProvisioningKey};

    const PROV: [u8; 32] = [0x5a; 32];

    fn core(tenant: u32) -> TrustedCore {
        let config = EnclaveConfig {
            tenant: TenantId(tenant),
            provisioning_key: ProvisioningKey::from_bytes(PROV),
            trusted_platforms: Vec::new(),
            backup_roots: Vec::new(),
            tenant_signers: Vec::new(),
            limits: Limits::default(),
        };
        let platform = SoftwareAttestation::generate_platform_key().unwrap();
        let att = SoftwareAttestation::new(
            &platform,
            CodeIdentity::Bytes(b"t".to_vec()),
            &config.measured_bytes(crate::Backend::Inline),
        )
        .unwrap();
        TrustedCore::start(config, Box::new(att), Box::new(enclave_api::ledger::MemoryLedger::new())).unwrap()
    }

    fn wrap(tenant: u32, p: &EspSaParams, enc: &[u8], integ: &[u8]) -> Vec<u8> {
        wrap_esp_sa_keys(&ProvisioningKey::from_bytes(PROV), TenantId(tenant), p, enc, integ).unwrap()
    }

    /// An ESP packet of `inner` laid out for `suite`: header, IV room, payload with the
    /// trailer, ICV room.
    fn lay_out(suite: Suite, inner: &[u8]) -> Vec<u8> {
        let (head, icv) = suite.esp_overhead();
        let payload = (inner.len() + 2).next_multiple_of(suite.esp_payload_align());
        let mut p = vec![0u8; head + payload + icv];
        p[head..head + inner.len()].copy_from_slice(inner);
        let pad = payload - inner.len() - 2;
        for (k, b) in p[head + inner.len()..][..pad].iter_mut().enumerate() {
            *b = u8::try_from(k + 1).unwrap();
        }
        p[head + payload - 2] = u8::try_from(pad).unwrap();
        p[head + payload - 1] = 4;
        p
    }

    #[test]
    fn a_wrapped_outbound_sa_encrypts_what_an_sa_from_the_same_raw_keys_decrypts() {
        let suites = [
            Suite::aead(Cipher::AesGcm16_128),
            Suite::aead(Cipher::AesGcm16_256),
            Suite::aead(Cipher::ChaCha20Poly1305),
            Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
            Suite::cbc(Cipher::AesCbc128, Integ::HmacSha512_256),
        ];
        let mut c = core(3);
        for (n, suite) in (1u8..).zip(suites) {
            for esn in [false, true] {
                let spi = 0x100 * u32::from(n) + u32::from(esn);
                let mut enc: Vec<u8> =
                    (0..suite.cipher.keymat_len()).map(|i| n ^ u8::try_from(i).unwrap()).collect();
                enc[0] = n.wrapping_mul(16) | u8::from(esn);
                let integ = vec![0xa0 | n; suite.integ_key_len()];
                let p = EspSaParams { spi, inbound: false, esn, suite };
                let out = c.esp_sa_install_wrapped(&wrap(3, &p, &enc, &integ), &p).unwrap();
                let inner: Vec<u8> = (0..77u8).collect();
                let mut pkt = lay_out(suite, &inner);
                let len = u32::try_from(pkt.len()).unwrap();
                let seq = if esn { 0x1_0000_0007 } else { 7 };
                let mut st = [EspStatus::NotProcessed];
                c.esp_batch(&mut pkt, &[EspDescriptor::encrypt(out, 0, len, seq)], &mut st).unwrap();
                assert_eq!(st[0], EspStatus::Ok, "{suite:?}");
                assert_eq!(&pkt[..4], &spi.to_be_bytes());

                // The other way: the same bytes straight into an inbound SA.
                let mut table = Table::new(HandleKind::EspSa, 9, 4);
                let sa = EspSa::new(
                    spi,
                    Direction::Inbound(InboundMode::Decrypt),
                    esn,
                    suite,
                    esp::keys(&enc, &integ),
                );
                let h = EspSaHandle(table.insert(sa.unwrap()).unwrap());
                let mut lane = Lane::new(2);
                let d = [EspDescriptor::decrypt(h, 0, len, seq)];
                esp::batch(&table, &mut lane, &mut pkt, &d, &mut st);
                assert_eq!(st[0], EspStatus::Ok, "{suite:?} esn {esn}");
                let head = suite.esp_overhead().0;
                assert_eq!(&pkt[head..head + inner.len()], &inner[..]);
            }
        }
        assert_eq!(c.esp_read().live(), 10);
    }

    #[test]
    fn the_rfc_7634_esp_example_opens_through_a_wrapped_inbound_sa() {
        use super::super::vectors::{blocks, field};
        let bs = blocks(include_str!("../../tests/vectors/rfc7634_chacha20poly1305.txt"));
        let b = bs.iter().find(|b| field(b, "kind") == b"esp").unwrap();
        let spi = u32::from_be_bytes(field(b, "spi").try_into().unwrap());
        let seq = u64::from(u32::from_be_bytes(field(b, "seq").try_into().unwrap()));
        let p = EspSaParams { spi, inbound: true, esn: false, suite: Suite::aead(Cipher::ChaCha20Poly1305) };
        let mut c = core(5);
        let h = c.esp_sa_install_wrapped(&wrap(5, &p, field(b, "key"), &[]), &p).unwrap();
        let mut pkt = field(b, "packet").to_vec();
        let len = u32::try_from(pkt.len()).unwrap();
        let mut st = [EspStatus::NotProcessed];
        c.esp_batch(&mut pkt, &[EspDescriptor::decrypt(h, 0, len, seq)], &mut st).unwrap();
        assert_eq!(st[0], EspStatus::Ok);
        let pt = field(b, "pt");
        assert_eq!(&pkt[16..16 + pt.len()], pt);
    }

    #[test]
    fn refusals_are_typed() {
        let mut c = core(3);
        let gcm = Suite::aead(Cipher::AesGcm16_256);
        let p = EspSaParams { spi: 0x42, inbound: true, esn: false, suite: gcm };
        let blob = wrap(3, &p, &[9; 36], &[]);
        // Another tenant's blob, a tampered one, a PSK.
        let reject = |reason| Err(Error::ProvisioningBlob { reason });
        assert_eq!(
            c.esp_sa_install_wrapped(&wrap(4, &p, &[9; 36], &[]), &p).map(drop),
            reject(BlobRejection::WrongTenant)
        );
        let mut t = blob.clone();
        *t.last_mut().unwrap() ^= 1;
        assert_eq!(c.esp_sa_install_wrapped(&t, &p).map(drop), reject(BlobRejection::Forged));
        let psk =
            wrap_secret(&ProvisioningKey::from_bytes(PROV), TenantId(3), SecretKind::PreSharedKey, b"k")
                .unwrap();
        assert!(matches!(
            c.esp_sa_install_wrapped(&psk, &p),
            Err(Error::WrongBlobKind { got: SecretKind::PreSharedKey, .. })
        ));
        assert!(matches!(
            c.provision_secret(&blob),
            Err(Error::WrongBlobKind { got: SecretKind::EspSaKeys, .. })
        ));
        // A key of the wrong length, wrapped by hand past the encoder's check.
        let mut body = esp_sa_keys(&p, &[9; 36], &[]).unwrap().to_vec();
        body.truncate(body.len() - 4);
        body[12] = 32;
        let short =
            wrap_secret(&ProvisioningKey::from_bytes(PROV), TenantId(3), SecretKind::EspSaKeys, &body)
                .unwrap();
        assert!(matches!(
            c.esp_sa_install_wrapped(&short, &p),
            Err(Error::BadLength { what: "wrapped ESP encryption key", len: 32, .. })
        ));
        assert!(c.esp_sa_install_wrapped(&blob, &EspSaParams { spi: 0, ..p }).is_err());
        let h = c.esp_sa_install_wrapped(&blob, &p).unwrap();
        // An inbound SA may come back after a delete; its keys never go out.
        c.esp_sa_delete(h).unwrap();
        c.esp_sa_install_wrapped(&blob, &p).unwrap();
        let out = EspSaParams { inbound: false, ..p };
        let as_out = wrap(3, &out, &[9; 36], &[]);
        assert!(matches!(c.esp_sa_install_wrapped(&as_out, &out), Err(Error::KeyReuse { .. })));
        assert_eq!(c.esp_read().live(), 1);
    }
}
