//! The HTTP listener: hyper connections with bounds that a slow or greedy
//! client cannot pass. A client that opens connections and never finishes
//! a request head would otherwise hold a descriptor each until the node
//! has none left for anyone.
//!
//! - `header_timeout`: a request head (the first on a connection, or the
//!   next one on a kept-alive connection, idle time included) must arrive
//!   whole within it, or the connection is closed;
//! - `max_connections`: open connections in all; past it a new one is
//!   answered 503 and closed at once;
//! - `max_per_client`: open connections from one IP address; past it, 429.
//!
//! A slow request *body* is bounded where bodies are read
//! (`hearth_api::ApiConfig::body_timeout`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Connection bounds (see the module's docs).
#[derive(Debug, Clone)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub max_per_client: usize,
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open
/// connections finish (idle ones are closed). With `tls`, every connection
/// is TLS first (its handshake bounded like a request head); a client
/// the configuration refuses is dropped at the handshake.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let clients = Clients::default();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors (EMFILE) or the like: wait for
                    // connections to close rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(client) = clients.admit(peer.ip(), limits.max_per_client) else {
            refuse(
                &stream,
                "429 Too Many Requests",
                "too many open connections from this address",
            );
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(
                &stream,
                "503 Service Unavailable",
                "this node has as many open connections as it allows",
            );
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let Some(acceptor) = tls.clone() else {
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                let _ = conn.await;
                drop((slot, client));
            });
            continue;
        };
        let (builder, watcher, limit) =
            (builder.clone(), graceful.watcher(), limits.header_timeout);
        tokio::spawn(async move {
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake refused"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
            drop((slot, client));
        });
    }
    graceful.shutdown().await;
}

/// Answers a connection that is not admitted and drops it, without
/// waiting on it: a full send buffer loses the answer, not a descriptor.
fn refuse(stream: &TcpStream, status: &str, message: &str) {
    let kind = if status.starts_with("429") {
        "too_many_connections"
    } else {
        "unavailable"
    };
    let body = serde_json::json!({"error": {"kind": kind, "message": message}}).to_string();
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

/// Open connections per client address. An entry lives only while its
/// address has a connection open, so the map is no larger than the
/// connections are many.
#[derive(Default, Clone)]
struct Clients(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One admitted connection of a client; counted until dropped.
struct ClientSlot {
    clients: Clients,
    ip: IpAddr,
}

impl Clients {
    fn admit(&self, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut map = self.0.lock();
        let open = map.entry(ip).or_insert(0);
        if *open >= max {
            if *open == 0 {
                map.remove(&ip);
            }
            return None;
        }
        *open += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut map = self.clients.0.lock();
        if let Some(open) = map.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_admitted_up_to_its_share_and_forgotten_when_it_leaves() {
        let clients = Clients::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first: Vec<_> = (0..3).map(|_| clients.admit(a, 3).unwrap()).collect();
        assert!(clients.admit(a, 3).is_none(), "a fourth from a");
        let other = clients.admit(b, 3).expect("b has its own share");
        drop(first);
        assert_eq!(clients.0.lock().len(), 1, "only b is remembered");
        drop(other);
        assert!(clients.0.lock().is_empty());
        assert!(clients.admit(a, 0).is_none());
        assert!(clients.0.lock().is_empty(), "a refusal leaves no entry");
    }
}
