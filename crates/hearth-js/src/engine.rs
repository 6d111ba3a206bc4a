//! The js tier's engine: compile, prepare, and hand invocations to the
//! worker threads ([`crate::workers`]), which own the isolates.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hearth_core::{FunctionSpec, FunctionVersion, InvokeError, Request, Response, Runtime, Tier};
use hearth_host::bundle::Bundle;
use hearth_host::{
    Artifacts, BodyStream, Compiled, DeployError, Engine, EngineStatus, HostCtx, Prepared,
    ResponseSink, Sandbox, Source,
};
use tokio::sync::oneshot;

use crate::compile::{self, CompiledCode};
use crate::isolate::{Answered, Streams};
use crate::workers::{Job, Pool};

/// Settings of the js tier.
#[derive(Debug, Clone)]
pub struct JsConfig {
    /// Where compiled bytecode is cached (`<data>/cache`).
    pub cache_dir: PathBuf,
    /// Worker threads running isolates (as many again are kept in
    /// reserve, see [`crate::workers`]).
    pub workers: usize,
    /// Workers one tenant's invocations may run on at once.
    pub workers_per_tenant: usize,
    /// JS running this long without yielding stalls its worker: work
    /// goes elsewhere.
    pub slice: Duration,
    /// How long an idle isolate is kept.
    pub keep_alive: Duration,
    /// Idle isolates one worker keeps at most.
    pub max_idle_per_worker: usize,
    /// Blank isolates (prelude, no function) each worker keeps ready.
    pub blank_per_worker: usize,
    pub max_response_bytes: usize,
}

impl JsConfig {
    pub fn new(cache_dir: PathBuf) -> JsConfig {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let workers = (cores * 2).max(4);
        JsConfig {
            cache_dir,
            workers,
            workers_per_tenant: (workers / 2).max(1),
            slice: Duration::from_millis(20),
            keep_alive: Duration::from_secs(300),
            max_idle_per_worker: 256,
            blank_per_worker: 1,
            max_response_bytes: 6 << 20,
        }
    }
}

struct Inner {
    config: JsConfig,
    cache_dir: PathBuf,
    pool: Arc<Pool>,
    /// Tenants one of whose invocations cost the node a worker (see
    /// `workers.rs`, "Lost workers are abandoned"): all their JavaScript
    /// runs in Node.js from then on, whatever they deploy, so no tenant
    /// can use up the spare workers by deploying the same builtin again.
    lost_a_worker: parking_lot::Mutex<std::collections::HashSet<Arc<str>>>,
    /// Whether `lost_a_worker` has anyone (read before its lock, on every
    /// invocation).
    any_lost: std::sync::atomic::AtomicBool,
}

/// The js tier. Cheap to clone.
#[derive(Clone)]
pub struct JsEngine(Arc<Inner>);

/// One version, ready to run: its bytecode and where its idle isolates are.
pub(crate) struct JsVersion {
    pub(crate) key: String,
    pub(crate) tenant: Arc<str>,
    pub(crate) code: Arc<CompiledCode>,
    pub(crate) memory_mib: u32,
    /// The environment it was prepared with (its secrets' values
    /// included), given to each invocation as `env`/`process.env`.
    pub(crate) env: Arc<std::collections::BTreeMap<String, String>>,
    /// Deployed with `stream`: its bodies stream.
    pub(crate) stream: bool,
    /// Idle isolates of this version, per worker.
    pub(crate) idle_on: Vec<AtomicUsize>,
    /// One of its invocations held a worker past its deadline in a builtin
    /// the interrupt handler cannot stop: the isolate runs it no more
    /// (Node.js does, where a deadline kills the process).
    pub(crate) lost_a_worker: std::sync::atomic::AtomicBool,
}

impl JsEngine {
    /// Starts the worker threads. Call inside the node's Tokio runtime:
    /// host calls run there.
    pub fn new(config: JsConfig) -> anyhow::Result<JsEngine> {
        // The suffix counts changes to the compiled form (2: CommonJS
        // wrappers return a top-level `main`).
        let cache_dir = config.cache_dir.join("js-quickjs-0.14-2");
        std::fs::create_dir_all(&cache_dir)?;
        let pool = Pool::start(&config)?;
        Ok(JsEngine(Arc::new(Inner {
            config,
            cache_dir,
            pool,
            lost_a_worker: Default::default(),
            any_lost: Default::default(),
        })))
    }
}

#[async_trait]
impl Engine for JsEngine {
    fn tier(&self) -> Tier {
        Tier::Js
    }

    async fn compile(&self, spec: &FunctionSpec, source: Source) -> Result<Compiled, DeployError> {
        let started = Instant::now();
        let runtime = spec.runtime;
        if runtime != Runtime::Js {
            return Err(DeployError::Invalid(format!(
                "the js tier runs JavaScript, not {runtime}"
            )));
        }
        let cache_dir = self.0.cache_dir.clone();
        let handler = spec.handler.clone();
        tokio::task::spawn_blocking(move || {
            let bundle = Bundle::from_source(Runtime::Js, &source)
                .map_err(|e| DeployError::Invalid(e.to_string()))?;
            let entry = bundle
                .entry(Runtime::Js, handler.as_ref())
                .map_err(|e| DeployError::NotAFunction(e.to_string()))?;
            if let Some(h) = &handler {
                bundle
                    .check_mentions(&entry, h)
                    .map_err(|e| DeployError::NotAFunction(e.to_string()))?;
            }
            let artifact = bundle.to_tar();
            let hash = hearth_host::content_hash(&artifact);
            compile::load_or_compile(&cache_dir, &hash, &bundle, &entry)
                .map_err(|e| DeployError::Invalid(e.to_string()))?;
            Ok(Compiled {
                artifact,
                compile_ms: started.elapsed().as_millis() as u64,
                ..Compiled::default()
            })
        })
        .await
        .map_err(|e| DeployError::Invalid(e.to_string()))?
    }

    async fn prepare(
        &self,
        version: &FunctionVersion,
        artifacts: &Arc<dyn Artifacts>,
    ) -> Result<Arc<dyn Prepared>, DeployError> {
        let bytes = artifacts.read(&version.artifact)?;
        let (cache_dir, hash) = (self.0.cache_dir.clone(), version.artifact.clone());
        let handler = version.spec.handler.clone();
        let code = tokio::task::spawn_blocking(move || {
            let bundle = Bundle::from_tar(&bytes).map_err(|e| e.to_string())?;
            let entry = bundle
                .entry(Runtime::Js, handler.as_ref())
                .map_err(|e| e.to_string())?;
            let mut code = compile::load_or_compile(&cache_dir, &hash, &bundle, &entry)
                .map_err(|e| e.to_string())?;
            code.handler = handler.map(|h| h.function().to_string());
            Ok::<_, String>(code)
        })
        .await
        .map_err(|e| DeployError::Load(e.to_string()))?
        .map_err(DeployError::Load)?;
        Ok(Arc::new(JsPrepared {
            engine: self.clone(),
            version: Arc::new(JsVersion {
                key: format!(
                    "{}/{}@{}/{}",
                    version.tenant, version.name, version.version, version.artifact
                ),
                tenant: version.tenant.as_str().into(),
                code: Arc::new(code),
                memory_mib: version.spec.limits.memory_mib,
                env: Arc::new(version.spec.env.clone()),
                stream: version.spec.stream,
                idle_on: (0..self.0.pool.workers.len())
                    .map(|_| AtomicUsize::new(0))
                    .collect(),
                lost_a_worker: Default::default(),
            }),
        }))
    }

    fn pool_free(&self) -> Vec<(&'static str, u64)> {
        let blank: usize = self
            .0
            .pool
            .workers
            .iter()
            .map(|w| w.blank.load(Ordering::Relaxed))
            .sum();
        vec![("js_isolates", blank as u64)]
    }

    fn status(&self) -> EngineStatus {
        let w = &self.0.pool.workers;
        let idle: usize = w.iter().map(|w| w.idle.load(Ordering::Relaxed)).sum();
        let blank: usize = w.iter().map(|w| w.blank.load(Ordering::Relaxed)).sum();
        let bytes: u64 = w.iter().map(|w| w.idle_bytes.load(Ordering::Relaxed)).sum();
        let running: usize = w.iter().map(|w| w.load.load(Ordering::Relaxed)).sum();
        EngineStatus {
            degraded: Vec::new(),
            details: serde_json::json!({
                "workers": self.0.pool.regular(),
                "reserve_workers": w.len() - self.0.pool.regular(),
                "workers_per_tenant": self.0.config.workers_per_tenant,
                "stalled_workers": self.0.pool.stalled(),
                "abandoned_workers": self.0.pool.abandoned(),
                "tenants_sent_to_node": self.0.lost_a_worker.lock().len(),
                "active_workers": self.0.pool.active(),
                "running": running,
                "idle_isolates": idle,
                "blank_isolates": blank,
                "idle_isolate_bytes": bytes,
                "keep_alive_s": self.0.config.keep_alive.as_secs(),
            }),
        }
    }
}

struct JsPrepared {
    engine: JsEngine,
    version: Arc<JsVersion>,
}

#[async_trait]
impl Prepared for JsPrepared {
    async fn instantiate(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        Ok(Box::new(JsSandbox {
            engine: self.engine.clone(),
            version: self.version.clone(),
            isolated: false,
        }))
    }

    async fn instantiate_isolated(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        Ok(Box::new(JsSandbox {
            engine: self.engine.clone(),
            version: self.version.clone(),
            isolated: true,
        }))
    }

    /// A function deployed with `stream` reads its request as a stream and
    /// may answer with one (`docs/js-tier.md`, "Streaming bodies").
    fn streams(&self) -> bool {
        self.version.stream
    }
}

/// A claim on an isolate: the invocation runs on a worker.
struct JsSandbox {
    engine: JsEngine,
    version: Arc<JsVersion>,
    isolated: bool,
}

impl JsSandbox {
    /// Runs `req` on a worker; `streams` for a streaming invocation.
    async fn run(
        &self,
        req: &Request,
        host: HostCtx,
        streams: Option<Streams>,
    ) -> Result<Answered, InvokeError> {
        if self.version.lost_a_worker.load(Ordering::Relaxed) {
            return Err(InvokeError::Unsupported(
                "an earlier invocation of this version ran a builtin past its deadline, which \
                 the isolate cannot interrupt"
                    .into(),
            ));
        }
        if self.engine.0.any_lost.load(Ordering::Relaxed)
            && self
                .engine
                .0
                .lost_a_worker
                .lock()
                .contains(&self.version.tenant)
        {
            return Err(InvokeError::Unsupported(
                "an earlier invocation of this tenant ran a builtin past its deadline, which \
                 the isolate cannot interrupt"
                    .into(),
            ));
        }
        let meta = host.meta();
        let (deadline, limit_ms) = (meta.deadline, meta.version.spec.limits.timeout_ms);
        let (reply, answer) = oneshot::channel();
        let pool = &self.engine.0.pool;
        let worker = pool.dispatch(Job {
            version: self.version.clone(),
            isolated: self.isolated,
            // The worker is another thread: it gets its own copy.
            req: req.clone(),
            host,
            streams,
            reply,
        });
        // The interrupt handler ends the invocation at its deadline; a
        // worker that has not answered a grace later is stuck where the
        // handler is not polled, and its caller is not kept waiting.
        let late = tokio::time::Instant::from_std(deadline + crate::workers::GRACE);
        match tokio::time::timeout_at(late, answer).await {
            Ok(answered) => answered.unwrap_or_else(|_| {
                Err(InvokeError::Crashed(
                    "the js worker dropped the invocation".into(),
                ))
            }),
            Err(_) => {
                if pool.give_up_on(worker) {
                    self.version.lost_a_worker.store(true, Ordering::Relaxed);
                    let tenant = self.version.tenant.clone();
                    self.engine.0.any_lost.store(true, Ordering::Relaxed);
                    if self.engine.0.lost_a_worker.lock().insert(tenant) {
                        tracing::warn!(
                            tenant = &*self.version.tenant,
                            "the tenant's JavaScript runs in Node.js from now on: it cost the \
                             node a js worker"
                        );
                    }
                }
                Err(InvokeError::Timeout { limit_ms })
            }
        }
    }
}

#[async_trait]
impl Sandbox for JsSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        match self.run(req, host, None).await? {
            Answered::Whole(response) => Ok(response),
            Answered::Streamed => Err(InvokeError::Crashed(
                "the isolate streamed an invocation that does not stream".into(),
            )),
        }
    }

    async fn invoke_streaming(
        &mut self,
        req: &Request,
        body: BodyStream,
        host: HostCtx,
        out: &mut ResponseSink,
    ) -> Result<(), InvokeError> {
        let (head, head_rx) = oneshot::channel();
        let (chunks, mut chunks_rx) = tokio::sync::mpsc::channel(1);
        let streams = Streams { body, head, chunks };
        let pump = async {
            if let Ok(head) = head_rx.await {
                out.head(head);
                while let Some(chunk) = chunks_rx.recv().await {
                    out.send(chunk).await?;
                }
            }
            Ok::<_, InvokeError>(())
        };
        let (answered, pumped) = tokio::join!(self.run(req, host, Some(streams)), pump);
        // The pump's failure (the caller left, a limit) is why the
        // function's stream stopped, not the other way round.
        pumped?;
        match answered {
            Ok(Answered::Streamed) => Ok(()),
            Ok(Answered::Whole(response)) => out.whole(response),
            // Node.js cannot take over: the request has been (or is being)
            // read, and part of the answer may be out.
            Err(InvokeError::Unsupported(what)) => Err(InvokeError::Function(format!(
                "{what}: a function deployed with stream=true runs only in the isolate, \
                 which cannot do this; deploy it without stream to have it fall back to Node.js"
            ))),
            Err(e) => Err(e),
        }
    }
}
