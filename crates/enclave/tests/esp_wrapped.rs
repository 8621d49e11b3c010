//! Static ESP SAs from wrapped keys, through the call surface of both backends: the inline
//! enclave and the enclave process (the same call crossing the rings). Each backend
//! encrypts with a wrapped outbound SA what the other decrypts with the same keys wrapped
//! as an inbound SA, for every ESP suite, with and without ESN; and both refuse the same bad
//! blobs with the same typed errors, counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cloister_enclave::attest::{CodeIdentity, SoftwareAttestation};
use cloister_enclave::provision::{esp_sa_keys, wrap_esp_sa_keys, wrap_secret};
use cloister_enclave::*;
use enclave_host::{ProcessEnclave, ProcessSpec};

const PROV_KEY: [u8; 32] = [0x37; 32];
const TENANT: u32 = 9;

fn config(tenant: u32) -> EnclaveConfig {
    EnclaveConfig {
        tenant: TenantId(tenant),
        provisioning_key: ProvisioningKey::from_bytes(PROV_KEY),
        trusted_platforms: Vec::new(),
        backup_roots: Vec::new(),
        tenant_signers: Vec::new(),
        limits: Limits::default(),
    }
}

fn start_inline() -> InlineEnclave {
    let c = config(TENANT);
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    let att =
        SoftwareAttestation::new(&pk, CodeIdentity::Bytes(b"t".to_vec()), &c.measured_bytes(Backend::Inline))
            .unwrap();
    InlineEnclave::start(c, Box::new(att)).unwrap()
}

fn start_process() -> ProcessEnclave {
    let spec = ProcessSpec::new(env!("CARGO_BIN_EXE_cloister-enclave-process"), Vec::<String>::new());
    let pk = SoftwareAttestation::generate_platform_key().unwrap();
    ProcessEnclave::start(spec, config(TENANT), &pk).unwrap()
}

fn wrap(tenant: u32, p: &EspSaParams, enc: &[u8], integ: &[u8]) -> Vec<u8> {
    wrap_esp_sa_keys(&ProvisioningKey::from_bytes(PROV_KEY), TenantId(tenant), p, enc, integ).unwrap()
}

const SUITES: [Suite; 5] = [
    Suite::aead(Cipher::AesGcm16_128),
    Suite::aead(Cipher::AesGcm16_256),
    Suite::aead(Cipher::ChaCha20Poly1305),
    Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
    Suite::cbc(Cipher::AesCbc128, Integ::HmacSha512_256),
];

/// An ESP packet of `inner` at the start of a buffer: header, IV room, payload with the
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

/// Key bytes for case `n`, distinct per case and direction.
fn key(n: u8, len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| n.wrapping_mul(29) ^ salt ^ u8::try_from(i).unwrap()).collect()
}

/// `tx` encrypts with a wrapped outbound SA, `rx` decrypts with the same keys wrapped inbound.
fn one_way(tx: &mut dyn Enclave, rx: &mut dyn Enclave, n: u8, suite: Suite, esn: bool) {
    let spi = 0x0c00_0000 | u32::from(n);
    let (enc, integ) = (key(n, suite.cipher.keymat_len(), 0x11), key(n, suite.integ_key_len(), 0x22));
    let out = EspSaParams { spi, inbound: false, esn, suite };
    let inb = EspSaParams { inbound: true, ..out };
    let h_out = tx.esp_sa_install_wrapped(&wrap(TENANT, &out, &enc, &integ), &out).unwrap();
    let h_in = rx.esp_sa_install_wrapped(&wrap(TENANT, &inb, &enc, &integ), &inb).unwrap();
    let inner: Vec<u8> = (0..100u8).map(|b| b ^ n).collect();
    let mut pkt = lay_out(suite, &inner);
    let len = u32::try_from(pkt.len()).unwrap();
    let seq = if esn { (1 << 32) | 3 } else { 3 };
    let mut st = [EspStatus::NotProcessed];
    tx.esp_batch(&mut pkt, &[EspDescriptor::encrypt(h_out, 0, len, seq)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok, "encrypt {suite:?} esn={esn}");
    let head = suite.esp_overhead().0;
    assert_ne!(&pkt[head..head + inner.len()], &inner[..], "encrypted");
    rx.esp_batch(&mut pkt, &[EspDescriptor::decrypt(h_in, 0, len, seq)], &mut st).unwrap();
    assert_eq!(st[0], EspStatus::Ok, "decrypt {suite:?} esn={esn}");
    assert_eq!(&pkt[head..head + inner.len()], &inner[..]);
    tx.esp_sa_delete(h_out).unwrap();
    rx.esp_sa_delete(h_in).unwrap();
}

#[test]
fn each_backend_decrypts_what_the_other_encrypted_with_wrapped_keys() {
    let (mut i, mut p) = (start_inline(), start_process());
    let mut n = 0u8;
    for suite in SUITES {
        for esn in [false, true] {
            n += 1;
            one_way(&mut p, &mut i, n, suite, esn);
            n += 1;
            one_way(&mut i, &mut p, n, suite, esn);
        }
    }
    assert_eq!(p.memory_report().esp_sas, 0);
    assert_eq!(p.counters().esp_status(EspStatus::Ok), 20);
}

/// Every refusal, with the same type whatever the backend.
fn refusals(e: &mut dyn Enclave) {
    let key = ProvisioningKey::from_bytes(PROV_KEY);
    let gcm = Suite::aead(Cipher::AesGcm16_128);
    let p = EspSaParams { spi: 0x4242, inbound: false, esn: true, suite: gcm };
    let blob = wrap(TENANT, &p, &[5; 20], &[]);
    let before = e.counters().errors[ErrorKind::BlobRejected as usize];

    // Another tenant's blob; a tampered one; a PSK where ESP keys belong and back.
    let wrong_tenant = wrap(TENANT + 1, &p, &[5; 20], &[]);
    let reject = |reason| Err(Error::ProvisioningBlob { reason });
    assert_eq!(e.esp_sa_install_wrapped(&wrong_tenant, &p).map(drop), reject(BlobRejection::WrongTenant));
    for at in [5, 20, blob.len() - 1] {
        let mut t = blob.clone();
        t[at] ^= 0x40;
        let r = e.esp_sa_install_wrapped(&t, &p).map(drop);
        assert!(matches!(r, Err(Error::ProvisioningBlob { .. })), "byte {at}: {r:?}");
    }
    let psk = wrap_secret(&key, TenantId(TENANT), SecretKind::PreSharedKey, b"psk").unwrap();
    let err = e.esp_sa_install_wrapped(&psk, &p).unwrap_err();
    assert!(matches!(err, Error::WrongBlobKind { got: SecretKind::PreSharedKey, .. }), "{err:?}");
    assert_eq!(err.to_string(), "provisioning blob holds a pre-shared key, this call takes ESP SA keys");
    let err = e.provision_secret(&blob).unwrap_err();
    assert!(matches!(err, Error::WrongBlobKind { got: SecretKind::EspSaKeys, .. }), "{err:?}");
    assert_eq!(e.counters().errors[ErrorKind::BlobRejected as usize], before + 6);

    // A key of the wrong length (the salt left out), wrapped by hand past the encoder.
    let mut body = esp_sa_keys(&p, &[5; 20], &[]).unwrap().to_vec();
    body.truncate(body.len() - 4);
    body[12] = 16;
    let short = wrap_secret(&key, TenantId(TENANT), SecretKind::EspSaKeys, &body).unwrap();
    let err = e.esp_sa_install_wrapped(&short, &p).unwrap_err();
    assert!(matches!(err, Error::BadLength { what: "wrapped ESP encryption key", len: 16, .. }), "{err:?}");
    // A blob for another SA: direction, SPI, transform.
    let binding = |field| Err(Error::EspSaBinding { field });
    let as_in = EspSaParams { inbound: true, ..p };
    assert_eq!(e.esp_sa_install_wrapped(&blob, &as_in).map(drop), binding("direction"));
    assert_eq!(e.esp_sa_install_wrapped(&blob, &EspSaParams { spi: 7, ..p }).map(drop), binding("SPI"));
    let gcm256 = EspSaParams { suite: Suite::aead(Cipher::AesGcm16_256), ..p };
    assert_eq!(e.esp_sa_install_wrapped(&blob, &gcm256).map(drop), binding("transform"));

    // Installed once; the same outbound keys never again, nor the same key inbound.
    let h = e.esp_sa_install_wrapped(&blob, &p).unwrap();
    e.esp_sa_delete(h).unwrap();
    assert!(matches!(e.esp_sa_install_wrapped(&blob, &p), Err(Error::KeyReuse { .. })));
    let inb = wrap(TENANT, &as_in, &[5; 20], &[]);
    assert!(matches!(e.esp_sa_install_wrapped(&inb, &as_in), Err(Error::KeyReuse { .. })));
    assert_eq!(e.memory_report().esp_sas, 0);
}

#[test]
fn both_backends_refuse_bad_blobs_alike() {
    refusals(&mut start_inline());
    refusals(&mut start_process());
}

#[test]
fn errors_and_debug_output_carry_no_key_bytes() {
    let mut e = start_inline();
    let gcm = Suite::aead(Cipher::AesGcm16_256);
    let p = EspSaParams { spi: 1, inbound: true, esn: false, suite: gcm };
    let secret = [0xd7u8; 36];
    let blob = wrap(TENANT, &p, &secret, &[]);
    let errors = [
        e.esp_sa_install_wrapped(&blob, &EspSaParams { spi: 2, ..p }).unwrap_err(),
        e.provision_secret(&blob).unwrap_err(),
    ];
    for err in errors {
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.to_lowercase().contains("d7d7") && !text.contains("215, 215"), "{text}");
        }
    }
    let encoded = esp_sa_keys(&p, &secret, &[]).unwrap();
    assert!(!blob.windows(4).any(|w| w == [0xd7; 4]), "the blob is encrypted");
    assert_eq!(encoded.len(), provision::ESP_KEYS_HEADER_LEN + 36);
}
