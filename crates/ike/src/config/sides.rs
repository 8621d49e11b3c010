//! The `local` and `remote` tables of a connection: how each side authenticates, our
//! certificates and the peer's CAs (read here, once), and the identities.

use core::net::IpAddr;

use wire::ike::{IdType, Identification};

use super::{parse_identity, RawLocal, RawRemote};
use crate::auth::{AuthPolicy, SignatureFamily, SignaturePolicy};
use crate::cert::{CertError, Certificate};
use crate::error::{Error, Result};

/// Both sides of a connection, validated.
pub(super) struct Sides {
    pub(super) local_auth: AuthPolicy,
    pub(super) remote_auth: AuthPolicy,
    pub(super) local_certs: Vec<Certificate>,
    pub(super) remote_cacerts: Vec<Certificate>,
    pub(super) local_id: Identification,
    pub(super) remote_id: Option<Identification>,
    pub(super) secret: String,
}

/// Validates connection `name`'s sides, reading certificate files with `read`.
pub(super) fn validate(
    name: &str,
    local: RawLocal,
    remote: RawRemote,
    local_addrs: &[IpAddr],
    read: &mut dyn FnMut(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Sides> {
    let invalid = |field, value: &str, why| Error::InvalidValue {
        connection: name.to_owned(),
        field,
        value: value.to_owned(),
        why,
    };
    // swanctl's default is pubkey; ours follows what the side configures, so that a
    // pre-shared-key connection needs no `auth` lines.
    let auth = |field, text: &Option<String>, has_certs: bool| match text {
        Some(t) => AuthPolicy::parse(t).map_err(|why| invalid(field, t, why)),
        None if has_certs => {
            Ok(AuthPolicy::Signature(SignaturePolicy { family: SignatureFamily::Pubkey, hashes: Vec::new() }))
        }
        None => Ok(AuthPolicy::Psk),
    };
    let local_auth = auth("local.auth", &local.auth, !local.certs.is_empty())?;
    let remote_auth = auth("remote.auth", &remote.auth, !remote.cacerts.is_empty())?;
    let secret = local.secret.filter(|s| !s.trim().is_empty()).ok_or(Error::MissingField {
        connection: name.to_owned(),
        field: "local.secret",
        why: match local_auth {
            AuthPolicy::Psk => "the name of the pre-shared key for auth = \"psk\"",
            AuthPolicy::Signature(_) => {
                "the name of the private key of local.certs, provisioned into the enclave"
            }
        },
    })?;
    let mut load = |field: &'static str, paths: &[String]| -> Result<Vec<Certificate>> {
        let mut out = Vec::new();
        for path in paths {
            let failed =
                |why| Error::CertificateFile { connection: name.to_owned(), field, path: path.clone(), why };
            let bytes = read(path).map_err(|e| failed(CertError::Io { kind: e.kind() }))?;
            out.extend(Certificate::load(&bytes).map_err(failed)?);
        }
        Ok(out)
    };
    let local_certs = load("local.certs", &local.certs)?;
    let remote_cacerts = load("remote.cacerts", &remote.cacerts)?;
    let needs = |field, why| Error::MissingField { connection: name.to_owned(), field, why };
    match (&local_auth, local_certs.first()) {
        (AuthPolicy::Signature(_), None) => {
            return Err(needs("local.certs", "our certificate, for public-key authentication"))
        }
        (AuthPolicy::Signature(p), Some(ours)) => p
            .check_key(ours.public_key().kind)
            .map_err(|why| invalid("local.auth", local.auth.as_deref().unwrap_or("pubkey"), why))?,
        (AuthPolicy::Psk, Some(_)) => {
            return Err(invalid(
                "local.certs",
                &local.certs.join(", "),
                "certificates need auth = \"pubkey\"",
            ))
        }
        (AuthPolicy::Psk, None) => {}
    }
    match (&remote_auth, remote_cacerts.is_empty()) {
        (AuthPolicy::Signature(_), true) => {
            return Err(needs("remote.cacerts", "the CA certificates the peer's certificate must chain to"))
        }
        (AuthPolicy::Psk, false) => {
            return Err(invalid("remote.cacerts", &remote.cacerts.join(", "), "CAs need auth = \"pubkey\""))
        }
        _ => {}
    }
    if local_auth.is_signature() && remote_auth == AuthPolicy::Psk {
        // One secret per side: ours is the private key, so there is no PSK to check with.
        return Err(invalid(
            "remote.auth",
            remote.auth.as_deref().unwrap_or("psk"),
            "checking a pre-shared key needs local.auth = \"psk\" (local.secret names one secret)",
        ));
    }
    if let Some(at) = remote_cacerts.iter().position(|c| !c.is_ca()) {
        let path = remote.cacerts.get(at).or(remote.cacerts.last()).cloned().unwrap_or_default();
        return Err(Error::CertificateFile {
            connection: name.to_owned(),
            field: "remote.cacerts",
            path,
            why: CertError::NotCa { depth: 0 },
        });
    }
    let local_id =
        match (&local.id, local_certs.first()) {
            (Some(text), ours) => {
                let id = parse_identity(text)
                    .map_err(|why| invalid("local.id", text, why))?
                    .ok_or(invalid("local.id", text, "our own identity cannot be %any"))?;
                match ours {
                    // The peer checks our ID against our certificate, as we check its.
                    Some(cert) if !cert.certifies(&id) => {
                        return Err(invalid(
                            "local.id",
                            text,
                            "not in local.certs' first certificate (its subject or a subjectAltName)",
                        ))
                    }
                    // Send the subject exactly as the certificate encodes it.
                    Some(cert) if id.ty == IdType::DER_ASN1_DN => cert.subject_identity(),
                    _ => id,
                }
            }
            (None, Some(cert)) => cert.subject_identity(),
            (None, None) => {
                local_addrs.first().map(|a| Identification::from_ip(*a)).ok_or(Error::MissingField {
                    connection: name.to_owned(),
                    field: "local.id",
                    why: "there is no local address to default it to",
                })?
            }
        };
    let remote_id = match &remote.id {
        Some(text) => parse_identity(text).map_err(|why| invalid("remote.id", text, why))?,
        None => None,
    };
    Ok(Sides { local_auth, remote_auth, local_certs, remote_cacerts, local_id, remote_id, secret })
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;
    use crate::cert;

    /// The configuration of site A with certificates, `local`/`remote` tables as given.
    fn pubkey_config(local: &str, remote: &str) -> String {
        format!(
            "[connections.c]\nlocal_addrs = [\"198.18.0.1\"]\nremote_addrs = [\"198.18.0.2\"]\n\
             local = {{ {local} }}\nremote = {{ {remote} }}\nchildren.net = {{}}\n"
        )
    }

    /// Reads fixtures of tests/certs by their bare names.
    fn fixtures(path: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(format!("{}/tests/certs/{path}", env!("CARGO_MANIFEST_DIR")))
    }

    #[test]
    fn pubkey_connections_load_their_certificates() {
        let text = pubkey_config(
            r#"auth = "pubkey", certs = ["a-rsa.der"], secret = "key""#,
            r#"cacerts = ["ca-rsa.pem", "ca-ec.pem"], id = "C=CH, O=Cloister Test, CN=site-b.cloister.test""#,
        );
        let config = Config::from_toml_with(&text, &mut fixtures).unwrap();
        let c = &config.connections[0];
        assert_eq!(c.local_certs.len(), 1);
        assert_eq!(c.local_id, c.local_certs[0].subject_identity(), "defaults to the subject DN");
        assert_eq!(c.remote_cacerts.len(), 2);
        assert!(matches!(c.remote_auth, AuthPolicy::Signature(_)), "cacerts imply pubkey");
        assert!(c.uses_signatures());
        let theirs = Identification::new(
            IdType::DER_ASN1_DN,
            cert::name::parse("c=ch, o=cloister test, cn=SITE-B.cloister.test").unwrap(),
        );
        assert!(c.accepts_identity(&theirs));
        assert!(format!("{c:?}").contains("CN=site-a.cloister.test"), "Debug shows subjects, not DER");

        // A DN id written as text is sent exactly as the certificate encodes it.
        let text = pubkey_config(
            r#"certs = ["b-int-chain.pem"], id = "C=CH, O=cloister test, CN=site-b.cloister.test", secret = "key""#,
            r#"auth = "ecdsa-sha384", cacerts = ["ca-ec.pem"]"#,
        );
        let config = Config::from_toml_with(&text, &mut fixtures).unwrap();
        let c = &config.connections[0];
        assert_eq!(c.local_certs.len(), 2, "ours and the intermediate");
        assert_eq!(c.local_id, c.local_certs[0].subject_identity());
        assert_eq!(c.remote_auth, AuthPolicy::parse("ecdsa-sha384").unwrap());
    }

    #[test]
    fn bad_pubkey_connections_name_the_field_and_file() {
        const CA: &str = r#"cacerts = ["ca-rsa.pem"]"#;
        let cases = [
            (r#"certs = ["missing.pem"], secret = "k""#, CA, "local.certs"),
            (r#"certs = ["a-rsa.key.der"], secret = "k""#, CA, "local.certs"),
            (r#"certs = ["gen.sh"], secret = "k""#, CA, "no certificate"),
            (r#"auth = "ecdsa", certs = ["a-rsa.pem"], secret = "k""#, CA, "local.auth"),
            (r#"auth = "pubkey-sha384", certs = ["a-p256.pem"], secret = "k""#, CA, "local.auth"),
            (r#"certs = ["a-rsa.pem"], id = "site-b.cloister.test", secret = "k""#, CA, "local.id"),
            (r#"certs = ["a-rsa.pem"]"#, CA, "local.secret"),
            (r#"certs = ["a-rsa.pem"], secret = "k""#, r#"auth = "psk""#, "remote.auth"),
            (r#"auth = "psk", certs = ["a-rsa.pem"], secret = "k""#, r#"auth = "psk""#, "local.certs"),
            (r#"auth = "psk", secret = "k""#, r#"auth = "psk", cacerts = ["ca-rsa.pem"]"#, "remote.cacerts"),
            (r#"auth = "psk", secret = "k""#, r#"cacerts = ["a-rsa.pem"]"#, "not a CA"),
            (
                r#"auth = "psk", secret = "k""#,
                r#"auth = "rsa/pss-md5", cacerts = ["ca-rsa.pem"]"#,
                "remote.auth",
            ),
        ];
        for (local, remote, needle) in cases {
            let error =
                Config::from_toml_with(&pubkey_config(local, remote), &mut fixtures).unwrap_err().to_string();
            assert!(error.contains(needle), "expected {needle:?} in: {error}");
            assert!(error.contains("\"c\""), "names the connection: {error}");
        }
    }
}
