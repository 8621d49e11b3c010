//! The API's client side (the `cloister` CLI): one HTTP/1.1 request per connection, with
//! the bearer token, bounded in time and size.

use core::net::SocketAddr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// How long a request may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest reply read.
const MAX_REPLY: u64 = 16 << 20;

/// An API endpoint and its token.
pub struct Client {
    addr: SocketAddr,
    host: String,
    token: Zeroizing<String>,
}

impl core::fmt::Debug for Client {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Client").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// A reply: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: String,
}

impl Reply {
    /// The body as JSON if the status is 2xx, else the API's error.
    pub fn json(self) -> Result<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null);
        if (200..300).contains(&self.status) {
            return Ok(v);
        }
        let why = v
            .get("error")
            .and_then(|e| e.as_str())
            .map_or_else(|| self.body.trim().to_owned(), str::to_owned);
        Err(Error::Api { status: self.status, why })
    }
}

impl Client {
    /// A client for `endpoint` (`http://HOST:PORT` or `HOST:PORT`) with the token in `token`.
    pub fn new(endpoint: &str, token: Zeroizing<String>) -> Result<Self> {
        let hostport = endpoint.trim_start_matches("http://").trim_end_matches('/');
        if endpoint.starts_with("https://") {
            return Err(Error::Config {
                line: None,
                field: "endpoint".into(),
                why: "https is not supported by this client; put the API on loopback or behind a TLS proxy"
                    .into(),
            });
        }
        let addr = hostport.parse::<SocketAddr>().map_err(|_| Error::Config {
            line: None,
            field: "endpoint".into(),
            why: "http://ADDRESS:PORT".into(),
        })?;
        Ok(Self { addr, host: hostport.to_owned(), token })
    }

    /// A client whose token is read from a file.
    pub fn with_token_file(endpoint: &str, token_file: &Path) -> Result<Self> {
        let bytes = Zeroizing::new(std::fs::read(token_file).map_err(|e| Error::Io {
            what: format!("reading {}", token_file.display()),
            why: e.to_string(),
        })?);
        Self::new(endpoint, Zeroizing::new(String::from_utf8_lossy(&bytes).trim().to_owned()))
    }

    /// A client that sends no token (to show it is refused).
    pub fn without_token(endpoint: &str) -> Result<Self> {
        Self::new(endpoint, Zeroizing::new(String::new()))
    }

    /// Sends one request.
    pub fn request(&self, method: &str, path: &str, body: &[u8], content_type: &str) -> Result<Reply> {
        let io = |e: std::io::Error| Error::Io { what: format!("API {}", self.addr), why: e.to_string() };
        let mut s = TcpStream::connect_timeout(&self.addr, TIMEOUT).map_err(io)?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        s.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let mut head = Zeroizing::new(format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        ));
        if !self.token.is_empty() {
            head.push_str(&format!("Authorization: Bearer {}\r\n", self.token.as_str()));
        }
        if !body.is_empty() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).map_err(io)?;
        let mut raw = Vec::new();
        s.take(MAX_REPLY).read_to_end(&mut raw).map_err(io)?;
        parse_reply(&raw)
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Reply> {
        self.request("GET", path, b"", "")
    }
}

/// Parses a whole HTTP/1.1 reply (the server closes the connection after it).
fn parse_reply(raw: &[u8]) -> Result<Reply> {
    let bad = |why: &str| Error::Api { status: 0, why: format!("malformed reply: {why}") };
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no header end"))?;
    let head =
        core::str::from_utf8(raw.get(..split).unwrap_or_default()).map_err(|_| bad("header not UTF-8"))?;
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no status"))?;
    let mut body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(Reply { status, body: String::from_utf8_lossy(&body).into_owned() })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let line_end = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = core::str::from_utf8(b.get(..line_end)?).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = b.get(line_end + 2..)?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_plain_and_chunked() {
        let r = parse_reply(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (201, "{}"));
        let r = parse_reply(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, "abcde");
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_reply(b"garbage\r\n\r\n").is_err());
        let e = Reply { status: 404, body: "{\"error\":\"unknown tenant x\"}".into() }.json().unwrap_err();
        assert!(matches!(e, Error::Api { status: 404, why } if why == "unknown tenant x"));
    }

    #[test]
    fn endpoints_parse() {
        assert!(Client::new("http://127.0.0.1:9440", Zeroizing::new("t".into())).is_ok());
        assert!(Client::new("127.0.0.1:9440/", Zeroizing::new("t".into())).is_ok());
        assert!(Client::new("https://127.0.0.1:9440", Zeroizing::new("t".into())).is_err());
        assert!(Client::new("localhost", Zeroizing::new("t".into())).is_err());
    }
}
