//! Snapshots of initialized modules (Hydra §4.2, Wizer).
//!
//! A function may export an init step, `wizer-initialize` (Wizer's name;
//! the older `wizer.initialize` works too). At deploy Hearth instantiates
//! the module once, runs that step, and writes the instance's memory and
//! globals back into a new module as data segments and initial values
//! ([`wasmtime_wizer`]). That module is what is stored and compiled, so
//! every invocation starts from the initialized state, through the same
//! copy-on-write memory image as any other module: work the init step did
//! (parsing a table, building an index, warming an interpreter) is paid
//! once per deploy instead of once per invocation.
//!
//! What the init step may do: compute, allocate, write to stderr (shown in
//! the deploy error if it fails). What it may not: host calls (KV, HTTP,
//! logs) and randomness, which trap, because a snapshot is shared by every
//! invocation: a random seed drawn at init would be the same for all of
//! them, and a KV read would be frozen at deploy time. WASI clocks read at
//! init are frozen in the same way; the guest contract says not to.
//!
//! The init step runs under the node's largest memory limit and
//! [`INIT_TIMEOUT`]; a step that traps, runs out of either, or exits is a
//! deploy error with the reason.

use std::time::{Duration, Instant};

use hearth_host::DeployError;
use wasmtime::{Extern, Instance, Module, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::WasmEngine;
use crate::bounds::{Bounds, new_store};
use crate::sandbox::SandboxState;
use crate::wasi::{Output, WasiCtx};

/// How long an init step may run at deploy.
pub(crate) const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The export names of an init step, Wizer's current one first.
const INIT_EXPORTS: [&str; 2] = ["wizer-initialize", "wizer.initialize"];

/// Bytes of the init step's stderr quoted in a deploy error.
pub(crate) const STDERR_QUOTE_BYTES: usize = 4 << 10;

/// The deploy error for an init step (`init`) that `what` ("failed",
/// "could not be instantiated") with `e`: in the limit's terms if it hit
/// one, quoting its stderr. Modules and components alike.
pub(crate) fn init_failed(
    init: &str,
    what: &str,
    bounds: &Bounds,
    max_memory_mib: u32,
    e: &wasmtime::Error,
    stderr: &[u8],
) -> DeployError {
    let why = if bounds.timed_out {
        format!("it ran longer than {} s", INIT_TIMEOUT.as_secs())
    } else if bounds.limiter.refused() {
        format!("it needed more than {max_memory_mib} MiB of memory")
    } else {
        format!("{e:#}")
    };
    let err = String::from_utf8_lossy(stderr);
    let err = if err.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr: {}", err.trim_end())
    };
    DeployError::Invalid(format!("the init step ({init}) {what}: {why}{err}"))
}

/// The init step `module` exports, if any.
pub(crate) fn init_export(module: &Module) -> Option<&'static str> {
    INIT_EXPORTS.into_iter().find(|name| {
        matches!(module.get_export(name), Some(wasmtime::ExternType::Func(f))
            if f.params().len() == 0 && f.results().len() == 0)
    })
}

/// Runs `binary`'s init step `init` and returns the initialized module's
/// binary, without the init export.
pub(crate) async fn snapshot(
    engine: &WasmEngine,
    binary: &[u8],
    init: &str,
) -> Result<Vec<u8>, DeployError> {
    let mut wizer = Wizer::new();
    wizer.init_func(init).keep_init_func(false);
    let refused = |e: wasmtime::Error| {
        DeployError::Invalid(format!(
            "the module exports an init step ({init}) but cannot be snapshotted: {e:#}"
        ))
    };
    let (cx, instrumented) = wizer.instrument(binary).map_err(refused)?;
    // The instrumented module is still a WASI command, so the deploy's own
    // compile and link checks apply to it as they would to the original.
    let (module, _) = engine.compile_off_thread(instrumented).await?;
    let pre = engine.link(&module)?;

    let max_memory_mib = engine.config().max_memory_mib;
    let mut store = new_store(
        engine,
        SandboxState {
            wasi: WasiCtx {
                stderr: Output::new(STDERR_QUOTE_BYTES),
                ..WasiCtx::default()
            },
            host: None,
            bounds: Bounds {
                deadline: Some(Instant::now() + INIT_TIMEOUT),
                ..Bounds::new((max_memory_mib as usize) << 20)
            },
        },
    );

    let failed = |store: &Store<SandboxState>, what: &str, e: wasmtime::Error| {
        let state = store.data();
        init_failed(
            init,
            what,
            &state.bounds,
            max_memory_mib,
            &e,
            &state.wasi.stderr.bytes,
        )
    };
    let instance = match pre.instantiate(&mut store).await {
        Ok(i) => i,
        Err(e) => return Err(failed(&store, "could not be instantiated", e)),
    };
    let step = instance
        .get_typed_func::<(), ()>(&mut store, init)
        .map_err(refused)?;
    if let Err(e) = step.call_async(&mut store, ()).await {
        return Err(failed(&store, "failed", e));
    }
    wizer
        .snapshot(&cx, &mut Initialized { store, instance })
        .await
        .map_err(refused)
}

/// The instance after its init step, as Wizer reads it.
struct Initialized {
    store: Store<SandboxState>,
    instance: Instance,
}

impl InstanceState for Initialized {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        // Wizer only asks for the globals and memories its instrumentation
        // exported, so these lookups cannot miss.
        let global = self
            .instance
            .get_global(&mut self.store, name)
            .expect("wizer asks for globals it exported");
        match global.get(&mut self.store) {
            Val::I32(x) => SnapshotVal::I32(x),
            Val::I64(x) => SnapshotVal::I64(x),
            Val::F32(x) => SnapshotVal::F32(x),
            Val::F64(x) => SnapshotVal::F64(x),
            Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            // Wizer's instrumentation only exports numeric globals.
            other => unreachable!("wizer asked for a non-numeric global: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let Some(Extern::Memory(memory)) = self.instance.get_export(&mut self.store, name) else {
            unreachable!("wizer asks for memories it exported");
        };
        contents(memory.data(&self.store))
    }
}
