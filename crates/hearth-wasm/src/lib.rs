//! The wasm tier: WASI preview 1 commands on wasmtime, Sledge-style.
//!
//! ```text
//!  WasmEngine (one per process: wasmtime Engine, pooling allocator, epoch ticker)
//!     │ compile(code)   deploy: validate, run an init step and snapshot (snapshot.rs),
//!     │                 compile, cache `.cwasm` by content hash
//!     │ prepare(version) once per version: load `.cwasm`, link → InstancePre
//!     │                 (or, for a module that imports a library such as the
//!     │                 compiled js tier's runtime, the pair: `library.rs`)
//!     ▼
//!  WasmPrepared ──instantiate──▶ WasmSandbox (Store + Instance, one pool slot)
//!                                   │ invoke(req, host): stdin = body, env = CGI,
//!                                   │ run `_start`, stdout = response (WAGI)
//! ```
//!
//! Every invocation gets a fresh instance, so no state leaks between
//! invocations; copy-on-write memory images make that cheap. An engine-wide
//! ticker bumps wasmtime's epoch every `time_slice_ms`; each store yields to
//! the async executor at every tick (Sledge's preemptive round robin, done
//! cooperatively at loop headers and function entries) and traps once its
//! deadline has passed. Memory is capped per sandbox by a resource limiter
//! and, across the node, by the pool's slot count and slot size.
//!
//! WASI preview 1 is Hearth's own (`wasi.rs`): standard streams, args,
//! environment, clocks, randomness, sleep and exit, no files or sockets.
//! Clocks and randomness are served by [`HostCtx`](hearth_host::HostCtx),
//! like the `hearth` imports, so every answer is on the invocation's tape.
//! [`WasiCommand`] (`command.rs`) runs a plain WASI command through the
//! same linker and bounds, for the conformance programs and the fuzzer.

mod bounds;
mod cgi;
mod command;
mod component;
mod engine;
mod imports;
mod library;
mod sandbox;
mod snapshot;
mod wasi;

pub use cgi::parse_cgi_output;
pub use command::{CommandInput, CommandOutcome, WasiCommand};
pub use component::{ComponentPrepared, ComponentSandbox};
pub use engine::{WasmConfig, WasmEngine, WasmPrepared};
pub use library::LibrarySource;
pub use sandbox::WasmSandbox;
