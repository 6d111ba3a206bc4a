//! Components of the `wasi:http/proxy` world: what `wasmtime serve`, Spin
//! and wasmCloud run, run here unchanged.
//!
//! ```text
//!  deploy   bytes ─▶ Component::new (validated, compiled, pool limits
//!                    checked) ─▶ world::link (exports incoming-handler,
//!                    imports only what Hearth provides) ─▶ `.cwasm` cache
//!  prepare  `.cwasm` ─▶ ProxyPre (linked once per version)
//!  invoke   fresh Store + instance from the pool ─▶ incoming-handler.handle
//!           request in, response out; clocks, randomness and outgoing
//!           HTTP through the invocation's HostCtx (so on its tape)
//! ```
//!
//! Like modules, every request gets a fresh instance from the pooling
//! allocator, bounded by the function's memory limit and preempted by the
//! engine's epoch ticker (`bounds.rs`). What the host holds for a
//! component beyond its linear memory — resources, header fields, body
//! chunks — is bounded in `host.rs`.

mod host;
mod keyvalue;
mod logging;
mod sandbox;
mod snapshot;
mod world;

use std::sync::Arc;

use hearth_core::FunctionVersion;
use hearth_host::DeployError;
use wasmtime::component::{Component, Linker};
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::p2::bindings::ProxyPre;

pub(crate) use host::ComponentState;
pub use sandbox::ComponentSandbox;

use crate::WasmEngine;

/// Whether `binary` (a Wasm binary) is a component rather than a module.
pub(crate) fn is_component(binary: &[u8]) -> bool {
    wasmparser::Parser::is_component(binary)
}

/// The linker every component is linked against.
pub(crate) fn linker(engine: &wasmtime::Engine) -> anyhow::Result<Linker<ComponentState>> {
    let mut linker = Linker::new(engine);
    world::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// Compiles a component and checks Hearth can run it.
pub(crate) fn compile(engine: &WasmEngine, binary: &[u8]) -> Result<Component, DeployError> {
    let component = Component::new(engine.wasmtime(), binary)
        .map_err(|e| DeployError::Invalid(format!("{e:#}")))?;
    engine.link_component(&component)?;
    Ok(component)
}

/// A deploy's component, checked and compiled: if it has an init step,
/// run once and snapshotted. The Wasm to store, and its compiled form.
pub(crate) async fn compile_for_deploy(
    engine: &WasmEngine,
    binary: Vec<u8>,
) -> Result<(Vec<u8>, Component), DeployError> {
    let compiled = compile_off_thread(engine, binary).await?;
    if !snapshot::has_init(engine.wasmtime(), &compiled.1) {
        return Ok(compiled);
    }
    let initialized = snapshot::snapshot(engine, compiled.0).await?;
    compile_off_thread(engine, initialized).await
}

async fn compile_off_thread(
    engine: &WasmEngine,
    binary: Vec<u8>,
) -> Result<(Vec<u8>, Component), DeployError> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || {
        let component = compile(&engine, &binary)?;
        Ok((binary, component))
    })
    .await
    .map_err(|e| DeployError::Load(format!("compiler task failed: {e}")))?
}

/// A linked component, ready for a fresh instance per request.
pub struct ComponentPrepared {
    engine: WasmEngine,
    pre: ProxyPre<ComponentState>,
    template: Arc<Template>,
}

/// What every instance of one version shares, built once at prepare.
pub(crate) struct Template {
    /// `argv[0]`: the function's name.
    pub name: String,
    /// `wasi:cli/environment`: the function's `--env`.
    pub env: Vec<(String, String)>,
    /// `wasi:config/store`: the function's `--env` too.
    pub config: Arc<WasiConfigVariables>,
    pub limits: hearth_core::Limits,
    pub max_response_bytes: usize,
}

impl ComponentPrepared {
    pub(crate) fn new(
        engine: &WasmEngine,
        pre: ProxyPre<ComponentState>,
        version: &FunctionVersion,
    ) -> Self {
        let env: Vec<(String, String)> = version
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let config = env
            .iter()
            .fold(WasiConfigVariables::new(), |mut c, (k, v)| {
                c.insert(k, v);
                c
            });
        ComponentPrepared {
            engine: engine.clone(),
            pre,
            template: Arc::new(Template {
                name: version.name.clone(),
                env,
                config: Arc::new(config),
                limits: version.spec.limits,
                max_response_bytes: engine.config().max_response_bytes,
            }),
        }
    }

    /// A sandbox for one request (its instance is made when it runs).
    pub fn sandbox(&self) -> ComponentSandbox {
        ComponentSandbox::new(&self.engine, &self.pre, &self.template)
    }
}

#[async_trait::async_trait]
impl hearth_host::Prepared for ComponentPrepared {
    async fn instantiate(&self) -> Result<Box<dyn hearth_host::Sandbox>, hearth_core::InvokeError> {
        Ok(Box::new(self.sandbox()))
    }

    /// A component reads its request body and writes its response as
    /// `wasi:http` streams, so both stream.
    fn streams(&self) -> bool {
        true
    }
}

impl WasmEngine {
    /// [`world::link`] with this engine's component linker.
    pub(crate) fn link_component(
        &self,
        component: &Component,
    ) -> Result<ProxyPre<ComponentState>, DeployError> {
        world::link(self.wasmtime(), self.component_linker(), component)
    }
}
