//! [`Node`]: deploy, resolve and invoke functions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use displaydoc::Display;
use hearth_core::{
    FunctionSpec, FunctionVersion, GatewayAttempt, InvocationId, InvokeError, Request, Response,
    Tier,
};
use hearth_host::{
    ArtifactSource, Compiled, DeployError, Engine, HostCtx, HostServices, InvocationMeta, Prepared,
    Source, Tape,
};
use hearth_record::Recorder;
use hearth_store::{ArtifactStore, FunctionMode, LogRecord, LogStream, Store, StoreError};
use opentelemetry::KeyValue;
use thiserror::Error;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::Metrics;
use crate::metrics::ErrorLabels;
use crate::share::Refused;
use crate::table::{FunctionTable, Pin, Target};

mod forwarded;
mod installed;
mod jit;
mod secrets;
mod streaming;
mod tapes;
pub use installed::CodeHeld;
use installed::InstalledCache;
pub use jit::{CompiledMode, JitConfig};
pub use streaming::Streaming;
pub use tapes::ReplayReport;

/// Settings of the invoker.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Invocations running at once; past it, 503 with Retry-After.
    pub max_concurrency: usize,
    pub max_timeout_ms: u64,
    pub max_memory_mib: u32,
    /// Fallbacks after which a JavaScript function is pinned to the process
    /// tier (until its next deploy).
    pub pin_after_fallbacks: u32,
    /// The colocation mode of tenants without their own, shared with the
    /// tiers' policy ([`crate::StoreColocation`]); a cluster node takes
    /// its gateway's at join.
    pub colocation: crate::DefaultColocation,
    /// Keep metric series labelled with tenants and functions (opt-in).
    pub per_function_metrics: bool,
    /// Invocations one tenant may have running at once ([`crate::share`]).
    pub max_concurrency_per_tenant: usize,
    /// Of those, how many may be working after their response
    /// (`ctx.waitUntil`, [`hearth_host::AfterResponse`]); past it the
    /// caller waits for the work.
    pub max_after_response_per_tenant: usize,
    /// Bytes of artifacts one tenant may keep deployed (every version of
    /// every function, each artifact once).
    pub max_code_bytes_per_tenant: u64,
    /// Bytes one invocation's request, and its response, may stream.
    pub max_stream_bytes: u64,
    /// Functions one tenant may have: what grows per function without
    /// code (aliases and their history, stats) is bounded in sum by it.
    pub max_functions_per_tenant: usize,
    /// Memory running invocations may reserve, the node's and each
    /// tenant's ([`crate::share`]).
    pub memory: crate::MemoryBudget,
    /// What functions' logs may hold ([`crate::logs`]).
    pub logs: crate::LogQuotas,
    /// When hot js functions are compiled from their traces; `None`:
    /// never (`docs/js-tier.md`, "Compiled from its traces").
    pub jit: Option<JitConfig>,
    /// The data directory's disk, watched ([`crate::disk`]); `None`: not
    /// watched (a node without a data directory of its own).
    pub disk: Option<crate::DiskConfig>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            max_concurrency: 1024,
            max_timeout_ms: 300_000,
            max_memory_mib: 512,
            pin_after_fallbacks: 3,
            colocation: crate::DefaultColocation::default(),
            per_function_metrics: false,
            max_concurrency_per_tenant: 768,
            max_after_response_per_tenant: 192,
            max_code_bytes_per_tenant: 1 << 30,
            max_stream_bytes: 4 << 30,
            max_functions_per_tenant: 1000,
            memory: crate::MemoryBudget {
                node_bytes: 16 << 30,
                tenant_bytes: 16 << 30,
            },
            logs: crate::LogQuotas::default(),
            jit: Some(JitConfig::default()),
            disk: None,
        }
    }
}

/// Why a node operation failed (not the function's own failure).
#[derive(Debug, Display, Error)]
pub enum NodeError {
    /// function {tenant}/{name} does not exist
    NotFound { tenant: String, name: String },
    /// {0}
    DiskFull(String),
    /// version {version} of {tenant}/{name} does not exist
    NoSuchVersion {
        tenant: String,
        name: String,
        version: u32,
    },
    /// {tenant}/{name} has no alias {alias:?}: `hearth promote {name} VERSION --alias {alias}` makes it (a function deployed with --no-promote has no `live` until promoted)
    NoSuchAlias {
        tenant: String,
        name: String,
        alias: String,
    },
    /// {0}
    Deploy(#[from] DeployError),
    /// {0}
    Invalid(String),
    /// {0}
    Conflict(String),
    /// runtime {0} is not available on this node yet
    RuntimeUnavailable(String),
    /// storage failed: {0}
    Store(#[from] StoreError),
    /// internal error: {0}
    Internal(String),
    /// {error}
    Refused {
        /// The refused invocation's id, as its answer names it.
        id: InvocationId,
        /// Why: the node's or its tenant's share is taken.
        error: InvokeError,
    },
    /// tenant {tenant} keeps {used} bytes of code and installed packages and this deploy adds {adding}, over its quota of {quota} bytes: delete functions it no longer needs (`hearth rm`), or ask the operator for more (--max-code-mib-per-tenant)
    CodeQuota {
        tenant: String,
        used: u64,
        adding: u64,
        quota: u64,
    },
}

/// Whether an invocation had to prepare its version first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartKind {
    Cold,
    Warm,
}

impl StartKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StartKind::Cold => "cold",
            StartKind::Warm => "warm",
        }
    }
}

/// A completed deploy.
#[derive(Debug, Clone)]
pub struct DeployOutcome {
    pub version: FunctionVersion,
    /// What the engines reported: phases, the lock, warnings (the
    /// artifact is the version's).
    pub compiled: Compiled,
}

/// A version ready to run ([`Node::ready`]): its code prepared in the tier
/// it runs in now.
pub struct Ready {
    prepared: Arc<dyn Prepared>,
    tier: Tier,
    start: StartKind,
}

impl Ready {
    /// Whether its tier takes bodies as streams
    /// ([`Node::invoke_streaming`]) rather than whole.
    pub fn streams(&self) -> bool {
        self.prepared.streams()
    }
}

/// `result`, unless the invocation went past its tape budget: then it
/// fails, whatever it answered (its tape is not the whole story, and the
/// caller should know).
/// The outcome of an invocation of `v` refused with `error` before it ran.
fn refused(v: &FunctionVersion, id: InvocationId, error: InvokeError) -> InvokeOutcome {
    InvokeOutcome {
        id,
        version: v.version,
        start: StartKind::Warm,
        duration: Duration::ZERO,
        result: Err(error),
        traceparent: None,
    }
}

fn within_tape_budget<T>(host: &HostCtx, result: Result<T, InvokeError>) -> Result<T, InvokeError> {
    match host.tape_budget_exceeded() {
        Some(limit_bytes) if result.is_ok() => Err(InvokeError::TapeBudgetExceeded { limit_bytes }),
        _ => result,
    }
}

/// An invocation let in ([`Node::admit`]).
struct Admitted {
    /// Its room, given back when it ends.
    _held: Room,
    id: InvocationId,
    started: Instant,
    /// When it started, if it gets a tape.
    taping: Option<i64>,
    meta: InvocationMeta,
    /// Where its response comes if it answers before it ends
    /// (`meta.answer`).
    answered: Option<tokio::sync::oneshot::Receiver<Response>>,
}

/// A node permit and the tenant's share (slots, memory reservation),
/// held by what runs a tenant's code, invocation or replay, until it ends.
pub(crate) struct Room {
    _permit: tokio::sync::OwnedSemaphorePermit,
    pub(crate) share: crate::share::Share,
}

/// What running an admitted invocation left: its answer, the tier that
/// gave it, the host it ran with (its tape and logs), and whether its
/// compiled answer is to be checked in the isolate.
struct Ran {
    result: Result<Response, InvokeError>,
    tier: Tier,
    host: HostCtx,
    check: Option<jit::CheckSlot>,
}

/// A finished invocation: the function's answer or why there is none.
#[derive(Debug)]
pub struct InvokeOutcome {
    pub id: InvocationId,
    pub version: u32,
    /// Whether it prepared its version first; for a
    /// [refusal](InvokeError::is_refusal), which started nothing, `Warm`.
    pub start: StartKind,
    pub duration: Duration,
    pub result: Result<Response, InvokeError>,
    /// Its span as a W3C `traceparent`, when the node exports traces: the
    /// caller gets it back.
    pub traceparent: Option<Box<str>>,
}

/// One Hearth node.
pub struct Node {
    store: Arc<dyn Store>,
    /// Shared with the engines, which read code from it as they prepare.
    artifacts: Arc<ArtifactStore>,
    engines: HashMap<Tier, Arc<dyn Engine>>,
    host: Arc<HostServices>,
    config: NodeConfig,
    /// Versions and their prepared code, filled on first use.
    table: FunctionTable,
    admission: Arc<Semaphore>,
    shares: crate::share::TenantShares,
    logs: crate::logs::LogWriter,
    metrics: Metrics,
    /// Fallback records of JavaScript functions (tenant → name → mode),
    /// read from the store on first use; forgotten on deploy and removal.
    /// Nested so that the per-invocation lookup borrows its keys.
    modes: parking_lot::Mutex<HashMap<String, HashMap<String, FunctionMode>>>,
    /// Where tapes go; `None` when recording is off.
    recorder: Option<Arc<Recorder>>,
    /// Where missing artifacts come from; `None`: nowhere (single node).
    artifact_source: Option<Arc<dyn ArtifactSource>>,
    /// Held from a deploy's quota check to its version.
    deploying: tokio::sync::Mutex<()>,
    /// Deploys compiling at once: half the cores (at least one), so a storm
    /// of deploys leaves the rest to invocations.
    compiling: Semaphore,
    /// Held (shared) by each deploy from its installs to its version, and
    /// (alone) by a sweep of installed packages, which must not take what a
    /// deploy installed before its version names it.
    installing: tokio::sync::RwLock<()>,
    /// A sweep of installed packages is asked for and has not started.
    sweep_wanted: std::sync::atomic::AtomicBool,
    /// What each stored version installed (by artifact, runtime and
    /// source builds), as read at most [`INSTALLED_FOR`] ago: counting a
    /// tenant's code (every `/v1/status`) reads its bundles at most that
    /// often. Emptied by each sweep.
    installed_cache: Arc<parking_lot::Mutex<InstalledCache>>,
    /// The compiled path of hot js functions; `None` when off, or when
    /// this node lacks the js or the wasm tier.
    jit: Option<Arc<jit::Jit>>,
    /// Each function's last hour, for the console.
    stats: crate::stats::Stats,
    /// Where invocations' spans go; unset when tracing is off.
    tracing: std::sync::OnceLock<crate::trace::Tracing>,
    /// The data directory's disk; `None` when not watched.
    disk: Option<Arc<crate::disk::Disk>>,
    /// Seals and opens tenants' secrets; `None`: this node keeps none.
    secrets: Option<Arc<crate::SecretBox>>,
    /// Invocations working after their response, per tenant.
    after: Arc<hearth_host::AfterResponse>,
    /// Invocations polled for long give way to short ones.
    long_runs: crate::long_runs::LongRuns,
}

impl Node {
    /// Must be called inside a Tokio runtime (it starts the log writer).
    pub fn new(
        store: Arc<dyn Store>,
        artifacts: ArtifactStore,
        engines: Vec<Arc<dyn Engine>>,
        host: Arc<HostServices>,
        config: NodeConfig,
    ) -> Self {
        // Lines waiting for the store hold at most 1/32 of the memory the
        // node offers invocations (16–256 MiB).
        let log_queue = (config.memory.node_bytes / 32).clamp(16 << 20, 256 << 20);
        let logs = crate::logs::spawn_writer(store.clone(), log_queue as usize);
        crate::logs::spawn_sweeper(store.clone(), config.logs);
        let disk = config.disk.clone().map(crate::disk::Disk::open);
        if let Some(d) = &disk {
            d.spawn_watcher();
            // Functions' KV writes grow the store as the API's do.
            let watched = d.clone();
            let _ = host.growth.set(Box::new(move || watched.admit_growth()));
        }
        let metrics = Metrics::new(config.per_function_metrics);
        if let Some(d) = &disk {
            let (free, full) = (d.clone(), d.clone());
            metrics.read_at_scrape(
                "disk_free_bytes",
                "Bytes free on the data directory's file system, as last read",
                move || free.free_bytes() as i64,
            );
            metrics.read_at_scrape(
                "disk_full",
                "1 while the data directory's disk is full (--min-free-disk-mib)",
                move || i64::from(full.full()),
            );
        }
        let cpu = hearth_host::cpu::CpuShares::new();
        let shares = crate::share::TenantShares::new(
            config.max_concurrency_per_tenant,
            config.memory,
            cpu.clone(),
        );
        metrics.read_at_scrape(
            "tenants_over_cpu_share",
            "Tenants over their CPU share in the last window (1.5x the mean of the tenants that ran); their code runs at a lower priority",
            move || cpu.last_window().over_share as i64,
        );
        let reserved = shares.node_memory_counter();
        metrics.read_at_scrape(
            "memory_reserved_bytes",
            "Memory reserved by running invocations (their limits and tape budgets), against --capacity-mib",
            move || reserved.load(std::sync::atomic::Ordering::Relaxed) as i64,
        );
        let outbound = host.outbound.clone();
        metrics.read_at_scrape(
            "outbound_connections",
            "Outbound connections functions' fetches hold open now",
            move || outbound.in_use() as i64,
        );
        let services = host.clone();
        metrics.read_at_scrape(
            "log_bytes_dropped",
            "Bytes of log lines dropped since start because a tenant logged faster than --log-kib-per-sec-per-tenant",
            move || services.log_rates.dropped_bytes() as i64,
        );
        let capacity = config.memory.node_bytes as i64;
        metrics.read_at_scrape(
            "memory_capacity_bytes",
            "Memory this node offers running invocations (--capacity-mib)",
            move || capacity,
        );
        let after = hearth_host::AfterResponse::new(config.max_after_response_per_tenant.max(1));
        let working = after.clone();
        metrics.read_at_scrape(
            "invocations_after_response",
            "Invocations that answered and still work (ctx.waitUntil), within their timeout",
            move || working.total() as i64,
        );
        let engines: HashMap<Tier, Arc<dyn Engine>> =
            engines.into_iter().map(|e| (e.tier(), e)).collect();
        let jit = config
            .jit
            .clone()
            .filter(|_| engines.contains_key(&Tier::Js) && engines.contains_key(&Tier::Wasm))
            .map(|c| Arc::new(jit::Jit::new(c, metrics.compiled_checks.clone())));
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        let long_runs = crate::long_runs::LongRuns::new(workers, crate::long_runs::LONG_AFTER);
        if !long_runs.lowers_threads() {
            tracing::warn!(
                "this process may not raise a thread's priority again (no CAP_SYS_NICE or RLIMIT_NICE): \
                 long invocations are not run at a lower priority, and short ones wait longer behind them"
            );
        }
        Node {
            long_runs,
            store,
            artifacts: Arc::new(artifacts),
            engines,
            host,
            admission: Arc::new(Semaphore::new(config.max_concurrency)),
            shares,
            config,
            table: FunctionTable::default(),
            logs,
            metrics,
            modes: Default::default(),
            recorder: None,
            artifact_source: None,
            deploying: tokio::sync::Mutex::new(()),
            compiling: Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            ),
            installing: tokio::sync::RwLock::new(()),
            sweep_wanted: Default::default(),
            installed_cache: Default::default(),
            jit,
            stats: Default::default(),
            tracing: std::sync::OnceLock::new(),
            disk,
            secrets: None,
            after,
        }
    }

    /// `Err` when the data directory's disk is full: what would grow it
    /// (a deploy, a tenant, a KV write) is refused, with what to do.
    pub fn admit_growth(&self) -> Result<(), NodeError> {
        match &self.disk {
            Some(d) => d.admit_growth().map_err(NodeError::DiskFull),
            None => Ok(()),
        }
    }

    /// Before a delete: on a full disk, the reserve kept for deletes is
    /// given back so that the delete can be written.
    pub fn make_room_to_delete(&self) {
        if let Some(d) = &self.disk {
            d.make_room_to_delete();
        }
    }

    /// Why this node should not be given work now, if its disk is full.
    pub fn disk_full(&self) -> Option<String> {
        self.disk.as_ref().and_then(|d| d.admit_growth().err())
    }

    /// Each function's invocations, errors and latency over the last hour.
    pub fn stats(&self) -> &crate::stats::Stats {
        &self.stats
    }

    /// Exports every invocation's span from now on (once: a second call
    /// is ignored). Set after the node has an address to name itself by.
    pub fn start_tracing(&self, tracing: crate::trace::Tracing) {
        let _ = self.tracing.set(tracing);
    }

    /// The tracer, when spans are exported.
    pub fn tracing(&self) -> Option<&crate::trace::Tracing> {
        self.tracing.get()
    }

    /// Stops exporting spans, flushing those queued.
    pub fn stop_tracing(&self) {
        if let Some(t) = self.tracing.get() {
            t.shutdown();
        }
    }

    /// Fetches artifacts this node does not have from `source`.
    pub fn with_artifact_source(mut self, source: Arc<dyn ArtifactSource>) -> Self {
        self.artifact_source = Some(source);
        self
    }

    /// Waits until every log line of invocations that finished on this
    /// node is in the store (a read right after an invocation sees them).
    pub async fn flush_logs(&self) {
        self.logs.flush().await;
    }

    /// Bytes of KV one tenant may keep.
    pub fn kv_max_tenant_bytes(&self) -> u64 {
        self.host.limits.kv_max_tenant_bytes
    }

    /// The limits a function's own KV calls have: key bytes, value bytes,
    /// keys one list returns.
    pub fn kv_limits(&self) -> (usize, usize, u32) {
        let l = &self.host.limits;
        (l.kv_max_key_bytes, l.kv_max_value_bytes, l.kv_max_list)
    }

    /// Bytes one invocation's request, and its response, may stream.
    pub fn max_stream_bytes(&self) -> u64 {
        self.config.max_stream_bytes
    }

    /// Bytes of code one tenant may keep deployed.
    pub fn max_code_bytes_per_tenant(&self) -> u64 {
        self.config.max_code_bytes_per_tenant
    }

    /// `tenant`'s invocations running now, against its share.
    pub fn tenant_in_flight(&self, tenant: &str) -> (usize, usize) {
        (self.shares.running(tenant), self.shares.max())
    }

    /// Memory `tenant`'s running invocations reserved, and its share of
    /// the node's, in bytes.
    pub fn tenant_memory(&self, tenant: &str) -> (u64, u64) {
        let budget = self.shares.memory();
        (self.shares.tenant_memory(tenant), budget.tenant_bytes)
    }

    /// Invocations running now.
    pub fn in_flight(&self) -> usize {
        self.config.max_concurrency - self.admission.available_permits()
    }

    /// Every tier's warm pools: instances ready for a new invocation, by
    /// kind (`wasm_slots`, `node_processes`, `python_processes`, `sandbox_roots`,
    /// `js_isolates`).
    pub fn pool_free(&self) -> std::collections::BTreeMap<String, u64> {
        self.engines
            .values()
            .flat_map(|e| e.pool_free())
            .map(|(kind, n)| (kind.to_string(), n))
            .collect()
    }

    /// Invocations this node ran since it started, by mode.
    pub fn invocations_by_mode(&self) -> hearth_core::ByMode {
        self.metrics.invocations_by_mode()
    }

    /// Functions this node has code prepared for, as (tenant, name).
    pub fn loaded(&self) -> Vec<(String, String)> {
        self.table.loaded()
    }

    /// Every so often, drops the prepared code of versions unused for
    /// `keep_alive` (their memory goes back; the next invocation is a cold
    /// start). Stops when the node is dropped.
    pub fn spawn_prepared_sweeper(self: &Arc<Self>, keep_alive: std::time::Duration) {
        let node = Arc::downgrade(self);
        let every = (keep_alive / 2).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(node) = node.upgrade() else { return };
                let dropped = node.table.sweep(keep_alive);
                if dropped > 0 {
                    tracing::debug!(dropped, "idle prepared code dropped");
                }
                let dropped = node.jit.as_ref().map_or(0, |jit| {
                    jit.sweep(|tenant, name, version| node.table.prepared(tenant, name, version))
                });
                if dropped > 0 {
                    tracing::debug!(dropped, "idle compiled js dropped");
                }
            }
        });
    }

    /// Makes sure `hash` is in the local artifact store, fetching it from
    /// the artifact source if there is one.
    async fn ensure_artifact(&self, hash: &str) -> Result<(), NodeError> {
        let Some(source) = &self.artifact_source else {
            return Ok(());
        };
        if self.artifacts.contains(hash) {
            return Ok(());
        }
        let bytes = source
            .fetch(hash)
            .await
            .map_err(|e| NodeError::Internal(format!("failed to fetch artifact {hash}: {e}")))?;
        let artifacts = self.artifacts.clone();
        let stored = tokio::task::spawn_blocking(move || artifacts.put(&bytes))
            .await
            .map_err(|e| NodeError::Internal(e.to_string()))??;
        if stored != hash {
            return Err(NodeError::Internal(format!(
                "artifact {hash} fetched from the cluster hashes to {stored}"
            )));
        }
        Ok(())
    }

    /// Records invocations with `recorder` (each function's sampling rate
    /// applies).
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.metrics.count_tapes_of(recorder.clone());
        self.recorder = Some(recorder);
        self
    }

    /// Keeps tenants' secrets sealed with `secrets` (without it, setting
    /// or binding one is refused).
    pub fn with_secrets(mut self, secrets: crate::SecretBox) -> Self {
        self.secrets = Some(Arc::new(secrets));
        self
    }

    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.as_ref()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The index of this node's tapes, if it records.
    pub fn tape_index(&self) -> Option<Arc<dyn hearth_store::TapeIndex>> {
        self.recorder.as_ref().map(|r| r.archive().index().clone())
    }

    /// This node's code by hash (a gateway serves it to its nodes).
    pub fn artifacts(&self) -> &ArtifactStore {
        &self.artifacts
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The engine a function runs in: the first of its runtime's tiers
    /// this node has (JavaScript runs in the process tier until a node has
    /// the isolate tier).
    fn engine_for(&self, spec: &FunctionSpec) -> Result<&Arc<dyn Engine>, NodeError> {
        spec.runtime
            .tiers()
            .iter()
            .find_map(|t| self.engines.get(t))
            .ok_or_else(|| NodeError::RuntimeUnavailable(spec.runtime.to_string()))
    }

    /// The colocation mode of tenants without their own.
    pub fn default_colocation(&self) -> hearth_core::Colocation {
        self.config.colocation.get()
    }

    /// Takes the cluster's default mode (a node's gateway's): it applies
    /// from the next runtime a tier starts.
    pub fn set_default_colocation(&self, mode: hearth_core::Colocation) {
        let was = self.config.colocation.get();
        if was != mode {
            tracing::info!(
                was = was.as_str(),
                now = mode.as_str(),
                "colocation mode set by the cluster"
            );
            self.config.colocation.set(mode);
        }
    }

    /// What this node is doing and what it cannot enforce, per tier.
    pub fn status(&self) -> crate::status::NodeStatus {
        use crate::status::{CpuShare, LongRuns, MemoryStatus, NodeStatus, RecordingStatus};
        let mut degraded = Vec::new();
        let mut tiers = std::collections::BTreeMap::new();
        for (tier, engine) in &self.engines {
            let s = engine.status();
            degraded.extend(s.degraded.iter().map(|d| format!("{}: {d}", tier.as_str())));
            tiers.insert(tier.as_str().to_string(), s);
        }
        let recording = self.recorder.as_ref().map(|r| {
            let s = r.stats();
            let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            RecordingStatus {
                durability: format!("{:?}", r.durability()).to_lowercase(),
                tapes_written: n(&s.tapes),
                bytes_written: n(&s.bytes),
                dropped: n(&s.dropped),
                expired: n(&s.expired),
                queued_bytes: s.queued.get().1,
                disk_bytes: r.archive().disk_bytes(),
                damaged_blocks: r.archive().damaged_blocks() as u64,
            }
        });
        if !self.long_runs.lowers_threads() {
            degraded.push(
                "node: long invocations and tenants over their CPU share run at the priority of others (no CAP_SYS_NICE or RLIMIT_NICE to raise a thread again)".into(),
            );
        }
        NodeStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            recording,
            in_flight: Some(self.in_flight()),
            max_concurrency: self.config.max_concurrency,
            max_concurrency_per_tenant: self.shares.max(),
            memory: Some(MemoryStatus {
                reserved_mib: self.shares.node_memory() >> 20,
                capacity_mib: self.shares.memory().node_bytes >> 20,
                capacity_mib_per_tenant: self.shares.memory().tenant_bytes >> 20,
            }),
            colocation: self.config.colocation.get(),
            long_runs: LongRuns {
                lane: self.long_runs.lane_size(),
                lowered: self.long_runs.lowers_threads(),
            },
            cpu_share: Some(CpuShare {
                window_ms: hearth_host::cpu::WINDOW.as_millis() as u64,
                last_window: self.shares.cpu_window(),
                lowered: self.long_runs.lowers_threads(),
            }),
            degraded,
            disk: self.disk.as_ref().map(|d| d.status()),
            // What is wrong with the node now (not what it cannot enforce,
            // which is `degraded`).
            faults: Some(self.disk_full().into_iter().collect()),
            tiers,
        }
    }

    /// Validates and compiles `code`, stores it, and records a new version.
    pub async fn deploy(
        self: &Arc<Self>,
        tenant: &str,
        name: &str,
        source: Source,
        spec: FunctionSpec,
        promote: bool,
    ) -> Result<DeployOutcome, NodeError> {
        hearth_core::validate_function_name(name).map_err(|e| NodeError::Invalid(e.to_string()))?;
        self.admit_growth()?;
        let limits = spec.limits;
        if limits.memory_mib == 0 || limits.memory_mib > self.config.max_memory_mib {
            return Err(NodeError::Invalid(format!(
                "memory limit must be 1..={} MiB, not {}",
                self.config.max_memory_mib, limits.memory_mib
            )));
        }
        if limits.timeout_ms == 0 || limits.timeout_ms > self.config.max_timeout_ms {
            return Err(NodeError::Invalid(format!(
                "timeout must be 1..={} ms, not {}",
                self.config.max_timeout_ms, limits.timeout_ms
            )));
        }
        let tape_max = self.host.limits.tape_max_bytes;
        if let Some(b) = spec.record.max_tape_bytes
            && (b == 0 || b > tape_max)
        {
            return Err(NodeError::Invalid(format!(
                "tape budget must be 1..={tape_max} bytes (this node's --max-tape-bytes), not {b}"
            )));
        }
        let budget = self.shares.memory();
        let one = (u64::from(limits.memory_mib) << 20)
            + spec.record.max_tape_bytes.unwrap_or(tape_max) as u64;
        if one > budget.tenant_bytes.min(budget.node_bytes) {
            return Err(NodeError::Invalid(format!(
                "one invocation would reserve {} MiB (its memory limit and tape budget), more than this \
                 node lets a tenant's running invocations hold ({} MiB, --capacity-mib-per-tenant) \
                 or offers in all ({} MiB, --capacity-mib): lower memory_mib",
                one >> 20,
                budget.tenant_bytes >> 20,
                budget.node_bytes >> 20
            )));
        }
        if !self.host.limits.private_egress
            && let Some(h) = spec
                .allowed_hosts
                .iter()
                .find(|h| hearth_host::is_internal_host(h))
        {
            return Err(NodeError::Invalid(format!(
                "allow_host {h:?} is this machine or a private or link-local address, which \
                 functions may not reach; an operator who wants them to starts Hearth with \
                 --allow-private-egress true"
            )));
        }
        // A NUL would cut a variable short inside the sandbox, and `=` in
        // a name would make it another variable.
        if let Some((k, _)) = spec
            .env
            .iter()
            .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return Err(NodeError::Invalid(format!(
                "environment variable {k:?}: names must be non-empty without '=' or NUL, values without NUL"
            )));
        }
        self.check_bindings(tenant, &spec).await?;
        // Before the work of compiling, and again under the deploy lock
        // (two deploys of new names may both have passed this one).
        self.admit_function(tenant, name).await?;
        let _installing = self.installing.read().await;
        let compiling = self
            .compiling
            .acquire()
            .await
            .map_err(|e| NodeError::Internal(e.to_string()))?;
        let mut compiled = self.compile(tenant, name, &spec, source).await?;
        drop(compiling);
        // One deploy at a time from the quota check to the version, so two
        // cannot both fit in what is left.
        let _quota = self.deploying.lock().await;
        self.admit_function(tenant, name).await?;
        let artifact = bytes::Bytes::from(std::mem::take(&mut compiled.artifact));
        let hash = hearth_store::sha256_hex(&artifact);
        let (used, held) = self.code_bytes(tenant).await?;
        let mut adding = if held.artifacts.contains(&hash) {
            0
        } else {
            artifact.len() as u64
        };
        // Packages the deploy installed that none of the tenant's versions
        // had: they count as code (installed before this check, they are
        // removed again by the next sweep if the deploy is refused).
        adding += self
            .installed(&spec, artifact.clone())
            .await
            .into_iter()
            .filter(|(dir, _)| !held.packages.contains(dir))
            .map(|(_, bytes)| bytes)
            .sum::<u64>();
        let quota = self.config.max_code_bytes_per_tenant;
        if adding > 0 && used + adding > quota {
            // What this deploy installed goes once it has let go.
            self.sweep_installed();
            return Err(NodeError::CodeQuota {
                tenant: tenant.to_string(),
                used,
                adding,
                quota,
            });
        }
        // The artifact is durable before the registry names it, so a crash
        // between the two leaves an unreferenced file, never a dangling version.
        let artifacts = self.artifacts.clone();
        let bytes = artifact.clone();
        let hash = tokio::task::spawn_blocking(move || {
            let _lowered = hearth_host::priority::GivingWay::new();
            artifacts.put(&bytes)
        })
        .await
        .map_err(|e| NodeError::Internal(e.to_string()))??;
        if let Some(shared) = &self.artifact_source {
            shared.publish(&hash, artifact).await.map_err(|e| {
                NodeError::Internal(format!("failed to publish artifact {hash}: {e}"))
            })?;
        }
        let version = self
            .store
            .create_version(tenant, name, &hash, &spec, promote)
            .await?;
        let alias = if promote {
            self.table.forget_aliases(Some((tenant, name)));
            let live = Target {
                version: version.version,
                split: None,
            };
            Some((hearth_store::LIVE, live))
        } else {
            None
        };
        self.table
            .insert(Arc::new(version.clone()), alias, self.table.generation());
        self.forget_mode(tenant, name);
        if let Some(jit) = &self.jit {
            jit.forget(tenant, name);
        }
        self.metrics.deploys.inc();
        Ok(DeployOutcome { version, compiled })
    }

    /// Compiles `source` in every tier of its runtime this node has, in
    /// order: the first tier's errors are the ones a user sees, and a
    /// fallback tier must be able to run what the first one may hand it
    /// (JavaScript's packages are resolved and installed by the process
    /// tier at deploy, not at the first fallback). What a later tier adds
    /// to the artifact (the lock) is compiled by the first tier again, so
    /// what it cached is what the version holds.
    async fn compile(
        &self,
        tenant: &str,
        name: &str,
        spec: &FunctionSpec,
        source: Source,
    ) -> Result<Compiled, NodeError> {
        let first = self.engine_for(spec)?;
        let span = || tracing::info_span!("deploy", tenant, function = name);
        let file_name = source.file_name.clone();
        let mut all = first.compile(spec, source).instrument(span()).await?;
        let later = spec
            .runtime
            .tiers()
            .iter()
            .skip(1)
            .filter_map(|t| self.engines.get(t));
        for engine in later {
            let artifact = Source::artifact(file_name.clone(), all.artifact.clone());
            // Whatever compiling logs (package installs) names whose it is.
            let compiled = engine.compile(spec, artifact).instrument(span()).await?;
            all.compile_ms += compiled.compile_ms;
            all.install_ms += compiled.install_ms;
            all.packages.extend(compiled.packages);
            all.warnings.extend(compiled.warnings);
            if compiled.artifact != all.artifact {
                let again = Source::artifact(file_name.clone(), compiled.artifact);
                let recompiled = first.compile(spec, again).instrument(span()).await?;
                all.compile_ms += recompiled.compile_ms;
                all.artifact = recompiled.artifact;
            }
        }
        Ok(all)
    }

    /// Removes a function and everything of it. False if it did not exist.
    pub async fn remove(self: &Arc<Self>, tenant: &str, name: &str) -> Result<bool, NodeError> {
        self.make_room_to_delete();
        let existed = self.store.delete_function(tenant, name).await?;
        self.table.remove(tenant, name);
        // What its invocations still do after their response stops.
        self.after.cut(tenant, name);
        self.forget_mode(tenant, name);
        self.stats.forget(tenant, name);
        self.metrics.forget_function(tenant, name);
        if let Some(jit) = &self.jit {
            jit.forget_removed(tenant, name);
        }
        if existed {
            self.sweep_installed();
        }
        Ok(existed)
    }

    /// The version a request names: the live one, an alias's, or a
    /// pinned one (an alias that splits chooses at random).
    pub async fn resolve<'p>(
        &self,
        tenant: &str,
        name: &str,
        pin: impl Into<Pin<'p>>,
    ) -> Result<Arc<FunctionVersion>, NodeError> {
        let (pin, draw) = (pin.into(), random_draw());
        if let Some(v) = self.table.get(tenant, name, pin, draw) {
            return Ok(v);
        }
        self.resolve_from_store(tenant, name, pin, draw).await
    }

    /// The version the node holds in memory, if it does (no store query);
    /// `draw` (0–99) chooses where an alias splits.
    pub fn resolve_held(
        &self,
        tenant: &str,
        name: &str,
        pin: Pin<'_>,
        draw: u8,
    ) -> Option<Arc<FunctionVersion>> {
        self.table.get(tenant, name, pin, draw)
    }

    /// [`resolve`](Self::resolve) past the function table: always one
    /// store query. For a caller who may not learn whether a function
    /// exists, a function the node holds costs that query as a missing one
    /// does (`hearth-api`'s `visible_function`).
    pub async fn resolve_from_store(
        &self,
        tenant: &str,
        name: &str,
        pin: Pin<'_>,
        draw: u8,
    ) -> Result<Arc<FunctionVersion>, NodeError> {
        let generation = self.table.generation();
        let (version, alias) = match pin {
            Pin::Version(v) => (Some(v), None),
            Pin::Alias(alias) => match self.store.alias(tenant, name, alias).await? {
                Some(a) => {
                    let target = Target {
                        version: a.version,
                        split: a.split,
                    };
                    (Some(target.choose(draw)), Some((alias, target)))
                }
                None => (None, None),
            },
        };
        let found = match version {
            Some(v) => self.store.get_version(tenant, name, Some(v)).await?,
            None => None,
        };
        let Some(found) = found else {
            return Err(self.not_found(tenant, name, pin).await);
        };
        let found = Arc::new(found);
        self.table.insert(found.clone(), alias, generation);
        Ok(found)
    }

    /// Why `pin` names nothing: the function does not exist, or it has no
    /// such version, or no such alias (a function deployed only without
    /// promotion has no `live`).
    async fn not_found(&self, tenant: &str, name: &str, pin: Pin<'_>) -> NodeError {
        let missing = || NodeError::NotFound {
            tenant: tenant.into(),
            name: name.into(),
        };
        match pin {
            Pin::Version(version) => NodeError::NoSuchVersion {
                tenant: tenant.into(),
                name: name.into(),
                version,
            },
            Pin::Alias(alias) => match self.store.list_versions(tenant, name).await {
                Ok(versions) if !versions.is_empty() => NodeError::NoSuchAlias {
                    tenant: tenant.into(),
                    name: name.into(),
                    alias: alias.into(),
                },
                _ => missing(),
            },
        }
    }

    /// Points `alias` of tenant/name at `version`, with `split` of its
    /// calls to another version if given (`hearth promote`, `hearth split`).
    pub async fn promote(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
        version: u32,
        split: Option<hearth_store::Split>,
    ) -> Result<hearth_store::AliasMove, NodeError> {
        hearth_core::validate_alias_name(alias).map_err(|e| NodeError::Invalid(e.to_string()))?;
        let moved = self
            .store
            .set_alias(tenant, name, alias, version, split)
            .await?;
        self.table.forget_aliases(Some((tenant, name)));
        Ok(moved)
    }

    /// Refuses a deploy that would give `tenant` a function past
    /// [`NodeConfig::max_functions_per_tenant`]; a new version of one it
    /// has always passes.
    async fn admit_function(&self, tenant: &str, name: &str) -> Result<(), NodeError> {
        let functions = self.store.list_functions(tenant).await?;
        let max = self.config.max_functions_per_tenant;
        if functions.len() >= max && !functions.iter().any(|f| f.name == name) {
            return Err(NodeError::Conflict(format!(
                "tenant {tenant} has {} functions, the most it may (--max-functions-per-tenant \
                 {max}): remove one it no longer needs (`hearth rm NAME`), or deploy a new \
                 version of one it has",
                functions.len()
            )));
        }
        Ok(())
    }

    /// Removes `alias` of tenant/name and its history (not `live`).
    pub async fn remove_alias(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<bool, NodeError> {
        let removed = self.store.remove_alias(tenant, name, alias).await?;
        self.table.forget_aliases(Some((tenant, name)));
        Ok(removed)
    }

    /// Points `alias` of tenant/name back where it was before its last
    /// move (`hearth rollback`).
    pub async fn roll_back(
        &self,
        tenant: &str,
        name: &str,
        alias: &str,
    ) -> Result<hearth_store::AliasMove, NodeError> {
        let moved = self.store.rollback_alias(tenant, name, alias).await?;
        self.table.forget_aliases(Some((tenant, name)));
        Ok(moved)
    }

    /// The prepared code of `v`, preparing it (once, even under concurrent
    /// callers) if needed, unless `may_prepare` says no first. Also says
    /// whether this call did the preparing.
    async fn prepared(
        &self,
        v: &FunctionVersion,
        tier: Tier,
        may_prepare: impl FnOnce() -> Result<(), NodeError>,
    ) -> Result<(Arc<dyn Prepared>, StartKind), NodeError> {
        let slots = self.table.slot(v);
        slots.touch();
        let slot = slots.get(tier);
        if let Some(p) = slot.get() {
            return Ok((p.clone(), StartKind::Warm));
        }
        may_prepare()?;
        let mut start = StartKind::Warm;
        let prepared = slot
            .get_or_try_init(|| async {
                start = StartKind::Cold;
                self.metrics.prepared(tier);
                let engine = self
                    .engines
                    .get(&tier)
                    .ok_or_else(|| NodeError::RuntimeUnavailable(v.spec.runtime.to_string()))?;
                self.ensure_artifact(&v.artifact).await?;
                let span = tracing::info_span!(
                    "prepare",
                    tenant = v.tenant,
                    function = v.name,
                    version = v.version
                );
                let code: Arc<dyn hearth_host::Artifacts> = self.artifacts.clone();
                // A version that binds secrets is prepared with their
                // values now stored in its environment.
                let with_secrets = self.with_secret_values(v).await?;
                engine
                    .prepare(with_secrets.as_ref().unwrap_or(v), &code)
                    .instrument(span)
                    .await
                    .map_err(NodeError::from)
            })
            .await?;
        Ok((prepared.clone(), start))
    }

    /// Makes `v` ready to run: its code prepared in the tier it runs in now
    /// (a cold start happens here). A version not prepared yet is prepared
    /// only if the node would [admit](Self::admit) an invocation of it
    /// now: at the node's or its tenant's limit it is refused
    /// ([`NodeError::Refused`]) before anything is installed or compiled.
    pub async fn ready(
        &self,
        v: &FunctionVersion,
        forwarded: Option<GatewayAttempt>,
    ) -> Result<Ready, NodeError> {
        let tier = self.tier_for(v).await?;
        let admissible = || {
            self.would_admit(v).map_err(|error| {
                let id = forwarded.map_or_else(InvocationId::new, |f| f.id);
                self.refuse(v, id, &error);
                NodeError::Refused { id, error }
            })
        };
        let (prepared, start) = self.prepared(v, tier, admissible).await?;
        Ok(Ready {
            prepared,
            tier,
            start,
        })
    }

    /// Runs one invocation of `v` with its request body whole. Node-level
    /// failures (a version that will not load) are `Err`; the function's
    /// own failures are in the outcome.
    ///
    /// `forwarded` is set when a gateway sent it: the invocation then keeps
    /// the gateway's id, a first attempt journals its KV and HTTP answers,
    /// and a retry is answered from that journal (see
    /// [`HostCtx::journaling`]).
    pub async fn invoke(
        self: &Arc<Self>,
        v: &Arc<FunctionVersion>,
        req: Request,
        forwarded: Option<GatewayAttempt>,
    ) -> Result<InvokeOutcome, NodeError> {
        let ready = match self.ready(v, forwarded).await {
            Err(NodeError::Refused { id, error }) => return Ok(refused(v, id, error)),
            ready => ready?,
        };
        self.invoke_ready(v, ready, req, forwarded).await
    }

    /// [`invoke`](Self::invoke) of a version already [`ready`](Self::ready):
    /// the invocation pipeline (`docs/architecture.md`, "The request
    /// path"). [`invoke_streaming`](Self::invoke_streaming) shares its
    /// steps but the run.
    ///
    /// An invocation that answers before it ends (work after its
    /// response, [`hearth_host::Answer`]) is answered then: the rest of
    /// it goes on in a task of its own, holding its room, and is counted
    /// and taped when it ends.
    pub async fn invoke_ready(
        self: &Arc<Self>,
        v: &Arc<FunctionVersion>,
        ready: Ready,
        req: Request,
        forwarded: Option<GatewayAttempt>,
    ) -> Result<InvokeOutcome, NodeError> {
        // The tiers that run JavaScript and Python may answer early.
        let early = matches!(ready.tier, Tier::Js | Tier::Process);
        // Admitted (the node's permit, the tenant's share), or refused.
        let (mut admitted, host) = match self.begin(v, forwarded, &req, early).await {
            Ok(begun) => begun,
            Err(refused) => return Ok(refused),
        };
        let Some(mut answered) = admitted.answered.take() else {
            return Ok(self
                .run_admitted(v, ready, req, forwarded, (admitted, host))
                .await);
        };
        let (id, started, start) = (admitted.id, admitted.started, ready.start);
        let traceparent = admitted
            .meta
            .trace
            .as_ref()
            .map(|t| hearth_host::trace::traceparent(&t.span_context()).into_boxed_str());
        let node = self.clone();
        let version = v.clone();
        let mut invocation = Box::pin(async move {
            node.run_admitted(&version, ready, req, forwarded, (admitted, host))
                .await
        });
        tokio::select! {
            biased;
            outcome = &mut invocation => Ok(outcome),
            Ok(response) = &mut answered => {
                tokio::spawn(invocation);
                Ok(InvokeOutcome {
                    id,
                    version: v.version,
                    start,
                    duration: started.elapsed(),
                    result: Ok(response),
                    traceparent,
                })
            }
        }
    }

    /// Runs an admitted invocation to its end: the rest of
    /// [`invoke_ready`](Self::invoke_ready).
    async fn run_admitted(
        &self,
        v: &Arc<FunctionVersion>,
        ready: Ready,
        req: Request,
        forwarded: Option<GatewayAttempt>,
        (admitted, host): (Admitted, HostCtx),
    ) -> InvokeOutcome {
        let Ready {
            prepared,
            tier,
            start,
        } = ready;
        // Run: in its tier, or compiled or traced (`node/jit.rs`).
        let mut ran = self
            .run_routed(v, &prepared, tier, &req, host, &admitted)
            .await;
        // What the isolate cannot run runs again in the process tier.
        let fallback = v.spec.runtime.tiers().get(1).copied();
        if let (Err(InvokeError::Unsupported(why)), Some(to), Tier::Js) =
            (&ran.result, fallback, ran.tier)
        {
            let why = why.clone();
            ran = self
                .fall_back(v, to, why, &req, ran.host, &admitted.meta)
                .await;
        }
        self.end_journal(forwarded, &ran.host, &admitted.meta);
        let (id, started) = (admitted.id, admitted.started);
        let done = self.finish(
            v,
            id,
            started,
            (start, ran.tier),
            Some(ran.host),
            ran.result,
        );
        if let Some(slot) = ran.check {
            slot.check(
                v,
                prepared,
                self.host.clone(),
                self.tape_index(),
                &req,
                &done,
            );
        }
        let taped = (&req, None);
        let outcome = self.record(v, ran.tier, admitted.taping, taped, done).await;
        if let Some(answer) = &admitted.meta.answer {
            answer.end();
        }
        outcome
    }

    /// An invocation of `v` [admitted](Self::admit), and the host it
    /// runs with; or its refusal.
    /// `early`: it may answer before it ends.
    async fn begin(
        &self,
        v: &Arc<FunctionVersion>,
        forwarded: Option<GatewayAttempt>,
        req: &Request,
        early: bool,
    ) -> Result<(Admitted, HostCtx), InvokeOutcome> {
        let admitted = self.admit(v, forwarded, req, early)?;
        let host = self.host_for(forwarded, &admitted.meta).await;
        Ok((admitted, host))
    }

    /// Containerless: `req` run again in tier `to` (the process tier)
    /// because the isolate cannot run it (`why`). The host calls the
    /// first attempt made are answered again from its tape, so each
    /// effect happens once; the bounce counts toward pinning the function
    /// to `to`.
    async fn fall_back(
        &self,
        v: &FunctionVersion,
        to: Tier,
        why: String,
        req: &Request,
        host: HostCtx,
        meta: &InvocationMeta,
    ) -> Ran {
        let retry = host.fall_back();
        retry.log(
            LogStream::System,
            "info",
            &format!("the isolate tier cannot run this ({why}); running it in the process tier"),
        );
        self.record_fallback(v).await;
        if let Some(t) = &meta.trace {
            let attributes = vec![
                KeyValue::new("hearth.from_tier", "js"),
                KeyValue::new("hearth.to_tier", to.as_str()),
                KeyValue::new("hearth.reason", why),
            ];
            crate::trace::event(t, "fallback", attributes);
        }
        // Already admitted: nothing to ask before preparing.
        let result = match self.prepared(v, to, || Ok(())).await {
            Ok((prepared, _)) => self.attempt(&prepared, req, &retry).await,
            Err(e) => Err(InvokeError::Crashed(format!(
                "the process tier could not load the function: {e}"
            ))),
        };
        Ran {
            result,
            tier: to,
            host: retry,
            check: None,
        }
    }

    /// What the compiled path's background steps need of this node.
    fn jit_parts(&self) -> Option<jit::Parts> {
        Some(jit::Parts {
            js: self.engines.get(&Tier::Js)?.clone(),
            wasm: self.engines.get(&Tier::Wasm)?.clone(),
            artifacts: self.artifacts.clone(),
            recorder: self.recorder.clone(),
            host: self.host.clone(),
            store: self.store.clone(),
            secrets: self.secrets.clone(),
        })
    }

    /// Whether `v` runs compiled now, is being traced, or why not.
    pub fn compiled_mode(&self, v: &FunctionVersion) -> CompiledMode {
        match &self.jit {
            Some(jit) => jit.mode(v),
            None => CompiledMode::NotCompiled(Some("compiling js is off on this node".into())),
        }
    }

    /// Lets an invocation of `v` in, or refuses it ([`refuse`](Self::refuse);
    /// the refusal is the returned outcome): a node-wide permit and the
    /// tenant's share, held until it ends.
    fn admit(
        &self,
        v: &Arc<FunctionVersion>,
        forwarded: Option<GatewayAttempt>,
        req: &Request,
        early: bool,
    ) -> Result<Admitted, InvokeOutcome> {
        let id = forwarded.map_or_else(InvocationId::new, |f| f.id);
        let started = Instant::now();
        let refused = |error| {
            self.refuse(v, id, &error);
            self::refused(v, id, error)
        };
        let room = self.room(v).map_err(refused)?;
        // When it started, if it gets a tape (the request itself is kept
        // by the caller, borrowed by the tiers, and taped from there): the
        // time in its id, made just now here or, forwarded, by the gateway
        // when the request reached the platform.
        let taping = self
            .sampled(v)
            .then(|| id.unix_ms().unwrap_or_else(hearth_core::unix_time_ms));
        let trace = self.tracing.get().map(|t| {
            let trace = t.begin(v, id, req);
            if forwarded.is_some_and(|f| f.retry) {
                crate::trace::event(&trace, "retry", Vec::new());
            }
            trace
        });
        let (answer, answered) = match early {
            true => {
                let (answer, answered) = self.after.answer(&v.tenant, &v.name);
                (Some(answer), Some(answered))
            }
            false => (None, None),
        };
        Ok(Admitted {
            id,
            started,
            taping,
            answered,
            meta: InvocationMeta {
                id,
                version: v.clone(),
                started,
                deadline: started + Duration::from_millis(v.spec.limits.timeout_ms),
                trace,
                cpu: Some(room.share.cpu()),
                answer,
            },
            _held: room,
        })
    }

    /// The room an invocation of `v` runs in, taken now: a node permit and
    /// the tenant's share; or why there is none.
    pub(crate) fn room(&self, v: &FunctionVersion) -> Result<Room, InvokeError> {
        let Ok(permit) = self.admission.clone().try_acquire_owned() else {
            return Err(InvokeError::Overloaded);
        };
        let share = self
            .shares
            .take(&v.tenant, self.reservation(v))
            .map_err(|why| self.refusal(why))?;
        Ok(Room {
            _permit: permit,
            share,
        })
    }

    /// Whether [`admit`](Self::admit) would let an invocation of `v` in
    /// now, taking nothing; why not if it would not.
    fn would_admit(&self, v: &FunctionVersion) -> Result<(), InvokeError> {
        if self.admission.available_permits() == 0 {
            return Err(InvokeError::Overloaded);
        }
        self.shares
            .would_take(&v.tenant, self.reservation(v))
            .map_err(|why| self.refusal(why))
    }

    /// The error a refusal for `why` answers with.
    fn refusal(&self, why: Refused) -> InvokeError {
        let budget = self.shares.memory();
        match why {
            Refused::Busy => InvokeError::TenantBusy {
                limit: self.shares.max(),
            },
            Refused::TenantMemory => InvokeError::TenantMemoryFull {
                limit_mib: budget.tenant_bytes >> 20,
            },
            Refused::NodeMemory => InvokeError::MemoryFull {
                capacity_mib: budget.node_bytes >> 20,
            },
        }
    }

    /// Counts and logs a refused invocation of `v`. A refusal ran nothing:
    /// it is counted in `hearth_invocations_refused_total` and the
    /// function's stats as refused, not as an invocation, a start or a
    /// latency, and it is never taped.
    /// A line in `function`'s system log that no running invocation
    /// writes (`invocation`: the one it is about, if any): what became of
    /// an event that did not run, say.
    pub fn note(&self, tenant: &str, function: &str, invocation: &str, level: &str, message: &str) {
        let record = LogRecord {
            id: 0,
            tenant: tenant.to_string(),
            function: function.to_string(),
            version: 0,
            invocation_id: invocation.to_string(),
            ts_ms: hearth_core::unix_time_ms(),
            stream: LogStream::System,
            level: level.into(),
            message: message.to_string(),
            trace_id: None,
        };
        if self.disk.as_ref().is_some_and(|d| d.full()) || !self.logs.send(record) {
            self.metrics.logs_dropped.inc();
        }
    }

    fn refuse(&self, v: &FunctionVersion, id: InvocationId, error: &InvokeError) {
        self.metrics.refused(error.kind());
        let now = hearth_core::unix_time_ms();
        self.stats.refused(&v.tenant, &v.name, now);
        let record = LogRecord {
            id: 0,
            tenant: v.tenant.clone(),
            function: v.name.clone(),
            version: v.version,
            invocation_id: id.to_string(),
            ts_ms: now,
            stream: LogStream::System,
            level: "error".into(),
            message: format!("invocation refused ({}): {error}", error.kind()),
            trace_id: None,
        };
        if self.disk.as_ref().is_some_and(|d| d.full()) || !self.logs.send(record) {
            self.metrics.logs_dropped.inc();
        }
    }

    /// The memory one invocation of `v` may reach, reserved at admission:
    /// its memory limit (linear memory, JS heap, process cgroup) and its
    /// tape budget (held in the daemon until written).
    fn reservation(&self, v: &FunctionVersion) -> u64 {
        let tape = v
            .spec
            .record
            .max_tape_bytes
            .unwrap_or(self.host.limits.tape_max_bytes) as u64;
        (u64::from(v.spec.limits.memory_mib) << 20) + tape
    }

    async fn attempt(
        &self,
        prepared: &Arc<dyn Prepared>,
        req: &Request,
        host: &HostCtx,
    ) -> Result<Response, InvokeError> {
        self.attempt_in(prepared.instantiate().await?, req, host)
            .await
    }

    /// Runs `req` in `sandbox`, counted as live while it runs.
    async fn attempt_in(
        &self,
        mut sandbox: Box<dyn hearth_host::Sandbox>,
        req: &Request,
        host: &HostCtx,
    ) -> Result<Response, InvokeError> {
        self.metrics.live_sandboxes.inc();
        let cpu = host.meta().cpu.as_deref();
        let result = self
            .long_runs
            .run(sandbox.invoke(req, host.clone()), cpu)
            .await;
        // Calls the function left running end before the invocation does.
        host.settle().await;
        drop(sandbox);
        self.metrics.live_sandboxes.dec();
        result
    }

    /// The tier `v` runs in now: its runtime's first tier this node has,
    /// unless fallbacks pinned the function to a later one.
    async fn tier_for(&self, v: &FunctionVersion) -> Result<Tier, NodeError> {
        let first = self.engine_for(&v.spec)?.tier();
        let tiers = v.spec.runtime.tiers();
        if tiers.len() < 2 || first != tiers[0] {
            return Ok(first);
        }
        let mode = self.mode(&v.tenant, &v.name).await?;
        Ok(if mode.pinned && self.engines.contains_key(&tiers[1]) {
            tiers[1]
        } else {
            first
        })
    }

    /// A function's fallback record (cached).
    pub async fn mode(&self, tenant: &str, name: &str) -> Result<FunctionMode, NodeError> {
        if let Some(m) = self.modes.lock().get(tenant).and_then(|f| f.get(name)) {
            return Ok(*m);
        }
        let mode = self.store.function_mode(tenant, name).await?;
        self.remember_mode(tenant, name, mode);
        Ok(mode)
    }

    fn remember_mode(&self, tenant: &str, name: &str, mode: FunctionMode) {
        self.modes
            .lock()
            .entry(tenant.to_string())
            .or_default()
            .insert(name.to_string(), mode);
    }

    /// Forgets what this node cached of a function another member of the
    /// cluster changed (a deploy, a removal, a fallback pin), or of every
    /// function with `None`: the next invocation reads the store.
    pub fn forget(&self, function: Option<(&str, &str)>) {
        self.table.forget_aliases(function);
        match function {
            Some((tenant, name)) => {
                if let Some(f) = self.modes.lock().get_mut(tenant) {
                    f.remove(name);
                }
                self.cut_if_removed(tenant, name);
            }
            None => self.modes.lock().clear(),
        }
    }

    /// A change another member made may be a removal: if this node's
    /// invocations of the function still work after their response and
    /// it has no version left, their work stops as it would here.
    fn cut_if_removed(&self, tenant: &str, name: &str) {
        if !self.after.working(tenant, name) {
            return;
        }
        let (store, after) = (self.store.clone(), self.after.clone());
        let (tenant, name) = (tenant.to_string(), name.to_string());
        tokio::spawn(async move {
            if store
                .list_versions(&tenant, &name)
                .await
                .is_ok_and(|v| v.is_empty())
            {
                after.cut(&tenant, &name);
            }
        });
    }

    fn forget_mode(&self, tenant: &str, name: &str) {
        if let Some(f) = self.modes.lock().get_mut(tenant) {
            f.remove(name);
        }
        self.metrics.pinned(tenant, name, false);
    }

    async fn record_fallback(&self, v: &FunctionVersion) {
        self.metrics.fallback(&v.tenant, &v.name);
        let limit = self.config.pin_after_fallbacks;
        match self.store.record_bounce(&v.tenant, &v.name, limit).await {
            Ok(mode) => {
                if mode.pinned {
                    self.metrics.pinned(&v.tenant, &v.name, true);
                }
                self.remember_mode(&v.tenant, &v.name, mode);
            }
            Err(e) => tracing::warn!(error = %e, "could not record a fallback"),
        }
    }

    fn finish(
        &self,
        v: &FunctionVersion,
        id: InvocationId,
        started: Instant,
        (start, tier): (StartKind, Tier),
        host: Option<HostCtx>,
        result: Result<Response, InvokeError>,
    ) -> (InvokeOutcome, Tape) {
        let result = match &host {
            Some(host) => within_tape_budget(host, result),
            None => result,
        };
        let duration = started.elapsed();
        self.metrics.invocation(
            tier,
            result.is_ok(),
            start == StartKind::Cold,
            duration.as_secs_f64(),
        );

        // A 5xx the function answered itself is an error in its charts, as
        // on its span; a 4xx is its caller's.
        let function_ok = result.as_ref().is_ok_and(|r| r.status < 500);
        self.metrics
            .function_invocation(&v.tenant, &v.name, function_ok, duration.as_secs_f64());
        self.stats.add(
            &v.tenant,
            &v.name,
            hearth_core::unix_time_ms(),
            duration.as_micros() as u64,
            function_ok,
        );
        let trace = host.as_ref().and_then(|h| h.meta().trace.clone());
        let (tape, mut lines) = host.map(|h| h.take_records()).unwrap_or_default();
        if let Err(e) = &result {
            self.metrics
                .errors
                .get_or_create(&ErrorLabels { kind: e.kind() })
                .inc();
            lines.push(hearth_host::LogLine {
                ts_ms: hearth_core::unix_time_ms(),
                stream: LogStream::System,
                level: "error".into(),
                message: format!("invocation failed ({}): {e}", e.kind()),
            });
        }
        let invocation_id = id.to_string();
        let trace_id = trace
            .as_ref()
            .map(|t| t.span_context().trace_id().to_string());
        for line in lines {
            let record = LogRecord {
                id: 0,
                tenant: v.tenant.clone(),
                function: v.name.clone(),
                version: v.version,
                invocation_id: invocation_id.clone(),
                ts_ms: line.ts_ms,
                stream: line.stream,
                level: line.level,
                message: line.message,
                trace_id: trace_id.clone(),
            };
            if self.disk.as_ref().is_some_and(|d| d.full()) || !self.logs.send(record) {
                self.metrics.logs_dropped.inc();
            }
        }
        let trace = trace.map(|t| {
            let (status, failure) = match &result {
                Ok(r) => (r.status, None),
                Err(e) => (e.http_status(), Some((e.kind(), e.to_string()))),
            };
            crate::trace::end(&t, tier, start == StartKind::Cold, status, failure);
            hearth_host::trace::traceparent(&t.span_context()).into_boxed_str()
        });
        let outcome = InvokeOutcome {
            id,
            version: v.version,
            start,
            duration,
            result,
            traceparent: trace,
        };
        (outcome, tape)
    }
}

/// A uniform draw in 0–99: where an alias splits, which of its versions a
/// call without a key of its own runs.
pub fn random_draw() -> u8 {
    rand::random_range(0..100)
}
