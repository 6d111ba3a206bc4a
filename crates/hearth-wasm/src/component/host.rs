//! What a component's imports reach: its store state, and the WASI pieces
//! Hearth replaces so that every answer comes from the invocation's
//! [`HostCtx`] — clocks, randomness, outgoing HTTP — and is on its tape.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hearth_host::{HostCtx, HostError, OutboundRequest};
use http_body_util::{BodyExt, Full, Limited};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::{WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bounds::{Bounded, Bounds};

/// Resources (streams, fields, requests, pollables) one component store
/// may hold at once. Each is host memory the function's own memory limit
/// does not count, so it is bounded here.
pub(crate) const MAX_RESOURCES: usize = 1024;
/// Bytes of header names and values one `fields` resource may hold.
pub(crate) const MAX_FIELDS_BYTES: usize = 32 << 10;
/// Bytes one write to an outgoing body may carry; with one such chunk
/// buffered per body, what the host holds for bodies is bounded too.
pub(crate) const MAX_BODY_CHUNK: usize = 64 << 10;

/// A component store's data: WASI, wasi:http and wasi:config state, the
/// invocation's host context and the sandbox's bounds.
pub(crate) struct ComponentState {
    pub wasi: WasiCtx,
    pub http: WasiHttpCtx,
    pub table: ResourceTable,
    pub config: Arc<WasiConfigVariables>,
    pub outgoing: Outgoing,
    pub bounds: Bounds,
}

impl ComponentState {
    /// The invocation's host context (for `wasi:keyvalue` and
    /// `wasi:logging`; the outgoing-HTTP hooks hold it); `None` outside an
    /// invocation (a deploy's init step).
    pub fn host(&self) -> Option<&HostCtx> {
        self.outgoing.host.as_ref()
    }
}

impl Bounded for ComponentState {
    fn bounds(&mut self) -> &mut Bounds {
        &mut self.bounds
    }
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ComponentState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outgoing,
        }
    }
}

/// The WASI context of one invocation: its function's environment, taped
/// clocks and randomness, stdout and stderr into bounded log buffers, no
/// files, no sockets (the network is `wasi:http`, through the allow-list).
pub(crate) fn wasi_ctx(
    host: &HostCtx,
    env: &[(String, String)],
    name: &str,
    stdout: &LogPipe,
    stderr: &LogPipe,
) -> WasiCtx {
    WasiCtx::builder()
        .envs(env)
        .arg(name)
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .wall_clock(TapedClock(host.clone()))
        .monotonic_clock(TapedClock(host.clone()))
        .secure_random(TapedRandom(host.clone()))
        .insecure_random(TapedRandom(host.clone()))
        // `insecure-seed` is for hash-flooding resistance: fixed, so a
        // replay sees what the recording saw without a tape entry per call.
        .insecure_random_seed(0x6865_6172_7468)
        .max_random_size(crate::wasi::MAX_RANDOM as u64)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// The WASI context of a deploy's init step (`snapshot.rs`): no
/// invocation, so clocks are the host's own, stderr is kept for the deploy
/// error, and randomness is served as zeros while `drew` notes that it
/// was asked for (WASI cannot refuse it; the deploy then is).
pub(crate) fn init_wasi_ctx(stderr: &LogPipe, drew: &Arc<AtomicBool>) -> WasiCtx {
    WasiCtx::builder()
        .stderr(stderr.clone())
        .secure_random(NoRandom(drew.clone()))
        .insecure_random(NoRandom(drew.clone()))
        .insecure_random_seed(0x6865_6172_7468)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// Randomness at init: zeros, and a note that it was drawn.
struct NoRandom(Arc<AtomicBool>);

impl rand::TryRng for NoRandom {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        self.0.store(true, Ordering::Relaxed);
        Ok(0)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        self.0.store(true, Ordering::Relaxed);
        Ok(0)
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.store(true, Ordering::Relaxed);
        dst.fill(0);
        Ok(())
    }
}

/// `wasi:clocks` from the invocation's host context (on the tape).
struct TapedClock(HostCtx);

impl HostWallClock for TapedClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.wall_clock_nanos())
    }
}

impl HostMonotonicClock for TapedClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.monotonic_nanos()
    }
}

/// `wasi:random` from the invocation's host context (on the tape).
struct TapedRandom(HostCtx);

impl rand::TryRng for TapedRandom {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut b = [0; 4];
        self.0.fill_random(&mut b);
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut b = [0; 8];
        self.0.fill_random(&mut b);
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.fill_random(dst);
        Ok(())
    }
}

/// stdout or stderr: keeps the first `capacity` bytes for the function's
/// log and drops the rest (the guest is not told: a chatty function is
/// not a failed one). Clones share one buffer.
#[derive(Clone)]
pub(crate) struct LogPipe(Arc<Mutex<LogBuffer>>);

struct LogBuffer {
    bytes: Vec<u8>,
    capacity: usize,
}

impl LogPipe {
    pub fn new(capacity: usize) -> Self {
        LogPipe(Arc::new(Mutex::new(LogBuffer {
            bytes: Vec::new(),
            capacity,
        })))
    }

    /// What was written, as far as the capacity allowed.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.lock().bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogBuffer> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn append(&self, data: &[u8]) {
        let mut buf = self.lock();
        let room = buf.capacity.saturating_sub(buf.bytes.len());
        buf.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

impl IsTerminal for LogPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for LogPipe {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(MAX_BODY_CHUNK)
    }
}

#[async_trait::async_trait]
impl Pollable for LogPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// `wasi:http/outgoing-handler`: each request goes through
/// [`HostCtx::http_fetch`], so the function's allow-list applies, the
/// answer is taped, a replay is answered from the tape and a retry in
/// another tier does not send it twice.
pub(crate) struct Outgoing {
    pub host: Option<HostCtx>,
}

type SendFuture = Box<
    dyn std::future::Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<
                        dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>>
                            + Send,
                    >,
                ),
                wasmtime_wasi_http::Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for Outgoing {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> SendFuture {
        let host = self.host.clone();
        Box::new(async move {
            let Some(host) = host else {
                // Outside an invocation (instantiation) nothing is sent.
                return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
            };
            // The request goes on the tape: it can be no larger than it.
            let limit = host.limits().tape_max_bytes;
            let (parts, body) = request.into_parts();
            let body = Limited::new(body, limit)
                .collect()
                .await
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestBodySize(Some(limit as u64)))?
                .to_bytes();
            let outbound = OutboundRequest {
                method: parts.method.to_string(),
                url: parts.uri.to_string(),
                headers: parts
                    .headers
                    .iter()
                    .filter(|(k, _)| *k != http::header::HOST)
                    .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                    .collect(),
                body: body.to_vec(),
            };
            let answer = match host.http_fetch(outbound).await {
                Ok(answer) => answer,
                Err(e) => {
                    // The guest gets an error code; its log says why.
                    host.log(
                        hearth_core::LogStream::System,
                        "",
                        &format!("outgoing request refused: {e}"),
                    );
                    return Err(error_code(&e));
                }
            };
            let mut response = http::Response::builder().status(answer.status);
            for (k, v) in &answer.headers {
                response = response.header(k, v);
            }
            let body = Full::new(Bytes::from(answer.body))
                .map_err(|never| match never {})
                .boxed_unsync();
            let response = response
                .body(body)
                .map_err(|e| wasmtime_wasi_http::Error::InternalError(Some(e.to_string())))?;
            let done: Box<
                dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send,
            > = Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        MAX_BODY_CHUNK
    }
}

/// The `wasi:http` error code for why the host did not fetch.
fn error_code(e: &HostError) -> wasmtime_wasi_http::Error {
    use wasmtime_wasi_http::Error as E;
    match e {
        HostError::Denied(_) | HostError::Internal(_) => E::HttpRequestDenied,
        HostError::Invalid(_) => E::HttpRequestUriInvalid,
        HostError::TooLarge(n) => E::HttpResponseBodySize(Some(*n as u64)),
        HostError::Timeout => E::ConnectionTimeout,
        HostError::Network(m) => E::InternalError(Some(m.clone())),
        other => E::InternalError(Some(other.to_string())),
    }
}
