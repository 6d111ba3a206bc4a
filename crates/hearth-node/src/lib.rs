//! The node: one Hearth process's invoker.
//!
//! ```text
//!  deploy(code) ─▶ engine.compile ─▶ artifacts.put ─▶ store.create_version
//!  invoke(fn)   ─▶ function table (latest version, in memory)
//!               ─▶ prepared cache (engine.prepare once per version, single-flight)
//!               ─▶ admission (concurrency permit) ─▶ instantiate ─▶ sandbox.invoke(req, HostCtx)
//!               ─▶ logs to the batched writer, metrics
//! ```
//!
//! A start is *cold* when the invocation had to prepare its version (load
//! or compile the module) and *warm* when the version was already prepared.
//! In the wasm tier every invocation still gets a fresh instance: warmth is
//! in the prepared module, not in a reused sandbox.
//!
//! What this crate is not: HTTP. The API crate maps its results to status
//! codes; the node speaks in [`NodeError`] and [`InvokeError`].

mod colocation;
mod disk;
mod logs;
mod long_runs;
pub use long_runs::start_threads_at_this_priority;
mod metrics;
mod node;
mod secrets;
mod share;
pub mod stats;
pub mod status;
mod table;
pub mod trace;

pub use colocation::{DefaultColocation, StoreColocation};
pub use disk::DiskConfig;
pub use logs::LogQuotas;
pub use metrics::Metrics;
pub use node::random_draw;
pub use node::{
    CodeHeld, CompiledMode, DeployOutcome, InvokeOutcome, JitConfig, Node, NodeConfig, NodeError,
    Ready, ReplayReport, StartKind, Streaming,
};
pub use secrets::{MAX_SECRET_BYTES, SecretBox};
pub use share::MemoryBudget;
pub use table::{Pin, Target};

/// The module the compiled js tier's modules import, and its name: the
/// wasm engine must link it (`hearth_wasm::WasmConfig::libraries`).
pub use hearth_jit::{RUNTIME as JIT_RUNTIME, RUNTIME_NAME as JIT_RUNTIME_NAME};
