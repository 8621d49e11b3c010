//! The embedded store on a real file: records, atomic batches, one owner at a time,
//! durability across `kill -9`, and no secret in the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cloister_store::{EmbeddedStore, Error, Key, Kind, Store, Value, WrappedSecret, Write};
use enclave_core::{ProvisioningKey, SealedBlob, SecretKind, TenantId};

fn key(tenant: u32, kind: Kind, name: &str) -> Key {
    Key::new(tenant, kind, name).unwrap()
}

fn sealed(fill: u8) -> Value {
    let mut b = b"CLSB\x01".to_vec();
    b.resize(64, fill);
    Value::Sealed(SealedBlob(b))
}

#[test]
fn records_are_kept_per_tenant_and_kind() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("state.redb")).unwrap();
    store.put(key(1, Kind::Config, "site-a"), Value::Config("[connections.site-a]".into())).unwrap();
    store.put(key(1, Kind::Sealed, "ike-7"), sealed(1)).unwrap();
    store.put(key(2, Kind::Config, "site-a"), Value::Config("[connections.other]".into())).unwrap();
    store.put(key(u32::MAX, Kind::Metadata, "sa"), Value::Metadata("{}".into())).unwrap();
    assert_eq!(
        store.get(&key(1, Kind::Config, "site-a")).unwrap(),
        Some(Value::Config("[connections.site-a]".into()))
    );
    assert_eq!(store.get(&key(1, Kind::Metadata, "site-a")).unwrap(), None, "kinds are separate");
    assert_eq!(store.get(&key(3, Kind::Config, "site-a")).unwrap(), None, "tenants are separate");
    let configs = store.list(None, Kind::Config).unwrap();
    assert_eq!(configs.iter().map(|(k, _)| k.tenant).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(store.list(Some(2), Kind::Config).unwrap().len(), 1);
    assert_eq!(store.list(Some(u32::MAX), Kind::Metadata).unwrap().len(), 1);
    assert_eq!(store.tenants().unwrap(), [1, 2, u32::MAX]);
    // Overwrite, remove, remove a tenant.
    store.put(key(1, Kind::Sealed, "ike-7"), sealed(2)).unwrap();
    assert_eq!(store.get(&key(1, Kind::Sealed, "ike-7")).unwrap(), Some(sealed(2)));
    assert!(store.remove(&key(2, Kind::Config, "site-a")).unwrap());
    assert!(!store.remove(&key(2, Kind::Config, "site-a")).unwrap());
    store.apply(&[Write::RemoveTenant(1)]).unwrap();
    assert_eq!(store.tenants().unwrap(), [u32::MAX]);
}

#[test]
fn bad_writes_are_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("state.redb")).unwrap();
    let batch = [
        Write::Put(key(1, Kind::Config, "a"), Value::Config("x".into())),
        Write::Put(key(1, Kind::Sealed, "raw"), Value::Sealed(SealedBlob(vec![0x42; 64]))),
    ];
    assert!(matches!(store.apply(&batch), Err(Error::NotABlob { .. })));
    assert_eq!(store.get(&key(1, Kind::Config, "a")).unwrap(), None, "nothing of the batch landed");
    let mismatch = store.put(key(1, Kind::Config, "a"), sealed(0));
    assert!(matches!(mismatch, Err(Error::KindMismatch { key: Kind::Config, value: Kind::Sealed })));
    assert!(Key::new(1, Kind::Config, "").is_err());
    assert!(Key::new(1, Kind::Config, "a\nb").is_err());
    assert!(Key::new(1, Kind::Config, "x".repeat(256)).is_err());
    assert!(WrappedSecret::new(b"a raw pre-shared key, not wrapped".to_vec()).is_err());
}

#[test]
fn one_owner_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let first = EmbeddedStore::open(&path).unwrap();
    let second = EmbeddedStore::open(&path);
    assert!(matches!(second, Err(Error::Io { .. })), "{second:?}");
    drop(first);
    assert!(EmbeddedStore::open(&path).is_ok(), "free again once closed");
    assert!(matches!(EmbeddedStore::open(dir.path().join("no/such/dir/x")), Err(Error::Io { .. })));
}

/// The writer of [`committed_batches_survive_kill_9`]: run as a child process of this test
/// binary; does nothing when run by the test harness itself.
#[test]
fn child_writer() {
    let Ok(path) = std::env::var("CLOISTER_STORE_CHILD") else { return };
    let store = EmbeddedStore::open(&path).unwrap();
    let start = Instant::now();
    // Bounded: the parent kills this process long before either bound.
    for n in 0..100_000u32 {
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        let batch = [
            Write::Put(key(1, Kind::Metadata, &format!("a{n:06}")), Value::Metadata(n.to_string())),
            Write::Put(key(1, Kind::Sealed, &format!("b{n:06}")), sealed(u8::try_from(n % 251).unwrap())),
        ];
        store.apply(&batch).unwrap();
        println!("committed {n}");
    }
}

#[test]
fn committed_batches_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads", "1"])
        .env("CLOISTER_STORE_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(n) = line.strip_prefix("committed ") {
            last = Some(n.parse::<u32>().unwrap());
            if last >= Some(50) {
                break;
            }
        }
    }
    // kill -9 (std's Child::kill sends SIGKILL) in the middle of later commits.
    child.kill().unwrap();
    child.wait().unwrap();
    let last = last.expect("the writer committed batches");
    assert!(last >= 50, "only {last} batches before the deadline");
    let store = EmbeddedStore::open(&path).unwrap();
    let a = store.list(Some(1), Kind::Metadata).unwrap();
    let b = store.list(Some(1), Kind::Sealed).unwrap();
    assert!(a.len() > last as usize, "every reported commit is there: {} <= {last}", a.len());
    assert_eq!(a.len(), b.len(), "no batch is there by halves");
    for (i, ((ka, va), (kb, vb))) in a.iter().zip(&b).enumerate() {
        assert_eq!(
            (ka.name.as_str(), kb.name.as_str()),
            (format!("a{i:06}").as_str(), format!("b{i:06}").as_str())
        );
        assert_eq!(va, &Value::Metadata(i.to_string()));
        assert_eq!(vb, &sealed(u8::try_from(i % 251).unwrap()));
    }
    eprintln!("kill -9 after {last}+ commits: {} whole batches recovered", a.len());
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_file_holds_no_secret_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let psk = b"the tenant's pre-shared key, 40 bytes..".to_vec();
    let provisioning = ProvisioningKey::generate().unwrap();
    let blob =
        enclave_core::provision::wrap_secret(&provisioning, TenantId(1), SecretKind::PreSharedKey, &psk)
            .unwrap();
    let path = dir.path().join("state.redb");
    {
        let store = EmbeddedStore::open(&path).unwrap();
        store
            .put(key(1, Kind::Wrapped, "psk"), Value::Wrapped(WrappedSecret::new(blob.clone()).unwrap()))
            .unwrap();
        assert_eq!(
            store.get(&key(1, Kind::Wrapped, "psk")).unwrap(),
            Some(Value::Wrapped(WrappedSecret::new(blob.clone()).unwrap()))
        );
    }
    let file = std::fs::read(&path).unwrap();
    assert!(contains(&file, &blob[24..]), "the wrapped blob is in the file");
    assert!(!contains(&file, &psk[..16]), "no 16-byte run of the PSK is in the file");
    // Positive control: the same scan finds the PSK where it was stored in clear.
    let control = dir.path().join("control.redb");
    {
        let store = EmbeddedStore::open(&control).unwrap();
        store
            .put(key(1, Kind::Config, "oops"), Value::Config(String::from_utf8(psk.clone()).unwrap()))
            .unwrap();
    }
    assert!(contains(&std::fs::read(&control).unwrap(), &psk[..16]));
}
