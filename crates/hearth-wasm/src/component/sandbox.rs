//! [`ComponentSandbox`]: one instance of a component, one request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use hearth_core::{InvokeError, LastOutput, LogStream, Request, Response};
use hearth_host::{BodyStream, HostCtx, ResponseHead, ResponseSink, Sandbox};
use http_body_util::{BodyExt, Full, Limited};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime::{PoolConcurrencyLimitError, Store};
use wasmtime_wasi_http::p2::bindings::http::types::{
    ErrorCode, IncomingRequest, ResponseOutparam, Scheme,
};
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpView};

use super::Template;
use super::host::{self, ComponentState, LogPipe, Outgoing};
use crate::WasmEngine;
use crate::bounds::{Bounds, new_store, why_failed};

/// A request's sandbox: the store and instance are made when it runs, so
/// that the WASI context can be bound to the invocation's host context.
pub struct ComponentSandbox {
    engine: WasmEngine,
    pre: ProxyPre<ComponentState>,
    template: Arc<Template>,
}

/// What the handler answered before its call returned.
type Answer = Result<(http::response::Parts, Bytes), InvokeError>;

impl ComponentSandbox {
    pub(crate) fn new(
        engine: &WasmEngine,
        pre: &ProxyPre<ComponentState>,
        template: &Arc<Template>,
    ) -> Self {
        ComponentSandbox {
            engine: engine.clone(),
            pre: pre.clone(),
            template: template.clone(),
        }
    }
}

impl ComponentSandbox {
    /// A store for one invocation: WASI bound to `host`, stdout and stderr
    /// into log pipes (returned, to read after the run), the function's
    /// bounds.
    fn store(&self, host: &HostCtx) -> (Store<ComponentState>, LogPipe, LogPipe) {
        let t = &self.template;
        // One byte over the log budget, so the log notes the cut.
        let stdout = LogPipe::new(host.limits().log_max_bytes + 1);
        let stderr = LogPipe::new(host.limits().log_max_bytes + 1);
        let mut table = ResourceTable::new();
        table.set_max_capacity(host::MAX_RESOURCES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(host::MAX_FIELDS_BYTES);
        let state = ComponentState {
            wasi: host::wasi_ctx(host, &t.env, &t.name, &stdout, &stderr),
            http,
            table,
            config: t.config.clone(),
            outgoing: Outgoing {
                host: Some(host.clone()),
            },
            bounds: Bounds {
                deadline: Some(host.meta().deadline),
                ..Bounds::new(t.limits.memory_bytes())
            },
        };
        (new_store(&self.engine, state), stdout, stderr)
    }

    /// Instantiates the component in `store` and hands it `request`: the
    /// running call and where its response will come.
    async fn start<B>(
        &self,
        store: &mut Store<ComponentState>,
        request: http::Request<B>,
    ) -> Result<
        (
            Proxy,
            Resource<IncomingRequest>,
            Resource<ResponseOutparam>,
            Outparam,
        ),
        InvokeError,
    >
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let limits = &self.template.limits;
        let proxy = match self.pre.instantiate_async(&mut *store).await {
            Ok(proxy) => proxy,
            Err(e) if e.downcast_ref::<PoolConcurrencyLimitError>().is_some() => {
                return Err(InvokeError::Overloaded);
            }
            Err(e) if store.data().bounds.limiter.refused() => {
                return Err(why_failed(&store.data().bounds, limits, &e));
            }
            Err(e) => return Err(InvokeError::Crashed(format!("instantiation failed: {e:#}"))),
        };
        let mut view = store.data_mut().http();
        let request = view
            .new_incoming_request(Scheme::Http, request)
            .map_err(|e| InvokeError::Crashed(format!("{e:#}")))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let out = view
            .new_response_outparam(tx)
            .map_err(|e| InvokeError::Crashed(format!("{e:#}")))?;
        Ok((proxy, request, out, rx))
    }

    /// Has the component handle `req`, whole: the head and body it
    /// answered.
    async fn handle(&self, store: &mut Store<ComponentState>, req: &Request) -> Answer {
        let request = incoming(req, Full::new(req.body.clone()))?;
        let (proxy, request, out, rx) = self.start(store, request).await?;
        let answer = collect(rx, self.template.max_response_bytes);
        // The body streams out while the handler runs; the call must be
        // driven until both are done.
        let (called, answered) = {
            let mut call = std::pin::pin!(proxy.wasi_http_incoming_handler().call_handle(
                &mut *store,
                request,
                out
            ));
            let mut answer = std::pin::pin!(answer);
            tokio::select! {
                answered = &mut answer => (call.await, answered),
                called = &mut call => {
                    // Nothing runs in the guest after its handler returns:
                    // what it did not send or finish by now it never will.
                    tokio::task::yield_now().await;
                    let answered = answer.now_or_never().unwrap_or_else(|| {
                        Err(InvokeError::Function(UNFINISHED.into()))
                    });
                    (called, answered)
                }
            }
        };
        self.returned(store, called)?;
        answered
    }

    /// Has the component handle `req` with its body arriving from `body`,
    /// its response going to `out` as the component writes it.
    async fn stream(
        &self,
        store: &mut Store<ComponentState>,
        req: &Request,
        body: BodyStream,
        out: &mut ResponseSink,
        host: &HostCtx,
    ) -> Result<(), InvokeError> {
        use futures::StreamExt;
        let arrival = Arc::new(Arrival::of(req));
        let body = arrival.watch(body);
        let body = http_body_util::StreamBody::new(body.map(|chunk| {
            chunk.map(hyper::body::Frame::data).map_err(|e| match e {
                InvokeError::RequestTooLarge { limit_bytes } => {
                    ErrorCode::HttpRequestBodySize(Some(limit_bytes as u64))
                }
                InvokeError::Disconnected(_) => ErrorCode::ConnectionTerminated,
                e => ErrorCode::InternalError(Some(e.to_string())),
            })
        }));
        let request = incoming(req, body)?;
        let (proxy, request, outparam, mut rx) = self.start(store, request).await?;
        let (called, streamed) = {
            let call = std::pin::pin!(proxy.wasi_http_incoming_handler().call_handle(
                &mut *store,
                request,
                outparam
            ));
            pump(call, &mut rx, out, (host, &arrival)).await
        };
        match called {
            // A trap or a bound is the cause, whatever it did to the body.
            Some(Err(e)) => self.returned(store, Err(e)),
            _ => streamed,
        }
    }

    /// What the handler's call returning `returned` means for the
    /// invocation.
    fn returned(
        &self,
        store: &Store<ComponentState>,
        returned: wasmtime::Result<()>,
    ) -> Result<(), InvokeError> {
        match returned {
            Ok(()) => Ok(()),
            Err(e) if table_full(&e) => Err(InvokeError::Trap(format!(
                "it held more than {} wasi resources (header fields, streams, requests, \
                 pollables) at once; the host keeps them outside the function's memory, \
                 so their number is capped",
                store.data().table.max_capacity()
            ))),
            Err(e) => Err(why_failed(&store.data().bounds, &self.template.limits, &e)),
        }
    }

    /// Runs `work` in a store bound to `host` within the invocation's
    /// deadline, then logs what the component wrote to stdout and stderr.
    async fn run<T>(
        &self,
        host: &HostCtx,
        work: impl AsyncFnOnce(&mut Store<ComponentState>) -> Result<T, InvokeError>,
    ) -> Result<T, InvokeError> {
        let (mut store, stdout, stderr) = self.store(host);
        let deadline = host.meta().deadline;
        // Removing the function cuts work it does after its response.
        let outcome = tokio::select! {
            ran = tokio::time::timeout_at(deadline.into(), work(&mut store)) => {
                ran.unwrap_or(Err(InvokeError::Timeout {
                    limit_ms: self.template.limits.timeout_ms,
                }))
            }
            () = host.until_cut_short() => Err(HostCtx::cut_short_error()),
        };
        drop(store);

        let (out, err) = (stdout.take(), stderr.take());
        for (bytes, stream, level) in [
            (&out, LogStream::Log, "info"),
            (&err, LogStream::Stderr, ""),
        ] {
            if !bytes.is_empty() {
                let text = String::from_utf8_lossy(bytes);
                host.log(stream, level, text.trim_end_matches('\n'));
            }
        }
        match outcome {
            // Out of memory, the error quotes what the function wrote last.
            Err(InvokeError::OutOfMemory { limit_mib, .. }) => {
                let written = if err.is_empty() { &out } else { &err };
                Err(InvokeError::OutOfMemory {
                    limit_mib,
                    last_output: LastOutput::of(&String::from_utf8_lossy(written)),
                })
            }
            outcome => outcome,
        }
    }
}

/// Drives the handler's `call` while passing its response to `out`: the
/// head once it is set, then each chunk of the body as the caller takes
/// it. Returns how the call ended (`None` when streaming failed first and
/// the call is abandoned) and how streaming did.
///
/// A handler that finishes its body and goes on working (work after the
/// response) has the caller's body ended then, whole, where the node
/// lets it ([`HostCtx::answer_streamed_early`]).
async fn pump(
    mut call: std::pin::Pin<&mut impl Future<Output = wasmtime::Result<()>>>,
    rx: &mut Outparam,
    out: &mut ResponseSink,
    (host, arrival): (&HostCtx, &Arrival),
) -> (Option<wasmtime::Result<()>>, Result<(), InvokeError>) {
    let mut called = None;
    let response = tokio::select! {
        response = &mut *rx => response.ok(),
        returned = call.as_mut() => {
            if returned.is_err() {
                return (Some(returned), Ok(()));
            }
            called = Some(returned);
            // What the guest set before returning is there to take now.
            tokio::task::yield_now().await;
            rx.try_recv().ok()
        }
    };
    let (parts, mut body) = match head_of(response) {
        Ok(response) => response.into_parts(),
        Err(e) => return (called, Err(e)),
    };
    let status = parts.status.as_u16();
    out.head(ResponseHead {
        status: parts.status.as_u16(),
        headers: header_pairs(&parts.headers),
        length: None,
    });
    loop {
        let frame = if called.is_some() {
            // Nothing runs in the guest any more: what it queued is all
            // there is, and a body it did not finish never will be.
            match body.frame().now_or_never() {
                Some(frame) => frame,
                None => return (called, Err(InvokeError::Function(UNFINISHED.into()))),
            }
        } else {
            tokio::select! {
                frame = body.frame() => frame,
                returned = call.as_mut() => {
                    if returned.is_err() {
                        return (Some(returned), Ok(()));
                    }
                    called = Some(returned);
                    tokio::task::yield_now().await;
                    continue;
                }
            }
        };
        match frame {
            None => break,
            // Trailers are not passed on.
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && let Err(e) = out.send(data).await
                {
                    return (called, Err(e));
                }
            }
            Some(Err(e)) => {
                let e = InvokeError::Function(format!("its response body failed: {e}"));
                return (called, Err(e));
            }
        }
    }
    if called.is_none() {
        // Only a request that arrived whole: one cut off later fails the
        // invocation, which the caller must still be able to see.
        if arrival.whole() && host.answer_streamed_early(status) {
            out.finish_early();
        }
        called = Some(call.await);
    }
    (called, Ok(()))
}

/// Whether a streamed request has arrived whole: declared empty, or read
/// to its end without an error.
struct Arrival {
    ended: AtomicBool,
    failed: AtomicBool,
}

impl Arrival {
    /// A request without a body (`content-length: 0`, or neither a length
    /// nor a transfer coding: RFC 9112 §6.3) has arrived whole already.
    fn of(req: &Request) -> Arrival {
        let empty = match (
            req.header("content-length"),
            req.header("transfer-encoding"),
        ) {
            (Some(n), _) => n.trim() == "0",
            (None, None) => true,
            (None, Some(_)) => false,
        };
        Arrival {
            ended: AtomicBool::new(empty),
            failed: AtomicBool::new(false),
        }
    }

    /// `body`, noting its errors and its end here.
    fn watch(self: &Arc<Self>, body: BodyStream) -> BodyStream {
        use futures::StreamExt;
        let (seen, end) = (self.clone(), self.clone());
        Box::pin(
            body.inspect(move |chunk| {
                if chunk.is_err() {
                    seen.failed.store(true, Ordering::Release);
                }
            })
            .chain(
                futures::stream::once(async move { end.ended.store(true, Ordering::Release) })
                    .filter_map(|()| std::future::ready(None)),
            ),
        )
    }

    fn whole(&self) -> bool {
        self.ended.load(Ordering::Acquire) && !self.failed.load(Ordering::Acquire)
    }
}

/// Why an invocation failed whose handler returned with its response body
/// neither finished nor dropped.
const UNFINISHED: &str = "the handler returned without finishing its response body";

#[async_trait]
impl Sandbox for ComponentSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        let (parts, body) = self
            .run(&host, async |store| self.handle(store, req).await)
            .await?;
        Ok(Response {
            status: parts.status.as_u16(),
            headers: header_pairs(&parts.headers),
            body,
        })
    }

    async fn invoke_streaming(
        &mut self,
        req: &Request,
        body: BodyStream,
        host: HostCtx,
        out: &mut ResponseSink,
    ) -> Result<(), InvokeError> {
        self.run(&host, async |store| {
            self.stream(store, req, body, out, &host).await
        })
        .await
    }
}

fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
        .collect()
}

/// Whether `err` is the guest's resource table refusing another entry.
fn table_full(err: &wasmtime::Error) -> bool {
    err.chain().any(|e| {
        matches!(
            e.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        )
    })
}

/// The request as `wasi:http` hands it to the guest: its path is the
/// function's sub-path (a component routes as if it owned the root).
fn incoming<B>(req: &Request, body: B) -> Result<http::Request<B>, InvokeError> {
    let mut uri = req.path.clone();
    if !req.query.is_empty() {
        uri.push('?');
        uri.push_str(&req.query);
    }
    let mut builder = http::Request::builder()
        .method(req.method.as_str())
        .uri(uri);
    if req.header("host").is_none() {
        builder = builder.header(http::header::HOST, "localhost");
    }
    for (k, v) in &req.headers {
        builder = builder.header(k, v);
    }
    builder.body(body).map_err(|e| {
        InvokeError::Function(format!("the request cannot be given to a component: {e}"))
    })
}

/// Where the handler's response comes: `response-outparam.set`.
type Outparam =
    tokio::sync::oneshot::Receiver<Result<hyper::Response<HyperOutgoingBody>, ErrorCode>>;

/// The response the handler set, or why there is none.
fn head_of(
    set: Option<Result<hyper::Response<HyperOutgoingBody>, ErrorCode>>,
) -> Result<hyper::Response<HyperOutgoingBody>, InvokeError> {
    match set {
        Some(Ok(response)) => Ok(response),
        Some(Err(code)) => Err(InvokeError::Function(format!(
            "the handler answered with the error {code:?}"
        ))),
        None => Err(InvokeError::Function(
            "the handler returned without setting a response (response-outparam.set)".into(),
        )),
    }
}

/// Waits for the handler's response and reads its body, at most `max`
/// bytes of it.
async fn collect(rx: Outparam, max: usize) -> Answer {
    let (parts, body) = head_of(rx.await.ok())?.into_parts();
    let body = Limited::new(body, max).collect().await.map_err(|e| {
        if e.downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            InvokeError::ResponseTooLarge { limit_bytes: max }
        } else {
            InvokeError::Function(format!("its response body failed: {e}"))
        }
    })?;
    Ok((parts, body.to_bytes()))
}
