//! The js tier's engine: worker threads owning isolates, and dispatch.
//!
//! Each worker is an OS thread with a single-threaded Tokio runtime; an
//! invocation is a local task there, so one worker interleaves many
//! invocations while they wait on host calls. JS never runs on the node's
//! HTTP threads: a function that spins holds only its worker, until the
//! interrupt handler stops it at the deadline, and dispatch sends new work
//! to the least loaded worker (preferring one with an idle isolate of the
//! same version). Idle isolates are kept per worker, per version — never
//! shared across versions, functions or tenants — and dropped after the
//! keep-alive or beyond a per-worker count.
//!
//! Each worker also keeps a few *blank* isolates (Hydra's generic warm
//! pool, §3.4): runtime, context and prelude, no function. A version's
//! first invocation on a worker loads its code into one of them instead of
//! building an isolate from nothing (the prelude is most of that cost),
//! and the worker makes a new blank one when it next has nothing to run.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hearth_core::{FunctionVersion, InvokeError, Request, Response, Runtime, Tier};
use hearth_host::bundle::Bundle;
use hearth_host::{
    Compiled, DeployError, Engine, EngineStatus, HostCtx, Prepared, Sandbox, Source,
};
use hearth_store::{ArtifactStore, LogStream};
use tokio::sync::{mpsc, oneshot};

use crate::compile::{self, CompiledCode};
use crate::isolate::{Failure, Isolate};

/// Settings of the js tier.
#[derive(Debug, Clone)]
pub struct JsConfig {
    /// Where compiled bytecode is cached (`<data>/cache`).
    pub cache_dir: PathBuf,
    /// Worker threads running isolates.
    pub workers: usize,
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
        JsConfig {
            cache_dir,
            workers: (cores * 2).max(4),
            keep_alive: Duration::from_secs(300),
            max_idle_per_worker: 256,
            blank_per_worker: 1,
            max_response_bytes: 6 << 20,
        }
    }
}

struct Job {
    version: Arc<JsVersion>,
    /// In an isolate of its own, neither taken from nor kept among the
    /// version's idle ones (a replay).
    isolated: bool,
    req: Request,
    host: HostCtx,
    reply: oneshot::Sender<Result<Response, InvokeError>>,
}

struct Worker {
    tx: mpsc::UnboundedSender<Job>,
    /// Invocations assigned and not finished.
    load: AtomicUsize,
    idle: AtomicUsize,
    idle_bytes: AtomicU64,
    /// Blank isolates ready.
    blank: AtomicUsize,
}

struct Inner {
    config: JsConfig,
    cache_dir: PathBuf,
    workers: Vec<Arc<Worker>>,
}

/// The js tier. Cheap to clone.
#[derive(Clone)]
pub struct JsEngine(Arc<Inner>);

/// One version, ready to run: its bytecode and where its idle isolates are.
struct JsVersion {
    key: String,
    code: Arc<CompiledCode>,
    memory_mib: u32,
    /// Idle isolates of this version, per worker.
    idle_on: Vec<AtomicUsize>,
}

impl JsEngine {
    /// Starts the worker threads. Call inside the node's Tokio runtime:
    /// host calls run there.
    pub fn new(config: JsConfig) -> anyhow::Result<JsEngine> {
        let cache_dir = config.cache_dir.join("js-quickjs-0.14");
        std::fs::create_dir_all(&cache_dir)?;
        let io = tokio::runtime::Handle::current();
        let mut workers = Vec::new();
        for index in 0..config.workers.max(1) {
            let (tx, rx) = mpsc::unbounded_channel();
            let worker = Arc::new(Worker {
                tx,
                load: AtomicUsize::new(0),
                idle: AtomicUsize::new(0),
                idle_bytes: AtomicU64::new(0),
                blank: AtomicUsize::new(0),
            });
            let (w, io, cfg) = (worker.clone(), io.clone(), config.clone());
            std::thread::Builder::new()
                .name(format!("hearth-js-{index}"))
                .stack_size(16 << 20)
                .spawn(move || worker_main(index, w, rx, io, cfg))?;
            workers.push(worker);
        }
        Ok(JsEngine(Arc::new(Inner {
            config,
            cache_dir,
            workers,
        })))
    }

    /// The least loaded worker, preferring one with an idle isolate of `v`.
    fn pick(&self, v: &JsVersion) -> usize {
        (0..self.0.workers.len())
            .min_by_key(|&i| {
                let load = self.0.workers[i].load.load(Ordering::Relaxed);
                let cold = v.idle_on[i].load(Ordering::Relaxed) == 0;
                (load, cold)
            })
            .unwrap_or(0)
    }
}

#[async_trait]
impl Engine for JsEngine {
    fn tier(&self) -> Tier {
        Tier::Js
    }

    async fn compile(&self, runtime: Runtime, source: Source) -> Result<Compiled, DeployError> {
        let started = Instant::now();
        if runtime != Runtime::Js {
            return Err(DeployError::Invalid(format!(
                "the js tier runs JavaScript, not {runtime}"
            )));
        }
        let cache_dir = self.0.cache_dir.clone();
        tokio::task::spawn_blocking(move || {
            let bundle =
                Bundle::from_upload(Runtime::Js, source.file_name.as_deref(), &source.code)
                    .map_err(DeployError::Invalid)?;
            let entry = bundle
                .entry(Runtime::Js)
                .map_err(DeployError::NotAFunction)?;
            let artifact = bundle.to_tar();
            let hash = hearth_store::sha256_hex(&artifact);
            compile::load_or_compile(&cache_dir, &hash, &bundle, &entry)
                .map_err(DeployError::Invalid)?;
            Ok(Compiled {
                artifact,
                compile_ms: started.elapsed().as_millis() as u64,
            })
        })
        .await
        .map_err(|e| DeployError::Invalid(e.to_string()))?
    }

    async fn prepare(
        &self,
        version: &FunctionVersion,
        artifacts: &ArtifactStore,
    ) -> Result<Arc<dyn Prepared>, DeployError> {
        let bytes = artifacts
            .get(&version.artifact)
            .map_err(|e| DeployError::Load(e.to_string()))?;
        let (cache_dir, hash) = (self.0.cache_dir.clone(), version.artifact.clone());
        let code = tokio::task::spawn_blocking(move || {
            let bundle = Bundle::from_tar(&bytes)?;
            let entry = bundle.entry(Runtime::Js)?;
            compile::load_or_compile(&cache_dir, &hash, &bundle, &entry)
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
                code: Arc::new(code),
                memory_mib: version.spec.limits.memory_mib,
                idle_on: (0..self.0.workers.len())
                    .map(|_| AtomicUsize::new(0))
                    .collect(),
            }),
        }))
    }

    fn pool_free(&self) -> Vec<(&'static str, u64)> {
        let blank: usize = self
            .0
            .workers
            .iter()
            .map(|w| w.blank.load(Ordering::Relaxed))
            .sum();
        vec![("js_isolates", blank as u64)]
    }

    fn status(&self) -> EngineStatus {
        let w = &self.0.workers;
        let idle: usize = w.iter().map(|w| w.idle.load(Ordering::Relaxed)).sum();
        let blank: usize = w.iter().map(|w| w.blank.load(Ordering::Relaxed)).sum();
        let bytes: u64 = w.iter().map(|w| w.idle_bytes.load(Ordering::Relaxed)).sum();
        let running: usize = w.iter().map(|w| w.load.load(Ordering::Relaxed)).sum();
        EngineStatus {
            degraded: Vec::new(),
            details: serde_json::json!({
                "workers": w.len(),
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
}

/// A claim on an isolate: the invocation runs on a worker.
struct JsSandbox {
    engine: JsEngine,
    version: Arc<JsVersion>,
    isolated: bool,
}

#[async_trait]
impl Sandbox for JsSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        let i = self.engine.pick(&self.version);
        let worker = &self.engine.0.workers[i];
        let (reply, answer) = oneshot::channel();
        worker.load.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            version: self.version.clone(),
            isolated: self.isolated,
            // The worker is another thread: it gets its own copy.
            req: req.clone(),
            host,
            reply,
        };
        if worker.tx.send(job).is_err() {
            worker.load.fetch_sub(1, Ordering::Relaxed);
            return Err(InvokeError::Crashed("the js worker is gone".into()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(InvokeError::Crashed(
                "the js worker dropped the invocation".into(),
            ))
        })
    }
}

// ---------------------------------------------------------------- workers

struct Idle {
    isolate: Isolate,
    since: Instant,
    bytes: u64,
    version: Arc<JsVersion>,
}

type IdleMap = RefCell<HashMap<String, Vec<Idle>>>;

/// What one worker keeps between invocations.
#[derive(Default)]
struct Local {
    /// Isolates of versions, parked after an invocation.
    idle: IdleMap,
    /// Blank isolates, ready for any version.
    blanks: RefCell<Vec<Isolate>>,
    /// Woken when a blank isolate is taken.
    refill: tokio::sync::Notify,
    /// Woken when the worker's last running invocation finishes.
    quiet: tokio::sync::Notify,
}

fn worker_main(
    index: usize,
    me: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    io: tokio::runtime::Handle,
    config: JsConfig,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a worker runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let here: Rc<Local> = Rc::default();
        {
            let (here, me, keep) = (here.clone(), me.clone(), config.keep_alive);
            tokio::task::spawn_local(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    evict(&here.idle, &me, index, |i| i.since.elapsed() > keep);
                }
            });
        }
        tokio::task::spawn_local(refill_blanks(
            here.clone(),
            me.clone(),
            io.clone(),
            config.blank_per_worker,
        ));
        while let Some(job) = rx.recv().await {
            let (here, me, io, config) = (here.clone(), me.clone(), io.clone(), config.clone());
            tokio::task::spawn_local(async move {
                let result = run_job(
                    index,
                    &me,
                    &here,
                    io,
                    &config,
                    (job.version, job.isolated),
                    job.req,
                    job.host,
                )
                .await;
                if me.load.fetch_sub(1, Ordering::Relaxed) == 1 {
                    here.quiet.notify_waiters();
                }
                let _ = job.reply.send(result);
            });
        }
    });
}

/// Keeps `target` blank isolates on this worker, making them only while it
/// has no invocation to run, so a refill never delays one.
async fn refill_blanks(
    here: Rc<Local>,
    me: Arc<Worker>,
    io: tokio::runtime::Handle,
    target: usize,
) {
    loop {
        while here.blanks.borrow().len() < target {
            loop {
                // Made before the check, so a finish in between still wakes it.
                let quiet = here.quiet.notified();
                if me.load.load(Ordering::Relaxed) == 0 {
                    break;
                }
                quiet.await;
            }
            match Isolate::blank(io.clone()) {
                Ok(i) => {
                    here.blanks.borrow_mut().push(i);
                    me.blank.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    tracing::warn!("could not make a blank js isolate; the pool stays short");
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
        here.refill.notified().await;
    }
}

/// Drops idle isolates for which `expired` holds.
fn evict(idle: &IdleMap, me: &Worker, index: usize, expired: impl Fn(&Idle) -> bool) {
    let mut map = idle.borrow_mut();
    for list in map.values_mut() {
        list.retain(|i| {
            if expired(i) {
                i.version.idle_on[index].fetch_sub(1, Ordering::Relaxed);
                me.idle.fetch_sub(1, Ordering::Relaxed);
                me.idle_bytes.fetch_sub(i.bytes, Ordering::Relaxed);
                false
            } else {
                true
            }
        });
    }
    map.retain(|_, l| !l.is_empty());
}

#[allow(clippy::too_many_arguments)]
async fn run_job(
    index: usize,
    me: &Worker,
    here: &Local,
    io: tokio::runtime::Handle,
    config: &JsConfig,
    (version, isolated): (Arc<JsVersion>, bool),
    req: Request,
    host: HostCtx,
) -> Result<Response, InvokeError> {
    let idle = &here.idle;
    let warm = if isolated {
        None
    } else {
        idle.borrow_mut().get_mut(&version.key).and_then(Vec::pop)
    };
    let mut isolate = match warm {
        Some(i) => {
            version.idle_on[index].fetch_sub(1, Ordering::Relaxed);
            me.idle.fetch_sub(1, Ordering::Relaxed);
            me.idle_bytes.fetch_sub(i.bytes, Ordering::Relaxed);
            i.isolate
        }
        None => {
            let blank = here.blanks.borrow_mut().pop();
            let blank = match blank {
                Some(i) => {
                    me.blank.fetch_sub(1, Ordering::Relaxed);
                    here.refill.notify_one();
                    Ok(i)
                }
                None => Isolate::blank(io),
            };
            let loaded = match blank {
                Ok(i) => {
                    i.load(version.code.clone(), version.memory_mib, host.clone())
                        .await
                }
                Err(e) => Err(e),
            };
            match loaded {
                Ok(i) => i,
                Err(Failure::Invoke(e)) => return Err(e),
                Err(Failure::Load(first, text)) => {
                    host.log(LogStream::Stderr, "error", &text);
                    return Err(InvokeError::Function(first));
                }
            }
        }
    };
    let result = isolate.invoke(req, host, config.max_response_bytes).await;
    isolate.finish();
    // Kept only when its state is known good: a clean run or a plain
    // exception; never after a timeout, OOM or an unsupported request;
    // never an isolated one.
    if !isolated && matches!(result, Ok(_) | Err(InvokeError::Function(_))) {
        let bytes = isolate.memory_bytes();
        version.idle_on[index].fetch_add(1, Ordering::Relaxed);
        me.idle.fetch_add(1, Ordering::Relaxed);
        me.idle_bytes.fetch_add(bytes, Ordering::Relaxed);
        let parked = Idle {
            isolate,
            since: Instant::now(),
            bytes,
            version: version.clone(),
        };
        // The key is cloned only for a version's first idle isolate here.
        let mut map = idle.borrow_mut();
        match map.get_mut(&version.key) {
            Some(list) => list.push(parked),
            None => {
                map.insert(version.key.clone(), vec![parked]);
            }
        }
        drop(map);
        if me.idle.load(Ordering::Relaxed) > config.max_idle_per_worker {
            // Over the cap: drop the oldest idle isolate.
            let oldest = idle
                .borrow()
                .values()
                .flat_map(|l| l.iter().map(|i| i.since))
                .min();
            if let Some(t) = oldest {
                evict(idle, me, index, |i| i.since <= t);
            }
        }
    }
    result
}
