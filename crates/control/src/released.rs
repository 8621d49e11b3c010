//! The gateway's side of the configuration and attestation service ([`crate::cas`]): which
//! tenants to serve, and each tenant's release, obtained by a freshly started enclave of
//! that tenant proving itself.
//!
//! A release goes to the store at once (the configuration as a record, each secret sealed by
//! the enclave), so the tenant's thread starts exactly like any other tenant, and a restart
//! while the CAS is unreachable still brings the tenant back from what it last released.
//! The CAS refusing a tenant (wrong measurement, revoked) is different: that tenant does
//! not start, and its sealed state stays in the store untouched.

use std::path::Path;

use enclave::Enclave;
use gateway::Backend;
use serde::Deserialize;
use store::{Key, Kind, Store, Value, Write};

use crate::client::Client;
use crate::config::TenantConfig;
use crate::error::{Error, Result};
use crate::platform::{hex, unhex};
use crate::tenant::{secret_record, Launcher};

/// The store record of a tenant released by the CAS (its configuration).
pub(crate) const CAS_RECORD: &str = "cas-tenant";
/// The first line of that record: a TOML comment carrying the release's digest.
const DIGEST_LINE: &str = "# cas digest ";

/// A tenant as the CAS lists it for this gateway.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Listed {
    pub(crate) name: String,
    pub(crate) id: u32,
    pub(crate) secrets: Vec<String>,
    /// The tenant's provisioning signers (hex), measured into its enclave.
    #[serde(default)]
    pub(crate) signers: Vec<String>,
    pub(crate) digest: String,
}

/// Why a tenant was not released.
#[derive(Debug)]
pub(crate) enum NotReleased {
    /// The CAS said no (evidence, measurement, unknown tenant): the tenant must not start.
    Refused(Error),
    /// The CAS could not be asked, or the enclave could not be started: the last release
    /// in the store may serve.
    Unavailable(Error),
}

/// The CAS endpoint of this gateway.
#[derive(Debug)]
pub(crate) struct CasSource {
    client: Client,
    endpoint: String,
}

impl CasSource {
    pub(crate) fn new(endpoint: &str, token_file: &Path) -> Result<Self> {
        Ok(Self { client: Client::with_token_file(endpoint, token_file)?, endpoint: endpoint.to_owned() })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The tenants this gateway is to serve.
    pub(crate) fn list(&self) -> Result<Vec<Listed>> {
        let v = self.client.get("/v1/cas/tenants")?.json()?;
        serde_json::from_value(v)
            .map_err(|e| Error::Api { status: 0, why: format!("the CAS's tenant list does not parse: {e}") })
    }

    /// Starts an enclave for `t`, has it attest to the CAS, opens the secrets the CAS sealed
    /// to it, and stores configuration and sealed secrets in one write. The enclave is
    /// stopped after: the tenant's thread starts its own and unseals.
    pub(crate) fn release<L: Launcher>(
        &self,
        launcher: &L,
        store: &dyn Store,
        t: &Listed,
        dir: &Path,
        backend: Backend,
    ) -> core::result::Result<TenantConfig, NotReleased> {
        use NotReleased::{Refused, Unavailable};
        let signers = t
            .signers
            .iter()
            .map(|k| {
                unhex(k).ok_or_else(|| {
                    Refused(Error::Provisioning("the CAS listed a signer that is not hex".into()))
                })
            })
            .collect::<core::result::Result<Vec<_>, _>>()?;
        // This enclave only takes the secrets for sealing: it carries no ESP.
        let mut enclave = launcher.start(t.id, &signers, 0).map_err(Unavailable)?;
        let offer = |e: &mut L::E| {
            e.provisioning_offer()
                .map(|o| hex(&o.to_bytes()))
                .map_err(|e| Unavailable(Error::Provisioning(e.to_string())))
        };
        let evidence = offer(&mut enclave)?;
        let mut offers = serde_json::Map::new();
        for s in &t.secrets {
            offers.insert(s.clone(), serde_json::Value::String(offer(&mut enclave)?));
        }
        let body = serde_json::json!({ "evidence": evidence, "offers": offers }).to_string();
        let reply = self
            .client
            .request(
                "POST",
                &format!("/v1/cas/tenants/{}/release", t.name),
                body.as_bytes(),
                "application/json",
            )
            .map_err(Unavailable)?;
        let status = reply.status;
        let v =
            reply
                .json()
                .map_err(|e| if (400..500).contains(&status) { Refused(e) } else { Unavailable(e) })?;
        let bad = |why: &str| {
            Unavailable(Error::Api { status: 0, why: format!("the CAS's release of {}: {why}", t.name) })
        };
        let text = v["config"].as_str().ok_or_else(|| bad("no configuration"))?;
        let table: toml::Table = text.parse().map_err(|_| bad("configuration is not TOML"))?;
        let config = TenantConfig::from_table(&t.name, table, dir, backend).map_err(Refused)?;
        if config.id != t.id {
            return Err(bad("the configuration names another tenant id"));
        }
        let mut writes = Vec::new();
        for s in &t.secrets {
            let envelope = v["envelopes"][s]
                .as_str()
                .and_then(unhex)
                .ok_or_else(|| bad(&format!("no envelope for secret {s}")))?;
            let (handle, sealed) = enclave
                .provision_attested(&envelope)
                .map_err(|e| Refused(Error::Provisioning(e.to_string())))?;
            let _ = enclave.delete_secret(handle);
            let key = Key::new(t.id, Kind::Sealed, secret_record(s)).map_err(|e| Unavailable(e.into()))?;
            writes.push(Write::Put(key, Value::Sealed(sealed)));
        }
        let record = format!(
            "{DIGEST_LINE}{}\nname = {}\n{}",
            t.digest,
            toml::Value::String(t.name.clone()),
            config.text
        );
        let key = Key::new(t.id, Kind::Config, CAS_RECORD).map_err(|e| Unavailable(e.into()))?;
        writes.push(Write::Put(key, Value::Config(record)));
        store.apply(&writes).map_err(|e| Unavailable(e.into()))?;
        Ok(config)
    }
}

/// Tenants the CAS released before, from the store, with their digests.
pub(crate) fn stored(store: &dyn Store, dir: &Path, backend: Backend) -> Result<Vec<(TenantConfig, String)>> {
    let mut out = Vec::new();
    for (k, v) in store.list(None, Kind::Config)? {
        if k.name != CAS_RECORD {
            continue;
        }
        let Value::Config(text) = v else { continue };
        let digest = text.lines().next().and_then(|l| l.strip_prefix(DIGEST_LINE)).unwrap_or("").to_owned();
        let t = TenantConfig::parse_one(&text, dir, backend)?;
        if t.id == k.tenant {
            out.push((t, digest));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_release_parses_back_with_its_digest() {
        let dir = std::env::temp_dir().join(format!("cl-released-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = store::EmbeddedStore::open(dir.join("s.redb")).unwrap();
        let t = TenantConfig::parse_one(
            &format!("name = \"acme\"\n{}", crate::config::tests::TENANT),
            &dir,
            Backend::Inline,
        )
        .unwrap();
        let record = format!("{DIGEST_LINE}abcd\nname = \"acme\"\n{}", t.text);
        store.put(Key::new(1, Kind::Config, CAS_RECORD).unwrap(), Value::Config(record)).unwrap();
        store.put(Key::new(2, Kind::Config, "tenant").unwrap(), Value::Config("x".into())).unwrap();
        let got = stored(&store, &dir, Backend::Inline).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.name.as_str(), got[0].0.id, got[0].1.as_str()), ("acme", 1, "abcd"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
