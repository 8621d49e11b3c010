//! The HTTP plumbing the operator API and the configuration and attestation service share:
//! one server thread, bearer-token checks that do not leak by timing, bounded bodies, JSON
//! replies.

use core::net::SocketAddr;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;
use tiny_http::{Header, Request, Response, Server};

use crate::error::{Error, Result};

/// A server thread handing each request to a handler.
pub(crate) struct HttpServer {
    server: Arc<Server>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Listens on `addr` (port 0: any) and serves until [`Self::stop`].
    pub(crate) fn start(
        addr: SocketAddr,
        name: &str,
        handle: impl Fn(Request) + Send + 'static,
    ) -> Result<Self> {
        let server = Server::http(addr)
            .map_err(|e| Error::Io { what: format!("{name} on {addr}"), why: e.to_string() })?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| Error::Internal { what: format!("{name} address") })?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, stop) = (Arc::clone(&server), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match server.recv_timeout(Duration::from_millis(200)) {
                            Ok(Some(req)) => handle(req),
                            Ok(None) => {}
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    }
                })
                .map_err(|e| Error::Io { what: format!("starting the {name} thread"), why: e.to_string() })?
        };
        Ok(Self { server, addr, stop, thread: Some(thread) })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Compares without an early exit, so timing does not tell how much of a guess was right.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let len = a.len() == b.len();
    let mut diff = 0u8;
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    len && diff == 0
}

/// The bearer token a request presents, if any.
pub(crate) fn bearer(req: &Request) -> Option<String> {
    req.headers()
        .iter()
        .filter(|h| h.field.equiv("Authorization"))
        .find_map(|h| h.value.as_str().strip_prefix("Bearer ").map(|t| t.trim().to_owned()))
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Sends a reply; a 401 carries the challenge header.
pub(crate) fn respond(req: Request, status: u16, body: String, content_type: &str) {
    let mut r = Response::from_string(body).with_status_code(status);
    if let Some(h) = header("Content-Type", content_type) {
        r = r.with_header(h);
    }
    if status == 401 {
        if let Some(h) = header("WWW-Authenticate", "Bearer realm=\"cloister\"") {
            r = r.with_header(h);
        }
    }
    let _ = req.respond(r);
}

/// Sends `{"error": why}`.
pub(crate) fn respond_error(req: Request, status: u16, why: &str) {
    respond(req, status, json!({ "error": why }).to_string(), "application/json");
}

/// Reads the body, at most `max` bytes; `None` when longer or unreadable.
pub(crate) fn read_body(req: &mut Request, max: u64) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    if req.as_reader().take(max + 1).read_to_end(&mut body).is_err() || body.len() as u64 > max {
        return None;
    }
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdef", b"abcdef"));
        assert!(!same(b"abcdef", b"abcdeg"));
        assert!(!same(b"abcdef", b"abcde"));
        assert!(!same(b"abcde", b"abcdef"));
        assert!(!same(b"", b"a"));
    }
}
