//! One QuickJS isolate serving one function version, and its event loop.
//!
//! An isolate is a QuickJS runtime and context with the prelude (web APIs,
//! `hearth`, the driver) and the function's code loaded. It is made in two
//! steps: [`Isolate::blank`] (runtime, context, prelude: about 0.5 ms, the
//! same for every function, so workers keep a few ready) and
//! [`Isolate::load`] (one version's code, tens of µs). It lives on one
//! worker thread. An invocation calls the driver, then loops: run pending
//! jobs; stop when the handler's promise settles; otherwise wait for a host
//! call to finish or a timer to fall due. Host calls run on the node's Tokio
//! runtime; their answers come back here and settle the JS promises.
//!
//! Limits: QuickJS's memory limit, a stack limit, and an interrupt handler
//! that stops execution at the deadline — or at once when the code asked for
//! something this tier does not provide (`Unsupported`), so that a `catch`
//! in user code cannot swallow the fallback.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hearth_core::LogStream;
use hearth_core::{InvokeError, Request, Response};
use hearth_host::{BodyStream, HostCtx, ResponseHead};
use rquickjs::promise::PromiseState;
use rquickjs::{
    Context, Ctx, Exception, Function, Module, Object, Persistent, Promise, Runtime, TypedArray,
    Value,
};
use serde_json::json;

use crate::compile::{CompiledCode, Kind};

mod bridge;
mod modules;
mod url;

use bridge::install_bridge;
use modules::{BundleLoader, BundleResolver};

pub(crate) const PRELUDE: &str = include_str!("../prelude.js");

/// The memory limit of a blank isolate: room for the prelude, never a
/// function's (each gets its own at load).
pub const BLANK_LIMIT_MIB: usize = 16;

/// What a finished host call hands back to JS: ok, a JSON header, a body.
type Completion = (u64, Result<(String, Vec<u8>), String>);

struct State {
    /// The version's code, once loaded; before that, none (the prelude
    /// imports nothing).
    code: std::cell::OnceCell<Arc<CompiledCode>>,
    host: RefCell<Option<HostCtx>>,
    deadline: Cell<Option<Instant>>,
    unsupported: RefCell<Option<String>>,
    next_call: Cell<u64>,
    calls: RefCell<FuturesUnordered<tokio::task::JoinHandle<Completion>>>,
    /// A streaming invocation's request body, read by the prelude's
    /// `body_read` calls on the node's runtime.
    request_body: RefCell<Option<RequestBody>>,
    /// The node's runtime, where host calls run.
    io: tokio::runtime::Handle,
}

impl State {
    fn code(&self) -> &CompiledCode {
        static NONE: std::sync::OnceLock<CompiledCode> = std::sync::OnceLock::new();
        match self.code.get() {
            Some(c) => c,
            None => NONE.get_or_init(CompiledCode::default),
        }
    }

    fn host(&self) -> Option<HostCtx> {
        self.host.borrow().clone()
    }

    fn flag_unsupported(&self, what: &str) {
        let mut u = self.unsupported.borrow_mut();
        if u.is_none() {
            *u = Some(what.to_string());
        }
    }
}

/// The rest of a streamed request body; `None` once it has ended.
type RequestBody = Arc<tokio::sync::Mutex<Option<BodyStream>>>;

/// A streaming invocation's ends: its request body as it arrives, and
/// where its response goes if the function answers with a stream.
pub struct Streams {
    pub body: BodyStream,
    pub head: tokio::sync::oneshot::Sender<ResponseHead>,
    pub chunks: tokio::sync::mpsc::Sender<bytes::Bytes>,
}

/// How an invocation answered.
pub enum Answered {
    Whole(Response),
    /// Its head and body went to [`Streams`].
    Streamed,
}

/// Why an isolate could not be made or used.
pub enum Failure {
    Invoke(InvokeError),
    /// The function's code threw while loading: message and full text.
    Load(String, String),
}

impl Failure {
    /// As an invocation's error (a load failure's first line).
    fn into_invoke(self) -> InvokeError {
        match self {
            Failure::Invoke(e) => e,
            Failure::Load(m, _) => InvokeError::Function(m),
        }
    }
}

pub struct Isolate {
    // Field order is drop order: values held from Rust, then the context,
    // then the runtime (QuickJS asserts that nothing outlives it).
    driver: Persistent<Object<'static>>,
    ctx: Context,
    rt: Runtime,
    state: Rc<State>,
    memory_limit_mib: u32,
    /// The last measured heap size and invocations since.
    measured: Cell<(u64, u32)>,
}

impl Isolate {
    /// An isolate with the prelude and no function: what any version's
    /// isolate starts as. Its memory limit until [`load`](Self::load) is
    /// [`BLANK_LIMIT_MIB`].
    pub fn blank(io: tokio::runtime::Handle) -> Result<Isolate, Failure> {
        let fail = |e: rquickjs::Error| Failure::Invoke(InvokeError::Crashed(e.to_string()));
        let rt = Runtime::new().map_err(fail)?;
        rt.set_memory_limit(BLANK_LIMIT_MIB << 20);
        rt.set_max_stack_size(512 << 10);
        rt.set_gc_threshold(4 << 20);
        let state = Rc::new(State {
            code: std::cell::OnceCell::new(),
            host: RefCell::new(None),
            deadline: Cell::new(None),
            unsupported: RefCell::new(None),
            next_call: Cell::new(1),
            calls: RefCell::new(FuturesUnordered::new()),
            request_body: RefCell::new(None),
            io,
        });
        {
            let s = state.clone();
            rt.set_interrupt_handler(Some(Box::new(move || {
                crate::workers::running();
                s.unsupported.borrow().is_some()
                    || s.deadline.get().is_some_and(|d| Instant::now() >= d)
                    || s.host.borrow().as_ref().is_some_and(HostCtx::cut_short)
            })));
        }
        rt.set_loader(BundleResolver(state.clone()), BundleLoader(state.clone()));
        let ctx = Context::full(&rt).map_err(fail)?;
        let driver = ctx
            .with(|ctx| -> rquickjs::Result<Persistent<Object<'static>>> {
                install_bridge(&ctx, &state)?;
                let prelude = crate::prelude_bytecode();
                // SAFETY: the prelude's bytecode was made by this build.
                unsafe { crate::compile::load_cjs(&ctx, prelude) }?;
                let driver: Object = ctx.globals().get("__hearth_driver")?;
                Ok(Persistent::save(&ctx, driver))
            })
            .map_err(|e| {
                let text = ctx.with(|ctx| describe(&ctx, e));
                Failure::Invoke(InvokeError::Crashed(format!(
                    "the js prelude failed: {text}"
                )))
            })?;
        Ok(Isolate {
            driver,
            ctx,
            rt,
            state,
            memory_limit_mib: BLANK_LIMIT_MIB as u32,
            measured: Cell::new((0, u32::MAX)),
        })
    }

    /// Makes a blank isolate `code`'s, under its memory limit. `host` is
    /// the invocation it is made for: loading may make host calls, so this
    /// runs on a worker thread with a Tokio runtime.
    pub async fn load(
        mut self,
        code: Arc<CompiledCode>,
        memory_limit_mib: u32,
        host: HostCtx,
    ) -> Result<Isolate, Failure> {
        if self.state.code.set(code).is_err() {
            return Err(Failure::Invoke(InvokeError::Crashed(
                "an isolate was loaded twice".into(),
            )));
        }
        self.rt.set_memory_limit((memory_limit_mib as usize) << 20);
        self.memory_limit_mib = memory_limit_mib;
        self.state.deadline.set(Some(host.meta().deadline));
        self.state.host.replace(Some(host));
        // JS runs from here (the module's top level): the worker is busy
        // even before the interrupt handler's first poll.
        crate::workers::running();
        self.load_entry().await?;
        self.state.host.replace(None);
        self.state.deadline.set(None);
        Ok(self)
    }

    /// Evaluates the entry module (ESM: with its imports; CommonJS: through
    /// `require`) and hands its exports to the driver.
    async fn load_entry(&mut self) -> Result<(), Failure> {
        let code = self.state.code.get().cloned().unwrap_or_default();
        let entry = code.entry.clone();
        let unit = &code.units[&entry];
        let started = self.ctx.with(
            |ctx| -> rquickjs::Result<Option<Persistent<Promise<'static>>>> {
                match unit.kind {
                    Kind::Esm => {
                        // SAFETY: bytecode from `compile`, checksummed on disk.
                        let m = unsafe { Module::load(ctx.clone(), &unit.bytes) }?;
                        let (m, promise) = m.eval()?;
                        let ns = m.namespace()?;
                        ctx.globals().set("__hearth_entry_ns", ns)?;
                        Ok(Some(Persistent::save(&ctx, promise)))
                    }
                    _ => {
                        let require: Function = ctx.globals().get("__hearth_require")?;
                        let exports: Value = require.call((entry.clone(),))?;
                        let driver = self.driver.clone().restore(&ctx)?;
                        let load: Function = driver.get("load")?;
                        load.call::<_, ()>((exports, true, entry.clone(), code.handler.clone()))?;
                        Ok(None)
                    }
                }
            },
        );
        let promise = match started {
            Ok(p) => p,
            Err(e) => return Err(self.load_failure(e)),
        };
        if let Some(promise) = promise {
            self.run(promise, true).await?;
            let loaded = self.ctx.with(|ctx| -> rquickjs::Result<()> {
                let ns: Value = ctx.globals().get("__hearth_entry_ns")?;
                ctx.globals().remove("__hearth_entry_ns")?;
                let driver = self.driver.clone().restore(&ctx)?;
                let load: Function = driver.get("load")?;
                load.call::<_, ()>((ns, false, entry.clone(), code.handler.clone()))
            });
            if let Err(e) = loaded {
                return Err(self.load_failure(e));
            }
        }
        Ok(())
    }

    fn load_failure(&self, e: rquickjs::Error) -> Failure {
        self.exception(e, true)
    }

    fn exception(&self, e: rquickjs::Error, loading: bool) -> Failure {
        let text = self.ctx.with(|ctx| describe(&ctx, e));
        self.failure(text, loading)
    }

    /// What an exception with this text means: the interrupt handler fired
    /// (unsupported, deadline), QuickJS ran out of memory, or the code threw
    /// (while loading, or in an invocation: then its text is logged).
    fn failure(&self, text: String, loading: bool) -> Failure {
        if let Some(f) = self.interrupted() {
            return Failure::Invoke(f);
        }
        if text.contains("out of memory") {
            return Failure::Invoke(InvokeError::OutOfMemory {
                limit_mib: self.memory_limit_mib,
                last_output: Default::default(),
            });
        }
        let first = text.lines().next().unwrap_or_default().to_string();
        if loading {
            return Failure::Load(first, text);
        }
        if let Some(host) = self.state.host() {
            host.log(LogStream::Stderr, "error", &text);
        }
        Failure::Invoke(InvokeError::Function(first))
    }

    /// Unsupported or past the deadline: why the interrupt handler fired.
    fn interrupted(&self) -> Option<InvokeError> {
        if let Some(what) = self.state.unsupported.borrow().clone() {
            return Some(InvokeError::Unsupported(what));
        }
        let host = self.state.host();
        if host.as_ref().is_some_and(HostCtx::cut_short) {
            return Some(HostCtx::cut_short_error());
        }
        match self.state.deadline.get() {
            Some(d) if Instant::now() >= d => Some(InvokeError::Timeout {
                limit_ms: host.map_or(0, |h| h.meta().version.spec.limits.timeout_ms),
            }),
            _ => None,
        }
    }

    /// Bytes QuickJS holds for this isolate. Measuring walks the whole
    /// heap (it was 60% of a small function's CPU when done per call), so
    /// it is re-measured only every 256 invocations.
    pub fn memory_bytes(&self) -> u64 {
        let (bytes, since) = self.measured.get();
        if since < 256 {
            self.measured.set((bytes, since + 1));
            return bytes;
        }
        let bytes = self.rt.memory_usage().memory_used_size.max(0) as u64;
        self.measured.set((bytes, 0));
        bytes
    }

    /// Runs one invocation. `Ok(response)` or the failure; the caller keeps
    /// the isolate only after `Ok` or a plain function error.
    pub async fn invoke(
        &mut self,
        req: Request,
        host: HostCtx,
        max_response: usize,
        streams: Option<Streams>,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Answered, InvokeError> {
        let meta = host.meta().clone();
        self.state.host.replace(Some(host));
        let streaming = streams.is_some();
        let (out_head, out_chunks) = match streams {
            Some(Streams { body, head, chunks }) => {
                let body = Arc::new(tokio::sync::Mutex::new(Some(body)));
                self.state.request_body.replace(Some(body));
                (Some(head), Some(chunks))
            }
            None => (None, None),
        };
        self.state.deadline.set(Some(meta.deadline));
        crate::workers::running();
        let v = &meta.version;
        let started = self.ctx.with(|ctx| -> rquickjs::Result<Persistent<Promise<'static>>> {
            let msg = json!({
                "method": req.method,
                "path": req.path,
                "query": req.query,
                "headers": req.headers,
                "id": meta.id.to_string(),
                "tenant": v.tenant,
                "function": v.name,
                "version": v.version,
                "memory_mib": v.spec.limits.memory_mib,
                "remaining_ms": meta.deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                "env": env,
                "streaming": streaming,
            });
            let msg = ctx.json_parse(msg.to_string())?;
            let body = TypedArray::<u8>::new(ctx.clone(), req.body.to_vec())?;
            let driver = self.driver.clone().restore(&ctx)?;
            let invoke: Function = driver.get("invoke")?;
            let promise: Promise = invoke.call((msg, body))?;
            Ok(Persistent::save(&ctx, promise))
        });
        let value = match self.settle(started).await {
            Ok(value) => value,
            // The handler threw: what it passed to waitUntil still runs
            // (as in Workers), and then the error is the answer.
            Err(e @ InvokeError::Function(_)) => {
                self.after_response(None).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let response = self.ctx.with(|ctx| -> rquickjs::Result<(Response, bool)> {
            let v = value.restore(&ctx)?;
            let o = v
                .as_object()
                .ok_or_else(|| Exception::throw_type(&ctx, "bad result"))?;
            let status: u16 = o.get("status")?;
            let streams = o.get::<_, Option<bool>>("streams")?.unwrap_or(false);
            let headers: Vec<Vec<String>> = o.get("headers")?;
            let headers = headers
                .into_iter()
                .filter_map(|mut p| {
                    let v = p.pop()?;
                    Some((p.pop()?, v))
                })
                .collect();
            let bytes = if streams {
                Vec::new()
            } else {
                let body: TypedArray<u8> = o.get("body")?;
                // SAFETY: no JS runs while the slice is borrowed; it is copied.
                unsafe { body.as_bytes() }.unwrap_or_default().to_vec()
            };
            let response = Response {
                status,
                headers,
                body: bytes.into(),
            };
            Ok((response, streams))
        });
        let (response, streams) = match response {
            Ok(r) => r,
            Err(e) => return Err(self.invoke_failure(e)),
        };
        if let (true, Some(head), Some(chunks)) = (streams, out_head, out_chunks) {
            let _ = head.send(ResponseHead {
                status: response.status,
                headers: response.headers,
                length: None,
            });
            self.stream_out(&chunks).await?;
            // A streamed body ends with the invocation: its work after
            // the response runs before the caller sees the end.
            self.after_response(None).await?;
            return Ok(Answered::Streamed);
        }
        // Streamed, the node bounds the body (`--max-stream-bytes`).
        if response.body.len() > max_response && !streaming {
            return Err(InvokeError::ResponseTooLarge {
                limit_bytes: max_response,
            });
        }
        self.after_response(Some(&response)).await?;
        Ok(Answered::Whole(response))
    }

    /// Runs the work the invocation passed to `waitUntil`, if any, after
    /// sending `response` to the caller where the node lets it
    /// ([`HostCtx::answer_early`]; otherwise the caller waits for the
    /// work). The work has what is left of the invocation's deadline; a
    /// promise of it that rejected is logged and the response stands.
    async fn after_response(&mut self, response: Option<&Response>) -> Result<(), InvokeError> {
        let waiting = self.ctx.with(|ctx| -> rquickjs::Result<bool> {
            let driver = self.driver.clone().restore(&ctx)?;
            let waiting: Function = driver.get("waiting")?;
            waiting.call(())
        });
        match waiting {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(self.invoke_failure(e)),
        }
        let Some(host) = self.state.host() else {
            return Ok(());
        };
        if let Some(response) = response {
            host.answer_early(response);
        }
        let after = self
            .ctx
            .with(|ctx| -> rquickjs::Result<Persistent<Promise<'static>>> {
                let driver = self.driver.clone().restore(&ctx)?;
                let after: Function = driver.get("after")?;
                let promise: Promise = after.call(())?;
                Ok(Persistent::save(&ctx, promise))
            });
        let failed = self.settle(after).await?;
        let failed = self
            .ctx
            .with(|ctx| -> rquickjs::Result<Vec<String>> { failed.restore(&ctx)?.get() });
        for why in failed.unwrap_or_default() {
            host.log(
                LogStream::System,
                "error",
                &format!("a promise passed to waitUntil rejected: {why}"),
            );
        }
        Ok(())
    }

    /// Sends the response stream's chunks to `chunks` as the function's
    /// stream gives them (the driver's `pull`), each waiting for room.
    async fn stream_out(
        &mut self,
        chunks: &tokio::sync::mpsc::Sender<bytes::Bytes>,
    ) -> Result<(), InvokeError> {
        loop {
            let pulled = self
                .ctx
                .with(|ctx| -> rquickjs::Result<Persistent<Promise<'static>>> {
                    let driver = self.driver.clone().restore(&ctx)?;
                    let pull: Function = driver.get("pull")?;
                    let promise: Promise = pull.call(())?;
                    Ok(Persistent::save(&ctx, promise))
                });
            let value = self.settle(pulled).await?;
            let chunk = self.ctx.with(|ctx| -> rquickjs::Result<Option<Vec<u8>>> {
                let v = value.restore(&ctx)?;
                if v.is_null() {
                    return Ok(None);
                }
                let chunk = TypedArray::<u8>::from_value(v)?;
                // SAFETY: no JS runs while the slice is borrowed; it is copied.
                Ok(Some(
                    unsafe { chunk.as_bytes() }.unwrap_or_default().to_vec(),
                ))
            });
            match chunk {
                Ok(None) => return Ok(()),
                Ok(Some(chunk)) => {
                    if chunks.send(chunk.into()).await.is_err() {
                        // The caller is gone or the body passed its limit:
                        // the node has the reason.
                        return Err(InvokeError::Disconnected(
                            "the response stream was closed".into(),
                        ));
                    }
                }
                Err(e) => return Err(self.invoke_failure(e)),
            }
        }
    }

    /// An exception while reading the driver's answer, as the caller's error.
    fn invoke_failure(&self, e: rquickjs::Error) -> InvokeError {
        self.function_failure(e).into_invoke()
    }

    /// Drives a promise the driver returned (`started`, or the exception
    /// calling it threw) to its value, or the caller's error.
    async fn settle(
        &mut self,
        started: rquickjs::Result<Persistent<Promise<'static>>>,
    ) -> Result<Persistent<Value<'static>>, InvokeError> {
        let settled = match started {
            Ok(promise) => self.run(promise, false).await,
            Err(e) => Err(self.function_failure(e)),
        };
        settled.map_err(Failure::into_invoke)
    }

    /// Ends an invocation: forgets its host and drops unfinished host calls
    /// (they complete on the node's runtime; nobody waits for them).
    pub fn finish(&mut self) {
        self.state.host.replace(None);
        self.state.deadline.set(None);
        self.state.calls.borrow_mut().clear();
        self.state.request_body.replace(None);
    }

    /// An exception in user code: OOM, interrupted, or the function's error.
    fn function_failure(&self, e: rquickjs::Error) -> Failure {
        self.exception(e, false)
    }

    fn run_jobs(&self) {
        loop {
            match self.rt.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {} // a job threw; its promise carries the error
            }
        }
    }

    /// Drives `promise` to completion: jobs, timers, host calls. While
    /// `loading` (the entry module's evaluation) a rejection is a load
    /// failure, reported once by the caller.
    async fn run(
        &mut self,
        promise: Persistent<Promise<'static>>,
        loading: bool,
    ) -> Result<Persistent<Value<'static>>, Failure> {
        loop {
            self.run_jobs();
            if let Some(f) = self.interrupted() {
                return Err(Failure::Invoke(f));
            }
            let settled = self.ctx.with(|ctx| -> rquickjs::Result<Settled> {
                let p = promise.clone().restore(&ctx)?;
                Ok(match p.state() {
                    PromiseState::Pending => Settled::Pending,
                    PromiseState::Resolved => {
                        let v: Value = p
                            .result::<Value>()
                            .transpose()?
                            .unwrap_or_else(|| Value::new_undefined(ctx.clone()));
                        Settled::Resolved(Persistent::save(&ctx, v))
                    }
                    PromiseState::Rejected => Settled::Rejected(match p.result::<Value>() {
                        Some(Err(rquickjs::Error::Exception)) => describe_value(&ctx.catch()),
                        Some(Ok(v)) => describe_value(&v),
                        Some(Err(e)) => e.to_string(),
                        None => "rejected".into(),
                    }),
                })
            });
            match settled {
                Ok(Settled::Resolved(v)) => return Ok(v),
                Ok(Settled::Rejected(text)) => return Err(self.failure(text, loading)),
                Ok(Settled::Pending) => {}
                Err(e) => return Err(self.exception(e, loading)),
            }
            // Timers due now run; the next one bounds the wait.
            let next_timer = self.ctx.with(|ctx| -> rquickjs::Result<f64> {
                let driver = self.driver.clone().restore(&ctx)?;
                let tick: Function = driver.get("tick")?;
                tick.call(())
            });
            let next_timer = match next_timer {
                Ok(t) => t,
                Err(e) => return Err(self.exception(e, loading)),
            };
            // A timer that ran may have queued jobs (resolved a promise).
            if next_timer == 0.0 || self.rt.is_job_pending() {
                continue;
            }
            let deadline = self.state.deadline.get().unwrap_or_else(Instant::now);
            let wait_until = if next_timer > 0.0 {
                deadline
                    .min(Instant::now() + std::time::Duration::from_secs_f64(next_timer / 1000.0))
            } else {
                deadline
            };
            if self.state.calls.borrow().is_empty() && next_timer < 0.0 {
                return Err(Failure::Invoke(InvokeError::Function(
                    "the handler's promise never settled (no pending fetch, KV call or timer)"
                        .into(),
                )));
            }
            // Out of the cell while waiting: no JS runs meanwhile, so nothing
            // else can add a call.
            crate::workers::yielded();
            let mut calls = std::mem::take(&mut *self.state.calls.borrow_mut());
            let host = self.state.host();
            let cut = async {
                match &host {
                    Some(h) => h.until_cut_short().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                c = calls.next() => c,
                _ = tokio::time::sleep_until(wait_until.into()) => None,
                () = cut => None,
            };
            *self.state.calls.borrow_mut() = calls;
            crate::workers::running();
            if let Some(done) = next {
                let (id, result) =
                    done.unwrap_or_else(|e| (0, Err(format!("host call failed: {e}"))));
                let settled = self.ctx.with(|ctx| -> rquickjs::Result<()> {
                    let driver = self.driver.clone().restore(&ctx)?;
                    let settle: Function = driver.get("settle")?;
                    match result {
                        Ok((header, body)) => {
                            let body = TypedArray::<u8>::new(ctx.clone(), body)?;
                            settle.call((id as f64, true, header, body))
                        }
                        Err(message) => settle.call((id as f64, false, message, ())),
                    }
                });
                if let Err(e) = settled {
                    return Err(self.exception(e, loading));
                }
            } else if Instant::now() >= deadline {
                return Err(Failure::Invoke(InvokeError::Timeout {
                    limit_ms: self
                        .state
                        .host()
                        .map_or(0, |h| h.meta().version.spec.limits.timeout_ms),
                }));
            }
        }
    }
}

enum Settled {
    Pending,
    Resolved(Persistent<Value<'static>>),
    Rejected(String),
}

/// The text of an error: the pending exception's name, message and stack.
fn describe(ctx: &Ctx<'_>, e: rquickjs::Error) -> String {
    match e {
        rquickjs::Error::Exception => describe_value(&ctx.catch()),
        other => other.to_string(),
    }
}

fn describe_value(v: &Value<'_>) -> String {
    // At its limit QuickJS may have no room left even for its "out of
    // memory" error, and throws `null` instead (code that throws `null`
    // itself is taken for the same: rare, and then told so).
    if v.is_null() {
        return "out of memory (the exception was null: no room was left for an error)".into();
    }
    if let Some(o) = v.as_object() {
        let name = o
            .get::<_, String>("name")
            .unwrap_or_else(|_| "Error".into());
        let message = o.get::<_, String>("message").unwrap_or_default();
        let stack = o.get::<_, String>("stack").unwrap_or_default();
        return format!("{name}: {message}\n{stack}").trim_end().to_string();
    }
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    format!("{v:?}")
}
