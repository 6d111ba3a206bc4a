//! [`ComponentSandbox`]: one instance of a component, one request.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use hearth_core::{InvokeError, LastOutput, LogStream, Request, Response};
use hearth_host::{HostCtx, Sandbox};
use http_body_util::{BodyExt, Full, Limited};
use wasmtime::component::ResourceTable;
use wasmtime::{PoolConcurrencyLimitError, Store};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
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

    /// Instantiates the component in `store` and has it handle `req`: the
    /// head and body it answered.
    async fn handle(&self, store: &mut Store<ComponentState>, req: &Request) -> Answer {
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
        let (request, out, answer) = {
            let mut view = store.data_mut().http();
            let request = view
                .new_incoming_request(Scheme::Http, incoming(req)?)
                .map_err(|e| InvokeError::Crashed(format!("{e:#}")))?;
            let (tx, rx) = tokio::sync::oneshot::channel();
            let out = view
                .new_response_outparam(tx)
                .map_err(|e| InvokeError::Crashed(format!("{e:#}")))?;
            (request, out, collect(rx, self.template.max_response_bytes))
        };
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
                        Err(InvokeError::Function(
                            "the handler returned without finishing its response body".into(),
                        ))
                    });
                    (called, answered)
                }
            }
        };
        match called {
            Ok(()) => answered,
            Err(e) if table_full(&e) => Err(InvokeError::Trap(format!(
                "it held more than {} wasi resources (header fields, streams, requests, \
                 pollables) at once; the host keeps them outside the function's memory, \
                 so their number is capped",
                store.data().table.max_capacity()
            ))),
            Err(e) => Err(why_failed(&store.data().bounds, limits, &e)),
        }
    }
}

#[async_trait]
impl Sandbox for ComponentSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        let (mut store, stdout, stderr) = self.store(&host);
        let deadline = host.meta().deadline;
        let outcome = tokio::time::timeout_at(deadline.into(), self.handle(&mut store, req))
            .await
            .unwrap_or(Err(InvokeError::Timeout {
                limit_ms: self.template.limits.timeout_ms,
            }));
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
        let (parts, body) = match outcome {
            Ok(answer) => answer,
            // Out of memory, the error quotes what the function wrote last.
            Err(InvokeError::OutOfMemory { limit_mib, .. }) => {
                let written = if err.is_empty() { &out } else { &err };
                return Err(InvokeError::OutOfMemory {
                    limit_mib,
                    last_output: LastOutput::of(&String::from_utf8_lossy(written)),
                });
            }
            Err(e) => return Err(e),
        };
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect(),
            body,
        })
    }
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
fn incoming(req: &Request) -> Result<http::Request<Full<Bytes>>, InvokeError> {
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
    builder.body(Full::new(req.body.clone())).map_err(|e| {
        InvokeError::Function(format!("the request cannot be given to a component: {e}"))
    })
}

/// Waits for the handler's response and reads its body, at most `max`
/// bytes of it.
async fn collect(
    rx: tokio::sync::oneshot::Receiver<
        Result<hyper::Response<wasmtime_wasi_http::p2::body::HyperOutgoingBody>, ErrorCode>,
    >,
    max: usize,
) -> Answer {
    let response = match rx.await {
        Ok(Ok(response)) => response,
        Ok(Err(code)) => {
            return Err(InvokeError::Function(format!(
                "the handler answered with the error {code:?}"
            )));
        }
        Err(_) => {
            return Err(InvokeError::Function(
                "the handler returned without setting a response (response-outparam.set)".into(),
            ));
        }
    };
    let (parts, body) = response.into_parts();
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
