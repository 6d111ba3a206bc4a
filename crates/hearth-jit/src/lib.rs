//! Hearth's compiled js tier (Containerless §3–§4): a JavaScript handler
//! that runs hot in the isolate is traced there, and the trace compiled to
//! a WebAssembly module the wasm tier runs.
//!
//! ```text
//!  source ──lower──▶ ir::Program ──instrument──▶ traced source (runs in the isolate,
//!                        │                        logs a Trace per invocation)
//!                        └──────────codegen(trace)──▶ wasm module (a WASI command)
//! ```
//!
//! * [`lower`]: the subset that compiles, refused with a reason otherwise.
//! * [`instrument`]: the traced variant, and the [`Trace`] it reports: per
//!   expression, the kinds of value seen (`unknown` where none was).
//! * [`codegen`]: the module, typed by the trace, leaving
//!   for the isolate wherever the trace has nothing to say.
//! * [`RUNTIME`]: what the module imports its memory, heap, numbers,
//!   strings, JSON and environment from (`crates/hearth-jit-runtime`, Rust built to wasm32 by
//!   this crate's build script); the wasm tier links it to every
//!   compiled module.
//!
//! The node decides when a function is hot, runs the traces, proves the
//! module against the function's tapes and serves it (`hearth-node`,
//! `docs/js-tier.md`).

mod codegen;
pub mod instrument;
pub mod ir;
pub mod lower;

pub use codegen::RUNTIME_NAME;
pub use hearth_jit_runtime::left;

/// The runtime module compiled modules import (as [`RUNTIME_NAME`]): a
/// core wasm module of its own, instantiated beside each compiled one.
pub const RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hearth_rt.wasm"));
pub use instrument::{TRACE_PREFIX, Trace};

/// Why a function is not compiled: a sentence for its status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Refused {
    pub fn new(why: String) -> Refused {
        Refused(why)
    }
}

/// A handler the compiler takes, ready to be traced and compiled.
#[derive(Debug)]
pub struct Plan {
    program: ir::Program,
    source: String,
}

impl Plan {
    /// Lowers `source` (the handler module's text), or says why not.
    pub fn new(source: &str) -> Result<Plan, Refused> {
        Ok(Plan {
            program: lower::lower(source)?,
            source: source.to_string(),
        })
    }

    /// The module with tracing calls in, to run in the isolate.
    pub fn traced_source(&self) -> String {
        instrument::instrument(&self.source, &self.program)
    }

    /// An empty trace for this program, to merge invocations' lines into.
    pub fn trace(&self) -> Trace {
        Trace::new(self.program.traced)
    }

    /// The wasm module for what `trace` saw.
    pub fn compile(&self, trace: &Trace) -> Result<Vec<u8>, Refused> {
        codegen::compile(&self.program, trace)
    }

    /// Where a compiled run left its trace, for the log: `line:col`
    /// in the source, or what a helper met.
    pub fn where_left(&self, at: u32) -> String {
        match at {
            left::MEMORY => "an allocation the memory limit refused".into(),
            left::NUMBER => "a number it cannot convert exactly".into(),
            left::STATUS => "a response status outside 200–599".into(),
            left::TEXT => "text that is not ASCII or too long".into(),
            left::HOST => "a host call that failed".into(),
            left::JSON => "JSON the compiled parser does not take".into(),
            0 => "a return of a kind the trace did not see".into(),
            at => {
                let (line, col) = line_col(&self.source, at);
                format!(
                    "code the trace never reached, or a value of a kind it never saw there, \
                     at {line}:{col}"
                )
            }
        }
    }
}

/// `(line, column)`, from 1, of byte `offset` in `source`.
fn line_col(source: &str, offset: u32) -> (usize, usize) {
    let before = &source[..(offset as usize).min(source.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}
