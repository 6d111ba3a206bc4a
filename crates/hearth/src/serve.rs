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
//! - per client (`hearth_api::Clients`): open connections; past them, 429.
//! - `write_timeout`: a write that cannot make progress for that long (the
//!   client stopped reading its response) closes the connection, and what
//!   the response held is freed ([`WriteTimeout`]).
//!
//! A slow request *body* is bounded where bodies are read
//! (`hearth_api::ApiConfig::body_timeout`).

use std::future::Future;
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
    pub write_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open
/// connections finish (idle ones are closed). With `tls`, every connection
/// is TLS first (its handshake bounded like a request head); a client
/// the configuration refuses is dropped at the handshake.
pub async fn serve(
    listener: TcpListener,
    app: hearth_api::App,
    limits: ConnLimits,
    clients: hearth_api::Clients,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
        let Ok(client) = clients.connect(peer.ip()) else {
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
        // The connection is its client's until the last of its requests
        // is dropped with the service.
        let service = TowerToHyperService::new(app.for_connection(client));
        let Some(acceptor) = tls.clone() else {
            let stream = WriteTimeout::new(stream, limits.write_timeout);
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                let _ = conn.await;
                drop(slot);
            });
            continue;
        };
        let (builder, watcher, limit, write_limit) = (
            builder.clone(),
            graceful.watcher(),
            limits.header_timeout,
            limits.write_timeout,
        );
        tokio::spawn(async move {
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let stream = WriteTimeout::new(stream, write_limit);
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake refused"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
            drop(slot);
        });
    }
    graceful.shutdown().await;
}

/// A connection whose writes fail with `TimedOut` once one has been
/// pending (the socket's send buffer full: the client is not reading) for
/// `limit`: hyper then drops the connection and the response it held.
struct WriteTimeout<S> {
    inner: S,
    limit: Duration,
    /// Set while a write is pending; reset whenever one makes progress.
    stuck: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    fn new(inner: S, limit: Duration) -> Self {
        WriteTimeout {
            inner,
            limit,
            stuck: None,
        }
    }

    /// `result` of a write, timed: `Pending` starts (or checks) the clock.
    fn timed<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        result: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        if result.is_ready() {
            self.stuck = None;
            return result;
        }
        let limit = self.limit;
        let timer = self
            .stuck
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read its response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, r)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(cx, r)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(cx, r)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_that_makes_no_progress_for_the_limit_fails_and_progress_resets_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(1024);
        let mut server = WriteTimeout::new(server, Duration::from_millis(200));
        let mut client = client;
        // Read slowly but steadily: every write makes progress in time.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            for _ in 0..16 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                client.read_exact(&mut buf).await.unwrap();
            }
            client
        });
        server.write_all(&[7u8; 8 * 1024]).await.unwrap();
        let client = reader.await.unwrap();
        // Then stop reading: the buffer fills and the write times out.
        let stuck = server.write_all(&[7u8; 8 * 1024]).await.unwrap_err();
        assert_eq!(stuck.kind(), std::io::ErrorKind::TimedOut);
        drop(client);
    }
}
