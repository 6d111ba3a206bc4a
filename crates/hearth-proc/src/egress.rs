//! The way out for sandboxes of functions that list hosts.
//!
//! Every sandbox has a network namespace of its own whose only interface
//! is `lo`, so a socket it opens reaches nothing beyond it. A function with
//! allowed hosts gets, in its root, `/tmp/egress.sock`, served here by the
//! node: an HTTP proxy that takes `CONNECT host:port` (what clients send
//! for `https://` through a proxy) and absolute-form requests
//! (`GET http://host/…`, for `http://`), lets out only what the function's
//! allow-list names, resolves names with [`hearth_host::resolve_egress`]
//! (never this machine or its private networks unless the operator allows
//! them), and then relays bytes both ways. Inside the sandbox the helper
//! listens on `127.0.0.1:3128` and relays to that socket, and
//! `HTTP_PROXY`/`HTTPS_PROXY` point there, which is what Python's
//! `urllib`, `requests` and `httpx` follow.
//!
//! The proxy holds at most [`MAX_CONNECTIONS`] connections per sandbox and
//! a request head of at most [`MAX_HEAD`] bytes; it ends with the sandbox.
//! Each connection it opens counts against the node's outbound budget
//! for the function's tenant and the node ([`Allowed::budget`]), as a
//! `fetch` does; past it the client gets 429.
//!
//! Package installs (`install.rs`) go out the same way: their network
//! namespace's proxy listens on TCP inside it and lets out only the
//! package indexes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};

/// Connections one sandbox may have open through the proxy.
pub const MAX_CONNECTIONS: usize = 64;
/// Bytes of a request head the proxy reads before it refuses.
pub const MAX_HEAD: usize = 8 << 10;
/// How long the head and the connection to the host may take.
const WAIT: Duration = Duration::from_secs(10);

/// A sandbox's proxy task; stopped, with every relay it runs, when
/// dropped (with the sandbox's handler).
#[derive(Debug)]
pub struct Relay(pub tokio::task::JoinHandle<()>);

impl Drop for Relay {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a proxy lets out.
#[derive(Debug, Clone)]
pub struct Allowed {
    /// `host` (any port) and `host:port` entries.
    pub hosts: Arc<[String]>,
    /// Said when a host is refused: how to allow it.
    pub fix: &'static str,
    /// Let it reach this machine and private networks.
    pub private: bool,
    /// The node's outbound connections and whose these are: each relay
    /// holds one for as long as it is open, as a `fetch` does (`None`:
    /// not counted, for package installs).
    pub budget: Option<(Arc<hearth_host::outbound::Outbound>, Arc<str>)>,
}

/// Where a proxy takes its clients from.
#[derive(Debug)]
pub enum Listener {
    /// A sandbox's socket, reached through the helper's relay.
    Unix(UnixListener),
    /// A port inside an install's network namespace.
    Tcp(TcpListener),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(match self {
            Listener::Unix(l) => Box::new(l.accept().await?.0),
            Listener::Tcp(l) => Box::new(l.accept().await?.0),
        })
    }
}

/// A client's connection.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// Serves a proxy's listener until aborted (when its sandbox or install
/// ends).
pub fn serve(listener: Listener, allowed: Allowed) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let open = Arc::new(AtomicUsize::new(0));
        let allowed = Arc::new(allowed);
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                // Reap finished relays as they end.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            };
            let Ok(mut client) = accepted else {
                return;
            };
            if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                let _ = refuse(&mut client, 429, "too many connections through the proxy").await;
                continue;
            }
            open.fetch_add(1, Ordering::Relaxed);
            let (allowed, open) = (allowed.clone(), open.clone());
            // Relays die with this task (a JoinSet aborts them when dropped).
            tasks.spawn(async move {
                let _ = relay(client, &allowed).await;
                open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    })
}

/// Where a request head asks to go, and what to send there first.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `None` for `CONNECT` (answered by the proxy, then a tunnel);
    /// otherwise the head rewritten to origin form, for the host.
    forward: Option<Vec<u8>>,
}

/// Why a request head cannot go through the proxy.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("not an HTTP request head: {0}")]
    Syntax(#[from] httparse::Error),
    #[error("the request head ends early")]
    Partial,
    #[error("only CONNECT and http:// requests go through this proxy, not {0:?}")]
    Target(String),
    #[error("not a host and port: {0:?}")]
    Authority(String),
}

/// Headers a request head may carry through the proxy.
const MAX_HEADERS: usize = 64;

/// Reads a request head (through the blank line) and says where it goes.
/// The head is parsed by `httparse` (what hyper reads requests with); the
/// bytes forwarded are the client's own, with only the request line
/// rewritten to origin form.
fn parse_head(head: &[u8]) -> Result<Target, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if request.parse(head)?.is_partial() {
        return Err(HeadError::Partial);
    }
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err(HeadError::Partial);
    };
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None)?;
        return Ok(Target {
            host,
            port,
            forward: None,
        });
    }
    let uri: http::Uri = target
        .parse()
        .map_err(|_| HeadError::Target(target.to_string()))?;
    let (Some("http"), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(HeadError::Target(target.to_string()));
    };
    let (host, port) = split_authority(authority.as_str(), Some(80))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    // Everything after the request line, as the client sent it.
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or(HeadError::Partial)?;
    let mut forward = format!("{method} {path} HTTP/1.{version}").into_bytes();
    forward.extend_from_slice(&head[line_end..]);
    Ok(Target {
        host,
        port,
        forward: Some(forward),
    })
}

/// `host:port`, `[v6]:port`, or a host alone when `default` is given; no
/// user information.
fn split_authority(authority: &str, default: Option<u16>) -> Result<(String, u16), HeadError> {
    let bad = || HeadError::Authority(authority.to_string());
    let parsed: http::uri::Authority = authority.parse().map_err(|_| bad())?;
    if parsed.as_str().contains('@') {
        return Err(bad());
    }
    let port = parsed.port_u16().or(default).ok_or_else(bad)?;
    let host = parsed.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

async fn refuse(client: &mut Box<dyn Stream>, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        429 => "Too Many Requests",
        _ => "Bad Gateway",
    };
    let body = format!("{why}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await
}

async fn relay(mut client: Box<dyn Stream>, allowed: &Allowed) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = tokio::time::timeout(WAIT, async {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(Some(i + 4));
            }
            if buf.len() >= MAX_HEAD {
                return Ok(None);
            }
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let end = match head_end {
        Ok(Ok(Some(end))) => end,
        Ok(Err(e)) => return Err(e),
        _ => return refuse(&mut client, 400, "no complete request head").await,
    };
    let target = match parse_head(&buf[..end]) {
        Ok(t) => t,
        Err(why) => return refuse(&mut client, 400, &why.to_string()).await,
    };
    if !hearth_core::host_allowed(&allowed.hosts, &target.host, target.port) {
        let why = format!(
            "{}:{} is not on the allow-list: {}",
            target.host, target.port, allowed.fix
        );
        return refuse(&mut client, 403, &why).await;
    }
    let addrs = match hearth_host::resolve_egress(&target.host, target.port, allowed.private).await
    {
        Ok(a) => a,
        Err(why) => return refuse(&mut client, 403, &why).await,
    };
    let _held = match &allowed.budget {
        Some((outbound, tenant)) => match outbound.try_hold(tenant) {
            Ok(held) => Some(held),
            Err(why) => return refuse(&mut client, 429, &why.to_string()).await,
        },
        None => None,
    };
    let mut upstream = match tokio::time::timeout(WAIT, TcpStream::connect(&addrs[..])).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return refuse(&mut client, 502, &format!("{}: {e}", target.host)).await,
        Err(_) => return refuse(&mut client, 502, &format!("{}: no answer", target.host)).await,
    };
    match &target.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await?
        }
        Some(head) => upstream.write_all(head).await?,
    }
    upstream.write_all(&buf[end..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_as_proxies_read_them() {
        let t = parse_head(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.forward),
            ("api.example.com", 443, None)
        );
        let t = parse_head(b"GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\n\r\n")
            .unwrap();
        assert_eq!((t.host.as_str(), t.port), ("example.com", 80));
        assert_eq!(
            t.forward.unwrap(),
            b"GET /a?b HTTP/1.1\r\nHost: example.com\r\n\r\n"
        );
        let t = parse_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8443));
        let t = parse_head(b"POST http://h:8080 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("h", 8080));
        for bad in [
            &b"CONNECT example.com HTTP/1.1\r\n\r\n"[..],
            b"GET /relative HTTP/1.1\r\n\r\n",
            b"GET https://example.com/ HTTP/1.1\r\n\r\n",
            b"CONNECT user@example.com:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a b c d\r\n\r\n",
            b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
            b"GET http://:80/ HTTP/1.1\r\n\r\n",
            b"GET http://example.com/ HTTP/1.1\r\nHost: x\r\n",
            b"GARBAGE",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
