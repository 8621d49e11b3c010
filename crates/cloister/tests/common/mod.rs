//! What the interop tests against real IKE peers (strongSwan, libreswan) share: the
//! identities and PSK, the outer address plan, the certificate fixtures, and wrapping a
//! secret for the gateway's enclave with `cloister secret wrap`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

pub(crate) const CLOISTER: &str = env!("CARGO_BIN_EXE_cloister");
/// Random-looking on purpose: a PSK with a common run in it (say the hex digits
/// `0123456789abcdef`) would be "found" in any binary's formatting tables.
pub(crate) const PSK: &str = "Kq7v-Tz3W-pL9x-Rm2c-Yh5n-Bd8f-Gs4j-Nw6e";
pub(crate) const SITE_ID: &str = "site-a.cloister.test";
pub(crate) const GW_ID: &str = "gw.cloister.test";

/// The outer address family of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    /// (site outer, gateway outer, prefix length).
    pub(crate) fn outer(self) -> (&'static str, &'static str, u8) {
        match self {
            Self::V4 => ("198.18.0.1", "198.18.0.2", 24),
            Self::V6 => ("2001:db8::1", "2001:db8::2", 64),
        }
    }
}

/// A certificate fixture of crates/ike/tests/certs (site-a is the peer, site-b Cloister).
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ike/tests/certs").join(name)
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Wraps `secret` for tenant 1 under the provisioning key `key` into `out`; the command's
/// output must not show the PSK.
pub(crate) fn wrap_secret(key: &Path, out: &Path, kind: &str, secret: &[u8]) {
    use std::io::Write;
    let mut child = std::process::Command::new(CLOISTER)
        .args(["secret", "wrap", "--tenant", "1", "--kind", kind, "--provisioning-key"])
        .arg(key)
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(secret).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "secret wrap: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stdout).contains(PSK));
}
