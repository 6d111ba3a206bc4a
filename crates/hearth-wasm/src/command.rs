//! Hearth's WASI as a plain command: argv and environment given exactly,
//! stdin given whole, and stdout, stderr and the exit status handed back
//! raw, with no CGI on either side.
//!
//! An invocation never comes this way: its argv is the function's name and
//! its environment is CGI's. This is how programs written against WASI
//! preview 1 itself — the conformance programs of WebAssembly/wasi-testsuite
//! (`tests/wasi_testsuite.rs`) and the WASI fuzz target's interpreter
//! (`fuzz/fuzz_targets/wasi.rs`) — reach the same linker, guest-memory
//! layer, limiter and epoch deadline an invocation does.

use bytes::Bytes;
use hearth_host::{DeployError, HostCtx};
use wasmtime::Module;

use crate::WasmEngine;
use crate::bounds::{Bounds, new_store, why_failed};
use crate::library::Linked;
use crate::sandbox::{Ended, SandboxState, run_start};
use crate::wasi::{Output, Strings, WasiCtx};

/// A WASI command compiled and linked, ready to run any number of times,
/// each in a fresh instance.
pub struct WasiCommand {
    engine: WasmEngine,
    linked: Linked,
}

/// What one run is given.
#[derive(Debug, Clone, Default)]
pub struct CommandInput {
    /// `argv`, program name first.
    pub args: Vec<String>,
    /// The environment, exactly (`NAME`, `value`).
    pub env: Vec<(String, String)>,
    pub stdin: Bytes,
    /// Bytes kept of stdout and of stderr each; past it stdout stops the
    /// guest (as a response past its limit does) and stderr is cut.
    pub output_limit: usize,
    /// The guest's memory cap.
    pub memory_bytes: usize,
}

/// How a run ended and what it wrote.
#[derive(Debug)]
pub struct CommandOutcome {
    /// `Ok(status)`: `_start` returned (0) or the guest called
    /// `proc_exit(status)`. `Err`: it trapped, ran out of time or memory.
    pub status: Result<i32, hearth_core::InvokeError>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl WasmEngine {
    /// Compiles and links a WASI command (binary or text), checked as a
    /// deploy checks a module.
    pub fn command(&self, code: &[u8]) -> Result<WasiCommand, DeployError> {
        let binary = wat::parse_bytes(code).map_err(|e| DeployError::Invalid(e.to_string()))?;
        let module = Module::new(self.wasmtime(), &binary)
            .map_err(|e| DeployError::Invalid(format!("{e:#}")))?;
        Ok(WasiCommand {
            engine: self.clone(),
            linked: self.link(&module)?,
        })
    }
}

impl WasiCommand {
    /// Runs the command once in a fresh instance. Clocks and randomness
    /// come from `host`, as in an invocation, and its deadline bounds the
    /// run.
    pub async fn run(&self, input: &CommandInput, host: HostCtx) -> CommandOutcome {
        let mut args = Strings::default();
        for a in &input.args {
            args.push(&[a.as_bytes()]);
        }
        let mut env = Strings::default();
        for (name, value) in &input.env {
            env.push_var(name, value);
        }
        let mut bounds = Bounds::new(input.memory_bytes);
        let deadline = host.meta().deadline;
        bounds.deadline = Some(deadline);
        let limits = host.meta().version.spec.limits;
        let state = SandboxState {
            wasi: WasiCtx {
                args: args.into(),
                env_version: env.into(),
                stdin: input.stdin.clone(),
                stdout: Output::new(input.output_limit),
                stderr: Output::new(input.output_limit),
                ..WasiCtx::default()
            },
            host: Some(host),
            bounds,
        };
        let mut store = new_store(&self.engine, state);
        let status = match self.linked.instantiate(&mut store).await {
            Err(e) => Err(why_failed(&store.data().bounds, &limits, &e)),
            Ok(instance) => match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                Err(e) => Err(hearth_core::InvokeError::Crashed(e.to_string())),
                Ok(start) => {
                    match run_start(&mut store, start, deadline, &limits, input.output_limit).await
                    {
                        Ok(Ended::Returned) => Ok(0),
                        Ok(Ended::Exited(status)) => Ok(status),
                        Ok(Ended::Left(at)) => Err(hearth_core::InvokeError::left_compiled(at)),
                        Err(e) => Err(e),
                    }
                }
            },
        };
        let wasi = &mut store.data_mut().wasi;
        CommandOutcome {
            status,
            stdout: std::mem::take(&mut wasi.stdout.bytes),
            stderr: std::mem::take(&mut wasi.stderr.bytes),
        }
    }
}
