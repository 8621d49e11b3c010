//! Real IKE messages captured between two strongSwan instances (see
//! `tests/vectors/README.md`): every `ike-*.bin` must decode, and encode back byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::{Path, PathBuf};

use cloister_wire::ike::{decode_chain, Message, Payload};

/// The `ike-*.bin` files of the vector directory, sorted; at least 16 (two captured runs).
fn ike_vectors() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let entries = std::fs::read_dir(&dir).expect("tests/vectors is part of the repository");
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("ike-") && name.ends_with(".bin"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 16,
        "only {} tests/vectors/ike-*.bin: the tests would pass vacuously",
        files.len()
    );
    files
}

#[test]
fn captured_ike_messages_decode_and_encode_byte_exact() {
    let files = ike_vectors();
    for path in &files {
        let name = path.display();
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let message = Message::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let encoded = message.to_vec().unwrap_or_else(|e| panic!("{name}: encode: {e}"));
        assert_eq!(encoded, bytes, "{name}: re-encoding is not byte-exact");
    }
}

#[test]
fn captured_messages_have_the_expected_payload_shapes() {
    let files = ike_vectors();
    for path in &files {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let message = Message::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name.contains("sa_init") {
            // IKE_SA_INIT travels in the clear: SA, KE and Nonce are all visible.
            let types: Vec<_> = message.payloads().map(Payload::ty).collect();
            for ty in [0x21, 0x22, 0x28] {
                assert!(types.iter().any(|t| t.0 == ty), "{name}: no payload {ty:#x}");
            }
        } else {
            // Every later exchange is protected: one SK payload, last.
            assert!(message.encrypted().is_some(), "{name}: no SK payload");
            assert_eq!(message.chain.len(), 1, "{name}: payloads outside SK");
        }
    }
    // The decrypted-chain decoder is what the engine runs next; on ciphertext it must fail
    // cleanly or succeed byte-exactly, never panic.
    for path in &files {
        let bytes = std::fs::read(path).unwrap_or_default();
        if let Ok(message) = Message::decode(&bytes) {
            if let Some(sk) = message.encrypted() {
                let _ = decode_chain(sk.first_inner, &sk.data);
            }
        }
    }
}
