//! The process tier's engine, its sandboxes and the handler cache.
//!
//! A *handler* is one sandboxed process serving one function version:
//! Python handlers are forked from a zygote, or taken from a pool of
//! generic pre-forked ones when they would fork from the bare root zygote
//! anyway; Node.js handlers are taken from a pool of generic, pre-started
//! Node processes (V8 does not survive `fork`). A pooled process is given
//! the function's code when first needed (`pool.rs`). After an invocation
//! a healthy handler is paused (cgroup freezer, or SIGSTOP without one) and
//! kept in the handler cache for the next invocation of the same version;
//! the cache evicts least recently used handlers beyond its memory budget
//! and any idle longer than the keep-alive. A handler that timed out,
//! crashed or misbehaved is destroyed, never reused.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hearth_core::LogStream;
use hearth_core::{FunctionSpec, FunctionVersion, InvokeError, Request, Response, Runtime, Tier};
use hearth_host::{
    Artifacts, BodyStream, Compiled, DeployError, Engine, HostCtx, Prepared, ResponseSink, Sandbox,
    Source,
};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::bundle::Bundle;
use crate::cgroup::{Cgroup, CgroupLimits, CgroupPool, Cgroups};
use crate::config::{Isolation, ProcConfig, ProcStatus};
use crate::container::{self, Base, Root};
use crate::handler::{Handler, HandlerCache};
use crate::install::InstallSandbox;
use crate::install::{InstallCache, Installed};
use crate::proto::{read_frame, write_frame};
use crate::session::converse;
use crate::zygote::{Containment, Scope, Zygote, ZygoteConfig, ZygoteTree};

mod launch;
mod pool;

use pool::GenericPool;

/// The process tier. Cheap to clone.
#[derive(Clone)]
pub struct ProcEngine(Arc<Inner>);

struct Inner {
    config: ProcConfig,
    /// The node's outbound connections, once it has them: sandboxes'
    /// proxied connections count against them ([`ProcEngine::use_outbound`]).
    outbound: std::sync::OnceLock<Arc<hearth_host::outbound::Outbound>>,
    /// Sizes of installed packages' directories, measured once each.
    installed_sizes: Mutex<HashMap<PathBuf, u64>>,
    /// `config.dir`, absolute: scrubbed from what handlers report
    /// ([`crate::session::HostPath`]).
    host_dir: String,
    base: Base,
    cgroups: Option<Arc<CgroupPool>>,
    installs: InstallCache,
    /// Started on first use; a failed start is retried by the next caller.
    zygotes: OnceCell<ZygoteTree>,
    handlers: Mutex<HandlerCache>,
    node_pool: GenericPool,
    python_pool: GenericPool,
    roots: Mutex<Vec<Root>>,
    roots_filling: std::sync::atomic::AtomicBool,
    /// Set by [`ProcEngine::shutdown`]: the pools are no longer refilled
    /// (a root built after the final sweep would stay mounted).
    closed: std::sync::atomic::AtomicBool,
    live: Arc<AtomicU64>,
    next_id: AtomicU64,
    root: bool,
    isolation: Isolation,
    degraded: Vec<String>,
}

impl ProcEngine {
    /// Counts the connections sandboxes open through their egress proxy
    /// against `outbound`, the node's (made after the engine).
    pub fn use_outbound(&self, outbound: Arc<hearth_host::outbound::Outbound>) {
        let _ = self.0.outbound.set(outbound);
    }

    /// Prepares the tier's directories, base root and cgroup pool, and
    /// removes what a previous run left (mounts, cgroups, sandbox roots).
    /// Starts the Node pool and the reaper; zygotes start on first use.
    pub fn new(config: ProcConfig) -> anyhow::Result<ProcEngine> {
        use anyhow::Context;
        let dir = &config.dir;
        std::fs::create_dir_all(dir)?;
        let swept = container::sweep(dir);
        if swept > 0 {
            tracing::info!(
                mounts = swept,
                "removed sandbox mounts left by a previous run"
            );
        }
        let run = dir.join("run");
        let _ = std::fs::remove_dir_all(&run);
        std::fs::create_dir_all(run.join("sb"))?;
        // Sandboxes enter their roots by descriptor, never by this path: a
        // zygote that kept a root's descriptor finds no other root beside it.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(run.join("sb"), std::fs::Permissions::from_mode(0o700))?;
        }
        std::fs::create_dir_all(dir.join("code"))?;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let mut degraded = Vec::new();
        let nonet = crate::seccomp::compile(false)?;
        let net = crate::seccomp::compile(true)?;
        let no_clone3 = crate::seccomp::compile_no_clone3()?;
        let zygote_nonet = crate::seccomp::compile_zygote(false)?;
        let zygote_net = crate::seccomp::compile_zygote(true)?;
        let base = Base::create(
            &run.join("base"),
            &[
                ("helper.py", crate::HELPER_PY),
                ("helper.mjs", crate::HELPER_MJS),
                ("shapes.js", hearth_host::SHAPES_JS.as_bytes()),
                ("nonet.bpf", &nonet),
                ("net.bpf", &net),
                ("noclone3.bpf", &no_clone3),
                ("zygote-nonet.bpf", &zygote_nonet),
                ("zygote-net.bpf", &zygote_net),
            ],
            root,
        )
        .context("cannot prepare the sandbox base")?;
        let isolation = if root {
            Isolation::Full
        } else if Isolation::user_namespaces_work() {
            degraded.push(
                "not running as root: Python and Node.js sandboxes get a user namespace with their own PID, IPC and UTS namespaces, seccomp and no capabilities, but no chroot (they can read what this daemon's user can read) and no cgroups (no CPU or process-count limits; Python memory is capped by an address-space limit, Node.js memory is not capped)".into(),
            );
            Isolation::UserNamespace
        } else {
            degraded.push(
                "not running as root and user namespaces are unavailable: Python and Node.js sandboxes run without chroot, namespaces, cgroups or a separate user; only the seccomp filter and the time limit hold".into(),
            );
            Isolation::None
        };
        // Before any cgroup is made: a bad setting here ends the start
        // with nothing left behind.
        let installs = InstallCache::new(
            dir.join("packages"),
            config.python.clone(),
            config.npm.clone(),
            config.offline_packages.clone(),
            (isolation == Isolation::Full).then(|| InstallSandbox {
                base: base.clone(),
                run_dir: run.clone(),
                uid: config.sandbox_uid,
                gid: config.sandbox_uid,
                index_hosts: config.package_index_hosts.clone(),
                allow_private: config.allow_private_egress,
            }),
        )?
        .with_registries(config.registries.clone());
        let cgroups = if root {
            let instance = instance_name(dir);
            let parent = config.cgroup_parent.as_deref();
            let sysfs = Path::new("/sys/fs/cgroup");
            let writable = if config.remount_cgroupfs {
                crate::cgroup::make_writable(sysfs).map(|remounted| {
                    if remounted {
                        tracing::info!("remounted the container's cgroup namespace read-write");
                    }
                })
            } else {
                Ok(())
            };
            match writable
                .and_then(|()| Cgroups::open(sysfs, &instance, parent))
                .and_then(|c| CgroupPool::new(c, config.warm_cgroups, config.max_sandboxes))
            {
                Ok(pool) => {
                    if !pool.cpu_limited() {
                        degraded.push(
                            "cgroup v2 without the cpu controller: a function's CPU share is not capped (its timeout still holds)".into(),
                        );
                    }
                    let pool = Arc::new(pool);
                    installs.use_cgroups(pool.clone());
                    Some(pool)
                }
                Err(e) => {
                    degraded.push(format!(
                        "no cgroups ({e}): memory, CPU and process limits of Python and Node.js functions are not enforced"
                    ));
                    None
                }
            }
        } else {
            None
        };
        for line in &degraded {
            tracing::warn!("process tier degraded: {line}");
        }
        let engine = ProcEngine(Arc::new(Inner {
            outbound: std::sync::OnceLock::new(),
            installed_sizes: Mutex::default(),
            host_dir: std::path::absolute(&config.dir)
                .unwrap_or_else(|_| config.dir.clone())
                .to_string_lossy()
                .into_owned(),
            base,
            cgroups,
            installs,
            zygotes: OnceCell::new(),
            handlers: Mutex::new(HandlerCache::default()),
            node_pool: GenericPool::new(),
            python_pool: GenericPool::new(),
            roots: Mutex::new(Vec::new()),
            roots_filling: false.into(),
            closed: false.into(),
            live: Arc::default(),
            next_id: AtomicU64::new(1),
            root,
            isolation,
            degraded,
            config,
        }));
        engine.start_reaper();
        Ok(engine)
    }

    pub fn status(&self) -> ProcStatus {
        let inner = &self.0;
        ProcStatus {
            cgroups: inner
                .cgroups
                .as_ref()
                .map(|c| format!("{:?}", c.version()).to_lowercase()),
            isolation: inner.isolation,
            caches: inner.config.caches,
            degraded: inner.degraded.clone(),
            paused_handlers: inner.handlers.lock().idle.len(),
            generic_node_processes: inner.node_pool.len(),
            generic_python_processes: inner.python_pool.len(),
            handlers_from_pool: [
                ("node", inner.node_pool.taken()),
                ("python", inner.python_pool.taken()),
            ]
            .into(),
            zygotes: inner
                .zygotes
                .get()
                .map(ZygoteTree::describe)
                .unwrap_or_default(),
            colocation: inner.config.colocation.default_mode(),
        }
    }

    /// Kills every sandbox and zygote and removes this node's mounts and
    /// cgroups. Call once when the daemon stops.
    pub fn shutdown(&self) {
        use std::sync::atomic::Ordering;
        let inner = &self.0;
        inner.closed.store(true, Ordering::Release);
        // A refill already under way finishes its root first (or sees
        // `closed` and destroys it); then nothing mounts again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while (inner.roots_filling.load(Ordering::Acquire)
            || inner.node_pool.filling()
            || inner.python_pool.filling())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let handlers: Vec<Handler> = inner.handlers.lock().idle.drain(..).collect();
        let generic = inner.node_pool.drain().into_iter();
        for h in handlers
            .into_iter()
            .chain(generic.chain(inner.python_pool.drain()))
        {
            inner.destroy_now(h);
        }
        for mut root in inner.roots.lock().drain(..) {
            root.destroy();
        }
        if let Some(tree) = inner.zygotes.get() {
            tree.shutdown();
        }
        if let Some(pool) = &inner.cgroups {
            pool.shutdown();
        }
        container::sweep(&inner.config.dir);
    }

    fn start_reaper(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(inner) = weak.upgrade() else { return };
                let expired = inner.handlers.lock().expired(inner.config.keep_alive);
                for h in expired {
                    inner.destroy(h);
                }
                inner.refill();
            }
        });
    }

    async fn zygotes(&self) -> Result<&ZygoteTree, InvokeError> {
        let inner = &self.0;
        inner
            .zygotes
            .get_or_try_init(|| async {
                let tree = ZygoteTree::start(ZygoteConfig {
                    python: inner.config.python.clone(),
                    helper: inner.base.hearth.join("helper.py"),
                    run_dir: inner.config.dir.join("run"),
                    memory_budget_bytes: inner.config.zygote_budget_bytes,
                    contain: (inner.isolation == Isolation::Full).then(|| {
                        let weak = Arc::downgrade(inner);
                        Containment {
                            // From the pool of generic roots, as a sandbox's.
                            roots: Arc::new(move || {
                                let inner = weak.upgrade().ok_or_else(|| {
                                    std::io::Error::other("the process tier is stopping")
                                })?;
                                let root = inner.take_root();
                                inner.fill_roots();
                                root
                            }),
                            uid: inner.config.sandbox_uid,
                            gid: inner.config.sandbox_uid,
                        }
                    }),
                })
                .await?;
                // All zygotes together: twice what eviction keeps them to,
                // and room for the sandboxes they are forking.
                let zygote_memory = inner.config.zygote_budget_bytes * 2;
                let zygote_pids = 256 + 2 * inner.config.max_sandboxes as u32;
                if let Some(pool) = &inner.cgroups
                    && let Err(e) = pool.adopt_zygote(tree.root().pid, zygote_memory, zygote_pids)
                {
                    tracing::warn!(error = %e, "could not move the zygotes into their cgroup");
                }
                Ok::<_, crate::zygote::ZygoteError>(tree)
            })
            .await
            .map_err(|e| InvokeError::Crashed(format!("the Python zygote could not start: {e}")))
    }
}

/// A stable per-data-directory name for this node's cgroups.
/// The name of the cgroup directory (`hearth/<name>` under each
/// controller) of the process tier kept in `dir` (`<data>/proc`): a hash of
/// the directory, so a restarted node finds what a killed one left.
pub fn instance_name(dir: &Path) -> String {
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let hash = hearth_host::content_hash(canonical.as_os_str().as_encoded_bytes());
    format!("n{}", &hash[..12])
}

#[async_trait]
impl Engine for ProcEngine {
    fn tier(&self) -> Tier {
        Tier::Process
    }

    fn installed(&self, spec: Option<&FunctionSpec>, artifact: &[u8]) -> Vec<(PathBuf, u64)> {
        if !hearth_host::bundle::is_tar(artifact) {
            return Vec::new();
        }
        let Ok(bundle) = Bundle::from_tar(artifact) else {
            return Vec::new();
        };
        // Each runtime and install kind the version may have used.
        let kinds: Vec<(Runtime, bool)> = match spec {
            Some(s) if s.runtime == Runtime::Python => vec![(Runtime::Python, s.source_builds)],
            Some(_) => vec![(Runtime::Node, false)],
            None => vec![
                (Runtime::Python, false),
                (Runtime::Python, true),
                (Runtime::Node, false),
            ],
        };
        let mut dirs = Vec::new();
        for (runtime, source_builds) in kinds {
            for p in bundle.packages(runtime).unwrap_or_default() {
                dirs.push(self.0.installs.dir_of(runtime, &p, source_builds));
            }
        }
        dirs.sort();
        dirs.dedup();
        let mut sizes = self.0.installed_sizes.lock();
        dirs.into_iter()
            .filter(|dir| dir.exists())
            .map(|dir| {
                // An install is renamed into place whole and never changes.
                let bytes = *sizes
                    .entry(dir.clone())
                    .or_insert_with(|| crate::install::dir_bytes(&dir));
                (dir, bytes)
            })
            .collect()
    }

    fn sweep_installed(&self, keep: &HashSet<PathBuf>, artifacts: &HashSet<String>) -> u64 {
        let mut freed = self.0.installs.remove_all_but(keep);
        self.0
            .installed_sizes
            .lock()
            .retain(|dir, _| keep.contains(dir));
        // Each version's code, unpacked for its sandboxes.
        let code = self.0.config.dir.join("code");
        for e in std::fs::read_dir(&code).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if artifacts.contains(&name) || name.contains(".tmp") {
                continue;
            }
            let bytes = crate::install::dir_bytes(&e.path());
            if std::fs::remove_dir_all(e.path()).is_ok() {
                freed += bytes;
            }
        }
        freed
    }

    fn pool_free(&self) -> Vec<(&'static str, u64)> {
        let inner = &self.0;
        vec![
            ("node_processes", inner.node_pool.len() as u64),
            ("python_processes", inner.python_pool.len() as u64),
            ("sandbox_roots", inner.roots.lock().len() as u64),
        ]
    }

    fn status(&self) -> hearth_host::EngineStatus {
        let s = ProcEngine::status(self);
        hearth_host::EngineStatus {
            degraded: s.degraded.clone(),
            details: serde_json::to_value(&s).unwrap_or_default(),
        }
    }

    async fn compile(&self, spec: &FunctionSpec, source: Source) -> Result<Compiled, DeployError> {
        let started = Instant::now();
        let runtime = spec.runtime;
        if !matches!(runtime, Runtime::Python | Runtime::Node | Runtime::Js) {
            return Err(DeployError::Invalid(format!(
                "the process tier runs Python and Node.js, not {runtime}"
            )));
        }
        let runtime = if runtime == Runtime::Js {
            Runtime::Node
        } else {
            runtime
        };
        let bundle = Bundle::from_source(runtime, &source)
            .map_err(|e| DeployError::Invalid(e.to_string()))?;
        let handler = spec.handler.as_ref();
        let entry = bundle
            .entry(runtime, handler)
            .map_err(|e| DeployError::NotAFunction(e.to_string()))?;
        if runtime == Runtime::Python {
            crate::syntax::check_python(&self.0.config.python, &bundle, &entry, handler).await?;
        } else {
            crate::syntax::check_node(&self.0.config.node, &bundle, &entry, handler).await?;
        }
        if spec.source_builds && runtime != Runtime::Python {
            return Err(DeployError::Invalid(format!(
                "source_builds applies to Python packages; {runtime} packages install without running their code (npm --ignore-scripts)"
            )));
        }
        let compile_ms = started.elapsed().as_millis() as u64;
        // Packages are resolved and installed at deploy, so a bad
        // requirement fails the deploy, not the first request.
        let installing = Instant::now();
        let locked = self
            .0
            .installs
            .lock_bundle(runtime, bundle, spec.source_builds)
            .await
            .map_err(|e| DeployError::Invalid(e.to_string()))?;
        let mut warnings = locked.warnings;
        warnings.extend(env_read_at_import(spec, &locked.modules));
        Ok(Compiled {
            artifact: locked.bundle.to_tar(),
            compile_ms,
            install_ms: installing.elapsed().as_millis() as u64,
            packages: locked.packages,
            warnings,
        })
    }

    async fn prepare(
        &self,
        version: &FunctionVersion,
        artifacts: &Arc<dyn Artifacts>,
    ) -> Result<Arc<dyn Prepared>, DeployError> {
        let started = Instant::now();
        let runtime = match version.spec.runtime {
            Runtime::Python => Runtime::Python,
            _ => Runtime::Node,
        };
        let bytes = artifacts.read(&version.artifact)?;
        let bundle = Bundle::from_tar(&bytes).map_err(|e| DeployError::Load(e.to_string()))?;
        let entry = bundle
            .entry(runtime, version.spec.handler.as_ref())
            .map_err(|e| DeployError::Load(e.to_string()))?;
        let code_dir = self.0.config.dir.join("code").join(&version.artifact);
        if !code_dir.exists() {
            let tmp = code_dir.with_extension(format!("tmp{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp).map_err(|e| DeployError::Load(e.to_string()))?;
            bundle
                .unpack_to(&tmp)
                .map_err(|e| DeployError::Load(e.to_string()))?;
            std::fs::rename(&tmp, &code_dir).map_err(|e| DeployError::Load(e.to_string()))?;
        }
        let mut installed = Vec::new();
        for p in bundle
            .packages(runtime)
            .map_err(|e| DeployError::Load(e.to_string()))?
        {
            installed.push(
                self.0
                    .installs
                    .ensure(runtime, &p, version.spec.source_builds)
                    .await
                    .map_err(|e| DeployError::Load(e.to_string()))?,
            );
        }
        self.0.fill_roots();
        self.0.want_pool(runtime);
        tracing::debug!(elapsed = ?started.elapsed(), "version prepared");
        Ok(Arc::new(ProcPrepared {
            engine: self.clone(),
            version: Arc::new(version.clone()),
            runtime,
            key: version_key(version),
            code_dir,
            entry,
            installed,
        }))
    }
}

/// A warning for `--env` variables named like one of the function's
/// packages (`NUMBA_CACHE_DIR` for `numba`): the package may read them when
/// it is imported, which happens once, in a zygote shared by functions
/// with the same packages, before this function's environment is set.
/// Native libraries' thread settings are not among them: zygotes are made
/// per value of those ([`crate::zygote::import_env`]).
fn env_read_at_import(spec: &FunctionSpec, modules: &[String]) -> Option<String> {
    let keyed = crate::zygote::import_env(&spec.env);
    let named: Vec<&str> = spec
        .env
        .keys()
        .filter(|k| !keyed.contains_key(*k))
        .filter(|k| {
            modules
                .iter()
                .any(|m| k.starts_with(&format!("{}_", m.to_ascii_uppercase())))
        })
        .map(String::as_str)
        .collect();
    (!named.is_empty()).then(|| {
        format!(
            "--env {}: your packages are imported once, before your code runs, by a zygote \
             that functions with the same packages share, so a package that reads these when \
             it is imported does not see them (one that reads them when called does). Read \
             them at call time, or set os.environ before importing the package. Native \
             libraries' thread settings (OMP_*, OPENBLAS_*, MKL_*, …) do take effect.",
            named.join(", ")
        )
    })
}

/// Which paused handlers a prepared version may take: its version's, and
/// only those started with the environment it has now (a rotated
/// secret's new value makes another key, so a handler started with the
/// old one is never resumed for it).
fn version_key(v: &FunctionVersion) -> String {
    use std::hash::{Hash, Hasher};
    let mut env = std::collections::hash_map::DefaultHasher::new();
    v.spec.env.hash(&mut env);
    format!(
        "{}/{}@{}/{}/{:016x}",
        v.tenant,
        v.name,
        v.version,
        v.artifact,
        env.finish()
    )
}

/// One version of a Python or Node.js function, ready to run.
struct ProcPrepared {
    engine: ProcEngine,
    version: Arc<FunctionVersion>,
    runtime: Runtime,
    key: String,
    code_dir: PathBuf,
    entry: String,
    installed: Vec<Installed>,
}

#[async_trait]
impl Prepared for ProcPrepared {
    async fn instantiate(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        self.sandbox(false).await
    }

    async fn instantiate_isolated(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        self.sandbox(true).await
    }

    /// A Node.js function deployed with `stream`: a Lambda streaming
    /// handler's response streams (`docs/process-tier.md`).
    fn streams(&self) -> bool {
        self.version.spec.stream && self.runtime == Runtime::Node
    }
}

impl ProcPrepared {
    /// A sandbox: a paused handler resumed, or a new one; `isolated`, always
    /// a new one, destroyed after its invocation instead of paused.
    async fn sandbox(&self, isolated: bool) -> Result<Box<dyn Sandbox>, InvokeError> {
        let inner = &self.engine.0;
        let cached = if isolated {
            None
        } else {
            self.take_paused().await
        };
        let handler = match cached {
            Some(h) => {
                h.resume();
                h
            }
            None => {
                let started = Instant::now();
                let h = match self.runtime {
                    Runtime::Python => self.new_python_handler().await?,
                    _ => self.new_node_handler().await?,
                };
                tracing::debug!(elapsed = ?started.elapsed(), "new handler loaded");
                h
            }
        };
        Ok(Box::new(ProcSandbox {
            engine: self.engine.clone(),
            handler: Some(handler),
            healthy: false,
            isolated,
            limits: self.version.spec.limits,
            max_response: inner.config.max_response_bytes,
            max_body: inner.config.max_body_bytes,
        }))
    }

    /// A paused handler of this version, if one is kept whose zygote did
    /// not end under it. Those whose zygote did are dead as soon as they
    /// are thawed: they are destroyed (which lets the zygote's exit end),
    /// and the zygote leaves the tree.
    async fn take_paused(&self) -> Option<Handler> {
        let inner = &self.engine.0;
        loop {
            let handler = inner.handlers.lock().take(&self.key)?;
            let ended = handler
                .zygote
                .as_ref()
                .and_then(std::sync::Weak::upgrade)
                .filter(|z| z.took_its_handlers());
            let Some(zygote) = ended else {
                return Some(handler);
            };
            inner.destroy(handler);
            if let Ok(tree) = self.engine.zygotes().await {
                tree.drop_broken(&zygote);
            }
        }
    }

    fn cgroup_limits(&self) -> CgroupLimits {
        let c = &self.engine.0.config;
        CgroupLimits {
            memory_bytes: u64::from(self.version.spec.limits.memory_mib) << 20,
            max_pids: c.max_pids,
            cpu_percent: c.cpu_percent,
        }
    }

    fn network(&self) -> bool {
        !self.version.spec.allowed_hosts.is_empty()
    }

    async fn new_python_handler(&self) -> Result<Handler, InvokeError> {
        let engine = &self.engine;
        let caches = engine.0.config.caches;
        let tree = engine.zygotes().await?;
        let (installed, private) = if caches.install {
            (self.installed.clone(), None)
        } else {
            let (installed, dir) = engine.install_privately(&self.installed).await?;
            (installed, Some(dir))
        };
        let packages: Vec<PathBuf> = installed.iter().map(|i| i.path.clone()).collect();
        // A zygote chosen just before the import cache replaced it refuses
        // the fork (`ZygoteError::Retired`); one that had died (its package
        // ended it, the kernel killed it) fails it and leaves the tree.
        // Either way: choose again, once.
        let mut retried = false;
        let (zygote, launched) = loop {
            let zygote = self.choose_zygote(tree, &installed).await;
            // A handler that would fork from the bare root is what the pool
            // holds, already forked and in its cgroup.
            let pooled = if zygote.id == 0 && !self.network() {
                engine.0.take_generic(Runtime::Python)
            } else {
                None
            };
            if let Some(mut handler) = pooled {
                handler.private_packages = private;
                return self.give(handler, &packages).await;
            }
            let launched = engine
                .launch(
                    Some(&self.code_dir),
                    &packages,
                    self.cgroup_limits(),
                    self.network().then(|| self.version.clone()),
                    |spec| {
                        let zygote = zygote.clone();
                        async move {
                            zygote.used();
                            spec.send(&zygote, "fork_handler").await
                        }
                    },
                )
                .await;
            if launched.is_err() && !retried && (zygote.is_retired() || tree.drop_broken(&zygote)) {
                retried = true;
                continue;
            }
            break (zygote, launched);
        };
        let mut handler = match launched {
            Ok(h) => h,
            Err(e) => {
                if let Some(dir) = private {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        handler.private_packages = private;
        handler.key = Some(self.key.clone());
        handler.zygote = (zygote.id != 0).then(|| Arc::downgrade(&zygote));
        let (handler, imported) = self.load(handler, &packages).await?;
        if caches.learn && zygote.id != 0 && !imported.is_empty() {
            // The import cache learns what handlers import, off the
            // request's path.
            let engine = self.engine.clone();
            tokio::spawn(async move {
                if let Ok(tree) = engine.zygotes().await {
                    tree.learn(&zygote, &installed, &imported).await;
                }
            });
        }
        Ok(handler)
    }

    /// The zygote this function's handlers fork from: one that imported
    /// its packages (with its import-time environment), shared as its
    /// tenant's colocation mode allows, or the bare root.
    async fn choose_zygote(&self, tree: &ZygoteTree, installed: &[Installed]) -> Arc<Zygote> {
        let caches = self.engine.0.config.caches;
        let v = &self.version;
        let mode = self.engine.0.config.colocation.mode_for(&v.tenant).await;
        match Scope::for_function(mode, &v.tenant, &v.name) {
            Some(scope) if caches.install && caches.import => {
                let env = crate::zygote::import_env(&v.spec.env);
                tree.for_packages(installed, &scope, self.network(), &env)
                    .await
            }
            _ => tree.root(),
        }
    }

    async fn new_node_handler(&self) -> Result<Handler, InvokeError> {
        let engine = &self.engine;
        let handler = match engine.0.take_generic(Runtime::Node) {
            Some(h) => h,
            None => engine.launch_node().await?,
        };
        self.give(handler, &[]).await
    }

    /// Gives a generic process (one started with no function) this
    /// version: its code, its packages, its limits, then `load`. No mount
    /// namespace, so binding into its root now makes the files appear
    /// inside the running sandbox. `paths` are Python import paths.
    async fn give(&self, mut handler: Handler, paths: &[PathBuf]) -> Result<Handler, InvokeError> {
        let attach = (|| {
            if let Some(root) = handler.root.as_mut() {
                match self.runtime {
                    Runtime::Python => root.attach(Some(&self.code_dir), paths)?,
                    _ => {
                        root.bind_code(&self.code_dir)?;
                        for pkg in &self.installed {
                            root.bind_node_modules(&pkg.path)?;
                        }
                    }
                }
            }
            if let Some(cg) = &handler.cgroup {
                cg.set_limits(self.cgroup_limits())?;
            }
            Ok::<_, std::io::Error>(())
        })();
        if let Err(e) = attach {
            self.engine.0.destroy(handler);
            return Err(InvokeError::Crashed(format!(
                "could not attach the function to a sandbox: {e}"
            )));
        }
        handler.key = Some(self.key.clone());
        Ok(self.load(handler, paths).await?.0)
    }

    /// Sends the function's code location and environment; the helper
    /// imports it. Import errors are kept and reported per invocation; a
    /// handler that dies or hangs while loading is destroyed. Also returns
    /// the modules of its packages that loading imported (Python).
    async fn load(
        &self,
        mut handler: Handler,
        paths: &[PathBuf],
    ) -> Result<(Handler, Vec<String>), InvokeError> {
        let code = if self.engine.0.root {
            "/code".to_string()
        } else {
            self.code_dir.display().to_string()
        };
        // A sandbox with a /tmp of its own (a root of its own) runs the
        // function in a writable directory there; otherwise in its code.
        let workdir = self.engine.0.root.then_some("/tmp/task");
        let msg = json!({
            "op": "load",
            "workdir": workdir,
            "entry": self.entry,
            "handler": self.version.spec.handler.as_ref().map(|h| h.function()),
            // Python: the names to look for, in order (checked at deploy).
            "handlers": crate::syntax::python_handlers(self.version.spec.handler.as_ref()),
            "code": code,
            "paths": paths,
            "env": self.version.spec.env,
        });
        let wait = Duration::from_millis(self.version.spec.limits.timeout_ms.max(30_000));
        let conn = handler.conn();
        let result = tokio::time::timeout(wait, async {
            write_frame(conn, &msg, &[]).await?;
            loop {
                let frame = read_frame(conn, 1 << 20).await?;
                if frame.str("op") == "loaded" {
                    return Ok::<_, std::io::Error>(frame.header);
                }
            }
        })
        .await;
        let err = match result {
            Ok(Ok(loaded)) => {
                let imported = loaded["imported"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str().map(str::to_string))
                    .collect();
                return Ok((handler, imported));
            }
            Ok(Err(_)) if handler.oom_killed() => InvokeError::OutOfMemory {
                limit_mib: self.version.spec.limits.memory_mib,
                last_output: Default::default(),
            },
            Ok(Err(e)) => {
                InvokeError::Crashed(format!("the sandbox died while loading the function: {e}"))
            }
            Err(_) => InvokeError::Timeout {
                limit_ms: wait.as_millis() as u64,
            },
        };
        self.engine.0.destroy(handler);
        Err(err)
    }
}

/// A handler serving one invocation.
struct ProcSandbox {
    engine: ProcEngine,
    handler: Option<Handler>,
    /// Set once the invocation finished cleanly; only then is the handler kept.
    healthy: bool,
    /// A replay's: never kept.
    isolated: bool,
    limits: hearth_core::Limits,
    max_response: usize,
    max_body: usize,
}

impl Drop for ProcSandbox {
    fn drop(&mut self) {
        let Some(mut h) = self.handler.take() else {
            return;
        };
        let inner = &self.engine.0;
        // The invocation is over: now the pools may take the CPU back.
        inner.refill();
        if self.isolated || !self.healthy || !inner.config.caches.handler {
            inner.destroy(h);
            return;
        }
        h.memory = h.cgroup.as_ref().map_or(0, Cgroup::memory_bytes);
        h.idle_since = Instant::now();
        h.pause();
        let evicted = inner
            .handlers
            .lock()
            .put(h, inner.config.handler_cache_bytes);
        for old in evicted {
            inner.destroy(old);
        }
    }
}

impl ProcSandbox {
    /// Has the handler run `req`, its response going to `out` if it
    /// streams; `Ok(None)` when it streamed.
    async fn run(
        &mut self,
        req: &Request,
        host: &HostCtx,
        mut out: Option<&mut ResponseSink>,
    ) -> Result<Option<Response>, InvokeError> {
        let deadline = host.meta().deadline;
        let limit_ms = self.limits.timeout_ms;
        let max_response = self.max_response;
        let handler = self.handler.as_mut().expect("one invocation per sandbox");
        let cpu = host.meta().cpu.as_deref();
        if let Some(cpu) = cpu {
            handler.give_way(cpu.over_share());
        }
        let paths = crate::session::HostPath {
            dir: &self.engine.0.host_dir,
        };
        let exchange = converse(
            handler.conn(),
            req,
            host,
            (max_response, &paths),
            out.as_deref_mut(),
        );
        // Removing the function cuts its work after the response: the
        // handler, cut off mid-exchange, is not kept.
        let exchanged = tokio::select! {
            exchanged = tokio::time::timeout_at(deadline.into(), exchange) => exchanged,
            () = host.until_cut_short() => return Err(HostCtx::cut_short_error()),
        };
        // Its process's time, charged to its tenant (the process tier's
        // part of the CPU share).
        if let (Some(cpu), Some(handler)) = (cpu, self.handler.as_mut()) {
            cpu.charge(handler.cpu_since_charged());
        }
        match exchanged {
            // A handler left mid-stream (its caller gone, a limit) may still
            // be writing: it is not kept.
            Ok(Ok(Err(e))) if out.is_some_and(|o| o.started()) => Err(e),
            Ok(Ok(result)) => {
                self.healthy = true;
                result
            }
            Ok(Err(e)) => {
                // The process died or broke the protocol: find out which.
                let handler = self.handler.as_ref().expect("a handler ran the invocation");
                if handler.oom_killed() {
                    return Err(InvokeError::OutOfMemory {
                        limit_mib: self.limits.memory_mib,
                        last_output: Default::default(),
                    });
                }
                let alive = handler
                    .cgroup
                    .as_ref()
                    .is_none_or(|cg| !cg.pids().is_empty());
                host.log(LogStream::System, "error", &format!("sandbox failed: {e}"));
                if e.kind() == std::io::ErrorKind::InvalidData && alive {
                    Err(InvokeError::ResponseTooLarge {
                        limit_bytes: max_response,
                    })
                } else {
                    Err(InvokeError::Crashed(
                        "the function's process exited before answering".into(),
                    ))
                }
            }
            Err(_) => Err(InvokeError::Timeout { limit_ms }),
        }
    }
}

#[async_trait]
impl Sandbox for ProcSandbox {
    async fn invoke(&mut self, req: &Request, host: HostCtx) -> Result<Response, InvokeError> {
        let answered = self.run(req, &host, None).await?;
        answered.ok_or_else(|| InvokeError::Crashed("the handler streamed unasked".into()))
    }

    /// The request is read whole first (a Lambda event holds the body),
    /// within `max_body_bytes`; the response streams if the handler is a
    /// Lambda streaming one (`awslambda.streamifyResponse`), else it is
    /// answered whole.
    async fn invoke_streaming(
        &mut self,
        req: &Request,
        mut body: BodyStream,
        host: HostCtx,
        out: &mut ResponseSink,
    ) -> Result<(), InvokeError> {
        use futures::StreamExt;
        let mut whole = bytes::BytesMut::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            if whole.len() + chunk.len() > self.max_body {
                return Err(InvokeError::RequestTooLarge {
                    limit_bytes: self.max_body,
                });
            }
            whole.extend_from_slice(&chunk);
        }
        let req = Request {
            body: whole.freeze(),
            ..req.clone()
        };
        match self.run(&req, &host, Some(out)).await? {
            None => Ok(()),
            Some(response) => out.whole(response),
        }
    }
}
