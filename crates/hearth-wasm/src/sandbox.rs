//! [`WasmSandbox`]: one instance, one invocation.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use hearth_core::LogStream;
use hearth_core::{FunctionVersion, InvokeError, LastOutput, Request, Response};
use hearth_host::{BodyStream, HostCtx, ResponseHead, ResponseSink, Sandbox};
use tokio::sync::mpsc;
use wasmtime::{Instance, ModuleExport, PoolConcurrencyLimitError, Store};

use crate::WasmEngine;
use crate::bounds::{Bounded, Bounds, new_store, why_failed};
use crate::cgi::{parse_cgi_output, request_env, version_env};
use crate::library::Linked;
use crate::wasi::{Exit, Output, StdioStream, Strings, WasiCtx};

/// Per-sandbox state inside the wasmtime `Store`.
pub(crate) struct SandboxState {
    /// What WASI serves: arguments and the version's environment from
    /// instantiation on; the request (stdin, its CGI variables) and fresh
    /// output buffers are added just before `_start` runs.
    pub wasi: WasiCtx,
    /// Set for the duration of an invocation; the `hearth` imports use it.
    pub host: Option<HostCtx>,
    pub bounds: Bounds,
}

impl Bounded for SandboxState {
    fn bounds(&mut self) -> &mut Bounds {
        &mut self.bounds
    }
}

/// What every sandbox of one version needs to know, computed once at
/// prepare time and shared, so instantiating copies nothing from the spec.
pub(crate) struct SandboxTemplate {
    /// `/fn/<tenant>/<name>`: the CGI `SCRIPT_NAME`.
    pub prefix: String,
    /// `argv`: the function's name.
    pub args: Arc<Strings>,
    /// The function's env and the request-independent CGI variables.
    pub env: Arc<Strings>,
    pub limits: hearth_core::Limits,
    pub max_response_bytes: usize,
    /// Whether its bodies stream (the version's `stream` setting).
    pub stream: bool,
    /// Where `_start` is among the module's exports (found once, not
    /// by name per invocation).
    pub start: ModuleExport,
}

impl SandboxTemplate {
    pub fn new(version: &FunctionVersion, start: ModuleExport, max_response_bytes: usize) -> Self {
        let prefix = format!("/fn/{}/{}", version.tenant, version.name);
        let mut args = Strings::default();
        args.push(&[version.name.as_bytes()]);
        SandboxTemplate {
            env: Arc::new(version_env(&version.spec.env, &version.name, &prefix)),
            args: Arc::new(args),
            prefix,
            limits: version.spec.limits,
            max_response_bytes,
            stream: version.spec.stream,
            start,
        }
    }
}

/// A fresh instance of one function version.
pub struct WasmSandbox {
    store: Store<SandboxState>,
    instance: Instance,
    template: Arc<SandboxTemplate>,
}

impl WasmSandbox {
    pub(crate) async fn new(
        engine: &WasmEngine,
        pre: &Linked,
        template: &Arc<SandboxTemplate>,
    ) -> Result<Self, InvokeError> {
        let limits = template.limits;
        let state = SandboxState {
            wasi: WasiCtx {
                args: template.args.clone(),
                env_version: template.env.clone(),
                ..WasiCtx::default()
            },
            host: None,
            bounds: Bounds::new(limits.memory_bytes()),
        };
        let mut store = new_store(engine, state);
        let instance = match pre.instantiate(&mut store).await {
            Ok(i) => i,
            Err(e) => {
                if store.data().bounds.limiter.refused() {
                    return Err(InvokeError::OutOfMemory {
                        limit_mib: limits.memory_mib,
                        last_output: Default::default(),
                    });
                }
                // The pooling allocator refuses when every slot is taken.
                if e.downcast_ref::<PoolConcurrencyLimitError>().is_some() {
                    return Err(InvokeError::Overloaded);
                }
                return Err(InvokeError::Crashed(format!("instantiation failed: {e:#}")));
            }
        };
        Ok(WasmSandbox {
            store,
            instance,
            template: template.clone(),
        })
    }
}

/// How a guest's `_start` ended, when it did not fail.
pub(crate) enum Ended {
    Returned,
    /// It called `proc_exit` with this status.
    Exited(i32),
    /// Compiled code left for the isolate at this point (`hearth.leave`).
    Left(u32),
}

/// Runs `start` until `deadline` and says how it ended, or why it failed
/// in the caller's terms: out of time, its stdout past `max_output`, out
/// of memory, or the trap. The timer also covers a guest parked in a
/// WASI sleep or poll, or waiting on the caller, where no epoch tick
/// reaches it.
pub(crate) async fn run_start(
    store: &mut Store<SandboxState>,
    start: wasmtime::TypedFunc<(), ()>,
    deadline: std::time::Instant,
    limits: &hearth_core::Limits,
    max_output: usize,
) -> Result<Ended, InvokeError> {
    let run = start.call_async(&mut *store, ());
    let err = match tokio::time::timeout_at(deadline.into(), run).await {
        Err(_) => {
            return Err(InvokeError::Timeout {
                limit_ms: limits.timeout_ms,
            });
        }
        Ok(Ok(())) => return Ok(Ended::Returned),
        Ok(Err(e)) => e,
    };
    if let Some(Exit(status)) = err.downcast_ref::<Exit>() {
        return Ok(Ended::Exited(*status));
    }
    if let Some(left) = err.downcast_ref::<crate::imports::Left>() {
        return Ok(Ended::Left(left.0));
    }
    let state = store.data();
    if state.wasi.stdout_overflowed() {
        return Err(InvokeError::ResponseTooLarge {
            limit_bytes: max_output,
        });
    }
    Err(why_failed(&state.bounds, limits, &err))
}

impl WasmSandbox {
    /// Gives the guest `req` (its body whole, or arriving through
    /// `stream`), fresh output buffers and `host`, and runs `_start` within
    /// the invocation's deadline. Logs what it wrote to stderr.
    async fn run(
        &mut self,
        req: &Request,
        length: Option<u64>,
        stream: Option<StdioStream>,
        host: &HostCtx,
    ) -> Result<(), InvokeError> {
        let deadline = host.meta().deadline;
        let streaming = stream.is_some();
        {
            let state = self.store.data_mut();
            let wasi = &mut state.wasi;
            wasi.env_request = request_env(req, length, &self.template.prefix);
            wasi.stdin = req.body.clone();
            wasi.stdin_pos = 0;
            wasi.stream = stream;
            // A streaming stdout holds a piece at a time; the node bounds
            // the whole (`--max-stream-bytes`).
            wasi.stdout = if streaming {
                Output::new(usize::MAX)
            } else {
                Output::new(self.template.max_response_bytes)
            };
            // One byte over the log budget, so the log notes the cut.
            wasi.stderr = Output::new(host.limits().log_max_bytes + 1);
            state.host = Some(host.clone());
            state.bounds.deadline = Some(deadline);
        }
        let start = self
            .instance
            .get_module_export(&mut self.store, &self.template.start)
            .and_then(wasmtime::Extern::into_func)
            .ok_or_else(|| InvokeError::Crashed("the module lost its `_start` export".into()))?
            .typed::<(), ()>(&self.store)
            .map_err(|e| InvokeError::Crashed(e.to_string()))?;

        // Epochs interrupt running Wasm; `run_start`'s timer covers the rest.
        let limits = self.template.limits;
        let ended = run_start(
            &mut self.store,
            start,
            deadline,
            &limits,
            self.template.max_response_bytes,
        )
        .await;
        let outcome = match ended {
            Ok(Ended::Returned | Ended::Exited(0)) => Ok(()),
            // A program whose allocation the limit refused and that then
            // gave up (C's malloc returns NULL, the program exits
            // non-zero) ran out of memory, whatever status it chose.
            Ok(Ended::Exited(_)) if self.store.data().bounds.limiter.refused() => {
                Err(InvokeError::OutOfMemory {
                    limit_mib: limits.memory_mib,
                    last_output: Default::default(),
                })
            }
            Ok(Ended::Exited(status)) => Err(InvokeError::Function(Exit(status).to_string())),
            Ok(Ended::Left(at)) => Err(InvokeError::left_compiled(at)),
            Err(e) => Err(e),
        };
        let state = self.store.data_mut();
        state.host = None;
        let wasi = &mut state.wasi;
        if !wasi.stderr.bytes.is_empty() {
            let text = String::from_utf8_lossy(&wasi.stderr.bytes);
            host.log(LogStream::Stderr, "", text.trim_end_matches('\n'));
        }
        // Out of memory, the error quotes what the function wrote last: its
        // stderr, or else its stdout (which, failed, is no response).
        match outcome {
            Err(InvokeError::OutOfMemory { limit_mib, .. }) => {
                let written = if wasi.stderr.bytes.is_empty() {
                    &wasi.stdout.bytes
                } else {
                    &wasi.stderr.bytes
                };
                Err(InvokeError::OutOfMemory {
                    limit_mib,
                    last_output: LastOutput::of(&String::from_utf8_lossy(written)),
                })
            }
            other => other,
        }
    }

    /// After a streaming run that succeeded: sends what is left of stdout
    /// as the last piece. Either way lets go of the stream, so the pump
    /// sees the end.
    async fn finish_stream(&mut self, ran: &Result<(), InvokeError>) {
        let wasi = &mut self.store.data_mut().wasi;
        let Some(stream) = wasi.stream.take() else {
            return;
        };
        if ran.is_ok() {
            let rest = std::mem::take(&mut wasi.stdout.bytes);
            let _ = stream.out.send((rest.into(), true)).await;
        }
    }
}

/// Passes a streaming module's stdout to `out`: the first piece is parsed
/// for its CGI header block, which becomes the response's head, the rest
/// is body. Output that is all one piece is the response whole.
async fn pump(
    mut pieces: mpsc::Receiver<(Bytes, bool)>,
    out: &mut ResponseSink,
) -> Result<(), InvokeError> {
    while let Some((piece, last)) = pieces.recv().await {
        if out.started() {
            out.send(piece).await?;
        } else if last {
            // All of it: it leaves, with its length, once the node has
            // judged the invocation.
            out.whole(parse_cgi_output(piece))?;
        } else {
            let Response {
                status,
                headers,
                body,
            } = parse_cgi_output(piece);
            out.head(ResponseHead {
                status,
                headers,
                length: None,
            });
            out.send(body).await?;
        }
        if last {
            break;
        }
    }
    Ok(())
}

#[async_trait]
impl Sandbox for WasmSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        let length = Some(req.body.len() as u64);
        self.run(req, length, None, &host).await?;
        let stdout = std::mem::take(&mut self.store.data_mut().wasi.stdout.bytes);
        Ok(parse_cgi_output(Bytes::from(stdout)))
    }

    async fn invoke_streaming(
        &mut self,
        req: &Request,
        body: BodyStream,
        host: HostCtx,
        out: &mut ResponseSink,
    ) -> Result<(), InvokeError> {
        // CGI's CONTENT_LENGTH is what the caller declared; a chunked
        // request has none, and the guest reads stdin to its end.
        let length = req
            .header("content-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        let (tx, rx) = mpsc::channel(1);
        let stream = StdioStream {
            body: Some(body),
            out: tx,
            sent: false,
        };
        let run = async {
            let ran = self.run(req, length, Some(stream), &host).await;
            self.finish_stream(&ran).await;
            ran
        };
        let (ran, pumped) = tokio::join!(run, pump(rx, out));
        // The pump's failure (the caller left, the response passed its
        // limit) is the cause of the guest's failed write, not the other
        // way round.
        pumped?;
        ran?;
        if !out.answered() {
            return Err(InvokeError::Crashed(
                "the module's output ended without a response".into(),
            ));
        }
        Ok(())
    }
}
