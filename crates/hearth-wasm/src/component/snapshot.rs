//! Snapshots of initialized components (Hydra §4.2), as `snapshot.rs` does
//! for modules: a component that exports a `wizer-initialize` function
//! (`func()`) has it run once at deploy, and [`wasmtime_wizer`] writes the
//! instance's memories and globals back into a new component, which is
//! what is stored, compiled and instantiated per request.
//!
//! The same rules as for modules: the step runs under the node's largest
//! memory limit and [`INIT_TIMEOUT`]; it has no invocation, so outgoing
//! HTTP is denied, KV calls fail and `wasi:logging` is dropped; drawing
//! randomness refuses the deploy (a seed drawn once would be every
//! invocation's); clocks it reads are frozen into the snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hearth_host::DeployError;
use wasmtime::Store;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Instance, Lift, ResourceTable, WasmList};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

use super::host::{self, ComponentState, LogPipe, Outgoing};
use crate::WasmEngine;
use crate::bounds::{Bounds, new_store};
use crate::snapshot::{INIT_TIMEOUT, STDERR_QUOTE_BYTES, init_failed};

/// The component-level export that is the init step (Wizer's name).
const INIT: &str = "wizer-initialize";

/// Whether `component` exports an init step: a `func()` named [`INIT`].
pub(crate) fn has_init(engine: &wasmtime::Engine, component: &Component) -> bool {
    component
        .component_type()
        .exports(engine)
        .any(|(name, item)| {
            name == INIT
                && matches!(item.ty, ComponentItem::ComponentFunc(f)
                    if f.params().len() == 0 && f.results().len() == 0)
        })
}

/// Runs `binary`'s init step and returns the initialized component. In a
/// task of its own: Wizer asserts on what it rewrites, and a component
/// that trips one is a refused deploy, not a dropped connection.
pub(crate) async fn snapshot(engine: &WasmEngine, binary: Vec<u8>) -> Result<Vec<u8>, DeployError> {
    let engine = engine.clone();
    tokio::spawn(async move { run_and_snapshot(&engine, &binary).await })
        .await
        .unwrap_or_else(|e| {
            Err(DeployError::Invalid(format!(
                "the component exports an init step ({INIT}) but cannot be snapshotted: {e}"
            )))
        })
}

async fn run_and_snapshot(engine: &WasmEngine, binary: &[u8]) -> Result<Vec<u8>, DeployError> {
    let refused = |e: wasmtime::Error| {
        DeployError::Invalid(format!(
            "the component exports an init step ({INIT}) but cannot be snapshotted: {e:#}"
        ))
    };
    let mut wizer = Wizer::new();
    // The component lifts the init function from its core module: the
    // export must stay for the rewritten component to be valid.
    wizer.keep_init_func(true);
    let (cx, instrumented) = wizer.instrument_component(binary).map_err(refused)?;
    let compiling = engine.clone();
    let component = tokio::task::spawn_blocking(move || {
        Component::new(compiling.wasmtime(), &instrumented).map_err(refused)
    })
    .await
    .map_err(|e| DeployError::Load(format!("compiler task failed: {e}")))??;
    let pre = engine
        .component_linker()
        .instantiate_pre(&component)
        .map_err(refused)?;

    let stderr = LogPipe::new(STDERR_QUOTE_BYTES);
    let drew_randomness = Arc::new(AtomicBool::new(false));
    let max_memory_mib = engine.config().max_memory_mib;
    let mut store = new_store(
        engine,
        ComponentState {
            wasi: host::init_wasi_ctx(&stderr, &drew_randomness),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            table: ResourceTable::new(),
            config: Default::default(),
            outgoing: Outgoing { host: None },
            bounds: Bounds {
                deadline: Some(Instant::now() + INIT_TIMEOUT),
                ..Bounds::new((max_memory_mib as usize) << 20)
            },
        },
    );
    let failed = |store: &Store<ComponentState>, what: &str, e: wasmtime::Error| {
        let bounds = &store.data().bounds;
        init_failed(INIT, what, bounds, max_memory_mib, &e, &stderr.take())
    };
    let instance = match pre.instantiate_async(&mut store).await {
        Ok(i) => i,
        Err(e) => return Err(failed(&store, "could not be instantiated", e)),
    };
    let step = instance
        .get_typed_func::<(), ()>(&mut store, INIT)
        .map_err(refused)?;
    if let Err(e) = step.call_async(&mut store, ()).await {
        return Err(failed(&store, "failed", e));
    }
    if drew_randomness.load(Ordering::Relaxed) {
        return Err(DeployError::Invalid(format!(
            "the init step ({INIT}) drew randomness: it would be the same in every \
             invocation; draw it in the handler"
        )));
    }
    wizer
        .snapshot_component(&cx, &mut Initialized { store, instance })
        .await
        .map_err(refused)
}

/// The instance after its init step, as Wizer reads it: through the
/// accessor functions its instrumentation exported.
struct Initialized {
    store: Store<ComponentState>,
    instance: Instance,
}

impl Initialized {
    async fn call<R: Lift + Send + Sync + 'static, O>(
        &mut self,
        instance: &str,
        func: &str,
        use_ret: impl FnOnce(&Store<ComponentState>, R) -> O,
    ) -> O {
        // Wizer only asks for the accessors its instrumentation added, and
        // they only read memory and globals: neither lookups nor calls can
        // fail on a component it instrumented.
        let (_, iface) = self
            .instance
            .get_export(&mut self.store, None, instance)
            .expect("wizer asks for the instance it exported");
        let (_, index) = self
            .instance
            .get_export(&mut self.store, Some(&iface), func)
            .expect("wizer asks for functions it exported");
        let func = self
            .instance
            .get_typed_func::<(), (R,)>(&mut self.store, index)
            .expect("wizer's accessors have the types it gave them");
        let (ret,) = func
            .call_async(&mut self.store, ())
            .await
            .expect("wizer's accessors only read");
        use_ret(&self.store, ret)
    }
}

impl ComponentInstanceState for Initialized {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        self.call(instance, func, |store, list: WasmList<u8>| {
            contents(list.as_le_slice(store))
        })
        .await
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func, |_, r| r).await
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func, |_, r| r).await
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call(instance, func, |_, r: f32| r.to_bits()).await
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call(instance, func, |_, r: f64| r.to_bits()).await
    }
}
