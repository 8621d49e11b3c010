//! The operator API: HTTP/1.1 with JSON bodies, every request authenticated by a bearer
//! token (`Authorization: Bearer TOKEN`; anything else gets 401 and is counted), served by
//! one thread. The routes are described in `docs/openapi.yaml`:
//!
//! ```text
//! GET    /v1/status                            service, tenants, uptime
//! GET    /v1/attestation                       the platform's evidence key (software-rooted)
//! GET    /v1/tenants                           every tenant with its state
//! POST   /v1/tenants                           add a tenant (body: its TOML, with `name`)
//! GET    /v1/tenants/{t}                       one tenant: state and snapshot
//! DELETE /v1/tenants/{t}                       remove a tenant added through the API
//! GET    /v1/tunnels                           every tenant's IKE and child SAs
//! GET    /v1/tenants/{t}/sas                   one tenant's SAs (`?format=text`: as swanctl)
//! POST   /v1/tenants/{t}/initiate/{conn}       start a connection
//! POST   /v1/tenants/{t}/secrets/{s}/offer     a provisioning offer (evidence, enclave key)
//! PUT    /v1/tenants/{t}/secrets/{s}           an envelope sealed to an offer
//! POST   /v1/tenants/{t}/move                  live-move a tenant to a peer (body: {"to": PEER})
//! POST   /v1/tenants/{t}/backup                a backup of the tenant's secrets (HSM backup key)
//! POST   /v1/restore                           restore a tenant from a backup (officer's PIN)
//! GET    /metrics                              Prometheus text format
//! ```
//!
//! The migration agent's routes take the migration token (`[migrate] token`), not the
//! operator's (see `crate::moving`):
//!
//! ```text
//! POST   /v1/migrate/incoming                  an arriving tenant's enclave key and evidence
//! POST   /v1/migrate/incoming/{t}/package      the moved state; the tenant serves here after
//! POST   /v1/migrate/incoming/{t}/commit       the source stopped: its last sequence numbers
//! POST   /v1/migrate/incoming/{t}/abort        the source gave up
//! ```

use core::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gateway::control::Request as ControlRequest;
use serde::Deserialize;
use serde_json::{json, Value as Json};
use tiny_http::{Method, Request};

use crate::config::TenantConfig;
use crate::error::{Error, Result};
use crate::http::{bearer, read_body, respond, respond_error, same, HttpServer};
use crate::platform::{hex, unhex};
use crate::service::Inner;
use crate::tenant::Command;

/// The largest request body (a tenant's configuration, an envelope).
const MAX_BODY: u64 = 64 * 1024;
/// The largest restore request (a backup: configuration, secrets, evidence, all in hex).
const MAX_RESTORE_BODY: u64 = 4 << 20;

/// The API's thread.
pub(crate) struct ApiServer(HttpServer);

/// Requests refused for want of a valid token (a metric).
static UNAUTHORIZED: AtomicU64 = AtomicU64::new(0);

impl ApiServer {
    pub(crate) fn start(inner: Arc<Inner>) -> Result<Self> {
        let addr = inner.settings.api;
        Ok(Self(HttpServer::start(addr, "cloister-api", move |req| handle(&inner, req))?))
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    pub(crate) fn stop(self) {
        self.0.stop();
    }
}

/// Whether the request bears the token of its routes: the migration token for the
/// agent's, the operator token for the rest.
fn authorized(inner: &Inner, req: &Request, agent_route: bool) -> bool {
    let token = if agent_route {
        match &inner.agent {
            Some(a) => a.token.as_bytes(),
            None => return false,
        }
    } else {
        inner.token.as_bytes()
    };
    bearer(req).is_some_and(|t| same(t.as_bytes(), token))
}

fn handle(inner: &Inner, mut req: Request) {
    let agent_route = req.url().starts_with("/v1/migrate/");
    if !authorized(inner, &req, agent_route) {
        UNAUTHORIZED.fetch_add(1, Ordering::Relaxed);
        return respond_error(req, 401, "a valid bearer token is required");
    }
    let limit = if agent_route {
        crate::moving::MAX_PACKAGE_BODY
    } else if req.url() == "/v1/restore" {
        MAX_RESTORE_BODY
    } else {
        MAX_BODY
    };
    let Some(body) = read_body(&mut req, limit) else {
        return respond_error(req, 413, "request body too large or unreadable");
    };
    let url = req.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let method = req.method().clone();
    let out = route(inner, &method, &parts, query, &body);
    match out {
        Ok(Reply::Json(status, v)) => respond(req, status, v.to_string(), "application/json"),
        Ok(Reply::Text(t, ct)) => respond(req, 200, t, ct),
        Err(e) => respond_error(req, e.status(), &e.to_string()),
    }
}

enum Reply {
    Json(u16, Json),
    Text(String, &'static str),
}

fn ok(v: Json) -> Result<Reply> {
    Ok(Reply::Json(200, v))
}

fn tenant<'a>(
    inner: &'a Inner,
    name: &str,
) -> Result<std::sync::MutexGuard<'a, std::collections::BTreeMap<String, crate::tenant::TenantHandle>>> {
    let g = inner.lock();
    if !g.contains_key(name) {
        return Err(Error::Unknown { what: format!("tenant {}", name.chars().take(64).collect::<String>()) });
    }
    Ok(g)
}

/// Calls a tenant's thread without holding the tenants' lock while it answers.
pub(crate) fn call<T>(
    inner: &Inner,
    name: &str,
    make: impl FnOnce(std::sync::mpsc::Sender<T>) -> Command,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let g = tenant(inner, name)?;
        let h = g.get(name).ok_or_else(|| Error::Unknown { what: format!("tenant {name}") })?;
        h.send(make(tx))?;
    }
    rx.recv_timeout(crate::tenant::CALL_TIMEOUT).map_err(|_| Error::NotRunning {
        tenant: name.to_owned(),
        why: "no answer (starting or recovering)".into(),
    })
}

fn tenant_json(h: &crate::tenant::TenantHandle) -> Json {
    let c = &h.config;
    let d = &c.gateway.dataplane.settings;
    json!({
        "name": c.name,
        "id": c.id,
        "status": h.status(),
        "tun": d.tun,
        "tun_netns": d.tun_netns,
        "listen": d.listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "connections": c.gateway.ike.connections.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
        "initiate": c.initiate,
    })
}

#[derive(Deserialize)]
struct Envelope {
    envelope: String,
}

fn route(inner: &Inner, method: &Method, parts: &[&str], query: &str, body: &[u8]) -> Result<Reply> {
    match (method, parts) {
        (Method::Get, ["v1", "status"]) => {
            let g = inner.lock();
            let states: Vec<Json> =
                g.values().map(|h| json!({"name": h.config.name, "state": h.status().state})).collect();
            ok(json!({
                "version": env!("CARGO_PKG_VERSION"),
                "uptime_s": inner.started.elapsed().as_secs(),
                "enclave": inner.settings.enclave.name(),
                "state": inner.settings.state.display().to_string(),
                "platform_public_key": hex(inner.platform.public_key()),
                "platform_pid": match inner.platform.source() {
                    crate::platform::Source::Process(c) => Some(c.pid()),
                    crate::platform::Source::Local(_) => None,
                },
                "tenants": states,
                "cas": inner.cas.as_ref().map(|c| json!({
                    "endpoint": c.source.endpoint(),
                    "refused": *c.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                })),
            }))
        }
        (Method::Get, ["v1", "attestation"]) => ok(json!({
            "kind": "software-rooted",
            "platform_public_key": hex(inner.platform.public_key()),
            "note": "software-rooted evidence: whoever is root on this host holds the platform key",
        })),
        (Method::Get, ["v1", "tenants"]) => ok(Json::Array(inner.lock().values().map(tenant_json).collect())),
        (Method::Post, ["v1", "tenants"]) => {
            let text = core::str::from_utf8(body).map_err(|_| Error::Config {
                line: None,
                field: "body".into(),
                why: "UTF-8 TOML".into(),
            })?;
            let t = TenantConfig::parse_one(text, &inner.dir, inner.settings.enclave)?;
            let name = t.name.clone();
            inner.add_tenant(t)?;
            Ok(Reply::Json(201, json!({"added": name})))
        }
        (Method::Get, ["v1", "tenants", name]) => {
            let mut v = {
                let g = tenant(inner, name)?;
                g.get(*name).map(tenant_json).unwrap_or(Json::Null)
            };
            if let Ok(s) = call(inner, name, Command::Snapshot) {
                v["snapshot"] = serde_json::to_value(s).unwrap_or(Json::Null);
            }
            ok(v)
        }
        (Method::Delete, ["v1", "tenants", name]) => {
            inner.remove_tenant(name)?;
            ok(json!({"removed": name}))
        }
        (Method::Get, ["v1", "tunnels"]) => {
            let names: Vec<String> = inner.lock().keys().cloned().collect();
            let mut out = Vec::new();
            for n in names {
                match call(inner, &n, Command::Snapshot) {
                    Ok(s) => out.push(json!({"tenant": n, "tun": s.tun, "ike_sas": s.ike_sas})),
                    Err(e) => out.push(json!({"tenant": n, "error": e.to_string()})),
                }
            }
            ok(Json::Array(out))
        }
        (Method::Get, ["v1", "tenants", name, "sas"]) => {
            if query.split('&').any(|q| q == "format=text") {
                let t = call(inner, name, |r| Command::Text(ControlRequest::List, r))?;
                return Ok(Reply::Text(t, "text/plain; charset=utf-8"));
            }
            let s = call(inner, name, Command::Snapshot)?;
            ok(serde_json::to_value(s.ike_sas).unwrap_or(Json::Null))
        }
        (Method::Post, ["v1", "tenants", name, "initiate", conn]) => {
            let t = call(inner, name, |r| Command::Text(ControlRequest::Initiate((*conn).to_owned()), r))?;
            match t.strip_prefix("error: ") {
                Some(e) => Err(Error::Unknown { what: e.trim().to_owned() }),
                None => ok(json!({"result": t.trim()})),
            }
        }
        (Method::Post, ["v1", "tenants", name, "secrets", secret, "offer"]) => {
            let known = {
                let g = tenant(inner, name)?;
                g.get(*name).is_some_and(|h| h.config.gateway.ike.secrets.iter().any(|s| s.name == *secret))
            };
            if !known {
                return Err(Error::Unknown { what: format!("secret {secret} of tenant {name}") });
            }
            let offer = call(inner, name, Command::Offer)??;
            ok(json!({"tenant": name, "secret": secret, "offer": hex(&offer)}))
        }
        (Method::Put, ["v1", "tenants", name, "secrets", secret]) => {
            let e: Envelope = serde_json::from_slice(body).map_err(|_| Error::Config {
                line: None,
                field: "body".into(),
                why: "JSON {\"envelope\": HEX}".into(),
            })?;
            let envelope = unhex(&e.envelope).ok_or_else(|| Error::Config {
                line: None,
                field: "envelope".into(),
                why: "hex".into(),
            })?;
            let name_s = (*secret).to_owned();
            call(inner, name, |reply| Command::Provision { name: name_s, envelope, reply })??;
            ok(json!({"provisioned": secret}))
        }
        (Method::Post, ["v1", "tenants", name, "move"]) => {
            #[derive(Deserialize)]
            struct To {
                to: String,
            }
            let to: To = serde_json::from_slice(body).map_err(|_| Error::Config {
                line: None,
                field: "body".into(),
                why: "JSON {\"to\": PEER}".into(),
            })?;
            ok(crate::moving::move_out(inner, name, &to.to)?)
        }
        (Method::Post, ["v1", "tenants", name, "backup"]) => ok(crate::moving::backup(inner, name)?),
        (Method::Post, ["v1", "restore"]) => ok(crate::moving::restore(inner, body)?),
        (Method::Post, ["v1", "migrate", "incoming"]) => ok(crate::moving::incoming(inner, body)?),
        (Method::Post, ["v1", "migrate", "incoming", name, "package"]) => {
            ok(crate::moving::package(inner, name, body)?)
        }
        (Method::Post, ["v1", "migrate", "incoming", name, "commit"]) => {
            ok(crate::moving::commit(inner, name, body)?)
        }
        (Method::Post, ["v1", "migrate", "incoming", name, "abort"]) => ok(crate::moving::abort(inner, name)),
        (Method::Get, ["metrics"]) => {
            let text = crate::metrics::render(inner, UNAUTHORIZED.load(Ordering::Relaxed));
            Ok(Reply::Text(text, "text/plain; version=0.0.4; charset=utf-8"))
        }
        _ => Err(Error::Api { status: 404, why: "no such route (see docs/openapi.yaml)".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_bodies_decode_or_refuse() {
        assert_eq!(unhex("00ff"), Some(vec![0, 255]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}

#[cfg(test)]
mod openapi {
    /// Every route the server answers is in the OpenAPI document.
    #[test]
    fn the_openapi_document_lists_every_route() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml")).unwrap();
        for path in [
            "/v1/status:",
            "/v1/attestation:",
            "/v1/tenants:",
            "/v1/tenants/{tenant}:",
            "/v1/tunnels:",
            "/v1/tenants/{tenant}/sas:",
            "/v1/tenants/{tenant}/initiate/{connection}:",
            "/v1/tenants/{tenant}/secrets/{secret}/offer:",
            "/v1/tenants/{tenant}/secrets/{secret}:",
            "/v1/tenants/{tenant}/move:",
            "/v1/tenants/{tenant}/backup:",
            "/v1/restore:",
            "/v1/migrate/incoming:",
            "/v1/migrate/incoming/{tenant}/package:",
            "/v1/migrate/incoming/{tenant}/commit:",
            "/v1/migrate/incoming/{tenant}/abort:",
            "/metrics:",
        ] {
            assert!(doc.contains(&format!("\n  {path}")), "{path} missing from docs/openapi.yaml");
        }
        assert!(doc.contains("scheme: bearer"));
    }
}
