//! [`WasmEngine`]: compiling, caching and preparing modules.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hearth_core::{FunctionSpec, FunctionVersion, InvokeError, Tier};
use hearth_host::{Artifacts, Compiled, DeployError, Engine, Prepared, Sandbox, Source};
use wasmtime::{InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig};

use crate::component::{ComponentPrepared, ComponentState};
use crate::library::{Library, LibrarySource, Linked};
use crate::sandbox::{SandboxState, SandboxTemplate, WasmSandbox};

/// Core instances (and tables) one component may hold: its code, the
/// preview-1 adapter and the shims that join them, with room to spare.
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
/// Linear memories one component may define.
const MEMORIES_PER_COMPONENT: u32 = 2;

/// How the wasm tier is set up; fixed for the life of the process.
#[derive(Debug, Clone)]
pub struct WasmConfig {
    /// Pre-reserve sandbox slots (fast instantiation, bounded count) rather
    /// than allocate each instance on demand.
    pub pooling: bool,
    /// Sandboxes that can exist at once (pool size). Past it: 503.
    pub max_sandboxes: u32,
    /// The largest memory limit any function may ask for.
    pub max_memory_mib: u32,
    /// Scheduling quantum: how often a running sandbox yields.
    pub time_slice_ms: u64,
    /// Where compiled modules are cached, by content hash.
    pub cache_dir: PathBuf,
    /// Largest response body a function may write to stdout.
    pub max_response_bytes: usize,
    /// Core modules that modules may import whole, by name
    /// (`library.rs`): the compiled js tier's runtime.
    pub libraries: Vec<LibrarySource>,
}

impl WasmConfig {
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        WasmConfig {
            pooling: true,
            max_sandboxes: 1000,
            max_memory_mib: 512,
            time_slice_ms: 5,
            cache_dir: cache_dir.into(),
            max_response_bytes: 16 << 20,
            libraries: vec![],
        }
    }

    /// How long a sandbox runs before it yields to other work (at least
    /// a millisecond).
    pub fn time_slice(&self) -> Duration {
        Duration::from_millis(self.time_slice_ms.max(1))
    }
}

/// The wasm tier's engine: one per process; clones share it.
#[derive(Clone)]
pub struct WasmEngine(Arc<EngineInner>);

struct EngineInner {
    engine: wasmtime::Engine,
    linker: Arc<Linker<SandboxState>>,
    libraries: Vec<Arc<Library>>,
    component_linker: wasmtime::component::Linker<ComponentState>,
    config: WasmConfig,
    /// `cache_dir/<engine compatibility hash>`: a new wasmtime or new
    /// settings never load another's compiled code.
    cache_dir: PathBuf,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl WasmEngine {
    pub fn new(config: WasmConfig) -> anyhow::Result<Self> {
        let mut wt = wasmtime::Config::new();
        wt.epoch_interruption(true)
            .memory_init_cow(true)
            .max_wasm_stack(1 << 20)
            .async_stack_size(2 << 20)
            .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(16))
            // A module compiles on one thread, at low priority
            // (`compile_off_thread`): a storm of deploys takes one core at
            // most, and invocations come first on it.
            .parallel_compilation(false);
        if config.pooling {
            let mut pool = PoolingAllocationConfig::new();
            let n = config.max_sandboxes;
            // A sandbox is one module instance, or one component instance
            // made of a few core instances (its code, the preview-1
            // adapter, shims) sharing one main memory.
            pool.total_core_instances(CORE_INSTANCES_PER_COMPONENT * n)
                .total_memories(n)
                .total_tables(CORE_INSTANCES_PER_COMPONENT * n)
                .total_stacks(n)
                .total_component_instances(n)
                .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
                .max_memories_per_component(MEMORIES_PER_COMPONENT)
                .max_tables_per_component(CORE_INSTANCES_PER_COMPONENT)
                .max_memory_size((config.max_memory_mib as usize) << 20)
                // Keep a little of each slot's memory mapped after use: the
                // next instance in the slot then skips a page-fault storm
                // (and the TLB flushes of giving the pages back). 128 KiB:
                // compiled js keeps the runtime's stack and data (25 KiB)
                // below its heap, and at 64 KiB a function reading a 25 KiB
                // body faulted 4 pages per invocation more than before
                // (docs/js-tier.md, "The runtime").
                .linear_memory_keep_resident(128 << 10)
                .table_keep_resident(16 << 10)
                // Where the kernel offers PAGEMAP_SCAN (6.7+), reset only
                // the pages a guest wrote: a C function's stack, data and
                // heap reach past the resident 64 KiB, and without the scan
                // each invocation paid an madvise and refaults for them
                // (docs/wasm-tier.md, "Memory").
                .pagemap_scan(wasmtime::Enabled::Auto);
            wt.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = wasmtime::Engine::new(&wt)?;

        let mut linker = Linker::new(&engine);
        crate::wasi::add_to_linker(&mut linker)?;
        crate::imports::add_to_linker(&mut linker)?;
        let libraries = config
            .libraries
            .iter()
            .map(|l| Library::new(&engine, &linker, l).map(Arc::new))
            .collect::<wasmtime::Result<_>>()?;
        let component_linker = crate::component::linker(&engine)?;

        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let cache_dir = config
            .cache_dir
            .join(format!("wasm-{:016x}", hasher.finish()));
        std::fs::create_dir_all(cache_dir.join("tmp"))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_epoch_ticker(&engine, config.time_slice(), ticker_stop.clone());

        Ok(WasmEngine(Arc::new(EngineInner {
            engine,
            linker: Arc::new(linker),
            libraries,
            component_linker,
            config,
            cache_dir,
            ticker_stop,
        })))
    }

    pub fn config(&self) -> &WasmConfig {
        &self.0.config
    }

    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.0.engine
    }

    pub(crate) fn component_linker(&self) -> &wasmtime::component::Linker<ComponentState> {
        &self.0.component_linker
    }

    fn cached_path(&self, hash: &str) -> PathBuf {
        self.0.cache_dir.join(format!("{hash}.cwasm"))
    }

    /// Links a module and checks it is a WASI command Hearth can run.
    /// A module that imports a library is instantiated once, in a
    /// throwaway store, so that what would fail at invoke fails here.
    pub(crate) fn link(&self, module: &Module) -> Result<Linked, DeployError> {
        let start = module.get_export("_start");
        if !matches!(start, Some(wasmtime::ExternType::Func(ref f)) if f.params().len() == 0 && f.results().len() == 0)
        {
            return Err(DeployError::NotAFunction(
                "it exports no `_start` function: Hearth runs WASI preview 1 commands \
                 (for C, build with `clang --target=wasm32-wasi`)"
                    .into(),
            ));
        }
        if !matches!(
            module.get_export("memory"),
            Some(wasmtime::ExternType::Memory(_))
        ) {
            return Err(DeployError::NotAFunction(
                "it exports no memory named `memory`".into(),
            ));
        }
        let linked = Linked::new(module, &self.0.linker, &self.0.libraries)?;
        if let Linked::WithLibrary { .. } = linked {
            let mut store = crate::bounds::new_store(
                self,
                SandboxState {
                    wasi: crate::wasi::WasiCtx::default(),
                    host: None,
                    bounds: crate::bounds::Bounds::new(
                        (self.0.config.max_memory_mib as usize) << 20,
                    ),
                },
            );
            futures::executor::block_on(linked.instantiate(&mut store)).map_err(|e| {
                DeployError::NotAFunction(format!(
                    "{e:#}; Hearth provides the `wasi_snapshot_preview1` and `hearth` import modules"
                ))
            })?;
        }
        Ok(linked)
    }

    pub(crate) async fn compile_off_thread(
        &self,
        code: Vec<u8>,
    ) -> Result<(Module, Vec<u8>), DeployError> {
        let this = self.clone();
        let (done, answer) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .spawn(move || {
                // Nice 10 and the default slice: the scheduler gives this
                // thread about a tenth of a core's share against
                // invocations (nice 0, short slices). Named once lowered,
                // so a `hearth-compile` thread is always at 10.
                hearth_host::priority::set_own_level(hearth_host::priority::LOWER_BY, true);
                // SAFETY: the name is a NUL-terminated string of at most
                // 16 bytes.
                unsafe { libc::prctl(libc::PR_SET_NAME, c"hearth-compile".as_ptr()) };
                let _ = done.send(this.compile_blocking(code));
            })
            .map_err(|e| DeployError::Load(format!("could not start a compiler thread: {e}")))?;
        answer
            .await
            .map_err(|e| DeployError::Load(format!("compiler thread failed: {e}")))?
    }

    fn compile_blocking(&self, code: Vec<u8>) -> Result<(Module, Vec<u8>), DeployError> {
        let binary = to_binary(code)?;
        let module = Module::new(&self.0.engine, &binary)
            .map_err(|e| DeployError::Invalid(format!("{e:#}")))?;
        Ok((module, binary))
    }

    fn store_compiled(&self, hash: &str, compiled: &Loaded) -> Result<(), DeployError> {
        let bytes = match compiled {
            Loaded::Module(m) => m.serialize(),
            Loaded::Component(c) => c.serialize(),
        }
        .map_err(|e| DeployError::Load(e.to_string()))?;
        hearth_host::write_whole(
            &self.0.cache_dir.join("tmp"),
            &self.cached_path(hash),
            &seal(&bytes),
        )?;
        Ok(())
    }

    /// The version's compiled code: from the cache, or compiled again
    /// from its artifact (and cached).
    fn load_blocking(
        &self,
        version: &FunctionVersion,
        artifacts: &dyn Artifacts,
    ) -> Result<Loaded, DeployError> {
        let path = self.cached_path(&version.artifact);
        if path.is_file() {
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|sealed| {
                    let compiled = unseal(&sealed)?;
                    self.deserialize(compiled).map_err(|e| e.to_string())
                }) {
                Ok(loaded) => return Ok(loaded),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "discarding unusable compiled code; compiling again");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let binary = to_binary(artifacts.read(&version.artifact)?)?;
        let loaded = if crate::component::is_component(&binary) {
            Loaded::Component(crate::component::compile(self, &binary)?)
        } else {
            Loaded::Module(self.compile_blocking(binary)?.0)
        };
        self.store_compiled(&version.artifact, &loaded)?;
        Ok(loaded)
    }
}

/// What a cache file begins with: its format, then the BLAKE3 hash of
/// the compiled code after it.
const SEAL: &[u8; 8] = b"HRTHCW01";

/// Compiled code as a cache file holds it: [`SEAL`], its hash, the code.
fn seal(compiled: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SEAL.len() + 32 + compiled.len());
    out.extend_from_slice(SEAL);
    out.extend_from_slice(blake3::hash(compiled).as_bytes());
    out.extend_from_slice(compiled);
    out
}

/// The compiled code in a cache file, if the file is whole and unchanged
/// since [`seal`] wrote it: a flipped bit or a cut anywhere is refused
/// here, before wasmtime maps the code as executable.
fn unseal(file: &[u8]) -> Result<&[u8], String> {
    let rest = file
        .strip_prefix(SEAL.as_slice())
        .ok_or("not a sealed cache file (an older format, or damaged)")?;
    if rest.len() < 32 {
        return Err("cut short".into());
    }
    let (hash, compiled) = rest.split_at(32);
    if blake3::hash(compiled).as_bytes() != hash {
        return Err("its checksum does not match: the file was damaged".into());
    }
    Ok(compiled)
}

impl WasmEngine {
    /// Compiled code read back from a cache file that [`unseal`] checked.
    fn deserialize(&self, compiled: &[u8]) -> anyhow::Result<Loaded> {
        let engine = &self.0.engine;
        // Deserializing runs native code compiled ahead of time. These
        // bytes were written by `store_compiled` in this node's own data
        // directory (atomically, so never torn), in a directory keyed by
        // this engine's compatibility hash, and their checksum matched
        // just now; wasmtime also checks its header and version.
        Ok(match wasmtime::Engine::detect_precompiled(compiled) {
            // SAFETY: as above: our own compiled component, unchanged.
            Some(wasmtime::Precompiled::Component) => Loaded::Component(unsafe {
                wasmtime::component::Component::deserialize(engine, compiled)
            }?),
            // SAFETY: as above: our own compiled module, unchanged.
            _ => Loaded::Module(unsafe { Module::deserialize(engine, compiled) }?),
        })
    }
}

/// Compiled code of either kind.
enum Loaded {
    Module(Module),
    Component(wasmtime::component::Component),
}

/// Wasm binary as is; WAT text (a module or a component) assembled.
fn to_binary(code: Vec<u8>) -> Result<Vec<u8>, DeployError> {
    if code.starts_with(b"\0asm") {
        return Ok(code);
    }
    Ok(wat::parse_bytes(&code)
        .map_err(|e| {
            DeployError::Invalid(format!("not a Wasm binary, and not valid WAT text: {e}"))
        })?
        .into_owned())
}

/// How often the epoch ticks while some thread gives way (runs a long
/// slice): such a slice yields at every tick.
const FINE_TICK: Duration = Duration::from_micros(500);

/// Bumps the engine's epoch every time slice, or every [`FINE_TICK`]
/// while a thread [gives way](hearth_host::priority::any_gives_way). A
/// store yields only once its slice has passed (`bounds::new_store`), so
/// finer ticks shorten only long slices; they are not kept up on an idle
/// node, where a 1 ms ticker alone costs about 2% of a core here.
fn spawn_epoch_ticker(engine: &wasmtime::Engine, every: Duration, stop: Arc<AtomicBool>) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("hearth-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let tick = match hearth_host::priority::any_gives_way() {
                    true => every.min(FINE_TICK),
                    false => every,
                };
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .expect("spawning the epoch ticker thread");
}

#[async_trait]
impl Engine for WasmEngine {
    fn tier(&self) -> Tier {
        Tier::Wasm
    }

    fn pool_free(&self) -> Vec<(&'static str, u64)> {
        // wasmtime counts the pool's live instances itself; `None` when
        // the pooling allocator is off.
        let Some(pool) = self.0.engine.pooling_allocator_metrics() else {
            return Vec::new();
        };
        let slots = self.0.config.max_sandboxes as u64;
        vec![("wasm_slots", slots.saturating_sub(pool.core_instances()))]
    }

    fn status(&self) -> hearth_host::EngineStatus {
        let c = &self.0.config;
        hearth_host::EngineStatus {
            degraded: Vec::new(),
            details: serde_json::json!({
                "pooling": c.pooling,
                "max_sandboxes": c.max_sandboxes,
                "max_memory_mib": c.max_memory_mib,
                "time_slice_ms": c.time_slice_ms,
            }),
        }
    }

    async fn compile(&self, spec: &FunctionSpec, source: Source) -> Result<Compiled, DeployError> {
        let started = Instant::now();
        if let Some(h) = &spec.handler {
            return Err(DeployError::Invalid(format!(
                "handler {h} applies to Python, Node.js and JavaScript functions; a wasm module runs its _start"
            )));
        }
        // WAT text is assembled off the async threads, as compiling is.
        let binary = tokio::task::spawn_blocking(move || {
            let _lowered = hearth_host::priority::GivingWay::new();
            to_binary(source.code)
        })
        .await
        .map_err(|e| DeployError::Load(format!("compiler task failed: {e}")))??;
        if crate::component::is_component(&binary) {
            // Checked, compiled and (with an init step) snapshotted; cached
            // under the hash of the Wasm that is stored.
            let (binary, component) = crate::component::compile_for_deploy(self, binary).await?;
            let this = self.clone();
            let hash = hearth_host::content_hash(&binary);
            tokio::task::spawn_blocking(move || {
                let _lowered = hearth_host::priority::GivingWay::new();
                this.store_compiled(&hash, &Loaded::Component(component))
            })
            .await
            .map_err(|e| DeployError::Load(format!("compiler task failed: {e}")))??;
            return Ok(Compiled {
                artifact: binary,
                compile_ms: started.elapsed().as_millis() as u64,
                ..Compiled::default()
            });
        }
        let (module, binary) = self.compile_off_thread(binary).await?;
        // A module with an init step is stored initialized (see `snapshot`).
        let (module, binary) = match crate::snapshot::init_export(&module) {
            None => (module, binary),
            Some(init) => {
                let initialized = crate::snapshot::snapshot(self, &binary, init).await?;
                self.compile_off_thread(initialized).await?
            }
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            // Serializing a large module takes as long as compiling it:
            // it gives way to invocations as the compile does.
            let _lowered = hearth_host::priority::GivingWay::new();
            this.link(&module)?;
            let hash = hearth_host::content_hash(&binary);
            this.store_compiled(&hash, &Loaded::Module(module))?;
            Ok(Compiled {
                artifact: binary,
                compile_ms: started.elapsed().as_millis() as u64,
                ..Compiled::default()
            })
        })
        .await
        .map_err(|e| DeployError::Load(format!("compiler task failed: {e}")))?
    }

    async fn prepare(
        &self,
        version: &FunctionVersion,
        artifacts: &Arc<dyn Artifacts>,
    ) -> Result<Arc<dyn Prepared>, DeployError> {
        let this = self.clone();
        let version = version.clone();
        let artifacts = artifacts.clone();
        tokio::task::spawn_blocking(move || {
            Ok(match this.load_blocking(&version, artifacts.as_ref())? {
                Loaded::Module(module) => {
                    this.prepare_module(&version, &module)? as Arc<dyn Prepared>
                }
                Loaded::Component(component) => {
                    this.check_memory_limit(&version)?;
                    let pre = this.link_component(&component)?;
                    Arc::new(ComponentPrepared::new(&this, pre, &version))
                }
            })
        })
        .await
        .map_err(|e| DeployError::Load(format!("loader task failed: {e}")))?
    }
}

impl WasmEngine {
    /// [`Engine::prepare`] for a module, with the concrete type
    /// (benchmarks use it).
    pub async fn prepare_wasm(
        &self,
        version: &FunctionVersion,
        artifacts: &Arc<dyn Artifacts>,
    ) -> Result<Arc<WasmPrepared>, DeployError> {
        let this = self.clone();
        let version = version.clone();
        let artifacts = artifacts.clone();
        tokio::task::spawn_blocking(move || {
            match this.load_blocking(&version, artifacts.as_ref())? {
                Loaded::Module(module) => this.prepare_module(&version, &module),
                Loaded::Component(_) => Err(DeployError::NotAFunction(
                    "it is a component, not a module".into(),
                )),
            }
        })
        .await
        .map_err(|e| DeployError::Load(format!("loader task failed: {e}")))?
    }

    fn check_memory_limit(&self, version: &FunctionVersion) -> Result<(), DeployError> {
        let memory_mib = version.spec.limits.memory_mib;
        if memory_mib > self.0.config.max_memory_mib {
            return Err(DeployError::NotAFunction(format!(
                "its memory limit of {memory_mib} MiB is above this node's maximum of {} MiB",
                self.0.config.max_memory_mib
            )));
        }
        Ok(())
    }

    fn prepare_module(
        &self,
        version: &FunctionVersion,
        module: &Module,
    ) -> Result<Arc<WasmPrepared>, DeployError> {
        let pre = self.link(module)?;
        self.check_memory_limit(version)?;
        let start = module
            .get_export_index("_start")
            .ok_or_else(|| DeployError::NotAFunction("it exports no `_start` function".into()))?;
        let template = Arc::new(SandboxTemplate::new(
            version,
            start,
            self.0.config.max_response_bytes,
        ));
        Ok(Arc::new(WasmPrepared {
            engine: self.clone(),
            pre,
            template,
        }))
    }
}

/// A linked module, ready for fresh instances.
pub struct WasmPrepared {
    engine: WasmEngine,
    pre: Linked,
    template: Arc<SandboxTemplate>,
}

impl WasmPrepared {
    /// Instantiates without boxing (used by benchmarks).
    pub async fn instantiate_sandbox(&self) -> Result<WasmSandbox, InvokeError> {
        WasmSandbox::new(&self.engine, &self.pre, &self.template).await
    }
}

#[async_trait]
impl Prepared for WasmPrepared {
    async fn instantiate(&self) -> Result<Box<dyn Sandbox>, InvokeError> {
        Ok(Box::new(self.instantiate_sandbox().await?))
    }

    /// A module deployed with `stream` has its stdin and stdout stream
    /// (`docs/wasm-tier.md`, "Streaming bodies"). Not by default: that
    /// path cost a hello module 12% of its throughput (`bench/ab.sh`).
    fn streams(&self) -> bool {
        self.template.stream
    }
}

#[cfg(test)]
mod seal_tests {
    use super::*;

    #[test]
    fn only_a_whole_unchanged_sealed_file_unseals() {
        let code = b"compiled code, bytes of it".repeat(40);
        let sealed = seal(&code);
        assert_eq!(unseal(&sealed).unwrap(), &code[..]);
        for i in [0, 7, 8, 39, 40, sealed.len() / 2, sealed.len() - 1] {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x01;
            assert!(unseal(&flipped).is_err(), "a bit flipped at {i}");
        }
        assert!(unseal(&sealed[..sealed.len() - 1]).is_err(), "cut short");
        assert!(unseal(&sealed[..20]).is_err(), "cut in the hash");
        assert!(unseal(&code).is_err(), "unsealed (the older format)");
    }
}
