//! Hearth's js tier: JavaScript functions in in-process QuickJS isolates
//! (Containerless's fast path).
//!
//! * [`compile`]: a bundle's files to QuickJS bytecode, once per version,
//!   cached on disk; syntax errors refused at deploy with file:line:col.
//! * [`isolate`]: one isolate per warm function instance — the prelude's web
//!   APIs (`prelude.js`), the function's modules, an event loop for host
//!   calls and timers, memory/stack limits and a deadline interrupt.
//! * [`engine`]: the [`Engine`](hearth_host::Engine): compile, prepare,
//!   invoke.
//! * [`workers`]: the threads that own the isolates (JS never runs on the
//!   threads that serve HTTP), the per-worker cache of idle isolates, and
//!   how work is shared between them so that no tenant takes every thread.
//!
//! Whatever an isolate cannot do — Node.js built-ins, `process` beyond
//! `process.env`, `Buffer`, packages the bundle does not carry — ends the
//! attempt with [`InvokeError::Unsupported`](hearth_core::InvokeError); the
//! node re-runs the invocation in the process tier's Node.js sandbox and
//! replays the host calls the first attempt made (see `hearth-node`).

pub mod compile;
mod engine;
pub mod isolate;
mod workers;

pub use engine::{JsConfig, JsEngine};

/// The prelude as script bytecode, compiled once per process.
pub(crate) fn prelude_bytecode() -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| {
        let rt = rquickjs::Runtime::new().expect("a QuickJS runtime");
        let ctx = rquickjs::Context::full(&rt).expect("a QuickJS context");
        ctx.with(|ctx| compile::compile_script(&ctx, "hearth:prelude", &prelude_source()))
            .expect("the prelude compiles")
    })
}

/// The prelude with the shared shapes (hearth_host::SHAPES_JS) in place.
fn prelude_source() -> String {
    isolate::PRELUDE.replace("__HEARTH_SHAPES__", hearth_host::SHAPES_JS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_prelude_compiles() {
        let rt = rquickjs::Runtime::new().unwrap();
        let ctx = rquickjs::Context::full(&rt).unwrap();
        let src = std::env::var("PRELUDE_FILE")
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_else(|_| crate::prelude_source());
        ctx.with(|ctx| crate::compile::compile_script(&ctx, "prelude", &src))
            .unwrap();
    }
}
